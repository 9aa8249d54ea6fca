"""Progress lines: the rate counts only what this process saw done (a resumed run starts part-way).

Time is a clock the test moves (the module reads ``time.monotonic``): rates and ETAs are exact, and a loaded
machine's late wake-ups cannot change them."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

import orchestrator.progress as progress
from orchestrator.progress import PlainProgress
from ragscore_workers.schemas import RATE_LIMITS


class Clock:
    """Stands in for the ``time`` module in ``orchestrator.progress``: ``monotonic()`` is what the test set."""

    def __init__(self) -> None:
        self.now = 1000.0  # a real monotonic clock is far from 0 (the plain view's first line needs that)

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress, "time", fake)
    return fake


def _rate(line: str) -> float:
    match = re.search(r" ([\d.]+)/s ETA (\S+) ", line)
    assert match, line
    return float(match.group(1))


def _drawn(view: progress.RichProgress, width: int) -> str:
    """The progress bar's lines as a terminal ``width`` columns wide shows them."""
    from rich.console import Console

    shown = Console(record=True, width=width, file=io.StringIO())
    shown.print(view.bar.get_renderable())
    return shown.export_text()


def test_a_resumed_runs_earlier_units_are_not_counted_as_this_seconds_work(clock: Clock) -> None:
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 115, "total": 1000})  # done before the resume: no work seen yet
    clock.advance(2.0)
    view.update({"done": 135, "total": 1000}, final=True)  # 20 units in 2 s
    first, last = out.getvalue().splitlines()
    assert "115/1,000 item×metric outputs (11.5%) 0.0/s ETA ?" in first
    assert _rate(last) == 10.0, "20 units over 2 s (the old rate counted all 135)"


def test_no_progress_for_a_while_is_said_instead_of_a_stale_eta(clock: Clock) -> None:
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 10, "total": 100}, final=True)
    clock.advance(5.0)
    view.update({"done": 50, "total": 100}, final=True)  # 40 in 5 s: 50 left take ~6 s
    clock.advance(progress.IDLE_NOTE_S + 15)
    view.update({"done": 50, "total": 100}, final=True)  # nothing done since
    view.update({"done": 100, "total": 100}, final=True)
    moving, stalled, done = out.getvalue().splitlines()[1:]
    assert "no progress" not in moving and "ETA 6s " in moving
    assert "50/100 item×metric outputs (50.0%)" in stalled
    assert f"ETA ? (no progress for {progress.IDLE_NOTE_S + 15:.0f} s)" in stalled
    assert "no progress" not in done


def test_a_run_of_slow_chunks_is_not_said_to_stall_between_them_until_it_waits_twice_their_gap(clock: Clock) -> None:
    """An embed chunk of 64 questions takes ~30 s on a busy laptop CPU: every wait between two chunks read "no
    progress for 27 s" and lost the ETA, though the run went at its usual pace."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    for done in (0, 256, 512, 768):  # a chunk's 256 outputs every 30 s
        if done:
            clock.advance(30.0)
        view.update({"done": done, "total": 12_000, "work_ms": 1000 + done * 30_000 // 256}, final=True)
    clock.advance(25.0)  # 25 s into the next chunk: its usual pace
    view.update({"done": 768, "total": 12_000, "work_ms": 1000 + 3 * 30_000 + 25_000}, final=True)
    between = out.getvalue().splitlines()[-1]
    assert "no progress" not in between and "ETA ?" not in between, between
    clock.advance(40.0)  # 65 s since the last chunk: over twice the gap between chunks
    view.update({"done": 768, "total": 12_000, "work_ms": 1000 + 3 * 30_000 + 65_000}, final=True)
    assert "ETA ? (no progress for 65 s)" in out.getvalue().splitlines()[-1]


def _polled(clock: Clock, every_s: float, total: int) -> tuple[PlainProgress, Callable[..., str]]:
    """A started plain view, and its poll: ``every_s`` seconds on, counters of ``done`` units of ``total`` (``work_ms``
    on the store's clock, work begun at 1000.0), told first of ``lost_s`` seconds the run store did not answer as
    ``wait`` tells them; the line it printed last."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")

    def poll(done: int, lost_s: float = 0.0) -> str:
        clock.advance(every_s)
        if lost_s:
            view.outage(lost_s)
        view.update({"done": done, "total": total, "work_ms": int((clock.now - 1000.0) * 1000)}, final=True)
        return out.getvalue().splitlines()[-1]

    return view, poll


def test_a_worker_that_dies_between_slow_chunks_is_said_within_two_minutes_however_slow_they_were(clock: Clock) -> None:
    """Chunks 80 s apart: the wait between two is the run's pace, not "no progress" 40 s into it once the chunk before
    the last left the samples kept; a worker that dies is said at IDLE_NOTE_MAX_S, not at twice the gap (or later)."""
    _, poll = _polled(clock, 10.0, 12_000)
    for chunk in range(1, 6):  # a chunk's 256 outputs every 80 s
        lines = [poll(256 * chunk - (0 if i == 7 else 256)) for i in range(8)]
        if chunk > 2:  # once two chunks came: the wait for the next one is the run's pace
            assert not any("no progress" in line for line in lines), lines
    waits = [poll(1280) for _ in range(30)]  # its worker died: 300 s of nothing
    assert not any("no progress" in line for line in waits[:11]), waits[:11]
    assert f"ETA ? (no progress for {progress.IDLE_NOTE_MAX_S:.0f} s)" in waits[11], waits[11]
    assert all("ETA ? (no progress for" in line for line in waits[11:]), waits[11:]


