"""A pytest helper for teams who keep their evals in their test suite::

    from orchestrator.testing import assert_scores

    def test_answers_stay_good():
        assert_scores("evals/small.jsonl", "evals/suite.yaml", ["exact_match=0.8", "mrr:ci_low=0.5"])

It runs the suite on the dataset (embedded unless a broker is given: a private Redis and local workers),
then checks the suite's ``gates:`` plus the ones given here, and raises ``AssertionError`` carrying the
gate table when one does not hold, or when the run is one ``ragscore run`` exits 1 for (a metric output whose
every item errored or that scored no item, a judge or target breaker, a cancel). Gates are checked against the
suite's outputs before the run starts.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import GateSpec, RunSummary, Suite

from .api import Evaluation, IncompleteRunWarning, evaluate, keep_at_exit
from .caller import PYTHON
from .gates import (
    GatePlan,
    check_gate_names,
    check_tolerance,
    failed,
    given_gate,
    incomplete,
    load_baseline,
    named_by_place,
    regression_metrics,
    render_gates,
)
from .suite import load_suite

__all__ = ["assert_scores"]

GateLike = str | GateSpec | Mapping[str, Any]


def _gate(value: GateLike) -> GateSpec:
    try:
        return value if isinstance(value, GateSpec) else GateSpec.model_validate(value)
    except ValidationError as exc:
        raise ConfigError(f"gate {value!r}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from exc


def assert_scores(
    dataset: str | Path | Iterable[dict[str, Any]],
    suite: str | Path | dict[str, Any] | Suite,
    gates: Sequence[GateLike] = (),
    *,
    baseline: str | Path | RunSummary | None = None,
    tolerance: float = 0.0,
    broker: str | None = None,
    out: str | Path | None = None,
) -> Evaluation:
    """Score ``dataset`` with ``suite`` and assert every gate; returns the :class:`Evaluation` for more checks.

    ``gates``: ``"METRIC=VALUE"``, ``"METRIC:ci_low=VALUE"``, ``"METRIC@SYSTEM=VALUE"``, ``{"metric", "min", "on",
    "system"}`` or GateSpec, added
    to the suite's own; ``baseline``: an earlier run's out dir (or its summary) that no mean may fall
    below by more than ``tolerance``. ConfigError (before running) for bad gates or no gate at all.
    """
    resolved = load_suite(suite)
    if isinstance(gates, (str, Mapping, GateSpec)):  # one gate given bare: a string is not a list of gates
        gates = [gates]
    named = [*named_by_place(resolved.suite.gates), *(given_gate(g, _gate(g)) for g in gates)]
    specs = [gate for _, gate in named]
    outputs = resolved.outputs()
    check_gate_names(named, outputs)
    base = load_baseline(Path(baseline)) if isinstance(baseline, (str, Path)) else baseline
    if base is not None:
        regression_metrics(base, outputs)
    if not specs and base is None:
        raise ConfigError("assert_scores needs at least one gate (argument, suite gates: or baseline)")
    if base is None and tolerance:
        raise ConfigError("assert_scores: tolerance needs a baseline")
    check_tolerance(tolerance)
    with warnings.catch_warnings():  # an incomplete run is raised below, with the gate table
        warnings.simplefilter("ignore", IncompleteRunWarning)
        result = evaluate(dataset, resolved.suite, broker, out=out, quiet=True)  # a test's output: the verdicts
    plan = GatePlan(specs, base, tolerance)  # as `ragscore run`: gates.json and the reports' Gates section say them
    verdicts = plan.check(result.out_dir)
    notes = plan.notes(result.summary, verdicts, outputs)
    table = render_gates(verdicts) + "".join(f"\n{note}" for note in notes)
    problem = incomplete(result.summary, PYTHON)
    if failed(verdicts):  # the reports its message names outlive the test run (evaluate() keeps an incomplete one's)
        keep_at_exit(result.out_dir)
    if problem is not None:  # what `ragscore run` exits 1 for: no gate may pass it
        raise AssertionError(
            f"ragscore run {result.summary.run_id} is incomplete (reports in {result.out_dir}): {problem}\n" + table
        )
    if failed(verdicts):
        raise AssertionError(
            f"ragscore gates failed for run {result.summary.run_id} (reports in {result.out_dir}):\n" + table
        )
    for note in notes:  # the gates hold; what they do not say (a system under its gate, an unlike baseline)
        warnings.warn(note, stacklevel=2)
    return result
