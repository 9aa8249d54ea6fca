"""The target client against a real Redis and the fake RAG server: retries, 429s, cache, breaker, limiter."""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any
from urllib.parse import quote

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.providers.ratelimit import RedisLimiter
from ragscore_workers.schemas import TargetConfig
from ragscore_workers.store import RunStore
from ragscore_workers.target import TargetClient, TargetError, TargetStopped, build_target_client
from ragscore_workers.target.client import CACHE_PREFIX
from ragscore_workers.target.endpoints import make_endpoint
from ragscore_workers.target.errors import TIME_LIMIT_ERROR, TargetTimeUp, TargetTooSlow

from ..fakes import FakeRag
from ..support import backoff_pauses

pytestmark = pytest.mark.integration


@pytest.fixture
def rag() -> Any:
    with FakeRag(limit_every=2, retry_after_s=0.6) as server:
        yield server


def _client(store: RunStore, rag: FakeRag, system: str, **config: Any):  # type: ignore[no-untyped-def]
    minute_s = config.pop("minute_s", 60.0)
    target = TargetConfig(system=system, url=rag.url(system), **config)
    return build_target_client(store.r, f"t-{uuid.uuid4().hex[:8]}", target, minute_s=minute_s)


def _ask(n: int) -> dict[str, Any]:
    return {"question": f"What does record d{n % 6} say? (question {n})", "nonce": uuid.uuid4().hex}


def test_a_transient_error_is_retried_and_counted(store: RunStore, rag: FakeRag) -> None:
    client = _client(store, rag, "flaky")
    data, cached = client.ask(_ask(1))
    assert data["answer"] == "Basalt forms when lava cools quickly. It is the most common rock of the ocean floor."
    assert cached is False
    assert rag.calls["flaky"] == 2
    counters = client.state.read()
    assert counters["calls"] == 2 and counters["retries"] == 1 and counters["failures"] == 0


def test_a_429_pauses_every_caller_for_retry_after_then_succeeds(store: RunStore, rag: FakeRag) -> None:
    client = _client(store, rag, "limited", rpm=1000)
    started = time.monotonic()
    data, _ = client.ask(_ask(2))  # the fake's first request is a 429 with retry-after 0.6
    assert data["answer"] and time.monotonic() - started >= 0.6
    assert rag.calls["limited"] == 2
    assert client.state.read()["rate_limited"] == 1


@pytest.mark.serial  # timed: at once, not after sleeping up to the question's 600 s
def test_a_429_asking_for_a_long_wait_fails_the_question_at_once_without_rpm_too(store: RunStore) -> None:
    """Without ``rpm`` there was no limiter: ``retry-after: 100000`` was slept in the worker, and the run hung, deaf
    to ``ragscore cancel``. The wait would pass the question's ``max_seconds_per_question`` (600 s by default)."""
    with FakeRag(limit_every=2, retry_after_s=100000) as slow:  # the first request gets the 429
        client = _client(store, slow, "limited")
        started = time.monotonic()
        with pytest.raises(
            TargetTooSlow, match=r"max_seconds_per_question=600 .*over the [\d.]+ s left to it .*paused by 429"
        ):
            client.ask(_ask(7))
        assert time.monotonic() - started < 10 and slow.calls["limited"] == 1


def _quick_backoff(store: RunStore, client: TargetClient) -> TargetClient:
    """``client`` with a limiter of its own whose pause after a 429 that says not how long to wait starts at 0.1 s and
    doubles up to 0.4 s (2 s up to 60 s by default)."""
    limiter = RedisLimiter(store.r, f"t-{uuid.uuid4().hex}", client.limiter.limits, backoff_429_s=(0.1, 0.4))
    return TargetClient(client.config, make_endpoint(client.config), store.r, client.state, limiter)


@pytest.mark.parametrize("retry_after_s", [0.2, None], ids=["retry-after", "no-retry-after"])
def test_429s_are_waited_out_without_using_up_the_attempts(store: RunStore, retry_after_s: float | None) -> None:
    """``attempts`` are the tries for errors (5xx, timeouts, connection errors): a rate-limited target is waited out
    (its retry-after, else a backoff), whatever its 429s' number up to ``max_429s``."""
    with FakeRag(retry_after_s=retry_after_s, throttled_first=3) as server:
        client = _quick_backoff(store, _client(store, server, "throttled", attempts=2))
        data, _ = client.ask(_ask(1))
    assert data["answer"] and server.calls["throttled"] == 4
    counters = client.state.read()
    assert counters["rate_limited"] == 3 and counters["retries"] == 3 and counters["failures"] == 0, counters


