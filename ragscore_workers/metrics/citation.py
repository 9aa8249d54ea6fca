"""``citation`` (document-grounded QA framework): precision, recall and F1 of cited sentence IDs.

Over the sets G = ``gold_evidence_sentences`` and P = ``evidence_sentences`` (IDs compared as strings,
surrounding whitespace ignored, duplicates counted once):

* precision = |G ∩ P| / |P|, recall = |G ∩ P| / |G|, F1 = 2·p·r / (p + r) (0 when p + r = 0);
* a row without gold evidence (field absent or empty) is unscorable: there is nothing to find;
* an empty prediction scores 0 on all three; an absent ``evidence_sentences`` field is unscorable
  (:func:`no_evidence`: by design, ``no evidence_sentences``, in a row an LLM alone answered or whose retrieval found
  nothing).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..schemas import CONTEXTS_WITHOUT_TEXT, MetricResult, Queue, Row
from .registry import NO_EVIDENCE, NoParams, register

__all__ = ["CITATION_OUTPUTS", "citation", "id_set", "no_evidence", "prf"]

CITATION_OUTPUTS = ["citation_precision", "citation_recall", "citation_f1"]


def id_set(ids: Iterable[str]) -> set[str]:
    """Sentence IDs as a set of stripped strings, blanks dropped."""
    return {s for s in (str(i).strip() for i in ids) if s}


def no_evidence(row: Row) -> MetricResult:
    """A row without ``evidence_sentences``, unscorable: by design where it retrieved no document whose sentences it
    could name (an LLM alone answered it, ``Row.answered_alone``, or, without contexts, its retrieval found nothing,
    ``Row.sourceless``: ``recall_at_k`` scores that 0, as ``verbatim`` leaves it ``no contexts``), else for lack of
    them."""
    return MetricResult.unscorable(
        NO_EVIDENCE if row.evidence_unnamed_by_design else f"{NO_EVIDENCE} (predicted sentence IDs)"
    )


def prf(gold: set[str], predicted: set[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of ``predicted`` against non-empty ``gold``; all 0 for an empty prediction."""
    hits = len(gold & predicted)
    precision = hits / len(predicted) if predicted else 0.0
    recall = hits / len(gold)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


@register("citation", Queue.CPU, outputs=lambda params: list(CITATION_OUTPUTS),
          needs=("gold_evidence_sentences", "evidence_sentences"),
          reads=(CONTEXTS_WITHOUT_TEXT, "retrieved_doc_ids"))  # fmt: skip  # no_evidence: Row.sourceless
def citation(row: Row, params: NoParams) -> dict[str, MetricResult]:
    """Citation precision, recall and F1 of predicted sentence IDs against the gold evidence IDs."""
    gold = id_set(row.gold_evidence_sentences or [])
    if not gold:
        reason = MetricResult.unscorable("no gold_evidence_sentences")
        return dict.fromkeys(CITATION_OUTPUTS, reason)
    if row.evidence_sentences is None:
        return dict.fromkeys(CITATION_OUTPUTS, no_evidence(row))
    predicted = id_set(row.evidence_sentences)
    scores = prf(gold, predicted)
    details = {
        "gold": len(gold),
        "predicted": len(predicted),
        "matched": sorted(gold & predicted),
        "missed": sorted(gold - predicted),
        "extra": sorted(predicted - gold),
    }
    return {name: MetricResult(score=s, details=details) for name, s in zip(CITATION_OUTPUTS, scores, strict=True)}
