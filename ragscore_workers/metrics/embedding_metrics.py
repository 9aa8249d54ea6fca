"""Embedding metrics (Auto-Analyst framework) on the embed queue; cosine = dot / (|a| |b| + 1e-10).

* ``context_relevance``: mean cos(question, context_i).
* ``context_sufficiency``: fraction of contexts with cos(question, context_i) >= ``threshold`` (0.5).
* ``answer_relevance`` and ``answer_correctness``: both cos(answer, reference), as the seed computes them.
* ``answer_hallucination``: the answer split on ``[.!?]``, stripped, empties dropped; the fraction of
  sentences whose best context cosine is < ``threshold`` (0.4). Empty answer -> 0.0; no sentences -> 0.0.
  Lower is better.

A context longer than the model reads (all-MiniLM-L6-v2: 254 word pieces besides [CLS] and [SEP], counted by the
model's own tokenizer; it silently drops the rest, so a sentence at the end of a long context would count as absent)
is embedded in overlapping windows of about ``WINDOW_PIECES`` pieces: its cosine with a text is the best of its
windows'. Shorter contexts are embedded whole, as the seed does.

A missing input (no question, answer or reference; a blank question or reference; no contexts for the three metrics
that read them: none with text, ``Row.has_contexts``) is unscorable with the reason, never 0: the seed's 0.0 (1.0 for
hallucination) for a row without contexts made a system that retrieves nothing (an LLM alone) read as the worse one.
Cosine scores are clamped to [0, 1] (scores are in [0, 1] everywhere); the raw value is in ``details``.

Every metric of a chunk asks :func:`chunk_vectors` for the texts of *all* the suite's embedding metrics,
so the first call encodes them in one batched call and the next ones find them in the process cache.
Per-run counters go to the run store hash ``ragscore:run:{run_id}:embed`` (see docs/metrics/embedding.md).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
import re
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

import numpy as np
import redis
from pydantic import BaseModel, ConfigDict, Field

from .._embedding_cache import text_hash
from ..embedding import STAT_NAMES, Encoder, Vectors, cosine, cosine_matrix, embed, get_encoder, process_info
from ..model_loading import noting_loads
from ..schemas import MetricResult, Queue, Row
from ..settings import get_settings
from ..store import RunStore
from .registry import NoParams, RunContext, register

__all__ = [
    "EMBEDDING_METRICS",
    "HallucinationParams",
    "SufficiencyParams",
    "answer_sentences",
    "chunk_vectors",
    "context_windows",
    "record_embed_stats",
    "texts_needed",
    "texts_unwindowed",
]

log = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r"[.!?]")
#: Longest sentence excerpt kept in ``answer_hallucination`` details.
MAX_EXCERPT_CHARS = 200
#: A context longer than the model reads (``Encoder.max_pieces`` word pieces) is embedded in windows of about
#: WINDOW_PIECES pieces (~50 words of English prose), a new one every WINDOW_STRIDE pieces: short enough that one
#: sentence is not drowned by its neighbours. Windows ignore sentence ends: the overlap (15 pieces) keeps a sentence
#: of up to 15 pieces whole in some window, a longer one only where it happens to fall (never one over 60 pieces);
#: docs/metrics/embedding.md says what that means for answer_hallucination.
WINDOW_PIECES = 60
WINDOW_STRIDE = 45
#: Chinese, Japanese and Korean characters: a BERT tokenizer makes each a word of its own.
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af])")
#: A BERT tokenizer's words before word pieces: runs of letters and digits, and each punctuation mark.
_PRE_TOKEN = re.compile(r"\w+|[^\w\s]")
#: Contexts whose windows are remembered per process: each metric of a chunk (64 questions by default) asks again
#: for the same contexts, and counting their pieces costs ~1.5 ms a context.
WINDOWS_MEMO = 2048
#: Longer contexts are cut again for each metric instead of remembered (2,048 contexts of a million characters each
#: would hold gigabytes): ~47 MB at most.
WINDOWS_MEMO_CHARS = 10_000
_WINDOWS: OrderedDict[tuple[str, str], list[str]] = OrderedDict()
_WINDOWS_LOCK = threading.Lock()
#: Piece counts of the questions, answers, references and sentences checked for a cut (:func:`_cut_off`) remembered
#: per process, by the text's hash: the metrics of a chunk check the same texts again, and so do rows sharing them
#: (each system's answer of a question has its question and reference). Counting them took ~70 % of an embed chunk
#: whose vectors were all cached (one tokenizer call a text, ~2 ms each).
PIECES_MEMO = 8192
_PIECES: OrderedDict[tuple[str, str], int] = OrderedDict()
_PIECES_LOCK = threading.Lock()


class SufficiencyParams(BaseModel):
    """``threshold``: a context counts as sufficient when its cosine with the question is >= this."""

    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(default=0.5, ge=-1.0, le=1.0)


class HallucinationParams(BaseModel):
    """``threshold``: a sentence is unsupported when its best context cosine is < this."""

    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(default=0.4, ge=-1.0, le=1.0)


def answer_sentences(answer: str) -> list[str]:
    """The answer split on ``.``, ``!`` and ``?``, stripped, empties dropped (as the seed does)."""
    return [s.strip() for s in _SENTENCE_END.split(answer) if s.strip()]


def context_windows(text: str, encoder: Encoder) -> list[str]:
    """The text whole when the model reads all of it (at most ``encoder.max_pieces`` word pieces of its own
    tokenizer), as the seed embeds it; else overlapping windows of about WINDOW_PIECES pieces, cut at pre-token
    boundaries, so text without spaces (CJK, long codes) is windowed too."""
    if len(text) > WINDOWS_MEMO_CHARS:
        return _cut_windows(text, encoder)
    key = (encoder.key, text)
    with _WINDOWS_LOCK:
        if key in _WINDOWS:
            _WINDOWS.move_to_end(key)
            return _WINDOWS[key]
    windows = _cut_windows(text, encoder)
    with _WINDOWS_LOCK:
        _WINDOWS[key] = windows
        if len(_WINDOWS) > WINDOWS_MEMO:
            _WINDOWS.popitem(last=False)
    return windows


def _cut_windows(text: str, encoder: Encoder) -> list[str]:
    if encoder.text_pieces(text) <= encoder.max_pieces:  # one tokenizer call: most contexts fit (4x the per-word one)
        return [text]
    spaced = _CJK.sub(r" \1 ", text)  # the tokenizer spaces CJK characters apart itself: same vectors
    matches = list(_PRE_TOKEN.finditer(spaced))
    pieces = encoder.word_pieces([m.group() for m in matches])
    tokens = [(m.start(), m.end()) for m in matches]
    ends = list(itertools.accumulate(pieces))  # pieces up to and including token i
    windows, first = [], 0
    while True:
        before = ends[first - 1] if first else 0
        last = max(first, bisect.bisect_right(ends, before + WINDOW_PIECES) - 1)
        windows.append(spaced[tokens[first][0] : tokens[last][1]])
        if last == len(tokens) - 1:
            return windows
        first = max(first + 1, bisect.bisect_left(ends, before + WINDOW_STRIDE) + 1)


def _windows(row: Row, encoder: Encoder | None) -> list[list[str]]:
    if encoder is None:  # only a row without contexts is scored without the model
        raise ValueError(f"row {row.id}: contexts to embed but no model to cut them")
    return [context_windows(c.text, encoder) for c in row.contexts]


def _contexts(row: Row, encoder: Encoder | None) -> list[str]:
    """Every text embedded for the row's contexts (a long context's windows)."""
    return [w for windows in _windows(row, encoder) for w in windows]


def _context_cosines(texts: list[str], row: Row, vectors: Vectors) -> np.ndarray:
    """Cosine of each text (rows) with each context (columns): a windowed context's best window."""
    groups = _windows(row, vectors.encoder)
    sims = cosine_matrix(vectors.matrix(texts), vectors.matrix([w for g in groups for w in g]))
    bounds = np.cumsum([0, *map(len, groups)])
    return np.stack([sims[:, a:b].max(axis=1) for a, b in zip(bounds[:-1], bounds[1:], strict=True)], axis=1)


