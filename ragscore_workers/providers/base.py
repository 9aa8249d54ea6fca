"""The provider interface: one abstract call, plus the provider's own retry policy.

A provider turns ``messages`` into a :class:`Completion` and sorts its own errors with
:meth:`Provider.should_retry`; the judge client (``client.py``) adds the shared limiter, cache, retries and
counters around it. Keys come from the environment only and never leave the provider object.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, TypedDict
from urllib.parse import urlsplit, urlunsplit

from ..errors import ConfigError
from ..redaction import redact_url
from .errors import (
    MalformedReplyError,
    MissingKeyError,
    ProviderError,
    RequestTooLargeError,
    key_holder,
    redact,
)
from .headers import rate_limit_wait

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "Completion",
    "CompletionParams",
    "Message",
    "Provider",
    "RequestFields",
    "RetryDecision",
    "estimate_tokens",
    "is_private_host",
    "provider_identity",
    "read_secret",
]

#: Seconds one HTTP call may take (connect + read) before it counts as a timeout.
DEFAULT_TIMEOUT_S = 60.0

Message = Mapping[str, str]

#: A 429 that waiting cannot cure: the account's quota is spent (OpenAI's ``insufficient_quota``). Not "billing":
#: Groq's ordinary rate-limit 429 ends with a link to its billing page.
#: DNS suffixes of private networks (RFC 6762 .local, RFC 8375 .home.arpa, Kubernetes services, clouds'
#: .internal, RFC 6761 .localhost, the common .lan).
PRIVATE_SUFFIXES = (".local", ".localhost", ".internal", ".lan", ".home.arpa", ".svc", ".svc.cluster.local")


def is_private_host(url: str) -> bool:
    """Whether ``url`` names this machine or a private network: a loopback, private or link-local address,
    ``localhost``, a one-label name (``vllm``, ``ollama``) or a private DNS suffix (``.local``, ``.internal``,
    ``.svc``: a Kubernetes service). Hosted APIs (``api.openai.com``, ``api.groq.com``) are not."""
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "." not in host or host == "localhost" or host.endswith(PRIVATE_SUFFIXES)
    return not address.is_global  # private, loopback, link-local, and shared (100.64/10: Tailscale, CGNAT)


log = logging.getLogger(__name__)

#: OpenAI's and Groq's error code for a model name they do not serve (HTTP 404): a typo, a retired model.
MODEL_NOT_FOUND = "model_not_found"
#: OpenAI's and Groq's error code for a key they refuse (HTTP 401): mistyped, revoked, another provider's. A gateway's
#: 401 without it (a passing refusal, a proxy's own) is not read as one.
INVALID_API_KEY = "invalid_api_key"
#: The error type of a 404, read as its code where the server sends no string code: vLLM's ("The model `x` does not
#: exist.") and Ollama's on its ``/v1`` ('model "x" not found, try pulling it first'). A model the server lacks only
#: when the message names a model (:meth:`Provider.run_stopper`): not a path the server lacks.
LOCAL_MODEL_NOT_FOUND = ("NotFoundError", "not_found_error")
_NO_MODEL = ("the {name} judge has no model {model} ({said}): set the suite's judge.model to a model {name} serves "
             "(every judge call would fail the same way)")  # fmt: skip
#: Error replies that every call of the run would repeat, by (HTTP status, the provider's error code): judging stops
#: at the first one, with the setting to change. ``{said}`` is the error without what :meth:`Provider.explain` added.
RUN_STOPPERS = {
    (404, MODEL_NOT_FOUND): _NO_MODEL,
    **{(404, code): _NO_MODEL for code in LOCAL_MODEL_NOT_FOUND},
    (401, INVALID_API_KEY): "the {name} judge's key was refused ({said}): check {key_env}",
}
_QUOTA_WORDS = ("insufficient_quota", "exceeded your current quota")
#: A 429 for one request larger than a per-minute token limit (OpenAI: "Request too large for gpt-4o ... on
#: tokens per min"): it fails however long it waits.
_TOO_LARGE_WORDS = ("request too large",)
#: What a provider says of one request that no retry fixes and that says nothing of the next request: a prompt
#: over the model's context (400 ``context_length_exceeded``, Groq's 413, a 422 saying the input is too long,
#: llama.cpp's 400 ``exceed_context_size_error``).
_REQUEST_SPECIFIC_WORDS = ("context_length_exceeded", "maximum context length", "context window", "too long",
                           "request too large", "reduce the length", "exceed_context_size")  # fmt: skip


class RequestFields(TypedDict, total=False):
    """What :meth:`CompletionParams.request_fields` puts in a chat-completions request: the reply cap, temperature."""

    temperature: float
    max_tokens: int
    max_completion_tokens: int


@dataclass(frozen=True, kw_only=True)
class CompletionParams:
    """What, besides the messages, changes the reply (and so is part of the cache key)."""

    temperature: float = 0.0
    max_tokens: int = 512
    #: A reasoning model (OpenAI's o-series and gpt-5 refuse ``max_tokens`` and any temperature but their
    #: default): the cap goes as ``max_completion_tokens`` and no temperature is sent.
    reasoning: bool = False

    def request_fields(self) -> RequestFields:
        """The reply cap and temperature as the chat-completions request carries them."""
        if self.reasoning:
            return {"max_completion_tokens": self.max_tokens}
        return {"temperature": self.temperature, "max_tokens": self.max_tokens}


@dataclass(frozen=True)
class Completion:
    """One reply: its text, token usage as the provider reported it, the response headers, why the reply
    ended (``length``: cut at the cap) and a refusal the model gave instead of content."""

    text: str
    tokens_in: int
    tokens_out: int
    headers: Mapping[str, str] = field(default_factory=dict)
    finish_reason: str | None = None
    refusal: str | None = None


@dataclass(frozen=True)
class RetryDecision:
    """What to do after a failed call: ``no`` retry, a ``transient`` retry with backoff, or wait out a
    ``rate_limit`` (``retry_after`` seconds, shared by every worker; None when the 429 says not how long: the
    limiter backs off, :meth:`~ragscore_workers.providers.ratelimit.RedisLimiter.pause`)."""

    kind: Literal["no", "transient", "rate_limit"]
    retry_after: float | None = None

    @classmethod
    def no(cls) -> RetryDecision:
        return cls("no")

    @classmethod
    def transient(cls) -> RetryDecision:
        return cls("transient")

    @classmethod
    def rate_limit(cls, retry_after: float | None) -> RetryDecision:
        return cls("rate_limit", retry_after)

    @classmethod
    def for_status(cls, status: int | None, headers: Mapping[str, str], message: str = "") -> RetryDecision:
        """An HTTP failure: unreachable (``None``), 408/409/425/498 and 5xx are transient, 429 waits for what its
        headers or ``message`` ask (:func:`rate_limit_wait`), any other status is final."""
        if status is None or status in (408, 409, 425, 498) or status >= 500:  # 498: Groq's capacity_exceeded
            return cls.transient()
        if status == 429:
            return cls.rate_limit(rate_limit_wait(headers, message))
        return cls.no()

    @property
    def retry(self) -> bool:
        return self.kind != "no"


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A deliberately high guess of the prompt's tokens (three characters a token, 4 per message)."""
    return 3 + sum(math.ceil(len(m.get("content", "")) / 3) + 4 for m in messages)


