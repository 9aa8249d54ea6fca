"""Where a run is: the broker a command or API call works on (a cluster's, else the embedded Redis) and the store
that holds a run, shared by the command line and the Python API (``ragscore cancel``, ``cancel()``)."""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING

from ragscore_workers.errors import ConfigError
from ragscore_workers.settings import get_settings

if TYPE_CHECKING:
    from ragscore_workers.store import RunStore


def cluster_url(broker: str | None) -> str | None:
    """--broker, else $RAGSCORE_BROKER_URL: the cluster's broker; None for an embedded run."""
    return broker or get_settings().broker_url or None


def is_embedded(broker: str | None) -> bool:
    """Whether a command with ``--broker broker`` works on the embedded Redis (no broker given or configured)."""
    return cluster_url(broker) is None


def broker_url(broker: str | None, *, start_embedded: bool = True) -> str:
    """--broker, else $RAGSCORE_BROKER_URL, else the embedded Redis: started from its data file when no run
    has it up (and shut down again at exit unless a run uses it), so finished and interrupted embedded runs
    can be listed, reported and resumed later."""
    settings = get_settings()
    url = cluster_url(broker)
    if url:
        return url
    from .embedded_redis import EmbeddedRedis

    redis_here = EmbeddedRedis(settings.home)
    if not start_embedded:
        if redis_here._ping():
            return redis_here.url
        raise ConfigError("No broker given and the embedded Redis is not running; pass --broker URL")
    if not redis_here.dir.exists():
        raise ConfigError(f"No broker given and no embedded runs yet under {settings.home}; pass --broker URL")
    atexit.register(redis_here.release)
    return redis_here.acquire()


def run_store(
    broker: str | None, run_id: str, *, queues: bool = False, writes: bool = False, app: bool = True
) -> tuple[RunStore, int | None]:
    """``(store, lane)``: the store, with the broker where run ``run_id``'s queues are, and for an embedded run its
    lane (its process's database: its waiting and held messages and its workers are seen there; None on a
    cluster). An unknown run raises. ``queues``: the command reads the run's queues; ``writes``: it writes the
    store, and may send to the control queue (see :func:`.connection.connect`); ``app``: False leaves the process's
    Celery app where it points (:func:`.connection.connect`'s)."""
    from .connection import connect, connect_lane

    settings = get_settings()
    url = broker_url(broker)
    store = connect(url, settings, queues=queues, writes=writes, app=app)
    if not is_embedded(broker):
        store.meta(run_id)  # raises a clear error for an unknown run
        return store, None
    lane = int(store.meta(run_id).get("lane") or 0)
    return (connect_lane(url, lane, settings, app=app) if lane else store), lane
