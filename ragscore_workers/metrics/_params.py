"""Param checks pydantic's lax mode leaves out: a boolean given where a number is meant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..counts import place

__all__ = ["booleans_read_as_numbers"]


def booleans_read_as_numbers(
    raw: Any, parsed: BaseModel, where: Callable[[tuple[Any, ...], Any], str] = place
) -> list[str]:
    """``"LOC: Input should be a number, not a boolean (true)"`` for each boolean of ``raw`` that ``parsed`` (the
    model validated from it) holds as a number: pydantic reads ``true`` as 1 for ``int`` and ``float`` fields, so
    ``threshold: yes`` in YAML ran at 1.0. Booleans kept as booleans (flags, a JSON schema's ``false``) pass. LOC is
    ``where(loc, raw)`` (:func:`place`; a suite file's with its line)."""
    try:  # names and aliases both, as either may be what was written
        held = {**parsed.model_dump(warnings=False), **parsed.model_dump(by_alias=True, warnings=False)}
    except Exception:  # a plug-in's field that cannot be dumped: nothing to compare against
        return []
    return [f"{where(loc, raw)}: Input should be a number, not a boolean ({str(value).lower()})"
            for loc, value in _numbers_from_booleans(raw, held, ())]  # fmt: skip


def _numbers_from_booleans(raw: Any, held: Any, loc: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], bool]]:
    if isinstance(raw, bool):
        return [(loc, raw)] if isinstance(held, (int, float)) and not isinstance(held, bool) else []
    if isinstance(raw, dict) and isinstance(held, dict):
        return [found for k, v in raw.items() if k in held for found in _numbers_from_booleans(v, held[k], (*loc, k))]
    if isinstance(raw, (list, tuple)) and isinstance(held, (list, tuple)) and len(raw) == len(held):
        pairs = enumerate(zip(raw, held, strict=True))
        return [found for i, (r, h) in pairs for found in _numbers_from_booleans(r, h, (*loc, i))]
    return []
