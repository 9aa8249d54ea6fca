"""A run's gate results in its DIR (gates.json) and in the reports a CI artifact keeps (report.md, report.html):
written by ``ragscore run``, kept by ``ragscore report DIR``, replaced by a resume, none for a run without gates."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from ragscore_workers.errors import ConfigError

from ..support import write_jsonl
from .helpers import DATA, SUITE, ragscore

pytestmark = pytest.mark.integration


def _gates(out: Path) -> dict:
    return json.loads((out / "gates.json").read_text())


def _md(out: Path) -> str:
    return (out / "report.md").read_text()


def _html(out: Path) -> str:
    return (out / "report.html").read_text()


def test_gate_results_are_in_gates_json_report_md_and_html_and_survive_report_and_resume(
    tmp_path: Path, home: Path
) -> None:
    base = tmp_path / "base"
    plain = ragscore("run", DATA, "--suite", SUITE, "--out", base, "-q", home=home)
    assert plain.returncode == 0, plain.stderr
    assert not (base / "gates.json").exists()  # no gates: no file, no section
    assert "## Gates" not in _md(base) and 'id="gates"' not in _html(base)
    summary = json.loads((base / "summary.json").read_text())
    em = summary["metrics"]["exact_match"]["mean"]

    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    for row in rows[:10]:  # ten answers go wrong: exact_match regresses, retrieval does not move
        row["answer"] = "I do not know"
    data = write_jsonl(tmp_path / "worse.jsonl", rows)
    out = tmp_path / "gated"
    gated = ragscore("run", data, "--suite", SUITE, "--out", out, "-q", "--fail-under", "recall_at_5=0.1",
                     "--fail-on-regression", base, "--regression-tolerance", "0.05", home=home)  # fmt: skip
    assert gated.returncode == 3, gated.stderr

    record = _gates(out)
    assert record["run_id"] == json.loads((out / "summary.json").read_text())["run_id"]
    assert record["verdict"] == "1 of 5 gates failed" and record["passed"] is False
    first, *others = record["gates"]  # failed first
    assert first["gate"] == "exact_match:regression" and first["result"] == "fail", first
    assert first["baseline_run"] == summary["run_id"] and first["tolerance"] == 0.05
    assert first["baseline"] == pytest.approx(em) and first["threshold"] == pytest.approx(em - 0.05)
    assert first["actual"] < first["threshold"] and first["margin"] == pytest.approx(first["actual"] - em + 0.05)
    assert (
        first["statistic"] == "mean"
        and first["system"] is None
        and first["n"] == summary["metrics"]["exact_match"]["n"]
    )
    assert [g["result"] for g in others] == ["pass"] * 4
    assert others[0]["gate"] == "recall_at_5=0.1" and others[0]["baseline"] is None

    md = _md(out)
    assert md.index("## Gates") < md.index("| metric | mean |")  # near the top, before the metric table
    assert "**1 of 5 gates failed**" in md
    fail_row = md.split("| gate | on |")[1].splitlines()[2]
    assert fail_row.startswith("| exact_match:regression | regression (baseline ") and "**FAIL**" in fail_row
    assert f"against the means of baseline run {summary['run_id']}, tolerance 0.05" in md
    html = _html(out)
    assert html.index('id="gates"') < html.index('id="summary"') and "1 of 5 gates failed" in html
    assert '<td class="l bad">FAIL</td>' in html and f"baseline run {summary['run_id']}, tolerance 0.05" in html

    for fmt in ("md", "html"):  # written again from the DIR: the gates stay
        again = ragscore("report", out, "--format", fmt, home=home)
        assert again.returncode == 0, again.stderr
    assert _md(out) == md and "1 of 5 gates failed" in _html(out)
    copy = tmp_path / "copy"
    copied = ragscore("report", out, "--format", "json", "--out", copy, home=home)
    assert copied.returncode == 0, copied.stderr
    assert _gates(copy) == record  # a json report elsewhere takes the gates with the summary

    resumed = ragscore("run", "--resume", out, "--fail-under", "exact_match=0.1", "-q", home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert [g["gate"] for g in _gates(out)["gates"]] == ["exact_match=0.1"]  # the resume's gates replace them
    assert "1 gate holds" in _md(out) and "regression" not in _md(out) and "1 gate holds" in _html(out)

    fresh = ragscore("run", data, "--suite", SUITE, "--out", out, "-q", home=home)  # a new run, no gates, same DIR
    assert fresh.returncode == 0, fresh.stderr
    assert not (out / "gates.json").exists() and "## Gates" not in _md(out)


def test_a_resume_is_held_to_the_gate_options_the_run_was_started_with_unless_given_new_ones(
    tmp_path: Path, home: Path
) -> None:
    """``ragscore resume DIR`` and ``resume(DIR)`` checked the suite's gates alone: the run's ``--fail-under`` was
    dropped (exit 0, its gates.json removed). They are held to it, as ``run --resume DIR`` is; gate options given to
    ``ragscore resume`` replace it."""
    from orchestrator.api import GateFailedWarning, resume

    out = tmp_path / "out"
    gated = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-under", "exact_match=0.99", home=home)
    assert gated.returncode == 3, gated.stderr
    record = _gates(out)
    assert record["verdict"] == "1 of 1 gate failed" and "## Gates" in _md(out)
    resumed = ragscore("resume", out, "-q", home=home)
    assert resumed.returncode == 3, resumed.stderr
    assert "held to the gates it was started with: --fail-under exact_match=0.99" in resumed.stderr
    assert _gates(out)["gates"] == record["gates"] and "## Gates" in _md(out) and 'id="gates"' in _html(out)
    with pytest.warns(GateFailedWarning, match="exact_match mean"):
        assert [g.label for g in resume(out).gates] == ["exact_match=0.99"]
    replaced = ragscore("resume", out, "-q", "--fail-under", "exact_match=0.1", home=home)
    assert replaced.returncode == 0, replaced.stderr
    assert [g["gate"] for g in _gates(out)["gates"]] == ["exact_match=0.1"]


def test_a_resume_whose_started_baseline_is_gone_is_refused_before_anything_is_scored(
    tmp_path: Path, home: Path
) -> None:
    """``resume(DIR)`` of a run started with ``--fail-on-regression BASE`` whose BASE is gone since resumed the run
    (its run.json written again, its items scored) and raised only after, as it built its gates: refused before, as
    ``ragscore resume DIR`` refuses it."""
    from orchestrator.api import resume

    base, out = tmp_path / "base", tmp_path / "out"
    assert ragscore("run", DATA, "--suite", SUITE, "--out", base, "-q", home=home).returncode == 0
    gated = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-on-regression", base, home=home)
    assert gated.returncode == 0, gated.stderr
    shutil.rmtree(base)
    recorded = (out / "run.json").read_text()
    with pytest.raises(ConfigError, match=r"--fail-on-regression: .*summary\.json not found"):
        resume(out, quiet=True)
    assert (out / "run.json").read_text() == recorded  # nothing went ahead
    said = ragscore("resume", out, "-q", home=home)
    assert said.returncode == 2 and "summary.json not found" in said.stderr, said.stderr


def test_a_gate_check_whose_results_cannot_be_written_keeps_the_run_exit_code_and_says_why(
    tmp_path: Path, home: Path
) -> None:
    """Writing the gate results (gates.json, the Gates sections) after a run raised out of the check: exit 2, before
    the gate's verdict and the run's own exit code. The write error is said, and the exit code is the run's."""
    out = tmp_path / "out"
    (out / "gates.json").mkdir(parents=True)  # a folder where the file goes: as a full disk, the write fails
    held = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-under", "exact_match=0.0", home=home)
    assert held.returncode == 0, held.stderr
    assert f"the gate results could not be written to {out}/" in held.stderr, held.stderr
    assert "gates.json" in held.stderr and f"ragscore run --resume {out}" in held.stderr, held.stderr
    missed = ragscore("resume", out, "-q", "--fail-under", "exact_match=0.99", home=home)
    assert missed.returncode == 3, missed.stderr
    assert "could not be written" in missed.stderr and "1 of 1 gate failed" in missed.stderr, missed.stderr


