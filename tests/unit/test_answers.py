"""The mark of a question its target could not answer in a target run's answers.jsonl (ragscore_workers.answers)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.reports.source import iter_answers_file
from ragscore_workers.answers import TARGET_ERROR


def _answers(tmp_path: Path, *rows: dict[str, object]) -> dict[str, dict[str, object]]:
    """``rows`` written as an answers.jsonl, read back as a resume does: each answer by its question's id."""
    path = tmp_path / "answers.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {key.split("::")[-1]: answer for key, answer in iter_answers_file(path)}


def test_a_users_metadata_named_as_the_older_mark_is_kept_with_its_answer(tmp_path: Path) -> None:
    """A row whose own metadata held ``target_error`` was read back as an unanswered question (and asked again),
    that metadata lost: the mark is a field of its own now, and an answered row's metadata is the user's."""
    mine = {"target_error": "x", "lang": "en"}
    read = _answers(
        tmp_path,
        {"id": "q0", "system": "s", "answer": "A", "metadata": mine},
        {"id": "q1", "system": "s", "metadata": mine, TARGET_ERROR: "s: HTTP 500"},
    )
    assert read["q0"] == {"row": {"id": "q0", "system": "s", "answer": "A", "metadata": mine}}
    assert read["q1"] == {"row": {"id": "q1", "system": "s", "metadata": mine}, "error": "s: HTTP 500"}


def test_an_older_versions_mark_in_a_row_without_an_answer_is_still_read(tmp_path: Path) -> None:
    """Files written before said it in ``metadata.target_error``: a row without an answer marked so is the failed
    question it was, its mark taken out of its metadata."""
    read = _answers(
        tmp_path,
        {"id": "q0", "system": "s", "metadata": {"target_error": "s: HTTP 500", "lang": "en"}},
        {"id": "q1", "system": "s", "metadata": {"target_error": "run cancelled"}},
    )
    assert read["q0"] == {"row": {"id": "q0", "system": "s", "metadata": {"lang": "en"}}, "error": "s: HTTP 500"}
    assert read["q1"] == {"row": {"id": "q1", "system": "s"}, "error": "run cancelled"}
