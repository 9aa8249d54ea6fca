"""What the HTML report needs from the items, gathered in one streaming pass with bounded memory.

* :class:`ValueCounts`: the distribution of one metric output as ``{value: count}``, exact while it has at
  most ``MAX_DISTINCT`` values (0/1 metrics, ratings, ratios of small counts), then counted on a grid whose
  spacing doubles until it fits again. Memory: ``MAX_DISTINCT`` entries per output, whatever the size.
* :class:`ItemStats`: one ``ValueCounts`` per output, the ``WORST_K`` worst items per output (a heap), and
  the first ``MAX_ERRORS`` item errors. A million items cost the same memory as a thousand.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragscore_workers.metrics.registry import higher_is_better
from ragscore_workers.store import RawItem

__all__ = ["ItemStats", "ValueCounts", "WorstItem", "one_line"]

#: Distinct values a distribution keeps before it is coarsened.
MAX_DISTINCT = 2048
#: Worst items kept per metric output.
WORST_K = 10
#: Item errors kept as examples (the counts in the summary are exact).
MAX_ERRORS = 50
#: Characters of an item's details kept for the report.
MAX_DETAILS_CHARS = 4000
#: Characters of each unsupported answer sentence quoted in a why (a why is cut to 200: several sentences show).
WHY_SENTENCE_CHARS = 60


class ValueCounts:
    """Counts of the values of one output; exact for up to ``max_distinct`` values, then on a grid."""

    __slots__ = ("counts", "max_distinct", "step", "total")

    def __init__(self, max_distinct: int = MAX_DISTINCT) -> None:
        self.counts: dict[float, int] = {}
        self.max_distinct = max_distinct
        #: Grid spacing values are rounded to; 0 while every value is kept exactly.
        self.step = 0.0
        self.total = 0

    def key(self, value: float) -> float:
        """The value as counted (itself while exact, else the nearest grid point)."""
        return value if self.step == 0.0 else round(value / self.step) * self.step

    def add(self, value: float) -> None:
        key = self.key(value)
        self.counts[key] = self.counts.get(key, 0) + 1
        self.total += 1
        while len(self.counts) > self.max_distinct:
            self._coarsen()

    def _coarsen(self) -> None:
        """Double the grid spacing (at first: a grid of ``max_distinct / 2`` points over the range)."""
        lo, hi = min(self.counts), max(self.counts)
        self.step = max(2.0 * self.step, 2.0 * (hi - lo) / self.max_distinct, 1e-12)
        merged: dict[float, int] = {}
        for value, count in self.counts.items():
            key = self.key(value)
            merged[key] = merged.get(key, 0) + count
        self.counts = merged

    @property
    def exact(self) -> bool:
        """True while every value is counted as it is."""
        return self.step == 0.0

    def histogram(
        self, bins: int = 20, lo: float | None = None, hi: float | None = None
    ) -> tuple[list[float] | list[tuple[float, float]], list[int]]:
        """``(labels, counts)``: one bar per value when there are few, else ``bins`` equal-width bins.

        Labels are values (few distinct values) or ``(left, right)`` bin edges.
        """
        if not self.counts:
            return [], []
        values = np.fromiter(self.counts.keys(), dtype=float)
        weights = np.fromiter(self.counts.values(), dtype=float)
        if len(values) <= 12:
            order = np.argsort(values)
            return [float(v) for v in values[order]], [int(c) for c in weights[order]]
        lo = float(values.min()) if lo is None else lo
        hi = float(values.max()) if hi is None else hi
        if hi <= lo:
            hi = lo + 1.0
        # A value on an edge belongs to the bin it opens: 0.3 to [0.3, 0.35), though 6 x 0.05 is 0.30000000000000004
        # (np.histogram's float edges put it in [0.25, 0.3)). Grid points a half spacing outside the range, and the
        # maximum, are counted in the edge bins.
        width = (hi - lo) / bins
        index = np.clip(np.floor((values - lo) / width + 1e-9), 0, bins - 1).astype(int)
        counts = np.bincount(index, weights=weights, minlength=bins)
        edges = [lo + i * width for i in range(bins + 1)]
        return [(float(a), float(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)], [int(c) for c in counts]


@dataclass(frozen=True)
class WorstItem:
    """One of the worst items of an output, with what a reader needs to see why."""

    output: str
    score: float
    #: The item's key (``system::id``) and the fingerprint of its question (None where it had none).
    key: str
    question_sha: str | None
    id: str
    system: str | None
    group: str | None
    passed: bool | None
    details: str
    #: Why it failed, where its metric says so in a line (:func:`_failure_reasons`); empty otherwise.
    why: str = ""
    others: dict[str, float | None] = field(default_factory=dict)
    #: Those of ``others`` whose metric failed on the item (an error), not merely unable to score it (unscorable).
    errored: frozenset[str] = frozenset()
    errors: list[str] = field(default_factory=list)

    def others_text(self) -> str:
        """The item's other outputs as the worst items' ``other scores`` cell shows them, in report.md and
        report.html alike (:data:`OTHERS_NOTE`): ``recall_at_1 0.500, faithfulness error, mrr -``."""
        return ", ".join(
            f"{k} {OTHER_ERROR if k in self.errored else '-' if v is None else f'{v:.3f}'}"
            for k, v in self.others.items()
        )


#: An ``other scores`` entry of an output whose metric failed on the item; ``-`` is one that could not score it.
OTHER_ERROR = "error"
#: Under the worst items of report.md and report.html: what an ``other scores`` entry without a number means.
OTHERS_NOTE = (
    f"Other scores: the item's score in each other output; {OTHER_ERROR} where that output's metric failed on it "
    "(an error), - where it could not score it (unscorable, or stopped before scoring it)."
)


def _failure_reasons(details: dict[str, Any]) -> str:
    """Why an item failed, from its metric's ``details``: ``code_test``'s ``failures`` then its ``notes`` (a limit
    taken as its range's end, as a ``code_test`` point's note ends), else each ``checks`` point its score counts as
    failed (``failed``: scored, failed or skipped; an informational one moves no score) as ``id: note``, else
    ``answer_hallucination``'s ``unsupported`` sentences (:func:`_unsupported_reasons`); empty for a metric that says
    none of these."""
    if failures := details.get("failures"):
        return "; ".join(map(str, [*failures, *(details.get("notes") or [])]))
    if unsupported := details.get("unsupported"):
        return _unsupported_reasons(details, unsupported)
    failed = set(details.get("failed") or [])
    return "; ".join(
        f"{p['id']}: {p['note']}"
        for p in details.get("points") or []
        if isinstance(p, dict) and p.get("id") in failed and p.get("note")
    )


def _unsupported_reasons(details: dict[str, Any], unsupported: list[Any]) -> str:
    """``unsupported (best context cosine below 0.4): "He was beautiful, a little…" 0.31; ...``: each sentence
    ``answer_hallucination`` found no context for, with its best cosine (the ``best_cosines`` under ``threshold``, in
    the sentences' order), so the report shows which sentence failed and by how much. A metric that gives no numeric
    ``threshold`` (a plug-in's) gets the sentences alone: which cosine is whose cannot be told without it."""
    threshold = details.get("threshold")
    if not isinstance(threshold, int | float) or isinstance(threshold, bool):
        return "unsupported: " + "; ".join(f'"{one_line(str(text), WHY_SENTENCE_CHARS)}"' for text in unsupported)
    best = [c for c in details.get("best_cosines") or [] if isinstance(c, int | float) and c < threshold]
    cosines = [f" {c:.2f}" for c in best] if len(best) == len(unsupported) else [""] * len(unsupported)
    quoted = [f'"{one_line(str(text), WHY_SENTENCE_CHARS)}"{c}' for text, c in zip(unsupported, cosines, strict=True)]
    return f"unsupported (best context cosine below {threshold:g}): " + "; ".join(quoted)


def one_line(text: str, limit: int) -> str:
    """``text`` on one line (its runs of whitespace one space), cut to ``limit`` characters, the last an ellipsis, when
    longer: a why's quoted sentences, and :func:`orchestrator.reports.texts.preview` (which imports this module)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _details_text(details: Any) -> str:
    text = json.dumps(details, ensure_ascii=False, indent=1, sort_keys=True, default=str)
    return text if len(text) <= MAX_DETAILS_CHARS else text[:MAX_DETAILS_CHARS] + " …"


class _Worst:
    """The ``k`` items with the worst scores of one output (ties: the earliest items are kept), how many items
    have the worst score (``tied``: more than ``k`` where a 0 is common, so the list is a sample of them), and how many
    items left out have the least bad kept score, the list's cut-off (``beyond``: 30 items at 0.5 behind 2 zeros)."""

    __slots__ = ("beyond", "heap", "k", "sign", "tied", "worst")

    def __init__(self, k: int, higher_better: bool) -> None:
        self.heap: list[tuple[float, int, WorstItem]] = []
        self.k = k
        # Keys are "badness" (higher = worse); the heap root is the least bad of the kept items.
        self.sign = -1.0 if higher_better else 1.0
        self.worst = -float("inf")
        self.tied = 0
        self.beyond = 0

    def count(self, score: float) -> None:
        """Counts every score of the output: the items at the worst one so far."""
        badness = self.sign * score
        if badness > self.worst:
            self.worst, self.tied = badness, 1
        elif badness == self.worst:
            self.tied += 1

    def wants(self, score: float) -> bool:
        """Whether an item of ``score`` is among the worst so far (:meth:`push` it); one not, at the cut-off score,
        is counted in ``beyond``."""
        if len(self.heap) < self.k:
            return True
        badness, cut = self.sign * score, self.heap[0][0]
        if badness == cut:
            self.beyond += 1
        return badness > cut

    def push(self, score: float, seq: int, item: WorstItem) -> None:
        entry = (self.sign * score, -seq, item)
        if len(self.heap) < self.k:
            heapq.heappush(self.heap, entry)
            return
        left = heapq.heapreplace(self.heap, entry)  # the latest item at the cut-off: beyond it, if the cut-off holds
        self.beyond = self.beyond + 1 if left[0] == self.heap[0][0] else 0

    def items(self) -> list[WorstItem]:
        """Worst first; equal scores in input order."""
        return [e[2] for e in sorted(self.heap, key=lambda e: (-e[0], -e[1]))]


class ItemStats:
    """Feed items one at a time (``add``); read distributions, worst items and error examples."""

    def __init__(self, worst_k: int = WORST_K, max_errors: int = MAX_ERRORS) -> None:
        self.worst_k = worst_k
        self.max_errors = max_errors
        self.values: dict[str, ValueCounts] = {}
        self._worst: dict[str, _Worst] = {}
        self.error_examples: list[dict[str, Any]] = []
        self.items = 0

    def add(self, item: RawItem) -> None:
        self.items += 1
        seq = self.items
        metrics = item.metrics
        scores: dict[str, Any] | None = None  # every output's score, for the few items that are among the worst so far
        errored: frozenset[str] = frozenset()  # and those whose metric failed on it
        for name, result in metrics.items():
            score, error = result.get("score"), result.get("error")
            if error is not None:
                if len(self.error_examples) < self.max_errors:
                    self.error_examples.append(
                        {"id": item.meta.get("id"), "system": item.meta.get("system"), "output": name, "error": error}
                    )
                continue
            if score is None:
                continue
            values = self.values.get(name)
            if values is None:
                values = self.values[name] = ValueCounts()
            values.add(score)
            worst = self._worst.get(name)
            if worst is None:
                worst = self._worst[name] = _Worst(self.worst_k, higher_is_better(name))
            worst.count(score)
            if worst.wants(score):
                if scores is None:
                    scores = {other: m.get("score") for other, m in metrics.items()}
                    errored = frozenset(other for other, m in metrics.items() if m.get("error") is not None)
                worst.push(score, seq, self._snapshot(item, name, result, scores, errored))

    def add_all(self, items: Iterable[RawItem]) -> ItemStats:
        for item in items:
            self.add(item)
        return self

    @staticmethod
    def _snapshot(
        item: RawItem, name: str, result: dict[str, Any], scores: dict[str, Any], errored: frozenset[str]
    ) -> WorstItem:
        return WorstItem(
            output=name,
            score=float(result["score"]),
            key=item.key,
            question_sha=item.meta.get("question_sha"),
            id=str(item.meta.get("id", item.key)),
            system=item.meta.get("system"),
            group=item.meta.get("group"),
            passed=result.get("passed"),
            details=_details_text(result.get("details") or {}),
            why=_failure_reasons(result.get("details") or {}),
            others={k: v for k, v in scores.items() if k != name},
            errored=errored - {name},
            errors=item.errors,
        )

    def all_worst(self) -> list[WorstItem]:
        """The worst items of every output, each item once (the first output's snapshot of it)."""
        seen: dict[str, WorstItem] = {}
        for worst in self._worst.values():
            for item in worst.items():
                seen.setdefault(item.key, item)
        return list(seen.values())

    def worst(self, name: str) -> list[WorstItem]:
        """The worst items of one output, worst first."""
        worst = self._worst.get(name)
        return worst.items() if worst else []

    def tied_worst(self, name: str) -> int:
        """How many items of one output have its worst score (0 where it scored none)."""
        worst = self._worst.get(name)
        return worst.tied if worst else 0

    def beyond_cutoff(self, name: str) -> int:
        """How many items of one output that its worst items leave out have the last one's score (0 where none)."""
        worst = self._worst.get(name)
        return worst.beyond if worst else 0

    def shown_worst(self, outputs: Iterable[str]) -> list[tuple[str, list[WorstItem], float]]:
        """Per output of ``outputs`` that scored some item: ``(output, its worst items, its best observed
        score)``; items that have the best score are not "worst" and are left out."""
        out = []
        for name in outputs:
            counts, items = self.values.get(name), self.worst(name)
            if counts is None or not items:
                continue
            best = max(counts.counts) if higher_is_better(name) else min(counts.counts)
            out.append((name, [w for w in items if counts.key(w.score) != best], float(best)))
        return out
