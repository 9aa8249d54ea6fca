"""The cluster-wide limiter on a real Redis: exact windows, pauses, corrections, many processes x threads."""

from __future__ import annotations

import math
import multiprocessing as mp
import random
import threading
import time
import uuid

import pytest
import redis

from ragscore_workers.providers import Limit, RedisLimiter, RequestTooLargeError, limits_per_minute
from ragscore_workers.providers.errors import RateLimitTimeout
from ragscore_workers.providers.ratelimit import PACE_LIMIT
from ragscore_workers.schemas import RATE_LIMITS, JudgeConfig
from ragscore_workers.store import redis_client

from ..support import RedisProcess


def _key() -> str:
    return f"test:{uuid.uuid4().hex[:10]}"


def test_the_limiter_names_its_limits_as_the_judge_config_does() -> None:
    """The names were spelled out in the limiter, the store's wait counters and the progress note apart; each
    value is named by its own argument, whatever the order of RATE_LIMITS (a name taken from it by position named
    rpm=1 "tpm" once its order changed)."""
    limits = limits_per_minute(rpm=1, tpm=2, rpd=3, tpd=4, minute_s=1.0, margin=0.0)
    assert {lim.name: (lim.limit, lim.per, lim.period_s) for lim in limits} == {
        "rpm": (1, "requests", 1.0), "tpm": (2, "tokens", 1.0),
        "rpd": (3, "requests", 1440.0), "tpd": (4, "tokens", 1440.0),
    }  # fmt: skip
    assert {lim.name for lim in limits} == set(RATE_LIMITS)
    assert set(RATE_LIMITS) <= set(JudgeConfig.model_fields)


@pytest.mark.parametrize(("rpm", "per_second"), [(1, 1), (60, 1), (61, 2), (600, 10)])
def test_an_even_pace_adds_rpm_over_60_a_second_and_nothing_else(rpm: int, per_second: int) -> None:
    """``pace: even`` adds ceil(rpm / 60) requests per second and :data:`PACE_MARGIN` (1.05 s); tokens are not
    paced, and without an rpm there is nothing to pace."""
    burst = limits_per_minute(rpm=rpm, tpm=1000, minute_s=60.0)
    even = limits_per_minute(rpm=rpm, tpm=1000, pace="even", minute_s=60.0)
    paced = even.pop()
    assert even == burst and (paced.limit, paced.per, paced.name) == (per_second, "requests", PACE_LIMIT)
    assert paced.period_s == pytest.approx(1.05)
    assert limits_per_minute(tpm=1000, pace="even") == limits_per_minute(tpm=1000)
    with pytest.raises(ValueError, match="pace must be 'burst' or 'even', got 'steady'"):
        limits_per_minute(rpm=rpm, pace="steady")  # type: ignore[arg-type]


def test_window_admits_up_to_the_limit_then_says_how_long_to_wait(rclient: redis.Redis) -> None:
    limiter = RedisLimiter(rclient, _key(), [Limit(3, 10.0, "requests", "rpm")])
    t0 = 1_000_000
    for i in range(3):
        grant, wait = limiter.try_acquire(1, now_ms=t0 + i * 1000)
        assert grant is not None and wait == 0 and grant.now_ms == t0 + i * 1000
    grant, wait = limiter.try_acquire(1, now_ms=t0 + 5000)
    assert grant is None and wait == pytest.approx(5.0)  # the first admission leaves at t0 + 10 s
    grant, _ = limiter.try_acquire(1, now_ms=t0 + 9999)
    assert grant is None
    grant, _ = limiter.try_acquire(1, now_ms=t0 + 10_000)
    assert grant is not None
    grant, wait = limiter.try_acquire(1, now_ms=t0 + 10_001)
    assert grant is None and wait == pytest.approx(0.999)  # the second leaves at t0 + 11 s


