"""``checks`` (evaluation points framework): weighted pass/fail points over the answer.

A point (one entry of the row's ``checks``, else of the suite's ``points`` param)::

    {"id": "p1", "text": "Cites its sources", "type": "citation", "params": {"min_count": 2},
     "weight": 1.0, "category": "General", "informational": false, "depends_on": ["p0"],
     "suggestion": "Add citations: {count} of {min_count}", "normalizers": ["lowercase"],
     "extract": [{"regex": "Answer:(.*)", "group": 1}, {"json_path": "$.items[0]"}]}

Per point: ``extract`` steps run in order on the answer (each step's output is the next one's input),
then the normalizers, then the validator (see ``_validators``). A point whose ``depends_on`` point
failed, was skipped or has not run (it comes later, or runs on another queue) is skipped, and a
skipped point counts as failed. Score = passed weight / total weight of the scored points, 1.0 with
none (scored points that all weigh 0 are refused: they would score 1.0 whatever the answer); informational
points are evaluated and reported, never scored. ``details["categories"]`` holds the same ratio per category (none
for a category whose scored points all weigh 0: it moves nothing).
A malformed point (a cycle of ``depends_on`` too) fails the whole row with a message naming it.
"""

from __future__ import annotations

import json
import logging
import re
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..counts import and_more, noun_names, place
from ..schemas import MetricResult, Queue, Row
from ._bounded_regex import BoundedPattern
from ._params import booleans_read_as_numbers
from ._queue_validators import EmbeddingCheckParams, embedding_pair  # registers the embedding and code_test ones
from ._text import CITATION_MARKER, strip_diacritics, strip_punctuation
from ._validators import (
    PLANNED,
    VALIDATORS,
    Outcome,
    PointInput,
    PointSpecError,
    ValidatorDef,
    compile_regex,
    get_validator,
    parse_json_text,
)
from .code_test import code_column_hint, row_code
from .registry import RunContext, register, unset_means

__all__ = [
    "NORMALIZERS",
    "ChecksParams",
    "Point",
    "checks",
    "embedding_point_texts",
    "evaluate_points",
    "parse_points",
    "point_place",
    "refused_points",
]

log = logging.getLogger(__name__)

_MD_PATTERNS = [
    (re.compile(r"```[^\n]*\n?|~~~[^\n]*\n?"), ""),  # code fences (content kept)
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # images -> alt text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # links -> text
    (re.compile(r"^\s{0,3}(#{1,6}|>+|[-*+]|\d+[.)])\s+", re.MULTILINE), ""),  # headings, quotes, bullets
    (re.compile(r"(?<!\w)(\*\*|__|\*|_|~~|`)(?=\S)(.+?)(?<=\S)\1(?!\w)"), r"\2"),  # emphasis, inline code
    (re.compile(r"^\s*([-*_]\s*){3,}$|^\|?(\s*:?-+:?\s*\|)+\s*$", re.MULTILINE), ""),  # rules, table rulers
    (re.compile(r"\s*\|\s*"), " "),  # table cell bars
]


def _strip_markdown(text: str) -> str:
    for pattern, repl in _MD_PATTERNS:
        text = pattern.sub(repl, text)
    return text


#: Text normalizers a point may list; applied in the order given, after extraction.
NORMALIZERS: dict[str, Callable[[str], str]] = {
    "lowercase": str.lower,
    "strip": str.strip,
    "collapse_whitespace": lambda s: " ".join(s.split()),
    "strip_markdown": _strip_markdown,
    "strip_punctuation": strip_punctuation,
    "strip_diacritics": strip_diacritics,
    "nfkc": lambda s: unicodedata.normalize("NFKC", s),
    "strip_citations": lambda s: re.sub(r"\s*" + CITATION_MARKER, "", s),
}
_JSON_PATH = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\[\"([^\"]*)\"\]|\['([^']*)'\]")


