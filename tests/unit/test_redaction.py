"""What an item's error keeps of the environment's secrets (``providers/errors.py``): the working directory is no
secret; a URL's password is cut whole, at the authority's last ``@``."""

from __future__ import annotations

from operator import itemgetter

import pytest

from ragscore_workers.app import _ShownConnection
from ragscore_workers.providers.errors import exception_text, redact_url_passwords


def test_the_working_directory_is_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """PWD matched the credential names (``(?:^|_)PWD$`` is meant for ``DB_PWD``): since a763ffe a 4-7 character
    working directory (``/tmp``, ``/app``, ``/work``) is taken out of every path in an item's error; a longer one
    (``/home/alice/proj``) was already."""
    for cwd in ("/tmp", "/app", "/home/alice/proj"):
        monkeypatch.setenv("PWD", cwd)
        monkeypatch.setenv("OLDPWD", cwd)
        said = exception_text(FileNotFoundError(f"{cwd}/rows.jsonl not found"))
        assert said == f"FileNotFoundError: {cwd}/rows.jsonl not found", said


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("redis://:p@ss1@host:6379/0 down", "redis://:***@host:6379/0 down"),
        ("connect postgres://u:ab@cd@db/x failed", "connect postgres://u:***@db/x failed"),
        ("see https://github.com/org/repo/blob/x@y", "see https://github.com/org/repo/blob/x@y"),
        ("redis://u:pw@host/0 and mail a@b", "redis://u:***@host/0 and mail a@b"),
    ],
)
def test_a_url_password_holding_an_at_sign_is_redacted_whole(text: str, redacted: str) -> None:
    """A URL's password is cut at the last '@' of the authority (as urlsplit reads it), not the first: 'p@ss1' left
    'ss1' in the text, even with the URL in the environment."""
    assert redact_url_passwords(text) == redacted


def test_a_url_password_holding_an_at_sign_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://u:p@ss1@db/x")
    said = exception_text(ValueError("could not connect postgres://u:p@ss1@db/x"))
    assert "ss1" not in said, said


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/v1?api-version=1&api_key=sk-1#top", "https://h/v1?api-version=1&api_key=***#top"),
        ("redis://h:6379/0?password=s3cret&db=1", "redis://h:6379/0?password=***&db=1"),
        ("rediss://h/0?ssl_cert_reqs=none&SSL_PASSWORD=k3y", "rediss://h/0?ssl_cert_reqs=none&SSL_PASSWORD=***"),
        ("https://h/v1?next=/a?token=t0k&x=1", "https://h/v1?next=/a?token=***&x=1"),  # a '?' in a value
        ("https://h/v1#access_token=t0k&state=s", "https://h/v1#access_token=***&state=s"),  # the fragment's
        ("https://h/v1?sig=a%26b&Api%5FKey=c", "https://h/v1?sig=***&Api%5FKey=***"),
    ],
)
def test_the_judge_endpoints_and_the_redis_urls_hide_the_same_query_values(url: str, shown: str) -> None:
    """Two rules redacted a URL's query: a Redis URL's (``redact_url``) only ``?password=`` and ``&ssl_password=``,
    so a ``?token=`` was shown, and a judge endpoint's (``shown_url``) no credential after a ``?`` inside a value or
    in the fragment. Both now hide what ``secret_query_param`` names, wherever a field starts."""
    from ragscore_workers.redaction import redact_url

    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:p&token=t0k@h/v1?a=1", "https://u:***@h/v1?a=1"),  # a password holding a credential's name
        ("https://h/?a=https://u:p&api_key=k3y@h2/x", "https://h/?a=https://u:***"),  # a value holding a password
        ("https://h/?r=x://u:pw&token=a/b&c@h2", "https://h/?r=x://u:***@h2"),
        ("https://h/v1/models/claude@20240620:rawPredict", "https://h/v1/models/claude@20240620:rawPredict"),
        ("http://user:pw@127.0.0.1:8000/v1?key=k", "http://user:***@127.0.0.1:8000/v1?key=***"),
    ],
)
def test_a_judge_endpoint_hides_what_either_rule_hides(url: str, shown: str) -> None:
    """``shown_url`` ran the query's rule, then the password's on what was left: each can cut what the other reads
    (a password holding ``&token=``, a credential's value holding a quoted URL's ``@``), so what either hides of
    the URL as given, or the password's rule of the URL with those values hidden, is hidden. A path's ``@`` (Vertex
    AI's model versions) is no password: the host stays shown."""
    from ragscore_workers.redaction import redact_url

    assert redact_url(url) == shown


