"""``ragscore report DIR --format nlp-project`` reproduces the framework's own dev_extension3_evaluation.json.

The run reads the framework's files (questions, the extension-3 predictions, the corpus) and scores
retrieval, citations, evidence overlap, the rubric judge and the combined score; the judge is the fake
provider replying, per question, the score and rationale the framework's judge gave (recorded in the file).
Every key and value of the recorded file is then compared with the one ragscore writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator import evaluate

from ..fakes import FakeProvider
from ..support import ROOT

pytestmark = pytest.mark.integration

DATA = ROOT / "tests" / "data" / "nlp-project"
QUESTIONS = DATA / "data" / "NLP Project Data" / "dev_final_jsonl.txt"
RECORDED = json.loads((DATA / "output" / "dev_extension3_evaluation.json").read_text(encoding="utf-8"))
SECRET = "gsk-NLP-REPORT-TEST-0a1b2c"
SUITE = {
    "name": "nlp-project",
    "metrics": [{"name": "recall_at_k", "params": {"k": [1, 5]}}, "citation", "evidence_overlap", "rubric_judge",
                {"name": "combined", "params": {"lambda": 0.5}}],
}  # fmt: skip


def _recorded_judge() -> dict[str, tuple[int, str]]:
    """Question text -> (score, rationale) the framework's judge gave."""
    texts = [json.loads(line)["question"] for line in QUESTIONS.read_text(encoding="utf-8").splitlines() if line]
    per_q = {q["question_id"]: q for q in RECORDED["rag_extension3"]["llm_judge"]["per_question"]}
    return {texts[i]: (per_q[f"q{i + 1:03d}"]["answer_score_raw"], per_q[f"q{i + 1:03d}"]["answer_rationale"])
            for i in range(len(texts))}  # fmt: skip


def _assert_same(ours: Any, recorded: Any, where: str = "") -> None:
    if isinstance(recorded, dict):
        assert isinstance(ours, dict) and list(ours) == list(recorded), (where, list(ours), list(recorded))
        for key in recorded:
            _assert_same(ours[key], recorded[key], f"{where}.{key}")
    elif isinstance(recorded, list):
        assert isinstance(ours, list) and len(ours) == len(recorded), where
        for i, (a, b) in enumerate(zip(ours, recorded, strict=True)):
            _assert_same(a, b, f"{where}[{i}]")
    elif isinstance(recorded, float):
        assert ours == pytest.approx(recorded, abs=1e-12), where
    else:
        assert ours == recorded, where


def test_nlp_project_format_reproduces_the_recorded_evaluation_file(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROQ_API_KEY", SECRET)
    judged = _recorded_judge()

    def responder(prompt: str, nth: int) -> str | None:
        found = [v for text, v in judged.items() if text in prompt]
        return json.dumps({"score": found[0][0], "rationale": found[0][1]}) if len(found) == 1 else None

    options = {"predictions": DATA / "output" / "dev_extension3_output.json", "corpus": DATA / "data" / "corpus",
               "system": "rag_extension3"}  # fmt: skip
    with FakeProvider(api_key=SECRET, responder=responder) as fake:
        suite = SUITE | {"judge": {"base_url": fake.url, "model": "fake-nlp", "rpm": None, "tpm": None}}
        result = evaluate(QUESTIONS, suite, out=tmp_path / "out", fmt="nlp-project", fmt_options=options)
    assert result.summary.items == 3 and result.summary.metrics["rubric_judge"].n == 3

    report = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path / "out"), "--format", "nlp-project"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    ours = json.loads((tmp_path / "out" / "dev_evaluation.json").read_text(encoding="utf-8"))
    _assert_same(ours, RECORDED)
    # The console summary the framework's users read.
    for line in ("Recall@1: 2/3 = 66.67%", "Recall@5: 2/3 = 66.67%", "F1: 0.570", "Answer score: 3.33/5",
                 "Combined score: 0.622"):  # fmt: skip
        assert line in report.stdout, report.stdout