@pytest.mark.parametrize("in_flight", [False, True], ids=["begun-after", "written-at-once"])
def test_a_broker_outage_is_left_out_of_the_gaps_between_chunks(clock: Clock, in_flight: bool) -> None:
    """Chunks 10 s apart, then the run store did not answer for a minute (no counters read: ``wait`` tells the view the
    65 s since its last poll answered): the gap across it read as the run's pace, the chunk after it came at 1.4/s not
    10/s, and a worker that died then was said to make no progress only after 40 s (twice a mean gap the outage
    stretched), not 20 s. Nor is the outage left out of that gap alone: a chunk scored across it, written as soon as
    the store answered, came in no time (a division by zero, its run failed) or 5 s (20/s)."""
    view, poll = _polled(clock, 5.0, 10_000)
    for second in range(5, 65, 5):  # 100 units every 10 s
        poll(100 * (second // 10))
    clock.advance(60.0)  # Redis down from the 60th second to the 125th
    if in_flight:
        after = poll(700, lost_s=65.0)
    else:
        back = poll(600, lost_s=65.0)
        assert "no progress" not in back, back  # the outage is no idle time either
        after = poll(700)  # its first chunk after the outage, 10 s of work after it
    assert _rate(after) == pytest.approx(10.0), after
    waits = [poll(700) for _ in range(5)]  # its worker died: nothing more
    assert not any("no progress" in line for line in waits[:3]), waits
    assert "ETA ? (no progress for 20 s)" in waits[3], waits


def test_while_the_summary_is_aggregated_the_rate_holds_and_the_line_is_not_repeated(clock: Clock) -> None:
    """A million items aggregate for ~45 s after the last is scored: the plain view printed the same 100 % line
    every 5 s with a rate falling towards 0."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 0, "total": 100})
    clock.advance(10.0)
    view.update({"done": 100, "total": 100})  # scored in 10 s
    for _ in range(2):  # aggregating, each past the plain view's interval: nothing new to say
        clock.advance(progress.PLAIN_INTERVAL_S + 25)
        view.update({"done": 100, "total": 100})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "100/100 item×metric outputs (100.0%)" in lines[1]
    view.update({"done": 100, "total": 100}, final=True)  # the same line as the last: not said again
    assert out.getvalue().splitlines() == lines  # the rate held (10/s), else the final line had differed
    assert _rate(lines[1]) == 10.0  # over the scoring's 10 s, not the 70 s since the start


def test_the_final_line_is_printed_once_after_a_last_poll_that_said_it() -> None:
    """``ragscore run ... 2>log`` showed ``40/40 item×metric outputs (100.0%) ... ETA 0s`` twice in a row: the last
    poll printed it, then the run's final update printed the same line again."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 40, "total": 40, "work_ms": 4000})
    view.update({"done": 40, "total": 40, "work_ms": 4000}, final=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and "40/40 item×metric outputs (100.0%) 10.0/s ETA 0s" in lines[0], lines


def test_the_final_line_is_printed_when_it_says_something_new(clock: Clock) -> None:
    """Within the plain view's interval a poll prints nothing: the final update still says where the run ended."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 0, "total": 40})
    clock.advance(1.0)
    view.update({"done": 40, "total": 40}, final=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "40/40 item×metric outputs (100.0%)" in lines[1], lines


def test_the_eta_is_the_slowest_queues_not_the_units_left_over_the_summed_rate(clock: Clock) -> None:
    """A fast cpu queue and a slow judge queue: 900 cpu units and 10 judge units done in the same time. Over the
    summed rate the 90 judge units left read as ~0.1 of the time spent; the judge queue alone needs 9 times it."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    counters = {"done": 0, "total": 1100, "done:cpu": 0, "total:cpu": 1000, "done:judge": 0, "total:judge": 100}
    view.update(counters, final=True)
    clock.advance(3.0)
    view.update({**counters, "done": 910, "done:cpu": 900, "done:judge": 10}, final=True)
    # the judge queue: 90 left at 10 per 3 s, 27 s (the cpu queue: 100 left at 900 per 3 s, sooner); the
    # summed-rate ETA it replaces: (1100 - 910) / (910 / 3 s), under a second
    assert "ETA 27s " in out.getvalue().splitlines()[-1]


def test_the_rich_bar_shows_the_same_eta_and_none_for_a_queue_that_has_not_moved(clock: Clock) -> None:
    from rich.console import Console

    from orchestrator.progress import RichProgress

    out = io.StringIO()
    view = RichProgress(Console(file=out, width=200, force_terminal=False))
    view.start("r1")
    view.update({"done": 0, "total": 200, "done:cpu": 0, "total:cpu": 100, "done:embed": 0, "total:embed": 100})
    clock.advance(2.0)
    view.update({"done": 100, "total": 200, "done:cpu": 100, "total:cpu": 100, "done:embed": 0, "total:embed": 100})
    task = view.bar.tasks[0]
    assert task.fields["eta"] == "-:--:--"  # embed has work left and has done none: no ETA, not cpu's pace
    clock.advance(2.0)
    view.update({"done": 150, "total": 200, "done:cpu": 100, "total:cpu": 100, "done:embed": 50, "total:embed": 100})
    # 50 left at embed's 50 per 4 s; the summed rate (150 per 4 s) said 0:00:01
    assert view.bar.tasks[0].fields["eta"] == "0:00:04"
    view.stop()


JUDGE_RUN = {"done": 0, "total": 100, "done:judge": 0, "total:judge": 100}


def test_a_judge_run_shows_its_calls_and_is_at_work_while_they_go_out(clock: Clock) -> None:
    """A judge run's items end seldom (each waits on its calls): the line showed the same count for minutes, then
    'no progress for 40 s' while the calls went out. Its judge calls are on the line and count as work."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update(JUDGE_RUN, final=True)
    for calls in (40, 80):  # no item done, calls sent
        clock.advance(progress.IDLE_NOTE_S + 10)
        view.update({**JUDGE_RUN, "judge_calls": calls}, final=True)
    clock.advance(progress.IDLE_NOTE_S + 10)
    view.update({**JUDGE_RUN, "judge_calls": 80}, final=True)  # no call either, and none waits at the limiter
    first, *calling, paused = out.getvalue().splitlines()
    assert first.endswith("unscorable 0 judge calls 0")  # none sent yet: said, as 0
    assert [line.rsplit("judge calls ", 1)[1] for line in calling] == ["40", "80"]
    assert all("no progress" not in line for line in calling)
    assert f"(no progress for {progress.IDLE_NOTE_S + 10:.0f} s)" in paused and paused.endswith("judge calls 80")


@pytest.mark.parametrize(
    ("waiting", "said"),
    [({"judge_wait_rpm": 600}, "waiting on the judge rate limit (600 RPM): next judge call in 4 s"),
     ({"judge_wait_tpm": 100_000}, "waiting on the judge rate limit (100,000 TPM): next judge call in 4 s"),
     ({"judge_wait_pause": 429}, "paused by the provider's 429 until "),
     ({"judge_wait_pause": 0}, "paused until ")],
)  # fmt: skip
def test_a_judge_run_waiting_at_the_rate_limiter_says_what_it_waits_on_not_no_progress(
    clock: Clock, waiting: dict[str, int], said: str
) -> None:
    """Its calls held by the limiter (a minute's calls admitted at once, then none; a provider's 429 pause) read
    as 'no progress for 20 s': a run thought stuck. The store's ``judge_wait_*`` counters say what holds them."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({**JUDGE_RUN, "judge_calls": 60}, final=True)
    clock.advance(progress.IDLE_NOTE_S + 10)
    view.update({**JUDGE_RUN, "judge_calls": 60, "judge_wait_ms": 3_200, **waiting}, final=True)
    line = out.getvalue().splitlines()[-1]
    assert said in line and "no progress" not in line, line
    assert line.endswith("next judge call in 4 s) errors 0 unscorable 0 judge calls 60"), line
    clock.advance(10)  # the wait over, and still no call: that is said as before
    view.update({**JUDGE_RUN, "judge_calls": 60}, final=True)
    assert "(no progress for 30 s)" in out.getvalue().splitlines()[-1]


def test_a_run_without_judge_metrics_says_no_judge_calls(clock: Clock) -> None:
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 5, "total": 10, "done:cpu": 5, "total:cpu": 10}, final=True)
    assert "judge" not in out.getvalue()


def test_the_rich_bar_shows_the_judge_calls_and_no_idle_note_while_they_go_out(clock: Clock) -> None:
    from rich.console import Console

    from orchestrator.progress import RichProgress

    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("r1")
    view.update(JUDGE_RUN)
    clock.advance(progress.IDLE_NOTE_S + 10)
    view.update({**JUDGE_RUN, "judge_calls": 1234})
    fields = view.bar.tasks[0].fields
    assert fields["tallies"] == "errors 0 unscorable 0 judge calls 1,234" and fields["note"] == ""
    view.stop()


def test_a_cancelled_run_awaiting_its_summary_is_not_said_to_make_no_progress(clock: Clock) -> None:
    """A cancelled run (``worked:*``: :meth:`RunStore.progress`) whose skipped chunks stay unwritten has nothing left to
    come but its summary: the bar said "no progress for 20 s" under it, as of a stalled run."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    cancelled = {**JUDGE_RUN, "done": 30, "done:judge": 30, "worked:judge": 30}
    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("r1")
    view.update(cancelled)
    clock.advance(progress.IDLE_NOTE_S + 10)
    view.update(cancelled)
    fields = view.bar.tasks[0].fields
    assert fields["note"] == "" and fields["tallies"].startswith("stopped 70 "), fields
    view.stop()
    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))  # a run not cancelled still is
    view.start("r2")
    view.update({**JUDGE_RUN, "done": 30, "done:judge": 30})
    clock.advance(progress.IDLE_NOTE_S + 10)
    view.update({**JUDGE_RUN, "done": 30, "done:judge": 30})
    assert view.bar.tasks[0].fields["note"] == f"no progress for {progress.IDLE_NOTE_S + 10:.0f} s"
    view.stop()


def test_the_rate_counts_from_when_a_worker_took_the_attempts_first_task_on_the_stores_clock(clock: Clock) -> None:
    """Counters from the store once a worker took a task of the run's attempt (``work_ms``: the store's clock since
    then; ``before:*``: what was done before it). Counted from the start of the following, a run that waited a minute
    behind another run's messages read 100 units in 10 s as 1.4/s; counted from the poll before the first units
    were seen, a chunk's 100 units written at once 5 s after its start read as 500/s."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    for _ in range(300):  # a minute behind the other run: no worker took a task of it
        view.update({"done": 0, "total": 200})
        clock.advance(0.2)
    for work_ms in range(0, 5000, 200):  # a worker scores its first chunk: nothing written yet
        view.update({"done": 0, "total": 200, "work_ms": work_ms, "before:done": 0})
        clock.advance(0.2)
    view.update({"done": 100, "total": 200, "work_ms": 5000, "before:done": 0}, final=True)
    assert _rate(out.getvalue().splitlines()[-1]) == 20.0 and " ETA 5s " in out.getvalue().splitlines()[-1]


