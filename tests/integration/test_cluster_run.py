"""Cluster mode on a real redis-server with real ``ragscore worker`` processes, against the embedded mode."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery.result import AsyncResult

from orchestrator.runner import connect, run
from orchestrator.suite import load_suite
from ragscore_workers.schemas import Suite, question_fingerprint
from ragscore_workers.scoring import SKIPPED_MARK
from ragscore_workers.store import RunState, RunStore

from ..support import ROOT, RedisProcess, WorkerProcess, make_rows, scores_by_id, until, write_jsonl

pytestmark = pytest.mark.integration

SUITE = {"name": "spine", "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}]}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "d.jsonl", make_rows(1000, seed=11))


def test_cluster_and_embedded_give_identical_scores_for_1000_rows(
    cluster: str, dataset: Path, tmp_path: Path, home: Path
) -> None:
    resolved = load_suite(SUITE)
    cluster_summary = run(dataset, resolved, tmp_path / "cluster", broker=cluster, shard_rows=300)
    embedded_summary = run(dataset, resolved, tmp_path / "embedded")
    assert cluster_summary.items == embedded_summary.items == 1000
    cluster_scores = scores_by_id(tmp_path / "cluster" / "items.jsonl")
    assert list(cluster_scores) == [f"q{i}" for i in range(1000)]  # every item once, in input order
    assert cluster_scores == scores_by_id(tmp_path / "embedded" / "items.jsonl")
    for name in ("exact_match", "recall_at_1", "recall_at_5", "mrr"):
        assert cluster_summary.metrics[name] == embedded_summary.metrics[name]
    # Unscorable rows (about 5% lack a reference) are counted, not averaged as zero.
    em = cluster_summary.metrics["exact_match"]
    assert em.unscorable > 0 and em.n + em.unscorable == 1000
    expected_mean = sum(s["exact_match"] for s in cluster_scores.values() if s["exact_match"] is not None) / em.n
    assert em.mean == pytest.approx(expected_mean)


def test_chunk_size_does_not_change_results(cluster: str, dataset: Path, tmp_path: Path) -> None:
    outs = []
    for chunk in (7, 1000):
        resolved = load_suite({**SUITE, "chunk_size": {"cpu": chunk}})
        run(dataset, resolved, tmp_path / f"c{chunk}", broker=cluster)
        outs.append(scores_by_id(tmp_path / f"c{chunk}" / "items.jsonl"))
    assert outs[0] == outs[1]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=300,
    )  # fmt: skip


def test_submit_status_results_through_the_cli(cluster: str, dataset: Path, tmp_path: Path) -> None:
    """`submit` printed the run id alone: it now says too how to follow the run and write its reports (stdout is the
    id alone, as scripts read it)."""
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    sub = _cli("submit", str(dataset), "--suite", str(suite), "--broker", cluster)
    assert sub.returncode == 0, sub.stderr
    run_id = sub.stdout.strip().splitlines()[-1]
    follow = (
        f"follow it: `ragscore status {run_id} --broker {cluster}`, then "
        f"`ragscore results {run_id} --out DIR --broker {cluster}`"
    )
    assert follow in " ".join(sub.stderr.split()) and sub.stdout.split() == [run_id], (sub.stdout, sub.stderr)
    store = connect(cluster)
    from orchestrator.runner import wait

    wait(store, run_id, timeout_s=120)
    status = _cli("status", run_id, "--broker", cluster)
    assert status.returncode == 0 and "finished" in status.stdout
    res = _cli("results", run_id, "--out", str(tmp_path / "res"), "--broker", cluster)
    assert res.returncode == 0, res.stderr
    assert len((tmp_path / "res" / "items.jsonl").read_text().splitlines()) == 1000
    by_dir = _cli("status", str(tmp_path / "res"), "--broker", cluster)  # the DIR results wrote names the run
    assert by_dir.returncode == 0 and f"run {run_id}: finished" in by_dir.stdout, by_dir.stderr
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["run_id"] == run_id and summary["items"] == 1000
    listing = _cli("status", "--broker", cluster)
    assert run_id in listing.stdout


def _resume_from(cluster: str, run_id: str, cwd: Path, *options: str) -> str:
    """`ragscore resume RUN_ID` without --out, run in ``cwd``: what it said (it succeeded)."""
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", run_id, "--broker", cluster, *options],
                          capture_output=True, text=True, cwd=cwd, timeout=300)  # fmt: skip
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, said
    return said


@pytest.mark.parametrize("quiet", [[], ["--quiet"]], ids=["said", "quiet"])
def test_the_resume_of_a_run_id_never_released_writes_into_the_folder_the_run_wrote_to(
    cluster: str, tmp_path: Path, quiet: list[str]
) -> None:
    """A cluster run's items are never released: `ragscore resume RUN_ID` without --out wrote its reports into
    ./ragscore-out, not the run's own folder (the run store did not know it). Recorded as the run starts, it is
    where the resume writes, and says so, under --quiet too (where the reports go is no progress line)."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    (out / "summary.json").unlink()
    said = _resume_from(cluster, run_id, elsewhere, *quiet)
    assert f"resuming run {run_id} in {out.resolve()}/, the folder it writes its reports to" in said, said
    assert json.loads((out / "summary.json").read_text())["run_id"] == run_id
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())


