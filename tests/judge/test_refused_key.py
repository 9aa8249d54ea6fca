"""A wrong judge key: the provider's 401 ``invalid_api_key`` stops judging at once, with one message naming the provider
and the variable the key was read from (never the key); a 401 without that code still counts toward the breaker."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.api import IncompleteRunWarning

from ..fakes import FakeProvider

pytestmark = pytest.mark.integration

WRONG = "gsk-WRONG-KEY-0123456789"


@pytest.mark.parametrize("provider", ["groq", "openai"])
def test_a_refused_key_stops_judging_at_its_first_401(
    provider: str, home: Path, keys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groq and OpenAI answer every call with a wrong key 401 invalid_api_key: judging stops at the first one, no call
    is retried, and the run names the provider and the variable to check. Seen failing before: the run's reason was
    "circuit breaker open after 5 consecutive failed judge calls", and every item in flight sent its call."""
    monkeypatch.setenv("GROQ_API_KEY", WRONG)
    monkeypatch.setenv("OPENAI_API_KEY", WRONG)
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "reference": "r", "answer": f"a{i} [[rating=4]]"}
            for i in range(60)]  # fmt: skip
    with FakeProvider(api_key=keys) as fake:
        base_url = fake.url if provider == "groq" else fake.openai_base_url
        judge = {"provider": provider, "model": "m", "base_url": base_url, "rpm": None, "tpm": None}
        # As test_unknown_model.py's: one call at a time per task, so each of the 6 tasks sends at most the call it
        # started before the first 401 came.
        metric = {"name": "answer_accuracy", "params": {"concurrency": 1, "max_tokens_total": 10**9}}
        suite = {"name": "wrong-key", "metrics": [metric], "judge": judge, "chunk_size": {"judge": 10}}
        with pytest.warns(IncompleteRunWarning) as warned:
            result = evaluate(rows, suite, out=tmp_path / "out")
        stats = fake.stats()

    reason = result.summary.judge["breaker"]
    key_env = "GROQ_API_KEY" if provider == "groq" else "OPENAI_API_KEY"
    refused = "Invalid API Key" if provider == "groq" else "Incorrect API key provided: ***. You can find your API key"
    assert reason.startswith(f"the {provider} judge's key was refused ({provider} HTTP 401: {refused}"), reason
    assert reason.endswith(f"): check {key_env}") and reason.count(key_env) == 1, reason
    (incomplete,) = [str(w.message) for w in warned if w.category is IncompleteRunWarning]  # not a GC's ResourceWarning
    assert f"judging stopped: {reason}" in incomplete
    assert result.summary.judge["retries"] == 0
    assert stats["unauthorized"] <= len(rows) // 10  # of 120 calls: none after the first 401
    stopped = [
        item.metrics["answer_accuracy"].details for item in result.items if not item.metrics["answer_accuracy"].error
    ]
    assert len(stopped) >= len(rows) - len(rows) // 10 and all(d["stopped"] and d["reason"] == reason for d in stopped)
    written = "".join(p.read_text() for p in (tmp_path / "out").iterdir() if p.is_file())
    assert WRONG not in written and WRONG not in incomplete
    logged = "".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())
    assert f"judge call to {provider} failed for good: {provider} HTTP 401: {refused}" in logged  # the workers' logs
    assert WRONG not in logged


def test_a_refused_key_stops_only_the_judge_that_reads_it(
    home: Path, keys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two judges, one a metric's api_key_env each: the provider refuses one key. The other judge's metric scores every
    item; the refused one's items say the variable to check (never the key), the run finishes, and its summary names
    the judge that stopped and why. Seen failing before: the one refused key stopped both metrics (answer_accuracy
    scored no item after the first 401)."""
    monkeypatch.setenv("JUDGE_KEY_GOOD", keys)
    monkeypatch.setenv("JUDGE_KEY_BAD", WRONG)
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "reference": "r", "answer": f"a{i} [[rating=4]]",
             "contexts": [f"context {i}"]} for i in range(40)]  # fmt: skip
    with FakeProvider(api_key=keys) as fake:  # OpenAI's 401 body echoes the key it refused
        judge = {"provider": "openai", "model": "m", "base_url": fake.openai_base_url, "rpm": None, "tpm": None}
        metrics = [  # the refused judge first: a task asks it before the other
            {"name": "context_relevance_judge", "params": {"concurrency": 1, "api_key_env": "JUDGE_KEY_BAD"}},
            {"name": "answer_accuracy", "params": {"concurrency": 1, "api_key_env": "JUDGE_KEY_GOOD"}},
        ]
        suite = {"name": "two-keys", "metrics": metrics, "judge": judge, "chunk_size": {"judge": 10}}
        with pytest.warns(IncompleteRunWarning) as warned:
            result = evaluate(rows, suite, out=tmp_path / "out")

    assert result.summary.metrics["answer_accuracy"].n == len(rows)
    assert {item.metrics["answer_accuracy"].score for item in result.items} == {1.0}
    reason = result.summary.judge["breaker"]
    assert reason.startswith("openai/m with the key in JUDGE_KEY_BAD: the openai judge's key was refused (openai HTTP "
                             "401: Incorrect API key provided: ***."), reason  # fmt: skip
    assert reason.endswith("): check JUDGE_KEY_BAD") and "JUDGE_KEY_GOOD" not in reason, reason
    refused = [item.metrics["context_relevance_judge"] for item in result.items]
    assert result.summary.metrics["context_relevance_judge"].n == 0
    assert all("check JUDGE_KEY_BAD" in (r.error or r.details.get("reason", "")) for r in refused), refused[:3]
    (incomplete,) = [str(w.message) for w in warned if w.category is IncompleteRunWarning]
    assert f"judging stopped: {reason}" in incomplete
    written = "".join(p.read_text() for p in (tmp_path / "out").iterdir() if p.is_file())
    logged = "".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())
    assert "JUDGE_KEY_BAD" in written and WRONG not in written + incomplete + logged
