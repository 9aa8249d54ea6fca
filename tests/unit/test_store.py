"""The run store on a real Redis: idempotent writes, exact counters, items back in input order."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from ragscore_workers.providers.run_state import RunJudgeState, breaker_summary, replaced_stops
from ragscore_workers.schemas import MetricResult, Row
from ragscore_workers.store import (
    JUDGE_LIMITERS_PART,
    RUNS_INDEX,
    RunStore,
    errors_of,
    eviction_problem,
    redis_client,
    work_began,
)

from ..support import RedisProcess, until


def _write(store: RunStore, run: str, key: str, **results: MetricResult) -> int:
    return store.write_results(run, "cpu", [(key, {"id": key, "group": "g"}, results)])


def _store_clock(store: RunStore) -> float:
    """The store's clock (Redis ``TIME``), in seconds: what ``work_ms`` is measured on."""
    seconds, micros = store.r.time()
    return seconds + micros / 1e6


def test_rewriting_the_same_results_is_idempotent(store: RunStore) -> None:
    run = "t-idem"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["a", "b"], {"cpu": 4})
    ok, null = MetricResult(score=1.0), MetricResult.unscorable("no reference")
    assert _write(store, run, "a", m=ok, n=null) == 2
    progress_at = int(store.meta(run)["progress_at"])  # the store's clock when work was last done
    assert abs(progress_at - time.time()) < 5
    store.set_meta(run, progress_at=0)
    assert _write(store, run, "a", m=ok, n=null) == 0  # a redelivered task rewrites, counts nothing
    assert store.meta(run)["progress_at"] == "0"  # and is no progress
    assert store.progress(run) == {"done": 2, "done:cpu": 2, "unscorable": 1, "total": 4, "total:cpu": 4}
    store.set_meta(run, n_shards=1)
    items = list(store.iter_items(run))
    assert [i.id for i in items] == ["a", "b"]
    assert items[0].metrics["m"].score == 1.0 and items[0].group == "g"
    assert items[1].metrics == {}  # not scored yet: present, empty


def test_a_retried_error_that_now_succeeds_moves_the_counters(store: RunStore) -> None:
    run = "t-retry"
    assert _write(store, run, "a", m=MetricResult.failed("timeout")) == 1
    assert store.progress(run)["errors"] == 1
    assert not store.r.exists(store.key(run, "meta"))  # no run of that id: no meta hash made up (it has no TTL)
    assert _write(store, run, "a", m=MetricResult(score=0.5)) == 0
    assert store.progress(run) == {"done": 1, "done:cpu": 1, "errors": 0}


def test_an_answer_is_progress_and_a_failed_one_a_resume_marks_is_done_again_once(store: RunStore) -> None:
    """A target stage's answers did not stamp ``progress_at``: `ragscore status` said "no progress" while a slow
    target answered. A resume's marks on failed answers (``redo:target``) are taken by their next write alone."""
    run = "t-answers"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["s::a", "s::b", "s::c"], {"target": 3})
    failed = {"row": {"id": "a", "system": "s"}, "error": "HTTP 503"}
    assert store.save_answers(run, 0, {"s::a": failed, "s::b": failed}).new == 2
    assert abs(int(store.meta(run)["progress_at"]) - time.time()) < 5
    store.set_meta(run, progress_at=0)
    assert store.mark_answer_redo(run, 0, ["s::a", "s::b", "s::c"]) == 2  # s::c has no answer: never counted
    assert store.mark_answer_redo(run, 0, ["s::a"]) == 0  # marked once
    assert store.progress(run)["done:target"] == store.progress(run)["done"] == 0
    good = {"row": {"id": "a", "system": "s", "answer": "yes"}}
    assert store.save_answers(run, 0, {"s::a": good}).new == 0  # asked again: nothing new, its mark taken
    assert store.meta(run)["progress_at"] != "0"
    assert store.save_answers(run, 0, {"s::a": good, "s::c": good}).new == 1  # a stray copy takes nothing
    assert store.progress(run) == {"done": 2, "done:target": 2, "total": 3, "total:target": 3}
    assert store.save_answers(run, 0, {"s::b": failed}).new == 0  # failed again: asked, so done
    assert store.progress(run)["done"] == 3 and store.mark_answer_redo(run, 0, ["s::a"]) == 0  # a is answered


def test_a_stored_answer_is_never_replaced_by_an_error_nor_another_answer(store: RunStore) -> None:
    """Two deliveries of one target chunk may overlap (one sent again while the first still asks, a call answering
    after its task's deadline): each write replaced the stored answer, so one delivery's error (the time limit's, a
    transport error) replaced the other's real answer, and the row was scored as an error or asked again (paid
    twice). An answer replaces an error; an error never replaces an answer; of two answers the first is kept."""
    run = "t-answer-rule"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["s::a", "s::b"], {"target": 2})
    first, second = ({"row": {"id": "a", "system": "s", "answer": say}} for say in ("first", "second"))
    cut, down = ({"row": {"id": "a", "system": "s"}, "error": why} for why in ("time limit", "HTTP 503"))
    assert store.save_answers(run, 0, {"s::a": cut, "s::b": first}).new == 2
    assert store.save_answers(run, 0, {"s::a": down}).new == 0  # an error replaces an error
    assert store.answers(run, 0, ["s::a"]) == {"s::a": down}
    assert store.mark_answer_redo(run, 0, ["s::a"]) == 1
    saved = store.save_answers(run, 0, {"s::a": first, "s::b": down})
    assert saved == (0, {"s::a"}), saved  # an answer replaces an error; not b's (stored: not a's, which replaced one)
    saved = store.save_answers(run, 0, {"s::a": cut, "s::b": second})
    assert saved == (0, frozenset()), saved  # an error, another answer: kept (none stored)
    assert store.answers(run, 0, ["s::a", "s::b"]) == {"s::a": first, "s::b": first}
    assert store.progress(run) == {"done": 2, "done:target": 2, "total": 2, "total:target": 2}  # a's mark taken once


def test_a_late_answer_replaces_a_stored_error_alone_keeping_the_answers_ttl(store: RunStore) -> None:
    """An answer that came after its task had returned (stored from the call's thread) could write to a run whose
    answers were gone (expired, or released with its items): the hash made again with that one answer at the live
    TTL, and the answer counted done a second time. It replaces a stored error alone, the hash's TTL as it was."""
    run = "t-late-answer"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["s::a", "s::b"], {"target": 2})
    answer = {"row": {"id": "a", "system": "s", "answer": "late"}}
    cut = {"row": {"id": "a", "system": "s"}, "error": "time limit"}
    assert store.save_answers(run, 0, {"s::a": cut}).new == 1
    name = store.key(run, "answers:0")
    store.r.expire(name, 100)  # a released run's
    saved = store.save_answers(run, 0, {"s::a": answer, "s::b": answer}, late=True)
    assert saved == (0, {"s::a"}), saved  # nothing new (a's error counted it), a stored over its error, not b
    assert store.answers(run, 0, ["s::a", "s::b"]) == {"s::a": answer} and store.r.ttl(name) <= 100
    store.r.delete(name)  # its answers gone
    assert store.save_answers(run, 0, {"s::a": answer}, late=True) == (0, frozenset())
    assert not store.r.exists(name) and store.progress(run)["done"] == 1


