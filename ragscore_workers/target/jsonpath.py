"""A small JSON path: ``a.b``, ``items[0].id``, ``items[-1].id``, ``contexts[*].text`` (``[*]``: every element).

Enough to point at fields of a RAG API's reply without a dependency; a missing key or index gives None, and so
does ``[*]`` when no element has what follows it (``contexts[*].txt``: a typo, not a list of nothing).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["extract", "parse_path"]

_STEP = re.compile(r"\.?([^.\[\]]+)|\[(-?\d+|\*)\]")


def parse_path(path: str) -> list[str | int]:
    """Steps of ``path``: keys (str), indexes (int) and ``"*"`` for "every element"; ValueError if malformed."""
    steps: list[str | int] = []
    pos = 0
    for match in _STEP.finditer(path):
        if match.start() != pos:
            break
        key, index = match.groups()
        steps.append(key if key is not None else ("*" if index == "*" else int(index)))
        pos = match.end()
    if pos != len(path) or not steps:
        raise ValueError(f"not a JSON path: {path!r} (use a.b, a[0].b or a[*].b)")
    return steps


def _walk(value: Any, steps: list[str | int]) -> Any:
    for i, step in enumerate(steps):
        if value is None:
            return None
        if step == "*":
            if not isinstance(value, list):
                return None
            found = [_walk(v, steps[i + 1 :]) for v in value]
            return None if found and all(v is None for v in found) else found
        if isinstance(step, int):
            value = value[step] if isinstance(value, list) and -len(value) <= step < len(value) else None
        else:
            value = value.get(step) if isinstance(value, dict) else None
    return value


def extract(data: Any, path: str) -> Any:
    """The value at ``path`` in ``data`` (None where a key or index is missing)."""
    return _walk(data, parse_path(path))
