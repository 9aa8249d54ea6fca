"""Faults: aggregations and chunk writes cut off by a hung or restarted Redis: tried again once it answers, each item
counted once, the run marked failed past its bound."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.runner import Submitted, connect, submit, wait
from orchestrator.suite import load_suite
from orchestrator.terminal import summary_commands
from ragscore_workers.settings import get_settings
from ragscore_workers.store import RunStore

from ..support import (
    RedisProcess,
    WorkerProcess,
    make_rows,
    until,
    worker_said,
    write_jsonl,
)
from .faults import SUITE

pytestmark = pytest.mark.integration  # timed assertions only are marked serial (see .faults)


class _StopRedisWhen(threading.Thread):
    """Watches the store (its own client, every ~1 ms) until ``seen(client)``, then SIGSTOPs the redis-server at that
    moment; SIGCONTs it ``for_s`` later."""

    def __init__(self, server: RedisProcess, seen: Callable[[redis.Redis], bool], for_s: float) -> None:
        super().__init__(daemon=True)
        self.server, self.seen, self.for_s = server, seen, for_s
        self.client = redis.Redis(port=server.port, decode_responses=True)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.seen(self.client):
            time.sleep(0.001)
        assert self.server.proc is not None
        self.server.proc.send_signal(signal.SIGSTOP)
        self.stopped.set()
        timer = threading.Timer(self.for_s, self.server.proc.send_signal, (signal.SIGCONT,))
        timer.daemon = True  # a test that ends first sends SIGCONT itself
        timer.start()


def _cancelled(store: RunStore, tmp_path: Path) -> Submitted:
    """A run of 20,000 rows (a lease renewal's worth), cancelled before any worker took it: its aggregation, run
    in this process, reads every item."""
    from orchestrator.runner import cancel

    sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20000, seed=4)), load_suite(SUITE), store)
    cancel(store, sub.run_id)
    return sub


def _aggregated_while(
    store: RunStore,
    tmp_path: Path,
    server: RedisProcess,
    caplog: pytest.LogCaptureFixture,
    act: Callable[[redis.Redis, str], object],
) -> tuple[str, str, list[str]]:
    """A cancelled run (:func:`_cancelled`) aggregated in this process, as the worker's task calls it, while a thread
    does ``act(client, lease)`` the moment the aggregation holds its lease: the run, its lease key and what was
    logged."""
    from ragscore_workers.tasks import aggregate_in

    sub = _cancelled(store, tmp_path)
    lease = store.key(sub.run_id, "aggregating:0")
    watcher = redis.Redis(port=server.port, decode_responses=True)
    thread = threading.Thread(target=lambda: until(lambda: bool(act(watcher, lease)), 60))
    thread.start()
    with caplog.at_level(logging.WARNING):
        aggregate_in(store, sub.run_id, store.generation(sub.run_id))
    thread.join(60)
    return sub.run_id, lease, [r.getMessage() for r in caplog.records]


def _at_recovery(server: RedisProcess, run_id: str, for_s: float) -> _StopRedisWhen:
    """Stops Redis the moment wait()'s stall recovery has written ``submitting`` with the new generation (the
    resume then sends, shard by shard)."""
    meta = RunStore.key(run_id, "meta")
    return _StopRedisWhen(server, lambda r: r.hmget(meta, ["state", "generation"]) == ["submitting", "1"], for_s)


def _at_aggregation(server: RedisProcess, run_id: str, for_s: float) -> _StopRedisWhen:
    """Stops Redis the moment the run's aggregation takes its lease."""
    lease = RunStore.key(run_id, "aggregating:0")
    return _StopRedisWhen(server, lambda r: bool(r.exists(lease)), for_s)