@pytest.mark.timeout(60)
def test_a_long_query_name_is_read_in_linear_time() -> None:
    """Names were split on their ``?``s, and each suffix decoded and checked: a 40 kB name of ``a?`` repeats took
    20.9 s to show (quadratic: 400 kB would take over half an hour). Each name is read once, its words joined
    (``secret_query_param``): 400 kB, in messages and in the suite's check, takes well under a second. No time is
    measured: the 60 s timeout is a hang guard, far above a linear read and far below a quadratic one of 400 kB."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.redaction import redact_url
    from ragscore_workers.schemas import no_secret_in_url

    many = "a?" * 200_000
    assert redact_url(f"https://h/?{many}=x") == f"https://h/?{many}=x"
    assert redact_url(f"https://h/?{many}token=sk-1&b=2") == f"https://h/?{many}token=***&b=2"
    assert redact_url(f"https://h/?{many}key=k3y") == f"https://h/?{many}key=***"
    assert no_secret_in_url(f"https://h/?{many}=x") == f"https://h/?{many}=x"
    with pytest.raises(PydanticCustomError, match="holds a credential"):
        no_secret_in_url(f"https://h/?{many}token=sk-1")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/v1?a=1;key=SECRET", "https://h/v1?a=1;key=***"),  # a ';' starts a field as a '&' does
        ("https://h/v1?a=1;api_key=SECRET&b=2", "https://h/v1?a=1;api_key=***&b=2"),
        ("https://h/v1?a;token=SECRET", "https://h/v1?a;token=***"),
        ("https://h/v1?api+key=SECRET", "https://h/v1?api+key=***"),  # the decoded name: 'api key'
        ("https://h/v1?api%20key=SECRET&x=1", "https://h/v1?api%20key=***&x=1"),
        ("https://h/v1?api%5Fkey=SECRET", "https://h/v1?api%5Fkey=***"),
        ("https://h/v1?k%65y=SECRET", "https://h/v1?k%65y=***"),
        ("https://h/v1?token=a;b&x=1", "https://h/v1?token=***&x=1"),  # a value holding ';' is hidden whole
        ("https://h/v1?a=1;b=2&api-version=3", "https://h/v1?a=1;b=2&api-version=3"),
    ],
)
def test_query_names_after_a_semicolon_and_encoded_names_are_read(url: str, shown: str) -> None:
    """A field after a ';' (``?a=1;key=``) was read as part of the value before it, and a name was decoded but not
    read with its '+' (a space) or other punctuation as a separator: ``?api+key=`` is ``api key``, which no rule
    named. Names are now split at every character that is no letter, digit, '-' or '_'."""
    from ragscore_workers.redaction import redact_url

    assert redact_url(url) == shown


def test_a_suite_url_may_not_hold_an_encoded_credential_name() -> None:
    """The suite's rule reads the same names: ``?api+key=`` was let through as ``api key``, and a field after a ``;``
    (``?a=1;key=x``) as part of the value before it."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.schemas import no_secret_in_url

    for url in (
        "https://h/v1?api+key=x",
        "https://h/v1?data%5Bapi_key%5D=x",
        "https://h/v1?a=1;key=x",
    ):
        with pytest.raises(PydanticCustomError, match="holds a credential"):
            no_secret_in_url(url)
    assert no_secret_in_url("https://h/v1?api-version=1&cache-key=2") == "https://h/v1?api-version=1&cache-key=2"


@pytest.mark.parametrize(
    "url",
    [
        "https://h/search?filter[key]=status",
        "https://h/v1?page[size]=1&filter[code]=x",
        "https://h/v1?lang.code=en",
        "https://h/v1?sort.key=date",
        "https://h/v1?country+code=US",
    ],
)
def test_a_suite_url_may_hold_a_name_that_only_ends_in_key_or_code(url: str) -> None:
    """``key``, ``code`` (:data:`SECRET_QUERY_NAMES`) were read as the last word of any name: ``filter[key]``,
    ``lang.code``, ``country code`` (JSON:API filters, a language's code) were refused though they hold no
    credential. A bare name is now read after the name's last '?' or ';' only (``?a=1&b=x?key=`` still)."""
    from ragscore_workers.redaction import redact_url
    from ragscore_workers.schemas import no_secret_in_url

    assert no_secret_in_url(url) == url
    assert redact_url(url) == url


