"""items.csv: one row per item, its scores as items.jsonl holds them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from orchestrator.reports.files import refuse_files_of_others, write_reports
from orchestrator.reports.source import from_dir
from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import MetricSummary, RunSummary


def test_items_csv_keeps_every_digit_of_a_score(tmp_path: Path) -> None:
    """Scores were written to 6 significant digits (``0.333333``, ``0.123457``): a user summing or comparing them
    in a spreadsheet got other numbers than items.jsonl's. Now Python's shortest repr, which reads back the same."""
    scores = [1 / 3, 0.1234567890123, 2 / 3 * 1e-7, 1.0, 0.0]
    run = tmp_path / "run"
    run.mkdir()
    summary = RunSummary(run_id="r", items=len(scores), scored=len(scores), metrics={"m": MetricSummary(mean=0.4, n=5)})
    (run / "summary.json").write_text(summary.model_dump_json())
    items = [{"id": f"q{i}", "metrics": {"m": {"score": s}}, "errors": []} for i, s in enumerate(scores)]
    (run / "items.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    write_reports(from_dir(run), tmp_path / "out", ["csv"])
    with (tmp_path / "out" / "items.csv").open(newline="") as fh:
        cells = [row["m"] for row in csv.DictReader(fh)]
    assert [float(cell) for cell in cells] == scores
    assert cells == [repr(s) for s in scores]


def test_the_users_own_items_csv_alone_is_refused_as_one_file(tmp_path: Path) -> None:
    """One file of the user's was "it" in the message and "them" at its end: "... or remove them"."""
    (tmp_path / "items.csv").write_text("my,data\n")
    with pytest.raises(ConfigError) as refused:
        refuse_files_of_others(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path} holds items.csv, which no ragscore run wrote: the reports would replace it. Nothing was "
        "written; choose another --out or remove it"
    )
