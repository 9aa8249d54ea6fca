"""A cluster run whose work waits on a queue no worker serves says so, with the command that fixes it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil
import pytest
import redis
from kombu.pidbox import Mailbox

from orchestrator.runner import Submitted, cancel, connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.app import app
from ragscore_workers.store import RunStore

from ..support import (
    ROOT,
    RedisProcess,
    WorkerProcess,
    kill_whole,
    make_rows,
    monitor_commands,
    signal_each,
    until,
    write_jsonl,
)

pytestmark = pytest.mark.integration


def _cpu_only(tmp_path: Path, password: str | None = None) -> tuple[RedisProcess, WorkerProcess, RunStore]:
    """A Redis (asking ``password``, if any) and one cpu worker that answers pings: nothing consumes the other
    queues."""
    if password is None:
        server = RedisProcess(tmp_path / "redis").start()
    else:
        server = RedisProcess(tmp_path / "redis", "--requirepass", password).start_without_ping()
    url = _url(server, password)
    worker = WorkerProcess(url, "cpu", tmp_path / "home", concurrency=1).start()
    store = connect(url)
    deadline = time.monotonic() + 60
    while not app.control.ping(timeout=1.0):
        if time.monotonic() > deadline:
            worker.stop()
            server.stop()
            raise AssertionError("the cpu worker never answered a ping")
    return server, worker, store


def test_wait_names_each_queue_no_worker_consumes_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wait() reads ``queues.CONSUMER_CHECK_S`` when called (it was bound as its default at import, so setting the
    module's constant, as the status tests do, changed nothing and this wait never checked within its timeout)."""
    from orchestrator import queues

    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 2.0)
    server, worker, store = _cpu_only(tmp_path)
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(20, seed=2))
        sub = submit(data, load_suite({"metrics": ["exact_match", "answer_relevance"]}), store)
        with caplog.at_level(logging.WARNING, logger="orchestrator.runner"), pytest.raises(TimeoutError):
            wait(store, sub.run_id, timeout_s=12)
        warnings = [r.getMessage() for r in caplog.records if "no worker consumes it" in r.getMessage()]
        assert len(warnings) == 1, warnings  # once, though checked every 2 s
        assert "queue 'embed'" in warnings[0] and "`ragscore worker --queues embed`" in warnings[0]
        assert store.progress(sub.run_id)["done"] == 20  # the served cpu queue did its part
        # `ragscore status` (a run submitted with `ragscore submit` has no wait() to warn) says it too
        env = {**os.environ, "RAGSCORE_BROKER_URL": server.url}
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", sub.run_id], capture_output=True,
                               text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert (
            "Warning:" in shown.stdout and "queue 'embed'" in shown.stdout and "no worker consumes it" in shown.stdout
        )
        cancel(store, sub.run_id)
    finally:
        worker.stop()
        server.stop()


def _url(server: RedisProcess, password: str | None) -> str:
    """The URL of ``server`` with ``password`` (if any) in it."""
    return server.url if password is None else server.url.replace("redis://", f"redis://:{password}@")


def test_the_worker_command_said_for_an_unserved_queue_names_the_broker_given_its_password_hidden(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`ragscore submit --broker URL`, `ragscore status --broker URL` and a cluster run's wait said to start
    `ragscore worker --queues embed` without the broker: copied, it started a worker of another Redis (the
    embedded one), which served nothing. The broker is in it, its password hidden (and a word to put it back)."""
    server, worker, store = _cpu_only(tmp_path, "s3cret")
    url = _url(server, "s3cret")
    start = (f"`RAGSCORE_BROKER_URL='redis://:***@127.0.0.1:{server.port}/0' ragscore worker --queues embed` (put "
             "its password back for `***`)")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAGSCORE_BROKER_URL"}
    env |= {"RAGSCORE_HOME": str(tmp_path / "cli-home"), "COLUMNS": "250"}
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(20, seed=2))
        suite = tmp_path / "s.json"
        suite.write_text('{"metrics": ["exact_match", "answer_relevance"]}')
        cli = [sys.executable, "-m", "orchestrator.cli"]
        done = subprocess.run([*cli, "submit", str(data), "--suite", str(suite), "--broker", url], capture_output=True,
                              text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip()
        said = " ".join(done.stderr.split())
        assert f"Warning: 1 message waits on queue 'embed' and no worker consumes it; start one with {start}" in said
        shown = subprocess.run([*cli, "status", run_id, "--broker", url], capture_output=True, text=True, cwd=ROOT,
                               env=env, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert start in " ".join(shown.stdout.split()), shown.stdout
        with caplog.at_level(logging.WARNING, logger="orchestrator.runner"), pytest.raises(TimeoutError):
            wait(store, run_id, timeout_s=8, consumer_check_s=2, broker=url)
        logged = [r.getMessage() for r in caplog.records if "no worker consumes it" in r.getMessage()]
        assert len(logged) == 1 and start in logged[0], logged
        assert not [text for text in [done.stderr, shown.stdout, shown.stderr, *logged] if "s3cret" in text]
        cancel(store, run_id)
    finally:
        worker.stop()
        server.stop()


def test_submit_warns_of_each_queue_of_the_run_no_worker_consumes(tmp_path: Path) -> None:
    """`ragscore submit` printed the run id and left the embed queue's messages waiting unsaid until `status`."""
    server, worker, store = _cpu_only(tmp_path)
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(20, seed=2))
        suite = tmp_path / "s.json"
        suite.write_text('{"metrics": ["exact_match", "answer_relevance"]}')
        env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "COLUMNS": "250"}
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", str(data), "--suite", str(suite)],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        run_id = done.stdout.strip()
        said = " ".join(done.stderr.split())
        assert "Warning: 1 message waits on queue 'embed' and no worker consumes it" in said, said  # one chunk
        assert "`ragscore worker --queues embed`" in said and "queue 'cpu'" not in said
        cancel(store, run_id)
    finally:
        worker.stop()
        server.stop()