def test_a_suite_url_may_not_hold_a_password_that_cuts_its_authority_short() -> None:
    """The suite's rule read the userinfo as urlsplit does: ``https://u:pa/ss@h/v1`` has netloc ``u:pa``, no '@', and
    was let through. It now reads it as messages do (``userinfo_span``); a Vertex AI path's '@' is still no userinfo."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.schemas import no_secret_in_url

    for url in ("https://u:pa/ss@h/v1", "https://u:pa?ss@h/v1", "https://:12/34@h/v1"):
        with pytest.raises(PydanticCustomError, match=r"user info \(user:password@\)"):
            no_secret_in_url(url)
    for url in (VERTEX, "https://tok/en@h/v1", "https://u:12/34@h/v1", "https://u:12?34@h/v1"):  # host tok, u:12
        assert no_secret_in_url(url) == url


@pytest.mark.parametrize(
    "url", [" https://u:pw@h/v1", "\thttps://u:pw@h/v1", "ht\ttps://u:pw@h/v1", "//u:pw@h/v1", "//u:pa/ss@h/v1"]
)
def test_a_suite_url_may_not_hold_a_password_after_whitespace_or_without_a_scheme(url: str) -> None:
    """urlsplit strips a URL's leading whitespace and its tabs and reads ``//u:pw@h`` as an authority;
    ``userinfo_span`` read a scheme at the URL's first character only: these were let through, though refused
    before it was the suite's rule."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.schemas import no_secret_in_url

    with pytest.raises(PydanticCustomError, match=r"user info \(user:password@\)"):
        no_secret_in_url(url)


def test_a_url_without_a_scheme_has_its_password_hidden() -> None:
    from ragscore_workers.redaction import redact_url

    assert redact_url("//u:pw@h/v1") == "//u:***@h/v1"
    assert redact_url("//tok@h/v1?key=k") == "//***@h/v1?key=***"


@pytest.mark.parametrize(
    ("url", "names"),
    [
        ("https://h/v1?next=/a?token=S3CRET", "token"),  # a '?' in a value
        ("https://h/v1#access_token=S3CRET", "access_token"),  # the fragment's
        ("https://h/v1?a=1&b=x?key=S3CRET", "key"),
        ("https://h/v1?api_ke\ty=S3CRET", "api_key"),  # urlsplit takes a tab out, as it was read before
    ],
)
def test_a_suite_url_may_not_hold_a_credential_that_messages_hide(url: str, names: str) -> None:
    """The suite's rule read the query as urlsplit splits it, messages (``redact_url``) read a name after a '?' in a
    value and the fragment's fields too: these were let through, then hidden in every message. One reader now."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.schemas import no_secret_in_url

    with pytest.raises(PydanticCustomError, match=rf"holds a credential \(query parameter {names}\)"):
        no_secret_in_url(url)


def test_a_refused_url_shows_no_part_of_its_password() -> None:
    """The query was read from urlsplit's first '?', inside a password cut short by one: the refusal named
    ``S3CRETTAIL@h/v1?key`` as a query parameter. The query is read after the userinfo, and a url with one is refused
    for its user info, naming no query parameter."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.schemas import no_secret_in_url

    for url in ("https://u:pa?S3CRETTAIL@h/v1?key=k", " https://u:pa?S3CRETTAIL@h/v1?key=k"):
        with pytest.raises(PydanticCustomError) as raised:
            no_secret_in_url(url)
        assert "S3CRET" not in str(raised.value), raised.value
        assert "(user info (user:password@))" in str(raised.value), raised.value


