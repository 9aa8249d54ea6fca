"""Which names carry a credential (headers, environment variables, a URL's query fields: what a suite may not write,
``schemas``) and what messages and logs show of a URL (:func:`redact_url`, of the Redis URLs and the judge
endpoints alike): its password and the values of its fields named like a credential (:func:`secret_query_param`'s
names, read so that a long name costs no more than its length) as ``***``."""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

__all__ = [
    "REDIS_SCHEMES",
    "SECRET_QUERY_NAMES",
    "credential_name",
    "hide_spans",
    "query_secret_names",
    "query_secret_spans",
    "redact_url",
    "secret_query_param",
    "url_password_spans",
    "userinfo_span",
]

#: Header names that carry a credential: ``Authorization``, ``Proxy-Authorization``, ``Cookie``, ``X-Api-Key``,
#: ``X-RapidAPI-Key``, ``X-Functions-Key``, ``X-Auth-Token``, ``X-Auth-Key``, ``Ocp-Apim-Subscription-Key``,
#: ``X-Amz-Signature``, ``pwd`` (one of these as a whole part of the name), and ``Key`` or ``X-Auth`` as the whole
#: name or its end; a key that is no credential (``X-Idempotency-Key``, ``X-Cache-Key``) is not one.
_SECRET_HEADER = re.compile(
    r"(?:^|[-_])(?:authorization|cookie|(?:rapid)?api[-_]?key|access[-_]?key|secret[-_]?key|private[-_]?key"
    r"|subscription[-_]key|functions[-_]key|auth[-_]key|token|secret|password|passwd|pwd|signature|credentials?)"
    r"(?:$|[-_])|^key$|(?:^|[-_])auth$",
    re.I,
)

#: Query parameters that carry a credential besides :func:`credential_name`'s: Google's ``key``, Azure Functions'
#: ``code``, a signed URL's ``sig`` / ``signature``.
SECRET_QUERY_NAMES = frozenset({"key", "code", "sig", "signature"})


def credential_name(name: str) -> bool:
    """Whether a header, an environment variable, a request body's field or a URL's query parameter named so carries
    a credential (``X-Api-Key``, ``HF_TOKEN``, ``auth.token``). The name is read in words split at each character
    that is no letter, digit, ``-`` or ``_`` (``api key`` from ``?api+key=``, ``data[api_key]``, ``a?token``): a
    credential's name as them joined by ``-``."""
    return bool(_SECRET_HEADER.search("-".join(_NOT_A_NAME.split(name))))


def secret_query_param(name: str) -> bool:
    """Whether a URL's query parameter named so (decoded) carries a credential (``api_key``, ``token``, ``key``,
    ``sig``): a credential's name (:func:`credential_name`); or its text after its last ``?`` or ``;`` (``a?key``),
    stripped, one of :data:`SECRET_QUERY_NAMES` (not a longer name's last word: ``filter[key]``, ``lang.code``,
    ``country code`` hold none)."""
    bare = _NAME_START.split(name)[-1].strip().lower()
    return credential_name(name) or bare in SECRET_QUERY_NAMES


