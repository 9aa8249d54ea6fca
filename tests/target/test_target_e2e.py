"""End to end: questions -> a fake RAG server (real HTTP, two systems) -> scoring -> compare, embedded mode."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from orchestrator import evaluate, resume
from orchestrator.api import IncompleteRunWarning
from orchestrator.reports.markdown import TARGET_COLUMNS, TARGETS_NOTE
from ragscore_workers.answers import NO_RETRIEVAL, TARGET_ERROR
from ragscore_workers.errors import ConfigError, DatasetWarning

from ..fakes import FakeRag
from ..fakes.fake_rag import questions
from ..support import ROOT, RedisProcess, WorkerProcess, closed_port, write_jsonl

pytestmark = pytest.mark.integration

TOKEN = "rag-secret-token-0123456789"
N = 6


def _target(rag: FakeRag, system: str, **extra: Any) -> dict[str, Any]:
    return {
        "system": system,
        "url": rag.url(system),
        "request": {"question": "{question}", "id": "{id}", "k": 3, "filter": {"lang": "{metadata.lang}"},
                    "model": "rag-large"},
        "auth_env": "FAKE_RAG_TOKEN",
        "response": {"answer": "answer", "contexts": "contexts[*].text", "citations": "citations",
                     "retrieved_doc_ids": "contexts[*].doc_id", "evidence_sentences": "evidence"},
    } | extra  # fmt: skip


def _suite(targets: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "target-e2e",
        "metrics": ["verbatim", "citation", {"name": "recall_at_k", "params": {"k": [1]}}, "context_relevance",
                    "answer_relevance"],
        "targets": targets,
    }  # fmt: skip


def _by_key(items: list[Any]) -> dict[tuple[str | None, str], Any]:
    return {(i.system, i.id): i for i in items}


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("FAKE_RAG_TOKEN", TOKEN)
    return TOKEN


def test_two_systems_scored_compared_and_rescored_without_calls(home: Path, token: str, tmp_path: Path) -> None:
    with FakeRag(token=token) as rag:
        suite = _suite([_target(rag, "exact"), _target(rag, "sloppy")])
        first = evaluate(questions(N), suite, out=tmp_path / "first")
        calls_first = dict(rag.calls)
        requests = list(rag.requests)

        # The same suite again: every reply comes from the cache.
        second = evaluate(questions(N), suite, out=tmp_path / "second")
        calls_second = dict(rag.calls)

        # Re-score the stored answers (answers.jsonl) with another metric: no target is asked.
        rescore = tmp_path / "rescore"
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(tmp_path / "first" / "answers.jsonl"),
               "--suite", str(_write_suite(tmp_path, suite | {"metrics": ["verbatim", "exact_match"]})),
               "--no-target", "--out", str(rescore), "--quiet"]  # fmt: skip
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=600
        )
        calls_after_rescore = dict(rag.calls)

    assert calls_first == {"exact": N, "sloppy": N}, "every question asked of every system, once"
    assert calls_second == calls_first, "a re-run is served from the reply cache"
    assert calls_after_rescore == calls_first, "re-scoring stored answers makes no target call"
    assert done.returncode == 0, done.stderr[-2000:]

    # The request template: row fields, nested metadata, constants, auth from the environment.
    body = next(r["body"] for r in requests if r["body"]["id"] == "q1")
    assert body == {"question": questions(N)[1]["question"], "id": "q1", "k": 3, "filter": {"lang": "en"},
                    "model": "rag-large"}  # fmt: skip
    assert {r["authorization"] for r in requests} == {f"Bearer {token}"}

    summary = first.summary
    assert summary.items == 2 * N and summary.scored == 2 * N
    items = _by_key(first.items)
    for i in range(N):
        exact, sloppy = items[("exact", f"q{i}")], items[("sloppy", f"q{i}")]
        assert exact.metrics["verbatim"].score == 1.0
        assert sloppy.metrics["verbatim"].score == (0.5 if i % 2 == 0 else 1.0)
        assert exact.metrics["citation_f1"].score == 1.0
        assert sloppy.metrics["citation_precision"].score == (0.5 if i % 2 == 0 else 1.0)
        assert exact.metrics["recall_at_1"].score == 1.0  # the gold document comes first
        for item in (exact, sloppy):
            for name in ("context_relevance", "answer_relevance"):
                assert item.metrics[name].score is not None and 0.0 <= item.metrics[name].score <= 1.0
    assert summary.by_system["exact"]["verbatim"].mean == 1.0
    assert summary.by_system["sloppy"]["verbatim"].mean == pytest.approx(0.75)
    assert summary.target["exact"]["calls"] == N and summary.target["sloppy"]["calls"] == N
    assert second.summary.target["exact"]["cache_hits"] == N and second.summary.target["exact"]["calls"] == 0
    assert [i.metrics["verbatim"].score for i in second.items] == [i.metrics["verbatim"].score for i in first.items]

    # answers.jsonl is a dataset of answered rows, one per (question, system).
    answers = [json.loads(line) for line in (tmp_path / "first" / "answers.jsonl").read_text().splitlines()]
    assert [(a["system"], a["id"]) for a in answers] == [(s, f"q{i}") for i in range(N) for s in ("exact", "sloppy")]
    assert answers[0]["retrieved_doc_ids"][0] == "d0" and len(answers[0]["contexts"]) == 3
    rescored = [json.loads(line) for line in (rescore / "items.jsonl").read_text().splitlines()]
    assert [r["metrics"]["verbatim"]["score"] for r in rescored] == [
        items[(a["system"], a["id"])].metrics["verbatim"].score for a in answers
    ]

    # The token never reaches results or reports.
    for path in (tmp_path / "first").iterdir():
        assert token not in path.read_text(encoding="utf-8", errors="replace"), path.name

    # Compare: one run, two systems, side by side.
    compare = [sys.executable, "-m", "orchestrator.cli", "compare", str(tmp_path / "first"),
               "--out", str(tmp_path / "compare")]  # fmt: skip
    shown = subprocess.run(
        compare, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=600
    )
    assert shown.returncode == 0, shown.stderr[-2000:]
    table = (tmp_path / "compare" / "compare.md").read_text(encoding="utf-8")
    assert "# ragscore compare: exact vs sloppy" in table
    assert "| verbatim | 1.000 (n=6) | 0.750 (n=6) |" in table  # the means, side by side
    assert "| verbatim | sloppy | 6 | 1.000 | 0.750 | -0.250 |" in table  # the paired difference


def _write_suite(tmp_path: Path, suite: dict[str, Any]) -> Path:
    path = tmp_path / "rescore-suite.json"
    path.write_text(json.dumps(suite), encoding="utf-8")
    return path


def test_dead_target_trips_the_breaker_and_the_run_still_reports(home: Path, token: str, tmp_path: Path) -> None:
    n = 24
    with FakeRag(token=token) as rag:
        suite = _suite([_target(rag, "exact"), _target(rag, "dead", attempts=2, breaker_failures=3, concurrency=1)])
        suite["chunk_size"] = {"target": 4}
        with pytest.warns(IncompleteRunWarning, match="asking target dead stopped: circuit breaker open after 3"):
            result = evaluate(questions(n), suite, out=tmp_path / "out")  # what `ragscore run` exits 1 for
        dead_calls = rag.calls["dead"]

    summary = result.summary
    assert summary.state == "finished" and summary.items == 2 * n
    breaker = summary.target["dead"]["breaker"]
    assert "circuit breaker open after 3 consecutive failed calls to target dead" in breaker
    # Each failed question costs 2 attempts; once open, no more calls: far fewer than n x 2.
    assert 3 * 2 <= dead_calls < n * 2
    assert summary.by_system["exact"]["verbatim"].mean == 1.0
    dead_items = [i for i in result.items if i.system == "dead"]
    assert len(dead_items) == n
    assert all(i.metrics["verbatim"].error and i.metrics["verbatim"].error.startswith("no answer:") for i in dead_items)
    assert any("HTTP 500" in (i.metrics["verbatim"].error or "") for i in dead_items)
    assert any("circuit breaker open" in (i.metrics["verbatim"].error or "") for i in dead_items)
    assert summary.by_system["dead"]["verbatim"].errors == n
    answers = [json.loads(x) for x in (tmp_path / "out" / "answers.jsonl").read_text().splitlines()]
    assert all(TARGET_ERROR in a for a in answers if a["system"] == "dead")
    # Re-scored without asking (--no-target): the failed questions stay errors (they read as rows without an
    # answer: unscorable, or 0 for a metric that scores missing contexts), and the answered ones score as before
    with pytest.warns(IncompleteRunWarning, match="no scores for .*verbatim of system dead: every item .* errored"):
        rescored = evaluate(tmp_path / "out" / "answers.jsonl", {"metrics": suite["metrics"]}, out=tmp_path / "again")
    again = {(i.system, i.id): i.metrics["verbatim"] for i in rescored.items}
    assert all((again[("dead", i.id)].error or "").startswith("no answer: ") for i in dead_items)
    assert rescored.summary.by_system["dead"]["verbatim"].errors == n
    assert rescored.summary.by_system["exact"]["verbatim"].mean == 1.0
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8").split("## Targets", 1)[1]
    exact_row = next(line for line in report.splitlines() if line.startswith("| exact |"))
    exact = dict(zip(("system", *TARGET_COLUMNS), [c.strip() for c in exact_row.strip(" |").split("|")], strict=True))
    # The healthy target is untouched by the dead one: every question answered at its first try (a retry of a
    # connection reset on a loaded machine is allowed: it is counted as a call).
    assert [exact[k] for k in ("cache_hits", "rate_limited", "failures", "breaker")] == ["0", "0", "0", "-"], exact_row
    assert int(exact["calls"]) == n + int(exact["retries"]), exact_row
    dead_row = next(line for line in report.splitlines() if line.startswith("| dead |"))
    assert f"| {dead_calls} |" in dead_row and "circuit breaker open after 3" in dead_row
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert 'id="targets"' in page and "circuit breaker open after 3" in page


def test_python_callable_target_and_a_rate_limited_endpoint(home: Path, tmp_path: Path) -> None:
    with FakeRag(limit_every=3, retry_after_s=0.5) as rag:
        suite = {
            "metrics": ["verbatim"],
            "targets": [
                {"system": "library", "callable": "tests.fakes.fake_rag:callable_target",
                 "request": {"question": "{question}", "k": 2}, "response": {"contexts": "contexts[*].text",
                                                                              "citations": "citations"}},
                # every 3rd call of all is a 429: one question may draw several in a row, none counted in attempts
                {"system": "limited", "url": rag.url("limited"), "rpm": 600, "concurrency": 2,
                 "request": {"question": "{question}"}, "response": {"contexts": "contexts[*].text",
                                                                      "citations": "citations"}},
            ],
        }  # fmt: skip
        result = evaluate(questions(N), suite, out=tmp_path / "out")
        limited_calls = rag.calls["limited"]

    assert rag.calls["library"] == 0  # the callable ran in the worker, not over HTTP
    scores = {(i.system, i.id): i.metrics["verbatim"].score for i in result.items}
    assert all(scores[("library", f"q{i}")] == 1.0 for i in range(N))
    assert all(scores[("limited", f"q{i}")] == 1.0 for i in range(N)), "every 429 was waited out and retried"
    target = result.summary.target["limited"]
    assert target["rate_limited"] >= 1 and limited_calls == N + target["rate_limited"]
    # the target's limit is said with its counters, as the judge's with the judge's; the callable has none to say
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"## Targets\n\n{TARGETS_NOTE}\n\nsystem limited · rpm 600\n\n| system |" in report, report
    assert (
        '<p class="facts"><span>system <b>limited</b></span><span>rpm <b>600</b></span></p>'
        in (tmp_path / "out" / "report.html").read_text()
    )


def test_a_question_its_target_429s_forever_fails_naming_its_429s_and_the_others_are_answered(
    home: Path, tmp_path: Path
) -> None:
    with FakeRag(retry_after_s=0) as rag:  # every request of question 0 gets a 429
        suite = {"metrics": ["verbatim"],
                 "targets": [{"system": "saturated", "url": rag.url("saturated"), "attempts": 1, "max_429s": 3,
                              "request": {"question": "{question}"},
                              "response": {"contexts": "contexts[*].text", "citations": "citations"}}]}  # fmt: skip
        result = evaluate(questions(N), suite, out=tmp_path / "out")
        calls = rag.calls["saturated"]

    scores = {i.id: i.metrics["verbatim"] for i in result.items}
    assert all(scores[f"q{i}"].score == 1.0 for i in range(1, N)), scores
    assert scores["q0"].error is not None and "4 replies HTTP 429 to this question, over the target's max_429s=3" in (
        scores["q0"].error
    ), scores["q0"]
    assert calls == N - 1 + 4 and result.summary.target["saturated"]["rate_limited"] == 4
    rows = [json.loads(line) for line in (tmp_path / "out" / "answers.jsonl").read_text().splitlines()]
    marks = {row["id"]: row.get(TARGET_ERROR) for row in rows}
    assert "4 replies HTTP 429" in marks.pop("q0") and set(marks.values()) == {None}, marks


def test_a_question_past_its_max_seconds_fails_saying_how_long_and_why_and_the_others_are_answered(
    home: Path, tmp_path: Path
) -> None:
    """A target answering 429 with ``retry-after: 600`` held one question ``max_429s`` x 600 s (20 x 10 minutes by
    default): nothing bounded a question's time. ``max_seconds_per_question`` does (here 2.5 s against a pause of 1 s
    a 429: the third wait would pass it); the others, held at most by those pauses, are answered."""
    with FakeRag(retry_after_s=1) as rag:  # every request of question 0 gets a 429 with retry-after: 1
        suite = {"metrics": ["verbatim"],
                 "targets": [{"system": "saturated", "url": rag.url("saturated"), "max_seconds_per_question": 2.5,
                              "response": {"contexts": "contexts[*].text", "citations": "citations"}}]}  # fmt: skip
        result = evaluate(questions(N), suite, out=tmp_path / "out")

    scores = {i.id: i.metrics["verbatim"] for i in result.items}
    assert all(scores[f"q{i}"].score == 1.0 for i in range(1, N)), scores
    said = scores["q0"].error or ""
    assert re.search(r"saturated: no answer within the target's max_seconds_per_question=2.5 \(asked for [\d.]+ s; "
                     r"\d replies HTTP 429; the shared rate limit of target would hold this call over the [\d.]+ s "
                     r"left to it \(waited [\d.]+ s, [\d.]+ s more needed; paused by 429\); last: saturated HTTP 429",
                     said), said  # fmt: skip
    assert result.summary.target["saturated"]["failures"] == 1


@pytest.mark.parametrize(("single", "place"), [(False, "targets[0]"), (True, "target")])
def test_a_max_seconds_per_question_not_below_the_target_tasks_time_limit_is_refused_naming_it(
    home: Path, tmp_path: Path, single: bool, place: str
) -> None:
    """A target task stops asking at its soft time limit (780 s): a ``max_seconds_per_question`` not below it can
    never be given. It was compared with the broker's visibility timeout (900 s), past which the task was delivered
    again: 780 s was accepted and 900 s refused for a re-delivery that no longer happens. The run is refused naming
    the limit, before a row is read or the run recorded."""
    target = {"url": "http://127.0.0.1:9/ask", "max_seconds_per_question": 780}
    suite = {"metrics": ["verbatim"], **({"target": target} if single else {"targets": [{"system": "s", **target}]})}
    with pytest.raises(ConfigError) as info:
        evaluate(questions(2), suite, out=tmp_path / "out")
    assert str(info.value) == (
        f"Invalid suite: {place}.max_seconds_per_question=780 is not below the target task's time limit, 780 s: its "
        "task stops asking there, so no question is given that long (one still asked then is recorded as 'the target "
        "task ran over its time limit'). Set max_seconds_per_question below 780 in the suite"
    )
    assert not (tmp_path / "out" / "run.json").exists()


def test_ragscore_submit_refuses_a_max_seconds_per_question_not_below_the_target_tasks_time_limit(
    tmp_path: Path, home: Path
) -> None:
    """`ragscore submit` refuses it too, before it reaches the broker (a port nothing listens on here)."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in questions(2)))
    target = {"url": "http://127.0.0.1:9/ask", "max_seconds_per_question": 800}
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["verbatim"], "target": target}))
    with closed_port() as port:
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "submit", str(data), "--suite", str(tmp_path / "s.json"),
             "--broker", f"redis://127.0.0.1:{port}/0"],
            capture_output=True, text=True, cwd=ROOT, env={**os.environ, "RAGSCORE_HOME": str(home)}, timeout=120,
        )  # fmt: skip
    said = " ".join(result.stderr.split())
    assert result.returncode == 2, said
    assert "Invalid suite: target.max_seconds_per_question=800 is not below the target task's time limit, 780 s" in said


