"""Dataset-level statistics, computed streaming over item results.

* ``mean`` over scored items only: unscorable (``score is None``) and errors are counted apart, never
  averaged as 0.
* ``ci95`` (:func:`mean_ci`): for pass/fail outputs (every score 0 or 1) the Wilson score interval, which
  stays honest at small n and at 0 % / 100 % (3 of 3 right: [0.44, 1], where a bootstrap says [1, 1]);
  otherwise the percentile bootstrap (``BOOTSTRAP_RESAMPLES`` resamples, fixed seed, so a re-run gives the
  same interval). Scores with few distinct values (ratings) are resampled exactly and in O(B) via the
  multinomial over distinct values; continuous scores by index resampling up to
  ``MAX_RESAMPLE_N`` values, beyond which the normal approximation is used (indistinguishable there).
  One score has no interval (None).
* ``wins`` (``compare_answers`` of the evaluation points): where several ``system``s answered one question
  id, the system with the highest ``checks`` score wins it (see :class:`Wins`).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from .metrics._judge_agreement import Agreement
from .metrics._typed_values import grouped_question_type
from .retrieved_systems import SystemTally
from .schemas import ItemResult, MetricSummary, RunSummary

__all__ = [
    "COMPARE_METRIC",
    "Aggregator",
    "Pairing",
    "Wins",
    "bootstrap_ci",
    "mean_ci",
    "pairing",
    "repeated_values",
    "summarize",
    "wilson_ci",
]

#: Bootstrap resamples for every ci95.
BOOTSTRAP_RESAMPLES = 2000
#: Fixed seed: the same scores always give the same interval.
BOOTSTRAP_SEED = 20240531
#: Above this many continuous values, ci95 uses the normal approximation.
MAX_RESAMPLE_N = 20_000
#: Up to this many distinct values, resample exactly through the multinomial over distinct values.
MAX_DISTINCT_FOR_MULTINOMIAL = 64
#: z of a two-sided 95% interval.
Z95 = 1.959963984540054
#: Why items were unscorable: distinct reasons counted per output (the rest as OTHER_REASONS), the most common
#: shown in the summary, each cut to REASON_CHARS.
MAX_REASONS = 100
SHOWN_REASONS = 3
REASON_CHARS = 200
OTHER_REASONS = "(other reasons)"
#: Distinct values of one breakdown (groups, systems, question types, categories) with a row of their own: the
#: first ones seen; the rest are summed up under OTHER_VALUES (a group per row made summary.json as large as
#: items.jsonl, and the aggregating worker's memory grow with the rows).
MAX_BREAKDOWN_VALUES = 1000
OTHER_VALUES = f"(beyond the first {MAX_BREAKDOWN_VALUES:,})"
#: ``first_error`` keeps this many characters of a metric's first error message, a longer one cut with "…": room for
#: the longest of ours whole (a missing judge key's, which says how to set it and how to choose another judge).
FIRST_ERROR_CHARS = 1000
#: ``first_error_item`` keeps this many characters of the item's id and of its system (the user's text).
ITEM_LABEL_CHARS = 300
#: The metric output ``compare_answers`` ranks the systems of a question by.
COMPARE_METRIC = "checks"
#: The recall_at_k output whose score tells whether a row found a gold id at any rank (above 0) and the gold-id lines
#: read (``orchestrator.gold_ids``).
RETRIEVAL_OUTPUT = "mrr"


def bootstrap_ci(
    values: Iterable[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> list[float] | None:
    """Percentile bootstrap 95% interval of the mean; None for fewer than two values (one value says nothing
    about how the mean varies)."""
    x = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    n = x.size
    if n < 2:
        return None
    if np.all(x == x[0]):
        return [float(x[0]), float(x[0])]
    rng = np.random.default_rng(seed)
    levels, counts = np.unique(x, return_counts=True)
    if levels.size <= MAX_DISTINCT_FOR_MULTINOMIAL:
        draws = rng.multinomial(n, counts / n, size=resamples)
        means = draws @ levels / n
    elif n <= MAX_RESAMPLE_N:
        means = np.empty(resamples)
        step = max(1, 2_000_000 // n)
        for start in range(0, resamples, step):
            stop = min(resamples, start + step)
            means[start:stop] = x[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    else:
        half = Z95 * x.std(ddof=1) / np.sqrt(n)
        return [float(x.mean() - half), float(x.mean() + half)]
    lo, hi = np.percentile(means, [2.5, 97.5])
    return [float(lo), float(hi)]


def wilson_ci(successes: int, n: int) -> list[float] | None:
    """Wilson score 95% interval of a proportion (``successes`` of ``n``); None for ``n == 0``."""
    if n == 0:
        return None
    p, z2 = successes / n, Z95 * Z95
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # exact at the ends: none passed is a lower bound of 0, all passed an upper bound of 1 (not 6.9e-18 from rounding)
    low = 0.0 if successes == 0 else max(0.0, center - half)
    return [low, 1.0 if successes == n else min(1.0, center + half)]


def mean_ci(values: np.ndarray) -> list[float] | None:
    """The 95% interval of a metric output's mean: Wilson's when every score is 0 or 1, else the bootstrap's;
    None for fewer than two scores."""
    if values.size < 2:
        return None
    if bool(np.all((values == 0.0) | (values == 1.0))):
        return wilson_ci(int(values.sum()), int(values.size))
    return bootstrap_ci(values)


def _item_label(item_id: object, system: object) -> str | None:
    """How a summary names an item: its id, and its system where it has one (ids are unique per system), each cut
    to :data:`ITEM_LABEL_CHARS` (an id is the user's text, of any length)."""
    if item_id is None:
        return None
    label = _cut(str(item_id), ITEM_LABEL_CHARS)
    return f"{label} (system {_cut(str(system), ITEM_LABEL_CHARS)})" if system is not None else label


def _cut(text: str, chars: int) -> str:
    """``text``, or its first ``chars`` characters ending with "…" where it is longer."""
    return text if len(text) <= chars else text[: chars - 1] + "…"


def retrieved_nothing(details: Mapping[str, Any]) -> bool:
    """Whether a result was scored on an input empty by design (``details["empty"]``: recall_at_k's row without
    retrieved ids). A result stored before that flag (a resume of an older run) lacks it, and the item keeps no
    retrieved ids to read it from: its recall_at_k details say so by a ``retrieved_top_1`` of None (a row that
    retrieved something has a top id, a blank one too: ``""``)."""
    if "empty" in details:
        return bool(details["empty"])
    return "retrieved_top_1" in details and details["retrieved_top_1"] is None


class _Acc:
    """Accumulates one metric output: scored values, of which scored on an empty input, errors and unscorable counts,
    of which stopped (and, for a dataset-level output, why items were unscorable)."""

    __slots__ = ("values", "empty", "errors", "unscorable", "stopped", "first_error", "first_error_item", "reasons")

    def __init__(self, reasons: bool = False) -> None:
        self.values = array("d")
        self.empty = 0
        self.errors = 0
        self.unscorable = 0
        self.stopped = 0
        self.first_error: str | None = None
        self.first_error_item: str | None = None
        self.reasons: Counter[str] | None = Counter() if reasons else None

    def add(
        self,
        score: float | None,
        error: str | None,
        reason: object = None,
        stopped: bool = False,
        item: Mapping[str, Any] | None = None,
        empty: bool = False,
    ) -> None:
        """Count one item's score or error; ``item`` (its meta: id, system) names the first error only, so the label
        is built once per output, not per item; ``empty``: a score given to an input empty by design."""
        if error is not None:
            self.errors += 1
            if self.first_error is None:
                self.first_error = _cut(error, FIRST_ERROR_CHARS)
                self.first_error_item = _item_label(item.get("id"), item.get("system")) if item else None
        elif score is None:
            self.unscorable += 1
            self.stopped += stopped
            if self.reasons is not None:
                said = str(reason)[:REASON_CHARS] if reason else "(no reason given)"
                if said in self.reasons or len(self.reasons) < MAX_REASONS:
                    self.reasons[said] += 1
                else:  # reasons that hold item text (a refusal) are many: count the rest together
                    self.reasons[OTHER_REASONS] += 1
        else:
            self.values.append(score)
            self.empty += empty

    def summary(self) -> MetricSummary:
        x = np.frombuffer(self.values, dtype=float) if self.values else np.empty(0)
        return MetricSummary(
            mean=float(x.mean()) if x.size else None,
            n=int(x.size),
            ci95=mean_ci(x),
            empty=self.empty,
            errors=self.errors,
            unscorable=self.unscorable,
            stopped=self.stopped,
            first_error=self.first_error,
            first_error_item=self.first_error_item,
            unscorable_reasons=dict(self.reasons.most_common(SHOWN_REASONS)) if self.reasons else None,
        )


class Wins:
    """``compare_answers``: per question id answered by two or more systems, the winner by ``checks`` score.

    A system holding the question's maximum score alone wins it (``outright``); where k systems share the
    maximum, the question is a tie for each of them (``tied``) and each takes 1/k of its win (a two-way tie is half
    a win each, as pairwise win rates count ties), so ``wins`` and ``win_rate`` do not depend on input order.
    Only scored answers compete (unscorable and errored ones do not).
    Keeps one float per (id, system) pair until :meth:`summary`.
    """

    def __init__(self) -> None:
        self.scores: dict[str, dict[str, float]] = {}

    def add(self, item_id: str | None, system: str | None, score: float | None) -> None:
        """Record one answer's score (answers with no id, system or score do not compete)."""
        if item_id is not None and system is not None and score is not None:
            self.scores.setdefault(item_id, {})[system] = score

    def summary(self) -> dict[str, Any]:
        """``{"metric", "questions", "ties", "by_system": {system: {compared, wins, outright, tied, win_rate}}}``;
        empty when no question had two scored systems."""
        by_system: dict[str, dict[str, Any]] = {}
        shared: defaultdict[str, Counter[int]] = defaultdict(Counter)  # system -> k -> its k-way tied questions
        questions = ties = 0
        for scores in self.scores.values():
            if len(scores) < 2:
                continue
            questions += 1
            top = max(scores.values())
            leaders = [system for system, score in scores.items() if score == top]
            for system in scores:
                by_system.setdefault(system, {"compared": 0, "wins": 0, "outright": 0, "tied": 0})["compared"] += 1
            if len(leaders) == 1:
                by_system[leaders[0]]["outright"] += 1
            else:
                ties += 1
                for system in leaders:
                    by_system[system]["tied"] += 1
                    shared[system][len(leaders)] += 1
        if not questions:
            return {}
        for system, stats in by_system.items():  # shares summed exactly: thirds as floats made 2 wins 1.99...98
            wins = stats["outright"] + sum((Fraction(n, k) for k, n in shared[system].items()), Fraction(0))
            stats["wins"], stats["win_rate"] = float(wins), float(wins / stats["compared"])
        return {
            "metric": COMPARE_METRIC,
            "questions": questions,
            "ties": ties,
            "by_system": dict(sorted(by_system.items())),
        }


def _tree() -> defaultdict[str, defaultdict[str, _Acc]]:
    return defaultdict(lambda: defaultdict(_Acc))


def repeated_values(hashes: array[int]) -> np.ndarray:
    """The distinct values that occur more than once in ``hashes`` (an ``array("q")``), sorted: one sort, no set of
    every value (8 bytes a value and a copy of them, where a set of ints takes ~60)."""
    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64))
    return np.unique(ordered[1:][ordered[1:] == ordered[:-1]])


