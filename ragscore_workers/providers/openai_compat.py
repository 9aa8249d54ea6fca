"""Any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama, llama.cpp, LM Studio) over httpx.

``base_url`` is the API root (``https://api.openai.com/v1``, ``http://localhost:11434/v1``); the key comes
from ``OPENAI_API_KEY`` or the variable ``api_key_env`` names, and may be absent for a server on this machine or
a private network (:func:`is_private_host`).
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import httpx

from ..http_body import ReplyTooLarge, ReplyTooSlow, read_body
from .base import DEFAULT_TIMEOUT_S, Completion, CompletionParams, Message, Provider, is_private_host
from .errors import MalformedReplyError, ProviderError

__all__ = ["OpenAICompatProvider", "is_private_host", "parse_completion", "read_reply"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Connections kept per process: a judge worker keeps many requests in flight.
MAX_CONNECTIONS = 128


def read_reply(chunks: Iterable[bytes], started: float, *, timeout_s: float, provider: str, where: str = "") -> bytes:
    """A streamed reply's body (:func:`read_body`): one still arriving after ``timeout_s`` is a transient
    ProviderError (its message ending in ``where``: the endpoint), one over the size cap a MalformedReplyError."""
    try:
        return read_body(chunks, started, timeout_s)
    except ReplyTooSlow as exc:
        raise ProviderError(f"{exc}{where}", provider=provider) from exc
    except ReplyTooLarge as exc:
        raise MalformedReplyError(str(exc), provider=provider, status=200) from exc


def parse_completion(provider: str, data: Any, headers: dict[str, str]) -> Completion:
    """A chat-completions JSON body to a :class:`Completion`; MalformedReplyError if it is not one."""
    try:
        choice = data["choices"][0]
        text = choice["message"].get("content") or ""
        refusal = choice["message"].get("refusal")
        finish_reason = choice.get("finish_reason")
        usage = data.get("usage") or {}
        tokens_in = int(usage.get("prompt_tokens") or 0)
        tokens_out = int(usage.get("completion_tokens") or 0)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise MalformedReplyError(
            f"not a chat completion: {type(exc).__name__}", provider=provider, status=200
        ) from exc
    if not isinstance(text, str):
        raise MalformedReplyError("message content is not text", provider=provider, status=200)
    return Completion(text=text, tokens_in=tokens_in, tokens_out=tokens_out, headers=headers,
                      finish_reason=finish_reason if isinstance(finish_reason, str) else None,
                      refusal=refusal if isinstance(refusal, str) and refusal.strip() else None)  # fmt: skip


def error_details(body: bytes) -> tuple[str, str | None]:
    """(message, code) of an error body, or its first characters. Besides OpenAI's ``{"error": {"message", "code",
    "type"}}``: vLLM's older top-level ``{"object": "error", "message", "type", "code": 400}``, Ollama's native
    ``{"error": "model \\"x\\" not found, ..."}`` and llama.cpp's numeric ``code`` beside its ``type``
    (``exceed_context_size_error``). The code is a string code where the body has one, else the error's type."""
    try:
        data = json.loads(body)
        if "error" not in data and "message" in data:  # vLLM's older errors: the top-level object is the error
            data = {"error": data}
        error = data["error"]
        if isinstance(error, str):  # Ollama's native API: the error is the message itself
            return error, None
        return str(error.get("message", "")), _error_code(error)
    except (ValueError, KeyError, TypeError, AttributeError):
        return body[:200].decode(errors="replace"), None


def _error_code(error: dict[str, Any]) -> str | None:
    """An error's string ``code`` (``context_length_exceeded``), else its ``type``: vLLM's and llama.cpp's ``code`` is
    the HTTP status again (``400``), their ``type`` the kind (``NotFoundError``, ``exceed_context_size_error``)."""
    for value in (error.get("code"), error.get("type")):
        if isinstance(value, str) and value:
            return value
    return None


class OpenAICompatProvider(Provider):
    """``POST {base_url}/chat/completions`` with a shared, thread-safe httpx client."""

    name = "openai"
    default_key_env = "OPENAI_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    base_url_hint = "the API root the path is added to (a server's /v1 URL, such as http://localhost:8000/v1)"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__(model=model, base_url=base_url, api_key_env=api_key_env, timeout_s=timeout_s)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._client = httpx.Client(
            base_url=self._root().rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        )

    def _needs_key(self) -> bool:
        # OpenAI and other hosted APIs (https) need a key; a server over plain http, on this machine or a private
        # network, usually not.
        url = self._root()
        return not (url.startswith("http://") or is_private_host(url))

    def _missing_key_hint(self) -> str:
        host = httpx.URL(self._root()).host
        return f" (for {host}; any value if that server needs none)"

    def complete(self, messages: Sequence[Message], params: CompletionParams) -> Completion:
        payload = {"model": self.model, "messages": [dict(m) for m in messages], **params.request_fields()}
        started = time.monotonic()
        try:
            with self._client.stream("POST", self.completions_path.lstrip("/"), json=payload) as response:
                body = read_reply(response.iter_bytes(), started, timeout_s=self.timeout_s, provider=self.name,
                                  where=self.posted_to)  # fmt: skip
        except httpx.TimeoutException as exc:
            raise ProviderError(f"timed out after {self.timeout_s} s{self.posted_to}", provider=self.name) from exc
        except httpx.HTTPError as exc:  # connection refused, reset, protocol errors
            said = f"{type(exc).__name__}: {exc}{self.explain(None)}{self._not_running_hint(exc)}"
            raise ProviderError(self._redact(said), provider=self.name) from exc
        headers = dict(response.headers)
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError as exc:
            message, code = error_details(body)
            status = response.status_code
            said = self.status_message(status, message, code)
            raise ProviderError(said, provider=self.name, status=status, headers=headers, code=code) from exc
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise MalformedReplyError("body is not JSON", provider=self.name, status=200) from exc
        return parse_completion(self.name, data, headers)

    def close(self) -> None:
        self._client.close()

    def _not_running_hint(self, exc: httpx.HTTPError) -> str:
        """What a connection refused on this machine most likely means: a local server (Ollama, vLLM, llama.cpp) not
        started, or started on another port; from a container, this machine is the container's own."""
        host = (httpx.URL(self._root()).host or "").lower()
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not isinstance(exc, httpx.ConnectError) or not loopback:
            return ""
        return ": is the server running, on that port? (in a container, localhost is the container itself)"
