"""Names the package split moved (runner -> connection, queues): each lives in one module, and the packages'
public names load on first use yet read as plain attributes."""

from __future__ import annotations

import importlib

import pytest

#: The intervals and timeouts the tests shorten with monkeypatch, each where the code reads it.
_MOVED = {"orchestrator.connection": ("CONNECT_RETRY_S", "STORE_READ_TIMEOUT_S", "BROKER_CHECK_S"),
          "orchestrator.queues": ("QUEUED_CHECK_S",)}  # fmt: skip


@pytest.mark.parametrize("holder", ["orchestrator.runner", "orchestrator.cli", "orchestrator.estimate"])
def test_no_module_keeps_a_copy_of_a_moved_interval(holder: str) -> None:
    """``from .queues import QUEUED_CHECK_S`` in the runner made a copy: a test that patched ``queues`` (where status
    reads it) left wait() on the runner's, one that patched ``runner`` left status on the queues'; each passed. With
    no copy, a patch of the wrong module fails (monkeypatch.setattr of a missing name)."""
    module = importlib.import_module(holder)
    for home, names in _MOVED.items():
        assert all(hasattr(importlib.import_module(home), name) for name in names)
        assert [name for name in names if hasattr(module, name)] == [], f"{holder} keeps a copy of {home}'s"
