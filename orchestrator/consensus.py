"""Consensus golden answers: after several ``system``s answered the same questions, build a candidate
reference per question from the sentences of the answers that passed the most heavily weighted points.

Per question, the scored evaluation points (not informational, not ``not_run`` or ``error``) are taken heaviest first.
For each point, the answers that passed it (read from the run's ``checks`` results) are tried best first
(highest passed weight, then input order); the point's validator is run again on each sentence of the
answer, and the first sentence that passes the point on its own joins the reference. A sentence already
chosen that passes the point too is credited with it instead of adding another. A point that even an empty
text passes (a negation, a length maximum) adds no sentence of its own: after the others, it is credited to
the first chosen sentence that passes it. A point that no answer passed is ``uncovered``; one that answers
passed only as a whole (a length minimum, a point whose validator runs on another queue, no spec at hand, or
a negation no chosen sentence passes) is ``unlocalized``.

Every sentence keeps its provenance: system, sentence index in that answer, the points it carries and
their total weight. The output is a dataset file (JSONL: ``id``, ``question``, ``reference``,
``metadata.consensus``) the next run can use as ``reference``. Answers are held in memory, one per
(question, system), while the file is built, and its text until it is written whole (its sha256 is recorded before
the file is written): about the size of the answers it is built from. A file there that ragscore has no record of
writing is refused at the first line that differs from it: the rest is never built.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics import load_all
from ragscore_workers.metrics._validators import PointSpecError
from ragscore_workers.metrics.checks import ParsedPoint, evaluate_points, parse_points
from ragscore_workers.schemas import Row, Suite
from ragscore_workers.store import RunStore

from .atomic_file import link_target
from .datasets import iter_rows
from .reports.files import write_recorded
from .reports.previous import unwritten_reports
from .reports.source import RUN_INFO, check_items_kept, store_info
from .suite import load_suite

__all__ = [
    "RunSource",
    "consensus_for",
    "consensus_rows",
    "load_outcomes",
    "run_source",
    "split_sentences",
    "write_consensus",
]

_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
#: Outcome lists per system of one question: ``{system: [point result dicts from checks details]}``.
Outcomes = Mapping[str | None, list[dict[str, Any]]]


def split_sentences(text: str) -> list[str]:
    """Sentences with their end punctuation kept (a break needs whitespace after ``.``, ``!`` or ``?``)."""
    return [s.strip() for s in _SENTENCE_BREAK.split(text) if s.strip()]


def _scored(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in points if not p.get("informational") and p.get("status") not in ("not_run", "error")]


def _passed_weight(points: list[dict[str, Any]]) -> float:
    return sum(p["weight"] for p in _scored(points) if p.get("passed"))


def _specs(raw: list[dict[str, Any]] | None) -> dict[str, ParsedPoint]:
    """Point specs by id, with ``depends_on`` dropped so one point can be run alone on one sentence."""
    if not raw:
        return {}
    try:
        parsed = parse_points(raw)
    except PointSpecError:
        return {}
    return {p.id: dataclasses.replace(p, point=p.point.model_copy(update={"depends_on": []})) for p in parsed}


def _passes(spec: ParsedPoint, row: Row, text: str) -> bool:
    try:
        return evaluate_points([spec], row, text)[0]["passed"] is True
    except PointSpecError:
        return False


def consensus_for(rows: Mapping[str | None, Row], outcomes: Outcomes, suite_points: list[dict] | None = None) -> dict:
    """The consensus of one question: ``{"reference", "sentences", "covered", "uncovered", "unlocalized"}``.

    ``rows``: each system's answer row (input order); ``outcomes``: each system's ``checks`` point results.
    """
    systems = [s for s in rows if s in outcomes and rows[s].answer]
    order = sorted(systems, key=lambda s: -_passed_weight(outcomes[s]))  # stable: input order breaks ties
    specs = {s: _specs(rows[s].checks if rows[s].checks is not None else suite_points) for s in systems}
    points: dict[str, float] = {}
    for s in systems:
        for p in _scored(outcomes[s]):
            points.setdefault(p["id"], p["weight"])
    free = {pid for pid in points if _needs_no_text(pid, systems, rows, specs)}
    chosen: list[dict[str, Any]] = []
    covered, uncovered, unlocalized = [], [], []
    for pid, weight in sorted(points.items(), key=lambda kv: (kv[0] in free, -kv[1])):
        passers = [s for s in order if any(p["id"] == pid and p.get("passed") for p in outcomes[s])]
        if not passers:
            uncovered.append(pid)
            continue
        holder = next((c for c in chosen if _carries(c, pid, rows, specs)), None)
        if holder is None:  # a point an empty text passes is carried by a chosen sentence or by none
            holder = None if pid in free else _localize(pid, passers, rows, specs)
            if holder is None:
                unlocalized.append(pid)
                continue
            chosen.append(holder)
        holder["points"].append(pid)
        holder["weight"] += weight
        covered.append(pid)
    return {
        "reference": " ".join(c["text"] for c in chosen) or None,
        "sentences": chosen,
        "systems": systems,
        "covered": covered,
        "uncovered": uncovered,
        "unlocalized": unlocalized,
    }


def _needs_no_text(pid: str, systems: list[str | None], rows: Mapping[str | None, Row], specs: Mapping) -> bool:
    """Does an empty text pass point ``pid`` (a negation, a length maximum)? Then no sentence carries it alone."""
    spec, system = next(((specs[s][pid], s) for s in systems if pid in specs[s]), (None, None))
    return spec is not None and _passes(spec, rows[system], "")


def _carries(chosen: dict[str, Any], pid: str, rows: Mapping[str | None, Row], specs: Mapping) -> bool:
    """Does an already chosen sentence pass point ``pid`` too?"""
    spec = specs[chosen["system"]].get(pid)
    return spec is not None and _passes(spec, rows[chosen["system"]], chosen["text"])


def _localize(
    pid: str, passers: list[str | None], rows: Mapping[str | None, Row], specs: Mapping[str | None, dict]
) -> dict[str, Any] | None:
    """The first sentence, of the best answer that passed point ``pid``, that passes it alone."""
    for system in passers:
        spec = specs[system].get(pid)
        if spec is None:
            continue
        row = rows[system]
        for index, sentence in enumerate(split_sentences(row.answer or "")):
            if _passes(spec, row, sentence):
                return {"text": sentence, "system": system, "sentence_index": index, "points": [], "weight": 0.0}
    return None


def load_outcomes(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str | None], list[dict[str, Any]]]:
    """``{(id, system): checks point results}`` of a run's items; ConfigError when no item has any."""
    outcomes = {}
    for item in items:
        checks = (item.get("metrics") or {}).get("checks") or {}
        points = (checks.get("details") or {}).get("points")
        if checks.get("error") is None and points:
            outcomes[(item["id"], item.get("system"))] = points
    if not outcomes:
        raise ConfigError("consensus needs a run scored with the `checks` metric; this run has no checks results")
    return outcomes


