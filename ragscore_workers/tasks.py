"""Celery tasks, kept thin: decode the message, call :func:`scoring.score_rows`, write the store.

Task names are stable (``ragscore.score.<queue>``, ``ragscore.finish_shard``, ``ragscore.aggregate``):
deployments route and monitor by them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from functools import lru_cache
from typing import Any, NoReturn, cast

import redis
from celery.exceptions import SoftTimeLimitExceeded
from kombu.exceptions import OperationalError
from pydantic import BaseModel, ValidationError

from .aggregate import Aggregator
from .answers import unanswered_why
from .app import QUEUE_LIMITS, SCORING_QUEUES, app
from .counts import noun
from .errors import ConfigError, UnknownMetricError
from .limits import longest_hard_limit, soft_deadline, time_limit_error
from .metrics.checks import refused_points
from .metrics.registry import MetricDef, RunContext, get_metric
from .planning import ResolvedSuite, plan_shard, resolve_suite
from .providers.run_state import UNREPORTED_FIELDS, as_run_stopper_errors, breaker_summary, replaced_stops
from .schemas import (
    ITEM_META_FIELDS,
    JUDGE_COUNTERS,
    TARGET_COUNTERS,
    MetricResult,
    Queue,
    Row,
    Suite,
    item_key,
    question_fingerprint,
)
from .scoring import cancel_skipped, derive, score_rows, with_skipped
from .settings import get_settings
from .store import (
    JUDGE_LIMITERS_PART,
    PROGRESSIVE_QUEUES,
    RawItem,
    RunState,
    RunStore,
    as_stored,
    redis_client,
    superseded,
    target_state_part,
)

__all__ = ["aggregate", "ask_target", "finish_shard", "score_shard", "score_task"]

log = logging.getLogger(__name__)

Written = tuple[str, dict[str, Any], dict[str, MetricResult]]


@lru_cache(maxsize=1)
def get_store() -> RunStore:
    """The run store of this worker process (one connection pool per process)."""
    settings = get_settings()
    url = settings.store_url or settings.broker_url
    if not url:
        raise ConfigError("RAGSCORE_BROKER_URL (or RAGSCORE_STORE_URL) must be set for workers")
    return RunStore(redis_client(url), settings.run_ttl_s)


def _not_here(exc: UnknownMetricError) -> ConfigError:
    """A metric the orchestrator knew but this worker does not: its plug-in is not loaded here. Said so, where the
    orchestrator's "did you mean" would point at a built-in with a like name."""
    plugins = get_settings().plugins or "unset"
    return ConfigError(
        f"worker {socket.gethostname()} has no metric {exc.name!r} (RAGSCORE_PLUGINS here: {plugins}): every worker "
        "must import the module that registers it (RAGSCORE_PLUGINS or a ragscore.metrics entry point); then resume"
    )


def _resolve_suite_here(suite: Suite) -> ResolvedSuite:
    """:func:`resolve_suite` on a worker (a metric unknown here, alone or among other problems, an
    :class:`~.errors.UnknownMetrics` naming the first: :func:`_not_here`)."""
    try:
        return resolve_suite(suite)
    except UnknownMetricError as exc:
        raise _not_here(exc) from exc


@lru_cache(maxsize=64)
def _resolve(suite_json: str, names: tuple[str, ...]) -> tuple[Suite, list[tuple[MetricDef, BaseModel]]]:
    suite = Suite.stored(suite_json)
    specs = {spec.name: spec for spec in suite.metrics}
    metrics = []
    for name in names:
        try:
            mdef = get_metric(name)
        except UnknownMetricError as exc:
            raise _not_here(exc) from exc
        metrics.append((mdef, mdef.parse_params(specs[name].params)))
    judged = [mdef.name for mdef, _ in metrics if mdef.plan_calls is not None or mdef.queue == Queue.JUDGE]
    if judged and suite.unknown_judge_fields:  # a judge setting this worker would drop may change the scores
        raise ConfigError(
            f"worker {socket.gethostname()} runs a ragscore older than the one that submitted the run: it does not "
            f"know its judge {noun(len(suite.unknown_judge_fields), 'setting')} {', '.join(suite.unknown_judge_fields)}"
            f", which may change the scores of {', '.join(judged)}: upgrade this worker, then resume"
        )
    return suite, metrics


def _item_meta(row: Row) -> dict[str, Any]:
    return {name: getattr(row, name) for name in ITEM_META_FIELDS} | {
        "question_sha": question_fingerprint(row.question)
    }


