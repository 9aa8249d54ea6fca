"""The Python API: ``evaluate(dataset, suite)`` for notebooks and CI."""

from __future__ import annotations

import atexit
import datetime
import decimal
import json
import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragscore_workers.commands import backticked
from ragscore_workers.counts import agree, counted
from ragscore_workers.errors import ConfigError, DatasetError, DatasetWarning, EvictionWarning
from ragscore_workers.schemas import ITEM_META_FIELDS, ItemResult, MetricSummary, RunSummary, Suite
from ragscore_workers.settings import get_settings

from .atomic_file import atomic_writer, make_out_dir
from .caller import PYTHON
from .datasets import Named
from .datasets.parquet import json_value
from .datasets.rows import failed_row_at
from .gates import GatePlan, GateResult, apart, incomplete, load_baseline, parse_gate, started_gates
from .out_claim import claim_out_dir
from .progress import ProgressView, make_progress, note_of
from .reports.console import retrieved_nothing_lines, warning_lines
from .reports.files import ROWS_FILE, ROWS_STAGED, first_failed_row, refuse_files_of_others
from .reports.live import scored_text
from .runner import TEMPORARY_MARK, kept_job, recorded_run, refuse_an_unfinished_run_in, run
from .suite import judge_budget, load_suite
from .terminal import results_command
from .warm import stop_kept_once_idle

if TYPE_CHECKING:  # pandas is optional (ragscore[pandas]): imported by to_pandas() alone
    from pandas import DataFrame

__all__ = [
    "DatasetWarning",
    "Evaluation",
    "EvictionWarning",
    "GateFailedWarning",
    "IncompleteRunWarning",
    "RetrievedNothingWarning",
    "cancel",
    "evaluate",
    "resume",
    "shutdown",
]


class IncompleteRunWarning(UserWarning):
    """A run ``ragscore run`` exits 1 for (a metric output whose every item errored, or that scored no item at all,
    every one unscorable; a judge or target breaker; a cancel), returned as it is by :func:`evaluate`."""


class GateFailedWarning(UserWarning):
    """A gate of the suite's ``gates:`` that did not hold (``ragscore run`` exits 3 for it); :func:`evaluate` returns
    the run with its verdicts in ``Evaluation.gates`` (``orchestrator.testing.assert_scores`` raises instead)."""


class RetrievedNothingWarning(UserWarning):
    """Rows that retrieved nothing (``retrieved_doc_ids`` empty or absent: an LLM-only system's, by design), which
    ``recall_at_k`` scores 0: the line of information ``ragscore run`` ends with and the reports show, said once by
    :func:`evaluate` with the outputs it lowers. No :class:`DatasetWarning`: such rows are no mistake of the data."""


#: How many metric outputs' means an Evaluation's repr (a notebook's view of it) names; the rest are counted.
REPR_OUTPUTS = 6


