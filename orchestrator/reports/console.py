"""The summary table printed at the end of a run."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ragscore_workers.schemas import RunSummary

__all__ = ["error_lines", "print_summary"]


def error_lines(summary: RunSummary) -> list[str]:
    """One line per metric output with errors: how many, and the first message (why it failed)."""
    lines = []
    for name, m in summary.metrics.items():
        if not m.errors:
            continue
        every = " (every item)" if not m.n and not m.unscorable else ""
        noun = "error" if m.errors == 1 else "errors"
        lines.append(f"{name}: {m.errors} {noun}{every}; first: {m.first_error or '?'}")
    return lines


def print_summary(summary: RunSummary, console: Console | None = None) -> None:
    """One row per metric output: mean, n, 95% CI, unscorable, errors."""
    console = console or Console()
    table = Table(title=f"ragscore {summary.run_id} · {summary.suite} · {summary.state}")
    for col in ("metric", "mean", "n", "95% CI", "unscorable", "errors"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for name, m in summary.metrics.items():
        table.add_row(
            name,
            "-" if m.mean is None else f"{m.mean:.3f}",
            str(m.n),
            f"[{m.ci95[0]:.3f}, {m.ci95[1]:.3f}]" if m.ci95 else "-",
            str(m.unscorable),
            str(m.errors),
        )
    console.print(table)
    for line in error_lines(summary):
        console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)
    wall = summary.timing.get("wall_s")
    console.print(
        f"{summary.items} items, {summary.scored} scored, {summary.failed_rows} unreadable rows"
        + (f", {wall:.1f} s" if wall is not None else "")
    )
