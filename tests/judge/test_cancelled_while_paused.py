"""A run whose judge calls wait out a provider's long 429 pause, cancelled (real Redis, a real judge worker process,
real HTTP to the fake provider): the waiting calls stop within seconds of the cancel, none is sent after it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.runner import cancel, connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.providers import RunJudgeState
from ragscore_workers.store import RunState

from ..fakes import FakeProvider
from ..support import RedisProcess, WorkerProcess, until, write_jsonl

pytestmark = pytest.mark.integration

#: The provider's retry-after: every judge call of the run waits this long at the shared limiter.
PAUSE_S = 90
ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"} for i in range(8)]


def test_judge_calls_waiting_out_a_429_pause_stop_soon_after_a_cancel(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """The waiting calls read the cancel only once the limiter admitted them: the cancelled run's judge chunk held
    its worker for the whole pause (up to max_wait_s, 10 minutes), and its summary waited as long."""
    fake.injected_retry_after_s = PAUSE_S
    fake.fail_next("429", 1000)  # every call in flight before the pause is set gets one too: all of them wait
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    spec = {"name": "answer_accuracy", "params": {"concurrency": 4}}
    suite = load_suite({"metrics": [spec], "chunk_size": {"judge": 8}, "judge": judge})
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), suite, store)
        state = RunJudgeState(store.r, sub.run_id, ttl_s=600)
        # the 429s came back and every call sent got one (none is on its way to the provider) ...
        assert until(lambda: 0 < state.read()["rate_limited"] == fake.stats().get("requests", 0), 300), fake.stats()
        # ... and their retries (tenacity waits up to 0.1 s after a 429) wait at the shared limiter: the progress the
        # views read says the run's judge calls wait on the 429's pause (written by a call waiting there)
        assert until(lambda: "judge_wait_pause" in store.progress(sub.run_id), 60), store.progress(sub.run_id)
        sent = fake.stats()["requests"]
        cancelled_at = time.monotonic()
        cancel(store, sub.run_id)
        summary = wait(store, sub.run_id, timeout_s=PAUSE_S / 3)  # TimeoutError: the calls waited on
        took = time.monotonic() - cancelled_at
        written = store.progress(sub.run_id).get("done:judge")  # by the judge chunk itself: its calls ended
    finally:
        worker.stop()
    assert summary.state == RunState.CANCELLED and written == 8, (took, written)
    assert fake.stats()["requests"] == sent, "a judge call was sent after the cancel"
    accuracy = summary.metrics["answer_accuracy"]
    assert (accuracy.n, accuracy.unscorable, accuracy.stopped) == (0, 8, 8)  # stopped, a resume judges them
    assert accuracy.unscorable_reasons == {"run cancelled": 8} and accuracy.first_error is None
    assert summary.judge["calls"] == sent and "breaker" not in summary.judge
