"""The dry run's time of the cpu and code queues, whose metrics it does not run on every item.

The cpu queue's is measured: the suite's cpu metrics (the registry's own functions) score a sample of the items in this
process (:data:`SAMPLE_ITEMS` at most, spread through the file by a seeded reservoir, within :data:`SAMPLE_BUDGET_S`
after the first item's untimed load, :data:`SAMPLE_LOAD_S` at most; a metric that hangs is left to its daemon thread,
its item counted at the time it took so far), and their time an item is scaled by the items the queue scores over its
worker processes. It is the metrics' own time: a worker adds its messages and writes, and a metric whose time varies
with its input more than the sample shows may take longer. The code queue's is bounded: each of its items' programs
(:func:`code_programs_s`: a ``code_test``'s one, a ``checks``'s each ``code_test`` point) may run for its time limit, so
their limits together over the processes are the most they take; most end far sooner, and a dry run does not run them.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from pydantic import BaseModel

from ragscore_workers.metrics._validators import PointSpecError
from ragscore_workers.metrics.checks import ChecksParams, parse_points
from ragscore_workers.metrics.code_test import CodeTestParams
from ragscore_workers.metrics.registry import MetricDef, RunContext
from ragscore_workers.schemas import Row
from ragscore_workers.scoring import score_rows

from .suite import ResolvedSuite

__all__ = [
    "SAMPLE_BUDGET_S",
    "SAMPLE_ITEMS",
    "SAMPLE_LOAD_S",
    "ItemSample",
    "ProgramTally",
    "QueueTiming",
    "code_programs_s",
    "time_items",
]

#: Items of the cpu queue a dry run scores to time it, at most.
SAMPLE_ITEMS = 64
#: Seconds a dry run spends scoring its sample, at most: it stops at the first item that ends past them.
SAMPLE_BUDGET_S = 3.0
#: Seconds a dry run waits for the sample's first item, scored untimed (a metric's first-use load: WordNet, a
#: tokenizer), at most: past them the cpu queue is not timed.
SAMPLE_LOAD_S = 30.0
#: The run id the sample's metrics are given (a batch metric's context): no run store is written.
_SAMPLE_RUN_ID = "dry-run-sample"


class ItemSample:
    """Up to ``size`` items, each with the names of the metrics that score it on the queue, spread through the file:
    a reservoir sample, seeded so that the same file gives the same sample."""

    def __init__(self, size: int = SAMPLE_ITEMS) -> None:
        self.size = size
        self.seen = 0
        self.items: list[tuple[Row, list[str]]] = []
        self._random = random.Random(0)

    def see(self, row: Row, names: list[str]) -> None:
        """Offer ``row`` (scored by the metrics ``names``): kept while the sample is short, else in place of a kept
        one with the chance ``size / seen``."""
        self.seen += 1
        if len(self.items) < self.size:
            self.items.append((row, names))
        elif (slot := self._random.randrange(self.seen)) < self.size:
            self.items[slot] = (row, names)


@dataclass(frozen=True)
class QueueTiming:
    """A queue's items, the sample of them scored here and their time."""

    #: Items the queue scores in the run.
    items: int
    #: Items of the sample that were scored and timed.
    timed: int
    #: Their metrics' seconds, together.
    seconds: float
    #: Whether the last of them was still being scored at the sample's bound (its time so far counted: a low end).
    cut: bool = False

    @property
    def per_item_s(self) -> float:
        """Seconds an item's metrics took on average (0 where none was timed)."""
        return self.seconds / self.timed if self.timed else 0.0

    def estimated_s(self, processes: int) -> float:
        """The queue's items at the sample's time each over ``processes`` worker processes, each on a core."""
        return self.per_item_s * self.items / max(1, processes)

    def busy_s(self, processes: int, load: float, cores: int) -> float:
        """The same where this machine stays as busy as its ``load`` average over ``cores``: the processes get the
        cores' share that the load leaves them (``cores x processes / (load + processes)``), one at least."""
        share = max(1.0, min(processes, cores * processes / (load + processes)))
        return self.per_item_s * self.items / share


