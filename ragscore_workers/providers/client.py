"""The judge client: cache, budget and breaker checks, shared limiter, bounded retries, counters.

``complete`` is what judge metrics call, from many threads at once::

    cache hit? -> reply (no call, no key needed)
    no key set? -> MissingKeyError
    breaker open or budget reached? -> JudgeStopped (``misconfigured``: a refused key, an unknown model)
    a slot of judge.max_in_flight, when set   (every worker's calls in flight, bounded by max_wait_s and, within
                                                about a second, by the task's ``deadline`` -> JudgeTimeUp)
    limiter.acquire(estimated tokens)          (bounded wait; shared pause after a 429; a cancel or an open
                                                breaker ends the wait -> JudgeStopped; one seen on admission
                                                gives the admission back: a call not sent holds no window; a wait
                                                past the task's ``deadline`` -> JudgeTimeUp at once)
    provider.complete(...)                     (tenacity: transient -> exponential backoff + jitter,
                                                429 -> shared pause; at most ``attempts`` tries, none that would
                                                start past the task's ``deadline`` -> JudgeTimeUp)
    correct the token cost, count, cache the reply (only one the caller could read: ``final``)

A call that still fails counts towards the run's circuit breaker of its limiter (provider, model, endpoint and key:
judge metrics reading other keys have their own); ``breaker_failures`` failures in a row stop that judge for the whole
run, and one that every call would repeat (a model the provider lacks, a refused key) stops it at once: its call and
every call it stops raise JudgeStopped with ``misconfigured`` and the setting to fix, each item's error.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from ..limits import SleepsPast, left_s, time_limit_error
from ..schemas import Queue
from ..store import BUDGET_AT_0
from .base import Completion, CompletionParams, Message, Provider, RetryDecision, estimate_tokens
from .cache import ReplyCache, cache_key
from .errors import JudgeStopped, JudgeTimeUp, ProviderError, RateLimitTimeout, RequestTooLargeError
from .headers import RateLimitInfo
from .inflight import InFlightCap
from .ratelimit import Grant, RedisLimiter
from .run_state import RunJudgeState

__all__ = ["Budget", "JudgeClient", "Price", "RetryPolicy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """Provider attempts per call (the first included) and the backoff between transient failures."""

    attempts: int = 5
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 20.0
    #: Consecutive failed calls (after their retries) that stop judging for the run.
    breaker_failures: int = 5


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Stop starting calls once the run's judge cost or tokens reach these (None: no limit)."""

    max_cost: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Price:
    """Price per million input and output tokens."""

    in_per_mtok: float
    out_per_mtok: float

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.in_per_mtok + tokens_out * self.out_per_mtok) / 1_000_000


_SAID: set[tuple[str, str, int | None]] = set()
_SAID_LOCK = threading.Lock()


def _ms_since(start: float) -> int:
    """Whole milliseconds since ``start`` (``time.monotonic()``), at least 1: a call sent took some time."""
    return max(1, round((time.monotonic() - start) * 1000))


def _first_time(fact: tuple[str, str, int | None]) -> bool:
    """True the first time this process sees ``fact`` (clients are built per batch: say things once per run)."""
    with _SAID_LOCK:
        if fact in _SAID:
            return False
        _SAID.add(fact)
        return True


