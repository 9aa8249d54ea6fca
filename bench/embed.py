"""Embedding metrics through Redis + one embed worker vs raw ``SentenceTransformer.encode`` on the same texts.

    python -m bench.embed [--n 5000] [--device auto] [--batch-size 64] [--chunk 64]

Data: ``n`` questions, each with a question (~12 words), a 3-sentence answer, a reference and 5 contexts
of ~100 words, all distinct. Texts = every distinct text the five embedding metrics embed (question,
answer, reference, contexts, answer sentences).
Baseline: the packaged all-MiniLM-L6-v2 loaded in this process, one ``encode`` call over those texts,
measured before and after the pipeline runs; the ratio uses their mean (on a shared machine the spread
between the two says how much to trust it).
Pipeline: a private redis-server + one embed worker process (the default pool: prefork, one child), the
model loaded by a warm-up run first; timed from submit to the written summary (validation, publishing,
scoring the five metrics, aggregation). Ratio = pipeline texts/s ÷ raw texts/s (goal >= 0.90).
Warm: a fresh worker (empty process cache) scores the same rows again; vectors come from the Redis cache (its warm-up
run loads the model: bench.embed_cached times a fresh worker that needs not).

Where the pipeline's time goes: ``worker_encode_texts_s`` is the worker's own texts/s inside the model's
encode calls (the run's ``encode_ms`` counter), ``outside_encode_s`` the rest of the run (Redis, Celery,
hashing, scoring, aggregation). Other engineers share the machine, so every phase also reports
``other_cores``: CPU cores used meanwhile by processes that are not this benchmark's (Linux /proc/stat);
``quiet`` is false when that exceeds ``QUIET_MAX_OTHER_CORES`` in a phase the ratio uses. Quiet is
necessary, not sufficient: on the shared 2-core VM the encode speed itself drifts by about +-10% over
minutes with nothing else visible, which is why raw is measured before and after.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.embedded_redis import EmbeddedRedis
from orchestrator.runner import connect, submit, wait
from orchestrator.suite import load_suite
from orchestrator.workers import LocalWorkers
from ragscore_workers.embedding import get_encoder, pick_device, resolve_model
from ragscore_workers.metrics.embedding_metrics import texts_needed
from ragscore_workers.schemas import EmbeddingConfig, Row
from ragscore_workers.store import RunStore

from ._common import print_table, write_rows

METRICS = ["context_relevance", "context_sufficiency", "answer_relevance", "answer_correctness", "answer_hallucination"]
_WORDS = (
    "the of and to in is was for on that with as by at from his her it an were are which this be or has had "
    "not but first one their its new after who they two she been other when there all during into school time "
    "may years more most only over city some world would where later up such used many can state about national "
    "out known university united then made between team film year three american people high part series being "
    "river population church album government season village game home war became family since area river "
    "company music group north history south west east under life band early century several number released "
    "four well public both name second while system through work county led record also five court member "
    "energy water light market data model science report study policy health research history language"
).split()


def _sentence(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    return " ".join(words).capitalize()


def embed_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` distinct questions with answer, reference and 5 contexts of ~100 words (deterministic)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        contexts = [". ".join(_sentence(rng, 20) for _ in range(5)) + f". Record {seed}-{i}-{k}." for k in range(5)]
        answer = ". ".join(_sentence(rng, 10) for _ in range(3)) + "."
        rows.append(
            {
                "id": f"q{i}",
                "question": _sentence(rng, 11) + f" {i}?",
                "answer": answer,
                "reference": _sentence(rng, 14) + ".",
                "contexts": contexts,
            }
        )
    return rows


def distinct_texts(rows: list[dict[str, Any]]) -> list[str]:
    """The distinct texts the five metrics embed for ``rows``."""
    encoder = get_encoder(EmbeddingConfig(device="cpu"))  # its tokenizer cuts long contexts, as the worker's does
    return list(dict.fromkeys(texts_needed([Row.model_validate(r) for r in rows], METRICS, encoder)))


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (all its threads) so far; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (Linux /proc)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(c) for c in children.read_text().split()]
            except OSError:
                pass
    return found


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (every process, steal included), from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


class OtherLoad:
    """CPU cores used, while the block runs, by processes other than this one, its descendants and ``extra``."""

    def __init__(self, extra: Callable[[], list[int]] = list) -> None:
        self.extra = extra
        self.cores: float | None = None
        #: CPU seconds this benchmark's own processes used meanwhile.
        self.own_s: float | None = None

    def _own(self) -> dict[int, float]:
        return {pid: _cpu_s(pid) for pid in {*_tree(os.getpid()), *self.extra()}}

    def __enter__(self) -> OtherLoad:
        self.available = Path("/proc/stat").is_file()
        if self.available:
            self.own0, self.busy0 = self._own(), _machine_busy_s()
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.start
        if not self.available or wall <= 0:
            return
        busy, own1 = _machine_busy_s() - self.busy0, self._own()
        self.own_s = sum(max(0.0, cpu - self.own0.get(pid, 0.0)) for pid, cpu in own1.items())
        self.cores = round(max(0.0, busy - self.own_s) / wall, 2)


def raw_encode_s(texts: list[str], device: str, batch_size: int) -> tuple[float, OtherLoad]:
    """Seconds for one raw ``SentenceTransformer.encode`` over ``texts`` (model loaded beforehand), and the
    CPU used meanwhile by this process and by others."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(resolve_model("all-MiniLM-L6-v2").path, device=device)
    model.encode(texts[:batch_size], batch_size=batch_size, show_progress_bar=False)  # warm-up
    with OtherLoad() as load:
        start = time.perf_counter()
        model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
        elapsed = time.perf_counter() - start
    del model
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()  # leave the GPU to the worker
    return elapsed, load


