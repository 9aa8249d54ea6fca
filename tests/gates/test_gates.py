"""Gates as pure functions: parsing, names checked against the suite, verdicts and margins, the table."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.gates import (
    GatePlan,
    GateResult,
    check_gate_names,
    evaluate_gates,
    failed,
    gate_cells,
    given_gate,
    load_baseline,
    parse_gate,
    print_gates,
    read_gate_record,
    render_gates,
    thresholds_by_metric,
    write_gate_record,
)
from orchestrator.suite import load_suite
from ragscore_workers.aggregate import summarize
from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import GateSpec, ItemResult, MetricResult, RunSummary

OUTPUTS = ["exact_match", "recall_at_1", "recall_at_5", "mrr"]


def _summary(scores: dict[str, list[float | None]], run_id: str = "r1") -> RunSummary:
    """A summary aggregated by the real Aggregator from per-item scores (None = unscorable)."""
    n = max(len(v) for v in scores.values())
    items = [
        ItemResult(
            id=f"q{i}",
            metrics={
                m: MetricResult(score=v[i]) if v[i] is not None else MetricResult.unscorable("no input")
                for m, v in scores.items()
                if i < len(v)
            },
        )
        for i in range(n)
    ]
    return summarize(run_id, items)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("exact_match=0.8", GateSpec(metric="exact_match", min=0.8)),
        ("mrr:ci_low=0.5", GateSpec(metric="mrr", min=0.5, on="ci_low")),
        ("mrr:mean=.5", GateSpec(metric="mrr", min=0.5)),
        (" recall_at_5 = 1 ", GateSpec(metric="recall_at_5", min=1.0)),
        ("rubric_judge_raw=3.5", GateSpec(metric="rubric_judge_raw", min=3.5)),
        ("exact_match@bm25-llm=0.8", GateSpec(metric="exact_match", min=0.8, system="bm25-llm")),
        ("mrr @ my system :ci_low=0.5", GateSpec(metric="mrr", min=0.5, on="ci_low", system="my system")),
    ],
)
def test_parse_gate_accepts_mean_and_ci_low_forms(text: str, expected: GateSpec) -> None:
    assert parse_gate(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("exact_match", "not METRIC=VALUE, METRIC:ci_low=VALUE or METRIC@SYSTEM=VALUE"),
        ("exact_match>=0.8", "not METRIC=VALUE"),
        ("=0.8", "not METRIC=VALUE"),
        ("exact_match=high", "'high' is not a number"),
        ("exact_match=nan", "finite number"),
        ("exact_match:ci_high=0.8", "'mean' or 'ci_low'"),
        ("exact_match@=0.8", "or METRIC@SYSTEM=VALUE"),
        ("exact_match@ =0.8", "or METRIC@SYSTEM=VALUE"),  # a blank system is none (it was the system ' ')
        ("exact_match@v1:rag=0.8", "'mean' or 'ci_low'"),  # a system holding ":" takes the mapping form
    ],
)
def test_parse_gate_rejects_malformed_text(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_gate(text)


def test_str_of_a_gate_parses_back_to_it() -> None:
    for text in ("exact_match=0.8", "mrr:ci_low=0.25", "mrr@bm25 llm:ci_low=0.25"):
        assert str(parse_gate(text)) == text
        assert parse_gate(str(parse_gate(text))) == parse_gate(text)


def test_suite_gates_section_takes_text_and_mappings_and_is_validated() -> None:
    resolved = load_suite(
        {
            "metrics": ["exact_match"],
            "gates": ["exact_match=0.5", {"metric": "exact_match", "min": 0.4, "on": "ci_low"}],
        }
    )
    assert resolved.suite.gates == [
        GateSpec(metric="exact_match", min=0.5),
        GateSpec(metric="exact_match", min=0.4, on="ci_low"),
    ]
    assert load_suite({"metrics": ["exact_match"]}).suite.gates == []
    with pytest.raises(ConfigError, match=r"gates item 1: "):
        load_suite({"metrics": ["exact_match"], "gates": ["exact_match"]})
    with pytest.raises(ConfigError, match=r"gates item 1 \(exact_match\)\.threshold: Extra inputs"):
        load_suite({"metrics": ["exact_match"], "gates": [{"metric": "exact_match", "threshold": 1}]})


def _written(*texts: str) -> list[tuple[str, GateSpec]]:
    """Gates given as text (``--fail-under``), named as written."""
    return [given_gate(text, parse_gate(text)) for text in texts]


def test_a_suite_gate_is_named_by_its_place_in_the_suite_not_by_a_text_nobody_wrote() -> None:
    """A gate written as a mapping was said as ``Gate 'mrr=0.9'``, a string its user never wrote (and cannot grep
    for); a --fail-under gate is said as its text."""
    suite = {"metrics": ["exact_match"], "gates": ["exact_match=0.5", {"metric": "mrr", "min": 0.9}]}
    with pytest.raises(ConfigError) as info:
        load_suite(suite)
    said = str(info.value)
    assert said.startswith("gates item 2 (mrr) names 'mrr', which the suite does not produce."), said
    with pytest.raises(ConfigError) as info:
        GatePlan.build([GateSpec(metric="exact_match", min=80)], ["exact_match"], fail_under=["mrr=0.9"])
    lines = str(info.value).splitlines()
    assert lines[1].startswith("  gates item 1 (exact_match): exact_match scores are in [0, 1]"), info.value
    assert lines[2].startswith("  Gate 'mrr=0.9' names 'mrr'"), info.value


def test_gate_on_unknown_output_suggests_the_close_one() -> None:
    with pytest.raises(
        ConfigError, match=r"Did you mean 'recall_at_5'.*\? The suite's outputs: exact_match, recall_at_1"
    ):
        check_gate_names(_written("recall_at5=0.5"), OUTPUTS)
    with pytest.raises(ConfigError, match=r"does not produce\. The suite's outputs"):
        check_gate_names(_written("zzz=0.5"), OUTPUTS)
    check_gate_names(_written("mrr:ci_low=0.1"), OUTPUTS)


def test_every_bad_gate_of_the_command_line_is_said_as_the_gates_not_the_suites() -> None:
    """Gates given on the command line (``--fail-under``, assert_scores' ``gates``) are said together, headed as the
    gates' problems: "Invalid suite" named a suite that had none."""
    with pytest.raises(ConfigError) as info:
        check_gate_names(_written("recall_at5=0.5", "mrr=80"), OUTPUTS)
    lines = str(info.value).splitlines()
    assert lines[0] == "Invalid gates: 2 problems:", info.value
    assert lines[1].startswith("  Gate 'recall_at5=0.5' names 'recall_at5'") and lines[2].startswith("  Gate 'mrr=80'")


def test_a_threshold_above_1_is_refused_except_on_raw_scales() -> None:
    with pytest.raises(ConfigError, match=r"mrr scores are in \[0, 1\].*a percentage\? mrr=0\.8"):
        check_gate_names(_written("mrr=80"), OUTPUTS)
    check_gate_names(_written("rubric_judge_raw=3.5"), ["rubric_judge", "rubric_judge_raw"])  # 1-5


def test_mean_gates_hold_at_the_threshold_and_report_the_margin() -> None:
    summary = _summary({"exact_match": [1.0, 1.0, 0.0, 1.0], "mrr": [0.5, 1.0, None, 0.0]})
    em, mrr = summary.metrics["exact_match"].mean, summary.metrics["mrr"].mean
    assert em is not None and mrr is not None
    results = evaluate_gates(summary, [GateSpec(metric="exact_match", min=em), GateSpec(metric="mrr", min=mrr + 0.1)])
    assert [r.passed for r in results] == [True, False]
    assert results[0].margin == 0.0
    assert results[1].actual == mrr and results[1].margin == pytest.approx(-0.1)
    assert failed(results) == [results[1]]


def test_float_rounding_of_a_mean_does_not_flip_a_gate() -> None:
    summary = _summary({"mrr": [0.1, 0.7]})
    mean = summary.metrics["mrr"].mean
    assert mean is not None and mean < 0.4  # 0.39999999999999997
    assert [r.passed for r in evaluate_gates(summary, [parse_gate("mrr=0.4"), parse_gate("mrr=0.400001")])] == [
        True,
        False,
    ]


def test_ci_low_gate_reads_the_lower_bound_not_the_mean() -> None:
    summary = _summary({"exact_match": [1.0, 0.0] * 10})
    stats = summary.metrics["exact_match"]
    assert stats.ci95 is not None and stats.mean is not None and stats.ci95[0] < stats.mean
    between = (stats.ci95[0] + stats.mean) / 2
    mean_gate, low_gate = evaluate_gates(
        summary, [GateSpec(metric="exact_match", min=between), GateSpec(metric="exact_match", min=between, on="ci_low")]
    )
    assert mean_gate.passed and not low_gate.passed
    assert low_gate.actual == stats.ci95[0] and low_gate.kind == "ci_low"
    assert low_gate.label == f"exact_match:ci_low={between:g}"


def test_a_metric_with_no_scored_item_fails_its_gates() -> None:
    summary = _summary({"exact_match": [None, None], "mrr": [1.0, 1.0]})
    (result,) = evaluate_gates(summary, [GateSpec(metric="exact_match", min=0.0)])
    assert not result.passed and result.actual is None and result.margin is None
    assert "no scored item" in render_gates([result])


def test_regression_gate_per_shared_output_with_tolerance() -> None:
    baseline = _summary({"exact_match": [1.0, 1.0, 1.0, 0.0], "mrr": [1.0, 0.5, 0.5, 0.5], "old": [1.0]}, "base")
    current = _summary({"exact_match": [1.0, 1.0, 0.0, 0.0], "mrr": [1.0, 1.0, 0.5, 0.5], "new": [0.0]}, "cur")
    drop = baseline.metrics["exact_match"].mean - current.metrics["exact_match"].mean  # type: ignore[operator]
    strict = evaluate_gates(current, [], baseline)
    assert [(r.metric, r.kind, r.passed) for r in strict] == [
        ("exact_match", "regression", False),
        ("mrr", "regression", True),
    ]
    assert strict[0].margin == pytest.approx(-drop) and strict[0].baseline == baseline.metrics["exact_match"].mean
    assert all(r.passed for r in evaluate_gates(current, [], baseline, tolerance=drop))
    assert not evaluate_gates(current, [], baseline, tolerance=drop - 0.01)[0].passed


def test_gates_json_reads_back_every_kind_of_gate_result_as_written(tmp_path: Path) -> None:
    baseline = _summary({"exact_match": [1.0, 1.0, 1.0, 0.0], "mrr": [1.0, 0.5]}, "base")
    current = _summary({"exact_match": [1.0, 0.0, 0.0, None], "mrr": [1.0, 1.0]}, "cur")
    gates = [parse_gate("mrr:ci_low=0.2"), parse_gate("exact_match@sys=0.5"), parse_gate("mrr=0.5")]
    results = evaluate_gates(current, gates, baseline, tolerance=0.05)
    write_gate_record(tmp_path, "cur", results)
    back = read_gate_record(tmp_path)
    assert back is not None and sorted(back, key=results.index) == results  # failed first in the file
    assert [r.passed for r in back] == sorted(r.passed for r in results)
    entries = {g["gate"]: g for g in json.loads((tmp_path / "gates.json").read_text())["gates"]}
    regression = entries["exact_match:regression"]
    assert regression["baseline_run"] == "base" and regression["baseline"] == 0.75, regression
    assert regression["tolerance"] == 0.05 and regression["result"] == "fail"


def test_a_gates_json_that_is_no_gates_file_is_warned_of_naming_it_and_read_as_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A corrupt gates.json made every report written from its DIR fail (ConfigError): it is said once, with what is
    wrong, that the Gates section is left out and how to check the gates again, and read as no gates."""
    assert read_gate_record(tmp_path) is None
    (tmp_path / "gates.json").write_text('{"gates": [{"metric": "mrr"}]}')
    with caplog.at_level("WARNING", logger="orchestrator"):
        assert read_gate_record(tmp_path) is None
    [said] = [r.getMessage() for r in caplog.records]
    assert re.search(r"gates\.json is not a ragscore gates file \(a gate has no '(actual|kind)'\)", said), said
    assert "leave out the Gates section" in said and f"`ragscore resume {tmp_path}`" in said


def test_a_regression_gate_whose_threshold_no_score_can_miss_says_it_cannot_fail() -> None:
    """A baseline mean of 0 (or a tolerance over the mean) puts a regression gate's threshold below 0: it holds
    whatever the run scores, and its row said nothing of it."""
    baseline = _summary({"exact_match": [0.0, 0.0], "mrr": [1.0, 0.5]}, "base")
    current = _summary({"exact_match": [0.0, 0.0], "mrr": [1.0, 0.0]}, "cur")
    zero, mrr = evaluate_gates(current, [], baseline, tolerance=0.1)
    assert zero.threshold < 0 and zero.passed and zero.cannot_fail == "threshold below 0: cannot fail"
    assert "threshold below 0: cannot fail" in gate_cells(zero)[1]
    assert mrr.cannot_fail is None and "cannot fail" not in gate_cells(mrr)[1]
    over = evaluate_gates(current, [], baseline, tolerance=0.9)[1]  # mrr: 0.75 - 0.9
    assert over.cannot_fail == "threshold below 0: cannot fail"
    assert "threshold below 0: cannot fail" in render_gates([zero, mrr])
    unscored = _summary({"exact_match": [None, None], "mrr": [1.0, 0.0]}, "cur")
    failed = evaluate_gates(unscored, [], baseline, tolerance=0.1)[0]  # no value: it fails, and its row says so alone
    assert failed.threshold < 0 and not failed.passed and failed.cannot_fail is None
    assert "cannot fail" not in gate_cells(failed)[1]


def _two_systems() -> RunSummary:
    """System a: exact_match 1, 1, 0 (mean 2/3), mrr 1; system b: exact_match 0, 0 (mean 0), mrr 0.5."""
    scores = {("a", "q1"): 1.0, ("a", "q2"): 1.0, ("a", "q3"): 0.0, ("b", "q1"): 0.0, ("b", "q2"): 0.0}
    items = [
        ItemResult(id=qid, system=system, metrics={"exact_match": MetricResult(score=score),
                                                   "mrr": MetricResult(score=1.0 if system == "a" else 0.5)})
        for (system, qid), score in scores.items()
    ]  # fmt: skip
    return summarize("r2", items)


def test_a_gate_on_one_system_reads_that_systems_items_alone() -> None:
    summary = _two_systems()
    pooled, on_a, on_b, low_b = evaluate_gates(
        summary,
        [parse_gate("exact_match=0.4"), parse_gate("exact_match@a=0.6"), parse_gate("exact_match@b=0.4"),
         GateSpec(metric="mrr", min=0.4, on="ci_low", system="b")],
    )  # fmt: skip
    assert pooled.passed and pooled.actual == pytest.approx(2 / 5) and pooled.n == 5
    assert on_a.passed and on_a.actual == pytest.approx(2 / 3) and on_a.n == 3 and on_a.label == "exact_match@a=0.6"
    assert not on_b.passed and on_b.actual == 0.0 and on_b.n == 2 and on_b.margin == pytest.approx(-0.4)
    assert low_b.passed and low_b.actual == 0.5 and low_b.label == "mrr@b:ci_low=0.4"  # all of b's mrr are 0.5
    assert "exact_match@b=0.4" in render_gates([on_b])


def test_a_gate_naming_a_system_the_run_lacks_fails_and_the_note_says_which_systems_there_are() -> None:
    summary = _two_systems()
    results = evaluate_gates(summary, [parse_gate("exact_match@A=0.1"), parse_gate("mrr@c=0.1")])
    assert [r.passed for r in results] == [False, False] and all(r.n == 0 for r in results)
    notes = GatePlan([], None).notes(summary, results, ["exact_match", "mrr"])
    assert notes == ["gates name 'A' (did you mean 'a'?); 'c', which this run has no items of: its systems are a, b"]
    one_system = _summary({"exact_match": [1.0]})
    lone = evaluate_gates(one_system, [parse_gate("exact_match@a=0.1")])
    assert GatePlan([], None).notes(one_system, lone, ["exact_match"]) == [
        "gates name 'a', which this run has no items of: its rows name no system"
    ]


def test_a_system_with_its_own_gate_is_not_named_under_the_pooled_one() -> None:
    summary = _two_systems()
    pooled = evaluate_gates(summary, [parse_gate("exact_match=0.4")])
    (note,) = GatePlan([], None).notes(summary, pooled, ["exact_match"])
    assert "on its own, b exact_match 0.000 would miss its gate" in note
    both = evaluate_gates(summary, [parse_gate("exact_match=0.4"), parse_gate("exact_match@b=0.0")])
    assert GatePlan([], None).notes(summary, both, ["exact_match"]) == []


def test_thresholds_by_metric_is_the_strictest_gate() -> None:
    summary = _summary({"exact_match": [1.0, 0.0], "mrr": [1.0, 1.0]})
    results = evaluate_gates(
        summary, [parse_gate("exact_match=0.2"), parse_gate("exact_match:ci_low=0.4"), parse_gate("mrr=0.1")]
    )
    assert thresholds_by_metric(results) == {"exact_match": 0.4, "mrr": 0.1}
    on_systems = evaluate_gates(
        _two_systems(), [parse_gate("exact_match=0.2"), parse_gate("exact_match@a=0.7"), parse_gate("mrr@b=0.3")]
    )
    assert thresholds_by_metric(on_systems) == {"exact_match": 0.2}  # an item of no gated system
    assert thresholds_by_metric(on_systems, "a") == {"exact_match": 0.7}
    assert thresholds_by_metric(on_systems, "b") == {"exact_match": 0.2, "mrr": 0.3}


def test_table_lists_failed_gates_first_with_by_how_much() -> None:
    summary = _summary({"exact_match": [1.0, 0.0, 1.0, 1.0]})
    text = render_gates(evaluate_gates(summary, [parse_gate("exact_match=0.5"), parse_gate("exact_match=0.9")]))
    assert "1 of 2 gates failed" in text
    lines = [line for line in text.splitlines() if "exact_match=" in line]
    assert "exact_match=0.9" in lines[0] and "FAIL" in lines[0] and "-0.150" in lines[0]
    assert "exact_match=0.5" in lines[1] and "pass" in lines[1] and "+0.250" in lines[1]


def test_the_gates_title_counts_them_with_their_noun() -> None:
    """The title said "gates: all 1 hold" of a single gate, and "gates: 1 of 1 failed" (no noun after the counts)."""
    summary = _summary({"exact_match": [1.0, 0.0, 1.0, 1.0]})

    def title(*gates: str) -> str:
        return render_gates(evaluate_gates(summary, [parse_gate(gate) for gate in gates])).splitlines()[0].strip()

    assert title("exact_match=0.5") == "1 gate holds"
    assert title("exact_match=0.5", "exact_match=0.6") == "all 2 gates hold"
    assert title("exact_match=0.9") == "1 of 1 gate failed"
    assert title("exact_match=0.5", "exact_match=0.9") == "1 of 2 gates failed"
    quiet = io.StringIO()
    print_gates(evaluate_gates(summary, [parse_gate("exact_match=0.5")]), Console(file=quiet), only_failed=True)
    assert quiet.getvalue() == "1 gate holds\n"


def test_plan_refuses_bad_combinations_before_any_run(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    with pytest.raises(ConfigError, match="summary.json not found"):
        GatePlan.build([], OUTPUTS, baseline_dir=base)
    (base / "summary.json").write_text("{not json")
    with pytest.raises(ConfigError, match="is not a ragscore summary"):
        load_baseline(base)
    (base / "summary.json").write_text(_summary({"other": [1.0]}, "b").model_dump_json())
    with pytest.raises(ConfigError, match="scored none of this suite's outputs"):
        GatePlan.build([], OUTPUTS, baseline_dir=base)
    with pytest.raises(ConfigError, match="needs --fail-on-regression"):
        GatePlan.build([], OUTPUTS, fail_under=["mrr=0.1"], tolerance=0.1)
    with pytest.raises(ConfigError, match="--junit reports on gates"):
        GatePlan.build([], OUTPUTS, junit=tmp_path / "j.xml")
    assert GatePlan.build([], OUTPUTS) is None
    plan = GatePlan.build([parse_gate("mrr=0.1")], OUTPUTS, fail_under=["exact_match:ci_low=0.2"])
    assert plan is not None and [str(g) for g in plan.gates] == ["mrr=0.1", "exact_match:ci_low=0.2"]
    (base / "summary.json").write_text(json.dumps(_summary({"mrr": [1.0]}, "b").model_dump()))
    with pytest.raises(ConfigError, match="must be a finite number >= 0"):
        GatePlan.build([], OUTPUTS, baseline_dir=base, tolerance=-0.1)
    assert GatePlan.build([], OUTPUTS, baseline_dir=base, tolerance=0.05).tolerance == 0.05  # type: ignore[union-attr]


def test_gates_on_an_output_where_lower_is_better_read_the_other_way() -> None:
    hallucinating = _summary({"answer_hallucination": [1.0, 1.0, 1.0, 1.0]})
    faithful = _summary({"answer_hallucination": [0.0, 0.0, 0.25, 0.0]})
    gate = [GateSpec(metric="answer_hallucination", min=0.2)]
    assert not evaluate_gates(hallucinating, gate)[0].passed  # mean 1.0 > 0.2
    result = evaluate_gates(faithful, gate)[0]
    assert result.passed and result.margin == pytest.approx(0.2 - 0.0625) and result.comparison == "<="
    # ci_low reads the pessimistic end: the upper bound of the interval must be <= the bar
    ci = evaluate_gates(faithful, [GateSpec(metric="answer_hallucination", min=0.1, on="ci_low")])[0]
    assert ci.actual == faithful.metrics["answer_hallucination"].ci95[1] and ci.bound == "ci95 upper bound"
    # a regression is a rise: 0.0625 -> 1.0 fails, 1.0 -> 0.0625 holds
    rose = evaluate_gates(hallucinating, baseline=faithful)[0]
    assert not rose.passed and rose.threshold == pytest.approx(0.0625) and rose.margin < 0
    fell = evaluate_gates(faithful, baseline=hallucinating, tolerance=0.1)[0]
    assert fell.passed and fell.threshold == pytest.approx(1.1)
    assert "lower is better" in render_gates([rose])
    assert thresholds_by_metric([*evaluate_gates(faithful, gate), ci]) == {"answer_hallucination": 0.1}


def test_the_table_says_how_many_items_a_gate_read_and_shows_a_near_miss_apart_from_its_threshold() -> None:
    summary = _summary({"exact_match": [1.0] + [None] * 49, "rouge_l": [0.7996, 0.7996]})
    results = evaluate_gates(summary, [parse_gate("exact_match:ci_low=0.1"), parse_gate("rouge_l=0.8")])
    assert [(r.n, r.unscored) for r in results] == [(1, 49), (2, 0)]
    lines = render_gates(results).splitlines()
    near = next(line for line in lines if "rouge_l=0.8" in line)
    assert "FAIL" in near and "0.8000" in near and "0.7996" in near and "-0.0004" in near
    one_of_fifty = next(line for line in lines if "exact_match:ci_low" in line)
    assert "1 of 50" in one_of_fifty and "FAIL" in one_of_fifty and "no interval from 1 scored item" in one_of_fifty
    single = _summary({"rouge_l": [0.9]})
    (no_interval,) = evaluate_gates(single, [parse_gate("rouge_l:ci_low=0.5")])
    assert not no_interval.passed and "no interval from 1 scored item" in render_gates([no_interval])


def test_a_baseline_output_without_a_mean_is_said_to_get_no_regression_gate() -> None:
    """It was dropped silently: the user believed exact_match was guarded against a regression."""
    from orchestrator.gates import baseline_note

    base = _summary({"exact_match": [None, None], "mrr": [1.0, 0.5]}, run_id="base")
    now = _summary({"exact_match": [1.0, 0.0], "mrr": [1.0, 0.5]})
    assert baseline_note(now, base, ["exact_match", "mrr"]) == (
        "no regression gate for exact_match (the baseline has no mean for it)"
    )
    assert baseline_note(now, now, ["exact_match", "mrr"]) is None
    fewer = _summary({"exact_match": [1.0], "mrr": [1.0]})
    assert "the baseline base holds 2 items, this run 1 item: its means are over other questions" in (
        baseline_note(fewer, base, ["mrr"]) or ""
    )


def test_a_baseline_of_another_system_on_the_same_questions_is_not_said_to_be_over_other_questions() -> None:
    """``run dense.jsonl --fail-on-regression runs/bm25`` (the same 3,000 questions, answered by the other system)
    was told "its means are over other questions": the questions are the same, the system is not."""
    from orchestrator.gates import baseline_note

    def of(system: str, scores: list[float]) -> RunSummary:
        items = [ItemResult(id=f"q{i}", system=system, metrics={"mrr": MetricResult(score=s)})
                 for i, s in enumerate(scores)]  # fmt: skip
        return summarize(system, items)

    note = baseline_note(of("dense", [1.0, 0.5]), of("bm25", [0.5, 0.5]), ["mrr"]) or ""
    assert "the baseline bm25 holds 2 items of bm25, this run 2 items of dense: its means are of other systems" in note
    assert "other questions" not in note
    fewer = baseline_note(of("dense", [1.0]), of("bm25", [0.5, 0.5]), ["mrr"]) or ""
    assert fewer.endswith("its means are of other systems, over other questions"), fewer


def test_gate_systems_are_read_from_targets_and_from_the_rows_a_target_without_a_system_keeps(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A target with no ``system`` leaves each row's own system on its items: a gate on a row's system was refused
    as absent (the systems taken were the target's name, ``target``)."""
    from orchestrator.cli import _check_gate_systems
    from orchestrator.gates import GatePlan
    from orchestrator.suite import load_suite

    from ..support import write_jsonl

    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "q1", "question": "Q?", "system": "bm25"}])
    unnamed = load_suite({"metrics": ["exact_match"], "target": {"url": "http://127.0.0.1:9/ask"}})
    named = load_suite({"metrics": ["exact_match"], "targets": [{"system": "rag-v1", "url": "http://127.0.0.1:9/ask"}]})

    def check(resolved, gate: str) -> None:  # type: ignore[no-untyped-def]
        plan = GatePlan.build([], resolved.outputs(), fail_under=[gate])
        _check_gate_systems(plan, resolved, data, None, {})

    check(unnamed, "exact_match@bm25=0.5")  # the row's system: its items carry it
    check(named, "exact_match@rag-v1=0.5")  # the target's
    with pytest.raises(ConfigError, match=r"gates name 'target', which this run has no items of: its systems are bm25"):
        check(unnamed, "exact_match@target=0.5")
    with pytest.raises(ConfigError, match=r"gates name 'bm25', which this run has no items of: its systems are rag-v1"):
        check(named, "exact_match@bm25=0.5")