def test_a_cancelled_run_whose_rest_waits_where_no_worker_listens_still_gets_its_summary(tmp_path: Path) -> None:
    """Nobody skips messages on a queue no worker consumes, so the run's chords never ended: no summary, ever."""
    server, worker, store = _cpu_only(tmp_path)
    env = {**os.environ, "RAGSCORE_BROKER_URL": server.url}
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(20, seed=2))
        suite = load_suite({"metrics": ["exact_match", "answer_relevance"]})  # answer_relevance: the embed queue
        attached, detached = submit(data, suite, store), submit(data, suite, store)
        deadline = time.monotonic() + 180  # the worker's start included; returns once it scored
        while min(store.progress(s.run_id).get("done", 0) for s in (attached, detached)) < 20:
            assert time.monotonic() < deadline, "the cpu worker never scored its part"
            time.sleep(0.2)
        # A `ragscore run` still attached (its wait) sees the cancel and gets the summary of what was scored.
        cancel(store, attached.run_id)
        summary = wait(store, attached.run_id, timeout_s=60, stall_s=2)
        em = summary.metrics["exact_match"]
        assert summary.state == "cancelled" and em.n + em.unscorable == 20 and em.n > 0
        # never scored (the embed queue is unserved): counted as stopped by the cancel, which a resume scores
        ar = summary.metrics["answer_relevance"]
        assert (ar.n, ar.errors, ar.unscorable, ar.stopped) == (0, 0, 20, 20)
        assert ar.unscorable_reasons == {"run cancelled": 20}
        assert sum(m["answer_relevance"].stopped for m in summary.by_group.values()) == 20
        assert list(summary.metrics) == ["answer_relevance", "exact_match"]  # name order, as for any run
        # `ragscore cancel` of a run nothing waits on: `ragscore results` works right after.
        said = subprocess.run([sys.executable, "-m", "orchestrator.cli", "cancel", detached.run_id],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert said.returncode == 0, said.stderr
        # One account of it: the cancel said "the workers skip its queued tasks", then "nothing would skip its tasks".
        told = " ".join(said.stderr.split())
        assert f"run {detached.run_id}: cancelled; its queued tasks are not scored, then `ragscore results" in told
        assert "no worker consumes 'embed' (" in told and "skip" not in told, told
        assert "waiting): its summary is written without them once its tasks in flight end" in told, told
        deadline = time.monotonic() + 60
        while True:
            results = subprocess.run(
                [sys.executable, "-m", "orchestrator.cli", "results", detached.run_id, "--out", str(tmp_path / "o")],
                capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
            )  # fmt: skip
            if "try again shortly" not in results.stderr or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert results.returncode == 1 and "was cancelled" in results.stderr, results.stderr  # exit 1: a part only
        assert "stopped before scoring: answer_relevance (20 items)" in " ".join(results.stderr.split())
        written = (tmp_path / "o" / "items.jsonl").read_text().splitlines()
        assert (tmp_path / "o" / "summary.json").exists() and len(written) == 20
        again = subprocess.run([sys.executable, "-m", "orchestrator.cli", "cancel", detached.run_id],
                               capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert "(it already was)" in again.stderr and "no worker consumes" not in again.stderr  # summarized once
    finally:
        worker.stop()
        server.stop()


def test_no_queue_to_ask_about_asks_no_worker(tmp_path: Path) -> None:
    """Celery's ask of the workers (a broadcast on the broker, then its whole 1 s wait for replies) was sent with no
    queue to ask about: a status of a run none of whose messages waits paid that second to filter an empty list.
    The broadcast is counted where it is sent: the broker's PUBLISH."""
    from orchestrator.queues import unconsumed_queues

    server = RedisProcess(tmp_path / "redis").start()
    try:
        connect(server.url)  # the Celery app pointed at this broker
        client = redis.Redis.from_url(server.url)
        client.config_resetstat()
        assert unconsumed_queues([]) == []
        asked_none = "cmdstat_publish" in client.info("commandstats")
        assert unconsumed_queues(["cpu"]) == ["cpu"]  # no worker: the ask is sent, and counted
        asked_one = "cmdstat_publish" in client.info("commandstats")
    finally:
        server.stop()
    assert not asked_none
    assert asked_one


@contextmanager
def _a_judge_worker_on_a_slow_call(
    tmp_path: Path, latency_s: float = 10.0
) -> Iterator[tuple[WorkerProcess, RunStore, Submitted]]:
    """A judge worker of one thread on a fresh Redis, holding a call the fake provider answers in ``latency_s``, the
    rest of its run waiting on the judge queue: (worker, store, submitted). The run is cancelled at the end."""
    from ..fakes import FakeProvider

    server = RedisProcess(tmp_path / "redis").start()
    with FakeProvider(latency_s=latency_s) as fake:
        judge = {"provider": "openai", "model": "m", "base_url": fake.openai_base_url, "rpm": None, "tpm": None}
        suite = load_suite({"metrics": [{"name": "answer_accuracy", "params": {"cache": False}}],
                            "chunk_size": {"judge": 1}, "judge": judge})  # fmt: skip
        worker = WorkerProcess(server.url, "judge", tmp_path / "home", concurrency=1).start()
        assert worker.proc is not None
        store = connect(server.url)
        try:
            sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(4, seed=3)), suite, store)
            assert until(lambda: store.broker.hlen("unacked") > 0, 180), "the judge worker never took a message"
            assert store.broker.llen("judge") > 0  # the rest waits on its queue
            yield worker, store, sub
            cancel(store, sub.run_id)
        finally:
            worker.stop()
            server.stop()


