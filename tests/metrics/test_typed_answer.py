"""typed_answer by question type, against hand-computed scores, including each special case."""

from __future__ import annotations

from typing import Any

import pytest

from ragscore_workers.metrics.typed_answer import TypedAnswerParams, typed_answer
from ragscore_workers.schemas import MetricResult, Row


def _score(
    qtype: str | None, expected: Any, answer: str | None, reference: str | None = None, **params: Any
) -> MetricResult:
    row = Row(id="x", question_type=qtype, expected=expected, answer=answer, reference=reference)
    return typed_answer(row, TypedAnswerParams(**params))


@pytest.mark.parametrize(
    ("expected", "answer", "score"),
    [
        ("yes", "Yes, definitely.", 1.0),
        ("Yes", "y", 1.0),
        (True, "TRUE", 1.0),
        ("no", "Nope", 1.0),
        (False, "That is not true.", 1.0),  # "not" flips the word it precedes
        ("no", "That isn't true.", 1.0),  # so do "never", "cannot" and the n't contractions
        ("no", "It is never true", 1.0),
        ("no", "It isn’t correct", 1.0),
        ("yes", "That claim? Wasn't false.", 1.0),
        ("yes", "That isn't true.", 0.0),
        ("yes", "Never say no: it is true", 0.0),  # the first yes/no word decides, negated or not
        ("no", "Yes, it did.", 0.0),
        ("yes", "It is false", 0.0),
        ("yes", "Maybe, hard to say", 0.0),  # no yes/no at all: wrong, not unscorable
        ({"yes": 0.3}, "yes", 1.0),  # weights do not apply to Yes/No
        ("no", "N", 1.0),
        ("no", "N/A", 0.0),  # a letter is a yes/no only as the whole answer
        ("yes", "It is on the Y chromosome", 0.0),
        ("yes", "N/A. Yes, it is.", 1.0),  # the first yes/no word, past the letter
        # a yes/no word asked about (right before "?", or joined to one by "or" / "and") is not said
        ("no", "Would I say yes? No, it is not.", 1.0),
        ("yes", "Would I say yes? No, it is not.", 0.0),
        ("yes", "Is it no? Yes.", 1.0),
        ("no", "Is that correct? No.", 1.0),
        ("no", "Yes or no? No.", 1.0),
        ("no", "Yes/no? No.", 1.0),  # a "/" joins as "or" does
        ("no", "Yes / no? No.", 1.0),
        ("no", "Would I say yes...? No.", 1.0),  # an ellipsis may stand before "?"
        ("no", "Would I say yes…? No.", 1.0),
        ("yes", "Is it true ? Yes", 1.0),
        ("yes", "Is it true?", 0.0),  # asked and not answered: no yes/no
        ("yes", "Yes?", 1.0),  # the whole answer: said, as a whole-answer "A?" picks A
        ("no", "**No**?", 1.0),
        ("yes", "Is it not true? Yes.", 1.0),  # the negation of the asked word flips nothing after it
        ("no", "Is it **true**? **No**.", 1.0),  # Markdown or a double quote may close the word before "?"
        ("no", 'Would I answer "yes"? No.', 1.0),
        ("no", "Would I answer “yes”? No.", 1.0),
        ("no", "No, it is not.", 1.0),
        ("yes", "Yes. Why? Because it is.", 1.0),
    ],
)
def test_yes_no(expected: Any, answer: str, score: float) -> None:
    result = _score("Yes/No", expected, answer)
    assert result.score == score and result.passed is (score == 1.0)


def test_list_one_scores_the_weight_of_the_matched_value() -> None:
    expected = {"Paris": 1.0, "Lyon": 0.5}
    assert _score("ListOne", expected, "It is Paris.").score == 1.0
    assert _score("ListOne", expected, "I'd say lyon").score == 0.5
    assert _score("PickOne", expected, "Lyon or Paris").score == 1.0  # several matched: the largest weight
    assert _score("PickOne", expected, "Marseille").score == 0.0
    miss = _score("PickOne", expected, "Marseille")
    assert miss.passed is False and miss.details["unmatched"] == ["Paris", "Lyon"]


def test_list_many_sums_matched_weights_once_each_and_caps_at_one() -> None:
    expected = [["Paris", 0.4], ["Lyon", 0.4], ["Nice", 0.4]]
    assert _score("ListMany", expected, "Paris").score == 0.4
    assert _score("ListMany", expected, "Paris, Paris; paris").score == 0.4  # counted once
    assert _score("ListMany", expected, "Paris; Lyon").score == pytest.approx(0.8)
    assert _score("PickMany", expected, "- Paris\n- Lyon\n- Nice").score == 1.0  # 1.2 capped
    assert _score("PickMany", ["a b", "c"], "a, b").score == 0.0  # "a b" must sit inside one item