# The texts each metric embeds for a row (nothing when it scores the row without the model); ``contexts(row)``: the
# texts of its contexts.
def _question_and_contexts(row: Row, contexts: Callable[[Row], list[str]]) -> list[str]:
    question = _filled(row.question, "question")
    return [question, *contexts(row)] if isinstance(question, str) and row.has_contexts else []


def _answer_and_reference(row: Row, contexts: Callable[[Row], list[str]]) -> list[str]:
    if row.answer is None or isinstance(reference := _filled(row.reference, "reference"), MetricResult):
        return []
    return [row.answer, reference]


def _filled(text: str | None, name: str) -> str | MetricResult:
    """``text``, the row's question or reference (``name``); unscorable when there is none, or it is blank (its vector
    would mean nothing; an empty answer is scored: it is an answer)."""
    if text is None:
        return MetricResult.unscorable(f"no {name}")
    return text if text.strip() else MetricResult.unscorable(f"empty {name}")


def _sentences_and_contexts(row: Row, contexts: Callable[[Row], list[str]]) -> list[str]:
    if not row.answer or not row.has_contexts:
        return []
    sentences = answer_sentences(row.answer)
    return [*sentences, *contexts(row)] if sentences else []


_TEXTS: dict[str, Callable[[Row, Callable[[Row], list[str]]], list[str]]] = {
    "context_relevance": _question_and_contexts,
    "context_sufficiency": _question_and_contexts,
    "answer_relevance": _answer_and_reference,
    "answer_correctness": _answer_and_reference,
    "answer_hallucination": _sentences_and_contexts,
}
#: The metrics whose texts :func:`texts_needed` lists.
EMBEDDING_METRICS = frozenset(_TEXTS)


