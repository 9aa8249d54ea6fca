"""Each seed example runs end to end as a user types it (``ragscore run examples/<fmt>/... --format <fmt>``),
embedded: a private redis-server and real workers; the per-item scores are the hand-computed ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..support import ROOT

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "examples"


def _run(
    dataset: Path, fmt: str, out: Path, *options: str
) -> tuple[dict[str, Any], dict[tuple[str, str | None], dict[str, Any]]]:
    cmd = [
        sys.executable, "-m", "orchestrator.cli", "run", str(dataset), "--format", fmt, *options,
        "--suite", str(EXAMPLES / fmt / "suite.yaml"), "--out", str(out), "--quiet",
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=300)
    assert result.returncode == 0, result.stderr
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    return json.loads((out / "summary.json").read_text()), {(i["id"], i["system"]): i["metrics"] for i in items}


def test_eval_points_directory(tmp_path: Path, home: Path) -> None:
    summary, items = _run(EXAMPLES / "eval-points", "eval-points", tmp_path / "out")
    scores = {key: m["checks"]["score"] for key, m in items.items()}
    assert scores == {
        ("photosynthesis", "gpt4"): 1.0,
        ("photosynthesis", "llama3"): pytest.approx(1 / 5),  # only "short" (weight 1 of 5) passes
        ("http caching", "gpt4"): 1.0,  # answer given inside points.json
        ("http caching", "mistral"): pytest.approx(1 / 3),  # from http_caching_mistral.txt (the topic's slug)
    }
    llama = items["photosynthesis", "llama3"]["checks"]["details"]
    assert llama["failed"] == ["chlorophyll", "products"] and llama["categories"] == {"Accuracy": 0.0, "Style": 1.0}
    hedging = next(p for p in llama["points"] if p["id"] == "no-hedging")
    assert (hedging["informational"], hedging["passed"]) == (True, False)
    assert summary["failed_rows"] == 0 and summary["wins"]["by_system"]["gpt4"]["wins"] == 2
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Wins per system (checks)" in report and "| gpt4 | 2 | 2 | 2 | 0 | 1.000 |" in report


def test_auto_analyst_list(tmp_path: Path, home: Path) -> None:
    _, items = _run(EXAMPLES / "auto-analyst" / "data.json", "auto-analyst", tmp_path / "out")
    quality = {key[0]: (m["quality_checks"]["score"], m["quality_checks"]["details"]) for key, m in items.items()}
    assert quality["row-1"] == (1.0, {"issues": [], "mean_retrieval_score": pytest.approx((0.82 + 0.64) / 2)})
    assert quality["row-2"] == (
        0.0,
        {"issues": ["list_not_formatted", "low_retrieval_score"], "mean_retrieval_score": pytest.approx(0.16)},
    )
    assert quality["row-3"] == (0.0, {"issues": ["no_contexts", "no_citation", "fallback_phrase"]})
    none = items["row-3", None]
    for name in ("context_relevance", "context_sufficiency", "answer_hallucination"):  # Auto-Analyst: 0.0 (1.0)
        assert (none[name]["score"], none[name]["details"]["reason"]) == (None, "no contexts")
    for metrics in items.values():  # reference_answer reached the embedding metrics as the reference
        assert metrics["answer_correctness"]["score"] == metrics["answer_relevance"]["score"] is not None
    assert items["row-1", None]["answer_correctness"]["score"] > items["row-3", None]["answer_correctness"]["score"]


def test_auto_analyst_list_of_an_llm_alone_exits_0(tmp_path: Path, home: Path) -> None:
    """The example's list answered by an LLM alone (no row has contexts), scored with the example's suite as the
    user types it: the context metrics leave every row unscorable, which ended the run with exit 1 as a misnamed
    column. They do not apply to the system: said once, in the summary, and the run exits 0 on what it scored."""
    rows = [{k: v for k, v in row.items() if k not in ("contexts", "retrieval_scores")}
            for row in json.loads((EXAMPLES / "auto-analyst" / "data.json").read_text())]  # fmt: skip
    (tmp_path / "llm.json").write_text(json.dumps(rows))
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(tmp_path / "llm.json"), "--format", "auto-analyst",
           "--suite", str(EXAMPLES / "auto-analyst" / "suite.yaml"), "--out", str(tmp_path / "out")]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=300)
    assert result.returncode == 0, result.stderr
    said = " ".join((result.stdout + result.stderr).split())
    assert "no scores for" not in said and "3 rows to score (0 unreadable)" in said, said
    for name in ("context_relevance", "context_sufficiency", "answer_hallucination"):
        assert said.count(f"{name}: no item could be scored, 3 unscorable (no contexts ×3)") == 1, said
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["metrics"]
    for name in ("context_relevance", "context_sufficiency", "answer_hallucination"):
        assert (summary[name]["n"], summary[name]["unscorable_reasons"]) == (0, {"no contexts": 3}), summary[name]
    assert summary["answer_correctness"]["n"] == summary["quality_checks"]["n"] == 3


def test_socioscope_corpus(tmp_path: Path, home: Path) -> None:
    summary, items = _run(EXAMPLES / "socioscope" / "corpus.json", "socioscope", tmp_path / "out")
    scores = {key: (m["typed_answer"]["score"], m["verbatim"]["score"]) for key, m in items.items()}
    assert scores == {
        ("employees", "gpt4"): (1.0, 1.0),
        ("employees", "llama3"): (0.5, 0.0),  # "four" weighs 0.5; the quote is not in the transcript
        ("rating", "gpt4"): (1.0, None),  # no citations: verbatim unscorable, not 0
        ("rating", "llama3"): (0.0, None),
        ("partners", "gpt4"): (1.0, 1.0),  # the second quote is found in the other transcript it cites
        ("partners", "llama3"): (0.5, None),
    }
    by_group = {g: {m: s["mean"] for m, s in metrics.items()} for g, metrics in summary["by_group"].items()}
    assert by_group == {
        "PL-008": {"typed_answer": pytest.approx((1 + 0.5 + 1 + 0) / 4), "verbatim": 0.5},
        "FR-002": {"typed_answer": pytest.approx(0.75), "verbatim": 1.0},
    }


def test_nlp_project_split_files(tmp_path: Path, home: Path) -> None:
    """The framework's own files (questions, predictions, gold corpus): its recorded per-question scores, and
    ``report --format nlp-project`` keys them by the predictions file's name."""
    example = EXAMPLES / "nlp-project"
    options = ("--predictions", str(example / "dev_rag_output.json"), "--corpus", str(example / "corpus"))
    summary, items = _run(example / "dev_questions.jsonl", "nlp-project", tmp_path / "out", *options)
    scores = {key[0]: (m["recall_at_1"]["score"], m["recall_at_5"]["score"], m["citation_f1"]["score"])
              for key, m in items.items()}  # fmt: skip
    assert scores == {"q001": (0.0, 0.0, 0.0), "q002": (1.0, 1.0, pytest.approx(0.8)),
                      "q003": (1.0, 1.0, pytest.approx(10 / 11))}  # fmt: skip
    assert summary["failed_rows"] == 0 and all(m["evidence_overlap"]["score"] is not None for m in items.values())
    report = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path / "out"), "--format", "nlp-project"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "Recall@1: 2/3 = 66.67%" in report.stdout and "rag on dev" in report.stdout, report.stdout
