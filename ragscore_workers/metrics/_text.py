"""Text normalisation shared by the deterministic metrics."""

from __future__ import annotations

import re
import string
import unicodedata

import regex

__all__ = [
    "CITATION_MARKER",
    "normalize_answer",
    "strip_diacritics",
    "strip_format_chars",
    "strip_punctuation",
    "tokens",
]

#: A numeric citation marker: ``[1]``, and one bracket citing several sources: ``[1, 2]``, ``[1-3]``, ``[1–3]``.
CITATION_MARKER = r"\[\d+(?:\s*[,\-–]\s*\d+)*\]"

_ARTICLES = re.compile(r"\b(a|an|the)\b")
#: ASCII punctuation (``string.punctuation``: also ``$+<=>^`|~``, which Unicode calls symbols) and every Unicode
#: punctuation mark (category P*).
_PUNCTUATION = regex.compile(r"[\p{P}" + regex.escape(string.punctuation, special_only=False) + "]+")


#: Invisible format characters (Unicode category Cf): zero-width space and joiners, soft hyphen, BOM, bidi marks.
_FORMAT = regex.compile(r"\p{Cf}+")


def strip_format_chars(text: str) -> str:
    """Drop invisible format characters (category Cf): ``"Pa\u00adris\u200b"`` -> ``"Paris"``."""
    return _FORMAT.sub("", text)


def strip_punctuation(text: str) -> str:
    """Drop ASCII punctuation (SQuAD's ``string.punctuation``) and every Unicode punctuation mark (category P*:
    ``。、「」¡¿„‹›‐·``), as MLQA's multilingual evaluation does; symbols such as ``€``, ``°`` and emoji stay."""
    return _PUNCTUATION.sub("", text)


#: Scripts whose combining marks are accents or optional vowel pointing, dropped by :func:`strip_diacritics`. In
#: other scripts a mark makes another letter or word (kana voicing: ``ぶた`` pig, ``ふた`` lid; Thai tones: ``ม้า``
#: horse, ``มา`` come; a Devanagari virama) and stays.
_ACCENTED_SCRIPTS = ("LATIN", "GREEK", "CYRILLIC", "ARABIC", "HEBREW")


def strip_diacritics(text: str) -> str:
    """``"Café"`` -> ``"Cafe"``: decompose (NFKD), drop the combining marks on Latin, Greek, Cyrillic, Arabic and
    Hebrew letters (and on non-letters), recompose (NFC) what is left: ``"ぶ"`` stays ``"ぶ"``."""
    if text.isascii():
        return text
    kept: list[str] = []
    keep_marks = False
    for c in unicodedata.normalize("NFKD", text):
        category = unicodedata.category(c)
        if category[0] != "M":  # a base character decides for the marks that follow it
            keep_marks = category[0] == "L" and not unicodedata.name(c, "").startswith(_ACCENTED_SCRIPTS)
        elif unicodedata.combining(c) and not keep_marks:
            continue
        kept.append(c)
    return unicodedata.normalize("NFC", "".join(kept))


#: Punctuation that carries meaning and survives normalisation: a decimal point, a time's or ratio's colon or
#: slash between digits, a sign before a number, and the ``++``/``#`` of names like C++ and C#.
#: A comma between digits that is not a thousands separator (gone before this) is a decimal comma: ``12,5``.
#: A leading decimal point (``.5``) and an exponent's sign (``1.5e-3``) are kept too.
_MEANINGFUL = re.compile(
    r"(?<=\d)[.,:/](?=\d)|(?<![\w.])\.(?=\d)|(?<![\w.])[-+](?=[.\d])|(?<=\de)[-+](?=\d)|(?<=[^\W\d_])(?:\+\+|#)"
)
#: Stand-ins (Unicode private use) that the punctuation filter leaves alone.
_KEEP = {c: chr(0xE000 + i) for i, c in enumerate(".,:/-+#")}
_RESTORE = str.maketrans({v: k for k, v in _KEEP.items()})


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation: case-folded, no diacritics, punctuation, articles or invisible format characters
    (zero-width space, soft hyphen), single spaces; but numbers keep their decimal point or comma, sign and
    thousands (``3.5`` is not ``35``, ``12,5`` is not ``125``, ``-5`` is not ``5``, ``1,000`` is ``1000``),
    ``10:30`` and ``1/2`` keep their mark, and ``C++`` / ``C#`` stay apart from ``C``."""
    text = strip_diacritics(strip_format_chars(text).casefold()).replace("\u2212", "-")  # a Unicode minus is a minus
    text = _THOUSANDS.sub("", text)
    text = strip_punctuation(_MEANINGFUL.sub(lambda m: "".join(_KEEP[c] for c in m.group()), text))
    return " ".join(_ARTICLES.sub(" ", text).split()).translate(_RESTORE)


_JOINERS = re.compile(r"(?<=[^\W\d_])['’.](?=[^\W\d_])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
#: A number keeps its minus sign where the minus is not a hyphen (``-5``, ``(-5)``; not ``5-10`` or ``COVID-19``)
#: and a leading decimal point (``.5``; not the dot of ``v.5``); a word keeps the ``++`` / ``#`` of ``C++``, ``C#``.
_TOKEN = re.compile(r"(?:(?<![\w.-])-)?(?:\d+(?:\.\d+)?|(?<![\w.])\.\d+)|[^\W\d_]+(?:\+\+|#)?")


def tokens(text: str) -> list[str]:
    """Word and number tokens, normalised for comparison: case-folded, no diacritics, punctuation or invisible
    format characters (``"Pa\u00adris"`` is ``paris``).

    ``"U.S."`` and ``"don't"`` keep one token (``us``, ``dont``); hyphens split (``twenty-one`` -> two tokens);
    ``"1,000"`` -> ``1000``, ``"3.5"`` stays one token, ``".5"`` keeps its point, ``"-5"`` (or ``"\u22125"``) its
    sign, and ``"C++"`` / ``"C#"`` their marks (``c++``, ``c#``: not ``c``).
    """
    text = strip_diacritics(strip_format_chars(text).replace("\u2212", "-")).casefold()
    return _TOKEN.findall(_THOUSANDS.sub("", _JOINERS.sub("", text)))
