"""Shards cut by their own rows' bytes: a dataset whose rows grow late in the file makes no shard past the cap, and its
resume (and a run stored the old way, with one row count for every shard) finds the rows of each shard."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runner import _plan_new_shard, cancel, connect, recorded_cut, resume, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.planning import ResolvedSuite
from ragscore_workers.schemas import Row
from ragscore_workers.store import RunState, RunStore

from ..support import RedisProcess, WorkerProcess, make_rows, write_jsonl

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}], "chunk_size": {"cpu": 5}}
#: Outputs each row is scored for (exact_match, recall_at_1, recall_at_5, mrr).
OUTPUTS = 4
#: Small rows first, then big ones (an answer of BIG_CHARS): the cap holds about BIG_PER_SHARD big rows.
SMALL, BIG, BIG_CHARS, BIG_PER_SHARD = 40, 30, 20_000, 5


def _growing_rows(seed: int) -> list[dict[str, Any]]:
    """SMALL rows of a short answer, then BIG rows of a BIG_CHARS answer."""
    rows = make_rows(SMALL + BIG, seed=seed)
    return rows[:SMALL] + [r | {"answer": "x" * BIG_CHARS} for r in rows[SMALL:]]


def _cap(resolved: ResolvedSuite) -> int:
    """A shard's message bytes at most: about BIG_PER_SHARD big rows' messages."""
    return BIG_PER_SHARD * resolved.message_bytes(Row.model_validate(_growing_rows(0)[-1]))


def _sent_bytes(resolved: ResolvedSuite, run_id: str, index: int, rows: list[Row]) -> int:
    """The bytes of the scoring task messages shard ``index`` of ``rows`` is sent as (its chord's header, as JSON)."""
    shard = _plan_new_shard(run_id, index, rows, resolved)
    return sum(len(json.dumps(task)) for task in shard.signature.tasks)


@contextmanager
def _served(tmp_path: Path) -> Iterator[tuple[RunStore, WorkerProcess]]:
    """A Redis of its own and a cpu worker, not yet started."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        yield connect(server.url), worker
    finally:
        worker.stop()
        server.stop()


def _scored_once(store: RunStore, run_id: str, rows: int) -> None:
    """The run finished with every row scored, each output once."""
    final = wait(store, run_id, timeout_s=180)
    assert final.state == RunState.FINISHED and final.items == rows, final
    assert store.progress(run_id)["done"] == rows * OUTPUTS, "every output exactly once"


def test_rows_that_grow_late_make_no_shard_past_the_cap_and_a_resume_scores_each_once(tmp_path: Path) -> None:
    """Every shard held the first shard's row count: 40 small rows then 30 rows of 20 KB made a first shard of ~45 rows
    and a second of 25 big rows, ~5 times the cap. Each shard is now cut by its own rows' bytes (measured as the
    messages it is sent in), the run records where each starts, and its resume (cancelled before any was scored) cuts
    the dataset alike: every row scored, each once."""
    resolved = load_suite(SUITE)
    cap = _cap(resolved)
    data = write_jsonl(tmp_path / "d.jsonl", _growing_rows(seed=1))
    rows = [Row.model_validate(r) for r in _growing_rows(seed=1)]
    with _served(tmp_path) as (store, worker):
        sub = submit(data, resolved, store, shard_bytes=cap)
        held = [len(store.shard_keys(sub.run_id, k)) for k in range(sub.shards)]
        starts = list(accumulate(held, initial=0))
        sent = [_sent_bytes(resolved, sub.run_id, k, rows[starts[k] : starts[k + 1]]) for k in range(sub.shards)]
        assert max(sent) <= 1.5 * cap, (sent, cap, held)  # messages as sent: about what message_bytes counts
        assert list(recorded_cut(store.meta(sub.run_id)).starts) == starts[:-1], held  # where each shard starts
        cancel(store, sub.run_id)  # nothing scored: the resume sends every shard again, cut as recorded
        assert wait(store, sub.run_id, timeout_s=60).state == RunState.CANCELLED
        worker.start()
        resumed = resume(store, sub.run_id)
        assert (resumed.shards, resumed.items) == (sub.shards, len(rows)), resumed
        _scored_once(store, sub.run_id, len(rows))


def test_a_cut_off_submission_of_rows_that_grow_late_resumes_by_the_recorded_starts(tmp_path: Path) -> None:
    """Ctrl-C before any shard was sent: the resume sends every shard, cut where the run recorded (each shard of its
    own size), and scores each row once."""
    resolved = load_suite(SUITE)
    data = write_jsonl(tmp_path / "d.jsonl", _growing_rows(seed=2))

    def interrupted(queues: list[str]) -> None:
        raise KeyboardInterrupt

    with _served(tmp_path) as (store, worker):
        before = set(store.list_runs())
        with pytest.raises(KeyboardInterrupt):
            submit(data, resolved, store, shard_bytes=_cap(resolved), on_validated=interrupted)
        (run_id,) = set(store.list_runs()) - before
        cut = recorded_cut(store.meta(run_id))
        assert len({cut.size(k) for k in range(len(cut.starts) - 1)}) > 1, cut  # shards of different sizes
        worker.start()
        again = resume(store, run_id)
        assert (again.shards, again.items) == (len(cut.starts), SMALL + BIG), again
        _scored_once(store, run_id, SMALL + BIG)


def test_a_run_stored_without_shard_starts_resumes_by_its_one_row_count(tmp_path: Path) -> None:
    """A run an older ragscore stored recorded one row count (the first shard's, cut by its bytes) and no starts: its
    resume cuts the dataset by that count, finds it unchanged and scores each row once."""
    resolved = load_suite(SUITE)
    rows = [r | {"answer": "x" * BIG_CHARS} for r in make_rows(BIG, seed=3)]  # alike: every shard holds as many
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    with _served(tmp_path) as (store, worker):
        sub = submit(data, resolved, store, shard_bytes=_cap(resolved))
        first = len(store.shard_keys(sub.run_id, 0))
        assert 1 < first < BIG and sub.shards == -(-BIG // first), (first, sub)
        meta = store.key(sub.run_id, "meta")
        store.r.hdel(meta, "shard_starts")  # stored the old way: the first shard's count, every shard's
        store.r.hset(meta, "shard_rows", first)
        assert recorded_cut(store.meta(sub.run_id)).starts == ()
        cancel(store, sub.run_id)
        assert wait(store, sub.run_id, timeout_s=60).state == RunState.CANCELLED
        worker.start()
        resumed = resume(store, sub.run_id)
        assert (resumed.shards, resumed.items) == (sub.shards, BIG), resumed
        _scored_once(store, sub.run_id, BIG)
