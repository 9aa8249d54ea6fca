"""A small JSON path: ``a.b``, ``items[0].id``, ``items[-1].id``, ``contexts[*].text`` (``[*]``: every element).

Enough to point at fields of a RAG API's reply without a dependency; a missing key or index gives None, and so
does ``[*]`` when no element has what follows it (``contexts[*].txt``: a typo, not a list of nothing).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["check_path", "extract", "parse_path"]

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


def check_path(path: str, *, lists: bool) -> list[str | int]:
    """Steps of ``path`` (:func:`parse_path`), for a field that holds a list (``lists``: contexts, doc ids ...) or one
    value (the answer); ValueError where no reply can fill that field through it: a ``[*]`` of a one-value field (it
    always gives a list), two ``[*]`` of a list field (a list of lists), JSONPath's root ``$`` (a key no reply has:
    paths start at the reply) or a key that is blank or begins or ends with a space (``data. answer``)."""
    steps = parse_path(path)
    if steps[0] == "$":
        fixed = repr(_path_text(steps[1:])) if len(steps) > 1 else "the key holding the field (a.b)"
        raise ValueError(f"{path!r} begins with JSONPath's root '$', which these paths leave out (they start at the "
                         f"reply): write {fixed}")  # fmt: skip
    if spaced := [step for step in steps if isinstance(step, str) and step != step.strip()]:
        fixed = _path_text([s.strip() if isinstance(s, str) else s for s in steps if str(s).strip()])
        hint = f"write {fixed!r}" if fixed else "give the key holding the field (a.b), or null to leave it unfilled"
        raise ValueError(f"{path!r} has the key {spaced[0]!r}, blank or spaced at an end, which no reply's key is: "
                         f"{hint}")  # fmt: skip
    stars = steps.count("*")
    if not lists and stars:
        one = _path_text([0 if step == "*" else step for step in steps])
        raise ValueError(f"{path!r} maps over a list ([*]), so it always gives a list, never the one value this "
                         f"field holds: name one element ({one!r})")  # fmt: skip
    if stars > 1:
        raise ValueError(f"{path!r} maps over lists {stars} times ([*]), so it gives a list of lists, never "
                         "the list of values this field holds: keep one [*] and name one element of the others "
                         "([0])")  # fmt: skip
    return steps


def _path_text(steps: list[str | int]) -> str:
    """``steps`` written as a path again (``a[0].b``, ``a[*].b``)."""
    text = ""
    for step in steps:
        if step == "*" or isinstance(step, int):
            text += f"[{step}]"
        else:
            text += f".{step}" if text else step
    return text


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