#: Where text quotes a URL's authority: a ``://`` after the scheme's characters (group 1: none, or ones no scheme
#: starts with, as ``://u:pw@h`` and ``9://`` are still read), tabs and newlines in it (urlsplit strips them:
#: ``redis:\t//u:pw@h``). A match starts where no scheme character is before it (``\b`` let every letter after a dot
#: or a dash of a long token start one: quadratic, 2.5 s for 100 kB of ``a.a.a.``).
_URL_START = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z0-9+.-]*):[\t\r\n]*/[\t\r\n]*/")
#: A URL's scheme and the slashes before its authority (one: a Redis URL's mistyped ``redis:/HOST``), or the two
#: slashes of a URL without a scheme (``//u:pw@h/v1``, ``://u:pw@h/v1``: urlsplit reads an authority there), tabs and
#: newlines among them; after any whitespace or control characters (urlsplit strips them), quotes (docker's
#: ``--env-file`` keeps them) or a ``<``.
_AUTHORITY_START = re.compile(
    r"[\x00-\x20\"'<]*(?:([A-Za-z][A-Za-z0-9+.-]*):[\t\r\n]*/(?:[\t\r\n]*/)?|:?[\t\r\n]*/[\t\r\n]*/)"
)
#: What a Redis URL may have after its host: a database number or none, up to its end, query or fragment
#: (:func:`userinfo_span`).
_DB_PATH = re.compile(r"(?:/\d+)?(?:[?#]|$)")
#: Whitespace, which ends a URL quoted in text but in its password (:func:`url_password_spans`).
_SPACE = re.compile(r"\s")
#: A line break (those ``str.splitlines`` splits at), which a password a log shows does not hold
#: (:func:`_spaced_userinfo`).
_LINE_BREAK = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")
#: A host as httpx reads it: a bracketed IP literal (``[::1]``) or a name (``h``, ``bücher.de``, ``h%41.com``).
_HOST = r"(?:\[[^\]/?#@]*\]|[^\s:/?#@\[\]]+)"
#: An authority that is a host and a port as httpx reads it (``h:6379``, ``[::1]:8000``, ``bücher.de``,
#: ``h%41.com``), no ``user:password`` cut short (``u:pa``: "Invalid port"; ``:12``: no host).
_HOST_PORT = re.compile(_HOST + r"(?::\d*)?")
#: A port's digits: five ASCII ones at most (65535 is the highest port); more, or others (``u:123456``, ``u:\u0661``),
#: are a password's (:func:`_spaced_userinfo`).
_PORT = r"[0-9]{1,5}"
#: A host and a port's digits followed by punctuation up to the whitespace, or a template's placeholder for the port
#: (``{port}``, ``{}``): text quoting a URL without a path goes on past its port (``https://h:8080.``,
#: ``'https://h:8080'``, ``redis://localhost:6379:``, ``https://h:8080&x=1``, ``http://localhost:{port} is down``),
#: where a password holding whitespace would not have those before it (:func:`_spaced_userinfo`). Not a shell's
#: ``${PORT}``: a password starting with ``$`` then whitespace was always hidden (``redis://u:${x} y@h``).
_PORT_THEN_TEXT = re.compile(_HOST + r":(?:" + _PORT + r"[^\w\s]|\{\w*\}$)")
#: A host and a port's digits, or none (``h:8080``, ``u:12``, ``u:``): before whitespace, a URL's end or a password's
#: start (``u:12 34@h``, ``u: pw@h``, :func:`_spaced_userinfo`).
_HOST_AND_DIGITS = re.compile(_HOST + r":(?:" + _PORT + r")?")
#: A host alone (``h``, ``tok``): before whitespace, a URL's end or a token's or a user's start (``https://tok en@h``,
#: :func:`_spaced_userinfo`).
_HOST_ALONE = re.compile(_HOST)
#: An e-mail address's domain after its ``@``: dotted names ending in a top-level one of letters, then punctuation
#: only (``corp.com``, ``corp.com).``) up to whitespace or the text's end; not a port, path or query (``corp.com:6379``,
#: ``corp.com/0``).
_EMAIL_DOMAIN = re.compile(r"(?:[\w-]+\.)+[^\W\d_]{2,}[^\w\s/?#@]*(?!\S)")
#: A model's or a package's version after its ``@``: digits, then punctuation only up to whitespace or the text's end
#: (Vertex AI's ``claude-3@20240620``, ``gemini@001``), no host a service has (:func:`_emails_only`).
_VERSION = re.compile(r"\d+[^\w\s/?#@:]*(?!\S)")
#: A worker's or a node's name after its ``@`` (Celery's ``celery@w1``): a host without port or path, then
#: punctuation only up to whitespace or the text's end (:func:`_emails_only`, after a clause's end).
_NODE_NAME = re.compile(r"[\w-]+(?:\.[\w-]+)*[^\w\s/?#@:]*(?!\S)")
#: A clause's end: a word ending in ``,`` or ``;`` (``ready,``), as a sentence has (:func:`_emails_only`).
_CLAUSE_END = re.compile(r"[,;]")
#: A word of text: what whitespace bounds (:func:`_emails_only`).
_WORD = re.compile(r"\S+")
#: A letter, a digit or ``_``: what an e-mail address's local part ends in (:func:`_emails_only`).
_WORD_END = re.compile(r"\w")
#: URL schemes a broker, result backend or run store may have (Redis over TCP, TLS, or a unix socket): a Redis
#: URL's path is only a database number (:func:`userinfo_span`).
REDIS_SCHEMES = ("redis", "rediss", "redis+socket", "socket", "unix")
#: What ends a field of a URL's query or fragment, and its value.
_FIELD_END = re.compile(r"[&#]")
#: What splits a credential's name into words (:func:`credential_name`).
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]+")
#: Where a name starts in text that is no field's start: after a ``?`` or a ``;`` (``?next=/a?token=``, ``?a=1;key=``).
_NAME_START = re.compile(r"[?;]")


