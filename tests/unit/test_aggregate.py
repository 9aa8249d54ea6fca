"""Aggregate math: hand-checked means, unscorable never averaged as 0, a known bootstrap case."""

from __future__ import annotations

import numpy as np
import pytest

from ragscore_workers.aggregate import FIRST_ERROR_CHARS, bootstrap_ci, mean_ci, summarize, wilson_ci
from ragscore_workers.providers.errors import MissingKeyError
from ragscore_workers.schemas import ItemResult, MetricResult


def _item(i: str, group: str | None = None, **scores: float | None) -> ItemResult:
    return ItemResult(id=i, group=group, metrics={k: MetricResult(score=v) for k, v in scores.items()})


def test_means_counts_and_breakdowns_by_hand() -> None:
    items = [
        _item("1", "a", m=1.0, r=0.5),
        _item("2", "a", m=0.0, r=None),
        _item("3", "b", m=0.5, r=0.25),
        ItemResult(id="4", group="b", metrics={"m": MetricResult.failed("boom"), "r": MetricResult(score=0.0)}),
    ]
    s = summarize("run", items)
    assert s.items == 4 and s.scored == 4
    assert s.metrics["m"].mean == pytest.approx(0.5) and s.metrics["m"].n == 3 and s.metrics["m"].errors == 1
    # r: (0.5 + 0.25 + 0.0) / 3; the unscorable item is not a zero
    assert s.metrics["r"].mean == pytest.approx(0.25) and s.metrics["r"].n == 3
    assert s.metrics["r"].unscorable == 1
    assert s.by_group["a"]["m"].mean == pytest.approx(0.5) and s.by_group["a"]["r"].n == 1
    assert s.by_group["b"]["m"].n == 1 and s.by_group["b"]["m"].errors == 1


def test_spellings_of_one_question_type_are_one_group_and_other_types_stay_as_written() -> None:
    """typed_answer reads "Yes/No", "yes/no" and "YES_NO" as one type, and the Socioscope reader writes it so; a
    JSONL or CSV row's own spelling made a group each (three groups of n=1)."""
    items = [ItemResult(id=str(i), question_type=qt, metrics={"m": MetricResult(score=float(i % 2))})
             for i, qt in enumerate(["Yes/No", "yes/no", "YES_NO", "pick one", "multi-hop", "Multi-hop"])]  # fmt: skip
    s = summarize("run", items)
    assert s.by_question_type.keys() == {"Yes/No", "PickOne", "multi-hop", "Multi-hop"}
    assert s.by_question_type["Yes/No"]["m"].n == 3 and s.by_question_type["Yes/No"]["m"].mean == pytest.approx(1 / 3)


def test_the_first_error_of_each_output_is_kept_cut_to_a_line() -> None:
    items = [
        ItemResult(id="1", metrics={"m": MetricResult(score=1.0), "r": MetricResult(score=0.5)}),
        ItemResult(id="2", metrics={"m": MetricResult.failed("ValueError: first"), "r": MetricResult(score=0.5)}),
        ItemResult(id="3", metrics={"m": MetricResult.failed("ValueError: 2nd"), "r": MetricResult.failed("x" * 5000)}),
    ]
    s = summarize("run", items)
    assert s.metrics["m"].first_error == "ValueError: first" and s.metrics["m"].errors == 2
    assert s.metrics["r"].first_error == "x" * (FIRST_ERROR_CHARS - 1) + "…"  # a cut is seen as one
    assert summarize("run", items[:1]).metrics["m"].first_error is None


def test_a_missing_judge_keys_first_error_is_kept_whole() -> None:
    """The missing-key error (how to set the key, how to choose another judge) was cut at 300 characters, mid
    sentence: the report and a gate's failure said ``(key in OPENAI_API_KEY; )``."""
    said = str(MissingKeyError("groq", "GROQ_API_KEY"))
    items = [ItemResult(id="1", metrics={"faithfulness": MetricResult.failed(said)})]
    assert summarize("run", items).metrics["faithfulness"].first_error == said


def test_why_items_were_unscorable_is_counted_most_common_first() -> None:
    """Only items.jsonl said why: summary.json had "unscorable": 20 and nothing else."""
    reasons = ["no reference"] * 5 + ["no contexts"] * 2 + [f"the judge refused: item {i}" for i in range(150)]
    items = [ItemResult(id=str(i), group="g", metrics={"m": MetricResult.unscorable(r), "k": MetricResult(score=1.0)})
             for i, r in enumerate(reasons)]  # fmt: skip
    items.append(ItemResult(id="x", metrics={"m": MetricResult(score=None)}))  # a plugin that gave no reason
    s = summarize("run", items)
    top = s.metrics["m"].unscorable_reasons
    # 100 distinct reasons are kept (2 + 98 refusals); the other 52 refusals and the reasonless item count together
    assert s.metrics["m"].unscorable == 158
    assert top == {"(other reasons)": 53, "no reference": 5, "no contexts": 2}  # the three most common
    assert s.metrics["k"].unscorable_reasons is None and s.by_group["g"]["m"].unscorable_reasons is None


