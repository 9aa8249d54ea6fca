"""Sandbox uid slots and their helpers: what starts each local sandbox.

A root worker runs every sandbox as a uid of its own range (``uid_base + slot``): RLIMIT_NPROC counts
processes per uid, so with one shared uid a fork bomb in one sandbox would stop every other sandbox on
the host from starting. A slot is held through a lock file, by one worker process at a time, and serves
one run at a time. A process keeps the slots it used (at most :data:`IDLE_SLOTS` idle ones), each with a
*slot helper* (``_slot_helper.py``): a small process already running as the slot's uid, gid and no
groups, under the run's limits, that starts bwrap by vfork + exec. A run so pays one exec before its
program (bwrap's), not three (``prlimit``, ``unshare --setuid``, bwrap) plus a vfork of the worker;
bench/README.md has the numbers. A non-root worker has one slot: its own uid.

Helpers hold none of the worker's environment, die with the worker, are started again when they retire
(their own CPU time counts against the CPU limit they share with the programs) or die, and are restarted
when a run asks for other limits.
"""

from __future__ import annotations

import array
import atexit
import fcntl
import json
import os
import resource
import select
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._base import SandboxError

__all__ = ["FD_ARG", "HelperGone", "HelperProcess", "SlotLease", "SlotPool", "Spawned", "stop_all_helpers"]

HELPER_SOURCE = Path(__file__).with_name("_slot_helper.py")
#: The helper's whole environment: none of the worker's variables (no secrets) reach it or bwrap.
HELPER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
#: An argv item ``FD_ARG + "N"`` becomes the number the started process gets extra fd N on.
FD_ARG = "@fd:"
#: Idle slots (and helpers) a process keeps for its next runs.
IDLE_SLOTS = 2
#: Seconds to wait for a helper's answer to a request.
REPLY_TIMEOUT_S = 10.0
#: A helper retires after using this share of the CPU limit it runs under.
CPU_BUDGET_SHARE = 0.5

Rlimits = tuple[tuple[int, int, int], ...]


class HelperGone(SandboxError):
    """The slot helper exited before it started the requested process (so nothing was started)."""


@dataclass
class Spawned:
    """A bwrap a helper started: its host pid and a pidfd for signals that cannot hit a reused pid."""

    pid: int
    pidfd: int
    helper: HelperProcess
    returncode: int | None = None
    #: The helper died before reporting the exit (bwrap and its sandbox were killed with it).
    lost: bool = False

    def wait(self, timeout: float) -> int | None:
        """The exit code, waiting up to ``timeout`` seconds; None while still running."""
        if self.returncode is None and not self.lost:
            answer = self.helper.read(timeout)
            if answer is not None:
                if "exit" not in answer:
                    self.lost = True
                else:
                    self.returncode = int(answer["exit"])
        if self.lost:
            raise SandboxError("The sandbox's slot helper exited while its sandbox was running")
        return self.returncode

    def kill(self) -> None:
        """SIGKILL bwrap (its sandbox dies with it: --die-with-parent)."""
        if self.returncode is None:
            with suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        os.close(self.pidfd)


