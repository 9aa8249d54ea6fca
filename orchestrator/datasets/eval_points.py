"""Reader for evaluation points files (``--format eval-points``): topics, their points, and the answers.

A points file holds one topic object or a list of them::

    {"topic": "photosynthesis", "question": "Explain photosynthesis.",
     "answers": {"gpt4": "Plants use chlorophyll ...", "llama": "..."},
     "evaluation_points": [{"id": "p1", "description": "Names chlorophyll", "type": "keyword",
                            "keywords": ["chlorophyll"], "weight": 2, "category": "Accuracy"}]}

``answers`` may also be a list of ``{"model", "answer"}`` objects, or be left out. The dataset may be a
directory instead: each ``*.json`` in it is a points file, each ``*.txt`` one answer named
``<topic>_<model>.txt``. Every answer becomes one row: ``id`` = topic, ``system`` = model, ``answer`` =
the text, ``checks`` = the topic's points mapped to the ``checks`` schema (:func:`map_point`). Rows of
the JSON files come first (line = the topic's element number in its file), then the answer files
(line = the file's position among the directory's ``*.txt`` files, sorted by name).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragscore_workers.counts import noun_names
from ragscore_workers.errors import DatasetError

from ._seed import SeedError, identifier, pick, read_json, row_error, text
from .loaders import CONVERT_HINT, MAX_LINE_BYTES, Record, RowError, binary_kind, kind

__all__ = ["eval_points_records", "looks_like_eval_points", "map_point", "match_answer_file"]

#: Point fields taken as they are (the ``checks`` schema's own names).
_SAME = ("id", "weight", "category", "informational", "depends_on", "suggestion", "normalizers", "extract")
#: Point fields of the ``checks`` schema and the names a points file may give them.
_ALIASES = {"text": ("text", "description", "point"), "type": ("type", "validator"), "params": ("params", "config")}
_KNOWN = set(_SAME).union(*_ALIASES.values())
#: Topic fields the reader uses; any other field of a topic goes to the rows' metadata.
_QUESTION = ("question", "prompt")
_REFERENCE = ("reference", "reference_answer", "golden_answer")
_TOPIC_KEYS = {"topic", "evaluation_points", "answers", *_QUESTION, *_REFERENCE}
#: The topic's list of points, as its errors name it (``evaluation_points item 2 (x)``).
_LIST = "evaluation_points"


def map_point(raw: Any, where: str) -> dict[str, Any]:
    """One point of a points file in the ``checks`` schema: ``text`` from text|description|point, ``type``
    from type|validator, ``params`` from params|config or else from the point's other keys (so
    ``{"type": "keyword", "keywords": [...]}`` works); id, weight, category, informational, depends_on,
    suggestion, normalizers and extract are kept as they are."""
    if isinstance(raw, str):
        raise SeedError(f"{where}: a bare string is not a point; give an object with a validator type")
    if not isinstance(raw, dict):
        raise SeedError(f"{where}: expected an object, got {kind(raw)}")
    point = {k: raw[k] for k in _SAME if k in raw}
    for target, names in _ALIASES.items():
        name, value = pick(raw, names, where)
        if name is not None:
            point[target] = value
    if "type" not in point:
        raise SeedError(f"{where}: no validator type (give 'type' or 'validator')")
    rest = {k: v for k, v in raw.items() if k not in _KNOWN}
    if rest and "params" in point:
        raise SeedError(f"{where}: unknown {noun_names(sorted(rest), 'key')} beside params")
    if rest:
        point["params"] = rest
    return point


def _points(raw: Any) -> list[dict[str, Any]]:
    """The topic's points mapped and validated as the ``checks`` metric will read them."""
    from ragscore_workers.metrics._validators import PointSpecError
    from ragscore_workers.metrics.checks import parse_points, point_place

    if not isinstance(raw, list):
        raise SeedError(f"evaluation_points: expected a list, got {kind(raw)}")
    points = [
        map_point(p, point_place(i, p.get("id") if isinstance(p, dict) else None, _LIST)) for i, p in enumerate(raw)
    ]
    try:
        parse_points(points, _LIST)
    except PointSpecError as exc:
        raise SeedError(str(exc)) from None
    return points


