"""A run whose judge calls wait at the shared rate limiter is said to wait on it, not to make no progress (real Redis,
a real judge worker process, real HTTP to the fake provider; the limiter itself for what a call that does not wait
costs). Its live progress said "no progress for N s" and `ragscore status`, after a minute, "no progress ... if the
`ragscore run` that started it was stopped", while it waited on its own ``rpm`` or a provider's 429: read as stuck."""

from __future__ import annotations

import io
import re
import threading
import time
import uuid
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import orchestrator.progress as progress
from orchestrator.progress import PlainProgress
from orchestrator.reports.live import StatusView, sample
from orchestrator.runner import cancel, connect, resume, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.providers import Limit, RedisLimiter, run_state
from ragscore_workers.providers.errors import RateLimitTimeout
from ragscore_workers.providers.ratelimit import WAIT_REFRESH_S, Grant, Wait
from ragscore_workers.providers.run_state import WAIT_SOONER_MS, WAIT_TTL_MS, WAIT_WRITE_EVERY_S, RunJudgeState
from ragscore_workers.store import (
    BACKING_OFF,
    BUDGET_AT_0,
    PAUSED_BACKING_OFF,
    PAUSED_BY_429,
    PAUSED_BY_BUDGET,
    RunState,
    RunStore,
)

from ..fakes import FakeProvider
from ..support import RedisProcess, WorkerProcess, monitor_commands, status_saying, status_text, until, write_jsonl
from .conftest import judge_suite

ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"} for i in range(2)]
#: Generous bounds for a slow CI machine: a worker's boot, the first call, the limiter's window (a minute).
BOOT_S = 180
RPM_WAIT = "waiting on the judge rate limit (1 RPM): next judge call in"


def _judging(tmp_path: Path, fake: FakeProvider, model: str, store: RunStore, **judge: object) -> str:
    suite = judge_suite(
        [{"name": "answer_accuracy", "params": {"concurrency": 2, "cache": False}}], fake, model, **judge
    )
    return submit(write_jsonl(tmp_path / "d.jsonl", ROWS), load_suite(suite), store).run_id


