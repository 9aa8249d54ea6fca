"""Compare systems on the same questions: several runs, or one run in which several ``system``s answered.

Statistics (pure functions, seeded, so a re-run prints the same numbers):

* :func:`paired_ci`: percentile bootstrap 95% interval of the mean paired difference (the resampled unit is
  the question, so both systems' scores of a question move together); the same estimator as every ci95.
* :func:`permutation_p`: two-sided sign-flip permutation test of "mean difference = 0": under the null the
  sign of each question's difference is a coin flip. Exact (all ``2^m`` sign vectors) for up to
  ``EXACT_MAX`` non-zero differences; else ``PERMUTATIONS`` seeded random flips, drawn per distinct
  absolute difference (O(resamples x levels) for 0/1 and rating metrics), per question for continuous
  scores up to ``MAX_RESAMPLE_N``, and the normal approximation beyond.
* :func:`wins`: per question, the system with the best score wins; equal best scores are a tie.

Scores closer than ``TIE_TOLERANCE`` are equal in both: the float noise of two runs of the same texts is no
difference, however consistent its sign.

:func:`collect` reads the runs once (streaming) into one score matrix per metric output: memory is
questions x systems x outputs x 8 bytes (1M questions, 2 systems, 5 outputs: 80 MB) plus the question ids.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from ragscore_workers.aggregate import BOOTSTRAP_SEED, MAX_RESAMPLE_N, bootstrap_ci
from ragscore_workers.commands import backticked
from ragscore_workers.counts import agree, counted, thousands
from ragscore_workers.metrics.registry import BY_DESIGN_REASONS, higher_is_better

from ..terminal import resume_command
from .source import RunData

__all__ = [
    "MIN_PAIRS",
    "SIGNIFICANT_P",
    "TIE_TOLERANCE",
    "Comparison",
    "Difference",
    "alone_text",
    "collect",
    "compare",
    "mismatch_text",
    "paired_ci",
    "permutation_p",
    "point_table",
    "significance",
    "unchecked_text",
    "unpaired_text",
    "unscored_text",
    "verdict",
    "wins",
    "worse_end",
    "worse_failures",
]

#: Random sign flips of the permutation test.
PERMUTATIONS = 10_000
#: Up to this many non-zero differences, the permutation test enumerates every sign vector.
EXACT_MAX = 16
#: Ids named per system whose question differs from the baseline's.
MAX_MISMATCH_IDS = 5
#: Questions shown in the side-by-side table of evaluation points.
MAX_POINT_QUESTIONS = 50
_LEVELS_MAX = 64
#: A difference is significant only when its permutation p is below this too: with a few questions all moving the
#: same way, the bootstrap interval is a point that excludes 0 while p says it could be chance (3 of 3 up: p = 0.25).
SIGNIFICANT_P = 0.05
#: Fewest pairs whose two-sided sign-flip p can fall below ``SIGNIFICANT_P`` (its least is 2 / 2^n: 1/32 at 6):
#: with fewer, no difference is significant, so ``--fail-on-worse`` fails them rather than pass them unseen.
MIN_PAIRS = 6
#: Scores closer than this are equal (a tie, a difference of 0): an embedding metric's fp32 cosine of the same texts
#: differs by ~1e-7 between runs that batched them otherwise, which read as wins and losses, and over 30 questions
#: all one way as a significant difference; scores are shown to 3 decimals.
TIE_TOLERANCE = 1e-6


def paired_ci(diffs: Sequence[float] | np.ndarray, seed: int = BOOTSTRAP_SEED) -> list[float] | None:
    """95% paired-bootstrap interval of the mean of ``diffs`` (None without differences). The differences are
    resampled in one orientation whichever system is the baseline, so swapping the two mirrors the interval exactly
    (a multinomial draw over the distinct values, in their sorted order, does not mirror)."""
    d = np.asarray(diffs, dtype=float)
    total = float(d.sum())
    flip = total < 0 or (total == 0 and tuple(np.sort(-d)) > tuple(np.sort(d)))
    ci = bootstrap_ci(-d if flip else d, seed=seed)
    return [-ci[1], -ci[0]] if ci is not None and flip else ci


def permutation_p(
    diffs: Sequence[float] | np.ndarray, resamples: int = PERMUTATIONS, seed: int = BOOTSTRAP_SEED
) -> float:
    """Two-sided sign-flip p-value of ``mean(diffs) == 0`` (1.0 when every difference is 0)."""
    d = np.asarray(diffs, dtype=float)
    a = np.abs(d[d != 0])
    m = a.size
    if m == 0:
        return 1.0
    observed = abs(float(d.sum()))
    threshold = observed - 1e-9 * max(1.0, observed)
    if m <= EXACT_MAX:
        bits = (np.arange(2**m)[:, None] >> np.arange(m)) & 1
        sums = (1 - 2 * bits) @ a
        return float(np.mean(np.abs(sums) >= threshold))
    rng = np.random.default_rng(seed)
    levels, counts = np.unique(a, return_counts=True)
    if levels.size <= _LEVELS_MAX:
        positive = rng.binomial(counts, 0.5, size=(resamples, levels.size))
        sums = (2 * positive - counts) @ levels
    elif m <= MAX_RESAMPLE_N:
        sums = np.empty(resamples)
        step = max(1, 2_000_000 // m)
        for start in range(0, resamples, step):
            stop = min(resamples, start + step)
            signs = rng.integers(0, 2, size=(stop - start, m)) * 2 - 1
            sums[start:stop] = signs @ a
    else:
        return math.erfc(observed / math.sqrt(float(np.sum(a * a))) / math.sqrt(2.0))
    return float((1 + np.count_nonzero(np.abs(sums) >= threshold)) / (1 + resamples))


def wins(scores: np.ndarray, higher_better: bool = True) -> tuple[list[int], int, int]:
    """``(wins per column, ties, questions)`` over rows where at least two columns have a score (not NaN)."""
    x = np.asarray(scores, dtype=float)
    rows = x[np.sum(~np.isnan(x), axis=1) >= 2]
    if not higher_better:
        rows = -rows
    filled = np.where(np.isnan(rows), -np.inf, rows)
    best = filled.max(axis=1, keepdims=True)
    at_best = filled >= best - TIE_TOLERANCE
    single = at_best.sum(axis=1) == 1
    per_column = at_best[single].sum(axis=0)
    return [int(v) for v in per_column], int((~single).sum()), int(rows.shape[0])


@dataclass(frozen=True)
class Difference:
    """One system against the baseline on one metric output, over their shared questions."""

    metric: str
    arm: str
    n: int
    base_mean: float | None
    arm_mean: float | None
    diff: float | None
    ci95: list[float] | None
    p: float | None
    wins: int
    ties: int
    losses: int
    #: The system it is compared with: the baseline, or in a comparison by system its namesake in the first run
    #: (:func:`compare` always names it).
    base: str = ""
    #: Items of this output only the baseline scored, and only the system: not paired, so not in ``n`` (an id whose
    #: question differs between the two is counted on both sides).
    only_base: int = 0
    only_arm: int = 0


@dataclass
class Comparison:
    """Everything the compare reports show."""

    arms: list[str]
    metrics: list[str]
    means: dict[str, dict[str, float | None]]
    counts: dict[str, dict[str, int]]
    differences: list[Difference]
    #: Per output: ``metric``, ``wins`` per system, ``ties``, ``questions``; compared by system, one per output and
    #: pair, with its ``pair`` (the baseline, the system).
    wins: list[dict[str, Any]]
    points: list[dict[str, Any]] = field(default_factory=list)
    seed: int = BOOTSTRAP_SEED
    #: Per system: ids that hold a different question than in the baseline, left out of its pairs (up to
    #: ``MAX_MISMATCH_IDS`` shown) and how many there were. An id on which two systems that scored it differ is
    #: left out of the wins and the points too.
    mismatched: dict[str, tuple[int, list[str]]] = field(default_factory=dict)
    #: Systems whose items carry no question fingerprint (runs made before items had ``question_sha``).
    unchecked: list[str] = field(default_factory=list)
    #: Systems that share no question scored by both with the baseline: every row of theirs reads ``n=0``.
    unpaired: list[str] = field(default_factory=list)
    #: Per output and system: items whose score is an error, left out of the comparison (non-zero counts only).
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Per compared system: the system it is compared with (``arms[0]``, unless compared by system).
    bases: dict[str, str] = field(default_factory=dict)
    #: Compared by system (each system of a later run against its namesake in the first run): that run's name.
    by_system: str | None = None
    #: Compared by system: systems with no namesake in the first run (shown, compared with nothing).
    alone: list[str] = field(default_factory=list)
    #: Per output some compared system scored: the systems none of whose items has it (another suite; those compared
    #: with nothing too, whose cell of the means says so): its differences with them are not shown (:meth:`shown`),
    #: nor is its row of means where one system alone has it (:meth:`only_in`).
    unscored: dict[str, list[str]] = field(default_factory=dict)
    #: Per output some compared system scored: the systems shown (those compared with nothing too) whose items of it
    #: were all unscorable (no error; not all for lack of contexts, :attr:`inapplicable`): "no scored rows" in their
    #: cell of the means, and a gate failure.
    unscorable: dict[str, list[str]] = field(default_factory=dict)
    #: Per output: the systems shown (those compared with nothing too) whose items of it all lack a field a system may
    #: lack by design (``no contexts``: an LLM alone on the context metrics): "no scored rows" too, but not comparable,
    #: so not gated.
    inapplicable: dict[str, list[str]] = field(default_factory=dict)
    #: Per output of :attr:`inapplicable` and system of it there: the reasons that system's items give (``no
    #: contexts``, ``no retrieved_doc_ids``), each system's own: an LLM alone's lack is not said of another system.
    lacks: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def shown(self) -> list[Difference]:
        """The differences the tables show and ``--fail-on-worse`` gates: not those of an output one side's suite has
        no metric for (``n=0`` always), which a note names once (:func:`unscored_text`)."""
        return [d for d in self.differences if not {d.base, d.arm} & set(self.unscored.get(d.metric, ()))]

    def gated(self) -> list[Difference]:
        """The differences ``--fail-on-worse`` gates: those shown, but not of an output a side could not score by
        design (:attr:`inapplicable`), said once in a note instead."""
        return [d for d in self.shown() if not {d.base, d.arm} & set(self.inapplicable.get(d.metric, ()))]

    def only_in(self) -> dict[str, list[str]]:
        """Per output some compared system's suite has no metric for: the compared systems whose suites have it."""
        compared = set(self.bases) | set(self.bases.values())
        return {name: [arm for arm in self.arms if arm in compared and arm not in lacking]
                for name, lacking in self.unscored.items() if compared.intersection(lacking)}  # fmt: skip

    def baseline_text(self) -> str:
        """What the others are compared with: ``arms[0]``, or each system's namesake in the first run."""
        return f"its namesake in {self.by_system}" if self.by_system is not None else self.arms[0]


