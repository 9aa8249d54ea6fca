"""``citation``: precision / recall / F1 on sentence-ID sets, hand-computed, with every special case."""

from __future__ import annotations

import pytest

from ragscore_workers.answers import NO_RETRIEVAL
from ragscore_workers.metrics.citation import citation
from ragscore_workers.metrics.evidence import EvidenceParams, evidence_overlap
from ragscore_workers.metrics.registry import BY_DESIGN_REASONS, NO_EVIDENCE, NoParams
from ragscore_workers.schemas import Row


def _scores(gold: list[str] | None, pred: list[str] | None) -> tuple[float | None, float | None, float | None]:
    out = citation(Row(id="x", gold_evidence_sentences=gold, evidence_sentences=pred), NoParams())
    return out["citation_precision"].score, out["citation_recall"].score, out["citation_f1"].score


def test_partial_overlap_by_hand() -> None:
    # G = {S1,S2,S3}, P = {S2,S3,S4,S5}: |G∩P| = 2 -> p = 2/4, r = 2/3, F1 = 2·(1/2)(2/3)/(1/2+2/3) = 4/7
    p, r, f1 = _scores(["S1", "S2", "S3"], ["S2", "S3", "S4", "S5"])
    assert (p, r) == (0.5, pytest.approx(2 / 3))
    assert f1 == pytest.approx(4 / 7)


def test_perfect_and_disjoint_predictions() -> None:
    assert _scores(["S1", "S2"], ["S2", "S1"]) == (1.0, 1.0, 1.0)
    assert _scores(["S1", "S2"], ["S3"]) == (0.0, 0.0, 0.0)  # p + r = 0 -> F1 = 0, not a division error


def test_an_llm_alones_row_without_evidence_is_unscorable_by_design() -> None:
    """A row a target returning no contexts answered (an LLM alone) names no sentence of a document it retrieved none
    of: citation and evidence_overlap left it unscorable for 'no evidence_sentences (predicted sentence IDs)', which
    fails the run; it is 'no evidence_sentences', by design (BY_DESIGN_REASONS). A row not so marked keeps its
    reason."""
    alone = Row.model_validate({"id": "x", "gold_evidence_sentences": ["S1"], NO_RETRIEVAL: True})
    lacking = Row(id="x", gold_evidence_sentences=["S1"])
    reasons = [r.details["reason"] for r in citation(alone, NoParams()).values()]
    assert reasons == [NO_EVIDENCE] * 3 and NO_EVIDENCE in BY_DESIGN_REASONS
    assert evidence_overlap(alone, EvidenceParams()).details["reason"] == NO_EVIDENCE
    assert {r.details["reason"] for r in citation(lacking, NoParams()).values()} == {
        f"{NO_EVIDENCE} (predicted sentence IDs)"
    }
    assert evidence_overlap(lacking, EvidenceParams()).details["reason"] == f"{NO_EVIDENCE} (predicted sentence IDs)"


def test_a_row_whose_retrieval_found_nothing_is_unscorable_by_design_and_no_run_error() -> None:
    """``retrieved_doc_ids: []`` without contexts (``Row.sourceless``: the system cited nothing, retrieving nothing)
    and no evidence_sentences: recall_at_k scores it 0, but citation and evidence_overlap left it unscorable for 'no
    evidence_sentences (predicted sentence IDs)', a failing reason the gates fail the run for. It is by design, as
    verbatim's 'no contexts' of such a row: no run error where another output scored. A row that retrieved contexts
    keeps the failing reason."""
    from orchestrator.gates import incomplete
    from ragscore_workers.aggregate import summarize
    from ragscore_workers.metrics.retrieval import RecallParams, recall_at_k
    from ragscore_workers.schemas import ItemResult

    found_nothing = Row(id="x", gold_doc_id="d1", retrieved_doc_ids=[], gold_evidence_sentences=["S1"])
    reasons = {r.details["reason"] for r in citation(found_nothing, NoParams()).values()}
    assert reasons == {NO_EVIDENCE}, reasons
    assert evidence_overlap(found_nothing, EvidenceParams()).details["reason"] == NO_EVIDENCE
    assert recall_at_k(found_nothing, RecallParams())["recall_at_1"].score == 0.0
    items = [ItemResult(id=f"q{i}", metrics=citation(found_nothing, NoParams()) | recall_at_k(found_nothing,
             RecallParams())) for i in range(2)]  # fmt: skip
    summary = summarize("r1", items)
    assert summary.metrics["citation_f1"].unscorable == 2 and summary.metrics["recall_at_1"].n == 2
    assert incomplete(summary) is None
    quoted = found_nothing.model_copy(update={"contexts": Row(id="y", contexts=["S1 text."]).contexts})
    assert {r.details["reason"] for r in citation(quoted, NoParams()).values()} == {
        f"{NO_EVIDENCE} (predicted sentence IDs)"
    }


def test_ids_are_sets_of_stripped_strings() -> None:
    # duplicates and padding count once: P = {S2, S3} -> p = 1/2, r = 1/1, F1 = 2/3
    p, r, f1 = _scores(["S2"], [" S2", "S2", "S3 "])
    assert (p, r) == (0.5, 1.0) and f1 == pytest.approx(2 / 3)
    assert _scores(["s1"], ["S1"]) == (0.0, 0.0, 0.0)  # IDs are case-sensitive, as in the seed


def test_empty_prediction_scores_zero() -> None:
    assert _scores(["S1", "S2"], []) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("gold", "pred"), [(None, ["S1"]), ([], ["S1"]), (["  "], ["S1"]), ([], [])])
def test_rows_without_gold_evidence_are_unscorable(gold: list[str] | None, pred: list[str]) -> None:
    out = citation(Row(id="x", gold_evidence_sentences=gold, evidence_sentences=pred), NoParams())
    assert all(r.score is None and r.details["reason"] == "no gold_evidence_sentences" for r in out.values())


def test_absent_prediction_field_is_unscorable_not_zero() -> None:
    out = citation(Row(id="x", gold_evidence_sentences=["S1"]), NoParams())
    assert all(r.score is None and "evidence_sentences" in r.details["reason"] for r in out.values())


def test_details_name_matched_missed_and_extra_ids() -> None:
    out = citation(Row(id="x", gold_evidence_sentences=["S1", "S2"], evidence_sentences=["S2", "S9"]), NoParams())
    assert out["citation_f1"].details == {
        "gold": 2,
        "predicted": 2,
        "matched": ["S2"],
        "missed": ["S1"],
        "extra": ["S9"],
    }
