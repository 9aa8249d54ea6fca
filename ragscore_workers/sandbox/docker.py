"""Docker backend: one throwaway container per run, through the docker SDK (``pip install docker``).

The container has no network, a read-only root with size-capped tmpfs for the working dir and /tmp,
memory (no swap), pids and CPU limits, every capability dropped, no-new-privileges, a non-root user,
rlimits on CPU seconds, file size and open files, and is removed afterwards. The root being read-only,
the code and stdin travel in environment variables that a small bootstrap turns into ``main.py`` and
fd 0 before exec'ing the language's command (so one program is limited to ~96 KiB of code + stdin).
"""

from __future__ import annotations

import base64
import logging
import os
import threading
import time
from typing import Any

from ._base import (
    LIMIT_SIGNALS,
    ExecResult,
    Limits,
    SandboxError,
    SandboxUnavailable,
    StopReason,
    decode,
    get_language,
    ran_out_of_memory,
)

__all__ = ["DEFAULT_IMAGE", "DEFAULT_USER", "DockerSandbox"]

#: Image when a code test names none; it must have ``python3`` (the bootstrap is Python).
DEFAULT_IMAGE = "python:3.12-slim"
#: uid:gid the program runs as.
DEFAULT_USER = "65534:65534"
#: Label put on every sandbox container (``docker ps --filter label=ragscore.sandbox``).
LABEL = "ragscore.sandbox"
#: Largest base64 payload (code or stdin) one environment variable may carry (Linux: 128 KiB per string).
MAX_PAYLOAD = 120_000
#: Seconds each request to the engine may wait for its next bytes (the SDK's timeout; a run's wait sets its own).
PING_TIMEOUT_S = 3
#: Seconds looking for an engine may take in all, its two requests (the SDK's version, then a ping) together: an engine
#: answering a byte at a time held it as long as it trickled, each read within PING_TIMEOUT_S.
PROBE_TIMEOUT_S = 2.0

#: Seconds an engine that did not answer within PROBE_TIMEOUT_S is taken as absent without asking it again: with
#: backend ``docker`` every item looks for its engine, and each look would wait PROBE_TIMEOUT_S and leave a thread.
PROBE_RETRY_S = 30.0

log = logging.getLogger(__name__)
#: Whether this process has logged an engine that did not answer within PROBE_TIMEOUT_S (said once).
_slow_engine_said = threading.Event()
#: The engine (``DOCKER_HOST``, or the default socket) that last did not answer in time -> (when, what was said).
_unanswered: dict[str, tuple[float, str]] = {}

#: Writes the code to its file and stdin to fd 0, then execs the command given as argv.
BOOTSTRAP = """\
import base64, os, sys
env = dict(os.environ)
code = base64.b64decode(env.pop("SANDBOX_CODE"))
data = base64.b64decode(env.pop("SANDBOX_STDIN"))
with open(env.pop("SANDBOX_FILE"), "wb") as fh:
    fh.write(code)
fd = os.open("/tmp/.stdin", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, data)
os.lseek(fd, 0, 0)
os.unlink("/tmp/.stdin")
os.dup2(fd, 0)
os.close(fd)
os.execvpe(sys.argv[1], sys.argv[1:], env)
"""


def _docker() -> Any:
    try:
        import docker
    except ModuleNotFoundError as exc:
        raise SandboxUnavailable(
            "The docker sandbox backend needs the docker SDK: pip install 'ragscore[docker]' (or pip install docker)"
        ) from exc
    return docker


