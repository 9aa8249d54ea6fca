"""A test plugin (loaded through RAGSCORE_PLUGINS): a metric that raises on demand.

``fail_on_flag`` raises ``ValueError`` on rows whose ``metadata.fail`` is set (naming the row), as a metric
meeting input it cannot handle would, and scores 1.0 otherwise.
"""

from __future__ import annotations

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("fail_on_flag", Queue.CPU)
def fail_on_flag(row: Row, params: NoParams) -> MetricResult:
    """Raise on rows flagged ``metadata.fail``."""
    if row.metadata.get("fail"):
        raise ValueError(f"cannot score row {row.id}: {row.metadata['fail']}")
    return MetricResult(score=1.0)
