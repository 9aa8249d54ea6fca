"""The ``code_test`` metric and ``run_code_test``: code extraction, checks, params, real sandbox runs."""

from __future__ import annotations

import re
import uuid

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.code_test import CodeTestParams, extract_code, judge, run_code_test
from ragscore_workers.metrics.registry import RunContext, get_metric
from ragscore_workers.sandbox import ExecResult, Limits, get_sandbox
from ragscore_workers.schemas import Queue, Row, SandboxConfig, Suite

LOCAL = SandboxConfig(backend="local", timeout_s=5)


def row(**fields: object) -> Row:
    return Row.model_validate({"id": "r", **fields})


def executed(**fields: object) -> ExecResult:
    return ExecResult(**{"exit_code": 0, "stdout": "", "stderr": "", "duration_s": 0.01, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"code": "print(1)", "answer": "```\nprint(2)\n```"}, "print(1)"),
        ({"answer": "Try:\n```python\nprint(2)\n```\nor\n```\nprint(3)\n```"}, "print(2)\n"),
        ({"answer": "~~~py\nx = 1\n~~~"}, "x = 1\n"),
        ({"answer": "````\n```\nnested\n```\n````"}, "```\nnested\n```\n"),
        ({"answer": "cut off:\n```python\nprint(4)\n"}, "print(4)\n"),
        ({"code": "   ", "answer": "```\nprint(5)\n```"}, "print(5)\n"),
        ({"answer": "inline `print(6)` only"}, None),
        ({"answer": "1. Run:\n   ```python\n   if True:\n       print(7)\n   ```"}, "if True:\n    print(7)\n"),
        ({"answer": "- a\n  - b:\n\n    ```\n    x = 8\n    ```"}, "x = 8\n"),
        ({"answer": '```\ns = """\n    ```\n"""\n```'}, 's = """\n    ```\n"""\n'),
        ({"answer": "```py\r\nprint(9)\r\n```\r\n"}, "print(9)\r\n"),
        ({"answer": "```not a fence```\n~~~\nx = 10\n~~~"}, "x = 10\n"),
        ({"answer": "```\n\n```"}, None),
        ({}, None),
    ],
)
def test_code_comes_from_the_code_field_else_the_first_fenced_block(fields: dict, expected: str | None) -> None:
    assert extract_code(row(**fields)) == expected


def test_code_in_a_list_item_runs_without_its_indentation() -> None:
    answer = "Steps:\n1. Write:\n   ```python\n   total = sum(range(10))\n   print(total)\n   ```\n2. Run it."
    ctx = RunContext(run_id="t", suite=Suite(metrics=["code_test"], sandbox=LOCAL))
    [result] = get_metric("code_test").fn([row(answer=answer)], CodeTestParams(stdout="45"), ctx)
    assert (result.score, result.details["failures"]) == (1.0, [])


def test_stdout_comparison_ignores_trailing_whitespace_only() -> None:
    params = CodeTestParams(stdout="a\nb")
    assert judge(executed(stdout="a  \nb\n\n"), params)[0]
    assert judge(executed(stdout="a\r\nb\r\n"), params)[0]
    assert not judge(executed(stdout=" a\nb"), params)[0]
    assert not judge(executed(stdout="a\nb\nc"), params)[0]


@pytest.mark.parametrize(
    ("stdout", "expected", "said"),
    [
        ("13\n", "42", 'line 1 is "13", expected "42"'),
        ("1\n2 \n4\n", "1\n2\n3", 'line 3 is "4", expected "3"'),  # trailing whitespace is no difference
        ("", "42", 'it printed nothing, expected "42"'),
        ("1\n", "1\n2", 'line 2 is missing, expected "2"'),
        ("1\n2\n\n", "1", 'line 2 is "2", expected no more than 1 line'),
        ("\nx\n", "\n", 'it printed "x", expected nothing'),  # not "line 2 is "x", expected no more than 1 line"
        ("y" * 300, "x", f'line 1 is "{"y" * 99}…", expected "x"'),  # cut as a quote of stderr is
    ],
)
def test_a_stdout_that_differs_names_its_first_differing_line(stdout: str, expected: str, said: str) -> None:
    """The report said "stdout differs from the expected output" alone: what the program printed was in items.jsonl
    only."""
    _, details = judge(executed(stdout=stdout), CodeTestParams(stdout=expected))
    assert details["failures"] == [f"stdout differs from the expected output: {said}"]


