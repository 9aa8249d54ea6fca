"""A test plugin (loaded through RAGSCORE_PLUGINS) that registers a metric under a built-in's name."""

from __future__ import annotations

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("exact_match", Queue.CPU)
def my_exact_match(row: Row, params: NoParams) -> MetricResult:
    """Clashes with the built-in exact_match."""
    return MetricResult(score=1.0)
