"""A worker in its warm shutdown says so in the run store, with the tasks it is finishing.

Celery stops a worker's remote control first on a SIGTERM, then waits for the tasks it holds: for that while it
answers no ``inspect``, and ``ragscore status`` read its messages as held by a worker that stopped (killed, or its
host lost) though it was finishing them. From its ``worker_ready`` on, a :class:`StopWatch` thread of the worker's main
process waits for Celery's warm ``worker_shutting_down`` (sent by its signal handler, which only sets an event here)
and then keeps a key ``ragscore:stopping:{token}`` (the worker's name and the ids of the tasks it holds; its token in
the set :data:`STOPPING_INDEX`) for :data:`STOPPING_TTL_S`, renewed every :data:`RENEW_S`, until it exits (the key is
deleted at ``worker_shutdown``, or as soon as a cold shutdown, which cancels the tasks, follows). A cold shutdown
says nothing. A worker killed while it stops stops being said to stop once the key expires.

The keys are the store's (``ragscore:``, which a worker's store user may already write, a reading user read): a
broker user limited to kombu's keys needs nothing more. Each worker process has a token of its own: two workers of
one name (a host name reused) do not overwrite each other's tasks.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

import redis

__all__ = [
    "READY_FD_ENV",
    "RENEW_S",
    "STOPPING_INDEX",
    "STOPPING_PREFIX",
    "STOPPING_TTL_S",
    "StopWatch",
    "say_ready",
    "stopping_workers",
]

log = logging.getLogger(__name__)

#: Keys ``{prefix}{token}``: a worker that is stopping, its name and the task ids it is finishing (JSON).
STOPPING_PREFIX = "ragscore:stopping:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
STOPPING_INDEX = "ragscore:stopping"
#: Seconds a stopping worker's key lives unless renewed: one killed while it stops is no longer said to stop by then.
STOPPING_TTL_S = 10
#: How often a stopping worker renews its key (and lists the tasks it still holds).
RENEW_S = 2.0
#: The environment variable naming the write end (a file descriptor) of a pipe on which the worker writes a byte once
#: ready (set by the process that started it: one stopped before then holds no task, and needs no warm stop's wait).
READY_FD_ENV = "RAGSCORE_READY_FD"


def say_ready() -> None:
    """Write a byte on the pipe :data:`READY_FD_ENV` names, if any, and close it: this worker is ready and may take
    tasks from now on (once: the variable goes)."""
    fd = os.environ.pop(READY_FD_ENV, None)
    if not fd:
        return
    try:
        os.write(int(fd), b"r")
        os.close(int(fd))
    except (OSError, ValueError) as exc:  # said, not raised: its starter (gone, or stopping it) reads it as booting
        log.warning("could not say this worker is ready on %s=%s: %s", READY_FD_ENV, fd, exc)


def _held_task_ids() -> list[str]:
    """The ids of the tasks this worker process holds (running, or received and waiting for the pool)."""
    from celery.worker import state

    for _ in range(3):  # weak sets the consumer changes as we read: read again
        try:
            return sorted({r.id for r in [*state.active_requests, *state.reserved_requests]})
        except RuntimeError:
            continue
    return []


class StopWatch:
    """The daemon thread of one worker that says, from :meth:`stopping` until :meth:`end`, that it is stopping.

    ``held``: the ids of the tasks it holds (default: Celery's state of this process)."""

    def __init__(self, client: redis.Redis, worker: str, held: Callable[[], list[str]] = _held_task_ids) -> None:
        self.client, self.worker, self.held = client, worker, held
        self.key = f"{STOPPING_PREFIX}{uuid.uuid4().hex}"
        self._stopping, self._ended = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._watch, name="ragscore-stopping", daemon=True)
        self._thread.start()

    def stopping(self) -> None:
        """The worker's shutdown began (called from Celery's signal handler: it only sets an event, once: a second
        signal does not take the event's lock again)."""
        if not self._stopping.is_set():
            self._stopping.set()

    def dropping(self) -> None:
        """The worker's shutdown turned cold (SIGQUIT, a second Ctrl-C: its tasks are cancelled, not finished): it no
        longer says it is finishing them, its key goes at once (called from Celery's signal handler: it only sets an
        event, once, as :meth:`stopping`)."""
        if not self._ended.is_set():
            self._ended.set()

    def end(self, timeout_s: float = 2.0) -> None:
        """The worker's tasks are done: its key goes; waits ``timeout_s`` at most for that."""
        self._ended.set()
        self.stopping()
        self._thread.join(timeout_s)

    def _watch(self) -> None:
        self._stopping.wait()
        if self._ended.is_set():  # it ended without a shutdown signal: nothing was said
            return
        token = self.key.removeprefix(STOPPING_PREFIX)
        warned = False
        while not self._ended.is_set():
            try:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(self.key, json.dumps({"worker": self.worker, "tasks": self.held()}), ex=STOPPING_TTL_S)
                pipe.sadd(STOPPING_INDEX, token).expire(STOPPING_INDEX, STOPPING_TTL_S)
                pipe.execute()
            except redis.RedisError as exc:  # said once, not raised: the worker's shutdown goes on
                if not warned:
                    log.warning("worker %s: could not record in the run store that it is stopping (status may say "
                                "its tasks are held by a worker that stopped): %s", self.worker, exc)  # fmt: skip
                warned = True
            self._ended.wait(RENEW_S)
        try:
            self.client.pipeline(transaction=False).delete(self.key).srem(STOPPING_INDEX, token).execute()
        except redis.RedisError:
            pass  # they expire


def stopping_workers(client: redis.Redis) -> dict[str, set[str]]:
    """The workers that say they are stopping, each with the ids of the tasks it is finishing (from the index, not a
    scan of the keyspace: a store of millions of keys is read in two round trips)."""
    tokens = sorted(t.decode() if isinstance(t, bytes) else str(t) for t in client.smembers(STOPPING_INDEX))
    if not tokens:
        return {}
    found: dict[str, set[str]] = {}
    for raw in client.mget([f"{STOPPING_PREFIX}{token}" for token in tokens]):
        if (said := _said(raw)) is not None:
            found.setdefault(said[0], set()).update(said[1])
    return found


def _said(raw: Any) -> tuple[str, set[str]] | None:
    """A key's worker and task ids (None: gone since it was listed, or not of that shape)."""
    try:
        said = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(said, dict) or not isinstance(said.get("tasks"), list):
        return None
    return str(said.get("worker")), {str(i) for i in said["tasks"]}
