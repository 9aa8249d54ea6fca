"""items.csv: one row per item, its scores as items.jsonl holds them, and why a cell is empty."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.reports.files import refuse_files_of_others, write_reports
from orchestrator.reports.source import from_dir
from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import ITEM_META_FIELDS, MetricSummary, RunSummary


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


def test_items_csv_says_why_a_score_cell_is_empty(cluster: str, tmp_path: Path) -> None:
    """A real run: an item whose output could not be scored showed an empty cell with no why (items.jsonl's
    ``details.reason``). The ``unscorable`` column, after ``errors``, names each such output and its reason; scores
    stay as items.jsonl holds them (``0.30000000000000004``); ``ragscore report DIR --format csv`` (the same writer,
    reading the DIR) writes the same file."""
    tenths = [{"id": f"p{w}", "type": "keyword", "params": {"keywords": [word]}, "weight": w / 10}
              for w, word in ((1, "paris"), (2, "paris"), (7, "berlin"))]  # fmt: skip
    weightless = [{"id": "w0", "type": "keyword", "params": {"keywords": ["paris"]}, "weight": 0}]
    rows = [
        {"id": "noise", "answer": "paris", "reference": "paris", "checks": tenths},  # checks: (0.1 + 0.2) / 1.0
        {"id": "no-ref", "answer": "paris", "checks": weightless},  # exact_match unscorable, checks an error
    ]
    run = evaluate(rows, {"metrics": ["exact_match", "checks"]}, broker=cluster, out=tmp_path / "run")
    with (run.out_dir / "items.csv").open(encoding="utf-8", newline="") as fh:
        header, *table = list(csv.reader(fh))
    assert header == [*ITEM_META_FIELDS, "checks", "exact_match", "errors", "unscorable"]  # as summary.json's
    cells = {row[0]: dict(zip(header, row, strict=True)) for row in table}
    items = {i["id"]: i for i in map(json.loads, (run.out_dir / "items.jsonl").read_text().splitlines())}
    assert items["noise"]["metrics"]["checks"]["score"] == 0.1 + 0.2
    assert (cells["noise"]["checks"], cells["noise"]["exact_match"]) == (repr(0.1 + 0.2), "1.0")  # every digit
    assert cells["noise"]["unscorable"] == cells["noise"]["errors"] == ""
    empty = cells["no-ref"]
    assert empty["exact_match"] == empty["checks"] == ""
    assert empty["unscorable"] == '["exact_match: no reference"]'  # a JSON array, as items.jsonl's errors
    error = items["no-ref"]["metrics"]["checks"]["error"]
    assert "," in error and json.loads(empty["errors"]) == [f"checks: {error}"]  # whole: the csv module quoted it
    write_reports(from_dir(run.out_dir), tmp_path / "report", ["csv"])
    assert (tmp_path / "report" / "items.csv").read_bytes() == (run.out_dir / "items.csv").read_bytes()


def test_items_csv_entries_split_back_whatever_their_messages_hold(cluster: str, tmp_path: Path) -> None:
    """A real run: the ``errors`` and ``unscorable`` cells joined an item's entries with ``; ``, which a message holds
    too (a point id ``a; b, "c"`` in one), so no reader could split them back. Each cell is a JSON array of the
    entries, as items.jsonl's ``errors``: csv.reader then json.loads gives every entry whole."""
    odd = 'a; b, "c"'
    points = [{"id": "p", "type": "keyword", "params": {"keywords": ["x"]}, "depends_on": [odd]}]
    rows = [
        {"id": "both", "answer": "x", "checks": points},  # checks an error; exact_match and retrieval unscorable
        {"id": "fine", "answer": "x", "reference": "x", "retrieved_doc_ids": ["d"], "gold_doc_id": "d",
         "checks": [points[0] | {"depends_on": []}]},
    ]  # fmt: skip
    suite = {"metrics": ["exact_match", "checks", {"name": "recall_at_k", "params": {"k": [1]}}]}
    run = evaluate(rows, suite, broker=cluster, out=tmp_path / "run")
    items = {i["id"]: i for i in map(json.loads, (run.out_dir / "items.jsonl").read_text().splitlines())}
    with (run.out_dir / "items.csv").open(encoding="utf-8", newline="") as fh:
        cells = {row["id"]: row for row in csv.DictReader(fh)}
    errors = json.loads(cells["both"]["errors"])
    assert errors == items["both"]["errors"] and len(errors) == 1
    assert "; " in errors[0] and "," in errors[0] and '"' in errors[0], errors  # the message holds all three
    unscorable = json.loads(cells["both"]["unscorable"])
    assert unscorable == ["exact_match: no reference", "mrr: no gold_doc_id", "recall_at_1: no gold_doc_id"]
    assert cells["fine"]["errors"] == cells["fine"]["unscorable"] == ""


def test_the_users_own_items_csv_alone_is_refused_as_one_file(tmp_path: Path) -> None:
    """One file of the user's was "it" in the message and "them" at its end: "... or remove them"."""
    (tmp_path / "items.csv").write_text("my,data\n")
    with pytest.raises(ConfigError) as refused:
        refuse_files_of_others(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path} holds items.csv, which no ragscore run wrote: the reports would replace it. Nothing was "
        "written; choose another --out or remove it"
    )
