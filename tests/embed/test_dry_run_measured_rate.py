"""``ragscore run --dry-run`` estimates the encoding at the rate the latest runs measured: it assumed 5,000 words/s
whatever the host (~2.5 times optimistic on a busy 2-core machine) while every run recorded what its embed workers
measured (``encoded`` / ``encode_ms``). A real run with the real model, then dry runs that name and use its rate."""

from __future__ import annotations

import fcntl
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from orchestrator import encode_rates
from orchestrator.encode_rates import KEPT_RUNS, RATES_FILE, RECENT_RUNS, MeasuredRate, measured_rate, record_rate
from orchestrator.estimate import EmbedTally, Estimate, estimate_run
from orchestrator.progress import fmt_duration
from orchestrator.reports.console import embed_estimate
from orchestrator.suite import load_suite
from ragscore_workers.schemas import EmbeddingConfig
from ragscore_workers.store import RunStore

from ..support import ROOT, RedisProcess, WorkerProcess, closed_port, until, write_jsonl

SUITE = {"name": "embed-rate", "metrics": ["answer_correctness", "context_relevance"], "embedding": {"device": "cpu"}}
CPU = EmbeddingConfig(device="cpu")
CPU_SUITE = load_suite(SUITE).suite


def _rows(tag: str) -> list[dict[str, object]]:
    return [{"id": f"q{i}", "question": f"What is {tag} fact {i}?", "answer": f"{tag} fact {i} is an answer",
             "reference": f"{tag} fact {i} is the reference", "contexts": [f"{tag} context {i} of its own"]}
            for i in range(6)]  # fmt: skip


def _cli(tmp_path: Path, home: Path, *args: str | Path) -> str:
    """What ``ragscore run ARGS`` of SUITE prints (embedded: no broker), on one line."""
    (tmp_path / "s.json").write_text(json.dumps(SUITE))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "200"}
    env.pop("RAGSCORE_BROKER_URL", None)
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", *map(str, args), "--suite", str(tmp_path / "s.json")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


def test_a_dry_run_after_a_run_estimates_the_encoding_at_the_rate_it_measured(tmp_path: Path, home: Path) -> None:
    first = write_jsonl(tmp_path / "first.jsonl", _rows("alpha"))
    said = _cli(tmp_path, home, first, "--dry-run")
    assert "(assumed: 5,000 words/s, no earlier run of all-MiniLM-L6-v2 on device cpu measured one" in said, said

    _cli(tmp_path, home, first, "--out", tmp_path / "out", "-q")
    counters = json.loads((tmp_path / "out" / "summary.json").read_text())["embedding"]
    encoded, encode_ms = counters["encoded"], counters["encode_ms"]
    assert counters["encoders"] == {"cpu": {"workers": 1, "encoded": encoded, "encode_ms": encode_ms}}, counters
    rate = measured_rate(home, CPU, "embedded", workers=1)
    assert rate == MeasuredRate(runs=1, texts=encoded, encode_s=encode_ms / 1000, device="cpu", workers=1)
    assert measured_rate(home, CPU, "cluster") is None
    # the model ran on the CPU: a suite of device auto on this host (no GPU) is estimated at its rate too
    auto = measured_rate(home, EmbeddingConfig(), "embedded", workers=1)
    assert auto is not None and (auto.device, auto.texts) == ("cpu", encoded), auto

    second = write_jsonl(tmp_path / "second.jsonl", _rows("beta"))  # texts the run did not cache
    tally = estimate_run(second, load_suite(SUITE)).embed
    assert tally is not None and tally.to_encode > 0
    seconds = tally.to_encode / (encoded / (encode_ms / 1000))
    took = "under a second" if seconds < 1 else f"about {fmt_duration(seconds)}"
    said = _cli(tmp_path, home, second, "--dry-run")
    line = (
        f"{tally.to_encode} to encode: {took} (measured on your last run: {encoded / (encode_ms / 1000):,.1f} "
        f"texts/s with 1 embed worker, {encoded / (encode_ms / 1000):,.1f} each: {encoded} texts in "
        f"{encode_ms / 1000:,.1f} s of encoding summed over the workers that encoded them, all-MiniLM-L6-v2 on device "
        "cpu)"
    )
    assert line in said, said
    assert "assumed" not in said, said


