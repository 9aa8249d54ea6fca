"""Run-state transitions on a real Redis, driven in the order of the races: a terminal state stays put.

A run that reached ``cancelled``, ``finished`` or ``failed`` keeps that state whatever write comes late (a
re-delivered ``aggregate``, a cancel racing the summary, the submitter's last write); only a resume reopens it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from orchestrator.runner import IDLE_CHECKS, cancel, connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers import tasks
from ragscore_workers.errors import StoreError
from ragscore_workers.schemas import MetricResult, RunSummary, Suite
from ragscore_workers.scoring import SKIPPED_MARK
from ragscore_workers.store import RunState, RunStore

from ..support import RedisProcess, make_rows, write_jsonl

KEYS = ["a", "b", "c", "d"]


def _half_scored(store: RunStore, run_id: str) -> None:
    """A submitted run of four items, two of them scored."""
    suite = Suite(name="t", metrics=["exact_match"]).model_dump_json()
    store.create_run(run_id, {"state": RunState.RUNNING, "suite": suite, "items": len(KEYS), "n_shards": 1})
    store.add_ids(run_id, 0, KEYS, {"cpu": len(KEYS)})
    store.write_results(run_id, "cpu", [(k, {"id": k}, {"exact_match": MetricResult(score=1.0)}) for k in KEYS[:2]])


def test_a_redelivered_aggregate_keeps_a_cancelled_run_cancelled(worker_store: RunStore) -> None:
    run = "t-state-redelivered"
    _half_scored(worker_store, run)
    cancel(worker_store, run)  # Ctrl-C: the runner cancels; the skipped tasks complete the chord
    # Delivery 1 of aggregate makes its first write, then its worker is stopped before the ack ...
    worker_store.set_meta(run, state=RunState.AGGREGATING)
    tasks.aggregate(run)  # ... and the next run's workers get it again.
    summary = worker_store.summary(run)
    assert worker_store.state(run) == RunState.CANCELLED
    assert summary is not None and summary.state == RunState.CANCELLED
    assert (summary.items, summary.scored) == (4, 2)  # the summary covers what was scored


def test_a_cancel_while_aggregating_wins_over_the_summary_being_written(store: RunStore) -> None:
    run = "t-state-cancel-mid-aggregate"
    _half_scored(store, run)
    store.set_meta(run, state=RunState.AGGREGATING)  # aggregate started on a running run ...
    cancel(store, run)  # ... the user cancels ...
    store.save_summary(run, RunSummary(run_id=run, items=4, scored=2, state=RunState.FINISHED))  # ... it ends
    summary = store.summary(run)
    assert store.state(run) == RunState.CANCELLED
    assert summary is not None and summary.state == RunState.CANCELLED  # wait() needs the two to agree


def test_a_late_write_never_leaves_a_terminal_state(store: RunStore) -> None:
    run = "t-state-late"
    _half_scored(store, run)
    store.save_summary(run, RunSummary(run_id=run, items=4, scored=4))
    # cancel() read "aggregating" just before the summary was saved; its write comes after:
    store.set_meta(run, state=RunState.CANCELLED)
    assert store.state(run) == RunState.FINISHED

    run = "t-state-submitter"
    store.create_run(run, {"state": RunState.SUBMITTING})
    cancel(store, run)  # `ragscore cancel` while the submitter sends the last shard
    store.set_meta(run, n_shards=1, state=RunState.RUNNING)  # the submitter's last write
    assert store.state(run) == RunState.CANCELLED
    assert store.n_shards(run) == 1  # the other fields are still written


def test_a_resume_reopens_a_cancelled_run(store: RunStore) -> None:
    run = "t-state-resume"
    _half_scored(store, run)
    cancel(store, run)
    store.set_meta(run, state=RunState.SUBMITTING, generation=1)
    assert store.state(run) == RunState.SUBMITTING
    store.set_meta(run, state=RunState.RUNNING)
    assert store.state(run) == RunState.RUNNING


def test_a_stalled_cancelled_run_gets_its_summary_and_stays_cancelled(cluster: str) -> None:
    """wait() on a cancelled run whose summary never came (its aggregate lost) aggregates again; it does
    not re-submit the run, which would reopen it."""
    store = connect(cluster)
    run = "t-state-stalled-cancel"
    _half_scored(store, run)
    cancel(store, run)
    summary = wait(store, run, timeout_s=60, stall_s=0.5)
    assert summary.state == RunState.CANCELLED and store.state(run) == RunState.CANCELLED
    assert (summary.items, summary.scored) == (4, 2)


class _Flickering(Exception):
    """Ends the wait of :func:`test_a_stall_is_idle_at_consecutive_polls_not_at_polls_between_busy_ones`."""


def test_a_stall_is_idle_at_consecutive_polls_not_at_polls_between_busy_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """wait() re-submits a stalled run once its broker is idle at IDLE_CHECKS polls in a row (not a lucky instant);
    a poll that found work queued did not start the count again, so idle polls between busy ones (the run's messages
    waiting, then taken, and so on) added up to a re-submission of work still under way. A run submitted where no
    worker serves its queue has its messages set aside at every other poll here (``check`` is called at the end of
    each). Its own Redis: the session's has workers on the cpu queue."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(4)), load_suite({"metrics": ["exact_match"]}), store)
        (queue,) = json.loads(store.meta(sub.run_id)["queues"])
        aside = f"{queue}-aside"
        polls = iter(range(2 * IDLE_CHECKS + 2))  # idle at IDLE_CHECKS polls, one not idle between each two

        def flicker() -> None:
            poll = next(polls, None)
            if poll is None:
                raise _Flickering
            taken, put = (queue, aside) if poll % 2 == 0 else (aside, queue)
            if store.broker.exists(taken):
                store.broker.rename(taken, put)

        with caplog.at_level(logging.WARNING, logger="orchestrator.runner"), pytest.raises(_Flickering):
            wait(store, sub.run_id, timeout_s=120, stall_s=0.01, consumer_check_s=3600, check=flicker)
        assert "re-submitting" not in caplog.text, caplog.text
    finally:
        server.stop()


