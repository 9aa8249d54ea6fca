"""The ``ragscore`` command line (typer)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ragscore_workers.commands import backticked
from ragscore_workers.counts import agree, close_names, counted, did_you_mean
from ragscore_workers.errors import BrokerError, ConfigError, DatasetError, RagscoreError, raise_problems
from ragscore_workers.redaction import redact_url
from ragscore_workers.settings import check_redis_url, get_settings

from .atomic_file import link_target, make_out_dir, said_os_error, write_text_atomic
from .broker_watch import DEFAULT_BROKER_TIMEOUT_S
from .help_format import HelpCommand, HelpTyper
from .run_lookup import broker_url, cluster_url, is_embedded, run_store
from .terminal import (
    PIPED_PROSE_WIDTH,
    TerminalConsole,
    cancel_command,
    follow_commands,
    is_path,
    print_warning,
    report_command,
    results_command,
    resume_command,
    say_logged_warnings,
    shown,
    summary_commands,
    write_to_nowhere,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ragscore_workers.metrics.registry import MetricDef
    from ragscore_workers.planning import ResolvedSuite
    from ragscore_workers.schemas import RunSummary
    from ragscore_workers.settings import Settings
    from ragscore_workers.store import RunOverview, RunStore

    from .queues import Orphan
    from .workers import LocalWorkers

__all__ = ["app", "main"]

app = HelpTyper(add_completion=False, no_args_is_help=True, help="Score RAG and LLM answers at scale.")
#: Messages carry user text (paths, names, provider errors): never read as Rich markup (``[/x]`` would crash), its
#: control characters shown, not obeyed (:mod:`.terminal`).
err = TerminalConsole(stderr=True, markup=False)

#: Exit codes: 0 success; 1 the run failed, the judge's circuit breaker stopped judging, or a metric output scored
#: nothing (its items errored, or every item of the run was unscorable: ``gates.incomplete``);
#: 2 bad input stopped it before anything was submitted; 3 the run finished but a gate (--fail-under, suite
#: gates, --fail-on-regression; compare's --fail-on-worse) did not hold.
EXIT_RUN_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_GATE_FAILED = 3
EXIT_INTERRUPTED = 130
#: Seconds ``ragscore worker`` gives its stderr to take its last line ("workers stopped") before it exits without it.
LAST_LINE_S = 5.0
#: The levels Celery's ``-l`` takes (``ragscore worker --loglevel``).
CELERY_LOGLEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

PredictionsOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--predictions", help="nlp-project: the predictions JSON keyed q001, q002, ..."),
]
CorpusOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--corpus", help="nlp-project: corpus directory of documents {doc_id, sentences}"),
]
SystemOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--system", help="nlp-project, auto-analyst: the system name these answers belong to"),
]


def _broker_option(url: str) -> str:
    """A usable Redis URL; a password in it is said to show in ``ps`` (the environment does not)."""
    from urllib.parse import urlsplit

    if urlsplit(check_redis_url(url)).password:
        print_warning("the password in --broker is visible to every user of this host (ps); set "
                      "RAGSCORE_BROKER_URL instead")  # fmt: skip
    return url


def _broker_opt(unset: str) -> Any:
    """A command's ``--broker`` option (a Redis URL, checked; a password in it warned of), ``unset`` saying what the
    command does without one: the typer.Option of an ``Annotated[Optional[str], ...]`` (written out there, where
    mypy reads it as a type)."""
    return typer.Option(
        "--broker",
        help=f"Cluster broker URL (default: $RAGSCORE_BROKER_URL; {unset}).",
        callback=lambda url: _broker_option(url) if url else url,
    )


BrokerOpt = Annotated[Optional[str], _broker_opt("unset = embedded")]
#: ``ragscore worker``'s: workers serve a cluster's queues (an embedded run starts its own), so one is needed.
WorkerBrokerOpt = Annotated[
    Optional[str], _broker_opt("one of them is required: an embedded run starts its own workers")
]
#: ``ragscore submit``'s: a submitted run is scored by a cluster's workers.
SubmitBrokerOpt = Annotated[
    Optional[str],
    _broker_opt("one of them is required: submit sends a run to a cluster; 'ragscore run' runs one embedded"),
]
#: ``ragscore flower``'s: without one it attaches to the embedded Redis only while it is up.
FlowerBrokerOpt = Annotated[
    Optional[str], _broker_opt("unset = the embedded Redis's lane 0, only while an embedded run has it up")
]


MaxCostOpt = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option("--max-cost", min=0, help="Judge: stop new calls at this cost (needs the metrics' prices)"),
]
MaxTokensOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--max-tokens", min=1, help="Judge: stop new calls at these tokens (in + out)"),
]
# No typer min=: a value below 1 is a ConfigError of _judge_limits, which says what the limit is.
RpmOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--rpm", help="Judge: requests per minute (in place of the suite's judge.rpm; all workers share it)"),
]
TpmOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--tpm", help="Judge: tokens per minute (in place of the suite's judge.tpm)"),
]
RpdOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--rpd", help="Judge: requests per day (in place of the suite's judge.rpd)"),
]
TpdOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--tpd", help="Judge: tokens per day (in place of the suite's judge.tpd)"),
]
JudgeThreadsOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option("--judge-threads", min=1, help="Embedded: threads of the local judge worker (default 32)"),
]
DATASET_HELP = (
    "Dataset file (.jsonl, .csv, .json, each may be .gz; .parquet), or a directory: eval-points, or a "
    "Hugging Face datasets save_to_disk folder"
)
FormatOpt = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--format",
        help="jsonl, csv, json (each may be .gz), parquet, hf-disk, nlp-project, eval-points, auto-analyst or "
        "socioscope (default: detected)",
    ),
]
ChunkSizeOpt = Annotated[Optional[list[str]], typer.Option("--chunk-size", help="QUEUE=N")]  # noqa: UP045
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress, no table")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="No cached judge/target replies or vectors")]
NoTargetOpt = Annotated[
    bool, typer.Option("--no-target", help="Score the rows as given; do not ask the suite's targets")
]


def _format_options(predictions: Path | None, corpus: Path | None, system: str | None) -> dict[str, object]:
    """Reader options of the nlp-project format (only the ones given)."""
    given = {"predictions": predictions, "corpus": corpus, "system": system}
    return {k: v for k, v in given.items() if v is not None}


def _judge_limits(**given: int | None) -> dict[str, int]:
    """The judge rate limits --rpm / --tpm / --rpd / --tpd set (only the ones given); ConfigError below 1."""
    limits = {name: value for name, value in given.items() if value is not None}
    for name, value in limits.items():
        if value < 1:
            raise ConfigError(f"--{name} {value}: a judge rate limit is at least 1 (leave it out to keep the suite's "
                              f"judge.{name})")  # fmt: skip
    return limits


def _without(resolved, *, no_target: bool, no_cache: bool):
    """--no-target drops the suite's targets (re-score a run's answers.jsonl); --no-cache turns its caches off."""
    from .suite import load_suite, without_caches

    if no_target:
        resolved = load_suite(resolved.suite.model_copy(update={"target": None, "targets": []}))
    return without_caches(resolved) if no_cache else resolved


def _new_run_inputs(dataset: Path, suite: Path, **options: Any) -> ResolvedSuite:
    """:func:`_new_run_suite` of ``suite`` with ``options``, after checking that ``dataset`` is there: a missing
    dataset and a suite that cannot be used are said together, a line each (fixed in one go, not one a run)."""
    from .datasets import check_dataset_exists

    try:
        check_dataset_exists(dataset)
    except DatasetError as exc:
        missing = exc
    else:
        return _new_run_suite(suite, **options)
    try:
        _new_run_suite(suite, **options)
    except ConfigError as suite_error:
        raise_problems([("", ConfigError(str(missing))), ("", suite_error)], subject="input")
    raise missing


def _new_run_suite(
    suite: Path,
    *,
    chunk_size: list[str] | None,
    no_target: bool,
    no_cache: bool,
    max_cost: float | None,
    max_tokens: int | None,
    limits: dict[str, int],
) -> ResolvedSuite:
    """The suite of a new run (``run``, ``submit``) with the command line's options applied, the same for both:
    ``--chunk-size``, ``--no-target``, ``--no-cache``, ``--max-cost`` / ``--max-tokens`` and the judge rate limits
    ``limits`` (:func:`_judge_limits` of ``--rpm`` / ``--tpm`` / ``--rpd`` / ``--tpd``). ConfigError on a bad one."""
    from .suite import judge_budget, load_suite, with_judge_params

    resolved = load_suite(suite, judge_limits=limits)
    chunks = _parse_chunks(chunk_size)
    if chunks:
        merged = {**resolved.suite.chunk_size, **chunks}
        resolved = load_suite(resolved.suite.model_copy(update={"chunk_size": merged}))
    resolved = _without(resolved, no_target=no_target, no_cache=no_cache)
    return with_judge_params(resolved, **judge_budget(max_cost=max_cost, max_tokens=max_tokens))


def _parse_chunks(values: list[str] | None) -> dict[str, int]:
    """``--chunk-size QUEUE=N`` values; a bad one is a ConfigError said of the option, not as an "invalid suite"
    (the suite file is fine)."""
    from .suite import QUEUE_ORDER

    chunks: dict[str, int] = {}
    for value in values or []:
        queue, _, size = value.partition("=")
        if not size.isdigit() or int(size) < 1:
            raise ConfigError(f"--chunk-size expects QUEUE=N with N >= 1, got {value!r}")
        if queue not in QUEUE_ORDER:
            raise ConfigError(f"--chunk-size: unknown queue {queue!r} (known: {', '.join(QUEUE_ORDER)})")
        chunks[queue] = int(size)
    return chunks


def _say(line: str) -> None:
    """Print ``line`` to stdout, the output a script reads; a reader that went away (``ragscore status | head``)
    takes the rest of it to nowhere, the command ending as it would have, not with a broken-pipe error."""
    try:
        typer.echo(line)
    except BrokenPipeError:
        write_to_nowhere(sys.stdout)


def _store(broker: str | None, *, sends: bool = False, writes: bool = False) -> RunStore:
    """The run store; ``sends``: the command sends work (the broker's Redis is then probed too); ``writes``: it
    writes the store (its user is checked for writing, not only reading), and is warned of a Redis that may evict
    its work."""
    from .connection import connect, eviction_warnings

    url = broker_url(broker)
    store = connect(url, get_settings(), sends=sends, writes=writes)
    if sends:
        _warn_of_eviction(eviction_warnings(store, url, get_settings()))
    return store


#: What ``run --resume DIR`` refuses: the run store has the run's dataset, suite and options as it was submitted.
RESUME_REFUSES = ("DATASET", "--suite", "--chunk-size", "--format", "--predictions", "--corpus", "--system",
                  "--no-cache", "--no-target")  # fmt: skip
#: What ``run --resume DIR`` takes (said when it refuses one of :data:`RESUME_REFUSES`): what they do -> the options.
RESUME_TAKES = {
    "(raise its judge budget)": ("--max-cost", "--max-tokens"),
    "(set its judge rate limits)": ("--rpm", "--tpm", "--rpd", "--tpd"),
    "(its local judge worker's threads)": ("--judge-threads",),
    "(its gates, in place of those it was started with)": (
        "--fail-under", "--fail-on-regression", "--regression-tolerance", "--junit", "--junit-items"
    ),
    "": ("--broker", "--quiet"),
}  # fmt: skip


FailUnderOpt = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option(
        "--fail-under",
        help="Gate: METRIC=VALUE (mean >= VALUE), METRIC:ci_low=VALUE, METRIC@SYSTEM=VALUE (one system's items); "
        "repeatable",
    ),
]
BaselineOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--fail-on-regression", help="Gate: no metric mean below this earlier run's (its --out DIR)"),
]
ToleranceOpt = Annotated[
    Optional[float],  # noqa: UP045
    typer.Option("--regression-tolerance", help="Drop of a mean below the baseline's still allowed (default 0)"),
]
JunitOpt = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("--junit", help="Write JUnit XML: a case per gate (its counts agree with the exit code)"),
]
JunitItemsOpt = Annotated[
    bool,
    typer.Option(
        "--junit-items",
        help="Add to --junit a case per item x gated metric, failed below the gate's "
        "bar (CI reporters count these failures also when every gate holds)",
    ),
]


class _RunCommand(HelpCommand):
    """``run``: DATASET and --suite are required unless --resume DIR is given."""

    usage_args = "(DATASET --suite FILE | --resume DIR)"


@app.command("run", cls=_RunCommand)
def run_cmd(
    ctx: typer.Context,
    dataset: Annotated[
        Optional[Path],
        typer.Argument(metavar="DATASET", help=f"{DATASET_HELP}. Required unless --resume"),
    ] = None,  # noqa: UP045
    suite: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--suite", "-s", help="Suite file (YAML or JSON); required unless --resume"),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the reports")] = Path("ragscore-out"),
    broker: BrokerOpt = None,
    fmt: FormatOpt = None,
    predictions: PredictionsOpt = None,
    corpus: CorpusOpt = None,
    system: SystemOpt = None,
    chunk_size: ChunkSizeOpt = None,
    resume_dir: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--resume", help="Finish the run whose reports go to this DIR (its run.json names it)"),
    ] = None,
    no_cache: NoCacheOpt = False,
    no_target: NoTargetOpt = False,
    max_cost: MaxCostOpt = None,
    max_tokens: MaxTokensOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    rpd: RpdOpt = None,
    tpd: TpdOpt = None,
    judge_threads: JudgeThreadsOpt = None,
    quiet: QuietOpt = False,
    fail_under: FailUnderOpt = None,
    baseline_dir: BaselineOpt = None,
    tolerance: ToleranceOpt = None,
    junit: JunitOpt = None,
    junit_items: JunitItemsOpt = False,
    debug_on_fail: Annotated[
        bool,
        typer.Option("--debug-on-fail", help="Embedded, on a terminal: re-run the first failing point under pdb"),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Validate and count: work per queue, judge calls, cost and least time; submit nothing"
        ),
    ] = False,  # fmt: skip
) -> None:
    """Score a dataset with a suite's metrics and write the reports

    DATASET is scored with the metrics of --suite end to end (embedded unless a broker is set); with --resume DIR
    alone, the run whose reports go to DIR is finished.

    With gates, exits 3 when one does not hold (after printing which, and by how much).
    """
    from .gates import GatePlan

    if not dry_run:  # a run or a resume sends work: refused before its --junit, the embedded Redis or DIR is touched
        get_settings().check_visibility_timeout()
    limits = _judge_limits(rpm=rpm, tpm=tpm, rpd=rpd, tpd=tpd)
    if resume_dir is not None:
        if dry_run:
            raise ConfigError("--dry-run counts what a new run would do; it does not apply to --resume")
        values = (dataset, suite, chunk_size, fmt, predictions, corpus, system, no_cache, no_target)
        given = [name for name, value in zip(RESUME_REFUSES, values, strict=True) if value not in (None, False, [])]
        # its reports go to DIR itself, and a resume runs no debugger: neither option would be obeyed
        other_out = _on_command_line(ctx, "out") and out.resolve() != resume_dir.resolve()
        given += [name for name, value in (("--out", other_out), ("--debug-on-fail", debug_on_fail)) if value]
        if given:
            takes = "; ".join(f"{'/'.join(flags)} {what}".strip() for what, flags in RESUME_TAKES.items())
            raise ConfigError(
                f"--resume finishes a run as it was submitted (the run store has its dataset, suite and options; "
                f"with --resume only these may be given: {takes}): drop {', '.join(given)}, or start a new run "
                f"without --resume"
            )
        run_json = resume_dir / "run.json"
        if not run_json.exists():
            raise ConfigError(f"{run_json} not found: --resume needs the --out DIR of an earlier run")
        from .suite import judge_budget

        budget = judge_budget(max_cost=max_cost, max_tokens=max_tokens)  # raise a budget that stopped the judge
        run_id = _run_id(str(resume_dir))
        stored = _stored_suite(broker, run_id, limits)  # its suite's gates hold for the resumed run as for the new one
        gates = _resumed_gates(resume_dir, run_id, broker, stored, fail_under=fail_under, baseline_dir=baseline_dir,
                               tolerance=tolerance, junit=junit, junit_items=junit_items)  # fmt: skip
        summary = _finish(None, None, resume_dir, broker, quiet, resume_id=run_id, judge_params=budget,
                          judge_limits=limits, stored=stored, judge_threads=judge_threads)  # fmt: skip
        _exit_on_outcome(summary, gates, resume_dir, quiet, stored.outputs() if stored is not None else [],
                         resume_command(resume_dir, broker=broker))  # fmt: skip
        return
    if junit is not None:  # first: whatever happens next, the last run's report there is not this one's
        _check_junit_path(junit)
    if dataset is None or suite is None:
        raise ConfigError("run needs a DATASET and --suite (or --resume DIR)")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; reports go to a directory")
    if debug_on_fail and (not is_embedded(broker) or not sys.stdin.isatty()):
        raise ConfigError("--debug-on-fail needs an embedded run started from a terminal")
    resolved = _new_run_inputs(dataset, suite, chunk_size=chunk_size, no_target=no_target, no_cache=no_cache,
                               max_cost=max_cost, max_tokens=max_tokens, limits=limits)  # fmt: skip
    gates = GatePlan.build(
        resolved.suite.gates, resolved.outputs(), fail_under=fail_under or (), baseline_dir=baseline_dir,
        tolerance=tolerance, junit=junit, junit_items=junit_items,
    )  # fmt: skip
    options = _format_options(predictions, corpus, system)
    if gates is not None and not dry_run:  # --dry-run warns of it, with its counts
        _check_gate_systems(gates, resolved, dataset, fmt, options)
    if dry_run:
        _dry_run(dataset, resolved, broker, gates, fmt=fmt, fmt_options=options, max_cost=max_cost,
                 max_tokens=max_tokens, judge_threads=judge_threads)  # fmt: skip
        return
    summary = _finish(dataset, resolved, out, broker, quiet, fmt=fmt, fmt_options=options, judge_threads=judge_threads,
                      job=_gates_job(fail_under, baseline_dir, tolerance, junit, junit_items))  # fmt: skip
    if debug_on_fail:
        from .debug import debug_on_fail as debug

        debug(out, dataset, fmt=fmt, fmt_options=options, suite_points=resolved.suite.checks_points)
    _exit_on_outcome(summary, gates, out, quiet, resolved.outputs(), resume_command(out, broker=broker))


def _on_command_line(ctx: typer.Context, param: str) -> bool:
    """Whether the command line names ``param`` (not its default)."""
    source = ctx.get_parameter_source(param)
    return source is not None and source.name == "COMMANDLINE"


def _gates_job(
    fail_under: list[str] | None,
    baseline_dir: Path | None,
    tolerance: float | None,
    junit: Path | None,
    junit_items: bool = False,
) -> dict[str, object] | None:
    """The command line's gates, kept in DIR/run.json: a CI job's `run --resume DIR` is held to them as the run
    it finishes was (None: none given)."""
    gates = {"fail_under": list(fail_under or []), "regression_tolerance": tolerance,
             "fail_on_regression": str(baseline_dir.resolve()) if baseline_dir else None,
             "junit": str(junit.resolve()) if junit else None, "junit_items": junit_items or None}  # fmt: skip
    return {"gates": gates} if any(v not in (None, []) for v in gates.values()) else None


def _refuse_its_own_baseline(resume_dir: Path, baseline_dir: Path | None, run_id: str, broker: str | None) -> None:
    """ConfigError for ``--resume DIR --fail-on-regression DIR`` where the run in DIR has not written its reports: the
    baseline's own advice, to finish it with ``--resume DIR``, would repeat the command. A run its store lost is left
    to the resume's own refusal (run it again)."""
    from .reports.previous import unwritten_reports
    from .runner import recorded_run

    if baseline_dir is None or baseline_dir.resolve() != resume_dir.resolve():
        return
    if unwritten_reports(resume_dir) is None or (recorded_run(resume_dir) or {}).get("lost"):
        return
    raise ConfigError(
        f"--fail-on-regression {baseline_dir} names the run this --resume finishes ({run_id}, which has not written "
        "its reports): a run cannot be its own baseline. Give --fail-on-regression the --out DIR of another, finished "
        f"run, or resume without it ({backticked(resume_command(resume_dir, broker=broker))}) and gate later runs "
        f"with --fail-on-regression {resume_dir} once it has finished"
    )


def _resumed_gates(
    out: Path,
    run_id: str,
    broker: str | None,
    stored,
    *,
    fail_under: list[str] | None,
    baseline_dir: Path | None,
    tolerance: float | None,
    junit: Path | None,
    junit_items: bool,
):
    """The gates of run ``run_id`` resumed into ``out`` (``run --resume DIR``, ``resume``): its suite's (``stored``;
    None: the store lacks the run, none), and the gate options given to the resume, else those it was started with
    (:func:`_recorded_gates`); ConfigError as a new run's (:meth:`GatePlan.build`), or for the run as its own
    baseline."""
    from .gates import GatePlan

    if not (fail_under or baseline_dir or tolerance is not None):  # the gates the run was started with
        fail_under, baseline_dir, tolerance, junit, junit_items = _recorded_gates(
            out, run_id, broker, junit, junit_items
        )
    _refuse_its_own_baseline(out, baseline_dir, run_id, broker)
    if stored is None:  # not resumable: its JUnit file, the last good report, is left as it is
        return None
    if junit is not None:
        _check_junit_path(junit)
    return GatePlan.build(stored.suite.gates, stored.outputs(), fail_under=fail_under or (), baseline_dir=baseline_dir,
                          tolerance=tolerance, junit=junit, junit_items=junit_items)  # fmt: skip


def _started_job(out: Path, run_id: str, broker: str | None) -> dict[str, Any]:
    """The job (the command-line gates) run ``run_id`` was started with, looked up as its resume into ``out`` records
    it: ``out/run.json``'s where that names the run and knows them, else the store's, else the run.json of the folder
    the store names for it (:func:`~orchestrator.runner.started_job`); {} where none knows it (an older ragscore's
    run: the resume says so)."""
    from .runner import kept_job, recorded_run, started_job

    record = recorded_run(out) or {}
    own = record.get("run_id") == run_id
    if own and (kept := kept_job(record)) is not None:
        return kept
    try:
        store, _ = run_store(broker, run_id)
    except ConfigError:  # the resume says why it cannot find the run
        return {}
    return started_job(store, run_id, out, own, said=False) or {}


def _recorded_gates(
    out: Path, run_id: str, broker: str | None, junit_given: Path | None, items_given: bool = False
) -> tuple[list[str], Path | None, float | None, Path | None, bool]:
    """The command-line gates run ``run_id`` was started with (:func:`_started_job`: ``--fail-under``,
    ``--fail-on-regression``, ``--regression-tolerance``, ``--junit``, ``--junit-items``), said when there are some;
    ``junit_given`` (a resume's own ``--junit``, a report's path, no gate) replaces the recorded ``--junit`` only,
    ``items_given`` (its ``--junit-items``) adds the item cases."""
    from .gates import started_gates

    kept = started_gates(_started_job(out, run_id, broker))
    fail_under, baseline, tolerance = kept.get("fail_under", []), kept.get("baseline_dir"), kept.get("tolerance")
    junit, items = junit_given or kept.get("junit"), items_given or kept.get("junit_items", False)
    given = [*(f"--fail-under {g}" for g in fail_under), *([f"--fail-on-regression {baseline}"] if baseline else []),
             *([f"--regression-tolerance {tolerance}"] if tolerance is not None else []),
             *([f"--junit {junit}"] if junit else []), *(["--junit-items"] if items else [])]  # fmt: skip
    if given:
        err.print(f"the resumed run is held to the gates it was started with: {' '.join(given)} (give gate options "
                  "to replace them)", soft_wrap=True)  # fmt: skip
    return fail_under, baseline, tolerance, junit, items


def _check_gate_systems(gates, resolved, dataset: Path, fmt: str | None, options: dict[str, object]) -> None:
    """Exit 2 before anything is submitted when a gate names a system (``METRIC@SYSTEM``) no row has: the gate would
    fail once the whole run was scored (no item of it). The systems are the targets' or the rows' (read once more,
    only when a gate names one, and only until every named system is seen)."""
    from .datasets import iter_records
    from .gates import system_note

    named = {g.system for g in gates.gates if g.system is not None}
    if not named:
        return
    systems = {t.system for t in resolved.targets if t.system}  # a target without one keeps the rows' systems
    if named <= systems:
        return
    if not resolved.targets or any(not t.system for t in resolved.targets):
        for _, record in iter_records(dataset, fmt, options or None):
            if isinstance(record, dict) and record.get("system") is not None:
                systems.add(str(record["system"]))
                if named <= systems:
                    return
    if note := system_note(gates.gates, systems):
        raise ConfigError(f"{note}; nothing was submitted")


def _exit_on_outcome(summary: RunSummary, gates, out: Path, quiet: bool, outputs: list[str], resume: str) -> None:
    """The end of a run, new or resumed: check its gates (None: none) on its reports in ``out`` and print them with
    what the table alone does not say; exit 1 for an incomplete run (:func:`_exit_if_incomplete`, ``resume``: the
    command that finishes it), which comes first, else 3 when a gate failed. Gate results that cannot be written
    (:func:`_record_gates`) are said and change no exit code: the verdicts are the run's."""
    from .gates import failed, print_gates

    results = gates.verdicts(out) if gates is not None else []
    if gates is not None:
        _record_gates(gates, out, results, resume)
        print_gates(results, only_failed=quiet)
        for note in gates.notes(summary, results, outputs):
            err.print(note, style="yellow", markup=False, highlight=False, soft_wrap=True)
    _exit_if_incomplete(summary, resume)
    if failed(results):
        raise typer.Exit(EXIT_GATE_FAILED)


def _record_gates(gates, out: Path, results: list, resume: str) -> None:
    """Write the gate ``results`` into ``out`` (gates.json, the reports' Gates sections, the --junit file); where that
    fails (a full disk, a folder that may not be written), say what, where and how to write them again."""
    try:
        gates.record(out, results)
    except (OSError, ConfigError) as exc:
        why = said_os_error(exc) if isinstance(exc, OSError) else str(exc)
        err.print(f"Error: the gate results could not be written to {out}/ (gates.json, the Gates section of report.md "
                  f"and report.html{', the --junit file' if gates.junit is not None else ''}): {why}. The verdicts "
                  f"below and the exit code are the run's; once {out}/ can be written, {backticked(resume)} writes "
                  "them again", style="red", markup=False, highlight=False, soft_wrap=True)  # fmt: skip


def _stored_suite(broker: str | None, run_id: str, limits: dict[str, int]):
    """The suite run ``run_id`` was submitted with, resolved with the resume's judge ``limits`` (read once: the
    resume is given it); None when the store does not have the run (the resume then says why)."""
    from .runner import stored_suite

    try:
        store, _ = run_store(broker, run_id)
        return stored_suite(store, run_id, limits)
    except (ConfigError, KeyError):
        return None


def _check_junit_path(junit: Path) -> None:
    """Said now, not once the run is done: a --junit path that cannot be written. The last run's report there is
    removed, whatever happens next (it is not this one's); where --junit is a link, its target (the link kept)."""
    junit = link_target(junit, "--junit")
    if junit.is_dir():
        raise ConfigError(f"--junit {junit} is a directory; give the path of the XML file to write")
    try:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.open("a").close()
        junit.unlink()
    except OSError as exc:
        raise ConfigError(f"--junit {junit} cannot be written: {exc.strerror or exc}") from exc


def _run_id(ref: str) -> str:
    """A run named by its id, or by its ``--out`` DIR: its run.json names it, else its summary.json (a DIR that
    ``ragscore results`` wrote: a submitted run's only DIR)."""
    for name in ("run.json", "summary.json"):
        path = Path(ref) / name
        if path.is_file():
            try:
                return str(json.loads(path.read_text(encoding="utf-8"))["run_id"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"{path}: not a {name} ragscore wrote ({exc})") from exc
    if Path(ref).is_dir():
        raise ConfigError(f"{ref} holds no run.json or summary.json: it is no run's --out DIR (a run id or such a DIR)")
    if is_path(ref):  # a path that is no DIR, not an id to look up
        raise ConfigError(f"{ref}: no such directory (a run id or a run's --out DIR)")
    return ref


def _resume_folder(broker: str | None, run_id: str) -> Path:
    """Where ``resume RUN_ID`` without --out writes the reports, one rule: the folder that holds them now, found
    (:func:`~.reports.previous.moved_reports`: a later run into it may have moved them to its previous/, told the
    store or not) from the one the store names for the run: the folder its items were released to
    (:meth:`~ragscore_workers.store.RunStore.released_to`: its resume takes them back from it), else the folder it
    writes them to (:meth:`~ragscore_workers.store.RunStore.out_dir`), else, for a run of a ragscore that recorded
    neither, the one its reports were last written to (:meth:`~ragscore_workers.store.RunStore.reports_dir`); else
    ``ragscore-out``, as for an unknown run (the resume says why), a submitted run (no folder), or one whose reports
    no folder holds (gone, or another run's there) while the store still has its items, except a run (released or
    not) whose out_dir is gone or names no run: written there again, as it started, unless it cannot be made again
    (:func:`_uncreatable`: ragscore-out, naming both). Said under --quiet too (not progress: where to find the
    reports); evaluate()'s temporary folder is none. ConfigError where no folder holds them and the items left the
    store: only the folder its reports are in now can give them back."""
    from .reports.previous import moved_reports, run_named
    from .runner import TEMPORARY_MARK

    try:
        store, _ = run_store(broker, run_id)
        released, writes_to = store.released_to(run_id), store.out_dir(run_id)
        named = [
            (released, "where its reports are"),
            (writes_to, "the folder it writes its reports to"),
            (store.reports_dir(run_id), "the folder its reports were last written to (the store names no folder it "
                                        "writes them to: a run of an older ragscore)"),
        ]  # fmt: skip
    except ConfigError:
        return Path("ragscore-out")
    # not evaluate()'s temporary folder (its reports_dir), removed once its process exits
    folders = [(Path(folder), why) for folder, why in named if folder and not (Path(folder) / TEMPORARY_MARK).exists()]
    if not folders:
        return _resuming(run_id, Path("ragscore-out"), "the store names no folder for its reports (a submitted run's, "
                                                       "or an older ragscore's that wrote none)")  # fmt: skip
    folder, why = folders[0]
    if run_named(found := moved_reports(folder, run_id)) == run_id:
        return _resuming(run_id, found, why)
    held = "is gone" if not found.is_dir() else "holds them no more"
    try:
        store.check_items_kept(run_id)  # still in the store: resumed as a run with no folder is
    except ConfigError:
        raise ConfigError(
            f"Run {run_id}: its items left the store once its reports were written to {found}, which {held}: "
            f"`ragscore resume {run_id} --out DIR` takes them back from the folder DIR its reports are in now; to "
            "score the run again, run it again"
        ) from None
    # the run's own folder deleted (or emptied), no other run's there, its items in the store (released or not):
    # written again, as it started (not the reports_dir of an older ragscore's run: evaluate()'s temporary folder,
    # removed as its process exited)
    if writes_to and found == Path(writes_to) and run_named(found) is None:
        own = "the folder it writes its reports to"
        if (blocked := _uncreatable(found)) is None:
            return _resuming(run_id, found, f"{own}, which {held}: written there again")
        return _resuming(run_id, Path("ragscore-out"), f"as {found}/, {own}, {held} and cannot be made again "
                                                       f"({blocked})")  # fmt: skip
    return _resuming(run_id, Path("ragscore-out"), f"as {found}/, the folder the store names for it, {held}")


def _uncreatable(folder: Path) -> str | None:
    """Why ``folder``, a run's own folder as the store recorded it (resolved: absolute, no link in it), cannot be
    written again where it was: a symbolic link since put in its place or above it (it would lead elsewhere), or its
    nearest existing part (itself, else a parent) no folder this user may write in (a file, no permission, a mount of
    a host that is gone); None where it can. Nothing made."""
    try:
        leads_to: Path | str = folder.resolve()
    except (OSError, RuntimeError):  # a loop of links
        leads_to = "a loop of links"
    if leads_to != folder:
        return f"{folder} leads to {leads_to} now"
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            if not path.is_dir():
                return f"{path} is not a folder"
            return None if os.access(path, os.W_OK | os.X_OK) else f"{path} may not be written"
    return f"no part of {folder} exists"


def _resuming(run_id: str, folder: Path, why: str) -> Path:
    """``folder``, where ``resume RUN_ID`` writes the reports, said with ``why`` (under --quiet too)."""
    err.print(f"resuming run {run_id} in {folder}/, {why} (--out DIR to write them elsewhere)", soft_wrap=True)
    return folder


def _exit_if_incomplete(summary: RunSummary, resume: str) -> None:
    """Exit 1 when the judge's or a target's circuit breaker stopped the run asking it, or a metric output has
    errors and not one score, pooled or in one system's items: the run produced nothing for it (a wrong key, a
    sandbox that cannot start, a provider or a system under test that is down); or no score of the whole run, every
    item unscorable (rows without a field it needs: misnamed columns, the wrong --format). None may pass as a success
    in CI; the reports are written and ``resume`` (the command that finishes this run) goes on after the cause is fixed.
    A run cancelled with ``ragscore cancel`` exits 1 too: its reports cover only what was scored before."""
    from .gates import incomplete, stopped_targets

    problem = incomplete(summary)
    if problem is None:
        return
    if summary.state == "cancelled" and not summary.scored:
        problem += f"; the reports hold no scores: {backticked(resume)} scores the run"
    elif summary.state == "cancelled":
        problem += f"; the reports cover those only, and {backticked(resume)} scores the rest"
    elif summary.judge.get("breaker"):
        problem += (f"; the items it did not judge are unscored. Fix the cause, then {backticked(resume)} judges them "
                    "(a key or an outage; a wrong model or base_url is in the suite, which a resume keeps: run again "
                    "with the suite fixed)")  # fmt: skip
    elif stopped_targets(summary):
        problem += (f"; the questions it did not answer are unscored. Fix the system, then {backticked(resume)} asks "
                    "them again (a wrong url or response path is in the suite, which a resume keeps: run again with "
                    "the suite fixed)")  # fmt: skip
    err.print(problem, soft_wrap=True)
    raise typer.Exit(EXIT_RUN_ERROR)


@app.command("resume")
def resume_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id, or the run's --out DIR")],
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--out",
            "-o",
            help="Directory for the reports (default: the DIR given, else the folder holding its reports now, found "
            "from the one the store names for the run, else ragscore-out)",
        ),
    ] = None,
    broker: BrokerOpt = None,
    quiet: QuietOpt = False,
    max_cost: MaxCostOpt = None,
    max_tokens: MaxTokensOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    rpd: RpdOpt = None,
    tpd: TpdOpt = None,
    judge_threads: JudgeThreadsOpt = None,
    fail_under: FailUnderOpt = None,
    baseline_dir: BaselineOpt = None,
    tolerance: ToleranceOpt = None,
    junit: JunitOpt = None,
    junit_items: JunitItemsOpt = False,
) -> None:
    """Finish a run: score only what the store lacks

    What it lacks (missing, failed, stopped by a cancel, or by the judge's breaker or budget) is scheduled and
    followed, then the reports are written. --max-cost / --max-tokens raise the run's judge budget;
    --rpm / --tpm / --rpd / --tpd set its judge rate limits from now on; --judge-threads its embedded judge worker's
    threads. Exits 3 when a gate does not hold: its suite's, and the gate options it was started with (gate options
    given here replace those)."""
    from .suite import judge_budget

    get_settings().check_visibility_timeout()  # it sends work: refused before the embedded Redis is started
    budget = judge_budget(max_cost=max_cost, max_tokens=max_tokens)
    limits = _judge_limits(rpm=rpm, tpm=tpm, rpd=rpd, tpd=tpd)
    ref, run_id = run_id, _run_id(run_id)
    out = out or (Path(ref) if run_id != ref else _resume_folder(broker, run_id))
    stored = _stored_suite(broker, run_id, limits)  # its suite's gates hold for the resumed run
    gates = _resumed_gates(out, run_id, broker, stored, fail_under=fail_under, baseline_dir=baseline_dir,
                           tolerance=tolerance, junit=junit, junit_items=junit_items)  # fmt: skip
    summary = _finish(None, None, out, broker, quiet, resume_id=run_id, judge_params=budget, judge_limits=limits,
                      stored=stored, judge_threads=judge_threads)  # fmt: skip
    _exit_on_outcome(summary, gates, out, quiet, stored.outputs() if stored is not None else [],
                     resume_command(out, run_id, broker))  # fmt: skip


