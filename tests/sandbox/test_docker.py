"""The Docker backend: a clear error without an engine here; real containers where an engine answers."""

from __future__ import annotations

import logging
import sys
import uuid

import pytest

from ragscore_workers.sandbox import Limits, LocalSandbox, SandboxUnavailable, get_sandbox
from ragscore_workers.sandbox import docker as docker_backend
from ragscore_workers.sandbox.docker import DEFAULT_IMAGE, LABEL, DockerSandbox

from .support import FORK_UP_TO


def test_no_engine_answering_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    socket_path = f"/tmp/no-docker-{uuid.uuid4().hex}.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    with pytest.raises(SandboxUnavailable, match=f"no Docker engine answers at unix://{socket_path}"):
        DockerSandbox()


def test_an_engine_answering_a_byte_at_a_time_is_given_up_on_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each read came within the SDK's 3 s timeout, so the probe waited for the whole trickled ping (about 7 s here;
    an engine never done answering held it for ever) and then took the engine; ``auto`` now falls back to local."""
    from ..fakes.fake_docker_engine import FakeDockerEngine

    path = f"/tmp/fake-docker-{uuid.uuid4().hex[:8]}.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    docker_backend._slow_engine_said.clear()  # this process has said nothing yet, whatever ran before
    get_sandbox.cache_clear()
    try:
        with FakeDockerEngine(path, ping_byte_every_s=0.1), caplog.at_level(logging.WARNING):
            assert isinstance(get_sandbox("auto"), LocalSandbox)
            with pytest.raises(
                SandboxUnavailable, match=f"The Docker engine at unix://{path} did not answer within 2 s"
            ):
                DockerSandbox()
    finally:
        get_sandbox.cache_clear()
    said = [r.getMessage() for r in caplog.records if "did not answer within" in r.getMessage()]
    assert len(said) == 1 and "sandbox backend auto uses the local one" in said[0], said


def test_an_engine_that_did_not_answer_in_time_is_not_asked_again_by_the_next_item(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With backend ``docker`` every item builds its sandbox (a failure is not cached by get_sandbox): each looked for
    the hung engine again, waiting its 2 s and leaving one more probe thread hanging on it."""
    from ..fakes.fake_docker_engine import FakeDockerEngine

    path = f"/tmp/fake-docker-{uuid.uuid4().hex[:8]}.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    with FakeDockerEngine(path, ping_byte_every_s=0.1) as engine:
        with pytest.raises(SandboxUnavailable, match="did not answer within 2 s") as first:
            DockerSandbox()
        asked = list(engine.calls)
        assert asked[-1].endswith("/_ping"), asked
        for _ in range(3):
            with pytest.raises(SandboxUnavailable) as again:
                get_sandbox("docker")
            assert str(again.value) == str(first.value)
        assert engine.calls == asked  # not asked again: no new version or ping request


def test_missing_sdk_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # what Python does when the package is not installed
    with pytest.raises(SandboxUnavailable, match=r"pip install 'ragscore\[docker\]'"):
        DockerSandbox()


@pytest.fixture(scope="module")
def docker_sandbox() -> DockerSandbox:
    try:
        sandbox = DockerSandbox()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    try:
        sandbox.client.images.get(DEFAULT_IMAGE)
    except Exception as exc:  # noqa: BLE001 - any engine error means the image cannot be used
        pytest.skip(f"image {DEFAULT_IMAGE} is not present (docker pull {DEFAULT_IMAGE}): {exc}")
    return sandbox


def test_docker_runs_code_with_stdin_as_a_non_root_user(docker_sandbox: DockerSandbox) -> None:
    code = "import os, sys\nprint(os.getuid(), os.getcwd(), sys.stdin.read())"
    result = docker_sandbox.run(code, stdin="hello", limits=Limits(timeout_s=30))
    assert result.ok and result.stdout == "65534 /sandbox hello\n" and result.backend == "docker"


def test_docker_has_no_network_and_a_read_only_root(docker_sandbox: DockerSandbox) -> None:
    code = (
        "import socket\n"
        "for target in [lambda: socket.create_connection(('1.1.1.1', 53), timeout=2), lambda: open('/pwned', 'w')]:\n"
        "    try:\n"
        "        target()\n"
        "        print('ESCAPED')\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    result = docker_sandbox.run(code, limits=Limits(timeout_s=30))
    assert result.ok and "ESCAPED" not in result.stdout and len(result.stdout.split()) == 2


def test_docker_limits_stop_memory_time_and_output(docker_sandbox: DockerSandbox) -> None:
    touch_1gb = "b = bytearray(1 << 30)\nb[::4096] = b'x' * len(b[::4096])"
    memory = docker_sandbox.run(touch_1gb, limits=Limits(memory_mb=64))
    assert memory.stopped_by in ("memory", "killed") or "MemoryError" in memory.stderr
    slow = docker_sandbox.run("import time\ntime.sleep(60)", limits=Limits(timeout_s=3))
    assert slow.stopped_by == "timeout"
    flood = docker_sandbox.run("while True:\n    print('x' * 1000)", limits=Limits(timeout_s=30, output_bytes=10_000))
    assert flood.stopped_by == "output_limit" and flood.truncated


@pytest.mark.parametrize("processes", [1, 8])
def test_docker_program_may_have_processes_at_once_itself_included_and_no_more(
    docker_sandbox: DockerSandbox, processes: int
) -> None:
    """``pids_limit`` is the program's alone, as under local: the bootstrap execs it, and no engine's default init
    (docker-init as pid 1) takes one of the pids."""
    limits = Limits(timeout_s=30, processes=processes)
    fits = docker_sandbox.run(FORK_UP_TO, stdin=str(processes), limits=limits)
    assert (fits.exit_code, fits.stdout) == (0, f"{processes} \n"), fits.stderr
    refused = docker_sandbox.run(FORK_UP_TO, stdin=str(processes + 1), limits=limits)
    assert refused.stdout == f"{processes} BlockingIOError: [Errno 11] Resource temporarily unavailable\n"


def test_docker_removes_its_containers(docker_sandbox: DockerSandbox) -> None:
    docker_sandbox.run("print(1)", limits=Limits(timeout_s=30))
    assert docker_sandbox.client.containers.list(all=True, filters={"label": LABEL}) == []


def test_a_program_past_its_time_is_stopped_as_a_timeout_with_the_engines_real_wait_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine sends /wait's headers at once, so the client's timeout surfaces as a ConnectionError
    wrapping a read timeout: it was an item error (left out of the mean), not a failed, timed-out program."""
    from ..fakes.fake_docker_engine import FakeDockerEngine

    path = f"/tmp/fake-docker-{uuid.uuid4().hex[:8]}.sock"
    with FakeDockerEngine(path) as engine:
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        result = DockerSandbox().run("while True: pass", limits=Limits(timeout_s=1))
    assert result.stopped_by == "timeout" and not result.ok
    assert any(call.endswith("/kill") for call in engine.calls), engine.calls