def test_a_failed_check_says_why() -> None:
    passed, details = judge(executed(exit_code=1, stdout="x" * 5000), CodeTestParams(stdout_regex=r"^\d+$"))
    assert not passed
    assert details["failures"] == ["exit code 1, expected 0", "stdout does not match stdout_regex"]
    assert len(details["stdout"]) == 2000 and details["output_truncated"]
    stopped = judge(executed(exit_code=None, stopped_by="timeout"), CodeTestParams())
    assert stopped == (False, stopped[1]) and stopped[1]["failures"] == ["stopped by the sandbox: timeout"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"stdout": "1", "stdout_regex": "1"}, "not both"),
        ({"stdout_regex": "("}, "invalid regular expression"),
        ({"language": "cobol"}, "unsupported language 'cobol'"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"exit_code": 130}, "exit_code 130 can never pass"),
        ({"exit_code": -1}, "exit_code -1 can never pass"),
        ({"expected": "1"}, "expected"),
        ({"stdin": "a\udc80b"}, r"lone surrogate \(U\+DC80\), which UTF-8 cannot hold"),
        ({"stdout": "\ud800"}, "lone surrogate"),
    ],
)
def test_bad_params_fail_before_anything_runs(params: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        get_metric("code_test").parse_params(params)


def test_registered_on_the_code_queue_as_a_batch_metric() -> None:
    mdef = get_metric("code_test")
    assert (mdef.queue, mdef.kind) == (Queue.CODE, "batch")


def test_run_code_test_runs_real_code_with_stdin() -> None:
    params = {"stdin": "3 4\n", "stdout": "7"}
    passed, details = run_code_test("a, b = map(int, input().split())\nprint(a + b)", params, LOCAL)
    assert passed and details["exit_code"] == 0 and details["backend"] == "local"
    failed, details = run_code_test("print(8)", params, LOCAL)
    assert not failed and details["stdout"] == "8\n"


def test_an_exit_code_above_128_is_read_as_a_signal_so_the_param_stops_at_128() -> None:
    passed, details = run_code_test("import sys\nsys.exit(128)", {"exit_code": 128}, LOCAL)
    assert passed and details["exit_code"] == 128
    passed, details = run_code_test("import sys\nsys.exit(130)", {}, LOCAL)
    assert (details["stopped_by"], details["signal"]) == ("killed", 2)


@pytest.mark.serial  # its run is held to under 3 s
def test_params_override_the_suite_limits() -> None:
    passed, details = run_code_test("import time\ntime.sleep(30)", {"timeout_s": 1}, LOCAL)
    assert not passed and details["stopped_by"] == "timeout" and details["duration_s"] < 3
    passed, details = run_code_test("b = bytearray(200 * 2**20)", {"memory_mb": 64}, LOCAL)
    assert details["stopped_by"] == "memory"
    with pytest.raises(ConfigError, match="Bad code_test params"):
        run_code_test("print(1)", {"stdout": 1, "stdout_regex": "x"}, LOCAL)


def test_metric_scores_rows_and_keeps_unscorable_apart() -> None:
    rows = [
        row(id="ok", code="print(sum(range(10)))"),
        row(id="wrong", answer="```python\nprint(44)\n```"),
        row(id="none", answer="I would loop over the numbers."),
    ]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["code_test"], sandbox=LOCAL))
    results = get_metric("code_test").fn(rows, CodeTestParams(stdout="45"), ctx)
    assert [(r.score, r.passed) for r in results] == [(1.0, True), (0.0, False), (None, None)]
    assert results[2].details["reason"].startswith("no code")


def test_code_holding_a_lone_surrogate_is_that_items_error_and_its_chunk_is_scored() -> None:
    rows = [row(id="a", code="print(45)"), row(id="bad", code="print('\udc80')"), row(id="b", code="print(45)")]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["code_test"], sandbox=LOCAL))
    results = get_metric("code_test").fn(rows, CodeTestParams(stdout="45"), ctx)
    assert [r.score for r in results] == [1.0, None, 1.0]
    assert results[1].error == (
        "MetricError: the row's code cannot be encoded as UTF-8: it holds a lone surrogate, U+DC80 (line 1, column 8)"
    )


def test_a_sandbox_that_cannot_run_is_an_item_error_not_a_score(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix:///tmp/no-docker-{uuid.uuid4().hex}.sock")
    get_sandbox.cache_clear()
    try:
        ctx = RunContext(run_id="t", suite=Suite(metrics=["code_test"], sandbox=SandboxConfig(backend="docker")))
        [result] = get_metric("code_test").fn([row(code="print(1)")], CodeTestParams(), ctx)
    finally:
        get_sandbox.cache_clear()
    assert result.score is None and "no Docker engine answers" in (result.error or "")


def test_a_code_test_point_whose_sandbox_cannot_run_makes_the_checks_item_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"stdout": "1"}}, {"id": "kw", "type": "keyword",
              "params": {"keywords": ["print"]}}]  # fmt: skip
    monkeypatch.setenv("DOCKER_HOST", f"unix:///tmp/no-docker-{uuid.uuid4().hex}.sock")
    get_sandbox.cache_clear()
    try:
        ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=SandboxConfig(backend="docker")))
        [result] = get_metric("checks").fn([row(code="print(1)", answer="print", checks=points)], ChecksParams(), ctx)
    finally:
        get_sandbox.cache_clear()
    run, kw = result.details["points"]
    assert run["status"] == "error" and run["note"].startswith("sandbox error: SandboxUnavailable")
    assert kw["status"] == "passed" and result.score is None and result.details["errors"] == ["run"]
    assert (result.error or "").startswith("point run: sandbox error")


def test_a_failing_code_test_point_says_why() -> None:
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"stdout": "3"}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    wrong, crash = get_metric("checks").fn(
        [row(id="w", code="print(4)", answer="a", checks=points), row(id="c", code="1/0", answer="b", checks=points)],
        ChecksParams(), ctx,
    )  # fmt: skip
    assert wrong.details["points"][0]["note"] == 'stdout differs from the expected output: line 1 is "4", expected "3"'
    assert crash.details["points"][0]["note"] == (
        'exit code 1, expected 0 (its stderr ends "ZeroDivisionError: division by zero"); stdout differs from the '
        'expected output: it printed nothing, expected "3"'
    )
    assert wrong.score == crash.score == 0.0


def test_an_output_that_makes_stdout_regex_backtrack_fails_the_test_within_its_time_bound() -> None:
    """The output is the model's: it may make the suite's pattern backtrack for hours (re cannot be stopped).
    The bounded search gives up after REGEX_TIMEOUT_S and the test fails, saying why."""
    passed, details = run_code_test("print('a' * 5000 + 'b')", {"stdout_regex": "(a|aa)+$"}, LOCAL)
    assert not passed and "ran over" in details["failures"][0], details
    assert run_code_test("print('x 45.0 y')", {"stdout_regex": r"\d+\.\d+"}, LOCAL)[0]


