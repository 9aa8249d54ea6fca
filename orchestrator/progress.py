"""Live progress while a run scores: a rich bar on a TTY, periodic plain lines otherwise, or nothing."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from typing import Any, Protocol, TextIO

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskID,
    TaskProgressColumn,
    TimeElapsedColumn,
)
from rich.table import Column, Table
from rich.text import Text

from ragscore_workers.schemas import SLOT_WAIT
from ragscore_workers.store import PAUSED_BACKING_OFF, PAUSED_BY_BUDGET, scored_of, work_before

from .floors import eta_floor_s
from .terminal import TerminalConsole, shown, write_to_nowhere

__all__ = [
    "ProgressView",
    "RecentRate",
    "at_least",
    "chunk_counts",
    "fmt_duration",
    "loading",
    "make_progress",
    "note_of",
    "queued_of",
    "wait_note",
]

#: Seconds between two plain progress lines when stdout is not a TTY.
PLAIN_INTERVAL_S = 5.0
#: Seconds between two rewrites of the notebook's progress line (:class:`InPlaceProgress`): one line, so it may move
#: as often as a bar does.
IN_PLACE_INTERVAL_S = 1.0
#: Seconds without a unit done or a judge or target call sent after which the view gives no ETA and says so (a stall),
#: or says what the judge or target calls wait on (the rate limit, a provider's 429 pause: :func:`wait_note`): the rich
#: bar on a line of its own under the bar, a plain line after ``ETA ?``.
IDLE_NOTE_S = 10.0
#: A run whose chunks come in bursts further apart than IDLE_NOTE_S (an embed chunk of 64 questions takes ~30 s on a
#: busy laptop CPU) is said to make no progress only once it has waited this many times its bursts' mean gap ...
IDLE_GAPS = 2.0
#: ... and never later than this: a worker that died mid-chunk is said within two minutes however slow its chunks were,
#: by the time ``ragscore run``'s stall recovery would act (``RAGSCORE_STALL_S``'s default).
IDLE_NOTE_MAX_S = 120.0
#: Seconds a model's load or a chunk's encoding is said (:func:`load_note`) and not taken for a stall (by the views'
#: "no progress", by ``ragscore run``'s stall recovery): a large model pulled onto a cold GPU host takes minutes; a load
#: still going after this is reported as a stall would be.
LOAD_NOTED_S = 900.0
#: Seconds of samples a recent rate is over (:class:`RecentRate`: the bar, the plain line, ``ragscore status``).
WINDOW_S = 30.0
#: Seconds the samples must span before their recent rate is used; the mean since work began until then.
RECENT_MIN_S = 10.0
#: Seconds of samples kept for a counter whose window holds fewer than two of its bursts (:class:`RecentRate`).
RECENT_KEPT_S = 120.0
#: How :func:`wait_note` names each limit (the suite's ``judge.rpm`` ... or what the provider stated below it).
_LIMIT_NAMES = {"rpm": "RPM", "tpm": "TPM", "rpd": "requests a day", "tpd": "tokens a day"}


class ProgressView(Protocol):
    """Receives the store's progress counters while a run scores (:meth:`RunStore.progress`: ``done``, ``total``,
    ``errors``, ``unscorable``, ``done:{queue}``/``total:{queue}``, ``judge_calls`` once the judge was called, and
    once a worker took a task of the run's attempt ``work_ms`` and ``before:{counter}``, while its judge (target) calls
    wait at the rate limiter ``judge_wait_*`` (``target_wait_*``: :func:`wait_note`), while a worker loads its model
    or encodes for the run ``load_ms:{queue}`` and ``load_of:{queue}:{doing}`` (:func:`load_note`) and of the chunks
    it encodes ``load_chunks:{queue}``, ``load_texts:{queue}``, ``load_encoded:{queue}`` (:func:`chunk_counts`), a
    cancelled run's ``worked:{queue}`` (what its workers did: :func:`scored_of`; its ``unscorable`` counts no stopped
    output); a view reads the keys it knows, as later versions may add some). A view may also have ``note(text)``,
    told what happens before and after scoring (reading and sending a large dataset, aggregating, writing reports), and
    ``queued(text)``, told while no worker has begun the run's attempt that other runs' messages wait ahead of it
    (``queued: 12,345 messages of other runs ahead on queue cpu``; "" once that is over), shown as the idle note
    would be, in its place (no ETA; the rich bar's note line under the bar): a run queued behind another run is
    waiting its turn, not stalled. ``held(text)``: told, while no progress is made, what of the run a worker that is
    gone holds and when the run sends it again ("" once progress is made), said after its "no progress".
    ``outage(seconds)``: told, at the first counters read after the run store did not answer, for how long (from
    the last poll it answered whole): no part of the run's pace (:meth:`RecentRate.outage`), nor of its idle time."""

    def start(self, run_id: str) -> None: ...
    def update(self, counters: dict[str, int], final: bool = False) -> None: ...
    def stop(self) -> None: ...


def _hook(view: object, name: str) -> Callable[[Any], None]:
    """The view's optional method ``name``, or a no-op for a view without one, or whose ``name`` is no method (a
    user's view may hold something of its own under that name)."""
    hook = getattr(view, name, None)
    return hook if callable(hook) else (lambda _text: None)


def note_of(view: object) -> Callable[[str], None]:
    """The view's ``note`` (what happens before and after scoring), or a no-op (:func:`_hook`)."""
    return _hook(view, "note")


def held_of(view: object) -> Callable[[str], None]:
    """The view's ``held`` (what of a stalled run a worker that is gone holds, and when it is sent again), or a no-op
    (:func:`_hook`)."""
    return _hook(view, "held")


def queued_of(view: object) -> Callable[[str], None]:
    """The view's ``queued`` (what the run waits behind before its work begins), or a no-op (:func:`_hook`)."""
    return _hook(view, "queued")


def outage_of(view: object) -> Callable[[float], None]:
    """The view's ``outage`` (seconds the run store did not answer since its last counters), or a no-op
    (:func:`_hook`)."""
    return _hook(view, "outage")


def fmt_duration(seconds: float | None) -> str:
    """``1m05s``, ``2h03m``; ``-`` for None."""
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _in(seconds: float) -> str:
    """``4 s``, else :func:`fmt_duration`'s ``2m05s``, ``24h36m`` (a wait to come, rounded up: never "in 0 s" while
    it lasts)."""
    whole = max(1, math.ceil(seconds))
    return f"{whole} s" if whole < 60 else fmt_duration(whole)


#: How :func:`wait_note` says each stage's wait (the ``{stage}_wait_*`` counters, judge first): its rate limit, who
#: paused it after a 429, and its calls.
_STAGES = {"judge": ("the judge rate limit", "the provider's", "judge"),
           "target": ("the target's rate limit", "the target's", "target")}  # fmt: skip


def wait_note(counters: dict[str, int], now: float | None = None, queues: Collection[str] | None = None) -> str:
    """What the run's judge and target calls wait on at the shared rate limiter, from :meth:`RunStore.progress`'s
    ``judge_wait_*`` and ``target_wait_*`` counters (``""`` for nothing; both joined by ``; ``): ``waiting on the judge
    rate limit (600 RPM): next judge call in 4 s``, ``waiting on target rag-v1's rate limit (60 RPM): next target call
    in 4 s`` (the target ``target_wait_of:{system}`` names; "the target's" without; ``judge_wait_of:{limiter}``: ``the
    judge rate limit of groq/llama-3.1-8b-instant with the key in JUDGE_KEY_B``), or, for the pause every worker
    keeps after a 429, ``paused by the provider's 429 until 10:32:05 UTC: next judge call in 40 s`` (``paused until
    10:32:05 UTC (the provider's rate-limit headers say its budget is spent): next judge call in 40 s`` when headers
    paused it, ``backing off after the provider's 429s without a retry time until 10:32:05 UTC: ...`` for the growing
    pause after 429s that said not how long to wait). ``now`` (epoch seconds, this host's clock; default: the clock
    now) dates the end of a pause. A worker loading its model or encoding for the run is said too (of ``queues`` only,
    when given): :func:`load_note`."""
    notes = [_stage_wait_note(stage, counters, now) for stage in _STAGES]
    return "; ".join(note for note in (*notes, load_note(counters, queues)) if note)


def _loads(counters: dict[str, int]) -> dict[str, int]:
    """The loads of :meth:`RunStore.progress`'s ``load_ms:{queue}`` under :data:`LOAD_NOTED_S`: queue -> ms."""
    return {key[len("load_ms:") :]: ms for key, ms in counters.items()
            if key.startswith("load_ms:") and ms < LOAD_NOTED_S * 1000}  # fmt: skip


def _load_s(counters: dict[str, int]) -> float:
    """Seconds the longest of the run's model loads has lasted (``load_ms:{queue}``, bound or not), 0 for none."""
    return max((ms for key, ms in counters.items() if key.startswith("load_ms:")), default=0) / 1000


def loading(counters: dict[str, int]) -> bool:
    """Whether a worker loads a model for the run, for less than :data:`LOAD_NOTED_S` so far: no stall."""
    return bool(_loads(counters))


def _doing(counters: dict[str, int], queue: str) -> str:
    """What the note of ``queue``'s worker says it does (``load_of:{queue}:{doing}``), ``""`` for no note."""
    of = f"load_of:{queue}:"
    return next((key[len(of) :] for key in counters if key.startswith(of)), "")


def load_note(counters: dict[str, int], queues: Collection[str] | None = None) -> str:
    """``embed: loading all-MiniLM-L6-v2 on cpu (12 s)``, ``embed: encoding 1,234 texts (20 s)``: what a worker of each
    queue (of ``queues`` only, when given) does for the run before its units are written (``""`` for none, or a note
    going on for :data:`LOAD_NOTED_S` or more: a stall's "no progress" says that one)."""
    notes = []
    for queue, ms in _loads(counters).items():
        if queues is not None and queue not in queues:
            continue
        doing = _doing(counters, queue) or "at work"
        took = f"{ms / 1000:.0f} s" if ms < 60_000 else fmt_duration(ms / 1000)
        notes.append(f"{queue}: {doing} ({took})")
    return "; ".join(notes)


def unbegun_load_note(
    counters: dict[str, int], base: dict[str, int], now: float | None = None, timing: Collection[str] = ()
) -> str:
    """:func:`wait_note` for a run at work where a queue with work of its own (``total:{queue}``) has done none of the
    attempt's (``done:{queue}`` not past ``base``'s), or is of ``timing`` (its first chunk after its model's load done,
    its pace not known yet: :meth:`RecentRate.timing`), while its worker loads a model or encodes: a model still loading
    on a cold GPU host while the cpu queue scores; its ETA can say nothing then. ``""`` where every loading queue
    has begun: its note would hide the ETA (an embed worker encodes nearly all the time)."""
    fresh = [
        q
        for q in _loads(counters)
        if f"total:{q}" in counters and (counters.get(f"done:{q}", 0) <= base.get(f"done:{q}", 0) or q in timing)
    ]
    return wait_note(counters, now, fresh) if fresh else ""


def _stage_wait_note(stage: str, counters: dict[str, int], now: float | None) -> str:
    """:func:`wait_note` of one stage's calls."""
    limit_of, whose, calls = _STAGES[stage]
    left_ms = counters.get(f"{stage}_wait_ms", 0)
    if left_ms <= 0:
        return ""
    of, of_limiter = f"{stage}_wait_of:", ""
    who = next((key[len(of) :] for key in counters if key.startswith(of)), None)
    if who is not None and stage == "judge":  # the judge limiter whose calls wait, named (the run has several)
        limit_of, of_limiter = f"{limit_of} of {who}", f" for {who}"
    elif who is not None:  # the target whose calls wait, named (a run may have several)
        limit_of, whose = f"target {who}'s rate limit", f"target {who}'s"
    left = left_ms / 1000
    next_call = f"next {calls} call in {_in(left)}"
    if f"{stage}_wait_pause" in counters:
        start = datetime.now(timezone.utc) if now is None else datetime.fromtimestamp(now, timezone.utc)
        until = (start + timedelta(seconds=left)).strftime("%H:%M:%S UTC")
        if counters[f"{stage}_wait_pause"] == PAUSED_BY_BUDGET:
            said = f"{whose} rate-limit headers{of_limiter} say its budget is spent"
            return f"paused until {until} ({said}): {next_call}"
        if counters[f"{stage}_wait_pause"] == PAUSED_BACKING_OFF:
            return f"backing off after {whose} 429s without a retry time{of_limiter} until {until}: {next_call}"
        return f"paused by {whose} 429{of_limiter} until {until}: {next_call}"
    if (cap := counters.get(f"{stage}_wait_{SLOT_WAIT}")) is not None:  # when a slot frees is unknown: no time said
        waiting = counters.get(f"{stage}_wait_{SLOT_WAIT}_calls")
        count = f"{waiting:,} " if waiting else ""
        return f"{count}{calls} calls wait for a max_in_flight slot{of_limiter} (cap {cap:,})"
    for name, said in _LIMIT_NAMES.items():
        if f"{stage}_wait_{name}" in counters:
            limit = f"{counters[f'{stage}_wait_{name}']:,} {said}{_defaulted(stage, name, counters)}"
            return f"waiting on {limit_of} ({limit}): {next_call}"
    return ""


def _defaulted(stage: str, name: str, counters: dict[str, int]) -> str:
    """What :func:`wait_note` adds of a judge limit left at ragscore's default (``judge_default:{name}``), as the dry
    run says it: assumed, not the provider's, and how to set it; ``""`` for any other."""
    if stage != "judge" or not counters.get(f"judge_default:{name}"):
        return ""
    return (f", the default (Groq's free tier), assumed, not your provider's limit: set judge.{name} in the suite, "
            f"or run with --{name}")  # fmt: skip


def _units(counters: dict[str, int]) -> tuple[int, int, int | None]:
    """The units a view counts done, the run's total, and a cancelled run's units stopped (None for any other run):
    its done is what its workers did (:func:`scored_of`), the rest stopped, as ``ragscore status`` counts them."""
    total, scored = counters.get("total", 0), scored_of(counters)
    if scored is None:
        return counters.get("done", 0), total, None
    return scored, total, max(total - scored, 0)


def _tallies(counters: dict[str, int]) -> str:
    """``errors 3 unscorable 12``, then `` judge calls 1,234`` for a run with judge metrics (its items end seldom: its
    calls show it at work); a cancelled run's begin with its units stopped (``stopped 7 errors 0 ...``)."""
    judge = f" judge calls {counters.get('judge_calls', 0):,}" if "total:judge" in counters else ""
    stopped = _units(counters)[2]
    cut = "" if stopped is None else f"stopped {stopped:,} "
    chunk = chunk_counts(counters)
    tallies = f"{cut}errors {counters.get('errors', 0)} unscorable {counters.get('unscorable', 0)}{judge}"
    return f"{tallies} {chunk}" if chunk else tallies


def chunk_counts(counters: dict[str, int]) -> str:
    """``embed chunk 512/2,048 texts encoded``, ``embed 2 chunks: 1,024/4,000 texts encoded``: how far each queue's
    workers are through the texts of the chunks they encode, summed over them (``load_chunks:{queue}``,
    ``load_texts:{queue}``, ``load_encoded:{queue}``: :meth:`RunStore.progress`), shown beside the tallies always, so
    that it stays once the queue's units began and the note is hidden (it would hide the ETA: :func:`unbegun_load_note`;
    the note itself says no count); ``""`` for none."""
    counts = []
    for key, chunks in counters.items():
        if key.startswith("load_chunks:") and chunks > 0:
            queue = key[len("load_chunks:") :]
            texts, encoded = counters.get(f"load_texts:{queue}", 0), counters.get(f"load_encoded:{queue}", 0)
            which = "chunk" if chunks == 1 else f"{chunks:,} chunks:"
            counts.append(f"{queue} {which} {encoded:,}/{texts:,} texts encoded")
    return "; ".join(counts)


def at_least(text: str, floor: bool) -> str:
    """An ETA's ``text``, marked ``≥`` where it is a floor (the run cannot end sooner, whatever its rate says)."""
    return f"≥{text}" if floor else text


def _clock(seconds: float) -> str:
    """``1:02:03`` (as rich's own time columns)."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _work_s(counters: dict[str, int]) -> float | None:
    """The attempt's time at work in seconds (``work_ms``, on the store's clock), None before a worker took its task."""
    return counters["work_ms"] / 1000 if "work_ms" in counters else None


def _reloading(counters: dict[str, int]) -> set[str]:
    """The queues a worker of which loads its model (``load_of:{queue}:loading ...``, :func:`load_note`)."""
    notes = (key.split(":", 2) for key in counters if key.startswith("load_of:"))
    return {note[1] for note in notes if len(note) == 3 and note[2].startswith("loading ")}


class RecentRate:
    """Counters' rates over their last :data:`WINDOW_S` seconds of samples: a slow start (a model's load, workers slowed
    while the rows are sent) drags a mean since work began for the whole run (at 100k rows it said 122 s left where 23 s
    were). The one recent rate of the progress bar, its plain line and ``ragscore status``: their ETA and the rate shown
    beside it.

    A chunk's units are written together once it is scored (a long judge chunk's after its calls), so a counter moves in
    bursts: its rate is over whole bursts, the units after its first in the window over the time from that one to its
    last (a window holding one or two 20 s chunks read half or double their pace by turns). A window holding fewer than
    two takes the last two of :data:`RECENT_KEPT_S` (a slow queue's chunks). Once the silence since its last burst
    outlasts the bursts' mean gap, the excess counts too: a queue that slows down reads slower as it waits. Once it
    writes again, an outage's interval (a worker's restart, its model's load seen, or the run store not answering:
    :meth:`_outages`) counts as the bursts' usual one, and the seconds the run store did not answer (:meth:`outage`)
    are left out of the silence since the last burst. Until it has seen two, its rate counts from its first sample
    kept, but a queue's lone burst after its model's load gives no rate (:meth:`timing`)."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, dict[str, int]]] = deque()
        #: ``(time, queue)`` of each sample kept that saw a worker of the queue load its model (:meth:`_outages`).
        self.reloads: deque[tuple[float, str]] = deque()
        #: ``(time, seconds)`` of each sample kept that came after the run store did not answer for ``seconds``.
        self.lost: deque[tuple[float, float]] = deque()
        #: Seconds it did not answer, told since the last sample (:meth:`outage`): the next sample's.
        self.untold_s = 0.0
        self.attempt: object = None

    def add(self, t: float, counters: dict[str, int], attempt: object = None) -> None:
        """A sample at time ``t`` (seconds, on one clock) of the run's attempt ``attempt``: a new attempt (or a time
        before the last: a new attempt's clock) starts anew, its window never holding the earlier attempt's counts."""
        if self.samples and (t < self.samples[-1][0] or attempt != self.attempt):
            self.clear()
        self.attempt = attempt
        self.samples.append((t, counters))
        self.reloads.extend((t, queue) for queue in _reloading(counters))
        if self.untold_s:
            self.lost.append((t, self.untold_s))
            self.untold_s = 0.0
        while t - self.samples[0][0] > max(RECENT_KEPT_S, self.window_s):
            self.samples.popleft()
        for kept in (self.reloads, self.lost):
            while kept and kept[0][0] < self.samples[0][0]:
                kept.popleft()

    def clear(self) -> None:
        self.samples.clear()
        self.reloads.clear()
        self.lost.clear()

    def outage(self, seconds: float) -> None:
        """The run store did not answer for ``seconds`` since the last sample: the interval up to the next one is an
        outage (:meth:`_outages`), and no part of the silence since the last burst (a broker's outage is no pace of the
        run's)."""
        self.untold_s += seconds

    def _lost_s(self, t0: float, t1: float) -> float:
        """Seconds the run store did not answer between the samples at ``t0`` and ``t1``."""
        return sum(seconds for t, seconds in self.lost if t0 < t <= t1)

    def rate(self, key: str, left: int) -> float | None:
        """Units per second of counter ``key`` (``done``, ``done:{queue}``), ``left`` of its units still to do, over its
        bursts (the class's doc); None (the caller's mean since work began instead) while the samples span less than
        :data:`RECENT_MIN_S`, or fewer than two bursts of it were seen with units left (0/s with none: it ended). 0/s
        (no ETA, as before its first burst) while its pace is not known yet (:meth:`timing`)."""
        if not self.samples:
            return None
        if left > 0 and self.timing(key):
            return 0.0
        if self.samples[-1][0] - self.samples[0][0] < RECENT_MIN_S:
            return None
        now = self.samples[-1][0]
        bursts = self._bursts(key)
        recent = [burst for burst in bursts if burst[0] >= now - self.window_s]
        start = [(self.samples[0][0], self.samples[0][1].get(key, 0))]  # where fewer than two bursts were seen
        used = recent if len(recent) >= 2 else bursts[-2:] if len(bursts) >= 2 else start + bursts
        if len(used) < 2:
            return None if left > 0 else 0.0
        spans = self._spans(key, [t for t, _ in used], [t for t, _ in bursts])
        gap = sum(spans) / len(spans)
        silent = now - used[-1][0] - self._lost_s(used[-1][0], now)
        return (used[-1][1] - used[0][1]) / (sum(spans) + max(0.0, silent - gap))

    def timing(self, key: str) -> bool:
        """Whether the pace of a queue's counter ``key`` (``done:{queue}``) is not known yet: its lone burst in the
        samples kept came after a worker of the queue was seen loading its model. That chunk's time holds the load (6 s
        of 8.5 s in a recorded CPU run: its ETA was 21 times the time left), so the pace counts from its end, at the
        queue's next burst."""
        queue = key.partition(":")[2]
        bursts = self._bursts(key) if queue else []
        return len(bursts) == 1 and any(t < bursts[0][0] and of == queue for t, of in self.reloads)

    def _bursts(self, key: str) -> list[tuple[float, int]]:
        """``(time, count)`` of each sample kept where counter ``key`` grew."""
        return [(t, c.get(key, 0)) for (_, was), (t, c) in pairwise(self.samples) if c.get(key, 0) > was.get(key, 0)]

    def _spans(self, key: str, used: list[float], bursts: list[float]) -> list[float]:
        """Seconds of each interval between the times ``used`` (of ``bursts``, or the first sample's then the lone
        burst's), an outage's (:meth:`_outages`) counted as the mean of the bursts' other intervals: a restarted
        worker's outage (no worker encoded, then its model loaded) made its queue's rate slow, its ETA long, for a
        window after it encoded again."""
        outages = self._outages(key, bursts)
        usual = [t1 - t0 for (t0, t1), outage in outages.items() if not outage]
        mean = sum(usual) / len(usual) if usual else None
        return [mean if mean is not None and outages.get(gap) else gap[1] - gap[0] for gap in pairwise(used)]

    def _outages(self, key: str, bursts: list[float]) -> dict[tuple[float, float], bool]:
        """Whether counter ``key`` stood still for an outage between each two of its ``bursts``: a worker of its queue
        (of any queue, for ``done``) loaded its model then (a restart), or the run store did not answer
        (:meth:`outage`: a chunk scored across it is written whenever it answers again, as soon as it does or a chunk's
        work later, so the interval less the outage is no pace either). A long interval alone is none: a judge queue
        held by its rate limit or a provider's 429, a worker shared with another run, a slow chunk wait that long at
        their usual pace, and the rate says what it saw."""
        queue = key.partition(":")[2]
        stops = [t for t, of in self.reloads if of == queue or not queue] + [t for t, _ in self.lost]
        return {(t0, t1): any(t0 < t <= t1 for t in stops) for t0, t1 in pairwise(bursts)}

    def burst_gap(self, key: str = "done") -> float:
        """Mean seconds between the bursts of counter ``key`` in the samples kept, those the run store did not answer in
        left out where others are kept (0.0 with fewer than two)."""
        gaps = [(t1 - t0, self._lost_s(t0, t1) > 0) for t0, t1 in pairwise(t for t, _ in self._bursts(key))]
        usual = [gap for gap, lost in gaps if not lost] or [gap for gap, _ in gaps]
        return sum(usual) / len(usual) if usual else 0.0


