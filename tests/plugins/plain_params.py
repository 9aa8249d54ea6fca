"""A test plugin (loaded through RAGSCORE_PLUGINS) written as README's "Adding a metric" shows: its params model is
a plain ``BaseModel`` (pydantic ignores unknown keys by default)."""

from __future__ import annotations

from pydantic import AliasChoices, AliasPath, BaseModel, Field

from ragscore_workers.metrics.registry import register
from ragscore_workers.schemas import MetricResult, Queue, Row


class LengthParams(BaseModel):
    max_words: int = 100


@register("plain_short_answer", Queue.CPU, params=LengthParams, needs=("answer",))
def plain_short_answer(row: Row, params: LengthParams) -> MetricResult:
    """1.0 when the answer has at most max_words words."""
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    return MetricResult(score=float(len(row.answer.split()) <= params.max_words))


class AliasedParams(BaseModel):
    max_words: int = Field(100, alias="maxWords")


@register("plain_aliased_short_answer", Queue.CPU, params=AliasedParams, needs=("answer",))
def plain_aliased_short_answer(row: Row, params: AliasedParams) -> MetricResult:
    """1.0 when the answer has at most maxWords words (a field pydantic reads by its alias only)."""
    return plain_short_answer(row, LengthParams(max_words=params.max_words))


class PathParams(BaseModel):
    max_words: int = Field(100, validation_alias=AliasChoices("max_words", AliasPath("limits", "words")))


@register("plain_path_short_answer", Queue.CPU, params=PathParams, needs=("answer",))
def plain_path_short_answer(row: Row, params: PathParams) -> MetricResult:
    """1.0 when the answer has at most max_words (or limits.words) words: a field read from a nested key too."""
    return plain_short_answer(row, LengthParams(max_words=params.max_words))
