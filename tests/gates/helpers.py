"""Running ``python -m orchestrator.cli`` as a user would, embedded, in a private RAGSCORE_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..conftest import QUICKSTART
from ..support import ROOT

__all__ = ["DATA", "SUITE", "ragscore"]

DATA, SUITE = QUICKSTART / "data.jsonl", QUICKSTART / "suite.yaml"


def ragscore(
    *args: str | Path, home: Path, timeout: float = 300, columns: str | None = "200", cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess, in ``cwd`` (wide COLUMNS so rich tables do not wrap; ``columns=None``: unset, as
    in CI)."""
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": columns or "", "PYTHONPATH": str(ROOT)}
    env.pop("RAGSCORE_BROKER_URL", None)
    if columns is None:
        env.pop("COLUMNS")
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *map(str, args)], capture_output=True, text=True, cwd=cwd,
        env=env, timeout=timeout,
    )  # fmt: skip
