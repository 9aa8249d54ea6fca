"""The least time a run's rate-limited calls still need (judge, target): a floor under the ETA that the progress
views show, and the dry run's least minutes under a limit (:mod:`.estimate`).

Pure functions of the store's counters, kept apart from :mod:`.estimate` (which plans judge prompts with the metrics)
so that ``ragscore status`` imports no metric.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ragscore_workers.counts import thousands
from ragscore_workers.schemas import JudgeConfig, Pace, TargetConfig, paced_per_second
from ragscore_workers.store import work_before

__all__ = [
    "QUEUE_FLOORS",
    "eta_floor_s",
    "in_flight_rounds",
    "judge_floor_s",
    "least_seconds",
    "limit_said",
    "pace_minutes",
    "target_floor_s",
    "window_minutes",
]


def window_minutes(amount: int, limit: int | None, period_min: int) -> float | None:
    """The least minutes ``amount`` needs under ``limit`` a period of ``period_min`` minutes (``floor((N - 1) / limit)``
    periods after the first); None where there is no limit or one period holds it all."""
    return float((amount - 1) // limit * period_min) if limit and amount > limit else None


def limit_said(config: JudgeConfig | TargetConfig, name: str) -> str:
    """A rate limit of a judge or a target as its suite section writes it: ``rpm 600``, ``pace even at 10 a second``."""
    if name == "pace":
        return f"pace {config.pace} at {thousands(paced_per_second(config.rpm or 1))} a second"
    return f"{name} {thousands(getattr(config, name))}"


def pace_minutes(requests: int, rpm: int | None, pace: Pace) -> dict[str, float]:
    """``{"pace": minutes}``: the least time ``requests`` need at ``pace: even`` (ceil(rpm / 60) a second); empty
    where the pace is ``burst``, there is no ``rpm``, or one second holds them all."""
    if pace == "even" and rpm and requests > (per_second := paced_per_second(rpm)):
        return {"pace": (requests - 1) // per_second / 60}  # seconds, in minutes
    return {}


def least_seconds(requests: int, rpm: int | None, pace: Pace = "burst") -> float:
    """The least seconds ``requests`` calls need under ``rpm`` (and ``pace``), as the dry run reckons a limit's least
    time (:func:`window_minutes`, :func:`pace_minutes`); 0 where the limit holds them all at once."""
    minutes = [window_minutes(requests, rpm, 1) or 0.0, *pace_minutes(requests, rpm, pace).values()]
    return 60 * max(minutes)


def in_flight_rounds(calls: int, cap: int | None, caps: int = 1) -> int | None:
    """Under ``judge.max_in_flight`` (``cap``), ``calls`` go out that many at a time through each of ``caps`` limiters
    (one per judge key: judge metrics whose ``api_key_env`` differ), however many workers: the rounds of them one
    after another (``ceil(calls / (cap x caps))``), each as long as a reply takes. None without a cap, or where one
    round holds them all."""
    at_once = cap * caps if cap else 0
    return -(-calls // at_once) if at_once and calls > at_once else None


def _in_flight_s(calls_left: int, counters: dict[str, int]) -> float:
    """The least seconds ``calls_left`` need under ``judge.max_in_flight`` (:func:`in_flight_rounds`), each round as
    long as the run's calls took on average (``judge_call_ms`` over ``judge_calls``); 0 without a cap or a call."""
    calls, call_ms = counters.get("judge_calls", 0), counters.get("judge_call_ms", 0)
    rounds = in_flight_rounds(calls_left, counters.get("judge_max_in_flight"), counters.get("judge_limiters", 1))
    return rounds * call_ms / calls / 1000 if rounds and calls and call_ms else 0.0


