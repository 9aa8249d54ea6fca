"""The statistics of ``ragscore compare`` on cases small enough to check by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.reports.compare import EXACT_MAX, paired_ci, permutation_p, wins


def test_exact_permutation_p_of_three_equal_gains_is_two_of_eight() -> None:
    # Sign vectors of (1, 1, 1): only +++ and --- reach |sum| >= 3.
    assert permutation_p([1.0, 1.0, 1.0]) == 0.25


def test_exact_permutation_p_counts_every_sign_vector_at_least_as_extreme() -> None:
    # (1, 1, 1, 1, -1): sum 3; |2k - 5| >= 3 for k positives in {0, 1, 4, 5}: (1 + 5 + 5 + 1) / 32.
    assert permutation_p([1, 1, 1, 1, -1]) == 12 / 32
    # (0.5, -0.2, 0.3): sums of the 8 sign vectors are ±1.0, ±0.6, ±0.4, 0, 0; |sum| >= 0.6 for 4 of them.
    assert permutation_p([0.5, -0.2, 0.3]) == 0.5
    # Zero differences carry no sign: (0, 0, 1, 1, 1) is the first case.
    assert permutation_p([0, 0, 1, 1, 1]) == 0.25
    assert permutation_p([0.0, 0.0]) == 1.0


def test_sampled_permutation_p_matches_the_exact_sign_test() -> None:
    # 20 gains and 5 losses of 1 (25 > EXACT_MAX non-zero differences): the sign-flip test is the two-sided
    # sign test, P(|2K - 25| >= 15) with K ~ Binomial(25, 1/2).
    diffs = [1.0] * 20 + [-1.0] * 5 + [0.0] * 75
    assert 25 > EXACT_MAX
    exact = sum(math.comb(25, k) for k in range(26) if abs(2 * k - 25) >= 15) / 2**25
    # = 2 * (C(25,0) + C(25,1) + ... + C(25,5)) / 2^25 = 2 * (1 + 25 + 300 + 2300 + 12650 + 53130) / 2^25
    assert exact == 2 * 68406 / 2**25
    p = permutation_p(diffs)
    assert p == pytest.approx(exact, abs=0.002)
    assert permutation_p(diffs) == p  # seeded: the same every time


def test_continuous_differences_use_per_question_flips_and_agree_with_the_normal_limit() -> None:
    rng = np.random.default_rng(1)
    d = rng.normal(0.1, 1.0, size=400)  # >64 distinct levels: per-question flips
    z = abs(d.sum()) / math.sqrt(float((d * d).sum()))
    assert permutation_p(d) == pytest.approx(math.erfc(z / math.sqrt(2)), abs=0.02)


def test_no_difference_gives_no_evidence_and_the_ci_is_a_point() -> None:
    assert permutation_p([0.25] * 3 + [-0.25] * 3) == 1.0
    assert paired_ci([0.2, 0.2, 0.2]) == [0.2, 0.2]
    assert paired_ci([]) is None


def test_paired_ci_holds_the_mean_difference() -> None:
    d = [1.0] * 20 + [-1.0] * 5 + [0.0] * 75
    lo, hi = paired_ci(d)
    assert lo < 0.15 < hi and lo > 0  # the difference is 0.15 and clearly above 0


@pytest.mark.parametrize("d", [[1.0] * 20 + [-1.0] * 5 + [0.0] * 75, [0.5, -0.25, 1.0, 0.0, 0.75] * 9,
                               [1.0, -1.0, 0.5, -0.5, 0.25]])  # fmt: skip
def test_swapping_the_baseline_mirrors_the_paired_interval_exactly(d: list[float]) -> None:
    """The multinomial draw over the sorted distinct differences did not mirror: [+0.048, +0.558] one way,
    [-0.553, -0.028] the other, so whether a borderline difference was coloured hung on which was the baseline."""
    lo, hi = paired_ci(d)
    assert paired_ci([-x for x in d]) == [-hi, -lo]


def test_wins_give_each_question_to_the_best_system_and_count_ties() -> None:
    nan = float("nan")
    scores = np.array([
        [1.0, 0.0, 0.5],  # A wins
        [0.2, 0.9, 0.9],  # B and C tie
        [0.0, 0.0, 1.0],  # C wins
        [nan, 1.0, nan],  # one system only: not a contest
        [0.3, nan, 0.1],  # A wins (B has no score)
    ])  # fmt: skip
    assert wins(scores) == ([2, 0, 1], 1, 4)
    # lower is better: the smallest score wins
    assert wins(scores, higher_better=False) == ([1, 1, 1], 1, 4)


def test_the_points_legend_explains_every_mark_a_cell_can_hold() -> None:
    """A point whose validator failed is marked "!": the legend of compare.md and compare.html says so."""
    from orchestrator.reports.compare import Comparison, _mark
    from orchestrator.reports.compare_view import render_compare_html, render_compare_markdown

    cells = [_mark({"status": s}) for s in ("passed", "failed", "skipped", "error", "not_run")]
    points = [{"id": "q1", "rows": [{"point": "p", "cells": cells}], "scores": ["1.000"] * 5}]
    c = Comparison(arms=list("ABCDE"), metrics=[], means={}, counts={}, differences=[], wins=[], points=points)
    html = " ".join(render_compare_html(c).split())
    md = render_compare_markdown(c)
    for mark in {cell["mark"] for cell in cells}:
        legend = {"✓": "✓ passed", "✗": "✗ failed", "–": "– skipped", "!": "! error", "·": "· not run"}[mark]
        assert legend in md and legend in html


def test_the_html_colours_a_difference_only_when_interval_and_p_both_say_it_is_no_chance() -> None:
    """Three questions all one better: the paired bootstrap interval is the point [1, 1], excluding 0, while the
    permutation p is 0.25; compare.html coloured the difference as significant from the interval alone."""
    from orchestrator.reports.compare import Comparison, Difference
    from orchestrator.reports.compare_view import render_compare_html

    gains = np.ones(3)
    few = Difference("exact_match", "B", 3, 0.0, 1.0, 1.0, paired_ci(gains), permutation_p(gains), 3, 0, 0)
    assert few.ci95 == [1.0, 1.0] and few.p == pytest.approx(0.25)
    many = np.ones(10)
    sure = Difference("mrr", "B", 10, 0.0, 1.0, 1.0, paired_ci(many), permutation_p(many), 10, 0, 0)
    assert sure.p is not None and sure.p < 0.05
    means = {m: {"A": 0.0, "B": 1.0} for m in ("exact_match", "mrr")}
    counts = {"exact_match": {"A": 3, "B": 3}, "mrr": {"A": 10, "B": 10}}
    c = Comparison(arms=["A", "B"], metrics=["exact_match", "mrr"], means=means, counts=counts,
                   differences=[few, sure], wins=[], points=[])  # fmt: skip
    cells = [" ".join(row.split()) for row in render_compare_html(c).split("<tr>") if "+1.000" in row]
    assert len(cells) == 2
    assert 'class="">+1.000' in cells[0] and 'class="good">+1.000' in cells[1]


def test_a_verdict_follows_the_interval_not_the_p_or_the_sign_of_the_mean_difference() -> None:
    """The verdict every compare report writes: better or worse only when the 95% CI excludes 0 (and p < 0.05), in
    the metric's direction; a difference with p < 0.05 whose interval holds 0 is no clear difference."""
    from orchestrator.reports.compare import Difference, verdict

    def diff(metric: str, n: int, mean: float, ci95: list[float], p: float) -> Difference:
        return Difference(metric, "B", n, 0.5, 0.5 + mean, mean, ci95, p, 0, 0, 0)

    assert verdict(diff("exact_match", 100, 0.03, [0.012, 0.048], 0.001)) == "better"
    assert verdict(diff("exact_match", 100, -0.03, [-0.048, -0.012], 0.001)) == "worse"
    assert verdict(diff("exact_match", 100, 0.01, [-0.001, 0.02], 0.01)) == "no clear difference"  # p alone: 'better'
    assert verdict(diff("exact_match", 100, 0.01, [0.001, 0.02], 0.2)) == "no clear difference"
    assert verdict(diff("answer_hallucination", 100, -0.03, [-0.048, -0.012], 0.001)) == "better"  # lower is better
    assert verdict(diff("exact_match", 5, 1.0, [1.0, 1.0], 0.0625)) == "too few pairs"


