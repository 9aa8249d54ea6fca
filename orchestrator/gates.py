"""CI gates: did a finished run reach its thresholds, and by how much did it miss them?

Three kinds of gate, all pure functions of ``summary.json`` data:

* ``mean``: ``METRIC=VALUE`` (``--fail-under`` or the suite's ``gates:``) holds when the metric output's
  mean over its scored items is ``>= VALUE``;
* ``ci_low``: ``METRIC:ci_low=VALUE`` holds when the lower bound of its 95% interval (``ci95``) is
  ``>= VALUE`` (a gate that sampling noise does not flip);
  either reads one system's items alone when written ``METRIC@SYSTEM=VALUE`` (``summary.json`` ``by_system``);
* ``regression``: ``--fail-on-regression BASELINE_DIR`` adds one gate per metric output the run shares
  with the baseline's ``summary.json``: the mean must be ``>= baseline mean - tolerance``.

For an output where lower is better (``answer_hallucination``, see ``registry.higher_is_better``) every
gate reads the other way: the mean must be ``<= VALUE``, ``ci_low`` takes the interval's upper bound (the
pessimistic side) and must be ``<= VALUE``, and a regression is a mean above ``baseline + tolerance``.

A metric output with no scored item (every item unscorable or errored) has no mean: its gates fail.
Unscorable items never count as 0 here either; they are simply not in the mean.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ragscore_workers.counts import agree, close_names, counted, counted_of, did_you_mean, listed
from ragscore_workers.errors import ConfigError, Problem, raise_problems
from ragscore_workers.metrics.registry import BY_DESIGN_REASONS, higher_is_better
from ragscore_workers.schemas import GateSpec, MetricSummary, RunSummary

from .atomic_file import write_text_atomic
from .caller import CLI, Caller
from .reports.previous import unwritten_reports
from .terminal import NOT_A_TERMINAL_WIDTH, TerminalConsole

__all__ = [
    "FLOAT_SLACK",
    "GATES_FILE",
    "GATE_COLUMNS",
    "GatePlan",
    "GateResult",
    "apart",
    "baseline_note",
    "check_gate_names",
    "check_tolerance",
    "evaluate_gates",
    "failed",
    "failed_first",
    "gate_cells",
    "gate_record",
    "gate_table",
    "given_gate",
    "holds",
    "incomplete",
    "load_baseline",
    "named_by_place",
    "parse_gate",
    "pooled_note",
    "print_gates",
    "read_gate_record",
    "regression_metrics",
    "regression_note",
    "render_gates",
    "started_gates",
    "summary_from_dir",
    "system_note",
    "thresholds_by_metric",
    "verdict",
    "write_gate_record",
]

GateKind = Literal["mean", "ci_low", "regression"]
#: Outputs named ``*_raw`` keep a metric's own scale (``rubric_judge_raw``: 1-5); every other is in [0, 1].
RAW_SUFFIX = "_raw"
#: A value this close under its threshold still holds (float rounding of means must not flip a build).
FLOAT_SLACK = 1e-9
log = logging.getLogger(__name__)

#: An unscorable reason that names the judge (``the judge's reply holds no JSON score``, ``no valid rating from either
#: judge``, ``the judge refused``), not a metric such as ``rubric_judge`` (``rubric_judge has no score (no rubric)``).
JUDGE_REASON = re.compile(r"\bjudge\b")


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict. ``margin``: how far ``actual`` is on the good side of ``threshold`` (negative: missed
    by that much); None without a value."""

    metric: str
    kind: GateKind
    threshold: float
    actual: float | None
    passed: bool
    #: For regression gates: the baseline's mean (``threshold`` is that minus the tolerance, or plus it
    #: where lower is better).
    baseline: float | None = None
    #: Items the output scored, and those it could not (unscorable or errored): a gate read on 1 of 50 says so.
    n: int = 0
    unscored: int = 0
    #: The system whose items the gate reads (``METRIC@SYSTEM=VALUE``); None: every item.
    system: str | None = None
    #: For regression gates: the baseline's run id and the tolerance allowed under (over) its mean.
    baseline_run: str | None = None
    tolerance: float | None = None

    @property
    def lower_better(self) -> bool:
        return not higher_is_better(self.metric)

    @property
    def margin(self) -> float | None:
        if self.actual is None:
            return None
        return self.threshold - self.actual if self.lower_better else self.actual - self.threshold

    @property
    def cannot_fail(self) -> str | None:
        """Why a regression gate holds whatever the run scores in 0..1 (a baseline mean of 0, or a tolerance over its
        mean, puts its threshold below 0; over 1 where lower is better), said in its row: ``threshold below 0:
        cannot fail``; None for a gate that can fail, and for one that failed for want of a value (its output
        scored no item)."""
        if self.kind != "regression" or self.actual is None:
            return None
        if self.lower_better and self.threshold > 1 and not self.metric.endswith(RAW_SUFFIX):
            return "threshold above 1: cannot fail"
        return "threshold below 0: cannot fail" if not self.lower_better and self.threshold < 0 else None

    @property
    def no_value(self) -> str:
        """Why the gate has no ``actual``: ``no scored item``, or too few for an interval."""
        return "no scored item" if self.n == 0 else f"no interval from {self.n} scored item"

    @property
    def bound(self) -> str:
        """What the gate reads: ``mean``, or the pessimistic end of the 95% interval."""
        if self.kind == "ci_low":
            return "ci95 upper bound" if self.lower_better else "ci95 lower bound"
        return "mean"

    @property
    def comparison(self) -> str:
        """``>=`` (``<=`` where lower is better) when it holds, else the opposite."""
        if self.lower_better:
            return "<=" if self.passed else ">"
        return ">=" if self.passed else "<"

    @property
    def label(self) -> str:
        """How the gate is written: ``exact_match=0.8``, ``mrr:ci_low=0.5``, ``mrr@bm25:ci_low=0.5``,
        ``recall_at_5:regression``."""
        if self.kind == "regression":
            return f"{self.metric}:regression"
        where = f"@{self.system}" if self.system is not None else ""
        return f"{self.metric}{where}{'' if self.kind == 'mean' else ':' + self.kind}={self.threshold:g}"