def test_the_rich_bar_times_the_attempts_work_on_the_stores_clock_not_from_its_own_start(clock: Clock) -> None:
    """A large dataset's rows are sent while the workers score them: the bar starts once all are sent, half done.
    Its time elapsed is the attempt's time at work (``work_ms``), which its rate divides by, not 0:00:00 at 52 %."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("r1")
    view.update({"done": 52_000, "total": 100_000, "work_ms": 18_400, "before:done": 0})
    line = _drawn(view, 200)
    view.stop()
    assert "2826.1/s 0:00:18 ETA 0:00:17" in line, line


def test_a_resumed_attempt_counts_its_own_units_over_its_own_time(clock: Clock) -> None:
    """A stalled run's recovery (a new attempt, followed by the same process): until a worker takes one of its
    tasks there is no pace (the stall is not the new attempt's time), then the units done before it are not its
    own. Counted from the start of the following, the stall's minutes made the rate a fraction of its pace."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 0, "total": 200, "work_ms": 0, "before:done": 0}, final=True)
    view.update({"done": 50, "total": 200, "work_ms": 5000, "before:done": 0}, final=True)
    assert _rate(out.getvalue().splitlines()[-1]) == 10.0
    clock.advance(300.0)  # stalled, then re-submitted: the new attempt has no stamp yet
    view.update({"done": 40, "total": 200}, final=True)  # 10 outputs stored as errors sent again: not done
    assert " 0.0/s ETA ? " in out.getvalue().splitlines()[-1]
    view.update({"done": 80, "total": 200, "work_ms": 2000, "before:done": 40}, final=True)
    last = out.getvalue().splitlines()[-1]
    assert _rate(last) == 20.0 and " ETA 6s " in last  # 120 left at 20/s


QUEUED = "queued: 40 messages of other runs ahead on queue cpu"


def test_a_run_queued_behind_other_runs_says_so_and_its_idle_time_counts_from_the_end_of_the_wait(
    clock: Clock,
) -> None:
    """A run waiting its turn behind other runs' messages showed no ETA, then 'no progress for 25 s'; once a worker
    took its first task, that idle time still counted the wait (its first chunk's units come a chunk's work later)."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    out = io.StringIO()
    plain, rich = PlainProgress(out), RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    for view in (plain, rich):
        view.start("r1")
        view.queued(QUEUED)
        view.update({"done": 0, "total": 100})
    clock.advance(progress.IDLE_NOTE_S + 15)
    for view in (plain, rich):
        view.update({"done": 0, "total": 100})  # past the plain view's interval: printed again
    assert rich.bar.tasks[0].fields["note"] == QUEUED and rich.bar.tasks[0].fields["eta"] == "-:--:--"
    clock.advance(2.0)
    for view in (plain, rich):
        view.queued("")  # a worker took one of its tasks
        view.update({"done": 0, "total": 100, "work_ms": 2000}, final=True)
    assert rich.bar.tasks[0].fields["note"] == ""
    rich.stop()
    first, waited, begun = out.getvalue().splitlines()
    assert f"ETA ? ({QUEUED}) errors" in first and f"ETA ? ({QUEUED}) errors" in waited
    assert "ETA ? errors" in begun and "queued" not in begun


def test_a_users_view_whose_queued_is_no_method_is_not_told_and_does_not_fail_the_run() -> None:
    """``queued(text)`` is optional: a view passed to ``evaluate(progress=...)`` before it existed may hold a
    ``queued`` of its own (a count, a buffer of updates); calling it failed the run's wait with "'int' object is not
    callable". Such a view is not told, as a view without one."""
    from orchestrator.progress import queued_of

    class Counting:
        def __init__(self) -> None:
            self.queued = 3  # its own count of something

        def start(self, run_id: str) -> None: ...
        def update(self, counters: dict[str, int], final: bool = False) -> None: ...
        def stop(self) -> None: ...

    view = Counting()
    queued_of(view)(QUEUED)
    assert view.queued == 3
    told: list[str] = []

    class Told:
        def queued(self, text: str) -> None:
            told.append(text)

    queued_of(Told())(QUEUED)
    assert told == [QUEUED]


def test_a_users_view_whose_note_is_no_method_is_not_told_and_does_not_fail_the_run() -> None:
    """``note(text)`` is optional too, and guarded as ``queued``: a user's view holding a ``note`` of its own (a
    string it shows) failed the run at its first note ("'str' object is not callable")."""
    from orchestrator.progress import note_of

    class Noted:
        def __init__(self) -> None:
            self.note = "nightly"  # its own label

        def start(self, run_id: str) -> None: ...
        def update(self, counters: dict[str, int], final: bool = False) -> None: ...
        def stop(self) -> None: ...

    view = Noted()
    note_of(view)("every item is scored: aggregating the summary")
    assert view.note == "nightly"
    told: list[str] = []

    class Told:
        def note(self, text: str) -> None:
            told.append(text)

    note_of(Told())("reading the dataset")
    assert told == ["reading the dataset"]


def test_one_message_ahead_is_said_in_the_singular() -> None:
    """A run behind one message of another run read "queued: 1 messages of other runs ahead"."""
    from orchestrator.queues import Ahead, queued_message

    assert queued_message({"cpu": Ahead(1)}) == "queued: 1 message of other runs ahead on queue cpu"
    assert queued_message({"cpu": Ahead(1), "judge": Ahead(1)}) == (
        "queued: 1 message of other runs ahead on queue cpu (1 on judge)"
    )
    assert queued_message({"cpu": Ahead(1, more=True)}) == "queued: over 1 messages of other runs ahead on queue cpu"
    assert queued_message({"cpu": Ahead(2)}) == "queued: 2 messages of other runs ahead on queue cpu"


def test_a_rich_bar_prints_what_its_run_is_queued_behind_whole_once_a_wait_begins() -> None:
    """In the bar, the queued line is the last column: on an 80-column terminal it read "queued: 12,345 messages of
    other runs ahea…", the queue's name cut. It is printed whole once when the wait begins (not at each new count)."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    out = io.StringIO()
    rich = RichProgress(Console(file=out, width=80, force_terminal=False))
    rich.start("r1")
    rich.queued(QUEUED)
    rich.queued(QUEUED.replace("12,345", "12,000"))  # a later count: not printed again
    rich.update({"done": 0, "total": 100}, final=True)
    rich.queued("")
    rich.stop()
    printed = [line for line in out.getvalue().splitlines() if line.startswith("[ragscore]")]
    assert printed == [f"[ragscore] {QUEUED}"]


@pytest.mark.parametrize(
    ("counters", "said"),
    [({"judge_wait_ms": 3_200, "judge_wait_rpm": 600},
      "waiting on the judge rate limit (600 RPM): next judge call in 4 s"),
     ({"judge_wait_ms": 124_200, "judge_wait_tpm": 1_000},
      "waiting on the judge rate limit (1,000 TPM): next judge call in 2m05s"),
     ({"judge_wait_ms": 3_200, "judge_wait_rpm": 30, "judge_default:rpm": 1, "judge_default:tpm": 1},
      "waiting on the judge rate limit (30 RPM, the default (Groq's free tier), assumed, not your provider's limit: "
      "set judge.rpm in the suite, or run with --rpm): next judge call in 4 s"),
     ({"judge_wait_ms": 3_200, "judge_wait_tpm": 6_000, "judge_default:tpm": 1},
      "waiting on the judge rate limit (6,000 TPM, the default (Groq's free tier), assumed, not your provider's "
      "limit: set judge.tpm in the suite, or run with --tpm): next judge call in 4 s"),
     ({"judge_wait_ms": 3_200, "judge_wait_rpm": 30, "judge_default:tpm": 1},
      "waiting on the judge rate limit (30 RPM): next judge call in 4 s"),
     ({"judge_wait_ms": 88_560_000, "judge_wait_rpd": 1_000},
      "waiting on the judge rate limit (1,000 requests a day): next judge call in 24h36m"),
     ({"judge_wait_ms": 3_200, "judge_wait_tpd": 2_000_000},
      "waiting on the judge rate limit (2,000,000 tokens a day): next judge call in 4 s"),
     ({"judge_wait_ms": 40_000, "judge_wait_pause": 429},
      "paused by the provider's 429 until 10:32:05 UTC: next judge call in 40 s"),
     ({"judge_wait_ms": 40_000, "judge_wait_pause": 0},
      "paused until 10:32:05 UTC (the provider's rate-limit headers say its budget is spent): next judge call in 40 s"),
     ({"target_wait_ms": 3_200, "target_wait_rpm": 60},
      "waiting on the target's rate limit (60 RPM): next target call in 4 s"),
     ({"target_wait_ms": 40_000, "target_wait_pause": 429},
      "paused by the target's 429 until 10:32:05 UTC: next target call in 40 s"),
     ({"judge_wait_ms": 8_000, "judge_wait_pause": 1},
      "backing off after the provider's 429s without a retry time until 10:31:33 UTC: next judge call in 8 s"),
     ({"target_wait_ms": 8_000, "target_wait_pause": 1, "target_wait_of:rag-v1": 1},
      "backing off after target rag-v1's 429s without a retry time until 10:31:33 UTC: next target call in 8 s"),
     ({"target_wait_ms": 3_200, "target_wait_rpm": 60, "target_wait_of:rag-v1": 1},
      "waiting on target rag-v1's rate limit (60 RPM): next target call in 4 s"),
     ({"target_wait_ms": 40_000, "target_wait_pause": 0, "target_wait_of:rag-v1": 1},
      "paused until 10:32:05 UTC (target rag-v1's rate-limit headers say its budget is spent): "
      "next target call in 40 s"),
     ({"judge_wait_ms": 3_200, "judge_wait_rpm": 30, "judge_wait_of:groq/ns:m with the key in JUDGE_KEY_B": 1},
      "waiting on the judge rate limit of groq/ns:m with the key in JUDGE_KEY_B (30 RPM): next judge call in 4 s"),
     ({"judge_wait_ms": 40_000, "judge_wait_pause": 429, "judge_wait_of:groq/m with the key in JUDGE_KEY_B": 1},
      "paused by the provider's 429 for groq/m with the key in JUDGE_KEY_B until 10:32:05 UTC: "
      "next judge call in 40 s"),
     ({"judge_wait_ms": 40_000, "judge_wait_pause": 0, "judge_wait_of:groq/m with the key in JUDGE_KEY_B": 1},
      "paused until 10:32:05 UTC (the provider's rate-limit headers for groq/m with the key in JUDGE_KEY_B say its "
      "budget is spent): next judge call in 40 s"),
     ({"judge_wait_ms": 4_000, "judge_wait_slot": 2}, "judge calls wait for a max_in_flight slot (cap 2)"),
     ({"judge_wait_ms": 4_000, "judge_wait_slot": 2, "judge_wait_slot_calls": 1_234},
      "1,234 judge calls wait for a max_in_flight slot (cap 2)"),
     ({"judge_wait_ms": 4_000, "judge_wait_slot": 1, "judge_wait_of:openai/m with the key in K": 1},
      "judge calls wait for a max_in_flight slot for openai/m with the key in K (cap 1)"),
     ({"judge_wait_ms": 3_200, "judge_wait_rpm": 600, "target_wait_ms": 40_000, "target_wait_pause": 429},
      "waiting on the judge rate limit (600 RPM): next judge call in 4 s; "
      "paused by the target's 429 until 10:32:05 UTC: next target call in 40 s"),
     ],
)  # fmt: skip
def test_what_calls_wait_on_is_said_with_hours_for_a_long_wait(counters: dict[str, int], said: str) -> None:
    now = datetime(2026, 12, 3, 10, 31, 25, tzinfo=timezone.utc).timestamp()
    assert progress.wait_note(counters, now) == said


def test_every_rate_limit_the_store_counts_a_wait_on_is_said() -> None:
    """The store keeps ``{stage}_wait_{name}`` (judge, target) for each of RATE_LIMITS; a name the note did not
    know was waited on and never said."""
    for stage in ("judge", "target"):
        counters = {name: {f"{stage}_wait_ms": 1_000, f"{stage}_wait_{name}": 5} for name in RATE_LIMITS}
        assert {name for name, waits in counters.items() if progress.wait_note(waits)} == set(RATE_LIMITS), stage


def test_the_rich_bar_shows_a_long_wait_note_whole_on_a_narrow_terminal(clock: Clock) -> None:
    """The note was the bar's last column: on an 80-column terminal "paused by the provider's 429 until ...: next
    judge call in 40 s" was cut to "paused by the provid…" (and squeezed the other columns to "ru… … E…"). It has a
    line of its own under the bar, wrapped, never cut."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    view = RichProgress(Console(file=io.StringIO(), width=80, force_terminal=False))
    view.start("r1")
    view.update({**JUDGE_RUN, "judge_calls": 60})
    clock.advance(progress.IDLE_NOTE_S + 10)
    waits = {"judge_wait_ms": 40_000, "judge_wait_pause": 429, "target_wait_ms": 3_200, "target_wait_rpm": 60}
    view.update({**JUDGE_RUN, "judge_calls": 60, **waits})
    text = " ".join(_drawn(view, 80).split())
    view.stop()
    note = view.bar.tasks[0].fields["note"]
    assert note.endswith("next target call in 4 s") and note in text, text
    assert "run r1" in text and "errors 0 unscorable 0" in text, text


def test_the_bar_is_at_work_while_the_runs_target_calls_go_out(clock: Clock, store) -> None:  # type: ignore[no-untyped-def]
    """Target calls counted in the store (``target_calls`` of :meth:`RunStore.progress`) are work: the bar of a run
    asking its target, no answer written yet, said "no progress for 20 s"."""
    from rich.console import Console

    from orchestrator.progress import RichProgress
    from ragscore_workers.providers import RunJudgeState

    store.create_run("r-bar", {"state": "running"})
    store.r.hset(store.key("r-bar", "progress"), mapping={"done": 0, "total": 10, "done:target": 0, "total:target": 10})
    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("r-bar")
    view.update(store.progress("r-bar"))
    clock.advance(progress.IDLE_NOTE_S + 10)
    RunJudgeState.for_target(store.r, "r-bar", None, ttl_s=600).incr(calls=1)
    view.update(store.progress("r-bar"))
    assert view.bar.tasks[0].fields["note"] == ""
    view.stop()


def _judge_bar(width: int, clock: Clock) -> str:
    """The rich bar of a judge run 1,000 units of 10,000 in at 100/s (3 errors, 12 unscorable, 12,345 judge calls),
    drawn by a real console ``width`` columns wide."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    view = RichProgress(Console(file=io.StringIO(), width=width, force_terminal=False))
    view.start("20261204-001500-3fa9c2")
    run = {"done": 0, "total": 10_000, "done:judge": 0, "total:judge": 10_000, "errors": 3, "unscorable": 12}
    view.update({**run, "judge_calls": 0})
    clock.advance(10.0)
    view.update({**run, "done": 1_000, "done:judge": 1_000, "judge_calls": 12_345})
    text = _drawn(view, width)
    view.stop()
    return text


def test_the_rich_bar_keeps_its_counts_and_eta_whole_at_80_columns_with_judge_calls(clock: Clock) -> None:
    """The tallies (errors, unscorable, ``judge calls N``) were the bar's last column: at 80 columns they squeezed
    the bar's own to "run 20261204-001500-3f…    100… ETA 0:01…", the counts gone and the ETA cut. They have a line
    of their own under the bar when they do not fit beside it, and the bar is left out before its run name, counts,
    rate and ETA are cut (on a line of their own, the counts still read "1000/100…"). The time elapsed is left out
    before the bar graphic: at 80 columns, the commonest terminal, the bar still shows."""
    text = _judge_bar(80, clock)
    assert "…" not in text, text
    bar = text.splitlines()[0]  # 9,000 left at 100/s
    assert bar.startswith("run 20261204-001500-3fa9c2 ━"), text
    assert " 1000/10000  10% " in bar and "100.0/s" in bar and "0:00:" not in bar, text
    assert bar.endswith("ETA 0:01:30"), text
    assert "errors 3 unscorable 12 judge calls 12,345" in text, text


@pytest.mark.parametrize(("width", "name"), [(60, "run 20261204-001500-3fa9c2 "), (40, "run 202612… ")])
def test_the_rich_bar_keeps_its_counts_and_percent_whole_on_a_narrow_terminal(
    width: int, name: str, clock: Clock
) -> None:
    """Below 73 columns rich cut every column of the bar: "run 20261204-001500…  100…    … … ETA 0…" at 40, the
    count done/total and the percent (none shown) gone. The bar, the time elapsed and the rate are left out first,
    then the run's name is cut: the count, the percent and the ETA stay whole."""
    text = _judge_bar(width, clock)
    bar = text.splitlines()[0]
    assert bar == f"{name} 1000/10000  10% ETA 0:01:30", text
    assert " ".join(text.splitlines()[1:]).split() == "errors 3 unscorable 12 judge calls 12,345".split(), text


def test_the_rich_bar_keeps_its_tallies_on_its_line_when_they_fit(clock: Clock) -> None:
    """The tallies had a line of their own under the bar even on a terminal wide enough for both on one."""
    text = _judge_bar(200, clock)
    assert text.splitlines() == [text.splitlines()[0]], text
    bar = text.splitlines()[0].rstrip()
    assert bar.startswith("run 20261204-001500-3fa9c2 ━") and " 1000/10000  10%    100.0/s " in bar, text
    assert bar.endswith(" ETA 0:01:30 errors 3 unscorable 12 judge calls 12,345"), text


def test_the_rich_bar_fits_each_width_it_is_drawn_in_down_to_one_column(clock: Clock) -> None:
    """A terminal resized while the bar shows: each drawing fits the console's width then (the bar's line is laid
    out as it is drawn, not when the bar was made), down to 10 and 1 columns, where its lines are cut, never wider
    than the terminal, and back."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("20261204-001500-3fa9c2")
    view.update({"done": 1_000, "total": 10_000, "errors": 3, "unscorable": 12})
    drawn = []
    for width in (200, 40, 10, 1, 200):
        drawn.append(_drawn(view, width).splitlines())
        assert all(len(line.rstrip()) <= width for line in drawn[-1]), (width, drawn[-1])
    view.stop()
    wide, forty, ten, _, wide_again = drawn
    assert len(wide) == 1 and wide[0].rstrip().endswith(" errors 3 unscorable 12") and wide_again == wide, drawn
    assert forty[0] == "run 202612…  1000/10000  10% ETA -:--:--", drawn
    assert ten[0] == " 1000/…  …", drawn


LOADING = {"load_ms:embed": 12_300, "load_of:embed:loading all-MiniLM-L6-v2 on cpu": 1}


def test_a_worker_loading_its_model_is_said_and_its_time_is_no_stall_up_to_a_bound(clock: Clock) -> None:
    """A model's load (20 s on a CPU, minutes on a cold GPU host) read as 'no progress for 15 s'; one that never ends
    must still be reported as a stall once it outlasts LOAD_NOTED_S."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 0, "total": 100}, final=True)
    clock.advance(progress.IDLE_NOTE_S + 5)
    view.update({"done": 0, "total": 100, **LOADING}, final=True)
    line = out.getvalue().splitlines()[-1]
    assert "ETA ? (embed: loading all-MiniLM-L6-v2 on cpu (12 s))" in line and "no progress" not in line, line
    clock.advance(3)  # the load just ended: its time was at work, not idle
    view.update({"done": 0, "total": 100}, final=True)
    assert "ETA ?" in out.getvalue().splitlines()[-1] and "no progress" not in out.getvalue().splitlines()[-1]
    too_long = {**LOADING, "load_ms:embed": round(progress.LOAD_NOTED_S * 1000) + 1}
    assert not progress.loading(too_long) and progress.load_note(too_long) == ""
    clock.advance(progress.IDLE_NOTE_S)
    view.update({"done": 0, "total": 100, **too_long}, final=True)
    # its whole time loading is said (not the few seconds since it passed the bound): no unit was done all along
    assert f"(no progress for {progress.LOAD_NOTED_S:.0f} s)" in out.getvalue().splitlines()[-1]
    assert progress.load_note({**LOADING, "load_ms:embed": 75_000}) == "embed: loading all-MiniLM-L6-v2 on cpu (1m15s)"


ENCODING = {"load_ms:embed": 4_000, "load_of:embed:encoding 1,234 texts": 1}


def test_a_chunk_encoding_is_said_until_the_attempts_first_units_then_the_eta_is(clock: Clock) -> None:
    """The first chunk after the model's load is encoded for a minute on a laptop CPU: it read 'no progress for 25 s'.
    Said instead, until units are done; after them an embed worker encodes nearly all the time, so its note stays
    off the line (the ETA stays) and its time is still not idle."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    counters = {"done": 0, "total": 1000, "work_ms": 1000, "before:done": 0}
    view.update(counters, final=True)
    clock.advance(progress.IDLE_NOTE_S + 15)
    view.update(counters | {"work_ms": 26_000} | ENCODING, final=True)
    first = out.getvalue().splitlines()[-1]
    assert "ETA ? (embed: encoding 1,234 texts (4 s))" in first and "no progress" not in first, first
    for step in range(1, 4):  # a chunk of 100 every 20 s, each encoded for most of the 20 s before it is written
        clock.advance(20.0)
        view.update({**counters, "done": 100 * step, "work_ms": 26_000 + 20_000 * step} | ENCODING, final=True)
    clock.advance(progress.IDLE_NOTE_MAX_S + 1)  # a long next chunk, still encoding: not a stall, and the ETA shown
    view.update({**counters, "done": 300, "work_ms": 26_000 + 181_000} | ENCODING, final=True)
    last = out.getvalue().splitlines()[-1]
    assert re.search(r" ETA \d+s ", last) and "encoding" not in last and "no progress" not in last, last


def test_a_later_chunks_texts_encoded_so_far_are_counted_beside_the_tallies_and_the_eta_stays(clock: Clock) -> None:
    """Once the embed queue's units began its note is off the line (it would hide the ETA), and the bar sat still
    through each big chunk, then jumped: the count of the chunk's texts encoded so far is said beside the tallies."""
    counters = {"done": 0, "total": 1000, "total:embed": 1000, "work_ms": 1000, "before:done": 0}
    stepping = {"load_ms:embed": 4000, "load_of:embed:encoding 2,048 texts": 1, "load_chunks:embed": 1,
                "load_texts:embed": 2048, "load_encoded:embed": 512}  # fmt: skip
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    for step in range(1, 4):
        clock.advance(20.0)
        line = _said(view, out, {**counters, "done": 100 * step, "done:embed": 100 * step,
                                 "work_ms": 1000 + 20_000 * step} | stepping)  # fmt: skip
    assert line.endswith("errors 0 unscorable 0 embed chunk 512/2,048 texts encoded"), line
    assert re.search(r" ETA \d+s ", line), line
    rich = progress.RichProgress()
    rich.start("r1")
    rich.update({**counters, "done": 300, "done:embed": 300, "work_ms": 61_000} | stepping)
    assert "embed chunk 512/2,048 texts encoded" in _drawn(rich, 200)


LOADING_ON_CUDA = {"load_ms:embed": 30_000, "load_of:embed:loading all-MiniLM-L6-v2 on cuda": 1}


def _said(view: PlainProgress, out: io.StringIO, counters: dict[str, int]) -> str:
    """The line ``view`` prints for ``counters`` (a final update: printed whatever the interval)."""
    view.update(counters, final=True)
    return out.getvalue().splitlines()[-1]


def test_a_model_still_loading_is_said_after_another_queues_first_units(clock: Clock) -> None:
    """The encoding rule took the run's first units for every queue's: once the cpu queue's first chunk was done, a
    model still loading on the embed queue (minutes on a cold GPU host) left the line at ``ETA ?`` with no reason (no
    ETA while a queue with work left has done none). Said until the embed queue's own first units; then what it
    encodes until its next chunk (its first chunk's time held the model's load: no pace, :meth:`RecentRate.timing`);
    then the ETA. While the embed queue has done none, the cpu queue's time left at its rate is no floor (it may go
    faster once the load frees the cores): ``ETA ?``; a judge's rate limit is one, said as ``≥`` (it said ``ETA ?`` for
    the whole of the model's load, ~80 s on 2 busy cores)."""
    counters = {"done": 100, "total": 1000, "done:cpu": 100, "total:cpu": 500, "done:embed": 0, "total:embed": 500,
                "work_ms": 31_000, "before:done": 0, "before:done:cpu": 0, "before:done:embed": 0}  # fmt: skip
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    line = _said(view, out, counters | LOADING_ON_CUDA)
    # the cpu queue's 400 units left at 100 in 31 s (124 s) is no floor: the run may beat it
    assert "ETA ? (embed: loading all-MiniLM-L6-v2 on cuda (30 s))" in line, line
    judged = PlainProgress(out)
    judged.start("r2")
    # 90 judge calls left at rpm 60: a minute at least, whatever the other queues' rates (was ``ETA ?``)
    judge = {"done": 110, "total": 1100, "done:judge": 10, "total:judge": 100, "judge_calls": 10, "judge_rpm": 60}
    assert "ETA ≥60s (embed: loading all-MiniLM-L6-v2 on cuda (30 s))" in _said(
        judged, out, counters | judge | LOADING_ON_CUDA
    )
    clock.advance(20.0)
    line = _said(view, out, counters | {"done": 300, "done:cpu": 200, "done:embed": 100, "work_ms": 51_000} | ENCODING)
    assert "ETA ? (embed: encoding 1,234 texts (4 s))" in line, line  # the embed queue's pace not known yet
    clock.advance(5.0)
    line = _said(view, out, counters | {"done": 450, "done:cpu": 250, "done:embed": 200, "work_ms": 56_000} | ENCODING)
    assert re.search(r" ETA \d+s ", line) and "embed:" not in line, line


def test_a_resumed_queues_earlier_units_do_not_count_as_its_first_and_a_429_pause_is_said_beside_its_load(
    clock: Clock,
) -> None:
    """A resume's embed queue had 200 units before it (``before:done:embed``): those are not this attempt's, so its
    model's load is still said while the cpu queue scores; a provider's 429 pause is said beside it (the line has no
    ETA to keep then)."""
    paused = {"judge_wait_ms": 40_000, "judge_wait_pause": 429}
    counters = {"done": 400, "total": 1000, "done:cpu": 200, "total:cpu": 500, "done:embed": 200, "total:embed": 500,
                "work_ms": 31_000, "before:done": 300, "before:done:cpu": 100, "before:done:embed": 200}  # fmt: skip
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    line = _said(view, out, counters | LOADING_ON_CUDA | paused)
    assert "embed: loading all-MiniLM-L6-v2 on cuda (30 s)" in line and "paused by the provider's 429" in line, line


def test_the_eta_is_never_sooner_than_the_judges_rpm_lets_its_calls_left_go(clock: Clock) -> None:
    """``--rpm 120``: the limiter's first burst did 13 of 400 judge units in 1.5 s (8.7/s): ETA 45 s by that rate. The
    387 units left take 387 calls at least (400 less the 13 sent), 120 a minute: the ETA is no sooner than 3 minutes,
    the dry run's least time; at pace even (2 a second) the same calls need 193 s. That floor is what the line says:
    marked ``≥``, as ``ragscore status`` marks it."""
    counters = {"done": 13, "total": 400, "done:judge": 13, "total:judge": 400, "judge_calls": 13,
                "work_ms": 1500, "before:done": 0, "before:done:judge": 0, "judge_rpm": 120}  # fmt: skip
    for extra, least in (({}, 180), ({"judge_pace_even": 1}, 193)):
        out = io.StringIO()
        view = PlainProgress(out)
        view.start("r1")
        view.update(counters | extra, final=True)
        assert f"ETA ≥{least}s " in out.getvalue(), out.getvalue()


def test_the_rich_bar_marks_an_eta_the_judges_rpm_floors_and_no_other(clock: Clock) -> None:
    """The bar said the judge floor's ``0:03:00`` as if its rate had: it reads ``≥0:03:00``; an ETA its rate gives
    (a run without an rpm) is not marked."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    counters = {"done": 13, "total": 400, "done:judge": 13, "total:judge": 400, "judge_calls": 13,
                "work_ms": 1500, "before:done": 0, "before:done:judge": 0}  # fmt: skip
    for extra, eta in (({"judge_rpm": 120}, "≥0:03:00"), ({}, "0:00:45")):
        view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
        view.start("r1")
        view.update(counters | extra)
        assert view.bar.tasks[0].fields["eta"] == eta
        view.stop()


#: 10 of 210 judge units done in 10 calls of 3 s each under judge.max_in_flight 2.
CAPPED = {"done:judge": 10, "total:judge": 210, "judge_calls": 10, "judge_call_ms": 30_000, "judge_max_in_flight": 2}


@pytest.mark.parametrize(
    ("counters", "least_s"),
    [
        ({"done:judge": 13, "total:judge": 100, "judge_calls": 13, "judge_rpm": 120}, 0.0),  # 87 calls: one minute
        ({"done:judge": 13, "total:judge": 400, "judge_calls": 13, "judge_rpm": 120}, 180.0),  # 387 calls: 4 minutes
        ({"done:judge": 10, "total:judge": 400, "judge_calls": 0, "judge_rpm": 120}, 0.0),  # all cached: no calls
        ({"done:judge": 10, "total:judge": 400, "judge_calls": 200, "judge_rpm": 60}, 180.0),  # 200 left, not 7,800
        ({"done:judge": 0, "total:judge": 400, "judge_calls": 200, "judge_rpm": 60}, 0.0),  # none done: no ratio yet
        ({"done:judge": 10, "total:judge": 400, "judge_calls": 10}, 0.0),  # no rpm: no floor
        # two judges an item (the dry run's count, stored at submit): 774 of its 800 calls left, 6 minutes, where one
        # call a unit said 374 (3 minutes)
        (
            {"done:judge": 13, "total:judge": 400, "judge_calls": 26, "judge_rpm": 120, "judge_calls_planned": 800},
            360.0,
        ),
        # its planned calls all sent (re-asks beyond them): one call a unit left at least, as before: 360, 2 minutes
        ({"done:judge": 10, "total:judge": 400, "judge_calls": 40, "judge_rpm": 120, "judge_calls_planned": 40}, 120.0),
        # judge.max_in_flight 2, 3 s a call so far: 200 calls left go 2 at a time, 100 replies one after another
        (CAPPED, 300.0),
        # the same under an rpm of 120 (a minute for 200 calls): the cap's is the longer
        ({**CAPPED, "judge_rpm": 120}, 300.0),
        # two judge keys (api_key_env), a cap each: 4 at a time
        ({**CAPPED, "judge_limiters": 2}, 150.0),
        # two judge keys, an rpm of 120 each: 387 calls left, at least 194 through one (1 minute), not all 387 under
        # one rpm (3 minutes: a floor the run beats)
        ({"done:judge": 13, "total:judge": 400, "judge_calls": 13, "judge_rpm": 120, "judge_limiters": 2}, 60.0),
        # a resume of 400 units stored as errors after the run's 1,000 calls (600 units done): 100 of them redone at a
        # call each, 300 left, 4 minutes at rpm 60, where measured on the whole run the 1,000 calls read as in flight
        (
            {
                "done:judge": 700,
                "total:judge": 1000,
                "judge_calls": 1100,
                "judge_rpm": 60,
                "judge_calls_planned": 1000,
                "before:done:judge": 600,
                "before:judge_calls": 1000,
            },
            240.0,
        ),  # fmt: skip
        # the same resume before it redid a unit: at the whole run's rate (5 calls a 3 units), 667 calls left
        (
            {
                "done:judge": 600,
                "total:judge": 1000,
                "judge_calls": 1000,
                "judge_rpm": 60,
                "before:done:judge": 600,
                "before:judge_calls": 1000,
            },
            (667 - 1) // 60 * 60.0,
        ),  # fmt: skip
    ],
)
def test_the_judge_floor_is_the_dry_runs_least_time_of_the_calls_left(counters: dict[str, int], least_s: float) -> None:
    from orchestrator.floors import judge_floor_s

    assert judge_floor_s(counters) == least_s


def test_the_rich_bar_gives_no_eta_sooner_than_max_in_flight_lets_the_judge_calls_left_go() -> None:
    """200 judge calls left, ``judge.max_in_flight: 2``, 3 s a reply: 100 replies one after another, 300 s at least,
    though the first burst's pace (10 units in 1.5 s) said 30 s. Seen failing before: the bar said ``0:00:30``."""
    from rich.console import Console

    from orchestrator.progress import RichProgress

    counters = {"done": 10, "total": 210, "done:judge": 10, "total:judge": 210, "judge_calls": 10,
                "judge_call_ms": 30_000, "judge_max_in_flight": 2, "work_ms": 1500, "before:done": 0,
                "before:done:judge": 0}  # fmt: skip
    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("r1")
    view.update(counters)
    assert view.bar.tasks[0].fields["eta"] == "≥0:05:00"
    view.stop()


@pytest.mark.parametrize(
    ("counters", "least_s"),
    [
        # one target at rpm 60: 100 of 400 questions answered, 110 calls sent (10 in flight): 290 left, 4 minutes
        ({"done:target": 100, "total:target": 400, "target_calls": 110, "target_rpm": 60}, 240.0),
        (
            {"done:target": 100, "total:target": 400, "target_calls": 110, "target_rpm": 60, "target_pace_even": 1},
            289.0,
        ),  # fmt: skip
        ({"done:target": 0, "total:target": 400, "target_calls": 50, "target_rpm": 60}, 0.0),  # none done yet
        ({"done:target": 100, "total:target": 400, "target_calls": 110}, 0.0),  # several targets (or no rpm): none
        # its answers cached (a re-run): no call sent for the 100 done, none to count on for the 300 left
        ({"done:target": 100, "total:target": 400, "target_calls": 0, "target_rpm": 60}, 0.0),
    ],
)
def test_a_lone_targets_rpm_floors_its_queues_eta(counters: dict[str, int], least_s: float) -> None:
    from orchestrator.floors import eta_floor_s

    assert eta_floor_s(counters, "target") == least_s
    assert eta_floor_s(counters) == least_s and eta_floor_s(counters, "cpu") == 0.0


def test_the_plain_line_marks_an_eta_a_targets_rpm_floors(clock: Clock) -> None:
    """A target at rpm 60 answered 100 of 400 questions in 10 s (a first burst): 30 s by that rate, but the 290 calls
    left need 4 minutes at 60 a minute: ``ETA ≥240s``."""
    counters = {"done": 100, "total": 400, "done:target": 100, "total:target": 400, "target_calls": 110,
                "work_ms": 10_000, "before:done": 0, "before:done:target": 0, "target_rpm": 60}  # fmt: skip
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update(counters, final=True)
    assert "ETA ≥240s " in out.getvalue(), out.getvalue()


def _slow_start_then_fast(update, clock: Clock) -> None:  # type: ignore[no-untyped-def]
    """Feeds a view a minute's slow start (a model's load, workers slowed while rows are sent: 1 unit/s), then 30 s
    at 100 units/s, on the store's clock as on this host's: 3,060 of 10,000 done after 90 s at work."""
    done = 0
    for second in range(91):
        update({"done": done, "total": 10_000, "work_ms": second * 1000, "before:done": 0})
        done += 1 if second < 60 else 100
        clock.advance(1.0)


def test_the_eta_is_the_recent_rates_not_the_mean_a_slow_start_drags(clock: Clock) -> None:
    """The ETA of a run that started slowly is its last half-minute's pace: 6,940 left at 100/s, 69 s. The mean since
    work began (3,060 units in 90 s: 34/s) said 204 s (at 100k rows it said 122 s where 23 s were left)."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    _slow_start_then_fast(lambda counters: view.update(counters, final=True), clock)
    last = out.getvalue().splitlines()[-1]
    assert _rate(last) == 100.0 and " ETA 69s " in last, last


def test_the_rich_bar_shows_the_recent_rate_and_its_eta_after_a_slow_start(clock: Clock) -> None:
    from rich.console import Console

    from orchestrator.progress import RichProgress

    view = RichProgress(Console(file=io.StringIO(), width=200, force_terminal=False))
    view.start("r1")
    _slow_start_then_fast(view.update, clock)
    line = _drawn(view, 200)
    view.stop()
    assert "100.0/s 0:01:30 ETA 0:01:09" in line, line


def test_a_window_between_two_chunks_reads_the_chunks_pace_not_no_eta(clock: Clock) -> None:
    """A chunk's units are written together once it is scored (a judge chunk's after its calls): 100 units at 40 s
    and at 80 s of work, then none in the last 30 s while its judge calls go out. That window says no pace of its own:
    the ETA is that of the last two chunks (800 left at 100 per 40 s), not none, nor the mean's 476 s."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    for second in range(120):
        done = 100 * min(second // 40, 2)
        view.update({"done": done, "total": 1000, "judge_calls": second, "work_ms": second * 1000, "before:done": 0},
                    final=True)  # fmt: skip
        clock.advance(1.0)
    assert " ETA 320s " in out.getvalue().splitlines()[-1], out.getvalue().splitlines()[-1]


def test_the_eta_holds_steady_between_chunks_written_in_bursts(clock: Clock) -> None:
    """A slow queue's chunk of 100 units every 20 s (its judge calls going out meanwhile): a 30 s window holds one burst
    or two by turns, and an ETA over it jumped between 1,350 s and 2,700 s every 10 s. Over whole bursts it reads their
    pace (5/s), whatever the phase."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    etas = []
    for second in range(200):
        done = 100 * (second // 20)
        view.update({"done": done, "total": 10_000, "judge_calls": second, "work_ms": second * 1000, "before:done": 0},
                    final=True)  # fmt: skip
        if second >= 100:
            etas.append(float(out.getvalue().rsplit(" ETA ", 1)[1].split("s ", 1)[0]) * 5 / (10_000 - done))
        clock.advance(1.0)
    assert all(eta == pytest.approx(1.0, rel=0.05) for eta in etas), etas


class KernelStream(io.StringIO):
    """Stands in for ipykernel's ``OutStream``, the ``sys.stderr`` of a Jupyter kernel (ipykernel is not installed)."""


KernelStream.__module__ = "ipykernel.iostream"


def test_a_notebook_rewrites_one_progress_line_in_place_and_prints_notes_on_lines_of_their_own(clock: Clock) -> None:
    """evaluate() was silent by default; shown in a notebook (no TTY) it piled up a plain line every 5 s: there the
    line is rewritten in place each second, a note gets a line of its own and the last line stays once it stops."""
    out = io.StringIO()
    view = progress.InPlaceProgress(out)
    view.start("r1")
    view.update({"done": 10, "total": 40, "work_ms": 1000})
    clock.advance(1.0)
    view.update({"done": 20, "total": 40, "work_ms": 2000})
    view.note("waiting")
    clock.advance(1.0)
    view.update({"done": 40, "total": 40, "work_ms": 4000}, final=True)
    view.stop()
    progress_line, note, last, end = out.getvalue().split("\n")
    _, first, rewritten = progress_line.split("\r")
    assert "10/40 item×metric outputs (25.0%)" in first and "20/40 item×metric outputs (50.0%)" in rewritten
    assert len(rewritten) >= len(first)  # a shorter line blanks what the longer one left
    assert note == "[ragscore] waiting" and last.startswith("\r[ragscore] r1: 40/40") and end == ""


def test_progress_in_a_jupyter_kernel_is_the_in_place_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress.sys, "stderr", KernelStream())
    assert type(progress.make_progress()) is progress.InPlaceProgress
    monkeypatch.setattr(progress.sys, "stderr", io.StringIO())  # a log, CI
    assert type(progress.make_progress()) is PlainProgress
    assert type(progress.make_progress(quiet=True)) is progress.QuietProgress


