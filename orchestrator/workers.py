"""Local Celery worker processes: one per queue, with that queue's pool defaults.

Used by the embedded mode (started and stopped around a run) and by ``ragscore worker`` (which
supervises them until stopped). Every worker also consumes the ``control`` queue. An embedded run's workers have
private node names; ``ragscore worker``'s have stable ones (:func:`node_names`), so that a worker restarted is the
same worker to Flower and to Prometheus.
"""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import TextIO, TypeVar

from ragscore_workers.app import CONTROL_QUEUE
from ragscore_workers.cgroups import PROC_CGROUP, own_cgroup
from ragscore_workers.die_with_parent import PARENT_ENV
from ragscore_workers.errors import BrokerError, ConfigError
from ragscore_workers.limits import usable_cpus
from ragscore_workers.readiness import DRAINED, READY, READY_FD_ENV
from ragscore_workers.redaction import redact_url

from .atomic_file import name_part
from .broker_watch import DEFAULT_BROKER_TIMEOUT_S, BrokerWatch
from .worker_echo import Echo, open_log, tee

__all__ = [
    "POOL_DEFAULTS",
    "LocalWorkers",
    "PoolSpec",
    "exit_reason",
    "first_stop_signal",
    "host_gaps",
    "live_node_names",
    "log_name",
    "node_name",
    "node_names",
    "oom_kills",
    "prune_logs",
    "raise_if_stop_signalled",
    "shutdown_step",
    "stop_again",
    "stop_forced",
    "stop_signals",
    "stop_signals_as_interrupt",
    "worker_command",
]

log = logging.getLogger(__name__)

#: A queue's worker may be restarted this many times within RESTART_WINDOW_S before the run gives up.
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
#: Worker logs (``worker-QUEUE-HOST-PID.log``, one set per run's process, and ``ragscore worker``'s rotated
#: ``worker-QUEUE-HOST-PID.log.1``) older than this are removed when workers start, so a home that served a notebook's
#: thousand evaluate() calls does not keep a thousand sets.
LOG_KEEP_S = 14 * 24 * 3600
#: ``ragscore worker``'s node name for each queue's worker (``--name``'s default): ``{queue}`` and ``{n}`` filled in,
#: ``{n}`` the first number from 1 that no live worker of the cluster, nor another of its ``ragscore worker`` processes
#: on this host, has taken; then Celery expands ``%h`` (the host name). So a worker restarted gets its old name back.
DEFAULT_NODE_NAME = "{queue}-{n}@%h"
#: Seconds :meth:`LocalWorkers.stop` waits for the workers to end (their running tasks: a judge call under way) before
#: it kills them.
STOP_S = 15.0
#: Seconds a worker stopped before it was ready (it holds no task, and takes none once stopped) is given to exit before
#: it is killed, in place of the warm stop's wait: one SIGTERMed while it booted outlived a wait of 180 s once.
UNREADY_STOP_S = 30.0
#: Seconds a worker that said it is drained (its consumer stopped, no task in flight: ``readiness.say_drained``) is
#: given to exit before it is killed, in place of the warm stop's wait: only its shutdown is left (its pool's join,
#: which may hang with no task held).
DRAINED_STOP_S = 10.0
#: How often :meth:`LocalWorkers.stop` looks whether its workers exited or said they are drained.
STOP_POLL_S = 0.1
#: The most numbers :func:`node_names` tries for one queue's ``{n}``.
MAX_NODE_NUMBER = 1000
#: Seconds live workers get to answer the ping that asks for their node names.
NODE_PING_S = 1.0
#: Where the cgroup file systems are mounted: :func:`oom_kills` reads the kernel's count of OOM kills there, in the
#: cgroup :data:`PROC_CGROUP` names (a worker's cgroup is its starter's).
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class PoolSpec:
    """How one queue's worker runs: Celery pool, concurrency, prefetch multiplier."""

    pool: str
    concurrency: int
    prefetch: int = 1


_CPUS = usable_cpus()

