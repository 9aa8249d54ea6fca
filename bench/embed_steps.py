"""One ``encode`` call vs :meth:`Encoder.encode_stepped` (the embed worker's encoding, in steps it can say progress
between) on the same texts, the same model, in one process.

    python -m bench.embed_steps [--n 2048] [--rounds 4] [--batch-size 64] [--device cpu]

Texts: bench.embed's distinct texts (questions, answers, references, answer sentences, contexts cut as the worker
cuts them), the first ``n`` shuffled (a mix of lengths, as a production slice of up to 2,048 texts holds). Each
round times one call (A), then the steps (B) twice, then one call again (A B B A), so a steady drift of the shared
machine's speed falls on both alike; a round's ratio is the steps' texts/s ÷ one call's (>= 0.97: within noise;
the median is reported). The stepped vectors are checked against one call's (allclose) before any timing, which
warms both up. ``other_cores``: CPU cores used meanwhile by processes that are not this one (bench.embed's
:class:`OtherLoad`).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable

import numpy as np

from ragscore_workers.embedding import encode_step, get_encoder
from ragscore_workers.schemas import EmbeddingConfig

from ._common import print_table
from .embed import OtherLoad, distinct_texts, embed_rows


def texts_of(n: int, seed: int) -> list[str]:
    """``n`` distinct texts of bench.embed's rows, shuffled (deterministic for a seed)."""
    texts = distinct_texts(embed_rows(n // 5 + 1, seed))[:n]
    random.Random(seed).shuffle(texts)
    return texts


def timed_s(encode: Callable[[], object]) -> float:
    """Seconds one call of ``encode`` takes."""
    started = time.perf_counter()
    encode()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    encoder = get_encoder(EmbeddingConfig(device=args.device, batch_size=args.batch_size))
    encoder.loaded()
    texts = texts_of(args.n, args.seed)

    def one_call() -> np.ndarray:
        return encoder.encode(texts, args.batch_size)

    def stepped() -> np.ndarray:
        return encoder.encode_stepped(texts, args.batch_size, lambda _done: None)

    same = bool(np.allclose(one_call(), stepped(), atol=1e-5))  # also the warm-up of both
    rows, ratios = [], []
    for round_ in range(1, args.rounds + 1):
        with OtherLoad() as load:
            a1, b1, b2, a2 = timed_s(one_call), timed_s(stepped), timed_s(stepped), timed_s(one_call)
        ratio = (a1 + a2) / (b1 + b2)
        ratios.append(ratio)
        cores = "-" if load.cores is None else f"{load.cores:.2f}"
        rows.append([round_, f"{a1:.2f}/{a2:.2f}", f"{b1:.2f}/{b2:.2f}", f"{ratio:.3f}", cores])
    result = {
        "n": len(texts), "batch_size": args.batch_size, "step": encode_step(args.batch_size), "allclose": same,
        "ratios": [round(r, 3) for r in ratios], "median_ratio": round(statistics.median(ratios), 3),
        "loadavg": os.getloadavg(),
    }  # fmt: skip
    print_table(["round", "one call s (A/A)", "stepped s (B/B)", "ratio", "other_cores"], rows, result)


if __name__ == "__main__":
    main()
