"""A worker says, while it runs, which queues it consumes: a key in the run store that it renews.

A worker busy with its tasks (a judge worker's 32 threads on shared cores) may miss the 1 s ``inspect`` that asks
the workers which queues they consume; once its tasks outlast the window in which its last take counts
(``orchestrator.queues.RECENTLY_TAKEN_S``), a queue it was scoring was called unserved ("no worker consumes it;
start one"). From its ``worker_ready``, a :class:`Heartbeat` thread of the worker's main process keeps a key
``ragscore:alive:{token}`` (the worker's name, its queues and its broker's database, JSON; its token in the set
:data:`ALIVE_INDEX`) for
:data:`ALIVE_TTL_S`, renewed every :data:`RENEW_S`, until its shutdown begins (the key is deleted then: a stopping
worker takes no more work). A worker killed whole stops being said to live once its key expires.

The keys are the store's (``ragscore:``), as :mod:`.stopping`'s: a broker user limited to kombu's keys needs nothing
more. The store can be shared by brokers of several databases (the embedded mode's lanes: a database of queues for
each process), so a key names its worker's: a queue ``cpu`` of one lane is not served by another lane's worker.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable

import redis

from .stopping import RENEW_S

__all__ = ["ALIVE_INDEX", "ALIVE_PREFIX", "ALIVE_TTL_S", "Heartbeat", "alive_queues", "database_of"]

log = logging.getLogger(__name__)

#: Keys ``{prefix}{token}``: a worker that runs, its name and the queues it consumes (JSON).
ALIVE_PREFIX = "ragscore:alive:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
ALIVE_INDEX = "ragscore:alive"
#: Seconds a worker's key lives unless renewed (every ``RENEW_S``): one killed whole is no longer said to live by then.
ALIVE_TTL_S = 10


class Heartbeat:
    """The daemon thread of one worker that says, until :meth:`stop`, that it runs and consumes ``queues()`` of its
    broker's database ``database``."""

    def __init__(self, client: redis.Redis, worker: str, queues: Callable[[], list[str]], database: int) -> None:
        self.client, self.worker, self.queues, self.database = client, worker, queues, database
        self.token = uuid.uuid4().hex
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="ragscore-alive", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The worker's shutdown began (called from Celery's signal handler: it only sets an event)."""
        if not self._stopped.is_set():
            self._stopped.set()

    def _beat(self) -> None:
        key, warned = f"{ALIVE_PREFIX}{self.token}", False
        while not self._stopped.is_set():
            try:
                pipe = self.client.pipeline(transaction=False)
                said = {"worker": self.worker, "queues": self.queues(), "database": self.database}
                pipe.set(key, json.dumps(said), ex=ALIVE_TTL_S)
                pipe.sadd(ALIVE_INDEX, self.token).expire(ALIVE_INDEX, ALIVE_TTL_S)
                pipe.execute()
            except redis.RedisError as exc:  # said once, not raised: the worker goes on
                if not warned:
                    log.warning("worker %s: could not record in the run store that it runs (a status may call its "
                                "queues unserved while it is too busy to answer): %s", self.worker, exc)  # fmt: skip
                warned = True
            self._stopped.wait(RENEW_S)
        try:
            self.client.pipeline(transaction=False).delete(key).srem(ALIVE_INDEX, self.token).execute()
        except redis.RedisError:
            pass  # it expires


def database_of(client: redis.Redis) -> int:
    """The database number ``client`` uses (a broker's: its queues' database)."""
    return int(client.connection_pool.connection_kwargs.get("db") or 0)


def alive_queues(client: redis.Redis, database: int) -> set[str]:
    """The queues of broker database ``database`` consumed by the workers that say they run, read from ``client``
    (the store; from the index, not a scan of the keyspace)."""
    tokens = sorted(t.decode() if isinstance(t, bytes) else str(t) for t in client.smembers(ALIVE_INDEX))
    if not tokens:
        return set()
    found: set[str] = set()
    for raw in client.mget([f"{ALIVE_PREFIX}{token}" for token in tokens]):
        try:
            said = json.loads(raw) if raw is not None else None
        except ValueError:
            continue
        if isinstance(said, dict) and said.get("database") == database and isinstance(said.get("queues"), list):
            found.update(str(q) for q in said["queues"])
    return found
