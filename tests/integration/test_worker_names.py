"""``ragscore worker``'s node names: stable across restarts (Flower's and Prometheus' per-worker series go on), never
one a live worker has (two workers of one name mix up their control replies), ``--name`` as Celery's ``-n``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.runner import connect
from ragscore_workers.app import app

from ..support import ROOT, RedisProcess, lines_until, stop_worker_command, until

pytestmark = pytest.mark.integration


def _worker(url: str, home: Path, *args: str) -> subprocess.Popen[str]:
    """``ragscore worker -Q cpu -c 1 ARGS`` against ``url``, its stderr piped."""
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": url}
    return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "-c", "1", *args],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip


def _named(proc: subprocess.Popen[str]) -> str:
    """The names ``ragscore worker`` says it gave its workers (``...; named cpu-1@host; Ctrl-C ...``), read from its
    stderr past any line said before (a warning, a worker's log line echoed); all it said where it exited first."""
    assert proc.stderr is not None
    said = lines_until(proc.stderr, "; named ", 180)
    if said and "; named " in said[-1]:
        return " ".join(said[-1].split()).rpartition("; named ")[2].partition(";")[0]
    return "".join(said)


def _logging_to(proc: subprocess.Popen[str]) -> str:
    """The log files ``ragscore worker`` says its workers log to (``...; logging to PATH; named ...``), read from its
    stderr past any line said before; all it said where it exited first."""
    assert proc.stderr is not None
    said = " ".join(lines_until(proc.stderr, "; named ", 180)[-1].split())
    return said.partition("; logging to ")[2].partition("; named ")[0] or said


def _pinged(names: set[str]) -> bool:
    """Whether the workers answering a ping are exactly ``names``, each once."""
    replies = [name for reply in app.control.ping(timeout=1.0) or [] for name in reply]
    return sorted(replies) == sorted(names)


def test_worker_names_are_stable_across_restarts_unique_at_once_and_a_live_name_is_refused(tmp_path: Path) -> None:
    """Two started at once take cpu-1 and cpu-2 of this host; the one stopped and started again is cpu-1 again (the
    names were random at each start). ``--name`` of a live worker, and one naming several queues alike, exit 2."""
    host = socket.gethostname()
    first, second = f"cpu-1@{host}", f"cpu-2@{host}"
    server = RedisProcess(tmp_path / "redis").start()
    connect(server.url)  # the app asks this broker's workers
    home = tmp_path / "home"
    procs = [_worker(server.url, home) for _ in range(2)]
    try:
        said = [_named(proc) for proc in procs]
        assert sorted(said) == [first, second], said
        assert until(lambda: _pinged({first, second}), 120), "the two workers never both answered"
        holder = procs[said.index(first)]
        stop_worker_command(holder)
        assert until(lambda: _pinged({second}), 60)
        procs.append(_worker(server.url, home))
        again = _named(procs[-1])
        assert again == first, again  # its old name back, not a new one
        assert until(lambda: _pinged({first, second}), 120)

        env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": server.url}
        cli = [sys.executable, "-m", "orchestrator.cli", "worker"]
        taken = subprocess.run([*cli, "-Q", "cpu", "--name", "cpu-2@%h"], capture_output=True, text=True,
                               cwd=ROOT, env=env, timeout=120)  # fmt: skip
        assert taken.returncode == 2, taken.stderr
        # taken by the live worker; or, where its reply missed the 1 s ping (a busy host), by its claim on this host
        assert f"{second} is taken by a" in " ".join(taken.stderr.split()), taken.stderr
        alike = subprocess.run([*cli, "-Q", "cpu,judge", "-n", "w@%h"], capture_output=True, text=True, cwd=ROOT,
                               env=env, timeout=120)  # fmt: skip
        assert alike.returncode == 2 and "put {queue} in it" in " ".join(alike.stderr.split()), alike.stderr
    finally:
        try:
            for proc in procs:
                if proc.poll() is None:
                    stop_worker_command(proc)
        finally:
            server.stop()


def test_worker_name_given_is_celerys_n_with_its_host_expansions(tmp_path: Path) -> None:
    """``--name 'grader-{queue}@%n'`` names the cpu worker grader-cpu@HOST (%n: the host name's first label)."""
    short = socket.gethostname().partition(".")[0]
    server = RedisProcess(tmp_path / "redis").start()
    connect(server.url)
    proc = _worker(server.url, tmp_path / "home", "--name", "grader-{queue}@%n")
    try:
        said = _named(proc)
        assert said == f"grader-cpu@{short}", said
        assert until(lambda: _pinged({f"grader-cpu@{short}"}), 120)
    finally:
        try:
            stop_worker_command(proc)
        finally:
            server.stop()


def test_two_workers_of_one_queue_each_log_to_a_file_of_their_own_named_as_they_start(tmp_path: Path) -> None:
    """Every ``ragscore worker`` of a host logs under one RAGSCORE_HOME/logs (``~/.cache/ragscore`` unless set) and
    said only ``logs in DIR``: which ``worker-cpu-PID.log`` was whose was left to guess, and a pid alone repeats
    across the containers or pods that share a home (each worker their pid 1: one file, rotated by each in turn).
    Each worker's file is named by its queue, host and pid, and said as it starts."""
    server = RedisProcess(tmp_path / "redis").start()
    home = tmp_path / "home"
    procs = [_worker(server.url, home) for _ in range(2)]
    try:
        logs = [_logging_to(proc) for proc in procs]
        host = socket.gethostname()
        assert logs == [str(home / "logs" / f"worker-cpu-{host}-{proc.pid}.log") for proc in procs], logs
        assert until(lambda: all(Path(log).is_file() for log in logs), 60), sorted(os.listdir(home / "logs"))
    finally:
        try:
            for proc in procs:
                stop_worker_command(proc)
        finally:
            server.stop()


def test_worker_names_asked_of_a_broker_gone_since_its_check_warn_as_the_check_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker answers ``ragscore worker``'s start-up check, then stops before the ping for its live workers' names:
    a warning as the check's (the workers keep retrying), not kombu's OperationalError traceback."""
    from orchestrator.cli import _check_broker_for_workers, _live_workers
    from ragscore_workers.settings import get_settings

    server = RedisProcess(tmp_path / "redis").start()
    settings = get_settings()
    try:
        assert _check_broker_for_workers(server.url, ["cpu"], settings)
    finally:
        server.stop()
    assert _live_workers(server.url, settings) is None
    said = " ".join(capsys.readouterr().err.split())
    assert f"Warning: cannot reach the broker at {server.url} to ask its live workers' names" in said, said
    assert "keep retrying" in said, said
