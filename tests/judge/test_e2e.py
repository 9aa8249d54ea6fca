"""End to end: ``evaluate`` in embedded mode (private Redis, a real judge worker) against the fake provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator import evaluate
from orchestrator.api import IncompleteRunWarning
from orchestrator.embedded_redis import EmbeddedRedis
from ragscore_workers.providers import RunJudgeState
from ragscore_workers.schemas import RunSummary

from ..fakes import FakeProvider
from .conftest import SECRET

pytestmark = pytest.mark.integration

RUBRIC_PREFIX = "You grade a model's answer"


def _responder(prompt: str, nth: int) -> str | None:
    """Rubric prompts get JSON (score = rating marker + 1); dual-judge prompts fall back to the marker."""
    if not prompt.startswith(RUBRIC_PREFIX):
        return None
    rating = int(prompt.split("[[rating=", 1)[1][0]) if "[[rating=" in prompt else 2
    return json.dumps({"score": rating + 1, "rationale": "fake judge"})


def _rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(6):
        rating = 2 if i % 2 == 0 else 0
        rows.append({"id": f"q{i}", "question": f"Question {i}?", "reference": f"reference {i}",
                     "answer": f"answer {i} [[rating={rating}]]", "contexts": [f"context {i}"]})  # fmt: skip
    rows[1]["answer"] += " [[fault=500:1]]"  # the first call of each of its prompts fails: retried
    del rows[5]["contexts"]  # groundedness needs contexts: unscorable
    return rows


def _redis_values(client: redis.Redis) -> str:
    """Every key and value in the embedded Redis, as text (for the secrets check)."""
    out = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key)
        out.append(key)
        if kind == "string":
            out.append(str(client.get(key)))
        elif kind == "hash":
            out.append(json.dumps(client.hgetall(key)))
        elif kind == "list":
            out.append(json.dumps(client.lrange(key, 0, -1)))
        elif kind == "set":
            out.append(json.dumps(sorted(client.smembers(key))))
        elif kind == "zset":
            out.append(json.dumps(client.zrange(key, 0, -1)))
    return "\n".join(out)


def test_embedded_judge_run_then_a_rerun_that_pays_for_nothing(
    home: Path, keys: str, model: str, tmp_path: Path
) -> None:
    suite = {
        "name": "judge-e2e",
        "metrics": ["answer_accuracy", "groundedness", "rubric_judge"],
        "judge": {"provider": "groq", "model": model, "base_url": None, "rpm": 300, "tpm": 100_000},
    }
    with FakeProvider(api_key=keys, rpm=300, tpm=100_000, responder=_responder) as fake:
        suite["judge"]["base_url"] = fake.url  # type: ignore[index]
        first = evaluate(_rows(), suite, out=tmp_path / "first")
        calls = fake.stats()["requests"]
        second = evaluate(_rows(), suite, out=tmp_path / "second")
        stats = fake.stats()

    # 6 items x 2 accuracy judges, 5 x 2 groundedness judges (one item has no contexts), 6 rubric calls,
    # and the 5 prompts of q1 failed once each and were retried.
    assert calls == 6 * 2 + 5 * 2 + 6 + 5
    assert stats["requests"] == calls  # the re-run made 0 new calls
    assert stats.get("rate_limited", 0) == 0
    by_id = {item.id: {k: m.score for k, m in item.metrics.items()} for item in first.items}
    assert by_id["q0"] == {"answer_accuracy": 0.5, "groundedness": 1.0, "rubric_judge": 0.6, "rubric_judge_raw": 3.0}
    assert by_id["q1"] == {"answer_accuracy": 0.0, "groundedness": 0.0, "rubric_judge": 0.2, "rubric_judge_raw": 1.0}
    assert by_id["q5"]["groundedness"] is None and by_id["q5"]["answer_accuracy"] == 0.0
    assert by_id == {item.id: {k: m.score for k, m in item.metrics.items()} for item in second.items}
    assert first.summary.metrics["answer_accuracy"].mean == pytest.approx(0.25)
    assert all(item.metrics["answer_accuracy"].details["cached"] for item in second.items)

    # Per-run counters, in the embedded Redis (which persists between runs).
    embedded = EmbeddedRedis(home)
    embedded.acquire()
    try:
        before = RunJudgeState(embedded.client, first.summary.run_id, ttl_s=60).read()
        after = RunJudgeState(embedded.client, second.summary.run_id, ttl_s=60).read()
        dump = _redis_values(embedded.client)
    finally:
        embedded.release()
    assert before["calls"] == calls and before["retries"] == 5 and before["cache_hits"] == 0
    assert before["tokens_in"] == stats["tokens_in"] and before["tokens_out"] == stats["tokens_out"]
    assert after["calls"] == 0 and after["cache_hits"] == calls - 5

    # The key is in no result, report, log or Redis value.
    texts = [p.read_text(errors="replace") for d in (tmp_path, home / "logs") for p in d.rglob("*") if p.is_file()]
    assert texts and not any(SECRET in t for t in texts)
    assert SECRET not in dump and first.summary.run_id in dump
    # ... and the same counters in summary.judge, with the two judges' agreement.
    assert first.summary.judge["calls"] == calls and first.summary.judge["retries"] == 5
    assert second.summary.judge["calls"] == 0 and second.summary.judge["cache_hits"] == calls - 5
    agreement = first.summary.judge["agreement"]["answer_accuracy"]
    assert agreement["n"] == 6 and agreement["percent"] == 100.0  # both judges read the same marker


def test_combined_mixes_the_judge_and_evidence_overlap_across_queues(
    home: Path, keys: str, model: str, tmp_path: Path
) -> None:
    """combined = λ·rubric_judge + (1-λ)·evidence_overlap, derived during aggregation from two queues' results."""
    rows = [
        {"id": "a", "question": "Q?", "reference": "gold", "answer": "ans [[rating=4]]",
         "gold_evidence_sentences": ["S1"], "evidence_sentences": ["S1"],
         "sentences": {"S1": "the cat sat", "S2": "a dog"}},
        {"id": "b", "question": "Q?", "reference": "gold", "answer": "ans [[rating=0]]",
         "gold_evidence_sentences": ["S1"], "evidence_sentences": ["S2"],
         "sentences": {"S1": "the cat sat", "S2": "a dog"}},
        {"id": "c", "question": "Q?", "reference": "gold", "answer": "ans [[rating=2]]"},  # no evidence ids
    ]  # fmt: skip
    suite = {
        "metrics": ["rubric_judge", "evidence_overlap", {"name": "combined", "params": {"lambda": 0.25}}],
        "judge": {"provider": "groq", "model": model, "rpm": None, "tpm": None},
    }
    with FakeProvider(api_key=keys, responder=_responder) as fake:
        suite["judge"]["base_url"] = fake.url  # type: ignore[index]
        result = evaluate(rows, suite, out=tmp_path / "out")
    scores = {i.id: {k: m.score for k, m in i.metrics.items()} for i in result.items}
    # rubric: marker + 1 -> a: 5/5, b: 1/5; evidence: a 1.0 (same sentence), b 0.0
    assert scores["a"]["combined"] == pytest.approx(0.25 * 1.0 + 0.75 * 1.0)
    assert scores["b"]["combined"] == pytest.approx(0.25 * 0.2 + 0.75 * 0.0)
    # c has no gold evidence field at all: evidence_overlap is unscorable, so combined is too (never 0)
    assert scores["c"]["evidence_overlap"] is None and scores["c"]["combined"] is None
    c_combined = next(i for i in result.items if i.id == "c").metrics["combined"]
    assert "evidence_overlap has no score" in c_combined.details["reason"]
    assert result.summary.metrics["combined"].n == 2 and result.summary.metrics["combined"].unscorable == 1
    lines = (tmp_path / "out" / "items.jsonl").read_text().splitlines()
    assert all("combined" in json.loads(line)["metrics"] for line in lines)


