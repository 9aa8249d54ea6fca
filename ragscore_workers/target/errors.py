"""Errors of the target stage, a branch of the one tree rooted at :class:`ragscore_workers.errors.RagscoreError`.

RagscoreError
└── TargetError           asking the system under test failed (carries ``system``, ``status``, ``headers``)
    ├── TargetStopped     the run stopped asking this target: it was cancelled, or its circuit breaker is open
    │   └── TargetTimeUp  the target task reached its soft time limit: a question not answered by then stops
    └── TargetTooSlow     the question ran out of its ``max_seconds_per_question``, or a wait at the shared rate
                          limit would take it past that (not retried)

Messages never carry the target's token (:func:`ragscore_workers.providers.errors.redact`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import RagscoreError

__all__ = ["TIME_LIMIT_ERROR", "TargetError", "TargetStopped", "TargetTimeUp", "TargetTooSlow"]

#: The error stored for a question its target task's time limit stopped (asked again by a resume).
TIME_LIMIT_ERROR = "the target task ran over its time limit"


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
    """The run stopped asking this target (it was cancelled, or its circuit breaker is open), or the task did
    (:class:`TargetTimeUp`): no more calls are made, and no failure is counted."""


class TargetTimeUp(TargetStopped):
    """The target task reached its soft time limit: the question is not asked (again), and records
    :data:`TIME_LIMIT_ERROR` (never counted by the breaker: the target did not fail)."""

    def __init__(self, system: str) -> None:
        super().__init__(TIME_LIMIT_ERROR, system=system)


class TargetTooSlow(TargetError):
    """The question was not answered within the target's ``max_seconds_per_question``, or the shared rate limit would
    hold it past that: its tries and waits stop (the one bound of a question's time: the limiter's is the same)."""