def test_normalisation_before_comparison() -> None:
    assert _score("ListOne", ["São Paulo"], "  SAO   paulo!! ").score == 1.0
    assert _score("ListOne", ["U.S."], "the US").score == 1.0
    assert _score("ListOne", ["Ελληνικά"], "ελληνικα").score == 1.0  # Greek accents are accents
    # a kana voicing mark or a Thai tone mark makes another word: pig is not lid, horse is not "come"
    assert _score("ListOne", ["ふた"], "ぶた", synonyms=False).score == 0.0
    assert _score("ListOne", ["มา"], "ม้า", synonyms=False).score == 0.0
    assert _score("ListOne", ["ぶた"], "ふ\u3099た", synonyms=False).score == 1.0  # decomposed: the same word
    # invisible format characters (a soft hyphen, a zero-width space) neither split nor join words
    assert _score("ListOne", ["Paris"], "Pa\u00adris", synonyms=False).score == 1.0
    assert _score("ListOne", ["Paris"], "It is Paris\u200b.", synonyms=False).score == 1.0


def test_synonyms_carry_the_full_weight_of_their_value() -> None:
    result = _score("ListOne", {"car": 0.7, "bus": 0.2}, "An automobile.")
    assert result.score == 0.7
    assert result.details["matched"] == [{"value": "car", "weight": 0.7, "by": "synonym:automobile"}]
    assert _score("ListOne", {"car": 0.7}, "An automobile.", synonyms=False).score == 0.0


def test_one_character_and_numeric_values_get_no_synonyms() -> None:
    # WordNet has C = 100 and D = 500 (Roman numerals) and 100 = C: no option is another's synonym by that
    options = {"A": 0, "B": 0, "C": 1, "D": 0}
    assert _score("PickOne", options, "B) 100 degrees").score == 0.0
    assert _score("PickOne", "D", "About 500 people").score == 0.0
    assert _score("PickOne", "100", "Vitamin C").score == 0.0
    assert _score("PickOne", "500", "Vitamin D").score == 0.0
    assert _score("PickOne", "dozen", "12 eggs").details["matched"][0]["by"] == "synonym:12"  # a word still has
    # an option label in upper-case Roman numerals is no number either (WordNet: IV is 4); a lower-case word is
    roman = {"II": 0, "IV": 1, "VI": 0}
    assert _score("PickOne", roman, "There are 4 of them").score == 0.0
    assert _score("PickOne", roman, "IV").score == 1.0
    assert _score("PickOne", {"mix": 1}, "a blend").details["matched"][0]["by"] == "synonym:blend"


def test_synonyms_are_those_of_the_value_as_written_not_of_a_reduced_form() -> None:
    # "mars" reduced like a plural is "mar", which WordNet abbreviates March; Mars is a word of its own
    assert _score("PickOne", "Mars", "March").score == 0.0
    assert _score("PickOne", "Mars", "The Red Planet").score == 1.0
    assert _score("PickOne", "cars", "An automobile").score == 1.0  # unknown to WordNet as written: reduced


def test_a_synonym_that_is_another_expected_value_belongs_to_that_value() -> None:
    # "auto" is a WordNet synonym of "car", but also an expected value of its own: 0.5, not 0.5 + 0.5.
    assert _score("ListMany", {"car": 0.5, "auto": 0.5}, "auto").score == 0.5


def test_number_words_and_digits_match_both_ways() -> None:
    assert _score("ListOne", ["five"], "5").score == 1.0
    assert _score("ListOne", ["5"], "five").score == 1.0
    assert _score("ListOne", ["21"], "twenty one").score == 1.0
    assert _score("ListOne", ["twenty-one"], "21 of them").score == 1.0
    assert _score("ListOne", ["21"], "twenty").score == 0.0
    assert _score("ListOne", ["2000300"], "two million three hundred thousand").score == 0.0  # no wrong prefix
    assert _score("ListOne", ["two million three hundred thousand"], "Two million three hundred thousand").score == 1.0


def test_a_minus_sign_makes_another_number_a_hyphen_does_not() -> None:
    assert _score("ListOne", ["-5"], "It fell to 5 degrees").score == 0.0
    assert _score("ListOne", ["5"], "It fell to -5 degrees").score == 0.0
    assert _score("ListOne", ["-5"], "It fell to \u22125.0 degrees (-5)").score == 1.0  # Unicode minus, 5.0 = 5
    assert _score("ListOne", ["-0"], "0").score == 1.0
    assert _score("ListOne", ["19"], "COVID-19").score == 1.0  # a hyphen after a word is no sign
    assert _score("ListMany", ["5", "10"], "from 5-10").score == 1.0  # nor one between numbers


def test_a_leading_decimal_point_makes_another_number() -> None:
    assert _score("PickOne", "5", ".5 ml").score == 0.0
    assert _score("PickOne", "0.5", ".5 ml").score == 1.0
    assert _score("PickOne", "-0.5", "It fell to -.5").score == 1.0
    assert _score("PickOne", "5", "v.5 of the spec").score == 1.0  # a dot after a letter is no decimal point


def test_plus_plus_and_sharp_after_a_letter_make_another_name() -> None:
    options = ["C", "C++", "C#"]
    assert _score("PickOne", options, "C++").details["matched"] == [{"value": "C++", "weight": 1.0, "by": "value"}]
    assert _score("PickOne", options, "I'd use C#.").details["matched"][0]["value"] == "C#"
    assert _score("PickOne", "C++", "C").score == 0.0
    assert _score("PickOne", "C", "C++").score == 0.0
    assert _score("PickOne", "c++", "Written in C++, mostly").score == 1.0