def test_a_checks_code_test_point_reads_the_same_code_as_the_code_test_metric() -> None:
    """A fence inside a string literal does not end the block, for the point as for the metric (CommonMark)."""
    from ragscore_workers.metrics.checks import ChecksParams

    answer = 'Here:\n```python\nfence = "```"\nprint(45)\n```\n'
    points = [{"id": "run", "type": "code_test", "params": {"stdout": "45"}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    (checked,) = get_metric("checks").fn([row(id="f", answer=answer, checks=points)], ChecksParams(), ctx)
    assert extract_code(row(answer=answer)) == 'fence = "```"\nprint(45)\n'
    assert checked.score == 1.0 and run_code_test(extract_code(row(answer=answer)) or "", {"stdout": "45"}, LOCAL)[0]


def test_a_program_that_reports_running_out_of_memory_is_said_to_have_reported_it() -> None:
    """The memory verdict comes from the program's last line of stderr: it said "stopped by the sandbox: memory (its
    256 MiB limit)", for an allocation the limit refused and for a program raising MemoryError itself alike. The
    limit is named, not claimed as hit."""
    passed, details = run_code_test("b = bytearray(200 * 2**20)", {"memory_mb": 64}, LOCAL)
    assert not passed and details["stopped_by"] == "memory"
    assert details["failures"] == ['reported out of memory (its stderr ends "MemoryError"; exit code 1; memory '
                                   "limit 64 MiB)"]  # fmt: skip
    passed, details = run_code_test("raise MemoryError('made up')", {}, LOCAL)
    assert details["failures"] == ['reported out of memory (its stderr ends "MemoryError: made up"; exit code 1; '
                                   "memory limit 256 MiB)"]  # fmt: skip
    # a row's point asking for more than the suite's limit still hears it ran under the suite's
    passed, details = run_code_test("raise MemoryError", {"memory_mb": 4096}, LOCAL, from_data=True)
    assert details["failures"] == ['reported out of memory (its stderr ends "MemoryError"; exit code 1; memory '
                                   "limit 256 MiB: the suite's sandbox.memory_mb, which a row's points may lower, "
                                   "never raise)"]  # fmt: skip


def test_a_kill_at_the_memory_limit_says_the_limit_was_hit() -> None:
    """The docker backend's memory cgroup kills the program (OOMKilled): there the limit was hit."""
    killed = executed(exit_code=137, stopped_by="memory", signal=9, backend="docker")
    failures = judge(killed, CodeTestParams(), Limits(memory_mb=64))[1]["failures"]
    assert failures == ["stopped by the sandbox: memory (killed at its 64 MiB limit, signal 9)"]


def test_the_cpu_time_and_file_size_limits_are_named() -> None:
    """SIGXCPU read as a timeout and SIGXFSZ as "killed (signal 25)". The sandbox's side (which signal reads as
    which stop) is tests/sandbox/test_local.py's; here the wording of the stop."""
    limits = Limits(timeout_s=30)
    cpu = judge(executed(exit_code=None, stopped_by="cpu_limit", signal=24), CodeTestParams(), limits)
    assert cpu == (False, cpu[1]) and cpu[1]["failures"] == [
        f"stopped by the sandbox: cpu_limit (signal 24, SIGXCPU: a process used up its CPU-time limit, at most "
        f"{limits.cpu_s} s)"
    ]
    big = judge(executed(exit_code=None, stopped_by="file_limit", signal=25), CodeTestParams(), limits)
    assert big == (False, big[1]) and big[1]["failures"] == [
        "stopped by the sandbox: file_limit (signal 25, SIGXFSZ: a file grew past its file-size limit, at most 16 MiB)"
    ]
    # no limits given: the stop and the signal alone
    assert judge(executed(exit_code=None, stopped_by="cpu_limit", signal=24), CodeTestParams())[1]["failures"] == [
        "stopped by the sandbox: cpu_limit (signal 24, SIGXCPU: a process used up its CPU-time limit)"
    ]


def test_a_limit_outside_what_the_sandbox_takes_is_taken_as_its_nearest_end_and_said() -> None:
    """A row's point asking for timeout_s 1000 ran under 600 s (the sandbox's most) and nothing said so."""
    from ragscore_workers.metrics.checks import ChecksParams

    roomy = SandboxConfig(backend="local", timeout_s=600)
    passed, details = run_code_test("print(1)", {"timeout_s": 1000, "stdout": "1"}, roomy, from_data=True)
    assert passed and details["notes"] == ["timeout_s 1000 was taken as 600, the most the sandbox takes"]
    # whether `print(1)` ends within the 0.5 s (the product's least) is the host's load: the notes are said either way
    details = run_code_test("print(1)", {"timeout_s": 0.1, "memory_mb": 8}, LOCAL)[1]
    assert details["notes"] == [
        "timeout_s 0.1 was taken as 0.5, the least the sandbox takes",
        "memory_mb 8 was taken as 32, the least the sandbox takes",
    ]
    # below the suite's limit anyway: the suite's limit is what it ran under, as a stop would say
    assert "notes" not in run_code_test("print(1)", {"timeout_s": 1000}, LOCAL, from_data=True)[1]
    points = [{"id": "run", "type": "code_test", "params": {"stdout": "1", "timeout_s": 1000}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=roomy))
    [result] = get_metric("checks").fn([row(code="print(1)", answer="a", checks=points)], ChecksParams(), ctx)
    assert result.details["points"][0]["note"] == "exit 0; timeout_s 1000 was taken as 600, the most the sandbox takes"


def test_a_code_test_point_whose_code_holds_a_lone_surrogate_says_so() -> None:
    """It read "sandbox error: MetricError: ...": the sandbox was fine, the code cannot be encoded as UTF-8."""
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"stdout": "1"}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    from_code, from_answer = get_metric("checks").fn(
        [row(id="c", code="x = 1\nprint('\udc80')", answer="a", checks=points),
         row(id="a", answer="```python\nprint('\ud800')\n```", checks=points)],
        ChecksParams(), ctx,
    )  # fmt: skip
    assert from_code.details["points"][0]["status"] == "error"
    assert from_code.details["points"][0]["note"] == (
        "the row's code cannot be encoded as UTF-8: it holds a lone surrogate, U+DC80 (line 2, column 8)"
    )
    assert from_answer.details["points"][0]["note"] == (
        "the first fenced code block of the point's text cannot be encoded as UTF-8: it holds a lone surrogate, U+D800 "
        "(line 1, column 8)"
    )


def test_a_huge_limit_is_taken_as_the_most_the_sandbox_takes_and_said() -> None:
    """Row data keeps big ints (json.loads): memory_mb 10**400 raised OverflowError (float() of it) out of checks for
    the whole chunk. It is taken as the most, as it was before, and said; a suite param the same."""
    from ragscore_workers.metrics.checks import ChecksParams

    huge = SandboxConfig(backend="local", timeout_s=5, memory_mb=1_048_576)
    points = [{"id": "run", "type": "code_test", "params": {"stdout": "1", "memory_mb": 10**400}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=huge))
    [result] = get_metric("checks").fn([row(code="print(1)", answer="a", checks=points)], ChecksParams(), ctx)
    point = result.details["points"][0]
    assert point["status"] == "passed" and point["note"].startswith("exit 0; memory_mb ")
    assert point["note"].endswith(" was taken as 1,048,576, the most the sandbox takes"), point["note"]
    params = CodeTestParams.model_validate({"stdout": "1", "memory_mb": 10**400})
    assert params.memory_mb == 1_048_576
    passed, details = run_code_test("print(1)", params, huge)
    assert passed and details["notes"] == [point["note"].removeprefix("exit 0; ")]
    # a number given as text is taken as pydantic takes it, never said as "inf"
    assert "inf" not in str(CodeTestParams.model_validate({"memory_mb": "1" * 400}).range_notes())


def test_memory_limits_are_said_as_whole_mib() -> None:
    """They read "killed at its 2e+06 MiB limit" and "memory_mb 2e+06 was taken as 1.04858e+06"."""
    params = CodeTestParams.model_validate({"memory_mb": 2_000_000})
    assert params.range_notes() == {
        "memory_mb": "memory_mb 2,000,000 was taken as 1,048,576, the most the sandbox takes"
    }
    limits = Limits(memory_mb=1_048_576, file_mb=2_000_000, output_bytes=3 * 2**30)
    killed = executed(exit_code=137, stopped_by="memory", signal=9, backend="docker")
    assert judge(killed, CodeTestParams(), limits)[1]["failures"] == [
        "stopped by the sandbox: memory (killed at its 1,048,576 MiB limit, signal 9)"
    ]
    reported = executed(exit_code=1, stopped_by="memory", stderr="MemoryError\n")
    assert judge(reported, CodeTestParams(), limits)[1]["failures"] == [
        'reported out of memory (its stderr ends "MemoryError"; exit code 1; memory limit 1,048,576 MiB)'
    ]
    stopped = executed(exit_code=None, stopped_by="file_limit", signal=25)
    assert judge(stopped, CodeTestParams(), limits)[1]["failures"] == [
        "stopped by the sandbox: file_limit (signal 25, SIGXFSZ: a file grew past its file-size limit, at most "
        "2,000,000 MiB)"
    ]
    loud = executed(stopped_by="output_limit")
    assert judge(loud, CodeTestParams(), limits)[1]["failures"] == [
        "stopped by the sandbox: output_limit (more than 3,072 MiB of stdout and stderr)"
    ]


def test_a_code_test_point_of_a_row_with_blank_code_runs_the_points_text() -> None:
    """A blank ``code`` field is no code (:func:`row_code`, as the code_test metric reads it): the point runs its
    text's first fenced block; a row's code that is not blank runs before it."""
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"stdout": "1"}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    blank, given = get_metric("checks").fn(
        [row(id="b", code=" \n", answer="```python\nprint(1)\n```", checks=points),
         row(id="g", code="print(2)", answer="```python\nprint(1)\n```", checks=points)],
        ChecksParams(), ctx,
    )  # fmt: skip
    assert blank.details["points"][0]["status"] == "passed", blank.details
    assert given.details["points"][0]["status"] == "failed", given.details


