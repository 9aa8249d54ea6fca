"""Faults: a Redis that dies, restarts without the run, or hangs (SIGSTOP): the run restarts it, says it lost the run,
or says an outage and finishes once it answers."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

from orchestrator.runner import connect, run, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.errors import BrokerError, RunLostError
from ragscore_workers.store import RunStore, redis_client

from ..support import (
    ROOT,
    HookedProgress,
    RedisProcess,
    WorkerProcess,
    lines_until,
    make_rows,
    until,
    write_jsonl,
)
from .faults import SUITE

pytestmark = pytest.mark.integration  # timed assertions only are marked serial (see .faults)


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


#: The start of ``ragscore run``'s progress lines: its first is printed once the run is submitted and its wait began.
PROGRESS_LINE = "item×metric outputs ("


def _restarted_once_waiting(proc: subprocess.Popen[str], server: RedisProcess) -> str:
    """Restart ``server`` (no persistence: it forgets every run) once ``proc``, a ``ragscore run`` on it that no worker
    serves, printed its first progress line: submitted, its last write done, it waits. Everything it wrote on stderr
    once it ended."""
    assert proc.stderr is not None
    before = "".join(lines_until(proc.stderr, PROGRESS_LINE, timeout=300))
    assert proc.poll() is None, before
    server.stop()
    server.start()
    _, rest = proc.communicate(timeout=300)
    return before + rest


def test_a_run_its_redis_forgot_fails_saying_so_with_exit_1(tmp_path: Path) -> None:
    """A Redis restarted without persistence has lost a cluster run mid-wait. The wait used to read it as
    bad input ("No run ... in the store", exit 2, "stopped before anything was submitted") once it looked
    stalled; it now says what happened, at once, with the run-failed exit code."""
    server = RedisProcess(tmp_path / "redis").start()  # no persistence: a restart forgets everything
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(50))
    out = tmp_path / "out"
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home")}
    args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out", str(out)]
    proc = subprocess.Popen([*args, "--broker", server.url], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        stderr = _restarted_once_waiting(proc, server)
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


class _SwallowOnce:
    """A TCP relay to a redis-server that, once ``armed``, swallows the first command naming ``command`` (never sent
    on, never answered: a Redis that stops answering at that read, its client's read timeout ends it), then relays
    every byte again, on new connections."""

    def __init__(self, port: int, command: bytes) -> None:
        self.port, self.command = port, command
        self.armed, self.swallowed = threading.Event(), threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):  # closed: the test is over
            while True:
                client, _ = self.listener.accept()
                server = socket.create_connection(("127.0.0.1", self.port))
                threading.Thread(target=self._relay, args=(client, server, True), daemon=True).start()
                threading.Thread(target=self._relay, args=(server, client, False), daemon=True).start()

    def _relay(self, source: socket.socket, sink: socket.socket, asks: bool) -> None:
        with suppress(OSError), source, sink:
            while data := source.recv(65536):
                if asks and self.armed.is_set() and not self.swallowed.is_set() and self.command in data.upper():
                    self.swallowed.set()  # this connection answers nothing more: its client drops it
                    while source.recv(65536):
                        pass
                    return
                sink.sendall(data)

    def close(self) -> None:
        self.listener.close()


def test_a_redis_that_stops_answering_as_a_poll_checks_for_a_lost_run_is_an_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A poll whose later read found the run's meta gone asks whether the run is still in the store; a Redis that
    stopped answering at that question ended wait() with redis-py's raw TimeoutError, past the outage handling every
    other read of the poll has (said, retried for up to REDIS_OUTAGE_S). It is an outage: said, retried, and once
    Redis answers the run is found lost. Seen failing before: redis.exceptions.TimeoutError: Timeout reading from
    socket (raised out of the ConfigError handler)."""
    server = RedisProcess(tmp_path / "redis").start()
    relay = _SwallowOnce(server.port, b"EXISTS")
    try:
        submitted = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(50)), load_suite(SUITE), submitted)  # no worker
        store = RunStore(redis_client(relay.url, read_timeout_s=2.0), ttl_s=3600)  # its reads through the relay
        updates: list[dict[str, int]] = []

        def flushed_at_the_second(counters: dict[str, int]) -> None:
            """The store loses the run after the second poll read its state, and stops answering at its EXISTS."""
            updates.append(counters)
            if len(updates) == 2:
                submitted.r.flushall()
                relay.armed.set()

        progress = HookedProgress(on_update=flushed_at_the_second)
        with caplog.at_level(logging.WARNING), pytest.raises(RunLostError, match="its Redis lost it"):
            wait(store, sub.run_id, progress, consumer_check_s=0, timeout_s=120)
    finally:
        relay.close()
        server.stop()
    assert relay.swallowed.is_set()  # the poll asked, and was not answered
    said = [r.getMessage() for r in caplog.records]
    assert any("lost Redis (Timeout" in m for m in said), said


