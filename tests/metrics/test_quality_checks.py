"""quality_checks: each heuristic issue on its own, the clean case, params and the unscorable case."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ragscore_workers.answers import NO_RETRIEVAL
from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.quality_checks import DEFAULT_FALLBACK_PATTERN, QualityParams, quality_checks
from ragscore_workers.metrics.registry import get_metric
from ragscore_workers.schemas import MetricResult, Row

GOOD = {"question": "Why did it flood?", "answer": "Heavy rain [1].", "contexts": [{"text": "rain", "score": 0.8}]}


def _run(params: dict[str, Any] | None = None, **fields: Any) -> MetricResult:
    return quality_checks(Row(id="x", **(GOOD | fields)), QualityParams(**(params or {})))


def test_clean_answer_scores_one() -> None:
    result = _run()
    assert result.score == 1.0 and result.passed is True and result.details["issues"] == []
    assert result.details["mean_retrieval_score"] == 0.8


def test_an_empty_citation_pattern_drops_the_citation_check_as_the_docs_say() -> None:
    """docs/metrics/deterministic.md and the description tell a plain RAG set to set ``citation_pattern: ""``."""
    assert _run({"citation_pattern": ""}, answer="Heavy rain.").details["issues"] == []
    assert _run({"citation_pattern": ""}, answer="I don't know.").details["issues"] == ["fallback_phrase"]


@pytest.mark.parametrize(
    ("fields", "issues"),
    [
        ({"answer": "  "}, ["empty_answer"]),  # the answer checks are skipped for an empty answer
        ({"contexts": []}, ["no_contexts"]),
        ({"answer": "Heavy rain."}, ["no_citation"]),
        ({"answer": "I was Unable to generate an answer [1]"}, ["fallback_phrase"]),
        ({"answer": "We could not find relevant information [2]."}, ["fallback_phrase"]),
        ({"answer": "I don’t know [1]"}, ["fallback_phrase"]),  # curly apostrophe
        ({"contexts": [{"text": "a", "score": 0.1}, {"text": "b", "score": 0.3}]}, ["low_retrieval_score"]),
        ({"question": "List the causes of the flood."}, ["list_not_formatted"]),
        ({"question": "What are the causes?", "answer": "Rain [1], wind [2]."}, ["list_not_formatted"]),
        ({"answer": "", "contexts": []}, ["empty_answer", "no_contexts"]),
        (
            {"answer": "Sorry, no relevant information.", "contexts": []},
            ["no_contexts", "no_citation", "fallback_phrase"],
        ),
    ],
)
def test_each_issue_is_detected_and_scores_zero(fields: dict[str, Any], issues: list[str]) -> None:
    result = _run(**fields)
    assert result.details["issues"] == issues and result.score == 0.0 and result.passed is False


@pytest.mark.parametrize(
    ("fields", "issues"),
    [
        ({"contexts": [], "retrieved_doc_ids": []}, []),  # an LLM alone's row: it says it retrieved nothing
        ({"contexts": [" "], "retrieved_doc_ids": []}, []),
        ({"contexts": [], "retrieved_doc_ids": None}, ["no_contexts"]),  # null: absent, as in Auto-Analyst's rows
        ({"contexts": [" "], "retrieved_doc_ids": ["d1"]}, ["no_contexts"]),  # ids retrieved, no text
        ({"contexts": [], NO_RETRIEVAL: True}, []),  # answered by a target that returns no contexts: an LLM alone
        ({"contexts": [], NO_RETRIEVAL: "yes"}, ["no_contexts"]),  # the mark is true, nothing else
    ],
)
def test_no_contexts_spares_only_a_row_saying_it_retrieved_nothing(fields: dict[str, Any], issues: list[str]) -> None:
    """A system that retrieves nothing by design gives ``retrieved_doc_ids: []``, or its target returns no contexts
    (the row's :data:`NO_RETRIEVAL` mark), and is not flagged for what it is; a row without either says nothing of
    its retrieval and keeps the issue (DESIGN.md §3.4)."""
    assert _run(**fields).details["issues"] == issues


def test_an_llm_alones_answer_is_not_flagged_for_citing_no_source() -> None:
    """A row a target returning no contexts answered (an LLM alone) has no source to cite: its answer without a [n]
    marker was flagged no_citation, a 0 for what the system is. One that kept contexts (the dataset's) still is."""
    assert _run(answer="Heavy rain.", contexts=[], **{NO_RETRIEVAL: True}).score == 1.0
    cited = _run(answer="Heavy rain.", **{NO_RETRIEVAL: True})
    assert cited.details["issues"] == ["no_citation"]
    assert _run(answer="Heavy rain.", contexts=[]).details["issues"] == ["no_contexts", "no_citation"]


def test_a_row_whose_retrieval_found_nothing_is_not_flagged_for_citing_no_source() -> None:
    """``retrieved_doc_ids: []`` without contexts (retrieval ran and found nothing) leaves no source a [n] marker could
    name: no_citation was flagged, scoring 0 twice what recall_at_k already scores 0. A row without the field (an
    Auto-Analyst row, which says nothing of its retrieval) and one with contexts keep the issue."""
    assert _run(answer="Heavy rain.", contexts=[], retrieved_doc_ids=[]).details["issues"] == []
    assert _run(answer="Heavy rain.", retrieved_doc_ids=[]).details["issues"] == ["no_citation"]
    assert _run(answer="Heavy rain.", contexts=[], retrieved_doc_ids=["d1"]).details["issues"] == [
        "no_contexts",
        "no_citation",
    ]


@pytest.mark.parametrize("answer", ["Rain [1][2].", "Rain [1, 2].", "Rain [1,3].", "Rain [1-3].", "Rain [2–4]."])
def test_a_bracket_citing_several_sources_is_a_citation(answer: str) -> None:
    assert _run(answer=answer).details["issues"] == []


def test_list_question_answered_with_a_list_passes() -> None:
    answer = "Causes:\n- rain [1]\n- wind [2]"
    assert _run(question="List the causes.", answer=answer).score == 1.0
    assert _run(question="Name three causes.", answer="1. rain [1]\n2. wind [2]\n3. tide [3]").score == 1.0


def test_retrieval_threshold_boundary_and_contexts_without_scores() -> None:
    contexts = [{"text": "a", "score": 0.2}, {"text": "b", "score": 0.3}, {"text": "c"}]  # mean of scored: 0.25
    assert _run(contexts=contexts).details["issues"] == []  # not under 0.25
    assert _run({"retrieval_threshold": 0.26}, contexts=contexts).details["issues"] == ["low_retrieval_score"]
    unscored = _run(contexts=[{"text": "a"}])
    assert unscored.score == 1.0 and "mean_retrieval_score" not in unscored.details


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), float("-inf")])
def test_a_retrieval_threshold_that_is_not_finite_is_a_config_error(threshold: float) -> None:
    # NaN never flagged a low score, inf flagged every row: neither is a threshold
    with pytest.raises(ConfigError, match="quality_checks.*retrieval_threshold"):
        get_metric("quality_checks").parse_params({"retrieval_threshold": threshold})