VERTEX = "https://l-aiplatform.googleapis.com/v1/projects/p/locations/l/publishers/anthropic/models/claude-3-5-sonnet@20240620:rawPredict"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:pa/ss@host/v1", "https://u:***@host/v1"),  # a '/', '?', '#' or ' ' in a password
        ("https://u:pa?ss@host/v1?key=k", "https://u:***@host/v1?key=***"),
        ("https://u:pa#ss@host/v1", "https://u:***@host/v1"),
        ("https://u:pa ss@host/v1", "https://u:***@host/v1"),
        ("https://u:pa/s@s@host/v1", "https://u:***@host/v1"),
        ("https://u:12/34@host/v1", "https://u:12/34@host/v1"),  # host u, port 12: httpx sends no password
        ("redis://:ab/cd+ef=@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("https://user@corp:pw@host/", "https://user@corp:***@host/"),  # the last '@' ends the userinfo
        ("https://ghp_abc123@host/v1", "https://***@host/v1"),  # a token as the whole userinfo
        ("https://tok/en@host/v1", "https://tok/en@host/v1"),  # host tok: no userinfo
        ("https://u:12?34@host/v1", "https://u:12?34@host/v1"),
        ("https://:12/34@host/v1", "https://:***@host/v1"),  # no host: httpx refuses it, the password is hidden
        ("redis://u:12/34@h:6379/0", "redis://u:***@h:6379/0"),  # a Redis path is a db number: '@' ends a password
        ("redis:/u:pw@h:6379/0", "redis:/u:***@h:6379/0"),  # a Redis URL's mistyped 'redis:/'
        (VERTEX, VERTEX),  # an '@' in the path is no userinfo
        (
            "http://127.0.0.1:8000/v1/models/claude@20240620:rawPredict",
            "http://127.0.0.1:8000/v1/models/claude@20240620:rawPredict",
        ),
        ("rediss://h:6380/0?ssl_ca_certs=/etc/a@b/ca.pem", "rediss://h:6380/0?ssl_ca_certs=/etc/a@b/ca.pem"),
        ("redis+socket:///tmp/a@b/r.sock", "redis+socket:///tmp/a@b/r.sock"),
        ("rediss://h:6380?ssl_ca_certs=/etc/a@b/ca.pem", "rediss://h:6380?ssl_ca_certs=/etc/a@b/ca.pem"),  # a value's
        ("redis://u:12?34@h:6379/0", "redis://u:***@h:6379/0"),
        ("redis://u:12?a=34@h", "redis://u:***@h"),  # an '=' and no database: a password still (redis-py: port 12)
        ("redis://u:12?a=34@h:6379?db=1", "redis://u:***@h:6379?db=1"),
    ],
)
def test_a_urls_userinfo_is_hidden_by_one_rule(url: str, shown: str) -> None:
    """The judge endpoints' rule (``shown_url``) showed a password holding '/', '?', '#' or a space, a password after a
    user holding '@', and a token that is the whole userinfo; the Redis URLs' (``redact_url``) read all before the
    URL's last '@' as credentials, and so hid the host of a Vertex AI endpoint. One rule now reads both."""
    from ragscore_workers.redaction import redact_url

    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "https://h/models/m@latest",
        "https://h/v1/models/gemini-1.0-pro@001",
        "https://h/v1/projects/p/models/gemini-1.0-pro@001/chat/completions",
        "https://api.example.com/users/alice@example.com/profile",
        "https://h?e=a@b.com",
        "https://bücher.de/users/a@b.com",
        "https://h%41.com/m@latest",
        "https://h:8080/m@latest",
        "http://[::1]:8000/m@latest",
        "https://u:12/34@h/v1/models/claude@20240620:rawPredict",
    ],
)
def test_an_at_sign_after_a_host_is_no_userinfo(url: str) -> None:
    """An authority that is a host and a port as httpx reads it (``h``, ``h:8080``, ``[::1]:8000``, ``bücher.de``,
    ``h%41.com``) has no userinfo: an '@' in the path or query after it (``m@latest``, an email) was read as the end
    of a password cut short, the host hidden (``https://h:***@latest``) and the suite's url refused. httpx sends
    these to the host shown, with no password."""
    from ragscore_workers.redaction import redact_url
    from ragscore_workers.schemas import no_secret_in_url

    assert redact_url(url) == url
    assert no_secret_in_url(url) == url


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("connect https://a@b:pw@h/v1 failed", "connect https://a@b:***@h/v1 failed"),  # a user holding '@'
        ("connect https://u:pa/ss@h/v1 failed", "connect https://u:***@h/v1 failed"),  # '/', '?', '#' in a password
        ("connect https://u:pa?ss@h/v1 failed", "connect https://u:***@h/v1 failed"),
        ("connect https://u:pa#ss@h/v1 failed", "connect https://u:***@h/v1 failed"),
        ("clone https://ghp_T0KEN@github.com/o/r failed", "clone https://***@github.com/o/r failed"),  # a token
        ("connect redis:\t//u:pw@h:6379/0", "connect redis:\t//u:***@h:6379/0"),  # urlsplit strips the tab
        ("connect redis:/\n/u:pw@h:6379/0", "connect redis:/\n/u:***@h:6379/0"),
        ("bad url ://u:pw@h/v1", "bad url ://u:***@h/v1"),  # no scheme
        ("connect redis://u:12?a=34@h:6379/0 failed", "connect redis://u:***@h:6379/0 failed"),
        ("connect redis://u:12?a=34@h failed", "connect redis://u:***@h failed"),
        ("connect https://u:@h/v1", "connect https://u:***@h/v1"),  # an empty password: as redact_url shows it
        ("see https://h/models/m@latest and a@b.com", "see https://h/models/m@latest and a@b.com"),
        ("see https://h:8080/m@latest", "see https://h:8080/m@latest"),
        ("go https://u:12/34@h/v1", "go https://u:12/34@h/v1"),  # host u, port 12: no password (as redact_url)
    ],
)
def test_a_url_password_in_free_text_is_hidden_as_redact_url_hides_it(text: str, redacted: str) -> None:
    """The free-text rule (``URL_PASSWORD``, over whole errors) was a regex of its own: it showed a password after a
    user holding '@', one holding '/', '?' or '#', a token that is the whole userinfo, a URL with a tab in its
    ``://`` or no scheme, and a Redis password holding ``?a=``. Each quoted URL is now read by ``userinfo_span``, as
    ``redact_url`` reads a URL: one rule."""
    from ragscore_workers.redaction import redact_url

    assert redact_url_passwords(text) == redacted
    assert redact_url(text) == redacted


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("https://h/p?x=https://u2:pw2@h2/", r"user info \(user:password@\) of a url quoted in it"),
        ("https://h/p/https://TOK@h2/x", r"user info \(user:password@\) of a url quoted in it"),
        ("://u:pw@h/v1", r"user info \(user:password@\)"),
        ("redis://u:12?a=34@h:6379/0", r"user info \(user:password@\)"),
    ],
)
def test_a_suite_url_may_not_hold_a_password_that_messages_hide(url: str, where: str) -> None:
    """A url quoting another with a password (in its query, its path), a url with no scheme before ``://``, and a
    Redis password holding ``?a=`` were let through, then hidden in every message. The check refuses what messages
    hide, and says where."""
    from pydantic_core import PydanticCustomError

    from ragscore_workers.schemas import no_secret_in_url

    with pytest.raises(PydanticCustomError, match=rf"holds a credential \({where}\)") as raised:
        no_secret_in_url(url)
    assert "pw" not in str(raised.value) and "TOK" not in str(raised.value), raised.value


