"""Local backend: bubblewrap namespaces + rlimits + an unprivileged uid, no daemon needed.

One run is one command line of Debian tools, from the outside in:

* ``prlimit`` (util-linux) sets hard = soft limits on CPU seconds, address space, processes, file size,
  open files and core dumps; ``unshare --setgid --setuid`` (util-linux, no namespace flags) drops every
  supplementary group and sets the real, effective and saved gid and uid to a sandbox uid (root workers
  only); bwrap then sets no-new-privs itself before anything else;
* ``bwrap --unshare-all`` gives fresh user, mount, pid, network (loopback only), ipc, uts and cgroup
  namespaces, clears the environment, mounts only ``/usr`` read-only plus a fresh ``/proc`` and ``/dev``,
  and size-capped tmpfs (the working dir ``/sandbox``, ``/tmp``, ``/dev/shm``; the rest is read-only) that
  vanish with the sandbox;
* a wall-clock timeout and an output cap kill the sandbox's pid-1, which takes every process in the pid
  namespace with it (a program cannot leave anything behind, even after ``setsid``).

The worker starts that command with no pre-exec Python code, so Python can spawn it with vfork: measured
~4 ms per run faster than setting the uid and rlimits in a forked child of a worker-sized process.
``unshare`` rather than ``setpriv`` switches the uid because it takes the ids as numbers: ``setpriv``
first looks a numeric ``--reuid`` up as a user *name* through NSS (``/etc/passwd``, then libnss_systemd,
which it loads), 0.7–0.9 ms per run more than ``unshare`` here (bench/README.md, bench.sandbox).

As root, each concurrent run gets its own uid from a range (``uid_base + slot``): RLIMIT_NPROC counts
processes per uid, so with one shared uid a fork bomb in one sandbox would stop every other sandbox on
the host from starting (measured: ``bwrap: Creating new namespace failed``). Inside, the program sees
itself as ``nobody`` (65534). A non-root worker runs the sandbox as its own uid.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._base import (
    ExecResult,
    Limits,
    SandboxError,
    SandboxUnavailable,
    StopReason,
    decode,
    get_language,
    ran_out_of_memory,
)

__all__ = ["DEFAULT_UID_BASE", "DEFAULT_UID_SLOTS", "LocalSandbox", "tool_path"]

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
#: Environment of the program: nothing of the worker's.
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKDIR, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
#: Host /etc files the dynamic loader and interpreters read (bound read-only when present).
ETC_FILES = ("/etc/ld.so.cache", "/etc/alternatives")
#: Top-level directories that are symlinks into /usr on merged-/usr systems, real dirs elsewhere.
USR_ALIASES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Seconds to wait for the sandbox to exit after it was killed.
KILL_WAIT_S = 5.0
#: prctl option: orphaned descendants are re-parented to this process instead of the host's init.
PR_SET_CHILD_SUBREAPER = 36

#: Debian package of each tool the backend runs.
PACKAGES = {"bwrap": "bubblewrap", "prlimit": "util-linux", "unshare": "util-linux"}


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
        self.prlimit = tool_path("prlimit", PACKAGES["prlimit"])
        self.unshare = tool_path("unshare", PACKAGES["unshare"])
        self.ro_binds = ro_binds
        self.uid_base = uid_base
        self.uid_slots = uid_slots
        self.slot_dir = slot_dir or DEFAULT_SLOT_DIR
        self._read_only = _read_only_mounts(ro_binds)
        self._interpreters: dict[str, str] = {}

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
            with self._uid() as uid:
                return self._execute(argv, lang.filename, code_fd, uid, stdin.encode("utf-8"), limits)
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

    def _prefix(self, uid: int | None, limits: Limits) -> list[str]:
        """prlimit (hard = soft, so the program may lower a limit but never raise it), then the uid switch."""
        mib = 1 << 20
        cmd = [
            self.prlimit,
            f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",  # SIGXCPU, then SIGKILL a second later
            f"--as={limits.memory_mb * mib}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_mb * mib}",
            f"--nofile={limits.open_files}",
            "--core=0",
            "--",
        ]
        if uid is not None:
            # setgroups(0), setgid, setuid: as root these set the real, effective and saved ids and drop all caps
            cmd += [self.unshare, f"--setgid={uid}", f"--setuid={uid}", "--"]
        return cmd

    def _command(self, argv: list[str], filename: str, code_fd: int, status_fd: int, limits: Limits) -> list[str]:
        disk = str(limits.disk_mb << 20)
        cmd = [
            self.bwrap,
            "--unshare-all", "--unshare-user", "--disable-userns",
            "--die-with-parent", "--new-session",
            "--uid", str(INNER_ID), "--gid", str(INNER_ID), "--hostname", "sandbox",
            "--clearenv",
            *self._read_only,
            "--proc", "/proc", "--dev", "/dev",
            "--size", disk, "--tmpfs", "/dev/shm",
            "--size", disk, "--tmpfs", "/tmp",
            "--size", disk, "--tmpfs", WORKDIR,
            "--file", str(code_fd), f"{WORKDIR}/{filename}",
            # bwrap's root and /dev are unbounded tmpfs: read-only, so only the size-capped mounts take writes
            "--remount-ro", "/dev", "--remount-ro", "/",
            "--chdir", WORKDIR,
            "--json-status-fd", str(status_fd),
        ]  # fmt: skip
        for key, value in SANDBOX_ENV.items():
            cmd += ["--setenv", key, value]
        return [*cmd, "--", *argv]

    @contextmanager
    def _uid(self) -> Iterator[int | None]:
        """A uid of the range held by this run alone (root), or None (run as the worker's own uid)."""
        if os.geteuid() != 0:
            yield None
            return
        self.slot_dir.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(self.slot_dir)
        if st.st_uid != 0 or (st.st_mode & 0o077) or not self.slot_dir.is_dir() or self.slot_dir.is_symlink():
            raise SandboxError(f"{self.slot_dir} must be a directory owned by root with mode 0700")
        start = os.getpid() % self.uid_slots
        for i in range(self.uid_slots):
            slot = (start + i) % self.uid_slots
            fd = os.open(self.slot_dir / f"slot-{slot}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield self.uid_base + slot
            finally:
                os.close(fd)  # releases the lock
            return
        raise SandboxError(f"All {self.uid_slots} sandbox uid slots are busy")

    # ------------------------------------------------------------------ running it

    def _execute(
        self, argv: list[str], filename: str, code_fd: int, uid: int | None, stdin: bytes, limits: Limits
    ) -> ExecResult:
        status_r, status_w = os.pipe()
        try:
            cmd = [*self._prefix(uid, limits), *self._command(argv, filename, code_fd, status_w, limits)]
            _become_subreaper()
            started = time.monotonic()
            try:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={"PATH": "/usr/bin:/bin"},  # bwrap's own environ is readable from inside: no secrets
                    cwd="/",
                    pass_fds=(code_fd, status_w),
                    start_new_session=True,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxError(f"Could not start the sandbox: {exc}") from exc
            finally:
                os.close(status_w)  # bwrap holds the only write end now: EOF means it exited
            status = _Status(status_r)
            try:
                out, err, stopped, truncated = _communicate(proc, status, stdin, limits, started + limits.timeout_s)
                # every pipe is closed: bwrap has exited or is exiting; sleep until it has, not in polling steps
                deadline = time.monotonic() + KILL_WAIT_S
                _wait_until_exited(proc.pid, KILL_WAIT_S)
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise SandboxError("bwrap did not exit after its program had ended") from exc
            finally:
                if proc.poll() is None:
                    _kill(proc, status.child_pid)
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()
                if status.child_pid is not None:
                    _reap(status.child_pid)
        finally:
            os.close(status_r)
        if status.child_pid is None:
            detail = decode(err).strip() or f"exit code {proc.returncode}"
            raise SandboxError(f"The sandbox could not start: {detail}")
        if status.exit_code is None and stopped is None:
            detail = decode(err).strip() or f"exit code {proc.returncode}"
            raise SandboxError(f"The sandbox failed before the program ended: {detail}")
        return _result(status.exit_code, out, err, time.monotonic() - started, stopped, truncated)


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


def _communicate(
    proc: subprocess.Popen[bytes], status: _Status, stdin: bytes, limits: Limits, deadline: float
) -> tuple[bytes, bytes, StopReason | None, bool]:
    """Feed stdin, keep output up to the cap, follow bwrap's status until every pipe is closed.

    Returns ``(stdout, stderr, stopped_by, truncated)``; stops the sandbox at the deadline or the cap.
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    total = 0
    stopped: StopReason | None = None
    pending = memoryview(stdin)
    sel = selectors.DefaultSelector()
    for fd in (out_fd, err_fd, status.fd):
        sel.register(fd, selectors.EVENT_READ)
    if pending:
        os.set_blocking(in_fd, False)
        sel.register(in_fd, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    try:
        while sel.get_map() and stopped is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = "timeout"
                break
            for key, _ in sel.select(remaining):
                if key.fd == in_fd:
                    try:
                        pending = pending[os.write(in_fd, pending[:65536]) :]
                    except BrokenPipeError:  # the program exited or closed stdin without reading it all
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(in_fd)
                        proc.stdin.close()
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                elif key.fd == status.fd:
                    status.feed(data)
                else:
                    kept[key.fd] += data[: max(0, limits.output_bytes - total)]
                    total += len(data)
                    if total > limits.output_bytes:
                        stopped = "output_limit"
                        break
    finally:
        sel.close()
    if stopped is not None:
        _kill(proc, status.child_pid)
    return bytes(kept[out_fd]), bytes(kept[err_fd]), stopped, total > limits.output_bytes


def _kill(proc: subprocess.Popen[bytes], ns_init: int | None) -> None:
    """Kill the sandbox's pid-1 (the kernel then kills every process of its pid namespace), then reap bwrap.

    Killing pid-1 rather than bwrap keeps bwrap alive to reap it, so nothing is left to the host's init.
    """
    if ns_init is not None and proc.poll() is None:
        try:
            os.kill(ns_init, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(KILL_WAIT_S)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # bwrap started no sandbox yet (or hung): its whole group
    except ProcessLookupError:
        pass
    proc.wait(KILL_WAIT_S)


_subreaper_pid: int | None = None


def _become_subreaper() -> None:
    """Make this process the reaper of the sandboxes' pid-1 processes (once per process; not inherited).

    bwrap may exit as soon as the sandbox's pid-1 reports the exit code, without waiting for it: the
    orphan would go to the host's init, which may never reap it, and each zombie counts against the
    sandbox uid's process limit (measured here: the 15th run on a uid failed with ``Can't fork``).
    """
    global _subreaper_pid
    if _subreaper_pid != os.getpid():
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _subreaper_pid = os.getpid()


def _reap(pid: int) -> None:
    """Wait for an orphaned sandbox pid-1 that was re-parented to us (a no-op when bwrap reaped it)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
    except ChildProcessError:  # bwrap reaped it itself
        return
    # Our child, still tearing its namespaces down: the pid cannot be reused before we reap it.
    _wait_until_exited(pid, KILL_WAIT_S)
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_until_exited(pid: int, timeout: float) -> None:
    """Sleep until process ``pid`` has exited (its pidfd turns readable) or ``timeout`` passed; no reaping.

    Replaces polling ``waitpid`` with sleeps, which cost up to a polling step (~0.5 ms) per run.
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # already reaped
        return
    try:
        poller = select.poll()  # not select.select: a busy worker's fd numbers may pass FD_SETSIZE
        poller.register(fd, select.POLLIN)
        poller.poll(timeout * 1000)
    finally:
        os.close(fd)


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
        stopped = "timeout" if sig == signal.SIGXCPU else "killed"
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
