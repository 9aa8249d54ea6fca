"""A test plugin (loaded through RAGSCORE_PLUGINS) whose import fails half-way: it registers a metric, then
imports a module this host lacks, as a plug-in does on a worker where its dependency is not installed."""

from __future__ import annotations

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("half_broken", Queue.CPU)
def half_broken(row: Row, params: NoParams) -> MetricResult:
    """Never reached: the module fails to import."""
    return MetricResult(score=1.0)


import ragscore_test_dependency_not_installed  # noqa: E402, F401
