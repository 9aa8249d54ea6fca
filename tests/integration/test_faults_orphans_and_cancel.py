"""Faults: the messages a killed worker held (orphans, told from a live worker's), and runs cancelled or followed by
another run after such a kill: the summary is written, the next run ends, no ETA before the redelivery."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
import redis

from orchestrator.runner import Submitted, connect, submit, wait, write_results
from orchestrator.suite import load_suite
from ragscore_workers.counts import counted
from ragscore_workers.store import RunStore

from ..support import (
    ROOT,
    HookedProgress,
    RedisProcess,
    WorkerProcess,
    kill_whole,
    make_rows,
    until,
    write_jsonl,
)
from .faults import SUITE

pytestmark = pytest.mark.integration  # timed assertions only are marked serial (see .faults)


def test_status_says_the_held_work_of_a_killed_worker_beside_a_live_one_too_busy_to_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cpu workers on one queue, one killed whole while it held chunks, the other alive and scoring: the live one,
    missing the ask of what the workers hold (as a busy one does; here the ask is given no time), renewed its key
    saying it runs and consumes cpu, which made every settled message of cpu silent, the killed one's too: status
    said no held work, for the 15 minutes of the visibility timeout. Its key lists the tasks it holds: the killed
    one's messages are orphans, the live one's silent."""
    import tests.plugins.slow  # noqa: F401  (registers slow_exact here, as RAGSCORE_PLUGINS does in the worker)
    from orchestrator import queues
    from orchestrator.queues import ORPHAN_SETTLED_S, held_messages

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    doomed, alive = _doomed_and_alive(server, tmp_path)
    try:
        rows = [{"id": f"q{i}", "question": "q?", "answer": "a", "metadata": {"sleep_ms": 1000}} for i in range(200)]
        store = connect(server.url)
        suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": 15}})  # 15 s a chunk
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), suite, store)
        assert until(lambda: store.broker.hlen("unacked") > 0, 300), "the doomed worker never took a chunk"
        kill_whole(doomed)
        killed = {tag: store.broker.zscore("unacked_index", tag) for tag in store.broker.hkeys("unacked")}
        alive.start()
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no reply comes in time: the ask is missed
        time.sleep(ORPHAN_SETTLED_S)

        def the_live_ones_held_work_silent() -> bool:
            """The live worker holds a settled chunk, unlisted (it missed the ask), and not called orphaned."""
            found[0] = held_messages(store, sub.run_id)
            return found[0].silent > 0

        found = [held_messages(store, sub.run_id)]
        assert until(the_live_ones_held_work_silent, 120), (found, store.progress(sub.run_id))
        assert sorted(o.delivered_at for o in found[0].orphans) == sorted(killed.values()), (found, killed)
        items = sum(o.items for o in found[0].orphans)
        assert {o.queue for o in found[0].orphans} == {"cpu"} and 0 < items <= 15 * len(killed), found
    finally:
        kill_whole(alive)
        server.stop()


def _slow_run(tmp_path: Path, store: RunStore, rows: int, sleep_ms: int, chunk: int) -> Submitted:
    """A run of ``rows`` rows of ``slow_exact`` (``sleep_ms`` each, ``chunk`` a chunk) submitted to ``store``: its
    workers need RAGSCORE_PLUGINS=tests.plugins.slow."""
    import tests.plugins.slow  # noqa: F401  (registers slow_exact here, as RAGSCORE_PLUGINS does in the worker)

    data = [{"id": f"q{i}", "question": "q?", "answer": "a", "metadata": {"sleep_ms": sleep_ms}} for i in range(rows)]
    suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": chunk}})
    return submit(write_jsonl(tmp_path / "d.jsonl", data), suite, store)


