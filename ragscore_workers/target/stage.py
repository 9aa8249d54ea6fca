"""The target stage of a run: ask a chunk of questions, store the answers; then plan their scoring.

``answer_chunk`` runs in a ``ragscore.target`` task: up to ``target.concurrency`` calls in flight, each
answer (or the reason there is none) stored in the run's ``answers:{shard}`` hash, so a redelivered
task, a resume or a re-score never asks twice. It ends by its task's deadline (the soft time limit, which a threads
pool does not enforce): the questions not answered by then store the time limit's error, as where a prefork pool
raises the limit, and a resume asks them again. ``scoring_rows`` is the other half, used by the shard's
``ragscore.score_shard`` callback: the answered rows to score, and failed results for items the target
could not answer (an error per output: the run still reports).
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from pydantic import ValidationError

from ..errors import ConfigError
from ..limits import TaskCalls, ended_by
from ..providers.errors import exception_text, traceback_text
from ..schemas import UNFILLED_PREFIX, Queue, Row, TargetConfig
from ..store import RunStore
from ..unicode_text import valid_unicode
from .client import TargetClient, build_target_client
from .errors import TIME_LIMIT_ERROR, TargetError
from .fill import fill_row, unanswered_row, unfilled_fields
from .template import render, request_data

__all__ = ["answer_chunk", "cut_answers", "scoring_rows"]

log = logging.getLogger(__name__)


def _answer(client: TargetClient, config: TargetConfig, row: Row, deadline: float, calls: TaskCalls) -> dict[str, Any]:
    """``row``'s answer or its error, once a place of ``config.concurrency`` is free among ``calls`` (the time limit's
    error where the deadline passed first: the calls an earlier task's cut left running held them)."""
    asked = unanswered_row(row, config)
    if not calls.enter(config.concurrency, deadline):
        return {"row": asked.to_message(), "error": TIME_LIMIT_ERROR}
    try:
        request = render(config.request, request_data(row))
        (filled, unfilled), cached = client.ask(
            request, lambda data: _filled(row, config, valid_unicode(data)), deadline=deadline
        )
        return {"row": filled.to_message(), "cached": cached, "unfilled": unfilled}
    except TargetError as exc:
        return {"row": asked.to_message(), "error": str(exc)}
    except Exception as exc:  # e.g. a callable's reply that is not JSON: this question fails, not the chunk
        log.error("target %s failed on %s: %s", config.name, row.id, traceback_text(exc))
        return {"row": asked.to_message(), "error": f"{config.name}: {exception_text(exc)}"[:500]}
    finally:
        calls.leave()


def _filled(row: Row, config: TargetConfig, data: Any) -> tuple[Row, list[str]]:
    """The answered row, and the fields the response map names that this reply lacks (counted per target)."""
    return fill_row(row, config, data), unfilled_fields(config, data)


def answer_chunk(
    store: RunStore, run_id: str, shard: int, config: TargetConfig, rows: list[dict], deadline: float
) -> dict[str, int]:
    """Ask ``config`` every row not answered yet, until ``deadline`` (``time.monotonic()``: its task's soft time limit);
    store each answer or its error. Returns counts."""
    parsed: list[Row] = []
    for raw in rows:
        try:
            parsed.append(Row.model_validate(raw))
        except ValidationError as exc:  # the orchestrator validated it; a foreign producer may not have
            log.error("run %s: invalid row %r in a target task: %s", run_id, raw.get("id"), exc)
    asked = {r.key: unanswered_row(r, config) for r in parsed}  # the items' rows: ``system`` set, no stale answer
    done = store.answers(run_id, shard, [a.key for a in asked.values()])
    todo = [r for r in parsed if "error" in done.get(asked[r.key].key, {"error": ""})]
    if not todo:
        return {"asked": 0, "new": 0}
    try:
        client = build_target_client(store.r, run_id, config)
    except ConfigError as exc:  # e.g. the token variable is not set on this worker
        answers = {asked[r.key].key: {"row": asked[r.key].to_message(), "error": f"target {config.name}: {exc}"}
                   for r in todo}  # fmt: skip
        return {"asked": len(todo), "new": store.save_answers(run_id, shard, answers).new}
    new = 0
    unfilled: Counter[str] = Counter()  # of the answers stored (one another delivery stored first was counted there)
    unfilled_of: dict[str, list[str]] = {}  # per item key, the fields its answer left unfilled
    pool = ThreadPoolExecutor(max_workers=min(config.concurrency, len(todo)), thread_name_prefix="target")
    # this thread's calls in flight, with those its earlier task's cut left running: within concurrency
    calls = TaskCalls.of_this_thread(Queue.TARGET.value)
    futures = {pool.submit(_answer, client, config, row, deadline, calls): asked[row.key] for row in todo}
    stored: set[Future[dict[str, Any]]] = set()
    try:
        for future in ended_by(deadline, futures):  # each answer is stored as it comes: a cut task loses none
            key = futures[future].key
            saved = store.save_answers(run_id, shard, {key: _without_unfilled(future.result(), key, unfilled_of)})
            new += saved.new
            unfilled.update(f for k in saved.stored for f in unfilled_of.get(k, ()))
            stored.add(future)
    except SoftTimeLimitExceeded:  # prefork pools only, at the deadline too: the rest is recorded as there
        pass
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # what has not started is never asked
    in_flight = [f for f in futures if f not in stored and not f.done()]  # before the cut: one ending now is in both
    if cut := cut_answers(futures, stored, unfilled_of):  # the deadline passed (or the soft limit): a resume asks again
        saved = store.save_answers(run_id, shard, cut)
        new += saved.new
        unfilled.update(f for k in saved.stored for f in unfilled_of.get(k, ()))
    for future in in_flight:  # the calls in flight go on: their answers are stored as they end
        future.add_done_callback(lambda done: _save_late(store, client, run_id, shard, futures[done].key, done))
    if unfilled:  # after, not in the finally: a Redis error here must not hide the error that ended the task
        _count_unfilled(client, unfilled)
    return {"asked": len(todo), "new": new}


