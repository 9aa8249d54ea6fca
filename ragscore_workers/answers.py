"""How a target run's ``answers.jsonl`` marks a question its target could not answer.

The row keeps its own fields (its ``metadata`` the user's, untouched) and says why in :data:`TARGET_ERROR`, a
namespaced field beside them. Files ragscore wrote before said it in ``metadata.target_error``
(:data:`LEGACY_TARGET_ERROR`), which a user's own metadata may hold: that one is read only in a row without an
answer (an answered row's is the user's). A row answered by a target that returns no contexts carries
:data:`NO_RETRIEVAL`, so a re-score of the file reads it as the run did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .counts import agree, counted

__all__ = [
    "LEGACY_TARGET_ERROR",
    "NO_RETRIEVAL",
    "TARGET_ERROR",
    "AloneRows",
    "SystemRows",
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


@dataclass
class SystemRows:
    """One system's rows of a dataset, as the scan counts them for the pre-run warnings: how many, how many marked
    :data:`NO_RETRIEVAL`, and the row fields some row of it has (as ``DatasetScan.fields_seen``)."""

    system: str | None
    rows: int = 0
    marked: int = 0
    seen: set[str] = field(default_factory=set)

    def add(self, marked: bool, seen: set[str]) -> None:
        """Count a row of the system: ``marked`` as an LLM alone's or not, having the fields ``seen``."""
        self.rows += 1
        self.marked += marked
        self.seen |= seen

    def named(self) -> str:
        """How a warning names the system: ``system 'llm'``, or the rows that name none."""
        return "rows without a system" if self.system is None else f"system {self.system!r}"


@dataclass(frozen=True)
class AloneRows:
    """A dataset's rows marked :data:`NO_RETRIEVAL` (an LLM-alone target run's answers.jsonl, scored again without its
    targets): how many, and whether every row is; and its rows per system (:class:`SystemRows`, the first systems),
    whose retrieval fields say which systems retrieve nothing where others do (a mixed answers.jsonl)."""

    rows: int = 0
    every: bool = False
    systems: tuple[SystemRows, ...] = ()
    #: Whether every row of the dataset lacks ``evidence_sentences`` by design where it lacks them (marked, or without
    #: contexts saying its retrieval found nothing: ``Row.evidence_unnamed_by_design``), as ``citation`` reads it.
    evidence_by_design: bool = False

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
