"""``checks``: weighted score, categories, informational points, dependencies, suggestions, normalizers, chaining."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from ragscore_workers.metrics import _validators, load_all
from ragscore_workers.metrics._validators import Outcome, PointInput, validator
from ragscore_workers.metrics.checks import (
    ChecksParams,
    evaluate_points,
    parse_points,
    refused_points,
    summarize_points,
)
from ragscore_workers.metrics.checks import checks as checks_batch
from ragscore_workers.metrics.registry import RunContext
from ragscore_workers.schemas import MetricResult, Queue, Row, Suite
from ragscore_workers.store import as_stored

_CTX = RunContext(run_id="test", suite=Suite(metrics=["checks"]))


def checks(row: Row, params: ChecksParams) -> MetricResult:
    """The batch metric on one row (cpu points need no worker resource)."""
    (result,) = checks_batch([row], params, _CTX)
    return result


ANSWER = "Paris is the capital of France [1]. It has 2 million people [2]."


def run(points: list[dict[str, Any]], answer: str = ANSWER, **row: Any) -> MetricResult:
    result = checks(Row(id="x", answer=answer, checks=points, **row), ChecksParams())
    assert result.error is None, result.error
    return result


def by_id(result: MetricResult) -> dict[str, dict[str, Any]]:
    return {p["id"]: p for p in result.details["points"]}


PASS = {"type": "keyword", "params": {"keywords": ["paris"]}}
FAIL = {"type": "keyword", "params": {"keywords": ["berlin"]}}


def test_score_is_passed_weight_over_total_weight_with_categories() -> None:
    result = run(
        [
            {"id": "a", **PASS, "weight": 2, "category": "Content"},
            {"id": "b", **FAIL, "weight": 1, "category": "Content"},
            {"id": "c", **PASS, "category": "Style"},
            {"id": "d", **FAIL, "weight": 5, "informational": True, "category": "Extra"},
        ]
    )
    assert result.score == pytest.approx(3 / 4)  # (2 + 1) / (2 + 1 + 1); d is informational
    assert result.details["categories"] == {"Content": pytest.approx(2 / 3), "Style": 1.0}
    assert result.details["failed"] == ["b"] and result.passed is False
    assert (result.details["passed_weight"], result.details["total_weight"]) == (3.0, 4.0)
    assert by_id(result)["d"]["status"] == "failed" and by_id(result)["d"]["informational"]


def test_all_passing_points_pass_and_no_points_score_one() -> None:
    result = run([PASS, PASS | {"category": "Other"}])
    assert result.score == 1.0 and result.passed and [p["id"] for p in result.details["points"]] == ["p1", "p2"]
    empty = run([])
    assert empty.score == 1.0 and empty.details["categories"] == {}
    only_info = run([FAIL | {"informational": True}])
    assert only_info.score == 1.0 and only_info.details["categories"] == {}


def test_zero_weight_points_are_reported_but_move_nothing() -> None:
    result = run([PASS, FAIL | {"weight": 0}])
    assert result.score == 1.0 and result.passed is False  # passed means every scored point passed


def test_a_category_whose_points_all_weigh_0_has_no_ratio() -> None:
    """Its ratio was 1.0 whatever its points did (0 of 0 weight), and the run's category breakdown averaged that in:
    a category of failing points read as perfect."""
    result = run([PASS, FAIL | {"weight": 0, "category": "Style"}])
    assert result.details["categories"] == {"General": 1.0}
    assert [p["id"] for p in result.details["points"]] == ["p1", "p2"]  # still reported


@pytest.mark.parametrize("points", [
    [FAIL | {"weight": 0}],
    [FAIL | {"weight": 0}, PASS | {"weight": 0.0, "category": "Other"}, PASS | {"informational": True}],
])  # fmt: skip
def test_points_that_all_weigh_0_are_refused_not_scored_1(points: list[dict[str, Any]]) -> None:
    """Their total weight is 0, so the score was 1.0 whatever the answer (a failing answer scored 1.0)."""
    result = checks(Row(id="x", answer=ANSWER, checks=points), ChecksParams())
    assert result.score is None and result.error is not None and "every scored point has weight 0" in result.error
    with pytest.raises(ValueError, match="every scored point has weight 0"):
        ChecksParams(points=points)


def test_without_points_or_answer_the_row_is_unscorable() -> None:
    assert checks(Row(id="x", answer="a"), ChecksParams()).details["reason"] == "no checks"
    assert checks(Row(id="x", checks=[PASS]), ChecksParams()).details["reason"] == "no answer"


def test_a_row_of_code_without_an_answer_and_no_points_is_not_scored() -> None:
    # A row of code and no answer is scored by its code_test points; with none (or only informational ones, never
    # scored) nothing scores its code, so it stays "no answer": it read 1.0, whatever the code did.
    for row, params in ((Row(id="x", code="print(1)\n", checks=[]), ChecksParams()),
                        (Row(id="x", code="print(1)\n"), ChecksParams(points=[])),
                        (Row(id="x", code="print(1)\n", checks=[{"type": "code_test", "informational": True}]),
                         ChecksParams())):  # fmt: skip
        result = checks(row, params)
        assert result.score is None and result.error is None, result
        assert result.details["reason"] == "no answer", result.details


def test_suite_points_apply_to_rows_without_their_own() -> None:
    params = ChecksParams(points=[FAIL])
    assert checks(Row(id="x", answer=ANSWER), params).score == 0.0
    assert checks(Row(id="x", answer=ANSWER, checks=[PASS]), params).score == 1.0


def test_depends_on_skips_and_fails_after_a_failed_or_unrun_dependency() -> None:
    result = run(
        [
            {"id": "bad", **FAIL},
            {"id": "good", **PASS},
            {"id": "after_bad", **PASS, "depends_on": "bad"},
            {"id": "after_good", **PASS, "depends_on": ["good"]},
            {"id": "before_later", **PASS, "depends_on": ["later"]},
            {"id": "chain", **PASS, "depends_on": ["after_bad"]},
            {"id": "later", **PASS},
        ]
    )
    points = by_id(result)
    assert points["after_bad"]["status"] == "skipped" and points["after_bad"]["passed"] is False
    assert points["after_bad"]["note"] == "skipped: depends on bad failed"
    assert points["after_good"]["status"] == "passed"
    assert points["before_later"]["note"] == "skipped: depends on later has not run"
    assert points["chain"]["note"] == "skipped: depends on after_bad skipped"
    assert result.score == pytest.approx(3 / 7)  # good, after_good, later


def test_suggestion_is_formatted_with_the_figures_on_failure_only() -> None:
    template = "Mention {missing} ({found_count}/{min_count}) for {id}; {unknown} {ratio:.2f}"
    kw = {"type": "keyword", "params": {"keywords": ["paris", "berlin", "rome"], "min_count": 3}}
    result = run([{"id": "k", **kw, "suggestion": template}, {"id": "ok", **PASS, "suggestion": "never shown"}])
    assert by_id(result)["k"]["suggestion"] == "Mention berlin, rome (1/3) for k; {unknown} {ratio:.2f}"
    assert "suggestion" not in by_id(result)["ok"]
    diff = run(
        [{"type": "diff", "params": {"golden": "abxy"}, "suggestion": "ratio {ratio:.2f} < {threshold}"}], "abcd"
    )
    assert diff.details["points"][0]["suggestion"] == "ratio 0.50 < 0.9"
    odd = run([{**FAIL, "suggestion": "{found_count:zz} {missing:d} {found_count.__class__} {0} {"}])
    assert odd.details["points"][0]["suggestion"] == "{found_count:zz} berlin {found_count.__class__} {0} {"


def test_normalizers_apply_to_the_text_and_to_reference_strings() -> None:
    norm = ["lowercase", "strip_punctuation", "collapse_whitespace"]
    point = {"type": "diff", "params": {"golden": "The Quick brown FOX!"}, "normalizers": norm}
    assert run([point], "the  quick,\nbrown fox").details["points"][0]["figures"]["ratio"] == 1.0
    cjk = {"type": "diff", "params": {"golden": "東京です"}, "normalizers": ["strip_punctuation"]}
    assert run([cjk], "「東京」です。").details["points"][0]["figures"]["ratio"] == 1.0
    md = {"type": "regex", "params": {"pattern": "^Paris is the capital$"}, "normalizers": ["strip_markdown", "strip"]}
    assert run([md], "  **Paris** is the [capital](http://x.org)  ").score == 1.0
    assert run([md | {"normalizers": []}], "**Paris** is the [capital](http://x.org)").score == 0.0
    accents = {"type": "keyword", "params": {"keywords": ["Sao Paulo"]}, "normalizers": ["strip_diacritics"]}
    assert run([accents], "Visiting São Paulo").score == 1.0
    assert run([accents | {"params": {"keywords": ["パス"]}}], "バスで行く").score == 0.0  # bus is not pass
    cites = {"type": "diff", "params": {"golden": "Paris is big."}, "normalizers": ["strip_citations"]}
    assert run([cites], "Paris is big [1, 2]. ").details["points"][0]["figures"]["ratio"] > 0.9


def test_chaining_extracts_text_for_the_next_step_and_validator() -> None:
    answer = 'Result:\n```json\n{"answer": {"city": "Paris", "tags": ["a", "b"]}}\n```'
    city = {"type": "diff", "params": {"golden": "Paris"}, "extract": [{"json_path": "$.answer.city"}]}
    tags = {"type": "regex", "params": {"pattern": r'^\["a", "b"\]$'}, "extract": {"json_path": "answer.tags"}}
    second = {"type": "keyword", "params": {"keywords": ["b"]}, "extract": [{"json_path": "$.answer.tags[1]"}]}
    assert run([city, tags, second], answer).score == 1.0
    two_steps = {
        "type": "length",
        "params": {"max": 1},
        "extract": [{"regex": r"Final answer:\s*(.*)"}, {"regex": r"(?P<word>\w+)", "group": "word"}],
    }
    assert run([two_steps], "Reasoning...\nFinal answer: Paris, France").score == 1.0
    missing = run([{**PASS, "extract": [{"regex": "Final answer: (.*)"}]}], "no marker")
    assert missing.details["points"][0]["note"] == "extract step 1: no match for regex 'Final answer: (.*)'"
    no_key = run([{**PASS, "extract": [{"json_path": "$.nope"}]}], '{"a": 1}')
    assert no_key.details["points"][0]["note"] == "extract step 1: json_path '$.nope': no 'nope'"


def test_every_point_result_carries_verdict_note_evidence_and_ms() -> None:
    result = run([PASS, FAIL, {"type": "citation"}, {"type": "length", "params": {"max": 3}}])
    for p in result.details["points"]:
        assert {"passed", "status", "note", "evidence", "ms", "figures", "category", "weight"} <= p.keys()
        assert isinstance(p["ms"], float) and p["ms"] >= 0 and p["ms"] == round(p["ms"], 3)
    # 40 characters of context each side: "[1]" sits at 31-34 (whole 64-char answer), "[2]" at 60-63
    assert result.details["points"][2]["evidence"] == [ANSWER, "… of France [1]. It has 2 million people [2]."]
    assert result.details["points"][0]["evidence"] == ["Paris is the capital of France [1]. It has 2 …"]


def test_points_of_other_queues_are_not_run_by_evaluate_points_until_their_outcome_is_given() -> None:
    points = [
        {"id": "emb", "type": "embedding", "params": {"threshold": 0.8}},
        {"id": "dep", **PASS, "depends_on": "emb"},
        {"id": "ok", **PASS},
    ]
    row = Row(id="x", answer=ANSWER)
    result = summarize_points(evaluate_points(parse_points(points), row, ANSWER))
    emb, dep = by_id(result)["emb"], by_id(result)["dep"]
    assert emb["status"] == "not_run" and emb["passed"] is None
    assert emb["note"] == "runs on the embed queue; not run here"
    assert dep["note"] == "skipped: depends on emb has not run"
    assert result.details["not_run"] == ["emb"] and result.score == 0.5  # emb excluded; dep failed, ok passed
    external = {"emb": Outcome(True, "similarity 0.91 >= 0.8", {"similarity": 0.91})}
    done = summarize_points(evaluate_points(parse_points(points), row, ANSWER, external))
    assert done.score == 1.0 and done.details["points"][0]["figures"] == {"similarity": 0.91}


def test_checks_runs_batch_validators_itself_and_routes_rows_to_their_queue() -> None:
    from ragscore_workers.metrics.registry import get_metric

    emb_points = [{"id": "emb", "type": "embedding", "params": {"threshold": 0.8}}, {"id": "ok", **PASS}]
    result = checks(Row(id="x", answer=ANSWER, checks=emb_points), ChecksParams())  # no target, no reference:
    # the point cannot run (no model is loaded)
    said = "no target: give params.target or a row reference (not blank)"
    assert by_id(result)["emb"]["note"] == said
    assert by_id(result)["emb"]["status"] == "error" and by_id(result)["ok"]["status"] == "passed"
    assert result.score is None and result.error == f"point emb: {said}"
    # a blank reference is none (it was a target: "similarity -0.032 < 0.5", a failed point)
    blank = checks(Row(id="x", answer=ANSWER, reference="  ", checks=emb_points), ChecksParams())
    assert by_id(blank)["emb"]["note"] == said and by_id(blank)["emb"]["status"] == "error"
    informational = run([emb_points[0] | {"informational": True}, emb_points[1]])
    assert informational.score == 1.0 and informational.error is None  # reported, not scored
    mdef, params = get_metric("checks"), ChecksParams()
    assert mdef.queue_for(Row(id="x", checks=emb_points), params) is Queue.EMBED
    code = [{"type": "code_test", "params": {"stdout": "1"}}, *emb_points]
    assert mdef.queue_for(Row(id="x", checks=code), params) is Queue.CODE
    assert mdef.queue_for(Row(id="x", checks=[PASS]), params) is Queue.CPU


class _UpperParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_ratio: float = 0.5


@pytest.fixture
def extra_validators() -> Iterator[None]:
    @validator("test_upper", _UpperParams)
    def upper(inp: PointInput, params: _UpperParams) -> Outcome:
        letters = [c for c in inp.text if c.isalpha()]
        ratio = sum(c.isupper() for c in letters) / len(letters) if letters else 0.0
        return Outcome(ratio >= params.min_ratio, f"{ratio:.2f} upper", {"ratio": ratio})

    @validator("test_remote", _UpperParams, queue=Queue.CODE)
    def remote(items: list[tuple[PointInput, _UpperParams]], ctx: object) -> list[Outcome]:
        return [Outcome(True, "ran remotely") for _ in items]

    yield
    del _validators.VALIDATORS["test_upper"], _validators.VALIDATORS["test_remote"]


def test_new_validators_plug_in_through_the_registry(extra_validators: None) -> None:
    result = run([{"type": "test_upper", "params": {"min_ratio": 0.7}}, {"type": "test_remote"}], "SHOUT it")
    first, second = result.details["points"]
    assert first["passed"] and first["figures"]["ratio"] == pytest.approx(5 / 7)  # 5 upper-case of 7 letters
    assert not run([{"type": "test_upper", "params": {"min_ratio": 0.9}}], "SHOUT it").details["points"][0]["passed"]
    assert second["status"] == "passed" and second["note"] == "ran remotely"  # a batch validator, run by checks
    bad = checks(Row(id="x", answer="a", checks=[{"type": "test_remote", "params": {"x": 1}}]), ChecksParams())
    assert bad.error is not None and "x: Extra inputs are not permitted" in bad.error  # params checked on cpu too


def test_numeric_ids_and_dependencies_are_accepted() -> None:
    result = run([{"id": 1, **FAIL}, {"id": 2, **PASS, "depends_on": 1}, {"id": 3, **PASS, "depends_on": [2]}])
    assert [p["id"] for p in result.details["points"]] == ["1", "2", "3"]
    assert [p["status"] for p in result.details["points"]] == ["failed", "skipped", "skipped"]


def test_huge_format_widths_in_suggestions_are_left_as_written() -> None:
    result = run([{**FAIL, "suggestion": "{found_count:>999999999} {found_count:>5}"}])
    assert result.details["points"][0]["suggestion"] == "{found_count:>999999999}     0"


def test_an_item_error_counts_the_other_errored_points_in_words() -> None:
    """It said "(and 1 more point(s))": one point is a point, two are points."""
    emb = [{"id": f"emb{i}", "type": "embedding", "params": {"threshold": 0.8}} for i in range(3)]
    said = "no target: give params.target or a row reference (not blank)"
    two = checks(Row(id="x", answer=ANSWER, checks=emb[:2]), ChecksParams())
    assert two.error == f"point emb0: {said} (and 1 more point)"
    three = checks(Row(id="x", answer=ANSWER, checks=emb), ChecksParams())
    assert three.error == f"point emb0: {said} (and 2 more points)"


def test_a_point_whose_validator_raises_errs_alone_and_its_row_keeps_every_point_result() -> None:
    """The answer makes the regex backtrack past its time bound; the schema's $ref cannot be resolved. Each is
    that point's error, named in the item's error; the other points keep their results, the next row its score."""
    backtracks = {"id": "aac", "type": "regex", "params": {"pattern": "(a|aa)+c"}}
    unresolvable = {"id": "ref", "type": "json_schema", "params": {"schema": {"$ref": "https://example.com/s.json"}}}
    rows = [
        Row(id="slow", answer="a" * 40, checks=[PASS | {"id": "ok"}, backtracks]),
        Row(id="ref", answer="{}", checks=[unresolvable, FAIL | {"id": "no"}]),
        Row(id="fine", answer=ANSWER, checks=[PASS]),
    ]
    slow, ref, fine = checks_batch(rows, ChecksParams(), _CTX)
    assert slow.score is None and slow.error is not None and slow.error.startswith("point aac: ValueError: regex")
    assert [p["status"] for p in slow.details["points"]] == ["failed", "error"] and slow.details["errors"] == ["aac"]
    assert "ran over 2 s on 40 characters" in slow.details["points"][1]["note"]
    assert ref.error is not None and ref.error.startswith("point ref: ") and "Unresolvable" in ref.error
    assert [p["status"] for p in ref.details["points"]] == ["error", "failed"]
    assert fine.score == 1.0


class _StopParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@pytest.fixture
def time_is_up_validators() -> Iterator[None]:
    """Validators in which the task's soft time limit fires (Celery raises it wherever the task is)."""
    from celery.exceptions import SoftTimeLimitExceeded

    @validator("test_time_up", _StopParams)
    def time_up(inp: PointInput, params: _StopParams) -> Outcome:
        raise SoftTimeLimitExceeded()

    @validator("test_time_up_batch", _StopParams, queue=Queue.CODE)
    def time_up_batch(items: list[tuple[PointInput, _StopParams]], ctx: object) -> list[Outcome]:
        raise SoftTimeLimitExceeded()

    yield
    del _validators.VALIDATORS["test_time_up"], _validators.VALIDATORS["test_time_up_batch"]


