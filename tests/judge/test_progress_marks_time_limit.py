"""The per-item progress hook (:meth:`RunContext.row_scored`) must not swallow the task's soft time limit.

``RunContext.row_scored`` is called in the task's main thread for rows no judge can score (before any call is made).
Celery raises ``SoftTimeLimitExceeded`` (an ``Exception``) in the main thread wherever it happens to be: when that is
inside the hook's Redis round trip (a blip makes the client retry for many seconds there), the hook's blanket
``except Exception`` logged it at debug level and the chunk went on asking the judge until the hard limit killed the
process: every row it had scored was lost, and the redelivery (careful, one item at a time) paid every call again."""

from __future__ import annotations

import pytest
import redis
from celery.exceptions import SoftTimeLimitExceeded

from ragscore_workers.metrics.registry import RunContext, parse_spec
from ragscore_workers.schemas import MetricSpec, Row
from ragscore_workers.scoring import score_rows

from ..fakes import FakeProvider
from .conftest import judge_suite


@pytest.mark.parametrize("metric", ["answer_accuracy", "rubric_judge"])
def test_a_soft_time_limit_raised_in_the_progress_hook_ends_the_batch(
    metric: str, fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    suite = judge_suite([{"name": metric, "params": {"concurrency": 2, "cache": False}}], fake, model)
    rows = [Row.model_validate(r) for r in [
        {"id": "q-none", "question": "Q?", "answer": "a"},  # no reference: unscorable, told in the main thread
        {"id": "q1", "question": "Q1?", "reference": "r1", "answer": "a1 [[rating=4]]"},
    ]]  # fmt: skip

    def scored(row: Row, outputs: list[str]) -> None:
        if row.id == "q-none":  # the signal lands while the main thread is in the hook's round trip
            raise SoftTimeLimitExceeded()

    ctx = RunContext(run_id="t-hook-limit", suite=suite, redis=rclient, scored=scored)
    metrics = [parse_spec(MetricSpec.model_validate(spec)) for spec in suite.metrics]
    with pytest.raises(SoftTimeLimitExceeded):
        score_rows(rows, metrics, ctx)
    assert fake.stats().get("requests", 0) == 0  # time was up: no judge asked after it


def test_row_scored_keeps_swallowing_a_redis_error() -> None:
    """What the hook is meant to swallow: progress is not worth a row's score."""

    def scored(row: Row, outputs: list[str]) -> None:
        raise redis.ConnectionError("gone")

    ctx = RunContext(run_id="t", suite=None, scored=scored, outputs=("m",))  # type: ignore[arg-type]
    ctx.row_scored(Row.model_validate({"id": "x", "question": "q"}))


def test_the_soft_time_limit_asks_no_judge_the_batch_had_not_asked_yet(
    fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """The soft time limit, raised in the main thread while it waits on the judge pool, left the pool's queued jobs to
    run: ``ThreadPoolExecutor.__exit__`` waits for every job, queued ones included. Every call after the limit was paid
    and its verdict thrown away (the rows get the time limit's error), each row was counted done in the run's progress
    as it ended, and a queue longer than the 60 s to the hard limit had the process killed: the chunk acked as failed,
    not redelivered, its marks left counting rows never written until a stall recovery resumed the run."""
    from ..unit.test_time_limit import soft_time_limit_in

    fake.latency_s = 0.5
    suite = judge_suite([{"name": "answer_accuracy", "params": {"concurrency": 1, "cache": False}}], fake, model)
    rows = [Row.model_validate({"id": f"q{i}", "question": "Q?", "reference": "r", "answer": "a [[rating=4]]"})
            for i in range(6)]  # fmt: skip
    told: list[str] = []
    ctx = RunContext(run_id="t-pool-limit", suite=suite, redis=rclient, scored=lambda r, o: told.append(r.id))
    metrics = [parse_spec(MetricSpec.model_validate(spec)) for spec in suite.metrics]
    at_limit: dict[str, int] = {}  # what was asked and told the moment the limit was raised, whenever that was

    def note_the_limit() -> None:
        at_limit.update(asked=fake.stats().get("requests", 0), told=len(told))

    with pytest.raises(SoftTimeLimitExceeded), soft_time_limit_in(1.0, note_the_limit):
        score_rows(rows, metrics, ctx)
    # Counted from the limit's moment, not from the clock: a loaded machine raises it later, asks fewer before it.
    # After it, only the call in flight (one at a time) may end: it may not have reached the fake yet, and it may
    # be its row's last judge. The pool left to run its queued jobs asked all 12, and told every row as it ended.
    assert at_limit and at_limit["asked"] < 12, at_limit
    assert fake.stats().get("requests", 0) <= at_limit["asked"] + 1, (at_limit, fake.stats())
    assert len(told) <= at_limit["told"] + 1, (at_limit, told)
