"""The dry run's time of the cpu queue (a sample of its items scored here by the registry's real metric functions,
scaled by its items and worker processes) and the code queue (its items' programs at their time limits). Both were
said as "not timed"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.estimate import RunCount, estimate_run
from orchestrator.queue_time import SAMPLE_ITEMS, ItemSample, QueueTiming, time_items
from orchestrator.run_time import Pools, whole_run, whole_run_line
from orchestrator.suite import load_suite
from ragscore_workers.schemas import Row

from ..support import ROOT, write_jsonl

POOLS = Pools(cpu=2, code=3, said="an embedded run's own pool, one a core here")
CPU_SUITE = {"name": "cpu-dry", "metrics": ["exact_match", "quality_checks"]}


def _rows(n: int) -> list[dict[str, object]]:
    return [{"id": f"q{i}", "question": f"What is fact {i}?", "answer": f"fact {i} is an answer [1]",
             "reference": f"fact {i} is the reference"} for i in range(n)]  # fmt: skip


def _timed_line(tmp_path: Path, rows: int, suite: dict[str, object]) -> tuple[str, object]:
    """The whole run's line of ``rows`` rows of ``suite``, its cpu sample timed, and the run it says."""
    resolved = load_suite(suite)
    estimate = estimate_run(write_jsonl(tmp_path / f"d{rows}.jsonl", _rows(rows)), resolved)
    if estimate.cpu_sample.items:
        estimate.cpu = time_items(estimate.cpu_sample, resolved)
    run = whole_run(estimate, resolved.suite, embedded=True, load=(0.1, 2), pools=POOLS)
    return whole_run_line(run), run


def test_the_cpu_queue_is_timed_on_a_sample_and_scaled_by_its_items_over_its_processes(tmp_path: Path) -> None:
    """300 and 600 rows of exact_match and quality_checks: the cpu queue is a part of the whole run, its time the
    sample's time an item x its items / the 2 processes assumed, said with what it assumed. Seen failing before: the
    line said "not timed: the cpu queue's 600 outputs" and the run had no cpu part."""
    for rows in (300, 600):
        said, run = _timed_line(tmp_path, rows, CPU_SUITE)
        (cpu,) = [part for part in run.parts if part.name == "cpu"]  # type: ignore[attr-defined]
        assert cpu.bound.startswith(f"{rows} items at "), cpu.bound
        assert f"as {SAMPLE_ITEMS} of them took here, over 2 cpu worker processes (an embedded run's own pool, one a " \
               "core here)" in cpu.bound, cpu.bound  # fmt: skip
        assert "not timed" not in said, said
        assert said.startswith("whole run: about ") and "bound by the cpu queue" in said, said


def test_the_cpu_estimate_is_the_per_item_time_times_the_items_over_the_processes(tmp_path: Path) -> None:
    """The estimate scales with the items and over the processes, and is no shorter where this machine is busy."""
    resolved = load_suite(CPU_SUITE)
    estimate = estimate_run(write_jsonl(tmp_path / "d.jsonl", _rows(200)), resolved)
    timing = time_items(estimate.cpu_sample, resolved)
    assert timing.items == 200 and 0 < timing.timed <= SAMPLE_ITEMS and timing.seconds > 0
    assert timing.estimated_s(2) == pytest.approx(timing.per_item_s * 200 / 2)
    assert timing.estimated_s(1) == pytest.approx(2 * timing.estimated_s(2))
    assert timing.busy_s(2, 6.0, 2) > timing.estimated_s(2)  # 2 busy cores leave the 2 processes less than a core each


def test_the_sample_is_spread_through_the_file_and_bounded() -> None:
    """A reservoir of 64 over 1,000 items keeps 64, some of them from past the first 64 and from the file's last
    half; the same file gives the same sample."""
    samples = []
    for _ in range(2):
        sample = ItemSample()
        for i in range(1_000):
            sample.see(Row(id=f"q{i}", question="q", answer="a"), ["exact_match"])
        samples.append([row.id for row, _ in sample.items])
    ids = samples[0]
    assert len(ids) == SAMPLE_ITEMS and sample.seen == 1_000
    assert any(int(i[1:]) >= 500 for i in ids) and samples[0] == samples[1]