def _encoded(texts: int, ms: int, device: str = "cpu", workers: int = 1) -> dict[str, Any]:
    """A summary's ``embedding`` of a run whose ``workers`` on ``device`` encoded ``texts`` in ``ms`` (summed)."""
    return {
        "encoded": texts,
        "encode_ms": ms,
        "encoders": {device: {"workers": workers, "encoded": texts, "encode_ms": ms}},
    }


def test_the_measured_rate_is_of_the_latest_runs_like_it(tmp_path: Path) -> None:
    """The last RECENT_RUNS runs of the same model, device and mode: older ones, others' and unreadable lines left out,
    and a run that encoded nothing recorded as nothing."""
    for n in range(1, RECENT_RUNS + 3):
        record_rate(tmp_path, f"r{n}", CPU, "embedded", _encoded(100 * n, 1000))
    record_rate(tmp_path, "c", CPU, "cluster", _encoded(5, 1))
    record_rate(tmp_path, "g", EmbeddingConfig(device="cuda"), "embedded", _encoded(5, 1, "cuda"))
    record_rate(tmp_path, "z", CPU, "embedded", {"encoded": 0, "encode_ms": 0, "cache_hits": 40})
    with open(tmp_path / RATES_FILE, "a") as out:
        out.write('{"model": "all-MiniLM-L6-v2", "device": "cpu", "mode": "embedded", "encoded": "x"}\nnot json\n')
    latest = range(3, RECENT_RUNS + 3)
    rate = MeasuredRate(RECENT_RUNS, sum(100 * n for n in latest), 5.0, "cpu", 1)
    assert measured_rate(tmp_path, CPU, "embedded", workers=1) == rate
    assert measured_rate(tmp_path / "none", CPU, "embedded") is None


def test_the_busy_floor_still_stands_over_a_measured_rate() -> None:
    """The busy machine's time (the assumed rate slowed as measured on busy cores) is said where it is above the
    measured estimate, not where the runs measured slower than it."""
    suite = load_suite(SUITE).suite
    fast = EmbedTally(texts=3_000, words=75_000, measured=MeasuredRate(2, 3_000, 10.0))  # 300 texts/s: 10 s
    said = embed_estimate(Estimate(embed=fast), suite, load=(10.0, 2))
    assert "3,000 to encode: about 0m10s (measured on your last 2 runs: 300.0 texts/s" in said, said
    assert "this machine is busy (load average 10.0 on 2 cores): about 4m27s" in said, said
    slow = EmbedTally(texts=3_000, words=75_000, measured=MeasuredRate(1, 30, 10.0))  # 3 texts/s: 1,000 s
    said = embed_estimate(Estimate(embed=slow), suite, load=(10.0, 2))
    assert (
        "about 16m40s (measured on your last run: 3.0 texts/s with 1 embed worker, 3.0 each: 30 texts in 10.0 s"
        in (said)
        and "busy" not in said
    ), said


def test_a_dry_run_of_device_auto_that_no_run_measured_says_it_assumed_a_cpu() -> None:
    """With no run measured, a suite of device auto was said to be estimated on "device auto", which is no device:
    the rate assumed is a CPU's (which device auto picks here is not asked)."""
    suite = load_suite({**SUITE, "embedding": {}}).suite
    said = embed_estimate(Estimate(embed=EmbedTally(texts=3_000, words=75_000)), suite, load=(0.0, 2))
    assumed = ("(assumed: 5,000 words/s, no earlier run of all-MiniLM-L6-v2 measured one, and device auto is taken for "
               "a CPU: all-MiniLM-L6-v2 on two laptop CPU cores; a GPU is many times faster)")  # fmt: skip
    assert assumed in said, said


def test_a_measured_rate_is_the_models_own() -> None:
    """The note that the assumed words/s are all-MiniLM-L6-v2's is not said of a rate measured on the model itself."""
    suite = load_suite({**SUITE, "embedding": {"model": "BAAI/bge-large-en-v1.5"}}).suite
    assumed = embed_estimate(Estimate(embed=EmbedTally(texts=10, words=100)), suite, load=(0.0, 2))
    assert "is slower if it is larger" in assumed, assumed
    tally = EmbedTally(texts=10, words=100, measured=MeasuredRate(1, 10, 1.0))
    assert "is slower if it is larger" not in embed_estimate(Estimate(embed=tally), suite, load=(0.0, 2))


