"""The packages type-check: mypy, as the dev extra pins it and pyproject.toml's ``[tool.mypy]`` sets it, finds no
error in them (a new one fails here, not in the next engineer's run of it)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # a dependency of mypy's on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
#: mypy's dependencies that change none of its findings, left to pip: pathspec (read only for exclude_gitignore, which
#: [tool.mypy] leaves off), mypy_extensions and typing_extensions (mypy checks code against its own bundled stubs of
#: them, not the installed ones), tomli (reads pyproject.toml on Python 3.10).
FINDINGS_UNCHANGED_BY = {"pathspec", "mypy-extensions", "typing-extensions", "tomli"}
#: Mistakes in a caller of the store and the runner that mypy finds only where their signatures say what they take
#: and give (not Any): a run listed by ``RunStore.overview`` (of the CLI's store too, as ``ragscore status`` lists
#: them) has no such key, the reply cache needs a Redis client.
MISUSE = """\
from ragscore_workers.planning import ResolvedSuite
from ragscore_workers.store import RunStore
from orchestrator.cli import _store
from orchestrator.runner import judge_cache_may_answer

def misuse(store: RunStore, resolved: ResolvedSuite) -> None:
    print([run["submited_at"] for run in store.overview([])])
    judge_cache_may_answer(resolved, "redis://localhost")
    print([run["submited_at"] for run in _store(None).overview([])])
"""


def test_mypy_finds_no_error_in_the_packages() -> None:
    """One mypy run over the packages (its cache, ``.mypy_cache``, kept for the next: a run from none takes ~45 s of
    CPU, one from it a few)."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_sees_the_store_and_runner_types_a_caller_misuses(tmp_path: Path) -> None:
    (tmp_path / "misuse.py").write_text(MISUSE)
    done = subprocess.run([sys.executable, "-m", "mypy", str(tmp_path / "misuse.py")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    found = [line.split(" error: ")[1] for line in done.stdout.splitlines() if " error: " in line]
    assert found == [
        'TypedDict "RunOverview" has no key "submited_at"  [typeddict-item]',
        'Argument 2 to "judge_cache_may_answer" has incompatible type "str"; expected "Redis"  [arg-type]',
        'TypedDict "RunOverview" has no key "submited_at"  [typeddict-item]',  # through the CLI's store
    ], done.stdout


def test_the_dev_extra_pins_mypy_and_what_decides_its_findings_as_installed() -> None:
    """mypy's parser (ast-serialize) and librt are ranges in mypy's own requirements: unpinned, a fresh install could
    get a release whose findings differ from those tested (an ignore gone unused fails the run). A dependency a new
    mypy adds fails here until it is pinned or named in FINDINGS_UNCHANGED_BY."""
    needed = [Requirement(spec) for spec in requires("mypy") or []]
    installed = {canonicalize_name(r.name) for r in needed if not r.marker or r.marker.evaluate({"extra": ""})}
    deciding = ({"mypy"} | installed) - FINDINGS_UNCHANGED_BY
    pins = _dev_pins()
    assert {name: pins.get(name) for name in deciding} == {name: f"=={version(name)}" for name in deciding}


def test_the_dev_extra_pins_ruff_as_installed() -> None:
    """``ruff>=0.6`` let a fresh CI machine get a release with new rules or another format, which failed `ruff check`
    or `ruff format --check` on code that passed here: the dev extra pins the version the lint was run with."""
    assert _dev_pins()["ruff"] == f"=={version('ruff')}"


def _dev_pins() -> dict[str, str]:
    """The dev extra's requirements by name, each as its version specifier (``==2.4.1``)."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    return {canonicalize_name(r.name): str(r.specifier) for r in map(Requirement, dev)}


def test_to_pandas_is_typed_a_dataframe_for_a_users_type_checker() -> None:
    """``Evaluation.to_pandas()`` was typed ``Any``: a notebook's or a script's checker and completion knew nothing
    of the frame it returns. pandas is optional, so the annotation names it for type checkers alone."""
    import typing

    import pandas as pd

    from orchestrator.api import Evaluation

    hints = typing.get_type_hints(Evaluation.to_pandas, localns={"DataFrame": pd.DataFrame})
    assert hints["return"] is pd.DataFrame
