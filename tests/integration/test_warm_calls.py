"""A notebook's evaluate() calls in one process reuse the embedded Redis and the local workers a call before left
(each call started them all again: ~6 s of a 20-row run), start fresh ones where those do not fit, and leave
nothing running once the process exits."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from ..fakes import FakeProvider
from ..support import ROOT, command_line, interruptible, next_line, until

#: Calls evaluate() as a notebook's cells would; after each, a JSON line: the call's item ids, its mean, the pids of
#: this process's celery workers by queue, and the embedded redis-server's pid.
CALLS = r"""
import json, os, sys, warnings
import psutil
from orchestrator import evaluate
from tests.support import command_line, make_rows

warnings.simplefilter("ignore")
HOME = os.environ["RAGSCORE_HOME"]
JUDGE = {"provider": "groq", "model": "fake-warm", "base_url": os.environ["FAKE_URL"], "rpm": None, "tpm": None}


def said(result):
    workers = {}
    for child in psutil.Process().children():  # each queue's worker (its pool's processes are its own children)
        line = command_line(child)
        if "celery" in line and "-Q" in line:
            workers.setdefault(line[line.index("-Q") + 1].split(",")[0], []).append(child.pid)
    pidfile = os.path.join(HOME, "redis", "redis.pid")  # none once the server stopped
    redis_pid = int(open(pidfile).read()) if os.path.exists(pidfile) else None
    ids = [item.id for item in result.items] if result is not None else []
    means = {k: m.mean for k, m in result.summary.metrics.items()} if result is not None else {}
    kept = [*([psutil.Process(redis_pid)] if redis_pid else []), *psutil.Process().children(recursive=True)]
    running = [[p.pid, p.create_time()] for p in kept]  # each process left running, told from a later one of its pid
    print(json.dumps({"ids": ids, "means": means, "workers": workers, "redis": redis_pid, "running": running}),
          flush=True)


class CtrlC:
    def start(self, run_id):
        raise KeyboardInterrupt

    def update(self, counters, final=False):
        pass

    def stop(self):
        pass


class ShutdownMeanwhile(CtrlC):  # calls shutdown() from another thread once the run started
    thread = None

    def start(self, run_id):
        import threading

        from orchestrator import shutdown

        self.thread = threading.Thread(target=shutdown)
        self.thread.start()


for step in sys.argv[1:]:
    if step == "cpu":
        said(evaluate(make_rows(8, seed=1), {"metrics": ["exact_match"]}, quiet=True))
    elif step == "cpu-other-rows":
        rows = [{**row, "id": "b" + row["id"]} for row in make_rows(5, seed=2)]
        said(evaluate(rows, {"metrics": ["exact_match"]}, quiet=True))
    elif step == "refused":  # a dataset refused before its rows were sent: the workers never saw it
        try:
            evaluate([*make_rows(2), make_rows(1)[0]], {"metrics": ["exact_match"]}, quiet=True)
        except Exception as exc:
            print(json.dumps({"refused": type(exc).__name__}), flush=True)
    elif step == "judge":
        said(evaluate(make_rows(3), {"metrics": ["exact_match", "answer_accuracy"], "judge": JUDGE}, quiet=True))
    elif step.startswith("plugin="):  # a notebook's own metric, (re)written to score this and reloaded
        import importlib

        folder = os.path.join(HOME, "plugins")
        if folder not in sys.path:  # set once, before the first call: the environment stays the same
            os.makedirs(folder)
            sys.path.insert(0, folder)
            os.environ["PYTHONPATH"] = folder + os.pathsep + os.environ["PYTHONPATH"]
            os.environ["RAGSCORE_PLUGINS"] = "warm_plugin"
        with open(os.path.join(folder, "warm_plugin.py"), "w") as f:
            f.write("from ragscore_workers.metrics.registry import NoParams, register\n"
                    "from ragscore_workers.schemas import MetricResult, Queue\n"
                    "@register('warm_plugin', Queue.CPU)\n"
                    f"def warm_plugin(row, params: NoParams):\n    return MetricResult(score={step[7:]})\n")
        importlib.invalidate_caches()
        if "warm_plugin" in sys.modules:
            importlib.reload(sys.modules["warm_plugin"])
        said(evaluate(make_rows(3), {"metrics": ["warm_plugin"]}, quiet=True))
    elif step == "rm-home":  # a temporary RAGSCORE_HOME removed between two calls
        import shutil

        shutil.rmtree(HOME)
    elif step == "new-key":
        os.environ["GROQ_API_KEY"] = os.environ["GROQ_API_KEY"] + "-rotated"
    elif step == "fork":  # a child (a DataLoader's, a multiprocessing pool's) exits: atexit runs in it
        child = os.fork()
        if child == 0:
            sys.exit(0)
        os.waitpid(child, 0)
    elif step == "shutdown":
        from orchestrator import shutdown

        shutdown()
        said(None)
    elif step == "shutdown-meanwhile":
        meanwhile = ShutdownMeanwhile()
        said(evaluate(make_rows(8, seed=3), {"metrics": ["exact_match"]}, progress=meanwhile))
        meanwhile.thread.join(timeout=300)
        said(None)
    elif step == "interrupted":
        try:
            evaluate(make_rows(200), {"metrics": ["exact_match"]}, progress=CtrlC())
        except KeyboardInterrupt:
            print(json.dumps({"interrupted": True}), flush=True)