def _raw_key_meta(raw: dict) -> tuple[str, dict[str, Any]]:
    """Item key and meta of a row as the task message carries it, for a row that could not be parsed or scored:
    the key of the item the orchestrator counts (``system::id``), not a stray item keyed by the id alone, and
    the meta :func:`_item_meta` gives (an item's ``_meta`` is rewritten by every queue that writes it: one
    without the group would take the item out of its group in the summary)."""
    meta: dict[str, Any] = {name: None if raw.get(name) is None else str(raw[name]) for name in ITEM_META_FIELDS}
    meta["id"] = meta["id"] or "?"
    question = raw.get("question")
    meta["question_sha"] = question_fingerprint(question) if isinstance(question, str) else None
    return item_key(meta["system"], meta["id"]), meta


#: A chunk holding an item delivered this many times on its queue (its earlier deliveries never ended: their
#: process died) is scored one item at a time ("careful mode"), so the item that kills the process is found
#: and recorded as failed instead of looping forever.
CAREFUL_FROM_ATTEMPT = 2
#: Seconds a judge chunk runs before it marks its rows done one by one (:meth:`RunStore.mark_scored`): a chunk
#: that ends sooner (its replies cached) is counted by its write alone, with no round trip per row.
MARK_ROWS_AFTER_S = 1.0


def _parse_rows(rows: list[dict], outputs: list[str]) -> tuple[list[Row], list[Written]]:
    parsed: list[Row] = []
    failed: list[Written] = []
    for raw in rows:
        try:
            parsed.append(Row.model_validate(raw))
        except ValidationError as exc:  # the orchestrator validated it; a foreign producer may not have
            error = MetricResult.failed(f"invalid row: {exc.errors()[0]['msg']}")
            failed.append((*_raw_key_meta(raw), {o: error for o in outputs}))
    return parsed, failed


def _split_unanswered(rows: list[Row], outputs: list[str]) -> tuple[list[Row], list[Written]]:
    """Rows of an ``answers.jsonl`` whose target could not answer (:func:`~.answers.unanswered_why`) are the errors
    they were in the run that asked, not rows without an answer (unscorable, or 0 where a metric scores no
    contexts)."""
    kept: list[Row] = []
    failed: list[Written] = []
    for row in rows:
        why = unanswered_why(row.model_extra or {}, row.metadata, row.answer)
        if why:
            error = MetricResult.failed(f"no answer: {why}"[:2000])
            failed.append((row.key, _item_meta(row), {o: error for o in outputs}))
        else:
            kept.append(row)
    return kept, failed


def _or_outlived() -> str:
    """The other reason a careful delivery's mark is left behind, where the settings make it possible: the delivery
    still ran when the visibility timeout passed, and was delivered again (a timeout not above every hard limit)."""
    settings = get_settings()
    if not settings.short_visibility_timeout:
        return ""
    return (f", or ran past the visibility timeout (RAGSCORE_VISIBILITY_TIMEOUT_S={settings.visibility_timeout_s} s, "
            f"not above the {longest_hard_limit()} s hard time limit) and was delivered again while it "
            "ran")  # fmt: skip


def _score_carefully(
    store: RunStore, run_id: str, queue: str, rows: list[Row], metrics: list, ctx: RunContext, outputs: list[str],
    attempt: int,
) -> int:  # fmt: skip
    """One item at a time, each written at once; an item a careful delivery was scoring when its process died
    (its mark is still there) is failed."""
    todo = store.incomplete(run_id, [r.key for r in rows], outputs)
    rows = [row for row in rows if row.key in todo]  # the others were finished by an earlier delivery
    culprits = store.marked_scoring(run_id, queue, [r.key for r in rows])
    new = 0
    for index, row in enumerate(rows):
        if row.key in culprits:
            error = MetricResult.failed(
                f"the worker process died while scoring this item{_or_outlived()} (delivery {attempt - 1}); "
                "not retried again"
            )
            new += store.write_results(run_id, queue, [(row.key, _item_meta(row), {o: error for o in outputs})])
            store.mark_scoring(run_id, queue, row.key, False)
            continue
        store.mark_scoring(run_id, queue, row.key, True)
        try:
            (scores,) = score_rows([row], metrics, ctx)
        except SoftTimeLimitExceeded:  # time is up for the chunk: this item and the rest fail, the chord goes on
            failed = MetricResult.failed(time_limit_error(queue))
            rest = [(r.key, _item_meta(r), {o: failed for o in outputs}) for r in rows[index:]]
            new += store.write_results(run_id, queue, rest)
            store.mark_scoring(run_id, queue, row.key, False)
            break
        new += store.write_results(run_id, queue, [(row.key, _item_meta(row), scores)])
        store.mark_scoring(run_id, queue, row.key, False)
    return new


