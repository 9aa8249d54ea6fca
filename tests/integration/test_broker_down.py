"""A cluster whose run store (RAGSCORE_STORE_URL) is one Redis and whose broker is another, down: the commands that
need the broker say so at once, naming it, and what they could do without it is done."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import runner
from orchestrator.suite import load_suite
from ragscore_workers.errors import BrokerError
from ragscore_workers.settings import get_settings
from ragscore_workers.store import RunState, RunStore

from ..support import RedisProcess, make_rows, write_jsonl

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match"], "chunk_size": {"cpu": 5}}


@pytest.fixture
def apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunStore, str, str]]:
    """``(store, broker URL, run id)``: a run submitted (no worker: it stays running) through a broker apart from
    its store, then the broker stopped. RAGSCORE_STORE_URL names the store, as a cluster's commands read it."""
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    monkeypatch.setattr(runner, "CONNECT_RETRY_S", 1.0)  # the retries of the broker that does not answer, short
    try:
        store = runner.connect(broker.url, get_settings(), sends=True)
        sub = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store)
        broker.stop()
        yield store, broker.url, sub.run_id
    finally:
        broker.stop()
        store_server.stop()


def test_status_of_a_live_run_shows_its_progress_and_says_the_broker_could_not_be_reached(
    apart: tuple[RunStore, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Its queues' notes read the broker, whose client retried ~20 s and ended with redis-py's ConnectionError."""
    from orchestrator.cli import status

    _, broker, run_id = apart
    status(run_id, broker=broker)
    said = " ".join(capsys.readouterr().out.split())
    assert f"run {run_id}: running" in said and "cpu" in said, said
    assert f"the broker's Redis at {broker} could not be reached" in said, said


def test_cancel_marks_the_run_cancelled_then_says_its_summary_waits_for_the_broker(
    apart: tuple[RunStore, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cancel marked the run, then summarizing it reached the broker unprobed: a ConnectionError after ~20 s. The
    results of the cancelled run, with no summary, did the same."""
    from orchestrator.cli import cancel_cmd, results, status

    store, broker, run_id = apart
    with pytest.raises(BrokerError) as cancelled:
        cancel_cmd(run_id, broker=broker)
    said = str(cancelled.value)
    assert store.state(run_id) == RunState.CANCELLED
    assert said.startswith(f"Cannot use the broker's Redis at {broker}"), said
    assert f"Connection refused. Run {run_id} is cancelled" in said, said  # one stop between the two sentences
    assert f"`ragscore results {run_id} --out DIR`" in said, said
    with pytest.raises(BrokerError) as no_summary:
        results(run_id, out=tmp_path / "out", broker=broker, quiet=True)
    said = str(no_summary.value)
    assert said.startswith(f"Cannot use the broker's Redis at {broker}"), said
    assert f"Run {run_id} is cancelled" in said and "summary" in said, said
    status(run_id, broker=broker)  # a cancelled run's resume names the broker it was watched with
    said = " ".join(capsys.readouterr().out.split())
    assert f"`ragscore resume {run_id} --out DIR --broker {broker}` scores it" in said, said
