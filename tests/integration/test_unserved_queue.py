"""A cluster run whose work waits on a queue no worker serves says so, with the command that fixes it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.runner import cancel, connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.app import app

from ..support import ROOT, RedisProcess, WorkerProcess, make_rows, write_jsonl

pytestmark = pytest.mark.integration


def test_wait_names_each_queue_no_worker_consumes_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        store = connect(server.url)
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=1.0) and time.monotonic() < deadline:
            pass
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(20, seed=2))
        sub = submit(data, load_suite({"metrics": ["exact_match", "answer_relevance"]}), store)
        with caplog.at_level(logging.WARNING, logger="orchestrator.runner"), pytest.raises(TimeoutError):
            wait(store, sub.run_id, timeout_s=12, consumer_check_s=2)
        warnings = [r.getMessage() for r in caplog.records if "no worker consumes it" in r.getMessage()]
        assert len(warnings) == 1, warnings  # once, though checked every 2 s
        assert "queue 'embed'" in warnings[0] and "`ragscore worker --queues embed`" in warnings[0]
        assert store.progress(sub.run_id)["done"] == 20  # the served cpu queue did its part
        # `ragscore status` (a run submitted with `ragscore submit` has no wait() to warn) says it too
        env = {**os.environ, "RAGSCORE_BROKER_URL": server.url}
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", sub.run_id], capture_output=True,
                               text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert (
            "warning:" in shown.stdout and "queue 'embed'" in shown.stdout and "no worker consumes it" in shown.stdout
        )
        cancel(store, sub.run_id)
    finally:
        worker.stop()
        server.stop()
