"""A fresh embed worker's first run with every text already in the Redis cache: with the model's note in the cache (the
worker needs not load the model) against the same run with the note deleted (it loads the model, as every worker did
before the note).

    python -m bench.embed_cached [--n 50] [--repeats 2]

Data: ``bench.embed``'s rows (``n`` questions, 11 texts each), all five embedding metrics, embedded once first so every
text is cached. Each phase starts a fresh embed worker (the default pool: prefork, one child) and times one run, submit
to written summary, the worker's boot included (the same in both). Phases alternate, without the note then with it,
``repeats`` times, so the shared machine's drift falls on both. Ratio = mean seconds without ÷ mean seconds with the
note (goal > 1: the model's load is what the note spares). ``loads`` counts the model loads the runs' workers made.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.embedded_redis import EmbeddedRedis
from orchestrator.runner import connect
from orchestrator.workers import LocalWorkers
from ragscore_workers._embedding_cache import note_key
from ragscore_workers.embedding import known_namespace
from ragscore_workers.schemas import EmbeddingConfig

from ._common import print_table, write_rows
from .embed import METRICS, embed_rows, timed_run


def fresh_worker_run(url: str, tmp: Path, path: Path, suite: dict[str, Any], noted: bool) -> tuple[float, dict]:
    """Seconds of one run by a fresh embed worker, the model's note deleted first unless ``noted``, and its counters."""
    store = connect(url)
    if not noted:
        store.r.delete(note_key(known_namespace(EmbeddingConfig()) or ""))
    workers = LocalWorkers(url, ["embed"], tmp / "logs")
    try:
        workers.start()
        return timed_run(store, path, suite, workers)
    finally:
        workers.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="questions (default 50)")
    parser.add_argument("--repeats", type=int, default=2, help="runs without and with the note, each (default 2)")
    args = parser.parse_args()
    suite = {"name": "bench-embed-cached", "metrics": METRICS, "embedding": {"device": "cpu", "cache": True}}
    with tempfile.TemporaryDirectory(prefix="rsb-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["RAGSCORE_HOME"] = str(tmp / "home")
        os.environ.pop("RAGSCORE_BROKER_URL", None)
        path = write_rows(tmp / "rows.jsonl", embed_rows(args.n, seed=args.n))
        redis_server = EmbeddedRedis(tmp / "home")
        url = redis_server.acquire()
        try:
            _, fill = fresh_worker_run(url, tmp, path, suite, noted=False)  # every text cached, the note written
            runs: dict[bool, list[tuple[float, dict]]] = {False: [], True: []}
            for _ in range(args.repeats):
                for noted in (False, True):
                    runs[noted].append(fresh_worker_run(url, tmp, path, suite, noted))
        finally:
            redis_server.release()
    means = {noted: statistics.mean(s for s, _ in got) for noted, got in runs.items()}
    result = {
        "benchmark": "embed_cached",
        "n": args.n,
        "texts": fill["encoded"],
        "cpus": os.cpu_count(),
        "without_note_s": [round(s, 2) for s, _ in runs[False]],
        "with_note_s": [round(s, 2) for s, _ in runs[True]],
        "ratio": round(means[False] / means[True], 2),
        "loads": {
            "without_note": [st["loads"] for _, st in runs[False]],
            "with_note": [st["loads"] for _, st in runs[True]],
        },
        "other_cores": {
            "without_note": [st["other_cores"] for _, st in runs[False]],
            "with_note": [st["other_cores"] for _, st in runs[True]],
        },  # fmt: skip
    }
    table = [
        [
            name,
            len(got),
            means[noted],
            sum(st["loads"] for _, st in got),
            sum(st["encoded"] for _, st in got),
            sum(st["cache_hits"] for _, st in got),
        ]  # fmt: skip
        for name, noted, got in (("without the note", False, runs[False]), ("with the note", True, runs[True]))
    ]
    print_table(
        ["fresh worker, every text cached", "runs", "mean seconds", "loads", "encoded", "cache hits"], table, result
    )


if __name__ == "__main__":
    main()