def _dry_run(dataset: Path, resolved, broker: str | None, gates, *, judge_threads: int | None, **options) -> None:
    """Count what the run would do (``--dry-run``); cached judge replies and embeddings are looked up in the run store
    when one is reachable (the cluster's, or the embedded one started from its data file). Gates naming a system the
    dataset lacks are warned of; an embedded run's judge time counts its local judge worker's ``judge_threads``
    (``--judge-threads``, else the default). Exits as the run would stop for what is known in advance: 2 where it
    would be refused or stop before scoring, else 1 where a metric would score no item (no row has a field it needs)."""
    from .embedded_redis import EmbeddedRedis
    from .encode_rates import measured_rate
    from .estimate import estimate_run, looks_up_caches
    from .gates import system_note
    from .queues import live_processes
    from .reports.console import print_estimate
    from .runner import check_judge_threads, check_question_time, judge_threads_unused
    from .workers import POOL_DEFAULTS

    redis = None
    cluster = cluster_url(broker)
    if looks_up_caches(resolved):
        if cluster or EmbeddedRedis(get_settings().home).dir.exists():
            try:
                redis = _store(broker).r
            except RagscoreError as exc:
                err.print(f"caches not looked up: {exc}", soft_wrap=True)
    max_cost, max_tokens = options.pop("max_cost"), options.pop("max_tokens")
    estimate = estimate_run(dataset, resolved, redis=redis, **options)
    mode = "cluster" if cluster else "embedded"
    if estimate.embed is not None:  # the rate the latest runs like it measured, where there are some
        # an embedded run's embed workers are its own pool's; a cluster's those that say they run, else those runs had
        workers = None if cluster else POOL_DEFAULTS["embed"].concurrency
        rate = measured_rate(get_settings().home, resolved.suite.embedding, mode, workers)
        if rate is not None and cluster and (alive := live_processes(cluster, get_settings(), "embed")):
            rate = dataclasses.replace(rate, workers=alive, workers_from="alive")
        estimate.embed.measured = rate
    threads = None if cluster else judge_threads or POOL_DEFAULTS["judge"].concurrency  # a cluster's: unknown
    print_estimate(estimate, resolved.suite, mode=mode, max_cost=max_cost, max_tokens=max_tokens, judge_threads=threads)
    _print_whole_run(estimate, resolved, cluster=cluster, judge_threads=threads)
    if judge_threads is not None and not cluster and not estimate.units.get("judge"):
        print_warning(judge_threads_unused())  # as the run warns
    code = EXIT_RUN_ERROR if estimate.scoreless else 0  # no row has a field they need: a run scores nothing of them
    if gates is not None and (note := system_note(gates.gates, estimate.systems)):
        print_warning(note)
        code = EXIT_BAD_INPUT
    try:  # the run itself is refused before anything starts, here or on a cluster
        get_settings().check_visibility_timeout()
        check_question_time(resolved)
        check_judge_threads(judge_threads, cluster)
    except ConfigError as exc:
        print_warning(f"the run would be refused: {exc}")
        code = EXIT_BAD_INPUT
    if not cluster:  # what an embedded run checks before its workers start (a cluster's live on its workers)
        from .estimate import judge_calls_planned
        from .runner import check_local_resources, judge_cache_may_answer

        # the calls it counted left to send (the reply cache's spared): none needs no judge key, as in the run, which
        # counts them only where the cache holds replies of its judge (else, the key missing, it is refused at once)
        counts = resolved.judge_calls_countable and redis is not None and judge_cache_may_answer(resolved, redis)
        left = judge_calls_planned(estimate) if counts else None
        try:
            check_local_resources(resolved, list(estimate.units), left)
        except ConfigError as exc:  # the estimate stands; the run would stop at once
            print_warning(f"a run here would stop before scoring: {exc}")
            code = EXIT_BAD_INPUT
    if code:
        why = (
            "it would be refused or stop before scoring"
            if code == EXIT_BAD_INPUT
            else "it would score no item of " + ", ".join(estimate.scoreless)
        )
        err.print(f"--dry-run exits {code}, as the run would: {why} (said above)", soft_wrap=True)
        raise typer.Exit(code)


