"""Who started a run: the command line or the Python API. A run's messages name the options of that caller (``--out``
or ``out=``) and the way it finishes a run, and its warnings reach it where it looks: the command line's stderr, or
Python's ``warnings`` (filterable by category in a notebook, as ``IncompleteRunWarning`` is)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ragscore_workers.errors import DatasetWarning

from .terminal import backticked, print_warning, resume_command

__all__ = ["CLI", "PYTHON", "Caller"]

#: Python's names of the command line's options (key: the command line's, without ``--``) where they differ.
_PYTHON_NAMES = {"format": "fmt", "judge-threads": "judge_threads", "max-cost": "max_cost", "max-tokens": "max_tokens"}
#: The reader options of a format (``--predictions``), which Python gives in ``fmt_options``.
_READER_OPTIONS = ("predictions", "corpus", "system")


@dataclass(frozen=True)
class Caller:
    """The command line (``python=False``) or :func:`orchestrator.evaluate` / :func:`orchestrator.resume`."""

    python: bool

    def option(self, name: str) -> str:
        """How this caller gives option ``name`` (the command line's, ``out``): ``--out`` or ``out=``
        (``fmt_options={'predictions': ...}`` for a reader option)."""
        if not self.python:
            return f"--{name}"
        return f"fmt_options={{{name!r}: ...}}" if name in _READER_OPTIONS else f"{_PYTHON_NAMES.get(name, name)}="

    def given(self, name: str, value: object) -> str:
        """Option ``name`` given ``value``: ``--out DIR`` or ``out='DIR'`` (``fmt_options={'predictions': 'P'}``)."""
        if not self.python:
            return f"--{name} {value}"
        shown = repr(str(value))
        return f"fmt_options={{{name!r}: {shown}}}" if name in _READER_OPTIONS else f"{self.option(name)}{shown}"

    def reader_options(self, names: Iterable[str]) -> str:
        """Reader options ``names`` as the caller gave them: ``system`` (the command line's ``--system``), or
        ``fmt_options['system']``."""
        return ", ".join(f"fmt_options[{name!r}]" if self.python else name for name in names)

    def no_target(self) -> str:
        """How this caller scores the rows as given, not asking the suite's targets: ``add --no-target``, or a suite
        without them (evaluate() has no such option)."""
        return "give evaluate() the suite without its targets" if self.python else "add --no-target"

    def resume(self, out_dir: Path, broker: str | None = None) -> str:
        """How this caller finishes the run whose reports go to ``out_dir``: the shell's command, or ``resume()``
        first (a notebook's RAGSCORE_PLUGINS, set in os.environ, reaches no shell). ``broker``: the run's cluster."""
        command = backticked(resume_command(out_dir, broker=broker))
        if not self.python:
            return command
        call = f"resume({str(out_dir)!r}{', broker=BROKER' if broker else ''})"
        return f"`{call}` (from orchestrator; {command} in a shell)"

    def warn(self, text: str, category: type[Warning] = DatasetWarning) -> None:
        """Say ``text``, what is probably wrong before a run: the command line's ``Warning: TEXT`` on stderr
        (:func:`.terminal.print_warning`, as its other commands warn), a ``category`` warning for Python."""
        if self.python:
            warnings.warn(text, category, stacklevel=_callers_level())
        else:
            print_warning(text)


def _callers_level() -> int:
    """The ``stacklevel`` of the caller's own line (the first frame outside ragscore's packages) for a warning
    raised in the frame that calls this: a notebook shows, and a filter by module matches, where it called."""
    frame: FrameType | None
    frame, level = sys._getframe(2), 2  # 1: the frame that calls this; 2: its caller
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in _OURS:
        frame, level = frame.f_back, level + 1
    return level


_OURS = ("orchestrator", "ragscore_workers")

CLI = Caller(python=False)
PYTHON = Caller(python=True)
