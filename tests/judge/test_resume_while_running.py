"""A resume of a cluster run that workers are still scoring (real Redis, a real judge worker process, real HTTP to
the fake provider): it follows the run and sends nothing again, so no judge call is paid for twice."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from orchestrator.runner import connect, run, submit
from ragscore_workers.errors import ConfigError
from ragscore_workers.store import RunState

from ..fakes import FakeProvider
from ..support import RedisProcess, WorkerProcess, until, write_jsonl
from .conftest import slow_judge_suite

pytestmark = pytest.mark.integration

ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"} for i in range(8)]


def test_a_resume_of_a_run_still_at_work_follows_it_and_pays_for_no_call_twice(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`ragscore run --resume DIR` is what a new run into DIR says to do after a Ctrl-C that left a cluster run
    going: it sent every unfinished item again, and the work in flight was judged twice (52 calls for 38)."""
    suite = slow_judge_suite(fake, model, latency_s=1.0, concurrency=2, chunk=4)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), suite, store)
        assert until(lambda: fake.stats().get("requests", 0) > 0, 300), "no judge call was made"
        with pytest.raises(ConfigError, match=f"Run {sub.run_id} is still running: workers hold some of it") as busy:
            run(None, None, tmp_path / "out", broker=redis_server.url, resume_id=sub.run_id, judge_limits={"rpm": 99})
        # the cancel it says names the run's broker: without it, it asked RAGSCORE_BROKER_URL or the embedded Redis
        assert f"`ragscore cancel {sub.run_id} --broker {redis_server.url}`, then resume" in str(busy.value)
        with caplog.at_level(logging.WARNING, logger="orchestrator.runner"):
            summary = run(None, None, tmp_path / "out", broker=redis_server.url, resume_id=sub.run_id, timeout_s=300)
    finally:
        worker.stop()
    assert summary.state == RunState.FINISHED and summary.metrics["answer_accuracy"].n == 8
    assert fake.stats()["requests"] == 16 == summary.judge["calls"]  # two judges per item, each asked once
    assert f"run {sub.run_id} is still running (workers hold some of it): following it" in caplog.text
    assert (tmp_path / "out" / "run.json").exists() and (tmp_path / "out" / "summary.json").exists()
