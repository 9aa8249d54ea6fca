"""typed_answer, verbatim and quality_checks through the real cpu queue: embedded Redis + Celery workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate

pytestmark = pytest.mark.integration

CTX = [{"text": "Rain fell for “three days” in May.", "score": 0.9}, {"text": "The dam held.", "score": 0.7}]
ROWS = [
    {"id": "yn", "question_type": "Yes/No", "expected": "yes", "answer": "Yes [1]", "contexts": CTX},
    {"id": "yn-wrong", "question_type": "yes/no", "expected": False, "answer": "Yes, it did [1].", "contexts": CTX},
    {"id": "one", "question_type": "ListOne", "expected": {"car": 0.8, "bus": 0.3}, "answer": "An automobile [1]",
     "contexts": CTX},
    {"id": "many", "question_type": "ListMany", "expected": [["rain", 0.5], ["wind", 0.5], ["five", 0.25]],
     "question": "List the causes.", "answer": "- rain [1]\n- 5 gusts [2]", "contexts": CTX},
    {"id": "pick", "question_type": "PickMany", "expected": '{"twenty one": 0.6, "Paris": 0.6}',
     "answer": "21; paris [2]", "contexts": CTX},
    {"id": "why", "question_type": "Yes/No with Rationale", "expected": "yes",
     "reference": "Heavy rain filled the river", "answer": "Yes: heavy rain filled it [1].", "contexts": CTX},
    {"id": "bad", "question_type": "ListOne", "expected": {"car": 3}, "answer": "car [1]", "contexts": CTX},
    {"id": "quotes", "answer": "It rained [1].", "contexts": CTX,
     "citations": [{"source_index": 0, "quote": "Rain fell"}, {"source_index": 0, "quote": '"three days"'},
                   {"source_index": 5, "quote": "dam"}]},
    {"id": "fallback", "answer": "Unable to generate an answer.", "contexts": [{"text": "x", "score": 0.1}],
     "citations": [{"source_index": 0, "quote": "x"}]},
    {"id": "empty", "answer": "", "question_type": "ListOne", "expected": "car"},
]  # fmt: skip

EXPECTED = {  # id: (typed_answer, verbatim, quality_checks), worked out by hand
    "yn": (1.0, None, 1.0),
    "yn-wrong": (0.0, None, 1.0),
    "one": (0.8, None, 1.0),  # the synonym "automobile" carries the full weight of "car"
    "many": (0.75, None, 1.0),  # rain 0.5 + five (as "5") 0.25; the list question is answered as a list
    "pick": (1.0, None, 1.0),  # 0.6 + 0.6, capped at 1
    "why": (0.875, None, 1.0),  # right yes; heavy rain filled = 3 of the reference's 4 content words
    "bad": (None, None, 1.0),  # weight 3: a per-row error
    "quotes": (None, 1 / 3, 1.0),  # curly-quoted quote found only after normalising; index 5 out of range
    "fallback": (None, 1.0, 0.0),
    "empty": (0.0, None, 0.0),
}
METRICS = ("typed_answer", "verbatim", "quality_checks")


def test_three_cpu_metrics_end_to_end_in_embedded_mode(home: Path, tmp_path: Path) -> None:
    suite = {"name": "deterministic", "metrics": [*METRICS[:2], {"name": "quality_checks",
                                                                 "params": {"retrieval_threshold": 0.25}}]}  # fmt: skip
    evaluation = evaluate(ROWS, suite, out=tmp_path / "out")
    items = {item.id: item.metrics for item in evaluation.items}
    assert list(items) == [row["id"] for row in ROWS]
    for row_id, scores in EXPECTED.items():
        got = tuple(items[row_id][name].score for name in METRICS)
        assert got == pytest.approx(scores), row_id

    timings = [m.ms for metrics in items.values() for m in metrics.values()]
    assert all(ms >= 0 and ms == round(ms, 3) for ms in timings) and any(ms > 0 for ms in timings)  # no float noise
    assert "weight must be between 0 and 1" in (items["bad"]["typed_answer"].error or "")
    assert items["quotes"]["typed_answer"].details["reason"] == "no question_type"
    assert items["quotes"]["verbatim"].details["normalized_found"] == 2
    assert items["one"]["typed_answer"].details["matched"][0]["by"] == "synonym:automobile"
    assert items["fallback"]["quality_checks"].details["issues"] == [
        "no_citation", "fallback_phrase", "low_retrieval_score"]  # fmt: skip
    assert items["empty"]["quality_checks"].details["issues"] == ["empty_answer", "no_contexts"]

    typed = evaluation.summary.metrics["typed_answer"]
    assert (typed.n, typed.errors, typed.unscorable) == (7, 1, 2)
    assert typed.mean == pytest.approx((1 + 0 + 0.8 + 0.75 + 1 + 0.875 + 0) / 7)
    assert evaluation.summary.metrics["verbatim"].n == 2


def test_rows_of_empty_or_blank_contexts_are_warned_of_before_the_run_and_have_none(home: Path, tmp_path: Path) -> None:
    """``contexts: []`` and a list of blank texts counted as contexts before the run (no warning), while only the
    end of the run said the rows had none: one definition (``Row.has_contexts``) reads them as none in both."""
    from ragscore_workers.errors import DatasetWarning

    quote = [{"source_index": 0, "quote": "Rain fell"}]
    rows = [{"id": "empty", "answer": "It rained [1].", "contexts": [], "citations": quote},
            {"id": "blank", "answer": "It rained [1].", "contexts": ["", " \n"], "citations": quote}]  # fmt: skip
    with pytest.warns(DatasetWarning, match="every row's 'contexts' is empty or absent, which verbatim needs") as said:
        evaluation = evaluate(rows, {"metrics": ["verbatim", "quality_checks"]}, out=tmp_path / "out")
    warned = [str(w.message) for w in said if issubclass(w.category, DatasetWarning) and "'contexts'" in str(w.message)]
    assert warned and not [w for w in warned if "named otherwise" in w], warned  # the column is there: rows empty
    items = {item.id: item.metrics for item in evaluation.items}
    for row_id in ("empty", "blank"):
        assert items[row_id]["verbatim"].details["reason"] == "no contexts", items[row_id]
        assert "no_contexts" in items[row_id]["quality_checks"].details["issues"], items[row_id]


def test_an_llm_only_systems_rows_are_not_flagged_no_contexts_and_a_rag_row_without_texts_is(
    home: Path, tmp_path: Path
) -> None:
    """A system whose rows say it retrieves nothing (``retrieved_doc_ids: []``) is not penalised for what it is
    (OPTIONAL_FIELDS); a row that retrieved ids but has no context text still has the issue, and so has a row
    without contexts that says nothing of its retrieval (an Auto-Analyst dataset's: no ``retrieved_doc_ids``)."""
    answer = "Heavy rain [1]."
    rows = [
        {"id": "q1", "system": "llm", "answer": answer, "contexts": [], "retrieved_doc_ids": []},
        {"id": "q2", "system": "llm", "answer": answer, "retrieved_doc_ids": []},
        {"id": "q1", "system": "rag", "answer": answer, "contexts": [{"text": "rain", "score": 0.9}],
         "retrieved_doc_ids": ["d1"]},
        {"id": "q2", "system": "rag", "answer": answer, "contexts": [" "], "retrieved_doc_ids": ["d2"]},
        {"id": "q1", "system": "aa", "answer": answer, "contexts": []},
        {"id": "q2", "system": "aa", "answer": answer, "contexts": [{"text": "rain", "score": 0.9}]},
    ]  # fmt: skip
    evaluation = evaluate(rows, {"metrics": ["quality_checks"]}, out=tmp_path / "out")
    issues = {(item.system, item.id): item.metrics["quality_checks"].details["issues"] for item in evaluation.items}
    assert issues == {("llm", "q1"): [], ("llm", "q2"): [], ("rag", "q1"): [], ("rag", "q2"): ["no_contexts"],
                      ("aa", "q1"): ["no_contexts"], ("aa", "q2"): []}  # fmt: skip
    means = {system: metrics["quality_checks"].mean for system, metrics in evaluation.summary.by_system.items()}
    assert means == {"llm": 1.0, "rag": 0.5, "aa": 0.5}
