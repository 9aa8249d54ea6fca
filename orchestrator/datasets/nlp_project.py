"""Reader for the document-grounded QA (NLP project) split files: questions + predictions + corpus.

* questions: JSONL, one ``{doc_id, question, answer, evidence_sentences, question_type, rubric,
  source_dataset, source, edge_case_type}`` per line (the gold answer becomes ``reference``);
* predictions: one JSON object keyed ``q001``, ``q002``, … where ``qN`` answers the N-th question
  (keys that are not all ``q<number>`` pair by position): ``{question, answer, retrieved_docs:
  [{doc_id, score, rank}], evidence_sentences}``; a prediction whose ``question`` differs from the
  question it is paired with is reported as a bad row, never scored against the wrong question;
* corpus: a directory of documents ``{"doc_id", "sentences": [{"sid", "text"}]}`` (plain-text files
  there are ignored); the gold document's sentences go into each row's ``sentences``.

The seed scored a prediction without ``evidence_sentences`` or ``retrieved_docs`` (the LLM-only
baseline) as citing and retrieving nothing, so those become ``[]``; a question with no prediction at
all gets neither field (unscorable). The seed's retrieval index names the gold documents without
their ``gold/`` folder, so ``gold_doc_id`` drops that prefix (the original id stays in metadata).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragscore_workers.counts import counted, listed
from ragscore_workers.errors import DatasetError
from ragscore_workers.metrics._corpus import corpus_sentences

from ..caller import CLI, Caller
from .loaders import Record, RowError, iter_records, loads_json

__all__ = ["GOLD_PREFIX", "iter_nlp_project", "looks_like_nlp_project", "nlp_project_records"]

#: Folder prefix of gold document ids in the questions file, absent from the retrieved ids.
GOLD_PREFIX = "gold/"
_KEY = re.compile(r"^q(\d+)$", re.IGNORECASE)
_QUESTION_FIELDS = {"doc_id", "question", "evidence_sentences"}

#: Keys of the predictions beyond the questions an error names (then "and N more").
MAX_NAMED = 3


def _load_predictions(path: Path, caller: Caller) -> dict[int, tuple[str, Any]]:
    """``{position: (key, prediction)}``; positions are 1-based like the question lines. Errors name the file as
    ``caller`` gave it."""
    if not path.is_file():
        raise DatasetError(f"Predictions file not found: {path}")
    try:
        data = loads_json(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{caller.given('predictions', path)}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise DatasetError(f"{caller.given('predictions', path)}: expected an object keyed q001, q002, …")
    numbered = [_KEY.match(k) for k in data]
    if all(numbered):
        by_pos = {int(m.group(1)): (k, v) for m, (k, v) in zip(numbered, data.items(), strict=True) if m}
        if len(by_pos) < len(data):
            raise DatasetError(f"{path}: two keys name the same question number")
        return by_pos
    return {pos: item for pos, item in enumerate(data.items(), start=1)}


def _same_question(a: Any, b: Any) -> bool:
    return not isinstance(a, str) or not isinstance(b, str) or " ".join(a.split()) == " ".join(b.split())


def _prediction_fields(pred: dict[str, Any]) -> dict[str, Any]:
    docs = pred.get("retrieved_docs") or []
    if not isinstance(docs, list) or not all(isinstance(d, dict) and "doc_id" in d for d in docs):
        raise ValueError("retrieved_docs must be a list of {doc_id, score, rank}")
    ranked = sorted(docs, key=lambda d: d["rank"]) if all(isinstance(d.get("rank"), int) for d in docs) else docs
    return {
        "answer": pred.get("answer"),
        "evidence_sentences": pred.get("evidence_sentences") or [],
        "retrieved_doc_ids": [str(d["doc_id"]) for d in ranked],
    }


def _row(pos: int, question: Record, pred: tuple[str, Any] | None, corpus: Path | None) -> Record:
    doc_id = question.get("doc_id")
    row: Record = {
        "id": f"q{pos:03d}",
        "question": question.get("question"),
        "reference": question.get("answer"),
        "question_type": question.get("question_type"),
        "rubric": question.get("rubric"),
        "gold_doc_id": doc_id.removeprefix(GOLD_PREFIX) if isinstance(doc_id, str) else doc_id,
        "gold_evidence_sentences": question.get("evidence_sentences"),
        "metadata": {k: question[k] for k in ("doc_id", "source_dataset", "source", "edge_case_type") if k in question},
    }
    if pred is not None:
        key, value = pred
        if not isinstance(value, dict):
            raise ValueError(f"prediction {key!r} is not an object")
        if not _same_question(value.get("question"), question.get("question")):
            raise ValueError(f"prediction {key!r} answers a different question: {str(value.get('question'))[:80]!r}")
        row.update(_prediction_fields(value))
        row["metadata"]["prediction_key"] = key
    if corpus is not None and isinstance(doc_id, str):
        sentences = corpus_sentences(corpus, doc_id)
        if sentences:
            row["sentences"] = sentences
    return {k: v for k, v in row.items() if v is not None}


def nlp_project_records(
    questions: Path,
    predictions: Path | None = None,
    corpus: Path | None = None,
    *,
    system: str | None = None,
    caller: Caller = CLI,
) -> Iterator[tuple[int, Record | RowError]]:
    """Stream ``(line, row dict | RowError)`` like the other loaders; line = the question's line. ``caller``: whose
    options its errors name."""
    preds = _load_predictions(Path(predictions), caller) if predictions is not None else None
    if corpus is not None and not Path(corpus).is_dir():
        raise DatasetError(f"Corpus directory not found: {corpus}")
    pos = 0
    for line, record in iter_records(Path(questions), "jsonl", caller=caller):
        pos += 1
        if isinstance(record, RowError):
            yield line, record
            continue
        missing = sorted(_QUESTION_FIELDS - record.keys())
        try:
            if missing:
                raise ValueError(f"question lacks {', '.join(missing)}")
            row = _row(pos, record, preds.get(pos) if preds is not None else None, corpus)
        except ValueError as exc:
            yield line, RowError(line, str(exc), json.dumps(record, ensure_ascii=False))
            continue
        yield line, row if system is None else {**row, "system": system}
    extra = [key for p, (key, _) in sorted((preds or {}).items()) if p > pos]  # their keys, in position order
    if extra:
        raise DatasetError(
            f"{predictions}: {counted(len(extra), 'prediction')} beyond the {counted(pos, 'question')}: "
            f"{listed(extra, MAX_NAMED)}"
        )


def iter_nlp_project(
    questions: Path, predictions: Path | None = None, corpus: Path | None = None, *, system: str | None = None
) -> Iterator[Record]:
    """Row dicts for ``evaluate()``; DatasetError on the first row that cannot be read."""
    for line, record in nlp_project_records(questions, predictions, corpus, system=system):
        if isinstance(record, RowError):
            raise DatasetError(f"{questions}:{line}: {record.error}")
        yield record


def looks_like_nlp_project(path: Path) -> bool:
    """True when the first non-empty line is a JSON object with ``doc_id``, ``question`` and ``evidence_sentences``."""
    try:
        with Path(path).open(encoding="utf-8-sig") as fh:
            first = next((line for line in fh if line.strip()), "")
        record = loads_json(first)
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(record, dict) and _QUESTION_FIELDS <= record.keys()