def test_a_resumed_run_counts_once_at_its_latest_totals(tmp_path: Path) -> None:
    """A resume writes the whole run's totals so far: they replace its earlier line, not add to it (its first attempt
    counted twice, and pushed another run out of the last RECENT_RUNS)."""
    record_rate(tmp_path, "old", CPU, "embedded", _encoded(50, 1000))
    record_rate(tmp_path, "r", CPU, "embedded", _encoded(100, 1000))
    record_rate(tmp_path, "r", CPU, "embedded", _encoded(300, 2000))  # its resume: the run's totals
    assert measured_rate(tmp_path, CPU, "embedded", workers=1) == MeasuredRate(2, 350, 3.0, "cpu", 1)
    lines = (tmp_path / RATES_FILE).read_text().splitlines()
    assert [json.loads(line)["run"] for line in lines] == ["old", "r"], lines


def test_the_file_keeps_the_latest_runs_and_skips_a_torn_line(tmp_path: Path) -> None:
    """It does not grow with every run (a cluster user's home included); a line cut short (a full disk, a crash) or
    run into the next is skipped by the dry run, and dropped at the next run's write."""
    for n in range(KEPT_RUNS + 10):
        record_rate(tmp_path, f"r{n}", CPU, "embedded", _encoded(10 + n, 1000))
    path = tmp_path / RATES_FILE
    lines = path.read_text().splitlines()
    assert [json.loads(line)["run"] for line in lines] == [f"r{n}" for n in range(10, KEPT_RUNS + 10)], lines
    with open(path, "a") as out:
        out.write(lines[-1][:30] + lines[-2] + "\n" + lines[-3][:-7])
    latest = range(KEPT_RUNS + 10 - RECENT_RUNS, KEPT_RUNS + 10)
    rate = MeasuredRate(RECENT_RUNS, sum(10 + n for n in latest), 5.0, "cpu", 1)
    assert measured_rate(tmp_path, CPU, "embedded", workers=1) == rate
    record_rate(tmp_path, "new", CPU, "embedded", _encoded(1, 1000))
    kept = [json.loads(line)["run"] for line in path.read_text().splitlines()]
    assert kept == [f"r{n}" for n in range(11, KEPT_RUNS + 10)] + ["new"], kept


def _record_many(home: str, worker: int, start: Barrier) -> None:
    start.wait()  # all at once
    for n in range(6):
        record_rate(Path(home), f"w{worker}-{n}", CPU, "embedded", _encoded(1, 1))


def _run_together(processes: list[Any]) -> None:
    """Start ``processes`` (spawned, meeting at a barrier), wait up to 300 s each for it to exit 0; any still alive
    then is killed (one that never came to the barrier must not leave the others, or pytest, waiting)."""
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=300)
            assert process.exitcode == 0
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()