def test_metrics_the_format_has_no_place_for_are_named_not_dropped_silently(tmp_path: Path, home: Path) -> None:
    options = {"predictions": DATA / "output" / "dev_extension3_output.json", "corpus": DATA / "data" / "corpus",
               "system": "rag_extension3"}  # fmt: skip
    suite = {"name": "no-judge", "metrics": [{"name": "recall_at_k", "params": {"k": [1]}}, "evidence_overlap",
                                             "exact_match"]}  # fmt: skip
    result = evaluate(QUESTIONS, suite, out=tmp_path / "out", fmt_options=options)  # the format is detected
    assert result.summary.metrics["evidence_overlap"].n == 3
    assert json.loads((tmp_path / "out" / "run_info.json").read_text(encoding="utf-8"))["format"] == "nlp-project"

    report = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path / "out"), "--format", "nlp-project"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    ours = json.loads((tmp_path / "out" / "dev_evaluation.json").read_text(encoding="utf-8"))
    assert list(ours["rag_extension3"]) == ["retrieval"]
    assert "evidence_overlap is written only inside llm_judge" in report.stderr, report.stderr
    assert "not in this format: exact_match" in report.stderr, report.stderr


def test_a_run_without_system_is_keyed_by_its_predictions_file(tmp_path: Path, home: Path) -> None:
    """No ``--system``: the key is the framework's name of the system, from its predictions file
    (``dev_extension3_output.json`` -> ``extension3``), not ragscore's own name; ``--name`` still sets it."""
    options = {"predictions": DATA / "output" / "dev_extension3_output.json", "corpus": DATA / "data" / "corpus"}
    suite = {"name": "recall", "metrics": [{"name": "recall_at_k", "params": {"k": [1]}}]}
    evaluate(QUESTIONS, suite, out=tmp_path / "out", fmt_options=options)
    for args, key in (([], "extension3"), (["--name", "rag"], "rag")):
        report = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path / "out"), "--format", "nlp-project",
             *args], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=120,
        )  # fmt: skip
        assert report.returncode == 0, report.stderr
        assert list(json.loads((tmp_path / "out" / "dev_evaluation.json").read_text(encoding="utf-8"))) == [key]
        assert f"{key} on dev" in report.stdout, report.stdout


def test_judge_averages_leave_out_questions_a_score_could_not_be_given() -> None:
    """A judged question without evidence sentences has no evidence or combined score: the averages divide
    by the questions that have one (as summary.json does), not by every judged question."""
    from orchestrator.reports.nlp_project import evaluation_json
    from ragscore_workers.store import RawItem

    def item(qid: str, evidence: float | None) -> RawItem:
        combined = None if evidence is None else 0.5 * 0.8 + 0.5 * evidence
        metrics = {
            "rubric_judge_raw": {"score": 4.0}, "rubric_judge": {"score": 0.8, "details": {"rationale": "ok"}},
            "evidence_overlap": {"score": evidence}, "combined": {"score": combined, "details": {"lambda": 0.5}},
        }  # fmt: skip
        return RawItem(key=qid, meta={"id": qid}, metrics=metrics)

    judge = evaluation_json([item("q1", 1.0), item("q2", None)], None, "rag")["rag"]["llm_judge"]
    assert judge["questions_with_rubrics"] == 2 and judge["avg_answer_score"] == 4.0
    assert judge["avg_evidence_score"] == 1.0 and judge["avg_combined_score"] == pytest.approx(0.9)


def test_questions_that_could_not_be_read_are_named_beside_the_totals(tmp_path: Path, home: Path) -> None:
    """A prediction asking another question sends its question to failed_rows.jsonl; the framework's totals then
    read "Recall@1: 1/2" with no word of the third question (a bad prediction raised the recall)."""
    predictions = json.loads((DATA / "output" / "dev_extension3_output.json").read_text(encoding="utf-8"))
    predictions["q003"]["question"] = "Another question altogether?"
    (tmp_path / "pred.json").write_text(json.dumps(predictions), encoding="utf-8")
    options = {"predictions": tmp_path / "pred.json", "corpus": DATA / "data" / "corpus", "system": "rag_extension3"}
    suite = {"name": "retrieval", "metrics": [{"name": "recall_at_k", "params": {"k": [1]}}]}
    with pytest.warns(UserWarning, match="1 row was unreadable"):
        evaluate(QUESTIONS, suite, out=tmp_path / "out", fmt="nlp-project", fmt_options=options)
    report = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path / "out"), "--format", "nlp-project"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "/2 = " in report.stdout, report.stdout
    said = " ".join(report.stderr.split())
    assert "1 row of the dataset could not be read: in none of these totals (see failed_rows.jsonl)" in said, said


