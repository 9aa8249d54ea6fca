"""The texts a second the embed workers measured on finished runs, kept under ``RAGSCORE_HOME`` for the dry run.

Each run that encoded texts writes a line to ``RAGSCORE_HOME/encode_rates.jsonl``: its run id, its embedding model,
the device its suite asked for, whether it ran embedded or on a cluster, and its ``encoded`` / ``encode_ms`` counters
(the time inside the model's encode calls, as ``summary.embedding`` says). A run keeps one line: a resume (whose
summary counts the whole run) replaces its earlier one. The file keeps the last :data:`KEPT_RUNS` lines, rewritten
whole under a lock (``encode_rates.jsonl.lock``) so that runs finishing at once lose none. The dry run of a suite
with the same model, device and mode reads the last :data:`RECENT_RUNS` of them: their texts over their encode time
is the rate it estimates the encoding at (:func:`measured_rate`), in place of the assumed one. Nothing in it is
secret; a line it cannot read (torn, not a measure) is skipped, and a file it cannot write costs the run nothing but
a warning.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragscore_workers.schemas import EmbeddingConfig

__all__ = ["KEPT_RUNS", "RATES_FILE", "RECENT_RUNS", "MeasuredRate", "measured_rate", "record_rate"]

log = logging.getLogger(__name__)

#: The file under ``RAGSCORE_HOME`` the runs' measures are appended to.
RATES_FILE = "encode_rates.jsonl"
#: How many of the latest runs like it (model, device, mode) the dry run's rate is of.
RECENT_RUNS = 5
#: How many runs' lines the file keeps (the latest): it does not grow with every run.
KEPT_RUNS = 50


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


def record_rate(home: Path, run_id: str, config: EmbeddingConfig, mode: str, embedding: dict[str, Any]) -> None:
    """Record run ``run_id``'s measure (``summary.embedding``'s ``encoded`` and ``encode_ms``) for runs of ``config`` in
    ``mode`` (``embedded`` or ``cluster``), in place of its earlier one; nothing where it encoded nothing."""
    encoded, encode_ms = int(embedding.get("encoded") or 0), int(embedding.get("encode_ms") or 0)
    if encoded <= 0 or encode_ms <= 0:
        return
    line = {"run": run_id, **_kind(config, mode), "encoded": encoded, "encode_ms": encode_ms, "at": round(time.time())}
    path = home / RATES_FILE
    try:
        home.mkdir(parents=True, exist_ok=True)
        # runs finishing at once take turns (each rewrites what the others wrote), and write a whole new file in its
        # place: a dry run reading it meanwhile, or a disk filling up, never sees it empty or cut short
        with open(path.with_name(f"{RATES_FILE}.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except FileNotFoundError:
                text = ""
            kept = _latest([*_parsed(text), line])[-KEPT_RUNS:]
            written = path.with_name(f"{RATES_FILE}.new")
            written.write_text("".join(json.dumps(m) + "\n" for m in kept), encoding="utf-8")
            os.replace(written, path)
    except OSError as exc:
        log.warning("could not record the run's encode rate in %s: %s", path, exc)


def measured_rate(home: Path, config: EmbeddingConfig, mode: str) -> MeasuredRate | None:
    """The rate the last :data:`RECENT_RUNS` runs of ``config`` in ``mode`` measured (None: no such run)."""
    kind = _kind(config, mode)
    try:
        text = (home / RATES_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    like = [m for m in _latest(_parsed(text)) if all(m.get(k) == v for k, v in kind.items())][-RECENT_RUNS:]
    if not like:
        return None
    return MeasuredRate(len(like), sum(m["encoded"] for m in like), sum(m["encode_ms"] for m in like) / 1000)


def _parsed(text: str) -> list[dict[str, Any]]:
    """The measures of the file's lines, in order; a line that is not one (torn by a full disk or a crash) left out."""
    out = []
    for line in text.splitlines():
        try:
            measure = json.loads(line)
        except ValueError:
            continue
        if isinstance(measure, dict) and _positive(measure, "encoded") and _positive(measure, "encode_ms"):
            out.append(measure)
    return out


def _latest(measures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``measures`` with only the last of each run's (where it names its run), in the order of those kept."""
    last = {m["run"]: i for i, m in enumerate(measures) if isinstance(m.get("run"), str)}
    return [m for i, m in enumerate(measures) if not isinstance(m.get("run"), str) or last[m["run"]] == i]


def _positive(measure: dict[str, Any], name: str) -> bool:
    value = measure.get(name)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
