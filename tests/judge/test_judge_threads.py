"""``judge_threads`` (``ragscore run --judge-threads``): the threads of an embedded run's local judge worker, read from
the real worker while it judges (Celery's ``inspect stats``), and refused where it cannot apply."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator import evaluate, resume, shutdown
from ragscore_workers.app import app
from ragscore_workers.errors import ConfigError, DatasetWarning

from ..fakes import FakeProvider
from ..support import ROOT, write_jsonl

pytestmark = pytest.mark.integration

ROWS = [{"id": f"q{i}", "question": f"Q{i}?", "reference": "r", "answer": f"a{i} [[rating=4]]"} for i in range(4)]


def _local_workers() -> list[tuple[str, str]]:
    """(queue, broker URL) of each of this process's local Celery worker processes alive now (a pool's too)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:  # a child may end while read (a worker's own helper process)
            argv = proc.cmdline()
            if "celery" in argv and "-Q" in argv:
                found.append((argv[argv.index("-Q") + 1].split(",")[0], proc.environ()["RAGSCORE_BROKER_URL"]))
        except psutil.Error:
            continue
    return found


def _judge_worker_pools() -> dict[str, dict[str, Any]]:
    """Node name -> pool stats (``inspect stats``) of this process's embedded judge workers, asked on their broker."""
    pools = {}
    for broker in {broker for queue, broker in _local_workers() if queue == "judge"}:
        with app.connection_for_write(broker) as conn:
            stats = app.control.inspect(timeout=5, connection=conn).stats() or {}
        pools |= {node: stats[node]["pool"] for node in stats if node.startswith("judge-")}
    return pools


def test_the_local_judge_worker_runs_judge_threads_threads(home: Path, keys: str, tmp_path: Path, model: str) -> None:
    """judge_threads=3: the judge worker that answers the run reports a pool of 3 threads. Seen failing before:
    evaluate() took no judge_threads (the worker ran the default 32)."""
    pools: dict[str, dict[str, Any]] = {}

    def responder(prompt: str, nth: int) -> str | None:
        deadline = time.monotonic() + 45  # under the call's timeout_s (60 s): a busy machine's worker answers late
        while not pools and time.monotonic() < deadline:  # while the run judges: its worker is up
            pools.update(_judge_worker_pools())
        return None  # the prompt's [[rating=4]] answers

    with FakeProvider(api_key=keys, responder=responder) as fake:
        judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
        suite = {"name": "threads", "metrics": ["answer_accuracy"], "judge": judge}
        result = evaluate(ROWS, suite, out=tmp_path / "out", quiet=True, judge_threads=3)
    assert result.summary.metrics["answer_accuracy"].n == len(ROWS)
    assert [pool["max-concurrency"] for pool in pools.values()] == [3], pools


@pytest.mark.parametrize("threads", [0, -2, 1.5, True, "4"])
def test_judge_threads_not_a_whole_number_of_at_least_1_is_refused(home: Path, tmp_path: Path, threads: Any) -> None:
    """Named as given. Seen failing before: judge_threads=0 was said as judge_threads='0', a string's look."""
    said = re.escape(f"judge_threads={threads!r}: the local judge worker's threads are a whole number")
    with pytest.raises(ConfigError, match=said):  # as given: 0, not '0' (a string is refused too)
        evaluate(ROWS, {"metrics": ["exact_match"]}, out=tmp_path / "out", quiet=True, judge_threads=threads)
    assert not (tmp_path / "out" / "run.json").exists()


def test_judge_threads_of_a_cluster_run_is_refused(tmp_path: Path, redis_server: Any) -> None:
    with pytest.raises(ConfigError, match="judge_threads= sets the threads of an embedded run's local judge worker"):
        evaluate(ROWS, {"metrics": ["exact_match"]}, redis_server.url, out=tmp_path / "out", quiet=True,
                 judge_threads=2)  # fmt: skip


def test_judge_threads_of_a_run_without_judge_work_is_warned_of(home: Path, tmp_path: Path) -> None:
    """A suite with no judge metric starts no judge worker: judge_threads= is said to have no effect, and the run
    scores; said once (before its first task is sent). Seen failing before: it was taken silently."""
    with pytest.warns(DatasetWarning, match=re.escape("judge_threads= has no effect: the run has no judge work")) as w:
        result = evaluate(ROWS, {"metrics": ["exact_match"]}, out=tmp_path / "out", quiet=True, judge_threads=2)
    assert result.summary.metrics["exact_match"].n == len(ROWS)
    assert len([said for said in w if "has no effect" in str(said.message)]) == 1, [str(s.message) for s in w]


def test_judge_threads_of_a_new_run_without_judge_work_is_warned_of_before_it_sends_work(
    home: Path, tmp_path: Path
) -> None:
    """A new run's queues are known once its rows validated: the warning comes before its first task is sent, so a
    filter that makes it an error (``-W error``) refuses the run, no reports written (its run.json neither). Seen
    failing before: it came once the reports were written, and said no worker "is started" of a run that was over."""
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetWarning)
        with pytest.raises(DatasetWarning, match=re.escape("judge_threads= has no effect: the run has no judge work")):
            evaluate(ROWS, {"metrics": ["exact_match"]}, out=out, quiet=True, judge_threads=2)
    assert not (out / "summary.json").exists() and not (out / "run.json").exists()


def test_the_command_line_refuses_judge_threads_below_1(tmp_path: Path, home: Path) -> None:
    """``ragscore run --judge-threads 0`` exits 2 naming the option, before anything runs."""
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    suite = tmp_path / "s.json"
    suite.write_text('{"metrics": ["exact_match"]}')
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite),
                           "--judge-threads", "0", "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "--judge-threads" in done.stderr, done.stderr


