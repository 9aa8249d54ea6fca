"""Settings and broker URLs: a malformed value is one clear error naming it, never a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any
from urllib.parse import unquote

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.settings import check_redis_url, get_settings

from ..support import ROOT

#: What the refusal of an '@' in a query option that redis-py does not take as text says (settings.check_redis_url).
_OPTION = r"a query option that redis-py does not take as text \(only client_name, lib_name, .*\)"
#: What the refusal of a broker's query option that kombu, Celery's broker client, does not take says.
_KOMBU = r"Celery's broker client \(kombu\) refuses"
#: Where the refusal of a broker's ?db= says to name the database.
_PATH = r"name it in its path \(redis://HOST:PORT/N\)"
#: What the refusal of ?credential_provider= says to do instead.
_CREDENTIALS = r"which the Redis clients ragscore uses read differently.*redis://USER:PASSWORD@HOST:PORT/N"
#: What the refusal of ?ssl= and of TLS options in a URL whose scheme is not rediss:// says.
_TLS = r"a URL asks for TLS by its scheme: rediss://HOST:PORT/N\?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.pem"
#: The TLS options accepted, as the refusal of another lists them.
_SSL = r"\(ssl_ca_certs, ssl_ca_data, ssl_ca_path, ssl_cert_reqs, ssl_certfile, ssl_check_hostname, ssl_ciphers, "
_SSL += r"ssl_keyfile, ssl_password\)"
#: The values of ssl_cert_reqs accepted, as the refusal of another lists them.
_CERT_REQS = r"required, optional or none \(or kombu's CERT_REQUIRED, CERT_OPTIONAL, CERT_NONE\)"


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost:6379/0",
        "rediss://:pw@h:6380/2?ssl_cert_reqs=required",
        "rediss://h:6380/0?ssl_cert_reqs=CERT%5FREQUIRED",  # percent-encoded: kombu and redis-py decode it
        "redis://h",
        "redis+socket:///tmp/r.sock",
        "unix:///s",
        "redis://:ab%2Fcd+ef=@h:6379/0",  # a base64 password, its '/' percent-encoded
        "redis+socket:///tmp/a@b/r.sock?virtual_host=1",
        "rediss://h:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/etc/a@b/ca.pem",  # an '@' in the query: no password
        "rediss://h:6380/0?ssl_cert_reqs=CERT_REQUIRED&ssl_check_hostname=false",  # kombu's and Celery's spelling
        "rediss://h:6380/0?ssl_cert_reqs=none&ssl_certfile=c.pem&ssl_keyfile=k.pem&ssl_password=x&ssl_ciphers=HIGH",
    ],
)
def test_redis_urls_pass(url: str) -> None:
    assert check_redis_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:6379", "must be a Redis URL"),
        ("http://localhost:6379", "must be a Redis URL"),
        ("redis://localhost:63x9/0", "port"),
        ("redis://localhost:6379/0x", "database"),
        ("redis:/localhost:6379/0", r"'redis:/localhost:6379/0' has no host: a Redis URL starts with two slashes"),
        ("redis:/u:s3cretPW@h:6379/0", r"'redis:/u:\*\*\*@h:6379/0' has no host"),  # the password not shown
        ("redis:///db", "the database of 'redis:///db' must be a number"),  # two slashes: no hint of a missing one
        # openssl rand -base64 passwords: the '/' cut the host, and the error was "the port ... is not a number"
        ("redis://:ab/cd+ef=@127.0.0.1:6379/0", r"the password in 'redis://:\*\*\*@127.0.0.1:6379/0' holds '/'"),
        ("rediss://user:p#w@h:6380/0", "percent-encode them"),
        # redis-py reads host u, port 12, and no password: '?' ended the host
        ("redis://u:12?a=34@h", rf"the '@' in 'redis://u:\*\*\*@h' is in {_OPTION}.*'\?' as %3F\)$"),
        ("redis://u:12?a=34@h:6379", rf"the '@' in 'redis://u:\*\*\*@h:6379' is in {_OPTION}"),
        ("redis://u:12?client_name=x&a=34@h", rf"the '@' in 'redis://u:\*\*\*@h' is in {_OPTION}"),  # 'a': refused
        ("redis://h:6379?foo=a@b", rf"the '@' in 'redis://h:\*\*\*@b' is in {_OPTION}"),  # an unknown option
        ("redis://h:6379?db=1@b", rf"the '@' in 'redis://h:\*\*\*@b' is in {_OPTION}"),  # a number's option
        # a password holding '?' with no '=' after it: redis-py drops the field '34@h' and connects to u:12
        ("redis://u:12?34@h:6379/0", r"the password in 'redis://u:\*\*\*@h:6379/0' holds"),
        ("redis://u:12?34@h", r"the password in 'redis://u:\*\*\*@h' holds"),
        ("redis://u:12?client_name=x&34@h", r"the password in 'redis://u:\*\*\*@h' holds.*%3F\)$"),
        # the '@' that ends the password is none of a query option's, whatever another option holds
        ("redis://u:12?client_name=a@b&34@h", r"the password in 'redis://u:\*\*\*@h' holds"),
        ("redis://u:pa/ss@h:6379/0?client_name=me@x", r"the password in 'redis://u:\*\*\*@x' holds '/'"),
        ("redis://:ab/cd@h:6379/0?foo=x@y", r"the password in 'redis://:\*\*\*@y' holds '/'"),
        # redis-py (the run store) reads database 4, kombu (the broker) fails its send: which one was meant?
        ("redis://:pw@h:6379/1?db=4", r"'redis://:\*\*\*@h:6379/1\?db=4' names its database twice"),
        ("rediss://h:6380/1?ssl_cert_reqs=required&db=1", "names its database twice"),
        # redis-py reads database 4, kombu database 0: the broker's queues were read where Celery never put them
        ("redis+socket:///tmp/r.sock?db=4", r"does not read \(it uses database 0\): name it as \?virtual_host=N"),
        # redis-py reads database 4, kombu fails every send, a worker's start and Flower's with a TypeError
        ("redis://:pw@h:6379?db=4", rf"'redis://:\*\*\*@h:6379\?db=4' names its database as \?db=, which {_KOMBU}"),
        ("rediss://h:6380?ssl_cert_reqs=required&db=1", rf"names its database as \?db=, which {_KOMBU}: {_PATH}"),
        ("redis://h:6379?client_name=w1", rf"{_KOMBU} the query option 'client_name' of 'redis://h:6379\?client"),
        ("redis://h:6379/0?password=s3cret", r"option 'password' of 'redis://h:6379/0\?password=\*\*\*'"),
        ("redis://h:6379?virtual_host=2", "refuses the query option 'virtual_host'"),  # kombu: two values
        # kombu takes it as a keyword, then adds the text '5' to a float at its first connection (a TypeError)
        ("redis://h:6379/0?heartbeat=30&connect_timeout=5", "the query option 'connect_timeout', which Celery's"),
        # kombu hands a socket URL's query to redis-py, which refuses its own options at the first send
        ("redis+socket:///tmp/r.sock?heartbeat=30", r"'redis\+socket:///tmp/r.sock\?heartbeat=30' has the query opti"),
        ("socket:///tmp/r.sock?virtual_host=1&insist=1", "has the query option 'insist', which Celery's broker client"),
        ("redis+socket://:pw@/tmp/r.sock?login_method=x", r"'redis\+socket://:\*\*\*@/tmp/r.sock\?login_method=x' has"),
        # kombu imports and builds the class it names, redis-py (the run store's client) gets its name as text
        ("redis://h:6379/0?credential_provider=m.P", rf"'credential_provider', {_CREDENTIALS}"),
        # kombu fails on ?ssl= (a ValueError or TypeError), redis-py refuses it as an unexpected keyword
        ("redis://:pw@h:6379/0?ssl=true", rf"'redis://:\*\*\*@h:6379/0\?ssl=true' has the query option 'ssl': {_TLS}"),
        ("rediss://h:6380/0?ssl=true&ssl_cert_reqs=required", rf"the query option 'ssl': {_TLS}"),
        # kombu speaks TLS on it, redis-py and Celery's result backend refuse it
        ("redis://h:6379/0?ssl_cert_reqs=required", rf"has the TLS option 'ssl_cert_reqs': {_TLS}"),
        ("unix:///s?ssl_ca_certs=ca.pem", rf"has the TLS option 'ssl_ca_certs': {_TLS}"),
        # every client passed it on to redis-py's connection, which refused it at the first send (a TypeError)
        (
            "rediss://:pw@h:6380/0?ssl_cert_reqs=none&ssl_foo=1",
            r"'rediss://:\*\*\*@h:6380/0\?ssl_cert_reqs=none&ssl_foo=1'",
        ),
        ("rediss://h:6380/0?ssl_cert_reqs=none&ssl_foo=1", rf"the TLS option 'ssl_foo', which .*{_SSL}$"),
        # read as text by kombu (on by any value) and by redis-py (on), both as the flags they are not
        ("rediss://h:6380/0?ssl_cert_reqs=none&ssl_validate_ocsp=false", "the TLS option 'ssl_validate_ocsp'"),
        ("rediss://h:6380/0?ssl_min_version=3", "the TLS option 'ssl_min_version'"),
        # kombu fails with a KeyError, redis-py with its own wording
        ("rediss://h:6380/0?ssl_cert_reqs=Required", rf"ssl_cert_reqs='Required'.*{_CERT_REQS}"),
        ("rediss://h:6380/0?ssl_cert_reqs=CERT%5FREQUIRE", rf"ssl_cert_reqs='CERT_REQUIRE'.*{_CERT_REQS}"),
        # kombu speaks TLS without checking the server's certificate, Celery's result backend refuses it (a
        # traceback), redis-py checks it: refused by the connection probe only, after the settings were taken
        (
            "rediss://:pw@h:6380/2",
            r"'rediss://:\*\*\*@h:6380/2': a rediss:// URL needs ssl_cert_reqs\. For TLS: rediss://:PASSWORD@HOST",
        ),
        ("rediss://h:6380/0?ssl_ca_certs=/a/ca.pem&ssl_check_hostname=true", "a rediss:// URL needs ssl_cert_reqs"),
        # kombu reads only 'false' as false, redis-py '0', 'no', 'n', 'f' too: one checked the host's name
        (
            "rediss://h:6380/0?ssl_cert_reqs=required&ssl_check_hostname=0",
            r"ssl_check_hostname='0'.*: write true or false$",
        ),
        # kombu reads the last, redis-py (the run store's client) the first: the broker checked the certificate, the
        # run store did not
        (
            "rediss://:pw@h:6380/0?ssl_cert_reqs=none&ssl_cert_reqs=required",
            r"'rediss://:\*\*\*@h:6380/0\?ssl_cert_reqs=none&ssl_cert_reqs=required' gives the query option "
            r"'ssl_cert_reqs' twice, .*: give it once$",
        ),
        ("redis://h:6379/0?client_name=a&client_name=b", "gives the query option 'client_name' twice"),
    ],
)
def test_malformed_redis_urls_are_named(url: str, message: str) -> None:
    """An '@' in a query option redis-py does not take as text (``?foo=a@b``) was refused as a password holding '?'
    with the advice to percent-encode the '@' as %40, after which redis-py refuses the option anyway (an unknown
    keyword, or no number): the message says which options may hold an '@', and both readings."""
    with pytest.raises(ConfigError, match=message):
        check_redis_url(url)


@pytest.mark.parametrize(
    ("url", "option", "value"),
    [
        ("redis://h:6379?client_name=me@h2", "client_name", "me@h2"),
        ("redis://h:6379?password=ab@cd", "password", "ab@cd"),
        ("rediss://h:6380?ssl_ca_certs=a@b.pem&db=1&ssl_cert_reqs=required", "ssl_ca_certs", "a@b.pem"),
        # OpenSSL's cipher strings set a security level after an '@'
        ("rediss://h:6380?ssl_cert_reqs=none&ssl_ciphers=DEFAULT:@SECLEVEL=0", "ssl_ciphers", "DEFAULT:@SECLEVEL=0"),
    ],
)
def test_a_query_value_holding_an_at_sign_that_redis_py_reads_passes(url: str, option: str, value: str) -> None:
    """A query right after the host whose value holds an '@' reads as a password holding '?' too
    (``redis://u:12?a=34@h``, which redis-py sends to host u, port 12, with an option ``a`` it refuses); c4e86fe
    refused both. Where each field holding an '@' is an option redis-py takes as text, the URL is the query redis-py
    reads, and passes (its password is still hidden in messages as either reading's)."""
    from redis.connection import parse_url

    assert check_redis_url(url, "the URL", broker=False) == url  # the run store's: kombu refuses most of them
    assert parse_url(url)["host"] == "h"
    assert parse_url(url)[option] == value


@pytest.mark.parametrize("variable", ["RAGSCORE_STORE_URL", "RAGSCORE_RESULT_BACKEND"])
def test_a_database_named_as_db_passes_where_redis_py_reads_the_url_only(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The run store's client (redis-py) and the result backend's (Celery's, over redis-py) read ``?db=4`` as database
    4: refused only as the broker's URL, which kombu reads too."""
    url = "redis://127.0.0.1:6379?db=4&client_name=w1"
    monkeypatch.setenv(variable, url)
    assert getattr(get_settings(), variable.removeprefix("RAGSCORE_").lower()) == url
    monkeypatch.setenv("RAGSCORE_BROKER_URL", url)
    with pytest.raises(
        ConfigError, match=rf"RAGSCORE_BROKER_URL='{re.escape(url)}': the URL: .* as \?db=, which {_KOMBU}"
    ):
        get_settings()


def test_the_kombu_query_options_are_those_kombu_takes_from_a_url() -> None:
    """Each query option let into a broker's URL is one kombu's Connection takes as a keyword and does not set from
    the URL's other parts (``?virtual_host=2``: two values): a name kombu renamed or dropped would pass here and fail
    every send."""
    import inspect

    from kombu import Connection
    from kombu.utils.url import parse_url

    from ragscore_workers.settings import _KOMBU_QUERY_OPTIONS

    taken = set(inspect.signature(Connection._init_params).parameters) - {"self"}
    assert _KOMBU_QUERY_OPTIONS == taken - set(parse_url("redis://h:6379/0"))


@pytest.mark.parametrize("variable", ["RAGSCORE_STORE_URL", "RAGSCORE_RESULT_BACKEND"])
@pytest.mark.parametrize(
    ("query", "message"),
    [("credential_provider=m.P", "'credential_provider'"), ("ssl_foo=1", "'ssl_foo'"), ("ssl=1", "'ssl'")],
)
def test_options_no_client_reads_alike_are_refused_where_redis_py_reads_the_url_only(
    monkeypatch: pytest.MonkeyPatch, variable: str, query: str, message: str
) -> None:
    """The run store's client (redis-py) and the result backend's (Celery's) read those options too: each one
    failed them at its first connection, or (``?credential_provider=``) Celery's imported the class and redis-py
    took its name for one."""
    monkeypatch.setenv(variable, f"rediss://:s3cret@h:6380/0?ssl_cert_reqs=required&{query}")
    with pytest.raises(ConfigError, match=rf"{variable}='rediss://:\*\*\*@h:6380/0\?.*{message}") as info:
        get_settings()
    assert "s3cret" not in str(info.value)


def test_the_tls_options_are_those_redis_py_takes_from_a_url_as_kombu_passes_them() -> None:
    """Each TLS option let into a URL is one redis-py's TLS connection takes, and reads from a URL as kombu passes it
    on (text, but ssl_check_hostname and ssl_cert_reqs, which ragscore checks): a name redis-py renamed or dropped
    would pass here and fail at connect."""
    import inspect

    from redis.connection import URL_QUERY_ARGUMENT_PARSERS, SSLConnection

    from ragscore_workers.settings import _TLS_OPTIONS

    assert _TLS_OPTIONS <= set(inspect.signature(SSLConnection).parameters)
    assert _TLS_OPTIONS & set(URL_QUERY_ARGUMENT_PARSERS) == {"ssl_check_hostname"}


@pytest.mark.parametrize("spelling", ["CERT_REQUIRED", "CERT_NONE", "CERT%5FREQUIRED", "CERT_NO%4EE"])
def test_kombus_spelling_of_ssl_cert_reqs_is_what_redis_py_reads(spelling: str) -> None:
    """``ssl_cert_reqs=CERT_REQUIRED``, the spelling of Celery's docs, which kombu and Celery's result backend read,
    passed the URL's check, then redis-py (the run store's client) refused it at its first connection: it gets
    ``required``. Percent-encoded (``CERT%5FREQUIRED``), which the check decoded and the rewrite did not, too."""
    import ssl

    import redis

    from ragscore_workers.store import store_url_for_redis_py

    url = f"rediss://h:6380/0?ssl_ca_certs=/a/ca.pem&ssl_cert_reqs={spelling}&client_name=w"
    pool = redis.ConnectionPool.from_url(store_url_for_redis_py(check_redis_url(url, broker=False)))
    assert pool.make_connection().cert_reqs == getattr(ssl, unquote(spelling))  # builds it, does not connect


def test_the_redis_text_options_are_options_redis_py_takes_as_text() -> None:
    """Each query option let hold an '@' is one redis-py passes on as text to a connection that takes it: a name
    redis-py renamed or dropped would make such a URL pass here and fail at connect."""
    import inspect

    from redis.connection import URL_QUERY_ARGUMENT_PARSERS, AbstractConnection, Connection, SSLConnection

    from ragscore_workers.settings import _REDIS_TEXT_OPTIONS

    taken = {p for c in (AbstractConnection, Connection, SSLConnection) for p in inspect.signature(c).parameters}
    assert _REDIS_TEXT_OPTIONS <= taken - set(URL_QUERY_ARGUMENT_PARSERS)


def test_a_malformed_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSCORE_RUN_TTL_S", "7d")
    with pytest.raises(ConfigError, match="RAGSCORE_RUN_TTL_S='7d'"):
        get_settings()
    monkeypatch.delenv("RAGSCORE_RUN_TTL_S")
    monkeypatch.setenv("RAGSCORE_BROKER_URL", "localhost:6379")
    with pytest.raises(ConfigError, match="RAGSCORE_BROKER_URL='localhost:6379': the URL must be a Redis URL"):
        get_settings()
    monkeypatch.setenv("RAGSCORE_BROKER_URL", "http://:s3cretPW@host:6379/0")  # the wrong scheme, a password
    with pytest.raises(ConfigError, match=r"RAGSCORE_BROKER_URL='http://:\*\*\*@host:6379/0'") as info:
        get_settings()
    assert "s3cretPW" not in str(info.value)
    monkeypatch.setenv("RAGSCORE_BROKER_URL", "redis://:pa#ss/w0rd@host:6379/0")  # unencoded: a parser cuts it short
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert "pa#ss" not in str(info.value) and "w0rd" not in str(info.value) and ":***@host" in str(info.value)


def test_a_visibility_timeout_not_above_every_hard_time_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 s with a slow judge: each chunk was delivered again every 5 s while its first delivery still ran, and items
    ended as "the worker process died" 16 deliveries later, exit code 0. Refused by the check of the processes that
    send or run tasks; reading the settings (every command does) does not refuse it."""
    from ragscore_workers.limits import QUEUE_LIMITS

    longest = max(hard for _, hard in QUEUE_LIMITS.values())
    for value in ("5", str(longest)):
        monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", value)
        settings = get_settings()
        with pytest.raises(ConfigError) as info:
            settings.check_visibility_timeout()
        said = str(info.value)
        assert f"RAGSCORE_VISIBILITY_TIMEOUT_S='{value}': must be above" in said and f"{longest} s" in said, said
    monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", str(longest + 1))
    get_settings().check_visibility_timeout()
    # tests of redelivery, whose tasks take seconds, lower it on purpose
    monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", "4")
    monkeypatch.setenv("RAGSCORE_ALLOW_SHORT_VISIBILITY_TIMEOUT", "1")
    get_settings().check_visibility_timeout()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["status", "--broker", "localhost:6391"], {}, "--broker must be a Redis URL"),
        (["status", "--broker", "redis://localhost:6391/0x"], {}, "the database of"),
        (["status"], {"RAGSCORE_MAX_FIELD_CHARS": "abc"}, "RAGSCORE_MAX_FIELD_CHARS='abc'"),
        (["worker", "-Q", "cpu"], {"RAGSCORE_BROKER_URL": "localhost:1"}, "RAGSCORE_BROKER_URL='localhost:1'"),
        (["worker", "-Q", "cpu"], {"RAGSCORE_BROKER_URL": "redis://localhost:1?db=4"}, "?db=4' names its database as"),
        (["run", "x.jsonl", "--suite", "/tmp"], {}, "is not a file"),
        (["status", "--interval", "abc"], {}, "Invalid value for '--interval'"),
        (["worker", "-Q", "cpu", "-c", "0"], {}, "greater than or equal to 1"),
        (["run", "--bogus"], {}, "No such option: --bogus"),
        (["worker", "-Q", "judge"], {"RAGSCORE_VISIBILITY_TIMEOUT_S": "5"}, "TIMEOUT_S='5': must be above"),
        (["worker", "-Q", "judge"], {"RAGSCORE_WORKER_STORE_TIMEOUT_S": "120"}, "STORE_TIMEOUT_S='120': a worker's"),
        (["status", "r-1"], {"RAGSCORE_ORPHAN_CONFIRM_S": "0"}, "ORPHAN_CONFIRM_S='0': Input should be greater"),
        (["worker", "-Q", "cpu"], {"RAGSCORE_ALIVE_TTL_S": "9"}, "RAGSCORE_ALIVE_TTL_S='9': Input should be greater"),
    ],
)
def test_the_cli_says_what_is_malformed_and_exits_2(args: list[str], env: dict[str, str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, **env}, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_password_given_in_the_query_is_redacted_too() -> None:
    """redis-py takes a ``?password=`` of the URL's query as its password: redact_url showed it, in every message that
    names the URL (a database Redis refuses, a host that does not resolve, a broker that does not answer)."""
    from ragscore_workers.redaction import redact_url

    assert redact_url("redis://h:6379/0?password=s3cret&db=1") == "redis://h:6379/0?password=***&db=1"
    assert redact_url("rediss://u:pw@h/0?ssl_cert_reqs=none&ssl_password=k3y") == (
        "rediss://u:***@h/0?ssl_cert_reqs=none&ssl_password=***"
    )
    assert redact_url("unix:///tmp/r.sock?db=2&Password=x%26y") == "unix:///tmp/r.sock?db=2&Password=***"
    assert redact_url("redis://h:6379/0?db=1") == "redis://h:6379/0?db=1"


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        (" redis://u:12/34@h:6379/0", "12/34"),
        ("\tredis://u:12/34@h:6379/0", "12/34"),
        ('"redis://default:ab/cd@h:6379/0"', "ab/cd"),  # docker --env-file keeps the quotes
        ("'redis://default:ab?cd@h:6379/0'", "ab?cd"),
        ("<redis://u:ab#cd@h:6379/0>", "ab#cd"),
    ],
)
def test_a_password_after_whitespace_or_a_quote_is_hidden(
    monkeypatch: pytest.MonkeyPatch, url: str, secret: str
) -> None:
    """``userinfo_span`` read a scheme at the URL's first character only: a password holding '/', '?' or '#' of a
    URL with a space, a tab, a quote or a '<' before it was shown in full."""
    monkeypatch.setenv("RAGSCORE_BROKER_URL", url)
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert secret not in str(info.value) and ":***@h:6379" in str(info.value)


def test_a_password_holding_a_slash_then_an_equals_sign_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    """An '=' after the host was read as a query's value holding the '@' (``?ssl_ca_certs=/a@b/ca.pem``) also where
    the '@' is in the path: a base64 password's ``12/Ab+c=`` was shown."""
    monkeypatch.setenv("RAGSCORE_BROKER_URL", "redis://default:12/Ab+c=@h:6379/0")
    with pytest.raises(ConfigError) as info:
        get_settings()
    assert "Ab+c" not in str(info.value) and "redis://default:***@h:6379/0" in str(info.value)


def test_the_workers_socket_timeout_is_read_from_the_environment_and_one_too_short_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RAGSCORE_WORKER_SOCKET_TIMEOUT_S bounds each reply of a worker's broker and result backend (default 120 s); one
    near kombu's BRPOP timeout (1 s) would take an idle, healthy Redis for lost, so below 5 s is refused, named."""
    from ragscore_workers.app import _config

    def bounds(config: dict[str, Any]) -> set[object]:
        transport = config["broker_transport_options"]
        names = ("redis_socket_timeout", "redis_socket_connect_timeout")
        return {config[n] for n in names} | {transport[n] for n in ("socket_timeout", "socket_connect_timeout")}

    assert bounds(_config("redis://h:6379/0", None)) == {120.0}
    monkeypatch.setenv("RAGSCORE_WORKER_SOCKET_TIMEOUT_S", "7")
    assert bounds(_config("redis://h:6379/0", None)) == {7.0}
    assert _config("redis://h:6379/0", None, 3.0)["redis_socket_timeout"] == 3.0  # the sending side's own
    monkeypatch.setenv("RAGSCORE_WORKER_SOCKET_TIMEOUT_S", "1")
    with pytest.raises(ConfigError, match="_SOCKET_TIMEOUT_S='1': Input should be greater than or equal to 5"):
        get_settings()


def test_the_workers_store_timeout_is_read_from_the_environment_and_one_too_short_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RAGSCORE_WORKER_STORE_TIMEOUT_S bounds each reply of a worker's run store client (default 60 s), retried as a
    lost connection; the orchestrator's clients keep their own bound. One under 1 s is refused, named."""
    from ragscore_workers.store import redis_client

    def bound(*args: Any) -> object:
        return redis_client("redis://h:6379/0", *args).connection_pool.connection_kwargs["socket_timeout"]

    assert bound() == 60.0
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "2.5")
    assert bound() == 2.5
    assert bound(7.0) == 7.0  # the sending side's own
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "0.5")
    with pytest.raises(ConfigError, match="_STORE_TIMEOUT_S='0.5': Input should be greater than or equal to 1"):
        get_settings()
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "a minute")
    with pytest.raises(ConfigError, match="RAGSCORE_WORKER_STORE_TIMEOUT_S='a minute': Input should be a valid number"):
        get_settings()


def test_a_workers_store_wait_past_the_visibility_timeout_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's store call on a Redis that never answers waits 9 tries of RAGSCORE_WORKER_STORE_TIMEOUT_S, ~21 s of
    backoff between: at 98 s that passed the default 900 s visibility timeout, and a judge chunk still waiting was
    delivered again. Refused where the workers start (the check every sending process and worker runs); 97 s is
    taken, and a longer visibility timeout takes more."""
    from ragscore_workers.settings import worker_store_wait_s

    assert worker_store_wait_s(60.0) == pytest.approx(9 * 60 + 21.2)  # the ~9.5 min docs/settings.md states
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "97")
    get_settings().check_visibility_timeout()
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "98")
    with pytest.raises(ConfigError) as info:
        get_settings().check_visibility_timeout()
    said = str(info.value)
    assert "RAGSCORE_WORKER_STORE_TIMEOUT_S='98'" in said and "RAGSCORE_VISIBILITY_TIMEOUT_S (900 s)" in said, said
    assert "at most 97 s" in said, said
    monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", "1200")
    get_settings().check_visibility_timeout()


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("RAGSCORE_ORPHAN_CONFIRM_S", "0", "Input should be greater than 0"),
        ("RAGSCORE_ORPHAN_CONFIRM_S", "-4", "Input should be greater than 0"),
        ("RAGSCORE_ORPHAN_CONFIRM_S", "4s", "Input should be a valid number"),
        ("RAGSCORE_ALIVE_TTL_S", "0", "Input should be greater than or equal to 10"),
        ("RAGSCORE_ALIVE_TTL_S", "-10", "Input should be greater than or equal to 10"),
        ("RAGSCORE_ALIVE_TTL_S", "9", "Input should be greater than or equal to 10"),
        ("RAGSCORE_ALIVE_TTL_S", "1m", "Input should be a valid integer"),
    ],
)
def test_a_bad_orphan_confirm_wait_or_alive_ttl_is_refused_named(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    """The wait before a check confirms orphans and the life of a worker's key saying it runs: a value that is not a
    number, none above 0, or a key's life under the 10 s an older status takes each key to live, is refused, named."""
    assert get_settings().orphan_confirm_s == 4.0 and get_settings().alive_ttl_s == 10
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=re.escape(f"{variable}='{value}': {message}")):
        get_settings()
    monkeypatch.setenv(variable, "3600")
    assert getattr(get_settings(), variable.removeprefix("RAGSCORE_").lower()) == 3600
