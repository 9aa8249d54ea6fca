"""scripts/bootstrap installs once per (extras, pyproject.toml, constraints); an install with more extras covers
fewer; every install is held to deploy/constraints.txt.

A recording stand-in for ``.venv/bin/python`` takes pip's place: what is tested is the script's choice of
whether to install, not pip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: How bootstrap calls pip: held to the pinned versions the images install.
INSTALL = "-m pip install -q --disable-pip-version-check --constraint deploy/constraints.txt -e "


def _project(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "bootstrap", tmp_path / "scripts" / "bootstrap")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "constraints.txt", tmp_path / "deploy" / "constraints.txt")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\necho "$*" >> "$(dirname "$0")/../calls"\n')
    python.chmod(0o755)
    return tmp_path


def _installs(project: Path, extras: str) -> list[str]:
    calls = project / ".venv" / "calls"
    calls.unlink(missing_ok=True)
    subprocess.run(["bash", "scripts/bootstrap", extras], cwd=project, check=True, capture_output=True)
    return [line for line in calls.read_text().splitlines() if " -e " in line] if calls.exists() else []


def test_bootstrap_installs_once_and_a_wider_install_covers_a_narrower_one(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert _installs(project, "dev,embed") == [INSTALL + ".[dev,embed]"]
    assert _installs(project, "dev,embed") == []  # same extras: stamped
    assert _installs(project, "") == []  # the quickstart's bare install is covered
    assert _installs(project, "embed") == []
    assert _installs(project, "dev,embed,judge") == [  # "judge" is new: installed
        INSTALL + ".[dev,embed,judge]"
    ]
    assert _installs(project, "de") == [INSTALL + ".[de]"]  # not "dev"
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + "\n# changed\n")
    assert _installs(project, "") == [INSTALL + "."]  # new pyproject
    constraints = project / "deploy" / "constraints.txt"
    constraints.write_text(constraints.read_text() + "# bumped\n")
    assert _installs(project, "") == [INSTALL + "."]  # new pins


def test_a_python_the_pins_are_not_for_installs_the_newest_versions_and_says_so(tmp_path: Path) -> None:
    """The pins are Python 3.11's (numpy, scipy have no 3.10 wheel at those versions): on 3.10, which pyproject.toml
    allows, the pinned install failed with "No matching distribution"."""
    project = _project(tmp_path)
    python = project / ".venv" / "bin" / "python"
    python.write_text('#!/bin/sh\n[ "$1" = -c ] && exit 1\n[ "$1" = -V ] && echo "Python 3.10.12" && exit 0\n'
                      'echo "$*" >> "$(dirname "$0")/../calls"\n')  # fmt: skip
    result = subprocess.run(["bash", "scripts/bootstrap", "dev"], cwd=project, check=True, capture_output=True,
                            text=True)  # fmt: skip
    calls = (project / ".venv" / "calls").read_text().splitlines()
    assert [c for c in calls if " -e " in c] == ["-m pip install -q --disable-pip-version-check -e .[dev]"]
    assert "Python 3.10.12 is not the Python 3.11 deploy/constraints.txt pins" in result.stderr