def test_runs_finishing_at_once_lose_no_line(tmp_path: Path) -> None:
    """Each write rewrites the file (to keep its latest lines): under a lock, so that runs finishing at once in
    processes of their own keep each other's lines."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(8, timeout=300)  # one that never comes breaks it: the others fail, none waits for ever
    processes = [context.Process(target=_record_many, args=(str(tmp_path), w, start)) for w in range(8)]
    _run_together(processes)
    runs = sorted(json.loads(line)["run"] for line in (tmp_path / RATES_FILE).read_text().splitlines())
    assert runs == sorted(f"w{w}-{n}" for w in range(8) for n in range(6)), runs


def test_a_busy_floor_under_a_second_is_not_said() -> None:
    """The time of a few texts on a busy machine rounded to "about 0m00s": it says nothing, nor does one of the
    estimate's own time (a measured rate as slow, at whatever load: not this host's, as the test does not read it)."""
    suite = load_suite(SUITE).suite
    few = EmbedTally(texts=4, words=100)  # 0.02 s assumed, 0.3 s at load 10 on 2 cores
    said = embed_estimate(Estimate(embed=few), suite, load=(10.0, 2))
    assert "under a second (assumed" in said and "busy" not in said, said
    for load in ((2.02, 2), (10.0, 2), (40.0, 16)):
        busy = EmbedTally(texts=100, words=25_000).busy_s(*load)  # 5 s assumed, 19.1 s at load 2.02 on 2 cores
        same = EmbedTally(texts=100, words=25_000, measured=MeasuredRate(1, 100, busy))  # measured as slow
        said = embed_estimate(Estimate(embed=same), suite, load=load)
        assert f"about {fmt_duration(busy)} (measured" in said and "busy" not in said, (load, said)


def test_a_rate_is_of_the_device_the_model_ran_on_not_the_suites_setting(tmp_path: Path) -> None:
    """With ``device: auto`` a cluster mixes CPU and GPU hosts: runs were recorded under "auto", so a GPU run's rate was
    used for a CPU host and the reverse. Each line names the device its workers encoded on; the dry run matches on what
    the latest run in its mode encoded on the most texts (an embedded run's home is this host's)."""
    auto = EmbeddingConfig()
    record_rate(tmp_path, "on-gpu", auto, "embedded", _encoded(5_000, 1_000, "cuda:0"))  # 5,000 texts/s
    record_rate(tmp_path, "on-cpu", auto, "embedded", _encoded(100, 10_000))  # 10 texts/s: the latest
    rate = measured_rate(tmp_path, auto, "embedded", workers=1)
    assert rate == MeasuredRate(1, 100, 10.0, "cpu", 1, "what device auto ran on the most in your last embedded run")
    gpu = MeasuredRate(1, 5_000, 1.0, "cuda", 1)
    assert measured_rate(tmp_path, EmbeddingConfig(device="cuda:1"), "embedded", workers=1) == gpu
    suite = load_suite({**SUITE, "embedding": {}}).suite
    said = embed_estimate(Estimate(embed=EmbedTally(texts=50, words=500, measured=rate)), suite, load=(0.0, 2))
    assert "all-MiniLM-L6-v2 on device cpu (what device auto ran on the most in your last embedded run)" in said, said

    both = {"cpu": {"workers": 1, "encoded": 50, "encode_ms": 5_000}, "cuda": {"workers": 1, "encoded": 4_000,
                                                                              "encode_ms": 800}}  # fmt: skip
    record_rate(tmp_path, "mixed", auto, "cluster", {"encoded": 4_050, "encode_ms": 5_800, "encoders": both})
    cluster = measured_rate(tmp_path, auto, "cluster")
    assert cluster is not None and (cluster.device, cluster.texts) == ("cuda", 4_000), cluster
    assert cluster.picked == "what device auto ran on the most in your last cluster run"
    cpu = measured_rate(tmp_path, CPU, "cluster")
    assert cpu is not None and (cpu.device, cpu.texts, cpu.encode_s) == ("cpu", 50, 5.0), cpu


def _encode_as_a_worker(url: str, run_id: str, texts: list[str], start: Barrier) -> None:
    """An embed worker's process: encode ``texts`` with the real model, at once with the others, and count them."""
    from ragscore_workers.embedding import embed
    from ragscore_workers.metrics.embedding_metrics import record_embed_stats
    from ragscore_workers.metrics.registry import RunContext
    from ragscore_workers.store import redis_client

    config = EmbeddingConfig(device="cpu", cache=False)
    client = redis_client(url)
    start.wait()
    record_embed_stats(RunContext(run_id, load_suite(SUITE).suite, client), embed(texts, config, client).stats)


def test_the_rate_of_several_embed_workers_is_what_they_encode_at_once(
    tmp_path: Path, redis_server: RedisProcess, store: RunStore
) -> None:
    """``encode_ms`` is summed over the embed workers: with two encoding at once the rate it gave was one worker's,
    and the estimate twice as long. Each worker's share is counted (``summary.embedding``'s ``encoders``): the rate is
    one worker's times the workers, said with how many it assumes. Two real worker processes, the real model."""
    from ragscore_workers.tasks import _embedding_summary

    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2, timeout=300)
    texts = [[f"worker {w} says fact {i} of its own" for i in range(40)] for w in range(2)]
    processes = [context.Process(target=_encode_as_a_worker, args=(redis_server.url, "two", t, start)) for t in texts]
    _run_together(processes)
    summary = _embedding_summary(store.counters("two", "embed"))
    assert summary["encoders"] == {"cpu": {"workers": 2, "encoded": 80, "encode_ms": summary["encode_ms"]}}, summary

    record_rate(tmp_path, "two", CPU, "cluster", summary)
    rate = measured_rate(tmp_path, CPU, "cluster")
    assert rate is not None and (rate.workers, rate.texts, rate.encode_s) == (2, 80, summary["encode_ms"] / 1000)
    assert rate.texts_per_s == 2 * rate.per_worker == 2 * 80 / (summary["encode_ms"] / 1000), rate
    said = embed_estimate(Estimate(embed=EmbedTally(texts=10, words=100, measured=rate)), CPU_SUITE, load=(0.0, 2))
    workers = ("texts/s with 2 embed workers (assumed: the most worker processes one of your last runs encoded on, "
               f"as if all at once), {rate.per_worker:,.1f} each")  # fmt: skip
    assert workers in said, said
    embedded = measured_rate(tmp_path, CPU, "cluster", workers=1)  # an embedded run's one worker: one worker's rate
    assert embedded is not None and embedded.texts_per_s == rate.per_worker


