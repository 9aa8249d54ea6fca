"""The worst items of report.html and report.md show what was asked and answered, read back from the run's
dataset (one pass, only the few worst rows); a dataset changed or gone since the run is said, never shown."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.reports import from_dir, write_reports

from ..fakes.fake_rag import answer_locally
from ..support import fingerprint_before_reader_versions

pytestmark = pytest.mark.integration

LONG = "Why " + "very " * 60 + "long?"  # over the 200 characters a preview keeps


@pytest.fixture(scope="module")
def run_dir() -> Iterator[Path]:
    """One embedded run of exact_match over a file with one wrong answer, a long question, markup, a bad line."""
    with tempfile.TemporaryDirectory(prefix="rsw-", dir="/tmp") as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGSCORE_HOME", str(Path(tmp) / "h"))
        mp.delenv("RAGSCORE_BROKER_URL", raising=False)
        rows = [
            {"id": "good", "question": "What is 2+2?", "answer": "4", "reference": "4"},
            {"id": "bad", "question": "Capital of <b>France</b>?", "answer": "Lyon <i>", "reference": "Paris"},
            {"id": "long", "question": LONG, "answer": "no", "reference": "yes"},
        ]
        dataset = Path(tmp) / "data.jsonl"
        lines = [json.dumps(r) for r in rows]
        dataset.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n", encoding="utf-8")
        with pytest.warns(UserWarning, match="1 row was unreadable"):
            result = evaluate(dataset, {"name": "texts", "metrics": ["exact_match"]}, out=Path(tmp) / "out")
        yield result.out_dir


def _worst_md(text: str) -> str:
    return text.split("## Worst items")[1].split("\n## ")[0]


def test_worst_items_show_the_question_and_answer_escaped_and_cut(run_dir: Path) -> None:
    html = (run_dir / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    assert "Capital of &lt;b&gt;France&lt;/b&gt;?" in html and "Lyon &lt;i&gt;" in html
    assert "What is 2+2?" not in html  # the item with the best score is not among the worst
    assert LONG not in html and LONG[:199] + "…" in html
    md = _worst_md((run_dir / "report.md").read_text(encoding="utf-8"))
    row = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    assert "Capital of \\<b\\>France\\</b\\>?" in row and "Lyon \\<i\\>" in row and "0.000" in row
    assert LONG[:199] + "…" in md


def test_report_md_lists_the_unreadable_rows_with_their_line(run_dir: Path) -> None:
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    section = md.split("## Unreadable rows")[1]
    assert "| line 2 |" in section and "JSON" in section


def test_a_dataset_changed_or_gone_since_the_run_is_said_not_shown(run_dir: Path, tmp_path: Path) -> None:
    dataset = run_dir.parent / "data.jsonl"
    original = dataset.read_text(encoding="utf-8")
    try:
        dataset.write_text(original.replace("Lyon <i>", "Marseille"), encoding="utf-8")
        write_reports(from_dir(run_dir), tmp_path / "changed", ["md", "html"])
        dataset.unlink()
        write_reports(from_dir(run_dir), tmp_path / "gone", ["md", "html"])
    finally:
        dataset.write_text(original, encoding="utf-8")
    for case, said in (("changed", "changed since the run"), ("gone", "is gone")):
        md = (tmp_path / case / "report.md").read_text(encoding="utf-8")
        html = (tmp_path / case / "report.html").read_text(encoding="utf-8")
        for text in (_worst_md(md), html.split('id="worst"')[1]):
            assert said in text, case
            assert "Marseille" not in text and "Lyon" not in text, case
            assert ("Capital" in text) == (case == "changed"), case  # the question is still the one scored


def _copy_with_fingerprint(run_dir: Path, copy: Path, fingerprint: str) -> Path:
    """A copy of the run's folder whose run_info.json records ``fingerprint`` as its dataset's."""
    copy.mkdir()
    for name in ("items.jsonl", "summary.json", "failed_rows.jsonl"):
        (copy / name).write_bytes((run_dir / name).read_bytes())
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    assert info["dataset_fingerprint"]
    (copy / "run_info.json").write_text(json.dumps(info | {"dataset_fingerprint": fingerprint}), encoding="utf-8")
    return copy


def test_a_run_made_by_another_version_shows_its_questions_but_no_answer(run_dir: Path, tmp_path: Path) -> None:
    """A fingerprint that is not the dataset's (another version's of other bytes, or one digesting what it no
    longer can): every report said "changed" and showed nothing; the questions are checked one by one by their
    question_sha."""
    copy = _copy_with_fingerprint(run_dir, tmp_path / "run", "0" * 32)
    write_reports(from_dir(copy), tmp_path / "out", ["md", "html"])
    md = _worst_md((tmp_path / "out" / "report.md").read_text(encoding="utf-8"))
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    assert "Capital of \\<b\\>France\\</b\\>?" in md and "Capital of &lt;b&gt;France&lt;/b&gt;?" in html
    for text in (md, html):
        assert "answers are not shown" in text and "Lyon" not in text


def test_a_run_whose_unchanged_dataset_older_loaders_read_shows_its_questions_and_answers(
    run_dir: Path, tmp_path: Path
) -> None:
    """A run made before the loaders had a version recorded the fingerprint that digested the package version: its
    bytes unchanged, its reports showed no answer after the upgrade; they show them, as these loaders read them
    (questions checked by their question_sha), and say so."""
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    before = fingerprint_before_reader_versions(Path(info["dataset"]), info["format"])
    write_reports(from_dir(_copy_with_fingerprint(run_dir, tmp_path / "run", before)), tmp_path / "out", ["md", "html"])
    md = _worst_md((tmp_path / "out" / "report.md").read_text(encoding="utf-8"))
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    assert "Capital of \\<b\\>France\\</b\\>?" in md and "Lyon \\<i\\>" in md
    assert "Capital of &lt;b&gt;France&lt;/b&gt;?" in html and "Lyon &lt;i&gt;" in html
    for text in (md, html):
        assert "is unchanged since the run, which an older ragscore (its loaders" in text and "version 1," in text
        assert "changed since the run (" not in text and "answers are not shown" not in text


def test_a_run_that_asked_a_target_shows_the_question_but_not_the_datasets_answer(tmp_path: Path) -> None:
    target = {"system": "library", "callable": "tests.fakes.fake_rag:callable_target",
              "request": {"question": "{question}"}}  # fmt: skip
    right = "What does record d2 say? (question 2)"  # the target answers it as its reference says: not worst
    reference = answer_locally("exact", {"question": right})["answer"]
    rows = [{"id": "t1", "question": "What does record d1 say? (question 1)", "answer": "STALE dataset answer",
             "reference": "nothing the target says"},
            {"id": "t2", "question": right, "reference": reference}]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
        mp.delenv("RAGSCORE_BROKER_URL", raising=False)
        result = evaluate(rows, {"metrics": ["exact_match"], "target": target}, out=tmp_path / "out")
    for name in ("report.md", "report.html"):
        text = (result.out_dir / name).read_text(encoding="utf-8")
        assert "What does record d1 say? (question 1)" in text, name
        assert "STALE" not in text, name


def test_a_metric_every_item_scored_alike_is_said_to_have_one_score_not_the_best(tmp_path: Path) -> None:
    """Every answer wrong: exact_match's 0.000 is the worst score there is, never called "the best"."""
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "answer": "no", "reference": "yes"} for i in range(3)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
        mp.delenv("RAGSCORE_BROKER_URL", raising=False)
        result = evaluate(rows, {"name": "alike", "metrics": ["exact_match"]}, out=tmp_path / "out")
    md = _worst_md((result.out_dir / "report.md").read_text(encoding="utf-8"))
    html = (result.out_dir / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    for text in (md, html):
        assert "Every scored item has the same score (0.000)" in text
        assert "best score" not in text


def test_worst_items_say_why_a_code_test_and_a_checks_point_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing program's reason (the assert, the timeout, the missing network) is in the report, not only in
    items.jsonl: a code-generation row has no answer to show, so its score alone said nothing. Its answer cell, which
    read ``-``, shows the first line of the code that was scored, as a question is shown."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    test = {"test": "assert add(2, 3) == 5"}
    rows = [
        {"id": "right", "code": "def add(a, b):\n    return a + b\n"},
        {"id": "wrong", "code": "def add(a, b):\n    return a - b\n",
         "checks": [{"id": "asserts", "type": "code_test", "params": test}]},
    ]  # fmt: skip
    rows[0]["checks"] = rows[1]["checks"]
    suite = {"name": "why", "metrics": ["checks", {"name": "code_test", "params": test}]}
    out = evaluate(rows, suite, out=tmp_path / "out").out_dir
    why = 'exit code 1, expected 0 (its stderr ends "AssertionError")'
    md = _worst_md((out / "report.md").read_text(encoding="utf-8"))
    assert "| why |" in md
    lines = [line for line in md.splitlines() if line.startswith("| 1 | wrong |")]
    assert len(lines) == 2 and f"| {why} |" in lines[1] and f"| asserts: {why} |" in lines[0]
    assert all("| - | def add(a, b): … |" in line for line in lines)  # no question; the code's first line
    html = (out / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    assert f"asserts: {why}".replace('"', "&#34;") in html and "def add(a, b): …" in html


def test_worst_items_why_of_a_code_test_ends_with_its_notes_as_a_checks_points_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit taken as its range's end is in code_test's ``notes``: the why said only its failures."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    rows = [{"id": "right", "code": "def add(a, b):\n    return a + b\n"},
            {"id": "wrong", "code": "def add(a, b):\n    return a - b\n"}]  # fmt: skip
    params = {"test": "assert add(2, 3) == 5", "timeout_s": 1000}
    out = evaluate(rows, {"name": "notes", "metrics": [{"name": "code_test", "params": params}]}, out=tmp_path / "o")
    why = (
        'exit code 1, expected 0 (its stderr ends "AssertionError"); timeout_s 1000 was taken as 600, the most the '
        "sandbox takes"
    )
    [line] = [
        line for line in _worst_md((out.out_dir / "report.md").read_text("utf-8")).splitlines() if "wrong" in line
    ]
    assert f"| {why} |" in line


def test_worst_items_why_names_only_the_points_that_count_and_shows_the_programs_words_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An informational point moves no score: it is not why the item failed. The quote of the program's stderr is the
    untrusted code's own text: markup and terminal controls in it stay text in report.md and report.html."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    checks = [{"id": "asserts", "type": "code_test", "params": {"test": "assert add(2, 3) == 5"}},
              {"id": "tone", "type": "regex", "params": {"pattern": "please"}, "informational": True}]  # fmt: skip
    hostile = 'raise SystemExit("<img src=x onerror=alert(1)>|\\x1b[2J")\n'
    rows = [
        {"id": "right", "answer": "please", "code": "def add(a, b):\n    return a + b\n", "checks": checks},
        {"id": "wrong", "answer": "no", "code": hostile, "checks": checks},
    ]
    out = evaluate(rows, {"name": "why", "metrics": ["checks"]}, out=tmp_path / "out").out_dir
    md = _worst_md((out / "report.md").read_text(encoding="utf-8"))
    [line] = [line for line in md.splitlines() if line.startswith("| 1 | wrong |")]
    assert "asserts: exit code 1, expected 0" in line and "tone" not in line
    assert "\x1b" not in md and r"\<img src=x onerror=alert(1)\>\|\x1b\[2J" in line
    html = (out / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    assert "\x1b" not in html and "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;|\\x1b[2J" in html
    assert "tone:" not in html
