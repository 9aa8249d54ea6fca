"""Run registered metrics over rows. Never raises for one bad item: it becomes that item's error result.

This is the whole of a worker's scoring logic; Celery tasks only decode, call :func:`score_rows` and
store. The in-process baseline of the benchmarks calls the same function.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel

from .metrics.registry import MetricDef, RunContext
from .providers.errors import exception_text, traceback_text
from .schemas import MetricResult, Row
from .store import RawItem

__all__ = ["SKIPPED_MARK", "cancel_skipped", "derive", "score_rows", "with_skipped", "without_skipped"]

log = logging.getLogger(__name__)

#: The detail that marks an output a cancel skipped (:func:`with_skipped`; ``true``): only that sets it, a metric's
#: own is dropped (:func:`_as_outputs`), so :func:`without_skipped` never takes a stored output for one.
SKIPPED_MARK = "cancel_skipped"

ItemScores = dict[str, MetricResult]


def _error_text(exc: BaseException) -> str:
    """An exception as an item's error: a plug-in's text quoting its key (a URL, a header) has it as ``***``."""
    return exception_text(exc)[:2000]


def _as_outputs(mdef: MetricDef, params: BaseModel, value: Any, ms: float) -> ItemScores:
    """Normalise a metric's return value to ``{output: MetricResult}`` with timing filled in."""
    names = mdef.outputs(params)
    if isinstance(value, MetricResult):
        value = {mdef.name: value}
    if not isinstance(value, dict) or not all(isinstance(v, MetricResult) for v in value.values()):
        raise TypeError(f"metric {mdef.name!r} returned {type(value).__name__}, not a MetricResult or a dict of them")
    missing = [n for n in names if n not in value]
    if missing:
        raise TypeError(f"metric {mdef.name!r} did not return outputs {missing}")
    ms = round(ms, 3)  # microseconds are plenty: 17 digits of float noise cost ~14 bytes an output in items.jsonl
    return {name: _unmarked(value[name]).model_copy(update={"ms": ms}) for name in names}


def _unmarked(result: MetricResult) -> MetricResult:
    """A metric's result without :data:`SKIPPED_MARK`, which only a cancel's skipped outputs hold."""
    if SKIPPED_MARK not in result.details:
        return result
    return result.model_copy(update={"details": {k: v for k, v in result.details.items() if k != SKIPPED_MARK}})


def _failed(mdef: MetricDef, params: BaseModel, error: str) -> ItemScores:
    return {name: MetricResult.failed(error) for name in mdef.outputs(params)}


def _score_per_row(mdef: MetricDef, params: BaseModel, rows: list[Row], into: list[ItemScores]) -> None:
    """Score each row, adding its outputs to ``into`` as soon as it is scored (what the time limit keeps)."""
    for row, acc in zip(rows, into, strict=True):
        start = time.perf_counter()
        try:
            value = mdef.fn(row, params)
            acc.update(_as_outputs(mdef, params, value, (time.perf_counter() - start) * 1000))
        except SoftTimeLimitExceeded:  # the task's time is up: its handler records it for the rest
            raise
        except Exception as exc:  # a metric never raises into Celery
            log.debug("metric %s failed on %s: %s", mdef.name, row.id, traceback_text(exc))
            acc.update(_failed(mdef, params, _error_text(exc)))


def _score_batch(mdef: MetricDef, params: BaseModel, rows: list[Row], ctx: RunContext) -> list[ItemScores]:
    start = time.perf_counter()
    try:
        values = mdef.fn(rows, params, ctx)
        if len(values) != len(rows):  # the metric's own bug, not one row's: scoring rows alone would repeat it
            error = f"TypeError: batch metric {mdef.name!r} returned {len(values)} results for {len(rows)} rows"
            return [_failed(mdef, params, error) for _ in rows]
        ms = (time.perf_counter() - start) * 1000 / max(len(rows), 1)
        return [_as_outputs(mdef, params, v, ms) for v in values]
    except SoftTimeLimitExceeded:
        raise
    except Exception as exc:
        if len(rows) == 1:
            raise
        log.warning("batch metric %s failed on a chunk of %d rows (%s); scoring them one by one",
                    mdef.name, len(rows), _error_text(exc))  # fmt: skip
    # One bad row must not sink its chunk: score the rows one by one to isolate it.
    out: list[ItemScores] = []
    for row in rows:
        try:
            out.extend(_score_batch(mdef, params, [row], ctx))
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            out.append(_failed(mdef, params, _error_text(exc)))
    return out