@dataclass(frozen=True)
class Evaluation:
    """The summary of a run and where its files are; the per-item results are read from ``items.jsonl`` when
    asked for (``items``), streamed (``iter_items()``) or tabled (``to_pandas()``), so a large run costs no memory
    until then. ``gates``: the verdicts of the suite's ``gates:``, in order."""

    summary: RunSummary
    out_dir: Path
    gates: list[GateResult] = field(default_factory=list)

    def __repr__(self) -> str:
        """What a notebook shows for it: the run, its counts, each output's mean, n and errors (where some items
        errored) and where the files are (the whole summary is ``summary``)."""
        metrics = list(self.summary.metrics.items())
        shown = [f"{name} {_mean(m.mean)} ({_counts(m)})" for name, m in metrics[:REPR_OUTPUTS]]
        rest = len(metrics) - len(shown)
        means = ", ".join([*shown, f"{counted(rest, 'more output')} in .summary.metrics"] if rest else shown)
        held = f"; {sum(g.passed for g in self.gates)} of {counted(len(self.gates), 'gate')} held" if self.gates else ""
        counts = f"{counted(self.summary.items, 'item')}, {scored_text(self.summary)}"
        return f"Evaluation(run {self.summary.run_id!r}: {counts}; {means}{held}; out_dir={str(self.out_dir)!r})"

    def iter_items(self) -> Iterator[ItemResult]:
        """Every item's result in input order, one at a time (constant memory, for runs of millions)."""
        with (self.out_dir / "items.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                yield ItemResult.model_validate_json(line)

    @cached_property
    def items(self) -> list[ItemResult]:
        """Every item's result in input order, read on first use (about 10 KB an item: prefer ``iter_items()``
        for large runs)."""
        return list(self.iter_items())

    def to_pandas(self) -> DataFrame:
        """A pandas DataFrame of one row per item, in input order: ``id``, ``system``, ``group``,
        ``question_type``, a column per metric output (its score; NaN where the item has none: unscorable or
        errored) and ``errors`` (the item's ``output: message`` entries, a list as items.jsonl and items.csv hold them;
        missing where none). Details stay in ``items``."""
        try:
            import pandas as pd
        except ModuleNotFoundError as exc:
            hint = "Evaluation.to_pandas() needs pandas: pip install 'ragscore[pandas]'"
            raise ModuleNotFoundError(f"{hint} ({exc})") from exc
        outputs = list(self.summary.metrics)
        columns = [*ITEM_META_FIELDS, *outputs, "errors"]
        frame = pd.DataFrame.from_records((_item_record(item, outputs) for item in self.iter_items()), columns=columns)
        return frame.astype(dict.fromkeys(outputs, "float64"))  # a column no item scored: NaN, not None of object


def _mean(value: float | None) -> str:
    """A mean as the summary table shows it (3 decimals), ``no score`` where no item was scored."""
    return "no score" if value is None else f"{value:.3f}"


def _counts(m: MetricSummary) -> str:
    """``n=30``, and ``n=30, 3 errors`` where some items errored: an output's counts as its repr shows them."""
    return f"n={m.n:,}, {counted(m.errors, 'error')}" if m.errors else f"n={m.n:,}"


def _item_record(item: ItemResult, outputs: list[str]) -> dict[str, Any]:
    """One row of :meth:`Evaluation.to_pandas`: the item's fields, its score per output, its errors."""
    scores = {name: result.score if (result := item.metrics.get(name)) else None for name in outputs}
    fields = {name: getattr(item, name) for name in ITEM_META_FIELDS}
    return {**fields, **scores, "errors": item.errors or None}


def evaluate(
    dataset: str | Path | Iterable[Mapping[str, Any]] | Any,
    suite: str | Path | dict[str, Any] | Suite,
    broker: str | None = None,
    *,
    out: str | Path | None = None,
    fmt: str | None = None,
    fmt_options: dict[str, Any] | None = None,
    quiet: bool = False,
    progress: ProgressView | None = None,
    judge_threads: int | None = None,
) -> Evaluation:
    """Score a dataset (a file, an iterable of row dicts, or a pandas DataFrame) with a suite; embedded unless
    ``broker``. Rows that cannot be read are reported in ``failed_rows.jsonl`` and with a warning, and so is a run
    ``ragscore run`` exits 1 for (a metric output whose every item errored, pooled or in one system's items, or
    that scored no item of the whole run, every one unscorable; a judge or target breaker; a cancel).

    Progress is shown on stderr (one line updated in place in a notebook) unless ``quiet``. Reports are written to
    ``out``; when omitted, to a temporary directory that is removed when this Python process exits (at once when the
    call fails before a run was recorded there; kept when it stopped after, for :func:`resume`, and when a warning
    names it, or items stopped by a budget, a breaker or a cancel are left there for :func:`resume`). Such a directory
    given as ``out`` to a later call is kept. Until then it holds ``runner.TEMPORARY_MARK``: no run's items are
    released into it, whichever process writes its reports (``ragscore results RUN --out DIR``).
    ``judge_threads``: the threads of the embedded run's local judge worker (default 32; fewer for a slow local
    server, more for a fast hosted one), as ``ragscore run --judge-threads``.
    """
    resolved = load_suite(suite)
    get_settings().check_visibility_timeout()  # as run() does, before out is claimed and the rows written there
    out_dir = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="ragscore-"))
    if out is not None:  # named by the caller: kept, though an earlier call made it as a temporary one
        keep_at_exit(out_dir)
    rows_copy: Path | None = None  # where the run's copy of the rows given goes, staged until the run goes ahead
    try:
        with claim_out_dir(out_dir):  # from before the rows are written there: another call's run may read them
            refuse_files_of_others(out_dir, "out=")  # the caller's own summary.json, items.csv: before any is written
            named = None
            refuse_an_unfinished_run_in(out_dir, broker, caller=PYTHON)  # before rows are written over its dataset
            if isinstance(dataset, (str, Path)):
                path = Path(dataset)
            else:
                rows_copy = _rows_file(out_dir)
                path, fmt, named = _write_rows(dataset, out_dir / ROWS_STAGED), "jsonl", ROWS_GIVEN
            view = progress or make_progress(quiet)
            summary = run(
                path, resolved, out_dir, broker=broker, fmt=fmt, fmt_options=fmt_options,
                progress=view, named=named, caller=PYTHON, judge_threads=judge_threads, keep_warm=True,
                out_kept=out is not None, rows_to=rows_copy,
            )  # fmt: skip
        if out is None and not _left_to_the_caller(summary):  # nothing to open or resume there once the call is over
            _TEMPORARY_OUT.append(out_dir)
            (out_dir / TEMPORARY_MARK).touch()  # for another process's reports there: no items released into it
            note_of(view)(f"{out_dir} is temporary: removed when this Python process exits (out= keeps the reports)")
    except BaseException as exc:
        if out is None and recorded_run(out_dir) is None:  # no run to resume there: the copy of the rows goes
            shutil.rmtree(out_dir, ignore_errors=True)
        elif rows_copy is not None:  # refused, or stopped before it went ahead: the earlier run's copy stays
            (out_dir / ROWS_STAGED).unlink(missing_ok=True)
        if out_dir.exists() and isinstance(exc, KeyboardInterrupt):  # where the run is and how to finish it
            try:
                refuse_an_unfinished_run_in(out_dir, broker, caller=PYTHON)
            except ConfigError as unfinished:
                if hasattr(exc, "add_note"):  # Python 3.11+
                    exc.add_note(str(unfinished))
                else:
                    warnings.warn(str(unfinished), stacklevel=2)
        raise
    return _evaluation(summary, out_dir, rows_given=rows_copy is not None)


