"""Validators of evaluation points (``checks``): a registry and the built-in cpu validators.

A validator is a params model plus a function. On the cpu queue it is called once per point:
``fn(inp: PointInput, params) -> Outcome``. Validators that need a shared resource run elsewhere and
register with their queue and a batch function ``fn(items: list[tuple[PointInput, params]], ctx:
RunContext) -> list[Outcome]``:

    @validator("embedding", EmbeddingCheckParams, queue=Queue.EMBED)
    def embedding_check(items, ctx): ...

The cpu ``checks`` metric validates their params but does not run them: such points are reported
``not_run`` until their queue's outcomes are passed in (``checks.evaluate_points(..., external=...)``).
``embedding`` and ``code_test`` are reserved for the embed and code queues (``PLANNED``) so rows that
use them are accepted before those validators are installed.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import regex as unicode_regex  # not `regex`: the validator of that name below would hide the module
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..counts import agree, counted, counted_of, noun
from ..schemas import Queue, Row
from ._bounded_regex import BoundedPattern, RegexError, bounded_regex
from ._text import CITATION_MARKER

__all__ = [
    "PLANNED",
    "VALIDATORS",
    "Outcome",
    "PointInput",
    "PointSpecError",
    "ValidatorDef",
    "compile_regex",
    "get_validator",
    "parse_json_text",
    "validator",
]

#: Validators that belong to other queues and plug in with those queues' issues.
PLANNED = {"embedding": Queue.EMBED, "code_test": Queue.CODE}
#: Evidence snippets kept per point, and characters of context on each side of a match.
MAX_EVIDENCE = 5
SNIPPET_CONTEXT = 40
#: Matches counted at most (bounds work on huge answers).
MAX_MATCHES = 10_000


class PointSpecError(ValueError):
    """An evaluation point cannot be evaluated as written (unknown type, bad params, missing golden)."""


@dataclass(frozen=True)
class Outcome:
    """What a validator decided: pass/fail, a one-line note, its figures and the deciding snippets.

    ``error``: the point could not be evaluated (the sandbox or the judge failed, no target to compare to); the
    answer is not at fault, so the point is reported ``error`` and the item gets an error instead of a score.
    """

    passed: bool
    note: str
    figures: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    error: bool = False
    #: The task's time limit came before the point ran (``note``: the limit's error): its item records that error
    #: alone, as a judge metric's item cut so does, and a resume runs it again.
    cut: bool = False
    #: The run stopped the point's judge before it answered (a budget, the breaker's count of failures, a cancel:
    #: ``note`` says which): the point is ``not_run``, not an error; a scored one makes its item stopped (unscorable,
    #: a resume runs it again), not scored on its other points.
    stopped: bool = False
    #: The point has nothing to check (a ``code_test`` point of a row with no code to run): ``not_run``, not a failure;
    #: a scored one makes its item unscorable with ``note`` as the reason, as the ``code_test`` metric's item is.
    unscorable: bool = False

    @classmethod
    def failed_to_run(cls, note: str, figures: dict[str, Any] | None = None) -> Outcome:
        """The point could not be evaluated (not the answer's fault): an ``error`` point."""
        return cls(False, note, figures or {}, error=True)

    @classmethod
    def not_run(cls, note: str, figures: dict[str, Any] | None = None) -> Outcome:
        """The point the run stopped before it was evaluated: ``not_run``, not scored (:attr:`stopped`)."""
        return cls(False, note, figures or {}, stopped=True)

    @classmethod
    def nothing_to_check(cls, note: str) -> Outcome:
        """The point lacks its input (no code to run): ``not_run``, its item unscorable (:attr:`unscorable`)."""
        return cls(False, note, {"unscorable": True}, unscorable=True)

    @classmethod
    def time_up(cls, error: str) -> Outcome:
        """The point the task's time limit stopped (its judge not asked, or not waited for): ``error`` the limit's."""
        return cls(False, error, error=True, cut=True)


@dataclass(frozen=True)
class PointInput:
    """The text a validator checks (after extraction and normalizers) and what it may compare it to."""

    text: str
    row: Row
    #: The point's normalizers, for reference strings (keywords, golden text).
    normalize: Callable[[str], str] = lambda s: s


@dataclass(frozen=True)
class ValidatorDef:
    """One registered validator."""

    name: str
    params_model: type[BaseModel]
    fn: Callable[..., Any]
    queue: Queue = Queue.CPU


VALIDATORS: dict[str, ValidatorDef] = {}


def validator(
    name: str, params: type[BaseModel], *, queue: Queue = Queue.CPU
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register ``fn`` as validator ``name`` (per point on cpu, batch on other queues)."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in VALIDATORS and VALIDATORS[name].fn is not fn:
            raise ValueError(f"validator {name!r} is registered twice")
        VALIDATORS[name] = ValidatorDef(name, params, fn, queue)
        return fn

    return decorator


def get_validator(name: str) -> ValidatorDef | None:
    """The validator ``name``; None for a planned one not installed yet; PointSpecError if unknown."""
    if name in VALIDATORS:
        return VALIDATORS[name]
    if name in PLANNED:
        return None
    known = sorted({*VALIDATORS, *PLANNED})
    raise PointSpecError(f"unknown validator type {name!r}; choose one of {', '.join(known)}")


# --------------------------------------------------------------------------- helpers


def compile_regex(pattern: str, flags: int = 0) -> BoundedPattern:
    """Compiled once per process, matched with a time bound; PointSpecError for an invalid pattern."""
    try:
        return bounded_regex(pattern, flags)
    except (RegexError, OverflowError, RecursionError) as exc:
        raise PointSpecError(f"invalid regex {pattern!r}: {exc}") from exc


def _snippet(text: str, start: int, end: int) -> str:
    lo, hi = max(0, start - SNIPPET_CONTEXT), min(len(text), end + SNIPPET_CONTEXT)
    return ("…" if lo else "") + text[lo:hi] + ("…" if hi < len(text) else "")


def _matches(regex: BoundedPattern, text: str) -> list[Any]:
    out = []
    for match in regex.finditer(text):
        out.append(match)
        if len(out) >= MAX_MATCHES:
            break
    return out


_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def parse_json_text(text: str) -> Any:
    """JSON from the text, or from its first fenced code block; ValueError when neither parses."""
    try:
        return json.loads(text)
    except ValueError as exc:
        fenced = _FENCE.search(text)
        if fenced is None:
            raise ValueError(f"not valid JSON: {exc}") from None
        try:
            return json.loads(fenced.group(1))
        except ValueError as inner:
            raise ValueError(f"fenced block is not valid JSON: {inner}") from None


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _distinct(values: list[str], normalize: Callable[[str], str]) -> list[str]:
    """Normalised, stripped, case-insensitively distinct, blanks dropped; first spelling kept."""
    seen: dict[str, str] = {}
    for value in values:
        norm = normalize(value).strip()
        if norm and norm.casefold() not in seen:
            seen[norm.casefold()] = norm
    return list(seen.values())


#: Letters of scripts written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar): a phrase
#: edge of one of them has no word boundary to look for (東京 is a whole word in 東京は大きい).
_UNSPACED = unicode_regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]")


def _phrase_regex(phrase: str, whole_word: bool) -> BoundedPattern:
    """The phrase, case-insensitive; with ``whole_word``, not inside a longer word (but at a no-spaces script's
    edge)."""
    body = re.escape(phrase)
    if whole_word and phrase:
        before = "" if _UNSPACED.match(phrase[0]) else r"(?<!\w)"
        after = "" if _UNSPACED.match(phrase[-1]) else r"(?!\w)"
        body = before + body + after
    return compile_regex(body, re.IGNORECASE)


# --------------------------------------------------------------------------- keyword / negation


class KeywordParams(_Params):
    """``keywords`` (distinct, case-insensitive); pass when at least ``min_count`` occur."""

    keywords: list[str] = Field(min_length=1)
    min_count: int = Field(default=1, ge=1)
    whole_word: bool = False

    @model_validator(mode="after")
    def _reachable(self) -> KeywordParams:
        distinct = len(_distinct(self.keywords, str))
        if self.min_count > distinct:
            raise ValueError(f"min_count {self.min_count} exceeds the {counted(distinct, 'distinct keyword')}")
        return self


def _find(inp: PointInput, phrases: list[str], whole_word: bool) -> tuple[list[str], list[str], list[str]]:
    found, missing = [], []
    evidence: list[str] = []
    for phrase in _distinct(phrases, inp.normalize):
        match = _phrase_regex(phrase, whole_word).search(inp.text)
        if match is None:
            missing.append(phrase)
            continue
        found.append(phrase)
        if len(evidence) < MAX_EVIDENCE:
            evidence.append(_snippet(inp.text, match.start(), match.end()))
    return found, missing, evidence


@validator("keyword", KeywordParams)
def keyword(inp: PointInput, params: KeywordParams) -> Outcome:
    """At least ``min_count`` of the distinct keywords appear (case-insensitive)."""
    found, missing, evidence = _find(inp, params.keywords, params.whole_word)
    min_count = min(params.min_count, len(found) + len(missing)) or 1
    passed = len(found) >= min_count
    figures = {"found": ", ".join(found), "missing": ", ".join(missing), "found_count": len(found),
               "keyword_count": len(found) + len(missing), "min_count": min_count}  # fmt: skip
    note = f"{counted_of(len(found), len(found) + len(missing), 'keyword')} found, {min_count} needed"
    return Outcome(passed, note + (f"; missing: {figures['missing']}" if missing else ""), figures, evidence)


class NegationParams(_Params):
    """``keywords``: phrases that must not appear (case-insensitive)."""

    keywords: list[str] = Field(min_length=1)
    whole_word: bool = False

    @model_validator(mode="after")
    def _some_phrase(self) -> NegationParams:
        if not _distinct(self.keywords, str):
            raise ValueError("every keyword is blank: nothing is forbidden, so the point would always pass")
        return self


@validator("negation", NegationParams)
def negation(inp: PointInput, params: NegationParams) -> Outcome:
    """None of the forbidden phrases appears."""
    found, _, evidence = _find(inp, params.keywords, params.whole_word)
    figures = {"found": ", ".join(found), "found_count": len(found)}
    phrases = noun(len(found), "forbidden phrase")
    note = f"{phrases} present: {figures['found']}" if found else "no forbidden phrase present"
    return Outcome(not found, note, figures, evidence)


# --------------------------------------------------------------------------- regex / citation


def _valid_pattern(value: str) -> str:
    compile_regex(value, re.DOTALL)
    return value


class RegexParams(_Params):
    """``pattern`` (always DOTALL) must match at least ``min_count`` times."""

    pattern: str
    min_count: int = Field(default=1, ge=1)
    ignore_case: bool = False
    multiline: bool = False

    _compiles = field_validator("pattern")(_valid_pattern)


def _count(inp: PointInput, regex: BoundedPattern, min_count: int, what: str, plural: str | None = None) -> Outcome:
    matches = _matches(regex, inp.text)
    evidence = [_snippet(inp.text, m.start(), m.end()) for m in matches[:MAX_EVIDENCE]]
    figures = {"count": len(matches), "distinct": len({m.group(0) for m in matches}), "min_count": min_count}
    note = f"{counted(len(matches), what, plural)} found, {min_count} needed"
    return Outcome(len(matches) >= min_count, note, figures, evidence)


@validator("regex", RegexParams)
def regex(inp: PointInput, params: RegexParams) -> Outcome:
    """The pattern matches at least ``min_count`` times."""
    flags = re.DOTALL | (re.IGNORECASE if params.ignore_case else 0) | (re.MULTILINE if params.multiline else 0)
    return _count(inp, compile_regex(params.pattern, flags), params.min_count, "match", "matches")


class CitationParams(_Params):
    """Citation markers (``pattern``, default a numeric marker: ``[1]``, ``[1, 2]``, ``[1-3]``, ``[1–3]``, each
    bracket one marker): at least ``min_count`` occurrences."""

    pattern: str = CITATION_MARKER
    min_count: int = Field(default=1, ge=1)

    _compiles = field_validator("pattern")(_valid_pattern)


@validator("citation", CitationParams)
def citation(inp: PointInput, params: CitationParams) -> Outcome:
    """At least ``min_count`` citation markers."""
    return _count(inp, compile_regex(params.pattern, re.DOTALL), params.min_count, "citation")


# --------------------------------------------------------------------------- length / json_schema / diff


class LengthParams(_Params):
    """Whitespace-separated word count within [``min``, ``max``] (either may be omitted, not both)."""

    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> LengthParams:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} > max {self.max}")
        return self