def test_tokens_window_and_correction_from_usage(rclient: redis.Redis) -> None:
    limiter = RedisLimiter(rclient, _key(), limits_per_minute(rpm=100, tpm=1000, minute_s=10.0, margin=0))
    t0 = 2_000_000
    big, _ = limiter.try_acquire(900, now_ms=t0)
    assert big is not None
    denied, wait = limiter.try_acquire(200, now_ms=t0 + 1)
    assert denied is None and wait == pytest.approx(9.999)
    limiter.correct(big, 150)  # the reply said it used 150 tokens, not 900
    grant, _ = limiter.try_acquire(200, now_ms=t0 + 2)
    assert grant is not None


def test_a_released_grant_leaves_the_window_as_it_was(rclient: redis.Redis) -> None:
    """A call admitted but never sent gives back its request slot and its tokens, once; the others stay."""
    limiter = RedisLimiter(rclient, _key(), limits_per_minute(rpm=2, tpm=1000, minute_s=10.0, margin=0))
    t0 = 4_000_000
    kept, _ = limiter.try_acquire(300, now_ms=t0)
    unsent, _ = limiter.try_acquire(700, now_ms=t0 + 1)
    assert kept is not None and unsent is not None
    assert limiter.try_acquire(1, now_ms=t0 + 2)[0] is None  # 2 requests and 1,000 tokens in the window
    limiter.release(unsent)
    limiter.release(unsent)  # twice gives back nothing more
    grant, _ = limiter.try_acquire(700, now_ms=t0 + 3)  # the slot and the 700 tokens are free again
    assert grant is not None
    assert limiter.try_acquire(0, now_ms=t0 + 4)[0] is None  # but not the kept call's slot
    limiter.correct(unsent, 5)  # a late correction of a released grant changes nothing
    assert limiter.try_acquire(0, now_ms=t0 + 5)[0] is None


def test_a_limit_the_provider_states_lower_replaces_ours_for_every_limiter(rclient: redis.Redis) -> None:
    key = _key()
    limits = limits_per_minute(rpm=5, tpm=1000, minute_s=10.0, margin=0)
    one, other = RedisLimiter(rclient, key, limits), RedisLimiter(rclient, key, limits)  # two workers
    assert not one.learn("rpm", 9) and one.learned() == {"rpm": 9}  # stated, but above ours: ours holds
    assert not one.learn("rpd", 1) and one.learned() == {"rpm": 9}  # a limit we do not have
    assert one.learn("rpm", 3) and other.learn("rpm", 3) and one.learned() == {"rpm": 3}
    t0 = 3_000_000
    for i in range(3):
        assert one.try_acquire(10, now_ms=t0 - 5000 + i)[0] is not None
    assert one.try_acquire(10, now_ms=t0 - 4000)[0] is None  # 3 per window, not 5
    assert other.learn("rpm", 2) and one.learned() == {"rpm": 2}  # the latest statement counts (a tier change)
    assert 0 < rclient.pttl(one.learned_key) <= 86_400_000
    t0 += 10_000
    assert other.try_acquire(10, now_ms=t0)[0] is not None
    assert one.try_acquire(10, now_ms=t0 + 1)[0] is not None
    grant, wait = other.try_acquire(10, now_ms=t0 + 2)
    assert grant is None and wait == pytest.approx(9.998)  # 2 per window now, not 5
    # A call costlier than a learned token limit (but within ours) is still admitted, never stuck.
    assert one.learn("tpm", 50)
    assert one.try_acquire(60, now_ms=t0 + 20_000)[0] is not None
    assert one.try_acquire(30, now_ms=t0 + 40_000)[0] is not None
    assert one.try_acquire(30, now_ms=t0 + 40_001)[0] is None  # 50 tokens per window now, not 1,000


