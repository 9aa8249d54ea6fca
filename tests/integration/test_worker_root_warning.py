"""Celery's warning to a worker run as root: left out for a worker of the code queue alone, run as root by design
(SECURITY.md: its sandboxes' per-run uids need it), still said for a worker of any other queue."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from orchestrator.workers import worker_command

from ..support import ROOT, RedisProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the warning is said to root alone"),
]

#: The start of Celery's warning (``celery.platforms.ROOT_DISCOURAGED``).
ROOT_WARNING = "You're running the worker with superuser privileges"


def _said_until_its_banner(queues: str, url: str, home: Path) -> str:
    """What a Celery worker of ``queues`` (and the control queue), started with the argv an embedded run and
    ``ragscore worker`` give it, says on stdout and stderr until its banner lists its queues (all it said where it
    exited first); then it is killed."""
    argv = worker_command(queues.split(",")[0], concurrency=1)
    argv[argv.index("-Q") + 1] = f"{queues},control"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env,
                            start_new_session=True)  # fmt: skip
    said = []
    try:
        while proc.stdout is not None and (line := proc.stdout.readline()):
            said.append(line)
            if "[queues]" in line:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return "".join(said)


@pytest.mark.parametrize(("queues", "warned"), [("code", False), ("cpu", True), ("code,cpu", True)])
def test_celerys_root_warning_is_left_out_for_the_code_worker_alone(tmp_path: Path, queues: str, warned: bool) -> None:
    """Seen failing before: every worker run as root said it, the code worker too, which SECURITY.md tells operators
    to run as root; a worker serving the code queue and another one needs no root for that other one."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        said = _said_until_its_banner(queues, server.url, tmp_path / "home")
    finally:
        server.stop()
    assert "[queues]" in said, said  # it started
    assert (ROOT_WARNING in said) == warned, said
