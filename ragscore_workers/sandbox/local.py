"""Local backend: bubblewrap namespaces + rlimits + an unprivileged uid, no daemon needed.

One run, from the outside in:

* a *slot helper* (:mod:`.slots`) already runs as a uid of the sandbox range held by this run alone
  (root workers; real, effective and saved uid and gid, no supplementary groups, no capabilities) under
  the run's hard = soft limits on CPU seconds, address space, processes, file size, open files and core
  dumps; it starts bwrap by vfork + exec, so bwrap and everything below inherit the ids and limits; bwrap
  sets no-new-privs itself before anything else;
* ``bwrap --unshare-all`` gives fresh user, mount, pid, network (loopback only), ipc, uts and cgroup
  namespaces, clears the environment, mounts only ``/usr`` read-only plus a fresh ``/proc`` and ``/dev``,
  and size-capped tmpfs (the working dir ``/sandbox``, ``/tmp``, ``/dev/shm``; the rest is read-only) that
  vanish with the sandbox;
* a wall-clock timeout and an output cap kill the sandbox's pid-1, which takes every process in the pid
  namespace with it (a program cannot leave anything behind, even after ``setsid``).

Inside, the program sees itself as ``nobody`` (65534). A non-root worker runs the sandbox as its own uid.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from ._base import (
    LIMIT_SIGNALS,
    ExecResult,
    Limits,
    SandboxError,
    SandboxUnavailable,
    StopReason,
    decode,
    get_language,
    ran_out_of_memory,
)
from ._seccomp import sandbox_filter
from .slots import FD_ARG, SlotLease, SlotPool, Spawned

__all__ = ["DEFAULT_UID_BASE", "DEFAULT_UID_SLOTS", "OWN_PROCESSES", "LocalSandbox", "tool_path"]

#: First host uid of the sandbox range (root workers only); pick a range no user or container mapping uses.
DEFAULT_UID_BASE = 2_000_000_000
#: Concurrent runs per host (one uid each).
DEFAULT_UID_SLOTS = 256
#: Lock files of the uid slots: one fixed path per host, whatever TMPDIR a worker has.
DEFAULT_SLOT_DIR = Path("/tmp/ragscore-sandbox-uids")
#: The uid and gid the program sees inside its user namespace.
INNER_ID = 65534
#: Where the program runs; a fresh tmpfs per run.
WORKDIR = "/sandbox"
#: Processes of a run's uid that are the sandbox's own, not the program's: the slot helper, bwrap and the sandbox's
#: pid-1. RLIMIT_NPROC counts every process of the uid, so it is ``processes`` + these: the program may have
#: ``processes`` processes and threads at once, itself included, as ``Limits.processes`` says.
OWN_PROCESSES = 3
#: Environment of the program: nothing of the worker's.
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKDIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
               # glibc reserves 64 MiB of address space per thread's malloc arena, which RLIMIT_AS counts: a
               # correct 8-thread program could not start its threads. Two arenas serve any thread count.
               "MALLOC_ARENA_MAX": "2"}  # fmt: skip
#: Host /etc files the dynamic loader and interpreters read (bound read-only when present).
ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives")
#: Top-level directories that are symlinks into /usr on merged-/usr systems, real dirs elsewhere.
USR_ALIASES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Seconds to wait for the sandbox to exit after it was killed.
KILL_WAIT_S = 5.0
#: The seccomp program every sandbox gets (vsock and other socket families, SysV IPC, memfds, keyrings, vmsplice,
#: io_uring, userfaultfd, bpf and perf events denied); None on an architecture it is not built for.
SECCOMP_FILTER = sandbox_filter()
#: bwrap's own environment (its environ is readable from inside the sandbox: no secrets).
BWRAP_ENV = {"PATH": "/usr/bin:/bin"}

#: Debian package of each tool the backend runs.
PACKAGES = {"bwrap": "bubblewrap"}


def tool_path(name: str, package: str) -> str:
    """Absolute path of a tool; :class:`SandboxUnavailable` with the install command when it is missing."""
    found = shutil.which(name)
    if not found:
        raise SandboxUnavailable(
            f"{name} is not installed, the local sandbox needs it: apt-get install {package} (Debian/Ubuntu)"
        )
    return found


class LocalSandbox:
    """Run code under bubblewrap on this host. See the module docstring for what it isolates."""

    name = "local"

    def __init__(
        self,
        *,
        bwrap: str = "bwrap",
        ro_binds: tuple[str, ...] = (),
        uid_base: int = DEFAULT_UID_BASE,
        uid_slots: int = DEFAULT_UID_SLOTS,
        slot_dir: Path | None = None,
    ) -> None:
        self.bwrap = tool_path(bwrap, PACKAGES["bwrap"])
        self.ro_binds = ro_binds
        self._read_only = _read_only_mounts(ro_binds)
        self._interpreters: dict[str, str] = {}
        # the helpers run the interpreter programs use: one every sandbox uid can read
        self.slots = SlotPool(self.interpreter("python3"), uid_base, uid_slots, slot_dir or DEFAULT_SLOT_DIR)

    def run(
        self,
        code: str,
        *,
        language: str = "python",
        stdin: str = "",
        limits: Limits = Limits(),  # noqa: B008 - frozen value object
        image: str | None = None,
    ) -> ExecResult:
        """Run ``code`` (``image`` belongs to the docker backend and is ignored here)."""
        lang = get_language(language)
        argv = [self.interpreter(lang.argv[0]), *lang.argv[1:]]
        code_fd = os.memfd_create("ragscore-code")
        try:
            os.write(code_fd, code.encode("utf-8"))
            os.lseek(code_fd, 0, os.SEEK_SET)
            with self.slots.lease(_rlimits(limits)) as slot:
                return self._execute(slot, argv, lang.filename, code_fd, stdin.encode("utf-8"), limits)
        finally:
            os.close(code_fd)

    # ------------------------------------------------------------------ building the command

    def interpreter(self, name: str) -> str:
        """Host path of an interpreter that is visible inside the sandbox (under /usr or a ro_bind)."""
        if name not in self._interpreters:
            visible = ["/usr/local/bin", "/usr/bin", *self.ro_binds]
            found = [str(Path(d) / name) for d in visible if os.access(Path(d) / name, os.X_OK)]
            if not found:
                raise SandboxUnavailable(f"No {name!r} under {', '.join(visible)} to run inside the sandbox")
            self._interpreters[name] = found[0]
        return self._interpreters[name]

    def _command(
        self, argv: list[str], filename: str, code_fd: str, status_fd: str, limits: Limits, seccomp_fd: str | None
    ) -> list[str]:
        disk = str(limits.disk_mb << 20)
        cmd = [
            self.bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session",
            "--uid", str(INNER_ID), "--gid", str(INNER_ID), "--hostname", "sandbox",
            "--clearenv",
            *self._read_only,
            # /proc/sys read-only: the sandbox's own IPC namespace's limits (msgmnb ...) were writable inside
            "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
            "--size", disk, "--tmpfs", "/dev/shm",
            "--size", disk, "--tmpfs", "/tmp",
            "--size", disk, "--tmpfs", WORKDIR,
            "--file", code_fd, f"{WORKDIR}/{filename}",
            # bwrap's root and /dev are unbounded tmpfs: read-only, so only the size-capped mounts take writes
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--chdir", WORKDIR,
            "--json-status-fd", status_fd,
        ]  # fmt: skip
        if seccomp_fd is not None:
            cmd += ["--seccomp", seccomp_fd]
        for key, value in SANDBOX_ENV.items():
            cmd += ["--setenv", key, value]
        return [*cmd, "--", *argv]

    # ------------------------------------------------------------------ running it

    def _execute(
        self, slot: SlotLease, argv: list[str], filename: str, code_fd: int, stdin: bytes, limits: Limits
    ) -> ExecResult:
        status_r, status_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ours = [status_r, in_w, out_r, err_r]
        extra = [code_fd, status_w]
        if SECCOMP_FILTER is not None:  # bwrap reads the program to its end: it fits in the pipe's buffer
            seccomp_r, seccomp_w = os.pipe()
            os.write(seccomp_w, SECCOMP_FILTER)
            os.close(seccomp_w)
            extra.append(seccomp_r)
        try:
            seccomp_arg = f"{FD_ARG}2" if SECCOMP_FILTER is not None else None
            cmd = self._command(argv, filename, f"{FD_ARG}0", f"{FD_ARG}1", limits, seccomp_arg)
            started = time.monotonic()
            try:
                proc = slot.spawn(cmd, BWRAP_ENV, [in_r, out_w, err_w, *extra])
            finally:
                for fd in (in_r, out_w, err_w, *extra[1:]):  # bwrap holds the only copies now: EOF means it exited
                    os.close(fd)
            status = _Status(status_r)
            ours.remove(in_w)  # _communicate closes it, whatever happens
            try:
                out, err, stopped, truncated = _communicate(
                    _Pipes(in_w, out_r, err_r, status), stdin, limits, started + limits.timeout_s
                )
                if stopped == "timeout" and status.child_pid is not None:
                    stopped = _why_still_running(status.child_pid, limits)
                if stopped is not None:
                    _kill(proc, status.child_pid)
                # every pipe is closed: bwrap has exited or is exiting
                if proc.wait(KILL_WAIT_S) is None:
                    raise SandboxError("bwrap did not exit after its program had ended")
            finally:
                if proc.returncode is None and not proc.lost:
                    _kill(proc, status.child_pid)  # the helper's exit report also says the orphans are gone
                proc.close()
        finally:
            for fd in ours:
                _close(fd)
        if status.child_pid is None:
            detail = decode(err).strip() or f"exit code {proc.returncode}"
            raise SandboxError(f"The sandbox could not start: {detail}")
        if status.exit_code is None and stopped is None:
            detail = decode(err).strip() or f"exit code {proc.returncode}"
            raise SandboxError(f"The sandbox failed before the program ended: {detail}")
        return _result(status.exit_code, out, err, time.monotonic() - started, stopped, truncated)


def _rlimits(limits: Limits) -> tuple[tuple[int, int, int], ...]:
    """(resource, soft, hard): hard = soft, so the program may lower a limit but never raise it."""
    mib = 1 << 20
    same = [
        (resource.RLIMIT_AS, limits.memory_mb * mib),
        (resource.RLIMIT_NPROC, limits.processes + OWN_PROCESSES),
        (resource.RLIMIT_FSIZE, limits.file_mb * mib),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_RTPRIO, 0),  # no real-time scheduling and no raised priority, whatever the worker had
        (resource.RLIMIT_NICE, 0),
    ]
    # CPU: SIGXCPU at the soft limit, SIGKILL a second later
    return ((resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 1), *((res, n, n) for res, n in same))


def _read_only_mounts(ro_binds: tuple[str, ...]) -> list[str]:
    """bwrap arguments for the read-only part of the filesystem: /usr, its aliases, a few /etc files."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in USR_ALIASES:
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for path in (*ETC_FILES, *ro_binds):
        args += ["--ro-bind-try", path, path]
    return args