def _eta_holds(counters: dict[str, int], note: str, behind: str) -> bool:
    """Whether the ETA stands beside the view's ``note``: none, or a worker loading its model or encoding (the other
    queues move meanwhile), not a stall nor a wait behind other runs (``behind``)."""
    return not note or (not behind and loading(counters))


def _unbegun_floor(least: float) -> tuple[float | None, bool]:
    """The ETA of a run a queue of which has done none of its units yet: the judge's (or a target's) ``least`` under
    its rate limit, as a floor, since the unbegun queue's time is not known; None where there is none (``ETA ?``). Not
    the moving queues' time left at their rate: they may go faster (once a model's load frees the cores), so it is no
    floor."""
    return (least, True) if least > 0 else (None, False)


class _Rate:
    """Units per second and ETA of the run's current attempt. The queues work side by side, so the ETA is the
    slowest queue's (its units left over its own rate): the run's units left over the summed rate made a fast cpu
    queue's pace read as the judge queue's. Work is seen when a unit is done or a judge or target call is sent: a long
    judge item is at work while its calls go out, a chunk of questions while its target is asked, not stalled.

    The rate counts from when a worker first took one of the attempt's tasks, on the store's clock
    (``work_ms``, and ``before:{counter}`` what was done before: :meth:`RunStore.progress`). A run queued behind
    another run's messages on a shared cluster was not at work while it waited, nor a resumed run in its earlier
    attempt (counted from the start of the following, 100 units in 10 s after a minute's wait read 1.4/s). Not from
    the first poll that sees a unit done either: a chunk's units are written together once it is scored, so that
    poll comes a chunk's work after its start (counted from the poll before, 100 units read 500/s, not 20/s). Until
    its stamp the attempt has no pace (0/s, no ETA). Counters without the stamp (a store written before it) count
    from the start of the following, what this process saw done (a resumed run's earlier units, already in the
    first counters it reads, are its baseline).

    Once its samples span :data:`RECENT_MIN_S`, the rate and the ETA are those of the last :data:`WINDOW_S` seconds
    (:class:`RecentRate`, on the store's clock where the counters have it), not the mean since work began; a run
    whose units are all done keeps the mean over its scoring."""

    def __init__(self) -> None:
        self.started = self.changed = time.monotonic()
        #: What a worker that is gone holds, and when it is sent again (the view's ``held``): said after "no progress".
        self.held = ""
        self.base: dict[str, int] | None = None
        self.last: tuple[int, int, int] = (-1, -1, -1)
        #: ``work_ms`` when work was last seen (a unit done, a judge or target call sent); None before the stamp.
        self.changed_work_s: float | None = None
        #: Whether counters with the stamp were seen: its absence then is an attempt (a stall's recovery) not begun.
        self.stamped = False
        self.recent = RecentRate()
        #: Seconds of no work after which :meth:`idle_note` says so: set at each burst of units from the bursts before
        #: (:data:`IDLE_GAPS`), so that a silence does not shorten it as its bursts leave the samples kept.
        self.idle_after = IDLE_NOTE_S

    def measure(self, counters: dict[str, int]) -> tuple[float, float | None, bool]:
        """Units per second, the ETA (None: none to give) and whether it is a floor (the judge's or a target's rpm
        allows no sooner: :func:`eta_floor_s`)."""
        done, total = counters.get("done", 0), counters.get("total", 0)
        now = time.monotonic()
        if self.base is None:
            self.base = {k: v for k, v in counters.items() if k == "done" or k.startswith("done:")}
        seen = (done, counters.get("judge_calls", 0), counters.get("target_calls", 0))
        work_s = _work_s(counters)
        worked = seen != self.last
        if worked:
            self.last, self.changed, self.changed_work_s = seen, now, work_s
        finished = 0 < total <= done  # every unit done (aggregating): the rate over the scoring, not falling after
        if work_s is not None:
            self.stamped = True
            base = work_before(counters)
            at = self.changed_work_s if finished and self.changed_work_s is not None else work_s
            elapsed = max(at, 1e-9)
        elif self.stamped:  # a new attempt (the recovery of a stall) no worker has begun yet
            self.recent.clear()
            self.idle_after = IDLE_NOTE_S
            return 0.0, None, False
        else:
            base = self.base
            elapsed = max((self.changed if finished else now) - self.started, 1e-9)
        self.recent.add(now if work_s is None else work_s, counters)
        if worked:  # work seen at this poll: the wait it ends is the run's pace, not a stall
            gaps = IDLE_GAPS * self.recent.burst_gap()
            self.idle_after = min(IDLE_NOTE_MAX_S, max(IDLE_NOTE_S, gaps))

        def pace(key: str, left: int) -> float:
            """``key``'s units per second: of the last seconds (:class:`RecentRate`), else since work began."""
            recent = None if finished else self.recent.rate(key, left)
            return max(0, counters.get(key, 0) - base.get(key, 0)) / elapsed if recent is None else recent

        rate = pace("done", total - done)
        queues = [key[len("total:") :] for key in counters if key.startswith("total:")]
        if queues:  # each queue's units left and its own pace
            lefts = {q: counters[f"total:{q}"] - counters.get(f"done:{q}", 0) for q in queues}
            paces = [(lefts[q], pace(f"done:{q}", lefts[q])) for q in queues]
        else:
            paces = [(total - done, rate)]
        paces = [(left, pace) for left, pace in paces if left > 0]
        if any(pace <= 0 for _, pace in paces):  # a queue with work left and none done yet (its model loading)
            return rate, *_unbegun_floor(eta_floor_s(counters))
        # never sooner than the judge's (or target's) rpm lets its calls left go (a first burst's pace is not the run's)
        guess, least = max((left / pace for left, pace in paces), default=0.0), eta_floor_s(counters)
        return rate, max(guess, least), least > guess

    def waiting(self) -> None:
        """The run waits its turn behind other runs' messages: not idle, its idle time counts from the end of that."""
        self.changed = time.monotonic()

    def outage(self, seconds: float) -> None:
        """The run store did not answer for ``seconds``: no stall, and no part of the gaps between its bursts."""
        self.changed += seconds
        self.recent.outage(seconds)

    def _base(self, counters: dict[str, int]) -> dict[str, int]:
        """The counters before the attempt's work: ``before:{counter}``, or the first seen for a store without the
        stamp."""
        return work_before(counters) if _work_s(counters) is not None else self.base or {}

    def _began(self, counters: dict[str, int]) -> bool:
        """Whether a unit of the attempt was done (``done`` past its :meth:`_base`)."""
        return counters.get("done", 0) > self._base(counters).get("done", 0)

    def idle_note(self, counters: dict[str, int]) -> str:
        """``no progress for 25 s`` once no unit was done and no judge or target call sent for IDLE_NOTE_S, or for
        IDLE_GAPS times the mean gap between the run's recent bursts of units when that is longer (a run of slow chunks
        waits that long between them at its usual pace), up to IDLE_NOTE_MAX_S (:attr:`idle_after`); the ETA means
        nothing then. What the judge calls wait on instead, when they wait at the rate limiter (:func:`wait_note`): a
        run held by its ``--rpm`` or a provider's 429 is not stuck. None for a cancelled run: nothing is left to come
        but its summary (its skipped chunks may stay unwritten), which is no stall. A worker loading its model or
        encoding for the run (:func:`load_note`) is at work, not idle, and is said at once until its queue's first
        units of the attempt are done (its ETA then: an embed worker encodes most of the time, its note would hide
        the ETA)."""
        done, total = counters.get("done", 0), counters.get("total", 0)
        if done >= total or scored_of(counters) is not None:
            return ""
        if loading(counters):
            self.changed = time.monotonic()
            if not self._began(counters):
                return wait_note(counters)
            timing = [q for q in _loads(counters) if self.recent.timing(f"done:{q}")]
            return unbegun_load_note(counters, self._base(counters), timing=timing)
        # a load past LOAD_NOTED_S: no unit was done all the while it loaded, not just since it passed the bound
        idle = max(time.monotonic() - self.changed, _load_s(counters))
        if idle < self.idle_after:
            return ""
        return wait_note(counters) or f"no progress for {idle:.0f} s" + (f"; {self.held}" if self.held else "")