def test_the_resume_of_a_run_id_never_released_whose_folder_was_deleted_writes_that_folder_again(
    cluster: str, tmp_path: Path
) -> None:
    """A run not released whose folder was deleted (its reports with it) resumed in ./ragscore-out: it writes the
    folder it was started with again, as `ragscore resume` with the same command always did, and says so."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    shutil.rmtree(out)
    said = _resume_from(cluster, run_id, elsewhere)
    assert (f"resuming run {run_id} in {out.resolve()}/, the folder it writes its reports to, which is gone: written "
            "there again") in said, said  # fmt: skip
    assert json.loads((out / "summary.json").read_text())["run_id"] == run_id
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())


def test_the_resume_of_a_run_id_whose_gone_folder_a_link_now_leads_elsewhere_writes_into_ragscore_out(
    cluster: str, tmp_path: Path
) -> None:
    """A run's deleted folder was written again wherever its path led now: a symbolic link put above it (or in its
    place) since took the reports to the link's target. The store recorded it resolved; where it leads elsewhere now,
    the resume writes into ragscore-out, naming both, and nothing into the target."""
    parent, target, elsewhere = tmp_path / "parent", tmp_path / "target", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), parent / "out", broker=cluster)
    run_id, own = json.loads((parent / "out" / "run.json").read_text())["run_id"], (parent / "out").resolve()
    shutil.rmtree(parent)
    target.mkdir()
    parent.symlink_to(target)
    said = _resume_from(cluster, run_id, elsewhere)
    assert (f"resuming run {run_id} in ragscore-out/, as {own}/, the folder it writes its reports to, is gone and "
            f"cannot be made again ({own} leads to {target.resolve() / 'out'} now)") in said, said  # fmt: skip
    assert json.loads((elsewhere / "ragscore-out" / "summary.json").read_text())["run_id"] == run_id
    assert list(target.iterdir()) == [], list(target.iterdir())


def test_the_resume_of_a_run_into_another_folder_keeps_the_gates_it_was_started_with(
    cluster: str, tmp_path: Path
) -> None:
    """`ragscore resume RUN_ID --out OTHER` wrote OTHER/run.json without the gate options the run was started with
    (kept in its own folder's run.json only): a `run --resume OTHER` was held to none. The store keeps them too."""
    out, other = tmp_path / "out", tmp_path / "other"
    job = {"gates": {"fail_under": ["exact_match=0.0"]}}
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster, job=job)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    resumed = _cli("resume", run_id, "--out", str(other), "--broker", cluster)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((other / "run.json").read_text())["job"] == job
    again = _cli("run", "--resume", str(other), "--broker", cluster)
    said = " ".join(again.stderr.split())
    assert again.returncode == 0, said
    assert "held to the gates it was started with: --fail-under exact_match=0.0" in said, said


def test_the_resume_into_another_folder_of_an_older_ragscores_run_takes_its_gates_from_its_folder_or_says_unknown(
    cluster: str, tmp_path: Path
) -> None:
    """A run of a ragscore that kept no job in the store (recorded since) resumed with `--out OTHER` wrote
    OTHER/run.json without the gate options it was started with, saying nothing: a `run --resume OTHER` was held to
    none. They are read from the run.json of the folder the store names for it; where none names the run, the resume
    says in one line that they are unknown, and records them so: a later resume (into a fourth folder, or its own) said
    nothing, reading the third folder's run.json as no gates, and says it again. A run started without gate options
    (its store keeps none) says nothing."""
    out, client = tmp_path / "out", redis.Redis.from_url(cluster, decode_responses=True)
    job = {"gates": {"fail_under": ["exact_match=0.0"]}}
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster, job=job)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    client.hdel(f"ragscore:run:{run_id}:meta", "job")  # as an older ragscore left it
    resumed = _cli("resume", run_id, "--out", str(tmp_path / "other"), "--broker", cluster)
    assert resumed.returncode == 0 and "unknown" not in resumed.stderr, resumed.stderr
    assert "held to the gates it was started with: --fail-under exact_match=0.0" in " ".join(resumed.stderr.split())
    assert json.loads((tmp_path / "other" / "run.json").read_text())["job"] == job
    client.hdel(f"ragscore:run:{run_id}:meta", "job", "out_dir", "reports_dir")  # nor a folder of it known
    resumed = _cli("resume", run_id, "--out", str(tmp_path / "third"), "--broker", cluster)
    said = " ".join(resumed.stderr.split())
    assert resumed.returncode == 0, said
    assert (f"run {run_id} was started by an older ragscore, whose run store keeps no gate options, and the store "
            "names no folder of it: its gate options (--fail-under, --fail-on-regression, --junit) are unknown, and "
            f"{tmp_path / 'third' / 'run.json'} records them so") in said, said  # fmt: skip
    assert json.loads((tmp_path / "third" / "run.json").read_text())["job"] is None  # unknown, not none
    # moved once more (the store names the third folder): still unknown, said again, not read as none
    resumed = _cli("resume", run_id, "--out", str(tmp_path / "fourth"), "--broker", cluster)
    said = " ".join(resumed.stderr.split())
    assert resumed.returncode == 0, said
    assert (f"and {tmp_path / 'third' / 'run.json'} records them as unknown: its gate options (--fail-under, "
            f"--fail-on-regression, --junit) are unknown, and {tmp_path / 'fourth' / 'run.json'} records them "
            "so") in said, said  # fmt: skip
    assert json.loads((tmp_path / "fourth" / "run.json").read_text())["job"] is None
    again = _cli("run", "--resume", str(tmp_path / "fourth"), "--broker", cluster)  # its own run.json: unknown
    said = " ".join(again.stderr.split())
    assert again.returncode == 0, said
    assert (f"and {tmp_path / 'fourth' / 'run.json'} records them as unknown: its gate options (--fail-under, "
            "--fail-on-regression, --junit) are unknown (give them to") in said, said  # fmt: skip
    assert said.count("run.json") == 1, said  # its own run.json, named once
    plain = tmp_path / "plain"
    run(write_jsonl(tmp_path / "e.jsonl", make_rows(10)), load_suite(SUITE), plain, broker=cluster)
    plain_id = json.loads((plain / "run.json").read_text())["run_id"]
    shutil.rmtree(plain)
    resumed = _cli("resume", plain_id, "--out", str(tmp_path / "plain-other"), "--broker", cluster)
    assert resumed.returncode == 0 and "unknown" not in resumed.stderr, resumed.stderr
    assert "job" not in json.loads((tmp_path / "plain-other" / "run.json").read_text())  # none
    client.hdel(f"ragscore:run:{plain_id}:meta", "job", "out_dir", "reports_dir")
    again = _cli("run", "--resume", str(tmp_path / "plain-other"), "--broker", cluster)  # its own run.json: none
    assert again.returncode == 0 and "unknown" not in again.stderr, again.stderr


