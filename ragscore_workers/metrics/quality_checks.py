"""``quality_checks`` (Auto-Analyst): heuristic issues of a generated answer; 1.0 with none, else 0.0.

Issues, in ``details.issues`` in this order: ``empty_answer``; ``no_contexts`` (no context with text, unless the row
says it retrieved nothing, ``Row.retrieved_nothing``, or a target that returns no contexts answered it,
``Row.answered_alone``: an LLM alone's, by design); ``no_citation`` (no match of
``citation_pattern``, default ``[n]``, ``[1, 2]`` or ``[1-3]``; not of a row without contexts that says it retrieved
nothing or that an LLM alone answered, ``Row.sourceless``: it has no source to cite); ``fallback_phrase`` (one of
``fallback_phrases``, case-insensitive, or a match of ``fallback_pattern``: by default a source that does not provide
the information, or information that is not enough);
``list_not_formatted`` (a list-style question answered with fewer than two bullet or numbered lines);
``low_retrieval_score`` (the mean ``score`` of the contexts that carry a finite one is below
``retrieval_threshold``; skipped when none does). The answer checks are skipped for an empty answer; a row
without an ``answer`` field is unscorable.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..schemas import CONTEXTS_WITHOUT_TEXT, MetricResult, Queue, Row
from ._bounded_regex import RegexError, bounded_regex
from ._text import CITATION_MARKER
from .registry import register

__all__ = ["QualityParams", "quality_checks"]

#: Phrases that mark a model's "no answer" fallback.
DEFAULT_FALLBACK_PHRASES = (
    "unable to generate",
    "could not find relevant information",
    "couldn't find relevant information",
    "no relevant information",
    "i don't know",
    "i do not know",
    "cannot answer",
    "can't answer",
    "not enough information",
    "insufficient information",
)
_SOURCE = r"(?:document|context|text|source|passage|excerpt|article|material)s?"
_NEGATED = r"(?:(?:do|does|did|could|is|are) not|(?:don|doesn|didn|couldn|isn|aren|can)'t|cannot)(?: \w+)?"
_INFO = r"(?:information|info|details?|data|evidence|answer)"
_TOO_LITTLE = r"(?:(?:not|n't(?: \w+)?) (?:enough|sufficient|adequate)|insufficient|inadequate)"
#: The "no answer" family no list of phrases covers: the (provided) document / context does not provide / contain
#: (sufficient) information ..., or (there is) not enough / insufficient information, or ... not sufficient to answer.
#: Too little of data or evidence is no fallback without a source: an answer may say it of its subject ("the trial
#: found insufficient evidence that ...").
DEFAULT_FALLBACK_PATTERN = (
    rf"\b{_SOURCE} {_NEGATED} (?:provide|contain|include|give|offer|have|mention|specify|state)s?(?: \w+){{0,3}} "
    rf"{_INFO}\b|{_TOO_LITTLE}(?: \w+){{0,2}} (?:info(?:rmation)?\b|to answer\b)"
)
_LIST_QUESTION = re.compile(
    r"\b(?:list|enumerate|steps|examples|ways|top \d+)\b|^\s*(?:what|which) are\b|"
    r"\bname (?:all|the|some|\d+|two|three|four|five)\b",
    re.IGNORECASE,
)
_LIST_LINE = re.compile(r"^\s*(?:[-*+•·‣◦▪]|\(?\d+[.)])\s+\S", re.MULTILINE)


class QualityParams(BaseModel):
    """``retrieval_threshold``: lowest acceptable mean retrieval score (finite); ``citation_pattern``: a regex;
    ``fallback_phrases``: matched case-insensitively anywhere in the answer; ``fallback_pattern``: a regex searched
    case-insensitively in the answer with its whitespace runs as one space and ’ as ' ("" drops it)."""

    model_config = ConfigDict(extra="forbid")

    retrieval_threshold: float = Field(default=0.25, allow_inf_nan=False)
    citation_pattern: str = CITATION_MARKER
    fallback_phrases: list[str] = Field(default_factory=lambda: list(DEFAULT_FALLBACK_PHRASES))
    fallback_pattern: str = DEFAULT_FALLBACK_PATTERN

    @field_validator("citation_pattern", "fallback_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            bounded_regex(value)
        except RegexError as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


def _fold(text: str) -> str:
    return " ".join(text.replace("’", "'").casefold().split())


def _is_fallback(folded: str, params: QualityParams) -> bool:
    if any(_fold(p) and _fold(p) in folded for p in params.fallback_phrases):
        return True
    return bool(params.fallback_pattern) and bool(bounded_regex(params.fallback_pattern, re.IGNORECASE).search(folded))


def _answer_issues(answer: str, question: str | None, params: QualityParams, *, cites: bool) -> list[str]:
    """The issues of a non-empty answer; ``no_citation`` only where it ``cites`` (it had a source to cite)."""
    issues = []
    if cites and not bounded_regex(params.citation_pattern).search(answer):
        issues.append("no_citation")
    if _is_fallback(_fold(answer), params):
        issues.append("fallback_phrase")
    if question and _LIST_QUESTION.search(question) and len(_LIST_LINE.findall(answer)) < 2:
        issues.append("list_not_formatted")
    return issues


@register("quality_checks", Queue.CPU, params=QualityParams, needs=("answer",),
          reads=("question", CONTEXTS_WITHOUT_TEXT, "retrieved_doc_ids"))  # fmt: skip
def quality_checks(row: Row, params: QualityParams) -> MetricResult:
    """1.0 when the answer shows none of the heuristic issues, else 0.0; the issues are listed. By default an answer
    needs a [1]-style citation marker (else the issue no_citation): set the param citation_pattern to "" to drop that
    check."""
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    issues = []
    details: dict[str, Any] = {}
    if not row.answer.strip():
        issues.append("empty_answer")
    if not row.has_contexts and not row.sourceless:  # by design: an LLM alone, or a retrieval that found nothing
        issues.append("no_contexts")
    if row.answer.strip():  # a row with no source has nothing to cite: recall_at_k scores its empty retrieval
        issues += _answer_issues(row.answer, row.question, params, cites=not row.sourceless)
    scores = [c.score for c in row.contexts if c.score is not None and math.isfinite(c.score)]
    if scores:
        details["mean_retrieval_score"] = sum(scores) / len(scores)
        if details["mean_retrieval_score"] < params.retrieval_threshold:
            issues.append("low_retrieval_score")
    return MetricResult(score=0.0 if issues else 1.0, passed=not issues, details={"issues": issues, **details})
