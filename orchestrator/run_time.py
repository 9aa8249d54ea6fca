"""The dry run's estimate of a whole run's wall time, from the parts :mod:`.estimate` counts.

The queues work side by side (each its own workers), so a run lasts about as long as its slowest part, plus what
comes before that part's first unit: the judge's calls under its rate limits (a floor: no worker count sends them
sooner; re-asks, retries and 429s only add), the embed queue's encode at its measured or assumed rate with the
model's load before it, a target's calls under its ``rpm``, the cpu queue's metrics at the time a sample of its items
took here (:mod:`.queue_time`), over its worker processes. The code queue's programs are not run: what they take each
at its time limit is said beside (an upper bound on the local sandbox; a docker container's start adds to each). Not
timed are the judge's calls where none of its
limits bounds them: their time is the provider's reply time, which a dry run cannot know. The range's high end is
the slowest part where this machine is busy (the embed encode made slower as :meth:`~.estimate.EmbedTally.busy_s`
says, the cpu queue's processes on the cores the load leaves them); where nothing makes it higher, the estimate has
no range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragscore_workers.counts import counted, thousands
from ragscore_workers.schemas import Suite

from .estimate import EMBED_MODEL_LOAD_S, EMBED_WORKER_START_S, Estimate
from .floors import limit_said
from .progress import fmt_duration
from .queue_time import SAMPLE_LOAD_S, ProgramTally

__all__ = ["Part", "Pools", "WholeRun", "whole_run", "whole_run_line"]

#: Queues whose time a dry run does not estimate without their pools (their metrics are not run), said as such.
UNTIMED_QUEUES = ("cpu", "code")


@dataclass(frozen=True)
class Pools:
    """The worker processes a run's cpu and code queues would have, each said as where its count comes from."""

    cpu: int
    code: int
    #: Where the cpu count comes from: ``an embedded run's own pool, one a core here``.
    said: str
    #: Whether the code count is assumed (a cluster's where none of its code workers says it runs).
    code_assumed: bool = False


@dataclass(frozen=True)
class Part:
    """One part of a run that takes its own time, side by side with the others."""

    #: What the part is: ``judge``, ``embed``, ``target NAME``.
    name: str
    #: Its time, as estimated (a floor where :attr:`floor`).
    seconds: float
    #: Its time where this machine is busy (the embed workers run here): the estimate's high end.
    busy_seconds: float
    #: What sets it, said: ``judge.rpm 600 at 200,000 calls``.
    bound: str
    #: Whether it is a least time (a rate limit allows no sooner) rather than an estimate at a rate.
    floor: bool
    #: Whether its rate is assumed, not measured on this machine (the embed encode's before a run measured it).
    assumed: bool = False


@dataclass(frozen=True)
class WholeRun:
    """The parts of a run a dry run can time, and the queues with work it cannot."""

    parts: tuple[Part, ...]
    #: Queues with work whose time is not estimated (:data:`UNTIMED_QUEUES`), with their work units.
    untimed: dict[str, int]
    #: This machine's load average and cores, where read.
    load: tuple[float, int] | None = None
    #: The judge's paid calls where none of its limits bounds them (it has no part): their time is the provider's
    #: reply time, which a dry run cannot know.
    unbound_judge_calls: int = 0
    #: What the code queue's programs take at their time limits, said; empty where it has none.
    code_bound: str = ""
    #: Whether the cpu queue's sample was not scored within its bound (its first item's load, or a metric hanging).
    unsampled: bool = False

    @property
    def slowest(self) -> Part | None:
        """The part that bounds the run (None: no part is timed)."""
        return max(self.parts, key=lambda part: part.seconds, default=None)

    @property
    def high_s(self) -> float:
        """The run's time where this machine is busy: its slowest part then."""
        return max((part.busy_seconds for part in self.parts), default=0.0)


def whole_run(
    estimate: Estimate,
    suite: Suite,
    *,
    embedded: bool,
    load: tuple[float, int] | None = None,
    pools: Pools | None = None,
) -> WholeRun:
    """The timed parts of the run ``estimate`` counts: the judge's (where its limits reach), the embed queue's, each
    target's and the cpu queue's (where its sample was timed); ``embedded``: the run starts its own workers here;
    ``load``: this machine's load average and cores; ``pools``: the cpu and code worker processes (None: those queues
    are not timed; the code queue's programs are said at their time limits)."""
    judge = _judge_part(estimate, suite)
    cpu = _cpu_part(estimate, pools, load if embedded else None)
    parts = [*judge, *_embed_part(estimate, embedded, load), *_target_parts(estimate, suite), *cpu]
    timed = {"cpu"} if cpu else set()
    if pools is not None and estimate.code.programs:
        timed.add("code")
    untimed = {q: estimate.units[q] for q in UNTIMED_QUEUES if estimate.units.get(q) and q not in timed}
    # a call too large for tpm is never sent (an error, said above): not calls that no limit bounds
    unbound = 0 if judge or estimate.too_large(suite) else estimate.judge_total().paid
    code = _code_bound(estimate.code, pools, suite.sandbox.backend)
    unsampled = estimate.cpu is not None and not estimate.cpu.timed
    return WholeRun(tuple(parts), untimed, load, unbound, code, unsampled)


