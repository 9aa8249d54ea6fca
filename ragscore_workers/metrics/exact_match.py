"""``exact_match``: the normalised answer equals the normalised reference."""

from __future__ import annotations

from ..schemas import MetricResult, Queue, Row
from ._text import normalize_answer
from .registry import NoParams, register


@register("exact_match", Queue.CPU, needs=("answer", "reference"))
def exact_match(row: Row, params: NoParams) -> MetricResult:
    """1.0 when the normalised answer equals the normalised reference, else 0.0."""
    if row.reference is None:
        return MetricResult.unscorable("no reference")
    if not row.reference.strip():  # nothing to match (as the embedding metrics: a blank reference is none)
        return MetricResult.unscorable("empty reference")
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    answer, reference = normalize_answer(row.answer), normalize_answer(row.reference)
    if not answer and not reference:  # only articles or punctuation ("The" vs "An"): compare as written
        answer, reference = row.answer.strip().casefold(), row.reference.strip().casefold()
    hit = answer == reference
    return MetricResult(score=1.0 if hit else 0.0, passed=hit)
