"""A run whose embed worker loads its model, then encodes its first chunk, says so, not "no progress" (a real embed
worker process loading the real all-MiniLM-L6-v2, real Redis): the load (20 s on a CPU, minutes on a cold GPU host)
and the first chunk's encoding read as a hang. The note a worker leaves expires when it is killed mid-load (a real
SIGKILL)."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis

import orchestrator.progress as progress
from orchestrator.progress import PlainProgress, chunk_counts
from orchestrator.runner import connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers import model_loading
from ragscore_workers.store import LOADING_PART, RunState, RunStore, redis_client

from ..support import ROOT, RedisProcess, WorkerProcess, closed_port, next_line, status_text, until, write_jsonl

#: Generous bounds for a slow CI machine: a worker's boot and its first task.
BOOT_S = 300
LOADING = "embed: loading all-MiniLM-L6-v2 on cpu ("
#: Enough distinct texts in one chunk that their encoding lasts many of the test's polls on a fast CPU too (~3 s on a
#: laptop's 2 cores, a few tenths of a second on 16).
ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "answer": f"answer {i} of the many answers this run scores",
         "reference": f"reference {i} that each answer is set against"} for i in range(1000)]  # fmt: skip
ENCODING = f"embed: encoding {2 * len(ROWS):,} texts"


@pytest.mark.integration
def test_a_run_whose_embed_worker_loads_its_model_then_encodes_says_so_before_its_first_item_is_scored(
    tmp_path: Path, redis_server: RedisProcess, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)  # a plain line at every poll: none missed
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "embed", home, concurrency=1).start()
    out = io.StringIO()
    view = PlainProgress(out)
    said: dict[str, str] = {}

    def both_said() -> bool:
        counters, status = store.progress(run_id), status_text(store, run_id)
        view.update(counters)
        line = out.getvalue().splitlines()[-1] if out.getvalue() else ""
        for name, text in (("status", status), ("line", line)):
            for doing in (LOADING, ENCODING):
                if doing in text and counters.get("done", 0) == 0:  # said before its first item is scored
                    said.setdefault(f"{name} {doing}", text)
        return len(said) == 4 or counters.get("done", 0) > 0

    try:
        suite = {"name": "loading", "metrics": ["answer_correctness"], "chunk_size": {"embed": len(ROWS)},
                 "embedding": {"device": "cpu", "cache": False}}  # fmt: skip
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), load_suite(suite), store).run_id
        view.start(run_id)
        assert until(both_said, BOOT_S) and len(said) == 4, (sorted(said), out.getvalue(), status_text(store, run_id))
        assert not any("no progress" in text for text in said.values()), said
        summary = wait(store, run_id, timeout_s=BOOT_S)
    finally:
        worker.stop()
    assert summary.state == RunState.FINISHED and summary.metrics["answer_correctness"].errors == 0
    assert not [key for key in store.progress(run_id) if key.startswith("load")]  # the notes went with their work


#: The in-chunk count the bar's and ``ragscore status``'s tallies show while the chunk's texts encode.
CHUNK_DONE = re.compile(rf"embed chunk ([\d,]+)/{2 * len(ROWS):,} texts encoded")
#: The count of the chunk's texts done in a worker's note (:func:`ragscore_workers.embedding._encode_missing`).
NOTE_DONE = re.compile(rf"encoding {2 * len(ROWS):,} texts: ([\d,]+) done")
#: One torch thread in the worker: its chunk's encoding lasts some seconds (~5 s on one core) on a many-core host too,
#: against the note's writes at most every RETELL_S (0.5 s); it took a few tenths of a second on 16 cores.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _record_counts(url: str, written: list[str], stop: threading.Event) -> None:
    """Every count of the chunk's texts done that a worker writes in its note, as Redis runs the writes (MONITOR: none
    missed between two polls of the views), until ``stop`` or the Redis stops (the test's own: MONITOR slows and sees
    every client of the server)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        with client.monitor() as monitor:
            for command in monitor.listen():
                if stop.is_set():
                    return
                if command["command"].upper().startswith("HSET") and (found := NOTE_DONE.search(command["command"])):
                    written.append(found[1])
    except redis.ConnectionError:  # the test's Redis stopped
        return
    finally:
        client.close()