class Pairing(NamedTuple):
    """Which answers share a question id: ``questions``, the ids answered more than once; ``partners``, per system
    number, how many other systems answered an id it answered."""

    questions: int
    partners: list[int]


def pairing(hashes: array[int], systems: array[int], count: int) -> Pairing:
    """How the answers of the question id hashes ``hashes`` pair up (``systems`` holds the system number of each,
    both ``array``s): the ids answered more than once, whatever their systems, and per system number below ``count``
    (numbers from ``count`` on are left out) how many of the other such systems answered a question id it answered:
    what ``ragscore compare`` pairs with it as the baseline. One sort by id; then each distinct set of systems that
    answered one id is counted once, as a bit mask of them (a run whose systems answer the same ids has one such
    set, whatever its items), not each pair of systems of each id, which grew with the square of the systems."""
    ids, numbers = np.frombuffer(hashes, dtype=np.int64), np.frombuffer(systems, dtype=np.uint16)
    order = np.argsort(ids)
    ids, numbers = ids[order], numbers[order]
    questions = int((_runs(ids)[1] > 1).sum())
    if not (kept := numbers < count).all():  # still sorted by id
        ids, numbers = ids[kept], numbers[kept]
    starts, sizes = _runs(ids)
    masks = [0] * count  # per system, the systems that answered an id with it (itself among them)
    for size in np.unique(sizes[sizes > 1]).tolist():
        sets = np.sort(numbers[starts[sizes == size][:, None] + np.arange(size)], axis=1)  # a row of systems an id
        sets = sets[np.lexsort(sets.T)]  # equal rows side by side
        for members in sets[np.r_[True, (sets[1:] != sets[:-1]).any(axis=1)]].tolist():
            mask = 0
            for n in members:
                mask |= 1 << n
            for n in members:
                masks[n] |= mask
    return Pairing(questions, [max(mask.bit_count() - 1, 0) for mask in masks])


