"""Judging stopped by the circuit breaker or the budget, through the CLI (embedded, real workers, real HTTP to the
fake provider): the run says so and exits as it should, and ``--resume`` judges what was stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ..fakes import FakeProvider
from ..support import ROOT, interrupted_once_said, interruptible, output_of, until, write_jsonl

pytestmark = pytest.mark.integration

ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"} for i in range(8)]


def _cli(*args: str | Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "250"}
    env.pop("RAGSCORE_BROKER_URL", None)
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)  # fmt: skip


def _suite(tmp_path: Path, fake: FakeProvider, model: str, **params: Any) -> Path:
    spec = {"name": "answer_accuracy", "params": {"attempts": 1, "concurrency": 1, "breaker_failures": 2, **params}}
    path = tmp_path / "suite.json"
    judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    path.write_text(json.dumps({"metrics": [spec], "chunk_size": {"judge": 8}, "judge": judge}))
    return path


def _items(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line)["metrics"]["answer_accuracy"] for line in (out / "items.jsonl").read_text().splitlines()]


def test_a_run_the_breaker_stopped_exits_1_and_resume_judges_the_rest(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str
) -> None:
    data, out = write_jsonl(tmp_path / "d.jsonl", ROWS), tmp_path / "out"
    fake.fail_next("500", 2)  # the first item's two judges fail: the breaker (2 in a row) opens
    first = _cli("run", data, "--suite", _suite(tmp_path, fake, model), "--out", out, home=home)
    assert first.returncode == 1, first.stderr
    assert "judging stopped: circuit breaker open after 2 consecutive failed judge calls" in first.stderr
    assert f"`ragscore run --resume {out}` judges them" in " ".join(first.stderr.split())  # the DIR itself
    assert "stopped: circuit breaker open" in first.stdout  # the judge line under the table
    assert f"(`ragscore run --resume {out}` goes on)" in " ".join(first.stdout.split())  # its DIR, not "DIR"
    items = _items(out)
    assert items[0]["error"] and all(i["details"].get("stopped") for i in items[1:])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["answer_accuracy"]["n"] == 0 and "circuit breaker" in summary["judge"]["breaker"]
    assert summary["metrics"]["answer_accuracy"]["unscorable"] == summary["metrics"]["answer_accuracy"]["stopped"] == 7
    assert "| 7 (7 stopped) |" in (out / "report.md").read_text()  # told apart from rows lacking a field
    said = " ".join(_cli("results", out, home=home).stdout.split())
    assert f"(`ragscore run --resume {out}` goes on)" in said, said  # its run.json names the run
    said = " ".join(_cli("results", out, "--out", tmp_path / "other", home=home).stdout.split())
    assert "(`ragscore run --resume DIR` goes on)" in said, said  # no run.json there for a `run --resume` to read

    resumed = _cli("run", "--resume", out, home=home)  # the provider is fine again
    assert resumed.returncode == 0, resumed.stderr
    assert [i["score"] for i in _items(out)] == [1.0] * 8  # the errored item and the stopped ones, all judged
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["answer_accuracy"]["n"] == 8 and "breaker" not in summary["judge"]


def test_a_budget_stop_is_said_and_resume_with_a_higher_budget_finishes(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str
) -> None:
    data, out = write_jsonl(tmp_path / "d.jsonl", ROWS), tmp_path / "out"
    first = _cli("run", data, "--suite", _suite(tmp_path, fake, model), "--out", out, "--max-tokens", "300", home=home)
    assert first.returncode == 0, first.stderr  # a budget is the user's own stop: reported, not a failure
    assert "stopped: budget reached:" in first.stdout and "token budget of 300" in " ".join(first.stdout.split())
    stopped = [i for i in _items(out) if i["details"].get("stopped")]
    assert stopped and all(i["details"]["reason"].startswith("budget reached") for i in stopped)
    assert len({i["details"]["reason"] for i in stopped}) == 1  # one reason, so the report's reasons group
    assert f"{len(stopped)} ({len(stopped)} stopped)" in first.stdout  # the summary table's unscorable column
    assert json.loads((out / "summary.json").read_text())["judge"]["budget"].startswith("budget reached")

    same = _cli("run", "--resume", out, home=home)  # the same budget: still reached, nothing more judged
    assert same.returncode == 0 and len([i for i in _items(out) if i["details"].get("stopped")]) == len(stopped)
    raised = _cli("run", "--resume", out, "--max-tokens", "1000000", home=home)
    assert raised.returncode == 0, raised.stderr
    assert [i["score"] for i in _items(out)] == [1.0] * 8
    summary = json.loads((out / "summary.json").read_text())
    assert "budget" not in summary["judge"] and summary["metrics"]["answer_accuracy"]["stopped"] == 0


def test_a_resume_judges_what_is_left_under_the_rate_limits_it_sets(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str
) -> None:
    """A run stopped by provider failures resumed with `--rpm`: what is left is limited by that rpm (every call the
    window lacks room for fails fast, max_wait_s 1), then raised again; nothing scored is asked twice (no cache)."""
    data, out = write_jsonl(tmp_path / "d.jsonl", ROWS), tmp_path / "out"
    suite = _suite(tmp_path, fake, model, cache=False, max_wait_s=1)
    refused = _cli("run", data, "--suite", suite, "--out", out, "--tpm", "0", home=home)
    assert refused.returncode == 2 and "--tpm 0: a judge rate limit is at least 1" in refused.stderr, refused.stderr
    fake.fail_next("500", 2)  # the first item's two judges fail: the breaker opens, the rest is stopped
    assert _cli("run", data, "--suite", suite, "--out", out, home=home).returncode == 1
    refused = _cli("run", "--resume", out, "--rpm", "0", home=home)
    assert refused.returncode == 2 and "--rpm 0: a judge rate limit is at least 1" in refused.stderr, refused.stderr
    before = fake.stats()["requests"]

    slow = _cli("run", "--resume", out, "--rpm", "4", home=home)  # the suite had none: two items' two calls a minute
    asked = fake.stats()["requests"] - before
    scored = [i for i in _items(out) if i["score"] is not None]
    assert 2 <= asked <= 4 and len(scored) == asked // 2, (asked, slow.stderr)
    waited = [i["error"] for i in _items(out) if i["error"] and "rate limit" in i["error"]]
    assert waited and all("max_wait_s=1" in e for e in waited), _items(out)

    before = fake.stats()["requests"]
    fast = _cli("resume", out, "--rpm", "1000", home=home)
    assert fast.returncode == 0, fast.stderr
    assert [i["score"] for i in _items(out)] == [1.0] * 8
    assert fake.stats()["requests"] - before == 2 * (8 - len(scored))  # only the items not scored yet were asked


def _judging_run(
    tmp_path: Path,
    fake: FakeProvider,
    model: str,
    home: Path,
    out: Path,
    *,
    output: int,
    quiet: bool = True,
    concurrency: int = 1,
    rows: list[dict[str, str]] = ROWS,
) -> subprocess.Popen[str]:
    """An embedded ``ragscore run`` of ``rows`` into ``out`` in a process of its own (its judge's ``concurrency`` calls
    at a time), returned once the fake provider has its first request (or the run ended, or 120 s passed); its stdout
    and stderr go to ``output`` (its progress lines too, without ``quiet``)."""
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "250"}
    env.pop("RAGSCORE_BROKER_URL", None)
    run = interruptible(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite",
         str(_suite(tmp_path, fake, model, concurrency=concurrency)), "--out", str(out),
         *(["--quiet"] if quiet else [])],
        cwd=ROOT, env=env, stdout=output, stderr=output, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not fake.stats().get("requests") and run.poll() is None:
        time.sleep(0.1)
    return run


def test_a_run_stopped_by_ctrl_c_is_shown_by_status_and_results_with_the_command_that_finishes_it(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """After a Ctrl-C, `ragscore status DIR` showed the run `cancelled` with every queue at 100 % and ETA 0, and
    `ragscore results` said "the reports cover those only": neither said that a resume scores what it stopped."""
    out = tmp_path / "out"
    with FakeProvider(api_key=keys, latency_s=0.5) as fake:
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.PIPE)
        try:
            assert run.poll() is None, output_of(run)
            run.send_signal(signal.SIGINT)
            _, stderr = run.communicate(timeout=60)
        finally:
            run.kill()
            run.wait(30)
    assert run.returncode == 130 and f"`ragscore run --resume {out}`" in stderr, stderr
    run_id = json.loads((out / "run.json").read_text())["run_id"]

    status = _cli("status", out, home=home)
    said = " ".join(status.stdout.split())
    assert f"run {run_id}: cancelled" in said, said
    assert f"`ragscore run --resume DIR` (DIR: its --out) or `ragscore resume {run_id} --out DIR` scores it" in said

    results = _cli("results", out, "--out", tmp_path / "res", "--quiet", home=home)
    said = " ".join(results.stderr.split())
    assert results.returncode == 1, results.stderr
    resume = f"ragscore resume {run_id} --out {tmp_path / 'res'}"
    assert f"the reports cover those only, and `{resume}` scores the rest" in said, said
    # its own queues have no worker since its process went: said as that, not as a cluster's queue nobody serves
    assert "no worker consumes" not in said and f"run {run_id}: its `ragscore run` is gone (interrupted)" in said
    assert (
        "what it did not score counts as stopped, which `ragscore run --resume DIR` (DIR: its --out) or "
        f"`ragscore resume {run_id} --out DIR` scores"
    ) in said, said  # the hint the status view gives too


def test_cancelling_a_killed_embedded_run_says_one_thing_of_who_writes_its_summary(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """`ragscore cancel` of an embedded run whose `ragscore run` was killed said "the workers skip its queued tasks",
    then "its `ragscore run` is gone (interrupted), and the workers it started with it": no worker was left."""
    import psutil

    out = tmp_path / "out"
    with FakeProvider(api_key=keys, latency_s=1.0) as fake:
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.DEVNULL)
        workers: list[psutil.Process] = []
        try:
            assert run.poll() is None and (out / "run.json").is_file()
            workers = psutil.Process(run.pid).children()
            run.send_signal(signal.SIGKILL)  # as a closed laptop or the OOM killer: no Ctrl-C, no cancel
            run.wait(30)
            psutil.wait_procs(workers, timeout=30)  # its workers go with it
            cancel = _cli("cancel", out, home=home)
        finally:
            if run.poll() is None:
                run.kill()
            for proc in workers:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    said = " ".join(cancel.stderr.split())
    assert cancel.returncode == 0, cancel.stderr
    assert f"run {run_id}: cancelled" in said and "its `ragscore run` is gone (interrupted)" in said, said
    assert "the workers skip its queued tasks" not in said, said
    results = _cli("results", out, "--out", tmp_path / "res", "--quiet", home=home)
    assert results.returncode == 1 and (tmp_path / "res" / "summary.json").is_file(), results.stderr


def _table_rows(text: str) -> dict[str, list[str]]:
    """The cells of each row of a status table rich drew (``│ judge │ 3 │ 5 │ …``), by its first cell."""
    lines = [line.replace("┃", "│").strip() for line in text.splitlines()]  # the header's rule is heavier
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    return {cells[0]: cells[1:] for cells in rows}


def test_a_cancelled_runs_status_tells_what_was_scored_from_what_the_cancel_stopped(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """After a Ctrl-C, `ragscore status` read "judge 8 8 100.0": the outputs the cancel stopped were counted done, as
    if every item had been judged. Its queues now read scored and stopped, as the summary counts them."""
    out = tmp_path / "out"
    with FakeProvider(api_key=keys, latency_s=0.5) as fake:
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.DEVNULL)
        try:
            assert run.poll() is None
            run.send_signal(signal.SIGINT)
            run.wait(60)
        finally:
            run.kill()
            run.wait(30)
    assert run.returncode == 130
    results = _cli("results", out, "--out", tmp_path / "res", "--quiet", home=home)
    assert results.returncode == 1, results.stderr
    accuracy = json.loads((tmp_path / "res" / "summary.json").read_text())["metrics"]["answer_accuracy"]
    stopped = accuracy["stopped"]
    assert 0 < stopped <= len(ROWS), accuracy  # a Ctrl-C at its first judge call stops most of it

    status = _cli("status", out, home=home)
    assert status.returncode == 0, status.stderr
    rows = _table_rows(status.stdout)
    assert rows["queue"][:4] == ["scored", "stopped", "total", "%"], status.stdout
    scored = len(ROWS) - stopped
    assert rows["judge"][:4] == [str(scored), str(stopped), str(len(ROWS)), f"{100 * scored / len(ROWS):.1f}"], (
        status.stdout
    )
    assert rows["all"][:3] == [str(scored), str(stopped), str(len(ROWS))], status.stdout
    said = " ".join(status.stdout.split())
    assert "`stopped` what the cancel (or a judge's breaker or budget) stopped, unscored" in said, said


def test_a_run_stopped_by_ctrl_c_ends_its_progress_on_what_status_then_shows(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """After a Ctrl-C the run's last progress line read "0/8 item×metric outputs (0.0%) ... errors 0", without the
    `stopped 8` that `ragscore status` showed: it was read before the run was marked cancelled. It now reads as the
    status's counts (the judge call in flight is held until the run ended: no race with the cancel)."""
    out = tmp_path / "out"
    with FakeProvider(api_key=keys) as fake:
        fake.hold = threading.Event()  # the first judge call waits: the Ctrl-C comes while it is in flight
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.PIPE, quiet=False)
        try:
            assert run.poll() is None, output_of(run)
            run.send_signal(signal.SIGINT)
            _, stderr = run.communicate(timeout=120)
        finally:
            fake.hold.set()
            run.kill()
            run.wait(30)
    assert run.returncode == 130, stderr
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    status = _cli("status", out, home=home)
    scored, stopped, total = _table_rows(status.stdout)["judge"][:3]
    assert int(stopped) > 0, status.stdout
    last = [line for line in stderr.splitlines() if line.startswith(f"[ragscore] {run_id}: ")][-1]
    assert f": {scored}/{total} item×metric outputs scored (" in last, (last, status.stdout)
    assert f" stopped {stopped} errors 0 unscorable 0 " in last and "ETA" not in last, (last, status.stdout)


