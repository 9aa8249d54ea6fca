"""A count and its noun as messages and reports write it: ``1 item``, ``1,200 items``; a list cut short: ``a, b and
3 more``. Here, not in the orchestrator, so that worker messages (which never import the orchestrator) say counts
the same way."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["counted", "listed"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and ``noun``, plural unless ``n`` is 1 (``plural`` where an added ``s`` is
    wrong: ``reply``, ``replies``)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def listed(names: Sequence[str], limit: int, *, total: int | None = None, sep: str = ", ") -> str:
    """The first ``limit`` of ``names`` joined by ``sep``, then `` and N more`` for the rest of ``total`` (default:
    ``len(names)``; more where ``names`` holds only the first few): ``a, b, c and 1,204 more``."""
    more = (len(names) if total is None else total) - min(len(names), limit)
    return sep.join(names[:limit]) + (f" and {more:,} more" if more > 0 else "")