def consensus_rows(
    dataset_rows: Iterable[Row],
    outcomes: Mapping[tuple[str, str | None], list[dict[str, Any]]],
    suite_points: list[dict] | None = None,
) -> Iterator[dict[str, Any]]:
    """One dataset row per question the run scored with checks (questions in input order)."""
    load_all()  # validators of every family, so every point type of the run parses here too
    by_question: dict[str, dict[str | None, Row]] = {}
    for row in dataset_rows:
        by_question.setdefault(row.id, {})[row.system] = row
    for qid, rows in by_question.items():
        found = {s: outcomes[(qid, s)] for s in rows if (qid, s) in outcomes}
        if not found:
            continue
        result = consensus_for(rows, found, suite_points)
        reference = result.pop("reference")
        out: dict[str, Any] = {"id": qid, "question": next((r.question for r in rows.values() if r.question), None)}
        if reference is not None:
            out["reference"] = reference
        yield out | {"metadata": {"consensus": result}}


@dataclass(frozen=True)
class RunSource:
    """Where a run's consensus reads from: its items, its dataset (and format), its suite's points."""

    items: Iterable[Mapping[str, Any]]
    dataset: Path
    fmt: str | None = None
    fmt_options: dict[str, Any] = field(default_factory=dict)
    suite_points: list[dict[str, Any]] | None = None


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        yield from (json.loads(line) for line in fh)