@pytest.mark.integration
def test_the_bar_and_status_count_a_big_chunks_texts_encoded_before_the_chunk_ends(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One chunk of 2,000 texts: the worker's note counts them as it encodes, more than one count short of the whole
    (it sat still, then jumped), and the bar's line and ``ragscore status`` say a count short of the whole before the
    chunk's first item is scored. The worker's writes are recorded as Redis runs them, not polled: on a fast host
    the views' polls caught fewer counts than it wrote (two were asked of them)."""
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)  # a plain line at every poll: none missed
    redis_server = RedisProcess(tmp_path / "redis").start()  # its own: MONITOR sees only this test's commands
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "embed", home, concurrency=1)
    worker.env |= ONE_THREAD
    worker.start()
    written: list[str] = []
    stop = threading.Event()
    recorder = threading.Thread(target=_record_counts, args=(redis_server.url, written, stop), daemon=True)
    recorder.start()
    out = io.StringIO()
    view = PlainProgress(out)
    seen: dict[str, set[int]] = {"line": set(), "status": set()}
    whole = 2 * len(ROWS)

    def scored() -> bool:
        counters, status = store.progress(run_id), status_text(store, run_id)
        view.update(counters)
        line = out.getvalue().splitlines()[-1] if out.getvalue() else ""
        if counters.get("done", 0) > 0:
            return True
        for name, text in (("line", line), ("status", status)):
            seen[name] |= {int(found[1].replace(",", "")) for found in CHUNK_DONE.finditer(text)}
        return False

    try:
        suite = {"name": "steps", "metrics": ["answer_correctness"], "chunk_size": {"embed": len(ROWS)},
                 "embedding": {"device": "cpu", "cache": False}}  # fmt: skip
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), load_suite(suite), store).run_id
        view.start(run_id)
        assert until(scored, BOOT_S), (seen, out.getvalue())
        summary = wait(store, run_id, timeout_s=BOOT_S)
    finally:
        stop.set()
        worker.stop()
        redis_server.stop()  # ends the recorder's MONITOR
        recorder.join(60)
    assert not recorder.is_alive()
    counts = {int(count.replace(",", "")) for count in written}
    assert len({n for n in counts if n < whole}) >= 2, written
    assert all({n for n in shown if n < whole} for shown in seen.values()), (seen, written)
    assert summary.state == RunState.FINISHED and summary.metrics["answer_correctness"].errors == 0