def test_stopword_values_match_only_a_whole_item() -> None:
    assert _score("PickOne", ["A", "B"], "I choose a car").score == 0.0
    assert _score("PickOne", ["A", "B"], "B").score == 1.0


OPTIONS = ["A", "B", "C", "D", "E"]


@pytest.mark.parametrize(
    "answer",
    [
        "The answer is {}.",
        "{}) Paris",
        "{}. Paris",
        "{}: Paris",
        "Option {}",
        "Answer: {}",
        "({})",
        "[{}] Paris",
        "The correct answer is ({}), Paris.",
        "1. {}) Paris",
        "The answer is: {} - Paris",
        "Option {} is correct because Paris is the capital.",
        "I think the answer is {}, since Paris is the capital.",
        "My choice is {}!",
        "**Answer: {}**",
        "The answer is **{}**.",
        "**{})** Paris",
        "- **{}.** Paris",
        "I would choose {}.",
        "I pick {}: Paris is the capital.",
    ],
)
def test_option_a_written_as_a_label_scores_as_option_b_does(answer: str) -> None:
    # "a" is a stopword, so it must be a whole item; written as a label it is the option, as B is
    assert _score("PickOne", "B", answer.format("B")).score == 1.0
    result = _score("PickOne", "A", answer.format("A"))
    assert result.score == 1.0 and result.details["matched"] == [{"value": "A", "weight": 1.0, "by": "value"}]
    assert _score("PickOne", {x: float(x == "A") for x in OPTIONS}, answer.format("A")).score == 1.0
    assert _score("PickOne", "I", answer.format("I")).score == 1.0  # a Roman-numeral option I


def test_option_a_labels_in_lower_case_in_brackets_or_at_an_items_start_outside_an_enumeration() -> None:
    assert _score("PickOne", "A", "(a) Paris").score == 1.0
    assert _score("PickOne", "a", "The answer is A.").score == 1.0  # the expected value's case does not matter
    assert _score("PickOne", "A", "a) Paris").score == 1.0
    assert _score("PickOne", "A", "a) cheap\nb) fast").score == 0.0  # an enumeration's first marker is no option
    assert _score("PickOne", "A", "A:Paris").score == 0.0  # a colon label is followed by a space, as a dot one is


@pytest.mark.parametrize(
    "answer",
    [
        "I choose a car",
        "A city on the Seine.",
        "the answer is a city on the Seine",
        "Answer: A city on the Seine.",  # after a cue an article, not a label: a word follows
        "The answer is a.k.a. Paris",
        "A.I. says B",
        "B, a safe bet",
        "Paris (a city)",
    ],
)
def test_the_article_a_is_no_option_a(answer: str) -> None:
    assert _score("PickOne", {x: float(x == "A") for x in OPTIONS}, answer).score == 0.0


@pytest.mark.parametrize(
    "answer",
    [
        "I think it is B",
        "I think the answer is B.",
        "Answer: I think B",
        "The answer is I think B",
        "The best option I can see is B",
        "The only choice I'd make is B.",
        "I'm sure: B",
        "i) it is cheap; ii) it is fast, so B",
        "Option B, I believe.",
    ],
)
def test_the_pronoun_i_is_no_option_i(answer: str) -> None:
    assert _score("PickOne", {"I": 1.0, "II": 0.0, "B": 0.0}, answer).score == 0.0


def test_yes_no_with_rationale_scores_by_reference_overlap() -> None:
    reference = "Dry soil and strong wind caused it"  # content words: dry soil strong wind caused
    answer = "Yes, because the soil was dry and the wind strong."  # has soil dry wind strong: 4/5
    result = _score("Yes/No with Rationale", "yes", answer, reference)
    assert result.score == pytest.approx(0.5 + 0.5 * 4 / 5)
    assert result.details["support"] == pytest.approx(0.8) and result.details["support_basis"] == "reference"
    weighted = _score("Yes/No with Rationale", "yes", answer, reference, polarity_weight=0.2)
    assert weighted.score == pytest.approx(0.2 + 0.8 * 4 / 5)
    assert _score("Yes/No with Rationale", "no", answer, reference).score == 0.0  # wrong yes/no
    assert _score("Yes/No with Rationale", "yes", "Because of the soil.", reference).score == 0.0  # none


def test_yes_no_with_rationale_repeating_the_reference_gets_full_credit() -> None:
    # yes/no words are no content words on either side: "correct" in the reference is not a word to find
    reference = "The statement is correct because water boils at 100 degrees"
    result = _score("Yes/No with Rationale", "yes", "Yes. " + reference, reference)
    assert result.score == 1.0 and result.details["support"] == 1.0
    no = _score("Yes/No with Rationale", "no", "No, it is false: water boils at 100 degrees", "False, it boils at 100")
    assert no.score == 1.0


