"""``judge.pace`` end to end: ``evaluate`` in embedded mode (private Redis, a real judge worker) against the fake
provider enforcing its minute limit per second (``quantize``, as OpenAI documents its limits may be)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from orchestrator import evaluate
from orchestrator.api import IncompleteRunWarning
from ragscore_workers.schemas import paced_per_second

from ..fakes import FakeProvider

# serial: it counts the 429s of a burst against an even pace: a loaded machine changes the timing
pytestmark = [pytest.mark.integration, pytest.mark.serial]

#: 300 a minute, enforced as 5 a second by the fake; 50 items x 2 judges of answer_accuracy: 100 calls.
RPM, ITEMS = 300, 50


def _rows(items: int = ITEMS) -> list[dict[str, Any]]:
    return [{"id": f"q{i}", "question": f"Question {i}?", "reference": f"reference {i}",
             "answer": f"answer {i} [[rating={4 if i % 2 else 2}]]"} for i in range(items)]  # fmt: skip


def _run(
    pace: str, keys: str, model: str, out: Path, *, stated: int = RPM, items: int = ITEMS
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Scores by item id, and the fake's counters, of one run of ``items`` at ``pace`` and the suite's rpm
    :data:`RPM` against a fresh fake quantizing its own rpm, ``stated`` (its ``x-ratelimit-limit-requests``)."""
    with FakeProvider(api_key=keys, rpm=stated, quantize=True) as fake:
        suite = {"name": f"pace-{pace}", "metrics": ["answer_accuracy"],
                 "judge": {"provider": "openai", "model": f"{model}-{pace}", "base_url": fake.openai_base_url,
                           "rpm": RPM, "tpm": None, "pace": pace}}  # fmt: skip
        result = evaluate(_rows(items), suite, out=out)
        stats = fake.stats()
    return {item.id: item.metrics["answer_accuracy"].score for item in result.items}, stats


def test_an_even_pace_sends_a_quantized_providers_minute_without_429s_where_a_burst_earns_them(
    home: Path, keys: str, model: str, tmp_path: Path
) -> None:
    """At ``pace: burst`` the first minute's calls all go at once, over the 5 a second the provider allows: 429s,
    each pausing every worker, and calls that fail for good (the run's breaker may stop it). At ``pace: even`` the
    same items are all scored, with (almost) no 429."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IncompleteRunWarning)  # a breaker opened by the 429s, or not
        _, burst = _run("burst", keys, model, tmp_path / "burst")
    assert burst.get("quantized", 0) > 0, burst  # refused by the per-second limit, never by the minute's

    scores, even = _run("even", keys, model, tmp_path / "even")
    assert scores == {f"q{i}": 1.0 if i % 2 else 0.5 for i in range(ITEMS)}
    assert even["ok"] == 2 * ITEMS
    # a few at most: a call held back over 50 ms more than the next second's (a CI container's CPU throttled for a
    # 100 ms period) earns one; a burst earns one for most of its calls (about 190 of 220)
    assert even.get("rate_limited", 0) <= even["requests"] // 20, even


def test_an_even_pace_follows_an_rpm_the_provider_states_below_the_suites(
    home: Path, keys: str, model: str, tmp_path: Path
) -> None:
    """The provider states 120 a minute (and allows 2 a second) where the suite says 300 (5 a second): the minute's
    window learned 120, but the pace still let 5 a second go, 3 of them 429s every second. The pace follows the
    stated rpm too: 429s only in the first second, before any reply stated the limit (at most 5), and a few of
    jitter (as above)."""
    scores, even = _run("even", keys, model, tmp_path / "even", stated=120, items=20)
    assert even.get("rate_limited", 0) <= paced_per_second(RPM) + even["requests"] // 20, even
    assert scores == {f"q{i}": 1.0 if i % 2 else 0.5 for i in range(20)}
    assert even["ok"] == 40
