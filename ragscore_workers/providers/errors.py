"""Errors of the judge layer, a branch of the one tree rooted at :class:`ragscore_workers.errors.RagscoreError`.

RagscoreError
├── ConfigError
│   └── MissingKeyError         the provider's API key is not in the environment
└── JudgeError                  a judge call could not give a reply (carries ``provider``)
    ├── ProviderError           the provider answered with an error or could not be reached
    │   │                       (``status`` None for timeouts and connection errors)
    │   └── MalformedReplyError the provider answered 200 with a body that is not a completion
    ├── RequestTooLargeError    one request needs more tokens than the tokens-per-minute limit allows
    ├── RateLimitTimeout        the limiter would make this call wait longer than ``max_wait_s``
    └── JudgeStopped            the run stopped judging: circuit breaker open or budget reached (``misconfigured``:
        │                       a refused key, an unknown model)
        └── JudgeTimeUp         the judge task reached its soft time limit: a call not made by then is not made

SDK and transport errors are translated in the provider modules with ``raise ... from exc``; messages
never carry an API key (:func:`redact`).
"""

from __future__ import annotations

import json
import os
import re
import socket
import traceback
from collections.abc import Mapping
from urllib.parse import quote, quote_plus, unquote, urlsplit

from ..counts import agree, close_names, listed
from ..errors import ConfigError, RagscoreError
from ..redaction import credential_name, hide_spans, url_password_spans

__all__ = [
    "JudgeError",
    "JudgeStopped",
    "JudgeTimeUp",
    "MalformedReplyError",
    "MissingKeyError",
    "ProviderError",
    "RateLimitTimeout",
    "RequestTooLargeError",
    "environment_secrets",
    "exception_text",
    "key_holder",
    "redact",
    "redact_environment",
    "redact_url_passwords",
    "traceback_text",
    "where_here",
]

#: Environment variables holding a key by their name's last part besides :func:`credential_name`'s (``GEMINI_KEY``,
#: ``AZURE_OPENAI_KEY``, a ``DB_PASS``); a short value (``SORT_KEY=id``) stays, as :data:`MIN_SECRET_CHARS` says.
_KEY_VARIABLE = re.compile(r"(?:^|_)(?:KEY|PASS|PWD|CREDENTIALS?)$", re.I)

#: Shortest environment value redacted from error text (wherever it appears, inside a longer word too). A shorter
#: one (``OPENAI_API_KEY=EMPTY`` or ``ollama`` for a local server, ``REDIS_PASSWORD=redis``, ``SORT_KEY=id``) is a
#: placeholder far more often than a key, and blanking it would blank every word that holds it ("is *** running?").
#: A URL's password is redacted in any URL of the text whatever its length (:func:`redact_url_passwords`).
MIN_SECRET_CHARS = 8
#: Variables whose name reads like a credential's and that hold none: the shell's working directories (``PWD`` ends
#: as ``DB_PWD`` does), taken out of every path of an error that holds them.
_NOT_CREDENTIALS = frozenset({"PWD", "OLDPWD"})


def redact(text: str, *secrets: str | None) -> str:
    """``text`` with every non-empty secret replaced by ``***``: as written, as escaped in a repr or a JSON string
    (PHP's ``json_encode`` writes ``/`` as ``\\/``), and as percent-encoded in a URL (a key holding ``/``, ``+`` or
    ``=`` quoted into a query string)."""
    for secret in secrets:
        if secret:
            for form in _forms(secret):
                text = text.replace(form, "***")
    return text


def _forms(secret: str) -> list[str]:
    """``secret`` as written, escaped and percent-encoded, longest first."""
    forms = {secret, repr(secret)[1:-1], secret.encode("unicode_escape").decode()}
    forms |= {json.dumps(secret)[1:-1], json.dumps(secret)[1:-1].replace("/", "\\/")}
    forms |= {quote(secret, safe=""), quote_plus(secret), quote(secret)}
    return sorted(forms, key=len)[::-1]


def redact_url_passwords(text: str) -> str:
    """``text`` with the password of every URL it quotes (``postgres://u:pw@h/db``, a token of ``https://TOKEN@h``) as
    ``***``, whatever its length (:func:`~ragscore_workers.redaction.url_password_spans`)."""
    return hide_spans(text, url_password_spans(text))


def environment_secrets() -> list[str]:
    """What :func:`redact_environment` takes out of a plug-in's or a library target's error text, which may quote its
    key: the values of environment variables named like credentials (``GROQ_API_KEY``, ``HF_TOKEN``, and ``*_KEY`` as
    ``GEMINI_KEY`` and ``AZURE_OPENAI_KEY`` are named) and the password of a URL held in any (``DATABASE_URL``), as
    written there and percent-decoded; :data:`MIN_SECRET_CHARS` or more characters."""
    found = []
    for name, value in os.environ.items():
        value = value.strip()
        if name.upper() in _NOT_CREDENTIALS:
            continue
        if credential_name(name) or _KEY_VARIABLE.search(name):
            found.append(value)
        elif "://" in value:
            try:
                password = urlsplit(value).password or ""
            except ValueError:  # no URL after all
                continue
            found += [password, unquote(password)]
    return [v for v in dict.fromkeys(found) if len(v) >= MIN_SECRET_CHARS]


def redact_environment(text: str, *secrets: str | None) -> str:
    """``text`` with ``secrets`` and the environment's (:func:`environment_secrets`) as ``***``, and the password of
    every URL it quotes (:func:`redact_url_passwords`)."""
    return redact_url_passwords(redact(text, *secrets, *environment_secrets()))


