"""Helpers of the seed-format readers: whole-file JSON, fields with aliases, strict value checks, row errors.

A reader turns one element of a seed file into a row dict or raises :class:`SeedError` whose message
names the place (``answers['gpt4'].citations[1]: ...``); the reader turns it into a :class:`RowError`
with the element's position, so one bad element never stops the rest of the file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ragscore_workers.errors import DatasetError

from .loaders import RowError, kind, loads_json

__all__ = ["SeedError", "identifier", "number", "pick", "read_json", "row_error", "text"]


class SeedError(ValueError):
    """An element of a seed file that cannot become a row; the message says where and why."""


def read_json(path: Path) -> Any:
    """The whole file as JSON; DatasetError (nothing is read) when it does not parse."""
    try:
        return loads_json(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from exc
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc})") from exc


def row_error(line: int, message: str, value: Any) -> RowError:
    """A RowError with a JSON excerpt of the element that could not be read."""
    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return RowError(line, message, raw)


def pick(obj: dict[str, Any], names: tuple[str, ...], where: str) -> tuple[str | None, Any]:
    """``(name, value)`` of the one alias of ``names`` that ``obj`` holds, ``(None, None)`` when none;
    SeedError when several are given (which one is meant would be a guess)."""
    present = [n for n in names if n in obj]
    if len(present) > 1:
        raise SeedError(f"{where}: give one of {', '.join(present)}, not several")
    return (present[0], obj[present[0]]) if present else (None, None)


def text(value: Any, where: str, *, empty_ok: bool = False) -> str:
    """A string (blank only when ``empty_ok``); SeedError otherwise."""
    if not isinstance(value, str):
        raise SeedError(f"{where}: expected a string, got {kind(value)}")
    if not empty_ok and not value.strip():
        raise SeedError(f"{where}: must not be empty")
    return value


def identifier(value: Any, where: str) -> str:
    """A non-empty string or an integer (as text): ids, topic and model names."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return text(value, where).strip()


def number(value: Any, where: str) -> float:
    """A finite number (booleans are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SeedError(f"{where}: expected a finite number, got {json.dumps(value, default=str)[:40]}")
    return float(value)
