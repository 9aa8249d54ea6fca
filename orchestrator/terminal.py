"""Text for a terminal: what a dataset, a model, a provider or a target wrote is shown, never obeyed.

Rich escapes its own markup (``[/bold]``), not the terminal's control sequences: an ESC in a system name or in a
target's error body, printed as is, reaches the terminal (or the CI log) of whoever runs ``ragscore``, where it
moves the cursor over earlier lines, hides text (``ESC[8m``), sets the window title or writes the clipboard (OSC
52). Every console of the command line is a :class:`TerminalConsole`, and text printed without one goes through
:func:`shown`.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, TypedDict

from rich.console import Console, ConsoleDimensions, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from ragscore_workers.commands import HIDDEN_BROKER, backticked
from ragscore_workers.redaction import redact_url

__all__ = [
    "NOT_A_TERMINAL_WIDTH",
    "PIPED_PROSE_WIDTH",
    "TerminalConsole",
    "cancel_command",
    "compare_command",
    "follow_commands",
    "is_path",
    "print_warning",
    "report_command",
    "results_command",
    "resume_command",
    "say_logged_warnings",
    "shown",
    "status_command",
    "summary_commands",
    "worker_command",
    "write_to_nowhere",
]

#: Columns of a console whose output is no terminal (``| less``, a file, a CI log) and that no width or COLUMNS
#: sized: as wide as a table needs, where rich would wrap it at 80 (names folded a few letters a line).
NOT_A_TERMINAL_WIDTH = 1000
#: Columns of a console of prose a reader pages through (``ragscore metrics NAME | less``) whose output is no terminal
#: and that no width or COLUMNS sized: lines a reader follows, not rows a script greps.
PIPED_PROSE_WIDTH = 100

#: C0 control characters but tab and newline, DEL, the C1 controls (U+0080-U+009F; U+009B is a CSI too), and the
#: bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder how the rest of a line reads.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """``text`` with each control character (not tab or newline) written as its escape: ESC as ``\\x1b``."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def write_to_nowhere(stream: IO[str]) -> None:
    """Point ``stream``'s file descriptor at /dev/null: its reader went away (``ragscore run ... | head``, a pager
    quit early), and the command goes on, its progress and tables unread, to the reports, the gates, the JUnit file
    and the exit code a pipeline reads (a broken pipe would end it at the next line written, a run half done)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # not a file (a notebook's stream): nothing to point elsewhere
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class TerminalConsole(Console):
    """A rich Console whose printed text goes through :func:`shown`: strings before they are measured (so a table
    is as wide as the escapes), any other text as it is rendered; its own styles and cursor moves (control
    segments) are untouched.

    Its output no terminal, and no ``width`` or ``COLUMNS`` given, it is ``piped_width`` wide
    (:data:`NOT_A_TERMINAL_WIDTH` unless given): a table piped or in a CI log keeps a row a line; a terminal keeps
    its own width. Asked as it prints (a console made at import prints to whatever ``sys.stdout`` is then).

    Emoji codes are not replaced unless asked (``emoji=True``): the text printed is the user's data (a system named
    ``B:B`` beside ``:B:`` read as an emoji code by rich's default)."""

    def __init__(self, *args: Any, piped_width: int = NOT_A_TERMINAL_WIDTH, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)
        self.piped_width = piped_width

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._width is None and not self.is_terminal:
            return ConsoleDimensions(self.piped_width, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(shown(text), **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(shown(segment.text), segment.style)

    def on_broken_pipe(self) -> None:
        """Its reader went away: the rest of its output goes nowhere (rich's own exits 1 at once)."""
        self.quiet = True
        write_to_nowhere(self.file)


def is_path(ref: str) -> bool:
    """Whether ``ref`` (a run id or a run's DIR, as the commands take them) can only be a path: a run id
    (``20261202-011000-ab12cd``) has no ``/`` and no suffix."""
    return "/" in ref or bool(Path(ref).suffix) or Path(ref).exists()


def resume_command(out: str | Path, run_id: str | None = None, broker: str | None = None) -> str:
    """The command that finishes the run whose reports go to ``out``: ``ragscore run --resume OUT``, or with
    ``run_id`` ``ragscore resume RUN_ID --out OUT``; with the run's ``broker`` (its ``--broker``; None: the
    environment's RAGSCORE_BROKER_URL, or the embedded Redis, which the command finds again by itself) ``--broker
    URL``. Its parts are shell-quoted (a DIR holding a space or a quote), so that every message says the command as
    a shell runs it. A broker's password (and its URL's other secrets) is never shown: ``***`` in its place, and a
    word in the message, by :func:`backticked`, to put it back (the command fails at once, saying the password is
    wrong, if it is not); such a URL is set in RAGSCORE_BROKER_URL in front of the command, not given as --broker,
    which ``ps`` shows every user of the host (the command line warns of it). No comment in the command says so: an
    interactive zsh (macOS's shell) takes ``#`` as a word, and ``***`` as a glob that matches nothing."""
    where = shlex.quote(str(out))
    command = f"ragscore resume {run_id} --out {where}" if run_id else f"ragscore run --resume {where}"
    return _with_broker(command, broker)


def results_command(run_id: str, out: str | Path | None = None, broker: str | None = None) -> str:
    """The command that writes the reports of run ``run_id`` into ``out`` (None: ``DIR``, not known where it is
    said), with the run's ``broker`` as :func:`resume_command` writes it."""
    return _with_broker(f"ragscore results {run_id} --out {shlex.quote(str(out or 'DIR'))}", broker)


def compare_command(out: str | Path | None, run_id: str, baseline: str, broker: str | None = None) -> str:
    """The command that pairs the systems of a run with their 95% CI and p against system ``baseline``: of ``out``,
    its --out DIR, where known, else of ``run_id`` on the run's ``broker`` (as :func:`resume_command` writes it)."""
    against = f"--baseline {shlex.quote(baseline)}"
    if out is not None:
        return f"ragscore compare {shlex.quote(str(out))} {against}"
    return _with_broker(f"ragscore compare {run_id} {against}", broker)


def status_command(run_id: str | None, broker: str | None = None, watch: bool = False) -> str:
    """The command that shows run ``run_id`` (``watch``: as it goes on; None: that lists the broker's runs), with
    the run's ``broker`` as :func:`resume_command` writes it."""
    return _with_broker(f"ragscore status{f' {run_id}' if run_id else ''}{' --watch' if watch else ''}", broker)


def cancel_command(run: str | Path, broker: str | None = None) -> str:
    """The command that cancels ``run`` (its id, or its --out DIR), with the run's ``broker`` as
    :func:`resume_command` writes it."""
    return _with_broker(f"ragscore cancel {shlex.quote(str(run))}", broker)


def report_command(ref: str | Path, out: str | Path) -> str:
    """The command that writes the reports of the run ``ref`` (its id, or a DIR holding its summary.json) into
    ``out``, from that DIR alone where no store has the run."""
    return f"ragscore report {shlex.quote(str(ref))} --out {shlex.quote(str(out))}"


def worker_command(queues: str, broker: str | None = None) -> str:
    """The command that starts a worker consuming ``queues`` (comma-separated) of ``broker`` (the --broker given;
    None: the one it finds by itself), written as :func:`resume_command` writes it."""
    return _with_broker(f"ragscore worker --queues {shlex.quote(queues)}", broker)


def follow_commands(run_id: str, out: str | Path | None = None, broker: str | None = None) -> str:
    """What a message says to follow a cluster run that goes on without this process and then write its reports
    into ``out``: its :func:`status_command` and :func:`results_command`, :func:`backticked`."""
    return backticked(status_command(run_id, broker), results_command(run_id, out, broker), joined=", then ")


class SummaryCommands(TypedDict):
    """:meth:`~ragscore_workers.store.RunStore.finished_summary`'s ``status`` and ``resume`` commands."""

    status: str
    resume: str


def summary_commands(run_id: str, out: str | Path | None, broker: str | None) -> SummaryCommands:
    """The commands that watch run ``run_id`` and finish it into ``out`` (None: ``DIR``, not known where it is
    said), with its ``broker``, for :meth:`~ragscore_workers.store.RunStore.finished_summary` to say where the run
    has no summary (its own name neither, the workers knowing no command line)."""
    return {
        "status": status_command(run_id, broker, watch=True),
        "resume": resume_command(out or "DIR", run_id, broker),
    }


def _with_broker(command: str, broker: str | None) -> str:
    """``command`` against ``broker`` (None: the one it finds by itself), its password never shown."""
    if broker is None:
        return command
    shown = redact_url(broker)
    if shown == broker:
        return f"{command} --broker {shlex.quote(broker)}"
    return f"{HIDDEN_BROKER}={shlex.quote(shown)} {command}"


def print_warning(text: str) -> None:
    """Say ``text`` on stderr as the command line says each of its warnings: ``Warning: TEXT`` in yellow, never
    wrapped (a line a script or a test can find whole), never read as rich markup. Written to ``sys.stderr`` as it is
    then: a live progress display (rich's, which a console writes past onto its line) puts it on a line above it."""
    console = TerminalConsole(stderr=True, markup=False)
    with console.capture() as said:
        console.print(f"Warning: {text}", style="yellow", markup=False, soft_wrap=True)
    try:
        sys.stderr.write(said.get())
        sys.stderr.flush()
    except BrokenPipeError:  # its reader went away: the command goes on, unwatched
        write_to_nowhere(sys.stderr)


class WarningsSaid(logging.Handler):
    """Says what ragscore's packages log in the command line's process: a warning as its other warnings
    (:func:`print_warning`), anything else as Python said it with no handler (the message alone on stderr). Without it
    a logged warning (``cannot reach Redis ...; retrying for about 20 s``) lacked the others' ``Warning:``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.levelno == logging.WARNING:
                print_warning(self.format(record))
            elif logging.lastResort is not None:
                logging.lastResort.handle(record)
        except Exception:
            self.handleError(record)


def say_logged_warnings() -> None:
    """Have the warnings ragscore's packages log said as the command line's (:class:`WarningsSaid`), once."""
    for name in ("orchestrator", "ragscore_workers"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, WarningsSaid) for h in logger.handlers):
            logger.addHandler(WarningsSaid(logging.WARNING))