def test_the_resume_of_a_run_id_whose_folder_a_later_run_took_writes_where_its_reports_moved(
    cluster: str, tmp_path: Path
) -> None:
    """The folder a run writes its reports to was not updated when a later run into it moved them to
    DIR/previous/RUN_ID: its resume wrote over the later run's reports."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster)
    first = json.loads((out / "run.json").read_text())["run_id"]
    run(write_jsonl(tmp_path / "e.jsonl", make_rows(10)), load_suite(SUITE), out, broker=cluster)
    later = json.loads((out / "run.json").read_text())["run_id"]
    moved = out / "previous" / first
    (moved / "summary.json").unlink()
    said = _resume_from(cluster, first, elsewhere)
    assert f"resuming run {first} in {moved.resolve()}/, the folder it writes its reports to" in said, said
    assert json.loads((moved / "summary.json").read_text())["run_id"] == first
    assert json.loads((out / "summary.json").read_text())["run_id"] == later
    assert json.loads((out / "run.json").read_text())["run_id"] == later


def test_the_resume_of_a_run_id_whose_folder_another_brokers_run_took_finds_its_reports_in_previous(
    cluster: str, tmp_path: Path, home: Path
) -> None:
    """An embedded run into a cluster run's folder moves its reports to DIR/previous/RUN_ID without the cluster's
    store knowing: the resume of a run never released took the folder the store names only where its run.json named
    the run, else wrote into ragscore-out, though the reports were found in previous/ for a released run. One rule
    now: it resumes where moved_reports finds them, leaving the later run's reports alone."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster)
    first = json.loads((out / "run.json").read_text())["run_id"]
    run(write_jsonl(tmp_path / "e.jsonl", make_rows(10)), load_suite(SUITE), out)
    later = json.loads((out / "run.json").read_text())["run_id"]
    moved = out / "previous" / first
    said = _resume_from(cluster, first, elsewhere)
    assert f"resuming run {first} in {moved.resolve()}/, the folder it writes its reports to" in said, said
    assert json.loads((moved / "summary.json").read_text())["run_id"] == first
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())
    assert json.loads((out / "summary.json").read_text())["run_id"] == later
    assert json.loads((out / "run.json").read_text())["run_id"] == later


def test_the_resume_of_an_older_ragscores_run_id_writes_where_its_reports_were_written_and_says_so(
    cluster: str, tmp_path: Path
) -> None:
    """A run of a ragscore that recorded no out_dir in the store resumes in the folder its reports were last written
    to (its reports_dir), saying so, and in ragscore-out where the store names none, saying that too."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), out, broker=cluster)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    client = redis.Redis.from_url(cluster, decode_responses=True)
    client.hdel(f"ragscore:run:{run_id}:meta", "out_dir")  # as an older ragscore left it
    said = _resume_from(cluster, run_id, elsewhere)
    assert (f"resuming run {run_id} in {out.resolve()}/, the folder its reports were last written to (the store names "
            "no folder it writes them to: a run of an older ragscore)") in said, said  # fmt: skip
    assert list(elsewhere.iterdir()) == [], list(elsewhere.iterdir())
    client.hdel(f"ragscore:run:{run_id}:meta", "out_dir", "reports_dir")
    said = _resume_from(cluster, run_id, elsewhere)
    assert f"resuming run {run_id} in ragscore-out/, the store names no folder for its reports" in said, said
    assert json.loads((elsewhere / "ragscore-out" / "summary.json").read_text())["run_id"] == run_id


def test_the_resume_of_a_run_into_another_runs_folder_moves_its_reports_as_a_new_run_there(
    cluster: str, tmp_path: Path
) -> None:
    """`ragscore resume RUN_ID --out DIR`, DIR holding another run's reports, wrote over them: it moves them to
    DIR/previous/RUN_ID as `run --out DIR` does, and is refused, moving nothing, where that run wrote no reports."""
    first_out, out, elsewhere = tmp_path / "first", tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), first_out, broker=cluster)
    first = json.loads((first_out / "run.json").read_text())["run_id"]
    run(write_jsonl(tmp_path / "e.jsonl", make_rows(10)), load_suite(SUITE), out, broker=cluster)
    later = json.loads((out / "run.json").read_text())["run_id"]
    (out / "summary.json").unlink()  # the later run's reports not written (interrupted): refused
    refused = _cli("resume", first, "--out", str(out), "--broker", cluster)
    assert refused.returncode == 2 and f"holds run {later}, which has not written" in refused.stderr, refused.stderr
    assert not (out / "previous").exists()
    _resume_from(cluster, later, elsewhere)  # writes them
    said = _resume_from(cluster, first, elsewhere, "--out", str(out))
    assert f"held the reports of run {later}: moved to {out / 'previous' / later}/" in said, said
    assert json.loads((out / "previous" / later / "summary.json").read_text())["run_id"] == later
    assert json.loads((out / "previous" / later / "run.json").read_text())["run_id"] == later
    assert json.loads((out / "summary.json").read_text())["run_id"] == first
    recorded = json.loads((out / "run.json").read_text())
    assert recorded["run_id"] == first
    assert recorded["written_at"] > json.loads((out / "previous" / later / "run.json").read_text())["written_at"]


def test_a_visibility_timeout_below_a_hard_limit_refuses_sending_work_not_reading_a_run(
    cluster: str, tmp_path: Path
) -> None:
    """RAGSCORE_VISIBILITY_TIMEOUT_S=400 (a cpu-only cluster's operators' choice) refused every command, `status` and
    `results` too: only what sends tasks (run, resume, submit) must, a task outliving it being delivered again."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(20, seed=3))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    from orchestrator.runner import wait

    run_id, other = (
        _cli("submit", str(data), "--suite", str(suite), "--broker", cluster).stdout.strip().splitlines()[-1]
        for _ in range(2)
    )
    for each in (run_id, other):
        wait(connect(cluster), each, timeout_s=120)
    short = {**os.environ, "RAGSCORE_VISIBILITY_TIMEOUT_S": "400"}
    res = str(tmp_path / "res")
    for args in (["status", run_id], ["status"], ["results", run_id, "--out", res], ["cancel", run_id],
                 ["compare", run_id, other, "--out", str(tmp_path / "cmp")]):  # fmt: skip
        read = _cli(*args, "--broker", cluster, env=short)
        assert read.returncode == 0 and "Bad setting" not in read.stderr, (args, read.stderr[-2000:])
    said = (
        "Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above the longest hard time limit of a task, 840 s"
    )
    for args in (["submit", str(data), "--suite", str(suite)], ["resume", run_id, "--out", res],
                 ["run", str(data), "--suite", str(suite), "--out", str(tmp_path / "new")]):  # fmt: skip
        sent = _cli(*args, "--broker", cluster, env=short)
        assert sent.returncode == 2 and said in " ".join(sent.stderr.split()), (args, sent.stderr[-2000:])