#: Seconds between two refreshes of one run's key expiry by one worker process: the run's meta and id lists,
#: written once at submit, must outlive a run that lasts longer than the live TTL (items are rewritten).
TOUCH_EVERY_S = 600.0
_touched: dict[str, float] = {}


def _keep_alive(store: RunStore, run_id: str) -> None:
    """Refresh the run's key expiry (:meth:`RunStore.touch`) at most once per ``TOUCH_EVERY_S`` here."""
    now = time.monotonic()
    if now - _touched.get(run_id, float("-inf")) >= TOUCH_EVERY_S:
        _touched[run_id] = now
        store.touch(run_id)


#: The skip reason of a cancelled run's task (its items keep their meta: :meth:`RunStore.keep_item_meta`).
CANCELLED_SKIP = "run cancelled"


def _skip_reason(store: RunStore, run_id: str, generation: int) -> str | None:
    """Why a task of this run should not run: the run was cancelled, or a resume (a later generation)
    re-sent its work (running it as well would pay for the same calls twice). A task that runs, the first of its
    generation, stamps when the run's work began (:meth:`RunStore.work_began`); read with the state, the stamp costs
    no round trip once made."""
    fields = ["state", "generation", "work_began_gen"]
    state, current, began = cast("list[str | None]", store.r.hmget(store.key(run_id, "meta"), fields))
    if state == RunState.CANCELLED:
        return CANCELLED_SKIP
    if superseded(generation, current):
        return "superseded by a resume"
    if state is not None and generation == int(current or 0) and began != str(generation):
        store.work_began(run_id, generation)
    return None


def score_chunk(
    queue: str,
    run_id: str,
    suite_json: str,
    metric_names: list[str],
    rows: list[dict],
    generation: int = 0,
    retry: str | None = None,
) -> dict:
    """Score a chunk of rows with the named metrics and write every item's results to the store.

    Deliveries are counted per item and queue, not per task: a process killed at its hard time limit is acked
    as failed, and a stalled run's recovery sends the items again in new tasks, often cut into other chunks.
    ``retry``: the chunk sent itself again after its Redis calls failed (:func:`_retry_chunk`), this its task's id and
    retry number: its earlier try's deliveries and careful marks, which it could not clear, are not a death's.
    """
    deadline = soft_deadline(queue)  # what a threads pool's judge calls end by (it enforces no Celery time limit)
    store = get_store()
    if skipped := _skip_reason(store, run_id, generation):
        if skipped == CANCELLED_SKIP:
            store.keep_item_meta(run_id, [_raw_key_meta(r) for r in rows])
        return {"items": len(rows), "new": 0, "skipped": skipped}
    _keep_alive(store, run_id)
    keys = [item_key(r.get("system"), str(r.get("id"))) for r in rows]
    if retry:
        store.forget_deliveries(run_id, queue, keys, retry)
    attempt = store.start_delivery(run_id, queue, keys)
    try:
        scored = _score_delivery(store, queue, run_id, suite_json, metric_names, rows, attempt, deadline)
    except Exception:
        store.end_delivery(run_id, queue, keys)
        raise
    # The chunk ended: these items' next delivery is a first one. Not on a SystemExit (a plug-in calling exit(),
    # argparse in it) or another BaseException, which ends the process as a kill does: the next delivery is careful.
    store.end_delivery(run_id, queue, keys)
    return scored


def _marks_once_slow(store: RunStore, run_id: str, queue: str) -> Any:
    """The progress hook of a chunk of ``queue``: marks each row's outputs scored once the chunk has run
    :data:`MARK_ROWS_AFTER_S` (a slow judge's), nothing before (a cached re-run's rows cost no round trip each)."""
    started = time.monotonic()

    def scored(row: Row, names: list[str]) -> None:
        if time.monotonic() - started >= MARK_ROWS_AFTER_S:
            store.mark_scored(run_id, queue, row.key, names)

    return scored


