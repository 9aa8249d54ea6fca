"""The judge metrics in-process (score_rows, real Redis, real HTTP to the fake provider)."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid

import pytest
import redis

from ragscore_workers.metrics._judge_text import ANSWER_ACCURACY, CONTEXT_RELEVANCE, GROUNDEDNESS
from ragscore_workers.providers import RunJudgeState
from ragscore_workers.providers.base import estimate_tokens

from ..fakes import FakeProvider
from .conftest import SECRET, judge_suite, score


def _scores(results: list[dict], name: str) -> list[float | None]:
    return [r[name].score for r in results]


def test_answer_accuracy_maps_ratings_to_scores(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    rows = [{"id": f"r{r}", "question": "When?", "answer": f"In 1879 [[rating={r}]]", "reference": "1879"}
            for r in (4, 2, 0)]  # fmt: skip
    results = score(judge_suite(["answer_accuracy"], fake, model), rows, rclient)
    assert _scores(results, "answer_accuracy") == [1.0, 0.5, 0.0]
    assert [r["answer_accuracy"].details["ratings"] for r in results] == [[4, 4], [2, 2], [0, 0]]
    assert fake.stats()["requests"] == 6


def test_the_two_judges_are_averaged(rclient: redis.Redis, keys: str, model: str) -> None:
    def responder(prompt: str, nth: int) -> str:
        return "4" if prompt.startswith(ANSWER_ACCURACY.first[:30]) else "The rating is 2"

    with FakeProvider(api_key=keys, responder=responder) as fake:
        row = {"id": "a", "question": "q?", "answer": "a", "reference": "b"}
        (result,) = score(judge_suite(["answer_accuracy"], fake, model), [row], rclient)
    assert result["answer_accuracy"].score == 0.75
    assert result["answer_accuracy"].details["ratings"] == [4, 2]


def test_a_judge_is_re_asked_until_it_gives_a_rating(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    rows = [
        {"id": "a", "question": "Capital of France?", "contexts": ["I am not sure [[reply=Hmm, hard to say||10||2]]"]}
    ]
    run_id = uuid.uuid4().hex
    (result,) = score(judge_suite(["context_relevance_judge"], fake, model), rows, rclient, run_id)
    out = result["context_relevance_judge"]
    assert out.score == 1.0 and out.details["ratings"] == [2, 2] and out.details["calls"] == [3, 3]
    assert RunJudgeState(rclient, run_id, ttl_s=60).read()["parse_failures"] == 4


def test_no_valid_rating_within_the_attempts_is_unscorable(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    spec = {"name": "groundedness", "params": {"rating_attempts": 2}}
    rows = [{"id": "a", "answer": "Paris [[reply=It is 4.0]]", "contexts": ["France's capital is Paris."]}]
    (result,) = score(judge_suite([spec], fake, model), rows, rclient)
    out = result["groundedness"]
    assert out.score is None and out.error is None
    assert "no valid rating" in out.details["reason"] and out.details["calls"] == [2, 2]


def test_one_valid_judge_gives_the_score(rclient: redis.Redis, keys: str, model: str) -> None:
    def responder(prompt: str, nth: int) -> str:
        return "1" if prompt.startswith(GROUNDEDNESS.first[:30]) else "I cannot tell."

    with FakeProvider(api_key=keys, responder=responder) as fake:
        rows = [{"id": "a", "answer": "Paris is big", "contexts": ["Paris is the capital."]}]
        (result,) = score(judge_suite(["groundedness"], fake, model), rows, rclient)
    assert result["groundedness"].score == 0.5 and result["groundedness"].details["ratings"] == [1, None]


def test_a_judge_the_budget_stopped_leaves_the_item_stopped_not_rated_by_the_other_alone(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    row = {"id": "a", "question": "When?", "answer": "In 1879 [[rating=4]]", "reference": "1879"}
    first = ANSWER_ACCURACY.first.format(question=row["question"], answer=row["answer"], reference=row["reference"])
    room = estimate_tokens([{"role": "user", "content": first}]) + 16  # the first judge's call fits, the second not
    spec = {"name": "answer_accuracy", "params": {"concurrency": 1, "max_tokens_total": room}}
    (result,) = score(judge_suite([spec], fake, model), [row], rclient)
    out = result["answer_accuracy"]
    assert fake.stats()["requests"] == 1 and out.details["ratings"] == [4, None]
    assert out.score is None and out.details["stopped"] is True  # a resume asks the second judge


def test_a_judge_a_refused_key_stopped_makes_the_item_its_error_not_rated_by_the_other_alone(
    rclient: redis.Redis, keys: str, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first judge's rating comes from the cache (an earlier run), the second judge's call meets a refused key: the
    item is the refused key's error (what to fix, redone by a resume), not scored on the first judge's rating alone.
    Seen failing before: score 1.0, the 401 among its ``judge_errors``."""

    def responder(prompt: str, nth: int) -> str:  # the second judge's reply holds no rating: not cached
        return "4" if prompt.startswith(ANSWER_ACCURACY.first[:30]) else "I cannot tell."

    row = {"id": "a", "question": "When?", "answer": "In 1879", "reference": "1879"}
    spec = {"name": "answer_accuracy", "params": {"rating_attempts": 1}}
    with FakeProvider(api_key=keys, responder=responder) as fake:
        (before,) = score(judge_suite([spec], fake, model), [row], rclient)
        assert before["answer_accuracy"].details["ratings"] == [4, None]  # the first judge's reply is cached
        monkeypatch.setenv("GROQ_API_KEY", "gsk-WRONG-KEY-0123456789")
        (result,) = score(judge_suite([spec], fake, model), [row], rclient)
        assert fake.stats()["unauthorized"] == 1  # the second judge's only
    out = result["answer_accuracy"]
    assert out.details["ratings"] == [4, None] and out.score is None, out
    assert (
        out.error
        and out.error.startswith("the groq judge's key was refused")
        and out.error.endswith("check GROQ_API_KEY")
    ), out.error


