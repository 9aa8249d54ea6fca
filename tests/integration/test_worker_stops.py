"""A worker stopped cleanly (SIGTERM: Celery's warm shutdown) finishes what it holds: ``ragscore status`` says so, and
calls held by a worker that stopped only the messages of one killed (kill -9), of which the attached run's progress
line says when they are sent again."""

from __future__ import annotations

import io
import json
import logging
import signal
import time
from pathlib import Path

import psutil
import pytest
import redis
from rich.console import Console

from orchestrator.progress import PlainProgress
from orchestrator.queues import ORPHAN_SETTLED_S, held_messages
from orchestrator.reports.live import StatusView, sample
from orchestrator.runner import connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.stopping import STOPPING_INDEX, STOPPING_PREFIX, StopWatch, stopping_workers
from ragscore_workers.store import RunStore, redis_client

from ..support import RedisProcess, WorkerProcess, celery_workers, command_line, until, write_jsonl

pytestmark = pytest.mark.integration

#: Seconds each row's metric takes: the worker holds its message past ORPHAN_SETTLED_S while it stops, with room on a
#: loaded host for the signal, the stopping key and a status (each ``held_messages`` asks the workers for ~2 s) before
#: it is done (12 s left ~2 s of room). A test that is done with a held row ends it at once (:func:`_release`).
SLEEP_S = 30.0


def _slow_rows(tmp_path: Path, n: int, sleep_s: float) -> list[dict[str, object]]:
    """``n`` rows of the slow test plug-in's metric, each taking ``sleep_s``, or less once :func:`_release` ran."""
    release = str(tmp_path / "release")
    return [{"id": f"q{i}", "answer": "a", "reference": "a", "metadata": {"sleep_ms": sleep_s * 1000,
             "until_file": release}} for i in range(n)]  # fmt: skip


def _release(tmp_path: Path) -> None:
    """End the sleep of every row of :func:`_slow_rows` (the one running now and each run later) at once."""
    (tmp_path / "release").touch()


def _status(store, run_id: str) -> str:  # type: ignore[no-untyped-def]
    """What ``ragscore status RUN`` says of the run's held messages now (as its consumer check sets them)."""
    found = held_messages(store, run_id)
    view = StatusView(store.meta(run_id))
    view.add(sample(store, run_id, time.time()))
    view.set_orphans(run_id, found.orphans, 900.0, found.finishing)
    console = Console(record=True, width=400)
    console.print(view.render(run_id))
    return " ".join(console.export_text().split())


def _celery_main(worker: WorkerProcess) -> psutil.Process:
    assert worker.proc is not None
    (main,) = celery_workers(worker.proc.pid)
    return main


