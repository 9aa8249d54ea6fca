"""Where a report's data comes from: a run in the store, or an output directory of an earlier run.

Both give a :class:`RunData`: the summary, a way to stream the items (as many times as needed), the
unreadable rows, and the run's facts (suite, dataset, format) when they are known.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import redis
from pydantic import ValidationError

from ragscore_workers.answers import marked_unanswered, unanswered_why, without_mark
from ragscore_workers.errors import ConfigError, DatasetError, StoreError
from ragscore_workers.fastjson import loads_line
from ragscore_workers.schemas import Row, RunSummary, item_key, split_key
from ragscore_workers.scoring import cancel_skipped, with_skipped
from ragscore_workers.store import RawItem, RunState, RunStore

from ..datasets import iter_rows
from ..gates import GateResult, read_gate_record
from ..terminal import is_path, summary_commands
from .previous import moved_reports, unwritten_reports
from .texts import TargetAnswers, asked_targets, preview

__all__ = [
    "ANSWERS",
    "RUN_INFO",
    "RunData",
    "check_items_kept",
    "from_dir",
    "from_store",
    "iter_answers_file",
    "iter_items_file",
    "open_run",
    "store_answer_rows",
    "store_answers",
    "store_info",
]

#: File of an output directory with the run's facts (suite, dataset, format), written with the reports.
RUN_INFO = "run_info.json"
#: File of an output directory with the answered rows of a run that asked targets.
ANSWERS = "answers.jsonl"


@dataclass(frozen=True)
class RunData:
    """A finished run as the reports see it."""

    summary: RunSummary
    items: Callable[[], Iterator[RawItem]]
    failed_rows: Callable[[], Iterator[dict[str, Any]]]
    #: ``{"suite": {...}, "dataset": path, "format": ..., "format_options": {...}, "dataset_fingerprint": ...}``
    #: (empty when unknown; the fingerprint only where the run recorded one).
    info: dict[str, Any] = field(default_factory=dict)
    #: Where it came from: a run id or a directory.
    origin: str = ""
    #: The output directory it was read from (None for the store).
    directory: Path | None = None
    #: The answers its targets gave, read for the few items asked (None where none can be kept: a list of items).
    answers: TargetAnswers | None = None
    #: Every answered row of a store's run that asked targets, as its answers.jsonl holds them (None for any other
    #: run): what a json report writes beside its items, so that its DIR is complete.
    answer_rows: Callable[[], Iterator[dict[str, Any]]] | None = None
    #: The answers.jsonl of the DIR it was read from (None where it has none, or the run asked no target: not its
    #: own): a json report elsewhere copies it byte for byte, as :attr:`answer_rows` for a run of the store.
    answers_file: Path | None = None
    #: The run's gate results, as its DIR's gates.json holds them (None: no gate was checked, or a run of the store,
    #: whose gates are checked once its reports are written).
    gates: list[GateResult] | None = None


def iter_items_file(path: Path) -> Iterator[RawItem]:
    """Stream an ``items.jsonl`` as :class:`RawItem` (the store's plain-dict form)."""
    with path.open("rb") as fh:  # bytes: a line cut inside a UTF-8 character is a bad line (json.loads decodes)
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = loads_line(line)
                meta = {"id": rec["id"], "system": rec.get("system"), "group": rec.get("group")}
                _check_item_fields(rec)
            except (ValueError, KeyError, TypeError) as exc:
                raise ConfigError(f"{path}:{number}: not an items.jsonl line ({exc})") from exc
            for name in ("question_type", "question_sha"):
                if rec.get(name) is not None:
                    meta[name] = rec[name]
            key = item_key(meta["system"], meta["id"])
            yield RawItem(key=key, meta=meta, metrics=rec.get("metrics") or {})


def iter_answers_file(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Stream a target run's ``answers.jsonl`` as ``(item key, answer)``, each answer as the store holds it: ``{"row":
    ...}``, with the ``error`` its mark says where the target failed (:func:`~ragscore_workers.answers.unanswered_why`;
    the inverse of :func:`store_answer_rows`). ConfigError naming the file where it is missing or a line is not an
    answered row."""
    if not path.is_file():
        raise ConfigError(f"{path} is missing: the answers of the run's targets are kept there")
    for row in _iter_jsonl(path):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise ConfigError(f"{path}: {str(row)[:80]} is not an answered row (an object with a text id)")
        key = item_key(row.get("system"), row["id"])
        why = unanswered_why(row, row.get("metadata"), row.get("answer"))
        yield key, {"row": row} if why is None else {"row": without_mark(row), "error": why}


def _check_item_fields(rec: dict[str, Any]) -> None:
    """ValueError for a hand-edited line ragscore never writes: an id that is no text, metrics that are no object."""
    if not isinstance(rec["id"], str) or not isinstance(rec.get("system"), (str, type(None))):
        raise ValueError(f"id and system are text: id {rec['id']!r}, system {rec.get('system')!r}")
    if not isinstance(rec.get("metrics") or {}, dict):
        raise ValueError(f"metrics is an object of outputs, not {type(rec['metrics']).__name__}")


def _iter_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open("rb") as fh:  # bytes: a line cut inside a UTF-8 character is a bad line (json.loads decodes)
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise ConfigError(f"{path}:{number}: not a {path.name} line ({exc})") from exc


def _read(path: Path, parse: Callable[[str], Any]) -> Any:
    """``parse`` of the file's text; ConfigError naming the file when it is not one ragscore wrote (cut short by a
    copy, edited, of another version), in place of a traceback."""
    try:
        return parse(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        first = exc.errors()[0]
        reason = f"{'.'.join(str(p) for p in first['loc']) or 'its content'}: {first['msg']}"
    except ValueError as exc:
        reason = str(exc)
    raise ConfigError(f"{path}: not a {path.name} ragscore wrote ({reason})")


def store_info(store: RunStore, run_id: str) -> dict[str, Any]:
    """The run's facts from the store's meta hash (no secrets are kept there)."""
    meta = store.meta(run_id)
    info: dict[str, Any] = {"run_id": run_id}
    for key in ("suite", "format_options", "queues"):
        if meta.get(key):
            info[key] = json.loads(meta[key])
    for key in ("dataset", "format", "dataset_fingerprint"):
        if meta.get(key):
            info[key] = meta[key]
    return info


def store_answers(store: RunStore, run_id: str) -> TargetAnswers:
    """The answers the run's targets gave, from the store: StoreError where it does not answer."""

    def answers(keys: set[str]) -> dict[str, str | None]:
        try:
            stored = store.answers_of(run_id, keys)
        except redis.RedisError as exc:
            raise StoreError(f"the run store did not answer: {exc}") from exc
        return {key: preview(answer["row"].get("answer")) for key, answer in stored.items()}

    return TargetAnswers(answers, "the run store")