def _print_whole_run(estimate, resolved, *, cluster: str | None, judge_threads: int | None) -> None:
    """The dry run's last line: the whole run's time, what bounds it, and how sure that is (:mod:`.run_time`); the
    cpu queue's sample is timed here first (:func:`.queue_time.time_items`)."""
    from .estimate import host_load
    from .queue_time import time_items
    from .run_time import whole_run, whole_run_line
    from .terminal import TerminalConsole

    load = host_load()  # before the sample's own work adds to it
    if estimate.cpu_sample.items:
        estimate.cpu = time_items(estimate.cpu_sample, resolved)
    run = whole_run(estimate, resolved.suite, embedded=not cluster, load=load, pools=_pools(cluster))
    rounds = estimate.local_rounds(judge_threads) if judge_threads is not None else None
    line = whole_run_line(run, local_rounds=rounds)
    TerminalConsole().print(line, markup=False, highlight=False, soft_wrap=True)


def _pools(cluster: str | None):
    """The cpu and code worker processes a run would have: an embedded run's own pools; a cluster's that say they run
    (:func:`.queues.live_processes`), else assumed as many as a worker started here has, said as such (of the cpu
    queue's, the one the line names with its time)."""
    from .queues import live_processes
    from .run_time import Pools
    from .workers import POOL_DEFAULTS

    cpu, code = POOL_DEFAULTS["cpu"].concurrency, POOL_DEFAULTS["code"].concurrency
    if not cluster:
        return Pools(cpu, code, "an embedded run's own pool, one a core here")
    alive = {queue: live_processes(cluster, get_settings(), queue) for queue in ("cpu", "code")}
    if alive["cpu"]:
        return Pools(alive["cpu"], alive["code"] or code, "the cluster's cpu workers that say they run",
                     code_assumed=not alive["code"])  # fmt: skip
    return Pools(cpu, alive["code"] or code,
                 "assumed, one a core of this machine, as no cluster worker of the cpu queue says it runs: start them "
                 "first (ragscore worker cpu --concurrency N) and the dry run counts theirs",
                 code_assumed=not alive["code"])  # fmt: skip


