"""LLM-as-judge metrics (judge queue): the AI-Q dual judges and the rubric judge.

* ``answer_accuracy`` (ratings 0/2/4, /4), ``context_relevance_judge`` (0/1/2, /2) and ``groundedness``
  (0/1/2, /2): two judges with differently worded prompts rate each item; each judge is re-asked (up to
  ``rating_attempts`` calls in all) until its reply holds a valid rating among its first 8 tokens. Both
  valid: the mean; one valid: that one; none: unscorable. ``details`` carry both judges' ratings.
* ``rubric_judge`` -> ``rubric_judge`` (A/5) and ``rubric_judge_raw`` (A, 1-5): JSON ``{"score",
  "rationale"}``; an unparseable reply is unscorable (``unparseable_as_zero`` scores it 0, as the seed did).

Every call goes through the run's judge client (shared limiter, cache, retries, breaker, counters); many
calls are in flight per task (``concurrency`` threads). Judge settings come from ``suite.judge``, keys from
the environment only. Provider libraries are imported only when a judge metric runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..limits import TaskCalls, ended_by, time_limit_error
from ..schemas import JudgeConfig, JudgeParams, MetricResult, Queue, Row, Suite
from ..unicode_text import valid_unicode
from ._judge_text import (
    ANSWER_ACCURACY,
    CONTEXT_RELEVANCE,
    DEFAULT_RUBRIC,
    GROUNDEDNESS,
    RUBRIC_VERSION,
    DualTemplates,
    answer_part,
    parse_rating,
    parse_rubric,
    rubric_prompt,
)
from .registry import CallPlanner, PlannedCall, RunContext, register, unset_means

if TYPE_CHECKING:
    from ..providers import Completion, CompletionParams, JudgeClient

#: Characters of the joined contexts a judge sees (as Ragas: 4,192 for relevance, 8,192 for groundedness).
RELEVANCE_CONTEXT_CHARS = 4192
GROUNDEDNESS_CONTEXT_CHARS = 8192
#: Characters of a judge's reply kept in ``details``.
REPLY_EXCERPT = 120
#: The dual judges' reply cap: a rating is read from the first 8 tokens.
DUAL_MAX_TOKENS = 16
#: The least reply cap a reasoning model gets (``judge.reasoning``): its thinking counts against the cap.
REASONING_MIN_TOKENS = 2048


def reply_cap(stated: int | None, default: int, judge: JudgeConfig) -> int:
    """A metric's reply cap: as its params state, else ``default`` (at least REASONING_MIN_TOKENS for a
    reasoning model)."""
    if stated is not None:
        return stated
    return max(default, REASONING_MIN_TOKENS) if judge.is_reasoning else default


class DualParams(JudgeParams):
    """Dual-judge params."""

    #: Calls per judge until a reply holds a valid rating (Ragas makes 5).
    rating_attempts: int = Field(default=5, ge=1, le=10)
    #: Reply length cap (None: 16, as the rating is read from the first 8 tokens; a reasoning model gets
    #: REASONING_MIN_TOKENS, as it thinks first).
    max_tokens: int | None = Field(
        default=None, ge=1,
        json_schema_extra=unset_means(f"{DUAL_MAX_TOKENS}; {REASONING_MIN_TOKENS} for a reasoning judge model"),
    )  # fmt: skip
    #: Characters of the joined contexts shown to the judge (None: the metric's default; answer_accuracy shows none).
    max_context_chars: int | None = Field(
        default=None, ge=1,
        json_schema_extra=unset_means(f"{RELEVANCE_CONTEXT_CHARS} for context_relevance_judge, "
                                      f"{GROUNDEDNESS_CONTEXT_CHARS} for groundedness; unused by answer_accuracy"),
    )  # fmt: skip


class RubricParams(JudgeParams):
    """Rubric-judge params."""

    #: Score an unparseable reply 0 instead of unscorable (the seed framework's behaviour).
    unparseable_as_zero: bool = False
    #: Reply length cap (None: the suite's ``judge.max_tokens``).
    max_tokens: int | None = Field(
        default=None, ge=1,
        json_schema_extra=unset_means(f"the suite's judge.max_tokens; at least {REASONING_MIN_TOKENS} for a reasoning "
                                      "judge model"),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------- plumbing


def _client(ctx: RunContext, params: JudgeParams) -> JudgeClient:
    from ..providers import Budget, RetryPolicy, build_client

    return build_client(
        ctx.redis,
        ctx.run_id,
        ctx.suite.judge,
        api_key_env=params.api_key_env,
        timeout_s=params.timeout_s,
        max_wait_s=params.max_wait_s,
        cache=params.cache,
        retry=RetryPolicy(attempts=params.attempts, breaker_failures=params.breaker_failures),
        budget=Budget(max_cost=params.max_cost, max_tokens=params.max_tokens_total),
        prices=params.prices,
    )


@dataclass
class Verdict:
    """What one judge made of one item."""

    value: Any = None
    calls: int = 0
    #: Every reply so far came from the cache (see :attr:`from_cache`).
    cached: bool = True
    reply: str = ""
    error: str | None = None
    stopped: str | None = None
    parse_failures: int = 0
    #: Why the judge gave no usable reply although it answered (it refused; its reply was cut at the cap).
    no_answer: str | None = None
    #: The task's time limit came first (:attr:`error` says so): its item records the limit's error, as a chunk cut
    #: by a prefork pool's soft limit does, and a resume judges it again.
    cut: bool = False
    #: The judge's configuration stopped it (a refused key, a model the provider lacks: :attr:`error` says what to
    #: fix): its item records that error, which a resume with it fixed judges again.
    misconfigured: bool = False

    @classmethod
    def time_up(cls) -> Verdict:
        """The verdict of a judge the task's time limit stopped."""
        return cls(error=time_limit_error(Queue.JUDGE.value), cut=True)

    @property
    def from_cache(self) -> bool:
        """The judge answered, and every one of its replies came from the cache."""
        return self.calls > 0 and self.cached