@pytest.mark.serial  # timed: a hang of 3 s or 7 s against 2 s reads
@pytest.mark.parametrize("for_s", [3.0, 7.0], ids=["back-for-the-cancel", "hung-past-the-cancel"])
def test_a_stall_recovery_cut_off_by_a_hung_redis_is_sent_again_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, for_s: float
) -> None:
    """A stall recovery re-submits shard by shard; a Redis that stops answering part-way cut it off. Its failure
    handler then set the run's state to cancelled: a Redis hung past that write too (7 s: the resume's read and the
    cancel's, 2 s each) left the run ``submitting``, which wait() takes for progress, so it never recovered the stall
    again and waited for ever; one back in time for it (3 s) made the run cancelled, which nobody asked for. Now
    wait() sends the recovery again, a new generation, once Redis answers, and every item is scored."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        store = connect(server.url)
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(3000, seed=9))
        sub = submit(data, load_suite(SUITE), store, shard_rows=10)  # 300 shards, one chunk each: sent one by one
        assert store.broker.lpop("cpu") is not None  # the last shard's chunk, lost: its chord never ends
        watcher = _at_recovery(server, sub.run_id, for_s)
        watcher.start()
        worker.start()  # scores the 299 other shards; the recovery's resume then looks up 299 complete ones
        with caplog.at_level(logging.WARNING):
            summary = wait(store, sub.run_id, timeout_s=90, stall_s=2)
        said = [r.getMessage() for r in caplog.records]
        assert watcher.stopped.is_set(), "the stall recovery never wrote its generation"
        assert any("lost Redis (Timeout" in m for m in said), said
        assert any("re-submitting what the stall recovery it cut off left" in m for m in said), said
        assert summary.state == "finished" and store.state(sub.run_id) == "finished"
        assert store.progress(sub.run_id)["done"] == 3000 * 4, "every output scored"
        em = summary.metrics["exact_match"]
        assert summary.items == 3000 and em.errors == 0 and em.n + em.unscorable == 3000
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        worker.stop()
        server.stop()


@pytest.mark.serial  # timed: a hang of 3 s or 7 s against 2 s reads
@pytest.mark.parametrize("for_s", [3.0, 7.0], ids=["back-for-the-failed-write", "hung-past-the-lease-release"])
def test_an_aggregation_in_the_waiting_process_cut_off_by_a_hung_redis_is_tried_again_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, for_s: float
) -> None:
    """A cancelled run that no worker serves is aggregated by wait() in its own process. A Redis that stopped
    answering mid-aggregation made it a failed aggregation: one back in time for that write (3 s: the read that
    timed out, 2 s) made the run failed ("aggregate: TimeoutError"); one hung past it and the lease's release too
    (7 s) left the lease held, so every later try skipped ("another worker is aggregating") until the run failed,
    stalled. Now an outage is not a failure: wait() retries once Redis answers, its own lease taken over."""
    from orchestrator import connection, runner
    from orchestrator.runner import cancel

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    monkeypatch.setattr(runner, "CANCELLED_STALL_S", 1.0)
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20000, seed=4)), load_suite(SUITE), store)
        cancel(store, sub.run_id)  # no worker at all: wait() aggregates it here
        watcher = _at_aggregation(server, sub.run_id, for_s)
        watcher.start()
        with caplog.at_level(logging.WARNING):
            summary = wait(store, sub.run_id, timeout_s=150)
        said = [r.getMessage() for r in caplog.records]
        assert watcher.stopped.is_set(), "no aggregation took its lease"
        assert any("lost Redis (Timeout" in m for m in said), said
        left = any("its lease could not be released" in m for m in said)
        assert left == (for_s > 4.0), said  # hung past the release: the retry took over the lease left held
        assert summary.state == "cancelled" and summary.items == 20000
        assert store.state(sub.run_id) == "cancelled" and not store.meta(sub.run_id).get("error")
        assert not store.r.exists(store.key(sub.run_id, "aggregating:0")), "the lease is released"
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()


def test_a_workers_aggregation_cut_off_by_a_redis_restart_aggregates_again_once_it_answers(tmp_path: Path) -> None:
    """A worker's aggregation that a Redis restart cut off (down for longer than the worker's client retries, ~16 s)
    marked the run failed, though Redis was back seconds later: a detached run ended failed for a blip, and only
    `ragscore resume` wrote its summary. Now the worker waits the outage out and aggregates again, its own lease
    (left held) taken over, and the run finishes."""
    server = RedisProcess(tmp_path / "redis", "--appendonly", "yes").start()  # a restart keeps every item
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(3000, seed=6)), load_suite(SUITE), store)
        lease = RunStore.key(sub.run_id, "aggregating:0")
        watcher = redis.Redis(port=server.port, decode_responses=True)
        deadline = time.monotonic() + 300
        while not watcher.exists(lease):  # the moment the worker's aggregation takes its lease
            assert time.monotonic() < deadline, "no aggregation took its lease"
            time.sleep(0.001)
        # the aggregation's next call waits (it cannot finish in the ~100 ms a SIGTERM'd Redis serves on: CI's
        # aggregation did, and was never cut off); Redis still stops on its timer
        watcher.execute_command("CLIENT", "PAUSE", "60000", "ALL")
        server.stop()  # SIGTERM: Redis writes its AOF and exits, mid-aggregation

        # down until the worker's client retries (~21 s) gave up and its aggregation says it waits: a fixed sleep
        # raced them (an aggregation that paused between two calls started its retries later, and rode the outage out)
        cut_off, home = f"aggregate of run {sub.run_id} cut off: Redis did not answer", tmp_path / "home"
        assert until(lambda: worker_said(home, cut_off), 180), "the aggregation was not cut off by the outage"
        server.start()  # same port, same data
        assert until(lambda: store.state(sub.run_id) in ("finished", "failed"), 120), store.state(sub.run_id)
        assert store.state(sub.run_id) == "finished", store.meta(sub.run_id).get("error")
        summary = store.finished_summary(sub.run_id, **summary_commands(sub.run_id, None, None))
        em = summary.metrics["exact_match"]
        assert summary.items == 3000 and em.errors == 0 and em.n + em.unscorable == 3000
        assert store.progress(sub.run_id)["done"] == 3000 * 4, "every output scored"
        assert until(lambda: not store.r.exists(lease), 30), "the lease is released (once the run's keys are settled)"
        assert worker_said(home, "Redis answers again; aggregating it again"), "the worker's own aggregation, again"
    finally:
        worker.stop()
        server.stop()


@pytest.mark.serial  # timed: a 3 s hang against 2 s reads
def test_a_workers_aggregation_cut_off_by_a_redis_hung_past_its_bound_marks_the_run_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's aggregation waits an outage out for ``REDIS_OUTAGE_S`` (0 here: given up at once); past it, the
    run is marked failed, as before: its message is acked on failure, and a detached run has no wait(); left
    unmarked, such a run stayed "aggregating" for ever. Marked failed, its error says why and `ragscore resume`
    writes its summary."""
    from orchestrator import connection
    from ragscore_workers import tasks

    monkeypatch.setattr(tasks, "REDIS_OUTAGE_S", 0.0)
    server = RedisProcess(tmp_path / "redis").start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # a worker's read that times out, soon
            store = connect(server.url)
        sub = _cancelled(store, tmp_path)
        watcher = _at_aggregation(server, sub.run_id, 3.0)  # back in time for the failure's write
        watcher.start()
        with pytest.raises(redis.TimeoutError):
            tasks.aggregate_in(store, sub.run_id, store.generation(sub.run_id))  # as the worker's task calls it
        assert watcher.stopped.is_set(), "no aggregation took its lease"
        assert (store.meta(sub.run_id).get("error") or "").startswith("aggregate: TimeoutError")
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()


