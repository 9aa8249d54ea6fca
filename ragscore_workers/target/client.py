"""Asking a target one question: reply cache, breaker check, shared limiter, bounded retries, counters.

``ask`` is what the target task calls, from many threads at once::

    cache hit? -> the stored reply (no call)
    breaker open? -> TargetStopped
    limiter.acquire()                 (requests per minute shared by the cluster when rpm is set; paused after a
                                       429; a cancel or an open breaker ends the wait -> TargetStopped; one seen
                                       on admission gives the admission back: a question not sent holds no slot;
                                       a wait of a second or more is noted for the progress views; a wait past
                                       the question's ``max_seconds_per_question`` -> TargetTooSlow at once, past
                                       its task's ``deadline`` where that comes first -> TargetTimeUp)
    endpoint.call(request)            (tenacity: transient -> exponential backoff + jitter, at most ``attempts``
                                       tries; 429 -> shared pause (its retry-after, else a backoff growing with
                                       429s in a row), at most ``max_429s`` of them, not counted in ``attempts``)
    count, cache the reply

The same limiter, retry policy and breaker as the judge (``providers``), configured per target.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from tenacity import RetryCallState, Retrying, retry_if_exception

from ..errors import ConfigError
from ..limits import SleepsPast, left_s
from ..providers.base import RetryDecision
from ..providers.errors import RateLimitTimeout
from ..providers.ratelimit import RedisLimiter, limits_per_minute
from ..providers.run_state import RunJudgeState
from ..schemas import TargetConfig
from ..settings import get_settings
from ..unicode_text import hash_bytes, utf8_json
from .endpoints import Endpoint, make_endpoint
from .errors import TargetError, TargetStopped, TargetTimeUp, TargetTooSlow

__all__ = ["CACHE_PREFIX", "TargetClient", "build_target_client"]

log = logging.getLogger(__name__)

CACHE_PREFIX = "ragscore:targetcache:"
#: Seconds a cached reply is kept (90 days, as judge replies).
CACHE_TTL_S = 90 * 24 * 3600


class TargetClient:
    """Thread-safe: one per (run, target); every call shares the limiter, reply cache and run counters."""

    def __init__(
        self,
        config: TargetConfig,
        endpoint: Endpoint,
        redis: Any,
        state: RunJudgeState,
        limiter: RedisLimiter,
        *,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.endpoint = endpoint
        self.r = redis
        self.state = state
        self.limiter = limiter
        self._sleep = sleep
        self._reply_scope = _reply_scope(config)
        self._backoff_s = (backoff_initial_s, backoff_max_s)

    def cache_key(self, request: dict[str, Any]) -> str:
        material = json.dumps({"target": self.config.identity, **self._reply_scope, "request": request},
                              sort_keys=True, ensure_ascii=False)  # fmt: skip
        return CACHE_PREFIX + hashlib.sha256(hash_bytes(material)).hexdigest()

    def ask(
        self, request: dict[str, Any], use: Callable[[Any], Any] | None = None, *, deadline: float | None = None
    ) -> tuple[Any, bool]:
        """The reply's JSON data for ``request`` (``use(data)`` when given) and whether it came from the cache;
        raises TargetError. A reply ``use`` refuses (TargetError: no answer where the response map says) is not
        cached, so a resume or a re-run asks again; such a reply found in the cache is dropped and asked again.
        ``deadline`` (``time.monotonic()``; its task's soft time limit): no try starts, nor waits, past it
        (TargetTimeUp); a call in flight then ends as ``timeout_s`` bounds it, its reply cached."""
        key = self.cache_key(request)
        if self.config.cache:
            raw = self.r.get(key)
            if raw is not None:
                try:
                    result = json.loads(raw) if use is None else use(json.loads(raw))
                except TargetError:
                    self.r.delete(key)
                else:
                    self.state.incr(cache_hits=1)
                    return result, True
        tries = _Tries(self.config, self._decide, *self._backoff_s, deadline=deadline)
        in_time = SleepsPast(tries.ends_at)
        retrying = Retrying(
            after=tries.count,
            stop=lambda state: tries.stop(state) or in_time(state),
            wait=tries.wait,
            retry=retry_if_exception(lambda exc: isinstance(exc, TargetError) and self._decide(exc).retry),
            before_sleep=lambda _: self.state.incr(retries=1),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            data = retrying(self._attempt, request, tries)
        except TargetStopped:
            raise
        except TargetError as exc:
            error = (
                tries.final(exc)
                if in_time.refused is None
                else tries.too_slow(
                    f"its next try, due {in_time.refused:.1f} s later (a backoff), would start past that"
                )
            )
            if isinstance(error, TargetStopped):  # its task's deadline stopped it: no failure counted
                raise error from exc
            opened = self.state.record_failure(self.config.breaker_failures, str(error))
            log.warning(
                "target %s failed for good: %s%s", self.endpoint_name, error, " (breaker opened)" if opened else ""
            )
            if error is exc:
                raise
            raise error from exc
        result = data if use is None else use(data)  # raises before the reply is cached
        if self.config.cache:
            # a callable's reply may hold what JSON cannot (a datetime in a field no path reads): as text
            self.r.set(key, utf8_json(data, default=str), ex=CACHE_TTL_S)
        return result, False

    @property
    def endpoint_name(self) -> str:
        return self.config.name

    def _attempt(self, request: dict[str, Any], tries: _Tries) -> Any:
        self._check_stopped()
        left_s = tries.left_s()
        if left_s <= 0:
            raise tries.too_slow("")
        try:
            # ``check`` runs once more on admission (stopped while it waited less than a check's interval): a
            # question stopped then is not sent, and the limiter takes its slot back out of the shared window.
            grant = self.limiter.acquire(0, check=self._check_stopped, on_wait=self.state.note_wait, left_s=left_s)
        except RateLimitTimeout as exc:  # its limiter's bound is the question's time (build_target_client)
            raise tries.too_slow(str(exc)) from exc
        try:
            data, _headers = self.endpoint.call(request)
        except TargetError as exc:
            decision = self._decide(exc)
            if decision.kind == "rate_limit":  # its retry-after, else a backoff: shared by every worker
                self.limiter.pause(decision.retry_after, "429")
            self.state.incr(calls=1, rate_limited=int(decision.kind == "rate_limit"))
            raise
        self.limiter.succeeded(grant)
        self.state.incr(calls=1, reset_failures=True)
        return data

    def _check_stopped(self) -> None:
        """Raise TargetStopped once the run was cancelled or its breaker opened (before a call, and while it
        waits for the rate limit)."""
        if reason := self.state.stop_reason():
            raise TargetStopped(reason, system=self.endpoint_name)

    def _decide(self, exc: TargetError) -> RetryDecision:
        if isinstance(exc, (TargetStopped, TargetTooSlow)):
            return RetryDecision.no()
        return self.endpoint.decide(exc)


class _Tries:
    """The tries of one question: at most ``attempts`` for errors a retry may cure (5xx, timeouts, connection
    errors), and besides them at most ``max_429s`` 429 replies waited out (a rate-limited target is not failing), all
    within ``max_seconds_per_question`` of its first and before its task's ``deadline``. Tenacity calls :meth:`count`,
    :meth:`wait` and :meth:`stop`, in that order, after each failed try it may retry."""

    def __init__(
        self,
        config: TargetConfig,
        decide: Callable[[TargetError], RetryDecision],
        backoff_initial_s: float,
        backoff_max_s: float,
        *,
        deadline: float | None = None,
    ) -> None:
        self.config = config
        self._deadline = deadline
        self.attempts = config.attempts
        self.max_429s = config.max_429s
        self._decide = decide
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._started = time.monotonic()
        self.rate_limited = 0
        self._last_429 = False
        self._last: TargetError | None = None

    def count(self, state: RetryCallState) -> None:
        """Note the failed try's error, and whether it was a 429."""
        exc = state.outcome.exception() if state.outcome else None
        self._last = exc if isinstance(exc, TargetError) else None
        self._last_429 = self._last is not None and self._decide(self._last).kind == "rate_limit"
        self.rate_limited += int(self._last_429)

    def left_s(self) -> float:
        """Seconds left of the question's ``max_seconds_per_question``, or to its task's deadline where that is less."""
        return min(self._own_left_s(), self._deadline_left_s())

    @property
    def ends_at(self) -> float:
        """When (``time.monotonic()``) the question's time ends: :meth:`left_s` from now."""
        return time.monotonic() + self.left_s()

    def _own_left_s(self) -> float:
        return self.config.max_seconds_per_question - (time.monotonic() - self._started)

    def _deadline_left_s(self) -> float:
        return left_s(self._deadline)

    def too_slow(self, wait: str) -> TargetError:
        """The error of a question out of its time: TargetTimeUp where its task's deadline is the bound, else how long
        it was asked, its 429s, the ``wait`` that would have taken it past its time (the limiter's words; empty when the
        time is already past) and its last error."""
        if self._deadline_left_s() <= self._own_left_s():
            return TargetTimeUp(self.config.name)
        said = [f"asked for {time.monotonic() - self._started:.1f} s"]
        if self.rate_limited:
            said.append(f"{self.rate_limited} replies HTTP 429")
        if wait:
            said.append(wait)
        if self._last is not None:  # last: the message is cut at 500 characters
            said.append(f"last: {self._last}")
        limit = self.config.max_seconds_per_question
        return TargetTooSlow(f"{self.config.name}: no answer within the target's max_seconds_per_question={limit:g} "
                             f"({'; '.join(said)})", system=self.config.name)  # fmt: skip

    def wait(self, state: RetryCallState) -> float:
        """After a 429 a jitter (the limiter's shared pause does the waiting); after an error an exponential backoff
        with jitter over the errors alone (a 5xx after many 429s is its first or second error, not a long wait). One
        that would end past the question's time (:meth:`ends_at`) is not slept: the retry stops at once
        (:class:`~ragscore_workers.limits.SleepsPast`, as the judge's does)."""
        if self._last_429:
            return random.uniform(0, 0.1)
        errors = state.attempt_number - self.rate_limited
        backoff = min(self._backoff_max_s, self._backoff_initial_s * 2 ** (errors - 1))
        return backoff + random.uniform(0, self._backoff_initial_s)

    def stop(self, state: RetryCallState) -> bool:
        """Whether the question has used up its attempts or its 429s."""
        return self.rate_limited > self.max_429s or state.attempt_number - self.rate_limited >= self.attempts

    def final(self, exc: TargetError) -> TargetError:
        """The question's error: ``exc``, saying how many 429s it waited out when one more ended it."""
        if self.rate_limited <= self.max_429s:
            return exc
        said = f"{self.rate_limited} replies HTTP 429 to this question, over the target's max_429s={self.max_429s}"
        return TargetError(f"{said}: {exc}", system=exc.system, status=exc.status, headers=exc.headers)


def _reply_scope(config: TargetConfig) -> dict[str, Any]:
    """What else a reply depends on besides the endpoint and the request: the headers sent (``X-Variant``,
    ``X-Index``: two systems behind one url) and the credential (a token may select a tenant or an index; only
    its hash is used). Empty for a target with neither, so its cache keys stay what they were."""
    scope: dict[str, Any] = {}
    if config.method == "GET" and config.url and urlsplit(config.url).query:
        scope["url_query"] = "kept"  # replies cached before the url's own query string was sent are not its replies
    if config.headers:
        scope["headers"] = {k.lower(): v for k, v in config.headers.items()}
    token = (os.environ.get(config.auth_env) or "").strip() if config.auth_env else ""
    if token:
        where = config.auth_header.lower() if config.auth_in == "header" else f"{config.auth_in}:{config.auth_param}"
        material = f"{where}\n{config.auth_scheme}\n{token}"
        scope["auth"] = hashlib.sha256(material.encode()).hexdigest()
    return scope


@lru_cache(maxsize=32)
def _endpoint(config_json: str, token: str) -> Endpoint:
    """One endpoint (and HTTP connection pool) per process and target; ``token`` only keys the cache."""
    return make_endpoint(TargetConfig.model_validate_json(config_json))


def build_target_client(redis: Any, run_id: str, config: TargetConfig, *, minute_s: float = 60.0) -> TargetClient:
    """A client sharing the limiter, reply cache and run counters in ``redis`` (the run store)."""
    if redis is None:
        raise ConfigError("Targets need Redis (the run store) for the shared rate limit, cache and counters")
    endpoint = _endpoint(config.model_dump_json(), os.environ.get(config.auth_env or "") or "")
    # Without rpm too: a 429's retry-after pauses every worker's calls to the target, bounded by the question's
    # max_seconds_per_question (its one bound: a wait past it is TargetTooSlow, whatever the limit) and ended by a
    # cancel (a bare sleep of retry-after: 100000 hung the run, deaf to `ragscore cancel`).
    scope = hashlib.sha256(config.identity.encode()).hexdigest()[:12]
    limiter = RedisLimiter(redis, f"target:{scope}", limits_per_minute(config.rpm, pace=config.pace, minute_s=minute_s),
                           max_wait_s=config.max_seconds_per_question)  # fmt: skip
    state = RunJudgeState.for_target(redis, run_id, config.system, ttl_s=get_settings().live_ttl_s)
    return TargetClient(config, endpoint, redis, state, limiter)
