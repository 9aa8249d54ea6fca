"""A judge task ends by its soft time limit in a threads pool too (which enforces no Celery time limit): the items it
had not judged by then are recorded as the limit's errors, those it judged are kept, the run reports them, and a resume
judges them again, paying no call twice (the reply cache)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from orchestrator.runner import connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.limits import QUEUE_LIMITS, time_limit_error
from ragscore_workers.metrics._judge_text import ANSWER_ACCURACY
from ragscore_workers.metrics.judge_metrics import Verdict, combine
from ragscore_workers.metrics.registry import RunContext, parse_spec
from ragscore_workers.providers import CompletionParams, JudgeTimeUp, RetryPolicy, build_client
from ragscore_workers.schemas import JudgeConfig, MetricResult, MetricSpec, Row
from ragscore_workers.scoring import score_rows
from ragscore_workers.store import RunState

from ..fakes import FakeProvider
from ..support import RedisProcess, resume_in_cluster, short_limit_worker, until, write_jsonl
from .conftest import judge_suite

#: Items of the one chunk: two judge calls each, one at a time, a second a call: far more than its soft limit lets it.
N = 6
#: Seconds of the judge soft time limit of the test's worker (tests/short_limit_worker.py): its first chunk's calls
#: begin with the judge's client built and its SDK imported, which a busy machine takes seconds to do.
SOFT_S = 5
TIME_LIMIT = f"time limit: the chunk ran over {SOFT_S} s (resume to retry; send fewer questions per task if it "
TIME_LIMIT += "happens again: --chunk-size judge=N)"


@pytest.mark.integration
@pytest.mark.serial  # timed: its first item (two calls of a second) is judged before its soft limit (5 s)
def test_a_judge_chunk_past_its_soft_time_limit_stops_there_and_a_resume_judges_what_it_cut(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """A judge task of a threads pool ran until its last call was answered, however long (a chunk held at a rate limit,
    600 s a call): past the broker's visibility timeout, it was delivered again while it still judged."""
    rows = [
        {"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"} for i in range(N)
    ]
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    suite = {"metrics": [{"name": "answer_accuracy", "params": {"concurrency": 1}}], "chunk_size": {"judge": N},
             "judge": judge}  # fmt: skip
    fake.latency_s = 1.0
    store = connect(redis_server.url)
    worker = short_limit_worker(redis_server.url, "judge", tmp_path / "w", SOFT_S)
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(suite), store)
        first = wait(store, sub.run_id, timeout_s=300)
        scores = {raw.meta["id"]: raw.metrics["answer_accuracy"] for raw in store.iter_raw_items(sub.run_id)}
        sent_first = len(fake.prompts)
        counted_first = store.progress(sub.run_id)
        # the call in flight at the cut ends in the worker's thread, its reply cached, before the resume asks again
        assert until(lambda: fake.in_flight == 0, 30)
        fake.latency_s = 0.0  # the judge is quick again: the resume's chunk ends well within its limit
        done = resume_in_cluster(sub.run_id, redis_server.url, tmp_path / "out", tmp_path / "o")
    finally:
        worker.stop()

    assert first.state == RunState.FINISHED
    cut = {q for q, r in scores.items() if r.get("error") == TIME_LIMIT and r.get("score") is None}
    judged = {q for q, r in scores.items() if r.get("score") == 1.0}
    assert cut and judged and cut | judged == {f"q{i}" for i in range(N)}, scores  # nothing else stored
    assert len(judged) <= SOFT_S // 2, judged  # two calls of a second each, one at a time: it stopped at its limit
    assert sent_first < 2 * N, fake.prompts  # a call not started by then was never made
    accuracy = first.metrics["answer_accuracy"]
    assert (accuracy.errors, accuracy.n) == (len(cut), len(judged)), accuracy  # the run reports them
    assert (counted_first["done"], counted_first.get("errors", 0)) == (N, len(cut)), counted_first  # each once
    assert done.returncode == 0, done.stderr[-3000:]
    # the resume judges those again, not one judged; no call is paid twice (the one in flight at the cut: cached)
    assert Counter(fake.prompts) == Counter({p: 1 for p in fake.prompts}) and len(fake.prompts) == 2 * N, fake.prompts
    resumed = json.loads((tmp_path / "out" / "summary.json").read_text())["metrics"]["answer_accuracy"]
    assert (resumed["n"], resumed["errors"], resumed["mean"]) == (N, 0, 1.0), resumed
    counted = store.progress(sub.run_id)
    assert (counted["done"], counted.get("errors", 0), counted.get("redo", 0)) == (N, 0, 0), counted


