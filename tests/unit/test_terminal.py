"""Text from data shown on a terminal: control characters and direction overrides are written as escapes."""

from __future__ import annotations

import io
import logging

import pytest
from rich.console import Console
from rich.live import Live
from rich.text import Text

from orchestrator.terminal import TerminalConsole, WarningsSaid, shown


def test_direction_overrides_are_shown_not_obeyed_and_plain_right_to_left_text_is_kept() -> None:
    """U+202E (right-to-left override) made "gpj.exe" read "exe.jpg" on a terminal: a Trojan-source display trick."""
    assert shown("file\u202egpj.exe") == "file\\u202egpj.exe"
    assert shown("a\u2066b\u2069c") == "a\\u2066b\\u2069c"
    assert shown("שלום عربي, tab\there\nline") == "שלום عربي, tab\there\nline"  # scripts, tab, newline: as written
    assert shown("\x1b[2J") == "\\x1b[2J"


def test_the_users_text_is_printed_as_it_is_not_read_as_emoji_codes() -> None:
    """``ragscore compare`` said the outputs only runs ``B:B`` and ``C:B`` had as ``only in A, B\U0001f171 checks``:
    rich's default read ``:B:`` as an emoji code, in a console that takes no markup."""
    buffer = io.StringIO()
    console = TerminalConsole(file=buffer, markup=False, width=200)
    console.print("only in A, B:B:, C:B: checks; system :smile: and :thumbs_up:")
    assert buffer.getvalue().strip() == "only in A, B:B:, C:B: checks; system :smile: and :thumbs_up:"


def test_a_logged_warning_said_while_a_live_display_runs_goes_on_a_line_above_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A warning ragscore logged while the run's progress line was shown (``lost Redis``) was written past rich's
    stderr proxy, onto that line: it goes through it, on a line of its own above the display, ``Warning:`` first."""
    shown_on = io.StringIO()
    logger = logging.getLogger("orchestrator.test_live_warning")
    handler = WarningsSaid(logging.WARNING)
    logger.addHandler(handler)
    try:
        with Live("scoring 40%", console=Console(file=shown_on, force_terminal=True, width=80), auto_refresh=False):
            logger.warning("run %s: lost Redis (%s)", "abc", "Timeout")
    finally:
        logger.removeHandler(handler)
    assert "Warning: run abc: lost Redis (Timeout)" in Text.from_ansi(shown_on.getvalue()).plain
    assert capsys.readouterr().err == ""
