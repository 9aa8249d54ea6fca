"""report.html of a real run: every section, offline, escaped; and ``ragscore report`` in each format."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.reports import from_dir, write_reports

from ..support import ROOT, users_files
from .conftest import SECRET, RichRun

pytestmark = pytest.mark.integration


def _html(run: RichRun) -> str:
    return (run.out / "report.html").read_text(encoding="utf-8")


class _Sections(HTMLParser):
    """The ids of a page's ``<h2>`` sections and the anchors its ``<nav>`` links to."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.links: list[str] = []
        self._in_nav = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "h2" and attr.get("id"):
            self.headings.append(str(attr["id"]))
        self._in_nav = self._in_nav or tag == "nav"
        if tag == "a" and self._in_nav:
            self.links.append(str(attr.get("href", "")).removeprefix("#"))

    def handle_endtag(self, tag: str) -> None:
        self._in_nav = self._in_nav and tag != "nav"


def test_run_writes_a_self_contained_report_with_every_section(rich_run: RichRun) -> None:
    html = _html(rich_run)
    sections = _Sections(html)
    for section in ("summary", "distributions", "by-group", "by-system", "by-question_type", "by-category",
                    "judge", "worst", "run"):  # fmt: skip
        assert section in sections.headings and section in sections.links, section
    assert "embedding" not in sections.headings + sections.links  # the run has no embedding metric
    # Offline: nothing is fetched (no src/href to a URL, no script); a CSP forbids loads anyway.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script" not in html.replace("&lt;script", "")
    assert "default-src 'none'" in html
    assert SECRET not in html


def test_a_run_without_judge_or_embedding_metrics_has_no_such_sections(cluster: str, tmp_path: Path) -> None:
    """A cpu-only run's page listed "Judge" and "Embeddings" in its navigation and headed a section of each saying
    there was nothing: it shows only what the run had, as report.md does."""
    rows = [{"id": "a", "answer": "x", "reference": "x"}, {"id": "b", "answer": "y", "reference": "z"}]
    run = evaluate(rows, {"metrics": ["exact_match"]}, broker=cluster, out=tmp_path / "run")
    sections = _Sections((run.out_dir / "report.html").read_text(encoding="utf-8"))
    assert sections.links == sections.headings
    assert "summary" in sections.headings and "worst" in sections.headings
    assert not {"judge", "embedding"} & set(sections.headings)


def test_every_plot_is_well_formed_svg_with_drawn_bars(rich_run: RichRun) -> None:
    html = _html(rich_run)
    svgs = re.findall(r"<svg class=\"plot\".*?</svg>", html, flags=re.S)
    summary = json.loads((rich_run.out / "summary.json").read_text())
    outputs = list(summary["metrics"])
    # a distribution per output, a bar chart per output and dimension, and the two agreement charts
    per_dim = sum(len({m for per in summary[f"by_{d}"].values() for m in per}) for d in
                  ("group", "system", "question_type", "category"))  # fmt: skip
    assert len(svgs) == len(outputs) + per_dim + 2
    for svg in svgs:
        root = ET.fromstring(svg)
        bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if float(r.get("height", 0)) > 0]
        assert bars, svg[:200]


