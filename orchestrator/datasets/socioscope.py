"""Reader for a Socioscope corpus (``--format socioscope``): typed questions about interviews, the answers
to score, and the interview transcripts the answers' verbatim citations quote::

    {"transcripts": {"PL-008": "[00:00:00] Malgorzata: ... we currently employ seven people ..."},
     "qa_pairs": [
       {"id": "q1", "transcript": "PL-008",
        "question": {"text": "How many people does it employ?", "type": "PickOne", "metric": "typed_answer"},
        "expected": {"seven": 1.0, "four": 0.5},
        "answers": {"gpt4": {"answer": "Seven people.", "citations": [{"quote": "employ seven people"}]}}}]}

Each answer becomes one row: ``id`` = the pair's id, ``system`` = the answer's key, ``question``,
``question_type`` (canonical spelling), ``expected`` (as given; validated here against the typed-answer
grammar), ``answer``, ``group`` = the pair's transcript id (so scores average per interview),
``contexts`` = the pair's transcript then every other transcript the answer cites, and ``citations``
``{source_index, quote}`` pointing into those contexts. line = the pair's element number in ``qa_pairs``.
The accepted spellings are in docs/datasets.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragscore_workers.counts import noun_names
from ragscore_workers.errors import DatasetError
from ragscore_workers.metrics._typed_values import ExpectedError, parse_expected, parse_question_type

from ._seed import SeedError, identifier, pick, read_json, row_error, text
from .loaders import Record, RowError, kind

__all__ = ["METRICS", "looks_like_socioscope", "socioscope_records"]

#: ``metric`` values of a pair and the ragscore metric each names.
METRICS = {"typed_answer": "typed_answer", "typed": "typed_answer", "verbatim": "verbatim"}
_TRANSCRIPT = ("transcript", "transcript_id", "interview")
_QTYPE = ("question_type", "type")
_EXPECTED = ("expected", "expected_values")
_QA_KEYS = {"id", "question", "metric", "answers", "answer", "citations", "system", *_TRANSCRIPT, *_QTYPE, *_EXPECTED}


def _transcripts(raw: Any, path: Path) -> dict[str, str]:
    """``{id: text}`` from an object, or from a list of ``{id|PROJECT, text|TRANSCRIPT}`` records."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = []
        for i, item in enumerate(raw):
            try:
                if not isinstance(item, dict):
                    raise SeedError(f"expected an object, got {kind(item)}")
                id_key, tid = pick(item, ("id", "PROJECT"), "transcript")
                text_key, body = pick(item, ("text", "TRANSCRIPT"), "transcript")
                if id_key is None or text_key is None:
                    raise SeedError("needs an id (id or PROJECT) and a text (text or TRANSCRIPT)")
                pairs.append((identifier(tid, id_key), body))
            except SeedError as exc:
                raise DatasetError(f"{path}: transcripts[{i}]: {exc}") from None
    else:
        raise DatasetError(f"{path}: transcripts must be an object {{id: text}} or a list of records")
    out: dict[str, str] = {}
    for tid, body in pairs:
        if tid in out:
            raise DatasetError(f"{path}: transcript {tid!r} is given twice")
        try:
            out[str(tid)] = text(body, f"transcripts[{tid!r}]", empty_ok=True)
        except SeedError as exc:
            raise DatasetError(f"{path}: {exc}") from None
    return out


