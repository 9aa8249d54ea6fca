"""Local worker processes that die are restarted, and the person running ragscore is told how they ended."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest

from orchestrator.workers import MAX_RESTARTS, LocalWorkers, exit_reason
from ragscore_workers.errors import BrokerError

from ..support import RedisProcess

pytestmark = pytest.mark.integration


def _kill(workers: LocalWorkers, queue: str) -> int:
    proc = workers.procs[queue]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    return proc.pid


def test_a_killed_worker_is_restarted_with_a_warning_until_it_keeps_dying(
    tmp_path: Path, redis_server: RedisProcess, caplog: pytest.LogCaptureFixture
) -> None:
    workers = LocalWorkers(redis_server.url, ["cpu"], tmp_path / "logs")
    with workers, caplog.at_level(logging.WARNING, logger="orchestrator.workers"):
        killed = _kill(workers, "cpu")
        assert workers.restart_dead() == ["cpu"] and workers.procs["cpu"].pid != killed
        assert workers.procs["cpu"].poll() is None
        warning = caplog.records[-1].getMessage()
        assert warning.startswith("the cpu worker was killed by SIGKILL (out of memory?); restarted it (1 of 5")
        assert str(workers.logs["cpu"]) in warning
        for _ in range(MAX_RESTARTS - 1):
            _kill(workers, "cpu")
            workers.restart_dead()
        _kill(workers, "cpu")
        with pytest.raises(BrokerError, match=r"The cpu worker died 5 times in 60 s \(last: it was killed by SIGKILL"):
            workers.restart_dead()
    assert workers.procs["cpu"].poll() is not None  # stopped on leaving


def test_exit_reasons_read_as_sentences() -> None:
    assert exit_reason(1) == "exited with code 1"
    assert exit_reason(-signal.SIGTERM) == "was killed by SIGTERM"
    assert exit_reason(-200) == "was killed by signal 200"
