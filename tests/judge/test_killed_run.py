"""kill -9 of an embedded ``ragscore run`` while it judges under a slow rate limit (real CLI, real workers, real HTTP
to the fake provider): its judge worker stops within seconds and calls the provider no more."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ..fakes import FakeProvider
from ..support import ROOT, celery_workers, command_line, until, write_jsonl

# serial: its judge worker must stop within seconds (GONE_WITHIN_S)
pytestmark = [pytest.mark.integration, pytest.mark.serial]

#: How long the killed run's workers may take to go (seconds, not the minutes a warm shutdown takes).
GONE_WITHIN_S = 20


def _alive(proc: psutil.Process) -> bool:
    """Still running (a zombie nobody reaped has ended)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _judge_worker(workers: list[psutil.Process]) -> psutil.Process | None:
    return next((proc for proc in workers if "judge,control" in command_line(proc)), None)


def test_a_killed_runs_judge_worker_stops_within_seconds_and_calls_the_provider_no_more(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """The judge worker (threads pool) got the SIGTERM its dead parent asked for, and shut down warmly: it waited
    for every judge chunk it held, which under rpm 20 took minutes, and went on paying for calls (20-48 after the
    kill) long after its `ragscore run` and private Redis were gone."""
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"}
            for i in range(120)]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    with FakeProvider(api_key=keys, latency_s=1.0) as fake:
        suite = tmp_path / "suite.json"
        judge = {"model": model, "base_url": fake.url, "rpm": 20, "tpm": None}
        spec = {"name": "answer_accuracy", "params": {"attempts": 1}}
        suite.write_text(json.dumps({"metrics": [spec], "chunk_size": {"judge": 4}, "judge": judge}))
        env = {**os.environ, "RAGSCORE_HOME": str(home)}
        env.pop("RAGSCORE_BROKER_URL", None)
        cli = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--out",
               str(tmp_path / "out"), "--no-cache", "--quiet"]  # fmt: skip
        run = subprocess.Popen(cli, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        workers: list[psutil.Process] = []
        try:
            seen: list[tuple[list[psutil.Process], psutil.Process]] = []

            def judge_started() -> bool:
                """One look at the run's workers, kept when it holds the judge worker: a second look could miss
                it (CI saw None there, right after the first look found it)."""
                now = celery_workers(run.pid)
                judge = _judge_worker(now)
                if judge is not None:
                    seen.append((now, judge))
                return judge is not None

            assert until(judge_started, 60), "no judge worker started"
            workers, judge_worker = seen[0]
            assert until(lambda: fake.stats().get("requests", 0) >= 1, 60), "the judge never called the provider"
            window_opens = time.monotonic() + 60  # rpm 20: the first 20 calls go at once, the next a minute later
            # as the user saw it: the first calls answered, every judge thread waiting for the rate limit
            assert until(lambda: fake.stats().get("requests", 0) >= 20 and not fake.in_flight, 30)
            killed_at = fake.stats()["requests"]
            run.send_signal(signal.SIGKILL)
            run.wait(10)
            started = time.monotonic()
            gone = until(lambda: not _alive(judge_worker), GONE_WITHIN_S)
            took = time.monotonic() - started
            assert gone, f"the judge worker outlived its killed run by over {GONE_WITHIN_S} s"
            time.sleep(max(0.0, window_opens + 5 - time.monotonic()))  # the limiter would have let more calls go
            after = fake.stats()["requests"] - killed_at
            assert after == 0, f"{after} provider calls after the kill"
            assert until(lambda: not [w for w in workers if _alive(w)], 10), "another worker outlived its run"
            assert took < GONE_WITHIN_S
        finally:
            if run.poll() is None:
                run.kill()
            for proc in workers:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            from orchestrator.embedded_redis import EmbeddedRedis

            EmbeddedRedis(home).release()  # the private Redis the killed run left up
