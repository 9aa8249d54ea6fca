"""cpu metrics through real Redis + a cpu worker (a process per core) vs an in-process loop over the same functions.

    python -m bench.cpu [--sizes 10000 100000]

Baseline: the same rows parsed into ``Row`` and scored by ``score_rows`` in this process, one core.
Pipeline: ``ragscore run`` in embedded mode (private redis-server + one cpu worker, a process per usable core),
timed end to end: validation pass, submit, scoring, aggregation and writing items.jsonl/csv/summary.
Ratio = pipeline rows/s ÷ in-process rows/s (goal >= 0.5 at 100k rows).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from orchestrator.progress import QuietProgress
from orchestrator.runner import run
from orchestrator.suite import load_suite
from ragscore_workers.metrics.registry import RunContext
from ragscore_workers.schemas import Row
from ragscore_workers.scoring import score_rows

from ._common import full_cpu_rows, print_table, qa_rows, write_rows

SUITE = {"name": "bench-cpu", "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}]}
#: ``--metrics all``: every deterministic cpu metric (typed answers run with WordNet synonyms).
FULL_SUITE = {
    "name": "bench-cpu-all",
    "metrics": [
        "exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}, "typed_answer", "verbatim", "citation",
        "evidence_overlap", "quality_checks", "checks",
    ],
}  # fmt: skip


def in_process(rows: list[dict], suite: dict, chunk: int = 250) -> float:
    """Seconds to parse and score every row in this process."""
    resolved = load_suite(suite)
    ctx = RunContext(run_id="bench", suite=resolved.suite)
    start = time.perf_counter()
    for i in range(0, len(rows), chunk):
        parsed = [Row.model_validate(r) for r in rows[i : i + chunk]]
        score_rows(parsed, resolved.metrics, ctx)
    return time.perf_counter() - start


def pipeline(path: Path, out: Path, suite: dict) -> tuple[float, dict]:
    """Seconds for an embedded end-to-end run (its cpu worker's pool: a process per usable core), and its timing
    breakdown."""
    start = time.perf_counter()
    summary = run(path, load_suite(suite), out, progress=QuietProgress())
    return time.perf_counter() - start, summary.timing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--metrics", choices=["spine", "all"], default="spine", help="spine: exact_match + recall")
    args = parser.parse_args()
    suite, make_rows = (SUITE, qa_rows) if args.metrics == "spine" else (FULL_SUITE, full_cpu_rows)
    table, result = [], {"benchmark": "cpu", "metrics": args.metrics, "cpus": os.cpu_count(), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="rsb-", dir="/tmp") as tmp:
        os.environ["RAGSCORE_HOME"] = str(Path(tmp) / "home")
        os.environ.pop("RAGSCORE_BROKER_URL", None)
        for n in args.sizes:
            rows = make_rows(n, seed=n)
            path = write_rows(Path(tmp) / f"rows-{n}.jsonl", rows)
            base_s = in_process(rows, suite)
            pipe_s, timing = pipeline(path, Path(tmp) / f"out-{n}", suite)
            ratio = base_s / pipe_s
            phases = [timing.get(k, 0.0) for k in ("submit_s", "scoring_s", "aggregate_s")]
            table.append([n, n / base_s, n / pipe_s, *phases, pipe_s, f"{ratio:.3f}"])
            result["sizes"][str(n)] = {
                "in_process_rows_s": round(n / base_s, 1),
                "pipeline_rows_s": round(n / pipe_s, 1),
                "pipeline_s": round(pipe_s, 2),
                "ratio": round(ratio, 3),
            }
    headers = ["rows", "in-process rows/s", "pipeline rows/s", "submit s", "scored at s", "aggregate s", "total s"]
    headers.append("ratio")
    print_table(headers, table, result)


if __name__ == "__main__":
    main()
