"""The summary table printed at the end of a run."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ragscore_workers.aggregate import OTHER_VALUES
from ragscore_workers.commands import backticked
from ragscore_workers.counts import agree, and_more, counted, thousands
from ragscore_workers.metrics.registry import higher_is_better
from ragscore_workers.schemas import (
    UNFILLED_PREFIX,
    EmbeddingConfig,
    MetricSummary,
    RetrievedSystems,
    RunSummary,
    Suite,
    TargetConfig,
    target_name,
    unpriced,
)

from .. import gold_ids
from ..encode_rates import MeasuredRate
from ..estimate import ASSUMED_ENCODE_WORDS_PER_S, EmbedTally, Estimate
from ..floors import limit_said
from ..terminal import TerminalConsole, compare_command, resume_command
from .live import fmt_duration, scored_text

__all__ = [
    "LOWER_IS_BETTER_MARK",
    "breakdown_cell",
    "ci_text",
    "error_lines",
    "metric_label",
    "missed_lines",
    "print_estimate",
    "print_summary",
    "reasons_text",
    "retrieved_nothing_lines",
    "target_lines",
    "unfilled_lines",
    "unscorable_text",
    "unscored_lines",
    "warning_lines",
]


#: What follows the name of an output where lower is better (``answer_hallucination``), wherever a report shows it.
LOWER_IS_BETTER_MARK = " (lower is better)"


def metric_label(name: str) -> str:
    """An output's name as the summary tables show it: marked when lower is better, so a high mean is read as bad
    (the console, report.md; report.html marks it in its template)."""
    return name if higher_is_better(name) else name + LOWER_IS_BETTER_MARK


def _items_without_system(summary: RunSummary) -> int:
    """Items in the pooled means but in no system's (rows without ``system`` among rows with one)."""

    def count(m: MetricSummary | None) -> int:
        return 0 if m is None else m.n + m.unscorable + m.errors

    return min(
        (
            count(m) - sum(count(per.get(name)) for per in summary.by_system.values())
            for name, m in summary.metrics.items()
        ),
        default=0,
    )


def error_lines(summary: RunSummary) -> list[str]:
    """One line per metric output with errors: how many, and the first message (why it failed)."""
    lines = []
    for name, m in summary.metrics.items():
        if not m.errors:
            continue
        every = " (every item)" if not m.n and not m.unscorable else ""
        where = f" (item {m.first_error_item})" if m.first_error_item else ""
        lines.append(f"{name}: {counted(m.errors, 'error')}{every}; first{where}: {m.first_error or '?'}")
    return lines


def ci_text(ci95: Sequence[float] | None) -> str:
    """``[0.490, 0.510]``: a 95% CI as every table writes it, to 3 decimals; an end that is not 0 or 1 but would read
    as one gets the digits that tell it apart: none of 9,686 passing is Wilson's ``[0.000, 0.0004]``, not a certain
    ``[0.000, 0.000]``."""
    return f"[{_ci_end(ci95[0])}, {_ci_end(ci95[1])}]" if ci95 else "-"


def breakdown_cell(m: MetricSummary, stacked: bool = False) -> str:
    """A breakdown table's cell (per group, system, question type, category): the mean, its 95% CI as the summary
    table writes it, and n (``0.833 [0.712, 0.911] (n=24)``); the CI reads ``n/a`` under two scores. ``stacked``:
    the CI on a line of its own, under ``0.833 (n=24)`` (a console too narrow for a cell on one line)."""
    mean = "-" if m.mean is None else f"{m.mean:.3f}"
    ci = ci_text(m.ci95) if m.n >= 2 else "n/a"
    return f"{mean} (n={thousands(m.n)})\n{ci}" if stacked else f"{mean} {ci} (n={thousands(m.n)})"


def _ci_end(value: float) -> str:
    """A CI end to 3 decimals, or to as many as tell it from 0 or 1 (up to 9); one that still reads 0 or 1 at 9
    (under 5e-10 from it) is float noise (a cosine's 1e-10 guard), not a bound to tell apart: ``0.000`` or
    ``1.000`` (never ``-0.000``)."""
    for digits in range(3, 10):
        text = f"{value:.{digits}f}"
        if value in (0.0, 1.0) or float(text) not in (0.0, 1.0):
            return text
    return f"{round(value):.3f}"


def unscorable_text(m: MetricSummary) -> str:
    """``12`` or ``12 (10 stopped)``: how many items were unscorable, and how many of them the run stopped."""
    return f"{thousands(m.unscorable)} ({thousands(m.stopped)} stopped)" if m.stopped else thousands(m.unscorable)


def unfilled_lines(summary: RunSummary) -> list[str]:
    """One line per target and response field that some replies lacked: a mistyped path (``source_node`` for
    ``source_nodes``) otherwise reads as no contexts or no doc ids, and every score built on them as a 0."""
    return [
        f"target {system}: {counted(n, 'reply', 'replies')} had nothing at the path of "
        f"{key.removeprefix(UNFILLED_PREFIX)} (its response map); those rows have no "
        f"{key.removeprefix(UNFILLED_PREFIX)}: check the path if they should"
        for system, counters in summary.target.items()
        for key, n in counters.items()
        if key.startswith(UNFILLED_PREFIX) and n
    ]