def _score_delivery(
    store: RunStore, queue: str, run_id: str, suite_json: str, metric_names: list[str], rows: list[dict],
    attempt: int, deadline: float,
) -> dict:  # fmt: skip
    outputs: list[str] = []
    try:
        suite, metrics = _resolve(suite_json, tuple(metric_names))
        outputs = [o for mdef, params in metrics for o in mdef.outputs(params)]
        parsed, written = _parse_rows(rows, outputs)
        if not suite.all_targets:  # answers.jsonl re-scored (--no-target): a question its target failed stays failed
            parsed, unanswered = _split_unanswered(parsed, outputs)
            written += unanswered
        # a judge chunk's rows are counted in the run's progress as each ends, before the chunk's write (careful
        # scoring writes each row as it ends)
        progressive = queue in PROGRESSIVE_QUEUES and attempt < CAREFUL_FROM_ATTEMPT
        scored = _marks_once_slow(store, run_id, queue) if progressive else None
        ctx = RunContext(run_id=run_id, suite=suite, redis=store.r, scored=scored, deadline=deadline)
        if attempt >= CAREFUL_FROM_ATTEMPT:
            new = store.write_results(run_id, queue, written)
            return {"items": len(rows), "new": new + _score_carefully(
                store, run_id, queue, parsed, metrics, ctx, outputs, attempt)}  # fmt: skip
        scores: list[dict[str, MetricResult]] = [{} for _ in parsed]
        try:
            if queue == Queue.CODE.value:  # a row's programs at a time: a batch metric's finished rows are kept too
                for row, done in zip(parsed, scores, strict=True):
                    score_rows([row], metrics, ctx, into=[done])
            else:
                score_rows(parsed, metrics, ctx, into=scores)
        except SoftTimeLimitExceeded:  # what was scored is kept; the rest gets the time limit's error
            failed = MetricResult.failed(time_limit_error(queue))
            scores = [{o: done.get(o, failed) for o in outputs} for done in scores]
        written += [(row.key, _item_meta(row), s) for row, s in zip(parsed, scores, strict=True)]
        return {"items": len(rows), "new": store.write_results(run_id, queue, written)}
    except (ConfigError, ValidationError) as exc:
        # e.g. a worker running an older ragscore that lacks a metric: every item gets the error, the chord
        # still completes.
        log.error("run %s: cannot score chunk on %s: %s", run_id, queue, exc)
        names = outputs or list(metric_names)
        error = MetricResult.failed(f"worker cannot score: {exc}"[:2000])
        items = [(*_raw_key_meta(r), {n: error for n in names}) for r in rows]
        return {"items": len(rows), "new": store.write_results(run_id, queue, items)}


#: Times a chunk whose own Redis calls failed is sent again (a Redis hung past the client's whole wait, or the chunk's
#: soft time limit hit in its write or bookkeeping), the first after ``CHUNK_RETRY_PAUSE_S``, each pause twice the
#: last. A chunk that raised would leave its shard's chord unfinished, and a detached run ``running`` for ever; its
#: items' writes are idempotent (an output written again is not counted again), so sending it again is safe.
CHUNK_RETRIES = 3
CHUNK_RETRY_PAUSE_S = 30.0


def _chunk_failure(queue: str, exc: Exception) -> str:
    """What stopped a chunk's own Redis calls: its soft time limit, or Redis not answering."""
    if isinstance(exc, SoftTimeLimitExceeded):
        return f"its time limit ({QUEUE_LIMITS[queue][0]} s) passed while Redis did not answer"
    return f"Redis did not answer ({type(exc).__name__}: {exc})"


def _retry_chunk(task: Any, queue: str, run_id: str, exc: Exception) -> NoReturn:
    """Send the chunk of ``task`` again after ``exc`` (a Redis outage, or its soft time limit hit outside its
    metrics); once it was sent :data:`CHUNK_RETRIES` times, mark the run failed saying why (if Redis lets it) and
    raise ``exc``."""
    tries = task.request.retries
    why = _chunk_failure(queue, exc)
    if tries < CHUNK_RETRIES:
        pause = CHUNK_RETRY_PAUSE_S * 2**tries
        log.warning("run %s: a chunk on %s could not use Redis (%s); sending it again in %.0f s (retry %d of %d)",
                    run_id, queue, why, pause, tries + 1, CHUNK_RETRIES)  # fmt: skip
        raise task.retry(exc=exc, countdown=pause)
    error = (f"a chunk on {queue} could not write its items: {why}, {CHUNK_RETRIES + 1} tries; ragscore resume "
             "scores them again")  # fmt: skip
    log.error("run %s: %s", run_id, error)
    _fail_run(get_store(), run_id, error)
    raise exc


def _make_score_task(queue: str):
    soft, hard = QUEUE_LIMITS[queue]

    # max_retries=None: CHUNK_RETRIES alone bounds the retries (Celery's own bound, 3, would raise before it gives up)
    @app.task(name=f"ragscore.score.{queue}", bind=True, max_retries=None, soft_time_limit=soft, time_limit=hard)
    def _task(
        self, run_id: str, suite_json: str, metric_names: list[str], rows: list[dict], generation: int = 0
    ) -> dict:
        try:
            retry = f"{self.request.id}:{self.request.retries}" if self.request.retries else None
            return score_chunk(queue, run_id, suite_json, metric_names, rows, generation=generation, retry=retry)
        except (*REDIS_OUTAGE, SoftTimeLimitExceeded) as exc:  # not a metric's: those are caught as item errors
            _retry_chunk(self, queue, run_id, exc)

    _task.__doc__ = f"Score a chunk of rows on the {queue} queue."
    return _task


