"""The issue's exact command line on the NLP project's dev split reproduces the recorded numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..support import ROOT

DATA = ROOT / "tests" / "data" / "nlp-project"


def test_ragscore_run_nlp_project_format_reproduces_dev_extension3(tmp_path: Path, home: Path) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text("metrics:\n  - {name: recall_at_k, params: {k: [1, 5]}}\n  - citation\n  - evidence_overlap\n")
    out = tmp_path / "out"
    questions = DATA / "data" / "NLP Project Data" / "dev_final_jsonl.txt"
    cmd = [
        sys.executable, "-m", "orchestrator.cli", "run", str(questions),
        "--format", "nlp-project", "--predictions", str(DATA / "output" / "dev_extension3_output.json"),
        "--corpus", str(DATA / "data" / "corpus"), "--suite", str(suite), "--out", str(out), "--quiet",
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    recorded = json.loads((DATA / "output" / "dev_extension3_evaluation.json").read_text())["rag_extension3"]
    m = summary["metrics"]
    assert m["recall_at_1"]["mean"] * 3 == pytest.approx(recorded["retrieval"]["recall_at_1"])
    assert m["recall_at_5"]["mean"] * 3 == pytest.approx(recorded["retrieval"]["recall_at_5"])
    cit = recorded["citation"]
    n = cit["questions_with_evidence"]
    assert m["citation_precision"]["mean"] == pytest.approx(cit["precision_sum"] / n)
    assert m["citation_recall"]["mean"] == pytest.approx(cit["recall_sum"] / n)
    assert m["citation_f1"]["mean"] == pytest.approx(cit["f1_sum"] / n)
    assert summary["items"] == 3 and summary["failed_rows"] == 0


def test_the_run_list_tells_runs_of_one_dataset_apart_by_their_predictions_file(tmp_path: Path, home: Path) -> None:
    """``ragscore status`` listed two runs of one questions file, read with two predictions files, alike (the questions
    file's name alone): each line names its predictions file now."""
    suite = tmp_path / "suite.yaml"
    suite.write_text("metrics:\n  - {name: recall_at_k, params: {k: [1]}}\n")
    questions = DATA / "data" / "NLP Project Data" / "dev_final_jsonl.txt"
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    env.pop("RAGSCORE_BROKER_URL", None)
    for name in ("dev_simple_output.json", "dev_extension1_output.json"):
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(questions), "--format", "nlp-project",
               "--predictions", str(DATA / "output" / name), "--suite", str(suite), "--out", str(tmp_path / name),
               "-q"]  # fmt: skip
        ran = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert ran.returncode == 0, ran.stderr
    listed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status"], capture_output=True, text=True,
                            cwd=ROOT, env=env, timeout=120)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    datasets = [line.split("\t")[-1] for line in listed.stdout.splitlines()[1:]]
    assert datasets == ["dev_final_jsonl.txt (predictions dev_simple_output.json)",
                        "dev_final_jsonl.txt (predictions dev_extension1_output.json)"], listed.stdout  # fmt: skip