def test_a_warning_another_thread_writes_while_the_notebook_line_is_written_starts_a_line_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The in-place line was written, then its width noted: a warning another thread wrote to ``sys.stderr`` in
    between found no line shown, and was appended to it. The stream below starts that thread while the line is being
    written (and lets it go on, if it can, before the write returns)."""
    import sys
    import threading

    warned = threading.Thread(target=lambda: sys.stderr.write("a warning\n"), daemon=True)

    class KernelStream(io.StringIO):  # a notebook's sys.stderr, the stream the line is written to
        def write(self, text: str) -> int:
            written = super().write(text)
            if text.startswith("\r[ragscore]") and warned.ident is None:
                warned.start()
                warned.join(timeout=1)  # it waits on the line's lock: the line goes on without it
            return written

    stream = KernelStream()
    monkeypatch.setattr(sys, "stderr", stream)
    view = progress.InPlaceProgress()
    view.start("r1")
    view.update({"done": 1, "total": 2}, final=True)
    warned.join(timeout=120)
    view.stop()
    assert sys.stderr is stream
    lines = stream.getvalue().split("\n")
    assert "a warning" in lines and lines[0].startswith("\r[ragscore] r1: 1/2"), lines


def test_a_notebooks_stderr_is_given_back_when_ending_the_line_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-place line ended, then ``sys.stderr`` was given back: a stream that failed at that last write (closed,
    or a Ctrl-C meanwhile) left the wrapper as the process's ``sys.stderr`` for good."""
    import sys

    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    view = progress.InPlaceProgress()
    view.start("r1")
    view.update({"done": 1, "total": 2}, final=True)
    assert sys.stderr is not stream  # wrapped while the run is followed
    stream.close()
    with pytest.raises(ValueError, match="closed file"):
        view.stop()
    assert sys.stderr is stream