def test_progress_counts_the_judge_calls_of_a_run_that_sent_one(store: RunStore) -> None:
    """The live progress line of a judge run shows its calls (its items end seldom): read with the counters."""
    from ragscore_workers.providers import RunJudgeState

    run = "t-judge-calls"
    store.add_ids(run, 0, ["a", "b"], {"judge": 2})
    assert store.progress(run) == {"total": 2, "total:judge": 2}  # none sent yet
    judge = RunJudgeState(store.r, run, ttl_s=60)
    judge.incr(calls=3, retries=1)
    judge.incr(calls=1, rate_limited=1)  # a 429 is a call sent
    assert store.progress(run) == {"total": 2, "total:judge": 2, "judge_calls": 4}


def test_progress_gives_the_judges_rpm_in_force_the_suites_or_a_lower_one_the_provider_stated(store: RunStore) -> None:
    """The views' ETA floor (:func:`orchestrator.floors.judge_floor_s`) reads the judge's rpm in force."""
    run = "t-judge-rpm"
    store.add_ids(run, 0, ["a"], {"judge": 1})
    store.create_run(run, {"suite": json.dumps({"judge": {"rpm": 120, "pace": "even"}})})
    assert store.progress(run) == {"total": 1, "total:judge": 1, "judge_rpm": 120, "judge_pace_even": 1}
    RunJudgeState(store.r, run, ttl_s=60).note("provider_rpm", 45)
    assert store.progress(run)["judge_rpm"] == 45
    store.set_meta(run, judge_calls_planned=2)  # what submit stores: the judge calls the dry run counts for the run
    assert store.progress(run)["judge_calls_planned"] == 2


def test_progress_gives_the_judges_max_in_flight_and_the_time_its_calls_took(store: RunStore) -> None:
    """The views' ETA floor under ``judge.max_in_flight`` (:func:`orchestrator.floors.judge_floor_s`) reads the cap,
    the caps (one per judge limiter the run's clients named) and the calls' time; without a cap neither the cap nor the
    time, and the judge limiters only where there are several (the rpm floor shares the calls left among them)."""
    run = "t-judge-in-flight"
    store.add_ids(run, 0, ["a"], {"judge": 1})
    store.create_run(run, {"suite": json.dumps({"judge": {"rpm": None, "max_in_flight": 2}})})
    judge = RunJudgeState(store.r, run, ttl_s=60, limiter="groq/m with the key in A")
    judge.note_limiter("groq:m:a")
    judge.incr(calls=2, call_ms=6_000)
    assert store.progress(run) == {"total": 1, "total:judge": 1, "judge_calls": 2, "judge_max_in_flight": 2,
                                   "judge_call_ms": 6_000, "judge_limiters": 1}  # fmt: skip
    RunJudgeState(store.r, run, ttl_s=60, limiter="groq/m with the key in B").note_limiter("groq:m:b")
    assert store.progress(run)["judge_limiters"] == 2
    store.set_meta(run, suite=json.dumps({"judge": {"rpm": None}}))
    assert not {"judge_max_in_flight", "judge_call_ms"} & store.progress(run).keys()
    assert store.progress(run)["judge_limiters"] == 2
    store.r.hdel(store.key(run, JUDGE_LIMITERS_PART), "groq:m:b")
    assert "judge_limiters" not in store.progress(run)


def test_a_resume_keeps_the_time_the_judge_calls_took_with_their_count(store: RunStore) -> None:
    """A resume clears the judge's bookkeeping but keeps its counters: ``call_ms`` with ``calls``, which the live ETA's
    floor under ``judge.max_in_flight`` divides it by. Seen failing before: a resume dropped it, and the resumed run's
    mean call time read near 0 s (no floor) until its new calls outweighed the old."""
    from orchestrator.runner import reset_breakers
    from orchestrator.suite import load_suite

    run = "t-resume-call-ms"
    RunJudgeState(store.r, run, ttl_s=60).incr(calls=2, call_ms=6_000)
    store.r.hset(store.key(run, "judge"), "consecutive_failures", 2)
    suite = load_suite({"name": "s", "metrics": ["answer_accuracy"], "judge": {"provider": "openai", "model": "m"}})
    reset_breakers(store, run, suite)
    judge = store.counters(run, "judge")
    assert (judge["calls"], judge["call_ms"]) == (2, 6_000) and "consecutive_failures" not in judge


def test_progress_gives_the_rpm_of_a_lone_target_and_none_of_several(store: RunStore) -> None:
    """``target_calls`` counts the calls to all of a run's targets together: only a lone target's rpm floors an ETA."""
    run = "t-target-rpm"
    store.add_ids(run, 0, ["a"], {"target": 1})
    one = {"url": "http://127.0.0.1:1/ask", "rpm": 60, "pace": "even"}
    store.create_run(run, {"suite": json.dumps({"target": one})})
    assert store.progress(run) == {"total": 1, "total:target": 1, "target_rpm": 60, "target_pace_even": 1}
    store.set_meta(run, suite=json.dumps({"targets": [one | {"system": "a"}, one | {"system": "b"}]}))
    assert "target_rpm" not in store.progress(run)


def test_finalize_is_claimed_exactly_once_after_every_shard(store: RunStore) -> None:
    run = "t-final"
    store.create_run(run, {"state": "running"})
    store.mark_shard_done(run, 0)
    assert not store.claim_finalize(run)  # n_shards unknown: still submitting
    store.set_meta(run, n_shards=2)
    assert not store.claim_finalize(run)
    store.mark_shard_done(run, 1)
    store.mark_shard_done(run, 1)  # a redelivered callback
    assert store.claim_finalize(run)
    assert not store.claim_finalize(run)


def test_a_lease_is_renewed_and_released_only_by_its_owner(store: RunStore) -> None:
    """An aggregation renewed its lease with a plain EXPIRE: one that had lapsed and another aggregator took since
    was renewed for that other one, as if still its own."""
    lease = store.key("t-lease", "aggregating:0")
    assert store.take_lease(lease, "a", 60) and store.take_lease(lease, "a", 60)  # its own, left held: taken over
    assert not store.take_lease(lease, "b", 60)
    assert store.renew_lease(lease, "a", 90) and 60 < store.r.ttl(lease) <= 90
    store.release_lease(lease, "b")
    assert store.r.get(lease) == "a"  # not b's to release
    store.r.set(lease, "b", ex=30)  # a lapsed, b took it
    assert not store.renew_lease(lease, "a", 90) and store.r.ttl(lease) <= 30
    store.release_lease(lease, "a")
    assert store.r.get(lease) == "b"
    store.release_lease(lease, "b")
    assert not store.r.exists(lease) and not store.renew_lease(lease, "a", 90)  # lapsed: nothing renewed
    assert not store.r.exists(lease)


