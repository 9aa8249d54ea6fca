"""``recall_at_k`` (document-grounded QA framework): how many of the gold documents were retrieved in the top k?

Outputs ``recall_at_{k}`` for each k in ``params.k``: the share of the gold documents found among the first k
retrieved ids (one gold id, as in the seed framework: 1 when it is in the top k, else 0; several: e.g. 2 of 3 found
= 0.667), and ``mrr`` (reciprocal rank of the first gold document, 0 when absent). Ranks are positions in
``retrieved_doc_ids`` as given: a repeated id (several chunks of one document) takes a rank each time. Ids are
compared with surrounding whitespace stripped (a CSV's ``"d1, d2"``); blank gold ids are dropped. A row without a
gold id is unscorable; a row with a gold id but no retrieved documents scores 0 (the system retrieved nothing, as an
LLM-only one does by design: ``details["empty"]``, which the run's summary counts apart and its end says as
information; a row without retrieved ids answered by a target that returns no contexts nor doc ids,
``Row.answered_alone``, is unscorable, ``no retrieved_doc_ids`` (by design, as ``no contexts``: no gate fails it):
nothing is known of a retrieval; a dataset in which no row has ``retrieved_doc_ids`` is warned of before the run: a
column named otherwise, ``retrieved_ids``, would score every row 0; and a run in which no row's gold id is at any
rank of its retrieved ids, ``mrr`` 0 on each of at least 2 rows that retrieved something, of the dataset or of a
system, ends with a line saying so: gold and retrieved ids named in two schemes, ``doc_12`` and ``12``, score every
row 0 without an error).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from ..schemas import MetricResult, Queue, Row
from .citation import id_set
from .registry import NO_RETRIEVED_IDS, register


class RecallParams(BaseModel):
    """``k``: cut-offs to report, each a whole number >= 1 (``true``, ``5.0`` or ``"5"`` is refused)."""

    model_config = ConfigDict(extra="forbid")

    k: list[StrictInt] = Field(default_factory=lambda: [1, 5], min_length=1)

    @field_validator("k", mode="before")
    @classmethod
    def _one_cutoff(cls, value: object) -> object:
        """``k: 5`` is ``k: [5]``."""
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("k")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError("every k must be >= 1")
        return sorted(set(value))


def _outputs(params: RecallParams) -> list[str]:
    return [f"recall_at_{k}" for k in params.k] + ["mrr"]


def first_gold_rank(retrieved: list[str], gold: set[str]) -> int | None:
    """1-based rank of the first retrieved id in ``gold``, or None."""
    for rank, doc_id in enumerate(retrieved, start=1):
        if doc_id in gold:
            return rank
    return None


def gold_rank(row: Row) -> tuple[set[str], list[str], int | None]:
    """A row's gold ids, its retrieved ids as compared (stripped; a blank one keeps its rank) and the 1-based rank of
    the first gold one among them (None: none is, or no gold id): what recall_at_k scores, and ``--dry-run``'s check
    of gold ids named otherwise reads, without building results."""
    gold = id_set([row.gold_doc_id] if isinstance(row.gold_doc_id, str) else row.gold_doc_id or [])
    retrieved = [doc_id.strip() for doc_id in row.retrieved_doc_ids or []]
    return gold, retrieved, first_gold_rank(retrieved, gold)


@register("recall_at_k", Queue.CPU, params=RecallParams, outputs=_outputs, needs=("gold_doc_id",),
          scores_without=("retrieved_doc_ids",), reads=())  # fmt: skip
def recall_at_k(row: Row, params: RecallParams) -> dict[str, MetricResult]:
    """Recall@k of the gold document for each k, and MRR."""
    gold, retrieved, rank = gold_rank(row)
    if not gold or (row.answered_alone and row.retrieved_doc_ids is None):
        reason = MetricResult.unscorable(NO_RETRIEVED_IDS if gold else "no gold_doc_id")  # an LLM alone's: by design
        return {name: reason for name in _outputs(params)}
    details = {"rank": rank, "retrieved_top_1": retrieved[0] if retrieved else None, "gold": len(gold)}
    if not retrieved:  # by design (an LLM-only system): counted apart from misses (MetricSummary.empty)
        details["empty"] = True
    out = {}
    for k in params.k:
        found = len(gold.intersection(retrieved[:k]))
        out[f"recall_at_{k}"] = MetricResult(
            score=found / len(gold), passed=found == len(gold), details=details | {"found": found}
        )
    out["mrr"] = MetricResult(score=1.0 / rank if rank else 0.0, details=details)
    return out
