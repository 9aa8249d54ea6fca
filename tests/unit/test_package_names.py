"""Names the package split moved (runner -> connection, queues): each lives in one module, and the packages'
public names load on first use yet read as plain attributes."""

from __future__ import annotations

import importlib
import subprocess
import sys

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


@pytest.mark.parametrize(
    ("package", "name", "home"),
    [
        ("orchestrator", "evaluate", "orchestrator.api"),
        ("orchestrator.reports", "write_outputs", "orchestrator.reports.files"),
    ],
)
def test_a_lazy_public_name_is_listed_and_read_as_its_modules(package: str, name: str, home: str) -> None:
    """``dir()`` lists it (help(), a notebook's completion), it is the object of its module, and an unknown name
    is an AttributeError naming the package."""
    module = importlib.import_module(package)
    assert name in dir(module) and name in module.__all__
    assert getattr(module, name) is getattr(importlib.import_module(home), name)
    assert name in vars(module)  # kept once read: no second look-up
    with pytest.raises(AttributeError, match=rf"module '{package}' has no attribute 'nothing_such'"):
        module.nothing_such  # noqa: B018


def test_a_submodule_reads_as_an_attribute_after_a_bare_import() -> None:
    """Before the package's names loaded lazily its ``__init__`` imported the API, so ``import orchestrator`` then
    ``orchestrator.api.IncompleteRunWarning`` (docs/cli.md names the warnings so, for ``warnings.simplefilter``)
    worked; with lazy names it was an AttributeError until something imported ``orchestrator.api``. A fresh
    interpreter, so no other test's import hides it."""
    code = (
        "import sys, orchestrator\n"
        "assert 'orchestrator.api' not in sys.modules\n"
        "print(orchestrator.api.IncompleteRunWarning.__name__, orchestrator.reports.files.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "IncompleteRunWarning orchestrator.reports.files\n"
