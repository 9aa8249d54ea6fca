"""``meta_eval`` points against the fake provider (real HTTP, real Redis for the judge's limiter and cache)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.meta_eval import parse_proposals
from ragscore_workers.metrics.registry import RunContext, get_metric, resolve
from ragscore_workers.schemas import Row, Suite
from ragscore_workers.scoring import score_rows
from ragscore_workers.store import redis_client

from ..fakes import FakeProvider
from ..support import RedisProcess

KEY = "gsk-TEST-META-0a1b2c"
ENTROPY = json.dumps({"points": [
    {"text": "defines the term", "type": "keyword", "params": {"keywords": ["disorder"]}},
    {"text": "runs code", "type": "code_test", "params": {}},
    {"text": "gives the unit", "type": "regex", "params": {"pattern": "J/K"}},
    {"text": "one too many", "type": "keyword", "params": {"keywords": ["heat"]}},
]})  # fmt: skip


PROMPTS: list[str] = []


def responder(prompt: str, nth: int) -> str | None:
    PROMPTS.append(prompt)
    if "Entropy is" in prompt:
        return ENTROPY
    if "Retry me" in prompt:
        return "Let me think about it." if nth == 0 else '```json\n{"points": []}\n```'
    if "Never JSON" in prompt:
        return "No checks needed, I believe."
    return None


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    monkeypatch.setenv("GROQ_API_KEY", KEY)
    monkeypatch.delenv("RAGSCORE_JUDGE_BASE_URL", raising=False)
    with FakeProvider(api_key=KEY, responder=responder) as server:
        yield server


def _suite(fake: FakeProvider) -> Suite:
    """A checks suite whose judge is the fake, under a model name of its own (no cache shared between tests)."""
    model = f"fake-{uuid.uuid4().hex[:8]}"
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    return Suite.model_validate({"metrics": ["checks"], "judge": judge})


def _score(rows: list[dict[str, Any]], suite: Suite, redis_url: str) -> list[dict]:
    ctx = RunContext(run_id=uuid.uuid4().hex[:12], suite=suite, redis=redis_client(redis_url))
    return score_rows([Row.model_validate(r) for r in rows], resolve(suite), ctx)


def _point(result: dict, pid: str) -> dict:
    return next(p for p in result["checks"].details["points"] if p["id"] == pid)


AUTHOR = {"id": "term", "text": "Names the term", "type": "keyword", "params": {"keywords": ["entropy"]}}


def test_meta_eval_proposes_validates_runs_and_reports_extra_points_apart(
    fake: FakeProvider, redis_server: RedisProcess
) -> None:
    PROMPTS.clear()
    meta = {"id": "meta", "type": "meta_eval", "params": {"max_points": 2}, "informational": True}
    rows = [
        {"id": "a", "question": "What is entropy?", "answer": "Entropy is a measure of disorder.",
         "checks": [AUTHOR, meta]},
        {"id": "b", "question": "Retry me", "answer": "Retry me: entropy.", "checks": [AUTHOR, meta]},
        {"id": "c", "question": "Never JSON", "answer": "Never JSON entropy.",
         "checks": [AUTHOR, meta | {"informational": False}]},
    ]  # fmt: skip
    a, b, c = _score(rows, _suite(fake), redis_server.url)

    extra = _point(a, "meta")
    figures = extra["figures"]
    assert [p["id"] for p in a["checks"].details["points"]] == ["term", "meta"]  # extra points are not among them
    assert [(p["id"], p["type"], p["status"]) for p in figures["extra_points"]] == [
        ("meta1", "keyword", "passed"), ("meta2", "regex", "failed")
    ]  # fmt: skip
    reasons = [r["reason"] for r in figures["rejected"]]
    assert len(reasons) == 2 and "'code_test' not in" in reasons[0] and "over max_points (2)" in reasons[1]
    assert figures["proposed"] == 4 and figures["kept"] == 2 and figures["passed"] == 1
    assert extra["status"] == "failed" and extra["note"] == "1 of 2 extra points passed, 2 rejected"
    assert a["checks"].score == 1.0  # informational: reported, not scored

    retried = _point(b, "meta")
    assert retried["status"] == "passed" and retried["figures"]["calls"] == 2 and retried["figures"]["kept"] == 0

    never = _point(c, "meta")
    assert never["status"] == "error" and never["passed"] is None and "no JSON points in 2 replies" in never["note"]
    assert c["checks"].score is None and c["checks"].error.startswith("point meta: meta_eval: no JSON points")
    assert c["checks"].details["errors"] == ["meta"]  # the judge failed, not the answer: no score, the points kept
    assert _point(c, "term")["status"] == "passed"

    assert fake.stats()["ok"] == 5  # a once, b and c twice (re-asked for JSON)
    assert all("- Names the term" in p and "Checks already made" in p for p in PROMPTS)
    assert all("meta_eval" not in p and KEY not in p for p in PROMPTS)
    assert "at most 2 extra checks" in PROMPTS[0]


def test_a_meta_eval_point_whose_judge_the_run_stopped_makes_its_item_stopped_not_an_error_nor_a_partial_score(
    fake: FakeProvider, redis_server: RedisProcess
) -> None:
    """A scored meta_eval point whose judge call its budget refused (as the breaker's count would stop it) is
    ``not_run``, its note saying why, and its item is stopped (a resume runs it again), never an error nor scored on
    its other points alone; an informational one so stopped changes nothing. Seen failing before: the items were
    errors ("point meta: meta_eval: budget reached: ..."), counted against the run as the judge's failure; then the
    item with an author's point beside it was scored 1.0 on that point alone, and a resume never asked its judge."""
    meta = {"id": "meta", "type": "meta_eval", "params": {"max_tokens_total": 1}}  # no call fits the budget
    rows = [
        {"id": "a", "question": "What is entropy?", "answer": "Entropy is a measure of disorder.",
         "checks": [AUTHOR, meta]},
        {"id": "b", "question": "What is heat?", "answer": "Heat is energy.", "checks": [meta]},
        {"id": "c", "question": "What is work?", "answer": "Work is entropy's cousin.",
         "checks": [AUTHOR, meta | {"informational": True}]},
    ]  # fmt: skip
    a, b, c = _score(rows, _suite(fake), redis_server.url)

    for item in (a, b):
        stopped = _point(item, "meta")
        assert (stopped["status"], stopped["passed"]) == ("not_run", None)
        assert stopped["note"].startswith("meta_eval not scored: budget reached: the next judge call could pass the")
        result = item["checks"]
        assert (result.error, result.score, result.passed) == (None, None, None), result
        assert result.details["stopped"] and result.details["not_run"] == ["meta"]
        assert result.details["reason"].startswith("point meta: meta_eval not scored: budget reached"), result.details
    assert _point(a, "term")["status"] == "passed"  # every point's result kept in the details
    assert (c["checks"].error, c["checks"].score, _point(c, "meta")["status"]) == (None, 1.0, "not_run")
    assert fake.stats().get("requests", 0) == 0


def test_a_scored_point_depending_on_a_stopped_informational_meta_eval_point_makes_its_item_stopped(
    fake: FakeProvider, redis_server: RedisProcess
) -> None:
    """An informational meta_eval point whose judge the run stopped, which a scored point depends on (directly or
    through a chain), stops the item as a scored one would: a resume asks that judge again. Seen failing before: the
    dependent points were ``skipped`` (counted failed), the item scored 0.5 and stored as done."""
    meta = {"id": "meta", "type": "meta_eval", "params": {"max_tokens_total": 1}, "informational": True}

    def keyword(pid: str, word: str, depends_on: str, **more: bool) -> dict[str, Any]:
        return {"id": pid, "text": pid, "type": "keyword", "params": {"keywords": [word]}, "depends_on": [depends_on],
                **more}  # fmt: skip

    after, chained = keyword("after", "entropy", "meta", informational=True), keyword("chained", "disorder", "after")
    entropy = {"question": "What is entropy?", "answer": "Entropy is a measure of disorder."}
    rows = [{"id": "a", **entropy, "checks": [AUTHOR, meta, after | {"informational": False}]},
            {"id": "b", **entropy, "checks": [AUTHOR, meta, after, chained]}]  # fmt: skip
    a, b = _score(rows, _suite(fake), redis_server.url)

    for item, dependent in ((a, "after"), (b, "chained")):
        result = item["checks"]
        assert (result.error, result.score, result.passed) == (None, None, None), result
        assert result.details["stopped"] and result.details["reason"].startswith(f"point {dependent}: not run: ")
        assert "which the run stopped: budget reached" in result.details["reason"], result.details
        point = _point(item, dependent)
        assert (point["status"], point["passed"]) == ("not_run", None), point
        assert "budget reached" in point["note"] and point["figures"]["stopped"].startswith("budget reached")
        assert _point(item, "term")["status"] == "passed"
    assert b["checks"].details["not_run"] == ["meta", "after", "chained"]
    assert fake.stats().get("requests", 0) == 0


def test_meta_eval_replies_are_cached_across_runs(fake: FakeProvider, redis_server: RedisProcess) -> None:
    row = {"id": "a", "question": "What is entropy?", "answer": "Entropy is a measure of disorder.",
           "checks": [AUTHOR, {"type": "meta_eval"}]}  # fmt: skip
    suite = _suite(fake)
    first, second = (_score([row], suite, redis_server.url)[0] for _ in range(2))
    assert _point(first, "p2")["figures"]["cached"] is False and _point(second, "p2")["figures"]["cached"] is True
    extra = [[{k: v for k, v in p.items() if k != "ms"} for p in _point(r, "p2")["figures"]["extra_points"]]
             for r in (first, second)]  # fmt: skip
    assert extra[0] == extra[1] and len(extra[0]) == 3
    assert fake.stats()["ok"] == 1


def test_meta_eval_params_and_reply_parsing() -> None:
    checks = get_metric("checks")
    with pytest.raises(ConfigError, match="not cpu validators"):
        checks.parse_params({"points": [{"type": "meta_eval", "params": {"types": ["code_test"]}}]})
    with pytest.raises(ConfigError, match="max_points"):
        checks.parse_params({"points": [{"type": "meta_eval", "params": {"max_points": 50}}]})
    assert parse_proposals('{"points": [{"type": "keyword"}]}') == [{"type": "keyword"}]
    assert parse_proposals('[{"type": "length"}]') == [{"type": "length"}]
    assert parse_proposals('{"other": 1}') is None and parse_proposals("no") is None


def test_meta_eval_shows_the_judge_the_suite_level_points_of_a_row_without_its_own(
    fake: FakeProvider, redis_server: RedisProcess
) -> None:
    """Points given once in the suite (``checks.points``) are the author's points of every row: the judge must see
    them under "Checks already made", or it proposes them again."""
    PROMPTS.clear()
    suite = _suite(fake).model_copy(update={"metrics": Suite.model_validate(
        {"metrics": [{"name": "checks", "params": {"points": [AUTHOR, {"id": "meta", "type": "meta_eval"}]}}]}
    ).metrics})  # fmt: skip
    (result,) = _score([{"id": "a", "question": "What is entropy?", "answer": "Entropy is disorder."}], suite,
                       redis_server.url)  # fmt: skip
    assert _point(result, "term")["status"] == "passed" and _point(result, "meta")["figures"]["kept"] == 3
    assert len(PROMPTS) == 1 and "Checks already made:\n- Names the term\n" in PROMPTS[0]