def time_items(
    sample: ItemSample, resolved: ResolvedSuite, budget_s: float = SAMPLE_BUDGET_S, load_s: float = SAMPLE_LOAD_S
) -> QueueTiming:
    """Score ``sample``'s items with their metrics, one at a time, for ``budget_s``; the first item is scored once
    untimed before (what a worker process loads once: a tokenizer, a word list), for ``load_s`` at most. The scoring
    runs in a daemon thread that this waits for no longer than those two: a metric that hangs leaves the item it
    scores counted at the time it took so far (``cut``), and never stalls the dry run (a metric that raises is scored
    as failed, as a worker scores it)."""
    timing = _SampleTiming()
    worker = threading.Thread(target=timing.score, args=(sample, resolved, budget_s), daemon=True,
                              name="dry-run-cpu-sample")  # fmt: skip
    worker.start()
    if timing.warm.wait(load_s):
        worker.join(budget_s)
    return timing.result(sample.seen)


class _SampleTiming:
    """What :func:`time_items`'s thread has timed so far, read by the caller at its bound."""

    def __init__(self) -> None:
        self.warm = threading.Event()
        self._lock = threading.Lock()
        self._timed, self._seconds, self._started = 0, 0.0, None  # type: tuple[int, float, float | None]

    def score(self, sample: ItemSample, resolved: ResolvedSuite, budget_s: float) -> None:
        metrics = {m.name: (m, p) for m, p in resolved.scoring}
        ctx = RunContext(run_id=_SAMPLE_RUN_ID, suite=resolved.suite)
        if sample.items:
            row, names = sample.items[0]
            score_rows([row], _of(metrics, names), ctx)
        self.warm.set()
        deadline = time.perf_counter() + budget_s
        for row, names in sample.items:
            with self._lock:
                self._started = start = time.perf_counter()
            score_rows([row], _of(metrics, names), ctx)
            with self._lock:
                end = time.perf_counter()
                self._timed, self._seconds, self._started = self._timed + 1, self._seconds + end - start, None
            if end >= deadline:
                break

    def result(self, items: int) -> QueueTiming:
        """The timing so far: an item still being scored counts at the time it took until now (a low end)."""
        with self._lock:
            if not self.warm.is_set():  # its first item (untimed) not scored yet: nothing to scale
                return QueueTiming(items, 0, 0.0, cut=True)
            if self._started is None:
                return QueueTiming(items, self._timed, self._seconds)
            return QueueTiming(items, self._timed + 1, self._seconds + time.perf_counter() - self._started, cut=True)


def _of(metrics: dict[str, tuple[MetricDef, BaseModel]], names: list[str]) -> list[tuple[MetricDef, BaseModel]]:
    """The metrics (with their params) of ``names``."""
    return [metrics[name] for name in names if name in metrics]


@dataclass
class ProgramTally:
    """The programs the code queue's items may run, with their time limits."""

    programs: int = 0
    #: Their time limits, together.
    seconds: float = 0.0
    #: The longest of them.
    longest_s: float = 0.0

    def add(self, limits: list[float]) -> None:
        """Count an item's programs, each at its time limit in ``limits``."""
        self.programs += len(limits)
        self.seconds += sum(limits)
        self.longest_s = max(self.longest_s, *limits, 0.0)


def code_programs_s(resolved: ResolvedSuite, row: Row, names: list[str]) -> list[float]:
    """The time limit of each program ``row`` may run on the code queue, scored there by the metrics ``names``, one
    after another: a ``code_test``'s one; a ``checks``'s one each of its ``code_test`` points (the code_test validator
    runs them all); any other metric's (a plugin's) one. A limit is the metric's or point's ``timeout_s``, else the
    suite's ``sandbox.timeout_s``."""
    sandbox_s = resolved.suite.sandbox.timeout_s
    limits: list[float] = []
    for metric, params in resolved.scoring:
        if metric.name not in names:
            continue
        if isinstance(params, ChecksParams):
            limits.extend(_point_limits(row, params, sandbox_s))
        else:
            limits.append(getattr(params, "timeout_s", None) or sandbox_s)
    return limits


def _point_limits(row: Row, params: ChecksParams, sandbox_s: float) -> list[float]:
    """The time limits of the ``code_test`` points of ``row``'s checks (its own, else the suite's ``checks.points``):
    a row's own at most ``sandbox_s``, as ``run_code_test`` caps the points that come with the data; none where the
    points do not parse (the row fails, running none)."""
    try:
        parsed = parse_points(row.checks if row.checks is not None else params.points or [])
    except PointSpecError:
        return []
    limits = [p.params.timeout_s or sandbox_s for p in parsed if isinstance(p.params, CodeTestParams)]
    return [min(limit, sandbox_s) for limit in limits] if row.checks is not None else limits
