"""Groq through its official SDK (``groq``); the key comes from ``GROQ_API_KEY`` (or ``api_key_env``).

The SDK's own retries are off (``max_retries=0``): the judge client owns retries, so that waits are shared
through the cluster-wide limiter and bounded in one place. ``base_url`` points the SDK elsewhere (the fake
provider in tests); the SDK appends ``/openai/v1/chat/completions``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import httpx
from pydantic_core import PydanticCustomError

from ..errors import ConfigError
from ..http_body import BoundedTransport
from ..schemas import no_secret_in_url
from .base import DEFAULT_TIMEOUT_S, Completion, CompletionParams, Message, Provider
from .errors import MalformedReplyError, ProviderError
from .openai_compat import MAX_CONNECTIONS, error_details, parse_completion, read_reply

if TYPE_CHECKING:
    from groq.types.chat import ChatCompletionMessageParam

__all__ = ["GroqProvider"]


#: The variable the Groq SDK reads its base URL from when it is given none (the suite's and
#: RAGSCORE_JUDGE_BASE_URL come first).
SDK_BASE_URL_ENV = "GROQ_BASE_URL"


def _check_sdk_base_url(url: str) -> None:
    """ConfigError (the value unshown) for a ``GROQ_BASE_URL`` that carries a credential, as a suite's base_url may
    not (``user:password@`` goes out as HTTP basic auth in place of the key, and a 401 may echo it), or that ends
    in the path the SDK adds."""
    try:
        no_secret_in_url(url)
    except PydanticCustomError as exc:
        raise ConfigError(f"{SDK_BASE_URL_ENV}: {exc.message()}") from None
    GroqProvider.check_base_url(url, source=SDK_BASE_URL_ENV)


class GroqProvider(Provider):
    """Groq chat completions; raw responses so the rate-limit headers are read too."""

    name = "groq"
    default_key_env = "GROQ_API_KEY"
    requests_header_limit = "rpd"
    default_base_url = "https://api.groq.com"
    completions_path = "/openai/v1/chat/completions"
    # Groq's OpenAI-compatible URL (https://api.groq.com/openai/v1), as its docs show it for other clients
    added_tails = ("/openai/v1/chat/completions", "/chat/completions", "/openai/v1")
    base_url_hint = "Groq's root (https://api.groq.com) or a proxy's: the SDK adds /openai/v1/chat/completions"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(model=model, base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s)
        if base_url is None and (sdk_url := os.environ.get(SDK_BASE_URL_ENV)):
            _check_sdk_base_url(sdk_url)
        try:
            import groq
        except ModuleNotFoundError as exc:  # pragma: no cover - depends on the install
            raise ModuleNotFoundError("The groq judge needs the groq SDK: pip install 'ragscore[judge]'") from exc
        self._groq = groq
        # The SDK reads an error reply's body itself: a transport bounds every body, that one too (read_reply
        # bounds a success's, as for the other providers)
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
        http = httpx.Client(transport=BoundedTransport(timeout_s, limits=limits), timeout=timeout_s)
        # No key: "" (the SDK would read GROQ_API_KEY for None, whichever variable the judge reads); no call is sent
        # without one (require_key)
        self._client = groq.Groq(api_key=self._api_key or "", base_url=base_url, max_retries=0, timeout=timeout_s,
                                 http_client=http)  # fmt: skip

    def _root(self) -> str:
        return str(self._client.base_url)  # the SDK's: the suite's, else GROQ_BASE_URL, else Groq's

    def complete(self, messages: Sequence[Message], params: CompletionParams) -> Completion:
        groq = self._groq
        started = time.monotonic()
        try:  # a streamed reply, read by read_reply: httpx's timeout bounds each read, not the whole body
            with self._client.chat.completions.with_streaming_response.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", [dict(m) for m in messages]),  # role, content
                **params.request_fields(),
            ) as raw:
                headers = dict(raw.headers)
                body = read_reply(raw.iter_bytes(), started, timeout_s=self.timeout_s, provider=self.name,
                                  where=self.posted_to)  # fmt: skip
        except (groq.APITimeoutError, httpx.TimeoutException) as exc:
            raise ProviderError(f"timed out after {self.timeout_s} s{self.posted_to}", provider=self.name) from exc
        except (groq.APIConnectionError, httpx.HTTPError) as exc:  # the body's reads raise httpx's own errors
            # the SDK's own words are "Connection error."; the httpx error it was raised from says which
            cause = exc.__cause__ if isinstance(exc, groq.APIConnectionError) and exc.__cause__ else exc
            said = f"connection error: {type(cause).__name__}: {cause}{self.explain(None)}"
            raise ProviderError(self._redact(said), provider=self.name) from exc
        except groq.APIStatusError as exc:
            message, code = error_details(exc.response.content)
            raise ProviderError(
                self.status_message(exc.status_code, message, code),
                provider=self.name,
                status=exc.status_code,
                headers=dict(exc.response.headers),
                code=code,
            ) from exc
        except groq.APIError as exc:  # response validation and other SDK-level failures
            raise MalformedReplyError(self._redact(str(exc)), provider=self.name, status=200) from exc
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise MalformedReplyError("body is not JSON", provider=self.name, status=200) from exc
        return parse_completion(self.name, data, headers)

    def close(self) -> None:
        self._client.close()
