"""move_to_previous: the reports of the run in a DIR moved into DIR/previous/NAME/ before a new run writes there."""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.reports.files import move_to_previous, refuse_a_bad_previous
from orchestrator.reports.previous import moved_reports
from ragscore_workers.errors import ConfigError


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


def test_a_previous_that_is_a_file_or_a_link_is_refused_naming_it(tmp_path: Path) -> None:
    """DIR/previous a file (the user's) or a link (elsewhere, maybe another filesystem): refused before the run
    starts, DIR left as it was; a DIR with nothing to move is not refused."""
    written = _reports(tmp_path, "r1", "items.jsonl")
    (tmp_path / "previous").write_text("mine")
    with pytest.raises(ConfigError, match=f"{tmp_path / 'previous'}/, which is not a folder"):
        refuse_a_bad_previous(tmp_path)
    (tmp_path / "previous").unlink()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "previous").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match=f"{tmp_path / 'previous'}/, which is a symbolic link"):
        refuse_a_bad_previous(tmp_path, "out=")
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()} == written
    assert not list((tmp_path / "elsewhere").iterdir())
    refuse_a_bad_previous(tmp_path / "elsewhere")  # no reports there to move


def test_a_rename_that_fails_is_a_clear_error_and_moves_nothing(tmp_path: Path) -> None:
    """A rename across filesystems (EXDEV), past the refusal (a link made since): a ConfigError saying why, what
    was moved moved back, no folder left in previous/."""
    with tempfile.TemporaryDirectory(dir="/dev/shm") as other:
        if os.stat(other).st_dev == os.stat(tmp_path).st_dev:
            pytest.skip("/dev/shm is on the test's filesystem")
        written = _reports(tmp_path, "r1", "items.jsonl", "report.md")
        (tmp_path / "previous").symlink_to(other)
        with pytest.raises(ConfigError, match=r"could not be moved into .*previous/ \(Invalid cross-device link; all "):
            move_to_previous(tmp_path)
        assert {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()} == written
        assert not os.listdir(other)


def test_the_reports_of_a_run_are_found_where_later_runs_moved_them(tmp_path: Path) -> None:
    """moved_reports follows a run's reports from the folder they were written to into previous/RUN_ID (past a
    folder of that name of another run's, to RUN_ID-2) and on where a run into that folder moved them again; the
    folder itself where it names the run or nothing holds them, and never round a link back to it."""
    out = tmp_path / "out"
    _reports(out, "r1", "items.jsonl")
    assert moved_reports(out, "r1") == out
    (out / "previous" / "r1-2" / "previous").mkdir(parents=True)
    _reports(out / "previous" / "r1", "r9", "items.jsonl")
    assert moved_reports(out, "r1") == out
    _reports(out / "previous" / "r1-2", "r2", "items.jsonl")
    _reports(out / "previous" / "r1-2" / "previous" / "r1", "r1", "items.jsonl")
    _reports(out, "r3", "items.jsonl")
    assert moved_reports(out, "r1") == out / "previous" / "r1-2" / "previous" / "r1"
    (out / "previous" / "r1-3").symlink_to(out)
    assert moved_reports(out, "r4") == out


def test_a_previous_folder_that_cannot_be_read_leaves_the_folder_the_reports_were_written_to(tmp_path: Path) -> None:
    """moved_reports raised where ``previous/RUN_ID`` could not be looked at (a folder this user may not enter, a name
    too long), so `ragscore report RUN_ID` of a run whose items were still in the store failed on it: it names the
    folder the reports were written to, as where nothing moved them."""
    out = tmp_path / "out"
    _reports(out, "r1", "items.jsonl")
    (out / "previous").mkdir()
    assert moved_reports(out, "r" * 300) == out  # ENAMETOOLONG, as EACCES, is an OSError that is_dir() raises


def test_of_two_copies_of_a_run_the_one_written_last_is_used_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two copies of a run's reports in previous/ (a resume into another folder, moved again later): the first found
    was used, however old. The one whose run.json says it was written last is, over the files' times (a move
    rewrites run.json), and the time of its summary.json where no run.json stores one; a warning names both."""
    out = tmp_path / "out"
    _reports(out, "r2", "items.jsonl")
    older, newer = out / "previous" / "r1", out / "previous" / "r1-2"
    (out / "previous").mkdir()
    for folder, written in ((older, 100.0), (newer, 200.0)):
        _reports(folder, "r1", "items.jsonl")
        (folder / "run.json").write_text(json.dumps({"run_id": "r1", "written_at": written}))
    os.utime(older / "run.json", (300, 300))  # rewritten by a move since
    os.utime(older / "summary.json", (300, 300))
    with caplog.at_level(logging.WARNING, logger="orchestrator.reports.previous"):
        assert moved_reports(out, "r1") == newer
    said = [record.getMessage() for record in caplog.records]
    assert said == [f"{out / 'previous'}/ holds 2 copies of the reports of run r1 ({older}/, {newer}/): {newer}/, the "
                    "last written, is used"]  # fmt: skip
    for folder in (older, newer):  # an older ragscore's run.json, without the time: its summary.json's
        (folder / "run.json").write_text(json.dumps({"run_id": "r1"}))
    os.utime(newer / "summary.json", (250, 250))
    assert moved_reports(out, "r1") == older


def test_a_copy_past_a_number_missing_in_previous_is_found(tmp_path: Path) -> None:
    """The search tried previous/RUN_ID, RUN_ID-2, ... and stopped at the first missing: a copy in RUN_ID-3 whose
    RUN_ID and RUN_ID-2 were removed was not found. previous/ is listed once: a gap skips nothing, names of other
    runs (RUN_ID-20x, RUN_ID-1, RUN_ID-02) and links are passed over."""
    out = tmp_path / "out"
    _reports(out, "r2", "items.jsonl")
    (out / "previous").mkdir()
    for name in ("r1-1", "r1-02", "r1-20x", "r1-3"):
        _reports(out / "previous" / name, "r1", "items.jsonl")
    for name in ("r1-1", "r1-02", "r1-20x"):
        (out / "previous" / name / "run.json").write_text(json.dumps({"run_id": "r1", "written_at": 9e9}))
    (out / "previous" / "r1-4").symlink_to(out / "previous" / "r1-1")
    assert moved_reports(out, "r1") == out / "previous" / "r1-3"


def test_the_next_free_number_in_previous_is_found_in_one_listing_however_many_are_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """move_to_previous probed previous/RUN_ID, RUN_ID-2, ... one file-system check each: a DIR a CI job reruns into
    under one name gathers a copy a run, and each move cost a check per copy. previous/ is listed once now: the first
    number free is still taken (a gap first), and a file or a link of a number's name takes that number."""
    out, checked = tmp_path / "out", []
    previous = out / "previous"
    previous.mkdir(parents=True)
    for n in range(1, 1001):
        if n != 500:
            (previous / ("r1" if n == 1 else f"r1-{n}")).mkdir()
    (previous / "r1-1001").write_text("a file")
    (previous / "r1-1002").symlink_to(previous / "gone")
    lstat = os.lstat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:  # what os.path.lexists calls
        if str(path).startswith(str(previous)):
            checked.append(path)
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counted)
    _reports(out, "r1", "items.jsonl")
    assert move_to_previous(out) == previous / "r1-500"
    _reports(out, "r1", "items.jsonl")
    assert move_to_previous(out) == previous / "r1-1003"
    assert (previous / "r1-1003" / "items.jsonl").is_file() and len(checked) <= 2, checked[:5]
