"""LLM judge providers and what every judge call goes through: limiter, cache, retries, counters.

Provider SDKs (``groq``, ``httpx``) are imported only when a provider of that kind is built.
"""

from __future__ import annotations

from .base import Completion, CompletionParams, Provider, RetryDecision, estimate_tokens
from .cache import ReplyCache, cache_key
from .client import Budget, JudgeClient, Price, RetryPolicy
from .errors import (
    JudgeError,
    JudgeStopped,
    JudgeTimeUp,
    MalformedReplyError,
    MissingKeyError,
    ProviderError,
    RateLimitTimeout,
    RequestTooLargeError,
)
from .factory import PROVIDERS, build_client, make_provider
from .ratelimit import Grant, Limit, RedisLimiter, limits_per_minute
from .run_state import COUNTER_FIELDS, RunJudgeState, run_judge_key

__all__ = [
    "COUNTER_FIELDS",
    "PROVIDERS",
    "Budget",
    "Completion",
    "CompletionParams",
    "Grant",
    "JudgeClient",
    "JudgeError",
    "JudgeStopped",
    "JudgeTimeUp",
    "Limit",
    "MalformedReplyError",
    "MissingKeyError",
    "Price",
    "Provider",
    "ProviderError",
    "RateLimitTimeout",
    "RedisLimiter",
    "ReplyCache",
    "RequestTooLargeError",
    "RetryDecision",
    "RetryPolicy",
    "RunJudgeState",
    "build_client",
    "cache_key",
    "estimate_tokens",
    "limits_per_minute",
    "make_provider",
    "run_judge_key",
]
