"""The embedded mode's private redis-server after a large run: reading its store back takes longer than a start."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from orchestrator.embedded_redis import EmbeddedRedis

pytestmark = pytest.mark.integration


def _servers(embedded: EmbeddedRedis) -> list[psutil.Process]:
    """The redis-server processes serving this data dir's socket."""
    return [p for p in psutil.process_iter(["cmdline"]) if str(embedded.socket) in " ".join(p.info["cmdline"] or [])]


def test_a_server_reading_back_its_store_is_waited_for_never_started_twice(home: Path) -> None:
    """After a run of a million items the server reads ~1 GB of append-only file back for ~15 s: LOADING was
    taken for "not running", so the next command started a second server on the same data dir and socket (and
    failed at the 10 s start timeout)."""
    first = EmbeddedRedis(home)
    first.acquire()
    pipe = first.client.pipeline(transaction=False)
    for i in range(100_000):
        pipe.set(f"ragscore:test:{i}", "x" * 100)
    pipe.execute()
    first.release()  # shut down; its data stays in the append-only file
    assert not _servers(first)
    # Started as acquire() starts it, but slowed down reading back (Redis's own key-load-delay, microseconds a key).
    subprocess.run([*first.server_args(), "--key-load-delay", "30"], check=True, timeout=30)
    later = EmbeddedRedis(home)
    try:
        later.acquire()
        assert later.client.dbsize() >= 100_000  # it waited for the server that was loading
        assert len(_servers(later)) == 1
    finally:
        later.release()
        left = _servers(later)
        for proc in left:  # a second server would hold the data dir after the test: never leave it running
            proc.kill()
    assert not left
