"""A target task ends by its soft time limit in a threads pool too (which enforces no Celery time limit): the
questions it had not answered by then are recorded as the limit's errors, the run reports them, and a resume asks
them again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runner import Submitted, connect, resume, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.schemas import TargetConfig
from ragscore_workers.store import RunState, RunStore, target_state_part
from ragscore_workers.target.errors import TIME_LIMIT_ERROR
from ragscore_workers.target.stage import answer_chunk

from ..fakes import FakeRag
from ..fakes.fake_rag import questions
from ..support import ROOT, RedisProcess, WorkerProcess, short_limit_worker, until, write_jsonl
from ..unit.test_time_limit import soft_time_limit_in

pytestmark = pytest.mark.integration

#: Questions of the one chunk: asked one at a time, a second each, far more than its soft limit lets it ask.
N = 8
#: Seconds of the target soft time limit of the test's worker (tests/short_limit_worker.py; its app is never imported
#: here: it would shorten ours).
SOFT_S = 3


@contextmanager
def _target_and_scorer(tmp_path: Path) -> Iterator[RedisProcess]:
    """A Redis, a target worker of one thread with its soft limit of :data:`SOFT_S` and a cpu worker, stopped after."""
    server = RedisProcess(tmp_path / "redis").start()
    target = short_limit_worker(server.url, "target", tmp_path / "w", SOFT_S)
    scorer = WorkerProcess(server.url, "cpu", tmp_path / "w", concurrency=1).start()
    try:
        yield server
    finally:
        target.stop()
        scorer.stop()
        server.stop()


def _asked(rag: FakeRag, since: int = 0) -> list[str]:
    """The ids of the questions the fake was asked (from its ``since``-th request on), in order."""
    ids = {row["question"]: row["id"] for row in questions(N)}
    return [ids[r["body"]["question"]] for r in rag.requests[since:]]


@pytest.mark.serial  # timed: its first answer (a second) comes before its soft limit (3 s)
def test_a_target_chunk_past_its_soft_time_limit_stops_there_and_a_resume_asks_what_it_cut(tmp_path: Path) -> None:
    """A target task of a threads pool ran until its last question was answered, however long (16 questions of 600 s
    each, 8 at a time, ~1,200 s): past the broker's visibility timeout, it was delivered again while it still asked.
    It now stops at its soft limit, as a prefork pool stops it."""
    server = RedisProcess(tmp_path / "redis").start()
    target = short_limit_worker(server.url, "target", tmp_path / "w", SOFT_S)
    scorer = WorkerProcess(server.url, "cpu", tmp_path / "w", concurrency=1).start()
    try:
        with FakeRag(slow_s=1.0) as rag:
            suite: dict[str, Any] = {
                "metrics": ["verbatim"],
                "targets": [{"system": "slow", "url": rag.url("slow"), "concurrency": 1,
                             "request": {"question": "{question}"},
                             "response": {"contexts": "contexts[*].text", "citations": "citations"}}],
                "chunk_size": {"target": N},
            }  # fmt: skip
            store = connect(server.url)
            sub = submit(write_jsonl(tmp_path / "q.jsonl", questions(N)), load_suite(suite), store)
            first = wait(store, sub.run_id, timeout_s=300)
            keys = [f"slow::q{i}" for i in range(N)]
            # the call in flight at the cut answers after the task returned: stored then, over its time-limit error
            assert until(lambda: _answered(store, sub.run_id, keys) == set(_asked(rag)), 30), _asked(rag)
            stored = store.answers(sub.run_id, 0, keys)
            cut = {k.split("::")[1] for k, a in stored.items() if a.get("error") == TIME_LIMIT_ERROR}
            answered = _answered(store, sub.run_id, keys)
            errors = {raw.meta["id"]: raw.metrics["verbatim"]["error"] for raw in store.iter_raw_items(sub.run_id)}
            asked_first = _assert_asked_once(_asked(rag))

            rag.slow_s = 0.0  # the system is quick again: the resume's chunk ends well within its limit
            since = len(rag.requests)
            cmd = [sys.executable, "-m", "orchestrator.cli", "resume", sub.run_id, "--broker", server.url,
                   "--out", str(tmp_path / "out"), "--quiet"]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300,
                                  env={**os.environ, "RAGSCORE_HOME": str(tmp_path / "o")})  # fmt: skip
            asked_again = _assert_asked_once(_asked(rag, since))
    finally:
        target.stop()
        scorer.stop()
        server.stop()

    assert first.state == RunState.FINISHED
    assert cut and answered and cut | answered == {f"q{i}" for i in range(N)}, stored  # nothing else stored
    assert len(answered) <= SOFT_S, answered  # a second a question, one at a time: it stopped at its soft limit
    # a question not started by then was never asked; every one asked (the one in flight too) keeps its answer
    assert answered == asked_first, (asked_first, answered)
    assert {q: errors[q] for q in cut} == {q: f"no answer: {TIME_LIMIT_ERROR}" for q in cut}  # the run reports them
    scored = first.by_system["slow"]["verbatim"]  # the late answer: scored if it came before the shard's callback
    assert scored.n + scored.errors == N and len(answered) - 1 <= scored.n <= len(answered), scored
    # the resume asks those again, each once, not one answered (the late one is scored from its stored answer)
    assert done.returncode == 0, done.stderr[-3000:]
    assert asked_again == cut, (asked_again, cut)
    resumed = json.loads((tmp_path / "out" / "summary.json").read_text())["by_system"]["slow"]["verbatim"]
    assert (resumed["n"], resumed["errors"], resumed["mean"]) == (N, 0, 1.0), resumed


@pytest.mark.serial  # timed: the other delivery answers (in a second) before the worker's is cut (3 s)
def test_a_delivery_cut_by_its_time_limit_keeps_the_answers_an_overlapping_delivery_stored(tmp_path: Path) -> None:
    """Two deliveries of one chunk overlap where a message is sent again while the first still asks: each wrote
    its answers over the other's, so the one cut by its time limit stored the limit's error over the answers the
    other had stored, and the run scored them as errors (a resume asked, and paid for, them again)."""
    server = RedisProcess(tmp_path / "redis").start()
    target = short_limit_worker(server.url, "target", tmp_path / "w", SOFT_S)
    scorer = WorkerProcess(server.url, "cpu", tmp_path / "w", concurrency=1).start()
    try:
        with FakeRag(slow_s=1.0) as rag:
            config = {"system": "slow", "url": rag.url("slow"), "concurrency": 1, "cache": False,
                      "request": {"question": "{question}"},
                      "response": {"contexts": "contexts[*].text", "citations": "citations"}}  # fmt: skip
            suite = {"metrics": ["verbatim"], "targets": [config], "chunk_size": {"target": N}}
            store = connect(server.url)
            sub = submit(write_jsonl(tmp_path / "q.jsonl", questions(N)), load_suite(suite), store)
            assert until(lambda: len(rag.requests) > 0, 60)  # the worker's delivery read what was stored: nothing
            # the other delivery, through the workers' code (every question at once: all answered in a second)
            other = TargetConfig.model_validate({**config, "concurrency": N})
            answer_chunk(store, sub.run_id, 0, other, questions(N), deadline=time.monotonic() + 60)
            result = wait(store, sub.run_id, timeout_s=300)
    finally:
        target.stop()
        scorer.stop()
        server.stop()
    assert result.state == RunState.FINISHED
    scored = result.by_system["slow"]["verbatim"]
    assert (scored.n, scored.errors) == (N, 0), scored  # the worker's cut stored no error over an answer


@pytest.mark.serial  # timed: the first answer (at once) comes before the soft limit (3 s)
def test_a_late_answer_of_a_shard_scored_already_is_not_stored_and_a_resume_takes_it_from_the_cache(
    tmp_path: Path,
) -> None:
    """A call in flight at the cut whose answer came after its shard's callback had scored the shard was stored
    over its time limit's error: answers.jsonl held the answer while the report said "time limit" for it, until a
    resume. The late answer of a shard scored already is not stored (the two agree); the resume asks it again, from
    the reply cache (not paid for twice). Each answer's unfilled fields are counted once."""
    server = RedisProcess(tmp_path / "redis").start()
    target = short_limit_worker(server.url, "target", tmp_path / "w", SOFT_S)
    scorer = WorkerProcess(server.url, "cpu", tmp_path / "w", concurrency=1).start()
    keys = [f"exact::q{i}" for i in range(N)]
    try:
        with FakeRag() as rag:
            rag.hold, rag.hold_from = threading.Event(), 2  # the first question answered at once, the next held
            response = {"contexts": "contexts[*].text", "citations": "citations", "retrieved_doc_ids": "contexts[*].x"}
            suite = {"metrics": ["verbatim"], "chunk_size": {"target": N},
                     "targets": [{"system": "exact", "url": rag.url("exact"), "concurrency": 1,
                                  "request": {"question": "{question}"}, "response": response}]}  # fmt: skip
            store = connect(server.url)
            sub = submit(write_jsonl(tmp_path / "q.jsonl", questions(N)), load_suite(suite), store)
            first = wait(store, sub.run_id, timeout_s=300)  # its shard scored while the second call is held
            rag.hold.set()  # that call answers now, after its shard was scored
            target.stop()  # a warm stop: its process ends once that call has ended, and its answer's store with it
            stored = store.answers(sub.run_id, 0, keys)
            reported = _verbatim_errors(store, sub.run_id)
            unfilled = store.counters(sub.run_id, target_state_part("exact")).get("unfilled_retrieved_doc_ids")
            target = short_limit_worker(server.url, "target", tmp_path / "w", SOFT_S)
            resume(store, sub.run_id)
            resumed = wait(store, sub.run_id, timeout_s=300)
            unfilled_resumed = store.counters(sub.run_id, target_state_part("exact"))["unfilled_retrieved_doc_ids"]
            asked = [r["body"]["question"] for r in rag.requests]
    finally:
        target.stop()
        scorer.stop()
        server.stop()
    assert first.state == RunState.FINISHED
    assert reported == {"q0": None} | {f"q{i}": f"no answer: {TIME_LIMIT_ERROR}" for i in range(1, N)}, reported
    # answers.jsonl (the stored answers) and the report agree: the late answer was not stored over its error
    assert {k.split("::")[1] for k, a in stored.items() if "error" not in a} == {"q0"}, stored
    assert unfilled == 1, unfilled  # the one answer stored
    scored = resumed.by_system["exact"]["verbatim"]
    assert resumed.state == RunState.FINISHED and (scored.n, scored.errors) == (N, 0), scored
    assert len(asked) == len(set(asked)) == N, asked  # the late one's question asked once: the resume read the cache
    assert unfilled_resumed == N, unfilled_resumed  # each answer counted once


