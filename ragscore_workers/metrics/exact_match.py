"""``exact_match``: the normalised answer equals the normalised reference."""

from __future__ import annotations

from ..schemas import MetricResult, Queue, Row
from ._text import normalize_answer, strip_diacritics, strip_format_chars, strip_punctuation
from .registry import NoParams, register

SHOWN_CHARS = 200  # of each side kept in a miss's details: enough to see why, bounded for 10^6-row runs


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


def _as_written(text: str) -> str:
    """The fallback form when normalising leaves nothing of either side: articles kept, but case, diacritics,
    punctuation and spacing still aside (``"A."`` is ``"a"``, ``"An"`` is not ``"The"``); text that is only
    punctuation stays as written, so ``"?"`` is not ``"!"``."""
    folded = strip_diacritics(strip_format_chars(text).casefold())
    return " ".join(strip_punctuation(folded).split()) or folded.strip()


@register("exact_match", Queue.CPU, needs=("answer", "reference"), reads=())
def exact_match(row: Row, params: NoParams) -> MetricResult:
    """1.0 when the normalised answer equals the normalised reference, else 0.0.

    Numbers compare as written, never by value: ``"3.0"`` is not ``"3"`` and ``"007"`` is not ``"7"``, as in
    SQuAD's exact match, whose ``normalize_answer`` this extends (SQuAD reads ``"3.0"`` as ``"30"``, never ``"3"``):
    an exact match asks for the reference's form, and a score that read numbers by value would not be comparable
    with SQuAD-style results. ``typed_answer`` compares numbers by value (``5.0`` is ``5``).

    A miss keeps the two normalised texts in its details (so a report's worst items show what was compared);
    a hit keeps none.
    """
    if row.reference is None:
        return MetricResult.unscorable("no reference")
    if not row.reference.strip():  # nothing to match (as the embedding metrics: a blank reference is none)
        return MetricResult.unscorable("empty reference")
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    answer, reference = normalize_answer(row.answer), normalize_answer(row.reference)
    if not answer and not reference:  # only articles or punctuation ("The" vs "An"): compare as written
        answer, reference = _as_written(row.answer), _as_written(row.reference)
    if answer == reference:
        return MetricResult(score=1.0, passed=True)
    return MetricResult(score=0.0, passed=False, details={"answer": _shown(answer), "reference": _shown(reference)})