@dataclass(frozen=True)
class _Topic:
    name: str
    #: Where it is defined: ``file.json element 2``.
    where: str
    #: The row fields every answer to it shares (id, checks, question, reference, metadata).
    base: Record

    def row(self, model: str, answer: str, **source: str) -> Record:
        return {**self.base, "system": model, "answer": answer, "metadata": {**self.base["metadata"], **source}}


def _topic(element: Any, file: Path, where: str) -> _Topic:
    if not isinstance(element, dict):
        raise SeedError(f"expected a topic object, got {kind(element)}")
    for key in ("topic", "evaluation_points"):
        if key not in element:
            raise SeedError(f"no {key!r}")
    name = identifier(element["topic"], "topic")
    base: Record = {"id": name, "checks": _points(element["evaluation_points"])}
    for field, names in (("question", _QUESTION), ("reference", _REFERENCE)):
        key, value = pick(element, names, "topic")
        if key is not None:
            base[field] = text(value, key)
    base["metadata"] = {"points_file": file.name} | {k: v for k, v in element.items() if k not in _TOPIC_KEYS}
    return _Topic(name, where, base)


def _json_answers(raw: Any) -> Iterator[tuple[str, str] | SeedError]:
    """``(model, answer)`` per answer of a topic, or the error of that one answer."""
    if raw is None:
        return
    if isinstance(raw, dict):
        for key, value in raw.items():
            try:
                yield identifier(key, "answers key"), text(value, f"answers[{key!r}]", empty_ok=True)
            except SeedError as exc:
                yield exc
        return
    if not isinstance(raw, list):
        raise SeedError(f"answers: expected an object {{model: answer}} or a list, got {kind(raw)}")
    for i, item in enumerate(raw):
        where = f"answers[{i}]"
        try:
            if not isinstance(item, dict):
                raise SeedError(f"{where}: expected {{model, answer}}, got {kind(item)}")
            unknown = sorted(set(item) - {"model", "system", "answer", "text"})
            if unknown:
                raise SeedError(f"{where}: unknown {noun_names(unknown, 'key')}; give model and answer")
            model_key, model = pick(item, ("model", "system"), where)
            answer_key, answer = pick(item, ("answer", "text"), where)
            if model_key is None or answer_key is None:
                raise SeedError(f"{where}: needs a model and an answer")
            yield identifier(model, f"{where}.{model_key}"), text(answer, f"{where}.{answer_key}", empty_ok=True)
        except SeedError as exc:
            yield exc


def _elements(file: Path) -> list[tuple[int, Any]]:
    data = read_json(file)
    if isinstance(data, dict):
        return [(1, data)]
    if isinstance(data, list):
        return list(enumerate(data, start=1))
    raise DatasetError(f"{file}: expected a topic object {{topic, answers, evaluation_points}} or a list of them")


def _inputs(path: Path) -> tuple[list[Path], list[Path]]:
    """The points files and the answer files of a file or a directory."""
    if not path.is_dir():
        return [path], []
    entries = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    json_files = [p for p in entries if p.suffix.lower() == ".json"]
    if not json_files:
        raise DatasetError(f"{path}: no evaluation points file (*.json) in the directory (read as eval-points)")
    return json_files, [p for p in entries if p.suffix.lower() == ".txt"]


