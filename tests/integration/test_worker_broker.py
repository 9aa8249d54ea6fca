"""``ragscore worker`` watches its broker: Celery retries a lost one for ever, so it says once when the broker is lost
and once when it is back, and stops with an error (exit 1) once it stayed lost for ``--broker-timeout`` seconds."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import redis

from ragscore_workers.alive import ALIVE_INDEX

from ..support import RedisProcess, ragscore_worker, until

pytestmark = pytest.mark.integration

#: What ``ragscore worker`` says when its broker stops answering (its URL's password hidden).
_LOST = re.compile(r"^broker redis://:\*\*\*@127\.0\.0\.1:\d+/0 unreachable since \d\d:\d\d:\d\d \(.+\): retrying, ")


def _lost_lines(said: list[str]) -> list[str]:
    return [line for line in said if _LOST.match(line)]


def _password_protected(tmp_path: Path) -> tuple[RedisProcess, str]:
    """A Redis of its own that asks for a password, and the broker URL that gives it."""
    server = RedisProcess(tmp_path / "redis", "--requirepass", "s3cret-pw").start_without_ping()
    return server, f"redis://:s3cret-pw@127.0.0.1:{server.port}/0"


def test_a_broker_lost_past_its_timeout_is_said_once_then_stops_the_workers_with_exit_1(tmp_path: Path) -> None:
    server, url = _password_protected(tmp_path)
    proc, said = ragscore_worker(
        tmp_path, server, "cpu", "--broker", url, "--broker-timeout", "3", "--stop-timeout", "30"
    )
    try:
        client = redis.Redis.from_url(url)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said
        server.stop()
        assert proc.wait(timeout=120) == 1, said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()
    assert len(_lost_lines(said)) == 1, said
    assert "(--broker-timeout 3)" in _lost_lines(said)[0]
    assert said[-1].startswith("Error: The broker redis://:***@127.0.0.1:"), said
    assert "past --broker-timeout 3" in said[-1]
    assert "s3cret-pw" not in "".join(said)


def test_a_broker_back_within_its_timeout_is_said_and_the_workers_go_on(tmp_path: Path) -> None:
    server, url = _password_protected(tmp_path)
    proc, said = ragscore_worker(tmp_path, server, "cpu", "--broker", url, "--broker-timeout", "60")
    try:
        client = redis.Redis.from_url(url)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said
        server.stop()
        assert until(lambda: bool(_lost_lines(said)), 60), said
        server.start_without_ping()
        assert until(lambda: any(line.startswith("broker redis://:***@") and " back at " in line for line in said), 60)
        assert until(lambda: client.scard(ALIVE_INDEX) == 1, 120), said  # its worker reconnected and serves again
        assert proc.poll() is None, said
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, said
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        server.stop()
    assert len(_lost_lines(said)) == 1, said
    assert "s3cret-pw" not in "".join(said)