def _runs(ordered: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal values of the sorted ``ordered`` starts, and its length."""
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if ordered.size else np.zeros(0, dtype=np.int64)
    return starts, np.diff(np.r_[starts, ordered.size])


class Aggregator:
    """Feed items one at a time; ``summary()`` gives the dataset-level statistics."""

    def __init__(self) -> None:
        self.items = 0
        self.scored = 0
        self.scored_all = 0
        self.metrics: defaultdict[str, _Acc] = defaultdict(lambda: _Acc(reasons=True))
        #: Per dual-judge metric output: agreement of its two judges (from ``details["ratings"]``).
        self.agreement: defaultdict[str, Agreement] = defaultdict(Agreement)
        self.wins = Wins()
        #: recall_at_k's rows per system, of every system: what the gold-id lines name (its breakdown keeps the first).
        self.retrieval = SystemTally()
        #: The id hash of each item that has a system (8 bytes an item; ids are unique per system, so an id hash
        #: seen twice is a question two systems answered). Python's own str hash, salted per process: right only
        #: because one Aggregator, in one process, sees every item; never store these nor merge two Aggregators'.
        self.system_ids = array("q")
        #: The system of each of ``system_ids``, as its number in ``systems`` (2 bytes an item): the first
        #: MAX_BREAKDOWN_VALUES systems seen, as the breakdown keeps them; a later one is MAX_BREAKDOWN_VALUES (a
        #: system per row made this a dict of every row's system).
        self.system_numbers = array("H")
        self.systems: dict[str, int] = {}
        self.by: dict[str, defaultdict[str, defaultdict[str, _Acc]]] = {
            "group": _tree(),
            "system": _tree(),
            "question_type": _tree(),
            "category": _tree(),
        }

    def add(self, item: ItemResult) -> None:
        """Add one item."""
        meta = {"id": item.id, "group": item.group, "system": item.system, "question_type": item.question_type}
        self.add_raw(meta, {name: r.model_dump() for name, r in item.metrics.items()})

    def add_raw(self, meta: dict[str, Any], metrics: dict[str, dict[str, Any]]) -> None:
        """Add one item given as plain dicts (the store's fast path)."""
        self.items += 1
        if meta.get("system") is not None and meta.get("id") is not None:
            self.system_ids.append(hash(str(meta["id"])))  # one process aggregates: its own hash() is enough
            self.system_numbers.append(self._system_number(str(meta["system"])))
        any_score, all_scored = False, bool(metrics)
        dims = [(dim, value) for dim in ("group", "system", "question_type") if (value := meta.get(dim)) is not None]
        if dims and dims[-1][0] == "question_type" and isinstance(dims[-1][1], str):  # "yes/no", "YES_NO": one group
            dims[-1] = ("question_type", grouped_question_type(dims[-1][1]))
        for name, result in metrics.items():
            score, error = result.get("score"), result.get("error")
            any_score = any_score or score is not None
            all_scored = all_scored and score is not None
            details = result.get("details") or {}
            stopped, empty = bool(details.get("stopped")), retrieved_nothing(details)
            self.metrics[name].add(score, error, details.get("reason"), stopped, item=meta, empty=empty)
            for dim, value in dims:
                self._breakdown(dim, value)[name].add(score, error, stopped=stopped, empty=empty)
            if name == COMPARE_METRIC and error is None:
                self.wins.add(meta.get("id"), meta.get("system"), score)
            if name == RETRIEVAL_OUTPUT and score is not None and error is None and meta.get("system") is not None:
                self.retrieval.add(str(meta["system"]), empty, found=score > 0)
            if "ratings" in details:
                self.agreement[name].add_details(details)
            categories = details.get("categories")
            if isinstance(categories, dict):
                for category, cat_score in categories.items():
                    if error is not None:  # an errored item's partial ratios are no score: an error there too
                        self._breakdown("category", str(category))[name].add(None, error)
                    elif isinstance(cat_score, (int, float)) or cat_score is None:
                        self._breakdown("category", str(category))[name].add(cat_score, None)
        self.scored += any_score
        self.scored_all += all_scored

    def _system_number(self, system: str) -> int:
        """The number of ``system`` in :attr:`systems`; MAX_BREAKDOWN_VALUES for one past its first systems."""
        number = self.systems.get(system)
        if number is None:
            if len(self.systems) >= MAX_BREAKDOWN_VALUES:
                return MAX_BREAKDOWN_VALUES
            number = self.systems[system] = len(self.systems)
        return number

    def _breakdown(self, dim: str, value: str) -> defaultdict[str, _Acc]:
        """The accumulators of one value of a breakdown; past MAX_BREAKDOWN_VALUES, those of OTHER_VALUES."""
        tree = self.by[dim]
        if value not in tree and len(tree) >= MAX_BREAKDOWN_VALUES:
            value = OTHER_VALUES
        return tree[value]

    def summary(self, run_id: str, **extra: Any) -> RunSummary:
        def dump(tree: Mapping[str, Mapping[str, _Acc]]) -> dict[str, dict[str, MetricSummary]]:
            return {k: {m: acc.summary() for m, acc in sorted(v.items())} for k, v in sorted(tree.items())}

        paired = pairing(self.system_ids, self.system_numbers, len(self.systems))  # the one sort of the ids
        return RunSummary(
            run_id=run_id,
            items=self.items,
            scored=self.scored,
            scored_all=self.scored_all,
            metrics={name: acc.summary() for name, acc in self.metrics.items()},
            by_group=dump(self.by["group"]),
            by_system=dump(self.by["system"]),
            by_question_type=dump(self.by["question_type"]),
            by_category=dump(self.by["category"]),
            wins=self.wins.summary(),
            paired_questions=paired.questions,
            paired_systems=self._paired_systems(paired.partners),
            retrieved_systems=self.retrieval.systems(),
            **extra,
        )

    def _paired_systems(self, partners: list[int]) -> dict[str, int]:
        """Per system of the breakdown (not those pooled past its first values), how many others of them share a
        question id with it (``partners``: :func:`pairing`'s, by system number)."""
        shown = self.by["system"]
        return {name: partners[n] for name, n in self.systems.items() if name in shown and name != OTHER_VALUES}


def summarize(run_id: str, items: Iterable[ItemResult], **extra: Any) -> RunSummary:
    """Aggregate an iterable of items in one pass."""
    agg = Aggregator()
    for item in items:
        agg.add(item)
    return agg.summary(run_id, **extra)