def store_answer_rows(store: RunStore, run_id: str) -> Iterator[dict[str, Any]]:
    """Every answered row of the run, as answers.jsonl holds it: a question a target could not answer keeps its row
    without an answer, marked with why (:func:`~ragscore_workers.answers.marked_unanswered`)."""
    for answer in store.iter_answers(run_id):
        yield answer["row"] if "error" not in answer else marked_unanswered(answer["row"], answer["error"])


def _file_answers(path: Path, keys: set[str]) -> dict[str, str | None]:
    """The answers of ``keys`` in a run's answers.jsonl (their previews), in one pass that stops once it has them all;
    DatasetError naming the file where it is gone (it is read as a dataset, whose error would call it one)."""
    if not path.is_file():
        raise DatasetError(f"{path} is gone: keep it with the run's other files")
    found: dict[str, str | None] = {}
    # no field limit: a target's answer is bounded by its reply's size, and the store's shows whole too
    for _, row in iter_rows(path, "jsonl", ids={split_key(key)[1] for key in keys}, max_chars=sys.maxsize):
        if isinstance(row, Row) and (key := item_key(row.system, row.id)) in keys:
            found[key] = preview(row.answer)  # the rest let go: the worst items' answers may each be long
            if len(found) == len(keys):
                break
    return found


def check_items_kept(store: RunStore, run_id: str) -> None:
    """The store's refusal of run ``run_id`` where its items left it (:meth:`RunStore.check_items_kept`), naming the
    folder its reports are in now (:func:`.previous.moved_reports`): a later run into the folder it was released to
    moved them to its previous/RUN_ID, and the store of a run that moving run did not touch (an embedded run's, moved
    by a cluster run) names the folder they left."""
    released = store.released_to(run_id)
    store.check_items_kept(run_id, released and str(moved_reports(Path(released), run_id)))


def from_store(store: RunStore, run_id: str, summary: RunSummary | None = None, broker: str | None = None) -> RunData:
    """A finished run of the store (a cancelled one's items hold what the cancel skipped as stopped, as its
    summary counts them); one not finished is an error whose commands name its ``broker`` (the --broker given)."""
    summary = summary or store.finished_summary(run_id, **summary_commands(run_id, None, broker))
    check_items_kept(store, run_id)
    skipped = cancel_skipped(summary.metrics) if summary.state == RunState.CANCELLED else {}
    info = store_info(store, run_id)
    return RunData(
        summary=summary,
        items=lambda: with_skipped(store.iter_raw_items(run_id), skipped),
        failed_rows=lambda: store.failed_rows(run_id),
        info=info,
        origin=run_id,
        answers=store_answers(store, run_id),
        answer_rows=partial(store_answer_rows, store, run_id) if asked_targets(info) else None,
    )


def from_dir(directory: Path) -> RunData:
    """An output directory with ``summary.json`` and ``items.jsonl`` (and ``run_info.json`` if written)."""
    summary_path, items_path = directory / "summary.json", directory / "items.jsonl"
    if unwritten := unwritten_reports(directory):
        raise ConfigError(f"{unwritten}, then run this command again")
    for path in (summary_path, items_path):
        if not path.is_file():
            raise ConfigError(f"{directory} is not a ragscore output directory: {path.name} is missing")
    summary = _read(summary_path, RunSummary.model_validate_json)
    info_path = directory / RUN_INFO
    info = _read(info_path, json.loads) if info_path.is_file() else {}
    answers = directory / ANSWERS
    return RunData(
        summary=summary,
        items=lambda: iter_items_file(items_path),
        failed_rows=lambda: _iter_jsonl(directory / "failed_rows.jsonl"),
        info=info,
        origin=str(directory),
        directory=directory,
        answers=TargetAnswers(partial(_file_answers, answers), str(answers)),
        # a run without targets has none of its own: one there is another's (yours, an older ragscore's unrecorded)
        answers_file=answers if asked_targets(info) and answers.is_file() else None,
        gates=read_gate_record(directory),
    )


def open_run(ref: str, store: Callable[[], RunStore], broker: str | None = None) -> RunData:
    """``ref`` is an output directory, else a run id looked up in ``store()``, the store of ``broker`` (the
    --broker given: the commands an unfinished run's error says name it)."""
    path = Path(ref)
    if path.is_dir():
        return from_dir(path)
    if is_path(ref):
        raise ConfigError(f"{ref}: no such output directory (and not a run id)")
    runs = store()
    if not runs.exists(ref):
        raise ConfigError(f"{ref}: no such output directory, and no run with that id in the store")
    return from_store(runs, ref, broker=broker)
