"""``ragscore status`` imports what it reads a run with, not the scoring side: a user watching a run, or a script
polling it, pays the command's imports at every call (the package's ~1.4 s, ~80 % of a status, before they were
cut down). A structural check of the modules a real status command leaves loaded, never a timing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.runner import connect, submit
from orchestrator.suite import load_suite

from ..support import ROOT, RedisProcess, make_rows, write_jsonl

pytestmark = pytest.mark.integration

#: What scores, never what reads a run: the embedding stack, numpy, the metrics and the Celery tasks that load them.
SCORING_MODULES = ("torch", "sentence_transformers", "numpy", "ragscore_workers.metrics", "ragscore_workers.tasks")

#: Runs ``ragscore ARGS...`` in this process as the console script does, then prints the modules it left loaded.
_LOADED = """
import json, sys
from orchestrator.cli import main
sys.argv = ["ragscore", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}))
"""


def _loaded_by(*args: str) -> tuple[list[str], str]:
    """The modules ``ragscore ARGS`` has loaded when it ends (it must end with exit 0), and what it wrote."""
    done = subprocess.run([sys.executable, "-c", _LOADED, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["exit"] in (0, None), done.stderr
    return result["modules"], done.stdout + done.stderr


def _scoring(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == s or m.startswith(f"{s}.") for s in SCORING_MODULES)]


def test_status_of_a_run_and_the_run_list_import_no_scoring_module(tmp_path: Path) -> None:
    """``status RUN`` (its progress table, the queue and worker checks of a run whose message waits unserved) and
    ``status`` (the run list) load neither torch, sentence_transformers nor numpy, nor the metrics or tasks."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url, sends=True)
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), load_suite({"metrics": ["exact_match"]}),
                        store).run_id  # fmt: skip
        of_run, said = _loaded_by("status", run_id, "--broker", server.url)
        of_list, listed = _loaded_by("status", "--broker", server.url)
    finally:
        server.stop()
    assert "no worker consumes it" in said and run_id in listed  # the checks ran, the run was listed
    assert _scoring(of_run) == []
    assert _scoring(of_list) == []