def test_a_breakdown_keeps_its_first_values_and_sums_up_the_rest() -> None:
    """A group per row (group = document id) made summary.json as large as items.jsonl (68 MB at 100k rows) and
    the aggregating worker's memory grow with the rows (757 MB)."""
    from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES, OTHER_VALUES

    n = MAX_BREAKDOWN_VALUES + 500
    s = summarize("run", [_item(str(i), f"doc-{i}", m=float(i % 2)) for i in range(n)])
    assert len(s.by_group) == MAX_BREAKDOWN_VALUES + 1 and "doc-0" in s.by_group and f"doc-{n - 1}" not in s.by_group
    assert s.by_group[OTHER_VALUES]["m"].n == 500 and s.metrics["m"].n == n  # nothing is lost, only pooled
    assert OTHER_VALUES == "(beyond the first 1,000)"


def test_questions_answered_by_two_systems_are_counted_as_what_compare_can_pair() -> None:
    """Each system's answers under ids of their own (``simple-q1``, ``strong-q1``): the run's summary still
    suggested a ``ragscore compare`` that then found nothing to pair. The summary counts the ids two systems share."""

    def answer(i: str, system: str | None) -> ItemResult:
        return ItemResult(id=i, system=system, metrics={"m": MetricResult(score=1.0)})

    shared = [answer(q, s) for q in ("q1", "q2", "q3") for s in ("bm25", "dense", "hybrid")] + [answer("q4", "bm25")]
    assert summarize("run", shared).paired_questions == 3
    apart = [answer(f"{s}-{q}", s) for q in ("q1", "q2") for s in ("bm25", "dense")]
    assert summarize("run", apart).paired_questions == 0
    no_system = [answer("q1", None), answer("q2", None)]
    assert summarize("run", no_system).paired_questions == 0
    assert summarize("run", []).paired_questions == 0


def test_each_system_counts_the_systems_that_share_a_question_id_with_it() -> None:
    """What compare pairs with each system as the baseline: bm25 (ids of its own) none, dense and hybrid each other;
    four systems that answered every question, the three others each."""

    def answer(i: str, system: str) -> ItemResult:
        return ItemResult(id=i, system=system, metrics={"m": MetricResult(score=1.0)})

    items = [answer("b1", "bm25"), answer("q1", "dense"), answer("q1", "hybrid"), answer("q2", "hybrid")]
    assert summarize("run", items).paired_systems == {"bm25": 0, "dense": 1, "hybrid": 1}
    every = [answer(q, s) for q in ("q1", "q2", "q3") for s in ("a", "b", "c", "d")]
    assert summarize("run", every).paired_systems == dict.fromkeys("abcd", 3)
    assert summarize("run", []).paired_systems == {}


def test_systems_past_the_breakdowns_first_ones_are_not_kept_for_pairing() -> None:
    """A system per row kept a dict entry per row (every row's system name) until the summary, which the breakdown's
    cap exists to avoid: only its first systems are numbered, and each counts the others of them it pairs with (the
    table's systems, of which the console says how many). A system seen twice under one id pairs with no one."""
    from array import array

    from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES, OTHER_VALUES, Aggregator, pairing

    agg = Aggregator()
    for q in ("q1", "q2"):
        for n in range(MAX_BREAKDOWN_VALUES + 5):
            agg.add(ItemResult(id=q, system=f"s{n}", metrics={"m": MetricResult(score=1.0)}))
    summary = agg.summary("run")
    assert len(agg.systems) == MAX_BREAKDOWN_VALUES and OTHER_VALUES in summary.by_system
    assert summary.paired_systems == {f"s{n}": MAX_BREAKDOWN_VALUES - 1 for n in range(MAX_BREAKDOWN_VALUES)}
    hashes, systems = array("q", [7, 7, 8, 8, 9]), array("H", [0, 0, 1, 2, 1])  # system 0 twice under one id hash
    assert pairing(hashes, systems, 3) == (2, [0, 1, 1])  # ids 7 and 8 answered twice
    assert pairing(hashes, systems, 2) == (2, [0, 0])  # system 2 left out (its answers of id 8 still count)


