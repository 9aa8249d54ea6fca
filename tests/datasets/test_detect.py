"""Auto-detection: a directory is eval-points; a .json file is a seed layout only when its content says so."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.datasets import detect_format, iter_rows
from orchestrator.datasets.loaders import ALL_FORMATS
from ragscore_workers.errors import DatasetError

from .conftest import Read, write_json

AA = {"question": "q", "answer": "a", "reference_answer": "r", "contexts": []}


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        ({"topic": "t", "evaluation_points": []}, "eval-points"),
        ([{"topic": "t", "evaluation_points": []}, {"topic": "u", "evaluation_points": []}], "eval-points"),
        ({"qa_pairs": [], "transcripts": {}}, "socioscope"),
        ([AA, {"question": "only"}], "auto-analyst"),
        ([{"question": "q", "answer": "a", "retrieval_scores": []}], "auto-analyst"),
        # ambiguous or plain: read as a list of rows (reference_answer is a Row alias there too)
        ([{"question": "q", "reference_answer": "r"}], "json"),
        ([{"topic": "t", "evaluation_points": []}, {"id": "x"}], "json"),
        ({"q001": {"answer": "x"}, "qa_pairs": {"answer": "y"}}, "json"),
        ([], "json"),
        (3, "json"),
    ],
)
def test_json_content_decides_the_seed_format(tmp_path: Path, data: Any, fmt: str) -> None:
    assert detect_format(write_json(tmp_path / "d.json", data)) == fmt


def test_paths_without_content_sniffing(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "d.jsonl").write_text("{}")
    assert detect_format(tmp_path) == "eval-points"
    assert detect_format(tmp_path / "bad.json") == "json"  # its loader reports the broken JSON
    assert detect_format(tmp_path / "d.jsonl") == "jsonl"
    with pytest.raises(DatasetError, match="--predictions is an option of --format nlp-project"):
        detect_format(tmp_path / "d.jsonl", {"predictions": "p.json"})  # no questions file: not read as one
    (tmp_path / "q.txt").write_text('{"doc_id": "d", "question": "q", "evidence_sentences": []}\n')
    assert detect_format(tmp_path / "q.txt", {"predictions": "p.json"}) == "nlp-project"
    assert {"eval-points", "auto-analyst", "socioscope", "nlp-project", "json"} <= set(ALL_FORMATS)


def test_a_tsv_file_is_read_as_csv_with_tabs(tmp_path: Path) -> None:
    """pandas' to_csv(sep='\\t') and spreadsheets' 'Tab-separated values' write .tsv: 'cannot tell the format from
    '.tsv'', though the CSV reader reads tabs."""
    path = tmp_path / "rows.tsv"
    # a comma in the header (a column of notes) does not make it comma-separated
    path.write_text('id\tquestion\tcontexts\tnotes, free\na\tWhy, then?\t["c1", "c2"]\tn\n', encoding="utf-8")
    assert detect_format(path) == "csv"
    [(line, row)] = list(iter_rows(path))
    assert (line, row.id, row.question, [c.text for c in row.contexts]) == (2, "a", "Why, then?", ["c1", "c2"])


@pytest.mark.parametrize("fmt", [None, "csv"])
def test_a_comma_separated_file_named_tsv_is_still_read_by_its_commas(tmp_path: Path, fmt: str | None) -> None:
    """A .tsv file whose header has no tab (a CSV saved under the wrong name) is read as its header line says, as
    --format csv read it before .tsv meant tabs: one column 'id,question' held every row's whole line."""
    path = tmp_path / "rows.tsv"
    path.write_text("id,question\na,Why?\n", encoding="utf-8")
    [(_, row)] = list(iter_rows(path, fmt))
    assert (row.id, row.question) == ("a", "Why?")


def test_detected_seed_files_read_like_their_explicit_format(tmp_path: Path, read: Read) -> None:
    path = write_json(tmp_path / "aa.json", [AA | {"answer": 5}])
    assert [e.error for e in read(path)[1]] == ["element 1: answer: expected a string, got int"]
    corpus = write_json(tmp_path / "c.json", {"qa_pairs": [{"question": "Q", "type": "Yes/No", "answer": "yes"}]})
    (row,), _ = read(corpus)
    assert row.question_type == "Yes/No"


def test_options_belong_to_their_formats(tmp_path: Path, read: Read) -> None:
    path = write_json(tmp_path / "aa.json", [AA])
    with pytest.raises(DatasetError, match="predictions: not an option of --format auto-analyst"):
        read(path, "auto-analyst", system="s", predictions=str(tmp_path / "p.json"))
    with pytest.raises(DatasetError, match="system: not an option of --format json"):
        read(path, "json", system="s")
    with pytest.raises(DatasetError, match="system: not an option of --format socioscope"):
        read(path, "socioscope", system="s")


def test_a_misspelt_option_says_the_one_meant_and_those_its_format_takes(tmp_path: Path, read: Read) -> None:
    """evaluate(fmt_options={"prediction": ...}) said only 'prediction: not an option of --format nlp-project'."""
    questions = tmp_path / "q.jsonl"
    questions.write_text('{"question": "q", "answer": "a"}\n', encoding="utf-8")
    said = (
        "prediction: not an option of --format nlp-project (did you mean 'predictions'? it takes corpus, predictions, "
    )
    said += "system)"
    with pytest.raises(DatasetError, match=re.escape(said)):
        read(questions, "nlp-project", prediction=str(tmp_path / "p.json"))
    with pytest.raises(DatasetError, match=re.escape("system: not an option of --format json (it takes none)")):
        read(write_json(tmp_path / "aa.json", [AA]), "json", system="s")