def _count_unfilled(client: TargetClient, unfilled: Counter[str]) -> None:
    """Add ``unfilled`` (per field the response map names, the answers lacking it) to the target's counters."""
    # counters of UNFILLED_PREFIX only: never incr's cost, reset_failures or release
    client.state.incr(**{f"{UNFILLED_PREFIX}{field}": n for field, n in unfilled.items()})  # type: ignore[arg-type]


def _save_late(
    store: RunStore, client: TargetClient, run_id: str, shard: int, key: str, future: Future[dict[str, Any]]
) -> None:
    """Store the answer of a call that ended after its chunk was cut (in its thread, after the task may have
    returned): it replaces the time-limit error stored for it, and nothing else (:meth:`RunStore.save_answers`'s
    ``late``: not an answer stored since, nor the answers of a run that are gone, nor of a shard scored already), so
    what was paid for is kept; its unfilled fields are counted where it is stored (once: one the cut stored is not
    stored again). A question not started, or that failed, keeps its time-limit error."""
    if future.cancelled() or future.exception() is not None or "error" in future.result():
        return
    unfilled_of: dict[str, list[str]] = {}
    answer = _without_unfilled(future.result(), key, unfilled_of)
    try:
        if key not in store.save_answers(run_id, shard, {key: answer}, late=True).stored:
            # info, not a warning: nothing to do about it (the report says the time limit for the question, as does
            # answers.jsonl, and a resume reads the cached reply); a slow target's every chunk may log it
            log.info("run %s: the late answer of %s was not stored: its shard %d was scored already (or its "
                     "answers are gone); a resume asks it again, from the reply cache", run_id, key, shard)  # fmt: skip
        elif unfilled_of[key]:
            _count_unfilled(client, Counter(unfilled_of[key]))
    except Exception as exc:  # the reply is cached: a resume reads it back without asking
        log.error("run %s: a late answer of %s was not stored: %s", run_id, key, exception_text(exc))


def _without_unfilled(result: dict[str, Any], key: str, unfilled_of: dict[str, list[str]]) -> dict[str, Any]:
    """The answer to store of item ``key``'s call ``result``; the fields it left unfilled are ``unfilled_of[key]``
    (counted where the answer is stored: :attr:`~ragscore_workers.store.SavedAnswers.stored`)."""
    unfilled_of[key] = list(result.get("unfilled", ()))
    return {k: v for k, v in result.items() if k != "unfilled"}


def cut_answers(
    futures: dict[Future[dict[str, Any]], Row], stored: set[Future[dict[str, Any]]], unfilled_of: dict[str, list[str]]
) -> dict[str, Any]:
    """What a chunk cut by its time limit has not stored, per item key: the answer of a call that ended (its
    question is answered, and a resume's mark on it is taken; the fields it left unfilled in ``unfilled_of``), else
    the time-limit error."""
    left: dict[str, Any] = {}
    for future, asked in futures.items():
        if future in stored:
            continue
        if future.done() and not future.cancelled() and future.exception() is None:
            left[asked.key] = _without_unfilled(future.result(), asked.key, unfilled_of)
        else:
            left[asked.key] = {"row": asked.to_message(), "error": TIME_LIMIT_ERROR}
    return left


def _row_of_key(key: str) -> Row:
    system, sep, qid = key.partition("::")
    return Row(id=qid, system=system) if sep else Row(id=key)


def scoring_rows(answers: dict[str, dict[str, Any]], keys: list[str]) -> tuple[list[Row], list[tuple[Row, str]]]:
    """Split a shard's item ``keys`` into answered rows to score and ``(row, why)`` pairs for the items
    the target could not answer."""
    answered: list[Row] = []
    failed: list[tuple[Row, str]] = []
    for key in keys:
        answer = answers.get(key)
        if answer is None:  # its target task failed outright: recorded as an error, a resume asks again
            failed.append((_row_of_key(key), "no answer: the target task for this question did not complete"))
        elif "error" in answer:
            failed.append((Row.model_validate(answer["row"]), f"no answer: {answer['error']}"))
        else:
            answered.append(Row.model_validate(answer["row"]))
    return answered, failed
