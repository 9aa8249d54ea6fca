"""The cap on judge calls in flight (``judge.max_in_flight``) on a real Redis: a slot per call, freed when the call
ends or, for a worker killed mid-call, when its lease lapses; a bounded wait that a stopped run ends."""

from __future__ import annotations

import uuid

import pytest
import redis

from ragscore_workers.providers import JudgeStopped, RateLimitTimeout
from ragscore_workers.providers.inflight import InFlightCap


def _cap(
    rclient: redis.Redis, limit: int = 1, lease_s: float = 60.0, max_wait_s: float = 0.3, limiter_key: str = ""
) -> InFlightCap:
    limiter_key = limiter_key or f"openai:m:{uuid.uuid4().hex[:8]}"
    return InFlightCap(rclient, limiter_key, limit, lease_s=lease_s, max_wait_s=max_wait_s)


def test_a_call_waits_for_a_free_slot_and_gives_up_after_max_wait_s(rclient: redis.Redis) -> None:
    cap = _cap(rclient, limit=2)
    with cap.slot(), cap.slot():
        assert rclient.zcard(cap.key) == 2
        with pytest.raises(RateLimitTimeout, match=r"judge.max_in_flight's 2 calls in flight .* max_wait_s=0.3 s"):
            with cap.slot():
                pass
    with cap.slot():  # the two ended: their slots are free
        assert rclient.zcard(cap.key) == 1
    assert rclient.zcard(cap.key) == 0


def test_the_slot_of_a_call_that_never_ended_lapses_with_its_lease(rclient: redis.Redis) -> None:
    """A worker killed mid-call never gives its slot back: with a cap of 1 no call could start again."""
    cap = _cap(rclient, lease_s=0.2, max_wait_s=5.0)
    held = cap.slot()
    held.__enter__()  # never left, as by a killed worker
    with cap.slot():
        assert rclient.zcard(cap.key) == 1


def test_a_stopped_run_ends_the_wait_for_a_slot(rclient: redis.Redis) -> None:
    cap = _cap(rclient, max_wait_s=30.0)

    def stopped() -> None:
        raise JudgeStopped("cancelled")

    with cap.slot(), pytest.raises(JudgeStopped), cap.slot(stopped):
        pass


def test_a_short_lease_does_not_cut_the_life_of_a_longer_one(rclient: redis.Redis) -> None:
    """Two runs against one server share its set, each with its own lease (``max_wait_s`` and ``timeout_s`` differ):
    the set must live as long as its longest lease. Seen failing before: each take set the set's life to its own
    lease, so a run with a short one dropped the other's slots with the set, and more calls than the cap went out."""
    limiter_key = f"openai:m:{uuid.uuid4().hex[:8]}"
    long_lease = _cap(rclient, lease_s=600.0, limiter_key=limiter_key)
    short_lease = _cap(rclient, limit=2, lease_s=0.5, limiter_key=limiter_key)
    with long_lease.slot():
        with short_lease.slot():
            assert rclient.pttl(long_lease.key) > 300_000
        assert rclient.pttl(long_lease.key) > 300_000 and rclient.zcard(long_lease.key) == 1
