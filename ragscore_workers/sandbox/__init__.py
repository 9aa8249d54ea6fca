"""Sandboxes for untrusted code: a local bubblewrap backend and a Docker backend (threat model: SECURITY.md).

``get_sandbox(backend)`` picks one: ``local``, ``docker``, or ``auto`` (docker when an engine answers,
else local). A sandbox's ``run(code, language=, stdin=, limits=, image=)`` returns an :class:`ExecResult`
and raises :class:`SandboxError` only when the sandbox itself fails.
"""

from __future__ import annotations

from functools import cache
from typing import get_args

from ..errors import ConfigError
from ..schemas import SandboxConfig
from ._base import (
    LANGUAGES,
    ExecResult,
    Language,
    Limits,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
    StopReason,
)
from .local import LocalSandbox

__all__ = [
    "BACKENDS",
    "LANGUAGES",
    "ExecResult",
    "Language",
    "Limits",
    "LocalSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "StopReason",
    "get_sandbox",
]

#: Values of the suite's ``sandbox.backend``.
BACKENDS: tuple[str, ...] = get_args(SandboxConfig.model_fields["backend"].annotation)


@cache
def get_sandbox(backend: str = "auto") -> Sandbox:
    """The sandbox for a backend name, built once per process.

    ``docker`` raises :class:`SandboxUnavailable` when the SDK is missing or no engine answers; ``auto``
    then falls back to ``local``; ``local`` raises it when bubblewrap is not installed.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"Unknown sandbox backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend in ("docker", "auto"):
        from .docker import DockerSandbox

        try:
            return DockerSandbox()
        except SandboxUnavailable:
            if backend == "docker":
                raise
    return LocalSandbox()