def exception_text(exc: BaseException, *secrets: str | None) -> str:
    """``Type: message`` of ``exc`` with ``secrets`` and the environment's credentials as ``***``
    (:func:`redact_environment`): an item's error, where a plug-in's or a library target's text may quote a key (a URL,
    a header)."""
    return redact_environment(f"{type(exc).__name__}: {exc}", *secrets)


def traceback_text(exc: BaseException, *secrets: str | None) -> str:
    """``exc``'s traceback for a worker log, redacted as :func:`exception_text` (its last line quotes it)."""
    return redact_environment("".join(traceback.format_exception(exc)), *secrets)


def _worker_node() -> str | None:
    """The Celery worker node whose task this process runs (``judge-1a2b3c4d@host``); None outside a task."""
    from celery import current_task

    return getattr(current_task.request, "hostname", None) if current_task else None


def where_here() -> str:
    """This process's host, and the Celery worker node whose task it runs when it runs one: which of a cluster's
    workers an item's error came from."""
    node = _worker_node()
    host = socket.gethostname()
    return f"host {host} (worker {node})" if node else f"host {host}"


def _choose_provider(named_env: str | None = None) -> str:
    """How a suite picks another judge (``judge.provider``: see docs/judge.md), said when a key is missing: each
    provider with its usual key variable, or, where the judge metrics' ``api_key_env`` names one (``named_env``),
    that variable, which either provider reads."""
    groq, openai = ("", "") if named_env else (" (key in GROQ_API_KEY)", "key in OPENAI_API_KEY; ")
    named = f"; either reads its key from {named_env} (the judge metrics' api_key_env)" if named_env else ""
    return (
        f"The suite's judge.provider chooses the judge: groq{groq} or openai ({openai}with "
        "judge.base_url, any OpenAI-compatible server, and one on this machine or a private network needs no key)"
        f"{named}; see docs/judge.md."
    )


def _name_shape(name: str) -> str:
    """A variable's name without case, separators or the word API: ``groq-apikey`` and ``GROQ_KEY`` are
    ``GROQ_API_KEY``'s ``GROQKEY``."""
    return re.sub(r"[^A-Z0-9]|API", "", name.upper())


def _like_named_variables(env_var: str) -> str:
    """The variables set (not blank) in this environment whose names are like ``env_var``'s, said as a misspelt
    key's likely place (``GROQ_APIKEY``, ``groq_api_key``, ``GROK_API_KEY``): names only, never a value; nothing
    when none is. Likeness is of :func:`_name_shape`, strict enough to leave out another tool's key
    (``NGROK_API_KEY``) and the provider's other settings (``OPENAI_API_BASE``, ``OPENAI_API_TYPE``)."""
    shape = _name_shape(env_var)
    set_names = sorted(name for name, value in os.environ.items() if value.strip() and name != env_var)
    like = [name for name in set_names if close_names(shape, [_name_shape(name)], cutoff=0.85)]
    if not like:
        return ""
    return f"{listed(like, 3)} {agree(len(like), 'is', 'are')} set, but the judge reads only {env_var}. "


def key_holder() -> str:
    """Where a missing key is to be set: a worker task's host and node (an operator of many workers finds the one that
    lacks it), else the ragscore process (the process a user started needs no naming)."""
    return f"on {where_here()}" if _worker_node() else "for the ragscore process"


class MissingKeyError(ConfigError):
    """The API key of a provider is not set in the environment (of the host and worker it names)."""

    def __init__(
        self, provider: str, env_var: str, *, hint: str = "", named: bool = False, where: str | None = None
    ) -> None:
        """``named``: ``env_var`` is the one the judge metrics' ``api_key_env`` names, not the provider's usual;
        ``where``: :func:`key_holder` as it was when the key was found missing (None: now)."""
        self.provider = provider
        self.env_var = env_var
        where = where or key_holder()
        near = _like_named_variables(env_var)
        super().__init__(
            f"The {provider} judge needs an API key: set the environment variable {env_var}{hint} {where} "
            f"(keys are read from the environment only, never from a suite). {near}"
            f"{_choose_provider(env_var if named else None)}"
        )


class JudgeError(RagscoreError):
    """A judge call did not produce a reply."""

    def __init__(self, message: str, *, provider: str = "") -> None:
        self.provider = provider
        super().__init__(message)


class ProviderError(JudgeError):
    """The provider answered with an error status, or could not be reached (``status is None``)."""

    def __init__(
        self,
        message: str,
        *,
        provider: str = "",
        status: int | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        self.status = status
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self.code = code
        prefix = f"{provider} HTTP {status}" if status is not None else f"{provider} unreachable"
        super().__init__(f"{prefix}: {message}"[:500], provider=provider)


class MalformedReplyError(ProviderError):
    """A 200 reply whose body is not a chat completion."""


class RequestTooLargeError(JudgeError):
    """The request alone needs more tokens than the tokens-per-minute limit: it can never be sent."""


class RateLimitTimeout(JudgeError):
    """The shared limiter would have made the call wait longer than the configured bound."""


class JudgeStopped(JudgeError):
    """Judging stopped for this run (circuit breaker open, or cost/token budget reached). ``misconfigured``: by a run
    stopper's breaker (a refused key, a model the provider lacks): the judge's configuration fails every call, so each
    item it stops records an error (what to fix), not a stop."""

    def __init__(self, message: str, *, provider: str = "", misconfigured: bool = False) -> None:
        self.misconfigured = misconfigured
        super().__init__(message, provider=provider)


class JudgeTimeUp(JudgeStopped):
    """The judge task reached its soft time limit: the call is not made (again), its item records the time limit's
    error (never counted by the breaker: the provider did not fail)."""
