"""The JUnit file: one case per gate, and asked for, per item x gated metric; read back with xml.etree."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from orchestrator.gates import evaluate_gates, parse_gate
from orchestrator.junit import classify, write_junit
from ragscore_workers.aggregate import summarize
from ragscore_workers.schemas import ItemResult, MetricResult

ITEMS = [
    ItemResult(id="q1", system="a", metrics={"exact_match": MetricResult(score=1.0), "mrr": MetricResult(score=0.5)}),
    ItemResult(id="q1", system="b", metrics={"exact_match": MetricResult(score=0.0), "mrr": MetricResult(score=1.0)}),
    ItemResult(
        id="q2",
        system="a",
        metrics={"exact_match": MetricResult.unscorable("no reference"), "mrr": MetricResult.failed("boom\x00 <&>")},
    ),
    ItemResult(id="q2", system="b", metrics={"mrr": MetricResult(score=0.2, details={"rank": 5, "note": "\x07bell"})}),
]


def _write_items(path: Path) -> Path:
    path.write_text("".join(item.model_dump_json() + "\n" for item in ITEMS), encoding="utf-8")
    return path


def _cases(root: ET.Element, suite: str) -> dict[tuple[str, str], ET.Element]:
    (node,) = [s for s in root.iter("testsuite") if s.get("name") == suite]
    return {(c.get("classname", ""), c.get("name", "")): c for c in node.iter("testcase")}


def _status(case: ET.Element) -> str:
    children = [child.tag for child in case]
    return children[0] if children else "passed"


def test_junit_has_a_case_per_gate_and_per_item_and_gated_metric(tmp_path: Path) -> None:
    items = _write_items(tmp_path / "items.jsonl")
    summary = summarize("r1", ITEMS)
    gates = evaluate_gates(
        summary, [parse_gate("exact_match=0.5"), parse_gate("mrr=0.4"), parse_gate("mrr:ci_low=0.3")]
    )
    counts = write_junit(tmp_path / "out" / "junit.xml", items, gates, "ragscore demo r1", items=True)

    root = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    assert root.tag == "testsuites" and root.get("name") == "ragscore demo r1"
    gate_cases = _cases(root, "ragscore.gates")
    assert {name for _, name in gate_cases} == {"exact_match=0.5", "mrr=0.4", "mrr:ci_low=0.3"}
    for result in gates:
        case = gate_cases[("ragscore.gates", result.label)]
        assert _status(case) == ("passed" if result.passed else "failure")

    cases = _cases(root, "ragscore.items")
    assert len(cases) == len(ITEMS) * 2  # two gated metric outputs
    # mrr's bar is its strictest gate (0.4): 0.5 and 1.0 pass, 0.2 fails, the raised one is an error.
    assert _status(cases[("ragscore.mrr", "a::q1")]) == "passed"
    assert _status(cases[("ragscore.mrr", "b::q1")]) == "passed"
    failure = cases[("ragscore.mrr", "b::q2")].find("failure")
    assert failure is not None and failure.get("message") == "score 0.2 < 0.4"
    assert '"rank": 5' in (failure.text or "") and "\x07" not in (failure.text or "")
    error = cases[("ragscore.mrr", "a::q2")].find("error")
    assert error is not None and "boom" in (error.get("message") or "") and "<&>" in (error.get("message") or "")
    # exact_match: 1.0 passes, 0.0 fails, unscorable and missing are skipped (never counted as 0).
    assert _status(cases[("ragscore.exact_match", "a::q1")]) == "passed"
    assert _status(cases[("ragscore.exact_match", "b::q1")]) == "failure"
    skipped = cases[("ragscore.exact_match", "a::q2")].find("skipped")
    assert skipped is not None and skipped.get("message") == "unscorable: no reference"
    assert _status(cases[("ragscore.exact_match", "b::q2")]) == "skipped"

    node = next(s for s in root.iter("testsuite") if s.get("name") == "ragscore.items")
    statuses = [_status(c) for c in cases.values()]
    assert int(node.get("tests", "")) == len(statuses) == sum(counts.values())
    assert int(node.get("failures", "")) == statuses.count("failure") == counts["failure"] == 2
    assert int(node.get("errors", "")) == statuses.count("error") == 1
    assert int(node.get("skipped", "")) == statuses.count("skipped") == 2
    assert int(root.get("tests", "")) == len(statuses) + len(gates)
    assert int(root.get("failures", "")) == statuses.count("failure") + sum(not g.passed for g in gates)
    assert list(tmp_path.joinpath("out").iterdir()) == [tmp_path / "out" / "junit.xml"]  # no temp file left


def test_without_items_the_file_holds_the_gates_alone_and_fails_only_where_a_gate_does(tmp_path: Path) -> None:
    """Item cases below a holding gate's bar were failures: a CI reporter showed them on a job that exits 0."""
    items = _write_items(tmp_path / "items.jsonl")
    gates = evaluate_gates(summarize("r1", ITEMS), [parse_gate("exact_match=0.3"), parse_gate("mrr=0.9")])
    assert [g.passed for g in gates] == [True, False]  # b::q1 scores exact_match 0, b::q2 mrr 0.2: below both bars
    counts = write_junit(tmp_path / "junit.xml", items, gates)
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert [s.get("name") for s in root] == ["ragscore.gates"] and not counts
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "1", "0")
    assert {name: _status(case) for (_, name), case in _cases(root, "ragscore.gates").items()} == {
        "exact_match=0.3": "passed",
        "mrr=0.9": "failure",
    }
    assert set(tmp_path.iterdir()) == {items, tmp_path / "junit.xml"}  # no temp file left