@pytest.mark.integration
@pytest.mark.serial  # ETAs and waits against a real rpm: timed
def test_a_run_held_by_its_rpm_says_it_waits_on_the_rate_limit_not_no_progress(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rpm 1: the first of its 4 judge calls goes at once, the next a minute later. Meanwhile the live progress (once
    idle for IDLE_NOTE_S) and `ragscore status` say what it waits on, and when its next call goes."""
    monkeypatch.setattr(progress, "IDLE_NOTE_S", 1.0)  # the view runs here: no 10 s idle to wait for
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    try:
        run_id = _judging(tmp_path, fake, model, store, rpm=1)
        assert until(lambda: "judge_wait_rpm" in store.progress(run_id), BOOT_S), store.progress(run_id)
        counters = store.progress(run_id)
        assert counters["judge_wait_rpm"] == 1 and 0 < counters["judge_wait_ms"] <= 62_000, counters
        status = status_saying(run_id, redis_server.url, RPM_WAIT, BOOT_S)
        assert RPM_WAIT in status and "no progress" not in status, status
        out, lines = io.StringIO(), []  # (a line printed, whether the counters it was made of had a wait)
        view = PlainProgress(out)
        view.start(run_id)
        deadline = time.monotonic() + BOOT_S
        while RPM_WAIT not in out.getvalue() and time.monotonic() < deadline:
            counters, before = store.progress(run_id), len(out.getvalue())
            view.update(counters)
            if len(out.getvalue()) > before:
                lines.append((out.getvalue()[before:], "judge_wait_ms" in counters))
            time.sleep(0.2)
        assert RPM_WAIT in out.getvalue(), out.getvalue()
        said = [line for line, waited in lines if waited]
        assert said and not [line for line in said if "no progress" in line], out.getvalue()
        cancel(store, run_id)  # its waiting calls stop within a second or so: no minute's wait for each
        summary = wait(store, run_id, timeout_s=BOOT_S)
    finally:
        worker.stop()
    assert summary.state == RunState.CANCELLED
    assert "judge_wait_ms" not in store.progress(run_id)  # an ended run waits on nothing


@pytest.mark.integration
@pytest.mark.serial  # ETAs and waits against a real rpm: timed
@pytest.mark.parametrize(
    ("retry_after_s", "paused", "said"),
    [(120, PAUSED_BY_429, "paused by the provider's 429 until "),
     (None, PAUSED_BACKING_OFF, "backing off after the provider's 429s without a retry time until ")],
    ids=["retry-after", "no-retry-time"],
)  # fmt: skip
def test_a_run_paused_by_the_providers_429_says_so_and_until_when(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str, retry_after_s: int | None, paused: int,
    said: str,
) -> None:  # fmt: skip
    """A 429 with retry-after 120 pauses every worker's calls: `ragscore status` says the provider's 429 paused them,
    until when, not "no progress". 429s that say no wait (no retry-after, nor a message saying how long) set a backoff
    growing with each (2 s, 4 s ...): that was said as "paused by the provider's 429" too; it is said as what it is."""
    fake.injected_retry_after_s = retry_after_s
    fake.fail_next("429", 1000)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    try:
        run_id = _judging(tmp_path, fake, model, store)
        assert until(lambda: "judge_wait_pause" in store.progress(run_id), BOOT_S), store.progress(run_id)
        counters = store.progress(run_id)
        assert counters["judge_wait_pause"] == paused and 0 < counters["judge_wait_ms"] <= 120_000, counters
        status = status_saying(run_id, redis_server.url, said, BOOT_S)
        assert said in status and "UTC: next judge call in" in status, status
        assert "no progress" not in status, status
        cancel(store, run_id)
        assert wait(store, run_id, timeout_s=BOOT_S).state == RunState.CANCELLED
    finally:
        worker.stop()


@pytest.mark.integration
@pytest.mark.serial  # ETAs and waits against a real rpm: timed
def test_a_run_with_two_judge_limiters_names_the_one_whose_calls_wait(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two judge metrics, each with its own key (``api_key_env``): two limiters. The provider answers one key's calls
    429 (retry-after 120), the other's as usual: the progress and `ragscore status` name the limiter that waits (its
    model and the key's variable, never the key), not "the provider's 429" of the whole judge."""
    other = "gsk-TEST-OTHER-KEY-1a2b3c4d5e"
    monkeypatch.setenv("JUDGE_KEY_B", other)
    fake.api_key, fake.rate_limited_key, fake.injected_retry_after_s = None, other, 120
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    try:
        params = {"concurrency": 2, "cache": False}
        metrics = [{"name": "answer_accuracy", "params": params},
                   {"name": "rubric_judge", "params": {**params, "api_key_env": "JUDGE_KEY_B"}}]  # fmt: skip
        suite = load_suite(judge_suite(metrics, fake, model))
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), suite, store).run_id
        named = f"groq/{model} with the key in JUDGE_KEY_B"
        assert until(lambda: f"judge_wait_of:{named}" in store.progress(run_id), BOOT_S), store.progress(run_id)
        said = f"paused by the provider's 429 for {named} until "
        status = status_saying(run_id, redis_server.url, said, BOOT_S)
        assert said in status and "UTC: next judge call in" in status and other not in status, status
        cancel(store, run_id)
        assert wait(store, run_id, timeout_s=BOOT_S).state == RunState.CANCELLED
    finally:
        worker.stop()


def test_a_call_that_does_not_wait_or_waits_under_a_second_tells_nothing(rclient: redis.Redis) -> None:
    """``on_wait`` costs a call nothing unless it waits WAIT_NOTE_S or more; one that does is told at once, with the
    limit it waits on and when it may go (Redis's clock)."""
    told: list[Wait] = []
    quick = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(1, 0.3, "requests", "rpm")])
    quick.acquire(1, on_wait=told.append)
    quick.acquire(1, on_wait=told.append)  # waits under 0.3 s
    assert told == []

    class Stop(Exception):
        pass

    def stop_once_told() -> None:  # ends the minute's wait at its first check (a second): no waiting it out
        if told:
            raise Stop

    slow = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(1, 60, "requests", "rpm")])
    slow.acquire(1, on_wait=told.append)
    with pytest.raises(Stop):
        slow.acquire(1, check=stop_once_told, on_wait=told.append)  # waits about a minute
    assert len(told) == 1, told
    assert told[0].on == "rpm" and told[0].limit == 1 and 50_000 <= told[0].until_ms - told[0].now_ms <= 60_000