def _finish(dataset, resolved, out: Path, broker: str | None, quiet: bool, **kwargs) -> RunSummary:
    """Run (or resume) and follow it to the end; print the summary table; return the summary."""
    import redis
    from kombu.exceptions import OperationalError

    from .progress import make_progress
    from .reports import print_summary
    from .runner import run

    written = threading.Event()  # set by run() once it wrote the reports
    try:
        summary = run(dataset, resolved, out, broker=broker, progress=make_progress(quiet),
                      on_reports_written=written.set, **kwargs)  # fmt: skip
    except (KeyboardInterrupt, redis.RedisError, OperationalError, OSError):  # what was scored is kept
        _how_to_go_on(out, broker)
        raise
    if not quiet:
        # out/run.json names the run (recorded as it started): `run --resume out`
        print_summary(summary, out=out, broker=broker)
    if summary.failed_rows:  # rows left out of the scores: a warning, said with --quiet too (as CI runs it)
        err.print(_first_unreadable(out, summary.failed_rows), soft_wrap=True)
    # a resume of a run whose items left the store writes none (they are those of its finish): said under --quiet too,
    # its one line, as it would print nothing else
    if not (quiet and written.is_set()):
        err.print(f"Reports written to {out}/" if written.is_set() else f"Reports (written when it finished) in {out}/")
    return summary


def _first_unreadable(out: Path, count: int) -> str:
    """Where the unreadable rows are, with the first one's line and reason (the table only counts them)."""
    from .datasets.rows import failed_row_at
    from .reports.files import first_failed_row

    first = first_failed_row(out)
    said = "" if first is None else f"; the first, {failed_row_at(first)}: {first['error']}"
    return f"{counted(count, 'unreadable row')} not scored{said} (each in {out / 'failed_rows.jsonl'})"


def _how_to_go_on(out: Path, broker: str | None) -> None:
    """After Ctrl-C: how to finish the run (embedded, or cut off while submitting: it was cancelled) or
    follow it (a submitted cluster run goes on)."""
    from .runner import recorded_run

    recorded = recorded_run(out)
    if recorded is None:
        return  # interrupted before anything was submitted
    run_id = recorded["run_id"]
    if recorded.get("mode") == "cluster" and _state_or_none(broker, run_id) != "cancelled":
        err.print(f"run {run_id} goes on in the cluster: {follow_commands(run_id, out, broker)}", soft_wrap=True)
    else:
        err.print(f"finish it later (what was scored is kept): {backticked(resume_command(out, broker=broker))}",
                  soft_wrap=True)  # fmt: skip


def _state_or_none(broker: str | None, run_id: str) -> str | None:
    """The run's state in the cluster's store, or None when it cannot be read (a Ctrl-C hint must not fail)."""
    try:
        return _store(broker).state(run_id)
    except Exception:  # noqa: BLE001 - any failure: no state to show
        return None


@app.command()
def submit(
    dataset: Annotated[Path, typer.Argument(help=DATASET_HELP)],
    suite: Annotated[Path, typer.Option("--suite", "-s", help="Suite file (YAML or JSON)")],
    broker: SubmitBrokerOpt = None,
    fmt: FormatOpt = None,
    predictions: PredictionsOpt = None,
    corpus: CorpusOpt = None,
    system: SystemOpt = None,
    chunk_size: ChunkSizeOpt = None,
    no_cache: NoCacheOpt = False,
    no_target: NoTargetOpt = False,
    max_cost: MaxCostOpt = None,
    max_tokens: MaxTokensOpt = None,
    rpm: RpmOpt = None,
    tpm: TpmOpt = None,
    rpd: RpdOpt = None,
    tpd: TpdOpt = None,
) -> None:
    """Submit a run to a cluster and print its id

    The id is printed at once, with a warning per queue of the run no worker serves. The suite's options are those
    of `ragscore run`'s, applied the same way."""
    from .connection import check_queues
    from .queues import unserved_message, unserved_queues
    from .runner import check_question_time
    from .runner import submit as submit_run

    limits = _judge_limits(rpm=rpm, tpm=tpm, rpd=rpd, tpd=tpd)
    resolved = _new_run_inputs(dataset, suite, chunk_size=chunk_size, no_target=no_target, no_cache=no_cache,
                               max_cost=max_cost, max_tokens=max_tokens, limits=limits)  # fmt: skip
    if is_embedded(broker):
        raise ConfigError("submit needs a cluster: pass --broker or set RAGSCORE_BROKER_URL")
    check_question_time(resolved)  # before the broker is reached
    options = _format_options(predictions, corpus, system)
    store = _store(broker, sends=True)
    check_queues(store, broker_url(broker), resolved.queues)
    sub = submit_run(dataset, resolved, store, fmt=fmt, fmt_options=options)
    sent = f"{counted(sub.items, 'item')} ({sub.failed_rows:,} unreadable) in {counted(sub.tasks, 'task')}"
    err.print(f"submitted {sent}; follow it: {follow_commands(sub.run_id, broker=broker)}", soft_wrap=True)
    for queue, waiting in unserved_queues(store, sub.run_id).items():  # else it would wait, unsaid, till `status`
        said = unserved_message(queue, waiting, broker=broker)
        print_warning(said)
    _say(sub.run_id)


