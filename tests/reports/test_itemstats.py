"""Streaming statistics behind report.html: exact while small, bounded memory however many items."""

from __future__ import annotations

import random

import pytest

from orchestrator.reports.itemstats import ItemStats, ValueCounts
from orchestrator.reports.markdown import tied_text
from ragscore_workers.store import RawItem


def _item(i: int, **scores: float | None) -> RawItem:
    metrics = {name: {"score": s, "passed": None, "details": {"i": i}, "error": None, "ms": 0.0}
               for name, s in scores.items()}  # fmt: skip
    return RawItem(key=f"q{i}", meta={"id": f"q{i}", "system": None, "group": None}, metrics=metrics)


def test_few_distinct_values_are_counted_exactly() -> None:
    counts = ValueCounts()
    for v in [0.0, 1.0, 1.0, 0.5, 1.0]:
        counts.add(v)
    assert counts.histogram() == ([0.0, 0.5, 1.0], [1, 1, 3])
    assert counts.exact


def test_many_distinct_values_are_coarsened_within_the_bound_and_keep_the_total() -> None:
    rng = random.Random(3)
    counts = ValueCounts(max_distinct=100)
    values = [rng.random() for _ in range(20_000)]
    for v in values:
        counts.add(v)
    assert len(counts.counts) <= 100 and counts.total == 20_000 and not counts.exact
    labels, bins = counts.histogram(bins=10, lo=0.0, hi=1.0)
    assert sum(bins) == 20_000
    exact = [sum(1 for v in values if lo <= v < hi) for lo, hi in labels]
    # the grid (spacing <= 2/100 of the range, doubled at most a few times) moves a value across a 0.1-wide bin
    # edge only when it lies within half a spacing of the edge
    assert counts.step <= 0.1
    assert all(abs(a - b) <= 20_000 * counts.step for a, b in zip(bins, exact, strict=True))


def test_a_value_on_a_bin_edge_is_counted_in_the_bin_it_opens() -> None:
    counts = ValueCounts()
    for v in [i / 20 for i in range(21)] + [0.3, 0.3, 0.6]:  # 21 distinct values: binned; 0.3 and 0.6 are edges
        counts.add(v)
    labels, bins = counts.histogram(bins=20, lo=0.0, hi=1.0)
    by_bin = {(round(a, 2), round(b, 2)): c for (a, b), c in zip(labels, bins, strict=True)}
    assert by_bin[(0.3, 0.35)] == 3 and by_bin[(0.25, 0.3)] == 1 and by_bin[(0.6, 0.65)] == 2
    assert by_bin[(0.95, 1.0)] == 2 and sum(bins) == 24  # the maximum closes the last bin


def test_worst_items_are_the_lowest_scores_earliest_first_among_equals() -> None:
    rng = random.Random(5)
    scores = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(500)]
    stats = ItemStats(worst_k=7)
    for i, s in enumerate(scores):
        stats.add(_item(i, accuracy=s))
    expected = sorted(range(500), key=lambda i: (scores[i], i))[:7]
    assert [w.id for w in stats.worst("accuracy")] == [f"q{i}" for i in expected]


def test_lower_is_better_outputs_rank_the_highest_scores_as_worst() -> None:
    stats = ItemStats(worst_k=2)
    for i, s in enumerate([0.1, 0.9, 0.0, 0.95]):
        stats.add(_item(i, answer_hallucination=s))
    assert [w.score for w in stats.worst("answer_hallucination")] == [0.95, 0.9]


def test_unscorable_and_errors_are_not_scores() -> None:
    stats = ItemStats()
    stats.add(_item(0, accuracy=None))
    bad = _item(1, accuracy=None)
    bad.metrics["accuracy"]["error"] = "timeout"
    stats.add(bad)
    stats.add(_item(2, accuracy=0.5))
    assert stats.values["accuracy"].total == 1
    assert [w.id for w in stats.worst("accuracy")] == ["q2"]
    assert stats.error_examples == [{"id": "q1", "system": None, "output": "accuracy", "error": "timeout"}]