def resume(
    out: str | Path,
    broker: str | None = None,
    *,
    max_cost: float | None = None,
    max_tokens: int | None = None,
    quiet: bool = False,
    progress: ProgressView | None = None,
    judge_threads: int | None = None,
) -> Evaluation:
    """Finish the run whose reports go to ``out`` (its ``run.json`` names it), as ``ragscore run --resume DIR`` does:
    only what the store lacks is scored (missing, failed, or stopped by a breaker, a budget or a cancel), and the
    reports are written again. ``max_cost`` / ``max_tokens`` raise the judge budget that stopped it; the run's
    dataset and suite are the ones it was submitted with; ``judge_threads`` as :func:`evaluate`'s. Shows progress and
    warns as :func:`evaluate` does. Its gates are its suite's and the gate options it was started with (its run.json:
    ``ragscore run --fail-under ...``), as ``ragscore resume DIR``'s; ConfigError before anything is scored where
    their ``--fail-on-regression`` baseline is gone."""
    out_dir = Path(out)
    run_id = _recorded_run_id(out_dir, "resume()")
    if (baseline := _started_gate_options(out_dir).get("baseline_dir")) is not None:
        load_baseline(baseline)  # one gone since the start is refused before anything is scored, as by the CLI
    summary = run(None, None, out_dir, broker=broker, resume_id=run_id,
                  judge_params=judge_budget(max_cost=max_cost, max_tokens=max_tokens),
                  progress=progress or make_progress(quiet), caller=PYTHON, judge_threads=judge_threads,
                  keep_warm=True, out_kept=not _temporary(out_dir))  # fmt: skip
    return _evaluation(summary, out_dir, rows_given=(out_dir / ROWS_FILE).exists())