def _redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def test_a_call_told_of_a_sooner_wait_kept_tries_again_once_that_wait_passed(rclient: redis.Redis) -> None:
    """A waiting call told that the run's note keeps another call's sooner wait (0.3 s) sleeps until that wait
    passed, then tries again and tells its own: it slept its whole second's slice, and the note, its time passed, said
    no wait for up to a second."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    limiter = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(1, 3.0, "requests", "rpm")], sleep=sleep)
    limiter.acquire(1)
    told: list[Wait] = []

    def on_wait(wait: Wait) -> int:
        told.append(wait)
        return wait.now_ms + 300  # the wait kept: another call's, that goes in 0.3 s

    limiter.acquire(1, on_wait=on_wait)
    assert len(told) >= 2 and slept and slept[0] <= 0.3 + 0.05, (slept, told)  # 0.3 s and the jitter, not 1 s


def _run_waits(r: redis.Redis) -> tuple[RunStore, RunJudgeState, str]:
    run_id = f"w-{uuid.uuid4().hex[:8]}"
    return RunStore(r, ttl_s=600), RunJudgeState(r, run_id, ttl_s=600), run_id


def test_a_run_still_says_it_waits_after_its_soonest_waiting_call_went(rclient: redis.Redis) -> None:
    """Two calls wait on a token limit, A 4 s, B 8 s: once A went, B's wait is said (it wrote again once the wait
    kept for the run had passed), not nothing for the 4 s until B goes."""
    store, state, run_id = _run_waits(rclient)
    limiter = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(100, 8.0, "tokens", "tpm")])
    now = _redis_ms(rclient)
    assert isinstance(limiter._try(60, now_ms=now - 4000), Grant)  # gone from the window 4 s from now
    assert isinstance(limiter._try(30, now_ms=now), Grant)  # ... 8 s from now
    admitted: dict[str, int] = {}  # when each call went (Redis ms, the note's clock; at the latest)

    def call(name: str, tokens: int) -> None:
        limiter.acquire(tokens, on_wait=state.note_wait)
        admitted[name] = _redis_ms(rclient)

    threads = [threading.Thread(target=call, args=("A", 20)), threading.Thread(target=call, args=("B", 80))]
    for thread in threads:
        thread.start()
    said: list[tuple[int, int, int | None]] = []  # (Redis ms before and after a read, the soonest end it said)
    while "B" not in admitted:
        before = _redis_ms(rclient)
        counters = store.progress(run_id)
        said.append((before, _redis_ms(rclient), before + counters.get("judge_wait_ms", 0)
                     if "judge_wait_tpm" in counters else None))  # fmt: skip
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    after_a = [(after, ends) for before, after, ends in said if before > admitted["A"]]  # read once A went
    b_until = next((ends for _, ends in after_a if ends is not None), None)
    assert b_until is not None, (admitted, said)  # B's wait is said (A's went 4 s before it)
    first = [ends for _, ends in after_a].index(b_until)  # and on, every read until it passed
    assert all(ends is not None for after, ends in after_a[first:] if after < b_until), (admitted, said)


def test_a_providers_pause_is_said_before_a_limits_wait(rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 429's pause holds every call: said, though another call waits on the rpm that ends sooner (and the pause
    kept when a call then notes an rpm wait: each note written, so that the store's script, not this process's memory
    of what it wrote, keeps it)."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 0.0)
    store, state, run_id = _run_waits(rclient)
    now = _redis_ms(rclient)
    state.note_wait(Wait("rpm", 60, now + 5_000, now))
    state.note_wait(Wait("pause", 0, now + 12_000, now, "429 from provider"))
    assert store.progress(run_id).get("judge_wait_pause") == PAUSED_BY_429, store.progress(run_id)
    state.note_wait(Wait("rpm", 60, now + 3_000, now))
    assert store.progress(run_id).get("judge_wait_pause") == PAUSED_BY_429, store.progress(run_id)


def test_a_pause_the_providers_headers_set_is_said_so_by_the_calls_it_holds(rclient: redis.Redis) -> None:
    """The pause's reason comes back with the acquire script's answer: a pause set because the headers said the budget
    is at 0 is said so ("rate-limit headers say its budget is spent"), not as a 429's."""
    store, state, run_id = _run_waits(rclient)
    limiter = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(1000, 60, "requests", "rpm")])
    limiter.pause(60.0, BUDGET_AT_0)
    done = threading.Event()

    def check() -> None:  # ends the wait once the test read the progress
        if done.is_set():
            raise RuntimeError("stop waiting")

    outcome: list[BaseException | None] = []  # what the waiting call ended with (None: it was admitted)

    def call() -> None:
        try:
            limiter.acquire(1, check=check, on_wait=state.note_wait)
        except BaseException as exc:  # kept for the test's thread to check: a raise here would only warn
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=call)
    thread.start()
    try:
        assert until(lambda: "judge_wait_pause" in store.progress(run_id), 50), store.progress(run_id)
        assert store.progress(run_id)["judge_wait_pause"] == PAUSED_BY_BUDGET, store.progress(run_id)
    finally:
        done.set()
        thread.join(timeout=30)
    assert not thread.is_alive(), "the waiting call did not stop once its check raised"
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError), outcome  # the check's, not an admission


