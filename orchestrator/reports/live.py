"""``ragscore status RUN [--watch]``: per-queue progress of a run from the store's counters.

Per queue: done/total work units, rate and ETA; for the run: errors, unscorable, and judge requests per
minute against the suite's ``rpm`` limit. Rates come from the samples of the last ``WINDOW_S`` seconds once they
span ``RECENT_MIN_S`` (``--watch``: :class:`~orchestrator.progress.RecentRate`, as the progress bar's; judge requests:
of the last minute, as the limit counts them), else from the average since its
current attempt's work began (a worker first took one of its tasks: the store's clock at both ends, less what was
done before). Time is passed in, never read here, so the arithmetic is tested without sleeping.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ragscore_workers.commands import backticked
from ragscore_workers.counts import agree, counted, listed, thousands
from ragscore_workers.schemas import RunSummary
from ragscore_workers.store import RunState, RunStore, work_before, work_began

from ..floors import eta_floor_s
from ..progress import (
    IDLE_NOTE_S,
    WINDOW_S,
    RecentRate,
    at_least,
    chunk_counts,
    fmt_duration,
    unbegun_load_note,
    wait_note,
)
from ..terminal import results_command, resume_command, shown

if TYPE_CHECKING:
    from ..queues import Finishing, Orphan

__all__ = ["Sample", "StatusView", "fmt_duration", "resume_hint", "sample", "scored_text"]

#: Seconds without work done after which a running run is said to make no progress (no ETA then).
STALLED_S = 60.0
#: Seconds judge requests are counted over: the window of the ``rpm`` limit they are shown against.
RPM_WINDOW_S = 60.0
QUEUES = ("target", "cpu", "embed", "judge", "code")
#: The table's columns; a cancelled run's: what its workers did (``scored``) beside what was stopped, with no ETA.
COLUMNS = ("queue", "done", "total", "%", "rate/s", "ETA")
CANCELLED_COLUMNS = ("queue", "scored", "stopped", "total", "%", "rate/s")


@dataclass(frozen=True)
class Sample:
    """The store's counters at one moment."""

    t: float
    progress: dict[str, int]
    judge_calls: int = 0
    #: Requests per minute the provider's headers stated below the suite's (the workers use it instead).
    provider_rpm: int | None = None
    #: When (the store's clock) a judge call was last sent: work, though no item ended.
    judge_called_at: float | None = None
    #: The store's clock at ``t`` (Redis ``TIME``): the clock ``progress_at`` and ``judge_called_at`` are read on.
    store_t: float | None = None

    def local(self, store_time: float) -> float:
        """A time of the store's clock on this host's: a host whose clock is off by minutes read a run's last
        work as minutes old (stalled) or as not yet done."""
        return store_time - (self.store_t - self.t) if self.store_t is not None else store_time


def sample(store: RunStore, run_id: str, now: float) -> Sample:
    """Read the counters (two small hashes) and the store's clock at time ``now`` (the clock the counters'
    ``work_ms`` runs to: :meth:`RunStore.progress_and_clock`, whose ``judge_calls`` are the judge calls)."""
    judge = store.counters(run_id, "judge")
    stated, called_at = judge.get("provider_rpm"), judge.get("called_at")
    progress, store_t = store.progress_and_clock(run_id)
    return Sample(now, progress, progress.get("judge_calls", 0),
                  stated if isinstance(stated, int) else None,
                  float(called_at) if isinstance(called_at, (int, float)) else None,
                  store_t)  # fmt: skip


def resume_hint(run_id: str, broker: str | None = None) -> str:
    """The two commands that finish a stopped run, as messages name them: ``run --resume`` by its reports' DIR, or
    ``resume`` by its id, as :func:`~orchestrator.terminal.resume_command` writes them, with ``DIR`` for the --out
    (not known where this is said), and the run's ``broker`` (its --broker)."""
    return backticked(resume_command("DIR", broker=broker), resume_command("DIR", run_id, broker),
                      joined=" (DIR: its --out) or ")  # fmt: skip


