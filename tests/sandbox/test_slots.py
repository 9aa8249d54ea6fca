"""Slot helpers, the small processes that start every local sandbox: environment, failures, lifetime."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.progress import QuietProgress
from orchestrator.runner import run
from orchestrator.suite import load_suite
from ragscore_workers.sandbox import ExecResult, Limits, LocalSandbox, SandboxError
from ragscore_workers.sandbox.slots import IDLE_SLOTS, HelperProcess

from ..support import ROOT, RedisProcess, WorkerProcess, until, write_jsonl
from .support import descendants, is_slot_helper, pids_running, slot_helpers, status_fields

FAST = Limits(timeout_s=5)
PYTHON = LocalSandbox().interpreter("python3")


def _gone(pid: int, timeout: float = 5.0) -> bool:
    """True once ``pid`` has exited (or is a zombie waiting for its parent)."""
    return until(lambda: status_fields(pid).get("State", "Z").startswith("Z"), timeout)


def _reaped(pid: int, timeout: float = 1.0) -> bool:
    """True once ``pid`` is gone from /proc: exited *and* reaped by its parent."""
    return until(lambda: not Path(f"/proc/{pid}").exists(), timeout)


def _run_through(helper: HelperProcess, argv: list[str]) -> tuple[int | None, str]:
    """Start ``argv`` through ``helper`` directly (no bwrap); its exit code and stdout."""
    read_r, read_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    try:
        proc = helper.spawn(argv, {}, [null, read_w, null])
    finally:
        os.close(read_w)
        os.close(null)
    try:
        code = proc.wait(10)
    finally:
        proc.close()
    out = b""
    while chunk := os.read(read_r, 4096):
        out += chunk
    os.close(read_r)
    return code, out.decode()


def test_a_helper_holds_none_of_the_workers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", "gsk-slot-helper-secret")
    sandbox = LocalSandbox()
    assert sandbox.run("print(1)", limits=FAST).ok
    helpers = slot_helpers(os.getpid())
    assert helpers
    for pid in helpers:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert b"gsk-slot-helper-secret" not in environ and b"GROQ_API_KEY" not in environ
        assert sorted(environ.rstrip(b"\0").split(b"\0")) == [b"LANG=C.UTF-8", b"PATH=/usr/bin:/bin"]


def test_the_helper_starts_programs_under_its_limits_and_reports_failures() -> None:
    rlimits = ((resource.RLIMIT_NOFILE, 20, 20), (resource.RLIMIT_CPU, 7, 8))
    helper = HelperProcess(PYTHON, None, rlimits)
    try:
        code = "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE), r.getrlimit(r.RLIMIT_CPU))"
        assert _run_through(helper, [PYTHON, "-I", "-S", "-c", code]) == (0, "(20, 20) (7, 8)\n")
        with pytest.raises(SandboxError, match="Could not start the sandbox: FileNotFoundError"):
            helper.spawn(["/no/such/bwrap"], {}, [0, 1, 2])
        assert _run_through(helper, ["/bin/true"]) == (0, "")  # it still serves
    finally:
        helper.stop()
    assert _gone(helper.proc.pid)


def test_a_helper_retires_after_its_cpu_budget_and_the_next_run_gets_a_new_one() -> None:
    helper = HelperProcess(PYTHON, None, ((resource.RLIMIT_CPU, 7, 8),), cpu_budget_s=0.0)
    assert _run_through(helper, ["/bin/true"]) == (0, "")
    assert _gone(helper.proc.pid)  # it retired after the run, between runs
    helper.stop()
    sandbox = LocalSandbox()
    assert sandbox.run("print(1)", limits=FAST).ok


def test_other_limits_restart_the_helper_and_the_program_sees_them() -> None:
    sandbox = LocalSandbox()
    code = "import resource as r\nprint(*r.getrlimit(r.RLIMIT_NOFILE))"
    assert sandbox.run(code, limits=Limits(timeout_s=5, open_files=40)).stdout == "40 40\n"
    assert sandbox.run(code, limits=Limits(timeout_s=5, open_files=30)).stdout == "30 30\n"
    assert sandbox.run(code, limits=Limits(timeout_s=5, open_files=40)).stdout == "40 40\n"


def test_an_idle_helper_that_died_is_replaced() -> None:
    sandbox = LocalSandbox()
    assert sandbox.run("print(1)", limits=FAST).ok
    before = slot_helpers(os.getpid())
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    result = sandbox.run("print(2)", limits=FAST)
    assert result.ok and result.stdout == "2\n"
    assert set(slot_helpers(os.getpid())).isdisjoint(before)


def test_a_helper_killed_mid_run_fails_that_run_and_leaves_nothing_behind() -> None:
    sandbox = LocalSandbox()
    assert sandbox.run("print(1)", limits=FAST).ok
    marker = f"6{time.monotonic_ns() % 10**6}.5"
    outcome: dict[str, object] = {}

    def long_run() -> None:
        try:
            outcome["result"] = sandbox.run(f"import subprocess\nsubprocess.run(['sleep', '{marker}'])", limits=FAST)
        except SandboxError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=long_run)
    thread.start()
    deadline = time.monotonic() + 60  # returns once it runs
    while not pids_running("sleep", marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pids_running("sleep", marker), "the sandboxed program never started"
    for pid in slot_helpers(os.getpid()):
        os.kill(pid, signal.SIGKILL)
    thread.join(15)
    assert not thread.is_alive()
    result = outcome.get("result")
    assert "slot helper exited" in str(outcome.get("error", "")) or (
        isinstance(result, ExecResult) and not result.ok
    ), outcome
    deadline = time.monotonic() + 30  # returns once it is gone
    while pids_running("sleep", marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_running("sleep", marker) == []
    assert sandbox.run("print(3)", limits=FAST).stdout == "3\n"


def test_a_program_cannot_see_or_signal_its_helper() -> None:
    sandbox = LocalSandbox()
    code = (
        "import os, signal\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
        "os.kill(-1, signal.SIGKILL)\n"
    )
    result = sandbox.run(code, limits=FAST)
    visible = json.loads(result.stdout.splitlines()[0])
    assert visible == [1, 2]  # the namespace's pid-1 and the program itself
    helpers = slot_helpers(os.getpid())
    assert helpers and all(status_fields(pid).get("State", "Z")[0] in "SR" for pid in helpers)
    assert sandbox.run("print(4)", limits=FAST).stdout == "4\n"


def test_concurrent_runs_keep_at_most_the_idle_slots() -> None:
    sandbox = LocalSandbox()
    results: list[ExecResult | None] = [None] * 6

    def one(i: int) -> None:
        results[i] = sandbox.run(f"import time, sys\ntime.sleep(0.3)\nprint({i}, sys.stdin.read())", stdin=f"in{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [r.stdout if r else None for r in results] == [f"{i} in{i}\n" for i in range(len(results))]
    limit = IDLE_SLOTS if os.geteuid() == 0 else 1
    assert 1 <= len(slot_helpers(os.getpid())) <= limit


def test_helpers_exit_with_their_worker_and_a_forked_worker_gets_its_own() -> None:
    script = (
        "import json, os\n"
        "from ragscore_workers.sandbox import LocalSandbox\n"
        "from tests.sandbox.support import slot_helpers\n"
        "sb = LocalSandbox()\n"
        "assert sb.run('print(1)').ok\n"
        "mine = slot_helpers(os.getpid())\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    ok = sb.run('print(2)').stdout == '2\\n'\n"
        "    os.write(w, json.dumps([ok, slot_helpers(os.getpid())]).encode())\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "child_ok, child_helpers = json.loads(os.read(r, 1000))\n"
        "assert sb.run('print(3)').ok\n"
        "print(json.dumps({'mine': mine, 'child_ok': child_ok, 'child_helpers': child_helpers}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert len(seen["mine"]) == 1 and seen["child_ok"] and len(seen["child_helpers"]) == 1
    assert seen["child_helpers"] != seen["mine"]
    for pid in seen["mine"]:  # stopped and reaped at exit
        assert not Path(f"/proc/{pid}").exists(), f"slot helper {pid} outlived its worker"
    for pid in seen["child_helpers"]:  # the child ended with os._exit: its helper exits by itself
        assert _gone(pid), f"slot helper {pid} outlived its worker"


def _helpers_below(root: int) -> list[int]:
    """Slot helpers anywhere in the process tree below ``root``."""
    return [pid for pid in descendants(root) if is_slot_helper(pid)]


def test_a_code_worker_that_stops_reaps_its_helpers(tmp_path: Path) -> None:
    """A Celery pool process ends without atexit: its helpers are stopped and reaped on worker_process_shutdown,
    not left as zombies to a PID 1 that may never reap them (as in a container without an init).

    ``ragscore worker`` returns from SIGTERM only after its Celery workers' warm shutdown, so by then they are
    gone (the second of margin is for /proc, not for the shutdown)."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "code", tmp_path / "home", concurrency=1).start()
    try:
        rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": f"c{i}", "code": f"print({i})"} for i in range(3)])
        suite = load_suite({"metrics": [{"name": "code_test", "params": {"stdout_regex": r"^\d+\s*$"}}],
                            "sandbox": {"backend": "local"}})  # fmt: skip
        summary = run(rows, suite, tmp_path / "out", broker=server.url, progress=QuietProgress())
        assert summary.metrics["code_test"].n == 3
        assert worker.proc is not None
        helpers = _helpers_below(worker.proc.pid)
        assert helpers, "the code worker started no slot helper"
    finally:
        worker.stop()
        server.stop()
    for pid in helpers:
        assert _reaped(pid), f"slot helper {pid} was left behind: {status_fields(pid)}"
