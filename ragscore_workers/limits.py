"""Per-queue task time limits: what the Celery app sets on each task and what the settings check the visibility
timeout against (kept apart from :mod:`.app` so :mod:`.settings` can read them without importing Celery); and the
cores a process may use, which pools and the sandbox's CPU limit are sized by."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, as_completed
from concurrent.futures import TimeoutError as FuturesTimeoutError  # not the builtin TimeoutError before Python 3.11
from pathlib import Path
from typing import Any

from tenacity import RetryCallState
from tenacity.stop import stop_base

from .cgroups import cpu_limit
from .schemas import Queue

__all__ = [
    "CONTROL_QUEUE",
    "PRIORITY_SEP",
    "QUEUE_LIMITS",
    "SleepsPast",
    "TaskCalls",
    "ended_by",
    "left_s",
    "longest_hard_limit",
    "soft_deadline",
    "time_limit_error",
    "usable_cpus",
]

#: Queue of the bookkeeping tasks (shard completion, aggregation); every worker consumes it.
CONTROL_QUEUE = "control"
#: kombu's priority lists: a queue with message priorities has one Redis list per priority, named the queue, this,
#: then the priority (``cpu\x06\x163``, ...; its priority 0 is the queue's own list).
PRIORITY_SEP = "\x06\x16"

#: (soft, hard) time limit in seconds of one task per queue. A chunk that hits the soft limit records a
#: time-limit error for its items (``resume`` retries them) instead of failing the chord. Every hard
#: limit must stay below the visibility timeout (``RAGSCORE_VISIBILITY_TIMEOUT_S``, 900 s by default; the
#: settings refuse one that is not above :func:`longest_hard_limit`), so a slow task is never re-delivered while
#: its first delivery still works; chunk sizes keep tasks far shorter than these limits.
QUEUE_LIMITS: dict[str, tuple[int, int]] = {
    Queue.CPU.value: (300, 330),
    Queue.EMBED.value: (780, 840),
    Queue.JUDGE.value: (780, 840),
    Queue.CODE.value: (780, 840),
    Queue.TARGET.value: (780, 840),
    CONTROL_QUEUE: (780, 840),
}


def longest_hard_limit() -> int:
    """Seconds of the longest hard time limit of any task: the visibility timeout must be above it."""
    return max(hard for _, hard in QUEUE_LIMITS.values())


def soft_deadline(queue: str) -> float:
    """When (``time.monotonic()``) a task of ``queue`` that starts now reaches its soft time limit (read now, from
    :data:`QUEUE_LIMITS`): what a task bounds its own work by where no pool raises the limit (a threads pool enforces
    no Celery time limit, so nothing else would keep its message from the broker's re-delivery)."""
    return time.monotonic() + QUEUE_LIMITS[queue][0]


def left_s(deadline: float | None) -> float:
    """Seconds left to ``deadline`` (``time.monotonic()``; :func:`soft_deadline`), negative once it passed; infinite
    without one."""
    return float("inf") if deadline is None else deadline - time.monotonic()


def ended_by(deadline: float | None, futures: Iterable[Future[Any]]) -> Iterator[Future[Any]]:
    """``futures`` as they end, until ``deadline`` (``time.monotonic()``; None: all of them) passes: then it stops,
    the rest are cut."""
    try:
        yield from as_completed(futures, timeout=None if deadline is None else max(0.0, left_s(deadline)))
    except FuturesTimeoutError:
        return


class TaskCalls:
    """The calls in flight of the tasks of one queue one worker thread runs, one task after another: those of a task its
    time limit cut (:func:`ended_by`) run on, up to their HTTP timeout, while the thread's next task starts its own. A
    call takes a place (:meth:`enter`) before it starts and gives it back (:meth:`leave`) when it truly ends, so that
    the thread's calls stay within its task's ``concurrency``. One per thread and queue: :meth:`of_this_thread`."""

    _local = threading.local()

    def __init__(self) -> None:
        self._in_flight = 0
        self._freed = threading.Condition()

    @classmethod
    def of_this_thread(cls, queue: str) -> TaskCalls:
        """The calls of the ``queue`` tasks (judge, target) the calling (worker) thread runs: a worker consuming both
        bounds each by its own tasks' ``concurrency``, a judge task never waiting on a target's calls."""
        of_queue: dict[str, TaskCalls] = cls._local.__dict__.setdefault("of_queue", {})
        if queue not in of_queue:
            of_queue[queue] = cls()
        return of_queue[queue]

    def enter(self, most: int, deadline: float | None) -> bool:
        """Take a place once fewer than ``most`` calls are in flight; False where ``deadline`` passed first."""
        timeout = None if deadline is None else max(0.0, left_s(deadline))
        with self._freed:
            if not self._freed.wait_for(lambda: self._in_flight < most, timeout=timeout):
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        """A call ended: its place is free."""
        with self._freed:
            self._in_flight -= 1
            self._freed.notify_all()  # its waiters may want fewer in flight (a task of lower concurrency): each looks


class SleepsPast(stop_base):
    """Tenacity's stop of a retry whose backoff sleep would end at or past ``deadline`` (``time.monotonic()``; None:
    never): no try could start in time, so it stops at once (its thread freed, not held asleep to the deadline) and
    ``refused`` keeps the sleep it refused, for its caller to say why it stopped (a time limit, not its last error).
    The one way a judge call and a target question stop their retries at their time."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        #: The backoff (seconds) it stopped a retry rather than sleep; None: it stopped none.
        self.refused: float | None = None

    def __call__(self, retry_state: RetryCallState) -> bool:
        if retry_state.upcoming_sleep < left_s(self.deadline):
            return False
        self.refused = retry_state.upcoming_sleep
        return True


def time_limit_error(queue: str) -> str:
    """The error of an item a scoring chunk of ``queue`` did not score by its soft time limit (a prefork pool's
    SoftTimeLimitExceeded, or the deadline a judge chunk keeps in any pool); a resume scores it again."""
    return (f"time limit: the chunk ran over {QUEUE_LIMITS[queue][0]} s (resume to retry; send fewer questions per "
            f"task if it happens again: --chunk-size {queue}=N)")  # fmt: skip


def usable_cpus(root: Path = Path("/")) -> int:
    """The cores this process may use: those it may run on (its affinity: ``taskset``, a cpuset, systemd's
    ``AllowedCPUs``; the host's count where there is no affinity to read, macOS), fewer under a cgroup CPU quota
    (:func:`.cgroups.cpu_limit`: a Kubernetes ``limits.cpu``, ``docker run --cpus``, systemd's ``CPUQuota``). The
    host's count oversubscribed a worker confined to a few cores of a shared host, and a pod of 2 CPUs on a 64-core
    node ran 64 processes, throttled. ``root``: where the cgroup files are read (a test's directory)."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()) or 1
    return max(1, min(cores, cpu_limit(root) or cores))