def test_submit_applies_the_judge_budget_rate_limits_and_suite_options_run_has(tmp_path: Path) -> None:
    """`ragscore submit` had none of `ragscore run`'s --max-cost/--max-tokens, --rpm/--tpm/--rpd/--tpd, --chunk-size,
    --no-cache or --no-target: a submitted run could not be given a judge budget or the provider tier's limits.
    A Redis of its own: no worker serves the judge queue, and its messages must not wait in the shared one."""
    judge = {"provider": "openai", "model": "m", "base_url": "http://localhost:1/v1"}
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["exact_match", {"name": "answer_accuracy", "params": {
        "prices": {"m": [0.1, 0.2]}}}], "judge": judge, "target": {"url": "http://localhost:1/ask"}}))  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    server = RedisProcess(tmp_path / "redis").start()
    try:
        common = [str(data), "--suite", str(suite), "--broker", server.url]
        refused = _cli("submit", *common, "--rpm", "0")
        assert refused.returncode == 2, refused.stderr
        assert "--rpm 0: a judge rate limit is at least 1" in " ".join(refused.stderr.split()), refused.stderr
        store = connect(server.url)
        assert store.list_runs() == []  # refused before anything was submitted
        sub = _cli("submit", *common, "--max-cost", "0.5", "--max-tokens", "4000", "--rpm", "12", "--tpm", "3456",
                   "--rpd", "100", "--tpd", "99999", "--chunk-size", "cpu=7", "--no-cache", "--no-target")  # fmt: skip
        assert sub.returncode == 0, sub.stderr
        stored = Suite.model_validate_json(store.meta(sub.stdout.strip().splitlines()[-1])["suite"])
        assert (stored.judge.rpm, stored.judge.tpm, stored.judge.rpd, stored.judge.tpd) == (12, 3456, 100, 99999)
        (judged,) = [m for m in stored.metrics if m.name == "answer_accuracy"]
        assert judged.params["max_cost"] == 0.5 and judged.params["max_tokens_total"] == 4000
        assert judged.params["cache"] is False and stored.chunk_size["cpu"] == 7 and stored.target is None
    finally:
        server.stop()


def test_a_listing_whose_reader_left_early_ends_quietly(cluster: str) -> None:
    """``ragscore status | head -3`` on a store of many runs: the first line written after head left ended the
    command with 'error: Broken pipe', exit 1, which a script under ``set -o pipefail`` took for a failure."""
    store = connect(cluster)
    for i in range(3):
        store.create_run(f"t-listed-{i}", {"state": "finished", "dataset": "d.jsonl", "created_at": time.time()})
    env = {k: v for k, v in os.environ.items() if k != "RAGSCORE_BROKER_URL"}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "status", "--broker", cluster], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line: every write to it fails (EPIPE)
    stderr = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0, stderr
    assert stderr == ""