def _items_by_queue(held: Iterable[Orphan | Finishing]) -> dict[str, int]:
    """The items the ``held`` messages carry, per queue they were taken from."""
    items: dict[str, int] = {}
    for message in held:
        items[message.queue] = items.get(message.queue, 0) + message.items
    return items


def _where(items: dict[str, int]) -> str:
    """Where held items are: ``25 on cpu, 3 on judge`` (``no item: bookkeeping`` where the messages carry none)."""
    return ", ".join(f"{thousands(n)} on {q}" for q, n in items.items() if n) or "no item: bookkeeping"


def _finishing_line(worker: str, held: Sequence[Finishing]) -> str:
    """What stopping ``worker`` does with the run's messages it holds: finishes those it runs, and hands back those
    it took and did not start as it exits."""
    items = _items_by_queue(f for f in held if f.running)
    running = sum(items.values())
    line = (f"{counted(running, 'item')} of this run ({_where(items)}) {agree(running, 'is', 'are')} being finished "
            f"by worker {worker}, which is stopping: it takes no more work, and exits once "
            f"{agree(running, 'it is', 'they are')} done")  # fmt: skip
    dropped = _items_by_queue(f for f in held if not f.running)
    if dropped:
        n = sum(dropped.values())
        line += (f"; {counted(n, 'item')} it took and did not start ({_where(dropped)}) {agree(n, 'goes', 'go')} "
                 "back to the queue as it exits")  # fmt: skip
    return line


