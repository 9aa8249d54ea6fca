"""The texts a second the embed workers measured on finished runs, kept under ``RAGSCORE_HOME`` for the dry run.

Each run that encoded texts appends a line to ``RAGSCORE_HOME/encode_rates.jsonl``: its embedding model, the device
its suite asked for, whether it ran embedded or on a cluster, and its ``encoded`` / ``encode_ms`` counters (the time
inside the model's encode calls, as ``summary.embedding`` says). The dry run of a suite with the same model, device
and mode reads the last :data:`RECENT_RUNS` of them: their texts over their encode time is the rate it estimates the
encoding at (:func:`measured_rate`), in place of the assumed one. Nothing in it is secret; a line it cannot read is
skipped, and a file it cannot write costs the run nothing but a warning.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragscore_workers.schemas import EmbeddingConfig

__all__ = ["RATES_FILE", "RECENT_RUNS", "MeasuredRate", "measured_rate", "record_rate"]

log = logging.getLogger(__name__)

#: The file under ``RAGSCORE_HOME`` the runs' measures are appended to.
RATES_FILE = "encode_rates.jsonl"
#: How many of the latest runs like it (model, device, mode) the dry run's rate is of.
RECENT_RUNS = 5
#: Bytes read from the end of the file: the last few hundred runs, however long it grew.
_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class MeasuredRate:
    """What the latest runs like this one measured: ``texts`` encoded in ``encode_s`` over ``runs`` runs."""

    runs: int
    texts: int
    encode_s: float

    @property
    def texts_per_s(self) -> float:
        return self.texts / self.encode_s


def _kind(config: EmbeddingConfig, mode: str) -> dict[str, str]:
    """What a measure is of: the model, the device the suite asked for (``auto`` as such), embedded or cluster."""
    return {"model": config.model, "device": config.device, "mode": mode}


def record_rate(home: Path, config: EmbeddingConfig, mode: str, embedding: dict[str, Any]) -> None:
    """Append a finished run's measure (``summary.embedding``'s ``encoded`` and ``encode_ms``) for runs of
    ``config`` in ``mode`` (``embedded`` or ``cluster``); nothing where it encoded nothing."""
    encoded, encode_ms = int(embedding.get("encoded") or 0), int(embedding.get("encode_ms") or 0)
    if encoded <= 0 or encode_ms <= 0:
        return
    line = _kind(config, mode) | {"encoded": encoded, "encode_ms": encode_ms, "at": round(time.time())}
    try:
        home.mkdir(parents=True, exist_ok=True)
        with open(home / RATES_FILE, "a", encoding="utf-8") as out:  # one short write: lines of two runs stay whole
            out.write(json.dumps(line) + "\n")
    except OSError as exc:
        log.warning("could not record the run's encode rate in %s: %s", home / RATES_FILE, exc)


def measured_rate(home: Path, config: EmbeddingConfig, mode: str) -> MeasuredRate | None:
    """The rate the last :data:`RECENT_RUNS` runs of ``config`` in ``mode`` measured (None: no such run)."""
    kind = _kind(config, mode)
    like = [m for m in _measures(home / RATES_FILE) if all(m.get(k) == v for k, v in kind.items())][-RECENT_RUNS:]
    if not like:
        return None
    return MeasuredRate(len(like), sum(m["encoded"] for m in like), sum(m["encode_ms"] for m in like) / 1000)


def _measures(path: Path) -> list[dict[str, Any]]:
    """The readable lines at the end of ``path`` (none where it is missing or unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(f.seek(0, 2) - _TAIL_BYTES, 0))
            tail = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    out = []
    for line in tail:
        try:
            measure = json.loads(line)
        except ValueError:  # a line cut by the tail's start, or by a full disk
            continue
        if isinstance(measure, dict) and _positive(measure, "encoded") and _positive(measure, "encode_ms"):
            out.append(measure)
    return out


def _positive(measure: dict[str, Any], name: str) -> bool:
    value = measure.get(name)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