def test_a_queue_whose_worker_is_too_busy_to_answer_the_ask_is_not_called_unserved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge worker busy with its threads (a cluster run on two shared cores) missed the 1 s ask of which queues
    it consumes, and `ragscore submit` (then `status`) said "no worker consumes it; start one" of a queue it was
    scoring. A worker that took a message of the queue within ``RECENTLY_TAKEN_S`` consumes it; frozen (SIGSTOP),
    it answers no ask at all, as the busiest worker would not in time. Past the window (set to 0 here, as a worker
    killed whole is once its last take is older) the queue is unserved again once the key saying the frozen worker
    runs expires (:mod:`ragscore_workers.alive`). The window is set, not waited out:
    the steps take what a loaded host gives them."""
    from orchestrator import queues
    from orchestrator.queues import unserved_queues
    from ragscore_workers.alive import ALIVE_TTL_S

    with _a_judge_worker_on_a_slow_call(tmp_path) as (worker, store, sub):
        assert unserved_queues(store, sub.run_id) == {}  # it answers the ask
        celery = psutil.Process(worker.proc.pid).children(recursive=True)  # in a session of their own
        signal_each(celery, signal.SIGSTOP)
        try:
            monkeypatch.setattr(queues, "RECENTLY_TAKEN_S", 3600.0)
            assert unserved_queues(store, sub.run_id) == {}  # it answers no ask, but it took the queue's work
            monkeypatch.setattr(queues, "RECENTLY_TAKEN_S", 0.0)
            # its take is past the window, and its key saying it runs expires (frozen, it renews nothing)
            assert until(lambda: set(unserved_queues(store, sub.run_id)) == {"judge"}, ALIVE_TTL_S + 30)
        finally:
            signal_each(celery, signal.SIGCONT)


@pytest.mark.serial  # the worker's key must be renewed within its TTL while the test looks
def test_a_live_judge_worker_that_misses_the_ask_and_took_nothing_lately_is_not_called_unserved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge worker whose every task outlasts ``RECENTLY_TAKEN_S`` and that misses the 1 s ask (busy with its 32
    threads) was called unserved: "no worker consumes it; start one" of a worker that was scoring it. A thread of
    the worker says in the run store that it runs and which queues it consumes: the queue is served, though counted
    as unsure (a cancel watches it). Killed whole, the worker's key expires and the queue is unserved again. The ask
    is given no time to be answered and the window is set to 0, not waited out."""
    from orchestrator import queues
    from orchestrator.queues import unconsumed_queues, unserved_queues
    from ragscore_workers.alive import ALIVE_TTL_S

    with _a_judge_worker_on_a_slow_call(tmp_path) as (worker, store, sub):
        monkeypatch.setattr(queues, "CONSUMER_ASK_S", 1e-6)  # no reply comes in time: the ask is missed
        monkeypatch.setattr(queues, "RECENTLY_TAKEN_S", 0.0)  # its task outlasts the window
        unsure: set[str] = set()

        def served_by_its_key_alone() -> bool:
            """The ask missed, and the queue counted served (unsure) all the same. Tried again for a while: a
            reply may still come within the ask's 1 s read, and a key is renewed every 2 s."""
            unsure.clear()
            missed = unconsumed_queues(["judge"], queues.CONSUMER_ASK_S) == ["judge"]
            return missed and unserved_queues(store, sub.run_id, unsure=unsure) == {} and unsure == {"judge"}

        assert until(served_by_its_key_alone, 30), unsure
        kill_whole(worker)  # nothing handed back
        assert until(lambda: set(unserved_queues(store, sub.run_id)) == {"judge"}, ALIVE_TTL_S + 30)


@pytest.mark.serial  # the worker's key must be seen renewed within SILENT_RENEWED_S while the test looks
def test_the_message_a_live_worker_too_busy_to_list_it_holds_is_not_called_orphaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers were asked for 1 s which messages they hold: the one a busy worker held (a judge worker on its
    32 threads) was called orphaned once delivered ``ORPHAN_SETTLED_S`` ago, and a cancel aggregated the run while
    that worker still wrote. A worker that did not answer but whose key saying it runs is seen renewed may hold it:
    not an orphan (``silent``). Killed whole, its key is renewed no more, and the message is an orphan. The ask is
    given no time to be answered (tried again for a while: a reply may still come in time), and the call 30 s, so
    the worker still holds it when it is killed. A call once its key has gone unrenewed for ``SILENT_RENEWED_S`` does
    not wait on it."""
    from orchestrator import queues
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import ALIVE_TTL_S

    with _a_judge_worker_on_a_slow_call(tmp_path, latency_s=30.0) as (worker, store, sub):
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no reply comes in time: the ask is missed

        def unlisted_and_not_orphaned() -> bool:
            """Its call held past ORPHAN_SETTLED_S, unlisted (the ask missed), and not called orphaned."""
            found = held_messages(store, sub.run_id)
            return found.silent > 0 and not found.orphans

        assert until(unlisted_and_not_orphaned, 60)
        kill_whole(worker)  # nothing handed back
        assert until(lambda: bool(held_messages(store, sub.run_id).orphans), ALIVE_TTL_S + 30)
        began = time.monotonic()  # its key, still there, was not renewed for SILENT_RENEWED_S: not waited on again
        assert held_messages(store, sub.run_id).orphans and time.monotonic() - began < queues.SILENT_RENEWED_S / 2


def test_a_held_message_is_silent_only_where_a_renewed_key_lists_it_or_lists_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis's record of the held messages does not say which worker took one: a live worker that missed the ask
    hid, on its queue, the messages of a worker killed whole beside it (any renewed key on a queue made its settled
    messages silent). A key now lists its worker's tasks: a message it lists is silent, one no renewed key of its
    queue lists is an orphan; a key that lists none (an older worker's, or one holding more than
    ALIVE_TASKS_LISTED) keeps the rule of before, and a queue with no renewed key has orphans, as before. Every
    message is written here, settled, and the keys kept by real heartbeats with their lists given; no worker answers
    the ask."""
    from orchestrator import queues
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import ALIVE_TASKS_LISTED, alive_keys, broker_of, heartbeat

    server = RedisProcess(tmp_path / "redis").start()
    store = connect(server.url)
    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
    delivered = time.time() - 60.0
    for task_id, queue in (("listed", "cpu"), ("killed", "cpu"), ("unlisted", "embed"), ("crowded", "judge"),
                           ("alone", "code")):  # fmt: skip
        message = {"headers": {"id": task_id, "task": "ragscore.score.cpu", "run": "r-held"}, "body": ""}
        store.broker.hset("unacked", f"tag-{task_id}", json.dumps([message, queue, queue]))
        store.broker.zadd("unacked_index", {f"tag-{task_id}": delivered})
    crowd = [f"t{i}" for i in range(ALIVE_TASKS_LISTED + 1)]
    beats = [
        heartbeat(store.r, "cpu@live", lambda: ["cpu"], store.broker, held=lambda: ["listed", "other"]),
        heartbeat(store.r, "embed@older", lambda: ["embed"], store.broker, held=lambda: None),
        heartbeat(store.r, "judge@crowded", lambda: ["judge"], store.broker, held=lambda: ["crowded", *crowd]),
    ]
    try:
        assert until(lambda: len(alive_keys(store.r, broker_of(store.broker))) == 3, 30), "the keys were not written"
        found = [held_messages(store, "r-held")]

        def as_listed() -> bool:
            """The call's outcome, once every key was seen renewed in it (a loaded host may renew one late: a key
            not seen renewed makes no message silent, so a call that misses one is looked at again)."""
            found[0] = held_messages(store, "r-held")
            orphaned = sorted(orphan.queue for orphan in found[0].orphans)
            return (found[0].held, found[0].silent, orphaned) == (5, 3, ["code", "cpu"])

        assert until(as_listed, 60), found
        assert [o.delivered_at for o in found[0].orphans] == [delivered, delivered]
    finally:
        for beat in beats:
            beat.end()
        server.stop()