@pytest.mark.parametrize("kind", ["test_time_up", "test_time_up_batch"])
def test_the_task_soft_time_limit_is_not_taken_for_a_point_error(time_is_up_validators: None, kind: str) -> None:
    """It reaches the task, which records a time-limit error for the chunk, instead of the points running on
    (one by one, for a batch validator) until the hard limit kills the worker."""
    from celery.exceptions import SoftTimeLimitExceeded

    rows = [Row(id=str(i), answer="a", checks=[{"type": kind}]) for i in range(2)]
    with pytest.raises(SoftTimeLimitExceeded):
        checks_batch(rows, ChecksParams(), _CTX)


def test_a_refused_keys_points_as_an_earlier_ragscore_stored_them_name_no_meta_eval_call_a_point_never_made() -> None:
    """:func:`refused_points` on a result whose meta_eval point the breaker's count stopped: the meta point becomes
    the refused key's error, a point depending on it skipped; one an earlier ragscore stored (its figures lack
    ``stopped_dependency``) stays stopped, not said an error of a meta_eval call it never made. Seen failing before:
    that keyword point became ``error`` with the note "meta_eval: the groq judge's key was refused …"."""
    count = "circuit breaker open after 1 consecutive failed judge calls (last: groq HTTP 500)"
    refused = "the groq judge's key was refused (groq HTTP 401: Invalid API Key): check GROQ_API_KEY"
    load_all()  # the meta_eval point's validator
    points = [{"id": "meta", "type": "meta_eval"}, {"id": "after", **PASS, "depends_on": "meta"}]
    stopped = Outcome.not_run(f"meta_eval not scored: {count}", {"stopped": count})
    stored = summarize_points(evaluate_points(parse_points(points), Row(id="x", answer=ANSWER), ANSWER,
                                              {"meta": stopped}))  # fmt: skip
    assert stored.details["stopped"] and by_id(stored)["after"]["figures"]["stopped_dependency"] == "meta"
    now = refused_points(as_stored(stored), {count: refused})
    assert now is not None and now.error == f"point meta: meta_eval: {refused}", now
    assert [(p["status"], p["note"]) for p in now.details["points"]] == [
        ("error", f"meta_eval: {refused}"), ("skipped", "skipped: depends on meta error")]  # fmt: skip
    del by_id(stored)["after"]["figures"]["stopped_dependency"]  # as an earlier ragscore stored it
    earlier = refused_points(as_stored(stored), {count: refused})
    assert earlier is not None and earlier.error == f"point meta: meta_eval: {refused}", earlier
    assert [p["status"] for p in earlier.details["points"]] == ["error", "not_run"], earlier
    assert refused_points(as_stored(stored), {"another reason": refused}) is None
