"""``report.html``: one self-contained page (inline CSS and SVG, no script, no network) about a finished run."""

from __future__ import annotations

import json
import time
from itertools import islice
from typing import Any

from ragscore_workers.counts import thousands
from ragscore_workers.metrics.registry import higher_is_better
from ragscore_workers.schemas import MetricSummary, RunSummary

from ..datasets.rows import failed_row_at
from ..gates import GATE_COLUMNS, GateResult, failed, failed_first, gate_cells, regression_note, verdict
from . import plots
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
    reasons_text,
    retrieved_nothing_lines,
    since_resume,
    target_facts,
    unscorable_text,
    warning_lines,
)
from .itemstats import OTHERS_NOTE, ItemStats, WorstItem
from .live import scored_text
from .markdown import AGREEMENT_COLUMNS, MEANS_NOTE, TARGET_COLUMNS, TARGETS_NOTE, target_rows, tied_text
from .templates import CSS, environment
from .texts import MAX_PREVIEW_CHARS, ItemTexts, home_relative, preview

__all__ = ["fmt", "render_html", "version"]

#: Rows of a breakdown table (all of them are in summary.json).
MAX_TABLE_ROWS = 200
#: Unreadable rows listed in the page.
MAX_FAILED_ROWS = 20
_DIMENSIONS = ("group", "system", "question_type", "category")


