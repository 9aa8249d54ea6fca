"""Progress lines: the rate counts only what this process saw done (a resumed run starts part-way)."""

from __future__ import annotations

import io
import re
import time

from orchestrator.progress import PlainProgress


def _rate(line: str) -> float:
    match = re.search(r" ([\d.]+)/s ETA (\S+) ", line)
    assert match, line
    return float(match.group(1))


def test_a_resumed_runs_earlier_units_are_not_counted_as_this_seconds_work() -> None:
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 115, "total": 1000})  # done before the resume: no work seen yet
    time.sleep(0.2)
    view.update({"done": 135, "total": 1000}, final=True)  # 20 units in ~0.2 s
    first, last = out.getvalue().splitlines()
    assert "115/1,000 item×metric outputs (11.5%) 0.0/s ETA ?" in first
    assert 0 < _rate(last) <= 20 / 0.2, "20 units over at least 0.2 s (the old rate counted all 135)"


def test_no_progress_for_a_while_is_said_instead_of_a_stale_eta(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import orchestrator.progress as progress

    monkeypatch.setattr(progress, "IDLE_NOTE_S", 0.1)
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 10, "total": 100}, final=True)
    time.sleep(0.05)
    view.update({"done": 50, "total": 100}, final=True)
    time.sleep(0.15)
    view.update({"done": 50, "total": 100}, final=True)  # nothing done for 0.15 s
    view.update({"done": 100, "total": 100}, final=True)
    moving, stalled, done = out.getvalue().splitlines()[1:]
    assert "no progress" not in moving and re.search(r"ETA \d+s ", moving)
    assert "50/100 item×metric outputs (50.0%)" in stalled and "ETA ? (no progress for 0 s)" in stalled
    assert "no progress" not in done


def test_while_the_summary_is_aggregated_the_rate_holds_and_the_line_is_not_repeated(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A million items aggregate for ~45 s after the last is scored: the plain view printed the same 100 % line
    every 5 s with a rate falling towards 0."""
    import orchestrator.progress as progress

    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 0, "total": 100})
    time.sleep(0.1)
    view.update({"done": 100, "total": 100})
    time.sleep(0.3)
    view.update({"done": 100, "total": 100})  # aggregating: nothing new to say
    view.update({"done": 100, "total": 100})
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "100/100 item×metric outputs (100.0%)" in lines[1]
    view.update({"done": 100, "total": 100}, final=True)  # the run's last line is always said
    last = out.getvalue().splitlines()[-1]
    assert _rate(last) == _rate(lines[1]) > 100 / 0.3  # over the scoring's 0.1 s, not the 0.4 s since the start


def test_the_eta_is_the_slowest_queues_not_the_units_left_over_the_summed_rate() -> None:
    """A fast cpu queue and a slow judge queue: 900 cpu units and 10 judge units done in the same time. Over the
    summed rate the 90 judge units left read as ~0.1 of the time spent; the judge queue alone needs 9 times it."""
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    counters = {"done": 0, "total": 1100, "done:cpu": 0, "total:cpu": 1000, "done:judge": 0, "total:judge": 100}
    view.update(counters, final=True)
    started = time.monotonic()
    time.sleep(0.3)
    view.update({**counters, "done": 910, "done:cpu": 900, "done:judge": 10}, final=True)
    spent = time.monotonic() - started
    eta = float(re.search(r"ETA (\d+)s", out.getvalue().splitlines()[-1]).group(1))  # type: ignore[union-attr]
    # the judge queue: 90 left at 10 per `spent` (the cpu queue: 100 left at 900 per `spent`, sooner)
    assert eta >= round(9 * spent * 0.9)
    assert eta > 2 * (190 / (910 / spent))  # the summed-rate ETA it replaces: (1100 - 910) / (910 / spent)


def test_the_rich_bar_shows_the_same_eta_and_none_for_a_queue_that_has_not_moved() -> None:
    from rich.console import Console

    from orchestrator.progress import RichProgress

    out = io.StringIO()
    view = RichProgress(Console(file=out, width=200, force_terminal=False))
    view.start("r1")
    view.update({"done": 0, "total": 200, "done:cpu": 0, "total:cpu": 100, "done:embed": 0, "total:embed": 100})
    time.sleep(0.2)
    view.update({"done": 100, "total": 200, "done:cpu": 100, "total:cpu": 100, "done:embed": 0, "total:embed": 100})
    task = view.bar.tasks[0]
    assert task.fields["eta"] == "-:--:--"  # embed has work left and has done none: no ETA, not cpu's pace
    time.sleep(0.2)
    view.update({"done": 150, "total": 200, "done:cpu": 100, "total:cpu": 100, "done:embed": 50, "total:embed": 100})
    assert view.bar.tasks[0].fields["eta"] == "0:00:00"  # 50 left at ~125/s
    view.stop()