ADD = "def add(a, b):\n    return a + b\n"
HUMANEVAL_TEST = (
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\ncheck(add)"
)


@pytest.mark.parametrize("test", ["assert add(2, 3) == 5", HUMANEVAL_TEST])
def test_the_test_param_runs_after_the_code_and_a_failing_assert_names_its_error(test: str) -> None:
    passed, details = run_code_test(ADD, {"test": test}, LOCAL)
    assert (passed, details["failures"]) == (True, [])
    passed, details = run_code_test(ADD.replace("+", "-"), {"test": test}, LOCAL)
    assert not passed
    assert details["failures"] == ['exit code 1, expected 0 (its stderr ends "AssertionError")']


def test_a_tests_traceback_numbers_its_lines_after_the_codes() -> None:
    """The program is the code, a newline, then the test: the code's lines keep their numbers."""
    test = "assert add(1, 1) == 2\nassert add(2, 2) == 5, 'two and two'"
    passed, details = run_code_test(ADD, {"test": test}, LOCAL)
    assert details["failures"] == ['exit code 1, expected 0 (its stderr ends "AssertionError: two and two")']
    assert "line 5, in <module>" in details["stderr"]  # 2 lines of code, a blank line, the test's 2nd line


def test_a_long_last_line_of_stderr_is_cut_in_the_failure() -> None:
    passed, details = run_code_test(ADD, {"test": f"assert add(1, 1) == 3, {'x' * 300!r}"}, LOCAL)
    [failure] = details["failures"]
    assert failure == f'exit code 1, expected 0 (its stderr ends "AssertionError: {"x" * 83}…")'


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"test": "assert f('\udc80')"}, r"test: .*lone surrogate \(U\+DC80\)"),
        ({"test": "assert True", "language": "ruby"}, "test is Python source: only for language python, not 'ruby'"),
        # an MBPP row with an empty test_list: a blank test would pass any code that runs, untested
        ({"test": " \n"}, "'code_test': test is blank: give the Python source to run after the code, or no test"),
        # HumanEval's test column as its dataset gives it, without check(<entry_point>): it defines check, calls nothing
        (
            {
                "test": HUMANEVAL_TEST.removesuffix("check(add)").replace(
                    "def check", "METADATA = {'a': 1}\n\ndef check"
                )
            },
            r"test runs nothing: it only defines check; call what it defines \(HumanEval's test is followed by "
            r"check\(<its entry_point>\)\)",
        ),
        (
            {"test": "# asserts to come\nimport math"},
            r"test runs nothing: it holds no assert and no call \(only imports, assignments or comments\)",
        ),
    ],
)
def test_a_bad_test_param_fails_before_anything_runs(
    params: dict, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragscore_workers.sandbox import LANGUAGES, Language

    monkeypatch.setitem(LANGUAGES, "ruby", Language("main.rb", ("ruby", "main.rb")))
    with pytest.raises(ConfigError, match=message):
        get_metric("code_test").parse_params(params)


@pytest.mark.parametrize("field", ["completion", "solution", "generated_code", "canonical_solution"])
def test_a_row_without_code_names_the_field_that_holds_it(field: str) -> None:
    ctx = RunContext(run_id="t", suite=Suite(metrics=["code_test"], sandbox=LOCAL))
    [result] = get_metric("code_test").fn([row(**{field: "print(45)"})], CodeTestParams(stdout="45"), ctx)
    assert result.details["reason"] == (
        f"no code: no `code` field and no fenced code block in the answer (the row's `{field}` field is not read: "
        "give the program as `code`, renaming the column in the dataset)"
    )


def test_a_code_test_point_of_a_row_without_code_names_the_field_that_holds_it() -> None:
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"test": "assert f() == 1"}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    [result] = get_metric("checks").fn(
        [row(answer="f returns 1", completion="def f():\n    return 1\n", checks=points)], ChecksParams(), ctx
    )
    assert result.details["points"][0]["note"] == (
        "no code: no `code` field and no fenced code block (the row's `completion` field is not read: give the "
        "program as `code`, renaming the column in the dataset)"
    )