#: Per-queue pool defaults. cpu/code: a process per core. embed: one process holding one model (prefork
#: with one child: the model loads lazily in the child, so CUDA is never initialised before a fork).
#: judge and target: many threads, since their calls wait on the network.
POOL_DEFAULTS: dict[str, PoolSpec] = {
    "cpu": PoolSpec("prefork", _CPUS, prefetch=4),
    "embed": PoolSpec("prefork", 1),
    "judge": PoolSpec("threads", 32),
    "code": PoolSpec("prefork", _CPUS),
    "target": PoolSpec("threads", 16),
}


def worker_command(
    queue: str, concurrency: int | None = None, loglevel: str = "WARNING", name: str | None = None
) -> list[str]:
    """argv of one Celery worker serving ``queue`` and the control queue, named ``name`` (None: a private name of its
    own, ``QUEUE-RANDOM@HOST``, as an embedded run's workers have)."""
    if queue not in POOL_DEFAULTS:
        raise BrokerError(f"Unknown queue {queue!r}; choose from {', '.join(POOL_DEFAULTS)}")
    spec = POOL_DEFAULTS[queue]
    return [
        sys.executable, "-m", "celery", "-A", "ragscore_workers.app", "worker",
        "-Q", f"{queue},{CONTROL_QUEUE}",
        "-P", spec.pool,
        "-c", str(concurrency or spec.concurrency),
        "--prefetch-multiplier", str(spec.prefetch),
        "-n", name or f"{queue}-{uuid.uuid4().hex[:8]}@%h",
        "-E", "--without-gossip", "--without-mingle",
        "-l", loglevel,
    ]  # fmt: skip


def node_name(template: str, queue: str, n: int = 1) -> str:
    """The node name Celery gives a worker started with ``-n template``: ``{queue}`` and ``{n}`` filled in, ``celery@``
    put before a name without ``@``, then ``%h`` (the host name), ``%n`` (its first label) and ``%d`` (its domain)
    expanded."""
    from celery.utils.nodenames import default_nodename, host_format

    return str(host_format(default_nodename(template.replace("{queue}", queue).replace("{n}", str(n)))))


def live_node_names(timeout_s: float | None = None) -> set[str]:
    """The node names of the workers that answer a ping on the Celery app's broker within ``timeout_s`` (None:
    :data:`NODE_PING_S`, read at each call)."""
    from ragscore_workers.app import app

    timeout_s = NODE_PING_S if timeout_s is None else timeout_s
    return {name for reply in app.control.ping(timeout=timeout_s) or [] for name in reply}


@contextmanager
def node_names(
    queues: list[str], template: str | None, live: Collection[str], broker_url: str
) -> Iterator[dict[str, str]]:
    """A node name per queue for ``ragscore worker``'s workers of the broker at ``broker_url``, none of ``live`` (its
    live workers), each claimed on this host for that broker while the block runs (:func:`_host_claim`), so a
    ``ragscore worker`` of that broker starting beside this one takes other names (one of another broker may have the
    same: its Flower and Prometheus are others). ``template`` (``--name``): Celery's ``-n`` with ``{queue}`` and
    ``{n}`` (:func:`node_name`), refused (ConfigError) when its name is taken and it has no ``{n}`` to try another;
    None: :data:`DEFAULT_NODE_NAME`."""
    if template is not None and len(queues) > 1 and "{queue}" not in template:
        raise ConfigError(f"--name {template!r} would name the workers of {', '.join(queues)} alike: put {{queue}} in "
                          "it (e.g. '{queue}-a@%h')")  # fmt: skip
    with ExitStack() as held:
        yield {queue: _claimed_name(queue, template, live, redact_url(broker_url), held) for queue in queues}


def _claimed_name(queue: str, template: str | None, live: Collection[str], broker: str, held: ExitStack) -> str:
    """The first of ``template``'s names for ``queue`` (``{n}`` from 1) that no live worker has and this host's claim
    on which for ``broker`` (its URL, the password hidden) ``held`` now keeps."""
    pattern = template or DEFAULT_NODE_NAME
    name, who = "", ""
    for n in range(1, MAX_NODE_NUMBER + 1) if "{n}" in pattern else (1,):
        name = node_name(pattern, queue, n)
        if name in live:
            who = "a live worker of the cluster"
        elif (claim := _host_claim(broker, name)) is None:
            who = "a ragscore worker on this host"
        else:
            held.enter_context(claim)
            return name
    raise ConfigError(f"--name {pattern!r}: {name} is taken by {who} (two workers of one name mix up their replies, "
                      "and Flower's and Prometheus' series): stop it, or give another --name")  # fmt: skip