#: The bar's width at most, and at least: narrower, it is left out (the percent beside it says as much).
BAR_WIDTH, BAR_MIN_WIDTH = 40, 10
#: The run's name is cut to fit a narrow terminal down to this many columns (``run 2026…``), then left out.
NAME_MIN_WIDTH = 9
#: The bar line's parts, the widest layout first (:func:`_bar_line`): on a narrower terminal the tallies go under the
#: bar, then the bar, the time elapsed and the rate are left out, the run's name is cut, then left out, then the ETA:
#: the count done/total and the percent stay to the last. ``bar`` and ``cut name`` take the columns left, each from
#: its least (:data:`_LEAST`).
_LAYOUTS = (
    ("name", "bar", "count", "percent", "rate", "elapsed", "eta", "tallies"),
    ("name", "bar", "count", "percent", "rate", "elapsed", "eta"),
    ("name", "bar", "count", "percent", "rate", "eta"),
    ("name", "count", "percent", "rate", "elapsed", "eta"),
    ("name", "count", "percent", "rate", "eta"),
    ("cut name", "count", "percent", "eta"),
    ("count", "percent", "eta"),
    ("count", "percent"),
)
_LEAST = {"bar": BAR_MIN_WIDTH, "cut name": NAME_MIN_WIDTH}


