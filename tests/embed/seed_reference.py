"""The Auto-Analyst seed's five embedding metrics recomputed in plain numpy, one text at a time.

Written from the seed's definitions, not from ragscore's code, so tests compare two implementations.
Returns raw values (cosines may be negative) or ``("unscorable", reason)`` where ragscore must refuse: a missing
input (as the seed), a blank question or reference (where the seed would compare with the vector of nothing), or no
contexts for the metrics that read them (where the seed scores 0, or 1 for hallucination: docs/design-changes.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

Encode = Callable[[str], np.ndarray]
Expected = float | tuple[str, str]


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-10))


def _texts(contexts: list[Any]) -> list[str]:
    return [c if isinstance(c, str) else c.get("text", c.get("page_content")) for c in contexts]


def seed_metrics(row: dict[str, Any], encode: Encode, sufficiency: float, hallucination: float) -> dict[str, Expected]:
    """Expected raw value (or unscorable reason) of every embedding metric for one input row."""
    question, answer, reference = row.get("question"), row.get("answer"), row.get("reference")
    contexts = _texts(row.get("contexts", []))
    out: dict[str, Expected] = {}
    if question is None or not question.strip():
        reason = "no question" if question is None else "empty question"
        out["context_relevance"] = out["context_sufficiency"] = ("unscorable", reason)
    elif not contexts:
        out["context_relevance"] = out["context_sufficiency"] = ("unscorable", "no contexts")
    else:
        sims = [_cos(encode(question), encode(c)) for c in contexts]
        out["context_relevance"] = float(np.mean(sims))
        out["context_sufficiency"] = float(np.mean([s >= sufficiency for s in sims]))
    if answer is None:
        out["answer_relevance"] = out["answer_correctness"] = ("unscorable", "no answer")
    elif reference is None or not reference.strip():
        reason = "no reference" if reference is None else "empty reference"
        out["answer_relevance"] = out["answer_correctness"] = ("unscorable", reason)
    else:
        out["answer_relevance"] = out["answer_correctness"] = _cos(encode(answer), encode(reference))
    if answer is None:
        out["answer_hallucination"] = ("unscorable", "no answer")
    elif not answer:
        out["answer_hallucination"] = 0.0
    elif not contexts:
        out["answer_hallucination"] = ("unscorable", "no contexts")
    else:
        sentences = [s.strip() for s in re.split(r"[.!?]", answer) if s.strip()]
        if not sentences:
            out["answer_hallucination"] = 0.0
        else:
            unsupported = sum(max(_cos(encode(s), encode(c)) for c in contexts) < hallucination for s in sentences)
            out["answer_hallucination"] = unsupported / len(sentences)
    return out