def test_cancel_through_the_cli_of_a_run_no_worker_serves_writes_its_summary_then_results(
    dataset: Path, tmp_path: Path
) -> None:
    """No worker (a Redis of its own: the shared one has the cluster's workers): every task waits. `ragscore
    cancel` used to send the aggregation to the control queue, where nothing took it: no summary until a worker
    came. It now writes the summary itself, every item stopped; a worker that comes later skips the queued tasks
    and changes nothing."""
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    two_systems = write_jsonl(tmp_path / "two.jsonl", [r | {"system": s} for s in ("a", "b") for r in make_rows(100)])
    server = RedisProcess(tmp_path / "redis").start()
    broker = server.url
    try:
        run_id = _cli("submit", str(two_systems), "--suite", str(suite), "--broker", broker).stdout.split()[-1]
        cancelled = _cli("cancel", run_id, "--broker", broker)
        assert cancelled.returncode == 0, cancelled.stderr
        said = " ".join(cancelled.stderr.split())
        assert f"run {run_id}: cancelled; its queued tasks are not scored, then `ragscore results {run_id} --out" in (
            said
        )
        assert "no worker consumes 'cpu'" in said, said
        store = connect(broker)
        assert store.summary_is_current(run_id), "cancel returned with no summary written"
        res = _cli("results", run_id, "--out", str(tmp_path / "res"), "--broker", broker)
        assert res.returncode == 1, res.stderr  # not a pass: nothing of it was scored
        told = " ".join(res.stderr.split())  # it said "0 of 200 items scored ... the reports cover those only"
        assert f"run {run_id} was cancelled before any item was scored (200 items unscored)" in told, told
        assert f"the reports hold no scores: `ragscore resume {run_id}" in told and "cover those only" not in told
        written = json.loads((tmp_path / "res" / "summary.json").read_text())
        assert written["state"] == "cancelled"
        items = [json.loads(line) for line in (tmp_path / "res" / "items.jsonl").read_text().splitlines()]
        details = {"reason": "run cancelled", "stopped": True, SKIPPED_MARK: True}
        stopped = {"score": None, "passed": None, "details": details, "error": None, "ms": 0.0}
        outputs = {name: stopped for name in ("exact_match", "mrr", "recall_at_1", "recall_at_5")}
        assert [(i["id"], i["system"], i["metrics"]) for i in items] == [
            (f"q{n}", s, outputs) for s in ("a", "b") for n in range(100)
        ]  # the unscored items keep their id and system (not "a::q0"), their outputs stopped as the summary counts them
        worker = WorkerProcess(broker, "cpu", tmp_path / "home").start()
        try:  # a worker that comes later skips the queued tasks; their chords' aggregation writes the same

            def idle() -> bool:
                return not any((store.broker.llen("cpu"), store.broker.llen("control"), store.broker.hlen("unacked")))

            assert until(lambda: idle() and (time.sleep(1.0) or idle()), 120), "the worker did not drain the run"
        finally:
            worker.stop()
        again = store.summary(run_id)
        assert again is not None and again.state == "cancelled" and again.scored == 0
        again_cancel = _cli("cancel", run_id, "--broker", broker)
        still = f"run {run_id}: cancelled (it already was); its queued tasks are not scored"
        assert still in again_cancel.stderr  # still says so
    finally:
        server.stop()


def test_a_redelivered_aggregation_of_a_finished_run_writes_nothing(
    cluster: str, dataset: Path, tmp_path: Path
) -> None:
    """An aggregation longer than the visibility timeout (millions of items) is handed out again while it runs:
    each copy aggregated the whole run again, and was itself re-delivered 15 minutes later, for ever."""
    from ragscore_workers.tasks import aggregate

    summary = run(dataset, load_suite(SUITE), tmp_path / "out", broker=cluster)
    store = connect(cluster)
    before = store.r.get(store.key(summary.run_id, "summary"))
    _ran(store, aggregate.apply_async((summary.run_id, store.generation(summary.run_id))))  # as the broker would
    assert store.r.get(store.key(summary.run_id, "summary")) == before  # its timing would have changed


def _ran(store: RunStore, sent: AsyncResult) -> None:
    """Wait until a worker stored ``sent``'s result (it ran), and check it succeeded."""
    deadline = time.monotonic() + 60
    while not store.r.exists(f"celery-task-meta-{sent.id}"):
        assert time.monotonic() < deadline, "no worker ran the task"
        time.sleep(0.1)
    assert json.loads(store.r.get(f"celery-task-meta-{sent.id}"))["status"] == "SUCCESS"


def test_an_aggregation_under_way_is_not_run_twice_and_a_resumed_runs_old_summary_is_not_current(
    cluster: str, dataset: Path, tmp_path: Path
) -> None:
    """A copy of an aggregation re-delivered while the first still runs (past the visibility timeout) ran in
    parallel; a run a resume reopened kept its old summary, which a cancel then took for the new one's."""
    from orchestrator.runner import cancel, submit, wait
    from ragscore_workers.tasks import aggregate

    store = connect(cluster)
    sub = submit(dataset, load_suite(SUITE), store)
    cancel(store, sub.run_id)
    first = wait(store, sub.run_id, timeout_s=120, stall_s=3)
    assert first.state == "cancelled" and store.summary_is_current(sub.run_id)
    before = store.r.get(store.key(sub.run_id, "summary"))
    lease = store.key(sub.run_id, "aggregating:0")
    store.r.set(lease, "1", ex=60)  # what a copy that is aggregating holds
    _ran(store, aggregate.apply_async((sub.run_id, 0)))
    assert store.r.get(store.key(sub.run_id, "summary")) == before  # it skipped
    store.r.delete(lease)  # the copy's worker was killed: its lease lapsed
    _ran(store, aggregate.apply_async((sub.run_id, 0)))
    assert store.r.get(store.key(sub.run_id, "summary")) != before and not store.r.exists(lease)
    store.set_meta(sub.run_id, generation=1)  # reopened by a resume: its summary is the last generation's
    assert not store.summary_is_current(sub.run_id) and store.summary_is_current(sub.run_id, 0)


