"""A :class:`~.compare.Comparison` as HTML (``compare.html``), Markdown (``compare.md``) and a console table."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from ragscore_workers.counts import counted, counted_of, thousands
from ragscore_workers.metrics.registry import LOWER_IS_BETTER, higher_is_better

from ..terminal import TerminalConsole
from . import plots
from .compare import (
    MIN_PAIRS,
    SIGNIFICANT_P,
    Comparison,
    Difference,
    alone_text,
    errors_text,
    mismatch_text,
    significance,
    unchecked_text,
    unpaired_text,
    unscored_text,
    verdict,
    worse_end,
)
from .console import LOWER_IS_BETTER_MARK
from .html import fmt, version
from .markdown import md_cell, md_text
from .templates import CSS, environment

__all__ = ["print_comparison", "print_worse", "render_compare_html", "render_compare_markdown"]


def _p(value: float | None) -> str:
    if value is None:
        return "-"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def _ci(d: Difference) -> str:
    return f"[{_signed(d.ci95[0])}, {_signed(d.ci95[1])}]" if d.ci95 else "-"


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def _diff(d: Difference) -> str:
    return "-" if d.diff is None else _signed(d.diff)


def _unpaired(d: Difference) -> str:
    """Items only the baseline / only the system scored (``3 / 0``): not paired, so not in n."""
    return f"{thousands(d.only_base)} / {thousands(d.only_arm)}"


def _unpaired_counts(c: Comparison) -> str:
    """The console's line of items one system scored and the other did not (not in n; compare.md and compare.html
    give them a column), or '' when every scored item is paired. Not of an output one of the two scored no item of:
    the notes after the table say why once for all systems (another suite, every item unscorable or errored)."""
    said: dict[str, list[str]] = {}  # outputs of the same counts (most often all of them) named once
    for d in c.differences:
        base = d.base or c.arms[0]
        if (d.only_base or d.only_arm) and c.counts[d.metric][base] and c.counts[d.metric][d.arm]:
            counts = f"{thousands(d.only_base)} of {base} only, {thousands(d.only_arm)} of {d.arm} only"
            said.setdefault(counts, []).append(d.metric)
    parts = [f"{', '.join(names)}: {counts}" for counts, names in said.items()]
    return f"not paired, so not in n (scored by one system only): {'; '.join(parts)}" if parts else ""


def _css(d: Difference) -> str:
    """good/bad when the difference is significant (:func:`~.compare.significance`), in the metric's direction."""
    return {1: "good", -1: "bad", 0: ""}[significance(d)]


def _system(c: Comparison, d: Difference) -> str:
    """The system of a difference, with what it is compared with when that is not one baseline."""
    return f"{d.arm} (vs {d.base})" if c.by_system is not None else d.arm


def _diff_rows(c: Comparison) -> list[dict[str, object]]:
    return [
        {"metric": d.metric, "arm": _system(c, d), "n": thousands(d.n), "base_mean": fmt(d.base_mean),
         "arm_mean": fmt(d.arm_mean), "diff": _diff(d), "ci": _ci(d), "p": _p(d.p), "wins": thousands(d.wins),
         "ties": thousands(d.ties), "losses": thousands(d.losses), "css": _css(d), "verdict": verdict(d),
         "unpaired": _unpaired(d)}
        for d in c.shown()
    ]  # fmt: skip


def _wins_table(c: Comparison) -> tuple[str, list[str], list[list[str]]]:
    """The wins' heading, columns and rows: a column per system, or compared by system a row per output and pair
    that names it (``before:x → after:x``), its baseline's wins then its system's; not an output of another suite that
    no question was contested on: a system of the row lacks it (as :meth:`~.compare.Comparison.shown`), not one
    compared with nothing."""
    contested = [w for w in c.wins if w["questions"] or not set(w["wins"]) & set(c.unscored.get(w["metric"], ()))]
    if c.by_system is None:
        columns = ["metric", *c.arms, "ties", "questions"]
        rows = [[w["metric"], *(thousands(w["wins"][a]) for a in c.arms), thousands(w["ties"]),
                 thousands(w["questions"])]
                for w in contested]  # fmt: skip
        return "Wins per system", columns, rows
    columns = ["metric", "pair", "baseline wins", "system wins", "ties", "questions"]
    rows = [[w["metric"], f"{w['pair'][0]} → {w['pair'][1]}", *(thousands(w["wins"][a]) for a in w["pair"]),
             thousands(w["ties"]), thousands(w["questions"])] for w in contested]  # fmt: skip
    return "Wins per pair", columns, rows