def test_ragscore_resume_takes_judge_threads(home: Path, keys: str, tmp_path: Path, model: str) -> None:
    """``ragscore resume DIR --judge-threads 2``, as ``run --resume`` and ``resume()`` take it: the items a budget
    stopped are judged by a worker of 2 threads. Seen failing before: "No such option: --judge-threads" (exit 2)."""
    pools: dict[str, dict[str, Any]] = {}
    armed = False

    def responder(prompt: str, nth: int) -> str | None:
        deadline = time.monotonic() + 45  # as above
        while armed and not pools and time.monotonic() < deadline:
            pools.update(_judge_worker_pools())
        return None

    out = tmp_path / "out"
    with FakeProvider(api_key=keys, responder=responder) as fake:
        judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
        metric = {"name": "answer_accuracy", "params": {"concurrency": 1, "max_tokens_total": 300}}
        first = evaluate(ROWS, {"name": "threads", "metrics": [metric], "judge": judge}, out=out, quiet=True)
        assert first.summary.metrics["answer_accuracy"].stopped >= 1
        shutdown()  # the call's judge worker, kept for this process's next call: the pools below are the resume's
        armed = True
        env = {**os.environ, "RAGSCORE_HOME": str(home)}
        env.pop("RAGSCORE_BROKER_URL", None)
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "resume", str(out), "--max-tokens", "1000000",
                               "--judge-threads", "2", "--quiet"], capture_output=True, text=True, cwd=ROOT, env=env,
                              timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [pool["max-concurrency"] for pool in pools.values()] == [2], pools


def test_a_resume_whose_judge_is_done_starts_no_judge_worker(home: Path, keys: str, tmp_path: Path, model: str) -> None:
    """Every item judged, a cpu metric's error left (a typed answer's malformed ``expected``): the resume starts a
    cpu worker alone (the workers it keeps, read as processes), and its judge_threads= is said to have no effect.
    Seen failing before: the resume started a judge worker for nothing, and took judge_threads= silently."""
    rows = [row | {"question_type": "Yes/No", "expected": "yes"} for row in ROWS]
    rows[0]["expected"] = "Paris"  # not one yes or one no: typed_answer's error for that item
    out = tmp_path / "out"
    with FakeProvider(api_key=keys) as fake:
        judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
        suite = {"name": "done", "metrics": ["typed_answer", "answer_accuracy"], "judge": judge}
        first = evaluate(rows, suite, out=out, quiet=True)
        assert first.summary.metrics["typed_answer"].errors == 1
        assert first.summary.metrics["answer_accuracy"].n == len(ROWS)
        shutdown()  # the call's workers, kept for this process's next call: those alive below are the resume's
        try:
            unused = "judge_threads= had no effect: the resume sent no judge work (no judge metric scores its rows, or"
            with pytest.warns(DatasetWarning, match=re.escape(unused)) as w:  # said once it ended, in the past
                again = resume(out, quiet=True, judge_threads=2)
            assert len([said for said in w if "no effect" in str(said.message)]) == 1, [str(s.message) for s in w]
            assert again.summary.metrics["typed_answer"].errors == 1
            assert {queue for queue, _ in _local_workers()} == {"cpu"}  # its prefork children too
        finally:
            shutdown()


def test_a_resume_whose_counters_say_the_judge_is_done_still_judges_what_is_missing(
    home: Path, keys: str, tmp_path: Path, model: str
) -> None:
    """The progress counters say every item is judged, the store lacks one judge output (its hash field removed):
    the resume starts no judge worker up front (from the counters), then one for the judge task its look-up sends,
    and the run finishes with every item judged; its judge_threads= judged it, so no warning says it had no effect.
    Seen failing before: the judge task waited on a queue no local worker served, and the run hung until its time
    limit; then judge_threads= was said to have no effect (from the counters, before the look-up)."""
    from orchestrator.caller import PYTHON
    from orchestrator.embedded_redis import EmbeddedRedis
    from orchestrator.runner import run
    from ragscore_workers.store import RunStore

    rows = [row | {"question_type": "Yes/No", "expected": "yes"} for row in ROWS]
    rows[0]["expected"] = "Paris"  # a cpu metric's error: the resume has a cpu queue to start
    out = tmp_path / "out"
    with FakeProvider(api_key=keys) as fake:
        judge = {"model": model, "base_url": fake.url, "rpm": None, "tpm": None}
        suite = {"name": "miscounted", "metrics": ["typed_answer", "answer_accuracy"], "judge": judge}
        first = evaluate(rows, suite, out=out, quiet=True)
        assert first.summary.metrics["answer_accuracy"].n == len(ROWS)
        shutdown()  # the server released: its store is edited below, and the resume starts its own workers
        run_id = json.loads((out / "run.json").read_text())["run_id"]
        embedded = EmbeddedRedis(home)
        embedded.acquire()
        try:
            store = RunStore(embedded.client, ttl_s=3600)
            item = sorted(store.r.keys(store.key(run_id, "item:*")))[0]
            judged = [field for field in store.r.hkeys(item) if field.startswith("answer_accuracy")]
            assert judged and store.r.hdel(item, *judged) == len(judged)  # the counters still say it is judged
        finally:
            embedded.release()
        try:  # a time limit, not a timed assert: a hang fails the test (TimeoutError) instead of stalling the suite
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", DatasetWarning)
                summary = run(None, None, out, resume_id=run_id, caller=PYTHON, keep_warm=True, timeout_s=600,
                              judge_threads=2)  # fmt: skip
        finally:
            shutdown()
        assert summary.metrics["answer_accuracy"].n == len(ROWS)  # judged again (the reply cache may answer it)
        said = [str(w.message) for w in caught if issubclass(w.category, DatasetWarning)]
        assert not [text for text in said if "no effect" in text], said