def _cpu_part(estimate: Estimate, pools: Pools | None, load: tuple[float, int] | None) -> list[Part]:
    """The cpu queue's items at the time its sample's took here each, over its worker processes; where this machine
    is busy (``load``: the workers run here), at the share of its cores the load leaves them."""
    timing = estimate.cpu
    if timing is None or pools is None or not timing.timed:
        return []
    seconds = timing.estimated_s(pools.cpu)
    busy = timing.busy_s(pools.cpu, *load) if load is not None and load[0] > load[1] else seconds
    processes = counted(pools.cpu, "cpu worker process", "cpu worker processes")
    each = f"{timing.per_item_s * 1000:.1f} ms{' or more' if timing.cut else ''}"
    cut = ", the last still being scored when the sample's time was up: a low end" if timing.cut else ""
    bound = (f"{counted(timing.items, 'item')} at {each} each, as {timing.timed} of them took here{cut}, over "
             f"{processes} ({pools.said})")  # fmt: skip
    return [Part("cpu", seconds, max(seconds, busy), bound, floor=False)]


def _code_bound(tally: ProgramTally, pools: Pools | None, backend: str) -> str:
    """What the code queue's programs (``tally``) take at their time limits over its worker processes: on the
    ``local`` sandbox ``backend`` the most, said as an upper bound; on ``docker`` (or ``auto``, docker where an engine
    answers) each one's container start adds to it, said so; empty where it has none (or its pools are not given)."""
    if not tally.programs or pools is None:
        return ""
    seconds = fmt_duration(tally.seconds / max(1, pools.code))
    up_to = "" if math.isclose(tally.seconds, tally.programs * tally.longest_s) else "up to "
    processes = counted(pools.code, "code worker process", "code worker processes")
    assumed = ", assumed as no cluster worker of the code queue says it runs" if pools.code_assumed else ""
    limits = f"{up_to}{tally.longest_s:g} s each over {processes}{assumed}"
    programs = counted(tally.programs, "program")
    not_run = "a dry run does not run the programs and most end far sooner"
    if backend == "local":
        return (f"the code queue at most {seconds} ({programs} at their time limits of {limits}: an upper bound, as "
                f"{not_run})")  # fmt: skip
    docker = "" if backend == "docker" else " where sandbox.backend auto finds an engine"
    return (f"the code queue's programs {seconds} at their time limits ({programs} of {limits}, each one's docker "
            f"container start besides{docker}: {not_run})")  # fmt: skip


def _judge_part(estimate: Estimate, suite: Suite) -> list[Part]:
    """The judge calls' least time under the limit they reach the most (none where no limit is reached, or a call is
    too large for ``tpm`` ever to send)."""
    minutes = {} if estimate.too_large(suite) else estimate.judge_minutes(suite)
    if not minutes:
        return []
    binding = max(minutes, key=lambda name: minutes[name])
    paid = estimate.judge_busiest_key(suite, binding).paid
    bound = f"judge.{limit_said(suite.judge, binding)} at {counted(paid, 'call')}{_per_key(estimate.in_flight_caps())}"
    return [Part("judge", minutes[binding] * 60, minutes[binding] * 60, bound, floor=True)]


def _per_key(keys: int) -> str:
    """What a judge limit's line adds where the calls go through several judge keys, a limiter each."""
    return f" of the busiest of {keys} judge keys (a limiter each: the judge metrics' api_key_env)" if keys > 1 else ""


def _embed_part(estimate: Estimate, embedded: bool, load: tuple[float, int] | None) -> list[Part]:
    """The encode of the texts not cached, with what comes before the first (an embedded run's worker start and the
    model's load; a cluster's load, where a worker has not loaded the model yet)."""
    tally = estimate.embed
    if tally is None or not tally.to_encode:
        return []
    before = EMBED_MODEL_LOAD_S + (EMBED_WORKER_START_S if embedded else 0.0)
    busy = tally.busy_s(*load) if embedded and load is not None and load[0] > load[1] else 0.0
    seconds = tally.estimated_s + before
    rate = "measured" if tally.measured is not None else "assumed"
    workers = tally.measured.workers if tally.measured is not None else 1
    bound = (f"{counted(tally.to_encode, 'text')} to encode at the {rate} rate with "
             f"{counted(workers, 'embed worker')}, after about {before:.0f} s of start and model load")  # fmt: skip
    return [Part("embed", seconds, max(seconds, busy + before), bound, floor=False, assumed=tally.measured is None)]


