"""A test plugin: a derived metric whose details hold a numpy number (JSON cannot hold it), as an ML team's
plug-in returning ``np.int64`` or a cosine similarity would."""

from __future__ import annotations

from typing import Any

import numpy as np

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue


@register("numpy_details_derived", Queue.DERIVED, kind="derived", inputs=("exact_match",))
def numpy_details_derived(outputs: dict[str, Any], params: NoParams) -> MetricResult:
    """1.0, with a numpy integer in its details."""
    return MetricResult(score=1.0, details={"count": np.int64(3)})
