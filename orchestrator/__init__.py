"""ragscore's orchestrator: load, plan, submit, follow and report evaluation runs.

Its public names are imported on first use: ``ragscore status`` (:mod:`.cli`) must not pay for the API's imports
(gates, metrics, providers, numpy, the Celery tasks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

if TYPE_CHECKING:
    from .api import Evaluation, cancel, evaluate, resume, shutdown

__all__ = ["Evaluation", "cancel", "evaluate", "resume", "shutdown"]

__getattr__, __dir__ = lazy_names(__name__, {".api": ("Evaluation", "cancel", "evaluate", "resume", "shutdown")})