def _run_while_down(rag: FakeRag, out: Path) -> Any:
    """A run of systems ``exact`` and ``down`` while ``down`` fails (its breaker opens after 2), then ``down`` is
    back; the first run's Evaluation."""
    rag.failing = {"down"}
    suite = _suite([_target(rag, "exact"), _target(rag, "down", attempts=1, breaker_failures=2, concurrency=1)])
    suite["metrics"] = ["verbatim"]
    with pytest.warns(IncompleteRunWarning, match="asking target down stopped: circuit breaker open after 2"):
        first = evaluate(questions(N), suite, out=out)
    rag.failing = set()  # the system is back
    return first


def test_resume_asks_again_only_what_has_no_answer(home: Path, token: str, tmp_path: Path) -> None:
    with FakeRag(token=token) as rag:
        out = tmp_path / "out"
        first = _run_while_down(rag, out)
        calls_first = dict(rag.calls)
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(out), "--quiet"]
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=600
        )
        calls_after = dict(rag.calls)

    assert done.returncode == 0, done.stderr[-2000:]
    assert first.summary.by_system["down"]["verbatim"].errors == N
    assert calls_first == {"exact": N, "down": 2}  # the breaker opened after 2 failed questions
    assert calls_after == {"exact": N, "down": 2 + N}, "only the unanswered questions are asked again"
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["by_system"]["down"]["verbatim"]["mean"] == 1.0
    assert resumed["by_system"]["down"]["verbatim"]["errors"] == 0
    assert resumed["by_system"]["exact"]["verbatim"]["mean"] == 1.0
    # The counters add up over the run and its resume; the resume closed the breaker
    down = resumed["target"]["down"]
    assert (down["calls"], down["failures"], "breaker" in down) == (2 + N, 2, False), down


