"""Faults: workers killed mid-run (kill -9 of pool processes or the whole worker, a poisoned item, an embedded worker
restarted): their messages come back, each item is scored once, status names what they held."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.runner import RESTARTED_STALL_S, connect, run, submit, wait, write_results
from orchestrator.suite import load_suite
from ragscore_workers.counts import counted

from ..support import (
    ROOT,
    RedisProcess,
    WorkerProcess,
    celery_workers,
    command_line,
    kill_whole,
    make_rows,
    signal_each,
    until,
    write_jsonl,
)
from .faults import SUITE

pytestmark = pytest.mark.integration  # timed assertions only are marked serial (see .faults)


def _celery_mains(worker: WorkerProcess) -> list[psutil.Process]:
    """The Celery main processes ``ragscore worker`` supervises (one per queue)."""
    assert worker.proc is not None
    return celery_workers(worker.proc.pid)


def _run_with_kill(tmp_path: Path, kill: str, visibility_s: int = 4) -> None:
    """Kill worker processes mid-run. A message kombu loses in the kill is re-submitted by wait()'s stall
    recovery (RAGSCORE_STALL_S is 5 s in these tests)."""
    server = RedisProcess(tmp_path / "redis").start()
    # 4 s: a vanished worker's messages return soon
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=2).short_visibility(visibility_s)
    worker.start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=3))
        store = connect(server.url)
        sub = submit(data, load_suite(SUITE), store)
        # mid-run (the worker boots first: slow on a loaded machine, so the wait is long, and must succeed)
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= 2000, 300), "the cpu worker never scored"
        (main,) = _celery_mains(worker)
        victims = main.children() if kill == "pool" else [main]
        assert victims
        signal_each(victims, signal.SIGKILL)
        summary = wait(store, sub.run_id, timeout_s=120 if visibility_s > 120 else 180)
        assert store.progress(sub.run_id)["done"] == 6000 * 4, "every output exactly once"
        write_results(store, sub.run_id, tmp_path / "out")
        ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
        assert ids == [f"q{i}" for i in range(6000)]
        assert summary.metrics["exact_match"].errors == 0
        if kill == "main":
            assert _celery_mains(worker)[0].pid != main.pid, "the supervisor restarted the worker"
    finally:
        worker.stop()
        server.stop()


def test_kill_9_of_pool_processes_mid_run_requeues_their_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSCORE_STALL_S", "5")
    _run_with_kill(tmp_path, "pool")


def test_kill_9_of_the_whole_worker_mid_run_redelivers_after_the_visibility_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGSCORE_STALL_S", "5")
    _run_with_kill(tmp_path, "main")


@pytest.mark.serial  # timed: within 120 s, not the 900 s visibility timeout
def test_messages_held_by_a_killed_worker_do_not_hold_the_run_until_the_visibility_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the default 15-minute visibility timeout, the dead worker's held messages stay in kombu's
    ``unacked`` hash: wait() sees that no live worker runs them and re-submits their work (within 120 s)."""
    monkeypatch.setenv("RAGSCORE_STALL_S", "5")
    _run_with_kill(tmp_path, "main", visibility_s=900)


@pytest.mark.parametrize("crash", [True, "exit"])
def test_a_poisoned_item_that_kills_its_worker_is_failed_after_bounded_deliveries(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, crash: object
) -> None:
    """``exit``: a SystemExit unwound through the chunk's bookkeeping, which took the delivery for one that ended, so
    the careful deliveries that find the item never came and the chunk was delivered again for ever."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.crash")
    rows = make_rows(60, seed=1)
    rows[33]["metadata"] = {"crash": crash}
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = load_suite({"metrics": ["exact_match", "crash_on_flag"], "chunk_size": {"cpu": 20}})
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(s=run(data, suite, tmp_path / "out", timeout_s=120)))
    thread.start()
    thread.join(150)
    assert not thread.is_alive()
    summary = result["s"]
    items = {json.loads(x)["id"]: json.loads(x) for x in (tmp_path / "out" / "items.jsonl").read_text().splitlines()}
    assert len(items) == 60
    poisoned = items["q33"]["metrics"]["crash_on_flag"]
    assert poisoned["score"] is None and "worker process died while scoring this item" in poisoned["error"]
    assert all(items[f"q{i}"]["metrics"]["crash_on_flag"]["score"] == 1.0 for i in range(60) if i != 33)
    assert summary.metrics["crash_on_flag"].errors == 1 and summary.metrics["crash_on_flag"].n == 59


class _KillOnce:
    """A progress view that kill -9s the embedded cpu worker's Celery main process once the run is under way."""

    def __init__(self, after: int) -> None:
        self.after, self.killed = after, 0

    def start(self, run_id: str) -> None:
        pass

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        if not self.killed and counters.get("done", 0) >= self.after:
            (main,) = [p for p in psutil.Process().children() if "cpu,control" in command_line(p)]
            main.send_signal(signal.SIGKILL)
            self.killed = main.pid

    def stop(self) -> None:
        pass


