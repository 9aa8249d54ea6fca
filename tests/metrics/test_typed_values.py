"""The typed-answer grammar, number words and the offline WordNet reader, against hand-worked cases."""

from __future__ import annotations

import re

import pytest

from ragscore_workers.metrics._numbers import canonical_numbers
from ragscore_workers.metrics._text import tokens
from ragscore_workers.metrics._typed_values import (
    ExpectedError,
    answer_items,
    parse_expected,
    parse_question_type,
    polarity,
    raw_items,
    terms,
)
from ragscore_workers.metrics._wordnet import POS, _index, synonyms


def _pairs(expected: object) -> list[tuple[str, float]]:
    return [(v.text, v.weight) for v in parse_expected(expected)]


def test_expected_grammar_accepts_object_pairs_plain_list_and_string() -> None:
    assert _pairs({"Paris": 1, "Lyon": 0.5}) == [("Paris", 1.0), ("Lyon", 0.5)]
    assert _pairs([["Paris", 1], ["Lyon", 0.25]]) == [("Paris", 1.0), ("Lyon", 0.25)]
    assert _pairs(["Paris", "Lyon"]) == [("Paris", 1.0), ("Lyon", 1.0)]
    assert _pairs([["Paris", 0.5], "Lyon"]) == [("Paris", 0.5), ("Lyon", 1.0)]  # mixed items
    assert _pairs("Paris") == [("Paris", 1.0)]
    assert _pairs('{"Paris": 0.5}') == [("Paris", 0.5)]  # JSON text, e.g. from a CSV cell
    assert _pairs('[["Paris", 0.5]]') == [("Paris", 0.5)]
    assert _pairs(True) == [("yes", 1.0)] and _pairs(5) == [("5", 1.0)]
    assert _pairs('"Paris"') == [('"Paris"', 1.0)]  # only text starting with { or [ is read as JSON


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        ({}, "no values"),
        ([], "no values"),
        ({"Paris": "high"}, "weight must be a number"),
        ({"Paris": True}, "weight must be a number"),
        ({"Paris": 1.5}, "between 0 and 1"),
        ({"Paris": -0.1}, "between 0 and 1"),
        ([["Paris", 0.5, 1]], "pair must be [value, weight]"),
        ([{"v": 1}], "must be a string, number or boolean"),
        ('{"Paris": 1', "does not parse"),
        ("...", "empty after normalisation"),
        (["Paris", "paris!"], "same after normalisation"),
        ({"a": None}, "weight must be a number"),
    ],
)
def test_expected_grammar_rejects_everything_else_with_the_reason(expected: object, message: str) -> None:
    with pytest.raises(ExpectedError, match=re.escape(message)):
        parse_expected(expected)


def test_question_types_are_matched_loosely_and_unknown_ones_listed() -> None:
    assert parse_question_type("yes/no") == "Yes/No"
    assert parse_question_type("Yes / No with rationale") == "Yes/No with Rationale"
    assert parse_question_type("list_many") == "ListMany"
    with pytest.raises(ExpectedError, match="one of Yes/No, ListOne"):
        parse_question_type("fact")


def test_normalisation_folds_case_diacritics_punctuation_and_whitespace() -> None:
    assert terms("  Café\tde  FLORE!! ") == "cafe de flore"
    assert terms("U.S.") == terms("US") == "us"
    assert tokens("1,000 and 3.5") == ["1000", "and", "3.5"]
    assert tokens(".5 ml, -.5 and v.5") == [".5", "ml", "-.5", "and", "v", "5"]  # a leading decimal point
    assert tokens("C++ and C#, not C") == ["c++", "and", "c#", "not", "c"]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("five", "5"),
        ("twenty one", "21"),
        ("twenty-one", "21"),
        ("one hundred and five", "105"),
        ("one hundred five", "105"),
        ("five five", "5 5"),  # word2number alone says 10
        ("one two three", "1 2 3"),
        # word2number reads this 2301300 (no round trip) and its prefix "two million three hundred" is followed by
        # "thousand": not the number meant, so the words stay (not "2000300 thousand")
        ("two million three hundred thousand", "two million three hundred thousand"),
        ("two million three hundred thousand and five", "2300005"),
        ("three point five million", "3.5 million"),  # a decimal before a scale word is that number and the word
        ("two point five billion dollars", "2.5 billion dollars"),
        ("twenty one five", "21 5"),
        ("two point five", "2.5"),
        ("5.0", "5"),
        (".5", "0.5"),
        ("-.50", "-0.5"),
        ("007", "7"),
        ("\u0663.\u0665\u0660", "3.5"),  # Arabic-Indic digits
        ("\u1369 x", "1 x"),  # an Ethiopic digit: a digit to isdigit(), not to int()
        ("point", "point"),
        ("bread and butter", "bread and butter"),
    ],
)
def test_number_words_and_digits_meet_in_one_canonical_form(text: str, canonical: str) -> None:
    assert " ".join(canonical_numbers(tokens(text))) == canonical


def test_answer_items_split_at_commas_semicolons_newlines_and_bullets() -> None:
    assert answer_items(raw_items("Paris, Lyon; Nice")) == ["paris", "lyon", "nice"]
    assert answer_items(raw_items("- Paris\n* Lyon\n• Nice\n2. Lille\n3) Metz")) == [
        "paris",
        "lyon",
        "nice",
        "lille",
        "metz",
    ]
    assert answer_items(raw_items("1,000 people")) == ["1000 people"]  # a thousands comma is not a separator
    assert answer_items(raw_items(" ,;\n")) == []
    assert raw_items("A) Paris, Lyon\n- B. Nice") == ["A) Paris", " Lyon", "B. Nice"]  # as written


def test_polarity_takes_the_first_yes_no_word_and_not_flips_it() -> None:
    assert polarity(["yes", "it", "is"]) == (True, [0])
    assert polarity(["it", "is", "not", "true"]) == (False, [2, 3])
    assert polarity(["nope"]) == (False, [0])
    assert polarity(terms("That isn't true").split()) == (False, [1, 2])
    assert polarity(terms("You cannot say it is correct, it is never false").split()) == (True, [5])
    assert polarity(["never", "false"]) == (True, [0, 1])
    assert polarity(["dont", "no"]) == (True, [0, 1])
    assert polarity(["maybe"]) == (None, [])


def test_wordnet_synonyms_offline_with_morphology() -> None:
    car = synonyms("car")
    assert {"auto", "automobile", "motorcar", "railcar"} <= car
    assert synonyms("cars") == car  # noun rule: -s
    assert "goose" in synonyms("geese")  # exception list
    # a word WordNet knows as written is not reduced: Mars is not "mar" (March), news is not "new"
    assert "Red Planet" in synonyms("Mars") and not {"March", "mar", "spoil"} & synonyms("Mars")
    assert "tidings" in synonyms("news") and "fresh" not in synonyms("news")
    assert {"glad", "felicitous"} <= synonyms("happy")
    assert "New York City" in synonyms("new york")  # multi-word lemma
    assert synonyms("xyzzy") == frozenset() and synonyms("  ") == frozenset()


def test_wordnet_index_files_are_sorted_for_binary_search() -> None:
    for pos in POS:
        lines = _index(pos)
        assert len(lines) > 4000 and lines == sorted(lines)
