"""One rate limiter for the whole cluster: exact sliding windows in Redis, one Lua script per acquire.

Scope: a limiter key (provider, model, hash of the API key). Each :class:`Limit` (requests or tokens per
``period_s``) keeps, under ``ragscore:rl:{<key>}:<limit name>:``, a sorted set of admissions (member ->
time in ms), a hash of their costs and their running sum. ``acquire`` drops what left the window and
admits the call only if *every* limit has room for its cost; otherwise it learns how long until enough
leaves and sleeps that long (bounded by ``max_wait_s``; in slices of at most a second, between which the caller's
``check`` may end the wait: a cancelled run, an open breaker; checked once more on admission, a call it stops then
is given back). So within any window of ``period_s`` the
admitted cost never exceeds the limit, however many processes and threads share it (the clock is
Redis's ``TIME``, one clock for all).

Token costs are estimated before the call and corrected from the reply's usage (:meth:`correct`); an
estimate at or above the real usage keeps the guarantee exact. A call admitted but then not sent (stopped before
its request went out) is given back whole, request and tokens (:meth:`release`). A provider 429 (or headers saying a
budget is at 0) sets a shared pause key that every acquire honours (:meth:`pause`); a 429 that says not how long
backs off instead: 2 s after the first in a row, twice as long after each next (with jitter), up to 60 s, counted for
every worker and reset by a call that succeeds (:meth:`succeeded`). A limit the provider's
headers state is kept for every worker (:meth:`learn`, a day after it was last stated) and applies where it
is lower than ours (a suite that overstates its tier); it never raises one. A single call whose cost exceeds
a limit can never be admitted: it fails at once with :class:`RequestTooLargeError`.

Pace (:func:`limits_per_minute`): ``burst`` admits a minute's requests as they come, so a run's first minute goes out
at once and its admissions leave the window, and free room, in the same clumps a minute later. ``even`` adds a limit
of ceil(rpm / 60) requests per second (``rps``, on the same scripts), for providers that enforce their minute limit
per second; an ``rpm`` the provider states below ours lowers it too (ceil(stated / 60): :attr:`Limit.follows`).
Tokens are never paced: a per-second token cap below one call's cost would refuse the call.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..schemas import Pace, paced_per_second
from ..store import BACKING_OFF
from .errors import RateLimitTimeout, RequestTooLargeError

__all__ = [
    "BACKOFF_429_FIRST_S",
    "BACKOFF_429_MAX_S",
    "DEFAULT_MAX_WAIT_S",
    "DEFAULT_WINDOW_MARGIN",
    "PACE_LIMIT",
    "WAIT_NOTE_S",
    "WAIT_REFRESH_S",
    "Grant",
    "Limit",
    "RedisLimiter",
    "Wait",
    "limits_per_minute",
]

log = logging.getLogger(__name__)

#: Longest a call may wait for the limiter before it fails (seconds).
DEFAULT_MAX_WAIT_S = 600.0
#: The shared pause after a 429 that says not how long to wait (no ``retry-after``, message or budget at 0): this long
#: after the first in a row (seconds), twice the last after each next ...
BACKOFF_429_FIRST_S = 2.0
#: ... up to this long (seconds).
BACKOFF_429_MAX_S = 60.0
#: Each such pause is up to this share longer (random), so that workers of other clusters drift apart.
BACKOFF_429_JITTER = 0.25
#: A run of such 429s is forgotten this long after its last (seconds), as by a success: a later run starts afresh.
BACKOFF_429_MEMORY_S = 600.0
#: How long a limit learned from the provider's headers replaces the suite's (a raised tier shows after this).
LEARNED_TTL_S = 86_400.0
#: Our windows are this much longer than the provider's (2%: 1.2 s a minute), so that network jitter
#: between our admission and the provider's arrival time does not push a window over its limit.
DEFAULT_WINDOW_MARGIN = 0.02
PREFIX = "ragscore:rl:"
#: The name of the per-second request limit ``pace: even`` adds (not a suite key: it follows from ``rpm``).
PACE_LIMIT = "rps"
#: The per-second window of ``pace: even`` is this much longer than a second (50 ms): arrival jitter between two calls
#: is absolute, so the minute's 2 % (20 ms a second) is too thin here. It costs about 3 % of ``rpm`` in steady
#: throughput (ceil(rpm / 60) per 1.05 s).
PACE_MARGIN = 0.05
#: Seconds within which a process does not store the same stated limit again.
RESTATE_S = 60.0

# (learned key, limit name) -> (limit, monotonic time) this process last stored. Per process, not per limiter:
# judge clients (and their limiters) are built per batch, so per-instance memory would write on every batch.
_stored: dict[tuple[str, str], tuple[int, float]] = {}
_stored_lock = threading.Lock()

# KEYS[1] = pause key, KEYS[2] = learned limits (hash: limit name -> what the provider last stated), then per
# limit: log (zset), costs (hash), sum (string), last the count of 429s in a row that said not how long to wait
# ARGV[1] = now in ms ("" = Redis TIME), ARGV[2] = member, then per limit: period_ms, limit, cost, the learned limit it
# follows (its own name, or rpm for rps) and the share of it it takes (1, or 60: ceil(learned / share))
# Returns {status, wait_ms, now_ms, limit index, limit, reason}: status 1 admitted (reason: that count), 0 wait (index
# -1: the shared pause, whose reason comes with it; the limit, the learned one where that applies, of the limit waited
# on), -1 never fits.
_ACQUIRE_LUA = """
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local paused = redis.call('PTTL', KEYS[1])
if paused > 0 then return {0, paused, now, -1, 0, redis.call('GET', KEYS[1]) or ''} end
local n = (#KEYS - 3) / 3
local wait, blocked, blocked_limit = 0, -1, 0
for i = 0, n - 1 do
  local log, costs, sum = KEYS[3 + 3 * i], KEYS[4 + 3 * i], KEYS[5 + 3 * i]
  local period, limit, cost = tonumber(ARGV[3 + 5 * i]), tonumber(ARGV[4 + 5 * i]), tonumber(ARGV[5 + 5 * i])
  if cost > limit then return {-1, 0, now, i, limit} end
  local learned = tonumber(redis.call('HGET', KEYS[2], ARGV[6 + 5 * i]) or '')
  if learned then learned = math.ceil(learned / tonumber(ARGV[7 + 5 * i])) end
  if learned and learned < limit and cost <= learned then limit = learned end
  local gone = redis.call('ZRANGEBYSCORE', log, '-inf', now - period)
  if #gone > 0 then
    local freed = 0
    for _, m in ipairs(gone) do
      freed = freed + tonumber(redis.call('HGET', costs, m) or 0)
      redis.call('HDEL', costs, m)
    end
    redis.call('ZREMRANGEBYSCORE', log, '-inf', now - period)
    redis.call('DECRBY', sum, freed)
  end
  local used = tonumber(redis.call('GET', sum) or 0)
  if used + cost > limit then
    local need, freed, w = used + cost - limit, 0, period
    local entries = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
    for j = 1, #entries, 2 do
      freed = freed + tonumber(redis.call('HGET', costs, entries[j]) or 0)
      if freed >= need then
        w = tonumber(entries[j + 1]) + period - now
        break
      end
    end
    if w < 1 then w = 1 end
    if w > wait then wait, blocked, blocked_limit = w, i, limit end
  end
end
if wait > 0 then return {0, wait, now, blocked, blocked_limit} end
for i = 0, n - 1 do
  local log, costs, sum = KEYS[3 + 3 * i], KEYS[4 + 3 * i], KEYS[5 + 3 * i]
  local period, cost = tonumber(ARGV[3 + 5 * i]), ARGV[5 + 5 * i]
  redis.call('ZADD', log, now, ARGV[2])
  redis.call('HSET', costs, ARGV[2], cost)
  redis.call('INCRBY', sum, cost)
  for _, k in ipairs({log, costs, sum}) do redis.call('PEXPIRE', k, period + 60000) end
end
return {1, 0, now, -1, 0, redis.call('GET', KEYS[#KEYS]) or '0'}
"""

# KEYS: per token limit: log, costs, sum. ARGV[1] = member, ARGV[2] = the real cost.
_CORRECT_LUA = """
for i = 1, #KEYS, 3 do
  local old = redis.call('HGET', KEYS[i + 1], ARGV[1])
  if old then
    redis.call('HSET', KEYS[i + 1], ARGV[1], ARGV[2])
    redis.call('INCRBY', KEYS[i + 2], tonumber(ARGV[2]) - tonumber(old))
  end
end
return 1
"""

# KEYS: per limit: log, costs, sum. ARGV[1] = member. Takes an admission out of every window it is still in.
_RELEASE_LUA = """
for i = 1, #KEYS, 3 do
  local cost = redis.call('HGET', KEYS[i + 1], ARGV[1])
  if cost then
    redis.call('HDEL', KEYS[i + 1], ARGV[1])
    redis.call('ZREM', KEYS[i], ARGV[1])
    redis.call('DECRBY', KEYS[i + 2], tonumber(cost))
  end
end
return 1
"""

# KEYS[1] = learned limits. ARGV[1] = limit name, ARGV[2] = the limit the provider states, ARGV[3] = ttl ms.
# Returns 1 when the stated limit changed.
_LEARN_LUA = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if old == ARGV[2] then return 0 end
return 1
"""

# KEYS[1] = pause key, KEYS[2] = count of 429s in a row that said not how long to wait. ARGV[1] = first pause ms,
# ARGV[2] = longest pause ms, ARGV[3] = jitter factor, ARGV[4] = reason, ARGV[5] = how long the count lives (ms).
# While a pause holds, such a 429 changes nothing (its call went out before the pause began: one wave of calls, one
# 429); else the n-th in a row pauses every caller min(longest, first * 2^(n - 1) * jitter). Returns {n, ms}: 0 when
# a pause held.
_BACK_OFF_LUA = """
if redis.call('PTTL', KEYS[1]) > 0 then return {0, 0} end
local n = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
local ms = math.min(tonumber(ARGV[2]), math.floor(tonumber(ARGV[1]) * 2 ^ math.min(n - 1, 40) * tonumber(ARGV[3])))
if ms < 1 then ms = 1 end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ms)
return {n, ms}
"""

# KEYS[1] = pause key. ARGV[1] = ms, ARGV[2] = reason. Only ever lengthens a pause.
_PAUSE_LUA = """
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
  return 1
end
return 0
"""


@dataclass(frozen=True)
class Limit:
    """At most ``limit`` requests (or tokens) in any window of ``period_s`` seconds."""

    limit: int
    period_s: float
    per: Literal["requests", "tokens"]
    name: str
    #: The limit the provider states that lowers this one (:meth:`RedisLimiter.learn`), and the share of it this one
    #: takes (ceil(stated / share)): None, its own name, whole; :data:`PACE_LIMIT`, ``("rpm", 60)``.
    follows: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"limit {self.name} must be >= 1, got {self.limit}")
        if self.period_s <= 0:
            raise ValueError(f"period of {self.name} must be > 0, got {self.period_s}")


def limits_per_minute(
    rpm: int | None = None,
    tpm: int | None = None,
    rpd: int | None = None,
    tpd: int | None = None,
    *,
    pace: Pace = "burst",
    minute_s: float = 60.0,
    margin: float = DEFAULT_WINDOW_MARGIN,
) -> list[Limit]:
    """The usual limits, each window ``margin`` longer than the provider's; ``minute_s`` shortens the
    minute (and the day, 1,440 of them; the second, a 60th) in tests. ``pace="even"`` with an ``rpm`` adds
    :data:`PACE_LIMIT`: ceil(rpm / 60) requests per 60th of the minute, :data:`PACE_MARGIN` longer."""
    spec = {"rpm": (rpm, 1, "requests"), "tpm": (tpm, 1, "tokens"), "rpd": (rpd, 1440, "requests"),
            "tpd": (tpd, 1440, "tokens")}  # fmt: skip
    if pace not in ("burst", "even"):
        raise ValueError(f"pace must be 'burst' or 'even', got {pace!r}")
    period = minute_s * (1 + margin)
    limits = [Limit(v, period * mult, per, name) for name, (v, mult, per) in spec.items() if v is not None]  # type: ignore[arg-type]
    if pace == "even" and rpm is not None:
        second = minute_s / 60 * (1 + PACE_MARGIN)
        limits.append(Limit(paced_per_second(rpm), second, "requests", PACE_LIMIT, follows=("rpm", 60)))
    return limits


#: Waits at least this long (seconds) are told to :meth:`RedisLimiter.acquire`'s ``on_wait`` (a shorter one is the
#: limiter pacing calls, nothing a user need be told of; and a call that does not wait costs nothing more).
WAIT_NOTE_S = 1.0
#: A call that waits tells ``on_wait`` again at least this often (seconds) while it waits: what it was told lives a
#: few seconds only (a worker that died while its calls waited is not said to wait on for minutes).
WAIT_REFRESH_S = 2.0

#: Longest a waiting :meth:`RedisLimiter.acquire` sleeps at a time, and the least time between two calls of its
#: ``check`` (a ``ragscore cancel`` or an open breaker ends the wait within about this).
CHECK_EVERY_S = 1.0


@dataclass(frozen=True)
class Grant:
    """An admitted call: its member id (to correct its token cost), Redis time of admission, cost, and whether 429s
    that said not how long to wait were backed off when it was admitted (:meth:`RedisLimiter.succeeded` resets them)."""

    member: str
    now_ms: int
    tokens: int
    backing_off: bool = False


@dataclass(frozen=True)
class Wait:
    """What a call waits on at the limiter: ``on`` is ``"pause"`` (the shared pause: ``reason`` says who set it, a
    429's message or ``provider budget at 0``) or the name of the limit that holds it (``rpm``, ``tpm``, ``rpd``,
    ``tpd``; ``limit``: its value, the provider's stated one where that is lower); ``until_ms``: when it may go, and
    ``now_ms``: when that was read, both on Redis's clock. A wait for a slot of ``judge.max_in_flight`` (``on``:
    ``slot``, ``limit``: the cap) says how many calls wait for one (``waiting``: every worker's, every run's)."""

    on: str
    limit: int
    until_ms: int
    now_ms: int
    reason: str = ""
    waiting: int = 0


def _slice_s(held: Wait, told_until: int) -> float:
    """How long a waiting call sleeps before its next attempt: until its wait ends, or sooner until the run's wait
    ``on_wait`` said it keeps (another call's, ``told_until``) passes, so that the call tells its own at once (the
    note, its time passed, said no wait until the call's next attempt). A little jitter so that waiters woken by the
    same expiry do not all retry at once; a long wait is slept in slices, each followed by a new attempt, so that
    ``check`` runs while it lasts."""
    until = told_until if held.now_ms < told_until < held.until_ms else held.until_ms
    left = (until - held.now_ms) / 1000
    return min(left + random.uniform(0, min(0.05, left / 4 + 0.005)), CHECK_EVERY_S)


class RedisLimiter:
    """Acquire before each provider call; correct the token cost after; pause everyone after a 429."""

    def __init__(
        self,
        redis: Any,
        key: str,
        limits: list[Limit],
        *,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        backoff_429_s: tuple[float, float] = (BACKOFF_429_FIRST_S, BACKOFF_429_MAX_S),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.r = redis
        self.key = key
        self.limits = limits
        self.max_wait_s = max_wait_s
        #: The first and the longest pause after 429s that say not how long to wait (:meth:`pause` with None).
        self.backoff_429_s = backoff_429_s
        self._sleep = sleep
        base = f"{PREFIX}{{{key}}}:"  # one hash tag: every key of a limiter lives in one cluster slot
        self.pause_key = base + "pause"
        self.unsaid_429s_key = base + "unsaid429s"
        self.learned_key = base + "learned"
        self._keys = [base + f"{lim.name}:{part}" for lim in limits for part in ("log", "cost", "sum")]
        token_limits = [i for i, lim in enumerate(limits) if lim.per == "tokens"]
        self._token_keys = [k for i in token_limits for k in self._keys[3 * i : 3 * i + 3]]
        self._acquire = redis.register_script(_ACQUIRE_LUA)
        self._correct = redis.register_script(_CORRECT_LUA)
        self._release = redis.register_script(_RELEASE_LUA)
        self._pause = redis.register_script(_PAUSE_LUA)
        self._back_off = redis.register_script(_BACK_OFF_LUA)
        self._learn = redis.register_script(_LEARN_LUA)

    def _costs(self, tokens: int) -> list[int]:
        return [1 if lim.per == "requests" else tokens for lim in self.limits]

    def try_acquire(self, tokens: int, now_ms: int | None = None) -> tuple[Grant | None, float]:
        """One attempt: ``(grant, 0)`` if admitted, else ``(None, seconds to wait)``.

        ``now_ms`` injects the clock (tests); by default Redis's own ``TIME`` is used.
        """
        got = self._try(tokens, now_ms)
        return (got, 0.0) if isinstance(got, Grant) else (None, (got.until_ms - got.now_ms) / 1000)

    def _try(self, tokens: int, now_ms: int | None = None) -> Grant | Wait:
        """:meth:`try_acquire`: the grant, or what the call waits on (a pause's ``reason`` read in the same round
        trip)."""
        member = uuid.uuid4().hex
        args: list[Any] = ["" if now_ms is None else int(now_ms), member]
        for lim, cost in zip(self.limits, self._costs(tokens), strict=True):
            args += [int(lim.period_s * 1000), lim.limit, cost, *(lim.follows or (lim.name, 1))]
        keys = [self.pause_key, self.learned_key, *self._keys, self.unsaid_429s_key]
        status, wait_ms, now, index, limit, *reason = self._acquire(keys=keys, args=args)
        status, wait_ms, now, index, limit = int(status), int(wait_ms), int(now), int(index), int(limit)
        if status == -1:
            lim = self.limits[index]
            raise RequestTooLargeError(
                f"one request needs about {tokens} tokens but the limit {lim.name} allows {lim.limit}: "
                f"it can never be sent (shorten the prompt or lower max_tokens; if your account allows more, raise "
                f"judge.{lim.name} or --{lim.name})"
            )
        if status == 1:
            return Grant(member, now, tokens, backing_off=int(reason[0]) > 0)
        if index < 0:
            why = reason[0] if reason else ""
            why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
            return Wait("pause", limit, now + wait_ms, now, why)
        return Wait(self.limits[index].name, limit, now + wait_ms, now)

    def acquire(
        self,
        tokens: int,
        check: Callable[[], None] | None = None,
        on_wait: Callable[[Wait], object] | None = None,
        *,
        left_s: float | None = None,
    ) -> Grant:
        """Wait (sleeping, bounded by ``max_wait_s``, or by ``left_s`` where that is less: what is left of the time
        the caller gives the call) until every limit admits a call of ``tokens``.

        ``check`` is called at most every :data:`CHECK_EVERY_S` while the call waits (its run was cancelled, its
        breaker opened): what it raises ends the wait, so a long pause after a 429 holds no stopped run's calls.
        It is called once more when the call is admitted: what it raises then gives the admission back
        (:meth:`release`: the call is not sent, so it holds no request or tokens in the window) and is raised.

        ``on_wait`` is told what the call waits on once a wait of at least :data:`WAIT_NOTE_S` begins, again every
        :data:`WAIT_REFRESH_S` while it waits, and again once the time it was told has passed (others took the room
        first); it may return an ``until`` (ms, Redis's clock) sooner than the call's own, at which the call tries
        again and tells it again (what it keeps is another call's sooner wait): so a progress view can say the run
        waits on a limit, not that it stalled. A call admitted at once, or after a short wait, tells nothing (no cost
        but this test); nor does a wait on :data:`PACE_LIMIT` (pacing, at most about a second), nor a wait longer
        than ``max_wait_s`` (the call fails at once). What it raises is logged,
        never the call's failure.
        """
        started = checked = time.monotonic()
        told_until, told_at = -1, float("-inf")  # Redis time (ms) up to which on_wait was told; when (monotonic)
        while True:
            held = self._try(tokens)
            if isinstance(held, Grant):
                if check is not None:
                    self.checked(held, check)
                return held
            wait = (held.until_ms - held.now_ms) / 1000
            waited = time.monotonic() - started
            if waited + wait > min(self.max_wait_s, left_s if left_s is not None else self.max_wait_s):
                raise self._timeout(waited, held, left_s)
            due = held.now_ms >= told_until or time.monotonic() - told_at >= WAIT_REFRESH_S
            if on_wait is not None and wait >= WAIT_NOTE_S and due and held.on != PACE_LIMIT:
                told_at = time.monotonic()
                told_until = self._told(held, on_wait)
            self._sleep(_slice_s(held, told_until))
            if check is not None and time.monotonic() - checked >= CHECK_EVERY_S:
                check()
                checked = time.monotonic()

    def _told(self, held: Wait, on_wait: Callable[[Wait], object]) -> int:
        """``on_wait(held)``; never fails the call. Returns when (ms, Redis's clock) to tell again at the latest: the
        call's own ``until``, or the sooner one ``on_wait`` returned."""
        try:
            kept = on_wait(held)
        except Exception:  # saying why a call waits is worth less than the call
            log.warning("could not say that a call to %s waits on its rate limit", self.key.split(":")[0],
                        exc_info=True)  # fmt: skip
            return held.until_ms
        return min(kept, held.until_ms) if isinstance(kept, int) and not isinstance(kept, bool) else held.until_ms

    def checked(self, grant: Grant, check: Callable[[], None]) -> None:
        """``check()`` for an admitted call (a stop on admission, a ``max_in_flight`` slot confirmed: the judge
        client's); if it raises (the call will not be sent), release the grant first."""
        try:
            check()
        except BaseException:
            try:
                self.release(grant)
            except Exception:  # the call's own error matters more; the admission then ages out of the window
                log.warning("could not give back a call not sent to the limit of %s", self.key.split(":")[0],
                            exc_info=True)  # fmt: skip
            raise

    def _timeout(self, waited: float, held: Wait, left_s: float | None) -> RateLimitTimeout:
        """The error of a call the limit would hold over ``max_wait_s``, or over the ``left_s`` it was given where that
        is less (``held``: what it waits on), saying what paused every worker (the pause's reason came with the
        acquire's answer: a 429's message)."""
        why = ""
        if held.on == "pause" and held.reason:  # a backoff's reason says what it is; a pause's, what set it
            why = f"; {held.reason}" if held.reason.startswith(BACKING_OFF) else f"; paused by {held.reason}"
        bound = f"max_wait_s={self.max_wait_s:g} s"
        if left_s is not None and left_s < self.max_wait_s:
            bound = f"the {left_s:.1f} s left to it"
        return RateLimitTimeout(
            f"the shared rate limit of {self.key.split(':')[0]} would hold this call over {bound} (waited "
            f"{waited:.1f} s, {(held.until_ms - held.now_ms) / 1000:.1f} s more needed{why})",
            provider=self.key.split(":")[0],
        )

    def correct(self, grant: Grant, tokens: int) -> None:
        """Replace the estimated token cost of an admitted call by the real one (if still in the window)."""
        if self._token_keys and tokens != grant.tokens:
            self._correct(keys=self._token_keys, args=[grant.member, max(0, int(tokens))])

    def release(self, grant: Grant) -> None:
        """Give back an admitted call that was never sent (its run was cancelled, its breaker opened, its worker's
        parent exited before the request went out): its request slot and tokens leave every window, as if it had
        never been admitted. Only for a call not sent: a sent one counts at the provider, even if it failed (its
        tokens are :meth:`correct`-ed to 0 instead). Idempotent; nothing once the admission left the window."""
        self._release(keys=self._keys, args=[grant.member])

    def pause(self, seconds: float | None, reason: str = "") -> None:
        """Hold every acquire of this key for ``seconds`` (never shortens a longer pause). None, for a 429 that says
        not how long to wait: back off, unless a pause holds (the call went out before it began): the first such 429 in
        a row pauses ``backoff_429_s[0]``, each next twice the last (up to :data:`BACKOFF_429_JITTER` longer), up to
        ``backoff_429_s[1]``, until a call succeeds (:meth:`succeeded`) or :data:`BACKOFF_429_MEMORY_S` pass."""
        if seconds is None:
            self._back_off_unsaid(f"{BACKING_OFF}: {reason}" if reason else BACKING_OFF)
            return
        ms = int(seconds * 1000)
        if ms > 0:
            self._pause(keys=[self.pause_key], args=[ms, reason or "paused"])

    def _back_off_unsaid(self, reason: str) -> None:
        """:meth:`pause` for a 429 that says not how long to wait; logs the pause it sets."""
        first, most = (int(s * 1000) for s in self.backoff_429_s)
        jitter = random.uniform(1, 1 + BACKOFF_429_JITTER)
        memory = int(BACKOFF_429_MEMORY_S * 1000)
        n, ms = (int(v) for v in self._back_off(keys=[self.pause_key, self.unsaid_429s_key],
                                                args=[first, most, jitter, reason, memory]))  # fmt: skip
        if n:
            log.info("%s: HTTP 429 number %d in a row that said not how long to wait: every worker pauses %.3f s",
                     self.key.split(":")[0], n, ms / 1000)  # fmt: skip

    def succeeded(self, grant: Grant) -> None:
        """A call admitted by ``grant`` succeeded: 429s that said not how long to wait start over at the first pause."""
        if grant.backing_off:
            self.r.delete(self.unsaid_429s_key)

    def learn(self, name: str, limit: int | None) -> bool:
        """The provider states limit ``name`` (``rpm``, ``tpm``, ``rpd``, ``tpd``) is ``limit``: every limiter on
        this key applies it where it is below its own (and its share to a limit that :attr:`Limit.follows` it),
        until :data:`LEARNED_TTL_S` after it was last stated (a raised tier shows at the next statement). True when
        it is below ours, so that it applies."""
        ours = next((lim.limit for lim in self.limits if lim.name == name), None)
        if limit is None or limit < 1 or ours is None:
            return False
        now, slot = time.monotonic(), (self.learned_key, name)
        with _stored_lock:
            stored, when = _stored.get(slot, (None, 0.0))
            write = limit != stored or now - when >= RESTATE_S  # else stated alike lately: no write per reply
            if write:
                _stored[slot] = (limit, now)
        if write:
            self._learn(keys=[self.learned_key], args=[name, limit, int(LEARNED_TTL_S * 1000)])
        return limit < ours

    def learned_below(self) -> dict[str, int]:
        """The limits the provider stated earlier (kept :data:`LEARNED_TTL_S`) that are below ours: they apply."""
        ours = {lim.name: lim.limit for lim in self.limits}
        return {name: v for name, v in self.learned().items() if name in ours and v < ours[name]}

    def learned(self) -> dict[str, int]:
        """The limits the provider last stated, by name (shared by every worker)."""
        return {k.decode() if isinstance(k, bytes) else k: int(v) for k, v in self.r.hgetall(self.learned_key).items()}

    def paused_for(self) -> float:
        """Seconds left of the shared pause (0.0 if none)."""
        return max(0, int(self.r.pttl(self.pause_key))) / 1000