class DockerSandbox:
    """Run code in a fresh container per call; building it checks that an engine answers."""

    name = "docker"

    def __init__(self, *, user: str = DEFAULT_USER, default_image: str = DEFAULT_IMAGE) -> None:
        docker = _docker()
        self.errors = docker.errors
        self.types = docker.types
        self.user = user
        self.default_image = default_image
        where = os.environ.get("DOCKER_HOST", "the default socket")
        try:
            self.client = _probe(docker, where)
        except (docker.errors.DockerException, OSError) as exc:  # requests' connection errors are OSErrors
            raise SandboxUnavailable(
                f"The docker sandbox backend is configured but no Docker engine answers at {where}: {exc}. "
                "Start the engine (or set DOCKER_HOST), or use sandbox backend 'local'."
            ) from exc

    def run(
        self,
        code: str,
        *,
        language: str = "python",
        stdin: str = "",
        limits: Limits = Limits(),  # noqa: B008 - frozen value object
        image: str | None = None,
    ) -> ExecResult:
        """Run ``code`` in ``image`` (default :data:`DEFAULT_IMAGE`)."""
        lang = get_language(language)
        env = {
            "SANDBOX_CODE": _payload(code, "code"),
            "SANDBOX_STDIN": _payload(stdin, "stdin"),
            "SANDBOX_FILE": lang.filename,
            "HOME": "/sandbox",
            "LANG": "C.UTF-8",
        }
        image = image or self.default_image
        try:
            container = self.client.containers.create(
                image,
                command=["python3", "-I", "-c", BOOTSTRAP, *lang.argv],
                **self._options(env, limits),
            )
        except self.errors.ImageNotFound as exc:
            raise SandboxError(f"Sandbox image {image!r} is not present: docker pull {image}") from exc
        except self.errors.DockerException as exc:
            raise SandboxError(f"Docker could not create the sandbox container: {exc}") from exc
        try:
            return self._execute(container, limits)
        except (self.errors.DockerException, OSError) as exc:
            raise SandboxError(f"Docker failed while running the sandbox container: {exc}") from exc
        finally:
            try:
                container.remove(force=True)
            except self.errors.DockerException:  # already gone, or removal in progress
                pass

    def _options(self, env: dict[str, str], limits: Limits) -> dict[str, Any]:
        mib = 1 << 20
        tmpfs = f"rw,nosuid,nodev,size={limits.disk_mb}m,mode=1777"
        ulimit = self.types.Ulimit
        return {
            "environment": env,
            "user": self.user,
            "working_dir": "/sandbox",
            "network_mode": "none",
            "read_only": True,
            "tmpfs": {"/sandbox": tmpfs, "/tmp": tmpfs},
            "mem_limit": limits.memory_mb * mib,
            "memswap_limit": limits.memory_mb * mib,
            "pids_limit": limits.processes,
            "init": False,  # an engine's default-init would be one of the pids: the program's own, as local's
            "nano_cpus": 1_000_000_000,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "ulimits": [
                ulimit(name="cpu", soft=limits.cpu_s, hard=limits.cpu_s + 1),
                ulimit(name="fsize", soft=limits.file_mb * mib, hard=limits.file_mb * mib),
                ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                ulimit(name="core", soft=0, hard=0),
            ],
            "labels": {LABEL: "1"},
        }

    def _execute(self, container: Any, limits: Limits) -> ExecResult:
        """Start, stream output up to the cap, stop at the deadline; the caller removes the container."""
        stream = container.attach(stdout=True, stderr=True, stream=True, logs=True, demux=True)
        kept = {0: bytearray(), 1: bytearray()}
        state: dict[str, Any] = {"total": 0, "stopped": None}

        def read() -> None:  # a thread: the main one watches the clock
            try:
                for chunk in stream:
                    for index, data in enumerate(chunk):
                        if not data:
                            continue
                        kept[index] += data[: max(0, limits.output_bytes - state["total"])]
                        state["total"] += len(data)
                        if state["total"] > limits.output_bytes and state["stopped"] is None:
                            state["stopped"] = "output_limit"
                            _kill(container)
                            return
            except (self.errors.DockerException, OSError):  # the stream broke: the exit status still tells
                return

        reader = threading.Thread(target=read, daemon=True)
        started = time.monotonic()
        container.start()
        reader.start()
        try:
            exit_code = container.wait(timeout=limits.timeout_s).get("StatusCode")
        except (self.errors.DockerException, OSError) as exc:  # requests' errors are OSErrors
            if not _read_timed_out(exc):
                raise
            state["stopped"] = state["stopped"] or "timeout"
            _kill(container)
            exit_code = container.wait(timeout=30).get("StatusCode")
        duration = time.monotonic() - started
        reader.join(5)
        container.reload()
        stderr = decode(bytes(kept[1]))
        stopped: StopReason | None = state["stopped"]
        signal = exit_code - 128 if isinstance(exit_code, int) and exit_code > 128 else None
        if stopped is None and container.attrs.get("State", {}).get("OOMKilled"):
            stopped = "memory"
        elif stopped is None and signal is not None:
            stopped = LIMIT_SIGNALS.get(signal, "killed")  # SIGXCPU, SIGXFSZ: the cpu or fsize ulimit
        elif stopped is None and ran_out_of_memory(exit_code, stderr):
            stopped = "memory"
        return ExecResult(
            exit_code=None if stopped not in (None, "memory") else exit_code,
            stdout=decode(bytes(kept[0])),
            stderr=stderr,
            duration_s=round(duration, 4),
            stopped_by=stopped,
            signal=signal,
            truncated=state["total"] > limits.output_bytes,
            backend="docker",
        )