def test_429s_without_retry_after_back_off_for_every_caller_until_one_succeeds(
    store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 without retry-after paused every caller a flat 2 s, however many came in a row: a target that stayed
    saturated was asked again every 2 s. The shared pause doubles with each such 429 in a row (up to a quarter longer,
    at random), up to its longest; an answer starts it over."""
    caplog.set_level(logging.INFO, logger="ragscore_workers.providers.ratelimit")
    with FakeRag(retry_after_s=None, throttled_first=4) as server:
        client = _quick_backoff(store, _client(store, server, "throttled", cache=False))
        for n in range(2):  # each question: four 429s, then its answer
            assert client.ask(_ask(n))[0]["answer"]
    pauses = backoff_pauses(caplog.text)
    assert len(pauses) == 8, caplog.text
    for first, second, third, fourth in (pauses[:4], pauses[4:]):
        assert 0.1 <= first <= 0.125 and 0.2 <= second <= 0.25 and third == fourth == 0.4, pauses
    times = [r["t"] for r in server.requests]  # the server's clock: each try came after the pause its 429 set
    for tried, paused in ((times[:5], pauses[:4]), (times[5:], pauses[4:])):
        gaps = [later - earlier for earlier, later in pairwise(tried)]
        assert all(gap >= pause - 0.005 for gap, pause in zip(gaps, paused, strict=True)), (gaps, paused)
    assert client.state.read()["rate_limited"] == 8


def test_a_question_is_given_up_past_its_max_seconds_saying_how_long_it_was_asked_and_why(store: RunStore) -> None:
    """A target answering every try 429 with ``retry-after: 600`` held a question ``max_429s`` x 600 s. The question's
    time is bounded: a wait that would take it past ``max_seconds_per_question`` ends it at once, not retried."""
    with FakeRag(retry_after_s=1, throttled_first=100) as server:
        client = _client(store, server, "throttled", max_seconds_per_question=1.5)
        with pytest.raises(TargetTooSlow) as info:
            client.ask(_ask(1))
        tried = server.calls["throttled"]
    assert re.match(r"throttled: no answer within the target's max_seconds_per_question=1.5 \(asked for [\d.]+ s; "
                    r"[12] replies HTTP 429; the shared rate limit of target would hold this call over the [\d.]+ s "
                    r"left to it \(waited [\d.]+ s, [\d.]+ s more needed; paused by 429\); last: throttled HTTP 429: ",
                    str(info.value)), str(info.value)  # fmt: skip
    assert tried in (1, 2) and client.state.read()["failures"] == 1  # 1.5 s: one or two pauses of 1 s, not 20


def test_a_5xx_after_429s_backs_off_as_its_first_error(store: RunStore) -> None:
    """The backoff after an error grew with every try, 429s included: a 5xx after three 429s waited as a fourth
    error (4 s and more), one after twenty the longest backoff. It counts the errors alone."""
    from ragscore_workers.target import TargetClient
    from ragscore_workers.target.endpoints import make_endpoint

    waits: list[float] = []
    with FakeRag(retry_after_s=0, throttled_first=3) as server:

        def sleep(seconds: float) -> None:  # tenacity's sleep between tries: no real wait; the 4th try gets a 500
            waits.append(seconds)
            if len(waits) == 3:
                server.failing.add("throttled")
            else:
                server.failing.discard("throttled")

        client = _client(store, server, "throttled", attempts=2)
        slept = TargetClient(client.config, make_endpoint(client.config), store.r, client.state, client.limiter,
                             backoff_initial_s=0.5, sleep=sleep)  # fmt: skip
        data, _ = slept.ask(_ask(1))
    assert data["answer"] and server.calls["throttled"] == 5 and len(waits) == 4, waits
    assert all(w <= 0.1 for w in waits[:3]) and 0.5 <= waits[3] <= 1.0, waits


def test_a_question_429d_over_max_429s_fails_naming_its_429s(store: RunStore) -> None:
    with FakeRag(retry_after_s=0) as server:
        client = _client(store, server, "saturated", attempts=1, max_429s=2)
        with pytest.raises(TargetError, match=r"^3 replies HTTP 429 to this question, over the target's max_429s=2: "
                                              r"saturated HTTP 429: "):  # fmt: skip
            client.ask(_ask(0))
        assert server.calls["saturated"] == 3
        client.ask(_ask(1))  # another question is answered
    assert client.state.read()["failures"] == 1


@pytest.mark.serial  # timed: it ends by the 2 s left to its deadline, not after the 30 s pause
def test_a_question_its_tasks_deadline_stops_ends_with_the_time_limits_error_not_a_failure(store: RunStore) -> None:
    """A target task of a threads pool bounded its questions by their own max_seconds_per_question alone, past its soft
    time limit: a question paused by a 429 (retry-after 30 s) waits no longer than the 2 s left to its task's deadline,
    nor tries again; it ends with the time limit's error, which the breaker does not count (the target did not fail)."""
    with FakeRag(retry_after_s=30) as server:  # every request of question 0 gets a 429 with retry-after: 30
        client = _client(store, server, "saturated", max_seconds_per_question=60, breaker_failures=1)
        started = time.monotonic()
        with pytest.raises(TargetTimeUp, match=f"^{TIME_LIMIT_ERROR}$"):
            client.ask(_ask(0), deadline=started + 2)
        assert time.monotonic() - started < 15  # its deadline's 2 s (room on a loaded box), not the pause's 30 s
        with pytest.raises(TargetTimeUp):  # a question its deadline passed is not sent
            client.ask(_ask(1), deadline=time.monotonic())
        assert server.calls["saturated"] == 1
    assert client.state.read()["failures"] == 0


def _slept_client(store: RunStore, server: FakeRag, waits: list[float], **config: Any) -> TargetClient:
    """A client of ``server``'s ``dead`` system (every request gets HTTP 500), its sleeps noted: its first backoff is
    20 s at least (``backoff_initial_s`` 30 capped at ``backoff_max_s`` 20, plus a jitter)."""

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    client = _client(store, server, "dead", breaker_failures=10, **config)
    return TargetClient(client.config, make_endpoint(client.config), store.r, client.state, client.limiter,
                        backoff_initial_s=30, sleep=sleep)  # fmt: skip


def test_a_backoff_past_its_tasks_deadline_stops_the_question_at_once(store: RunStore) -> None:
    """A question's backoff after an error slept to its task's deadline (the judge's stopped at once), holding its
    thread for a try that could never start: it stops at once now, with the time limit's error, no failure counted."""
    waits: list[float] = []
    with FakeRag() as server:
        client = _slept_client(store, server, waits, attempts=5)
        with pytest.raises(TargetTimeUp, match=f"^{TIME_LIMIT_ERROR}$"):
            client.ask(_ask(0), deadline=time.monotonic() + 10)  # its backoff (20 s at least) ends past it
        assert (waits, server.calls["dead"]) == ([], 1), waits  # its one try, and no sleep
    assert client.state.read()["failures"] == 0


def test_a_backoff_past_its_questions_time_stops_it_at_once_saying_so(store: RunStore) -> None:
    """A backoff past the question's ``max_seconds_per_question`` slept to its end before the question stopped: it
    stops at once, TargetTooSlow saying the try it would have waited for and its last error."""
    waits: list[float] = []
    with FakeRag() as server:
        client = _slept_client(store, server, waits, attempts=5, max_seconds_per_question=10)
        reason = r"asked for \d+\.\d s; its next try, due \d+\.\d s later \(a backoff\), would start past that"
        with pytest.raises(TargetTooSlow, match=rf"max_seconds_per_question=10 \({reason}; last: .*500"):
            client.ask(_ask(0))
        assert (waits, server.calls["dead"]) == ([], 1), waits


def test_replies_are_cached_unless_the_cache_is_off(store: RunStore, rag: FakeRag) -> None:
    request = _ask(3)
    client = _client(store, rag, "exact")
    first, cached_first = client.ask(request)
    second, cached_second = client.ask(request)
    assert (cached_first, cached_second) == (False, True) and first == second
    assert rag.calls["exact"] == 1
    uncached = _client(store, rag, "exact", cache=False)
    assert uncached.ask(request) == (first, False)
    assert rag.calls["exact"] == 2


@pytest.mark.serial  # timed: cut near its 1 s timeout, not when the 30 s reply ends
def test_a_reply_that_trickles_in_is_cut_at_the_timeout(store: RunStore, rag: FakeRag) -> None:
    """httpx's timeout bounds each read: a reply sent a byte at a time held the call for as long as it lasted."""
    client = _client(store, rag, "trickle", timeout_s=1.0, attempts=1)
    started = time.monotonic()
    with pytest.raises(TargetError, match=r"trickle: timed out after 1 s \(the target's timeout_s\)"):
        client.ask(_ask(4))
    assert time.monotonic() - started < 8.0  # the whole reply takes 30 s; a cut 1 s in has room on a loaded box
    assert client.state.read()["failures"] == 1


def test_the_breaker_opens_after_consecutive_failures_and_stops_calls(store: RunStore, rag: FakeRag) -> None:
    client = _client(store, rag, "dead", attempts=2, breaker_failures=2)
    for n in range(2):
        with pytest.raises(TargetError, match="dead HTTP 500"):
            client.ask(_ask(n))
    with pytest.raises(TargetStopped, match="circuit breaker open after 2 consecutive failed calls to target dead"):
        client.ask(_ask(9))
    assert rag.calls["dead"] == 4  # 2 questions x 2 attempts, nothing after the breaker opened
    assert client.state.read()["failures"] == 2


def test_a_4xx_is_not_retried_and_the_token_never_shows(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TOKEN", "tok-wrong-123456")
    with FakeRag(token="tok-right-654321") as server:
        client = _client(store, server, "exact", auth_env="RAG_TOKEN")
        with pytest.raises(TargetError) as info:
            client.ask(_ask(4))
        assert server.calls["exact"] == 1
    assert "HTTP 401" in str(info.value) and "tok-wrong" not in str(info.value)
    assert server.requests[0]["authorization"] == "Bearer tok-wrong-123456"


@pytest.mark.parametrize(
    ("method", "auth_in", "name"),
    [("POST", "query", "key"), ("POST", "body", "api_key"), ("GET", "query", "key"), ("GET", "body", "api_key")],
)
def test_a_token_sent_in_the_query_or_body_reaches_the_target_and_is_never_logged_or_cached_in_clear(
    store: RunStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    method: str,
    auth_in: str,
    name: str,
) -> None:
    """APIs keyed by ``?key=`` or ``{"api_key": ...}`` (``auth_in``); a GET's body is its query string. The url's own
    query (``?version=2``) is kept: httpx's ``params=`` replaced it, so a GET target lost it. httpx logs each url at
    INFO, the token in it: redacted there."""
    token = "k/+=42-secret"  # percent-encoded in a query string
    monkeypatch.setenv("RAG_QUERY_TOKEN", token)
    caplog.set_level(logging.DEBUG)
    place = "query" if method == "GET" else auth_in
    with FakeRag(token=token, token_in=f"{place}:{name}") as server:
        target = TargetConfig(system="exact", url=server.url("exact") + "?version=2", method=method,
                              request={"question": "{question}", "k": 2}, auth_env="RAG_QUERY_TOKEN",
                              auth_in=auth_in, auth_param=name)  # fmt: skip
        client = build_target_client(store.r, f"t-{uuid.uuid4().hex[:8]}", target)
        question = _ask(3)["question"]
        reply, _ = client.ask({"question": question, "k": 2})
        assert reply["answer"].startswith("The first public library") and len(reply["contexts"]) == 2
        (seen,) = server.requests
        assert seen["method"] == method and seen["authorization"] is None
        assert "version=2" in seen["query"], seen  # the url's own query string, kept
        assert (f"{name}=" in seen["query"]) == (place == "query"), seen
        if method == "POST":
            assert (name in seen["body"]) == (place == "body"), seen
        again, _ = client.ask({"question": question, "k": 2})  # cached: the rendered request, without the token
        assert again == reply and len(server.requests) == 1
    cached = [store.r.get(key) or "" for key in store.r.scan_iter(CACHE_PREFIX + "*")]  # replies: JSON text
    assert client.cache_key({"question": question, "k": 2}).startswith(CACHE_PREFIX) and cached
    assert not any(token in value or quote(token, safe="") in value for value in cached)
    assert "HTTP Request: " in caplog.text  # httpx's line per request, the url in it: redacted
    assert token not in caplog.text and quote(token, safe="") not in caplog.text


def test_a_missing_token_is_a_config_error(store: RunStore, rag: FakeRag, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_RAG_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="set the environment variable NO_SUCH_RAG_TOKEN"):
        _client(store, rag, "exact", auth_env="NO_SUCH_RAG_TOKEN")


def test_the_shared_limiter_keeps_every_window_within_rpm(store: RunStore, rag: FakeRag) -> None:
    # rpm 3 over a 1-second "minute" (plus the limiter's 2% margin), 8 calls from 4 threads.
    clients = [_client(store, rag, "exact", rpm=3, minute_s=1.0, cache=False) for _ in range(2)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: clients[n % 2].ask(_ask(n)), range(8)))
    times = sorted(r["t"] for r in rag.requests)
    assert len(times) == 8
    # arrivals, not grants: a loaded machine can hold a granted call ~0.1 s before it is sent, so a window is read
    # 0.1 s short of a second (a limiter that let 4 through in one window sends them within a few ms)
    for i, start in enumerate(times):
        assert sum(1 for t in times[i:] if t - start < 0.9) <= 3, times
    assert times[-1] - times[0] >= 1.8  # 8 calls at 3 a second need at least two full windows


def test_an_even_pace_holds_a_targets_calls_to_rpm_over_60_a_second(store: RunStore, rag: FakeRag) -> None:
    """``pace: even`` on a target: rpm 120 lets 2 calls a second through, not the whole minute's at once."""
    clients = [_client(store, rag, "exact", rpm=120, pace="even", cache=False) for _ in range(2)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: clients[n % 2].ask(_ask(n)), range(6)))
    times = sorted(r["t"] for r in rag.requests)
    assert len(times) == 6
    for i, start in enumerate(times):  # arrivals, read 0.1 s short of a second (as above)
        assert sum(1 for t in times[i:] if t - start < 0.9) <= 2, times
    assert times[-1] - times[0] >= 1.8  # 6 calls at 2 a second need at least two full seconds after the first two


