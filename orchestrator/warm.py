"""The embedded Redis and local workers a process's ``evaluate()`` calls keep between them (a notebook's dozens).

A finished embedded run of the Python API leaves its workers running and the server registered to this process
(:class:`~.embedded_redis.EmbeddedRedis`: its lane stays this process's); a later run reuses them when they still
fit: the same ``RAGSCORE_HOME``, the same server answering, every worker alive, started with the same environment
(but for pytest's name of the test in progress), working directory and pool sizes (what a worker reads once, at its
start: judge keys, plugins, sandbox settings, the embed device), and the files of the ``RAGSCORE_PLUGINS`` modules
unchanged (a notebook's metric, edited and reloaded, is the next call's). Anything else stops them and starts afresh,
and so does a run interrupted or failed once its rows were sent (its queues may hold its tasks). What is kept is
stopped at exit (by this process only: a forked child owns none) or by :func:`stop_kept_once_idle` (the API's
``shutdown()``).
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from .embedded_redis import EmbeddedRedis
from .workers import LocalWorkers, stop_forced

__all__ = [
    "keep",
    "kept_workers",
    "one_warm_run",
    "stop_if_server_lost",
    "stop_kept",
    "stop_kept_once_idle",
    "worker_fingerprint",
]

#: Seconds idle kept workers get to exit on a SIGTERM before they are killed.
STOP_TIMEOUT_S = 5.0

#: Variables left out of :func:`worker_fingerprint`: set anew for each test and phase by pytest (a user's suite
#: calling ``evaluate()`` in each test would stop and start the workers every time, ~6 s), and never read by a
#: worker. Only variables of that kind belong here: any other may change what a worker does.
PER_CALL_VARIABLES = ("PYTEST_CURRENT_TEST",)


@dataclass
class _Kept:
    """What a finished run left running: a registration that holds the server and this process's lane, the
    workers of that lane, and what they were started with."""

    redis: EmbeddedRedis
    broker_url: str
    fingerprint: str
    server_pid: int | None
    workers: list[LocalWorkers] = field(default_factory=list)

    def fits(self, broker_url: str, fingerprint: str) -> bool:
        """Whether a run whose queues are at ``broker_url`` (a server's socket, a lane) may use these workers, started
        as ``fingerprint`` says: the same server still answering there, and every worker alive."""
        return (
            (self.broker_url, self.fingerprint) == (broker_url, fingerprint)
            and self.server_pid is not None
            and self.redis.serving() == self.server_pid
            and not any(w.dead() for w in self.workers)
        )

    def queues(self) -> set[str]:
        return {queue for w in self.workers for queue in w.queues}


_kept: _Kept | None = None
#: Held by the run that may use what is kept: runs in other threads meanwhile start workers of their own.
_warm_lock = threading.Lock()


@contextmanager
def one_warm_run() -> Iterator[bool]:
    """Whether this run may use and keep the process's warm workers: True for one run at a time."""
    if not _warm_lock.acquire(blocking=False):
        yield False
        return
    try:
        yield True
    finally:
        _warm_lock.release()


def worker_fingerprint(concurrency: dict[str, int] | None) -> str:
    """A digest of what a local worker is started with and reads once (this process's environment, its working
    directory and Python, the pool sizes, the plug-in modules' files; not :data:`PER_CALL_VARIABLES`): only compared,
    never logged (the environment holds API keys)."""
    digest = hashlib.sha256()
    for name, value in sorted(os.environ.items()):
        if name in PER_CALL_VARIABLES:
            continue
        digest.update(f"{name}\0{value}\0".encode(errors="surrogateescape"))
    digest.update(f"{os.getcwd()}\0{sys.executable}\0{sorted((concurrency or {}).items())}".encode())
    for path in _plugin_files():
        with suppress(OSError):
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_mtime_ns}\0{stat.st_size}\0".encode(errors="surrogateescape"))
    return digest.hexdigest()


def _plugin_files() -> list[Path]:
    """The source files of the modules ``RAGSCORE_PLUGINS`` names (a package's, all of them), which a worker imports
    once: one edited since the workers started makes them stale. Those not found here are left to the run's checks."""
    files: list[Path] = []
    for name in filter(None, (m.strip() for m in os.environ.get("RAGSCORE_PLUGINS", "").split(","))):
        try:
            spec = importlib.util.find_spec(name)
        except Exception:  # noqa: BLE001  (a parent package that fails to import: the run's checks say why)
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:  # a package: its modules' files too
            files.extend(
                file for folder in spec.submodule_search_locations for file in sorted(Path(folder).rglob("*.py"))
            )
        elif spec.origin and spec.has_location:
            files.append(Path(spec.origin))
    return files


def kept_workers(
    broker_url: str, queues: list[str], fingerprint: str, start: Callable[[list[str]], LocalWorkers]
) -> list[LocalWorkers]:
    """The workers of a run needing ``queues``: the kept ones when they fit (:meth:`_Kept.fits`), with those of
    the queues they lack started by ``start``; else, the kept ones stopped, ``start(queues)``'s."""
    if _kept is not None and not _kept.fits(broker_url, fingerprint):
        stop_kept()
    if _kept is None:
        return [start(queues)]
    if missing := [queue for queue in queues if queue not in _kept.queues()]:
        _kept.workers.append(start(missing))
    return list(_kept.workers)


def stop_if_server_lost() -> None:
    """Stop what is kept when its server no longer answers (killed, or its ``RAGSCORE_HOME`` removed): before a run
    acquires the server, which would start another on the same socket, where the lost one's exit would remove it."""
    if _kept is not None and _kept.redis.serving() != _kept.server_pid:
        stop_kept()


def keep(home: Path, broker_url: str, fingerprint: str, workers: list[LocalWorkers]) -> None:
    """Keep a finished run's ``workers`` running for this process's next run, and the server registered to it."""
    global _kept
    if _kept is not None:
        _kept.workers = workers
        return
    _kept = _Kept(EmbeddedRedis(home), broker_url, fingerprint, None, workers)
    try:
        _kept.redis.acquire(lane=True)  # this process's lane: the run's, which it still holds
    except BaseException:
        stop_kept()
        raise
    _kept.server_pid = _kept.redis.serving()


def stop_kept_once_idle() -> None:
    """:func:`stop_kept` once no run uses what is kept (one in flight in another thread finishes first: its workers
    were stopped under it, and it kept them again as it ended)."""
    with _warm_lock:
        stop_kept()


def stop_kept() -> None:
    """Stop the kept workers and give the server's registration back (the server stops when no other run uses it),
    unless a stop is forced (:func:`.workers.stop_forced`: a second Ctrl-C) while another process holds its lock."""
    global _kept
    kept, _kept = _kept, None
    if kept is None:
        return
    try:
        for w in kept.workers:
            w.stop(STOP_TIMEOUT_S)
    finally:
        kept.redis.release(given_up=stop_forced)  # in a shutdown's step: a second Ctrl-C ends its wait for the lock


def _forget_in_child() -> None:
    """A forked child owns none of its parent's workers and server registration: it neither uses nor stops them."""
    global _kept, _warm_lock
    _kept, _warm_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
atexit.register(stop_kept)