class _Scores:
    """question id -> row; per (arm, output) a float array with NaN where the arm has no score; per arm the
    rows' question fingerprints (``item.question_sha`` as an int, -1 where unknown)."""

    def __init__(self) -> None:
        self.rows: dict[str, int] = {}
        self.arms: dict[tuple[int, str | None], int] = {}
        self.values: dict[tuple[int, str], array] = {}
        self.questions: dict[int, array] = {}
        #: (arm, output) -> items whose output has an error (left out as if unscored)
        self.errors: Counter[tuple[int, str]] = Counter()
        #: (arm, output) -> items whose output is unscorable (no score, no error)
        self.unscorable: Counter[tuple[int, str]] = Counter()
        #: (arm, output) -> of those, items that lack a field a system may lack by design (``no contexts``)
        self.by_design: Counter[tuple[int, str]] = Counter()
        #: (arm, output) -> the reasons of its items that lack a field by design (``no contexts``, ``no
        #: retrieved_doc_ids``)
        self.lacks: dict[tuple[int, str], set[str]] = {}

    def unscorable_as(self, arm: int, output: str, reason: Any) -> None:
        """Count an item of ``arm`` whose ``output`` is unscorable for ``reason`` (by design or not)."""
        self.unscorable[arm, output] += 1
        if reason in BY_DESIGN_REASONS:
            self.by_design[arm, output] += 1
            self.lacks.setdefault((arm, output), set()).add(reason)

    def set_question(self, arm: int, qid: str, sha: str) -> None:
        """Note the question an arm's item ``qid`` asked (scored or not); a value that is no fingerprint (an
        edited file) is ignored."""
        try:
            value = int(sha, 16) if len(sha) <= 15 else -1  # 15 hex digits fit an int64
        except ValueError:
            value = -1
        if value < 0:
            return
        row = self.rows.setdefault(qid, len(self.rows))
        values = self.questions.setdefault(arm, array("q"))
        if len(values) <= row:
            values.extend([-1] * (row + 1 - len(values)))
        values[row] = value

    def question_matrix(self) -> np.ndarray:
        """Rows x arms: each arm's question fingerprint of each row, -1 where unknown."""
        out = np.full((len(self.rows), len(self.arms)), -1, dtype=np.int64)
        for arm, values in self.questions.items():
            out[: len(values), arm] = np.frombuffer(values, dtype=np.int64)
        return out

    def arm(self, run: int, system: str | None) -> int:
        return self.arms.setdefault((run, system), len(self.arms))

    def set(self, arm: int, qid: str, output: str, score: float) -> None:
        row = self.rows.setdefault(qid, len(self.rows))
        values = self.values.setdefault((arm, output), array("d"))
        if len(values) <= row:
            values.extend([math.nan] * (row + 1 - len(values)))
        values[row] = score

    def matrix(self, output: str) -> np.ndarray:
        out = np.full((len(self.rows), len(self.arms)), np.nan)
        for (arm, name), values in self.values.items():
            if name == output:
                out[: len(values), arm] = np.frombuffer(values, dtype=float)
        return out


