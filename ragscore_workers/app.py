"""The Celery app: JSON-only config, queues, routes and per-queue limits.

Workers get the broker from ``RAGSCORE_BROKER_URL``; the orchestrator calls :func:`configure` with the
URL it chose (a cluster's, or the embedded private Redis).
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from celery import Celery, bootsteps
from celery.app.amqp import AMQP
from celery.exceptions import SecurityWarning
from celery.signals import (
    celeryd_init,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from celery.utils.text import str_to_list
from kombu import Connection, Exchange, pools
from kombu import Queue as KombuQueue
from kombu.utils.url import parse_url

from .errors import ConfigError
from .limits import CONTROL_QUEUE, QUEUE_LIMITS
from .schemas import Queue
from .settings import get_settings, without_kombu_options

if TYPE_CHECKING:
    from .kept import KeptKey

__all__ = ["CONTROL_QUEUE", "QUEUE_LIMITS", "SCORING_QUEUES", "app", "configure"]

#: Queues that score items, in the order a run prints them.
SCORING_QUEUES: tuple[Queue, ...] = (Queue.CPU, Queue.EMBED, Queue.JUDGE, Queue.CODE)

#: Celery task results expire after this; above the longest run we expect (7 days).
RESULT_EXPIRES_S = 7 * 24 * 3600


def _broker_tls(broker_url: str | None) -> dict[str, object] | None:
    """A ``rediss://`` broker URL's TLS options as kombu reads them (``ssl_cert_reqs`` an ``ssl`` constant), as
    Celery's ``broker_use_ssl``: kombu takes them from the URL itself, Flower's broker page and queue lengths
    (``/broker``, ``/api/queues/length``) only from this setting (without it, they checked the server's certificate
    against the system's CAs, not the URL's ``ssl_ca_certs``, and failed). None for any other URL."""
    if not broker_url or urlsplit(broker_url).scheme != "rediss":
        return None
    return parse_url(broker_url).get("ssl")


def _config(
    broker_url: str | None, backend_url: str | None, socket_timeout_s: float | None = None
) -> dict[str, object]:
    """The app's settings for these URLs, each reply of (and connect to) the broker and the result backend bounded by
    ``socket_timeout_s`` (None: a worker's, ``RAGSCORE_WORKER_SOCKET_TIMEOUT_S``). Only a reply awaited is timed:
    kombu reads an idle worker's BRPOP (which Redis answers within ``brpop_timeout``, 1 s) and its pub/sub connection
    (remote control) once they are readable."""
    settings = get_settings()
    visibility = settings.visibility_timeout_s
    if socket_timeout_s is None:
        socket_timeout_s = settings.worker_socket_timeout_s
    transport = {
        "visibility_timeout": visibility,
        # Sweep for messages of vanished workers every few seconds (kombu's default is ~100 s).
        "unacked_restore_interval": max(1, min(10, visibility // 2)),
        "unacked_restore_throttle": 1,
        "socket_keepalive": True,
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": socket_timeout_s,
    }
    return {
        "broker_url": broker_url,
        "broker_use_ssl": _broker_tls(broker_url),
        "result_backend": backend_url or (broker_url and without_kombu_options(broker_url)),
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_default_queue": CONTROL_QUEUE,
        "task_queues": [
            KombuQueue(name, Exchange(name, type="direct"), routing_key=name)
            for name in [*(q.value for q in SCORING_QUEUES), Queue.TARGET.value, CONTROL_QUEUE]
        ],
        "task_routes": {f"ragscore.score.{q.value}": {"queue": q.value} for q in SCORING_QUEUES}
        | {"ragscore.target": {"queue": Queue.TARGET.value}}
        | {f"ragscore.{name}": {"queue": CONTROL_QUEUE} for name in ("finish_shard", "score_shard", "aggregate")},
        "task_default_exchange": CONTROL_QUEUE,
        "task_default_routing_key": CONTROL_QUEUE,
        "broker_transport_options": transport,
        "result_backend_transport_options": {"retry_policy": {"timeout": 5.0}},
        "result_expires": RESULT_EXPIRES_S,
        "redis_socket_timeout": socket_timeout_s,
        "redis_socket_connect_timeout": socket_timeout_s,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_hijack_root_logger": False,
    }


class _ShownConnection(Connection):
    """kombu's connection, its URL as Flower's ``Broker:`` line and a worker's banner show it: kombu put its mask in
    every URL, a password or none (``redis://:**@host:6379/0`` for ``redis://host:6379/0``); one with no password is
    shown as it is (its query, where a password may be too, never is)."""

    def as_uri(self, include_password: bool = False, mask: str = "**", *args: Any, **fields: Any) -> str:
        return super().as_uri(include_password or not self.password, mask, *args, **fields)


class _AMQP(AMQP):
    """Celery's messaging, its connections :class:`_ShownConnection`."""

    Connection = _ShownConnection


app = Celery("ragscore", include=["ragscore_workers.tasks"], amqp=_AMQP)
#: Why the environment's settings could not be read (a malformed ``RAGSCORE_*`` variable), or None.
_settings_error: ConfigError | None = None
try:
    _settings = get_settings()
    app.conf.update(_config(_settings.broker_url, _settings.result_backend))
except ConfigError as exc:  # importing must not fail: the command that reads the settings says which
    _settings_error = exc


@celeryd_init.connect
def _refuse_to_start_unconfigured(**_: object) -> None:
    """A ``celery worker`` (every compose service and k8s Deployment runs one) whose settings are malformed, whose
    visibility timeout a task could outlive, or that names no broker stops at once, saying why: Celery would otherwise
    fall back to ``amqp://localhost`` without ragscore's settings and retry it forever."""
    if _settings_error is not None:
        raise SystemExit(f"ragscore worker: {_settings_error}")
    try:
        get_settings().check_visibility_timeout()
    except ConfigError as exc:
        raise SystemExit(f"ragscore worker: {exc}") from None
    if not (app.conf.broker_url or os.environ.get("CELERY_BROKER_URL")):
        raise SystemExit("ragscore worker: no broker: set RAGSCORE_BROKER_URL (redis://HOST:6379/0)")


#: The start of Celery's warning to a worker run as root (``celery.platforms.ROOT_DISCOURAGED``).
_RUN_AS_ROOT = "You're running the worker with superuser privileges"
#: The queues a worker may serve whose root is by design: the code queue's per-run sandbox uids need it (SECURITY.md,
#: "Running code workers safely in production"); the control queue every worker serves.
_ROOT_BY_DESIGN = frozenset({Queue.CODE.value, CONTROL_QUEUE})


@celeryd_init.connect
def _no_root_warning_for_the_code_worker(options: dict[str, Any] | None = None, **_: object) -> None:
    """A worker of the code queue alone is run as root by design: Celery's warning that it runs as root, said at each
    start just after this signal, is left out for it (JSON only, so Celery refuses no root worker; C_FORCE_ROOT would
    change nothing). A worker serving any other queue, which needs no root, keeps it. Its queues are read as Celery
    selects them (``WorkController.setup_queues``): a list (``-Q code,control``) or one comma string
    (``app.Worker(queues="code,control")``)."""
    queues = set(str_to_list((options or {}).get("queues")) or ())
    if Queue.CODE.value in queues and queues <= _ROOT_BY_DESIGN:
        warnings.filterwarnings("ignore", message=re.escape(_RUN_AS_ROOT), category=SecurityWarning)


def configure(broker_url: str, backend_url: str | None = None, *, send_timeout_s: float) -> Celery:
    """Point the app at a broker (the orchestrator does this before it submits).

    ``send_timeout_s`` bounds each reply of the broker (kombu's ``socket_timeout``) and of the result backend (Celery's
    ``redis_socket_timeout``: sending a chord writes its size there), and each connect to them (a worker's are bounded
    too: :func:`_config`): a Redis that accepts and never answers fails a send (kombu's OperationalError after
    Celery's publish retries, or redis' TimeoutError after the backend's) instead of holding it for ever. The
    orchestrator's BRPOP (``inspect``'s replies) is read once the socket is readable and waits at most
    ``brpop_timeout``, 1 s.

    Celery caches its producer pool and result backend on first use; moving to another broker in the
    same process (a notebook calling ``evaluate`` on a cluster, then embedded) must drop them, or tasks
    would still go to the first broker.
    """
    config = _config(broker_url, backend_url, send_timeout_s)
    bounded = ("broker_url", "result_backend", "broker_transport_options", "redis_socket_timeout",
               "redis_socket_connect_timeout")  # fmt: skip
    if all(app.conf.get(key) == config.get(key, app.conf.get(key)) for key in bounded):
        return app
    app.conf.update(config)
    pools.reset()  # kombu keeps each broker's pools for good: the old broker's connections closed, not kept open
    app._pool = None  # as Celery's own _after_fork does
    app.amqp._producer_pool = None
    app._backend_cache = None
    app._local = threading.local()
    return app


@worker_init.connect
def _stop_when_the_starting_process_exits(**_: object) -> None:
    """A local worker (started through ``die_with_parent``) stops within seconds once its process exits."""
    from .die_with_parent import watch_parent

    watch_parent()


@worker_process_shutdown.connect
def _stop_sandbox_helpers(**_: object) -> None:
    """Pool processes end without running atexit: stop their sandbox slot helpers so they reap them."""
    from .sandbox.slots import stop_all_helpers

    stop_all_helpers()


#: This process's worker's :class:`~.stopping.StopWatch` (from its ``worker_ready`` to its ``worker_shutdown``).
_stop_watches: list[KeptKey] = []
#: This process's worker's :func:`~.alive.heartbeat` (from its ``worker_ready`` until its shutdown begins).
_heartbeats: list[KeptKey] = []


def _consumed_queues(consumer: object) -> Callable[[], list[str]]:
    """The names of the queues ``consumer`` (a Celery worker's) consumes, read at each call (a remote control may add
    or cancel one); the last read kept while the consumer reconnects (no task consumer, for a moment)."""
    last: list[str] = []

    def queues() -> list[str]:
        nonlocal last
        with suppress(AttributeError, RuntimeError, TypeError):  # mid-reconnect, or changed as we read
            last = sorted({str(q.name) for q in list(consumer.task_consumer.queues)})  # type: ignore[attr-defined]
        return last

    return queues


@worker_ready.connect
def _say_when_stopping(sender: object = None, **_: object) -> None:
    """A worker in its warm shutdown, which answers no ``inspect``, says in the run store which tasks it is finishing
    (:mod:`.stopping`): ``ragscore status`` does not read them as held by a worker that was killed. Until then it says
    it runs, and which queues it consumes (:mod:`.alive`): a worker too busy to answer is not called absent. It also
    tells the process that started it that it is ready (:func:`~.readiness.say_ready`)."""
    from .alive import heartbeat
    from .readiness import say_ready
    from .stopping import StopWatch
    from .store import redis_client

    say_ready()
    settings = get_settings()
    hostname, url = getattr(sender, "hostname", None), settings.store_url or settings.broker_url
    if hostname and url:
        _stop_watches.append(StopWatch(redis_client(url), str(hostname)))
        # a lane's database, embedded; asked once a renewal, at once: a broker gone does not hold the key's renewal
        broker = redis_client(app.conf.broker_url or settings.broker_url or url, read_timeout_s=1.0, retries=0)
        _heartbeats.append(
            heartbeat(redis_client(url), str(hostname), _consumed_queues(sender), broker, _pool_processes(sender))
        )


def _pool_processes(consumer: object) -> int:
    """The processes of ``consumer``'s (a Celery worker's) pool: its pool's own count, not the worker's concurrency
    (a solo pool runs one whatever ``-c`` says, and ``-c`` unset is the host's CPUs); 1 where it cannot be read."""
    with suppress(AttributeError, TypeError, ValueError):
        return max(1, int(consumer.controller.pool.num_processes))  # type: ignore[attr-defined]
    return 1


@worker_shutting_down.connect
def _stopping(how: str = "Warm", **_: object) -> None:
    """Sent from Celery's signal handler (SIGTERM, SIGINT, SIGQUIT), which may interrupt the main thread anywhere,
    this handler included: only sets flags and wakes the keys' threads, taking no lock (:mod:`.kept`). Only a warm
    shutdown (``how`` "Warm": SIGTERM, a first Ctrl-C) finishes the tasks it holds and says so; a cold one (SIGQUIT,
    a second Ctrl-C) cancels them: it says nothing, and what a warm one before it said goes (its key ends)."""
    for watch in list(_stop_watches):
        if how == "Warm":
            watch.begin()
        else:
            watch.end()
    for beat in list(_heartbeats):
        beat.end()


class _SayDrained(bootsteps.StartStopStep):
    """A worker step started after its pool and before its consumer (Celery's last), so stopped after the consumer and
    before the pool's join: from then on the worker takes no task, and it tells the process that started it once its
    last one ended (:func:`~.readiness.say_drained`), which then gives what is left of its shutdown a short grace, not
    the warm stop's wait (a pool's join may hang with no task held). A cold shutdown says nothing."""

    requires = ("celery.worker.components:Pool",)

    def stop(self, parent: object) -> None:
        from celery.worker.state import active_requests, reserved_requests

        from .readiness import say_drained

        # taken and not ended: started in the pool (active), or waiting for a slot there (reserved). Both: the stopped
        # consumer's on_close empties reserved_requests (Celery 5.4: wholly; 5.7: but for the active ones), so it
        # alone reads 0 with a task running.
        say_drained(lambda: len(active_requests) + len(reserved_requests))


app.steps["worker"].add(_SayDrained)


@worker_shutdown.connect
def _said_stopped(**_: object) -> None:
    """The worker's tasks are done: its keys go (:func:`_say_when_stopping`); 2 s at most is waited for that."""
    while _heartbeats:
        _heartbeats.pop().end()
    while _stop_watches:
        (watch := _stop_watches.pop()).end()
        watch.join(2.0)