@dataclass(frozen=True)
class Job:
    """One judge to ask about one item: its prompt, cache version, how often to re-ask, how to read it."""

    prompt: str
    version: str
    attempts: int
    parse: Callable[[str], Any]

    @property
    def messages(self) -> list[dict[str, str]]:
        """The chat messages sent for this job (the prompt as the one user message), as the call and ``--dry-run``
        both use them: a lone surrogate (half an emoji in a row) as U+FFFD, which the SDKs can encode."""
        return [{"role": "user", "content": valid_unicode(self.prompt)}]

    def final(self, completion: Completion) -> bool:
        """A last attempt's reply worth caching: one that reads (a value), a refusal, or one cut at the cap while
        still thinking (each would come again alike). Any other left its item unscored: asked again on a later run,
        not served from the cache. (An earlier attempt's reply is always kept: a rating may follow it.)"""
        if completion.refusal or self.parse(completion.text) is not None:
            return True
        return completion.finish_reason == "length" and not answer_part(completion.text).strip()

    def planned(self, max_tokens: int) -> PlannedCall:
        """This job's first call, for ``--dry-run``."""
        return PlannedCall(self.messages, max_tokens, self.version)


def _ask(client: JudgeClient, job: Job, params: CompletionParams, deadline: float | None) -> Verdict:
    """Ask one judge up to ``job.attempts`` times until ``job.parse`` finds a value in its reply, none past
    ``deadline`` (its task's soft time limit)."""
    from ..providers import JudgeError, JudgeStopped, JudgeTimeUp

    messages = job.messages
    verdict = Verdict()
    for attempt in range(job.attempts):
        last = attempt == job.attempts - 1  # a re-run replays the sequence; only a last reply left unread is re-asked
        try:
            completion, cached = client.complete(
                messages, params, template_version=job.version, attempt=attempt, final=job.final if last else None,
                deadline=deadline,
            )  # fmt: skip
        except JudgeTimeUp:
            return Verdict.time_up()
        except JudgeStopped as exc:  # a refused key or an unknown model is the judge's failure: an error, as its first
            if exc.misconfigured:  # item's; a budget, a cancel or the breaker's count of failures: a stop
                verdict.error, verdict.misconfigured = str(exc), True
            else:
                verdict.stopped = str(exc)
            break
        except JudgeError as exc:
            verdict.error = str(exc)
            break
        verdict.calls += 1
        verdict.cached = verdict.cached and cached
        answer = answer_part(completion.text).strip()
        verdict.reply = (answer or completion.text)[:REPLY_EXCERPT]  # not the thinking
        verdict.value = job.parse(completion.text)
        if verdict.value is not None:
            break
        verdict.parse_failures += 1
        if completion.refusal:  # asked again at the same temperature, it refuses again
            verdict.no_answer = f"the judge refused: {completion.refusal[:REPLY_EXCERPT]}"
            break
        if completion.finish_reason == "length":
            if not answer:  # all thinking: every call would end alike
                fix = "raise the metric's max_tokens" if params.reasoning else (
                    "set judge.reasoning: true, or raise the metric's max_tokens")  # fmt: skip
                verdict.error = (f"the judge's reply was cut at max_tokens={params.max_tokens} before it held an "
                                 f"answer (a reasoning model thinks first: {fix})")  # fmt: skip
                break
            verdict.no_answer = f"the judge's reply was cut at max_tokens={params.max_tokens}"
    if verdict.parse_failures:
        client.state.incr(parse_failures=verdict.parse_failures)
    return verdict