def test_yes_no_with_rationale_without_reference_scores_rationale_length() -> None:
    assert _score("Yes/No with Rationale", "yes", "Yes.").score == 0.5
    assert _score("Yes/No with Rationale", "yes", "Yes, drought hurt.").score == pytest.approx(0.5 + 0.5 * 2 / 3)
    assert _score("Yes/No with Rationale", "yes", "Yes, drought hurt harvests badly.").score == 1.0
    longer = _score("Yes/No with Rationale", "yes", "Yes, drought hurt.", min_rationale_words=4)
    assert longer.score == pytest.approx(0.5 + 0.5 * 2 / 4)
    # A reference with no content words gives no basis for overlap: the length rule applies.
    assert _score("Yes/No with Rationale", "yes", "Yes.", "it is so").details["support_basis"] == "length"


@pytest.mark.parametrize("missing", ["question_type", "expected", "answer"])
def test_missing_inputs_are_unscorable(missing: str) -> None:
    fields = {"qtype": "ListOne", "expected": ["x"], "answer": "x"}
    fields[{"question_type": "qtype"}.get(missing, missing)] = None
    result = _score(fields["qtype"], fields["expected"], fields["answer"])
    assert result.score is None and result.error is None and result.details["reason"] == f"no {missing}"


@pytest.mark.parametrize(
    ("qtype", "expected", "message"),
    [
        ("ListOne", {"x": 2}, "weight must be between 0 and 1"),
        ("ListOne", "{bad json", "does not parse"),
        ("ListOne", [None], "must be a string, number or boolean"),
        ("Yes/No", ["yes", "no"], "one yes or one no"),
        ("Yes/No", "Paris", "one yes or one no"),
        ("fact", "x", "unknown question_type 'fact'"),
    ],
)
def test_malformed_expected_is_a_per_row_error_with_the_reason(qtype: str, expected: Any, message: str) -> None:
    result = _score(qtype, expected, "x")
    assert result.score is None and result.error is not None
    assert result.error.startswith("invalid typed-answer input: ") and message in result.error


def _picked(answer: str) -> list[str]:
    """The options (alone as ``expected``) the answer scores 1.0 for."""
    return [x for x in [*OPTIONS, "I"] if _score("PickOne", x, answer).score == 1.0]


