"""Text from data shown on a terminal: control characters and direction overrides are written as escapes."""

from __future__ import annotations

from orchestrator.terminal import shown


def test_direction_overrides_are_shown_not_obeyed_and_plain_right_to_left_text_is_kept() -> None:
    """U+202E (right-to-left override) made "gpj.exe" read "exe.jpg" on a terminal: a Trojan-source display trick."""
    assert shown("file\u202egpj.exe") == "file\\u202egpj.exe"
    assert shown("a\u2066b\u2069c") == "a\\u2066b\\u2069c"
    assert shown("שלום عربي, tab\there\nline") == "שלום عربي, tab\there\nline"  # scripts, tab, newline: as written
    assert shown("\x1b[2J") == "\\x1b[2J"
