"""limits.TaskCalls: the places of concurrency a worker thread's calls take, those its earlier task's cut left running
included (the judge's and the target's tests of a cut chunk: tests/judge/test_judge_time_limit.py,
tests/target/test_target_time_limit.py)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ragscore_workers.limits import TaskCalls
from ragscore_workers.schemas import Queue

from ..support import until


def test_a_threads_target_calls_take_no_place_of_its_judge_tasks_concurrency() -> None:
    """A worker consuming judge and target: the target calls a cut left running take places among the thread's target
    calls, not its judge calls. Seen failing before: one TaskCalls per thread, so a judge task's call waited for a
    target's call (another server) to end, and stored the time limit's error where it waited past its deadline."""

    def held_target_then_judge() -> tuple[bool, bool]:
        target = TaskCalls.of_this_thread(Queue.TARGET.value)
        assert target.enter(1, None)  # a target call still in flight
        try:
            judge = TaskCalls.of_this_thread(Queue.JUDGE.value)
            assert TaskCalls.of_this_thread(Queue.TARGET.value) is target  # one per thread and queue
            return judge.enter(1, time.monotonic() + 30), target.enter(1, time.monotonic())
        finally:
            target.leave()

    with ThreadPoolExecutor(1) as pool:  # a thread of its own: this one's places are not touched
        judge_entered, second_target_entered = pool.submit(held_target_then_judge).result(timeout=60)
    assert judge_entered and not second_target_entered


def test_a_freed_place_lets_in_a_waiting_call_of_higher_concurrency_behind_one_of_lower() -> None:
    """Two calls wait, the first for fewer than 1 in flight (its task's concurrency 1), the second for fewer than 2;
    one of the 2 in flight ends: the second goes. Seen failing before: ``leave`` woke only the first waiter, which
    waited on, and the second waited to its deadline though a place of its own was free."""
    calls = TaskCalls()
    assert calls.enter(2, None) and calls.enter(2, None)
    waiters = calls._freed._waiters  # type: ignore[attr-defined]  # CPython's: who waits, in the order they came
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(calls.enter, 1, time.monotonic() + 60)
        assert until(lambda: len(waiters) == 1, 30)
        second = pool.submit(calls.enter, 2, time.monotonic() + 60)
        assert until(lambda: len(waiters) == 2, 30)
        calls.leave()
        assert second.result(timeout=120)
        assert not first.done()  # still 2 in flight: it waits on
        calls.leave()
        calls.leave()
        assert first.result(timeout=120)
    calls.leave()


def test_a_call_waiting_for_a_place_stops_waiting_at_its_deadline() -> None:
    """A thread's call waits for a place no longer than its task's deadline: False then, its place never taken."""
    calls = TaskCalls()
    assert calls.enter(1, None)
    stopped = threading.Event()

    def wait_for_one() -> bool:
        try:
            return calls.enter(1, time.monotonic() + 0.2)
        finally:
            stopped.set()

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(wait_for_one).result(timeout=60) is False
    assert stopped.is_set()
    calls.leave()
    assert calls.enter(1, time.monotonic())  # the place the waiting call never took is free