def run_jobs(
    ctx: RunContext, params: JudgeParams, jobs: list[Job], max_tokens: int, rows: Sequence[Row] = ()
) -> list[Verdict]:
    """Run the jobs on a thread pool (``params.concurrency`` calls in flight); verdicts in job order. ``rows``: the
    row of each run of ``len(jobs) // len(rows)`` jobs in a row (its judges), each told finished
    (:meth:`RunContext.row_scored`) once its last job ends, while the others still run. At the task's deadline
    (``ctx.deadline``: its soft time limit, which a threads pool does not enforce) it returns: a job not ended by then
    is :meth:`Verdict.time_up` (not started: never asked; in flight: its reply cached as it comes, not waited for). A
    call in flight past an earlier task's cut holds its place of ``concurrency`` until it ends (:class:`TaskCalls`): a
    job of this task waits for one, until the deadline."""
    if not jobs:
        return []
    from ..providers import CompletionParams

    client = _client(ctx, params)
    judge = ctx.suite.judge
    completion_params = CompletionParams(temperature=judge.temperature, max_tokens=max_tokens,
                                         reasoning=judge.is_reasoning)  # fmt: skip
    per_row = len(jobs) // len(rows) if rows else 0
    left = [per_row] * len(rows)
    lock = threading.Lock()
    cut = threading.Event()  # the deadline passed: a job ending later is not this chunk's, nor its row's progress

    # this thread's calls in flight, with those its earlier task's cut left running: within concurrency
    calls = TaskCalls.of_this_thread(Queue.JUDGE.value)

    def ask(index: int, job: Job) -> Verdict:
        if not calls.enter(params.concurrency, ctx.deadline):
            verdict = Verdict.time_up()
        else:
            try:
                verdict = _ask(client, job, completion_params, ctx.deadline)
            finally:
                calls.leave()
        if per_row:
            row = index // per_row
            with lock:
                left[row] -= 1
                finished = left[row] == 0 and not cut.is_set()
            if finished:
                ctx.row_scored(rows[row])
        return verdict

    pool = ThreadPoolExecutor(max_workers=min(params.concurrency, len(jobs)), thread_name_prefix="judge")
    futures = [pool.submit(ask, index, job) for index, job in enumerate(jobs)]
    try:
        ended = set(ended_by(ctx.deadline, futures))
    except BaseException:  # a prefork pool's soft time limit (raised here, in the main thread): no judge is asked
        pool.shutdown(cancel_futures=True)  # after it; the calls in flight end, waited for
        raise
    with lock:
        cut.set()
    pool.shutdown(wait=False, cancel_futures=True)  # what has not started is never asked
    return [f.result() if f in ended else Verdict.time_up() for f in futures]


