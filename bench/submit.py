"""bench.submit — the time ``submit`` takes for a judge run (validation pass, the judge-call count, sending).

``python -m bench.submit [--n 20000] [--repeat 5] [--metrics answer_accuracy]``: a private redis-server, no
workers (submit only sends); each repeat submits the same rows as a new run. Prints the least seconds of the
repeats (the one least slowed by other work), wall and the submitting process's CPU (Redis's own time is not in it).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ._common import print_table, qa_rows, write_rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--metrics", nargs="+", default=["answer_accuracy"])
    args = parser.parse_args()

    from orchestrator.runner import connect, submit
    from orchestrator.suite import load_suite
    from tests.support import RedisProcess

    judge = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "rpm": 600}
    suite = {"name": "bench-submit", "metrics": args.metrics, "judge": judge}
    with tempfile.TemporaryDirectory() as tmp:
        path = write_rows(Path(tmp) / "rows.jsonl", qa_rows(args.n))
        server = RedisProcess(Path(tmp) / "redis").start()
        try:
            store = connect(server.url, sends=True)
            resolved = load_suite(suite)
            times, cpu = [], []
            for _ in range(args.repeat):
                start, start_cpu = time.perf_counter(), time.process_time()
                submit(path, resolved, store, broker=server.url)
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
        finally:
            server.stop()
    best, best_cpu = min(times), min(cpu)
    print_table(["rows", "best s", "best cpu s", "rows/s"], [[args.n, best, best_cpu, args.n / best]],
                {"rows": args.n, "submit_s": times, "cpu_s": cpu, "best_s": best, "best_cpu_s": best_cpu})  # fmt: skip


if __name__ == "__main__":
    main()
