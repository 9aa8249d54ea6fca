"""Worker faults: a killed worker process loses nothing; a poisoned item is failed, never looped."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
import redis

from orchestrator.runner import RESTARTED_STALL_S, Submitted, connect, run, submit, wait, write_results
from orchestrator.suite import load_suite
from orchestrator.terminal import summary_commands
from ragscore_workers.counts import counted
from ragscore_workers.errors import BrokerError, RunLostError
from ragscore_workers.settings import get_settings
from ragscore_workers.store import RunStore

from ..support import (
    ROOT,
    HookedProgress,
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

# It kills and hangs Redis and workers. Only the tests whose assertions are timed (how soon a run gets over it: "ends
# soon", "within N s", ETAs, a rate of asks, a hang timed against a read timeout) are marked serial; the others
# assert what happens, whenever it does, and run in the parallel pass.
pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}], "chunk_size": {"cpu": 25}}


def _celery_mains(worker: WorkerProcess) -> list[psutil.Process]:
    """The Celery main processes ``ragscore worker`` supervises (one per queue)."""
    assert worker.proc is not None
    return celery_workers(worker.proc.pid)


def _worker_said(home: Path, text: str) -> bool:
    """Whether a log of the ``ragscore worker`` whose RAGSCORE_HOME is ``home`` says ``text``."""
    return any(text in p.read_text(errors="replace") for p in home.rglob("*.log"))


def _run_with_kill(tmp_path: Path, kill: str, visibility_s: int = 4) -> None:
    """Kill worker processes mid-run. A message kombu loses in the kill is re-submitted by wait()'s stall
    recovery (RAGSCORE_STALL_S is 5 s in these tests)."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=2)
    worker.env["RAGSCORE_VISIBILITY_TIMEOUT_S"] = str(visibility_s)  # 4: a vanished worker's messages return soon
    worker.env["RAGSCORE_ALLOW_SHORT_VISIBILITY_TIMEOUT"] = "1"  # below the hard limits: these tasks take seconds
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


class _KillRedisOnce:
    """A progress view that kill -9s the embedded redis-server once the run is under way."""

    def __init__(self, home: Path, after: int) -> None:
        self.pid_file, self.after, self.killed = home / "redis" / "redis.pid", after, 0

    def start(self, run_id: str) -> None:
        pass

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        if not self.killed and counters.get("done", 0) >= self.after:
            self.killed = int(self.pid_file.read_text())
            psutil.Process(self.killed).send_signal(signal.SIGKILL)

    def stop(self) -> None:
        pass


def test_an_embedded_run_whose_redis_dies_restarts_it_and_finishes(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run owns its redis-server: when it dies the run starts it again from its append-only file (what the
    last second wrote may be lost: the stall recovery re-submits it) instead of waiting 300 s and failing."""
    monkeypatch.setenv("RAGSCORE_STALL_S", "5")
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=6))
    killer = _KillRedisOnce(home, after=2000)
    with caplog.at_level(logging.WARNING):
        summary = run(data, load_suite(SUITE), tmp_path / "out", progress=killer, timeout_s=240)
    assert killer.killed and not psutil.pid_exists(killer.killed)
    assert any("lost Redis" in r.getMessage() for r in caplog.records)
    em = summary.metrics["exact_match"]
    assert summary.items == 6000 and em.errors == 0 and em.n + em.unscorable == 6000
    ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    assert ids == [f"q{i}" for i in range(6000)]


@pytest.mark.serial  # timed: the restart must fall after submit's last write, while the run waits
def test_a_run_its_redis_forgot_fails_saying_so_with_exit_1(tmp_path: Path) -> None:
    """A Redis restarted without persistence has lost a cluster run mid-wait. The wait used to read it as
    bad input ("No run ... in the store", exit 2, "stopped before anything was submitted") once it looked
    stalled; it now says what happened, at once, with the run-failed exit code."""
    import os
    import subprocess
    import sys

    from ..support import ROOT

    server = RedisProcess(tmp_path / "redis").start()  # no persistence: a restart forgets everything
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(50))
    out = tmp_path / "out"
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home")}
    args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out", str(out)]
    proc = subprocess.Popen([*args, "--broker", server.url], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        store, deadline = connect(server.url), time.monotonic() + 60
        while not (out / "run.json").exists() or store.state(json.loads((out / "run.json").read_text())["run_id"]) != (
            "running"
        ):  # submitted; no worker serves it, so the run waits
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        server.stop()
        server.start()
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        server.stop()
    assert proc.returncode == 1, stderr
    assert "is no longer in the store: its Redis lost it" in " ".join(stderr.split()), stderr
    assert "Traceback" not in stderr
    assert "0/0 item" not in stderr  # the progress line of a run that is gone is not printed as its last word
    assert "its Redis lost it" in json.loads((out / "run.json").read_text())["lost"]


def test_a_run_its_redis_loses_between_two_reads_of_one_poll_is_said_lost_not_unknown(tmp_path: Path) -> None:
    """A poll of wait() reads the run's state, then its meta again (the queues its messages wait in). A Redis that
    lost the run between the two (restarted without persistence, flushed) made the second read say "No run ... in
    the store", a ConfigError: `ragscore run` exited 2, as for a mistyped run id (seen under load, where such a
    restart right after the run was submitted fell there). It is lost, as where its state was read gone."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(50)), load_suite(SUITE), store)  # no worker serves it
        updates: list[dict[str, int]] = []

        def flushed_at_the_second(counters: dict[str, int]) -> None:
            """The store loses the run after the second poll read its state, before that poll's consumer check."""
            updates.append(counters)
            if len(updates) == 2:
                store.r.flushall()

        progress = HookedProgress(on_update=flushed_at_the_second)
        with pytest.raises(RunLostError, match="its Redis lost it"):
            wait(store, sub.run_id, progress, consumer_check_s=0, timeout_s=120)
        assert len(updates) >= 2, updates  # the second poll's update came: the loss fell inside that poll
    finally:
        server.stop()


