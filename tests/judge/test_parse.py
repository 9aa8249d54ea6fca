"""Reading judges' replies: ratings from the first 8 tokens as whole numbers, rubric JSON, averaging."""

from __future__ import annotations

import pytest

from ragscore_workers.metrics._judge_text import (
    ANSWER_ACCURACY,
    CONTEXT_RELEVANCE,
    parse_rating,
    parse_rubric,
)
from ragscore_workers.metrics.judge_metrics import Verdict, combine

ACC = ANSWER_ACCURACY.allowed  # {0, 2, 4}
REL = CONTEXT_RELEVANCE.allowed  # {0, 1, 2}


@pytest.mark.parametrize(
    ("reply", "allowed", "rating"),
    [
        ("4", ACC, 4),
        ("2", ACC, 2),
        ("0", ACC, 0),
        (" 4\n", ACC, 4),
        ("Rating: 4", ACC, 4),
        ("**2**", ACC, 2),
        ("The rating is 0.", ACC, 0),
        ("4/4", ACC, 4),
        ("[2]", REL, 2),
        ("2]", REL, 2),
        ("The relevance score is 1 because", REL, 1),
        # Ragas's substring parse reads these wrongly; a whole-number read does not.
        ("10", REL, None),  # Ragas: 1 (first of 2, 1, 0 found as a substring)
        ("4.0", ACC, None),  # Ragas: 0 ("0" is in "4.0")
        ("2.5", REL, None),
        ("-1", REL, None),
        ("\u22121", REL, None),  # the minus sign (U+2212) makes a negative number too, not a 1
        # Superscripts and circled digits are no decimal digits: not a rating, and never a crash (int("²") raises).
        ("²", REL, None),
        ("Rating: ①", REL, None),
        ("In m², 2", REL, 2),
        ("٤", ACC, 4),  # Arabic-Indic four: a decimal digit, read as 4
        ("1" * 5000, REL, None),  # a degenerate reply: more digits than int() takes
        ("3", ACC, None),  # a number, but not on the 0/2/4 scale
        ("1", ACC, None),
        ("20 out of 40", ACC, None),
        # The first number decides; later numbers do not rescue it.
        ("3 (close to 4)", ACC, None),
        # Beyond the first 8 tokens.
        ("I think that this answer is quite good so 4", ACC, None),
        ("one two three four five six seven 2", REL, 2),
        ("one two three four five six seven eight 2", REL, None),
        ("", ACC, None),
        ("four", ACC, None),
        # A reasoning model's thinking is not its answer (digits in it were read as the rating).
        ("<think>\nStep 1: the answer names 2 facts.</think>\n0", ACC, 0),
        ("<think>\nRating 0 means wrong; this one is close to the reference, ten words on</think>\n\n4", ACC, 4),
        ("<think>\nRating 0 means wrong", ACC, None),  # cut off while thinking: no answer, not 0
        ("the user answer matches, so the rating is clearly 4 </think>\n2", ACC, 2),  # no opening tag
        ("<Thinking>1 2 0</Thinking> 1", REL, 1),
    ],
)
def test_rating_is_the_first_whole_number_in_the_first_8_tokens(
    reply: str, allowed: frozenset[int], rating: int | None
) -> None:
    assert parse_rating(reply, allowed) == rating


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ('{"score": 4, "rationale": "close"}', (4, "close")),
        ('{"score": "5", "rationale": "exact"}', (5, "exact")),
        ('{"score": 3.0}', (3, "")),
        ('{"score": "5.0", "rationale": null}', (5, "")),
        ('{"score": " 2 ", "rationale": 7}', (2, "7")),
        ('{"score": "4.5"}', None),
        ('{"score": "four"}', None),
        ('{"score": "1e0"}', None),
        ('Here is my grade: {"score": 2, "rationale": "misses the date"} Hope it helps.', (2, "misses the date")),
        ('```json\n{"score": 1, "rationale": "wrong"}\n```', (1, "wrong")),
        ('{"score": 6, "rationale": "too high"}', None),
        ('{"score": 0}', None),
        ('{"score": 3.5}', None),
        ('{"score": true}', None),
        ('{"rationale": "no score"}', None),
        ("Score: 4", None),
        ('{"score": 4, "rationale": "unclosed', None),
        ("[4]", None),
        # Nested too deep for the JSON parser (RecursionError): no score, never a crash.
        ("[" * 5000, None),
        ('{"score": 4, "rationale": ' + "[" * 5000 + "}", None),
        ("", None),
        # Thinking first: the braces of the thinking are not the answer's.
        ('<think>Maybe {"score": 1}? No, it is right.</think>\n{"score": 5, "rationale": "right"}', (5, "right")),
        ("<think>\nThe gold answer says {x}; so score 2", None),
        # A rationale that is not text is kept as the JSON it was (it read as a Python repr: {'why': 'late'}).
        ('{"score": 2, "rationale": {"why": "late", "ok": false}}', (2, '{"why": "late", "ok": false}')),
        ('{"score": 3, "rationale": ["a", "é"]}', (3, '["a", "é"]')),
        ('{"score": 3, "rationale": 7}', (3, "7")),
    ],
)
def test_rubric_reply_is_json_or_the_text_between_the_outer_braces(reply: str, parsed: tuple | None) -> None:
    assert parse_rubric(reply) == parsed


