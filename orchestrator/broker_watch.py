"""``ragscore worker``'s watch on its broker: Celery retries a lost broker for ever, with no exit and no line of its
own worth a page; a thread of its own pings it (so that a ping a black hole holds up never delays the supervisor's
restart of a dead worker), the supervisor says once when it is lost and once when it is back (and again where the
reason changes: unreachable, refusing it, loading its data), and stops its workers with an error once it stayed lost
for ``--broker-timeout`` seconds (0: never)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ragscore_workers.errors import BrokerError, RagscoreError
from ragscore_workers.redaction import redact_url

__all__ = ["BROKER_PING_S", "DEFAULT_BROKER_TIMEOUT_S", "PING_WAIT_S", "BrokerWatch"]

#: Seconds between two pings of the broker by ``ragscore worker``'s watch.
BROKER_PING_S = 2.0
#: Seconds a ping may go unanswered before the broker counts as unreachable all the same (a ping times out after
#: 5 s to connect and 5 s to read; a resolver that does not answer has no bound of ours).
PING_WAIT_S = 15.0
#: ``ragscore worker --broker-timeout``'s default: seconds without the broker before it stops with an error (a
#: Redis restart or a fail-over takes far less; a broker gone for good is said to a supervisor within the quarter).
DEFAULT_BROKER_TIMEOUT_S = 900.0

#: How a broker fails, as said while it does and once it did: one that does not answer, one that answers and refuses
#: (its password, its user, a NOPERM to its ping, its TLS certificate: it never heals by itself, yet counts toward
#: --broker-timeout as one unreachable does, so that an admin's fix meanwhile stops no worker), one that loads its
#: data (a restart).
UNREACHABLE = ("unreachable", "was unreachable")
REFUSING = ("answering but refusing it", "refused it")
LOADING = ("answering but still loading its data", "was still loading its data")
#: A ping's outcome: None, answered; else how it failed and why (Redis's words).
Outcome = tuple[tuple[str, str], str] | None


def _clock(wall: float) -> str:
    """``wall`` (a ``time.time()``) as the local time of day, HH:MM:SS."""
    return time.strftime("%H:%M:%S", time.localtime(wall))


def _ping(url: str) -> Outcome:
    """One ping of the Redis at ``url`` (:func:`.store.probe_redis`)."""
    from ragscore_workers.store import probe_redis

    try:
        why = probe_redis(url, "the broker")
    except RagscoreError as exc:  # a wrong password, a user it no longer knows or may not PING, a certificate refused
        return REFUSING, str(exc)
    if why is None:
        return None
    # redis-py's BusyLoadingError, which probe_redis returns as its words (Redis's, Valkey's: "... is loading the
    # dataset in memory"): retried like a broker down, yet it answers
    return (LOADING if "loading the dataset" in why else UNREACHABLE), why


class BrokerWatch:
    """Pings the broker at ``url`` every :data:`BROKER_PING_S` in a thread of its own while entered; :meth:`check`,
    which never waits on a ping, says with ``say`` when it is lost, why, and when it is back, and raises
    :class:`BrokerError` once it has been lost for ``timeout_s`` seconds (0: never)."""

    def __init__(self, url: str, timeout_s: float, say: Callable[[str], None]) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._say = say
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._pings, name="ragscore-broker-watch", daemon=True)
        #: The last ping's outcome and when it began (monotonic and wall-clock), None until one ended; and when the
        #: ping under way began (monotonic), None between two. Each is assigned whole, by the thread alone.
        self._last: tuple[Outcome, float, float] | None = None
        self._pinging: float | None = None
        #: The outage under way: when its first ping began (monotonic, wall-clock) and how it was last said.
        self._lost: tuple[float, float, tuple[str, str]] | None = None

    def __enter__(self) -> BrokerWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()  # a ping under way is left to end alone (a daemon thread: it holds up no exit)

    def _pings(self) -> None:
        """The thread: ping, then wait :data:`BROKER_PING_S`, until the watch ends."""
        while not self._done.is_set():
            self._pinging = began = time.monotonic()
            wall = time.time()
            outcome = _ping(self.url)
            self._last, self._pinging = (outcome, began, wall), None
            self._done.wait(BROKER_PING_S)

    def check(self) -> None:
        """Say when the broker is lost, why (again where that changes) or back; raise BrokerError once it was lost
        for ``timeout_s``. A ping under way for over :data:`PING_WAIT_S` counts as unanswered."""
        now = time.monotonic()
        if (pinging := self._pinging) is not None and now - pinging > PING_WAIT_S:
            outcome: Outcome = UNREACHABLE, f"a ping unanswered for {now - pinging:.0f} s"
            began, wall = pinging, time.time() - (now - pinging)
        elif (last := self._last) is not None:
            outcome, began, wall = last
        else:
            return
        if outcome is None:
            self._back()
            return
        how, why = outcome
        if self._lost is None or self._lost[2] != how:
            first, first_wall = (began, wall) if self._lost is None else self._lost[:2]
            self._lost = (first, first_wall, how)
            self._say(self._lost_line(how, why, wall, first_wall))
        elif self.timeout_s and now - self._lost[0] >= self.timeout_s:
            raise BrokerError(
                f"The broker {redact_url(self.url)} {how[1]} from {_clock(self._lost[1])} for "
                f"{now - self._lost[0]:.0f} s, past --broker-timeout {self.timeout_s:g} ({why}); its workers were "
                "stopped"
            )

    def _lost_line(self, how: tuple[str, str], why: str, since: float, first: float) -> str:
        """The line that says the broker is ``how`` since ``since`` (wall-clock), in an outage begun at ``first``, and
        what happens next."""
        until = (
            f"stopping its workers with an error if it still is at {_clock(first + self.timeout_s)} "
            f"(--broker-timeout {self.timeout_s:g})"
            if self.timeout_s
            else "for ever (--broker-timeout 0)"
        )
        return f"broker {redact_url(self.url)} {how[0]} since {_clock(since)} ({why}): retrying, {until}"

    def _back(self) -> None:
        """Say the broker is back, where an outage was under way."""
        if self._lost is not None:
            wall = time.time()
            self._say(
                f"broker {redact_url(self.url)} back at {_clock(wall)}, unusable for {wall - self._lost[1]:.0f} s"
            )
            self._lost = None
