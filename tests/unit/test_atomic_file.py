"""Reports are replaced whole: a writer that fails leaves the previous file and no partial one."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.atomic_file import atomic_writer, write_text_atomic


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