@pytest.mark.serial  # timed: within 400 s, not the 600 s stall limit
def test_an_embedded_worker_killed_mid_run_is_restarted_and_its_lost_work_resubmitted_soon(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run restarts the worker it owns and, knowing what that worker held is gone, re-submits it after
    RESTARTED_STALL_S without progress instead of the cluster's RAGSCORE_STALL_S (set far above it here)."""
    monkeypatch.setenv("RAGSCORE_STALL_S", "600")
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=4))
    killer = _KillOnce(after=2000)
    with caplog.at_level(logging.WARNING):
        summary = run(data, load_suite(SUITE), tmp_path / "out", progress=killer, timeout_s=400)
    assert killer.killed
    warnings = [r.getMessage() for r in caplog.records]
    assert any(w.startswith("the cpu worker was killed by SIGKILL") for w in warnings), warnings
    held = [w for w in warnings if "held by workers that are gone" in w]
    assert len(held) <= 1, held  # said once, not at every idle check
    # the run sends their work again now: it said they came back "only after the visibility timeout" (15 min)
    assert held and all(f"this run sends their work again now, after {RESTARTED_STALL_S:.0f} s without progress" in w
               for w in held), held  # fmt: skip
    assert any(w.endswith(f"no progress for {RESTARTED_STALL_S:.0f} s, nothing queued: re-submitting")
               for w in warnings), warnings  # fmt: skip
    assert summary.items == 6000 and summary.metrics["exact_match"].errors == 0
    ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    assert ids == [f"q{i}" for i in range(6000)]


@pytest.mark.parametrize("visibility_s", [None, 5])
def test_items_sent_again_in_other_chunks_count_as_later_deliveries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, visibility_s: int | None
) -> None:
    """A process killed at its hard time limit is acked as failed, and the stalled run's recovery sends the
    items again in new tasks, cut into other chunks. Deliveries are counted per item and queue: the new chunk
    goes careful, and fails the item a careful delivery died on. With a visibility timeout below the hard limits
    (allowed for tests only), the careful delivery may as well still be running: the error says so."""
    from ragscore_workers import tasks
    from ragscore_workers.schemas import Suite

    if visibility_s is not None:
        monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", str(visibility_s))
        monkeypatch.setenv("RAGSCORE_ALLOW_SHORT_VISIBILITY_TIMEOUT", "1")
    server = RedisProcess(tmp_path / "redis").start()
    try:
        monkeypatch.setenv("RAGSCORE_BROKER_URL", server.url)
        tasks.get_store.cache_clear()
        store = tasks.get_store()
        store.create_run("r1", {"state": "running", "generation": 0})
        first = [f"q{i}" for i in range(4)]
        assert store.start_delivery("r1", "cpu", first) == 1  # the first delivery: its process was killed
        assert store.start_delivery("r1", "cpu", first) == 2  # the second one went careful and died on q2
        store.mark_scoring("r1", "cpu", "q2", True)
        assert store.start_delivery("r1", "embed", ["q2"]) == 1  # another queue counts apart
        rows = [{"id": k, "answer": "a", "reference": "a"} for k in ("q1", "q2", "q3", "q9")]  # another chunk
        suite = Suite.model_validate({"metrics": ["exact_match"]}).model_dump_json()
        result = tasks.score_task["cpu"].apply(args=("r1", suite, ["exact_match"], rows))
        assert result.successful(), result.traceback
        keys = [r["id"] for r in rows]
        fields = dict(zip(keys, store.item_fields("r1", keys), strict=True))
        assert "worker process died while scoring this item" in fields["q2"]["exact_match"]
        outlived = "or ran past the visibility timeout (RAGSCORE_VISIBILITY_TIMEOUT_S=5 s, not above the 840 s hard"
        assert (outlived in fields["q2"]["exact_match"]) == (visibility_s is not None), fields["q2"]
        assert all(fields[k]["exact_match"].startswith("o") for k in ("q1", "q3", "q9"))
        left = store.r.hgetall(store.key("r1", "deliveries"))
        assert left == {"cpu:q0": "2", "embed:q2": "1"}  # the chunk ended: its items start afresh
        assert store.marked_scoring("r1", "cpu", first) == set()
    finally:
        tasks.get_store.cache_clear()
        server.stop()