@pytest.mark.parametrize(
    ("answer", "options"),
    [
        # a cue of going with an option
        ("I'd go with A", ["A"]),
        ("I'd go with B", ["B"]),
        ("I'll go for A.", ["A"]),
        ("Going with A, since Paris is the capital.", ["A"]),
        ("I went with **A**", ["A"]),
        ("I'd go with I", ["I"]),
        ("I would choose B.", ["B"]),
        ("I would choose A.", ["A"]),
        ("My answer is (c)", ["C"]),
        ("My answer is (a)", ["A"]),
        # a lower-case label at an item's start, when the answer is no a) b) enumeration
        ("a) Paris", ["A"]),
        ("a. Paris", ["A"]),
        ("**a)** Paris", ["A"]),
        ("b. Paris", ["B"]),
        ("i) Paris", ["I"]),
        # a speaker label of a Q/A transcript is no option label; "A: Paris" alone still is
        ("A: Paris", ["A"]),
        ("Q: Which city is the capital?\nA: I think it is B", ["B"]),
        ("Q: Which city?\nA: Paris, so B", ["B"]),
        ("**Q:** Which city?\n**A:** Paris, so B", ["B"]),
        ("Q: Which one?\nA: The answer is A.", ["A"]),
        # a transcript's answer turn, its speaker label stripped, is an item of its own
        ("Q: Which city?\nA: A", ["A"]),
        ("Q: Which option?\nA: A.", ["A"]),
        ("Q: Which option?\nA: A) Paris", ["A"]),
        ("Q: Which city?\nA: **A**", ["A"]),
        ("**Q:** Which city?\n**A:** A", ["A"]),
        ("Q: Which option?\nA: a) Paris", ["A"]),
        ("Q: Which option?\nA: I", ["I"]),
        ("Q: Which city?\nA: B", ["B"]),
        ("Q: Which city?\nA: A city on the Seine, so B", ["B"]),
        ("A: Paris\nA: so A", []),  # a speaker's turn is no whole item "A" and no label
        # negatives: the article and the pronoun stay no option
        ("I'd go with a good answer", []),
        ("I'd go with a car", []),
        ("I would go with I think B", ["B"]),
        ("I go with a friend, then B", ["B"]),
        ("a good answer", []),
        ("a) it is cheap; b) it is fast, so C", ["B", "C"]),  # "b" is a whole word, as before; "a)" enumerates
        ("i) it is cheap; ii) it is fast, so B", ["B"]),
        # an enumeration's next marker anywhere in the answer, not only at an item's start; no space needed after )
        ("a) it is cheap and b) it is fast, so C", ["B", "C"]),
        ("Reasons:\na) cheap and b) fast\nSo C", ["B", "C"]),
        ("a)cheap\nb)fast, so C", ["B", "C"]),
        ("a)cheap; b)fast, so C", ["B", "C"]),
        ("i) cheap and ii) fast, so B", ["B"]),
        ("i)cheap, ii)fast, so B", ["B"]),
        ("- **a)** cheap and **b)** fast, so C", ["B", "C"]),
        ("a)Paris", ["A"]),
        ("a) Paris, not (b)", ["A", "B"]),  # "(b)" is no enumeration marker: its b) is not after a space
        # an abbreviation's letters (e. g., i. e.) are no enumeration markers
        ("a) Paris, e. g. the capital", ["A", "E"]),  # "e" is a whole word, as "b" is
        ("a) Paris, i.e. the capital", ["A"]),
        ("a) Paris. It is the capital, a. k. a. the City of Light", ["A"]),
        ("a) Paris, e. g. the capital, and b) fast", ["B", "E"]),
        ("a.k.a. Paris", []),
        # a lower-case a. / i. that starts an abbreviation (a letter and a dot after it) is no label
        ("i. e. the capital, so B", ["B", "E"]),  # "e" is a whole word, as "b" is
        ("Paris is the capital, a. k. a. the City of Light, so B", ["B"]),
        ("a. k. a. Paris", []),
        ("i.  e. the capital", ["E"]),
        ("**i.** e. the capital", ["E"]),
        ("a) Paris, i. e. the capital", ["A", "E"]),
        ("a. Paris", ["A"]),
        ("i. Paris", ["I"]),
        # nor is an upper-case A. / I. that starts a name's initials
        ("A. A. Milne wrote it, so B", ["B"]),
        ("I. M. Pei designed it, so B", ["B"]),
        ("A. Paris", ["A"]),
        # a first-person "say" and a "vote" are cues too
        ("I'd say A", ["A"]),
        ("I'd say B", ["B"]),
        ("I would say A, since Paris is the capital.", ["A"]),
        ("I vote A", ["A"]),
        ("I vote for **A**.", ["A"]),
        ("My vote is A", ["A"]),
        ("I'd say I", ["I"]),
        ("I'd say a lot", []),
        ("I'd say I think B", ["B"]),
        ("I vote against it", []),
        ("I vote against A, so B", ["B"]),
        ("They say A is wrong, so B", ["B"]),
        ("My vote is A", ["A"]),
        ("I vote for A.", ["A"]),
        ("Most people vote A, but the answer is B", ["B"]),  # another's vote is no pick
        ("The wrong answers are A and C; B is right.", ["B", "C"]),  # no A; "b", "c" are whole words, as before
        ("The incorrect option is A, so B", ["B"]),  # another's saying is no pick: "say" is a cue after "I" only
        # a label asked about ("A?") or after a negation ("not", "never", "don't") is no pick
        ("Would I say A? No. The answer is C", ["C"]),
        ("B and A? No: C.", ["B", "C"]),  # no A; "b" is a whole word, as before
        ("The answer is A?", []),
        ("Would I say (A)? No, (C).", ["C"]),
        ("Would I say (A)...? No, (C).", ["C"]),  # an ellipsis may stand before "?", as for a yes/no word
        ("I would not choose A", []),
        ("I don't pick A; C", ["C"]),
        ("I'd never go with A", []),
        ("Not option A, but C", ["C"]),
        ("The answer is not (A)", []),
        ("The answer is **not** (A)", []),
        ("Is the first one right? Maybe not. Answer: A", ["A"]),  # a negation ends at punctuation
        ("Would I drop it? Certainly not! (A)", ["A"]),
        # a retraction ("wait" and punctuation, "actually,", "correction:", "I mean") followed by a choice: the
        # choices stated before it are dropped (a one-answer question)
        ("My answer: A. No, wait: C.", ["C"]),
        ("C. No, wait: A.", ["A"]),
        ("B. Actually, C.", ["C"]),
        ("The answer is A. Correction: the answer is B.", ["B"]),
        ("A, I mean D", ["D"]),
        ("I'd go with A. Wait, no: (B).", ["B"]),
        ("A. Hmm, wait... it's E", ["E"]),
        # no choice after it, or no retraction: the answer as a whole, as before
        ("A. Actually, that is right.", ["A"]),
        ("A. I mean it.", ["A"]),
        ("Wait for it: the answer is A", ["A"]),
        ("I actually pick A", ["A"]),
        ("A. Wait, B is wrong, so A.", ["A", "B"]),  # a letter named in passing is no new choice
        # the first sentence after the marker must be a choice and nothing else: letters of an abbreviation, a
        # letter in a sentence, a sentence-final "actually" are no retraction
        ("A. Wait, the U.S. one", ["A"]),
        ("A. Actually, it's in the U.K.", ["A"]),
        ("A. Actually, section D.2 says so.", ["A", "D"]),
        ("A. Actually, it is better than C.", ["A", "C"]),
        ("The answer is A, actually. It's not B.", ["A", "B"]),
        ("The answer is A. Wait, let me check option C.", ["A", "C"]),
        ("A\nI mean it's definitely not C.", ["A", "C"]),
        ("Actually, A.", ["A"]),  # a marker before the one choice: that choice
        ("A is right. C. Actually, no, A.", ["A"]),
        ("A. Actually, it's A.", ["A"]),  # the choice read from its letter on, past the lead "it's"
        ("C. Wait, no: A.", ["A"]),
        ("A. Actually, (B).", ["B"]),  # a bracketed label too ("A." and "(B)" restate no options: not alike)
        # a retraction to a choice, its labels written alike, is no list of options either
        ("(A). Actually, (B).", ["B"]),
        ("A. Actually, B. Lyon.", ["B"]),
        ("A. Actually,\n(B).", ["B"]),
        # a choice dropped by the retraction but named again after the choice that follows it: the answer read
        # as a whole, as before (the model went back to it: "No, A is correct"; or it names it in passing)
        ("The answer is A.\n\nWait, B. No, A is correct.", ["A", "B"]),
        ("I. Wait, II. No, I think I is right.", ["I"]),
        ("A. No, wait: C. C is the only port.", ["C"]),  # C is no dropped choice
        ("No answer is A", ["A"]),  # "No, answer is A" with its comma dropped: no negation of A
        ("A and C", ["A", "C"]),
        ("C and A.", ["A", "C"]),
        ("B, C and A", ["A", "B", "C"]),
        ("A & C", ["A", "C"]),
        ("A and B and C", ["A", "B", "C"]),
        ("The answer is A and C", ["A", "C"]),
        ("The answers are **A** and **C**.", ["A", "C"]),
        ("Answers: A and I", ["A", "I"]),
        ("A and B are both wrong, so C", ["B", "C"]),  # no pick of A: a word follows; "b" is a whole word, as before
        ("Between A and B, I'd pick B", ["B"]),
        ("A and I went to Paris", []),
        ("B and I think C", ["B", "C"]),
        ("a and c", ["C"]),  # lower case: the article, as ever; "c" is a whole word
        # an answer restating the options (A), B), … in order, two or more lines) and then picking elsewhere:
        # the restated lines of the options not given in a final-answer line ("Answer: B", a bare "B") are not read
        ("A) Paris\nB) Lyon\nAnswer: B", ["B"]),
        ("A) Paris\nB) Lyon\nC) Nice\nThe answer is A.", ["A"]),
        ("(A) Paris\n(B) Lyon\n(C) Nice\n**C**", ["C"]),
        ("A) Paris\nB) Lyon\nC) Nice\nThe final answer is: B, C", ["B", "C"]),
        # a pick in a sentence is no final answer (it may name a letter in passing): the lines are read as before
        ("Options:\n- A) Paris, the capital\n- B) Lyon\nI'd go with B", ["A", "B"]),
        ("(A) Paris\n(B) Lyon\n(C) Nice\nI pick C", ["A", "B", "C"]),
        ("A) Paris\nB) Lyon\nOption B is wrong.", ["A", "B"]),
        ("A. Paris\nB. Lyon\nC. Nice\nAnswer: A and C", ["A", "C"]),
        ("A) Paris\nB) Lyon\nB", ["B"]),
        ("A) Paris\n\nB) Lyon\n\nAnswer: B", ["B"]),
        # the options restated and nothing else: no choice of one (PickOne here; a Many type reads each line as a pick)
        ("A) Paris\nB) Lyon", []),
        ("A) Paris\n\nB) Lyon\nC) Nice\n", []),
        ("```\nA) Paris\nB) Lyon\n```", []),  # lines with no word (a code fence, a rule) say nothing either
        ("A) Paris\nB) Lyon\n---", []),
        ("A) Paris\nB) Lyon\nBoth are French cities", ["A", "B"]),
        ("A) Paris\nC) Nice\nAnswer: C", ["A", "C"]),  # not A, B, … in order: no restatement, as before
        ("B) Lyon\nC) Nice\nAnswer: C", ["B", "C"]),
        # options restated on one line, apart by "," or ";": each is an option's own item (all 1.0 before)
        ("A) Paris; B) Lyon; C) Nice\nAnswer: C", ["C"]),
        ("A) Paris, B) Lyon\nAnswer: A", ["A"]),
        ("A) Paris; B) Lyon", []),
        # labels written differently on one line are no list of options: "(B) seems right" is a choice, as before
        ("A. Hmm, (B) seems right.", ["A", "B"]),
        ("A. No, (B).", ["A", "B"]),
        ("A) Paris, the capital; B) Lyon, a city\nAnswer: B", ["B"]),  # the words after an option are its own
        ("A) Paris, the capital\nB) Lyon\nAnswer: B", ["B"]),
    ],
)
def test_natural_phrasings_pick_the_option_they_name(answer: str, options: list[str]) -> None:
    assert _picked(answer) == options