def test_a_killed_workers_messages_are_orphans_though_it_was_started_again_under_its_name_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed whole and started again at once under its name (same host, same -n: a supervisor's restart)
    answers the ask of what the workers hold in its dead twin's stead, and the key the dead one left (its TTL not run
    out) lists what it held: a worker that answered was taken to hold what a key of its name lists, so those messages
    read as held by the live twin, and a run's wait did not send their work again. Only a key seen renewed tells what
    its worker holds now. The dead worker's key lives an hour (``RAGSCORE_ALIVE_TTL_S``), as the default 10 s does on
    a fast host where the twin's boot is shorter (here it may outlast them): it is still there once the twin answers;
    then the run's wait sends the work again and the twin scores it."""
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import alive_keys, broker_of

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    doomed, twin = _doomed_and_alive(server, tmp_path, doomed_alive_ttl_s=3600)
    try:
        store = connect(server.url)
        sub = _slow_run(tmp_path, store, rows=6, sleep_ms=1000, chunk=2)  # 3 chunks, all taken by the doomed worker
        keys = lambda: alive_keys(store.r, broker_of(store.broker))  # noqa: E731
        assert until(lambda: any(len(key.tasks or ()) == 3 for key in keys().values()), 300), "never took them"
        kill_whole(doomed)
        ((dead, its),) = keys().items()
        killed = sorted(cast(float, store.broker.zscore("unacked_index", tag)) for tag in store.broker.hkeys("unacked"))
        assert its.tasks and its.ttl_s == 3600 and len(killed) == 3, (its, killed)
        twin.start()
        assert until(lambda: any(name != dead for name in keys()), 120), "the twin never said it runs"
        assert {key.worker for name, key in keys().items() if name != dead} == {its.worker}, "another name"
        assert dead in keys(), "the dead worker's key expired"  # it lists the tasks the dead worker held
        found = held_messages(store, sub.run_id)
        assert sorted(o.delivered_at for o in found.orphans) == killed, (found, killed)
        summary = wait(store, sub.run_id, timeout_s=120, stall_s=5)
        assert (summary.state, summary.metrics["slow_exact"].n) == ("finished", 6), summary
    finally:
        twin.stop()
        server.stop()


@pytest.mark.serial  # timed: checks timed against ORPHAN_RECENT_S
def test_a_live_workers_messages_are_not_orphans_for_one_read_of_its_key_missing_and_a_dead_ones_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker too busy to answer the ask of what the workers hold (here the ask is given no time) is told by its
    key, renewed every RENEW_S; one slow to renew it (a GC pause, a loaded host) had its messages called orphans on
    one check, and a run's wait (held_by_live_workers) sent their work again while it still ran them, as a cancel
    (settled_orphans) wrote the summary without them. Orphans are now those two consecutive checks, a renewal apart,
    agree on: the worker's key is deleted once (it writes it again at its next renewal) before each call. The wait's
    progress note (what workers that are gone hold) read one check alone and named them while the wait kept them: it
    reads the wait's watch now. A `ragscore status` that finds no orphans does not say it checks again. Killed whole,
    its messages are orphans, and the note names them; a check ended long ago (ORPHAN_RECENT_S) does not confirm a
    fresh one, and a check that took longer than that is confirmed by the next all the same."""
    from orchestrator import queues
    from orchestrator.queues import (
        ORPHAN_CONFIRM_S,
        ORPHAN_SETTLED_S,
        OrphanWatch,
        held_by_live_workers,
        settled_orphans,
    )
    from ragscore_workers.alive import alive_keys, broker_of

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    worker, _never_started = _doomed_and_alive(server, tmp_path)
    try:
        store = connect(server.url)
        sub = _slow_run(tmp_path, store, rows=2, sleep_ms=120_000, chunk=1)  # it runs one, holds the other
        keys = lambda: alive_keys(store.r, broker_of(store.broker))  # noqa: E731
        assert until(lambda: any(len(key.tasks or ()) == 2 for key in keys().values()), 300), "never took them"
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no reply comes in time: the ask is missed
        time.sleep(ORPHAN_SETTLED_S)
        assert until(lambda: held_by_live_workers(store, sub.run_id), 60), "its messages read as orphans"

        def key_missing() -> None:
            assert until(lambda: len(keys()) == 1, 30), "its key was not renewed"  # after a deletion before
            store.r.delete(*keys())  # missing for a read: renewed at its next renewal

        for decides in (held_by_live_workers, lambda *args: not settled_orphans(*args)):
            key_missing()
            assert decides(store, sub.run_id)
        assert _held_note_of(store, sub.run_id, key_missing) == ""
        alive = _cli(server, "status", sub.run_id)  # its worker answers: no orphans, no second check to say
        assert alive.returncode == 0 and "checking again" not in alive.stderr, alive.stderr
        kill_whole(worker)
        assert until(lambda: not held_by_live_workers(store, sub.run_id), 60), "the killed one's held by the living"
        assert len(settled_orphans(store, sub.run_id)) == 2
        monkeypatch.setattr(queues, "ORPHAN_RECENT_S", ORPHAN_CONFIRM_S + 1)  # not 3 times as long: a faster test
        watch = OrphanWatch(store, sub.run_id)
        assert watch.check().unconfirmed == 2
        time.sleep(queues.ORPHAN_RECENT_S + 1)  # the first check's orphans are no longer recent
        found = watch.check()
        assert (found.orphans, found.unconfirmed) == ([], 2), found  # it starts afresh
        assert len(watch.check().orphans) == 2  # the next, a renewal after it, confirms them
        # two asks nobody answers: checks of over 6 s, each longer than ORPHAN_RECENT_S
        monkeypatch.setattr(queues, "HELD_ASK_S", (queues.ORPHAN_RECENT_S + 1) / 2)
        found = OrphanWatch(store, sub.run_id).confirmed()
        assert (len(found.orphans), found.unconfirmed) == (2, 0), found  # the second, at once, confirms the first's
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
        said = _held_note_of(store, sub.run_id, lambda: None)
        assert said == "2 messages held by a worker that is gone, sent again at 3600 s without progress", said
    finally:
        worker.stop()
        server.stop()


class _StopWaiting(Exception):
    """Ends the wait of :func:`_held_note_of`."""


class _HeldNotes(HookedProgress):
    """A progress view that shows nothing and keeps what the run's wait says workers that are gone hold."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[str] = []

    def held(self, text: str) -> None:
        self.notes.append(text)


