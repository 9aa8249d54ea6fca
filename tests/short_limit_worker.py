"""The workers' Celery app (``celery -A tests.short_limit_worker worker``) with a queue's soft time limit shortened to
``$RAGSCORE_TEST_{QUEUE}_SOFT_S`` seconds (``RAGSCORE_TEST_JUDGE_SOFT_S``, ``RAGSCORE_TEST_TARGET_SOFT_S``; its hard
limit a second more): a task reads it as it starts, so a test sees a chunk outlast it in seconds, not 13 minutes. Only
the worker a test starts (:func:`.support.short_limit_worker`) may load it: imported in the tests' process it
would shorten the limit for every test after, so it refuses to load without one."""

from __future__ import annotations

import os

from ragscore_workers.app import app
from ragscore_workers.limits import QUEUE_LIMITS

from .support import soft_s_env

__all__ = ["app"]

_shortened = {queue: int(soft) for queue in QUEUE_LIMITS if (soft := os.environ.get(soft_s_env(queue)))}
if not _shortened:
    raise RuntimeError(f"{__name__} is the app of a test's worker: set {soft_s_env('QUEUE')} to load it")
QUEUE_LIMITS.update({queue: (soft, soft + 1) for queue, soft in _shortened.items()})
