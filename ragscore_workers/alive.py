"""A worker says, while it runs, which queues it consumes: a key in the run store that it renews.

A worker busy with its tasks (a judge worker's 32 threads on shared cores) may miss the 1 s ``inspect`` that asks
the workers which queues they consume; once its tasks outlast the window in which its last take counts
(``orchestrator.queues.RECENTLY_TAKEN_S``), a queue it was scoring was called unserved ("no worker consumes it;
start one"). From its ``worker_ready``, a :func:`heartbeat` (a :class:`~.kept.KeptKey`) of the worker's main
process keeps a key ``ragscore:alive:{token}`` (the worker's name, its queues and its broker's database, JSON; its
token in the set :data:`ALIVE_INDEX`) for ``RAGSCORE_ALIVE_TTL_S`` (the key says it), renewed every
:data:`~.kept.RENEW_S`, until its shutdown begins (the key is deleted then: a stopping worker takes no more work). A
worker killed whole stops being said to live once its key expires.

The key also lists the ids of the tasks its worker holds (``tasks``, read at ``listed_at`` on its host's clock, each
renewal): Redis's record of the messages delivered and not acknowledged does not say which worker took one, so a
live worker that misses the ask of what the workers hold, on a queue it shares with a worker killed whole, had the
killed one's messages taken for its own. A worker holding more than :data:`ALIVE_TASKS_LISTED` lists none, as an
older worker's key (:meth:`AliveKey.may_hold`: it may hold any message of its queues).

The keys are the store's (``ragscore:``), as :mod:`.stopping`'s: a broker user limited to kombu's keys needs nothing
more. The store can be shared by brokers of several databases (the embedded mode's lanes: a database of queues for
each process) and of several servers (two clusters, one store), so a key names its worker's :class:`Broker`: a
queue ``cpu`` of one lane, or of one cluster, is not served by another's worker. The server is the broker Redis's
``INFO server`` ``run_id`` (the same whatever host name a client uses; a restarted broker has a new one, read again
at each renewal). Where INFO is refused (an ACL, a managed service) the key names the database alone, and a key
without a server (that, or an older worker's) matches its database on any server, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from .kept import KeptKey, held_task_ids, kept_entries
from .settings import DEFAULT_ALIVE_TTL_S, get_settings

__all__ = [
    "ALIVE_INDEX",
    "ALIVE_PREFIX",
    "ALIVE_TASKS_LISTED",
    "ALIVE_TTL_S",
    "LISTED_AFTER_S",
    "AliveKey",
    "Broker",
    "alive_keys",
    "alive_processes",
    "alive_queues",
    "broker_of",
    "heartbeat",
]

#: Keys ``{prefix}{token}``: a worker that runs, its name, the queues it consumes, its pool's processes, its broker's
#: database and server, and the tasks it holds (JSON).
ALIVE_PREFIX = "ragscore:alive:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
ALIVE_INDEX = "ragscore:alive"
#: Seconds a worker's key lives unless renewed by default (``RAGSCORE_ALIVE_TTL_S``), and that of an older worker's key,
#: which does not say its own: one killed whole is no longer said to live by then.
ALIVE_TTL_S = DEFAULT_ALIVE_TTL_S
#: Most task ids a worker's key lists (about 40 bytes each): a worker holding more lists none, and may hold any
#: message of its queues (as an older worker's key says).
ALIVE_TASKS_LISTED = 128
#: Seconds after a message's delivery (kombu's stamp, by its worker's clock) from which that worker's key lists it: its
#: consumer records what it takes as it takes it, in one thread; the margin is a loaded host's.
LISTED_AFTER_S = 1.0


@dataclass(frozen=True)
class AliveKey:
    """A worker's key saying it runs, as read: its queues, its milliseconds left (they grow as its worker renews it),
    the ids of the tasks it held at ``listed_at`` (its host's clock; None: an older worker's key, one holding more
    than :data:`ALIVE_TASKS_LISTED`, or one that could not read them), its worker's name (Celery's hostname; ""
    where the key does not say it) and the seconds it lives unless renewed (:data:`ALIVE_TTL_S` where it does not say
    them)."""

    queues: frozenset[str]
    left_ms: int
    tasks: frozenset[str] | None = None
    listed_at: float = 0.0
    worker: str = ""
    ttl_s: int = ALIVE_TTL_S

    def renewed_within(self, within_s: float) -> bool:
        """Whether it was renewed in the last ``within_s`` s: its time left is over its TTL less that."""
        return self.left_ms > (self.ttl_s - within_s) * 1000

    def may_hold(self, task_id: str, delivered_at: float) -> bool:
        """Whether its worker may hold task ``task_id``, delivered at ``delivered_at`` (kombu's stamp, its delivering
        worker's clock): it lists it, or cannot tell (no list, or one read less than :data:`LISTED_AFTER_S` after that
        delivery)."""
        return self.tasks is None or task_id in self.tasks or self.listed_at < delivered_at + LISTED_AFTER_S


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
    client: redis.Redis,
    worker: str,
    queues: Callable[[], list[str]],
    broker: redis.Redis,
    processes: int = 1,
    held: Callable[[], list[str] | None] = held_task_ids,
    ttl_s: int | None = None,
) -> KeptKey:
    """The key of one worker saying, until its :meth:`~.kept.KeptKey.end` (its shutdown began), that it runs, with
    ``processes`` pool processes, consumes ``queues()`` of ``broker`` (a client of its broker: its :class:`Broker`
    read at each renewal) and holds the tasks ``held()`` lists (default: Celery's state of this process; None: not
    known), for ``ttl_s`` s unless renewed (None: ``RAGSCORE_ALIVE_TTL_S``), which it says too."""
    ttl = get_settings().alive_ttl_s if ttl_s is None else ttl_s
    what = (f"worker {worker}: could not record in the run store that it runs (a status may call its queues "
            "unserved while it is too busy to answer)")  # fmt: skip
    known: Broker | None = None

    def value() -> dict[str, Any]:
        nonlocal known
        known = broker_of(broker, known)
        said = {"worker": worker, "queues": queues(), "processes": processes, "ttl_s": ttl}
        return said | known.said() | _listed(held)

    return KeptKey(client, ALIVE_PREFIX, ALIVE_INDEX, ttl, value, what, begun=True)


def _listed(held: Callable[[], list[str] | None]) -> dict[str, Any]:
    """What a worker's key says of the tasks it holds: their ids and when they were read (this host's clock), or
    nothing where they are not known or more than :data:`ALIVE_TASKS_LISTED`."""
    at = time.time()  # before the read: a task listed was held then
    ids = held()
    return {"tasks": ids, "listed_at": at} if ids is not None and len(ids) <= ALIVE_TASKS_LISTED else {}


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
    return {queue for key in alive_keys(client, broker).values() for queue in key.queues}


def alive_processes(client: redis.Redis, broker: Broker, queue: str) -> int:
    """The pool processes of the workers of ``broker`` that say they run and consume ``queue`` (a key of an older
    worker, which does not say them, counts one), read from ``client`` (the store)."""
    said = [s.get("processes") for s, _ in _alive_on(client, broker).values() if queue in s["queues"]]
    return sum(n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1 for n in said)


def alive_keys(client: redis.Redis, broker: Broker) -> dict[str, AliveKey]:
    """The keys of the workers of ``broker`` that say they run, read from ``client`` (the store), as
    :class:`AliveKey` (their milliseconds left, :func:`~.kept.kept_entries`, grow as their worker renews them, every
    :data:`~.kept.RENEW_S`)."""
    return {key: _alive_key(said, left) for key, (said, left) in _alive_on(client, broker).items()}


def _alive_key(said: dict[str, Any], left: int) -> AliveKey:
    """One worker's key, as :func:`alive_keys` reads it: a list of tasks that is not one of ids with its time (an
    older worker's key has none) is none, and a TTL that is not a positive whole number (an older worker's key has
    none) :data:`ALIVE_TTL_S`."""
    tasks, at, ttl = said.get("tasks"), said.get("listed_at"), said.get("ttl_s")
    queues, worker = frozenset(str(q) for q in said["queues"]), str(said.get("worker") or "")
    ttl_s = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0 else ALIVE_TTL_S
    if isinstance(tasks, list) and isinstance(at, int | float) and not isinstance(at, bool):
        return AliveKey(queues, left, frozenset(str(t) for t in tasks), float(at), worker, ttl_s)
    return AliveKey(queues, left, worker=worker, ttl_s=ttl_s)


def _alive_on(client: redis.Redis, broker: Broker) -> dict[str, tuple[dict[str, Any], int]]:
    """The keys of the workers of ``broker`` that say they run (their ``queues`` a list), each with what it says and
    its milliseconds left, read from ``client`` (the store; from the index, not a scan of the keyspace)."""
    return {key: (said, left) for key, (said, left) in kept_entries(client, ALIVE_PREFIX, ALIVE_INDEX).items()
            if broker.serves(said) and isinstance(said.get("queues"), list)}  # fmt: skip