@pytest.mark.serial  # timed: the restart must fall after submit's last write, while the run waits
def test_a_run_its_redis_lost_is_not_resumed_and_its_out_dir_takes_a_new_run(tmp_path: Path) -> None:
    """After a Redis restarted without persistence lost a run, "run it again" was refused into the same --out
    ("finish it with --resume") and --resume said only "No run in the store": a dead end both ways."""
    import os
    import subprocess
    import sys

    from ..support import ROOT

    server = RedisProcess(tmp_path / "redis").start()
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(50))
    out, never_sent = tmp_path / "out", tmp_path / "never"
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home")}
    cli = [sys.executable, "-m", "orchestrator.cli", "run"]
    args = [*cli, str(data), "--suite", str(suite), "--out", str(out), "--broker", server.url]
    try:
        first = subprocess.Popen(args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        store = connect(server.url)

        def submitted() -> bool:
            recorded = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
            return bool(recorded) and store.state(recorded["run_id"]) == "running"

        assert until(submitted, timeout=60)
        lost_id = json.loads((out / "run.json").read_text())["run_id"]
        server.stop()
        server.start()
        _, said_first = first.communicate(timeout=60)
        assert first.returncode == 1, said_first
        resumed = subprocess.run([*cli, "--resume", str(out), "--broker", server.url], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
        said = " ".join(resumed.stderr.split())
        assert resumed.returncode == 2, resumed.stderr
        assert f"names run {lost_id}, which cannot be resumed: its Redis lost it" in said, said
        assert "Traceback" not in resumed.stderr
        # A run.json naming a run this store never had (another broker's, or lost unnoticed): what to do, both ways
        never_sent.mkdir()
        (never_sent / "run.json").write_text(json.dumps({"run_id": "20260101-000000-abcdef", "mode": "cluster"}))
        unknown = subprocess.run([*cli, "--resume", str(never_sent), "--broker", server.url], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
        said = " ".join(unknown.stderr.split())
        assert unknown.returncode == 2 and "sent to another broker: give that --broker" in said, said
        assert f"delete {never_sent / 'run.json'} and run it again" in said, said
        typo = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "20260101-000000-abcdee",
                               "--broker", server.url], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        said = " ".join(typo.stderr.split())  # no run.json to delete (its default --out was never written)
        listed = f"`ragscore status --broker {server.url}` lists the runs this broker has"
        assert typo.returncode == 2 and listed in said, said
        assert "run.json" not in said and "it cannot be resumed; run it again with the same DATASET" in said, said
        again = subprocess.Popen(args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        try:  # no worker serves it: it is submitted (a new run named in run.json), then waits
            assert until(lambda: json.loads((out / "run.json").read_text())["run_id"] != lost_id, timeout=60)
            assert until(submitted, timeout=60) and again.poll() is None
        finally:
            again.kill()
            _, stderr = again.communicate(timeout=30)
        assert f"named run {lost_id}, which its Redis lost: this run takes its place" in " ".join(stderr.split())
    finally:
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


def test_status_says_the_held_work_of_a_killed_worker_beside_a_live_one_too_busy_to_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two cpu workers on one queue, one killed whole while it held chunks, the other alive and scoring: the live one,
    missing the ask of what the workers hold (as a busy one does; here the ask is given no time), renewed its key
    saying it runs and consumes cpu, which made every settled message of cpu silent, the killed one's too: status
    said no held work, for the 15 minutes of the visibility timeout. Its key lists the tasks it holds: the killed
    one's messages are orphans, the live one's silent."""
    import tests.plugins.slow  # noqa: F401  (registers slow_exact here, as RAGSCORE_PLUGINS does in the worker)
    from orchestrator import queues
    from orchestrator.queues import ORPHAN_SETTLED_S, held_messages

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    doomed, alive = _doomed_and_alive(server, tmp_path)
    try:
        rows = [{"id": f"q{i}", "question": "q?", "answer": "a", "metadata": {"sleep_ms": 1000}} for i in range(200)]
        store = connect(server.url)
        suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": 15}})  # 15 s a chunk
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), suite, store)
        assert until(lambda: store.broker.hlen("unacked") > 0, 300), "the doomed worker never took a chunk"
        kill_whole(doomed)
        killed = {tag: store.broker.zscore("unacked_index", tag) for tag in store.broker.hkeys("unacked")}
        alive.start()
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no reply comes in time: the ask is missed
        time.sleep(ORPHAN_SETTLED_S)

        def the_live_ones_held_work_silent() -> bool:
            """The live worker holds a settled chunk, unlisted (it missed the ask), and not called orphaned."""
            found[0] = held_messages(store, sub.run_id)
            return found[0].silent > 0

        found = [held_messages(store, sub.run_id)]
        assert until(the_live_ones_held_work_silent, 120), (found, store.progress(sub.run_id))
        assert sorted(o.delivered_at for o in found[0].orphans) == sorted(killed.values()), (found, killed)
        items = sum(o.items for o in found[0].orphans)
        assert {o.queue for o in found[0].orphans} == {"cpu"} and 0 < items <= 15 * len(killed), found
    finally:
        kill_whole(alive)
        server.stop()


def _slow_run(tmp_path: Path, store: RunStore, rows: int, sleep_ms: int, chunk: int) -> Submitted:
    """A run of ``rows`` rows of ``slow_exact`` (``sleep_ms`` each, ``chunk`` a chunk) submitted to ``store``: its
    workers need RAGSCORE_PLUGINS=tests.plugins.slow."""
    import tests.plugins.slow  # noqa: F401  (registers slow_exact here, as RAGSCORE_PLUGINS does in the worker)

    data = [{"id": f"q{i}", "question": "q?", "answer": "a", "metadata": {"sleep_ms": sleep_ms}} for i in range(rows)]
    suite = load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": chunk}})
    return submit(write_jsonl(tmp_path / "d.jsonl", data), suite, store)


def test_a_killed_workers_messages_are_orphans_though_it_was_started_again_under_its_name_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed whole and started again at once under its name (same host, same -n: a supervisor's restart)
    answers the ask of what the workers hold in its dead twin's stead, and the key the dead one left (its TTL not run
    out) lists what it held: a worker that answered was taken to hold what a key of its name lists, so those messages
    read as held by the live twin, and a run's wait did not send their work again. Only a key seen renewed tells what
    its worker holds now. The dead worker's key lives an hour (``RAGSCORE_ALIVE_TTL_S``), as the default 10 s does on
    a fast host where the twin's boot is shorter (here it may outlast them): it is still there once the twin answers;
    then the run's wait sends the work again and the twin scores it."""
    from orchestrator.queues import held_messages
    from ragscore_workers.alive import alive_keys, broker_of

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    doomed, twin = _doomed_and_alive(server, tmp_path, doomed_alive_ttl_s=3600)
    try:
        store = connect(server.url)
        sub = _slow_run(tmp_path, store, rows=6, sleep_ms=1000, chunk=2)  # 3 chunks, all taken by the doomed worker
        keys = lambda: alive_keys(store.r, broker_of(store.broker))  # noqa: E731
        assert until(lambda: any(len(key.tasks or ()) == 3 for key in keys().values()), 300), "never took them"
        kill_whole(doomed)
        ((dead, its),) = keys().items()
        killed = sorted(cast(float, store.broker.zscore("unacked_index", tag)) for tag in store.broker.hkeys("unacked"))
        assert its.tasks and its.ttl_s == 3600 and len(killed) == 3, (its, killed)
        twin.start()
        assert until(lambda: any(name != dead for name in keys()), 120), "the twin never said it runs"
        assert {key.worker for name, key in keys().items() if name != dead} == {its.worker}, "another name"
        assert dead in keys(), "the dead worker's key expired"  # it lists the tasks the dead worker held
        found = held_messages(store, sub.run_id)
        assert sorted(o.delivered_at for o in found.orphans) == killed, (found, killed)
        summary = wait(store, sub.run_id, timeout_s=120, stall_s=5)
        assert (summary.state, summary.metrics["slow_exact"].n) == ("finished", 6), summary
    finally:
        twin.stop()
        server.stop()


@pytest.mark.serial  # timed: checks timed against ORPHAN_RECENT_S
def test_a_live_workers_messages_are_not_orphans_for_one_read_of_its_key_missing_and_a_dead_ones_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker too busy to answer the ask of what the workers hold (here the ask is given no time) is told by its
    key, renewed every RENEW_S; one slow to renew it (a GC pause, a loaded host) had its messages called orphans on
    one check, and a run's wait (held_by_live_workers) sent their work again while it still ran them, as a cancel
    (settled_orphans) wrote the summary without them. Orphans are now those two consecutive checks, a renewal apart,
    agree on: the worker's key is deleted once (it writes it again at its next renewal) before each call. The wait's
    progress note (what workers that are gone hold) read one check alone and named them while the wait kept them: it
    reads the wait's watch now. A `ragscore status` that finds no orphans does not say it checks again. Killed whole,
    its messages are orphans, and the note names them; a check ended long ago (ORPHAN_RECENT_S) does not confirm a
    fresh one, and a check that took longer than that is confirmed by the next all the same."""
    from orchestrator import queues
    from orchestrator.queues import (
        ORPHAN_CONFIRM_S,
        ORPHAN_SETTLED_S,
        OrphanWatch,
        held_by_live_workers,
        settled_orphans,
    )
    from ragscore_workers.alive import alive_keys, broker_of

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    worker, _never_started = _doomed_and_alive(server, tmp_path)
    try:
        store = connect(server.url)
        sub = _slow_run(tmp_path, store, rows=2, sleep_ms=120_000, chunk=1)  # it runs one, holds the other
        keys = lambda: alive_keys(store.r, broker_of(store.broker))  # noqa: E731
        assert until(lambda: any(len(key.tasks or ()) == 2 for key in keys().values()), 300), "never took them"
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)  # no reply comes in time: the ask is missed
        time.sleep(ORPHAN_SETTLED_S)
        assert until(lambda: held_by_live_workers(store, sub.run_id), 60), "its messages read as orphans"

        def key_missing() -> None:
            assert until(lambda: len(keys()) == 1, 30), "its key was not renewed"  # after a deletion before
            store.r.delete(*keys())  # missing for a read: renewed at its next renewal

        for decides in (held_by_live_workers, lambda *args: not settled_orphans(*args)):
            key_missing()
            assert decides(store, sub.run_id)
        assert _held_note_of(store, sub.run_id, key_missing) == ""
        alive = _cli(server, "status", sub.run_id)  # its worker answers: no orphans, no second check to say
        assert alive.returncode == 0 and "checking again" not in alive.stderr, alive.stderr
        kill_whole(worker)
        assert until(lambda: not held_by_live_workers(store, sub.run_id), 60), "the killed one's held by the living"
        assert len(settled_orphans(store, sub.run_id)) == 2
        monkeypatch.setattr(queues, "ORPHAN_RECENT_S", ORPHAN_CONFIRM_S + 1)  # not 3 times as long: a faster test
        watch = OrphanWatch(store, sub.run_id)
        assert watch.check().unconfirmed == 2
        time.sleep(queues.ORPHAN_RECENT_S + 1)  # the first check's orphans are no longer recent
        found = watch.check()
        assert (found.orphans, found.unconfirmed) == ([], 2), found  # it starts afresh
        assert len(watch.check().orphans) == 2  # the next, a renewal after it, confirms them
        # two asks nobody answers: checks of over 6 s, each longer than ORPHAN_RECENT_S
        monkeypatch.setattr(queues, "HELD_ASK_S", (queues.ORPHAN_RECENT_S + 1) / 2)
        found = OrphanWatch(store, sub.run_id).confirmed()
        assert (len(found.orphans), found.unconfirmed) == (2, 0), found  # the second, at once, confirms the first's
        monkeypatch.setattr(queues, "HELD_ASK_S", 1e-6)
        said = _held_note_of(store, sub.run_id, lambda: None)
        assert said == "2 messages held by a worker that is gone, sent again at 3600 s without progress", said
    finally:
        worker.stop()
        server.stop()


class _StopWaiting(Exception):
    """Ends the wait of :func:`_held_note_of`."""


class _HeldNotes(HookedProgress):
    """A progress view that shows nothing and keeps what the run's wait says workers that are gone hold."""

    def __init__(self) -> None:
        super().__init__()
        self.notes: list[str] = []

    def held(self, text: str) -> None:
        self.notes.append(text)


def _held_note_of(store: RunStore, run_id: str, before: Callable[[], None]) -> str:
    """What the run's wait says workers that are gone hold at its first poll without progress (its held note is due
    at once), ``before`` called at the end of the poll before it; the wait ends after."""
    view, calls = _HeldNotes(), iter([before])

    def check() -> None:
        next(calls, _stop)()

    with pytest.raises(_StopWaiting):
        wait(store, run_id, view, stall_s=3600, consumer_check_s=0, check=check)
    (note,) = view.notes
    return note


def _stop() -> None:
    raise _StopWaiting


def _doomed_and_alive(
    server: RedisProcess, tmp_path: Path, doomed_alive_ttl_s: int | None = None
) -> tuple[WorkerProcess, WorkerProcess]:
    """Two cpu workers with a 15-minute visibility timeout: the first started (the run's only worker until
    :func:`_kill_while_it_holds_work` kills it; its key saying it runs kept ``doomed_alive_ttl_s`` unless renewed,
    None: the default), the second to start after."""
    doomed = WorkerProcess(server.url, "cpu", tmp_path / "h1", concurrency=2)
    alive = WorkerProcess(server.url, "cpu", tmp_path / "h2", concurrency=1)
    for worker in (doomed, alive):
        worker.env["RAGSCORE_VISIBILITY_TIMEOUT_S"] = "900"
    if doomed_alive_ttl_s is not None:
        doomed.env["RAGSCORE_ALIVE_TTL_S"] = str(doomed_alive_ttl_s)
    return doomed.start(), alive


@dataclass
class _SentToADoomedWorker:
    """A run of 6,000 rows (:data:`SUITE`) submitted to ``server``, whose only worker is ``doomed`` (a second one,
    ``alive``, not started yet: :func:`_doomed_and_alive`)."""

    server: RedisProcess
    store: RunStore
    sub: Submitted
    doomed: WorkerProcess
    alive: WorkerProcess


@contextmanager
def _submitted_to_a_doomed_worker(tmp_path: Path) -> Iterator[_SentToADoomedWorker]:
    """Start a Redis and :func:`_doomed_and_alive` workers, and submit a run of 6,000 rows; stop them all after."""
    server = RedisProcess(tmp_path / "redis").start()
    doomed, alive = _doomed_and_alive(server, tmp_path)
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=3))
        store = connect(server.url)
        yield _SentToADoomedWorker(server, store, submit(data, load_suite(SUITE), store), doomed, alive)
    finally:
        alive.stop()
        doomed.stop()
        server.stop()


def _await_held_work(store: RunStore, run_id: str) -> None:
    """Until the run's workers have scored some of it (1,000 outputs) and hold messages of it (in flight or
    prefetched)."""
    assert until(lambda: store.progress(run_id).get("done", 0) >= 1000 and store.broker.hlen("unacked") > 0,
                 300), "no scoring"  # fmt: skip


def _remote_control_asks(broadcasts: redis.client.PubSub, method: str) -> int:
    """How many of Celery's remote control broadcasts ``broadcasts`` heard ask the workers ``method`` (kombu's message
    on the pidbox channel: its body, base64, names the method)."""
    asks = 0
    while (heard := broadcasts.get_message(timeout=1.0)) is not None:
        message = json.loads(heard["data"])
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        asks += json.loads(body).get("method") == method
    broadcasts.close()
    return asks


def _cli(server: RedisProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``ragscore ARGS`` against ``server`` (a 15-minute visibility timeout), its output captured."""
    env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "RAGSCORE_VISIBILITY_TIMEOUT_S": "900"}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)  # fmt: skip


def _kill_while_it_holds_work(store: RunStore, run_id: str, doomed: WorkerProcess, then_start: WorkerProcess) -> None:
    """Kill ``doomed``, the run's only worker so far, whole once it has scored some of the run and holds messages
    of it (its chunks in flight and prefetched), then start ``then_start``. With both serving from the start, the
    run could end before the kill (a few seconds of cpu work), leaving the killed worker holding nothing."""
    _await_held_work(store, run_id)
    kill_whole(doomed)
    assert store.progress(run_id).get("done", 0) < store.progress(run_id).get("total", 0), "it ended before the kill"
    then_start.start()
    assert until(lambda: _serving(1), 120), "the second worker did not start"


def _serving(n: int) -> bool:
    """``n`` Celery workers (or more) answer the orchestrator's app (each ``ragscore worker --queues cpu`` runs one)."""
    from ragscore_workers.app import app

    return len(app.control.inspect(timeout=1.0).active_queues() or {}) >= n


@pytest.mark.serial  # timed: within 120 s
def test_cancel_of_a_run_a_killed_worker_holds_messages_of_writes_its_summary_soon(tmp_path: Path) -> None:
    """A worker killed whole keeps the messages it held out of every queue until the visibility timeout (900 s
    here): no live worker could skip them, so the cancelled run's chord never ended and `ragscore cancel` left it
    without a summary for 15 minutes (`results` said "try again shortly")."""
    from orchestrator.queues import held_messages

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        server, store, sub, doomed, alive = sent.server, sent.store, sent.sub, sent.doomed, sent.alive
        _kill_while_it_holds_work(store, sub.run_id, doomed, then_start=alive)
        said = _cli(server, "cancel", sub.run_id)
        assert said.returncode == 0, said.stderr
        # soon: far below the 900 s after which Redis would hand the dead worker's messages to the live one
        assert until(lambda: store.summary_is_current(sub.run_id), 120), said.stderr
        orphans = held_messages(store, sub.run_id).orphans
        assert orphans, "the killed worker's messages are still held: the summary did not wait for them"
        assert "held by a worker that is gone" in " ".join(said.stderr.split()), said.stderr
        summary = write_results(store, sub.run_id, tmp_path / "out")
        assert summary.state == "cancelled" and summary.items == 6000
        for name, metric in summary.metrics.items():  # every item counted: scored, unscorable or stopped
            assert metric.n + metric.errors + metric.unscorable == 6000, (name, metric)
            assert metric.stopped > 0, (name, metric)  # the killed worker's prefetched chunks, never started
        ids = [json.loads(line)["id"] for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
        assert ids == [f"q{i}" for i in range(6000)]


@pytest.mark.serial  # timed: a rate of asks
def test_a_cancel_right_after_the_only_worker_of_a_queue_was_killed_summarizes_once_the_queue_counts_unserved(
    tmp_path: Path,
) -> None:
    """A queue a worker took a message of in the last ``RECENTLY_TAKEN_S`` s counts as served: cancelled at once
    after the kill -9 of its only worker, the run's queue counted served for the whole settle (60 s), as that dead
    worker's last take stayed its consumer. The settle reads the unserved queues again at each poll (as wait() does):
    once the take is old, the queue is unserved, the summary is written, and the queue is said as unserved. It asks
    the workers which queues they serve (a broadcast to every worker) every ``UNSERVED_RECHECK_S`` at most, not at
    each 1 s poll."""
    from orchestrator.runner import UNSERVED_RECHECK_S, cancel, summarize_cancelled

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        store, sub, doomed = sent.store, sent.sub, sent.doomed
        _await_held_work(store, sub.run_id)
        kill_whole(doomed)  # the only cpu worker: its queue is left with nobody
        cancel(store, sub.run_id)
        heard: list[dict[str, int]] = []
        returned: dict[str, int] = {}
        took: list[float] = []
        broadcasts = store.broker.pubsub()  # Celery's remote control: its asks to every worker
        broadcasts.psubscribe("*.celery.pidbox")
        assert (broadcasts.get_message(timeout=30) or {}).get("type") == "psubscribe"

        def summarize() -> None:  # a settle far longer than this test waits: it must end because cpu is unserved
            began = time.monotonic()
            returned.update(summarize_cancelled(store, sub.run_id, settle_s=3600, on_unserved=heard.append))
            took.append(time.monotonic() - began)

        settling = threading.Thread(target=summarize, daemon=True)
        settling.start()
        settling.join(300)
        assert not settling.is_alive(), "the settle waited on a queue whose only worker is dead"
        asks = _remote_control_asks(broadcasts, "active_queues")
        assert asks <= 1 + took[0] / UNSERVED_RECHECK_S, (asks, took)  # its first ask, then one each 5 s at most
        assert store.summary_is_current(sub.run_id)
        assert set(returned) == {"cpu"} and returned["cpu"] > 0, returned
        assert heard and {q for said in heard for q in said} == {"cpu"}, heard  # said to the user, as before the wait
        summary = write_results(store, sub.run_id, tmp_path / "out")
        assert summary.state == "cancelled" and summary.items == 6000
        assert all(metric.stopped > 0 for metric in summary.metrics.values()), summary.metrics


@pytest.mark.serial  # timed: the cancel must come within RECENTLY_TAKEN_S (20 s) of the kill
def test_cancel_of_a_run_whose_queue_lost_its_only_worker_holding_another_runs_messages_writes_its_summary(
    tmp_path: Path,
) -> None:
    """Two runs on one broker; the only cpu worker, killed whole, held messages of the first run only. `ragscore
    cancel` of the second found none of its messages held by a worker that is gone, and its queue served (the dead
    worker's last take, of the other run, was recent): it left the summary to workers, and none would write it. It
    now watches the queue until it counts unserved, then writes the summary, its queued items counted as stopped."""
    from orchestrator.queues import held_messages

    server = RedisProcess(tmp_path / "redis").start()
    doomed, _never_started = _doomed_and_alive(server, tmp_path)
    try:
        store = connect(server.url)
        first = submit(write_jsonl(tmp_path / "a.jsonl", make_rows(6000, seed=3)), load_suite(SUITE), store)
        _await_held_work(store, first.run_id)
        kill_whole(doomed)  # the only cpu worker, holding the first run's messages (killed before the second is sent:
        # a worker that lived on took the second's too on a loaded host), its last take recent and its key unexpired
        second = submit(write_jsonl(tmp_path / "b.jsonl", make_rows(200, seed=4)), load_suite(SUITE), store)
        assert held_messages(store, second.run_id).held == 0 and held_messages(store, first.run_id).held > 0
        said = _cli(server, "cancel", second.run_id)
        assert said.returncode == 0, said.stderr
        assert store.summary_is_current(second.run_id), said.stderr  # written by the cancel, not left to nobody
        text = " ".join(said.stderr.split())
        assert "no worker answered for 'cpu' (busy, or killed a moment ago): waiting" in text, said.stderr
        assert "no worker consumes 'cpu' (" in text, said.stderr
        summary = write_results(store, second.run_id, tmp_path / "out")
        assert summary.state == "cancelled" and summary.items == 200
        for name, metric in summary.metrics.items():  # none scored: every item stopped by the cancel
            assert (metric.n, metric.stopped) == (0, 200), (name, metric)
    finally:
        doomed.stop()
        server.stop()


def test_results_of_a_run_whose_worker_was_killed_after_its_cancel_writes_its_summary_soon(tmp_path: Path) -> None:
    """`ragscore cancel` ran while every worker lived, so it left the summary to them; then a worker holding
    messages of the run was killed whole. No live worker could skip those until the visibility timeout (900 s
    here): `ragscore results` said "try again shortly" for 15 minutes. It now writes the summary of what was
    scored, what the dead worker holds counted as stopped."""
    from orchestrator.queues import held_messages
    from orchestrator.runner import cancel

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        server, store, sub, doomed, alive = sent.server, sent.store, sent.sub, sent.doomed, sent.alive
        _await_held_work(store, sub.run_id)
        cancel(store, sub.run_id)  # what `ragscore cancel` does while no worker is gone: the workers skip the rest
        kill_whole(doomed)  # ...but this one is killed before it skipped what it holds
        alive.start()
        said = _cli(server, "results", sub.run_id, "--out", str(tmp_path / "out"))
        assert said.returncode == 1, said.stderr  # a cancelled run's reports: exit 1, as `ragscore run`
        assert "held by a worker that is gone" in " ".join(said.stderr.split()), said.stderr
        assert held_messages(store, sub.run_id).orphans, "Redis handed the dead worker's messages back first"
        summary = json.loads((tmp_path / "out" / "summary.json").read_text())
        assert summary["state"] == "cancelled" and summary["items"] == 6000, summary
        for name, metric in summary["metrics"].items():
            assert metric["n"] + metric["errors"] + metric["unscorable"] == 6000, (name, metric)
            assert metric["stopped"] > 0, (name, metric)


@pytest.mark.serial  # timed: within 120 s
def test_the_run_following_a_run_whose_worker_was_killed_after_its_cancel_ends_soon(tmp_path: Path) -> None:
    """`ragscore run --broker URL` follows its run; it is cancelled while every worker lives (nothing left for the
    cancel to summarize), then a worker holding messages of it is killed whole. The run's wait() aggregated again
    only after its stall limit (120 s by default, 600 s here) or the 900 s visibility timeout; a cancelled run
    idle for 10 s has only its summary missing."""
    from orchestrator.runner import cancel

    with _followed_cluster_run(tmp_path) as followed:
        store, run_id = followed.store, followed.run_id
        _await_held_work(store, run_id)
        cancel(store, run_id)  # `ragscore cancel` with every worker alive: the workers would skip the rest
        kill_whole(followed.doomed)  # ...but this one is killed first, holding some of it
        followed.alive.start()
        cancelled_at = time.monotonic()
        followed.ends_cancelled()
        assert time.monotonic() - cancelled_at < 120, "the run waited for its stall limit"


@dataclass
class _Followed:
    """A `ragscore run --broker URL` following its cluster run of 6,000 rows (its output in ``log``), the run's only
    worker ``doomed`` and a second one, ``alive``, not started yet."""

    following: subprocess.Popen[bytes]
    store: RunStore
    run_id: str
    out: Path
    log: Path
    doomed: WorkerProcess
    alive: WorkerProcess
    env: dict[str, str]

    def ends_cancelled(self) -> None:
        """The `run` exits 1 with the cancelled run's reports, what the killed worker still holds counted as
        stopped."""
        from orchestrator.queues import held_messages

        assert self.following.wait(300) == 1, self.log.read_text()
        said = " ".join(self.log.read_text().split())
        assert f"run {self.run_id} was cancelled" in said and "the reports cover those only" in said, said
        assert held_messages(self.store, self.run_id).orphans, "the killed worker's messages were handed back first"
        summary = json.loads((self.out / "summary.json").read_text())
        assert summary["run_id"] == self.run_id and summary["state"] == "cancelled" and summary["items"] == 6000
        assert all(metric["stopped"] > 0 for metric in summary["metrics"].values()), summary["metrics"]


@contextmanager
def _followed_cluster_run(tmp_path: Path) -> Iterator[_Followed]:
    """Start a Redis, :func:`_doomed_and_alive` workers and a `ragscore run --broker` (stall limit 600 s) following
    its run; stop them all after."""
    server = RedisProcess(tmp_path / "redis").start()
    doomed, alive = _doomed_and_alive(server, tmp_path)
    env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "RAGSCORE_VISIBILITY_TIMEOUT_S": "900",
           "RAGSCORE_STALL_S": "600"}  # fmt: skip
    suite, out, log = tmp_path / "suite.json", tmp_path / "out", tmp_path / "run.log"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=3))
    with log.open("w") as sink:
        following = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite),
                                      "--broker", server.url, "--out", str(out), "--quiet"], cwd=ROOT, env=env,
                                     stdout=sink, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        assert until(lambda: (out / "run.json").exists(), 120), "the run was not submitted"
        run_id = json.loads((out / "run.json").read_text())["run_id"]
        yield _Followed(following, connect(server.url), run_id, out, log, doomed, alive, env)
    finally:
        if following.poll() is None:
            following.kill()
            following.wait(10)
        alive.stop()
        doomed.stop()
        server.stop()


