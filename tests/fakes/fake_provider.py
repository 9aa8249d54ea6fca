"""A fake LLM provider: a real HTTP server speaking the OpenAI / Groq chat-completions wire format.

Routes: ``POST /openai/v1/chat/completions`` (Groq's path), ``POST /v1/chat/completions`` (OpenAI-compatible),
``GET /_stats`` (counters as JSON) and ``POST /_fail`` (``{"kind", "n"}``: fail the next n requests), so a
server started in another process can be driven too (``python -m tests.fakes.fake_provider --rpm 600``).

Replies are driven by the prompt (every message's content, joined), so tests know the right score:

* ``[[fault=KIND:N]]``: the first N requests carrying this exact prompt fail with KIND
  (``400``, ``401`` (the key refused, ``invalid_api_key``: answered as any fault, after ``hold``), ``429``, ``quota``
  (a 429 saying the quota is used up), ``500``, ``502``, ``503``, ``timeout``, ``malformed``, ``disconnect``);
* else ``responder(prompt, nth)`` when the test gave one and it returns a string (``nth``: how many
  replies this exact prompt got before);
* else ``[[reply=A||B||C]]``: the nth reply to this prompt is the nth item (the last one repeats);
* else ``[[rating=N]]``: the reply is ``N``;
* else ``0``;
* ``[[refuse=TEXT]]``: the model refuses (``content: null``, ``refusal: TEXT``, as OpenAI's structured refusals).

Keys: with ``api_key``, a request bearing another key (or none) is answered 401 ``invalid_api_key`` with Groq's body
("Invalid API Key") on Groq's path and OpenAI's ("Incorrect API key provided: KEY. ...", the key echoed) on the other,
counted as ``unauthorized``.

Models: ``models`` is the set the server knows (None, the default: any name); a request naming another is
answered 404 ``model_not_found`` with Groq's and OpenAI's body ("The model `NAME` does not exist or you do not have
access to it."), counted as ``unknown_model``.

Provider profiles: ``usage=False`` leaves ``usage`` out of replies (LocalAI, some gateways); ``reasoning_tokens=N``
plays a reasoning model (OpenAI o-series, gpt-5): it refuses ``max_tokens`` and any ``temperature`` but 1 with
OpenAI's 400 bodies, and spends N tokens of the reply cap thinking before it answers (a cap too small for both:
empty content, ``finish_reason: length``). ``errors`` picks whose error bodies it sends (:data:`ErrorShape`: OpenAI's,
vLLM's, Ollama's, llama.cpp's), its unknown model answered in that server's words; ``fault=context_size`` is
llama.cpp's 400 for a prompt past its context; ``parallel=N`` answers N requests at a time and queues the others, as
a local server on one GPU.

Limits: ``rpm`` requests and ``tpm`` tokens (prompt + completion, as reported in ``usage``) per sliding
window of ``period_s`` seconds. A request over either gets 429 with ``retry-after`` (whole seconds, rounded
up; plus ``retry-after-ms`` when ``retry_after_ms``; neither when ``retry_after`` is False, as from gateways and
servers that leave it out: then only the message's "try again in 1.23s" and the reset headers say how long)
and is not counted, unless ``count_rejected``: then,
as OpenAI documents ("unsuccessful requests contribute to your per-minute limit, so continuously
resending a request won't work", platform rate-limits guide), a rejected request takes a request slot of
the window too (no tokens). Every reply carries (unless ``limit_headers`` is False) Groq-style
``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` headers (resets like ``2m59.56s``).
``quantize`` also enforces the request limit per second (a 60th of ``period_s``): at most ceil(rpm / 60) requests in
any second, as OpenAI documents its limits "may be quantized" (60,000 requests/minute enforced as 1,000 per second);
a request over it gets the same 429, ``retry-after`` and headers (the minute's) as one over the minute, and is
counted as ``rate_limited`` and ``quantized``.
Tokens are counted as ``ceil(chars / 4)`` per message plus 4 (:func:`count_tokens`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection
from contextlib import nullcontext
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, get_args

from .trickle import write_slowly

__all__ = ["FakeProvider", "count_tokens", "format_duration"]

COMPLETION_PATHS = ("/openai/v1/chat/completions", "/v1/chat/completions")
FAULT_KINDS = ("400", "401", "401_empty", "429", "quota", "500", "502", "503", "timeout", "malformed", "disconnect",
               "groq_429", "too_large_429", "context_length", "context_size", "413", "498", "trickle", "trickle_500",
               "huge")  # fmt: skip
_MARKER = re.compile(r"\[\[(fault|reply|rating|refuse)=(.*?)\]\]", re.S)

Responder = Callable[[str, int], "str | None"]
#: Error bodies as OpenAI and Groq send them (``{"error": {"message", "type", "code"}}``), as vLLM before 0.10 (the
#: error is the top-level object: ``{"object": "error", "message", "type", "param", "code": 400}``), as Ollama's native
#: API (``{"error": "MESSAGE"}``), or as llama.cpp's server (``{"error": {"code": 400, "message", "type"}}``).
ErrorShape = Literal["openai", "vllm", "ollama", "llamacpp"]


def count_tokens(text: str) -> int:
    """The fake's tokenizer: four characters a token, at least one."""
    return max(1, math.ceil(len(text) / 4))