class _Status:
    """bubblewrap's ``--json-status-fd`` stream: the host pid of the sandbox's pid-1, then the exit code."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = ""
        self.child_pid: int | None = None
        self.exit_code: int | None = None

    def feed(self, data: bytes) -> None:
        decoder = json.JSONDecoder()
        text = (self.pending + data.decode("utf-8", errors="replace")).lstrip()
        while text:
            try:
                doc, end = decoder.raw_decode(text)
            except json.JSONDecodeError:
                break  # an incomplete document: the rest comes with the next read
            self.child_pid = doc.get("child-pid", self.child_pid)
            self.exit_code = doc.get("exit-code", self.exit_code)
            text = text[end:].lstrip()
        self.pending = text


@dataclass
class _Pipes:
    """The worker's ends of one run's pipes: the program's stdin, stdout, stderr and bwrap's status."""

    stdin: int
    stdout: int
    stderr: int
    status: _Status


def _communicate(
    pipes: _Pipes, stdin: bytes, limits: Limits, deadline: float
) -> tuple[bytes, bytes, StopReason | None, bool]:
    """Feed stdin (then close it), keep output up to the cap, follow bwrap's status until every pipe is
    closed or the deadline or the cap stops the run. Returns ``(stdout, stderr, stopped_by, truncated)``."""
    kept = {pipes.stdout: bytearray(), pipes.stderr: bytearray()}
    total = 0
    stopped: StopReason | None = None
    pending = memoryview(stdin)
    sel = selectors.DefaultSelector()
    for fd in (pipes.stdout, pipes.stderr, pipes.status.fd):
        sel.register(fd, selectors.EVENT_READ)
    stdin_open = True
    if pending:
        os.set_blocking(pipes.stdin, False)
        sel.register(pipes.stdin, selectors.EVENT_WRITE)
    else:
        os.close(pipes.stdin)
        stdin_open = False
    try:
        while sel.get_map() and stopped is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = "timeout"
                break
            for key, _ in sel.select(remaining):
                if key.fd == pipes.stdin:
                    try:
                        pending = pending[os.write(pipes.stdin, pending[:65536]) :]
                    except BrokenPipeError:  # the program exited or closed stdin without reading it all
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(pipes.stdin)
                        os.close(pipes.stdin)
                        stdin_open = False
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                elif key.fd == pipes.status.fd:
                    pipes.status.feed(data)
                else:
                    kept[key.fd] += data[: max(0, limits.output_bytes - total)]
                    total += len(data)
                    if total > limits.output_bytes:
                        stopped = "output_limit"
                        break
    finally:
        sel.close()
        if stdin_open:
            os.close(pipes.stdin)
    return bytes(kept[pipes.stdout]), bytes(kept[pipes.stderr]), stopped, total > limits.output_bytes


def _why_still_running(ns_init: int, limits: Limits) -> StopReason:
    """Why the program was still running when its time ran out, read from /proc before the kill: ``process_limit``
    when its processes and threads (every task under the sandbox's pid-1, not pid-1 itself) are at the process limit,
    ``init_stopped`` when the sandbox's pid-1 is stopped (a program that ptrace-stopped it hides its own end), else
    ``timeout``; ``timeout`` too when /proc cannot be read or parsed (the reason never raises, and it only ever names
    why a program already stopped by the clock was still running: the program fails all the same)."""
    try:
        return _still_running_in(_proc_stats(), ns_init, limits)
    except (OSError, ValueError, IndexError, KeyError):  # /proc hidden (hidepid), a line cut short, a task gone
        return "timeout"


def _still_running_in(stats: dict[int, tuple[str, int, int]], ns_init: int, limits: Limits) -> StopReason:
    """:func:`_why_still_running` on ``stats``, as :func:`_proc_stats` read them."""
    init = stats.get(ns_init)
    if init is not None and init[0] in "Tt":
        return "init_stopped"
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    tasks, todo, seen = 0, list(children.get(ns_init, [])), {ns_init}
    while todo:
        pid = todo.pop()
        if pid in seen:  # a parent loop (pids reused while /proc was read): count each task once
            continue
        seen.add(pid)
        tasks += stats[pid][2]
        todo += children.get(pid, [])
    return "process_limit" if tasks >= limits.processes else "timeout"


def _proc_stats() -> dict[int, tuple[str, int, int]]:
    """Every host process's ``(state, parent pid, threads)`` from ``/proc/PID/stat`` (readable for any process)."""
    stats = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                text = fh.read().decode("utf-8", errors="replace")
        except OSError:  # it exited while we looked
            continue
        fields = text[text.rfind(")") + 2 :].split()  # after the command's name, which may hold spaces and ")"
        stats[int(entry.name)] = (fields[0], int(fields[1]), int(fields[17]))
    return stats


def _kill(proc: Spawned, ns_init: int | None) -> None:
    """Kill the sandbox's pid-1 (the kernel then kills every process of its pid namespace), then wait for bwrap.

    Killing pid-1 rather than bwrap keeps bwrap alive to reap it, so nothing is left behind; a bwrap that
    started no sandbox yet (or hangs) is killed itself, and its children die with it (--die-with-parent).
    """
    if ns_init is not None and proc.returncode is None:
        try:
            os.kill(ns_init, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.wait(KILL_WAIT_S) is not None:
            return
    proc.kill()
    if proc.wait(KILL_WAIT_S) is None:
        raise SandboxError(f"bwrap (pid {proc.pid}) did not exit {KILL_WAIT_S:.0f} s after SIGKILL")


def _result(
    exit_code: int | None, out: bytes, err: bytes, duration: float, stopped: StopReason | None, truncated: bool
) -> ExecResult:
    """Classify how the program ended: bwrap reports a death by signal N as exit code 128 + N."""
    stderr = decode(err)
    sig = None
    if stopped is not None:
        exit_code = None
    elif exit_code is not None and exit_code > 128 and (exit_code - 128) in _SIGNALS:
        sig = exit_code - 128
        stopped = LIMIT_SIGNALS.get(sig, "killed")  # SIGXCPU, SIGXFSZ: the CPU-time or file-size limit
        exit_code = None
    elif ran_out_of_memory(exit_code, stderr):
        stopped = "memory"
    return ExecResult(
        exit_code=exit_code,
        stdout=decode(out),
        stderr=stderr,
        duration_s=round(duration, 4),
        stopped_by=stopped,
        signal=sig,
        truncated=truncated,
        backend="local",
    )


_SIGNALS = {int(s) for s in signal.Signals}


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