def test_a_cluster_dry_run_assumes_the_embed_workers_that_say_they_run(
    tmp_path: Path, home: Path, redis_server: RedisProcess
) -> None:
    """A cluster's embed workers were guessed from past runs (the most processes one of them encoded on). Where the
    run store has keys of embed workers of this broker saying they run (:mod:`ragscore_workers.alive`), their pool's
    processes are the workers the rate is multiplied by, and it says where the number is from. A real embed worker of
    two processes; the past run encoded on one."""
    from ragscore_workers.alive import alive_processes, broker_of
    from ragscore_workers.store import redis_client

    record_rate(home, "past", CPU, "cluster", _encoded(100, 1_000))
    data = write_jsonl(tmp_path / "d.jsonl", _rows("gamma"))
    (tmp_path / "s.json").write_text(json.dumps(SUITE))
    args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
            "--dry-run", "--broker", redis_server.url]  # fmt: skip
    env = {**os.environ, "COLUMNS": "200"}

    def said() -> str:
        done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    guessed = "with 1 embed worker (assumed: the most worker processes one of your last runs encoded on"
    assert guessed in said()
    worker = WorkerProcess(redis_server.url, "embed", tmp_path / "worker-home", concurrency=2).start()
    try:
        client = redis_client(redis_server.url)
        assert until(lambda: alive_processes(client, broker_of(client), "embed") == 2, 300)
        alive = "200.0 texts/s with 2 embed workers (the embed worker processes on the broker that say in the run store"
        assert alive in said()
    finally:
        worker.stop()


def test_a_cluster_dry_run_that_cannot_read_the_workers_keys_guesses_at_once_and_is_never_refused(
    tmp_path: Path, home: Path, redis_server: RedisProcess
) -> None:
    """The embed workers that say they run are a hint: a store user that may not read their keys, or a cluster down,
    leaves the guess of the past runs, and the dry run is neither refused nor held by the store's connect retries nor
    warned of (a suite without caches to look up did not open the store before)."""
    import redis

    from ragscore_workers.alive import alive_processes, broker_of, heartbeat
    from ragscore_workers.store import redis_client

    record_rate(home, "past", CPU, "cluster", _encoded(100, 1_000))
    data = write_jsonl(tmp_path / "d.jsonl", _rows("delta"))
    (tmp_path / "s.json").write_text(json.dumps({**SUITE, "embedding": {"device": "cpu", "cache": False}}))
    env = {**os.environ, "COLUMNS": "200"}

    def said(broker: str) -> str:
        args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
                "--dry-run", "--broker", broker]  # fmt: skip
        done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        assert done.returncode == 0 and "not counted" not in done.stderr, done.stderr
        return " ".join(done.stdout.split())

    client = redis_client(redis_server.url)
    beat = heartbeat(client, "embed@host", lambda: ["embed"], client, 3)
    try:
        assert until(lambda: alive_processes(client, broker_of(client), "embed") == 3, 30)
        assert "with 3 embed workers (the embed worker processes on the broker" in said(redis_server.url)
        redis.Redis(port=redis_server.port).acl_setuser(
            "noalive", enabled=True, passwords=["+pw"], keys=["_kombu*", "ragscore:run*"], channels=["*"],
            commands=["+@all"],
        )  # fmt: skip
        guessed = "with 1 embed worker (assumed: the most worker processes one of your last runs encoded on"
        assert guessed in said(f"redis://noalive:pw@127.0.0.1:{redis_server.port}/0")
        with closed_port() as port:
            assert guessed in said(f"redis://127.0.0.1:{port}/0")  # nothing there
    finally:
        beat.end()
        beat.join(30)