def test_an_orphan_is_confirmed_only_by_two_consecutive_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker too loaded to record a message it took within LISTED_AFTER_S of its delivery had a key that did not
    list it, and `ragscore status` called that message an orphan on one check (as one check, :func:`held_messages`,
    still does: seen here). An orphan is now said once two consecutive checks call it one: the first check confirms
    none; by the next, the loaded worker's key lists its message (silent), and the message no key lists (its worker
    gone) is confirmed. The messages are written here, settled; the loaded worker's key is kept by a real heartbeat
    whose list is changed between the checks; no worker answers the ask. The checks are driven one by one (the later
    ones tried again for a while: a loaded host may renew the key late)."""
    from orchestrator import queues
    from orchestrator.queues import Orphan, OrphanWatch, held_messages
    from ragscore_workers.alive import alive_keys, broker_of, heartbeat

    server = RedisProcess(tmp_path / "redis").start()
    store = connect(server.url)
    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
    delivered = time.time() - 60.0
    for task_id, queue in (("late", "cpu"), ("gone", "embed")):
        message = {"headers": {"id": task_id, "task": "ragscore.score.cpu", "run": "r-twice"}, "body": ""}
        store.broker.hset("unacked", f"tag-{task_id}", json.dumps([message, queue, queue]))
        store.broker.zadd("unacked_index", {f"tag-{task_id}": delivered})
    listed: list[str] = []
    beat = heartbeat(store.r, "cpu@loaded", lambda: ["cpu"], store.broker, held=lambda: list(listed))
    try:
        assert until(lambda: len(alive_keys(store.r, broker_of(store.broker))) == 1, 30), "the key was not written"
        watch = OrphanWatch(store, "r-twice")
        first = watch.check()
        assert (first.held, first.orphans, first.unconfirmed) == (2, [], 2), first  # one check calls both orphans
        single = held_messages(store, "r-twice")  # what status said from one check: the loaded worker's one too
        assert sorted(o.queue for o in single.orphans) == ["cpu", "embed"], single
        listed.append("late")  # the loaded worker's consumer recorded its message at last
        keys = lambda: alive_keys(store.r, broker_of(store.broker)).values()  # noqa: E731
        assert until(lambda: any("late" in (key.tasks or ()) for key in keys()), 30), list(keys())
        found = [first]

        def confirmed() -> bool:
            """The gone worker's message confirmed, the loaded worker's silent."""
            found[0] = watch.check()
            return (found[0].orphans, found[0].silent, found[0].unconfirmed) == ([Orphan(delivered, "embed", 0)], 1, 0)

        assert until(confirmed, 60), found
        assert OrphanWatch(store, "r-twice").confirmed().orphans == [Orphan(delivered, "embed", 0)]  # a one-off status
    finally:
        beat.end()
        server.stop()


def test_a_retry_waiting_on_its_countdown_is_listed_by_its_workers_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk that retries after a Redis outage waits its countdown (30 s and more) in its worker's timer, its
    message held: a worker that missed the ask of what the workers hold, its key listing only what it runs or waits
    to run, had that message called an orphan beside its own key. The key lists it too: silent. The message is sent
    with a countdown to a real cpu worker; the ask is given no time (tried again for a while: a reply may still come
    in time, and the tasks a worker waits on are in neither answer)."""
    from orchestrator import queues

    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
    _a_retry_on_its_countdown_reads(tmp_path, monkeypatch, silent=1)


