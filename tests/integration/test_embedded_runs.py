"""Embedded runs whose process was killed, cut off or doubled: what ``cancel``, ``results`` and ``--resume`` do."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ..support import ROOT, write_jsonl
from .test_embedded_redis import _hold_a_run, _release

pytestmark = pytest.mark.integration


def _cli(held_env: dict[str, str], cli: list[str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*cli, *args], capture_output=True, text=True, cwd=ROOT, env=held_env, timeout=timeout)


def test_cancel_writes_the_summary_of_a_killed_run_whose_lane_another_run_took(tmp_path: Path) -> None:
    """kill -9 of an embedded run, then another run took its lane (dropping what it had queued there): nothing of
    it was queued or held any more, so `ragscore cancel` wrote no summary and `ragscore results DIR` waited 2
    minutes and exited 1 without reports. Nobody holds or will run its work: the cancel writes its summary."""
    rows = [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 30}} for i in range(300)]
    held = _hold_a_run(tmp_path, rows, stderr=subprocess.DEVNULL)
    _release(held)  # kill -9: the run's process and its workers
    data = write_jsonl(tmp_path / "other.jsonl", rows[:10])
    other = _cli(held.env, held.cli, "run", str(data), "--suite", str(tmp_path / "s.json"), "--out",
                 str(tmp_path / "other"), "--quiet")  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert "dropped what a killed ragscore run left queued there" in other.stderr, other.stderr
    cancelled = _cli(held.env, held.cli, "cancel", str(held.out), timeout=120)
    assert cancelled.returncode == 0, cancelled.stderr
    results = _cli(held.env, held.cli, "results", str(held.out), timeout=300)
    assert results.returncode == 1 and f"run {held.run_id} was cancelled" in results.stderr, results.stderr
    assert "waiting up to" not in results.stderr, "the cancel wrote the summary: nothing to wait for"
    summary = json.loads((held.out / "summary.json").read_text())
    assert summary["state"] == "cancelled" and summary["items"] == 300


def test_resume_of_an_embedded_run_its_own_process_still_runs_is_refused_naming_that_process(tmp_path: Path) -> None:
    """`ragscore run --resume DIR` while the run's `ragscore run` still ran it sent all its unscored work again (judge
    calls paid twice) and both processes wrote reports into DIR. Refused now, exit 2, nothing sent, saying which
    process runs it and what to do."""
    from orchestrator.embedded_redis import EmbeddedRedis

    rows = [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 5}} for i in range(100)]
    held = _hold_a_run(tmp_path, rows, stderr=subprocess.DEVNULL)
    try:
        env, other = {**held.env, "COLUMNS": "300"}, tmp_path / "other"
        for how in (("run", "--resume", str(held.out)), ("resume", held.run_id, "--out", str(other))):
            resumed = _cli(env, held.cli, *how, "--quiet", timeout=120)
            said = " ".join(resumed.stderr.split())
            assert resumed.returncode == 2, resumed.stderr
            assert f"process {held.proc.pid} " in said or f"(pid {held.proc.pid} " in said, said
            assert f"ragscore cancel {held.out if how[0] == 'run' else held.run_id}" in said, said
        assert f"Run {held.run_id} is still running in process {held.proc.pid}" in said, "its own DIR's claim aside"
        assert not other.exists()
        meta = EmbeddedRedis(held.home).client.hgetall(f"ragscore:run:{held.run_id}:meta")
        assert meta["state"] == "running" and meta["generation"] == "0", "nothing was sent again"
        assert not (held.out / "summary.json").exists()
    finally:
        _release(held)
        EmbeddedRedis(held.home).release()  # its private Redis, which the killed run left up


def test_two_runs_started_at_once_into_one_out_dir_one_is_refused(tmp_path: Path) -> None:
    """Both passed the "DIR holds an unfinished run" check (DIR/run.json is written only once the dataset
    validated), both exited 0, and DIR held one run's reports: the other's were lost. DIR is claimed first now: the
    second is refused at once (exit 2), the first writes its reports there."""
    import os
    import sys

    from ..support import make_rows

    data = write_jsonl(tmp_path / "d.jsonl", make_rows(20000))
    suite = tmp_path / "s.json"
    suite.write_text(json.dumps({"metrics": ["exact_match"], "chunk_size": {"cpu": 500}}))
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out", str(out), "-q"]
    procs = [subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]  # fmt: skip
    said = [proc.communicate(timeout=300)[1] for proc in procs]
    codes = sorted(proc.returncode for proc in procs)
    assert codes == [0, 2], said
    refused = " ".join(said[[proc.returncode for proc in procs].index(2)].split())
    assert f"{out} is in use by another ragscore process" in refused, refused
    recorded = json.loads((out / "run.json").read_text())["run_id"]
    assert json.loads((out / "summary.json").read_text())["run_id"] == recorded
    assert len((out / "items.jsonl").read_text().splitlines()) == 20000
