"""``examples/ci/github-actions.yml``: valid YAML with the expected steps, and its gated command really holds."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from orchestrator.gates import parse_gate

from ..support import ROOT
from .helpers import ragscore

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"


def _steps() -> list[dict]:
    data = yaml.safe_load(WORKFLOW.read_text())
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert set(triggers) == {"push", "pull_request"}
    (job,) = data["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    return job["steps"]


def _run_step(steps: list[dict]) -> list[str]:
    (command,) = [s["run"] for s in steps if "ragscore run" in s.get("run", "")]
    return shlex.split(command)


def test_workflow_parses_and_checks_out_sets_up_bootstraps_runs_and_uploads() -> None:
    steps = _steps()
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert uses[:2] == ["actions/checkout", "actions/setup-python"]
    assert any(s.get("run", "").startswith("scripts/bootstrap") for s in steps)
    argv = _run_step(steps)
    assert argv[:2] == [".venv/bin/ragscore", "run"] and "--fail-under" in argv and "--junit" in argv
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    junit = argv[argv.index("--junit") + 1]
    assert Path(junit).parent == Path(upload["with"]["path"])
    for value in (argv[i + 1] for i, a in enumerate(argv) if a == "--fail-under"):
        parse_gate(value)
    assert (ROOT / "scripts" / "bootstrap").exists()


@pytest.mark.integration
def test_the_workflow_command_passes_its_gates_on_the_quickstart(tmp_path: Path, home: Path) -> None:
    argv = _run_step(_steps())[1:]  # drop .venv/bin/ragscore: run this interpreter's module instead
    argv[argv.index("--out") + 1] = str(tmp_path / "out")
    argv[argv.index("--junit") + 1] = str(tmp_path / "junit.xml")
    res = ragscore(*argv, home=home)
    assert res.returncode == 0, res.stderr
    assert "all 2 gates hold" in res.stderr
    root = ET.parse(tmp_path / "junit.xml").getroot()
    gates = next(s for s in root if s.get("name") == "ragscore.gates")
    assert gates.get("tests") == "2" and gates.get("failures") == "0"
    # the job passes, so its test report does too: a CI reporter counted thousands of item cases below the
    # gates' bars (an exact_match of 0) as failures of a green job
    assert (root.get("failures"), root.get("errors")) == ("0", "0"), ET.tostring(root)[:300]
    assert [s.get("name") for s in root] == ["ragscore.gates"]
    # the next step gates the quickstart's two systems on their paired differences, from the run's --out DIR
    (compare,) = [shlex.split(s["run"])[1:] for s in _steps() if "ragscore compare" in s.get("run", "")]
    assert compare[1] == "out/quickstart" and "--fail-on-worse" in compare
    compare[1], compare[compare.index("--out") + 1] = str(tmp_path / "out"), str(tmp_path / "out" / "compare")
    res = ragscore(*compare, home=home)
    assert res.returncode == 0, res.stderr
    assert "--fail-on-worse holds on all 4 differences: no system is significantly worse than bm25-llm" in res.stderr
    assert (tmp_path / "out" / "compare" / "compare.md").is_file()


@pytest.mark.integration
def test_the_gate_table_in_a_ci_log_keeps_every_gate_name_whole(tmp_path: Path, home: Path) -> None:
    """A CI job's stderr is no terminal and sets no COLUMNS: the gate table must not be cut to 80 columns,
    where ``recall_at_5:ci_low=0.6`` read ``recall_at_5…`` (which recall? which gate?)."""
    argv = _run_step(_steps())[1:]
    argv[argv.index("--out") + 1] = str(tmp_path / "out")
    argv[argv.index("--junit") + 1] = str(tmp_path / "junit.xml")
    res = ragscore(*argv, home=home, columns=None)
    assert res.returncode == 0, res.stderr
    gates = [a for a in argv if "=" in a and not a.startswith("-")]
    assert gates and all(f" {gate} " in res.stderr for gate in gates), res.stderr
    assert "…" not in res.stderr.split("gates hold")[-1], res.stderr


@pytest.mark.integration
def test_a_system_missing_a_gate_the_pool_of_systems_holds_is_named(tmp_path: Path, home: Path) -> None:
    """The quickstart holds two systems and a gate reads their pooled mean: recall_at_5 0.837 passes 0.8 while
    bm25-llm alone scores 0.760. The gate still holds (it is the pool's), and the run says which system misses."""
    res = ragscore("run", ROOT / "examples/quickstart/data.jsonl", "--suite", ROOT / "examples/quickstart/suite.yaml",
                   "--out", tmp_path / "out", "-q", "--fail-under", "recall_at_5=0.8", home=home)  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    own = {s: per["recall_at_5"]["mean"] for s, per in summary["by_system"].items()}
    low = sorted(s for s, mean in own.items() if mean < 0.8)
    assert summary["metrics"]["recall_at_5"]["mean"] >= 0.8 and low == ["bm25-llm"]
    said = " ".join(res.stderr.split())
    assert f"gates read means over all 2 systems; on its own, bm25-llm recall_at_5 {own['bm25-llm']:.3f}" in said


PR_WORKFLOW = ROOT / "examples" / "ci" / "github-actions-pr.yml"


def _pr_workspace(tmp_path: Path) -> dict[str, str]:
    """The job's checkout in ``tmp_path``: the base branch's quickstart under ``base/``, the pull request's beside it
    with a quarter of hybrid-llm's answers made wrong; the workflow's env, with the step summary's file."""
    workflow = yaml.safe_load(PR_WORKFLOW.read_text())
    env = {**workflow["env"], "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md")}
    for root in (tmp_path / "base", tmp_path):
        (root / "examples").mkdir(parents=True, exist_ok=True)
        shutil.copytree(ROOT / "examples" / "quickstart", root / "examples" / "quickstart")
    rows = [json.loads(line) for line in (tmp_path / env["DATASET"]).read_text().splitlines()]
    for n, row in enumerate(rows):
        if row["system"] == "hybrid-llm" and n % 4 == 1:
            row["answer"] = "no idea"
    (tmp_path / env["DATASET"]).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return env


