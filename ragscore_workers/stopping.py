"""A worker in its warm shutdown says so in the run store, with the tasks it is finishing.

Celery stops a worker's remote control first on a SIGTERM, then waits for the tasks it holds: for that while it
answers no ``inspect``, and ``ragscore status`` read its messages as held by a worker that stopped (killed, or its
host lost) though it was finishing them. From its ``worker_ready`` on, a :class:`StopWatch` (a
:class:`~.kept.KeptKey`) of the worker's main process waits for Celery's ``worker_shutting_down`` (sent by its
signal handler) and then keeps a key ``ragscore:stopping:{token}`` (the worker's name, the ids of the tasks it
holds and of those it runs; its token in the set :data:`STOPPING_INDEX`) for :data:`STOPPING_TTL_S`, renewed every
:data:`~.kept.RENEW_S`, until it exits (the key is deleted at ``worker_shutdown``, or as soon as a cold shutdown, which
cancels the tasks, follows). A cold shutdown says nothing. A worker killed while it stops stops being said to stop
once the key expires.

Only the tasks it runs are finished: those it took and had not started (a prefetch) Celery drops as its consumer
closes, and their messages go back to their queue as it exits. Celery forgets them then, so the key lists every task
it held from the shutdown's signal on (``tasks``, read in the signal handler too), and apart those it runs
(``running``).

The keys are the store's (``ragscore:``, which a worker's store user may already write, a reading user read): a
broker user limited to kombu's keys needs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from .kept import KeptKey, held_task_ids, kept_values, running_task_ids

__all__ = [
    "STOPPING_INDEX",
    "STOPPING_PREFIX",
    "STOPPING_TTL_S",
    "StopWatch",
    "stopping_workers",
]

#: Keys ``{prefix}{token}``: a worker that is stopping, its name and the task ids it is finishing (JSON).
STOPPING_PREFIX = "ragscore:stopping:"
#: A set of the tokens whose key may be there (each key expires on its own; the set with the last).
STOPPING_INDEX = "ragscore:stopping"
#: Seconds a stopping worker's key lives unless renewed: one killed while it stops is no longer said to stop by then.
STOPPING_TTL_S = 10


class StopWatch(KeptKey):
    """The key of one worker saying, from its :meth:`begin` (its shutdown began) until its
    :meth:`~.kept.KeptKey.end`, that it is stopping: every task it held since it began (``held``: the ids of the tasks
    it holds; default: Celery's state of this process), and those it runs (``running``)."""

    def __init__(
        self,
        client: redis.Redis,
        worker: str,
        held: Callable[[], list[str] | None] = held_task_ids,
        running: Callable[[], list[str] | None] = running_task_ids,
    ) -> None:
        self.worker, self.held, self.running = worker, held, running
        #: The ids of the tasks it held at its shutdown's first signal (set once, in the handler, before it begins).
        self.at_signal: tuple[str, ...] = ()
        #: The ids of the tasks it held, read since its shutdown began (Celery forgets those it drops); only its
        #: thread changes it.
        self.taken: set[str] = set()
        what = (f"worker {worker}: could not record in the run store that it is stopping (status may say its tasks "
                "are held by a worker that stopped)")  # fmt: skip
        super().__init__(client, STOPPING_PREFIX, STOPPING_INDEX, STOPPING_TTL_S, self._said, what)

    def begin(self) -> None:
        """The shutdown began: what it holds is read at once (in the signal handler, before Celery drops the tasks
        it did not start; a read that fails is None, never raised), then said by the thread. The handler only reads
        Celery's sets and assigns a tuple: the thread, which may be reading :attr:`taken`, is the only one to change
        it, and a second signal does not read again."""
        if not self._begun:
            self.at_signal = tuple(self.held() or ())
        super().begin()

    def _said(self) -> dict[str, Any]:
        running = self.running() or []
        self.taken.update(self.at_signal, self.held() or (), running)
        return {"worker": self.worker, "tasks": sorted(self.taken), "running": running}


def stopping_workers(client: redis.Redis) -> dict[str, dict[str, bool]]:
    """The workers that say they are stopping, each with the ids of the tasks it holds, each True where it runs it
    (finishes it) or False where it took it and drops it (from the index, not a scan of the keyspace: a store of
    millions of keys is read in two round trips). An older worker's key, which does not say which it runs, runs
    them all."""
    found: dict[str, dict[str, bool]] = {}
    for said in kept_values(client, STOPPING_PREFIX, STOPPING_INDEX):
        if isinstance(said.get("tasks"), list):
            running = said.get("running")
            runs = {str(i) for i in running} if isinstance(running, list) else None
            found.setdefault(str(said.get("worker")), {}).update(
                {str(i): runs is None or str(i) in runs for i in said["tasks"]}
            )
    return found