def test_a_wait_past_a_max_seconds_above_600_fails_as_too_slow_naming_it(store: RunStore, rag: FakeRag) -> None:
    """A question's time had two bounds: its ``max_seconds_per_question`` and the limiter's own 600 s. Set above 600,
    a longer wait failed as another error (TargetWaitTooLong) naming ``max_wait_s=600 s``, no setting of the suite's.
    One bound now, one error: TargetTooSlow naming the target's limit, at once and not retried."""
    client = _client(store, rag, "exact", max_seconds_per_question=800)
    client.limiter.pause(1000.0, "429")  # every caller waits, as after a 429 with retry-after: 1000
    with pytest.raises(TargetTooSlow, match=r"^exact: no answer within the target's max_seconds_per_question=800 "
                                            r"\(asked for [\d.]+ s; .* over the [\d.]+ s left to it "):  # fmt: skip
        client.ask(_ask(1))
    assert client.limiter.paused_for() > 200, "it waited out its 800 s"  # at once: nothing waited
    assert rag.calls.get("exact", 0) == 0
    assert client.state.read()["retries"] == 0


def test_a_question_waiting_for_the_rate_limit_stops_soon_once_its_run_was_cancelled(
    store: RunStore, rag: FakeRag
) -> None:
    """The cancel check ran before the limiter's wait only: a question paused by a 429 was still sent after
    ``ragscore cancel``; then, read once admitted, it still waited out the whole pause."""
    from ragscore_workers.store import RunState

    client = _client(store, rag, "exact", rpm=1000)
    run_id = client.state.meta_key.split(":")[2]
    store.create_run(run_id, {"state": RunState.RUNNING})
    client.limiter.pause(300.0, "429")  # every caller waits, as after a 429 with retry-after: 300
    threading.Timer(0.5, store.set_state, args=(run_id, RunState.CANCELLED)).start()
    with pytest.raises(TargetStopped, match="run cancelled"):
        client.ask(_ask(5))
    assert client.limiter.paused_for() > 0, "it waited out the pause"  # about 1.5 s in: a check a second
    assert rag.calls.get("exact", 0) == 0