@pytest.mark.timeout(60)
def test_urls_in_free_text_are_read_in_linear_time() -> None:
    """Each quoted URL is read up to the next one's start or whitespace, so that no character is read for more than
    one: 400 kB of URL starts, of passwords cut short, of scheme characters, take well under a second. No time is
    measured: the 60 s timeout is a hang guard, far above a linear read and far below a quadratic one."""
    from ragscore_workers.redaction import redact_url

    texts = ("x://u:p/" * 50_000, "a." * 200_000, "://" * 130_000, "a://" * 100_000, "x://" + "a:" * 200_000)
    for text in (*texts, "x://u:p w " * 40_000, "x://u:p " + "a " * 200_000):
        assert redact_url_passwords(text) == text
        assert redact_url(text) == text
    assert redact_url_passwords("x://u:p@" * 50_000) == "x://u:***@" * 50_000


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://h:6379?password=ab@cd", "redis://h:***"),  # redis-py: host h, password 'ab@cd'
        ("rediss://h:6380?ssl_password=p@ss&db=1", "rediss://h:***&db=1"),
        ("redis://h?password=ab@cd", "redis://***"),
        ("redis://h:6379?password=ab@cd:6379/0", "redis://h:***"),
        ("redis://h:6379/0?password=ab@cd", "redis://h:6379/0?password=***"),  # a path: one reading only
    ],
)
def test_a_query_value_holding_an_at_sign_is_hidden_as_a_query_reads_it(url: str, shown: str) -> None:
    """A Redis URL's query right after its host, whose value holds an ``@`` followed by a host, reads as a password
    holding ``?`` too (``redis://u:12?a=34@h``): hiding only that password showed what redis-py reads as the rest of
    the query's ``password`` (``redis://h:***@cd``). What either reading hides is hidden."""
    from ragscore_workers.redaction import redact_url

    assert redact_url(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # redis-py reads host u and a query whose token is 'SECRET:12@h:6379/0': hidden as that too
        ("redis://u?token=SECRET:12@h:6379/0", "redis://***"),
        ("redis://u#token=SECRET:12@h:6379/0", "redis://***"),
        ("redis://u/SECRET:12@h:6379/0", "redis://***@h:6379/0"),
        ("redis://u?a=SECRET:12?b=3@h:6379/0", "redis://***@h:6379/0"),
    ],
)
def test_a_redis_user_cut_short_by_its_own_query_is_hidden_whole(url: str, shown: str) -> None:
    """A Redis URL's password cut short (its ``?``, ``/`` or ``#`` ending the authority) may hold a ``:`` of its own:
    since a ``?a=`` before a database number reads as a password, ``u?token=SECRET`` before that ``:`` was shown
    as the user (``redis://u?token=SECRET:***@h``), where 9f2862b hid it as the query's ``token``. A user holding
    a ``/``, ``?`` or ``#`` is no user: the whole userinfo is hidden, in a URL and in free text."""
    from ragscore_workers.redaction import redact_url

    assert redact_url(url) == shown
    assert redact_url_passwords(f"connect {url} failed") == "connect redis://***@h:6379/0 failed"


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("Invalid URL 'https://u:p w@h/v1': no", "Invalid URL 'https://u:***@h/v1': no"),
        ("connect redis://:my pass word@h:6379/0 failed", "connect redis://:***@h:6379/0 failed"),
        ("connect https://u:p\tw@h/v1 failed", "connect https://u:***@h/v1 failed"),
        ("connect redis://u:12 34@h/0 failed", "connect redis://u:***@h/0 failed"),  # digits, then one word
        ("connect redis://u:12 34 56@h failed", "connect redis://u:***@h failed"),  # digits, then two words
        ("connect redis://u:12 ab cd@h:6379/0 failed", "connect redis://u:***@h:6379/0 failed"),
        ("connect redis://u:1a. b@h failed", "connect redis://u:***@h failed"),  # digits then letters: no port
        ("connect redis://u: pw word@h failed", "connect redis://u:***@h failed"),  # an empty port: no port
        ("connect redis://u:12 34@db.corp.com:6379/0", "connect redis://u:***@db.corp.com:6379/0"),  # a port: a URL
        ("see https://h:8080 and ask a@b", "see https://h:***@b"),  # no e-mail's domain: hidden (when in doubt)
        ("connect redis://u:12 34@h; mail a@b.com", "connect redis://u:***@b.com"),  # '34@h' is no e-mail address
        ("see https://h:8080 or mail a@b.com, b@c", "see https://h:***@c"),
        ("see https://h:8080 or mail a@b.com, b@c.org", "see https://h:8080 or mail a@b.com, b@c.org"),
        ("connect https://tok en@h/v1 failed", "connect https://***@h/v1 failed"),  # a host, then one word
        ("connect https://u ser:pw@h/v1 failed", "connect https://u ser:***@h/v1 failed"),  # a user holding a space
        ("connect https://u ser:pw@corp.com", "connect https://u ser:***@corp.com"),  # 'ser:pw' is no e-mail's
        ("connect redis://u:12 ab:cd@a.bc", "connect redis://u:***@a.bc"),
        ("connect redis://u:12 ab-!@a.bc", "connect redis://u:***@a.bc"),  # no letter or digit before the '@'
        ("connect redis://u: ,{$@a.bc", "connect redis://u:***@a.bc"),
        ("connect redis://u:123456 x@a.bc", "connect redis://u:***@a.bc"),  # six digits: no port
        ("connect redis://u:123456. x@h", "connect redis://u:***@h"),
        ("connect redis://u:\u0661\u0662 x@a.bc", "connect redis://u:***@a.bc"),  # no ASCII digits: no port
        ("connect redis://u:12\u3000a@b.cc@d.ee", "connect redis://u:***@d.ee"),  # 'b.cc@' is no e-mail's end
        ("see https://h.com admin@corp.com", "see https://h.com admin@corp.com"),  # a host, then an e-mail address
        ("see https://h and ask a@b", "see https://h and ask a@b"),  # a host, then words: whitespace ends the URL
        ("see https://h @bob", "see https://h @bob"),
        ("see https://h and mail a@b.com", "see https://h and mail a@b.com"),
        ("see https://h:8080 and mail a@b.com", "see https://h:8080 and mail a@b.com"),
        ("see https://h:port/v1 or mail a@b.com", "see https://h:port/v1 or mail a@b.com"),  # a '/' before the '@'
        ("see https://h:8080 admin@corp.com", "see https://h:***@corp.com"),  # one word: read as a password's end
        ("connect redis://u:2024 Summer@redis.example.com", "connect redis://u:***@redis.example.com"),
        ("connect redis://u:12 34@db.corp.com", "connect redis://u:***@db.corp.com"),
        ("connect redis://u: x@a.bc", "connect redis://u:***@a.bc"),
        ("see https://h:8080 or mail (admin@corp.com).", "see https://h:8080 or mail (admin@corp.com)."),
    ],
)
def test_a_url_password_holding_whitespace_in_free_text_is_hidden(text: str, redacted: str) -> None:
    """Whitespace ended a URL quoted in free text, so a password holding a space or a tab (``https://u:p w@h``, a URL
    urlsplit and redis-py read with password ``p w``) was shown whole. Where the authority before the whitespace is
    no host and port (``u:p``, ``u:1a.``), or a port's digits then any words up to the ``@`` (``u:12 34@h``,
    ``u:12 34 56@h``: shown while only one word was read), and one past it holds an ``@`` before any ``/``, ``?`` or
    ``#``, the password runs to that ``@``, as a token's or a user's does after a host alone and one word
    (``https://tok en@h``, ``https://u ser:pw@h``: shown while a host ended the URL); a URL whose host ends at the
    whitespace (``https://h and a@b``) or whose port is followed by words and an e-mail address (``https://h:8080
    and mail a@b.com``) is left as it is. One word up to the ``@`` is a password's end even where it and the host read
    as an e-mail address (``redis://u:2024 Summer@redis.example.com``), so ``https://h:8080 admin@corp.com`` is
    hidden: a password shown is worse than a sentence hidden."""
    assert redact_url_passwords(text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "broker redis://h:6379\ncelery@w1 ready",  # a log line and the next one
        "broker redis://h:6379\r\ncelery@w1 ready",
        "broker redis://h:6379\u2028celery@w1 ready",
        "broker redis://h:6379 \n celery@w1 ready",
        "broker redis://u:12 34\n56@h ready",
    ],
)
def test_a_port_then_one_word_on_the_next_line_is_no_password(text: str) -> None:
    """The rule that reads a port's digits then one word up to an ``@`` as a password holding whitespace
    (``redis://u:12 34@h/0``) counted a line break as a space: a log line ending in a URL and the next one starting
    with a worker's name (``celery@w1``) were hidden as ``redis://h:***@w1``. A password does not span lines of a
    log: a line break between the digits and the word ends the URL."""
    assert redact_url_passwords(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "Could not connect to https://h:8080. Contact admin@corp.com",
        "Error connecting to redis://localhost:6379: Connection refused. Contact ops@corp.com",
        "Client error '404 Not Found' for url 'https://h:8080'\nFor more information, mail a@b.com",
        "Failed (https://api.example.com:443) see support@example.com",
        "APIConnectionError: Connection error. base_url=https://h:8000; user=bob@corp",
        "connect http://[::1]:8000, retry; mail a@b.com",
        "see https://h:8080\u2026 by a@b.com",
        "url=https://h:8080&x=1 then mail a@b.com",
        "see [docs](https://h:8080) by a@b.com",
        "http://localhost:{port} is down, ask a@b",  # a template's placeholder for the port
        "http://localhost:{} is down, ask a@b",  # str.format's positional one
    ],
)
def test_a_host_and_port_end_a_url_in_free_text_whatever_follows_the_port(text: str) -> None:
    """An error that quotes a URL without a path (``https://h:8080.``, ``'https://h:8080'``,
    ``redis://localhost:6379:``) and an ``@`` later on (an email) is ordinary text: the punctuation after the port
    made the authority before the whitespace read as no host and port, so everything from the port to the email's
    ``@`` was hidden as a password holding whitespace (``https://h:***@corp.com``). A host and a port, whatever text
    follows its digits, ends the URL, as a template's placeholder for the port does."""
    assert redact_url_passwords(text) == text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("connect https://u:p. w@h/v1 failed", "connect https://u:***@h/v1 failed"),
        ("connect redis://:pa) ss@h:6379/0 failed", "connect redis://:***@h:6379/0 failed"),
        ("connect redis://u:${x} y@h:6379/0 failed", "connect redis://u:***@h:6379/0 failed"),
        ("connect redis://u:${}\u3000pw@h failed", "connect redis://u:***@h failed"),
        ("http://localhost:${PORT} is down, ask a@b", "http://localhost:***@b"),
    ],
)
def test_a_password_holding_punctuation_then_whitespace_is_still_hidden(text: str, redacted: str) -> None:
    """What is before the whitespace reads as a host and a port only where a digit follows the ':' (``h:8080.``):
    ``u:p.`` and ``:pa)`` are passwords holding whitespace, hidden to their ``@``, as is one starting with a shell's
    ``${x}`` (read as a port's placeholder it was shown: ``redis://u:${x} y@h``); a shell's
    ``${PORT}`` after a host, then text up to an ``@``, is hidden with it."""
    assert redact_url_passwords(text) == redacted