class JudgeClient:
    """Thread-safe: one per (run, provider); every call shares the limiter, cache and run counters."""

    def __init__(
        self,
        provider: Provider,
        limiter: RedisLimiter,
        cache: ReplyCache,
        state: RunJudgeState,
        *,
        retry: RetryPolicy | None = None,
        budget: Budget | None = None,
        price: Price | None = None,
        in_flight: InFlightCap | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider = provider
        self.in_flight = in_flight
        self.limiter = limiter
        self.cache = cache
        self.state = state
        self.retry = retry or RetryPolicy()
        self.budget = budget or Budget()
        self.price = price
        self._sleep = sleep
        initial, most = self.retry.backoff_initial_s, self.retry.backoff_max_s
        # Exponential backoff (initial, 2x, 4x ... up to most) plus up to ``initial`` of random jitter.
        self._backoff = wait_exponential(multiplier=initial, max=most) + wait_random(0, initial)

    # ------------------------------------------------------------------ public
    def complete(
        self,
        messages: Sequence[Message],
        params: CompletionParams,
        *,
        template_version: str,
        attempt: int = 0,
        final: Callable[[Completion], bool] | None = None,
        deadline: float | None = None,
    ) -> tuple[Completion, bool]:
        """The reply to ``messages`` and whether it came from the cache; raises JudgeError subclasses. Given ``final``,
        only a reply it accepts (one the caller could read) is cached, or served from the cache: another is asked
        again. ``deadline`` (``time.monotonic()``; its task's soft time limit): no try starts, nor waits at the limiter
        or backs off, past it (JudgeTimeUp, not counted by the breaker); a call in flight then ends as the provider's
        timeout bounds it, its reply cached."""
        key = cache_key(self.provider.identity, messages, params, template_version, attempt)
        cached = self.cache.get(key)
        if cached is not None and (final is None or final(cached)):
            self.state.incr(cache_hits=1)
            return cached, True
        if left_s(deadline) <= 0:
            raise self._time_up()
        in_time = SleepsPast(deadline)
        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts) | in_time,
            wait=self._wait,
            retry=retry_if_exception(self._retryable),
            before_sleep=lambda _: self.state.incr(retries=1),
            sleep=self._sleep,
            reraise=True,
        )
        try:
            completion = retrying(self._attempt, messages, params, deadline)
        except (ProviderError, RateLimitTimeout, RequestTooLargeError) as exc:
            if in_time.refused is not None:
                raise self._time_up() from exc  # its deadline, not its attempts, stopped the retries
            if self.provider.request_specific(exc):  # this item's prompt, not the provider: no breaker count
                self.state.incr(failures=1)  # still a call failed for good
                log.warning("judge call to %s failed for this item: %s", self.provider.name, exc)
                raise
            stopper = self.provider.run_stopper(exc)
            opened = self.state.record_failure(self.retry.breaker_failures, str(exc), reason=stopper)
            log.warning("judge call to %s failed for good: %s%s", self.provider.name, exc,
                        " (circuit breaker opened)" if opened else "")  # fmt: skip
            if stopper is not None:  # this item's error says what to fix, in the words of the items the stop stops
                raise JudgeStopped(stopper, provider=self.provider.name, misconfigured=True) from exc
            raise
        # An empty reply may be a server's glitch, and one the caller could not read may read next time: not kept.
        if (completion.text.strip() or completion.refusal) and (final is None or final(completion)):
            self.cache.put(key, completion, self.provider.identity)
        return completion, False

    # ------------------------------------------------------------------ one attempt
    def _attempt(self, messages: Sequence[Message], params: CompletionParams, deadline: float | None) -> Completion:
        self.provider.require_key()  # a call not in the cache: the key is needed now (MissingKeyError), not before
        prompt = estimate_tokens(messages)
        estimate = prompt + params.max_tokens
        est_cost = self.price.cost(prompt, params.max_tokens) if self.price else 0.0
        reason, release = self.state.reserve(estimate, est_cost, self.budget.max_cost, self.budget.max_tokens)
        if reason:
            raise self._stopped(reason)
        try:  # ``release``: what reserve() held for this call, given back with its counts however it ends
            # ``check`` runs once more on admission (stopped while it waited less than a check's interval): a call
            # stopped then is not sent, and the limiter takes its request and tokens back out of the shared window.
            # A wait of a second or more is noted for the run (``ragscore status``, the live progress): waiting on the
            # limit or for a slot of max_in_flight, not stalled.
            check = partial(self._check_in_time, deadline)  # a wait for a slot ends at the deadline too
            held = self.in_flight.slot(check, self.state.note_wait) if self.in_flight else nullcontext()
            with held as slot:  # judge.max_in_flight
                grant = self._admitted(estimate, deadline)
                if slot is not None:  # still held after the limiter's wait, or taken again: never sent over the cap
                    self.limiter.checked(grant, slot.confirm)  # not sent (no slot in time, a stop): grant released
                sent = time.monotonic()
                completion = self.provider.redacted(self.provider.complete(messages, params))
                took_ms = _ms_since(sent)
        except ProviderError as exc:  # from the provider only: the limiter raises none
            took_ms = _ms_since(sent)
            self._learn_limits(exc.headers)
            decision = self.provider.should_retry(exc)
            # A call that got no reply generated no tokens (a 429, a 5xx, a refused connection): give back the
            # tokens reserved for it, so failures do not eat the token window the next calls need.
            self.limiter.correct(grant, 0)
            if decision.kind == "rate_limit":  # pause everyone for what the provider asked, else back off
                self.limiter.pause(decision.retry_after, str(exc)[:300])
            self.state.incr(
                calls=1, call_ms=took_ms, rate_limited=int(exc.status == 429),
                unpriced_calls=int(self.price is None), release=release,
            )  # quota 429s too; an attempt of an unpriced model is one of its calls  # fmt: skip
            raise
        except BaseException:  # a limiter timeout, a task timeout, an interrupt: the hold must not outlive the call
            self.state.incr(release=release)
            raise
        estimated = completion.tokens_in + completion.tokens_out == 0  # the server reports no usage
        if estimated:  # count what the text suggests, so token and cost budgets still hold
            completion = replace(
                completion, tokens_in=prompt, tokens_out=estimate_tokens([{"content": completion.text}])
            )
        self.limiter.correct(grant, completion.tokens_in + completion.tokens_out)
        self.limiter.succeeded(grant)
        exhausted = self._learn_limits(completion.headers).exhausted_for()
        if exhausted > 0:
            self.limiter.pause(exhausted, BUDGET_AT_0)
        cost = self.price.cost(completion.tokens_in, completion.tokens_out) if self.price else 0.0
        self.state.incr(calls=1, call_ms=took_ms, tokens_in=completion.tokens_in, tokens_out=completion.tokens_out,
                        cost=cost, usage_estimated=int(estimated), unpriced_calls=int(self.price is None),
                        reset_failures=True, release=release)  # fmt: skip
        return completion

    def _admitted(self, tokens: int, deadline: float | None) -> Grant:
        """The limiter's admission of a call of ``tokens``, waiting no longer than ``max_wait_s`` nor past
        ``deadline``: JudgeTimeUp where the deadline is the bound."""
        left = left_s(deadline)
        try:
            return self.limiter.acquire(tokens, check=self._check_stopped, on_wait=self.state.note_wait, left_s=left)
        except RateLimitTimeout as exc:
            if left < self.limiter.max_wait_s:
                raise self._time_up() from exc
            raise

    def _time_up(self) -> JudgeTimeUp:
        return JudgeTimeUp(time_limit_error(Queue.JUDGE.value), provider=self.provider.name)

    def _check_in_time(self, deadline: float | None) -> None:
        """:meth:`_check_stopped`, and JudgeTimeUp once ``deadline`` has passed."""
        if left_s(deadline) <= 0:
            raise self._time_up()
        self._check_stopped()

    def _check_stopped(self) -> None:
        """Raise JudgeStopped once the run was cancelled or its breaker opened (read while a call waits)."""
        if reason := self.state.stop_reason():
            raise self._stopped(reason)

    def _stopped(self, reason: str) -> JudgeStopped:
        """The stop of a call for ``reason``, ``misconfigured`` where a run stopper's breaker gave it."""
        return JudgeStopped(reason, provider=self.provider.name, misconfigured=self.state.is_run_stopper(reason))

    def note_learned_limits(self) -> None:
        """Say the limits a provider stated in an earlier run (still below the suite's, so they apply now), as one
        stated in this run is: not a run slow for no reason given."""
        for name, limit in self.limiter.learned_below().items():
            self._say_provider_limit(name, limit, "stated in an earlier reply (kept a day after it was last stated)")

    def _learn_limits(self, headers: Mapping[str, str]) -> RateLimitInfo:
        """Lower the shared limits to what the provider states, when that is below the suite's."""
        info = RateLimitInfo.from_headers(headers)
        for name, limit in ((self.provider.requests_header_limit, info.limit_requests), ("tpm", info.limit_tokens)):
            if self.limiter.learn(name, limit):
                self._say_provider_limit(name, int(limit or 0), "states")
        return info

    def _say_provider_limit(self, name: str, limit: int, how: str) -> None:
        """Once per run and process: the summary's ``provider_{name}`` and a log line."""
        if _first_time((self.state.key, name, limit)):
            self.state.note(f"provider_{name}", limit)
            log.warning("%s %s %s = %s, below the suite's judge.%s: every worker uses %s instead",
                        self.provider.name, how, name, limit, name, limit)  # fmt: skip

    # ------------------------------------------------------------------ tenacity hooks
    def _decision(self, exc: BaseException | None) -> RetryDecision:
        if exc is None or not isinstance(exc, ProviderError):
            return RetryDecision.no()
        return self.provider.should_retry(exc)

    def _retryable(self, exc: BaseException) -> bool:
        return self._decision(exc).retry

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if self._decision(exc).kind == "rate_limit":
            return random.uniform(0, 0.1)  # the limiter's shared pause does the waiting
        return float(self._backoff(state))