def query_secret_spans(url: str) -> list[tuple[int, int]]:
    """Where in ``url`` the value of each field named like a credential is (``?api_key=``, ``&token=``,
    ``?password=``, ``&ssl_password=``): ``(start, end)`` offsets, for :func:`redact_url`; read as
    :func:`_secret_fields` reads them."""
    return [(start, end) for _, start, end in _secret_fields(url)]


def query_secret_names(url: str) -> list[str]:
    """The names (decoded, sorted, each once) of ``url``'s query's and fragment's fields named like a credential, as
    :func:`redact_url` reads them (from the first ``?`` or ``#`` after the userinfo, :func:`_secret_fields`): what a
    suite's url may not hold (``schemas.no_secret_in_url``), and what messages would hide."""
    return sorted({name for name, _, _ in _secret_fields(url[_query_start(url) :])})


def _query_start(url: str) -> int:
    """The offset of ``url``'s first ``?`` or ``#`` after its userinfo (:func:`userinfo_span`), or its length."""
    userinfo = userinfo_span(url)
    return _first_of(url, "?#", userinfo[1] if userinfo else 0)


def _secret_fields(url: str) -> list[tuple[str, int, int]]:
    """The fields of ``url`` named like a credential: ``(name, start, end)``, the name decoded, ``start`` and ``end``
    the offsets of the value.

    A field's value runs from its ``=`` to the next ``&`` or ``#`` (past a ``;``: a value holding one is hidden
    whole). Its name is the text before the ``=`` (back to the field's start or the ``=`` before it),
    percent-decoded (``+`` as a space): whole right after a ``&`` or ``#`` (the fragment's too: ``#access_token=``),
    else from its first ``?`` or ``;`` (a ``?`` in the path, or in a value: ``?next=/a?token=x``, ``?a=1;key=x``),
    and no name without one. The value is hidden when :func:`secret_query_param` names it (``token``, ``a?token``,
    ``api key``). Each name is read once: linear in the URL's length."""
    fields, begin = [], 0
    for end in [m.start() for m in _FIELD_END.finditer(url)] + [len(url)]:
        at = begin
        while (eq := url.find("=", at, end)) >= 0:
            name = url[at:eq]
            if at > begin or begin == 0:  # the text starts in the URL's path or in a value: a name after a ? or ;
                start = _NAME_START.search(name)
                name = name[start.end() :] if start else None
            if name is not None and secret_query_param(decoded := unquote_plus(name)):
                fields.append((decoded, eq + 1, end))
                break
            at = eq + 1
        begin = end + 1
    return fields