def _means(c: Comparison) -> dict[str, dict[str, str]]:
    """Per output and system: its mean and how many items it is over (``0.833 (n=24)``), ``no scored rows``, or
    ``not in its run's suite``; systems' means are each over their own scored items, so unlike counts are seen (one
    run scored fewer questions, or had errors). Not an output only one system's suite has (nothing side by side): a
    note names it (:func:`~.compare.unscored_text`)."""
    return {m: {a: _mean_cell(c, m, a) for a in per}
            for m, per in c.means.items() if len(per) - len(c.unscored.get(m, ())) > 1}  # fmt: skip


def _mean_cell(c: Comparison, metric: str, arm: str) -> str:
    """A system's cell of the means: ``0.833 (n=24)``, ``no scored rows``, or ``not in its run's suite``."""
    if arm in c.unscored.get(metric, ()):
        return "not in its run's suite"
    count = c.counts[metric][arm]
    return f"{fmt(c.means[metric][arm])} (n={thousands(count)})" if count else "no scored rows"


def _mismatch(c: Comparison) -> str:
    """The warning about ids that hold different questions (or could not be checked), and errors left out, or ''."""
    parts = [unpaired_text(c.unpaired, c.baseline_text())] if c.unpaired else []
    parts += [mismatch_text(c.mismatched, c.baseline_text())] if c.mismatched else []
    parts += [errors_text(c.errors)] if c.errors else []
    parts += [said] if (said := unscored_text(c)) else []
    parts += [alone_text(c.alone)] if c.alone and c.by_system is not None else []
    return ". ".join(parts + ([unchecked_text(c.unchecked)] if c.unchecked else []))


def render_compare_html(c: Comparison) -> str:
    """compare.html: means, differences with CI and p, a plot of the differences, wins, evaluation points."""
    figures = []
    for arm, base in c.bases.items():
        bars = [
            plots.Bar.of(d.metric, d.diff, d.ci95, d.n) for d in c.differences if d.arm == arm and d.diff is not None
        ]
        if bars:
            title = f"{arm} − {base} (mean difference, 95% CI)"
            figures.append({"title": title, "svg": plots.hbars(bars, title, -1.0, 1.0, value=_signed)})
    context = {
        "c": c, "css": CSS, "version": version(), "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "means": _means(c),
        "diffs": _diff_rows(c), "plots": figures, "wins": _wins_table(c), "points": c.points,
        "lower_better": LOWER_IS_BETTER, "mismatch": _mismatch(c), "against": _against(c),
        "verdict_note": VERDICT_NOTE,
    }  # fmt: skip
    return environment().get_template("compare").render(**context)


def _named(metric: str, mark: str = LOWER_IS_BETTER_MARK) -> str:
    """The metric's name, marked when lower is better (its wins are its falls)."""
    return metric if higher_is_better(metric) else metric + mark


def _against(c: Comparison) -> str:
    """The heading of the differences: ``against BASELINE``, or ``, each system against its namesake in RUN``."""
    return f", each system against {c.baseline_text()}" if c.by_system is not None else f" against {c.arms[0]}"


def _title(c: Comparison) -> str:
    """The console's title: every system and the baseline, or each pair compared by system."""
    if c.by_system is None:
        return f"{' vs '.join(c.arms)} (baseline {c.arms[0]})"
    pairs = ", ".join(f"{base} → {arm}" for arm, base in c.bases.items())
    return f"{pairs} (each system against {c.baseline_text()})"


def render_compare_markdown(c: Comparison) -> str:
    """compare.md: the same tables as compare.html (no plots)."""
    arms = c.arms
    lines = [f"# ragscore compare: {' vs '.join(map(md_cell, arms))}", "",
             "Paired on the questions both systems scored: mean difference, 95% paired-bootstrap CI, two-sided "
             f"sign-flip permutation p-value (seed {c.seed}).", "",
             *([f"**Warning:** {md_text(_mismatch(c))}.", ""] if _mismatch(c) else []), "## Means", "",
             "| metric | " + " | ".join(map(md_cell, arms)) + " |", "|---|" + "---|" * len(arms)]  # fmt: skip
    for m, cells in _means(c).items():
        lines.append(f"| {md_cell(_named(m))} | " + " | ".join(cells[a] for a in arms) + " |")
    lines += ["", f"## Differences{md_cell(_against(c))}", "",
              "| metric | system | shared | baseline | system mean | difference | 95% CI | p | verdict | wins | ties | "
              "losses | only one scored (baseline / system) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|", *(_diff_line(c, d) for d in c.shown()),
              "", VERDICT_NOTE]  # fmt: skip
    heading, columns, rows = _wins_table(c)
    lines += ["", f"## {heading}", "", "| " + " | ".join(map(md_cell, columns)) + " |", "|---" * len(columns) + "|"]
    lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in rows]
    if c.points:
        lines += ["", "## Evaluation points per question", "", "✓ passed, ✗ failed, – skipped, ! error, · not run", ""]
        for q in c.points:
            lines += [f"### {md_cell(q['id'])}", "", "| point | " + " | ".join(map(md_cell, arms)) + " |",
                      "|---|" + "---|" * len(arms)]  # fmt: skip
            for row in q["rows"]:
                lines.append(f"| {md_cell(row['point'])} | " + " | ".join(c["mark"] for c in row["cells"]) + " |")
            lines += ["| **checks** | " + " | ".join(q["scores"]) + " |", ""]
    return "\n".join(lines) + "\n"