def cancel(out: str | Path, broker: str | None = None) -> bool:
    """Cancel the run whose reports go to ``out`` (its ``run.json`` names it), as ``ragscore cancel DIR`` does: from
    another thread (a notebook's button, a time limit) or process while :func:`evaluate` or :func:`resume` runs it.
    Its workers skip its remaining tasks and start no judge or target call; that call then returns what was scored,
    with an :class:`IncompleteRunWarning`, and :func:`resume` finishes the run. True when this call cancelled it;
    False when it had ended (finished, failed, or cancelled before). An embedded run whose process is gone (an
    interrupted call, a kernel restarted) is only marked cancelled: no call is left to write its summary and reports,
    which an :class:`IncompleteRunWarning` says, naming the ``ragscore results`` that writes them and the
    :func:`resume` that finishes the run instead."""
    from ragscore_workers.store import RunState

    from .embedded_redis import run_process_alive
    from .run_lookup import run_store
    from .runner import cancel as cancel_run

    run_id = _recorded_run_id(Path(out), "cancel()")
    store, lane = run_store(broker, run_id, writes=True, app=False)  # the app may be sending this process's run
    was = store.state(run_id)
    cancel_run(store, run_id)
    cancelled = store.state(run_id) == RunState.CANCELLED
    unwritten = cancelled and not store.summary_is_current(run_id)
    if unwritten and lane is not None and not run_process_alive(store.r, store.meta(run_id)):
        warnings.warn(_left_unsummarized(run_id, Path(out), broker), IncompleteRunWarning, stacklevel=2)
    return was != RunState.CANCELLED and cancelled


def _left_unsummarized(run_id: str, out_dir: Path, broker: str | None) -> str:
    """What :func:`cancel` says of an embedded run whose process is gone: nothing writes its summary, and what does."""
    return (f"run {run_id} is cancelled, but the evaluate() or `ragscore run` that ran it is gone (interrupted), and "
            "the workers it started with it: no summary or report of what it scored is written; "
            f"{backticked(results_command(run_id, out_dir, broker))} in a shell writes them, or "
            f"resume({str(out_dir)!r}) scores the rest and writes them")  # fmt: skip


def _recorded_run_id(out_dir: Path, caller: str) -> str:
    """The id of the run whose reports go to ``out_dir`` (its run.json, written before the run's first row is sent);
    ConfigError naming ``caller`` when there is none."""
    recorded = recorded_run(out_dir)
    if recorded is None or "run_id" not in recorded:
        raise ConfigError(f"{out_dir / 'run.json'} not found or unreadable: {caller} takes the out dir of an earlier "
                          "run (its run.json is written there before its first row is sent)")  # fmt: skip
    return str(recorded["run_id"])


def shutdown() -> None:
    """Stop the embedded Redis and local workers this process's :func:`evaluate` and :func:`resume` calls keep
    running between them (a later call starts them again); done by itself when the process exits. A call in flight in
    another thread is waited for."""
    stop_kept_once_idle()