# ---------------------------------------------------------------------------------------------- dual judges


def _joined_contexts(row: Row) -> str:
    return "\n".join(c.text for c in row.contexts)


def _special(score: float, rule: str) -> MetricResult:
    return MetricResult(score=score, details={"rule": rule, "ratings": [None, None]})


def _accuracy_prompts(row: Row, params: DualParams) -> MetricResult | tuple[str, str]:
    missing = [f for f in ("question", "answer", "reference") if getattr(row, f) is None]
    if missing:
        return MetricResult.unscorable(f"no {' / '.join(missing)}")
    fields = {"question": row.question, "answer": row.answer, "reference": row.reference}
    return ANSWER_ACCURACY.first.format(**fields), ANSWER_ACCURACY.second.format(**fields)


def _relevance_prompts(row: Row, params: DualParams) -> MetricResult | tuple[str, str]:
    if row.question is None:
        return MetricResult.unscorable("no question")
    if not row.has_contexts:
        return MetricResult.unscorable("no contexts")
    question, context = row.question.strip(), _joined_contexts(row).strip()
    if not question:
        return _special(0.0, "blank question")
    if context == question or context in question:
        return _special(0.0, "context equal to or contained in the question")
    limit = params.max_context_chars or RELEVANCE_CONTEXT_CHARS
    fields = {"question": row.question, "context": _joined_contexts(row)[:limit]}
    return CONTEXT_RELEVANCE.first.format(**fields), CONTEXT_RELEVANCE.second.format(**fields)


def _groundedness_prompts(row: Row, params: DualParams) -> MetricResult | tuple[str, str]:
    if row.answer is None:
        return MetricResult.unscorable("no answer")
    if not row.has_contexts:
        return MetricResult.unscorable("no contexts")
    answer, context = row.answer.strip(), _joined_contexts(row).strip()
    if not answer:
        return _special(0.0, "blank answer")
    if answer == context or answer in context:
        return _special(1.0, "answer equal to or contained in the context")
    limit = params.max_context_chars or GROUNDEDNESS_CONTEXT_CHARS
    fields = {"answer": row.answer, "context": _joined_contexts(row)[:limit]}
    return GROUNDEDNESS.first.format(**fields), GROUNDEDNESS.second.format(**fields)


def combine(verdicts: list[Verdict], templates: DualTemplates) -> MetricResult:
    """Both ratings valid: their mean; one: that one; none: unscorable (or the call error). A judge stopped by
    the run makes the item stopped; one its configuration stopped (a refused key, an unknown model), its error."""
    ratings = [v.value for v in verdicts]
    details: dict[str, Any] = {
        "ratings": ratings,
        "calls": [v.calls for v in verdicts],
        "cached": all(v.from_cache for v in verdicts),
        "replies": [v.reply for v in verdicts],
    }
    if cut := next((v.error for v in verdicts if v.cut), None):  # a judge not asked: never one rating alone
        return MetricResult.failed(cut)
    errors = [v.error for v in verdicts if v.error]
    if errors:
        details["judge_errors"] = errors
    # A judge the run stopped (breaker, budget) has not rated yet: the item waits for a resume, which asks it
    # again (the other judge's reply comes from the cache), rather than taking the other judge's rating alone.
    # A judge its configuration stopped will not rate until it is fixed: the item is its error (what to fix), which a
    # resume redoes, never the other judge's rating alone (from the cache: the refused key sent no call for it).
    if misconfigured := next((v.error for v in verdicts if v.misconfigured), None):
        return MetricResult(score=None, error=misconfigured, details=details)
    stopped = next((v.stopped for v in verdicts if v.stopped), None)
    if stopped:
        return MetricResult.stopped(stopped, **details)
    scores = [r / templates.scale for r in ratings if r is not None]
    if scores:
        return MetricResult(score=sum(scores) / len(scores), details=details)
    if errors:
        return MetricResult(score=None, error=errors[0], details=details)
    why = next((f" ({v.no_answer})" for v in verdicts if v.no_answer), "")
    return MetricResult.unscorable(
        f"no valid rating from either judge in {sum(details['calls'])} replies{why}", **details
    )


