"""items.csv: one row per item, its scores rounded to 6 decimals, and why a cell is empty."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.reports.files import refuse_files_of_others, write_reports
from orchestrator.reports.source import from_dir
from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import ITEM_META_FIELDS


def test_items_csv_rounds_scores_and_says_why_a_cell_is_empty(cluster: str, tmp_path: Path) -> None:
    """A real run: scores were written at full float precision (``0.30000000000000004``, 17 digits), and an item
    whose output could not be scored showed an empty cell with no why (items.jsonl's ``details.reason``). Scores are
    rounded to 6 decimals now, and the ``unscorable`` column, after ``errors``, names each such output and its reason;
    ``ragscore report DIR --format csv`` (the same writer, reading the DIR) writes the same file."""
    tenths = [{"id": f"p{w}", "type": "keyword", "params": {"keywords": [word]}, "weight": w / 10}
              for w, word in ((1, "paris"), (2, "paris"), (7, "berlin"))]  # fmt: skip
    weightless = [{"id": "w0", "type": "keyword", "params": {"keywords": ["paris"]}, "weight": 0}]
    rows = [
        {"id": "noise", "answer": "paris", "reference": "paris", "checks": tenths},  # checks: (0.1 + 0.2) / 1.0
        {"id": "third", "answer": "paris", "reference": "rome", "checks": [tenths[0], tenths[2] | {"weight": 0.2}]},
        {"id": "no-ref", "answer": "paris", "checks": weightless},  # exact_match unscorable, checks an error
    ]
    run = evaluate(rows, {"metrics": ["exact_match", "checks"]}, broker=cluster, out=tmp_path / "run")
    with (run.out_dir / "items.csv").open(encoding="utf-8", newline="") as fh:
        header, *table = list(csv.reader(fh))
    assert header == [*ITEM_META_FIELDS, "checks", "exact_match", "errors", "unscorable"]  # as summary.json's
    cells = {row[0]: dict(zip(header, row, strict=True)) for row in table}
    assert (cells["noise"]["checks"], cells["noise"]["exact_match"]) == ("0.3", "1")
    assert (cells["third"]["checks"], cells["third"]["exact_match"]) == ("0.333333", "0")
    assert cells["noise"]["unscorable"] == cells["noise"]["errors"] == ""
    items = {i["id"]: i for i in map(json.loads, (run.out_dir / "items.jsonl").read_text().splitlines())}
    assert items["noise"]["metrics"]["checks"]["score"] == 0.1 + 0.2  # items.jsonl keeps every digit
    empty = cells["no-ref"]
    assert empty["exact_match"] == empty["checks"] == ""
    assert empty["unscorable"] == "exact_match: no reference"
    error = items["no-ref"]["metrics"]["checks"]["error"]
    assert "," in error and empty["errors"] == f"checks: {error}"  # read back whole: the csv module quoted it
    write_reports(from_dir(run.out_dir), tmp_path / "report", ["csv"])
    assert (tmp_path / "report" / "items.csv").read_bytes() == (run.out_dir / "items.csv").read_bytes()


def test_the_users_own_items_csv_alone_is_refused_as_one_file(tmp_path: Path) -> None:
    """One file of the user's was "it" in the message and "them" at its end: "... or remove them"."""
    (tmp_path / "items.csv").write_text("my,data\n")
    with pytest.raises(ConfigError) as refused:
        refuse_files_of_others(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path} holds items.csv, which no ragscore run wrote: the reports would replace it. Nothing was "
        "written; choose another --out or remove it"
    )
