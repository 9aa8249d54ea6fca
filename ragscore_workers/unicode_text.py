"""Lone UTF-16 surrogates (``"\\udfff"``): JSON can spell them, Python keeps them, UTF-8 cannot hold them.

Text with one passes every check until it is stored or written, where encoding it fails. A row holding one in
a field that names the item (id, system, group, question_type) is refused (a reported row); a target's reply,
and a metric result holding one, have them replaced; the report files write any other as its escape.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["hash_bytes", "lone_surrogate_at", "surrogate_index", "utf8_json", "valid_unicode"]


def utf8_json(value: Any, **options: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **options)``, or with ASCII escapes when the text holds a lone
    surrogate: what Redis (UTF-8) and a report file can store either way."""
    text = json.dumps(value, ensure_ascii=False, **options)
    return text if _first_surrogate(text) is None else json.dumps(value, **options)


def hash_bytes(text: str) -> bytes:
    """``text`` as UTF-8 for a hash (a cache key); a lone surrogate is taken as it is, not an error."""
    return text.encode("utf-8", "surrogatepass")


def surrogate_index(text: str) -> int | None:
    """Where the first lone surrogate of ``text`` sits (an index), or None."""
    if text.isascii():  # most text: no encode needed
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _first_surrogate(text: str) -> str | None:
    at = surrogate_index(text)
    return None if at is None else f"U+{ord(text[at]):04X}"


def lone_surrogate_at(value: Any, path: str = "") -> str | None:
    """Where a lone surrogate sits in a JSON-like value (``"contexts[1].text: U+DFFF"``), or None."""
    if isinstance(value, str):
        found = _first_surrogate(value)
        return f"{path or 'value'}: {found}" if found else None
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            found = _first_surrogate(key) if isinstance(key, str) else None
            if found:
                return f"{where} (a key): {found}"
            if (inner := lone_surrogate_at(item, where)) is not None:
                return inner
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if (inner := lone_surrogate_at(item, f"{path}[{i}]")) is not None:
                return inner
    return None


def valid_unicode(value: Any) -> Any:
    """``value`` (text, or a JSON-like value) with each lone surrogate replaced by U+FFFD (the replacement
    character); ``value`` itself when it holds none."""
    if lone_surrogate_at(value) is None:
        return value
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if isinstance(value, dict):
        return {valid_unicode(k): valid_unicode(v) for k, v in value.items()}
    return [valid_unicode(v) for v in value]