def test_a_row_with_no_code_to_run_is_unscorable_under_checks_as_under_code_test() -> None:
    """A code_test point of a row with no code scored the row 0.5 here (the point failed, the keyword passed), where
    the code_test metric leaves the row unscorable: no program ran, so no answer failed."""
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"stdout": "3"}},
              {"id": "kw", "type": "keyword", "params": {"keywords": ["add"]}}]  # fmt: skip
    no_code = row(answer="add the numbers", checks=points)
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks", "code_test"], sandbox=LOCAL))
    [checked] = get_metric("checks").fn([no_code], ChecksParams(), ctx)
    [tested] = get_metric("code_test").fn([no_code], CodeTestParams(stdout="3"), ctx)
    assert tested.score is None and tested.details["reason"].startswith("no code: ")
    assert checked.score is None and checked.error is None and checked.passed is None
    assert checked.details["reason"] == "point run: no code: no `code` field and no fenced code block"
    run, kw = checked.details["points"]
    assert (run["status"], run["passed"], kw["status"]) == ("not_run", None, "passed")


def test_an_informational_code_test_point_with_no_code_leaves_the_other_points_scoring() -> None:
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "informational": True},
              {"id": "kw", "type": "keyword", "params": {"keywords": ["add"]}}]  # fmt: skip
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    [result] = get_metric("checks").fn([row(answer="add the numbers", checks=points)], ChecksParams(), ctx)
    assert (result.score, result.passed) == (1.0, True)
    assert result.details["points"][0]["status"] == "not_run"