def _bar_parts(task: Task) -> dict[str, Text]:
    """Each text part of ``task``'s bar line, by its name in :data:`_LAYOUTS` (empty for one it has not: a percent
    before the total is known, tallies before the first counters)."""
    name = Text(task.description, style="bold")
    return {
        "name": name, "cut name": name, "count": MofNCompleteColumn().render(task),
        "percent": TaskProgressColumn().render(task), "rate": Text(f"{task.fields['rate']:>8.1f}/s"),
        "elapsed": _elapsed(task), "eta": Text(f"ETA {task.fields['eta']}"),
        "tallies": Text(task.fields["tallies"]),
    }  # fmt: skip


def _elapsed(task: Task) -> Text:
    """The attempt's time at work on the store's clock (``work_ms``: what the rate divides by), else the bar's own time
    shown: a large dataset's bar starts once its rows are all sent, its workers at work since the first was."""
    work_s = task.fields.get("work_s")
    return TimeElapsedColumn().render(task) if work_s is None else Text(_clock(work_s), style="progress.elapsed")


def _bar_line(task: Task, width: int) -> tuple[Table, bool]:
    """``task``'s bar line in the widest of :data:`_LAYOUTS` that fits ``width`` columns (the narrowest when none
    does), and whether its tallies are on it."""
    texts = _bar_parts(task)
    for layout in _LAYOUTS:
        shown = [part for part in layout if part == "bar" or texts[part].cell_len]
        room = width - sum(texts[part].cell_len for part in shown if part not in _LEAST) - (len(shown) - 1)
        if room >= sum(_LEAST.get(part, 0) for part in shown):
            break
    cells: list[RenderableType] = []
    for part in shown:
        if part == "bar":
            cells.append(BarColumn(bar_width=min(room, BAR_WIDTH)).render(task))
        elif part == "cut name":
            cut = texts[part].copy()
            cut.truncate(room, overflow="ellipsis")
            cells.append(cut)
        else:
            cells.append(texts[part])
    line = Table.grid(*(Column(no_wrap=True) for _ in cells), padding=(0, 1))
    line.add_row(*cells)
    return line, "tallies" in shown


