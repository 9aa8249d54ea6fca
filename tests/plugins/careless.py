"""A test plugin (loaded through RAGSCORE_PLUGINS) with the mistakes a plug-in can make at planning time: an output
named like a built-in's, a params validator raising TypeError (which pydantic does not wrap), and an ``outputs``
function that raises."""

from __future__ import annotations

from pydantic import BaseModel, field_validator

from ragscore_workers.metrics.registry import NoParams, register
from ragscore_workers.schemas import MetricResult, Queue, Row


@register("careless_rank", Queue.CPU, outputs=lambda params: ["mrr"])
def careless_rank(row: Row, params: NoParams) -> MetricResult:
    """Writes ``mrr``, which recall_at_k writes too."""
    return MetricResult(score=0.123)


@register("careless_ranks", Queue.CPU, outputs=lambda params: ["mrr", "recall_at_5"])
def careless_ranks(row: Row, params: NoParams) -> MetricResult:
    """Writes ``mrr`` and ``recall_at_5``, both recall_at_k's (and ``mrr`` careless_rank's)."""
    return MetricResult(score=0.123)


class Cutoffs(BaseModel):
    k: list[int | None] = [1]

    @field_validator("k")
    @classmethod
    def _sorted(cls, k: list[int | None]) -> list[int | None]:
        return sorted(k)  # type: ignore[type-var]  # TypeError for a None among numbers


@register("careless_cutoffs", Queue.CPU, params=Cutoffs,
          outputs=lambda params: [f"careless@{params.k[0]}"] + [f"careless@{n}" for n in params.k[1:][5]])  # fmt: skip
def careless_cutoffs(row: Row, params: Cutoffs) -> MetricResult:
    """An ``outputs`` that raises IndexError for fewer than seven cut-offs."""
    return MetricResult(score=1.0)