@pytest.mark.integration
def test_two_workers_chunks_encoding_at_once_are_counted_together_and_once(
    tmp_path: Path, redis_server: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two embed workers (two threads' real notes, real Redis) encode a chunk of 2,000 texts each: the bar and
    ``ragscore status`` said one of them (``embed chunk 512/2,000 texts encoded``) and said it twice while the note
    showed (``embed: encoding 2,000 texts: 512 done (1 s)`` as well). They say the sum over both, once."""
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    monkeypatch.setattr(model_loading, "RETELL_S", 0.05)  # each retelling written soon: the test waits less
    store = connect(redis_server.url)
    suite = {"name": "two", "metrics": ["answer_correctness"], "embedding": {"device": "cpu", "cache": False}}
    run_id = submit(write_jsonl(tmp_path / "d.jsonl", ROWS[:10]), load_suite(suite), store).run_id  # no worker takes it
    client = redis_client(redis_server.url)
    told, release = threading.Barrier(3), threading.Event()

    def worker(done: int) -> None:
        with model_loading.noting(client, run_id, "embed", "encoding 2,000 texts") as retell:
            retell(f"encoding 2,000 texts: {done:,} done")
            told.wait(60)
            release.wait(300)  # till the test ends

    threads = [threading.Thread(target=worker, args=(done,), daemon=True) for done in (512, 768)]
    for thread in threads:
        thread.start()
    try:
        told.wait(60)
        summed = "embed 2 chunks: 1,280/4,000 texts encoded"
        assert until(lambda: chunk_counts(store.progress(run_id)) == summed, 30), chunk_counts(store.progress(run_id))
        out = io.StringIO()
        view = PlainProgress(out)
        view.start(run_id)
        view.update(store.progress(run_id))
        for said in (out.getvalue().splitlines()[-1], status_text(store, run_id)):
            assert summed in said and said.count("512") + said.count("768") == 0, said
            assert "embed: encoding 2,000 texts (" in said, said  # the note, its count not said again
    finally:
        release.set()
        for thread in threads:
            thread.join(60)


#: A process that notes a load of run argv[2] on the store argv[1] (its note's TTL 2 s, a beat each 0.2 s), says
#: "loading" and never ends it.
_LOADER = """
import sys, time
from ragscore_workers import model_loading
from ragscore_workers.store import redis_client
model_loading.LOAD_TTL_S, model_loading.LOAD_BEAT_S = 2.0, 0.2
with model_loading.noting(redis_client(sys.argv[1]), sys.argv[2], "embed", "loading big-model on cuda:0"):
    print("loading", flush=True)
    time.sleep(3600)
"""


def test_the_note_of_a_worker_killed_mid_load_expires(redis_server: RedisProcess) -> None:
    """Its beats keep the note past its TTL while it loads; killed (no `finally` runs), the note goes within its TTL:
    "loading" is not said for ever."""
    store, run_id = connect(redis_server.url), f"r{uuid.uuid4().hex[:8]}"
    loader = subprocess.Popen([sys.executable, "-c", _LOADER, redis_server.url, run_id], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert loader.stdout is not None and next_line(loader.stdout, 180) == "loading\n"
        # written by the block's writer thread, soon after the block began
        assert until(lambda: store.progress(run_id).get("load_of:embed:loading big-model on cuda:0") == 1, 60)
        # beaten on past three of its TTLs: still said
        assert until(lambda: store.progress(run_id).get("load_ms:embed", 0) > 6_000, 120), store.progress(run_id)
    finally:
        os.kill(loader.pid, signal.SIGKILL)
        loader.wait(30)
    assert until(lambda: "load_ms:embed" not in store.progress(run_id), 60), store.progress(run_id)


def test_a_load_that_fails_while_redis_is_down_raises_its_own_error_not_one_chained_to_redis() -> None:
    """The note is lost with Redis, never the load; and the load's own error is what is said: it was raised inside
    the handler of Redis's (`During handling of the above exception ... ConnectionError`), read as Redis's fault."""
    with closed_port() as port:
        client = redis.Redis(port=port, socket_connect_timeout=1)
        with pytest.raises(ValueError, match="no such model") as raised:
            with model_loading.noting(client, "r1", "embed", "loading big-model on cpu"):
                raise ValueError("no such model")
    assert raised.value.__context__ is None, repr(raised.value.__context__)


#: Generous bound on a noted block that does nothing but retell its note (a worker's client waits out a hung Redis for a
#: minute a try: ``RAGSCORE_WORKER_STORE_TIMEOUT_S``).
BLOCK_S = 30


@pytest.mark.serial  # timed: the block ends within BLOCK_S (30 s), not the client's 60 s timeout a try
@pytest.mark.parametrize("stopped", ["before the block", "during the block"])
def test_a_noted_block_never_waits_on_a_redis_that_does_not_answer(tmp_path: Path, stopped: str) -> None:
    """A chunk's encoding waited for a hung Redis (SIGSTOP: connections open, nothing answers): the note's first write,
    the wait for its beat thread's write and its clearing ran on the block's thread, each for the client's timeout and
    retries (minutes). The note is best-effort: the block ends while the Redis is still hung."""
    server = RedisProcess(tmp_path / "redis").start()
    client = redis_client(server.url)  # a worker's client: its timeout, its retries
    store, run_id = connect(server.url), f"r{uuid.uuid4().hex[:8]}"
    ended = threading.Event()
    hung = threading.Event()

    def block() -> None:
        with model_loading.noting(client, run_id, "embed", "encoding 2,000 texts") as retell:
            hung.wait()
            retell("encoding 2,000 texts: 512 done")
        ended.set()

    assert server.proc is not None
    try:
        if stopped == "before the block":
            server.proc.send_signal(signal.SIGSTOP)
        threading.Thread(target=block, daemon=True).start()
        if stopped == "during the block":
            assert until(lambda: "load_ms:embed" in store.progress(run_id), 60), store.progress(run_id)
            server.proc.send_signal(signal.SIGSTOP)
        hung.set()
        assert ended.wait(BLOCK_S), f"the block waited on the hung Redis ({stopped})"
    finally:
        server.proc.send_signal(signal.SIGCONT)
        try:  # its writer ends once the Redis answers: none left to hold a later test's place
            assert until(lambda: _writers() == 0, 120), _writers()
        finally:
            server.stop()


def _writers() -> int:
    """The note writer threads alive in this process (:func:`ragscore_workers.model_loading.noting`)."""
    return sum(thread.name == "worker-note-beat" for thread in threading.enumerate())


def test_a_worker_encoding_many_chunks_through_a_hung_redis_keeps_a_bounded_number_of_note_writers(
    tmp_path: Path,
) -> None:
    """Each block's writer waits out a hung Redis (SIGSTOP) for the client's timeout and retries: a worker encoding
    short chunks through the outage started one per chunk, each holding a connection of the store's pool. At most
    ``MAX_NOTE_WRITERS`` live; once the Redis answers again, every one ends."""
    server = RedisProcess(tmp_path / "redis").start()
    client = redis_client(server.url)  # a worker's client: its timeout, its retries
    run_id = f"r{uuid.uuid4().hex[:8]}"
    assert server.proc is not None
    # an earlier test's writer in this process (the file runs in one) ends once its last write is answered or refused
    assert until(lambda: _writers() == 0, 120), f"{_writers()} writers of earlier tests still alive"
    most = 0
    try:
        server.proc.send_signal(signal.SIGSTOP)
        for _ in range(2 * model_loading.MAX_NOTE_WRITERS + 1):
            with model_loading.noting(client, run_id, "embed", "encoding 16 texts") as retell:
                retell("encoding 16 texts: 8 done")
            most = max(most, _writers())
    finally:
        server.proc.send_signal(signal.SIGCONT)
    try:
        assert most == model_loading.MAX_NOTE_WRITERS, most
        assert until(lambda: _writers() == 0, 120), _writers()
        # each cleared its own note after its late write: none left behind
        key = RunStore.key(run_id, LOADING_PART)
        assert until(lambda: not client.hgetall(key), 30), client.hgetall(key)
    finally:
        client.close()
        server.stop()


class _Stamped(io.StringIO):
    """A stream noting when each progress line was written (this host's monotonic clock)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.lines += [(time.monotonic(), line) for line in text.splitlines() if line]
        return super().write(text)


@pytest.mark.integration
@pytest.mark.serial  # timed: the first ETA against the time the run then took
def test_the_first_eta_after_the_model_load_is_close_to_the_time_the_run_then_took(
    tmp_path: Path, redis_server: RedisProcess, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real embed worker loads the real all-MiniLM-L6-v2, then scores 25 chunks: the first ETA shown took the
    model's load for the first chunk's pace (ETA 94 s where 4 s were left, in a recorded run). It waits for a later
    chunk, and is shorter than the one that pace gave: its units left over the rate its line said. Not a ratio to the
    time the run then took: on a loaded host the chunks' pace varied so much (that time 3 to 30 s) that the first ETA
    read 7.6 times it with the change and 8.3 without."""
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "embed", home, concurrency=1).start()
    out = _Stamped()
    try:
        suite = {"name": "eta", "metrics": ["answer_correctness"], "chunk_size": {"embed": 16},
                 "embedding": {"device": "cpu", "cache": False}}  # fmt: skip
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", ROWS[:400]), load_suite(suite), store).run_id
        summary = wait(store, run_id, progress=PlainProgress(out), timeout_s=BOOT_S)
    finally:
        worker.stop()
    assert summary.state == RunState.FINISHED
    said = [m.groups() for _, line in out.lines if (m := re.search(r" ([\d,]+)/400 .* ([\d.]+)/s ETA (\S+)", line))]
    first_done, first_rate, _ = next((int(d.replace(",", "")), float(r), e) for d, r, e in said if d != "0")
    done, eta = next((int(d.replace(",", "")), int(e[:-1])) for d, _, e in said if re.fullmatch(r"\d+s", e))
    assert done > first_done and eta < (400 - first_done) / first_rate, (first_done, first_rate, out.getvalue())