#: One scoring task per queue, so routing, time limits and Flower views follow the queue.
score_task = {q.value: _make_score_task(q.value) for q in SCORING_QUEUES}


def _target_system(suite_json: str, index: int) -> str | None:
    """The ``system`` of the suite's target ``index``; None without one, or when this worker cannot read the suite
    (a skipped task must not fail on it)."""
    try:
        return _resolve(suite_json, ())[0].all_targets[index].system
    except (ValidationError, IndexError):
        return None


@app.task(name="ragscore.target", soft_time_limit=QUEUE_LIMITS["target"][0], time_limit=QUEUE_LIMITS["target"][1])
def ask_target(
    run_id: str, suite_json: str, shard: int, target_index: int, rows: list[dict], generation: int = 0
) -> dict:
    """Ask one target a chunk of questions and store the answers (the first stage of a target run), until its soft
    time limit whatever the pool (a threads pool enforces none: the broker would deliver it again)."""
    from .target.stage import answer_chunk

    deadline = soft_deadline(Queue.TARGET.value)
    store = get_store()
    if skipped := _skip_reason(store, run_id, generation):
        if skipped == CANCELLED_SKIP:  # the items of this target's system (its own, else the row's)
            system = _target_system(suite_json, target_index)
            store.keep_item_meta(run_id, [_raw_key_meta(r | {"system": system or r.get("system")}) for r in rows])
        return {"asked": 0, "new": 0, "skipped": skipped}
    _keep_alive(store, run_id)
    suite, _ = _resolve(suite_json, ())
    return answer_chunk(store, run_id, shard, suite.all_targets[target_index], rows, deadline)


@app.task(name="ragscore.score_shard")
def score_shard(run_id: str, shard: int, generation: int = 0) -> None:
    """Callback of a shard's target chord: score what was answered (only what is still missing), record
    the items the target could not answer as errors, and start the shard's scoring chord. A suite this worker
    cannot resolve (a plug-in not loaded here) fails the run, saying so: the shard could never finish."""
    from .target.stage import scoring_rows

    store = get_store()
    try:
        resolved = _resolve_suite_here(Suite.stored(store.meta(run_id)["suite"]))
    except ConfigError as exc:  # the same on every delivery: the run fails saying why, it does not wait for ever
        log.error("run %s: cannot plan the scoring of shard %d: %s", run_id, shard, exc)
        store.set_state(run_id, RunState.FAILED, error=f"score_shard: {exc}")
        return
    metric_outputs = resolved.scoring_outputs()
    keys = store.shard_keys(run_id, shard)
    store.mark_answers_scored(run_id, shard, generation)  # before the read: a late answer is in it, or not stored
    todo_outputs = store.incomplete(run_id, keys, [o for outs in metric_outputs.values() for o in outs])
    rows, failed = scoring_rows(store.answers(run_id, shard, list(todo_outputs)), list(todo_outputs))
    for row, why in failed:
        error = MetricResult.failed(why)
        for queue, names in resolved.row_queues(row).items():
            results = {o: error for n in names for o in metric_outputs[n] if o in todo_outputs[row.key]}
            store.write_results(run_id, queue, [(row.key, _item_meta(row), results)])
    planned = plan_shard(run_id, shard, rows, resolved, todo=resolved.metrics_todo(todo_outputs), generation=generation)
    if planned is not None:
        planned.signature.apply_async()
        return
    finish_shard(run_id, shard, generation)


@app.task(name="ragscore.finish_shard")
def finish_shard(run_id: str, shard: int, generation: int = 0) -> None:
    """Chord callback of one shard: record it, and start aggregation when it was the last one."""
    store = get_store()
    store.mark_shard_done(run_id, shard, generation)
    if store.claim_finalize(run_id):
        aggregate.delay(run_id, store.generation(run_id))


def _embedding_summary(counters: dict[str, Any]) -> dict[str, Any]:
    """Totals of the embed workers' counters; per-process fields become process and load counts, ``devices``: how
    many processes ran on each device and precision (``{"cuda fp16": 2}``), and ``encoders`` (:func:`_encoders`)."""
    out = {k: v for k, v in counters.items() if ":" not in k}
    loads = [v for k, v in counters.items() if k.startswith("loads:")]
    if loads:
        out |= {"worker_processes": len(loads), "model_loads": sum(loads)}
    devices = Counter(str(v) for k, v in counters.items() if k.startswith("device:"))
    if devices:
        out["devices"] = dict(sorted(devices.items()))
    if encoders := _encoders(counters):
        out["encoders"] = encoders
    return out