def test_a_retry_waiting_on_its_countdown_of_a_worker_that_answers_the_ask_is_held_not_orphaned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that answers both asks (``active``, ``reserved``) lists neither a retry waiting on its countdown (only
    Celery's ``scheduled`` does, a third ask of about 1 s), and that message was called an orphan beside its live
    worker. Its key lists it: held by that worker, neither an orphan nor silent. The message is sent with a countdown
    to a real cpu worker that answers (tried again for a while: a loaded host may miss the ask, which makes it
    silent)."""
    _a_retry_on_its_countdown_reads(tmp_path, monkeypatch, silent=0)


def _a_retry_on_its_countdown_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent: int) -> None:
    """A message sent with a countdown to a real cpu worker, once its key lists it and it is settled (the settling time
    set to 0, not waited out), reads as held, no orphan, and ``silent`` so (tried again for a while)."""
    from orchestrator import queues
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import alive_keys, broker_of

    server, worker, store = _cpu_only(tmp_path)
    try:
        task = app.send_task("ragscore.score.cpu", args=["r-countdown", "{}", [], []], queue="cpu", countdown=600)
        keys = lambda: alive_keys(store.r, broker_of(store.broker)).values()  # noqa: E731
        assert until(lambda: any(task.id in (key.tasks or ()) for key in keys()), 60), list(keys())
        monkeypatch.setattr(queues, "ORPHAN_SETTLED_S", 0.0)
        found = [held_messages(store, "r-countdown")]

        def as_said() -> bool:
            """Held, settled, and read as said."""
            found[0] = held_messages(store, "r-countdown")
            return (found[0].held, found[0].silent, found[0].orphans, found[0].unsettled) == (1, silent, [], 0)

        assert until(as_said, 60), found
    finally:
        worker.stop()
        server.stop()


def test_a_worker_that_answers_one_ask_alone_is_told_by_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers are asked which tasks they run (``active``) and which wait for their pool (``reserved``): a worker
    that answered only one (the other too late) listed part of what it holds, yet counted as answered, so its key was
    left unread and a message it held was called an orphan. Only a worker that answers both counts as answered. The
    worker here is a real remote-control node of the broker named as the key's worker, answering ``active`` with
    nothing at once and ``reserved`` after the ask's time; the message is written, settled, and the key kept by a real
    heartbeat that lists it."""
    from orchestrator import queues
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import alive_keys, broker_of, heartbeat

    server = RedisProcess(tmp_path / "redis").start()
    store = connect(server.url)
    monkeypatch.setattr(queues, "HELD_ASK_S", 3.0)  # ample for the answer that comes
    message = {"headers": {"id": "half", "task": "ragscore.score.cpu", "run": "r-half"}, "body": ""}
    store.broker.hset("unacked", "tag-half", json.dumps([message, "cpu", "cpu"]))
    store.broker.zadd("unacked_index", {"tag-half": time.time() - 60.0})
    asked: list[str] = []

    def active(_state: object, **_: object) -> list[object]:
        asked.append("active")
        return []

    def reserved(_state: object, **_: object) -> list[object]:
        asked.append("reserved")
        time.sleep(queues.HELD_ASK_S + 1.0)  # answered after the ask gave up
        return []

    done = threading.Event()
    connection = app.connection_for_write()
    # a mailbox of its own, bound to its own connection: its replies take none of the app's pools
    mailbox = Mailbox(app.conf.control_exchange, type="fanout", accept=["json"], serializer="json")(connection)
    node = mailbox.Node("cpu@half", handlers={"active": active, "reserved": reserved}, channel=connection.channel())
    node.listen()

    def serve() -> None:
        while not done.is_set():
            with suppress(TimeoutError):
                connection.drain_events(timeout=0.5)

    server_thread = threading.Thread(target=serve, daemon=True)
    server_thread.start()
    beat = heartbeat(store.r, "cpu@half", lambda: ["cpu"], store.broker, held=lambda: ["half"])
    try:
        assert until(lambda: len(alive_keys(store.r, broker_of(store.broker))) == 1, 30), "the key was not written"
        found = [held_messages(store, "r-half")]

        def silent() -> bool:
            """Its message silent, not orphaned (a loaded host may renew the key late: looked at again)."""
            found[0] = held_messages(store, "r-half")
            return found[0].silent == 1 and not found[0].orphans

        assert until(silent, 60), (found, asked)
        assert "active" in asked and "reserved" in asked, asked
    finally:
        beat.end()
        done.set()
        server_thread.join(10)
        connection.release()
        server.stop()


def test_held_messages_read_the_keys_saying_workers_run_only_where_a_message_may_be_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """held_messages read the keys saying the workers run (``ragscore:alive``) before every ask, though they are
    watched only for a message settled (``ORPHAN_SETTLED_S``) by its end: a call whose held messages are all fresh
    (the settling time set out of reach here, not waited for) reads none; one whose message is settled reads them."""
    from orchestrator import queues
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import ALIVE_INDEX

    def alive_reads(settled_s: float) -> list[str]:
        """The reads of the index of those keys during one call, its messages settled after ``settled_s``."""
        monkeypatch.setattr(queues, "ORPHAN_SETTLED_S", settled_s)
        seen: list[str] = []
        end = f"end-{uuid.uuid4().hex}"
        watcher = monitor_commands(store.r, seen, end)
        assert held_messages(store, sub.run_id).held
        store.r.echo(end)
        watcher.join(30)
        assert not watcher.is_alive(), "the monitor did not see the end"
        return [command for command in seen if command == f"SMEMBERS {ALIVE_INDEX}"]

    with _a_judge_worker_on_a_slow_call(tmp_path, latency_s=30.0) as (_worker, store, sub):
        assert alive_reads(3600.0) == []
        assert alive_reads(0.0)


def test_held_messages_read_only_their_own_runs_delivery_stamps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether a call's held messages may be settled by the end of the ask was read from every run's entries of
    kombu's ``unacked_index`` (one ZRANGEBYSCORE of all delivered before then: a busy broker's thousands, at each
    status check). Only the run's own are read now (a ZSCORE each), and the rule is the same: a run whose messages
    are all fresh reads no key saying workers run though another run's are settled; that other run's call does. The
    messages are written here; no worker answers the ask."""
    from orchestrator import queues
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import ALIVE_INDEX

    server = RedisProcess(tmp_path / "redis").start()
    store = connect(server.url)
    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
    now = time.time()
    for run_id, tag, at in (("r-fresh", "tag-fresh", now), ("r-old", "tag-old", now - 60.0)):
        message = {"headers": {"id": tag, "task": "ragscore.score.cpu", "run": run_id}, "body": ""}
        store.broker.hset("unacked", tag, json.dumps([message, "cpu", "cpu"]))
        store.broker.zadd("unacked_index", {tag: at})

    def commands_of(run_id: str) -> list[str]:
        """The commands one call for ``run_id`` sends."""
        seen: list[str] = []
        end = f"end-{uuid.uuid4().hex}"
        watcher = monitor_commands(store.r, seen, end)
        assert held_messages(store, run_id).held == 1
        store.r.echo(end)
        watcher.join(30)
        assert not watcher.is_alive(), "the monitor did not see the end"
        return seen

    try:
        fresh = commands_of("r-fresh")
        read = [c for c in fresh if c.startswith(("ZSCORE unacked_index", "ZRANGEBYSCORE unacked_index"))]
        assert read and all(c == "ZSCORE unacked_index tag-fresh" for c in read), fresh  # (kombu's ZRANGEs its own)
        assert f"SMEMBERS {ALIVE_INDEX}" not in fresh
        assert f"SMEMBERS {ALIVE_INDEX}" in commands_of("r-old")
    finally:
        server.stop()


@pytest.mark.serial  # the worker's key must be seen renewed within its TTL (10 s) while the cancel looks
def test_a_cancel_leaves_the_summary_to_a_live_worker_too_busy_to_answer_the_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled run whose work waits on a queue that only a key saying its worker runs counts served (the worker,
    busy with another run's calls, missed the ask) was watched until that worker wrote its summary, a minute at most
    (``SETTLE_S``), then the cancel sent its aggregation while the worker had not yet skipped its work. The key,
    seen renewed since the cancel, proves the worker lives: it skips that work and writes the summary itself, so
    the cancel returns (no "no worker answered" line) with no summary written. Once the worker is free (the other
    run cancelled too), it writes it: every item stopped."""
    from orchestrator import queues
    from orchestrator.runner import summarize_cancelled
    from ragscore_workers.alive import alive_queues, broker_of

    with _a_judge_worker_on_a_slow_call(tmp_path) as (_worker, store, busy):
        suite = load_suite(json.loads(store.meta(busy.run_id)["suite"]))
        behind = submit(tmp_path / "d.jsonl", suite, store)  # waits behind the busy run's calls, 10 s each
        # its key is written from its worker_ready, which may come after its first take: none, the queue is unserved
        assert until(lambda: "judge" in alive_queues(store.r, broker_of(store.broker)), 30), "no key says it runs"
        monkeypatch.setattr(queues, "CONSUMER_ASK_S", 1e-6)  # no reply comes in time: the ask is missed
        monkeypatch.setattr(queues, "RECENTLY_TAKEN_S", 0.0)  # its task outlasts the window
        cancel(store, behind.run_id)
        heard: list[list[str]] = []
        assert summarize_cancelled(store, behind.run_id, on_unsure=heard.append) == {}
        assert heard == [] and not store.summary_is_current(behind.run_id)
        cancel(store, busy.run_id)  # its call ends: the worker skips the rest, both runs' alike
        assert until(lambda: store.summary_is_current(behind.run_id), 120), "the worker never wrote the summary"
        summary = store.summary(behind.run_id)
        assert summary is not None and summary.state == "cancelled"
        stopped = summary.metrics["answer_accuracy"]
        assert (stopped.n, stopped.errors, stopped.stopped) == (0, 0, 4), stopped