"""

SECRET = "gsk-TEST-WARM-SECRET-1a2b3c"


def _calls(home: Path, *steps: str) -> list[dict[str, Any]]:
    """The lines of CALLS run with ``steps`` in a Python process of its own (its stderr must not hold the key)."""
    with FakeProvider(api_key=SECRET) as fake:
        env = {**os.environ, "RAGSCORE_HOME": str(home), "FAKE_URL": fake.url, "GROQ_API_KEY": SECRET,
               "PYTHONPATH": str(ROOT)}  # fmt: skip
        env.pop("RAGSCORE_BROKER_URL", None)
        proc = subprocess.Popen([sys.executable, "-c", CALLS, *steps], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert SECRET not in err
    return [json.loads(line) for line in out.splitlines()]


def _still_running(processes: list[list[float]]) -> list[int]:
    """The pids of ``processes`` (pid, start time) that still run (a zombie is gone)."""
    left = []
    for pid, started in processes:
        try:
            proc = psutil.Process(int(pid))
            if proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE:
                left.append(int(pid))
        except psutil.NoSuchProcess:
            continue
    return left


def test_a_second_call_reuses_the_redis_and_the_workers_and_reports_only_its_own_items(home: Path) -> None:
    (first, refused, second) = _calls(home, "cpu", "refused", "cpu-other-rows")
    assert refused == {"refused": "DatasetError"}
    assert first["workers"] and second["workers"] == first["workers"]  # a worker kept running, and reused
    assert first["redis"] is not None and second["redis"] == first["redis"]
    assert second["ids"] == [f"bq{i}" for i in range(5)]  # call 2's items alone, all scored
    assert first["ids"] == [f"q{i}" for i in range(8)]
    assert second["means"]["exact_match"] is not None


def test_nothing_the_calls_kept_runs_once_the_process_exits(home: Path) -> None:
    (first, second) = _calls(home, "cpu", "cpu")
    assert second["running"] == first["running"] and len(first["running"]) >= 3  # server, worker, its pool
    assert _still_running(first["running"]) == []
    assert not (home / "redis" / "redis.sock").exists()


def test_a_call_needing_another_queue_adds_its_worker_and_a_new_judge_key_restarts_them(home: Path) -> None:
    (cpu, judge, rotated) = _calls(home, "cpu", "judge", "new-key", "judge")
    assert judge["workers"]["cpu"] == cpu["workers"]["cpu"] and "judge" in judge["workers"]
    assert judge["means"]["answer_accuracy"] is not None
    assert rotated["workers"]["cpu"] != judge["workers"]["cpu"]  # the key is baked in at a worker's start
    assert rotated["workers"]["judge"] != judge["workers"]["judge"]
    assert rotated["redis"] == cpu["redis"]
    assert not [log for log in (home / "logs").iterdir() if SECRET in log.read_text(errors="replace")]


def test_a_call_after_its_plugin_was_edited_scores_with_the_edit(home: Path) -> None:
    """The kept workers had imported the plug-in once: a notebook's metric, fixed and reloaded, still scored as
    before its fix, without a word."""
    (first, edited) = _calls(home, "plugin=0.5", "plugin=0.25")
    assert first["means"] == {"warm_plugin": 0.5}
    assert edited["means"] == {"warm_plugin": 0.25}
    assert edited["workers"]["cpu"] != first["workers"]["cpu"]


def test_a_call_interrupted_between_two_leaves_the_next_one_right(home: Path) -> None:
    (before, interrupted, after) = _calls(home, "cpu", "interrupted", "cpu-other-rows")
    assert interrupted == {"interrupted": True}
    assert after["workers"]["cpu"] != before["workers"]["cpu"]  # the interrupted run's workers were not kept
    assert after["ids"] == [f"bq{i}" for i in range(5)] and after["means"]["exact_match"] is not None


def test_a_forked_child_stops_nothing_and_shutdown_stops_everything(home: Path) -> None:
    (first, after_fork, stopped) = _calls(home, "cpu", "fork", "cpu", "shutdown")
    assert after_fork["workers"] == first["workers"] and after_fork["redis"] == first["redis"]
    assert stopped["workers"] == {} and stopped["redis"] is None  # the server stopped: no other run used it
    assert _still_running(first["running"]) == []


def test_a_home_removed_after_the_last_call_is_not_made_again_at_exit(home: Path) -> None:
    """A temporary RAGSCORE_HOME (a session fixture's) removed once the calls were done: the exit gave the kept
    server's registration back under its start lock, which made home/redis/start.lock again, left in /tmp."""
    (first,) = _calls(home, "cpu", "rm-home")
    assert not home.exists()
    assert _still_running(first["running"]) == []
    home.mkdir()  # the fixture's to remove


def test_shutdown_from_another_thread_waits_for_the_call_in_flight(home: Path) -> None:
    """It stopped the workers under the run, which restarted them and kept them again as it ended: running on once
    shutdown() had returned."""
    (first, during, stopped) = _calls(home, "cpu", "shutdown-meanwhile")
    assert during["ids"] == [f"q{i}" for i in range(8)] and during["means"]["exact_match"] is not None
    assert stopped["workers"] == {} and stopped["redis"] is None
    assert _still_running(first["running"]) == [] and _still_running(during["running"]) == []


def test_a_call_after_its_home_was_removed_starts_afresh_and_leaves_nothing_running(home: Path) -> None:
    """A temporary RAGSCORE_HOME removed between two calls: the second started a server on the same socket, which the
    lost one's exit then removed (the run failed: Redis did not answer)."""
    (first, second) = _calls(home, "cpu", "rm-home", "cpu")
    assert second["redis"] != first["redis"] and second["ids"] == [f"q{i}" for i in range(8)]
    assert _still_running(first["running"]) == [] and _still_running(second["running"]) == []


#: A user's test file: each test calls evaluate() and writes the pids of this process's celery workers to PIDS.
USERS_TESTS = r"""
import json, os
import psutil
from orchestrator import evaluate
from tests.support import command_line, make_rows


def _scored_and_noted():
    result = evaluate(make_rows(4), {"metrics": ["exact_match"]}, quiet=True)
    assert result.summary.metrics["exact_match"].mean is not None
    pids = sorted(c.pid for c in psutil.Process().children() if "celery" in " ".join(command_line(c)))
    with open(os.environ["PIDS"], "a") as f:
        f.write(json.dumps(pids) + "\n")


def test_one():
    _scored_and_noted()


def test_two():
    _scored_and_noted()
"""


def test_the_tests_of_a_users_pytest_session_reuse_the_workers(home: Path, tmp_path: Path) -> None:
    """pytest names the test in progress in PYTEST_CURRENT_TEST, another value for each test: every test's
    evaluate() stopped the workers the one before kept and started new ones (~6 s a test)."""
    (tmp_path / "test_users.py").write_text(USERS_TESTS)
    pids = tmp_path / "pids.jsonl"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "PIDS": str(pids), "PYTHONPATH": str(ROOT)}
    env.pop("RAGSCORE_BROKER_URL", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_users.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, second = (json.loads(line) for line in pids.read_text().splitlines())
    assert first and second == first


#: A call whose workers are kept, then one that waits (a run under way) until a Ctrl-C; it says "running" then.
HELD_UP = r"""
import time
from orchestrator import evaluate
from tests.support import HookedProgress, make_rows

evaluate(make_rows(4), {"metrics": ["exact_match"]}, quiet=True)


def running(run_id):
    print("running", flush=True)
    time.sleep(600)


evaluate(make_rows(4, seed=1), {"metrics": ["exact_match"]}, progress=HookedProgress(on_start=running))
"""


def test_a_second_ctrl_c_ends_an_interrupted_calls_wait_for_the_start_lock_another_process_holds(home: Path) -> None:
    """A call interrupted with its workers kept stops them and gives the server's registration back (stop_kept, in a
    shutdown's step) under the start lock: held by another process (one starting a server, for minutes), the wait
    took no Ctrl-C, a second one counted and the flock retried. A second Ctrl-C ends it now, leaving the registration
    (given back once this process is gone)."""
    env = {**os.environ, "RAGSCORE_HOME": str(home), "PYTHONPATH": str(ROOT)}
    proc = interruptible([sys.executable, "-c", HELD_UP], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and next_line(proc.stdout, 180) == "running\n"
        workers = [[c.pid, c.create_time()] for c in psutil.Process(proc.pid).children(recursive=True)
                   if "celery" in " ".join(command_line(c))]  # fmt: skip
        with open(home / "redis" / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process's hold: this one's own open file
            proc.send_signal(signal.SIGINT)
            assert workers and until(lambda: not _still_running(workers), 120)
            proc.send_signal(signal.SIGINT)  # its workers gone: it waits for the lock, in stop_kept or after it
            assert proc.wait(timeout=60) != 0  # the lock still held
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for server in psutil.process_iter(["cmdline"]):  # the server its registration kept running
            if str(home) in " ".join(server.info["cmdline"] or []):
                server.kill()
