"""A small JSON path: ``a.b``, ``items[0].id``, ``items[-1].id``, ``contexts[*].text`` (``[*]``: every element),
``data['a key']`` (a key in quotes, as JSONPath writes one holding a dot, a bracket or spaces; ``["a key"]`` too).

Enough to point at fields of a RAG API's reply without a dependency; a missing key or index gives None, and so
does ``[*]`` when no element has what follows it (``contexts[*].txt``: a typo, not a list of nothing).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["check_path", "extract", "parse_path"]

_STEP = re.compile(r"\.?([^.\[\]]+)|\[(-?\d+|\*)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def parse_path(path: str) -> list[str | int]:
    """Steps of ``path``: keys (str), indexes (int) and ``"*"`` for "every element"; ValueError if malformed."""
    return [step for step, _ in _parsed(path)]


def _parsed(path: str) -> list[tuple[str | int, bool]]:
    """Steps of ``path`` (:func:`parse_path`), each with whether it is a key written in quotes (``['a key']``)."""
    steps: list[tuple[str | int, bool]] = []
    pos = 0
    for match in _STEP.finditer(path):
        if match.start() != pos:
            break
        key, index, single, double = match.groups()
        quoted = single if single is not None else double
        if quoted == "*":
            raise ValueError(f"{path!r} names the key '*', which reads as [*] (every element): no reply's key is read "
                             "so")  # fmt: skip
        if quoted is not None:
            steps.append((quoted, True))
        else:
            steps.append((key if key is not None else ("*" if index == "*" else int(index)), False))
        pos = match.end()
    if pos != len(path) or not steps:
        raise ValueError(f"not a JSON path: {path!r} (use a.b, a[0].b, a[*].b or a['a key'].b)")
    return steps


def check_path(path: str, *, lists: bool) -> list[str | int]:
    """Steps of ``path`` (:func:`parse_path`), for a field that holds a list (``lists``: contexts, doc ids ...) or one
    value (the answer); ValueError where no reply can fill that field through it: a ``[*]`` of a one-value field (it
    always gives a list), two ``[*]`` of a list field (a list of lists), JSONPath's root ``$`` (a key no reply has:
    paths start at the reply) or a key that is blank or begins or ends with a space (``data. answer``)."""
    parsed = _parsed(path)
    steps = [step for step, _ in parsed]
    if parsed[0] == ("$", False):  # a key "$" is written ['$']
        written = _fixed_text(parsed[1:])
        fixed = _said(written) if written else "the key holding the field (a.b)"
        raise ValueError(f"{path!r} begins with JSONPath's root '$', which these paths leave out (they start at the "
                         f"reply): write {fixed}")  # fmt: skip
    if spaced := [step for step, quoted in parsed if isinstance(step, str) and _spaced(step, quoted=quoted)]:
        fixed = _fixed_text(parsed)
        hint = (f"write {_said(fixed)}" if fixed
                else "give the key holding the field (a.b), or null to leave it unfilled")  # fmt: skip
        if all(str(step).strip() for step in steps):  # a key that holds the spaces is written in quotes
            hint += _kept_spaces_hint(steps, spaced[0])
        raise ValueError(f"{path!r} has the key {spaced[0]!r}, blank or spaced at an end, which no reply's key is: "
                         f"{hint}")  # fmt: skip
    stars = steps.count("*")
    if not lists and stars:
        one = _path_text([0 if step == "*" else step for step in steps]) or "[0]"
        raise ValueError(f"{path!r} maps over a list ([*]), so it always gives a list, never the one value this "
                         f"field holds: name one element ({_said(one)})")  # fmt: skip
    if stars > 1:
        raise ValueError(f"{path!r} maps over lists {stars} times ([*]), so it gives a list of lists, never "
                         "the list of values this field holds: keep one [*] and name one element of the others "
                         "([0])")  # fmt: skip
    return steps


def _kept_spaces_hint(steps: list[str | int], key: str | int) -> str:
    """The path ``steps`` keeping the spaces of its keys, for a reply whose key has them (``key``: the first spaced);
    said plainly where no path can name such a key (:func:`_path_text`)."""
    if (written := _path_text(steps)) is not None:
        return f" (or {_said(written)}, for a reply whose key has them)"
    return (f" (a reply's key {key!r} with those spaces cannot be named by a path: in quotes it holds both ' and \", "
            "and a path has no escapes)")  # fmt: skip


def _said(path: str) -> str:
    """``path`` as a hint suggests it, to be copied as it is: never escaped (``repr`` wrote ``'it\\'s "x"'``, whose
    backslash no path reads), between the first of a single quote, a double quote and a backtick that it lacks."""
    quote = next((q for q in "'\"`" if q not in path), "`")
    return f"{quote}{path}{quote}"


def _spaced(key: str, *, quoted: bool) -> bool:
    """Whether ``key`` is blank, or spaced at an end where not written in quotes (``data. answer``: a slip; a key in
    quotes, ``data[' answer']``, is read as written)."""
    return not key.strip() or (not quoted and key != key.strip())


def _fixed_text(parsed: list[tuple[str | int, bool]]) -> str | None:
    """The steps ``parsed`` (:func:`_parsed`) as a hint's fix writes them (:func:`_path_text`): a key outside quotes
    without the spaces at its ends (a slip), a key in quotes exactly as written (``['b ']`` names a reply's key
    ``"b "``), a blank key left out."""
    return _path_text([step.strip() if isinstance(step, str) and not quoted else step
                       for step, quoted in parsed if str(step).strip()])  # fmt: skip


def _path_text(steps: list[str | int]) -> str | None:
    """``steps`` written as a path again (``a[0].b``, ``a[*].b``, ``a['b c ']``, ``a["it's"]``), which
    :func:`parse_path` reads back as ``steps``; None where a key cannot be written so: one that must be in quotes
    (:func:`_needs_quotes`) yet holds both ``'`` and ``"``, as a path has no escapes."""
    text = ""
    for step in steps:
        if step == "*" or isinstance(step, int):
            text += f"[{step}]"
        elif not _needs_quotes(step) and (text or step != "$"):  # a first key "$" would read as JSONPath's root
            text += f".{step}" if text else step
        elif "'" not in step:
            text += f"['{step}']"
        elif '"' not in step:
            text += f'["{step}"]'
        else:
            return None
    return text


def _needs_quotes(key: str) -> bool:
    """Whether ``key`` is written in quotes in a path (``['a.b']``): it holds ``.``, ``[`` or ``]``, is empty or
    spaced at an end (a quote alone is read as written: ``it's``)."""
    return bool(_QUOTED.search(key)) or not key or key != key.strip()


#: What in a key makes it be written in quotes (``['a.b']``).
_QUOTED = re.compile(r"[.\[\]]")


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
