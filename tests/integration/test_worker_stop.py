"""``ragscore worker`` stops warmly on SIGTERM (docker stop, systemd, kubectl): running tasks finish, and it
returns only once its Celery workers and their pool processes are gone; a second SIGTERM kills at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psutil
import pytest
import redis

from orchestrator import workers as workers_module
from orchestrator.embedded_redis import EmbeddedRedis
from orchestrator.runner import connect, submit
from orchestrator.suite import ResolvedSuite, load_suite
from orchestrator.workers import LocalWorkers
from ragscore_workers.alive import ALIVE_INDEX
from ragscore_workers.app import app
from ragscore_workers.store import RunStore

from ..support import (
    ROOT,
    RedisProcess,
    WorkerProcess,
    command_line,
    interruptible,
    next_line,
    ragscore_worker,
    until,
    write_jsonl,
)

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


def _running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Processes still running (a zombie nobody reaped, re-parented to an init that reaps none, has ended)."""
    running = []
    for proc in _alive(procs):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                running.append(proc)
        except psutil.NoSuchProcess:
            continue
    return running


def _became_celery(worker: psutil.Process) -> bool:
    """Whether ``worker`` runs Celery yet (it execs it after its start); one that exited first fails the test, with
    its exit said, rather than raising ``NoSuchProcess`` from inside the wait."""
    try:
        return "celery" in " ".join(worker.cmdline())
    except psutil.NoSuchProcess:
        pytest.fail(f"the worker (pid {worker.pid}) exited before it became Celery")


def _celery_said(tmp_path: Path, text: str) -> bool:
    """Whether a Celery worker of ``_start``'s ``ragscore worker`` wrote ``text`` to its log."""
    return any(text in p.read_text(errors="replace") for p in (tmp_path / "home" / "logs").glob("worker-*.log"))


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
        # warm stop under way (the 600 s task would hold it up to --stop-timeout): its Celery worker says so once the
        # supervisor asked it, so this second SIGTERM is not taken for the first (a fixed sleep raced a loaded box)
        assert until(lambda: _celery_said(tmp_path, "Warm shutdown"), 60), "the first SIGTERM stopped nothing"
        assert worker.proc.poll() is None, "a warm stop does not end a running task"
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(timeout=30) == 0
        assert until(lambda: not _alive(below), 30), f"left running: {_alive(below)}"
        assert not store.progress(run_id).get("done"), "the task cannot have finished"
    finally:
        worker.stop()
        server.stop()


@pytest.mark.parametrize(
    ("stop", "again"),
    [(signal.SIGTERM, "send SIGTERM again (or Ctrl-C)"), (signal.SIGINT, "Ctrl-C again")],
    ids=["SIGTERM", "Ctrl-C"],
)
def test_the_stopping_line_names_the_signal_that_stops_it_at_once_and_that_one_does(
    tmp_path: Path, stop: signal.Signals, again: str
) -> None:
    """After a SIGTERM (systemd, ``docker stop``: the second stop is a second SIGTERM) the line said "Ctrl-C again to
    stop at once"; it names the signal it got now, and that signal sent again kills its running task at once."""
    server = RedisProcess(tmp_path / "redis").start()
    proc, said = ragscore_worker(tmp_path, server, "code")
    try:
        rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "slow", "code": "import time; time.sleep(600)"}])
        store = connect(server.url)
        run_id = submit(rows, _suite(), store).run_id
        assert until(_task_running, 120), said
        proc.send_signal(stop)
        assert until(lambda: any(line.startswith("stopping:") for line in said), 60), said
        stopping = next(line for line in said if line.startswith("stopping:"))
        assert stopping.endswith(f" s); {again} to stop at once\n"), stopping
        proc.send_signal(stop)
        assert proc.wait(timeout=60) == 0, said
        assert not store.progress(run_id).get("done"), "the task cannot have finished"
    finally:
        if proc.poll() is None:
            _kill_with_its_tree(proc)
        server.stop()


def _fill(fd: int) -> None:
    """Fill the pipe whose write end is ``fd``, so the next write to it blocks until someone reads."""
    os.set_blocking(fd, False)  # the description is shared with the child: blocking again before it writes
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(fd, True)


def _drain(fd: int) -> None:
    """Read the pipe whose read end is ``fd`` until every writer closed it."""
    while os.read(fd, 65536):
        pass


