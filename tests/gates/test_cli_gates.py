"""``ragscore run`` with gates, as CI runs it: every outcome and exit code, on the quickstart, embedded."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from orchestrator.gates import parse_gate
from orchestrator.runner import run
from orchestrator.suite import load_suite
from ragscore_workers.errors import RunLostError
from ragscore_workers.store import redis_client

from ..fakes import FakeProvider
from ..support import HookedProgress, RedisProcess, write_jsonl
from .helpers import DATA, SUITE, ragscore

pytestmark = pytest.mark.integration


def _baseline(tmp_path: Path, home: Path) -> tuple[Path, dict]:
    out = tmp_path / "base"
    res = ragscore("run", DATA, "--suite", SUITE, "--out", out, "-q", home=home)
    assert res.returncode == 0, res.stderr
    return out, json.loads((out / "summary.json").read_text())["metrics"]


def _gate_line(stderr: str, label: str) -> str:
    (line,) = [line for line in stderr.splitlines() if f" {label} " in line]
    return line


def _items(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]


def test_gates_that_hold_exit_0_and_missed_gates_exit_3_with_table_and_junit(tmp_path: Path, home: Path) -> None:
    base_dir, metrics = _baseline(tmp_path, home)
    em, mrr, r5 = metrics["exact_match"], metrics["mrr"], metrics["recall_at_5"]
    by_system = json.loads((base_dir / "summary.json").read_text())["by_system"]
    bm25_r5 = by_system["bm25-llm"]["recall_at_5"]["mean"]
    assert bm25_r5 < r5["mean"] - 0.01  # bm25-llm alone misses the pooled gate below

    # Suite gates and --fail-under together, all just under the run's values: exit 0.
    suite = yaml.safe_load(SUITE.read_text()) | {
        "gates": [f"exact_match={em['mean'] - 0.05}", {"metric": "mrr", "min": mrr["ci95"][0] - 0.05, "on": "ci_low"}]
    }
    suite_path = tmp_path / "gated.yaml"
    suite_path.write_text(yaml.safe_dump(suite))
    held_junit = tmp_path / "held.xml"
    held = ragscore(
        "run", DATA, "--suite", suite_path, "--out", tmp_path / "held", "--junit", held_junit,
        "--fail-under", f"recall_at_5={r5['mean'] - 0.01}", "--fail-under", f"recall_at_5@bm25-llm={bm25_r5 - 0.01}",
        home=home,
    )  # fmt: skip
    assert held.returncode == 0, held.stderr
    assert "all 4 gates hold" in held.stderr
    assert "on its own" not in held.stderr  # bm25-llm has a recall_at_5 gate of its own, which holds
    # exit 0, so no failure in the JUnit file: items below a holding gate's bar (an exact_match of 0) were failures
    assert 0.0 in [i["metrics"]["exact_match"]["score"] for i in _items(tmp_path / "held")]
    root = ET.parse(held_junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "0", "0"), ET.tostring(root)[:300]
    assert [s.get("name") for s in root] == ["ragscore.gates"]

    # Two gates just over the run's values, one under: exit 3, the table says which and by how much.
    junit = tmp_path / "reports" / "junit.xml"
    em_gate = f"exact_match={em['mean'] + 0.01}"
    low_gate = f"mrr:ci_low={mrr['ci95'][0] + 0.02}"
    missed = ragscore(
        "run", DATA, "--suite", SUITE, "--out", tmp_path / "missed", "-q", "--junit", junit, "--junit-items",
        "--fail-under", em_gate, "--fail-under", low_gate, "--fail-under", f"recall_at_5={r5['mean'] - 0.01}",
        "--fail-under", f"recall_at_5@bm25-llm={r5['mean'] - 0.01}", home=home,
    )  # fmt: skip
    assert missed.returncode == 3, missed.stderr
    assert "3 of 4 gates failed" in missed.stderr
    system_line = _gate_line(missed.stderr, f"recall_at_5@bm25-llm={r5['mean'] - 0.01:g}")
    assert "FAIL" in system_line and f"{bm25_r5:.3f}" in system_line
    em_line = _gate_line(missed.stderr, str(parse_gate(em_gate)))
    assert "FAIL" in em_line and "-0.010" in em_line and f"{em['mean']:.3f}" in em_line
    low_line = _gate_line(missed.stderr, str(parse_gate(low_gate)))
    assert "FAIL" in low_line and "-0.020" in low_line and "ci_low" in low_line
    assert "recall_at_5=" not in missed.stderr  # --quiet: only the failed gates

    root = ET.parse(junit).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    gate_status = {c.get("name"): [child.tag for child in c] for c in suites["ragscore.gates"].iter("testcase")}
    assert sorted(gate_status.values()) == [[], ["failure"], ["failure"], ["failure"]]
    items = _items(tmp_path / "missed")
    thresholds = {"exact_match": em["mean"] + 0.01, "mrr": mrr["ci95"][0] + 0.02, "recall_at_5": r5["mean"] - 0.01}
    cases = list(suites["ragscore.items"].iter("testcase"))
    assert len(cases) == len(items) * 3
    for metric, bar in thresholds.items():
        scores = [i["metrics"][metric]["score"] for i in items]
        mine = [c for c in cases if c.get("classname") == f"ragscore.{metric}"]
        assert sum(c.find("failure") is not None for c in mine) == sum(s is not None and s < bar for s in scores)
        assert sum(c.find("skipped") is not None for c in mine) == scores.count(None) > 0
    keys = {c.get("name") for c in cases}
    assert keys == {f"{i['system']}::{i['id']}" for i in items}


def test_regression_against_a_baseline_exit_3_and_0_within_tolerance(tmp_path: Path, home: Path) -> None:
    base_dir, base = _baseline(tmp_path, home)
    base_summary = json.loads((base_dir / "summary.json").read_text())
    base_id, base_items = base_summary["run_id"], base_summary["items"]
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    for row in rows[:10]:  # ten answers go wrong: exact_match drops, retrieval does not move
        row["answer"] = "I do not know"
    data = write_jsonl(tmp_path / "worse.jsonl", rows)

    worse = ragscore("run", data, "--suite", SUITE, "--out", tmp_path / "worse", "--fail-on-regression", base_dir,
                     home=home)  # fmt: skip
    assert worse.returncode == 3, worse.stderr
    now = json.loads((tmp_path / "worse" / "summary.json").read_text())["metrics"]
    drop = base["exact_match"]["mean"] - now["exact_match"]["mean"]
    assert drop > 0.1
    line = _gate_line(worse.stderr, "exact_match:regression")
    assert "FAIL" in line and f"{-drop:+.3f}" in line and f"baseline {base['exact_match']['mean']:.3f}" in line
    for metric in ("recall_at_1", "recall_at_5", "mrr"):
        assert "pass" in _gate_line(worse.stderr, f"{metric}:regression")
    assert "1 of 4 gates failed" in worse.stderr

    tolerated = ragscore(
        "run", data, "--suite", SUITE, "--out", tmp_path / "tolerated", "-q", "--fail-on-regression", base_dir,
        "--regression-tolerance", f"{drop + 0.001:.4f}", home=home,
    )  # fmt: skip
    assert tolerated.returncode == 0, tolerated.stderr
    assert "all 4 gates hold" in tolerated.stderr
    assert "means are over other questions" not in " ".join(worse.stderr.split())  # the same rows as the baseline

    # A subset of the baseline's rows, answers unchanged: any gap is the sample's, and the run says so
    subset = write_jsonl(tmp_path / "subset.jsonl", [json.loads(line) for line in DATA.read_text().splitlines()][:10])
    part = ragscore("run", subset, "--suite", SUITE, "--out", tmp_path / "part", "-q", "--fail-on-regression",
                    base_dir, home=home)  # fmt: skip
    said = " ".join(part.stderr.split())
    assert f"the baseline {base_id} holds {base_items:,} items" in said and "this run 10 items" in said, said
    assert "its means are of other systems, over other questions" in said  # bm25-llm alone, 10 of its rows


BAD = [
    (["--fail-under", "exact_mach=0.5"], "Did you mean 'exact_match'"),
    (["--fail-under", "exact_match>0.5"], "not METRIC=VALUE, METRIC:ci_low=VALUE or METRIC@SYSTEM=VALUE"),
    (["--fail-under", "exact_match=80"], "could never hold (a percentage? exact_match=0.8)"),
    (["--fail-under", "mrr:ci_high=0.5"], "'mean' or 'ci_low'"),
    (["--fail-on-regression", "{tmp}/nowhere"], "summary.json not found"),
    (["--fail-under", "mrr=0.5", "--regression-tolerance", "0.1"], "needs --fail-on-regression"),
    (["--junit", "{tmp}/j.xml"], "--junit reports on gates"),
    (
        ["--junit-items", "--fail-under", "exact_match=0.5"],
        "--junit-items adds a case per item to the JUnit file: give --junit FILE too",
    ),
    (["--junit", "{tmp}/j.xml", "--fail-under", "exact_mach=0.5"], "Did you mean 'exact_match'"),
    (["--fail-under", "exact_match=-0.5"], "never below 0, so it decides nothing"),
    (["--fail-on-regression", "{tmp}/nowhere", "--regression-tolerance", "nan"], "must be a finite number >= 0"),
    (["--fail-on-regression", "{tmp}/nowhere", "--regression-tolerance", "-0.1"], "must be a finite number >= 0"),
    (["--suite-gates", "recall_at_10=0.5"], "Did you mean 'recall_at_1'"),
    (
        ["--fail-under", "recall_at_5@bm25=0.5"],
        "gates name 'bm25' (did you mean 'bm25-llm'?), which this run has no "
        "items of: its systems are bm25-llm, hybrid-llm; nothing was submitted",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_gates_exit_2_before_anything_is_submitted(
    tmp_path: Path, home: Path, args: list[str], message: str
) -> None:
    suite = SUITE
    if args[0] == "--suite-gates":
        suite = tmp_path / "s.yaml"
        suite.write_text(yaml.safe_dump(yaml.safe_load(SUITE.read_text()) | {"gates": [args[1]]}))
        args = []
    out = tmp_path / "out"
    stale = tmp_path / "j.xml"
    stale.write_text("<testsuites/>")  # a runner's last report: the CI's upload step would publish it as this run's
    res = ragscore("run", DATA, "--suite", suite, "--out", out, *(a.format(tmp=tmp_path) for a in args), home=home)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert stale.exists() == ("--junit" not in args)
    assert not out.exists() and not (home / "redis").exists()  # no run, not even the private Redis


def test_a_resumed_run_is_held_to_its_suites_gates_and_takes_gate_options(tmp_path: Path, home: Path) -> None:
    """`run --resume` skipped the suite's gates: a CI job resumed after an interruption passed with exit 0 whatever
    its scores, and --fail-under / --junit were refused ("need a new run")."""
    suite = yaml.safe_load(SUITE.read_text()) | {"gates": ["exact_match=0.99"]}  # the quickstart scores 0.796
    gated, out, junit = tmp_path / "gated.yaml", tmp_path / "out", tmp_path / "junit.xml"
    gated.write_text(yaml.safe_dump(suite))
    first = ragscore("run", DATA, "--suite", gated, "--out", out, "--fail-under", "recall_at_5=0.1", "--junit", junit,
                     "--junit-items", "-q", home=home)  # fmt: skip
    assert first.returncode == 3, first.stderr
    junit.unlink()
    typo = ragscore("run", "--resume", out, "--fail-under", "exact_mach=0.1", "-q", home=home)
    assert typo.returncode == 2 and "Gate 'exact_mach=0.1' names 'exact_mach'" in typo.stderr, typo.stderr
    resumed = ragscore("run", "--resume", out, "-q", home=home)  # a CI job's retry: the same gates as its first try
    said = " ".join(resumed.stderr.split())
    assert resumed.returncode == 3, resumed.stderr  # the suite's gate still misses
    assert f"held to the gates it was started with: --fail-under recall_at_5=0.1 --junit {junit} --junit-items" in said
    assert "1 of 2 gates failed" in said and "exact_match=0.99" in said, said
    cases = {case.get("name") for case in ET.parse(junit).getroot().iter("testcase")}
    assert {"exact_match=0.99", "recall_at_5=0.1", "bm25-llm::q001"} <= cases, cases  # --junit-items kept too
    other = tmp_path / "other.xml"  # a --junit alone is a report's path, no gate: the recorded gates still hold
    moved = ragscore("run", "--resume", out, "--junit", other, "-q", home=home)
    said = " ".join(moved.stderr.split())
    assert moved.returncode == 3 and "1 of 2 gates failed" in said, said
    assert f"held to the gates it was started with: --fail-under recall_at_5=0.1 --junit {other}" in said, said
    assert "recall_at_5=0.1" in {case.get("name") for case in ET.parse(other).getroot().iter("testcase")}
    replaced = ragscore("run", "--resume", out, "--fail-under", "mrr=0.1", "-q", home=home)  # options replace them
    assert replaced.returncode == 3 and "1 of 2 gates failed" in replaced.stderr, replaced.stderr
    assert "held to the gates" not in replaced.stderr and "recall_at_5=0.1" not in replaced.stderr, replaced.stderr
    again = ragscore("resume", out, "-q", home=home)  # the cluster's command: the suite's gates and the started ones
    assert again.returncode == 3 and "1 of 2 gates failed" in again.stderr, again.stderr


def test_a_run_error_with_gates_exits_1_not_3(tmp_path: Path, home: Path) -> None:
    broken = ragscore(
        "run", DATA, "--suite", SUITE, "--out", tmp_path / "o", "--broker", "redis://127.0.0.1:1/0",
        "--fail-under", "exact_match=0.1", home=home, timeout=120,
    )  # fmt: skip
    assert broken.returncode == 1, broken.stderr
    said = " ".join(broken.stderr.split())
    # a port refused on this machine is said after one ping, not ~20 s of retries (a user saw nothing for 22.8 s)
    assert "Cannot use Redis at redis://127.0.0.1:1/0" in said and "nothing listens on port 1 of 127.0.0.1" in said
    assert "retrying" not in said, said


def test_a_metric_whose_every_item_errored_exits_1_with_the_reports_written(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{"id": f"q{i}", "question": f"Q{i}? [[rating=4]]", "answer": "Paris", "reference": "Paris" if i % 2
             else "Rome"} for i in range(6)]  # fmt: skip
    data = write_jsonl(tmp_path / "data.jsonl", rows)
    monkeypatch.setenv("GROQ_API_KEY", "gsk-GATES-TEST")
    with FakeProvider(api_key="gsk-GATES-TEST") as fake:
        judge = {"base_url": fake.url, "model": "fake-gates", "rpm": None, "tpm": None}
        spec = {"name": "answer_accuracy", "params": {"breaker_failures": 100}}  # every call fails, none opens it
        suite = tmp_path / "suite.yaml"
        suite.write_text(yaml.safe_dump({"metrics": ["exact_match", spec], "judge": judge}))
        fake.fail_next("400", 12)  # the provider refuses every request (a model name it does not serve, say)
        res = ragscore("run", data, "--suite", suite, "--out", tmp_path / "out", "--fail-under", "exact_match=0.9",
                       home=home)  # fmt: skip
        assert res.returncode == 1, res.stderr  # a run that produced nothing for a metric is not a gate miss (3)
        assert "no scores for answer_accuracy: every item that reached them errored" in res.stderr
        assert "HTTP 400" in res.stderr
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())["metrics"]
        assert summary["exact_match"]["mean"] == 0.5 and summary["answer_accuracy"]["errors"] == 6
        assert "FAIL" in _gate_line(res.stderr, "exact_match=0.9")  # the gates were still checked and shown

        fine = ragscore("run", "--resume", tmp_path / "out", "-q", home=home)
        # the provider serves again: the errored items are judged (no exit 1), and the run's gate still misses
        assert fine.returncode == 3, fine.stderr
        assert "held to the gates it was started with: --fail-under exact_match=0.9" in fine.stderr, fine.stderr
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())["metrics"]
        assert summary["answer_accuracy"]["errors"] == 0 and summary["answer_accuracy"]["n"] == 6


def test_a_ci_low_gate_on_one_scored_item_fails_and_junit_says_why(tmp_path: Path, home: Path) -> None:
    """One scored item has a mean but no interval: the JUnit failure must not claim there was no scored item."""
    row = {"id": "q1", "question": "Q?", "answer": "Paris", "reference": "Paris", "retrieved_doc_ids": ["d1"],
           "gold_doc_id": "d1"}  # fmt: skip  # every quickstart output scores it: none is a run error (exit 1)
    data = write_jsonl(tmp_path / "one.jsonl", [row])
    junit = tmp_path / "junit.xml"
    res = ragscore("run", data, "--suite", SUITE, "--out", tmp_path / "out", "-q",
                   "--fail-under", "exact_match:ci_low=0.5", "--junit", junit, home=home)  # fmt: skip
    assert res.returncode == 3, res.stderr
    assert "no interval from 1 scored item" in _gate_line(res.stderr, "exact_match:ci_low=0.5")
    gates = next(s for s in ET.parse(junit).getroot() if s.get("name") == "ragscore.gates")
    (case,) = gates.iter("testcase")
    message = case.find("failure").get("message")
    assert "no scored item" not in message and "no interval from 1 scored item" in message, message


def test_junit_of_a_run_that_exits_1_is_not_all_green(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every item of an ungated metric errored: the job exits 1, so the CI's test report must show an error too."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing")
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "answer": "Paris", "reference": "Paris", "metadata": {"fail": "boom"}}
            for i in range(4)]  # fmt: skip
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({"metrics": ["exact_match", "fail_on_flag"]}))
    junit = tmp_path / "junit.xml"
    res = ragscore("run", write_jsonl(tmp_path / "d.jsonl", rows), "--suite", suite, "--out", tmp_path / "out", "-q",
                   "--fail-under", "exact_match=0.5", "--junit", junit, home=home)  # fmt: skip
    assert res.returncode == 1, res.stderr
    root = ET.parse(junit).getroot()
    assert root.get("errors") == "1" and root.get("failures") == "0", ET.tostring(root)[:300]
    gates = next(s for s in root if s.get("name") == "ragscore.gates")
    assert gates.get("tests") == "2" and gates.get("errors") == "1"
    (error,) = gates.iter("error")
    assert "no scores for fail_on_flag" in error.get("message") and "cannot score row q" in error.get("message")


@pytest.mark.parametrize("gone", ["stdout", "stdout and stderr"])
def test_a_reader_that_leaves_early_does_not_cut_the_run_short(tmp_path: Path, home: Path, gone: str) -> None:
    """``ragscore run ... | head`` (or ``2>&1 | head``, a pager quit early): the first line written after the reader
    left ended the command with exit 1 and nothing said, a run half scored or its gates never checked, no JUnit
    file; the run goes on unread to its reports, gates, JUnit file and exit code."""
    import os
    import subprocess
    import sys

    from ..support import ROOT

    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    env.pop("RAGSCORE_BROKER_URL", None)
    both = gone == "stdout and stderr"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "run", str(DATA), "--suite", str(SUITE), "--out", str(out),
         "--fail-under", "exact_match=0.99", "--junit", str(junit)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if both else subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the first line: every write to it fails (EPIPE)
    stderr = proc.communicate(timeout=300)[1] or ""  # stdout closed: stderr alone is read (None where merged)
    assert proc.returncode == 3, stderr  # the missed gate, not 1
    assert junit.is_file() and 'name="exact_match=0.99"' in junit.read_text()
    assert len((out / "items.jsonl").read_text().splitlines()) == 50
    if not both:
        assert "1 of 1 gate failed" in stderr and "Traceback" not in stderr


def test_a_junit_path_that_is_a_directory_is_refused_before_the_run(tmp_path: Path, home: Path) -> None:
    """It was found once the whole run had been scored (an OSError, exit 1, no JUnit file)."""
    res = ragscore("run", DATA, "--suite", SUITE, "--out", tmp_path / "out", "--junit", tmp_path, home=home)
    assert res.returncode == 2 and f"--junit {tmp_path} is a directory" in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()  # nothing was run
    (tmp_path / "a-file").write_text("")
    junit = tmp_path / "a-file" / "junit.xml"  # its folder cannot be made: the same, said before the run
    res = ragscore("run", DATA, "--suite", SUITE, "--out", tmp_path / "out", "--fail-under", "exact_match=0.1",
                   "--junit", junit, home=home)  # fmt: skip
    assert res.returncode == 2 and f"--junit {junit} cannot be written" in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_a_junit_path_that_is_a_link_writes_its_target_and_keeps_the_link(tmp_path: Path, home: Path) -> None:
    """``--junit LINK`` removed the link before the run and wrote a regular file in its place: the CI's report
    path, a link to where its test reports are collected, got none. The link's target is written; a loop of
    links is refused before the run."""
    row = {"id": "q1", "question": "Q?", "answer": "Paris", "reference": "Paris", "retrieved_doc_ids": ["d1"],
           "gold_doc_id": "d1"}  # fmt: skip  # every quickstart output scores it: none is a run error (exit 1)
    data = write_jsonl(tmp_path / "one.jsonl", [row])
    target = tmp_path / "reports" / "junit.xml"
    target.parent.mkdir()
    target.write_text("<testsuites/>\n")  # the last run's report, not this one's
    link = tmp_path / "junit.xml"
    link.symlink_to(target)
    res = ragscore("run", data, "--suite", SUITE, "--out", tmp_path / "out", "-q",
                   "--fail-under", "exact_match=0.5", "--junit", link, home=home)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert 'name="exact_match=0.5"' in target.read_text()
    loop = tmp_path / "loop.xml"
    loop.symlink_to(loop)
    res = ragscore("run", data, "--suite", SUITE, "--out", tmp_path / "out2", "--fail-under", "exact_match=0.5",
                   "--junit", loop, home=home)  # fmt: skip
    assert res.returncode == 2 and f"--junit {loop} is a link in a loop of links" in res.stderr, res.stderr
    assert not (tmp_path / "out2").exists()


def test_a_baseline_or_report_dir_of_an_interrupted_run_says_to_resume_it(tmp_path: Path, home: Path) -> None:
    """``--fail-on-regression DIR`` of a run interrupted before its reports said "DIR/summary.json not found (give
    the --out DIR of the baseline run)", ``compare``/``report DIR`` "DIR is not a ragscore output directory" and
    ``consensus DIR`` "DIR/items.jsonl not found", though DIR is that run's --out DIR: none said the run is there,
    unfinished, nor how to finish it."""
    base = tmp_path / "base"
    with pytest.raises(TimeoutError):
        run(DATA, load_suite(SUITE), base, timeout_s=0.01)  # "interrupted" at once: no reports written
    run_id = json.loads((base / "run.json").read_text())["run_id"]
    said = f"{base} holds run {run_id}, which has not written its reports (interrupted?): finish it with `ragscore run"
    for stderr in _refused_by_every_reader(base, tmp_path, home):
        assert said in stderr, stderr


def test_a_resume_gated_on_its_own_unfinished_dir_says_what_to_do_not_its_own_command(
    tmp_path: Path, home: Path
) -> None:
    """``ragscore run --resume DIR --fail-on-regression DIR`` of a run that has not written its reports said "finish it
    with `ragscore run --resume DIR`, then gate on it": the user's own command. It says a run cannot be its own
    baseline, and what to do instead. Seen failing before: it said "finish it with `ragscore run --resume ..."."""
    base = tmp_path / "base"
    with pytest.raises(TimeoutError):
        run(DATA, load_suite(SUITE), base, timeout_s=0.01)  # "interrupted" at once: no reports written
    run_id = json.loads((base / "run.json").read_text())["run_id"]
    (tmp_path / "link").symlink_to(base)
    for resumed, baseline in ((base, base), ("base/", tmp_path / "link")):  # the same folder, however it is named
        res = ragscore("run", "--resume", resumed, "--fail-on-regression", baseline, home=home, cwd=tmp_path)
        said = " ".join(res.stderr.split())
        assert res.returncode == 2, res.stderr
        assert f"names the run this --resume finishes ({run_id}, which has not written its reports)" in said, said
        assert "cannot be its own baseline" in said and "the --out DIR of another, finished run" in said, said
        assert "finish it with" not in said, said
        assert not (base / "summary.json").exists()  # refused before anything ran
    other, _ = _baseline(tmp_path / "finished", home)  # another, finished run's folder is a baseline it gates on
    res = ragscore("run", "--resume", base, "--fail-on-regression", other, "-q", home=home)
    assert res.returncode == 0, res.stderr
    assert json.loads((base / "summary.json").read_text())["run_id"] == run_id


def _refused_by_every_reader(base: Path, tmp_path: Path, home: Path) -> list[str]:
    """What ``--fail-on-regression base``, ``report``, ``compare`` and ``consensus base`` say (on one line each),
    each refused (exit 2)."""
    readers = (["run", DATA, "--suite", SUITE, "--dry-run", "--fail-on-regression", base], ["report", base],
               ["compare", base, DATA.parent], ["consensus", base, "--out", tmp_path / "g.jsonl"])  # fmt: skip
    said = []
    for command in readers:
        read = ragscore(*command, home=home)
        assert read.returncode == 2, (command, read.stderr)
        said.append(" ".join(read.stderr.split()))
    return said


def test_a_baseline_or_report_dir_of_a_run_its_redis_lost_says_to_run_it_again(tmp_path: Path, home: Path) -> None:
    """A run its Redis lost (flushed while it ran) is marked lost in DIR/run.json, and ``--resume DIR`` is refused
    for it; yet ``--fail-on-regression DIR``, ``report``/``compare DIR`` and ``consensus DIR`` said "finish it with
    `ragscore run --resume DIR`", a dead end. They say it was lost, why, and that it must be run again. Seen failing
    before: each said to finish it with --resume."""
    base = tmp_path / "base"
    server = RedisProcess(tmp_path / "redis").start()
    try:  # no worker serves the run: it waits, and its store loses it at its first poll
        lose = HookedProgress(on_update=lambda counters: redis_client(server.url).flushall())
        with pytest.raises(RunLostError):
            run(DATA, load_suite(SUITE), base, broker=server.url, progress=lose, timeout_s=120)
    finally:
        server.stop()
    recorded = json.loads((base / "run.json").read_text())
    run_id, lost = recorded["run_id"], recorded["lost"]
    said = (f"{base} names run {run_id}, which cannot be resumed: {lost}. Run it again with the same DATASET and "
            f"--suite (--out {base} is free for it)")  # fmt: skip
    for stderr in _refused_by_every_reader(base, tmp_path, home):
        assert said in stderr and "--resume" not in stderr, stderr