#: The first line of ``ragscore status``'s run list: its tab-separated columns.
RUN_LIST_HEADER = "run id\tstate\tdone/total\tsubmitted (UTC)\tdataset"


def _listed_dataset(run: RunOverview) -> str:
    """The run list's dataset column: the questions file's name, and the predictions file's where one was given (runs
    of one dataset that differ only in ``--predictions`` read apart)."""
    predictions = run["predictions"]  # "" for an older run's (its meta has no format options): listed as before
    return f"{run['dataset']} (predictions {predictions})" if predictions else run["dataset"]


@app.command()
def status(
    run_id: Annotated[Optional[str], typer.Argument(help="Run id or --out DIR (omit to list runs)")] = None,  # noqa: UP045
    broker: BrokerOpt = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until the run ends")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.2, help="Seconds between refreshes with --watch")
    ] = 2.0,
) -> None:
    """Show a run's progress per queue, or list the runs

    Per queue: done/total, rate, ETA, errors, judge req/min."""
    import redis
    from kombu.exceptions import OperationalError

    from ragscore_workers.store import RunState

    from .embedded_redis import run_process_alive
    from .reports.live import StatusView, sample

    if run_id is None:  # one line per run, oldest first: id, state, done/total units, submitted (UTC), dataset
        store = _store(broker)  # a user that may only read lists the runs (one that writes keeps their index)
        embedded = is_embedded(broker)
        runs = sorted(store.overview(store.list_runs()), key=lambda r: (r["submitted_at"] or 0.0, r["run_id"]))
        interrupted = 0
        if runs:
            _say(RUN_LIST_HEADER)
        for r in runs:
            at = r["submitted_at"]
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) if at is not None else "-"
            state = r["state"]
            # an embedded run goes on only while its process runs: one killed (kill -9, a closed laptop) is not
            if embedded and state not in RunState.DONE and not run_process_alive(store.r, store.meta(r["run_id"])):
                state, interrupted = "interrupted", interrupted + 1
            _say(f"{r['run_id']}\t{state}\t{r['done']:,}/{r['total']:,}\t{when}\t{shown(_listed_dataset(r))}")
        if not runs:
            err.print("no runs in the store (finished runs expire after RAGSCORE_RUN_TTL_S)")
        if interrupted:
            finish, drop = backticked(resume_command("DIR")), backticked(cancel_command("RUN_ID"))
            err.print(f"{interrupted} interrupted: the `ragscore run` of each is gone; finish one with {finish}, or "
                      f"drop it with {drop}")  # fmt: skip
        return
    from .connection import broker_not_reached, broker_unreachable, checking_broker, workers_not_asked
    from .queues import (
        CONSUMER_CHECK_S,
        QUEUED_CHECK_S,
        HeldMessages,
        OrphanWatch,
        queued_ahead,
        queued_message,
        unserved_message,
        unserved_queues,
    )

    run_id = _run_id(run_id)
    store, lane = run_store(broker, run_id, queues=True)
    view = StatusView(store.meta(run_id), broker=broker)
    embedded = lane is not None
    console = TerminalConsole()
    checked = [-math.inf]  # when the queues' consumers were last asked for (it takes a second): never, so due at once
    queued_checked = [-math.inf]  # when the queues ahead of the run were last read
    # a cluster's broker on another server than the store (RAGSCORE_STORE_URL set apart), else None
    apart_broker = broker_url(broker) if store.broker_apart and not embedded else None
    # apart, the broker is asked by a client that says it gone at once (one with the store's Redis fails the command)
    checks = checking_broker(store, apart_broker) if apart_broker else store
    orphan_watch = OrphanWatch(checks, run_id)  # an orphan is said once two consecutive checks call it one

    def refresh():
        view.meta = store.meta(run_id)
        view.add(sample(store, run_id, time.time()))
        ended = view.meta.get("state") in RunState.DONE
        view.summary = store.summary(run_id) if ended and store.summary_is_current(run_id) else None
        queued_due = not ended and time.monotonic() - queued_checked[0] >= QUEUED_CHECK_S
        consumers_due = not ended and time.monotonic() - checked[0] > CONSUMER_CHECK_S
        # a watch's check of the held messages that confirms the orphans of its last, made at a later refresh
        follow_up = watch and not ended and not embedded and orphan_watch.follow_up_due()
        if ended or not (queued_due or consumers_due or follow_up):
            view.broker_note = "" if ended else view.broker_note
            return view.render(run_id)
        # a broker that does not answer is asked again at the next check, not at each refresh
        stamp(queued_due, consumers_due)
        # the broker's notes are extras: a broker down apart from the store (RAGSCORE_STORE_URL) is said in a line
        # under the store's progress (its client retried ~20 s, then failed the whole command), in place of the last
        # check's notes, which are old
        view.broker_note = (broker_unreachable(apart_broker) or "") if apart_broker else ""
        if view.broker_note:
            # timed from the ping's end: a host that does not answer takes its whole timeout (5 s), longer than a
            # check's interval, which would have the next refresh ping it again
            stamp(queued_due, consumers_due)
            forget_broker_notes()
            return view.render(run_id)
        try:
            # a user that may not ask the workers is told what it lacks (cancel refuses it), not kombu's traceback
            if consumers_due and (refused := workers_not_asked(checks.broker, broker_url(broker))):
                view.broker_note = refused
                forget_broker_notes()
                return view.render(run_id)
            if queued_due:
                view.set_queued(queued_message(queued_ahead(checks, run_id)))
            if consumers_due:
                # an embedded run whose process runs has its own workers (still booting, maybe): none is missing
                served = lane is not None and run_process_alive(store.r, view.meta)
                unserved = {} if served else unserved_queues(checks, run_id)
                view.set_unserved({q: unserved_message(q, n, embedded, broker) for q, n in unserved.items()})
            if consumers_due or follow_up:
                # an embedded run's own process re-sends what its dead workers held; once it is gone, the unserved
                # queues say how to go on (no worker of its lane would ever take the held messages back)
                found = HeldMessages(held=0, orphans=[]) if embedded else held_check()
                # a watch's view keeps what it showed until its follow-up (a check put off: None)
                if found is not None and not (watch and found.unconfirmed):
                    view.set_orphans(run_id, found.orphans, get_settings().visibility_timeout_s, found.finishing)
        except (redis.ConnectionError, redis.TimeoutError, OperationalError) as exc:  # it went down since the ping
            if isinstance(exc.__cause__, redis.exceptions.NoPermissionError):  # kombu's: a broadcast channel refused
                view.broker_note = workers_not_asked(checks.broker, broker_url(broker), exc.__cause__)
            elif not apart_broker:  # the store's Redis: the command fails
                raise
            else:
                view.broker_note = broker_not_reached(apart_broker, exc)
                stamp(queued_due, consumers_due)  # timed from the failure's end, as a failed ping is
            forget_broker_notes()
        except redis.exceptions.NoPermissionError as exc:  # its user may not use Celery's remote control replies
            view.broker_note = workers_not_asked(checks.broker, broker_url(broker), exc)
            forget_broker_notes()
        return view.render(run_id)

    def held_check() -> HeldMessages | None:
        """A check of the held messages: a one-off status confirms its orphans at once, saying why it waits for the
        second check; a watched one is never held for it (:meth:`~.queues.OrphanWatch.check_when_due`: None, put off
        to a later refresh)."""
        if watch:
            return orphan_watch.check_when_due()
        return orphan_watch.confirmed(lambda unconfirmed: _confirming_orphans(unconfirmed, orphan_watch.confirm_s))

    def stamp(queued: bool, consumers: bool) -> None:
        """The checks done now: the next ones are due an interval from now."""
        if queued:
            queued_checked[0] = time.monotonic()
        if consumers:
            checked[0] = time.monotonic()

    def forget_broker_notes() -> None:
        view.set_queued("")
        view.set_unserved({})
        view.set_orphans(run_id, [], view.visibility_s)

    if not watch:
        console.print(refresh())
        return
    if not console.is_terminal:  # logs and CI: one table per refresh
        while True:
            console.print(refresh())
            if view.meta.get("state") in RunState.DONE:
                return
            time.sleep(interval)
    from rich.live import Live

    with Live(refresh(), console=console, auto_refresh=False) as live:
        while view.meta.get("state") not in RunState.DONE:
            time.sleep(interval)
            live.update(refresh(), refresh=True)


def _confirming_orphans(unconfirmed: int, confirm_s: float) -> None:
    """What a one-off ``ragscore status`` says before it checks again whether workers that are gone hold the run's
    messages (:meth:`~orchestrator.queues.OrphanWatch.confirmed`, ``confirm_s`` later): a wait, not a hang."""
    held = counted(unconfirmed, "message")
    err.print(f"{held} may be held by a worker that is gone: checking again in {confirm_s:.10g} s to be sure",
              soft_wrap=True)  # fmt: skip


@app.command()
def results(
    run_id: Annotated[str, typer.Argument(help="Run id, or the run's --out DIR")],
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="Directory to write the reports into (default: the run's DIR, when given)"),
    ] = None,
    broker: BrokerOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table (what makes it exit 1 is still said)")] = False,
) -> None:
    """Write the reports of a finished run

    Exit codes as `ragscore run`: 1 for a cancelled run or a metric with no score. A cancelled run's summary is
    waited for (2 minutes at most), and written here when nothing else would write it (a worker killed holding some
    of the run, or no worker left)."""
    from .reports import print_summary
    from .reports.files import refuse_files_of_others
    from .runner import recorded_run, write_results

    ref = run_id
    if out is not None:
        refuse_files_of_others(out)  # the user's own summary.json, items.csv: no run wrote them
    else:
        if not Path(ref).is_dir():
            _run_id(ref)  # a path that is no directory says so
            raise ConfigError(
                f"--out DIR is needed with a run id ({ref!r}: no directory of that name here); given a "
                "run's DIR, its reports go there"
            )
        out = Path(ref)
    run_id = _run_id(ref)
    _refuse_another_runs_dir(out, run_id)  # as `ragscore report A --out B`
    try:  # it writes the store: where the reports are, a cancelled run's summary
        store, lane = run_store(broker, run_id, writes=True)
    except ConfigError as exc:  # no store has it: a run DIR copied from elsewhere has its reports without one
        if not (Path(ref) / "summary.json").is_file():
            raise
        # `ragscore report` writes one format a call (html by default), where a run writes them all
        raise ConfigError(f"{exc}. {ref} holds a finished run's results: {backticked(report_command(ref, out))} "
                          "writes its HTML report from them, with no store, and with --format md, csv or json each "
                          "of its other reports") from exc  # fmt: skip
    if _cancelled_without_summary(store, run_id):
        _summarize_cancelled(store, lane, run_id, broker, out)
        _await_summary(store, run_id, RESULTS_WAIT_S)
        # still none: says why, and what to do
        store.finished_summary(run_id, current=True, **summary_commands(run_id, out, broker))
    # its items leave an embedded store soon after, as a run's into its own --out DIR do (a cluster's keeps them)
    summary = write_results(store, run_id, out, broker, release=is_embedded(broker), keep_gates=True)
    if not quiet:  # another DIR than the run's has no run.json for a `run --resume` to find it by
        recorded = recorded_run(out) or {}
        print_summary(summary, out=out if recorded.get("run_id") == summary.run_id else None, broker=broker)
        err.print(f"Reports written to {out}/")
    _exit_if_incomplete(summary, resume_command(out, summary.run_id, broker))