def test_failed_rows_are_kept(store: RunStore) -> None:
    run = "t-failed"
    store.add_failed_rows(run, [{"line": 3, "error": "invalid JSON", "raw": "{"}])
    assert list(store.failed_rows(run)) == [{"line": 3, "error": "invalid JSON", "raw": "{"}]


def test_many_threads_share_one_client_without_running_out_of_connections(redis_server) -> None:  # type: ignore[no-untyped-def]
    """A judge worker runs 32 tasks x 8 threads on one store client: more than redis-py's default pool."""
    import threading

    from ragscore_workers.store import redis_client

    client = redis_client(redis_server.url)
    errors: list[BaseException] = []
    start = threading.Barrier(300)

    def hit() -> None:
        try:
            start.wait()
            client.blpop(["ragscore:test:never"], timeout=0.3)  # holds its connection for a moment
        except BaseException as exc:  # noqa: BLE001 - collect anything for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=hit) for _ in range(300)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_state_written_to_a_run_no_longer_in_the_store_leaves_no_key(store: RunStore) -> None:
    """A Redis that lost a run (restarted without persistence): cancelling it, or a late worker failing it,
    wrote a lone ``state`` field with no TTL, kept forever."""
    assert store.set_state("gone", "cancelled") == ""
    assert store.set_state("gone", "failed", error="x") == ""
    assert not store.r.exists(store.key("gone", "meta"))
    store.create_run("new", {"n_rows": 1})
    assert store.set_state("new", "running") == "running"


def test_a_result_json_cannot_hold_is_stored_as_that_items_error(store: RunStore) -> None:
    """A plug-in's numpy number in ``details`` (an ML team's cosine similarity) failed the store's write of the whole
    chunk: the chord never completed and the run sat at 0% for ever, re-submitted after every stall."""
    import numpy as np

    run = "t-json"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["a", "b", "c"], {"cpu": 3})
    results = [("a", MetricResult(score=0.5, details={"sim": 0.5})),
               ("b", MetricResult(score=0.5, details={"sim": np.float32(0.5)})),
               ("c", MetricResult(score=1.0, details={"quoted": "x\udfff"}))]  # fmt: skip
    assert store.write_results(run, "cpu", [(key, {"id": key}, {"m": r}) for key, r in results]) == 3
    assert store.progress(run) == {"done": 3, "done:cpu": 3, "errors": 1, "total": 3, "total:cpu": 3}
    store.set_meta(run, n_shards=1)
    a, b, c = (item.metrics["m"] for item in store.iter_items(run))
    assert a.score == 0.5 and a.error is None
    assert b.score is None and b.error is not None and "numpy.float32" in b.error and "float(x)" in b.error
    assert c.score == 1.0 and c.details == {"quoted": "x\ufffd"}  # a lone surrogate is mended, no error


def test_runs_are_listed_from_their_index_not_by_scanning_every_key(tmp_path: Path) -> None:
    """``status`` without an id scanned the whole keyspace: a store of millions of items for a list of a few runs. A
    store written before the index existed (runs with meta only) is scanned once, to build it."""
    server = RedisProcess(tmp_path).start()
    try:
        store = RunStore(redis_client(server.url), ttl_s=3600)
        for run in ("old-a", "old-b"):  # as an earlier version wrote them: no index entry
            store.r.hset(store.key(run, "meta"), mapping={"state": "finished", "created_at": "100"})
        store.r.mset({store.key("old-a", f"item:{i}"): "{}" for i in range(2000)})
        store.create_run("new", {"state": "running"})  # the first run of the new version, before any listing
        assert store.list_runs() == ["new", "old-a", "old-b"]
        scans = _calls(store, "scan")
        assert store.list_runs() == ["new", "old-a", "old-b"]
        assert _calls(store, "scan") == scans, "the index is read, no key scanned"
        store.r.delete(store.key("old-b", "meta"))  # expired
        assert store.list_runs() == ["new", "old-a"]
        assert store.r.zrange(RUNS_INDEX, 0, -1) == ["old-a", "new"], "gone runs leave the index; by creation time"
        first = store.r.zscore(RUNS_INDEX, "new")
        time.sleep(0.01)
        store.create_run("new", {"state": "submitting"})  # a resume keeps its place
        assert store.r.zscore(RUNS_INDEX, "new") == first and store.list_runs() == ["new", "old-a"]
    finally:
        server.stop()