def _encoders(counters: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per device type the processes encoded on (``cpu``, ``cuda``, ``mps``): how many ``workers`` encoded there, and
    their ``encoded`` texts and ``encode_ms`` (summed over those workers, which encode at once: over ``workers`` it is
    about the wall time). What the dry run's measured rates are of (``orchestrator.encode_rates``)."""
    from .embedding import device_type  # a cpu worker's aggregate imports no embedding module for it

    out: dict[str, dict[str, int]] = {}
    for key, encoded in counters.items():
        if not key.startswith("encoded:") or not encoded:
            continue
        worker = key.removeprefix("encoded:")
        device = device_type(str(counters.get(f"device:{worker}", "unknown")))
        tally = out.setdefault(device, {"workers": 0, "encoded": 0, "encode_ms": 0})
        tally["workers"] += 1
        tally["encoded"] += int(encoded)
        tally["encode_ms"] += int(counters.get(f"encode_ms:{worker}") or 0)
    return dict(sorted(out.items()))


@app.task(name="ragscore.aggregate")
def aggregate(run_id: str, generation: int | None = None) -> None:
    """Read every item from the store and write the run summary (of ``generation``: one a resume has since
    superseded writes nothing)."""
    aggregate_in(get_store(), run_id, generation)


def aggregate_in(store: RunStore, run_id: str, generation: int | None = None, *, retried: bool = False) -> None:
    """:func:`aggregate` on ``store``: also run by ``ragscore cancel`` itself for an embedded run whose process
    (and so every worker of its lane) is gone, and by ``wait()`` when no worker serves the control queue.

    A Redis outage that cuts the aggregation off is not a failed run. ``retried``: the caller tries again once Redis
    answers (the orchestrator's commands), so the outage is raised as it is, the run left as it was. A worker's
    aggregation has nobody else to retry it (its message is acked on failure; a detached run has no ``wait()``): it
    waits the outage out here and aggregates again, in this thread (its lease, left held, is its own); only a Redis
    away for ``REDIS_OUTAGE_S`` marks the run failed, and ``ragscore resume`` then writes its summary."""
    if retried:
        _aggregate_leased(store, run_id, generation)
        return
    deadline: float | None = None
    while True:
        try:
            _aggregate_leased(store, run_id, generation)
            return
        except REDIS_OUTAGE as exc:
            deadline = deadline or time.monotonic() + REDIS_OUTAGE_S
            log.warning("aggregate of run %s cut off: Redis did not answer (%s); aggregating again once it does "
                        "(for up to %.0f s)", run_id, exc, REDIS_OUTAGE_S)  # fmt: skip
            if not _redis_back(store, deadline):
                _fail_aggregation(store, run_id, exc)
                raise
            log.warning("aggregate of run %s: Redis answers again; aggregating it again", run_id)


def _aggregate_leased(store: RunStore, run_id: str, generation: int | None) -> None:
    """One try of :func:`aggregate_in`: skipped if superseded, written already or leased by another aggregator."""
    meta = store.meta(run_id)
    if superseded(generation, meta.get("generation")):
        log.info("aggregate of run %s skipped: generation %d was superseded by a resume", run_id, generation)
        return
    if meta.get("state") == RunState.FINISHED and store.summary_is_current(run_id, generation):
        # A copy of a message the broker handed out again: an aggregation longer than the visibility timeout
        # (millions of items) is re-delivered, and each copy would be, every 15 minutes, for ever.
        log.info("aggregate of run %s skipped: its summary is written already (a re-delivered message)", run_id)
        return
    lease = store.key(run_id, f"aggregating:{generation if generation is not None else meta.get('generation', 0)}")
    owner = _lease_owner()
    if not store.take_lease(lease, owner, AGGREGATE_LEASE_S):  # a copy of this message is aggregating
        log.info("aggregate of run %s skipped: another worker is aggregating it (a re-delivered message)", run_id)
        return
    try:
        _aggregate(store, run_id, generation, meta, (lease, owner))
    finally:
        try:
            store.release_lease(lease, owner)
        except REDIS_OUTAGE as exc:  # what ended the aggregation (or its summary, written) says more
            log.warning("aggregate of run %s: its lease could not be released (%s): it lapses, or a later try of "
                        "this thread takes it over", run_id, exc)  # fmt: skip


def _redis_back(store: RunStore, deadline: float) -> bool:
    """Look at Redis, each pause twice the last (1 s up to ``OUTAGE_POLL_MAX_S``), until it answers (True) or
    ``deadline`` (``time.monotonic()``) passes (False). A look at a Redis that is down takes the client's own retries
    too (about 20 s with a worker's client); one at a Redis that accepts connections and never replies waits for it
    (a worker's reads wait ``RAGSCORE_WORKER_STORE_TIMEOUT_S`` each, retried), as every other call of the worker
    would."""
    pause = 1.0
    while time.monotonic() < deadline:
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        try:
            store.r.ping()
            return True
        except REDIS_OUTAGE:
            pause = min(2 * pause, OUTAGE_POLL_MAX_S)
    return False


def _fail_aggregation(store: RunStore, run_id: str, exc: Exception) -> None:
    """Mark the run failed by ``exc`` (a run left unmarked stays aggregating for ever), if Redis lets it."""
    log.error("aggregate failed for run %s: %s: %s", run_id, type(exc).__name__, exc, exc_info=exc)
    _fail_run(store, run_id, f"aggregate: {type(exc).__name__}: {exc}")


def _fail_run(store: RunStore, run_id: str, error: str) -> None:
    """Mark the run failed with ``error`` (what ``ragscore status`` shows), if Redis lets it: else log it."""
    try:
        store.set_state(run_id, RunState.FAILED, error=error[:2000])
    except REDIS_OUTAGE as again:
        log.error("run %s: could not mark it failed either (%s)", run_id, again)


#: What a Redis that is down, restarting or hung raises (redis-py's errors, and kombu's): an aggregation it cuts off
#: is not a failed run (:func:`aggregate_in`), and a wait for a run goes on through it (``orchestrator.runner``).
REDIS_OUTAGE: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, OperationalError)
#: Seconds a Redis outage (a restart, a fail-over) is waited out before giving up: by ``wait()``, each outage from
#: its first failed poll; by a worker's aggregation, once in all from its first failed call (a second outage in the
#: same aggregation has what is left: the wait is bounded even for a fault that a ping does not show).
REDIS_OUTAGE_S = 300.0
#: Longest pause between two looks at a Redis that does not answer.
OUTAGE_POLL_MAX_S = 10.0

