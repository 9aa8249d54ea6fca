"""The workers' Celery app (``celery -A tests.target.short_limit_worker worker``) with the target queue's soft time
limit shortened to ``$RAGSCORE_TEST_TARGET_SOFT_S`` seconds (its hard limit a second more): a target task reads it as
it starts, so a test sees a chunk outlast it in seconds, not 13 minutes. Only the worker a test starts may load it:
imported in the tests' process it would shorten the limit for every test after, so it refuses to load without it."""

from __future__ import annotations

import os

from ragscore_workers.app import app
from ragscore_workers.limits import QUEUE_LIMITS
from ragscore_workers.schemas import Queue

__all__ = ["app"]

if not (_soft := os.environ.get("RAGSCORE_TEST_TARGET_SOFT_S")):
    raise RuntimeError(f"{__name__} is the app of a test's worker: set RAGSCORE_TEST_TARGET_SOFT_S to load it")
QUEUE_LIMITS[Queue.TARGET.value] = (int(_soft), int(_soft) + 1)
