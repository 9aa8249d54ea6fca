"""Settings from ``RAGSCORE_*`` environment variables (pydantic-settings)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Set
from pathlib import Path
from urllib.parse import SplitResult, unquote_plus, urlsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError
from .limits import longest_hard_limit
from .redaction import REDIS_SCHEMES, redact_url, userinfo_span

__all__ = [
    "CERT_REQS",
    "DEFAULT_ALIVE_TTL_S",
    "DEFAULT_ORPHAN_CONFIRM_S",
    "MIN_ALIVE_TTL_S",
    "NO_CERT_REQS",
    "REDIS_SCHEMES",
    "TLS_EXAMPLE",
    "Settings",
    "check_redis_url",
    "for_redis_py",
    "get_settings",
    "query_options",
    "without_kombu_options",
]

#: A Redis URL written with one slash after its scheme (``redis:/HOST:6379/0``), a typo of ``redis://``.
_ONE_SLASH = re.compile(r"(?i)^rediss?:/(?!/)")


#: Options redis-py reads from a Redis URL's query as text, which may hold an ``@`` (``?client_name=me@h2``).
_REDIS_TEXT_OPTIONS = frozenset(
    {
        "client_name",
        "lib_name",
        "username",
        "password",
        "ssl_password",
        "ssl_ciphers",  # OpenSSL's security level: DEFAULT:@SECLEVEL=0
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
    }
)

#: Query options kombu (Celery's broker client) takes from a ``redis://`` or ``rediss://`` URL, besides its ``ssl_*``
#: ones: it passes each other one to its Connection as a keyword it refuses (``?db=4``: a TypeError at every send).
_KOMBU_QUERY_OPTIONS = frozenset(
    {"connect_timeout", "credential_provider", "heartbeat", "insist", "login_method", "ssl"}
)

#: Those of :data:`_KOMBU_QUERY_OPTIONS` that kombu alone reads: redis-py (the run store's client, and the result
#: backend's under Celery) refuses each at its first connection (an unexpected keyword), so they are left out of the
#: URL it gets (:func:`without_kombu_options`).
_KOMBU_ONLY_OPTIONS = frozenset({"connect_timeout", "heartbeat", "insist", "login_method"})


#: TLS options of a ``rediss://`` URL that every client of it reads alike: kombu (the broker's) passes each on to
#: redis-py's TLS connection, Celery's result backend and redis-py read them from the URL, all as text but
#: ``ssl_check_hostname`` and ``ssl_cert_reqs`` (:func:`_check_tls_options` checks their values). Others are read as
#: text where a number or a list is meant (``ssl_min_version``), or as on where written off (``ssl_validate_ocsp``).
_TLS_OPTIONS = frozenset(
    {
        "ssl_ca_certs",
        "ssl_ca_data",
        "ssl_ca_path",
        "ssl_cert_reqs",
        "ssl_certfile",
        "ssl_check_hostname",
        "ssl_ciphers",
        "ssl_keyfile",
        "ssl_password",
    }
)

#: ``ssl_cert_reqs`` as redis-py spells it, by kombu's and Celery's spelling, which redis-py refuses.
CERT_REQS = {"CERT_REQUIRED": "required", "CERT_OPTIONAL": "optional", "CERT_NONE": "none"}

#: A ``rediss://`` URL as ragscore takes it, for messages.
TLS_EXAMPLE = (
    "rediss://:PASSWORD@HOST:PORT/0?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.pem (ssl_cert_reqs: required, "
    "optional or none)"
)
#: Why a ``rediss://`` URL without ``ssl_cert_reqs`` is refused: Celery's result backend refuses it (a traceback),
#: kombu (the broker's client) would not check the server's certificate, redis-py would.
NO_CERT_REQS = "a rediss:// URL needs ssl_cert_reqs"

#: What a URL that asks for TLS otherwise than by its scheme is told.
_TLS_BY_SCHEME = (
    "a URL asks for TLS by its scheme: rediss://HOST:PORT/N?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.pem"
)


def _query_fields(query: str) -> list[tuple[str, str, str]]:
    """A URL query's fields as written, each with its name and value percent-decoded once, as kombu (Celery's broker
    client) reads them (``ssl_cert_reqs=CERT%5FREQUIRED`` is ``CERT_REQUIRED``): the one parse of a query that every
    check of a Redis URL and every rewrite of it reads. Blank values are kept (``?a=``, ``?a``)."""
    return [(field, unquote_plus(name), unquote_plus(value))
            for field in query.split("&") if field for name, _, value in [field.partition("=")]]  # fmt: skip


def query_options(query: str) -> list[tuple[str, str]]:
    """The options of a URL's ``query``, names and values decoded (:func:`_query_fields`), in order, repeats kept."""
    return [(name, value) for _, name, value in _query_fields(query)]


