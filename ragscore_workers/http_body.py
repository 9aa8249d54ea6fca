"""Read an HTTP reply's body within a deadline and a size cap (judge providers and HTTP targets).

httpx's timeout bounds each phase of a call (the pooled connection, connect, write, each read), not the call: a
server that sends its reply a few bytes at a time, each well within the read timeout, holds the call (its
worker slot, a judge call's budget hold) for as long as it likes, and one that never ends its body fills the
worker's memory. :func:`read_body` reads a streamed reply and stops both.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import httpx

__all__ = ["ATTEMPT_TIMEOUTS", "MAX_REPLY_BYTES", "BoundedTransport", "ReplyTooLarge", "ReplyTooSlow", "read_body"]

#: A reply body larger than this is refused: a chat completion or a RAG answer with its contexts is KiBs.
MAX_REPLY_BYTES = 16 * 1024 * 1024
#: How many ``timeout_s`` one call may take at most: httpx bounds the wait for a pooled connection, the connect,
#: the write and the reply's first bytes by ``timeout_s`` each, and :func:`read_body` ends the body one read past
#: ``timeout_s`` from the start.
ATTEMPT_TIMEOUTS = 5


class ReplyTooSlow(Exception):
    """The body was still arriving ``timeout_s`` after the call started."""


class ReplyTooLarge(Exception):
    """The body grew past :data:`MAX_REPLY_BYTES`."""


def read_body(chunks: Iterable[bytes], started: float, timeout_s: float) -> bytes:
    """The body ``chunks`` stream (``response.iter_bytes()``), checked after every chunk against ``timeout_s``
    since ``started`` (``time.monotonic``) and against :data:`MAX_REPLY_BYTES`."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if time.monotonic() - started > timeout_s:
            raise ReplyTooSlow(f"timed out after {timeout_s} s, the reply still arriving")
        if len(body) > MAX_REPLY_BYTES:
            raise ReplyTooLarge(f"reply over {MAX_REPLY_BYTES >> 20} MiB")
    return bytes(body)


class _BoundedStream(httpx.SyncByteStream):
    """A response's raw byte stream, cut as :func:`read_body` cuts a body (as httpx errors, so a library that
    reads the body itself, as the groq SDK does an error reply's, raises what it raises for a timeout)."""

    def __init__(self, inner: httpx.SyncByteStream, request: httpx.Request, started: float, timeout_s: float) -> None:
        self._inner, self._request, self._started, self._timeout_s = inner, request, started, timeout_s

    def __iter__(self) -> Iterator[bytes]:
        size = 0
        for chunk in self._inner:
            size += len(chunk)
            if time.monotonic() - self._started > self._timeout_s:
                raise httpx.ReadTimeout(
                    f"the reply was still arriving after {self._timeout_s} s", request=self._request
                )
            if size > MAX_REPLY_BYTES:
                raise httpx.ReadError(f"reply over {MAX_REPLY_BYTES >> 20} MiB", request=self._request)
            yield chunk

    def close(self) -> None:
        self._inner.close()


class BoundedTransport(httpx.HTTPTransport):
    """An httpx transport whose every response body is bounded as a whole: ``timeout_s`` from the request's start
    and :data:`MAX_REPLY_BYTES` (for clients whose bodies a library reads, such as the groq SDK's error replies)."""

    def __init__(self, timeout_s: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.timeout_s = timeout_s

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        response = super().handle_request(request)
        assert isinstance(response.stream, httpx.SyncByteStream)
        response.stream = _BoundedStream(response.stream, request, started, self.timeout_s)
        return response