def test_a_retraction_keeps_the_choice_after_it_for_a_one_answer_question_only() -> None:
    options = {"Paris": 1.0, "Lyon": 0.5}
    later = _score("ListOne", options, "Paris. No, wait: Lyon.", synonyms=False)
    assert later.score == 0.5 and later.details["retraction"] == "wait:"
    assert later.details["unmatched"] == ["Paris"]
    assert _score("ListOne", options, "Paris. Actually, it is the capital.", synonyms=False).score == 1.0
    for named in ("Paris. Actually, it is the capital, not Lyon.", "Paris, actually. Lyon is second."):
        assert _score("ListOne", options, named, synonyms=False).score == 1.0  # Lyon named in passing
    assert _score("ListOne", options, "Lyon. Correction: the answer is Paris.", synonyms=False).score == 1.0
    asked = _score("ListOne", options, "Paris. Wait, Lyon? No.", synonyms=False)  # a value asked about: no choice
    assert asked.score == 1.0 and "retraction" not in asked.details
    assert _score("PickMany", ["A", "C"], "A. No, wait: C.").score == 1.0  # a Many type reads both, as before
    bracketed = _score("PickOne", "B", "(A). Actually, (B).")  # no options restated: a retraction to (B)
    assert (
        bracketed.score == 1.0 and bracketed.details["retraction"] == "Actually," and "reason" not in bracketed.details
    )


