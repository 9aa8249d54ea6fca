"""Who started a run: the command line or the Python API. A run's messages name the options of that caller (``--out``
or ``out=``) and the way it finishes a run, and its warnings reach it where it looks: the command line's stderr, or
Python's ``warnings`` (filterable by category in a notebook, as ``IncompleteRunWarning`` is)."""

from __future__ import annotations

import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from ragscore_workers.errors import DatasetWarning

from .terminal import backticked, resume_command

__all__ = ["CLI", "PYTHON", "Caller"]

log = logging.getLogger(__name__)

#: How each caller spells the options a message may name (key: the command line's option, without ``--``).
_PYTHON_OPTIONS = {"out": "out=", "format": "fmt=", "predictions": "fmt_options={'predictions': ...}"}


@dataclass(frozen=True)
class Caller:
    """The command line (``python=False``) or :func:`orchestrator.evaluate` / :func:`orchestrator.resume`."""

    python: bool

    def option(self, name: str) -> str:
        """How this caller gives option ``name`` (the command line's, ``out``): ``--out`` or ``out=``."""
        return _PYTHON_OPTIONS.get(name, f"{name}=") if self.python else f"--{name}"

    def given(self, name: str, value: object) -> str:
        """Option ``name`` given ``value``: ``--out DIR`` or ``out='DIR'``."""
        return f"{self.option(name)}{str(value)!r}" if self.python else f"{self.option(name)} {value}"

    def resume(self, out_dir: Path, broker: str | None = None) -> str:
        """How this caller finishes the run whose reports go to ``out_dir``: the shell's command, or ``resume()``
        first (a notebook's RAGSCORE_PLUGINS, set in os.environ, reaches no shell). ``broker``: the run's cluster."""
        command = backticked(resume_command(out_dir, broker=broker))
        if not self.python:
            return command
        call = f"resume({str(out_dir)!r}{', broker=BROKER' if broker else ''})"
        return f"`{call}` (from orchestrator; {command} in a shell)"

    def warn(self, text: str) -> None:
        """Say ``text``, what is probably wrong before a run: logged for the command line, a :class:`DatasetWarning`
        for Python."""
        if self.python:
            warnings.warn(text, DatasetWarning, stacklevel=_callers_level())
        else:
            log.warning("%s", text)


def _callers_level() -> int:
    """The ``stacklevel`` of the caller's own line (the first frame outside ragscore's packages) for a warning
    raised in the frame that calls this: a notebook shows, and a filter by module matches, where it called."""
    frame, level = sys._getframe(2), 2  # 1: the frame that calls this; 2: its caller
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in _OURS:
        frame, level = frame.f_back, level + 1
    return level


_OURS = ("orchestrator", "ragscore_workers")

CLI = Caller(python=False)
PYTHON = Caller(python=True)
