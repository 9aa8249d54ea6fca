"""``ragscore compare`` on real runs (a real Redis and two real cpu workers): a known difference is found."""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from orchestrator import evaluate
from orchestrator.reports import from_dir
from orchestrator.reports.compare import compare
from orchestrator.reports.compare_view import render_compare_html, render_compare_markdown

from ..support import ROOT

pytestmark = pytest.mark.integration

N = 100
#: Questions B answers right where A was wrong, and the reverse: B is better by (20 - 5) / 100.
GAINS, LOSSES = 20, 5
SUITE = {"name": "compare", "metrics": ["exact_match", "checks"]}


def _rows(system: str) -> list[dict[str, Any]]:
    rng = random.Random(7)
    a_right = [rng.random() < 0.5 for _ in range(N)]
    wrong_ids = [i for i in range(N) if not a_right[i]]
    right_ids = [i for i in range(N) if a_right[i]]
    flipped = set(rng.sample(wrong_ids, GAINS)) | set(rng.sample(right_ids, LOSSES))
    rows = []
    for i in range(N):
        right = a_right[i] != (system == "B" and i in flipped)
        reference = f"city {i}"
        rows.append({
            "id": f"q{i:03d}", "system": system, "question": f"Where is {i}?", "reference": reference,
            "answer": reference if right else f"somewhere else, far away from {i + 1}",
            "checks": [
                {"id": "names", "text": "Names the city", "type": "keyword", "params": {"keywords": [reference]}},
                {"id": "short", "text": "Short", "type": "length", "params": {"max": 3}},
            ],
        })  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def two_runs(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("compare")
    a = evaluate(_rows("A"), SUITE, broker=cluster, out=root / "A")
    b = evaluate(_rows("B"), SUITE, broker=cluster, out=root / "B")
    both = evaluate(_rows("A") + _rows("B"), SUITE, broker=cluster, out=root / "AB")
    return {"A": a, "B": b, "AB": both, "root": root, "broker": cluster}


def test_compare_of_two_runs_reports_the_known_difference_inside_its_ci(two_runs: dict[str, Any]) -> None:
    result = compare([from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)])
    assert result.arms == ["A", "B"]
    (em,) = [d for d in result.differences if d.metric == "exact_match"]
    assert em.n == N
    assert em.diff == pytest.approx((GAINS - LOSSES) / N, abs=1e-12)
    assert em.ci95[0] < em.diff < em.ci95[1] and em.ci95[0] > 0
    assert em.p < 0.05
    assert (em.wins, em.ties, em.losses) == (GAINS, N - GAINS - LOSSES, LOSSES)
    assert result.means["exact_match"]["B"] - result.means["exact_match"]["A"] == pytest.approx(em.diff)
    wins = {w["metric"]: w for w in result.wins}
    assert wins["exact_match"]["wins"] == {"A": LOSSES, "B": GAINS} and wins["exact_match"]["ties"] == N - 25
    # Side by side, the evaluation points of the questions where the systems differ most.
    assert len(result.points) == GAINS + LOSSES  # the questions where the systems differ
    first = result.points[0]
    assert [row["point"] for row in first["rows"]] == ["names: Names the city", "short: Short"]
    assert {c["mark"] for row in first["rows"] for c in row["cells"]} <= {"✓", "✗"}
    assert first["scores"][0] != first["scores"][1]


def test_the_console_table_never_cuts_a_number_in_a_narrow_terminal(two_runs: dict[str, Any]) -> None:
    """At 80 columns (a pipe) n read 10000… and W/T/L 0/1000000…: a million could be read as ten thousand."""
    import io

    from rich.console import Console

    from orchestrator.reports.compare_view import print_comparison

    result = compare([from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)])
    (em,) = [d for d in result.differences if d.metric == "exact_match"]
    out = io.StringIO()
    print_comparison(result, Console(file=out, width=60))
    text = out.getvalue()
    assert "…" not in text
    counts = zip((em.wins, em.ties, em.losses), "WTL", strict=True)
    assert f"{em.wins}/{em.ties}/{em.losses}" in text or all(f" {n:,} {what}" in text for n, what in counts)


def test_at_scale_the_console_table_keeps_room_for_the_names() -> None:
    """At 200,000 questions W/T/L (49,672/101,245/49,083) took so much of 80 columns that the metric and system
    names folded to a letter a line: wins, ties and losses go one under the other, and with one system compared
    (named in the title) no column repeats it."""
    import io

    from rich.console import Console

    from orchestrator.reports.compare import Comparison, Difference
    from orchestrator.reports.compare_view import print_comparison

    differences = [Difference(metric, "run-b-with-reranker", 200_000, 0.5, 0.51, 0.0123, [-0.0012, 0.0345], 0.0001,
                              49_672, 101_245, 49_083)
                   for metric in ("exact_match", "context_relevance", "answer_hallucination")]  # fmt: skip
    result = Comparison(arms=["run-a", "run-b-with-reranker"], metrics=[], means={}, counts={},
                        differences=differences, wins=[])  # fmt: skip
    out = io.StringIO()
    print_comparison(result, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert "…" not in out.getvalue() and "system" not in out.getvalue()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["exact_match"])
    assert [lines[row + k].split()[-2:] for k in range(3)] == [["49,672", "W"], ["101,245", "T"], ["49,083", "L"]]
    assert any(line.split()[:1] == ["context_relevance"] for line in lines)  # whole, not folded
    # the verdict column takes no room from the names: its words wrap, the interval's ends stack, the padding narrows
    assert any(line.split()[:2] == ["answer_hallucination", "↓"] for line in lines), lines
    assert [*lines[row].split()[-4:-2], *lines[row + 1].split()[-3:-2]] == ["no", "clear", "difference"], lines
    wide = io.StringIO()
    print_comparison(result, Console(file=wide, width=160))
    assert "49,672/101,245/49,083" in wide.getvalue()


def test_a_console_table_that_fits_keeps_its_intervals_and_w_t_l_on_one_line() -> None:
    """Wins, ties and losses (and the interval's ends) go one under the other only where the names would want room:
    at 60 questions an 80-column terminal holds them on one line, the verdict's words wrapped instead, and a terminal
    wide enough holds the verdict on one line too."""
    import io

    from rich.console import Console

    from orchestrator.reports.compare import Comparison, Difference
    from orchestrator.reports.compare_view import print_comparison

    differences = [Difference(metric, "B", 60, 0.5, 0.51, 0.0123, [-0.0012, 0.0345], 0.2, 4, 50, 6)
                   for metric in ("exact_match", "recall_at_1")]  # fmt: skip
    result = Comparison(arms=["A", "B"], metrics=[], means={}, counts={}, differences=differences, wins=[])
    for width, verdict in ((80, ["no", "clear"]), (100, ["no", "clear", "difference"])):
        out = io.StringIO()
        print_comparison(result, Console(file=out, width=width))
        (row,) = [line.split() for line in out.getvalue().splitlines() if line.split()[:1] == ["exact_match"]]
        assert row == ["exact_match", "60", "+0.012", "[-0.001,", "+0.035]", "0.2000", *verdict, "4/50/6"], row