@pytest.mark.serial  # timed: an ETA
def test_status_of_a_run_a_killed_worker_holds_work_of_gives_no_eta_before_its_redelivery(tmp_path: Path) -> None:
    """Another worker went on and did the rest: `ragscore status` gave the held work's queue an ETA of its rate
    (seconds) while that work waited for the 15-minute visibility timeout, and the killed worker was not named."""
    import os
    import re
    import subprocess
    import sys

    from orchestrator.queues import held_messages

    from ..support import ROOT

    with _submitted_to_a_doomed_worker(tmp_path) as sent:
        server, store, sub, doomed, alive = sent.server, sent.store, sent.sub, sent.doomed, sent.alive
        _kill_while_it_holds_work(store, sub.run_id, doomed, then_start=alive)

        def only_the_dead_hold_work() -> bool:  # the live worker did every message it could take
            found = held_messages(store, sub.run_id)
            return not store.broker.llen("cpu") and found.held == len(found.orphans) > 0

        assert until(only_the_dead_hold_work, 300), "the live worker never drained the queue"
        orphans = held_messages(store, sub.run_id).orphans
        progress = store.progress(sub.run_id)
        left = progress["total:cpu"] - progress["done:cpu"]
        items = sum(o.items for o in orphans)
        # What is left is about what the killed worker holds (4 outputs an item): less where it wrote a chunk and
        # died before its ack (redelivered, that chunk skips itself), more where the kill fell between Redis's pop
        # of a message and kombu's write of it to `unacked` (lost: the run's stall check sends it again).
        assert left > 0 and items > 0, (left, items)
        env = {**os.environ, "RAGSCORE_BROKER_URL": server.url, "RAGSCORE_VISIBILITY_TIMEOUT_S": "900",
               "COLUMNS": "400"}  # fmt: skip
        shown = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", sub.run_id], capture_output=True,
                               text=True, cwd=ROOT, env=env, timeout=60)  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        back = max(o.delivered_at for o in orphans) + 900  # when Redis hands the last of them back
        assert back - time.time() > 600, "the test's own waits took most of the visibility timeout"
        said = " ".join(shown.stdout.split())
        held = f"{counted(items, 'item')} of this run ({items:,} on cpu; {counted(len(orphans), 'message')}) " \
               f"{'is' if items == 1 else 'are'} held"  # fmt: skip
        assert f"Warning: {held} by a worker that stopped (killed, or its host lost)" in said, said
        at = time.strftime("%H:%M:%S UTC", time.gmtime(back))
        assert f"at about {at}, in " in said and "the run cannot end before then (ETA ≥)" in said, said
        for queue in ("cpu", "all"):  # no ETA sooner than the held work's redelivery (it was the rate's: seconds)
            (eta,) = re.findall(rf"│ {queue} .*│ *(\S+) │", shown.stdout)
            minutes, seconds = re.fullmatch(r"≥(\d+)m(\d+)s", eta).groups()  # type: ignore[union-attr]
            assert int(minutes) * 60 + int(seconds) >= back - time.time() - 1, eta