def test_the_python_resume_finishes_a_run_as_the_cli_does(home: Path, token: str, tmp_path: Path) -> None:
    """A notebook had no way to finish a run but the CLI (``ragscore run --resume DIR``)."""
    with pytest.raises(ConfigError, match="resume\\(\\) takes the out dir of an earlier run"):
        resume(tmp_path / "nothing-here")
    with FakeRag(token=token) as rag:
        out = tmp_path / "out"
        first = _run_while_down(rag, out)
        with warnings.catch_warnings():
            warnings.simplefilter("error", IncompleteRunWarning)  # finished: nothing to warn of
            done = resume(out)
        assert rag.calls == {"exact": N, "down": 2 + N}
    assert done.out_dir == out and done.summary.run_id == first.summary.run_id
    assert done.summary.by_system["down"]["verbatim"].mean == 1.0 and done.summary.by_system["down"]["verbatim"].n == N
    assert json.loads((out / "summary.json").read_text())["by_system"]["down"]["verbatim"]["errors"] == 0
    assert len(done.items) == 2 * N


def test_a_resumes_progress_counts_the_answers_and_outputs_it_asks_again_as_not_done(
    tmp_path: Path, token: str
) -> None:
    """A resume of a target run whose system was down read 100 % from its start: the failed answers and the errors
    written for them had been counted done, and asking again counts nothing new."""
    from orchestrator.runner import connect, resume, submit, wait
    from orchestrator.suite import load_suite
    from ragscore_workers.store import RunState

    server = RedisProcess(tmp_path / "redis").start()
    workers = [WorkerProcess(server.url, queue, tmp_path / "w", concurrency=1) for queue in ("target", "cpu")]
    try:
        with FakeRag(token=token) as rag:
            rag.failing = {"down"}
            down = _target(rag, "down", attempts=1, breaker_failures=2, concurrency=1)
            suite = _suite([_target(rag, "exact"), down]) | {"metrics": ["verbatim"]}
            store = connect(server.url)
            sub = submit(write_jsonl(tmp_path / "q.jsonl", questions(N)), load_suite(suite), store)
            for worker in workers:
                worker.start()
            assert wait(store, sub.run_id, timeout_s=300).state == RunState.FINISHED
            for worker in workers:
                worker.stop()
            before = store.progress(sub.run_id)
            assert before["done"] == before["total"] == 4 * N  # 2 systems x N questions: an answer, a verbatim
            rag.failing = set()  # the system is back

            assert resume(store, sub.run_id).tasks > 0  # no worker yet: nothing is asked again
            progress = store.progress(sub.run_id)
            assert progress["done:target"] == progress["done:cpu"] == N and progress["done"] == 2 * N, progress

            for worker in workers:
                worker.start()
            assert wait(store, sub.run_id, timeout_s=300).state == RunState.FINISHED
            after = store.progress(sub.run_id)
            assert after["done"] == after["total"] == 4 * N and after["done:target"] == 2 * N, after
            raw = store.r.hgetall(store.key(sub.run_id, "progress"))
            assert int(raw["redo"]) == int(raw["redo:target"]) == int(raw["redo:cpu"]) == 0  # each taken once
            assert rag.calls == {"exact": N, "down": 2 + N}
    finally:
        for worker in workers:
            worker.stop()
        server.stop()


