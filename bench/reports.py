"""Writing a finished run's reports, against the floor of reading its items once.

    python -m bench.reports [--n 100000] [--reps 3] [--dataset]

Input: an output directory of ``n`` generated items as ``ragscore run`` writes them for the bench.scale suite
(exact_match, mrr, recall_at_1, recall_at_5 with their details; groups a/b/c; 1 % of the items with an
exact_match error) and its summary, aggregated from those items. Reports: ``write_reports`` of that directory
into another one, every format (items.jsonl, items.csv, summary.json, failed_rows.jsonl, report.md,
report.html), as ``ragscore results DIR --out OTHER`` does; with ``--dataset``, the directory's run_info.json
names a JSONL dataset of the same ids, from which the reports read the worst items' questions and answers back.
Baseline (the floor every report writer pays): read
items.jsonl and ``json.loads`` each line, nothing else. Measured alternately, ``reps`` times each.
Ratio = median report time ÷ median floor time.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from orchestrator.datasets import dataset_fingerprint
from orchestrator.reports import from_dir, write_reports
from ragscore_workers.aggregate import Aggregator
from ragscore_workers.schemas import question_fingerprint
from ragscore_workers.store import RawItem

from ._common import print_table

#: Share of the items whose exact_match output is an error (an items.csv errors cell, the report's examples).
ERROR_SHARE = 0.01
WORDS = ("paris", "tokyo", "mars", "jupiter", "homer", "1989", "oslo", "lima", "cairo", "gold")


def _item(i: int, rng: random.Random) -> RawItem:
    right = rng.random() < 0.5
    retrieved = [f"d{j}" for j in rng.sample(range(100), 5)]
    gold = rng.randrange(100)
    rank = next((k for k, d in enumerate(retrieved, start=1) if d == f"d{gold}"), None)
    ms = round(rng.uniform(0.05, 10.0), 3)
    details = {"rank": rank, "retrieved_top_1": retrieved[0], "gold": 1}
    shown = {} if right else {"answer": rng.choice(WORDS), "reference": rng.choice(WORDS)}  # as exact_match shows
    exact = {"score": float(right), "passed": right, "details": shown, "error": None, "ms": round(ms / 80, 3)}
    if rng.random() < ERROR_SHARE:
        exact = {"score": None, "passed": None, "details": {}, "error": "answer is not text", "ms": 0.0}
    metrics = {
        "exact_match": exact,
        "mrr": {"score": 1.0 / rank if rank else 0.0, "passed": None, "details": details, "error": None, "ms": ms},
        **{
            f"recall_at_{k}": {
                "score": float(bool(rank and rank <= k)),
                "passed": bool(rank and rank <= k),
                "details": details | {"found": int(bool(rank and rank <= k))},
                "error": None,
                "ms": ms,
            }
            for k in (1, 5)
        },
    }
    meta = {"id": f"q{i}", "group": rng.choice("abc"), "question_sha": question_fingerprint(f"What is item {i}?")}
    return RawItem(key=meta["id"], meta=meta, metrics=metrics)


def make_run(directory: Path, n: int, seed: int = 0) -> Path:
    """An output directory with ``n`` items (items.jsonl) and their summary (summary.json)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    agg = Aggregator()
    with (directory / "items.jsonl").open("w", encoding="utf-8") as fh:
        for i in range(n):
            item = _item(i, rng)
            agg.add_raw(item.meta, item.metrics)
            fh.write(item.to_json_line() + "\n")
    summary = agg.summary("bench-reports", suite="bench-scale")
    (directory / "summary.json").write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return directory


def add_dataset(directory: Path, n: int) -> Path:
    """A JSONL dataset of the run's ``n`` ids (their questions as the items' question_sha name them), recorded
    with its fingerprint in the directory's run_info.json, as a run records it."""
    dataset = directory / "data.jsonl"
    with dataset.open("w", encoding="utf-8") as fh:
        for i in range(n):
            row = {"id": f"q{i}", "question": f"What is item {i}?", "answer": "paris is the answer " * 5,
                   "reference": "paris", "contexts": ["some context text " * 20]}  # fmt: skip
            fh.write(json.dumps(row) + "\n")
    info = {
        "dataset": str(dataset),
        "format": "jsonl",
        "dataset_fingerprint": dataset_fingerprint(dataset, "jsonl", {}),
    }
    (directory / "run_info.json").write_text(json.dumps(info), encoding="utf-8")
    return dataset


def floor_s(items: Path) -> float:
    """Seconds to read items.jsonl and parse every line."""
    start = time.perf_counter()
    with items.open("rb") as fh:
        for line in fh:
            json.loads(line)
    return time.perf_counter() - start


def reports_s(source: Path, out: Path) -> float:
    """Seconds to write every report of the run in ``source`` into ``out``."""
    start = time.perf_counter()
    write_reports(from_dir(source), out)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dataset", action="store_true", help="read the worst items' texts back from a dataset")
    args = parser.parse_args()
    floors: list[float] = []
    reports: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-reports-", dir="/tmp") as tmp:
        source = make_run(Path(tmp) / "run", args.n)
        if args.dataset:
            add_dataset(source, args.n)
        floor_s(source / "items.jsonl")  # warm the page cache and the imports
        for rep in range(args.reps):
            floors.append(floor_s(source / "items.jsonl"))
            reports.append(reports_s(source, Path(tmp) / f"out-{rep}"))
        mib = (source / "items.jsonl").stat().st_size / 2**20
    floor, report = statistics.median(floors), statistics.median(reports)
    table = [
        [rep + 1, f"{f:.3f}", f"{r:.3f}", f"{r / f:.2f}"]
        for rep, (f, r) in enumerate(zip(floors, reports, strict=True))
    ]
    table.append(["median", f"{floor:.3f}", f"{report:.3f}", f"{report / floor:.2f}"])
    result = {
        "benchmark": "reports",
        "items": args.n,
        "dataset": args.dataset,
        "items_jsonl_mib": round(mib, 1),
        "floor_s": round(floor, 3),
        "reports_s": round(report, 3),
        "reports_items_per_s": round(args.n / report),
        "ratio_reports_vs_floor": round(report / floor, 3),
        "ratios": [round(r / f, 3) for f, r in zip(floors, reports, strict=True)],
    }
    print_table(["rep", "floor s (read + json.loads)", "reports s (every format)", "ratio"], table, result)


if __name__ == "__main__":
    main()
