"""Number words and digits compare equal: runs of English number words become canonical digits.

``["twenty", "one"]`` -> ``["21"]``, ``["5.0"]`` -> ``["5"]``. A run is accepted only when it round-trips
(``num2words(word2number(run))`` spells the same words, ``and`` aside), so ``"five five"`` stays two numbers
(``5 5``) instead of word2number's ``10``; the longest accepted prefix of each run wins, unless it holds a scale
word (``hundred``, ``thousand``, ...) and another follows it: word2number misreads ``two million three hundred
thousand`` (2301300) and its prefix ``two million three hundred`` is not the number meant, so such a run stays
words (``three point five million`` is ``3.5 million``: a decimal before a scale word is that number).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from functools import lru_cache

from ._text import tokens

__all__ = ["canonical_digits", "canonical_numbers", "is_number"]

#: Longest run of number words tried at once (longer runs are cut into several numbers).
MAX_RUN = 12

_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million "
    "billion".split()
)
_GLUE = frozenset({"and", "point"})
_SCALES = frozenset({"hundred", "thousand", "million", "billion"})


def canonical_digits(token: str) -> str:
    """``"007"`` -> ``"7"``, ``"5.50"`` -> ``"5.5"``, ``"5.0"`` -> ``"5"``, ``".5"`` -> ``"0.5"``, ``"-0"`` -> ``"0"``
    (any Unicode digits become ASCII; a minus sign stays)."""
    sign, body = ("-", token[1:]) if token.startswith("-") else ("", token)
    whole, _, frac = body.partition(".")
    # unicodedata.digit, not int(): int() refuses digits that are not decimal ones ("፩", "²"), though isdigit()
    whole = str(int("".join(str(unicodedata.digit(c)) for c in whole) or "0"))  # ".5": no whole part
    frac = "".join(str(unicodedata.digit(c)) for c in frac).rstrip("0")
    number = f"{whole}.{frac}" if frac else whole
    return sign + number if number != "0" else number


def is_number(token: str) -> bool:
    """``"5"``, ``"-3.5"``, ``".5"``: a digit token as :func:`~._text.tokens` writes it."""
    whole, dot, frac = token.removeprefix("-").partition(".")
    return (whole.isdigit() or (bool(dot) and not whole)) and (not dot or frac.isdigit())


@lru_cache(maxsize=4096)
def _spell(words: tuple[str, ...]) -> str | None:
    """Digits for exactly these number words, or None when they are not one well-formed number."""
    from num2words import num2words
    from word2number import w2n

    try:
        value = w2n.word_to_num(" ".join(words))
        spelled = tokens(num2words(value))
    except Exception:  # word2number raises ValueError (and worse) on odd runs
        return None
    if [w for w in spelled if w != "and"] != [w for w in words if w != "and"]:
        return None
    return canonical_digits(str(value))


def _longest_number(run: tuple[str, ...]) -> tuple[int, str | None]:
    """(words taken, their digits) for the longest prefix of ``run`` that round-trips; (0, None) for none. A
    prefix holding a scale word and followed by another (``two million three hundred`` before ``thousand``) is part
    of a number word2number misread, not a number of its own: the whole run is taken as words, digits None. A
    decimal before a scale word (``three point five million``) is that number and the word: ``3.5 million``."""
    for k in range(min(len(run), MAX_RUN), 0, -1):
        if run[k - 1] in _GLUE:
            continue
        digits = _spell(run[:k])
        if digits is not None:
            scaled = "point" not in run[:k] and any(w in _SCALES for w in run[:k])
            if scaled and next((w for w in run[k:] if w not in _GLUE), None) in _SCALES:
                return len(run), None
            return k, digits
    return 0, None


def canonical_numbers(words: Sequence[str]) -> list[str]:
    """Tokens with number-word runs replaced by digits and digit tokens made canonical."""
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if is_number(word):
            out.append(canonical_digits(word))
            i += 1
            continue
        if word in _WORDS:
            end = i
            while end < len(words) and (words[end] in _WORDS or words[end] in _GLUE):
                end += 1
            taken, digits = _longest_number(tuple(words[i:end]))
            if taken:
                out.extend(words[i : i + taken] if digits is None else [digits])
                i += taken
                continue
        out.append(word)
        i += 1
    return out