def test_a_worker_without_the_suites_plugin_fails_its_items_saying_so_under_their_keys(
    cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestrator loads a plug-in the cluster's workers lack (RAGSCORE_PLUGINS set only where the run was
    started). Each item said "Unknown metric 'fail_on_flag'. Did you mean ...": a built-in, no word of the plug-in;
    and it was written under the bare id, a stray item beside the ``system::id`` one the run counts."""
    from ragscore_workers.errors import RagscoreError

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing")
    rows = [{**row, "system": "sysA", "group": "g1"} for row in make_rows(4)]
    resolved = load_suite({"metrics": ["fail_on_flag"]})
    said = r"worker .* has no metric 'fail_on_flag' \(RAGSCORE_PLUGINS here: unset\): every worker must import"
    with pytest.raises(RagscoreError, match=said):  # the aggregation, on such a worker too
        run(write_jsonl(tmp_path / "d.jsonl", rows), resolved, tmp_path / "out", broker=cluster)
    store = connect(cluster)
    run_id = json.loads((tmp_path / "out" / "run.json").read_text())["run_id"]
    items = {raw.key: raw.metrics for raw in store.iter_raw_items(run_id)}
    assert sorted(items) == [f"sysA::q{i}" for i in range(4)]
    assert all(m["fail_on_flag"]["error"].startswith("worker cannot score: worker ") for m in items.values())
    # their meta is a scored item's (a queue that failed them rewrote the meta another queue wrote, group and all)
    metas = [raw.meta for raw in store.iter_raw_items(run_id)]
    assert all(m["group"] == "g1" for m in metas)
    assert all(m["question_sha"] == question_fingerprint(f"question {m['id'][1:]}?") for m in metas)


def _status_rate(store: RunStore, run_id: str) -> float | None:
    """The run's rate as ``ragscore status RUN`` shows it (one sample: its average)."""
    from orchestrator.reports.live import StatusView, sample

    view = StatusView(store.meta(run_id))
    view.add(sample(store, run_id, time.time()))
    (row,) = [r for r in view.rows() if r["queue"] == "all"]
    return row["rate"]


def _worked_at(store: RunStore, run_id: str) -> float:
    """When the run's work was last done: its ``progress_at`` (the store's clock, whole seconds cut down)."""
    return float(store.meta(run_id)["progress_at"])


def _slow_rows(n: int) -> list[dict[str, object]]:
    """Rows of ``slow_exact`` at 50 ms each: one worker process does at most 20 a second."""
    return [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 50}} for i in range(n)]


def _held_rows(n: int, release: Path) -> list[dict[str, object]]:
    """Rows of ``slow_exact`` that each take until ``release`` exists (2 minutes at most), then none at all: a run held
    at work for as long as its test needs, however loaded the machine."""
    return [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 120_000, "until_file": str(release)}}
            for i in range(n)]  # fmt: skip


class _ReleasingOnFirstWrite(io.StringIO):
    """A progress stream that creates ``release`` once the first line is written to it: what :func:`_held_rows` held
    ends then, not before."""

    def __init__(self, release: Path) -> None:
        super().__init__()
        self.release = release

    def write(self, text: str) -> int:
        written = super().write(text)
        self.release.touch()
        return written