def _fail_if_dead(workers: LocalWorkers) -> None:
    for queue, code in workers.dead().items():
        raise RuntimeError(f"the {queue} worker exited with code {code}:\n{workers.log_tail(queue)}")


#: Questions of the worker's warm-up run: 88 texts, at least one full batch of 64 like the raw warm-up.
WARMUP_ROWS = 8
#: A phase during which other processes used more than this many cores is flagged: the ratio is not valid.
QUIET_MAX_OTHER_CORES = 0.1
COUNTERS = ("encoded", "cache_hits", "memory_hits", "encode_calls", "encode_ms")


def timed_run(
    store: RunStore, path: Path, suite: dict[str, Any], workers: LocalWorkers, redis_pid: int = 0
) -> tuple[float, dict]:
    """Seconds from submit to the written summary, and the run's embed counters (with ``other_cores``)."""
    with OtherLoad(lambda: _tree(redis_pid) if redis_pid else []) as load:  # with its AOF-rewrite child
        start = time.perf_counter()
        sub = submit(path, load_suite(suite), store)
        wait(store, sub.run_id, check=lambda: _fail_if_dead(workers))
        elapsed = time.perf_counter() - start
    stats = store.r.hgetall(RunStore.key(sub.run_id, "embed"))  # its device:{worker} fields are words
    loads = sum(int(v) for k, v in stats.items() if k.startswith("loads:"))  # the model loads its workers made
    counters = {k: int(stats.get(k, 0)) for k in COUNTERS}
    return elapsed, counters | {"loads": loads, "other_cores": load.cores, "own_cpu_s": load.own_s}


def pipeline(
    url: str, tmp: Path, path: Path, suite: dict[str, Any], warm_seed: int, redis_pid: int
) -> tuple[float, dict]:
    """Start one embed worker, load its model with a small warm-up run, then time the real run."""
    store = connect(url)
    workers = LocalWorkers(url, ["embed"], tmp / "logs")
    try:
        workers.start()
        warm_path = write_rows(tmp / f"warm-{warm_seed}.jsonl", embed_rows(WARMUP_ROWS, seed=warm_seed))
        timed_run(store, warm_path, suite, workers)
        return timed_run(store, path, suite, workers, redis_pid)
    finally:
        workers.stop()