def texts_needed(rows: Iterable[Row], metric_names: Iterable[str], encoder: Encoder | None) -> list[str]:
    """Every text the named embedding metrics embed for ``rows`` (duplicates included); ``encoder`` cuts long
    contexts into windows (None only when no row has contexts)."""
    return _texts(rows, metric_names, lambda row: _contexts(row, encoder))


def texts_unwindowed(rows: Iterable[Row], metric_names: Iterable[str]) -> list[str]:
    """:func:`texts_needed` with each context whole, no model loaded (the dry run's count): a context longer than the
    model reads is encoded as several overlapping windows instead, of about the same words."""
    return _texts(rows, metric_names, lambda row: [c.text for c in row.contexts])


def _texts(rows: Iterable[Row], metric_names: Iterable[str], contexts: Callable[[Row], list[str]]) -> list[str]:
    """The texts of :func:`texts_needed`, ``contexts(row)`` the texts embedded for a row's contexts."""
    fns = list(dict.fromkeys(_TEXTS[n] for n in metric_names if n in _TEXTS))
    return [text for row in rows for fn in fns for text in fn(row, contexts)]


def record_embed_stats(ctx: RunContext, stats: dict[str, int]) -> None:
    """Add this lookup's counters to the run's ``embed`` hash (with which process served it, and what it encoded)."""
    if ctx.redis is None:
        return
    key = RunStore.key(ctx.run_id, "embed")
    worker = f"{socket.gethostname()}:{os.getpid()}"
    try:
        pipe = ctx.redis.pipeline(transaction=False)
        for name in ("memory_hits", "cache_hits", "encoded", "encode_calls", "encode_ms"):
            pipe.hincrby(key, name, stats[name])
        pipe.hincrby(key, f"calls:{worker}", 1)
        if stats["encoded"]:  # its own share: the run's encode time is summed over processes encoding at once
            pipe.hincrby(key, f"encoded:{worker}", stats["encoded"])
            pipe.hincrby(key, f"encode_ms:{worker}", stats["encode_ms"])
        info = process_info()
        pipe.hset(key, f"loads:{worker}", info["loads"])
        if "device" in info:  # what the vectors were computed on: a GPU host's fp16, or a CPU fallback
            pipe.hset(key, f"device:{worker}", f"{info['device']} {info['precision']}")
        pipe.expire(key, get_settings().live_ttl_s)
        pipe.execute()
    except redis.RedisError as exc:  # counters are diagnostics: never fail the scores for them
        log.warning("could not record embed counters for run %s: %s", ctx.run_id, exc)