def test_special_cases_score_without_asking_and_missing_inputs_are_unscorable(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    rows = [
        {"id": "blank-q", "question": "  ", "answer": "Lovelace", "contexts": ["some context"]},
        {"id": "blank-ctx", "question": "Who?", "answer": " ", "contexts": ["  ", ""]},
        {"id": "blank-answer", "question": " ", "answer": " ", "contexts": ["some context"]},
        {"id": "ctx-in-q", "question": "Is Paris the capital of France?", "answer": "Yes, Paris.",
         "contexts": ["Paris the capital"]},
        {"id": "answer-in-ctx", "question": "Who?", "answer": "Ada Lovelace", "contexts": ["It was Ada Lovelace."]},
        {"id": "no-ctx", "question": "Who?", "answer": "Ada"},
        {"id": "no-q", "answer": "Ada", "contexts": ["Ada wrote it."]},
    ]  # fmt: skip
    suite = judge_suite(["context_relevance_judge", "groundedness"], fake, model)
    results = dict(zip([r["id"] for r in rows], score(suite, rows, rclient), strict=True))
    assert results["blank-q"]["context_relevance_judge"].score == 0.0
    for metric in ("context_relevance_judge", "groundedness"):  # blank texts are no contexts (Ragas scores 0)
        assert results["blank-ctx"][metric].details["reason"] == "no contexts", results["blank-ctx"][metric]
    assert results["ctx-in-q"]["context_relevance_judge"].score == 0.0
    assert results["answer-in-ctx"]["groundedness"].score == 1.0
    assert results["no-ctx"]["context_relevance_judge"].score is None
    assert results["no-ctx"]["groundedness"].details["reason"] == "no contexts"
    assert results["no-q"]["context_relevance_judge"].details["reason"] == "no question"
    assert results["no-q"]["groundedness"].score == 1.0  # "Ada" is in the context
    assert results["blank-q"]["context_relevance_judge"].details["rule"] == "blank question"
    assert (results["blank-answer"]["groundedness"].score, results["blank-answer"]["groundedness"].details["rule"]) == (
        0.0, "blank answer")  # fmt: skip
    # Only three (item, metric) pairs were judged, two judges each: answer-in-ctx's relevance, and
    # ctx-in-q's and blank-q's groundedness.
    assert fake.stats()["requests"] == 6
    assert results["blank-q"]["groundedness"].details["calls"] == [1, 1]
    assert results["answer-in-ctx"]["context_relevance_judge"].details["calls"] == [1, 1]
    assert results["ctx-in-q"]["groundedness"].details["calls"] == [1, 1]


def test_rubric_judge_reads_json_and_normalises(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    rubric = {"description": "Names the right painter.", "scale": {str(i): f"level {i}" for i in range(1, 6)}}
    rows = [
        {"id": "json", "question": "Who?", "reference": "Monet", "rubric": rubric,
         "answer": 'Monet [[reply={"score": 4, "rationale": "right painter, no date"}]]'},
        {"id": "prose", "question": "Who?", "reference": "Monet",
         "answer": 'Manet [[reply=Sure! {"score": 2, "rationale": "close"} Done.]]'},
        {"id": "junk", "question": "Who?", "reference": "Monet", "answer": "?? [[reply=I give it a 5]]"},
        {"id": "no-ref", "question": "Who?", "answer": "Monet"},
    ]  # fmt: skip
    results = score(judge_suite(["rubric_judge"], fake, model), rows, rclient)
    assert _scores(results, "rubric_judge") == [0.8, 0.4, None, None]
    assert _scores(results, "rubric_judge_raw") == [4.0, 2.0, None, None]
    assert results[0]["rubric_judge"].details["rationale"] == "right painter, no date"
    assert (
        results[0]["rubric_judge"].details["rubric"] == "row"
        and results[1]["rubric_judge"].details["rubric"] == "default"
    )
    assert "no JSON score" in results[2]["rubric_judge"].details["reason"]
    assert results[3]["rubric_judge"].details["reason"] == "no reference"
    assert any("Names the right painter." in p and "5: level 5" in p for p in fake.prompts)
    # The seed framework's behaviour, on request: an unparseable reply scores 0.
    spec = {"name": "rubric_judge", "params": {"unparseable_as_zero": True}}
    (junk,) = score(judge_suite([spec], fake, model), [rows[2]], rclient)
    assert junk["rubric_judge"].score == 0.0 and junk["rubric_judge_raw"].score == 0.0


def test_breaker_marks_the_rest_of_the_run_unscorable(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    spec = {"name": "answer_accuracy", "params": {"breaker_failures": 2, "attempts": 1, "concurrency": 1}}
    rows = [{"id": f"q{i}", "question": "q?", "answer": "a", "reference": "b"} for i in range(6)]
    fake.fail_next("500", 100)
    results = score(judge_suite([spec], fake, model), rows, rclient)
    first, rest = results[0]["answer_accuracy"], [r["answer_accuracy"] for r in results[1:]]
    assert first.score is None and "HTTP 500" in (first.error or "")
    assert all(r.score is None and r.error is None and "circuit breaker open" in r.details["reason"] for r in rest)
    assert all(r.details["stopped"] is True for r in rest)  # a resume judges them again
    assert fake.stats()["requests"] == 2


def test_re_running_is_served_from_the_cache(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    rows = [{"id": f"q{i}", "question": f"q{i}?", "answer": f"a [[rating={2 * (i % 3)}]]", "reference": "b"}
            for i in range(5)]  # fmt: skip
    suite = judge_suite(["answer_accuracy"], fake, model)
    first = score(suite, rows, rclient, "run-a-" + model)
    calls = fake.stats()["requests"]
    second = score(suite, rows, rclient, "run-b-" + model)
    assert fake.stats()["requests"] == calls == 10  # 0 new calls
    assert _scores(first, "answer_accuracy") == _scores(second, "answer_accuracy")
    assert all(r["answer_accuracy"].details["cached"] for r in second)
    state = RunJudgeState(rclient, "run-b-" + model, ttl_s=60).read()
    assert state["cache_hits"] == 10 and state["calls"] == 0
    no_cache = judge_suite([{"name": "answer_accuracy", "params": {"cache": False}}], fake, model)
    score(no_cache, rows, rclient)
    assert fake.stats()["requests"] == 20


def test_a_reply_without_a_rating_is_not_served_from_the_cache_on_a_re_run(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    spec = {"name": "answer_accuracy", "params": {"rating_attempts": 1}}
    rows = [{"id": "a", "question": "When?", "answer": "In 1879 [[reply=Hmm, hard to say||4]]", "reference": "1879"}]
    suite = judge_suite([spec], fake, model)
    (first,) = score(suite, rows, rclient, "run-a-" + model)
    assert first["answer_accuracy"].score is None and fake.stats()["requests"] == 2
    (second,) = score(suite, rows, rclient, "run-b-" + model)  # both judges asked again: now they rate
    assert second["answer_accuracy"].score == 1.0 and not second["answer_accuracy"].details["cached"]
    state = RunJudgeState(rclient, "run-b-" + model, ttl_s=60).read()
    assert state["calls"] == 2 and state["cache_hits"] == 0 and state["parse_failures"] == 0
    (third,) = score(suite, rows, rclient, "run-c-" + model)  # the ratings are kept
    assert third["answer_accuracy"].score == 1.0 and third["answer_accuracy"].details["cached"]
    assert fake.stats()["requests"] == 4


def test_a_re_run_replays_the_replies_without_a_rating_that_a_rating_followed_and_pays_nothing(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """Not caching any reply without a rating re-asked its first attempts on every re-run (paid each time, forever
    where a judge at temperature 0 repeats them), and the re-run's score came from another sequence than the first's.
    """
    rows = [{"id": "a", "question": "Capital?", "contexts": ["Paris [[reply=Hmm, hard to say||10||2]]"]}]
    suite = judge_suite(["context_relevance_judge"], fake, model)
    (first,) = score(suite, rows, rclient, "run-a-" + model)
    assert first["context_relevance_judge"].details["calls"] == [3, 3] and fake.stats()["requests"] == 6
    (second,) = score(suite, rows, rclient, "run-b-" + model)
    assert fake.stats()["requests"] == 6, "a re-run paid again for replies the first run had paid"
    assert second["context_relevance_judge"].details["calls"] == [3, 3]
    assert second["context_relevance_judge"].score == 1.0 and second["context_relevance_judge"].details["cached"]
    state = RunJudgeState(rclient, "run-b-" + model, ttl_s=60).read()
    assert state["calls"] == 0 and state["cache_hits"] == 6 and state["parse_failures"] == 4


def test_half_an_emoji_in_a_row_is_judged_and_its_reply_cached(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """A lone surrogate in the answer failed every judge metric of the row with UnicodeEncodeError (hashing its
    cache key), and --dry-run crashed on it."""
    rows = [{"id": "half", "question": "When?", "answer": "In 1879 \ud83d [[rating=2]]", "reference": "1879",
             "contexts": ["It was 1879 \udfff."]}]  # fmt: skip
    suite = judge_suite(["answer_accuracy", "groundedness"], fake, model)
    first = score(suite, rows, rclient, "run-half-a-" + model)
    assert first[0]["answer_accuracy"].score == 0.5 and first[0]["answer_accuracy"].error is None
    assert first[0]["groundedness"].score == 1.0  # a rating both scales read: a reply without one is asked again
    calls = fake.stats()["requests"]
    again = score(suite, rows, rclient, "run-half-b-" + model)
    assert fake.stats()["requests"] == calls and again[0]["answer_accuracy"].details["cached"]


def test_openai_compatible_endpoint_and_many_calls_in_flight(rclient: redis.Redis, keys: str, model: str) -> None:
    """Concurrency 8: the 16 calls go in two rounds of 8 at once. The fake holds each reply until 8 calls are in
    flight together (or 60 s have passed, then answers at once): the rounds are seen, not inferred from a wall-clock
    bound that a loaded machine breaks. One call at a time, or a pool smaller than asked, never fills a round. The
    upper bound is weaker: a pool larger than asked fails ``max_in_flight == 8`` only when a 9th call reaches the fake
    before a round is answered (with 16 threads it did not here: each round is answered the moment its 8th call is in).
    """
    rounds = threading.Barrier(8, timeout=60)

    def responder(prompt: str, nth: int) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            rounds.wait()

    rows = [{"id": f"q{i}", "question": f"q{i}?", "answer": "a [[rating=2]]", "reference": "b"} for i in range(8)]
    with FakeProvider(api_key=keys, responder=responder) as fake:
        suite = judge_suite([{"name": "answer_accuracy", "params": {"concurrency": 8}}], fake, model, provider="openai")
        results = score(suite, rows, rclient)
        stats = fake.stats()
    assert _scores(results, "answer_accuracy") == [0.5] * 8
    assert stats["requests"] == 16 and stats["max_in_flight"] == 8 and not rounds.broken, stats


def test_a_missing_key_fails_every_item_with_the_variable_to_set(
    rclient: redis.Redis, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GROQ_API_KEY")
    rows = [{"id": "a", "question": "q?", "answer": "a", "reference": "b"}]
    (result,) = score(judge_suite(["answer_accuracy"], fake, model), rows, rclient)
    assert result["answer_accuracy"].score is None and "GROQ_API_KEY" in (result["answer_accuracy"].error or "")


def test_replies_all_cached_are_judged_without_a_key(
    rclient: redis.Redis, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge is built with its key at the first call it sends, not before the cache is read: a batch whose replies
    are all cached needs no key. Seen failing before: every item's error was the missing GROQ_API_KEY."""
    rows = [{"id": "a", "question": "q?", "answer": "a [[rating=4]]", "reference": "b"}]
    suite = judge_suite(["answer_accuracy"], fake, model)
    (first,) = score(suite, rows, rclient)
    sent = fake.stats()["requests"]
    monkeypatch.delenv("GROQ_API_KEY")
    (again,) = score(suite, rows, rclient)
    assert again["answer_accuracy"].error is None and again["answer_accuracy"].score == first["answer_accuracy"].score
    assert fake.stats()["requests"] == sent


def test_secrets_never_reach_logs_or_results(
    rclient: redis.Redis, model: str, keys: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # The server expects another key: it answers 401 and echoes the key it got, as OpenAI does.
    with FakeProvider(api_key="another-key") as fake:
        fake.fail_next("500", 3)
        rows = [{"id": f"q{i}", "question": "q?", "answer": "a", "reference": "b"} for i in range(3)]
        spec = {"name": "answer_accuracy", "params": {"attempts": 2}}
        results = score(judge_suite([spec, "rubric_judge"], fake, model, provider="openai"), rows, rclient)
        assert fake.stats()["unauthorized"] >= 1  # the first 401 stops judging (invalid_api_key)
    dumped = json.dumps([{k: v.model_dump() for k, v in r.items()} for r in results])
    assert "HTTP 401" in dumped and "***" in dumped  # the error is reported ...
    assert SECRET not in dumped and SECRET not in caplog.text  # ... without the key
    assert "judge call to openai failed" in caplog.text
    for key in rclient.scan_iter(match=f"*{model}*"):
        assert SECRET not in key
    assert CONTEXT_RELEVANCE.version != GROUNDEDNESS.version


ROW = {"id": "a", "question": "When was the bulb patented?", "answer": "In 1879 [[rating=4]]", "reference": "1879"}


def test_a_reasoning_model_gets_the_request_it_accepts_and_room_to_think(
    rclient: redis.Redis, keys: str, model: str
) -> None:
    """OpenAI's o-series and gpt-5 refuse ``max_tokens`` and temperature 0 (every call failed, the breaker stopped
    the run), and spend the reply cap thinking first (16 tokens left no answer)."""
    with FakeProvider(api_key=keys, reasoning_tokens=300) as fake:
        suite = judge_suite(["answer_accuracy", "rubric_judge"], fake, f"o3-mini-{model}", provider="openai")
        row = ROW | {"answer": 'In 1879 [[reply={"score": 5, "rationale": "same year"}||4]]'}
        (result,) = score(suite, [row], rclient)
        bodies = list(fake.bodies)
    assert result["rubric_judge"].score == 1.0 and result["answer_accuracy"].score == 1.0
    # 1 rubric call, 2 per dual judge (its first reply, the JSON, holds no 0/2/4 rating); each with room to think
    assert [b.get("max_completion_tokens") for b in bodies] == [2048] * 5
    assert not any("max_tokens" in b or "temperature" in b for b in bodies)


def test_groq_reasoning_models_are_stated_in_the_suite(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    """Not guessed for other providers (Qwen3, DeepSeek-R1 distills): ``judge.reasoning: true`` says it, and the
    Groq SDK sends the same request."""
    (result,) = score(judge_suite(["answer_accuracy"], fake, model, reasoning=True), [ROW], rclient)
    assert result["answer_accuracy"].score == 1.0
    assert [b.get("max_completion_tokens") for b in fake.bodies] == [2048, 2048]
    assert not any("max_tokens" in b or "temperature" in b for b in fake.bodies)


def test_a_reply_cut_while_thinking_is_an_error_saying_what_to_set_and_is_not_re_asked(
    rclient: redis.Redis, keys: str, model: str
) -> None:
    """Its content empty, ``finish_reason: length``: re-asking (5 calls per judge) would end alike every time."""
    with FakeProvider(api_key=keys, reasoning_tokens=300) as fake:
        spec = {"name": "answer_accuracy", "params": {"max_tokens": 100}}
        (result,) = score(judge_suite([spec], fake, model, provider="openai", reasoning=True), [ROW], rclient)
        requests = fake.stats()["requests"]
    out = result["answer_accuracy"]
    assert out.score is None and "cut at max_tokens=100 before it held an answer" in (out.error or "")
    assert "raise the metric's max_tokens)" in (out.error or "") and requests == 2  # one call per judge
    assert "judge.reasoning" not in (out.error or "")  # it is set already: no advice to set it


def test_a_refusal_or_a_cut_reply_is_never_graded_0_by_the_rubric_judge(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    rows = [
        ROW | {"id": "refused", "answer": "[[refuse=I can't help with grading this.]]"},
        ROW | {"id": "cut", "answer": '[[reply={"score": 5, "rationale": "' + "the same year, " * 20 + '"}]]'},
    ]
    spec = {"name": "rubric_judge", "params": {"unparseable_as_zero": True, "max_tokens": 20}}
    refused, cut = score(judge_suite([spec], fake, model, provider="openai"), rows, rclient)
    assert refused["rubric_judge"].score is None and cut["rubric_judge"].score is None
    assert refused["rubric_judge"].details["reason"] == "the judge refused: I can't help with grading this."
    assert cut["rubric_judge"].details["reason"] == "the judge's reply was cut at max_tokens=20"


def test_budgets_hold_when_the_server_reports_no_usage(rclient: redis.Redis, keys: str, model: str) -> None:
    """Without ``usage`` (LocalAI, some gateways) every call counted 0 tokens: ``max_tokens_total`` never
    stopped anything. The tokens are now estimated from the texts, and the summary says how many were."""
    rows = [ROW | {"id": f"q{i}", "question": f"When was bulb {i} patented?"} for i in range(10)]
    spec = {"name": "answer_accuracy", "params": {"max_tokens_total": 1500, "concurrency": 1}}
    run_id = uuid.uuid4().hex[:12]
    with FakeProvider(api_key=keys, usage=False) as fake:
        results = score(judge_suite([spec], fake, model, provider="openai"), rows, rclient, run_id)
    scored = [r for r in results if r["answer_accuracy"].score is not None]
    state = RunJudgeState(rclient, run_id, ttl_s=60).read()
    assert 0 < len(scored) < 10 and "budget reached" in json.dumps([r["answer_accuracy"].details for r in results])
    assert state["usage_estimated"] == state["calls"] > 0 and 0 < state["tokens_in"] + state["tokens_out"] <= 1500


def test_a_cancelled_run_starts_no_more_judge_calls(rclient: redis.Redis, keys: str, model: str) -> None:
    """``ragscore cancel`` was read when a chunk started only: a judge chunk already running (8 items, 8 calls in
    flight, 32 tasks per worker) went on paying for every one of its calls."""
    from ragscore_workers.store import RunState, RunStore

    run_id = uuid.uuid4().hex[:12]
    store = RunStore(rclient, ttl_s=600)
    store.create_run(run_id, {"state": RunState.RUNNING})
    rows = [ROW | {"id": f"q{i}", "question": f"When was bulb {i} patented?"} for i in range(20)]
    spec = {"name": "answer_accuracy", "params": {"concurrency": 2}}
    with FakeProvider(api_key=keys, latency_s=0.2) as fake:
        cancel = threading.Timer(0.5, store.set_state, args=(run_id, RunState.CANCELLED))
        cancel.start()
        results = score(judge_suite([spec], fake, model), rows, rclient, run_id)
        calls = fake.stats()["requests"]
    outs = [r["answer_accuracy"] for r in results]
    stopped = [o for o in outs if o.details.get("stopped")]
    assert calls < 20 and len(stopped) >= 10  # 40 calls without the check (4 s at 2 in flight)
    assert {o.details["reason"] for o in stopped} == {"run cancelled"} and all(o.score is None for o in stopped)