@pytest.mark.parametrize(
    "text",
    [
        "http://localhost:8000 returned 404 for claude-3@20240620",  # Vertex AI's model and version
        "https://h:443 model gemini@001, retry",
        "redis://h:6379 ready, celery@w1 up",  # a clause's end, then Celery's worker name
        "redis://h:6379 ready; celery@w1 up",
    ],
)
def test_a_port_then_a_sentence_naming_a_version_or_a_worker_is_shown(text: str) -> None:
    """A port's digits then two words or more up to an ``@`` read as a password holding whitespace unless each ``@``
    was an e-mail address's, so an error naming a model's version (``claude-3@20240620``) or, after a clause's end, a
    worker (``ready, celery@w1``) was hidden from the port on (``http://localhost:***@20240620``). They are shown;
    no password the rule before this one hid is (it showed any two words or more after a port)."""
    assert redact_url_passwords(text) == text


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("http://localhost:8000 claude-3@20240620", "http://localhost:***@20240620"),  # one word: a password's end
        ("redis://u:12 34@h ready, celery@w1", "redis://u:***@w1"),  # 34@h is no e-mail address, version nor clause
        ("redis://h:6379 ready, celery@w1:6379 up", "redis://h:***@w1:6379 up"),  # a port: a Redis host's
        ("redis://u:12 34 56@h", "redis://u:***@h"),
    ],
)
def test_a_port_then_words_up_to_a_host_stays_hidden(text: str, redacted: str) -> None:
    """What reads as a version or a worker's name after an ``@`` is read so only after two words or more (one word
    after a port is a password's end, as it always was), and a worker's name only after a clause's end and without a
    port (``celery@w1:6379`` is a Redis host)."""
    assert redact_url_passwords(text) == redacted


@pytest.mark.parametrize(("url", "shown"), [("redis://:pw@host:6379/0", "redis://:**@host:6379/0"),
                                            ("redis://host:6379/0", "redis://host:6379/0")])  # fmt: skip
def test_the_shown_broker_url_takes_kombus_arguments_by_position_too(url: str, shown: str) -> None:
    """The broker connection whose URL a worker's banner and Flower show (``ragscore_workers.app._ShownConnection``)
    took kombu's third argument, ``getfields``, by name only: given by position, as kombu's ``as_uri`` takes it, it
    raised TypeError."""
    fields = itemgetter("port", "userid", "password", "virtual_host", "transport")
    assert _ShownConnection(url).as_uri(False, "**", fields) == _ShownConnection(url).as_uri() == shown