#: The last chunk's vectors, per thread: ``(rows, key, vectors)``.
_LAST_CHUNK = threading.local()


def chunk_vectors(rows: list[Row], ctx: RunContext) -> Vectors:
    """Vectors of every text any embedding metric of the suite needs for these rows (one batched encode).

    The metrics of a chunk are called one after another with the same ``rows`` list: the first call embeds,
    the next ones reuse its vectors (counted as memory hits) instead of hashing and looking up every text again.
    """
    names = tuple(spec.name for spec in ctx.suite.metrics)
    key = (ctx.run_id, names, ctx.suite.embedding)
    last = getattr(_LAST_CHUNK, "value", None)
    if last is not None and last[0] is rows and last[1] == key:
        vectors: Vectors = last[2]
        record_embed_stats(ctx, dict.fromkeys(STAT_NAMES, 0) | {"memory_hits": vectors.stats["distinct"]})
        return vectors
    noting = noting_loads(ctx.redis, ctx.run_id, Queue.EMBED)  # the run's progress says the model loads, then encodes
    encoder = get_encoder(ctx.suite.embedding, noting, ctx.redis) if any(row.contexts for row in rows) else None
    vectors = embed(texts_needed(rows, names, encoder), ctx.suite.embedding, ctx.redis, noting)
    _LAST_CHUNK.value = (rows, key, vectors)
    record_embed_stats(ctx, vectors.stats)
    return vectors


def _clamped(value: float, **details: object) -> MetricResult:
    return MetricResult(score=min(1.0, max(0.0, value)), details=details)


def _cut_off(vectors: Vectors, texts: dict[str, str]) -> dict[str, list[str]]:
    """``{"truncated": [names]}`` for the texts longer than the model reads (it embedded their beginning only and
    dropped the rest, as the seed's model does), else nothing. Long contexts are windowed instead. ``vectors`` has
    its encoder whenever it holds a text (:func:`embed` loads it)."""
    encoder = vectors.encoder
    if encoder is None:
        return {}
    counts = _text_pieces(encoder, list(texts.values()))
    cut = [name for name, pieces in zip(texts, counts, strict=True) if pieces > encoder.max_pieces]
    return {"truncated": cut} if cut else {}


def _text_pieces(encoder: Encoder, texts: list[str]) -> list[int]:
    """:meth:`Encoder.text_pieces` of each text: those remembered from :data:`_PIECES`, the rest in one call."""
    model = encoder.key  # the model's own tokenizer: counts by another are not its
    keys = [(model, text_hash(text)) for text in texts]
    with _PIECES_LOCK:
        known = {key: _PIECES[key] for key in keys if key in _PIECES}
        for key in known:
            _PIECES.move_to_end(key)
    todo = {key: text for key, text in zip(keys, texts, strict=True) if key not in known}
    if todo:
        counted_now = dict(zip(todo, encoder.word_pieces(list(todo.values())), strict=True))
        known |= counted_now
        with _PIECES_LOCK:
            _PIECES.update(counted_now)
            while len(_PIECES) > PIECES_MEMO:
                _PIECES.popitem(last=False)
    return [known[key] for key in keys]


def _question_cosines(question: str, row: Row, vectors: Vectors) -> list[float]:
    return _context_cosines([question], row, vectors)[0].tolist()


def score_context_relevance(row: Row, vectors: Vectors) -> MetricResult:
    if isinstance(question := _filled(row.question, "question"), MetricResult):
        return question
    if not row.has_contexts:
        return MetricResult.unscorable("no contexts")
    cosines = _question_cosines(question, row, vectors)
    mean = float(np.mean(cosines))
    return _clamped(mean, mean_cosine=mean, cosines=cosines, **_cut_off(vectors, {"question": question}))