def _calls(store: RunStore, command: str) -> int:
    return int(store.r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_derived_result_json_cannot_hold_is_the_same_error_in_the_summary_as_in_the_items(
    store: RunStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The aggregation stored such a derived result as the item's error but averaged it as a score: the
    summary said n=2, no errors, while every item of items.jsonl held an error."""
    import importlib

    from ragscore_workers.metrics import registry
    from ragscore_workers.schemas import Suite

    monkeypatch.setattr(registry, "_REGISTRY", registry.all_metrics())  # the plug-in's metric leaves with the test
    importlib.reload(importlib.import_module("tests.plugins.numpy_details"))
    from ragscore_workers.tasks import aggregate_in

    run = "t-derived-json"
    suite = Suite.model_validate({"metrics": ["exact_match", "numpy_details_derived"]})
    store.create_run(run, {"state": "running", "suite": suite.model_dump_json(), "items": 2})
    store.add_ids(run, 0, ["a", "b"], {"cpu": 2})
    _write(store, run, "a", exact_match=MetricResult(score=1.0))
    _write(store, run, "b", exact_match=MetricResult(score=1.0))
    store.set_meta(run, n_shards=1)
    aggregate_in(store, run)
    stored = [item.metrics["numpy_details_derived"] for item in store.iter_items(run)]
    assert all(r.score is None and "numpy.int64" in (r.error or "") for r in stored)
    summary = store.summary(run).metrics["numpy_details_derived"]
    assert summary.errors == 2 and summary.n == 0 and summary.mean is None


def test_a_plugin_import_error_quoting_a_key_stays_out_of_the_aggregations_worker_log(
    store: RunStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The ConfigError said the key as ***, but it chained the plug-in's own exception: the aggregation's
    log.exception (and Celery's log of the task it re-raises from) printed that cause, the key in full."""
    import traceback

    from ragscore_workers.errors import ConfigError
    from ragscore_workers.schemas import Suite
    from ragscore_workers.tasks import aggregate_in

    key = "acme-live-7f3a9c21"
    monkeypatch.setenv("ACME_API_KEY", key)
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.leaky_import")
    run = "t-leaky-aggregate"
    store.create_run(run, {"state": "running", "suite": Suite(metrics=["exact_match"]).model_dump_json(), "items": 1})
    store.add_ids(run, 0, ["a"], {"cpu": 1})
    _write(store, run, "a", exact_match=MetricResult(score=1.0))
    store.set_meta(run, n_shards=1)
    caplog.set_level("ERROR", logger="ragscore_workers.tasks")
    with pytest.raises(ConfigError) as caught:
        aggregate_in(store, run)
    assert "aggregate failed for run t-leaky-aggregate" in caplog.text and "key=***" in caplog.text
    assert key not in caplog.text, "the worker log"
    assert key not in "".join(traceback.format_exception(caught.value)), "Celery logs the task's traceback"
    assert key not in (store.meta(run).get("error") or "")


def test_a_resumes_marks_made_after_its_work_began_do_not_hide_the_attempts_units(store: RunStore) -> None:
    """A resume marks what it sends again shard by shard, a shard's tasks sent after its marks: a worker took shard
    0's task, stamping the attempt's start (:meth:`RunStore.work_began`) with only its marks counted, and every
    later mark lowered ``done`` below the stamp's. 50 of 100 stored errors redone in ~1 s read 0 units (rate 0/s,
    no ETA) while 90 were marked after the stamp. The attempt's units are what was written since its stamp, when
    the marks were made."""
    from orchestrator.progress import _Rate
    from orchestrator.reports.live import StatusView, sample

    run, keys = "t-redo-rate", [f"k{i}" for i in range(100)]
    store.create_run(run, {"state": "running", "generation": 0, "submitted_at": str(time.time())})
    store.add_ids(run, 0, keys, {"cpu": 120})
    store.work_began(run, 0)
    for key in keys:
        _write(store, run, key, m=MetricResult.failed("timeout"))
    progress = store.progress(run)
    assert progress["done"] - progress.get("before:done", 0) == 100  # a first attempt: its units, no more
    stored = [(store.key(run, f"item:{k}"), "m", "cpu") for k in keys]
    store.set_meta(run, generation=1)  # resumed
    store.reset_redo(run)
    assert store.mark_redo(run, [(k, "m", "cpu") for k in keys[:10]]) == 10  # shard 0
    assert store.r.hget(store.key(run, "redo"), stored[0][0] + "|m") == "cpu"
    _write(store, run, "k0", m=MetricResult(score=1.0))  # a task of the earlier attempt: before this one's work
    started = _store_clock(store)  # this attempt's work time is at most what passes from here to its progress read
    store.work_began(run, 1)  # a worker took shard 0's task
    assert store.mark_redo(run, [(k, "m", "cpu") for k in keys[10:]]) == 90  # the later shards
    assert store.progress(run)["done"] - store.progress(run)["before:done"] == 0
    time.sleep(1.0)
    for key in keys[1:51]:  # 50 outputs written again in this attempt
        _write(store, run, key, m=MetricResult(score=1.0))
    for key in ["x0", "x1"]:  # and 2 new ones
        _write(store, run, key, m=MetricResult(score=1.0))
    progress = store.progress(run)
    elapsed = _store_clock(store) - started  # on the store's clock, as work_ms (the host's may step apart from it)
    assert progress["done"] == 100 - 100 + 1 + 50 + 2  # what is done now: k0, the 50 written again, 2 new
    for counter in ("done", "done:cpu"):
        assert progress[counter] - progress[f"before:{counter}"] == 52, progress
    assert not any(k.startswith("marked") for k in progress)
    work_s = progress["work_ms"] / 1000
    assert 1.0 <= work_s <= elapsed + 0.001, (work_s, elapsed)  # ms rounded
    rate, eta, _ = _Rate().measure(progress)
    assert rate == pytest.approx(52 / work_s) and eta is not None
    view = StatusView(store.meta(run))
    view.add(last := sample(store, run, time.time()))
    cpu = next(row for row in view.rows() if row["queue"] == "cpu")
    # over the attempt's time to this sample (the store's clock), not to the read above: a loaded machine may
    # sample it a tenth of a second later
    began = work_began(view.meta)
    assert began is not None and last.store_t is not None
    assert cpu["rate"] == pytest.approx(52 / (last.store_t - began.at), rel=0.01) and cpu["eta"] is not None
    # A resume with nothing to redo: its units are its writes alone.
    store.set_meta(run, generation=2)
    store.reset_redo(run)
    store.work_began(run, 2)
    _write(store, run, "x2", m=MetricResult(score=1.0))
    progress = store.progress(run)
    assert progress["done"] - progress["before:done"] == 1 and progress["done:cpu"] - progress["before:done:cpu"] == 1
    # A stamp of a worker before ``marked`` was counted is read as it was: done less redo then.
    store.set_meta(run, work_began_before='{"done": 40, "done:cpu": 40, "redo": 5, "redo:cpu": 5}')
    assert {k: v for k, v in store.progress(run).items() if k.startswith("before:")} == {
        "before:done": 35, "before:done:cpu": 35
    }  # fmt: skip
    # A target's failed answers, marked before and after the stamp, asked again: 2 units of the attempt.
    run = "t-redo-rate-answers"
    store.create_run(run, {"state": "running", "generation": 0})
    store.add_ids(run, 0, ["s::a", "s::b"], {"target": 2})
    failed, good = {"row": {"id": "a", "system": "s"}, "error": "HTTP 503"}, {"row": {"id": "a", "system": "s"}}
    store.save_answers(run, 0, {"s::a": failed, "s::b": failed})
    store.set_meta(run, generation=1)
    store.reset_redo(run)
    assert store.mark_answer_redo(run, 0, ["s::a"]) == 1
    store.work_began(run, 1)
    assert store.mark_answer_redo(run, 0, ["s::b"]) == 1
    assert store.save_answers(run, 0, {"s::a": good, "s::b": good}).new == 0
    progress = store.progress(run)
    assert progress["done:target"] - progress["before:done:target"] == 2 == progress["done"] - progress["before:done"]


def test_judge_outputs_scored_before_their_chunk_is_written_are_done_once(store: RunStore) -> None:
    """A judge chunk marks each item as it is scored (:meth:`RunStore.mark_scored`): progress counts it at once, and
    the chunk's write takes the marks, so nothing is counted twice: not on a rewrite, a redelivery, or a resume."""
    run, ok, failed = "t-scored", MetricResult(score=1.0), MetricResult.failed("HTTP 500")
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["a", "b", "c"], {"judge": 6})

    def write(key: str, **results: MetricResult) -> int:
        return store.write_results(run, "judge", [(key, {"id": key}, results)])

    def done() -> tuple[int, int]:
        counters = store.progress(run)
        return counters.get("done", 0), counters.get("done:judge", 0)

    assert store.mark_scored(run, "judge", "a", ["m", "n"]) == 2
    assert store.mark_scored(run, "judge", "a", ["m", "n"]) == 0  # a second delivery scoring it: marked once
    assert done() == (2, 2)
    assert write("a", m=ok, n=ok) == 2 and done() == (2, 2)  # the write counts them and takes their marks
    assert store.r.hlen(store.key(run, "unwritten:judge")) == 0
    assert store.mark_scored(run, "judge", "a", ["m"]) == 0 and done() == (2, 2)  # stored: done already
    assert store.mark_scored(run, "judge", "b", ["m", "n"]) == 2  # and the chunk dies before its write
    assert done() == (4, 4)
    assert write("b", m=ok, n=failed) == 2 and done() == (4, 4)  # its redelivery writes: taken, counted once
    assert store.mark_scored(run, "judge", "b", ["n"]) == 0  # an error counted done: not marked again
    assert store.mark_redo(run, [("b", "n", "judge")]) == 1
    assert done() == (3, 3)  # a resume sends it again: not done
    assert store.mark_scored(run, "judge", "b", ["n"]) == 1 and done() == (4, 4)  # scored again, not written
    assert write("b", n=ok) == 0 and done() == (4, 4)  # written: its redo mark and its unwritten mark taken
    assert store.progress(run)["errors"] == 0
    assert store.mark_scored(run, "judge", "c", ["m"]) == 1 and done() == (5, 5)
    assert store.overview([run])[0]["done"] == 5
    store.reset_redo(run)  # a resume: what chunks that died had marked is not done
    assert done() == (4, 4)
    assert store.mark_scored(run, "judge", "c", ["m"]) == 1
    store.set_meta(run, state="cancelled")  # an ended run: marks of chunks that never wrote are not done
    assert done() == (4, 4) and store.overview([run])[0]["done"] == 4
    assert store.mark_scored(run, "cpu", "c", ["n"]) == 0  # a queue whose chunks write at once marks nothing


def test_the_items_written_done_of_a_held_chunk_are_those_whose_outputs_are_written(store: RunStore) -> None:
    """:meth:`RunStore.written_done` (the held work a killed worker's chunk no longer owes) counts an item only where
    each of its outputs is stored and not sent again by a resume; one only marked scored is not (its worker lost it)."""
    run, ok = "t-counted", MetricResult(score=1.0)
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["a", "b", "c", "d", "e", "f"], {"cpu": 8, "judge": 4})
    _write(store, run, "a", m=ok, n=ok)
    _write(store, run, "b", m=ok)  # n not scored yet
    _write(store, run, "c", m=ok, n=MetricResult.failed("x"))
    assert store.mark_redo(run, [("c", "n", "cpu")]) == 1  # a resume sends it again: not done
    assert store.written_done(run, ["a", "b", "c", "d"], ["m", "n"]) == 1
    assert store.written_done(run, ["a", "b"], ["m"]) == 2
    store.write_results(run, "judge", [("e", {"id": "e"}, {"m": ok, "n": ok})])
    assert store.mark_scored(run, "judge", "f", ["m", "n"]) == 2
    assert store.written_done(run, ["e", "f", "d"], ["m", "n"]) == 1  # f marked scored, not written