def _host_claim(broker: str, name: str) -> AbstractContextManager[object] | None:
    """This process's claim on node name ``name`` of ``broker``'s workers on this host, held while the context
    returned is open; None where another process holds it. The claim is an abstract Unix socket's address, which one
    process binds at a time and the kernel frees when the process exits, killed too. Where there are none (not Linux:
    macOS) or the socket is refused (a seccomp profile), a claim of nothing: the ping of live workers alone keeps
    names apart."""
    if not sys.platform.startswith("linux"):
        return nullcontext()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return nullcontext()
    try:
        sock.bind("\0ragscore-node-" + hashlib.sha256(f"{broker}\n{name}".encode()).hexdigest()[:40])
    except OSError as exc:
        sock.close()
        return None if exc.errno == errno.EADDRINUSE else nullcontext()
    return sock


def host_gaps(queues: list[str]) -> list[str]:
    """What this host lacks for the queues its workers will serve, said before they start: a worker that lacks it
    takes the queue's tasks from every run and errors their items (a judge key, the judge or embed extra,
    bubblewrap)."""
    gaps = []
    if "judge" in queues:
        from ragscore_workers.providers.groq_sdk import GroqProvider
        from ragscore_workers.providers.openai_compat import OpenAICompatProvider

        keys = (GroqProvider.default_key_env, OpenAICompatProvider.default_key_env)
        if not any(os.environ.get(key, "").strip() for key in keys):
            gaps.append(
                f"neither {keys[0]} nor {keys[1]} is set on this host, so this judge worker errors every item of a "
                "suite whose judge reads one of them: set it in the worker's environment (judge hosts only). It may "
                "be fine: a suite whose judge metrics name another variable with their api_key_env param, or whose "
                "judge.base_url is a keyless server on this machine or a private network, needs neither"
            )
        if importlib.util.find_spec("groq") is None:
            gaps.append(
                "the groq SDK is not installed on this host, so this judge worker errors every item of a suite whose "
                "judge.provider is groq (the default): pip install 'ragscore[judge]' (an openai judge needs no extra)"
            )
    if "embed" in queues:
        from ragscore_workers.embedding import _require_embed_extra

        gaps += _said_problem(_require_embed_extra)
    if "code" in queues:
        from ragscore_workers.sandbox.local import PACKAGES, tool_path

        gaps += [
            f"{said}; this code worker errors every item of code_test's local sandbox (the suite's sandbox "
            "backend docker needs no bubblewrap)"
            for said in _said_problem(lambda: tool_path("bwrap", PACKAGES["bwrap"]))
        ]
    return gaps


def _said_problem(check: Callable[[], object]) -> list[str]:
    """The message of the error ``check`` raises on purpose (a ConfigError, SandboxUnavailable), as a list of none
    or one."""
    from ragscore_workers.errors import RagscoreError

    try:
        check()
    except RagscoreError as exc:
        return [str(exc)]
    return []


def log_name(queue: str) -> str:
    """The name of the log file of this process's worker of ``queue``: ``worker-QUEUE-HOST-PID.log``, this host's
    name and this process's pid, so that no two processes share one. A pid alone repeats across the containers or pods
    that share a RAGSCORE_HOME (each ``ragscore worker`` their pid 1: one file, rotated by each in turn)."""
    return f"worker-{queue}-{name_part(socket.gethostname())}-{os.getpid()}.log"


def prune_logs(log_dir: Path, keep_s: float | None = None) -> int:
    """Remove the worker logs in ``log_dir`` not written to for ``keep_s`` seconds (None: :data:`LOG_KEEP_S`, read
    at each call); returns how many went."""
    cutoff, removed = time.time() - (LOG_KEEP_S if keep_s is None else keep_s), 0
    for path in [*log_dir.glob("worker-*.log"), *log_dir.glob("worker-*.log.1")]:
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed += 1
        except OSError:  # gone already (another run pruned it), or not ours to remove
            continue
    return removed


