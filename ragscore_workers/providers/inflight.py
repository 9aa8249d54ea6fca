"""A cap on the judge calls in flight at once across every worker (``judge.max_in_flight``).

A local server (Ollama, vLLM, llama.cpp on one GPU) has no rate limit: it answers a few requests at a time and queues
the rest, so 32 judge threads x 8 calls each wait in its queue until their ``timeout_s`` runs out. The cap holds the
calls that would wait there on our side instead, where no timeout runs. One Redis sorted set per limiter (provider,
model, endpoint and key): a member per call in flight, scored with when its lease ends (Redis's clock).

The lease is short (:data:`LEASE_S`) and a thread of the holder renews it while the call runs (every
:data:`RENEW_EVERY_S`), so the slot of a worker killed mid-call (SIGKILL, out of memory) frees itself within one lease,
however long a call may take. A thread, not a renewal between attempts: one attempt is an HTTP call of up to five
``timeout_s`` (a read timeout per chunk), and a lease that must outlast it held a cap of 1 for many minutes.

A renewal waits :data:`RENEW_EVERY_S` at most for Redis's reply, on a client of its own (:func:`~..store.with_timeout`):
the worker's client waits a minute a reply, so a Redis that hung (or a partition) held the renewer past the lease, and
the holder never knew its slot had lapsed. The holder counts its lease from the last renewal Redis confirmed: a
renewal that fails once a whole lease passed without one loses the slot. A call already sent cannot be taken back (its
reply is still good): it runs on over the cap, its worker logs so at once, and no renewal takes the slot back after.
A call not yet sent confirms its slot (:meth:`Slot.confirm`, one renewal) once the rate limiter lets it go: one lost
during that wait (or no longer renewed) is waited for again, never sent over the cap; only a sent call's loss is
logged as over the cap. A call with no cap has no slot: nothing to confirm, no round trip.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..schemas import SLOT_WAIT
from ..store import with_timeout
from .errors import RateLimitTimeout
from .ratelimit import CHECK_EVERY_S, PREFIX, WAIT_NOTE_S, WAIT_REFRESH_S, Wait

__all__ = ["LEASE_S", "RENEWER_NAME", "RENEW_EVERY_S", "WAITING_COUNTED_MS", "InFlightCap", "Slot"]

log = logging.getLogger(__name__)

#: Seconds a slot's lease lasts from its last renewal: how long a killed worker's slot stays taken, at most.
LEASE_S = 10.0
#: Seconds between two renewals of a held slot's lease, and the longest one waits for Redis's reply: a Redis blip of
#: up to three of them does not lose it.
RENEW_EVERY_S = LEASE_S / 4
#: The name of a held slot's renewing thread (one per call in flight, ended with it).
RENEWER_NAME = "in-flight-lease"
#: How far ahead (ms) a wait for a slot (:data:`~ragscore_workers.schemas.SLOT_WAIT`) says it ends: when a slot frees
#: is unknown, and the call tells again every refresh while it waits (one no longer waiting is soon no longer said).
SLOT_WAIT_AHEAD_MS = int(2 * WAIT_REFRESH_S * 1000)

#: How long (ms) a call waiting for a slot is counted among the waiting after its last try (it tries every
#: :data:`POLL_S` or so): one that stopped waiting (its wait timed out, its run was cancelled, its worker died) is
#: counted no longer than that.
WAITING_COUNTED_MS = 1000

#: Seconds between two tries for a slot (plus up to as much again of jitter): calls on a local server take seconds.
POLL_S = 0.05

# KEYS[1] the set, KEYS[2] the calls waiting for a slot (a member each, scored with when it is no longer counted
# unless it tries again); ARGV: cap, lease (ms), member, how long (ms) a waiting call is counted. Drops the lapsed
# leases, then takes a slot if one is free: {1 taken or 0, Redis's clock in ms, the calls waiting}. The set lives as
# long as its longest lease: runs share it, and one lease must not drop another's slots with the set.
_TAKE = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ms)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[2], ms + tonumber(ARGV[4]), ARGV[3])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]))
  return {0, ms, redis.call('ZCARD', KEYS[2])}
end
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {1, ms, redis.call('ZCARD', KEYS[2])}
"""

# KEYS[1] the set; ARGV: lease (ms), member. Extends a held slot's lease (0: it lapsed, or the set expired: not taken
# again, which could pass the cap), and the set's life to its longest lease.
_RENEW = """
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then return 0 end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], 'XX', ms + tonumber(ARGV[1]), ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return 1
"""


