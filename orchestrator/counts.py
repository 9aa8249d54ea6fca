"""A count and its noun as messages and reports write it: ``1 item``, ``1,200 items``."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and ``noun``, plural unless ``n`` is 1 (``plural`` where an added ``s`` is
    wrong: ``reply``, ``replies``)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
