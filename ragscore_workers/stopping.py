"""A worker in its warm shutdown says so in the broker's Redis, with the tasks it is finishing.

Celery stops a worker's remote control first on a SIGTERM, then waits for the tasks it holds: for that while it
answers no ``inspect``, and ``ragscore status`` read its messages as held by a worker that stopped (killed, or its
host lost) though it was finishing them. From its ``worker_ready`` on, a thread of the worker's main process waits
for the stop Celery's signal handler flags (:mod:`celery.worker.state`; nothing is done in the handler itself) and
then keeps ``ragscore:stopping:{hostname}`` (the ids of the tasks it holds; its name in the set
:data:`STOPPING_INDEX`) for :data:`STOPPING_TTL_S`, renewed every :data:`RENEW_S`, until it exits (the key is
deleted at ``worker_shutdown``). A worker killed while it stops stops being said to stop once the key expires.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import redis

__all__ = ["RENEW_S", "STOPPING_INDEX", "STOPPING_PREFIX", "STOPPING_TTL_S", "stopping_workers", "watch_for_stop"]

log = logging.getLogger(__name__)

#: Keys ``{prefix}{hostname}``: a worker that is stopping, holding the task ids (a JSON list) it is finishing.
STOPPING_PREFIX = "ragscore:stopping:"
#: A set of the names of the workers whose key may be there (each key expires on its own; the set with the last).
STOPPING_INDEX = "ragscore:stopping"
#: Seconds a stopping worker's key lives unless renewed: one killed while it stops is no longer said to stop by then.
STOPPING_TTL_S = 10
#: How often a stopping worker renews its key (and lists the tasks it still holds).
RENEW_S = 2.0
#: How often the watch looks whether Celery has begun the worker's shutdown.
WATCH_EVERY_S = 0.2


def _held_task_ids() -> list[str]:
    """The ids of the tasks this worker process holds (running, or received and waiting for the pool)."""
    from celery.worker import state

    for _ in range(3):  # weak sets the consumer changes as we read: read again
        try:
            return sorted({r.id for r in [*state.active_requests, *state.reserved_requests]})
        except RuntimeError:
            continue
    return []


def _shutting_down() -> bool:
    """Whether Celery's signal handler flagged a warm or cold shutdown (an exit code, 0 included)."""
    from celery.worker import state

    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


def watch_for_stop(client: redis.Redis, hostname: str, ended: threading.Event) -> threading.Thread:
    """Start the daemon thread that says, once this worker is shutting down, that it is, until ``ended`` is set."""

    def watch() -> None:
        while not ended.wait(WATCH_EVERY_S):
            if _shutting_down():
                break
        key = f"{STOPPING_PREFIX}{hostname}"
        while not ended.is_set():
            try:
                pipe = client.pipeline(transaction=False)
                pipe.set(key, json.dumps(_held_task_ids()), ex=STOPPING_TTL_S)
                pipe.sadd(STOPPING_INDEX, hostname).expire(STOPPING_INDEX, STOPPING_TTL_S)
                pipe.execute()
            except redis.RedisError as exc:  # said, not raised: the worker's shutdown goes on
                log.warning("could not record that worker %s is stopping: %s", hostname, exc)
            ended.wait(RENEW_S)
        try:
            client.pipeline(transaction=False).delete(key).srem(STOPPING_INDEX, hostname).execute()
        except redis.RedisError:
            pass  # they expire

    thread = threading.Thread(target=watch, name="ragscore-stopping", daemon=True)
    thread.start()
    return thread


def stopping_workers(client: redis.Redis) -> dict[str, set[str]]:
    """The workers that say they are stopping, each with the ids of the tasks it is finishing (from the index, not a
    scan of the keyspace: a store of millions of keys is read in two round trips)."""
    names = sorted(n.decode() if isinstance(n, bytes) else str(n) for n in client.smembers(STOPPING_INDEX))
    if not names:
        return {}
    raws = client.mget([f"{STOPPING_PREFIX}{name}" for name in names])
    return {name: ids for name, raw in zip(names, raws, strict=True) if (ids := _ids(raw)) is not None}


def _ids(raw: Any) -> set[str] | None:
    """A key's task ids (None: gone since it was listed, or not a list of ids)."""
    try:
        ids = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    return {str(i) for i in ids} if isinstance(ids, list) else None