def test_an_aggregation_whose_lease_another_aggregator_took_stops_without_writing_its_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregation renewed its lease with a plain EXPIRE: one whose lease had lapsed (a pause longer than the
    lease) and that a re-delivered copy of its message had taken since renewed the copy's lease as its own, and both
    wrote the summary. Now a renewal checks the owner, and the aggregation that lost its lease leaves the run to the
    aggregator that holds it."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        # the moment the aggregation takes its lease, another aggregator holds it (it lapsed; a copy took it)
        run_id, lease, said = _aggregated_while(
            store, tmp_path, server, caplog, lambda r, lease: r.set(lease, "copy", xx=True, ex=120)
        )
        assert store.summary(run_id) is None and store.state(run_id) == "cancelled", "left to the copy"
        assert store.r.get(lease) == "copy", "the copy's lease is neither renewed nor released by the other"
        assert any("another aggregator holds it now" in m for m in said), said
    finally:
        server.stop()


def test_an_aggregation_whose_lease_lapsed_with_nobody_holding_it_takes_it_back_and_writes_its_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregation that paused longer than its lease, and that no copy of its message took meanwhile, takes its
    lease back at its next renewal and goes on: it writes the summary, and releases the lease at the end."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        # the moment the aggregation takes its lease, the lease lapses (a pause longer than it) and nobody takes it
        run_id, lease, said = _aggregated_while(store, tmp_path, server, caplog, lambda r, lease: r.delete(lease))
        assert any("its lease had lapsed; taken back" in m for m in said), said
        summary = store.summary(run_id)
        assert summary is not None and store.summary_is_current(run_id), "the aggregation went on to the end"
        assert store.state(run_id) == "cancelled"
        assert store.r.exists(lease) == 0, "the lease taken back is released at the end"
    finally:
        server.stop()


