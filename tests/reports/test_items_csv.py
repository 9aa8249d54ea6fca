"""items.csv: one row per item, its scores as items.jsonl holds them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from orchestrator.reports.files import write_reports
from orchestrator.reports.source import from_dir
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
