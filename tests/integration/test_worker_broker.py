"""``ragscore worker`` watches its broker: Celery retries a lost one for ever, so it says once when the broker is lost
and once when it is back, and stops with an error (exit 1) once it stayed lost for ``--broker-timeout`` seconds."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from orchestrator.broker_watch import BrokerWatch
from ragscore_workers.alive import ALIVE_INDEX
from ragscore_workers.errors import BrokerError

from ..support import RedisProcess, ragscore_worker, until

pytestmark = pytest.mark.integration

#: What ``ragscore worker`` says when its broker stops answering (its URL's password hidden).
_LOST = re.compile(r"^broker redis://:\*\*\*@127\.0\.0\.1:\d+/0 unreachable since \d\d:\d\d:\d\d \(.+\): retrying, ")


def _lost_lines(said: list[str]) -> list[str]:
    return [line for line in said if _LOST.match(line)]


@contextlib.contextmanager
def _ready_worker(tmp_path: Path, *options: str) -> Iterator[tuple[RedisProcess, subprocess.Popen[str], list[str]]]:
    """A Redis of its own that asks for a password, and ``ragscore worker -Q cpu *options`` of it once its worker is
    ready, with the list its stderr's lines are read into; then whatever of them is left is killed."""
    server = RedisProcess(tmp_path / "redis", "--requirepass", "s3cret-pw").start_without_ping()
    url = f"redis://:s3cret-pw@127.0.0.1:{server.port}/0"
    proc, said = ragscore_worker(tmp_path, server, "cpu", "--broker", url, *options)
    try:
        client = redis.Redis.from_url(url)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said
        yield server, proc, said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()
    assert "s3cret-pw" not in "".join(said)


def test_a_broker_lost_past_its_timeout_is_said_once_then_stops_the_workers_with_exit_1(tmp_path: Path) -> None:
    with _ready_worker(tmp_path, "--broker-timeout", "3", "--stop-timeout", "30") as (server, proc, said):
        server.stop()
        assert proc.wait(timeout=120) == 1, said
    assert len(_lost_lines(said)) == 1, said
    assert "(--broker-timeout 3)" in _lost_lines(said)[0]
    assert said[-1].startswith("Error: The broker redis://:***@127.0.0.1:"), said
    assert "past --broker-timeout 3" in said[-1]


def test_a_broker_back_within_its_timeout_is_said_and_the_workers_go_on(tmp_path: Path) -> None:
    with _ready_worker(tmp_path, "--broker-timeout", "60") as (server, proc, said):
        server.stop()
        assert until(lambda: bool(_lost_lines(said)), 60), said
        server.start_without_ping()
        assert until(lambda: any(line.startswith("broker redis://:***@") and " back at " in line for line in said), 60)
        client = redis.Redis(port=server.port, password="s3cret-pw")
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said  # its worker reconnected and serves again
        assert proc.poll() is None, said
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, said
    assert len(_lost_lines(said)) == 1, said


def test_a_broker_that_refuses_its_password_is_said_to_refuse_it_at_once(tmp_path: Path) -> None:
    """A Redis whose password changed answers: its refusal is said as such on the first ping, not as a broker
    unreachable."""
    server = RedisProcess(tmp_path / "redis", "--requirepass", "n3w-pw").start_without_ping()
    said: list[str] = []
    try:
        with BrokerWatch(f"redis://:0ld-pw@127.0.0.1:{server.port}/0", 900, said.append) as watch:
            assert until(lambda: watch.check() or bool(said), 60), said
    finally:
        server.stop()
    assert len(said) == 1, said
    assert said[0].startswith(f"broker redis://:***@127.0.0.1:{server.port}/0 answering but refusing it since "), said
    assert "password" in said[0] and "unreachable" not in said[0], said
    assert "0ld-pw" not in said[0] and "n3w-pw" not in said[0], said


def _stopped(watch: BrokerWatch) -> BrokerError | None:
    """The error the watch's check raises once the broker was lost past its timeout, else None."""
    try:
        watch.check()
    except BrokerError as exc:
        return exc
    return None