#: A real embedded-style run's progress counters, one per 0.2 s poll on the store's clock (``work_ms``): one embed
#: worker on 2 busy CPU cores loading all-MiniLM-L6-v2 (the ``load_of`` note, 6 s), then 10 chunks of 64 questions
#: of ``answer_correctness`` (the first 2.4 s, the rest 0.2 to 1.6 s), as :meth:`RunStore.progress` returned them.
EMBED_RUN = Path(__file__).parent.parent / "data" / "embed_run_progress_cpu.json"


def _first_eta(samples: list[dict[str, int]], clock: Clock) -> tuple[float, int]:
    """The first ETA the plain line says replaying ``samples`` (one per 0.2 s), and the ``work_ms`` it was said at."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    for counters in samples:
        view.update(counters)
        clock.advance(0.2)
        if found := re.search(r" ETA (\d+)s ", (out.getvalue().splitlines() or [""])[-1]):
            return float(found.group(1)), counters["work_ms"]
    raise AssertionError(out.getvalue())


def test_the_first_eta_after_a_model_load_is_close_to_the_time_the_run_then_took(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first chunk's time held the model's load: its units over the time since work began said ``ETA 94s`` where
    4.4 s were left. The embed queue's pace counts from that chunk's end: the first ETA shown (at the second chunk) is
    within a factor of 2 of the time the recorded run then took."""
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    samples = json.loads(EMBED_RUN.read_text())
    eta, at_ms = _first_eta(samples, clock)
    took = (samples[-1]["work_ms"] - at_ms) / 1000
    assert took / 2 <= eta <= took * 2, (eta, took)


def test_a_queue_whose_worker_had_its_model_loaded_has_its_eta_at_its_first_chunk(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's embed worker that had the model loaded loads nothing for the run (no ``loading`` note seen): its
    queue's first chunk gives its pace, as before, not an ETA held back until the next one. The recorded run with its
    load left out (its samples, their clock less the load's 6 s)."""
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    recorded = json.loads(EMBED_RUN.read_text())
    loading = [c for c in recorded if any(k.startswith("load_of:embed:loading ") for k in c)]
    load_ms = loading[-1]["work_ms"] - loading[0]["work_ms"]
    samples = [c if c["work_ms"] < loading[0]["work_ms"] else c | {"work_ms": c["work_ms"] - load_ms}
               for c in recorded if c not in loading]  # fmt: skip
    first_chunk = next(c["work_ms"] for c in samples if c.get("done:embed"))
    assert _first_eta(samples, clock)[1] == first_chunk
