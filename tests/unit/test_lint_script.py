"""scripts/lint is the one place of the lint commands: ruff's rules, its format check and mypy, which scripts/test
(and so the CI) runs; scripts/test ran ``ruff check`` alone, so code the format check refused passed the CI."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _project(tmp_path: Path, code: str, typed: str = "") -> Path:
    """A project of scripts/lint, pyproject.toml (ruff's and mypy's settings), ``code`` in ``ok.py`` and ``typed`` in
    the packages mypy checks, linted by this checkout's ruff and mypy (its .venv's python, run through a script: a
    link out of the venv would not find the venv's packages)."""
    (tmp_path / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "lint", tmp_path / "scripts" / "lint")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "ruff").symlink_to(ROOT / ".venv" / "bin" / "ruff")
    python = tmp_path / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{ROOT / ".venv" / "bin" / "python"}" "$@"\n')
    python.chmod(0o755)
    for package in ("orchestrator", "ragscore_workers"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(typed if package == "orchestrator" else "")
    (tmp_path / "ok.py").write_text(code)
    return tmp_path


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "scripts/lint"], cwd=project, capture_output=True, text=True, timeout=120)


def test_lint_refuses_code_its_rules_pass_but_its_format_does_not(tmp_path: Path) -> None:
    refused = _lint(_project(tmp_path, "numbers = {'one':1}\n"))
    said = refused.stdout + refused.stderr
    assert (
        refused.returncode == 1
        and "All checks passed!" in said
        and "--> ok.py" in said
        and "1 file would be reformatted" in said
    ), said


def test_lint_passes_code_both_pass_and_refuses_a_rules_problem_still_checking_the_format(tmp_path: Path) -> None:
    assert _lint(_project(tmp_path / "clean", 'numbers = {"one": 1}\n')).returncode == 0
    refused = _lint(_project(tmp_path / "unused", "import os\nnumbers = {'one':1}\n"))
    said = refused.stdout + refused.stderr
    assert (
        refused.returncode == 1 and "F401" in said and "--> ok.py" in said and "1 file would be reformatted" in said
    ), said


def test_lint_refuses_a_type_error_its_ruff_checks_pass(tmp_path: Path) -> None:
    """scripts/lint ran ruff alone: a type error showed first in the test pass (tests/unit/test_types.py), minutes
    later. It runs mypy over the packages too."""
    typed = 'from __future__ import annotations\n\ncount: int = "one"\n'
    refused = _lint(_project(tmp_path, 'numbers = {"one": 1}\n', typed))
    said = refused.stdout + refused.stderr
    assert refused.returncode == 1 and "All checks passed!" in said and "[assignment]" in said, said


def test_scripts_test_lints_through_scripts_lint_alone() -> None:
    """The lint's commands are written once: scripts/test runs scripts/lint, and no ruff of its own."""
    commands = [line.split("#")[0].strip() for line in (ROOT / "scripts" / "test").read_text().splitlines()]
    assert "scripts/lint" in commands, commands
    assert not [command for command in commands if re.search(r"\bruff\b", command)], commands
