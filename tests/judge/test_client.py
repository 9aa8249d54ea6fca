"""The judge client against the fake provider and real Redis: retries, 429 pauses, header tightening,
circuit breaker, cache, budget and counters."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import CodeType, FrameType
from typing import Any

import httpx
import pytest
import redis

from ragscore_workers.http_body import ATTEMPT_TIMEOUTS
from ragscore_workers.providers import (
    Budget,
    CompletionParams,
    JudgeClient,
    JudgeStopped,
    ProviderError,
    RateLimitTimeout,
    RequestTooLargeError,
    RetryPolicy,
    RunJudgeState,
    build_client,
    estimate_tokens,
)
from ragscore_workers.providers.inflight import LEASE_S
from ragscore_workers.providers.ratelimit import RedisLimiter
from ragscore_workers.providers.run_state import HOLD_MARGIN_S, STOP_READ_EVERY_S
from ragscore_workers.schemas import JudgeConfig

from ..fakes import FakeProvider
from ..support import backoff_pauses, closed_port, until

PARAMS = CompletionParams(temperature=0.0, max_tokens=16)
FAST = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05}


def _client(rclient: redis.Redis, fake: FakeProvider, model: str, *, rpm: int | None = None,
            tpm: int | None = None, attempts: int = 5, breaker: int = 5, **kw: Any) -> JudgeClient:  # fmt: skip
    config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=rpm, tpm=tpm)
    retry = RetryPolicy(attempts=attempts, breaker_failures=breaker, **FAST)
    return build_client(rclient, uuid.uuid4().hex[:12], config, timeout_s=1.0, retry=retry, **kw)


def _ask(client: JudgeClient, text: str, attempt: int = 0) -> tuple[str, bool]:
    completion, cached = client.complete([{"role": "user", "content": text}], PARAMS, template_version="t/v1",
                                         attempt=attempt)  # fmt: skip
    return completion.text, cached


def test_transient_errors_are_retried_with_backoff_then_succeed(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    client = _client(rclient, fake, model)
    assert _ask(client, "[[fault=500:1]] [[fault=x]] ok [[rating=4]]") == ("4", False)
    fake.fail_next("timeout")
    fake.fail_next("disconnect")
    fake.fail_next("malformed")
    assert _ask(client, "second [[rating=2]]") == ("2", False)
    counts = client.state.read()
    assert fake.stats()["requests"] == 6 and fake.stats()["ok"] == 2
    assert counts["calls"] == 6 and counts["retries"] == 4 and counts["failures"] == 0
    assert counts["tokens_out"] == 2 and counts["tokens_in"] == fake.stats()["tokens_in"]


def test_every_attempt_of_a_model_without_a_price_is_an_unpriced_call(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """``calls`` counts failed attempts too: counting only the replies, one retry made the console's judge line read
    'cost 0.0000 (1 calls without a price not counted)', as if the other call had been priced, not 'cost -'."""
    from orchestrator.reports.console import judge_line
    from ragscore_workers.schemas import RunSummary

    client = _client(rclient, fake, model)  # no price for the model
    assert _ask(client, "[[fault=500:1]] ok [[rating=4]]") == ("4", False)
    counts = client.state.read()
    assert (counts["calls"], counts["retries"], counts["unpriced_calls"]) == (2, 1, 2)
    line = judge_line(RunSummary.model_validate({"run_id": "r1", "items": 1, "scored": 1, "judge": counts}))
    assert line is not None and "cost - (no price for the judge model" in line, line


def test_retries_are_bounded_and_errors_are_never_cached(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model, attempts=3)
    with pytest.raises(ProviderError, match="HTTP 503"):
        _ask(client, "[[fault=503:3]] [[rating=4]]")
    assert fake.stats()["requests"] == 3
    assert client.state.read()["failures"] == 1
    # The failure was not cached: asking again calls the provider, which has recovered.
    assert _ask(client, "[[fault=503:3]] [[rating=4]]") == ("4", False)
    assert fake.stats()["requests"] == 4


def test_a_final_error_is_not_retried(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model)
    fake.fail_next("quota")
    with pytest.raises(ProviderError, match="quota"):
        _ask(client, "[[rating=4]]")
    state = client.state.read()
    assert fake.stats()["requests"] == 1 and state["retries"] == 0
    assert state["rate_limited"] == 1  # a 429 received, though it said the quota is gone and was not retried


def test_groqs_rate_limit_429_is_waited_out_though_it_links_to_billing(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """Groq's ordinary 429 ends "Upgrade to Dev Tier today at https://console.groq.com/settings/billing": read
    as a spent quota, it was never retried and five in a row stopped the whole run."""
    client = _client(rclient, fake, model, breaker=2)
    fake.fail_next("groq_429", 3)
    assert _ask(client, "[[rating=4]]") == ("4", False)
    assert fake.stats()["fault:groq_429"] == 3 and client.state.read()["failures"] == 0


def test_what_no_wait_can_cure_is_final_and_what_capacity_can_is_retried(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    client = _client(rclient, fake, model)
    fake.fail_next("too_large_429")  # OpenAI: one request over the per-minute token limit
    with pytest.raises(ProviderError, match="Request too large"):
        _ask(client, "a [[rating=4]]")
    assert fake.stats()["requests"] == 1 and client.limiter.paused_for() == 0  # no retry, nobody paused
    fake.fail_next("498", 2)  # Groq's flex tier out of capacity: back off and retry
    assert _ask(client, "b [[rating=2]]") == ("2", False)


def test_a_prompt_too_long_for_the_model_fails_its_item_without_opening_the_breaker(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """Three over-long rows in a row (400 context_length_exceeded, Groq's 413) stopped every later, valid item."""
    client = _client(rclient, fake, model, breaker=2)
    for kind in ("context_length", "413", "context_length"):
        fake.fail_next(kind)
        with pytest.raises(ProviderError, match="reduce"):
            _ask(client, f"long {kind} [[rating=4]]")
    assert fake.stats()["requests"] == 3  # none was retried
    assert _ask(client, "short [[rating=2]]") == ("2", False)
    state = client.state.read()
    assert state["failures"] == 3 and not state.get("breaker")  # failed for good, counted, but not the breaker's
    assert int(rclient.hget(client.state.key, client.state.failing_field) or 0) == 0
    fake.fail_next("400", 2)  # any other 400 (a wrong parameter) still counts: every item would fail alike
    for i in range(2):
        with pytest.raises(ProviderError):
            _ask(client, f"bad {i}")
    with pytest.raises(JudgeStopped):
        _ask(client, "after [[rating=4]]")


def test_a_429_longer_than_max_wait_says_what_the_provider_said(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """A tokens-per-day 429 ("try again in 12m53.76s") failed as "would hold this call over max_wait_s", and
    nothing said it was the provider's daily limit."""
    client = _client(rclient, fake, model, max_wait_s=1.0)
    fake.injected_retry_after_s = 5
    fake.fail_next("groq_429")
    with pytest.raises(RateLimitTimeout, match="over max_wait_s=1 s .*paused by groq HTTP 429: Rate limit reached"):
        _ask(client, "[[rating=4]]")


def test_a_429_pauses_every_caller_for_its_retry_after(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model)
    other = _client(rclient, fake, model)  # another worker: same provider, model and key
    fake.injected_retry_after_s = 2
    fake.fail_next("429")
    first: list[tuple[str, bool]] = []
    thread = threading.Thread(target=lambda: first.append(_ask(client, "a [[rating=4]]")))
    thread.start()
    deadline = time.monotonic() + 60
    while other.limiter.paused_for() == 0 and time.monotonic() < deadline:  # the first client got its 429
        time.sleep(0.01)
    started = time.monotonic()  # before the pause is read: what is left of it at the ask is no more than it
    pause = other.limiter.paused_for()
    assert _ask(other, "b [[rating=2]]") == ("2", False)  # held by the shared pause, not refused
    assert 1.0 < pause and time.monotonic() - started >= pause - 0.1
    thread.join()
    assert first == [("4", False)]
    counts = client.state.read()
    assert counts["rate_limited"] == 1 and counts["retries"] == 1 and counts["calls"] == 2
    assert other.state.read()["calls"] == 1 and other.state.read()["rate_limited"] == 0
    assert fake.stats()["ok"] == 2


def test_429s_saying_not_how_long_to_wait_back_off_across_workers_until_a_call_succeeds(
    rclient: redis.Redis, fake: FakeProvider, model: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 without retry-after, a "try again in" or a budget at 0 paused every worker a flat 2 s, however many came
    in a row. Now the pause doubles with each such 429 in a row, whichever worker got it (up to a quarter longer, at
    random; up to its longest); a reply starts it over. The same mechanism as a target's (the limiter's)."""
    caplog.set_level(logging.INFO, logger="ragscore_workers.providers.ratelimit")
    fake.injected_retry_after_s = None
    one, other = _client(rclient, fake, model, attempts=1), _client(rclient, fake, model)  # two workers
    for client in (one, other):  # pauses from 0.1 s up to 0.4 s (2 s up to 60 s by default)
        client.limiter = RedisLimiter(rclient, client.limiter.key, client.limiter.limits, backoff_429_s=(0.1, 0.4))
    with pytest.raises(ProviderError, match="HTTP 429"):
        _ask(one, "a [[fault=429:1]] [[rating=4]]")  # its only attempt: one 429
    assert _ask(other, "b [[fault=429:3]] [[rating=2]]") == ("2", False)  # three more in a row, then a reply
    assert _ask(other, "c [[fault=429:1]] [[rating=3]]") == ("3", False)  # after the reply: the first again
    pauses = backoff_pauses(caplog.text)
    assert len(pauses) == 5, caplog.text
    assert 0.1 <= pauses[0] <= 0.125 and 0.2 <= pauses[1] <= 0.25 and pauses[2] == pauses[3] == 0.4, pauses
    assert 0.1 <= pauses[4] <= 0.125, pauses
    assert fake.stats()["fault:429"] == 5


def test_a_429_without_retry_after_pauses_for_what_its_message_says(
    rclient: redis.Redis, keys: str, model: str
) -> None:
    """Gateways and some servers send no ``retry-after`` (nor, here, any x-ratelimit header): the wait comes
    from "try again in 3.9s" instead of a fixed guess (2 s would retry inside the window and be refused again)."""
    with FakeProvider(rpm=2, period_s=4.0, api_key=keys, retry_after=False, limit_headers=False) as fake:
        auth = {"Authorization": f"Bearer {keys}"}
        for i in range(2):  # another tenant of the key fills the window
            body = {"model": model, "messages": [{"role": "user", "content": f"other {i}"}]}
            assert httpx.post(fake.openai_base_url + "/chat/completions", headers=auth, json=body).status_code == 200
        client = _client(rclient, fake, model)  # no rpm of its own: only the provider's answers tell
        assert _ask(client, "mine [[rating=4]]") == ("4", False)
        stats = fake.stats()
    # what the provider saw, not the wall time (a loaded box asks late in the window, and is told to wait less):
    # one 429, its retry sent once the window had room (one sent inside it is refused again)
    assert stats["rate_limited"] == 1 and stats["ok"] == 3
    assert client.state.read()["rate_limited"] == 1 and client.state.read()["calls"] == 2


def test_a_suite_that_overstates_the_providers_limit_learns_it_from_the_headers(
    rclient: redis.Redis, keys: str, model: str
) -> None:
    """OpenAI states its per-minute limits in every reply: told 8 per window against a provider that allows 4,
    the workers fall back to 4 after the first reply instead of learning it from 429s."""
    with FakeProvider(rpm=4, period_s=3.0, api_key=keys) as fake:
        config = JudgeConfig(provider="openai", model=model, base_url=fake.openai_base_url, rpm=8, tpm=None)
        clients = [build_client(rclient, "r1", config, retry=RetryPolicy(**FAST), minute_s=3.0) for _ in range(2)]
        assert _ask(clients[0], "first [[rating=4]]") == ("4", False)
        assert clients[1].limiter.learned() == {"rpm": 4} and clients[0].state.read()["provider_rpm"] == 4
        threads = [threading.Thread(target=_ask, args=(clients[n % 2], f"call {n} [[rating=2]]")) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = fake.stats()
    assert stats["ok"] == 7 and stats.get("rate_limited", 0) == 0  # told 8, 3 of the 6 would have been refused
    # The next run (the provider's headers gone, as behind some gateways) still applies the stated 4, and its
    # summary says so: it did not run at a fraction of its --rpm with no reason given.
    later = build_client(rclient, "r2", config.model_copy(update={"rpm": 600}), retry=RetryPolicy(**FAST))
    assert later.state.read()["provider_rpm"] == 4
    assert build_client(rclient, "r3", config.model_copy(update={"rpm": 3})).state.read().get("provider_rpm") is None


def test_the_shared_limit_keeps_concurrent_callers_under_the_providers_limit(
    rclient: redis.Redis, keys: str, model: str
) -> None:
    with FakeProvider(rpm=6, period_s=2.0, api_key=keys) as fake:
        config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=6, tpm=None)
        clients = [build_client(rclient, "r1", config, retry=RetryPolicy(**FAST), minute_s=2.0) for _ in range(3)]
        texts: list[str] = []
        lock = threading.Lock()

        def work(client: JudgeClient, n: int) -> None:
            for i in range(4):
                text, _ = _ask(client, f"thread {n} call {i} [[rating=2]]")
                with lock:
                    texts.append(text)

        threads = [threading.Thread(target=work, args=(clients[n % 3], n)) for n in range(4)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        stats = fake.stats()
    assert texts == ["2"] * 16
    assert stats["ok"] == 16 and stats.get("rate_limited", 0) <= 1  # 16 calls at 6 per 2 s: paced, not refused
    assert elapsed >= 4.0  # 16 calls need at least two full windows after the first six


def test_headers_at_zero_pause_callers_before_the_provider_refuses(rclient: redis.Redis, keys: str, model: str) -> None:
    with FakeProvider(rpm=2, period_s=2.0, api_key=keys) as fake:
        client = _client(rclient, fake, model)  # our own limit unset: only the headers warn us
        for i in range(3):
            assert _ask(client, f"call {i} [[rating=4]]")[0] == "4"
        stats = fake.stats()
    assert stats["ok"] == 3 and stats.get("rate_limited", 0) == 0


def _open_the_breaker_with_500s(client: JudgeClient, fake: FakeProvider, n: int) -> JudgeStopped:
    """``n`` calls answered 500 (``client``'s breaker_failures, one attempt each), then the stop of the next call."""
    fake.fail_next("500", n)
    for i in range(n):
        with pytest.raises(ProviderError):
            _ask(client, f"item {i}")
    with pytest.raises(JudgeStopped, match=f"circuit breaker open after {n} consecutive failed judge calls") as stop:
        _ask(client, f"item {n}")
    return stop.value


def test_circuit_breaker_stops_judging_after_n_consecutive_failures(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    client = _client(rclient, fake, model, attempts=1, breaker=3)
    stop = _open_the_breaker_with_500s(client, fake, 3)
    assert not stop.misconfigured  # an outage may pass: its items are stopped, not errors
    assert fake.stats()["requests"] == 3  # the fourth never reached the provider
    state = client.state.read()
    assert state["failures"] == 3 and "circuit breaker" in state["breaker"]


@pytest.mark.parametrize("budget", [None, Budget(max_tokens=10**9)], ids=["stop-read", "reserve"])
def test_a_refused_key_stops_its_call_and_every_later_one_as_misconfigured(
    rclient: redis.Redis, keys: str, model: str, monkeypatch: pytest.MonkeyPatch, budget: Budget | None
) -> None:
    """The call a 401 invalid_api_key answers, and every later call of the run (another worker's client, which reads
    the breaker from Redis: at a stop's read, or at a budgeted call's reserve), raise JudgeStopped ``misconfigured``
    with the variable to check: each item records it as an error. Seen failing before: the first call raised the
    ProviderError, the later ones a JudgeStopped without the flag (their items counted "stopped", unscorable)."""
    monkeypatch.setenv("GROQ_API_KEY", "gsk-WRONG-KEY-0123456789")
    run_id = uuid.uuid4().hex[:12]
    with FakeProvider(api_key=keys) as fake:
        config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=None, tpm=None)
        first, later = (build_client(rclient, run_id, config, timeout_s=1.0, budget=budget) for _ in range(2))
        stops = []
        for client in (first, later):
            with pytest.raises(JudgeStopped) as stop:
                _ask(client, "item [[rating=4]]")
            stops.append(stop.value)
        assert fake.stats()["unauthorized"] == 1  # the later call never reached the provider
    assert [(s.misconfigured, str(s)) for s in stops] == [(True, str(stops[0]))] * 2
    assert str(stops[0]).endswith("check GROQ_API_KEY"), stops[0]


def test_a_refused_key_coming_back_after_the_breakers_count_opened_it_still_stops_every_later_call_as_misconfigured(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """A call sent before 3 failures in a row (500s) opened the breaker, answered 401 invalid_api_key after it: its
    call and every later one (the same client, which had read the count's reason, and another worker's) raise
    JudgeStopped ``misconfigured`` with the variable to check, the summary's reason too. Seen failing before: the
    run-stopper mark was never set (the breaker was open), so the calls after the 401 stopped as the count's
    "circuit breaker open after 3 consecutive failed judge calls", their items "stopped", not errors."""
    run_id = uuid.uuid4().hex[:12]
    config = JudgeConfig(provider="groq", model=model, base_url=fake.url, rpm=None, tpm=None)
    retry = RetryPolicy(attempts=1, breaker_failures=3, **FAST)
    client, other = (build_client(rclient, run_id, config, timeout_s=1.0, retry=retry) for _ in range(2))
    held = fake.hold = threading.Event()
    fake.fail_next("401")
    with ThreadPoolExecutor(1) as pool:
        in_flight = pool.submit(_ask, client, "sent first, refused last")
        assert until(lambda: fake.stats().get("requests") == 1, 30)
        fake.hold = None  # the 401 waits on ``held``; the next calls are answered at once
        assert not _open_the_breaker_with_500s(client, fake, 3).misconfigured  # an outage so far
        held.set()
        with pytest.raises(JudgeStopped) as refused:
            in_flight.result(timeout=30)
    stops = []
    for later in (client, other):
        with pytest.raises(JudgeStopped) as stop:
            _ask(later, "item after")
        stops.append(stop.value)
    reason = str(refused.value)
    assert reason.endswith("check GROQ_API_KEY") and "key was refused" in reason, reason
    assert [(s.misconfigured, str(s)) for s in (refused.value, *stops)] == [(True, reason)] * 3
    assert client.state.read()["breaker"] == reason
    assert fake.stats()["requests"] == 4  # none after the breaker opened


def test_a_breaker_its_count_opened_stays_open_for_a_task_that_read_it_though_a_resume_closes_it(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    """A client whose call read the breaker its count of failures opened keeps that stop (a stop once read stays
    within a run generation: a resume's tasks build their own state), though it reads the breaker again each second
    (a refused key may still make it a run stopper's) and a resume closed it meanwhile. Seen failing before: the
    re-read found the breaker closed, and the old generation's task judged again beside the resume's."""
    client = _client(rclient, fake, model, attempts=1, breaker=3)
    stop = _open_the_breaker_with_500s(client, fake, 3)
    state = client.state
    rclient.hdel(state.key, state.breaker_field, state.failing_field)  # as a resume's reset_breakers closes it
    time.sleep(STOP_READ_EVERY_S * 2)  # the next call reads the breaker again
    with pytest.raises(JudgeStopped) as again:
        _ask(client, "item after the resume closed it")
    assert str(again.value) == str(stop) and not again.value.misconfigured
    assert fake.stats()["requests"] == 3


def test_a_success_resets_the_breakers_count(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model, attempts=1, breaker=2)
    fake.fail_next("500")
    with pytest.raises(ProviderError):
        _ask(client, "a")
    _ask(client, "b [[rating=4]]")
    fake.fail_next("500")
    with pytest.raises(ProviderError):
        _ask(client, "c")
    assert _ask(client, "d [[rating=2]]") == ("2", False)  # 2 failures, but not in a row


def test_cache_serves_a_repeated_call_without_calling(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model)
    assert _ask(client, "[[reply=A||B]]") == ("A", False)
    assert _ask(client, "[[reply=A||B]]") == ("A", True)
    assert _ask(client, "[[reply=A||B]]", attempt=1) == ("B", False)  # the second sample is its own entry
    assert fake.stats()["requests"] == 2 and client.state.read()["cache_hits"] == 1
    no_cache = _client(rclient, fake, model, cache=False)
    assert _ask(no_cache, "[[reply=A||B]]") == ("B", False)
    assert fake.stats()["requests"] == 3
    # An empty reply (a server's glitch as often as an answer) is not kept for 90 days: asked again, it is called.
    assert _ask(client, "[[reply=||C]]") == ("", False)
    assert _ask(client, "[[reply=||C]]") == ("C", False)


def test_the_cache_says_which_judges_it_holds_replies_of(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    """What lets an embedded run without the judge's key be refused before its dataset is read: no reply of its judge
    (provider, endpoint, model) cached, every call would be sent. An error is not a reply."""
    client, other = _client(rclient, fake, model), _client(rclient, fake, f"{model}-other")
    fake.fail_next("400")
    with pytest.raises(ProviderError):
        _ask(client, "refused [[rating=4]]")
    assert not client.cache.holds_replies_of(client.provider.identity)
    assert _ask(client, "[[rating=4]]") == ("4", False)
    assert client.cache.holds_replies_of(client.provider.identity)
    assert not other.cache.holds_replies_of(other.provider.identity)  # another model's: none
    assert not _client(rclient, fake, model, cache=False).cache.holds_replies_of(client.provider.identity)


def test_budget_stops_new_calls_and_cost_follows_the_price_table(
    rclient: redis.Redis, fake: FakeProvider, model: str
) -> None:
    client = _client(rclient, fake, model, budget=Budget(max_tokens=120), prices={model: (1.0, 2.0)})
    asked = 0
    with pytest.raises(JudgeStopped, match=r"^budget reached: the next judge call could pass the token budget of 120 "
                       r"\(--max-tokens, or the judge metrics' max_tokens_total\)$"):  # fmt: skip
        for i in range(50):
            _ask(client, "x" * 60 + f" {i} [[rating=4]]")  # ~21 + 4 tokens in, 1 out at the fake's 4 characters
            asked += 1
    state = client.state.read()
    assert state["cost"] == pytest.approx((state["tokens_in"] * 1.0 + state["tokens_out"] * 2.0) / 1e6)
    assert fake.stats()["requests"] == asked >= 2
    next_estimate = estimate_tokens([{"role": "user", "content": "x" * 60 + " 49 [[rating=4]]"}]) + PARAMS.max_tokens
    used = state["tokens_in"] + state["tokens_out"]
    assert used <= 120 < used + next_estimate  # stopped only when the next call could pass the budget
    assert state["held_tokens"] == 0 and state["budget"].startswith("budget reached: the next judge call could ")
    assert re.search(r"; when first reached: \d+ tokens used, 0 held by calls in flight, the next call up to \d+$",
                     state["budget"])  # fmt: skip
    # a hold outlives what one attempt may take (the limiter's wait, then the HTTP call): no task limit bounds it
    assert client.state.hold_s == client.limiter.max_wait_s + ATTEMPT_TIMEOUTS * 1.0 + HOLD_MARGIN_S
    assert state.get("unpriced_calls", 0) == 0
    unpriced = _client(rclient, fake, model)  # no price for the model: its calls are counted as such
    _ask(unpriced, "an unpriced question [[rating=2]]")
    assert (unpriced.state.read()["unpriced_calls"], unpriced.state.read()["cost"]) == (1, 0)
    assert rclient.zcard(client.state.holds_key) == 0


def test_a_budget_is_a_cap_however_many_calls_run_at_once(rclient: redis.Redis, model: str, keys: str) -> None:
    """16 threads start calls together against a slow provider: the run's tokens never pass the budget."""
    with FakeProvider(api_key=keys, latency_s=0.3) as slow:
        client = _client(rclient, slow, model, budget=Budget(max_tokens=150))
        stopped: list[str] = []

        def ask(i: int) -> None:
            try:
                _ask(client, f"question number {i} [[rating=2]]")
            except JudgeStopped as exc:
                stopped.append(str(exc))

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        state = client.state.read()
        assert state["tokens_in"] + state["tokens_out"] <= 150  # checked-then-called would have spent 16 calls'
        assert stopped and slow.stats()["requests"] == 16 - len(stopped) and state["held_tokens"] == 0


def test_a_request_larger_than_tpm_fails_without_a_call(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model, tpm=100)
    with pytest.raises(RequestTooLargeError, match="tpm allows 100"):
        _ask(client, "w" * 1000)
    assert fake.stats().get("requests", 0) == 0
    state = client.state.read()  # a call failed for good (counted), the item's own: not the breaker's
    assert state["failures"] == 1 and int(rclient.hget(client.state.key, client.state.failing_field) or 0) == 0


def test_counters_live_in_one_hash_per_run(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    client = _client(rclient, fake, model)
    _ask(client, "[[rating=4]]")
    raw = rclient.hgetall(client.state.key)
    assert client.state.key.startswith("ragscore:run:") and client.state.key.endswith(":judge")
    assert raw["calls"] == "1" and 0 < rclient.ttl(client.state.key)
    assert RunJudgeState(rclient, "no-such-run", ttl_s=60).read()["calls"] == 0


def test_failed_calls_give_back_the_tokens_they_reserved(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    """A 5xx (or a refused connection) generated no tokens: the token window stays free for the next calls, so
    a provider that is down does not also starve the limiter (a mistyped base_url failed slowly)."""
    client = _client(rclient, fake, model, tpm=60, attempts=2, breaker=10)
    fake.fail_next("500", 2)
    with pytest.raises(ProviderError):
        _ask(client, "item")  # two attempts, each reserved its estimate (prompt + max_tokens 16) of the 60
    grant, _ = client.limiter.try_acquire(60)
    assert grant is not None  # the whole minute's tokens are free again


def test_a_sent_call_that_failed_keeps_its_request_slot(rclient: redis.Redis, fake: FakeProvider, model: str) -> None:
    """A 5xx is a request the provider counted: only its tokens are given back, never its slot in the window."""
    client = _client(rclient, fake, model, rpm=2, attempts=2, breaker=10)
    fake.fail_next("500", 2)
    with pytest.raises(ProviderError):
        _ask(client, "item")
    assert fake.stats()["requests"] == 2
    grant, wait = client.limiter.try_acquire(0)
    assert grant is None and wait > 30  # both attempts still count for the minute


@pytest.mark.parametrize("stop", ["cancel", "breaker", "parent"])
def test_a_call_stopped_right_after_the_limiter_admitted_it_gives_its_slot_and_tokens_back(
    rclient: redis.Redis, fake: FakeProvider, model: str, stop: str
) -> None:
    """A call admitted by the shared limiter, then stopped before it was sent (its run cancelled, its breaker
    opened by another thread, its embedded run's process gone), kept its request slot and estimated tokens in the
    window for a minute: other runs on the same provider, model and key were held back for calls nobody made."""
    from ragscore_workers import die_with_parent
    from ragscore_workers.providers.run_state import ORPHANED_REASON
    from ragscore_workers.store import RunState, RunStore

    client = _client(rclient, fake, model, rpm=1, tpm=200, budget=Budget(max_tokens=10_000))
    run_id = client.state.meta_key.split(":")[2]
    store = RunStore(rclient, ttl_s=600)
    store.create_run(run_id, {"state": RunState.RUNNING})
    client.limiter.pause(0.8, "429 from the provider")  # a wait shorter than a check: admitted, then stopped
    stopping = {"cancel": lambda: store.set_state(run_id, RunState.CANCELLED),
                "breaker": lambda: client.state.record_failure(1, "HTTP 500"),
                "parent": die_with_parent._orphaned.set}[stop]  # fmt: skip  # (watch_parent's, once the parent exited)
    why = {"cancel": "run cancelled", "breaker": "circuit breaker open", "parent": ORPHANED_REASON}[stop]
    threading.Timer(0.3, stopping).start()
    try:
        with pytest.raises(JudgeStopped, match=why):
            _ask(client, "[[rating=4]]")
    finally:
        die_with_parent._orphaned.clear()
    assert fake.stats().get("requests", 0) == 0 and client.state.read()["held_tokens"] == 0
    grant, wait = client.limiter.try_acquire(200)  # the whole minute's request and tokens are free again
    assert grant is not None, f"the stopped call still holds the window ({wait:.1f} s to wait)"


def test_the_hold_of_a_call_whose_worker_was_killed_lapses(rclient: redis.Redis) -> None:
    """A worker killed mid-call (SIGKILL, out of memory, a lost host) never gave its hold back: under a tight
    budget the run's remaining calls were refused as "held by calls in flight" until a resume."""
    run_id = uuid.uuid4().hex[:12]
    killed = RunJudgeState(rclient, run_id, ttl_s=60, hold_s=1.0)
    reason, hold = killed.reserve(100, 0.0, max_cost=None, max_tokens=150)
    assert reason is None and hold is not None  # ... and its process dies here: no incr(release=hold)
    survivor = RunJudgeState(rclient, run_id, ttl_s=60, hold_s=1.0)
    reason, _ = survivor.reserve(100, 0.0, max_cost=None, max_tokens=150)
    assert reason is not None and "100 held by calls in flight" in survivor.read()["budget"]
    rclient.hdel(survivor.key, "budget")  # the first refusal's note, for the summary
    time.sleep(1.2)
    reason, second = survivor.reserve(100, 0.0, max_cost=None, max_tokens=150)
    assert reason is None and second is not None and survivor.read()["held_tokens"] == 100  # the lapsed one left
    killed.incr(release=hold)  # a late release of a lapsed hold gives nothing back twice
    assert survivor.read()["held_tokens"] == 100
    survivor.incr(calls=1, tokens_in=60, tokens_out=10, release=second)
    state = survivor.read()
    assert state["held_tokens"] == 0 and state["held_cost"] == 0.0 and rclient.zcard(survivor.holds_key) == 0


@pytest.mark.parametrize("stop", ["cancel", "breaker"])
def test_a_call_waiting_for_the_rate_limit_stops_soon_once_its_run_was_cancelled_or_its_breaker_opened(
    rclient: redis.Redis, fake: FakeProvider, model: str, keys: str, stop: str
) -> None:
    """The cancel check ran before the limiter's wait only: a call paused by a 429 for minutes was still sent
    (and paid for) after ``ragscore cancel``; then, read once admitted, it still waited out the whole pause. A
    breaker another worker's calls opened is read as soon."""
    from ragscore_workers.store import RunState, RunStore

    client = _client(rclient, fake, model, rpm=600)
    run_id = client.state.meta_key.split(":")[2]
    store = RunStore(rclient, ttl_s=600)
    store.create_run(run_id, {"state": RunState.RUNNING})
    client.limiter.pause(300.0, "429 from the provider")  # every worker waits, as after a 429 with retry-after: 300
    stopping = {"cancel": lambda: store.set_state(run_id, RunState.CANCELLED),
                "breaker": lambda: client.state.record_failure(1, "HTTP 500")}[stop]  # fmt: skip
    threading.Timer(0.5, stopping).start()
    with pytest.raises(JudgeStopped, match="run cancelled" if stop == "cancel" else "circuit breaker open"):
        _ask(client, "[[rating=4]]")
    assert client.limiter.paused_for() > 0, "it waited out the pause"  # about 1.5 s in: a check a second
    assert fake.stats().get("requests", 0) == 0 and client.state.read()["calls"] == 0


def _watch_state_reads(rclient: redis.Redis, meta_key: str, last: str) -> tuple[threading.Thread, list[float]]:
    """Redis's MONITOR in a thread: the times of the reads of the run's state (``HGET meta state``) it sees, until
    ``ECHO last``."""
    seen: list[float] = []
    ready = threading.Event()

    def watch() -> None:
        with rclient.monitor() as monitor:
            ready.set()
            while (command := monitor.next_command()) and last not in command["command"]:
                if command["command"].lower() == f"hget {meta_key} state":
                    seen.append(command["time"])

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    assert ready.wait(10)
    return thread, seen


def _threads_in(function: Callable[..., object]) -> int:
    """How many threads of this process run ``function`` now (a call waiting at the limiter sleeps in its acquire)."""
    return sum(_runs(frame, function.__code__) for frame in sys._current_frames().values())


def _runs(frame: FrameType | None, code: CodeType) -> bool:
    """Whether ``code`` is on the stack that ``frame`` tops."""
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    return frame is not None


def test_calls_waiting_at_the_rate_limit_read_their_runs_state_about_once_a_second_and_still_stop_on_a_cancel(
    rclient: redis.Redis, fake: FakeProvider, model: str, keys: str
) -> None:
    """Every thread of a task waiting out a 429's pause read the run's state each second: 32 tasks x 8 threads of a
    worker made hundreds of identical Redis reads a second. The threads of one client share one read a second."""
    from ragscore_workers.store import RunState, RunStore

    client = _client(rclient, fake, model, rpm=600)
    run_id = client.state.meta_key.split(":")[2]
    store = RunStore(rclient, ttl_s=600)
    store.create_run(run_id, {"state": RunState.RUNNING})
    client.limiter.pause(300.0, "429 from the provider")  # under max_wait_s (600 s, which a pause of 600 s can exceed)
    last = f"stop-watching-{uuid.uuid4().hex}"
    watcher, reads = _watch_state_reads(rclient, client.state.meta_key, last)
    started = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        futures = [pool.submit(_ask, client, f"item {i} [[rating=4]]") for i in range(32)]
        assert until(lambda: _threads_in(RedisLimiter.acquire) == 32, 60), "the calls never all waited at the pause"
        before = len(reads)
        assert until(lambda: len(reads) >= before + 2, 60), "the waiting calls did not check their run"
        store.set_state(run_id, RunState.CANCELLED)
        for future in futures:
            with pytest.raises(JudgeStopped, match="run cancelled"):
                future.result(timeout=60)
        stopped = time.monotonic()
    rclient.echo(last)
    watcher.join(10)
    assert client.limiter.paused_for() > 0, "they waited out the pause"  # about a second: a read a second
    waited = stopped - started  # 32 reads a second before, one per thread
    assert len(reads) <= 2 * waited + 4, f"{len(reads)} reads of the run's state in {waited:.1f} s"
    assert fake.stats().get("requests", 0) == 0 and client.state.read()["calls"] == 0


def test_a_reply_that_quotes_the_key_is_kept_and_cached_without_it(rclient: redis.Redis, keys: str, model: str) -> None:
    # A proxy or a server echoing its request may put the key in the reply: it must reach neither results nor cache.
    with FakeProvider(api_key=keys, responder=lambda prompt, nth: f"4, asked with Bearer {keys}") as echoing:
        client = _client(rclient, echoing, model)
        assert _ask(client, "rate this") == ("4, asked with Bearer ***", False)
        assert _ask(client, "rate this") == ("4, asked with Bearer ***", True)  # the cache holds it redacted


def test_an_overriding_endpoint_with_an_at_sign_in_its_path_is_noted_with_its_host(
    rclient: redis.Redis, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary notes the endpoint RAGSCORE_JUDGE_BASE_URL put in place of the suite's, its credentials hidden:
    the '@' of a Vertex AI model version in its path was read as the end of a password, and the note showed
    ``http://***@20240620:rawPredict``, no host. Only an '@' in the authority ends a userinfo."""
    vertex = f"{fake.url}/projects/p/locations/l/publishers/anthropic/models/claude-3-5-sonnet@20240620:rawPredict"
    monkeypatch.setenv("RAGSCORE_JUDGE_BASE_URL", vertex)
    config = JudgeConfig(provider="openai", model=model, base_url=fake.openai_base_url, rpm=None, tpm=None)
    assert build_client(rclient, uuid.uuid4().hex[:12], config).state.read()["base_url"] == vertex


def test_a_budget_hold_outlives_the_wait_for_a_slot_of_max_in_flight_too(rclient: redis.Redis) -> None:
    """A call holds its budget estimate, then waits for a slot of ``judge.max_in_flight`` (up to ``max_wait_s``), then
    for the limiter (as long again), then is sent: its hold must outlive all three (the slot's lease is short, renewed).
    Seen failing before: the hold was one attempt's length, and could lapse while a call that waited for both went
    out, its estimate no longer counted against the budget."""
    config = JudgeConfig(provider="openai", model="m", base_url="http://127.0.0.1:9/v1", rpm=None, tpm=None,
                         max_in_flight=2)  # fmt: skip
    client = build_client(rclient, uuid.uuid4().hex[:12], config, timeout_s=1.0, max_wait_s=30.0)
    attempt_s = 30.0 + ATTEMPT_TIMEOUTS * 1.0 + HOLD_MARGIN_S
    assert client.in_flight is not None and client.in_flight.lease_ms == LEASE_S * 1000  # short, renewed while it runs
    assert client.state.hold_s == 30.0 + attempt_s


def test_the_breaker_keeps_the_is_the_server_running_hint_of_a_refused_local_connection_whole(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The breaker's reason quotes the last error, cut short: it keeps its start and its end, where a connection
    refused on this machine asks whether the server runs. Seen failing before: the error was cut at its first 200
    characters, which ended inside the URL of an Ollama-like server (``http://localhost:11434/v1``), no hint left."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    retry = RetryPolicy(attempts=1, breaker_failures=1, **FAST)
    with closed_port() as port:
        config = JudgeConfig(provider="openai", model="llama3.1:8b", base_url=f"http://localhost:{port}/v1",
                             rpm=None, tpm=None)  # fmt: skip
        client = build_client(rclient, uuid.uuid4().hex[:12], config, timeout_s=1.0, retry=retry)
        with pytest.raises(ProviderError):
            _ask(client, "rate this")
    reason = client.state.read()["breaker"]
    assert reason.startswith("circuit breaker open after 1 consecutive failed judge calls (last: openai unreachable")
    hint = ": is the server running, on that port? (in a container, localhost is the container itself)"
    assert reason.endswith(hint + ")"), reason