def test_a_broker_that_refuses_its_user_the_ping_mid_run_is_said_to_refuse_it_and_counts_toward_its_timeout(
    tmp_path: Path,
) -> None:
    """An ACL user whose +ping was taken away mid-run is answered NOPERM: the watch said the broker unreachable. It
    says it refuses the user, naming the reply (not the password), and the refusal counts toward --broker-timeout as
    an unreachable broker does (an admin may give the permission back meanwhile)."""
    server = RedisProcess(tmp_path / "redis").start_without_ping()
    admin = redis.Redis(port=server.port)
    admin.acl_setuser("watcher", enabled=True, passwords=["+s3cret-pw"], keys=["*"], channels=["*"], commands=["+@all"])
    url = f"redis://watcher:s3cret-pw@127.0.0.1:{server.port}/0"
    said: list[str] = []
    pings = lambda: admin.info("commandstats").get("cmdstat_ping", {}).get("calls", 0)  # noqa: E731
    try:
        with BrokerWatch(url, 3, said.append) as watch:
            assert until(lambda: pings() >= 1, 60)  # answered: nothing to say
            watch.check()
            admin.acl_setuser("watcher", enabled=True, commands=["-ping"])
            assert until(lambda: watch.check() or bool(said), 60), said
            assert until(lambda: _stopped(watch) is not None, 60), said
            with pytest.raises(BrokerError) as stopped:  # and again at each check, past it
                watch.check()
    finally:
        server.stop()
    assert len(said) == 1, said
    assert said[0].startswith(f"broker redis://watcher:***@127.0.0.1:{server.port}/0 answering but refusing it "), said
    assert "it replies NOPERM to its ACL user 'watcher'" in said[0] and "(--broker-timeout 3)" in said[0], said
    assert "unreachable" not in said[0] and "s3cret-pw" not in said[0], said
    stop = str(stopped.value)
    assert " refused it from " in stop and "past --broker-timeout 3" in stop, stop
    assert "NOPERM" in stop and "s3cret-pw" not in stop, stop


def test_a_broker_loading_its_data_is_said_to_load_it_not_to_be_unreachable(tmp_path: Path) -> None:
    """A Redis restarted with a dump to load answers LOADING until it has: said as loading, then back (untested
    before). 300 keys of 2 KB, saved uncompressed, loaded 200 ms a key (``key-load-delay``), answer LOADING for a
    minute, until the watch said so: then the delay is set to 0 (CONFIG SET runs while Redis loads), and the load ends
    at once. No window to hit on a loaded machine. The server answers between keys only where it reads no more than
    ``loading-process-events-interval-bytes`` at once (a compressed dump is read in a few reads, and a ping waits for
    the load's end)."""
    data = tmp_path / "redis"
    saved = RedisProcess(data, "--rdbcompression", "no").start_without_ping()
    client = redis.Redis(port=saved.port)
    client.mset({f"k{i}": "v" * 2048 for i in range(300)})
    client.save()
    saved.stop()
    server = RedisProcess(data, "--key-load-delay", "200000", "--loading-process-events-interval-bytes", "1024")
    said: list[str] = []
    try:
        with BrokerWatch(server.start_without_ping().url, 900, said.append) as watch:
            assert until(lambda: watch.check() or bool(said), 60), said
            loading = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0))  # LOADING: not retried, waited
            loading.config_set("key-load-delay", 0)  # the rest of the load at once
            assert until(lambda: watch.check() or len(said) == 2, 60), said
    finally:
        server.stop()
    assert said[0].startswith(f"broker redis://127.0.0.1:{server.port}/0 answering but still loading its data "), said
    assert "(Redis is loading the dataset in memory)" in said[0] and "unreachable" not in said[0], said
    assert " back at " in said[1], said


def test_a_ping_that_a_black_hole_holds_up_never_holds_up_the_supervisors_loop() -> None:
    """The supervisor's loop restarts dead workers between two checks of the watch: a check returns while the ping
    it would wait for is still unanswered (a listener that never answers holds it up to its 5 s timeout)."""
    with socket.create_server(("127.0.0.1", 0)) as hole:
        hole.settimeout(60)
        said: list[str] = []
        with BrokerWatch(f"redis://127.0.0.1:{hole.getsockname()[1]}/0", 900, said.append) as watch:
            conn, _ = hole.accept()  # the watch's ping, now waiting for an answer
            with conn:
                watch.check()
                conn.setblocking(False)
                with pytest.raises(BlockingIOError):  # its end still open, nothing more to read: the ping waits on
                    while conn.recv(4096):  # what it sent; b"" once it gave up, closing its end
                        pass
    assert said == [], said  # not yet said unreachable: the ping is under way