class StatusView:
    """Keeps recent samples of one run and renders them as a table."""

    def __init__(self, meta: dict[str, str], window_s: float = WINDOW_S, broker: str | None = None) -> None:
        self.meta = meta
        #: The --broker the run is watched with: its resume commands name it (:func:`resume_hint`).
        self.broker = broker
        #: The last sample (the counters shown), and the recent rates of the samples (:meth:`rate`).
        self.samples: deque[Sample] = deque(maxlen=1)
        self.recent = RecentRate(window_s)
        #: ``(time, judge calls)`` of the samples of the last RPM_WINDOW_S seconds.
        self._calls: deque[tuple[float, int]] = deque()
        #: Whether ``_calls`` covers a whole RPM_WINDOW_S (a sample older than it was dropped).
        self._minute_watched = False
        #: Queues no worker served at the last check: ``{queue: (its done count then, the warning)}``.
        self.unserved: dict[str, tuple[int, str]] = {}
        #: The run's messages held by workers that are gone, at the last check, and the run they are of.
        self.orphans: Sequence[Orphan] = ()
        self._orphans_of = ""
        #: The run's messages held by workers stopping cleanly, which finish them (and answer no ``inspect`` meanwhile).
        self.finishing: Sequence[Finishing] = ()
        #: Seconds after its delivery that Redis hands an orphaned message to another worker.
        self.visibility_s = 0.0
        #: The ended run's current summary, once written: its counts are what ``results`` reports.
        self.summary: RunSummary | None = None
        #: What the run waited behind at the last look, before its work began (``queues.queued_message``).
        self._queued = ""
        #: Why the broker's notes (what waits, unserved queues, orphans) are not shown: its Redis did not answer.
        self.broker_note = ""

    def set_orphans(
        self, run_id: str, orphans: Sequence[Orphan], visibility_s: float, finishing: Sequence[Finishing] = ()
    ) -> None:
        """The run's messages held by workers that are gone (``queues.held_messages``), replacing the last check's:
        their work waits for the visibility timeout, so the queues they hold, and the run, end no sooner. ``finishing``:
        those held by workers stopping cleanly, which finish them first (no crash: said apart)."""
        self.orphans, self._orphans_of, self.visibility_s = orphans, run_id, visibility_s
        self.finishing = finishing

    @property
    def finishing_lines(self) -> list[str]:
        """Per worker stopping cleanly, what of the run it finishes before it exits, and what it took and did not
        start, which goes back to its queue as it exits (none once the run ended)."""
        if self.meta.get("state") in RunState.DONE:
            return []
        by_worker: dict[str, list[Finishing]] = {}
        for f in self.finishing:
            by_worker.setdefault(f.worker, []).append(f)
        return [_finishing_line(worker, finishing) for worker, finishing in by_worker.items()]

    def _back_at(self, queue: str | None = None) -> float | None:
        """When (epoch seconds) Redis has handed back every orphaned message (of ``queue``; None: of any queue):
        the visibility timeout after the last one's delivery. None when none is held, or the run has ended."""
        times = [o.delivered_at for o in self.orphans if queue is None or o.queue == queue]
        if not times or self.meta.get("state") in RunState.DONE:
            return None
        return max(times) + self.visibility_s

    def _held_back(self, now: float, queue: str | None = None) -> float | None:
        """Seconds from ``now`` to :meth:`_back_at` (0 once it has passed); None where that is None."""
        back = self._back_at(queue)
        return None if back is None else max(0.0, back - now)

    def _orphaned_warning(self, now: float) -> str:
        """What the orphaned messages hold, and when their work can go on ("" for none)."""
        back = self._back_at()
        if back is None:
            return ""
        items = _items_by_queue(self.orphans)
        where = _where(items)
        at = time.strftime("%H:%M:%S UTC", time.gmtime(back))
        held = sum(items.values())
        if back > now:
            when = f"at about {at}, in {fmt_duration(back - now)}: the run cannot end before then (ETA ≥)"
        else:
            takes = "live workers of their queues take them" if sum(1 for n in items.values() if n) > 1 else agree(
                held, "a live worker of its queue takes it", "a live worker of their queue takes them")  # fmt: skip
            when = f"from about {at}, which has passed: {takes} within seconds"
        return (
            f"{counted(held, 'item')} of this run ({where}; {counted(len(self.orphans), 'message')}) "
            f"{agree(held, 'is', 'are')} held by a worker that stopped (killed, or its host lost): Redis hands "
            f"{agree(held, 'it', 'them')} to another worker only after the "
            f"visibility timeout (RAGSCORE_VISIBILITY_TIMEOUT_S={self.visibility_s:.0f} s after delivery), {when}; "
            f"{backticked(resume_command('DIR', self._orphans_of, self.broker))} sends that work again sooner: at once "
            "when no worker that runs holds the run's other work, else once that is done (a run at work is followed, "
            "not resumed)"
        )

    def set_queued(self, text: str) -> None:
        """Other runs' messages ahead of the run on its queues (``queued: 12,345 messages of other runs ahead on queue
        cpu``; "" for none), replacing the last look's."""
        self._queued = text

    @property
    def queued(self) -> str:
        """The last look's :meth:`set_queued`, while the run has not ended and no worker has begun its attempt."""
        if self.meta.get("state") in RunState.DONE or work_began(self.meta) is not None:
            return ""
        return self._queued

    def set_unserved(self, messages: dict[str, str]) -> None:
        """The queues a consumer check found no worker for, with their warnings (replacing the last check's)."""
        done = self.samples[-1].progress if self.samples else {}
        self.unserved = {q: (done.get(f"done:{q}", 0), msg) for q, msg in messages.items()}

    def _still_unserved(self) -> dict[str, str]:
        """The unserved queues' warnings, but for a queue whose work moved on since the check (a worker came) and
        on a run that ended."""
        if not self.samples or self.meta.get("state") in RunState.DONE:
            return {}
        done = self.samples[-1].progress
        return {q: msg for q, (then, msg) in self.unserved.items() if done.get(f"done:{q}", 0) <= then}

    @property
    def warnings(self) -> list[str]:
        """Lines under the table: the warnings of the queues still unserved, and of orphaned messages."""
        if self.meta.get("state") in RunState.DONE or not self.samples:
            return []
        orphaned = self._orphaned_warning(self.samples[-1].t)
        return [*self._still_unserved().values(), *([orphaned] if orphaned else [])]

    def add(self, s: Sample) -> None:
        self.samples.append(s)
        self.recent.add(s.t, s.progress, self.meta.get("generation"))  # a resume's window starts anew
        self._calls.append((s.t, s.judge_calls))
        while s.t - self._calls[0][0] > RPM_WINDOW_S:
            self._calls.popleft()
            self._minute_watched = True

    def _meta_time(self, name: str) -> float | None:
        try:
            return float(self.meta[name])
        except (KeyError, ValueError):
            return None

    def _worked_at(self) -> float | None:
        """When work was last done: an item written (``progress_at``), a judge or a target call sent
        (``target_called_at``), whichever is later. A judge item ends only once its calls have, a target's chunk once
        its questions are answered: a long judge run whose calls went out read as stalled, and a run asking its
        target."""
        worked = self._worked_at_store()
        return self.samples[-1].local(worked) if self.samples and worked is not None else worked

    def idle_s(self, now: float) -> float | None:
        """Seconds since work was last done on a run that has not ended (None: ended, or nothing done yet)."""
        last = self._worked_at()
        if self.meta.get("state") in RunState.DONE or last is None:
            return None
        return max(0.0, now - last)

    @property
    def submitting(self) -> bool:
        """Rows are still being sent: the totals still grow (no ETA from them; shown as floors)."""
        return self.meta.get("state") == RunState.SUBMITTING

    def _waiting(self, counters: dict[str, int], now: float) -> str:
        """What the run's calls wait on at the shared rate limiter (:func:`wait_note`), once it did no work for
        :data:`~orchestrator.progress.IDLE_NOTE_S` (or none yet), as the progress bar: a run at work, whose calls a
        busy limiter holds a second or two, had the line come and go from one refresh to the next (an ended run's
        counters have no wait: :meth:`RunStore.progress`). A worker loading its model or encoding for the run is said
        at once until its queue's first units of the attempt are done (:func:`unbegun_load_note`), as the progress
        bar says it."""
        idle = self.idle_s(now)
        if idle is not None and idle < IDLE_NOTE_S:
            return unbegun_load_note(counters, work_before(counters), now)
        return wait_note(counters, now)

    def stalled(self, now: float) -> bool:
        """No work done (no item written, no judge or target call sent) for ``STALLED_S`` on a run not ended."""
        idle = self.idle_s(now)
        return idle is not None and idle >= STALLED_S

    def _since_submit(self, now: float) -> float | None:
        """The run's time at work: from submit to its end, or to its last progress when it stalled."""
        start = self._meta_time("submitted_at")
        end = self._meta_time("finished_at") if self.meta.get("state") in RunState.DONE else None
        if end is None and self.stalled(now):
            end = self._worked_at()
        elapsed = (end or now) - start if start is not None else 0.0
        return elapsed if elapsed > 0 else None

    def _at_work(self, now: float) -> tuple[float, dict[str, int]] | None:
        """Seconds the run's current attempt was at work, and its counters when that began (subtracted: a resume's
        earlier units are not this attempt's). From when a worker first took one of its tasks to the store's clock at
        the last sample (its ``work_ms``, read with that clock), or to its last work when it ended or stalled (whole
        seconds on the store's clock: the second after, so never shorter than it was). None before that (a run queued
        behind another run's messages waits at no pace, and a resumed one's earlier attempt is not this one). The
        counters before are the sample's ``before:*`` (:meth:`RunStore.progress`, which counts a resume's marks made
        after the stamp); a sample read before the stamp its meta shows has none: no pace yet. A run stored before
        the stamp counts from its submission, as it did."""
        last = self.samples[-1]
        began = work_began(self.meta)
        if began is None or last.store_t is None:
            if "work_began_gen" in self.meta or int(self.meta.get("generation") or 0):
                return None
            elapsed = self._since_submit(now)
            return (elapsed, {}) if elapsed else None
        if "work_ms" not in last.progress:
            return None
        elapsed = last.progress["work_ms"] / 1000
        if self.meta.get("state") in RunState.DONE or self.stalled(now):
            worked = self._worked_at_store()
            elapsed = min(elapsed, worked + 1.0 - began.at) if worked is not None else elapsed
        before = work_before(last.progress)
        return (elapsed, before) if elapsed > 0 else None

    def _worked_at_store(self) -> float | None:
        """:meth:`_worked_at` on the store's clock (as it is stored)."""
        times = [self._meta_time("progress_at"), self._meta_time("target_called_at")]
        times += [self.samples[-1].judge_called_at] if self.samples else []
        return max((t for t in times if t is not None), default=None)

    def rate(self, key: str, left: int) -> float | None:
        """Units per second of counter ``key`` (``left`` of its units still to do): over the window
        (:class:`~orchestrator.progress.RecentRate`), else the current attempt's average."""
        last = self.samples[-1]
        recent = self.recent.rate(key, left)
        if recent is not None:
            return recent
        at_work = self._at_work(last.t)
        if at_work is None:
            return None
        elapsed, before = at_work
        return max(0, last.progress.get(key, 0) - before.get(key, 0)) / elapsed

    def judge_rpm(self) -> float | None:
        """Judge requests per minute as the ``rpm`` limit counts them, in a minute: once a minute was watched, the
        calls of its samples; else the run's calls per minute begun since its work began (its calls so far in its first
        minute). Never a rate of a few seconds times 60: the limit is a sliding minute, which admits its whole
        minute's calls at once (51 calls in a run's first 12 s read 263 req/min against a limit of 60). Since its
        current attempt's work began, as :meth:`rate`."""
        first_calls, (last_t, last_calls) = self._calls[0][1], self._calls[-1]
        if self._minute_watched:
            return float(max(0, last_calls - first_calls))
        at_work = self._at_work(last_t)
        if at_work is None:
            return None
        elapsed, before = at_work
        return max(0, last_calls - before.get("judge_calls", 0)) / math.ceil(elapsed / RPM_WINDOW_S)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per queue the run uses, then ``all``, their sums. The queues work side by side, so the run ends
        when its slowest queue does: ``all``'s ETA is the longest of theirs (none when one has none), not its units
        left over the sum of their rates (a fast cpu queue made a judge queue's hour read as a minute). Work held by
        a worker that stopped waits for the visibility timeout: a queue holding some (and the run) ends no sooner,
        whatever its rate says; that ETA is a floor (``floor``), never a rate's guess alone. A cancelled run's
        ``done`` is what its workers did (``worked:{queue}``: :meth:`RunStore.progress`), ``stopped`` the rest of its
        total (stored stopped, or skipped unwritten); ``stopped`` is None for any other run."""
        now = self.samples[-1].t
        counters = self.samples[-1].progress
        finished = self.meta.get("state") in RunState.DONE
        cancelled = self.meta.get("state") == RunState.CANCELLED
        stalled = self.stalled(now)
        unserved = self._still_unserved()
        out: list[dict[str, Any]] = []
        for queue in [q for q in QUEUES if f"total:{q}" in counters]:
            done, total = counters.get(f"done:{queue}", 0), counters.get(f"total:{queue}", 0)
            done = counters.get(f"worked:{queue}", 0) if cancelled else done  # the outputs stored stopped left out
            left = max(total - done, 0)
            rate = self.rate(f"done:{queue}", left)
            idle = finished or stalled or self.submitting or queue in unserved
            eta = 0.0 if not left else None if idle or not rate else left / rate
            # never sooner than its rpm (the judge's, a target's) lets its calls left go: then a floor
            least = eta_floor_s(counters, queue) if eta else 0.0
            limited = least > (eta or 0.0)
            eta = least if limited else eta
            held = None if queue in unserved or not left else self._held_back(now, queue)
            out.append({"queue": queue, "done": done, "total": total, "pct": 100.0 * done / total if total else 0.0,
                        "rate": rate, "eta": eta if held is None else max(held, eta or 0.0),
                        "floor": held is not None or limited, "stopped": left if cancelled else None})  # fmt: skip
        # the rows' sums, the run's own ``done``/``total`` (:meth:`RunStore.progress`: no derived outputs, computed at
        # its aggregation by no queue), for a view given counters of its own too
        done, total = sum(r["done"] for r in out), sum(r["total"] for r in out)
        rates = [r["rate"] for r in out if r["rate"] is not None]
        etas = [r["eta"] for r in out]
        eta = 0.0 if done >= total else None if None in etas or not etas else max(etas)
        held = None if eta is None else self._held_back(now)  # a held shard callback or aggregation too
        floor = held is not None or any(r["floor"] and r["eta"] == eta for r in out)
        out.append({"queue": "all", "done": done, "total": total, "pct": 100.0 * done / total if total else 0.0,
                    "rate": sum(rates) if rates else None,
                    "eta": eta if held is None or eta is None else max(held, eta),
                    "floor": floor, "stopped": max(total - done, 0) if cancelled else None})  # fmt: skip
        return out

    def _cancelled_note(self, run_id: str, left: int) -> str:
        """What a cancelled run's columns mean, and the resume that scores its ``left`` outputs (stopped or errors):
        none where its workers had scored all of it without an error before the cancel took effect."""
        said = "cancelled (`ragscore cancel`, or a Ctrl-C of its `ragscore run`): "
        if not left:
            return (
                said + "its workers had scored all of it, without an error, before the cancel stopped anything: "
                "a resume has nothing to score"
            )
        return said + (
            "`scored` is what its workers did (errors and unscorable included), `stopped` what the cancel (or a "
            f"judge's breaker or budget) stopped, unscored; {resume_hint(run_id, self.broker)} scores it"
        )

    def render(self, run_id: str) -> Group:
        """The per-queue table and one line of run-wide counters."""
        counters = self.samples[-1].progress
        cancelled = self.meta.get("state") == RunState.CANCELLED
        table = Table(title=f"run {run_id}: {self.meta.get('state', '?')}")
        # a cancelled run's queues: what its workers did beside what the cancel stopped (no ETA: it ended)
        columns = CANCELLED_COLUMNS if cancelled else COLUMNS
        for col in columns:
            table.add_column(col, justify="left" if col == "queue" else "right")
        rows = self.rows()
        for r in rows:
            rate = "-" if r["rate"] is None else f"{r['rate']:.1f}"
            total = thousands(r["total"]) + ("+" if self.submitting else "")
            eta = at_least(fmt_duration(r["eta"]), r["floor"])
            if cancelled:
                table.add_row(r["queue"], thousands(r["done"]), thousands(r["stopped"]), total, f"{r['pct']:.1f}", rate)
            else:
                table.add_row(r["queue"], thousands(r["done"]), total, f"{r['pct']:.1f}", rate, eta)
        caption = (
            f"errors {thousands(counters.get('errors', 0))} · unscorable {thousands(counters.get('unscorable', 0))}"
        )
        if "total:judge" in counters:
            rpm = self.judge_rpm()
            limit, stated = _judge_rpm_limit(self.meta), self.samples[-1].provider_rpm
            caption += f" · judge {'-' if rpm is None else f'{rpm:,.0f}'} req/min"
            if rpm is not None and self.meta.get("state") in RunState.DONE and not self._minute_watched:
                # an ended run's calls per minute of its work, not a live rate ("judge 16 req/min" read as one)
                resumed = int(self.meta.get("generation") or 0) > 0  # judge_rpm counts from the resume's work
                caption += " averaged over " + ("its work since the resume" if resumed else "the run")
            if stated is not None and (limit is None or stated < limit):
                caption += f" (limit {stated}, stated by the provider; the suite says {limit or 'none'})"
            else:
                caption += f" (limit {limit})" if limit else " (no rpm limit)"
            caption += f" · {thousands(self.samples[-1].judge_calls)} calls"
        if chunk := chunk_counts(counters):
            caption += f" · {chunk}"
        lines = [Text(f"Warning: {w}", style="yellow") for w in self.warnings]
        lines += [Text(line) for line in self.finishing_lines]
        if self.broker_note:
            lines.append(Text(f"{self.broker_note}: what waits on its queues, and which workers serve them, is not "
                              "shown", style="yellow"))  # fmt: skip
        if self.queued:
            lines.append(Text(f"{self.queued}: its work begins once those are taken (first come, first served)"))
        now = self.samples[-1].t
        # its judge or target calls wait at the shared rate limiter (rpm/tpm, a 429's pause): said, and not taken for a
        # stall while they do (a 429's retry-after can be minutes)
        waiting = self._waiting(counters, now)
        if waiting:
            lines.append(Text(waiting))
        # else the warning above says why, and until when; a run queued behind others is waiting its turn; a worker
        # stopping cleanly is finishing its items
        explained = self._held_back(now) is not None or self.queued or waiting or self.finishing
        if self.stalled(now) and not explained:
            idle = fmt_duration(self.idle_s(now))
            lines.append(Text(
                f"no progress for {idle}: if the `ragscore run` that started it was stopped (an embedded "
                f"run's workers stop with it), finish it with {resume_hint(run_id, self.broker)}; on a cluster, see "
                "that its workers run",
                style="yellow"))  # fmt: skip
        if self.meta.get("state") == RunState.CANCELLED and "n_shards" not in self.meta:  # totals: what was sent
            lines.append(Text(
                "its submission was cut off (Ctrl-C, a lost broker): the totals count the rows sent before; "
                f"{resume_hint(run_id, self.broker)} sends the rest",
                style="yellow"))  # fmt: skip
        elif cancelled:
            left = rows[-1]["stopped"] + counters.get("errors", 0)  # what a resume would score
            lines.append(Text(self._cancelled_note(run_id, left), style="yellow"))
        if self.meta.get("error"):
            lines.append(Text(f"Error: {self.meta['error']}", style="red"))
        if self.summary is not None and (breaker := self.summary.judge.get("breaker")):
            # its errors or stopped items above have one cause, which the summary keeps (a refused key: what to fix)
            lines.append(Text(f"judging stopped: {breaker}", style="yellow"))
        if self.summary is not None:
            lines.append(Text(_summary_line(self.summary, run_id, self.broker, self.meta.get("reports_dir"))))
        return Group(table, Text(caption), *lines)


#: Outputs the count of scored items names as scoring none, at most.
SCORED_NONE_SHOWN = 5


def scored_text(summary: RunSummary) -> str:
    """``8 scored``: the items at least one metric output scored (summary.json's ``scored``); where some output scored
    none of them (a judge whose every reply was unscorable, beside exact_match), which, else how many every output
    scored (``scored_all``): "8 scored" alone read as if every metric had scored all 8."""
    none = [name for name, m in summary.metrics.items() if not m.n]
    if summary.scored and none:
        return f"{thousands(summary.scored)} scored (by at least one output; none by {listed(none, SCORED_NONE_SHOWN)})"
    if summary.scored_all is not None and summary.scored_all < summary.scored:
        return (
            f"{thousands(summary.scored)} scored (by at least one output; {thousands(summary.scored_all)} by every one)"
        )
    return f"{thousands(summary.scored)} scored"


def _summary_line(summary: RunSummary, run_id: str, broker: str | None = None, reports_dir: str | None = None) -> str:
    """The summary's counts, which the workers' counters above lack for work a cancel skipped (counted stopped);
    where the reports were last written (``reports_dir``), else the command that writes them. Its unscorable are
    the caption's (the summary's count less its stopped outputs, which it counts unscorable too), stopped said apart:
    a reader saw "unscorable 6" above and "unscorable 10 (4 stopped)" here."""
    metrics = summary.metrics.values()
    stopped = sum(m.stopped for m in metrics)
    unscorable = thousands(sum(m.unscorable for m in metrics) - stopped)
    if stopped:
        unscorable += f" + {thousands(stopped)} stopped"
    errors = sum(m.errors for m in metrics)
    reports = (f"its reports were written to {shown(reports_dir)}" if reports_dir
               else f"{backticked(results_command(run_id, broker=broker))} writes the reports")  # fmt: skip
    return (
        f"summary: {counted(summary.items, 'item')}, {scored_text(summary)}; over its metric outputs unscorable "
        f"{unscorable}, errors {thousands(errors)} (the counts above are the workers' writes; {reports})"
    )


def _judge_rpm_limit(meta: dict[str, str]) -> int | None:
    try:
        return json.loads(meta.get("suite", "{}")).get("judge", {}).get("rpm")
    except ValueError:
        return None
