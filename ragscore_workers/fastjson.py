"""``json.loads`` and ``json.dumps(ensure_ascii=False)`` for the millions of small documents a run's items are
(one per metric output in the store, one line per item in items.jsonl), without the per-call setup of the json
module's functions: about half of ``json.loads``'s time on a 100-byte object is its whitespace regexes and
encoding checks, not the C scanner. Same values and the same errors as the json module (anything the fast path
does not take whole is handed to ``json.loads``).
"""

from __future__ import annotations

import json
from json.scanner import make_scanner
from typing import Any

__all__ = ["dumps_utf8", "loads", "loads_line"]

_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # typeshed wants a make_scanner; it reads a decoder

#: ``json.dumps(value, ensure_ascii=False)`` with one encoder made once (json.dumps makes one per call).
dumps_utf8 = json.JSONEncoder(ensure_ascii=False).encode


def loads(text: str) -> Any:
    """``json.loads(text)``: the C scanner alone when it reads the whole text (no whitespace around it, as the
    json module writes it), else ``json.loads`` itself, so that an odd or bad document gets its exact result or
    error."""
    try:
        value, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def loads_line(line: bytes) -> Any:
    """``json.loads(line)`` for one line of a JSON-lines file read as bytes (its ``\\n`` included)."""
    if line[:2] == b'{"':  # UTF-8 to json.loads too (its detect_encoding): no BOM, no zero byte in the first two
        try:
            text = line.decode("utf-8", "surrogatepass")
            if text.endswith("\n"):
                text = text[:-1]
            value, end = _scan(text, 0)
        except (StopIteration, ValueError):  # a bad line: json.loads says why, as it would have
            return json.loads(line)
        if end == len(text):
            return value
    return json.loads(line)
