"""What a reader of a run of thousands of items sees: counts written alike in every table (``2,200``, as the
header's ``2,200 items``), and worst items that say when they are a few of many items tied at the worst score."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator import evaluate
from orchestrator.reports import from_dir
from orchestrator.reports.compare import compare
from orchestrator.reports.compare_view import render_compare_html, render_compare_markdown

pytestmark = pytest.mark.integration

N = 1_100
#: Questions each system answers right: the rest (1,000 and 800) score 0, exact_match's worst score.
RIGHT = {"a": 100, "b": 300}


def _rows() -> list[dict[str, Any]]:
    return [
        {"id": f"q{i:04d}", "system": system, "question": f"Where is {i}?", "reference": f"city {i}",
         "answer": f"city {i}" if i < right else "elsewhere"}
        for system, right in RIGHT.items()
        for i in range(N)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir() -> Iterator[Path]:
    """One embedded run of exact_match over 2 systems x 1,100 questions."""
    with tempfile.TemporaryDirectory(prefix="rsn-", dir="/tmp") as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGSCORE_HOME", str(Path(tmp) / "h"))
        mp.delenv("RAGSCORE_BROKER_URL", raising=False)
        result = evaluate(_rows(), {"name": "numbers", "metrics": ["exact_match"]}, out=Path(tmp) / "out")
        yield result.out_dir


def _section(text: str, start: str, end: str) -> str:
    return text.split(start)[1].split(end)[0]


def test_worst_items_say_how_many_items_share_the_worst_score(run_dir: Path) -> None:
    tied = "1,800 of 2,200 scored items (81.8%) have the worst score, 0.000; the 10 listed are the first of them."
    md = _section((run_dir / "report.md").read_text(encoding="utf-8"), "## Worst items", "\n## ")
    assert tied in md
    html = _section((run_dir / "report.html").read_text(encoding="utf-8"), 'id="worst"', "<h2")
    assert tied in html


def test_report_tables_write_counts_with_thousands_separators(run_dir: Path) -> None:
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    assert re.search(r"^\| exact_match \| 0\.182 \| 2,200 \| \[[0-9., ]+\] \| 0 \| 0 \|$", md, re.M)
    assert re.search(
        r"^\| a \| 0\.091 \[0\.0\d\d, 0\.1\d\d\] \(n=1,100\) \|$", _section(md, "## By system", "\n## "), re.M
    )
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    summary = _section(html, 'id="summary"', "</table>")
    assert "<td>2,200</td>" in summary and "<td>2200</td>" not in summary
    assert re.search(
        r"<td>0\.091 \[0\.0\d\d, 0\.1\d\d\] \(n=1,100\)</td>", _section(html, 'id="by-system"', "</details>")
    )


def test_compare_tables_write_counts_with_thousands_separators(run_dir: Path) -> None:
    result = compare([from_dir(run_dir)])
    md = render_compare_markdown(result)
    diff_row = next(line for line in md.splitlines() if line.startswith("| exact_match | b |"))
    assert "| 1,100 |" in diff_row and "| 200 | 900 | 0 |" in diff_row  # shared questions; wins, ties, losses
    wins_row = _section(md, "## Wins", "\n## ").splitlines()[-1]
    assert wins_row == "| exact_match | 0 | 200 | 900 | 1,100 |"
    html = render_compare_html(result)
    assert "<td>1,100</td>" in html and "<td>1100</td>" not in html


def test_report_md_says_under_its_summary_what_the_means_are_over_as_report_html_does(run_dir: Path) -> None:
    note = "Means are over scored items only: unscorable items (the row lacks what the metric needs) and errors"
    summary_md = _section((run_dir / "report.md").read_text(encoding="utf-8"), "| metric | mean |", "\n## ")
    assert note in summary_md and "Wilson score interval" in summary_md
    summary_html = _section((run_dir / "report.html").read_text(encoding="utf-8"), 'id="summary"', "<h2")
    assert note in summary_html and "Wilson score interval" in summary_html


def test_plots_label_values_and_counts_as_the_tables_beside_them_write_them(run_dir: Path) -> None:
    by_system = _section((run_dir / "report.html").read_text(encoding="utf-8"), 'id="by-system"', "<details>")
    assert ">0.091 n=1,100</text>" in by_system and ">0.273 n=1,100</text>" in by_system  # not 0.0909 beside 0.273
    differences = _section(render_compare_html(compare([from_dir(run_dir)])), "<svg", "</svg>")
    assert ">+0.182 n=1,100</text>" in differences and "exact_match: +0.182 [+0.1" in differences


def test_both_reports_say_how_many_more_unreadable_rows_with_thousands_separators(cluster: str, tmp_path: Path) -> None:
    """A real run with 1,025 unreadable rows: report.md and report.html list the first 20 and say how many more
    failed_rows.jsonl holds; report.html wrote that count bare (``… 1005 more``) where report.md and every table
    write ``1,005``."""
    bad = [{"id": f"b{i}", "answer": True} for i in range(1_025)]  # not text: unreadable
    with pytest.warns(UserWarning, match="1,025 rows were unreadable"):
        run = evaluate([{"id": "a", "answer": "x", "reference": "x"}, *bad], {"metrics": ["exact_match"]},
                       broker=cluster, out=tmp_path / "run")  # fmt: skip
    more = "… 1,005 more in failed_rows.jsonl."
    assert more in _section((run.out_dir / "report.md").read_text(encoding="utf-8"), "## Unreadable rows", "\n## ")
    html = _section((run.out_dir / "report.html").read_text(encoding="utf-8"), 'id="failed-rows"', "<h2")
    assert more in " ".join(html.split())  # the template breaks its line anywhere


def test_worst_items_say_how_many_more_share_the_last_listed_score(cluster: str, tmp_path: Path) -> None:
    """A real run of ``checks`` (0, 0.5 or 1 per answer): 2 items at 0, then 30 at 0.5. The 10 worst ended with 8
    of the 30 and nothing said the other 22 scored the same (only ties at the worst score were said): report.md and
    report.html say how many more have the last listed score."""
    points = [{"id": k, "type": "keyword", "params": {"keywords": [k]}} for k in ("alpha", "beta")]
    answers = ["none"] * 2 + ["alpha"] * 30 + ["alpha beta"] * 5
    rows = [{"id": f"q{i:02d}", "answer": a} for i, a in enumerate(answers)]
    run = evaluate(rows, {"metrics": [{"name": "checks", "params": {"points": points}}]}, broker=cluster,
                   out=tmp_path / "run")  # fmt: skip
    said = "22 more items than listed have 0.500, the last listed score: the list keeps the first of them."
    md = _section((run.out_dir / "report.md").read_text(encoding="utf-8"), "## Worst items", "\n## ")
    assert said in md and "have the worst score" not in md
    html = _section((run.out_dir / "report.html").read_text(encoding="utf-8"), 'id="worst"', "<h2")
    assert said in html
