"""Module constants that tune a function's default are read when it is called, not bound at import: a test (or a
caller) that sets the module's constant changes what the function does."""

from __future__ import annotations

import pytest

from ragscore_workers.store import RunStore, redis_client


def test_broker_tried_once_reads_store_read_timeout_s_when_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """It bound STORE_READ_TIMEOUT_S as its default at import: setting it (as the fault tests do) changed nothing."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.5)
    url = "redis://127.0.0.1:1/0"  # never connected: the clients connect at their first command
    store = RunStore(redis_client(url, 1.0), 60)
    for given, timeout in ((None, 2.5), (4.0, 4.0)):
        tried = connection.broker_tried_once(store, url, given)
        assert tried.broker.connection_pool.connection_kwargs["socket_timeout"] == timeout