class ExtractStep(BaseModel):
    """One extraction: a ``regex`` group (first match; default group 1, or 0 without groups) or a ``json_path``."""

    model_config = ConfigDict(extra="forbid")

    regex: str | None = None
    group: int | str | None = None
    ignore_case: bool = False
    json_path: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ExtractStep:
        if (self.regex is None) == (self.json_path is None):
            raise ValueError("an extract step needs exactly one of 'regex' or 'json_path'")
        if self.regex is not None:
            compiled, group = self._compiled()
            known = group in compiled.groupindex if isinstance(group, str) else 0 <= group <= compiled.groups
            if not known:
                raise ValueError(f"regex {self.regex!r} has no group {group!r}")
        elif self.json_path is not None and not _json_path_tokens(self.json_path):
            raise ValueError(f"json_path {self.json_path!r} is not like $.a.b[0]")
        return self

    def _compiled(self) -> tuple[BoundedPattern, int | str]:
        compiled = compile_regex(self.regex or "", re.DOTALL | (re.IGNORECASE if self.ignore_case else 0))
        return compiled, self.group if self.group is not None else (1 if compiled.groups else 0)

    def apply(self, text: str) -> str:
        """The extracted text; ValueError when nothing is found."""
        if self.regex is not None:
            compiled, group = self._compiled()
            match = compiled.search(text)
            value = match.group(group) if match else None
            if value is None:
                raise ValueError(f"no match for regex {self.regex!r}")
            return value
        data = parse_json_text(text)
        for key in _json_path_tokens(self.json_path or ""):
            if isinstance(key, int) and isinstance(data, list) and key < len(data):
                data = data[key]
            elif isinstance(key, str) and isinstance(data, dict) and key in data:
                data = data[key]
            else:
                raise ValueError(f"json_path {self.json_path!r}: no {key!r}")
        return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)


def _json_path_tokens(path: str) -> list[int | str]:
    path = path.strip()
    path = path[1:] if path.startswith("$") else path
    path = path if path.startswith((".", "[")) else "." + path
    tokens: list[int | str] = []
    pos = 0
    while pos < len(path):
        match = _JSON_PATH.match(path, pos)
        if match is None:
            return []
        name, index, dq, sq = match.groups()
        tokens.append(int(index) if index is not None else next(v for v in (name, dq, sq) if v is not None))
        pos = match.end()
    return tokens


