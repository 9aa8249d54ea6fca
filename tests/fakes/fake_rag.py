"""A fake RAG system under test: a real HTTP server answering questions from a small corpus.

``POST /<system>/ask`` (or ``GET``, the request as query parameters) with ``{"question", "k", "filter", "model",
"id"}`` returns the Socioscope-style reply ``{"answer", "contexts": [{"doc_id", "text"}], "citations":
[{"source_index", "quote"}], "evidence": [sentence ids]}``. Each question of :func:`questions` names its
document, so the server knows the right document and what each system would say about it:

* ``exact``: quotes two sentences of the document verbatim and cites their ids: verbatim 1.0, citation 1.0.
* ``sloppy``: on even-numbered questions the second quote is paraphrased (not verbatim) and the second
  cited sentence id is wrong: verbatim 0.5, citation precision/recall 0.5; odd-numbered ones as ``exact``.
* ``dead`` (and every system in ``failing``): every request gets HTTP 500.
* ``flaky``: the first request of each question gets HTTP 503, the next is answered as ``exact``.
* ``limited``: a 429 with ``retry-after`` on every ``limit_every``-th request.
* ``throttled``: the first ``throttled_first`` requests of each question get a 429 with ``retry-after`` (none when
  ``retry_after_s`` is None), the next is answered as ``exact``.
* ``saturated``: every request of question 0 gets a 429 as ``throttled``'s; the others are answered as ``exact``.
* ``slow``: answered as ``exact`` after ``slow_s`` seconds (a system that takes its time).

Only the ``k`` top contexts are returned (the gold document first); ``filter`` must be a JSON object.
Every request is counted per system (``calls``); the token, when set, must come as ``Bearer <token>`` (or in the
query or body: ``token_in``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .trickle import write_slowly

__all__ = ["CORPUS", "FakeRag", "answer_locally", "questions"]

CORPUS: dict[str, list[str]] = {
    "d0": ["The Rhine flows through six countries.", "Its source lies in the Swiss Alps.",
           "It reaches the North Sea near Rotterdam."],
    "d1": ["Basalt forms when lava cools quickly.", "It is the most common rock of the ocean floor.",
           "Columnar basalt splits into hexagonal pillars."],
    "d2": ["Honey bees communicate with a waggle dance.", "The dance points towards flowers relative to the sun.",
           "Its length tells how far away the food is."],
    "d3": ["The first public library in Boston opened in 1854.", "It lent books to every resident for free.",
           "Its reading room seats over two hundred people."],
    "d4": ["Copper turns green as it oxidises.", "The green layer is called verdigris.",
           "It protects the metal underneath from further corrosion."],
    "d5": ["Penguins cannot fly but swim very fast.", "Emperor penguins dive deeper than five hundred metres.",
           "They breed during the Antarctic winter."],
}  # fmt: skip


def questions(n: int = 6) -> list[dict[str, Any]]:
    """Dataset rows: question i is about document d(i mod 6); reference = its first sentence; gold evidence =
    its first two sentences."""
    docs = sorted(CORPUS)
    rows = []
    for i in range(n):
        doc = docs[i % len(docs)]
        rows.append({"id": f"q{i}", "question": f"What does record {doc} say? (question {i})",
                     "reference": CORPUS[doc][0], "gold_doc_id": doc,
                     "gold_evidence_sentences": [f"{doc}s0", f"{doc}s1"], "metadata": {"lang": "en"}})  # fmt: skip
    return rows


#: Systems answering as ``exact`` once they answer.
_LIKE_EXACT = ("flaky", "throttled", "saturated", "slow")


def _question_number(question: str) -> int:
    return int(question.rsplit("(question ", 1)[1].rstrip(")"))


def answer_locally(system: str, request: dict[str, Any]) -> dict[str, Any]:
    """The reply of ``system`` to a request (the server's logic; also a Python-callable target)."""
    question = str(request.get("question", ""))
    doc = next((d for d in CORPUS if f"record {d} " in question), None)
    if doc is None:
        return {"answer": "I do not know.", "contexts": [], "citations": [], "evidence": []}
    k = int(request.get("k", 3))
    others = [d for d in sorted(CORPUS) if d != doc]
    contexts = [{"doc_id": d, "text": " ".join(CORPUS[d])} for d in [doc, *others][:k]]
    sentences = CORPUS[doc]
    quotes = [sentences[0], sentences[1]]
    evidence = [f"{doc}s0", f"{doc}s1"]
    if system == "sloppy" and _question_number(question) % 2 == 0:
        quotes[1] = "Roughly speaking, " + sentences[1].lower()  # a paraphrase: not in the context
        evidence[1] = f"{doc}s2"
    answer = f"{quotes[0]} {quotes[1]}"
    return {
        "answer": answer,
        "contexts": contexts,
        "citations": [{"source_index": 0, "quote": q} for q in quotes],
        "evidence": evidence,
        "model": request.get("model"),
    }


def callable_quoting_its_key(request: dict[str, Any]) -> dict[str, Any]:
    """``tests.fakes.fake_rag:callable_quoting_its_key``: a library whose client error quotes its API key."""
    raise RuntimeError(f"upstream refused key {os.environ.get('FAKE_LIB_KEY')}")


def callable_quoting_its_llm_key(request: dict[str, Any]) -> dict[str, Any]:
    """``tests.fakes.fake_rag:callable_quoting_its_llm_key``: a library whose own LLM client's error quotes the
    key it read from the worker's environment (a Gemini-style ``?key=`` url)."""
    raise RuntimeError(f"401 for url https://llm.example/v1/generate?key={os.environ.get('FAKE_LLM_API_KEY')}")


def callable_target(request: dict[str, Any]) -> dict[str, Any]:
    """``tests.fakes.fake_rag:callable_target``: the ``exact`` system as a Python function."""
    return answer_locally("exact", request)


#: Characters of :func:`callable_long_answer`'s long answer: past RAGSCORE_MAX_FIELD_CHARS' default (1,000,000).
LONG_ANSWER_CHARS = 1_200_000


def callable_long_answer(request: dict[str, Any]) -> dict[str, Any]:
    """``tests.fakes.fake_rag:callable_long_answer``: question 0 gets an answer of :data:`LONG_ANSWER_CHARS`
    characters (a target's reply has no field limit), every other its document's first sentence (the reference)."""
    question = str(request.get("question", ""))
    if _question_number(question) == 0:
        return {"answer": ("A long answer. " * LONG_ANSWER_CHARS)[:LONG_ANSWER_CHARS]}
    return {"answer": next(CORPUS[d][0] for d in CORPUS if f"record {d} " in question)}


def callable_with_extras(request: dict[str, Any]) -> dict[str, Any]:
    """``tests.fakes.fake_rag:callable_with_extras``: an answer with half an emoji, and fields JSON cannot hold that
    no response path reads (a library returning its own objects)."""
    import datetime

    return {"answer": "Paris \ud83d", "contexts": ["Paris is in France."], "when": datetime.date(2026, 1, 1),
            "tags": {"geo"}, "raw": b"\x00"}  # fmt: skip


class FakeRag:
    """Start with ``with FakeRag() as rag:``; ``rag.url(system)`` is the endpoint of one system."""

    def __init__(
        self,
        token: str | None = None,
        limit_every: int = 3,
        retry_after_s: float | None = 1.0,
        token_in: str = "header",
        throttled_first: int = 3,
        slow_s: float = 1.0,
    ) -> None:
        self.token = token
        #: Where the token must come: ``header`` (``Bearer <token>``), ``query:NAME`` or ``body:NAME``.
        self.token_in = token_in
        self.limit_every = limit_every
        self.retry_after_s = retry_after_s
        self.throttled_first = throttled_first
        #: Seconds system ``slow`` takes to answer (read at each request: a test may speed it up).
        self.slow_s = slow_s
        self.calls: Counter[str] = Counter()
        self.failing: set[str] = {"dead"}
        self._seen: Counter[tuple[str, str]] = Counter()
        self.requests: list[dict[str, Any]] = []
        #: While set to an Event, every request waits for it (at most 120 s) before it is answered: a test holds a
        #: call in flight while it acts (``ragscore cancel``), then sets it, instead of racing a latency.
        self.hold: threading.Event | None = None
        #: The first request :attr:`hold` holds (1: every one; 2: the first is answered at once, the rest wait).
        self.hold_from = 1
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler(), bind_and_activate=False)
        self._server.request_queue_size = 128  # socketserver's 5 drops connections of a loaded run's burst
        self._server.daemon_threads = True
        self._server.server_bind()
        self._server.server_activate()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, system: str) -> str:
        return f"http://127.0.0.1:{self.port}/{system}/ask"

    def __enter__(self) -> FakeRag:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _reply(
                self, status: int, body: Any, headers: dict[str, str] | None = None, slowly_s: float = 0.0
            ) -> None:
                charset = (headers or {}).pop("charset", None)  # a reply in another encoding (and saying so)
                label = (headers or {}).pop("label", charset)  # what the header says it is (a servlet's default)
                data = json.dumps(body, ensure_ascii=charset is None).encode(charset or "ascii")
                self.send_response(status)
                self.send_header("content-type", "application/json" + (f"; charset={label}" if label else ""))
                self.send_header("content-length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if not slowly_s:
                    self.wfile.write(data)
                elif not write_slowly(self.wfile, data, slowly_s):  # the client gave up
                    self.close_connection = True

            def do_GET(self) -> None:  # the request as query parameters
                self._answer(dict(parse_qsl(urlsplit(self.path).query)))

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._reply(400, {"error": "body is not JSON"})
                    return
                self._answer(request)

            def _token_ok(self, request: dict[str, Any]) -> bool:
                place, _, name = fake.token_in.partition(":")
                given = {"header": lambda: self.headers.get("authorization"),
                         "query": lambda: dict(parse_qsl(urlsplit(self.path).query)).get(name),
                         "body": lambda: request.get(name)}[place]()  # fmt: skip
                return given == (f"Bearer {fake.token}" if place == "header" else fake.token)

            def _answer(self, request: dict[str, Any]) -> None:
                parts = urlsplit(self.path)
                system = parts.path.strip("/").split("/")[0]
                with fake._lock:
                    fake.calls[system] += 1
                    nth = fake.calls[system]
                    fake._seen[(system, str(request.get("question")))] += 1
                    asked = fake._seen[(system, str(request.get("question")))]
                    fake.requests.append({"system": system, "body": request, "t": time.monotonic(),
                                          "authorization": self.headers.get("authorization"),
                                          "method": self.command, "query": parts.query})  # fmt: skip
                    hold = fake.hold if len(fake.requests) >= fake.hold_from else None
                if hold is not None:
                    hold.wait(120)
                if system == "slow":
                    time.sleep(fake.slow_s)
                if fake.token is not None and not self._token_ok(request):
                    self._reply(401, {"error": "bad token"})
                elif not isinstance(request.get("filter", {}), dict):
                    self._reply(422, {"error": "filter must be an object"})
                elif system in fake.failing:
                    self._reply(500, {"error": "internal error"})
                elif system == "flaky" and asked == 1:
                    self._reply(503, {"error": "try again"})
                elif (
                    (system == "limited" and nth % fake.limit_every == 1)
                    or (system == "throttled" and asked <= fake.throttled_first)
                    or (system == "saturated" and "(question 0)" in str(request.get("question")))
                ):
                    wait = {} if fake.retry_after_s is None else {"retry-after": f"{fake.retry_after_s:g}"}
                    self._reply(429, {"error": "rate limited"}, wait)
                elif system == "echo":  # an error page quoting the credential it got, after some text
                    quoted = f"{'x' * int(request.get('pad', 0))} {self.headers.get('authorization')}"
                    self._reply(401, {"error": quoted})
                elif system == "debug":  # an answer quoting the request's credential (a debug echo, a proxy)
                    quoted = str(self.headers.get("authorization"))
                    self._reply(200, answer_locally("exact", request) | {"echo": {quoted: [quoted]}})
                elif system == "moved":  # FastAPI's redirect_slashes: 307 to the url with a trailing slash
                    self._reply(307, None, {"location": f"http://127.0.0.1:{self.server.server_address[1]}/exact/"})
                elif system == "latin1":  # an older Java/PHP service: ISO-8859-1, declared in its content-type
                    self._reply(200, answer_locally("exact", request) | {"answer": "Caf\u00e9 cr\u00e8me"},
                                {"charset": "iso-8859-1"})  # fmt: skip
                elif system == "mislabelled":  # UTF-8, as JSON is, under a Java servlet's default label
                    self._reply(200, answer_locally("exact", request) | {"answer": "Caf\u00e9 \u2615"},
                                {"charset": "utf-8", "label": "iso-8859-1"})  # fmt: skip
                elif system == "trickle":  # a whole, valid reply sent a byte at a time over 30 s
                    self._reply(200, answer_locally("exact", request), slowly_s=30.0)
                else:
                    self._reply(200, answer_locally("exact" if system in _LIKE_EXACT else system, request))

        return Handler