def test_a_run_cancelled_from_another_shell_ends_its_progress_on_what_was_scored_not_what_was_stopped(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """`ragscore cancel` while its `ragscore run` judged: the run's last progress line read "8/8 item×metric outputs
    (100.0%)" (the chunk the cancel cut short wrote its rest stopped, counted done), and the status's caption counted
    those unscorable. Both now count them stopped, as the status's table does."""
    out = tmp_path / "out"
    with FakeProvider(api_key=keys) as fake:
        fake.hold = threading.Event()  # the first judge call waits for the cancel: no race with the run's end
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.PIPE, quiet=False)
        try:
            assert run.poll() is None, output_of(run)
            cancel = _cli("cancel", out, home=home)
            fake.hold.set()
            _, stderr = run.communicate(timeout=120)
        finally:
            run.kill()
            run.wait(30)
    assert cancel.returncode == 0, cancel.stderr
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    stopped = json.loads((out / "summary.json").read_text())["metrics"]["answer_accuracy"]["stopped"]
    assert 0 < stopped <= len(ROWS), stderr
    scored = len(ROWS) - stopped
    last = [line for line in stderr.splitlines() if line.startswith(f"[ragscore] {run_id}: ")][-1]
    assert f": {scored}/{len(ROWS)} item×metric outputs scored ({100 * scored / len(ROWS):.1f}%) " in last, stderr
    assert f" stopped {stopped} errors 0 unscorable 0 " in last and "ETA" not in last, last

    status = _cli("status", out, home=home)
    assert _table_rows(status.stdout)["judge"][:3] == [str(scored), str(stopped), str(len(ROWS))], status.stdout
    assert "errors 0 · unscorable 0" in status.stdout, status.stdout  # the stopped outputs are not unscorable