@dataclass(frozen=True)
class _Lease:
    """A slot held: its member in the set, the event that ends its renewer (the call ended), the one its call sets
    once it confirmed the slot (:meth:`Slot.confirm`: sent), and the one its renewer sets where it gave up (lost)."""

    member: str
    done: threading.Event = field(default_factory=threading.Event)
    sent: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)


class Slot:
    """A slot of :class:`InFlightCap` held by one call (:meth:`InFlightCap.slot`)."""

    def __init__(
        self, cap: InFlightCap, check: Callable[[], None] | None, on_wait: Callable[[Wait], object] | None
    ) -> None:
        self._cap, self._check, self._on_wait = cap, check, on_wait
        self._lease = cap._hold(check, on_wait)

    def confirm(self) -> None:
        """Just before the call is sent: its slot is renewed (one round trip), or where its lease lapsed meanwhile (a
        wait at the rate limiter while this process stalled past it) or its renewer gave up (Redis out of reach a
        lease) another is waited for, as a new call's: never sent over the cap, nor with no renewer."""
        lease = self._lease
        if not lease.lost.is_set() and self._cap._still_held(lease):
            lease.sent.set()
            if not lease.lost.is_set():  # its renewer goes on: a loss from now is the sent call's (over the cap)
                return
        log.warning("a judge call's max_in_flight slot lapsed while it waited at the rate limiter: it waits for "
                    "another before it is sent")  # fmt: skip
        self._cap._end(lease)
        self._lease = self._cap._hold(self._check, self._on_wait)
        self._lease.sent.set()

    def end(self) -> None:
        """Gives the slot back (the call ended)."""
        self._cap._end(self._lease)


