"""Regular expressions from a suite, run on model output with a time bound.

A suite's pattern is trusted; the text it runs on is not. ``\\d+\\.\\d+`` over 200,000 digits backtracks
quadratically (about a minute here; hours at the 1 MiB output cap), which held a worker until Celery's hard
time limit killed it, over and over. The ``regex`` package (``re``-compatible syntax) stops a match after
``REGEX_TIMEOUT_S``; the stop is a ``ValueError`` the caller reports for that item.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import regex

__all__ = ["REGEX_TIMEOUT_S", "BoundedPattern", "RegexError", "bounded_regex"]

#: What :func:`bounded_regex` raises for an invalid pattern (not a ValueError).
RegexError = regex.error
#: Seconds one search (or one scan for every match) of a text may take.
REGEX_TIMEOUT_S = 2.0


class BoundedPattern:
    """A compiled pattern whose ``search`` / ``finditer`` raise ValueError past :data:`REGEX_TIMEOUT_S`."""

    def __init__(self, compiled: Any) -> None:
        self._compiled = compiled
        self.pattern: str = compiled.pattern
        self.groups: int = compiled.groups
        self.groupindex: dict[str, int] = dict(compiled.groupindex)

    def _too_slow(self, text: str) -> ValueError:
        return ValueError(f"regex {self.pattern!r} ran over {REGEX_TIMEOUT_S:g} s on {len(text):,} characters: "
                          "stopped (the text makes it backtrack)")  # fmt: skip

    def search(self, text: str) -> Any:
        try:
            return self._compiled.search(text, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            raise self._too_slow(text) from None

    def finditer(self, text: str) -> Iterator[Any]:
        try:
            yield from self._compiled.finditer(text, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            raise self._too_slow(text) from None


@lru_cache(maxsize=1024)
def bounded_regex(pattern: str, flags: int = 0) -> BoundedPattern:
    """Compile once per process (``re`` flags: the ``regex`` package shares their values);
    :data:`RegexError` for an invalid pattern."""
    return BoundedPattern(regex.compile(pattern, flags))