def test_params_change_citation_pattern_and_fallback_phrases() -> None:
    assert _run({"citation_pattern": r"\(source \d+\)"}, answer="Rain (source 1).").score == 1.0
    assert _run({"fallback_phrases": ["heavy rain"]}).details["issues"] == ["fallback_phrase"]
    with pytest.raises(ValueError, match="not a regular expression"):
        QualityParams(citation_pattern="[")


def test_missing_answer_field_is_unscorable() -> None:
    result = _run(answer=None)
    assert result.score is None and result.details["reason"] == "no answer"


@pytest.mark.parametrize(
    "answer",
    [
        "The document does not provide sufficient information to answer the question [1].",
        "The provided context does not contain any information about the flood [1].",
        "The provided contexts don't contain the answer [1].",
        "There is not enough information to answer [1].",
        "There isn't sufficient information in the sources [1].",
        "The passages do not mention specific details on this [2].",
        "Sorry, the  retrieved   text cannot give a clear answer [1].",  # whitespace runs
        "I don’t have enough relevant information [1].",  # curly apostrophe
        "The context is not sufficient to answer this [1].",
        "THE SOURCE DOESN'T INCLUDE THE INFORMATION [1].",
    ],
)
def test_the_fallback_family_is_detected_in_its_phrasings(answer: str) -> None:
    assert _run(answer=answer).details["issues"] == ["fallback_phrase"]


@pytest.mark.parametrize(
    "answer",
    [
        "The document provides information about the rain [1].",
        "Information on the flood was given by the agency [1].",
        "There is enough information to say rain caused it [1].",
        "The report does not provide a date, but the rain began on Monday [1].",
        "The dam could not contain the water [1].",
        "It was not enough rain to flood the town alone; the tide added to it [1].",
        "The agency gave insufficiently detailed warnings [2].",
        "The trial found insufficient evidence that the drug works [1].",  # of its subject, not of a source
        "There was not enough data to train the model, so it overfit [1].",
    ],
)
def test_an_answer_that_merely_speaks_of_information_is_no_fallback(answer: str) -> None:
    assert _run(answer=answer).details["issues"] == []


def test_the_fallback_pattern_is_a_param_an_empty_one_drops() -> None:
    answer = "The document does not provide sufficient information [1]."
    assert _run({"fallback_pattern": ""}, answer=answer).details["issues"] == []
    assert _run({"fallback_pattern": "NO IDEA"}, answer="No  idea [1].").details["issues"] == ["fallback_phrase"]
    with pytest.raises(ConfigError, match="quality_checks.*fallback_pattern"):
        get_metric("quality_checks").parse_params({"fallback_pattern": "("})


def test_the_default_fallback_pattern_repeats_no_group_without_bound() -> None:
    """A long answer (100 KB) must not make it backtrack: past the bounded regex's 2 s an item errors. Its only
    repeated group is a space-led word (``(?: \\w+){0,3}``), which a text of single spaces splits one way: linear
    in the answer (at 1 MiB, 0.6 s in the worst of ten crafted answers: its own prefixes repeated, one long word)."""
    assert not re.search(r"\)(?:[*+]|\{\d*,\})", DEFAULT_FALLBACK_PATTERN), DEFAULT_FALLBACK_PATTERN
    near_misses = "The document does not " * 2_000 + "isn't " * 8_000 + "not enough " + "x" * 40_000
    assert len(near_misses) > 100_000 and _run(answer=f"{near_misses} [1].").details["issues"] == []
    fallback = f"{near_misses} The context does not contain the information [1]."
    assert _run(answer=fallback).details["issues"] == ["fallback_phrase"]
