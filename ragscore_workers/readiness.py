"""A local worker tells the process that started it that it is ready, and later that it is drained, on a pipe that
process passed it.

:class:`orchestrator.workers.LocalWorkers` starts each worker with the write end of a pipe of its own, named by
:data:`READY_FD_ENV`; the worker's ``worker_ready`` handler writes :data:`READY` there (:func:`say_ready`). A worker
stopped before it wrote it holds no task and takes none: its starter kills it after a short wait instead of the warm
stop's. Once a warm shutdown stopped its consumer and its last task ended, the worker writes :data:`DRAINED` and
closes the pipe (:func:`say_drained`): it holds nothing, and what is left of its shutdown (its pool's join) is given a
short grace, not the wait for a running task. A pipe, not a file: nothing another process (a cleaner of ``/tmp``, a
prune of the logs, another set of workers of the same pid) can remove or take over, and nothing left behind by a worker
killed with ``kill -9``. A worker started otherwise (``celery worker`` in a container) has no pipe and says nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress

__all__ = ["DRAINED", "READY", "READY_FD_ENV", "say_drained", "say_ready"]

log = logging.getLogger(__name__)

#: The environment variable naming the write end (a file descriptor) of a pipe on which the worker writes
#: :data:`READY` once ready, then :data:`DRAINED` (set by the process that started it: one stopped before it was ready
#: holds no task, and needs no warm stop's wait).
READY_FD_ENV = "RAGSCORE_READY_FD"
#: Written once the worker is ready: it may take tasks from now on.
READY = b"r"
#: Written once a warm shutdown stopped the worker's consumer and no task it took is in flight: it holds nothing.
DRAINED = b"d"
#: How often a stopping worker looks whether its last task ended (:func:`say_drained`).
DRAINED_POLL_S = 0.1

#: The pipe's write end once :func:`say_ready` wrote on it, kept for :func:`say_drained`.
_pipe: list[int] = []


def say_ready() -> None:
    """Write :data:`READY` on the pipe :data:`READY_FD_ENV` names, if any, keeping it open for :func:`say_drained`
    (once: the variable goes)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if fd and _said(fd, READY):
        _pipe.append(int(fd))


def say_drained(held: Callable[[], int]) -> threading.Thread | None:
    """Once ``held()`` (the tasks the worker took that did not end) is 0, write :data:`DRAINED` on the pipe
    :func:`say_ready` kept and close it, from a daemon thread (returned; None where there is no pipe). Called once the
    worker's consumer stopped: it takes no task any more."""
    if not _pipe:
        return None
    fd = _pipe.pop()

    def wait_then_say() -> None:
        while held():
            time.sleep(DRAINED_POLL_S)
        _said(str(fd), DRAINED)
        with suppress(OSError):
            os.close(fd)

    thread = threading.Thread(target=wait_then_say, name="say-drained", daemon=True)
    thread.start()
    return thread


def _said(fd: str, what: bytes) -> bool:
    """Write ``what`` on ``fd``; False where that failed: with a warning, but for a pipe whose reader is gone."""
    try:
        os.write(int(fd), what)
    except BrokenPipeError:  # its starter is gone (and this worker is being stopped): nobody to tell
        return False
    except (OSError, ValueError) as exc:  # said, not raised: its starter (gone, or stopping it) reads it as booting
        log.warning("could not say this worker is %s on %s=%s: %s", _WORDS[what], READY_FD_ENV, fd, exc)
        return False
    return True


_WORDS = {READY: "ready", DRAINED: "drained"}