_F = TypeVar("_F", bound=Callable[..., object])

#: The code of the functions in which a stop signal is counted, never raised (:func:`_counted_in`): True, a step of a
#: shutdown (:func:`shutdown_step`), where one forces the stop (:func:`stop_forced`); False, a worker's start
#: (:meth:`LocalWorkers._spawn`), which raises it once the worker is recorded.
_COUNTED_IN: dict[CodeType, bool] = {}


def shutdown_step(func: _F) -> _F:
    """Make ``func`` a step of a shutdown: a stop signal that comes while it runs (its first instruction on), or one
    it calls, is counted, never raised, and forces the stop (:func:`stop_forced`); one raised between two steps of a
    shutdown skipped the rest of it (workers left running), and a second Ctrl-C then was taken for the first."""
    return _counted(func, shutdown=True)


def _start_step(func: _F) -> _F:
    """Make ``func`` a worker's start: a stop signal that comes while it runs is counted, not raised there; ``func``
    raises it (:func:`raise_if_stop_signalled`) once the worker is recorded. It begins the shutdown: not forced."""
    return _counted(func, shutdown=False)


def _counted(func: _F, *, shutdown: bool) -> _F:
    _COUNTED_IN[func.__code__] = shutdown
    return func


class LocalWorkers:
    """Start one worker process per queue; stop them all (warm SIGTERM, then SIGKILL of the group)."""

    def __init__(
        self,
        broker_url: str,
        queues: list[str],
        log_dir: Path,
        concurrency: dict[str, int] | None = None,
        env: dict[str, str] | None = None,
        stop_with_parent: bool = False,
        loglevel: str = "WARNING",
        echo: TextIO | None = None,
        names: dict[str, str] | None = None,
    ) -> None:
        """``stop_with_parent``: the workers of an embedded run, whose run ends with this process: once it is gone
        they start no judge or target call and are killed ``ORPHAN_GRACE_S`` later (``die_with_parent``); without
        it (``ragscore worker``, serving a cluster's runs) they finish what they hold. ``loglevel``: Celery's ``-l``.
        ``echo``: where each worker's log lines also go, ``[QUEUE] ``-prefixed, URL passwords hidden (``ragscore
        worker``'s stderr: the journal, the container's log), never waited on (:mod:`.worker_echo`); None (the
        embedded mode) writes the log files alone. ``names``: each queue's worker's node name (:func:`node_names`);
        a queue without one: a private name (:func:`worker_command`)."""
        self.broker_url = broker_url
        self.loglevel = loglevel
        self.echo = Echo(echo) if echo is not None else None
        self.stop_with_parent = stop_with_parent
        self.queues = queues
        self.log_dir = log_dir
        self.concurrency = concurrency or {}
        self.env = env or {}
        self.names = names or {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        #: The read end of the pipe each queue's worker says it is ready, then drained, on (:mod:`.readiness`), and
        #: what each said there so far: no file, which a cleaner of /tmp, a prune of the logs or another
        #: process of the same pid (a container's, sharing ``RAGSCORE_HOME``) could remove or take over.
        self._ready_pipes: dict[str, int] = {}
        self._heard: dict[str, bytes] = {}
        self._tees: list[threading.Thread] = []
        self._restarts: dict[str, list[float]] = {}
        #: :func:`oom_kills` when each queue's worker was started: a kill by the kernel's OOM killer since adds one.
        self._oom_kills: dict[str, int | None] = {}

    def start(self) -> None:
        prune_logs(self.log_dir)
        for queue in self.queues:
            self._spawn(queue)

    @_start_step
    def _spawn(self, queue: str) -> None:
        """Start ``queue``'s worker; a stop signal that came meanwhile (:func:`_start_step`) is raised once it is
        recorded, so that a stop stops it (one raised while ``Popen`` waited for its exec lost the process started)."""
        self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            self.log_dir.chmod(0o700)  # excerpts of item data and provider replies: the owner's only, on a shared host
        except PermissionError:  # another user's folder (a shared RAGSCORE_HOME): theirs to tighten; the logs are 0600
            pass
        env = {**os.environ, **self.env, "RAGSCORE_BROKER_URL": self.broker_url}
        env.pop(PARENT_ENV, None)
        if self.stop_with_parent:
            env[PARENT_ENV] = str(os.getpid())
        env.setdefault("PYTHONUNBUFFERED", "1")
        log_path = self.log_dir / log_name(queue)
        self.logs[queue] = log_path
        ready = self._ready_pipe(queue)
        env[READY_FD_ENV] = str(ready)
        self._oom_kills[queue] = oom_kills()
        # the embedded mode's worker writes its file itself; ``ragscore worker``'s copier writes it (rotated)
        log = open_log(log_path) if self.echo is None else subprocess.PIPE
        try:
            # its own process group (stopped as one); SIGTERM when this process dies (no orphans after kill -9)
            proc = subprocess.Popen(
                [sys.executable, "-m", "ragscore_workers.die_with_parent", str(os.getpid()),
                 *worker_command(queue, self.concurrency.get(queue), self.loglevel, self.names.get(queue))],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                pass_fds=(ready,),
            )  # fmt: skip
        finally:
            os.close(ready)  # the worker's copy only: the pipe's end once it wrote (or died)
            if not isinstance(log, int):  # not the pipe: the worker holds its own copy of the file
                log.close()
        self.procs[queue] = proc
        if self.echo is not None and proc.stdout is not None:
            copier = threading.Thread(target=tee, args=(proc.stdout, log_path, self.echo, f"[{queue}] "), daemon=True)
            copier.start()
            self._tees = [*(t for t in self._tees if t.is_alive()), copier]
        raise_if_stop_signalled()

    def restart_dead(self) -> list[str]:
        """Restart workers that exited (killed, crashed); give up on a queue that keeps dying.

        Messages a killed worker held come back after the visibility timeout; a killed pool process's
        task is re-queued at once by Celery itself (``reject_on_worker_lost``).
        """
        now = time.monotonic()
        restarted = []
        for queue, code in self.dead().items():
            how = exit_reason(code, self._oom_killed(queue))
            recent = [t for t in self._restarts.get(queue, []) if now - t < RESTART_WINDOW_S]
            if len(recent) >= MAX_RESTARTS:
                raise BrokerError(
                    f"The {queue} worker died {len(recent)} times in {RESTART_WINDOW_S:.0f} s (last: it "
                    f"{how}); its log {self.logs.get(queue)} ends:\n{self.log_tail(queue)}"
                )
            self._restarts[queue] = [*recent, now]
            self._warn(f"the {queue} worker {how}; restarted it ({len(recent) + 1} of {MAX_RESTARTS} restarts allowed "
                       f"in {RESTART_WINDOW_S:.0f} s); its log: {self.logs.get(queue)}")  # fmt: skip
            self._spawn(queue)
            restarted.append(queue)
        return restarted

    def _oom_killed(self, queue: str) -> bool | None:
        """Whether the cgroup's count of OOM kills (:func:`oom_kills`) grew since the queue's worker started; None where
        it cannot be read. The count is the cgroup's, not the worker's: a kill of another process of the cgroup (another
        queue's worker, this process's other children, anything else it holds) reads the same as the worker's own."""
        before, now = self._oom_kills.get(queue), oom_kills()
        return None if before is None or now is None else now > before

    def dead(self) -> dict[str, int]:
        """Queues whose worker exited, with its exit code."""
        return {q: p.returncode for q, p in self.procs.items() if p.poll() is not None}

    def log_tail(self, queue: str, lines: int = 20) -> str:
        path = self.logs.get(queue)
        if not path or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    @shutdown_step
    def stop(self, timeout: float = STOP_S, *, warm: bool = True) -> None:
        """Stop every worker; whatever is left after ``timeout`` is killed with its children.

        ``warm``: SIGTERM to each Celery main process only, which stops taking messages, lets running tasks
        finish and ends its pool processes cleanly (``worker_process_shutdown`` runs). Otherwise (abort: a
        cancelled run) the whole process group gets SIGTERM, so pool processes end at once and their tasks
        go back to the queue. A stop signal (:func:`stop_signals_as_interrupt`'s) while it runs is counted, never
        raised (:func:`shutdown_step`); once one came beyond the one that began the shutdown (:func:`stop_forced`),
        whenever it came, it kills at once. So does a KeyboardInterrupt nothing counted (a host's own SIGINT
        handler's: a notebook's). A worker not yet ready when signalled holds no task and takes none: it is killed after
        :data:`UNREADY_STOP_S` at most; one that says it is drained (its consumer stopped and its last task ended)
        after :data:`DRAINED_STOP_S` from then at most.
        """
        booting: set[str] = set()
        try:
            for proc in self.procs.values():
                if proc.poll() is None:
                    if warm:
                        _signal(proc.pid, signal.SIGTERM)
                    else:
                        _signal_group(proc.pid, signal.SIGTERM)
            booting = self._booting()  # read after the signal: one ready since may have taken a task before it
            self._wait(timeout, booting)
        except KeyboardInterrupt:  # a host's own SIGINT handler's, which counts nothing
            pass
        finally:
            self._kill_and_close(booting)

    def _wait(self, timeout: float, booting: set[str]) -> None:
        """Wait up to ``timeout`` for the workers to exit, up to :data:`UNREADY_STOP_S` for those of ``booting`` (not
        ready when signalled) and up to :data:`DRAINED_STOP_S` from when it said so for one that says it is drained;
        not at all once the stop is forced (:func:`stop_forced`)."""
        now = time.monotonic()
        until = {q: now + (min(timeout, UNREADY_STOP_S) if q in booting else timeout) for q in self.procs}
        drained: set[str] = set()
        while not stop_forced() and (
            waiting := [q for q, p in self.procs.items() if p.poll() is None and time.monotonic() < until[q]]
        ):
            for queue in (q for q in waiting if q not in drained and self._said_drained(q)):
                drained.add(queue)
                until[queue] = min(until[queue], time.monotonic() + DRAINED_STOP_S)
            time.sleep(STOP_POLL_S)

    def _kill_and_close(self, booting: set[str]) -> None:
        """The end of :meth:`stop`: kill what is left of each worker (``booting``: the queues of those not ready when
        signalled), close their ready pipes, echo their last lines, then say which of those killed held nothing (after
        the kills: a log with no echo may block on a stderr nobody reads)."""
        held_nothing = {
            q: why for q, p in self.procs.items() if p.poll() is None and (why := self._held_nothing(q, booting))
        }
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for queue in list(self._ready_pipes):
            self._close_ready(queue)
        for copier in self._tees:  # the workers' last lines (their shutdown) echoed before it says stopped
            copier.join(timeout=5)
        for queue, why in held_nothing.items():
            self._warn(f"the {queue} worker, {why}, had not exited: killed it")
        if self.echo is not None:
            self.echo.close(timeout=5)

    def say(self, text: str) -> None:
        """Say ``text``, a line, on the echo (``ragscore worker``'s stderr) after what is queued there, never waiting
        on it (dropped, and counted, while the backlog is full: a stderr nobody reads); nowhere without an echo."""
        if self.echo is not None:
            self.echo.offer("", text + "\n")

    def _warn(self, text: str) -> None:
        """Warn of ``text``: on the echo where there is one (:meth:`say`: a stderr nobody reads holds up nothing),
        else in this module's log."""
        if self.echo is None:
            log.warning("%s", text)
        else:
            self.say(f"Warning: {text}")

    def _ready_pipe(self, queue: str) -> int:
        """A new pipe for ``queue``'s worker, about to start, to say it is ready on: its read end kept (that of a
        worker restarted closed: not ready until it says so); returns its write end (:data:`READY_FD_ENV`)."""
        self._close_ready(queue)
        read, write = os.pipe()
        os.set_blocking(read, False)
        self._ready_pipes[queue] = read
        return write

    def _close_ready(self, queue: str) -> None:
        self._heard.pop(queue, None)
        if (read := self._ready_pipes.pop(queue, None)) is not None:
            os.close(read)

    def _said(self, queue: str) -> bytes:
        """What ``queue``'s worker said on its pipe (:func:`_ready_pipe`) so far: :data:`READY`, then
        :data:`DRAINED`."""
        if (read := self._ready_pipes.get(queue)) is not None:
            with suppress(BlockingIOError):  # nothing more said yet
                self._heard[queue] = self._heard.get(queue, b"") + os.read(read, 16)
        return self._heard.get(queue, b"")

    def _held_nothing(self, queue: str, booting: set[str]) -> str | None:
        """Why ``queue``'s worker holds no task (``booting``: the queues of those not ready when signalled), or None."""
        if queue in booting:
            return "stopped before it was ready (it held no task)"
        return "drained (its consumer stopped and its last task ended)" if self._said_drained(queue) else None

    def _said_ready(self, queue: str) -> bool:
        return READY in self._said(queue)

    def _said_drained(self, queue: str) -> bool:
        return DRAINED in self._said(queue)

    def _booting(self) -> set[str]:
        """The queues whose worker runs and has not said it is ready (:data:`READY_FD_ENV`)."""
        return {q for q, p in self.procs.items() if p.poll() is None and not self._said_ready(q)}

    def supervise(self, broker_timeout: float = DEFAULT_BROKER_TIMEOUT_S) -> None:
        """Block, restarting workers that die (``ragscore worker``) and watching the broker (:class:`.BrokerWatch`:
        said when lost and back); raises when one keeps dying, or when the broker was lost for ``broker_timeout``
        seconds (0: never)."""
        with BrokerWatch(self.broker_url, broker_timeout, self.say) as watch:  # pings in a thread: never waited on
            while True:
                raise_if_stop_signalled()
                self.restart_dead()
                watch.check()
                time.sleep(0.5)

    def __enter__(self) -> LocalWorkers:
        self.start()
        return self

    @shutdown_step
    def __exit__(self, *exc: object) -> None:
        self.stop()


#: Why a process got SIGKILL, by whether the kernel's OOM killer killed one of its cgroup meanwhile (None: unknown).
_SIGKILL_BY = {
    True: "out of memory: the kernel's OOM killer killed a process of its cgroup since it started",
    False: "by hand or another program, not the kernel's OOM killer",
    None: "out of memory, or by hand",
}


def exit_reason(code: int, oom_killed: bool | None = None) -> str:
    """How a process ended, for people: ``exited with code 1``, ``was killed by SIGKILL (out of memory, or by
    hand)``; ``oom_killed`` (:meth:`LocalWorkers._oom_killed`) says which of the two a SIGKILL was."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"was killed by {name}" + (f" ({_SIGKILL_BY[oom_killed]})" if -code == signal.SIGKILL else "")


def oom_kills() -> int | None:
    """How many processes of this process's memory cgroup the kernel's OOM killer killed (``oom_kill`` of cgroup v2's
    ``memory.events``, v1's ``memory.oom_control``); None where neither can be read (no cgroups, as on macOS; the
    root cgroup, which has no such file)."""
    for controller, name in (("", "memory.events"), ("memory", "memory.oom_control")):  # v2's, v1's
        path = own_cgroup(controller, PROC_CGROUP)
        if path is None:
            continue
        events = CGROUP_ROOT / controller / path / name
        try:
            counts = dict(field.split() for field in events.read_text().splitlines())
        except (OSError, ValueError):
            continue
        if counts.get("oom_kill", "").isdigit():
            return int(counts["oom_kill"])
    return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


#: The stop signals that came while ``stop_signals_as_interrupt`` is active, each as its number and whether it came in a
#: shutdown's step (:func:`shutdown_step`); read by ``raise_if_stop_signalled``, ``stop_signals``, ``stop_forced`` and
#: ``first_stop_signal``. A plain list: a handler must take no lock (an Event's ``set()`` does; a second signal inside
#: it hung the process), and ``append`` is one step (a count's ``+= 1`` could lose a signal that came inside it).
_stop_signalled: list[tuple[int, bool]] = []


@contextmanager
def stop_signals_as_interrupt(*, then_ignored: bool = False) -> Iterator[None]:
    """SIGTERM, SIGHUP (a closed terminal, a dropped ssh session) and Ctrl-C unwind as KeyboardInterrupt, so
    ``finally`` blocks stop the local workers; within a shutdown's step or a worker's start they are only counted
    (:func:`_counted_in`). SIGHUP only where it is not ignored (``nohup``: the run goes on).

    The signal is also remembered: Python drops an exception raised while it runs a finalizer (``__del__``,
    a weakref or at-fork callback), so loops call ``raise_if_stop_signalled`` and a stop is never lost.

    ``then_ignored``: once the block ends, these signals are ignored for the rest of the process instead of getting
    their handlers back (``ragscore worker``, whose workers stopped in the block: a late SIGTERM, as systemd or
    Kubernetes may send twice, found SIGTERM's default as the process exited and turned a clean stop into exit 143).
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        counted = _counted_in(frame)
        _stop_signalled.append((signum, bool(counted)))
        if counted is None:
            raise KeyboardInterrupt

    _stop_signalled.clear()
    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not a host's own (e.g. a notebook's)
        signals.append(signal.SIGINT)
    hangup = getattr(signal, "SIGHUP", None)  # none on Windows
    if hangup is not None and signal.getsignal(hangup) is signal.SIG_DFL:  # not ignored (nohup), nor a host's own
        signals.append(hangup)
    try:
        previous = {sig: signal.signal(sig, handler) for sig in signals}
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if then_ignored else old)
        _stop_signalled.clear()


