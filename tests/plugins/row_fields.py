"""A test plugin (loaded through RAGSCORE_PLUGINS): a metric that says which row fields its task message carried.

``row_fields`` declares no ``reads`` (as plug-ins written before it could): its messages must carry the whole row.
It scores 1.0 with ``details.fields``: the fields of the row as the worker received it (:meth:`Row.to_message`).
"""

from __future__ import annotations

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("row_fields", Queue.CPU)
def row_fields(row: Row, params: NoParams) -> MetricResult:
    """1.0, with the names of the fields the row came with."""
    return MetricResult(score=1.0, details={"fields": sorted(row.to_message())})