def read_secret(env_var: str) -> str | None:
    """The key or token in ``env_var`` without surrounding whitespace (a key file's newline, a CRLF env file);
    None when unset or blank. A value with whitespace or control characters inside cannot be one: ConfigError
    here, before it is sent (an HTTP library would quote it, secret and all, in its error)."""
    value = (os.environ.get(env_var) or "").strip()
    if not value:
        return None
    if not value.isascii() or not value.isprintable() or any(c.isspace() for c in value):
        raise ConfigError(
            f"The value of {env_var} cannot be a key or token: it has whitespace, control or non-ASCII characters "
            "inside (the value is not shown)"
        )
    return value


def provider_identity(name: str, base_url: str | None, model: str) -> str:
    """Provider, endpoint and model: what a cached reply depends on (part of its cache key)."""
    return f"{name}|{base_url or ''}|{model}"


class Provider(ABC):
    """A chat-completions endpoint with a model and (maybe) a key read from ``api_key_env``."""

    #: Name in suites (``judge.provider``) and in limiter/cache keys.
    name: ClassVar[str]
    #: Environment variable holding the key unless ``api_key_env`` names another.
    default_key_env: ClassVar[str]
    #: Whether a call without a key makes sense (local OpenAI-compatible servers need none).
    key_required: ClassVar[bool] = True
    #: Which of our limits ``x-ratelimit-limit-requests`` states (OpenAI's is per minute, Groq's per day);
    #: ``x-ratelimit-limit-tokens`` is tokens per minute for both.
    requests_header_limit: ClassVar[str] = "rpm"
    #: The endpoint when ``base_url`` is None, and the path the client adds to it for a chat completion.
    default_base_url: ClassVar[str]
    completions_path: ClassVar[str] = "/chat/completions"
    #: Ends of a ``base_url`` path that the client adds itself (a URL copied whole from a curl example), longest
    #: first: posted to, they double (``/v1/chat/completions/chat/completions``) and every call is a 404.
    added_tails: ClassVar[tuple[str, ...]] = ("/chat/completions",)
    #: What ``base_url`` should be, said with a 404.
    base_url_hint: ClassVar[str] = ""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.key_env = api_key_env or self.default_key_env
        if base_url:
            self.check_base_url(base_url)
        self._api_key = read_secret(self.key_env)
        #: The refusal of a call that needs a key none is set for, raised by :meth:`require_key` at the first call
        #: that goes to the provider (a run whose replies all come from the cache needs none); where it names is this
        #: thread's (a worker task's node), not a judge pool thread's.
        self._missing_key: Callable[[], MissingKeyError] | None = None
        if self._api_key is None and self._needs_key():
            named, hint = api_key_env is not None, self._missing_key_hint()
            self._missing_key = functools.partial(MissingKeyError, self.name, self.key_env, hint=hint, named=named,
                                                  where=key_holder())  # fmt: skip
        if self._api_key and base_url and urlsplit(base_url).scheme == "http" and not is_private_host(base_url):
            host = urlsplit(base_url).hostname
            if api_key_env is None:  # the provider's usual variable: most likely a key for the provider itself
                raise ConfigError(
                    f"The {self.name} judge would send {self.key_env} (the provider's usual key) over plain http to "
                    f"{host}, readable on every network it crosses: use an https base_url, or set the judge metrics' "
                    "api_key_env to the variable holding that server's own key (an unset one if it needs none)"
                )
            log.warning("the %s judge sends the key in %s over plain http to %s: it is readable on every network "
                        "it crosses (use https)", self.name, self.key_env, host)  # fmt: skip

    def require_key(self) -> None:
        """MissingKeyError (naming the variable to set) when calls need a key and none is set: checked before a call
        is sent, not when the provider is built."""
        if self._missing_key is not None:
            raise self._missing_key()

    @classmethod
    def check_base_url(cls, base_url: str, source: str | None = None) -> None:
        """ConfigError for a ``base_url`` ending in what the client adds itself, with the one to give instead and
        where: in ``source`` (the environment variable that held it), else the suite or its override."""
        parts = urlsplit(base_url)
        path = parts.path.rstrip("/")
        where = (
            f"in {source}, which held it"
            if source
            else "as judge.base_url, or in RAGSCORE_JUDGE_BASE_URL, which overrides it: a resume keeps the suite"
        )
        for tail in cls.added_tails:
            if path.lower().endswith(tail):
                root = urlunsplit(parts._replace(path=path[: -len(tail)]))
                raise ConfigError(
                    f"The {cls.name} judge's base_url {base_url} ends in {tail}, which the {cls.name} client adds "
                    f"itself (it posts to base_url + {cls.completions_path}): give {root} ({where})"
                )

    @property
    def endpoint(self) -> str:
        """The URL a chat completion is posted to, as errors show it: a URL's password and credential query values
        redacted. A suite's base_url, ``RAGSCORE_JUDGE_BASE_URL`` and the Groq SDK's ``GROQ_BASE_URL``
        (``groq_sdk._check_sdk_base_url``) may hold none (``schemas.no_secret_in_url``); the redaction is kept for a
        provider built with a base_url from elsewhere."""
        return redact_url(self._root().rstrip("/") + self.completions_path)

    def _root(self) -> str:
        """The base URL the client posts to."""
        return self.base_url or self.default_base_url

    @functools.cached_property
    def posted_to(self) -> str:
        """`` (POST URL)``, which a failed call's message ends in: worked out once, not on every call's read of its
        reply (a provider's endpoint never changes)."""
        return self._redact(self.explain(None))

    def explain(self, status: int | None, message: str = "") -> str:
        """What an error's message needs besides the provider's words: where the call went when no server
        answered there or it has no such path (404), and which variable's key a 401 refused (or that none was sent:
        a server on this machine may need none, unless it asks)."""
        if status is None:
            return f" (POST {self.endpoint})"
        if status == 404:
            if _names_a_model(message):  # OpenAI's and Groq's model_not_found: the URL was right
                return f" (POST {self.endpoint})"
            return f" (POST {self.endpoint}: check base_url, {self.base_url_hint})"
        if status == 401:
            if self._api_key is None:
                return f" (no key was sent: {self.key_env} is unset, and this server asks for one)"
            return f" (the key in {self.key_env})"
        return ""

    def status_message(self, status: int, message: str, code: str | None) -> str:
        """An error reply's message with what :meth:`explain` adds, redacted; an empty one (a gateway's bare 401)
        says that there was none."""
        return self._redact((message.strip() or "no error message") + self.explain(status, f"{code or ''} {message}"))

    def _needs_key(self) -> bool:
        return self.key_required

    def _missing_key_hint(self) -> str:
        """More to say when the key is missing (appended to the message)."""
        return ""

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, key_env={self.key_env!r})"

    @abstractmethod
    def complete(self, messages: Sequence[Message], params: CompletionParams) -> Completion:
        """One call; raises :class:`ProviderError` (or a subclass) on any failure."""

    def should_retry(self, exc: BaseException) -> RetryDecision:
        """Sort an error raised by :meth:`complete`: quota exhaustion and 4xx are final."""
        if isinstance(exc, MalformedReplyError):
            return RetryDecision.transient()
        if not isinstance(exc, ProviderError):
            return RetryDecision.no()
        said = f"{exc.code or ''} {exc}".lower()
        if exc.status == 429 and any(word in said for word in (*_QUOTA_WORDS, *_TOO_LARGE_WORDS)):
            return RetryDecision.no()
        return RetryDecision.for_status(exc.status, exc.headers, str(exc))

    def run_stopper(self, exc: BaseException) -> str | None:
        """Why every call of the run would fail as ``exc`` did, when its reply says so (:data:`RUN_STOPPERS`): the
        provider serves no model by the suite's name, or refuses the key. Judging stops at this first failure, with
        the setting to change, not after the breaker's count of them."""
        if not isinstance(exc, ProviderError) or exc.status is None:
            return None
        template = RUN_STOPPERS.get((exc.status, exc.code or ""))
        if template is None or (exc.code in LOCAL_MODEL_NOT_FOUND and not _names_a_model(str(exc))):
            return None
        said = str(exc)
        if self._api_key is not None:  # without what explain() added, which the stop says (but "no key was sent")
            said = said.removesuffix(self._redact(self.explain(exc.status, said)))
        return template.format(name=self.name, model=self.model, key_env=self.key_env, said=said)

    @staticmethod
    def request_specific(exc: BaseException) -> bool:
        """Whether the failure belongs to this one request (too long for the model, 413, over a token limit by
        itself), so that it says nothing of the provider's health: it does not count towards the run's circuit
        breaker."""
        if isinstance(exc, RequestTooLargeError):  # refused by our limiter before it was sent
            return True
        if not isinstance(exc, ProviderError) or exc.status is None:
            return False
        said = f"{exc.code or ''} {exc}".lower()
        # 413 is always about the request's size; a 400 or 422 only when it says so (a server refusing a parameter
        # of every request answers 422 too: that one counts, so the breaker stops the run)
        return exc.status == 413 or (exc.status in (400, 422, 429) and any(w in said for w in _REQUEST_SPECIFIC_WORDS))

    @property
    def identity(self) -> str:
        """Provider, endpoint and model: what a cached reply depends on."""
        return provider_identity(self.name, self.base_url, self.model)

    def limiter_key(self) -> str:
        """Provider, model and a hash of the endpoint and key: the scope of a provider's rate limits."""
        key_hash = hashlib.sha256(f"{self.base_url or ''}|{self._api_key or ''}".encode()).hexdigest()[:12]
        return f"{self.name}:{self.model}:{key_hash}"

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op unless a provider holds connections
        """Release connections."""

    def _redact(self, text: str) -> str:
        return redact(text, self._api_key)

    def redacted(self, completion: Completion) -> Completion:
        """``completion`` with this provider's key taken out of its text and refusal: a proxy or a server that
        echoes its request would otherwise put the key in the run's results and cache."""
        if not self._api_key:
            return completion
        refusal = self._redact(completion.refusal) if completion.refusal else completion.refusal
        return replace(completion, text=self._redact(completion.text), refusal=refusal)


def _names_a_model(said: str) -> bool:
    """Whether a 404's code and message are about the model (OpenAI's and Groq's ``model_not_found``, "The model
    `x` does not exist"), not the path: the URL was right. The word alone: a path's
    ``/models/`` (a gateway's "unknown path /models/chat/completions") is no model's name."""
    return MODEL_NOT_FOUND in said or re.search(r"\bmodel\b", said, re.IGNORECASE) is not None
