"""``typed_answer`` (Socioscope): score an answer by its ``question_type`` against weighted ``expected`` values.

* Yes/No: 1.0 when the answer's yes/no (its first yes/no word not asked about, "yes?", "Yes/no?": :func:`_said`) is the
  expected one, else 0.0.
* ListOne / PickOne: the largest weight among the matched expected values (0.0 when none matches).
* ListMany / PickMany: the sum of the matched values' weights, each value counted once, capped at 1.0.
* Yes/No with Rationale: 0.0 when the yes/no is wrong or missing, else
  ``polarity_weight + (1 - polarity_weight) * support`` (see :func:`rationale_support`).

A value matches when its comparison form (or that of one of its WordNet synonyms, which carry its full
weight; none for a one-character or numeric value) occurs as whole words inside one answer item; a value of
stopwords only must be a whole item, unless it is option ``A`` or ``I`` written as a label (``(A)``, ``A) Paris``,
"The answer is A.", "I'd go with A", "I'd say A", "A and C", ``a) Paris`` outside an ``a) b)`` enumeration,
``A: Paris`` outside a Q/A transcript, whose ``A:`` speaker label is stripped: :class:`_Label`, :func:`_turns`;
not asked about, "A?", nor after a negation, "I would not choose A": :func:`_picks`); the label forms are
ragscore's addition to the whole-item rule. Options restated beside the pick ("A) Paris", "B) Lyon", "Answer: B")
are read for the given one only; two or more options restated with nothing else are no choice for a One type,
unless a retraction to a choice is in them, and each a pick for a Many type (:func:`_unrestated`; labels on one
line written differently restate none: "A. Hmm, (B) seems right."). In a One type's answer a retraction whose next
sentence is a choice and nothing else ("No, wait: C.") drops the choices before it, unless one of them is named
again after that sentence (:func:`_retraction`). Missing inputs are unscorable; an ``expected`` or
``question_type`` outside the grammar is a per-row error saying why.
Grammar: docs/metrics/deterministic.md.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..schemas import MetricResult, Queue, Row
from ._numbers import is_number
from ._typed_values import (
    NEGATORS,
    NO,
    STOPWORDS,
    YES,
    ExpectedError,
    ExpectedValue,
    answer_items,
    parse_expected,
    parse_question_type,
    polarity,
    raw_items,
    terms,
)
from ._wordnet import synonyms
from .registry import register

__all__ = ["TypedAnswerParams", "rationale_support", "typed_answer"]


class TypedAnswerParams(BaseModel):
    """``synonyms``: WordNet enrichment; ``polarity_weight``: share of a right yes/no in a rationale score;
    ``min_rationale_words``: content words that make a full rationale when there is no ``reference``."""

    model_config = ConfigDict(extra="forbid")

    synonyms: bool = True
    polarity_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    min_rationale_words: int = Field(default=3, ge=1)


#: An option label written as a Roman numeral (``IV``, ``XII``), upper case: WordNet's synonyms of it are numbers.
_ROMAN = re.compile(r"M{0,4}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")


def _enriched(value: ExpectedValue) -> bool:
    """Whether WordNet synonyms stand for the value: not for one character, a number or an upper-case Roman numeral,
    whose synsets are other symbols and numerals (``C`` is 100, ``D`` 500, ``IV`` is 4, ``100`` is ``C``), not the
    same option."""
    if len(value.term) <= 1 or all(is_number(t) for t in value.term.split()):
        return False
    return not _ROMAN.fullmatch(value.text.strip())


def _owners(values: list[ExpectedValue], use_synonyms: bool) -> dict[str, tuple[int, str]]:
    """Comparison term -> (value index, how it was found). A term belongs to one value only: the value's own
    term first, then synonyms, a shared synonym going to the heaviest value (the first on ties)."""
    owners = {v.term: (i, "value") for i, v in enumerate(values)}
    if not use_synonyms:
        return owners
    for i in sorted(range(len(values)), key=lambda j: -values[j].weight):
        if not _enriched(values[i]):
            continue
        keys = {values[i].text, " ".join(values[i].term.split())}
        names = sorted(set().union(*(synonyms(k) for k in keys)))
        for name in names:
            term = terms(name)
            if term and not (len(term) == 1 and term.isalpha()) and term not in owners:
                owners[term] = (i, f"synonym:{name}")
    return owners


def _found(term: str, items: list[str]) -> bool:
    if all(w in STOPWORDS for w in term.split()):  # "A", "the one": only as a whole item
        return term in items
    padded = f" {term} "
    return any(padded in f" {item} " for item in items)


@dataclass(frozen=True)
class _Label:
    """Where an option label that is also a stopword (``A``, ``I``) stands written as a label in an answer item:

    * ``always``: ``(A)`` / ``[A]`` anywhere but before ``?``, any case; upper case only, ``A)`` / ``A.`` at the
      item's start, and ``A`` after a cue (:data:`_CUE`: ``answer is``, ``option``, ``go with``, ``I'd say``,
      ``vote``, …) when no word follows it but ``is`` (the article in "Answer: A city" and the pronoun in "Answer:
      I think B" are followed by one), and ``A`` among upper-case letters joined by ``and`` / ``&`` at the item's
      start or after a cue, followed as a cued ``A`` is ("A and C", "Answer: C & A"; not "A and B are wrong");
    * ``colon``: ``A:`` at the item's start, unless the answer is a Q/A transcript (a ``Q:`` item, or ``A:``
      starting two items), where it is a speaker label, stripped by :func:`_turns` before these patterns look;
    * ``lower``: ``a)`` / ``a.`` at the item's start (not an ``a.`` / ``i.`` that starts an abbreviation, a
      letter and a dot after it: ``i. e.``, ``a. k. a.``), unless the answer enumerates (another lower-case letter or
      Roman-numeral label anywhere in it, at an item's start or after a space: ``a) cheap; b) fast``,
      ``a) cheap and b) fast``, ``a)cheap b)fast``, ``i) ... ii) ...``; not an abbreviation's letters, ``e. g.``).

    Markdown ``**`` / ``_`` may wrap the letter."""

    always: re.Pattern[str]
    colon: re.Pattern[str]
    lower: re.Pattern[str]


_BOLD = r"[*_]{0,2}"
#: A lower-case letter or Roman-numeral label (``b)``, ``ii.``) at an item's start or after a space, written as
#: :class:`_Label`'s ``lower`` writes ``a)`` / ``a.`` (no space needed after ``)``): two make an enumeration.
_LOWER_MARK = re.compile(rf"(?<!\S){_BOLD}(?:[a-z]|[ivx]{{2,}}){_BOLD}(?:\)|\.{_BOLD}(?=\s|$))")
#: An abbreviation of spaced single letters with dots (``e. g.``, ``i. e.``, ``a. k. a.``), whose letters are no
#: enumeration markers.
_ABBREVIATION = re.compile(r"(?<!\S)[A-Za-z]\.(?:[ \t]+[A-Za-z]\.)+(?!\w)")
#: After ``A.`` / ``a.``: not another letter and dot, as an abbreviation or a name's initials go on (``a. k. a.``,
#: ``i. e.``, ``A. A. Milne``, ``I. M. Pei``).
_NOT_INITIALS = rf"(?![ \t]+{_BOLD}[A-Za-z]{_BOLD}\.)"
#: A speaker label at an item's start (``Q:``, ``A:``), as a Q/A transcript writes its turns.
_SPEAKER = re.compile(rf"^\s*{_BOLD}([QA]){_BOLD}:{_BOLD}")


#: Words that, before an option label, pick it (any case; an ``is`` / ``are`` may follow): "answer", "option",
#: "go with" and the like, "say" after a first-person "I" ("I'd say A"; "They say A is wrong" picks nothing), "vote"
#: after "I" or "my" ("Most people vote A" picks nothing); none after "wrong" / "incorrect" ("The wrong answers are
#: A and C").
_CUE = (
    r"(?i:\b(?<!wrong\s)(?<!incorrect\s)(?:answers?|option|choice|choose|pick|select"
    r"|(?<=\bI\s)vote(?:\s+for)?|(?<=\bmy\s)vote"
    r"|(?:go|goes|going|gone|went)\s+(?:with|for)|I(?:['’]d|['’]ll|\s+would|\s+will)?\s+say)(?:\s+(?:is|are))?)"
    r"(?:\s*:\s*|\s+)"
)
#: What may follow a bare label: the end of the item, punctuation but ``?``, a spaced dash or ``is``, no other word.
#: A label before ``?`` is asked about, not picked ("Would I say A? No. The answer is B").
_ENDS = r"(?=\s*(?:$|[,;:)!\]]|\.(?!\w))|\s+(?:[-–—]|is\b))"
#: What follows a word or label that is asked about, not said: ``?``, spaces, an ellipsis and a closing Markdown mark
#: or double quote before it allowed ("**yes**?", '"yes"?', "yes...?"; a label's ``_ENDS`` leaves it out; a yes/no
#: word before it is no answer: :func:`_said`).
_ASKED = r"[*_\"”.…]*\s*\?"
#: An upper-case option letter (Q aside), alone, and the ``and`` / ``&`` that joins two in a multi-answer reply.
_LETTER = rf"{_BOLD}[A-PR-Z]{_BOLD}(?![\w'’])"  # no Q: "Q&A", "Q and A" name a FAQ
_JOIN = r"(?:\s+(?i:and)\s+|\s*&\s*)"


def _label(label: str) -> _Label:
    bracketed = rf"(?i:\({label}\)|\[{label}\])(?!{_ASKED})"
    first = rf"^\s*{_BOLD}{label}{_BOLD}(?:\)|\.{_BOLD}(?=\s|$){_NOT_INITIALS})"
    alone = rf"{_BOLD}{label}(?![\w'’]){_BOLD}"
    cued = rf"{_CUE}{alone}{_ENDS}"
    # "A and C", "The answer is C & A": letters joined at the item's start or after a cue, the label among them
    joined = rf"(?:^\s*|{_CUE})(?=(?:{_LETTER}{_JOIN})*{alone}){_LETTER}(?:{_JOIN}{_LETTER})+{_ENDS}"
    return _Label(
        always=re.compile(f"{bracketed}|{first}|{cued}|{joined}"),
        colon=re.compile(rf"^\s*{_BOLD}{label}{_BOLD}:{_BOLD}(?=\s|$)"),
        lower=re.compile(rf"^\s*{_BOLD}{label.lower()}{_BOLD}(?:\)|\.{_BOLD}(?=\s|$){_NOT_INITIALS})"),
    )


#: Stopword option labels (``a``, ``i``: "a" is an article, "I" a pronoun), comparison form -> :class:`_Label`.
_LABELS = {w: _label(w.upper()) for w in sorted(STOPWORDS) if len(w) == 1}
#: A line restating an option: ``A) Paris``, ``(B) Lyon``, ``C. Nice`` (after a bullet); group ``letter`` or
#: ``bracketed`` the letter, group ``mark`` the ``)`` or ``.`` after a letter not bracketed.
_OPTION_LINE = re.compile(rf"^\s*{_BOLD}(?:\((?P<bracketed>[A-Z])\)|(?P<letter>[A-Z])(?P<mark>\)|\.(?=\s)))")
#: A line that is a final answer and nothing else: "Answer: B", "The answer is (B).", "**B**", "Answers: A and C".
_ANSWER_LINE = re.compile(
    rf"^\s*(?:{_BOLD}(?i:(?:the\s+)?(?:final\s+|correct\s+)?answers?(?:\s+(?:is|are))?){_BOLD}\s*[:\-–—]?\s*)?"
    rf"((?:{_BOLD}\(?[A-Z]\)?{_BOLD}(?:{_JOIN}|\s*,\s*)?)+)\s*[.!]?\s*$"
)


def _answered(line: str) -> set[str]:
    """The option letters a line gives as the final answer (:data:`_ANSWER_LINE`), none for any other line: a
    letter named in passing ("Option B is wrong", "I would pick C to visit") is no final answer."""
    found = _ANSWER_LINE.match(line)
    return set(re.findall(r"[A-Z]", found.group(1))) if found else set()


def _restated(line: str) -> list[str | None]:
    """For each item of the line (:func:`raw_items`), the option it restates: the letter of the last item so far
    that starts with a label (``A) Paris``, ``(B) Lyon``, ``C. Nice``), so the words after an option are its own
    ("A) Paris, the capital; B) Lyon" is A, A, B); all None when the line does not start with one, or when its
    labels are not written alike, as a list writes them ("A. Actually, (B)." and "A. Hmm, (B) seems right." restate
    no options: the ``(B)`` is a choice)."""
    items = raw_items(line)
    labels = [_OPTION_LINE.match(item) for item in items]
    styles = {found.group("mark") or "()" for found in labels if found}
    if not labels or not labels[0] or len(styles) > 1:
        return [None] * len(items)
    owners: list[str | None] = []
    for found in labels:
        owners.append((found.group("bracketed") or found.group("letter")) if found else owners[-1])
    return owners


def _unrestated(answer: str, many: bool) -> str:
    """The answer without the options it restates beside its final answer: when two or more options are restated
    by lines that start with the labels ``A``, ``B``, … in order (``A) Paris``, ``(B) Lyon``, ``C. Nice``, or on
    one line, "A) Paris; B) Lyon": :func:`_restated`) and another line is a final answer among them and nothing
    else (:func:`_answered`: "Answer: B"), the restated options not given are dropped ("B) Lyon" stays, so an
    expected ``Lyon`` matches as ``B`` does). When the answer is those lines and nothing else (lines with no word
    aside), a one-answer question (``many`` false) is given none of them: nothing is left ("A) Paris\nB) Lyon"
    picks neither); a many-answer question is given each of them, the answer as it is (the metric cannot know how
    many options there were). Otherwise the answer as it is."""
    lines = answer.splitlines()
    owners = [_restated(line) for line in lines]
    letters = "".join(o for line in owners for j, o in enumerate(line) if o and (j == 0 or o != line[j - 1]))
    if len(letters) < 2 or letters != string.ascii_uppercase[: len(letters)]:
        return answer
    restating = [bool(o and o[0]) for o in owners]
    if all(r or not terms(line) for line, r in zip(lines, restating, strict=True)):
        # two or more options and no word else (a blank line, a code fence or a rule says nothing): no choice of one
        return answer if many else ""
    given = set().union(*(_answered(line) for line, r in zip(lines, restating, strict=True) if not r))
    if not given or not given <= set(letters):
        return answer
    kept: list[str] = []
    for line, line_owners, restates in zip(lines, owners, restating, strict=True):
        if not restates:
            kept.append(line)
        else:  # the items of the options given ("B) Lyon, a city"), not those of the others
            kept += [item for item, o in zip(raw_items(line), line_owners, strict=True) if o in given]
    return "\n".join(kept)


def _turns(raw: list[str]) -> tuple[list[str], bool]:
    """The answer's items as written, and whether they are a Q/A transcript (a ``Q:`` item, or ``A:`` starting
    two items). In a transcript each answer turn's ``A:`` speaker label is stripped, what follows it an item of
    its own ("A: A" is the item "A", "A: A) Paris" the item "A) Paris")."""
    speakers = [(m.group(1), m.end()) if m else None for m in map(_SPEAKER.match, raw)]
    said = [s[0] for s in speakers if s]
    if "Q" not in said and said.count("A") < 2:
        return raw, False
    return [item[s[1] :] if s and s[0] == "A" else item for item, s in zip(raw, speakers, strict=True)], True


#: How far before a label or its cue :func:`_negated` looks: any :data:`NEGATORS` word and the spaces or Markdown
#: after it fit, and an item with many labels is read in linear time, not quadratic.
_NEGATION_REACH = 40


def _negated(item: str, at: int) -> bool:
    """Whether the item's text before position ``at`` (a label or its cue) ends with a :data:`NEGATORS` word:
    "I would not choose A", "I don't pick A", "not (A)" pick nothing; punctuation ends a negation ("Maybe not.
    Answer: A" picks A)."""
    before = item[max(0, at - _NEGATION_REACH) : at].rstrip(" \t*_")
    if not before[-1:].isalnum():
        return False
    words = terms(before.rsplit(maxsplit=1)[-1]).split()
    return bool(words) and words[-1] in NEGATORS


def _picks(pattern: re.Pattern[str], item: str) -> bool:
    """Whether the label pattern matches in the item where no negation comes right before it (:func:`_negated`)."""
    return any(not _negated(item, found.start()) for found in pattern.finditer(item))


def _labelled(term: str, raw: list[str], transcript: bool) -> bool:
    """Whether a stopword option label is written as a label in one of the answer's items as written (a
    transcript's with their speaker labels stripped: :func:`_turns`)."""
    label = _LABELS.get(term)
    if label is None:
        return False
    enumerates = sum(len(_LOWER_MARK.findall(_ABBREVIATION.sub(" ", item))) for item in raw) > 1
    return any(
        _picks(label.always, item)
        or (not transcript and label.colon.search(item))
        or (not enumerates and label.lower.search(item))
        for item in raw
    )


#: A retraction marker: "wait" and punctuation ("No, wait:", "Hmm, wait..."), "actually" and punctuation,
#: "correction:", "I mean". What comes after the last one may replace the choices before it (:func:`_retraction`).
_RETRACTION = re.compile(r"(?i:\b(?:wait|actually|correction)\s*[,:;.!—–-]|\bI\s+mean\b)")
#: What may open the first sentence after a retraction marker, before the choice it states: punctuation, a "no"
#: and punctuation ("Wait, no: (B)"; "Actually, no answer is C" states none), "it's" / "it is", "the answer is" /
#: "answer:" and "make that" ("Hmm, wait... it's E").
_RETRACTION_LEAD = re.compile(
    r"^[\s,:;.!…—–-]*(?i:no\s*[,:;.!…—–-]+\s*)?"
    r"(?i:(?:it['’]?s|it\s+is|(?:the\s+)?(?:correct\s+|final\s+)?answer\s*(?:is\b|:)|make\s+(?:it|that))\s*)?"
)
#: The end of the first sentence after a retraction marker: ``.`` / ``!`` / ``?`` before a space or the end, or a
#: line break ("U.S." and "D.2" go on).
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")


def _restates_choice(head: str, owners: dict[str, tuple[int, str]]) -> bool:
    """Whether the first sentence after a retraction marker, its lead words aside (:data:`_RETRACTION_LEAD`), is a
    choice and nothing else: option letters as a final answer line writes them (:func:`_answered`: "C.", "(B)",
    "**E**") or a value's whole text ("Lyon."); not a sentence that names one in passing ("the U.S. one", "not C",
    "it is better than C", "Lyon is second"), nor one asked about ("Lyon?", as a label before ``?`` is)."""
    said = terms(head)
    if head.rstrip().endswith("?"):
        return False
    return bool(_answered(head)) or (bool(said) and said in owners)


def _matched(values: list[ExpectedValue], answer: str, use_synonyms: bool) -> dict[int, str]:
    """The values the answer matches, index -> how (``value`` or ``synonym:<lemma>``)."""
    raw, transcript = _turns(raw_items(answer))
    items = answer_items(raw)
    matched: dict[int, str] = {}
    for term, (i, via) in _owners(values, use_synonyms).items():
        if i not in matched and (_found(term, items) or _labelled(term, raw, transcript)):
            matched[i] = via
    return matched


def _named(value: ExpectedValue, text: str) -> bool:
    """Whether the text writes the value as given, a whole word, case kept ("A is correct" names ``A``, "a city"
    does not)."""
    return re.search(rf"(?<![\w'’]){re.escape(value.text.strip())}(?![\w'’])", text) is not None


def _retraction(values: list[ExpectedValue], answer: str, use_synonyms: bool) -> tuple[str, dict[int, str]] | None:
    """For a one-answer question: the last retraction marker (:data:`_RETRACTION`) and the values the answer
    matches from the choice after it on (its lead words aside, :data:`_RETRACTION_LEAD`), when the first sentence
    after it is a choice and nothing else (:func:`_restates_choice`: "A. No, wait: C.") and no choice it drops is
    named again after that sentence ("A. Wait, B. No, A is correct."); None otherwise ("A. Actually, that is
    right." and "A. Wait, the U.S. one" keep ``A``)."""
    last = None
    for found in _RETRACTION.finditer(answer):
        last = found
    if last is None:
        return None
    rest = answer[last.end() :]
    lead = _RETRACTION_LEAD.match(rest)
    start = lead.end() if lead else 0
    end = _SENTENCE_END.search(rest, start)
    stop = end.end() if end else len(rest)
    if not _restates_choice(rest[start:stop], _owners(values, use_synonyms)):
        return None
    chosen = _matched(values, rest[start:], use_synonyms)
    dropped = _matched(values, answer[: last.start()], use_synonyms).keys() - chosen.keys()
    after = rest[stop:]
    if dropped and (
        dropped & _matched(values, after, use_synonyms).keys() or any(_named(values[i], after) for i in dropped)
    ):
        return None
    return last.group(), chosen


def _choice(values: list[ExpectedValue], answer: str, many: bool, use_synonyms: bool) -> MetricResult:
    read = _unrestated(answer, many)
    # a retraction to a choice in what reads as options restated with nothing else ("(A). Actually, (B).") is a choice
    retraction = None if many else _retraction(values, read or answer, use_synonyms)
    marker, matched = retraction or (None, _matched(values, read, use_synonyms))
    weights = [values[i].weight for i in matched]
    score = min(1.0, sum(weights)) if many else max(weights, default=0.0)
    details: dict[str, Any] = {
        "matched": [{"value": values[i].text, "weight": values[i].weight, "by": via} for i, via in matched.items()],
        "unmatched": [v.text for i, v in enumerate(values) if i not in matched],
    }
    if marker:
        details["retraction"] = marker
    if answer and not read and not marker:  # a scored 0.0, not unscorable: the answer is there, it chooses none
        details["reason"] = "options restated with nothing else: no choice of one"
    return MetricResult(score=score, passed=score >= 1.0, details=details)


def _expected_polarity(values: list[ExpectedValue]) -> bool:
    found = {polarity(v.term.split())[0] for v in values}
    if None in found or len(found) != 1:
        raise ExpectedError(f"a Yes/No expected value must be one yes or one no, got {[v.text for v in values]}")
    return found.pop() is True


#: Words that are not content words of a rationale or its reference: stopwords and yes/no words.
NOT_CONTENT = STOPWORDS | YES | NO


def rationale_support(rationale: set[str], reference: str | None, min_words: int) -> tuple[float, str]:
    """Share of the reference's content words (not :data:`NOT_CONTENT`, as for the rationale) the rationale
    contains; without a reference (or one with no content words), the rationale's content words over
    ``min_words``, capped at 1. Returns (support, basis)."""
    ref = {w for w in terms(reference).split() if w not in NOT_CONTENT} if reference else set()
    if ref:
        return len(ref & rationale) / len(ref), "reference"
    return min(1.0, len(rationale) / min_words), "length"


#: A word right before ``?`` (:data:`_ASKED`), read from its start only (linear in the answer).
_ASKED_WORD = re.compile(rf"(?<![\w'’])[\w'’]+(?={_ASKED})")
#: A ``/`` between two words ("yes/no", "yes / no"), which :func:`_said` reads as ``or``.
_SLASH = re.compile(r"(?<=[\w'’])\s*/\s*(?=[\w'’])")


def _said(answer: str) -> tuple[list[str], set[int]]:
    """The answer's words (:func:`terms`) and the positions of the yes/no words asked about, as a label before ``?``
    is: the word right before ``?`` and those joined to it by ``or`` / ``and`` ("Would I say yes? No", "Yes or no?
    No"; a ``/`` joins as ``or`` does: "Yes/no? No"). The answer is cut after each such word only, so its other words
    are read as a whole. A yes/no word that is the whole answer is said, ``?`` or not ("Yes?" is yes, as a
    whole-answer "A?" picks ``A``)."""
    answer = _SLASH.sub(" or ", answer)
    words: list[str] = []
    asked: set[int] = set()
    start = 0
    for found in _ASKED_WORD.finditer(answer):
        if terms(found.group()) not in YES | NO:
            continue
        words += terms(answer[start : found.end()]).split()
        start, j = found.end(), len(words) - 1
        while j >= 0 and words[j] in YES | NO and j not in asked:  # a word asked already: its chain walked (linear)
            asked.add(j)
            j = j - 2 if j >= 2 and words[j - 1] in ("or", "and") else -1
    words += terms(answer[start:]).split()
    return words, asked if len(words) > 1 else set()


def _yes_no(expected: bool, row: Row, answer: str, params: TypedAnswerParams, rationale: bool) -> MetricResult:
    words, asked = _said(answer)
    said, used = polarity(words, asked)
    answered = None if said is None else ("yes" if said else "no")
    details: dict[str, Any] = {"expected": "yes" if expected else "no", "answered": answered}
    if said != expected:
        return MetricResult(score=0.0, passed=False, details=details)
    if not rationale:
        return MetricResult(score=1.0, passed=True, details=details)
    content = {w for j, w in enumerate(words) if j not in used and w not in NOT_CONTENT}
    support, basis = rationale_support(content, row.reference, params.min_rationale_words)
    score = params.polarity_weight + (1.0 - params.polarity_weight) * support
    details |= {"support": support, "support_basis": basis, "rationale_words": len(content)}
    return MetricResult(score=score, passed=score >= 1.0, details=details)


@register("typed_answer", Queue.CPU, params=TypedAnswerParams, needs=("question_type", "answer", "expected"),
          reads=("reference",))  # fmt: skip
def typed_answer(row: Row, params: TypedAnswerParams) -> MetricResult:
    """Typed answer score by question type (Yes/No, List/Pick One/Many, Yes/No with Rationale)."""
    for field in ("question_type", "answer", "expected"):
        if getattr(row, field) is None:
            return MetricResult.unscorable(f"no {field}")
    assert row.question_type is not None and row.answer is not None  # narrowed above, for type checkers
    try:
        qtype = parse_question_type(row.question_type)
        values = parse_expected(row.expected)
        if qtype.startswith("Yes/No"):
            expected = _expected_polarity(values)
    except ExpectedError as exc:
        return MetricResult(error=f"invalid typed-answer input: {exc}", details={"question_type": row.question_type})
    if qtype.startswith("Yes/No"):
        result = _yes_no(expected, row, row.answer, params, rationale=qtype != "Yes/No")
    else:
        result = _choice(values, row.answer, many=qtype.endswith("Many"), use_synonyms=params.synonyms)
    result.details["question_type"] = qtype
    return result
