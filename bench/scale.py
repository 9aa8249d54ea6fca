"""Scale: rows/s and the orchestrator's peak RSS at growing dataset sizes (cpu metrics, 2 worker processes).

    python -m bench.scale [--sizes 10000 100000 1000000]
    python -m bench.scale --send --baseline-tree OTHER_CHECKOUT [--sizes 100000] [--reps 2]

Each size runs ``ragscore run`` (embedded: private redis-server + a cpu worker with 2 processes) as a
subprocess; a thread samples that process's RSS every 50 ms (the workers and Redis are other
processes). Also reported: Redis memory used per item after the run. The ratio column is peak RSS at this
size ÷ peak RSS at the smallest size: flat means ~1.

``--send``: what a user sees before the progress bar. Each size runs ``ragscore run`` with its plain progress
(stderr is no terminal), from this tree and from ``--baseline-tree`` (another checkout, e.g. ``git worktree add``
of main) one after the other, ``--reps`` times, timing each line it prints: the first line (time to first output),
the longest silence before the first line of scored items, and the send (from "sending them to the queues" to that
line) and the whole submit (``timing.submit_s`` of summary.json), each per 10,000 rows; ratios this tree ÷ baseline.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

import psutil

from ._common import print_table, qa_rows, write_rows

SUITE = "name: bench-scale\nmetrics:\n  - exact_match\n  - {name: recall_at_k, params: {k: [1, 5]}}\n"


def _peak_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    try:
        proc = psutil.Process(pid)
        while not stop.is_set():
            out.append(proc.memory_info().rss)
            time.sleep(0.05)
    except psutil.NoSuchProcess:
        return


def _write_rows_streaming(path: Path, n: int) -> None:
    """Write n rows without holding them all (1M rows would be ~1 GB of dicts)."""
    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, n, 50_000):
            rows = qa_rows(min(50_000, n - start), seed=start)
            for i, row in enumerate(rows):
                row["id"] = f"q{start + i}"
            fh.write("".join(json.dumps(r) + "\n" for r in rows))


def one(n: int, tmp: Path) -> dict[str, float]:
    data = tmp / f"rows-{n}.jsonl"
    _write_rows_streaming(data, n) if n > 100_000 else write_rows(data, qa_rows(n, seed=n))
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE)
    home = tmp / "home"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_RUN_TTL_S": "3600"}
    env.pop("RAGSCORE_BROKER_URL", None)
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite),
           "--out", str(tmp / f"out-{n}"), "--quiet"]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    samples: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_peak_rss, args=(proc.pid, stop, samples), daemon=True)
    sampler.start()
    code = proc.wait()
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    if code != 0:
        raise SystemExit(f"ragscore run failed with exit code {code} at n={n}")
    # Redis memory per item: restart the embedded server from its AOF and read INFO memory.
    from orchestrator.embedded_redis import EmbeddedRedis

    embedded = EmbeddedRedis(home)
    embedded.acquire()
    try:
        used = int(embedded.client.info("memory")["used_memory"])
        keys = int(embedded.client.dbsize())
        embedded.client.flushall()
    finally:
        embedded.release()
    return {"rows": n, "wall_s": wall, "rows_s": n / wall, "peak_rss_mb": max(samples) / 2**20,
            "redis_bytes_per_item": used / n, "redis_keys": keys}  # fmt: skip


def _timed_lines(stream: IO[str], start: float, out: list[tuple[float, str]]) -> None:
    for line in stream:
        out.append((time.perf_counter() - start, line.rstrip("\n")))


def send_one(n: int, tmp: Path, tree: Path) -> dict[str, float]:
    """One plain-progress ``ragscore run`` of ``n`` rows with ``tree``'s code: when its lines came (seconds)."""
    data = tmp / f"rows-{n}.jsonl"
    if not data.exists():
        _write_rows_streaming(data, n) if n > 100_000 else write_rows(data, qa_rows(n, seed=n))
    suite = tmp / "suite.yaml"
    suite.write_text(SUITE)
    out = tmp / f"out-{n}-{tree.name}"
    env = {**os.environ, "RAGSCORE_HOME": str(tmp / "home"), "RAGSCORE_RUN_TTL_S": "3600", "PYTHONPATH": str(tree)}
    env.pop("RAGSCORE_BROKER_URL", None)
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out", str(out)]
    lines: list[tuple[float, str]] = []
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    reader = threading.Thread(target=_timed_lines, args=(proc.stderr, start, lines), daemon=True)
    reader.start()
    if proc.wait() != 0:
        raise SystemExit(f"ragscore run failed at n={n} with {tree}: {lines[-5:]}")
    reader.join()
    scored = next(t for t, line in lines if "item×metric outputs" in line)
    sending = next(t for t, line in lines if "sending them to the queues" in line)
    before = [0.0, *(t for t, _ in lines if t <= scored)]
    per = n / 10_000
    submit_s = json.loads((out / "summary.json").read_text())["timing"]["submit_s"]
    return {"first_output_s": lines[0][0], "longest_silence_s": max(b - a for a, b in itertools.pairwise(before)),
            "send_s_per_10k": (scored - sending) / per, "submit_s_per_10k": submit_s / per}  # fmt: skip


def send_main(sizes: list[int], baseline: Path, reps: int) -> None:
    """``--send``: this tree and ``baseline`` alternately, ``reps`` times a size; medians and their ratios."""
    ours = Path(__file__).resolve().parent.parent
    rows, summary = [], {"benchmark": "scale-send", "baseline": str(baseline), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="send-", dir="/tmp") as tmp:
        for n in sizes:
            runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this tree": []}
            for _ in range(reps):
                runs["baseline"].append(send_one(n, Path(tmp), baseline))
                runs["this tree"].append(send_one(n, Path(tmp), ours))
            med = {who: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for who, rs in runs.items()}
            ratio = {k: med["this tree"][k] / med["baseline"][k] for k in med["baseline"]}
            for who in ("baseline", "this tree"):
                rows.append([n, who, *(med[who][k] for k in ratio)])
            rows.append([n, "ratio", *(f"{r:.2f}" for r in ratio.values())])
            summary["sizes"][str(n)] = {"runs": runs, "median": med, "ratio": ratio}
    headers = ["rows", "tree", "first output s", "longest silence s", "send s/10k", "submit s/10k"]
    print_table(headers, rows, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--send", action="store_true", help="time the output before the bar against --baseline-tree")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout, for --send")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    if args.send:
        if args.baseline_tree is None:
            parser.error("--send needs --baseline-tree")
        send_main(args.sizes, args.baseline_tree.resolve(), args.reps)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="rss-", dir="/tmp") as tmp:
        for n in args.sizes:
            results.append(one(n, Path(tmp)))
    base = results[0]["peak_rss_mb"]
    table = [[r["rows"], r["rows_s"], r["wall_s"], r["peak_rss_mb"], f"{r['peak_rss_mb'] / base:.2f}",
              r["redis_bytes_per_item"]] for r in results]  # fmt: skip
    summary = {
        "benchmark": "scale",
        "sizes": {str(r["rows"]): {k: round(v, 2) for k, v in r.items() if k != "rows"} for r in results},
        "rss_ratio_largest_vs_smallest": round(results[-1]["peak_rss_mb"] / base, 3),
    }
    headers = ["rows", "rows/s", "wall s", "orchestrator peak RSS MB", "RSS ratio", "Redis bytes/item"]
    print_table(headers, table, summary)


if __name__ == "__main__":
    main()
