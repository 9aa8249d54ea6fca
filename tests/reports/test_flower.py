"""``ragscore flower`` against a real run: Flower sees the workers and the scoring tasks, and exports metrics."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from orchestrator import evaluate

from ..support import ROOT, RedisProcess, free_port, make_rows, next_line, tls_certificates

pytestmark = pytest.mark.integration

AUTH = "ragscore:flower-test-pw"


def _get(url: str, auth: str | None = AUTH) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def _until(check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (OSError, ValueError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {check.__name__}")
        time.sleep(0.5)


def _start_flower(cluster: str) -> tuple[subprocess.Popen[str], str]:
    """``ragscore flower`` up and answering its healthcheck, and its base URL; on another free port when the one
    named was taken between free_port() and Flower's bind (free_port only names one)."""
    env = {**os.environ, "FLOWER_BASIC_AUTH": AUTH, "FLOWER_MAX_TASKS": "54321"}
    env.pop("RAGSCORE_BROKER_URL", None)
    for _ in range(3):
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "flower", "--broker", cluster, "--port", str(port),
             "--task_runtime_metric_buckets=0.5,7,30"],  # any other Flower option is passed on
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        _until(lambda p=proc, b=base: p.poll() is not None or _get(b + "/healthcheck", auth=None) == (200, "OK"))
        if proc.poll() is None:
            return proc, base
        said = proc.communicate(timeout=60)[0]  # it exited: its stdout ends
        if "Address already in use" not in said:
            raise AssertionError(f"ragscore flower exited with {proc.returncode}:\n{said[-3000:]}")
    raise AssertionError("ragscore flower found no free port")