def test_results_of_a_gated_run_keep_its_gates_json_and_gates_section(tmp_path: Path, home: Path) -> None:
    """``ragscore results DIR`` writes the reports again from the store and checks no gate: it removed the run's
    gates.json and Gates section (found by the stop's final read), so the CI artifact no longer said which failed."""
    out = tmp_path / "out"
    gated = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-under", "exact_match=0.99", home=home)
    assert gated.returncode == 3, gated.stderr
    record = _gates(out)
    written = ragscore("results", out, "-q", home=home)
    assert written.returncode == 0, written.stderr
    assert _gates(out) == record and "## Gates" in _md(out) and 'id="gates"' in _html(out)


def test_a_report_of_the_run_id_into_its_own_folder_keeps_its_gates_in_every_format(tmp_path: Path, home: Path) -> None:
    """``ragscore report RUN_ID --out DIR -f json`` into the run's own folder removed its gates.json (a report read
    from the store holds no gates), while md and html left it but wrote no Gates section."""
    out = tmp_path / "out"
    gated = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-under", "exact_match=0.99", home=home)
    assert gated.returncode == 3, gated.stderr
    record, run_id = _gates(out), _gates(out)["run_id"]
    for fmt in ("json", "md", "html"):
        written = ragscore("report", run_id, "--out", out, "-f", fmt, home=home)
        assert written.returncode == 0, written.stderr
        assert _gates(out) == record, fmt
    assert "**1 of 1 gate failed**" in _md(out) and 'id="gates"' in _html(out)