def test_a_take_stamped_ahead_of_this_hosts_clock_does_not_make_its_queue_served(tmp_path: Path) -> None:
    """kombu stamps a take with its worker host's clock: one an hour ahead kept the queue of a worker killed whole
    served for that hour. A take within the window either side of this host's clock counts; past it, none does."""
    from orchestrator.queues import RECENTLY_TAKEN_S, recently_taken

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        now = time.time()
        for tag, queue, at in (("ahead", "judge", now + 3600.0), ("skewed", "embed", now + RECENTLY_TAKEN_S / 2),
                               ("old", "code", now - 3600.0), ("just", "cpu", now - 1.0)):  # fmt: skip
            store.broker.hset("unacked", tag, json.dumps([{"headers": {}}, queue, queue]))
            store.broker.zadd("unacked_index", {tag: at})
        assert recently_taken(store, ["judge", "embed", "code", "cpu"], RECENTLY_TAKEN_S) == {"embed", "cpu"}
        assert recently_taken(store, ["judge", "code"], RECENTLY_TAKEN_S) == set()
    finally:
        server.stop()


def test_a_worker_says_it_runs_for_its_own_brokers_database_only(tmp_path: Path) -> None:
    """The embedded mode's lanes share one store, each a database of queues of its own: a key saying a worker runs
    that named its queues alone made a lane's ``cpu`` queue served by another lane's cpu worker. Its key goes as the
    worker's shutdown begins (it takes no more work)."""
    from ragscore_workers.alive import Broker, alive_queues, broker_of, heartbeat
    from ragscore_workers.store import redis_client

    server = RedisProcess(tmp_path / "redis").start()
    try:
        client = redis_client(server.url)
        beat = heartbeat(client, "cpu@host", lambda: ["cpu"], broker=client)
        try:
            assert until(lambda: alive_queues(client, broker_of(client)) == {"cpu"}, 30)
            assert alive_queues(client, Broker(1, broker_of(client).server)) == set()
        finally:
            beat.end()
            beat.join(30)
        assert alive_queues(client, broker_of(client)) == set()
    finally:
        server.stop()


def test_a_worker_says_it_runs_for_its_own_broker_server_only(tmp_path: Path) -> None:
    """Two clusters whose brokers are two Redis servers (each its queues in database 0) share one run store: a key
    that named the broker's database alone made cluster A's ``cpu`` queue served by cluster B's worker. A real
    worker of B names its broker's server (its ``run_id``); an older worker's key (no server) keeps its meaning,
    served on any server of its database, and so does a key of a worker, or a read by a status, whose broker user
    may not run INFO."""
    from ragscore_workers.alive import ALIVE_INDEX, ALIVE_PREFIX, Broker, alive_queues, broker_of
    from ragscore_workers.store import redis_client

    a, b, kept = (RedisProcess(tmp_path / name).start() for name in ("a", "b", "store"))
    worker = WorkerProcess(b.url, "cpu", tmp_path / "home", concurrency=1)
    worker.env["RAGSCORE_STORE_URL"] = kept.url
    try:
        store, on_a, on_b = redis_client(kept.url), redis_client(a.url), redis_client(b.url)
        worker.start()
        assert until(lambda: alive_queues(store, broker_of(on_b)) == {"control", "cpu"}, 120)
        assert alive_queues(store, broker_of(on_a)) == set()
        store.set(f"{ALIVE_PREFIX}older", json.dumps({"worker": "embed@old", "queues": ["embed"], "database": 0}))
        store.sadd(ALIVE_INDEX, "older")
        assert alive_queues(store, broker_of(on_a)) == {"embed"}
        assert alive_queues(store, broker_of(on_b)) == {"control", "cpu", "embed"}
        redis.Redis(port=a.port).acl_setuser("no-info", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                                             commands=["+@all", "-info"])  # fmt: skip
        refused = redis_client(f"redis://no-info:pw@127.0.0.1:{a.port}/0")
        assert broker_of(refused) == Broker(0, None)
        assert alive_queues(store, broker_of(refused)) == {"control", "cpu", "embed"}  # as before: the database alone
    finally:
        worker.stop()
        for server in (a, b, kept):
            server.stop()


