"""The two kinds of target: an HTTP endpoint (httpx) and a Python callable (``module:function``).

Both turn a rendered request into the reply's JSON data, raising :class:`TargetError` on failure, and sort
their errors into retry decisions the same way the judge's providers do: 429 waits for ``retry-after``
(shared by every worker), 5xx / 408 / timeouts / connection errors are retried with backoff, other 4xx
and exceptions of a callable are final.
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, Protocol

import httpx

from ..errors import ConfigError
from ..http_body import ReplyTooLarge, ReplyTooSlow, read_body
from ..providers.base import RetryDecision, read_secret
from ..providers.errors import exception_text, redact, where_here
from ..schemas import TargetConfig
from .errors import TargetError

__all__ = ["CallableEndpoint", "Endpoint", "HttpEndpoint", "make_endpoint", "target_token"]


class _RedactTokens(logging.Filter):
    """Takes the tokens sent in a query string or a body out of httpx's log lines (its INFO line per request shows
    the url) and httpcore's (DEBUG: the response headers, a redirect's echo of the url), whatever level a user or an
    SDK (``GROQ_LOG=debug``) sets on those loggers."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.tokens:
            record.msg, record.args = redact(record.getMessage(), *self.tokens), ()
        return True


_LOGGED_URLS = _RedactTokens()
for _name in ("httpx", "httpcore.http11", "httpcore.connection"):  # a filter is not inherited by child loggers
    logging.getLogger(_name).addFilter(_LOGGED_URLS)

#: Connections one process keeps per HTTP target (a target worker: 16 tasks x up to ``concurrency`` calls).
MAX_CONNECTIONS = 256


class Endpoint(Protocol):
    """A target that answers one request with JSON data."""

    def call(self, request: dict[str, Any]) -> tuple[Any, Mapping[str, str]]: ...

    def decide(self, exc: TargetError) -> RetryDecision: ...


def target_token(config: TargetConfig) -> str | None:
    """The token ``auth_env`` names (None without ``auth_env``); ConfigError when that variable is not set, naming
    the host and Celery worker that lack it (on a cluster, every target worker's item error read alike)."""
    if not config.auth_env:
        return None
    token = read_secret(config.auth_env)
    if not token:
        raise ConfigError(
            f"Target {config.name} needs a token: set the environment variable {config.auth_env} on {where_here()}"
        )
    return token