def significance(d: Difference) -> int:
    """1 when the system is significantly better than its baseline, -1 worse, 0 neither: the 95% interval excludes 0
    and p < ``SIGNIFICANT_P``, in the metric's direction."""
    if d.ci95 is None or d.ci95[0] <= 0.0 <= d.ci95[1] or d.p is None or d.p >= SIGNIFICANT_P:
        return 0
    return 1 if (d.ci95[0] > 0) == higher_is_better(d.metric) else -1


def verdict(d: Difference) -> str:
    """A difference in words, as every compare report writes it: ``better`` or ``worse`` when it is significant
    (:func:`significance`, in the metric's direction), ``too few pairs`` under ``MIN_PAIRS`` (none could be),
    else ``no clear difference``; ``-`` with no pair."""
    if not d.n:
        return "-"
    if d.n < MIN_PAIRS:
        return "too few pairs"
    return {1: "better", -1: "worse", 0: "no clear difference"}[significance(d)]


def worse_end(d: Difference) -> float | None:
    """The end of the 95% interval on the system's worse side: its lower end, or its upper one where lower is
    better."""
    if d.ci95 is None:
        return None
    return d.ci95[0] if higher_is_better(d.metric) else d.ci95[1]


def worse_failures(c: Comparison, margin: float | None = None) -> list[tuple[Difference, str]]:
    """``--fail-on-worse``: each difference that fails it, with why. Without ``margin``, a system fails an output
    on which it is significantly worse than its baseline (:func:`significance`); with a non-inferiority ``margin``
    X, one whose interval's worse end is below -X (not shown to be at most X worse). Fewer than ``MIN_PAIRS``
    pairs fail: nothing could be told from them, and so do outputs with no scored rows in one of the two. An output
    one side's suite has no metric for, or one side's rows lack by design (:meth:`Comparison.gated`), is not gated:
    it neither fails nor holds."""
    failures = []
    for d in c.gated():
        end = worse_end(d)
        if none := [arm for arm in (d.base, d.arm) if not c.counts[d.metric][arm]]:
            failures.append((d, f"not compared: no scored rows in {' and '.join(none)} "
                                f"({_none_scored_why(c, d.metric, none)})"))  # fmt: skip
        elif d.n < MIN_PAIRS or end is None:
            failures.append((d, f"too few pairs: {counted(d.n, 'shared question')} scored by both (at least "
                                f"{MIN_PAIRS} to tell a difference)"))  # fmt: skip
        elif margin is None and significance(d) < 0:
            failures.append((d, "significantly worse (the 95% CI excludes 0 and p < 0.05)"))
        elif margin is not None and (end if higher_is_better(d.metric) else -end) < -margin - 1e-9:
            past = f"below -{margin:g}" if higher_is_better(d.metric) else f"above +{margin:g}"
            failures.append((d, f"may be more than {margin:g} worse (the 95% CI's worse end is {past})"))
    return failures