#: What a verdict says, under the differences of compare.md and compare.html; the console's caption says it too.
VERDICT_NOTE = (
    "verdict: better or worse (in the metric's direction) when the 95% CI of the difference excludes 0 and "
    f"p < {SIGNIFICANT_P:g}, else no clear difference; too few pairs under {MIN_PAIRS} shared questions (no p could "
    f"fall below {SIGNIFICANT_P:g}). Each metric output is judged on its own, with no correction for testing "
    "several: of 20 outputs with no real difference, about one may read better or worse by chance."
)


def _diff_line(c: Comparison, d: Difference) -> str:
    """One row of compare.md's differences."""
    return (f"| {md_cell(_named(d.metric))} | {md_cell(_system(c, d))} | {thousands(d.n)} | {fmt(d.base_mean)} | "
            f"{fmt(d.arm_mean)} | {_diff(d)} | {_ci(d)} | {_p(d.p)} | {verdict(d)} | {thousands(d.wins)} | "
            f"{thousands(d.ties)} | {thousands(d.losses)} | {_unpaired(d)} |")  # fmt: skip


def _legend(c: Comparison) -> str:
    """What the console's columns are: which system minus which, the interval's method, what p is, whose wins."""
    arm, base = (c.arms[1], c.arms[0]) if len(c.arms) == 2 else ("system", c.baseline_text())
    return (f"diff: mean of {arm} − {base} per question, over the n questions both scored; 95% CI: paired "
            "bootstrap; p: how likely a diff at least this large, either way, is with no real difference "
            f"(sign-flip permutation); W/T/L: questions where {arm} is better / equal / worse; "
            f"{VERDICT_NOTE}")  # fmt: skip


#: Columns a name (metric, system) should keep before the table is made narrower to make room (wins, ties and losses
#: one under the other, the interval's ends too, the verdict a word a line, one space around each column).
NAME_ROOM = 20
#: Columns each name keeps at least in the narrowest table: a terminal that leaves them fewer (under ~70 columns with a
#: system column, ~65 without) gets each difference as a block of its own, its names whole (:func:`_print_blocks`).
NAME_MIN = 10