def test_a_cancelled_runs_summary_line_counts_unscorable_as_its_caption_does_and_stopped_apart(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """A run cancelled mid-judge read "unscorable 2" under its status table and "unscorable 8 (6 stopped)" on its
    `summary:` line: the summary counts the stopped outputs unscorable too. The line says "unscorable 2 + 6 stopped"."""
    out = tmp_path / "out"
    no_reference = [{k: v for k, v in row.items() if k != "reference"} for row in ROWS[:2]]  # unscorable
    rows = no_reference + ROWS[2:]
    with FakeProvider(api_key=keys) as fake:
        fake.hold = threading.Event()  # the first judge call waits for the cancel: no race with the run's end
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.DEVNULL, rows=rows)
        try:
            assert run.poll() is None
            cancel = _cli("cancel", out, home=home)
            fake.hold.set()
            run.wait(120)
        finally:
            run.kill()
            run.wait(30)
    assert cancel.returncode == 0, cancel.stderr
    accuracy = json.loads((out / "summary.json").read_text())["metrics"]["answer_accuracy"]
    stopped, unscorable = accuracy["stopped"], accuracy["unscorable"] - accuracy["stopped"]
    assert stopped > 0 and unscorable == 2, accuracy  # stored as before: its unscorable count the stopped outputs

    said = " ".join(_cli("status", out, home=home).stdout.split())
    assert f"errors 0 · unscorable {unscorable}" in said, said
    assert f"over its metric outputs unscorable {unscorable} + {stopped} stopped, errors 0" in said, said