def score_rows(
    rows: list[Row], metrics: list[tuple[MetricDef, BaseModel]], ctx: RunContext, into: list[ItemScores] | None = None
) -> list[ItemScores]:
    """Score every row with every (non-derived) metric; one ``{output: result}`` dict per row. ``into`` (one dict per
    row) gets the outputs as they are scored: when the task's soft time limit raises, it holds what was finished
    (a per-row metric's rows scored so far, the metrics done before), which the task keeps."""
    results: list[ItemScores] = into if into is not None else [{} for _ in rows]
    for mdef, params in metrics:
        if mdef.kind == "derived":
            continue
        if mdef.kind != "batch":
            _score_per_row(mdef, params, rows, results)
            continue
        try:
            per_row = _score_batch(mdef, params, rows, replace(ctx, outputs=tuple(mdef.outputs(params))))
        except SoftTimeLimitExceeded:
            raise
        except Exception as exc:
            per_row = [_failed(mdef, params, _error_text(exc))]
        for acc, scores in zip(results, per_row, strict=True):
            acc.update(scores)
    return results


def derive(stored: dict[str, dict[str, Any]], derived: list[tuple[MetricDef, BaseModel]]) -> ItemScores:
    """Compute derived metrics of one item from its stored outputs (plain dicts), never raising."""
    out: ItemScores = {}
    for mdef, params in derived:
        inputs = {name: MetricResult.model_validate(stored[name]) for name in mdef.inputs if name in stored}
        start = time.perf_counter()
        try:
            out.update(_as_outputs(mdef, params, mdef.fn(inputs, params), (time.perf_counter() - start) * 1000))
        except Exception as exc:
            out.update(_failed(mdef, params, _error_text(exc)))
    return out


def cancel_skipped(outputs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each of ``outputs`` as a cancelled run holds it where a cancel skipped its chunk: stopped (a resume scores
    it). The aggregation names the suite's scoring outputs; a report, those of the run's summary (no metric
    needs to be importable to read a run)."""
    return dict.fromkeys(outputs, _skipped_result())


def _skipped_result() -> dict[str, Any]:
    """An output a cancel skipped, as a cancelled run's reports hold it (no worker wrote it to the store): stopped,
    marked :data:`SKIPPED_MARK`."""
    return MetricResult.stopped("run cancelled", **{SKIPPED_MARK: True}).model_dump()


def with_skipped(items: Iterable[RawItem], skipped: dict[str, dict[str, Any]]) -> Iterator[RawItem]:
    """The items with each output they lack taken from ``skipped`` (:func:`cancel_skipped`), in name order as the
    store reads an item's outputs: a cancelled run's summary, derived metrics and items.jsonl all see them."""
    for raw in items:
        if skipped.keys() <= raw.metrics.keys():
            yield raw
        else:
            yield RawItem(key=raw.key, meta=raw.meta, metrics=dict(sorted((skipped | raw.metrics).items())))


def without_skipped(items: Iterable[RawItem]) -> Iterator[RawItem]:
    """The items of a cancelled run's items.jsonl as its store held them: each output :func:`with_skipped` added
    (:data:`SKIPPED_MARK`) left out (no worker wrote it), so a resume that writes them back keeps the run's progress
    counters true (its ``done`` never counted them; stored stopped, their rewrites would not count them either)."""
    for raw in items:
        kept = {name: result for name, result in raw.metrics.items() if not _skipped(result)}
        yield raw if len(kept) == len(raw.metrics) else RawItem(key=raw.key, meta=raw.meta, metrics=kept)


def _skipped(result: dict[str, Any]) -> bool:
    """Whether a stored-form result is one :func:`with_skipped` added (marked :data:`SKIPPED_MARK`)."""
    details = result.get("details")
    return isinstance(details, dict) and details.get(SKIPPED_MARK) is True
