"""Judging with a local OpenAI-compatible server (vLLM, Ollama, llama.cpp) through real workers: no key, no rate-limit
headers, and that server's own error bodies."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.floors import eta_floor_s

from ..fakes import FakeProvider

pytestmark = pytest.mark.integration


def test_rows_past_a_llamacpp_context_fail_alone_and_the_run_goes_on(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp answers a prompt past its context (``-c``) with 400 ``exceed_context_size_error``, "the request
    exceeds the available context size": those rows' items fail, the others are judged. Seen failing before: it was
    read as a failure of the server, and three long rows in a row opened the breaker and stopped every later row."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a server on this machine needs none
    answers = [f"a{i} [[fault=context_size:9]]" if i < 3 else f"a{i} [[rating=4]]" for i in range(6)]
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "reference": "r", "answer": a} for i, a in enumerate(answers)]
    with FakeProvider(errors="llamacpp", limit_headers=False) as fake:
        judge = {"provider": "openai", "model": "qwen2.5", "base_url": fake.openai_base_url, "rpm": None, "tpm": None}
        # One task, one call at a time: the long rows' calls come first, in a row
        metric = {"name": "answer_accuracy", "params": {"concurrency": 1, "breaker_failures": 3}}
        suite = {"name": "llamacpp", "metrics": [metric], "judge": judge, "chunk_size": {"judge": 10}}
        result = evaluate(rows, suite, out=tmp_path / "out")
        stats = fake.stats()

    assert "breaker" not in result.summary.judge and result.summary.judge["failures"] == 6
    outputs = {item.id: item.metrics["answer_accuracy"] for item in result.items}
    for i in range(3):
        assert "exceeds the available context size" in (outputs[f"q{i}"].error or ""), outputs[f"q{i}"]
    assert [outputs[f"q{i}"].score for i in range(3, 6)] == [1.0, 1.0, 1.0]
    assert stats["fault:context_size"] == 6  # each long row's two judges asked once: not retried


def test_max_in_flight_holds_calls_on_our_side_for_a_server_that_answers_one_at_a_time(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server on one GPU answers a request at a time and queues the rest; a queued call's wait counts in its
    ``timeout_s``. ``judge.max_in_flight: 1`` keeps every worker's calls but one waiting here instead, where no timeout
    runs. Seen failing without the cap: the two judge tasks' 16 calls queued there at once, and those still queued
    after 4 s timed out and were retried."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": "r", "answer": f"a{i} [[rating=4]]"} for i in range(12)]
    with FakeProvider(parallel=1, latency_s=0.5, limit_headers=False, usage=False) as fake:
        judge = {"provider": "openai", "model": "llama3.1:8b", "base_url": fake.openai_base_url, "rpm": None,
                 "tpm": None, "max_in_flight": 1}  # fmt: skip
        metric = {"name": "answer_accuracy", "params": {"timeout_s": 4}}
        suite = {"name": "one-gpu", "metrics": [metric], "judge": judge, "chunk_size": {"judge": 6}}
        result = evaluate(rows, suite, out=tmp_path / "out")
        stats = fake.stats()

    assert [item.metrics["answer_accuracy"].score for item in result.items] == [1.0] * len(rows)
    assert stats["max_in_flight"] == 1 and stats["requests"] == 2 * len(rows)  # none timed out, none retried
    assert result.summary.judge["retries"] == 0 and result.summary.judge["usage_estimated"] == 2 * len(rows)


class _Recorder:
    """A progress view keeping every counters it is told."""

    def __init__(self) -> None:
        self.seen: list[dict[str, int]] = []

    def start(self, run_id: str) -> None:
        return None

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        self.seen.append(dict(counters))

    def stop(self) -> None:
        return None


def test_the_live_eta_is_never_sooner_than_max_in_flight_lets_the_calls_left_go(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``judge.max_in_flight: 1`` on a server taking 0.5 s a reply: while judge units are left, the live views' ETA
    floor is at least the calls left one after another at the time a call took (each 0.5 s or more), as the dry run
    reckons its rounds (where more than one round is left). Seen failing before: the floor read no cap (0 s), and a
    first burst's pace said less."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": "r", "answer": f"a{i} [[rating=4]]"} for i in range(8)]
    recorder = _Recorder()
    with FakeProvider(parallel=1, latency_s=0.5, limit_headers=False) as fake:
        judge = {"provider": "openai", "model": "llama3.1:8b", "base_url": fake.openai_base_url, "rpm": None,
                 "tpm": None, "max_in_flight": 1}  # fmt: skip
        suite = {"name": "one-gpu", "metrics": ["answer_accuracy"], "judge": judge, "chunk_size": {"judge": 4}}
        result = evaluate(rows, suite, out=tmp_path / "out", progress=recorder)
    calls = 2 * len(rows)  # two judges a row
    assert result.summary.judge["calls"] == calls and "call_ms" not in result.summary.judge  # bookkeeping, no result
    # judge units done and left, more calls left than the one round the cap lets go at once
    midway = [c for c in recorder.seen
              if 0 < c.get("done:judge", 0) < c["total:judge"] and c["judge_calls"] < calls - 1]  # fmt: skip
    assert midway, recorder.seen
    for counters in midway:
        assert eta_floor_s(counters) >= 0.5 * (calls - counters["judge_calls"]), counters
