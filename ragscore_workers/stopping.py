"""A worker in its warm shutdown says so in the run store, with the tasks it is finishing.

Celery stops a worker's remote control first on a SIGTERM, then waits for the tasks it holds: for that while it
answers no ``inspect``, and ``ragscore status`` read its messages as held by a worker that stopped (killed, or its
host lost) though it was finishing them. From its ``worker_ready`` on, a :func:`stop_watch` (a
:class:`~.kept.KeptKey`) of the worker's main process waits for Celery's ``worker_shutting_down`` (sent by its
signal handler) and then keeps a key ``ragscore:stopping:{token}`` (the worker's name and the ids of the tasks it
holds; its token in the set :data:`STOPPING_INDEX`) for :data:`STOPPING_TTL_S`, renewed every :data:`~.kept.RENEW_S`,
until it exits (the key is deleted at ``worker_shutdown``, or as soon as a cold shutdown, which cancels the tasks,
follows). A cold shutdown says nothing. A worker killed while it stops stops being said to stop once the key expires.

The keys are the store's (``ragscore:``, which a worker's store user may already write, a reading user read): a
broker user limited to kombu's keys needs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable

import redis

from .kept import KeptKey, held_task_ids, kept_values

__all__ = [
    "STOPPING_INDEX",
    "STOPPING_PREFIX",
    "STOPPING_TTL_S",
    "stop_watch",
    "stopping_workers",
]

#: Keys ``{prefix}{token}``: a worker that is stopping, its name and the task ids it is finishing (JSON).
STOPPING_PREFIX = "ragscore:stopping:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
STOPPING_INDEX = "ragscore:stopping"
#: Seconds a stopping worker's key lives unless renewed: one killed while it stops is no longer said to stop by then.
STOPPING_TTL_S = 10


def stop_watch(client: redis.Redis, worker: str, held: Callable[[], list[str] | None] = held_task_ids) -> KeptKey:
    """The key of one worker saying, from its :meth:`~.kept.KeptKey.begin` (its shutdown began) until its
    :meth:`~.kept.KeptKey.end`, that it is stopping. ``held``: the ids of the tasks it holds (default: Celery's
    state of this process)."""
    what = (f"worker {worker}: could not record in the run store that it is stopping (status may say its tasks are "
            "held by a worker that stopped)")  # fmt: skip
    return KeptKey(client, STOPPING_PREFIX, STOPPING_INDEX, STOPPING_TTL_S,
                   lambda: {"worker": worker, "tasks": held() or []}, what)  # fmt: skip


def stopping_workers(client: redis.Redis) -> dict[str, set[str]]:
    """The workers that say they are stopping, each with the ids of the tasks it is finishing (from the index, not a
    scan of the keyspace: a store of millions of keys is read in two round trips)."""
    found: dict[str, set[str]] = {}
    for said in kept_values(client, STOPPING_PREFIX, STOPPING_INDEX):
        if isinstance(said.get("tasks"), list):
            found.setdefault(str(said.get("worker")), set()).update(str(i) for i in said["tasks"])
    return found