def test_print_gates_not_on_a_terminal_widens_past_a_narrow_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CI log (stderr no terminal) whose environment exports a narrow COLUMNS: the table is as wide as it needs, as
    before ff18cae (which kept COLUMNS and cut the gate's name to ``answer_rel…``)."""
    from orchestrator.gates import GateResult, print_gates

    monkeypatch.setenv("COLUMNS", "70")
    name = "answer_relevancy_with_a_long_custom_name_for_the_gate"
    print_gates([GateResult(metric=name, kind="mean", threshold=0.75, actual=0.7123, passed=False, n=50)])
    err = capsys.readouterr().err
    assert f"{name}=0.75" in err and "…" not in err, err


def test_a_cancelled_run_of_one_item_says_its_count_as_one_item() -> None:
    """It said "0 of 1 items scored": the count is written by :func:`counted_of`, as every "N of M" count."""
    from orchestrator.gates import incomplete

    said = incomplete(RunSummary(run_id="r1", state="cancelled", items=2, scored=1))
    assert said == "run r1 was cancelled: 1 of 2 items scored", said
    # Nothing scored read "0 of 1 item scored ... the reports cover those only": said plainly.
    said = incomplete(RunSummary(run_id="r1", state="cancelled", items=1, scored=0))
    assert said == "run r1 was cancelled before any item was scored (1 item unscored)", said


def test_a_metric_unscorable_everywhere_names_its_reason_and_says_no_question_mark_without_one() -> None:
    """A metric output that scored no item is a run error naming its most common reason; a summary that kept no
    reason (one written before reasons were counted) said "most often: ?"."""
    from orchestrator.gates import incomplete

    summary = _summary({"exact_match": [None, None, None], "recall_at_1": [1.0, None, 0.0]})
    said = incomplete(summary) or ""
    assert said.startswith("no scores for exact_match: every item was unscorable (exact_match: 3 items, most often: "
                           "no input; items.jsonl says why for each)"), said  # fmt: skip
    summary.metrics["exact_match"].unscorable_reasons = None
    said = incomplete(summary) or ""
    assert said.startswith("no scores for exact_match: every item was unscorable (exact_match: 3 items; "), said
    assert "?" not in said, said


def test_an_output_no_item_of_which_has_contexts_is_no_run_error_where_another_scored() -> None:
    """An LLM alone scored with a suite of context metrics (the Auto-Analyst example's): every item of those is
    unscorable (``no contexts``), which the run exited 1 for, as a misnamed column. It does not apply to the system
    (said before the run): no run error while another output scored; a run that scored nothing is still one."""
    from orchestrator.gates import incomplete

    def summary(reasons: dict[str, list[str | None]]) -> RunSummary:
        items = [ItemResult(id=f"q{i}", metrics={m: MetricResult(score=0.5) if r[i] is None else
                                                 MetricResult.unscorable(r[i]) for m, r in reasons.items()})
                 for i in range(2)]  # fmt: skip
        return summarize("r1", items)

    no_contexts = ["no contexts", "no contexts"]
    assert incomplete(summary({"context_relevance": no_contexts, "exact_match": [None, None]})) is None
    no_ids = ["no retrieved_doc_ids"] * 2  # recall of a target that returns no contexts nor ids: by design too
    assert incomplete(summary({"mrr": no_ids, "exact_match": [None, None]})) is None
    no_evidence = ["no evidence_sentences"] * 2  # citation of an LLM alone's rows, and combined through it: by design
    assert (
        incomplete(summary({"citation_f1": no_evidence, "combined": no_evidence, "exact_match": [None, None]})) is None
    )
    lacking = ["no evidence_sentences (predicted sentence IDs)"] * 2  # a RAG row's, not marked: still a run error
    said = incomplete(summary({"citation_f1": lacking, "exact_match": [None, None]})) or ""
    assert said.startswith("no scores for citation_f1: every item was unscorable"), said
    said = incomplete(summary({"citation_f1": [no_evidence[0], lacking[0]], "exact_match": [None, None]})) or ""
    assert said.startswith("no scores for citation_f1: every item was unscorable"), said
    said = incomplete(summary({"context_relevance": no_contexts})) or ""
    assert said.startswith("no scores for context_relevance: every item was unscorable"), said
    mixed = {"context_relevance": ["no contexts", "no question"], "exact_match": [None, None]}
    assert (incomplete(summary(mixed)) or "").startswith("no scores for context_relevance"), mixed


def test_the_gates_section_escapes_gate_text_and_system_names_in_report_md_and_html() -> None:
    """A system name from the dataset is shown as written: no HTML runs in report.html, no Markdown in report.md."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats
    from orchestrator.reports.markdown import render_markdown

    summary = _summary({"exact_match": [1.0, 0.0]})
    system = "<script>alert(1)</script>|*x*"
    results = [GateResult("exact_match", "mean", 0.9, 0.5, False, n=2, system=system)]
    html = render_html(summary, ItemStats(), gates=results)
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;|*x*" in html
    md = render_markdown(summary, gates=results)
    (row,) = [line for line in md.splitlines() if line.startswith("| exact_match@")]
    assert row.startswith(r"| exact_match@\<script\>alert(1)\</script\>\|\*x\*=0.9 | mean |"), row
    assert "**1 of 1 gate failed**" in md
