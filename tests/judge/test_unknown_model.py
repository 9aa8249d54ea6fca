"""A misspelt judge model: the provider's 404 ``model_not_found`` stops judging at once, with one message naming the
model, the provider and the setting to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.api import IncompleteRunWarning

from ..fakes import FakeProvider
from .test_refused_key import JUDGES, REPLY, assert_every_item_errs

pytestmark = pytest.mark.integration

SERVED = "llama-3.3-70b-versatile"
TYPO = "llama-3.3-70b-versatil"


def test_a_model_the_provider_lacks_stops_judging_at_its_first_404(home: Path, keys: str, tmp_path: Path) -> None:
    """Groq and OpenAI answer a model name they do not serve with 404 model_not_found. Every call would fail so:
    judging stops at the first one (the breaker's five in a row let every item in flight fail one by one), no call is
    retried, and the run says which model, which provider and which setting. Every item of both judge metrics is an
    error saying so. Seen failing before: the run's reason was "circuit breaker open after 5 consecutive failed judge
    calls", and a 40-item try sent every item; later, the items after the first 404 were counted unscorable
    ("stopped") beside the errors of the items whose own call got the 404."""
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "reference": "r", "answer": f"a{i} {REPLY}"}
            for i in range(60)]  # fmt: skip
    with FakeProvider(api_key=keys, models={SERVED}) as fake:
        judge = {"provider": "groq", "model": TYPO, "base_url": fake.url, "rpm": None, "tpm": None}
        # Each task one call at a time, under a budget: a call starts only while the breaker (in Redis, shared by
        # every worker) is shut, so each of the 6 tasks sends at most the call it started before the first 404 came.
        metrics = [{"name": name, "params": {"concurrency": 1, "max_tokens_total": 10**9}} for name in JUDGES]
        suite = {"name": "model-typo", "metrics": metrics, "judge": judge, "chunk_size": {"judge": 10}}
        with pytest.warns(IncompleteRunWarning) as warned:
            result = evaluate(rows, suite, out=tmp_path / "out")
        stats = fake.stats()

    reason = result.summary.judge["breaker"]
    assert reason.startswith(f"the groq judge has no model {TYPO} (groq HTTP 404: The model `{TYPO}` does not exist")
    assert "set the suite's judge.model to a model groq serves" in reason
    (incomplete,) = [str(w.message) for w in warned if w.category is IncompleteRunWarning]  # not a GC's ResourceWarning
    assert f"judging stopped: {reason}" in incomplete
    assert result.summary.judge["retries"] == 0
    assert stats["unknown_model"] == stats["requests"] <= len(JUDGES) * len(rows) // 10  # of 180: none after the first
    assert_every_item_errs(result.summary, result.items, reason)


def test_a_served_model_is_judged(home: Path, keys: str, tmp_path: Path) -> None:
    """The fake's list of models lets the one it knows through: the test above fails for the typo alone."""
    rows = [{"id": "q0", "question": "Q?", "reference": "r", "answer": "a [[rating=4]]"}]
    with FakeProvider(api_key=keys, models={SERVED}) as fake:
        judge = {"provider": "groq", "model": SERVED, "base_url": fake.url, "rpm": None, "tpm": None}
        result = evaluate(rows, {"name": "model-ok", "metrics": ["answer_accuracy"], "judge": judge})
    assert result.items[0].metrics["answer_accuracy"].score == 1.0