def test_a_corrupt_gates_json_is_warned_of_once_and_the_reports_are_written_without_it(
    tmp_path: Path, home: Path
) -> None:
    """A gates.json that is no gates file (cut short) made ``ragscore report DIR`` and ``compare`` of the DIR fail."""
    out = tmp_path / "out"
    gated = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-under", "exact_match=0.99", home=home)
    assert gated.returncode == 3, gated.stderr
    (out / "gates.json").write_text('{"run_id": "x", "gates": [')
    written = ragscore("report", out, "-f", "md", home=home)
    assert written.returncode == 0, written.stderr
    assert written.stderr.count("is not a ragscore gates file") == 1, written.stderr
    assert f"{out / 'gates.json'} is not a ragscore gates file" in written.stderr.replace("\n", "")
    assert "leave out the Gates section" in written.stderr and "## Gates" not in _md(out)
    other = tmp_path / "other"
    shutil.copytree(out, other)
    compared = ragscore("compare", out, other, "--out", tmp_path / "cmp", home=home)
    assert compared.returncode == 0, compared.stderr
    said = compared.stderr.replace("\n", "")
    assert said.count(f"{out / 'gates.json'} is not") == 1 and said.count(f"{other / 'gates.json'} is not") == 1, said
    assert (tmp_path / "cmp" / "compare.md").is_file()


def test_evaluate_resume_and_assert_scores_write_their_gates_as_ragscore_run_does(tmp_path: Path, home: Path) -> None:
    """evaluate() and resume() checked the suite's gates but wrote no gates.json and no Gates section; assert_scores
    the same of its own gates."""
    from orchestrator.api import GateFailedWarning, evaluate, resume
    from orchestrator.testing import assert_scores

    rows = [json.loads(line) for line in DATA.read_text().splitlines()[:8]]
    rows[0]["answer"] = "I do not know"  # exact_match under 0.999
    suite = {"metrics": ["exact_match"], "gates": ["exact_match=0.0", "exact_match=0.999"]}
    out = tmp_path / "api"
    with pytest.warns(GateFailedWarning):
        result = evaluate(rows, suite, out=out)
    record = _gates(out)
    assert record["run_id"] == result.summary.run_id and record["verdict"] == "1 of 2 gates failed"
    assert [g["gate"] for g in record["gates"]] == ["exact_match=0.999", "exact_match=0"]  # failed first
    assert "**1 of 2 gates failed**" in _md(out) and "1 of 2 gates failed" in _html(out)
    with pytest.warns(GateFailedWarning):
        resume(out)  # its reports written again from the store: the suite's gates checked and written again
    assert _gates(out) == record and "**1 of 2 gates failed**" in _md(out)

    checked = tmp_path / "checked"
    assert_scores(rows, {"metrics": ["exact_match"], "gates": ["exact_match=0.0"]}, ["exact_match:ci_low=0.0"],
                  out=checked)  # fmt: skip
    assert [g["gate"] for g in _gates(checked)["gates"]] == ["exact_match=0", "exact_match:ci_low=0"]
    assert "all 2 gates hold" in _md(checked)


def test_a_resume_the_store_lacks_the_run_of_keeps_the_junit_report_it_was_started_with(
    tmp_path: Path, home: Path
) -> None:
    """``ragscore resume DIR`` of a run started with ``--junit FILE`` removed FILE (the last good report) before it
    found that its store lacks the run and refused: the path is checked only for a run it can resume."""
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    started = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", "--fail-under", "exact_match=0.1",
                       "--junit", junit, home=home)  # fmt: skip
    assert started.returncode == 0 and junit.exists(), started.stderr
    report = junit.read_text()
    with tempfile.TemporaryDirectory(prefix="rsh-", dir="/tmp") as fresh:  # a store that never saw the run
        refused = ragscore("resume", out, "-q", home=Path(fresh))
    assert refused.returncode == 2, refused.stderr
    assert junit.read_text() == report