def test_an_rpm_the_provider_states_lower_lowers_the_even_pace_too(rclient: redis.Redis) -> None:
    """The pace followed the suite's rpm (10 a second at 600) after the provider stated 120 a minute: the minute's
    window held 120, but each second's let 10 go where such a provider allows 2. It follows the stated rpm too,
    rounded up as the suite's is (121: 3 a second)."""
    key = _key()
    limits = limits_per_minute(rpm=600, pace="even")
    limiter = RedisLimiter(rclient, key, limits)
    assert limiter.learn("rpm", 120) and limiter.learned_below() == {"rpm": 120}  # no "rps" of its own to say
    t0 = 5_000_000
    assert all(limiter.try_acquire(0, now_ms=t0 + i)[0] is not None for i in range(2))
    grant, wait = limiter.try_acquire(0, now_ms=t0 + 2)
    assert grant is None and wait == pytest.approx(1.048)  # the second's window (1.05 s) from the first admission
    assert RedisLimiter(rclient, key, limits).learn("rpm", 121)  # a new statement: 3 a second for every limiter
    t1 = t0 + 10_000
    assert all(limiter.try_acquire(0, now_ms=t1 + i)[0] is not None for i in range(3))
    assert limiter.try_acquire(0, now_ms=t1 + 3)[0] is None


@pytest.mark.serial  # timed: at once, not after a wait for the window
def test_a_request_larger_than_the_token_limit_fails_at_once(rclient: redis.Redis) -> None:
    limiter = RedisLimiter(rclient, _key(), limits_per_minute(rpm=10, tpm=500), max_wait_s=600)
    started = time.monotonic()
    with pytest.raises(RequestTooLargeError, match="501 tokens.*tpm allows 500"):
        limiter.acquire(501)
    assert time.monotonic() - started < 10.0  # not a wait for the window (60 s): a loaded box's Redis call has room


def test_a_pause_holds_every_limiter_on_the_key_and_never_shortens(rclient: redis.Redis) -> None:
    key = _key()
    first = RedisLimiter(rclient, key, [Limit(100, 60.0, "requests", "rpm")])
    other = RedisLimiter(redis_client(_url(rclient)), key, first.limits)  # another connection
    first.pause(5.0, "429")
    first.pause(1.0, "429")  # shorter: ignored
    grant, wait = other.try_acquire(1)
    assert grant is None and 4.0 < wait <= 5.0
    assert 4.0 < other.paused_for() <= 5.0


def _url(client: redis.Redis) -> str:
    kw = client.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


@pytest.mark.serial  # timed: it did not sleep before refusing
def test_waiting_is_bounded(rclient: redis.Redis) -> None:
    limiter = RedisLimiter(rclient, _key(), [Limit(1, 60.0, "requests", "rpm")], max_wait_s=20.0)
    limiter.acquire(1)
    started = time.monotonic()
    with pytest.raises(RateLimitTimeout, match="max_wait_s=20 s"):
        limiter.acquire(1)
    # it knew the wait was 60 s and did not sleep at all (sleeping up to max_wait_s first takes 20 s; one Redis call,
    # all it needs, may take a loaded machine a while: half of max_wait_s leaves it 10 s)
    assert time.monotonic() - started < 10.0


# ------------------------------------------------------------------------------ several processes x threads

PERIOD_S = 1.0
RUN_S = 3.0
PROCS, THREADS = 3, 4


