"""Connecting to a run's Redis: the run store, the broker and the result backend, each probed for what the command
does with it (:func:`connect`), and the broker asked apart from the store where it is another Redis.

Kept apart from :mod:`.runner` so that the commands that only look at a run (``ragscore status``, ``cancel``)
import neither the Celery tasks nor the metrics.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import math
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

import redis

from ragscore_workers.acl import (
    ASKS_WORKERS,
    BACKEND,
    BROKER,
    BROKER_READS,
    CONTROL_BROADCAST,
    STORE,
    STORE_READS,
    Role,
    broker_role,
    lacking,
)
from ragscore_workers.app import configure
from ragscore_workers.errors import BrokerError, ConfigError
from ragscore_workers.redaction import redact_url
from ragscore_workers.settings import Settings, get_settings
from ragscore_workers.store import (
    EVICTS_WORK,
    RunStore,
    eviction_warning,
    probe_redis,
    redis_client,
    refused_note,
    store_url_for_redis_py,
)

from .embedded_redis import lane_url
from .loopback import LOOPBACK_HOSTS

__all__ = [
    "BACKEND_EVICTS",
    "BACKEND_REDIS",
    "STORE_READ_TIMEOUT_S",
    "STORE_REDIS",
    "backend_apart",
    "broker_not_reached",
    "broker_roles",
    "broker_tried_once",
    "broker_unreachable",
    "cannot_use",
    "check_queues",
    "checking_broker",
    "connect",
    "connect_lane",
    "eviction_warnings",
    "reach_broker",
    "store_apart",
    "worker_eviction_warnings",
]

#: Seconds connect() retries a Redis that does not answer before it gives up.
CONNECT_RETRY_S = 20.0
#: Seconds connect() retries a port this machine's loopback refuses (a Redis here still starting: ``redis-server
#: --daemonize yes && ragscore run``, a sidecar, a port-forward not yet up), a ping every LOOPBACK_RETRY_EVERY_S,
#: before it says nothing listens there: a mistyped port is said in about this time, not CONNECT_RETRY_S.
LOOPBACK_RETRY_S = 2.0
#: Seconds between those pings.
LOOPBACK_RETRY_EVERY_S = 0.5
#: Seconds this process waits for one Redis reply, the broker's and the result backend's to Celery sending a task
#: included: a hung Redis, or one behind a network partition, is then an outage wait() says and bounds, or a failed
#: send, not a read blocked for ever (the longest of ragscore's commands takes far less).
STORE_READ_TIMEOUT_S = 30.0
#: Seconds a status check waits for one reply of a broker apart from the store (:func:`checking_broker`).
BROKER_CHECK_S = 5.0
#: The run store's Redis as connect()'s errors name it where it is not the broker's.
STORE_REDIS = "the run store's Redis (RAGSCORE_STORE_URL)"
#: Celery's result backend as connect()'s errors name it where it is not the broker's.
BACKEND_REDIS = "the result backend's Redis (RAGSCORE_RESULT_BACKEND)"
#: What a result backend's Redis that evicts loses (:func:`.store.eviction_problem`): a chord's counter fires its
#: run's aggregate.
BACKEND_EVICTS = "Celery's chord counters, and a run whose counter it evicted never finishes"

log = logging.getLogger(__name__)


def connect(
    broker_url: str,
    settings: Settings | None = None,
    *,
    sends: bool = False,
    queues: bool = False,
    writes: bool = False,
    no_broker: str = "",
    app: bool = True,
) -> RunStore:
    """Point the Celery app at ``broker_url`` and open the run store there. ``sends``: the caller sends work (a run,
    a submit, a resume), so a broker's Redis apart from the store's is probed too (the queues of its run's suite by
    :func:`check_queues`); a command that sends nothing (status, results, report) works with the broker down, and
    whatever the visibility timeout. ``queues``: the caller reads the broker's queues (status RUN, cancel), so a
    broker on the store's server in another database or as another user is probed too: its server answers as the
    store's does, so what fails is its password or its database, said now; a broker on another server is left to the
    command, which works with it down. ``writes``: the caller writes the store (the run list, results, cancel; one
    that sends does too), and where it reads the queues may send to the control queue (cancel), so its users are
    checked for the writing roles, not the reading ones; one that sends checks the result backend's user too
    (:data:`.acl.BACKEND`): the broker's where RAGSCORE_RESULT_BACKEND is unset or the broker's database and user,
    else its own (:func:`broker_roles`). ``no_broker``: how the caller does without the broker (a new run, which
    an embedded Redis serves), added to the error where nothing listens on the port of ``broker_url`` (not where
    it is the run store's or the result backend's URL that refuses: that is their own variable's). ``app``: False
    leaves this process's Celery app as it is (a thread that only writes the store, e.g. :func:`.api.cancel`, while
    another of the process's threads sends a run's work through the app)."""
    settings = settings or get_settings()
    if sends:
        settings.check_visibility_timeout()
    store_url = settings.store_url or broker_url
    # A wrong password: BrokerError now, not after ~20 s of retries; a database the server lacks: ConfigError now;
    # a Redis that does not answer, or whose host name does not resolve (yet), is retried (it may be starting), and
    # said at once, not after the retries; a port this machine's loopback refuses is said at once, not retried.
    # With work to send and the broker elsewhere than the store (RAGSCORE_STORE_URL, or another database), the
    # broker is probed too: a broker that did not answer, or a database it lacks, failed later, less clearly, in
    # Celery's first send. So is one on the store's server in another database or as another user for a command
    # that reads its queues: its client retried a wrong password ~20 s, then failed with redis-py's raw error.
    # Each Redis is named by its role only where they are two servers (not the embedded one's database 0 and lane,
    # whose store URL the user never set).
    # Each user is checked for what it does (acl.lacking): the store's for the store, the broker's for the queues;
    # what only reads (status RUN, report) for reading alone, so a user that may only read works there.
    apart = _broker_apart(broker_url, settings)
    one = not apart and _database(broker_url) == _database(store_url)  # one database and user, however written
    queued = sends or (queues and not apart)  # what reads a broker apart probes it itself (reach_broker)
    broker_role, store_role = (BROKER, STORE) if sends or writes else (BROKER_READS, STORE_READS)
    # a result backend apart from the broker's: its user sets a chord's counters as it is sent; in the store's
    # database and user (the embedded mode's), in the store's probe
    backend = backend_apart(broker_url, settings) if sends else None
    in_store = backend is not None and _database(backend) == _database(store_url)
    store_roles = (store_role, BACKEND) if in_store else (store_role,)
    # one that may send to the control queue (cancel) asks the workers what they hold, as one that sends does
    brokers = broker_roles(broker_url, settings, broker_role) if sends else (
        (broker_role, *ASKS_WORKERS) if writes else (broker_role,))  # fmt: skip
    named = [
        (store_url, STORE_REDIS if apart else "Redis", (*brokers, *store_roles) if one and queued else store_roles)
    ]
    if not one and queued:
        named.append((broker_url, "the broker's Redis" if apart else "Redis", brokers))
    if backend and not in_store:
        named.append((backend, BACKEND_REDIS, (BACKEND,)))
    for url, what, roles in named:  # each Redis its own window: one slow to come up leaves the next its retries
        _reach(url, what, roles, no_broker if url == broker_url else "")
    if app:
        _fire_and_forget(configure(broker_url, settings.result_backend, send_timeout_s=STORE_READ_TIMEOUT_S).backend)
    broker = None if one else redis_client(broker_url, STORE_READ_TIMEOUT_S)
    store = RunStore(redis_client(store_url, STORE_READ_TIMEOUT_S), settings.run_ttl_s, broker=broker,
                     broker_apart=apart)  # fmt: skip
    try:
        store.r.ping()
    except redis.RedisError as exc:
        raise BrokerError(f"Cannot use {named[0][1]} at {redact_url(store_url)}: {exc}") from exc
    return store


def _reach(url: str, what: str, roles: tuple[Role, ...], no_broker: str = "") -> None:
    """Return once the Redis at ``url`` answers, retried for CONNECT_RETRY_S; else BrokerError naming it as ``what``
    (or probe_redis's errors: a wrong password, a database it lacks, a user that may not do the work of ``roles``),
    with ``no_broker`` (:func:`connect`'s) where nothing listens on its port."""
    deadline = time.monotonic() + CONNECT_RETRY_S  # from before the first ping, which may itself take 5 s
    problem = probe_redis(url, what, roles)
    if problem is None:
        return
    if _refused_on_this_machine(url, problem):  # a Redis here still starting: a brief wait, not the whole window
        loopback_deadline = time.monotonic() + LOOPBACK_RETRY_S
        problem = _until_redis_answers(url, loopback_deadline, problem, what, roles, every_s=LOOPBACK_RETRY_EVERY_S)
    if problem and not _refused_on_this_machine(url, problem):  # a remote Redis restarting, a timeout, a name not up
        log.warning("cannot reach %s at %s (%s); retrying for about %.0f s", what, redact_url(url), problem,
                    CONNECT_RETRY_S)  # fmt: skip
        problem = _until_redis_answers(url, deadline, problem, what, roles)
    if problem:
        if no_broker and problem.endswith(refused_note(url)):
            problem = f"{problem} ({no_broker})"
        raise cannot_use(url, what, problem)


def _refused_on_this_machine(url: str, problem: str) -> bool:
    """Whether ``problem``, why a ping of ``url`` failed, is a connection refused by this machine's loopback
    (:func:`_loopback`): nothing listens on that port here, which waiting long does not heal (a mistyped port, a
    Redis not started), so it is said after LOOPBACK_RETRY_S (a Redis still starting), not after CONNECT_RETRY_S of
    retries (~24 s of a new user's first run). A remote host's refusal is retried: a cluster's Redis may be
    restarting."""
    return _loopback(urlsplit(store_url_for_redis_py(url)).hostname) and problem.endswith(refused_note(url))


def _loopback(host: str | None) -> bool:
    """Whether ``host`` is this machine's loopback: ``localhost`` or an address of 127.0.0.0/8 or ``::1`` (not a name
    that resolves there, which is not looked up again; a unix socket's URL has none: the embedded Redis waits for its
    own server as it starts)."""
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower() in LOOPBACK_HOSTS


def eviction_warnings(store: RunStore, broker_url: str, settings: Settings) -> list[str]:
    """What may evict the work of a run sent to the broker at ``broker_url`` (:func:`eviction_warning`): the run
    store's Redis (``RAGSCORE_STORE_URL``'s, else the broker's), the broker's where it is another server
    (:attr:`RunStore.broker_apart`), and the result backend's (Celery's chord counters, which fire a run's
    aggregate) where it is another database or user (:func:`backend_apart`). Another database of one server is the
    same Redis, its policy the server's: said once, by the first of its users that may run INFO."""
    named = [(store.r, settings.store_url or broker_url)]
    if store.broker is not store.r:
        named.append((store.broker, broker_url))
    return _once_per_server(named, backend_apart(broker_url, settings))


def worker_eviction_warnings(
    broker_url: str, settings: Settings, *, broker: bool, store: bool, backend: bool
) -> list[str]:
    """What may evict the work ``ragscore worker`` serves from the broker at ``broker_url``, as
    :func:`eviction_warnings` says it: the run store's Redis where ``RAGSCORE_STORE_URL`` is set and answered
    (``store``: the workers write their results there), the broker's where it answered (``broker``), and the result
    backend's where it is apart and answered (``backend``). Each checked by a client of its own, closed after."""
    urls = [broker_url] if broker else []
    if settings.store_url and store:
        urls.insert(0, settings.store_url)  # first, as eviction_warnings says it
    with contextlib.ExitStack() as opened:
        named = [(opened.enter_context(redis_client(url, BROKER_CHECK_S, retries=0)), url) for url in urls]
        return _once_per_server(named, backend_apart(broker_url, settings) if backend else None)


def _once_per_server(named: list[tuple[redis.Redis, str]], backend: str | None) -> list[str]:
    """The :func:`eviction_warning` of each Redis server of ``named`` (clients and their URLs), and of the result
    backend at ``backend`` (None: none apart), each server said once: by the first of its URLs whose user may run
    INFO (a user refused it is not checked)."""
    said: dict[str, str] = {}  # each warning, by the URL it was said of

    def unsaid(url: str) -> bool:
        return all(_servers_apart(url, other) for other in said)

    for client, url in named:
        if unsaid(url) and (warning := eviction_warning(client, url, evicts=_evicts(url, backend))):
            said[url] = warning
    if backend and unsaid(backend):
        with redis_client(backend, BROKER_CHECK_S, retries=0) as client:
            if warning := eviction_warning(client, backend, BACKEND_REDIS, BACKEND_EVICTS):
                said[backend] = warning
    return list(said.values())


def _evicts(url: str, backend: str | None) -> str:
    """What the Redis server at ``url`` loses when it evicts (:func:`eviction_warning`'s ``evicts``): a run's work,
    and Celery's chord counters where the result backend at ``backend`` (None: none apart) is another database of it,
    said in the one warning of that server (the backend's own wording was lost there)."""
    if backend is None or _servers_apart(url, backend):
        return EVICTS_WORK
    return f"{EVICTS_WORK}; in {BACKEND_REDIS} at {redact_url(backend)}, {BACKEND_EVICTS}"


def check_queues(store: RunStore, broker_url: str, queues: Iterable[str]) -> None:
    """Before a run's work is sent to ``queues`` (its suite's) on the broker at ``broker_url``: ConfigError at once
    (exit 2) where the broker's user may not use one of them (a user limited to other queues failed late, on the
    first send there), naming the user, the commands and the ACL rule; BrokerError where the broker stopped
    answering since ``store`` was connected."""
    what = "the broker's Redis" if store.broker_apart else "Redis"
    if problem := probe_redis(broker_url, what, (broker_role(queues),)):
        raise cannot_use(broker_url, what, problem)


def cannot_use(url: str, what: str, problem: str) -> BrokerError:
    """The error of a Redis (``what``, at ``url``: its password hidden) that did not answer, and why."""
    return BrokerError(f"Cannot use {what} at {redact_url(url)}: {problem}")


def store_apart(broker_url: str, settings: Settings) -> str | None:
    """RAGSCORE_STORE_URL where it is another database or user than the broker's at ``broker_url`` (whose probe does
    not reach it), else None."""
    store = settings.store_url
    return store if store and _database(store) != _database(broker_url) else None


def backend_apart(broker_url: str, settings: Settings) -> str | None:
    """RAGSCORE_RESULT_BACKEND's URL where it is another database or user than the broker's at ``broker_url`` (whose
    user a sending command checks as the broker's), else None: a user that may not write Celery's chord counters
    there let a run start, then failed its first send with redis-py's raw NoPermissionError; a worker's failed to
    store every task's result."""
    backend = settings.result_backend
    return backend if backend and _database(backend) != _database(broker_url) else None


def broker_roles(broker_url: str, settings: Settings, role: Role) -> tuple[Role, ...]:
    """What the broker's user at ``broker_url`` is checked for by a command that sends work or serves it: ``role``,
    Celery's chord counters and results (:data:`.acl.BACKEND`) where they are kept with the broker
    (RAGSCORE_RESULT_BACKEND unset or the broker's database and user), in the same probe: a user limited to
    ragscore's queues passed, then a run died at its first chord with redis-py's raw NoPermissionError; and Celery's
    remote control replies and the broadcasts' binding kombu's sweep reads (:data:`.acl.ASKS_WORKERS`), which it asks
    its workers over (which queues they serve, what they hold; `ragscore worker` pings them): such a user's submit
    died after sending its run."""
    return (role, *ASKS_WORKERS) if backend_apart(broker_url, settings) else (role, BACKEND, *ASKS_WORKERS)


def _broker_apart(broker_url: str, settings: Settings) -> bool:
    """Whether the broker's Redis at ``broker_url`` is another server than the run store's (RAGSCORE_STORE_URL
    set apart): the store then answers without it, and a command that needs the broker must ask it itself. Worked
    out once, by :func:`connect`, which keeps it as :attr:`RunStore.broker_apart`. ``localhost`` is one server with
    ``127.0.0.1`` and ``[::1]`` on its port, but those two are two (:func:`_two_loopback_addresses`)."""
    return _servers_apart(settings.store_url or broker_url, broker_url)


def _servers_apart(url: str, other: str) -> bool:
    """Whether ``url`` and ``other`` name two Redis servers, whatever their databases and users: ``localhost`` is one
    server with ``127.0.0.1`` and ``[::1]`` on its port, but those two are two (:func:`_two_loopback_addresses`)."""
    return _server(url) != _server(other) or _two_loopback_addresses(url, other)


def reach_broker(broker_url: str) -> None:
    """For a command that needs the broker (its queues, its workers) where :func:`connect` may not have probed it,
    the broker being another Redis than the store's (another server: :attr:`RunStore.broker_apart`; or another
    database or user of the store's server: a wrong password, a database it lacks), or the store's user probed for
    the store alone (`results`: not for asking the workers): return when the broker's Redis
    answers one ping, BrokerError naming it when it does not (or probe_redis's errors). Not retried: the command
    (cancel, results of a cancelled run) only asks whether it can use the broker, and said so after connect's ~20 s
    of retries."""
    what = "the broker's Redis"
    if problem := probe_redis(broker_url, what, (BROKER, *ASKS_WORKERS)):  # they ask the workers what they hold
        raise cannot_use(broker_url, what, problem)


def broker_unreachable(broker_url: str) -> str | None:
    """Why the broker's Redis at ``broker_url``, apart from the store's (:attr:`RunStore.broker_apart`), does not
    answer one ping (named with its redacted URL), or None (it answers): for what only adds to a view of the
    store."""
    try:
        problem = probe_redis(broker_url, "the broker's Redis", (BROKER_READS,))
    except (BrokerError, ConfigError) as exc:  # a wrong password, a database it lacks: said as they are
        return str(exc)
    if problem is None:
        return None
    return broker_not_reached(broker_url, problem)


def checking_broker(store: RunStore, broker_url: str) -> RunStore:
    """``store`` whose client of the broker's Redis at ``broker_url`` (apart from the store's) tries each command
    once and waits BROKER_CHECK_S for a reply: for status's checks (what waits on the queues, who serves them), which
    a broker gone after their ping held ~20 s a read in the retries of the store's own client (made to ride out a
    blip in a send); a watch showed nothing new for as long, then the line that the broker could not be reached.
    The Celery app's broker connections (the checks' inspect of the workers) wait as long for a reply (and a connect),
    not connect's STORE_READ_TIMEOUT_S: a broker hung inside an inspect held it that long, twice. Only for a command
    that sends nothing (status): a send would fail on a slow broker."""
    configure(broker_url, get_settings().result_backend, send_timeout_s=BROKER_CHECK_S)
    return broker_tried_once(store, broker_url, BROKER_CHECK_S)


def broker_tried_once(store: RunStore, broker_url: str, read_timeout_s: float | None = None) -> RunStore:
    """``store`` whose client of the broker's Redis at ``broker_url`` (not the store's client) tries each command
    once, waiting ``read_timeout_s`` for a reply (None: :data:`STORE_READ_TIMEOUT_S`, read at each call): for a command
    that just probed the broker (:func:`reach_broker`) and says it lost at its first failed read, not after the ~20 s
    of retries of the store's own client."""
    read_timeout_s = STORE_READ_TIMEOUT_S if read_timeout_s is None else read_timeout_s
    broker = redis_client(broker_url, read_timeout_s, retries=0)
    return RunStore(store.r, store.final_ttl_s, broker=broker, broker_apart=store.broker_apart)


def broker_not_reached(broker_url: str, problem: object) -> str:
    """That the broker's Redis at ``broker_url`` (its password hidden) could not be reached, and why (``problem``:
    its error, or what the ping said)."""
    return f"the broker's Redis at {redact_url(broker_url)} could not be reached ({problem})"


#: Seconds a broker user found allowed to ask the workers is not probed again (:func:`workers_not_asked`): one probe
#: in 15 of a status watch's checks (every ``queues.CONSUMER_CHECK_S``, 20 s), yet rights lost that no ask is refused
#: for (kombu's sweep of the broadcasts' binding logs its refusal) are said within 5 minutes.
MAY_ASK_TTL_S = 300.0

#: The broker users found allowed to ask the workers (:func:`workers_not_asked`), each by :func:`_user_of`, with when
#: (``time.monotonic()``): probed again once that is ``MAY_ASK_TTL_S`` old, or an ask is refused.
_MAY_ASK: dict[tuple[Any, ...], float] = {}


def workers_not_asked(client: redis.Redis, broker_url: str, error: redis.RedisError | None = None) -> str:
    """That the workers could not be asked (Celery's remote control, refused ``error``; None: before it is asked) with
    the broker's user at ``broker_url`` (its password hidden): what that user lacks and the ACL rules to add
    (:data:`.acl.ASKS_WORKERS`: the replies and the broadcasts' binding kombu's sweep reads, then
    :data:`.acl.CONTROL_BROADCAST`, probed with ``client``), or ``error`` where the probe cannot tell; "" where
    ``error`` is None and the probe finds nothing lacking. A user found allowed is not probed again in this process
    for ``MAY_ASK_TTL_S``, unless an ask it is refused (``error``: its rights lost while a status watches) drops it
    first; one refused is probed at each call (the rules it is told may be added meanwhile)."""
    user = _user_of(client)
    if error is not None:
        _MAY_ASK.pop(user, None)
    elif time.monotonic() - _MAY_ASK.get(user, -math.inf) < MAY_ASK_TTL_S:
        return ""
    why = lacking(client, (*ASKS_WORKERS, CONTROL_BROADCAST)) or (str(error) if error else "")
    if not why:
        _MAY_ASK[user] = time.monotonic()
    return f"the workers could not be asked with the broker's Redis at {redact_url(broker_url)} ({why})" if why else ""


def _user_of(client: redis.Redis) -> tuple[Any, ...]:
    """Whom ``client`` is on which Redis: its server (host and port, or socket), database and user, never its
    password (one user's rules are the same whichever password it gives)."""
    kwargs = client.connection_pool.connection_kwargs
    where = tuple(kwargs.get(name) for name in ("host", "port", "path"))
    return (*where, int(kwargs.get("db") or 0), kwargs.get("username") or "default")


def _two_loopback_addresses(url: str, other: str) -> bool:
    """Whether one URL names ``127.0.0.1`` and the other ``[::1]``, which :func:`_server` takes as one host: they
    are two addresses, where two servers may listen on one port (a broker bound to ``::1`` beside a store on
    ``127.0.0.1``). ``localhost`` names either (no DNS look-up): one server with both."""
    return {urlsplit(store_url_for_redis_py(u)).hostname for u in (url, other)} == {"127.0.0.1", "::1"}


def _server(url: str) -> tuple[str, ...]:
    """The Redis server ``url`` names, whatever its database: its socket's path, or its scheme, host and port (two
    URLs of one server are one Redis to the user, whichever is the store's and which the broker's; ``localhost``,
    ``127.0.0.1`` and ``[::1]`` are one host, 6379 the port of a URL without one)."""
    parts = urlsplit(store_url_for_redis_py(url))
    if parts.scheme == "unix":
        return ("unix", unquote(parts.path))
    try:
        port = parts.port or 6379
    except ValueError:  # not a port: probe_redis says so, naming the URL
        port = 0
    host = (parts.hostname or "localhost").lower()
    return (parts.scheme.lower(), "localhost" if host in LOOPBACK_HOSTS else host, str(port))


def _database(url: str) -> tuple[str, ...]:
    """The Redis database ``url`` addresses and whom as: its :func:`_server`, its number, its user and its password
    (a digest: never said), as redis-py reads them (``/N`` or ``?db=N``, 0 where it names none; a user named or not,
    ``default``; the broker's client, kombu, reads the same database: check_redis_url refuses a URL they read as
    two), so that ``redis://localhost:6379`` and ``redis://127.0.0.1:6379/0`` are one, and one database
    used with two users' credentials (ACL users) is two: one client, the store's, read the broker's queues as the
    store's user, which may not read them, and the broker's password was not probed."""
    from redis.connection import parse_url

    try:
        parsed = parse_url(store_url_for_redis_py(url))
        db = int(parsed.get("db", 0))
    except ValueError:  # not a URL redis-py reads: probe_redis says so, naming it
        return ("unreadable", url)
    password = parsed.get("password")
    secret = hashlib.sha256(password.encode()).hexdigest() if password is not None else ""
    return (*_server(url), str(db), parsed.get("username") or "default", secret)


def _until_redis_answers(
    url: str, deadline: float, problem: str, what: str = "Redis", roles: tuple[Role, ...] = (), every_s: float = 1.0
) -> str | None:
    """Ping ``url`` every ``every_s`` until ``deadline`` (``time.monotonic()``): None once it answers, else why
    it did not (a Redis that accepts and never replies times out each ping, bounded, instead of holding the run).
    ``problem``, why the first ping failed, is the answer when the deadline has passed already (that ping took
    the whole window): never None for a Redis not pinged again."""
    while time.monotonic() < deadline:
        time.sleep(every_s)
        if (again := probe_redis(url, what, roles)) is None:
            return None
        problem = again
    return problem


def connect_lane(url: str, lane: int, settings: Settings, *, sends: bool = False, app: bool = True) -> RunStore:
    """The store of the embedded server at ``url`` (its database 0, with the result backend) whose broker queues
    are in database ``lane`` (one process's lane: see :mod:`.embedded_redis`); ``sends`` and ``app`` as
    :func:`connect`'s."""
    settings = settings.model_copy(update={"store_url": url, "result_backend": url})
    return connect(lane_url(url, lane), settings, sends=sends, app=app)


def _fire_and_forget(backend: Any) -> None:
    """Stop this process's result backend from subscribing to the result of every task it sends.

    The orchestrator follows runs through the store, never through task results; Celery's Redis backend
    would otherwise subscribe to each chord header's result channel (one subscription per task) and try
    to unsubscribe, with reconnect retries, when those results are garbage-collected.
    """
    backend.on_task_call = lambda producer, task_id: None
    backend.add_pending_result = lambda result, weak=False, start_drainer=True: result
    backend.remove_pending_result = lambda result: result
