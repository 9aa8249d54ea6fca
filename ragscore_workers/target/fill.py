"""A target's reply -> the row it answers: mapped fields filled in, ``system`` set, validated as a Row."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..answers import NO_RETRIEVAL, TARGET_ERROR
from ..schemas import RAGAS_NAMES, TARGET_FIELDS, Row, TargetConfig
from .errors import TargetError
from .jsonpath import extract

__all__ = ["fill_row", "mapped_fields", "unanswered_row", "unfilled_fields"]


def mapped_fields(config: TargetConfig, data: Any) -> dict[str, Any]:
    """The row fields the response map finds in ``data`` (fields it does not find are left out)."""
    out: dict[str, Any] = {}
    for field in TARGET_FIELDS:
        path = getattr(config.response, field)
        if path is None:
            continue
        value = extract(data, path)
        if isinstance(value, list) and field in _TEXT_LISTS:  # ``hits[*].doc_id`` where one hit has none
            value = ["" if v is None else v for v in value]
        if value is not None:
            out[field] = value
    return out


#: Fields that are lists of text (or of contexts, as text): an element a ``[*]`` path finds nothing in reads as ""
#: and keeps its place (a rank), rather than failing the question (one context without a ``doc_id`` lost the answer).
_TEXT_LISTS = ("contexts", "retrieved_doc_ids", "evidence_sentences")


def unfilled_fields(config: TargetConfig, data: Any) -> list[str]:
    """The fields the response map names whose path finds nothing in ``data`` (a mistyped path reads as "no
    contexts" in every reply); a path to an empty list found it."""
    mapped = mapped_fields(config, data)
    return [f for f in TARGET_FIELDS if getattr(config.response, f) is not None and f not in mapped]


def _unanswered_values(row: Row, config: TargetConfig) -> dict[str, Any]:
    mapped = {field for field in TARGET_FIELDS if getattr(config.response, field) is not None}
    marks = {TARGET_ERROR, NO_RETRIEVAL}
    drop = mapped | {name for name, (field, _) in RAGAS_NAMES.items() if field in mapped} | marks
    values = {k: v for k, v in row.model_dump(mode="json", exclude_none=True).items() if k not in drop}
    if config.system is not None:
        values["system"] = config.system
    return values


def unanswered_row(row: Row, config: TargetConfig) -> Row:
    """``row`` as ``config`` will answer it, before the reply: ``system`` set and every field the response map
    fills taken out, so a dataset's own answer, contexts or doc ids are never scored (or stored in
    ``answers.jsonl``) as the target's; so is an earlier run's mark of an unanswered row (:data:`TARGET_ERROR`, in
    a dataset made of its answers.jsonl), which would mark this target's answer as failed, and its mark of an LLM
    alone's row (:data:`NO_RETRIEVAL`: this target's response map says whether it retrieves)."""
    return Row.model_validate(_unanswered_values(row, config))


def fill_row(row: Row, config: TargetConfig, data: Any) -> Row:
    """``row`` answered by the target: the fields its response map names come from the reply alone (one the reply
    lacks is absent, not the dataset's), marked :data:`NO_RETRIEVAL` where the map names no retrieval field (an LLM
    alone); TargetError if they do not fit."""
    fields = mapped_fields(config, data)
    if "answer" not in fields and config.response.answer is not None:
        raise TargetError(f"{config.name}: the reply has no {config.response.answer!r} (the answer)",
                          system=config.system or "")  # fmt: skip
    values = _unanswered_values(row, config) | fields  # a mapped field the reply lacks is absent, not the row's
    if not config.retrieves:
        values[NO_RETRIEVAL] = True
    try:
        return Row.model_validate(values)
    except ValidationError as exc:
        problem = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
        raise TargetError(f"{config.name}: the reply does not fit the row: {problem}",
                          system=config.system or "") from exc  # fmt: skip