def _rewrite_query(url: str, field: Callable[[str, str, str], str | None]) -> str:
    """``url`` with each query field replaced by ``field(as written, name, value)`` (decoded: :func:`_query_fields`),
    left out where that is None; the rest of the URL as written. Only a ``redis://`` or ``rediss://`` URL's query:
    a ``redis+socket://`` URL's kombu hands to redis-py as it is (check_redis_url refuses what it would not read)."""
    head, mark, rest = url.partition("?")
    if not mark or urlsplit(url).scheme not in ("redis", "rediss"):
        return url
    query, hash_mark, fragment = rest.partition("#")
    kept = [new for written, name, value in _query_fields(query) if (new := field(written, name, value)) is not None]
    return head + ("?" + "&".join(kept) if kept else "") + hash_mark + fragment


def without_kombu_options(url: str) -> str:
    """``url`` without the query options kombu alone reads (``?heartbeat=30``, ``?connect_timeout=5``): the URL
    redis-py gets where the broker's URL is also the run store's or the result backend's. Other options, and the
    rest of the URL, stay as written."""
    return _rewrite_query(url, lambda written, name, _: None if name in _KOMBU_ONLY_OPTIONS else written)


def for_redis_py(url: str) -> str:
    """``url`` as redis-py (the run store's client) reads what kombu and Celery read of it: without the options kombu
    alone reads (:func:`without_kombu_options`), and its ``ssl_cert_reqs`` in redis-py's spelling (kombu's and
    Celery's ``CERT_REQUIRED``, written as such or percent-encoded, as ``required``, which they read too)."""

    def spelt(written: str, name: str, value: str) -> str:
        return f"{name}={CERT_REQS[value]}" if name == "ssl_cert_reqs" and value in CERT_REQS else written

    return _rewrite_query(without_kombu_options(url), spelt)


def _redis_py_query(parts: SplitResult) -> bool:
    """Whether ``parts`` is a URL without a path or fragment whose query's fields holding an ``@`` are each an option
    redis-py takes as text (``redis://h:6379?client_name=me@h2``): what redis-py reads, where the ``@`` would end a
    password holding ``?`` (``redis://u:12?a=34@h``: an option ``a`` that redis-py refuses; ``redis://u:12?34@h``: a
    field ``34@h`` without a value, which redis-py drops, connecting to host u, port 12)."""
    fields = query_options(parts.query)
    text = all(name in _REDIS_TEXT_OPTIONS for name, value in fields if "@" in name + value)
    return not parts.path and not parts.fragment and text


def _cut_short(url: str, userinfo: tuple[int, int], shown: str) -> str:
    """Why the Redis URL ``url`` (``shown`` as messages show it), whose ``userinfo`` (:func:`userinfo_span`) ends a
    password holding ``/``, ``#`` or ``?``, is refused: where that password's first of them is the query's ``?`` and
    its ``@`` is in the value of a query option that redis-py does not take as text (``?foo=a@b``, ``?db=1@b``:
    percent-encoding the ``@`` would not make redis-py read it), that; else a password holding those
    (``redis://:ab/cd@h``, ``redis://u:12?34@h``, ``redis://u:12?client_name=a@b&34@h``: a field without a value)."""
    start, end = userinfo
    host_end, encode = "which a URL reads as the end of its host", "('/' as %2F, '#' as %23, '?' as %3F)"
    cut = min(at for c in "/#?" if (at := url.find(c, start, end)) >= 0)
    name, equals, _ = url[max(url.rfind("&", cut, end), cut) + 1 : end].partition("=")
    if url[cut] == "?" and equals and unquote_plus(name) not in _REDIS_TEXT_OPTIONS:
        options = ", ".join(sorted(_REDIS_TEXT_OPTIONS))
        return (
            f"the '@' in {shown!r} is in a query option that redis-py does not take as text (only {options} may hold "
            f"one), so it reads as the end of a password holding '?', {host_end}: percent-encode a password's '/', "
            f"'#' and '?' {encode}"
        )
    return f"the password in {shown!r} holds '/', '#' or '?', {host_end}: percent-encode them {encode}"


