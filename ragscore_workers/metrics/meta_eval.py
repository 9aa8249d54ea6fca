"""``meta_eval``: an evaluation-point validator (judge queue) that asks the judge for the extra points
the answer's content calls for, validates them, runs them, and reports them apart from the author's.

A point ``{"type": "meta_eval", "params": {"max_points": 3}, "informational": true}`` sends one prompt
per answer (question, answer, the author's point texts) through the run's judge client (shared limiter,
cache, retries, budgets). The reply must be JSON ``{"points": [{"text", "type", "params"}]}`` (a bare list
too); it is re-asked up to ``attempts_on_bad_json`` times when it is not. Each proposed point must use one of
``types`` (deterministic cpu validators) and pass the same validation as an author's point; at most
``max_points`` are kept, the rest and the invalid ones are listed as ``rejected``. The kept points run
on the answer like any other point; their results go to this point's ``figures["extra_points"]``, never
among the author's points.

The meta point passes when at least ``pass_share`` of the kept points pass (a judge that validly
proposes no point: passes, nothing was called for). A judge error (a refused key, a model the provider lacks
included) or a reply with no JSON is an ``error`` point with the reason in the note: the answer is not at fault, so
a scored meta point then gives the item an error rather than a score. A judge the run stopped (its budget, the
circuit breaker's count of failures, a cancel) is no fault of the answer nor of the judge: the point is ``not_run``,
its note saying why, and a scored one makes the item stopped (unscorable: never scored on its other points alone; a
resume runs it again). Make it ``informational`` to report the
extra points without scoring them. A point its judge task's time limit cut gives the item that limit's error,
informational or not, as every judge metric's item so cut: a resume asks again.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from ..counts import counted_of
from ..schemas import JudgeParams, Queue, Row
from ._validators import VALIDATORS, Outcome, PointInput, PointSpecError, parse_json_text, validator
from .judge_metrics import Job, Verdict, run_jobs
from .registry import RunContext

__all__ = ["META_EVAL_VERSION", "MetaEvalParams", "meta_eval", "meta_eval_prompt", "parse_proposals"]

#: Part of the reply-cache key: change it whenever the prompt's wording changes.
META_EVAL_VERSION = "meta_eval/v1"
#: Characters of the question and the answer shown to the judge.
MAX_TEXT_CHARS = 6000

_PARAMS_HELP = {
    "keyword": '{"keywords": ["..."], "min_count": 1}',
    "negation": '{"keywords": ["..."]}',
    "regex": '{"pattern": "..."}',
    "length": '{"min": 10, "max": 200}',
    "citation": '{"min_count": 1}',
}


class MetaEvalParams(JudgeParams):
    """How many extra points the judge may add, of which validator types, and when the meta point passes."""

    max_points: int = Field(default=3, ge=1, le=10)
    types: list[str] = Field(default_factory=lambda: ["keyword", "negation", "regex", "length"], min_length=1)
    pass_share: float = Field(default=1.0, ge=0.0, le=1.0)
    attempts_on_bad_json: int = Field(default=2, ge=1, le=5)
    max_tokens: int = Field(default=400, ge=16)

    @field_validator("types")
    @classmethod
    def _cpu_validators(cls, value: list[str]) -> list[str]:
        bad = [t for t in value if t not in VALIDATORS or VALIDATORS[t].queue is not Queue.CPU or t == "meta_eval"]
        if bad:
            cpu = sorted(n for n, v in VALIDATORS.items() if v.queue is Queue.CPU)
            raise ValueError(f"types {bad} are not cpu validators; choose from {', '.join(cpu)}")
        return value


def meta_eval_prompt(question: str | None, answer: str, author_points: list[str], params: MetaEvalParams) -> str:
    """The judge's prompt: what to propose, in which JSON shape, and what the author already checks."""
    shapes = "\n".join(f'- "{t}": params {_PARAMS_HELP.get(t, "{...}")}' for t in params.types)
    already = "\n".join(f"- {t}" for t in author_points if t) or "- (none)"
    return (
        f"You review an answer and propose at most {params.max_points} extra checks that its content calls "
        "for and that the checks below do not cover (e.g. a term it introduces is defined, a unit is given, "
        "a claim it makes is hedged). Each check must be decidable on the answer's text alone with one of "
        f"these check types:\n{shapes}\n"
        'Reply with JSON only: {"points": [{"text": "what the check verifies", "type": "...", "params": {...}}]}'
        ' and {"points": []} when nothing is called for.\n\n'
        f"Checks already made:\n{already}\n\n"
        f"Question: {(question or '')[:MAX_TEXT_CHARS]}\n\nAnswer: {answer[:MAX_TEXT_CHARS]}\n"
    )