def target_lines(summary: RunSummary) -> list[str]:
    """One line per target: its calls, and the replies the reply cache gave (a system changed behind the same URL
    or callable answers from the cache as before: ``--no-cache`` asks it again), retries, 429s, failures."""
    lines = []
    for system, counters in summary.target.items():
        said = [counted(counters.get("calls", 0), "call")]
        if hits := counters.get("cache_hits", 0):
            said.append(f"{counted(hits, 'reply', 'replies')} from the reply cache (a changed system is asked again "
                        "with --no-cache)")  # fmt: skip
        if retries := counters.get("retries"):
            said.append(counted(retries, "retry", "retries"))
        for key, what in (("rate_limited", "rate-limited (429)"), ("failures", "failed")):
            if counters.get(key):
                said.append(f"{thousands(counters[key])} {what}")
        lines.append(f"target {system}: {', '.join(said)}")
    return lines


def reasons_text(reasons: dict[str, int] | None) -> str:
    """``no reference ×20; no contexts ×3``: why items were unscorable, most common first."""
    return "; ".join(f"{reason} ×{thousands(count)}" for reason, count in (reasons or {}).items())


def unscored_lines(summary: RunSummary) -> list[str]:
    """One line per metric output that scored no item only because every item was unscorable (columns named
    for another tool, the wrong --format): a run that says nothing of it looks like a success."""
    return [
        f"{name}: no item could be scored, {thousands(m.unscorable)} unscorable "
        f"({reasons_text(m.unscorable_reasons) or '?'})"
        for name, m in summary.metrics.items()
        if not m.n and not m.errors and m.unscorable
    ]


def _retrieved(summary: RunSummary) -> tuple[gold_ids.Retrieved, RetrievedSystems | None]:
    """``recall_at_k``'s rows as the summary counted them (its ``mrr``), pooled and per system (of every system; in a
    summary written before it told them, those of the breakdown, not those pooled past its first values)."""
    m = summary.metrics.get("mrr")
    pooled = gold_ids.Retrieved.of(m) if m is not None else gold_ids.Retrieved()
    if summary.retrieved_systems is not None:
        return pooled, summary.retrieved_systems
    systems = {
        s: gold_ids.Retrieved.of(ms["mrr"]) for s, ms in summary.by_system.items() if s != OTHER_VALUES and "mrr" in ms
    }
    return pooled, gold_ids.of_breakdown(systems)


def missed_lines(summary: RunSummary) -> list[str]:
    """A line when ``recall_at_k`` found no row's gold id at any rank of its retrieved ids (``mrr`` 0 on every row
    that retrieved something; of the dataset, else of each system where only some systems are so): gold ids and
    retrieved ids named in two schemes (``doc_12`` and ``12``, a chunk's id for its document's) score every row 0
    without an error."""
    return gold_ids.missed_lines(*_retrieved(summary))


def retrieved_nothing_lines(summary: RunSummary) -> list[str]:
    """A line, as information, when some of ``recall_at_k``'s rows retrieved nothing (``retrieved_doc_ids`` empty: an
    LLM-only system, by design): each scores 0, and :func:`missed_lines` leaves them out."""
    return gold_ids.nothing_lines(*_retrieved(summary))


def warning_lines(summary: RunSummary) -> list[str]:
    """The run's warnings of scores of 0 that no error explains (gold and retrieved ids named otherwise, a target's
    replies lacking a field): what the console ends with in yellow, report.md's and report.html's Warnings, and
    evaluate()'s DatasetWarnings, from this one source."""
    return [*missed_lines(summary), *unfilled_lines(summary)]


def judge_line(summary: RunSummary, out: Path | None = None, broker: str | None = None) -> str | None:
    """What the judge did, in one line (calls, cache, 429s, tokens, cost; why it stopped, and the resume that goes
    on: of ``out``, the run's --out DIR, when known, with ``broker``, its --broker), or None where the judge neither
    made calls nor stopped."""
    j = summary.judge

    def number(key: str) -> int:
        return int(float(j.get(key) or 0))

    def count(key: str) -> str:
        return thousands(number(key))

    def counted_of(key: str, singular: str, plural: str | None = None) -> str:
        return counted(number(key), singular, plural)

    if not (j.get("calls") or j.get("cache_hits") or j.get("breaker") or j.get("budget")):
        return None
    parts = [counted_of("calls", "call"), f"{count('cache_hits')} from the cache",
             counted_of("retries", "retry", "retries"),
             f"{count('rate_limited')} rate-limited (429)",
             f"tokens {count('tokens_in')} in / {count('tokens_out')} out",
             f"cost {_judge_cost(j)}"]  # fmt: skip
    for key, label, plural in (("parse_failures", "unparsable reply", "unparsable replies"),
                               ("failures", "call failed for good", "calls failed for good")):  # fmt: skip
        if j.get(key):
            parts.append(counted_of(key, label, plural))
    if stated := [f"{name} {count(f'provider_{name}')}" for name in ("rpm", "tpm", "rpd") if j.get(f"provider_{name}")]:
        parts.append(f"the provider's own limits applied ({', '.join(stated)}: below the suite's)")
    if stopped := j.get("breaker") or j.get("budget"):
        parts[-1] += f"; stopped: {stopped} ({backticked(resume_command(out or 'DIR', broker=broker))} goes on)"
    return "judge: " + ", ".join(parts)