def test_a_question_stopped_right_after_the_limiter_admitted_it_gives_its_slot_back(
    store: RunStore, rag: FakeRag
) -> None:
    """A question admitted by the shared limiter, then stopped before it was sent (another thread's failure opened
    the breaker), kept its slot in the window for a minute: other runs asking the same target were held back."""
    client = _client(store, rag, "exact", rpm=1)
    client.limiter.pause(0.8, "429")  # a wait shorter than a check: admitted, then stopped
    threading.Timer(0.3, client.state.record_failure, args=(1, "HTTP 500")).start()
    with pytest.raises(TargetStopped, match="circuit breaker open"):
        client.ask(_ask(5))
    assert rag.calls.get("exact", 0) == 0
    grant, wait = client.limiter.try_acquire(0)
    assert grant is not None, f"the stopped question still holds the window ({wait:.1f} s to wait)"


def test_a_sent_question_that_failed_keeps_its_slot(store: RunStore, rag: FakeRag) -> None:
    """A 500 is a request the target received: it keeps its slot in the window."""
    client = _client(store, rag, "dead", rpm=1, attempts=1)
    with pytest.raises(TargetError, match="dead HTTP 500"):
        client.ask(_ask(1))
    assert rag.calls["dead"] == 1
    grant, wait = client.limiter.try_acquire(0)
    assert grant is None and wait > 30