def test_an_aggregation_whose_lease_lapsed_while_a_copy_wrote_the_summary_does_not_write_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregation paused longer than its lease; a re-delivered copy of its message took the lease, wrote the
    summary and released the lease. The aggregation found its lease free and took it back, and wrote the summary a
    second time (and settled the run's keys again). Now it sees the summary written meanwhile and stops."""
    from orchestrator.runner import cancel
    from ragscore_workers.tasks import aggregate_in

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        # what the copy wrote: a real summary (of a small run like it, aggregated to the end beforehand)
        small = submit(write_jsonl(tmp_path / "s.jsonl", make_rows(10, seed=5)), load_suite(SUITE), store)
        cancel(store, small.run_id)
        aggregate_in(store, small.run_id, store.generation(small.run_id))
        written = store.summary(small.run_id)
        assert written is not None
        sub = _cancelled(store, tmp_path)
        copied = written.model_copy(update={"run_id": sub.run_id})
        lease = store.key(sub.run_id, "aggregating:0")
        watcher = redis.Redis(port=server.port, decode_responses=True)
        finished: list[str] = []

        def copy_finishes() -> None:  # the lease lapses; a copy takes it, writes the summary, releases it
            if until(lambda: watcher.delete(lease), 60):
                store.save_summary(sub.run_id, copied, 0)
                finished.append(store.meta(sub.run_id)["finished_at"])

        copy = threading.Thread(target=copy_finishes)
        copy.start()
        with caplog.at_level(logging.WARNING):
            aggregate_in(store, sub.run_id, store.generation(sub.run_id))  # as the worker's task calls it
        copy.join(60)
        said = [r.getMessage() for r in caplog.records]
        assert finished, "the copy wrote its summary"
        assert store.meta(sub.run_id)["finished_at"] == finished[0], f"the summary was written again: {said}"
        assert store.summary(sub.run_id) == copied.model_copy(update={"state": "cancelled"})
        assert any("its summary was written meanwhile" in m for m in said), said
        assert not any("taken back" in m for m in said), said
        assert store.r.exists(lease) == 0, "the lease is released"
    finally:
        server.stop()


def test_a_workers_chunk_waits_out_a_redis_hung_past_redis_pys_own_timeout_and_writes_its_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers' Redis client kept redis-py's own timeouts: 5 s a reply since redis-py 8, retried CLIENT_RETRIES
    times (~65 s with 8). A Redis hung longer (SIGSTOP here: connections open, nothing answers) made a chunk's call
    raise TimeoutError: the task failed, its shard's chord never ended, and a detached run stayed running. Now a
    worker waits RAGSCORE_WORKER_STORE_TIMEOUT_S (a minute) per reply, and the chunk, run as the worker's task runs
    it, ends once Redis answers, its items written. One retry here (5 s + 0.2 s + 5 s with redis-py's timeout), so
    the hang is 15 s, not over a minute."""
    from ragscore_workers import store as store_module
    from ragscore_workers import tasks

    monkeypatch.setattr(store_module, "CLIENT_RETRIES", 1)
    server = RedisProcess(tmp_path / "redis").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", server.url)
    tasks.get_store.cache_clear()  # the worker's own store client, on this Redis
    assert server.proc is not None
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(25, seed=7)), load_suite(SUITE), store)
        rows = [{k: v for k, v in r.items() if k != "group"} for r in make_rows(25, seed=7)]
        suite_json = store.meta(sub.run_id)["suite"]
        tasks.get_store().r.ping()  # its connection is open before Redis hangs, as a worker's is mid-run
        server.proc.send_signal(signal.SIGSTOP)
        timer = threading.Timer(15.0, server.proc.send_signal, (signal.SIGCONT,))  # past redis-py's ~10 s here
        timer.daemon = True  # a test that ends first sends SIGCONT itself
        timer.start()
        scored = tasks.score_chunk("cpu", sub.run_id, suite_json, ["exact_match", "recall_at_k"], rows)
        timer.join()
        assert scored["new"] == 25 * 4, scored  # exact_match; recall_at_k: recall_at_1, recall_at_5, mrr
        assert store.progress(sub.run_id)["done"] == 25 * 4
    finally:
        server.proc.send_signal(signal.SIGCONT)
        tasks.get_store.cache_clear()
        server.stop()


class _OnLog(logging.Handler):
    """Runs ``then`` once, when a record saying ``words`` is logged (a step of the code under test, not a timer)."""

    def __init__(self, words: str, then: Callable[[], object]) -> None:
        super().__init__(logging.WARNING)
        self.words, self.then, self.seen = words, then, 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.seen += 1
            if self.seen == 1:
                self.then()


def _run_chunk_until_log(args: list, words: str, then: Callable[[], object]) -> tuple[Any, _OnLog]:
    """Runs the cpu chunk task eagerly with ``then`` called when its log says ``words``: the result and the hook."""
    from ragscore_workers import tasks

    hook = _OnLog(words, then)
    logging.getLogger(tasks.__name__).addHandler(hook)
    try:
        return tasks.score_task["cpu"].apply(args=args), hook
    finally:
        logging.getLogger(tasks.__name__).removeHandler(hook)


@contextmanager
def _chunk_on_paused_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunStore, str, list]]:
    """A submitted run, its Redis pausing every write (CLIENT PAUSE WRITE: connections open, writes never answered),
    and the worker's store client on it waiting 1 s a reply, not retried: its chunk's first write raises
    TimeoutError, as a hang past the whole wait (~9.5 min) does. Yields the store, the run and the chunk's args."""
    from ragscore_workers import store as store_module
    from ragscore_workers import tasks

    monkeypatch.setattr(store_module, "CLIENT_RETRIES", 0)
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "1")
    server = RedisProcess(tmp_path / "redis").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", server.url)
    tasks.get_store.cache_clear()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(25, seed=7)), load_suite(SUITE), store)
        rows = [{k: v for k, v in r.items() if k != "group"} for r in make_rows(25, seed=7)]
        args = [sub.run_id, store.meta(sub.run_id)["suite"], ["exact_match", "recall_at_k"], rows]
        store.r.client_pause(600_000, all=False)
        yield store, sub.run_id, args
    finally:
        store.r.client_unpause()
        tasks.get_store.cache_clear()
        server.stop()