def test_wait_reports_a_cancelled_run_whose_summary_failed(store: RunStore) -> None:
    """aggregate failing on a cancelled run keeps it cancelled, with the error: wait() says so at once."""
    run = "t-state-cancelled-error"
    _half_scored(store, run)
    cancel(store, run)
    store.set_state(run, RunState.FAILED, error="aggregate: ValueError: boom")
    assert store.state(run) == RunState.CANCELLED
    with pytest.raises(StoreError, match=r"\(cancelled\) failed: aggregate: ValueError: boom"):
        wait(store, run, timeout_s=30, stall_s=60)


def test_work_and_summaries_of_a_superseded_generation_are_skipped(worker_store: RunStore) -> None:
    """After a resume (generation 1) the first submission's queued tasks (generation 0) must not run too:
    the resume re-sent the same items, and both would pay for the same judge calls."""
    run = "t-state-superseded"
    _half_scored(worker_store, run)
    worker_store.set_meta(run, state=RunState.SUBMITTING, generation=1)  # what resume() writes
    worker_store.set_meta(run, state=RunState.RUNNING)
    suite = Suite(name="t", metrics=["exact_match"]).model_dump_json()
    rows = [{"id": k, "answer": "x", "reference": "x"} for k in KEYS[2:]]
    old = tasks.score_chunk("cpu", run, suite, ["exact_match"], rows, generation=0)
    assert old["skipped"] == "superseded by a resume" and worker_store.progress(run).get("done", 0) == 2
    tasks.aggregate(run, 0)  # a summary queued before the resume
    assert worker_store.summary(run) is None and worker_store.state(run) == RunState.RUNNING
    new = tasks.score_chunk("cpu", run, suite, ["exact_match"], rows, generation=1)
    assert new["new"] == 2 and worker_store.progress(run)["done"] == 4
    tasks.aggregate(run, 1)
    summary = worker_store.summary(run)
    assert summary is not None and (summary.state, summary.scored) == (RunState.FINISHED, 4)


def test_asking_for_the_summary_of_a_run_without_one_says_why_and_what_to_do(worker_store: RunStore) -> None:
    from orchestrator.terminal import summary_commands
    from ragscore_workers.errors import ConfigError

    def finished_summary(run_id: str) -> None:
        """The summary, asked as the orchestrator asks for it (its commands naming no --out or --broker)."""
        worker_store.finished_summary(run_id, **summary_commands(run_id, None, None))

    with pytest.raises(ConfigError, match="No run 'nope' in the store .*restarted without persistence"):
        finished_summary("nope")
    _half_scored(worker_store, "r-running")
    with pytest.raises(StoreError, match=r"still running: follow it with `ragscore status r-running --watch`"):
        finished_summary("r-running")
    _half_scored(worker_store, "r-failed")
    worker_store.set_state("r-failed", RunState.FAILED, error="aggregate: KeyError: 'x'")
    said = r"failed with no summary: aggregate: KeyError: 'x'; `ragscore resume r-failed --out DIR` scores"
    with pytest.raises(StoreError, match=said):
        finished_summary("r-failed")
    _half_scored(worker_store, "r-cancelled")
    worker_store.set_state("r-cancelled", RunState.CANCELLED)
    with pytest.raises(StoreError, match=r"was cancelled; the summary of what it scored is written once the workers"):
        finished_summary("r-cancelled")