def test_the_summary_names_the_endpoint_that_judged_when_the_environment_overrides_the_suites(
    home: Path, keys: str, model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAGSCORE_JUDGE_BASE_URL (the workers' environment) wins over the suite's base_url; the summary says so,
    since run_info.json's suite still names the suite's URL."""
    suite = {
        "name": "judge-override",
        "metrics": ["answer_accuracy"],
        "judge": {"provider": "groq", "model": model, "base_url": "http://127.0.0.1:9", "rpm": None, "tpm": None},
    }
    rows = [{"id": "q0", "question": "Q?", "reference": "r", "answer": "a [[rating=4]]"}]
    with FakeProvider(api_key=keys) as fake:
        url = fake.url
        monkeypatch.setenv("RAGSCORE_JUDGE_BASE_URL", url)
        result = evaluate(rows, suite, out=tmp_path / "out")
        requests = fake.stats()["requests"]
        same = evaluate(rows, {**suite, "judge": {**suite["judge"], "base_url": url}})  # from the cache

    assert requests == 2 and result.summary.judge["base_url"] == url
    assert result.items[0].metrics["answer_accuracy"].score == 1.0
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["judge"]["base_url"] == url
    assert same.summary.judge["cache_hits"] == 2 and "base_url" not in same.summary.judge


def test_a_reply_holding_a_lone_surrogate_is_scored_and_reported(home: Path, keys: str, model: str,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    """JSON lets a provider send "\\udfff" (half of a UTF-16 pair); the reply's text is cleaned, so the
    rationale reaches items.jsonl and the reports instead of failing them."""

    def responder(prompt: str, nth: int) -> str | None:
        return json.dumps({"score": 4, "rationale": "fine \udfff here"}) if prompt.startswith(RUBRIC_PREFIX) else None

    suite = {"name": "surrogate", "metrics": ["rubric_judge"],
             "judge": {"provider": "openai", "model": model, "base_url": None, "rpm": None, "tpm": None}}  # fmt: skip
    rows = [{"id": "q0", "question": "Q?", "reference": "r", "answer": "a"}]
    with FakeProvider(api_key=keys, responder=responder) as fake:
        suite["judge"]["base_url"] = fake.openai_base_url  # type: ignore[index]
        result = evaluate(rows, suite, out=tmp_path / "out")

    rubric = result.items[0].metrics["rubric_judge"]
    assert rubric.score == 0.8 and rubric.details["rationale"] == "fine \ufffd here"
    assert (tmp_path / "out" / "report.html").is_file()


def test_a_judge_whose_replies_hold_no_rating_is_said_to_be_the_cause(
    home: Path, keys: str, model: str, tmp_path: Path
) -> None:
    """A judge model that answered "0" to every rubric prompt scored nothing; the warning (and ragscore run's last
    line) said to fix "rows without a field it needs: misnamed columns, the wrong fmt": the rows were fine. It now
    points at the judge's replies; combined, unscorable for the judge's sake, is said the same way."""
    suite = {"name": "no-rating", "metrics": ["rubric_judge", "evidence_overlap", "combined"],
             "judge": {"provider": "openai", "model": model, "base_url": None, "rpm": None, "tpm": None}}  # fmt: skip
    rows = [{"id": f"q{i}", "question": "Q?", "reference": "r", "answer": "a", "gold_evidence_sentences": ["S1"],
             "evidence_sentences": ["S1"], "sentences": {"S1": "the cat sat"}} for i in range(2)]  # fmt: skip
    with FakeProvider(api_key=keys) as fake:  # no responder, no marker: every reply is "0"
        suite["judge"]["base_url"] = fake.openai_base_url  # type: ignore[index]
        with pytest.warns(IncompleteRunWarning) as caught:
            result = evaluate(rows, suite, out=tmp_path / "out")

    said = " ".join(str(w.message) for w in caught if w.category is IncompleteRunWarning)
    assert "no scores for rubric_judge, rubric_judge_raw, combined: every item was unscorable" in said, said
    assert "fix the cause (the judge's replies gave no rating: items.jsonl holds each one in its details" in said
    assert "misnamed columns" not in said
    assert result.items[0].metrics["rubric_judge"].details["reply"] == "0"


@pytest.mark.parametrize(("pace", "said"), [("burst", ""), ("even", " · pace even")])
def test_report_md_names_the_judge_that_judged(
    home: Path, keys: str, model: str, tmp_path: Path, pace: str, said: str
) -> None:
    """report.md's judge section had counters and agreement but not which provider and model judged (report.html
    said it): a report posted alone, as a CI comment, could not tell one judge's scores from another's. A judge held
    to ``pace: even`` says so (its run is slower than its rpm alone says); ``burst``, the default, goes unsaid."""
    rows = [{"id": "q0", "question": "Q?", "reference": "r", "answer": "a [[rating=4]]"}]
    with FakeProvider(api_key=keys) as fake:
        judge = {"provider": "openai", "model": model, "base_url": fake.openai_base_url, "rpm": 60, "tpm": None}
        suite = {"name": "judge-named", "metrics": ["answer_accuracy"], "judge": judge | {"pace": pace}}
        result = evaluate(rows, suite, out=tmp_path / "out")
    assert result.items[0].metrics["answer_accuracy"].score == 1.0
    judge_section = (tmp_path / "out" / "report.md").read_text().split("## Judge\n\n", 1)[1]
    expected = f"provider openai · model {model} · rpm 60{said}\n\n| calls |"
    assert judge_section.startswith(expected), judge_section[:200]
    assert ("pace <b>even</b>" in (tmp_path / "out" / "report.html").read_text()) == (pace == "even")


def test_an_unpriced_runs_judge_cost_is_null_in_summary_json_not_a_free_looking_zero(
    home: Path, keys: str, model: str, tmp_path: Path
) -> None:
    """A judge model without a price: summary.json's judge.cost is null (unknown, not free: a user summing costs across
    runs would read 0 as paid nothing), and report.md says ``-``; its re-run, answered by the cache, paid nothing (0);
    a priced run's cost is its number; a summary stored before (cost 0, every call unpriced) reads as null. Seen
    failing before: summary.json held "cost": 0.0 for the unpriced run."""
    rows = [{"id": "q0", "question": "Q?", "reference": "r", "answer": "a [[rating=4]]"}]
    judge = {"provider": "groq", "model": model, "rpm": None, "tpm": None}
    with FakeProvider(api_key=keys) as fake:
        suite = {"name": "unpriced", "metrics": ["answer_accuracy"], "judge": judge | {"base_url": fake.url}}
        evaluate(rows, suite, out=tmp_path / "unpriced")
        evaluate(rows, suite, out=tmp_path / "cached")
        priced = [{"name": "answer_accuracy", "params": {"cache": False, "prices": {model: [1_000_000, 0]}}}]
        evaluate(rows, suite | {"metrics": priced}, out=tmp_path / "priced")

    def written(run: str) -> dict[str, Any]:
        return json.loads((tmp_path / run / "summary.json").read_text())["judge"]

    unpriced = written("unpriced")
    assert (unpriced["calls"], unpriced["unpriced_calls"], unpriced["cost"]) == (2, 2, None), unpriced
    assert "| - |" in (tmp_path / "unpriced" / "report.md").read_text()
    assert (written("cached")["calls"], written("cached")["cost"]) == (0, 0)
    assert written("priced")["cost"] > 0 and written("priced")["unpriced_calls"] == 0
    stored = json.loads((tmp_path / "unpriced" / "summary.json").read_text())
    stored["judge"]["cost"] = 0.0  # as an older ragscore wrote it
    assert RunSummary.model_validate(stored).judge["cost"] is None
