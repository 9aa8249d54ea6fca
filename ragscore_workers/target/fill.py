"""A target's reply -> the row it answers: mapped fields filled in, ``system`` set, validated as a Row."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ..schemas import TARGET_FIELDS, Row, TargetConfig
from .errors import TargetError
from .jsonpath import extract

__all__ = ["fill_row", "mapped_fields"]


def mapped_fields(config: TargetConfig, data: Any) -> dict[str, Any]:
    """The row fields the response map finds in ``data`` (fields it does not find are left out)."""
    out: dict[str, Any] = {}
    for field in TARGET_FIELDS:
        path = getattr(config.response, field)
        if path is None:
            continue
        value = extract(data, path)
        if value is not None:
            out[field] = value
    return out


def fill_row(row: Row, config: TargetConfig, data: Any) -> Row:
    """``row`` answered by the target: its reply's fields replace the row's; TargetError if they do not fit."""
    fields = mapped_fields(config, data)
    if "answer" not in fields and config.response.answer is not None:
        raise TargetError(f"{config.name}: the reply has no {config.response.answer!r} (the answer)",
                          system=config.system or "")  # fmt: skip
    values = row.model_dump(mode="json", exclude_none=True) | fields
    if config.system is not None:
        values["system"] = config.system
    try:
        return Row.model_validate(values)
    except ValidationError as exc:
        problem = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
        raise TargetError(f"{config.name}: the reply does not fit the row: {problem}",
                          system=config.system or "") from exc  # fmt: skip