@pytest.mark.serial  # timed: within 300 s, not the 600 s stall limit
def test_the_run_following_a_cluster_run_a_killed_worker_holds_messages_of_ends_soon_once_cancelled(
    tmp_path: Path,
) -> None:
    """`ragscore run --broker URL` follows its run; a worker killed whole holds some of it, then `ragscore cancel`
    from another shell. The cancel writes the summary (held messages counted as stopped), and the run's wait()
    sees it: the `run` exits 1 with the cancelled run's reports, not after its stall limit (600 s here) or the
    900 s visibility timeout after which Redis hands the held messages back."""
    with _followed_cluster_run(tmp_path) as followed:
        _kill_while_it_holds_work(followed.store, followed.run_id, followed.doomed, then_start=followed.alive)
        cancelled = subprocess.run([sys.executable, "-m", "orchestrator.cli", "cancel", followed.run_id],
                                   capture_output=True, text=True, cwd=ROOT, env=followed.env, timeout=300)  # fmt: skip
        assert cancelled.returncode == 0, cancelled.stderr
        assert "held by a worker that is gone" in " ".join(cancelled.stderr.split()), cancelled.stderr
        followed.ends_cancelled()  # soon after the cancel: far below the 600 s stall limit and the visibility timeout


@pytest.mark.serial  # timed: within 120 s
def test_a_redis_that_accepts_and_never_answers_fails_the_run_in_bounded_time(tmp_path: Path) -> None:
    """A port that accepts connections and never replies (a hung Redis, another service, a proxy holding the
    connection): ``run`` said "retrying for about 20 s" and then waited for ever in its first read."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody ever reads or answers
    port = listener.getsockname()[1]
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out",
            str(tmp_path / "out"), "--broker", f"redis://127.0.0.1:{port}/0"]  # fmt: skip
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home")}
    try:
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    finally:
        listener.close()
    said = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stderr
    assert "retrying for about 20 s" in said and f"Cannot use Redis at redis://127.0.0.1:{port}/0: Timeout" in said
    assert "Traceback" not in said


class _StopRedisOnce:
    """A progress view that SIGSTOPs the cluster's redis-server once the run is under way, and SIGCONTs it after
    ``for_s`` (a hung Redis, or one behind a network partition: connections stay open, nothing answers)."""

    def __init__(self, server: RedisProcess, after: int, for_s: float) -> None:
        self.server, self.after, self.for_s, self.stopped = server, after, for_s, False

    def start(self, run_id: str) -> None:
        pass

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        if not self.stopped and counters.get("done", 0) >= self.after:
            assert self.server.proc is not None
            self.stopped = True
            self.server.proc.send_signal(signal.SIGSTOP)
            timer = threading.Timer(self.for_s, self.server.proc.send_signal, (signal.SIGCONT,))
            timer.daemon = True  # a test that ends first sends SIGCONT itself
            timer.start()

    def stop(self) -> None:
        pass


def test_a_hung_redis_mid_run_is_said_as_an_outage_and_the_run_finishes_when_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run's reads had no time bound: a Redis that stopped answering held ``run`` in one read, silent, for as
    long as it hung (a partition: until TCP gave up, hours). Now each read is bounded, wait() says the outage and
    retries within its bound, and the run goes on once Redis answers."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(3000, seed=8))
        stopper = _StopRedisOnce(server, after=400, for_s=8.0)
        with caplog.at_level(logging.WARNING):
            summary = run(data, load_suite(SUITE), tmp_path / "out", broker=server.url, progress=stopper,
                          timeout_s=300)  # fmt: skip
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        worker.stop()
        server.stop()
    said = [r.getMessage() for r in caplog.records]
    assert stopper.stopped
    assert any("lost Redis (Timeout" in m for m in said), said
    assert any("Redis is back after" in m for m in said), said
    em = summary.metrics["exact_match"]
    assert summary.items == 3000 and em.errors == 0 and em.n + em.unscorable == 3000


def _finished_run(tmp_path: Path, server: RedisProcess, rows: int = 40) -> tuple[RunStore, str]:
    """A cluster run of ``rows`` rows, scored and aggregated (its summary written) before anyone waits for it."""
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(rows, seed=5)), load_suite(SUITE), store)
        assert until(lambda: store.state(sub.run_id) == "finished" and store.summary_is_current(sub.run_id), 300)
    finally:
        worker.stop()
    return store, sub.run_id


def test_a_hung_redis_at_the_summary_read_of_a_finished_run_is_an_outage_and_the_wait_returns_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """wait() treated only its first two reads of a poll (state, progress) as a Redis outage: one that hung at any
    other read (here the summary's, of a run that had ended: the Redis stops right after the progress is shown)
    failed `ragscore run` after one read timeout, with a run that was done. Now every read of the poll is an
    outage, said and retried, and the wait returns the summary once Redis answers."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store, run_id = _finished_run(tmp_path, server)
        stopper = _StopRedisOnce(server, after=0, for_s=6.0)  # at the first poll's progress: its next read hangs
        with caplog.at_level(logging.WARNING):
            summary = wait(store, run_id, progress=stopper, timeout_s=120)
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()
    said = [r.getMessage() for r in caplog.records]
    assert stopper.stopped
    assert any("lost Redis (Timeout" in m for m in said), said
    assert any("Redis is back after" in m for m in said), said
    assert summary.run_id == run_id and summary.items == 40


@pytest.mark.serial  # timed: within 3 read timeouts
def test_a_wait_that_gives_up_on_a_hung_redis_reads_nothing_more_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once wait() gave up on a Redis that does not answer, its last look at the progress (for the final line) was
    one more read of that Redis: one more read timeout (30 s) before `ragscore run` said so. Now it is skipped:
    the wait ends after the reads of the outage itself (two, 10 s each, here), not a third."""
    from orchestrator import connection, runner

    read_s = 10.0  # a third read's timeout is what the bound below tells apart: long beside a loaded box's delays
    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", read_s)
    monkeypatch.setattr(runner, "REDIS_OUTAGE_S", 0.0)  # given up at the first retry that fails too
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store, run_id = _finished_run(tmp_path, server)
        stopper = _StopRedisOnce(server, after=0, for_s=60.0)  # hung for longer than the wait's outage bound
        started = time.monotonic()
        with pytest.raises(BrokerError, match="Redis did not answer for 0 s"):
            wait(store, run_id, progress=stopper, timeout_s=120)
        took = time.monotonic() - started
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()
    assert stopper.stopped
    assert took < 3 * read_s, f"{took:.1f} s: a third read timeout after the outage ended the wait"  # 2 and a 1 s pause


def test_a_wait_that_gives_up_on_a_hung_redis_says_status_and_results_with_the_out_and_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "a cluster run goes on without this process: `ragscore status RUN`, then `ragscore results RUN`": without
    the --broker (pasted, they asked RAGSCORE_BROKER_URL or the embedded Redis) and without --out, which results
    of a run id refuses to go without."""
    from orchestrator import connection, runner

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)
    monkeypatch.setattr(runner, "REDIS_OUTAGE_S", 0.0)  # given up at the first retry that fails too
    server = RedisProcess(tmp_path / "redis").start()
    out = tmp_path / "my out"
    try:
        store, run_id = _finished_run(tmp_path, server)
        stopper = _StopRedisOnce(server, after=0, for_s=60.0)
        with pytest.raises(BrokerError) as gave_up:
            wait(store, run_id, progress=stopper, timeout_s=120, out_dir=out, broker=server.url)
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()
    said = str(gave_up.value)
    assert said.endswith(
        f"`ragscore status {run_id} --broker {server.url}`, then `ragscore results {run_id} --out '{out}' --broker "
        f"{server.url}`"
    ), said


