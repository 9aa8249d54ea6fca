"""socioscope: each answer of a qa pair becomes a typed-answer / verbatim row grouped by its transcript, with
the cited transcripts as contexts; bad pairs and bad answers are reported at the pair's position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ragscore_workers.errors import DatasetError

from .conftest import Read, write_json

TRANSCRIPTS = {"T1": "We employ seven people. We buy from local farmers.", "T2": "The city council lends the land."}
PAIR = {
    "id": "q1", "transcript": "T1", "expected": {"seven": 1},
    "question": {"text": "How many people?", "type": "pick one", "metric": ["typed", "verbatim"]},
    "answers": {"gpt4": {"answer": "Seven.", "citations": ["employ seven people"]}},
}  # fmt: skip


def _corpus(tmp_path: Path, pairs: list[Any], transcripts: Any = TRANSCRIPTS) -> Path:
    return write_json(tmp_path / "corpus.json", {"transcripts": transcripts, "qa_pairs": pairs})


def test_rows_carry_type_expected_group_and_citations_into_the_cited_transcripts(tmp_path: Path, read: Read) -> None:
    cross = {
        "id": 2, "transcript": "T2", "question": "Which partners?", "question_type": "ListMany", "topic": "food",
        "expected": [["city council", 0.5], ["local farmers", 0.5]],
        "answers": [
            {"system": "a", "answer": "city council; local farmers",
             "citations": [{"quote": "local farmers", "transcript": "T1", "speaker": "Chair"},
                           {"quote": "city council"}, {"quote": "We buy", "interview": "T1"}]},
            {"model": "b", "text": "The council."},
            {"system": "c", "answer": "none", "citations": []},
        ],
    }  # fmt: skip
    rows, errors = read(_corpus(tmp_path, [PAIR, cross]), "socioscope")
    assert errors == []
    first, a, b, c = rows
    assert (first.id, first.system, first.group, first.question_type) == ("q1", "gpt4", "T1", "PickOne")
    assert first.expected == {"seven": 1} and first.metadata == {"metric": ["typed_answer", "verbatim"]}
    assert [(x.id, x.text) for x in first.contexts] == [("T1", TRANSCRIPTS["T1"])]
    assert [(x.source_index, x.quote) for x in first.citations or []] == [(0, "employ seven people")]
    # the pair's transcript first, then the other transcripts the answer cites, in order of first citation
    assert [x.id for x in a.contexts] == ["T2", "T1"]
    cited = [(x.source_index, x.quote) for x in a.citations or []]
    assert cited == [(1, "local farmers"), (0, "city council"), (1, "We buy")]
    assert (a.id, a.group, a.question_type, a.metadata) == ("2", "T2", "ListMany", {"topic": "food"})
    assert (b.system, b.answer, b.citations) == ("b", "The council.", None)
    assert (c.system, c.citations) == ("c", [])


def test_a_single_answer_and_transcript_records_as_exported_by_socioscope(tmp_path: Path, read: Read) -> None:
    pair = {"question": "Positive?", "type": "Yes/No", "expected": "no", "interview": "PL-8", "answer": "No.",
            "citations": [{"quote": "Neutral."}]}  # fmt: skip
    records = [{"PROJECT": "PL-8", "TRANSCRIPT": "Neutral.", "YEAR": 2024}, {"id": "x", "text": ""}]
    (row,), errors = read(_corpus(tmp_path, [pair], records), "socioscope")
    assert errors == []
    assert (row.id, row.system, row.group, row.question_type) == ("row-1", None, "PL-8", "Yes/No")
    assert [(x.id, x.text) for x in row.contexts] == [("PL-8", "Neutral.")]


def test_without_transcripts_the_pair_transcript_is_only_a_group(tmp_path: Path, read: Read) -> None:
    pair = {"question": "Q?", "question_type": "Yes/No", "expected": "yes", "transcript": "T9", "answer": "yes"}
    (row,), _ = read(_corpus(tmp_path, [pair], None), "socioscope")
    assert (row.group, row.contexts) == ("T9", [])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"question": {"text": "Q", "type": "Essay"}}, "unknown question_type 'Essay'"),
        ({"question": {"text": "Q", "type": "Yes/No"}, "question_type": "Yes/No"}, "question.type and question_type"),
        ({"question": {"text": "Q", "kind": "x"}}, "question: unknown key 'kind'"),
        ({"question": {"type": "PickOne"}}, "no question text"),
        ({"question": "Q"}, "no question type"),
        ({"expected": {"seven": 2}}, "expected: expected['seven']: weight must be between 0 and 1, got 2"),
        ({"expected": None}, "expected: expected: a value must be a string"),
        ({"question": {"text": "Q", "type": "PickOne", "metric": "exact"}}, "metric 'exact': choose from"),
        ({"transcript": "T7"}, "transcript 'T7' is not in transcripts"),
        ({"answer": "x"}, "answer beside answers"),
        ({"answers": "Seven."}, "answers: expected an object"),
        ({"answers": [{"answer": "x"}]}, "answers[0]: expected an object with a system"),
        ("pair", "expected an object, got str"),
    ],
)
def test_a_bad_pair_is_a_row_error_at_its_position(tmp_path: Path, read: Read, change: Any, message: str) -> None:
    bad = change if isinstance(change, str) else {**PAIR, **change}
    rows, errors = read(_corpus(tmp_path, [PAIR, bad, PAIR | {"id": "q3"}]), "socioscope")
    assert [r.id for r in rows] == ["q1", "q3"]
    assert [e.line for e in errors] == [2]
    assert errors[0].error.startswith("element 2: ") and message in errors[0].error


def test_a_typed_metric_needs_expected_values(tmp_path: Path, read: Read) -> None:
    pair = {k: v for k, v in PAIR.items() if k != "expected"}
    _, errors = read(_corpus(tmp_path, [pair, {**pair, "question": {"text": "Q", "type": "Yes/No"}}]), "socioscope")
    assert [(e.line, e.error) for e in errors] == [(1, "element 1: metric typed_answer needs expected values")]


def test_a_bad_answer_fails_alone(tmp_path: Path, read: Read) -> None:
    answers = {
        "ok": "Seven.",
        "unknown": {"answer": "x", "citations": [{"quote": "q", "transcript": "T5"}]},
        "shape": {"answer": "x", "citations": "employ"},
        "extra": {"answer": "x", "score": 1},
        "nothing": 4,
    }
    rows, errors = read(_corpus(tmp_path, [{**PAIR, "answers": answers}]), "socioscope")
    assert [r.system for r in rows] == ["ok"]
    assert [(e.line, e.error) for e in errors] == [
        (1, "element 1: answers['unknown'].citations[0]: transcript 'T5' is not in transcripts"),
        (1, "element 1: answers['shape'].citations: expected a list, got str"),
        (1, "element 1: answers['extra']: unknown key 'score'; give answer and citations"),
        (1, "element 1: answers['nothing']: expected a string or {answer, citations}, got int"),
    ]


def test_a_citation_needs_a_transcript(tmp_path: Path, read: Read) -> None:
    pair = {"question": "Q?", "question_type": "Yes/No", "expected": "yes", "answer": "yes", "citations": ["q"]}
    _, errors = read(_corpus(tmp_path, [pair]), "socioscope")
    assert [e.error for e in errors] == ["element 1: answer.citations[0]: names no transcript, and the pair has none"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"transcripts": {}}, "expected an object with a qa_pairs list"),
        ([PAIR], "expected an object with a qa_pairs list"),
        ({"qa_pairs": [], "transcripts": "T1"}, "transcripts must be an object"),
        ({"qa_pairs": [], "transcripts": {"T1": 3}}, r"transcripts\['T1'\]: expected a string"),
        ({"qa_pairs": [], "transcripts": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "given twice"),
        ({"qa_pairs": [], "transcripts": [{"PROJECT": "a"}]}, r"transcripts\[0\]: needs an id"),
    ],
)
def test_a_bad_corpus_stops_the_dataset(tmp_path: Path, read: Read, data: Any, message: str) -> None:
    with pytest.raises(DatasetError, match=message):
        read(write_json(tmp_path / "corpus.json", data), "socioscope")


def test_a_citation_in_a_file_without_transcripts_says_the_file_has_none(tmp_path: Path, read: Read) -> None:
    """Transcripts may be left out; a citation then failed with "transcript 'T1' is not in transcripts", as if one
    id were mistyped."""
    pair = {"question": "Q?", "question_type": "Yes/No", "expected": "yes", "answer": "yes",
            "citations": [{"quote": "q", "transcript": "T1"}]}  # fmt: skip
    _, errors = read(_corpus(tmp_path, [pair], transcripts={}), "socioscope")
    assert [e.error for e in errors] == [
        "element 1: answer.citations[0]: cites transcript 'T1', and the file has no transcripts to check it in"
    ]