def _none_scored_why(c: Comparison, metric: str, arms: list[str]) -> str:
    """Why ``arms`` scored no item of ``metric``, as :func:`unscored_text` and :func:`errors_text` say it."""
    if all(arm in c.unscorable.get(metric, ()) for arm in arms):
        return "every item of it unscorable: its run's summary says why"
    return "its items errored or were unscorable: see the notes above"


def _labels(runs: Sequence[RunData], arms: dict[tuple[int, str | None], int]) -> list[str]:
    """A name per arm: its system, else its run's directory; runs named alike by as many of their path's last parts
    as tell them apart (``x1/results``, ``x2/results``), else by their place (``1:results``)."""

    def origin(run: RunData, parts: int) -> str:  # ``compare .`` names the directory, not ""
        return PurePath(*run.directory.resolve().parts[-parts:]).as_posix() if run.directory else run.origin

    def name(run: int, system: str | None, parts: int) -> str:
        """``system``, else the run's directory; from 1 part on, ``DIR:system`` with as many parts of DIR."""
        if not parts:
            return system or origin(runs[run], 1)
        return f"{origin(runs[run], parts)}:{system}" if system else origin(runs[run], parts)

    parts = dict.fromkeys(arms, 0)  # per arm: how much of its run's path its name holds
    deepest = max((len(r.directory.resolve().parts) for r in runs if r.directory), default=1)
    while True:  # lengthen only the names that clash, until none does or the paths are whole
        names = {arm: name(*arm, parts[arm]) for arm in arms}
        clashing = [arm for arm in arms if list(names.values()).count(names[arm]) > 1 and parts[arm] < deepest]
        if not clashing:
            break
        for arm in clashing:
            parts[arm] += 1
    labels = [""] * len(arms)
    for arm, index in arms.items():
        labels[index] = names[arm]
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}:{n}" for i, n in enumerate(labels)]
    return labels


def _baseline_label(baseline: str, runs: Sequence[RunData], scores: _Scores, labels: list[str]) -> str:
    """The arm ``--baseline`` names: a label, or the directory of a run of one system (``--baseline runs/a/``)."""
    if baseline in labels:
        return baseline
    where = Path(baseline).resolve()
    for run, data in enumerate(runs):
        own = [index for (r, _), index in scores.arms.items() if r == run]
        if data.directory is not None and data.directory.resolve() == where and len(own) == 1:
            return labels[own[0]]
    named = sorted((run, index) for (run, system), index in scores.arms.items() if system == baseline)
    if named:  # a bare system name (``before:x``, ``after:x`` are both ``x``): the first run's
        return labels[named[0][1]]
    raise ValueError(f"--baseline {baseline!r} is none of the systems: {', '.join(labels)}")