def _evaluation(summary: RunSummary, out_dir: Path, rows_given: bool = False) -> Evaluation:
    """The run's Evaluation, after a warning for its unreadable rows, a DatasetWarning for each line ``ragscore run``
    ends with on scores the data made 0 (gold and retrieved ids named otherwise, a target's replies lacking a field),
    a RetrievedNothingWarning for its line of information on rows that retrieved nothing, and one for what
    ``ragscore run`` exits 1 for (returned as it is, but said: a notebook shows warnings, with ``quiet`` too).
    ``rows_given``: the run scored rows given in memory (failed_rows.jsonl has each one's index in them, and its line
    in their copy)."""
    if summary.failed_rows:
        rows = f"{counted(summary.failed_rows, 'row')} {agree(summary.failed_rows, 'was', 'were')}"
        first = first_failed_row(out_dir)
        each = agree(summary.failed_rows, "it is", "each is")
        warnings.warn(f"{rows} unreadable and not scored: {each} in {out_dir / 'failed_rows.jsonl'} with "
                      f"{_place(first, rows_given)} and why{_first_failed(first)}", stacklevel=3)  # fmt: skip
    for line in warning_lines(summary):  # scores of 0 that no error explains
        warnings.warn(line, DatasetWarning, stacklevel=3)
    for line in retrieved_nothing_lines(summary):  # information, as `ragscore run` ends with it
        warnings.warn(_retrieved_nothing(line, summary), RetrievedNothingWarning, stacklevel=3)
    problem = incomplete(summary, PYTHON)
    if problem is not None:
        warnings.warn(f"{problem} (reports in {out_dir}{_resume_note(summary, out_dir)})", IncompleteRunWarning,
                      stacklevel=3)  # fmt: skip
    plan = _gate_plan(summary, out_dir)  # checked as `ragscore run` checks them: gates.json, the reports' Gates section
    gates = plan.check(out_dir) if plan is not None else []
    if missed := [g for g in gates if not g.passed]:
        said = "; ".join(_verdict(g) for g in missed)
        warnings.warn(f"{len(missed)} of the run's {counted(len(gates), 'gate')} did not hold: {said} "
                      "(Evaluation.gates has every verdict)", GateFailedWarning, stacklevel=3)  # fmt: skip
    return Evaluation(summary=summary, out_dir=out_dir, gates=gates)


def _retrieved_nothing(line: str, summary: RunSummary) -> str:
    """The line of information on rows that retrieved nothing, with the outputs whose means their zeros lower and
    what to do about it."""
    lowered = ", ".join(name for name, m in summary.metrics.items() if m.empty)
    return (f"{line}, which lowers the means of {lowered}: by design for an LLM-only system (compare "
            "systems by `system`); else give those rows their retrieved_doc_ids, or leave recall_at_k out of the "
            "suite")  # fmt: skip


def _resume_note(summary: RunSummary, out_dir: Path) -> str:
    """``; resume('DIR') scores what was stopped`` for a run with items a cancel or a breaker stopped, else
    nothing."""
    if not any(m.stopped for m in summary.metrics.values()):
        return ""
    return f"; resume({str(out_dir)!r}) scores what was stopped"


def _place(first: dict[str, Any] | None, rows_given: bool) -> str:
    """How failed_rows.jsonl places each row: its index in the rows given, its key in a JSON object or its row in a
    JSON list (by the first one, ``first``: :meth:`Named.failed_row` keeps such a row's ``key`` or ``row``, not a
    line), else its line."""
    if rows_given:
        return f"its index in {ROWS_GIVEN.name} (from 0; its line, from 1, is that of their copy, {ROWS_FILE})"
    if first is not None and "key" in first:
        return "its key in the JSON object"
    return "its row in the JSON list (from 1)" if first is not None and "row" in first else "its line"


def _first_failed(first: dict[str, Any] | None) -> str:
    """``; the first, row 3: answer: ...`` (its index in the rows given, its key in a JSON object, its place in a JSON
    list, else its line): which row and why, from failed_rows.jsonl's ``first`` row; nothing when that file cannot be
    read."""
    return "" if first is None else f"; the first, {failed_row_at(first)}: {first['error']}"


