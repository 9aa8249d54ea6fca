"""``ragscore status``: per-queue done/total, rate, ETA, errors, judge requests per minute against the limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator import evaluate
from orchestrator.progress import IDLE_NOTE_S, RecentRate
from orchestrator.queues import Orphan
from orchestrator.reports.live import Sample, StatusView
from ragscore_workers.schemas import MetricResult
from ragscore_workers.store import RunStore, redis_client

from ..fakes import FakeProvider
from ..support import ROOT, WorkerProcess, make_rows

SUITE_META = {"suite": json.dumps({"judge": {"rpm": 30}}), "state": "running", "submitted_at": "1000.0"}


def _progress(cpu: int, judge: int, **extra: int) -> dict[str, int]:
    return {"done:cpu": cpu, "total:cpu": 600, "done:judge": judge, "total:judge": 120, "done": cpu + judge,
            "total": 720, **extra}  # fmt: skip


def test_rates_and_etas_come_from_the_window_of_samples() -> None:
    view = StatusView(SUITE_META, window_s=30)
    view.add(Sample(1010.0, _progress(100, 10), judge_calls=20))
    view.add(Sample(1020.0, _progress(300, 20), judge_calls=40))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["cpu"]["rate"] == pytest.approx(20.0)  # 200 units in 10 s
    assert rows["cpu"]["eta"] == pytest.approx(300 / 20.0)
    assert rows["judge"]["rate"] == pytest.approx(1.0) and rows["judge"]["eta"] == pytest.approx(100.0)
    assert rows["all"]["done"] == 320 and rows["all"]["pct"] == pytest.approx(100 * 320 / 720)
    assert view.judge_rpm() == 40.0  # the run's first minute: its calls so far (the limit's window)


def test_the_runs_eta_is_its_slowest_queues_not_its_units_left_over_the_summed_rate() -> None:
    """The queues run side by side: 400 cpu units at 20/s and 100 judge units at 1/s end in 100 s, not in
    500 / 21 s (the overall rate of a fast queue made an hour of judging read as a minute)."""
    view = StatusView(SUITE_META, window_s=30)
    view.add(Sample(1010.0, _progress(100, 10)))
    view.add(Sample(1020.0, _progress(300, 20)))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["all"]["rate"] == pytest.approx(21.0) and rows["all"]["eta"] == pytest.approx(100.0)
    view.add(Sample(1030.0, _progress(600, 30)))  # cpu done: the judge queue's ETA is the run's
    assert {r["queue"]: r for r in view.rows()}["all"]["eta"] == pytest.approx(90.0)


def test_a_queue_no_worker_serves_has_no_eta_and_neither_has_the_run() -> None:
    view = StatusView(SUITE_META, window_s=30)
    view.add(Sample(1010.0, _progress(100, 10)))
    view.add(Sample(1020.0, _progress(300, 20)))
    view.set_unserved({"judge": "90 messages wait on queue 'judge' and no worker consumes it"})
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["judge"]["eta"] is None and rows["all"]["eta"] is None
    assert rows["cpu"]["eta"] == pytest.approx(15.0)  # the served queue goes on
    view.add(Sample(1030.0, _progress(400, 30)))  # a judge worker came: its ETA is back
    assert {r["queue"]: r for r in view.rows()}["all"]["eta"] == pytest.approx(90 / 1.0)


def test_old_samples_leave_the_window() -> None:
    view = StatusView(SUITE_META, window_s=30)
    for t, done in ((1010.0, 0), (1020.0, 100), (1050.0, 400), (1060.0, 500)):
        view.add(Sample(t, _progress(done, 0)))
    # the bursts of the last 30 s (at 1050 s and 1060 s): (500 - 400) / 10 s
    assert {r["queue"]: r for r in view.rows()}["cpu"]["rate"] == pytest.approx(10.0)


def test_a_single_sample_uses_the_average_since_submission_and_shows_the_judge_limit() -> None:
    view = StatusView(SUITE_META)
    view.add(Sample(1050.0, _progress(100, 5, errors=2, unscorable=3), judge_calls=7))
    assert {r["queue"]: r for r in view.rows()}["cpu"]["rate"] == pytest.approx(2.0)  # 100 in 50 s
    console = Console(record=True, width=120)
    console.print(view.render("run-x"))
    text = console.export_text()
    assert "errors 2" in text and "unscorable 3" in text and "(limit 30)" in text and "7 calls" in text
    assert view.judge_rpm() == 7.0  # 50 s after submission: the calls of its first minute, not 7 × 60 / 50
    view = StatusView(SUITE_META)
    view.add(Sample(1120.0, _progress(100, 5), judge_calls=70))
    assert view.judge_rpm() == pytest.approx(35.0)  # past a minute, a snapshot: the average since submission


def test_the_status_table_writes_its_counts_with_thousands_separators() -> None:
    """A 50,000-row run's status read ``147500`` where its run list (``ragscore status``) and reports say
    ``147,500``: every count is written alike, while it runs and once cancelled."""
    big = {"done:cpu": 12_345, "worked:cpu": 12_345, "total:cpu": 147_500, "done:judge": 0, "total:judge": 2_000,
           "done": 12_345, "total": 149_500, "errors": 1_200, "unscorable": 3_400}  # fmt: skip
    for state in ("running", "cancelled"):
        view = StatusView(SUITE_META | {"state": state})
        view.add(Sample(1050.0, big, judge_calls=25_000))
        console = Console(record=True, width=160)
        console.print(view.render("run-x"))
        text = console.export_text()
        assert "12,345" in text and "147,500" in text and "147500" not in text, text
        assert "errors 1,200" in text and "unscorable 3,400" in text and "25,000 calls" in text, text


def test_judge_requests_per_minute_are_counted_over_a_minute_as_the_limit_counts_them() -> None:
    """The rpm limit is a sliding minute, which admits its 30 calls at once: extrapolated from the seconds they took,
    a run within its limit read 360 req/min (limit 30), and a watch of 30 s doubled each burst."""
    view = StatusView(SUITE_META, window_s=30)
    view.add(Sample(1000.0, _progress(0, 0), judge_calls=0))
    view.add(Sample(1005.0, _progress(0, 10), judge_calls=30))  # the minute's 30 calls in 5 s
    assert view.judge_rpm() == 30.0
    console = Console(record=True, width=120)
    console.print(view.render("run-x"))
    assert "judge 30 req/min (limit 30)" in console.export_text()
    snapshot = StatusView(SUITE_META)
    snapshot.add(Sample(1062.0, _progress(0, 10), judge_calls=60))  # the next minute's 30 as the first ones left
    assert snapshot.judge_rpm() == 30.0  # 60 calls over 2 minutes begun, not 60 × 60 / 62
    for t, calls in ((1030.0, 30), (1062.0, 60), (1065.0, 60), (1090.0, 60), (1124.0, 90)):
        view.add(Sample(t, _progress(0, 10), judge_calls=calls))
        assert view.judge_rpm() == 30.0  # watched: the calls of the last minute's samples


def test_a_lower_limit_stated_by_the_provider_is_the_one_shown() -> None:
    view = StatusView(SUITE_META)
    view.add(Sample(1050.0, _progress(100, 5), judge_calls=7, provider_rpm=20))
    console = Console(record=True, width=160)
    console.print(view.render("run-x"))
    assert "(limit 20, stated by the provider; the suite says 30)" in console.export_text()


def test_an_ended_runs_status_gives_its_summarys_counts() -> None:
    """After a cancel, status read "unscorable 8" (the workers' writes) and `results` "10 (9 stopped)": what the
    cancel skipped is counted stopped only by the summary."""
    from ragscore_workers.schemas import MetricSummary, RunSummary

    view = StatusView(SUITE_META | {"state": "cancelled"})
    view.add(Sample(1050.0, _progress(100, 5, unscorable=8)))
    view.summary = RunSummary(run_id="run-x", items=20, scored=10, state="cancelled", metrics={
        "answer_accuracy": MetricSummary(mean=1.0, n=10, unscorable=10, stopped=9, errors=1)})  # fmt: skip
    console = Console(record=True, width=300)
    console.print(view.render("run-x"))
    assert ("summary: 20 items, 10 scored; over its metric outputs unscorable 1 + 9 stopped, errors 1 (the counts "
            "above are the workers' writes; `ragscore results run-x --out DIR` writes the reports)") in (
        console.export_text()
    )  # fmt: skip


def test_a_cancelled_run_its_workers_had_scored_all_of_is_not_sent_to_a_resume() -> None:
    """A cancel that came as the workers took its last tasks stopped nothing (0 stopped, 100%), yet status said
    "`ragscore resume RUN --out DIR` scores it": a resume that found nothing to score. One with an output stopped,
    or an error (which a resume scores again), still names the resume."""
    said = {}
    for case, extra in {"all": {}, "stopped": {"worked:judge": 119}, "error": {"errors": 1}}.items():
        view = StatusView(SUITE_META | {"state": "cancelled", "n_shards": "1"})
        view.add(Sample(1050.0, _progress(600, 120, **{"worked:cpu": 600, "worked:judge": 120, **extra})))
        console = Console(record=True, width=400)
        console.print(view.render("run-x"))
        said[case] = " ".join(console.export_text().split())
    assert (
        "cancelled (`ragscore cancel`, or a Ctrl-C of its `ragscore run`): its workers had scored all of it, "
        "without an error, before the cancel stopped anything: a resume has nothing to score"
    ) in said["all"]
    assert "ragscore resume" not in said["all"], said["all"]
    for case in ("stopped", "error"):
        assert "`ragscore resume run-x --out DIR` scores it" in said[case], said[case]


def test_an_ended_runs_status_says_where_its_reports_were_written_not_how_to_write_them() -> None:
    """A run written with --out still read "`ragscore results run-x --out DIR` writes the reports"."""
    from ragscore_workers.schemas import RunSummary

    view = StatusView(SUITE_META | {"state": "finished", "reports_dir": "/data/evals/o"})
    view.add(Sample(1050.0, _progress(100, 5)))
    view.summary = RunSummary(run_id="run-x", items=20, scored=20, state="finished", metrics={})
    console = Console(record=True, width=300)
    console.print(view.render("run-x"))
    said = console.export_text()
    assert "its reports were written to /data/evals/o)" in said and "ragscore results" not in said, said


def test_an_ended_runs_status_says_why_its_judging_stopped() -> None:
    """A run a refused judge key stopped read "errors 36 · unscorable 0" and its summary's counts, never why: its
    summary's breaker (the setting to fix) is said, once the run ended; one whose judge never stopped says nothing."""
    from ragscore_workers.schemas import MetricSummary, RunSummary

    reason = "the groq judge's key was refused (groq HTTP 401: Invalid API Key): check GROQ_API_KEY"
    said = {}
    for case, judge in {"refused": {"calls": 1, "breaker": reason}, "judged": {"calls": 12}}.items():
        view = StatusView(SUITE_META | {"state": "finished"})
        view.add(Sample(1050.0, _progress(12, 12, errors=12)))
        view.summary = RunSummary(run_id="run-x", items=12, scored=0, state="finished", judge=judge, metrics={
            "answer_accuracy": MetricSummary(mean=None, n=0, errors=12, first_error=reason)})  # fmt: skip
        console = Console(record=True, width=300)
        console.print(view.render("run-x"))
        said[case] = console.export_text()
    assert f"judging stopped: {reason}\n" in said["refused"], said["refused"]
    assert "judging stopped" not in said["judged"], said["judged"]


def test_a_finished_run_has_no_eta() -> None:
    view = StatusView(SUITE_META | {"state": "finished"})
    view.add(Sample(1050.0, _progress(600, 120)))
    assert all(r["eta"] == 0.0 for r in view.rows())


def test_a_finished_run_s_rate_is_over_its_own_time_not_until_now() -> None:
    view = StatusView(SUITE_META | {"state": "finished", "finished_at": "1060.0"})
    view.add(Sample(5000.0, _progress(600, 120)))  # read long after it ended
    assert {r["queue"]: r for r in view.rows()}["cpu"]["rate"] == pytest.approx(10.0)  # 600 in 60 s


def test_a_finished_runs_judge_rate_is_said_to_be_its_average_not_a_live_rate() -> None:
    """``ragscore status`` of a finished run read "judge 16 req/min (limit 30)", like a live run's rate: it is the run's
    calls per minute of its work, and is said so; a running run's is not."""
    ended = StatusView(SUITE_META | {"state": "finished", "finished_at": "1120.0"})
    ended.add(Sample(5000.0, _progress(600, 120), judge_calls=32))  # read long after: 32 calls in its 2 minutes
    console = Console(record=True, width=200)
    console.print(ended.render("run-x"))
    assert "judge 16 req/min averaged over the run (limit 30)" in console.export_text(), console.export_text()
    running = StatusView(SUITE_META)
    running.add(Sample(1030.0, _progress(300, 60), judge_calls=16))
    console = Console(record=True, width=200)
    console.print(running.render("run-x"))
    assert "judge 16 req/min (limit 30)" in console.export_text(), console.export_text()


def test_a_running_run_without_progress_for_a_minute_says_so_and_shows_no_eta() -> None:
    meta = SUITE_META | {"progress_at": "1050"}
    view = StatusView(meta)
    view.add(Sample(1100.0, _progress(100, 5)))  # 50 s idle: still at work as far as we know
    assert not view.stalled(1100.0) and {r["queue"]: r for r in view.rows()}["cpu"]["eta"] is not None
    view = StatusView(meta)
    view.add(Sample(1350.0, _progress(100, 5)))  # 5 min idle: its orchestrator may be gone
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["cpu"]["eta"] is None and rows["cpu"]["rate"] == pytest.approx(2.0)  # 100 in the 50 s it worked
    console = Console(record=True, width=200)
    console.print(view.render("run-x"))
    assert "no progress for 5m00s: if the `ragscore run` that started it was stopped" in console.export_text()


@pytest.mark.parametrize(
    ("waiting", "said"),
    [({"judge_wait_rpm": 30}, "waiting on the judge rate limit (30 RPM): next judge call in 40 s"),
     ({"judge_wait_pause": 429}, "paused by the provider's 429 until "),
     ({"judge_wait_pause": 0}, "paused until ")],
)  # fmt: skip
def test_a_run_idle_while_its_judge_calls_wait_at_the_rate_limiter_says_so_not_no_progress(
    waiting: dict[str, int], said: str
) -> None:
    """Idle for 5 minutes, past STALLED_S, while its calls wait on its rpm or a provider's 429 pause: said, and not
    the "no progress ... if the `ragscore run` that started it was stopped" warning."""
    view = StatusView(SUITE_META | {"progress_at": "1050"})
    view.add(Sample(1350.0, _progress(100, 5, judge_wait_ms=40_000, **waiting)))
    assert view.stalled(1350.0)
    console = Console(record=True, width=250)
    console.print(view.render("run-x"))
    text = " ".join(console.export_text().split())
    assert said in text and "no progress" not in text, text


def test_a_run_at_work_whose_calls_wait_a_few_seconds_shows_no_wait_line_one_idle_does() -> None:
    """`status --watch` showed the wait line whenever a call waited a second or more: at a busy limiter it came and
    went from one refresh to the next. It shows once the run did no work for IDLE_NOTE_S, as the progress bar."""
    said = "waiting on the judge rate limit (30 RPM): next judge call in 3 s"
    for idle, shown in [(2.0, False), (IDLE_NOTE_S + 5, True)]:
        view = StatusView(SUITE_META | {"progress_at": "1100"})
        view.add(Sample(1100.0 + idle, _progress(100, 5, judge_wait_ms=3_000, judge_wait_rpm=30)))
        console = Console(record=True, width=250)
        console.print(view.render("run-x"))
        text = " ".join(console.export_text().split())
        assert (said in text) == shown, (idle, text)


def test_a_judge_run_whose_calls_go_out_while_its_items_end_seldom_makes_progress() -> None:
    """A judge item ends only once its calls have: its run wrote no item for minutes while its calls went out, and
    read as stalled ("no progress for 5m00s", no ETA)."""
    meta = SUITE_META | {"progress_at": "1050"}
    view = StatusView(meta)
    view.add(Sample(1350.0, _progress(100, 5), judge_calls=400, judge_called_at=1340.0))  # a call 10 s ago
    assert not view.stalled(1350.0) and view.idle_s(1350.0) == pytest.approx(10.0)
    assert {r["queue"]: r for r in view.rows()}["judge"]["eta"] is not None
    console = Console(record=True, width=200)
    console.print(view.render("run-x"))
    assert "no progress" not in console.export_text()
    view = StatusView(meta)  # its calls stopped too: idle since the last of them, not since the last item
    view.add(Sample(1400.0, _progress(100, 5), judge_calls=400, judge_called_at=1340.0))
    rows = {r["queue"]: r for r in view.rows()}
    assert view.stalled(1400.0) and rows["judge"]["eta"] is None
    assert rows["cpu"]["rate"] == pytest.approx(100 / 340)  # over its time at work: submit to its last call
    console.print(view.render("run-x"))
    assert "no progress for 1m00s" in console.export_text()


def test_a_judge_call_counted_in_the_store_is_read_as_work_done(store) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.reports.live import sample
    from ragscore_workers.providers import RunJudgeState

    store.create_run("r-calls", {"state": "running", "submitted_at": "1000", "progress_at": "1000"})
    assert sample(store, "r-calls", 2000.0).judge_called_at is None  # no call yet
    judge = RunJudgeState(store.r, "r-calls", ttl_s=600)
    judge.incr(calls=1, rate_limited=1)  # a 429 is a call sent too
    judge.note("provider_rpm", 20)
    now = time.time()
    seen = sample(store, "r-calls", now)
    assert seen.judge_calls == 1 and seen.judge_called_at is not None and abs(seen.judge_called_at - now) < 5
    assert seen.progress["judge_calls"] == 1 and seen.provider_rpm == 20  # the calls read with the counters
    view = StatusView(store.meta("r-calls"))
    view.add(seen)
    assert not view.stalled(now)  # its last item 1000 s after the epoch, its last call now


@pytest.mark.parametrize("store_ahead_s", [-600.0, 0.0, 600.0])
def test_the_last_work_is_read_on_the_stores_clock_whatever_this_hosts_clock_says(store_ahead_s: float) -> None:
    """``progress_at`` and the judge's ``called_at`` are the store's clock (Redis TIME). Compared with this host's,
    a store 10 minutes behind read a run that worked 5 s ago as stalled for 10 minutes, and one ahead as idle for
    none even after minutes."""
    now = 5000.0
    at_work = StatusView(SUITE_META | {"progress_at": str(now + store_ahead_s - 5)})  # worked 5 s ago
    at_work.add(Sample(now, _progress(100, 5), store_t=now + store_ahead_s))
    assert at_work.idle_s(now) == pytest.approx(5.0) and not at_work.stalled(now)
    idle = StatusView(SUITE_META | {"progress_at": str(now + store_ahead_s - 400)})  # nothing for 400 s
    idle.add(Sample(now, _progress(100, 5), judge_called_at=now + store_ahead_s - 300, store_t=now + store_ahead_s))
    assert idle.idle_s(now) == pytest.approx(300.0) and idle.stalled(now)


def test_a_sample_reads_the_stores_clock(store) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.reports.live import sample

    store.create_run("r-clock", {"state": "running", "submitted_at": "1000"})
    now = time.time()
    seen = sample(store, "r-clock", now)
    seconds, micros = store.r.time()
    assert seen.store_t is not None and seen.store_t <= seconds + micros / 1e6 and abs(seen.store_t - now) < 5


def test_a_run_whose_submission_was_cut_off_says_its_totals_are_what_was_sent() -> None:
    """Its totals (160,000 of a 240,000-row file, say) read as the whole run's."""
    cut = StatusView(SUITE_META | {"state": "cancelled"})  # no n_shards: submit never ended
    cut.add(Sample(1050.0, _progress(600, 120)))
    ended = StatusView(SUITE_META | {"state": "cancelled", "n_shards": "3"})
    ended.add(Sample(1050.0, _progress(600, 120)))
    said = []
    for view in (cut, ended):
        console = Console(record=True, width=400)
        console.print(view.render("run-x"))
        said.append(console.export_text())
    assert "its submission was cut off" in said[0] and "`ragscore resume run-x --out DIR` sends the rest" in said[0]
    assert "cut off" not in said[1]


def test_the_error_of_a_failed_run_is_shown() -> None:
    view = StatusView(SUITE_META | {"state": "failed", "error": "aggregate: KeyError: 'suite'"})
    view.add(Sample(1050.0, _progress(600, 120)))
    console = Console(record=True, width=120)
    console.print(view.render("run-x"))
    assert "Error: aggregate: KeyError: 'suite'" in console.export_text()
    view = StatusView(SUITE_META)
    view.add(Sample(1050.0, _progress(600, 120)))
    console.print(view.render("run-y"))
    assert "error:" not in console.export_text().split("run-y")[1]


@pytest.mark.integration
def test_status_command_prints_each_queue_of_a_real_run(cluster: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = evaluate(make_rows(40), {"metrics": ["exact_match"]}, broker=cluster, out=tmp_path / "out")
    env = {**os.environ, "RAGSCORE_BROKER_URL": cluster}
    out = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "status", result.summary.run_id, "--watch", "--interval", "0.2"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    cpu = next(line for line in lines if line.strip("│ ").startswith("cpu"))
    assert "40" in cpu and "100.0" in cpu
    assert any("errors 0" in line and "unscorable" in line for line in lines)


def test_a_queue_warning_goes_once_its_work_moves_on_and_when_the_run_ends() -> None:
    view = StatusView(SUITE_META)
    view.add(Sample(1010.0, _progress(100, 0)))
    view.set_unserved({"judge": "13 messages wait on queue 'judge' and no worker consumes it"})
    assert view.warnings == ["13 messages wait on queue 'judge' and no worker consumes it"]
    view.add(Sample(1012.0, _progress(200, 0)))  # other queues move: still unserved
    assert len(view.warnings) == 1
    view.add(Sample(1014.0, _progress(200, 3)))  # a judge worker came: the warning goes before the next check
    assert view.warnings == []
    ended = StatusView(SUITE_META | {"state": "finished"})
    ended.add(Sample(1010.0, _progress(600, 120)))
    ended.set_unserved({"judge": "stale"})
    assert ended.warnings == []


def test_while_rows_are_still_sent_there_is_no_eta_and_the_total_reads_as_a_floor() -> None:
    """An ETA from a total that is still growing said minutes for a run that takes hours."""
    view = StatusView({**SUITE_META, "state": "submitting"}, window_s=30)
    view.add(Sample(1010.0, _progress(100, 10), judge_calls=20))
    view.add(Sample(1020.0, _progress(300, 20), judge_calls=40))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["cpu"]["rate"] == pytest.approx(20.0) and rows["cpu"]["eta"] is None and rows["all"]["eta"] is None
    console = Console(record=True, width=120)
    console.print(view.render("run-x"))
    text = console.export_text()
    assert "600+" in text and "720+" in text


def test_work_held_by_a_worker_that_stopped_makes_its_queue_and_the_run_end_no_sooner_than_its_redelivery() -> None:
    """A killed worker's messages come back only after the visibility timeout: the ETA of their queue read as its
    rate's guess (units left / the live workers' rate), seconds for work that waited 15 minutes."""
    view = StatusView(SUITE_META, window_s=30)
    view.add(Sample(1010.0, _progress(100, 10)))
    view.add(Sample(1020.0, _progress(300, 20)))  # cpu 300 left at 20/s: 15 s by its rate
    view.set_orphans("run-x", [Orphan(1000.0, "cpu", 25), Orphan(1004.0, "cpu", 25)], 900.0)
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["cpu"]["eta"] == pytest.approx(1004.0 + 900.0 - 1020.0) and rows["cpu"]["floor"]
    assert rows["judge"]["eta"] == pytest.approx(100.0) and not rows["judge"]["floor"]  # nothing of it held
    assert rows["all"]["eta"] == pytest.approx(884.0) and rows["all"]["floor"]
    console = Console(record=True, width=400)
    console.print(view.render("run-x"))
    text = " ".join(console.export_text().split())
    assert "≥14m44s" in text and "0m15s" not in text
    assert "Warning: 50 items of this run (50 on cpu; 2 messages) are held by a worker that stopped" in text
    assert "RAGSCORE_VISIBILITY_TIMEOUT_S=900 s after delivery), at about 00:31:44 UTC, in 14m44s" in text
    # a resume follows a run whose live workers hold some of it (it said "sends that work again now")
    assert "sends that work again sooner: at once when no worker that runs holds the run's other work" in text
    one = StatusView(SUITE_META, window_s=30)
    one.add(Sample(1010.0, _progress(100, 10)))
    one.set_orphans("run-x", [Orphan(1000.0, "cpu", 1)], 900.0)
    console = Console(record=True, width=400)
    console.print(one.render("run-x"))
    text = " ".join(console.export_text().split())
    assert "1 item of this run (1 on cpu; 1 message) is held by a worker that stopped" in text
    assert "Redis hands it to another worker only after" in text  # one item: not "them"
    stalled = StatusView(SUITE_META | {"progress_at": "1020"})  # the rest done: nothing moves until then
    stalled.add(Sample(1200.0, _progress(550, 120)))
    stalled.set_orphans("run-x", [Orphan(1000.0, "cpu", 25), Orphan(1004.0, "cpu", 25)], 900.0)
    rows = {r["queue"]: r for r in stalled.rows()}
    assert rows["cpu"]["eta"] == pytest.approx(704.0) and rows["all"]["eta"] == pytest.approx(704.0)
    console.print(stalled.render("run-x"))
    assert "no progress for" not in console.export_text()  # the warning says why, and until when
    stalled.set_orphans("run-x", [], 900.0)  # handed back (or resumed): the rate's ETA again
    assert {r["queue"]: r for r in stalled.rows()}["cpu"] == {**rows["cpu"], "eta": None, "floor": False}


def test_work_held_past_its_redelivery_is_said_to_be_taken_by_its_queues_workers_as_many_as_it_is() -> None:
    """Once the visibility timeout has passed, one held item read "a live worker of their queue takes them"."""
    said: dict[str, str] = {}
    for case, orphans in {"one": [Orphan(1000.0, "cpu", 1)],
                          "many": [Orphan(1000.0, "cpu", 25), Orphan(1004.0, "cpu", 25)],
                          "queues": [Orphan(1000.0, "cpu", 25), Orphan(1004.0, "judge", 5)]}.items():  # fmt: skip
        view = StatusView(SUITE_META, window_s=30)
        view.add(Sample(2000.0, _progress(100, 10)))  # past 1004 + 900
        view.set_orphans("run-x", orphans, 900.0)
        (warning,) = view.warnings
        said[case] = warning.split("which has passed: ")[1].split(" within seconds;")[0]
    assert said == {"one": "a live worker of its queue takes it", "many": "a live worker of their queue takes them",
                    "queues": "live workers of their queues take them"}  # fmt: skip


def test_a_resumed_run_queued_behind_other_runs_says_so_not_no_progress_until_its_work_begins() -> None:
    """A resumed run (its last work minutes ago) waiting behind other runs' messages read as stalled: "no progress
    for 5m00s: if the `ragscore run` that started it was stopped ...". It is waiting its turn."""
    queued = "queued: 40 messages of other runs ahead on queue cpu"
    meta = SUITE_META | {"progress_at": "1050", "generation": "1", "work_began_gen": "0", "work_began_at": "1000.0",
                         "work_began_before": "{}"}  # fmt: skip
    view = StatusView(meta)
    view.add(Sample(1350.0, _progress(100, 5)))
    view.set_queued(queued)
    console = Console(record=True, width=200)
    console.print(view.render("run-x"))
    said = console.export_text()
    assert f"{queued}: its work begins once those are taken" in said and "no progress" not in said
    view.meta = meta | {"work_began_gen": "1", "work_began_at": "1340.0"}  # a worker took one of its tasks
    console = Console(record=True, width=200)
    console.print(view.render("run-x"))
    assert "queued" not in console.export_text()


def test_a_cancelled_runs_all_row_agrees_with_its_queues(store) -> None:  # type: ignore[no-untyped-def]
    """A run with a derived metric (``combined``), cancelled once its queues were done and before its aggregation
    computed the derived outputs: every queue read 100 % and ``all`` 66.7 %, its total counting the derived outputs
    that no row of the table shows (they are computed at aggregation, not by a queue)."""
    from orchestrator.reports.live import sample
    from ragscore_workers.schemas import MetricResult
    from ragscore_workers.store import RunState

    run = "r-cancelled-all"
    store.create_run(run, {"state": "running", "submitted_at": "1000", "n_shards": "1"})
    store.add_ids(run, 0, ["a", "b"], {"cpu": 2, "judge": 2, "derived": 2})
    for queue, output in (("cpu", "evidence_overlap"), ("judge", "rubric_judge")):
        store.write_results(run, queue, [(k, {"id": k}, {output: MetricResult(score=1.0)}) for k in ("a", "b")])
    store.set_state(run, RunState.CANCELLED)
    view = StatusView(store.meta(run))
    view.add(sample(store, run, time.time()))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["cpu"]["pct"] == rows["judge"]["pct"] == 100.0
    assert (rows["all"]["done"], rows["all"]["total"], rows["all"]["pct"]) == (4, 4, 100.0), rows["all"]
    bar, (listed,) = store.progress(run), store.overview([run])  # `ragscore run`'s bar, the run list
    assert (bar["done"], bar["total"]) == (listed["done"], listed["total"]) == (4, 4), (bar, listed)


def test_the_all_row_of_an_aggregating_run_is_its_queues_sums_rate_too() -> None:
    """Its derived outputs, written as the aggregation computes them, are no queue's: ``all`` read 100 % and a rate
    of 5/s while its only queue, done, read 0/s."""
    view = StatusView(SUITE_META | {"state": "aggregating"}, window_s=30)
    for t, derived in ((1010.0, 0), (1020.0, 50)):
        view.add(Sample(t, {"done:cpu": 100, "total:cpu": 100, "done:derived": derived, "total:derived": 100,
                            "done": 100 + derived, "total": 200}))  # fmt: skip
    rows = {r["queue"]: r for r in view.rows()}
    assert "derived" not in rows and rows["cpu"]["rate"] == 0.0
    assert (rows["all"]["done"], rows["all"]["total"], rows["all"]["rate"]) == (100, 100, 0.0), rows["all"]


def test_a_target_call_counted_in_the_store_is_read_as_work_done(store) -> None:  # type: ignore[no-untyped-def]
    """A run busy asking its target (the system under test) writes no item until a chunk's answers are in: its calls
    are its work, as a judge's are. Without them, `ragscore status` said "no progress for 16m40s" of a run whose
    target calls went out."""
    from orchestrator.reports.live import sample
    from ragscore_workers.providers import RunJudgeState

    store.create_run("r-asks", {"state": "running", "submitted_at": "1000", "progress_at": "1000"})
    RunJudgeState.for_target(store.r, "r-asks", "rag-a", ttl_s=600).incr(calls=1)
    now = time.time()
    view = StatusView(store.meta("r-asks"))
    view.add(sample(store, "r-asks", now))
    idle = view.idle_s(now)
    assert idle is not None and idle < IDLE_NOTE_S and not view.stalled(now), idle
    console = Console(record=True, width=250)
    console.print(view.render("r-asks"))
    assert "no progress" not in console.export_text(), console.export_text()


def test_a_target_call_counted_after_its_run_expired_writes_no_run_back(store) -> None:  # type: ignore[no-untyped-def]
    """A target call counted once the run's keys are gone (a straggler of a run whose short RAGSCORE_RUN_TTL_S ran
    out) stamps nothing: its ``target_called_at`` and ``target_calls`` made a meta and a progress hash without a TTL,
    a run that `ragscore status` found, forever."""
    from ragscore_workers.providers import RunJudgeState

    RunJudgeState.for_target(store.r, "r-gone", "rag-a", ttl_s=600).incr(calls=1)
    assert not store.exists("r-gone") and not store.r.exists(store.key("r-gone", "progress"))


def test_an_unnamed_targets_state_built_from_its_system_counts_its_calls_not_the_judges(store) -> None:  # type: ignore[no-untyped-def]
    """A suite's only target has no ``system`` (None): its state, built from it as it is, counts its calls as the
    target's and notes its waits as the target stage's, not the judge's (``target=None`` built the judge's state)."""
    from ragscore_workers.providers import RunJudgeState
    from ragscore_workers.schemas import TargetConfig

    config = TargetConfig.model_validate({"url": "http://127.0.0.1:9/ask"})
    assert config.system is None
    store.create_run("r-only", {"state": "running"})
    state = RunJudgeState.for_target(store.r, "r-only", config.system, ttl_s=600)
    state.incr(calls=1)
    assert store.progress("r-only").get("target_calls") == 1
    assert RunJudgeState(store.r, "r-only", ttl_s=600).read()["calls"] == 0
    assert state.wait_key == store.key("r-only", "targets:wait") and state.who == ""


@pytest.mark.integration
def test_a_derived_metrics_run_counts_the_same_work_in_the_run_list_the_bar_and_its_all_row(  # type: ignore[no-untyped-def]
    cluster: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``combined`` is computed at the run's aggregation, by no queue: the run list and ``ragscore run``'s bar
    counted its outputs (12/12 units) where ``status RUN``'s ``all`` row, its queues' sum, read 9/9."""
    data = ROOT / "tests" / "data" / "nlp-project"
    options = {"predictions": data / "output" / "dev_extension3_output.json", "corpus": data / "data" / "corpus",
               "system": "rag_extension3"}  # fmt: skip
    monkeypatch.setenv("GROQ_API_KEY", "gsk-ONE-COUNT-TEST")
    with FakeProvider(api_key="gsk-ONE-COUNT-TEST") as fake, tempfile.TemporaryDirectory(dir="/tmp") as home:
        judge = WorkerProcess(cluster, "judge", Path(home), concurrency=1).start()
        try:
            suite = {"metrics": ["evidence_overlap", "rubric_judge", "combined"],
                     "judge": {"base_url": fake.url, "model": "fake", "rpm": None, "tpm": None}}  # fmt: skip
            questions = data / "data" / "NLP Project Data" / "dev_final_jsonl.txt"
            result = evaluate(questions, suite, broker=cluster, out=tmp_path / "out", fmt_options=options)
        finally:
            judge.stop()
    run_id = result.summary.run_id
    assert result.summary.metrics["combined"].n + result.summary.metrics["combined"].unscorable == 3
    env = {**os.environ, "RAGSCORE_BROKER_URL": cluster, "COLUMNS": "200"}
    cli = [sys.executable, "-m", "orchestrator.cli", "status"]
    runs = subprocess.run(cli, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    table = subprocess.run([*cli, run_id], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert runs.returncode == table.returncode == 0, runs.stderr + table.stderr
    listed = next(line for line in runs.stdout.splitlines() if line.startswith(run_id)).split("\t")[2]
    all_row = next(line for line in table.stdout.splitlines() if line.strip("│ ").startswith("all"))
    done, total = (int(cell) for cell in all_row.strip("│ ").split("│")[1:3])
    assert (done, total) == (9, 9), all_row  # rubric_judge(_raw) and evidence_overlap of 3 items
    assert listed == f"{done}/{total}", runs.stdout
    bar = RunStore(redis_client(cluster), ttl_s=3600).progress(run_id)  # what `ragscore run`'s bar shows
    assert (bar["done"], bar["total"]) == (done, total), bar


def test_a_derived_metrics_run_at_work_has_an_eta_on_the_bar(store) -> None:  # type: ignore[no-untyped-def]
    """Its derived outputs (``combined``), counted as a queue with units left and none done until the aggregation,
    held the bar's ETA at ``?`` the whole run: the slowest queue's ETA was that of a queue no worker serves."""
    import io

    from orchestrator.progress import PlainProgress

    run = "r-derived-eta"
    store.create_run(run, {"state": "running", "submitted_at": "1000", "n_shards": "1"})
    store.add_ids(run, 0, ["a", "b"], {"cpu": 2, "derived": 2})
    out = io.StringIO()
    bar = PlainProgress(out)
    bar.start(run)
    bar.update(store.progress(run), final=True)
    store.write_results(run, "cpu", [("a", {"id": "a"}, {"evidence_overlap": MetricResult(score=1.0)})])
    bar.update(store.progress(run), final=True)
    line = out.getvalue().splitlines()[-1]
    assert "1/2 item×metric outputs" in line and "ETA ?" not in line, line


def test_the_caption_counts_the_errors_and_unscorable_of_the_queues_work_alone(store) -> None:  # type: ignore[no-untyped-def]
    """The derived outputs (``combined``), computed at the aggregation by no queue, are not counted in the errors
    and unscorable either: the caption (and the bar) said ``errors 2 · unscorable 1`` over rows that read 4/4 of
    which one output errored and none was unscorable."""
    from orchestrator.reports.live import sample

    run = "r-derived-caption"
    store.create_run(run, {"state": "aggregating", "submitted_at": "1000", "n_shards": "1"})
    store.add_ids(run, 0, ["a", "b"], {"cpu": 2, "judge": 2, "derived": 2})
    store.write_results(run, "cpu", [(k, {"id": k}, {"evidence_overlap": MetricResult(score=1.0)}) for k in "ab"])
    store.write_results(run, "judge", [("a", {"id": "a"}, {"rubric_judge": MetricResult(score=None, error="429")}),
                                       ("b", {"id": "b"}, {"rubric_judge": MetricResult(score=0.5)})])  # fmt: skip
    store.write_results(run, "derived", [("a", {"id": "a"}, {"combined": MetricResult(score=None, error="no judge")}),
                                         ("b", {"id": "b"}, {"combined": MetricResult(score=None)})])  # fmt: skip
    counters = store.progress(run)
    assert (counters["done"], counters["total"], counters["errors"], counters.get("unscorable", 0)) == (4, 4, 1, 0)
    view = StatusView(store.meta(run))
    view.add(sample(store, run, time.time()))
    console = Console(width=200, record=True)
    console.print(view.render(run))
    assert "errors 1 · unscorable 0" in console.export_text(), console.export_text()


def test_the_judge_eta_is_a_floor_where_the_rpm_allows_no_sooner() -> None:
    """10 judge units in 10 s read ETA 110 s for the 110 left; at the judge's rpm 30 the 110 calls they take at least
    (120 less the 10 sent) end no sooner than 3 minutes: shown ``≥3m00s``, for the queue and the run."""
    view = StatusView(SUITE_META, window_s=30)
    view.add(Sample(1010.0, _progress(600, 0, judge_rpm=30)))
    view.add(Sample(1020.0, _progress(600, 10, judge_rpm=30, judge_calls=10), judge_calls=10))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["judge"]["eta"] == 180.0 and rows["judge"]["floor"], rows["judge"]
    assert rows["all"]["eta"] == 180.0 and rows["all"]["floor"], rows["all"]


def test_the_judge_floor_counts_the_calls_the_run_planned_at_submit_where_an_item_asks_two_judges() -> None:
    """``answer_accuracy`` asks two judges an item: 240 calls for its 120 units (the dry run's count, stored at
    submit). 10 units done in 10 s, 20 calls sent: the 220 left at rpm 30 take 7 minutes, not the 3 that one call a
    unit (the 110 units left) gave; the table says ``≥7m00s``."""
    view = StatusView(SUITE_META, window_s=30)
    planned = {"judge_rpm": 30, "judge_calls_planned": 240}
    view.add(Sample(1010.0, _progress(600, 0, **planned)))
    view.add(Sample(1020.0, _progress(600, 10, judge_calls=20, **planned), judge_calls=20))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["judge"]["eta"] == 420.0 and rows["judge"]["floor"], rows["judge"]
    console = Console(width=200, record=True)
    console.print(view.render("r1"))
    assert "≥7m00s" in console.export_text(), console.export_text()


def test_a_lone_targets_rpm_floors_the_target_queues_eta() -> None:
    """A target at rpm 30 answered 20 of 120 questions in 10 s (2/s: ETA 50 s); the 100 calls left need 3 minutes at
    30 a minute: ``≥3m00s`` for the queue."""
    view = StatusView(SUITE_META, window_s=30)
    counters = {"done:target": 0, "total:target": 120, "done": 0, "total": 120, "target_rpm": 30}
    view.add(Sample(1010.0, counters))
    view.add(Sample(1020.0, counters | {"done:target": 20, "done": 20, "target_calls": 20}))
    rows = {r["queue"]: r for r in view.rows()}
    assert rows["target"]["eta"] == 180.0 and rows["target"]["floor"], rows["target"]


def test_a_watched_runs_eta_is_its_recent_rates_not_the_mean_a_slow_start_drags() -> None:
    """A minute at 1 cpu unit/s (a model's load), then 30 s at 10/s: the last 30 s's pace gives the ETA (the bar's and
    plain line's too: :class:`~orchestrator.progress.RecentRate`), not the mean since submission."""
    view = StatusView(SUITE_META, window_s=30)
    done = 0
    for second in range(91):
        view.add(Sample(1000.0 + second, _progress(done, 120)))
        done += 1 if second < 60 else 10
    cpu = {r["queue"]: r for r in view.rows()}["cpu"]
    assert cpu["rate"] == pytest.approx(10.0) and cpu["eta"] == pytest.approx((600 - done + 10) / 10.0)


def test_a_resumed_runs_window_holds_none_of_its_earlier_attempts_counts() -> None:
    """An attempt at 10 cpu units/s, then a resume (its generation 1) at 1/s: its rate is the resume's own, not one of a
    window across both (2.2/s over the last 30 s said 130 s for the 285 units left)."""
    meta = {**SUITE_META, "generation": "0"}
    view = StatusView(meta, window_s=30)
    for t in range(1000, 1031):
        view.add(Sample(float(t), _progress(10 * (t - 1000), 120)))
    view.meta = {**meta, "generation": "1"}
    for t in range(1040, 1056):
        view.add(Sample(float(t), _progress(300 + t - 1040, 120)))
    cpu = {r["queue"]: r for r in view.rows()}["cpu"]
    assert cpu["rate"] == pytest.approx(1.0) and cpu["eta"] == pytest.approx(285.0), cpu


def _embed_rate_after_a_restart(gap_s: int, every_s: int, chunk: int) -> float:
    """The embed rate :class:`RecentRate` reads, sampled each second, of a worker writing ``chunk`` units every
    ``every_s`` s for 60 s, then killed: ``gap_s`` s to the new worker's first chunk, which it encoded after 3 s of its
    model's load (the store's ``load_of`` note); read as that chunk is written."""
    recent, done = RecentRate(), 0
    loading = {"load_ms:embed": 1_000, "load_of:embed:loading all-MiniLM-L6-v2 on cpu": 1}
    resumed = 60 + gap_s
    for t in range(1, resumed + 1):
        if t % every_s == 0 and t <= 60 or t == resumed:
            done += chunk
        note = loading if resumed - every_s - 3 <= t < resumed - every_s else {}
        recent.add(float(t), {"done:embed": done, "total:embed": 10_000} | note)
    return recent.rate("done:embed", 10_000 - done) or 0.0


@pytest.mark.parametrize(("gap_s", "every_s", "chunk"), [(45, 5, 64), (6, 1, 10)])
def test_an_embed_workers_restart_counts_not_in_its_rate_once_it_encodes_again(
    gap_s: int, every_s: int, chunk: int
) -> None:
    """The outage of a restarted embed worker (no worker encoded, then its model loaded) counted in its queue's rate for
    a window after it: 64 units every 5 s read 1.4/s after a 45 s outage (its ETA 9 times too long), 10 units a second
    8/s after a 6 s one. The outage's interval counts as the bursts' usual one."""
    assert _embed_rate_after_a_restart(gap_s, every_s, chunk) == pytest.approx(chunk / every_s)


def test_a_judge_queues_waits_at_its_rate_limit_count_in_its_rate() -> None:
    """A judge queue whose chunks come every 3 s for 30 s, then wait 15 s at the rate limiter, read its busy pace after
    each wait (3.33/s, its ETA half what it was): a wait over 10 s and twice the others' mean was taken for an outage
    and counted as their usual gap. Only a model's load seen marks an outage: the rate is the one the window saw."""
    recent, done = RecentRate(), 0
    for t in range(1, 49):
        if t % 3 == 0 and (t <= 30 or t == 48):
            done += 10
        waiting = {"judge_wait_ms": 4_000, "judge_wait_rpm": 600} if 30 < t < 48 else {}
        recent.add(float(t), {"done:judge": done, "total:judge": 1_000} | waiting)
    assert recent.rate("done:judge", 1_000 - done) == pytest.approx(50 / 30)  # 18 s to 48 s: 5 chunks after the first


def test_a_workers_encoding_is_said_until_the_runs_first_units_then_only_once_it_idles() -> None:
    """The status said ``embed: encoding 1,234 texts`` at every refresh of a run whose embed worker encodes nearly all
    the time (a note said at once): only while no unit is done yet, or once no work was seen for IDLE_NOTE_S."""
    encoding = {"load_ms:embed": 4_000, "load_of:embed:encoding 1,234 texts": 1}

    def said(meta: dict[str, str], now: float) -> str:
        view = StatusView(SUITE_META | meta)
        view.add(Sample(now, _progress(0, 0) | encoding))
        console = Console(record=True, width=200)
        console.print(view.render("run-x"))
        return console.export_text()

    assert "embed: encoding 1,234 texts (4 s)" in said({}, 1010.0)  # nothing done yet
    assert "encoding" not in said({"progress_at": "1008.0"}, 1010.0)  # a unit done 2 s ago: at work, its ETA stands
    assert "embed: encoding 1,234 texts (4 s)" in said({"progress_at": "1008.0"}, 1008.0 + IDLE_NOTE_S + 1)


def test_a_model_still_loading_is_said_while_another_queue_scores() -> None:
    """Status kept the load note for 10 s without a unit: on a cold GPU host, the cpu queue writing every few seconds,
    the embed row read no ETA and no reason while its model loaded for minutes. Said at once until the embed queue's
    own first units, as the progress bar says it; then not (its ETA stands)."""
    loading_model = {"load_ms:embed": 90_000, "load_of:embed:loading all-MiniLM-L6-v2 on cuda": 1}

    def said(embed_done: int) -> str:
        view = StatusView(SUITE_META | {"progress_at": "1098.0"})  # a cpu unit done 2 s ago: the run is at work
        counters = {"done:cpu": 300, "total:cpu": 600, "done:embed": embed_done, "total:embed": 600,
                    "done": 300 + embed_done, "total": 1200} | loading_model  # fmt: skip
        view.add(Sample(1100.0, counters))
        console = Console(record=True, width=250)
        console.print(view.render("run-x"))
        return " ".join(console.export_text().split())

    assert "embed: loading all-MiniLM-L6-v2 on cuda (1m30s)" in said(0), said(0)
    assert "loading" not in said(40), said(40)


def test_items_a_worker_stopping_cleanly_finishes_are_said_so_not_a_crash_nor_no_progress() -> None:
    """A worker in its warm shutdown answers no ``inspect``: its items read as "held by a worker that stopped (killed,
    or its host lost)". Held by one that says it is stopping (``queues.Finishing``), they are said to be finished by it,
    per worker, and a run idle while they are is not said to make "no progress"."""
    from orchestrator.queues import Finishing

    view = StatusView(SUITE_META | {"progress_at": "1020"})
    view.add(Sample(1200.0, _progress(550, 120)))
    finishing = [Finishing("cpu-1@a", "cpu", 25), Finishing("cpu-1@a", "cpu", 25), Finishing("judge-1@b", "judge", 1)]
    view.set_orphans("run-x", [], 900.0, [*finishing, Finishing("cpu-1@a", "cpu", 25, running=False)])
    console = Console(record=True, width=400)
    console.print(view.render("run-x"))
    text = " ".join(console.export_text().split())
    assert "50 items of this run (50 on cpu) are being finished by worker cpu-1@a, which is stopping: it takes no " \
           "more work, and exits once they are done; 25 items it took and did not start (25 on cpu) go back to the " \
           "queue as it exits" in text, text  # fmt: skip
    assert "1 item of this run (1 on judge) is being finished by worker judge-1@b" in text and "once it is done" in text
    assert "did not start" not in text.split("judge-1@b")[1], text
    assert "held by a worker that stopped" not in text and "no progress" not in text, text
    view.set_orphans("run-x", [], 900.0)  # it exited: its items were done (or it was killed: an orphan then)
    console = Console(record=True, width=400)
    console.print(view.render("run-x"))
    text = console.export_text()
    assert "being finished" not in text and "no progress" in text, text