def _blocked_writing_to_a_pipe(pid: int) -> bool:
    """Whether a thread of ``pid`` (its main thread, its echo's) waits writing to a pipe."""
    return any("pipe_write" in _wait_channel(thread) for thread in Path(f"/proc/{pid}/task").iterdir())


def _wait_channel(thread: Path) -> str:
    """What ``thread`` waits in (pipe_write, anon_pipe_write on newer kernels); "" for a thread that has just ended."""
    try:
        return (thread / "wchan").read_text()
    except (FileNotFoundError, ProcessLookupError):  # listed, then gone (a pool thread ending): not a writer
        return ""


def test_a_second_sigterm_while_it_says_stopping_kills_at_once(tmp_path: Path) -> None:
    """A second SIGTERM that came while ``ragscore worker`` printed "stopping: ..." (its stderr a full pipe here: a
    slow terminal, a log collector) was lost: a full warm stop followed, waiting for the running task. (Its echo's
    thread writes that line now, which holds up nothing: the second SIGTERM comes as it waits on it.)"""
    server = RedisProcess(tmp_path / "redis").start()
    read_end, write_end = os.pipe()
    worker = WorkerProcess(server.url, "code", tmp_path / "home", concurrency=1)
    worker.proc = subprocess.Popen(worker.args, env=worker.env, cwd=ROOT, start_new_session=True, stderr=write_end)
    try:
        store = connect(server.url)
        code = "import time; time.sleep(600); print('done')"
        run_id = submit(write_jsonl(tmp_path / "rows.jsonl", [{"id": "slow", "code": code}]), _suite(), store).run_id
        assert until(_task_running, 60), "the code task never started"
        below = _tree(worker.proc.pid)
        _fill(write_end)
        assert not _blocked_writing_to_a_pipe(worker.proc.pid)
        worker.proc.send_signal(signal.SIGTERM)
        assert until(lambda: _blocked_writing_to_a_pipe(worker.proc.pid), 60), "it never said it was stopping"
        worker.proc.send_signal(signal.SIGTERM)  # it is saying "stopping"
        threading.Thread(target=_drain, args=(read_end,), daemon=True).start()  # its prints go on
        assert worker.proc.wait(timeout=60) == 0  # a warm stop waits up to --stop-timeout (minutes): the 600 s task
        assert until(lambda: not _alive(below), 30), f"left running: {_alive(below)}"
        assert not store.progress(run_id).get("done"), "the task cannot have finished"
    finally:
        os.close(write_end)
        worker.stop()
        server.stop()
        os.close(read_end)


def _python(tmp_path: Path, script: str) -> subprocess.Popen[str]:
    """Run ``script`` (our code, in a fresh interpreter) with its output piped."""
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env, start_new_session=True)  # fmt: skip


def test_a_stop_signal_python_dropped_in_a_finalizer_still_stops_the_supervisor(tmp_path: Path) -> None:
    # A KeyboardInterrupt raised while Python runs a finalizer (__del__, a weakref or at-fork callback) is only
    # printed as "Exception ignored": `ragscore worker` then supervised on after a SIGTERM.
    proc = _python(
        tmp_path,
        f"""
        import os, signal
        from pathlib import Path
        from orchestrator.workers import LocalWorkers, stop_signals_as_interrupt

        class SignalsWhenCollected:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                sum(range(10))  # the handler runs here, inside the finalizer

        with stop_signals_as_interrupt():
            try:
                SignalsWhenCollected()
                print("the finalizer's KeyboardInterrupt was dropped", flush=True)
                LocalWorkers("redis://127.0.0.1:1/0", [], Path({str(tmp_path / "logs")!r})).supervise()
            except KeyboardInterrupt:
                print("stopped", flush=True)
    """,
    )
    try:
        out, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "Exception ignored" in errors and "KeyboardInterrupt" in errors  # Python did drop it
    assert out.splitlines() == ["the finalizer's KeyboardInterrupt was dropped", "stopped"], (out, errors)