@pytest.mark.parametrize(
    "code",
    [
        "import sys\n\ndef add(a, b):\n    return a - b\n\nsys.exit(0)\n",
        "def add(a, b):\n    return a - b\n\nexit()\n",
        "import os\n\ndef add(a, b):\n    return a - b\n\nos._exit(0)\n",
        "import sys\n\ndef add(a, b):\n    return a - b\n\ndef main():\n    return 0\n\nif __name__ == '__main__':\n"
        "    sys.exit(main())\n",
        # the function exits when the test calls it
        "import sys\n\ndef add(a, b):\n    if a < 0:\n        sys.exit()\n    return a + b\n",
        # fd 2 pointed elsewhere: the line the test's end writes goes there (the docs say so)
        ADD + "import os\nos.dup2(os.open(os.devnull, os.O_WRONLY), 2)\n",
    ],
)
def test_code_that_exits_before_its_test_ends_fails_as_untested(code: str) -> None:
    passed, details = run_code_test(code, {"test": HUMANEVAL_TEST}, LOCAL)
    assert (passed, details["exit_code"]) == (False, 0)
    assert details["failures"] == ["the test did not run to its end: the program exited first (exit code 0)"]


def test_a_test_that_ran_to_its_end_leaves_the_programs_stderr_as_it_wrote_it() -> None:
    code = ADD + "import sys\nsys.stderr.write('from the code, no newline')\n"
    passed, details = run_code_test(code, {"test": "assert add(2, 3) == 5\nprint('checked', file=sys.stderr)"}, LOCAL)
    assert (passed, details["failures"]) == (True, [])
    assert details["stderr"] == "from the code, no newlinechecked\n"
    passed, details = run_code_test(ADD, {"test": "assert add(2, 3) == 5"}, LOCAL)
    assert (passed, details["stderr"], details["output_truncated"]) == (True, "", False)
    passed, details = run_code_test(ADD, {"test": "assert add(2, 3) == 5", "exit_code": 3}, LOCAL)
    assert details["failures"] == ["exit code 0, expected 3"]  # no quote of the line the test's end wrote


def test_the_line_the_tests_end_writes_takes_none_of_the_programs_output_cap() -> None:
    """A program may print up to the cap (1 MiB) and pass: the line its test's end writes is ragscore's, not its own.
    One printing past the cap is stopped, and what the cap left of that line is not in its stderr."""
    fills = ADD + "import sys\nsys.stdout.write('x' * (2**20 - 10))\n"
    passed, details = run_code_test(fills, {"test": "assert add(2, 3) == 5"}, LOCAL)
    assert (passed, details["failures"], details["stopped_by"]) == (True, [], None)
    past = ADD + "import sys\nsys.stdout.write('x' * (2**20 + 20))\n"
    passed, details = run_code_test(past, {"test": "assert add(2, 3) == 5"}, LOCAL)
    assert details["failures"] == ["stopped by the sandbox: output_limit (more than 1 MiB of stdout and stderr)"]
    assert (passed, details["stderr"], details["output_truncated"]) == (False, "", True)


def test_code_that_defines_its_own_import_hook_name_passes_its_test() -> None:
    """The line written after the test imports os as a statement does: a module-level ``__import__`` of the code's is
    no builtin, and calling it failed a correct program."""
    code = "def __import__(*args, **kwargs):\n    raise ImportError('not here')\n\n" + ADD
    passed, details = run_code_test(code, {"test": "assert add(2, 3) == 5"}, LOCAL)
    assert (passed, details["failures"]) == (True, [])


def test_a_humaneval_row_with_no_answer_nor_code_names_the_field_that_holds_it_in_checks() -> None:
    """A HumanEval row as its dataset gives it (its ``completion``, no ``answer``): checks read it as "no answer",
    and the reason never named the column to give as ``code``."""
    from ragscore_workers.metrics.checks import ChecksParams

    points = [{"id": "run", "type": "code_test", "params": {"test": "assert f() == 1"}}]
    ctx = RunContext(run_id="t", suite=Suite(metrics=["checks"], sandbox=LOCAL))
    [result] = get_metric("checks").fn([row(completion="def f():\n    return 1\n", checks=points)], ChecksParams(), ctx)
    assert result.details["reason"] == (
        "no answer (the row's `completion` field is not read: give the program as `code`, renaming the column in "
        "the dataset)"
    )


@pytest.mark.parametrize("silenced", ["sys.stderr = io.StringIO()", "sys.stderr.close()"])
def test_code_that_silences_sys_stderr_passes_its_test(silenced: str) -> None:
    """The line the test's end writes goes to file descriptor 2, which Python's ``sys.stderr`` only wraps."""
    code = f"import io, sys\n{silenced}\n" + ADD
    passed, details = run_code_test(code, {"test": "assert add(2, 3) == 5"}, LOCAL)
    assert (passed, details["failures"]) == (True, [])


@pytest.mark.parametrize(
    "test",
    [
        "class Checks:\n    assert add(2, 3) == 5\n",  # a class's body runs as it is defined
        "def check(candidate=add):\n    assert candidate(2, 3) == 5\n\ncheck()",
        "import functools\n\n@functools.cache\ndef five():\n    return add(2, 3)\n\nassert five() == 5",
        "checked = add(2, 3) == 5 or exit(1)",  # an assignment that calls
    ],
)
def test_a_test_that_runs_something_as_it_runs_is_taken(test: str) -> None:
    passed, details = run_code_test(ADD, {"test": test}, LOCAL)
    assert (passed, details["failures"]) == (True, [])
    passed, details = run_code_test(ADD.replace("+", "-"), {"test": test}, LOCAL)
    assert not passed


