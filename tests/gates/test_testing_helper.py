"""``orchestrator.testing.assert_scores`` used the way a team's test suite would use it (embedded runs)."""

from __future__ import annotations

import json
import string
import warnings
from pathlib import Path

import pytest

from orchestrator.testing import assert_scores
from ragscore_workers.errors import ConfigError

from .helpers import DATA

pytestmark = pytest.mark.integration

SUITE = {"name": "team-evals", "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}]}


def _norm(text: str) -> str:
    return " ".join(text.lower().translate(str.maketrans("", "", string.punctuation)).split())


def _rows(n: int = 12) -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines()[:n]]


def test_assert_scores_passes_returns_the_evaluation_then_fails_with_the_gate_table(tmp_path: Path, home: Path) -> None:
    rows = _rows()
    with_ref = [r for r in rows if "reference" in r]
    expected_em = sum(_norm(r["answer"]) == _norm(r["reference"]) for r in with_ref) / len(with_ref)
    result = assert_scores(
        rows, SUITE | {"gates": ["recall_at_5:ci_low=0.0"]}, [f"exact_match={expected_em - 0.1}"], out=tmp_path / "a"
    )
    em, mrr = (result.summary.metrics[m].mean for m in ("exact_match", "mrr"))
    assert em is not None and len(result.items) == len(rows)
    assert mrr is not None and mrr <= 0.95, "a gate 0.05 above it must be one a run could reach"

    with pytest.raises(AssertionError) as info:
        gates = [f"mrr={mrr + 0.05}", {"metric": "exact_match", "min": 0.0}]
        assert_scores(rows, SUITE, gates, baseline=result.out_dir, out=tmp_path / "b")
    message = str(info.value)
    assert "1 of 6 gates failed" in message  # two given, one regression gate per output (4)
    (line,) = [line for line in message.splitlines() if "mrr=" in line]
    assert "FAIL" in line and "-0.050" in line
    assert "reports in" in message and "exact_match=0" in message and "exact_match:regression" in message


def test_assert_scores_refuses_bad_gates_before_running(home: Path) -> None:
    with pytest.raises(ConfigError, match="Did you mean 'exact_match'"):
        assert_scores(_rows(), SUITE, ["exact_mtch=0.5"])
    with pytest.raises(ConfigError, match="not METRIC=VALUE"):
        assert_scores(_rows(), SUITE, ["exact_match"])
    with pytest.raises(ConfigError, match="at least one gate"):
        assert_scores(_rows(), SUITE)
    with pytest.raises(ConfigError, match="Did you mean 'exact_match'"):  # one gate bare: not read letter by letter
        assert_scores(_rows(), SUITE, "exact_mtch=0.5")
    assert not (home / "redis").exists()  # nothing was started


def test_a_gate_given_to_assert_scores_is_named_as_written(home: Path) -> None:
    """A gate given as a dict was said as ``Gate 'exact_mtch=0.5'``, a text the caller never wrote."""
    with pytest.raises(ConfigError) as info:
        assert_scores(_rows(), SUITE, [{"metric": "exact_mtch", "min": 0.5}, "mrr=80"])
    lines = str(info.value).splitlines()
    assert lines[1].startswith("  Gate {'metric': 'exact_mtch', 'min': 0.5} names 'exact_mtch'"), info.value
    assert lines[2].startswith("  Gate 'mrr=80': mrr scores are in [0, 1]"), info.value
    assert not (home / "redis").exists()  # nothing was started


def test_assert_scores_fails_a_run_the_cli_would_exit_1_for_even_when_its_gates_hold(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every item of an ungated metric errored (a wrong key, a sandbox that cannot start): `ragscore run` exits 1;
    the pytest helper must not pass it because the gated metric held."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing")
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "answer": "Paris", "reference": "Paris", "metadata": {"fail": "boom"}}
            for i in range(4)]  # fmt: skip
    suite = {"name": "team-evals", "metrics": ["exact_match", "fail_on_flag"]}
    with pytest.raises(AssertionError) as info, warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        assert_scores(rows, suite, ["exact_match=0.5"], out=tmp_path / "o")
    assert not said, [str(w.message) for w in said]  # raised, not also warned of (evaluate() warns)
    message = str(info.value)
    assert "no scores for fail_on_flag" in message and "cannot score row q" in message, message
    assert "1 gate holds" in message  # the gate table is still there


def test_assert_scores_refuses_a_tolerance_that_is_no_tolerance_before_running(tmp_path: Path, home: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "summary.json").write_text(json.dumps(
        {"run_id": "b", "items": 1, "scored": 1, "metrics": {"exact_match": {"mean": 0.5, "n": 1}}}
    ))  # fmt: skip
    for tolerance in (float("nan"), -0.1):
        with pytest.raises(ConfigError, match="finite number >= 0"):
            assert_scores(_rows(), SUITE, baseline=base, tolerance=tolerance)
    with pytest.raises(ConfigError, match="tolerance needs a baseline"):
        assert_scores(_rows(), SUITE, ["exact_match=0.5"], tolerance=0.1)
    assert not (home / "redis").exists()  # nothing was started


def test_assert_scores_warns_of_a_system_under_a_gate_its_pool_of_systems_holds(tmp_path: Path, home: Path) -> None:
    """The gate table's notes reach the testing helper too: recall_at_5 0.837 over both quickstart systems holds
    0.8 while bm25-llm alone scores 0.760."""
    with pytest.warns(UserWarning, match=r"gates read means over all 2 systems; on its own, bm25-llm recall_at_5"):
        result = assert_scores(DATA, SUITE, ["recall_at_5=0.8"], out=tmp_path / "out")
    assert result.summary.metrics["recall_at_5"].mean >= 0.8
