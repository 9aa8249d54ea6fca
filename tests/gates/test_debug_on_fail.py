"""``debug_on_fail``: the first failing point re-run under pdb, driven through a pseudo-terminal."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.debug import first_failure

from ..support import ROOT, write_jsonl

pytestmark = pytest.mark.integration

POINTS = [
    {"id": "names", "type": "keyword", "params": {"keywords": ["Paris"]}},
    {"id": "river", "type": "keyword", "params": {"keywords": ["Seine", "Loire"], "min_count": 2},
     "extract": {"regex": "River: (.*)"}, "normalizers": ["lowercase"]},
]  # fmt: skip
ROWS = [
    {"id": "q1", "answer": "Paris. River: Seine and Loire", "checks": POINTS},  # passes both
    {"id": "q2", "answer": "Paris. River: THE SEINE", "checks": POINTS},  # first failure: river, 1 of 2
    {"id": "q3", "answer": "Lyon.", "checks": POINTS},
]


class Terminal:
    """A child process on a pseudo-terminal: read until a marker, type lines."""

    def __init__(self, args: list[str]) -> None:
        self.master, slave = os.openpty()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TERM": "dumb"}
        self.proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env)
        os.close(slave)
        self.seen = ""

    def expect(self, marker: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            ready, _, _ = select.select([self.master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"{marker!r} not seen; got:\n{self.seen}")
            try:
                self.seen += os.read(self.master, 4096).decode(errors="replace")
            except OSError:  # the child closed the terminal
                raise AssertionError(f"{marker!r} not seen before exit; got:\n{self.seen}") from None
        head, _, self.seen = self.seen.partition(marker)
        return head

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def close(self) -> int:
        code = self.proc.wait(30)
        os.close(self.master)
        return code


def test_first_failing_point_runs_under_pdb_in_a_terminal(tmp_path: Path, home: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    result = evaluate(data, {"metrics": ["checks"]}, out=tmp_path / "run")
    item_id, _, point = first_failure(i.model_dump() for i in result.items)  # type: ignore[misc]
    assert (item_id, point["id"]) == ("q2", "river")

    code = (
        "from pathlib import Path; from orchestrator.debug import debug_on_fail; "
        f"out = debug_on_fail(Path({str(tmp_path / 'run')!r}), Path({str(data)!r})); "
        "print('OUTCOME', out.passed, out.note)"
    )
    term = Terminal([sys.executable, "-c", code])
    banner = term.expect("(Pdb)")
    assert "item q2, point 'river'" in banner and "1 of 2 keywords found" in banner
    assert "_validators.py(" in banner and ")keyword()" in banner  # stopped on the validator's first line
    term.send("p inp.text")
    assert "'the seine'" in term.expect("(Pdb)")  # extracted and normalised, as the validator sees it
    term.send("p params.min_count, params.keywords")
    assert "(2, ['Seine', 'Loire'])" in term.expect("(Pdb)")
    term.send("c")
    assert "OUTCOME False 1 of 2 keywords found, 2" in term.expect("needed", timeout=30)
    assert term.close() == 0


def test_debug_on_fail_refuses_without_a_terminal(tmp_path: Path) -> None:
    code = "from pathlib import Path; from orchestrator.debug import debug_on_fail; debug_on_fail(Path('.'), Path('x'))"
    res = subprocess.run([sys.executable, "-c", code], stdin=subprocess.PIPE, capture_output=True, text=True,
                         cwd=ROOT, timeout=60)  # fmt: skip
    assert res.returncode != 0 and "needs a terminal" in res.stderr


def test_ragscore_run_debug_on_fail_flag_in_a_terminal(tmp_path: Path, home: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    suite = tmp_path / "suite.json"
    suite.write_text('{"metrics": ["checks"]}')
    args = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite),
            "--out", str(tmp_path / "out"), "--quiet", "--debug-on-fail"]  # fmt: skip
    term = Terminal(args)
    banner = term.expect("(Pdb)", timeout=120)
    assert "item q2, point 'river'" in banner
    term.send("p inp.text")
    assert "'the seine'" in term.expect("(Pdb)")
    term.send("c")
    assert term.close() == 0
    # Without a terminal the flag is refused before anything runs (exit 2).
    res = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2 and "needs an embedded run started from a terminal" in res.stderr