def hide_spans(text: str, spans: list[tuple[int, int]], fill: str | None = None) -> str:
    """``text`` with each of ``spans`` (``(start, end)`` offsets; overlapping or touching ones as one) as ``***``;
    with a ``fill`` character, each hidden character as it (the text as long as it was: its offsets hold)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:  # overlaps or touches the span before: one
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    shown, at = [], 0
    for start, end in merged:
        shown += [text[at:start], "***" if fill is None else fill * (end - start)]
        at = end
    return "".join([*shown, text[at:]])


def userinfo_span(url: str) -> tuple[int, int] | None:
    """Where ``url``'s userinfo (``user:password``, or a token alone) is: ``(start, end)``, ``end`` at its ``@``;
    None without one.

    The authority runs from the scheme's ``//`` (or a URL's leading ``//`` without a scheme) to the first ``/``,
    ``?`` or ``#``; an ``@`` in it ends the userinfo (its last one, as urllib and httpx read it:
    ``https://user@corp:pw@host/``). Without one:

    - an authority that is a host and a port as httpx reads it (``h``, ``h:8080``, ``[::1]:8000``) has no userinfo:
      the ``@`` of a path or query after it (``models/m@latest``, Vertex AI's ``claude@20240620:rawPredict``, an
      email) is none, and ``https://u:12/34@h`` goes to host ``u``, port 12, with no password;
    - but in a Redis URL (whose path is only a database number) an ``@`` in the path, or in a query right after the
      authority before any ``=`` or followed by a database number or none (``redis://u:12/34@h:6379/0``,
      ``redis://u:12?34@h``, ``redis://u:12?a=34@h:6379/0``, ``redis://u:12?a=34@h``; not the value's of
      ``rediss://h:6380?ssl_ca_certs=/a@b/ca.pem``, a path after it), followed by a host and a port, ends a password
      cut short (a socket path's empty authority has none: ``unix:///tmp/a@b.sock``);
    - an authority that is none (``u:pa`` of ``https://u:pa/ss@h``, whose port httpx refuses; ``:12``: no host) is a
      password cut short, up to the URL's last ``@`` (hiding more of a URL that cannot be sent anyway)."""
    start = _AUTHORITY_START.match(url)
    if start is None:
        return None
    at = start.end()
    host_end = _first_of(url, "/?#", at)
    authority = url[at:host_end]
    if "@" in authority:
        return at, at + authority.rfind("@")
    if not authority:
        return None
    if not _HOST_PORT.fullmatch(authority):
        end = url.rfind("@", host_end)
    elif (start.group(1) or "").lower() not in REDIS_SCHEMES:
        return None
    else:
        no_path = url[host_end : host_end + 1] in ("?", "#")  # u:12?34@h: the password's "?" ends the authority
        end = url.rfind("@", host_end, None if no_path else _first_of(url, "?#", host_end))
        if end >= 0 and not _HOST_PORT.fullmatch(url[end + 1 : _first_of(url, "/?#", end)]):
            end = -1
        elif no_path and "=" in url[host_end:end] and not _DB_PATH.match(url, _first_of(url, "/?#", end)):
            end = -1  # h:6380?ssl_ca_certs=/a@b/ca.pem: a query's value, no password; u:12?a=34@h, @h:6379/0: one
    return (at, end) if end >= 0 else None


def redact_url(url: str) -> str:
    """``url`` as messages and logs show it (a Redis URL, a judge endpoint): its password (its userinfo, where it has
    no ``:``, as a token is passed) as :func:`userinfo_span` reads it, the values of its query's and fragment's fields
    named like a credential (:func:`query_secret_spans`, read from the first ``?`` or ``#`` after the userinfo, so
    that no name is read in the path, and from the URL's first, where urlsplit and redis-py read a password's ``?``:
    ``redis://h:6379?password=ab@cd``), and the password of a URL quoted in it (:func:`url_password_spans`), as
    ``***``.

    The quoted URLs' passwords are read in the URL as given (a password holding ``&token=x`` is hidden whole, not in
    part as a query's value), and in the URL with the query's values starred: a password that a hidden value's
    ``/``, ``?`` or ``#`` cut short in the first read (``x://u:pw&token=a/b&c@h2``: ``a/b`` starred,
    ``pw&token=***&c`` is a password up to its ``@``)."""
    hidden = []
    if userinfo := userinfo_span(url):
        hidden.append(_password_span(url, userinfo))
    # a userinfo holding a '?' or '#' reads as a query's start too (redis://h:6379?password=ab@cd: redis-py's
    # password 'ab@cd'): the values named like a credential of either reading are hidden
    for query in {_query_start(url), _first_of(url, "?#", 0)}:
        hidden += [(query + start, query + end) for start, end in query_secret_spans(url[query:])]
    starred = hide_spans(url, hidden, fill="*")  # as long as it was: the offsets hold
    hidden += [span for text in (url, starred) for span in url_password_spans(text)]
    return hide_spans(url, hidden)


def url_password_spans(text: str) -> list[tuple[int, int]]:
    """Where the password of each URL quoted in ``text`` (an error, a log line, a URL's query) is: ``(start, end)``
    offsets, as :func:`userinfo_span` reads each URL (:func:`_password_span`: ``user@corp:PASSWORD@``,
    ``:PASSWORD@`` of a Redis URL, ``pa/ss`` of ``https://u:pa/ss@h``, a ``TOKEN@``, an empty password too).

    A quoted URL starts at each :data:`_URL_START` and runs to the next URL's start (a URL in another's query:
    ``?next=https://u2:pw2@h2/``), so that each character is read for one URL only: linear in the text's length; and
    to the next whitespace, but for a password holding it (:func:`_spaced_userinfo`: ``https://u:p w@h/``). A
    password holding a ``://`` is cut there (``https://u:pw://x@h`` hides ``x``); :func:`redact_url` reads a whole
    URL's own password past it."""
    spans, starts = [], list(_URL_START.finditer(text))
    for i, found in enumerate(starts):
        bound = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        space = _SPACE.search(text, found.end(), bound)
        begin = found.start() if found.group(1)[:1].isalpha() else found.end(1)  # ://u:pw@h, 9://u:pw@h: no scheme
        url = text[begin:bound]
        cut = space.start() - begin if space else len(url)
        if userinfo := userinfo_span(url[:cut]) or (_spaced_userinfo(url, cut) if space else None):
            start, end = _password_span(url, userinfo)
            spans.append((begin + start, begin + end))
    return spans


def _spaced_userinfo(url: str, cut: int) -> tuple[int, int] | None:
    """The userinfo of ``url`` (:func:`userinfo_span`) holding the whitespace at ``cut``, where the one past it holds
    an ``@`` before any ``/``, ``?`` or ``#`` and what is before the whitespace is:

    - no host, nor a host and a port (``u:p`` of ``https://u:p w@h/``, ``u:1a.`` of ``redis://u:1a. b@h``,
      ``u:123456``: a port has five digits at most, :data:`_PORT`): a password holding whitespace;
    - a host and a port's digits or none (``u:12 34 56@h``, ``u: pw@h``), or a host alone followed by one word up to
      the ``@`` (``https://tok en@h``, ``https://u ser:pw@h``): a password (a token, a user) starting with them,
      unless a line break is before the ``@`` (a log line ending in ``redis://h:6379``, the next one starting with
      ``celery@w1``) or two words or more come before it and each ``@`` up to it is an e-mail address's, a
      version's or, after a clause's end, a worker's (:func:`_emails_only`: ``https://h:8080 and mail a@b.com``,
      ``returned 404 for claude-3@20240620``, ``ready, celery@w1 up``; not ``redis://u:12 34@h, mail a@b.com``, nor one
      word after a port, ``redis://u:2024 Summer@redis.example.com``, which hides ``https://h:8080 admin@corp.com``
      too), or after a host alone its one word is an e-mail address's (``https://h.com admin@corp.com``).

    None where the whitespace ends a URL: after a host followed by more words or none (``https://h and a@b``,
    ``https://h @bob``), after a port followed by punctuation or a template's placeholder (:data:`_PORT_THEN_TEXT`:
    ``https://h:8080. Mail a@b``), or with a ``/`` before the ``@`` (``https://h:port/v1 or a@b``)."""
    userinfo = userinfo_span(url)
    if userinfo is None or not userinfo[0] < cut < userinfo[1] or userinfo[1] > _first_of(url, "/?#", userinfo[0]):
        return None
    start, end = userinfo
    if _PORT_THEN_TEXT.match(url, start, cut):
        return None
    words = len(url[cut:end].split())
    host_alone = not _HOST_AND_DIGITS.fullmatch(url, start, cut)
    if host_alone:
        if not _HOST_ALONE.fullmatch(url, start, cut):
            return userinfo
        if words != 1:  # a host, then words or an '@' (https://h and ask a@b, https://h @bob)
            return None
    if _LINE_BREAK.search(url, cut, end):
        return None
    # after a port, one word up to the '@' is a password's end even where it reads as an e-mail address's local part
    # (redis://u:2024 Summer@redis.example.com): a port then an address (https://h:8080 admin@corp.com) is hidden
    return None if (host_alone or words > 1) and _emails_only(url, cut, end) else userinfo


def _emails_only(text: str, start: int, end: int) -> bool:
    """Whether each word of ``text`` from ``start`` to ``end`` (an ``@``) that holds an ``@`` is an e-mail address or
    a name and a version: a local part before its first ``@`` ending in a letter, a digit or ``_``, with no ``:``
    (``admin@``, ``(admin@``; not ``ab:cd@``, a ``user:password``'s end, ``ab!@``, nor a bare ``@``), and after it a
    domain (:data:`_EMAIL_DOMAIN`: ``admin@corp.com``, not ``34@h`` nor ``34@db.corp.com:6379``), a version
    (:data:`_VERSION`: ``claude-3@20240620``), or, after a word ending a clause (``ready,``), a node's name
    (:data:`_NODE_NAME`: ``ready, celery@w1 up``; not ``34@h:6379``). Each word is read once: linear in the text's
    length."""
    clause = False
    for word in _WORD.finditer(text, start, end + 1):
        at = text.find("@", word.start(), word.end())
        if at < 0:
            clause = clause or bool(_CLAUSE_END.match(text, word.end() - 1))
            continue
        if not _WORD_END.match(text, at - 1) or ":" in text[word.start() : at]:
            return False
        if not (_EMAIL_DOMAIN.match(text, at + 1) or _VERSION.match(text, at + 1)) and not (
            clause and _NODE_NAME.match(text, at + 1)
        ):
            return False
    return True


def _password_span(url: str, userinfo: tuple[int, int]) -> tuple[int, int]:
    """Where the password of ``url``'s ``userinfo`` (:func:`userinfo_span`) is: after its first ``:`` (``u:@h``'s
    empty one too: shown as ``u:***@h``), or the whole userinfo without one (a token) or with a "user" holding a
    ``/``, ``?`` or ``#`` (a Redis password cut short: ``redis://u?token=SECRET:12@h:6379/0`` has no user)."""
    start, end = userinfo
    user, colon, _ = url[start:end].partition(":")
    return (start + len(user) + 1, end) if colon and _first_of(user, "/?#", 0) == len(user) else userinfo


def _first_of(text: str, characters: str, start: int) -> int:
    """The offset of the first of ``characters`` in ``text`` from ``start``, or ``len(text)``."""
    return min((at for c in characters if (at := text.find(c, start)) >= 0), default=len(text))
