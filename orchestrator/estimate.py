"""``ragscore run --dry-run``: what a run would do, and what its judge calls would cost and take.

The dataset is read and validated as a run reads it (unreadable rows reported, duplicate ids refused), and
nothing is submitted: no worker starts and no provider is called. Per queue it counts the work units (item x
metric output); per judge metric the calls it would make (each judge's first call; re-asks after a reply
without a rating and retries are not counted, and rows a rule scores without a judge make none), their
prompt tokens as the rate limiter guesses them (deliberately high: three characters a token), and the cap
on their replies. From those: the cost at the metric's ``prices``, and the least time the suite's judge
limits allow. Given a Redis (the run store), calls whose reply is already cached are counted apart, as a
re-run would not pay for them.

For the embedding metrics (and the ``checks`` metric's ``embedding`` points: each point's text and its target, each
whole) it counts the distinct texts a run would encode, those already in the embedding cache apart
where their cache key is known without the model (:func:`ragscore_workers.embedding.known_namespace`), and the time
they take: at the texts a second the latest runs of the same model, device and mode measured where there are some
(:mod:`.encode_rates`), else at :data:`ASSUMED_ENCODE_WORDS_PER_S` words, an assumption. A long context is
counted as the windows a run encodes (and looks up) where the cache holds the model's note
(:func:`ragscore_workers.embedding.noted_encoder`: its piece limit and tokenizer, no model loaded), else whole.

In a suite with targets the answers do not exist yet: judge prompts are built with a placeholder for each
field the target fills, so calls are exact but prompt tokens leave out the targets' replies. The texts they fill are
counted as a run encodes them, one per item and field (no two replies alike, none cached; a reply's contexts as one
text), at :data:`ASSUMED_FILLED_WORDS` words each, and an answer's sentences where answer_hallucination embeds them, as
it splits them, at :data:`ASSUMED_SENTENCE_WORDS` words each.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from ragscore_workers._embedding_cache import redis_key, text_hash
from ragscore_workers.embedding import Encoder, known_namespace, noted_encoder
from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.checks import ChecksParams, embedding_point_texts
from ragscore_workers.metrics.embedding_metrics import (
    EMBEDDING_METRICS,
    answer_sentences,
    texts_needed,
    texts_unwindowed,
)
from ragscore_workers.metrics.registry import MetricDef, PlannedCall
from ragscore_workers.providers.base import CompletionParams, estimate_tokens
from ragscore_workers.providers.cache import cache_key
from ragscore_workers.providers.factory import judge_identity, judge_key_env
from ragscore_workers.schemas import EmbeddingConfig, JudgeConfig, Row, Suite, TargetConfig

from .datasets import scan_dataset
from .encode_rates import MeasuredRate
from .floors import in_flight_rounds, pace_minutes, window_minutes
from .gold_ids import FROM_TARGETS, RetrievalCheck
from .queue_time import ItemSample, ProgramTally, QueueTiming, code_programs_s
from .suite import QUEUE_ORDER, ResolvedSuite

__all__ = [
    "ASSUMED_ENCODE_WORDS_PER_S",
    "ASSUMED_FILLED_WORDS",
    "ASSUMED_SENTENCE_WORDS",
    "BUSY_SLOWDOWN",
    "EMBED_MODEL_LOAD_S",
    "EMBED_WORKER_START_S",
    "CallTally",
    "EmbedTally",
    "Estimate",
    "RunCount",
    "estimate_run",
    "host_load",
    "judge_calls_planned",
    "looks_up_caches",
]

#: Rows planned together (judge prompts are built a batch at a time, then dropped).
BATCH_ROWS = 256
#: What stands for a field a target will fill, in a dry run's judge prompts.
PLACEHOLDER = "(filled in by the target)"
#: What stands in for the contexts a target's reply fills: not the answer's text, which the judges' special cases
#: (an answer found in its context is grounded without a call) would read as such, and count no call.
CONTEXT_PLACEHOLDER = "(retrieved by the target)"
#: Words a second the dry run assumes all-MiniLM-L6-v2 encodes: two laptop CPU cores measured ~400 sentences of 12
#: words a second and ~50 passages of 120 words (~5,000 and ~6,000 words/s). A GPU is many times faster; a busy or
#: older CPU slower.
ASSUMED_ENCODE_WORDS_PER_S = 5_000
#: How much slower than :data:`ASSUMED_ENCODE_WORDS_PER_S` the encode goes per runnable process a core on a busy
#: machine (its load average over its cores while the run encodes, the encode's own threads in it:
#: :meth:`EmbedTally.busy_s` adds them to the load before the run). Measured on 2 cores during embedded runs of
#: all-MiniLM-L6-v2 (load average sampled every 5 s while they ran): ~4-5 times slower at load ~2.6, ~11 at ~7 (1,773
#: texts, 200 s of encoding where the dry run said 18 s), ~14 at ~8 (a raw encode, ~350 words/s), ~15 at ~10. A share of
#: a core each (``1 + load / cores``) said 2.3 to 6 of those: torch's threads also wait on each other's turn.
BUSY_SLOWDOWN = 2.8
#: Seconds an embedded run's local embed worker takes from the rows sent to its first task begun (its process and
#: Celery started, torch and sentence-transformers imported): ``ragscore run`` of 64 questions of answer_correctness on
#: 2 laptop CPU cores at load average ~6 measured ~7 s (~6 s idle). A cluster's workers run already.
EMBED_WORKER_START_S = 7.0
#: Seconds all-MiniLM-L6-v2 takes to load on the CPU, its first encode call's warm-up included, before a run's first
#: text is encoded: ~17 s in the same runs (~8 s idle). Once per worker process (a cluster's may hold it loaded).
EMBED_MODEL_LOAD_S = 17.0
#: Words the dry run assumes of each text a target fills (its answer, a reply's contexts): a passage's, as measured
#: above (they do not exist before the run).
ASSUMED_FILLED_WORDS = 120
#: Words the dry run assumes of each sentence of an answer a target fills (answer_hallucination embeds each): a short
#: sentence's, as measured above.
ASSUMED_SENTENCE_WORDS = 12


def _assumed_reply() -> str:
    """What stands for an answer a target fills in the embedding count: :data:`ASSUMED_FILLED_WORDS` words in sentences
    of :data:`ASSUMED_SENTENCE_WORDS`, each its own, so that answer_hallucination's texts of it are its sentences as the
    metric splits them (``answer_sentences``)."""
    words = [f"w{n}" for n in range(ASSUMED_FILLED_WORDS)]
    step = ASSUMED_SENTENCE_WORDS
    return " ".join(" ".join(words[at : at + step]) + "." for at in range(0, len(words), step))


def _filled_texts(reply: str) -> dict[str, int]:
    """The texts standing for those a target fills in the embedding count, and the words each is counted at: the
    answer (``reply``), its sentences as answer_hallucination splits them, a reply's contexts (one text, as its
    placeholder)."""
    texts = {text: len(text.split()) for text in (reply, *answer_sentences(reply))}
    return texts | {CONTEXT_PLACEHOLDER: ASSUMED_FILLED_WORDS}


@dataclass
class EmbedTally:
    """The texts the embedding metrics would encode."""

    #: Distinct texts embedded (a long context's windows where ``windowed``, else each context whole).
    texts: int = 0
    #: Of those, texts whose vector is in the embedding cache (a run would not encode them).
    cached: int = 0
    #: Words of the texts not cached (split on whitespace).
    words: int = 0
    #: Whether the cache was looked up (a run store reachable, the suite's cache on, the model's cache key known).
    cache_checked: bool = False
    #: Whether long contexts were cut into the windows a run encodes (the model's note was in the cache).
    windowed: bool = False
    #: Texts the targets fill, per item: its answer, the answer's sentences where answer_hallucination embeds them,
    #: its reply's contexts counted as one; each its own reply, none cached. Not in ``texts``.
    filled: int = 0
    #: Of those, the answers' sentences (:data:`ASSUMED_SENTENCE_WORDS` words each assumed).
    filled_sentences: int = 0
    #: Words of those: :data:`ASSUMED_FILLED_WORDS` an answer or a reply's contexts.
    filled_words: int = 0
    #: What the latest runs like this one measured (:func:`~.encode_rates.measured_rate`; None: none, the rate is
    #: assumed).
    measured: MeasuredRate | None = None

    @property
    def to_encode(self) -> int:
        """Texts a run would encode (those the targets fill too)."""
        return self.texts - self.cached + self.filled

    @property
    def assumed_s(self) -> float:
        """Seconds their encoding takes at :data:`ASSUMED_ENCODE_WORDS_PER_S` (an assumption)."""
        return (self.words + self.filled_words) / ASSUMED_ENCODE_WORDS_PER_S

    @property
    def estimated_s(self) -> float:
        """Seconds their encoding takes: at the :attr:`measured` texts a second where runs measured one, else
        :attr:`assumed_s`."""
        return self.assumed_s if self.measured is None else self.to_encode / self.measured.texts_per_s

    def busy_s(self, load: float, cores: int) -> float:
        """:attr:`assumed_s` on a machine whose load average before the run is ``load`` on ``cores``: ``1 +
        BUSY_SLOWDOWN * (load + cores) / cores`` times slower (:data:`BUSY_SLOWDOWN`, as measured). The loads it was
        measured at were read while the runs encoded, their own encode in them (torch's threads, one a core): the
        run's encode adds ``cores`` to the load the dry run reads before it."""
        cores = max(cores, 1)
        return self.assumed_s * (1 + BUSY_SLOWDOWN * (load + cores) / cores)


@dataclass
class CallTally:
    """The judge calls of one metric (or of all of them)."""

    calls: int = 0
    #: Of those, calls whose reply is in the cache (a run would not pay for them).
    cached: int = 0
    #: Prompt tokens of the calls not cached, as the limiter guesses them (high: three characters a token).
    tokens_in: int = 0
    #: Most reply tokens of the calls not cached (calls x the metric's reply cap).
    tokens_out_max: int = 0
    #: Cost of the calls not cached at the metric's prices (None: its model has no price).
    cost: float | None = 0.0
    #: Tokens the largest call not cached needs (prompt guess + reply cap): what the limiter asks of ``tpm``.
    largest: int = 0

    def add(self, other: CallTally) -> None:
        self.calls += other.calls
        self.cached += other.cached
        self.tokens_in += other.tokens_in
        self.tokens_out_max += other.tokens_out_max
        self.cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        self.largest = max(self.largest, other.largest)

    @property
    def paid(self) -> int:
        """Calls a run would send to the provider."""
        return self.calls - self.cached


@dataclass
class Estimate:
    """What ``estimate_run`` found."""

    rows: int = 0
    failed_rows: int = 0
    #: The first unreadable rows, each said as ``line 3: why`` (DatasetScan.failures_said).
    first_failures: list[str] = field(default_factory=list)
    #: Items scored: rows x targets (1 without targets).
    items: int = 0
    #: Work units (item x metric output) per queue, in QUEUE_ORDER.
    units: dict[str, int] = field(default_factory=dict)
    #: Per judge metric, its calls.
    judge: dict[str, CallTally] = field(default_factory=dict)
    #: Per judge metric, the variable its key is read from (its ``api_key_env``, else the provider's usual one): the
    #: workers keep a judge limiter, and a ``judge.max_in_flight`` cap, per key.
    judge_key_env: dict[str, str] = field(default_factory=dict)
    #: Per judge metric, its ``concurrency``: the calls one of its tasks sends at a time.
    judge_concurrency: dict[str, int] = field(default_factory=dict)
    #: Calls per target system (one per question; retries not counted).
    target_calls: dict[str, int] = field(default_factory=dict)
    #: The systems the items name (what ``METRIC@SYSTEM`` gates can read).
    systems: set[str] = field(default_factory=set)
    #: Whether cached replies were looked up (a Redis was given and the suite's judge uses its cache).
    cache_checked: bool = False
    #: What is probably wrong with the dataset (``DatasetScan.warnings``), as a run would warn.
    warnings: list[str] = field(default_factory=list)
    #: What a run would say as information (gold_ids: rows that retrieved nothing), or that it checks after it.
    notes: list[str] = field(default_factory=list)
    #: The metrics that will score no item (no row has a field they need): a run exits 1 for them.
    scoreless: list[str] = field(default_factory=list)
    #: The texts the embedding metrics would encode (None: the suite has none).
    embed: EmbedTally | None = None
    #: The cpu queue's items a dry run times (:func:`~.queue_time.time_items`), spread through the file.
    cpu_sample: ItemSample = field(default_factory=ItemSample)
    #: The cpu queue's time as the sample measured it (None: not timed).
    cpu: QueueTiming | None = None
    #: The programs the code queue's items may run, at their time limits (counted by the dry run alone).
    code: ProgramTally = field(default_factory=ProgramTally)

    def judge_total(self) -> CallTally:
        total = CallTally()
        for tally in self.judge.values():
            total.add(tally)
        return total

    def judge_by_key(self) -> dict[str | None, CallTally]:
        """The judge calls per key variable (:attr:`judge_key_env`): the workers keep a judge limiter (the suite's
        ``rpm``, ``tpm``, ``rpd``, ``tpd`` and ``pace``, each counted apart) and a ``judge.max_in_flight`` cap per key,
        so judge metrics whose ``api_key_env`` differ are limited apart (a variable each: two holding one key share
        one, which takes longer, not shorter)."""
        by_key: dict[str | None, CallTally] = {}
        for name, tally in self.judge.items():
            by_key.setdefault(self.judge_key_env.get(name), CallTally()).add(tally)
        return by_key

    def judge_minutes(self, suite: Suite) -> dict[str, float]:
        """Per judge limit of the suite that the calls not cached reach: the least minutes they need under it, the
        most of any judge key's (:meth:`judge_by_key`: each key's limiter lets its own calls through at the limit).

        A provider's window lets ``limit`` through per period, so N requests end no sooner than
        ``floor((N - 1) / limit)`` periods after the first (tokens: the same with the token guess). ``pace: even``
        adds ``pace``: the same for its requests a second (a minute's calls are not sent at once)."""
        out: dict[str, float] = {}
        for tally in self.judge_by_key().values():
            for name, minutes in _limit_minutes(tally, suite.judge).items():
                out[name] = max(out.get(name, 0.0), minutes)
        return out

    def judge_busiest_key(self, suite: Suite, limit: str) -> CallTally:
        """The calls of the judge key whose calls need the most minutes under ``limit`` (one of
        :meth:`judge_minutes`): those that bound the judge's time."""
        return max(self.judge_by_key().values(), key=lambda tally: _limit_minutes(tally, suite.judge).get(limit, 0.0))

    def in_flight_rounds(self, suite: Suite) -> int | None:
        """Under ``judge.max_in_flight``, the rounds of the calls not cached one after another
        (:func:`~.floors.in_flight_rounds`), each as long as a reply takes (which a dry run cannot know): the most of
        any cap's, as judge metrics whose ``api_key_env`` differ each have a cap (:meth:`judge_by_key`). None without a
        cap, or where one round holds each cap's."""
        cap = suite.judge.max_in_flight
        rounds = [in_flight_rounds(tally.paid, cap) or 0 for tally in self.judge_by_key().values()]
        return max(rounds, default=0) or None

    def in_flight_caps(self) -> int:
        """The ``judge.max_in_flight`` caps the calls not cached go through: one per key variable
        (:attr:`judge_key_env`) with such calls."""
        return sum(1 for tally in self.judge_by_key().values() if tally.paid) or 1

    def task_calls_at_once(self) -> int:
        """The most calls one judge task sends at a time: the largest ``concurrency`` of the metrics with calls not
        cached (:attr:`judge_concurrency`)."""
        return max((self.judge_concurrency.get(name, 1) for name, t in self.judge.items() if t.paid), default=1)

    def local_rounds(self, threads: int) -> int | None:
        """Under an embedded run's local judge worker of ``threads`` threads, a task each, each sending
        :meth:`task_calls_at_once` calls at a time: the rounds of the calls not cached one after another
        (:func:`~.floors.in_flight_rounds`), each as long as a reply takes. None where one round holds them all."""
        return in_flight_rounds(self.judge_total().paid, threads * self.task_calls_at_once())

    def target_minutes(self, target: TargetConfig) -> dict[str, float]:
        """Per limit of ``target`` (``rpm``, ``pace``) that its calls reach: the least minutes they need under it, as
        :meth:`judge_minutes` gives the judge's."""
        calls = self.target_calls.get(target.name, 0)
        window = window_minutes(calls, target.rpm, 1)
        return ({} if window is None else {"rpm": window}) | pace_minutes(calls, target.rpm, target.pace)

    def too_large(self, suite: Suite) -> list[tuple[str, int]]:
        """The suite's token limits (``tpm``, ``tpd``) that the largest call not cached exceeds: the limiter can
        never send that call, so each such item would be an error."""
        largest = self.judge_total().largest
        return [(name, limit) for name, limit in (("tpm", suite.judge.tpm), ("tpd", suite.judge.tpd))
                if limit and largest > limit]  # fmt: skip


def _limit_minutes(calls: CallTally, judge: JudgeConfig) -> dict[str, float]:
    """Per limit of ``judge`` that ``calls`` (those not cached) reach through one limiter: the least minutes they need
    under it (:func:`~.floors.window_minutes`, :func:`~.floors.pace_minutes`)."""
    tokens = calls.tokens_in + calls.tokens_out_max
    out = {
        name: minutes
        for name, amount, limit, period_min in (
            ("rpm", calls.paid, judge.rpm, 1),
            ("tpm", tokens, judge.tpm, 1),
            ("rpd", calls.paid, judge.rpd, 24 * 60),
            ("tpd", tokens, judge.tpd, 24 * 60),
        )
        if (minutes := window_minutes(amount, limit, period_min)) is not None
    }
    return out | pace_minutes(calls.paid, judge.rpm, judge.pace)


def _as_answered(row: Row, target: TargetConfig) -> Row:
    """The row as ``target`` will answer it, with a placeholder in each field its reply fills."""
    filled = target.response.model_dump()
    update: dict[str, Any] = {"system": target.system} if target.system else {}
    if filled.get("answer"):
        update["answer"] = PLACEHOLDER
    if filled.get("contexts"):  # the dataset's own contexts are never the target's (fill.unanswered_row)
        update["contexts"] = [{"text": CONTEXT_PLACEHOLDER}]
    return Row.model_validate(row.model_dump() | update) if update else row


#: Which of KEYS exist (1 or 0 each), in one round trip.
_EXISTING_LUA = "local found = {} for i, key in ipairs(KEYS) do found[i] = redis.call('EXISTS', key) end return found"


def _existing(redis: Any, keys: list[str]) -> list[bool]:
    """Whether each of ``keys`` exists: one script a batch (a command a key took a fifth of submit's time)."""
    return [bool(hit) for hit in redis.eval(_EXISTING_LUA, len(keys), *keys)] if keys else []


class _JudgePlanner:
    """Collects rows and turns them into planned calls a batch at a time, per judge metric."""

    def __init__(self, resolved: ResolvedSuite, estimate: Estimate, redis: Any | None) -> None:
        self.suite = resolved.suite
        self.metrics: list[tuple[MetricDef, BaseModel]] = [(m, p) for m, p in resolved.scoring if m.plan_calls]
        self.estimate = estimate
        self.redis = redis
        self.identity = judge_identity(self.suite.judge)
        self.pending: list[Row] = []

    def add(self, row: Row) -> None:
        if self.metrics:
            self.pending.append(row)
            if len(self.pending) >= BATCH_ROWS:
                self.flush()

    def flush(self) -> None:
        rows, self.pending = self.pending, []
        if not rows:
            return
        for mdef, params in self.metrics:
            assert mdef.plan_calls is not None
            calls = mdef.plan_calls(rows, params, self.suite)
            tally = self.estimate.judge.setdefault(mdef.name, CallTally())
            tally.add(self._tally(calls, params))
            key_env = judge_key_env(self.suite.judge, getattr(params, "api_key_env", None))
            self.estimate.judge_key_env[mdef.name] = key_env
            self.estimate.judge_concurrency[mdef.name] = getattr(params, "concurrency", 1)

    def _tally(self, calls: list[PlannedCall], params: BaseModel) -> CallTally:
        look_up = self.redis is not None and getattr(params, "cache", True)
        cached = self._cached(calls) if look_up else [False] * len(calls)
        paid = [call for call, hit in zip(calls, cached, strict=True) if not hit]
        sizes = [(estimate_tokens(call.messages), call.max_tokens) for call in paid]
        tokens_in = sum(prompt for prompt, _ in sizes)
        tokens_out = sum(reply for _, reply in sizes)
        price = (getattr(params, "prices", None) or {}).get(self.suite.judge.model)
        cost = (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000 if price else (0.0 if not paid else None)
        largest = max((prompt + reply for prompt, reply in sizes), default=0)
        return CallTally(len(calls), sum(cached), tokens_in, tokens_out, cost, largest)

    def _cached(self, calls: list[PlannedCall]) -> list[bool]:
        """Whether each call's reply is cached (:func:`_existing`)."""
        judge = self.suite.judge
        keys = [
            cache_key(self.identity, call.messages,
                      CompletionParams(temperature=judge.temperature, max_tokens=call.max_tokens,
                                       reasoning=judge.is_reasoning),
                      call.template_version)
            for call in calls
        ]  # fmt: skip
        return _existing(self.redis, keys)


def _short(digest: str) -> int:
    """A text's sha256 hex digest cut to 64 bits (a collision among millions of texts is unlikely: one in a million at
    five million texts)."""
    return int(digest[:16], 16)


class _DistinctTexts:
    """The texts seen so far, by their :func:`_short` digest: ~8 bytes each, in a sorted array (a dry run of five
    million distinct texts holds ~40 MB, not the ~350 MB of a set of ints), the latest few in a set merged into it
    once they are :data:`FRESH_MAX`."""

    #: Digests kept in the set before they are merged into the array (~5 MB at most).
    FRESH_MAX = 1 << 16

    def __init__(self, *texts: str) -> None:
        """None seen but ``texts``."""
        self.sorted = np.empty(0, dtype=np.uint64)
        self.fresh: set[int] = {_short(text_hash(text)) for text in texts}

    def new(self, digests: Iterable[str]) -> list[str]:
        """Note ``digests`` (texts' sha256): those not seen before, each once, in their order."""
        shorts: dict[int, str] = {}
        for digest in digests:
            if (short := _short(digest)) not in self.fresh:
                shorts.setdefault(short, digest)
        keys = np.fromiter(shorts, dtype=np.uint64, count=len(shorts))
        at = np.minimum(np.searchsorted(self.sorted, keys), max(len(self.sorted) - 1, 0))
        old = self.sorted[at] == keys if len(self.sorted) else np.zeros(len(keys), dtype=bool)
        new = [short for short, known in zip(shorts, old.tolist(), strict=True) if not known]
        self.fresh.update(new)
        if len(self.fresh) >= self.FRESH_MAX:
            merged = np.sort(np.fromiter(self.fresh, dtype=np.uint64, count=len(self.fresh)))
            self.sorted = np.insert(self.sorted, np.searchsorted(self.sorted, merged), merged)
            self.fresh.clear()
        return [shorts[short] for short in new]


class _EmbedPlanner:
    """Collects rows and counts the distinct texts the suite's embedding metrics would encode, a batch at a time, each
    once (:class:`_DistinctTexts`)."""

    def __init__(self, resolved: ResolvedSuite | None, estimate: Estimate, redis: Any | None) -> None:
        """Counts the texts of ``resolved``'s embedding metrics (None: nothing counted)."""
        config = EmbeddingConfig() if resolved is None else resolved.suite.embedding
        scoring = [] if resolved is None else resolved.scoring
        self.names = [m.name for m, _ in scoring if m.name in EMBEDDING_METRICS]
        #: The checks metric's params: its embedding points' texts are encoded by the same model (and cache).
        self.checks = next((p for m, p in scoring if m.name == "checks" and isinstance(p, ChecksParams)), None)
        self.counts = bool(self.names) or self.checks is not None
        self.estimate = estimate
        self.namespace = known_namespace(config) if self.counts and redis is not None and config.cache else None
        self.redis = redis if self.namespace is not None else None
        #: Cuts long contexts as a run does (None: the cache holds no note of the model; each context counted whole).
        self.encoder: Encoder | None = noted_encoder(config, redis) if self.redis is not None else None
        self.pending: list[Row] = []
        #: Texts a target fills (not known before it answers): not counted.
        #: What stands for an answer a target fills, and the words each text a target fills is counted at.
        self.reply = _assumed_reply()
        self.filled_words = _filled_texts(self.reply)
        self.seen = _DistinctTexts(PLACEHOLDER, *self.filled_words)
        self.tally = EmbedTally(cache_checked=self.redis is not None, windowed=self.encoder is not None)
        if self.names:
            estimate.embed = self.tally

    def add(self, row: Row) -> None:
        if self.counts:
            self.pending.append(row)
            if len(self.pending) >= BATCH_ROWS:
                self.flush()

    def flush(self) -> None:
        rows, self.pending = self.pending, []
        each = [self._texts([row]) for row in rows]
        # a field a target fills is one text of its item however many metrics embed it (a run encodes it once)
        for filled in (self.filled_words.keys() & texts for texts in each):
            self.tally.filled += len(filled)
            self.tally.filled_sentences += len(filled - {self.reply, CONTEXT_PLACEHOLDER})
            self.tally.filled_words += sum(self.filled_words[text] for text in filled)
        texts = {text_hash(text): text for texts in each for text in texts}
        new = {digest: texts[digest] for digest in self.seen.new(texts)}
        cached = self._cached(list(new)) if new else []
        self.tally.texts += len(new)
        if new:  # a suite whose checks have no embedding point encodes nothing: no line of it
            self.estimate.embed = self.tally
        self.tally.cached += sum(cached)
        hits = dict(zip(new, cached, strict=True)) if cached else {}
        self.tally.words += sum(len(text.split()) for digest, text in new.items() if not hits.get(digest))

    def _texts(self, rows: list[Row]) -> list[str]:
        """The texts a run embeds for ``rows``: a long context's windows where the model's note is known, else whole; an
        answer a target fills as :func:`_assumed_reply`; the checks metric's embedding points' texts, each whole."""
        rows = [row.model_copy(update={"answer": self.reply}) if row.answer == PLACEHOLDER else row for row in rows]
        points = [text for row in rows for text in embedding_point_texts(row, self.checks)] if self.checks else []
        if self.encoder is None:
            return [*texts_unwindowed(rows, self.names), *points]
        return [*texts_needed(rows, self.names, self.encoder), *points]

    def _cached(self, digests: list[str]) -> list[bool]:
        """Whether each text's vector is in the cache (:func:`_existing`)."""
        if self.redis is None or self.namespace is None:
            return []
        return _existing(self.redis, [redis_key(self.namespace, digest) for digest in digests])


class RunCount:
    """What a run of ``resolved`` does, counted a row at a time as it is read (the dry run's count, and submit's of
    the judge calls its run will make: :func:`judge_calls_planned`); ``redis``: look up cached replies; ``texts``:
    count the texts its embedding metrics encode, sample the cpu queue's items and count the code queue's programs
    too (the dry run: submit has no use for them)."""

    def __init__(self, resolved: ResolvedSuite, redis: Any | None = None, *, texts: bool = True) -> None:
        self.resolved = resolved
        self.estimate = Estimate()
        self.judge = _JudgePlanner(resolved, self.estimate, None if resolved.targets else redis)
        embedded = resolved if texts else None
        self.embed = _EmbedPlanner(embedded, self.estimate, None if resolved.targets else redis)
        self.per_metric = {m.name: len(m.outputs(p)) for m, p in resolved.metrics}
        self.units: dict[str, int] = {}
        self.sampled = texts

    def see(self, row: Row) -> None:
        """Count ``row``: its items (one a target), their work units per queue, judge calls and target calls."""
        estimate, targets = self.estimate, self.resolved.targets
        for answered in [_as_answered(row, t) for t in targets] or [row]:
            if answered.system is not None:
                estimate.systems.add(answered.system)
            for queue, names in self.resolved.row_queues(answered).items():
                self.units[queue] = self.units.get(queue, 0) + sum(self.per_metric[n] for n in names)
                if queue == "cpu" and self.sampled:  # a target's reply, not yet had: the reply the count assumes
                    filled = {"answer": self.embed.reply} if answered.answer == PLACEHOLDER else {}
                    estimate.cpu_sample.see(answered.model_copy(update=filled), names)
                elif queue == "code" and self.sampled:
                    estimate.code.add(code_programs_s(self.resolved, answered, names))
            self.judge.add(answered)
            self.embed.add(answered)
        for target in targets:
            estimate.target_calls[target.name] = estimate.target_calls.get(target.name, 0) + 1

    def finish(self, rows: int) -> Estimate:
        """The estimate once all ``rows`` were seen (its judge calls planned, its units per queue)."""
        self.judge.flush()
        self.embed.flush()
        units = self.units | ({"target": rows * len(self.resolved.targets)} if self.resolved.targets else {})
        self.estimate.units = {q: units[q] for q in QUEUE_ORDER if units.get(q)}
        self.estimate.cache_checked = self.judge.redis is not None and bool(self.judge.metrics)
        return self.estimate


def host_load() -> tuple[float, int] | None:
    """This machine's load average over the last minute and the cores this process may use (None where the system
    keeps no load average)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return load, cores


def looks_up_caches(resolved: ResolvedSuite) -> bool:
    """Whether a dry run of ``resolved`` reads the run store: its judge replies' cache, or the embedding cache of its
    embedding metrics and its checks metric (whose ``embedding`` points are encoded by the same model; no targets:
    their replies do not exist yet)."""
    embeds = resolved.suite.embedding.cache and any(m.name in EMBEDDING_METRICS or m.name == "checks"
                                                    for m, _ in resolved.scoring)  # fmt: skip
    return resolved.judge_calls_countable or (embeds and not resolved.targets)


def judge_calls_planned(estimate: Estimate) -> int | None:
    """The judge calls a run sends at least, as the dry run counts them (each judge's first call, cached replies
    left out); None where the run has no judge calls to plan."""
    return estimate.judge_total().paid if estimate.judge else None


def _retrieval_check(resolved: ResolvedSuite) -> RetrievalCheck | None:
    """A tally of the rows' gold ids against their retrieved ids where the suite scores ``recall_at_k`` on the rows as
    given (no targets: a target's replies may fill the retrieved ids)."""
    return RetrievalCheck() if _scores_recall(resolved) and not resolved.targets else None


def _scores_recall(resolved: ResolvedSuite) -> bool:
    return any(m.name == "recall_at_k" for m, _ in resolved.scoring)


def _retrieval_notes(resolved: ResolvedSuite, ids: RetrievalCheck | None) -> list[str]:
    """What the run will say of rows that retrieved nothing, or, with targets, that their ids are checked after it
    (not of targets that all return none, an LLM alone's: their rows' recall is unscorable, which is warned of)."""
    if ids is not None:
        return ids.notes()
    return [FROM_TARGETS] if _scores_recall(resolved) and resolved.targets_retrieve else []


def estimate_run(
    dataset: Path,
    resolved: ResolvedSuite,
    *,
    fmt: str | None = None,
    fmt_options: dict[str, Any] | None = None,
    redis: Any | None = None,
    on_row: Callable[[], None] | None = None,
) -> Estimate:
    """Read ``dataset`` as a run would and count what the run would do; ``redis``: look up cached replies.

    Raises DatasetError (as a run does) for duplicate ids or when no row is readable, ConfigError when a target's
    request reads a field no row has."""
    run = RunCount(resolved, redis)
    request_fields = resolved.request_fields()
    ids = _retrieval_check(resolved)

    def count(row: Row) -> None:
        request_fields.see(row)
        run.see(row)
        if ids is not None:
            ids.see(row)
        if on_row is not None:
            on_row()

    scan = scan_dataset(dataset, fmt, lambda _: None, fmt_options, on_row=count, asked_as=resolved.asked_as)
    if scan.rows and (unseen := request_fields.error()):
        raise ConfigError(f"{dataset}: {unseen}")
    estimate = run.finish(scan.rows)
    estimate.rows, estimate.failed_rows, estimate.first_failures = scan.rows, scan.failed, scan.failures_said()
    estimate.warnings = [
        *scan.warnings(resolved.filled_fields(), asked=bool(resolved.targets)),
        *resolved.pre_run_warnings(scan.fields_seen, scan.columns_seen, scan.fields_empty, scan.alone),
        *(ids.lines() if ids is not None else []),
    ]
    estimate.notes = _retrieval_notes(resolved, ids)
    estimate.scoreless = resolved.scoreless(scan.fields_seen, scan.alone) if scan.rows else []
    estimate.items = scan.rows * max(1, len(resolved.targets))
    return estimate
