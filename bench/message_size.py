"""bench.message_size — Redis memory held by a run's waiting task messages: whole rows vs the fields metrics read.

``python -m bench.message_size [--n 5000] [--contexts 5] [--context-chars 1000] [--add METRIC ...]``: RAG rows
(question, answer, reference, ``--contexts`` retrieved passages of ``--context-chars`` characters, ranked doc ids, gold
id, group, metadata), a suite on three queues (cpu: ``exact_match``, ``recall_at_k``; embed: ``answer_correctness``,
``context_relevance``; judge: ``answer_accuracy``; ``--add``: more metrics), submitted by ``orchestrator.runner.submit``
to a fresh private redis-server with no workers, so every scoring message waits in Redis. Measured: the server's
``used_memory`` (INFO memory) after the submit, less that of the empty server, and each queue's list in bytes (``MEMORY
USAGE``). Baseline: the same submit with every message carrying the whole row, as before ``MetricDef.reads``
(``ResolvedSuite.message_fields`` answering None, as for a metric that declares nothing). Ratio = trimmed ÷ whole.

``python -m bench.message_size --profile grows-late [--small 1000] [--big 400] [--big-chars 200000]``: rows that grow
late in the file (``--small`` rows of ~200 B, then ``--big`` rows of a ``--big-chars`` answer) submitted for
``exact_match`` by a process of its own: its peak memory (``ru_maxrss``), its shards and the most rows and message
bytes one held. Run it on two trees to compare (it cannot stand in for an older spool in the same process).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ._common import print_table, qa_rows, write_rows

QUEUES = ("cpu", "embed", "judge")
SUITE = {
    "name": "bench-message-size",
    "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}, "answer_correctness",
                "context_relevance", "answer_accuracy"],
    "judge": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "rpm": 600},
}  # fmt: skip


def rag_rows(n: int, contexts: int, context_chars: int) -> list[dict[str, Any]]:
    """:func:`qa_rows` with what a RAG system's output carries: passages, a longer answer, metadata."""
    rng = random.Random(7)
    words = "the report says that revenue grew in the third quarter while costs fell across most regions".split()
    rows = qa_rows(n, seed=7)
    for row in rows:
        passages = [" ".join(rng.choices(words, k=context_chars // 5))[:context_chars] for _ in range(contexts)]
        row |= {"contexts": passages, "answer": f"{row['answer']}: " + " ".join(rng.choices(words, k=60)),
                "metadata": {"retriever": "bm25", "latency_ms": rng.randrange(900)}}  # fmt: skip
    return rows


def _submitted(path: Path, tmp: Path, whole: bool, suite: dict[str, Any]) -> dict[str, float]:
    """Submit ``path`` to a fresh server; its memory once every message waits (``whole``: whole rows)."""
    from orchestrator.runner import connect, submit
    from orchestrator.suite import load_suite
    from ragscore_workers import planning
    from tests.support import RedisProcess

    server = RedisProcess(tmp / ("whole" if whole else "trimmed")).start()
    fields = planning.ResolvedSuite.message_fields
    try:
        store = connect(server.url, sends=True)
        empty = int(store.r.info("memory")["used_memory"])
        if whole:  # every message the whole row: what a suite of metrics that declare nothing sends
            planning.ResolvedSuite.message_fields = lambda self, names: None  # type: ignore[method-assign]
        submit(path, load_suite(suite), store, broker=server.url)
        used = int(store.r.info("memory")["used_memory"]) - empty
        queues = {q: int(store.r.memory_usage(q) or 0) / 1e6 for q in QUEUES}
    finally:
        planning.ResolvedSuite.message_fields = fields  # type: ignore[method-assign]
        server.stop()
    return {"used_mb": used / 1e6, **{f"{q}_mb": mb for q, mb in queues.items()}}


#: What ``--profile grows-late``'s submitting process runs: submit the rows at ``argv[2]`` to the Redis at ``argv[1]``,
#: then print its peak memory, its shards and the most rows and message bytes one of them held, as JSON.
_GROWS_LATE_SUBMIT = """
import json, resource, sys
from pathlib import Path
from orchestrator.runner import connect, submit
from orchestrator.suite import load_suite
from ragscore_workers.schemas import Row

resolved = load_suite({"metrics": ["exact_match"]})
store = connect(sys.argv[1], sends=True)
sub = submit(Path(sys.argv[2]), resolved, store, broker=sys.argv[1])
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
sizes = {(row := Row.model_validate_json(line)).key: resolved.message_bytes(row) for line in open(sys.argv[2])}
held = [store.shard_keys(sub.run_id, k) for k in range(sub.shards)]
print(json.dumps({"peak_mb": round(peak_mb, 1), "shards": sub.shards, "max_shard_rows": max(map(len, held)),
                  "max_shard_mb": round(max(sum(sizes[k] for k in keys) for keys in held) / 1e6, 1)}))
"""


def grows_late(small: int, big: int, big_chars: int) -> dict[str, Any]:
    """Submit ``small`` rows of ~200 B then ``big`` rows of a ``big_chars`` answer from a process of its own, to a
    fresh server with no workers: what :data:`_GROWS_LATE_SUBMIT` prints."""
    from tests.support import RedisProcess

    rows = qa_rows(small + big, seed=7)
    for row in rows[small:]:
        row["answer"] = ("revenue grew " * (big_chars // 13 + 1))[:big_chars]
    with tempfile.TemporaryDirectory(prefix="rsm-", dir="/tmp") as tmp:
        path = write_rows(Path(tmp) / "rows.jsonl", rows)
        server = RedisProcess(Path(tmp) / "redis").start()
        try:
            said = subprocess.run([sys.executable, "-c", _GROWS_LATE_SUBMIT, server.url, str(path)], check=True,
                                  capture_output=True, text=True).stdout  # fmt: skip
        finally:
            server.stop()
    return json.loads(said.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5_000)
    parser.add_argument("--contexts", type=int, default=5)
    parser.add_argument("--context-chars", type=int, default=1_000)
    parser.add_argument("--add", nargs="*", default=[], metavar="METRIC", help="more metrics for the suite")
    parser.add_argument("--profile", choices=["grows-late"], help="rows that grow late: the submit's peak memory")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--big", type=int, default=400)
    parser.add_argument("--big-chars", type=int, default=200_000)
    args = parser.parse_args()
    if args.profile == "grows-late":
        result = grows_late(args.small, args.big, args.big_chars)
        print_table(list(result), [list(result.values())], {"small": args.small, "big": args.big, **result})
        return
    suite = SUITE | {"metrics": [*SUITE["metrics"], *args.add]}
    with tempfile.TemporaryDirectory(prefix="rsm-", dir="/tmp") as tmp:
        path = write_rows(Path(tmp) / "rows.jsonl", rag_rows(args.n, args.contexts, args.context_chars))
        results = {"whole": _submitted(path, Path(tmp), whole=True, suite=suite),
                   "trimmed": _submitted(path, Path(tmp), whole=False, suite=suite)}  # fmt: skip
    names = ["used_mb", *(f"{q}_mb" for q in QUEUES)]
    ratios = {f: round(results["trimmed"][f] / results["whole"][f], 3) for f in names}
    table = [[kind, *(round(results[kind][f], 1) for f in names)] for kind in results] + [["ratio", *ratios.values()]]
    print_table(["messages", *names], table, {"rows": args.n, "added": args.add, **results, "ratio": ratios})


if __name__ == "__main__":
    main()
