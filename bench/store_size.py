"""bench.store_size — the embedded Redis after N finished runs: items kept RAGSCORE_RUN_TTL_S vs released.

``python -m bench.store_size [--runs 3] [--rows 20000]``: ``evaluate(out=DIR)`` (``exact_match`` + ``recall_at_k``)
``--runs`` times into each of two fresh RAGSCORE_HOMEs:

* baseline: every item kept ``RAGSCORE_RUN_TTL_S`` (7 days) after its run, as before;
* released: items released once the reports are in DIR (their hour shortened to 1 s here, so that what the store
  holds an hour on is measured now).

Then, for each home: the embedded Redis's ``used_memory`` (INFO memory), its append-only dir's size as left
(expired keys add DEL records until Redis rewrites it: itself past AOF_REWRITE_MIN_SIZE once it doubled) and once
rewritten (BGREWRITEAOF, waited for), and the wall time of a fresh ``ragscore status`` process, which starts the
server and waits while it reads the data back (the median of 3). Ratio = released ÷ baseline. Measured 2026-12-05
(2 busy cores, 3 runs of 5,000 rows): used_memory 16.3 -> 1.2 MB (0.08), AOF as left 15.2 -> 13.2 MB (0.87; both
rewritten by the server during the runs), rewritten 8.0 -> 0.09 MB (0.01), status 0.8 -> 0.8 s (Python's start
dominates at this size). Before the 16 MB rewrite threshold (Redis's 64 MB): AOF as left 26.8 -> 27.7 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import print_table, qa_rows

ROOT = Path(__file__).resolve().parents[1]
SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}]}


def _score(home: Path, runs: int, rows: int, released_ttl_s: int) -> None:
    """``runs`` finished runs into ``home``, their items released ``released_ttl_s`` after their reports."""
    from orchestrator import evaluate, runner, shutdown

    os.environ["RAGSCORE_HOME"] = str(home)
    runner.RELEASED_ITEMS_TTL_S = released_ttl_s
    for i in range(runs):
        evaluate(qa_rows(rows, seed=i), SUITE, out=home / f"out{i}", quiet=True)
    shutdown()  # the calls' kept Redis and workers (orchestrator.warm): each measure starts the server afresh


def _aof_bytes(home: Path) -> int:
    return sum(f.stat().st_size for f in (home / "redis").rglob("appendonly*") if f.is_file())


def _measure(home: Path, released: bool) -> dict[str, Any]:
    """What the home's store holds now; ``released``: once its items expired (their 1 s)."""
    from orchestrator.embedded_redis import EmbeddedRedis

    embedded = EmbeddedRedis(home)
    with embedded:
        client = embedded.client
        while released and any(client.scan_iter("ragscore:run:*:item:*", count=10_000)):
            time.sleep(0.2)
        used = int(client.info("memory")["used_memory"])
        aof = _aof_bytes(home)
        client.bgrewriteaof()  # what the server does itself from AOF_REWRITE_MIN_SIZE once the file doubled
        while any(int(client.info("persistence")[f]) for f in ("aof_rewrite_in_progress", "aof_rewrite_scheduled")):
            time.sleep(0.1)
        rewritten = _aof_bytes(home)
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    env.pop("RAGSCORE_BROKER_URL", None)
    walls = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "orchestrator.cli", "status"], cwd=ROOT, env=env, check=True,
                       capture_output=True)  # fmt: skip
        walls.append(time.perf_counter() - started)
    sizes = {"used_mb": used / 1e6, "aof_mb": aof / 1e6, "rewritten_mb": rewritten / 1e6}
    return {**sizes, "status_s": statistics.median(walls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args()
    from ragscore_workers.settings import DEFAULT_RUN_TTL_S

    results: dict[str, dict[str, Any]] = {}
    for kind, ttl in (("baseline", DEFAULT_RUN_TTL_S), ("released", 1)):
        with tempfile.TemporaryDirectory(prefix="rsb-", dir="/tmp") as tmp:
            _score(Path(tmp), args.runs, args.rows, ttl)
            results[kind] = _measure(Path(tmp), released=ttl == 1)
    fields = ["used_mb", "aof_mb", "rewritten_mb", "status_s"]
    table = [[kind, *(round(results[kind][f], 2) for f in fields)] for kind in results]
    ratios = {f: round(results["released"][f] / results["baseline"][f], 3) for f in fields}
    table.append(["ratio", *(ratios[f] for f in fields)])
    print_table(["store", *fields], table, {"runs": args.runs, "rows": args.rows, **results, "ratio": ratios})


if __name__ == "__main__":
    main()
