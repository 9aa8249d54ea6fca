"""``--debug-on-fail``: after an embedded run, re-run the first failing evaluation point under pdb.

The first item (input order) whose ``checks`` result has a failed cpu point is looked up in the dataset;
its point is parsed again, the extraction steps and normalizers are applied to the answer, and the
point's validator is called in this (foreground) process under :mod:`pdb`, stopped on its first line with
``inp`` (``inp.text``: what the validator sees, ``inp.row``: the whole row) and ``params`` at hand. A
point whose validator runs on another queue (embedding, code_test, meta_eval) is not re-run here. Needs a
terminal: ``ConfigError`` otherwise, so CI jobs never hang on a prompt.
"""

from __future__ import annotations

import json
import pdb
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics import load_all
from ragscore_workers.metrics._validators import PointInput
from ragscore_workers.metrics.checks import parse_points
from ragscore_workers.schemas import Queue, Row

from .datasets import iter_rows
from .terminal import shown

__all__ = ["debug_on_fail", "first_failure"]


def first_failure(items: Iterable[Mapping[str, Any]]) -> tuple[str, str | None, dict[str, Any]] | None:
    """``(id, system, point result)`` of the first failed point of the first item that has one."""
    for item in items:
        checks = (item.get("metrics") or {}).get("checks") or {}
        for point in (checks.get("details") or {}).get("points") or []:
            if point.get("status") == "failed":
                return item["id"], item.get("system"), point
    return None


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        yield from (json.loads(line) for line in fh)


def debug_on_fail(
    out_dir: Path,
    dataset: Path,
    *,
    fmt: str | None = None,
    fmt_options: dict[str, Any] | None = None,
    suite_points: list[dict[str, Any]] | None = None,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
) -> Any:
    """Re-run the run's first failing point under pdb; returns the validator's Outcome (None: nothing failed)."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    if not stdin.isatty():
        raise ConfigError("--debug-on-fail needs a terminal (stdin is not a TTY)")
    found = first_failure(_jsonl(out_dir / "items.jsonl"))
    if found is None:
        stdout.write("debug-on-fail: no evaluation point failed\n")
        return None
    item_id, system, result = found
    rows = (r for _, r in iter_rows(dataset, fmt, fmt_options) if isinstance(r, Row))
    row = next((r for r in rows if (r.id, r.system) == (item_id, system)), None)
    if row is None or row.answer is None:
        raise ConfigError(f"debug-on-fail: item {item_id!r} ({system}) is not in {dataset} any more")
    load_all()
    raw = row.checks if row.checks is not None else suite_points
    point = next(p for p in parse_points(raw or []) if p.id == result["id"])
    if point.validator is None or point.validator.queue is not Queue.CPU:
        stdout.write(f"debug-on-fail: point {point.id!r} runs on the {point.queue.value} queue; not re-run here\n")
        return None
    text = row.answer
    for step in point.point.extract:
        text = step.apply(text)
    inp = PointInput(point.point.normalize(text), row, point.point.normalize)
    stdout.write(
        shown(
            f"debug-on-fail: item {row.key}, point {point.id!r} ({point.point.type}: {point.point.text})\n"
            f"  failed with: {result.get('note')}\n"
            f"  stopped in the validator: `p inp.text`, `p params`, `n` to step, `c` to finish\n"
        )
    )
    stdout.flush()
    return pdb.Pdb(stdin=stdin, stdout=stdout).runcall(point.validator.fn, inp, point.params)