#: Cohen's kappa where it is undefined: both judges gave every item the same one rating (100 % agreement, and
#: agreement by chance is certain too).
KAPPA_UNDEFINED = "n/a (every rating the same: chance agreement is 1)"


def kappa_text(agreement: dict[str, Any]) -> str:
    """Cohen's kappa of one dual-judge metric as a report shows it: three decimals, ``-`` with no item rated by both,
    :data:`KAPPA_UNDEFINED` where items were rated and it has no value."""
    kappa = agreement.get("kappa")
    if kappa is not None:
        return f"{kappa:.3f}"
    return KAPPA_UNDEFINED if agreement.get("n") else "-"


def judge_counters(judge: dict[str, Any]) -> dict[str, Any]:
    """The judge's counters as a report's judge table shows them: ``cost`` is ``-`` when no call had a price (a
    model the price table lacks is not free), else written as the console writes it (``0.3000``, ``<0.0001``)."""
    counters = {k: v for k, v in judge.items() if not isinstance(v, dict)}
    if unpriced(judge):
        counters |= {"cost": "-"}
    elif "cost" in counters:
        counters |= {"cost": _cost(float(counters["cost"] or 0))}
    return {k: table_count(v) for k, v in counters.items()}


#: What each column of the judge table counts (schemas.JUDGE_COUNTERS), said under it in report.md and report.html.
JUDGE_COLUMN_NOTES = {
    "calls": "requests sent, every attempt (retries included)",
    "cache_hits": "replies from the response cache (nothing sent)",
    "retries": "requests sent again after a failed attempt",
    "rate_limited": "429 replies received",
    "tokens_in": "prompt tokens",
    "tokens_out": "reply tokens",
    "cost": "in the currency of the judge metrics' prices (- when no call had a price)",
    "parse_failures": "replies without a valid rating or JSON score",
    "failures": "calls that failed for good (their items are errors)",
    "usage_estimated": "replies without usage, their tokens estimated from the text",
    "unpriced_calls": "calls of a model without a price: not in cost",
}


def judge_legend(columns: Iterable[str]) -> str:
    """One line saying what each of the judge table's ``columns`` counts (those :data:`JUDGE_COLUMN_NOTES` knows)."""
    return "; ".join(f"{c}: {JUDGE_COLUMN_NOTES[c]}" for c in columns if c in JUDGE_COLUMN_NOTES)


def table_count(value: Any) -> Any:
    """A report table's cell: a count with thousands separators (``12,345`` tokens), any other value as it is."""
    return thousands(value) if isinstance(value, int) and not isinstance(value, bool) else value


def judge_used(judge: dict[str, Any]) -> bool:
    """Whether the run's judge did anything a report's judge section would show (a call, a counter, an agreement)."""
    return bool(judge.get("agreement")) or any(v for v in judge.values() if not isinstance(v, dict))


def judge_facts(judge: dict[str, Any], suite: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Which judge a report's judge section is of (provider, model, the suite's rpm and tpm, pace even), from the
    run's suite; none when the judge did nothing."""
    cfg = (suite or {}).get("judge") or {}
    if not judge_used(judge):
        return []
    facts = [(k, cfg[k]) for k in ("provider", "model", "rpm", "tpm") if cfg.get(k) is not None]
    return facts + ([("pace", "even")] if cfg.get("pace") == "even" else [])  # burst, the default, goes unsaid


def target_facts(suite: dict[str, Any] | None) -> list[list[tuple[str, Any]]]:
    """Per target of the run's suite that has limits, its ``system`` and those limits (``rpm``, ``pace`` even) as a
    report's targets section shows them, as :func:`judge_facts` the judge's."""
    suite = suite or {}
    configs = suite.get("targets") or ([suite["target"]] if suite.get("target") else [])
    return [[("system", target_name(c.get("system"))), *limits] for c in configs if (limits := _target_limits_of(c))]


