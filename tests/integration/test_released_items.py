"""An embedded run's items leave its store soon after its reports are in a folder that is kept: the laptop's Redis,
read back at every command's start, no longer keeps every item of every run for RAGSCORE_RUN_TTL_S (7 days)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator import Evaluation, evaluate, resume
from orchestrator.api import IncompleteRunWarning
from orchestrator.embedded_redis import EmbeddedRedis
from orchestrator.reports.files import OUTPUT_NAMES, ROWS_STAGED, report_digests
from orchestrator.runner import RELEASED_ITEMS_TTL_S, REPORT_DIGESTS
from ragscore_workers.answers import TARGET_ERROR
from ragscore_workers.errors import ConfigError, DatasetError, DatasetWarning
from ragscore_workers.providers.run_state import STOP_READ_EVERY_S
from ragscore_workers.schemas import RunSummary
from ragscore_workers.scoring import SKIPPED_MARK
from ragscore_workers.settings import DEFAULT_RUN_TTL_S

from ..fakes import FakeProvider, FakeRag
from ..fakes.fake_rag import questions
from ..support import ROOT, HookedProgress, make_rows, until, write_jsonl

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1]}}]}


@contextmanager
def _embedded_store(home: Path) -> Iterator[redis.Redis]:
    """The embedded Redis of ``home`` (started again from its data where the run stopped it), while it is held."""
    embedded = EmbeddedRedis(home)
    with embedded:
        yield embedded.client


def _ttls(client: redis.Redis, run_id: str) -> dict[str, int]:
    """The TTL of each kind of the run's keys: the lowest an item has, the highest; the highest of its shards' id
    lists; its meta's and summary's."""
    items = [client.ttl(key) for key in client.scan_iter(f"ragscore:run:{run_id}:item:*")]
    ids = max(client.ttl(key) for key in client.scan_iter(f"ragscore:run:{run_id}:ids:*"))
    meta, summary = (client.ttl(f"ragscore:run:{run_id}:{part}") for part in ("meta", "summary"))
    kinds = {"items": len(items), "item_min": min(items), "item_max": max(items), "ids_max": ids}
    return kinds | {"meta": meta, "summary": summary}


def _cli(home: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)  # fmt: skip


def test_a_finished_cli_runs_items_expire_soon_while_its_own_keys_keep_the_run_ttl(tmp_path: Path, home: Path) -> None:
    """Every item of a finished embedded run was kept 7 days though its reports were in its --out DIR: ~90 MB a
    50,000-row run, read back by every later command. Now its items leave an hour after, and its shards' id lists
    with them (they kept the run TTL, naming items that were gone); meta and summary stay."""
    data, suite, out = write_jsonl(tmp_path / "d.jsonl", make_rows(40)), tmp_path / "s.json", tmp_path / "out"
    suite.write_text(json.dumps(SUITE))
    done = _cli(home, "run", str(data), "--suite", str(suite), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    with _embedded_store(home) as client:
        ttls = _ttls(client, run_id)
        meta = client.hgetall(f"ragscore:run:{run_id}:meta")
    assert ttls["items"] == 40 and 0 < ttls["item_min"] <= ttls["item_max"] <= RELEASED_ITEMS_TTL_S, ttls
    assert 0 < ttls["ids_max"] <= RELEASED_ITEMS_TTL_S, ttls
    assert ttls["meta"] > RELEASED_ITEMS_TTL_S and ttls["summary"] > RELEASED_ITEMS_TTL_S, ttls
    assert ttls["meta"] <= DEFAULT_RUN_TTL_S, ttls
    assert meta["items_in"] == str(out.resolve())
    status = _cli(home, "status", run_id)
    assert status.returncode == 0 and "finished" in status.stdout + status.stderr, status.stderr


def _assert_items_kept(home: Path, run_id: str) -> None:
    """The store keeps run ``run_id``'s 20 items for the run's TTL: not released."""
    with _embedded_store(home) as client:
        ttls = _ttls(client, run_id)
        released = client.hget(f"ragscore:run:{run_id}:meta", "items_in")
    assert ttls["items"] == 20 and ttls["item_min"] > RELEASED_ITEMS_TTL_S, ttls
    assert released is None


def test_the_settle_after_the_summary_keeps_a_release_made_before_it(tmp_path: Path, home: Path) -> None:
    """The worker that saves the summary settles the run's keys after it (:meth:`RunStore.settle`): the run's
    process, which read the summary, may have written its reports and released its items first (that worker late on
    a loaded host), and the settle gave them RAGSCORE_RUN_TTL_S again: they stayed a week, and their release left the
    meta. That settle, here after the release, keeps it."""
    from ragscore_workers.store import RunStore

    run_id = evaluate(make_rows(20), SUITE, out=tmp_path / "out", quiet=True).summary.run_id
    with _embedded_store(home) as client:
        RunStore(client, DEFAULT_RUN_TTL_S).settle(run_id, released=True)  # the worker's, late
        ttls = _ttls(client, run_id)
        released = client.hget(f"ragscore:run:{run_id}:meta", "items_in")
    assert ttls["items"] == 20 and ttls["item_max"] <= RELEASED_ITEMS_TTL_S >= ttls["ids_max"], ttls
    assert ttls["meta"] > RELEASED_ITEMS_TTL_S and released == str((tmp_path / "out").resolve()), (ttls, released)


def test_an_evaluate_without_out_keeps_its_items_in_the_store(home: Path) -> None:
    """Its reports are in a temporary folder removed at exit: until then the store may be their only other copy."""
    result = evaluate(make_rows(20), SUITE, quiet=True)
    _assert_items_kept(home, result.summary.run_id)


def test_a_resume_in_an_evaluates_temporary_folder_keeps_its_items_in_the_store(home: Path) -> None:
    """``resume()`` of the folder an ``evaluate()`` without ``out=`` made (removed at exit) released the run's items
    as if the folder were kept: an hour later they were gone from both."""
    result = evaluate(make_rows(20), SUITE, quiet=True)
    again = resume(result.out_dir, quiet=True)
    assert again.summary.run_id == result.summary.run_id
    _assert_items_kept(home, result.summary.run_id)


def test_results_into_an_evaluates_temporary_folder_keep_its_items_in_the_store(home: Path) -> None:
    """``ragscore results RUN --out DIR`` (a notebook's ``!ragscore results``: another process) into the folder an
    ``evaluate()`` without ``out=`` made released the run's items as if the folder were kept: an hour after, they
    were gone from the store, and the folder with the notebook's process. The folder says it is temporary."""
    result = evaluate(make_rows(20), SUITE, quiet=True)
    run_id = result.summary.run_id
    done = _cli(home, "results", run_id, "--out", str(result.out_dir), "--quiet")
    assert done.returncode == 0, done.stderr
    _assert_items_kept(home, run_id)


def test_a_run_whose_items_expired_is_read_from_its_folder_and_says_so(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore report RUN_ID` of a run whose items had expired wrote a report of no scores and exited 0. It says
    where its reports are instead (exit 2)."""
    result = _expired_run(tmp_path / "out", home, monkeypatch)
    out, run_id = result.out_dir, result.summary.run_id
    refused = _cli(home, "report", run_id, "--out", str(tmp_path / "again"))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    assert f"its items left the store once its reports were written to {out.resolve()}" in said, said
    assert f"ragscore report {out.resolve()}" in said, said
    assert not (tmp_path / "again").exists()
    from_dir = _cli(home, "report", str(out), "--format", "json", "--out", str(tmp_path / "from-dir"))
    assert from_dir.returncode == 0, from_dir.stderr
    assert len(result.items) == 20


def _expired_run(
    out: Path, home: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, Any]] | None = None,
    suite: dict[str, Any] = SUITE,
) -> Evaluation:  # fmt: skip
    """A run of ``rows`` (default: 20 clean ones) into ``out`` whose items, released with a 1 s TTL (at call time),
    left the store."""
    monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", 1)
    result = evaluate(make_rows(20) if rows is None else rows, suite, out=out, quiet=True)
    with _embedded_store(home) as client:
        assert client.hget(f"ragscore:run:{result.summary.run_id}:meta", "items_in") == str(out.resolve())
        pattern = f"ragscore:run:{result.summary.run_id}:item:*"
        assert until(lambda: not list(client.scan_iter(pattern)), timeout=30)
    return result


def test_the_resume_of_a_clean_run_whose_items_left_says_where_its_reports_are(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An hour after a clean finish, `run --resume DIR` (and `resume(DIR)`) exited 2 naming DIR, where before they
    wrote its reports again: nothing is left to score, and DIR holds them whole. Both succeed and say so (not that
    the reports were written now), and its gates are checked as at its finish."""
    result = _expired_run(tmp_path / "out", home, monkeypatch)
    out, run_id = result.out_dir, result.summary.run_id
    report = (out / "report.html").read_bytes()
    done = _cli(home, "run", "--resume", str(out))
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, done.stderr
    assert f"run {run_id} finished with nothing left to score: its reports are in {out}" in said, said
    assert f"Reports (written when it finished) in {out}/" in said and "Reports written to" not in said, said
    mean = result.summary.metrics["exact_match"].mean
    assert mean is not None and mean < 1
    gated = _cli(home, "run", "--resume", str(out), "--fail-under", "exact_match=1")
    assert gated.returncode == 3, gated.stdout + gated.stderr  # the gate failed, as it would have at its finish
    assert "exact_match" in gated.stdout + gated.stderr
    assert (out / "report.html").read_bytes() != report  # the gate check's verdict is written into its DIR
    assert json.loads((out / "gates.json").read_text())["verdict"] == "1 of 1 gate failed"
    report = (out / "report.html").read_bytes()
    again = resume(out, quiet=True)
    assert again.summary == result.summary and len(again.items) == 20
    assert (out / "report.html").read_bytes() == report  # nothing scored: the reports are left as they are


def test_the_quiet_resume_of_a_clean_run_whose_items_left_says_where_its_reports_are_and_names_unused_options(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume that ends on the reports a released run's DIR holds said nothing at all under --quiet (exit 0), and
    took --max-cost / --max-tokens silently, though nothing is sent: it says where the reports are in one line, and
    names once the options that have no effect, as resume() warns of its own."""
    out = _expired_run(tmp_path / "out", home, monkeypatch).out_dir
    done = _cli(home, "run", "--resume", str(out), "--quiet", "--max-cost", "1", "--max-tokens", "10")
    lines = [" ".join(line.split()) for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 0, done.stderr
    said = " ".join(lines)
    assert said.count("--max-cost and --max-tokens have no effect: nothing is left to score") == 1, lines
    assert lines[-1] == f"Reports (written when it finished) in {out}/", lines
    quiet = _cli(home, "run", "--resume", str(out), "--quiet")
    assert quiet.returncode == 0 and quiet.stdout + quiet.stderr == f"Reports (written when it finished) in {out}/\n"
    with pytest.warns(DatasetWarning, match="max_cost= has no effect: nothing is left to score"):
        resume(out, max_cost=1.0, quiet=True)


def test_the_resume_of_a_clean_run_whose_items_left_and_its_folder_does_not_hold_its_reports_says_so(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither the store nor DIR can give its reports: the resume is refused (exit 2) as before, saying what is
    wrong in DIR: a summary.json of another run, or not the one the store has (its gates would be checked on it),
    or a report missing."""
    result = _expired_run(tmp_path / "out", home, monkeypatch)
    out, run_id = result.out_dir, result.summary.run_id
    written = json.loads((out / "summary.json").read_text())
    another = {**written, "run_id": "20260101-000000-0a0b0c"}
    edited = {**written, "metrics": {**written["metrics"], "exact_match": {**written["metrics"]["exact_match"],
                                                                           "mean": 1.0}}}  # fmt: skip
    for summary, what in ((edited, f"its summary.json is not the store's summary of run {run_id}"),
                          (another, "its summary.json is run 20260101-000000-0a0b0c's"),
                          (written, "items.jsonl is missing")):  # fmt: skip
        (out / "summary.json").write_text(json.dumps(summary))
        if summary is written:
            (out / "items.jsonl").unlink()
        refused = _cli(home, "run", "--resume", str(out))
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2, refused.stderr
        assert f"its items left the store once its reports were written to {out.resolve()}" in said, said
        assert f"{out} does not hold them whole: {what}" in said, said


def test_the_resume_of_a_clean_run_whose_items_left_refuses_another_runs_reports_in_its_folder(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume that ends on a released run's DIR checked its other reports were there, not whose they were: another
    run that wrote into DIR and stopped before its summary.json (written after items.jsonl and items.csv) left its
    items beside this run's summary, and the resume said DIR held this run's reports. Now items.jsonl is checked
    by the sha256 recorded at the release, report.md and report.html by the run they name."""
    result = _expired_run(tmp_path / "out", home, monkeypatch)
    out, run_id = result.out_dir, result.summary.run_id
    other = evaluate(make_rows(20, seed=1), SUITE, out=tmp_path / "other", quiet=True).out_dir
    for name in ("items.jsonl", "report.md"):
        kept = (out / name).read_bytes()
        (out / name).write_bytes((other / name).read_bytes())
        with pytest.raises(ConfigError) as refused:
            resume(out, quiet=True)
        said = " ".join(str(refused.value).split())
        assert f"{out} does not hold them whole: its {name} is not the one run {run_id} wrote there" in said, said
        (out / name).write_bytes(kept)
    assert resume(out, quiet=True).summary == result.summary


def test_the_resume_of_a_released_run_whose_reports_were_written_again_still_ends_on_them(
    tmp_path: Path, home: Path
) -> None:
    """Reports written again by the user's own commands stay the run's: ``ragscore report DIR`` in each format and
    ``ragscore results RUN --out`` into another folder (which releases the run's items there, its digests recorded
    anew) within the hour leave the resume that ends on DIR, once the items left, ending on it, not refused."""
    result = evaluate(make_rows(20), SUITE, out=tmp_path / "out", quiet=True)
    out, run_id = result.out_dir, result.summary.run_id
    for fmt in ("html", "md", "csv", "json"):
        written = _cli(home, "report", str(out), "--format", fmt)
        assert written.returncode == 0, written.stderr
    again = _cli(home, "results", run_id, "--out", str(tmp_path / "again"), "--quiet")
    assert again.returncode == 0, again.stderr
    with _embedded_store(home) as client:  # the hour since the release is over: the items are gone from the store
        client.hset(f"ragscore:run:{run_id}:meta", "items_until", 0)
    assert resume(out, quiet=True).summary == result.summary


def test_the_resume_of_a_cancelled_run_whose_items_left_never_says_it_finished(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a clean finished run may end its resume on the reports in DIR: the rule is checked again there, not taken
    from the release. Its summary (in the store and DIR alike) is made a cancelled run's: the resume is refused as
    before (its items are not there to score it, nor taken back: a clean run's release recorded no digest of them)."""
    result = _expired_run(tmp_path / "out", home, monkeypatch)
    out, run_id = result.out_dir, result.summary.run_id
    key = f"ragscore:run:{run_id}:summary"
    with _embedded_store(home) as client:
        summary = json.loads(client.get(key))
        summary["state"] = "cancelled"
        client.set(key, json.dumps(summary), keepttl=True)
    (out / "summary.json").write_text(json.dumps(summary))
    refused = _cli(home, "run", "--resume", str(out))
    said = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 2, said
    assert f"its items left the store once its reports were written to {out.resolve()}" in said, said
    assert "nothing left to score" not in said, said


def _cancel(home: Path, run_id: str) -> None:
    """``ragscore cancel RUN_ID`` from another process: the run's own process goes on and writes the reports of what
    it scored, as a cancel from another shell makes it do."""
    cancelled = _cli(home, "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr


def _cancelled_once(
    home: Path,
    hold: threading.Event,
    ready: Callable[[dict[str, int]], bool],
    rows: list[dict[str, Any]],
    suite: dict[str, Any],
    out: Path,
    **options: Any,
) -> RunSummary:
    """The summary of ``evaluate()`` of ``rows`` into ``out``, cancelled from another process at the first progress
    update where ``ready(counters)`` holds, the fake's calls held (``hold``) until then, and a little over
    STOP_READ_EVERY_S more: a task reads whether its run was cancelled at most that often, so a call let go sooner
    could be followed by one more question each (its last read was not yet the cancel's: the clean-clone CI of
    374c62e saw 6 asked, not 3)."""

    def cancel_once(run_id: str, counters: dict[str, int]) -> None:
        if ready(counters) and not hold.is_set():
            _cancel(home, run_id)
            # every task's read of its run's state from before the cancel is stale now: a read sent before the cancel
            # and answered after it dates itself from its answer, so a margin past the bound
            time.sleep(STOP_READ_EVERY_S + 0.5)
            hold.set()

    view = HookedProgress()
    view.on_start = lambda run_id: setattr(view, "on_update", partial(cancel_once, run_id))
    try:
        with pytest.warns(IncompleteRunWarning, match="was cancelled"):
            return evaluate(rows, suite, out=out, quiet=True, progress=view, **options).summary
    finally:
        hold.set()


def test_the_resume_of_a_cancelled_run_scored_in_part_takes_back_what_was_scored_and_scores_only_the_rest(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run cancelled once every exact_match output was scored and its judge's first calls were under way (2 threads,
    held by the fake provider): its reports hold those outputs, the judge's that its calls wrote (stopped by the
    cancel, or rated) and, stopped and marked, those of the chunks the cancel skipped. Its items leave the store; its
    resume takes back the outputs the store held (exact_match's as they were: not scored again) and leaves out the
    skipped ones, then judges what is left: every output counted done once (``done`` equal to the total). Seen
    failing without each: no items_in (a cancelled run kept every item 7 days); ``done`` short of the total (the
    skipped outputs written back stopped: their rewrites counted none). A cancel as the wait starts, its test before,
    raced the run's 20 cheap rows: some runs had scored them all."""
    monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", 1)
    key = "gsk-TEST-SECRET-cancelled-in-part"
    monkeypatch.setenv("GROQ_API_KEY", key)
    monkeypatch.delenv("RAGSCORE_JUDGE_BASE_URL", raising=False)
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"}
            for i in range(N_CANCELLED)]  # fmt: skip
    out = tmp_path / "out"
    with FakeProvider(api_key=key) as fake:
        judge = {"model": f"fake-{tmp_path.name[-10:]}", "base_url": fake.url, "rpm": None, "tpm": None}
        spec = {"name": "answer_accuracy", "params": {"attempts": 1, "concurrency": 1}}
        suite = {"metrics": ["exact_match", spec], "chunk_size": {"judge": 1}, "judge": judge}
        fake.hold = threading.Event()  # the judge's calls wait until the run is cancelled

        def scored(counters: dict[str, int]) -> bool:
            cpu_done = counters.get("total:cpu") and counters.get("done:cpu") == counters["total:cpu"]
            return bool(cpu_done and fake.stats().get("requests"))

        cancelled = _cancelled_once(home, fake.hold, scored, rows, suite, out, judge_threads=2)
        run_id, judged = cancelled.run_id, cancelled.metrics["answer_accuracy"]
        assert cancelled.state == "cancelled" and cancelled.metrics["exact_match"].n == N_CANCELLED, cancelled
        assert judged.stopped > 0 and judged.n < N_CANCELLED, cancelled
        first = {json.loads(line)["id"]: json.loads(line)["metrics"] for line in (out / "items.jsonl").open()}
        skipped = [m for m in first.values() if m["answer_accuracy"]["details"].get(SKIPPED_MARK)]
        assert skipped, first  # a chunk the cancel skipped: stopped and marked in DIR, never in the store
        with _embedded_store(home) as client:
            assert client.hget(f"ragscore:run:{run_id}:meta", "items_in") == str(out.resolve())
            assert until(lambda: not list(client.scan_iter(f"ragscore:run:{run_id}:item:*")), timeout=30)
        again = resume(out, quiet=True).summary
    assert again.run_id == run_id and again.state == "finished", again
    assert again.metrics["answer_accuracy"].n == N_CANCELLED == again.metrics["exact_match"].n, again
    items = {json.loads(line)["id"]: json.loads(line)["metrics"] for line in (out / "items.jsonl").open()}
    assert {i: m["exact_match"] for i, m in items.items()} == {i: m["exact_match"] for i, m in first.items()}
    with _embedded_store(home) as client:
        progress = {k: int(v) for k, v in client.hgetall(f"ragscore:run:{run_id}:progress").items()}
    total = sum(v for k, v in progress.items() if k.startswith("total:"))
    assert progress["done"] == total == 2 * N_CANCELLED, progress


#: Rows of the run cancelled part-way, each judged in a chunk of its own.
N_CANCELLED = 24


def _released_target_run(out: Path, home: Path, monkeypatch: pytest.MonkeyPatch, rag: FakeRag) -> str:
    """A run of ``N_ASKED`` questions into ``out``, in shards of 4 rows, asking ``rag``'s systems exact and dead (which
    fails, its breaker open after 2 calls), whose items and answers, released with a 1 s TTL, left the store: its id."""
    from orchestrator.runner import run
    from orchestrator.suite import load_suite

    monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", 1)
    response = {"contexts": "contexts[*].text", "citations": "citations"}
    targets = [{"system": system, "url": rag.url(system), "attempts": 1, "breaker_failures": 2, "concurrency": 1,
                "response": response} for system in ("exact", "dead")]  # fmt: skip
    suite = load_suite({"metrics": ["verbatim"], "targets": targets})
    run_id = run(write_jsonl(out.with_name("q.jsonl"), questions(N_ASKED)), suite, out, shard_rows=4).run_id
    with _embedded_store(home) as client:
        assert client.hget(f"ragscore:run:{run_id}:meta", "items_in") == str(out.resolve())
        left = ("item:*", "answers:*")
        assert until(lambda: not [k for p in left for k in client.scan_iter(f"ragscore:run:{run_id}:{p}")], 30)
    return run_id


#: Questions of :func:`_released_target_run`: 2 shards (4 rows, 2 rows) of 2 items a row.
N_ASKED = 6


def _edit_first_answer(out: Path, **fields: Any) -> None:
    """Give the first line of ``out``'s answers.jsonl (system exact's answer of q0) ``fields``."""
    lines = (out / "answers.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert first["system"] == "exact" and TARGET_ERROR not in first, first
    (out / "answers.jsonl").write_text("\n".join([json.dumps(first | fields), *lines[1:]]) + "\n")


def test_the_resume_of_a_target_run_whose_items_left_takes_them_and_its_answers_back_from_its_folder(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target run with something left to score (a system that failed until its breaker opened) kept its items and
    answers 7 days, for its resume: they leave as an errored run's do, and its resume takes the items back from
    DIR/items.jsonl and the answers from DIR/answers.jsonl (a failed one as failed), in shards of every row for every
    target: it asks again only the questions that got no answer, and an answer marked in DIR (its digest recorded as
    the release's) comes back as it was. Seen failing without: no items_in; without the answers taken back, every
    question was answered again (from the targets' reply cache), the marked answer lost; in shards of ``shard_rows``
    items, the digest of their keys refused them."""
    out = tmp_path / "out"
    with FakeRag() as rag:  # its system "dead" fails
        run_id = _released_target_run(out, home, monkeypatch, rag)
        _edit_first_answer(out, answer="kept in DIR")
        _recorded_as_released(home, run_id, out)
        asked = dict(rag.calls)
        rag.failing = set()
        again = resume(out, quiet=True).summary
        assert rag.calls == {"exact": N_ASKED, "dead": asked["dead"] + N_ASKED}, rag.calls
    dead = again.by_system["dead"]["verbatim"]
    assert dead.errors == 0 and dead.n == N_ASKED, again
    answers = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == 2 * N_ASKED and answers[0]["answer"] == "kept in DIR", answers[0]


@pytest.mark.parametrize("items", ["left the store", "in the store"])
def test_the_resume_of_a_cancelled_target_run_asks_each_question_once_and_loses_no_row(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, items: str
) -> None:
    """A target run cancelled while the first question of each of its 3 chunks was asked (held by the fake system):
    those are answered, their scoring skipped by the cancel; the rest of each chunk stopped unasked. Its reports hold
    them, and its items leave the store. Its resume takes them back and asks the system only what got no answer (its
    reply cache off: every question asked is a call), then scores every row once: each question called once in all,
    the answers made kept, one item a row, every output counted done once. So does a resume while the store still
    holds them (within the hour)."""
    if items == "left the store":
        monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", 1)
    rows, out = questions(N_CANCELLED_ASKED), tmp_path / "out"
    mine = {"q0": {"target_error": "x"}, "q1": {"lang": "en", "target_error": "y"}}  # user data named as a mark was
    for row in rows[:2]:
        row["metadata"] = mine[row["id"]]
    with FakeRag() as rag:
        response = {"contexts": "contexts[*].text", "citations": "citations"}
        target = {"system": "exact", "url": rag.url("exact"), "concurrency": 1, "cache": False, "response": response}
        suite = {"metrics": ["verbatim"], "targets": [target], "chunk_size": {"target": 4}}
        rag.hold = threading.Event()  # the questions asked wait until the run is cancelled
        cancelled = _cancelled_once(home, rag.hold, lambda counters: rag.calls["exact"] == 3, rows, suite, out)
        run_id, asked = cancelled.run_id, rag.calls["exact"]
        assert cancelled.state == "cancelled" and asked == 3 and cancelled.metrics["verbatim"].n == 0, cancelled
        answered = [json.loads(line) for line in (out / "answers.jsonl").open()]
        made = {row["id"]: row["answer"] for row in answered if "answer" in row}
        assert sorted(made) == ["q0", "q4", "q8"], answered
        with _embedded_store(home) as client:
            assert client.hget(f"ragscore:run:{run_id}:meta", "items_in") == str(out.resolve())
            pattern = f"ragscore:run:{run_id}:item:*"
            if items == "left the store":
                assert until(lambda: not list(client.scan_iter(pattern)), timeout=30)
            else:
                assert list(client.scan_iter(pattern))
        again = resume(out, quiet=True).summary
        assert rag.calls["exact"] == N_CANCELLED_ASKED, (rag.calls, asked)  # none asked twice, none left out
    assert again.run_id == run_id and again.state == "finished", again
    verbatim = again.metrics["verbatim"]
    assert verbatim.n == N_CANCELLED_ASKED and verbatim.errors == 0 == verbatim.stopped, again
    items = [json.loads(line) for line in (out / "items.jsonl").open()]
    assert sorted(item["id"] for item in items) == sorted(row["id"] for row in rows), items
    after = {row["id"]: row for row in map(json.loads, (out / "answers.jsonl").open())}
    assert len(after) == N_CANCELLED_ASKED and all(after[i]["answer"] == answer for i, answer in made.items()), after
    assert {i: after[i]["metadata"] for i in mine} == mine, after
    with _embedded_store(home) as client:
        progress = {k: int(v) for k, v in client.hgetall(f"ragscore:run:{run_id}:progress").items()}
    total = sum(v for k, v in progress.items() if k.startswith("total:"))
    assert progress["done"] == total, progress


#: Questions of the target run cancelled part-way: chunks of 4, 4 and 2.
N_CANCELLED_ASKED = 10


@pytest.mark.parametrize("edit", ["unrecorded", "other id"])
def test_the_resume_of_a_target_run_whose_items_left_refuses_an_answers_file_it_cannot_take_them_from(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    """An answers.jsonl edited since the release (its digest not the one recorded), or whose answers are not the run's
    (an answer of another id, its digest recorded as the release's), cannot give the resume the run's answers: refused
    (exit 2) naming it, the store left as it was (neither items nor answers written back)."""
    out = tmp_path / "out"
    with FakeRag() as rag:
        run_id = _released_target_run(out, home, monkeypatch, rag)
    if edit == "unrecorded":
        _edit_first_answer(out, answer="edited")
    else:
        _edit_first_answer(out, id="q99")
        _recorded_as_released(home, run_id, out)
    refused = _cli(home, "run", "--resume", str(out))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    if edit == "unrecorded":
        assert f"its answers.jsonl is not the one run {run_id} wrote there" in said, said
    else:
        assert f"{out / 'answers.jsonl'} holds other answers than run {run_id}'s" in said, said
    _assert_still_released(home, run_id, out)
    with _embedded_store(home) as client:
        assert not list(client.scan_iter(f"ragscore:run:{run_id}:answers:*"))


@pytest.mark.parametrize("dataset", ["same bytes", "rewritten"])
def test_the_resume_of_a_run_with_an_error_whose_items_left_takes_them_back_from_its_folder(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, dataset: str
) -> None:
    """A run with an error kept every item 7 days for its resume to score the error again: hundreds of MB of a
    million-item corpus in the laptop's Redis for one error. Its items leave as a clean run's do, and its resume takes
    them back from DIR/items.jsonl, scoring again the errored output alone: an item's line marked in DIR (its digest
    recorded as the release's, :func:`_recorded_as_released`) comes back as it was. Seen failing without: the run's
    items were not released (no items_in). A dataset rewritten with the same rows (other bytes) is checked row by row
    against the file's ids, its shards' id lists having left too."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    if dataset == "rewritten":
        with _embedded_store(home) as client:
            path = Path(client.hget(f"ragscore:run:{run_id}:meta", "dataset"))
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(row, indent=None, separators=(" ,", " : ")) + "\n" for row in rows))
    lines = (out / "items.jsonl").read_text().splitlines()
    marked = json.loads(lines[5])
    marked["metrics"]["exact_match"]["details"]["kept"] = "from DIR"
    (out / "items.jsonl").write_text("\n".join([*lines[:5], json.dumps(marked), *lines[6:]]) + "\n")
    _recorded_as_released(home, run_id, out)
    again = resume(out, quiet=True)
    assert again.summary.run_id == run_id and again.summary.metrics["typed_answer"].errors == 1
    assert again.summary.metrics["exact_match"].n == 20 and len(again.items) == 20
    after = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert after[5]["metrics"]["exact_match"]["details"]["kept"] == "from DIR", after[5]
    assert after[0]["metrics"]["typed_answer"]["error"], after[0]  # scored again, an error again


def test_the_resume_of_a_run_id_whose_items_left_resumes_in_their_folder_and_says_so(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore resume RUN_ID` without --out took its items back from ./ragscore-out, not from the folder the run's
    reports (and so its items) were released to: refused (exit 2), that folder not holding them. It resumes in the
    run's own folder now, and says which; with --out, into that folder as before."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _cli(home, "resume", run_id, cwd=elsewhere)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, said
    assert (
        f"resuming run {run_id} in {out.resolve()}/, where its reports are (--out DIR to write them elsewhere)" in said
    )
    assert f"Reports written to {out.resolve()}/" in said, said
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run_id"] == run_id and summary["metrics"]["exact_match"]["n"] == 20, summary
    other = _cli(home, "resume", run_id, "--out", str(tmp_path / "other"), cwd=elsewhere)
    assert other.returncode == 0, other.stderr
    assert "where its reports are" not in other.stdout + other.stderr
    assert json.loads((tmp_path / "other" / "summary.json").read_text())["run_id"] == run_id


def test_the_resume_of_a_run_id_whose_items_left_with_a_folder_since_moved_says_to_name_it(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore resume RUN_ID` of a released run whose folder was moved away resumed "in" that folder, then was
    refused as it did not hold the reports: it says the folder is gone and how to name where they are now (exit 2,
    nothing written), and resumes from there with --out."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    moved = out.rename(tmp_path / "moved")
    refused = _cli(home, "resume", run_id, cwd=tmp_path)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, said
    assert (
        f"Run {run_id}: its items left the store once its reports were written to {out.resolve()}, which is gone: "
        f"`ragscore resume {run_id} --out DIR` takes them back from the folder DIR its reports are in now" in said
    ), said
    assert "resuming run" not in said and not out.exists() and not (tmp_path / "ragscore-out").exists(), said
    _assert_still_released(home, run_id, out)
    out.mkdir()  # the run's dataset (evaluate()'s copy of its rows) put back; its reports stay where they went
    shutil.copy(moved / "evaluate-rows.jsonl", out)
    done = _cli(home, "resume", run_id, "--out", str(moved), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads((moved / "summary.json").read_text())["metrics"]["exact_match"]["n"] == 20


def test_the_resume_of_a_run_id_whose_folder_is_gone_before_its_items_left_writes_that_folder_again(
    tmp_path: Path, home: Path
) -> None:
    """A released run whose folder was removed within the hour its items stay: `ragscore resume RUN_ID` takes them
    from the store, as a run's not released. It wrote its reports into ./ragscore-out (this test asserted so), though
    the user asked for them in the run's --out DIR, as a run never released writes its folder again: it now does too,
    saying so; where that folder cannot be made again (a file in its place), ragscore-out, naming both."""
    out = tmp_path / "out"
    assert _cli(home, *_run_command(tmp_path, 20, out)).returncode == 0
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    shutil.rmtree(out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _cli(home, "resume", run_id, cwd=elsewhere)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, said
    assert (f"resuming run {run_id} in {out.resolve()}/, the folder it writes its reports to, which is gone: written "
            "there again") in said, said  # fmt: skip
    assert json.loads((out / "summary.json").read_text())["run_id"] == run_id
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())
    shutil.rmtree(out)
    out.write_text("not a folder")  # nor can the folder be made again: ragscore-out, naming both
    done = _cli(home, "resume", run_id, cwd=elsewhere)
    said = " ".join(done.stderr.split())
    assert done.returncode == 0, said
    assert (f"resuming run {run_id} in ragscore-out/, as {out.resolve()}/, the folder it writes its reports to, is "
            f"gone and cannot be made again ({out.resolve()} is not a folder)") in said, said  # fmt: skip
    assert json.loads((elsewhere / "ragscore-out" / "summary.json").read_text())["run_id"] == run_id


def test_the_resume_of_an_evaluate_without_outs_run_id_writes_into_ragscore_out_not_its_removed_folder(
    tmp_path: Path, home: Path
) -> None:
    """evaluate() without out= writes its reports into a temporary folder, removed as its process exits, which the
    store names as where they were last written: `ragscore resume RUN_ID` writes into ragscore-out, not that folder."""
    result = evaluate(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), SUITE, quiet=True)  # not a copy of rows
    shutil.rmtree(result.out_dir)  # as its process's exit does
    done = _cli(home, "resume", result.summary.run_id, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"resuming run {result.summary.run_id} in ragscore-out/" in " ".join(done.stderr.split()), done.stderr
    assert not result.out_dir.exists()
    assert json.loads((tmp_path / "ragscore-out" / "summary.json").read_text())["run_id"] == result.summary.run_id


@pytest.mark.parametrize("edit", ["cut", "score", "swapped", "unrecorded"])
def test_the_resume_of_a_run_whose_items_left_refuses_an_items_file_it_cannot_take_them_from(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, edit: str
) -> None:
    """An items.jsonl cut short, whose last line's score is no number, or whose items are not the run's (two lines
    swapped: the same count, every line valid) cannot give a resume the run's items: refused (exit 2) naming it and
    what is wrong, the store left as it was (the run still released, none of its items written back, though the
    lines before the bad one are good). The swapped file was written back, then refused as a changed dataset. Each
    edit's digest is recorded as the release's (the restore's own checks, behind the digest's); an edit whose digest
    is not ("unrecorded": the swapped file) is refused by the digest the release recorded."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    lines = (out / "items.jsonl").read_text().splitlines(keepends=True)
    last = json.loads(lines[-1])
    last["metrics"]["exact_match"]["score"] = "high"
    swapped = [lines[1], lines[0], *lines[2:]]
    kept = {
        "cut": lines[:-1],
        "score": [*lines[:-1], json.dumps(last) + "\n"],
        "swapped": swapped,
        "unrecorded": swapped,
    }
    (out / "items.jsonl").write_text("".join(kept[edit]))
    if edit != "unrecorded":
        _recorded_as_released(home, run_id, out)
    refused = _cli(home, "run", "--resume", str(out))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    wrong = {
        "cut": f" holds 19 items, run {run_id} has 20",
        "score": f": an item is not as run {run_id} wrote it",
        "swapped": f" holds other items than run {run_id}'s (other ids, or in another order)",
    }
    if edit == "unrecorded":
        assert f"its items.jsonl is not the one run {run_id} wrote there" in said, said
    else:
        assert f"{out / 'items.jsonl'}{wrong[edit]}" in said, said
    _assert_still_released(home, run_id, out)


def test_the_resume_of_a_run_whose_items_left_and_dataset_changed_writes_none_of_them_back(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume of a released run whose dataset changed since is refused by the dataset's check, before its items
    are taken back from DIR/items.jsonl: they were written back first, kept 7 days by a run no resume can finish."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    with _embedded_store(home) as client:
        dataset = Path(client.hget(f"ragscore:run:{run_id}:meta", "dataset"))
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    rows[3]["id"] = "renamed"
    write_jsonl(dataset, rows)
    refused = _cli(home, "run", "--resume", str(out))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    assert (
        f"{dataset} changed since it was submitted (shard 0: other ids or order, line 4 holds another row in place of "
        "the run's row 'q3')" in said
    ), said
    _assert_still_released(home, run_id, out)


def _recorded_as_released(home: Path, run_id: str, out: Path) -> None:
    """Record the digests of ``out``'s reports as run ``run_id``'s release did (its items.jsonl edited since by a
    test: the restore's own checks are reached, not the digest's refusal)."""
    with _embedded_store(home) as client:
        client.hset(f"ragscore:run:{run_id}:meta", REPORT_DIGESTS, json.dumps(report_digests(out)))


def _assert_still_released(home: Path, run_id: str, out: Path) -> None:
    """Run ``run_id``'s items are not in the store, and its meta still says they are in ``out``."""
    with _embedded_store(home) as client:
        assert not list(client.scan_iter(f"ragscore:run:{run_id}:item:*"))
        assert not list(client.scan_iter(f"ragscore:run:{run_id}:ids:*"))
        assert client.hget(f"ragscore:run:{run_id}:meta", "items_in") == str(out.resolve())


def _expired_run_with_an_error(out: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """:func:`_expired_run` of 20 rows, one with an error (a typed answer's malformed ``expected``): ``out`` and its
    run id."""
    rows = [row | {"question_type": "Yes/No", "expected": "yes"} for row in make_rows(20)]
    rows[0]["expected"] = "Paris"  # not one yes or one no: typed_answer's error for that item
    result = _expired_run(out, home, monkeypatch, rows, {"metrics": ["typed_answer", "exact_match"]})
    assert result.summary.metrics["typed_answer"].errors == 1
    return out, result.summary.run_id


def test_results_into_a_kept_folder_releases_a_clean_runs_items(tmp_path: Path, home: Path) -> None:
    """`ragscore results RUN_ID --out DIR` wrote a finished run's whole reports into DIR, yet its items stayed in the
    embedded store 7 days: they leave it an hour later, as a run's into its own --out DIR do."""
    run_id = evaluate(make_rows(20), SUITE, quiet=True).summary.run_id  # its temporary folder: items kept
    out = tmp_path / "copy"
    written = _cli(home, "results", run_id, "--out", str(out), "--quiet")
    assert written.returncode == 0, written.stderr
    with _embedded_store(home) as client:
        ttls = _ttls(client, run_id)
        meta = client.hgetall(f"ragscore:run:{run_id}:meta")
    assert ttls["items"] == 20 and 0 < ttls["item_min"] <= ttls["item_max"] <= RELEASED_ITEMS_TTL_S, ttls
    assert ttls["meta"] > RELEASED_ITEMS_TTL_S, ttls
    assert meta["items_in"] == str(out.resolve())


def _reports(out: Path) -> dict[str, bytes]:
    """The bytes of each file of a run's in ``out`` (:data:`OUTPUT_NAMES`; not evaluate()'s copy of its rows)."""
    return {name: (out / name).read_bytes() for name in OUTPUT_NAMES if (out / name).is_file()}


def _run_command(tmp_path: Path, rows: int, out: Path) -> list[str]:
    """`ragscore run`'s arguments for ``rows`` rows (make_rows) and SUITE, both written into ``tmp_path``, into
    ``out``, quietly."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(rows))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    return ["run", str(data), "--suite", str(suite), "--out", str(out), "--quiet"]


def test_a_second_run_into_a_dir_moves_the_first_runs_reports_to_previous_where_they_are_read(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A second run into the same --out DIR replaced the first's reports there, its items leaving the store within the
    hour: lost. They are moved into DIR/previous/RUN_ID/ first, as written (run.json with them), said in one line, and
    read there as in any report folder: `ragscore results`, `compare` and `--fail-on-regression`."""
    out = tmp_path / "out"
    first = evaluate(make_rows(20), SUITE, out=out, quiet=True).summary.run_id
    written = _reports(out) | {"evaluate-rows.jsonl": (out / "evaluate-rows.jsonl").read_bytes()}
    with caplog.at_level(logging.WARNING, logger="orchestrator.runner"):
        second = evaluate(make_rows(10), SUITE, out=out, quiet=True).summary.run_id
    previous = out / "previous" / first
    assert {"items.jsonl", "summary.json", "report.html", "run.json"} <= set(written)
    moved = {path.name: path.read_bytes() for path in previous.iterdir()}
    recorded = json.loads(written.pop("run.json")) | {"moved_from": [str(out.resolve())]}
    assert json.loads(moved.pop("run.json")) == recorded
    assert moved == written
    said = [r.getMessage() for r in caplog.records if "previous" in r.getMessage()]
    assert said == [f"{out} held the reports of run {first}: moved to {previous}/ (this run writes its own into {out})"]
    assert json.loads((out / "run.json").read_text())["run_id"] == second
    assert json.loads((out / "summary.json").read_text())["run_id"] == second
    with _embedded_store(home) as client:  # its refusal, once its items left the store, names where they are
        assert client.hget(f"ragscore:run:{first}:meta", "items_in") == str(previous.resolve())
    again = _cli(home, "results", str(previous), "--out", str(tmp_path / "again"), "--quiet")
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "again" / "items.jsonl").read_bytes() == written["items.jsonl"]
    compared = _cli(home, "compare", str(previous), str(out), "--out", str(tmp_path / "cmp"))
    assert compared.returncode == 0, compared.stderr
    assert (tmp_path / "cmp" / "compare.md").is_file()
    gated = _cli(home, *_run_command(tmp_path, 20, tmp_path / "o3"), "--fail-on-regression", str(previous))
    assert gated.returncode == 0, gated.stderr  # the same rows: no mean below the first run's


def test_a_run_gated_on_its_own_dirs_earlier_run_records_that_runs_new_folder_for_its_resume(
    tmp_path: Path, home: Path
) -> None:
    """`run --out DIR --fail-on-regression DIR` reads the earlier run's summary before it moves: DIR/run.json keeps
    the gates for the resume, which read DIR/summary.json there, the new run's (or none yet: refused). It names
    DIR/previous/RUN_ID, where that summary went, and the resume holds the run to it."""
    out = tmp_path / "out"
    command = _run_command(tmp_path, 20, out)
    assert _cli(home, *command).returncode == 0
    first = json.loads((out / "run.json").read_text())["run_id"]
    gated = _cli(home, *command, "--fail-on-regression", str(out))
    assert gated.returncode == 0, gated.stderr  # the same rows: no mean below the first run's
    gates = json.loads((out / "run.json").read_text())["job"]["gates"]
    assert gates["fail_on_regression"] == str((out / "previous" / first).resolve()), gates
    resumed = _cli(home, "run", "--resume", str(out))
    assert resumed.returncode == 0, resumed.stderr
    earlier = _cli(home, "run", "--resume", str(out / "previous" / first))  # a report folder like any other
    assert earlier.returncode == 0, earlier.stderr
    assert json.loads((out / "previous" / first / "summary.json").read_text())["run_id"] == first


def test_an_earlier_evaluate_resumes_from_previous_on_the_copy_of_its_rows_moved_with_its_reports(
    tmp_path: Path, home: Path
) -> None:
    """evaluate()'s copy of the rows given (evaluate-rows.jsonl) was written into DIR before the run was checked: over
    the earlier run's copy (a refused call's too), and left in DIR as that run's reports moved to previous/RUN_ID, so
    its resume from there was refused (its dataset changed). The new copy is staged until the run goes ahead, the
    earlier one moves with its reports, and both runs resume on their own rows."""
    out = tmp_path / "out"
    rows = make_rows(6)
    first = evaluate(rows, SUITE, out=out, quiet=True).summary
    copy = (out / "evaluate-rows.jsonl").read_bytes()
    with pytest.raises(DatasetError):  # a repeated id: refused, DIR as it was
        evaluate([*rows, rows[0]], SUITE, out=out, quiet=True)
    assert (out / "evaluate-rows.jsonl").read_bytes() == copy
    second = evaluate(make_rows(4, seed=1), SUITE, out=out, quiet=True).summary
    previous = out / "previous" / first.run_id
    assert (previous / "evaluate-rows.jsonl").read_bytes() == copy
    assert sorted(path.name for path in out.iterdir() if path.name.startswith(".evaluate")) == []
    earlier = resume(previous, quiet=True).summary
    assert earlier.run_id == first.run_id and earlier.metrics == first.metrics, earlier
    assert resume(out, quiet=True).summary.metrics == second.metrics


def test_a_copy_of_rows_an_evaluate_left_staged_is_never_read_and_goes_with_the_next_run_into_its_dir(
    tmp_path: Path, home: Path
) -> None:
    """An evaluate() killed between the staged copy of its rows (.evaluate-rows.staged.jsonl) and its rename, its
    run not yet gone ahead, left that copy in DIR (DIR's claim went with the process). No run reads it as rows, and
    the next run into DIR that goes ahead removes it: a `ragscore run` with its own dataset as an evaluate()."""
    out, suite = tmp_path / "out", tmp_path / "s.json"
    suite.write_text(json.dumps(SUITE))
    evaluate(make_rows(6), SUITE, out=out, quiet=True)
    staged = out / ROWS_STAGED
    write_jsonl(staged, make_rows(3, seed=2))  # as the killed call left it
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(4, seed=1))
    done = _cli(home, "run", str(data), "--suite", str(suite), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "summary.json").read_text())["items"] == 4 and not staged.exists()
    write_jsonl(staged, make_rows(3, seed=2))
    again = evaluate(make_rows(5, seed=3), SUITE, out=out, quiet=True)
    assert again.summary.items == 5 and not staged.exists()
    assert (out / "evaluate-rows.jsonl").read_text().count("\n") == 5


def test_a_run_of_an_evaluates_copy_of_rows_into_its_dir_is_refused_before_it_starts(
    tmp_path: Path, home: Path
) -> None:
    """`ragscore run DIR/evaluate-rows.jsonl --out DIR` read evaluate()'s copy of the earlier run's rows, then moved it
    to DIR/previous/RUN_ID with that run's reports: the new run's dataset was gone for its resume. It is refused
    (exit 2) before the run starts, DIR as it was."""
    out, suite = tmp_path / "out", tmp_path / "s.json"
    suite.write_text(json.dumps(SUITE))
    evaluate(make_rows(3), SUITE, out=out, quiet=True)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    done = _cli(home, "run", str(out / "evaluate-rows.jsonl"), "--suite", str(suite), "--out", str(out))
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"--out {out} would move the dataset {out / 'evaluate-rows.jsonl'}, evaluate()'s copy" in said, said
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


@pytest.mark.parametrize("earlier", ["clean", "with an error"])
def test_the_resume_from_previous_of_a_run_whose_items_left_reads_them_there(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, earlier: str
) -> None:
    """A run whose items left the store, moved to DIR/previous/RUN_ID by a later run into DIR, resumes from there: a
    clean one ends on the reports that folder holds, one with an error takes its items back from that folder's
    items.jsonl and its rows from its evaluate-rows.jsonl, scores the error again and writes its reports there."""
    out = tmp_path / "out"
    if earlier == "clean":
        first = _expired_run(out, home, monkeypatch).summary
    else:
        first = RunSummary.model_validate_json((_expired_run_with_an_error(out, home, monkeypatch)[0] / "summary.json")
                                               .read_bytes())  # fmt: skip
    run_id = first.run_id
    evaluate(make_rows(4, seed=1), SUITE, out=out, quiet=True)
    previous = out / "previous" / run_id
    again = resume(previous, quiet=True)
    assert again.summary.run_id == run_id and len(again.items) == 20, again
    if earlier == "clean":
        assert again.summary == first
    else:
        assert again.summary.metrics["typed_answer"].errors == 1 and again.summary.metrics["exact_match"].n == 20
        assert again.summary.timing.get("resumed_at"), again.summary
        assert RunSummary.model_validate_json((previous / "summary.json").read_bytes()) == again.summary
    with _embedded_store(home) as client:  # the store names the moved folder as its items' and its rows' copy's
        meta = client.hgetall(f"ragscore:run:{run_id}:meta")
    assert meta["items_in"] == str(previous.resolve()), meta
    assert meta["dataset"] == str((previous / "evaluate-rows.jsonl").resolve()), meta


def _cluster_run_into(out: Path, tmp_path: Path, cluster: str) -> None:
    """A cluster run of 4 rows into ``out``, which moves the reports there into ``out/previous/``."""
    from orchestrator.runner import run
    from orchestrator.suite import load_suite

    run(write_jsonl(tmp_path / "d.jsonl", make_rows(4, seed=1)), load_suite(SUITE), out, broker=cluster)


def _assert_resumed_with_its_error_in(home: Path, folder: Path, run_id: str) -> None:
    """The resume of :func:`_expired_run_with_an_error`'s run from ``folder``, where its reports moved, scores its
    error again on the items and rows it takes back from there, and names ``folder`` in the store as theirs."""
    again = resume(folder, quiet=True).summary
    assert again.run_id == run_id and again.metrics["typed_answer"].errors == 1, again
    assert again.metrics["exact_match"].n == 20, again
    with _embedded_store(home) as client:
        meta = client.hgetall(f"ragscore:run:{run_id}:meta")
    assert meta["items_in"] == str(folder.resolve()), meta
    assert meta["dataset"] == str((folder / "evaluate-rows.jsonl").resolve()), meta


@pytest.mark.parametrize("written", ["now", "by an older ragscore (one folder)"])
def test_a_cluster_run_into_an_embedded_runs_dir_leaves_that_run_resumable_from_previous(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, cluster: str, written: str
) -> None:
    """A cluster run into DIR moves the reports of the embedded run there (its items left its store) into
    DIR/previous/RUN_ID, and cannot name that folder in the run's store, the embedded Redis, which it does not touch:
    that store still named DIR as the folder of its items and of its rows' copy, and its resume from previous/RUN_ID
    read DIR's (gone). The moved run.json names DIR (``moved_from``, a list; one folder where an older ragscore moved
    them): the resume names its own folder in the run's store, and takes the items and rows back from there."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    _cluster_run_into(out, tmp_path, cluster)
    previous = out / "previous" / run_id
    recorded = json.loads((previous / "run.json").read_text())
    assert recorded["moved_from"] == [str(out.resolve())]
    if written != "now":
        (previous / "run.json").write_text(json.dumps(recorded | {"moved_from": str(out.resolve())}))
    _assert_still_released(home, run_id, out)  # the cluster run's store is not the run's
    _assert_resumed_with_its_error_in(home, previous, run_id)


def test_an_embedded_run_into_a_cluster_runs_dir_leaves_that_run_resumable_from_previous(
    tmp_path: Path, home: Path, cluster: str
) -> None:
    """The reverse of the cross-store move above: an embedded run into the DIR of a cluster evaluate() moves that run's
    reports and its copy of the rows to DIR/previous/RUN_ID and cannot name that folder in the cluster's store, which
    still names DIR's copy as the run's dataset. The resume from previous/RUN_ID with that --broker names it there
    (``moved_from``), reads the rows moved with the reports and scores the run's error again."""
    rows = [row | {"question_type": "Yes/No", "expected": "yes"} for row in make_rows(20)]
    rows[0]["expected"] = "Paris"  # not one yes or one no: typed_answer's error for that item
    first = evaluate(rows, {"metrics": ["typed_answer", "exact_match"]}, out=tmp_path / "out", broker=cluster,
                     quiet=True).summary  # fmt: skip
    out, run_id = tmp_path / "out", first.run_id
    evaluate(make_rows(4, seed=1), SUITE, out=out, quiet=True)
    previous = out / "previous" / run_id
    assert json.loads((previous / "run.json").read_text())["moved_from"] == [str(out.resolve())]
    cluster_store = redis.Redis.from_url(cluster, decode_responses=True)
    assert cluster_store.hget(f"ragscore:run:{run_id}:meta", "dataset") == str((out / "evaluate-rows.jsonl").resolve())
    again = resume(previous, broker=cluster, quiet=True).summary
    assert again.run_id == run_id and again.metrics["typed_answer"].errors == 1, again
    assert again.metrics["exact_match"].n == 20 and again.timing.get("resumed_at"), again
    dataset = cluster_store.hget(f"ragscore:run:{run_id}:meta", "dataset")
    assert dataset == str((previous / "evaluate-rows.jsonl").resolve()), dataset
    assert RunSummary.model_validate_json((previous / "summary.json").read_bytes()) == again


def test_the_report_of_a_run_whose_reports_a_cluster_run_moved_names_the_folder_they_are_in(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, cluster: str
) -> None:
    """`ragscore report RUN_ID` of an embedded run whose items left its store is refused naming the folder of its
    reports: a cluster run into its DIR moved them to DIR/previous/RUN_ID, and the run's store, which that run does
    not touch, still names DIR until the run is resumed: the refusal named DIR, which holds the cluster run's. It
    names the folder they are in, as it does where the moving run told the store; `ragscore resume RUN_ID` resumes it
    there (it went to DIR, and was refused: DIR's summary is another run's)."""
    result = _expired_run(tmp_path / "out", home, monkeypatch)
    run_id = result.summary.run_id
    _cluster_run_into(result.out_dir, tmp_path, cluster)
    previous = (result.out_dir / "previous" / run_id).resolve()
    refused = _cli(home, "report", run_id, "--format", "md", "--out", str(tmp_path / "md"))
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr
    assert f"written to {previous} (" in said and f"`ragscore report {previous}` reads them" in said, said
    written = _cli(home, "report", str(previous), "--format", "md", "--out", str(tmp_path / "md"))
    assert written.returncode == 0, written.stderr
    assert f"# ragscore run {run_id}\n" in (tmp_path / "md" / "report.md").read_text()
    resumed = _cli(home, "resume", run_id)  # without --out: in that folder too
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming run {run_id} in {previous}/" in " ".join(resumed.stderr.split()), resumed.stderr


def test_a_run_moved_twice_resumes_from_where_the_second_move_put_it(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, cluster: str
) -> None:
    """An embedded run into DIR moves the reports of the embedded run there to DIR/previous/RUN_ID, naming it in the
    store; a cluster run into that folder moves them again, to its own previous/RUN_ID, and cannot tell the store.
    Its run.json kept only the first folder (DIR) as ``moved_from``, which the store no longer named: the resume from
    the second folder read the first's items (the cluster run's). It keeps every folder, oldest first, and the resume
    takes the items and rows back from where they are."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    _assert_resumed_after_two_moves(out, run_id, home, tmp_path, cluster)


def _assert_resumed_after_two_moves(
    out: Path, run_id: str, home: Path, tmp_path: Path, cluster: str, before: tuple[str, ...] = ()
) -> None:
    """An embedded run into ``out`` moves the reports of run ``run_id`` there (its items left the store) to
    out/previous/RUN_ID, a cluster run into that folder to its own previous/RUN_ID, whose run.json names both
    folders after those it moved from ``before``: :func:`_assert_resumed_with_its_error_in` that last one."""
    evaluate(make_rows(4, seed=1), SUITE, out=out, quiet=True)
    first = out / "previous" / run_id
    _cluster_run_into(first, tmp_path, cluster)
    second = first / "previous" / run_id
    moves = [*before, str(out.resolve()), str(first.resolve())]
    assert json.loads((second / "run.json").read_text())["moved_from"] == moves
    _assert_still_released(home, run_id, first)
    _assert_resumed_with_its_error_in(home, second, run_id)


def test_a_run_resumed_where_a_move_put_it_resumes_again_after_two_more_moves(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, cluster: str
) -> None:
    """A resume's run.json keeps ``moved_from``, the whole history (it dropped it once it named its folder in the
    store): the moves after it are added to it. A cluster run moves an embedded run's reports to DIR/previous/RUN_ID,
    its resume there releases its items to that folder again; an embedded run into it moves them on (telling the
    store), a cluster run into that one moves them again (not telling it): the resume from the last folder takes the
    items and rows back from there, as the store's folder is in the history."""
    out, run_id = _expired_run_with_an_error(tmp_path / "out", home, monkeypatch)
    _cluster_run_into(out, tmp_path, cluster)
    first = out / "previous" / run_id
    _assert_resumed_with_its_error_in(home, first, run_id)
    assert json.loads((first / "run.json").read_text())["moved_from"] == [str(out.resolve())]
    with _embedded_store(home) as client:  # released to that folder again (1 s)
        assert until(lambda: not list(client.scan_iter(f"ragscore:run:{run_id}:item:*")), timeout=30)
    _assert_resumed_after_two_moves(first, run_id, home, tmp_path, cluster, (str(out.resolve()),))


def test_a_third_run_keeps_both_earlier_ones_and_a_results_folder_is_named_by_its_summary(
    tmp_path: Path, home: Path
) -> None:
    """Each run into DIR moves the one before it into previous/ (never previous/ itself); a folder `ragscore results`
    wrote (no run.json) is named by its summary's run id."""
    first = evaluate(make_rows(5), SUITE, quiet=True).summary.run_id
    out = tmp_path / "copy"
    assert _cli(home, "results", first, "--out", str(out), "--quiet").returncode == 0
    second = evaluate(make_rows(5), SUITE, out=out, quiet=True).summary.run_id
    third = evaluate(make_rows(5), SUITE, out=out, quiet=True).summary.run_id
    assert sorted(path.name for path in (out / "previous").iterdir()) == sorted([first, second])
    assert not (out / "previous" / first / "run.json").exists()
    assert json.loads((out / "previous" / first / "summary.json").read_text())["run_id"] == first
    assert json.loads((out / "previous" / second / "run.json").read_text())["run_id"] == second
    assert sorted(path.name for path in (out / "previous" / second).iterdir() if path.is_dir()) == []
    assert json.loads((out / "run.json").read_text())["run_id"] == third


def test_a_refused_run_into_a_dir_of_another_runs_reports_moves_nothing(tmp_path: Path, home: Path) -> None:
    """A run refused before it goes ahead (a dataset whose ids repeat) leaves DIR as it was: no previous/."""
    out = tmp_path / "out"
    evaluate(make_rows(5), SUITE, out=out, quiet=True)
    before = _reports(out)
    rows = make_rows(5)
    with pytest.raises(DatasetError):
        evaluate([*rows, rows[0]], SUITE, out=out, quiet=True)
    assert _reports(out) == before
    assert not (out / "previous").exists()


def test_a_run_into_a_dir_whose_previous_is_no_folder_of_its_own_is_refused_before_it_starts(
    tmp_path: Path, home: Path
) -> None:
    """DIR/previous a file of the user's, or a link: the move failed with a traceback (OSError) once the run was
    created in the store. Refused first (exit 2) naming it: no run made, DIR left as it was."""
    out = tmp_path / "out"
    command = _run_command(tmp_path, 5, out)
    assert _cli(home, *command).returncode == 0
    (out / "previous").write_text("mine")
    before = _reports(out)
    with _embedded_store(home) as client:
        runs = sorted(client.scan_iter("ragscore:run:*:meta"))
    refused = _cli(home, *command)
    assert refused.returncode == 2, refused.stderr
    assert f"to be moved into {out / 'previous'}/, which is not a folder" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert _reports(out) == before and (out / "previous").read_text() == "mine"
    with _embedded_store(home) as client:
        assert sorted(client.scan_iter("ragscore:run:*:meta")) == runs


def test_the_resume_of_a_run_of_shards_of_different_sizes_whose_items_left_takes_them_back_shard_by_shard(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose rows grow late (16 small rows, then 8 of 12 KB) is cut into shards of 8, 8, 4 and 4 rows (each by its
    own rows' bytes; the rows held at most cut here at 40 KB). Its items leave the store; its resume takes them back
    from DIR/items.jsonl into the shards where the run recorded each starts: every shard's id list is the one
    submitted, and the error is scored again alone. Seen failing without: items taken back in shards of the first
    shard's count (8, 8, 8) were refused as not the run's."""
    from orchestrator.runner import recorded_cut, run
    from orchestrator.suite import load_suite
    from ragscore_workers.planning import DEFAULT_SHARD_BYTES
    from ragscore_workers.store import RunStore

    monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", 1)
    monkeypatch.setattr("orchestrator.spool.SHARD_HELD_FACTOR", 40_000 / DEFAULT_SHARD_BYTES)
    rows = [row | {"question_type": "Yes/No", "expected": "yes"} for row in make_rows(24)]
    rows[0]["expected"] = "Paris"  # typed_answer's error for that item: the resume takes the items back to score it
    rows[16:] = [row | {"answer": "x" * 12_000} for row in rows[16:]]
    out = tmp_path / "out"
    suite = load_suite({"metrics": ["typed_answer", "exact_match"]})
    run_id = run(write_jsonl(tmp_path / "d.jsonl", rows), suite, out, shard_rows=8).run_id
    with _embedded_store(home) as client:
        store = RunStore(client, DEFAULT_RUN_TTL_S)
        cut = recorded_cut(store.meta(run_id))
        assert cut.starts == (0, 8, 16, 20) and store.n_shards(run_id) == 4, cut
        assert client.hget(f"ragscore:run:{run_id}:meta", "items_in") == str(out.resolve())
        assert until(lambda: not list(client.scan_iter(f"ragscore:run:{run_id}:item:*")), timeout=30)
    monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", RELEASED_ITEMS_TTL_S)  # kept while checked below
    again = resume(out, quiet=True)
    assert again.summary.run_id == run_id and again.summary.state == "finished", again.summary
    assert again.summary.metrics["typed_answer"].errors == 1 and again.summary.metrics["exact_match"].n == 24
    with _embedded_store(home) as client:
        store = RunStore(client, DEFAULT_RUN_TTL_S)
        restored = [store.shard_keys(run_id, shard) for shard in range(4)]
    assert [len(keys) for keys in restored] == [8, 8, 4, 4], restored  # each shard's id list as submitted
    assert [key for keys in restored for key in keys] == [row["id"] for row in rows], restored
