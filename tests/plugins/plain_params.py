"""A test plugin (loaded through RAGSCORE_PLUGINS) written as README's "Adding a metric" shows: its params model is
a plain ``BaseModel`` (pydantic ignores unknown keys by default)."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, Field, model_validator

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


class LegacyParams(BaseModel):
    max_words: int = 100

    @model_validator(mode="before")
    @classmethod
    def _legacy_name(cls, data: Any) -> Any:
        """An earlier version called it ``maxlen``."""
        if isinstance(data, dict) and "maxlen" in data:
            data = {**data, "max_words": data["maxlen"]}
            del data["maxlen"]
        return data


@register("plain_legacy_short_answer", Queue.CPU, params=LegacyParams, needs=("answer",))
def plain_legacy_short_answer(row: Row, params: LegacyParams) -> MetricResult:
    """1.0 when the answer has at most max_words (once maxlen) words: a key the model's own validator renames."""
    return plain_short_answer(row, LengthParams(max_words=params.max_words))


class IgnoringParams(BaseModel):
    model_config = ConfigDict(extra="ignore")  # said on purpose: the suite may hold keys of another version

    max_words: int = 100


@register("plain_ignoring_short_answer", Queue.CPU, params=IgnoringParams, needs=("answer",))
def plain_ignoring_short_answer(row: Row, params: IgnoringParams) -> MetricResult:
    """1.0 when the answer has at most max_words words; other keys ignored, as its model says."""
    return plain_short_answer(row, LengthParams(max_words=params.max_words))
