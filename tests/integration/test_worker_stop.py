"""``ragscore worker`` stops warmly on SIGTERM (docker stop, systemd, kubectl): running tasks finish, and it
returns only once its Celery workers and their pool processes are gone; a second SIGTERM kills at once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.runner import connect, submit
from orchestrator.suite import ResolvedSuite, load_suite
from ragscore_workers.app import app
from ragscore_workers.store import RunStore

from ..support import RedisProcess, WorkerProcess, until, write_jsonl

pytestmark = pytest.mark.integration

SLEEP_S = 4


def _suite() -> ResolvedSuite:
    return load_suite({"metrics": [{"name": "code_test", "params": {"stdout": "done", "timeout_s": 60}}],
                       "sandbox": {"backend": "local"}})  # fmt: skip


def _tree(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _task_running() -> bool:
    """A worker reports the code task as active (it runs the submitted program)."""
    active = app.control.inspect(timeout=1.0).active() or {}
    return any(tasks for tasks in active.values())


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Processes still there (a zombie counts: nobody reaped it)."""
    return [p for p in procs if p.is_running()]


def _start(tmp_path: Path, seconds: float) -> tuple[RedisProcess, WorkerProcess, RunStore, str]:
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "code", tmp_path / "home", concurrency=1).start()
    code = f"import time; time.sleep({seconds}); print('done')"
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "slow", "code": code}])
    store = connect(server.url)
    sub = submit(rows, _suite(), store)
    assert until(_task_running, 60), "the code task never started"
    return server, worker, store, sub.run_id


def test_sigterm_lets_the_running_task_finish_and_returns_when_every_worker_process_is_gone(tmp_path: Path) -> None:
    server, worker, store, run_id = _start(tmp_path, SLEEP_S)
    try:
        assert worker.proc is not None
        below = _tree(worker.proc.pid)  # Celery main, its pool process, the slot helper, the program
        started = time.monotonic()
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=120) == 0
        took = time.monotonic() - started
        # Still there when the supervisor returned: under the old stop, everything (it exited at once).
        assert not _alive(below), f"left running after ragscore worker returned: {_alive(below)}"
        assert store.progress(run_id).get("done") == 1, "the running task was killed instead of finishing"
        assert took >= 1.0, "returned before the running task could have finished"
    finally:
        worker.stop()
        server.stop()


def test_a_second_sigterm_kills_at_once(tmp_path: Path) -> None:
    server, worker, store, run_id = _start(tmp_path, 600)
    try:
        assert worker.proc is not None
        below = _tree(worker.proc.pid)
        worker.proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)  # warm stop under way: the 600 s task would hold it up to --stop-timeout
        assert worker.proc.poll() is None, "a warm stop does not end a running task"
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=30) == 0
        assert until(lambda: not _alive(below), 10), f"left running: {_alive(below)}"
        assert not store.progress(run_id).get("done"), "the task cannot have finished"
    finally:
        worker.stop()
        server.stop()