def _target_parts(estimate: Estimate, suite: Suite) -> list[Part]:
    """Each target's calls' least time under the limit of its they reach the most."""
    parts = []
    for target in suite.all_targets:
        minutes = estimate.target_minutes(target)
        if minutes:
            calls = estimate.target_calls.get(target.name, 0)
            binding = max(minutes, key=lambda name: minutes[name])
            bound = f"its {limit_said(target, binding)} at {counted(calls, 'call')}"
            seconds = max(minutes.values()) * 60
            parts.append(Part(f"target {target.name}", seconds, seconds, bound, floor=True))
    return parts


def whole_run_line(run: WholeRun, *, local_rounds: int | None = None) -> str:
    """The dry run's line of the whole run's time: the slowest part and what sets it, how much longer where this
    machine stays busy, the other parts beside it, which part's rate is assumed, and what is not timed (the queues a
    dry run does not run, the judge's calls no limit bounds). ``local_rounds``: an embedded run's judge replies one
    after another (:meth:`~.estimate.Estimate.local_rounds`), which bind instead of the judge's limits where a reply
    takes longer than the limits' time over them."""
    slowest = run.slowest
    untimed = _untimed(run.untimed, run.unbound_judge_calls, local_rounds, unsampled=run.unsampled)
    code = f"; {run.code_bound}" if run.code_bound else ""
    if slowest is None:
        return (f"whole run: not estimated (no part of it is timed: no judge limit reached, nothing to encode)"
                f"{code}{untimed}")  # fmt: skip
    took = f"at least {fmt_duration(slowest.seconds)}" if slowest.floor else f"about {fmt_duration(slowest.seconds)}"
    who = slowest.name if slowest.name.startswith("target ") else f"the {slowest.name} queue"
    line = f"whole run: {took}, bound by {who}: {slowest.bound}"
    if slowest.floor:
        line += " (a floor: re-asks, retries and 429s add to it)"
    if run.high_s > slowest.seconds + 1 and run.load is not None:
        load, cores = run.load
        busiest = max(run.parts, key=lambda part: part.busy_seconds)
        why = ("the cpu queue's processes on the share of its cores the load leaves them" if busiest.name == "cpu"
               else "the embed encode slowed as said above")  # fmt: skip
        line += (f"; up to {fmt_duration(run.high_s)} where this machine stays as busy as now (load average "
                 f"{load:.1f} on {counted(cores, 'core')}: {why})")  # fmt: skip
    if slowest.name == "judge" and local_rounds:
        line += (f"; longer where a judge reply takes over {slowest.seconds / local_rounds:.1f} s, as the local judge "
                 f"worker's threads send its calls in {thousands(local_rounds)} rounds one after another")  # fmt: skip
    beside = [_beside(part) for part in run.parts if part is not slowest]
    if beside:
        line += f"; beside it: {', '.join(beside)}"
    line += code
    assumed = [part.name for part in run.parts if part.assumed]
    if assumed:
        line += (f"; the {' and '.join(assumed)} time rests on an assumed rate, not one measured on this machine (it "
                 "can be many times longer): score a few hundred rows first for a measured one")  # fmt: skip
    return line + untimed


def _beside(part: Part) -> str:
    """A part named beside the slowest: its time, and for the cpu queue what it rests on (a sample and a process
    count that may be assumed)."""
    said = f"{part.name} {fmt_duration(part.seconds)}"
    return f"{said} ({part.bound})" if part.name == "cpu" else said


def _untimed(units: dict[str, int], judge_calls: int, local_rounds: int | None, *, unsampled: bool = False) -> str:
    """What the whole-run line adds of what it does not time: the judge's ``judge_calls`` that no limit bounds (sent
    in ``local_rounds``, where an embedded run's local judge worker sends them in rounds) and the queues' ``units``
    (``unsampled``: the cpu queue's sample was not scored within its bound)."""
    said = [_unbound_judge(judge_calls, local_rounds)] if judge_calls else []
    if unsampled and "cpu" in units:
        said.append(f"the cpu queue's {thousands(units['cpu'])} outputs (its sample's first item was not scored within "
                    f"{SAMPLE_LOAD_S:g} s here: a metric's load or a metric that hangs)")  # fmt: skip
        units = {queue: n for queue, n in units.items() if queue != "cpu"}
    if units:
        queues = " and ".join(f"the {queue} queue's {thousands(n)} outputs" for queue, n in units.items())
        said.append(f"{queues} (a dry run does not run their metrics; they run beside the others)")
    return f"; not timed: {', '.join(said)}" if said else ""


def _unbound_judge(calls: int, local_rounds: int | None) -> str:
    """The judge's ``calls`` that no limit of its bounds, said as not timed: the provider's reply time is theirs."""
    rounds = (f", as the local judge worker's threads send them in {thousands(local_rounds)} rounds one after another"
              if local_rounds else "")  # fmt: skip
    return (f"the judge's {thousands(calls)} calls (no judge limit bounds them: their time is the provider's reply "
            f"time{rounds})")  # fmt: skip