@pytest.mark.parametrize(
    ("reason", "paused"),
    [("paused", PAUSED_BY_429), ("429 Too Many Requests", PAUSED_BY_429),
     (f"{BACKING_OFF}: 429 Too Many Requests", PAUSED_BACKING_OFF)],
    ids=["older-backoff", "429", "backoff"],
)  # fmt: skip
def test_a_pauses_kind_is_read_from_its_reason_an_older_workers_backoff_as_a_429(
    rclient: redis.Redis, reason: str, paused: int
) -> None:
    """What set a pause is read from its reason when the progress is read, never stored as a number: a backoff's
    (beginning with BACKING_OFF) is said as one; an older worker's, which said only "paused" or the 429's message,
    is said as a 429's pause, as it was."""
    store, state, run_id = _run_waits(rclient)
    now = _redis_ms(rclient)
    state.note_wait(Wait("pause", 0, now + 30_000, now, reason))
    assert store.progress(run_id)["judge_wait_pause"] == paused, store.progress(run_id)


def test_a_note_whose_write_failed_is_written_by_the_next_waiting_call(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write of the note that failed (its Redis did not answer) is not taken for written: the next call of the
    process that waits alike writes it (it skipped the write as made lately, and the progress said no wait)."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the failed write took: "lately"
    store, state, run_id = _run_waits(rclient)
    lost = RunJudgeState(redis.Redis(port=1, retry=Retry(NoBackoff(), 0)), run_id, ttl_s=600)  # no Redis there
    now = _redis_ms(rclient)
    with pytest.raises(redis.ConnectionError):
        lost.note_wait(Wait("rpm", 60, now + 30_000, now))
    state.note_wait(Wait("rpm", 60, now + 30_000, now))
    assert store.progress(run_id).get("judge_wait_rpm") == 60, store.progress(run_id)


def test_a_call_whose_note_another_wrote_lately_is_told_the_wait_kept_not_the_write_windows_end(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that skipped the write (another call of the process wrote lately) is told the wait kept: the limiter
    wakes a call at the ``until`` it is told, and told the end of the process's write window, the calls skipped in it
    all woke as it closed, together (16 threads waiting out a full window tried the limiter a sixth more often per
    call admitted: 3.0 acquires, not 2.6). It tells again at its own refresh, when the process may write again."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the test takes: "lately"
    _, state, _ = _run_waits(rclient)
    now = _redis_ms(rclient)
    assert state.note_wait(Wait("rpm", 60, now + 30_000, now)) == now + 30_000  # written
    assert state.note_wait(Wait("rpm", 60, now + 40_000, now)) == now + 30_000  # skipped: written lately
    assert WAIT_WRITE_EVERY_S < WAIT_REFRESH_S  # at its refresh the process may write again


def test_a_wait_no_call_waits_on_any_more_is_gone_within_seconds(rclient: redis.Redis) -> None:
    """A 10-minute pause noted by calls of a worker that then died is not said for 10 minutes: what they noted lives
    seconds; calls that still wait write it again while they do."""
    _, state, _ = _run_waits(rclient)
    now = _redis_ms(rclient)
    state.note_wait(Wait("pause", 0, now + 600_000, now, "429 from provider"))
    assert 0 < rclient.pttl(state.wait_key) <= WAIT_TTL_MS
    told: list[Wait] = []
    limiter = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(10, 60, "requests", "rpm")])
    limiter.pause(4.5, "429 from provider")
    limiter.acquire(1, on_wait=told.append)
    assert len(told) >= 2 and {w.on for w in told} == {"pause"}, told