def _expanded(arg: str, env: dict[str, str]) -> str:
    """``arg`` with the workflow's ``$NAME``s in it replaced by their values, as the job's shell would."""
    for name, value in env.items():
        arg = arg.replace(f"${name}", value)
    return arg


@pytest.mark.integration
def test_the_pull_request_workflow_gates_a_worse_pull_request_against_its_base(tmp_path: Path, home: Path) -> None:
    """Each step of examples/ci/github-actions-pr.yml, in its order, from a plain shell in a workspace laid out as the
    job's: the base scores (0), the worse pull request fails its regression gate (3), compare runs on the two folders,
    and the job summary gets report.md, short enough for the pull-request comment."""
    env = _pr_workspace(tmp_path)
    (job,) = yaml.safe_load(PR_WORKFLOW.read_text())["jobs"].values()
    codes = []
    for step in job["steps"]:
        command = step.get("run", "")
        if command.startswith(".venv/bin/ragscore"):
            argv = [_expanded(arg, env) for arg in shlex.split(command)[1:]]
            codes.append(ragscore(*argv, home=home, cwd=tmp_path).returncode)
        elif command.startswith("cat "):
            subprocess.run(["bash", "-c", command], cwd=tmp_path, env={**os.environ, **env}, check=True)
    assert codes == [0, 3, 0]
    gates = json.loads((tmp_path / "out" / "pr" / "gates.json").read_text())
    assert [g["gate"] for g in gates["gates"] if g["result"] == "fail"] == ["exact_match=0.7", "exact_match:regression"]
    report = (tmp_path / "out" / "pr" / "report.md").read_text()
    assert report.splitlines()[4] == "## Gates" and len(report) < 65_536
    summary = (tmp_path / "step-summary.md").read_text()
    assert summary.startswith(report) and "# ragscore compare" in summary
