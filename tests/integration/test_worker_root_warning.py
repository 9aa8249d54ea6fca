"""Celery's warning to a worker run as root: left out for a worker of the code queue alone, run as root by design
(SECURITY.md: its sandboxes' per-run uids need it), still said for a worker of any other queue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.workers import worker_command

from ..support import ROOT, RedisProcess, lines_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the warning is said to root alone"),
]

#: The start of Celery's warning (``celery.platforms.ROOT_DISCOURAGED``).
ROOT_WARNING = "You're running the worker with superuser privileges"


def _said_until_its_banner(argv: list[str], url: str, home: Path) -> str:
    """What a Celery worker started with ``argv`` says on stdout and stderr until its banner lists its queues (all
    it said where it exited first); then it is killed."""
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
                            start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        said = lines_until(proc.stdout, "[queues]", 180)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return "".join(said)


def _command_line(queues: str) -> list[str]:
    """The argv an embedded run and ``ragscore worker`` give a worker, serving ``queues`` and the control queue."""
    argv = worker_command(queues.split(",")[0], concurrency=1)
    argv[argv.index("-Q") + 1] = f"{queues},control"
    return argv


def _in_process(queues: str) -> list[str]:
    """A worker started in Python (``app.Worker``), its queues one comma string as Celery takes them there."""
    start = (f"from ragscore_workers.app import app; app.Worker(queues={queues + ',control'!r}, pool='solo', "
             "loglevel='WARNING').start()")  # fmt: skip
    return [sys.executable, "-c", start]


@pytest.mark.parametrize("started", [_command_line, _in_process])
@pytest.mark.parametrize(("queues", "warned"), [("code", False), ("cpu", True), ("code,cpu", True)])
def test_celerys_root_warning_is_left_out_for_the_code_worker_alone(
    tmp_path: Path, started: Callable[[str], list[str]], queues: str, warned: bool
) -> None:
    """Seen failing before: every worker run as root said it, the code worker too, which SECURITY.md tells operators
    to run as root; a worker serving the code queue and another one needs no root for that other one. Then a worker
    whose queues came as one comma string (``app.Worker(queues="code,control")``) still said it: read as its letters."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        said = _said_until_its_banner(started(queues), server.url, tmp_path / "home")
    finally:
        server.stop()
    assert "[queues]" in said, said  # it started
    assert (ROOT_WARNING in said) == warned, said
