"""Building the judge client of a run from the suite's ``judge`` section (keys from the environment)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic_core import PydanticCustomError

from ..errors import ConfigError
from ..http_body import ATTEMPT_TIMEOUTS
from ..redaction import redact_url
from ..schemas import JudgeConfig, no_secret_in_url
from ..settings import get_settings
from .base import DEFAULT_TIMEOUT_S, Provider, provider_identity
from .cache import ReplyCache
from .client import Budget, JudgeClient, Price, RetryPolicy
from .inflight import InFlightCap
from .ratelimit import DEFAULT_MAX_WAIT_S, RedisLimiter, limits_per_minute
from .run_state import HOLD_MARGIN_S, RunJudgeState

__all__ = [
    "BASE_URL_ENV",
    "PROVIDERS",
    "build_client",
    "judge_identity",
    "judge_key_env",
    "limiter_name",
    "make_provider",
]

#: Environment variable that overrides ``judge.base_url`` (DESIGN.md §7).
BASE_URL_ENV = "RAGSCORE_JUDGE_BASE_URL"
#: ``judge.provider`` values: Groq's SDK, or any OpenAI-compatible endpoint over httpx.
PROVIDERS = ("groq", "openai")


def _provider_class(name: str) -> type[Provider]:
    if name == "groq":
        from .groq_sdk import GroqProvider

        return GroqProvider
    if name == "openai":
        from .openai_compat import OpenAICompatProvider

        return OpenAICompatProvider
    raise ConfigError(f"Unknown judge provider {name!r}; choose from {', '.join(PROVIDERS)}")


@lru_cache(maxsize=16)
def _cached_provider(
    name: str, model: str, base_url: str | None, api_key_env: str | None, key: str | None, timeout_s: float
) -> Provider:
    # ``key`` is part of the cache key only, so a changed environment gets a new client. ``api_key_env`` stays
    # None unless a metric named a variable: the provider's usual one is treated with more care.
    return _provider_class(name)(model=model, base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s)


def _base_url(config: JudgeConfig) -> str | None:
    """``RAGSCORE_JUDGE_BASE_URL``, else the suite's ``judge.base_url``. ConfigError (the value unshown) when the
    variable's url carries a credential, as a suite's may not: ``user:password@`` went out as HTTP basic auth in
    place of the API key, and the provider's 401 echoed it into every item's error."""
    env = os.environ.get(BASE_URL_ENV)
    if not env:
        return config.base_url
    try:
        return no_secret_in_url(env)
    except PydanticCustomError as exc:
        raise ConfigError(f"{BASE_URL_ENV}: {exc.message()}") from None


def judge_identity(config: JudgeConfig) -> str:
    """The identity of the provider ``config`` makes (its reply cache keys), without making it (no key needed)."""
    return provider_identity(config.provider, _base_url(config), config.model)


def judge_key_env(config: JudgeConfig, api_key_env: str | None = None) -> str:
    """The variable the judge's key is read from: a metric's ``api_key_env``, else the provider's usual one."""
    return api_key_env or _provider_class(config.provider).default_key_env


def make_provider(
    config: JudgeConfig, *, api_key_env: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Provider:
    """The provider for a judge config; one per process and config (connection pools are reused)."""
    base_url = _base_url(config)
    if base_url and os.environ.get(BASE_URL_ENV):  # the variable held it: its refusal says so
        _provider_class(config.provider).check_base_url(base_url, source=BASE_URL_ENV)
    key = os.environ.get(judge_key_env(config, api_key_env))
    return _cached_provider(config.provider, config.model, base_url, api_key_env, key, timeout_s)


def limiter_name(provider: Provider) -> str:
    """How a run's progress names the judge limiter of ``provider`` when the run has several (judge metrics whose
    ``api_key_env`` differ; the model is the suite's): ``groq/llama-3.1-8b-instant with the key in JUDGE_KEY_B``.
    The variable's name only, never the key or a hash of it."""
    return f"{provider.name}/{provider.model} with the key in {provider.key_env}"


def _in_flight_cap(redis: Any, limiter: RedisLimiter, config: JudgeConfig) -> InFlightCap | None:
    """The cap of ``judge.max_in_flight`` on the calls of ``limiter``'s endpoint, model and key; None when unset."""
    if config.max_in_flight is None:
        return None
    return InFlightCap(redis, limiter.key, config.max_in_flight, max_wait_s=limiter.max_wait_s)


def build_client(
    redis: Any,
    run_id: str,
    config: JudgeConfig,
    *,
    api_key_env: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_wait_s: float = DEFAULT_MAX_WAIT_S,
    cache: bool = True,
    retry: RetryPolicy | None = None,
    budget: Budget | None = None,
    prices: Mapping[str, tuple[float, float]] | None = None,
    minute_s: float = 60.0,
) -> JudgeClient:
    """A judge client sharing the limiter, reply cache and run counters in ``redis``."""
    if redis is None:
        raise ConfigError("Judge metrics need Redis (the run store) for the shared rate limit, cache and counters")
    provider = make_provider(config, api_key_env=api_key_env, timeout_s=timeout_s)
    limits = limits_per_minute(config.rpm, config.tpm, config.rpd, config.tpd, pace=config.pace, minute_s=minute_s)
    limiter = RedisLimiter(redis, provider.limiter_key(), limits, max_wait_s=max_wait_s)
    price = (prices or {}).get(config.model)
    attempt_s = max_wait_s + ATTEMPT_TIMEOUTS * timeout_s + HOLD_MARGIN_S  # the limiter's wait, then the HTTP call
    # The longest attempt: a budget hold outlives it, the wait for a slot of max_in_flight (taken before the limiter's
    # wait, at most max_wait_s too) included (the slot's own lease is short, renewed while its call runs).
    hold_s = attempt_s + (max_wait_s if config.max_in_flight else 0.0)
    state = RunJudgeState(
        redis, run_id, ttl_s=get_settings().live_ttl_s, hold_s=hold_s, limiter=limiter_name(provider), scope=limiter.key
    )  # a breaker per limiter: a key refused stops only the judge metrics that read it
    state.note_limiter(limiter.key)
    overridden = _base_url(config)
    if overridden != config.base_url:  # the summary says which endpoint really judged (the suite names another)
        state.note("base_url", redact_url(overridden or ""))
    client = JudgeClient(
        provider,
        limiter,
        ReplyCache(redis, enabled=cache),
        state,
        retry=retry,
        budget=budget,
        price=Price(*price) if price else None,
        in_flight=_in_flight_cap(redis, limiter, config),
    )
    client.note_learned_limits()
    return client