def test_a_run_its_redis_lost_is_not_resumed_and_its_out_dir_takes_a_new_run(tmp_path: Path) -> None:
    """After a Redis restarted without persistence lost a run, "run it again" was refused into the same --out
    ("finish it with --resume") and --resume said only "No run in the store": a dead end both ways."""
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
        try:
            said_first = _restarted_once_waiting(first, server)
        finally:
            first.kill()
        lost_id = json.loads((out / "run.json").read_text())["run_id"]
        assert first.returncode == 1, said_first
        resumed = subprocess.run([*cli, "--resume", str(out), "--broker", server.url], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        said = " ".join(resumed.stderr.split())
        assert resumed.returncode == 2, resumed.stderr
        assert f"names run {lost_id}, which cannot be resumed: its Redis lost it" in said, said
        assert "Traceback" not in resumed.stderr
        # A run.json naming a run this store never had (another broker's, or lost unnoticed): what to do, both ways
        never_sent.mkdir()
        (never_sent / "run.json").write_text(json.dumps({"run_id": "20260101-000000-abcdef", "mode": "cluster"}))
        unknown = subprocess.run([*cli, "--resume", str(never_sent), "--broker", server.url], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=300)  # fmt: skip
        said = " ".join(unknown.stderr.split())
        assert unknown.returncode == 2 and "sent to another broker: give that --broker" in said, said
        assert f"delete {never_sent / 'run.json'} and run it again" in said, said
        typo = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", "20260101-000000-abcdee",
                               "--broker", server.url], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
        said = " ".join(typo.stderr.split())  # no run.json to delete (its default --out was never written)
        listed = f"`ragscore status --broker {server.url}` lists the runs this broker has"
        assert typo.returncode == 2 and listed in said, said
        assert "run.json" not in said and "it cannot be resumed; run it again with the same DATASET" in said, said
        again = subprocess.Popen(args, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        try:  # no worker serves it: it is submitted (a new run named in run.json), then waits
            assert again.stderr is not None
            stderr = "".join(lines_until(again.stderr, PROGRESS_LINE, timeout=300))
            assert again.poll() is None, stderr
        finally:
            again.kill()
            again.communicate(timeout=30)
        assert f"named run {lost_id}, which its Redis lost: this run takes its place" in " ".join(stderr.split())
        assert json.loads((out / "run.json").read_text())["run_id"] != lost_id
    finally:
        server.stop()


def test_a_redis_that_accepts_and_never_answers_fails_the_run_in_bounded_time(tmp_path: Path) -> None:
    """A port that accepts connections and never replies (a hung Redis, another service, a proxy holding the
    connection): ``run`` said "retrying for about 20 s" and then waited for ever in its first read."""
    listener = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody ever reads or answers
    port = listener.getsockname()[1]
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out",
            str(tmp_path / "out"), "--broker", f"redis://127.0.0.1:{port}/0"]  # fmt: skip
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home")}
    try:
        # ends (~25 s: its retries, then its reads' timeouts) or hangs for ever: the bound is far, for a loaded host
        done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
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