def test_a_wait_over_max_wait_s_is_not_noted(rclient: redis.Redis) -> None:
    """The call fails at once (RateLimitTimeout): no "next judge call in 25m" said of calls that do not wait."""
    told: list[Wait] = []
    limiter = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(10, 60, "requests", "rpm")], max_wait_s=1)
    limiter.pause(1500, "429 from provider")
    with pytest.raises(RateLimitTimeout):
        limiter.acquire(1, on_wait=told.append)
    assert told == []


@pytest.mark.parametrize("ended", sorted(RunState.DONE))
def test_an_ended_run_says_no_wait_though_its_calls_noted_one_just_before(rclient: redis.Redis, ended: str) -> None:
    """A run that ended while its calls waited (a cancel): the wait they noted lives seconds more, and neither the
    progress counters nor `ragscore status`'s view say it."""
    store, state, run_id = _run_waits(rclient)
    store.create_run(run_id, {"state": RunState.RUNNING})
    now = _redis_ms(rclient)
    state.note_wait(Wait("rpm", 60, now + 60_000, now))
    assert "waiting on the judge rate limit (60 RPM)" in status_text(store, run_id)
    store.set_meta(run_id, state=ended)
    assert "judge_wait_ms" not in store.progress(run_id)
    assert "waiting on the judge rate limit" not in status_text(store, run_id)


def test_many_calls_waiting_in_one_process_write_the_runs_note_about_once_a_refresh(rclient: redis.Redis) -> None:
    """16 threads of a worker wait out a 6 s pause after a 429: the run's note is written about once per
    WAIT_REFRESH_S by the process, not by each waiting call each time (16 calls wrote 2 round trips each per 2 s: the
    note and a GET of the pause's reason); and it is said all along."""
    store, state, run_id = _run_waits(rclient)
    limiter = RedisLimiter(rclient, f"test:{uuid.uuid4().hex[:10]}", [Limit(1000, 60, "requests", "rpm")])
    seen: list[str] = []
    end = f"end-{uuid.uuid4().hex}"
    watcher = monitor_commands(rclient, seen, end)
    limiter.pause(6.0, "429 from provider")
    threads = [threading.Thread(target=limiter.acquire, args=(1,), kwargs={"on_wait": state.note_wait})
               for _ in range(16)]  # fmt: skip
    started = time.monotonic()
    for thread in threads:
        thread.start()
    assert until(lambda: "judge_wait_pause" in store.progress(run_id), 60), store.progress(run_id)  # the first note
    said: list[bool] = []
    while rclient.pttl(limiter.pause_key) > 500:
        said.append("judge_wait_pause" in store.progress(run_id))
        time.sleep(0.1)
    for thread in threads:
        thread.join()
    waited_s = time.monotonic() - started  # every write of the note was made within this
    rclient.echo(end)
    watcher.join(30)
    assert not watcher.is_alive(), "the monitor did not see the end"
    notes = [c for c in seen if c.startswith("EVALSHA") and state.wait_key in c]
    reasons = [c for c in seen if c.startswith("GET") and limiter.pause_key in c]
    assert said and all(said), said
    # Written again while they wait (the pause outlives the note's WAIT_TTL_MS), by the process at most once per
    # WAIT_WRITE_EVERY_S (and a first write that found the script not loaded yet sent again): not 16 calls each.
    most = 2 + int(waited_s / WAIT_WRITE_EVERY_S)
    assert 2 <= len(notes) <= most and not reasons, (len(notes), most, len(reasons))