def _answered(store: RunStore, run_id: str, keys: list[str]) -> set[str]:
    """The ids of the questions of ``keys`` stored with an answer (not an error)."""
    return {k.split("::")[1] for k, a in store.answers(run_id, 0, keys).items() if "error" not in a}


def _assert_asked_once(asked: list[str]) -> set[str]:
    """The questions of ``asked``, each asked once."""
    assert len(asked) == len(set(asked)), asked
    return set(asked)


@pytest.mark.serial  # timed: its first answer (a second) comes before the limit (2.5 s)
@pytest.mark.parametrize("limit", ["deadline", "prefork soft limit"])
def test_a_chunk_cut_by_its_time_limit_keeps_what_it_stored_and_a_late_answer_replaces_its_error(
    store: RunStore, limit: str
) -> None:
    """Where the task's deadline passes (any pool), or a prefork pool raises the soft limit first, the chunk ends
    there the same way: what was answered kept, the rest the time limit's error. The call in flight then goes on in
    its thread after the task returned: its answer was lost (only cached, the row scored as an error and a resume
    needed for it). It is stored as it comes, over the time limit's error: every question asked keeps its answer,
    and the fields each answer left unfilled are counted (the late one's were not)."""
    run, keys = f"t-target-cut-{limit.split()[0]}", [f"slow::q{i}" for i in range(N)]
    deadline_s, soft_s = (2.5, 600) if limit == "deadline" else (600, 2.5)  # the one that ends it, 2.5 s in
    with FakeRag(slow_s=1.0) as rag, soft_time_limit_in(soft_s):
        config = TargetConfig(system="slow", url=rag.url("slow"), concurrency=1, request={"question": "{question}"},
                              response={"retrieved_doc_ids": "contexts[*].x"})  # fmt: skip  # unfilled in every reply
        counts = answer_chunk(store, run, 0, config, questions(N), deadline=time.monotonic() + deadline_s)
        at_cut = store.answers(run, 0, keys)
        assert until(lambda: not [t for t in threading.enumerate() if t.name.startswith("target")], 30)  # in flight
        asked = {r["body"]["question"] for r in rag.requests}
    stored = store.answers(run, 0, keys)
    answered = [k for k in keys if "error" not in stored[k]]
    assert counts == {"asked": N, "new": N} and 1 <= len(answered) < N, stored
    assert {k: stored[k]["error"] for k in keys if k not in answered} == dict.fromkeys(
        set(keys) - set(answered), TIME_LIMIT_ERROR
    )
    by_question = {q["question"]: f"slow::{q['id']}" for q in questions(N)}
    assert {by_question[q] for q in asked} == set(answered), (asked, answered)  # the late one too
    # the question in flight at the cut (it ends mid-call: a call a second, back to back) was not waited for
    assert len([k for k in answered if "error" in at_cut[k]]) == 1, at_cut
    unfilled = store.counters(run, target_state_part("slow"))["unfilled_retrieved_doc_ids"]
    assert unfilled == len(answered), (unfilled, answered)  # each answer once, the late one too