def print_comparison(c: Comparison, console: Console | None = None) -> None:
    """The differences table on the console."""
    from rich import box
    from rich.markup import escape

    console = console or TerminalConsole()
    table = Table(title=escape(_title(c)), box=box.SIMPLE_HEAD, caption=escape(_legend(c)), caption_justify="left")
    shown = c.shown()
    one_arm = len(c.arms) == 2  # the title names the one system compared: no column repeats it
    wtl = [f"{thousands(d.wins)}/{thousands(d.ties)}/{thousands(d.losses)}" for d in shown]
    rows = [[_named(d.metric, " ↓"), escape(_system(c, d)), thousands(d.n), _diff(d), _ci(d), _p(d.p), verdict(d), w]
            for d, w in zip(shown, wtl, strict=True)]  # fmt: skip
    if any(not higher_is_better(d.metric) for d in shown):
        table.caption = f"{table.caption}\n↓ lower is better: a win is a lower score"
    if unpaired := _unpaired_counts(c):
        table.caption = f"{table.caption}\n{escape(unpaired)}"
    columns = ["metric", "system", "n", "diff", "95% CI", "p", "verdict", "W/T/L"]
    if one_arm:
        columns, rows = [columns[0], *columns[2:]], [[r[0], *r[2:]] for r in rows]
    names = 2 if not one_arm else 1
    interval, said = columns.index("95% CI"), columns.index("verdict")

    def width(i: int, split: Callable[[str], list[str]] = str.splitlines) -> int:
        return max(len(part) for cell in (columns[i], *(r[i] for r in rows)) for part in split(cell))

    room = sum(min(width(i), NAME_ROOM) for i in range(names))  # what the names should keep
    whole = sum(width(i) for i in range(names))  # and what they take on one line
    verdict_room = width(said)  # the verdict on one line; its words wrap where that would fold a name

    def rest(padding: int) -> int:  # the other columns, ``padding`` around each (rich adds one between two)
        return sum(width(i) for i in range(names, len(columns)) if i != said) + (padding + 1) * len(columns) - 1

    stacked = [f"{thousands(d.wins)} W\n{thousands(d.ties)} T\n{thousands(d.losses)} L" for d in shown]
    narrower = max(len(line) for cell in stacked for line in cell.split("\n")) < width(len(columns) - 1)
    plain = [list(row) for row in rows]
    squeezed = rest(2) + 2 + width(said, str.split) + room > console.width and narrower
    if squeezed:
        # wins, ties and losses one under the other, the interval's ends too, one space between two columns
        for row, cell in zip(rows, stacked, strict=True):
            row[-1] = cell
            row[interval] = row[interval].replace(" ", "\n ")
        table.pad_edge, table.show_edge, table.collapse_padding = False, False, True
        verdict_room = min(verdict_room, max(width(said, str.split), console.width - rest(1) - whole))
    else:
        verdict_room = min(verdict_room, max(width(said, str.split), console.width - rest(2) - 2 - whole))
    if console.width - (rest(1) if squeezed else rest(2) + 2) - width(said, str.split) < names * NAME_MIN:
        _print_blocks(table, columns, plain, names, console)  # the names would fold to a few letters a line
        return
    for i, col in enumerate(columns):
        if i < names:  # names fold in a narrow terminal; numbers are never cut (n 1,000,000 read as 10000…)
            table.add_column(col, justify="left", overflow="fold")
        elif i == said:  # words wrap, never a word cut, as wide as leaves the names their room
            table.add_column(col, justify="left", width=verdict_room)
        else:
            table.add_column(col, justify="right", no_wrap=True, min_width=width(i))
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_blocks(table: Table, columns: list[str], rows: list[list[str]], names: int, console: Console) -> None:
    """:func:`print_comparison`'s ``table`` for a terminal too narrow for its names: each row a block, its ``names``
    first cells on a line of their own (whole, wrapped at their spaces), then each other cell under its column's
    name; the title above, the caption below."""
    from rich.padding import Padding

    console.print(table.title, style="table.title")
    for row in rows:
        figures = Table.grid(padding=(0, 1))
        figures.add_column(no_wrap=True)
        figures.add_column()
        for column, cell in zip(columns[names:], row[names:], strict=True):
            figures.add_row(column, cell)
        console.print(" · ".join(row[:names]), style="bold")
        console.print(Padding(figures, (0, 0, 0, 2), expand=False))
    console.print(table.caption, style="table.caption")


def print_worse(
    c: Comparison, failures: list[tuple[Difference, str]], margin: float | None, console: Console | None = None
) -> None:
    """``--fail-on-worse``'s verdict (to stderr by default, as the run's gates): a table of the differences that fail
    it (metric, system, n, diff, 95% CI, p, the CI's worse end, why), or one line when none does."""
    from rich.markup import escape

    console = console or TerminalConsole(stderr=True)
    gate = "--fail-on-worse" + (f" --worse-margin {margin:g}" if margin is not None else "")
    total = len(c.gated())
    if not failures:
        than = f"more than {margin:g} worse" if margin is not None else "significantly worse"
        every = f"{'all ' if total > 1 else ''}{counted(total, 'difference')}"
        console.print(escape(f"{gate} holds on {every}: no system is {than} than "
                             f"{c.baseline_text()}"), highlight=False, soft_wrap=True)  # fmt: skip
        return
    from rich import box

    table = Table(title=escape(f"{gate}: {counted_of(len(failures), total, 'difference')} failed"),
                  box=box.SIMPLE_HEAD)  # fmt: skip
    for col in ("metric", "system", "n", "diff", "95% CI", "p", "worse end", "why"):
        table.add_column(col, justify="right" if col in ("n", "diff", "95% CI", "p", "worse end") else "left")
    for d, why in failures:
        end = worse_end(d)
        table.add_row(escape(_named(d.metric, " ↓")), escape(_system(c, d)), thousands(d.n), _diff(d), _ci(d), _p(d.p),
                      "-" if end is None else f"{end:+.3f}", escape(why))  # fmt: skip
    console.print(table)