def test_a_judge_chunk_marks_its_rows_only_once_it_has_run_a_while(store: RunStore) -> None:
    """A chunk that ends within MARK_ROWS_AFTER_S (a re-run's cached replies) is counted by its write alone: a round
    trip per row per metric (+7-40 % a cached row) bought no progress a user could see."""
    from ragscore_workers.tasks import MARK_ROWS_AFTER_S, _marks_once_slow

    run = "t-marks-once-slow"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["a", "b"], {"judge": 2})
    scored = _marks_once_slow(store, run, "judge")
    scored(Row(id="a"), ["m"])
    assert store.r.hlen(store.key(run, "unwritten:judge")) == 0  # a fast chunk: no mark
    time.sleep(MARK_ROWS_AFTER_S + 0.1)  # past the bound, not at it
    scored(Row(id="b"), ["m"])
    assert store.r.hlen(store.key(run, "unwritten:judge")) == 1 and store.progress(run)["done"] == 1


def test_a_derived_error_rewritten_in_a_run_counted_before_errors_derived_reads_neither_stale_nor_negative(
    store: RunStore,
) -> None:
    """A run stored before ``errors:derived`` (its derived errors in ``errors`` alone) and resumed after: the
    aggregation's rewrite of a derived error as a score took one off ``errors:derived`` (-1), and the views added the
    error gone back (``errors 1`` over nothing that errs). A worker of the version before in the same cluster (a
    rolling upgrade) takes a derived error off ``errors`` alone: the views read ``errors -1``."""
    run = "t-derived-old"
    store.create_run(run, {"state": "aggregating"})
    store.add_ids(run, 0, ["a"], {"cpu": 1, "derived": 1})
    _write(store, run, "a", m=MetricResult(score=1.0))
    store.write_results(run, "derived", [("a", {"id": "a"}, {"combined": MetricResult.failed("no judge")})])
    store.r.hdel(store.key(run, "progress"), "errors:derived")  # as the write script before it counted
    store.write_results(run, "derived", [("a", {"id": "a"}, {"combined": MetricResult(score=0.5)})])
    assert store.progress(run)["errors"] == 0, store.r.hgetall(store.key(run, "progress"))
    store.write_results(run, "derived", [("a", {"id": "a"}, {"combined": MetricResult.failed("no judge")})])
    store.r.hincrby(store.key(run, "progress"), "errors", -1)  # a worker before it rewrites it as a score
    assert store.progress(run)["errors"] == 0, store.r.hgetall(store.key(run, "progress"))


def test_errors_are_counted_per_queue_as_stored_and_unknown_for_a_run_counted_before(store: RunStore) -> None:
    """``errors:{queue}`` follows each queue's outputs stored as errors (a rewrite as a score takes its error off);
    the views keep ``errors`` alone. A run whose errors were written before (``errors`` more than the queues'):
    :func:`errors_of` cannot tell whose they are (None). Seen failing before: ``errors:cpu`` was never counted."""
    run = "t-errors-per-queue"
    store.create_run(run, {"state": "running"})
    store.add_ids(run, 0, ["a", "b"], {"cpu": 2, "judge": 2})
    _write(store, run, "a", m=MetricResult.failed("bad input"))
    store.write_results(run, "judge", [("b", {"id": "b"}, {"j": MetricResult.failed("400")})])
    stored = store.counters(run, "progress")
    assert (errors_of(stored, "cpu"), errors_of(stored, "judge"), errors_of(stored, "embed")) == (1, 1, 0)
    store.write_results(run, "judge", [("b", {"id": "b"}, {"j": MetricResult(score=1.0)})])  # judged again
    stored = store.counters(run, "progress")
    assert (errors_of(stored, "cpu"), errors_of(stored, "judge")) == (1, 0)
    assert store.progress(run)["errors"] == 1 and not any(k.startswith("errors:") for k in store.progress(run))
    store.r.hdel(store.key(run, "progress"), "errors:cpu", "errors:judge")  # as the write script before it counted
    assert errors_of(store.counters(run, "progress"), "judge") is None