def test_a_resume_of_a_stored_max_seconds_per_question_past_the_tasks_time_limit_is_not_refused(
    redis_server: RedisProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume refused a stored ``max_seconds_per_question`` not below the visibility timeout, for its task would be
    delivered again while it still asked: a run submitted by an older ragscore could never be resumed (only a new
    run could change it). A target task now ends at its soft time limit, below the timeout, whatever its questions'
    bound: the resume sends its work, each question bounded by the time left to its task."""
    monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", "900")
    monkeypatch.delenv("RAGSCORE_ALLOW_SHORT_VISIBILITY_TIMEOUT", raising=False)
    suite = {"metrics": ["verbatim"], "target": {"url": "http://127.0.0.1:9/ask", "max_seconds_per_question": 1000}}
    store = connect(redis_server.url)
    sub = submit(write_jsonl(tmp_path / "q.jsonl", questions(2)), load_suite(suite), store)  # no worker: it waits
    generation = store.generation(sub.run_id)
    resume(store, sub.run_id)
    assert store.generation(sub.run_id) == generation + 1  # its work sent again


@pytest.mark.serial  # timed: its first answer (a second) comes before its deadline (1.5 s)
def test_a_late_answer_of_a_run_whose_answers_are_gone_is_not_stored(store: RunStore) -> None:
    """The answer of the call in flight at the cut comes after its task returned, once its run may have moved on: one
    whose answers are gone (expired, or released with its items) had them made again, holding that answer alone at
    the live TTL, and it counted done a second time. It replaces the time limit's error stored for it, nothing else."""
    run = "t-target-late-gone"
    store.create_run(run, {"state": "running"})
    with FakeRag(slow_s=1.0) as rag:
        config = TargetConfig(system="slow", url=rag.url("slow"), concurrency=1, request={"question": "{question}"})
        answer_chunk(store, run, 0, config, questions(N), deadline=time.monotonic() + 1.5)
        done = store.progress(run)["done"]
        store.r.delete(store.key(run, "answers:0"))  # before the call in flight ends (at 2 s)
        assert until(lambda: not [t for t in threading.enumerate() if t.name.startswith("target")], 30)
        assert len(rag.requests) == 2, rag.requests  # one answered in time, one in flight at the cut
    assert not store.r.exists(store.key(run, "answers:0")) and store.progress(run)["done"] == done


def test_a_late_answer_is_stored_over_an_error_alone_until_its_shard_of_this_generation_is_scored(
    store: RunStore,
) -> None:
    """A late answer said nothing of whether it was stored, so its unfilled fields could not be counted once: one the
    cut stored already is refused (0, not counted again). Once the shard's callback of the run's generation read the
    answers, a late one is refused too (the report holds its error); a resume's generation takes late answers again
    until its own callback."""
    run, error = "t-target-late-scored", {"row": {"id": "q0"}, "error": TIME_LIMIT_ERROR}
    store.create_run(run, {"state": "running", "generation": 0})
    answer = {"row": {"id": "q0", "answer": "yes"}, "cached": False}
    assert store.save_answers(run, 0, {"a": answer, "b": error}).new == 2
    assert not store.save_answers(run, 0, {"a": answer}, late=True).stored  # an answer stored already: not again
    store.mark_answers_scored(run, 0, generation=0)
    scored = store.key(run, "answers_scored")
    store.touch(run, 50)  # one of the run's keys: expires (and goes) with the others
    assert 0 < store.r.ttl(scored) <= 50, store.r.ttl(scored)
    assert not store.save_answers(run, 0, {"b": answer}, late=True).stored  # its shard scored: the error stays
    assert store.answers(run, 0, ["b"]) == {"b": error}
    store.r.hset(store.key(run, "meta"), "generation", 1)  # a resume: its answers are not scored yet
    assert store.save_answers(run, 0, {"b": answer}, late=True).stored == {"b"}
    assert store.answers(run, 0, ["b"]) == {"b": answer}


@pytest.mark.serial  # timed: its retries stop at the task's deadline, asserted within a margin
@pytest.mark.parametrize(("system", "status"), [("throttled", 429), ("dead", 500)])
def test_a_question_retried_past_its_tasks_deadline_ends_there_as_the_time_limit_and_frees_the_worker(
    tmp_path: Path, system: str, status: int
) -> None:
    """The target backoff's stop at its task's deadline had no test with a real worker: a target that answers 429 (or
    a 5xx) to every try is retried until the deadline, not past it; the question ends as the time limit's error (a
    resume asks it again), and the worker takes its next task."""
    server = RedisProcess(tmp_path / "redis").start()
    target = short_limit_worker(server.url, "target", tmp_path / "w", SOFT_S)
    scorer = WorkerProcess(server.url, "cpu", tmp_path / "w", concurrency=1).start()
    try:
        with FakeRag(retry_after_s=0.5, throttled_first=10**6) as rag:
            config = {"system": system, "url": rag.url(system), "concurrency": 1, "attempts": 20, "max_429s": 1000,
                      "request": {"question": "{question}"}}  # fmt: skip
            store = connect(server.url)
            sub = _submit_one_question(store, tmp_path / "q.jsonl", config)
            first = wait(store, sub.run_id, timeout_s=300)
            tried = [r["t"] for r in rag.requests if r["system"] == system]
            errors = _verbatim_errors(store, sub.run_id)
            # the worker is free: a run of a system that answers is answered and scored
            other = {"system": "exact", "url": rag.url("exact"), "request": {"question": "{question}"},
                     "response": {"contexts": "contexts[*].text", "citations": "citations"}}  # fmt: skip
            second = _submit_one_question(store, tmp_path / "q2.jsonl", other)
            answered = wait(store, second.run_id, timeout_s=300)
            tried_after = [r for r in rag.requests if r["system"] == system]
    finally:
        target.stop()
        scorer.stop()
        server.stop()
    assert first.state == RunState.FINISHED and errors == {"q0": f"no answer: {TIME_LIMIT_ERROR}"}, errors
    # retried, within the task's time (SOFT_S: a bound of the product, so with a margin); the fake answers 429/500 for
    # good, so a retry that went past the deadline would go on for minutes: no try after the task ended
    assert len(tried) > 1 and tried[-1] - tried[0] < SOFT_S + 1, tried
    assert len(tried_after) == len(tried), (tried, tried_after)
    assert answered.state == RunState.FINISHED and answered.by_system["exact"]["verbatim"].n == 1


def _submit_one_question(store: RunStore, path: Path, target: dict[str, Any]) -> Submitted:
    """Submit a run of ``target`` asked one question (written to ``path``), scored by ``verbatim``."""
    return submit(write_jsonl(path, questions(1)), load_suite({"metrics": ["verbatim"], "targets": [target]}), store)


def _verbatim_errors(store: RunStore, run_id: str) -> dict[str, str | None]:
    """Per question id, the error the run reports for its ``verbatim`` (None: scored)."""
    return {raw.meta["id"]: raw.metrics["verbatim"].get("error") for raw in store.iter_raw_items(run_id)}


def test_the_unfilled_fields_of_an_answer_two_overlapping_deliveries_stored_are_counted_once(store: RunStore) -> None:
    """Two deliveries of one chunk overlap where a message is sent again while the first still asks: each counted
    the fields its answers left unfilled, also where the store kept the other's answer (its own not stored), so a
    question's unfilled fields were counted twice. They are counted by the delivery whose answer was stored."""
    run = "t-target-unfilled-overlap"
    store.create_run(run, {"state": "running", "generation": 0})
    with FakeRag() as rag:
        rag.hold = threading.Event()  # both deliveries' calls held until every one of them is asked
        config = TargetConfig(system="exact", url=rag.url("exact"), concurrency=N, cache=False,
                              request={"question": "{question}"},
                              response={"retrieved_doc_ids": "contexts[*].x"})  # fmt: skip  # unfilled in every reply
        deliveries = [threading.Thread(target=answer_chunk, args=(store, run, 0, config, questions(N)),
                                       kwargs={"deadline": time.monotonic() + 120}) for _ in range(2)]  # fmt: skip
        for delivery in deliveries:
            delivery.start()
        assert until(lambda: len(rag.requests) == 2 * N, 60), rag.requests  # each asked every question
        rag.hold.set()
        for delivery in deliveries:
            delivery.join(120)
    assert not any(d.is_alive() for d in deliveries)
    keys = [f"exact::q{i}" for i in range(N)]
    assert _answered(store, run, keys) == {f"q{i}" for i in range(N)}
    unfilled = store.counters(run, target_state_part("exact"))["unfilled_retrieved_doc_ids"]
    assert unfilled == N, unfilled  # each stored answer once, not once per delivery (2 * N)


@pytest.mark.serial  # timed: its first chunk's calls start within that chunk's deadline (3 s)
def test_calls_a_chunks_cut_left_running_keep_their_places_of_concurrency_from_the_threads_next_chunk(
    store: RunStore,
) -> None:
    """A chunk cut by its deadline with its 2 calls (concurrency 2) held in flight by the target, then the same thread's
    next chunk (as a worker thread takes its next task): its questions wait for those calls to end, and the target is
    never asked more than 2 of this thread's questions at once; those waiting are the time limit's errors. Seen failing
    before: the next chunk asked 2 questions more beside the 2 still held (4 requests in flight)."""
    with FakeRag() as rag:
        rag.hold = held = threading.Event()  # every question is answered once the test says so: past both cuts
        config = TargetConfig(system="held", url=rag.url("held"), concurrency=2, request={"question": "{question}"})
        try:
            for chunk, deadline_s in enumerate((3.0, 1.5)):
                rows = [q | {"id": f"c{chunk}{q['id']}"} for q in questions(2)]
                answer_chunk(store, "t-target-places", chunk, config, rows, deadline=time.monotonic() + deadline_s)
                keys = [f"held::{r['id']}" for r in rows]
                errors = {a.get("error") for a in store.answers("t-target-places", chunk, keys).values()}
                assert errors == {TIME_LIMIT_ERROR}, (chunk, errors)
                assert len(rag.requests) == 2, (chunk, rag.requests)  # the first chunk's, held: still in flight
        finally:
            held.set()


@pytest.mark.serial  # timed: the first chunk's questions are asked within its soft limit (3 s)
def test_a_target_workers_thread_asks_no_more_than_its_concurrency_though_a_cut_left_questions_in_flight(
    tmp_path: Path,
) -> None:
    """A real target worker of one thread, two chunks of 2 questions each (concurrency 2), the fake target holding every
    question: the first chunk's cut leaves its 2 in flight, and the thread's next chunk asks none beside them (the
    target never sees more than 2 at once); its questions store the time limit's error. Seen failing before: the next
    chunk asked its 2 beside the 2 held, 4 in flight."""
    with _target_and_scorer(tmp_path) as server, FakeRag() as rag:
        rag.hold = held = threading.Event()  # every question is answered once the test says so: past both cuts
        suite: dict[str, Any] = {
            "metrics": ["verbatim"],
            "targets": [{"system": "held", "url": rag.url("held"), "concurrency": 2, "cache": False,
                         "request": {"question": "{question}"},
                         "response": {"contexts": "contexts[*].text", "citations": "citations"}}],
            "chunk_size": {"target": 2},
        }  # fmt: skip
        store = connect(server.url)
        try:
            sub = submit(write_jsonl(tmp_path / "q.jsonl", questions(4)), load_suite(suite), store)
            keys = [f"held::q{i}" for i in range(4)]  # one shard, its two target chunks

            def cut() -> bool:
                answers = store.answers(sub.run_id, 0, keys).values()
                return len(answers) == 4 and all(a.get("error") == TIME_LIMIT_ERROR for a in answers)

            assert until(cut, 120), store.answers(sub.run_id, 0, keys)
            assert len(rag.requests) == 2, rag.requests  # the first chunk's, held: nothing asked beside them
        finally:
            held.set()
        assert wait(store, sub.run_id, timeout_s=300).state == RunState.FINISHED
