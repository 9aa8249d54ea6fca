"""Property tests: no metric of this family raises on arbitrary text, and every score stays in [0, 1]."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragscore_workers.metrics.checks import ChecksParams
from ragscore_workers.metrics.checks import checks as checks_batch
from ragscore_workers.metrics.citation import citation, id_set
from ragscore_workers.metrics.evidence import EvidenceParams, evidence_overlap, words_of
from ragscore_workers.metrics.registry import NoParams, RunContext
from ragscore_workers.schemas import MetricResult, Row, Suite

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: Sentence IDs: mostly a few real-looking ones (so gold, predicted and document IDs overlap), some arbitrary text.
sid = st.sampled_from(["S1", "S2", "S3", " S1 ", ""]) | st.text(max_size=6)
ids = st.lists(sid, max_size=8)
maybe_ids = st.none() | ids

_CTX = RunContext(run_id="test", suite=Suite(metrics=["checks"]))


def _in_range(result: MetricResult) -> None:
    assert result.score is None or 0.0 <= result.score <= 1.0
    assert result.error is None or result.score is None


@SETTINGS
@given(gold=maybe_ids, pred=maybe_ids)
def test_citation_scores_stay_in_range_and_f1_between_p_and_r(gold: list[str] | None, pred: list[str] | None) -> None:
    out = citation(Row(id="x", gold_evidence_sentences=gold, evidence_sentences=pred), NoParams())
    for result in out.values():
        _in_range(result)
    p, r, f1 = (out[k].score for k in ("citation_precision", "citation_recall", "citation_f1"))
    if f1 is not None:
        assert p is not None and r is not None and min(p, r) - 1e-12 <= f1 <= max(p, r) + 1e-12


@SETTINGS
@given(gold=maybe_ids, pred=maybe_ids, sentences=st.none() | st.dictionaries(sid, st.text(), max_size=6))
def test_evidence_overlap_stays_in_range(
    gold: list[str] | None, pred: list[str] | None, sentences: dict[str, str] | None
) -> None:
    row = Row(id="x", gold_evidence_sentences=gold, evidence_sentences=pred, sentences=sentences)
    result = evidence_overlap(row, EvidenceParams())
    _in_range(result)
    if gold is None or pred is None or not id_set(pred) >= id_set(gold) or not id_set(gold):
        return
    if not sentences or words_of(sentences, id_set(gold)):
        assert result.score == 1.0  # citing every gold sentence covers every gold word (or ID)


def _battery(word: str, golden: str) -> list[dict[str, Any]]:
    return [
        {"type": "keyword", "params": {"keywords": [word or "x", "the"], "whole_word": True}, "weight": 2},
        {"type": "negation", "params": {"keywords": [word.strip() or "x"]}, "category": "Safety"},  # blank: malformed
        {"type": "regex", "params": {"pattern": r"\w+\s+\w+"}, "normalizers": ["strip_markdown"]},
        {"type": "length", "params": {"min": 1, "max": 50}, "normalizers": ["collapse_whitespace"]},
        {"type": "citation", "params": {"min_count": 1}, "suggestion": "add {min_count} cites ({count}) {x}"},
        {"type": "json_schema", "params": {"schema": {"type": "object"}}, "informational": True},
        {"type": "diff", "params": {"golden": golden, "threshold": 0.5}, "normalizers": ["lowercase", "nfkc"]},
        {"type": "keyword", "params": {"keywords": ["a"]}, "extract": [{"regex": r"(\w+)"}], "depends_on": "p1"},
        {
            "type": "length",
            "params": {"max": 3},
            "extract": [{"json_path": "$.a[0]"}],
            "normalizers": ["strip_punctuation"],
        },
        {"type": "embedding", "params": {}, "informational": True},
    ]


@SETTINGS
@given(answer=st.text(), word=st.text(max_size=10), golden=st.text(max_size=40))
def test_checks_never_raise_and_score_in_range(answer: str, word: str, golden: str) -> None:
    result = checks_batch([Row(id="x", answer=answer, checks=_battery(word, golden))], ChecksParams(), _CTX)[0]
    _in_range(result)
    assert result.error is None, result.error
    for category_score in result.details["categories"].values():
        assert 0.0 <= category_score <= 1.0
    last = result.details["points"][-1]  # embedding without target or reference: cannot run, loads no model
    assert last["status"] == "error" and last["note"].startswith("no target")


@SETTINGS
@given(answer=st.text(max_size=30), pattern=st.text(max_size=8), keyword=st.text(max_size=8))
def test_checks_with_arbitrary_user_patterns_give_a_result_or_a_row_error(
    answer: str, pattern: str, keyword: str
) -> None:
    points = [
        {"type": "regex", "params": {"pattern": pattern}},
        {"type": "citation", "params": {"pattern": pattern}},
        {"type": "keyword", "params": {"keywords": [keyword]}},
        {"type": "length", "params": {"max": 5}, "extract": [{"regex": pattern}]},
    ]
    _in_range(checks_batch([Row(id="x", answer=answer, checks=points)], ChecksParams(), _CTX)[0])
