"""A local worker tells the process that started it that it is ready, on a pipe that process passed it.

:class:`orchestrator.workers.LocalWorkers` starts each worker with the write end of a pipe of its own, named by
:data:`READY_FD_ENV`; the worker's ``worker_ready`` handler writes one byte there (:func:`say_ready`). A worker
stopped before it wrote it holds no task and takes none: its starter kills it after a short wait instead of the warm
stop's. A pipe, not a file: nothing another process (a cleaner of ``/tmp``, a prune of the logs, another set of
workers of the same pid) can remove or take over, and nothing left behind by a worker killed with ``kill -9``. A
worker started otherwise (``celery worker`` in a container) has no pipe and says nothing.
"""

from __future__ import annotations

import logging
import os

__all__ = ["READY_FD_ENV", "say_ready"]

log = logging.getLogger(__name__)

#: The environment variable naming the write end (a file descriptor) of a pipe on which the worker writes a byte once
#: ready (set by the process that started it: one stopped before then holds no task, and needs no warm stop's wait).
READY_FD_ENV = "RAGSCORE_READY_FD"


def say_ready() -> None:
    """Write a byte on the pipe :data:`READY_FD_ENV` names, if any, and close it: this worker is ready and may take
    tasks from now on (once: the variable goes)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if not fd:
        return
    try:
        os.write(int(fd), b"r")
        os.close(int(fd))
    except (OSError, ValueError) as exc:  # said, not raised: its starter (gone, or stopping it) reads it as booting
        log.warning("could not say this worker is ready on %s=%s: %s", READY_FD_ENV, fd, exc)