@pytest.mark.parametrize("breaker_failures", [10, 3])
def test_a_system_that_answered_no_question_fails_the_run_though_the_pooled_gate_holds(
    home: Path, token: str, tmp_path: Path, breaker_failures: int
) -> None:
    """One system answered nothing (each question failed, or its breaker opened), the other everything: the
    pooled mean passed the gate and `ragscore run` exited 0, as if both systems had been scored."""
    from ..support import write_jsonl

    with FakeRag(token=token) as rag:
        rag.failing = {"down"}
        down = _target(rag, "down", attempts=1, concurrency=1, breaker_failures=breaker_failures)
        suite = _suite([_target(rag, "exact"), down]) | {"metrics": ["verbatim"]}
        (tmp_path / "suite.json").write_text(json.dumps(suite))
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(write_jsonl(tmp_path / "q.jsonl", questions(N))),
               "--suite", str(tmp_path / "suite.json"), "--out", str(tmp_path / "out"), "--fail-under",
               "verbatim=0.9", "--quiet"]  # fmt: skip
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=600
        )

    said = " ".join(done.stderr.split())
    assert done.returncode == 1, said[-2000:]
    if breaker_failures > N:  # asked every question: no breaker, and no score
        assert rag.calls["down"] == N
        assert "no scores for verbatim of system down: every item that reached them errored (first error, " \
               "verbatim: no answer: down HTTP 500" in said, said[-2000:]  # fmt: skip
    else:
        assert rag.calls["down"] == breaker_failures
        assert f"asking target down stopped: circuit breaker open after {breaker_failures} consecutive failed " \
               "calls to target down" in said, said[-2000:]  # fmt: skip
        assert "the questions it did not answer are unscored. Fix the system, then `ragscore run --resume " in said