DualPrompts = Callable[[Row, DualParams], MetricResult | tuple[str, str]]


def _dual_jobs(
    rows: list[Row], params: DualParams, templates: DualTemplates, prompts: DualPrompts
) -> tuple[list[MetricResult | None], list[Job]]:
    """Per row its result when no judge is needed (else None), and the two judges' jobs of the others."""
    out: list[MetricResult | None] = []
    jobs: list[Job] = []
    parse = partial(parse_rating, allowed=templates.allowed)
    for row in rows:
        pre = prompts(row, params)
        if isinstance(pre, MetricResult):
            out.append(pre)
            continue
        out.append(None)
        for judge, prompt in enumerate(pre, start=1):
            jobs.append(Job(prompt, f"{templates.version}#{judge}", params.rating_attempts, parse))
    return out, jobs


def _dual(
    rows: list[Row], params: DualParams, ctx: RunContext, templates: DualTemplates, prompts: DualPrompts
) -> list[MetricResult]:
    out, jobs = _dual_jobs(rows, params, templates, prompts)
    judged = [row for row, result in zip(rows, out, strict=True) if result is None]
    for row, result in zip(rows, out, strict=True):
        if result is not None:  # no judge to ask: finished now
            ctx.row_scored(row)
    cap = reply_cap(params.max_tokens, DUAL_MAX_TOKENS, ctx.suite.judge)
    verdicts = iter(run_jobs(ctx, params, jobs, cap, judged))
    return [r if r is not None else combine([next(verdicts), next(verdicts)], templates) for r in out]


def _dual_calls(templates: DualTemplates, prompts: DualPrompts) -> CallPlanner:
    """The ``plan_calls`` of a dual-judge metric: the first call of each judge, for rows that need them."""

    def plan(rows: list[Row], params: DualParams, suite: Suite) -> list[PlannedCall]:
        cap = reply_cap(params.max_tokens, DUAL_MAX_TOKENS, suite.judge)
        return [job.planned(cap) for job in _dual_jobs(rows, params, templates, prompts)[1]]

    return plan


@register("answer_accuracy", Queue.JUDGE, params=DualParams, kind="batch", needs=("question", "answer", "reference"),
          reads=(), plan_calls=_dual_calls(ANSWER_ACCURACY, _accuracy_prompts))  # fmt: skip
def answer_accuracy(rows: list[Row], params: DualParams, ctx: RunContext) -> list[MetricResult]:
    """Dual-judge agreement of the answer with the reference (0/2/4 -> [0, 1])."""
    return _dual(rows, params, ctx, ANSWER_ACCURACY, _accuracy_prompts)


@register("context_relevance_judge", Queue.JUDGE, params=DualParams, kind="batch", needs=("question", "contexts"),
          reads=(), plan_calls=_dual_calls(CONTEXT_RELEVANCE, _relevance_prompts))  # fmt: skip
def context_relevance_judge(rows: list[Row], params: DualParams, ctx: RunContext) -> list[MetricResult]:
    """Dual-judge relevance of the retrieved contexts to the question (0/1/2 -> [0, 1])."""
    return _dual(rows, params, ctx, CONTEXT_RELEVANCE, _relevance_prompts)


@register("groundedness", Queue.JUDGE, params=DualParams, kind="batch", needs=("answer", "contexts"),
          reads=(), plan_calls=_dual_calls(GROUNDEDNESS, _groundedness_prompts))  # fmt: skip
def groundedness(rows: list[Row], params: DualParams, ctx: RunContext) -> list[MetricResult]:
    """Dual-judge support of the answer by the retrieved contexts (0/1/2 -> [0, 1])."""
    return _dual(rows, params, ctx, GROUNDEDNESS, _groundedness_prompts)


# ---------------------------------------------------------------------------------------------- rubric judge

RubricOutputs = dict[str, MetricResult]


