"""bench.notebook — a notebook's repeated ``evaluate()`` calls: each later call's wall time against the first's.

``python -m bench.notebook [--rows 20] [--calls 3]``: one Python process (a notebook's kernel) calls ``evaluate()``
``--calls`` times on the same rows, for a cpu suite (``exact_match``) and an embed suite (``context_relevance``), in a
private ``RAGSCORE_HOME``. The first call of a suite is the baseline: it starts the embedded Redis and the local
workers (and loads the embedding model). Ratio = a later call's wall time ÷ the first's: near 1 while every call
starts everything again, well below 1 once the Redis and the workers are kept between calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from typing import Any

from ._common import print_table, qa_rows

#: The suites timed, by the queue their workers serve.
SUITES: dict[str, list[str]] = {"cpu": ["exact_match"], "embed": ["context_relevance"]}


def _rows(n: int) -> list[dict[str, Any]]:
    """QA rows with a context each (what context_relevance reads)."""
    return [{**row, "contexts": [f"{row['reference']} is the answer to item {i}."]} for i, row in enumerate(qa_rows(n))]


def _time_calls(rows: list[dict[str, Any]], metrics: list[str], calls: int) -> list[float]:
    """Wall seconds of each of ``calls`` evaluate() calls in this process."""
    from orchestrator import evaluate

    walls = []
    for _ in range(calls):
        started = time.perf_counter()
        with warnings.catch_warnings():  # the bench's rows are scored as they are
            warnings.simplefilter("ignore")
            evaluate(rows, {"metrics": metrics}, quiet=True)
        walls.append(time.perf_counter() - started)
    return walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    if args.calls < 2:
        parser.error("--calls must be 2 or more: the first call is the baseline")
    table, result = [], {"rows": args.rows, "calls": args.calls}
    with tempfile.TemporaryDirectory(prefix="rsh-", dir="/tmp") as home:  # a short path: the Redis socket's
        os.environ["RAGSCORE_HOME"] = home
        os.environ.pop("RAGSCORE_BROKER_URL", None)
        rows = _rows(args.rows)
        for queue, metrics in SUITES.items():
            walls = _time_calls(rows, metrics, args.calls)
            later = statistics.median(walls[1:])
            table.append([queue, walls[0], walls[1], later, f"{later / walls[0]:.2f}"])
            result[queue] = {"first_s": round(walls[0], 2), "walls_s": [round(w, 2) for w in walls],
                             "later_over_first": round(later / walls[0], 2)}  # fmt: skip
    print_table(["suite", "first s", "second s", "later median s", "ratio"], table, result)


if __name__ == "__main__":
    main()
