"""compare_answers: where several systems answered one question, wins per system by ``checks`` score."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import evaluate
from ragscore_workers.aggregate import Aggregator, summarize
from ragscore_workers.schemas import ItemResult, MetricResult


def _item(qid: str, system: str | None, score: float | None, error: str | None = None) -> ItemResult:
    result = MetricResult(score=score, error=error) if score is not None or error else MetricResult.unscorable("x")
    return ItemResult(id=qid, system=system, metrics={"checks": result, "other": MetricResult(score=1.0)})


def test_the_maximum_wins_and_ties_are_reported_and_shared() -> None:
    items = [
        _item("q1", "a", 0.5), _item("q1", "b", 1.0), _item("q1", "c", 0.0),  # b outright
        _item("q2", "a", 0.8), _item("q2", "b", 0.8), _item("q2", "c", 0.2),  # a and b tie: half a win each
        _item("q3", "c", 1.0), _item("q3", "a", None), _item("q3", "b", None, error="boom"),  # one scored: no contest
        _item("q4", "b", 0.1), _item("q4", "c", 0.3),  # c outright; a did not answer
        _item("q5", None, 1.0),  # no system: no contest
    ]  # fmt: skip
    wins = summarize("r", items).wins
    assert wins["metric"] == "checks" and wins["questions"] == 3 and wins["ties"] == 1
    assert wins["by_system"] == {
        "a": {"compared": 2, "wins": 0.5, "outright": 0, "tied": 1, "win_rate": 0.25},
        "b": {"compared": 3, "wins": 1.5, "outright": 1, "tied": 1, "win_rate": 0.5},
        "c": {"compared": 3, "wins": 1, "outright": 1, "tied": 0, "win_rate": 1 / 3},
    }
    assert sum(s["wins"] for s in wins["by_system"].values()) == wins["questions"]


def test_a_tie_shares_its_win_whatever_the_input_order() -> None:
    """The first system in input order took every tied question's win: listing b before a moved a's win rate from
    1.0 to 0.5 and b's from 0.5 to 1.0 on the same scores."""
    scores = {"q1": {"a": 1.0, "b": 1.0}, "q2": {"a": 1.0, "b": 0.0}}
    forward = [_item(q, s, v) for q, by in scores.items() for s, v in by.items()]
    backward = [_item(q, s, v) for q, by in scores.items() for s, v in reversed(by.items())]
    for items in (forward, backward):
        by_system = summarize("r", items).wins["by_system"]
        assert (by_system["a"]["wins"], by_system["a"]["win_rate"]) == (1.5, 0.75)
        assert (by_system["b"]["wins"], by_system["b"]["win_rate"]) == (0.5, 0.25)


def test_no_wins_without_two_scored_systems_on_a_question() -> None:
    assert summarize("r", [_item("q1", "a", 1.0), _item("q2", "b", 0.0)]).wins == {}
    agg = Aggregator()
    agg.add_raw({"id": "q1", "system": "a"}, {"exact_match": {"score": 1.0}})
    agg.add_raw({"id": "q1", "system": "b"}, {"exact_match": {"score": 0.0}})
    assert agg.summary("r").wins == {}  # only checks scores compete


def test_the_item_a_first_error_names_is_cut_as_the_error_is() -> None:
    agg = Aggregator()
    long_id = "q" * 5000
    agg.add_raw({"id": long_id, "system": "s" * 5000}, {"exact_match": {"error": "boom"}})
    agg.add_raw({"id": "q2"}, {"exact_match": {"error": "later"}})
    named = agg.summary("r").metrics["exact_match"].first_error_item
    assert named is not None and named.startswith("q" * 200) and len(named) < 700, len(named or "")
    assert " (system sss" in named and named.endswith("…)")


POINTS = [
    {"id": "capital", "type": "keyword", "params": {"keywords": ["Paris"]}, "weight": 3},
    {"id": "river", "type": "keyword", "params": {"keywords": ["Seine"]}, "weight": 1},
]
ANSWERS = {  # question -> system -> answer; by construction: q1 won by full, q2 tied full/partial
    "q1": {"full": "Paris, on the Seine.", "partial": "Paris.", "none": "Lyon."},
    "q2": {"full": "Paris", "partial": "It is Paris.", "none": "No idea."},
}


@pytest.mark.integration
def test_wins_come_out_of_an_embedded_run(tmp_path: Path, home: Path) -> None:
    rows = [
        {"id": qid, "system": system, "answer": answer, "checks": POINTS}
        for qid, answers in ANSWERS.items()
        for system, answer in answers.items()
    ]
    result = evaluate(rows, {"metrics": ["checks"]}, out=tmp_path)
    wins = result.summary.wins
    assert wins["questions"] == 2 and wins["ties"] == 1
    assert {s: v["wins"] for s, v in wins["by_system"].items()} == {"full": 1.5, "partial": 0.5, "none": 0}
    assert wins["by_system"]["partial"]["tied"] == 1 and wins["by_system"]["full"]["outright"] == 1
    assert json.loads((result.out_dir / "summary.json").read_text())["wins"] == wins


def test_report_md_writes_wins_in_full_however_many() -> None:
    """report.md wrote wins with 4 significant digits: 12,346.5 wins read 1.235e+04. A third of a win stays short
    (six three-way ties are 2 wins, not 1.9999999999999998)."""
    from orchestrator.reports.markdown import render_markdown

    items = [_item(f"q{i}", s, float(s == "a")) for i in range(12_345) for s in "ab"]
    items += [_item(f"t{i}", s, 1.0) for i in range(3) for s in "ab"]
    items += [_item(f"u{i}", s, 1.0) for i in range(6) for s in "cde"]
    text = render_markdown(summarize("r", items))
    assert "| a | 12,348 | 12,346.5 | 12,345 | 3 | 1.000 |" in text
    assert "| b | 12,348 | 1.5 | 0 | 3 | 0.000 |" in text
    assert "| c | 6 | 2 | 0 | 6 | 0.333 |" in text


def test_shared_wins_sum_exactly() -> None:
    """Thirds summed as floats: six three-way ties gave each system 1.9999999999999998 wins in summary.json, and the
    systems' wins no longer summed to the questions."""
    wins = summarize("r", [_item(f"q{i}", s, 1.0) for i in range(6) for s in "abc"]).wins
    assert [s["wins"] for s in wins["by_system"].values()] == [2.0, 2.0, 2.0]
    assert sum(s["wins"] for s in wins["by_system"].values()) == wins["questions"]