def parse_proposals(reply: str) -> list[Any] | None:
    """The proposed points of a reply (``{"points": [...]}`` or a bare list); None when it holds no such JSON."""
    try:
        data = parse_json_text(reply)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict) and isinstance(data.get("points"), list):
        return data["points"]
    return data if isinstance(data, list) else None


def _validate(proposals: list[Any], params: MetaEvalParams) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Kept point specs (ids ``meta1``..) and rejected proposals with the reason."""
    from .checks import parse_points

    kept: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for raw in proposals:
        if not isinstance(raw, dict):
            rejected.append({"proposal": str(raw)[:200], "reason": "not an object"})
            continue
        spec = {"id": f"meta{len(kept) + 1}", "text": str(raw.get("text", ""))[:300], "type": raw.get("type"),
                "params": raw.get("params") or {}}  # fmt: skip
        if len(kept) >= params.max_points:
            rejected.append({"proposal": spec, "reason": f"over max_points ({params.max_points})"})
        elif spec["type"] not in params.types:
            rejected.append({"proposal": spec, "reason": f"type {spec['type']!r} not in {params.types}"})
        else:
            try:
                parse_points([spec])
            except PointSpecError as exc:
                rejected.append({"proposal": spec, "reason": str(exc)[:300]})
                continue
            kept.append(spec)
    return kept, rejected


def _outcome(verdict: Verdict, inp: PointInput, params: MetaEvalParams) -> Outcome:
    from .checks import evaluate_points, parse_points

    if verdict.cut:
        return Outcome.time_up(str(verdict.error))
    if verdict.stopped:
        return Outcome.not_run(f"meta_eval not scored: {verdict.stopped}", {"stopped": verdict.stopped})
    if verdict.value is None:
        why = verdict.error or f"no JSON points in {verdict.calls} replies"
        return Outcome.failed_to_run(f"meta_eval: {why}", {"reply": verdict.reply})
    kept, rejected = _validate(verdict.value, params)
    results = evaluate_points(parse_points(kept), inp.row, inp.text) if kept else []
    passed = sum(bool(r["passed"]) for r in results)
    share = passed / len(results) if results else 1.0
    figures = {"extra_points": results, "rejected": rejected, "proposed": len(verdict.value), "kept": len(kept),
               "passed": passed, "calls": verdict.calls, "cached": verdict.from_cache}  # fmt: skip
    note = f"{counted_of(passed, len(kept), 'extra point')} passed" + (
        f", {len(rejected)} rejected" if rejected else ""
    )
    evidence = [f"{r['id']} {r['status']}: {r['text']}" for r in results][:5]
    return Outcome(share >= params.pass_share, note, figures, evidence)


def _author_texts(row: Row, ctx: RunContext) -> list[str]:
    """The texts of the author's points: the row's own ``checks``, else the suite's ``checks`` points."""
    raw = row.checks if row.checks is not None else ctx.suite.checks_points
    return [str(c.get("text", "")) for c in raw or [] if isinstance(c, dict) and c.get("type") != "meta_eval"]


@validator("meta_eval", MetaEvalParams, queue=Queue.JUDGE)
def meta_eval(items: list[tuple[PointInput, MetaEvalParams]], ctx: RunContext) -> list[Outcome]:
    """Ask the judge for extra points per answer, run them, report them apart (see the module docstring)."""
    if not items:
        return []
    params = items[0][1]  # one client per batch: the judge settings of the first point
    jobs = []
    for inp, p in items:
        prompt = meta_eval_prompt(inp.row.question, inp.text, _author_texts(inp.row, ctx), p)
        jobs.append(Job(prompt, META_EVAL_VERSION, p.attempts_on_bad_json, parse_proposals))
    verdicts = run_jobs(ctx, params, jobs, max(p.max_tokens for _, p in items))
    return [_outcome(v, inp, p) for v, (inp, p) in zip(verdicts, items, strict=True)]