def judge_floor_s(counters: dict[str, int]) -> float:
    """The least seconds a live run's judge calls still to make need under the judge's ``rpm`` in force, from
    :meth:`RunStore.progress`'s counters (``judge_rpm``, ``judge_pace_even``, ``judge_calls``, ``done:judge``,
    ``total:judge``, ``judge_calls_planned``): its ETA is never sooner; 0 before a judge unit is done. The calls left
    are the calls the dry run's count planned for the run at submit (:func:`.estimate.judge_calls_planned`: a metric
    may ask two judges an item) less those sent, or where more (or where a run submitted before that count has none),
    the judge units left at the calls a done unit took so far (cached replies and rule-scored rows take none), but no
    more than the units not done less the calls sent beyond one a done unit (the calls of units in flight). Under
    ``judge.max_in_flight`` also never sooner than those calls go out that many at a time (:func:`_in_flight_s`).
    A resume's calls left are measured on its own attempt's (:func:`_attempt_left`). Through several judge limiters
    (``judge_limiters``: judge metrics whose ``api_key_env`` differ, each with the suite's limits) the calls left go
    through them all at once: which key's are the most is not known live, so the floor is that of an even share
    each (``ceil(left / limiters)`` under the rpm), the least any split allows; the dry run floors each key's own
    calls (:meth:`.estimate.Estimate.judge_minutes`), which is never less."""
    done, total = counters.get("done:judge", 0), counters.get("total:judge", 0)
    calls = counters.get("judge_calls", 0)
    if not done or done >= total:
        return 0.0
    left = math.ceil(max(_attempt_left(counters), counters.get("judge_calls_planned", 0) - calls))
    if left <= 0:
        return 0.0
    pace: Pace = "even" if counters.get("judge_pace_even") else "burst"
    each = -(-left // max(1, counters.get("judge_limiters", 1)))
    return max(least_seconds(each, counters.get("judge_rpm"), pace), _in_flight_s(left, counters))


def _attempt_left(counters: dict[str, int]) -> float:
    """The judge calls the units left make, measured as :func:`_measured_left` does on the current attempt's work alone
    (the ``before:`` counters of :meth:`RunStore.progress`: none before its work began, the whole run's then). A
    resume sends again the units stored as errors, whose first calls the run's ``judge_calls`` hold: measured on the
    whole run, those calls read as the calls of units in flight and the calls left as none (a resume of 300 errors
    after 1,000 calls had no floor); at the whole run's rate where the attempt has done no judge unit yet."""
    done, total, calls = counters.get("done:judge", 0), counters.get("total:judge", 0), counters.get("judge_calls", 0)
    before = work_before(counters)
    done_now, calls_now = done - before.get("done:judge", 0), calls - before.get("judge_calls", 0)
    if done_now <= 0:
        return (total - done) * calls / done
    return _measured_left(done_now, total - done + done_now, calls_now)


def _measured_left(done: int, total: int, calls: int) -> float:
    """The calls ``total - done`` units left make at the calls ``done`` units took so far (a cached reply takes
    none), but no more than the units left less the calls sent beyond one a done unit (those of units in flight)."""
    return min(total - calls, (total - done) * calls / done)


def target_floor_s(counters: dict[str, int]) -> float:
    """The least seconds the calls a run's one target still gets need under its ``rpm`` (:meth:`RunStore.progress`'s
    ``target_rpm``, ``target_pace_even``; none for several targets), counted as the judge's are measured
    (:func:`_measured_left`: an answer its reply cache held took no call); 0 before a target unit is done."""
    done, total = counters.get("done:target", 0), counters.get("total:target", 0)
    if not done or done >= total:
        return 0.0
    left = math.ceil(_measured_left(done, total, counters.get("target_calls", 0)))
    pace: Pace = "even" if counters.get("target_pace_even") else "burst"
    return least_seconds(left, counters.get("target_rpm"), pace) if left > 0 else 0.0


#: Per queue, the least seconds its rate limit lets its calls left go: its ETA is never sooner.
QUEUE_FLOORS: dict[str, Callable[[dict[str, int]], float]] = {"judge": judge_floor_s, "target": target_floor_s}


def eta_floor_s(counters: dict[str, int], queue: str | None = None) -> float:
    """The least seconds ``queue``'s calls left need under its rate limit (:data:`QUEUE_FLOORS`; 0 for a queue with
    none), or with ``queue`` None the run's: the longest of its queues'."""
    return max((floor(counters) for name, floor in QUEUE_FLOORS.items() if queue in (None, name)), default=0.0)
