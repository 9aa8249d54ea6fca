"""The workers' Celery app (``celery -A tests.target.short_limit_worker worker``) with the target queue's soft time
limit shortened to :data:`SOFT_S` (its hard limit a second more): a target task reads it as it starts, so a test sees
a chunk outlast it in seconds, not 13 minutes."""

from __future__ import annotations

from ragscore_workers.app import app
from ragscore_workers.limits import QUEUE_LIMITS
from ragscore_workers.schemas import Queue

__all__ = ["SOFT_S", "app"]

#: Seconds of the target queue's soft time limit in this worker.
SOFT_S = 3

QUEUE_LIMITS[Queue.TARGET.value] = (SOFT_S, SOFT_S + 1)