def test_null_is_never_averaged_as_zero() -> None:
    s = summarize("run", [_item("1", m=1.0), _item("2", m=None), _item("3", m=None)])
    assert s.metrics["m"].mean == 1.0 and s.metrics["m"].n == 1 and s.metrics["m"].unscorable == 2
    all_null = summarize("run", [_item("1", m=None)])
    assert all_null.metrics["m"].mean is None and all_null.metrics["m"].ci95 is None
    assert all_null.scored == 0


def test_categories_from_details_feed_by_category() -> None:
    item = ItemResult(
        id="1", metrics={"checks": MetricResult(score=0.5, details={"categories": {"Style": 1.0, "Facts": 0.0}})}
    )
    errored = ItemResult(id="2", metrics={"checks": MetricResult(
        score=None, error="point sim: no target", details={"categories": {"Style": 0.0}})})  # fmt: skip
    s = summarize("run", [item, errored])
    assert s.by_category["Style"]["checks"].mean == 1.0 and s.by_category["Facts"]["checks"].mean == 0.0
    assert s.by_category["Style"]["checks"].n == 1 and s.by_category["Style"]["checks"].errors == 1  # not a 0


def test_bootstrap_degenerate_cases() -> None:
    assert bootstrap_ci([]) is None
    assert bootstrap_ci([0.7]) is None  # one value: no interval, not [0.7, 0.7]
    assert bootstrap_ci([0.3] * 10) == [0.3, 0.3]


def test_pass_fail_outputs_get_the_wilson_interval_which_stays_honest_at_small_n_and_at_100_percent() -> None:
    # Reference values (Wilson 1927; e.g. statsmodels proportion_confint(method="wilson")).
    assert wilson_ci(3, 3) == pytest.approx([0.43850, 1.0], abs=1e-5)
    assert wilson_ci(0, 10) == pytest.approx([0.0, 0.27753], abs=1e-5)
    # the bounds at the ends are exact: summary.json said a lower bound of 6.938893903907228e-18 for 0 of 49
    assert all(wilson_ci(0, n)[0] == 0.0 and wilson_ci(n, n)[1] == 1.0 for n in range(1, 2000))  # type: ignore[index]
    assert wilson_ci(600, 1000) == pytest.approx([0.56931, 0.62993], abs=1e-5)
    assert wilson_ci(0, 0) is None
    three_right = summarize("run", [ItemResult(id=str(i), metrics={"exact_match": MetricResult(score=1.0)})
                                    for i in range(3)])  # fmt: skip
    assert three_right.metrics["exact_match"].ci95 == pytest.approx([0.43850, 1.0], abs=1e-5)
    one = summarize("run", [ItemResult(id="1", metrics={"rouge_l": MetricResult(score=0.4),
                                                        "exact_match": MetricResult(score=1.0)})])  # fmt: skip
    assert one.metrics["rouge_l"].ci95 is None and one.metrics["rouge_l"].mean == 0.4
    assert one.metrics["exact_match"].ci95 is None  # one score has no interval, pass/fail or not
    graded = np.array([0.0, 0.5, 1.0, 1.0])  # not pass/fail: the bootstrap
    assert mean_ci(graded) == bootstrap_ci(graded)


def test_bootstrap_is_reproducible_and_matches_brute_force_resampling() -> None:
    # Known case: 30 ones and 70 zeros. The bootstrap mean is Binomial(100, 0.3)/100, whose 2.5% and
    # 97.5% quantiles are 0.21 and 0.39; brute-force index resampling must agree with ours.
    values = [1.0] * 30 + [0.0] * 70
    ci = bootstrap_ci(values)
    assert ci == bootstrap_ci(values)
    assert ci == pytest.approx([0.21, 0.39], abs=0.011)
    rng = np.random.default_rng(1)
    x = np.array(values)
    brute = x[rng.integers(0, 100, size=(20_000, 100))].mean(axis=1)
    assert ci == pytest.approx(list(np.percentile(brute, [2.5, 97.5])), abs=0.011)


def test_bootstrap_continuous_values_cover_the_mean() -> None:
    x = np.random.default_rng(3).normal(0.6, 0.1, size=400).clip(0, 1)
    lo, hi = bootstrap_ci(x)
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    assert lo < x.mean() < hi
    assert (hi - lo) == pytest.approx(2 * half, rel=0.15)
    big = np.random.default_rng(4).random(50_000)
    lo, hi = bootstrap_ci(big)  # normal approximation above MAX_RESAMPLE_N
    assert lo < big.mean() < hi and hi - lo < 0.01