def format_duration(seconds: float) -> str:
    """Groq's reset format: ``2m59.56s``, ``7.66s``, ``1h0m0s``."""
    seconds = max(0.0, seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = f"{int(hours)}h" if hours else ""
    if hours or minutes:
        out += f"{int(minutes)}m"
    return out + f"{round(secs, 2):g}s"


class _Window:
    """Sliding-window usage: (time, tokens) of the requests admitted in the last ``period_s``."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.entries: deque[tuple[float, int]] = deque()

    def trim(self, now: float) -> None:
        while self.entries and self.entries[0][0] <= now - self.period_s:
            self.entries.popleft()

    def used(self) -> tuple[int, int]:
        return len(self.entries), sum(t for _, t in self.entries)

    def wait_for(self, now: float, requests: int | None, tokens: int | None, cost: int) -> float:
        """Seconds until one more request of ``cost`` tokens fits (0 when it fits now)."""
        n, used = self.used()
        wait = 0.0
        if requests is not None and n + 1 > requests:
            wait = self.entries[n - requests][0] + self.period_s - now
        if tokens is not None and used + cost > tokens:
            freed, need = 0, used + cost - tokens
            for t, c in self.entries:
                freed += c
                if freed >= need:
                    wait = max(wait, t + self.period_s - now)
                    break
        return max(wait, 0.0)


class FakeProvider:
    """Start with :meth:`start` (or ``with``); read :meth:`stats`; stop with :meth:`stop`."""

    def __init__(
        self,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        period_s: float = 60.0,
        latency_s: float = 0.0,
        hang_s: float = 5.0,
        api_key: str | None = None,
        responder: Responder | None = None,
        retry_after: bool = True,
        retry_after_ms: bool = False,
        limit_headers: bool = True,
        injected_retry_after_s: int | None = 1,
        count_rejected: bool = False,
        quantize: bool = False,
        usage: bool = True,
        reasoning_tokens: int | None = None,
        models: Collection[str] | None = None,
        errors: ErrorShape = "openai",
        parallel: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.rpm, self.tpm, self.period_s = rpm, tpm, period_s
        self.latency_s, self.hang_s = latency_s, hang_s
        #: While set to an Event, every request waits for it (at most 120 s) before it is answered: a test holds a
        #: call in flight while it acts (``ragscore cancel``), then sets it, instead of racing a latency.
        self.hold: threading.Event | None = None
        #: ``(KIND, Event)``: a request answered the injected fault KIND waits for the Event (at most 120 s), the others
        #: answered as usual: a test holds one call's 401 until other calls' 500s opened the breaker.
        self.hold_fault: tuple[str, threading.Event] | None = None
        self.api_key = api_key
        #: Requests with this key (``Bearer``) are answered an injected 429 (``injected_retry_after_s``), as by an
        #: account over its limit; those with another key are answered as usual.
        self.rate_limited_key: str | None = None
        self.responder = responder
        self.retry_after, self.retry_after_ms = retry_after, retry_after_ms
        #: Whether replies carry ``x-ratelimit-*`` headers (vLLM, Ollama and most local servers send none).
        self.limit_headers = limit_headers
        #: ``retry-after`` of an injected 429 (whole seconds); None: none (nor a message saying how long to wait).
        self.injected_retry_after_s = injected_retry_after_s
        self.count_rejected = count_rejected
        #: Requests per 60th of ``period_s`` (``quantize``), else None.
        self.per_second = math.ceil(rpm / 60) if quantize and rpm is not None else None
        self.usage, self.reasoning_tokens = usage, reasoning_tokens
        #: The model names requests may give (None: any).
        self.models = frozenset(models) if models is not None else None
        #: Whose error bodies it sends (:data:`ErrorShape`).
        self.errors = errors
        #: Requests answered at once (None: any number), the others queued, as a local server on one GPU does
        #: (Ollama's OLLAMA_NUM_PARALLEL, llama.cpp's --parallel): a queued request's wait counts in its latency.
        self.parallel = threading.BoundedSemaphore(parallel) if parallel else None
        self._addr = (host, port)
        self._lock = threading.Lock()
        self._window = _Window(period_s)
        self._second = _Window(period_s / 60)
        self._queued_faults: deque[str] = deque()
        self._seen: Counter[str] = Counter()
        self._answered: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reset()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FakeProvider:
        server = ThreadingHTTPServer(self._addr, _Handler, bind_and_activate=False)
        server.request_queue_size = 256
        server.daemon_threads = True
        server.server_bind()
        server.server_activate()
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Root URL: the Groq SDK's ``base_url``."""
        assert self._server is not None, "start the fake first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for OpenAI-compatible clients (``.../v1``)."""
        return self.url + "/v1"

    # ------------------------------------------------------------------ control and counters
    def reset(self) -> None:
        """Forget counters, windows and per-prompt history."""
        with self._lock:
            self.counts: Counter[str] = Counter()
            self.log: list[dict[str, Any]] = []
            self.prompts: list[str] = []
            self.bodies: list[dict[str, Any]] = []  # every completion request's JSON body
            self.in_flight = 0
            self.max_in_flight = 0
            self._window = _Window(self.period_s)
            self._second = _Window(self.period_s / 60)
            self._queued_faults.clear()
            self._seen.clear()
            self._answered.clear()

    def fail_next(self, kind: str, n: int = 1) -> None:
        """Make the next ``n`` completion requests (any prompt) fail with ``kind``."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; choose from {FAULT_KINDS}")
        with self._lock:
            self._queued_faults.extend([kind] * n)

    def stats(self) -> dict[str, Any]:
        """Counters: ``requests`` (all completion requests), ``ok``, ``rate_limited``, ``fault:<kind>``,
        ``unauthorized``, ``unknown_model``, ``tokens_in``, ``tokens_out``, ``quantized`` (429s of the per-second limit
        alone), and ``max_in_flight``."""
        with self._lock:
            return {**self.counts, "max_in_flight": self.max_in_flight}

    # ------------------------------------------------------------------ request handling (under the handler)
    def _limit_headers(self, now: float) -> dict[str, str]:
        headers: dict[str, str] = {}
        if not self.limit_headers:
            return headers
        n, used = self._window.used()
        oldest = self._window.entries[0][0] if self._window.entries else now
        reset = format_duration(oldest + self.period_s - now if self._window.entries else 0.0)
        if self.rpm is not None:
            headers |= {"x-ratelimit-limit-requests": str(self.rpm),
                        "x-ratelimit-remaining-requests": str(max(0, self.rpm - n)),
                        "x-ratelimit-reset-requests": reset}  # fmt: skip
        if self.tpm is not None:
            headers |= {"x-ratelimit-limit-tokens": str(self.tpm),
                        "x-ratelimit-remaining-tokens": str(max(0, self.tpm - used)),
                        "x-ratelimit-reset-tokens": reset}  # fmt: skip
        return headers

    def _decide(self, body: dict[str, Any]) -> tuple[str, Any]:
        """Return ``(action, data)``: ("fault", kind), ("429", (wait, headers, msg)) or ("ok", reply...)."""
        messages = body.get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        key = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
        markers: dict[str, str] = {}
        for name, value in _MARKER.findall(prompt):
            markers.setdefault(name, value)
        with self._lock:
            self.counts["requests"] += 1
            self.prompts.append(prompt)
            self.bodies.append(body)
            seen = self._seen[key]
            self._seen[key] += 1
            if self._queued_faults:
                return "fault", self._queued_faults.popleft()
            if "fault" in markers:
                kind, _, times = markers["fault"].partition(":")
                if seen < int(times or 1):
                    return "fault", kind
            nth = self._answered[key]
        text = self.responder(prompt, nth) if self.responder else None
        if text is None and "reply" in markers:
            options = markers["reply"].split("||")
            text = options[min(nth, len(options) - 1)]
        if text is None:
            text = markers.get("rating", "0")
        if self.reasoning_tokens is not None:
            refused = _refused_by_a_reasoning_model(body)
            if refused:
                return "error", (400, refused, "unsupported_parameter")
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096)
        thinking = self.reasoning_tokens or 0
        finish = "stop"
        if thinking + count_tokens(text) > max_tokens:
            text, finish = ("" if thinking >= max_tokens else text[: (max_tokens - thinking) * 4]), "length"
        refusal = markers.get("refuse")
        tokens_in = sum(count_tokens(str(m.get("content", ""))) + 4 for m in messages)
        tokens_out = min(max_tokens, thinking + count_tokens(text))
        with self._lock:
            now = time.monotonic()
            self._window.trim(now)
            self._second.trim(now)
            wait = self._window.wait_for(now, self.rpm, self.tpm, tokens_in + tokens_out)
            quantized = self._second.wait_for(now, self.per_second, None, 0)
            if wait > 0 or quantized > 0:
                self.counts["rate_limited"] += 1
                if wait <= 0:
                    self.counts["quantized"] += 1
                self.log.append({"t": now, "status": 429, "tokens": 0})
                if self.count_rejected:
                    self._window.entries.append((now, 0))
                    self._second.entries.append((now, 0))
                return "429", (max(wait, quantized), self._limit_headers(now))
            self._window.entries.append((now, tokens_in + tokens_out))
            self._second.entries.append((now, 0))
            self._answered[key] += 1
            self.counts["ok"] += 1
            self.counts["tokens_in"] += tokens_in
            self.counts["tokens_out"] += tokens_out
            self.log.append({"t": now, "status": 200, "tokens": tokens_in + tokens_out})
            headers = self._limit_headers(now)
        reply = {
            "id": f"chatcmpl-fake-{self.counts['requests']}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None if refusal else text, "refusal": refusal},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],  # fmt: skip
            "usage": {
                "prompt_tokens": tokens_in,
                "completion_tokens": tokens_out,
                "total_tokens": tokens_in + tokens_out,
            },  # fmt: skip
            "system_fingerprint": "fp_fake",
        }
        if not self.usage:
            del reply["usage"]
        return "ok", (reply, headers)

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _refused_by_a_reasoning_model(body: dict[str, Any]) -> str | None:
    """What OpenAI's reasoning models answer (400) to a request made for a chat model."""
    if "max_tokens" in body:
        return (
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
        )
    if body.get("temperature", 1) != 1:
        return (f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. Only the "
                "default (1) value is supported.")  # fmt: skip
    return None


def _error_body(message: str, type_: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code}}