def test_a_gate_on_one_system_sets_the_bar_of_that_systems_items_only(tmp_path: Path) -> None:
    items = _write_items(tmp_path / "items.jsonl")
    gates = evaluate_gates(
        summarize("r1", ITEMS), [parse_gate("mrr@b=0.6"), parse_gate("mrr=0.1"), parse_gate("exact_match@a=0.5")]
    )
    write_junit(tmp_path / "junit.xml", items, gates, items=True)
    cases = _cases(ET.parse(tmp_path / "junit.xml").getroot(), "ragscore.items")
    # mrr: b's items take b's bar (0.6), a's the pooled one (0.1); exact_match is gated for a's items alone.
    assert {key: _status(case) for key, case in cases.items()} == {
        ("ragscore.mrr", "a::q1"): "passed",
        ("ragscore.mrr", "b::q1"): "passed",
        ("ragscore.mrr", "a::q2"): "error",
        ("ragscore.mrr", "b::q2"): "failure",
        ("ragscore.exact_match", "a::q1"): "passed",
        ("ragscore.exact_match", "a::q2"): "skipped",
    }
    failure = cases[("ragscore.mrr", "b::q2")].find("failure")
    assert failure is not None and failure.get("message") == "score 0.2 < 0.6"


def test_classify_orders_error_before_unscorable_and_threshold() -> None:
    assert classify(None, 0.5) == ("skipped", "not scored by this metric")
    assert classify({"score": None, "error": "x"}, 0.5) == ("error", "x")
    assert classify({"score": None, "details": {}}, 0.5) == ("skipped", "unscorable: no reason given")
    # a null reason read "unscorable: None"; items.csv's unscorable column says it as this does (one function)
    assert classify({"score": None, "details": {"reason": None}}, 0.5) == ("skipped", "unscorable: no reason given")
    assert classify({"score": 0.5}, 0.5)[0] == "passed"
    assert classify({"score": 0.49}, 0.5)[0] == "failure"
    # where lower is better (answer_hallucination) an item above the bar fails
    assert classify({"score": 0.49}, 0.5, lower_better=True)[0] == "passed"
    assert classify({"score": 0.51}, 0.5, lower_better=True) == ("failure", "score 0.51 > 0.5 (lower is better)")


def test_a_failure_message_tells_a_value_just_below_the_bar_apart_from_it(tmp_path: Path) -> None:
    """Four significant digits read ``score 0.8 < 0.8`` (and the gate ``mean 0.8 < 0.8``) for 0.79999."""
    assert classify({"score": 0.79999}, 0.8) == ("failure", "score 0.79999 < 0.8")
    assert classify({"score": 0.8}, 0.8) == ("passed", "score 0.8 >= 0.8")
    assert classify({"score": 0.123456}, 0.5) == ("failure", "score 0.1235 < 0.5")  # 4 digits where they suffice
    items = [ItemResult(id=f"q{i}", system=None, metrics={"exact_match": MetricResult(score=s)})
             for i, s in enumerate([0.79996, 0.79996])]  # fmt: skip
    gates = evaluate_gates(summarize("run", items), [parse_gate("exact_match=0.8")])
    write_junit(tmp_path / "junit.xml", _write_items(tmp_path / "items.jsonl"), gates, items=True)
    (message,) = [f.get("message") for f in ET.parse(tmp_path / "junit.xml").iter("failure") if "0.79996" in
                  (f.get("message") or "")]  # fmt: skip
    assert "0.79996 < 0.8" in message, message