def _refuse_another_runs_dir(out: Path, run_id: str) -> None:
    """ConfigError when ``out`` is the DIR of another run (its run.json or summary.json names it): its reports
    would be replaced while its run.json still named it."""
    try:
        named = _run_id(str(out))
    except ConfigError:  # not files ragscore wrote: left to the write
        return
    if named not in (str(out), run_id):
        raise ConfigError(f"{out} holds run {named} (its run.json or summary.json names it): write the reports of run "
                          f"{run_id} to another --out")  # fmt: skip


#: Seconds ``ragscore results`` waits for the summary of a cancelled run (its workers skipping its queued tasks).
RESULTS_WAIT_S = 120.0


def _cancelled_without_summary(store, run_id: str) -> bool:
    """The run is cancelled, its summary not written yet, and no aggregation of it failed (that error is final)."""
    from ragscore_workers.store import RunState

    meta = store.r.hmget(store.key(run_id, "meta"), ["state", "error"])
    return meta[0] == RunState.CANCELLED and not meta[1] and not store.summary_is_current(run_id)


def _await_summary(store, run_id: str, limit_s: float) -> None:
    """Wait up to ``limit_s`` for the cancelled run's current summary, saying so once; it ends early when the
    aggregation failed or the run was resumed. The caller's read of the summary then says why there is none."""
    deadline, said = time.monotonic() + limit_s, False
    while _cancelled_without_summary(store, run_id) and time.monotonic() < deadline:
        if not said:
            err.print(f"run {run_id}: cancelled; waiting up to {limit_s:.0f} s for the summary of what it scored",
                      soft_wrap=True)  # fmt: skip
            said = True
        time.sleep(0.5)


@app.command("cancel")
def cancel_cmd(
    run_id: Annotated[str, typer.Argument(help="Run id, or the run's --out DIR")],
    broker: BrokerOpt = None,
) -> None:
    """Cancel a run; its summary covers what was scored

    Workers skip its remaining tasks."""
    from .embedded_redis import run_process_alive
    from .runner import cancel

    run_id = _run_id(run_id)
    # an unknown run raises a clear error; a broker URL whose password or database is wrong, before the cancel
    store, lane = run_store(broker, run_id, queues=True, writes=True)
    was = store.state(run_id)
    cancel(store, run_id)
    state = store.state(run_id)
    if state == "cancelled":
        again = " (it already was)" if was == "cancelled" else ""
        watched = lane is not None and run_process_alive(store.r, store.meta(run_id))  # its process waits on it
        if watched:
            then = (
                "the workers skip its queued tasks, then its `ragscore run` writes the reports of what it scored into "
                "its --out DIR"
            )
        else:
            then = f"{backticked(results_command(run_id, broker=broker))} writes the reports of what it scored"
            if lane is None:  # its workers skip them, or none listens (said next); an embedded run's went with it
                then = f"its queued tasks are not scored, then {then}"
        err.print(f"run {run_id}: cancelled{again}; {then}", soft_wrap=True)
        _summarize_cancelled(store, lane, run_id, broker)
    else:
        err.print(f"run {run_id}: {state} (it had ended; nothing to cancel)")


def held_by_gone_workers(orphans: list[Orphan]) -> str:
    """What a cancelled run's summary leaves out: the items ``orphans`` (held by workers that are gone) hold."""
    items = sum(o.items for o in orphans)
    return (
        f"{counted(items, 'item')} of it ({counted(len(orphans), 'message')}) {agree(items, 'is', 'are')} held by a "
        "worker that is gone (killed, or its host lost), which Redis hands back only after the visibility timeout: "
        f"its summary is written without {agree(items, 'it', 'them')}, counted as stopped, once its tasks in flight "
        "end (a minute at most)"
    )


def _summarize_cancelled(store, lane: int | None, run_id: str, broker: str | None, out: Path | None = None) -> None:
    """Write the summary of cancelled run ``run_id`` where no worker would: its queued messages wait where no
    worker listens, or a worker that is gone holds some, or (an embedded run whose process is gone) none of it is
    queued or held by a live worker any more; its embedded process, while alive, does it itself. A cluster's
    broker (``broker``, else RAGSCORE_BROKER_URL) that does not answer, apart from the store (or, on its server,
    refuses its password or lacks its database: a cancel's connect said so before it cancelled), or whose user may
    not ask the workers (Celery's remote control replies; `results` checked the store's user for the store alone),
    is BrokerError or ConfigError naming it and saying the run is cancelled all the same (and the command that writes
    its reports, into ``out`` where it is known); so is a Redis lost after that probe (a restart), while the summary
    was written."""
    import redis
    from kombu.exceptions import OperationalError

    from .connection import broker_tried_once, reach_broker
    from .embedded_redis import run_process_alive
    from .reports.live import resume_hint
    from .runner import summarize_cancelled

    def said(unserved: dict[str, int]) -> None:
        queues = ", ".join(f"{q!r} ({counted(n, 'message')} waiting)" for q, n in unserved.items())
        err.print(f"no worker consumes {queues}: its summary is written without them once its tasks in flight end "
                  "(a minute at most)", soft_wrap=True)  # fmt: skip

    def held(orphans: list[Orphan]) -> None:
        err.print(held_by_gone_workers(orphans), soft_wrap=True)

    def unsure(queues: list[str]) -> None:
        names = ", ".join(repr(q) for q in queues)
        err.print(f"no worker answered for {names} (busy, or killed a moment ago): waiting for its workers to write "
                  "the summary, or for the queue to count as unserved to write it here (a minute at most)",
                  soft_wrap=True)  # fmt: skip

    if lane is None:
        not_yet = (
            f"Run {run_id} is cancelled (the run store says so: its workers skip its tasks), but the summary of what "
            "it scored is not written yet: once the broker's Redis can be used, "
            f"{backticked(results_command(run_id, out, broker))} writes it with the reports"
        )
        try:  # its queues and workers are the broker's: probed first, not retried ~20 s by the store's client
            # the store's user too: `results` checked it for the store alone, not for asking the workers
            reach_broker(url := broker_url(broker))
            if store.broker is not store.r:  # another server, or another database or user than the store's
                store = broker_tried_once(store, url)  # nor read, once probed
            summarize_cancelled(store, run_id, on_unserved=said, on_orphaned=held, on_unsure=unsure)
        except (BrokerError, ConfigError) as exc:  # down, a wrong password; a database it lacks, an unusable URL
            raise type(exc)(f"{str(exc).rstrip('.')}. {not_yet}") from exc
        except (redis.ConnectionError, redis.TimeoutError, OperationalError) as exc:  # lost since (a restart)
            raise BrokerError(f"Redis was lost ({type(exc).__name__}: {str(exc).rstrip('.')}). {not_yet}") from exc
    elif not run_process_alive(store.r, store.meta(run_id)):
        # its process is gone, and with it every worker of its lane: its summary is written here. Its queues have no
        # worker, but none was expected (its 'control' queue was named, which the user never sees): said as a whole
        def gone(unserved: dict[str, int]) -> None:
            err.print(f"run {run_id}: its `ragscore run` is gone (interrupted), and the workers it started with it: "
                      "the summary of what it scored is written here once their last tasks end (a minute at most); "
                      f"what it did not score counts as stopped, which {resume_hint(run_id)} scores",
                      soft_wrap=True)  # fmt: skip

        summarize_cancelled(store, run_id, on_unserved=gone, here=True, on_orphaned=held)
    # else its process (its `ragscore run`, waiting on it) sees the cancel and writes the summary


def _celery_loglevel(value: str) -> str:
    """``--loglevel`` upper-cased, as Celery's ``-l`` takes it; a level Celery has not is refused, naming its own."""
    if value.upper() not in CELERY_LOGLEVELS:
        raise typer.BadParameter(f"{value!r} is no log level; choose from {', '.join(CELERY_LOGLEVELS).lower()}")
    return value.upper()


@app.command()
def worker(
    queues: Annotated[str, typer.Option("--queues", "-Q", help="Comma-separated: cpu,embed,judge,code,target")],
    broker: WorkerBrokerOpt = None,
    concurrency: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--concurrency", "-c", min=1, help="Pool size per queue (default: the queue's own, see README)"),
    ] = None,
    stop_timeout: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            "--stop-timeout",
            help="On SIGTERM or Ctrl-C, seconds to let running tasks finish before killing them"
            " (default: the longest hard time limit of these queues, plus 30 s)",
        ),
    ] = None,
    broker_timeout: Annotated[
        float,
        typer.Option(
            "--broker-timeout",
            min=0,
            help="Seconds the broker may stay unreachable (or refuse its user) before the workers stop and it exits 1 "
            "(0: retry for ever)",
        ),
    ] = DEFAULT_BROKER_TIMEOUT_S,
    loglevel: Annotated[
        str,
        typer.Option(
            "--loglevel",
            "-l",
            help="Celery's log level for the workers: debug, info, warning, error or critical",
            callback=_celery_loglevel,
        ),
    ] = "warning",
    name: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--name",
            "-n",
            help="Node name of each queue's worker, Celery's -n: %h (host name), %n (its first label), %d (its"
            " domain), {queue}, {n} (the first number free); refused when a live worker has it"
            " (default: {queue}-{n}@%h)",
        ),
    ] = None,
) -> None:
    """Start Celery workers for these queues and supervise them

    Each worker runs with its queue's pool defaults, under a stable node name (cpu-1@HOST, the first number no live
    worker has): restarted, it is the same worker to Flower and Prometheus. Their log lines go to this command's
    stderr (the journal, the container's log), each prefixed with its queue, and to a file per queue and process under
    RAGSCORE_HOME/logs (worker-QUEUE-HOST-PID.log, named at the start).

    SIGTERM or Ctrl-C stops them warmly: no new tasks, running ones finish (up to --stop-timeout); a
    second one kills them at once (their tasks go back to the queue after the visibility timeout).
    """
    from ragscore_workers.app import CONTROL_QUEUE, QUEUE_LIMITS

    from .workers import POOL_DEFAULTS, LocalWorkers, host_gaps, node_names

    settings = get_settings()
    settings.check_visibility_timeout()
    url = cluster_url(broker)
    if not url:
        raise ConfigError("worker needs a broker: pass --broker or set RAGSCORE_BROKER_URL")
    names = list(dict.fromkeys(q.strip() for q in queues.split(",") if q.strip()))  # one worker per queue
    unknown = [q for q in names if q not in POOL_DEFAULTS]
    if not names or unknown:
        said = ", ".join(_unknown_queue(q, POOL_DEFAULTS, CONTROL_QUEUE) for q in unknown)
        raise ConfigError(f"--queues {queues!r}: {'unknown ' + said if unknown else 'none'}"
                          f"; choose from {', '.join(POOL_DEFAULTS)}")  # fmt: skip
    from .connection import worker_eviction_warnings

    answered = _check_broker_for_workers(url, names, settings)
    store = _check_store_for_workers(url, settings, broker=answered)
    backend = _check_backend_for_workers(url, settings)
    _warn_of_eviction(worker_eviction_warnings(url, settings, broker=answered, store=store, backend=backend))
    if stop_timeout is None:
        stop_timeout = max(QUEUE_LIMITS[q][1] for q in [*names, CONTROL_QUEUE] if q in QUEUE_LIMITS) + 30.0
    for gap in host_gaps(names):
        print_warning(gap)
    live = _live_workers(url, settings) if answered else None
    answered = live is not None  # it may have gone down since its check
    with node_names(names, name, live or (), url) as nodes:
        _supervise_workers(
            LocalWorkers(url, names, settings.home / "logs", {q: concurrency for q in names} if concurrency else None,
                         loglevel=loglevel, echo=sys.stderr, names=nodes),
            answered, stop_timeout, broker_timeout,
        )  # fmt: skip