class _StopRedisWhen(threading.Thread):
    """Watches the store (its own client, every ~1 ms) until ``seen(client)``, then SIGSTOPs the redis-server at that
    moment; SIGCONTs it ``for_s`` later."""

    def __init__(self, server: RedisProcess, seen: Callable[[redis.Redis], bool], for_s: float) -> None:
        super().__init__(daemon=True)
        self.server, self.seen, self.for_s = server, seen, for_s
        self.client = redis.Redis(port=server.port, decode_responses=True)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.seen(self.client):
            time.sleep(0.001)
        assert self.server.proc is not None
        self.server.proc.send_signal(signal.SIGSTOP)
        self.stopped.set()
        timer = threading.Timer(self.for_s, self.server.proc.send_signal, (signal.SIGCONT,))
        timer.daemon = True  # a test that ends first sends SIGCONT itself
        timer.start()


def _cancelled(store: RunStore, tmp_path: Path) -> Submitted:
    """A run of 20,000 rows (a lease renewal's worth), cancelled before any worker took it: its aggregation, run
    in this process, reads every item."""
    from orchestrator.runner import cancel

    sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20000, seed=4)), load_suite(SUITE), store)
    cancel(store, sub.run_id)
    return sub


def _aggregated_while(
    store: RunStore,
    tmp_path: Path,
    server: RedisProcess,
    caplog: pytest.LogCaptureFixture,
    act: Callable[[redis.Redis, str], object],
) -> tuple[str, str, list[str]]:
    """A cancelled run (:func:`_cancelled`) aggregated in this process, as the worker's task calls it, while a thread
    does ``act(client, lease)`` the moment the aggregation holds its lease: the run, its lease key and what was
    logged."""
    from ragscore_workers.tasks import aggregate_in

    sub = _cancelled(store, tmp_path)
    lease = store.key(sub.run_id, "aggregating:0")
    watcher = redis.Redis(port=server.port, decode_responses=True)
    thread = threading.Thread(target=lambda: until(lambda: bool(act(watcher, lease)), 60))
    thread.start()
    with caplog.at_level(logging.WARNING):
        aggregate_in(store, sub.run_id, store.generation(sub.run_id))
    thread.join(60)
    return sub.run_id, lease, [r.getMessage() for r in caplog.records]