def test_a_lock_held_too_long_skips_the_line_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A holder of the file's lock stuck (a network home) hung every run's end: the lock was waited for without end.
    It is tried for LOCK_WAIT_S now, then the line is skipped with a warning (a hint lost, not a run hung)."""
    monkeypatch.setattr(encode_rates, "LOCK_WAIT_S", 0.5)
    caplog.set_level(logging.WARNING, logger="orchestrator.encode_rates")
    writer = threading.Thread(
        target=record_rate, args=(tmp_path, "r", CPU, "embedded", _encoded(10, 1000)), daemon=True
    )
    with open(tmp_path / f"{RATES_FILE}.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another open of the file: its lock stands against this process's too
        try:
            writer.start()
            writer.join(timeout=120)
            assert not writer.is_alive(), "record_rate still waits for the lock"
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
    writer.join(timeout=120)
    assert not (tmp_path / RATES_FILE).exists()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("did not record the run's encode rate" in m and "held its lock for over 0.5 s" in m for m in warned)


def test_a_writer_writes_a_temporary_file_of_its_own(tmp_path: Path) -> None:
    """Two writers that both think they hold the lock (a home mounted without locks) wrote the same
    ``encode_rates.jsonl.new``: one's rename took the other's half-written file, or left it none to rename. Each
    writes a file of its own now: one left at the old name (a folder here, which nothing can be written into) costs
    nothing, and no file of its own is left behind."""
    (tmp_path / f"{RATES_FILE}.new").mkdir()
    record_rate(tmp_path, "r", CPU, "embedded", _encoded(10, 1000))
    assert [json.loads(line)["run"] for line in (tmp_path / RATES_FILE).read_text().splitlines()] == ["r"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [RATES_FILE, f"{RATES_FILE}.lock", f"{RATES_FILE}.new"]


def test_the_dry_run_of_device_auto_imports_no_torch(tmp_path: Path) -> None:
    """Which device auto picks on this host was asked of torch: its import added seconds to a dry run of a small
    dataset (2 s idle, 4 s busy, on 2 cores). The device of the latest embedded run stands for it; the dry run of a
    suite of ``device: auto`` still estimates at the measured rate, and imports no torch."""
    home = tmp_path / "home"
    record_rate(home, "r", EmbeddingConfig(), "embedded", _encoded(100, 1000))
    data = write_jsonl(tmp_path / "rows.jsonl", _rows("alpha"))
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({**SUITE, "embedding": {}}))
    code = (
        "import atexit, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules)); "
        "from orchestrator.cli import main; sys.argv[1:] = ['run', sys.argv[1], '--suite', sys.argv[2], '--dry-run']; "
        "main()"
    )
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "200"}
    env.pop("RAGSCORE_BROKER_URL", None)
    done = subprocess.run([sys.executable, "-c", code, str(data), str(suite)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)  # fmt: skip
    said = " ".join(done.stdout.split())
    assert "measured on your last run: 100.0 texts/s" in said, said + done.stderr
    assert "torch imported: False" in said, said + done.stderr


def test_a_summary_and_lines_of_before_the_encoders_still_read(tmp_path: Path) -> None:
    """A summary written by older workers has no ``encoders``: its totals are recorded as one worker's on the suite's
    named device, and not at all on ``auto`` (which device they ran on is not known). A line of an older ragscore
    (no ``workers``; ``device`` the suite's setting) is read as one worker's, and skipped where it says ``auto``."""
    old = {"encoded": 200, "encode_ms": 4_000, "devices": {"cpu fp32": 1}}
    record_rate(tmp_path, "named", CPU, "cluster", old)
    record_rate(tmp_path, "auto", EmbeddingConfig(), "cluster", old)
    lines = [json.loads(line) for line in (tmp_path / RATES_FILE).read_text().splitlines()]
    assert [(m["run"], m["device"], m["workers"]) for m in lines] == [("named", "cpu", 1)], lines
    with open(tmp_path / RATES_FILE, "a") as out:
        for run, device in (("older", "cpu"), ("older-auto", "auto")):
            old_line = {"run": run, "model": CPU.model, "device": device, "mode": "cluster", "encoded": 100}
            out.write(json.dumps({**old_line, "encode_ms": 1_000, "at": 1}) + "\n")
    rate = measured_rate(tmp_path, CPU, "cluster")
    assert rate == MeasuredRate(2, 300, 5.0, "cpu", 1, workers_from="runs"), rate
    auto = measured_rate(tmp_path, EmbeddingConfig(), "cluster")  # the latest line's "auto" is not a device: skipped
    assert auto is not None and (auto.device, auto.texts) == ("cpu", 300), auto