def _shaped_error(body: Any, status: int, shape: ErrorShape) -> Any:
    """An OpenAI-style error ``body`` as the ``shape`` server would send it (:data:`ErrorShape`)."""
    error = body.get("error") if isinstance(body, dict) else None
    if shape == "openai" or not isinstance(error, dict):
        return body
    if shape == "ollama":  # its /v1: the type by the status alone, no code
        kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
        return {"error": {"message": error["message"], "type": kind, "param": None, "code": None}}
    if shape == "vllm":
        kind = HTTPStatus(status).phrase.replace(" ", "") + "Error"  # vLLM's type: BadRequestError, NotFoundError
        return {"object": "error", "message": error["message"], "type": kind, "param": None, "code": status}
    return {"error": {"code": status, "message": error["message"], "type": error["type"]}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ThreadingHTTPServer

    @property
    def fake(self) -> FakeProvider:
        return self.server.fake  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the default stderr log
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None, raw: bytes | None = None) -> None:
        if status >= 400 and raw is None:
            body = _shaped_error(body, status, self.fake.errors)
        data = raw if raw is not None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
            self.close_connection = True

    def _send_slowly(self, data: bytes, over_s: float, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not write_slowly(self.wfile, data, over_s):  # the client gave up
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/_stats":
            self._send(200, self.fake.stats())
        else:
            self._send(404, _error_body("not found", "invalid_request_error", "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path == "/_fail":
            spec = json.loads(raw or b"{}")
            self.fake.fail_next(spec["kind"], int(spec.get("n", 1)))
            self._send(200, {"ok": True})
            return
        if self.path not in COMPLETION_PATHS:
            self._send(404, _error_body(f"unknown path {self.path}", "invalid_request_error", "not_found"))
            return
        fake = self.fake
        fake._enter()
        try:
            self._complete(fake, raw)
        finally:
            fake._leave()

    def _complete(self, fake: FakeProvider, raw: bytes) -> None:
        if fake.api_key is not None:
            given = self.headers.get("Authorization", "")
            if given != f"Bearer {fake.api_key}":
                with fake._lock:
                    fake.counts["unauthorized"] += 1
                self._send(401, _error_body(self._refused_key(given), "invalid_request_error", "invalid_api_key"))
                return
        if fake.rate_limited_key is not None and self.headers.get("Authorization") == f"Bearer {fake.rate_limited_key}":
            with fake._lock:
                fake.counts["requests"] += 1
            self._fault(fake, "429")
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send(400, _error_body("request body is not JSON", "invalid_request_error", "bad_json"))
            return
        if fake.models is not None and body.get("model") not in fake.models:
            self._unknown_model(fake, str(body.get("model")))
            return
        action, data = fake._decide(body)
        with fake.parallel or nullcontext():
            self._answer(fake, action, data)

    def _answer(self, fake: FakeProvider, action: str, data: Any) -> None:
        if fake.hold is not None:
            fake.hold.wait(120)
        if action == "fault" and fake.hold_fault is not None and data == fake.hold_fault[0]:
            fake.hold_fault[1].wait(120)
        if fake.latency_s:
            time.sleep(fake.latency_s)
        if action == "ok":
            reply, headers = data
            self._send(200, reply, headers)
        elif action == "error":
            status, message, code = data
            self._send(status, _error_body(message, "invalid_request_error", code))
        elif action == "429":
            wait, headers = data
            if fake.retry_after:
                headers = {**headers, "retry-after": str(max(1, math.ceil(wait)))}
            if fake.retry_after and fake.retry_after_ms:
                headers["retry-after-ms"] = str(math.ceil(wait * 1000))
            message = f"Rate limit reached. Please try again in {wait:.2f}s."
            self._send(429, _error_body(message, "requests", "rate_limit_exceeded"), headers)
        else:
            self._fault(fake, data)

    def _refused_key(self, given: str) -> str:
        """Groq's message for a key it refuses (on Groq's path), or OpenAI's, which echoes the key: whole when it is
        short ("Incorrect API key provided: hello."), so clients must take it out of what they log."""
        if self.path == COMPLETION_PATHS[0]:
            return "Invalid API Key"
        key = given.removeprefix("Bearer ")
        return f"Incorrect API key provided: {key}. You can find your API key at https://platform.openai.com/account/api-keys."

    def _unknown_model(self, fake: FakeProvider, model: str) -> None:
        """Groq's and OpenAI's answer to a model name they do not serve (a typo, one retired)."""
        with fake._lock:
            fake.counts["requests"] += 1
            fake.counts["unknown_model"] += 1
        message, type_ = {
            "vllm": (f"The model `{model}` does not exist.", "invalid_request_error"),
            "ollama": (f'model "{model}" not found, try pulling it first', "api_error"),
        }.get(
            fake.errors,
            (f"The model `{model}` does not exist or you do not have access to it.", "invalid_request_error"),
        )
        self._send(404, _error_body(message, type_, "model_not_found" if fake.errors == "openai" else ""))

    def _fault(self, fake: FakeProvider, kind: str) -> None:
        with fake._lock:
            fake.counts[f"fault:{kind}"] += 1
        if kind == "429":
            wait = {} if fake.injected_retry_after_s is None else {"retry-after": str(fake.injected_retry_after_s)}
            self._send(429, _error_body("Rate limit reached (injected).", "requests", "rate_limit_exceeded"), wait)
        elif kind == "quota":
            message = "You exceeded your current quota, please check your plan and billing details."
            self._send(429, _error_body(message, "insufficient_quota", "insufficient_quota"))
        elif kind == "groq_429":  # Groq's ordinary rate-limit reply: it links to the billing page
            message = ("Rate limit reached for model `llama-3.1-8b-instant` in organization `org_01` service tier "
                       "`on_demand` on tokens per minute (TPM): Limit 6000, Used 5861, Requested 400. Please try "
                       "again in 2.61s. Need more tokens? Upgrade to Dev Tier today at "
                       "https://console.groq.com/settings/billing")  # fmt: skip
            self._send(429, _error_body(message, "tokens", "rate_limit_exceeded"),
                       {"retry-after": str(fake.injected_retry_after_s)})  # fmt: skip
        elif kind == "too_large_429":  # OpenAI: one request over the tokens-per-minute limit
            message = (
                "Request too large for gpt-4o in organization org-01 on tokens per min (TPM): Limit 30000, "
                "Requested 45012. The input or output tokens must be reduced in order to run successfully."
            )
            self._send(429, _error_body(message, "tokens", "rate_limit_exceeded"), {"retry-after": "1"})
        elif kind == "context_length":  # OpenAI and vLLM: the prompt is longer than the model's context
            message = (
                "This model's maximum context length is 8192 tokens. However, your messages resulted in "
                "9120 tokens. Please reduce the length of the messages."
            )
            self._send(400, _error_body(message, "invalid_request_error", "context_length_exceeded"))
        elif kind == "context_size":  # llama.cpp's llama-server: the prompt is longer than its context (-c)
            message = ("the request exceeds the available context size. try increasing the context size or enable "
                       "context shift")  # fmt: skip
            self._send(400, _error_body(message, "exceed_context_size_error", "exceed_context_size_error"))
        elif kind == "413":  # Groq: the request is larger than the model's limits
            message = (
                "Request too large for model `llama-3.1-8b-instant` in organization `org_01` on tokens per "
                "minute (TPM): Limit 6000, Requested 9120, please reduce your message size and try again."
            )
            self._send(413, _error_body(message, "tokens", "rate_limit_exceeded"))
        elif kind == "498":  # Groq's flex tier: no capacity right now, retry with backoff
            message = "Flex tier capacity exceeded. This model is currently experiencing high demand."
            self._send(498, _error_body(message, "capacity_exceeded", "capacity_exceeded"))
        elif kind == "401":  # the key refused as it is at the door, after the request was taken (a key revoked)
            self._send(401, _error_body(self._refused_key(self.headers.get("Authorization", "")),
                                        "invalid_request_error", "invalid_api_key"))  # fmt: skip
        elif kind == "401_empty":  # a proxy's or gateway's refusal with no body at all
            self._send(401, None, raw=b"")
        elif kind == "400":
            self._send(400, _error_body("Bad request (injected).", "invalid_request_error", "bad_request"))
        elif kind in ("500", "502", "503"):
            self._send(int(kind), _error_body("Internal server error (injected).", "server_error", "internal"))
        elif kind == "timeout":
            time.sleep(fake.hang_s)
            self._send(200, _error_body("too late", "server_error", "late"))
        elif kind == "trickle":  # a whole, valid reply sent a byte at a time over ``hang_s``
            reply = {"choices": [{"message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 5, "completion_tokens": 1}}  # fmt: skip
            self._send_slowly(json.dumps(reply).encode(), fake.hang_s)
        elif kind == "trickle_500":  # an error reply sent a byte at a time over ``hang_s``
            self._send_slowly(json.dumps(_error_body("overloaded", "server_error", "internal")).encode(), fake.hang_s,
                              status=500)  # fmt: skip
        elif kind == "huge":  # a 200 whose body never ends before 17 MiB
            self._send(200, None, raw=b'{"choices": [{"message": {"content": "' + b"x" * (17 << 20) + b'"}}]}')
        elif kind == "malformed":
            self._send(200, None, raw=b'{"id": "chatcmpl-broken", "choices": [{"message": ')
        elif kind == "disconnect":
            self.close_connection = True
        else:
            self._send(500, _error_body(f"unknown fault {kind}", "server_error", "internal"))


def main(argv: list[str] | None = None) -> None:
    """Serve a fake provider until interrupted (for benchmarks driving it from other processes)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rpm", type=int)
    parser.add_argument("--tpm", type=int)
    parser.add_argument("--period", type=float, default=60.0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--api-key")
    parser.add_argument("--count-rejected", action="store_true", help="429'd requests take a window slot too")
    parser.add_argument("--no-retry-after", action="store_true", help="429s carry no retry-after header")
    parser.add_argument("--quantize", action="store_true", help="also at most ceil(rpm / 60) requests per second")
    parser.add_argument("--errors", choices=get_args(ErrorShape), default="openai", help="whose error bodies to send")
    parser.add_argument("--no-usage", action="store_true", help="replies carry no usage (as some local servers)")
    parser.add_argument("--no-limit-headers", action="store_true", help="no x-ratelimit-* headers (local servers)")
    parser.add_argument("--parallel", type=int, help="answer N requests at a time, queue the rest (one GPU)")
    args = parser.parse_args(argv)
    fake = FakeProvider(rpm=args.rpm, tpm=args.tpm, period_s=args.period, latency_s=args.latency,
                        api_key=args.api_key, count_rejected=args.count_rejected, quantize=args.quantize,
                        retry_after=not args.no_retry_after, errors=args.errors, usage=not args.no_usage,
                        limit_headers=not args.no_limit_headers, parallel=args.parallel,
                        port=args.port).start()  # fmt: skip
    print(fake.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        fake.stop()


if __name__ == "__main__":
    main()