def test_a_chunk_whose_redis_write_fails_is_sent_again_and_its_items_are_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose own write failed on Redis (a hang past the worker's whole wait) raised: Celery failed its
    shard's chord, the aggregation never ran, and a detached run stayed running until a resume. Now the chunk task
    sends itself again (run eagerly here: the retry runs at once); Redis answers again once the first try says so,
    and the second try writes every item, each counted once."""
    from ragscore_workers import tasks

    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        result, unpause = _run_chunk_until_log(args, "sending it again", store.r.client_unpause)
        assert result.successful(), result.traceback
        assert unpause.seen == 1, "one retry"
        assert store.progress(run_id)["done"] == 25 * 4  # exact_match; recall_at_1, recall_at_5, mrr
        assert tasks.score_task["cpu"].apply(args=args).get()["new"] == 0  # sent again: nothing counted twice
        assert store.progress(run_id)["done"] == 25 * 4


def test_a_real_workers_chunk_whose_store_writes_hang_is_sent_again_and_the_run_finishes_each_item_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunk retry on a real `celery worker`, its store client waiting RAGSCORE_WORKER_STORE_TIMEOUT_S=1 s a
    reply: its run store (a Redis apart from its broker) pauses every write (CLIENT PAUSE WRITE: connections open,
    writes never answered) before the worker takes the run's chunk. The chunk's writes time out past its client's
    retries (~30 s), the worker sends it again, Redis answers once the worker says so, and the retry finishes the run,
    every item scored once."""
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    worker = WorkerProcess(broker.url, "cpu", tmp_path / "home", concurrency=1)
    worker.env["RAGSCORE_WORKER_STORE_TIMEOUT_S"] = "1"
    paused = redis.Redis(port=store_server.port)
    try:
        store = connect(broker.url, get_settings(), sends=True)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(25, seed=7)), load_suite(SUITE), store)
        paused.client_pause(600_000, all=False)
        worker.start()
        sent_again = f"run {sub.run_id}: a chunk on cpu could not use Redis"
        assert until(lambda: worker_said(tmp_path / "home", sent_again), 300), "the chunk was not sent again"
        paused.client_unpause()
        assert until(lambda: store.state(sub.run_id) in ("finished", "failed"), 300), store.state(sub.run_id)
        assert store.state(sub.run_id) == "finished", store.meta(sub.run_id).get("error")
        assert store.progress(sub.run_id)["done"] == 25 * 4, "every output once"
        summary = store.finished_summary(sub.run_id, **summary_commands(sub.run_id, None, None))
        em = summary.metrics["exact_match"]
        assert summary.items == 25 and em.errors == 0 and em.n + em.unscorable == 25
        assert not worker_said(tmp_path / "home", "(retry 2 of"), "sent again once"
    finally:
        paused.client_unpause()
        worker.stop()
        broker.stop()
        store_server.stop()