def test_a_workers_key_follows_its_broker_through_a_restart_and_where_info_is_refused(tmp_path: Path) -> None:
    """A restarted broker has a new ``run_id``: the key names it at its next renewal, and no worker's queue stays
    unserved for it. A broker user refused INFO writes a key without a server, which keeps today's meaning."""
    from ragscore_workers.alive import alive_queues, broker_of, heartbeat
    from ragscore_workers.store import redis_client

    broker, kept = RedisProcess(tmp_path / "broker").start(), RedisProcess(tmp_path / "store").start()
    try:
        store, on_broker = redis_client(kept.url), redis_client(broker.url, read_timeout_s=1.0, retries=0)
        beat = heartbeat(store, "cpu@host", lambda: ["cpu"], broker=on_broker)
        try:
            before = broker_of(on_broker)
            assert until(lambda: alive_queues(store, before) == {"cpu"}, 30)
            broker.stop()
            broker.start()
            after = broker_of(on_broker)
            assert after.server != before.server
            assert until(lambda: alive_queues(store, after) == {"cpu"}, 30)
            redis.Redis(port=broker.port).acl_setuser("no-info", enabled=True, passwords=["+pw"], keys=["*"],
                                                      channels=["*"], commands=["+@all", "-info"])  # fmt: skip
        finally:
            beat.end()
            beat.join(30)
        refused = redis_client(f"redis://no-info:pw@127.0.0.1:{broker.port}/0")
        beat = heartbeat(store, "judge@host", lambda: ["judge"], broker=refused)
        try:
            assert until(lambda: alive_queues(store, after) == {"judge"}, 30)  # named by its database alone
        finally:
            beat.end()
            beat.join(30)
    finally:
        kept.stop()
        broker.stop()


def test_a_workers_key_says_its_pools_processes_not_its_concurrency_option(tmp_path: Path) -> None:
    """The processes a key says (a cluster's dry run multiplies the encode rate by them) are its pool's: a solo pool
    runs one whatever ``-c`` says (Celery's concurrency, the host's CPUs when unset), a prefork pool its ``-c``."""
    from ragscore_workers.alive import alive_processes, broker_of
    from ragscore_workers.store import redis_client

    server = RedisProcess(tmp_path / "redis").start()
    solo = WorkerProcess(server.url, "embed", tmp_path / "home")
    solo.args = [sys.executable, "-m", "celery", "-A", "ragscore_workers.app", "worker", "-Q", "embed,control",
                 "-P", "solo", "-c", "3", "-n", "solo@%h"]  # fmt: skip
    forked = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=2)
    try:
        client = redis_client(server.url)
        solo.start()
        forked.start()
        assert until(lambda: alive_processes(client, broker_of(client), "cpu") == 2, 120)
        assert until(lambda: alive_processes(client, broker_of(client), "control") == 3, 120)
        assert alive_processes(client, broker_of(client), "embed") == 1
    finally:
        solo.stop()
        forked.stop()
        server.stop()


def _held_by_a_worker_gone(tmp_path: Path) -> tuple[RedisProcess, RunStore, str]:
    """A run of 2 rows (one message) that a worker killed whole holds (kombu's ``unacked`` entries, delivered a
    minute ago, moved there from their queues as its BRPOP and delivery would): orphans, and no worker runs."""
    server = RedisProcess(tmp_path / "redis").start()
    store = connect(server.url)
    sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(2, seed=3)), load_suite({"metrics": ["exact_match"]}),
                 store)  # fmt: skip
    for queue in json.loads(store.meta(sub.run_id)["queues"]):
        while (raw := store.broker.rpop(queue)) is not None:
            tag = uuid.uuid4().hex
            store.broker.hset("unacked", tag, json.dumps([json.loads(raw), queue, queue]))
            store.broker.zadd("unacked_index", {tag: time.time() - 60.0})
    return server, store, sub.run_id


class _Polled(Exception):
    """Ends a wait once it made the polls a test looks at."""