def test_a_target_named_derived_is_named_by_what_its_calls_wait_on(store: RunStore) -> None:
    """The derived outputs' counters (``done:derived``, ...) are left out of the views; every key ending in
    ``:derived`` was, so the note of a target named ``derived`` whose calls wait (``target_wait_of:derived``) too."""
    run = "t-derived-target"
    store.create_run(run, {"state": "running"})
    until = int(time.time() * 1000) + 60_000
    store.r.hset(store.key(run, "targets:wait"), mapping={"until": until, "on": "rpm", "limit": 60, "who": "derived"})
    assert store.progress(run).get("target_wait_of:derived") == 1, store.progress(run)


def _judge_waits(store: RunStore, run: str, *names_by_limiter: tuple[str, str]) -> None:
    """The run's judge clients use these (limiter key, name) limiters; the last one's calls wait on a 429's pause."""
    for limiter_key, name in names_by_limiter:
        RunJudgeState(store.r, run, ttl_s=store.ttl_s, limiter=name).note_limiter(limiter_key)
    until = int(time.time() * 1000) + 60_000
    store.r.hset(store.key(run, "judge:wait"), mapping={"until": until, "on": "pause", "who": names_by_limiter[-1][1]})


def test_a_judge_limiter_left_by_a_rotated_key_does_not_name_the_runs_one(store: RunStore) -> None:
    """A key rotated mid-run (or between attempts) gives the same variable's calls a new limiter, and the old one
    stays noted: still one judge limiter by name, so the note says "the judge rate limit" as in any one-limiter run.
    Two names (two variables) name the one that waits."""
    run = "t-judge-limiters"
    store.create_run(run, {"state": "running"})
    name, other = "groq/m with the key in GROQ_API_KEY", "groq/m with the key in JUDGE_KEY_B"
    _judge_waits(store, run, ("groq:m:old", name), ("groq:m:new", name))
    assert not [k for k in store.progress(run) if k.startswith("judge_wait_of:")], store.progress(run)
    _judge_waits(store, run, ("groq:m:b", other))
    assert store.progress(run).get(f"judge_wait_of:{other}") == 1, store.progress(run)


def test_a_count_reason_another_judges_breaker_holds_too_is_not_made_a_refused_keys_error(store: RunStore) -> None:
    """Two judges (keys A and B) at one failing provider: each breaker opens on its count with the same reason (the
    same 500), then A's key is refused. A stored item names only its reason, so the items B's count stopped read the
    same as A's: none is made A's refused key's error (they stay stopped, a resume judges them again). With B's
    breaker closed, A's count reason is A's alone: its items are A's errors. Seen failing before: the count's reason
    mapped to A's refused key whatever B's breaker held."""
    run = "t-replaced-stops"
    store.create_run(run, {"state": "running"})
    a, b = (RunJudgeState(store.r, run, ttl_s=60, scope=f"groq:m:{k}") for k in "ab")
    a.record_failure(1, "groq HTTP 500")
    refused = "the groq judge's key was refused: check JUDGE_KEY_A"
    count = str(store.counters(run, "judge")["breaker:groq:m:a"])
    a.record_failure(1, "groq HTTP 401", reason=refused)
    assert replaced_stops(store.counters(run, "judge")) == {count: refused}
    b.record_failure(1, "groq HTTP 500")
    assert replaced_stops(store.counters(run, "judge")) == {}


def test_the_judge_state_reads_past_an_unscoped_breakers_replaced_reason(store: RunStore) -> None:
    """A judge without a limiter scope (and a target) keeps the count's reason a run stopper replaced in the field
    ``replaced_breaker``: text, which :meth:`RunJudgeState.read` took for a counter (``int()`` of a reason, a
    ValueError) for that judge and for every scoped one reading the same hash. Seen failing before: ValueError:
    invalid literal for int() with base 10: 'circuit breaker open after 1 consecutive failed judge calls ...'."""
    run = "t-unscoped-replaced"
    store.create_run(run, {"state": "running"})
    unscoped = RunJudgeState(store.r, run, ttl_s=60)
    unscoped.record_failure(1, "groq HTTP 500")
    refused = "the groq judge's key was refused: check JUDGE_KEY_A"
    unscoped.record_failure(1, "groq HTTP 401", reason=refused)
    assert "replaced_breaker" in store.counters(run, "judge")  # written by the run stopper, as a worker writes it
    assert unscoped.read()["breaker"] == refused
    scoped = RunJudgeState(store.r, run, ttl_s=60, scope="groq:m:b")
    assert "breaker" not in scoped.read() and "replaced_breaker" not in scoped.read()


def test_touch_and_settle_keep_the_judge_limiters_as_long_as_the_run(store: RunStore) -> None:
    """The judge limiters are one of the run's own keys: a run whose clients were built once, longer ago than the live
    TTL, still names them; a finished run's go with the rest of it."""
    run = "t-judge-limiters-ttl"
    store.create_run(run, {"state": "running"})
    RunJudgeState(store.r, run, ttl_s=5, limiter="groq/m with the key in GROQ_API_KEY").note_limiter("groq:m:k")
    store.touch(run)
    assert store.r.ttl(store.key(run, "judge:limiters")) > 5
    store.settle(run, 7)
    assert 0 < store.r.ttl(store.key(run, "judge:limiters")) <= 7


def test_noting_where_the_reports_are_keeps_a_finished_runs_ttl_and_revives_no_run(store: RunStore) -> None:
    """``reports_dir`` is written after the summary settled the run: the meta keeps the finished run's TTL (the
    live one would outlive its items), and a run gone from the store gets no meta of its own back."""
    run = "t-reports-dir"
    store.create_run(run, {"state": "finished"})
    store.settle(run, 7)
    store.note_reports_dir(run, "/data/o")
    assert store.meta(run)["reports_dir"] == "/data/o" and 0 < store.r.ttl(store.key(run, "meta")) <= 7
    store.note_reports_dir("t-reports-dir-gone", "/data/o")
    assert not store.r.exists(store.key("t-reports-dir-gone", "meta"))