@pytest.fixture(scope="module")
def flower(cluster: str) -> Iterator[str]:
    proc, base = _start_flower(cluster)
    try:
        # FLOWER_MAX_TASKS is honoured (Flower reads its command line after the environment: not overridden)
        assert "--max_tasks=54321" in psutil.Process(proc.pid).cmdline()
        assert "--task_runtime_metric_buckets=0.5,7,30" in psutil.Process(proc.pid).cmdline()
        # Celery events are pub/sub: only those sent after Flower subscribed reach it. A worker heartbeat
        # (every 2 s) in /metrics shows the subscription is live before a test starts a run.
        _until(lambda: "flower_worker_online{" in _get(base + "/metrics", auth=None)[1])
        yield base
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[str]) -> None:
    """Stop a ``ragscore flower`` (killed when it does not stop at once)."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def test_flower_shows_workers_tasks_and_metrics_of_a_run(flower: str, cluster: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = evaluate(make_rows(60), {"metrics": ["exact_match"], "chunk_size": {"cpu": 10}}, broker=cluster,
                      out=tmp_path / "out")  # fmt: skip
    assert result.summary.items == 60

    def workers() -> dict[str, Any]:
        status, body = _get(flower + "/api/workers?refresh=1")
        return json.loads(body) if status == 200 and len(json.loads(body)) >= 2 else {}

    found = _until(workers)
    assert all("cpu" in {q["name"] for q in w.get("active_queues", [])} for w in found.values()), found

    seen: list[Any] = []

    def scoring_tasks() -> list[dict[str, Any]]:
        status, body = _get(flower + "/api/tasks?taskname=ragscore.score.cpu&state=SUCCESS")
        tasks = list(json.loads(body).values()) if status == 200 else []
        runs = [t for t in tasks if result.summary.run_id in str(t.get("args"))]
        seen[:] = [status, len(tasks), len(runs), tasks[:1]]
        return runs if len(runs) == 6 else []  # 60 rows in chunks of 10

    try:
        tasks = _until(scoring_tasks)
    except AssertionError:
        raise AssertionError(f"Flower's tasks: {seen}") from None
    assert {t["worker"] for t in tasks} <= set(found)

    def metrics() -> str:
        status, body = _get(flower + "/metrics", auth=None)
        return body if status == 200 and 'task="ragscore.score.cpu"' in body else ""

    text = _until(metrics)
    assert "flower_events_total" in text and 'type="task-succeeded"' in text
    assert "flower_worker_online" in text and "flower_task_runtime_seconds_bucket" in text
    assert 'le="7.0"' in text  # the buckets passed on to Flower


def test_flower_api_needs_the_credentials(flower: str) -> None:
    assert _get(flower + "/api/workers", auth=None)[0] == 401
    assert _get(flower + "/api/workers", auth="ragscore:wrong")[0] == 401


def test_flower_refuses_to_start_without_credentials(cluster: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "flower", "--broker", cluster, "--port", str(free_port())],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "FLOWER_BASIC_AUTH=user:password" in result.stderr
    on_the_command_line = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "flower", "--broker", cluster, "--basic_auth=a:b"],
        capture_output=True, text=True, cwd=ROOT, env={**env, "FLOWER_BASIC_AUTH": AUTH}, timeout=60,
    )  # fmt: skip
    assert on_the_command_line.returncode == 2
    assert "--basic_auth is not passed to Flower: set FLOWER_BASIC_AUTH" in on_the_command_line.stderr
    open_wide = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "flower", "--broker", cluster, "--no-auth", "--address=0.0.0.0"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    assert open_wide.returncode == 2  # ragscore's own --address, checked: --no-auth stays on 127.0.0.1
    assert "--no-auth serves on 127.0.0.1 only" in open_wide.stderr
    passed_on = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "flower", "--broker", cluster, "--no-auth", "--",
         "--address=0.0.0.0"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    assert passed_on.returncode == 2, passed_on.stderr  # as a Flower option it would override ours: refused
    assert "--address is not passed to Flower: use ragscore flower --address" in passed_on.stderr


def _get_unix(sock: Path, path: str) -> tuple[int, str]:
    """A GET of ``path`` from an HTTP server on the unix socket ``sock``."""
    conn = http.client.HTTPConnection("localhost", timeout=10)
    conn.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.sock.connect(str(sock))
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        conn.close()


def test_flower_says_where_it_serves_when_its_options_move_it(redis_server: RedisProcess) -> None:
    """--unix_socket and --url_prefix, passed on to Flower, were said 'Flower on http://127.0.0.1:5555', where
    nothing listens."""
    short = Path(tempfile.mkdtemp(prefix="rf", dir="/tmp"))  # a socket path is at most ~100 bytes: not in tmp_path
    sock = short / "flower.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "flower", "--broker", redis_server.url, f"--unix_socket={sock}",
         "--url_prefix=flower"],
        cwd=ROOT, env={**os.environ, "FLOWER_BASIC_AUTH": AUTH, "COLUMNS": "250"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        said = next_line(proc.stdout, 180) if proc.stdout else ""
        _until(lambda: proc.poll() is not None or _get_unix(sock, "/flower/healthcheck") == (200, "OK"))
        assert proc.poll() is None, proc.returncode  # it serves there
    finally:
        _stop(proc)
        shutil.rmtree(short, ignore_errors=True)
    assert said.strip() == f"Flower on unix socket {sock}, under /flower (max 100000 tasks kept)"


@pytest.mark.parametrize(("user", "shown"), [(":", ""), ("default", "default@"), (":s3cret", ":**@")])
def test_flower_names_its_broker_with_a_mask_only_where_the_url_has_a_password(
    tmp_path: Path, redis_server: RedisProcess, user: str, shown: str
) -> None:
    """Flower's ``Broker:`` line (kombu's URL of the connection) put kombu's mask in every URL: ``redis://:**@host``
    for a broker with no password (``redis://:@host``, a user without one), as if it had one. Such a URL is shown
    as it is; one with a password still hides it."""
    host = f"127.0.0.1:{redis_server.port}/0"
    log = tmp_path / "flower.log"
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "RAGSCORE_BROKER_URL": f"redis://{user}@{host}"}
    # port 0: Flower binds one the kernel picks (a free_port() could be taken before its bind; the port is not read)
    command = [sys.executable, "-m", "orchestrator.cli", "flower", "--no-auth", "--port", "0"]
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        _until(lambda: "Broker:" in log.read_text())
    finally:
        _stop(proc)
    said = log.read_text()
    assert f"Broker: redis://{shown}{host}" in said, said
    assert "s3cret" not in said


def test_flower_on_a_tls_broker_reads_its_queues_with_the_urls_tls_options(tmp_path: Path) -> None:
    """Flower reads the queues' lengths (``/api/queues/length``, its broker page) with a Redis client of its own,
    which takes TLS options only from Celery's ``broker_use_ssl``: on a ``rediss://`` broker it checked the server's
    certificate against the system's CAs, not the URL's ``ssl_ca_certs``, and answered 500."""
    certs = tls_certificates(tmp_path)
    server = RedisProcess(
        tmp_path / "redis", "--port", "0", "--tls-cert-file", str(certs["crt"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no", "--requirepass", "s3cret-tls", tls=True,
    )  # fmt: skip
    server.start_without_ping()
    url = f"rediss://:s3cret-tls@127.0.0.1:{server.tls_port}/0?ssl_cert_reqs=required&ssl_ca_certs={certs['ca']}"
    proc = None
    try:
        redis.Redis.from_url(url).lpush("cpu", "{}")  # one message waiting in the cpu queue
        proc, base = _start_flower(url)
        status, body = _get(base + "/api/queues/length")
        assert status == 200, body[-2000:]
        assert {"name": "cpu", "messages": 1} in json.loads(body)["active_queues"], body
    finally:
        if proc is not None:
            _stop(proc)
        server.stop()
