"""Run a command that gets SIGTERM when the process that started it exits (Linux ``PR_SET_PDEATHSIG``).

``python -m ragscore_workers.die_with_parent PARENT_PID PROGRAM ARG...`` asks for the signal, checks that
PARENT_PID is still its parent (it may have exited already), then becomes PROGRAM (``execv``: the request
survives it). Local workers start through this rather than a ``preexec_fn``, which makes Python run its
at-fork hooks in the starting process: a SIGTERM or Ctrl-C landing in one of those is dropped (printed as
"Exception ignored") and can leave the logging lock held.

The signal alone does not stop a worker promptly: Celery takes SIGTERM as a warm shutdown, which waits for every task
the worker holds, and a judge worker's 32 threads of judge chunks under a slow rate limit ran on for minutes, paying
for calls of a run nobody waits for. So the workers of an embedded run (whose run ends with its process) are also
given PARENT_PID (``RAGSCORE_PARENT_PID``, set by ``LocalWorkers(stop_with_parent=True)``), and a worker calls
:func:`watch_parent` as it starts: once that process is gone, :func:`parent_gone` is true (judge and target calls
check it and start no more: what they held is recorded stopped, for a resume to redo), and what still runs
``ORPHAN_GRACE_S`` later is killed with its process group. ``ragscore worker``'s workers serve a cluster's runs,
which go on without that process: they only get the signal, and finish what they hold.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time

__all__ = ["ORPHAN_GRACE_S", "PARENT_ENV", "main", "parent_gone", "watch_parent"]

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
#: The environment variable naming the process whose exit ends PROGRAM.
PARENT_ENV = "RAGSCORE_PARENT_PID"
#: Seconds a worker whose parent exited gives its tasks (a judge call in flight, a cpu chunk) to end before
#: :func:`watch_parent` kills its process group.
ORPHAN_GRACE_S = 10.0
#: How often :func:`watch_parent` looks whether the parent is still there.
WATCH_EVERY_S = 0.5

_orphaned = threading.Event()


def main(argv: list[str]) -> None:
    parent, program = int(argv[0]), argv[1:]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: no such request, the worker outlives a killed parent
        pass
    if os.getppid() != parent:
        sys.exit(f"not started: its parent process {parent} exited first")
    os.execv(program[0], program)


def parent_gone() -> bool:
    """True once :func:`watch_parent` saw this worker's parent exit: start no new provider or target call."""
    return _orphaned.is_set()


def watch_parent(grace_s: float = ORPHAN_GRACE_S, every_s: float = WATCH_EVERY_S) -> threading.Thread | None:
    """In a worker started by :func:`main` (``RAGSCORE_PARENT_PID`` set; taken out of the environment, so the
    worker's own children do not watch too): a daemon thread that, once the parent is gone, sets
    :func:`parent_gone`, asks for a warm shutdown (SIGTERM, where no ``PR_SET_PDEATHSIG`` sent one) and, if
    the worker is still there ``grace_s`` later, kills its process group (SIGKILL). None when not so started."""
    parent = os.environ.pop(PARENT_ENV, None)
    if not parent or not parent.isdigit():
        return None
    thread = threading.Thread(target=_watch, args=(int(parent), grace_s, every_s), name="die-with-parent", daemon=True)
    thread.start()
    return thread


def _watch(parent: int, grace_s: float, every_s: float) -> None:
    while os.getppid() == parent:
        time.sleep(every_s)
    _orphaned.set()
    log.warning("the process that started this worker (pid %d) exited: stopping; whatever still runs in %g s is "
                "killed", parent, grace_s)  # fmt: skip
    if not sys.platform.startswith("linux"):  # no PR_SET_PDEATHSIG there: nothing asked this worker to stop yet
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(grace_s)
    if os.getpgrp() == os.getpid():  # its own process group (LocalWorkers starts each worker so): its pool too
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