@pytest.mark.parametrize(
    ("ratings", "score"),
    [
        ((4, 4), 1.0),
        ((4, 2), 0.75),
        ((2, 0), 0.25),
        ((0, 0), 0.0),
        ((None, 2), 0.5),  # one valid: that one, whichever judge it is
        ((4, None), 1.0),
        ((None, None), None),  # none: unscorable, never 0
    ],
)
def test_dual_judges_average_valid_ratings(ratings: tuple[int | None, int | None], score: float | None) -> None:
    verdicts = [Verdict(value=r, calls=1, cached=False) for r in ratings]
    result = combine(verdicts, ANSWER_ACCURACY)
    assert result.score == score
    assert result.details["ratings"] == list(ratings)
    assert result.error is None
    if score is None:
        assert "no valid rating" in result.details["reason"]


def test_a_stopped_judge_makes_the_item_unscorable_with_the_reason() -> None:
    verdicts = [Verdict(stopped="circuit breaker open after 5 consecutive failed judge calls"), Verdict(stopped="x")]
    result = combine(verdicts, CONTEXT_RELEVANCE)
    assert result.score is None and result.error is None
    assert result.details["reason"].startswith("circuit breaker open")


def test_failed_calls_on_both_judges_are_an_error_not_a_score() -> None:
    result = combine([Verdict(error="groq HTTP 500: boom"), Verdict(error="groq HTTP 500: boom")], CONTEXT_RELEVANCE)
    assert result.score is None and result.error == "groq HTTP 500: boom"
    # One judge failing while the other rates still gives that rating.
    result = combine([Verdict(error="groq HTTP 500: boom"), Verdict(value=1, calls=1)], CONTEXT_RELEVANCE)
    assert result.score == 0.5 and result.details["judge_errors"] == ["groq HTTP 500: boom"]


def test_a_judge_its_configuration_stopped_makes_the_item_its_error_not_the_other_judges_rating_alone() -> None:
    """One judge rated (its reply cached from an earlier run), the other's key was refused: the item is the refused
    key's error (what to fix, redone by a resume), not a half score on the one rating as after a judge's own error,
    whichever judge it is."""
    refused = "the groq judge's key was refused (groq HTTP 401: Invalid API Key): check GROQ_API_KEY"
    for verdicts in (
        [Verdict(value=4, calls=1), Verdict(error=refused, misconfigured=True)],
        [Verdict(error=refused, misconfigured=True), Verdict(value=2, calls=1)],
    ):
        result = combine(verdicts, ANSWER_ACCURACY)
        assert (result.score, result.error) == (None, refused), result
        assert result.details["judge_errors"] == [refused]


def test_judge_agreement_percent_and_cohens_kappa() -> None:
    from ragscore_workers.metrics._judge_agreement import Agreement

    # The textbook example: 50 items, 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no -> 70 %, kappa 0.4.
    agreement, half = Agreement(), Agreement()
    for pair, count in {(2, 2): 20, (2, 0): 5, (0, 2): 10, (0, 0): 15}.items():
        for i in range(count):
            (agreement if i % 2 else half).add_details({"ratings": list(pair)})
    agreement.merge(half)
    agreement.add(None, 2)  # one judge without a rating: not counted
    agreement.add_details({"rule": "blank question", "ratings": [None, None]})
    assert agreement.to_json() == {"n": 50, "percent": pytest.approx(70.0), "kappa": pytest.approx(0.4)}
    same = Agreement()
    same.add(4, 4)
    assert same.to_json() == {"n": 1, "percent": 100.0, "kappa": None}
    assert Agreement().to_json() == {"n": 0, "percent": None, "kappa": None}