def test_a_multi_answer_reply_scores_each_option_it_joins() -> None:
    assert _score("PickMany", ["A", "C"], "A and C").score == 1.0
    assert _score("PickMany", ["A", "C"], "A) Paris\nB) Lyon\nC) Nice\nAnswer: A and C").score == 1.0
    assert _score("PickMany", {"A": 0.5, "B": 0.5}, "A) Paris\nB) Lyon\nAnswer: B").score == 0.5


@pytest.mark.parametrize("qtype", ["PickOne", "ListOne"])
@pytest.mark.parametrize(
    "answer", ["A) Paris\nB) Lyon", "A. Paris\nB. Lyon", "```\nA) Paris\nB) Lyon\n```", "A) Paris; B) Lyon"]
)
def test_a_one_answer_reply_listing_options_with_nothing_else_chooses_none(qtype: str, answer: str) -> None:
    """Two or more options and nothing else is no choice of one: no value matches, by label or by text; the details
    say why."""
    result = _score(qtype, {"A": 1.0, "B": 0.0}, answer)
    assert result.score == 0.0 and result.details["reason"] == "options restated with nothing else: no choice of one"
    assert _score(qtype, {"Paris": 1.0, "Lyon": 0.0}, answer, synonyms=False).score == 0.0


@pytest.mark.parametrize("qtype", ["PickMany", "ListMany"])
@pytest.mark.parametrize(
    "answer", ["A) Paris\nB) Lyon", "A. Paris\nB. Lyon", "```\nA) Paris\nB) Lyon\n```", "A) Paris; B) Lyon"]
)
def test_a_many_answer_reply_listing_options_picks_each_line(qtype: str, answer: str) -> None:
    """For a many-answer question the lines are the picks (the metric cannot know how many options there were):
    "A) Paris", "B) Lyon" picks A and B, by label and by text (0.0 when the one-answer rule applied to all types)."""
    result = _score(qtype, ["A", "B"], answer)
    assert result.score == 1.0 and "reason" not in result.details
    assert _score(qtype, {"Paris": 0.5, "Lyon": 0.5}, answer, synonyms=False).score == 1.0
    assert _score(qtype, {"A": 0.5, "C": 0.5}, answer).score == 0.5


def test_a_restated_option_that_is_picked_still_matches_by_its_text() -> None:
    """The picked option's own line stays: an expected value written as the option's text matches as its letter
    does, and the options not picked match nothing."""
    answer = "A) Paris\nB) Lyon\nC) Nice\nAnswer: B"
    assert _score("PickOne", ["Lyon"], answer, synonyms=False).score == 1.0
    assert _score("PickOne", ["Paris"], answer, synonyms=False).score == 0.0
    assert _score("PickMany", {"Paris": 0.5, "Nice": 0.5}, answer, synonyms=False).score == 0.0


@pytest.mark.parametrize(
    ("qtype", "expected", "answer"),
    [
        # an option ruled out ("Option B is wrong") reads as a pick of B, so the restated line of the option the
        # answer does pick (A, by elimination / a tick) is dropped: Paris and A are lost (1.0 before, 0.0 now)
        ("PickOne", "Paris", "A) Paris\nB) Lyon\nOption B is wrong."),
        ("PickOne", "Paris", "A) Paris\nB) Lyon\nIt's not option B."),
        ("PickOne", "Paris", "A) Paris ✓\nB) Lyon ✗\nI would rule out option B."),
        ("PickOne", "A", "A) Paris ✓\nB) Lyon ✗\nI would rule out option B."),
        # the answer's own lettered list, then a remark naming one item with a cue word: the other items are lost
        ("ListMany", {"Paris": 0.5, "Lyon": 0.5}, "A. Paris\nB. Lyon\nC. Nice\nTo visit, I would pick C."),
    ],
)
def test_a_restated_option_is_not_dropped_for_a_letter_named_but_not_picked(
    qtype: str, expected: object, answer: str
) -> None:
    assert _score(qtype, expected, answer).score == 1.0


@pytest.mark.parametrize("answer", ["Q&A: the docs say B.", "Q & A, section 3, says B", "Q and A: B"])
def test_q_and_a_is_not_option_a_joined_to_option_q(answer: str) -> None:
    """ "Q&A" (a FAQ's name) at an item's start reads as the letters Q and A joined, a multi-answer reply: option A
    matched (0.0 before 3931729)."""
    assert _score("PickOne", "A", answer).score == 0.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("join", [" or yes?", "/yes?", " / yes...?"])
