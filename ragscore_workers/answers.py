"""How a target run's ``answers.jsonl`` marks a question its target could not answer.

The row keeps its own fields (its ``metadata`` the user's, untouched) and says why in :data:`TARGET_ERROR`, a
namespaced field beside them. Files ragscore wrote before said it in ``metadata.target_error``
(:data:`LEGACY_TARGET_ERROR`), which a user's own metadata may hold: that one is read only in a row without an
answer (an answered row's is the user's). A row answered by a target that returns no contexts carries
:data:`NO_RETRIEVAL`, so a re-score of the file reads it as the run did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .counts import agree, counted

__all__ = [
    "LEGACY_TARGET_ERROR",
    "NO_RETRIEVAL",
    "TARGET_ERROR",
    "AloneRows",
    "marked_unanswered",
    "unanswered_why",
    "without_mark",
]

#: The field of an answers.jsonl row saying why its target gave it no answer.
TARGET_ERROR = "ragscore:target_error"
#: The field (``true``) of a row answered by a target whose response map names neither ``contexts`` nor
#: ``retrieved_doc_ids`` (an LLM alone): its system retrieves nothing by design (``Row.answered_alone``), which is no
#: claim that retrieval ran and found nothing (``retrieved_doc_ids: []``).
NO_RETRIEVAL = "ragscore:no_retrieval"
#: The ``metadata`` key older versions said it in.
LEGACY_TARGET_ERROR = "target_error"


@dataclass(frozen=True)
class AloneRows:
    """A dataset's rows marked :data:`NO_RETRIEVAL` (an LLM-alone target run's answers.jsonl, scored again without its
    targets): how many, and whether every row is."""

    rows: int = 0
    every: bool = False

    def said(self) -> tuple[str, str]:
        """How the pre-run warning names these rows, and them again (``ResolvedSuite._alone_warning``)."""
        return (f"{counted(self.rows, 'row')} {agree(self.rows, 'is', 'are')} marked {NO_RETRIEVAL!r} (answered by a "
                "target that returns no contexts: an LLM alone, which retrieves nothing)", "them")  # fmt: skip


def marked_unanswered(row: dict[str, Any], why: str) -> dict[str, Any]:
    """``row`` (a question its target could not answer) as answers.jsonl holds it: marked with ``why``."""
    return row | {TARGET_ERROR: why}


def unanswered_why(fields: Mapping[str, Any], metadata: Any, answer: Any) -> str | None:
    """Why the target gave an answers.jsonl row no answer (None: it answered), from the row's ``fields`` (its extra
    ones suffice), ``metadata`` and ``answer``; an older version's mark only where the row has no answer."""
    if TARGET_ERROR in fields:
        return str(fields[TARGET_ERROR])
    if answer is None and isinstance(metadata, dict) and LEGACY_TARGET_ERROR in metadata:
        return str(metadata[LEGACY_TARGET_ERROR])
    return None


def without_mark(row: dict[str, Any]) -> dict[str, Any]:
    """An unanswered answers.jsonl ``row`` (:func:`unanswered_why`) without its mark: the row as its target was
    asked."""
    if TARGET_ERROR in row:
        return {k: v for k, v in row.items() if k != TARGET_ERROR}
    rest = {k: v for k, v in row["metadata"].items() if k != LEGACY_TARGET_ERROR}
    return {k: v for k, v in row.items() if k != "metadata"} | ({"metadata": rest} if rest else {})