def _live_workers(url: str, settings: Settings) -> set[str] | None:
    """The node names of the live workers of the broker at ``url`` (:func:`.workers.live_node_names`); None, with a
    warning as :func:`_check_broker_for_workers` gives, where the broker went down since it answered that check."""
    from kombu.exceptions import OperationalError

    from ragscore_workers.app import configure

    from .connection import STORE_READ_TIMEOUT_S
    from .workers import live_node_names

    configure(url, settings.result_backend, send_timeout_s=STORE_READ_TIMEOUT_S)
    try:
        return live_node_names()
    except OperationalError as exc:
        print_warning(f"cannot reach the broker at {redact_url(url)} to ask its live workers' names ({exc}); the "
                      "workers are named without them and keep retrying every 10 s until it answers")  # fmt: skip
        return None


def _supervise_workers(workers: LocalWorkers, answered: bool, stop_timeout: float, broker_timeout: float) -> None:
    """Start ``workers``, say so, and restart any that dies until SIGTERM, SIGHUP or Ctrl-C, or until the broker was
    unreachable for ``broker_timeout`` seconds (0: never; an error); then stop them warmly (up to ``stop_timeout``), a
    second signal killing them at once; once they stopped, one more is ignored (the stop it asks for is done).
    ``answered``: whether the broker answered."""
    from .workers import first_stop_signal, stop_again, stop_signals_as_interrupt

    try:
        with stop_signals_as_interrupt(then_ignored=True):
            try:
                workers.start()
                listed = ", ".join(workers.queues)
                on = f"the broker {redact_url(workers.broker_url)}"
                state = f"up for {listed} on {on}" if answered else f"started for {listed}, waiting for {on}"
                named = ", ".join(workers.names.values())
                logs = ", ".join(str(path) for path in workers.logs.values())
                err.print(f"workers {state}; logging to {logs}; named {named}; Ctrl-C (or SIGTERM) stops them, their "
                          "running tasks finishing first", soft_wrap=True)  # fmt: skip
                workers.supervise(broker_timeout)
            except KeyboardInterrupt:
                with suppress(KeyboardInterrupt):  # a second signal while it says so: stop() below counts it
                    workers.say(  # never waited on: a stderr nobody reads holds up no stop
                        f"stopping: running tasks finish first (up to {stop_timeout:.0f} s); "
                        f"{stop_again(first_stop_signal())} to stop at once"
                    )
            finally:
                workers.stop(timeout=stop_timeout)  # a second signal, whenever it came, kills at once
    except Exception as exc:  # its workers stopped (one kept dying): its error is its last line, as main() says it
        if (said := _error_said(exc)) is None:
            raise
        _say_last(*said)
        raise typer.Exit(said[1]) from None
    _say_last("workers stopped")  # from here on, a stop signal is ignored: this process only exits


def _say_last(text: str, code: int = 0) -> None:
    """Say ``text`` on stderr, this process's last line, waiting up to :data:`LAST_LINE_S` for it: a stderr that takes
    nothing by then (a full pipe nobody reads) ends the process at once with exit ``code``, the one it would have
    ended with (its exit flushes stderr, which would wait on it for ever, a stop signal ignored by then)."""
    writer = threading.Thread(target=err.print, args=(text,), kwargs={"soft_wrap": True}, daemon=True)
    writer.start()
    writer.join(LAST_LINE_S)
    if writer.is_alive():
        os._exit(code)


def _warn_of_eviction(said: Iterable[str | None]) -> None:
    """Warn of each Redis that may evict a run's work (:func:`.connection.eviction_warnings`; None: one that does
    not), as ``ragscore run`` does (:meth:`.caller.Caller.warn`): :func:`.terminal.print_warning`."""
    for text in filter(None, said):
        print_warning(text)


def _unknown_queue(name: str, known: Iterable[str], control: str) -> str:
    """An unknown ``--queues`` name, quoted, with what it may have meant: a typo's queue, or the control queue
    that every worker serves already."""
    if name == control:
        return f"{name!r} (every worker serves the {control} queue already)"
    hint = did_you_mean(close_names(name, known))
    return f"{name!r} ({hint})" if hint else repr(name)


def _check_broker_for_workers(url: str, queues: list[str], settings: Settings) -> bool:
    """Whether the broker answers. A wrong password stops ``ragscore worker`` (exit 1: it would never connect), and
    so does a database Redis refuses, or an ACL user that may not use ``queues``, nor Celery's remote control
    replies (it pings its workers) and its workers' binding to the broadcasts (:data:`.acl.WORKER_CONTROL`), nor
    Celery's results where they are kept with the broker (:func:`.connection.broker_roles`), nor the run store's
    writes where it is the broker's database and user (RAGSCORE_STORE_URL unset: its workers write every result
    there), as :func:`.connection.connect` checks a run's (ConfigError, exit 2: the URL or the user is wrong); an
    unreachable broker, or one whose host name does not resolve (yet), only warns, since workers may start before
    their Redis and keep retrying."""
    from ragscore_workers.acl import WORKER_STORE, broker_role
    from ragscore_workers.store import probe_redis

    from .connection import broker_roles, store_apart

    roles = broker_roles(url, settings, broker_role(queues))
    problem = probe_redis(url, roles=roles if store_apart(url, settings) else (*roles, WORKER_STORE))
    if problem:
        print_warning(f"cannot reach the broker at {redact_url(url)} ({problem}); the workers keep retrying "
                      "every 10 s until it answers")  # fmt: skip
    return problem is None


def _check_store_for_workers(url: str, settings: Settings, *, broker: bool) -> bool:
    """Where RAGSCORE_STORE_URL is another database or user than the broker's at ``url``, its user is checked for the
    run store's writes of a worker (:data:`.acl.WORKER_STORE`: every result, and the keys saying it runs and stops):
    a wrong password stops ``ragscore worker`` (exit 1), as the broker's does, and a user that may not write there too
    (ConfigError, exit 2), where its workers started and failed every task; a store that does not answer only warns,
    as the broker does (the broker's database and user is checked in the broker's probe). Whether it answered
    (``broker``, whether the broker answered, where the store is the broker's database and user)."""
    from ragscore_workers.acl import WORKER_STORE
    from ragscore_workers.store import probe_redis

    from .connection import STORE_REDIS, store_apart

    if not (store := store_apart(url, settings)):
        return broker
    if problem := probe_redis(store, STORE_REDIS, (WORKER_STORE,)):
        print_warning(f"cannot reach {STORE_REDIS} at {redact_url(store)} ({problem}); the workers write every "
                      "result there")  # fmt: skip
        return False
    return True


def _check_backend_for_workers(url: str, settings: Settings) -> bool:
    """Where RAGSCORE_RESULT_BACKEND is another database or user than the broker's at ``url``, its user is checked
    for the workers' results and chord counters (:data:`.acl.BACKEND`): one that may not write them stops ``ragscore
    worker`` at once (ConfigError, exit 2), as a wrong password does (exit 1), where its workers started and failed
    to store every task's result; a backend that does not answer only warns, as the broker does. Whether it answered
    (False where it did not)."""
    from ragscore_workers.acl import BACKEND
    from ragscore_workers.store import probe_redis

    from .connection import BACKEND_REDIS, backend_apart

    if (backend := backend_apart(url, settings)) and (problem := probe_redis(backend, BACKEND_REDIS, (BACKEND,))):
        print_warning(f"cannot reach {BACKEND_REDIS} at {redact_url(backend)} ({problem}); the workers store "
                      "their tasks' results there")  # fmt: skip
        return False
    return True


@app.command("consensus")
def consensus_cmd(
    run: Annotated[str, typer.Argument(help="The --out DIR of a run (or a run id in the store)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset file to write (JSONL)")],
    dataset: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--dataset", help="The run's dataset (default: the path in the DIR's run_info.json, else in the run store)"
        ),
    ] = None,
    suite: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--suite",
            "-s",
            help="The run's suite, for points rows do not carry (default: from run_info.json, else the store)",
        ),
    ] = None,
    broker: BrokerOpt = None,
) -> None:
    """Candidate golden answers from a checks run's answers

    They are made of the sentences of the answers that passed the heaviest points (a run scored with checks,
    several systems answering each question)."""
    from contextlib import ExitStack

    from .connection import connect
    from .consensus import run_source, write_consensus
    from .embedded_redis import EmbeddedRedis

    settings = get_settings()
    with ExitStack() as stack:  # embedded: (re)start the private Redis from its data only if the store is needed

        def store():
            return connect(cluster_url(broker) or stack.enter_context(EmbeddedRedis(settings.home)), settings)

        source = run_source(run, dataset=dataset, suite=suite, store=store)
        questions, with_reference = write_consensus(out, source)
    err.print(f"{questions} questions, {with_reference} with a consensus reference, written to {out}")


@app.command("metrics")
def list_metrics(
    name: Annotated[
        Optional[str],  # noqa: UP045
        typer.Argument(help="One metric: show the row fields it reads and its params"),
    ] = None,
) -> None:
    """List the metrics, or one metric's row fields and params

    Each registered metric with its queue and outputs (the names gates and reports use)."""
    from rich.markup import escape

    from ragscore_workers.metrics.registry import all_metrics

    if name is not None:
        out = TerminalConsole(markup=False, piped_width=PIPED_PROSE_WIDTH)
        mdef = _metric_of(name, out)
        out.print(f"{mdef.name} (queue: {mdef.queue_label}): {mdef.description}")
        for line in _row_fields(mdef):
            out.print(line)
        table = Table()
        table.add_column("param", no_wrap=True)
        table.add_column("type", overflow="fold")
        table.add_column("default", overflow="fold")
        for field, info in mdef.params_model.model_fields.items():
            table.add_row(info.alias or field, Text(_type_name(info.annotation)), Text(_default_text(info)))
        out.print(table if mdef.params_model.model_fields else "no params")
        return
    table = Table()
    for col in ("metric", "outputs (default params)"):  # the names suites and gates are written with: never cut
        table.add_column(col, no_wrap=True)
    table.add_column("queue", overflow="fold", ratio=1)
    table.add_column("description", overflow="fold", ratio=3)
    for metric_name, mdef in sorted(all_metrics().items()):
        try:
            outputs = "\n".join(mdef.outputs(mdef.params_model()))  # one a line
        except ValueError:  # params without defaults (pydantic's ValidationError is a ValueError)
            outputs = "(depends on params)"
        table.add_row(metric_name, escape(outputs), mdef.queue_label, escape(mdef.description))
    console = TerminalConsole(piped_width=PIPED_PROSE_WIDTH)  # piped: 100 columns, as `ragscore metrics NAME`
    # wider than the console (measured at most its width): the queues and descriptions share what the names leave
    table.expand = console.measure(table).maximum >= console.width
    console.print(table)


def _metric_of(name: str, out: TerminalConsole) -> MetricDef:
    """The metric ``ragscore metrics NAME`` shows: NAME's, or the one metric giving an output so named (``mrr``: said
    first); else the UnknownMetricError with "did you mean"."""
    from ragscore_workers.errors import UnknownMetricError
    from ragscore_workers.metrics.registry import get_metric

    try:
        return get_metric(name)
    except UnknownMetricError as exc:
        if len(exc.owners) != 1:
            raise
        owner = exc.owners[0]
        out.print(f"{name!r} is an output of {owner} (a suite lists {owner}):")
        return get_metric(owner)


