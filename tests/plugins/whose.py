"""A test plugin (loaded through RAGSCORE_PLUGINS): a metric that says whose worker scored the row.

``whose_worker`` sleeps ``metadata.sleep_ms``, then scores 1.0 with ``details.mark`` = the worker's
``RAGSCORE_TEST_MARK``: two embedded runs started with different marks show which process's workers served them.
"""

from __future__ import annotations

import os
import time

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("whose_worker", Queue.CPU)
def whose_worker(row: Row, params: NoParams) -> MetricResult:
    """Sleep ``metadata.sleep_ms`` milliseconds, then score 1.0 with the worker's mark."""
    time.sleep(float(row.metadata.get("sleep_ms", 0)) / 1000)
    return MetricResult(score=1.0, details={"mark": os.environ.get("RAGSCORE_TEST_MARK", "")})
