"""Module constants that tune a function's default are read when it is called, not bound at import: a test (or a
caller) that sets the module's constant changes what the function does."""

from __future__ import annotations

import os
import time
from pathlib import Path

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


def test_prune_logs_reads_log_keep_s_when_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It bound LOG_KEEP_S (two weeks) at import: a log an hour old stayed whatever the constant was set to."""
    from orchestrator import workers

    log = tmp_path / "worker-cpu-101.log"
    log.write_text("x")
    an_hour_ago = time.time() - 3600
    os.utime(log, (an_hour_ago, an_hour_ago))
    monkeypatch.setattr(workers, "LOG_KEEP_S", 60.0)
    assert workers.prune_logs(tmp_path) == 1 and not log.exists()


def test_live_node_names_reads_node_ping_s_when_called(cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """It bound NODE_PING_S at import: set to a nanosecond, in which no worker answers, the ping still waited a second
    and heard the cluster's workers."""
    from orchestrator import workers
    from orchestrator.runner import connect

    from ..support import until

    connect(cluster)  # the app asks this broker's workers
    assert until(lambda: len(workers.live_node_names(1.0)) == 2, 120), "the cluster's two workers never answered"
    monkeypatch.setattr(workers, "NODE_PING_S", 1e-9)
    assert workers.live_node_names() == set()


def test_the_plain_progress_line_reads_plain_interval_s_when_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """PlainProgress bound PLAIN_INTERVAL_S as a class attribute at import: set to 0 (as the embed worker's progress
    test does, so that no short phase falls between two lines), a second update within 5 s still printed nothing."""
    import io

    from orchestrator import progress

    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    out = io.StringIO()
    view = progress.PlainProgress(out)
    view.start("r1")
    view.update({"done": 1, "total": 10})
    view.update({"done": 2, "total": 10})
    assert [line.split(": ", 1)[1].split(" ")[0] for line in out.getvalue().splitlines()] == ["1/10", "2/10"]
