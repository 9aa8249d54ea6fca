"""Rendering a target's request from a row: ``"{question}"``, ``"{metadata.lang}"``, constants as given.

A string that is exactly one placeholder takes the row value with its type (a list stays a list); a
placeholder inside a longer string is formatted in as text. Only ``{name}`` / ``{a.b}`` placeholders are
read (no format specs, no attribute access), and ``{{``/``}}`` stand for literal braces.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from types import UnionType
from typing import Any, Union, get_args, get_origin

from ..schemas import Row
from .errors import TargetError

__all__ = [
    "UnseenRequestFields",
    "has_field",
    "keyless_field",
    "placed_placeholders",
    "placeholders",
    "render",
    "request_data",
]

_FIELD = re.compile(r"\{\{|\}\}|\{([A-Za-z_][\w]*(?:\.[\w]+)*)\}")


def _lookup(row: dict[str, Any], name: str) -> Any:
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value or value[part] is None:
            raise TargetError(f"the row has no field {name!r}, which the target's request template uses")
        value = value[part]
    return value


def request_data(row: Row) -> dict[str, Any]:
    """What a target's request is rendered from: the row's fields (extra columns too), nulls left out."""
    return row.model_dump(mode="json", exclude_none=True)


def has_field(row: dict[str, Any], name: str) -> bool:
    """Whether ``row`` has the (dotted) field ``name`` a placeholder reads, with a value that is not None."""
    try:
        _lookup(row, name)
    except TargetError:
        return False
    return True


def _render_text(text: str, row: dict[str, Any]) -> Any:
    whole = _FIELD.fullmatch(text)
    if whole is not None and whole.group(1) is not None:
        return _lookup(row, whole.group(1))

    def sub(match: re.Match[str]) -> str:
        if match.group(1) is None:
            return match.group(0)[0]  # "{{" -> "{", "}}" -> "}"
        value = _lookup(row, match.group(1))
        return value if isinstance(value, str) else str(value)

    return _FIELD.sub(sub, text)


def render(template: Any, row: dict[str, Any]) -> Any:
    """``template`` with every placeholder replaced by the row's value (TargetError if a field is missing)."""
    if isinstance(template, str):
        return _render_text(template, row)
    if isinstance(template, dict):
        return {key: render(value, row) for key, value in template.items()}
    if isinstance(template, list):
        return [render(value, row) for value in template]
    return template


def placeholders(template: Any) -> set[str]:
    """Every field name the template reads."""
    return {name for _, name in placed_placeholders(template)}


def placed_placeholders(template: Any, loc: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Each field name the template reads, with where in it (``("filter", "lang")``) it is written."""
    if isinstance(template, str):
        yield from ((loc, m.group(1)) for m in _FIELD.finditer(template) if m.group(1))
    elif isinstance(template, (dict, list)):
        for key, value in template.items() if isinstance(template, dict) else enumerate(template):
            yield from placed_placeholders(value, (*loc, key))


def keyless_field(name: str) -> str | None:
    """For a placeholder that reads a key of a row field holding none in every row (``{contexts.text}``: a list;
    ``{question.text}``: text), what that field holds (``a list``), so that no row could fill it; else None (a
    mapping, a model, an extra column: their keys are the rows')."""
    field, _, rest = name.partition(".")
    if not rest or (info := Row.model_fields.get(field)) is None:
        return None
    union = get_origin(info.annotation) in (Union, UnionType)
    kinds = {
        _kind(arg) for arg in (get_args(info.annotation) if union else (info.annotation,)) if arg is not type(None)
    }
    return None if None in kinds else " or ".join(sorted(kinds, reverse=True))  # type: ignore[arg-type]


def _kind(annotation: Any) -> str | None:
    """``text`` or ``a list`` for a field type that holds no keys; None for one that may (a mapping, a model, Any)."""
    if annotation is str:
        return "text"
    if get_origin(annotation) is list:
        return "a list"
    return None


class UnseenRequestFields:
    """The fields the targets' request templates read that no row seen so far has: one no row of a dataset has
    (``{questoin}``, or ``{question}`` in a dataset whose column is ``query``) would fail every question, so a run
    or ``--dry-run`` stops on it before anything is submitted. Rows are read only until every field is seen."""

    def __init__(self, requests: dict[str, Any]) -> None:
        """``requests``: target name -> its request template."""
        self._users: dict[str, list[str]] = {}
        for target, template in requests.items():
            for name in sorted(placeholders(template)):
                self._users.setdefault(name, []).append(target)

    def see(self, row: Row) -> None:
        """Note the fields ``row`` has (its :func:`request_data` is built only while a field is unseen)."""
        if self._users:
            data = request_data(row)
            for name in [n for n in self._users if has_field(data, n)]:
                del self._users[name]

    def error(self) -> str | None:
        """What no row has, said per field with the targets whose request reads it; None when all were seen."""
        if not self._users:
            return None
        said = "; ".join(
            f"no row has {name!r}, which the request of target {', '.join(map(repr, targets))} reads"
            for name, targets in self._users.items()
        )
        return f"{said}: every question would fail (a typo in the request, or a column named otherwise?)"
