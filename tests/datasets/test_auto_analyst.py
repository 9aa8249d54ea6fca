"""auto-analyst: the evaluation list becomes rows with reference, scored contexts and metadata; bad elements
are reported at their position."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragscore_workers.errors import DatasetError

from .conftest import Read, write_json

GOOD = {"question": "What is RAG?", "reference_answer": "Retrieval then generation.", "answer": "It retrieves [1]."}


def test_rows_take_reference_contexts_scores_and_keep_other_keys(tmp_path: Path, read: Read) -> None:
    items = [
        {
            **GOOD, "run": 4,
            "contexts": ["plain", {"content": "obj", "retrieval_score": 0.2, "chunk_id": 9, "source": "a.md"}],
            "retrieval_scores": [0.8, None],
        },
        {"question": "Q2", "answer": None, "contexts": [{"page_content": "pc", "score": 0.5}], "id": "x", "group": "g"},
    ]  # fmt: skip
    rows, errors = read(write_json(tmp_path / "aa.json", items), "auto-analyst")
    assert errors == []
    first, second = rows
    assert (first.id, first.question, first.reference, first.answer) == ("row-1", *GOOD.values())
    assert [(c.text, c.score, c.id, c.metadata) for c in first.contexts] == [
        ("plain", 0.8, None, {}),
        ("obj", 0.2, "9", {"source": "a.md"}),
    ]
    assert first.metadata == {"run": 4}
    assert (second.id, second.answer, second.reference, second.group) == ("x", None, None, "g")
    assert [(c.text, c.score) for c in second.contexts] == [("pc", 0.5)]


def test_a_plain_list_of_rows_read_as_auto_analyst_keeps_its_row_fields(tmp_path: Path, read: Read) -> None:
    """A ``.json`` list of rows with question, answer, reference_answer and contexts is detected as
    auto-analyst: its gold_doc_id and retrieved_doc_ids stay row fields (they went to metadata, so every
    retrieval metric was silently unscorable)."""
    item = {**GOOD, "id": "q1", "contexts": ["c"], "gold_doc_id": "d1", "retrieved_doc_ids": ["d2", "d1"],
            "question_type": "factoid", "metadata": {"source": "s"}, "extra": 1}  # fmt: skip
    rows, errors = read(write_json(tmp_path / "rows.json", [item]), None)
    assert errors == []
    (row,) = rows
    assert (row.gold_doc_id, row.retrieved_doc_ids, row.question_type) == ("d1", ["d2", "d1"], "factoid")
    assert row.metadata == {"source": "s", "extra": 1}


def test_a_list_read_as_auto_analyst_takes_reference_as_the_reference(tmp_path: Path, read: Read) -> None:
    """Detected by its retrieval_scores, a list that named the gold answer ``reference`` (the row field) had it
    put in metadata: exact_match said "no reference" for every row, and the warning asked for a column named
    otherwise."""
    item = {"question": "q1", "answer": "Paris", "reference": "Paris", "contexts": ["c"], "retrieval_scores": [0.9]}
    rows, errors = read(write_json(tmp_path / "aa.json", [item, {**item, "reference_answer": "Lyon"}]), None)
    assert errors == [] and [r.reference for r in rows] == ["Paris", "Lyon"]  # the layout's own name first
    assert all("reference" not in r.metadata for r in rows)


def test_system_option_names_the_pipeline(tmp_path: Path, read: Read) -> None:
    path = write_json(tmp_path / "aa.json", [GOOD, {**GOOD, "system": "other"}])
    rows, errors = read(path, "auto-analyst", system="bm25")
    assert [r.system for r in rows] == ["bm25"]
    assert [(e.line, e.error) for e in errors] == [(2, "element 2: system 'other' differs from --system bm25")]


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"answer": "a"}, "no 'question'"),
        ({"question": "q"}, "no 'answer'"),
        ({**GOOD, "question": " "}, "question: must not be empty"),
        ({**GOOD, "answer": 3}, "answer: expected a string, got int"),
        ({**GOOD, "contexts": "one"}, "contexts: expected a list, got str"),
        ({**GOOD, "contexts": [{"score": 1}]}, "contexts[0]: no text (give one of text, content, page_content)"),
        ({**GOOD, "contexts": [{"text": "a", "content": "b"}]}, "contexts[0]: give one of text, content, not several"),
        ({**GOOD, "contexts": [5]}, "contexts[0]: expected a string or an object, got int"),
        ({**GOOD, "contexts": ["a"], "retrieval_scores": [0.1, 0.2]}, "expected one score per context (1), got 2"),
        ({**GOOD, "contexts": ["a"], "retrieval_scores": ["high"]}, "retrieval_scores[0]: expected a finite number"),
        ({**GOOD, "contexts": ["a"], "retrieval_scores": [float("nan")]}, "retrieval_scores[0]: expected a finite"),
        (
            {**GOOD, "contexts": [{"text": "a", "score": 0.3}], "retrieval_scores": [0.4]},
            "contexts[0] has score 0.3 but retrieval_scores[0] is 0.4",
        ),
        ({**GOOD, "contexts": [{"text": "a", "metadata": []}]}, "contexts[0].metadata: expected an object"),
        (["not", "an", "object"], "expected an object, got list"),
    ],
)
def test_a_bad_element_is_a_row_error_at_its_position(tmp_path: Path, read: Read, item: object, message: str) -> None:
    rows, errors = read(write_json(tmp_path / "aa.json", [GOOD, item, GOOD]), "auto-analyst")
    assert [r.id for r in rows] == ["row-1", "row-3"]
    assert [e.line for e in errors] == [2]
    assert errors[0].error.startswith("element 2: ") and message in errors[0].error


def test_a_file_that_is_not_a_list_stops_the_dataset(tmp_path: Path, read: Read) -> None:
    with pytest.raises(DatasetError, match="expected a JSON list of"):
        read(write_json(tmp_path / "aa.json", {"question": "q"}), "auto-analyst")
