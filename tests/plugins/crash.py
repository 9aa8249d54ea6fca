"""A test plugin (loaded through RAGSCORE_PLUGINS): a metric that kills its own worker process on demand.

``crash_on_flag`` SIGKILLs the process scoring a row whose ``metadata.crash`` is true (a poisoned item, as
a segfaulting native library would), calls ``sys.exit(3)`` where it is ``"exit"`` (argparse or click inside a
plug-in, a library calling ``exit()``), and scores 1.0 otherwise.
"""

from __future__ import annotations

import os
import signal
import sys

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("crash_on_flag", Queue.CPU)
def crash_on_flag(row: Row, params: NoParams) -> MetricResult:
    """SIGKILL the worker process on rows flagged ``metadata.crash`` (``"exit"``: SystemExit)."""
    if row.metadata.get("crash") == "exit":
        sys.exit(3)
    if row.metadata.get("crash"):
        os.kill(os.getpid(), signal.SIGKILL)
    return MetricResult(score=1.0)
