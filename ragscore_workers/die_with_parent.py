"""Run a command that gets SIGTERM when the process that started it exits (Linux ``PR_SET_PDEATHSIG``).

``python -m ragscore_workers.die_with_parent PARENT_PID PROGRAM ARG...`` asks for the signal, checks that
PARENT_PID is still its parent (it may have exited already), then becomes PROGRAM (``execv``: the request
survives it). Local workers start through this rather than a ``preexec_fn``, which makes Python run its
at-fork hooks in the starting process: a SIGTERM or Ctrl-C landing in one of those is dropped (printed as
"Exception ignored") and can leave the logging lock held.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, program = int(argv[0]), argv[1:]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: no such request, the worker outlives a killed parent
        pass
    if os.getppid() != parent:
        sys.exit(f"not started: its parent process {parent} exited first")
    os.execv(program[0], program)


if __name__ == "__main__":
    main(sys.argv[1:])