def test_several_shards_each_score_once_their_answers_are_in(home: Path, tmp_path: Path) -> None:
    from orchestrator.runner import run
    from orchestrator.suite import load_suite

    from ..support import write_jsonl

    n = 10
    with FakeRag() as rag:
        response = {"contexts": "contexts[*].text", "citations": "citations", "evidence_sentences": "evidence"}
        suite = {
            "metrics": ["verbatim", "citation"],
            "targets": [{"system": s, "url": rag.url(s), "response": response} for s in ("exact", "sloppy")],
            "chunk_size": {"target": 3, "cpu": 2},
        }
        dataset = write_jsonl(tmp_path / "q.jsonl", questions(n))
        summary = run(dataset, load_suite(suite), tmp_path / "out", shard_rows=4)  # 3 shards of <= 4 questions

    assert summary.items == 2 * n and summary.scored == 2 * n and summary.metrics["verbatim"].errors == 0
    items = [json.loads(x) for x in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    assert [(i["system"], i["id"]) for i in items] == [(s, f"q{i}") for i in range(n) for s in ("exact", "sloppy")]
    sloppy = [i["metrics"]["verbatim"]["score"] for i in items if i["system"] == "sloppy"]
    assert sloppy == [0.5 if i % 2 == 0 else 1.0 for i in range(n)]
    assert rag.calls == {"exact": n, "sloppy": n}


def test_a_token_missing_on_the_worker_fails_that_systems_items_only_naming_that_worker(
    redis_server: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's target workers lack one system's token: its items fail, the other system's are scored. The
    error names the host and Celery worker lacking it (every target worker's read alike), never the token."""
    monkeypatch.setenv("NO_SUCH_RAG_TOKEN", TOKEN)  # this process has it; the target worker does not
    target = WorkerProcess(redis_server.url, "target", tmp_path / "w", concurrency=2)
    del target.env["NO_SUCH_RAG_TOKEN"]
    workers = [target.start(), WorkerProcess(redis_server.url, "cpu", tmp_path / "w", concurrency=2).start()]
    try:
        with FakeRag() as rag:
            locked = _target(rag, "locked") | {"auth_env": "NO_SUCH_RAG_TOKEN"}
            suite = _suite([_target(rag, "exact") | {"auth_env": None}, locked]) | {"metrics": ["verbatim"]}
            with pytest.warns(IncompleteRunWarning, match="no scores for verbatim of system locked"):
                result = evaluate(questions(3), suite, out=tmp_path / "out", broker=redis_server.url)
    finally:
        for worker in workers:
            worker.stop()

    assert rag.calls["locked"] == 0 and rag.calls["exact"] == 3
    by_system = {(i.system, i.id): i.metrics["verbatim"] for i in result.items}
    assert len(by_system) == 6  # the failed items keep their system::id keys
    assert all(by_system[("exact", f"q{i}")].score == 1.0 for i in range(3))
    host = socket.gethostname()
    for i in range(3):
        error = by_system[("locked", f"q{i}")].error
        assert f"set the environment variable NO_SUCH_RAG_TOKEN on host {host} (worker target-" in error, error
        assert f"@{host})" in error, error  # its Celery node name
    assert all(TOKEN.encode() not in p.read_bytes() for p in (tmp_path / "out").iterdir() if p.is_file())


def test_an_embedded_run_refuses_a_missing_target_token_before_any_call(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its workers inherit this environment: every item of that system would fail, after the whole run."""
    from ragscore_workers.errors import ConfigError

    monkeypatch.delenv("NO_SUCH_RAG_TOKEN", raising=False)
    with FakeRag() as rag:
        locked = _target(rag, "locked") | {"auth_env": "NO_SUCH_RAG_TOKEN"}
        suite = _suite([_target(rag, "exact") | {"auth_env": None}, locked]) | {"metrics": ["verbatim"]}
        with pytest.raises(ConfigError, match="Target locked needs a token: set the environment variable NO_SUCH"):
            evaluate(questions(3), suite, out=tmp_path / "out")
        assert rag.calls.get("exact", 0) == rag.calls.get("locked", 0) == 0
        assert not (tmp_path / "out" / "run.json").exists()  # it locked the folder: "holds run ... (interrupted?)"
        monkeypatch.setenv("NO_SUCH_RAG_TOKEN", TOKEN)  # the same call, once the token is set
        result = evaluate(questions(3), suite, out=tmp_path / "out")
    assert result.summary.by_system["locked"]["verbatim"].mean == 1.0


def test_a_datasets_own_answer_and_contexts_are_never_taken_for_the_targets(home: Path, tmp_path: Path) -> None:
    """Rows from an earlier eval keep their answer/contexts/doc ids: a reply lacking a mapped field, or no reply,
    once left them in place, scored (and stored in answers.jsonl) as what the target returned. So did its mark of
    a question its target could not answer: this target's answer was then marked as failed in answers.jsonl; that
    mark, dropped, is said once (it was dropped silently)."""
    rows = [q | {"answer": "OLD answer", "contexts": ["OLD context"], "retrieved_doc_ids": ["old-doc"],
                 TARGET_ERROR: "OLD error"} for q in questions(N)]  # fmt: skip
    with FakeRag() as rag:
        rag.failing = {"dead"}
        # mistyped paths: a key the reply lacks, and one no element under [*] has (each once read as found)
        response = {"answer": "answer", "contexts": "context[*].text", "retrieved_doc_ids": "contexts[*].docid"}
        suite = {
            "metrics": ["exact_match"],
            "targets": [{"system": "exact", "url": rag.url("exact"), "response": response},
                        {"system": "dead", "url": rag.url("dead"), "attempts": 1, "response": response}],
        }  # fmt: skip
        unfilled = f"target exact: {N:,} replies had nothing at the path of retrieved_doc_ids"  # as the command ends
        with (
            pytest.warns(IncompleteRunWarning, match="no scores for exact_match of system dead"),
            pytest.warns(DatasetWarning) as said,
        ):
            result = evaluate(rows, suite, out=tmp_path / "out")

    dropped = f"{N} rows carry their own {TARGET_ERROR!r} (an earlier target run's answers.jsonl?), which this run "
    dropped += "ignores: the suite's targets ask every question anew (to score the rows as they are, give evaluate() "
    texts = [str(w.message) for w in said if issubclass(w.category, DatasetWarning)]
    assert len([t for t in texts if dropped in t]) == 1 and any(unfilled in t for t in texts), texts

    answers = [json.loads(x) for x in (tmp_path / "out" / "answers.jsonl").read_text().splitlines()]
    exact = [a for a in answers if a["system"] == "exact"]
    dead = [a for a in answers if a["system"] == "dead"]
    assert len(exact) == len(dead) == N
    for a in exact:
        assert a["answer"] != "OLD answer" and "OLD context" not in json.dumps(a.get("contexts", []))
        assert "retrieved_doc_ids" not in a, "the reply has no doc ids: none, not the dataset's"
        assert TARGET_ERROR not in a, a
    for a in dead:
        assert a[TARGET_ERROR] != "OLD error", a
        assert "answer" not in a and not a.get("contexts") and "retrieved_doc_ids" not in a
    assert result.summary.by_system["exact"]["exact_match"].n == N
    assert result.summary.by_system["dead"]["exact_match"].errors == N
    # The path found nothing in any reply (a typo reads as "no doc ids": recall 0, silently): counted and said
    assert result.summary.target["exact"]["unfilled_retrieved_doc_ids"] == N
    assert result.summary.target["exact"]["unfilled_contexts"] == N  # its default, [], read as filled
    for name in ("report.md", "report.html"):  # both reports' Warnings
        report = (tmp_path / "out" / name).read_text()
        assert f"target exact: {N:,} replies had nothing at the path of retrieved_doc_ids" in report, name
        assert f"target exact: {N:,} replies had nothing at the path of contexts" in report, name


class _FirstReplyEmpty:
    """A RAG API that answers ``{"answer": null}`` (an overloaded model) to the first request of each question."""

    def __init__(self) -> None:
        import threading
        from collections import Counter
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls: Counter[str] = Counter()
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                question = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["question"]
                with lock:
                    outer.calls[question] += 1
                    first = outer.calls[question] == 1
                body = json.dumps({"answer": None if first else f"answer to {question}", "contexts": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ask"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _FirstReplyEmpty:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_reply_without_the_answer_is_not_cached_so_a_resume_asks_again(home: Path, tmp_path: Path) -> None:
    """Such a reply was cached for 90 days: the resume (and every re-run) got it back and never asked again."""
    with _FirstReplyEmpty() as api:
        suite = {"metrics": ["exact_match"], "targets": [{"system": "rag", "url": api.url}]}
        out = tmp_path / "out"
        with pytest.warns(IncompleteRunWarning, match="no scores for exact_match"):  # every reply lacked the answer
            first = evaluate(questions(N), suite, out=out)
        cmd = [sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(out), "--quiet"]
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=600
        )
        calls = dict(api.calls)

    assert first.summary.by_system["rag"]["exact_match"].errors == N
    assert "the reply has no 'answer'" in (first.summary.metrics["exact_match"].first_error or "")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(calls.values()) == [2] * N, "each question asked again once"
    answers = [json.loads(x) for x in (out / "answers.jsonl").read_text().splitlines()]
    assert [a["answer"] for a in answers] == [f"answer to {q['question']}" for q in questions(N)]


def test_a_cluster_whose_workers_lack_the_suites_plugin_fails_the_run_saying_so_not_stalls(
    redis_server: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The target chord's callback plans the scoring on a worker: without the suite's plug-in there it raised, the
    shard never finished and the run sat at its last progress for ever."""
    from ragscore_workers.errors import RagscoreError

    workers = [WorkerProcess(redis_server.url, q, tmp_path / "w", concurrency=1).start() for q in ("target", "cpu")]
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing")  # here only, after the workers started
    try:
        with FakeRag() as rag:
            suite = {"metrics": ["fail_on_flag"], "targets": [_target(rag, "exact") | {"auth_env": None}]}
            said = r"score_shard: worker .* has no metric 'fail_on_flag' \(RAGSCORE_PLUGINS here: unset\)"
            with pytest.raises(RagscoreError, match=said):
                evaluate(questions(3), suite, out=tmp_path / "out", broker=redis_server.url)
    finally:
        for worker in workers:
            worker.stop()


def _evaluated(suite: dict[str, Any], out: Path) -> tuple[Any, list[str], list[str]]:
    """``evaluate()`` of :func:`questions`: its result, and the texts of its dataset and incomplete-run warnings."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        result = evaluate(questions(N), suite, out=out)
    texts = {kind: [str(w.message) for w in said if issubclass(w.category, kind)]
             for kind in (DatasetWarning, IncompleteRunWarning)}  # fmt: skip
    return result, texts[DatasetWarning], texts[IncompleteRunWarning]


def test_a_target_returning_no_contexts_is_an_llm_alone_said_once_and_not_flagged(home: Path, tmp_path: Path) -> None:
    """A target whose response map names neither contexts nor retrieved_doc_ids (an LLM alone) had every row flagged
    ``no_contexts`` by quality_checks, and recall_at_k scored its rows 0 as if retrieval had found nothing. Its rows
    are marked (in answers.jsonl too), so neither; before the run, one warning names the metrics unscorable for it."""
    recall = {"name": "recall_at_k", "params": {"k": [1]}}
    with FakeRag() as rag:
        suite = {
            "metrics": [{"name": "quality_checks", "params": {"citation_pattern": ""}}, recall, "verbatim"],
            "targets": [{"system": "llm", "url": rag.url("llm"), "response": {"answer": "answer", "contexts": None,
                                                                             "citations": "citations"}},
                        {"system": "rag", "url": rag.url("rag"), "response": {
                            "answer": "answer", "contexts": "contexts[*].text", "citations": "citations",
                            "retrieved_doc_ids": "contexts[*].doc_id"}}],
        }  # fmt: skip
        result, texts, incomplete = _evaluated(suite, tmp_path / "out")

    alone = ("target 'llm' returns no contexts (its response map names neither contexts nor retrieved_doc_ids: an LLM "
             "alone, which retrieves nothing): recall_at_k, verbatim will be unscorable for its rows")  # fmt: skip
    assert len([t for t in texts if alone in t]) == 1, texts
    assert not incomplete, incomplete
    items = _by_key(result.items)
    for i in range(N):
        llm, retrieving = items[("llm", f"q{i}")], items[("rag", f"q{i}")]
        assert llm.metrics["quality_checks"].details["issues"] == [], llm.metrics["quality_checks"]
        for name, why in (("recall_at_1", "no retrieved_doc_ids"), ("verbatim", "no contexts")):
            assert llm.metrics[name].score is None and llm.metrics[name].details["reason"] == why, name
        assert retrieving.metrics["recall_at_1"].score == 1.0 and retrieving.metrics["verbatim"].score == 1.0
    answers = [json.loads(x) for x in (tmp_path / "out" / "answers.jsonl").read_text().splitlines()]
    assert {a["system"]: a.get(NO_RETRIEVAL) for a in answers} == {"llm": True, "rag": None}
    assert not [a for a in answers if a["system"] == "llm" and "retrieved_doc_ids" in a], "no claim of a retrieval"


def _ragscore_run(dataset: Path, suite: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``ragscore run`` embedded (no broker), its stderr read."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(dataset), "--suite", str(suite), "--out", str(out),
           "--quiet", *extra]  # fmt: skip
    return subprocess.run(
        cmd, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": os.getcwd()}, timeout=600
    )


def test_ragscore_run_of_an_llm_alone_and_its_answers_rescored_say_once_what_is_unscorable(
    home: Path, tmp_path: Path
) -> None:
    """``ragscore run`` of a target that returns no contexts (an LLM alone) says before the run, once, which metrics
    are unscorable for its rows (no test ran the CLI's path: the dry run's and evaluate()'s share it). Its
    answers.jsonl re-scored with --no-target (rows marked NO_RETRIEVAL) warned that no row has 'retrieved_doc_ids',
    which recall_at_k scores as absent (a column named otherwise?), though those rows are unscorable by design: it now
    says that once instead, as the target run does, and scores them so."""
    recall = {"name": "recall_at_k", "params": {"k": [1]}}
    with FakeRag() as rag:
        target = {"system": "llm", "url": rag.url("llm"), "response": {"answer": "answer", "contexts": None}}
        suite = _write_suite(tmp_path, {"metrics": [recall, "exact_match"], "target": target})
        first = _ragscore_run(write_jsonl(tmp_path / "q.jsonl", questions(N)), suite, tmp_path / "first")
    assert first.returncode == 0, first.stderr[-2000:]
    said = " ".join(first.stderr.split())
    alone = (
        "target 'llm' returns no contexts (its response map names neither contexts nor retrieved_doc_ids: an LLM "
        "alone, which retrieves nothing): recall_at_k will be unscorable for its rows (no retrieved_doc_ids"
    )
    assert said.count(alone) == 1 and "'retrieved_doc_ids'" not in said, said

    rescored = _ragscore_run(tmp_path / "first" / "answers.jsonl", suite, tmp_path / "rescore", "--no-target")
    assert rescored.returncode == 0, rescored.stderr[-2000:]
    said = " ".join(rescored.stderr.split())
    marked = (f"{N} rows are marked {NO_RETRIEVAL!r} (answered by a target that returns no contexts: an LLM alone, "
              "which retrieves nothing): recall_at_k will be unscorable for them (no retrieved_doc_ids; no failure "
              "where other metrics score)")  # fmt: skip
    assert said.count(marked) == 1 and "'retrieved_doc_ids'" not in said, said
    items = [json.loads(line) for line in (tmp_path / "rescore" / "items.jsonl").read_text().splitlines()]
    assert [i["metrics"]["recall_at_1"]["details"]["reason"] for i in items] == ["no retrieved_doc_ids"] * N


def test_an_llm_alones_rows_are_scored_or_unscorable_by_design_on_every_metric_of_retrieval(
    home: Path, tmp_path: Path
) -> None:
    """The metrics reading what a retrieval gives, of a target that returns no contexts (an LLM alone): quality_checks
    flagged every answer no_citation (no [n] marker: it has no source to cite), and citation and evidence_overlap left
    its rows unscorable for 'no evidence_sentences (predicted sentence IDs)', which fails the run, as verbatim did for
    'no citations' where its map names none. Now quality_checks scores the answer, and the others are unscorable by
    design (no evidence_sentences, no contexts: no failure), each named in the one pre-run warning."""
    with FakeRag() as rag:
        target = {"system": "llm", "url": rag.url("llm"), "response": {"answer": "answer", "contexts": None}}
        suite = {"metrics": ["quality_checks", "citation", "evidence_overlap", "verbatim", "exact_match"],
                 "target": target}  # fmt: skip
        result, texts, incomplete = _evaluated(suite, tmp_path / "out")

    alone = ("citation, evidence_overlap, verbatim will be unscorable for its rows (no contexts or no citations or no "
             "evidence_sentences; no failure where other metrics score)")  # fmt: skip
    assert len([t for t in texts if alone in t]) == 1 and not [t for t in texts if "score no item" in t], texts
    assert not incomplete, incomplete
    for item in result.items:
        assert item.metrics["quality_checks"].score == 1.0, item.metrics["quality_checks"]
        names = ("citation_precision", "citation_recall", "citation_f1", "evidence_overlap", "verbatim")
        reasons = {name: item.metrics[name].details.get("reason") for name in names}
        assert reasons == {**dict.fromkeys(reasons, "no evidence_sentences"), "verbatim": "no contexts"}, reasons


def test_a_run_stored_with_a_response_path_now_refused_stays_readable_and_its_resume_says_why(
    home: Path, token: str, tmp_path: Path
) -> None:
    """Older code stored a suite whose response path no reply can fill its field through (JSONPath's ``$``), which a
    suite is now refused for: the run's status and report read as before, and its resume is refused naming
    the stored suite, not sending anything."""
    from orchestrator.embedded_redis import EmbeddedRedis
    from ragscore_workers.store import RunStore

    with FakeRag(token=token) as rag:
        out = tmp_path / "out"
        first = _run_while_down(rag, out)
        run_id = first.summary.run_id
        embedded = EmbeddedRedis(home)
        embedded.acquire()
        try:  # the suite as the older code stored it
            store = RunStore(embedded.client, ttl_s=3600)
            stored = json.loads(store.meta(run_id)["suite"])
            stored["targets"][1]["response"]["contexts"] = "$.contexts[*].text"
            store.set_meta(run_id, suite=json.dumps(stored))
        finally:
            embedded.release()
        calls = dict(rag.calls)
        env = os.environ | {"PYTHONPATH": os.getcwd()}
        cli = [sys.executable, "-m", "orchestrator.cli"]
        said = {
            command: subprocess.run([*cli, command, arg], capture_output=True, text=True, env=env)
            for command, arg in (("status", run_id), ("report", str(out)))
        }
        with pytest.raises(ConfigError) as refused:
            resume(out, quiet=True)
        assert rag.calls == calls, "the refused resume asked nothing"
    for command, done in said.items():
        assert done.returncode in (0, 1), (command, done.stderr[-2000:])
        assert "Invalid suite" not in done.stdout + done.stderr, command
    said_of_resume = str(refused.value)
    assert said_of_resume.startswith(
        "Invalid suite: target down response.contexts: '$.contexts[*].text' begins with JSONPath's root '$'"
    ), said_of_resume
    assert "the suite the run was submitted with, which a resume cannot change" in said_of_resume, said_of_resume
