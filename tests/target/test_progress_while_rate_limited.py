"""A run whose target calls wait at the shared rate limiter is said to wait on it, not to make no progress (real Redis,
a real target worker process, real HTTP to the fake RAG server). Its progress said "no progress for N s" while every
question waited on the target's ``rpm`` or on the pause after the target's 429."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import orchestrator.progress as progress
from orchestrator.runner import cancel, connect, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.providers import run_state
from ragscore_workers.providers.ratelimit import Wait
from ragscore_workers.providers.run_state import RunJudgeState
from ragscore_workers.store import PAUSED_BY_429, RunState

from ..fakes import FakeRag
from ..fakes.fake_rag import questions
from ..support import RedisProcess, WorkerProcess, status_saying, until, write_jsonl

# serial: waits against a real rpm and 429 pause: timed
pytestmark = [pytest.mark.integration, pytest.mark.serial]

TOKEN = "rag-secret-token-0123456789"
#: Generous bounds for a slow CI machine: a worker's boot, the first call.
BOOT_S = 180


@pytest.mark.parametrize(
    ("system", "path", "rpm", "on", "said"),
    [("exact", "exact", 1, ("target_wait_rpm", 1),
      "waiting on target exact's rate limit (1 RPM): next target call in "),
     ("limited", "limited", None, ("target_wait_pause", PAUSED_BY_429), "paused by target limited's 429 until "),
     (None, "exact", 1, ("target_wait_rpm", 1), "waiting on the target's rate limit (1 RPM): next target call in ")],
)  # fmt: skip
def test_a_run_held_by_its_targets_rate_limit_says_so_not_no_progress(
    tmp_path: Path, redis_server: RedisProcess, monkeypatch: pytest.MonkeyPatch, system: str | None, path: str,
    rpm: int | None, on: tuple[str, int], said: str,
) -> None:  # fmt: skip
    """rpm 1: the first of 4 questions is asked at once, the next a minute later; the ``limited`` system's first reply
    is a 429 with retry-after 120, which pauses every call. Meanwhile the progress and `ragscore status` say so, naming
    the target when it has a ``system`` name (a suite's only target, unnamed, is "the target", not "target target")."""
    monkeypatch.setenv("FAKE_RAG_TOKEN", TOKEN)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "target", tmp_path / "home").start()
    try:
        with FakeRag(token=TOKEN, retry_after_s=120) as rag:
            target = {
                "url": rag.url(path),
                "request": {"question": "{question}"},
                "auth_env": "FAKE_RAG_TOKEN",
                "response": {"answer": "answer"},
                "rpm": rpm,
                "concurrency": 2,
            }
            targets = {"targets": [{"system": system, **target}]} if system is not None else {"target": target}
            suite = {"name": "target-wait", "metrics": ["exact_match"], **targets}
            run_id = submit(write_jsonl(tmp_path / "q.jsonl", questions(4)), load_suite(suite), store).run_id
            assert until(lambda: on[0] in store.progress(run_id), BOOT_S), store.progress(run_id)
            counters = store.progress(run_id)
            assert counters[on[0]] == on[1] and 0 < counters["target_wait_ms"] <= 121_000, counters
            status = status_saying(run_id, redis_server.url, said, BOOT_S)
            assert said in status and "no progress" not in status, status
            cancel(store, run_id)  # its waiting calls stop within a second or so
            assert wait(store, run_id, timeout_s=BOOT_S).state == RunState.CANCELLED
    finally:
        worker.stop()
    assert "target_wait_ms" not in store.progress(run_id)  # an ended run waits on nothing


@pytest.mark.parametrize("write_every_s", [0.0, None], ids=["each-note-written", "process-throttle"])
def test_with_two_targets_one_targets_pause_hides_not_the_others_sooner_call(
    redis_server: RedisProcess, monkeypatch: pytest.MonkeyPatch, write_every_s: float | None
) -> None:
    """Target A's 429 pause (100 s) holds A's calls only: target B's call that waits 3 s on its own rpm is the run's
    next target call, and the note names the target it waits on. Both wrote one note, and the pause replaced B's
    sooner wait ("next target call in 1m40s"), naming neither. Each note written (no throttle), the store's script
    keeps B's wait (a pause is said first of its own target only); with the process's throttle too (a wait of another
    kind or target is written at once, and the script keeps B's)."""
    if write_every_s is not None:
        monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", write_every_s)
    store = connect(redis_server.url)
    run_id = f"w-{uuid.uuid4().hex[:8]}"
    a, b = (RunJudgeState.for_target(store.r, run_id, name, ttl_s=600) for name in ("rag-a", "rag-b"))
    seconds, micros = store.r.time()
    now = seconds * 1000 + micros // 1000
    b.note_wait(Wait("rpm", 60, now + 3_000, now))
    a.note_wait(Wait("pause", 0, now + 100_000, now, "429 from rag-a"))
    counters = store.progress(run_id)
    assert 0 < counters.get("target_wait_ms", 0) <= 3_000 and counters.get("target_wait_rpm") == 60, counters
    said = progress.wait_note(counters)
    assert said.startswith("waiting on target rag-b's rate limit (60 RPM): next target call in "), said


def test_a_targets_pause_is_written_again_at_once_when_the_others_sooner_wait_kept_passed(
    redis_server: RedisProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process, two targets: A's pause noted, then B's sooner wait (0.3 s) kept in its place. Once B's passed,
    A's next waiting call writes its pause at once, though the process wrote one lately: the process kept, per kind of
    wait, the ``until`` of its own last write (A's pause, 100 s), so it skipped the write and the note said no wait
    until its write window closed."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the test takes: "lately"
    store = connect(redis_server.url)
    run_id = f"w-{uuid.uuid4().hex[:8]}"
    a, b = (RunJudgeState.for_target(store.r, run_id, name, ttl_s=600) for name in ("rag-a", "rag-b"))
    now = _redis_ms(store.r)
    a.note_wait(Wait("pause", 0, now + 100_000, now, "429 from rag-a"))
    assert b.note_wait(Wait("rpm", 60, now + 300, now)) == now + 300  # sooner, of another target: kept
    assert until(lambda: _redis_ms(store.r) > now + 300, 30)
    later = _redis_ms(store.r)
    a.note_wait(Wait("pause", 0, now + 100_000, later, "429 from rag-a"))
    assert store.progress(run_id).get("target_wait_pause") == PAUSED_BY_429, store.progress(run_id)


def _redis_ms(r: Any) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000