@pytest.mark.parametrize(
    ("code", "last"),
    [
        (
            "def fetch():\n    import socket\n    return socket.create_connection(('1.1.1.1', 80), timeout=3)\n",
            re.escape("OSError: [Errno 97] Address family not supported by protocol"),
        ),
        (
            "def fetch():\n    import urllib.request\n    return urllib.request.urlopen('http://example.com')\n",
            # the resolver's errno differs between hosts (-3 here; -2 or -5 elsewhere)
            r"urllib\.error\.URLError: <urlopen error \[Errno -[235]\] [^\"]+>",
        ),
    ],
)
def test_code_that_fails_reaching_the_network_is_told_the_sandbox_has_none(code: str, last: str) -> None:
    """The socket errors the sandbox's missing network raises read like a bug of the code or of ragscore: said."""
    passed, details = run_code_test(code, {"test": "assert fetch()"}, LOCAL)
    assert not passed
    [failure] = details["failures"]
    said = f'exit code 1, expected 0 \\(its stderr ends "{last}"; the sandbox has no network\\)'
    assert re.fullmatch(said, failure), failure


def test_an_os_error_other_than_the_networks_is_quoted_without_a_network_note() -> None:
    code = "def fetch():\n    raise OSError(2, 'No such file or directory')\n"
    passed, details = run_code_test(code, {"test": "assert fetch()"}, LOCAL)
    assert details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "FileNotFoundError: [Errno 2] No such file or directory")'
    ]


def test_code_that_writes_past_the_file_size_limit_is_told_the_limit() -> None:
    """Python ignores SIGXFSZ: the write fails with EFBIG, which read as the code's own error."""
    code = "def fill():\n    with open('big', 'wb') as f:\n        f.write(b'0' * (20 * 2**20))\n    return 1\n"
    passed, details = run_code_test(code, {"test": "assert fill() == 1"}, LOCAL)
    assert not passed
    assert details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "OSError: [Errno 27] File too large"; a file grew past the '
        "sandbox's file-size limit, at most 16 MiB)"
    ]


@pytest.mark.parametrize(
    ("last", "note"),
    [
        ("OSError: [Errno 101] Network is unreachable", "; the sandbox has no network"),  # docker's network_mode: none
        ("socket.gaierror: [Errno -2] Name or service not known", "; the sandbox has no network"),
        ("ConnectionRefusedError: [Errno 111] Connection refused", ""),  # docker's loopback: nothing listens there
        ("AssertionError: [Errno 1010] is not an errno", ""),
    ],
)
def test_an_unreachable_network_under_docker_is_said_and_a_refused_loopback_is_not(last: str, note: str) -> None:
    """Under docker a program reads ENETUNREACH (not EAFNOSUPPORT as under local): judged from its stderr alone."""
    stderr = f"Traceback (most recent call last):\n  ...\n{last}\n"
    details = judge(executed(exit_code=1, stderr=stderr, backend="docker"), CodeTestParams(test="assert f()"))[1]
    assert details["failures"] == [f'exit code 1, expected 0 (its stderr ends "{last}"{note})']


PROCESS_LIMIT = "it hit the sandbox's process limit (16 processes and threads at once)"


@pytest.mark.parametrize(
    "code",
    [
        # the children sleep: the parent's fork is refused while they live, and it ends the sandbox
        "import os, time\nfor _ in range(40):\n    if os.fork() == 0:\n        time.sleep(60)\n",
        "import subprocess\nchildren = [subprocess.Popen(['sleep', '60']) for _ in range(40)]\n",
        "import multiprocessing, time\nfor _ in range(40):\n"
        "    multiprocessing.Process(target=time.sleep, args=(60,), daemon=True).start()\n",
    ],
)
def test_code_that_starts_more_processes_than_the_limit_is_told_the_limit(code: str) -> None:
    """A fork refused at RLIMIT_NPROC raises EAGAIN, a BlockingIOError that read as the code's own error."""
    passed, details = run_code_test(code, {"test": "assert True"}, LOCAL)
    assert not passed
    assert details["failures"] == [
        f'exit code 1, expected 0 (its stderr ends "BlockingIOError: [Errno 11] Resource temporarily unavailable"; '
        f"{PROCESS_LIMIT})"
    ]


@pytest.mark.parametrize(("children", "passes"), [(15, True), (16, False)])
def test_code_may_have_16_processes_at_once_and_a_17th_is_told_the_process_limit(children: int, passes: bool) -> None:
    """The program and 15 children live at once under the 16 the failure names; a 16th child is refused, said so."""
    code = (
        "import os\nr, w = os.pipe()\n"
        f"for _ in range({children}):\n"
        "    if os.fork() == 0:\n        os.close(w)\n        os.read(r, 1)\n        os._exit(0)\n"
    )
    passed, details = run_code_test(code, {"test": "assert True"}, LOCAL)
    assert passed == passes
    expected = (
        'exit code 1, expected 0 (its stderr ends "BlockingIOError: [Errno 11] Resource temporarily unavailable"; '
        f"{PROCESS_LIMIT})"
    )
    assert details["failures"] == ([] if passes else [expected])


def test_a_fork_bomb_is_told_the_process_limit_whichever_process_wrote_last() -> None:
    """Every process of a fork bomb writes its traceback at once: the last line may be any of theirs."""
    passed, details = run_code_test("import os\nwhile True:\n    os.fork()\n", {"test": "assert True"}, LOCAL)
    [failure] = details["failures"]
    assert not passed and failure.startswith("exit code 1, expected 0") and failure.endswith(f"; {PROCESS_LIMIT})")


def test_a_fork_bomb_spinning_at_the_process_limit_is_told_the_limit_not_a_timeout() -> None:
    """A bomb that catches its refused forks never ends: the process limit held it until the clock ran out, and the
    failure said only "timeout"."""
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    passed, details = run_code_test(bomb, {}, SandboxConfig(backend="local", timeout_s=3))
    assert not passed and details["stopped_by"] == "process_limit"
    assert details["failures"] == [
        "stopped by the sandbox: process_limit (process limit 16 reached: its processes and threads were all in use "
        "when its 3 s limit ran out)"
    ]


