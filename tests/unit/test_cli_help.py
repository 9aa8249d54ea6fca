"""What the CLI's help and usage errors say matches what the commands do."""

from __future__ import annotations

import os
import subprocess
import sys

from ..support import ROOT


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=120,
    )  # fmt: skip


def _said(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join((result.stdout + result.stderr).replace("│", " ").split())


def test_worker_help_says_a_broker_is_required_as_the_worker_does() -> None:
    """``worker --help`` said ``--broker`` was "unset = embedded", while a worker without a broker exits 2."""
    helped, refused = _cli("worker", "--help"), _cli("worker", "-Q", "cpu")
    assert helped.returncode == 0, helped.stderr
    assert refused.returncode == 2 and "worker needs a broker" in _said(refused), refused.stderr
    said = _said(helped)
    assert "unset = embedded" not in said and "one of them is required" in said, said


def test_flower_help_says_when_it_attaches_to_the_embedded_redis() -> None:
    said = _said(_cli("flower", "--help"))
    assert "only while an embedded run has it up" in said, said
