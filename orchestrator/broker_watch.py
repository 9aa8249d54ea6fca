"""``ragscore worker``'s watch on its broker: Celery retries a lost broker for ever, with no exit and no line of its
own worth a page; the supervisor pings it, says once when it is lost and once when it is back, and stops its workers
with an error once it stayed lost for ``--broker-timeout`` seconds (0: never)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ragscore_workers.errors import BrokerError, RagscoreError
from ragscore_workers.redaction import redact_url

__all__ = ["BROKER_PING_S", "DEFAULT_BROKER_TIMEOUT_S", "BrokerWatch"]

#: Seconds between two pings of the broker by ``ragscore worker``'s supervisor.
BROKER_PING_S = 2.0
#: ``ragscore worker --broker-timeout``'s default: seconds without the broker before it stops with an error (a
#: Redis restart or a fail-over takes far less; a broker gone for good is said to a supervisor within the quarter).
DEFAULT_BROKER_TIMEOUT_S = 900.0


def _clock(wall: float) -> str:
    """``wall`` (a ``time.time()``) as the local time of day, HH:MM:SS."""
    return time.strftime("%H:%M:%S", time.localtime(wall))


def _unanswered(url: str) -> str | None:
    """None when the Redis at ``url`` answers one ping, else why not (a wrong password now included: said, and
    retried as Celery retries it)."""
    from ragscore_workers.store import probe_redis

    try:
        return probe_redis(url, "the broker")
    except RagscoreError as exc:
        return str(exc)


class BrokerWatch:
    """Pings the broker at ``url`` every :data:`BROKER_PING_S` (:meth:`check`), saying with ``say`` when it is lost
    and when it is back; :class:`BrokerError` once it has not answered for ``timeout_s`` seconds (0: never)."""

    def __init__(self, url: str, timeout_s: float, say: Callable[[str], None]) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._say = say
        self._due = 0.0  # the monotonic time of the next ping
        #: When the first ping of the outage under way went unanswered: monotonic and wall-clock; None: none under way.
        self._lost: tuple[float, float] | None = None

    def check(self) -> None:
        """Ping the broker if a ping is due; say when it is lost or back; raise BrokerError once it was lost for
        ``timeout_s``."""
        now = time.monotonic()
        if now < self._due:
            return
        why = _unanswered(self.url)
        self._due = time.monotonic() + BROKER_PING_S
        if why is None:
            self._back()
        elif self._lost is None:
            self._lost = (now, time.time())
            self._say(self._lost_line(why, self._lost[1]))
        elif self.timeout_s and now - self._lost[0] >= self.timeout_s:
            raise BrokerError(
                f"The broker {redact_url(self.url)} was unreachable from {_clock(self._lost[1])} for "
                f"{now - self._lost[0]:.0f} s, past --broker-timeout {self.timeout_s:g} ({why}); its workers were "
                "stopped"
            )

    def _lost_line(self, why: str, since: float) -> str:
        """The line that says the broker was lost at ``since`` (wall-clock) and what happens next."""
        until = (
            f"stopping its workers with an error if it still is at {_clock(since + self.timeout_s)} "
            f"(--broker-timeout {self.timeout_s:g})"
            if self.timeout_s
            else "for ever (--broker-timeout 0)"
        )
        return f"broker {redact_url(self.url)} unreachable since {_clock(since)} ({why}): retrying, {until}"

    def _back(self) -> None:
        """Say the broker is back, where an outage was under way."""
        if self._lost is not None:
            wall = time.time()
            self._say(
                f"broker {redact_url(self.url)} back at {_clock(wall)}, unreachable for {wall - self._lost[1]:.0f} s"
            )
            self._lost = None