def test_a_long_chain_of_asked_yes_no_words_is_read_in_linear_time(join: str) -> None:
    """Each asked yes/no word walked back over the whole ``or`` chain before it: 160 kB of "yes or yes? or yes?"
    took 54 s (quadratic). A walk stops at a word already asked about; a ``/`` joins as ``or`` does and an ellipsis
    may stand before ``?``. No time is measured: the 60 s timeout is a hang guard, far above a linear read of 400 kB
    and far below a quadratic one."""
    many = "yes" + join * (400_000 // len(join))
    assert _score("Yes/No", "no", f"{many} No.").score == 1.0


#: Ordinary answers, each with the options it picks for a PickOne and a PickMany question (``A``, ``B``, ``C``, ``I``
#: alone as ``expected``): pinned before "A. Actually, (B)." was read as a choice and "Yes/no? No." as no, unchanged.
ORDINARY_PICKS = [
    ("B", ["B"], ["B"]),
    ("The answer is B.", ["B"], ["B"]),
    ("Answer: (B)", ["B"], ["B"]),
    ("**B**", ["B"], ["B"]),
    ("B) Lyon", ["B"], ["B"]),
    ("(B) Lyon", ["B"], ["B"]),
    ("B. Lyon", ["B"], ["B"]),
    ("I'd go with B.", ["B"], ["B"]),
    ("A) Paris\nB) Lyon\nAnswer: B", ["B"], ["B"]),
    ("A) Paris; B) Lyon", [], ["A", "B"]),
    ("A. Paris\nB. Lyon", [], ["A", "B"]),
    ("(A) Paris\n(B) Lyon", [], ["A", "B"]),
    ("A. Paris, B. Lyon", [], ["A", "B"]),
    ("(A) Paris; (B) Lyon\nAnswer: B", ["B"], ["B"]),
    ("A. Actually, B.", ["B"], ["A", "B"]),
    ("B, since Lyon is larger.", ["B"], ["B"]),
    ("Option B (Lyon).", ["B"], ["B"]),
    ("A, B", ["A", "B"], ["A", "B"]),
    ("(A), (B)", [], ["A", "B"]),
    ("A) Paris\n(B) Lyon", [], ["A", "B"]),
    ("A. Paris\n(B) Lyon\nAnswer: B", ["B"], ["B"]),
    ("B. Actually, it is B.", ["B"], ["B"]),
    ("(B). Lyon is right.", ["B"], ["B"]),
    ("I think (B), Lyon.", ["B"], ["B"]),
    ("Lyon (B)", ["B"], ["B"]),
    ("(A) or (B)? (B).", ["A", "B"], ["A", "B"]),
    ("A) Paris, the capital; B) Lyon", [], ["A", "B"]),
    ("Not A; B", ["B"], ["B"]),
    ("B is right: Lyon.", ["B"], ["B"]),
    ("My answer: A. No, wait: C.", ["C"], ["A", "C"]),
    ("C) Nice", ["C"], ["C"]),
    ("(C) Nice, since it is on the coast.", ["C"], ["C"]),
    ("A) Paris\nB) Lyon\nC) Nice\nThe answer is (C).", ["C"], ["C"]),
    ("Would I say (A)? No, (C).", ["C"], ["C"]),
]


@pytest.mark.parametrize(("answer", "one", "many"), ORDINARY_PICKS)
def test_ordinary_answers_pick_as_before(answer: str, one: list[str], many: list[str]) -> None:
    many_picks = [x for x in [*OPTIONS, "I"] if _score("PickMany", {x: 0.25}, answer).score == 0.25]
    assert (_picked(answer), many_picks) == (one, many)


#: Ordinary Yes/No answers and the polarity each says (``answered``) and its Yes/No with Rationale score when yes is
#: expected (no reference, three content words for full support): pinned before a ``/`` and an ellipsis joined an
#: asked yes/no word, unchanged.
ORDINARY_YES_NO = [
    ("Yes.", "yes", 0.5),
    ("No.", "no", 0.0),
    ("Yes or no? No.", "no", 0.0),
    ("Is it true? Yes.", "yes", 0.5),
    ("N/A", None, 0.0),
    ("Yes/No", "yes", 0.5),
    ("yes/no: no", "yes", 0.5),
    ("Yes, and/or no.", "yes", 0.5),
    ("I would say yes... no.", "yes", 0.6666666666666666),
    ("Maybe... yes?", None, 0.0),
    ("Is it 50/50? No.", "no", 0.0),
    ("Yes. Why? Because.", "yes", 0.5),
    ("No... yes?", "no", 0.0),
    ("Well...? Yes.", "yes", 0.6666666666666666),
    ("w/o doubt, yes", "yes", 1.0),
    ("Would I say yes? No.", "no", 0.0),
    ("Is TCP/IP used? Yes.", "yes", 1.0),
    ("Yes, 24/7.", "yes", 0.8333333333333333),
    ("No. Is it true...? No.", "no", 0.0),
    ("Yes... definitely.", "yes", 0.6666666666666666),
    ("No!? Really? Yes.", "no", 0.0),
]


@pytest.mark.parametrize(("answer", "answered", "rationale"), ORDINARY_YES_NO)
def test_ordinary_yes_no_answers_say_as_before(answer: str, answered: str | None, rationale: float) -> None:
    assert _score("Yes/No", "yes", answer).details["answered"] == answered
    assert _score("Yes/No with Rationale", "yes", answer).score == pytest.approx(rationale)