@pytest.mark.parametrize("n", [200_000])
def test_memory_stays_bounded_over_many_items(n: int) -> None:
    stats = ItemStats(worst_k=10, max_errors=5)
    rng = random.Random(1)
    for i in range(n):
        item = _item(i, cont=rng.random(), binary=float(i % 2))
        if i % 1000 == 0:
            item.metrics["binary"]["error"] = "boom"
        stats.add(item)
    assert len(stats.values["cont"].counts) <= 2048 and len(stats.values["binary"].counts) == 2
    assert len(stats.worst("cont")) == 10 and len(stats.error_examples) == 5
    assert stats.values["cont"].total == n


def test_items_at_the_worst_score_are_counted_however_few_are_kept() -> None:
    stats = ItemStats(worst_k=2)
    for i, s in enumerate([0.5, 0.9, 0.2, 0.9, 0.9, 0.1]):
        stats.add(_item(i, answer_hallucination=s, accuracy=s))
    assert stats.tied_worst("answer_hallucination") == 3  # lower is better: 0.9 is its worst score
    assert stats.tied_worst("accuracy") == 1 and stats.tied_worst("absent") == 0


@pytest.mark.parametrize(
    ("scores", "beyond"),
    [([0.5, 0.5, 0.5, 0.5], 2), ([0.5, 0.5, 0.5, 0.2, 0.5], 3), ([0.5, 0.5, 0.5, 0.2, 0.1], 0),
     ([0.5, 0.2, 0.2, 0.5, 0.2], 1), ([0.5, 0.9, 0.2], 0)],
    ids=["all_tied", "worse_one_in", "cutoff_moves", "cutoff_tie_out", "too_few"],
)  # fmt: skip
def test_items_left_out_at_the_lists_cut_off_score_are_counted(scores: list[float], beyond: int) -> None:
    """The two kept worst items end at a score more items share; those left out are counted exactly as the kept
    items change (a worse item pushes the latest one at the cut-off out, or moves the cut-off past the rest)."""
    stats = ItemStats(worst_k=2)
    for i, s in enumerate(scores):
        stats.add(_item(i, accuracy=s))
    assert stats.beyond_cutoff("accuracy") == beyond
    kept = stats.worst("accuracy")[-1].score
    assert beyond == sum(s == kept for s in scores) - sum(w.score == kept for w in stats.worst("accuracy"))


@pytest.mark.parametrize("name", ["accuracy", "answer_hallucination"])  # higher, lower is better
def test_the_count_beyond_the_cut_off_is_exact_for_any_order_of_scores(name: str) -> None:
    """Against a count over every score, for streams of few distinct scores in random order (ties throughout, a
    cut-off that moves many times): the kept items are the ``k`` worst, earliest first among ties, and ``beyond`` is
    every other item at the last kept score, whichever way the output's scores run."""
    rng = random.Random(7)
    for _ in range(300):
        k = rng.randint(1, 5)
        scores = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0][: rng.randint(1, 5)]) for _ in range(rng.randint(0, 40))]
        stats = ItemStats(worst_k=k)
        for i, s in enumerate(scores):
            stats.add(_item(i, **{name: s}))
        worse_first = sorted(range(len(scores)), key=lambda i: (scores[i] if name == "accuracy" else -scores[i], i))
        kept = worse_first[:k]
        assert [w.id for w in stats.worst(name)] == [f"q{i}" for i in kept], (k, scores)
        cut = scores[kept[-1]] if kept else None
        assert stats.beyond_cutoff(name) == sum(s == cut for s in scores) - sum(scores[i] == cut for i in kept)


@pytest.mark.parametrize(
    ("zeros", "share"), [(3, "(<0.1%)"), (15_000, "(50.0%)"), (29_999, "(>99.9%)")], ids=["few", "half", "all_but_one"]
)
def test_the_share_at_the_worst_score_never_reads_none_or_all_where_it_is_neither(zeros: int, share: str) -> None:
    """3 of 30,000 wrote ``(0.0%)``, 29,999 of 30,000 ``(100.0%)``."""
    stats = ItemStats(worst_k=2)
    for i in range(30_000):
        stats.add(_item(i, exact_match=0.0 if i < zeros else 1.0))
    [(name, items, _)] = stats.shown_worst(["exact_match"])
    assert tied_text(stats, name, items) == (
        f"{zeros:,} of 30,000 scored items {share} have the worst score, 0.000; the 2 listed are the first of them."
    )