@validator("length", LengthParams)
def length(inp: PointInput, params: LengthParams) -> Outcome:
    """Word count within bounds."""
    words = len(inp.text.split())
    too_short = params.min is not None and words < params.min
    too_long = params.max is not None and words > params.max
    note = f"{words} words" + (f" < min {params.min}" if too_short else f" > max {params.max}" if too_long else "")
    return Outcome(not (too_short or too_long), note, {"words": words, "min": params.min, "max": params.max})


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``pattern`` keyword with the time-bounded search (the answer's strings may make it backtrack)."""
    from jsonschema import ValidationError

    if validator.is_type(instance, "string") and not compile_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``patternProperties`` keyword with the time-bounded search on the answer's keys."""
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if compile_regex(pattern).search(key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's ``additionalProperties`` keyword, telling extra keys from ``patternProperties`` ones with the
    time-bounded search (jsonschema's own runs the schema's patterns on the answer's keys unbounded)."""
    from jsonschema import ValidationError

    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
    extras = sorted((key for key in instance if key not in known
                     and not any(compile_regex(p).search(key) for p in patterns)), key=str)  # fmt: skip
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        joined = ", ".join(repr(extra) for extra in extras)
        if patterns:
            yield ValidationError(f"{joined} {agree(len(extras), 'does', 'do')} not match any of the regexes: "
                                  f"{', '.join(repr(p) for p in sorted(patterns))}")  # fmt: skip
        else:
            yield ValidationError(f"Additional properties are not allowed ({joined} "
                                  f"{agree(len(extras), 'was', 'were')} unexpected)")  # fmt: skip


@lru_cache(maxsize=256)
def _schema_validator(schema_json: str) -> Any:
    from jsonschema import exceptions, validators

    schema = json.loads(schema_json)
    cls = validators.extend(
        validators.validator_for(schema),
        {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional_properties},
    )
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise PointSpecError(f"invalid JSON schema: {exc.message}") from exc
    return cls(schema)


class JsonSchemaParams(_Params):
    """``schema``: a JSON Schema the answer (or its first fenced block) must satisfy."""

    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _valid(cls, value: dict[str, Any]) -> dict[str, Any]:
        _schema_validator(json.dumps(value, sort_keys=True))
        return value


@validator("json_schema", JsonSchemaParams)
def json_schema(inp: PointInput, params: JsonSchemaParams) -> Outcome:
    """The text parses as JSON and satisfies the schema."""
    try:
        data = parse_json_text(inp.text)
    except (ValueError, RecursionError) as exc:
        return Outcome(False, str(exc), {"errors": 1}, [inp.text[: 2 * SNIPPET_CONTEXT]])
    check = _schema_validator(json.dumps(params.json_schema, sort_keys=True))
    errors = sorted(check.iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    evidence = [f"at {e.json_path}: {e.message}"[:200] for e in errors[:MAX_EVIDENCE]]
    note = "valid against the schema" if not errors else counted(len(errors), "schema error")
    return Outcome(not errors, note, {"errors": len(errors)}, evidence)


class DiffParams(_Params):
    """difflib ratio against ``golden`` (default: the row's reference) must reach ``threshold``."""

    golden: str | None = None
    threshold: float = Field(default=0.9, ge=0.0, le=1.0)
    #: difflib's heuristic, off unlike the seed: with it on, characters that make up more than 1% of a golden text
    #: over 200 characters (spaces, "e") are not matched, so near-identical long texts score near 0.
    autojunk: bool = False


#: Above this many character pairs (text x golden), a ratio that cannot reach the threshold is told from difflib's
#: upper bound (``quick_ratio``, linear time) instead of computed: the exact ratio takes time in proportion to the
#: pairs (40,000 characters against 4,000: ~5 s; a long answer against a long reference: past the task's limit).
DIFF_EXACT_PAIRS = 20_000_000


@validator("diff", DiffParams)
def diff(inp: PointInput, params: DiffParams) -> Outcome:
    """``SequenceMatcher(None, text, golden, autojunk=autojunk).ratio() >= threshold``; for long texts whose upper
    bound is already under the threshold, that bound (the point fails either way)."""
    golden = params.golden if params.golden is not None else inp.row.reference
    if golden is None:
        raise PointSpecError("diff needs params.golden or a row reference")
    golden = inp.normalize(golden)
    matcher = difflib.SequenceMatcher(None, inp.text, golden, autojunk=params.autojunk)
    if len(inp.text) * len(golden) > DIFF_EXACT_PAIRS and (bound := matcher.quick_ratio()) < params.threshold:
        note = f"similarity at most {bound:.3f} < {params.threshold} (long texts: the bound, not the exact ratio)"
        return Outcome(False, note, {"ratio_at_most": round(bound, 6), "threshold": params.threshold})
    ratio = matcher.ratio()
    evidence = [
        f"{tag}: {inp.text[i1:i2][:60]!r} -> {golden[j1:j2][:60]!r}"
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ][:MAX_EVIDENCE]
    note = f"similarity {ratio:.3f} {'>=' if ratio >= params.threshold else '<'} {params.threshold}"
    return Outcome(ratio >= params.threshold, note, {"ratio": round(ratio, 6), "threshold": params.threshold}, evidence)