def _at_recovery(server: RedisProcess, run_id: str, for_s: float) -> _StopRedisWhen:
    """Stops Redis the moment wait()'s stall recovery has written ``submitting`` with the new generation (the
    resume then sends, shard by shard)."""
    meta = RunStore.key(run_id, "meta")
    return _StopRedisWhen(server, lambda r: r.hmget(meta, ["state", "generation"]) == ["submitting", "1"], for_s)


def _at_aggregation(server: RedisProcess, run_id: str, for_s: float) -> _StopRedisWhen:
    """Stops Redis the moment the run's aggregation takes its lease."""
    lease = RunStore.key(run_id, "aggregating:0")
    return _StopRedisWhen(server, lambda r: bool(r.exists(lease)), for_s)


@pytest.mark.serial  # timed: a hang of 3 s or 7 s against 2 s reads
@pytest.mark.parametrize("for_s", [3.0, 7.0], ids=["back-for-the-cancel", "hung-past-the-cancel"])
def test_a_stall_recovery_cut_off_by_a_hung_redis_is_sent_again_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, for_s: float
) -> None:
    """A stall recovery re-submits shard by shard; a Redis that stops answering part-way cut it off. Its failure
    handler then set the run's state to cancelled: a Redis hung past that write too (7 s: the resume's read and the
    cancel's, 2 s each) left the run ``submitting``, which wait() takes for progress, so it never recovered the stall
    again and waited for ever; one back in time for it (3 s) made the run cancelled, which nobody asked for. Now
    wait() sends the recovery again, a new generation, once Redis answers, and every item is scored."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        store = connect(server.url)
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(3000, seed=9))
        sub = submit(data, load_suite(SUITE), store, shard_rows=10)  # 300 shards, one chunk each: sent one by one
        assert store.broker.lpop("cpu") is not None  # the last shard's chunk, lost: its chord never ends
        watcher = _at_recovery(server, sub.run_id, for_s)
        watcher.start()
        worker.start()  # scores the 299 other shards; the recovery's resume then looks up 299 complete ones
        with caplog.at_level(logging.WARNING):
            summary = wait(store, sub.run_id, timeout_s=90, stall_s=2)
        said = [r.getMessage() for r in caplog.records]
        assert watcher.stopped.is_set(), "the stall recovery never wrote its generation"
        assert any("lost Redis (Timeout" in m for m in said), said
        assert any("re-submitting what the stall recovery it cut off left" in m for m in said), said
        assert summary.state == "finished" and store.state(sub.run_id) == "finished"
        assert store.progress(sub.run_id)["done"] == 3000 * 4, "every output scored"
        em = summary.metrics["exact_match"]
        assert summary.items == 3000 and em.errors == 0 and em.n + em.unscorable == 3000
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        worker.stop()
        server.stop()


@pytest.mark.serial  # timed: a hang of 3 s or 7 s against 2 s reads
@pytest.mark.parametrize("for_s", [3.0, 7.0], ids=["back-for-the-failed-write", "hung-past-the-lease-release"])
def test_an_aggregation_in_the_waiting_process_cut_off_by_a_hung_redis_is_tried_again_once_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, for_s: float
) -> None:
    """A cancelled run that no worker serves is aggregated by wait() in its own process. A Redis that stopped
    answering mid-aggregation made it a failed aggregation: one back in time for that write (3 s: the read that
    timed out, 2 s) made the run failed ("aggregate: TimeoutError"); one hung past it and the lease's release too
    (7 s) left the lease held, so every later try skipped ("another worker is aggregating") until the run failed,
    stalled. Now an outage is not a failure: wait() retries once Redis answers, its own lease taken over."""
    from orchestrator import connection, runner
    from orchestrator.runner import cancel

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    monkeypatch.setattr(runner, "CANCELLED_STALL_S", 1.0)
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20000, seed=4)), load_suite(SUITE), store)
        cancel(store, sub.run_id)  # no worker at all: wait() aggregates it here
        watcher = _at_aggregation(server, sub.run_id, for_s)
        watcher.start()
        with caplog.at_level(logging.WARNING):
            summary = wait(store, sub.run_id, timeout_s=150)
        said = [r.getMessage() for r in caplog.records]
        assert watcher.stopped.is_set(), "no aggregation took its lease"
        assert any("lost Redis (Timeout" in m for m in said), said
        left = any("its lease could not be released" in m for m in said)
        assert left == (for_s > 4.0), said  # hung past the release: the retry took over the lease left held
        assert summary.state == "cancelled" and summary.items == 20000
        assert store.state(sub.run_id) == "cancelled" and not store.meta(sub.run_id).get("error")
        assert not store.r.exists(store.key(sub.run_id, "aggregating:0")), "the lease is released"
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()


def test_a_workers_aggregation_cut_off_by_a_redis_restart_aggregates_again_once_it_answers(tmp_path: Path) -> None:
    """A worker's aggregation that a Redis restart cut off (down for longer than the worker's client retries, ~16 s)
    marked the run failed, though Redis was back seconds later: a detached run ended failed for a blip, and only
    `ragscore resume` wrote its summary. Now the worker waits the outage out and aggregates again, its own lease
    (left held) taken over, and the run finishes."""
    server = RedisProcess(tmp_path / "redis", "--appendonly", "yes").start()  # a restart keeps every item
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(3000, seed=6)), load_suite(SUITE), store)
        lease = RunStore.key(sub.run_id, "aggregating:0")
        watcher = redis.Redis(port=server.port, decode_responses=True)
        deadline = time.monotonic() + 300
        while not watcher.exists(lease):  # the moment the worker's aggregation takes its lease
            assert time.monotonic() < deadline, "no aggregation took its lease"
            time.sleep(0.001)
        # the aggregation's next call waits (it cannot finish in the ~100 ms a SIGTERM'd Redis serves on: CI's
        # aggregation did, and was never cut off); Redis still stops on its timer
        watcher.execute_command("CLIENT", "PAUSE", "60000", "ALL")
        server.stop()  # SIGTERM: Redis writes its AOF and exits, mid-aggregation

        # down until the worker's client retries (~21 s) gave up and its aggregation says it waits: a fixed sleep
        # raced them (an aggregation that paused between two calls started its retries later, and rode the outage out)
        cut_off, home = f"aggregate of run {sub.run_id} cut off: Redis did not answer", tmp_path / "home"
        assert until(lambda: _worker_said(home, cut_off), 180), "the aggregation was not cut off by the outage"
        server.start()  # same port, same data
        assert until(lambda: store.state(sub.run_id) in ("finished", "failed"), 120), store.state(sub.run_id)
        assert store.state(sub.run_id) == "finished", store.meta(sub.run_id).get("error")
        summary = store.finished_summary(sub.run_id, **summary_commands(sub.run_id, None, None))
        em = summary.metrics["exact_match"]
        assert summary.items == 3000 and em.errors == 0 and em.n + em.unscorable == 3000
        assert store.progress(sub.run_id)["done"] == 3000 * 4, "every output scored"
        assert until(lambda: not store.r.exists(lease), 30), "the lease is released (once the run's keys are settled)"
        assert _worker_said(home, "Redis answers again; aggregating it again"), "the worker's own aggregation, again"
    finally:
        worker.stop()
        server.stop()


@pytest.mark.serial  # timed: a 3 s hang against 2 s reads
def test_a_workers_aggregation_cut_off_by_a_redis_hung_past_its_bound_marks_the_run_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's aggregation waits an outage out for ``REDIS_OUTAGE_S`` (0 here: given up at once); past it, the
    run is marked failed, as before: its message is acked on failure, and a detached run has no wait(); left
    unmarked, such a run stayed "aggregating" for ever. Marked failed, its error says why and `ragscore resume`
    writes its summary."""
    from orchestrator import connection
    from ragscore_workers import tasks

    monkeypatch.setattr(tasks, "REDIS_OUTAGE_S", 0.0)
    server = RedisProcess(tmp_path / "redis").start()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # a worker's read that times out, soon
            store = connect(server.url)
        sub = _cancelled(store, tmp_path)
        watcher = _at_aggregation(server, sub.run_id, 3.0)  # back in time for the failure's write
        watcher.start()
        with pytest.raises(redis.TimeoutError):
            tasks.aggregate_in(store, sub.run_id, store.generation(sub.run_id))  # as the worker's task calls it
        assert watcher.stopped.is_set(), "no aggregation took its lease"
        assert (store.meta(sub.run_id).get("error") or "").startswith("aggregate: TimeoutError")
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        server.stop()


