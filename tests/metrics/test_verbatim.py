"""verbatim: existence score of quoted citations, hand-computed, with every special case."""

from __future__ import annotations

from typing import Any

import pytest

from ragscore_workers.answers import NO_RETRIEVAL
from ragscore_workers.metrics.registry import BY_DESIGN_REASONS, NoParams
from ragscore_workers.metrics.verbatim import normalize_quotes, verbatim
from ragscore_workers.schemas import MetricResult, Row

CONTEXTS = ["The river flooded in May.", "He said: “we’ll rebuild”,   slowly."]


def _run(citations: list[dict[str, Any]] | None, contexts: list[str] = CONTEXTS) -> MetricResult:
    return verbatim(Row(id="x", contexts=contexts, citations=citations), NoParams())


def test_existence_score_is_found_over_quoted() -> None:
    result = _run([
        {"source_index": 0, "quote": "  river flooded "},  # stripped, then a substring: found
        {"source_index": 0, "quote": "River flooded"},  # case counts: not found
        {"source_index": 1, "quote": "said:"},
    ])  # fmt: skip
    assert result.score == pytest.approx(2 / 3) and result.passed is False
    assert [c["found"] for c in result.details["citations"]] == [True, False, True]
    assert result.details["quoted"] == 3 and result.details["found"] == 2
    assert _run([{"source_index": 0, "quote": "May."}]).score == 1.0


def test_no_citations_is_unscorable_not_zero() -> None:
    for citations in (None, []):
        result = _run(citations)
        assert result.score is None and result.error is None and result.details["reason"] == "no citations"


def test_citations_with_no_contexts_to_look_in_are_unscorable_not_zero() -> None:
    result = _run([{"source_index": 0, "quote": "river"}], contexts=[])
    assert result.score is None and result.error is None and result.details["reason"] == "no contexts"


def test_an_llm_alones_row_without_citations_is_unscorable_by_design() -> None:
    """A row a target returning no contexts answered (an LLM alone) has no source to quote: without citations it was
    unscorable for 'no citations', which fails the run; it is 'no contexts', by design (BY_DESIGN_REASONS)."""
    for citations in (None, [{"source_index": 0, "quote": "river"}]):
        row = Row.model_validate({"id": "x", "citations": citations, NO_RETRIEVAL: True})
        result = verbatim(row, NoParams())
        assert result.score is None and result.details["reason"] == "no contexts"
        assert result.details["reason"] in BY_DESIGN_REASONS
    # not so of a row not marked, nor of one given contexts (it has sources to quote): 'no citations' still fails
    for fields in ({"contexts": []}, {"contexts": ["The river."], NO_RETRIEVAL: True}):
        result = verbatim(Row.model_validate({"id": "x", **fields}), NoParams())
        assert result.details["reason"] == "no citations" and "no citations" not in BY_DESIGN_REASONS


def test_a_row_whose_retrieval_found_nothing_is_unscorable_by_design() -> None:
    """``retrieved_doc_ids: []`` without contexts has no source to quote, as an LLM alone's row: without citations it
    was 'no citations', not by design, which fails an output every row of which is so; a row with contexts is not."""
    for citations in (None, [{"source_index": 0, "quote": "river"}]):
        row = Row.model_validate({"id": "x", "citations": citations, "retrieved_doc_ids": []})
        assert verbatim(row, NoParams()).details["reason"] == "no contexts"
    row = Row.model_validate({"id": "x", "contexts": ["The river."], "retrieved_doc_ids": []})
    assert verbatim(row, NoParams()).details["reason"] == "no citations"


def test_out_of_range_source_index_is_not_found_and_says_so() -> None:
    result = _run([{"source_index": 2, "quote": "river"}, {"source_index": -1, "quote": "slowly"}])
    assert result.score == 0.0
    reasons = [c["reason"] for c in result.details["citations"]]
    assert reasons == ["source_index 2 out of range (2 contexts)", "source_index -1 out of range (2 contexts)"]


def test_empty_quote_is_not_found() -> None:
    result = _run([{"source_index": 0, "quote": "   "}, {"source_index": 0, "quote": "river"}])
    assert result.score == 0.5 and result.details["citations"][0]["reason"] == "empty quote"


def test_whitespace_and_quote_normalised_match_is_reported_separately() -> None:
    result = _run([
        {"source_index": 1, "quote": '"we\'ll rebuild", slowly'},  # straight quotes, one space
        {"source_index": 1, "quote": "rebuild"},
        {"source_index": 1, "quote": "WE’LL"},  # case is not normalised
    ])  # fmt: skip
    assert result.score == pytest.approx(1 / 3)
    assert result.details["normalized_found"] == 2
    assert result.details["normalized_score"] == pytest.approx(2 / 3)
    assert result.details["citations"][0]["reason"] == "found only after normalising"
    assert normalize_quotes(" «a»\n\t‘b’ ") == "\"a\" 'b'"


def test_decomposed_accents_and_the_ellipsis_character_match_after_normalising() -> None:
    context = "Le cafe\u0301 ferme\u2026 puis rouvre."  # "café" written as e + combining acute, "…" as one character
    result = _run([{"source_index": 0, "quote": "Le caf\u00e9 ferme... puis"}], contexts=[context])
    assert result.score == 0.0 and result.details["normalized_score"] == 1.0
    assert result.details["citations"][0]["reason"] == "found only after normalising"
