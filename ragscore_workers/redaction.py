"""Which names carry a credential (headers, environment variables, a URL's query fields: what a suite may not write,
``schemas``) and what messages and logs show of a URL's query: the values of its fields named like a credential
(:func:`secret_query_param`'s names, read so that a long name costs no more than its length) as ``***``. Used by
``settings.redact_url`` (the Redis URLs) and ``providers.errors.shown_url`` (the judge endpoints)."""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

__all__ = [
    "SECRET_QUERY_NAMES",
    "credential_name",
    "hide_spans",
    "query_secret_spans",
    "redact_query_secrets",
    "secret_query_param",
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
    """Whether a header or environment variable named so carries a credential (``X-Api-Key``, ``HF_TOKEN``)."""
    return bool(_SECRET_HEADER.search(name))


def secret_query_param(name: str) -> bool:
    """Whether a URL's query parameter named so (decoded) carries a credential (``api_key``, ``token``, ``key``,
    ``sig``). The name is read in words split at each character that is no letter, digit, ``-`` or ``_`` (``api key``
    from ``?api+key=``, ``data[api_key]``, ``a?token``): a credential's name as them joined by ``-``, or its last
    word one of :data:`SECRET_QUERY_NAMES`."""
    words = _NOT_A_NAME.split(name)
    last = next((word for word in reversed(words) if word), "")
    return credential_name("-".join(words)) or last.lower() in SECRET_QUERY_NAMES


#: What ends a field of a URL's query or fragment, and its value.
_FIELD_END = re.compile(r"[&#]")
#: What splits a query parameter's name into words (:func:`secret_query_param`).
_NOT_A_NAME = re.compile(r"[^A-Za-z0-9_-]+")
#: Where a name starts in text that is no field's start: after a ``?`` or a ``;`` (``?next=/a?token=``, ``?a=1;key=``).
_NAME_START = re.compile(r"[?;]")


def query_secret_spans(url: str) -> list[tuple[int, int]]:
    """Where in ``url`` the value of each field named like a credential is (``?api_key=``, ``&token=``,
    ``?password=``, ``&ssl_password=``): ``(start, end)`` offsets, for :func:`redact_query_secrets`.

    A field's value runs from its ``=`` to the next ``&`` or ``#`` (past a ``;``: a value holding one is hidden
    whole). Its name is the text before the ``=`` (back to the field's start or the ``=`` before it),
    percent-decoded (``+`` as a space): whole right after a ``&`` or ``#`` (the fragment's too: ``#access_token=``),
    else from its first ``?`` or ``;`` (a ``?`` in the path, or in a value: ``?next=/a?token=x``, ``?a=1;key=x``),
    and no name without one. The value is hidden when :func:`secret_query_param` names it (``token``, ``a?token``,
    ``api key``). Each name is read once: linear in the URL's length."""
    spans, begin = [], 0
    for end in [m.start() for m in _FIELD_END.finditer(url)] + [len(url)]:
        at = begin
        while (eq := url.find("=", at, end)) >= 0:
            name: str | None = url[at:eq]
            if at > begin or begin == 0:  # the text starts in the URL's path or in a value: a name after a ? or ;
                start = _NAME_START.search(name)
                name = name[start.end() :] if start else None
            if name is not None and secret_query_param(unquote_plus(name)):
                spans.append((eq + 1, end))
                break
            at = eq + 1
        begin = end + 1
    return spans


def redact_query_secrets(url: str) -> str:
    """``url`` with the values :func:`query_secret_spans` finds as ``***``, read from the URL's start, for messages
    and logs: the query's rule of the Redis URLs (``settings.redact_url``). The judge endpoints'
    (``providers.errors.shown_url``) runs :func:`query_secret_spans` only from the URL's first ``?`` or ``#``, so
    that no name is read in the path."""
    return hide_spans(url, query_secret_spans(url))


def hide_spans(text: str, spans: list[tuple[int, int]], fill: str = "") -> str:
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
        shown += [text[at:start], fill * (end - start) if fill else "***"]
        at = end
    return "".join([*shown, text[at:]])
