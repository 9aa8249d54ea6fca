"""The Python API: ``evaluate(dataset, suite)`` for notebooks and CI."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ragscore_workers.schemas import ItemResult, RunSummary, Suite

from .progress import ProgressView, make_progress
from .runner import run
from .suite import load_suite

__all__ = ["Evaluation", "evaluate"]


@dataclass(frozen=True)
class Evaluation:
    """The summary of a run and where its files are; the per-item results are read from ``items.jsonl`` when
    asked for (``items``), or streamed (``iter_items()``), so a large run costs no memory until then."""

    summary: RunSummary
    out_dir: Path

    def iter_items(self) -> Iterator[ItemResult]:
        """Every item's result in input order, one at a time (constant memory, for runs of millions)."""
        with (self.out_dir / "items.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                yield ItemResult.model_validate_json(line)

    @cached_property
    def items(self) -> list[ItemResult]:
        """Every item's result in input order, read on first use (about 10 KB an item: prefer ``iter_items()``
        for large runs)."""
        return list(self.iter_items())


def evaluate(
    dataset: str | Path | Iterable[dict[str, Any]],
    suite: str | Path | dict[str, Any] | Suite,
    broker: str | None = None,
    *,
    out: str | Path | None = None,
    fmt: str | None = None,
    fmt_options: dict[str, Any] | None = None,
    quiet: bool = True,
    progress: ProgressView | None = None,
) -> Evaluation:
    """Score a dataset (a file, or an iterable of row dicts) with a suite; embedded unless ``broker``.

    Reports are written to ``out`` (a temporary directory when omitted, kept so files can be read).
    """
    resolved = load_suite(suite)
    out_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="ragscore-"))
    if isinstance(dataset, (str, Path)):
        path = Path(dataset)
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "dataset.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for row in dataset:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fmt = "jsonl"
    summary = run(
        path, resolved, out_dir, broker=broker, fmt=fmt, fmt_options=fmt_options,
        progress=progress or make_progress(quiet),
    )  # fmt: skip
    return Evaluation(summary=summary, out_dir=out_dir)
