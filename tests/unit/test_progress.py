"""Progress lines: the rate counts only what this process saw done (a resumed run starts part-way)."""

from __future__ import annotations

import io
import re
import time

from orchestrator.progress import PlainProgress


def _rate(line: str) -> float:
    match = re.search(r" ([\d.]+)/s ETA (\S+) ", line)
    assert match, line
    return float(match.group(1))


def test_a_resumed_runs_earlier_units_are_not_counted_as_this_seconds_work() -> None:
    out = io.StringIO()
    view = PlainProgress(out)
    view.start("r1")
    view.update({"done": 115, "total": 1000})  # done before the resume: no work seen yet
    time.sleep(0.2)
    view.update({"done": 135, "total": 1000}, final=True)  # 20 units in ~0.2 s
    first, last = out.getvalue().splitlines()
    assert "115/1000 (11.5%) 0.0/s ETA ?" in first
    assert 0 < _rate(last) <= 20 / 0.2, "20 units over at least 0.2 s (the old rate counted all 135)"