class HttpEndpoint:
    """``POST url`` with the request as JSON (``GET``: as query parameters); a token from ``auth_env``, sent as a
    header, a query parameter or a body field (``auth_in``). httpx logs each request's url at INFO: a token in its
    query string is redacted from that line."""

    def __init__(self, config: TargetConfig) -> None:
        assert config.url is not None
        self.system = config.name
        self.url = config.url
        self.method = config.method
        headers = dict(config.headers)
        self._token = target_token(config)
        #: The token as a query parameter or body field (``auth_in``); never in the rendered request, so never
        #: in a cache key, a stored answer or a message.
        self._query: dict[str, str] = {}
        self._body: dict[str, str] = {}
        if self._token is not None and config.auth_in == "header":
            headers[config.auth_header] = f"{config.auth_scheme} {self._token}".strip()
        elif self._token is not None and config.auth_param is not None:
            in_query = config.auth_in == "query" or self.method == "GET"  # a GET's body is its query string
            (self._query if in_query else self._body)[config.auth_param] = self._token
            _LOGGED_URLS.tokens.add(self._token)
        self.timeout_s = config.timeout_s
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s),
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        )

    def call(self, request: dict[str, Any]) -> tuple[Any, Mapping[str, str]]:
        started = time.monotonic()
        query = {**request, **self._query} if self.method == "GET" else self._query
        # added to the url's own query string (httpx's ``params=`` would replace it: ``?version=2`` lost)
        url = httpx.URL(self.url).copy_merge_params(query) if query else self.url
        options: dict[str, Any] = {} if self.method == "GET" else {"json": {**request, **self._body}}
        try:  # streamed: read_body bounds the whole reply by timeout_s and its size (httpx bounds each read)
            with self._client.stream(self.method, url, **options) as response:
                content = read_body(response.iter_bytes(), started, self.timeout_s)
        except (httpx.TimeoutException, ReplyTooSlow) as exc:
            raise TargetError(f"{self.system}: timed out after {self.timeout_s:g} s (the target's timeout_s)",
                              system=self.system) from exc  # fmt: skip
        except ReplyTooLarge as exc:
            raise TargetError(f"{self.system}: {exc}", system=self.system, status=200) from exc
        except httpx.HTTPError as exc:  # refused, reset, protocol errors
            raise TargetError(self._redact(f"{self.system} unreachable: {type(exc).__name__}: {exc}"),
                              system=self.system) from exc  # fmt: skip
        headers = dict(response.headers)
        if 300 <= response.status_code < 400:  # not followed: a token or API-key header is never sent elsewhere
            where = self._redact(response.headers.get("location", "nowhere"))[:200]
            raise TargetError(f"{self.system} HTTP {response.status_code}: redirected to {where} (redirects are not "
                              "followed: set the target's url to where it points)", system=self.system,
                              status=response.status_code, headers=headers)  # fmt: skip
        if response.status_code >= 400:
            body = self._excerpt(content, 200)
            raise TargetError(f"{self.system} HTTP {response.status_code}: {body}", system=self.system,
                              status=response.status_code, headers=headers)  # fmt: skip
        try:
            reply = _json_of(content, response.charset_encoding)
        except (ValueError, LookupError) as exc:
            kind = response.headers.get("content-type", "no content-type")
            start = self._excerpt(content, 80)
            raise TargetError(f"{self.system}: the reply is not JSON ({kind}): {start!r}", system=self.system,
                              status=200) from exc  # fmt: skip
        return (_redacted(reply, self._token) if self._token else reply), headers

    def decide(self, exc: TargetError) -> RetryDecision:
        return RetryDecision.for_status(exc.status, exc.headers, str(exc))

    def _redact(self, text: str) -> str:
        return redact(text, self._token)

    def _excerpt(self, content: bytes, chars: int) -> str:
        """The first ``chars`` characters of a reply body, redacted before it is cut: the bytes decoded hold every
        token that starts within them whole (4 bytes a character at most, a token's escaped or percent-encoded form
        three times its ASCII length at most), so a token across the cut never shows its first characters."""
        window = content[: 4 * chars + 3 * len(self._token or "")]
        return self._redact(window.decode(errors="replace"))[:chars]


def _redacted(value: Any, token: str) -> Any:
    """A parsed reply with ``token`` taken out of every string in it: a target that echoes its request (a debug
    field, a proxy) would otherwise put it in the answer, the contexts or the cache."""
    if isinstance(value, str):
        return redact(value, token)
    if isinstance(value, list):
        return [_redacted(v, token) for v in value]
    if isinstance(value, dict):
        return {redact(k, token): _redacted(v, token) for k, v in value.items()}
    return value


def _json_of(content: bytes, charset: str | None) -> Any:
    """JSON is UTF-8 (RFC 8259; json.loads also reads UTF-16/32 bytes), whatever a server's header says (Java
    servlets label UTF-8 ISO-8859-1 by default); only a body that is not UTF-8 is read in the charset declared."""
    try:
        return json.loads(content)
    except UnicodeDecodeError:
        if not charset:
            raise
        return json.loads(content.decode(charset))


@lru_cache(maxsize=32)
def load_callable(spec: str) -> Callable[[dict[str, Any]], Any]:
    """Import ``module:function`` (once per process); ConfigError when it does not exist."""
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"Target callable {spec!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise ConfigError(f"Target callable {spec!r} is not callable")
    return target


class CallableEndpoint:
    """A RAG system that is a library: ``function(request) -> dict`` called in the target worker."""

    def __init__(self, config: TargetConfig) -> None:
        assert config.callable is not None
        self.system = config.name
        self._function = load_callable(config.callable)
        self._token = target_token(config)  # the library's key, when the suite names it: never in its errors

    def call(self, request: dict[str, Any]) -> tuple[Any, Mapping[str, str]]:
        try:
            return self._function(request), {}
        except Exception as exc:  # the system under test failed on this question
            message = f"{self.system}: {exception_text(exc, self._token)}"  # its LLM client's key too
            raise TargetError(message, system=self.system) from exc

    def decide(self, exc: TargetError) -> RetryDecision:
        return RetryDecision.no()


def make_endpoint(config: TargetConfig) -> Endpoint:
    return HttpEndpoint(config) if config.url else CallableEndpoint(config)
