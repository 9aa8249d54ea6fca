"""A worker says, while it runs, which queues it consumes: a key in the run store that it renews.

A worker busy with its tasks (a judge worker's 32 threads on shared cores) may miss the 1 s ``inspect`` that asks
the workers which queues they consume; once its tasks outlast the window in which its last take counts
(``orchestrator.queues.RECENTLY_TAKEN_S``), a queue it was scoring was called unserved ("no worker consumes it;
start one"). From its ``worker_ready``, a :func:`heartbeat` (a :class:`~.kept.KeptKey`) of the worker's main
process keeps a key ``ragscore:alive:{token}`` (the worker's name, its queues and its broker's database, JSON; its
token in the set :data:`ALIVE_INDEX`) for :data:`ALIVE_TTL_S`, renewed every :data:`~.kept.RENEW_S`, until its
shutdown begins (the key is deleted then: a stopping worker takes no more work). A worker killed whole stops being
said to live once its key expires.

The keys are the store's (``ragscore:``), as :mod:`.stopping`'s: a broker user limited to kombu's keys needs nothing
more. The store can be shared by brokers of several databases (the embedded mode's lanes: a database of queues for
each process) and of several servers (two clusters, one store), so a key names its worker's :class:`Broker`: a
queue ``cpu`` of one lane, or of one cluster, is not served by another's worker. The server is the broker Redis's
``INFO server`` ``run_id`` (the same whatever host name a client uses; a restarted broker has a new one, read again
at each renewal). Where INFO is refused (an ACL, a managed service) the key names the database alone, and a key
without a server (that, or an older worker's) matches its database on any server, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import redis

from .kept import KeptKey, kept_entries

__all__ = [
    "ALIVE_INDEX",
    "ALIVE_PREFIX",
    "ALIVE_TTL_S",
    "Broker",
    "alive_keys",
    "alive_processes",
    "alive_queues",
    "broker_of",
    "heartbeat",
]

#: Keys ``{prefix}{token}``: a worker that runs, its name, the queues it consumes, its pool's processes and its
#: broker's database and server (JSON).
ALIVE_PREFIX = "ragscore:alive:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
ALIVE_INDEX = "ragscore:alive"
#: Seconds a worker's key lives unless renewed: one killed whole is no longer said to live by then.
ALIVE_TTL_S = 10


@dataclass(frozen=True)
class Broker:
    """Whose queues: a broker Redis's database, and its server (its ``run_id``; None where it is not known)."""

    database: int
    server: str | None = None

    def said(self) -> dict[str, Any]:
        """What a worker's key says of its broker (no server where it is not known)."""
        return {"database": self.database} | ({"server": self.server} if self.server else {})

    def serves(self, said: dict[str, Any]) -> bool:
        """Whether a worker's key ``said`` names this broker: the same database, and the same server where both are
        known (a key with none, an older worker's or one refused INFO, matches its database on any server)."""
        theirs = said.get("server")
        return said.get("database") == self.database and (theirs is None or self.server in (None, theirs))


def heartbeat(
    client: redis.Redis, worker: str, queues: Callable[[], list[str]], broker: redis.Redis, processes: int = 1
) -> KeptKey:
    """The key of one worker saying, until its :meth:`~.kept.KeptKey.end` (its shutdown began), that it runs, with
    ``processes`` pool processes, and consumes ``queues()`` of ``broker`` (a client of its broker: its :class:`Broker`
    read at each renewal)."""
    what = (f"worker {worker}: could not record in the run store that it runs (a status may call its queues "
            "unserved while it is too busy to answer)")  # fmt: skip
    known: Broker | None = None

    def value() -> dict[str, Any]:
        nonlocal known
        known = broker_of(broker, known)
        return {"worker": worker, "queues": queues(), "processes": processes, **known.said()}

    return KeptKey(client, ALIVE_PREFIX, ALIVE_INDEX, ALIVE_TTL_S, value, what, begun=True)


def _database_of(client: redis.Redis) -> int:
    """The database number ``client`` uses (a broker's: its queues' database)."""
    return int(client.connection_pool.connection_kwargs.get("db") or 0)


def broker_of(client: redis.Redis, known: Broker | None = None) -> Broker:
    """The :class:`Broker` ``client`` (a broker's) uses; its server None where ``INFO`` is refused, ``known``'s where
    the broker cannot be reached (a key is never withheld for it)."""
    try:
        server = client.info("server").get("run_id")
    except (redis.ConnectionError, redis.TimeoutError):
        return known or Broker(_database_of(client))
    except redis.RedisError:  # refused (an ACL without INFO, a managed service that renamed it)
        server = None
    return Broker(_database_of(client), str(server) if server else None)


def alive_queues(client: redis.Redis, broker: Broker) -> set[str]:
    """The queues of ``broker`` consumed by the workers that say they run, read from ``client`` (the store)."""
    return {queue for queues, _ in alive_keys(client, broker).values() for queue in queues}


def alive_processes(client: redis.Redis, broker: Broker, queue: str) -> int:
    """The pool processes of the workers of ``broker`` that say they run and consume ``queue`` (a key of an older
    worker, which does not say them, counts one), read from ``client`` (the store)."""
    said = [s.get("processes") for s, _ in _alive_on(client, broker).values() if queue in s["queues"]]
    return sum(n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1 for n in said)


def alive_keys(
    client: redis.Redis, broker: Broker, but: Collection[str] = frozenset()
) -> dict[str, tuple[set[str], int]]:
    """The keys of the workers of ``broker`` that say they run, but those named in ``but`` (Celery's hostnames), read
    from ``client`` (the store): each one's queues and the milliseconds it has left (:func:`~.kept.kept_entries`: they
    grow as its worker renews it, every :data:`~.kept.RENEW_S`)."""
    return {key: ({str(q) for q in said["queues"]}, left) for key, (said, left) in _alive_on(client, broker).items()
            if said.get("worker") not in but}  # fmt: skip


def _alive_on(client: redis.Redis, broker: Broker) -> dict[str, tuple[dict[str, Any], int]]:
    """The keys of the workers of ``broker`` that say they run (their ``queues`` a list), each with what it says and
    its milliseconds left, read from ``client`` (the store; from the index, not a scan of the keyspace)."""
    return {key: (said, left) for key, (said, left) in kept_entries(client, ALIVE_PREFIX, ALIVE_INDEX).items()
            if broker.serves(said) and isinstance(said.get("queues"), list)}  # fmt: skip
