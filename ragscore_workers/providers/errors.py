"""Errors of the judge layer, a branch of the one tree rooted at :class:`ragscore_workers.errors.RagscoreError`.

RagscoreError
├── ConfigError
│   └── MissingKeyError         the provider's API key is not in the environment
└── JudgeError                  a judge call could not give a reply (carries ``provider``)
    ├── ProviderError           the provider answered with an error or could not be reached
    │   │                       (``status`` None for timeouts and connection errors)
    │   └── MalformedReplyError the provider answered 200 with a body that is not a completion
    ├── RequestTooLargeError    one request needs more tokens than the tokens-per-minute limit allows
    ├── RateLimitTimeout        the limiter would make this call wait longer than ``max_wait_s``
    └── JudgeStopped            the run stopped judging: circuit breaker open or budget reached

SDK and transport errors are translated in the provider modules with ``raise ... from exc``; messages
never carry an API key (:func:`redact`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ConfigError, RagscoreError

__all__ = [
    "JudgeError",
    "JudgeStopped",
    "MalformedReplyError",
    "MissingKeyError",
    "ProviderError",
    "RateLimitTimeout",
    "RequestTooLargeError",
    "redact",
]


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret replaced by ``***``, as written and as escaped in a repr."""
    for secret in secrets:
        if secret:
            for form in sorted({secret, repr(secret)[1:-1], secret.encode("unicode_escape").decode()}, key=len)[::-1]:
                text = text.replace(form, "***")
    return text


class MissingKeyError(ConfigError):
    """The API key of a provider is not set in the environment."""

    def __init__(self, provider: str, env_var: str, *, hint: str = "") -> None:
        self.provider = provider
        self.env_var = env_var
        super().__init__(f"The {provider} judge needs an API key: set the environment variable {env_var}{hint}.")


class JudgeError(RagscoreError):
    """A judge call did not produce a reply."""

    def __init__(self, message: str, *, provider: str = "") -> None:
        self.provider = provider
        super().__init__(message)


class ProviderError(JudgeError):
    """The provider answered with an error status, or could not be reached (``status is None``)."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        self.status = status
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self.code = code
        prefix = f"{provider} HTTP {status}" if status is not None else f"{provider} unreachable"
        super().__init__(f"{prefix}: {message}"[:500], provider=provider)


class MalformedReplyError(ProviderError):
    """A 200 reply whose body is not a chat completion."""


class RequestTooLargeError(JudgeError):
    """The request alone needs more tokens than the tokens-per-minute limit: it can never be sent."""


class RateLimitTimeout(JudgeError):
    """The shared limiter would have made the call wait longer than the configured bound."""


class JudgeStopped(JudgeError):
    """Judging stopped for this run (circuit breaker open, or cost/token budget reached)."""