def test_a_cancelled_runs_worked_units_leave_out_what_was_stopped_written_or_skipped(store: RunStore) -> None:
    """A cancel stops a chunk in flight (its rest written stopped) and skips the chunks queued (nothing written): the
    view of the cancelled run counted the stopped outputs done ("judge 8/8 100 %"). ``worked:{queue}`` is what its
    workers scored (unscorable and errors too); a resume's marks and rewrites keep it right."""
    from rich.console import Console

    from orchestrator.progress import PlainProgress, RichProgress
    from orchestrator.reports.live import StatusView, sample
    from ragscore_workers.store import RunState

    run, stop = "t-cancel-worked", MetricResult.stopped("run cancelled")
    store.create_run(run, {"state": "running", "submitted_at": "1000", "n_shards": "1"})
    store.add_ids(run, 0, [f"k{i}" for i in range(6)], {"cpu": 6})
    _write(store, run, "k0", m=MetricResult(score=1.0))
    _write(store, run, "k1", m=MetricResult.failed("boom"))
    _write(store, run, "k2", m=stop)
    _write(store, run, "k3", m=stop)  # k4, k5: a chunk the cancel skipped
    _write(store, run, "k3", m=stop)  # a redelivery: counted once
    store.set_state(run, RunState.CANCELLED)
    view = StatusView(store.meta(run))
    view.add(sample(store, run, time.time()))
    cpu = next(row for row in view.rows() if row["queue"] == "cpu")
    assert (cpu["done"], cpu["stopped"], cpu["total"], cpu["pct"]) == (2, 4, 6, pytest.approx(100 * 2 / 6)), cpu
    assert store.progress(run)["done:cpu"] == 4 and "stopped:cpu" not in store.progress(run)  # the bar's units
    assert store.overview([run])[0]["done"] == 2  # the run list counts it as the status's ``all`` row does, not 4
    assert store.progress(run)["unscorable"] == 0  # k2, k3 are stopped, not unscorable (they read 2)
    bar = io.StringIO()  # the run's own progress line counts them as the status's row does, not "4/6 (66.7%)"
    PlainProgress(bar).update(store.progress(run), final=True)
    assert ": 2/6 item×metric outputs scored (33.3%) " in bar.getvalue(), bar.getvalue()
    assert " stopped 4 errors 1 unscorable 0" in bar.getvalue() and "ETA" not in bar.getvalue(), bar.getvalue()
    rich = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))  # and its bar on a terminal
    rich.start(run)
    rich.update(store.progress(run), final=True)
    rich.stop()
    task = rich.bar.tasks[0]
    assert (task.completed, task.total, task.fields["eta"]) == (2, 6, "-:--:--"), task
    assert task.fields["tallies"].startswith("stopped 4 errors 1 unscorable 0"), task.fields

    store.reset_redo(run)  # resumed: k1 and k2 sent again; k2 scored, then the run cancelled again
    assert store.mark_redo(run, [("k1", "m", "cpu"), ("k2", "m", "cpu")]) == 2
    assert store.progress(run)["worked:cpu"] == 2  # a mark alone changes nothing stored
    _write(store, run, "k2", m=MetricResult(score=1.0))
    _write(store, run, "k3", m=MetricResult.unscorable("no reference"))  # a stopped output scored unscorable
    assert store.progress(run)["worked:cpu"] == 4 and store.overview([run])[0]["done"] == 4
    _write(store, run, "k0", m=stop)  # and the reverse (a rewrite stopped by a breaker)
    assert store.progress(run)["worked:cpu"] == 3


def test_a_resumes_tallies_leave_out_the_old_status_of_what_it_sends_again(store: RunStore) -> None:
    """A resume of a run whose judge outputs were stopped read ``errors 0 unscorable 40`` on its bar until they were
    written again (then 0): a marked output's old status now leaves the tallies when it is marked, and the rewrite
    counts its new one, once under a redelivery; a second resume marks afresh, and a cancel's ended run counts what
    stands stored, as its summary does."""
    from ragscore_workers.store import RunState

    run, stop, boom = "t-redo-tallies", MetricResult.stopped("interrupted"), MetricResult.failed("boom")
    store.create_run(run, {"state": "running", "n_shards": "1"})
    store.add_ids(run, 0, [f"k{i}" for i in range(4)], {"judge": 4, "derived": 4})
    for key, result in (("k0", MetricResult(score=1.0)), ("k1", stop), ("k2", stop), ("k3", boom)):
        store.write_results(run, "judge", [(key, {"id": key}, {"m": result})])
    store.write_results(run, "derived", [("k3", {"id": "k3"}, {"combined": boom})])

    def tallies() -> tuple[int, int, int]:
        progress = store.progress(run)
        return progress["done"], progress.get("errors", 0), progress.get("unscorable", 0)

    assert tallies() == (4, 1, 2)
    store.reset_redo(run)  # the resume sends k1..k3 again
    marked = [(k, "m", "judge") for k in ("k1", "k2", "k3")] + [("k3", "combined", "derived")]
    assert store.mark_redo(run, marked) == 4
    assert tallies() == (1, 0, 0)  # read mid-run: nothing stale (it read errors 1 unscorable 2)
    store.write_results(run, "judge", [("k1", {"id": "k1"}, {"m": MetricResult.unscorable("no reference")})])
    store.write_results(run, "judge", [("k1", {"id": "k1"}, {"m": MetricResult.unscorable("no reference")})])
    assert tallies() == (2, 0, 1)  # its new status, once under a redelivery
    store.write_results(run, "judge", [("k3", {"id": "k3"}, {"m": boom})])
    assert tallies() == (3, 1, 1)
    store.reset_redo(run)  # a second resume: k2 and k3 again
    assert store.mark_redo(run, [(k, "m", "judge") for k in ("k2", "k3")] + [("k3", "combined", "derived")]) == 3
    assert tallies() == (2, 0, 1)
    store.write_results(run, "judge", [("k2", {"id": "k2"}, {"m": stop})])  # a cancel stops it again
    assert tallies() == (3, 0, 2)
    store.set_state(run, RunState.CANCELLED)  # k3 never written again: its error stands, as the summary says
    progress = store.progress(run)
    assert (progress["errors"], progress["unscorable"], progress["worked:judge"]) == (1, 1, 3), progress