def _held_note_of(store: RunStore, run_id: str, before: Callable[[], None]) -> str:
    """What the run's wait says workers that are gone hold at its first poll without progress (its held note is due
    at once), ``before`` called at the end of the poll before it; the wait ends after."""
    view, calls = _HeldNotes(), iter([before])

    def check() -> None:
        next(calls, _stop)()

    with pytest.raises(_StopWaiting):
        wait(store, run_id, view, stall_s=3600, consumer_check_s=0, check=check)
    (note,) = view.notes
    return note


def _stop() -> None:
    raise _StopWaiting


def _doomed_and_alive(
    server: RedisProcess, tmp_path: Path, doomed_alive_ttl_s: int | None = None
) -> tuple[WorkerProcess, WorkerProcess]:
    """Two cpu workers with a 15-minute visibility timeout: the first started (the run's only worker until
    :func:`_kill_while_it_holds_work` kills it; its key saying it runs kept ``doomed_alive_ttl_s`` unless renewed,
    None: the default), the second to start after."""
    doomed = WorkerProcess(server.url, "cpu", tmp_path / "h1", concurrency=2)
    alive = WorkerProcess(server.url, "cpu", tmp_path / "h2", concurrency=1)
    for worker in (doomed, alive):
        worker.env["RAGSCORE_VISIBILITY_TIMEOUT_S"] = "900"
    if doomed_alive_ttl_s is not None:
        doomed.env["RAGSCORE_ALIVE_TTL_S"] = str(doomed_alive_ttl_s)
    return doomed.start(), alive


@dataclass
class _SentToADoomedWorker:
    """A run of 6,000 rows (:data:`SUITE`) submitted to ``server``, whose only worker is ``doomed`` (a second one,
    ``alive``, not started yet: :func:`_doomed_and_alive`)."""

    server: RedisProcess
    store: RunStore
    sub: Submitted
    doomed: WorkerProcess
    alive: WorkerProcess


@contextmanager
def _submitted_to_a_doomed_worker(tmp_path: Path) -> Iterator[_SentToADoomedWorker]:
    """Start a Redis and :func:`_doomed_and_alive` workers, and submit a run of 6,000 rows; stop them all after."""
    server = RedisProcess(tmp_path / "redis").start()
    doomed, alive = _doomed_and_alive(server, tmp_path)
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=3))
        store = connect(server.url)
        yield _SentToADoomedWorker(server, store, submit(data, load_suite(SUITE), store), doomed, alive)
    finally:
        alive.stop()
        doomed.stop()
        server.stop()


def _await_held_work(store: RunStore, run_id: str) -> None:
    """Until the run's workers have scored some of it (1,000 outputs) and hold messages of it (in flight or
    prefetched)."""
    assert until(lambda: store.progress(run_id).get("done", 0) >= 1000 and store.broker.hlen("unacked") > 0,
                 300), "no scoring"  # fmt: skip


