"""Worker logs of the embedded mode are pruned when workers start, so a long-used home does not fill up."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import worker_echo
from orchestrator.worker_echo import Echo, tee
from orchestrator.workers import LOG_KEEP_S, LocalWorkers
from ragscore_workers.cgroups import cpu_limit

from ..support import until

ROOT = Path(__file__).resolve().parents[2]


def test_starting_workers_removes_their_logs_older_than_two_weeks_and_nothing_else(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    old, recent, other = logs / "worker-cpu-101.log", logs / "worker-judge-202.log", logs / "notes.txt"
    old_rotated = logs / "worker-cpu-101.log.1"  # ``ragscore worker``'s rotated file
    for path in (old, recent, other, old_rotated):
        path.write_text("x")
    long_ago = time.time() - LOG_KEEP_S - 3600
    for path in (old, other, old_rotated):
        os.utime(path, (long_ago, long_ago))
    LocalWorkers("redis://127.0.0.1:1/0", [], logs).start()  # no queue: nothing spawned
    assert sorted(p.name for p in logs.iterdir()) == ["notes.txt", "worker-judge-202.log"]


def test_a_ragscore_worker_log_is_rotated_at_its_size_cap_keeping_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At ``--loglevel info`` a worker logs every task: its file grew for as long as it ran (months on a cluster
    host) until the disk filled. Past LOG_MAX_BYTES it is renamed NAME.1 and started again, no line cut or lost
    from the newest ones, stderr still given every line."""
    monkeypatch.setattr(worker_echo, "LOG_MAX_BYTES", 2000)
    printer = "import sys\nfor i in range(300): print(f'line {i:03d} of a worker log at info level')"
    child = subprocess.Popen([sys.executable, "-c", printer], stdout=subprocess.PIPE)
    assert child.stdout is not None
    log, stderr = tmp_path / "worker-cpu-7.log", io.StringIO()
    echo = Echo(stderr)
    tee(child.stdout, log, echo, "[cpu] ")
    echo.close(timeout=60)
    assert child.wait(timeout=60) == 0
    rotated = log.with_name("worker-cpu-7.log.1")
    kept = rotated.read_text().splitlines() + log.read_text().splitlines()
    assert 0 < log.stat().st_size <= 2000 and 1000 < rotated.stat().st_size <= 2000
    assert (log.stat().st_mode & 0o777, rotated.stat().st_mode & 0o777) == (0o600, 0o600)
    last = [f"line {i:03d} of a worker log at info level" for i in range(300 - len(kept), 300)]
    assert kept == last  # the newest lines, whole and in order
    assert len(stderr.getvalue().splitlines()) == 300


class _StderrOnAFullDisk(io.StringIO):
    """A stderr redirected to a file whose disk is full (``full``): each write refused with ENOSPC, then taken once
    space is freed; ``refused`` counts the writes refused."""

    def __init__(self) -> None:
        super().__init__()
        self.full, self.refused = True, 0

    def write(self, text: str) -> int:
        if self.full:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(text)


@pytest.mark.parametrize("then", ["a-line", "close"])
def test_lines_a_failing_stderr_refused_are_counted_as_not_shown(then: str) -> None:
    """A line the echo's stream refused (closed, EPIPE, a full disk) was lost without a word: the "N lines not shown"
    note counted only those dropped from a full backlog. It counts them too, said before the next line of their
    worker the stream takes, or as the echo closes."""
    stderr = _StderrOnAFullDisk()
    echo = Echo(stderr)
    for i in range(3):
        echo.offer("[cpu] ", f"line {i}\n")
    echo.offer("[judge] ", "judge line\n")
    assert until(lambda: stderr.refused == 4, 10)
    stderr.full = False
    if then == "a-line":
        echo.offer("[cpu] ", "line 3\n")
    echo.close(timeout=10)
    shown = stderr.getvalue().splitlines()
    cpu = [line for line in shown if line.startswith("[cpu] ")]
    assert cpu[0].startswith("[cpu] 3 lines not shown here (stderr not read fast enough, or failing)"), shown
    assert cpu[1:] == (["[cpu] line 3"] if then == "a-line" else []), shown
    assert [line for line in shown if line.startswith("[judge] ")][0].startswith("[judge] 1 lines not shown"), shown


def test_worker_logs_are_the_owners_only_whatever_the_umask(tmp_path: Path) -> None:
    """They hold excerpts of item data and provider replies: under umask 022 they were 0644 in a 0755 folder."""
    logs = tmp_path / "logs"
    logs.mkdir(mode=0o755)
    before = os.umask(0)
    try:
        workers = LocalWorkers("redis://127.0.0.1:1/0", ["cpu"], logs)  # never reaches a broker: spawned, stopped
        workers.start()
        workers.stop()
    finally:
        os.umask(before)
    (log,) = logs.iterdir()
    assert (logs.stat().st_mode & 0o777, log.stat().st_mode & 0o777) == (0o700, 0o600)


def test_pools_and_the_sandboxs_cpu_limit_fall_back_to_the_core_count_without_affinity() -> None:
    """macOS has no os.sched_getaffinity: a cpu worker there, and a code worker's docker sandbox (its CPU-seconds
    ulimit), counted the cores with it and failed with AttributeError."""
    script = (
        "import os; del os.sched_getaffinity\n"
        "from orchestrator.workers import POOL_DEFAULTS\n"
        "from ragscore_workers.sandbox import Limits\n"
        "print(POOL_DEFAULTS['cpu'].concurrency, Limits(timeout_s=10, processes=1).cpu_s)\n"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert ran.returncode == 0, ran.stderr
    cores = min(os.cpu_count() or 1, cpu_limit() or os.cpu_count() or 1)  # a CPU quota of this host's (a CI pod's)
    assert ran.stdout.split() == [str(cores), "11"], ran.stdout
