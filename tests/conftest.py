"""Shared fixtures: a real redis-server per session, real worker processes, a private RAGSCORE_HOME."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragscore_workers.store import RunStore, redis_client

from .support import RedisProcess, WorkerProcess

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart"


#: Terminal size variables a pytest-xdist process finds set (COLUMNS=80, LINES=24) where pytest's own had none.
TERMINAL_SIZE = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(pytest-xdist, in the process that starts the others) Hands each process its own terminal size variables."""
    node.workerinput["terminal_size"] = {name: os.environ.get(name) for name in TERMINAL_SIZE}


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist process has the environment of the pytest that started it: the children its tests start (a CLI
    that wraps its lines at COLUMNS) print as they do in a serial run."""
    for name, value in getattr(config, "workerinput", {}).get("terminal_size", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True)
def _no_warm_workers_left() -> Iterator[None]:
    """What a test's evaluate() calls kept running (orchestrator.warm) is stopped once it ends, as each call stopped
    it before: a later test would find the workers of another's RAGSCORE_HOME (its own, a module or session
    fixture's) among this process's children. The ``home`` fixture stops them before its folder is removed."""
    yield
    if "orchestrator.warm" in sys.modules:
        sys.modules["orchestrator.warm"].stop_kept()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    with tempfile.TemporaryDirectory(prefix="rs-redis-") as tmp:
        server = RedisProcess(Path(tmp)).start()
        yield server
        server.stop()


@pytest.fixture
def store(redis_server: RedisProcess) -> RunStore:
    return RunStore(redis_client(redis_server.url), ttl_s=3600)


@pytest.fixture
def worker_store(redis_server: RedisProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunStore]:
    """The store the task functions use (``tasks.get_store``), on the test Redis: tasks called in this process."""
    from ragscore_workers import tasks

    monkeypatch.setenv("RAGSCORE_STORE_URL", redis_server.url)
    tasks.get_store.cache_clear()
    yield tasks.get_store()
    tasks.get_store.cache_clear()


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private, short RAGSCORE_HOME (unix socket paths must stay short)."""
    with tempfile.TemporaryDirectory(prefix="rsh-", dir="/tmp") as tmp:
        monkeypatch.setenv("RAGSCORE_HOME", tmp)
        monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
        yield Path(tmp)
        if "orchestrator.warm" in sys.modules:  # what the test's evaluate() calls kept running in this home
            sys.modules["orchestrator.warm"].stop_kept()


@pytest.fixture(scope="session")
def cluster(redis_server: RedisProcess) -> Iterator[str]:
    """Two real ``ragscore worker`` processes serving the cpu queue; yields the broker URL."""
    with tempfile.TemporaryDirectory(prefix="rsw-", dir="/tmp") as tmp:
        workers = [WorkerProcess(redis_server.url, "cpu", Path(tmp), concurrency=1).start() for _ in range(2)]
        yield redis_server.url
        for w in workers:
            w.stop()