@pytest.mark.parametrize("retries", [1, 4])  # 4: above Celery's own bound of a task's retries (max_retries=3)
def test_a_chunk_that_cannot_write_after_its_retries_marks_the_run_failed_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retries: int
) -> None:
    """Past its retries the chunk gives up: the run is failed with the error `ragscore status` shows, not left
    running (its chord unfinished) for ever. Redis answers again once the chunk says it gives up."""
    from ragscore_workers import tasks

    monkeypatch.setattr(tasks, "CHUNK_RETRIES", retries)
    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        result, _ = _run_chunk_until_log(args, "scores them again", store.r.client_unpause)
        assert result.failed()
        meta = store.meta(run_id)
        assert meta["state"] == "failed", meta
        assert meta["error"].startswith(
            "a chunk on cpu could not write its items: Redis did not answer "
            f"(TimeoutError: Timeout reading from socket), {retries + 1} tries"
        ), meta["error"]


def test_a_retried_chunk_is_not_taken_for_one_whose_process_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose Redis calls failed cannot forget its items' deliveries, nor a careful try's mark on the item it
    was scoring (left here as a careful try whose end Redis lost leaves them): its retry scored carefully and failed
    that item as the one its process died on. The retry forgets them: every item is scored, no mark is left."""
    from ragscore_workers.schemas import item_key

    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        keys = [item_key(r.get("system"), str(r["id"])) for r in args[3]]

        def answer_with_a_mark_left() -> None:
            store.r.client_unpause()
            store.start_delivery(run_id, "cpu", keys)
            store.mark_scoring(run_id, "cpu", keys[0], True)

        result, _ = _run_chunk_until_log(args, "sending it again", answer_with_a_mark_left)
        assert result.successful(), result.traceback
        errors = [f for fields in store.item_fields(run_id, keys) for f in fields.values() if "died" in f]
        assert not errors, errors
        assert store.progress(run_id)["done"] == 25 * 4
        assert not store.marked_scoring(run_id, "cpu", keys)


def test_a_retry_delivered_again_after_its_process_died_still_counts_that_death(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried chunk forgets its earlier try's deliveries once: the same retry delivered again after its process
    died (a kill -9: task_reject_on_worker_lost sends it again as it was) is scored carefully and fails the item its
    process died on, where forgetting them on every delivery would let that item kill a process for ever."""
    from ragscore_workers import tasks
    from ragscore_workers.schemas import item_key

    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        store.r.client_unpause()
        keys = [item_key(r.get("system"), str(r["id"])) for r in args[3]]
        # what the retry's first two deliveries left: the first forgot the try before and died scoring the chunk,
        # the second (careful) died on the first item
        store.forget_deliveries(run_id, "cpu", keys, "t1:1")
        store.start_delivery(run_id, "cpu", keys)
        store.start_delivery(run_id, "cpu", keys)
        store.mark_scoring(run_id, "cpu", keys[0], True)
        result = tasks.score_task["cpu"].apply(args=args, task_id="t1", retries=1)
        assert result.successful(), result.traceback
        first, *rest = store.item_fields(run_id, keys)
        outputs = [f for name, f in first.items() if name != "_meta"]
        assert outputs and all("worker process died while scoring this item" in f for f in outputs), first
        assert not [f for fields in rest for f in fields.values() if "died" in f]
