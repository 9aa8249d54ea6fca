"""A count and its noun as messages and reports write it: ``1 item``, ``1,200 items``; a list cut short: ``a, b and
3 more``; a typo's "did you mean" names. Here, not in the orchestrator, so that worker messages (which never import
the orchestrator) say them the same way."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "agree", "and_more", "close_names", "counted", "counted_of", "did_you_mean", "listed", "noun", "noun_names",
    "place", "thousands",
]  # fmt: skip


def agree(n: int, one: str, many: str) -> str:
    """The verb or pronoun that agrees with ``n`` things: ``one`` for 1, else ``many`` (``is``/``are``,
    ``it``/``them``, ``waits``/``wait``)."""
    return one if n == 1 else many


def thousands(n: int) -> str:
    """A count as every message, report and table writes it: ``1,200`` (machine-read files keep ``1200``)."""
    return f"{n:,}"


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and ``word``, plural unless ``n`` is 1 (``plural`` where an added ``s`` is
    wrong: ``reply``, ``replies``)."""
    return f"{thousands(n)} {noun(n, word, plural)}"


def counted_of(n: int, total: int, word: str, plural: str | None = None) -> str:
    """``n`` of ``total`` things, with thousands separators, the noun agreeing with ``total``: ``8 of 10 items``,
    ``1 of 1 item``, ``0 of 1,200 rows`` (what a message says was done of a whole: ``... items scored``)."""
    return f"{thousands(n)} of {counted(total, word, plural)}"


def and_more(n: int, more: str | None = None) -> str:
    """``and 1,204 more``; with ``more``, a noun, what the rest are: ``and 2 more points`` (:func:`listed`'s end, and
    a message's ``(and 1 more point)`` after the first of several)."""
    return f"and {counted(n, 'more ' + more) if more else f'{thousands(n)} more'}"


def noun(n: int, word: str, plural: str | None = None) -> str:
    """``word`` alone, plural unless ``n`` is 1, for a message that lists the things after it: ``column 'a'``,
    ``columns 'a', 'b'``."""
    return word if n == 1 else plural or word + "s"


def noun_names(names: Sequence[object], word: str, plural: str | None = None) -> str:
    """``word`` (plural unless one) and ``names``, each quoted as Python writes it: ``column 'a'``, ``columns 'a',
    'b'`` (what is counted first, as :func:`counted` and :func:`noun` take it)."""
    return f"{noun(len(names), word, plural)} {', '.join(map(repr, names))}"


def listed(
    names: Sequence[str], limit: int, *, total: int | None = None, sep: str = ", ", more: str | None = None
) -> str:
    """The first ``limit`` of ``names`` joined by ``sep``, then `` and N more`` for the rest of ``total`` (default:
    ``len(names)``; more where ``names`` holds only the first few): ``a, b, c and 1,204 more``. ``more``, a noun,
    says what the rest are where a bare "N more" would read as more of the last name's own parts (``id 'q4' on
    lines 5 and 12 and 2 more duplicate ids``, not "and 2 more" lines). With nothing shown, the count alone:
    ``3 more`` (``3 ids``)."""
    shown = sep.join(names[:limit])
    rest = (len(names) if total is None else total) - min(len(names), limit)
    if rest <= 0:
        return shown
    if not shown:
        return counted(rest, more) if more else f"{thousands(rest)} more"
    return f"{shown} {and_more(rest, more)}"


def close_names(name: str, known: Iterable[str], *, cutoff: float = 0.6) -> list[str]:
    """The names of ``known`` most like ``name`` (a typo's "did you mean"), best first; ``cutoff``: how like
    (difflib's ratio, 0 to 1)."""
    return difflib.get_close_matches(name, list(known), n=3, cutoff=cutoff)


def did_you_mean(names: Sequence[str], *, sentence: bool = False) -> str:
    """A typo's hint, each name quoted as Python writes it: ``did you mean 'rpm' or 'rpd'?`` (``Did ...`` as a
    ``sentence`` of its own); nothing without ``names``."""
    if not names:
        return ""
    return f"{'D' if sentence else 'd'}id you mean {' or '.join(map(repr, names))}?"


#: The keys that name an entry of a suite's list: a metric, a target's system, a gate's metric, a point's id.
_NAMING_KEYS = ("name", "system", "metric", "id")


def place(loc: Sequence[Any], data: Any = None) -> str:
    """A place in a suite (pydantic's ``loc``) as users count list items, from 1: ``metrics item 2 (mrr).params.k
    item 1``, not ``metrics.1.params.k.0``. An item is named as ``data`` (what the place is in, as written) names
    it: by its name, system, metric or id, or a metric by its bare name; never by another value (it may be a secret)."""
    said, key = "", None
    for step in loc:
        # an int in a mapping (YAML's ``1: x``) is its key, said as written
        if isinstance(step, int) and not isinstance(step, bool) and not isinstance(data, dict):
            name = _item_name(data, step, bare=key == "metrics")
            said += f" item {step + 1}" + (f" ({name})" if name else "")
        else:
            said += f".{step}" if said else str(step)
        key, data = step, _at(data, step)
    return said.strip()


def _at(data: Any, step: Any) -> Any:
    """``data[step]``, or None where ``data`` has no such entry."""
    if isinstance(data, dict):
        return data.get(step)
    if isinstance(data, list) and isinstance(step, int) and 0 <= step < len(data):
        return data[step]
    return None


def _item_name(data: Any, index: int, *, bare: bool) -> str | None:
    """The name of entry ``index`` of the list ``data`` (a bare string too where ``bare``), or None."""
    item = _at(data, index) if isinstance(data, list) else None
    if isinstance(item, dict):
        item = next((item[k] for k in _NAMING_KEYS if isinstance(item.get(k), str)), None)
    elif not bare:
        return None
    return item if isinstance(item, str) else None