def _gate_plan(summary: RunSummary, out_dir: Path) -> GatePlan | None:
    """The gates of the run in ``out_dir``: its suite's ``gates:`` and the gate options it was started with (its
    run.json's job: ``ragscore run --fail-under ...``, which a :func:`resume` is held to as ``ragscore resume`` is);
    None without any. Their names were checked as the run started: a run that scored no item names no output, and
    its gates fail (no scored item) rather than be refused."""
    suite_gates, options = _suite_gates(out_dir), _started_gate_options(out_dir)
    named = [g.metric for g in suite_gates] + [parse_gate(text).metric for text in options.get("fail_under", [])]
    return GatePlan.build(suite_gates, [*summary.metrics, *named], **options)


def _started_gate_options(out_dir: Path) -> dict[str, Any]:
    """The gate options the run in ``out_dir`` was started with, as its run.json keeps them (:func:`started_gates`)."""
    return started_gates(kept_job(recorded_run(out_dir) or {}))


def _suite_gates(out_dir: Path) -> list[Any]:
    """The ``gates:`` of the suite the run in ``out_dir`` was scored with (its run_info.json; none when unreadable)."""
    try:
        return Suite.model_validate(json.loads((out_dir / "run_info.json").read_text())["suite"]).gates
    except (OSError, ValueError, LookupError, TypeError):
        return []


def _verdict(gate: GateResult) -> str:
    """``exact_match@sys mean 0.75 below 0.99``: one gate that did not hold."""
    where = f"{gate.metric}@{gate.system}" if gate.system else gate.metric
    actual, bound = ("no score", f"{gate.threshold:.4g}") if gate.actual is None else apart(gate.actual, gate.threshold)
    side = "above" if gate.lower_better else "below"
    return f"{where} {gate.kind} {actual} {side} {bound}"


#: The temporary out directories of this process's finished ``evaluate()`` calls given no ``out=``: removed at exit
#: (by this process alone: a child forked from it, exiting first, owns none).
_TEMPORARY_OUT: list[Path] = []
os.register_at_fork(after_in_child=_TEMPORARY_OUT.clear)


def _left_to_the_caller(summary: RunSummary) -> bool:
    """Whether a finished run's temporary out dir outlives the process: a warning names it or a file in it (an
    incomplete run, unreadable rows), or :func:`resume` has items there to score (stopped by a budget, a breaker or a
    cancel), as after an interrupted call."""
    stopped = any(m.stopped for m in summary.metrics.values())
    return stopped or bool(summary.failed_rows) or incomplete(summary, PYTHON) is not None


def _temporary(out_dir: Path) -> bool:
    """Whether ``out_dir`` is removed as this process exits (an earlier ``evaluate()`` without ``out=`` made it): a
    resume there must keep its items in the store, the only copy left once the folder goes."""
    named = out_dir.resolve()
    return any(temporary.resolve() == named for temporary in _TEMPORARY_OUT)


def keep_at_exit(out_dir: Path) -> None:
    """Keep ``out_dir`` when the process exits, though a finished ``evaluate()`` without ``out=`` made it (the
    reports a failed ``assert_scores`` names, a folder a later call is given as ``out=``, by any path to it)."""
    named = out_dir.resolve()
    for temporary in [temporary for temporary in _TEMPORARY_OUT if temporary.resolve() == named]:
        (temporary / TEMPORARY_MARK).unlink(missing_ok=True)
        _TEMPORARY_OUT.remove(temporary)


@atexit.register
def _remove_temporary_out() -> None:
    """Remove the reports of the finished calls given no ``out=`` (one directory a call, a notebook's many calls),
    as the process exits: their Evaluations, which read ``items.jsonl`` there, go with it."""
    for out_dir in _TEMPORARY_OUT:
        shutil.rmtree(out_dir, ignore_errors=True)
    _TEMPORARY_OUT.clear()


#: How errors name that copy and its rows: as what the caller gave, by row index (its line N is their row N-1).
ROWS_GIVEN = Named("the rows given to evaluate()", as_rows=True)