def _remote_control_asks(broadcasts: redis.client.PubSub, method: str) -> int:
    """How many of Celery's remote control broadcasts ``broadcasts`` heard ask the workers ``method`` (kombu's message
    on the pidbox channel: its body, base64, names the method)."""
    asks = 0
    while (heard := broadcasts.get_message(timeout=1.0)) is not None:
        message = json.loads(heard["data"])
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        asks += json.loads(body).get("method") == method
    broadcasts.close()
    return asks


def _cli(server: RedisProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``ragscore ARGS`` against ``server`` (a 15-minute visibility timeout), its output captured."""
    env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "RAGSCORE_VISIBILITY_TIMEOUT_S": "900"}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)  # fmt: skip


def _kill_while_it_holds_work(store: RunStore, run_id: str, doomed: WorkerProcess, then_start: WorkerProcess) -> None:
    """Kill ``doomed``, the run's only worker so far, whole once it has scored some of the run and holds messages
    of it (its chunks in flight and prefetched), then start ``then_start``. With both serving from the start, the
    run could end before the kill (a few seconds of cpu work), leaving the killed worker holding nothing."""
    _await_held_work(store, run_id)
    kill_whole(doomed)
    assert store.progress(run_id).get("done", 0) < store.progress(run_id).get("total", 0), "it ended before the kill"
    then_start.start()
    assert until(lambda: _serving(1), 120), "the second worker did not start"


def _serving(n: int) -> bool:
    """``n`` Celery workers (or more) answer the orchestrator's app (each ``ragscore worker --queues cpu`` runs one)."""
    from ragscore_workers.app import app

    return len(app.control.inspect(timeout=1.0).active_queues() or {}) >= n


@pytest.mark.serial  # timed: within 120 s
def test_cancel_of_a_run_a_killed_worker_holds_messages_of_writes_its_summary_soon(tmp_path: Path) -> None:
    """A worker killed whole keeps the messages it held out of every queue until the visibility timeout (900 s
    here): no live worker could skip them, so the cancelled run's chord never ended and `ragscore cancel` left it
    without a summary for 15 minutes (`results` said "try again shortly")."""
    from orchestrator.queues import held_messages

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        server, store, sub, doomed, alive = sent.server, sent.store, sent.sub, sent.doomed, sent.alive
        _kill_while_it_holds_work(store, sub.run_id, doomed, then_start=alive)
        said = _cli(server, "cancel", sub.run_id)
        assert said.returncode == 0, said.stderr
        # soon: far below the 900 s after which Redis would hand the dead worker's messages to the live one
        assert until(lambda: store.summary_is_current(sub.run_id), 120), said.stderr
        orphans = held_messages(store, sub.run_id).orphans
        assert orphans, "the killed worker's messages are still held: the summary did not wait for them"
        assert "held by a worker that is gone" in " ".join(said.stderr.split()), said.stderr
        summary = write_results(store, sub.run_id, tmp_path / "out")
        assert summary.state == "cancelled" and summary.items == 6000
        for name, metric in summary.metrics.items():  # every item counted: scored, unscorable or stopped
            assert metric.n + metric.errors + metric.unscorable == 6000, (name, metric)
            assert metric.stopped > 0, (name, metric)  # the killed worker's prefetched chunks, never started
        ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
        assert ids == [f"q{i}" for i in range(6000)]


@pytest.mark.serial  # timed: a rate of asks
def test_a_cancel_right_after_the_only_worker_of_a_queue_was_killed_summarizes_once_the_queue_counts_unserved(
    tmp_path: Path,
) -> None:
    """A queue a worker took a message of in the last ``RECENTLY_TAKEN_S`` s counts as served: cancelled at once
    after the kill -9 of its only worker, the run's queue counted served for the whole settle (60 s), as that dead
    worker's last take stayed its consumer. The settle reads the unserved queues again at each poll (as wait() does):
    once the take is old, the queue is unserved, the summary is written, and the queue is said as unserved. It asks
    the workers which queues they serve (a broadcast to every worker) every ``UNSERVED_RECHECK_S`` at most, not at
    each 1 s poll."""
    from orchestrator.runner import UNSERVED_RECHECK_S, cancel, summarize_cancelled

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        store, sub, doomed = sent.store, sent.sub, sent.doomed
        _await_held_work(store, sub.run_id)
        kill_whole(doomed)  # the only cpu worker: its queue is left with nobody
        cancel(store, sub.run_id)
        heard: list[dict[str, int]] = []
        returned: dict[str, int] = {}
        took: list[float] = []
        broadcasts = store.broker.pubsub()  # Celery's remote control: its asks to every worker
        broadcasts.psubscribe("*.celery.pidbox")
        assert (broadcasts.get_message(timeout=30) or {}).get("type") == "psubscribe"

        def summarize() -> None:  # a settle far longer than this test waits: it must end because cpu is unserved
            began = time.monotonic()
            returned.update(summarize_cancelled(store, sub.run_id, settle_s=3600, on_unserved=heard.append))
            took.append(time.monotonic() - began)

        settling = threading.Thread(target=summarize, daemon=True)
        settling.start()
        settling.join(300)
        assert not settling.is_alive(), "the settle waited on a queue whose only worker is dead"
        asks = _remote_control_asks(broadcasts, "active_queues")
        assert asks <= 1 + took[0] / UNSERVED_RECHECK_S, (asks, took)  # its first ask, then one each 5 s at most
        assert store.summary_is_current(sub.run_id)
        assert set(returned) == {"cpu"} and returned["cpu"] > 0, returned
        assert heard and {q for said in heard for q in said} == {"cpu"}, heard  # said to the user, as before the wait
        summary = write_results(store, sub.run_id, tmp_path / "out")
        assert summary.state == "cancelled" and summary.items == 6000
        assert all(metric.stopped > 0 for metric in summary.metrics.values()), summary.metrics


@pytest.mark.serial  # timed: the cancel must come within RECENTLY_TAKEN_S (20 s) of the kill
def test_cancel_of_a_run_whose_queue_lost_its_only_worker_holding_another_runs_messages_writes_its_summary(
    tmp_path: Path,
) -> None:
    """Two runs on one broker; the only cpu worker, killed whole, held messages of the first run only. `ragscore
    cancel` of the second found none of its messages held by a worker that is gone, and its queue served (the dead
    worker's last take, of the other run, was recent): it left the summary to workers, and none would write it. It
    now watches the queue until it counts unserved, then writes the summary, its queued items counted as stopped."""
    from orchestrator.queues import held_messages

    server = RedisProcess(tmp_path / "redis").start()
    doomed, _never_started = _doomed_and_alive(server, tmp_path)
    try:
        store = connect(server.url)
        first = submit(write_jsonl(tmp_path / "a.jsonl", make_rows(6000, seed=3)), load_suite(SUITE), store)
        _await_held_work(store, first.run_id)
        kill_whole(doomed)  # the only cpu worker, holding the first run's messages (killed before the second is sent:
        # a worker that lived on took the second's too on a loaded host), its last take recent and its key unexpired
        second = submit(write_jsonl(tmp_path / "b.jsonl", make_rows(200, seed=4)), load_suite(SUITE), store)
        assert held_messages(store, second.run_id).held == 0 and held_messages(store, first.run_id).held > 0
        said = _cli(server, "cancel", second.run_id)
        assert said.returncode == 0, said.stderr
        assert store.summary_is_current(second.run_id), said.stderr  # written by the cancel, not left to nobody
        text = " ".join(said.stderr.split())
        assert "no worker answered for 'cpu' (busy, or killed a moment ago): waiting" in text, said.stderr
        assert "no worker consumes 'cpu' (" in text, said.stderr
        summary = write_results(store, second.run_id, tmp_path / "out")
        assert summary.state == "cancelled" and summary.items == 200
        for name, metric in summary.metrics.items():  # none scored: every item stopped by the cancel
            assert (metric.n, metric.stopped) == (0, 200), (name, metric)
    finally:
        doomed.stop()
        server.stop()


def test_results_of_a_run_whose_worker_was_killed_after_its_cancel_writes_its_summary_soon(tmp_path: Path) -> None:
    """`ragscore cancel` ran while every worker lived, so it left the summary to them; then a worker holding
    messages of the run was killed whole. No live worker could skip those until the visibility timeout (900 s
    here): `ragscore results` said "try again shortly" for 15 minutes. It now writes the summary of what was
    scored, what the dead worker holds counted as stopped."""
    from orchestrator.queues import held_messages
    from orchestrator.runner import cancel

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        server, store, sub, doomed, alive = sent.server, sent.store, sent.sub, sent.doomed, sent.alive
        _await_held_work(store, sub.run_id)
        cancel(store, sub.run_id)  # what `ragscore cancel` does while no worker is gone: the workers skip the rest
        kill_whole(doomed)  # ...but this one is killed before it skipped what it holds
        alive.start()
        said = _cli(server, "results", sub.run_id, "--out", str(tmp_path / "out"))
        assert said.returncode == 1, said.stderr  # a cancelled run's reports: exit 1, as `ragscore run`
        assert "held by a worker that is gone" in " ".join(said.stderr.split()), said.stderr
        assert held_messages(store, sub.run_id).orphans, "Redis handed the dead worker's messages back first"
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert summary["state"] == "cancelled" and summary["items"] == 6000, summary
        for name, metric in summary["metrics"].items():
            assert metric["n"] + metric["errors"] + metric["unscorable"] == 6000, (name, metric)
            assert metric["stopped"] > 0, (name, metric)


@pytest.mark.serial  # timed: within 120 s
def test_the_run_following_a_run_whose_worker_was_killed_after_its_cancel_ends_soon(tmp_path: Path) -> None:
    """`ragscore run --broker URL` follows its run; it is cancelled while every worker lives (nothing left for the
    cancel to summarize), then a worker holding messages of it is killed whole. The run's wait() aggregated again
    only after its stall limit (120 s by default, 600 s here) or the 900 s visibility timeout; a cancelled run
    idle for 10 s has only its summary missing."""
    from orchestrator.runner import cancel

    with _followed_cluster_run(tmp_path) as followed:
        store, run_id = followed.store, followed.run_id
        _await_held_work(store, run_id)
        cancel(store, run_id)  # `ragscore cancel` with every worker alive: the workers would skip the rest
        kill_whole(followed.doomed)  # ...but this one is killed first, holding some of it
        followed.alive.start()
        cancelled_at = time.monotonic()
        followed.ends_cancelled()
        assert time.monotonic() - cancelled_at < 120, "the run waited for its stall limit"


@dataclass
class _Followed:
    """A `ragscore run --broker URL` following its cluster run of 6,000 rows (its output in ``log``), the run's only
    worker ``doomed`` and a second one, ``alive``, not started yet."""

    following: subprocess.Popen[bytes]
    store: RunStore
    run_id: str
    out: Path
    log: Path
    doomed: WorkerProcess
    alive: WorkerProcess
    env: dict[str, str]

    def ends_cancelled(self) -> None:
        """The `run` exits 1 with the cancelled run's reports, what the killed worker still holds counted as
        stopped."""
        from orchestrator.queues import held_messages

        assert self.following.wait(300) == 1, self.log.read_text()
        said = " ".join(self.log.read_text().split())
        assert f"run {self.run_id} was cancelled" in said and "the reports cover those only" in said, said
        assert held_messages(self.store, self.run_id).orphans, "the killed worker's messages were handed back first"
        summary = json.loads((self.out / "summary.json").read_text())
        assert summary["run_id"] == self.run_id and summary["state"] == "cancelled" and summary["items"] == 6000
        assert all(metric["stopped"] > 0 for metric in summary["metrics"].values()), summary["metrics"]


@contextmanager
def _followed_cluster_run(tmp_path: Path) -> Iterator[_Followed]:
    """Start a Redis, :func:`_doomed_and_alive` workers and a `ragscore run --broker` (stall limit 600 s) following
    its run; stop them all after."""
    server = RedisProcess(tmp_path / "redis").start()
    doomed, alive = _doomed_and_alive(server, tmp_path)
    env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "RAGSCORE_VISIBILITY_TIMEOUT_S": "900",
           "RAGSCORE_STALL_S": "600"}  # fmt: skip
    suite, out, log = tmp_path / "suite.json", tmp_path / "out", tmp_path / "run.log"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=3))
    with log.open("w") as sink:
        following = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite),
                                      "--broker", server.url, "--out", str(out), "--quiet"], cwd=ROOT, env=env,
                                     stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert until(lambda: (out / "run.json").exists(), 120), "the run was not submitted"
        run_id = json.loads((out / "run.json").read_text())["run_id"]
        yield _Followed(following, connect(server.url), run_id, out, log, doomed, alive, env)
    finally:
        if following.poll() is None:
            following.kill()
            following.wait(10)
        alive.stop()
        doomed.stop()
        server.stop()