def test_only_a_redis_that_can_fill_and_evict_is_said_to_lose_a_runs_work(tmp_path: Path) -> None:
    """An evicting policy matters only under a memory limit: a Redis without one (maxmemory 0, a self-hosted one's
    default) never evicts, and was warned of all the same. A user refused INFO is not checked."""
    server = RedisProcess(tmp_path, "--maxmemory-policy", "volatile-lru").start()
    try:
        client = redis_client(server.url, 5.0, retries=0)
        assert eviction_problem(client) is None  # no maxmemory: nothing is ever evicted
        client.config_set("maxmemory", "1gb")
        assert "its maxmemory-policy is volatile-lru, not noeviction" in (eviction_problem(client) or "")
        client.config_set("maxmemory-policy", "noeviction")
        assert eviction_problem(client) is None
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.acl_setuser("no-info", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-info"])
        refused = redis_client(server.url.replace("redis://", "redis://no-info:pw@"), 5.0, retries=0)
        assert eviction_problem(refused) is None
    finally:
        server.stop()


def test_a_judge_breaker_is_named_by_its_limiters_name_never_its_keys_hash(store: RunStore) -> None:
    """A key rotated mid-run leaves two limiters of one name (as above): both breakers open are one judge's, said as
    a one-judge run says it. A breaker whose limiter is not noted is named by provider and model, not by its limiter
    key's hash of the endpoint and key. Seen failing before: the rotated key's reason came as "groq/m with the key in
    GROQ_API_KEY: ...", and the unnoted one as "groq:m:<hash>: ..."."""
    run = "t-judge-breakers"
    store.create_run(run, {"state": "running"})
    name = "groq/m with the key in GROQ_API_KEY"
    for limiter_key in ("groq:m:0ld0ld0ld0ld", "groq:m:0e30e30e30e3"):
        state = RunJudgeState(store.r, run, ttl_s=store.ttl_s, limiter=name, scope=limiter_key)
        state.note_limiter(limiter_key)
        state.record_failure(5, "401", reason="the groq judge's key was refused: check GROQ_API_KEY")
    limiters = store.r.hgetall(store.key(run, "judge:limiters"))
    summary = breaker_summary(store.counters(run, "judge"), limiters)
    assert summary["breaker"] == "the groq judge's key was refused: check GROQ_API_KEY", summary
    RunJudgeState(store.r, run, ttl_s=store.ttl_s, scope="openai:llama3.1:8b:a1b2c3d4e5f6").record_failure(
        1, "connection refused"
    )
    said = breaker_summary(store.counters(run, "judge"), limiters)["breaker"]
    assert "openai/llama3.1:8b: circuit breaker open after 1 consecutive failed judge calls" in said, said
    assert f"{name}: the groq judge's key was refused" in said and "a1b2c3" not in said, said


def test_a_redis_client_closed_closes_its_connections(tmp_path: Path) -> None:
    """A short-lived client (`ragscore worker`'s eviction checks, in its long-lived supervisor) left its socket open
    after its ``with``: the client did not own its pool, so closing it closed nothing until the garbage collector ran.
    Closed, its connections are."""
    server = RedisProcess(tmp_path).start()
    try:
        admin = redis_client(server.url, 5.0, retries=0)
        admin.client_setname("admin")
        with redis_client(server.url, 5.0, retries=0) as client:
            client.client_setname("short-lived")
            assert {c["name"] for c in admin.client_list()} == {"admin", "short-lived"}
        # the server drops a closed connection on its next loop
        assert until(lambda: {c["name"] for c in admin.client_list()} == {"admin"}, 60), admin.client_list()
    finally:
        server.stop()


def test_a_resume_starts_a_worker_for_each_queue_its_counters_say_has_work_or_do_not_count(store: RunStore) -> None:
    """:func:`queues_left`: a queue whose outputs are all stored (none stopped, none an error) is left out; one with
    an output missing, or with no count of its outputs at all (a store older than ``total:{queue}``), keeps its
    worker. Seen failing before: a queue with no count read as done (0 of 0 stored)."""
    from orchestrator.runner import queues_left
    from orchestrator.suite import load_suite

    run = "t-queues-left"
    store.create_run(run, {"n_shards": 1})
    counts = {"total:cpu": 2, "done:cpu": 2, "total:judge": 2, "done:judge": 1, "done": 3}
    store.r.hset(store.key(run, "progress"), mapping=counts)  # embed: none of its counters
    suite = load_suite({"name": "s", "metrics": ["answer_accuracy"], "judge": {"provider": "openai", "model": "m"}})
    assert queues_left(store, run, suite, ["cpu", "judge", "embed"]) == ["judge", "embed"]
    store.r.hset(store.key(run, "progress"), "done:judge", 2)
    assert queues_left(store, run, suite, ["cpu", "judge", "embed"]) == ["embed"]


def test_an_llm_only_systems_rows_stored_before_the_empty_flag_are_not_counted_as_gold_id_misses(
    store: RunStore,
) -> None:
    """A run started before recall_at_k marked a row that retrieved nothing (``details["empty"]``) stored its
    LLM-only system's rows without the flag: a resume's aggregation counted them as misses, and the run ended warning
    that system's gold ids were named otherwise. The item keeps no retrieved ids: its details' top id of None tells."""
    from orchestrator.reports.console import retrieved_nothing_lines, warning_lines
    from ragscore_workers.metrics.retrieval import RecallParams, recall_at_k
    from ragscore_workers.schemas import Suite
    from ragscore_workers.tasks import aggregate_in

    run = "t-before-empty-flag"
    suite = Suite.model_validate({"metrics": ["recall_at_k"]})
    store.create_run(run, {"state": "running", "suite": suite.model_dump_json(), "items": 4})
    store.add_ids(run, 0, ["rag-1", "rag-2", "llm-1", "llm-2"], {"cpu": 4})
    for i in (1, 2):
        for system, retrieved in (("rag", [f"d{i}", "d9"]), ("llm", [])):
            row = Row(id=str(i), system=system, gold_doc_id=f"d{i}", retrieved_doc_ids=retrieved)
            results = recall_at_k(row, RecallParams())
            if system == "llm":  # as the older code stored it: no flag
                older = {k: v for k, v in results["mrr"].details.items() if k != "empty"}
                results = {name: r.model_copy(update={"details": older}) for name, r in results.items()}
            store.write_results(run, "cpu", [(f"{system}-{i}", {"id": str(i), "system": system}, results)])
    store.set_meta(run, n_shards=1)
    aggregate_in(store, run)
    summary = store.summary(run)
    assert (summary.metrics["mrr"].n, summary.metrics["mrr"].empty) == (4, 2)
    assert warning_lines(summary) == []
    assert retrieved_nothing_lines(summary) == [
        "recall_at_k: 2 rows (of system llm) retrieved nothing (retrieved_doc_ids empty): each scores 0"
    ]


def test_the_run_list_names_a_runs_predictions_file_alone_and_an_older_run_none(store: RunStore) -> None:
    """Two runs of one questions file read with two predictions files listed the same (the dataset's name alone):
    the overview keeps the predictions file's name (no directory); a run stored without format options lists too."""
    given = {"state": "finished", "dataset": "/home/u/data/train.jsonl"}
    store.create_run("t-preds", {**given, "format_options": json.dumps({"predictions": "/home/u/out/simple.json"})})
    store.create_run("t-no-preds", {**given, "format_options": "{}"})
    store.create_run("t-older", given)
    listed = {
        o["run_id"]: (o["dataset"], o["predictions"]) for o in store.overview(["t-preds", "t-no-preds", "t-older"])
    }
    assert listed == {"t-preds": ("train.jsonl", "simple.json"), "t-no-preds": ("train.jsonl", ""),
                      "t-older": ("train.jsonl", "")}  # fmt: skip