def test_a_suite_with_no_cpu_metric_has_no_cpu_time_and_times_nothing(tmp_path: Path) -> None:
    """answer_correctness alone (embed): nothing is sampled or timed, and the line names no cpu queue."""
    said, run = _timed_line(tmp_path, 50, {"name": "no-cpu", "metrics": ["answer_correctness"]})
    assert not [part for part in run.parts if part.name == "cpu"], said  # type: ignore[attr-defined]
    assert "cpu" not in said, said


def _code_line(tmp_path: Path, rows: list[dict[str, object]], metrics: list[object], backend: str = "local") -> str:
    """The whole run's line of ``rows`` scored by ``metrics`` at ``sandbox.timeout_s: 4`` over 3 code processes."""
    suite = {"name": "code-dry", "metrics": metrics, "sandbox": {"timeout_s": 4, "backend": backend}}
    resolved = load_suite(suite)
    estimate = estimate_run(write_jsonl(tmp_path / "c.jsonl", rows), resolved)
    return whole_run_line(whole_run(estimate, resolved.suite, embedded=True, pools=POOLS))


CODE_ROWS = [{"id": f"c{i}", "question": "print 1", "code": "print(1)"} for i in range(30)]
CODE_POINT = {"type": "code_test", "params": {"stdout": "1"}}
THREE_POINTS = {"name": "checks", "params": {"points": [{"id": f"p{i}", **CODE_POINT} for i in range(3)]}}
NOT_RUN = "a dry run does not run the programs and most end far sooner"


@pytest.mark.parametrize(
    ("metrics", "bound"),
    [(["code_test"], "0m40s (30 programs"), ([THREE_POINTS], "2m00s (90 programs"),
     (["code_test", THREE_POINTS], "2m40s (120 programs")],
    ids=["code_test", "checks-of-3-points", "both"],
)  # fmt: skip
def test_the_code_queue_is_bounded_by_its_items_programs_at_their_time_limit(
    tmp_path: Path, metrics: list[object], bound: str
) -> None:
    """30 rows at ``sandbox.timeout_s: 4`` over 3 code processes on the local sandbox: a code_test runs one program a
    row (30 x 4 / 3 = 40 s at most), a checks of 3 code_test points three one after another (2 min), both four. Seen
    failing before: the checks' bound was "at most 0m40s (30 items ...", each row counted once at its limit."""
    said = _code_line(tmp_path, CODE_ROWS, metrics)
    assert (f"the code queue at most {bound} at their time limits of 4 s each over 3 code worker processes: an upper "
            f"bound, as {NOT_RUN})") in said, said  # fmt: skip
    assert "not timed" not in said, said


def test_a_rows_own_code_test_points_count_at_the_sandboxs_limit_at_most(tmp_path: Path) -> None:
    """The suite's point of ``timeout_s: 8`` on 10 rows, and 10 rows' own 2 points of ``timeout_s: 60``, which the
    sandbox runs at its 4 s (a row's point may only lower it): (10 x 8 + 20 x 4) / 3 = 53 s, up to 8 s a program."""
    own = [{"id": f"o{i}", **CODE_POINT, "params": {"stdout": "1", "timeout_s": 60}} for i in range(2)]
    rows = [{**row, "checks": own} if i % 2 else row for i, row in enumerate(CODE_ROWS[:20])]
    suite_point = {"name": "checks", "params": {"points": [{**CODE_POINT, "params": {"stdout": "1", "timeout_s": 8}}]}}
    said = _code_line(tmp_path, rows, [suite_point])
    assert "the code queue at most 0m53s (30 programs at their time limits of up to 8 s each over 3 code " in said, said


