"""``report.md``: the summary tables of a run."""

from __future__ import annotations

import re
from itertools import islice
from typing import Any

from ragscore_workers.counts import agree, counted, counted_of, thousands
from ragscore_workers.schemas import TARGET_COUNTERS, MetricSummary, RunSummary

from ..datasets.rows import failed_row_at
from ..gates import GATE_COLUMNS, GateResult, failed, failed_first, gate_cells, regression_note, verdict
from ..terminal import shown
from .console import (
    breakdown_cell,
    ci_text,
    embedding_counters,
    embedding_facts,
    error_lines,
    judge_counters,
    judge_facts,
    judge_legend,
    judge_used,
    kappa_text,
    metric_label,
    reasons_text,
    retrieved_nothing_lines,
    since_resume,
    table_count,
    target_facts,
    unreadable_rows,
    unscorable_text,
    warning_lines,
)
from .itemstats import OTHERS_NOTE, ItemStats, WorstItem
from .live import scored_text
from .texts import MAX_PREVIEW_CHARS, ItemTexts, preview

__all__ = ["MAX_MD_TABLE_ROWS", "MEANS_NOTE", "md_cell", "md_text", "render_markdown", "tied_text"]

#: What the summary table's means and intervals are over, under the table of report.md and report.html alike.
MEANS_NOTE = (
    "Means are over scored items only: unscorable items (the row lacks what the metric needs) and errors are counted "
    "apart, never averaged as 0. 95% CI of the mean: the Wilson score interval for pass/fail outputs (every score 0 "
    "or 1), else a seeded percentile bootstrap; none for a single score."
)


#: Characters that make Markdown out of text: raw HTML (``<img onerror=…>``), links, code spans, ``*`` and ``_``
#: emphasis (``__all__`` showed as a bold "all"), table cells, ``$`` math (GitHub's ``$5 and $10``), ``#`` (a
#: heading's closing sequence: ``### q #`` read ``q``). Each is backslash-escaped, which CommonMark renders as the
#: character itself. An ``_`` between two letters or digits is left alone: it is never emphasis, and names like
#: ``exact_match`` stay greppable.
_MD_SPECIAL = re.compile(r"[\\`*\[\]<>|&~$#]|(?<![^\W_])_|_(?![^\W_])")

#: An ``@`` or ``#`` GitHub would link (``@alice`` a mention that notifies her, ``#12`` issue 12, ``a@b.io`` a mail
#: address). GitHub finds them in the rendered text, where a backslash escape is gone; an empty HTML comment after
#: the character splits that text and renders as nothing (github/markup#1168).
_MD_REFERENCE = re.compile(r"(@|\\#)(?=\w)")
_NOT_A_REFERENCE = r"\1<!-- -->"


def md_cell(text: object) -> str:
    """User text (ids, groups, system names, error messages) as Markdown that shows it as written: its markup
    characters escaped (so a viewer that renders raw HTML runs none of it), an ``@`` or ``#`` GitHub would make a
    mention or an issue link followed by an empty ``<!-- -->``, line breaks as spaces and other control characters
    as their escapes (``cat report.md`` obeys none). Fit for a table cell and a heading alike."""
    escaped = _MD_REFERENCE.sub(_NOT_A_REFERENCE, _MD_SPECIAL.sub(r"\\\g<0>", str(text)))
    return shown(escaped.replace("\r", " ").replace("\n", " "))


#: A code span of a message ragscore writes: a command or a field name in backticks (`ragscore run --resume DIR`).
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def md_text(text: object) -> str:
    """A message of ours as Markdown: its code spans (commands and field names in backticks) kept as code spans, the
    rest :func:`md_cell` (escaped, a command's backticks read as text around it). A code span shows its text as
    written: no markup, mention or link is made of it."""
    said, end = [], 0
    for span in _CODE_SPAN.finditer(str(text)):
        said += [md_cell(str(text)[end : span.start()]), f"`{shown(span.group(1))}`"]
        end = span.end()
    return "".join([*said, md_cell(str(text)[end:])])


#: Rows of a breakdown table in report.md (report.html shows more; summary.json has every one). A GitHub comment holds
#: at most 65,536 characters: 1,000 groups of 4 outputs made report.md ~140 KB, too long to post on a pull request.
MAX_MD_TABLE_ROWS = 50


def _mean(m: MetricSummary) -> str:
    return "-" if m.mean is None else f"{m.mean:.3f}"


