"""Local worker processes that die are restarted, and the person running ragscore is told how they ended."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest

import orchestrator.workers as workers_module
from orchestrator.workers import MAX_RESTARTS, LocalWorkers, exit_reason, oom_kills
from ragscore_workers.errors import BrokerError

from ..support import RedisProcess

pytestmark = pytest.mark.integration


def _kill(workers: LocalWorkers, queue: str) -> int:
    proc = workers.procs[queue]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    return proc.pid


def _cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, oom_kill: int) -> Path:
    """A cgroup v2 of the test's own whose ``memory.events`` counts ``oom_kill`` OOM kills (the kernel's files)."""
    (tmp_path / "proc-cgroup").write_text("0::/ragscore.slice\n")
    events = tmp_path / "cgroup" / "ragscore.slice" / "memory.events"
    events.parent.mkdir(parents=True)
    events.write_text(f"low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n")
    monkeypatch.setattr(workers_module, "PROC_CGROUP", tmp_path / "proc-cgroup")
    monkeypatch.setattr(workers_module, "CGROUP_ROOT", tmp_path / "cgroup")
    return events


def test_a_killed_worker_is_restarted_with_a_warning_until_it_keeps_dying(
    tmp_path: Path, redis_server: RedisProcess, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warning says out of memory only when the kernel's OOM killer killed a process of the workers' cgroup
    since the worker started: a worker killed by hand read "killed by SIGKILL (out of memory?)"."""
    events = _cgroup(tmp_path, monkeypatch, oom_kill=2)
    workers = LocalWorkers(redis_server.url, ["cpu"], tmp_path / "logs")
    with workers, caplog.at_level(logging.WARNING, logger="orchestrator.workers"):
        killed = _kill(workers, "cpu")
        assert workers.restart_dead() == ["cpu"] and workers.procs["cpu"].pid != killed
        assert workers.procs["cpu"].poll() is None
        warning = caplog.records[-1].getMessage()
        assert warning.startswith(
            "the cpu worker was killed by SIGKILL (by hand or another program, not the kernel's OOM killer); "
            "restarted it (1 of 5"
        ), warning
        assert str(workers.logs["cpu"]) in warning
        events.write_text(events.read_text().replace("oom_kill 2", "oom_kill 3"))  # as the kernel counts one
        _kill(workers, "cpu")
        workers.restart_dead()
        warning = caplog.records[-1].getMessage()
        assert warning.startswith(
            "the cpu worker was killed by SIGKILL (out of memory: the kernel's OOM killer killed a process of its "
            "cgroup since it started); "
        ), warning
        monkeypatch.setattr(workers_module, "PROC_CGROUP", tmp_path / "none")  # no cgroups (macOS): not known
        _kill(workers, "cpu")
        workers.restart_dead()
        assert caplog.records[-1].getMessage().startswith("the cpu worker was killed by SIGKILL (out of memory, or by")
        for _ in range(MAX_RESTARTS - 3):
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
    assert exit_reason(-signal.SIGKILL) == "was killed by SIGKILL (out of memory, or by hand)"


def test_oom_kills_reads_the_count_of_cgroup_v1_or_v2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """v2's ``memory.events``; v1's ``memory.oom_control`` (a hybrid host lists a ``0::/`` with no memory.events);
    None for the root cgroup (no such file) or no cgroups at all."""
    _cgroup(tmp_path, monkeypatch, oom_kill=7)
    assert oom_kills() == 7
    v1 = tmp_path / "cgroup" / "memory" / "docker" / "abc" / "memory.oom_control"
    v1.parent.mkdir(parents=True)
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 4\n")
    (tmp_path / "proc-cgroup").write_text("5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n")
    assert oom_kills() == 4
    (tmp_path / "proc-cgroup").write_text("0::/\n")
    assert oom_kills() is None
    (tmp_path / "proc-cgroup").write_text("garbage\n4:memory:/docker/abc\n")  # a line not a cgroup's: skipped
    assert oom_kills() == 4
    v1.write_text("oom_kill many\n")  # a count not a number: unknown, never an error at a worker's start
    assert oom_kills() is None
    (tmp_path / "proc-cgroup").unlink()
    assert oom_kills() is None


def test_oom_kills_reads_this_hosts_own_cgroup_files() -> None:
    """The real ``/proc/self/cgroup`` and ``/sys/fs/cgroup`` (no test files): a count or None, never an error; on a
    Linux host whose memory cgroup has the file, the kernel's own count."""
    kills = oom_kills()
    assert kills is None or (isinstance(kills, int) and kills >= 0), kills
