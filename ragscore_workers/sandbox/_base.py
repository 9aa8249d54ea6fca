"""What every sandbox backend shares: limits in, an :class:`ExecResult` out, errors for the sandbox itself.

A failing program is data (exit code, output, why it was stopped); only a sandbox that cannot run at
all raises :class:`SandboxError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol

from ..errors import RagscoreError
from ..limits import usable_cpus

__all__ = [
    "DEFAULT_DISK_MB",
    "DEFAULT_FILE_MB",
    "DEFAULT_MEMORY_MB",
    "DEFAULT_OPEN_FILES",
    "DEFAULT_OUTPUT_BYTES",
    "DEFAULT_PROCESSES",
    "DEFAULT_TIMEOUT_S",
    "LANGUAGES",
    "LIMIT_SIGNALS",
    "ExecResult",
    "Language",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "StopReason",
]

#: Wall-clock seconds a program may run (sandbox start included).
DEFAULT_TIMEOUT_S = 10.0
#: Memory in MiB: address space (local backend) or memory cgroup (docker backend).
DEFAULT_MEMORY_MB = 256
#: The program's processes and threads at once, itself included; with RLIMIT_AS per process, a run may use up to
#: processes x memory_mb.
DEFAULT_PROCESSES = 16
#: Largest file the program may write, in MiB.
DEFAULT_FILE_MB = 16
#: Size in MiB of each writable tmpfs (the working dir, /tmp and /dev/shm); they count as memory.
DEFAULT_DISK_MB = 32
#: File descriptors the program may hold open.
DEFAULT_OPEN_FILES = 64
#: Bytes of stdout + stderr kept; a program printing more is stopped (``output_limit``).
DEFAULT_OUTPUT_BYTES = 1 << 20

#: Why the sandbox stopped a program: ``timeout`` (the wall clock), ``cpu_limit`` (SIGXCPU: a process used up its
#: RLIMIT_CPU, or the docker backend's cpu ulimit), ``file_limit`` (SIGXFSZ: a file grew past RLIMIT_FSIZE), ``memory``
#: (see :func:`memory_report`), ``killed`` (another signal) or ``output_limit``. Two more say why a program was still
#: running when the wall clock ran out (local backend): ``process_limit`` (its processes and threads were at the process
#: limit: a fork bomb, which the limit holds but never ends) and ``init_stopped`` (it stopped the sandbox's pid-1, by
#: ptrace, so the sandbox could not see it end).
StopReason = Literal[
    "timeout", "cpu_limit", "memory", "file_limit", "killed", "output_limit", "process_limit", "init_stopped"
]
#: The stop reason of a death by a limit's own signal (24 = SIGXCPU, 25 = SIGXFSZ on Linux), else ``killed``.
LIMIT_SIGNALS: dict[int, StopReason] = {24: "cpu_limit", 25: "file_limit"}

#: How a program that ran out of memory ends its stderr, as the runtime writes it: Python's uncaught ``MemoryError``
#: or a subclass (numpy's ``numpy._core._exceptions._ArrayMemoryError: Unable to allocate ...``), ``[Errno 12]``,
#: C++'s ``what():  std::bad_alloc``, node's ``FATAL ERROR: ... out of memory``, a shell's or C library's
#: ``...: Cannot allocate memory``. Only the last line is read: text a program prints on its own
#: (``Error: out of memory? no, bad input``) must not turn its exit code into a memory stop.
_MEMORY_ERRORS = re.compile(
    r"^(?:(?:[\w.]+\.)?\w*MemoryError\b|.*\[Errno 12\]|.*\bstd::bad_alloc\b|FATAL ERROR:.*\bout of memory\b"
    r"|.*: Cannot allocate memory$)"
)


class SandboxError(RagscoreError):
    """The sandbox itself failed (it could not start, or lost track of the program)."""


class SandboxUnavailable(SandboxError):
    """The configured backend cannot be used here (tool not installed, no engine answering)."""


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Resource limits of one run; every field has a documented ``DEFAULT_*``."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    processes: int = DEFAULT_PROCESSES
    file_mb: int = DEFAULT_FILE_MB
    disk_mb: int = DEFAULT_DISK_MB
    open_files: int = DEFAULT_OPEN_FILES
    output_bytes: int = DEFAULT_OUTPUT_BYTES

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "processes", "file_mb", "disk_mb", "open_files", "output_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)}")

    @property
    def cpu_s(self) -> int:
        """CPU seconds per process (RLIMIT_CPU, a backstop of the wall clock): what its threads (at most
        ``processes``: they count as processes) could use on every core this worker may use in ``timeout_s``, so the
        wall clock fires first. One core's worth stopped a correct
        multithreaded program before its timeout, said as a timeout."""
        return int(self.timeout_s * min(usable_cpus(), self.processes)) + 1


@dataclass(frozen=True)
class Language:
    """How to run a program of one language: the file its code is written to and the command."""

    filename: str
    argv: tuple[str, ...]


#: Languages a code test may use. ``argv[0]`` is looked up in the sandbox's PATH.
LANGUAGES: dict[str, Language] = {
    "python": Language("main.py", ("python3", "-I", "main.py")),
}


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    """What a program did in the sandbox. ``exit_code`` is None when the sandbox stopped it."""

    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    stopped_by: StopReason | None = None
    #: Signal that ended the program, when one did.
    signal: int | None = None
    #: True when output beyond the cap was dropped.
    truncated: bool = False
    backend: str = "local"

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.exit_code == 0 and self.stopped_by is None


class Sandbox(Protocol):
    """A backend that runs untrusted code under limits."""

    name: str

    def run(
        self,
        code: str,
        *,
        language: str = "python",
        stdin: str = "",
        limits: Limits = ...,
        image: str | None = None,
    ) -> ExecResult:
        """Run ``code``; raise :class:`SandboxError` only when the sandbox itself fails."""
        ...


def get_language(name: str) -> Language:
    """The :data:`LANGUAGES` entry for ``name``; unknown names raise with the choices."""
    if name not in LANGUAGES:
        raise SandboxError(f"Unsupported language {name!r}; choose from {', '.join(sorted(LANGUAGES))}")
    return LANGUAGES[name]


def last_line(stderr: str) -> str | None:
    """The last line of ``stderr`` that is not blank, stripped (a runtime's report of why it failed), or None."""
    lines = [line.strip() for line in stderr[-2000:].splitlines() if line.strip()]
    return lines[-1] if lines else None


def memory_report(stderr: str) -> str | None:
    """The last line of ``stderr`` when it is a runtime's report of an allocation failure (``MemoryError``), else
    None. It is the program's word: an allocation refused under RLIMIT_AS reads so, and so does a program raising
    ``MemoryError`` itself."""
    line = last_line(stderr)
    return line if line is not None and _MEMORY_ERRORS.match(line) else None


def ran_out_of_memory(exit_code: int | None, stderr: str) -> bool:
    """Heuristic for the local backend: a failed program whose last line of stderr is its runtime's report of an
    allocation failure (:func:`memory_report`)."""
    return exit_code not in (0, None) and memory_report(stderr) is not None


def decode(data: bytes) -> str:
    """Program output as text (invalid UTF-8 replaced, never an error)."""
    return data.decode("utf-8", errors="replace")