def _namesakes(runs: Sequence[RunData], scores: _Scores) -> dict[int, int]:
    """Arm -> the arm it is compared with when runs are compared by system: each system of a later run against its
    namesake in the first run, when that run holds several systems and another run shares a name; else ``{}``."""
    first = {system: arm for (run, system), arm in scores.arms.items() if run == 0}
    if len(runs) < 2 or len(first) < 2 or any(system is None for _, system in scores.arms):
        return {}  # items without a system are no system of a name: one baseline, as before
    return {arm: first[system] for (run, system), arm in scores.arms.items() if run > 0 and system in first}


def _same_runs(runs: Sequence[RunData]) -> None:
    """Refuses a source given twice (``compare X X``, ``compare X ./X``, a run id twice): it compared the run with
    itself. Two sources of one run (its id and its --out DIR, or a DIR and a copy, maybe edited) are compared."""
    seen: dict[object, str] = {}  # a DIR given, resolved, or a run id of the store -> as given first
    for run in runs:
        key = run.directory.resolve() if run.directory is not None else run.origin
        if (first := seen.get(key)) is not None:
            again = f" (as {run.origin})" if run.origin != first else ""
            raise ValueError(f"{first} is given twice{again}: compare a run with another run")
        seen[key] = run.origin


def one_run_text(runs: Sequence[RunData]) -> str | None:
    """That sources given hold one run (its id and its --out DIR, a DIR and a copy of it), compared with itself: no
    difference unless one was edited; None where each source is its own run."""
    by_id: dict[str, list[str]] = {}
    for run in (run for run in runs if run.summary.run_id):
        by_id.setdefault(run.summary.run_id, []).append(run.origin)
    said = [f"{' and '.join(origins)} hold one run ({run_id})" for run_id, origins in by_id.items() if len(origins) > 1]
    return "; ".join(said) + ": it is compared with itself, no difference unless one was edited" if said else None


def collect(runs: Sequence[RunData]) -> tuple[_Scores, list[str], list[str]]:
    """Read every run once: ``(scores, arm labels, metric outputs in first-seen order)``."""
    scores = _Scores()
    outputs: dict[str, None] = {}
    for index, run in enumerate(runs):
        outputs.update(dict.fromkeys(run.summary.metrics))
        for item in run.items():
            arm = scores.arm(index, item.meta.get("system"))
            for name, result in item.metrics.items():
                if result.get("error") is not None:
                    scores.errors[arm, name] += 1
                elif result.get("score") is not None:
                    scores.set(arm, str(item.meta["id"]), name, float(result["score"]))
                else:
                    scores.unscorable_as(arm, name, (result.get("details") or {}).get("reason"))
            if isinstance(sha := item.meta.get("question_sha"), str):
                scores.set_question(arm, str(item.meta["id"]), sha)
    return scores, _labels(runs, scores.arms), list(outputs)


@dataclass(frozen=True)
class _Mismatch:
    """Where runs' ids name different questions (two datasets with ``row-N`` ids, reordered lines)."""

    #: per system: how many ids differ from the baseline's question, and the first of them
    said: dict[str, tuple[int, list[str]]]
    #: per column (in compare order): the rows to leave out of that system's pairs with the baseline
    left_out: dict[int, np.ndarray]


def _mismatched(questions: np.ndarray, ids: list[str], arms: list[str], pairs: list[tuple[int, int]]) -> _Mismatch:
    """``questions``: rows x systems (compare order) of fingerprints, -1 where unknown; ``pairs``: (baseline,
    system) columns compared."""
    said: dict[str, tuple[int, list[str]]] = {}
    left_out: dict[int, np.ndarray] = {}
    for b, i in pairs:
        base = questions[:, b]
        rows = np.flatnonzero((base >= 0) & (questions[:, i] >= 0) & (base != questions[:, i]))
        if rows.size:
            said[arms[i]] = (int(rows.size), [ids[r] for r in rows[:MAX_MISMATCH_IDS]])
            left_out[i] = rows
    return _Mismatch(said, left_out)


