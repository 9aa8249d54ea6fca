"""combined = λ·rubric_judge + (1-λ)·evidence_overlap, unscorable when an input has no score."""

from __future__ import annotations

import pytest

from ragscore_workers.metrics.combined import CombinedParams, combined
from ragscore_workers.metrics.registry import BY_DESIGN_REASONS, NO_EVIDENCE, get_metric
from ragscore_workers.schemas import MetricResult
from ragscore_workers.scoring import derive


def test_weighted_mean_by_hand() -> None:
    outputs = {"rubric_judge": MetricResult(score=0.8), "evidence_overlap": MetricResult(score=0.4)}
    assert combined(outputs, CombinedParams()).score == pytest.approx(0.6)
    assert combined(outputs, CombinedParams.model_validate({"lambda": 0.25})).score == pytest.approx(0.5)


def test_missing_or_unscorable_input_is_unscorable() -> None:
    only_judge = {"rubric_judge": MetricResult(score=0.8)}
    res = combined(only_judge, CombinedParams())
    assert res.score is None and "evidence_overlap has no score (missing)" in res.details["reason"]
    failed = {"rubric_judge": MetricResult.failed("timeout"), "evidence_overlap": MetricResult(score=1.0)}
    assert "timeout" in combined(failed, CombinedParams()).details["reason"]


def test_an_input_unscorable_by_design_leaves_combined_unscorable_by_design() -> None:
    """An LLM alone's evidence_overlap is unscorable by design (no evidence_sentences): combined said 'evidence_overlap
    has no score (no evidence_sentences)', a reason no gate takes as by design, which failed the run."""
    outputs = {"rubric_judge": MetricResult(score=0.8), "evidence_overlap": MetricResult.unscorable(NO_EVIDENCE)}
    res = combined(outputs, CombinedParams())
    assert res.score is None and res.details == {"reason": NO_EVIDENCE, "input": "evidence_overlap"}
    assert res.details["reason"] in BY_DESIGN_REASONS
    # a real failure of an input stays one, whichever input lacks a field by design
    failing = MetricResult.unscorable(f"{NO_EVIDENCE} (predicted sentence IDs)")  # a RAG row's: no by-design reason
    lacking = MetricResult.unscorable("no contexts")
    for judge in (MetricResult(score=0.8), lacking):
        res = combined({"rubric_judge": judge, "evidence_overlap": failing}, CombinedParams())
        assert res.details == {"reason": f"evidence_overlap has no score ({NO_EVIDENCE} (predicted sentence IDs))"}
    res = combined(
        {"rubric_judge": MetricResult.unscorable("no reference"), "evidence_overlap": lacking}, CombinedParams()
    )
    assert res.details == {"reason": "rubric_judge has no score (no reference)"}


def test_an_input_the_run_stopped_makes_combined_stopped_too() -> None:
    """The summary read 'rubric_judge 7 (7 stopped)' but 'combined 7': the same items, stopped by the judge."""
    outputs = {"rubric_judge": MetricResult.stopped("judging stopped: budget reached"),
               "evidence_overlap": MetricResult(score=1.0)}  # fmt: skip
    res = combined(outputs, CombinedParams())
    assert res.score is None and res.details == {
        "reason": "rubric_judge has no score (judging stopped: budget reached)", "stopped": True}  # fmt: skip
    unscorable = {"rubric_judge": MetricResult.unscorable("no reference"), "evidence_overlap": MetricResult(score=1.0)}
    assert "stopped" not in combined(unscorable, CombinedParams()).details


def test_derive_reads_stored_dicts() -> None:
    mdef = get_metric("combined")
    stored = {"rubric_judge": {"score": 1.0}, "evidence_overlap": {"score": 0.0}, "other": {"score": 0.3}}
    out = derive(stored, [(mdef, mdef.parse_params({"lambda": 0.7}))])
    assert out["combined"].score == pytest.approx(0.7)


def test_lambda_out_of_range_is_a_config_error() -> None:
    from ragscore_workers.errors import ConfigError

    with pytest.raises(ConfigError, match="combined"):
        get_metric("combined").parse_params({"lambda": 1.5})


@pytest.mark.parametrize("lam", [True, False, "0.5"])
def test_lambda_that_is_not_a_number_is_a_config_error(lam: object) -> None:
    """``lambda: true`` read as 1.0 (the judge alone) and ``"0.5"`` as 0.5: a boolean or text is no weight."""
    from ragscore_workers.errors import ConfigError

    with pytest.raises(ConfigError, match="combined.*lambda"):
        get_metric("combined").parse_params({"lambda": lam})
    assert get_metric("combined").parse_params({"lambda": 1}).lambda_ == 1.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(("lam", "needed", "unneeded"), [(1.0, "rubric_judge", "evidence_overlap"),
                                                          (0.0, "evidence_overlap", "rubric_judge")])  # fmt: skip
def test_an_input_of_weight_zero_is_not_needed(lam: float, needed: str, unneeded: str) -> None:
    """λ = 1 asks for the judge's score alone: an item without gold evidence read unscorable all the same."""
    params = CombinedParams.model_validate({"lambda": lam})
    for other in (MetricResult.unscorable("no gold evidence"), None):
        outputs = {needed: MetricResult(score=0.6)} | ({unneeded: other} if other is not None else {})
        res = combined(outputs, params)
        assert res.score == pytest.approx(0.6) and res.details == {"lambda": lam, needed: 0.6}
    assert combined({unneeded: MetricResult(score=1.0)}, params).score is None  # the weighted one is still needed
