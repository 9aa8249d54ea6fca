"""move_to_previous: the reports of the run in a DIR moved into DIR/previous/NAME/ before a new run writes there."""

from __future__ import annotations

import json
import re
from pathlib import Path

from orchestrator.reports.files import move_to_previous


def _reports(out: Path, run_id: str | None, *names: str) -> dict[str, bytes]:
    """``out`` holding a summary.json naming ``run_id`` (none: no summary) and ``names`` of ragscore's; its files."""
    out.mkdir(exist_ok=True)
    if run_id is not None:
        (out / "summary.json").write_text(json.dumps({"run_id": run_id}))
    for name in names:
        (out / name).write_text(f"# ragscore run {run_id}\n")
    return {path.name: path.read_bytes() for path in out.iterdir() if path.is_file()}


def test_a_name_taken_gets_a_number_and_the_users_files_stay(tmp_path: Path) -> None:
    written = _reports(tmp_path, "r1", "report.md", "items.jsonl")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "previous" / "r1").mkdir(parents=True)
    moved = move_to_previous(tmp_path)
    assert moved == tmp_path / "previous" / "r1-2"
    assert {path.name: path.read_bytes() for path in moved.iterdir()} == written
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.txt", "previous"]


def test_reports_no_summary_names_are_named_by_the_time(tmp_path: Path) -> None:
    _reports(tmp_path, None, "report.md")
    moved = move_to_previous(tmp_path)
    assert moved is not None and re.fullmatch(r"\d{8}-\d{6}", moved.name), moved
    assert (moved / "report.md").is_file()


def test_a_run_id_that_is_no_folder_name_is_not_used(tmp_path: Path) -> None:
    _reports(tmp_path, "../../escaped", "items.jsonl")
    moved = move_to_previous(tmp_path)
    assert moved is not None and moved.parent == tmp_path / "previous" and re.fullmatch(r"\d{8}-\d{6}", moved.name)


def test_a_dir_without_reports_moves_nothing(tmp_path: Path) -> None:
    assert move_to_previous(tmp_path) is None
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "r1", "lost": True}))  # a run its Redis lost
    assert move_to_previous(tmp_path) is None
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.json"]