def test_the_code_queue_on_docker_is_not_said_as_an_upper_bound(tmp_path: Path) -> None:
    """On the docker sandbox (``auto``'s where an engine answers) each program's container start adds to its time
    limit: the line says the programs' time at their limits, not an upper bound. Seen failing before: "at most 0m40s
    (30 items at their time limit of 4 s each ...: an upper bound" whatever the backend."""
    said = {backend: _code_line(tmp_path, CODE_ROWS, ["code_test"], backend) for backend in ("docker", "auto")}
    assert ("the code queue's programs 0m40s at their time limits (30 programs of 4 s each over 3 code worker "
            f"processes, each one's docker container start besides: {NOT_RUN})") in said["docker"], said  # fmt: skip
    assert ("each one's docker container start besides where sandbox.backend auto finds an engine: "
            f"{NOT_RUN})") in said["auto"], said  # fmt: skip
    assert "upper bound" not in said["docker"] + said["auto"], said


def test_the_dry_run_prints_the_cpu_queue_time_with_its_processes(tmp_path: Path) -> None:
    """``ragscore run --dry-run`` of an embedded run prints the cpu queue's time with the local pool's processes (a
    cluster's: :func:`test_a_cluster_dry_run_assumes_its_cpu_processes_until_its_cpu_workers_say_they_run`)."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(100))
    (tmp_path / "s.json").write_text(json.dumps(CPU_SUITE))
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env.pop("RAGSCORE_BROKER_URL", None)
    command = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
               "--dry-run"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    said = " ".join(result.stdout.split())
    assert result.returncode == 0, result.stderr
    assert "bound by the cpu queue: 100 items at " in said and "(an embedded run's own pool, one a core here)" in said


def test_submits_count_of_a_run_samples_no_cpu_item(tmp_path: Path) -> None:
    """Submit counts its run's judge calls with :class:`RunCount` (``texts=False``): it has no use for the cpu
    sample, which kept up to 64 rows in memory for nothing. Seen failing before: submit's count held 64 rows."""
    resolved = load_suite(CPU_SUITE)
    submits, dry = RunCount(resolved, texts=False), RunCount(resolved)
    for row in _rows(100):
        submits.see(Row.model_validate(row))
        dry.see(Row.model_validate(row))
    assert not submits.finish(100).cpu_sample.items and submits.estimate.units == dry.finish(100).units
    assert len(dry.estimate.cpu_sample.items) == SAMPLE_ITEMS


def _flagged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rows: list[dict[str, object]]) -> tuple[str, object]:
    """The whole run's line of ``rows`` scored by the test plugins' ``fail_on_flag`` and ``hang_on_flag``, its cpu
    sample timed within 0.5 s after a first item's load of 1 s at most; and the timing."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing,tests.plugins.hanging")
    resolved = load_suite({"name": "flagged", "metrics": ["fail_on_flag", "hang_on_flag"]})
    estimate = estimate_run(write_jsonl(tmp_path / "f.jsonl", rows), resolved)
    estimate.cpu = time_items(estimate.cpu_sample, resolved, budget_s=0.5, load_s=1.0)
    run = whole_run(estimate, resolved.suite, embedded=True, load=(0.1, 2), pools=POOLS)
    return whole_run_line(run), estimate.cpu


def test_a_cpu_metric_that_raises_or_hangs_on_a_sampled_row_neither_fails_nor_stalls_the_dry_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A metric that raises on a row is timed as a worker scores it (failed); one that hangs on the third row leaves
    it to its thread: the sample's time stops at its bound, that row counted at the time it took so far, said as a
    low end. Seen failing before: time_items had no bound on an item (no ``load_s``; its loop waited each item out)."""
    rows = [{"id": f"r{i}", "question": "q", "answer": "a", "metadata": {"fail": "bad input"} if i == 1 else {}}
            for i in range(10)]  # fmt: skip
    rows[2]["metadata"] = {"hang": 8}
    said, timing = _flagged(monkeypatch, tmp_path, rows)
    assert timing.cut and timing.timed == 3, timing  # type: ignore[attr-defined]
    assert "bound by the cpu queue: 10 items at " in said and " ms or more each, as 3 of them took here" in said, said
    assert "the last still being scored when the sample's time was up: a low end" in said, said