def _as_id(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Point(BaseModel):
    """One evaluation point as written in a row or a suite."""

    model_config = ConfigDict(extra="forbid")

    type: str
    params: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None
    text: str = ""
    weight: float = Field(default=1.0, ge=0.0, allow_inf_nan=False)
    category: str = "General"
    informational: bool = False
    depends_on: list[str] = Field(default_factory=list)
    suggestion: str | None = None
    normalizers: list[str] = Field(default_factory=list)
    extract: list[ExtractStep] = Field(default_factory=list)

    @field_validator("depends_on", "extract", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        return [value] if isinstance(value, (str, int, dict)) else value

    @field_validator("id", "depends_on", mode="before")
    @classmethod
    def _int_ids(cls, value: Any) -> Any:
        """Numeric ids (common in exported points) are ids too."""
        return [_as_id(v) for v in value] if isinstance(value, list) else _as_id(value)

    @field_validator("normalizers")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [n for n in value if n not in NORMALIZERS]
        if unknown:
            raise ValueError(f"unknown {noun_names(unknown, 'normalizer')}; choose from {', '.join(NORMALIZERS)}")
        return value

    def normalize(self, text: str) -> str:
        for name in self.normalizers:
            text = NORMALIZERS[name](text)
        return text


@dataclass(frozen=True)
class ParsedPoint:
    """A point whose spec is valid: its id, validator (None: planned, not installed) and parsed params."""

    id: str
    point: Point
    validator: ValidatorDef | None
    params: BaseModel | None

    @property
    def queue(self) -> Queue:
        return self.validator.queue if self.validator else PLANNED[self.point.type]


def _problem(
    index: int, point_id: str | None, exc: Exception, where: tuple[str, ...] = (), key: str = "checks"
) -> PointSpecError:
    if isinstance(exc, ValidationError):
        msg = "; ".join(f"{place((*where, *e['loc'])) or 'point'}: {e['msg']}" for e in exc.errors())
    else:
        msg = str(exc)
    return PointSpecError(f"{point_place(index, point_id, key)}: {msg}")


def point_place(index: int, point_id: Any, key: str = "checks") -> str:
    """Where point ``index`` is, as a suite's places are said (:func:`place`), counted from 1 and named by its id (a
    number too): ``checks item 3 (p3)``; ``key`` names the list (``evaluation_points`` of a points file)."""
    return place((key, index), {key: [{}] * index + [{"id": _as_id(point_id)}]})


def _no_booleans_as_numbers(raw: dict[str, Any], parsed: BaseModel, prefix: str = "") -> None:
    """PointSpecError for a boolean given where a number is meant (``weight: true`` read as 1.0)."""
    if problems := booleans_read_as_numbers(raw, parsed):
        raise PointSpecError("; ".join(prefix + p for p in problems))


def parse_points(raw: list[Any], key: str = "checks") -> list[ParsedPoint]:
    """Validate every point (ids unique, dependencies known, params valid; not every scored point weighing 0);
    PointSpecError names the bad one, in the list ``key`` (:func:`point_place`)."""
    parsed: list[ParsedPoint] = []
    for index, item in enumerate(raw):
        point_id = item.get("id") if isinstance(item, dict) else None
        try:
            point = Point.model_validate(item)
            found = get_validator(point.type)
            if isinstance(item, dict):
                _no_booleans_as_numbers({k: v for k, v in item.items() if k != "params"}, point)
        except (ValidationError, PointSpecError) as exc:
            raise _problem(index, point_id, exc, key=key) from exc
        try:
            params = found.params_model.model_validate(point.params) if found else None
            if params is not None:
                _no_booleans_as_numbers(point.params, params, "params.")
        except (ValidationError, PointSpecError) as exc:
            raise _problem(index, point_id, exc, ("params",), key) from exc
        parsed.append(ParsedPoint(point.id or f"p{index + 1}", point, found, params))
    counts = Counter(p.id for p in parsed)
    for index, p in enumerate(parsed):
        if counts[p.id] > 1:
            raise _problem(index, p.id, PointSpecError("duplicate point id"), key=key)
        unknown = [d for d in p.point.depends_on if d not in counts]
        if unknown:
            raise _problem(
                index,
                p.id,
                PointSpecError(f"depends_on names unknown {noun_names(unknown, 'point')}"),
                key=key,
            )
        if p.id in p.point.depends_on:
            raise _problem(
                index, p.id, PointSpecError("depends_on names the point itself: it could never run"), key=key
            )
    if cycle := _dependency_cycle(parsed):
        index = next(i for i, p in enumerate(parsed) if p.id == cycle[0])
        raise _problem(index, cycle[0], PointSpecError(
            f"depends_on forms a cycle, {' -> '.join(cycle)}: these points could never run"), key=key)  # fmt: skip
    weights = [p.point.weight for p in parsed if not p.point.informational]
    if weights and not any(weights):
        raise PointSpecError(f"{key}: every scored point has weight 0, so the score would be 1.0 whatever the answer; "
                             "give one a weight above 0 (or make the points informational)")  # fmt: skip
    return parsed


def _dependency_cycle(parsed: list[ParsedPoint]) -> list[str] | None:
    """The first cycle of ``depends_on`` (``[a, b, a]``: a depends on b, b on a), found from the points in order; None
    without one. A point depending on a later one is skipped, as documented; on a cycle, none could ever run."""
    depends = {p.id: p.point.depends_on for p in parsed}
    done: set[str] = set()
    for start in depends:
        if start in done:
            continue
        path, on_path = [start], {start}
        todo = [iter(depends[start])]
        while todo:
            step = next(todo[-1], None)
            if step is None:  # every dependency of path[-1] explored: no cycle through it
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                todo.pop()
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step not in done:
                path.append(step)
                on_path.add(step)
                todo.append(iter(depends[step]))
    return None


_FIELD = re.compile(r"\{(\w+)(:[^{}]*)?\}")
#: Format specs allowed in suggestions: no widths or precisions over 3 digits (no huge paddings).
_SPEC = re.compile(r"[^{}]?[<>=^]?[-+ ]?#?0?\d{0,3}[,_]?(\.\d{1,3})?[bcdeEfFgGnosxX%]?")


def format_suggestion(template: str, figures: Mapping[str, Any]) -> str:
    """``{name}`` / ``{name:spec}`` from ``figures``; anything else (unknown names, bad specs) kept as written."""

    def one(match: re.Match[str]) -> str:
        name, spec = match.group(1), (match.group(2) or ":")[1:]
        if name not in figures or not _SPEC.fullmatch(spec):
            return match.group(0)
        try:
            return format(figures[name], spec)
        except (ValueError, TypeError):
            return str(figures[name])

    return _FIELD.sub(one, template)


def _point_text(p: ParsedPoint, answer: str) -> str | Outcome:
    """The text the point's validator checks: the answer after extraction steps and normalizers."""
    text = answer
    for number, step in enumerate(p.point.extract, start=1):
        try:
            text = step.apply(text)
        except (ValueError, RecursionError) as exc:
            return Outcome(False, f"extract step {number}: {exc}")
    return p.point.normalize(text)


def _run_one(p: ParsedPoint, row: Row, answer: str) -> Outcome:
    text = _point_text(p, answer)
    if isinstance(text, Outcome):
        return text
    assert p.validator is not None
    return p.validator.fn(PointInput(text, row, p.point.normalize), p.params)


def _result(p: ParsedPoint, status: str, outcome: Outcome, ms: float) -> dict[str, Any]:
    point = p.point
    out: dict[str, Any] = {
        "id": p.id, "text": point.text, "type": point.type, "category": point.category, "weight": point.weight,
        "informational": point.informational, "status": status,
        "passed": None if status in ("not_run", "error") else status == "passed",
        "note": outcome.note, "evidence": list(outcome.evidence), "figures": dict(outcome.figures),
        "ms": round(ms, 3),
    }  # fmt: skip
    if status in ("failed", "skipped") and point.suggestion:
        figures = {"id": p.id, "text": point.text, "weight": point.weight, "category": point.category}
        out["suggestion"] = format_suggestion(point.suggestion, {**figures, **outcome.figures})
    return out


def _state(outcome: Outcome) -> str:
    if outcome.stopped or outcome.unscorable:
        return "not_run"
    return "error" if outcome.error else "passed" if outcome.passed else "failed"


def _state_word(state: str | None) -> str:
    return "has not run" if state in (None, "not_run") else state


def _stopped_with(dependency: str, why: str) -> Outcome:
    """A point whose dependency the run stopped: stopped for the same reason, so its item is, not failed on it."""
    return Outcome.not_run(
        f"not run: depends on {dependency}, which the run stopped: {why}",
        {"stopped": why, "stopped_dependency": dependency},
    )


def evaluate_points(
    parsed: list[ParsedPoint], row: Row, answer: str, external: Mapping[str, Outcome] | None = None
) -> list[dict[str, Any]]:
    """Run the points in order; ``external`` holds outcomes of points run on other queues, by id.

    A point depending on one the run stopped (its judge's budget, breaker or a cancel), directly or through a chain,
    is stopped too (``not_run``, ``figures.stopped``), not skipped: its item is then unscorable, never failed on it."""
    external = external or {}
    status: dict[str, str] = {}
    halted: dict[str, str] = {}  # id of a point the run stopped -> why, as its figures.stopped says
    results = []
    for index, p in enumerate(parsed):
        start = time.perf_counter()
        blocked = [d for d in p.point.depends_on if status.get(d) != "passed"]
        stopped_by = next((d for d in blocked if d in halted), None)
        if stopped_by is not None:
            outcome, state = _stopped_with(stopped_by, halted[stopped_by]), "not_run"
        elif blocked:
            why = ", ".join(f"{d} {_state_word(status.get(d))}" for d in blocked)
            outcome, state = Outcome(False, f"skipped: depends on {why}"), "skipped"
        elif p.id in external:
            outcome = external[p.id]
            state = _state(outcome)
        elif p.queue is not Queue.CPU:
            outcome, state = Outcome(False, f"runs on the {p.queue.value} queue; not run here"), "not_run"
        else:
            try:
                outcome = _run_one(p, row, answer)
            except PointSpecError as exc:
                raise _problem(index, p.id, exc) from exc
            except SoftTimeLimitExceeded:  # the task's time is up: its handler records it for every item
                raise
            except Exception as exc:  # a regex stopped by its time bound, an unresolvable $ref: this point errs
                outcome = Outcome.failed_to_run(f"{type(exc).__name__}: {exc}"[:500])
            state = _state(outcome)
        status[p.id] = state
        if outcome.stopped:
            halted[p.id] = str(outcome.figures.get("stopped") or outcome.note)
        results.append(_result(p, state, outcome, (time.perf_counter() - start) * 1000))
    return results


def _ratio(points: list[dict[str, Any]]) -> float:
    total = sum(p["weight"] for p in points)
    return sum(p["weight"] for p in points if p["passed"]) / total if total > 0 else 1.0


def summarize_points(results: list[dict[str, Any]]) -> MetricResult:
    """Score = passed weight / total weight over scored points; per-category ratios in ``categories``.

    A scored point that could not be evaluated (status ``error``) makes the item an error, with every point's
    result still in the details. A scored point the run stopped (``not_run``, ``figures.stopped``: its judge's budget,
    breaker or a cancel) makes the item stopped (unscorable, a resume runs it again), never scored on its other points
    alone, as a two-judge metric is never scored on one rating; an informational one changes nothing. A scored point
    with nothing to check (``figures.unscorable``: a ``code_test`` point of a row with no code) makes the item
    unscorable with its note as the reason, as the ``code_test`` metric leaves such a row, never a 0 for that point."""
    scored = [r for r in results if not r["informational"] and r["status"] != "not_run"]
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in scored:
        by_category[r["category"]].append(r)
    details = {
        "points": results,
        # a category of weight 0 moves nothing (its ratio would be 1.0 whatever its points did): none is given
        "categories": {c: _ratio(rs) for c, rs in by_category.items() if sum(r["weight"] for r in rs) > 0},
        "passed_weight": sum(r["weight"] for r in scored if r["passed"]),
        "total_weight": sum(r["weight"] for r in scored),
        "failed": [r["id"] for r in scored if r["status"] in ("failed", "skipped")],
        "not_run": [r["id"] for r in results if r["status"] == "not_run"],
    }
    errored = [r for r in scored if r["status"] == "error"]
    if errored:
        more = f" ({and_more(len(errored) - 1, 'point')})" if len(errored) > 1 else ""
        details["errors"] = [r["id"] for r in errored]
        return MetricResult(score=None, error=f"point {errored[0]['id']}: {errored[0]['note']}{more}", details=details)
    lacking = [r for r in results if not r["informational"] and r["figures"].get("unscorable")]
    if lacking:  # unscorable, as the code_test metric's item without code: not a 0 for the point that has no input
        return MetricResult.unscorable(f"point {lacking[0]['id']}: {lacking[0]['note']}", **details)
    stopped = [r for r in results if not r["informational"] and r["figures"].get("stopped")]
    if stopped:  # unscorable, as a judge metric's item the run stopped: not a score without that point
        return MetricResult.stopped(f"point {stopped[0]['id']}: {stopped[0]['note']}", **details)
    return MetricResult(score=_ratio(scored), passed=all(r["passed"] for r in scored), details=details)


def refused_points(result: Mapping[str, Any] | None, replaced: Mapping[str, str]) -> MetricResult | None:
    """A stored ``checks`` result the run stopped on points whose judge a breaker reason stopped that a run stopper (a
    refused key, a model the provider lacks) replaced (``replaced``: old reason -> the run stopper's), summarized again
    with those points as an item whose own meta_eval call was refused holds them: the meta_eval point an error naming
    the run stopper (what to fix; a resume runs it again), a point depending on it skipped. None where no point was."""
    details = (result or {}).get("details") or {}
    if not details.get("stopped"):
        return None
    points = [_refused_point(point, replaced) for point in details.get("points", [])]
    return summarize_points(points) if points != details.get("points") else None


def _refused_point(point: dict[str, Any], replaced: Mapping[str, str]) -> dict[str, Any]:
    """``point`` (a stored point result) as a run whose run stopper came first records it (:func:`refused_points`).
    A point depending on a stopped one that an earlier ragscore stored (no ``stopped_dependency``) is left stopped, so
    its item is: not said an error of the meta_eval call it never made."""
    figures = dict(point.get("figures") or {})
    if (error := replaced.get(str(figures.pop("stopped", None)))) is None:
        return point
    if (dependency := figures.pop("stopped_dependency", None)) is not None:
        return point | {"status": "skipped", "passed": False, "note": f"skipped: depends on {dependency} error",
                        "figures": figures}  # fmt: skip
    if point.get("type") != "meta_eval":
        return point
    return point | {"status": "error", "passed": None, "note": f"meta_eval: {error}", "figures": figures}


class ChecksParams(BaseModel):
    """``points``: evaluation points for rows that carry no ``checks`` of their own."""

    model_config = ConfigDict(extra="forbid")

    points: list[dict[str, Any]] | None = Field(default=None, json_schema_extra=unset_means("each row's own checks"))

    @field_validator("points")
    @classmethod
    def _valid(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if value is not None:
            parse_points(value, key="points")
        return value


def _raw_points(row: Row, params: ChecksParams) -> list[Any] | None:
    return row.checks if row.checks is not None else params.points


def _route(row: Row, params: ChecksParams) -> Queue:
    """The queue whose workers have what the row's points need: the code sandbox, else an LLM judge
    (``meta_eval``), else the embedding model, else nothing (cpu)."""
    types = {p.get("type") for p in _raw_points(row, params) or [] if isinstance(p, dict)}
    for needs, queue in (("code_test", Queue.CODE), ("meta_eval", Queue.JUDGE), ("embedding", Queue.EMBED)):
        if needs in types:
            return queue
    return Queue.CPU


def _external_outcomes(prepared: list[tuple[Row, list[ParsedPoint]]], ctx: RunContext) -> list[dict[str, Outcome]]:
    """Run the batch validators (embedding, code_test) for every point of the chunk that uses one."""
    pending: dict[str, list[tuple[int, ParsedPoint, PointInput]]] = defaultdict(list)
    outcomes: list[dict[str, Outcome]] = [{} for _ in prepared]
    for index, (row, parsed) in enumerate(prepared):
        for name, p, given in _batch_point_inputs(row, parsed):
            if isinstance(given, Outcome):  # an extract step found nothing: the point failed, as on cpu
                outcomes[index][p.id] = given
            else:
                pending[name].append((index, p, given))
    for name, items in pending.items():
        results = _run_batch_validator(name, [(inp, p.params) for _, p, inp in items], ctx)
        for (index, p, _), outcome in zip(items, results, strict=True):
            outcomes[index][p.id] = outcome
    return outcomes


def _batch_point_inputs(row: Row, parsed: list[ParsedPoint]) -> Iterator[tuple[str, ParsedPoint, PointInput | Outcome]]:
    """Each of ``row``'s ``parsed`` points that a batch validator runs (not on cpu: embedding, code_test), with that
    validator's name and what it is given: the point's text (:func:`_point_text` of the answer) with the row and the
    point's normalizers, or the Outcome of an extract step that found nothing (the point failed)."""
    for p in parsed:
        if p.validator is not None and p.validator.queue is not Queue.CPU:
            text = _point_text(p, row.answer or "")
            given = text if isinstance(text, Outcome) else PointInput(text, row, p.point.normalize)
            yield p.validator.name, p, given


def _run_batch_validator(name: str, items: list[tuple[PointInput, Any]], ctx: RunContext) -> list[Outcome]:
    """The validator's outcomes for a chunk's points; when it raises for the chunk, it runs again point by point,
    so one bad point (a text the model refuses) errors alone, not every row of its chunk."""
    try:
        return VALIDATORS[name].fn(items, ctx)
    except SoftTimeLimitExceeded:  # the task's time is up: not a validator failure to retry point by point
        raise
    except Exception as exc:  # one validator failing must not sink the other points
        if len(items) > 1:
            log.warning("%s validator failed on %d points (%s: %s); running them one by one",
                        name, len(items), type(exc).__name__, exc)  # fmt: skip
            return [outcome for item in items for outcome in _run_batch_validator(name, [item], ctx)]
        return [Outcome.failed_to_run(f"{name} validator error: {type(exc).__name__}: {exc}"[:500])]


def embedding_point_texts(row: Row, params: ChecksParams) -> list[str]:
    """The texts the ``embedding`` validator encodes for ``row``'s points, as :func:`checks` runs them (each point's
    text and its target: :func:`~._queue_validators.embedding_pair`), each whole; none where its points do not run
    (no points, no answer, a malformed point)."""
    raw = _raw_points(row, params)
    if raw is None or row.answer is None:
        return []
    try:
        parsed = parse_points(raw)
    except PointSpecError:
        return []
    found: list[str] = []
    for name, p, given in _batch_point_inputs(row, parsed):
        if name == "embedding" and isinstance(given, PointInput):  # an Outcome: a failed point, encoding nothing
            assert isinstance(p.params, EmbeddingCheckParams)
            found.extend(embedding_pair(given, p.params) or ())
    return found


#: Why a row with ``code`` and no answer is unscorable: a point of it checks the answer's text.
NO_ANSWER_BUT_CODE = "no answer (only the row's code_test points could run its `code`; another point checks the answer)"


def _runs_the_code_only(p: ParsedPoint) -> bool:
    """A ``code_test`` point without extract steps: on a row with ``code`` it runs that code, never reading the
    answer, so a row of code and no answer (a code-generation dataset) is scored by such points."""
    return p.point.type == "code_test" and not p.point.extract


@register("checks", Queue.CPU, params=ChecksParams, kind="batch", route=_route, needs_one_of=("code", "answer"))
def checks(rows: list[Row], params: ChecksParams, ctx: RunContext) -> list[MetricResult]:
    """Weighted share of the evaluation points the answer passes (1.0 with no points).

    A row runs on the queue its points need: code (code_test), else judge (meta_eval), else embed, else cpu."""
    results: list[MetricResult | None] = [None] * len(rows)
    prepared: list[tuple[Row, list[ParsedPoint]]] = []
    where: list[int] = []
    for i, row in enumerate(rows):
        raw = _raw_points(row, params)
        if raw is None:
            results[i] = MetricResult.unscorable("no checks")
        elif row.answer is None and row_code(row) is None:
            results[i] = MetricResult.unscorable("no answer" + code_column_hint(row))
        else:
            try:
                parsed = parse_points(raw)
            except PointSpecError as exc:
                results[i] = MetricResult.failed(str(exc))
                continue
            if row.answer is None and not all(_runs_the_code_only(p) for p in parsed):
                results[i] = MetricResult.unscorable(NO_ANSWER_BUT_CODE)
                continue
            if row.answer is None and all(p.point.informational for p in parsed):
                # no scored point runs the code (none at all, or informational ones): 1.0 whatever the code does
                results[i] = MetricResult.unscorable("no answer")
                continue
            prepared.append((row, parsed))
            where.append(i)
    external = _external_outcomes(prepared, ctx)
    for i, (row, parsed), ext in zip(where, prepared, external, strict=True):
        if cut := next((o.note for o in ext.values() if o.cut), None):  # the task's time limit, as judge metrics say
            results[i] = MetricResult.failed(cut)
            continue
        try:
            results[i] = summarize_points(evaluate_points(parsed, row, row.answer or "", external=ext))
        except PointSpecError as exc:
            results[i] = MetricResult.failed(str(exc))
    return [r for r in results if r is not None]
