"""Reader for the Auto-Analyst evaluation list (``--format auto-analyst``).

The file is a JSON list, one object per question::

    [{"question": "What is RAG?", "reference_answer": "Retrieval-augmented generation ...",
      "answer": "RAG retrieves passages [1] ...", "contexts": ["passage 1", {"text": "passage 2", "score": 0.4}],
      "retrieval_scores": [0.82, 0.4]}]

``question`` (a non-empty string) and ``answer`` (a string, or null when the pipeline gave none: the
row is then unscorable for answer metrics) are required; ``reference_answer`` becomes ``reference``;
``contexts`` are strings or objects ``{text|content|page_content, score|retrieval_score, id|chunk_id,
metadata, ...}`` (other keys of a context go to its metadata); ``retrieval_scores``, when given, holds one
score per context (or null) and becomes the contexts' ``score`` (for ``quality_checks``). ``id``,
``system``, ``group`` and every other row field (``gold_doc_id``, ``retrieved_doc_ids``, ...) are kept; any
other key goes to the row's metadata. line = element number.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragscore_workers.errors import DatasetError
from ragscore_workers.schemas import Row

from ..caller import CLI, Caller
from ._seed import SeedError, identifier, number, pick, read_json, row_error, text
from .loaders import Record, RowError, kind

__all__ = ["auto_analyst_records", "looks_like_auto_analyst"]

_TEXT = ("text", "content", "page_content")
_SCORE = ("score", "retrieval_score")
_ID = ("id", "chunk_id")
#: The names a reference is read from: the layout's own, then the row field's and its aliases (as the generic reader).
_REFERENCE = ("reference_answer", "reference", "gold_answer", "ground_truth")
_ROW_KEYS = {"id", "question", "answer", *_REFERENCE, "contexts", "retrieval_scores", "system", "group"}
#: Row fields the reader does not set itself: kept as they are (``Row`` validates them), not put in metadata.
_PASSED_ON = frozenset(Row.model_fields) - {"question", "answer", "reference", "contexts", "metadata"} - _ROW_KEYS


def _context(raw: Any, where: str) -> Record:
    if isinstance(raw, str):
        return {"text": raw}
    if not isinstance(raw, dict):
        raise SeedError(f"{where}: expected a string or an object, got {kind(raw)}")
    key, value = pick(raw, _TEXT, where)
    if key is None:
        raise SeedError(f"{where}: no text (give one of {', '.join(_TEXT)})")
    out: Record = {"text": text(value, f"{where}.{key}", empty_ok=True)}
    key, value = pick(raw, _SCORE, where)
    if value is not None:
        out["score"] = number(value, f"{where}.{key}")
    key, value = pick(raw, _ID, where)
    if value is not None:
        out["id"] = identifier(value, f"{where}.{key}")
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict):
        raise SeedError(f"{where}.metadata: expected an object, got {kind(metadata)}")
    extra = {k: v for k, v in raw.items() if k not in {*_TEXT, *_SCORE, *_ID, "metadata"}}
    if metadata or extra:
        out["metadata"] = {**metadata, **extra}
    return out


def _contexts(item: dict[str, Any]) -> list[Record]:
    raw = item.get("contexts")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise SeedError(f"contexts: expected a list, got {kind(raw)}")
    contexts = [_context(c, f"contexts[{i}]") for i, c in enumerate(raw)]
    scores = item.get("retrieval_scores")
    if scores is None:
        return contexts
    if not isinstance(scores, list) or len(scores) != len(contexts):
        size = len(scores) if isinstance(scores, list) else kind(scores)
        raise SeedError(f"retrieval_scores: expected one score per context ({len(contexts)}), got {size}")
    for i, (context, score) in enumerate(zip(contexts, scores, strict=True)):
        if score is None:
            continue
        value = number(score, f"retrieval_scores[{i}]")
        if context.get("score", value) != value:
            raise SeedError(f"contexts[{i}] has score {context['score']} but retrieval_scores[{i}] is {value}")
        context["score"] = value
    return contexts


def _row(item: Any, system: str | None, caller: Caller) -> Record:
    if not isinstance(item, dict):
        raise SeedError(f"expected an object, got {kind(item)}")
    for key in ("question", "answer"):
        if key not in item:
            raise SeedError(f"no {key!r}")
    row: Record = {"question": text(item["question"], "question"), "contexts": _contexts(item)}
    if item["answer"] is not None:
        row["answer"] = text(item["answer"], "answer", empty_ok=True)
    for key in _REFERENCE:
        if item.get(key) is not None:
            row["reference"] = text(item[key], key, empty_ok=True)
            break
    for key in ("id", "group", "system"):
        if item.get(key) is not None:
            row[key] = identifier(item[key], key)
    if system is not None:
        if row.get("system", system) != system:
            raise SeedError(f"system {row['system']!r} differs from {caller.given('system', system)}")
        row["system"] = system
    row |= {k: v for k, v in item.items() if k in _PASSED_ON}
    metadata = {k: v for k, v in item.items() if k not in _ROW_KEYS and k not in _PASSED_ON and k != "metadata"}
    if isinstance(item.get("metadata"), dict):
        metadata = {**item["metadata"], **metadata}
    if metadata:
        row["metadata"] = metadata
    return row


def auto_analyst_records(
    path: Path, *, system: str | None = None, caller: Caller = CLI
) -> Iterator[tuple[int, Record | RowError]]:
    """Stream ``(element number, row | RowError)``; ``system`` names the pipeline that answered, as ``caller`` gave
    it (``--system``, ``fmt_options={'system': ...}``)."""
    data = read_json(path)
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of {{question, reference_answer, answer, contexts}}")
    for pos, item in enumerate(data, start=1):
        try:
            yield pos, _row(item, system, caller)
        except SeedError as exc:
            yield pos, row_error(pos, f"element {pos}: {exc}", item)


def looks_like_auto_analyst(data: Any) -> bool:
    """A list whose first element has ``retrieval_scores``, or all of question, answer, reference_answer
    and contexts."""
    first = data[0] if isinstance(data, list) and data else None
    keys = set(first) if isinstance(first, dict) else set()
    return "retrieval_scores" in keys or {"question", "answer", "reference_answer", "contexts"} <= keys