class InFlightCap:
    """At most ``limit`` calls of one limiter in flight at once, however many workers make them."""

    def __init__(
        self,
        redis: Any,
        limiter_key: str,
        limit: int,
        *,
        max_wait_s: float,
        lease_s: float = LEASE_S,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if limit < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {limit}")
        self.r = redis
        self.key = f"{PREFIX}{{{limiter_key}}}:in_flight"  # the limiter's hash tag: the same cluster slot
        self.waiting_key = f"{self.key}:waiting"
        self.limit = limit
        self.lease_ms = max(1, int(lease_s * 1000))
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._take = redis.register_script(_TAKE)
        self._renew = redis.register_script(_RENEW)
        #: Seconds between two renewals, and the longest one waits for Redis, on a client of its own (built here: one
        #: that failed in the renewer's thread would end it unseen, and the slot lapse with no renewal).
        self._renew_every_s = min(RENEW_EVERY_S, lease_s / 4)
        self._renewing = with_timeout(redis, self._renew_every_s)

    @contextmanager
    def slot(
        self, check: Callable[[], None] | None = None, on_wait: Callable[[Wait], object] | None = None
    ) -> Iterator[Slot]:
        """Hold one slot while the block runs (the call), waiting for one at most ``max_wait_s``: RateLimitTimeout
        after that. ``check`` is called about every second while it waits (a cancel, an open breaker): what it
        raises ends the wait. ``on_wait`` is told of a wait of :data:`~.ratelimit.WAIT_NOTE_S` or more, and again
        every :data:`~.ratelimit.WAIT_REFRESH_S` while it lasts, as the rate limiter tells its own (``on``: ``slot``,
        ``limit``: the cap). The block gets the :class:`Slot`, to confirm it still holds it just before it sends."""
        held = Slot(self, check, on_wait)
        try:
            yield held
        finally:
            held.end()

    def _hold(self, check: Callable[[], None] | None, on_wait: Callable[[Wait], object] | None) -> _Lease:
        """Waits for a slot (:meth:`_wait_for`) and holds it: its lease renewed by a thread until it ends."""
        member = uuid.uuid4().hex
        taken = self._wait_for(member, check, on_wait)
        lease = _Lease(member)
        try:  # a renewer that fails to start (no thread left) gives the slot back too
            renewer = threading.Thread(target=self._renew_until, args=(lease, taken), name=RENEWER_NAME)
            renewer.daemon = True
            renewer.start()
        except BaseException:
            self._end(lease)
            raise
        return lease

    def _end(self, lease: _Lease) -> None:
        """Gives ``lease``'s slot back and stops its renewer."""
        lease.done.set()  # a renewal after this finds no member: _RENEW takes no slot back
        self.r.zrem(self.key, lease.member)

    def _still_held(self, lease: _Lease) -> bool:
        """Renews ``lease`` now: False where it lapsed and was dropped (another call may hold its slot)."""
        return bool(self._renew(keys=[self.key], args=[self.lease_ms, lease.member]))

    def _renew_until(self, lease: _Lease, renewed: float) -> None:
        """Renews ``lease`` every :data:`RENEW_EVERY_S` until its ``done`` (the call ended), each renewal waiting
        that long at most for Redis; ``renewed``: when (``time.monotonic()``) the last confirmed lease began. A failed
        renewal is tried again (at the lease's end at the latest); stops once the slot is lost: its lease lapsed and
        Redis says so (another call took it: this process stalled past it), or a renewal failed once a whole lease
        passed with none confirmed (Redis hung, or out of reach). A renewal that Redis takes after the lease's end is
        no loss: its slot was still there, so no call took it meanwhile. A slot lost sets ``lease.lost``, and is said
        over the cap only once its call was sent (``lease.sent``): one not sent yet takes another first
        (:meth:`Slot.confirm`, which says so)."""
        lease_s, every, client = self.lease_ms / 1000, self._renew_every_s, self._renewing
        member, done = lease.member, lease.done
        while not done.wait(max(0.0, min(every, renewed + lease_s - time.monotonic()))):
            sent = time.monotonic()  # Redis's lease begins later: one counted from here ends no later than it
            failed: Exception | None = None
            try:
                held = bool(self._renew(keys=[self.key], args=[self.lease_ms, member], client=client))
            except Exception as exc:  # Redis away a moment: the lease outlasts a few missed renewals
                held, failed = False, exc
            if held:
                renewed = sent
            elif done.is_set():
                return
            elif failed is None:
                lease.lost.set()  # before sent is read: a call confirmed meanwhile sees it (Slot.confirm)
                if lease.sent.is_set():
                    log.warning("a judge call's max_in_flight slot lapsed before the call ended: over the cap")
                return
            elif time.monotonic() - renewed >= lease_s:
                lease.lost.set()
                if lease.sent.is_set():
                    log.warning("a judge call's max_in_flight slot lapsed before the call ended (Redis confirmed no "
                                "renewal for %g s: %s): over the cap", lease_s, failed)  # fmt: skip
                return
            else:
                log.warning(
                    "could not renew a judge call's max_in_flight slot (tried again in %g s): %s", every, failed
                )

    def _wait_for(
        self, member: str, check: Callable[[], None] | None, on_wait: Callable[[Wait], object] | None
    ) -> float:
        """Takes a slot for ``member``; returns when (``time.monotonic()``) its take was sent: its lease runs from
        no sooner."""
        started = checked = time.monotonic()
        told = float("-inf")
        while True:
            sent = time.monotonic()
            taken, now_ms, waiting = self._take(
                keys=[self.key, self.waiting_key], args=[self.limit, self.lease_ms, member, WAITING_COUNTED_MS]
            )
            if taken:
                return sent
            now = time.monotonic()
            if now - started > self.max_wait_s:
                raise RateLimitTimeout(
                    f"judge.max_in_flight's {self.limit} calls in flight held this call over max_wait_s="
                    f"{self.max_wait_s:g} s: raise the judge metrics' max_wait_s (or max_in_flight, if the server "
                    "answers more at once)"
                )
            if on_wait is not None and now - started >= WAIT_NOTE_S and now - told >= WAIT_REFRESH_S:
                self._tell(on_wait, int(now_ms), int(waiting))
                told = now
            self._sleep(POLL_S + random.uniform(0, POLL_S))
            if check is not None and time.monotonic() - checked >= CHECK_EVERY_S:
                check()
                checked = time.monotonic()

    def _tell(self, on_wait: Callable[[Wait], object], now_ms: int, waiting: int) -> None:
        """``on_wait`` of a wait for a slot, ``waiting`` calls waiting for one; never fails the call."""
        try:
            on_wait(Wait(SLOT_WAIT, self.limit, now_ms + SLOT_WAIT_AHEAD_MS, now_ms, waiting=waiting))
        except Exception:  # saying why a call waits is worth less than the call
            log.warning("could not say that a judge call waits for a max_in_flight slot", exc_info=True)
