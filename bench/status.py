"""bench.status — the wall time of ``ragscore status``, against the same command with the whole package imported.

``python -m bench.status [--repeat 7]``: a private redis-server, one submitted run of 5 rows and no worker (its
message waits unserved, so ``status RUN`` runs every check: the store's progress, the queues ahead, Celery's 1 s ask
of the workers), and a second run whose message was taken off its queue (as a worker that holds it would: nothing
waits, so no worker is asked). Each command is a fresh ``python`` process, as a user's or a polling script's call is:

* ``status`` (the run list), ``status RUN`` and ``status RUN, none waiting``, as the console script runs them;
* the same two with ``orchestrator.api`` and ``orchestrator.runner`` imported first (baseline): what every status
  paid while ``orchestrator/__init__`` imported the API (gates, metrics, providers, numpy, the Celery tasks);
* ``python -c pass``: the interpreter's own start, which no command can go below.

The kinds run in turn, ``--repeat`` times; the median of each is kept. Ratio = command ÷ its baseline.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ._common import print_table, qa_rows, write_rows

ROOT = Path(__file__).resolve().parents[1]

#: Runs ``ragscore ARGS`` in this process after importing ``sys.argv[1]``'s modules (comma-separated, or none).
_COMMAND = """
import importlib, sys
for name in filter(None, sys.argv[1].split(",")):
    importlib.import_module(name)
from orchestrator.cli import main
sys.argv = ["ragscore", *sys.argv[2:]]
main()
"""
#: What every status imported before: the package's ``__init__`` imported the API, and status imported the runner.
FULL_PACKAGE = "orchestrator.api,orchestrator.runner"


def _seconds(argv: list[str]) -> float:
    """Wall seconds of one process running ``argv`` (it must exit 0)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    from orchestrator.connection import connect
    from orchestrator.runner import submit
    from orchestrator.suite import load_suite
    from tests.support import RedisProcess

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(Path(tmp) / "redis").start()
        try:
            store = connect(server.url, sends=True)
            path = write_rows(Path(tmp) / "rows.jsonl", qa_rows(5))
            run_id = submit(path, load_suite({"metrics": ["exact_match"]}), store).run_id
            apart = server.url.removesuffix("/0") + "/1"  # another database: its queues hold its run's alone
            other = connect(apart, sends=True)
            taken = submit(path, load_suite({"metrics": ["exact_match"]}), other).run_id
            other.broker.delete("cpu")  # its message taken, as by a worker that holds it: nothing waits
            commands = {
                "status": ["status", "--broker", server.url],
                "status RUN": ["status", run_id, "--broker", server.url],
                "status RUN, none waiting": ["status", taken, "--broker", apart],
            }
            kinds = {"python -c pass": [sys.executable, "-c", "pass"]}
            for name, given in commands.items():
                kinds[name] = [sys.executable, "-c", _COMMAND, "", *given]
                kinds[f"{name} (baseline)"] = [sys.executable, "-c", _COMMAND, FULL_PACKAGE, *given]
            times: dict[str, list[float]] = {kind: [] for kind in kinds}
            for _ in range(args.repeat):
                for kind, argv in kinds.items():
                    times[kind].append(_seconds(argv))
        finally:
            server.stop()
    median = {kind: statistics.median(t) for kind, t in times.items()}
    ratios = {name: median[name] / median[f"{name} (baseline)"] for name in commands}
    rows = [[kind, f"{median[kind]:.3f}", f"{min(times[kind]):.3f}", f"{ratios[kind]:.2f}" if kind in ratios else ""]
            for kind in kinds]  # fmt: skip
    print_table(["command", "median s", "least s", "ratio ÷ baseline"], rows,
                {"repeat": args.repeat, "seconds": times, "median_s": median, "ratio": ratios})  # fmt: skip


if __name__ == "__main__":
    main()