def _breakdown(title: str, tree: dict[str, dict[str, MetricSummary]]) -> list[str]:
    if not tree:
        return []
    metrics = sorted({m for per in tree.values() for m in per})
    lines = [
        f"## By {title}",
        "",
        f"| {title} | " + " | ".join(map(md_cell, metrics)) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    for key, per in islice(tree.items(), MAX_MD_TABLE_ROWS):
        cells = [breakdown_cell(per[m]) if m in per else "-" for m in metrics]
        lines.append(f"| {md_cell(key)} | " + " | ".join(cells) + " |")
    if len(tree) > MAX_MD_TABLE_ROWS:
        lines += ["", f"The first {counted_of(MAX_MD_TABLE_ROWS, len(tree), title + ' value')}; the rest are in "
                  f"summary.json (`by_{title}`)."]  # fmt: skip
    return [*lines, ""]


def render_markdown(
    summary: RunSummary,
    info: dict[str, Any] | None = None,
    stats: ItemStats | None = None,
    texts: ItemTexts | None = None,
    failed_rows: list[dict[str, Any]] | None = None,
    gates: list[GateResult] | None = None,
) -> str:
    """Markdown with the gates' verdict (``gates``: the run's results, None or none: no section), the metric table
    and one table per breakdown; ``info`` (the store's or run_info.json) names the judge; ``stats`` (one pass over
    the items) give the worst items, with ``texts`` (their questions and answers); ``failed_rows`` are the first
    unreadable rows."""
    lines = [
        f"# ragscore run {summary.run_id}",
        "",
        f"Suite {md_cell(summary.suite)} · state **{summary.state}** · {counted(summary.items, 'item')}, "
        f"{md_cell(scored_text(summary))}, {unreadable_rows(summary)}",
        "",
        *_gates(gates or []),
        "| metric | mean | n | 95% CI | unscorable | errors |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in summary.metrics.items():
        named = md_cell(metric_label(name))
        cells = f"{thousands(m.n)} | {ci_text(m.ci95)} | {unscorable_text(m)} | {thousands(m.errors)}"
        lines.append(f"| {named} | {_mean(m)} | {cells} |")
    lines += ["", MEANS_NOTE, ""]
    for line in retrieved_nothing_lines(summary):  # information, not a warning
        lines += [md_cell(line), ""]
    if errors := error_lines(summary):
        lines += ["## Errors", "", *(f"- {md_cell(line)}" for line in errors), ""]
    if warned := warning_lines(summary):  # scores of 0 that no error explains
        lines += ["## Warnings", "", *(f"- {md_cell(line)}" for line in warned), ""]
    if unscorable := [(name, m) for name, m in summary.metrics.items() if m.unscorable_reasons]:
        why = [f"- {md_cell(name)}: {md_cell(reasons_text(m.unscorable_reasons))}" for name, m in unscorable]
        lines += ["## Why items were unscorable", "", *why, ""]
    lines += _breakdown("group", summary.by_group)
    lines += _breakdown("system", summary.by_system)
    lines += _breakdown("question_type", summary.by_question_type)
    lines += _breakdown("category", summary.by_category)
    lines += _wins(summary)
    lines += _judge(summary, (info or {}).get("suite"))
    lines += _targets(summary, (info or {}).get("suite"))
    lines += _embedding(summary, (info or {}).get("suite"))
    lines += _worst(summary, stats, texts or ItemTexts()) if stats is not None else []
    lines += _failed_rows(summary, failed_rows or [])
    lines += _timing(summary)
    return "\n".join(lines) + "\n"


def _embedding(summary: RunSummary, suite: dict[str, Any] | None) -> list[str]:
    """What the embed workers did, as report.html's embeddings section says it: the suite's model, device and batch
    size, then the counters (texts encoded, batched calls, cache hits, worker processes per device); none without
    embedding metrics."""
    if not summary.embedding:
        return []
    counters = embedding_counters(summary)
    lines = ["## Embeddings", ""]
    if facts := embedding_facts(suite):
        lines += [" · ".join(f"{k} {md_cell(v)}" for k, v in facts), ""]
    return [*lines, "| " + " | ".join(map(md_cell, counters)) + " |", "|" + "---|" * len(counters),
            "| " + " | ".join(map(md_cell, counters.values())) + " |", ""]  # fmt: skip


def _gates(results: list[GateResult]) -> list[str]:
    """The Gates section: the verdict (bold where a gate failed), then the gate table, failed gates first, and what
    its regression gates compared with; none without gates."""
    if not results:
        return []
    said = f"**{verdict(results)}**" if failed(results) else verdict(results)
    lines = ["## Gates", "", said, "", "| " + " | ".join(GATE_COLUMNS) + " |", "|---|---|" + "---:|" * 4 + "---|"]
    for r in failed_first(results):
        cells = [md_cell(cell) for cell in gate_cells(r)]
        cells[-1] = cells[-1] if r.passed else f"**{cells[-1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    if note := regression_note(results):
        lines += ["", md_cell(note)]
    return [*lines, "", "## Metrics", ""]


def _wins(summary: RunSummary) -> list[str]:
    """compare_answers: per system, questions compared, wins (a k-way tie counts 1/k), outright, tied, win rate."""
    if not summary.wins:
        return []
    w = summary.wins
    lines = [f"## Wins per system ({md_cell(w['metric'])})", "",
             f"{counted(w['questions'], 'question')} answered by two or more systems, {thousands(w['ties'])} with a "
             "tie for the best score.",
             "", "| system | compared | wins | outright | tied | win rate |", "|---|---|---|---|---|---|"]  # fmt: skip
    for system, s in w["by_system"].items():
        lines.append(f"| {md_cell(system)} | {thousands(s['compared'])} | {_wins_count(s['wins'])} | "
                     f"{thousands(s['outright'])} | {thousands(s['tied'])} | {s['win_rate']:.3f} |")  # fmt: skip
    return [*lines, ""]


def _wins_count(wins: float) -> str:
    """A system's wins in full, to 2 decimals where a tie shared one (``12,346.5``, ``0.33``, ``2``): 4 significant
    digits wrote 12,346.5 wins as ``1.235e+04``."""
    return f"{wins:,.2f}".rstrip("0").rstrip(".")


def _judge(summary: RunSummary, suite: dict[str, Any] | None) -> list[str]:
    if not judge_used(summary.judge):
        return []
    agreement = summary.judge.get("agreement") or {}
    counters = judge_counters(summary.judge)
    facts = judge_facts(summary.judge, suite)
    lines = ["## Judge", ""]
    if facts:  # which judge: a report posted alone (a CI comment) says nothing else of it
        lines += [" · ".join(f"{k} {md_cell(v)}" for k, v in facts), ""]
    lines += ["| " + " | ".join(map(md_cell, counters)) + " |", "|" + "---|" * len(counters),
              "| " + " | ".join(map(md_cell, counters.values())) + " |", ""]  # fmt: skip
    legend = judge_legend(counters)  # what each column counts: the names alone left calls and cost unexplained
    lines += [legend, ""] if legend else []
    if agreement:
        lines += ["| " + " | ".join(AGREEMENT_COLUMNS) + " |", "|---" * len(AGREEMENT_COLUMNS) + "|"]
        for name, a in agreement.items():
            pct = "-" if a.get("percent") is None else f"{a['percent']:.1f}%"
            lines.append(f"| {md_cell(name)} | {thousands(a.get('n', 0))} | {pct} | {kappa_text(a)} |")
        lines.append("")
    return lines


#: Columns of the target table, per system (``breaker`` only shows when it opened).
TARGET_COLUMNS = (*TARGET_COUNTERS, "breaker")
#: Over the target table of report.md and report.html: what its columns count.
TARGETS_NOTE = (
    "The systems under test asked before scoring: their calls, cache hits, retries, 429s, questions that failed for "
    "good, and why the circuit breaker opened (if it did)."
)
#: Columns of the agreement table of the two judges, report.md's and report.html's.
AGREEMENT_COLUMNS = ("metric", "items rated by both", "agreement", "Cohen's kappa")


def target_rows(summary: RunSummary) -> list[list[str]]:
    """Per target system: its counters in TARGET_COLUMNS order (missing ones as 0, no breaker as "-")."""
    return [
        [system] + [str(table_count(c.get(k, "-" if k == "breaker" else 0))) for k in TARGET_COLUMNS]
        for system, c in summary.target.items()
    ]


def _targets(summary: RunSummary, suite: dict[str, Any] | None) -> list[str]:
    if not summary.target:
        return []
    header = "| system | " + " | ".join(TARGET_COLUMNS) + " |"
    lines = ["## Targets", "", TARGETS_NOTE, ""]
    for facts in target_facts(suite):  # a target's limits, as the judge section says the judge's
        lines += [" · ".join(f"{k} {md_cell(v)}" for k, v in facts), ""]
    lines += [header, "|---" * (len(TARGET_COLUMNS) + 1) + "|"]
    lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in target_rows(summary)]
    return [*lines, ""]


def _worst_line(rank: int, item: WorstItem, texts: ItemTexts) -> str:
    question, answer = texts.of(item.key)
    others = item.others_text()
    why = preview(item.why) or "-"
    cells = [str(rank), item.id, item.system or "", _score(item.score), question or "-", answer or "-", why, others]
    return "| " + " | ".join(map(md_cell, cells)) + " |"


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def tied_text(stats: ItemStats, name: str, items: list[WorstItem]) -> str:
    """``4,326 of 9,322 scored items (46.4%) have the worst score, 0.000; the 10 listed are the first of them``
    where more items than the list have it (a 0 is common), so a reader does not take the list for all of them;
    where the list ends among items of another score, ``22 more items than listed have 0.500, the last listed score:
    the list keeps the first of them``; else ''."""
    tied, scored = stats.tied_worst(name), stats.values[name].total if name in stats.values else 0
    if not items:
        return ""
    if tied > len(items):
        return (f"{counted_of(tied, scored, 'scored item')} ({_share(tied, scored)}) have the worst score, "
                f"{_score(items[0].score)}; the {len(items)} listed are the first of them.")  # fmt: skip
    beyond = stats.beyond_cutoff(name) if len(items) == stats.worst_k else 0  # else the cut-off is the best score
    if not beyond:
        return ""
    return (f"{counted(beyond, 'more item')} than listed {agree(beyond, 'has', 'have')} {_score(items[-1].score)}, the "
            "last listed score: the list keeps the first of them.")  # fmt: skip


def _share(part: int, whole: int) -> str:
    """``46.4%``: ``part`` of ``whole`` to one decimal; a part that is neither none nor all is never written
    ``0.0%`` or ``100.0%`` (11 of 30,000 reads ``<0.1%``, 29,999 of 30,000 ``>99.9%``)."""
    share = f"{part / whole:.1%}"
    if share == "0.0%" and part:
        return "<0.1%"
    return ">99.9%" if share == "100.0%" and part < whole else share


def _worst(summary: RunSummary, stats: ItemStats, texts: ItemTexts) -> list[str]:
    """Per output, its worst items (as report.html lists them) with what they asked and answered."""
    lines = ["## Worst items", "", f"The {counted(stats.worst_k, 'lowest-scored item')} per metric (highest where "
             "lower is better), with the question, the answer and why it failed, each cut to "
             f"{MAX_PREVIEW_CHARS} characters.", "", OTHERS_NOTE, ""]  # fmt: skip
    if texts.note:
        lines += [f"Questions and answers: {md_cell(texts.note)}.", ""]
    for name, items, best in stats.shown_worst(summary.metrics):
        lines += [f"### {md_cell(name)}", ""]
        if not items:
            lines += [f"Every scored item has the same score ({_score(best)}).", ""]
            continue
        if tied := tied_text(stats, name, items):
            lines += [tied, ""]
        lines += ["| # | id | system | score | question | answer | why | other scores |", "|---" * 8 + "|"]
        lines += [_worst_line(rank, item, texts) for rank, item in enumerate(items, start=1)]
        lines.append("")
    return lines


def _failed_rows(summary: RunSummary, failed_rows: list[dict[str, Any]]) -> list[str]:
    """The first unreadable rows (where and why), and how many more failed_rows.jsonl holds."""
    if not failed_rows:
        return []
    lines = ["## Unreadable rows", "", "| row | error |", "|---|---|"]
    lines += [f"| {md_cell(failed_row_at(r))} | {md_cell(r.get('error', ''))} |" for r in failed_rows]
    if summary.failed_rows > len(failed_rows):
        lines += ["", f"… {thousands(summary.failed_rows - len(failed_rows))} more in failed_rows.jsonl."]
    return [*lines, ""]


def _timing(summary: RunSummary) -> list[str]:
    keys = [k for k in ("submit_s", "scoring_s", "aggregate_s", "wall_s") if summary.timing.get(k) is not None]
    if not keys:
        return []
    resumed = since_resume(summary)  # scoring and wall time count from a resume; submit is the first run's
    parts = [f"{k.removesuffix('_s')} {summary.timing[k]:.2f} s{resumed if k in ('scoring_s', 'wall_s') else ''}"
             for k in keys]  # fmt: skip
    return ["## Timing", "", " · ".join(parts), ""]