#: Run by ``_stop_interrupted_at_its_start``: a worker started (of an unreachable broker: it never gets ready), then
#: stopped; as stop() begins, before its first line runs, a trace function says so and waits for the test's Ctrl-C.
_STOP_INTERRUPTED = """
import sys, time
from pathlib import Path
from orchestrator.workers import LocalWorkers, stop_signals, stop_signals_as_interrupt

def at_stop(frame, event, arg):
    if event == "call" and frame.f_code is LocalWorkers.stop.__code__:
        sys.settrace(None)
        print("stopping", flush=True)
        while not stop_signals():  # the Ctrl-C comes here, in stop()'s first step
            time.sleep(0.01)

with stop_signals_as_interrupt():
    workers = LocalWorkers("redis://127.0.0.1:1/0", ["cpu"], Path(sys.argv[1]))
    workers.start()
    print(workers.procs["cpu"].pid, flush=True)
    sys.settrace(at_stop)
    try:
        workers.stop(timeout=60)
        print("stopped", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    time.sleep(600)  # alive: a worker left running is not SIGTERMed by its parent's death
"""


def test_a_ctrl_c_in_the_first_step_of_a_stop_is_counted_and_the_stop_goes_on(tmp_path: Path) -> None:
    """A stop signal that came in LocalWorkers.stop()'s first steps, before what counts it was entered, raised there:
    the stop was skipped, its workers left running. Now the whole of stop() counts it (its frame on the stack when the
    signal is handled), and it stops them."""
    script = tmp_path / "script.py"
    script.write_text(_STOP_INTERRUPTED)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = interruptible([sys.executable, str(script), str(tmp_path / "logs")], stdout=subprocess.PIPE, text=True,
                         cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    worker: psutil.Process | None = None
    try:
        assert proc.stdout is not None
        worker = psutil.Process(int(next_line(proc.stdout, 180)))
        assert next_line(proc.stdout, 180) == "stopping\n"
        proc.send_signal(signal.SIGINT)
        assert next_line(proc.stdout, 180) == "stopped\n"
        assert until(lambda: not _running([worker]), 30), "the worker was left running"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if worker is not None and _running([worker]):
            os.killpg(worker.pid, signal.SIGKILL)


def _kill_with_its_tree(proc: subprocess.Popen[str]) -> None:
    """Kill ``proc``'s script, started in a session of its own, and whatever it left running."""
    for left in _running(_tree(proc.pid)):  # each: a pool process leads no group
        with contextlib.suppress(psutil.NoSuchProcess):
            left.kill()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


#: Run by the tests below: a worker (of an unreachable broker: it never gets ready) started and stopped; as the
#: function named by ``sys.argv[2]`` reaches its point (``__exit__``: its call, before stop(); ``_spawn``: Popen's wait
#: for the exec, the worker forked), a profile function says so and waits for the test's Ctrl-C.
_SIGNALLED_AT = """
import os, subprocess, sys, time
from pathlib import Path
from orchestrator.workers import LocalWorkers, stop_signals, stop_signals_as_interrupt

AT = {"__exit__": ("call", LocalWorkers.__exit__.__code__, None),
      "_spawn": ("c_call", subprocess.Popen._execute_child.__code__, os.read)}[sys.argv[2]]

def at_point(frame, event, arg):
    if (event, frame.f_code, arg if event == "c_call" else None) == AT:
        sys.setprofile(None)
        print("signal me", flush=True)
        while not stop_signals():  # the Ctrl-C comes here
            time.sleep(0.01)

def started_and_stopped(workers):
    if sys.argv[2] == "__exit__":
        with workers:
            return
    try:  # as an embedded run's: recorded before they start, stopped whatever their start raised
        workers.start()
    finally:
        workers.stop(timeout=60)

with stop_signals_as_interrupt():
    sys.setprofile(at_point)
    try:
        started_and_stopped(LocalWorkers("redis://127.0.0.1:1/0", ["cpu"], Path(sys.argv[1])))
    except KeyboardInterrupt:
        pass
    sys.setprofile(None)
    print("stopped", flush=True)
    time.sleep(600)  # alive: a worker left running is not SIGTERMed by its parent's death
"""


@pytest.mark.parametrize("point", ["__exit__", "_spawn"])
def test_a_ctrl_c_as_workers_start_or_before_their_stop_is_counted_and_every_worker_stops(
    tmp_path: Path, point: str
) -> None:
    """A stop signal that came in LocalWorkers.__exit__ before its stop() raised there: the stop was skipped, its
    workers left running; one that came while Popen waited for a worker's exec in _spawn lost the process started
    (never recorded, never stopped). Now both count it (shutdown_step, _start_step): the stop goes on, the start
    records its worker and raises it then, and no worker is left running."""
    script = tmp_path / "script.py"
    script.write_text(_SIGNALLED_AT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = interruptible([sys.executable, str(script), str(tmp_path / "logs"), point], stdout=subprocess.PIPE,
                         text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert next_line(proc.stdout, 180) == "signal me\n"
        proc.send_signal(signal.SIGINT)
        assert next_line(proc.stdout, 180) == "stopped\n"
        assert until(lambda: not _running(_tree(proc.pid)), 30), f"left running: {_running(_tree(proc.pid))}"
    finally:
        _kill_with_its_tree(proc)


#: Run by the test below: ``ragscore run ARGS`` in this process, embedded; as the run's stop_workers is called (its run
#: done: the workers' stop, after it), a profile function says so and waits for the test's Ctrl-C.
_RUN_SIGNALLED_AT_ITS_STOP = """
import sys, time
from orchestrator.cli import app
from orchestrator.workers import stop_signals

def at_stop_workers(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "stop_workers" and frame.f_code.co_filename.endswith("runner.py"):
        sys.setprofile(None)
        print("signal me", flush=True)
        while not stop_signals():  # the Ctrl-C comes here, before its first worker's stop
            time.sleep(0.01)

sys.setprofile(at_stop_workers)
try:
    app(sys.argv[1:], standalone_mode=False)
except BaseException:
    pass
sys.setprofile(None)
print("stopped", flush=True)
time.sleep(600)  # alive: a worker left running is not stopped by its parent's death
"""


def test_a_ctrl_c_as_an_embedded_run_stops_its_workers_is_counted_and_every_worker_stops(
    tmp_path: Path, home: Path
) -> None:
    """A stop signal that came in runner's stop_workers before (or between) its workers' stops raised there: the stop
    was skipped, the run's workers left running. Now it is counted (shutdown_step): the stop goes on, forced."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "q0", "answer": "a", "reference": "a"}])
    suite = tmp_path / "s.json"
    suite.write_text('{"metrics": ["exact_match"]}')
    script = tmp_path / "script.py"
    script.write_text(_RUN_SIGNALLED_AT_ITS_STOP)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAGSCORE_HOME": str(home)}
    env.pop("RAGSCORE_BROKER_URL", None)
    argv = ["run", str(data), "--suite", str(suite), "--out", str(tmp_path / "out"), "-q"]
    proc = interruptible([sys.executable, str(script), *argv], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                         start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "signal me\n" in iter(partial(next_line, proc.stdout, 240), ""), "the run never stopped its workers"
        workers = _running(_tree(proc.pid))
        assert workers, "no worker ran"
        proc.send_signal(signal.SIGINT)
        assert "stopped\n" in iter(partial(next_line, proc.stdout, 240), "")
        assert until(lambda: not _running(workers), 30), f"left running: {_running(workers)}"
    finally:
        _kill_with_its_tree(proc)
        socket = str(EmbeddedRedis(home).socket)
        for server in psutil.process_iter(["cmdline"]):
            if socket in " ".join(server.info["cmdline"] or []):
                server.terminate()


def test_workers_start_without_python_fork_hooks_and_die_with_a_killed_parent(tmp_path: Path) -> None:
    # Starting a worker runs no Python code between fork and exec in the parent (a stop signal landing in an
    # at-fork hook is dropped, and can leave logging's lock held), and a worker still gets SIGTERM when the
    # process that started it is killed with SIGKILL.
    proc = _python(
        tmp_path,
        f"""
        import os, time
        from pathlib import Path
        from orchestrator.workers import LocalWorkers

        os.register_at_fork(after_in_parent=lambda: print("fork hook ran", flush=True))
        workers = LocalWorkers("redis://127.0.0.1:1/0", ["cpu"], Path({str(tmp_path / "logs")!r}))
        workers.start()
        print(workers.procs["cpu"].pid, flush=True)
        time.sleep(600)
    """,
    )
    worker: psutil.Process | None = None
    try:
        assert proc.stdout is not None
        first = next_line(proc.stdout, 180).strip()
        assert first.isdigit(), first  # not "fork hook ran"
        worker = psutil.Process(int(first))
        assert until(lambda: _became_celery(worker), 60), "the worker never became Celery"
        proc.kill()
        proc.wait(10)
        assert until(lambda: not _alive([worker]), 60), "the worker outlived its killed parent"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        if worker is not None and worker.is_running():
            os.killpg(worker.pid, signal.SIGKILL)


def test_a_worker_whose_parent_was_killed_ends_its_running_task_within_the_grace_period(tmp_path: Path) -> None:
    # The SIGTERM its dead parent asked for is a warm shutdown, which waited for the running task (here 600 s; a
    # judge chunk under a slow rate limit took minutes): what still runs ORPHAN_GRACE_S later is killed now.
    from ragscore_workers.die_with_parent import ORPHAN_GRACE_S

    server = RedisProcess(tmp_path / "redis").start()
    proc = _python(
        tmp_path,
        f"""
        import time
        from pathlib import Path
        from orchestrator.workers import LocalWorkers

        workers = LocalWorkers({server.url!r}, ["code"], Path({str(tmp_path / "logs")!r}), concurrency={{"code": 1}},
                               stop_with_parent=True)
        workers.start()
        print(workers.procs["code"].pid, flush=True)
        time.sleep(600)
    """,
    )
    below: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        worker = psutil.Process(int(next_line(proc.stdout, 180).strip()))
        code = "import time; time.sleep(600); print('done')"
        rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "slow", "code": code}])
        submit(rows, _suite(), connect(server.url))
        assert until(_task_running, 90), "the code task never started"
        below = [worker, *_tree(worker.pid)]
        proc.kill()
        proc.wait(10)
        started = time.monotonic()
        assert until(lambda: not _running(below), ORPHAN_GRACE_S + 15), f"left running: {_running(below)}"
        assert time.monotonic() - started >= ORPHAN_GRACE_S - 1, "the running task had its grace period"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in below[:1]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        server.stop()


@pytest.mark.parametrize("stop_with_parent", [True, False], ids=["embedded-run", "ragscore-worker"])
def test_only_an_embedded_runs_workers_watch_the_process_that_started_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_with_parent: bool
) -> None:
    """An embedded run's workers record calls they did not make as stopped once its process is gone (a resume redoes
    them). ``ragscore worker``'s serve a cluster's runs, which go on without it: killed with -9, a watcher there
    marked the judge work its workers held stopped and acked it, and the run finished with 31 of 40 items unscored
    and exit 0. Its workers get no parent to watch (and none inherited from the environment), only the SIGTERM."""
    from ragscore_workers.die_with_parent import PARENT_ENV

    monkeypatch.setenv(PARENT_ENV, "1")  # one inherited from an outer process is not this one's
    workers = LocalWorkers("redis://127.0.0.1:1/0", ["cpu"], tmp_path / "logs", stop_with_parent=stop_with_parent)
    workers.start()
    try:
        worker = psutil.Process(workers.procs["cpu"].pid)
        assert until(lambda: _became_celery(worker), 30), "the worker never became Celery"  # exec'd: its own env
        watched = worker.environ().get(PARENT_ENV)
    finally:
        workers.stop()
    assert watched == (str(os.getpid()) if stop_with_parent else None)


#: A ``sitecustomize`` whose Celery worker never finishes booting and outlives SIGTERM: while it boots (before it is
#: ready) it takes SIGTERM with a handler that does nothing, says so, and waits for ever, as a worker SIGTERMed while it
#: booted did once in the CI (it did not exit within 180 s). Other processes import it and stay as they are.
_STUCK_BOOT = """
import signal, sys, threading
from celery.signals import celeryd_after_setup

@celeryd_after_setup.connect(weak=False)
def _stick(**_):
    signal.signal(signal.SIGTERM, lambda *_: None)
    print("stuck booting", file=sys.__stdout__, flush=True)
    threading.Event().wait()
"""


def test_a_sigterm_once_its_workers_stopped_is_ignored_and_it_exits_0(tmp_path: Path) -> None:
    """systemd or Kubernetes may send SIGTERM twice: one that came once ``ragscore worker`` said "workers stopped"
    found SIGTERM's default while its interpreter exited (0.3-0.5 s here) and killed it, exit 143 for a clean stop."""
    server = RedisProcess(tmp_path / "redis").start()
    proc, said = ragscore_worker(tmp_path, server, "cpu")
    try:
        client = redis.Redis.from_url(server.url)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said  # ready: a warm stop with nothing to finish
        proc.send_signal(signal.SIGTERM)
        assert until(lambda: "workers stopped" in "".join(said), 60), said
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()


#: A ``sitecustomize`` whose ready Celery worker starts a process of another session that holds its output open for
#: a minute (as a program a task started and that escaped its process group would): ``ragscore worker``'s copy of
#: that output does not end with the worker, and its stop waits 5 s for it once the worker is gone.
_HELD_OUTPUT = """
import subprocess, sys
from celery.signals import worker_ready

@worker_ready.connect(weak=False)
def _hold(**_):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # holds"], start_new_session=True)
"""


def _holders(pid: int) -> list[psutil.Process]:
    """The processes below ``pid`` that ``_HELD_OUTPUT`` started."""
    return [proc for proc in _tree(pid) if "# holds" in " ".join(command_line(proc))]


def test_a_sigterm_while_it_cleans_up_after_its_stopped_workers_cuts_nothing_short(tmp_path: Path) -> None:
    """A second SIGTERM that came once the workers were gone, while ``ragscore worker`` killed what was left of them
    and echoed their last lines, raised there: the rest of that was skipped and it exited 130, not 0."""
    server = RedisProcess(tmp_path / "redis").start()
    (tmp_path / "held").mkdir()
    (tmp_path / "held" / "sitecustomize.py").write_text(_HELD_OUTPUT)
    path = os.pathsep.join(p for p in (str(tmp_path / "held"), os.environ.get("PYTHONPATH")) if p)
    proc, said = ragscore_worker(tmp_path, server, "cpu", path=path)
    holder: list[psutil.Process] = []
    try:
        client = redis.Redis.from_url(server.url)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said
        assert until(lambda: bool(holder.extend(_holders(proc.pid)) or holder), 60), said
        workers = [p for p in _tree(proc.pid) if p not in holder]
        proc.send_signal(signal.SIGTERM)
        assert until(lambda: not _alive(workers), 60), f"left running: {_alive(workers)}"
        proc.send_signal(signal.SIGTERM)  # it waits on the output the holder keeps open
        assert proc.wait(timeout=60) == 0, said
        assert until(lambda: "workers stopped" in "".join(said), 10), said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for held in _alive(holder):
            held.kill()
        server.stop()


def test_a_worker_stopped_before_it_was_ready_is_killed_without_the_warm_stops_wait(tmp_path: Path) -> None:
    """A worker SIGTERMed while it booted (``ragscore worker`` says "workers up" when it starts them, not when they
    are ready) did not exit, and the warm stop waited its whole --stop-timeout (870 s) for a worker that held no task
    and would take none: one not ready when signalled is killed after UNREADY_STOP_S (30 s; no timed assertion, the
    240 s wait only ends a test that would otherwise wait 870 s: not serial)."""
    server = RedisProcess(tmp_path / "redis").start()
    (tmp_path / "stuck").mkdir()
    (tmp_path / "stuck" / "sitecustomize.py").write_text(_STUCK_BOOT)
    path = os.pathsep.join(p for p in (str(tmp_path / "stuck"), os.environ.get("PYTHONPATH")) if p)
    proc, said = ragscore_worker(tmp_path, server, "judge", path=path)
    try:
        assert until(lambda: "[judge] stuck booting" in "".join(said), 120), said
        below = _tree(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=240) == 0, said
        assert until(lambda: not _alive(below), 30), f"left running: {_alive(below)}"
        killed = "the judge worker, stopped before it was ready (it held no task), had not exited: killed it"
        assert until(lambda: killed in "".join(said), 10), said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()


def test_a_ready_worker_reads_as_ready_at_its_stop_whatever_other_workers_of_this_process_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Workers said they were ready in a file named by the queue and this process's pid (their log's, ``.ready``):
    two sets of workers of one pid (two of one process; two containers' sharing ``RAGSCORE_HOME``) shared it, and one's
    stop removed it: the other's ready worker read as booting at its stop, killed after UNREADY_STOP_S with its tasks.
    (Here UNREADY_STOP_S is 0: a worker read as booting is killed, and said to be, before it could exit.)"""
    monkeypatch.setattr(workers_module, "UNREADY_STOP_S", 0.0)
    server = RedisProcess(tmp_path / "redis").start()
    client = redis.Redis.from_url(server.url)
    first = LocalWorkers(server.url, ["cpu"], tmp_path / "logs")
    second = LocalWorkers(server.url, ["cpu"], tmp_path / "logs")
    try:
        first.start()
        second.start()
        assert until(lambda: client.scard(ALIVE_INDEX) == 2, 120)  # both ready (their heartbeat starts then)
        second.stop(timeout=60)
        with caplog.at_level(logging.WARNING, logger=workers_module.__name__):
            first.stop(timeout=60)
        assert "before it was ready" not in caplog.text
        assert first.procs["cpu"].returncode == 0  # it stopped warmly, not killed
    finally:
        first.stop(timeout=5)
        second.stop(timeout=5)
        server.stop()


#: A ``sitecustomize`` whose Celery pool processes never end: the one that ends last says so and waits for ever, SIGTERM
#: ignored, so its worker hangs in its pool's join once its consumer stopped and its tasks ended.
_STUCK_JOIN = """
import signal, sys, threading
from celery.signals import worker_process_shutdown

@worker_process_shutdown.connect(weak=False)
def _stick(**_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("stuck in the pool's join", file=sys.__stdout__, flush=True)
    threading.Event().wait()
"""


@pytest.mark.parametrize("held", [False, True], ids=["nothing-held", "task-in-flight"])
def test_a_drained_worker_stuck_in_its_pool_join_is_killed_after_a_short_grace_not_the_warm_stops_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, held: bool
) -> None:
    """A ready worker that hung in its pool's join after SIGTERM got the whole warm stop's wait (``ragscore worker``'s
    --stop-timeout, 870 s for code) though it held no task: once its consumer stopped and its last task ended it says
    it is drained, and is killed DRAINED_STOP_S later (1 s here). One whose task is in flight (a program of 5 s) is not
    cut short: the task ends and is recorded first. No timed assertion (the 120 s timeout is a bound only)."""
    monkeypatch.setattr(workers_module, "DRAINED_STOP_S", 1.0)
    server = RedisProcess(tmp_path / "redis").start()
    (tmp_path / "stuck").mkdir()
    (tmp_path / "stuck" / "sitecustomize.py").write_text(_STUCK_JOIN)
    path = os.pathsep.join(p for p in (str(tmp_path / "stuck"), os.environ.get("PYTHONPATH")) if p)
    workers = LocalWorkers(server.url, ["code"], tmp_path / "logs", {"code": 1}, env={"PYTHONPATH": path})
    try:
        workers.start()
        assert until(lambda: redis.Redis.from_url(server.url).scard(ALIVE_INDEX) == 1, 120), workers.log_tail("code")
        if held:
            code = "import time; time.sleep(5); print('done')"
            rows = write_jsonl(tmp_path / "rows.jsonl", [{"id": "slow", "code": code}])
            run_id = submit(rows, _suite(), store := connect(server.url)).run_id
            assert until(_task_running, 60), "the code task never started"
        with caplog.at_level(logging.WARNING, logger=workers_module.__name__):
            workers.stop(timeout=120)
        assert "stuck in the pool's join" in workers.log_tail("code")
        assert workers.procs["code"].returncode == -signal.SIGKILL
        killed = "the code worker, drained (its consumer stopped and its last task ended), had not exited: killed it"
        assert killed in caplog.text
        if held:
            assert store.progress(run_id).get("done") == 1, "the task in flight was cut short"
    finally:
        workers.stop(timeout=5)
        server.stop()


def _read_until(fd: int, text: str, timeout: float) -> bool:
    """Read the pipe whose read end is ``fd`` until ``text`` came, for up to ``timeout`` seconds."""
    said = b""

    def came() -> bool:
        nonlocal said
        with contextlib.suppress(BlockingIOError):
            said += os.read(fd, 65536)
        return text.encode() in said

    os.set_blocking(fd, False)
    try:
        return until(came, timeout)
    finally:
        os.set_blocking(fd, True)


@contextlib.contextmanager
def _unread_worker(
    tmp_path: Path, queue: str, path: str | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int, int, list[psutil.Process]]]:
    """``ragscore worker -Q queue -c 1`` of a Redis of its own (``path``: its PYTHONPATH, None: this one's), its
    stderr the write end of a pipe, once its worker is ready: it, the pipe's read and write ends, and the processes
    below it. Then the pipe is drained and closed, and what is left of them killed."""
    server = RedisProcess(tmp_path / "redis").start()
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "RAGSCORE_BROKER_URL": server.url}
    if path is not None:
        env["PYTHONPATH"] = path
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", queue, "-c", "1"],
                            stderr=write_end, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    below: list[psutil.Process] = []
    try:
        client = redis.Redis.from_url(server.url)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), "the worker never got ready"
        below.extend(_tree(proc.pid))
        yield proc, read_end, write_end, below
    finally:
        threading.Thread(target=_drain, args=(read_end,), daemon=True).start()
        os.close(write_end)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in _running(below):
            p.kill()
        server.stop()


def test_a_stderr_nobody_reads_holds_up_no_kill_of_a_drained_worker(tmp_path: Path) -> None:
    """``ragscore worker`` said which worker it killed for holding nothing before it killed it: its stderr a full pipe
    (a log collector that stopped reading), the warning blocked and the worker, hung in its pool's join, was never
    killed. The kills come first now (and the command's own exit waits on its stderr no more: the test below)."""
    (tmp_path / "stuck").mkdir()
    (tmp_path / "stuck" / "sitecustomize.py").write_text(_STUCK_JOIN)
    path = os.pathsep.join(p for p in (str(tmp_path / "stuck"), os.environ.get("PYTHONPATH")) if p)
    with _unread_worker(tmp_path, "code", path) as (proc, read_end, write_end, below):
        proc.send_signal(signal.SIGTERM)
        assert _read_until(read_end, "stopping", 60), "it never said it was stopping"
        _fill(write_end)  # nobody reads its stderr from here on
        assert until(lambda: not _running(below), 120), f"left running: {_running(below)}"


def test_a_stderr_nobody_reads_holds_up_no_exit_of_ragscore_worker(tmp_path: Path) -> None:
    """``ragscore worker`` whose stderr is a full pipe (a log collector that stopped reading) blocked writing its
    "stopping" line (then its warnings, "workers stopped", its exit's flush), a SIGTERM from then on taken or ignored:
    only SIGKILL ended it. Its own lines go through its workers' echo now (dropped from a stderr that takes nothing,
    never waited on), the last one is given LAST_LINE_S, and it exits 0 on one SIGTERM, no worker left. No timed
    assertion (the 120 s is a bound only: it never exited)."""
    with _unread_worker(tmp_path, "cpu") as (proc, _, write_end, below):
        _fill(write_end)  # nobody reads its stderr, ever
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        assert until(lambda: not _running(below), 30), f"left running: {_running(below)}"


#: A ``sitecustomize`` whose Celery worker exits as it starts, each time: ``ragscore worker`` restarts it until it died
#: MAX_RESTARTS times in RESTART_WINDOW_S, then stops with a BrokerError.
_DIES_AT_START = """
import os
from celery.signals import celeryd_init

@celeryd_init.connect(weak=False)
def _die(**_):
    os._exit(3)
"""


def test_a_stderr_nobody_reads_holds_up_no_error_exit_of_ragscore_worker(tmp_path: Path) -> None:
    """``ragscore worker`` whose worker kept dying stopped with "Error: The cpu worker died 5 times ...": its stderr a
    full pipe (a log collector that stopped reading), main() blocked writing that line for ever, stop signals ignored
    by then. The error is its last line now, given LAST_LINE_S as "workers stopped" is, and it exits 1 all the same.
    No timed assertion (the 180 s is a bound only: it never exited)."""
    server = RedisProcess(tmp_path / "redis").start()
    (tmp_path / "dies").mkdir()
    (tmp_path / "dies" / "sitecustomize.py").write_text(_DIES_AT_START)
    path = os.pathsep.join(p for p in (str(tmp_path / "dies"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "RAGSCORE_BROKER_URL": server.url, "PYTHONPATH": path}
    read_end, write_end = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "-c", "1"],
                            stderr=write_end, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    try:
        assert _read_until(read_end, "workers up for cpu", 120), "it never started its worker"
        _fill(write_end)  # nobody reads its stderr from here on
        assert proc.wait(timeout=180) == 1
    finally:
        threading.Thread(target=_drain, args=(read_end,), daemon=True).start()
        os.close(write_end)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()