def test_a_run_stored_with_an_even_pace_and_no_rpm_resumes_with_the_rpm_the_resume_gives(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str
) -> None:
    """Older code stored a suite of ``pace: even`` and ``rpm: null`` (it paced nothing): `ragscore resume RUN --rpm N`
    was refused ("set rpm"), as the stored suite was validated before --rpm was applied. It now runs at N."""
    from orchestrator.embedded_redis import EmbeddedRedis
    from ragscore_workers.store import RunStore

    data, out = write_jsonl(tmp_path / "d.jsonl", ROWS), tmp_path / "out"
    suite = json.loads(_suite(tmp_path, fake, model).read_text())
    suite["judge"] |= {"rpm": 1000, "pace": "even"}
    (tmp_path / "suite.json").write_text(json.dumps(suite))
    fake.fail_next("500", 2)  # the breaker opens: the rest is stopped, for the resume to judge
    assert _cli("run", data, "--suite", tmp_path / "suite.json", "--out", out, home=home).returncode == 1
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    embedded = EmbeddedRedis(home)
    embedded.acquire()
    try:  # the suite as the older code stored it
        store = RunStore(embedded.client, ttl_s=3600)
        stored = json.loads(store.meta(run_id)["suite"])
        stored["judge"]["rpm"] = None
        store.set_meta(run_id, suite=json.dumps(stored))
    finally:
        embedded.release()

    resumed = _cli("resume", run_id, "--out", out, "--rpm", "1000", home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert [i["score"] for i in _items(out)] == [1.0] * 8
    assert json.loads((out / "run_info.json").read_text())["suite"]["judge"]["rpm"] == 1000, resumed.stdout


def test_a_resume_read_mid_run_counts_what_it_redoes_neither_unscorable_nor_errors(
    tmp_path: Path, home: Path, fake: FakeProvider, model: str
) -> None:
    """A run the breaker stopped (1 error, 7 stopped), resumed: while the resume judged them again, its bar and
    `ragscore status` read `errors 1 unscorable 7` (their old status), then 0 once they were written again. A resume's
    tallies count only what is current; its summary is as before."""
    data, out = write_jsonl(tmp_path / "d.jsonl", ROWS), tmp_path / "out"
    fake.fail_next("500", 2)  # the first item's two judges fail: the breaker opens, the rest is stopped
    assert _cli("run", data, "--suite", _suite(tmp_path, fake, model), "--out", out, home=home).returncode == 1
    assert "errors 1 · unscorable 7" in _cli("status", out, home=home).stdout  # stored so: the ended run says it

    fake.hold, before = threading.Event(), fake.stats()["requests"]  # the resume's first judge call waits
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "250"}
    env.pop("RAGSCORE_BROKER_URL", None)
    command = [sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(out), "--quiet"]
    resume = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and fake.stats()["requests"] == before and resume.poll() is None:
            time.sleep(0.1)
        assert resume.poll() is None, output_of(resume)
        status = _cli("status", out, home=home)  # mid-run: every output stored is being judged again
        assert "running" in status.stdout and "errors 0 · unscorable 0" in status.stdout, status.stdout
    finally:
        fake.hold.set()
    _, stderr = resume.communicate(timeout=240)
    assert resume.returncode == 0, stderr
    summary = json.loads((out / "summary.json").read_text())["metrics"]["answer_accuracy"]
    assert (summary["n"], summary["unscorable"], summary["stopped"]) == (8, 0, 0), summary
    assert "errors 0 · unscorable 0" in _cli("status", out, home=home).stdout