def test_two_systems_behind_one_url_told_apart_by_headers_or_token_never_share_replies(
    store: RunStore, rag: FakeRag, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A/B behind one endpoint (a variant header, another tenant's token): the cache once served A's reply to B."""
    request = _ask(5)
    url = rag.url("exact")
    monkeypatch.setenv("TOKEN_A", "token-a-0123456789")
    monkeypatch.setenv("TOKEN_B", "token-b-0123456789")
    run_id = f"t-{uuid.uuid4().hex[:8]}"
    configs = [
        TargetConfig(system="a", url=url, headers={"X-Variant": "a"}),
        TargetConfig(system="b", url=url, headers={"X-Variant": "b"}),
        TargetConfig(system="c", url=url, headers={"X-Variant": "b"}, auth_env="TOKEN_A"),
        TargetConfig(system="d", url=url, headers={"X-Variant": "b"}, auth_env="TOKEN_B"),
    ]
    cached = [build_target_client(store.r, run_id, config).ask(request)[1] for config in configs]
    assert cached == [False, False, False, False]
    assert rag.calls["exact"] == 4
    again = build_target_client(store.r, run_id, configs[1].model_copy(update={"system": "b2"})).ask(request)
    assert again[1] is True and rag.calls["exact"] == 4  # the same headers and no token: the cached reply


@pytest.mark.parametrize("pad", range(160, 178, 4))
def test_a_token_quoted_near_the_cut_of_an_error_body_never_shows(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, pad: int
) -> None:
    """The error body was cut to 200 characters before the token was redacted: a token across the cut leaked."""
    secret = "sk-live-0123456789abcdef"
    monkeypatch.setenv("RAG_TOKEN", secret)
    with FakeRag() as server:
        client = _client(store, server, "echo", auth_env="RAG_TOKEN", attempts=1)
        with pytest.raises(TargetError) as info:
            client.ask({"question": "q", "pad": pad})
    assert "HTTP 401" in str(info.value)
    assert "sk-live" not in str(info.value) and "sk-l" not in str(info.value)


def test_a_reply_quoting_the_token_is_kept_and_cached_without_it(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAG_TOKEN", "sk-live-0123456789abcdef")
    with FakeRag() as server:
        client = _client(store, server, "debug", auth_env="RAG_TOKEN")
        reply, cached = client.ask(_ask(5))
    assert reply["echo"] == {"Bearer ***": ["Bearer ***"]} and reply["answer"] and cached is False
    cached_replies = [store.r.get(key) or "" for key in store.r.scan_iter(CACHE_PREFIX + "*")]
    assert cached_replies and not any("sk-live" in value for value in cached_replies)


def test_a_callable_targets_error_never_shows_its_token(store: RunStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LIB_KEY", "lib-key-0123456789")
    target = TargetConfig(system="lib", callable="tests.fakes.fake_rag:callable_quoting_its_key",
                          auth_env="FAKE_LIB_KEY")  # fmt: skip
    client = build_target_client(store.r, f"t-{uuid.uuid4().hex[:8]}", target)
    with pytest.raises(TargetError) as info:
        client.ask({"question": "q"})
    assert "upstream refused key ***" in str(info.value) and "lib-key" not in str(info.value)


def test_a_reply_json_cannot_hold_as_it_is_is_still_used_and_cached(store: RunStore) -> None:
    """Caching the reply (json.dumps) failed the question for a lone surrogate or a datetime no path reads, once it
    had been accepted; with ``cache: false`` the same reply was scored."""
    from ragscore_workers.schemas import Row
    from ragscore_workers.target import fill_row

    target = TargetConfig(system="lib", callable="tests.fakes.fake_rag:callable_with_extras")
    client = build_target_client(store.r, f"t-{uuid.uuid4().hex[:8]}", target)
    use = lambda data: fill_row(Row(id="q"), target, data)  # noqa: E731
    first, cached = client.ask({"question": "q"}, use)
    again, cached_again = client.ask({"question": "q"}, use)
    assert (cached, cached_again) == (False, True)
    assert first.answer == again.answer and first.answer.startswith("Paris")
    assert [c.text for c in again.contexts] == ["Paris is in France."]


def test_a_callable_targets_error_never_shows_a_key_of_the_workers_environment(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library target runs in the worker, with its environment: its LLM client's error quoted that key (no
    ``auth_env`` names it), and the item's error kept it in the results."""
    monkeypatch.setenv("FAKE_LLM_API_KEY", "llm-key-0123456789")
    target = TargetConfig(system="lib", callable="tests.fakes.fake_rag:callable_quoting_its_llm_key")
    client = build_target_client(store.r, f"t-{uuid.uuid4().hex[:8]}", target)
    with pytest.raises(TargetError) as info:
        client.ask({"question": "q"})
    assert "generate?key=***" in str(info.value) and "llm-key" not in str(info.value)


def test_a_redirect_says_where_it_points_and_is_not_followed(store: RunStore, rag: FakeRag) -> None:
    """A 307 (a missing trailing slash, http -> https) was read as the reply: "the reply is not JSON"."""
    client = _client(store, rag, "moved")
    with pytest.raises(TargetError) as info:
        client.ask(_ask(1))
    assert "moved HTTP 307: redirected to http://127.0.0.1:" in str(info.value) and "/exact/" in str(info.value)
    assert rag.calls["moved"] == 1 and rag.calls["exact"] == 0  # final: not retried, not followed


def test_a_reply_in_the_charset_its_content_type_declares_is_read(store: RunStore, rag: FakeRag) -> None:
    """ISO-8859-1 bytes (declared) were "the reply is not JSON": json.loads only guesses UTF-8/16/32."""
    data, _ = _client(store, rag, "latin1").ask(_ask(1))
    assert data["answer"] == "Caf\u00e9 cr\u00e8me"
    # UTF-8 labelled ISO-8859-1 (a servlet's default): JSON is UTF-8, read as such, not garbled into "CafÃ©"
    data, _ = _client(store, rag, "mislabelled").ask(_ask(1))
    assert data["answer"] == "Caf\u00e9 \u2615"


def test_a_long_token_quoted_at_the_start_of_a_reply_that_is_not_json_never_shows(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start of a non-JSON reply was cut to 400 bytes before redaction: a long token (a JWT is hundreds of
    characters) quoted near the start crossed the cut and its first characters showed in the error."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    secret = "eyJ" + "x" * 797  # a bearer JWT's length

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            body = f"debug: {self.headers['authorization']}".encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("RAG_TOKEN", secret)
    try:
        target = TargetConfig(system="jwt", url=f"http://127.0.0.1:{server.server_port}/ask", auth_env="RAG_TOKEN",
                              attempts=1, cache=False)  # fmt: skip
        client = build_target_client(store.r, f"t-{uuid.uuid4().hex[:8]}", target)
        with pytest.raises(TargetError) as info:
            client.ask({"question": "q"})
    finally:
        server.shutdown()
        server.server_close()
    assert "not JSON" in str(info.value) and "***" in str(info.value)
    assert "eyJ" not in str(info.value)