@pytest.mark.serial  # timed: the deadline, not max_wait_s (600 s), bounds the wait
def test_a_call_its_tasks_deadline_stops_at_the_rate_limit_ends_with_the_time_limits_error_not_a_failure(
    redis_server: RedisProcess, fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """A call held at the shared rate limit waits no longer than its task's deadline (the lesser of it and max_wait_s):
    JudgeTimeUp with the judge queue's time-limit error, no failure counted for the breaker; one whose deadline passed
    is not sent."""
    config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=1, tpm=None)
    client = build_client(rclient, "t-judge-deadline", config, max_wait_s=600, retry=RetryPolicy(attempts=2))
    messages, params = [{"role": "user", "content": "[[rating=4]]"}], CompletionParams(temperature=0.0, max_tokens=8)
    client.complete(messages, params, template_version="v", deadline=time.monotonic() + 60)  # the minute's one call
    started = time.monotonic()
    with pytest.raises(JudgeTimeUp) as raised:
        client.complete(messages, params, template_version="v", attempt=1, deadline=time.monotonic() + 2)
    assert time.monotonic() - started < 15  # not the minute the rpm holds it
    assert str(raised.value) == f"time limit: the chunk ran over {QUEUE_LIMITS['judge'][0]} s " + (
        "(resume to retry; send fewer questions per task if it happens again: --chunk-size judge=N)"
    )
    with pytest.raises(JudgeTimeUp):
        client.complete(messages, params, template_version="v", attempt=2, deadline=time.monotonic() - 1)
    assert fake.stats()["requests"] == 1
    assert client.state.read()["failures"] == 0 and not client.state.stop_reason()


def test_a_call_whose_next_try_would_start_past_its_tasks_deadline_is_not_retried_and_not_a_failure(
    redis_server: RedisProcess, fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """A call that failed (a 500) is not retried where its backoff would end past its task's deadline: JudgeTimeUp at
    once, as its retries did not fail (not counted by the breaker), not its last error after every retry's sleep."""
    config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=None, tpm=None)
    retry = RetryPolicy(attempts=3, backoff_initial_s=30.0, backoff_max_s=30.0)
    client = build_client(rclient, "t-judge-retry-deadline", config, retry=retry)
    messages, params = [{"role": "user", "content": "[[fault=500:5]]"}], CompletionParams(temperature=0.0, max_tokens=8)
    with pytest.raises(JudgeTimeUp):
        client.complete(messages, params, template_version="v", deadline=time.monotonic() + 20)
    assert fake.stats()["requests"] == 1  # its one try: the next would begin 30 s on, past the deadline
    assert client.state.read()["failures"] == 0 and not client.state.stop_reason()


def test_a_call_waiting_for_a_max_in_flight_slot_stops_at_its_tasks_deadline(
    redis_server: RedisProcess, fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """A call held by judge.max_in_flight (every slot taken) waits no longer than its task's deadline, not max_wait_s:
    JudgeTimeUp, unsent, no failure counted."""
    config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=None, tpm=None, max_in_flight=1)
    client = build_client(rclient, "t-judge-slot-deadline", config, max_wait_s=60)
    messages, params = [{"role": "user", "content": "[[rating=4]]"}], CompletionParams(temperature=0.0, max_tokens=8)
    assert client.in_flight is not None
    with client.in_flight.slot(), pytest.raises(JudgeTimeUp):  # another call holds the one slot
        client.complete(messages, params, template_version="v", deadline=time.monotonic() + 2)
    assert fake.stats().get("requests", 0) == 0
    assert client.state.read()["failures"] == 0 and not client.state.stop_reason()


META_POINT = {"id": "meta", "type": "meta_eval", "informational": True}