def _rows_file(out_dir: Path) -> Path:
    """``out_dir``'s copy of the rows; ConfigError when a file of that name is there and no run wrote it (it is the
    caller's, and would be written over)."""
    path = out_dir / ROWS_FILE
    if path.exists() and recorded_run(out_dir) is None:
        raise ConfigError(f"{path} is there and no ragscore run wrote it: evaluate() copies the rows given to that "
                          "file; choose another out=")  # fmt: skip
    return path


def _write_rows(dataset: Any, path: Path) -> Path:
    """Write the rows of ``dataset`` to ``path`` as JSON lines; TypeError naming the row of a value JSON cannot hold.
    Written as every file in out= is (:func:`atomic_writer`): a link standing there is replaced, never written
    through (another's, in a shared folder, would have the rows written where it points)."""
    make_out_dir(path.parent)  # out= names a file, or a place this user cannot write: as run() says it
    written = 0
    with atomic_writer(path) as fh:
        for i, row in enumerate(_records(dataset)):
            try:  # ASCII escapes: a lone surrogate (half an emoji) cannot be written as UTF-8 but can as \udXXX
                text = _json_row(row)
            except TypeError as exc:  # a set, an object: say which row of thousands holds it
                raise TypeError(f"row {i} (id {row.get('id')!r}): {exc}") from exc
            fh.write(text + "\n")
            written += 1
    if not written:  # said of what was given, not of the copy (a temporary file the caller never named)
        raise DatasetError(f"the rows given to evaluate() are empty ({type(dataset).__name__} of no row): no rows to "
                           "score")  # fmt: skip
    return path


def _json_row(row: Mapping[str, Any]) -> str:
    """``row`` as a line of JSON; a NaN (pandas' missing cell) or an infinity at any depth null, as ``json_value``
    makes them (json would write ``NaN``, which no other reader of JSON takes)."""
    try:
        return json.dumps(row, default=_plain, allow_nan=False)
    except ValueError:  # a NaN or infinity: written, read back and made null (only such a row twice)
        return json.dumps(json_value(json.loads(json.dumps(row, default=_plain))), allow_nan=False)


def _records(dataset: Any) -> Iterator[Mapping[str, Any]]:
    """The rows of an iterable of dicts or of a pandas or polars DataFrame (its records); TypeError for anything else (a
    DataFrame iterates over its column names, a dict over its keys)."""
    if hasattr(dataset, "to_dicts") and hasattr(dataset, "columns"):  # a polars DataFrame
        dataset = dataset.to_dicts()
    elif hasattr(dataset, "to_dict") and hasattr(dataset, "columns"):  # a pandas DataFrame
        dataset = dataset.to_dict(orient="records")
    if isinstance(dataset, (Mapping, str, bytes)):
        raise TypeError(f"evaluate() takes rows (a list of dicts, or a DataFrame), got one {type(dataset).__name__}")
    for i, row in enumerate(dataset):
        if not isinstance(row, Mapping):
            raise TypeError(f"row {i} is of type {type(row).__name__}, not a dict of fields (question, answer, ...)")
        yield row


def _plain(value: Any) -> Any:
    """A value json cannot write, as JSON: a numpy number or array (``.item()``, ``.tolist()``), pandas' NA and NaT
    (null), and what a Parquet file's rows are read as by the command line (``json_value``: a date or time ISO
    8601, a duration seconds, a Decimal a float, bytes UTF-8 text, a UUID its text); TypeError for the rest (a set,
    whose order is no list's; an object of the caller's)."""
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return value.tolist()
    if type(value).__name__ in ("NAType", "NaTType"):  # pandas' missing values (pd.read_sql, nullable dtypes)
        return None
    if isinstance(value, (datetime.date, datetime.time, datetime.timedelta, decimal.Decimal, bytes, uuid.UUID)):
        try:
            return json_value(value)
        except ValueError as exc:  # bytes that are no UTF-8 text
            raise TypeError(f"a row value of bytes that are no UTF-8 text: {exc}") from exc
    raise TypeError(f"a row value of type {type(value).__name__} cannot be written as JSON")