class _SlowScripts(redis.Redis):
    """A client whose first script call waits for ``go``: a write of the note still on its way to Redis. ``callers``:
    the threads that ran a script."""

    def __init__(self, like: redis.Redis) -> None:
        super().__init__(connection_pool=like.connection_pool)
        self.started, self.go, self.callers = threading.Event(), threading.Event(), set[int]()

    def evalsha(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        self.callers.add(threading.get_ident())
        if not self.started.is_set():
            self.started.set()
            assert self.go.wait(30)
        return super().evalsha(*args, **kwargs)  # type: ignore[arg-type]


def test_a_call_that_tells_while_another_of_the_process_writes_a_wait_alike_writes_none(rclient: redis.Redis) -> None:
    """The calls of a process that tell while one of them writes the run's note (its write on its way) skip theirs:
    they wrote too, each, every time several woke together (as a window's slot frees), twice the writes."""
    slow = _SlowScripts(rclient)
    state = RunJudgeState(slow, f"w-{uuid.uuid4().hex[:8]}", ttl_s=600)
    now = _redis_ms(rclient)
    first = threading.Thread(target=state.note_wait, args=(Wait("rpm", 60, now + 30_000, now),))
    first.start()
    assert slow.started.wait(30)
    told = state.note_wait(Wait("rpm", 60, now + 30_100, now + 50))
    slow.go.set()
    first.join(30)
    assert threading.get_ident() not in slow.callers and told == now + 30_000, told


def test_a_new_pause_is_written_at_once_though_the_process_wrote_a_pause_lately_that_a_limits_wait_replaced(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short pause noted, passed, a limit's wait noted in its place, then a new 429's pause: written at once, not
    skipped as 'a pause written lately' while the note says the limit's wait (the 429 hidden up to a refresh)."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the test takes: "lately"
    store, state, run_id = _run_waits(rclient)
    now = _redis_ms(rclient)
    state.note_wait(Wait("pause", 0, now + 200, now, "429 from provider"))
    time.sleep(0.3)
    now = _redis_ms(rclient)
    state.note_wait(Wait("rpm", 60, now + 30_000, now))
    assert store.progress(run_id).get("judge_wait_rpm") == 60, store.progress(run_id)
    state.note_wait(Wait("pause", 0, now + 10_000, now, "429 again"))
    assert "judge_wait_pause" in store.progress(run_id), store.progress(run_id)


def test_a_note_whose_write_failed_keeps_no_other_kind_of_wait_from_being_written(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that failed is not taken for the wait the note keeps: a new pause of the process, a pause written
    lately, is written, not skipped as kept until the failed write's wait passes (the note said no wait)."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the test takes: "lately"
    store, state, run_id = _run_waits(rclient)
    lost = RunJudgeState(redis.Redis(port=1, retry=Retry(NoBackoff(), 0)), run_id, ttl_s=600)  # no Redis there
    now = _redis_ms(rclient)
    state.note_wait(Wait("pause", 0, now + 200, now, "429 from provider"))
    time.sleep(0.3)
    now = _redis_ms(rclient)
    with pytest.raises(redis.ConnectionError):
        lost.note_wait(Wait("rpm", 60, now + 30_000, now))
    state.note_wait(Wait("pause", 0, now + 10_000, now, "429 again"))
    assert "judge_wait_pause" in store.progress(run_id), store.progress(run_id)


@pytest.mark.parametrize(("on", "limit", "reason"), [("tpm", 100, ""), ("pause", 0, "429 from provider")])
def test_a_wait_alike_that_ends_sooner_than_the_one_written_lately_is_written_at_once(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch, on: str, limit: int, reason: str
) -> None:
    """A call that waits 8 s noted, then one that waits 4 s on the same kind (a smaller call under the token limit):
    written at once, not skipped as a wait alike written lately (the note said the run's next call goes in 8 s, up to
    a write window, though it went in 4). A later one alike is still skipped."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the test takes: "lately"
    store, state, run_id = _run_waits(rclient)
    now = _redis_ms(rclient)
    assert state.note_wait(Wait(on, limit, now + 8_000, now, reason)) == now + 8_000
    assert state.note_wait(Wait(on, limit, now + 4_000, now, reason)) == now + 4_000
    assert 0 < store.progress(run_id).get("judge_wait_ms", 0) <= 4_000, store.progress(run_id)
    assert state.note_wait(Wait(on, limit, now + 6_000, now, reason)) == now + 4_000  # later: skipped


def test_a_wait_alike_a_millisecond_sooner_than_the_one_written_lately_is_not_written(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls held by the same pause may read it ending 1 ms apart (the limiter adds the pause's PTTL to Redis's
    TIME, each cut to whole ms): the second is the same wait, not a sooner one, and is skipped as written lately (each
    such read was written at once: up to twice the writes per window). A wait alike WAIT_SOONER_MS sooner is written."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 600.0)  # however long the test takes: "lately"
    _, state, _ = _run_waits(rclient)
    now = _redis_ms(rclient)
    assert state.note_wait(Wait("pause", 0, now + 10_001, now, "429 from provider")) == now + 10_001
    assert state.note_wait(Wait("pause", 0, now + 10_000, now, "429 from provider")) == now + 10_001  # skipped
    assert rclient.hget(state.wait_key, "until") == str(now + 10_001)
    sooner = now + 10_001 - WAIT_SOONER_MS
    assert state.note_wait(Wait("pause", 0, sooner, now, "429 from provider")) == sooner  # written
    assert rclient.hget(state.wait_key, "until") == str(sooner)


def test_a_new_pause_told_while_the_process_writes_a_limits_wait_is_written_at_once(rclient: redis.Redis) -> None:
    """A short pause noted and passed; a call's rpm wait on its way to Redis when a new 429's pause is told: the pause
    is written at once, not skipped as 'a pause written lately' while the process took the rpm wait for kept (the note
    said the rpm wait until the pause's next refresh, 2 s)."""
    slow = _SlowScripts(rclient)
    store, state, run_id = _run_waits(rclient)
    writing = RunJudgeState(slow, run_id, ttl_s=600)
    now = _redis_ms(rclient)
    state.note_wait(Wait("pause", 0, now + 200, now, "429 from provider"))
    assert until(lambda: _redis_ms(rclient) > now + 200, 30)
    now = _redis_ms(rclient)
    first = threading.Thread(target=writing.note_wait, args=(Wait("rpm", 60, now + 30_000, now),))
    first.start()
    try:
        assert slow.started.wait(30)
        told = state.note_wait(Wait("pause", 0, now + 10_000, now, "429 again"))
    finally:
        slow.go.set()
        first.join(30)
    assert told == now + 10_000 and "judge_wait_pause" in store.progress(run_id), (told, store.progress(run_id))


def test_a_process_keeps_no_memory_of_the_notes_of_runs_it_no_longer_writes(
    rclient: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-lived worker writes the notes of many runs: what it remembers of a note written WAIT_WRITE_EVERY_S ago
    or more (which its rule no longer reads) is dropped at its next write, whatever run that is for."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 0.0)  # every earlier write is old enough
    now = _redis_ms(rclient)
    for _ in range(20):
        _run_waits(rclient)[1].note_wait(Wait("rpm", 60, now + 30_000, now))
    assert len(run_state._notes) == 1, run_state._notes


@pytest.mark.integration
@pytest.mark.serial  # ETAs and waits against a real rpm: timed
def test_the_eta_of_a_run_held_by_its_rpm_is_never_sooner_than_the_rpm_lets_its_calls_left_go(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """rpm 10, 60 items of answer_accuracy, two judges an item: submit stores the 120 calls the dry run counts, and
    once an item is done the store's progress carries them and the judge's rpm in force; the bar's and `ragscore
    status`'s ETA are no sooner than the calls left (120 less those sent, not one a unit) need at 10 a minute, the
    dry run's least time (the views' floor, marked ``≥`` where it is what they say: tests/unit/test_progress.py)."""
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "home").start()
    rows = [{**ROWS[0], "id": f"q{i}"} for i in range(60)]
    metrics = [{"name": "answer_accuracy", "params": {"concurrency": 1, "cache": False}}]
    suite = judge_suite(metrics, fake, model, rpm=10)
    try:
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(suite), store).run_id
        assert until(lambda: store.progress(run_id).get("done:judge", 0) >= 1, BOOT_S), store.progress(run_id)
        counters = store.progress(run_id)
        calls = counters["judge_calls"]
        assert counters["total:judge"] == 60 and calls <= 50 and counters["judge_rpm"] == 10, counters
        assert counters.get("judge_calls_planned") == 120, counters
        least_s = 60 * ((120 - calls - 1) // 10)  # the dry run's least time of the calls left
        out = io.StringIO()
        view = PlainProgress(out)
        view.start(run_id)
        view.update(counters, final=True)
        eta = re.search(r"ETA ≥?(\d+)s", out.getvalue())
        assert eta and int(eta[1]) >= least_s, out.getvalue()
        status = StatusView(store.meta(run_id))
        status.add(sample(store, run_id, time.time()))
        judge_row = next(r for r in status.rows() if r["queue"] == "judge")
        assert judge_row["eta"] is not None and judge_row["eta"] >= least_s, judge_row
        cancel(store, run_id)
        assert wait(store, run_id, timeout_s=BOOT_S).state == RunState.CANCELLED
    finally:
        worker.stop()


def test_a_run_with_a_target_keeps_no_count_of_judge_calls_its_cached_replies_may_spare(
    tmp_path: Path, fake: FakeProvider, model: str
) -> None:
    """Its answers are its target's, unknown at submit: the count cannot leave out the judge replies a re-run finds
    cached, so a floor from it could promise a re-run later than it ends. Submit keeps none (its floor: the calls a
    done unit took). A Redis of its own: its tasks are sent, and no worker of another test may take them."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        suite = judge_suite(["answer_accuracy"], fake, model, rpm=10).model_dump()
        suite["target"] = {"url": "http://127.0.0.1:9/ask"}
        rows = [{k: v for k, v in row.items() if k != "answer"} for row in ROWS]
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(suite), store).run_id
        meta = store.meta(run_id)
        assert meta["items"] == "2" and "judge_calls_planned" not in meta, meta
    finally:
        server.stop()


@pytest.mark.integration
def test_a_run_waiting_on_a_default_judge_limit_says_it_is_the_assumed_default(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dry run says judge.rpm 30 / judge.tpm 6,000 are the defaults (Groq's free tier) where the suite leaves them
    unset; a run held by them said only "waiting on the judge rate limit (30 RPM)", as if they were the provider's. A
    run whose suite (or --rpm) sets the limit says nothing more."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 0.0)
    store = connect(redis_server.url)
    metric = [{"name": "answer_accuracy", "params": {"cache": False}}]
    unset = judge_suite(metric, fake, model).model_dump(exclude_unset=True, exclude={"judge": {"rpm", "tpm"}})
    given = judge_suite(metric, fake, model, rpm=30).model_dump(exclude_unset=True)
    default = "30 RPM, the default (Groq's free tier), assumed, not your provider's limit: set judge.rpm in the suite"
    for suite, said in [(unset, f"{default}, or run with --rpm): next"), (given, "(30 RPM): next judge call in")]:
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", ROWS), load_suite(suite), store).run_id
        try:
            now = _redis_ms(store.r)
            RunJudgeState(store.r, run_id, ttl_s=600).note_wait(Wait("rpm", 30, now + 120_000, now))  # a slow host too
            assert said in progress.wait_note(store.progress(run_id)), store.progress(run_id)
        finally:
            cancel(store, run_id)


@pytest.mark.integration
def test_a_resume_given_a_judge_limit_no_longer_says_it_is_the_default(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``resume --rpm`` sets the limit the run was submitted without: its wait note stops calling it the assumed
    default, and still says so of the one it left unset (``judge.tpm``)."""
    monkeypatch.setattr(run_state, "WAIT_WRITE_EVERY_S", 0.0)
    store = connect(redis_server.url)
    metric = [{"name": "answer_accuracy", "params": {"cache": False}}]
    unset = judge_suite(metric, fake, model).model_dump(exclude_unset=True, exclude={"judge": {"rpm", "tpm"}})
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    run_id = submit(data, load_suite(unset), store).run_id
    try:
        resume(store, run_id, judge_limits={"rpm": 30})
        assert store.meta(run_id)["judge_defaulted_limits"] == "tpm", store.meta(run_id)
        now = _redis_ms(store.r)
        state = RunJudgeState(store.r, run_id, ttl_s=600)
        state.note_wait(Wait("rpm", 30, now + 120_000, now))  # minutes: a slow machine reads it still waiting
        assert "(30 RPM): next judge call in" in progress.wait_note(store.progress(run_id)), store.progress(run_id)
        state.note_wait(Wait("tpm", 6_000, now + 60_000, now))  # the sooner wait is the one said
        said = progress.wait_note(store.progress(run_id))
        assert "(6,000 TPM, the default (Groq's free tier), assumed" in said and "--tpm): next" in said, said
    finally:
        cancel(store, run_id)
