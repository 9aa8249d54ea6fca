"""A test plugin (loaded through RAGSCORE_PLUGINS): a metric that takes ``metadata.sleep_ms`` per row.

``slow_exact`` sleeps, then scores 1.0: runs that must last a known time (longer than a short
RAGSCORE_RUN_TTL_S, say) without a provider or a model. A row whose ``metadata.until_file`` names a path ends its
sleep early once that file exists: a test holds a chunk for as long as it needs, then lets it finish at once.
"""

from __future__ import annotations

import os
import time

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("slow_exact", Queue.CPU)
def slow_exact(row: Row, params: NoParams) -> MetricResult:
    """Sleep ``metadata.sleep_ms`` milliseconds (less once ``metadata.until_file`` exists), then score 1.0."""
    deadline = time.monotonic() + float(row.metadata.get("sleep_ms", 0)) / 1000
    released = row.metadata.get("until_file")
    while (left := deadline - time.monotonic()) > 0 and not (released and os.path.exists(released)):
        time.sleep(min(left, 0.1) if released else left)
    return MetricResult(score=1.0)