def check_redis_url(url: str, what: str = "--broker", *, broker: bool = True) -> str:
    """``url`` when it is a Redis URL ragscore can use (scheme, host or socket path, a numeric db; ``broker``: a
    query Celery's broker client takes); else a ConfigError saying what was wrong (instead of a traceback from deep
    inside Celery or redis-py), the password never shown."""
    parts, shown = urlsplit(url), redact_url(url)
    if parts.scheme not in REDIS_SCHEMES:
        raise ConfigError(f"{what} must be a Redis URL (redis://HOST:PORT/DB, rediss://... for TLS), got {shown!r}")
    # '/', '#' and '?' each end the host part: the password is cut, and "the port" is text or the password's start
    # (redis://u:12?a=34@h goes to host u, port 12), but for a query redis-py reads (redis://h?client_name=me@h2)
    userinfo = userinfo_span(url)
    if userinfo and any(c in url[userinfo[0] : userinfo[1]] for c in "/#?") and not _redis_py_query(parts):
        raise ConfigError(f"{what}: {_cut_short(url, userinfo, shown)}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ConfigError(f"{what}: the port of {shown!r} is not a number") from None
    db = parts.path.strip("/")
    if _ONE_SLASH.match(url) and db and not db.isdigit():  # redis:/HOST:6379/0
        raise ConfigError(f"{what}: {shown!r} has no host: a Redis URL starts with two slashes (redis://HOST:PORT/DB)")
    if parts.scheme in ("redis", "rediss") and db and not db.isdigit():
        raise ConfigError(f"{what}: the database of {shown!r} must be a number (redis://HOST:PORT/0)")
    _check_one_database(parts, shown, what)
    _check_repeated_options(parts, shown, what)
    _check_credential_provider(parts, shown, what)
    _check_tls_options(parts, shown, what)
    if broker:
        _check_broker_query(parts, shown, what)
    return url


def _check_one_database(parts: SplitResult, shown: str, what: str) -> None:
    """ConfigError where the URL (``parts``, ``shown`` redacted) names its database so that the broker's client
    (kombu, Celery's) and the run store's (redis-py) would read two: ``redis://h/1?db=4`` (redis-py reads 4, kombu
    fails the send), ``redis+socket:///s?db=4`` (redis-py reads 4, kombu database 0: the queues were read where
    Celery never put them). A ``unix://`` URL, which only redis-py reads, names its database as ``?db=N``."""
    if not any(name == "db" for name, _ in query_options(parts.query)):
        return
    if parts.scheme in ("redis+socket", "socket"):
        raise ConfigError(
            f"{what}: {shown!r} names its database as ?db=, which Celery's broker does not read (it uses database 0): "
            "name it as ?virtual_host=N"
        )
    if parts.scheme in ("redis", "rediss") and parts.path.strip("/"):
        raise ConfigError(
            f"{what}: {shown!r} names its database twice, in its path and as ?db=, which Redis clients read "
            "differently (the run store's the ?db=, Celery's broker refuses it): name it once, in its path "
            "(redis://HOST:PORT/N)"
        )


def _check_repeated_options(parts: SplitResult, shown: str, what: str) -> None:
    """ConfigError where the URL (``parts``, ``shown`` redacted) gives a query option twice: kombu (the broker's
    client) and Celery's result backend read the last, redis-py (the run store's) the first, so
    ``?ssl_cert_reqs=none&ssl_cert_reqs=required`` checked the broker's certificate and not the run store's."""
    names = [name for name, _ in query_options(parts.query)]
    if repeated := next((name for name in names if names.count(name) > 1), None):
        raise ConfigError(
            f"{what}: {shown!r} gives the query option {repeated!r} twice, which Redis clients read differently "
            "(Celery's the last, the run store's redis-py the first): give it once"
        )


def _check_credential_provider(parts: SplitResult, shown: str, what: str) -> None:
    """ConfigError where the URL (``parts``, ``shown`` redacted) has ``?credential_provider=``: kombu and Celery's
    result backend import the class it names and build one without arguments, redis-py (the run store's client)
    keeps its name as text and fails its first connection with it."""
    if any(name == "credential_provider" for name, _ in query_options(parts.query)):
        raise ConfigError(
            f"{what}: {shown!r} has the query option 'credential_provider', which the Redis clients ragscore uses "
            "read differently (kombu and Celery's result backend import the class it names, the run store's redis-py "
            "takes its name for one): give the user and password in the URL, redis://USER:PASSWORD@HOST:PORT/N "
            "(percent-encode a password's '/', '#', '?' and '@'), in RAGSCORE_BROKER_URL rather than --broker"
        )


def _check_tls_options(parts: SplitResult, shown: str, what: str) -> None:
    """ConfigError where the URL's (``parts``, ``shown`` redacted) TLS options are not read alike by its clients:
    ``?ssl=`` (kombu fails on it, redis-py refuses it), an ``ssl_*`` option of a URL that is not ``rediss://``
    (kombu speaks TLS, redis-py and Celery's result backend refuse it), one not in :data:`_TLS_OPTIONS`, and values
    of ``ssl_cert_reqs`` or ``ssl_check_hostname`` that one of them refuses or reads otherwise; and a ``rediss://``
    URL without ``ssl_cert_reqs`` (:data:`NO_CERT_REQS`)."""
    fields = query_options(parts.query)
    if any(name == "ssl" for name, _ in fields):
        raise ConfigError(f"{what}: {shown!r} has the query option 'ssl': {_TLS_BY_SCHEME}")
    tls = [(name, value) for name, value in fields if name.startswith("ssl_")]
    if tls and parts.scheme != "rediss":
        raise ConfigError(f"{what}: {shown!r} has the TLS option {tls[0][0]!r}: {_TLS_BY_SCHEME}")
    for name, value in tls:
        _check_tls_option(name, value, shown, what)
    if parts.scheme == "rediss" and not any(name == "ssl_cert_reqs" for name, _ in tls):
        raise ConfigError(
            f"{what}: {shown!r}: {NO_CERT_REQS}. For TLS: {TLS_EXAMPLE}; without it Celery's broker client would not "
            "check the server's certificate, and its result backend refuses the URL"
        )


def _check_tls_option(name: str, value: str, shown: str, what: str) -> None:
    """ConfigError where the TLS option ``name`` of the URL ``shown`` (redacted) is not one of :data:`_TLS_OPTIONS`,
    or has a value its clients do not read alike."""
    if name not in _TLS_OPTIONS:
        raise ConfigError(
            f"{what}: {shown!r} has the TLS option {name!r}, which the Redis clients ragscore uses do not all read "
            f"(or not alike): leave it out; the TLS options a URL takes are ({', '.join(sorted(_TLS_OPTIONS))})"
        )
    if name == "ssl_cert_reqs" and value not in {*CERT_REQS, *CERT_REQS.values()}:
        raise ConfigError(
            f"{what}: {shown!r} has ssl_cert_reqs={value!r}: write required, optional or none (or kombu's "
            f"{', '.join(CERT_REQS)})"
        )
    if name == "ssl_check_hostname" and value.lower() not in ("true", "false"):
        raise ConfigError(
            f"{what}: {shown!r} has ssl_check_hostname={value!r}, which Redis clients read differently "
            "(kombu reads only 'false' as off, redis-py '0', 'no' and others too): write true or false"
        )


def _check_broker_query(parts: SplitResult, shown: str, what: str) -> None:
    """ConfigError where the broker's URL (``parts``, ``shown`` redacted) has a query option kombu does not take:
    Celery's sends, its workers and Flower fail with a TypeError traceback (``redis://h:6379?db=4``, where redis-py,
    the run store's and the result backend's client, reads database 4). kombu hands a ``redis+socket://`` URL's
    query to redis-py."""
    given = [n for n, v in query_options(parts.query) if v]  # as kombu reads them: blank ones dropped
    if parts.scheme in ("redis+socket", "socket"):
        _check_kombu_only_options(shown, what, _KOMBU_ONLY_OPTIONS.intersection(given))
        return
    if parts.scheme not in ("redis", "rediss"):
        return
    _check_kombu_only_options(shown, what, {"connect_timeout"}.intersection(given))
    names = [n for n in given if n not in _KOMBU_QUERY_OPTIONS and not n.startswith("ssl_")]
    if "db" in names:
        raise ConfigError(
            f"{what}: {shown!r} names its database as ?db=, which Celery's broker client (kombu) refuses: "
            "name it in its path (redis://HOST:PORT/N)"
        )
    if names:
        raise ConfigError(
            f"{what}: Celery's broker client (kombu) refuses the query option {names[0]!r} of {shown!r}: "
            "leave it out of the broker's URL (RAGSCORE_STORE_URL and RAGSCORE_RESULT_BACKEND, read by redis-py, "
            "may take it)"
        )


def _check_kombu_only_options(shown: str, what: str, refused: Set[str]) -> None:
    """ConfigError naming the first of ``refused``, options of the broker's URL (``shown``, redacted) that
    kombu fails its first connection with: ``?connect_timeout=`` (read as text, then added to a float: a TypeError),
    and in a ``redis+socket://`` URL, whose query kombu hands to redis-py, each of :data:`_KOMBU_ONLY_OPTIONS` (an
    unexpected keyword)."""
    if refused:
        raise ConfigError(
            f"{what}: {shown!r} has the query option {min(refused)!r}, which Celery's broker client (kombu) fails "
            "its first connection with (a TypeError): leave it out (ragscore bounds each connect itself)"
        )


#: Seconds a finished run's keys stay in Redis before they expire (7 days).
DEFAULT_RUN_TTL_S = 7 * 24 * 3600
#: Seconds a running run's keys are kept at least, whatever RAGSCORE_RUN_TTL_S says: a run longer than a short
#: TTL must not lose the items it scored first. Its summary sets RAGSCORE_RUN_TTL_S on every key.
LIVE_RUN_TTL_S = 7 * 24 * 3600
#: Seconds a worker waits for each reply of (and connect to) its broker and result backend, by default: Celery's
#: own default for the backend's replies (``redis_socket_timeout``), now the broker's too. A broker that accepts and
#: never answers (hung, behind a partition) fails the read, and Celery reconnects, seeing a stop between its tries,
#: where it was held in the read for ever (SIGTERM waited out the whole ``--stop-timeout``). Above the store's
#: default (:data:`DEFAULT_WORKER_STORE_TIMEOUT_S`): at 60 s, a hang of 75 s made the consumer reconnect mid-run, and
#: the message it held waited for a stall recovery.
DEFAULT_WORKER_SOCKET_TIMEOUT_S = 120.0
#: Seconds a worker waits for one reply of its run store (RAGSCORE_STORE_URL, else the broker's Redis) before it takes
#: the connection for lost and retries it, by default (:data:`CLIENT_RETRIES` times: about 9.5 min in all with the
#: backoff): well above a slow Redis's pauses (a fork for a BGSAVE of a big dataset), so a hang is waited out, and a
#: connection that never answers (a partition or fail-over dropped it) is opened again after a minute. The whole wait
#: stays below the visibility timeout (900 s by default): a judge chunk, which no time limit bounds (thread pool),
#: waiting longer would be delivered again while it still waits. redis-py's own default (5 s since redis-py 8) failed
#: a chunk after ~65 s of a hung Redis.
DEFAULT_WORKER_STORE_TIMEOUT_S = 60.0
#: Retries of a store command whose connection was lost (or, a worker's, whose reply did not come), backing off
#: ``CLIENT_BACKOFF_BASE_S`` doubled each time (0.2 s first) up to ``CLIENT_BACKOFF_CAP_S``: about 21 s in all.
CLIENT_RETRIES = 8
CLIENT_BACKOFF_BASE_S = 0.1
CLIENT_BACKOFF_CAP_S = 5.0
#: The shortest worker store timeout taken: a healthy Redis answers in milliseconds, and each reply is timed, not a
#: whole call (a big reply's reads each restart it); below a second a Redis busy for a moment would be taken for lost.
MIN_WORKER_STORE_TIMEOUT_S = 1.0
#: The shortest worker socket timeout taken: well above kombu's ``brpop_timeout`` (1 s), within which Redis answers an
#: idle worker's BRPOP, so that a Redis slow for a moment is not taken for lost.
MIN_WORKER_SOCKET_TIMEOUT_S = 5.0


#: Default of ``RAGSCORE_ORPHAN_CONFIRM_S``: two renewals of the workers' keys (``kept.RENEW_S``, every 2 s).
DEFAULT_ORPHAN_CONFIRM_S = 4.0
#: Default of ``RAGSCORE_ALIVE_TTL_S``: a key outlives a few of its renewals (every 2 s).
DEFAULT_ALIVE_TTL_S = 10
#: The least ``RAGSCORE_ALIVE_TTL_S``: the default, as an older status takes every key to live that long (its time
#: left below the default less a few seconds, a key just renewed, would read as a gone worker's).
MIN_ALIVE_TTL_S = DEFAULT_ALIVE_TTL_S


class Settings(BaseSettings):
    """Process-wide configuration; every field reads ``RAGSCORE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="RAGSCORE_", extra="ignore")

    #: Broker URL of a cluster (``redis://``, ``rediss://``). Unset means embedded mode.
    broker_url: str | None = None
    #: Result backend; defaults to the broker URL.
    result_backend: str | None = None
    #: Run store URL; defaults to the broker URL.
    store_url: str | None = None
    #: Per-user data dir of the embedded mode (private Redis socket, data file, logs).
    home: Path = Field(default_factory=lambda: Path.home() / ".cache" / "ragscore")
    #: Seconds a finished run's keys are kept in Redis.
    run_ttl_s: int = DEFAULT_RUN_TTL_S

    @property
    def live_ttl_s(self) -> int:
        """Seconds a running run's keys are kept (at least :data:`LIVE_RUN_TTL_S`)."""
        return max(self.run_ttl_s, LIVE_RUN_TTL_S)

    #: Tests of redelivery only (their tasks take seconds): accept a visibility timeout not above every hard time
    #: limit. A task that runs longer than it is delivered again while its first delivery still works.
    allow_short_visibility_timeout: bool = False
    #: Seconds before Redis re-delivers a message whose worker vanished without acknowledging it (kill -9
    #: of a whole worker, a lost host). Must be above the longest task (the hard limits in limits.py).
    visibility_timeout_s: int = Field(default=900, ge=1)
    #: Seconds without progress, with nothing of the run queued or held, before the orchestrator
    #: re-submits the missing work (a message lost with a killed worker).
    stall_s: float = Field(default=120.0, gt=0)
    #: Seconds at least between the starts of two checks of a run's held messages where the first found orphans
    #: (messages held by a worker that is gone): the second confirms them only then, once the keys of live workers
    #: slow to renew theirs (a GC pause, a loaded host) are renewed again.
    orphan_confirm_s: float = Field(default=DEFAULT_ORPHAN_CONFIRM_S, gt=0)
    #: Seconds a worker's key saying it runs lives unless renewed (every 2 s): a worker killed whole is no longer
    #: said to run by then. Written in the key, so a status on another host reads each worker's own.
    alive_ttl_s: int = Field(default=DEFAULT_ALIVE_TTL_S, ge=MIN_ALIVE_TTL_S)
    #: Longest text field (question, answer, reference, code, one context) a row may have, in characters.
    max_field_chars: int = Field(default=1_000_000, gt=0)
    #: Comma-separated modules with extra metrics, imported by the orchestrator and every worker (for
    #: metrics that are not packaged under the ``ragscore.metrics`` entry point).
    plugins: str = ""
    #: Seconds a worker's Celery waits for each reply of (and connect to) its broker and result backend before it
    #: takes the connection for lost and opens it again (:data:`DEFAULT_WORKER_SOCKET_TIMEOUT_S`).
    worker_socket_timeout_s: float = Field(default=DEFAULT_WORKER_SOCKET_TIMEOUT_S, ge=MIN_WORKER_SOCKET_TIMEOUT_S)
    #: Seconds a worker waits for each reply of its run store before it takes the connection for lost and retries
    #: it (:data:`DEFAULT_WORKER_STORE_TIMEOUT_S`); a chunk whose calls still fail is sent again.
    worker_store_timeout_s: float = Field(default=DEFAULT_WORKER_STORE_TIMEOUT_S, ge=MIN_WORKER_STORE_TIMEOUT_S)

    @field_validator("home")
    @classmethod
    def _expanded(cls, home: Path) -> Path:
        """``~/x`` (as env files and systemd units write it) is the user's ``x``, never a ``~`` directory here."""
        return home.expanduser()

    @property
    def short_visibility_timeout(self) -> bool:
        """A task can outlive the visibility timeout: it is not above the longest hard time limit of a task."""
        return self.visibility_timeout_s <= longest_hard_limit()

    def check_visibility_timeout(self) -> None:
        """ConfigError when the visibility timeout is not above every hard time limit, or not above a worker's whole
        wait for its run store (:meth:`_check_worker_store_wait`), and no test allowed it: a task that outlives it is
        re-delivered while it still runs, over and over (16 deliveries of a rate-limited judge's chunks at 5 s), until
        its items are failed as if their process had died. Only the processes that send tasks
        (run, resume, submit) and the workers check it: a command that only reads a run (status, results, cancel,
        compare) works on a cluster whose operators chose a short timeout."""
        if self.short_visibility_timeout and not self.allow_short_visibility_timeout:
            longest = longest_hard_limit()
            raise ConfigError(
                f"Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='{self.visibility_timeout_s}': must be above the longest "
                f"hard time limit of a task, {longest} s (default 900): a task still running when it passes is "
                "delivered again, and its items end failed as if their worker had died"
            )
        self._check_worker_store_wait()

    def _check_worker_store_wait(self) -> None:
        """ConfigError when a worker's store call on a Redis that never answers (:func:`worker_store_wait_s`) could
        outlive the visibility timeout (and no test allowed a short one): a judge chunk, which no time limit bounds,
        still waiting when it passes is delivered again."""
        wait = worker_store_wait_s(self.worker_store_timeout_s)
        if wait >= self.visibility_timeout_s and not self.allow_short_visibility_timeout:
            longest = math.ceil((self.visibility_timeout_s - worker_store_wait_s(0.0)) / (CLIENT_RETRIES + 1)) - 1
            raise ConfigError(
                f"Bad setting: RAGSCORE_WORKER_STORE_TIMEOUT_S='{self.worker_store_timeout_s:g}': a worker's call to a "
                f"run store that does not answer would wait {wait:.0f} s ({CLIENT_RETRIES + 1} tries, with backoff), "
                f"not below RAGSCORE_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s} s): a chunk still waiting "
                f"would be delivered again. Set it to at most {longest} s, or raise the visibility timeout"
            )

    @field_validator("broker_url", "result_backend", "store_url")
    @classmethod
    def _redis_url(cls, url: str | None, info: ValidationInfo) -> str | None:
        """A usable Redis URL; the broker's query one kombu takes too (the result backend's and the store's, only
        redis-py reads)."""
        if url:
            try:
                check_redis_url(url, "the URL", broker=info.field_name == "broker_url")
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return url or None


def worker_store_wait_s(timeout_s: float) -> float:
    """Longest a worker's store call waits on a Redis that accepts and never answers: :data:`CLIENT_RETRIES` + 1
    waits of ``timeout_s`` (``RAGSCORE_WORKER_STORE_TIMEOUT_S``), the client's backoff between them (as redis-py's
    ``ExponentialBackoff`` computes it)."""
    backoff = sum(min(CLIENT_BACKOFF_CAP_S, CLIENT_BACKOFF_BASE_S * 2**n) for n in range(1, CLIENT_RETRIES + 1))
    return (CLIENT_RETRIES + 1) * timeout_s + backoff


def _shown(value: object) -> object:
    """A setting's value as a message may show it: a URL's password replaced by ``***``."""
    return redact_url(value) if isinstance(value, str) else value


def get_settings() -> Settings:
    """Read the settings from the current environment (not cached: tests change it); ConfigError naming the
    variable when one is malformed."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"RAGSCORE_{'_'.join(str(p) for p in e['loc']).upper()}={_shown(e.get('input'))!r}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise ConfigError(f"Bad setting: {problems}") from None