@pytest.mark.serial  # timed: an ETA
def test_status_of_a_run_a_killed_worker_holds_work_of_gives_no_eta_before_its_redelivery(tmp_path: Path) -> None:
    """Another worker went on and did the rest: `ragscore status` gave the held work's queue an ETA of its rate
    (seconds) while that work waited for the 15-minute visibility timeout, and the killed worker was not named."""
    import os
    import subprocess
    import sys

    from orchestrator.queues import held_messages

    from ..support import ROOT

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        server, store, sub, doomed, alive = sent.server, sent.store, sent.sub, sent.doomed, sent.alive
        _kill_while_it_holds_work(store, sub.run_id, doomed, then_start=alive)

        def only_the_dead_hold_work() -> bool:  # the live worker did every message it could take
            found = held_messages(store, sub.run_id)
            return not store.broker.llen("cpu") and found.held == len(found.orphans) > 0

        assert until(only_the_dead_hold_work, 300), "the live worker never drained the queue"
        orphans = held_messages(store, sub.run_id).orphans
        progress = store.progress(sub.run_id)
        left = progress["total:cpu"] - progress["done:cpu"]
        items = sum(o.items for o in orphans)
        # What is left is about what the killed worker holds (4 outputs an item): less where it wrote a chunk and
        # died before its ack (redelivered, that chunk skips itself), more where the kill fell between Redis's pop
        # of a message and kombu's write of it to `unacked` (lost: the run's stall check sends it again).
        assert left > 0 and items > 0, (left, items)
        env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "RAGSCORE_VISIBILITY_TIMEOUT_S": "900",
               "COLUMNS": "400"}  # fmt: skip
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", sub.run_id], capture_output=True,
                               text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        back = max(o.delivered_at for o in orphans) + 900  # when Redis hands the last of them back
        assert back - time.time() > 600, "the test's own waits took most of the visibility timeout"
        said = " ".join(shown.stdout.split())
        held = f"{counted(items, 'item')} of this run ({items:,} on cpu; {counted(len(orphans), 'message')}) " \
               f"{'is' if items == 1 else 'are'} held"  # fmt: skip
        assert f"Warning: {held} by a worker that stopped (killed, or its host lost)" in said, said
        at = time.strftime("%H:%M:%S UTC", time.gmtime(back))
        assert f"at about {at}, in " in said and "the run cannot end before then (ETA ≥)" in said, said
        for queue in ("cpu", "all"):  # no ETA sooner than the held work's redelivery (it was the rate's: seconds)
            (eta,) = re.findall(rf"│ {queue} .*│ *(\S+) │", shown.stdout)
            minutes, seconds = re.fullmatch(r"≥(\d+)m(\d+)s", eta).groups()  # type: ignore[union-attr]
            assert int(minutes) * 60 + int(seconds) >= back - time.time() - 1, eta


@pytest.mark.serial  # timed: within 300 s, not the 600 s stall limit
def test_the_run_following_a_cluster_run_a_killed_worker_holds_messages_of_ends_soon_once_cancelled(
    tmp_path: Path,
) -> None:
    """`ragscore run --broker URL` follows its run; a worker killed whole holds some of it, then `ragscore cancel`
    from another shell. The cancel writes the summary (held messages counted as stopped), and the run's wait()
    sees it: the `run` exits 1 with the cancelled run's reports, not after its stall limit (600 s here) or the
    900 s visibility timeout after which Redis hands the held messages back."""
    with _followed_cluster_run(tmp_path) as followed:
        _kill_while_it_holds_work(followed.store, followed.run_id, followed.doomed, then_start=followed.alive)
        cancelled = subprocess.run([sys.executable, "-m", "orchestrator.cli", "cancel", followed.run_id],
                                   capture_output=True, text=True, cwd=ROOT, env=followed.env, timeout=300)  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stderr
        assert "held by a worker that is gone" in " ".join(cancelled.stderr.split()), cancelled.stderr
        followed.ends_cancelled()  # soon after the cancel: far below the 600 s stall limit and the visibility timeout