@pytest.fixture
def slow_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunStore]:
    """A store with one worker process of its own (concurrency 1) that loads the ``slow_exact`` plug-in."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        yield connect(server.url)
    finally:
        worker.stop()
        server.stop()


@pytest.fixture
def release(tmp_path: Path) -> Iterator[Path]:
    """The path :func:`_held_rows` wait on; created as the test ends at the latest (before its worker's stop, which
    then need not wait on them: asked after ``slow_worker``, it is torn down first)."""
    path = tmp_path / "release"
    yield path
    path.touch()


SLOW_SUITE = {"metrics": ["slow_exact"], "chunk_size": {"cpu": 10}}


def test_a_run_queued_behind_another_runs_messages_has_its_status_rate_from_when_its_work_began(
    slow_worker: RunStore, tmp_path: Path
) -> None:
    """Two runs on one worker: the second waits until the first's messages are taken (the queues are first come,
    first served). Its status gave its units over the time since its submission, the wait included: under a third
    of its pace (60 units in ~11 s, not ~3 s), with an ETA as many times too long while it ran."""
    from orchestrator.runner import submit, wait

    store, suite = slow_worker, load_suite(SLOW_SUITE)
    first = submit(write_jsonl(tmp_path / "first.jsonl", _slow_rows(160)), suite, store).run_id
    second = submit(write_jsonl(tmp_path / "second.jsonl", _slow_rows(60)), suite, store).run_id
    for run_id, items in ((first, 160), (second, 60)):
        assert wait(store, run_id, timeout_s=180).items == items
    pace = 1000 / 50  # at most: the worker sleeps 50 ms an item
    # Its work began once the worker had done the first run's (one process, first come first served), and ended
    # within the second after its own last work: 60 units in no longer than that. Counted from its submission, its
    # rate took in the first run's work too (160 units ahead of its 60): well under this, however loaded the machine.
    at_most_s = _worked_at(store, second) + 1.0 - _worked_at(store, first)
    assert 60 / at_most_s < _status_rate(store, second) <= pace, (_status_rate(store, second), at_most_s)


def test_a_resumed_runs_status_rate_is_its_own_attempts_work_over_its_own_time(
    slow_worker: RunStore, tmp_path: Path
) -> None:
    """A run cancelled part-way, resumed after a pause: its status counted every unit, those of its first attempt
    too, over the time since its first submission, the pause included (a quarter of its pace here). An attempt's
    rate is its own units over its own time."""
    from orchestrator.runner import cancel, resume, submit, wait

    store = slow_worker
    run_id = submit(write_jsonl(tmp_path / "d.jsonl", _slow_rows(100)), load_suite(SLOW_SUITE), store).run_id
    assert until(lambda: store.progress(run_id).get("done", 0) >= 20, 120)
    cancel(store, run_id)
    assert wait(store, run_id, timeout_s=60).state == RunState.CANCELLED
    time.sleep(8.0)  # not at work
    left = 100 - store.progress(run_id).get("done", 0)  # the resumed attempt's units
    resume(store, run_id)
    assert wait(store, run_id, timeout_s=120).state == RunState.FINISHED
    pace = 1000 / 50
    # The attempt's work began after the resume and ended within the second after its last work: its units in no
    # longer than that. Counted since the first submission, the pause included, its rate was well under this.
    at_most_s = _worked_at(store, run_id) + 1.0 - float(store.meta(run_id)["resumed_at"])
    assert left / at_most_s < _status_rate(store, run_id) <= pace, (_status_rate(store, run_id), left, at_most_s)


def test_a_run_queued_behind_another_runs_messages_has_its_live_rate_from_when_its_work_began(
    slow_worker: RunStore, tmp_path: Path
) -> None:
    """`ragscore run`'s progress, followed from its submission on a worker busy with another run's messages: its
    rate counted from the start of the following, the wait included (60 units over ~11 s, not ~3 s)."""
    import io
    import re

    from orchestrator.progress import PlainProgress
    from orchestrator.runner import submit, wait

    store, suite = slow_worker, load_suite(SLOW_SUITE)
    first = submit(write_jsonl(tmp_path / "first.jsonl", _slow_rows(160)), suite, store).run_id
    second = submit(write_jsonl(tmp_path / "second.jsonl", _slow_rows(60)), suite, store).run_id
    out = io.StringIO()
    assert wait(store, second, timeout_s=180, progress=PlainProgress(out)).items == 60
    followed_s = time.time()  # the last line's rate counts to a poll before this
    assert wait(store, first, timeout_s=60).items == 160
    # the last progress line: a poll that sees the run aggregating adds a note after it (under load)
    bars = [line for line in out.getvalue().splitlines() if " ETA " in line]
    match = re.search(r" ([\d.]+)/s ETA ", bars[-1]) if bars else None
    assert match, out.getvalue()
    pace = 1000 / 50  # at most: the worker sleeps 50 ms an item
    # Its work began once the worker had done the first run's (one process, first come first served): 60 units in no
    # longer than from then to the end of the following. From the start of the following, the first run's work too.
    at_most_s = followed_s - _worked_at(store, first)
    least = float(f"{60 / at_most_s:.1f}")  # as the line shows a rate: one decimal
    assert least <= float(match.group(1)) <= pace, (at_most_s, out.getvalue())


def test_a_run_queued_behind_another_runs_messages_says_so_until_its_work_begins(
    slow_worker: RunStore, release: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run submitted after another run's backlog waits for it (the queues are first come, first served): its
    progress showed no ETA and, after 10 s, "no progress for N s", its status no ETA either, as if it had stalled.
    Both say it is queued, and behind how many of the other run's messages, until its work begins; the run ahead,
    simply running, is never said to be queued. Neither the stall recovery nor the consumer check takes the wait
    for a stall or for a queue no worker serves."""
    import re
    import threading

    from orchestrator.progress import PlainProgress
    from orchestrator.runner import submit, wait
    from ragscore_workers.app import app

    store, suite = slow_worker, load_suite(SLOW_SUITE)
    # the fixture does not wait for its worker to boot: till it answers, no worker consumes cpu (rightly said)
    assert until(lambda: bool(app.control.inspect(timeout=1.0).active_queues()), 60)
    first = submit(write_jsonl(tmp_path / "first.jsonl", _held_rows(300, release)), suite, store).run_id  # 30 messages
    second = submit(write_jsonl(tmp_path / "second.jsonl", _slow_rows(200)), suite, store).run_id  # ~10 s
    queued = re.compile(r"queued: (\d+) messages? of other runs ahead on queue cpu")
    waiting = _cli("status", second, "--broker", _url(store))
    assert waiting.returncode == 0, waiting.stderr
    said = queued.search(" ".join(waiting.stdout.split()))
    assert said and 1 <= int(said.group(1)) <= 30, waiting.stdout
    assert "no progress" not in waiting.stdout and "no worker consumes" not in waiting.stdout, waiting.stdout
    running = _cli("status", first, "--broker", _url(store))
    assert running.returncode == 0 and "queued" not in running.stdout, running.stdout
    begun: list[subprocess.CompletedProcess[str]] = []

    def status_once_begun() -> None:
        if until(lambda: "work_ms" in store.progress(second), 120):
            begun.append(_cli("status", second, "--broker", _url(store)))

    looker = threading.Thread(target=status_once_begun)
    looker.start()
    out = _ReleasingOnFirstWrite(release)
    assert wait(store, second, PlainProgress(out), timeout_s=180, stall_s=2, consumer_check_s=1).items == 200
    looker.join()
    lines = out.getvalue().splitlines()
    assert queued.search(lines[0]), out.getvalue()  # the first line: a moment after its submission
    assert "queued" not in lines[-1] and "no progress" not in out.getvalue(), out.getvalue()
    (status,) = begun
    assert status.returncode == 0 and "queued" not in status.stdout, status.stdout
    logged = [r.getMessage() for r in caplog.records]
    assert not [m for m in logged if "re-submitting" in m or "no worker consumes" in m], logged
    assert wait(store, first, timeout_s=60).items == 300


