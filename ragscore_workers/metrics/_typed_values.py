"""The typed-answer grammar: question types, weighted expected values, answer items and yes/no polarity.

See docs/metrics/deterministic.md for the grammar. Everything that compares text goes through
:func:`terms`: tokens (case, diacritics, punctuation, whitespace normalised) with number words as digits.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ._numbers import canonical_numbers
from ._text import tokens

__all__ = [
    "NEGATORS",
    "QUESTION_TYPES",
    "STOPWORDS",
    "ExpectedError",
    "ExpectedValue",
    "answer_items",
    "grouped_question_type",
    "parse_expected",
    "parse_question_type",
    "polarity",
    "raw_items",
    "terms",
]

#: Canonical question types, keyed by their name lower-cased with everything but letters removed.
QUESTION_TYPES = {
    "yesno": "Yes/No",
    "listone": "ListOne",
    "listmany": "ListMany",
    "pickone": "PickOne",
    "pickmany": "PickMany",
    "yesnowithrationale": "Yes/No with Rationale",
}
YES = frozenset({"y", "yes", "yeah", "yep", "yup", "true", "correct", "affirmative"})
NO = frozenset({"n", "no", "nope", "nah", "false", "incorrect", "negative"})
STOPWORDS = frozenset(
    "a an the and or but if then so of to in on at by for with from as into about than that this these those it its "
    "is are was were be been being am do does did has have had will would can could should may might must shall "
    "i you he she we they me him her them my your his our their what which whom whose when where why how "
    "not no yes because since there here also very just only all any some such".split()
)


class ExpectedError(ValueError):
    """``expected`` or ``question_type`` does not follow the grammar; the message says why."""


@dataclass(frozen=True)
class ExpectedValue:
    """One expected value: its text as given, its weight, and its comparison form."""

    text: str
    weight: float
    term: str


def terms(text: str) -> str:
    """Comparison form: normalised tokens, number words as digits, joined by single spaces."""
    return " ".join(canonical_numbers(tokens(text)))


def parse_question_type(value: str) -> str:
    """``"yes / no"`` -> ``"Yes/No"``; unknown types raise :class:`ExpectedError` listing the valid ones."""
    key = re.sub(r"[^a-z]", "", value.lower())
    if key not in QUESTION_TYPES:
        raise ExpectedError(f"unknown question_type {value!r}; expected one of {', '.join(QUESTION_TYPES.values())}")
    return QUESTION_TYPES[key]


@lru_cache(maxsize=1024)
def grouped_question_type(value: str) -> str:
    """The spelling a run's ``by_question_type`` groups ``value`` under: one of :data:`QUESTION_TYPES` as
    :func:`parse_question_type` writes it (``yes/no``, ``YES_NO`` -> ``Yes/No``), any other type as it is."""
    return QUESTION_TYPES.get(re.sub(r"[^a-z]", "", value.lower()), value)


def _value_text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return str(value)
    if isinstance(value, str):
        return value
    raise ExpectedError(f"{where}: a value must be a string, number or boolean, got {type(value).__name__}")


def _weight(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpectedError(f"{where}: weight must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ExpectedError(f"{where}: weight must be between 0 and 1, got {value}")
    return float(value)


def _pairs(expected: Any) -> list[tuple[str, float]]:
    if isinstance(expected, str):
        text = expected.strip()
        if text[:1] in ("{", "["):
            try:
                decoded = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ExpectedError(f"expected looks like JSON but does not parse: {exc}") from None
            if not isinstance(decoded, (dict, list)):
                raise ExpectedError("expected JSON must be an object or a list")
            return _pairs(decoded)
        return [(expected, 1.0)]
    if isinstance(expected, dict):
        return [(_value_text(k, "expected key"), _weight(w, f"expected[{k!r}]")) for k, w in expected.items()]
    if isinstance(expected, list):
        out = []
        for i, item in enumerate(expected):
            if isinstance(item, list):
                if len(item) != 2:
                    raise ExpectedError(f"expected[{i}]: a pair must be [value, weight], got {len(item)} elements")
                out.append((_value_text(item[0], f"expected[{i}][0]"), _weight(item[1], f"expected[{i}][1]")))
            else:
                out.append((_value_text(item, f"expected[{i}]"), 1.0))
        return out
    return [(_value_text(expected, "expected"), 1.0)]


def parse_expected(expected: Any) -> list[ExpectedValue]:
    """Expected values with weights, from any form of the grammar; anything else raises ExpectedError."""
    pairs = _pairs(expected)
    if not pairs:
        raise ExpectedError("expected holds no values")
    values: list[ExpectedValue] = []
    seen: dict[str, str] = {}
    for text, weight in pairs:
        term = terms(text)
        if not term:
            raise ExpectedError(f"expected value {text!r} is empty after normalisation")
        if term in seen:
            raise ExpectedError(f"expected values {seen[term]!r} and {text!r} are the same after normalisation")
        seen[term] = text
        values.append(ExpectedValue(text=text, weight=weight, term=term))
    return values


_BULLET = re.compile(r"^\s*(?:[-*+•·‣◦▪]|\(?\d+[.)])\s+")
_SEPARATORS = re.compile(r"[;•·‣◦▪]|,(?!\d{3}(?!\d))")


def raw_items(answer: str) -> list[str]:
    """Answer split into items at newlines, bullets, numbered markers, semicolons and commas (not 1,000), as
    written (not normalised; blank items kept)."""
    return [part for line in answer.splitlines() for part in _SEPARATORS.split(_BULLET.sub("", line))]


def answer_items(raw: list[str]) -> list[str]:
    """An answer's :func:`raw_items` in comparison form, blank ones dropped."""
    return [term for term in map(terms, raw) if term]


#: Words that flip the yes/no word right after them: ``not``, ``never``, ``cannot`` and the n't contractions as
#: :func:`terms` writes them (``isn't`` -> ``isnt``).
NEGATORS = frozenset(
    "not never cannot isnt arent wasnt werent dont doesnt didnt cant couldnt wont wouldnt shouldnt hasnt havent "
    "hadnt mustnt neednt shant aint".split()
)
#: Letters that are a yes/no only as the whole answer: in a sentence they are ``N/A``'s ``n`` or a ``Y`` chromosome.
LETTERS = frozenset({"y", "n"})


def polarity(words: list[str], asked: Collection[int] = ()) -> tuple[bool | None, list[int]]:
    """The first yes/no word not ``asked`` about (positions) decides (a :data:`NEGATORS` word right before it flips
    it: ``isn't true`` is no; ``y`` / ``n`` only when they are all the words); returns it and the positions used."""
    for i, word in enumerate(words):
        if (word in LETTERS and len(words) > 1) or i in asked:
            continue
        if word in YES or word in NO:
            negated = i > 0 and words[i - 1] in NEGATORS
            return (word in YES) != negated, ([i - 1, i] if negated else [i])
    return None, []