def test_scores_apart_by_float_noise_tie_for_the_win() -> None:
    # 0.5 and 0.5 - 1.2e-7: one cosine of fp32 embeddings batched otherwise; 0.5 and 0.4 a real win.
    assert wins(np.array([[0.5, 0.5 - 1.2e-7], [0.5, 0.4], [0.3, 0.3 + 1.2e-7]])) == ([1, 0], 2, 3)
    # The tolerance is absolute, not relative: counts and latencies one unit apart are never tied, however large.
    assert wins(np.array([[2_000_000.0, 2_000_001.0], [1234.5, 1234.501]]), higher_better=False) == ([2, 0], 0, 2)


def test_a_pair_keeps_its_wins_row_where_only_a_system_compared_with_nothing_lacks_the_metric() -> None:
    """``unscored`` names a system compared with nothing whose suite lacks an output (its cell of the means says so):
    the wins row of a pair that both scored it, none contested, is still shown, as its difference is."""
    from orchestrator.reports.compare import Comparison
    from orchestrator.reports.compare_view import render_compare_markdown

    pair = ("before:x", "after:x")
    c = Comparison(arms=[*pair, "after:z"], metrics=["m"], means={"m": {"before:x": 0.5, "after:x": 0.6,
                   "after:z": None}}, counts={"m": {"before:x": 2, "after:x": 2, "after:z": 0}}, differences=[],
                   wins=[{"metric": "m", "wins": dict.fromkeys(pair, 0), "ties": 0, "questions": 0, "pair": pair}],
                   by_system="system", alone=["after:z"], bases={"after:x": "before:x"},
                   unscored={"m": ["after:z"]})  # fmt: skip
    wins = render_compare_markdown(c).split("## Wins per pair")[1]
    assert "| m | before:x → after:x | 0 | 0 | 0 | 0 |" in wins, wins
