"""``verbatim`` (Socioscope): are the answer's quoted citations really in the contexts they cite?

A citation ``{source_index, quote}`` is found when ``quote.strip()`` is a substring of
``contexts[source_index].text``. ``existence_score`` = found / quoted is the score. A row without citations
is unscorable; an empty quote or an out-of-range ``source_index`` (negative included) is not found, and the
details say why. ``details.normalized_score`` repeats the count after folding whitespace runs to one space,
curly quotes, primes and guillemets to straight ones, ``…`` to ``...`` and composed and decomposed accents to
one form (NFC), on both sides (case and everything else kept).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from ..schemas import Citation, MetricResult, Queue, Row
from .registry import NoParams, register

__all__ = ["normalize_quotes", "verbatim"]

_QUOTES = str.maketrans({c: "'" for c in "‘’‚‛′`´"} | {c: '"' for c in "“”„‟″«»"} | {"…": "..."})
_SPACE = re.compile(r"\s+")


def normalize_quotes(text: str) -> str:
    """Canonical composition (NFC), whitespace runs -> one space, typographic quotes and ellipsis -> ASCII,
    ends stripped."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text).translate(_QUOTES)).strip()


def _check(citation: Citation, contexts: list[str]) -> dict[str, Any]:
    quote = citation.quote.strip()
    out: dict[str, Any] = {"source_index": citation.source_index, "found": False, "found_normalized": False}
    if not quote:
        return out | {"reason": "empty quote"}
    if not 0 <= citation.source_index < len(contexts):
        return out | {"reason": f"source_index {citation.source_index} out of range ({len(contexts)} contexts)"}
    context = contexts[citation.source_index]
    out["found"] = quote in context
    out["found_normalized"] = normalize_quotes(quote) in normalize_quotes(context)
    if not out["found"]:
        out["reason"] = "found only after normalising" if out["found_normalized"] else "not in the cited context"
    return out


@register("verbatim", Queue.CPU, needs=("citations", "contexts"), reads=("retrieved_doc_ids",))  # sourceless
def verbatim(row: Row, params: NoParams) -> MetricResult:
    """Existence score: share of quoted citations found verbatim in the context they cite."""
    if row.sourceless:  # by design (an LLM alone's, or a retrieval that found nothing): no source to quote
        return MetricResult.unscorable("no contexts")
    if not row.citations:
        return MetricResult.unscorable("no citations")
    if not row.has_contexts:  # nothing to look the quotes up in: the row lacks its contexts, the answer is not judged
        return MetricResult.unscorable("no contexts")
    contexts = [c.text for c in row.contexts]
    checks = [_check(c, contexts) for c in row.citations]
    found = sum(c["found"] for c in checks)
    score = found / len(checks)
    details = {
        "quoted": len(checks),
        "found": found,
        "normalized_found": sum(c["found_normalized"] for c in checks),
        "normalized_score": sum(c["found_normalized"] for c in checks) / len(checks),
        "citations": checks,
    }
    return MetricResult(score=score, passed=found == len(checks), details=details)
