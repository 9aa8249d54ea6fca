"""The slot helper: a small process, already running as a sandbox uid under a run's limits, that starts bwrap.

The worker starts one per uid slot it holds (:mod:`ragscore_workers.sandbox.slots`), as
``python3 -I -S -c <this file's text> CTL_FD RLIMITS_JSON CPU_BUDGET_S``; standard library only. It lowers
its own hard limits first (irreversible), so everything it starts inherits them, and it already has the
slot's uid, gid and no groups: each run is a vfork + exec of bwrap, without the ``prlimit`` and
``unshare --setuid`` execs (~0.6 ms each here) or a fork of the 60+ MB worker.

Protocol on the control socket (SOCK_SEQPACKET, JSON), one run at a time (the slot serves one run):

* worker -> helper: ``{"argv": [...], "env": {...}}`` with the fds ``[stdin, stdout, stderr, *extra]`` by
  SCM_RIGHTS; an argv item ``"@fd:N"`` becomes the number of extra fd N (0-based) as the child gets it;
* helper -> worker: ``{"pid": P}`` with a pidfd of P, or ``{"error": "..."}``; then ``{"exit": returncode}``
  once P has exited and every orphan it left (the helper is their subreaper) has been killed and reaped,
  so the slot's uid runs nothing but the helper when the worker hears of the exit.

It kills the running bwrap and exits when the worker closes the socket or dies, and retires (exits after
a run) before its own CPU time nears the CPU limit it shares with the programs.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys

#: prctl options: orphaned descendants are re-parented to this process instead of the host's init; no
#: exec of this process or its descendants can gain privileges (setuid bits, file capabilities).
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 38
#: Most fds one request may carry.
MAX_FDS = 8
FD_ARG = "@fd:"


def main(ctl_fd: int, rlimits: list[list[int]], cpu_budget_s: float) -> None:
    """Apply the limits to this process, then serve runs until the worker goes away."""
    for res, soft, hard in rlimits:
        resource.setrlimit(res, (soft, hard))
    libc = ctypes.CDLL(None, use_errno=True)
    for option in (PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER):
        if libc.prctl(option, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}) failed")
    os.set_inheritable(ctl_fd, False)
    ctl = socket.socket(fileno=ctl_fd)
    while True:
        request, fds = receive(ctl)
        if request is None:
            return
        try:
            proc = start(request, fds)
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the worker as text
            ctl.sendmsg([json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()])
            continue
        finally:
            for fd in fds:
                os.close(fd)
        pidfd = os.pidfd_open(proc.pid)  # not reaped yet: cannot be another process
        try:
            ctl.sendmsg(
                [json.dumps({"pid": proc.pid}).encode()],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))],
            )
            if not wait_for_exit(ctl, pidfd):
                proc.kill()
                proc.wait()
                reap_orphans()
                return
        finally:
            os.close(pidfd)
        returncode = proc.wait()
        reap_orphans()
        ctl.sendmsg([json.dumps({"exit": returncode}).encode()])
        usage = resource.getrusage(resource.RUSAGE_SELF)
        if usage.ru_utime + usage.ru_stime > cpu_budget_s:
            return  # retire between runs; the worker starts a fresh helper for the next one


def receive(ctl: socket.socket) -> tuple[dict | None, list[int]]:
    """The next request and its fds; ``(None, [])`` once the worker closed the socket."""
    fds = array.array("i")
    msg, ancillary, _, _ = ctl.recvmsg(1 << 20, socket.CMSG_SPACE(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC)
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not msg:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(msg), list(fds)


def start(request: dict, fds: list[int]) -> subprocess.Popen[bytes]:
    """vfork + exec the request's argv (a new session, signals reset) with its fds in place."""
    if len(fds) < 3:
        raise ValueError(f"a request needs stdin, stdout and stderr, got {len(fds)} fds")
    extra = fds[3:]
    argv = [str(extra[int(a[len(FD_ARG) :])]) if a.startswith(FD_ARG) else a for a in request["argv"]]
    return subprocess.Popen(
        argv,
        stdin=fds[0],
        stdout=fds[1],
        stderr=fds[2],
        pass_fds=tuple(extra),
        env=request["env"],
        cwd="/",
        start_new_session=True,
    )


def wait_for_exit(ctl: socket.socket, pidfd: int) -> bool:
    """Sleep until the process exits (True) or the worker closes the socket or dies (False)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(ctl, select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd == pidfd:
                return True
            return False  # EOF (or a request while a run is going, which the protocol does not allow)


def reap_orphans() -> None:
    """Kill and reap every remaining child: what bwrap left behind belongs to the run that just ended.

    Normally that is a sandbox pid-1 still tearing its namespace down. It can also be one that never
    started: a bwrap that fails right after cloning it (e.g. when a fork bomb's processes still fill the
    uid's process limit) leaves its pid-1 blocked for good on a setup eventfd, so waiting alone could hang.
    """
    children = f"/proc/self/task/{os.getpid()}/children"  # this process has one thread
    while True:
        with open(children, encoding="ascii") as fh:
            pids = [int(pid) for pid in fh.read().split()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


if __name__ == "__main__":
    main(int(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]))
