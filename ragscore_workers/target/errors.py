"""Errors of the target stage, a branch of the one tree rooted at :class:`ragscore_workers.errors.RagscoreError`.

RagscoreError
└── TargetError           asking the system under test failed (carries ``system``, ``status``, ``headers``)
    ├── TargetStopped     the run stopped asking this target: its circuit breaker is open
    └── TargetTooSlow     the question ran out of its ``max_seconds_per_question``, or a wait at the shared rate
                          limit would take it past that (not retried)

Messages never carry the target's token (:func:`ragscore_workers.providers.errors.redact`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import RagscoreError

__all__ = ["TargetError", "TargetStopped", "TargetTooSlow"]


class TargetError(RagscoreError):
    """The target answered with an error, could not be reached (``status`` None), or its reply did not fit."""

    def __init__(
        self, message: str, *, system: str = "", status: int | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        self.system = system
        self.status = status
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        super().__init__(message[:500])


class TargetStopped(TargetError):
    """The run's circuit breaker for this target is open: no more calls are made."""


class TargetTooSlow(TargetError):
    """The question was not answered within the target's ``max_seconds_per_question``, or the shared rate limit would
    hold it past that: its tries and waits stop (the one bound of a question's time: the limiter's is the same)."""
