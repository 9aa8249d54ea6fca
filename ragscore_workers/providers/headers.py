"""Reading providers' rate-limit headers (Groq and OpenAI use the same names).

``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``: limits, what is left, and when it resets as a
duration (``2m59.56s``, ``7.66s``, ``20ms``). Groq's ``-requests`` headers describe requests per *day*,
OpenAI's requests per minute; both ``-tokens`` headers describe tokens per minute. ``retry-after`` (seconds,
or an HTTP date) and ``retry-after-ms`` come with 429 replies, when they come: gateways and some OpenAI-compatible
servers leave them out, and then :func:`rate_limit_wait` reads the error message's "try again in 1.5s" (OpenAI's
and Groq's wording) or the reset header of the budget that is at 0.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["RateLimitInfo", "parse_duration", "parse_retry_after", "rate_limit_wait"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
#: "Please try again in 1.234s." / "try again in 2m59.56s" / "try again in 120ms" in a 429's message.
_TRY_AGAIN = re.compile(r"try again in ((?:\d+(?:\.\d+)?(?:ms|h|m|s))+)", re.I)


def parse_duration(text: str | None) -> float | None:
    """Seconds in ``1h2m3.5s`` / ``2m59.56s`` / ``20ms`` / a bare number of seconds; None if unreadable."""
    if text is None:
        return None
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    parts = _duration_parts(text)
    return None if parts is None else _seconds(parts)


def _duration_parts(text: str) -> list[tuple[str, str]] | None:
    """``(number, unit)`` of each part of ``1h2m3.5s`` (``[("1", "h"), ("2", "m"), ("3.5", "s")]``); None where
    ``text`` is not made of such parts alone."""
    parts = _DURATION.findall(text)
    return parts if parts and "".join(n + u for n, u in parts) == text else None


def _seconds(parts: list[tuple[str, str]]) -> float:
    """Seconds in a duration's ``(number, unit)`` parts."""
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _last_digit_s(part: tuple[str, str]) -> float:
    """Seconds one unit of the last digit of a duration's last ``(number, unit)`` part stands for (``3.89s``: 0.01,
    ``120ms``: 0.001, ``2m``: 60): a message's wait is rounded (the fake's ``3.894`` said as ``3.89``), so a retry at
    the said time can come a few ms inside the provider's window and be refused again; waiting one unit more never
    does."""
    number, unit = part
    decimals = len(number.partition(".")[2])
    return _UNIT_S[unit] * 10.0**-decimals


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms``, else ``retry-after`` (seconds or HTTP date); None if absent."""
    ms = _header(headers, "retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = _header(headers, "retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    parsed = email.utils.parsedate_tz(value)
    return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(float(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class RateLimitInfo:
    """What one reply's headers say about the remaining budget (None where a header is absent)."""

    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    limit_requests: int | None = None
    limit_tokens: int | None = None

    @classmethod
    def from_headers(cls, headers: Mapping[str, str]) -> RateLimitInfo:
        return cls(
            remaining_requests=_int(_header(headers, "x-ratelimit-remaining-requests")),
            remaining_tokens=_int(_header(headers, "x-ratelimit-remaining-tokens")),
            reset_requests_s=parse_duration(_header(headers, "x-ratelimit-reset-requests")),
            reset_tokens_s=parse_duration(_header(headers, "x-ratelimit-reset-tokens")),
            limit_requests=_int(_header(headers, "x-ratelimit-limit-requests")),
            limit_tokens=_int(_header(headers, "x-ratelimit-limit-tokens")),
        )

    def exhausted_for(self) -> float:
        """Seconds every caller should wait because a budget is at 0 (0.0 when none is)."""
        waits = []
        if self.remaining_requests is not None and self.remaining_requests <= 0:
            waits.append(self.reset_requests_s or 0.0)
        if self.remaining_tokens is not None and self.remaining_tokens <= 0:
            waits.append(self.reset_tokens_s or 0.0)
        return max(waits, default=0.0)


def rate_limit_wait(headers: Mapping[str, str], message: str = "") -> float | None:
    """Seconds a 429 asks every caller to wait: ``retry-after(-ms)``; else the message's "try again in
    DURATION"; else the reset of a budget the headers show at 0; None when nothing says."""
    wait = parse_retry_after(headers)
    if wait is not None:
        return wait
    said = _TRY_AGAIN.search(message)
    if said is not None and (parts := _duration_parts(said.group(1).lower())) is not None:
        return _seconds(parts) + _last_digit_s(parts[-1])
    exhausted = RateLimitInfo.from_headers(headers).exhausted_for()
    return exhausted if exhausted > 0 else None
