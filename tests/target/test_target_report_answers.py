"""The worst items of a target run's reports show the answer the target gave (what was scored), read from the run
store (``report RUN_ID``, ``run``) or the run's answers.jsonl (``report DIR``, with ``--out`` elsewhere too, and
``report DIR2`` of a ``--format json --out DIR2``, which copies it as it is); never the dataset's own answer. A
store lost while they are read is said, and the report still written."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.reports import from_dir, write_reports
from orchestrator.reports.source import store_answers
from orchestrator.reports.texts import MAX_PREVIEW_CHARS, preview
from ragscore_workers.errors import ReportError
from ragscore_workers.schemas import item_key
from ragscore_workers.store import RunStore, redis_client

from ..fakes import FakeRag
from ..fakes.fake_rag import answer_locally, callable_long_answer, questions
from ..support import RedisProcess

pytestmark = pytest.mark.integration

TOKEN = "rag-secret-token-0123456789"
N = 4


def _worst(path: Path) -> str:
    """The worst-items section of a report.md or report.html."""
    text = path.read_text(encoding="utf-8")
    return text.split('id="worst"')[1] if path.suffix == ".html" else text.split("## Worst items")[1].split("\n## ")[0]


def _report_exit(*args: str) -> subprocess.CompletedProcess[str]:
    """``ragscore report ARGS``, as it ended."""
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "report", *args], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=300)  # fmt: skip


def _report(*args: str) -> None:
    done = _report_exit(*args)
    assert done.returncode == 0, done.stderr[-2000:]


def test_reports_show_the_answer_the_target_gave_not_the_datasets(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FAKE_RAG_TOKEN", TOKEN)
    rows = [row | {"answer": f"STALE dataset answer {i}"} for i, row in enumerate(questions(N))]
    with FakeRag(token=TOKEN) as rag:
        target = {
            "system": "sloppy",
            "url": rag.url("sloppy"),
            "request": {"question": "{question}"},
            "auth_env": "FAKE_RAG_TOKEN",
            "response": {"answer": "answer", "contexts": "contexts[*].text", "citations": "citations"},
        }
        result = evaluate(rows, {"metrics": ["verbatim"], "target": target}, out=tmp_path / "out")
    # sloppy paraphrases its even-numbered questions' second quote (verbatim 0.5): q0 and q2 are the worst items
    given = preview(answer_locally("sloppy", {"question": rows[0]["question"]})["answer"])
    assert given is not None and "Roughly speaking" in given
    run_id = result.summary.run_id
    _report(str(tmp_path / "out"), "--format", "md", "--out", str(tmp_path / "other"))  # answers.jsonl of the DIR
    _report(run_id, "--format", "html", "--out", str(tmp_path / "store"))  # the run store
    for path in (tmp_path / "out" / "report.md", tmp_path / "out" / "report.html", tmp_path / "other" / "report.md",
                 tmp_path / "store" / "report.html"):  # fmt: skip
        worst = _worst(path)
        assert rows[0]["question"] in worst, path
        assert (given if path.suffix == ".md" else given.replace("'", "&#39;")) in worst, path
        assert "STALE" not in worst and "not available" not in worst, path

    # A json report elsewhere is an output DIR of its own: its answers.jsonl is the run's, from a DIR or the store
    _report(str(tmp_path / "out"), "--format", "json", "--out", str(tmp_path / "copy"))
    _report(run_id, "--format", "json", "--out", str(tmp_path / "from-store"))
    for copy in (tmp_path / "copy", tmp_path / "from-store"):
        assert (copy / "answers.jsonl").read_bytes() == (tmp_path / "out" / "answers.jsonl").read_bytes(), copy
        _report(str(copy), "--format", "md")
        assert given in _worst(copy / "report.md") and "is gone" not in _worst(copy / "report.md"), copy

    # A DIR's answers.jsonl is copied as it is, a line no reader takes too: it stopped the report once, after
    # OTHER's summary.json was written
    shutil.copytree(tmp_path / "out", tmp_path / "odd")
    with (tmp_path / "odd" / "answers.jsonl").open("ab") as fh:
        fh.write(b'{"id": "cut short\n')
    _report(str(tmp_path / "odd"), "--format", "json", "--out", str(tmp_path / "odd-copy"))
    assert (tmp_path / "odd-copy" / "answers.jsonl").read_bytes() == (tmp_path / "odd" / "answers.jsonl").read_bytes()

    # A run without targets reported into an OTHER that holds another run's reports (its answers.jsonl: its reports
    # would show that run's answers) is refused, naming that run, and writes nothing there (hCZ: it replaced them)
    evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "plain")
    before = {path.name: path.read_bytes() for path in (tmp_path / "copy").iterdir()}
    refused = _report_exit(str(tmp_path / "plain"), "--format", "json", "--out", str(tmp_path / "copy"))
    assert refused.returncode == 2 and f"holds run {run_id}" in " ".join(refused.stderr.split()), refused.stderr
    assert {path.name: path.read_bytes() for path in (tmp_path / "copy").iterdir()} == before
    # ... but a user's own answers.jsonl in a run's DIR (no report wrote it there) is left as it is
    shutil.copytree(tmp_path / "plain", tmp_path / "mine")
    (tmp_path / "mine" / "answers.jsonl").write_text('{"id": "q0", "answer": "my own"}\n', encoding="utf-8")
    _report(str(tmp_path / "plain"), "--format", "json", "--out", str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "answers.jsonl").read_text(encoding="utf-8") == '{"id": "q0", "answer": "my own"}\n'
    # ... and, not being that run's (nor one an older ragscore's target run left there, which kept no record), is not
    # copied with its files: its reports never read it, and a copy would pass it on as a report's own
    _report(str(tmp_path / "mine"), "--format", "json", "--out", str(tmp_path / "mine-copy"))
    assert (tmp_path / "mine-copy" / "summary.json").is_file()
    assert not (tmp_path / "mine-copy" / "answers.jsonl").exists()

    # The store lost while the answers are read: said, the answers "-", the report written all the same
    redis = RedisProcess(tmp_path / "gone").start()
    redis.stop()
    gone = RunStore(redis_client(redis.url, read_timeout_s=5, retries=0), ttl_s=3600)
    run = dataclasses.replace(from_dir(tmp_path / "out"), answers=store_answers(gone, run_id))
    write_reports(run, tmp_path / "lost", ["md"])
    worst = _worst(tmp_path / "lost" / "report.md")
    assert "the targets' answers could not be read" in worst and "Roughly speaking" not in worst
    line = next(x for x in worst.splitlines() if x.startswith("| 1 |"))
    assert rows[0]["question"] in line or rows[2]["question"] in line
    assert line.split(" | ")[5] == "-", line

    # A DIR without its answers.jsonl: said, naming the file, the answers "-", the report written all the same
    shutil.copytree(tmp_path / "out", tmp_path / "bare")
    (tmp_path / "bare" / "answers.jsonl").unlink()
    _report(str(tmp_path / "bare"), "--format", "md", "--out", str(tmp_path / "bare-report"))
    worst = _worst(tmp_path / "bare-report" / "report.md")
    assert f"{tmp_path / 'bare' / 'answers.jsonl'} is gone" in worst and "Roughly speaking" not in worst, worst
    line = next(x for x in worst.splitlines() if x.startswith("| 1 |"))
    assert line.split(" | ")[5] == "-", line

    # A DIR whose answers.jsonl lacks the worst items' rows (cut short by a copy): said, naming the file, not a bare "-"
    shutil.copytree(tmp_path / "out", tmp_path / "cut")
    kept = [x for x in (tmp_path / "cut" / "answers.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
            if '"id": "q0"' not in x and '"id": "q2"' not in x]  # fmt: skip
    assert len(kept) == N - 2
    (tmp_path / "cut" / "answers.jsonl").write_text("".join(kept), encoding="utf-8")
    _report(str(tmp_path / "cut"), "--format", "md", "--out", str(tmp_path / "cut-report"))
    worst = _worst(tmp_path / "cut-report" / "report.md")
    assert f"2 of these items' answers are not in {tmp_path / 'cut' / 'answers.jsonl'}: not shown" in worst, worst
    line = next(x for x in worst.splitlines() if x.startswith("| 1 |"))
    assert line.split(" | ")[5] == "-", line


def test_an_answer_past_the_field_limit_shows_from_the_store_and_from_the_dir(home: Path, tmp_path: Path) -> None:
    # A target's answer is bounded by its reply's size, not by RAGSCORE_MAX_FIELD_CHARS: report DIR read it back
    # through the dataset loader, which refused its row, and showed "-" where report RUN_ID showed it
    target = {"system": "wordy", "callable": "tests.fakes.fake_rag:callable_long_answer",
              "request": {"question": "{question}"}}  # fmt: skip
    result = evaluate(questions(N), {"metrics": ["exact_match"], "target": target}, out=tmp_path / "out")
    long = preview(callable_long_answer({"question": questions(1)[0]["question"]})["answer"])
    assert long is not None and long.endswith("…") and len(long) == MAX_PREVIEW_CHARS
    _report(result.summary.run_id, "--format", "md", "--out", str(tmp_path / "store"))
    _report(str(tmp_path / "out"), "--format", "md", "--out", str(tmp_path / "dir"))
    for path in (tmp_path / "store" / "report.md", tmp_path / "dir" / "report.md"):
        line = next(x for x in _worst(path).splitlines() if x.startswith("| 1 |"))
        assert "q0" in line and long in line, (path, line[:500])
        assert "not in" not in _worst(path) and "could not be read" not in _worst(path), path
    # Read back for these items alone, each as the preview shown: the worst items' answers, long, are not held whole
    keys = {item_key("wordy", f"q{i}") for i in range(N)}
    assert from_dir(tmp_path / "out").answers.read(keys)[item_key("wordy", "q0")] == long


def test_answers_are_written_before_the_reports(home: Path, tmp_path: Path) -> None:
    # A report that fails (here items.jsonl cannot replace the folder standing at its name) leaves answers.jsonl,
    # written first: the answers the target gave are never lost with the reports, and can be re-scored
    (tmp_path / "out" / "items.jsonl").mkdir(parents=True)
    target = {"system": "library", "callable": "tests.fakes.fake_rag:callable_target",
              "request": {"question": "{question}"}, "response": {"contexts": "contexts[*].text"}}  # fmt: skip
    with pytest.raises(ReportError, match="Is a directory"):
        evaluate(questions(N), {"metrics": ["verbatim"], "target": target}, out=tmp_path / "out")
    answers = (tmp_path / "out" / "answers.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["id"] for line in answers) == [f"q{i}" for i in range(N)]
    assert not (tmp_path / "out" / "summary.json").exists()
