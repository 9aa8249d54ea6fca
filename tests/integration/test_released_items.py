"""An embedded run's items leave its store soon after its reports are in a folder that is kept: the laptop's Redis,
read back at every command's start, no longer keeps every item of every run for RAGSCORE_RUN_TTL_S (7 days)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from orchestrator import evaluate, resume
from orchestrator.embedded_redis import EmbeddedRedis
from orchestrator.runner import RELEASED_ITEMS_TTL_S
from ragscore_workers.settings import DEFAULT_RUN_TTL_S

from ..support import ROOT, make_rows, until, write_jsonl

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1]}}]}


@contextmanager
def _embedded_store(home: Path) -> Iterator[redis.Redis]:
    """The embedded Redis of ``home`` (started again from its data where the run stopped it), while it is held."""
    embedded = EmbeddedRedis(home)
    with embedded:
        yield embedded.client


def _ttls(client: redis.Redis, run_id: str) -> dict[str, int]:
    """The TTL of each kind of the run's keys: the lowest an item has, the highest; its meta's and summary's."""
    items = [client.ttl(key) for key in client.scan_iter(f"ragscore:run:{run_id}:item:*")]
    meta, summary = (client.ttl(f"ragscore:run:{run_id}:{part}") for part in ("meta", "summary"))
    return {"items": len(items), "item_min": min(items), "item_max": max(items), "meta": meta, "summary": summary}


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)  # fmt: skip


def test_a_finished_cli_runs_items_expire_soon_while_its_own_keys_keep_the_run_ttl(tmp_path: Path, home: Path) -> None:
    """Every item of a finished embedded run was kept 7 days though its reports were in its --out DIR: ~90 MB a
    50,000-row run, read back by every later command. Now its items leave an hour after; meta and summary stay."""
    data, suite, out = write_jsonl(tmp_path / "d.jsonl", make_rows(40)), tmp_path / "s.json", tmp_path / "out"
    suite.write_text(json.dumps(SUITE))
    done = _cli(home, "run", str(data), "--suite", str(suite), "--out", str(out), "--quiet")
    assert done.returncode == 0, done.stderr
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    with _embedded_store(home) as client:
        ttls = _ttls(client, run_id)
        meta = client.hgetall(f"ragscore:run:{run_id}:meta")
    assert ttls["items"] == 40 and 0 < ttls["item_min"] <= ttls["item_max"] <= RELEASED_ITEMS_TTL_S, ttls
    assert ttls["meta"] > RELEASED_ITEMS_TTL_S and ttls["summary"] > RELEASED_ITEMS_TTL_S, ttls
    assert ttls["meta"] <= DEFAULT_RUN_TTL_S, ttls
    assert meta["items_in"] == str(out.resolve())
    status = _cli(home, "status", run_id)
    assert status.returncode == 0 and "finished" in status.stdout + status.stderr, status.stderr


def test_an_evaluate_without_out_keeps_its_items_in_the_store(home: Path) -> None:
    """Its reports are in a temporary folder removed at exit: until then the store may be their only other copy."""
    result = evaluate(make_rows(20), SUITE, quiet=True)
    with _embedded_store(home) as client:
        ttls = _ttls(client, result.summary.run_id)
        released = client.hget(f"ragscore:run:{result.summary.run_id}:meta", "items_in")
    assert ttls["items"] == 20 and ttls["item_min"] > RELEASED_ITEMS_TTL_S, ttls
    assert released is None


def test_a_resume_in_an_evaluates_temporary_folder_keeps_its_items_in_the_store(home: Path) -> None:
    """``resume()`` of the folder an ``evaluate()`` without ``out=`` made (removed at exit) released the run's items
    as if the folder were kept: an hour later they were gone from both."""
    result = evaluate(make_rows(20), SUITE, quiet=True)
    again = resume(result.out_dir, quiet=True)
    assert again.summary.run_id == result.summary.run_id
    with _embedded_store(home) as client:
        ttls = _ttls(client, result.summary.run_id)
        released = client.hget(f"ragscore:run:{result.summary.run_id}:meta", "items_in")
    assert ttls["items"] == 20 and ttls["item_min"] > RELEASED_ITEMS_TTL_S, ttls
    assert released is None


def test_a_run_whose_items_expired_is_read_from_its_folder_and_says_so(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore report RUN_ID` of a run whose items had expired wrote a report of no scores and exited 0; its
    resume would have scored every item again. Both say where its reports are instead (exit 2)."""
    monkeypatch.setattr("orchestrator.runner.RELEASED_ITEMS_TTL_S", 1)
    out = tmp_path / "out"
    result = evaluate(make_rows(20), SUITE, out=out, quiet=True)
    run_id = result.summary.run_id
    with _embedded_store(home) as client:
        assert until(lambda: not list(client.scan_iter(f"ragscore:run:{run_id}:item:*")), timeout=30)
    said = []
    for args in (("report", run_id, "--out", str(tmp_path / "again")), ("run", "--resume", str(out))):
        refused = _cli(home, *args)
        said.append(" ".join(refused.stderr.split()))
        assert refused.returncode == 2, refused.stderr
        assert f"its items left the store once its reports were written to {out.resolve()}" in said[-1], said[-1]
    assert f"ragscore report {out.resolve()}" in said[0], said[0]
    assert not (tmp_path / "again").exists()
    from_dir = _cli(home, "report", str(out), "--format", "json", "--out", str(tmp_path / "from-dir"))
    assert from_dir.returncode == 0, from_dir.stderr
    assert len(result.items) == 20


def test_a_released_runs_items_are_kept_again_once_another_run_replaces_its_reports(tmp_path: Path, home: Path) -> None:
    """A second run into the same --out DIR replaces the first's reports (warning that `ragscore results` writes
    them again while the store keeps it): the first's items, released for that folder, went in the hour, lost."""
    out = tmp_path / "out"
    first = evaluate(make_rows(20), SUITE, out=out, quiet=True).summary.run_id
    evaluate(make_rows(10), SUITE, out=out, quiet=True)
    with _embedded_store(home) as client:
        ttls = _ttls(client, first)
        released = client.hget(f"ragscore:run:{first}:meta", "items_in")
    assert ttls["items"] == 20 and ttls["item_min"] > RELEASED_ITEMS_TTL_S, ttls
    assert released is None