def test_report_shows_means_judge_agreement_and_worst_items_from_the_run(rich_run: RichRun) -> None:
    html = _html(rich_run)
    summary = json.loads((rich_run.out / "summary.json").read_text())
    em = summary["metrics"]["exact_match"]
    assert f"<td>{em['mean']:.3f}</td><td>{em['n']}</td>" in html
    agreement = summary["judge"]["agreement"]["answer_accuracy"]
    # the fake's two judges disagree on questions 3, 7, 11, ... (i % 4 == 3): 7 of 30, for both systems
    assert agreement["n"] == 60 and agreement["percent"] == pytest.approx(100 * 46 / 60)
    assert f"{agreement['percent']:.1f}%" in html
    worst = html.split('id="worst"')[1]
    assert "exact_match" in worst and "answer_accuracy" in worst
    # a dataset's markup is shown as text, never run
    assert "q&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_report_command_writes_each_format_from_an_output_directory(rich_run: RichRun, tmp_path: Path) -> None:
    env = {**os.environ, "RAGSCORE_HOME": str(rich_run.home)}
    for fmt, name in (("html", "report.html"), ("md", "report.md"), ("csv", "items.csv"), ("json", "summary.json")):
        out = tmp_path / fmt
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "report", str(rich_run.out), "--format", fmt, "--out", str(out)],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert (out / name).is_file(), (fmt, sorted(p.name for p in out.iterdir()))
    with (tmp_path / "csv" / "items.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 60 and {"exact_match", "recall_at_1", "checks", "answer_accuracy"} <= set(table[0])
    assert (tmp_path / "json" / "items.jsonl").read_text() == (rich_run.out / "items.jsonl").read_text()
    regenerated = (tmp_path / "html" / "report.html").read_text()
    strip = re.compile(r"Generated by ragscore .*? on [^.]*\.")
    assert strip.sub("", regenerated) == strip.sub("", _html(rich_run))


def test_report_out_refuses_a_dir_holding_files_of_the_users_with_report_names(
    rich_run: RichRun, tmp_path: Path
) -> None:
    """``report --out other`` holding the user's own summary.json and items.csv (no ragscore run wrote them) wrote
    over them, as ``run``/``results --out`` refuse to: refused (exit 2), naming the file it would replace, nothing
    written, whatever the format (a json report there made the DIR a run's, whose items.csv a csv report then
    replaced); a run's DIR, or what ``report`` wrote, is taken."""
    env = {**os.environ, "RAGSCORE_HOME": str(rich_run.home), "COLUMNS": "300"}

    def report(fmt: str, out: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "report", str(rich_run.out), "--format", fmt, "--out", str(out)],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
        )  # fmt: skip

    other = tmp_path / "other"
    before = users_files(other)
    for fmt in ("csv", "json", "md"):
        refused = report(fmt, other)
        assert refused.returncode == 2, refused.stderr
        said = " ".join(refused.stderr.split())
        assert f"{other} holds items.csv, summary.json, which no ragscore run wrote" in said, refused.stderr
        assert "choose another --out or remove them" in said and "Traceback" not in said
        assert {p.name: p.read_bytes() for p in other.iterdir()} == before
    csv_only = tmp_path / "csv-only"  # the user's items.csv alone: no json report makes it a run's DIR
    csv_only.mkdir()
    (csv_only / "items.csv").write_text("my,data\n")
    for fmt in ("json", "csv"):
        assert report(fmt, csv_only).returncode == 2
    assert sorted(p.name for p in csv_only.iterdir()) == ["items.csv"]
    assert (csv_only / "items.csv").read_text() == "my,data\n"
    # what `report` wrote before, and a run's DIR (its summary.json names the run), are ragscore's
    again = tmp_path / "again"
    for fmt in ("csv", "csv", "md", "md", "html", "html", "json", "json", "csv"):
        wrote = report(fmt, again)
        assert wrote.returncode == 0, (fmt, wrote.stderr)
    assert (again / "items.csv").read_bytes() == (rich_run.out / "items.csv").read_bytes()


def test_report_out_refuses_the_dir_of_another_run_and_writes_a_runs_own(
    rich_run: RichRun, cluster: str, tmp_path: Path
) -> None:
    """``report A --out B``, B the DIR of run X, wrote run A's report.html (summary.json, items.csv ...) over run X's
    beside X's run.json, where ``results A --out B`` refuses: refused too (exit 2), naming run X, in every format,
    nothing of X's replaced; a run's report into its own DIR (the default) is still written."""
    other = evaluate([{"id": "a", "answer": "x", "reference": "x"}], {"metrics": ["exact_match"]}, broker=cluster,
                     out=tmp_path / "x")  # fmt: skip
    env = {**os.environ, "RAGSCORE_HOME": str(rich_run.home), "COLUMNS": "300"}
    before = {p.name: p.read_bytes() for p in other.out_dir.iterdir()}

    def report(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", "report", *args],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip

    for fmt in ("html", "md", "csv", "json", "nlp-project"):
        refused = report(str(rich_run.out), "--format", fmt, "--out", str(other.out_dir))
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2 and f"holds run {other.summary.run_id}" in said, (fmt, refused.stderr)
        assert "Traceback" not in said
    assert {p.name: p.read_bytes() for p in other.out_dir.iterdir()} == before
    own = report(str(other.out_dir), "--format", "md")
    assert own.returncode == 0 and f"wrote {other.out_dir / 'report.md'}" in own.stderr, own.stderr


def test_report_from_a_directory_into_itself_keeps_its_items(rich_run: RichRun, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("summary.json", "items.jsonl", "failed_rows.jsonl", "run_info.json"):
        (copy / name).write_bytes((rich_run.out / name).read_bytes())
    written = write_reports(from_dir(copy), copy, ["json", "html"])
    assert {p.name for p in written} == {"summary.json", "report.html"}
    assert (copy / "items.jsonl").read_bytes() == (rich_run.out / "items.jsonl").read_bytes()


def test_report_command_rejects_what_is_not_a_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path), "--format", "html"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "summary.json is missing" in result.stderr


def test_report_of_a_name_that_is_neither_a_directory_nor_a_run_says_so(rich_run: RichRun) -> None:
    env = {**os.environ, "RAGSCORE_HOME": str(rich_run.home)}
    env.pop("RAGSCORE_BROKER_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", "nonexist", "--format", "md"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "nonexist: no such output directory, and no run with that id in the store" in result.stderr
