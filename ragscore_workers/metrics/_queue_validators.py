"""The evaluation-point validators that need a worker's resource: ``embedding`` (the embed worker's model)
and ``code_test`` (the code worker's sandbox).

Both are batch validators (``fn(items, ctx) -> list[Outcome]``). The ``checks`` metric routes a row whose
points use them to that queue (a row with a code_test point goes to the code queue, else one with an
embedding point to the embed queue), where every point of the row runs; importing heavy libraries
happens only when such a point is evaluated.
"""

from __future__ import annotations

from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, ConfigDict, Field

from ..errors import ConfigError, MetricError
from ..schemas import Queue
from ._validators import Outcome, PointInput, validator
from .code_test import CodeTestParams, code_and_source, code_column_hint, fenced_code, row_code, run_code_test
from .registry import RunContext

__all__ = ["EmbeddingCheckParams", "code_test_check", "embedding_check", "embedding_pair"]


class EmbeddingCheckParams(BaseModel):
    """``target``: text the answer should mean (default: the row's reference); ``threshold`` on cosine."""

    model_config = ConfigDict(extra="forbid")

    target: str | None = None
    threshold: float = Field(default=0.7, ge=-1.0, le=1.0)


def embedding_pair(inp: PointInput, params: EmbeddingCheckParams) -> tuple[str, str] | None:
    """The two texts an ``embedding`` point encodes, its text and its target (``params.target``, else the row's
    reference); None without a target (a blank reference is none): the point fails to run, encoding nothing."""
    target = params.target if params.target is not None else inp.row.reference
    return (inp.text, target) if target is not None and target.strip() else None


@validator("embedding", EmbeddingCheckParams, queue=Queue.EMBED)
def embedding_check(items: list[tuple[PointInput, EmbeddingCheckParams]], ctx: RunContext) -> list[Outcome]:
    """Passes when cos(text, target) >= threshold; the similarity is in the figures."""
    from ..embedding import cosine, embed
    from ..model_loading import noting_loads
    from .embedding_metrics import record_embed_stats

    pairs = {i: pair for i, (inp, p) in enumerate(items) if (pair := embedding_pair(inp, p)) is not None}
    todo, texts, wanted = list(pairs), [text for text, _ in pairs.values()], [target for _, target in pairs.values()]
    vectors = embed([*texts, *wanted], ctx.suite.embedding, ctx.redis, noting_loads(ctx.redis, ctx.run_id, Queue.EMBED))
    if todo:  # the run's embed counters (summary.embedding) count these encodes and this process's device too
        record_embed_stats(ctx, vectors.stats)
    sims = [cosine(vectors[a], vectors[b]) for a, b in zip(texts, wanted, strict=True)]
    out = [Outcome.failed_to_run("no target: give params.target or a row reference (not blank)") for _ in items]
    for i, sim in zip(todo, sims, strict=True):
        threshold = items[i][1].threshold
        passed = sim >= threshold
        word = ">=" if passed else "<"
        figures = {"similarity": round(float(sim), 6), "threshold": threshold}
        out[i] = Outcome(passed, f"similarity {sim:.3f} {word} {threshold}", figures)
    return out


def _code(inp: PointInput) -> tuple[str | None, str]:
    """The code a point runs, and how a message names it: the row's code, else the point's text's first fenced code
    block, else the answer's (:func:`code_and_source`)."""
    if row_code(inp.row) is None and (code := fenced_code(inp.text)) is not None:
        return code, "the first fenced code block of the point's text"
    return code_and_source(inp.row)


@validator("code_test", CodeTestParams, queue=Queue.CODE)
def code_test_check(items: list[tuple[PointInput, CodeTestParams]], ctx: RunContext) -> list[Outcome]:
    """Runs the row's code (or the point's text's first fenced block) in the sandbox and checks it."""
    out = []
    for inp, params in items:
        code, what = _code(inp)
        if code is None:
            no_code = "no code: no `code` field and no fenced code block" + code_column_hint(inp.row)
            out.append(Outcome.nothing_to_check(no_code))
            continue
        try:
            # the row's own points come with the data; the suite's (checks.points) are trusted configuration
            from_data = inp.row.checks is not None
            passed, details = run_code_test(code, params, ctx.suite.sandbox, from_data=from_data, what=what)
        except SoftTimeLimitExceeded:  # the task's time is up: not this point's sandbox failing
            raise
        except (ConfigError, MetricError) as exc:  # the point asks for what it may not (an image), or its code cannot
            # be written as UTF-8 (a lone surrogate): its error, not the sandbox's
            out.append(Outcome.failed_to_run(str(exc)[:500]))
            continue
        except Exception as exc:  # the sandbox failed, not the program
            out.append(Outcome.failed_to_run(f"sandbox error: {type(exc).__name__}: {exc}"[:500]))
            continue
        note = "; ".join([*(details["failures"] or [f"exit {details.get('exit_code')}"]), *details.get("notes", [])])
        out.append(Outcome(passed, note, _figures(details)))
    return out


def _figures(details: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in details.items() if k in ("exit_code", "duration_s", "stopped_by", "stdout", "stderr")}