def run_source(
    run: str | Path, *, dataset: Path | None = None, suite: Path | None = None, store: Callable[[], RunStore]
) -> RunSource:
    """A run's ``--out DIR`` (items from ``items.jsonl``) or a run id (items from the store).

    The dataset path, format and suite come from the DIR's ``run_info.json`` (else the run's meta in the store)
    unless ``dataset`` / ``suite`` are given; ``store`` is called only when the store is needed (a finished run
    leaves the store after RAGSCORE_RUN_TTL_S; its DIR keeps what consensus needs).
    """
    run_dir = Path(run)
    info: dict[str, Any] = {}
    if run_dir.is_dir():
        items_path = run_dir / "items.jsonl"
        if unwritten := unwritten_reports(run_dir):
            raise ConfigError(f"{unwritten}, then run this command again")
        if not items_path.exists():
            raise ConfigError(f"{items_path} not found: give the --out DIR of a finished run")
        if dataset is None or suite is None:
            info = _dir_info(run_dir, store)
        items: Iterable[Mapping[str, Any]] = _jsonl(items_path)
    else:
        run_store = store()
        info = store_info(run_store, str(run))
        check_items_kept(run_store, str(run))
        items = (item.model_dump() for item in run_store.iter_items(str(run)))
    suite_model = load_suite(suite).suite if suite is not None else None
    if suite_model is None and info.get("suite"):
        suite_model = Suite.model_validate(info["suite"])
    points = suite_model.checks_points if suite_model is not None else None
    if dataset is not None:
        return RunSource(items, dataset, suite_points=points)
    if not info.get("dataset"):
        raise ConfigError(f"{run}: the run's dataset is not recorded; pass --dataset (and --suite)")
    return RunSource(
        items, Path(info["dataset"]), info.get("format") or None, info.get("format_options") or {},
        points,
    )  # fmt: skip


def _dir_info(run_dir: Path, store: Callable[[], RunStore]) -> dict[str, Any]:
    """The run's facts from the DIR's run_info.json, else from the store (the run id in run.json)."""
    info_path, run_json = run_dir / RUN_INFO, run_dir / "run.json"
    if info_path.is_file():
        info: dict[str, Any] = json.loads(info_path.read_text(encoding="utf-8"))
        return info
    if not run_json.exists():
        raise ConfigError(f"{run_json} not found: pass --dataset and --suite for this run")
    return store_info(store(), json.loads(run_json.read_text(encoding="utf-8"))["run_id"])


def write_consensus(out: Path, source: RunSource) -> tuple[int, int]:
    """Write the consensus dataset (JSONL) to ``out``; returns (questions, questions with a reference). A file
    there is replaced only when ragscore wrote it and it was not edited since, or it holds this output already
    (:func:`write_recorded`): a user's file, another run's summary.json, an edited consensus file are refused. A
    link at ``out`` is written through: its target is the file written, and checked (:func:`link_target`)."""
    questions = with_reference = 0

    def lines() -> Iterator[str]:  # read and built as write_recorded takes them: a refusal stops them
        nonlocal questions, with_reference
        outcomes = load_outcomes(source.items)
        rows = (r for _, r in iter_rows(source.dataset, source.fmt, source.fmt_options) if isinstance(r, Row))
        for row in consensus_rows(rows, outcomes, source.suite_points):
            questions += 1
            with_reference += "reference" in row
            yield json.dumps(row, ensure_ascii=False) + "\n"

    write_recorded(link_target(out, "--out"), lines(), "--out", "the consensus dataset")
    return questions, with_reference