def test_a_first_item_not_scored_within_its_load_bound_leaves_the_cpu_queue_not_timed_and_said_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first item's untimed score (a metric's first-use load) hangs past its bound: nothing is timed, and the
    line says why rather than that a dry run does not run the metrics. Seen failing before: no bound on the first
    item."""
    rows = [{"id": f"r{i}", "question": "q", "answer": "a", "metadata": {"hang": 8} if i == 0 else {}}
            for i in range(5)]  # fmt: skip
    said, timing = _flagged(monkeypatch, tmp_path, rows)
    assert timing.cut and not timing.timed, timing  # type: ignore[attr-defined]
    assert "not timed: the cpu queue's 10 outputs (its sample's first item was not scored within 30 s here" in said


def test_a_cluster_dry_run_assumes_its_cpu_processes_until_its_cpu_workers_say_they_run(tmp_path: Path) -> None:
    """With a broker and no cpu worker, the cpu queue's processes are assumed, said with how to have the workers' own
    counted; a real cpu worker of one process saying it runs is counted instead. Seen failing before: the
    cluster's live cpu workers were said as assumed where no code worker ran."""
    from ragscore_workers.alive import alive_processes, broker_of
    from ragscore_workers.store import redis_client

    from ..support import RedisProcess, WorkerProcess, until

    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "worker-home", concurrency=1)
    data = write_jsonl(tmp_path / "d.jsonl", _rows(100))
    (tmp_path / "s.json").write_text(json.dumps(CPU_SUITE))
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    command = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
               "--dry-run", "--broker", server.url]  # fmt: skip

    def said() -> str:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    try:
        assumed = said()
        assert ("cpu worker processes (assumed, one a core of this machine, as no cluster worker of the cpu queue "
                "says it runs: start them first (ragscore worker cpu --concurrency N) and the dry run counts theirs)"
                ) in assumed, assumed  # fmt: skip
        worker.start()
        client = redis_client(server.url)
        assert until(lambda: alive_processes(client, broker_of(client), "cpu") == 1, 300)
        alive = said()
        assert "over 1 cpu worker process (the cluster's cpu workers that say they run)" in alive, alive
    finally:
        worker.stop()
        server.stop()


def test_a_busy_machines_high_end_of_a_cpu_bound_run_says_the_cpu_queue_made_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A suite of cpu metrics alone on 2 cores at load 6: the high end is the cpu queue's processes on the cores'
    share the load leaves them, not an embed encode the suite does not have. Seen failing before: "the embed encode
    slowed as said above"."""
    resolved = load_suite(CPU_SUITE)
    estimate = estimate_run(write_jsonl(tmp_path / "d.jsonl", _rows(100)), resolved)
    estimate.cpu = QueueTiming(items=100, timed=10, seconds=10.0)  # 1 s an item: far above the 1 s the line needs
    said = whole_run_line(whole_run(estimate, resolved.suite, embedded=True, load=(6.0, 2), pools=POOLS))
    assert "where this machine stays as busy as now (load average 6.0 on 2 cores: the cpu queue's processes on the " \
           "share of its cores the load leaves them)" in said, said  # fmt: skip
    assert "embed encode" not in said, said


def test_a_targets_items_are_sampled_with_the_reply_the_count_assumes_not_the_placeholder(tmp_path: Path) -> None:
    """With a target the rows have no answer yet: the cpu sample's items carry the reply the dry run's count assumes
    (as the embed count does), not the placeholder, so the metrics are timed on an answer of a reply's length. Seen
    failing before: the sample scored "(filled in by the target)"."""
    from orchestrator.estimate import PLACEHOLDER

    resolved = load_suite({"name": "t", "metrics": ["exact_match"], "target": {"url": "http://127.0.0.1:9/ask"}})
    rows = [{"id": f"q{i}", "question": f"What is fact {i}?", "reference": f"fact {i}"} for i in range(10)]
    estimate = estimate_run(write_jsonl(tmp_path / "t.jsonl", rows), resolved)
    answers = {row.answer for row, _ in estimate.cpu_sample.items}
    assert len(estimate.cpu_sample.items) == 10 and PLACEHOLDER not in answers and len(answers) == 1, answers
    assert len(next(iter(answers)).split()) > 10, answers