def _url(store: RunStore) -> str:
    """The URL of the store's Redis (the slow worker's own server)."""
    kwargs = store.r.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def test_the_messages_ahead_of_a_queued_run_are_read_within_bounds_from_the_queues_oldest_end(tmp_path: Path) -> None:
    """A queue of a million messages must not be read whole every few seconds: past the bounds, the count is a floor
    ("over N"), given only where the run's messages are found at the queue's newest end."""
    from orchestrator.queues import Ahead, queued_ahead, queued_message

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        store.create_run("r-late", {"state": "running", "queues": json.dumps(["cpu", "judge"]), "generation": 0})
        broker = store.broker
        broker.lpush("cpu", *[f'{{"body": "{"x" * 1000}", "argsrepr": "r-big {i}"}}' for i in range(40)])
        broker.lpush("cpu", *[f'{{"argsrepr": "r-late {i}"}}' for i in range(3)], '{"argsrepr": "r-later"}')
        broker.lpush("judge", '{"argsrepr": "r-late 0"}')  # nothing ahead of it there
        assert queued_ahead(store, "r-late") == {"cpu": Ahead(40)}
        assert queued_ahead(store, "r-late", most=25) == {"cpu": Ahead(25, more=True)}
        assert queued_ahead(store, "r-late", budget=10_000) == {"cpu": Ahead(10, more=True)}  # 10 of ~1 KB read
        assert queued_message({"cpu": Ahead(12_345), "judge": Ahead(1_500, more=True)}) == (
            "queued: 12,345 messages of other runs ahead on queue cpu (over 1,500 on judge)"
        )
        store.create_run("r-none", {"state": "running", "queues": json.dumps(["cpu"]), "generation": 0})
        assert queued_ahead(store, "r-none", most=25) == {}  # none of its messages waits: not said to be queued
        # A broker Redis that refuses scripts (an ACL, a managed service): no note, never a failed run.
        store.r.execute_command("ACL", "SETUSER", "noscripts", "on", ">pw", "~*", "&*", "+@all", "-@scripting")
        refused = RunStore(store.r, store.ttl_s, broker=redis.Redis.from_url(
            server.url.replace("redis://", "redis://noscripts:pw@", 1)))  # fmt: skip
        with pytest.raises(redis.ResponseError):  # the refusal is real
            refused.broker.eval("return 1", 0)
        assert queued_ahead(refused, "r-late") == {}
        store.work_began("r-late", 0)  # a worker took one of its tasks
        assert queued_ahead(store, "r-late") == {}
    finally:
        server.stop()


def test_a_wait_whose_view_shows_no_queued_note_does_not_read_the_queues_for_one(tmp_path: Path) -> None:
    """A quiet run (``--quiet``, ``evaluate(quiet=True)``, a user's view without ``queued``) has nobody to tell what
    it waits behind: its wait read up to 10,000 messages or 8 MiB from each end of each of its queues every 5 s
    anyway, tens of milliseconds of the shared Redis each time, for nothing."""
    from orchestrator.progress import PlainProgress, QuietProgress
    from orchestrator.runner import wait

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        store.create_run("r-late", {"state": "running", "queues": json.dumps(["cpu"]), "generation": 0})
        store.broker.lpush("cpu", *[f'{{"argsrepr": "r-big {i}"}}' for i in range(40)], '{"argsrepr": "r-late 0"}')

        def scripts_run() -> int:
            stats = store.broker.info("commandstats")
            return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("eval", "evalsha"))

        before = scripts_run()
        with pytest.raises(TimeoutError):
            wait(store, "r-late", QuietProgress(), timeout_s=1.0, stall_s=3600, consumer_check_s=3600)
        assert scripts_run() == before
        with pytest.raises(TimeoutError):  # a view that shows it: read
            wait(store, "r-late", PlainProgress(io.StringIO()), timeout_s=1.0, stall_s=3600, consumer_check_s=3600)
        assert scripts_run() > before
    finally:
        server.stop()


def test_the_control_queue_is_not_scanned_for_a_queued_run(tmp_path: Path) -> None:
    """A run's aggregation goes to the control queue only once its work is done: other runs' messages there are
    never ahead of its work, and scanning them cost a script of up to 8 MiB every 5 s for nothing."""
    from orchestrator.queues import Ahead, queued_ahead

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        store.create_run("r-late", {"state": "running", "queues": json.dumps(["cpu"]), "generation": 0})
        store.broker.lpush("cpu", '{"argsrepr": "r-big 0"}', '{"argsrepr": "r-late 0"}')
        store.broker.lpush("control", *[f'{{"argsrepr": "r-other {i}"}}' for i in range(5)])

        def scripts_run() -> int:
            stats = store.broker.info("commandstats")
            return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("eval", "evalsha"))

        assert queued_ahead(store, "r-late") == {"cpu": Ahead(1)}  # the script loaded (a first call runs it twice)
        before = scripts_run()
        assert queued_ahead(store, "r-late") == {"cpu": Ahead(1)}
        assert scripts_run() - before == 1  # cpu's scan alone
    finally:
        server.stop()


def test_a_cluster_run_into_the_dir_of_a_finished_one_moves_its_reports_to_previous(
    cluster: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cluster run replaced the reports of the finished run in its DIR (the warning said `ragscore results RUN
    --out OTHER_DIR` writes them again, true only while the store keeps that run): they are moved into
    DIR/previous/RUN_ID/, as an embedded run's are."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(6))
    resolved = load_suite({"metrics": ["exact_match"]})
    first = run(data, resolved, tmp_path / "o", broker=cluster).run_id
    items = (tmp_path / "o" / "items.jsonl").read_bytes()
    with caplog.at_level("WARNING", logger="orchestrator.runner"):
        second = run(data, resolved, tmp_path / "o", broker=cluster).run_id
    previous = tmp_path / "o" / "previous" / first
    assert f"held the reports of run {first}: moved to {previous}/" in caplog.text, caplog.text
    assert (previous / "items.jsonl").read_bytes() == items
    assert json.loads((previous / "run.json").read_text())["run_id"] == first
    assert json.loads((tmp_path / "o" / "run.json").read_text())["run_id"] == second
