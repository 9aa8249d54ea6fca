"""eval-points: topics' points become ``checks`` rows, one per answer, from a points file or a directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.datasets._seed import SeedError
from orchestrator.datasets.eval_points import map_point, match_answer_file
from ragscore_workers.errors import DatasetError

from .conftest import Read, write_json

KEYWORD = {"id": "k", "description": "Names chlorophyll", "type": "keyword", "keywords": ["chlorophyll"], "weight": 2}
LENGTH = {"id": "len", "text": "Short", "validator": "length", "config": {"max": 50}, "category": "Style"}


def test_points_file_rows_carry_topic_model_answer_and_mapped_points(tmp_path: Path, read: Read) -> None:
    path = write_json(
        tmp_path / "points.json",
        {
            "topic": "photosynthesis", "question": "Explain it.", "reference": "Plants make glucose.",
            "author": "ana", "answers": {"gpt4": "Chlorophyll absorbs light.", "llama": ""},
            "evaluation_points": [KEYWORD, LENGTH],
        },
    )  # fmt: skip
    rows, errors = read(path, "eval-points")
    assert errors == []
    assert [(r.id, r.system, r.answer) for r in rows] == [
        ("photosynthesis", "gpt4", "Chlorophyll absorbs light."),
        ("photosynthesis", "llama", ""),
    ]
    first = rows[0]
    assert first.question == "Explain it." and first.reference == "Plants make glucose."
    keyword = {"id": "k", "weight": 2, "text": "Names chlorophyll", "type": "keyword"}
    assert first.checks == [
        {**keyword, "params": {"keywords": ["chlorophyll"]}},
        {"id": "len", "category": "Style", "text": "Short", "type": "length", "params": {"max": 50}},
    ]
    assert first.metadata == {"points_file": "points.json", "author": "ana"}


def test_answers_as_a_list_of_model_answer_objects(tmp_path: Path, read: Read) -> None:
    answers = [{"model": "a", "answer": "x"}, {"system": "b", "text": "y"}, {"model": "c"}, {"model": "a", "text": "z"}]
    path = write_json(tmp_path / "p.json", [{"topic": 7, "answers": answers, "evaluation_points": [KEYWORD]}])
    rows, errors = read(path, "eval-points")
    assert [(r.id, r.system, r.answer) for r in rows] == [("7", "a", "x"), ("7", "b", "y")]
    assert [(e.line, e.error) for e in errors] == [
        (1, "p.json element 1: answers[2]: needs a model and an answer"),
        (1, "p.json element 1: two answers by 'a'"),
    ]


@pytest.mark.parametrize(
    ("element", "message"),
    [
        ({"topic": "t", "evaluation_points": [{"type": "nope"}]}, "evaluation_points item 1: unknown validator type"),
        (
            {"topic": "t", "evaluation_points": [KEYWORD, {"id": "x", "type": "keyword", "keywords": []}]},
            "evaluation_points item 2 (x): params.keywords: List should have at least 1 item",
        ),
        (
            {"topic": "t", "evaluation_points": ["Mentions chlorophyll"]},
            "evaluation_points item 1: a bare string is not",
        ),
        ({"topic": "t", "evaluation_points": [{"text": "x"}]}, "evaluation_points item 1: no validator type"),
        (
            {"topic": "t", "evaluation_points": [{"type": "length", "params": {"max": 3}, "min": 1}]},
            "evaluation_points item 1: unknown key 'min' beside params",
        ),
        (
            {"topic": "t", "evaluation_points": [{"type": "length", "text": "a", "description": "b", "max": 1}]},
            "evaluation_points item 1: give one of text, description, not several",
        ),
        ({"topic": "t", "evaluation_points": {"type": "length"}}, "evaluation_points: expected a list, got dict"),
        ({"evaluation_points": []}, "no 'topic'"),
        ({"topic": "t"}, "no 'evaluation_points'"),
        ({"topic": "", "evaluation_points": []}, "topic: must not be empty"),
        ({"topic": "t", "evaluation_points": [], "answers": "x"}, "answers: expected an object"),
        ("just text", "expected a topic object, got str"),
    ],
)
def test_a_bad_topic_is_a_row_error_at_its_element_and_the_others_load(
    tmp_path: Path, read: Read, element: object, message: str
) -> None:
    good = {"topic": "ok", "answers": {"m": "chlorophyll"}, "evaluation_points": [KEYWORD]}
    path = write_json(tmp_path / "p.json", [good, element])
    rows, errors = read(path, "eval-points")
    assert [(r.id, r.system) for r in rows] == [("ok", "m")]
    assert len(errors) == 1 and errors[0].line == 2
    assert errors[0].error.startswith("p.json element 2: ") and message in errors[0].error


def test_a_bad_answer_fails_alone(tmp_path: Path, read: Read) -> None:
    topic = {"topic": "t", "answers": {"a": "fine", "b": None, "c": 3}, "evaluation_points": [KEYWORD]}
    rows, errors = read(write_json(tmp_path / "p.json", topic), "eval-points")
    assert [r.system for r in rows] == ["a"]
    assert [e.error for e in errors] == [
        "p.json element 1: answers['b']: expected a string, got null",
        "p.json element 1: answers['c']: expected a string, got int",
    ]


def _directory(tmp_path: Path) -> Path:
    write_json(
        tmp_path / "a_points.json",
        [
            {"topic": "web", "evaluation_points": [KEYWORD]},
            {"topic": "Web Cache", "answers": {"gpt4": "json answer"}, "evaluation_points": [LENGTH]},
            {"topic": "broken", "evaluation_points": [{"type": "nope"}]},
        ],
    )
    files = {
        "web_gpt4.txt": "web by gpt4\n",
        "web_cache_llama_3.txt": "cache by llama\n",  # slug of "Web Cache", longest topic wins
        "WEB CACHE_mistral.txt": "as written, any case",
        "web_cache_gpt4.txt": "again",  # gpt4 already answered in the JSON
        "broken_gpt4.txt": "x",
        "unknown_gpt4.txt": "x",
        "web_.txt": "no model",
        "notes.md": "ignored",
    }
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    (tmp_path / "web_bad.txt").write_bytes(b"\xff\xfe")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ignored.json").write_text("{not json")
    return tmp_path


def test_directory_reads_points_files_then_topic_model_answer_files(tmp_path: Path, read: Read) -> None:
    rows, errors = read(_directory(tmp_path), "eval-points")
    assert [(r.id, r.system, r.answer) for r in rows] == [
        ("Web Cache", "gpt4", "json answer"),
        ("Web Cache", "mistral", "as written, any case"),
        ("Web Cache", "llama_3", "cache by llama\n"),
        ("web", "gpt4", "web by gpt4\n"),
    ]
    assert rows[1].checks == rows[0].checks and rows[1].metadata["answer_file"] == "WEB CACHE_mistral.txt"
    # answer files are numbered by their position among the directory's sorted *.txt files
    assert [e.line for e in errors] == [3, 2, 3, 4, 5, 6]
    said = "a_points.json element 3: evaluation_points item 1: unknown validator type 'nope'"
    assert errors[0].error.startswith(said), errors[0].error
    topics = "(topics: 'Web Cache', 'web')"
    assert [e.error for e in errors[1:]] == [
        "broken_gpt4.txt: its topic 'broken' could not be read (a_points.json element 3)",
        f"unknown_gpt4.txt: no topic matches; answer files are named <topic>_<model>.txt {topics}",
        f"web_.txt: no topic matches; answer files are named <topic>_<model>.txt {topics}",
        "web_bad.txt: UTF-16 text (Windows PowerShell's > writes it), not UTF-8: iconv -f utf-16 -t utf-8",
        "web_cache_gpt4.txt: topic 'Web Cache' already has an answer by 'gpt4' (a_points.json element 2)",
    ]


def test_answer_files_a_windows_editor_wrote_are_read_or_said_how_to_convert(tmp_path: Path, read: Read) -> None:
    """Notepad's UTF-8 byte-order mark is no part of the answer; PowerShell's UTF-16 and a cp1252 file say how to
    make UTF-8 of them."""
    write_json(tmp_path / "points.json", {"topic": "web", "evaluation_points": [KEYWORD]})
    (tmp_path / "web_notepad.txt").write_bytes("\ufeffcaché".encode())
    (tmp_path / "web_powershell.txt").write_bytes("caché".encode("utf-16"))
    (tmp_path / "web_excel.txt").write_bytes("caché".encode("cp1252"))
    rows, errors = read(tmp_path, "eval-points")
    assert [(r.system, r.answer) for r in rows] == [("notepad", "caché")]
    assert [e.error for e in errors] == [
        "web_excel.txt: invalid UTF-8 at byte 4 (the file is not UTF-8: convert it, e.g. iconv -f cp1252 -t utf-8)",
        "web_powershell.txt: UTF-16 text (Windows PowerShell's > writes it), not UTF-8: iconv -f utf-16 -t utf-8",
    ]


def test_a_directory_is_detected_and_read_without_format(tmp_path: Path, read: Read) -> None:
    rows, _ = read(_directory(tmp_path))
    assert len(rows) == 4


def test_topic_defined_twice_stops_the_dataset(tmp_path: Path, read: Read) -> None:
    write_json(tmp_path / "a.json", {"topic": "t", "evaluation_points": []})
    write_json(tmp_path / "b.json", {"topic": "t", "evaluation_points": []})
    with pytest.raises(DatasetError, match=r"b.json element 1: topic 't' is already defined in a.json element 1"):
        read(tmp_path, "eval-points")


@pytest.mark.parametrize(
    ("setup", "fmt", "message"),
    [
        ("no_json", "eval-points", "no evaluation points file"),
        ("no_json", "json", "is a directory; give a file"),
        ("scalar", "eval-points", "expected a topic object"),
        ("option", "eval-points", "system: not an option of --format eval-points"),
    ],
)
def test_unusable_inputs_raise_dataset_error(tmp_path: Path, read: Read, setup: str, fmt: str, message: str) -> None:
    (tmp_path / "x_m.txt").write_text("answer")
    path, options = tmp_path, {}
    if setup == "scalar":
        path = write_json(tmp_path / "p.json", 3)
    if setup == "option":
        path, options = write_json(tmp_path / "p.json", []), {"system": "s"}
    with pytest.raises(DatasetError, match=message):
        read(path, fmt, **options)


def test_map_point_keeps_the_schema_fields_and_gathers_flat_params() -> None:
    raw = {"id": 3, "point": "Cites", "type": "citation", "min_count": 2, "depends_on": 1, "informational": True}
    mapped = {"id": 3, "depends_on": 1, "informational": True, "text": "Cites", "type": "citation"}
    assert map_point(raw, "p") == {**mapped, "params": {"min_count": 2}}
    with pytest.raises(SeedError, match="give one of type, validator"):
        map_point({"type": "length", "validator": "length"}, "p")


def test_answer_file_names_split_on_the_longest_topic_and_refuse_ties() -> None:
    assert match_answer_file("a_b_c", ["a", "a b"]) == ("a b", "c")
    assert match_answer_file("a_b_c", ["a"]) == ("a", "b_c")
    assert match_answer_file("a_", ["a"]) is None
    with pytest.raises(SeedError, match=r"fits the topics \['a b', 'a_b'\] alike"):
        match_answer_file("a_b_c", ["a b", "a_b"])