def _redis_pid(home: Path) -> int:
    try:
        return int((home / "redis" / "redis.pid").read_text().strip())
    except (OSError, ValueError):
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="questions (default 5000)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=64, help="questions per embed task")
    args = parser.parse_args()
    device = pick_device(args.device)
    suite = {
        "name": "bench-embed",
        "metrics": METRICS,
        "embedding": {"device": args.device, "batch_size": args.batch_size, "cache": True},
        "chunk_size": {"embed": args.chunk},
    }
    rows = embed_rows(args.n, seed=args.n)
    texts = distinct_texts(rows)
    with tempfile.TemporaryDirectory(prefix="rsb-", dir="/tmp") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["RAGSCORE_HOME"] = str(tmp / "home")
        os.environ.pop("RAGSCORE_BROKER_URL", None)
        path = write_rows(tmp / "rows.jsonl", rows)
        raw_before, load_before = raw_encode_s(texts, device, args.batch_size)
        redis_server = EmbeddedRedis(tmp / "home")
        url = redis_server.acquire()
        try:
            redis_pid = _redis_pid(tmp / "home")
            cold_s, cold = pipeline(url, tmp, path, suite, -1, redis_pid)
            warm_s, warm = pipeline(url, tmp, path, suite, -2, redis_pid)  # a fresh worker: Redis cache only
        finally:
            redis_server.release()
        raw_after, load_after = raw_encode_s(texts, device, args.batch_size)
    raw_s = (raw_before + raw_after) / 2
    n_texts = len(texts)
    encode_s = cold["encode_ms"] / 1000
    other_before, other_after = load_before.cores, load_after.cores
    own_cpu = {"raw_before": load_before.own_s, "cold": cold["own_cpu_s"], "raw_after": load_after.own_s}
    result = {
        "benchmark": "embed",
        "n": args.n,
        "texts": n_texts,
        "device": device,
        "cpus": os.cpu_count(),
        "batch_size": args.batch_size,
        "chunk": args.chunk,
        "raw_texts_s": round(n_texts / raw_s, 1),
        "raw_texts_s_before_after": [round(n_texts / raw_before, 1), round(n_texts / raw_after, 1)],
        "pipeline_texts_s": round(n_texts / cold_s, 1),
        "warm_texts_s": round(n_texts / warm_s, 1),
        "ratio": round(raw_s / cold_s, 3),
        "warm_ratio": round(raw_s / warm_s, 3),
        "worker_encode_texts_s": round(cold["encoded"] / encode_s, 1) if encode_s else None,
        "outside_encode_s": round(cold_s - encode_s, 1) if encode_s else None,
        "other_cores": {
            "raw_before": other_before,
            "cold": cold["other_cores"],
            "warm": warm["other_cores"],
            "raw_after": other_after,
        },
        # CPU-ms per text of this benchmark's processes: equal per-text cost with fewer texts/s means the phase
        # got less CPU; a higher per-text cost means the same work cost more (contention below the VM).
        "own_cpu_ms_per_text": {k: None if v is None else round(1000 * v / n_texts, 2) for k, v in own_cpu.items()},
        "cold": cold,
        "warm": warm,
    }
    others = [result["other_cores"][phase] for phase in ("raw_before", "cold", "raw_after")]  # what ratio uses
    result["quiet"] = None not in others and max(others) <= QUIET_MAX_OTHER_CORES
    table: list[list[Any]] = []
    raws = (("raw encode, before", raw_before, other_before), ("raw encode, after", raw_after, other_after))
    for name, seconds, other in (*raws, ("raw mean", raw_s, None)):
        table.append([name, n_texts, seconds, n_texts / seconds, f"{raw_s / seconds:.3f}", n_texts, 0, other])
    for name, seconds, stats in (("pipeline, cold cache", cold_s, cold), ("pipeline, warm cache", warm_s, warm)):
        table.append([name, n_texts, seconds, n_texts / seconds, f"{raw_s / seconds:.3f}"])
        table[-1] += [stats["encoded"], stats["cache_hits"], stats["other_cores"]]
    if encode_s:
        table.append(["  worker encode calls", cold["encoded"], encode_s, cold["encoded"] / encode_s, "", "", "", ""])
    headers = ["run", "texts", "seconds", "texts/s", "ratio", "encoded", "cache hits", "other cores"]
    if not result["quiet"]:
        print(f"NOT QUIET: other processes used > {QUIET_MAX_OTHER_CORES} cores during raw or cold; ratio not valid")
    print_table(headers, [[("" if c is None else c) for c in row] for row in table], result)


if __name__ == "__main__":
    main()