def test_status_names_the_messages_a_killed_worker_holds_and_when_they_come_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A run sent with `ragscore submit` has no wait() to notice: `ragscore status` said only "no progress" while
    the killed worker's messages sat out the 15-minute visibility timeout. A run's wait() logs them once, with the
    stall it waited and the visibility timeout as the settings read then. Its second check, ORPHAN_CONFIRM_S after
    the first, is said on stderr (not a hang)."""
    import os
    import subprocess
    import sys

    from orchestrator.queues import ORPHAN_SETTLED_S, held_by_live_workers, held_messages

    from ..support import ROOT

    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=2).start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=3))
        store = connect(server.url)
        sub = submit(data, load_suite(SUITE), store)
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= 1000, 300), "the cpu worker never scored"
        kill_whole(worker)  # the whole host's worker, at once
        time.sleep(ORPHAN_SETTLED_S + 1)
        found = held_messages(store, sub.run_id)
        assert found.held > 0 and len(found.orphans) == found.held, found
        env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "COLUMNS": "400"}
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", sub.run_id], capture_output=True,
                               text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        confirming = f"{counted(found.held, 'message')} may be held by a worker that is gone: checking again in 4 s"
        assert f"{confirming} to be sure" in " ".join(shown.stderr.split()), shown.stderr
        said = " ".join(shown.stdout.split())
        items = sum(o.items for o in found.orphans)
        held = f"{counted(items, 'item')} of this run ({items:,} on cpu; {counted(found.held, 'message')}) " \
               f"{'is' if items == 1 else 'are'} held"  # fmt: skip
        assert f"Warning: {held} by a worker that stopped" in said, said
        assert "RAGSCORE_VISIBILITY_TIMEOUT_S=900 s" in said and f"`ragscore resume {sub.run_id} --out DIR`" in said
        monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", "1234")  # read as the line is logged
        said_counts: set[int] = set()
        with caplog.at_level(logging.WARNING):
            assert not held_by_live_workers(store, sub.run_id, said_counts, resending_after=37.0)
            assert not held_by_live_workers(store, sub.run_id, said_counts, resending_after=37.0)
        logged = [r.getMessage() for r in caplog.records if "held by workers that are gone" in r.getMessage()]
        assert logged == [f"run {sub.run_id}: {counted(found.held, 'message')} held by workers that are gone (killed, "
                          "or their host lost): this run sends their work again now, after 37 s without progress "
                          "(Redis would re-deliver them only RAGSCORE_VISIBILITY_TIMEOUT_S=1234 s after delivery)"], (
            logged
        )  # fmt: skip
    finally:
        worker.stop()
        server.stop()


def test_status_says_every_held_row_of_a_plugin_metric_this_host_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held chunk's items counted done are left out of its count, which needs its metrics' outputs: where
    `ragscore status` runs without the plug-in the workers score with (no RAGSCORE_PLUGINS there), its metric does
    not resolve, and a killed worker's held work read 0 items. Every row its messages carry is said instead (as
    before items counted done were left out)."""
    import tests.plugins.slow  # noqa: F401  (registers slow_exact here, as RAGSCORE_PLUGINS does in the worker)
    from orchestrator.queues import ORPHAN_SETTLED_S, held_messages

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=2).start()
    try:
        rows = [{"id": f"q{i}", "question": "q?", "answer": "a", "metadata": {"sleep_ms": 100}} for i in range(200)]
        store = connect(server.url)
        suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": 20}})
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), suite, store)
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= 20 and store.broker.hlen("unacked") > 0,
                     300), "the cpu worker never scored"  # fmt: skip
        kill_whole(worker)
        time.sleep(ORPHAN_SETTLED_S + 1)
        found = held_messages(store, sub.run_id)  # here, where the plug-in is loaded
        items = sum(o.items for o in found.orphans)
        assert found.orphans and items > 0, found
        env = {k: v for k, v in os.environ.items() if k != "RAGSCORE_PLUGINS"} | {"RAGSCORE_BROKER_URL": server.url,
                                                                                   "COLUMNS": "400"}  # fmt: skip
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", sub.run_id], capture_output=True,
                               text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        said = " ".join(shown.stdout.split())
        told = re.search(r"Warning: ([\d,]+) items? of this run \(([\d,]+) on cpu;", said)
        # every row carried, those written by chunks killed before their ack too (left out here: counted done)
        assert told and told[1] == told[2] and int(told[1].replace(",", "")) >= items, (shown.stderr, said)
    finally:
        worker.stop()
        server.stop()