@pytest.mark.parametrize(
    ("metric", "outputs"),
    [("answer_accuracy", ["answer_accuracy"]), ("context_relevance_judge", ["context_relevance_judge"]),
     ("groundedness", ["groundedness"]), ("rubric_judge", ["rubric_judge", "rubric_judge_raw"]),
     ("checks", ["checks"])],
)  # fmt: skip
def test_every_judge_metric_records_an_item_its_tasks_deadline_cut_as_the_time_limits_error(
    metric: str, outputs: list[str], fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """Each judge metric (and a checks row's meta_eval point, informational too: the resume must ask it again) gives an
    item whose judges the deadline stopped the time limit's error alone, as the prefork soft limit does: never a
    score, an unscorable item nor a point's note."""
    suite = judge_suite([metric], fake, model)
    row = {"id": "q", "question": "Q?", "reference": "r", "answer": "a [[rating=4]]", "contexts": ["c"],
           "checks": [{"id": "k", "type": "keyword", "params": {"keywords": ["a"]}}, META_POINT]}  # fmt: skip
    ctx = RunContext(run_id="t-cut-" + model, suite=suite, redis=rclient, deadline=time.monotonic() - 1)
    metrics = [parse_spec(MetricSpec.model_validate(spec)) for spec in suite.metrics]
    (scores,) = score_rows([Row.model_validate(row)], metrics, ctx)
    expected = MetricResult.failed(time_limit_error("judge")).model_dump(exclude={"ms"})
    assert {o: scores[o].model_dump(exclude={"ms"}) for o in outputs} == dict.fromkeys(outputs, expected), scores
    assert fake.stats().get("requests", 0) == 0


def test_a_dual_judge_metric_never_keeps_one_judges_rating_where_the_deadline_cut_the_other() -> None:
    """One judge rated, the other cut: the item is the time limit's error (a resume asks the cut judge, the rated one's
    reply cached), not the one rating alone as after a judge's own error."""
    result = combine([Verdict(value=4, calls=1, cached=False), Verdict.time_up()], ANSWER_ACCURACY)
    expected = MetricResult.failed(time_limit_error("judge"))
    assert result.model_dump(exclude={"ms"}) == expected.model_dump(exclude={"ms"}), result


@pytest.mark.serial  # timed: its first chunk's calls start within that chunk's deadline (5 s)
def test_calls_a_chunks_cut_left_running_keep_their_places_of_concurrency_from_the_threads_next_chunk(
    fake: FakeProvider, model: str, rclient: redis.Redis
) -> None:
    """A chunk cut by its deadline with its 2 calls (concurrency 2) still in flight at the provider, then the same
    thread's next chunk (as a worker thread takes its next task): its calls wait for those to end, and the provider
    never sees more than 2 of this thread's calls at once; the waiting items are the time limit's errors. Seen failing
    before: the next chunk sent 2 calls more beside the 2 still running (the provider saw 4 at once)."""
    suite = judge_suite([{"name": "answer_accuracy", "params": {"concurrency": 2, "cache": False}}], fake, model)
    metrics = [parse_spec(MetricSpec.model_validate(spec)) for spec in suite.metrics]
    fake.hold = held = threading.Event()  # every call is answered once the test says so: past both cuts
    try:
        for chunk, deadline_s in enumerate((5.0, 2.0)):
            rows = [Row.model_validate({"id": f"c{chunk}q{i}", "question": f"Q{i}?", "reference": "r",
                                        "answer": f"a{chunk}{i} [[rating=4]]"}) for i in range(2)]  # fmt: skip
            ctx = RunContext(run_id="t-places-" + model, suite=suite, redis=rclient,
                             deadline=time.monotonic() + deadline_s)  # fmt: skip
            scores = score_rows(rows, metrics, ctx)
            assert {s["answer_accuracy"].error for s in scores} == {time_limit_error("judge")}
            assert fake.in_flight == 2, (chunk, fake.stats())  # the first chunk's, held: the cut did not end them
    finally:
        held.set()
    assert until(lambda: fake.in_flight == 0, 30)
    assert (fake.stats()["max_in_flight"], fake.stats()["requests"]) == (2, 2)


@pytest.mark.integration
@pytest.mark.serial  # timed: the first chunk's calls start within its soft limit (5 s)
def test_a_real_judge_workers_thread_holds_its_cut_tasks_calls_in_flight_against_its_next_tasks_concurrency(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """A judge worker of one thread (its threads pool, as ``ragscore worker`` starts it): its first task's 2 calls
    (concurrency 2) are held at the provider past the task's soft limit; the thread's next task waits for them before
    sending its own, so the provider never sees more of the worker's calls at once than ``concurrency`` (docs/judge.md,
    the judge task's time limit), and that task's items are the time limit's errors too. Seen failing with
    ``TaskCalls.of_this_thread`` returning a new TaskCalls per task: the second task sent 2 calls more (4 at once)."""
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": "r", "answer": f"a{i} [[rating=4]]"} for i in range(4)]
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    spec = {"name": "answer_accuracy", "params": {"concurrency": 2, "cache": False}}
    suite = {"metrics": [spec], "chunk_size": {"judge": 2}, "judge": judge}  # two tasks, one after the other
    fake.hold = held = threading.Event()  # every call is answered once the test says so: past both tasks' cuts
    store = connect(redis_server.url)
    worker = short_limit_worker(redis_server.url, "judge", tmp_path / "w", SOFT_S, concurrency=1)
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(suite), store)
        first = wait(store, sub.run_id, timeout_s=300)
        in_flight_at_end = fake.in_flight
        held.set()
        assert until(lambda: fake.in_flight == 0, 30)
    finally:
        held.set()
        worker.stop()

    assert first.state == RunState.FINISHED
    errors = {raw.meta["id"]: raw.metrics["answer_accuracy"].get("error") for raw in store.iter_raw_items(sub.run_id)}
    assert errors == dict.fromkeys((r["id"] for r in rows), TIME_LIMIT), errors
    assert in_flight_at_end == 2  # the first task's, held: its cut did not end them
    assert (fake.stats()["max_in_flight"], fake.stats()["requests"]) == (2, 2), fake.stats()
