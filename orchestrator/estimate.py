"""``ragscore run --dry-run``: what a run would do, and what its judge calls would cost and take.

The dataset is read and validated as a run reads it (unreadable rows reported, duplicate ids refused), and
nothing is submitted: no worker starts and no provider is called. Per queue it counts the work units (item x
metric output); per judge metric the calls it would make (each judge's first call; re-asks after a reply
without a rating and retries are not counted, and rows a rule scores without a judge make none), their
prompt tokens as the rate limiter guesses them (deliberately high: three characters a token), and the cap
on their replies. From those: the cost at the metric's ``prices``, and the least time the suite's judge
limits allow. Given a Redis (the run store), calls whose reply is already cached are counted apart, as a
re-run would not pay for them.

In a suite with targets the answers do not exist yet: judge prompts are built with a placeholder for each
field the target fills, so calls are exact but prompt tokens leave out the targets' replies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.registry import MetricDef, PlannedCall
from ragscore_workers.providers.base import CompletionParams, estimate_tokens
from ragscore_workers.providers.cache import cache_key
from ragscore_workers.providers.factory import judge_identity
from ragscore_workers.schemas import Row, Suite, TargetConfig

from .datasets import RowError, scan_dataset
from .floors import pace_minutes, window_minutes
from .suite import QUEUE_ORDER, ResolvedSuite

__all__ = [
    "CallTally",
    "Estimate",
    "RunCount",
    "estimate_run",
    "judge_calls_planned",
]

#: Rows planned together (judge prompts are built a batch at a time, then dropped).
BATCH_ROWS = 256
#: What stands for a field a target will fill, in a dry run's judge prompts.
PLACEHOLDER = "(filled in by the target)"
#: What stands in for the contexts a target's reply fills: not the answer's text, which the judges' special cases
#: (an answer found in its context is grounded without a call) would read as such, and count no call.
CONTEXT_PLACEHOLDER = "(retrieved by the target)"


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
    first_failures: list[RowError] = field(default_factory=list)
    #: Items scored: rows x targets (1 without targets).
    items: int = 0
    #: Work units (item x metric output) per queue, in QUEUE_ORDER.
    units: dict[str, int] = field(default_factory=dict)
    #: Per judge metric, its calls.
    judge: dict[str, CallTally] = field(default_factory=dict)
    #: Calls per target system (one per question; retries not counted).
    target_calls: dict[str, int] = field(default_factory=dict)
    #: The systems the items name (what ``METRIC@SYSTEM`` gates can read).
    systems: set[str] = field(default_factory=set)
    #: Whether cached replies were looked up (a Redis was given and the suite's judge uses its cache).
    cache_checked: bool = False
    #: What is probably wrong with the dataset (``DatasetScan.warnings``), as a run would warn.
    warnings: list[str] = field(default_factory=list)
    #: The metrics that will score no item (no row has a field they need): a run exits 1 for them.
    scoreless: list[str] = field(default_factory=list)

    def judge_total(self) -> CallTally:
        total = CallTally()
        for tally in self.judge.values():
            total.add(tally)
        return total

    def judge_minutes(self, suite: Suite) -> dict[str, float]:
        """Per judge limit of the suite that the calls not cached reach: the least minutes they need under it.

        A provider's window lets ``limit`` through per period, so N requests end no sooner than
        ``floor((N - 1) / limit)`` periods after the first (tokens: the same with the token guess). ``pace: even``
        adds ``pace``: the same for its requests a second (a minute's calls are not sent at once)."""
        total = self.judge_total()
        tokens = total.tokens_in + total.tokens_out_max
        judge = suite.judge
        out = {
            name: minutes
            for name, amount, limit, period_min in (
                ("rpm", total.paid, judge.rpm, 1),
                ("tpm", tokens, judge.tpm, 1),
                ("rpd", total.paid, judge.rpd, 24 * 60),
                ("tpd", tokens, judge.tpd, 24 * 60),
            )
            if (minutes := window_minutes(amount, limit, period_min)) is not None
        }
        return out | pace_minutes(total.paid, judge.rpm, judge.pace)

    def in_flight_rounds(self, suite: Suite) -> int | None:
        """Under ``judge.max_in_flight``, the calls not cached go out that many at a time, however many workers: the
        rounds of them one after another (``ceil(calls / max_in_flight)``), each as long as a reply takes (which a dry
        run cannot know). None without a cap, or where one round holds them all."""
        cap, paid = suite.judge.max_in_flight, self.judge_total().paid
        return -(-paid // cap) if cap is not None and paid > cap else None

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
        """Whether each call's reply is cached: one script a batch (a command a key took a fifth of submit's time)."""
        judge = self.suite.judge
        keys = [
            cache_key(self.identity, call.messages,
                      CompletionParams(temperature=judge.temperature, max_tokens=call.max_tokens,
                                       reasoning=judge.is_reasoning),
                      call.template_version)
            for call in calls
        ]  # fmt: skip
        return [bool(hit) for hit in self.redis.eval(_EXISTING_LUA, len(keys), *keys)] if keys else []


class RunCount:
    """What a run of ``resolved`` does, counted a row at a time as it is read (the dry run's count, and submit's of
    the judge calls its run will make: :func:`judge_calls_planned`); ``redis``: look up cached replies."""

    def __init__(self, resolved: ResolvedSuite, redis: Any | None = None) -> None:
        self.resolved = resolved
        self.estimate = Estimate()
        self.judge = _JudgePlanner(resolved, self.estimate, None if resolved.targets else redis)
        self.per_metric = {m.name: len(m.outputs(p)) for m, p in resolved.metrics}
        self.units: dict[str, int] = {}

    def see(self, row: Row) -> None:
        """Count ``row``: its items (one a target), their work units per queue, judge calls and target calls."""
        estimate, targets = self.estimate, self.resolved.targets
        for answered in [_as_answered(row, t) for t in targets] or [row]:
            if answered.system is not None:
                estimate.systems.add(answered.system)
            for queue, names in self.resolved.row_queues(answered).items():
                self.units[queue] = self.units.get(queue, 0) + sum(self.per_metric[n] for n in names)
            self.judge.add(answered)
        for target in targets:
            estimate.target_calls[target.name] = estimate.target_calls.get(target.name, 0) + 1

    def finish(self, rows: int) -> Estimate:
        """The estimate once all ``rows`` were seen (its judge calls planned, its units per queue)."""
        self.judge.flush()
        units = self.units | ({"target": rows * len(self.resolved.targets)} if self.resolved.targets else {})
        self.estimate.units = {q: units[q] for q in QUEUE_ORDER if units.get(q)}
        self.estimate.cache_checked = self.judge.redis is not None and bool(self.judge.metrics)
        return self.estimate


def judge_calls_planned(estimate: Estimate) -> int | None:
    """The judge calls a run sends at least, as the dry run counts them (each judge's first call, cached replies
    left out); None where the run has no judge calls to plan."""
    return estimate.judge_total().paid if estimate.judge else None


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

    def count(row: Row) -> None:
        request_fields.see(row)
        run.see(row)
        if on_row is not None:
            on_row()

    scan = scan_dataset(dataset, fmt, lambda _: None, fmt_options, on_row=count, asked_as=resolved.asked_as)
    if scan.rows and (unseen := request_fields.error()):
        raise ConfigError(f"{dataset}: {unseen}")
    estimate = run.finish(scan.rows)
    estimate.rows, estimate.failed_rows, estimate.first_failures = scan.rows, scan.failed, scan.first_failures
    estimate.warnings = [
        *scan.warnings(resolved.filled_fields()),
        *resolved.pre_run_warnings(scan.fields_seen, scan.columns_seen),
    ]
    estimate.scoreless = resolved.scoreless(scan.fields_seen) if scan.rows else []
    estimate.items = scan.rows * max(1, len(resolved.targets))
    return estimate