def _question(qa: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(question text, canonical question type, ragscore metrics named) of a pair."""
    type_key, qtype = pick(qa, _QTYPE, "qa pair")
    metric = qa.get("metric")
    body, where = qa.get("question"), "question"
    if isinstance(body, dict):
        unknown = sorted(set(body) - {"text", "type", "metric"})
        if unknown:
            raise SeedError(f"question: unknown {noun_names(unknown, 'key')}; give text, type and metric")
        for inner, outer in (("type", type_key), ("metric", "metric" if "metric" in qa else None)):
            if inner in body and outer is not None:
                raise SeedError(f"question.{inner} and {outer}: give one")
        qtype, metric = body.get("type", qtype), body.get("metric", metric)
        body, where = body.get("text"), "question.text"
    if body is None:
        raise SeedError("no question text")
    if qtype is None:
        raise SeedError("no question type (question.type or question_type)")
    try:
        canonical = parse_question_type(text(qtype, "question type"))
    except ExpectedError as exc:
        raise SeedError(str(exc)) from None
    names = [] if metric is None else [metric] if isinstance(metric, str) else metric
    if not isinstance(names, list) or not all(isinstance(m, str) for m in names):
        raise SeedError("metric: expected a name or a list of names")
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise SeedError(f"metric {unknown[0]!r}: choose from {', '.join(METRICS)}")
    return text(body, where), canonical, sorted({METRICS[m] for m in names})


def _answers(qa: dict[str, Any]) -> list[tuple[str, str | None, Any]]:
    """``(where, system, answer value)`` for each answer of a pair."""
    if "answers" in qa:
        clash = sorted({"answer", "citations", "system"} & set(qa))
        if clash:
            raise SeedError(f"{', '.join(clash)} beside answers: give them inside each answer")
        raw = qa["answers"]
        if isinstance(raw, dict):
            return [(f"answers[{k!r}]", identifier(k, "answers key"), v) for k, v in raw.items()]
        if not isinstance(raw, list):
            raise SeedError(f"answers: expected an object {{system: answer}} or a list, got {kind(raw)}")
        out: list[tuple[str, str | None, Any]] = []
        for i, item in enumerate(raw):
            key, system = pick(item, ("system", "model"), f"answers[{i}]") if isinstance(item, dict) else (None, None)
            if key is None:
                raise SeedError(f"answers[{i}]: expected an object with a system (or model)")
            rest = {k: v for k, v in item.items() if k != key}
            out.append((f"answers[{i}]", identifier(system, f"answers[{i}].{key}"), rest))
        return out
    if "answer" not in qa:
        raise SeedError("no answer or answers")
    system = identifier(qa["system"], "system") if qa.get("system") is not None else None
    return [("answer", system, {k: qa[k] for k in ("answer", "citations") if k in qa})]


def _answer(value: Any, where: str) -> tuple[str, Any]:
    """(answer text, raw citations or None) of one answer: a string or ``{answer|text, citations}``."""
    if isinstance(value, str):
        return value, None
    if not isinstance(value, dict):
        raise SeedError(f"{where}: expected a string or {{answer, citations}}, got {kind(value)}")
    unknown = sorted(set(value) - {"answer", "text", "citations"})
    if unknown:
        raise SeedError(f"{where}: unknown {noun_names(unknown, 'key')}; give answer and citations")
    key, body = pick(value, ("answer", "text"), where)
    if key is None:
        raise SeedError(f"{where}: no answer text")
    return text(body, f"{where}.{key}", empty_ok=True), value.get("citations")


def _citations(raw: Any, where: str, default: str | None, transcripts: dict[str, str]) -> list[tuple[str, str]]:
    """``(transcript id, quote)`` per citation: a quote string (cites the pair's transcript) or
    ``{quote, transcript}``; other keys of a citation (speaker, timestamp, ...) are ignored."""
    if not isinstance(raw, list):
        raise SeedError(f"{where}: expected a list, got {kind(raw)}")
    out = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        if isinstance(item, str):
            item = {"quote": item}
        if not isinstance(item, dict) or "quote" not in item:
            raise SeedError(f"{here}: expected a quote or {{quote, transcript}}")
        key, tid = pick(item, _TRANSCRIPT, here)
        tid = identifier(tid, f"{here}.{key}") if key is not None else default
        if tid is None:
            raise SeedError(f"{here}: names no transcript, and the pair has none")
        if not transcripts:
            raise SeedError(f"{here}: cites transcript {tid!r}, and the file has no transcripts to check it in")
        if tid not in transcripts:
            raise SeedError(f"{here}: transcript {tid!r} is not in transcripts")
        out.append((tid, text(item["quote"], f"{here}.quote", empty_ok=True)))
    return out


def _rows(qa: Any, transcripts: dict[str, str]) -> Iterator[Record | SeedError]:
    """The rows of one pair (one per answer, or the error of that answer); SeedError for the whole pair."""
    if not isinstance(qa, dict):
        raise SeedError(f"expected an object, got {kind(qa)}")
    question, qtype, metrics = _question(qa)
    key, expected = pick(qa, _EXPECTED, "qa pair")
    if key is not None:
        try:
            parse_expected(expected)
        except ExpectedError as exc:
            raise SeedError(f"{key}: {exc}") from None
    elif "typed_answer" in metrics:
        raise SeedError("metric typed_answer needs expected values")
    key, group = pick(qa, _TRANSCRIPT, "qa pair")
    group = identifier(group, key) if key is not None else None
    if group is not None and transcripts and group not in transcripts:
        raise SeedError(f"{key} {group!r} is not in transcripts")
    base: Record = {"question": question, "question_type": qtype, "expected": expected, "group": group}
    if qa.get("id") is not None:
        base["id"] = identifier(qa["id"], "id")
    metadata = {k: v for k, v in qa.items() if k not in _QA_KEYS} | ({"metric": metrics} if metrics else {})
    for where, system, value in _answers(qa):
        try:
            answer, raw_citations = _answer(value, where)
            cited = [] if raw_citations is None else _citations(raw_citations, f"{where}.citations", group, transcripts)
        except SeedError as exc:
            yield exc
            continue
        order = list(dict.fromkeys(([group] if group in transcripts else []) + [tid for tid, _ in cited]))
        row = {**base, "system": system, "answer": answer, "metadata": metadata}
        row["contexts"] = [{"text": transcripts[tid], "id": tid} for tid in order]
        if raw_citations is not None:
            row["citations"] = [{"source_index": order.index(tid), "quote": quote} for tid, quote in cited]
        yield {k: v for k, v in row.items() if v is not None}


def socioscope_records(path: Path) -> Iterator[tuple[int, Record | RowError]]:
    """Stream ``(pair number, row | RowError)`` from a corpus file."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("qa_pairs"), list):
        raise DatasetError(f"{path}: expected an object with a qa_pairs list (and transcripts)")
    transcripts = _transcripts(data.get("transcripts"), path)
    for pos, qa in enumerate(data["qa_pairs"], start=1):
        try:
            for row in _rows(qa, transcripts):
                if isinstance(row, SeedError):
                    yield pos, row_error(pos, f"element {pos}: {row}", qa)
                else:
                    yield pos, row
        except SeedError as exc:
            yield pos, row_error(pos, f"element {pos}: {exc}", qa)


def looks_like_socioscope(data: Any) -> bool:
    """An object with a ``qa_pairs`` list."""
    return isinstance(data, dict) and isinstance(data.get("qa_pairs"), list)
