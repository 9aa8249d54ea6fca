"""Judge progress moves item by item while a chunk is scored (real Redis, a real judge worker process, real HTTP to a
slow fake provider), and the counts the chunk's write then makes are exact: nothing is counted twice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from orchestrator.runner import connect, submit
from ragscore_workers.store import RunState

from ..fakes import FakeProvider
from ..support import RedisProcess, WorkerProcess, kill_whole, until, write_jsonl
from .conftest import slow_judge_suite

pytestmark = pytest.mark.integration

ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"} for i in range(8)]


def test_a_slow_judge_chunk_shows_its_items_done_one_by_one_and_ends_with_exact_counts(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """A chunk of 8 items, two judge calls each, 2 in flight at 0.4 s a call: ~3 s before its write. Progress was
    counted only by that write (0 of 8 for the whole chunk, then 8 at once): on a 30 RPM provider, minutes at 0/s."""
    suite = slow_judge_suite(fake, model, latency_s=0.4, concurrency=2, chunk=8)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    seen: list[int] = []
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), suite, store)
        deadline = time.monotonic() + 300
        while store.state(sub.run_id) not in RunState.DONE and time.monotonic() < deadline:
            counters = store.progress(sub.run_id)
            assert counters.get("done", 0) <= counters["total"] == 8
            assert counters.get("done", 0) == counters.get("done:judge", 0)
            seen.append(counters.get("done", 0))
            time.sleep(0.05)
        assert until(lambda: store.summary(sub.run_id) is not None, 60), "no summary was written"
    finally:
        worker.stop()
    assert seen == sorted(seen), f"progress went back: {seen}"
    partial = sorted({n for n in seen if 0 < n < 8})
    assert len(partial) >= 3, f"progress moved only by whole chunks: {sorted(set(seen))}"
    summary = store.summary(sub.run_id)
    assert summary is not None and summary.state == RunState.FINISHED
    assert summary.metrics["answer_accuracy"].n == 8 and summary.judge["calls"] == 16 == fake.stats()["requests"]
    final = store.progress(sub.run_id)
    assert (final["done"], final["done:judge"], final["total"]) == (8, 8, 8)
    assert final.get("errors", 0) == 0 and final.get("unscorable", 0) == 0


@pytest.mark.parametrize("metric", ["answer_accuracy", "rubric_judge"])
def test_each_row_of_a_judge_batch_is_said_scored_once_with_its_metrics_outputs(
    metric: str, fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """The hook the worker counts progress by: every row once (one no judge can score at once), with the outputs of
    the metric being run, while the batch's other rows are still judged."""
    from ragscore_workers.metrics.registry import RunContext, parse_spec
    from ragscore_workers.schemas import MetricSpec, Row
    from ragscore_workers.scoring import score_rows

    from .conftest import judge_suite

    fake.latency_s = 0.2
    suite = judge_suite([{"name": metric, "params": {"concurrency": 2, "cache": False}}], fake, model)
    rows = [Row.model_validate(r) for r in [*ROWS[:4], {"id": "q-none", "question": "Q?", "answer": "a"}]]
    told: list[tuple[str, list[str], int]] = []

    def scored(row: Row, outputs: list[str]) -> None:
        told.append((row.key, outputs, fake.stats().get("requests", 0)))

    ctx = RunContext(run_id="t-hook", suite=suite, redis=rclient, scored=scored)
    metrics = [parse_spec(MetricSpec.model_validate(spec)) for spec in suite.metrics]
    results = score_rows(rows, metrics, ctx)
    outputs = ["rubric_judge", "rubric_judge_raw"] if metric == "rubric_judge" else [metric]
    assert sorted(key for key, _, _ in told) == sorted(row.key for row in rows)
    assert all(names == outputs for _, names, _ in told)
    calls = fake.stats()["requests"]
    assert calls == (4 if metric == "rubric_judge" else 8)
    assert told[0][0] == rows[-1].key  # no reference: unscorable before any call
    assert told[1][2] < calls  # the first judged row was told while calls were still to be made
    assert results[-1][outputs[0]].score is None and all(r[outputs[0]].error is None for r in results)


def test_a_judge_worker_killed_mid_chunk_holds_its_items_marked_scored_too(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """A judge chunk of 8 items marks each scored as it ends, and progress counts it done; its worker killed whole
    (SIGKILL: its host lost) keeps the chunk's message held, and lost the scores it had not written. The held work
    left out the items marked scored, though the chunk, handed back, scores them again: all 8 are said held."""
    from orchestrator.queues import held_messages

    suite = slow_judge_suite(fake, model, latency_s=1.0, concurrency=1, chunk=8)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), suite, store)
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= 2, 300), store.progress(sub.run_id)
        kill_whole(worker)
        done = store.progress(sub.run_id)["done"]
        assert 2 <= done < 8, done
        assert until(lambda: bool(held_messages(store, sub.run_id).orphans), 120), "the chunk was not held"
        assert [o.items for o in held_messages(store, sub.run_id).orphans] == [8]  # none written
    finally:
        worker.stop()