#: Tells this process apart from an earlier one with its pid (on a host of the same name: a restarted container).
_BOOT = uuid.uuid4().hex


def _lease_owner() -> str:
    """Who holds an aggregation's lease: this thread of this process. A thread aggregates one run at a time, so a
    lease of its own that it finds held was left by an aggregation of it that has ended (an outage cut off the
    release): it takes it over. Any other aggregator (another thread, process or worker) skips while it is held."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{_BOOT}"


#: Seconds an aggregation holds its lease without renewing it (it renews every ``LEASE_EVERY`` items): a copy of
#: its message re-delivered meanwhile skips; a killed worker's lease lapses, and the re-delivery then aggregates.
AGGREGATE_LEASE_S = 120
LEASE_EVERY = 20_000


def _keep_lease(store: RunStore, run_id: str, generation: int | None, lease: tuple[str, str], seconds: int) -> bool:
    """Hold the aggregation's ``lease`` (key, owner) ``seconds`` more. One that lapsed with nobody holding it is taken
    back, unless the summary of ``generation`` was written meanwhile (a copy of the message, re-delivered, took the
    lease, finished and released it): False, this aggregation stops (its lease, taken back, released by its caller).
    One another aggregator holds now is left to it: False, this aggregation stops without writing its summary (the
    other writes it)."""
    if store.renew_lease(*lease, seconds):
        return True
    if store.take_lease(*lease, seconds):
        # Looked at once the lease is held: a copy that writes the summary holds it until it has written.
        if store.summary_is_current(run_id, generation):
            log.warning("aggregate of run %s stopped: its lease lapsed and its summary was written meanwhile (by a "
                        "re-delivered copy of its message)", run_id)  # fmt: skip
            return False
        log.warning("aggregate of run %s: its lease had lapsed; taken back", run_id)
        return True
    log.warning("aggregate of run %s stopped: its lease lapsed and another aggregator holds it now", run_id)
    return False


def _refused(metrics: dict[str, dict[str, Any]], replaced: dict[str, str]) -> dict[str, MetricResult]:
    """The outputs of an item as stored (``metrics``) that a breaker reason a run stopper replaced stopped
    (``replaced``: :func:`replaced_stops`), as that run stopper's errors: a judge metric's, and a ``checks`` result's
    meta_eval points (:func:`~.metrics.checks.refused_points`)."""
    refused = as_run_stopper_errors(metrics, replaced)
    if (checks := refused_points(metrics.get("checks"), replaced)) is not None:
        refused["checks"] = checks
    return refused


def _rewrite(
    store: RunStore,
    run_id: str,
    queue: str,
    pending: dict[str, list[tuple[str, dict[str, Any], dict[str, MetricResult]]]],
    raw: RawItem,
    results: dict[str, MetricResult],
) -> None:
    """``results`` replace or join ``raw``'s outputs (as the store holds them, for what reads ``raw`` next) and wait
    in ``pending[queue]`` to be written as ``queue``'s, 500 items at a time."""
    raw.metrics.update({name: as_stored(r) for name, r in results.items()})
    pending[queue].append((raw.key, raw.meta, results))
    if len(pending[queue]) >= 500:
        store.write_results(run_id, queue, pending[queue])
        pending[queue].clear()


