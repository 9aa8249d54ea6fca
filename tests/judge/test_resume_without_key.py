"""A resume with no judge call left to send needs no judge key (embedded, real workers, real HTTP to the fake
provider): the key is asked for only where the run's judge has items left to score."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate, resume
from ragscore_workers.errors import ConfigError

from ..fakes import FakeProvider
from .conftest import SECRET

pytestmark = pytest.mark.integration

ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": "r", "answer": f"a{i} [[rating=4]]"} for i in range(6)]


def _suite(fake: FakeProvider, model: str) -> dict:
    judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    return {"name": "judged", "metrics": ["exact_match", "answer_accuracy"], "judge": judge}


def test_a_resume_whose_judge_is_done_needs_no_key(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every item judged, then resumed without GROQ_API_KEY: the reports are written again, nothing is sent. Seen
    failing before: the resume was refused for the missing key ("set the environment variable GROQ_API_KEY")."""
    out = tmp_path / "out"
    first = evaluate(ROWS, _suite(fake, model), out=out, quiet=True)
    assert first.summary.metrics["answer_accuracy"].n == len(ROWS)
    sent = fake.stats()["requests"]
    monkeypatch.delenv("GROQ_API_KEY")
    again = resume(out, quiet=True)
    assert again.summary.metrics["answer_accuracy"].n == len(ROWS) and fake.stats()["requests"] == sent
    written = "".join(p.read_text() for p in out.iterdir() if p.is_file())
    assert SECRET not in written


def test_a_resume_whose_only_errors_are_another_queues_needs_no_key(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cpu metric's error (a typed answer's malformed ``expected``), every item judged: resumed without the key,
    the cpu item is scored again and no judge call is sent. Seen failing before: any error of the run asked for the
    key ("set the environment variable GROQ_API_KEY"), as errors were not counted per queue."""
    out = tmp_path / "out"
    rows = [row | {"question_type": "Yes/No", "expected": "yes"} for row in ROWS]
    rows[0]["expected"] = "Paris"  # not one yes or one no: typed_answer's error for that item
    suite = _suite(fake, model)
    suite["metrics"][0] = "typed_answer"
    first = evaluate(rows, suite, out=out, quiet=True)
    assert first.summary.metrics["typed_answer"].errors == 1
    assert first.summary.metrics["answer_accuracy"].n == len(ROWS)
    sent = fake.stats()["requests"]
    monkeypatch.delenv("GROQ_API_KEY")
    again = resume(out, quiet=True)
    assert again.summary.metrics["typed_answer"].errors == 1 and fake.stats()["requests"] == sent


def test_a_resume_with_judge_items_left_still_asks_for_the_key(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge call failed for good (the item's error): resumed without the key, it is refused naming the variable."""
    out = tmp_path / "out"
    suite = _suite(fake, model)
    suite["metrics"][1] = {"name": "answer_accuracy", "params": {"concurrency": 1}}  # one call at a time
    fake.fail_next("400", 2)  # not retried: both judges of the first item fail, its output an error
    first = evaluate(ROWS, suite, out=out, quiet=True)
    assert first.summary.metrics["answer_accuracy"].errors >= 1
    monkeypatch.delenv("GROQ_API_KEY")
    with pytest.raises(ConfigError, match="GROQ_API_KEY"):
        resume(out, quiet=True)


def test_a_resume_with_judge_items_a_budget_stopped_still_asks_for_the_key(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items the budget stopped (stored stopped, no error, every output written): resumed with a higher budget
    without the key, it is refused naming the variable, not sent to workers whose every call would fail. Seen failing
    before: judge_left read the progress view, which leaves out ``stopped:{queue}``, and found nothing left."""
    out = tmp_path / "out"
    suite = _suite(fake, model)
    suite["metrics"][1] = {"name": "answer_accuracy", "params": {"concurrency": 1, "max_tokens_total": 300}}
    first = evaluate(ROWS, suite, out=out, quiet=True)
    assert first.summary.metrics["answer_accuracy"].stopped >= 1 and not first.summary.metrics["answer_accuracy"].errors
    monkeypatch.delenv("GROQ_API_KEY")
    with pytest.raises(ConfigError, match="GROQ_API_KEY"):
        resume(out, quiet=True, max_tokens=10**6)