def _started(store, run_id: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether a worker holds one of the run's messages."""
    return held_messages(store, run_id).held > 0


def _taken_by_a_running_worker(tmp_path: Path, worker: WorkerProcess) -> tuple[RunStore, str]:
    """A store and a run of one slow row (SLEEP_S) whose message ``worker`` (started here) holds now."""
    store = connect(worker.env["RAGSCORE_BROKER_URL"])
    rows = _slow_rows(tmp_path, 1, SLEEP_S)
    suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": 1}})
    run_id = submit(write_jsonl(tmp_path / "d.jsonl", rows), suite, store).run_id
    worker.start()
    assert until(lambda: _started(store, run_id), 240), "the worker never took the run's message"
    return store, run_id


def _held_by_a_running_worker(tmp_path: Path, worker: WorkerProcess) -> tuple[RunStore, str]:
    """:func:`_taken_by_a_running_worker`'s run, held past ORPHAN_SETTLED_S."""
    taken = _taken_by_a_running_worker(tmp_path, worker)
    time.sleep(ORPHAN_SETTLED_S + 1)  # held long enough to be called orphaned if its worker does not list it
    return taken


def _keep(said: list[str], text: str) -> str:
    """``text``, kept in ``said`` too (what an assertion shows)."""
    said[0] = text
    return text


def _says_who_holds(said: list[str], text: str) -> bool:
    """Keep ``text`` in ``said`` where it says the item is held by a stopping worker, or by one that stopped."""
    _keep(said, text)
    return "being finished by worker" in text or "held by a worker that stopped" in text


def _stopping_key_writes(client: redis.Redis, keys: str = f"{STOPPING_PREFIX}*") -> redis.client.PubSub:
    """A subscription to Redis' notifications of each write of a key matching ``keys`` (by default the ``ragscore:
    stopping:`` keys) from now on: each is caught, however short the key lived."""
    client.config_set("notify-keyspace-events", "KA")
    writes = client.pubsub()
    writes.psubscribe(f"__keyspace@*__:{keys}")
    assert (writes.get_message(timeout=30) or {}).get("type") == "psubscribe"  # subscribed before what it awaits
    return writes


def _renewed(writes: redis.client.PubSub, timeout_s: float) -> bool:
    """Whether a stopping key was written again (renewed) after this call, within ``timeout_s``: the writes heard so
    far are skipped, then two are awaited (the first may have been on its way before the call)."""
    while writes.get_message(timeout=0) is not None:
        pass
    deadline, heard = time.monotonic() + timeout_s, 0
    while heard < 2 and time.monotonic() < deadline:
        message = writes.get_message(timeout=1.0)
        heard += message is not None and message.get("data") == "set"
    return heard >= 2


#: A broker user limited to kombu's keys, the queues and Celery's (no ``ragscore:`` key: the store's user has those).
_BROKER_USER = "broker on >pw ~cpu* ~control* ~_kombu.* ~unacked* ~*.reply.celery.pidbox* ~celery-* &* +@all"


def _slow_cpu_worker(broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerProcess:
    """A cpu worker of one process (not started) with the slow test plug-in, in this process too (the run's submit
    reads the plug-ins' metrics)."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    worker = WorkerProcess(broker, "cpu", tmp_path / "home", concurrency=1)
    worker.env["RAGSCORE_PLUGINS"] = "tests.plugins.slow"
    return worker


@pytest.mark.parametrize("stop", ["sigterm", "kill", "sigterm-then-kill", "sigterm-least-privilege-broker"])
def test_a_worker_stopping_cleanly_is_said_to_finish_its_items_one_killed_to_hold_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop: str
) -> None:
    """A second after a clean SIGTERM, status read the worker's items as "held by a worker that stopped (killed, or
    its host lost)": in its warm shutdown a worker answers no ``inspect`` while it finishes them. One killed while it
    stops is said to hold them once its stopping key expires. A broker user that may not write ``ragscore:`` keys
    (a store of its own user) needs no more: the worker says it is stopping in the store."""
    least = stop.endswith("least-privilege-broker")
    server = RedisProcess(tmp_path / "redis", *(("--user", *_BROKER_USER.split()) if least else ())).start()
    broker = f"redis://broker:pw@127.0.0.1:{server.port}/0" if least else server.url
    worker = _slow_cpu_worker(broker, tmp_path, monkeypatch)
    if least:
        monkeypatch.setenv("RAGSCORE_STORE_URL", server.url)
        worker.env["RAGSCORE_STORE_URL"] = server.url
    try:
        store, run_id = _held_by_a_running_worker(tmp_path, worker)
        assert worker.proc is not None
        main = _celery_main(worker)
        if stop.startswith("sigterm"):
            worker.proc.send_signal(signal.SIGTERM)  # `ragscore worker` stops its Celery worker warm
        else:
            main.send_signal(signal.SIGKILL)
        said = [""]  # the first status that says who holds the item
        assert until(lambda: _says_who_holds(said, _status(store, run_id)), 30), said
        said = said[0]
        if stop.startswith("sigterm"):
            assert "1 item of this run (1 on cpu) is being finished by worker cpu" in said, said
            assert "which is stopping" in said and "held by a worker that stopped" not in said, said
        if stop.startswith("sigterm") and stop != "sigterm-then-kill":
            _release(tmp_path)
            assert worker.proc.wait(60) == 0
            assert until(lambda: not stopping_workers(store.r), 10), "its key outlived it"
            assert not store.r.exists(STOPPING_INDEX) and not store.r.keys(f"{STOPPING_PREFIX}*")
            assert "being finished" not in _status(store, run_id)
        elif stop == "sigterm-then-kill":
            main.send_signal(signal.SIGKILL)
            held = [""]
            assert until(lambda: "held by a worker that stopped" in _keep(held, _status(store, run_id)), 30), held
            assert "being finished" not in held[0], held
        else:
            assert "1 item of this run (1 on cpu; 1 message) is held by a worker that stopped" in said, said
            assert "being finished" not in said, said
    finally:
        worker.stop()
        server.stop()


def test_the_progress_line_of_a_run_whose_work_a_killed_worker_holds_says_when_it_is_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a killed worker's message waits (Redis hands it back only after the visibility timeout), the attached
    run's line said only "no progress for 25 s"; its log said when the run sends that work again."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = _slow_cpu_worker(server.url, tmp_path, monkeypatch)
    try:
        store, run_id = _held_by_a_running_worker(tmp_path, worker)
        _celery_main(worker).send_signal(signal.SIGKILL)  # `ragscore worker` starts another, which takes nothing
        _release(tmp_path)  # the killed one's child died with it (pdeathsig): the row, sent again, ends at once
        out = io.StringIO()
        summary = wait(store, run_id, PlainProgress(out), timeout_s=300, stall_s=40, consumer_check_s=2)
        assert summary.metrics["slow_exact"].n == 1
        lines = [line for line in out.getvalue().splitlines() if "no progress for" in line]
        said = "1 message held by a worker that is gone, sent again at 40 s without progress"
        assert any(said in line for line in lines), lines
        assert said not in out.getvalue().splitlines()[-1]  # done: no longer said
    finally:
        worker.stop()
        server.stop()


def test_a_stop_watch_its_user_may_not_write_warns_once_and_ends_two_of_one_name_keep_their_own_tasks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker whose store user may not write its stopping key says so once (not every renewal) and stops as fast;
    two workers of one name (a host name reused) each keep their own tasks said, and one's exit leaves the other's."""
    server = RedisProcess(tmp_path / "redis", "--user", *_BROKER_USER.split()).start()
    try:
        reads: list[None] = []  # one a write of its key: what it runs is read for each

        def runs_nothing() -> list[str]:
            reads.append(None)
            return []

        client = redis_client(f"redis://broker:pw@127.0.0.1:{server.port}/0")
        refused = StopWatch(client, "cpu-1@vm", lambda: ["t0"], runs_nothing)
        with caplog.at_level(logging.WARNING, logger="ragscore_workers.kept"):
            refused.begin()
            assert until(lambda: caplog.records, 30), "no warning"
            # a renewal, refused again: not said again (its write is tried before the thread ends)
            assert until(lambda: len(reads) >= 2, 30), "its key was not renewed"
            refused.end()
            refused.join(30)
        assert not refused.alive()
        assert len(caplog.records) == 1 and "could not record in the run store" in caplog.text, caplog.text
        client = redis_client(server.url)
        first = StopWatch(client, "cpu-1@vm", lambda: ["t1"], lambda: [])
        second = StopWatch(client, "cpu-1@vm", lambda: ["t2", "t3"], lambda: ["t2"])
        first.begin()
        second.begin()
        both = {"t1": False, "t2": True, "t3": False}  # held, and run or not
        assert until(lambda: stopping_workers(client) == {"cpu-1@vm": both}, 30), stopping_workers(client)
        first.end()
        first.join(30)
        assert stopping_workers(client) == {"cpu-1@vm": {"t2": True, "t3": False}}
        second.end()
        second.join(30)
        assert stopping_workers(client) == {} and not client.keys(f"{STOPPING_PREFIX}*")
        # an older worker's key, which does not say which tasks it runs: it finishes them all
        client.set(f"{STOPPING_PREFIX}older", json.dumps({"worker": "cpu-2@vm", "tasks": ["t4"]}), ex=30)
        client.sadd(STOPPING_INDEX, "older")
        assert stopping_workers(client) == {"cpu-2@vm": {"t4": True}}
    finally:
        server.stop()


def test_a_store_user_that_may_not_read_the_stopping_keys_still_gets_the_held_work_judged(tmp_path: Path) -> None:
    """A store user with key patterns narrower than the documented ``~ragscore:*`` may not read ``ragscore:stopping``:
    the held-message check raised NoPermissionError, which ``ragscore status`` said as "the workers could not be asked"
    and dropped its notes of held work. Unread, no worker counts as stopping: a message no live worker lists is
    called orphaned, as before workers said they stop."""
    narrow = "narrow on >pw ~ragscore:run* ~unacked* &* +@all"
    server = RedisProcess(tmp_path / "redis", "--user", *narrow.split()).start()
    try:
        connect(server.url)  # Celery's remote control asks this broker's workers (none: nothing lists the message)
        admin = redis_client(server.url)
        store = RunStore(redis_client(f"redis://narrow:pw@127.0.0.1:{server.port}/0"), 60, broker=admin)
        message = {"headers": {"id": "t1", "task": "ragscore.score_shard", "run": "run-x"}, "body": ""}
        admin.hset("unacked", "tag-1", json.dumps([message, "", "cpu"]))
        admin.zadd("unacked_index", {"tag-1": time.time() - ORPHAN_SETTLED_S - 60})
        with pytest.raises(redis.exceptions.NoPermissionError):
            stopping_workers(store.r)  # the user the check reads them with
        found = held_messages(store, "run-x")
        assert (found.held, [o.queue for o in found.orphans], found.finishing) == (1, ["cpu"], []), found
    finally:
        server.stop()


def test_the_tests_stop_of_a_worker_whose_warm_stop_outlasts_its_grace_leaves_no_process_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WorkerProcess.stop, every test's cleanup, killed the process group of a ``ragscore worker`` still stopping
    after its grace, which missed its Celery worker (a session of its own): that one finished what it held, minutes
    on (a judge chunk waiting out a 429's pause, in a failing test_cancelled_while_paused)."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = _slow_cpu_worker(server.url, tmp_path, monkeypatch)
    try:
        _taken_by_a_running_worker(tmp_path, worker)
        assert worker.proc is not None
        below = psutil.Process(worker.proc.pid).children(recursive=True)
        worker.stop(grace_s=1)  # its task has SLEEP_S to run: the warm stop outlasts the grace
        _, left = psutil.wait_procs(below, timeout=10)  # killed: gone at once, where SLEEP_S is far off
        assert left == [], [command_line(p) for p in left]
    finally:
        worker.stop()
        server.stop()


def test_a_worker_in_a_cold_shutdown_never_says_it_is_finishing_what_it_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGQUIT (Celery's cold shutdown: the tasks it holds are cancelled, not finished) also sent
    ``worker_shutting_down``: the worker wrote its stopping key, and status said it was finishing an item it dropped.
    Every write of a ``ragscore:stopping`` key is caught by Redis' keyspace notifications, however short it lived."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = _slow_cpu_worker(server.url, tmp_path, monkeypatch)
    try:
        store, run_id = _held_by_a_running_worker(tmp_path, worker)
        writes = _stopping_key_writes(store.r, f"{STOPPING_INDEX}*")  # the index and each worker's key
        main = _celery_main(worker)
        main.send_signal(signal.SIGQUIT)
        main.wait(60)
        said = list(iter(lambda: writes.get_message(timeout=1), None))
        assert said == [], said
        assert not store.r.keys(f"{STOPPING_PREFIX}*") and "being finished" not in _status(store, run_id)
    finally:
        worker.stop()
        server.stop()


def test_a_stopping_worker_is_said_to_finish_only_what_it_runs_its_prefetch_to_go_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cpu worker of one process prefetches (``--prefetch-multiplier 4``): stopped warm, it finishes the chunk it
    runs, and Celery drops those it took and did not start, whose messages go back to their queue as it exits. Its
    stopping key listed every task it held, all said to be being finished, or (once Celery dropped them from its state)
    none of those: status then called them held by a worker that stopped."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = _slow_cpu_worker(server.url, tmp_path, monkeypatch)
    try:
        store = connect(server.url)
        # twice SLEEP_S: its first chunk must still run through two more status reads and a renewal after the signal
        rows = _slow_rows(tmp_path, 3, SLEEP_S * 2)
        suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": 1}})
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", rows), suite, store).run_id
        worker.start()
        assert until(lambda: held_messages(store, run_id).held == 3, 240), "the worker never took the run's messages"
        time.sleep(ORPHAN_SETTLED_S + 1)  # held long enough to be called orphaned if no worker lists them
        writes = _stopping_key_writes(store.r)
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGTERM)
        said = [""]
        assert until(lambda: _says_who_holds(said, _status(store, run_id)), 30), said
        # a renewal of its key after that status, once Celery dropped the two it did not start
        assert _renewed(writes, 30), "its stopping key was not renewed"
        for text in (said[0], _status(store, run_id)):
            assert "1 item of this run (1 on cpu) is being finished by worker cpu" in text, text
            assert "2 items it took and did not start (2 on cpu) go back to the queue as it exits" in text, text
            assert "held by a worker that stopped" not in text, text
        _release(tmp_path)
        assert worker.proc.wait(SLEEP_S * 4) == 0
        assert (held_messages(store, run_id).held, store.broker.llen("cpu")) == (0, 2)
    finally:
        worker.stop()
        server.stop()