def _hammer(url: str, key: str, limits: list[Limit], ready: mp.Barrier, out: mp.Queue, seed: int) -> None:
    """One process: THREADS threads acquiring as fast as they are let for RUN_S seconds."""
    client = redis_client(url)
    client.ping()
    limiter = RedisLimiter(client, key, limits, max_wait_s=30)
    admitted: list[tuple[int, int]] = []
    lock = threading.Lock()

    def loop(n: int) -> None:
        rng = random.Random(seed * 100 + n)
        while time.time() < start + RUN_S:
            estimate = rng.randint(5, 40)
            grant = limiter.acquire(estimate)
            used = rng.randint(1, estimate)  # usage is at most the estimate
            limiter.correct(grant, used)
            with lock:
                admitted.append((grant.now_ms, used))

    ready.wait(60)  # every process is up: start together
    start = time.time()
    threads = [threading.Thread(target=loop, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(admitted)


def _admissions(url: str, limits: list[Limit], procs: int) -> list[tuple[int, int]]:
    """(Redis time in ms, tokens) of every call admitted by ``procs`` processes of :func:`_hammer` on one key."""
    key = _key()
    spawn = mp.get_context("spawn")
    out: mp.Queue = spawn.Queue()
    ready = spawn.Barrier(procs)
    started = [spawn.Process(target=_hammer, args=(url, key, limits, ready, out, s)) for s in range(procs)]
    for p in started:
        p.start()
    admitted = [entry for _ in started for entry in out.get(timeout=60)]
    for p in started:
        p.join(10)
        assert p.exitcode == 0
    return admitted


def _max_in_any_window(admitted: list[tuple[int, int]], period_ms: int) -> tuple[int, int]:
    """Largest request count and token sum over every window [t, t + period) starting at an admission."""
    admitted = sorted(admitted)
    most_requests = most_tokens = 0
    j = 0
    tokens = 0
    for i, (t, _) in enumerate(admitted):
        while j < len(admitted) and admitted[j][0] < t + period_ms:
            tokens += admitted[j][1]
            j += 1
        most_requests = max(most_requests, j - i)
        most_tokens = max(most_tokens, tokens)
        tokens -= admitted[i][1]
    return most_requests, most_tokens


@pytest.mark.parametrize(
    ("rpm", "tpm"),
    [(None, 300), (30, 400)],
    ids=["tokens", "requests-and-tokens"],
)
def test_limiter_never_exceeds_its_limit_in_any_window_across_processes(
    redis_server: RedisProcess, rpm: int | None, tpm: int | None
) -> None:
    limits = limits_per_minute(rpm=rpm, tpm=tpm, minute_s=PERIOD_S)
    admitted = _admissions(redis_server.url, limits, PROCS)
    most_requests, most_tokens = _max_in_any_window(admitted, int(PERIOD_S * 1000))
    windows = RUN_S / PERIOD_S
    if rpm is not None:
        assert most_requests <= rpm
    if tpm is not None:
        assert most_tokens <= tpm
    # ... and it is not stingy: the binding limit is (nearly) used up in the first RUN_S seconds.
    first = min(t for t, _ in admitted)
    in_run = [(t, u) for t, u in admitted if t < first + RUN_S * 1000]
    used = len(in_run) / (rpm * windows) if rpm else 0.0
    if tpm is not None:
        used = max(used, sum(u for _, u in in_run) / (tpm * windows))
    print(
        f"{len(admitted)} admissions, max {most_requests} requests / {most_tokens} tokens per window, {used:.0%} used"
    )
    assert used >= 0.8, f"only {used:.0%} of the limit used ({len(admitted)} admissions)"


@pytest.mark.parametrize("rpm", [120, 150])
def test_an_even_pace_never_admits_more_than_rpm_over_60_in_any_second_across_processes(
    redis_server: RedisProcess, rpm: int
) -> None:
    """At ``pace: even`` the minute's requests are not admitted at once (a burst a provider that enforces its minute
    limit per second refuses): in any second (Redis's clock, one for all), at most ceil(rpm / 60), however many
    processes and threads ask; and that many go every 1.05 s, not fewer."""
    admitted = _admissions(redis_server.url, limits_per_minute(rpm=rpm, pace="even"), 2)
    per_second = math.ceil(rpm / 60)
    most_requests, _ = _max_in_any_window(admitted, 1000)
    assert most_requests <= per_second, f"{most_requests} admitted within a second, more than {per_second}"
    first = min(t for t, _ in admitted)
    in_run = [t for t, _ in admitted if t < first + RUN_S * 1000]
    assert len(in_run) >= 2 * per_second, f"only {len(in_run)} admitted in {RUN_S:g} s"  # 0, 1.05 and 2.1 s