#: Attaches to the sandbox's pid-1 and detaches leaving it stopped (SIGSTOP), prints 45 and exits: pid-1, stopped,
#: never reports the exit.
STOP_INIT = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.ptrace.restype = ctypes.c_long\n"
    "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
    "if libc.ptrace(16, 1, None, None) != 0:\n"  # PTRACE_ATTACH
    "    raise SystemExit('ATTACH refused')\n"
    "os.waitpid(1, 0x40000000)\n"  # __WALL
    "libc.ptrace(17, 1, None, ctypes.c_void_p(19))\n"  # PTRACE_DETACH, leaving it SIGSTOPped
    "print(45)\n"
)


def test_a_program_that_stops_the_sandboxes_pid_1_is_told_so_and_spares_its_chunk() -> None:
    """Its exit could not be seen, so the clock stopped it: the failure said "timeout" alone, as if it had hung."""
    rows = [row(id="stop", code=STOP_INIT), row(id="next", code="print(45)")]
    ctx = RunContext(
        run_id="t", suite=Suite(metrics=["code_test"], sandbox=SandboxConfig(backend="local", timeout_s=2))
    )
    stopped, following = get_metric("code_test").fn(rows, CodeTestParams(stdout="45"), ctx)
    if "ATTACH refused" in stopped.details["stderr"]:
        pytest.skip("this host refuses ptrace inside the sandbox: no pid-1 to stop")
    assert stopped.score == 0.0 and stopped.details["stopped_by"] == "init_stopped"
    assert stopped.details["failures"] == [
        "stopped by the sandbox: init_stopped (it stopped the sandbox's pid 1 (ptrace), which hid its end, and ran "
        "until its 2 s limit)"
    ]
    assert following.score == 1.0, following.details


def test_code_refused_a_thread_is_told_the_process_and_memory_limits() -> None:
    """Threads count as processes, and each needs its stack in the address space: either limit refuses one."""
    code = (
        "import threading, time\nfor _ in range(40):\n"
        "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    )
    passed, details = run_code_test(code, {"test": "assert True"}, LOCAL)
    assert not passed
    assert details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "RuntimeError: can\'t start new thread"; a thread is refused past '
        "the sandbox's process limit (16 processes and threads at once) or its memory limit (256 MiB))"
    ]


def test_a_thread_refused_under_docker_is_told_the_process_limit_alone() -> None:
    """Docker bounds memory by a cgroup, which refuses no thread's stack (RLIMIT_AS is local's): only the pids limit
    refuses a thread there. Judged from its stderr alone (no Docker engine here)."""
    stderr = "Traceback (most recent call last):\n  ...\nRuntimeError: can't start new thread\n"
    details = judge(executed(exit_code=1, stderr=stderr, backend="docker"), CodeTestParams(), Limits())[1]
    assert details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "RuntimeError: can\'t start new thread"; a thread is refused past '
        "the sandbox's process limit (16 processes and threads at once))"
    ]


def test_a_non_blocking_sockets_eagain_is_not_said_to_be_the_process_limit() -> None:
    stderr = (
        'Traceback (most recent call last):\n  File "/sandbox/main.py", line 4, in <module>\n    server.accept()\n'
        "BlockingIOError: [Errno 11] Resource temporarily unavailable\n"
    )
    details = judge(executed(exit_code=1, stderr=stderr), CodeTestParams(), Limits())[1]
    assert details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "BlockingIOError: [Errno 11] Resource temporarily unavailable")'
    ]


def test_code_without_a_test_that_crashes_quotes_its_stderr() -> None:
    """The traceback's last line says why, as it does for code with a test."""
    code = "def mean(xs):\n    return sum(xs) / len(xs)\n\nprint(mean([]))\n"
    ctx = RunContext(run_id="t", suite=Suite(metrics=["code_test"], sandbox=LOCAL))
    [result] = get_metric("code_test").fn([row(code=code)], CodeTestParams(stdout="0"), ctx)
    assert result.score == 0.0
    assert result.details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "ZeroDivisionError: division by zero")',
        'stdout differs from the expected output: it printed nothing, expected "0"',
    ]


@pytest.mark.parametrize(
    "code",
    [
        # a function named for spawning: its name is in the traceback, above the socket's call
        "import socket\ndef spawn_reader():\n    a, b = socket.socketpair()\n    a.setblocking(False)\n    a.recv(1)\n"
        "spawn_reader()\n",
        # the program's own log of forks, then the socket's EAGAIN as a line of its own
        "import socket, sys\na, b = socket.socketpair()\na.setblocking(False)\n"
        "print('forked 3 workers', file=sys.stderr)\ntry:\n    a.recv(1)\n"
        "except OSError as exc:\n    sys.exit(f'{type(exc).__name__}: {exc}')\n",
    ],
)
def test_a_programs_own_words_of_forks_beside_a_sockets_eagain_are_not_said_to_be_the_process_limit(code: str) -> None:
    """Only a refused fork or spawn call, the last frame's source line, reads as the process limit."""
    passed, details = run_code_test(code, {"test": "assert True"}, LOCAL)
    assert not passed
    assert details["failures"] == [
        'exit code 1, expected 0 (its stderr ends "BlockingIOError: [Errno 11] Resource temporarily unavailable")'
    ]