class _TaskLines:
    """A task's bar line fitted to the width it is drawn in (:func:`_bar_line`), then, each on a line of its own,
    wrapped, never cut, its tallies where they did not fit on it and its note."""

    def __init__(self, task: Task) -> None:
        self.task = task

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line, with_tallies = _bar_line(self.task, options.max_width)
        yield line
        under = ("note",) if with_tallies else ("tallies", "note")
        yield from (Text(self.task.fields[name]) for name in under if self.task.fields.get(name))


class _NotedProgress(Progress):
    """A rich ``Progress`` whose tasks each show as :class:`_TaskLines` (rich's columns are not used): its table of
    columns cut them all below 73 columns (the counts read "100…" at 40), and a long note (a wait on two stages'
    limits) as its last column was cut."""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield from (_TaskLines(task) for task in self.tasks if task.visible)


class _RatedView:
    """The ``held`` and ``outage`` of the views that measure the run's pace with a :class:`_Rate` (its ``rate``)."""

    rate: _Rate

    def held(self, text: str) -> None:
        """Said after the idle note (:meth:`_Rate.idle_note`)."""
        self.rate.held = text

    def outage(self, seconds: float) -> None:
        """Left out of the rate's gaps and of the idle time (:meth:`_Rate.outage`)."""
        self.rate.outage(seconds)