def parse_gate(text: str) -> GateSpec:
    """``METRIC[@SYSTEM]=VALUE`` or ``METRIC[@SYSTEM]:ci_low=VALUE`` as a :class:`GateSpec`; ConfigError when
    malformed."""
    try:
        return GateSpec.model_validate(text)
    except ValidationError as exc:
        raise ConfigError(f"--fail-under {text!r}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from exc


#: A gate and how its errors name it: as the user wrote it (``Gate 'mrr=0.9'``) or by its place in the suite.
NamedGate = tuple[str, GateSpec]


def named_by_place(gates: Sequence[GateSpec]) -> list[NamedGate]:
    """A suite's gates, each named by its place there (``gates item 1 (mrr)``): one written as a mapping has no text
    of its own to quote."""
    return [(f"gates item {n} ({gate.metric})", gate) for n, gate in enumerate(gates, start=1)]


def given_gate(written: str | Mapping[str, Any] | GateSpec, gate: GateSpec) -> NamedGate:
    """``gate`` named as ``written`` (a ``--fail-under`` text, or a gate given to assert_scores()):
    ``Gate 'mrr=0.9'``, ``Gate {'metric': 'mrr', 'min': 0.9}``."""
    return f"Gate {str(written) if isinstance(written, GateSpec) else written!r}", gate


def check_gate_names(gates: Iterable[NamedGate], outputs: Sequence[str]) -> None:
    """ConfigError (with "did you mean") for a gate on a metric output the suite does not produce, or one that could
    decide nothing; every gate's at once (:func:`raise_problems`: ``Invalid gates: 2 problems:``, each a line of the
    suite's problems where :func:`~orchestrator.suite.load_suite` checks its gates), each named as ``gates`` name it
    (:func:`named_by_place`, :func:`given_gate`), the suite's outputs listed once."""
    problems: list[Problem] = []
    unlisted = True  # the suite's outputs: said by the first gate that names none of them
    for named, gate in gates:
        if (problem := _gate_problem(named, gate, outputs)) is not None:
            if gate.metric not in outputs and unlisted:
                problem, unlisted = f"{problem} The suite's outputs: {', '.join(outputs)}.", False
            problems.append(("", ConfigError(problem)))
    raise_problems(problems, subject="gates")


def _gate_problem(named: str, gate: GateSpec, outputs: Sequence[str]) -> str | None:
    """Why ``gate`` (said as ``named``) cannot be checked against a run writing ``outputs``, or None."""
    if gate.metric not in outputs:
        close = close_names(gate.metric, outputs)
        hint = f" {did_you_mean(close, sentence=True)}" if close else ""
        return f"{named} names {gate.metric!r}, which the suite does not produce.{hint}"
    if gate.min < 0:
        return f"{named}: {gate.metric} scores are never below 0, so it decides nothing"
    if gate.min > 1 and not gate.metric.endswith(RAW_SUFFIX):
        return (f"{named}: {gate.metric} scores are in [0, 1], so it could never hold"
                f" (a percentage? {gate.metric}={gate.min / 100:g})")  # fmt: skip
    return None


def check_tolerance(tolerance: float, name: str = "tolerance") -> None:
    """ConfigError unless ``tolerance`` is a finite number >= 0 (NaN would fail every regression gate, after
    the whole run, and infinity pass every one)."""
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ConfigError(f"{name} must be a finite number >= 0, got {tolerance}")


def load_baseline(baseline_dir: Path) -> RunSummary:
    """The baseline run's ``summary.json``; ConfigError when it is missing or unreadable."""
    path = baseline_dir / "summary.json"
    if unwritten := unwritten_reports(baseline_dir):
        raise ConfigError(f"--fail-on-regression: {unwritten}, then gate on it")
    if not path.is_file():
        raise ConfigError(f"--fail-on-regression: {path} not found (give the --out DIR of the baseline run)")
    try:
        return RunSummary.model_validate_json(path.read_text(encoding="utf-8"))
    except (ValidationError, ValueError) as exc:
        raise ConfigError(f"--fail-on-regression: {path} is not a ragscore summary: {exc}") from exc


def _measured(baseline: RunSummary, outputs: Sequence[str]) -> list[str]:
    """Those of ``outputs`` the baseline has a mean for: the ones a regression gate can compare."""
    return [o for o in outputs if o in baseline.metrics and baseline.metrics[o].mean is not None]


def regression_metrics(baseline: RunSummary, outputs: Sequence[str]) -> list[str]:
    """Outputs of this suite that the baseline scored (has a mean for); ConfigError when there are none."""
    shared = _measured(baseline, outputs)
    if not shared:
        raise ConfigError(
            f"--fail-on-regression: the baseline run {baseline.run_id} scored none of this suite's outputs "
            f"({', '.join(outputs)})"
        )
    return shared


def _value(stats: MetricSummary | None, on: str, lower_better: bool) -> float | None:
    if stats is None:
        return None
    if on == "ci_low":
        return (stats.ci95[1] if lower_better else stats.ci95[0]) if stats.ci95 else None
    return stats.mean


def evaluate_gates(
    summary: RunSummary,
    gates: Iterable[GateSpec] = (),
    baseline: RunSummary | None = None,
    tolerance: float = 0.0,
) -> list[GateResult]:
    """Every gate's verdict: the threshold gates in order, then one regression gate per shared output."""
    results = []
    for gate in gates:
        lower = not higher_is_better(gate.metric)
        scope = summary.metrics if gate.system is None else summary.by_system.get(gate.system, {})
        stats = scope.get(gate.metric)
        actual = _value(stats, gate.on, lower)
        results.append(GateResult(gate.metric, gate.on, gate.min, actual, holds(actual, gate.min, lower),
                                  system=gate.system, **_counts(stats)))  # fmt: skip
    if baseline is not None:
        for name in regression_metrics(baseline, list(summary.metrics)):
            base = baseline.metrics[name].mean
            if base is None:
                continue
            lower = not higher_is_better(name)
            actual, bar = summary.metrics[name].mean, base + tolerance if lower else base - tolerance
            results.append(GateResult(name, "regression", bar, actual, holds(actual, bar, lower), baseline=base,
                                      baseline_run=baseline.run_id, tolerance=tolerance,
                                      **_counts(summary.metrics[name])))  # fmt: skip
    return results


def incomplete(summary: RunSummary, caller: Caller = CLI) -> str | None:
    """Why a finished run is no result to pass, whatever its gates (the cases ``ragscore run`` exits 1 for: a
    cancel, the judge's or a target's circuit breaker, a metric output whose every item errored, pooled or in one
    system's items, or that scored no item of the whole run, every one unscorable), or None. ``caller``: whose
    options it names."""
    if summary.state == "cancelled":
        said = (f"run {summary.run_id} was cancelled: {counted_of(summary.scored, summary.items, 'item')} scored"
                if summary.scored else
                f"run {summary.run_id} was cancelled before any item was scored ({counted(summary.items, 'item')} "
                "unscored)")  # fmt: skip
        stopped = [f"{name} ({m.stopped:,} items)" for name, m in sorted(summary.metrics.items()) if m.stopped]
        return said + (f"; stopped before scoring: {listed(stopped, 5)}" if stopped else "")
    if summary.judge.get("breaker"):
        return f"judging stopped: {summary.judge['breaker']}"
    if targets := stopped_targets(summary):
        return "; ".join(f"asking target {name} stopped: {why}" for name, why in targets.items())
    for system, metrics in [(None, summary.metrics), *sorted(summary.by_system.items())]:
        empty = {name: m for name, m in metrics.items() if m.errors and not m.n}
        if empty:
            name, first = next(iter(empty.items()))
            of = f" of system {system}" if system is not None else ""
            return (f"no scores for {', '.join(empty)}{of}: every item that reached them errored "
                    f"(first error, {name}: {first.first_error or '?'})")  # fmt: skip
    return _unscored(summary, caller)


def _unscored(summary: RunSummary, caller: Caller) -> str | None:
    """The metric outputs that scored no item of the whole run because every item was unscorable (a column named
    for another tool, the wrong --format), with the first one's count and most common reason, or None. Over the
    whole run only: a metric meant for one system's rows (contexts of a retrieval system beside a no-retrieval
    baseline) scores the others. Not for items a judge budget stopped: a budget is the user's own stop. Not for an
    output every item of which lacks a field a system may lack by design (``OPTIONAL_FIELDS``: the context metrics of
    an LLM alone, warned of before the run) where another output scored."""
    empty = {name: m for name, m in summary.metrics.items() if m.unscorable and not (m.n or m.errors or m.stopped)}
    if any(m.n for m in summary.metrics.values()):
        empty = {name: m for name, m in empty.items() if not _by_design(m)}
    if not empty:
        return None
    name, first = next(iter(empty.items()))
    reason = next(iter(first.unscorable_reasons or {}), None)
    items = counted(first.unscorable, "item") + (f", most often: {reason}" if reason else "")
    return (f"no scores for {', '.join(empty)}: every item was unscorable ({name}: {items}; items.jsonl says why "
            f"for each): fix the cause ({_unscored_cause(reason, caller)}) or drop it from the suite")  # fmt: skip


def _by_design(stats: MetricSummary) -> bool:
    """Whether every unscorable item of an output lacks a field a system may lack by design (``no contexts``)."""
    reasons = stats.unscorable_reasons or {}
    return bool(reasons) and reasons.keys() <= BY_DESIGN_REASONS


def _unscored_cause(reason: str | None, caller: Caller) -> str:
    """Where to look for why a metric output scored nothing: the judge's replies where its most common reason
    names the judge (the items were asked; no reply gave a rating), else the rows' fields."""
    if reason is not None and JUDGE_REASON.search(reason):
        return ("the judge's replies gave no rating: items.jsonl holds each one in its details; a model that does not "
                "answer in the prompt's format, or a base_url that is not a chat model's, rates nothing")  # fmt: skip
    dry_run = "`ragscore run DATASET --suite SUITE --dry-run` in a shell" if caller.python else "--dry-run"
    fmt = caller.option("format")
    return f"e.g. rows without a field it needs: misnamed columns, the wrong {fmt}, which {dry_run} names"


def stopped_targets(summary: RunSummary) -> dict[str, str]:
    """Target name -> why its circuit breaker opened (the run stopped asking it), for each that did."""
    return {name: str(stats["breaker"]) for name, stats in sorted(summary.target.items()) if stats.get("breaker")}


class _Counts(TypedDict, total=False):
    """A gate's sample size: :class:`GateResult`'s ``n`` and ``unscored``."""

    n: int
    unscored: int


def _counts(stats: MetricSummary | None) -> _Counts:
    return {"n": stats.n, "unscored": stats.unscorable + stats.errors} if stats is not None else {}


def holds(actual: float | None, threshold: float, lower_better: bool = False) -> bool:
    """Whether ``actual`` reaches ``threshold`` (``>=``; ``<=`` where lower is better), float slack allowed."""
    if actual is None:
        return False
    return actual <= threshold + FLOAT_SLACK if lower_better else actual >= threshold - FLOAT_SLACK


def pooled_note(summary: RunSummary, results: Sequence[GateResult]) -> str | None:
    """A run of several systems is gated on means over all of them: the systems whose own mean of a gated output
    misses that gate's bound are named (one may fail while the pool holds), or None."""
    if len(summary.by_system) < 2:
        return None
    own = {(r.system, r.metric) for r in results if r.kind == "mean" and r.system is not None}
    means = [(r, system, per[r.metric].mean) for r in results if r.kind == "mean" and r.system is None
             for system, per in summary.by_system.items()
             if r.metric in per and (system, r.metric) not in own]  # fmt: skip
    misses = [f"{system} {r.metric} {mean:.3f}" for r, system, mean in means
              if mean is not None and not holds(mean, r.threshold, r.lower_better)]  # fmt: skip
    if not misses:
        return None
    more = " …" if len(misses) > 5 else ""
    return (
        f"gates read means over all {len(summary.by_system)} systems; on its own, {'; '.join(misses[:5])}{more} "
        "would miss its gate (summary.json by_system)"
    )


def system_note(gates: Iterable[GateSpec | GateResult], present: Collection[str]) -> str | None:
    """The gates naming a system the run has no items of (a typo, or rows without ``system``), with the systems
    ``present`` and "did you mean"; None when every named system is there."""
    systems = sorted(present)
    unknown = sorted({g.system for g in gates if g.system is not None and g.system not in present})
    if not unknown:
        return None
    said = []
    for name in unknown:
        close = [s for s in systems if s.casefold() == name.casefold()]
        close = close or close_names(name, systems)
        said.append(repr(name) + (f" ({did_you_mean(close)})" if close else ""))
    have = f"its systems are {', '.join(systems)}" if systems else "its rows name no system"
    return f"gates name {'; '.join(said)}, which this run has no items of: {have}"


def baseline_note(summary: RunSummary, baseline: RunSummary, outputs: Sequence[str]) -> str | None:
    """Why a regression gate may compare unlike runs: a baseline of other systems (its means are of other systems)
    or over other items (over other questions: a subset of the same answers reads as a regression), or outputs it
    has no mean for (they get no regression gate); None when they match."""
    said = []
    systems, base_systems = sorted(summary.by_system), sorted(baseline.by_system)
    unlike = [*(["of other systems"] if systems != base_systems else []),
              *(["over other questions"] if summary.items != baseline.items else [])]  # fmt: skip
    if unlike:

        def runs(s: RunSummary, names: list[str]) -> str:
            return counted(s.items, "item") + (f" of {', '.join(names)}" if names else "")

        said.append(f"the baseline {baseline.run_id} holds {runs(baseline, base_systems)}, this run "
                    f"{runs(summary, systems)}: its means are {', '.join(unlike)}")  # fmt: skip
    measured = _measured(baseline, outputs)
    unmeasured = [o for o in outputs if o not in measured]
    if unmeasured:
        said.append(f"no regression gate for {', '.join(unmeasured)} (the baseline has no mean for it)")
    return "; ".join(said) or None


def thresholds_by_metric(results: Iterable[GateResult], system: str | None = None) -> dict[str, float]:
    """Per gated metric output, the strictest threshold among the gates on an item of ``system`` (the gates on
    every item and those on that system's; the highest, the lowest where lower is better): JUnit's per-item
    bar."""
    out: dict[str, float] = {}
    for r in results:
        if r.system is not None and r.system != system:
            continue
        pick = min if r.lower_better else max
        out[r.metric] = pick(out.get(r.metric, r.threshold), r.threshold)
    return out


def _num(value: float | None, signed: bool = False, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def apart(value: float, threshold: float) -> tuple[str, str]:
    """Both numbers with 4 significant digits, or as many more as it takes to tell them apart when they differ
    (0.79996 against 0.8 must not read ``0.8 < 0.8``): for one-line messages (JUnit, warnings)."""
    for digits in range(4, 13):
        shown, bound = f"{value:.{digits}g}", f"{threshold:.{digits}g}"
        if shown != bound or value == threshold:
            break
    return shown, bound


def _digits(r: GateResult) -> int:
    """3, or as many more as it takes to show a failed gate's actual apart from its threshold (0.7996 < 0.8
    must not read ``actual 0.800``)."""
    digits = 3
    if r.actual is not None and not r.passed:
        while digits < 9 and _num(r.actual, digits=digits) == _num(r.threshold, digits=digits):
            digits += 1
    return digits


def _scored(r: GateResult) -> str:
    return f"{r.n:,} of {r.n + r.unscored:,}" if r.unscored else f"{r.n:,}"


def verdict(results: Sequence[GateResult]) -> str:
    """``1 of 4 gates failed``, ``all 4 gates hold``, ``1 gate holds``."""
    n, n_failed = len(results), sum(not r.passed for r in results)
    if n_failed:
        return f"{counted_of(n_failed, n, 'gate')} failed"
    return f"{'all ' if n > 1 else ''}{counted(n, 'gate')} {agree(n, 'holds', 'hold')}"


#: The columns of a gate table, on the console, in JUnit's messages' order, in report.md and report.html alike.
GATE_COLUMNS = ("gate", "on", "threshold", "actual", "by", "scored", "result")


def failed_first(results: Iterable[GateResult]) -> list[GateResult]:
    """The gates that did not hold, then those that did, each in their order."""
    return sorted(results, key=lambda r: r.passed)


def _result_text(r: GateResult) -> str:
    """``pass``, ``FAIL``, or ``FAIL (no scored item)``."""
    return ("pass" if r.passed else "FAIL") + (f" ({r.no_value})" if r.actual is None else "")


def gate_cells(r: GateResult) -> list[str]:
    """One gate's row of :data:`GATE_COLUMNS` as plain text: gate, on, threshold, actual, by (actual - threshold),
    scored, result."""
    on = r.bound if r.baseline is None else f"regression (baseline {r.baseline:.3f})"
    on += f" ({r.cannot_fail})" if r.cannot_fail else ""
    on += " (lower is better)" if r.lower_better else ""
    d = _digits(r)
    return [r.label, on, _num(r.threshold, digits=d), _num(r.actual, digits=d), _num(r.margin, signed=True, digits=d),
            _scored(r), _result_text(r)]  # fmt: skip


def regression_note(results: Iterable[GateResult]) -> str | None:
    """What the regression gates compared with: ``regression gates: against the means of baseline run r1, tolerance
    0.05``; None without one."""
    r = next((r for r in results if r.kind == "regression"), None)
    if r is None:
        return None
    return (
        f"regression gates: against the means of baseline run {r.baseline_run or '?'}, tolerance {r.tolerance or 0:g}"
    )


def gate_table(results: Sequence[GateResult], only_failed: bool = False) -> Table:
    """Failed gates first, in :data:`GATE_COLUMNS`, titled with the verdict."""
    table = Table(title=verdict(results))
    for col in GATE_COLUMNS:
        table.add_column(col, justify="left" if col in ("gate", "on", "result") else "right")
    for r in failed_first(results):
        if only_failed and r.passed:
            continue
        *cells, result = gate_cells(r)
        style = "green" if r.passed else "bold red"
        table.add_row(escape(cells[0]), *cells[1:], Text(result, style=style))
    return table


def print_gates(results: Sequence[GateResult], console: Console | None = None, only_failed: bool = False) -> None:
    """Print :func:`gate_table` (to stderr by default, so stdout stays clean for pipes; when stderr is not a
    terminal, as in CI, as wide as the table needs rather than 80 columns).

    ``only_failed`` (``--quiet``): just the failed gates, or one line when every gate holds.
    """
    if only_failed and not failed(results):
        (console or TerminalConsole(stderr=True)).print(verdict(results))
        return
    table = gate_table(results, only_failed)
    if console is None:
        console = TerminalConsole(stderr=True)  # no terminal and no COLUMNS: as wide as the table needs
        if not console.is_terminal:  # a CI log that exports a narrow COLUMNS: still no gate name cut to "…"
            natural = console.measure(table, options=console.options.update(max_width=NOT_A_TERMINAL_WIDTH)).maximum
            console = TerminalConsole(stderr=True, width=max(console.width, natural))
    console.print(table)


def render_gates(results: Sequence[GateResult], width: int = 140) -> str:
    """:func:`gate_table` as plain text (for assertion messages and logs)."""
    buffer = io.StringIO()
    TerminalConsole(file=buffer, width=width, no_color=True, force_terminal=False).print(gate_table(results))
    return buffer.getvalue()


#: Where a run's gate results go, beside its summary.json (:func:`write_gate_record`).
GATES_FILE = "gates.json"


def gate_record(run_id: str, results: Sequence[GateResult]) -> dict[str, Any]:
    """``gates.json``'s content: the run, the verdict, and per gate (failed first) what it read, against what, and
    whether it held (``result``: ``pass``, ``fail`` or ``no value``)."""
    return {
        "run_id": run_id,
        "verdict": verdict(results),
        "passed": not failed(results),
        "gates": [_gate_entry(r) for r in failed_first(results)],
    }


def _gate_entry(r: GateResult) -> dict[str, Any]:
    return {
        "gate": r.label, "metric": r.metric, "system": r.system, "kind": r.kind, "statistic": r.bound,
        "lower_is_better": r.lower_better, "threshold": r.threshold, "actual": r.actual, "margin": r.margin,
        "result": "no value" if r.actual is None else "pass" if r.passed else "fail", "n": r.n, "unscored": r.unscored,
        "baseline": r.baseline, "baseline_run": r.baseline_run, "tolerance": r.tolerance,
    }  # fmt: skip


def write_gate_record(out_dir: Path, run_id: str, results: Sequence[GateResult]) -> None:
    """Write :func:`gate_record` to ``out_dir/gates.json`` (atomically)."""
    write_text_atomic(out_dir / GATES_FILE, json.dumps(gate_record(run_id, results), indent=2) + "\n")


def read_gate_record(out_dir: Path) -> list[GateResult] | None:
    """The gate results ``out_dir/gates.json`` holds, or None without one; where it is no gates file (cut short,
    edited), None too, warned of once, naming the file, what is wrong and how to check the gates again: the reports
    written from ``out_dir`` go on without their Gates section."""
    path = out_dir / GATES_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        return [_from_entry(entry) for entry in record["gates"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = f"a gate has no {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
        log.warning("%s is not a ragscore gates file (%s): the reports written from %s leave out the Gates section. "
                    "Check the run's gates again with `ragscore resume %s` (the gates it was started with) or "
                    "`ragscore run --resume %s --fail-under METRIC=VALUE` (others)", path, why, out_dir, out_dir,
                    out_dir)  # fmt: skip
        return None


def gates_of_run(out_dir: Path, run_id: str) -> list[GateResult] | None:
    """The gate results ``out_dir/gates.json`` holds when they are run ``run_id``'s (its last check: a resume or a
    new run into the DIR writes or removes them), else None."""
    path = out_dir / GATES_FILE
    try:
        named = json.loads(path.read_text(encoding="utf-8")).get("run_id") if path.is_file() else None
    except (OSError, ValueError, AttributeError):
        named = None
    return read_gate_record(out_dir) if named == run_id else None


def _from_entry(entry: Mapping[str, Any]) -> GateResult:
    actual = entry["actual"]
    return GateResult(
        str(entry["metric"]), entry["kind"], float(entry["threshold"]), None if actual is None else float(actual),
        entry["result"] == "pass", baseline=entry["baseline"], n=int(entry["n"]), unscored=int(entry["unscored"]),
        system=entry["system"], baseline_run=entry["baseline_run"], tolerance=entry["tolerance"],
    )  # fmt: skip


def failed(results: Iterable[GateResult]) -> list[GateResult]:
    """The gates that did not hold."""
    return [r for r in results if not r.passed]


def summary_from_dir(out_dir: Path) -> RunSummary:
    """The ``summary.json`` a run wrote into ``out_dir``."""
    return RunSummary.model_validate(json.loads((out_dir / "summary.json").read_text(encoding="utf-8")))


def started_gates(job: Mapping[str, Any] | None) -> dict[str, Any]:
    """The gate options a run was started with, as its job keeps them (``ragscore run``'s ``--fail-under``,
    ``--fail-on-regression``, ``--regression-tolerance``, ``--junit``, ``--junit-items``: ``{"gates": {...}}``), as
    :meth:`GatePlan.build`'s keyword arguments; {} where it has none (or none is known)."""
    gates = (job or {}).get("gates")
    if not isinstance(gates, dict):
        return {}
    baseline, junit, tolerance = gates.get("fail_on_regression"), gates.get("junit"), gates.get("regression_tolerance")
    return {
        "fail_under": [str(g) for g in gates.get("fail_under") or []],
        "baseline_dir": Path(baseline) if baseline else None,
        "tolerance": float(tolerance) if tolerance is not None else None,
        "junit": Path(junit) if junit else None,
        "junit_items": bool(gates.get("junit_items")),
    }


@dataclass(frozen=True)
class GatePlan:
    """The gates of one ``ragscore run``, validated before anything is submitted; :meth:`check` runs them."""

    gates: list[GateSpec]
    baseline: RunSummary | None = None
    tolerance: float = 0.0
    junit: Path | None = None
    junit_items: bool = False

    @classmethod
    def build(
        cls,
        suite_gates: Sequence[GateSpec],
        outputs: Sequence[str],
        *,
        fail_under: Iterable[str] = (),
        baseline_dir: Path | None = None,
        tolerance: float | None = None,
        junit: Path | None = None,
        junit_items: bool = False,
    ) -> GatePlan | None:
        """Suite gates + ``--fail-under`` + ``--fail-on-regression``; None when there is no gate at all.

        ConfigError for a malformed gate, a gate on an output the suite does not produce, a baseline that
        is missing or shares no output, a negative tolerance, a tolerance without a baseline, ``--junit``
        with no gate to report on, or ``--junit-items`` without ``--junit``.
        """
        if junit_items and junit is None:
            raise ConfigError("--junit-items adds a case per item to the JUnit file: give --junit FILE too")
        given = [given_gate(text, parse_gate(text)) for text in fail_under]
        check_gate_names([*named_by_place(suite_gates), *given], outputs)
        gates = [*suite_gates, *(gate for _, gate in given)]
        if tolerance is not None and baseline_dir is None:
            raise ConfigError("--regression-tolerance needs --fail-on-regression BASELINE_DIR")
        if tolerance is not None:
            check_tolerance(tolerance, "--regression-tolerance")
        baseline = load_baseline(baseline_dir) if baseline_dir is not None else None
        if baseline is not None:
            regression_metrics(baseline, outputs)
        if not gates and baseline is None:
            if junit is not None:
                raise ConfigError("--junit reports on gates: add --fail-under, suite gates or --fail-on-regression")
            return None
        return cls(gates, baseline, tolerance or 0.0, junit, junit_items)

    def notes(self, summary: RunSummary, results: Sequence[GateResult], outputs: Sequence[str]) -> list[str]:
        """What the gate table alone does not say: a gate naming a system the run lacks, a system missing a gate
        its pool holds, a baseline unlike this run."""
        notes = [system_note(results, summary.by_system), pooled_note(summary, results)]
        if self.baseline is not None:
            notes.append(baseline_note(summary, self.baseline, outputs))
        return [n for n in notes if n]

    def check(self, out_dir: Path) -> list[GateResult]:
        """Evaluate the gates on the run written to ``out_dir`` and :meth:`record` them there."""
        results = self.verdicts(out_dir)
        self.record(out_dir, results)
        return results

    def verdicts(self, out_dir: Path) -> list[GateResult]:
        """Every gate's verdict on the run written to ``out_dir`` (its summary.json); nothing written."""
        return evaluate_gates(summary_from_dir(out_dir), self.gates, self.baseline, self.tolerance)

    def record(self, out_dir: Path, results: Sequence[GateResult]) -> None:
        """Record ``results`` in ``out_dir`` (gates.json, and a Gates section in report.md and report.html, written
        again from the folder), and write the JUnit file when asked; OSError or ConfigError where a write fails."""
        from .reports import from_dir, write_reports

        summary = summary_from_dir(out_dir)
        if results:
            write_gate_record(out_dir, summary.run_id, results)
            write_reports(from_dir(out_dir), out_dir, formats=("md", "html"))
        if self.junit is not None:
            from .junit import write_junit

            write_junit(self.junit, out_dir / "items.jsonl", results, f"ragscore {summary.suite} {summary.run_id}",
                        run_error=incomplete(summary), items=self.junit_items)  # fmt: skip