def _aggregate(
    store: RunStore, run_id: str, generation: int | None, meta: dict[str, Any], lease: tuple[str, str]
) -> None:
    """Read every item and write the summary (``aggregate``, under its ``lease``: key, owner)."""
    store.set_state(run_id, RunState.AGGREGATING)  # a cancelled run (or a re-delivery's finished one) keeps its state
    started = time.time()
    try:
        agg = Aggregator()
        resolved = _resolve_suite_here(Suite.stored(meta["suite"]))
        derived = [(m, p) for m, p in resolved.metrics if m.kind == "derived"]
        # A cancel skips whole chunks: what they held is counted as stopped (a resume scores it), not left out,
        # before the derived metrics read it.
        skipped: dict[str, dict[str, Any]] = {}
        if meta.get("state") == RunState.CANCELLED:
            skipped = cancel_skipped(o for outs in resolved.scoring_outputs().values() for o in outs)
        # items a breaker's count stopped before a refused key's 401 came
        replaced = replaced_stops(store.counters(run_id, "judge"))
        pending: dict[str, list[tuple[str, dict[str, Any], dict[str, MetricResult]]]] = {
            Queue.JUDGE.value: [],
            Queue.DERIVED.value: [],
        }
        for count, raw in enumerate(with_skipped(store.iter_raw_items(run_id), skipped), start=1):
            if count % LEASE_EVERY == 0 and not _keep_lease(store, run_id, generation, lease, AGGREGATE_LEASE_S):
                return
            if replaced and (refused := _refused(raw.metrics, replaced)):
                _rewrite(store, run_id, Queue.JUDGE.value, pending, raw, refused)
            if derived:
                _rewrite(store, run_id, Queue.DERIVED.value, pending, raw, derive(raw.metrics, derived))
            agg.add_raw(raw.meta, raw.metrics)
        for queue, left in pending.items():
            store.write_results(run_id, queue, left)
        # the statistics, then the save: no renewal
        if not _keep_lease(store, run_id, generation, lease, AGGREGATE_LEASE_S * 5):
            return
        submitted = float(meta.get("submitted_at", meta.get("created_at", started)))
        # After a resume, scoring and wall time count from it (not across the interruption).
        since = float(meta.get("resumed_at") or submitted)
        timing = {
            "submitted_at": submitted,
            **({"resumed_at": since} if "resumed_at" in meta else {}),
            "submit_s": float(meta.get("submit_s", 0.0)),
            "scoring_s": round(started - since, 3),
            "aggregate_s": round(time.time() - started, 3),
            "wall_s": round(time.time() - since, 3),
        }
        # which judge each breaker stopped
        limiters = cast("dict[str, str]", store.r.hgetall(store.key(run_id, JUDGE_LIMITERS_PART)))
        # read again, after the items: a cut task's late calls may have counted meanwhile
        judge = dict.fromkeys(JUDGE_COUNTERS, 0) | breaker_summary(store.counters(run_id, "judge"), limiters)
        judge["agreement"] = {name: a.to_json() for name, a in sorted(agg.agreement.items())}
        targets = {t.name: store.counters(run_id, target_state_part(t.name)) for t in resolved.suite.all_targets}
        summary = agg.summary(
            run_id,
            judge=judge,
            embedding=_embedding_summary(store.counters(run_id, "embed")),
            target={
                name: dict.fromkeys(TARGET_COUNTERS, 0) | {k: v for k, v in c.items() if k not in UNREPORTED_FIELDS}
                for name, c in targets.items()
            },  # fmt: skip
            suite=resolved.suite.name,
            state=RunState.FINISHED,  # saved as cancelled when the run was cancelled (store.save_summary)
            failed_rows=int(meta.get("failed_rows", 0)),
            timing=timing,
        )
        if store.save_summary(run_id, summary, generation) is not None:
            store.settle(run_id, released=True)  # every key of the run expires RAGSCORE_RUN_TTL_S from here
    except Exception as exc:
        if isinstance(exc, REDIS_OUTAGE):  # not a failed run: tried again once Redis answers (aggregate_in)
            log.warning("aggregate of run %s cut off: Redis did not answer", run_id, exc_info=True)
            raise
        _fail_aggregation(store, run_id, exc)
        raise