class RichProgress(_RatedView):
    """A rich progress bar: done/total work units and their percent, rate, ETA, then errors, unscorable and judge calls
    (under it where they do not fit beside it), and under it its note (what the run waits on, a stall)."""

    #: The bar's one task, which :meth:`start` adds.
    task: TaskID

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or TerminalConsole(stderr=True)
        self.bar = _NotedProgress(console=self.console, transient=False)
        self.rate = _Rate()
        self.behind = ""

    def start(self, run_id: str) -> None:
        self.rate, self.behind = _Rate(), ""
        self.bar.start()
        self.task = self.bar.add_task(f"run {run_id}", total=None, rate=0.0, eta="-:--:--", tallies="",
                                      note="", work_s=None)  # fmt: skip

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        done, total, stopped = _units(counters)
        rate, eta, floor = self.rate.measure(counters)
        if self.behind:
            self.rate.waiting()
        note = self.behind or self.rate.idle_note(counters)
        self.bar.update(
            self.task, completed=done, total=total or None, rate=rate,
            eta="-:--:--" if eta is None or not _eta_holds(counters, note, self.behind) or stopped is not None
            else at_least(_clock(eta), floor),
            tallies=_tallies(counters), note=note, work_s=_work_s(counters),
        )  # fmt: skip

    def stop(self) -> None:
        self.bar.stop()

    def queued(self, text: str) -> None:
        """Shown under the bar; printed once too when a wait begins (kept in the terminal's scrollback). Its count
        changes every few seconds: not printed again for that."""
        if text and not self.behind:
            self.note(text)
        self.behind = text

    def note(self, text: str) -> None:
        self.console.print(f"[ragscore] {text}", markup=False, highlight=False)


