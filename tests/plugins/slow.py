"""A test plugin (loaded through RAGSCORE_PLUGINS): a metric that takes ``metadata.sleep_ms`` per row.

``slow_exact`` sleeps, then scores 1.0: runs that must last a known time (longer than a short
RAGSCORE_RUN_TTL_S, say) without a provider or a model.
"""

from __future__ import annotations

import time

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("slow_exact", Queue.CPU)
def slow_exact(row: Row, params: NoParams) -> MetricResult:
    """Sleep ``metadata.sleep_ms`` milliseconds, then score 1.0."""
    time.sleep(float(row.metadata.get("sleep_ms", 0)) / 1000)
    return MetricResult(score=1.0)