def test_a_polls_held_note_and_stall_decision_read_one_check_of_the_held_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's wait checked the held messages twice in a poll where orphans exist: for its held note, then for its
    stall decision, the second waiting ``ORPHAN_CONFIRM_S`` again. The stall decision reads the note's check now. The
    checks are counted where each asks the workers what they hold (two broadcasts: the broker's PUBLISH), against a
    one-off confirmation's (two checks)."""
    from orchestrator import queues
    from orchestrator.queues import OrphanWatch

    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no worker answers: no wait for one
    server, store, run_id = _held_by_a_worker_gone(tmp_path)
    try:
        client = redis.Redis.from_url(server.url)
        client.config_resetstat()
        assert len(OrphanWatch(store, run_id).confirmed().orphans) == 1
        confirming = client.info("commandstats")["cmdstat_publish"]["calls"]
        client.config_resetstat()
        polls = iter(range(1))  # the first poll is progress (none was read before it); the second is idle

        def poll_ended() -> None:
            if next(polls, None) is None:
                raise _Polled

        with pytest.raises(_Polled):  # its held note is due at once, its stall decision too
            wait(store, run_id, stall_s=0, consumer_check_s=0, check=poll_ended)
        asked = client.info("commandstats")["cmdstat_publish"]["calls"]
    finally:
        server.stop()
    assert asked == confirming, (asked, confirming)  # one confirmation in the poll, not a third check


def _watched(
    server: RedisProcess, store: RunStore, run_id: str, capsys: pytest.CaptureFixture[str], done: Callable[[str], bool]
) -> str:
    """What ``ragscore status --watch`` of ``run_id`` (refreshed every 10 ms, in a thread) printed once ``done`` with
    it (60 s at most), then ended by its run's end (its state put back after)."""
    from orchestrator.cli import status

    watch = threading.Thread(target=status, args=(run_id,), daemon=True,
                             kwargs={"broker": server.url, "watch": True, "interval": 0.01})  # fmt: skip
    said: list[str] = []

    def printed() -> str:
        said.append(capsys.readouterr().out)
        return "".join(said)

    state = store.meta(run_id)["state"]
    try:
        watch.start()
        reached = until(lambda: done(printed()), 60)
    finally:
        store.r.hset(store.key(run_id, "meta"), "state", "cancelled")  # the watch ends with its run
        watch.join(30)
        store.r.hset(store.key(run_id, "meta"), "state", state)
    assert reached, printed()
    assert not watch.is_alive(), "status --watch went on after its run ended"
    return printed()


def test_a_watched_status_is_not_held_for_the_check_that_confirms_orphans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ragscore status --watch`` froze at each consumer check where orphans exist: its first check of the held
    messages found them unconfirmed, and the second waited ``RAGSCORE_ORPHAN_CONFIRM_S`` (~4 s) inside the refresh.
    It froze too where a consumer check came within that wait of the check before (a follow-up still finding new
    orphans): that check slept the rest of the wait. A watch makes the check that confirms them at a later refresh
    now, its view kept meanwhile. Here the wait for it is an hour and the consumer checks come at each refresh: the
    watch goes on refreshing (no orphan said yet); once that wait is a moment, a refresh confirms them."""
    from orchestrator import queues

    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 0.0)  # a check at each refresh: the second within the wait
    monkeypatch.setenv("RAGSCORE_ORPHAN_CONFIRM_S", "3600")
    server, store, run_id = _held_by_a_worker_gone(tmp_path)
    orphaned = "held by a worker that stopped"
    try:
        # held an hour at the second refresh without the change
        said = _watched(server, store, run_id, capsys, lambda out: out.count(run_id) >= 5)  # past the first check
        assert orphaned not in said  # unconfirmed yet: nothing said of them
        monkeypatch.setenv("RAGSCORE_ORPHAN_CONFIRM_S", "0.01")  # a later refresh's check confirms them
        _watched(server, store, run_id, capsys, lambda out: orphaned in out)
    finally:
        server.stop()


def test_a_check_a_watchs_refresh_later_confirms_orphans_though_the_confirm_wait_is_a_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check's orphans confirmed only a check begun within ``ORPHAN_RECENT_S`` of its end, scaled to
    ``RAGSCORE_ORPHAN_CONFIRM_S``: a wait of 0.5 s left 1.5 s, less than a watch's refreshes (2 s apart, say), whose
    every check then started afresh and confirmed none. Scaled up only now: a follow-up a second later confirms."""
    from orchestrator import queues
    from orchestrator.queues import OrphanWatch

    monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no worker answers: no wait for one
    monkeypatch.setenv("RAGSCORE_ORPHAN_CONFIRM_S", "0.01")
    server, store, run_id = _held_by_a_worker_gone(tmp_path)
    try:
        watch = OrphanWatch(store, run_id)
        first = watch.check()
        assert not first.orphans and first.unconfirmed == 1, first
        time.sleep(1.0)  # a refresh later: 100 times the confirm wait, well within the default ORPHAN_RECENT_S
        assert watch.follow_up_due()
        assert len(watch.check().orphans) == 1
    finally:
        server.stop()


def test_a_short_lived_workers_key_does_not_cut_the_index_of_a_longer_lived_killed_ones(tmp_path: Path) -> None:
    """Each renewal of a worker's key made the index of the keys (``ragscore:alive``) expire in that key's TTL: with
    ``RAGSCORE_ALIVE_TTL_S`` read by each worker, one with a 10 s key cut the index short of the hour of another's,
    killed whole, whose key then went unlisted (its held messages read as nobody's) though it lives. The index's
    expiry is only made longer now. The long-lived key is kept by a process killed with SIGKILL once it is written."""
    from ragscore_workers.alive import ALIVE_INDEX, alive_keys, broker_of, heartbeat

    server = RedisProcess(tmp_path / "redis").start()
    keeper = ("import sys, time, redis\nfrom ragscore_workers.alive import heartbeat\n"
              "client = redis.Redis.from_url(sys.argv[1])\n"
              "heartbeat(client, 'cpu@doomed', lambda: ['cpu'], client, ttl_s=3600)\ntime.sleep(600)\n")  # fmt: skip
    doomed = subprocess.Popen([sys.executable, "-c", keeper, server.url], env=os.environ | {"PYTHONPATH": str(ROOT)})
    try:
        store = connect(server.url)

        def workers() -> dict[str, int]:
            return {key.worker: key.ttl_s for key in alive_keys(store.r, broker_of(store.broker)).values()}

        assert until(lambda: workers() == {"cpu@doomed": 3600}, 120), workers()
        doomed.kill()
        doomed.wait(timeout=30)
        short = heartbeat(store.r, "cpu@short", lambda: ["cpu"], store.broker, ttl_s=10)
        assert until(lambda: "cpu@short" in workers(), 60), workers()
        short.end()
        short.join(30)
        assert not short.alive()
        assert workers() == {"cpu@doomed": 3600}
        assert store.r.ttl(ALIVE_INDEX) > 600, store.r.ttl(ALIVE_INDEX)  # not the short key's 10 s
    finally:
        doomed.kill()
        doomed.wait(timeout=30)
        server.stop()