class HelperProcess:
    """One slot helper: started as ``uid`` (None: this process's own uid) under ``rlimits``."""

    def __init__(self, python: str, uid: int | None, rlimits: Rlimits, cpu_budget_s: float | None = None) -> None:
        """``cpu_budget_s``: the helper's own CPU seconds before it retires (default: a share of RLIMIT_CPU)."""
        self.uid = uid
        self.rlimits = rlimits
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cpu_soft = next((soft for res, soft, _ in rlimits if res == resource.RLIMIT_CPU), None)
        budget = cpu_budget_s if cpu_budget_s is not None else cpu_soft * CPU_BUDGET_SHARE if cpu_soft else 1e9
        ids: dict[str, Any] = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        argv = [python, "-I", "-S", "-c", HELPER_SOURCE.read_text(encoding="utf-8")]
        try:
            self.proc = subprocess.Popen(
                [*argv, str(theirs.fileno()), json.dumps(rlimits), str(budget)],
                pass_fds=(theirs.fileno(),),
                env=HELPER_ENV,
                cwd="/",
                stdin=subprocess.DEVNULL,
                **ids,
            )
        except OSError as exc:
            ours.close()
            raise SandboxError(f"Could not start the sandbox's slot helper ({python}): {exc}") from exc
        finally:
            theirs.close()
        self.ctl = ours

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], fds: list[int]) -> Spawned:
        """Start ``argv`` with ``fds`` = [stdin, stdout, stderr, *extra] (see :data:`FD_ARG`)."""
        request = json.dumps({"argv": argv, "env": env}).encode()
        try:
            self.ctl.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        except OSError as exc:
            raise HelperGone(f"The sandbox's slot helper does not answer: {exc}") from exc
        received: list[int] = []
        answer = self.read(REPLY_TIMEOUT_S, received)
        if answer is None:
            raise SandboxError(f"The sandbox's slot helper did not answer within {REPLY_TIMEOUT_S:.0f} s")
        if "pid" not in answer or not received:
            for fd in received:
                os.close(fd)
            if "error" not in answer:  # it died before answering; what it may have started died with it
                raise HelperGone("The sandbox's slot helper exited before it answered")
            raise SandboxError(f"Could not start the sandbox: {answer['error']}")
        return Spawned(pid=int(answer["pid"]), pidfd=received[0], helper=self)

    def read(self, timeout: float, fds: list[int] | None = None) -> dict | None:
        """The helper's next message (``{}`` once it has exited), or None after ``timeout`` seconds."""
        poller = select.poll()
        poller.register(self.ctl, select.POLLIN)
        if not poller.poll(timeout * 1000):
            return None
        got = array.array("i")
        try:
            msg, ancillary, _, _ = self.ctl.recvmsg(65536, socket.CMSG_SPACE(got.itemsize), socket.MSG_CMSG_CLOEXEC)
        except ConnectionResetError:  # it exited with our request unread
            return {}
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                got.frombytes(data[: len(data) - len(data) % got.itemsize])
        if fds is not None:
            fds.extend(got)
        else:
            for fd in got:
                os.close(fd)
        return json.loads(msg) if msg else {}

    def stop(self) -> None:
        """Close the control socket: the helper exits (killing a bwrap it still runs)."""
        self.ctl.close()
        try:
            self.proc.wait(REPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class _Slot:
    uid: int | None
    lock_fd: int | None
    helper: HelperProcess | None = None
    busy: bool = False


@dataclass
class SlotLease:
    """A slot held by one run: starts its bwrap through the slot's helper, under the run's limits."""

    slot: _Slot
    python: str
    rlimits: Rlimits

    def spawn(self, argv: list[str], env: dict[str, str], fds: list[int]) -> Spawned:
        """:meth:`HelperProcess.spawn` on a live helper with these limits (a new one if it died meanwhile)."""
        try:
            return self._helper().spawn(argv, env, fds)
        except HelperGone:  # it died between runs: nothing was started, so once more on a fresh one
            self._drop_helper()
            return self._helper().spawn(argv, env, fds)

    def _helper(self) -> HelperProcess:
        helper = self.slot.helper
        if helper is None or not helper.alive() or helper.rlimits != self.rlimits:
            self._drop_helper()
            helper = self.slot.helper = HelperProcess(self.python, self.slot.uid, self.rlimits)
        return helper

    def _drop_helper(self) -> None:
        if self.slot.helper is not None:
            self.slot.helper.stop()
            self.slot.helper = None


@dataclass(eq=False)
class SlotPool:
    """The uid slots this process holds, each with its helper; see the module docstring."""

    python: str
    uid_base: int
    uid_slots: int
    slot_dir: Path
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _slots: list[_Slot] = field(default_factory=list)
    _owner: int = field(default_factory=os.getpid)

    def __post_init__(self) -> None:
        _pools.add(self)

    def close(self) -> None:
        """Stop this process's idle helpers and release their slots (running ones finish first)."""
        with self._lock:
            mine = self._owner == os.getpid()
            idle = [s for s in self._slots if not s.busy]
            for s in idle:
                self._slots.remove(s)
        for s in idle if mine else []:
            if s.helper is not None:
                s.helper.stop()
            if s.lock_fd is not None:
                os.close(s.lock_fd)

    @contextmanager
    def lease(self, rlimits: Rlimits) -> Iterator[SlotLease]:
        """A slot held by this run alone, whose helper runs under ``rlimits``."""
        slot = self._take()
        try:
            yield SlotLease(slot, self.python, rlimits)
        finally:
            self._give_back(slot)

    def _take(self) -> _Slot:
        with self._lock:
            if self._owner != os.getpid():  # a forked child: the parent's slots and helpers are not ours
                for inherited in self._slots:
                    if inherited.helper is not None:
                        inherited.helper.ctl.close()  # our copy only: the parent's helper lives on
                    if inherited.lock_fd is not None:
                        os.close(inherited.lock_fd)  # the parent's copy keeps the lock
                self._slots, self._owner = [], os.getpid()
            for slot in self._slots:
                if not slot.busy:
                    slot.busy = True
                    return slot
        slot = self._new_slot()
        with self._lock:
            self._slots.append(slot)
        return slot

    def _give_back(self, slot: _Slot) -> None:
        with self._lock:
            slot.busy = False
            idle = [s for s in self._slots if not s.busy]
            extra = idle[IDLE_SLOTS:] if os.geteuid() == 0 else idle[1:]
            for s in extra:
                self._slots.remove(s)
        for s in extra:
            if s.helper is not None:
                s.helper.stop()
            if s.lock_fd is not None:
                os.close(s.lock_fd)  # releases the slot

    def _new_slot(self) -> _Slot:
        """Lock a free uid of the range (root), or this process's own uid."""
        if os.geteuid() != 0:
            return _Slot(uid=None, lock_fd=None, busy=True)
        self.slot_dir.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(self.slot_dir)
        if st.st_uid != 0 or (st.st_mode & 0o077) or not self.slot_dir.is_dir() or self.slot_dir.is_symlink():
            raise SandboxError(f"{self.slot_dir} must be a directory owned by root with mode 0700")
        start = os.getpid() % self.uid_slots
        for i in range(self.uid_slots):
            n = (start + i) % self.uid_slots
            fd = os.open(self.slot_dir / f"slot-{n}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return _Slot(uid=self.uid_base + n, lock_fd=fd, busy=True)
        raise SandboxError(f"All {self.uid_slots} sandbox uid slots are busy")


_pools: weakref.WeakSet[SlotPool] = weakref.WeakSet()


def stop_all_helpers() -> None:
    """Stop every idle slot helper of this process, so that it reaps them: a helper outliving its worker
    exits by itself, but is then left to the host's init to reap (which a container's PID 1 may never do).
    Runs at exit and, in Celery pool processes (which end without atexit), on ``worker_process_shutdown``.
    """
    for pool in list(_pools):
        pool.close()


atexit.register(stop_all_helpers)
