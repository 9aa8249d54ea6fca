"""One chunk's look-up of cached vectors in the Redis cache: a plain ``MGET`` (before 2026-12-05) against
:func:`ragscore_workers._embedding_cache.redis_get`, whose script renews the vectors it finds and the model's note.

    python -m bench.embed_lookup [--reps 200]

A fresh embedded Redis (the real redis-server, append-only file on, as ``ragscore`` runs it) holding 2,048 MiniLM-sized
vectors; each round times the look-ups of 64 and of 2,048 of them, alternating, so the machine's drift falls on all:
``MGET``; ``redis_get`` of vectors renewed less than a day ago (it checks their TTLs); ``redis_get`` of vectors renewed
over a day ago (it renews each). Ratio = median seconds of ``redis_get`` ÷ of ``MGET`` (all decode the vectors).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from orchestrator.embedded_redis import EmbeddedRedis
from ragscore_workers._embedding_cache import bytes_client, redis_get, redis_key, redis_put, text_hash
from ragscore_workers.embedding import REDIS_CACHE_TTL_S
from ragscore_workers.store import redis_client

from ._common import print_table

NAMESPACE, DIM = "bench-model|fp32", 384


def mget(client: object, digests: list[str]) -> dict[str, np.ndarray]:
    """The look-up as it was: one MGET, no TTL renewed."""
    values = bytes_client(client).mget([redis_key(NAMESPACE, d) for d in digests])
    return {d: np.frombuffer(v, dtype="<f4").astype(np.float32) for d, v in zip(digests, values, strict=True) if v}


def aged(client: object, digests: list[str]) -> None:
    """Set the vectors of ``digests`` to expire in 29 days, as a day after their last renewal."""
    pipe = bytes_client(client).pipeline(transaction=False)
    for digest in digests:
        pipe.expire(redis_key(NAMESPACE, digest), REDIS_CACHE_TTL_S - 86_400)
    pipe.execute()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="rounds of 64 keys (those of 2,048: a tenth)")
    args = parser.parse_args()
    digests = [text_hash(f"text {i}") for i in range(2048)]
    rng = np.random.default_rng(0)
    rows, result = [], {"benchmark": "embed_lookup", "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="rsb-", dir="/tmp") as tmp:
        server = EmbeddedRedis(Path(tmp) / "home")
        client = redis_client(server.acquire())
        try:
            redis_put(client, NAMESPACE, {d: rng.random(DIM, dtype=np.float32) for d in digests}, REDIS_CACHE_TTL_S)
            for n, reps in ((64, args.reps), (2048, max(args.reps // 10, 5))):
                times: dict[str, list[float]] = {"mget": [], "checked": [], "renewed": []}
                for _ in range(reps):
                    for name in times:
                        if name == "renewed":  # each key last renewed over a day ago: the script renews every one
                            aged(client, digests[:n])
                        started = time.perf_counter()
                        got = mget(client, digests[:n]) if name == "mget" else redis_get(
                            client, NAMESPACE, DIM, digests[:n], REDIS_CACHE_TTL_S)  # fmt: skip
                        times[name].append(time.perf_counter() - started)
                        assert len(got) == n
                before, checked, renewed = (statistics.median(times[k]) * 1e6 for k in times)
                rows.append([n, reps, before, checked, renewed, round(checked / before, 2), round(renewed / before, 2)])
                result[f"keys_{n}"] = {"mget_us": round(before), "checked_us": round(checked),
                                       "renewed_us": round(renewed)}  # fmt: skip
        finally:
            server.release()
    headers = ["keys", "rounds", "MGET, µs", "redis_get, µs", "renewing all, µs", "ratio", "ratio renewing"]
    print_table(headers, rows, result)


if __name__ == "__main__":
    main()
