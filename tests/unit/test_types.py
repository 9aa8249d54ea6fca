"""The packages type-check: mypy, as the dev extra pins it and pyproject.toml's ``[tool.mypy]`` sets it, finds no
error in them (a new one fails here, not in the next engineer's run of it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_finds_no_error_in_the_packages() -> None:
    """One mypy run over the packages (its cache, ``.mypy_cache``, kept for the next: a run from none takes ~45 s of
    CPU, one from it a few)."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
