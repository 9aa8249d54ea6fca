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
each process), so a key names its worker's: a queue ``cpu`` of one lane is not served by another lane's worker.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from .kept import KeptKey, kept_values

__all__ = ["ALIVE_INDEX", "ALIVE_PREFIX", "ALIVE_TTL_S", "alive_queues", "database_of", "heartbeat"]

#: Keys ``{prefix}{token}``: a worker that runs, its name, the queues it consumes and its broker's database (JSON).
ALIVE_PREFIX = "ragscore:alive:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
ALIVE_INDEX = "ragscore:alive"
#: Seconds a worker's key lives unless renewed: one killed whole is no longer said to live by then.
ALIVE_TTL_S = 10


def heartbeat(client: redis.Redis, worker: str, queues: Callable[[], list[str]], database: int) -> KeptKey:
    """The key of one worker saying, until its :meth:`~.kept.KeptKey.end` (its shutdown began), that it runs and
    consumes ``queues()`` of its broker's database ``database``."""
    what = (f"worker {worker}: could not record in the run store that it runs (a status may call its queues "
            "unserved while it is too busy to answer)")  # fmt: skip
    return KeptKey(client, ALIVE_PREFIX, ALIVE_INDEX, ALIVE_TTL_S,
                   lambda: {"worker": worker, "queues": queues(), "database": database}, what, begun=True)  # fmt: skip


def database_of(client: redis.Redis) -> int:
    """The database number ``client`` uses (a broker's: its queues' database)."""
    return int(client.connection_pool.connection_kwargs.get("db") or 0)


def alive_queues(client: redis.Redis, database: int) -> set[str]:
    """The queues of broker database ``database`` consumed by the workers that say they run, read from ``client``
    (the store; from the index, not a scan of the keyspace)."""
    found: set[str] = set()
    for said in kept_values(client, ALIVE_PREFIX, ALIVE_INDEX):
        if said.get("database") == database and isinstance(said.get("queues"), list):
            found.update(str(q) for q in said["queues"])
    return found