def score_context_sufficiency(row: Row, vectors: Vectors, params: SufficiencyParams) -> MetricResult:
    if isinstance(question := _filled(row.question, "question"), MetricResult):
        return question
    if not row.has_contexts:
        return MetricResult.unscorable("no contexts")
    cosines = _question_cosines(question, row, vectors)
    sufficient = sum(c >= params.threshold for c in cosines)
    return MetricResult(
        score=sufficient / len(cosines),
        details={"sufficient": sufficient, "contexts": len(cosines), "threshold": params.threshold, "cosines": cosines,
                 **_cut_off(vectors, {"question": question})},
    )  # fmt: skip


def score_answer_similarity(row: Row, vectors: Vectors) -> MetricResult:
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    if isinstance(reference := _filled(row.reference, "reference"), MetricResult):
        return reference
    value = cosine(vectors[row.answer], vectors[reference])
    return _clamped(value, cosine=value, **_cut_off(vectors, {"answer": row.answer, "reference": reference}))


def score_answer_hallucination(row: Row, vectors: Vectors, params: HallucinationParams) -> MetricResult:
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    if not row.answer:
        return MetricResult(score=0.0, details={"case": "empty answer"})
    if not row.has_contexts:
        return MetricResult.unscorable("no contexts")
    sentences = answer_sentences(row.answer)
    if not sentences:
        return MetricResult(score=0.0, details={"case": "no sentences"})
    best = _context_cosines(sentences, row, vectors).max(axis=1).tolist()
    unsupported = [i for i, b in enumerate(best) if b < params.threshold]
    return MetricResult(
        score=len(unsupported) / len(sentences),
        details={
            "sentences": len(sentences),
            "threshold": params.threshold,
            "best_cosines": best,
            "unsupported": [sentences[i][:MAX_EXCERPT_CHARS] for i in unsupported],
            **_cut_off(vectors, {f"sentence {i + 1}": s for i, s in enumerate(sentences)}),
        },
    )


@register("context_relevance", Queue.EMBED, kind="batch", needs=("question", "contexts"), reads=())
def context_relevance(rows: list[Row], params: NoParams, ctx: RunContext) -> list[MetricResult]:
    """Mean cosine of the question with each retrieved context (a row without contexts is unscorable)."""
    vectors = chunk_vectors(rows, ctx)
    return [score_context_relevance(row, vectors) for row in rows]


@register("context_sufficiency", Queue.EMBED, params=SufficiencyParams, kind="batch", needs=("question", "contexts"),
          reads=())  # fmt: skip
def context_sufficiency(rows: list[Row], params: SufficiencyParams, ctx: RunContext) -> list[MetricResult]:
    """Fraction of contexts whose cosine with the question is >= threshold (a row without contexts is unscorable)."""
    vectors = chunk_vectors(rows, ctx)
    return [score_context_sufficiency(row, vectors, params) for row in rows]


@register("answer_relevance", Queue.EMBED, kind="batch", needs=("answer", "reference"), reads=())
def answer_relevance(rows: list[Row], params: NoParams, ctx: RunContext) -> list[MetricResult]:
    """Cosine of the answer with the reference, as Auto-Analyst defines it (equals answer_correctness); not Ragas's
    answer_relevancy, which rates the answer against the question."""
    vectors = chunk_vectors(rows, ctx)
    return [score_answer_similarity(row, vectors) for row in rows]


@register("answer_correctness", Queue.EMBED, kind="batch", needs=("answer", "reference"), reads=())
def answer_correctness(rows: list[Row], params: NoParams, ctx: RunContext) -> list[MetricResult]:
    """Cosine of the answer with the reference."""
    vectors = chunk_vectors(rows, ctx)
    return [score_answer_similarity(row, vectors) for row in rows]


@register("answer_hallucination", Queue.EMBED, params=HallucinationParams, kind="batch", needs=("answer", "contexts"),
          reads=())  # fmt: skip
def answer_hallucination(rows: list[Row], params: HallucinationParams, ctx: RunContext) -> list[MetricResult]:
    """Fraction of answer sentences whose best context cosine is < threshold (lower is better)."""
    vectors = chunk_vectors(rows, ctx)
    return [score_answer_hallucination(row, vectors, params) for row in rows]