def _rubric_result(verdict: Verdict, params: RubricParams, rubric_source: str) -> RubricOutputs:
    details: dict[str, Any] = {"calls": verdict.calls, "cached": verdict.from_cache, "rubric": rubric_source}
    if verdict.value is not None:
        score, rationale = verdict.value
        details |= {"rationale": rationale}
        return {
            "rubric_judge": MetricResult(score=score / 5, details=details),
            "rubric_judge_raw": MetricResult(score=float(score), details={"calls": verdict.calls}),
        }
    if verdict.cut:
        result = MetricResult.failed(str(verdict.error))
    elif verdict.stopped:
        result = MetricResult.stopped(verdict.stopped, **details)
    elif verdict.error:
        result = MetricResult(score=None, error=verdict.error, details=details)
    elif verdict.no_answer:  # a refusal or a cut reply is no grade: never 0, whatever unparseable_as_zero says
        result = MetricResult.unscorable(verdict.no_answer, reply=verdict.reply, **details)
    elif params.unparseable_as_zero:
        details |= {"reply": verdict.reply, "unparseable": True}
        return {"rubric_judge": MetricResult(score=0.0, details=details),
                "rubric_judge_raw": MetricResult(score=0.0, details=details)}  # fmt: skip
    else:
        result = MetricResult.unscorable("the judge's reply holds no JSON score from 1 to 5", reply=verdict.reply,
                                         **details)  # fmt: skip
    return {"rubric_judge": result, "rubric_judge_raw": result}


def _rubric_jobs(rows: list[Row]) -> tuple[list[RubricOutputs | None], list[str], list[Job]]:
    """Per row its outputs when it cannot be judged (else None); per judged row its rubric's source and job."""
    out: list[RubricOutputs | None] = []
    sources: list[str] = []
    jobs: list[Job] = []
    for row in rows:
        missing = [f for f in ("question", "answer", "reference") if getattr(row, f) is None]
        if missing:
            result = MetricResult.unscorable(f"no {' / '.join(missing)}")
            out.append({"rubric_judge": result, "rubric_judge_raw": result})
            continue
        rubric = row.rubric.model_dump() if row.rubric and (row.rubric.description or row.rubric.scale) else None
        sources.append("row" if rubric else "default")
        rubric = rubric or DEFAULT_RUBRIC
        scale = rubric["scale"] or DEFAULT_RUBRIC["scale"]
        prompt = rubric_prompt(row.question, row.reference, row.answer, rubric["description"], scale)  # type: ignore[arg-type]
        out.append(None)
        jobs.append(Job(prompt, RUBRIC_VERSION, 1, parse_rubric))
    return out, sources, jobs


def _rubric_calls(rows: list[Row], params: RubricParams, suite: Suite) -> list[PlannedCall]:
    cap = reply_cap(params.max_tokens, suite.judge.max_tokens, suite.judge)
    return [job.planned(cap) for job in _rubric_jobs(rows)[2]]


@register(
    "rubric_judge",
    Queue.JUDGE,
    params=RubricParams,
    kind="batch",
    outputs=lambda p: ["rubric_judge", "rubric_judge_raw"],
    plan_calls=_rubric_calls,
    needs=("question", "answer", "reference"),
    reads=("rubric",),
)
def rubric_judge(rows: list[Row], params: RubricParams, ctx: RunContext) -> list[RubricOutputs]:
    """Rubric LLM judge, 1-5 as JSON, normalised A/5 (document-grounded QA framework)."""
    out, sources, jobs = _rubric_jobs(rows)
    judged = [row for row, result in zip(rows, out, strict=True) if result is None]
    for row, result in zip(rows, out, strict=True):
        if result is not None:  # it cannot be judged: finished now
            ctx.row_scored(row)
    cap = reply_cap(params.max_tokens, ctx.suite.judge.max_tokens, ctx.suite.judge)
    verdicts = iter(run_jobs(ctx, params, jobs, cap, judged))
    source = iter(sources)
    return [r if r is not None else _rubric_result(next(verdicts), params, next(source)) for r in out]
