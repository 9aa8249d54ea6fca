"""A test plugin (loaded through RAGSCORE_PLUGINS): a cpu metric that hangs on demand.

``hang_on_flag`` sleeps ``metadata.hang`` seconds on rows that set it (a metric stuck on one input, as a
catastrophic regex would be), and scores 1.0 otherwise.
"""

from __future__ import annotations

import time

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("hang_on_flag", Queue.CPU)
def hang_on_flag(row: Row, params: NoParams) -> MetricResult:
    """Sleep ``metadata.hang`` seconds on rows that set it."""
    time.sleep(float(row.metadata.get("hang", 0)))
    return MetricResult(score=1.0)