def test_an_aggregation_whose_lease_another_aggregator_took_stops_without_writing_its_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregation renewed its lease with a plain EXPIRE: one whose lease had lapsed (a pause longer than the
    lease) and that a re-delivered copy of its message had taken since renewed the copy's lease as its own, and both
    wrote the summary. Now a renewal checks the owner, and the aggregation that lost its lease leaves the run to the
    aggregator that holds it."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        # the moment the aggregation takes its lease, another aggregator holds it (it lapsed; a copy took it)
        run_id, lease, said = _aggregated_while(
            store, tmp_path, server, caplog, lambda r, lease: r.set(lease, "copy", xx=True, ex=120)
        )
        assert store.summary(run_id) is None and store.state(run_id) == "cancelled", "left to the copy"
        assert store.r.get(lease) == "copy", "the copy's lease is neither renewed nor released by the other"
        assert any("another aggregator holds it now" in m for m in said), said
    finally:
        server.stop()


def test_an_aggregation_whose_lease_lapsed_with_nobody_holding_it_takes_it_back_and_writes_its_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregation that paused longer than its lease, and that no copy of its message took meanwhile, takes its
    lease back at its next renewal and goes on: it writes the summary, and releases the lease at the end."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        # the moment the aggregation takes its lease, the lease lapses (a pause longer than it) and nobody takes it
        run_id, lease, said = _aggregated_while(store, tmp_path, server, caplog, lambda r, lease: r.delete(lease))
        assert any("its lease had lapsed; taken back" in m for m in said), said
        summary = store.summary(run_id)
        assert summary is not None and store.summary_is_current(run_id), "the aggregation went on to the end"
        assert store.state(run_id) == "cancelled"
        assert store.r.exists(lease) == 0, "the lease taken back is released at the end"
    finally:
        server.stop()


def test_an_aggregation_whose_lease_lapsed_while_a_copy_wrote_the_summary_does_not_write_it_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An aggregation paused longer than its lease; a re-delivered copy of its message took the lease, wrote the
    summary and released the lease. The aggregation found its lease free and took it back, and wrote the summary a
    second time (and settled the run's keys again). Now it sees the summary written meanwhile and stops."""
    from orchestrator.runner import cancel
    from ragscore_workers.tasks import aggregate_in

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        # what the copy wrote: a real summary (of a small run like it, aggregated to the end beforehand)
        small = submit(write_jsonl(tmp_path / "s.jsonl", make_rows(10, seed=5)), load_suite(SUITE), store)
        cancel(store, small.run_id)
        aggregate_in(store, small.run_id, store.generation(small.run_id))
        written = store.summary(small.run_id)
        assert written is not None
        sub = _cancelled(store, tmp_path)
        copied = written.model_copy(update={"run_id": sub.run_id})
        lease = store.key(sub.run_id, "aggregating:0")
        watcher = redis.Redis(port=server.port, decode_responses=True)
        finished: list[str] = []

        def copy_finishes() -> None:  # the lease lapses; a copy takes it, writes the summary, releases it
            if until(lambda: watcher.delete(lease), 60):
                store.save_summary(sub.run_id, copied, 0)
                finished.append(store.meta(sub.run_id)["finished_at"])

        copy = threading.Thread(target=copy_finishes)
        copy.start()
        with caplog.at_level(logging.WARNING):
            aggregate_in(store, sub.run_id, store.generation(sub.run_id))  # as the worker's task calls it
        copy.join(60)
        said = [r.getMessage() for r in caplog.records]
        assert finished, "the copy wrote its summary"
        assert store.meta(sub.run_id)["finished_at"] == finished[0], f"the summary was written again: {said}"
        assert store.summary(sub.run_id) == copied.model_copy(update={"state": "cancelled"})
        assert any("its summary was written meanwhile" in m for m in said), said
        assert not any("taken back" in m for m in said), said
        assert store.r.exists(lease) == 0, "the lease is released"
    finally:
        server.stop()


def test_a_workers_chunk_waits_out_a_redis_hung_past_redis_pys_own_timeout_and_writes_its_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers' Redis client kept redis-py's own timeouts: 5 s a reply since redis-py 8, retried CLIENT_RETRIES
    times (~65 s with 8). A Redis hung longer (SIGSTOP here: connections open, nothing answers) made a chunk's call
    raise TimeoutError: the task failed, its shard's chord never ended, and a detached run stayed running. Now a
    worker waits RAGSCORE_WORKER_STORE_TIMEOUT_S (a minute) per reply, and the chunk, run as the worker's task runs
    it, ends once Redis answers, its items written. One retry here (5 s + 0.2 s + 5 s with redis-py's timeout), so
    the hang is 15 s, not over a minute."""
    from ragscore_workers import store as store_module
    from ragscore_workers import tasks

    monkeypatch.setattr(store_module, "CLIENT_RETRIES", 1)
    server = RedisProcess(tmp_path / "redis").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", server.url)
    tasks.get_store.cache_clear()  # the worker's own store client, on this Redis
    assert server.proc is not None
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(25, seed=7)), load_suite(SUITE), store)
        rows = [{k: v for k, v in r.items() if k != "group"} for r in make_rows(25, seed=7)]
        suite_json = store.meta(sub.run_id)["suite"]
        tasks.get_store().r.ping()  # its connection is open before Redis hangs, as a worker's is mid-run
        server.proc.send_signal(signal.SIGSTOP)
        timer = threading.Timer(15.0, server.proc.send_signal, (signal.SIGCONT,))  # past redis-py's ~10 s here
        timer.daemon = True  # a test that ends first sends SIGCONT itself
        timer.start()
        scored = tasks.score_chunk("cpu", sub.run_id, suite_json, ["exact_match", "recall_at_k"], rows)
        timer.join()
        assert scored["new"] == 25 * 4, scored  # exact_match; recall_at_k: recall_at_1, recall_at_5, mrr
        assert store.progress(sub.run_id)["done"] == 25 * 4
    finally:
        server.proc.send_signal(signal.SIGCONT)
        tasks.get_store.cache_clear()
        server.stop()


class _OnLog(logging.Handler):
    """Runs ``then`` once, when a record saying ``words`` is logged (a step of the code under test, not a timer)."""

    def __init__(self, words: str, then: Callable[[], object]) -> None:
        super().__init__(logging.WARNING)
        self.words, self.then, self.seen = words, then, 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.seen += 1
            if self.seen == 1:
                self.then()


def _run_chunk_until_log(args: list, words: str, then: Callable[[], object]) -> tuple[Any, _OnLog]:
    """Runs the cpu chunk task eagerly with ``then`` called when its log says ``words``: the result and the hook."""
    from ragscore_workers import tasks

    hook = _OnLog(words, then)
    logging.getLogger(tasks.__name__).addHandler(hook)
    try:
        return tasks.score_task["cpu"].apply(args=args), hook
    finally:
        logging.getLogger(tasks.__name__).removeHandler(hook)


@contextmanager
def _chunk_on_paused_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunStore, str, list]]:
    """A submitted run, its Redis pausing every write (CLIENT PAUSE WRITE: connections open, writes never answered),
    and the worker's store client on it waiting 1 s a reply, not retried: its chunk's first write raises
    TimeoutError, as a hang past the whole wait (~9.5 min) does. Yields the store, the run and the chunk's args."""
    from ragscore_workers import store as store_module
    from ragscore_workers import tasks

    monkeypatch.setattr(store_module, "CLIENT_RETRIES", 0)
    monkeypatch.setenv("RAGSCORE_WORKER_STORE_TIMEOUT_S", "1")
    server = RedisProcess(tmp_path / "redis").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", server.url)
    tasks.get_store.cache_clear()
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(25, seed=7)), load_suite(SUITE), store)
        rows = [{k: v for k, v in r.items() if k != "group"} for r in make_rows(25, seed=7)]
        args = [sub.run_id, store.meta(sub.run_id)["suite"], ["exact_match", "recall_at_k"], rows]
        store.r.client_pause(600_000, all=False)
        yield store, sub.run_id, args
    finally:
        store.r.client_unpause()
        tasks.get_store.cache_clear()
        server.stop()