def test_a_run_stopped_by_ctrl_c_counts_the_judge_calls_in_flight_that_end_after_it(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """A Ctrl-C while judge calls were in flight printed "24/72 item×metric outputs scored … stopped 48": the calls
    ended after the line, their outputs were written, and the resume began at 42/72. The line now counts them: it
    is read once the run's workers stopped (calls in flight released only once the run is marked cancelled), and
    what it waits on is said before."""
    from orchestrator.embedded_redis import EmbeddedRedis
    from ragscore_workers.store import RunState, RunStore

    out = tmp_path / "out"
    with FakeProvider(api_key=keys) as fake:
        fake.hold = threading.Event()  # every item's first judge call waits until the run is marked cancelled
        run = _judging_run(tmp_path, fake, model, home, out, output=subprocess.PIPE, quiet=False, concurrency=8)
        embedded = EmbeddedRedis(home)
        embedded.acquire()
        try:
            assert run.poll() is None, output_of(run)
            run_id = json.loads((out / "run.json").read_text())["run_id"]
            run.send_signal(signal.SIGINT)
            store = RunStore(embedded.client, ttl_s=3600)
            assert until(lambda: store.state(run_id) == RunState.CANCELLED, 60)
            fake.hold.set()
            _, stderr = run.communicate(timeout=120)
        finally:
            fake.hold.set()
            run.kill()
            run.wait(30)
            embedded.release()
    assert run.returncode == 130, stderr
    scored, stopped, total = _table_rows(_cli("status", out, home=home).stdout)["judge"][:3]
    assert int(scored) > 0, stderr  # the calls in flight at the Ctrl-C ended, and their outputs were written
    lines = stderr.splitlines()
    last = [line for line in lines if line.startswith(f"[ragscore] {run_id}: ")][-1]
    assert f": {scored}/{total} item×metric outputs scored (" in last and f" stopped {stopped} " in last, (last, scored)
    # said at once, not after the wait on the workers: the Ctrl-C was heard, and how to cut the wait short
    said = "[ragscore] stopping the workers: the judge calls under way end and are kept (up to 15 s; Ctrl-C"
    assert any(line.startswith(said) for line in lines[: lines.index(last)]), stderr


@pytest.mark.serial  # it tells a stop cut short from the workers' whole STOP_S wait: timed
def test_a_second_ctrl_c_while_the_workers_stop_stops_them_at_once_and_the_resume_scores_the_rest(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """The first Ctrl-C waits (up to STOP_S) for the judge calls under way, and says so at once; a second one, while
    it waits, kills the workers at once: the run exits 130 then, and its resume judges every item cut short."""
    from orchestrator.workers import STOP_S

    out, said = tmp_path / "out", tmp_path / "said.txt"
    with FakeProvider(api_key=keys) as fake, said.open("w") as output:
        fake.hold = threading.Event()  # the judge calls under way never end while the run stops
        run = _judging_run(tmp_path, fake, model, home, out, output=output.fileno(), quiet=False, concurrency=8)
        try:
            assert run.poll() is None, said.read_text()
            run.send_signal(signal.SIGINT)
            assert until(lambda: "[ragscore] stopping the workers: " in said.read_text(), 60), said.read_text()
            begun = time.monotonic()
            run.send_signal(signal.SIGINT)
            run.wait(60)
            took = time.monotonic() - begun
        finally:
            fake.hold.set()
            run.kill()
            run.wait(30)
        assert run.returncode == 130 and took < STOP_S - 5, (took, said.read_text())
        resumed = _cli("run", "--resume", out, home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert [i["score"] for i in _items(out)] == [1.0] * len(ROWS)


def test_ctrl_c_of_a_resume_whose_judging_is_all_done_names_no_judge_calls(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """A resume of a run whose judge work was all done, stopped by Ctrl-C, still said "the judge calls under way end
    and are kept" (the note read that the run has a judge queue, not that it has work left there): its workers score
    the slow cpu metric alone, which the note now says is cut short."""
    rows = [{**row, "metadata": {"sleep_ms": 1500}} for row in ROWS]
    data, out = write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "out"
    suite = tmp_path / "suite.json"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "250", "RAGSCORE_PLUGINS": "tests.plugins.slow"}
    env.pop("RAGSCORE_BROKER_URL", None)
    with FakeProvider(api_key=keys) as fake:
        judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
        metrics = [{"name": "answer_accuracy", "params": {"attempts": 1}}, "slow_exact"]
        suite.write_text(json.dumps({"metrics": metrics, "chunk_size": {"judge": 8, "cpu": 1}, "judge": judge}))
        first = interruptible(
            [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out", str(out)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        # every judge call sent: a Ctrl-C keeps the calls under way, so the judging is all done once it stopped
        assert until(lambda: fake.stats().get("requests", 0) >= 16 or first.poll() is not None, 120)
        first.send_signal(signal.SIGINT)
        _, stderr = first.communicate(timeout=120)
        assert first.returncode == 130, stderr
        status = " ".join(_cli("status", out, home=home).stdout.split())
        assert "│ judge │ 8 │ 0 │ 8 │ 100.0 │" in status, status  # scored, stopped, total: the judging is all done
        resumed = interruptible(
            [sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(out)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        stderr = interrupted_once_said(resumed, "item×metric outputs (")  # followed: its first progress line
    assert resumed.returncode == 130, stderr
    assert "judge calls under way" not in stderr, stderr
    assert ("stopping the workers (up to 15 s; Ctrl-C again to stop at once): what they are scoring is cut short; the "
            "resume scores it again") in stderr, stderr  # fmt: skip
