"""Reports are replaced whole: a writer that fails leaves the previous file and no partial one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.atomic_file import atomic_writer, link_target, write_text_atomic
from ragscore_workers.errors import ConfigError


def test_a_failed_write_keeps_the_old_file_and_removes_the_partial_one(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    write_text_atomic(target, "old\n")
    with pytest.raises(RuntimeError), atomic_writer(target) as fh:
        fh.write("half of the new")
        assert target.read_text() == "old\n"  # readers see the old file while the new one is written
        raise RuntimeError("disk full")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_a_finished_write_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "items.csv"
    target.write_text("old\n")
    with atomic_writer(target, newline="") as fh:
        fh.write("a,b\r\n")
    assert target.read_bytes() == b"a,b\r\n"
    assert [p.name for p in tmp_path.iterdir()] == ["items.csv"]


def test_two_writers_of_one_file_each_write_a_temporary_file_of_their_own(tmp_path: Path) -> None:
    """Both wrote ``.NAME.partial``: the second truncated the first's half-written text, and the first then wrote
    into the file the second had moved into place (or failed, its temporary file gone)."""
    target = tmp_path / "report.md"
    with atomic_writer(target) as first:
        first.write("first, ")
        first.flush()
        with atomic_writer(target) as second:
            second.write("second\n")
        assert target.read_text() == "second\n"
        first.write("whole\n")
    assert target.read_text() == "first, whole\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_a_written_file_has_the_mode_open_gives_under_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Not ``tempfile.mkstemp``'s 0600: a report others could read stays readable by them."""
    old = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "summary.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "summary.json").stat().st_mode) == mode


def test_a_temporary_file_that_cannot_be_created_is_named_as_the_report(tmp_path: Path) -> None:
    """Its random hidden name (``.report.md.835dc6cd90ca.partial``) told the user nothing they wrote."""
    (tmp_path / "afile").write_text("")
    target = tmp_path / "afile" / "report.md"  # beneath a file: no file can be created there
    with pytest.raises(NotADirectoryError) as caught:
        write_text_atomic(target, "x\n")
    assert caught.value.filename == str(target)
    assert ".partial" not in str(caught.value)


def test_a_link_named_stands_for_its_last_target_and_a_loop_of_links_is_refused(tmp_path: Path) -> None:
    """Python 3.13's ``Path.resolve()`` gives a loop of links back as the link, no error: it was taken as the file
    to write, and refused as a file of another's ("holds loop.jsonl, which ragscore has no record of writing")."""
    final = tmp_path / "datasets" / "golden.jsonl"  # not there yet: made where the links lead
    (tmp_path / "middle.jsonl").symlink_to(final)
    (tmp_path / "named.jsonl").symlink_to("middle.jsonl")
    assert link_target(tmp_path / "named.jsonl", "--out") == final
    assert link_target(tmp_path / "plain.jsonl", "--out") == tmp_path / "plain.jsonl"
    (tmp_path / "self.jsonl").symlink_to("self.jsonl")
    (tmp_path / "loop.jsonl").symlink_to("loop2.jsonl")
    (tmp_path / "loop2.jsonl").symlink_to("loop.jsonl")
    for loop in (tmp_path / "self.jsonl", tmp_path / "loop.jsonl"):
        with pytest.raises(ConfigError, match=f"--out {loop} is a link in a loop of links, to no file"):
            link_target(loop, "--out")
