"""Evaluation points that need a worker's resource run there: embedding points on the embed queue (the
real model), code_test points on the code queue (the real sandbox); plain points stay on cpu."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate

pytestmark = pytest.mark.integration

KEYWORD = {"id": "kw", "type": "keyword", "params": {"keywords": ["paris"]}}


def test_checks_points_run_on_the_queue_they_need(tmp_path: Path, home: Path) -> None:
    fence = "```"
    rows = [
        {"id": "emb-pass", "answer": "The capital city of France is Paris.",
         "checks": [KEYWORD, {"id": "sim", "type": "embedding",
                              "params": {"target": "Paris is the capital of France", "threshold": 0.6}}]},
        {"id": "emb-fail", "answer": "Paris has many bakeries.",
         "checks": [KEYWORD, {"id": "sim", "type": "embedding",
                              "params": {"target": "Quarks feel the strong force", "threshold": 0.6}}]},
        {"id": "code-pass", "answer": f"Here you go:\n{fence}python\nprint(1 + 2)\n{fence}\n",
         "checks": [{"id": "run", "type": "code_test", "params": {"stdout": "3"}}]},
        {"id": "code-fail", "answer": f"{fence}python\nprint(2 + 2)\n{fence}",
         "checks": [{"id": "run", "type": "code_test", "params": {"stdout": "3"}},
                    {"id": "after", "type": "keyword", "params": {"keywords": ["print"]}, "depends_on": "run"}]},
        {"id": "cpu-only", "answer": "Paris.", "checks": [KEYWORD]},
        # An extract step that finds nothing fails the point on any queue (it was left out of the score: 1.0).
        {"id": "emb-no-extract", "answer": "Paris, I think.",
         "checks": [KEYWORD, {"id": "sim", "type": "embedding", "extract": {"regex": "Answer:(.*)"},
                              "params": {"target": "Paris", "threshold": 0.1}}]},
        {"id": "code-no-extract", "answer": "Paris, I think.",
         "checks": [KEYWORD, {"id": "run", "type": "code_test", "extract": {"regex": "Answer:(.*)"},
                              "params": {"stdout": "3"}}]},
    ]  # fmt: skip
    result = evaluate(rows, {"metrics": ["checks"]}, out=tmp_path / "out")
    by_id = {i.id: i.metrics["checks"] for i in result.items}
    points = {k: {p["id"]: p for p in m.details["points"]} for k, m in by_id.items()}

    sim_pass, sim_fail = points["emb-pass"]["sim"], points["emb-fail"]["sim"]
    assert sim_pass["status"] == "passed" and sim_pass["figures"]["similarity"] >= 0.6
    assert sim_fail["status"] == "failed" and sim_fail["figures"]["similarity"] < 0.6
    assert by_id["emb-pass"].score == 1.0 and by_id["emb-fail"].score == 0.5

    assert points["code-pass"]["run"]["status"] == "passed" and points["code-pass"]["run"]["figures"]["exit_code"] == 0
    assert points["code-pass"]["run"]["figures"]["duration_s"] > 0  # how long the sandboxed run took
    assert points["code-fail"]["run"]["status"] == "failed" and "4" in points["code-fail"]["run"]["figures"]["stdout"]
    assert points["code-fail"]["after"]["status"] == "skipped"
    assert by_id["code-pass"].score == 1.0 and by_id["code-fail"].score == 0.0
    assert by_id["cpu-only"].score == 1.0
    for key, point in (("emb-no-extract", "sim"), ("code-no-extract", "run")):
        assert points[key][point]["status"] == "failed" and "extract step 1" in points[key][point]["note"], key
        assert by_id[key].score == 0.5, key
    assert all(not m.details["not_run"] for m in by_id.values())


def test_code_test_points_score_a_row_of_code_without_an_answer(tmp_path: Path, home: Path) -> None:
    # A code-generation dataset gives the program in `code` and no answer text: its code_test points run that
    # code (they were all unscorable, "no answer"). A point that reads the answer still needs one.
    run = {"id": "run", "type": "code_test", "params": {"stdin": "2 3\n", "stdout": "5"}}
    add = "a, b = map(int, input().split())\n"
    rows = [
        {"id": "right", "code": add + "print(a + b)\n", "checks": [run]},
        {"id": "wrong", "code": add + "print(a - b)\n", "checks": [run]},
        {"id": "reads-answer", "code": add + "print(a + b)\n", "checks": [run, KEYWORD]},
        {"id": "extracts", "code": add + "print(a + b)\n", "checks": [{**run, "extract": {"regex": "```(.*)```"}}]},
        {"id": "nothing", "checks": [run]},
    ]
    result = evaluate(rows, {"metrics": ["checks"]}, out=tmp_path / "out")
    by_id = {i.id: i.metrics["checks"] for i in result.items}

    assert by_id["right"].score == 1.0 and by_id["right"].details["points"][0]["figures"]["stdout"] == "5\n"
    assert by_id["wrong"].score == 0.0 and "stdout differs" in by_id["wrong"].details["points"][0]["note"]
    for key in ("reads-answer", "extracts"):
        assert by_id[key].score is None and by_id[key].error is None, key
        assert by_id[key].details["reason"].startswith("no answer (only the row's code_test points"), key
    assert by_id["nothing"].score is None and by_id["nothing"].details["reason"] == "no answer"


def test_a_program_the_sandbox_stopped_fails_naming_the_limit_it_hit(tmp_path: Path, home: Path) -> None:
    # "stopped by the sandbox: timeout" said neither after how long nor that a row's point asking for 1000 s ran
    # under the suite's 3 s (its points may only lower the suite's limits).
    rows = [
        {"id": "slow", "code": "import time\ntime.sleep(60)\n",
         "checks": [{"id": "run", "type": "code_test", "params": {"timeout_s": 1000}}]},
        {"id": "big", "code": "b = bytearray(400 * 2**20)\n"},
        {"id": "loud", "code": "import sys\nsys.stdout.write('x' * 3 * 2**20)\n"},
        {"id": "killed", "code": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"},
    ]  # fmt: skip
    # 3 s, not 1: the wall clock includes starting the sandbox, which a loaded CI machine may make slow
    suite = {"metrics": ["checks", "code_test"], "sandbox": {"backend": "local", "timeout_s": 3, "memory_mb": 64}}
    result = evaluate(rows, suite, out=tmp_path / "out")
    by_id = {i.id: i.metrics for i in result.items}

    assert by_id["slow"]["checks"].details["points"][0]["note"] == (
        "stopped by the sandbox: timeout (its 3 s limit: the suite's sandbox.timeout_s, which a row's points may "
        "lower, never raise)"
    )
    assert by_id["slow"]["code_test"].details["failures"] == ["stopped by the sandbox: timeout (its 3 s limit)"]
    assert by_id["big"]["code_test"].details["failures"] == [  # its own report: `raise MemoryError` reads the same
        'reported out of memory (its stderr ends "MemoryError"; exit code 1; memory limit 64 MiB)'
    ]
    assert by_id["loud"]["code_test"].details["failures"] == [
        "stopped by the sandbox: output_limit (more than 1 MiB of stdout and stderr)"
    ]
    assert by_id["killed"]["code_test"].details["failures"] == ["stopped by the sandbox: killed (signal 9)"]
    assert all(m["code_test"].score == 0.0 for m in by_id.values())


def test_a_code_test_runs_each_rows_asserts_after_its_code(tmp_path: Path, home: Path) -> None:
    # A HumanEval / MBPP row tests a function with asserts, not stdin and stdout: the `test` param runs after the
    # code, as the suite's code_test param and as a row's own code_test point.
    check = "def check(candidate):\n    assert candidate([1, 3, 2]) == 3\n\ncheck(biggest)"
    point = {"id": "asserts", "type": "code_test", "params": {"test": "assert biggest([1, 5]) == 5"}}
    rows = [
        {"id": "right", "code": "def biggest(xs):\n    return max(xs)\n", "checks": [point]},
        {"id": "wrong", "code": "def biggest(xs):\n    return xs[0]\n", "checks": [point]},
        # generated code ending in its own sys.exit(): the test never runs, and the row must not pass untested
        {"id": "exits", "code": "import sys\ndef biggest(xs):\n    return xs[0]\nsys.exit(0)\n", "checks": [point]},
    ]
    suite = {"metrics": ["checks", {"name": "code_test", "params": {"test": check}}], "sandbox": {"backend": "local"}}
    result = evaluate(rows, suite, out=tmp_path / "out")
    by_id = {i.id: i.metrics for i in result.items}

    assert by_id["right"]["code_test"].score == 1.0 and by_id["right"]["checks"].score == 1.0
    assert by_id["wrong"]["code_test"].score == 0.0 and by_id["wrong"]["checks"].score == 0.0
    assert by_id["wrong"]["code_test"].details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "AssertionError")'
    ]
    assert by_id["wrong"]["checks"].details["points"][0]["note"] == (
        'exit code 1, expected 0 (its stderr ends "AssertionError")'
    )
    assert "line 5, in check" in by_id["wrong"]["code_test"].details["stderr"]
    untested = "the test did not run to its end: the program exited first (exit code 0)"
    assert by_id["exits"]["code_test"].details["failures"] == [untested]
    assert by_id["exits"]["checks"].details["points"][0]["note"] == untested
    assert by_id["exits"]["code_test"].score == 0.0 and by_id["exits"]["checks"].score == 0.0
