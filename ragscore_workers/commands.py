"""How a message says a ``ragscore`` command: in backticks, and where a broker's password is hidden in it (``***``),
a word to put it back. Here, not in the orchestrator, because the run store's own errors say commands too (what
watches a run, what finishes it), and the workers never import the orchestrator."""

from __future__ import annotations

__all__ = ["HIDDEN_BROKER", "backticked", "in_backticks", "password_note"]

#: What a command starts with whose broker's password is hidden: the broker's URL, redacted, set in front of it.
HIDDEN_BROKER = "RAGSCORE_BROKER_URL"


def in_backticks(command: str) -> str:
    """``command`` as a message says it: in backticks, the one way every message quotes a command."""
    return f"`{command}`"


def backticked(*commands: str, joined: str = " or ") -> str:
    """``commands`` as a message says them: each :func:`in_backticks`, ``joined`` between them, and where a broker's
    password is hidden (``***``) in one of them, a word after them all to put it back (said once: the commands of
    one message name the same broker)."""
    return joined.join(in_backticks(command) for command in commands) + password_note(*commands)


def password_note(*commands: str) -> str:
    """The word a message says after ``commands`` where a broker's password is hidden (``***``) in one of them, to put
    it back; else nothing."""
    return " (put its password back for `***`)" if any(c.startswith(f"{HIDDEN_BROKER}=") for c in commands) else ""
