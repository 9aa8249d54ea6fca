"""``evidence_overlap`` (document-grounded QA framework): word overlap of gold vs predicted evidence.

e = |words(G) ∩ words(P)| / |words(G)|, where words(X) is the set of lower-cased, whitespace-split
tokens of the text of the sentences whose IDs are in X (IDs the document lacks contribute nothing).
The text comes from the row's ``sentences`` map, else, with ``corpus_dir`` set, from the document
``gold_doc_id`` names in that directory (see ``_corpus``). The seed's special cases, in this order:

1. no gold IDs (``[]``): 1.0 if no predicted IDs, else 0.0;
2. no gold words (the IDs name no text): 1.0 if no predicted words, else 0.0;
3. no document text at all: fall back to |G ∩ P| / |G| on the IDs themselves.

An absent ``gold_evidence_sentences`` or ``evidence_sentences`` field is unscorable.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..schemas import MetricResult, Queue, Row
from ._corpus import corpus_sentences
from .citation import id_set
from .registry import register, unset_means

__all__ = ["EvidenceParams", "evidence_overlap", "overlap_score", "words_of"]


class EvidenceParams(BaseModel):
    """``corpus_dir``: directory of sentence-segmented documents, used when a row has no ``sentences``."""

    model_config = ConfigDict(extra="forbid")

    corpus_dir: str | None = Field(default=None, json_schema_extra=unset_means("the rows' own sentences only"))


def words_of(sentences: dict[str, str], ids: set[str]) -> set[str]:
    """Lower-cased whitespace tokens of the sentences named by ``ids``."""
    return {w for sid in ids if sid in sentences for w in sentences[sid].lower().split()}


def overlap_score(gold: set[str], predicted: set[str], sentences: dict[str, str] | None) -> tuple[float, dict]:
    """The evidence score and how it was reached (``method``: ``empty_gold``, ``words`` or ``ids``)."""
    if not gold:
        return (0.0 if predicted else 1.0), {"method": "empty_gold"}
    if not sentences:
        hits = len(gold & predicted)
        return hits / len(gold), {"method": "ids", "matched": hits}
    gold_words, pred_words = words_of(sentences, gold), words_of(sentences, predicted)
    details = {
        "method": "words",
        "gold_words": len(gold_words),
        "pred_words": len(pred_words),
        "shared_words": len(gold_words & pred_words),
        "unknown_ids": sorted((gold | predicted) - sentences.keys()),
    }
    if not gold_words:
        return (0.0 if pred_words else 1.0), details
    return len(gold_words & pred_words) / len(gold_words), details


def _document(row: Row, params: EvidenceParams) -> tuple[dict[str, str] | None, str]:
    if row.sentences:
        return row.sentences, "row"
    if not params.corpus_dir:
        return None, "none"
    gold_doc = row.gold_doc_id if isinstance(row.gold_doc_id, str) else (row.gold_doc_id or [None])[0]
    if not gold_doc:
        return None, "no gold_doc_id"
    found = corpus_sentences(params.corpus_dir, gold_doc)
    return found, f"corpus:{gold_doc}" if found else f"no sentences in corpus for {gold_doc}"


@register("evidence_overlap", Queue.CPU, params=EvidenceParams, needs=("gold_evidence_sentences", "evidence_sentences"))
def evidence_overlap(row: Row, params: EvidenceParams) -> MetricResult:
    """Share of the gold evidence's words that the predicted evidence sentences contain."""
    if row.gold_evidence_sentences is None:
        return MetricResult.unscorable("no gold_evidence_sentences")
    if row.evidence_sentences is None:
        return MetricResult.unscorable("no evidence_sentences (predicted sentence IDs)")
    gold, predicted = id_set(row.gold_evidence_sentences), id_set(row.evidence_sentences)
    sentences, source = _document(row, params) if gold else (None, "none")
    score, details = overlap_score(gold, predicted, sentences)
    return MetricResult(score=score, details={**details, "source": source})