@pytest.mark.parametrize("columns", [40, 80])
def test_a_terminal_too_narrow_for_the_names_gets_each_difference_as_a_block_with_its_names_whole(
    columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ~55 columns the table folded the system names a letter a line (at 40 it lost the metric column and cut
    the verdicts to ``verdi``): where the names would keep fewer than NAME_MIN columns each, each difference is a
    block, its metric and system whole on a line, then each figure under its name. At 80 the table stays."""
    import io

    from orchestrator.reports.compare import Comparison, Difference
    from orchestrator.reports.compare_view import print_comparison
    from orchestrator.terminal import TerminalConsole

    monkeypatch.setenv("COLUMNS", str(columns))
    arms = ["baseline", "rag-reranker", "rag-hybrid"]
    differences = [Difference(metric, arm, 1200, 0.5, 0.51, 0.0123, [-0.0012, 0.0345], 0.0001, 372, 545, 283)
                   for metric in ("exact_match", "recall_at_1") for arm in arms[1:]]  # fmt: skip
    result = Comparison(arms=arms, metrics=[], means={}, counts={}, differences=differences, wins=[])
    out = io.StringIO()
    print_comparison(result, TerminalConsole(file=out))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    assert max(map(len, lines)) <= columns and "…" not in out.getvalue(), lines
    for metric, arm in ((d.metric, d.arm) for d in differences):
        if columns == 80:  # a row of the table, its names whole
            assert [metric, arm, "1,200", "+0.012"] in [line.split()[:4] for line in lines], lines
            continue
        block = lines.index(f"{metric} · {arm}")
        assert lines[block + 1 : block + 7] == ["  n       1,200", "  diff    +0.012", "  95% CI  [-0.001, +0.035]",
                                                "  p       0.0001", "  verdict no clear difference",
                                                "  W/T/L   372/545/283"], lines  # fmt: skip


def test_the_console_table_says_what_diff_p_and_w_t_l_are(two_runs: dict[str, Any]) -> None:
    """The console printed diff, p and W/T/L with no word of which system minus which, or whose wins: only
    compare.md said it. Its caption says so, with the systems' names, or "system" and the baseline for several, and
    what p is (not only its method)."""
    import io

    from rich.console import Console

    from orchestrator.reports.compare import Comparison, Difference
    from orchestrator.reports.compare_view import print_comparison

    result = compare([from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)])
    out = io.StringIO()
    print_comparison(result, Console(file=out, width=200))
    text = " ".join(out.getvalue().split())
    assert "diff: mean of B − A per question, over the n questions both scored" in text, text
    said = "p: how likely a diff at least this large, either way, is with no real difference (sign-flip permutation)"
    assert said in text
    assert "W/T/L: questions where B is better / equal / worse" in text
    three = Comparison(arms=["a", "b", "c"], metrics=[], means={}, counts={}, wins=[],
                       differences=[Difference("mrr", "b", 3, 0.5, 0.6, 0.1, [0.0, 0.2], 0.5, 1, 1, 1)])  # fmt: skip
    out = io.StringIO()
    print_comparison(three, Console(file=out, width=200))
    text = " ".join(out.getvalue().split())
    assert "diff: mean of system − a per question" in text, text


def test_one_run_with_two_systems_compares_them_the_same_way(two_runs: dict[str, Any]) -> None:
    two = compare([from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)])
    one = compare([from_dir(two_runs["AB"].out_dir)])
    assert one.arms == two.arms == ["A", "B"]
    assert one.differences == two.differences
    flipped = compare([from_dir(two_runs["AB"].out_dir)], baseline="B")
    (em,) = [d for d in flipped.differences if d.metric == "exact_match"]
    assert flipped.arms == ["B", "A"] and em.diff == pytest.approx(-(GAINS - LOSSES) / N)
    by_path = compare(
        [from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)], baseline=f"{two_runs['B'].out_dir}/"
    )  # as the run was named: `--baseline runB/`
    assert by_path.arms == ["B", "A"]


def test_compare_command_on_run_ids_writes_html_and_markdown(two_runs: dict[str, Any], tmp_path: Path) -> None:
    env = {**os.environ, "RAGSCORE_BROKER_URL": two_runs["broker"]}
    ids = [two_runs[k].summary.run_id for k in ("A", "B")]
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "compare", *ids, "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "+0.150" in result.stdout
    html = (tmp_path / "compare.html").read_text(encoding="utf-8")
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    for text in (html, md):
        assert "+0.150" in text and "Wins per system" in text and "Evaluation points per question" in text
    assert '<svg class="plot"' in html and "default-src 'none'" in html
    assert "| exact_match | B | 100 | " in md
    summary = json.loads((two_runs["A"].out_dir / "summary.json").read_text())
    assert summary["run_id"] == ids[0]


def test_a_compare_into_a_dir_holding_another_comparison_says_it_replaces_it(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """A second ``ragscore compare`` wrote over ``./ragscore-compare`` (the default --out) without a word. The same
    comparison again replaces it silently (it reads alike); another says what it replaces, as ``run --out`` does."""
    a, b = (str(two_runs[k].out_dir) for k in ("A", "B"))
    env = {**os.environ, "RAGSCORE_BROKER_URL": two_runs["broker"], "COLUMNS": "200"}

    def compared(*runs: str) -> str:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", *runs, "--out", str(tmp_path)],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return " ".join(done.stderr.split())

    first = compared(a, b)
    assert "replaces" not in first and f"wrote {tmp_path / 'compare.html'} and {tmp_path / 'compare.md'}" in first
    assert "replaces" not in compared(a, b)  # the same comparison: nothing lost
    said = compared(b, a)
    assert f"{tmp_path} holds another comparison (A vs B): this one replaces it (give --out another DIR" in said, said
    assert (tmp_path / "compare.md").read_text(encoding="utf-8").startswith("# ragscore compare: B vs A\n")


def test_compares_without_out_each_keep_a_folder_of_their_own(two_runs: dict[str, Any], tmp_path: Path) -> None:
    """Without --out every compare wrote ``./ragscore-compare``: a second compare of other runs replaced the first's
    files (with a warning), a new user's first comparison lost. Each comparison now has a folder of its own under it,
    named by its runs in order, then --baseline and --seed; the same comparison again writes its own folder."""
    a, b = (str(two_runs[k].out_dir) for k in ("A", "B"))
    first, second = (json.loads((two_runs[k].out_dir / "summary.json").read_text())["run_id"] for k in ("A", "B"))
    env = {**os.environ, "RAGSCORE_BROKER_URL": two_runs["broker"], "COLUMNS": "250", "PYTHONPATH": str(ROOT)}

    def compared(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        said = " ".join(done.stderr.split())
        assert "replaces" not in said, said
        return said

    root = tmp_path.resolve() / "ragscore-compare"
    folders = {
        f"{first}-vs-{second}": ((a, b), "A vs B"),
        f"{second}-vs-{first}": ((b, a), "B vs A"),
        f"{first}-vs-{second}-baseline-B-seed-3": ((a, b, "--baseline", "B", "--seed", "3"), "B vs A"),
    }
    for folder, (args, _) in folders.items():
        said = compared(*args)
        assert f"wrote {root / folder / 'compare.html'} and {root / folder / 'compare.md'}" in said, said
    compared(a, b)  # the same comparison again: its folder, silently
    assert sorted(path.name for path in root.iterdir()) == sorted(folders)
    for folder, (_, heading) in folders.items():
        assert (root / folder / "compare.md").read_text(encoding="utf-8").startswith(f"# ragscore compare: {heading}\n")


def test_the_default_compare_folder_of_many_runs_is_cut_to_a_name_a_file_system_takes(
    two_runs: dict[str, Any],
) -> None:
    """Twenty runs' ids joined passed the 255 bytes of a folder's name: cut, with a digest of the whole name, so two
    comparisons that differ after the cut still get two folders."""
    from orchestrator.reports.files import COMPARE_NAME_MAX, compare_dir

    a, b = from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)
    many, other = compare_dir([a, b] * 10), compare_dir([a, b] * 9 + [b, a])
    assert len(many.name) == COMPARE_NAME_MAX and many.parent == Path("ragscore-compare"), many
    assert many.name[:-13] == other.name[:-13] and many != other, (many, other)


def test_a_compare_into_a_relative_dir_says_its_absolute_path(two_runs: dict[str, Any], tmp_path: Path) -> None:
    """``compare --out cmp`` said ``wrote cmp/compare.html``: where that is depends on where it ran. It says the
    folder's absolute path."""
    a, b = (str(two_runs[k].out_dir) for k in ("A", "B"))
    env = {**os.environ, "RAGSCORE_BROKER_URL": two_runs["broker"], "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "compare", a, b, "--out", "cmp"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    where = tmp_path.resolve() / "cmp"
    assert f"wrote {where / 'compare.html'} and {where / 'compare.md'}" in done.stderr, done.stderr


def test_compare_needs_two_systems(two_runs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at least two systems"):
        compare([from_dir(two_runs["A"].out_dir)])


def test_compare_of_runs_without_a_shared_question_is_an_error(two_runs: dict[str, Any], tmp_path: Path) -> None:
    other = [{**row, "id": f"x{row['id']}"} for row in _rows("B")]  # same answers, other ids: nothing pairs
    renamed = evaluate(other, SUITE, broker=two_runs["broker"], out=tmp_path / "X")
    with pytest.raises(ValueError, match="share no question scored by both"):
        compare([from_dir(two_runs["A"].out_dir), from_dir(renamed.out_dir)])


def test_ids_that_hold_other_questions_are_left_out_and_said(two_runs: dict[str, Any], tmp_path: Path) -> None:
    """Two datasets without ids are paired by line (row-N): their comparison read as one of the same questions."""
    rows = _rows("B")
    for row in rows[:30]:  # these ids now ask other questions (a different dataset, or reordered lines)
        row["question"] = f"Who painted {row['id']}?"
    other = evaluate(rows, SUITE, broker=two_runs["broker"], out=tmp_path / "other")
    items = [json.loads(line) for line in (other.out_dir / "items.jsonl").read_text().splitlines()]
    assert all(len(item["question_sha"]) == 12 for item in items)
    result = compare([from_dir(two_runs["A"].out_dir), from_dir(other.out_dir)])
    count, examples = result.mismatched["B"]
    assert count == 30 and examples == ["q000", "q001", "q002", "q003", "q004"]
    (em,) = [d for d in result.differences if d.metric == "exact_match"]
    assert em.n == N - 30  # only the questions both runs asked are paired
    assert result.points and not {q["id"] for q in result.points} & {f"q{i:03d}" for i in range(30)}  # nor shown
    assert result.counts["exact_match"]["B"] == N  # means and counts: each system over its own scored items
    cli = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "compare", str(two_runs["A"].out_dir), str(other.out_dir),
         "--out", str(tmp_path / "cmp")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    said = " ".join(cli.stderr.split())
    assert "30 in B (e.g. q000, q001, q002, q003, q004)" in said and "left out of the comparison" in said
    for name in ("compare.md", "compare.html"):
        assert "30 in B (e.g. q000" in (tmp_path / "cmp" / name).read_text(encoding="utf-8")
    unchanged = compare([from_dir(two_runs["A"].out_dir), from_dir(two_runs["B"].out_dir)])
    assert unchanged.mismatched == {}  # the same questions: nothing said, nothing left out
    everything = [{**row, "question": f"Another {row['id']}"} for row in _rows("B")]
    all_other = evaluate(everything, SUITE, broker=two_runs["broker"], out=tmp_path / "all")
    with pytest.raises(ValueError, match=r"share no question scored by both.*100 in B"):
        compare([from_dir(two_runs["A"].out_dir), from_dir(all_other.out_dir)])


def test_report_command_reads_a_run_from_the_store(two_runs: dict[str, Any], tmp_path: Path) -> None:
    env = {**os.environ, "RAGSCORE_BROKER_URL": two_runs["broker"]}
    run = two_runs["A"]
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", run.summary.run_id, "--format", "html", "--out",
         str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    strip = re.compile(r"Generated by ragscore .*? on [^.]*\.")
    from_store = strip.sub("", (tmp_path / "report.html").read_text(encoding="utf-8"))
    assert from_store == strip.sub("", (run.out_dir / "report.html").read_text(encoding="utf-8"))
    assert "evaluate-rows.jsonl" in from_store  # the run's facts come from the store


def _run(
    system: str,
    rows: list[tuple[str, str | None, float | str | dict[str, Any] | None]],
    metric: str | tuple[str, ...] = "exact_match",
) -> Any:
    """A run as compare reads it, built from (id, question fingerprint, exact_match score) rows; a score that is
    text is the item's error, a dict the stored result. ``metric``: the output the score is of, or several, each
    given the same score."""
    from orchestrator.reports.source import RunData
    from ragscore_workers.schemas import MetricSummary, RunSummary
    from ragscore_workers.store import RawItem

    names = (metric,) if isinstance(metric, str) else metric
    items = [
        RawItem(key=f"{system}::{qid}", meta={"id": qid, "system": system, "question_sha": sha},
                metrics=dict.fromkeys(names, score if isinstance(score, dict) else {"score": None, "error": score}
                                      if isinstance(score, str) else {"score": score, "error": None}))
        for qid, sha, score in rows
    ]  # fmt: skip
    summary = RunSummary(run_id=system, items=len(items), scored=len(items),
                         metrics={name: MetricSummary(mean=None, n=0) for name in names})  # fmt: skip
    return RunData(summary=summary, items=lambda: iter(items), failed_rows=lambda: iter([]), origin=system)


def test_three_systems_whose_ids_disagree_without_the_baseline_leave_those_ids_out_of_the_wins() -> None:
    """Questions under one id that differ between systems were only caught against a scored baseline item."""
    from ragscore_workers.schemas import question_fingerprint as sha

    base = _run("A", [("q0", sha("Where?"), 0.0), ("q2", sha("When?"), 0.0)])  # the baseline never had q1
    b = _run("B", [("q0", sha("Where?"), 1.0), ("q1", sha("Who?"), 0.0), ("q2", sha("When?"), 1.0)])
    c = _run("C", [("q0", sha("Where?"), 0.0), ("q1", sha("Which?"), 1.0), ("q2", sha("When?"), 0.0)])
    result = compare([base, b, c])
    assert result.mismatched == {} and result.unchecked == []  # nothing differs from the baseline's questions
    (em,) = [w for w in result.wins if w["metric"] == "exact_match"]
    assert em["questions"] == 2 and em["wins"] == {"A": 0, "B": 2, "C": 0}  # but q1 paired B and C wrongly
    assert result.means["exact_match"] == {"A": 0.0, "B": pytest.approx(2 / 3), "C": pytest.approx(1 / 3)}
    unscored = _run("A", [("q0", sha("Where?"), 0.0), ("q1", sha("Who?"), None), ("q2", sha("When?"), 0.0)])
    assert compare([unscored, b, c]).mismatched == {"C": (1, ["q1"])}  # its question counts, scored or not
    c_failed = _run("C", [("q0", sha("Where?"), 0.0), ("q1", sha("Which?"), None), ("q2", sha("When?"), 0.0)])
    (em,) = [w for w in compare([base, b, c_failed]).wins if w["metric"] == "exact_match"]
    assert em["questions"] == 2  # q1: only B scored it (C's differing question has no score): no contest anyway
    b_and_a = _run("A", [("q0", sha("Where?"), 0.0), ("q1", sha("Who?"), 1.0), ("q2", sha("When?"), 0.0)])
    (em,) = [w for w in compare([b_and_a, b, c_failed]).wins if w["metric"] == "exact_match"]
    assert em["questions"] == 3 and em["wins"]["A"] == 1  # A and B still contest q1: C did not score it
    edited = _run("D", [("q0", "not a fingerprint", 1.0), ("q2", None, 1.0)])
    assert compare([base, edited]).unchecked == ["D"]  # an edited file's value is ignored, not a crash


def test_compare_md_shows_the_commands_and_fields_of_its_warning_as_code_and_escapes_the_rest() -> None:
    """compare.md's warning escaped its own backticks: `ragscore run --resume DIR` read \\`ragscore run --resume
    DIR\\` in the file, and backticks, not code, on GitHub."""
    from ragscore_workers.schemas import question_fingerprint as sha

    base = _run("A", [("q0", sha("Where?"), 0.0), ("q1", sha("Who?"), "boom"), ("q2", sha("When?"), 1.0)])
    other = _run("B*", [("q0", sha("Where?"), 1.0), ("q1", sha("Which?"), 1.0), ("q2", sha("When?"), 0.0)])
    (warning,) = [line for line in render_compare_markdown(compare([base, other])).splitlines() if "Warning" in line]
    assert "(an `id` field)" in warning and "`ragscore run --resume DIR` scores them again" in warning, warning
    assert "\\`" not in warning and "1 in B\\* (e.g. q1)" in warning, warning  # a system's name stays escaped


def test_the_means_side_by_side_say_how_many_items_each_is_over(two_runs: dict[str, Any], tmp_path: Path) -> None:
    """Each system's mean is over its own scored items: a run of 60 of the 100 questions reads as such."""
    part = evaluate(_rows("B")[:60], SUITE, broker=two_runs["broker"], out=tmp_path / "part")
    result = compare([from_dir(two_runs["A"].out_dir), from_dir(part.out_dir)])
    means = result.means["exact_match"]
    md = render_compare_markdown(result)
    assert f"| exact_match | {means['A']:.3f} (n=100) | {means['B']:.3f} (n=60) |" in md
    html = render_compare_html(result)
    assert f"<td>{means['A']:.3f} (n=100)</td><td>{means['B']:.3f} (n=60)</td>" in html


def test_an_output_one_run_did_not_score_is_said_once_not_left_as_rows_of_zeros(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """Runs scored with different suites (a cheap suite on every row, embeddings on a sample) compared with their
    shared outputs, and each output one run lacks was a row of n=0 and 0/0/0 in every table, then a row of means
    reading ``- (n=0)``, and ``--fail-on-worse`` failed it as "not compared": it is said once, "only in A: checks",
    left out of the means, the differences and the wins, and the gate neither fails nor counts it."""
    only_em = evaluate(_rows("B"), {"metrics": ["exact_match"]}, broker=two_runs["broker"], out=tmp_path / "B")
    result = compare([from_dir(two_runs["A"].out_dir), from_dir(only_em.out_dir)])
    assert result.unscored == {"checks": ["B"]} and result.only_in() == {"checks": ["A"]}
    assert [d.metric for d in result.shown()] == ["exact_match"]
    said = "only in A: checks (the other compared runs' suites have no such metric)"
    cmp = tmp_path / "cmp"
    cli = _cli(str(two_runs["A"].out_dir), str(only_em.out_dir), "--fail-on-worse", "--out", str(cmp))
    assert cli.returncode == 0, cli.stderr  # B is better on exact_match; checks is no failure
    stderr = " ".join(cli.stderr.split())
    assert stderr.count("only in A: checks") == 1 and said in stderr, cli.stderr
    assert "not compared" not in stderr and "--fail-on-worse holds on 1 difference" in stderr, cli.stderr
    assert "checks" not in cli.stdout and re.search(r"exact_match +100 ", cli.stdout), cli.stdout
    md = (cmp / "compare.md").read_text(encoding="utf-8")
    assert said in md and "| checks |" not in md and "(n=0)" not in md, md
    assert re.search(r"\| exact_match \| [0-9.]+ \(n=100\) \| [0-9.]+ \(n=100\) \|", md), md
    html = unescape((cmp / "compare.html").read_text(encoding="utf-8"))
    assert said in html and '<td class="l">checks' not in html and "(n=0)" not in html
    assert '<td class="l">exact_match</td><td class="l">B</td>' in html


def test_of_three_runs_an_output_one_lacks_keeps_its_means_for_the_others(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """Three runs, the third of a suite without checks: checks' whole row of means was dropped, the means of the
    two runs that have it with it. It keeps them; the third's cell says its suite has no such metric."""
    only_em = evaluate(_rows("C"), {"metrics": ["exact_match"]}, broker=two_runs["broker"], out=tmp_path / "C")
    runs = [str(two_runs["A"].out_dir), str(two_runs["B"].out_dir), str(only_em.out_dir)]
    cli = _cli(*runs, "--fail-on-worse", "--out", str(tmp_path / "cmp"))
    assert cli.returncode == 0, cli.stderr  # B is better than A, C answers as A does
    assert " ".join(cli.stderr.split()).count("only in A, B: checks") == 1, cli.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert re.search(r"\| checks \| [0-9.]+ \(n=100\) \| [0-9.]+ \(n=100\) \| not in its run's suite \|", md), md
    html = (tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8")
    assert re.search(r"<td>[0-9.]+ \(n=100\)</td><td>not in its run&#39;s suite</td>", html), html


def test_an_output_a_system_could_score_on_no_item_is_not_said_to_be_of_another_suite(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """One run of two systems, B's rows without ``reference``: B's exact_match rows read n=0, and the note asked
    "were the runs scored with one suite?" of a single run. Its items were unscorable: "no scored rows in B" is
    said (in its cell of the means too, not ``- (n=0)``), and ``--fail-on-worse`` fails it as not compared."""
    no_reference = [{k: v for k, v in row.items() if k != "reference"} for row in _rows("B")]
    run = evaluate(_rows("A") + no_reference, SUITE, broker=two_runs["broker"], out=tmp_path / "AB")
    assert run.summary.paired_questions == N  # the workers' aggregation counts the ids both systems answered
    assert run.summary.paired_systems == {"A": 1, "B": 1}  # and, per system, the others it pairs with
    result = compare([from_dir(run.out_dir)], baseline="A")
    assert result.unscored == {} and result.unscorable == {"exact_match": ["B"]}
    said = "no scored rows in B: exact_match (every item unscorable: its run's summary says why)"
    cmp = tmp_path / "cmp"
    cli = _cli(str(run.out_dir), "--baseline", "A", "--fail-on-worse", "--out", str(cmp))
    assert cli.returncode == 3, cli.stderr
    stderr = " ".join(cli.stderr.split())
    assert f"Note: {said}" in stderr and "only in" not in stderr, cli.stderr
    assert "1 of 2 differences failed" in stderr and "not compared: no scored rows in B (every item" in stderr
    md = (cmp / "compare.md").read_text(encoding="utf-8")
    assert said in md and "suite" not in md and "(n=0)" not in md
    assert re.search(r"\| exact_match \| [0-9.]+ \(n=[0-9]+\) \| no scored rows \|", md), md
    assert "<td>no scored rows</td>" in (cmp / "compare.html").read_text(encoding="utf-8")


def test_fail_on_worse_passes_over_a_context_metric_a_system_without_contexts_has_no_score_of(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """A RAG system against an LLM alone, whose rows have no contexts (by design): verbatim scores none of them
    (``no contexts``), and ``--fail-on-worse`` failed it, "not compared", exit 3. It is not comparable by design:
    said once, not gated. Rows unscorable for another reason (no reference, above) or errors still fail."""

    def cited(row: dict[str, Any], contexts: bool) -> dict[str, Any]:
        quote = [{"source_index": 0, "quote": row["reference"]}]
        return {**row, "citations": quote, **({"contexts": [f"It is {row['reference']}."]} if contexts else {})}

    rows = [cited(row, True) for row in _rows("A")] + [cited(row, False) for row in _rows("B")]
    run = evaluate(rows, {"metrics": ["exact_match", "verbatim"]}, broker=two_runs["broker"], out=tmp_path / "AB")
    cmp = tmp_path / "cmp"
    cli = _cli(str(run.out_dir), "--baseline", "A", "--fail-on-worse", "--out", str(cmp))
    assert cli.returncode == 0, cli.stderr  # B is better on exact_match; verbatim is not comparable
    stderr = " ".join(cli.stderr.split())
    said = ("no scored rows in B: verbatim (its rows have no contexts, as a system that retrieves nothing: not "
            "comparable, so --fail-on-worse leaves it out)")  # fmt: skip
    assert stderr.count("no scored rows in B") == 1 and said in stderr, cli.stderr
    assert "not compared" not in stderr and "--fail-on-worse holds on 1 difference" in stderr, cli.stderr
    md = (cmp / "compare.md").read_text(encoding="utf-8")
    assert said in md and re.search(r"\| verbatim \| 1\.000 \(n=100\) \| no scored rows \|", md), md


def test_a_system_without_contexts_one_of_whose_items_errored_still_fails_the_gate() -> None:
    """Only a system every item of which lacks contexts (no error) is passed over: an error could hide a score."""
    import dataclasses

    from orchestrator.reports.compare import worse_failures
    from ragscore_workers.schemas import question_fingerprint as sha

    def llm(last: dict[str, Any]) -> Any:  # exact_match scored as the rag system's; verbatim's q7 ``last``
        scored = _run("llm", [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(8)], ("exact_match", "verbatim"))
        items = [dataclasses.replace(i, metrics={**i.metrics, "verbatim": last if i.meta["id"] == "q7" else
                                                 no_contexts}) for i in scored.items()]  # fmt: skip
        return dataclasses.replace(scored, items=lambda: iter(items))

    no_contexts = {"score": None, "error": None, "details": {"reason": "no contexts"}}
    rag = _run("rag", [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(8)], ("exact_match", "verbatim"))
    passed = compare([rag, llm(no_contexts)])
    assert passed.inapplicable == {"verbatim": ["llm"]} and passed.unscorable == {} and worse_failures(passed) == []
    failed = compare([rag, llm({"score": None, "error": "boom"})])
    assert failed.inapplicable == {} and [why for _, why in worse_failures(failed)] == [
        "not compared: no scored rows in llm (its items errored or were unscorable: see the notes above)"]  # fmt: skip


def test_a_systems_recall_unscorable_by_design_is_said_to_lack_retrieved_ids_not_contexts() -> None:
    """An LLM alone's recall is unscorable for lack of retrieved ids (``no retrieved_doc_ids``), its rows keeping the
    dataset's contexts: the note said its rows have no contexts. It says what they lack, each output's own."""
    import dataclasses

    from orchestrator.reports.compare import unscored_text
    from ragscore_workers.schemas import question_fingerprint as sha

    def unscorable(reason: str) -> dict[str, Any]:
        return {"score": None, "error": None, "details": {"reason": reason}}

    rag = _run("rag", [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(4)], ("exact_match", "mrr", "verbatim"))
    ids = _run(
        "llm", [(f"q{i}", sha(f"Q{i}?"), unscorable("no retrieved_doc_ids")) for i in range(4)], ("mrr", "verbatim")
    )
    scored = {"exact_match": {"score": 1.0, "error": None}, "verbatim": unscorable("no contexts")}
    items = [dataclasses.replace(i, metrics={**i.metrics, **scored}) for i in ids.items()]
    llm = dataclasses.replace(ids, items=lambda: iter(items))
    result = compare([rag, llm])
    assert result.inapplicable == {"mrr": ["llm"], "verbatim": ["llm"]}, result.inapplicable
    said = " ".join(unscored_text(result).split())
    assert ("no scored rows in llm: mrr (its rows have no retrieved_doc_ids, as a system that retrieves nothing: not "
            "comparable, so --fail-on-worse leaves it out)") in said, said  # fmt: skip
    assert "no scored rows in llm: verbatim (its rows have no contexts, as a system that retrieves nothing" in said


def test_what_a_systems_rows_lack_by_design_is_said_of_that_system_alone() -> None:
    """Two systems no item of which scored mrr by design, each for its own lack: the lacks were per output, so each
    was said to lack both ("no contexts or no retrieved_doc_ids"), an LLM alone's lack given to the other. They are
    per output and system."""
    import dataclasses

    from orchestrator.reports.compare import unscored_text
    from ragscore_workers.schemas import question_fingerprint as sha

    def unscorable(system: str, reason: str) -> Any:  # exact_match scored as the rag system's, mrr for ``reason``
        why = {"score": None, "error": None, "details": {"reason": reason}}
        scored = _run(system, [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(4)], ("exact_match", "mrr"))
        items = [dataclasses.replace(i, metrics={**i.metrics, "mrr": why}) for i in scored.items()]
        return dataclasses.replace(scored, items=lambda: iter(items))

    rag = _run("rag", [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(4)], ("exact_match", "mrr"))
    result = compare([rag, unscorable("llm", "no retrieved_doc_ids"), unscorable("bare", "no contexts")])
    assert result.inapplicable == {"mrr": ["llm", "bare"]}, result.inapplicable
    assert result.lacks == {"mrr": {"llm": ["no retrieved_doc_ids"], "bare": ["no contexts"]}}, result.lacks
    said = " ".join(unscored_text(result).split())
    assert "no scored rows in llm: mrr (its rows have no retrieved_doc_ids, as a system" in said, said
    assert "no scored rows in bare: mrr (its rows have no contexts, as a system" in said, said


def test_a_system_compared_with_nothing_that_scored_no_item_of_an_output_is_said_why() -> None:
    """Compared by system, a system without a namesake is shown, its cell of the means "no scored rows", but the notes
    said why only of the compared systems: not that its rows have no contexts (an LLM alone) or were all unscorable."""
    import dataclasses

    from ragscore_workers.schemas import question_fingerprint as sha

    def systems(origin: str, verbatim: dict[str, dict[str, Any] | None]) -> Any:  # None: verbatim scored 1.0
        items = []
        for system, result in verbatim.items():
            answered = _run(system, [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(4)], ("exact_match", "verbatim"))
            items += [dataclasses.replace(i, metrics={**i.metrics, "verbatim": result}) if result else i
                      for i in answered.items()]  # fmt: skip
        return dataclasses.replace(_run(origin, [], ("exact_match", "verbatim")), items=lambda: iter(items))

    no_contexts = {"score": None, "error": None, "details": {"reason": "no contexts"}}
    no_citations = {"score": None, "error": None, "details": {"reason": "no citations"}}
    first = systems("r1", {"x": None, "y": None})
    second = systems("r2", {"x": None, "y": None, "llm": no_contexts, "odd": no_citations})
    result = compare([first, second])
    assert result.by_system == "r1" and result.alone == ["llm", "odd"]
    assert result.inapplicable == {"verbatim": ["llm"]} and result.unscorable == {"verbatim": ["odd"]}
    md = " ".join(render_compare_markdown(result).split())
    assert "no scored rows in llm: verbatim (its rows have no contexts, as a system that retrieves nothing" in md, md
    assert "no scored rows in odd: verbatim (every item unscorable: its run's summary says why)" in md, md


def test_runs_of_the_same_questions_with_no_metric_in_common_are_said_so(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """Not 'share no question': they share every question, and no metric output."""
    other = evaluate(_rows("B"), {"metrics": ["quality_checks"]}, broker=two_runs["broker"], out=tmp_path / "Q")
    said = r"no metric output scored in common \(A: checks, exact_match; B: quality_checks\)"
    with pytest.raises(ValueError, match=said):
        compare([from_dir(two_runs["A"].out_dir), from_dir(other.out_dir)])


def test_a_system_that_shares_no_question_with_the_baseline_is_said(tmp_path: Path) -> None:
    """Its rows read n=0 / shared 0 without a word, while the others compared."""
    from ragscore_workers.schemas import question_fingerprint as sha

    base = _run("A", [("q0", sha("Where?"), 0.0), ("q1", sha("Who?"), 1.0)])
    b = _run("B", [("q0", sha("Where?"), 1.0), ("q1", sha("Who?"), 1.0)])
    c = _run("C", [("x0", sha("Where?"), 1.0), ("x1", sha("Who?"), 0.0)])  # other ids: nothing pairs with A
    result = compare([base, b, c])
    assert result.unpaired == ["C"]
    said = "C shares no question scored by both with the baseline A"
    assert said in render_compare_markdown(result) and said in render_compare_html(result)
    assert "nothing of it is compared; was it run on the same dataset?" in render_compare_markdown(result)
    assert compare([base, b]).unpaired == []
    d = _run("D", [("y0", sha("Where?"), 1.0)])
    both = compare([base, b, c, d])
    assert both.unpaired == ["C", "D"]  # it said "C, D share(s)", and "C share(s)" of one
    assert "C, D share no question scored by both with the baseline A" in render_compare_markdown(both)
    assert "nothing of theirs is compared; were they run on the same dataset?" in render_compare_markdown(both)
    # none shares a question with the baseline: said of them and it ("A, C, D share no question scored by both"
    # read as if two of the systems were meant)
    with pytest.raises(ValueError, match=r"^C, D share no question scored by both with the baseline A \("):
        compare([base, c, d])
    with pytest.raises(ValueError, match=r"^A, C share no question scored by both \("):
        compare([base, c])


def test_errors_left_out_of_the_comparison_are_said_and_so_is_a_metric_that_errored_everywhere() -> None:
    """Errors read as unscored: a system whose metric failed on every item showed ``0/0/0`` without a word, and
    runs of one suite whose metric failed everywhere were told to "score the runs with the same suite"."""
    from ragscore_workers.schemas import question_fingerprint as sha

    rows = [(f"q{i}", sha(f"Q{i}?"), 1.0) for i in range(3)]
    base, b = _run("A", rows), _run("B", [rows[0], ("q1", sha("Q1?"), "boom"), ("q2", sha("Q2?"), "boom")])
    result = compare([base, b])
    assert result.errors == {"exact_match": {"B": 2}}
    said = "items whose score is an error are left out of the comparison (exact_match: 2 of B)"
    assert said in render_compare_markdown(result) and said in render_compare_html(result)
    assert compare([base, _run("B", rows)]).errors == {}
    failed = [(qid, q, "boom") for qid, q, _ in rows]
    with pytest.raises(ValueError, match=r"\(A: none; B: none\): items whose score is an error .*exact_match: 3 of A, "
                                         r"3 of B"):  # fmt: skip
        compare([_run("A", failed), _run("B", failed)])


def test_runs_in_directories_of_one_name_are_told_apart_by_their_paths_and_either_is_a_baseline(
    tmp_path: Path,
) -> None:
    """``x1/results`` and ``x2/results`` were ``1:results`` and ``2:results`` (which is which?), and ``--baseline
    x2/results`` was "none of the systems"."""
    import dataclasses

    from ragscore_workers.schemas import question_fingerprint as sha

    def at(where: str, score: float) -> Any:
        run = _run("", [("q0", sha("Where?"), score), ("q1", sha("Who?"), score)])
        items = list(run.items())
        for item in items:
            item.meta["system"] = None
        (tmp_path / where).mkdir(parents=True)
        return dataclasses.replace(run, items=lambda: iter(items), directory=tmp_path / where, origin=where)

    first, second = at("x1/results", 0.0), at("x2/results", 1.0)
    result = compare([first, second])
    assert result.arms == ["x1/results", "x2/results"]
    flipped = compare([first, second], baseline=str(tmp_path / "x2" / "results"))
    assert flipped.arms == ["x2/results", "x1/results"] and flipped.differences[0].diff == -1.0
    assert compare([first, second], baseline="x2/results").arms[0] == "x2/results"
    with pytest.raises(ValueError, match="--baseline 'x3' is none of the systems: x1/results, x2/results"):
        compare([first, second], baseline="x3")


def test_a_metric_where_lower_is_better_is_marked_so_in_compare_md_and_on_the_console() -> None:
    """Only compare.html said it: a negative difference shown with 2 wins read as a contradiction."""
    from rich.console import Console

    from orchestrator.reports.compare_view import print_comparison
    from ragscore_workers.schemas import question_fingerprint as sha

    rows = [("q0", sha("Where?")), ("q1", sha("Who?"))]
    base = _run("A", [(q, h, 1.0) for q, h in rows], metric="answer_hallucination")
    better = _run("B", [(q, h, 0.0) for q, h in rows], metric="answer_hallucination")
    result = compare([base, better])
    (d,) = result.differences
    assert (d.diff, d.wins) == (-1.0, 2)
    md = render_compare_markdown(result)
    assert "| answer_hallucination (lower is better) | 1.000 (n=2) | 0.000 (n=2) |" in md
    assert "| answer_hallucination (lower is better) | B | 2 |" in md
    console = Console(record=True, width=120)
    print_comparison(result, console)
    text = console.export_text()
    assert "answer_hallucination ↓" in text and "↓ lower is better: a win is a lower score" in text
    plain = Console(record=True, width=120)
    print_comparison(compare([_run("A", [(q, h, 1.0) for q, h in rows]), _run("B", [(q, h, 0.0) for q, h in rows])]),
                     plain)  # fmt: skip
    assert "↓" not in plain.export_text()


def _system(rows: list[dict[str, Any]], system: str, prefix: str = "q") -> list[dict[str, Any]]:
    """``rows`` answered by ``system``, their ids starting with ``prefix`` instead of ``q``."""
    return [{**row, "system": system, "id": prefix + row["id"][1:]} for row in rows]


@pytest.fixture(scope="module")
def before_after(two_runs: dict[str, Any]) -> dict[str, Path]:
    """Two runs of two systems each (as the quickstart run twice): ``x`` gets better by (20 - 5) / 100 from
    ``before`` to ``after``, ``y`` (asked other ids than ``x``, as two datasets) stays as it was."""
    root, broker = two_runs["root"], two_runs["broker"]
    before = _system(_rows("A"), "x") + _system(_rows("A"), "y", prefix="y")
    after = _system(_rows("B"), "x") + _system(_rows("A"), "y", prefix="y")
    evaluate(before, SUITE, broker=broker, out=root / "before")
    evaluate(after, SUITE, broker=broker, out=root / "after")
    return {"before": root / "before", "after": root / "after"}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "compare", *args], capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"}, timeout=120,
    )  # fmt: skip


def test_two_runs_of_several_systems_compare_each_system_with_its_namesake(
    before_after: dict[str, Path], tmp_path: Path
) -> None:
    """``compare before after`` compared every system with before's first (``before:x`` vs ``after:y``: 0 shared
    items, "were they run on the same dataset?"); the before/after of each system never appeared."""
    result = _cli(str(before_after["before"]), str(before_after["after"]), "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "same dataset" not in result.stderr and "warning" not in result.stderr
    said = " ".join(result.stdout.split())
    assert "before:x → after:x, before:y → after:y (each system against its namesake in before)" in said
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert "## Differences, each system against its namesake in before" in md
    assert "| exact_match | after:x (vs before:x) | 100 | " in md and "| +0.150 |" in md
    (y,) = [line for line in md.splitlines() if line.startswith("| exact_match | after:y (vs before:y) | 100 | ")]
    assert "| +0.000 |" in y
    assert "after:y (vs before:x)" not in md and "after:x (vs before:y)" not in md
    html = (tmp_path / "compare.html").read_text(encoding="utf-8")
    assert "each system against its namesake in before" in html and "after:x − before:x" in html
    # the wins name their pair: a row per metric and pair, not a column per system with "-" in the others
    wins = md.split("## Wins per pair")[1].split("\n## ")[0]
    assert "| metric | pair | baseline wins | system wins | ties | questions |" in wins
    assert f"| exact_match | before:x → after:x | {LOSSES} | {GAINS} | {N - GAINS - LOSSES} | {N} |" in wins
    assert f"| exact_match | before:y → after:y | 0 | 0 | {N} | {N} |" in wins and "| - |" not in wins
    assert '<td class="l">before:x → after:x</td>' in html


def test_fail_on_worse_fails_a_system_significantly_worse_than_its_baseline(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """A CI job could gate only on pooled means (``run --fail-on-regression``), not on the paired interval that
    ``compare`` prints: B is better than A by 0.15 on exact_match, so A against B fails, B against A holds."""
    a, b = str(two_runs["A"].out_dir), str(two_runs["B"].out_dir)
    better = _cli(a, b, "--fail-on-worse", "--out", str(tmp_path / "ab"))
    assert better.returncode == 0, better.stderr
    assert "--fail-on-worse holds on all 2 differences: no system is significantly worse than A" in " ".join(
        better.stderr.split()
    )
    worse = _cli(b, a, "--fail-on-worse", "--out", str(tmp_path / "ba"))
    assert worse.returncode == 3, worse.stderr
    said = " ".join(worse.stderr.split())
    assert "differences failed" in said and (tmp_path / "ba" / "compare.md").is_file()  # the reports are written
    (row,) = [line.split() for line in worse.stderr.splitlines() if line.split()[:1] == ["exact_match"]]
    assert row[1:4] == ["A", f"{N:,}", "-0.150"] and "significantly worse" in " ".join(row), worse.stderr


def test_worse_margin_is_a_non_inferiority_margin_on_the_worse_end_of_the_ci(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """A is 0.15 worse than B: within a margin of 0.5 on its interval's worse end, not within one of 0.1."""
    a, b = str(two_runs["A"].out_dir), str(two_runs["B"].out_dir)
    wide = _cli(b, a, "--fail-on-worse", "--worse-margin", "0.5", "--out", str(tmp_path / "wide"))
    assert wide.returncode == 0, wide.stderr
    assert "no system is more than 0.5 worse than B" in " ".join(wide.stderr.split())
    narrow = _cli(b, a, "--fail-on-worse", "--worse-margin", "0.1", "--out", str(tmp_path / "narrow"))
    assert narrow.returncode == 3, narrow.stderr
    (row,) = [line for line in narrow.stderr.splitlines() if line.split()[:1] == ["exact_match"]]
    assert "may be more than 0.1 worse (the 95% CI's worse end is below -0.1)" in " ".join(narrow.stderr.split())
    assert float(row.split()[7]) < -0.1  # the worse end of the CI, past -0.1
    alone = _cli(b, a, "--worse-margin", "0.1", "--out", str(tmp_path / "alone"))
    assert alone.returncode == 2 and "--worse-margin is the margin of --fail-on-worse" in alone.stderr


def test_fail_on_worse_fails_outputs_of_too_few_pairs_rather_than_pass_them(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """With 4 shared questions no difference can have p < 0.05: the gate could never fail, so it says so and
    fails."""
    few = evaluate(_rows("B")[:4], SUITE, broker=two_runs["broker"], out=tmp_path / "few")
    result = _cli(str(two_runs["A"].out_dir), str(few.out_dir), "--fail-on-worse", "--out", str(tmp_path / "cmp"))
    assert result.returncode == 3, result.stderr
    said = " ".join(result.stderr.split())
    assert "2 of 2 differences failed" in said and said.count("too few pairs: 4 shared questions") == 2, said


def test_fail_on_worse_reads_a_metric_where_lower_is_better_the_other_way() -> None:
    """A system that hallucinates more is the worse one, though its difference is positive."""
    from orchestrator.reports.compare import worse_failures
    from ragscore_workers.schemas import question_fingerprint as sha

    def run(system: str, score: float) -> Any:
        return _run(system, [(f"q{i}", sha(f"Q{i}?"), score) for i in range(10)], metric="answer_hallucination")

    ((d, why),) = worse_failures(compare([run("A", 0.0), run("B", 1.0)]))  # B hallucinates on every question
    assert (d.arm, d.diff) == ("B", 1.0) and why.startswith("significantly worse")
    assert worse_failures(compare([run("B", 1.0), run("A", 0.0)])) == []
    assert worse_failures(compare([run("A", 0.0), run("B", 1.0)]), margin=1.5) == []  # at most 1 worse: within
    ((d, why),) = worse_failures(compare([run("A", 0.0), run("B", 1.0)]), margin=0.5)
    assert why == "may be more than 0.5 worse (the 95% CI's worse end is above +0.5)"  # hallucination: higher


def test_systems_without_a_namesake_are_said_from_the_cli(before_after: dict[str, Path], tmp_path: Path) -> None:
    """{x, y} against {x, z}: the note on y and z (compared with nothing) ended the command in a TypeError."""
    import shutil

    partial = tmp_path / "partial"
    shutil.copytree(before_after["after"], partial)
    items = partial / "items.jsonl"
    items.write_text(items.read_text(encoding="utf-8").replace('"system": "y"', '"system": "z"'), encoding="utf-8")
    result = _cli(str(before_after["before"]), str(partial), "--out", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())
    assert "Note: y, z: no system of the same name on the other side of the comparison" in said, result.stderr


def test_a_system_compared_with_nothing_says_a_metric_its_suite_lacks_as_not_in_it(
    two_runs: dict[str, Any], before_after: dict[str, Path], tmp_path: Path
) -> None:
    """Three runs by system, the third's z (no namesake in before) of a suite without checks: z's cell of checks'
    means said "no scored rows", as if its rows could not be scored; it says its suite has no such metric, as the
    cell of the third run's x (compared with before:x) does."""
    rows = [{k: v for k, v in row.items() if k != "checks"}  # no checks metric: none to carry
            for row in _system(_rows("C"), "x") + _system(_rows("C"), "z", prefix="z")]  # fmt: skip
    later = evaluate(rows, {"metrics": ["exact_match"]}, broker=two_runs["broker"], out=tmp_path / "later")
    runs = [str(before_after["before"]), str(before_after["after"]), str(later.out_dir)]
    result = _cli(*runs, "--out", str(tmp_path / "cmp"))
    assert result.returncode == 0, result.stderr
    assert "z: no system of the same name" in " ".join(result.stderr.split()), result.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    (checks,) = [line for line in md.splitlines() if line.startswith("| checks |") and "(n=" in line]
    assert checks.count("not in its run's suite") == 2 and "no scored rows" not in checks, checks
    assert "no scored rows" not in md
    html = (tmp_path / "cmp" / "compare.html").read_text(encoding="utf-8")
    assert "no scored rows" not in html and html.count("not in its run&#39;s suite") == 2


def test_a_bare_system_name_is_a_baseline_for_every_system(before_after: dict[str, Path], tmp_path: Path) -> None:
    """``--baseline y`` was "none of the systems" (the labels are ``before:y``, ``after:y``): it names the first
    run's ``y``, and an explicit baseline keeps one baseline for every system."""
    result = _cli(str(before_after["before"]), str(before_after["after"]), "--baseline", "y", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "(baseline before:y)" in " ".join(result.stdout.split())
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert "## Differences against before:y" in md and "| exact_match | after:y | 100 | " in md
    named = compare([from_dir(before_after["before"]), from_dir(before_after["after"])], baseline="after:x")
    assert named.arms[0] == "after:x"
    with pytest.raises(ValueError, match="--baseline 'z' is none of the systems"):
        compare([from_dir(before_after["before"]), from_dir(before_after["after"])], baseline="z")


def test_comparing_a_run_with_itself_is_refused(before_after: dict[str, Path], tmp_path: Path) -> None:
    """``compare X X`` compared the run with itself without a word, as ``1:/path:x`` and ``2:/path:x``."""
    run = before_after["before"]
    for second in (run, run / ".." / run.name):
        result = _cli(str(run), str(second), "--out", str(tmp_path))
        assert result.returncode == 2, result.stderr
        again = "" if second == run else f" (as {second})"
        assert result.stderr.startswith(f"Error: {run} is given twice{again}: compare a run with"), result.stderr
        assert "Traceback" not in result.stderr


def test_a_run_and_a_copy_of_it_compare_by_id_as_by_dir(two_runs: dict[str, Any], tmp_path: Path) -> None:
    """``compare ID DIR-copy`` was refused as the run given twice (DIR-copy's summary.json names run ID) where
    ``compare DIR DIR-copy`` compared: one rule for both, only one source given twice (``compare ID ID``, as
    ``compare X X``) is refused. A run against its id, its DIR or a copy of it is compared (no difference), with a
    note that the two hold one run."""
    import shutil

    run = two_runs["A"]
    run_id, out_dir, copy = run.summary.run_id, str(run.out_dir), str(tmp_path / "A-copy")
    shutil.copytree(out_dir, copy)
    env = {**os.environ, "RAGSCORE_BROKER_URL": two_runs["broker"], "COLUMNS": "300"}

    def compared(*refs: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "compare", *refs, "--out", str(tmp_path / "cmp")],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
        )  # fmt: skip

    for refs in ((out_dir, copy), (run_id, copy), (copy, run_id), (run_id, out_dir), (out_dir, run_id)):
        result = compared(*refs)
        assert result.returncode == 0, (refs, result.stderr)
        (row,) = [line.split() for line in result.stdout.splitlines() if line.split()[:1] == ["exact_match"]]
        assert row[1:3] == [f"{N:,}", "+0.000"], (refs, result.stdout)
        said = " ".join(result.stderr.split())  # said, for one compared with itself is almost surely a slip
        assert f"Note: {refs[0]} and {refs[1]} hold one run ({run_id}): it is compared with itself" in said, said
    result = compared(run_id, str(two_runs["B"].out_dir))  # another run: no such note
    assert result.returncode == 0 and "hold one run" not in result.stderr, result.stderr
    result = compared(run_id, run_id)
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stderr.split())
    assert said.startswith(f"Error: {run_id} is given twice: compare a run with"), result.stderr
    assert "Traceback" not in said


def test_a_piped_comparison_of_long_names_is_not_wrapped_at_80_columns(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """``ragscore compare ... | less`` and a CI log (stdout no terminal, no COLUMNS) wrapped the table at 80 columns:
    long system names folded over several lines of the table. Each row is one line."""
    import shutil

    names = {"A": "baseline", "B": "candidate-hybrid-retriever-with-reranker-and-a-long-name",
             "B2": "candidate-dense-retriever-with-query-rewriting-long-name"}  # fmt: skip
    for run, name in names.items():  # the runs' system renamed
        shutil.copytree(two_runs[run[0]].out_dir, tmp_path / name)
        items = tmp_path / name / "items.jsonl"
        items.write_text(items.read_text(encoding="utf-8").replace(f'"system": "{run[0]}"', f'"system": "{name}"'))
    env = {**os.environ}
    env.pop("COLUMNS", None)
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "compare", *(str(tmp_path / n) for n in names.values()), "--out",
         str(tmp_path / "cmp")],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines() if line.split()[:1] == ["exact_match"]]
    assert [row[1] for row in rows] == [names["B"], names["B2"]], result.stdout
    assert all(len(row) == 9 and row[2] == f"{N:,}" and row[7] == "better" for row in rows), result.stdout
    assert "…" not in result.stdout, result.stdout


def _systems(origin: str, scores: dict[str | None, float]) -> Any:
    """A run as compare reads it in which each of ``scores``' systems answered q0 and q1 with that score (system
    None: items without a system)."""
    import dataclasses

    from ragscore_workers.schemas import item_key
    from ragscore_workers.schemas import question_fingerprint as sha

    rows = {system: [("q0", sha("Where?"), score), ("q1", sha("Who?"), score)] for system, score in scores.items()}
    items = [item for system, answered in rows.items() for item in _run(system or origin, answered).items()]
    items = [  # the items of system None: no system
        dataclasses.replace(i, key=item_key(None, i.meta["id"]), meta={**i.meta, "system": None})
        if i.meta["system"] == origin
        else i
        for i in items
    ]
    return dataclasses.replace(_run(origin, []), items=lambda: iter(items), origin=origin)


def test_more_runs_compare_each_system_with_its_namesake_in_the_first_and_name_those_without() -> None:
    """From three runs on, each later run's system is compared with its namesake in the first run too; a system the
    first run lacks is shown (means) and said, compared with nothing. A first run of one system keeps one baseline."""
    first, second, third = (_systems("r1", {"x": 0.0, "y": 1.0}), _systems("r2", {"x": 1.0, "y": 1.0, "z": 0.0}),
                            _systems("r3", {"x": 0.5}))  # fmt: skip
    result = compare([first, second, third])
    assert result.by_system == "r1" and result.arms == ["r1:x", "r2:x", "r3:x", "r1:y", "r2:y", "z"]
    assert result.bases == {"r2:x": "r1:x", "r3:x": "r1:x", "r2:y": "r1:y"} and result.alone == ["z"]
    diffs = {(d.base, d.arm): d.diff for d in result.differences}
    assert diffs == {("r1:x", "r2:x"): 1.0, ("r1:x", "r3:x"): 0.5, ("r1:y", "r2:y"): 0.0}
    assert result.means["exact_match"]["z"] == 0.0
    md = render_compare_markdown(result)
    assert "z: no system of the same name on the other side of the comparison, so compared with nothing" in md
    assert "| exact_match | r1:x → r2:x | 0 | 2 | 0 | 2 |" in md  # wins of r1:x vs r2:x: a row naming its pair
    partial = compare([first, _systems("r2", {"x": 1.0, "w": 0.0})])  # r1's y has no namesake in r2: said so
    assert partial.alone == ["y", "w"] and "y, w: no system of the same name" in render_compare_markdown(partial)
    unnamed = compare([_systems("r1", {"x": 0.0, None: 1.0}), _systems("r2", {None: 0.5})])  # items without system
    assert unnamed.by_system is None and unnamed.arms == ["x", "r1", "r2"] and set(unnamed.bases.values()) == {"x"}
    one = compare([_systems("r1", {"x": 0.0}), second])
    assert one.by_system is None and one.arms[0] == "r1:x" and set(one.bases.values()) == {"r1:x"}


def test_runs_compared_by_system_whose_questions_all_differ_are_refused_naming_each_namesake() -> None:
    """Nothing to compare: the refusal says what the ids' questions differ from as the reports do (``its namesake
    in r1``), not the first arm."""
    import dataclasses

    from ragscore_workers.schemas import question_fingerprint as sha

    def systems(origin: str, question: str) -> Any:
        items = [item for system in ("x", "y") for item in _run(system, [("q0", sha(question), 1.0)]).items()]
        return dataclasses.replace(_run(origin, []), items=lambda: iter(items), origin=origin)

    with pytest.raises(ValueError, match=r"nothing to compare\. Some ids hold a different question than in its "
                                         r"namesake in r1[^:]*: 1 in r2:x \(e\.g\. q0\); 1 in r2:y"):  # fmt: skip
        compare([systems("r1", "Where?"), systems("r2", "Who?")])


def test_compare_out_refuses_a_dir_holding_files_of_the_users_with_its_names(
    two_runs: dict[str, Any], tmp_path: Path
) -> None:
    """``compare --out DIR`` wrote over the user's own compare.md / compare.html there (``run``, ``results`` and
    ``report --out`` refuse theirs): refused (exit 2, naming them, nothing written), in a run's DIR too (no run
    writes compare.md). What compare wrote before is replaced."""
    runs = [str(two_runs[k].out_dir) for k in ("A", "B")]
    other, in_a_run = tmp_path / "other", tmp_path / "run"
    for directory in (other, in_a_run):
        directory.mkdir()
        (directory / "compare.md").write_text("# my notes on the comparison\n")
        (directory / "compare.html").write_text("<p>mine</p>\n")
    (in_a_run / "summary.json").write_text(json.dumps({"run_id": "r1"}))
    for directory in (other, in_a_run):
        before = {p.name: p.read_bytes() for p in directory.iterdir()}
        refused = _cli(*runs, "--out", str(directory))
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2, refused.stderr
        assert f"{directory} holds compare.html, compare.md, which no ragscore run wrote" in said, said
        assert "choose another --out" in said and "Traceback" not in said
        assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    again = tmp_path / "again"
    for _ in range(2):
        wrote = _cli(*runs, "--out", str(again))
        assert wrote.returncode == 0, wrote.stderr
    (in_a_run / "compare.md").unlink()
    (in_a_run / "compare.html").unlink()
    for _ in range(2):  # a run's DIR: compare writes beside its reports, and rewrites its own files
        wrote = _cli(*runs, "--out", str(in_a_run))
        assert wrote.returncode == 0, wrote.stderr


def test_float_noise_between_two_runs_of_the_same_texts_is_a_tie_not_a_difference() -> None:
    """Two runs of one embedding suite on one dataset: each cosine differed by ~1e-7 (fp32, other batches), read
    as 11/11/8 wins, ties and losses, and with every question one way as significantly worse (a new user's audit)."""
    from orchestrator.reports.compare import worse_failures
    from ragscore_workers.schemas import question_fingerprint as sha

    def run(system: str, noise: float) -> Any:
        rows = [(f"q{i}", sha(f"Q{i}?"), 0.5 + i / 100 - noise) for i in range(30)]
        return _run(system, rows, metric="answer_correctness")

    result = compare([run("A", 0.0), run("B", 1.2e-7)])
    (d,) = result.differences
    assert (d.wins, d.ties, d.losses, d.diff, d.p) == (0, 30, 0, 0.0, 1.0)
    assert worse_failures(result) == []


def test_runs_of_several_systems_scored_with_other_suites_say_the_outputs_one_lacks_once() -> None:
    """Runs of 6 systems, the second scored with a smaller suite: the console's "not paired" line repeated, per
    system, each output the second run has no such metric of (12 times in a new user's audit), which the note after
    the table already says once for all of them."""
    from rich.console import Console

    from orchestrator.reports.compare_view import print_comparison
    from orchestrator.reports.source import RunData
    from ragscore_workers.schemas import question_fingerprint as sha

    def run(name: str, outputs: tuple[str, ...], questions: int = 10) -> Any:
        parts = [_run(s, [(f"q{i}", sha(f"Q{i}?"), i % 3 / 2) for i in range(questions)], outputs) for s in "uvwxyz"]
        summary = parts[0].summary.model_copy(update={"run_id": name})
        return RunData(summary=summary, items=lambda: (i for p in parts for i in p.items()),
                       failed_rows=lambda: iter([]), origin=name)  # fmt: skip

    result = compare([run("before", ("exact_match", "checks", "mrr")), run("after", ("exact_match",))])
    assert result.by_system == "before" and len(result.differences) == 18
    out = io.StringIO()
    print_comparison(result, Console(file=out, width=200))
    assert "not paired" not in out.getvalue()
    assert [d.metric for d in result.shown()] == ["exact_match"] * 6  # and the console's table shows those only
    systems = "before:u, before:v, before:w, before:x, before:y, before:z"
    said = f"only in {systems}: checks, mrr (the other compared runs' suites have no such metric)"
    assert said in render_compare_markdown(result)
    fewer = compare([run("before", ("exact_match",)), run("after", ("exact_match",), questions=7)])
    out = io.StringIO()  # systems that scored some of an output: their unpaired items are still said
    print_comparison(fewer, Console(file=out, width=200))
    said = "not paired, so not in n (scored by one system only): exact_match: 3 of before:u only, 0 of after:u only;"
    assert said in " ".join(out.getvalue().split())