def _mixed(questions: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Rows on which two systems that scored them asked different questions: no contest (wins, points)."""
    known = (questions >= 0) & ~np.isnan(scores)
    high = np.where(known, questions, np.iinfo(np.int64).min).max(axis=1, initial=np.iinfo(np.int64).min)
    low = np.where(known, questions, np.iinfo(np.int64).max).min(axis=1, initial=np.iinfo(np.int64).max)
    return np.flatnonzero(known.any(axis=1) & (high != low))


def unpaired_text(unpaired: list[str], baseline: str) -> str:
    """Says which systems were compared on nothing (no question scored by both with the baseline: ``arms[0]``, or
    ``its namesake in RUN``)."""
    share = agree(len(unpaired), "shares", "share")
    nothing = agree(len(unpaired), "nothing of it is compared; was it", "nothing of theirs is compared; were they")
    return (f"{', '.join(unpaired)} {share} no question scored by both with the baseline {baseline} (questions are "
            f"paired by id, per system): {nothing} run on the same dataset?")  # fmt: skip


def alone_text(alone: list[str]) -> str:
    """Says which systems of a comparison by system have no namesake to be compared with: one of the first run that
    no later run holds, or one of a later run that the first does not."""
    return (f"{', '.join(alone)}: no system of the same name on the other side of the comparison, so compared with "
            "nothing")  # fmt: skip


def unchecked_text(unchecked: list[str]) -> str:
    """Says which systems' questions could not be checked against the others'."""
    return (f"{', '.join(unchecked)}: no question fingerprints (items without a question, or a run made before "
            "items carried `question_sha`), so questions are paired by id unchecked")  # fmt: skip


def _unscored(
    counts: dict[str, dict[str, int]], arms: list[str], why: Callable[[str, str], bool], of: list[str] | None = None
) -> dict[str, list[str]]:
    """Per output some of ``arms`` scored: those of ``of`` (default ``arms``) that scored no item of it, for which
    ``why(output, arm)``."""
    said = {name: [arm for arm in (of or arms) if not per[arm] and why(name, arm)]
            for name, per in counts.items() if any(per[arm] for arm in arms)}  # fmt: skip
    return {name: missing for name, missing in said.items() if missing}


def unscored_text(c: Comparison) -> str:
    """Says once which outputs only some compared systems' suites have (:meth:`Comparison.only_in`), left out of the
    differences, and which some systems' suites have but scored no row of: by design (no contexts: not gated) or
    not."""
    parts = [f"only in {', '.join(arms)}: {', '.join(names)}" for arms, names in _by_arms(c.only_in())]
    if parts:
        parts[-1] += " (the other compared runs' suites have no such metric)"
    parts += [
        f"no scored rows in {', '.join(arms)}: {', '.join(names)} (every item unscorable: its run's summary says why)"
        for arms, names in _by_arms(c.unscorable)
    ]
    parts += [
        f"no scored rows in {', '.join(arms)}: {', '.join(names)} (its rows have {why}, as a system that retrieves "
        "nothing: not comparable, so --fail-on-worse leaves it out)"
        for why, per in _by_lack(c).items() for arms, names in _by_arms(per)
    ]  # fmt: skip
    return "; ".join(parts)


def _by_lack(c: Comparison) -> dict[str, dict[str, list[str]]]:
    """:attr:`Comparison.inapplicable` by what each system's rows of its outputs lack (``no contexts``, ``no
    retrieved_doc_ids``)."""
    by_lack: dict[str, dict[str, list[str]]] = {}
    for name, arms in c.inapplicable.items():
        for arm in arms:
            by_lack.setdefault(" or ".join(c.lacks[name][arm]), {}).setdefault(name, []).append(arm)
    return by_lack


def _by_arms(per: dict[str, list[str]]) -> list[tuple[list[str], list[str]]]:
    """``{output: systems}`` as ``(systems, outputs)``, the outputs of the same systems together."""
    by_arms: dict[tuple[str, ...], list[str]] = {}
    for name, arms in per.items():
        by_arms.setdefault(tuple(arms), []).append(name)
    return [(list(arms), names) for arms, names in by_arms.items()]


def errors_text(errors: dict[str, dict[str, int]]) -> str:
    """Says which outputs had errors, in which systems: those items are left out of the comparison."""
    parts = [
        f"{name}: {', '.join(f'{thousands(count)} of {arm}' for arm, count in per.items())}"
        for name, per in errors.items()
    ]
    return (f"items whose score is an error are left out of the comparison ({'; '.join(parts)}): a system's errors "
            f"can hide where it is worse; {backticked(resume_command('DIR'))} scores them again")  # fmt: skip


def mismatch_text(mismatched: dict[str, tuple[int, list[str]]], baseline: str) -> str:
    """Says which ids hold different questions than in the baseline, and what to do."""
    parts = [f"{thousands(count)} in {arm} (e.g. {', '.join(ids)})" for arm, (count, ids) in mismatched.items()]
    return (
        f"Some ids hold a different question than in {baseline}, so they were left out of the comparison: "
        f"{'; '.join(parts)}. Questions are paired by id: give every row an id of its own (an `id` field) "
        "rather than its line number (row-N), and compare runs of the same questions"
    )


def _mean(x: np.ndarray) -> float | None:
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else None


def compare(
    runs: Sequence[RunData], seed: int = BOOTSTRAP_SEED, points: bool = True, baseline: str | None = None
) -> Comparison:
    """Compare every system of ``runs`` with the baseline (the first one, or the one named) on shared questions."""
    _same_runs(runs)
    scores, labels, outputs = collect(runs)
    if len(labels) < 2:
        raise ValueError("compare needs at least two systems: give two runs, or a run with several systems")
    if baseline is not None:
        baseline = _baseline_label(baseline, runs, scores, labels)
    namesakes = _namesakes(runs, scores) if baseline is None else {}
    by_system = None
    if namesakes:  # each first-run system, then its namesakes; then the systems with none
        firsts = sorted(set(namesakes.values()))
        order = [a for f in firsts for a in [f, *sorted(a for a, b in namesakes.items() if b == f)]]
        order += [i for i in range(len(labels)) if i not in order]
        where = {arm: column for column, arm in enumerate(order)}
        pairs = [(where[namesakes[a]], where[a]) for a in order if a in namesakes]
        base_system = next(s for (r, s), a in scores.arms.items() if a == firsts[0])
        by_system = labels[firsts[0]][: -len(f":{base_system}")]
    else:
        first = labels.index(baseline) if baseline is not None else 0
        order = [first] + [i for i in range(len(labels)) if i != first]
        pairs = [(0, i) for i in range(1, len(order))]
    arms = [labels[i] for i in order]
    compared = {b for b, _ in pairs} | {i for _, i in pairs}
    alone = [arm for i, arm in enumerate(arms) if i not in compared]
    questions = scores.question_matrix()[:, order]
    mismatch = _mismatched(questions, list(scores.rows), arms, pairs)
    unchecked = [arm for i, arm in enumerate(arms) if not (questions[:, i] >= 0).any()]
    means: dict[str, dict[str, float | None]] = {}
    counts: dict[str, dict[str, int]] = {}
    differences, win_rows = [], []
    mixed_rows: dict[str, np.ndarray] = {}  # per output: rows that are no contest (wins, points)
    for name in outputs:
        x = scores.matrix(name)[:, order]
        mixed = mixed_rows[name] = _mixed(questions, x)
        means[name] = {arm: _mean(x[:, i]) for i, arm in enumerate(arms)}  # each over its own scored items
        counts[name] = {arm: int(np.count_nonzero(~np.isnan(x[:, i]))) for i, arm in enumerate(arms)}
        for i, rows in mismatch.left_out.items():  # pairs of different questions are no pairs
            x[rows, i] = np.nan
        sign = 1.0 if higher_is_better(name) else -1.0
        for b, i in pairs:
            both = ~np.isnan(x[:, b]) & ~np.isnan(x[:, i])
            d = x[both, i] - x[both, b]
            d[np.abs(d) < TIE_TOLERANCE] = 0.0
            better = sign * d
            differences.append(Difference(
                metric=name, arm=arms[i], n=int(d.size), base_mean=_mean(x[both, b]), arm_mean=_mean(x[both, i]),
                diff=float(d.mean()) if d.size else None, ci95=paired_ci(d, seed) if d.size else None,
                p=permutation_p(d, seed=seed) if d.size else None, wins=int((better > 0).sum()),
                ties=int((better == 0).sum()), losses=int((better < 0).sum()), base=arms[b],
                only_base=counts[name][arms[b]] - int(d.size), only_arm=counts[name][arms[i]] - int(d.size),
            ))  # fmt: skip
        if by_system is not None:  # wins per pair: a system contests only its namesake
            for b, i in pairs:
                per_arm, ties, asked = wins(x[:, [b, i]], higher_is_better(name))
                win_rows.append({"metric": name, "wins": {arms[b]: per_arm[0], arms[i]: per_arm[1]}, "ties": ties,
                                 "questions": asked, "pair": (arms[b], arms[i])})  # fmt: skip
            continue
        x[mixed, :] = np.nan
        per_arm, ties, asked = wins(x, higher_is_better(name))
        win_rows.append({"metric": name, "wins": dict(zip(arms, per_arm, strict=True)), "ties": ties,
                         "questions": asked})  # fmt: skip
    errors = {name: {arms[i]: n for i, col in enumerate(order) if (n := scores.errors[col, name])} for name in outputs}
    errors = {name: per for name, per in errors.items() if per}
    unpaired = [arms[i] for _, i in pairs if not any(d.n for d in differences if d.arm == arms[i])]
    column = dict(zip(arms, order, strict=True))
    kept = [arms[i] for i in sorted(compared)]

    def unscorable_only(name: str, arm: str) -> bool:  # errors are errors_text's
        return not scores.errors[column[arm], name] and scores.unscorable[column[arm], name] > 0

    def absent(name: str, arm: str) -> bool:
        return not scores.errors[column[arm], name] and not scores.unscorable[column[arm], name]

    def by_design(name: str, arm: str) -> bool:  # every item lacks a field it may lack by design (no contexts)
        col = column[arm]
        return unscorable_only(name, arm) and scores.by_design[col, name] == scores.unscorable[col, name]

    def otherwise(name: str, arm: str) -> bool:
        return unscorable_only(name, arm) and not by_design(name, arm)

    # of every system shown: one compared with nothing (``alone``) too, whose cell of the means reads "no scored rows"
    unscored, unscorable = _unscored(counts, kept, absent, of=arms), _unscored(counts, kept, otherwise, of=arms)
    inapplicable = {name: lacking for name in outputs if (lacking := [
        arm for arm in arms if not counts[name][arm] and by_design(name, arm)])}  # fmt: skip
    comparison = Comparison(arms, outputs, means, counts, differences, win_rows, seed=seed, mismatched=mismatch.said,
                            unchecked=unchecked, unpaired=unpaired, errors=errors,
                            bases={arms[i]: arms[b] for b, i in pairs}, by_system=by_system, alone=alone,
                            unscored=unscored, unscorable=unscorable, inapplicable=inapplicable,
                            lacks={name: {arm: sorted(scores.lacks[column[arm], name]) for arm in lacking}
                                   for name, lacking in inapplicable.items()})  # fmt: skip
    if not any(d.n for d in differences):
        scored = {arm: [m for m in outputs if counts[m][arm]] for arm in arms}
        if not any(set(scored[arms[b]]) & set(scored[arms[i]]) for b, i in pairs):
            said = "; ".join(f"{arm}: {', '.join(names) or 'none'}" for arm, names in scored.items())
            why = errors_text(errors) if errors else "score the runs with the same suite to compare them"
            raise ValueError(f"{', '.join(arms)} have no metric output scored in common ({said}): {why}")
        against = comparison.baseline_text()
        # two systems share with each other; more share nothing with the one each is compared with ("A, B, C, D
        # share no question scored by both" read as if "both" were two of them)
        who = (f"{', '.join(arms)} share" if len(pairs) == 1 else
               f"{', '.join(unpaired)} {agree(len(unpaired), 'shares', 'share')}")  # fmt: skip
        with_base = "" if len(pairs) == 1 else f" with {'the baseline ' if by_system is None else ''}{against}"
        raise ValueError(
            f"{who} no question scored by both{with_base} (questions are paired by id, per system): "
            "nothing to compare" + (f". {mismatch_text(mismatch.said, against)}" if mismatch.said else "")
        )
    if points and "checks" in outputs:
        comparison.points = point_table(runs, scores, order, mixed_rows["checks"])
    return comparison


def _mark(point: dict[str, Any]) -> dict[str, str]:
    status = point.get("status")
    marks = {"passed": ("✓", "good"), "failed": ("✗", "bad"), "skipped": ("–", "bad"), "error": ("!", "bad")}
    mark, css = marks.get(str(status), ("·", ""))
    return {"mark": mark, "css": css, "note": str(point.get("note") or point.get("suggestion") or "")}


def point_table(
    runs: Sequence[RunData], scores: _Scores, order: list[int], mixed: np.ndarray | None = None
) -> list[dict[str, Any]]:
    """Side by side per question: each evaluation point of ``checks`` and how each system did on it.

    The questions shown are the ``MAX_POINT_QUESTIONS`` whose ``checks`` scores differ most between systems
    (in input order among equals; the first ``MAX_POINT_QUESTIONS // 5`` questions when none differs); a second
    streaming pass reads only their details. ``order``: the arm indices in the order the columns are shown;
    ``mixed``: rows whose systems asked different questions under one id (never shown side by side).
    """
    x = scores.matrix("checks")
    scored = np.sum(~np.isnan(x), axis=1) >= 2
    spread = np.where(scored, np.nanmax(np.where(np.isnan(x), -np.inf, x), axis=1) - np.nanmin(
        np.where(np.isnan(x), np.inf, x), axis=1), -1.0)  # fmt: skip
    if mixed is not None:
        spread[mixed] = -1.0
    ranked = np.argsort(-spread, kind="stable")[:MAX_POINT_QUESTIONS]
    ids_by_row = {row: qid for qid, row in scores.rows.items()}
    differ = [int(r) for r in ranked if spread[r] > 0]
    same = [int(r) for r in np.flatnonzero(spread == 0)[: MAX_POINT_QUESTIONS // 5]]
    chosen = {ids_by_row[r]: r for r in (differ or same)}
    found: dict[str, dict[int, dict[str, Any]]] = {qid: {} for qid in chosen}
    for index, run in enumerate(runs):
        for item in run.items():
            qid = str(item.meta["id"])
            if qid in found and "checks" in item.metrics:
                arm = scores.arms.get((index, item.meta.get("system")))
                if arm is not None:
                    found[qid][arm] = item.metrics["checks"]
    table = []
    for qid in sorted(chosen, key=lambda q: (-spread[chosen[q]], chosen[q])):
        per_arm = found[qid]
        point_ids: dict[str, str] = {}
        by_arm: dict[int, dict[str, dict[str, Any]]] = {}
        for arm, result in per_arm.items():
            pts = (result.get("details") or {}).get("points") or []
            by_arm[arm] = {str(p.get("id")): p for p in pts}
            for pid, p in by_arm[arm].items():
                point_ids.setdefault(pid, f"{pid}: {p['text']}" if p.get("text") else pid)
        rows = [
            {"point": label, "cells": [_mark(by_arm.get(a, {}).get(pid, {})) for a in order]}
            for pid, label in point_ids.items()
        ]
        checks = [per_arm.get(a, {}).get("score") for a in order]
        table.append({"id": qid, "rows": rows, "scores": ["-" if s is None else f"{s:.3f}" for s in checks]})
    return table