def fmt(value: Any, digits: int = 3) -> str:
    """A number for a table: floats to ``digits`` decimals, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("ragscore")
    except PackageNotFoundError:
        return "dev"


def metric_rows(metrics: dict[str, MetricSummary]) -> list[dict[str, Any]]:
    return [
        {"name": name, "mean": fmt(m.mean), "n": thousands(m.n), "ci": ci_text(m.ci95),
         "unscorable": unscorable_text(m),
         "errors": m.errors, "first_error": m.first_error, "why_unscorable": reasons_text(m.unscorable_reasons),
         "lower_better": not higher_is_better(name)}
        for name, m in metrics.items()
    ]  # fmt: skip


def _distributions(summary: RunSummary, stats: ItemStats) -> list[dict[str, str]]:
    out = []
    for name in summary.metrics:
        counts = stats.values.get(name)
        labels: list[float] | list[tuple[float, float]] = []
        values: list[int] = []
        if counts is not None and counts.counts:
            lo, hi = min(counts.counts), max(counts.counts)
            unit = 0.0 <= lo and hi <= 1.0
            labels, values = counts.histogram(lo=0.0 if unit else None, hi=1.0 if unit else None)
        out.append({"title": name, "svg": plots.histogram(labels, values, f"distribution of {name}")})
    return out


def _breakdown(dim: str, tree: dict[str, dict[str, MetricSummary]]) -> dict[str, Any]:
    if not tree:
        return {"dim": dim, "empty": True}
    metrics = sorted({m for per in tree.values() for m in per})
    plot_list = []
    for name in metrics:
        bars = [
            plots.Bar.of(key, m.mean, m.ci95, m.n)
            for key, per in tree.items()
            if (m := per.get(name)) is not None and m.mean is not None
        ]
        if bars:
            svg = plots.hbars(bars, f"mean {name} per {dim}", value=fmt)
            plot_list.append({"title": f"{name} by {dim}", "svg": svg})
    rows = [
        {"key": key, "cells": [breakdown_cell(per[m]) if m in per else "-" for m in metrics]}
        for key, per in islice(tree.items(), MAX_TABLE_ROWS)
    ]
    shown = min(len(tree), plots.MAX_BARS)
    return {"dim": dim, "empty": False, "metrics": metrics, "plots": plot_list, "rows": rows, "total": len(tree),
            "shown": shown, "hidden": len(tree) > shown}  # fmt: skip


def _percent(value: float) -> str:
    return f"{value:.1f}%"


def _judge(summary: RunSummary, suite: dict[str, Any] | None) -> dict[str, Any]:
    judge = dict(summary.judge)
    agreement = judge.pop("agreement", None) or {}
    counters = [(k, fmt(v, 4) if isinstance(v, float) else v) for k, v in judge_counters(judge).items()]
    used = judge_used(summary.judge)
    facts = judge_facts(summary.judge, suite)
    rows = [
        {"name": name, "n": thousands(a.get("n", 0)), "kappa": kappa_text(a),
         "percent": "-" if a.get("percent") is None else _percent(a["percent"])}
        for name, a in agreement.items()
    ]  # fmt: skip
    with_n = [(name, a) for name, a in agreement.items() if a.get("n")]
    figures = []
    if with_n:
        pct = [plots.Bar(name, a["percent"], n=a["n"]) for name, a in with_n if a.get("percent") is not None]
        kappa = [plots.Bar(name, a["kappa"], n=a["n"]) for name, a in with_n if a.get("kappa") is not None]
        if pct:
            svg = plots.hbars(pct, "percent agreement", 0, 100, value=_percent)
            figures.append({"title": "percent agreement", "svg": svg})
        if kappa:
            svg = plots.hbars(kappa, "Cohen's kappa", -1.0, 1.0, color=plots.ALT_COLOR, value=fmt)
            figures.append({"title": "Cohen's kappa", "svg": svg})
    legend = judge_legend(k for k, _ in counters)
    return {"used": used, "counters": counters, "legend": legend, "agreement": rows, "plots": figures, "facts": facts}


def _embedding(summary: RunSummary, suite: dict[str, Any] | None) -> dict[str, Any]:
    counters = list(embedding_counters(summary).items())
    return {"used": bool(summary.embedding), "counters": counters, "facts": embedding_facts(suite)}


def _worst_row(item: WorstItem, texts: ItemTexts) -> dict[str, Any]:
    question, answer = texts.of(item.key)
    return {"id": item.id, "system": item.system, "group": item.group, "score": fmt(item.score),
            "others": item.others_text(),
            "question": question, "answer": answer, "why": preview(item.why), "details": item.details,
            "errors": item.errors}  # fmt: skip


def _worst(summary: RunSummary, stats: ItemStats, texts: ItemTexts) -> list[dict[str, Any]]:
    """Per output, its worst items with what they asked and answered."""
    return [
        {
            "name": name,
            "items": [_worst_row(w, texts) for w in items],
            "best": fmt(best),
            "tied": tied_text(stats, name, items),
        }
        for name, items, best in stats.shown_worst(summary.metrics)
    ]


def _when(ts: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(float(ts)))
    except (TypeError, ValueError):
        return str(ts)


def _facts(summary: RunSummary, info: dict[str, Any]) -> list[tuple[str, Any]]:
    facts: list[tuple[str, Any]] = [("run id", summary.run_id), ("suite", summary.suite), ("state", summary.state)]
    if info.get("dataset"):
        facts.append(("dataset", home_relative(info["dataset"])))
    if info.get("format"):
        facts.append(("format", info["format"]))
    suite = info.get("suite") or {}
    if suite.get("metrics"):
        names = [m if isinstance(m, str) else m.get("name") for m in suite["metrics"]]
        facts.append(("metrics", ", ".join(str(n) for n in names)))
    if info.get("queues"):
        facts.append(("queues", ", ".join(info["queues"])))
    timing = summary.timing
    if "submitted_at" in timing:
        facts.append(("submitted", _when(timing["submitted_at"])))
    if "resumed_at" in timing:  # scoring and wall time count from here
        facts.append(("resumed", _when(timing["resumed_at"])))
    for key, label in (("submit_s", "submit"), ("scoring_s", "scoring"), ("aggregate_s", "aggregation"),
                       ("wall_s", "wall time")):  # fmt: skip
        if timing.get(key) is not None:
            facts.append((label, f"{timing[key]:.2f} s"))
    return facts


def _gates(results: list[GateResult]) -> dict[str, Any] | None:
    """The Gates section: the verdict, the gate table's columns and rows (failed first) and what its regression
    gates compared with; None without gates."""
    if not results:
        return None
    rows = [{"cells": gate_cells(r), "passed": r.passed} for r in failed_first(results)]
    return {"verdict": verdict(results), "failed": bool(failed(results)), "columns": GATE_COLUMNS, "rows": rows,
            "note": regression_note(results)}  # fmt: skip


def render_html(
    summary: RunSummary,
    stats: ItemStats,
    info: dict[str, Any] | None = None,
    failed_rows: list[dict[str, Any]] | None = None,
    texts: ItemTexts | None = None,
    gates: list[GateResult] | None = None,
) -> str:
    """The whole page; ``stats`` come from one pass over the items, ``info`` from the store or run_info.json,
    ``texts`` (the worst items' questions and answers) from the run's dataset, ``gates`` (None or none: no section)
    from its gates.json."""
    texts = texts or ItemTexts()
    info = info or {}
    suite = info.get("suite")
    # group, system and question_type always have a section (saying so when no item has one).
    breakdowns = [
        _breakdown(dim, tree) for dim in _DIMENSIONS if (tree := getattr(summary, f"by_{dim}")) or dim != "category"
    ]
    judge, embedding = _judge(summary, suite), _embedding(summary, suite)
    sections = [("gates", "Gates")] if gates else []
    sections += [("summary", "Summary"), ("distributions", "Distributions")]
    sections += [(f"by-{b['dim']}", f"By {b['dim']}") for b in breakdowns]
    sections += [("targets", "Targets")] if summary.target else []
    sections += [("judge", "Judge")] if judge["used"] else []
    sections += [("embedding", "Embeddings")] if embedding["used"] else []
    sections += [("worst", "Worst items")] + ([("errors", "Errors")] if stats.error_examples else [])
    sections += [("failed-rows", "Unreadable rows")] if failed_rows else []
    sections += [("run", "Run facts")]
    wall = summary.timing.get("wall_s")
    context = {
        "s": summary,
        "css": CSS,
        "version": version(),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "wall": f"{wall:.1f} s{since_resume(summary)}" if isinstance(wall, (int, float)) else None,
        "sections": sections,
        "scored": scored_text(summary),
        "gates": _gates(gates or []),
        "metric_rows": metric_rows(summary.metrics),
        "means_note": MEANS_NOTE,
        "note_lines": retrieved_nothing_lines(summary),
        "error_lines": error_lines(summary),
        "warning_lines": warning_lines(summary),
        "distributions": _distributions(summary, stats),
        "breakdowns": breakdowns,
        "judge": judge,
        "embedding": embedding,
        "target_columns": TARGET_COLUMNS,
        "targets_note": TARGETS_NOTE,
        "agreement_columns": AGREEMENT_COLUMNS,
        "targets": target_rows(summary),
        "target_facts": target_facts(suite),
        "worst_k": stats.worst_k,
        "others_note": OTHERS_NOTE,
        "worst": _worst(summary, stats, texts),
        "texts_note": texts.note,
        "preview_chars": MAX_PREVIEW_CHARS,
        "errors": stats.error_examples,
        "failed_rows": [
            {"at": failed_row_at(r), "error": r.get("error", "")} for r in (failed_rows or [])[:MAX_FAILED_ROWS]
        ],
        "facts": _facts(summary, info),
        "suite_json": json.dumps(suite, indent=2, ensure_ascii=False) if suite else "",
    }
    return environment().get_template("report").render(**context)