def _row_fields(mdef: Any) -> list[str]:
    """What a metric reads, as its registration declares it: the row fields it ``needs`` (or ``needs_one_of``) and
    those it ``scores_without``; a derived metric the outputs (``inputs``) of the suite's other metrics."""
    lines = []
    if mdef.needs:
        lines.append(f"row fields it needs: {', '.join(mdef.needs)} (a row lacking one is not scored)")
    if mdef.needs_one_of:
        lines.append(f"row fields it needs one of: {', '.join(mdef.needs_one_of)} (a row with none of them is not "
                     "scored)")  # fmt: skip
    if mdef.scores_without:
        lines.append(f"row fields it scores without: {', '.join(mdef.scores_without)} (a row lacking one is scored "
                     "as having none)")  # fmt: skip
    if mdef.inputs:
        lines.append(f"no row field: it reads the outputs {', '.join(mdef.inputs)} of the same suite's metrics")
    return lines or ["row fields it needs: none declared by the metric (see its docs)"]


def _default_text(info: Any) -> str:
    """A param's default as a suite writes it: JSON (a regex shows as ``"\\[\\d+\\]"``, pasteable into YAML or
    JSON), not Python's repr; ``(required)`` when there is none, and what a run uses in its place when it is unset
    (None: ``(the suite's sandbox.timeout_s)``, not ``null``)."""
    from ragscore_workers.metrics.registry import UNSET

    if info.is_required():
        return "(required)"
    default = info.get_default(call_default_factory=True)
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if default is None and UNSET in extra:
        return f"({extra[UNSET]})"
    try:
        return json.dumps(default, ensure_ascii=False)
    except TypeError:
        return repr(default)


def _type_name(annotation: object) -> str:
    """``int | None`` rather than ``typing.Optional[int]``; class names without their module; pydantic's
    constraints (``Annotated[float, FieldInfo(...)]``) left out: ``dict[str, tuple[float, float]]``."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if annotation is type(None):
        return "None"
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


ReportFormatOpt = Annotated[str, typer.Option("--format", "-f", help="html, md, csv, json or nlp-project")]


@app.command("report")
def report_cmd(
    run: Annotated[str, typer.Argument(help="Run id (in the store) or an output DIR (summary.json + items.jsonl)")],
    fmt: ReportFormatOpt = "html",
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="Directory to write to (default: the DIR given, else ragscore-out)"),
    ] = None,
    broker: BrokerOpt = None,
    split: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--split", help="nlp-project: the split of {split}_evaluation.json (default: from the dataset)"),
    ] = None,
    name: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--name", help="nlp-project: the key of items without a system (default: the predictions file's)"),
    ] = None,
) -> None:
    """Write one report of a finished run, in one format

    It writes report.html (html), report.md (md), items.csv (csv), summary.json,
    items.jsonl, failed_rows.jsonl and run_info.json (json; into the run's own DIR only summary.json) or
    {split}_evaluation.json (nlp-project)."""
    from .gates import gates_of_run
    from .reports import FORMATS, open_run, write_reports
    from .reports.files import refuse_files_of_others, write_recorded

    data = open_run(run, lambda: _store(broker), broker)
    out_dir = out or data.directory or Path("ragscore-out")
    _refuse_another_runs_dir(out_dir, data.summary.run_id)  # its reports, beside a run.json naming it
    if data.directory is None:  # read from the store, which keeps no gates: those of its last check in out_dir kept
        data = dataclasses.replace(data, gates=gates_of_run(out_dir, data.summary.run_id))
    if fmt == "nlp-project":
        from .reports.nlp_project import console_summary, evaluation_json, gold_doc_ids, left_out, split_of, system_of

        evaluation = evaluation_json(data.items(), gold_doc_ids(data.info), name or system_of(data.info))
        split = split or split_of(data.info)
        path, text = out_dir / f"{split}_evaluation.json", json.dumps(evaluation, indent=2, ensure_ascii=False) + "\n"
        write_recorded(path, text)  # never over the user's own file of that name (the framework's)
        _say(shown(console_summary(evaluation, split)))
        notes = left_out(data.summary.metrics)
        if unread := data.summary.failed_rows:  # the framework counts out of every question; these are not in any
            notes.append(
                f"{counted(unread, 'row')} of the dataset could not be read: in none of these totals "
                "(see failed_rows.jsonl)"
            )
        for note in notes:
            err.print(Text.assemble(("Note:", "yellow"), f" {note}"))
        err.print(f"wrote {path}")
        return
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose from {', '.join([*FORMATS, 'nlp-project'])}")
    # the user's own items.csv, as `run --out` refuses it; under any report name, not the format's only: a json report
    # there (its summary.json) would make the DIR a run's, whose items.csv a later csv report replaces
    refuse_files_of_others(out_dir)
    for path in write_reports(data, out_dir, [fmt]):
        err.print(f"wrote {path}")


@app.command("compare")
def compare_cmd(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="Run ids or output DIRs (the first is the baseline; runs of several systems: each system against its "
            "namesake in the first); one run with several systems works"
        ),
    ],
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="Directory for compare.html and .md (default: ragscore-compare/RUN-vs-RUN)"),
    ] = None,
    broker: BrokerOpt = None,
    baseline: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--baseline",
            help="The one system every other is compared with: as the table names it, or a bare system name (the "
            "first run's) (default: the first; runs of several systems: each system's namesake in the first run)",
        ),
    ] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", min=0, help="Seed of bootstrap and permutations")] = None,  # noqa: UP045
    fail_on_worse: Annotated[
        bool,
        typer.Option(
            "--fail-on-worse",
            help="Gate (exit 3): no system significantly worse than its baseline on any output (95% CI of the "
            "paired difference wholly on the worse side and p < 0.05); outputs of under 6 pairs fail",
        ),
    ] = False,
    worse_margin: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            "--worse-margin",
            min=0.0,
            help="With --fail-on-worse: a non-inferiority margin X: fail unless the 95% CI shows each system at "
            "most X worse (its worse end above -X)",
        ),
    ] = None,
) -> None:
    """Compare systems on their shared questions

    Means, paired differences with 95% CI, p and a verdict (better, worse, no clear difference), wins;
    --fail-on-worse: a CI gate on them."""
    from .reports import open_run
    from .reports.compare import (
        alone_text,
        compare,
        errors_text,
        mismatch_text,
        one_run_text,
        unchecked_text,
        unpaired_text,
        unscored_text,
        worse_failures,
    )
    from .reports.compare_view import print_comparison, print_worse, render_compare_html, render_compare_markdown
    from .reports.files import COMPARE_NAMES, compare_dir, refuse_files_of_others, replaced_comparison

    if worse_margin is not None and not fail_on_worse:
        raise ConfigError("--worse-margin is the margin of --fail-on-worse: give both")
    stores: list = []

    def store():
        if not stores:
            stores.append(_store(broker))
        return stores[0]

    data = [open_run(ref, store, broker) for ref in runs]
    out = out or compare_dir(data, baseline, seed)  # a folder of its own: another comparison's is kept
    make_out_dir(out)  # before the work: --out naming a file is said at once
    refuse_files_of_others(out, names=COMPARE_NAMES)  # the user's own compare.md, as `report --out` refuses it
    try:
        # only seed (an int), never points
        result = compare(data, baseline=baseline, **({"seed": seed} if seed is not None else {}))  # type: ignore[arg-type]
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    markdown = render_compare_markdown(result)
    if (replaced := replaced_comparison(out, markdown)) is not None:
        print_warning(f"{out} holds another comparison ({replaced}): this one replaces it (give --out another DIR to "
                      "keep both)")  # fmt: skip
    write_text_atomic(out / "compare.html", render_compare_html(result))
    write_text_atomic(out / "compare.md", markdown)
    print_comparison(result)
    against = result.baseline_text()
    if result.unpaired:
        print_warning(unpaired_text(result.unpaired, against))
    if result.mismatched:
        print_warning(mismatch_text(result.mismatched, against))
    if result.alone and result.by_system is not None:
        err.print(f"Note: {alone_text(result.alone)}", soft_wrap=True)
    if result.errors:
        print_warning(errors_text(result.errors))
    if unscored := unscored_text(result):
        err.print(f"Note: {unscored}", soft_wrap=True)
    if result.unchecked:
        err.print(f"Note: {unchecked_text(result.unchecked)}", soft_wrap=True)
    if one_run := one_run_text(data):
        err.print(f"Note: {one_run}", soft_wrap=True)
    where = out.resolve()  # ``--out cmp`` said as the folder it is, wherever the user reads it from
    err.print(f"wrote {where / 'compare.html'} and {where / 'compare.md'}", soft_wrap=True)
    if fail_on_worse:
        failures = worse_failures(result, worse_margin)
        print_worse(result, failures, worse_margin)
        if failures:
            raise typer.Exit(EXIT_GATE_FAILED)


@app.command("flower", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def flower_cmd(
    ctx: typer.Context,
    broker: FlowerBrokerOpt = None,
    port: Annotated[int, typer.Option("--port", help="Port to serve on")] = 5555,
    address: Annotated[str, typer.Option("--address", help="Address to bind (0.0.0.0: every interface)")] = "127.0.0.1",
    max_tasks: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--max-tasks", help="Tasks Flower keeps in memory (default: $FLOWER_MAX_TASKS, else 100000)"),
    ] = None,
    no_auth: Annotated[bool, typer.Option("--no-auth", help="No basic auth (127.0.0.1 only)")] = False,
) -> None:
    """Start Flower, the Celery web monitor, for ragscore

    Basic auth from FLOWER_BASIC_AUTH=user:password.

    Any other Flower option is passed on as written: --persistent=True --db=flower.db,
    --task_runtime_metric_buckets=1,5,30 ..."""
    from .reports.flower import DEFAULT_MAX_TASKS, exec_flower, flower_argv, flower_env, flower_location

    if max_tasks is None:
        from_env = os.environ.get("FLOWER_MAX_TASKS", "")
        if from_env and not from_env.isdigit():
            raise ConfigError(f"FLOWER_MAX_TASKS must be a whole number, got {from_env!r}")
        max_tasks = int(from_env or DEFAULT_MAX_TASKS)
    env = flower_env(os.environ, broker_url(broker, start_embedded=False), no_auth)
    argv = flower_argv(port, address, max_tasks, no_auth, extra=ctx.args)
    err.print(f"Flower on {flower_location(port, address, ctx.args)} (max {max_tasks} tasks kept)", soft_wrap=True)
    exec_flower(argv, env)


def _usage_errors() -> tuple[type[Exception], ...]:
    """click's ClickException, and the one of the click typer vendors (typer >= 0.2x raises its own)."""
    import click

    vendored = [c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"]
    return tuple({click.ClickException, *vendored})


def _error_said(exc: Exception) -> tuple[str, int] | None:
    """The ``Error: ...`` line a command ends with on ``exc``, and its exit code; None for an error not ours to say
    (a bug: its traceback)."""
    import redis
    from kombu.exceptions import OperationalError

    if isinstance(exc, (ConfigError, DatasetError)):
        return shown(f"Error: {exc}"), EXIT_BAD_INPUT
    if isinstance(exc, RagscoreError):
        return shown(f"Error: {exc}"), EXIT_RUN_ERROR
    if isinstance(exc, (redis.RedisError, OperationalError)):  # lost mid-command (a restart, a fail-over)
        return shown(f"Error: Redis: {type(exc).__name__}: {exc}"), EXIT_RUN_ERROR
    if isinstance(exc, OSError):  # a full disk or an unwritable --out while writing the reports
        return shown(f"Error: {said_os_error(exc)}"), EXIT_RUN_ERROR
    return None


def main() -> None:
    """Console entry point: clear messages and exit codes instead of tracebacks."""
    import click

    say_logged_warnings()
    try:
        code = app(standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort, typer.Abort):
        typer.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except _usage_errors() as exc:  # a bad option value, an unknown option: click's message, exit 2
        exc.show()  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
    except Exception as exc:
        if (said := _error_said(exc)) is None:  # a bug: its traceback
            raise
        typer.echo(said[0], err=True)
        sys.exit(said[1])
    if code == EXIT_INTERRUPTED:  # typer turns KeyboardInterrupt into exit code 130
        typer.echo("interrupted", err=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