def test_a_chunk_whose_redis_write_fails_is_sent_again_and_its_items_are_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose own write failed on Redis (a hang past the worker's whole wait) raised: Celery failed its
    shard's chord, the aggregation never ran, and a detached run stayed running until a resume. Now the chunk task
    sends itself again (run eagerly here: the retry runs at once); Redis answers again once the first try says so,
    and the second try writes every item, each counted once."""
    from ragscore_workers import tasks

    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        result, unpause = _run_chunk_until_log(args, "sending it again", store.r.client_unpause)
        assert result.successful(), result.traceback
        assert unpause.seen == 1, "one retry"
        assert store.progress(run_id)["done"] == 25 * 4  # exact_match; recall_at_1, recall_at_5, mrr
        assert tasks.score_task["cpu"].apply(args=args).get()["new"] == 0  # sent again: nothing counted twice
        assert store.progress(run_id)["done"] == 25 * 4


def test_a_real_workers_chunk_whose_store_writes_hang_is_sent_again_and_the_run_finishes_each_item_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chunk retry on a real `celery worker`, its store client waiting RAGSCORE_WORKER_STORE_TIMEOUT_S=1 s a
    reply: its run store (a Redis apart from its broker) pauses every write (CLIENT PAUSE WRITE: connections open,
    writes never answered) before the worker takes the run's chunk. The chunk's writes time out past its client's
    retries (~30 s), the worker sends it again, Redis answers once the worker says so, and the retry finishes the run,
    every item scored once."""
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    worker = WorkerProcess(broker.url, "cpu", tmp_path / "home", concurrency=1)
    worker.env["RAGSCORE_WORKER_STORE_TIMEOUT_S"] = "1"
    paused = redis.Redis(port=store_server.port)
    try:
        store = connect(broker.url, get_settings(), sends=True)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(25, seed=7)), load_suite(SUITE), store)
        paused.client_pause(600_000, all=False)
        worker.start()
        sent_again = f"run {sub.run_id}: a chunk on cpu could not use Redis"
        assert until(lambda: _worker_said(tmp_path / "home", sent_again), 300), "the chunk was not sent again"
        paused.client_unpause()
        assert until(lambda: store.state(sub.run_id) in ("finished", "failed"), 300), store.state(sub.run_id)
        assert store.state(sub.run_id) == "finished", store.meta(sub.run_id).get("error")
        assert store.progress(sub.run_id)["done"] == 25 * 4, "every output once"
        summary = store.finished_summary(sub.run_id, **summary_commands(sub.run_id, None, None))
        em = summary.metrics["exact_match"]
        assert summary.items == 25 and em.errors == 0 and em.n + em.unscorable == 25
        assert not _worker_said(tmp_path / "home", "(retry 2 of"), "sent again once"
    finally:
        paused.client_unpause()
        worker.stop()
        broker.stop()
        store_server.stop()


@pytest.mark.parametrize("retries", [1, 4])  # 4: above Celery's own bound of a task's retries (max_retries=3)
def test_a_chunk_that_cannot_write_after_its_retries_marks_the_run_failed_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, retries: int
) -> None:
    """Past its retries the chunk gives up: the run is failed with the error `ragscore status` shows, not left
    running (its chord unfinished) for ever. Redis answers again once the chunk says it gives up."""
    from ragscore_workers import tasks

    monkeypatch.setattr(tasks, "CHUNK_RETRIES", retries)
    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        result, _ = _run_chunk_until_log(args, "scores them again", store.r.client_unpause)
        assert result.failed()
        meta = store.meta(run_id)
        assert meta["state"] == "failed", meta
        assert meta["error"].startswith(
            "a chunk on cpu could not write its items: Redis did not answer "
            f"(TimeoutError: Timeout reading from socket), {retries + 1} tries"
        ), meta["error"]


def test_a_retried_chunk_is_not_taken_for_one_whose_process_died(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk whose Redis calls failed cannot forget its items' deliveries, nor a careful try's mark on the item it
    was scoring (left here as a careful try whose end Redis lost leaves them): its retry scored carefully and failed
    that item as the one its process died on. The retry forgets them: every item is scored, no mark is left."""
    from ragscore_workers.schemas import item_key

    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        keys = [item_key(r.get("system"), str(r["id"])) for r in args[3]]

        def answer_with_a_mark_left() -> None:
            store.r.client_unpause()
            store.start_delivery(run_id, "cpu", keys)
            store.mark_scoring(run_id, "cpu", keys[0], True)

        result, _ = _run_chunk_until_log(args, "sending it again", answer_with_a_mark_left)
        assert result.successful(), result.traceback
        errors = [f for fields in store.item_fields(run_id, keys) for f in fields.values() if "died" in f]
        assert not errors, errors
        assert store.progress(run_id)["done"] == 25 * 4
        assert not store.marked_scoring(run_id, "cpu", keys)


def test_a_retry_delivered_again_after_its_process_died_still_counts_that_death(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried chunk forgets its earlier try's deliveries once: the same retry delivered again after its process
    died (a kill -9: task_reject_on_worker_lost sends it again as it was) is scored carefully and fails the item its
    process died on, where forgetting them on every delivery would let that item kill a process for ever."""
    from ragscore_workers import tasks
    from ragscore_workers.schemas import item_key

    with _chunk_on_paused_writes(tmp_path, monkeypatch) as (store, run_id, args):
        store.r.client_unpause()
        keys = [item_key(r.get("system"), str(r["id"])) for r in args[3]]
        # what the retry's first two deliveries left: the first forgot the try before and died scoring the chunk,
        # the second (careful) died on the first item
        store.forget_deliveries(run_id, "cpu", keys, "t1:1")
        store.start_delivery(run_id, "cpu", keys)
        store.start_delivery(run_id, "cpu", keys)
        store.mark_scoring(run_id, "cpu", keys[0], True)
        result = tasks.score_task["cpu"].apply(args=args, task_id="t1", retries=1)
        assert result.successful(), result.traceback
        first, *rest = store.item_fields(run_id, keys)
        outputs = [f for name, f in first.items() if name != "_meta"]
        assert outputs and all("worker process died while scoring this item" in f for f in outputs), first
        assert not [f for fields in rest for f in fields.values() if "died" in f]