def test_a_cancel_counts_what_it_skipped_as_stopped_in_derived_metrics_and_items_too(worker_store: RunStore) -> None:
    """The judge chunk of c and d was skipped by the cancel: their rubric_judge counted as stopped, but combined
    read it as missing (unscorable), and items.jsonl held neither."""
    from orchestrator.reports.source import from_store

    run = "t-state-cancel-derived"
    suite = Suite(name="t", metrics=["rubric_judge", "evidence_overlap", "combined"]).model_dump_json()
    worker_store.create_run(run, {"state": RunState.RUNNING, "suite": suite, "items": len(KEYS), "n_shards": 1})
    worker_store.add_ids(run, 0, KEYS, {"cpu": len(KEYS), "judge": len(KEYS)})
    overlap = [(k, {"id": k}, {"evidence_overlap": MetricResult(score=0.5)}) for k in KEYS]
    judged = [(k, {"id": k}, {"rubric_judge": MetricResult(score=1.0), "rubric_judge_raw": MetricResult(score=5.0)})
              for k in KEYS[:2]]  # fmt: skip
    worker_store.write_results(run, "cpu", overlap)
    worker_store.write_results(run, "judge", judged)
    cancel(worker_store, run)
    tasks.aggregate(run)
    summary = worker_store.summary(run)
    assert summary is not None and summary.state == RunState.CANCELLED
    for name in ("rubric_judge", "combined"):
        m = summary.metrics[name]
        assert (m.n, m.unscorable, m.stopped) == (2, 2, 2), name
    # Read back where the suite's metrics cannot be imported (a plugin of the workers' only): from its summary.
    worker_store.set_meta(run, suite=Suite(name="t", metrics=["a_plugin_metric"]).model_dump_json())
    items = {raw.meta["id"]: raw.metrics for raw in from_store(worker_store, run).items()}
    assert items["c"]["rubric_judge"]["details"] == {"reason": "run cancelled", "stopped": True, SKIPPED_MARK: True}
    assert items["c"]["combined"]["details"]["stopped"] is True
    assert list(items["c"]) == sorted(items["c"]) and items["a"]["combined"]["score"] == 0.75


def test_the_items_a_cancel_skipped_keep_their_group_question_type_and_question(worker_store: RunStore) -> None:
    """Items no queue scored were rebuilt from their key: group, question type and question fingerprint were
    None in items.jsonl, and the summary's by_group left them out. A skipped chunk (a target's or a scoring
    queue's) writes their meta, and nothing else: a resume still scores them."""
    run = "t-state-cancel-meta"
    target = {"system": "rag", "url": "http://127.0.0.1:9/ask"}
    suite = Suite.model_validate({"name": "t", "metrics": ["exact_match"], "target": target}).model_dump_json()
    rows = [{"id": "a", "question": "Why?", "group": "g1", "question_type": "fact"},
            {"id": "b", "question": "How?", "group": "g2", "system": "other"}]  # fmt: skip
    worker_store.create_run(run, {"state": RunState.RUNNING, "suite": suite, "items": 4, "n_shards": 2})
    worker_store.add_ids(run, 0, ["rag::a", "rag::b"], {"target": 2, "cpu": 2})
    worker_store.add_ids(run, 1, ["x::c"], {"cpu": 1})
    cancel(worker_store, run)
    assert tasks.ask_target(run, suite, 0, 0, rows)["skipped"] == "run cancelled"
    plain = Suite(name="t", metrics=["exact_match"]).model_dump_json()
    scored = tasks.score_task["cpu"](run, plain, ["exact_match"], [{"id": "c", "system": "x", "group": "g3"}])
    assert scored["skipped"] == "run cancelled"
    metas = {raw.key: raw.meta for raw in worker_store.iter_raw_items(run)}
    assert {k: (m["system"], m["group"], m.get("question_type")) for k, m in metas.items()} == {
        "rag::a": ("rag", "g1", "fact"), "rag::b": ("rag", "g2", None), "x::c": ("x", "g3", None),
    }  # fmt: skip
    assert metas["rag::a"]["question_sha"] and "question_sha" not in metas["x::c"]
    assert worker_store.incomplete(run, list(metas), ["exact_match"]) == {k: {"exact_match"} for k in metas}