def _probe(docker: Any, where: str) -> Any:
    """A client of the engine at ``where`` that answered its version and a ping within :data:`PROBE_TIMEOUT_S` in all;
    :class:`SandboxUnavailable` when it did not (logged once per process), the SDK's error when it failed sooner.

    The requests run in a daemon thread, left to end on their own read timeouts: the SDK has no deadline of its own.
    An engine that did not answer in time is not asked again for :data:`PROBE_RETRY_S`: the same error at once."""
    last = _unanswered.get(where)
    if last is not None and time.monotonic() - last[0] < PROBE_RETRY_S:
        raise SandboxUnavailable(last[1])
    found: dict[str, Any] = {}

    def connect() -> None:
        try:
            client = docker.from_env(timeout=PING_TIMEOUT_S)
            client.ping()
            found["client"] = client
        except Exception as exc:  # noqa: BLE001 - raised again in the caller's thread
            found["error"] = exc

    thread = threading.Thread(target=connect, name="ragscore-docker-probe", daemon=True)
    thread.start()
    thread.join(PROBE_TIMEOUT_S)
    if thread.is_alive():
        said = f"The Docker engine at {where} did not answer within {PROBE_TIMEOUT_S:g} s (a hung or overloaded engine)"
        if not _slow_engine_said.is_set():
            _slow_engine_said.set()
            log.warning("%s: taken as no engine (sandbox backend auto uses the local one; docker fails its items). "
                        "Said once per process.", said)  # fmt: skip
        error = f"{said}. Restart the engine, or use sandbox backend 'local'."
        _unanswered[where] = (time.monotonic(), error)
        raise SandboxUnavailable(error)
    if "error" in found:
        raise found["error"]
    return found["client"]


def _payload(text: str, what: str) -> str:
    encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
    if len(encoded) > MAX_PAYLOAD:
        raise SandboxError(f"The docker backend takes at most {MAX_PAYLOAD * 3 // 4} bytes of {what}")
    return encoded


def _read_timed_out(exc: BaseException) -> bool:
    """Whether waiting for the container ran out of time. The engine sends the wait reply's headers at once
    and its body at exit, so the timeout often surfaces as a ConnectionError wrapping urllib3's
    ReadTimeoutError, not as requests' ReadTimeout (docker-py issue 1966)."""
    from requests.exceptions import ReadTimeout  # a dependency of the docker SDK
    from urllib3.exceptions import ReadTimeoutError

    todo: list[BaseException] = [exc]
    seen: set[int] = set()
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (ReadTimeout, ReadTimeoutError)):
            return True
        todo += [a for a in current.args if isinstance(a, BaseException)]
        todo += [c for c in (current.__cause__, current.__context__) if c is not None]
    return False


def _kill(container: Any) -> None:
    try:
        container.kill()
    except Exception:  # noqa: BLE001 - already exited or removed: nothing left to stop
        pass