def _counted_in(frame: FrameType | None) -> bool | None:
    """Where ``frame`` (the one a signal interrupted: the main thread's, where Python runs every handler, whatever
    thread the OS gave the signal to) or one that called it runs a function in which a stop signal is counted, not
    raised (:data:`_COUNTED_IN`): True, a shutdown's step; False, a worker's start only; None, neither (raised). A
    KeyboardInterrupt cut a stop short (workers left running, or unkilled; ``ragscore worker``'s clean stop turned into
    exit 130). Asked of the frames, not of a flag they set: a handler runs as a function's first instruction does,
    before any statement of it could set one. Masking the signals instead (``pthread_sigmask``) holds off nothing while
    another thread runs (it takes the signal; the handler runs in the main thread all the same), and a worker started
    meanwhile would inherit the mask (SIGTERM blocked)."""
    counted: bool | None = None
    while frame is not None:
        if (step := _COUNTED_IN.get(frame.f_code)) is not None:
            counted = counted or step
        frame = frame.f_back
    return counted


def raise_if_stop_signalled() -> None:
    """Raise KeyboardInterrupt if a stop signal came whose own KeyboardInterrupt Python dropped."""
    if _stop_signalled:
        raise KeyboardInterrupt


def stop_signals() -> int:
    """How many stop signals came since ``stop_signals_as_interrupt`` began."""
    return len(_stop_signalled)


def stop_forced() -> bool:
    """Whether a stop signal came beyond the one that began the shutdown: one in a shutdown's step
    (:func:`shutdown_step`, its first instruction on), or a second one wherever it came."""
    return len(_stop_signalled) > 1 or any(counted for _, counted in _stop_signalled)


def first_stop_signal() -> int | None:
    """The number of the stop signal that began the shutdown (SIGTERM, SIGINT, SIGHUP); None before one came."""
    return _stop_signalled[0][0] if _stop_signalled else None


def stop_again(signum: int | None) -> str:
    """How a process stopping on ``signum`` (``ragscore worker``'s, an embedded ``ragscore run``'s) is stopped at once:
    the same signal again, said as its sender sends it (a supervisor's second SIGTERM, a terminal's Ctrl-C), any other
    stop signal doing it too; Ctrl-C not offered where SIGINT is ignored (a script's background job: ``cmd &``)."""
    if signum in (None, signal.SIGINT):  # None: a KeyboardInterrupt none of our handlers raised (Python's, Ctrl-C)
        return "Ctrl-C again"
    again = f"send {signal.Signals(signum).name} again"
    return again if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else f"{again} (or Ctrl-C)"