class PlainProgress(_RatedView):
    """One line every ``PLAIN_INTERVAL_S`` seconds (logs, CI)."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stderr
        self.rate = _Rate()
        self.last = 0.0
        self.run_id = ""
        self.said: tuple[int, ...] = ()
        #: The last progress line printed: the run's final update does not print the same again.
        self.line = ""
        self.behind = ""

    def start(self, run_id: str) -> None:
        self.run_id = run_id
        self.rate, self.behind = _Rate(), ""

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < self.interval_s():
            return
        done, total, stopped = _units(counters)
        said = (done, total, counters.get("errors", 0), counters.get("unscorable", 0), counters.get("judge_calls", 0))
        ended = 0 < total <= done or stopped is not None  # all scored, or cancelled: aggregating
        if not final and said == self.said and ended:  # said once is enough
            return
        self.last, self.said = now, said
        rate, eta, floor = self.rate.measure(counters)
        if self.behind:
            self.rate.waiting()
        pct = 100.0 * done / total if total else 0.0
        eta_text = at_least(f"{eta:.0f}s", floor) if eta is not None else "?"
        if note := self.behind or self.rate.idle_note(counters):
            eta_text = f"{eta_text if _eta_holds(counters, note, self.behind) else '?'} ({note})"
        # a cancelled run's: what its workers scored, with nothing left to come (no ETA)
        outputs, ahead = ("outputs", f" ETA {eta_text}") if stopped is None else ("outputs scored", "")
        line = (
            f"[ragscore] {self.run_id}: {done:,}/{total:,} item×metric {outputs} ({pct:.1f}%) {rate:.1f}/s{ahead} "
            f"{_tallies(counters)}"
        )
        if final and line == self.line:  # the last poll's line said it all: not printed twice in a row
            return
        self.line = line
        self._show(line)

    def stop(self) -> None:
        return None

    def interval_s(self) -> float:
        """Seconds between two progress lines (:data:`PLAIN_INTERVAL_S`, read at each update)."""
        return PLAIN_INTERVAL_S

    def queued(self, text: str) -> None:
        self.behind = text

    def note(self, text: str) -> None:
        self._print(f"[ragscore] {shown(text)}")

    def _show(self, line: str) -> None:
        """Print a progress line (a line of its own here)."""
        self._print(line)

    def _print(self, line: str, end: str = "\n") -> None:
        try:
            print(line, end=end, file=self.stream, flush=True)
        except BrokenPipeError:  # its reader went away: the run goes on, unwatched
            write_to_nowhere(self.stream)


class InPlaceProgress(PlainProgress):
    """The plain progress line rewritten in place (``\\r``) every ``IN_PLACE_INTERVAL_S`` seconds: a notebook's cell
    output, which shows a bar's terminal codes as text and would pile up a plain line every few seconds. Notes get
    lines of their own above it; the last progress line stays once the run stops. While the run is followed
    (``start`` to ``stop``) and its stream is ``sys.stderr``, what else is written there (a warning, a log record of
    logging's default handler) ends the line first: it starts a line of its own, and the progress line goes on below
    it (:class:`_LineEnding`)."""

    def __init__(self, stream=None) -> None:
        super().__init__(stream)
        #: Characters of the progress line now shown (0: none is), blanked when a shorter one replaces it.
        self.width = 0
        #: ``sys.stderr`` as it was before :meth:`start` put :attr:`_wrapper` there (None: it did not).
        self._stderr: TextIO | None = None
        self._wrapper: _LineEnding | None = None
        #: Held while the line is written or ended: a warning another thread writes meanwhile waits, then ends it.
        self._lock = threading.RLock()

    def interval_s(self) -> float:
        """Seconds between two rewrites of the line (:data:`IN_PLACE_INTERVAL_S`, read at each update)."""
        return IN_PLACE_INTERVAL_S

    def start(self, run_id: str) -> None:
        super().start(run_id)
        if self._stderr is None and sys.stderr is self.stream:  # warnings and logging's default handler write there
            self._wrapper = _LineEnding(self)
            self._stderr, sys.stderr = sys.stderr, self._wrapper

    def _show(self, line: str) -> None:
        with self._lock:
            self._print(f"\r{line.ljust(self.width)}", end="")
            self.width = len(line)

    def note(self, text: str) -> None:
        with self._lock:
            self._end_line()
            super().note(text)

    def stop(self) -> None:
        try:
            self._end_line()
        finally:  # given back though the stream failed, or a Ctrl-C came meanwhile
            if self._stderr is not None:
                if sys.stderr is self._wrapper:  # not one the caller set meanwhile
                    sys.stderr = self._stderr
                self._stderr = self._wrapper = None

    def _end_line(self) -> None:
        """Close the progress line shown, so what is printed next starts a line of its own."""
        with self._lock:
            if self.width:
                self._print("")
                self.width = 0


class _LineEnding:
    """``sys.stderr`` while an :class:`InPlaceProgress` line is shown there: a write (a warning, a log record) ends
    that line first, so it starts a line of its own; anything else is the stream's."""

    def __init__(self, view: InPlaceProgress) -> None:
        self._view = view

    def write(self, text: str) -> int:
        with self._view._lock:  # not between the line's write and its width: the line would go unended
            self._view._end_line()
            return self._view.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view.stream, name)


class QuietProgress:
    """No output."""

    def start(self, run_id: str) -> None:
        return None

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        return None

    def stop(self) -> None:
        return None

    def note(self, text: str) -> None:
        return None


def make_progress(quiet: bool = False) -> ProgressView:
    """Rich bar on a TTY, one line updated in place in a notebook (Jupyter), plain lines otherwise, nothing with
    ``quiet``."""
    if quiet:
        return QuietProgress()
    if sys.stderr.isatty():
        return RichProgress()
    return InPlaceProgress() if in_notebook(sys.stderr) else PlainProgress()


def in_notebook(stream: object) -> bool:
    """Whether ``stream`` is a Jupyter kernel's output (ipykernel's stream, whose ``\\r`` the notebook honours)."""
    return type(stream).__module__.startswith("ipykernel.")
