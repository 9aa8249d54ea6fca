"""Worker logs of the embedded mode are pruned when workers start, so a long-used home does not fill up."""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator.workers import LOG_KEEP_S, LocalWorkers


def test_starting_workers_removes_their_logs_older_than_two_weeks_and_nothing_else(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    old, recent, other = logs / "worker-cpu-101.log", logs / "worker-judge-202.log", logs / "notes.txt"
    for path in (old, recent, other):
        path.write_text("x")
    long_ago = time.time() - LOG_KEEP_S - 3600
    os.utime(old, (long_ago, long_ago))
    os.utime(other, (long_ago, long_ago))
    LocalWorkers("redis://127.0.0.1:1/0", [], logs).start()  # no queue: nothing spawned
    assert sorted(p.name for p in logs.iterdir()) == ["notes.txt", "worker-judge-202.log"]