def test_the_evaluation_file_never_replaces_a_file_ragscore_did_not_write(tmp_path: Path, home: Path) -> None:
    """``report --format nlp-project --out DIR`` wrote DIR/dev_evaluation.json over the user's own (the framework's,
    in the same layout) where the other formats refuse: refused (exit 2), the file as it was. What ragscore wrote
    there is its own to replace (the same report again, or another: ``--name``), until the user edits it."""
    options = {"predictions": DATA / "output" / "dev_extension3_output.json", "corpus": DATA / "data" / "corpus",
               "system": "rag_extension3"}  # fmt: skip
    suite = {"name": "recall", "metrics": [{"name": "recall_at_k", "params": {"k": [1]}}]}
    evaluate(QUESTIONS, suite, out=tmp_path / "out", fmt_options=options)

    def report(out: Path, run: str = "out") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "report", str(tmp_path / run), "--format", "nlp-project",
             "--out", str(out)], capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "300"},
            timeout=120,
        )  # fmt: skip

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "dev_evaluation.json").write_text('{"simple": {}}\n')
    refused = report(mine)
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert f"{mine} holds dev_evaluation.json, which ragscore has no record of writing" in said, said
    assert "choose another --out or --split, or remove it" in said and "Traceback" not in said
    assert (mine / "dev_evaluation.json").read_text() == '{"simple": {}}\n'
    assert sorted(p.name for p in mine.iterdir()) == ["dev_evaluation.json"]
    for _ in range(2):  # what ragscore wrote there is its own
        wrote = report(tmp_path / "again")
        assert wrote.returncode == 0, wrote.stderr
    ours = tmp_path / "again" / "dev_evaluation.json"
    suite["metrics"] = [{"name": "recall_at_k", "params": {"k": [1, 3]}}]
    evaluate(QUESTIONS, suite, out=tmp_path / "other", fmt_options=options)
    another = report(tmp_path / "again", run="other")  # another run's report over ragscore's own file
    assert another.returncode == 0, another.stderr
    assert "recall_at_3" in ours.read_text()
    ours.write_text(ours.read_text().replace("recall_at_3", "edited"))
    edited = report(tmp_path / "again")
    assert edited.returncode == 2, edited.stderr
    assert "which ragscore has no record of writing" in " ".join(edited.stderr.split())
    assert "edited" in ours.read_text()
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "dev_evaluation.json").symlink_to("/dev/null")  # not a file ragscore wrote: not replaced
    linked = report(tmp_path / "links")
    assert linked.returncode == 2 and "which ragscore has no record of writing" in " ".join(linked.stderr.split())
    assert (tmp_path / "links" / "dev_evaluation.json").is_symlink()
    (tmp_path / "a-file").write_text("x")
    for where in (tmp_path / "a-file", tmp_path / "a-file" / "sub"):  # DIR a file: said as before, not as ours
        refused = report(where)
        assert refused.returncode == 2 and "Cannot write the reports to" in refused.stderr, refused.stderr


@pytest.mark.parametrize(
    ("info", "key"),
    [
        ({"format_options": {"predictions": "out/dev_simple_output.json"}, "dataset": "dev_q.jsonl"}, "simple"),
        ({"format_options": {"predictions": "rag.json"}, "dataset": "dev_q.jsonl"}, "rag"),
        ({"format_options": {"predictions": "dev_output.json"}}, "output"),  # nothing but the split: the rest
        ({"format_options": {}, "dataset": "data/dev_final_jsonl.txt"}, "dev_final_jsonl"),
        ({}, "dataset"),
    ],
)
def test_the_key_of_items_without_a_system_is_the_predictions_files_else_the_datasets(
    info: dict[str, Any], key: str
) -> None:
    from orchestrator.reports.nlp_project import system_of

    assert system_of(info) == key
