"""A chunk's soft time limit, as Celery raises it wherever the task is: what was scored by then is kept, and a
sandbox run it interrupts is not taken for the sandbox failing."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from ragscore_workers import tasks
from ragscore_workers.metrics import registry
from ragscore_workers.schemas import MetricResult, Queue, Row, Suite
from ragscore_workers.store import RunState, RunStore


@pytest.fixture
def time_up_on_c(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A per-row metric whose chunk runs out of time on row ``c``."""
    monkeypatch.setattr(registry, "_REGISTRY", registry.all_metrics())  # the metric leaves with the test

    @registry.register("test_time_up_on_c", Queue.CPU)
    def time_up_on_c(row: Row, params: Any) -> MetricResult:
        if row.id == "c":
            raise SoftTimeLimitExceeded()
        return MetricResult(score=1.0)

    yield


def test_a_chunk_out_of_time_keeps_the_items_it_scored_and_fails_the_rest(
    worker_store: RunStore, time_up_on_c: None
) -> None:
    """Every item of the chunk got "time limit": a program that passed in 0.1 s was failed with the one that hung."""
    run = "t-time-limit-partial"
    suite = Suite(name="t", metrics=["test_time_up_on_c"]).model_dump_json()
    keys = ["a", "b", "c", "d"]
    worker_store.create_run(run, {"state": RunState.RUNNING, "suite": suite, "items": 4, "n_shards": 1})
    worker_store.add_ids(run, 0, keys, {"cpu": 4})
    tasks.score_task["cpu"](run, suite, ["test_time_up_on_c"], [{"id": k} for k in keys])
    stored = {raw.meta["id"]: raw.metrics["test_time_up_on_c"] for raw in worker_store.iter_raw_items(run)}
    assert [stored[k]["score"] for k in keys] == [1.0, 1.0, None, None]
    assert all("time limit" in stored[k]["error"] for k in "cd") and stored["a"]["error"] is None


@contextmanager
def soft_time_limit_in(seconds: float, on_limit: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Celery's soft time limit, raised in this (the main) thread after ``seconds``, as a prefork pool raises it;
    ``on_limit`` runs (in the main thread) the moment it is raised: what a test reads of the limit's moment."""

    def raise_time_limit(*_: Any) -> None:
        on_limit()
        raise SoftTimeLimitExceeded()

    old = signal.signal(signal.SIGUSR1, raise_time_limit)
    fired = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGUSR1))
    fired.start()
    try:
        yield
    finally:
        fired.cancel()
        signal.signal(signal.SIGUSR1, old)


def test_a_code_chunk_out_of_time_keeps_the_programs_that_finished(worker_store: RunStore) -> None:
    """code_test is a batch metric: it returned only once the whole chunk was done, so the time limit failed the
    program that passed in 0.1 s with the one that hung."""
    run = "t-time-limit-code"
    suite = Suite.model_validate({"metrics": [{"name": "code_test", "params": {"stdout": "ok"}}],
                                  "sandbox": {"backend": "local", "timeout_s": 30}}).model_dump_json()  # fmt: skip
    rows = [{"id": "a", "code": "print('ok')"}, {"id": "b", "code": "print('no')"},
            {"id": "c", "code": "import time\ntime.sleep(60)"}, {"id": "d", "code": "print('ok')"}]  # fmt: skip
    worker_store.create_run(run, {"state": RunState.RUNNING, "suite": suite, "items": 4, "n_shards": 1})
    worker_store.add_ids(run, 0, [r["id"] for r in rows], {"code": 4})
    with soft_time_limit_in(6.0):
        tasks.score_task["code"](run, suite, ["code_test"], rows)
    stored = {raw.meta["id"]: raw.metrics["code_test"] for raw in worker_store.iter_raw_items(run)}
    assert [stored[k]["score"] for k in "abcd"] == [1.0, 0.0, None, None]
    assert all("time limit" in stored[k]["error"] for k in "cd")


def test_a_code_test_point_interrupted_by_the_time_limit_lets_it_reach_the_task() -> None:
    """The point's sandbox call caught every Exception: the soft limit was stored as "sandbox error:
    SoftTimeLimitExceeded" and the chunk ran on into its hard limit, which killed the worker."""
    from ragscore_workers.metrics._queue_validators import code_test_check
    from ragscore_workers.metrics._validators import PointInput
    from ragscore_workers.metrics.code_test import CodeTestParams
    from ragscore_workers.metrics.registry import RunContext

    row = Row(id="r", code="while True:\n    pass\n")
    sandbox = {"backend": "local", "timeout_s": 20}
    ctx = RunContext(run_id="r", suite=Suite.model_validate({"metrics": ["checks"], "sandbox": sandbox}))
    with soft_time_limit_in(1.0), pytest.raises(SoftTimeLimitExceeded):
        code_test_check([(PointInput(row=row, text=""), CodeTestParams())], ctx)