def _slug(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def match_answer_file(stem: str, topics: Iterable[str]) -> tuple[str, str] | None:
    """``(topic, model)`` for a file stem ``<topic>_<model>``; the topic is spelled as written or as its
    slug (lower case, runs of other characters as ``_``), case-insensitively; the longest topic wins."""
    lowered = stem.lower()
    found: dict[int, set[str]] = {}
    for name in topics:
        for key in {name.lower(), _slug(name)}:
            if key and lowered.startswith(key + "_") and stem[len(key) + 1 :].strip():
                found.setdefault(len(key), set()).add(name)
    if not found:
        return None
    length = max(found)
    if len(found[length]) > 1:
        raise SeedError(f"the name fits the topics {sorted(found[length])} alike; rename the file or a topic")
    return found[length].pop(), stem[length + 1 :]


def _answer_file(
    file: Path, topics: dict[str, _Topic], broken: dict[str, str], given: dict[tuple[str, str], str]
) -> Record:
    match = match_answer_file(file.stem, topics)
    if match is None:
        unreadable = match_answer_file(file.stem, broken)
        if unreadable is not None:
            raise SeedError(f"its topic {unreadable[0]!r} could not be read ({broken[unreadable[0]]})")
        shown = ", ".join(repr(t) for t in sorted(topics)[:10])
        raise SeedError(f"no topic matches; answer files are named <topic>_<model>.txt (topics: {shown})")
    name, model = match
    if (name, model) in given:
        raise SeedError(f"topic {name!r} already has an answer by {model!r} ({given[name, model]})")
    if file.stat().st_size > MAX_LINE_BYTES:
        raise SeedError(f"larger than {MAX_LINE_BYTES:,} bytes")
    data = file.read_bytes()
    try:
        answer = data.removeprefix(codecs.BOM_UTF8).decode("utf-8")  # Notepad's byte-order mark is no text
    except UnicodeDecodeError as exc:
        raise SeedError(_not_utf8(data, exc)) from None
    given[name, model] = file.name
    return topics[name].row(model, answer, answer_file=file.name)


def _not_utf8(data: bytes, exc: UnicodeDecodeError) -> str:
    """Why an answer file is no UTF-8 text (UTF-16, as PowerShell's > writes, or another encoding), and the fix."""
    return binary_kind(data) or f"invalid UTF-8 at byte {exc.start} ({CONVERT_HINT})"


def eval_points_records(path: Path) -> Iterator[tuple[int, Record | RowError]]:
    """Stream ``(line, row | RowError)`` from a points file or a directory of points and answer files."""
    json_files, answer_files = _inputs(path)
    topics: dict[str, _Topic] = {}
    broken: dict[str, str] = {}  # topics whose element could not be read -> where
    given: dict[tuple[str, str], str] = {}  # (topic, model) -> where its answer came from
    for file in json_files:
        for pos, element in _elements(file):
            where = f"{file.name} element {pos}"
            try:
                topic = _topic(element, file, where)
                answers = list(_json_answers(element.get("answers")))
            except SeedError as exc:
                name = element.get("topic") if isinstance(element, dict) else None
                if isinstance(name, (str, int)) and not isinstance(name, bool):
                    broken.setdefault(str(name).strip(), where)
                yield pos, row_error(pos, f"{where}: {exc}", element)
                continue
            if topic.name in topics:
                raise DatasetError(f"{where}: topic {topic.name!r} is already defined in {topics[topic.name].where}")
            topics[topic.name] = topic
            for answer in answers:
                if isinstance(answer, SeedError):
                    yield pos, row_error(pos, f"{where}: {answer}", element.get("answers"))
                elif (topic.name, answer[0]) in given:
                    yield pos, row_error(pos, f"{where}: two answers by {answer[0]!r}", element.get("answers"))
                else:
                    given[topic.name, answer[0]] = where
                    yield pos, topic.row(*answer)
    for number, file in enumerate(answer_files, start=1):
        try:
            yield number, _answer_file(file, topics, broken, given)
        except (SeedError, OSError) as exc:
            yield number, row_error(number, f"{file.name}: {exc}", file.name)


def looks_like_eval_points(data: Any) -> bool:
    """A topic object, or a non-empty list of them (each with ``evaluation_points``)."""
    items = data if isinstance(data, list) else [data]
    return bool(items) and all(isinstance(i, dict) and "evaluation_points" in i for i in items)