def _target_limits_of(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """A target's limits as its suite section writes them: ``rpm``, and ``pace`` when even (burst goes unsaid)."""
    rpm = [("rpm", config["rpm"])] if config.get("rpm") is not None else []
    return rpm + ([("pace", "even")] if config.get("pace") == "even" else [])


def _judge_cost(judge: dict[str, Any]) -> str:
    """The judge's cost, or why there is none: calls of a model without a price are not free, and a run the cache
    answered paid nothing whatever the price (said, so that its 0 does not read as a price its first run lacked)."""
    unpriced_calls = int(float(judge.get("unpriced_calls") or 0))
    if not int(float(judge.get("calls") or 0)) and int(float(judge.get("cache_hits") or 0)):
        return "0 (every reply from the cache: nothing paid)"
    if unpriced(judge):
        return "- (no price for the judge model: the judge metrics' param 'prices')"
    cost = _cost(float(judge.get("cost") or 0))
    return f"{cost} ({counted(unpriced_calls, 'call')} without a price not counted)" if unpriced_calls else cost


def devices_text(devices: dict[str, int]) -> str:
    """``cpu fp32 ×1, cuda fp16 ×2``: the embed worker processes per device and precision (``summary.embedding``)."""
    return ", ".join(f"{device} ×{n}" for device, n in devices.items())


def embedding_facts(suite: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """Which model a report's embeddings section is of (the suite's ``model``, ``device``, ``batch_size``)."""
    cfg = (suite or {}).get("embedding") or {}
    return [(k, cfg[k]) for k in ("model", "device", "batch_size") if cfg.get(k) is not None]


def embedding_counters(summary: RunSummary) -> dict[str, Any]:
    """``summary.embedding`` as a report's embeddings table shows it, its devices as text (:func:`devices_text`); its
    ``encoders`` (the dry run's measures, per device) left out."""
    counters = {k: v for k, v in summary.embedding.items() if k != "encoders"}
    return {k: devices_text(v) if k == "devices" else table_count(v) for k, v in counters.items()}


#: What :func:`embedding_line` adds of a resumed run, whose counters hold every attempt's work (its wall time only
#: the resume's): no scored output is sent again, but texts are encoded again where no cache holds them.
RESUMED_ENCODING = (
    " (the run and its resumes together: a resume encodes again the texts of the tasks the interruption cut short "
    "and those its items share with items scored before, unless the embedding cache, which --no-cache turns off, "
    "holds them)"
)


def embedding_line(summary: RunSummary) -> str | None:
    """What the embed workers did, in one line (texts encoded, Redis cache hits, vectors a worker process held in
    memory: of this chunk's other metrics, or of earlier chunks and runs; which worker processes served and encoded
    it, on which device: :func:`_workers_text`; a resumed run's said to count every attempt:
    :data:`RESUMED_ENCODING`), or None."""
    e = summary.embedding
    if not any(e.get(counter) for counter in ("encode_calls", "cache_hits", "memory_hits")):
        return None
    line = (f"embedding: {counted(e.get('encoded', 0), 'text')} encoded in "
            f"{counted(e.get('encode_calls', 0), 'batched call')}, "
            f"{thousands(e.get('cache_hits', 0))} from the cache")  # fmt: skip
    if e.get("memory_hits"):
        line += f", {thousands(e['memory_hits'])} from the workers' memory"
    line += RESUMED_ENCODING if "resumed_at" in summary.timing else ""
    return line + (f"; {_workers_text(e)}" if e.get("devices") else "")


def _workers_text(embedding: dict[str, Any]) -> str:
    """``served by worker processes on cpu fp32 ×2, of which cpu ×1 encoded``: ``devices`` (each process with a model
    loaded that looked texts of the run up, though the caches held them all) and ``encoders``'s ``workers`` (those of
    them that encoded texts of the run, per device type; left out where none did)."""
    encoding = {device: tally["workers"] for device, tally in (embedding.get("encoders") or {}).items()}
    said = f"served by worker processes on {devices_text(embedding['devices'])}"
    return said + (f", of which {devices_text(encoding)} encoded" if encoding else "")


def compare_line(summary: RunSummary, out: Path | None, broker: str | None) -> str:
    """Under the per-system table: the ``ragscore compare`` that pairs the systems, against the baseline that shares
    question ids with the most others (``summary.paired_systems``; the first system first), saying how many where
    not all (of the breakdown's first systems, where it pooled the rest: those were not checked); or, where no
    question id is shared by two systems (each system's answers under ids of their own), why there is nothing it
    could pair."""
    if summary.paired_questions == 0:
        return (
            "no question id is shared by two systems, so `ragscore compare` has nothing to pair: it pairs the "
            "systems' answers of a question by their id (give each system's answer of a question the same id)"
        )
    systems = [s for s in summary.by_system if s != OTHER_VALUES]  # the pool past 1,000 sorts first
    partners = summary.paired_systems or {}  # none in a summary of an older ragscore: the first system
    baseline = max(systems, key=lambda s: partners.get(s, 0))  # the first of those that pair with the most
    compare = backticked(compare_command(out, summary.run_id, baseline, broker))
    others = len(systems) - 1
    pairs = partners.get(baseline, others)
    if pairs >= others:
        return f"paired differences with their 95% CI and p: {compare}"
    short = f"{baseline} shares question ids with {pairs} of the {others} other systems"
    if OTHER_VALUES in summary.by_system:  # the systems past the breakdown's first ones were never told apart
        short += f" of the first {thousands(len(systems))}; the systems past them were not checked"
    return f"paired differences with their 95% CI and p: {compare} ({short})"


def print_summary(
    summary: RunSummary, console: Console | None = None, *, out: Path | None = None, broker: str | None = None
) -> None:
    """One row per metric output: mean, n, 95% CI, unscorable, errors; ``out``: the run's --out DIR (its run.json
    names the run), which the resume of a judge that stopped is said with (else ``DIR``), and ``broker``, its
    --broker."""
    console = console or TerminalConsole()
    table = Table(title=escape(f"ragscore {summary.run_id} · {summary.suite} · {summary.state}"))
    for col in ("metric", "mean", "n", "95% CI", "unscorable", "errors"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for name, m in summary.metrics.items():
        table.add_row(
            escape(metric_label(name)),
            "-" if m.mean is None else f"{m.mean:.3f}",
            thousands(m.n),
            ci_text(m.ci95),
            unscorable_text(m),
            thousands(m.errors),
        )
    console.print(table)
    if len(summary.by_system) >= 2:
        loose = _items_without_system(summary)
        also = f" and the {counted(loose, 'item')} with no system" if loose else ""
        console.print(f"The means above pool the items of all {thousands(len(summary.by_system))} systems{also}; "
                      "per system:", soft_wrap=True)  # fmt: skip
        table = _systems_table(summary)
        wide = console.options.update_width(sys.maxsize)  # what the table takes, not what the terminal allows
        if console.measure(table, options=wide).maximum > console.width:  # each CI under its mean, not cut at a space
            table = _systems_table(summary, stacked=True)
        console.print(table)
        console.print(compare_line(summary, out, broker), markup=False, highlight=False, soft_wrap=True)
    for line in error_lines(summary):
        console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    for line in (*unscored_lines(summary), *warning_lines(summary)):
        console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)
    for line in (*retrieved_nothing_lines(summary), *target_lines(summary), judge_line(summary, out, broker),
                 embedding_line(summary)):  # fmt: skip
        if line is not None:
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    wall = summary.timing.get("wall_s")
    console.print(
        f"{counted(summary.items, 'item')}, {scored_text(summary)}, {unreadable_rows(summary)}"
        + (f", {wall:.1f} s{since_resume(summary)}" if wall is not None else ""),
        markup=False,  # it names outputs (scored_text): a plug-in's ``x[b]`` is no console markup
        soft_wrap=True,
    )


def since_resume(summary: RunSummary) -> str:
    """`` since the resume`` after a resumed run's wall time, which counts from the resume: how long the run ran
    before its interruption is not recorded (``submitted_at`` to ``resumed_at`` spans the pause too)."""
    return " since the resume" if "resumed_at" in summary.timing else ""


#: Systems the console's per-system table shows (all of them are in report.md and summary.json).
MAX_CONSOLE_SYSTEMS = 8


def _systems_table(summary: RunSummary, stacked: bool = False) -> Table:
    """Mean, 95% CI and n per metric output and system (:func:`breakdown_cell`, ``stacked`` as it says): the summary
    table pools every system's items, which, for a run in which several pipelines answered, is no one's score."""
    systems = list(summary.by_system.items())[:MAX_CONSOLE_SYSTEMS]
    more = len(summary.by_system) - len(systems)
    caption = f"{counted(more, 'more system')} in report.md and summary.json" if more else None
    table = Table(caption=caption)
    table.add_column("metric")
    for system, _ in systems:
        table.add_column(escape(system), justify="right")
    for name in summary.metrics:
        cells = [per.get(name) for _, per in systems]
        table.add_row(
            escape(metric_label(name)),
            *("-" if m is None or m.mean is None else breakdown_cell(m, stacked) for m in cells),
        )
    return table


def unreadable_rows(summary: RunSummary) -> str:
    """``"N unreadable rows"`` (``1 unreadable row``), saying when failed_rows.jsonl lists only the first of them
    (the store's cap)."""
    from ragscore_workers.store import MAX_FAILED_ROWS_STORED

    kept = f" (failed_rows.jsonl lists the first {thousands(MAX_FAILED_ROWS_STORED)})"
    return counted(summary.failed_rows, "unreadable row") + (
        kept if summary.failed_rows > MAX_FAILED_ROWS_STORED else ""
    )


def _cost(value: float | None) -> str:
    """4 decimals; a cost too small for them is ``<0.0001``, not a free-looking ``0.0000``; nothing (calls the cache
    answers, a model priced 0) is ``0``, and a cost that cannot be known (None: no price) ``-``."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return "<0.0001" if 0 < value < 0.00005 else f"{value:.4f}"


def _uncut_table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    """A table whose cells are never cut to fit the terminal (a cut number reads as another number): each
    column is as wide as its widest cell, and the table grows past the console's width when it must."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False)
    for i, name in enumerate(header):
        width = max(len(name), *(len(row[i]) for row in rows))
        table.add_column(name, justify="right" if i else "left", no_wrap=True, min_width=width)
    for row in rows:
        table.add_row(*row)
    return table


def print_estimate(
    estimate: Estimate, suite: Suite, console: Console | None = None, *, mode: str, max_cost: float | None = None,
    max_tokens: int | None = None, judge_threads: int | None = None,
) -> None:  # fmt: skip
    """What ``ragscore run --dry-run`` found: rows, work per queue, and the judge's calls, cost and time, for a run in
    ``mode`` (``embedded``: it starts its local workers; ``cluster``). ``judge_threads``: an embedded run's local judge
    worker's (None: not known, as a cluster's workers' are not here)."""
    if mode not in ("embedded", "cluster"):
        raise ValueError(f"mode must be 'embedded' or 'cluster', not {mode!r}")
    embedded = mode == "embedded"
    console = console or TerminalConsole()
    console.print("Dry run: nothing was submitted, no worker started, no provider called.")
    line = f"{counted(estimate.rows, 'readable row')}, {thousands(estimate.failed_rows)} unreadable"
    line += f"; {counted(estimate.items, 'item')}" if estimate.items != estimate.rows else ""
    console.print(line, soft_wrap=True)
    for failure in estimate.first_failures:
        console.print(f"  {failure}", markup=False, highlight=False, soft_wrap=True)
    if estimate.failed_rows > len(estimate.first_failures):
        from ragscore_workers.store import MAX_FAILED_ROWS_STORED

        listed = (
            "them all"
            if estimate.failed_rows <= MAX_FAILED_ROWS_STORED
            else f"the first {thousands(MAX_FAILED_ROWS_STORED)}"
        )
        console.print(f"  {and_more(estimate.failed_rows - len(estimate.first_failures))} (a run lists {listed} in "
                      "failed_rows.jsonl)", markup=False, highlight=False, soft_wrap=True)  # fmt: skip
    for warning in estimate.warnings:
        console.print(f"Warning: {warning}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    for note in estimate.notes:
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    units = Table(title="work per queue")
    units.add_column("queue")
    units.add_column("item x metric outputs", justify="right")
    for queue, n in estimate.units.items():
        units.add_row(queue, thousands(n))
    console.print(units)
    targets = {target.name: target for target in suite.all_targets}
    for system, calls in estimate.target_calls.items():
        said = f"target {system}: {counted(calls, 'call')} (one per question; retries not counted)"
        console.print(said + _target_limits(estimate, targets[system]), markup=False, soft_wrap=True)
    if estimate.embed is not None:  # an embedded run starts its embed worker
        said = embed_estimate(estimate, suite, embedded=embedded)
        console.print(said, markup=False, highlight=False, soft_wrap=True)
    if not estimate.judge:
        return
    cached = ("cached", "to pay") if estimate.cache_checked else ()
    total = estimate.judge_total()
    rows = [
        (name, thousands(t.calls), *((thousands(t.cached), thousands(t.paid)) if cached else ()),
         thousands(t.tokens_in), thousands(t.tokens_out_max), _cost(t.cost))
        for name, t in [*estimate.judge.items(), ("total", total)]
    ]  # fmt: skip
    header = ("metric", "calls", *cached, "tokens in", "out ≤", "cost ≤")
    title = escape(f"judge calls ({suite.judge.provider} {suite.judge.model})")
    console.print(_uncut_table(title, header, rows), crop=False)
    notes = [
        "tokens in: the rate limiter's high guess of the prompts (three characters a token)",
        "out: the reply caps (max_tokens)",
        "not counted: re-asks after a reply with no rating, and retries",
        # the second of two calls alike is answered from the reply cache where the first's reply is in by then
        "a prompt asked twice in the run (rows alike) is counted twice, though the cache may answer the second",
    ]
    if not estimate.cache_checked:
        notes.append("cached replies were not looked up (no run store reachable, --no-cache, or targets)")
    if estimate.target_calls:
        notes.append("the targets' replies are not in the prompt tokens (they do not exist yet)")
    if total.cost is None:
        notes.append(f"cost -: no price for {suite.judge.model} (the judge metrics' param 'prices')")
    console.print("; ".join(notes) + ".", style="dim", soft_wrap=True)
    too_large = estimate.too_large(suite)
    for name, limit in too_large:
        console.print(f"judge.{name} {thousands(limit)} is below what the largest judge call needs (about "
                      f"{thousands(total.largest)} tokens: its prompt and its max_tokens): the rate limiter can never "
                      f"send such calls, so their items would be errors. Raise judge.{name} (or --{name}) if your "
                      "account allows more, or lower the metric's max_tokens", style="red", soft_wrap=True)  # fmt: skip
    minutes = {} if too_large else estimate.judge_minutes(suite)  # no least time for calls that cannot be sent
    if minutes:
        binding = max(minutes, key=lambda k: minutes[k])
        limits = ", ".join(f"{_judge_limit(suite, k)}: {fmt_duration(m * 60)}" for k, m in minutes.items())
        keys = estimate.in_flight_caps()
        per_key = (
            f", each judge key's calls under its own ({keys} keys: the judge metrics' api_key_env)" if keys > 1 else ""
        )
        console.print(f"time: at least {fmt_duration(minutes[binding] * 60)} for the judge calls under the run's "
                      f"limits ({limits}{per_key}), however many workers{_assumed_limits(suite, minutes)}",
                      soft_wrap=True)  # fmt: skip
    rounds = None if too_large else estimate.in_flight_rounds(suite)
    if rounds:
        caps = estimate.in_flight_caps()
        per_key = f" per judge key ({caps} keys: the judge metrics' api_key_env)" if caps > 1 else ""
        console.print(f"time: at least {thousands(rounds)} x the seconds one judge reply takes under "
                      f"judge.max_in_flight {suite.judge.max_in_flight} ({thousands(total.paid)} calls, "
                      f"{suite.judge.max_in_flight} at a time{per_key}), however many workers",
                      soft_wrap=True)  # fmt: skip
    if not too_large and embedded and judge_threads is not None:
        _print_local_rounds(console, estimate, judge_threads, rounds or 0)
    priced = sum(t.cost for t in estimate.judge.values() if t.cost is not None)
    if max_cost is not None and priced > max_cost:
        console.print(f"--max-cost {max_cost:g} may stop judging part-way: the priced calls may cost up to "
                      f"{priced:.4f}; the rest would be unscorable", style="yellow", soft_wrap=True)  # fmt: skip
    if max_tokens is not None and total.tokens_in + total.tokens_out_max > max_tokens:
        console.print(f"--max-tokens {thousands(max_tokens)} may stop judging part-way: the calls may use up to "
                      f"{thousands(total.tokens_in + total.tokens_out_max)} tokens", style="yellow",
                      soft_wrap=True)  # fmt: skip


def _print_local_rounds(console: Console, estimate: Estimate, threads: int, capped_rounds: int) -> None:
    """The least time an embedded run's local judge worker of ``threads`` threads allows
    (:meth:`Estimate.local_rounds`), where it is more rounds than ``judge.max_in_flight``'s (``capped_rounds``)."""
    local = estimate.local_rounds(threads)
    if not local or local <= capped_rounds:
        return
    per_task = estimate.task_calls_at_once()
    console.print(f"time: at least {thousands(local)} x the seconds one judge reply takes with the local judge "
                  f"worker's {thousands(threads)} threads ({thousands(estimate.judge_total().paid)} calls, "
                  f"{thousands(threads * per_task)} at a time: a task a thread, {per_task} calls each, the judge "
                  "metrics' concurrency); --judge-threads sets its threads", soft_wrap=True)  # fmt: skip


def _assumed_limits(suite: Suite, minutes: dict[str, float]) -> str:
    """What the judge's time line adds where a limit it names is ragscore's default, not set in the suite nor on the
    command line (``judge.rpm 30``, ``judge.tpm 6,000``: Groq's free tier, assumed of any provider, whose headers may
    lower them, never raise them: :mod:`ragscore_workers.providers.ratelimit`); "" for none."""
    assumed = [name for name in suite.judge.defaulted_limits if name in minutes]
    if not assumed:
        return ""
    named = " and ".join(_judge_limit(suite, name) for name in assumed)
    local = f" (a server of your own at {suite.judge.base_url}: null for none)" if suite.judge.base_url else ""
    groq = suite.judge.provider == "groq" and not suite.judge.base_url
    whose = "assumed of your Groq plan (a paid one allows more)" if groq else "assumed, not your provider's limits"
    return (f"; {named} {agree(len(assumed), 'is the default', 'are the defaults')} (Groq's free tier), {whose}, "
            "which its x-ratelimit-* headers may lower, never raise: set judge.rpm / judge.tpm in the suite to its "
            f"limits{local}, or run with --rpm / --tpm (docs/judge.md, Configuring the judge)")  # fmt: skip


def _judge_limit(suite: Suite, name: str) -> str:
    """A judge limit of :meth:`Estimate.judge_minutes` as the suite writes it: ``judge.rpm 600``, ``judge.pace even
    at 10 a second``."""
    return f"judge.{limit_said(suite.judge, name)}"


def embed_estimate(
    estimate: Estimate, suite: Suite, load: tuple[float, int] | None = None, *, embedded: bool = False
) -> str:
    """The dry run's line of the texts its embedding metrics would encode, and the time it assumes that takes;
    ``load``: this machine's load average and cores (None: read them, :func:`~orchestrator.estimate.host_load`);
    ``embedded``: the run starts its local embed worker (:func:`_before_encoding`)."""
    from ragscore_workers.embedding import DEFAULT_MODEL

    from ..estimate import ASSUMED_FILLED_WORDS, ASSUMED_SENTENCE_WORDS, BUSY_SLOWDOWN, host_load

    tally = estimate.embed
    assert tally is not None
    cached = f", {thousands(tally.cached)} in the embedding cache" if tally.cache_checked else ""
    line = f"embedding ({suite.embedding.model}): {counted(tally.texts, 'distinct text')}{cached}, "
    line += f"{thousands(tally.to_encode)} to encode"
    if tally.filled:
        sentences = (f", {thousands(tally.filled_sentences)} of them sentences of the answers, which "
                     f"answer_hallucination embeds each ({ASSUMED_SENTENCE_WORDS} words each assumed)"
                     if tally.filled_sentences else "")  # fmt: skip
        line += (f" ({thousands(tally.filled)} of them the targets' replies: an answer, and a reply's contexts as one "
                 f"text, per item; {ASSUMED_FILLED_WORDS} words each assumed{sentences})")  # fmt: skip
    if tally.to_encode:
        took = "under a second" if tally.estimated_s < 1 else f"about {fmt_duration(tally.estimated_s)}"
        line += f": {took} ({_encode_rate(tally, suite)}), {_before_encoding(embedded)}"
        load = load or host_load()
        busy = tally.busy_s(*load) if load is not None and load[0] > load[1] else 0.0
        # said where it says more than the estimate: a busy time of "0m00s", or the estimate's own, adds nothing
        if load is not None and busy >= 1 and round(busy) > round(tally.estimated_s):
            line += (f"; this machine is busy (load average {load[0]:.1f} on {counted(load[1], 'core')}): about "
                     f"{fmt_duration(busy)} where its embed workers run here, {BUSY_SLOWDOWN} times slower per "
                     "runnable process a core, the encode's own thread a core added to the load now, as measured on 2 "
                     "busy cores (more where the run's other workers take theirs too)")  # fmt: skip
    notes = [_windows_note(tally)]
    if not tally.cache_checked:
        notes.append(
            "the embedding cache was not looked up (no run store reachable, the suite's embedding cache off, "
            "or a model whose cache key needs it loaded: only a packaged model in fp32 is looked up)"
        )
    other_model = suite.embedding.model.split("/")[-1].lower() != DEFAULT_MODEL.lower()
    if tally.to_encode and tally.measured is None and other_model:
        notes.append(f"the assumed words/s are all-MiniLM-L6-v2's: {suite.embedding.model} is slower if it is larger")
    if tally.filled:
        notes.append("a reply with several contexts encodes each: more than counted")
    return f"{line}; {'; '.join(notes)}."


def _before_encoding(embedded: bool) -> str:
    """What comes before a run's first text is encoded, as measured (:data:`~..estimate.EMBED_WORKER_START_S`,
    :data:`~..estimate.EMBED_MODEL_LOAD_S`): an embedded run's local embed worker's start and the model's load; a
    cluster's model load, where its worker has not loaded it yet."""
    from ..estimate import EMBED_MODEL_LOAD_S, EMBED_WORKER_START_S

    measured = "as measured on 2 laptop CPU cores at load average ~6"
    load = f"the model's load (about {EMBED_MODEL_LOAD_S:.0f} s)"
    if not embedded:
        return f"plus {load} where a worker has not loaded it yet, {measured}"
    return (f"plus about {fmt_duration(EMBED_WORKER_START_S + EMBED_MODEL_LOAD_S)} before its first text: the local "
            f"embed worker's start (about {EMBED_WORKER_START_S:.0f} s) and {load}, {measured}")  # fmt: skip


def _encode_rate(tally: EmbedTally, suite: Suite) -> str:
    """The rate the dry run's encode time is at: measured on the latest runs of the suite's model and device (in this
    mode), else assumed."""
    rate = tally.measured
    if rate is None:
        return (f"assumed: {thousands(ASSUMED_ENCODE_WORDS_PER_S)} words/s, {_unmeasured(suite.embedding)}: "
                "all-MiniLM-L6-v2 on two laptop CPU cores; a GPU is many times faster")  # fmt: skip
    runs = "run" if rate.runs == 1 else f"{rate.runs} runs"
    config = suite.embedding
    device = f"{rate.device} ({rate.picked})" if rate.picked else rate.device
    return (f"measured on your last {runs}: {rate.texts_per_s:,.1f} texts/s with {_embed_workers(rate)}, "
            f"{rate.per_worker:,.1f} each: {counted(rate.texts, 'text')} in {rate.encode_s:,.1f} s of encoding summed "
            f"over the workers that encoded them, {config.model} on device {device}")  # fmt: skip


def _unmeasured(config: EmbeddingConfig) -> str:
    """Why the encode rate is assumed, and on which device: the suite's, or for ``auto`` (which device it picks is not
    asked: that imports torch) a CPU."""
    if config.device == "auto":
        return f"no earlier run of {config.model} measured one, and device auto is taken for a CPU"
    return f"no earlier run of {config.model} on device {config.device} measured one"


#: Where the embed workers a measured estimate assumes are from (:attr:`MeasuredRate.workers_from`), as said: a
#: cluster's those that say they run, else the most processes one of the runs encoded on, a guess (a worker restarted
#: or resumed counts again, one that encoded alone counts as at once).
_WORKERS_FROM = {
    "given": "",
    "runs": " (assumed: the most worker processes one of your last runs encoded on, as if all at once)",
    "alive": " (the embed worker processes on the broker that say in the run store that they run)",
}


def _embed_workers(rate: MeasuredRate) -> str:
    """The embed workers the measured estimate assumes, and where a cluster's are from (:data:`_WORKERS_FROM`)."""
    return counted(rate.workers, "embed worker") + _WORKERS_FROM.get(rate.workers_from, "")


def _windows_note(tally: EmbedTally) -> str:
    """How the dry run counted long contexts: as the windows a run encodes, or whole (and why)."""
    if tally.windowed:
        return "a long context counted as the overlapping windows a run encodes (the cache's note of the model)"
    why = "; the embedding cache holds no note of the model as installed here to cut them: a run writes one"
    why = why if tally.cache_checked else ""
    return f"each context counted whole (a run encodes a long one as overlapping windows of about the same words{why})"


def _target_limits(estimate: Estimate, target: TargetConfig) -> str:
    """What a dry run's target line adds of the target's limits (``rpm``, ``pace: even``): the least time its calls
    need under those they reach, as the judge's time line says it, and the ones they do not reach; none unset."""
    names = ["rpm"] * bool(target.rpm) + ["pace"] * (target.pace == "even")
    if not names:
        return ""
    minutes = estimate.target_minutes(target)
    limits = ", ".join(
        limit_said(target, k) + (f": {fmt_duration(minutes[k] * 60)}" if k in minutes else "") for k in names
    )
    if not minutes:
        return f"; under its limits ({limits})"
    return f"; time: at least {fmt_duration(max(minutes.values()) * 60)} for them under its limits ({limits})"
