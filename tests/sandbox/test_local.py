"""The local backend run directly: real bubblewrap, real programs, real limits."""

from __future__ import annotations

import ctypes.util
import os
import platform
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ragscore_workers.errors import ConfigError
from ragscore_workers.sandbox import (
    ExecResult,
    Limits,
    LocalSandbox,
    SandboxError,
    SandboxUnavailable,
    get_sandbox,
)
from ragscore_workers.sandbox._seccomp import AUDIT_ARCH, FAMILY_CHECKED, REFUSED
from ragscore_workers.sandbox.local import (
    DEFAULT_UID_BASE,
    DEFAULT_UID_SLOTS,
    OWN_PROCESSES,
    SANDBOX_ENV,
    _still_running_in,
    _why_still_running,
)

from ..support import ROOT, until
from .support import FORK_UP_TO, descendants, pids_running, program_pids, sandbox_uid_pids, slot_helpers, status_fields

FAST = Limits(timeout_s=5)
#: What the root of a sandbox may contain: /usr (and its merged-/usr aliases), a few /etc files, mounts.
TOP_LEVEL = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sandbox", "sbin", "tmp", "usr"}


@pytest.fixture(scope="module")
def sandbox() -> LocalSandbox:
    return LocalSandbox()


def run(sandbox: LocalSandbox, code: str, **kw: object) -> ExecResult:
    limits = kw.pop("limits", FAST)
    return sandbox.run(code, limits=limits, **kw)  # type: ignore[arg-type]


def test_program_output_and_exit_code_come_back(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)")
    assert (result.exit_code, result.stdout, result.stderr, result.stopped_by) == (3, "out\n", "err\n", None)
    assert not result.ok and result.backend == "local" and result.duration_s > 0


def test_stdin_is_fed_even_when_larger_than_a_pipe(sandbox: LocalSandbox) -> None:
    data = "x" * 300_000 + "\n"
    result = run(sandbox, "import sys\nprint(len(sys.stdin.read()))", stdin=data)
    assert result.ok and result.stdout == f"{len(data)}\n"


@pytest.mark.serial  # its run is held to under 3 s
def test_stdin_the_program_never_reads_does_not_block(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "print('done')", stdin="y" * 1_000_000)
    assert result.ok and result.stdout == "done\n" and result.duration_s < 3


def test_environment_is_scrubbed(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"gsk_{uuid.uuid4().hex}"
    monkeypatch.setenv("GROQ_API_KEY", secret)
    monkeypatch.setenv("RAGSCORE_STORE_URL", f"redis://:{secret}@localhost")
    code = (
        "import os, glob\n"
        "print(sorted(os.environ))\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    print(path, open(path, 'rb').read())\n"
    )
    result = run(sandbox, code)
    assert result.ok, result.stderr
    assert result.stdout.splitlines()[0] == repr(sorted([*SANDBOX_ENV, "PWD"]))
    assert secret not in result.stdout and "RAGSCORE" not in result.stdout


def test_runs_as_nobody_in_a_fresh_empty_workdir(sandbox: LocalSandbox) -> None:
    code = "import os\nprint(os.getuid(), os.getgid(), os.getcwd(), os.listdir('.'))\nopen('left.txt', 'w').write('x')"
    first, second = run(sandbox, code), run(sandbox, code)
    assert first.stdout == second.stdout == "65534 65534 /sandbox ['main.py']\n"


def test_only_the_size_capped_tmpfs_are_writable(sandbox: LocalSandbox) -> None:
    code = (
        "import os\n"
        "print(sorted(os.listdir('/')))\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    if root.startswith(('/proc', '/sys')):\n"
        "        dirs[:] = []\n"
        "        continue\n"
        "    try:\n"
        "        open(os.path.join(root, '.probe'), 'w').close()\n"
        "        print(root)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    result = run(sandbox, code, limits=Limits(timeout_s=20))
    top, *writable = result.stdout.splitlines()
    assert set(eval(top)) <= TOP_LEVEL  # noqa: S307 - our own program printed a list literal
    assert sorted(writable) == ["/dev/shm", "/sandbox", "/tmp"], result.stderr


def test_tmpfs_size_caps_what_a_program_can_write(sandbox: LocalSandbox) -> None:
    code = (
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        open(f'f{n}', 'wb').write(b'x' * 2**20)\n"
        "        n += 1\n"
        "except OSError as exc:\n"
        "    print(n, exc.strerror)\n"
    )
    result = run(sandbox, code, limits=Limits(disk_mb=8))
    written, error = result.stdout.split(" ", 1)
    assert int(written) <= 8 and error.strip() == "No space left on device"


_ATTEMPT = (
    "import socket\n"
    "def attempt(family, address):\n"
    "    try:\n"
    "        s = socket.socket(family, socket.SOCK_STREAM)\n"
    "        s.settimeout(2)\n"
    "        s.connect(address)\n"
    "        print('CONNECTED', address)\n"
    "    except OSError as exc:\n"
    "        print(type(exc).__name__)\n"
)


def _attempts_beside(sandbox: LocalSandbox, server: socket.socket, attempts: str) -> list[str]:
    """Run ``attempts`` (calls of ``attempt(family, address)``) while ``server`` listens on the host; nothing may
    reach it. Returns what each attempt printed."""
    server.listen()
    result = run(sandbox, _ATTEMPT + attempts)
    server.setblocking(False)
    with pytest.raises(BlockingIOError):
        server.accept()
    return result.stdout.split()


def test_the_hosts_abstract_unix_sockets_are_out_of_reach(sandbox: LocalSandbox) -> None:
    """AF_UNIX stays allowed (multiprocessing, asyncio): a host service on an abstract socket (no file, so no
    mount hides it) is kept out by the sandbox's own network namespace, which abstract names belong to."""
    name = f"\0ragscore-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(name)
        assert _attempts_beside(sandbox, server, f"attempt(socket.AF_UNIX, {name!r})\n") == ["ConnectionRefusedError"]


def test_no_network_not_even_the_hosts_loopback(sandbox: LocalSandbox) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        addresses = [("127.0.0.1", port), ("1.1.1.1", 53), ("10.0.0.1", 80)]
        attempts = f"for addr in {addresses!r}:\n    attempt(socket.AF_INET, addr)\n"
        # no AF_INET socket at all (the seccomp filter): not even the sandbox's own loopback
        assert _attempts_beside(sandbox, server, attempts) == ["OSError", "OSError", "OSError"]


def test_limits_are_hard_so_the_program_cannot_raise_them(sandbox: LocalSandbox) -> None:
    limits = Limits(timeout_s=5, memory_mb=200, processes=12, file_mb=3, open_files=40)
    code = (
        "import resource\n"
        "for name in ['CPU', 'AS', 'NPROC', 'FSIZE', 'NOFILE', 'CORE']:\n"
        "    which = getattr(resource, 'RLIMIT_' + name)\n"
        "    soft, hard = resource.getrlimit(which)\n"
        "    try:\n"
        "        resource.setrlimit(which, (hard + 1, hard + 1))\n"
        "        raised = 'RAISED'\n"
        "    except (ValueError, OSError):\n"
        "        raised = 'refused'\n"
        "    print(name, soft, hard, raised)\n"
    )
    result = run(sandbox, code, limits=limits)
    mib = 1 << 20
    assert result.stdout.splitlines() == [
        f"CPU {limits.cpu_s} {limits.cpu_s + 1} refused",  # SIGXCPU at the soft limit, SIGKILL a second later
        f"AS {200 * mib} {200 * mib} refused",
        f"NPROC {12 + OWN_PROCESSES} {12 + OWN_PROCESSES} refused",  # the program's 12 + the sandbox's own
        f"FSIZE {3 * mib} {3 * mib} refused",
        "NOFILE 40 40 refused",
        "CORE 0 0 refused",
    ], result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker switches the sandbox to a uid of its own")
def test_on_the_host_every_sandbox_process_is_an_unprivileged_uid(sandbox: LocalSandbox) -> None:
    """The slot helper, bwrap and the program run with the slot uid and gid (real, effective, saved, fs), no
    supplementary groups, no capabilities and no-new-privs, as the host's /proc shows them."""
    me = os.getpid()
    thread = threading.Thread(target=run, args=(sandbox, "import time\ntime.sleep(2)"))
    thread.start()
    try:
        deadline, seen = time.monotonic() + 60, []  # it stops once the program is seen (its start may be slow)
        while time.monotonic() < deadline:
            # bwrap is a child of a slot helper of this process
            helpers = slot_helpers(me)
            sandbox_pids = [pid for h in helpers for pid in descendants(h) if status_fields(pid).get("Name") == "bwrap"]
            sandbox_pids += [pid for root in sandbox_pids for pid in descendants(root)]
            sandbox_pids = sorted(set(sandbox_pids))
            seen = [(pid, status_fields(pid)) for pid in sandbox_pids]
            if any(fields.get("Name") == "python3" for _, fields in seen):
                break
            time.sleep(0.01)
    finally:
        thread.join()
    names = sorted(fields["Name"] for _, fields in seen)
    assert names == ["bwrap", "bwrap", "python3"], seen  # bwrap, the namespace's pid-1, the program
    (helper,) = {int(fields["PPid"]) for _, fields in seen if fields["Name"] == "bwrap"} & set(helpers)
    seen.append((helper, status_fields(helper)))
    assert len(seen) == 1 + OWN_PROCESSES  # the program; the rest are the sandbox's own, which RLIMIT_NPROC allows for
    uids = {fields["Uid"] for _, fields in seen} | {fields["Gid"] for _, fields in seen}
    (ids,) = uids
    first, *rest = ids.split()
    assert rest == [first] * 3 and DEFAULT_UID_BASE <= int(first) < DEFAULT_UID_BASE + DEFAULT_UID_SLOTS
    for _, fields in seen:
        assert fields["Groups"] == "" and fields["NoNewPrivs"] == "1", fields
        assert fields["CapPrm"] == fields["CapEff"] == fields["CapAmb"] == "0" * 16, fields


@pytest.mark.serial  # its run is held to under 3 s
def test_wall_clock_timeout_stops_a_sleeping_program(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "import time\nprint('start', flush=True)\ntime.sleep(60)", limits=Limits(timeout_s=1))
    assert result.stopped_by == "timeout" and result.exit_code is None
    assert result.stdout == "start\n" and 1 <= result.duration_s < 3


@pytest.mark.serial  # its run is held to under 3 s
def test_busy_loop_is_stopped(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "while True:\n    pass", limits=Limits(timeout_s=1))
    assert result.stopped_by == "timeout" and result.duration_s < 3


def test_address_space_limit_stops_a_huge_allocation(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "b = bytearray(10 * 2**30)\nprint('ALLOCATED')", limits=Limits(memory_mb=128))
    assert result.stopped_by == "memory" and "MemoryError" in result.stderr and "ALLOCATED" not in result.stdout


def test_a_program_that_only_says_out_of_memory_keeps_its_exit_code(sandbox: LocalSandbox) -> None:
    """Any failed program whose stderr held "Out of memory" or "MemoryError" was a memory stop, its exit code lost."""
    said = "import sys\nprint('Error: Out of memory? no: MemoryError is not it, bad input', file=sys.stderr)\n"
    result = run(sandbox, said + "sys.exit(2)")
    assert (result.stopped_by, result.exit_code) == (None, 2), result
    caught = run(sandbox, "import sys\ntry:\n    b = bytearray(10 * 2**30)\nexcept MemoryError:\n"
                          "    print('too big, said and handled', file=sys.stderr)\n    sys.exit(3)",
                 limits=Limits(memory_mb=128))  # fmt: skip
    assert (caught.stopped_by, caught.exit_code) == (None, 3), caught
    errno = run(sandbox, "raise OSError(12, 'Cannot allocate memory')")
    assert errno.stopped_by == "memory" and errno.exit_code == 1, errno
    subclass = "class _ArrayMemoryError(MemoryError): pass\nraise _ArrayMemoryError('Unable to allocate 8.00 GiB')"
    assert run(sandbox, subclass).stopped_by == "memory"  # numpy's, as its traceback ends


@pytest.mark.serial  # 2 s of work under a 2.5 s limit: a loaded host's start-up delay alone passes it
def test_threads_busy_on_every_core_run_until_their_wall_clock_timeout(sandbox: LocalSandbox) -> None:
    """RLIMIT_CPU was one core's worth of the timeout: two threads hashing (hashlib lets go of the GIL) were
    stopped by SIGXCPU after about half their wall-clock time, and the result said "timeout"."""
    code = ("import hashlib, threading, time\n"
            "data = b'x' * 2**20\n"
            "def work():\n"
            "    end = time.monotonic() + 2.0\n"
            "    while time.monotonic() < end:\n"
            "        hashlib.sha256(data).digest()\n"
            "threads = [threading.Thread(target=work) for _ in range(2)]\n"
            "[t.start() for t in threads]\n[t.join() for t in threads]\nprint('done')")  # fmt: skip
    result = run(sandbox, code, limits=Limits(timeout_s=2.5))
    assert (result.stopped_by, result.exit_code, result.stdout.strip()) == (None, 0, "done"), result


def test_a_correct_multithreaded_program_runs_under_the_default_limits(sandbox: LocalSandbox) -> None:
    """glibc's per-thread malloc arenas (64 MiB of address space each) made RLIMIT_AS refuse the 7th thread."""
    code = ("from concurrent.futures import ThreadPoolExecutor\n"
            "with ThreadPoolExecutor(8) as pool:\n"
            "    print(sum(pool.map(lambda i: sum(range(i * 1000)), range(64))))")  # fmt: skip
    result = run(sandbox, code)
    assert result.ok, result.stderr
    assert result.stdout.strip() == str(sum(sum(range(i * 1000)) for i in range(64)))


def test_output_cap_stops_a_flood(sandbox: LocalSandbox) -> None:
    code = "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000)"
    result = run(sandbox, code, limits=Limits(output_bytes=100_000))
    assert result.stopped_by == "output_limit" and result.truncated and result.exit_code is None
    assert len(result.stdout) == 100_000


def test_file_size_and_open_file_limits(sandbox: LocalSandbox) -> None:
    code = (
        "try:\n"
        "    open('big', 'wb').write(b'x' * 3 * 2**20)\n"
        "except OSError as exc:\n"
        "    print(exc.strerror)\n"
        "try:\n"
        "    files = [open('/dev/null') for _ in range(100)]\n"
        "except OSError as exc:\n"
        "    print(exc.strerror)\n"
    )
    result = run(sandbox, code, limits=Limits(file_mb=1, open_files=16))
    assert result.stdout.splitlines() == ["File too large", "Too many open files"], result.stderr


def test_a_program_killed_by_a_signal_is_reported(sandbox: LocalSandbox) -> None:
    result = run(sandbox, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (result.stopped_by, result.signal, result.exit_code) == ("killed", 11, None)


@pytest.mark.serial  # its run is held to under 3 s
def test_no_process_outlives_its_sandbox(sandbox: LocalSandbox) -> None:
    marker = f"3{uuid.uuid4().int % 10**6}.5"
    code = (
        "import os, subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/usr/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "print('spawned')\n"
    )
    result = run(sandbox, code)
    assert result.ok and result.stdout == "spawned\n" and result.duration_s < 3
    assert pids_running("sleep", marker) == []


def test_fork_bomb_is_contained_and_spares_a_concurrent_sandbox(sandbox: LocalSandbox) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    results: dict[str, ExecResult] = {}
    limits = Limits(timeout_s=3)
    thread = threading.Thread(target=lambda: results.update(bomb=run(sandbox, bomb, limits=limits)))
    thread.start()
    full = until(lambda: len(program_pids(os.getpid())) >= limits.processes or not thread.is_alive(), 60)
    assert full and thread.is_alive(), "the bomb never reached its process limit"
    results["neighbour"] = run(sandbox, "import subprocess\nprint(subprocess.run(['true']).returncode)")
    thread.join()
    assert results["bomb"].stopped_by == "process_limit"  # not "timeout": the limit held it spinning till the clock
    assert results["neighbour"].ok and results["neighbour"].stdout == "0\n"
    if os.geteuid() == 0:  # only a root worker switches to the uid range
        assert sandbox_uid_pids() == []


@pytest.mark.timeout(30)
def test_why_a_program_was_still_running_is_a_plain_timeout_when_proc_says_nothing_sure() -> None:
    """The /proc read before the kill only names why a program the clock stopped was still running: a sandbox pid-1
    that is gone (exited, or a pid never a sandbox's), or a snapshot whose parent links loop (pids reused while it was
    read: the count walked that loop for ever), is a plain timeout, never a raise nor a hang."""
    assert _why_still_running(2**22 + 1, Limits(processes=2)) == "timeout"  # past pid_max's default: no such pid
    # pid 10 is the sandbox's pid-1, 13 its child, 14 13's child, and 10's parent read as 14 (a reused pid)
    looped = {10: ("S", 14, 1), 13: ("S", 10, 1), 14: ("S", 13, 1)}
    assert _still_running_in(looped, 10, Limits(processes=3)) == "timeout"  # two tasks, each counted once
    assert _still_running_in(looped, 10, Limits(processes=2)) == "process_limit"


@pytest.mark.parametrize("processes", [1, 4, 16])
def test_the_program_may_have_processes_at_once_itself_included_and_no_more(
    sandbox: LocalSandbox, processes: int
) -> None:
    """``limits.processes`` is the program's: the slot helper, bwrap and its pid-1 (of the same uid, so counted by
    RLIMIT_NPROC) do not take any of it. Every process stays alive until the last fork, so all count at once. Under 1
    the program runs alone (it could not start at all while the sandbox's own 3 took the limit)."""
    limits = Limits(timeout_s=10, processes=processes)
    fits = run(sandbox, FORK_UP_TO, stdin=str(processes), limits=limits)
    assert (fits.exit_code, fits.stdout) == (0, f"{processes} \n"), fits.stderr
    refused = run(sandbox, FORK_UP_TO, stdin=str(processes + 1), limits=limits)
    assert refused.stdout == f"{processes} BlockingIOError: [Errno 11] Resource temporarily unavailable\n"


def test_runs_leave_no_zombie_to_eat_the_process_limit(sandbox: LocalSandbox) -> None:
    """Slot helpers adopt and must reap what bwrap leaves behind: no zombie of the range stays after a run."""
    results = [run(sandbox, "print(1)", limits=Limits(processes=4)) for _ in range(12)]
    assert all(r.ok for r in results), [r.stderr for r in results if not r.ok]
    if os.geteuid() == 0:
        helpers = slot_helpers(os.getpid())
        assert helpers
        assert [pid for h in helpers for pid in sandbox_uid_pids(zombies=True, parent=h)] == []


def test_sandbox_that_cannot_start_raises() -> None:
    broken = LocalSandbox(bwrap="false")  # a real program that exits 1 without starting anything
    with pytest.raises(SandboxError, match="The sandbox could not start"):
        broken.run("print(1)")


def test_missing_bubblewrap_names_the_package_to_install() -> None:
    with pytest.raises(SandboxUnavailable, match="bwrap is not installed.*apt-get install bubblewrap"):
        LocalSandbox(bwrap="no-such-bwrap")


def test_unknown_language_and_bad_limits_are_errors(sandbox: LocalSandbox) -> None:
    with pytest.raises(SandboxError, match="Unsupported language 'cobol'"):
        sandbox.run("x", language="cobol")
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        Limits(timeout_s=0)


def test_auto_backend_falls_back_to_local_without_an_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix:///tmp/no-docker-{uuid.uuid4().hex}.sock")
    get_sandbox.cache_clear()
    try:
        assert isinstance(get_sandbox("auto"), LocalSandbox)
        with pytest.raises(ConfigError, match="choose from auto, local, docker"):
            get_sandbox("podman")
    finally:
        get_sandbox.cache_clear()


def test_a_worker_holding_many_files_can_still_start_a_sandbox(sandbox: LocalSandbox) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # room for 1,100 more beside what the test process holds already (a long pytest process holds hundreds)
    already = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, already + 1200)), hard))
    # the code, status, pipe and pidfd fds get numbers > 1024, past select()'s FD_SETSIZE
    held = [open(os.devnull) for _ in range(1100)]  # noqa: SIM115
    assert held[-1].fileno() > 1024
    try:
        result = run(sandbox, "print('ok')", stdin="x", limits=Limits(open_files=16))
    finally:
        for fh in held:
            fh.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert result.ok and result.stdout == "ok\n"


def test_the_sandbox_dies_with_a_killed_worker() -> None:
    marker = f"5{uuid.uuid4().int % 10**6}.5"
    program = f"import subprocess\nsubprocess.run(['sleep', '{marker}'])"
    script = (
        "from ragscore_workers.sandbox import LocalSandbox, Limits\n"
        f"LocalSandbox().run({program!r}, limits=Limits(timeout_s=60))\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60  # returns once it runs (the worker's imports and the sandbox's start)
        while not pids_running("sleep", marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids_running("sleep", marker), "the sandboxed program never started"
    finally:
        worker.kill()
        worker.wait()
    deadline = time.monotonic() + 30  # returns once it is gone; one left behind sleeps for days
    while pids_running("sleep", marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_running("sleep", marker) == []


def test_the_seccomp_filters_syscall_numbers_are_the_kernels_on_each_architecture() -> None:
    """The filter matches numbers, which differ by architecture: each one is checked against libseccomp's tables
    (the kernel's), aarch64's too, where a wrong number would refuse a syscall programs need."""
    found = ctypes.util.find_library("seccomp")
    assert found, "libseccomp2 is missing"
    libseccomp = ctypes.CDLL(found)
    libseccomp.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    libseccomp.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    libseccomp.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    for column, (machine, audit_arch) in enumerate(AUDIT_ARCH.items()):
        assert libseccomp.seccomp_arch_resolve_name(machine.encode()) == audit_arch
        for name, numbers in (FAMILY_CHECKED | REFUSED).items():
            number = libseccomp.seccomp_syscall_resolve_name_arch(audit_arch, name.encode())
            assert number == numbers[column], f"{name} is {number} on {machine}"


def test_the_seccomp_filter_denies_what_namespaces_and_rlimits_leave_open(sandbox: LocalSandbox) -> None:
    """Audits held 2 GiB of System V shared memory, ~1 GiB of memfds, 1.9 GB of semaphore arrays and 2 GiB in a
    message queue under memory_mb 256 (no rlimit counts them), opened AF_VSOCK sockets to the hypervisor (no
    network namespace isolates vsock) and pinned 1.4 GB of the host's one TCP buffer pool over the sandbox's
    own loopback. The filter refuses those, io_uring and other socket families, from socketpair() too (TIPC's
    makes a pair of TIPC sockets, loading its module), and Linux AIO (one program held the host's whole
    fs.aio-max-nr), userfaultfd, bpf and perf_event_open (kernel attack surface only host sysctls would limit);
    ordinary programs (processes, pools, asyncio) still run."""
    column = list(AUDIT_ARCH).index(platform.machine())
    code = (
        "import ctypes, errno, multiprocessing, os, socket\n"
        "def tried(f):\n"
        "    try:\n"
        "        f()\n"
        "        return 'ok'\n"
        "    except OSError as e:\n"
        "        return errno.errorcode[e.errno]\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('shmget', libc.shmget(0, 1 << 20, 0o1600), errno.errorcode[ctypes.get_errno()])\n"
        "print('semget', libc.semget(0, 32000, 0o1600), errno.errorcode[ctypes.get_errno()])\n"
        "print('msgget', libc.msgget(0, 0o1600), errno.errorcode[ctypes.get_errno()])\n"
        "print('sysctl', tried(lambda: open('/proc/sys/kernel/msgmnb', 'w').write('2147483647')))\n"
        "import asyncio\n"
        "print('asyncio', asyncio.run(asyncio.sleep(0, 'ok')))\n"
        "print('memfd', tried(lambda: os.memfd_create('x')))\n"
        "print('vsock', tried(lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)))\n"
        "ring = libc.syscall(425, 8, ctypes.create_string_buffer(120))\n"
        "print('io_uring', ring, errno.errorcode[ctypes.get_errno()])\n"
        "events = int(open('/proc/sys/fs/aio-max-nr').read())\n"  # the host's whole pool, in one context
        f"io_setup = {REFUSED['io_setup'][column]}\n"
        "aio = libc.syscall(io_setup, events, ctypes.byref(ctypes.c_ulong(0)))\n"
        "print('io_setup', aio, errno.errorcode.get(ctypes.get_errno()))\n"
        # userfaultfd opens for every user (user-mode faults); the kernel answers the others EFAULT (no attr)
        f"uffd, bpf, perf = {[REFUSED[name][column] for name in ('userfaultfd', 'bpf', 'perf_event_open')]}\n"
        "print('userfaultfd', libc.syscall(uffd, 1 | os.O_CLOEXEC), errno.errorcode.get(ctypes.get_errno()))\n"
        "print('bpf', libc.syscall(bpf, 0, None, 8), errno.errorcode.get(ctypes.get_errno()))\n"
        "print('perf', libc.syscall(perf, None, 0, -1, -1, 0), errno.errorcode.get(ctypes.get_errno()))\n"
        "for fam in ('AF_UNIX', 'AF_INET', 'AF_INET6'):\n"
        "    print(fam, tried(lambda: socket.socket(getattr(socket, fam)).close()))\n"
        "for fam in ('AF_INET', 'AF_VSOCK', 'AF_TIPC'):\n"
        "    print(f'socketpair-{fam}', tried(lambda: socket.socketpair(getattr(socket, fam))))\n"
        "print('interfaces', socket.if_nameindex())\n"
        "print('callback', ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)(41))\n"
        "import hashlib, ssl\n"  # OpenSSL loads its configuration, CA store and digests as usual
        "print('ssl', ssl.create_default_context().check_hostname, hashlib.sha256(b'').hexdigest()[:4])\n"
        "with multiprocessing.Pool(2) as pool:\n"
        "    print('pool', pool.map(abs, [-1, -2]))\n"
    )
    result = run(sandbox, code)
    assert result.ok, result.stderr
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["shmget"] == "-1 EPERM" and lines["memfd"] == "EPERM" and lines["io_uring"] == "-1 EPERM"
    assert lines["io_setup"] == "-1 EPERM"
    assert lines["userfaultfd"] == lines["bpf"] == lines["perf"] == "-1 EPERM"
    assert lines["vsock"] == "EAFNOSUPPORT"
    assert lines["semget"] == lines["msgget"] == "-1 EPERM" and lines["sysctl"] == "EROFS"
    assert lines["AF_UNIX"] == "ok" and lines["AF_INET"] == lines["AF_INET6"] == "EAFNOSUPPORT"
    # refused before the kernel makes (or loads the module of) the family's sockets, as socket() is
    assert {lines[f"socketpair-{fam}"] for fam in ("AF_INET", "AF_VSOCK", "AF_TIPC")} == {"EAFNOSUPPORT"}
    assert lines["asyncio"] == "ok"
    assert lines["interfaces"] == "[(1, 'lo')]" and lines["callback"] == "42" and lines["pool"] == "[1, 2]"
    assert lines["ssl"] == "True e3b0"


def test_secret_memory_cannot_hold_memory_outside_the_memory_limit(sandbox: LocalSandbox) -> None:
    """memfd_secret's pages stay with its fd once unmapped, as a memfd's do: an audit's program held 512 MiB in one
    process under memory_mb 256, mapping 4 MiB of a 16 MiB (RLIMIT_FSIZE) fd at a time."""
    code = (
        "import ctypes, errno, mmap, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "held, fds = 0, []\n"
        "try:\n"
        "    for _ in range(8):\n"
        "        fd = libc.syscall(ctypes.c_long(447), ctypes.c_long(0))\n"  # memfd_secret on x86_64 and aarch64
        "        if fd < 0:\n"
        "            raise OSError(ctypes.get_errno(), 'memfd_secret')\n"
        "        fds.append(fd)\n"
        "        os.ftruncate(fd, 16 << 20)\n"
        "        for offset in range(0, 16 << 20, 4 << 20):\n"
        "            with mmap.mmap(fd, 4 << 20, offset=offset) as m:\n"
        "                m[::4096] = b'x' * 1024\n"
        "            held += 4\n"
        "    print('held', held)\n"
        "except OSError as exc:\n"
        "    print(errno.errorcode[exc.errno], held)\n"
    )
    result = run(sandbox, code, limits=Limits(timeout_s=30, memory_mb=64))
    assert result.ok, result.stderr
    assert result.stdout == "EPERM 0\n"


def test_pipes_cannot_pin_huge_pages_outside_the_memory_limit(sandbox: LocalSandbox) -> None:
    """vmsplice() lends a pipe the program's own pages, and one byte of a transparent huge page keeps all 2 MiB of
    it once unmapped: an audit's one process pinned 6.3 GiB in 30 s under memory_mb 256 (3072 pipe slots; the
    host's pipe quota allows 16384 a run, 32 GiB)."""
    code = (
        "import ctypes, errno, fcntl, mmap, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "class Iovec(ctypes.Structure):\n"
        "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
        "r, w = os.pipe()\n"
        "fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 64 * 4096)\n"
        "held = 0\n"
        "try:\n"
        "    for _ in range(64):\n"
        "        area = mmap.mmap(-1, 4 << 20)\n"
        "        base = (ctypes.addressof(ctypes.c_char.from_buffer(area)) + (2 << 20) - 1) & ~((2 << 20) - 1)\n"
        "        libc.madvise(ctypes.c_void_p(base), ctypes.c_size_t(2 << 20), mmap.MADV_HUGEPAGE)\n"
        "        ctypes.memset(base, 1, 2 << 20)\n"
        "        if libc.vmsplice(w, ctypes.byref(Iovec(base, 1)), 1, 0) != 1:\n"
        "            raise OSError(ctypes.get_errno(), 'vmsplice')\n"
        "        held += 2\n"
        "    print('held', held)\n"
        "except OSError as exc:\n"
        "    print(errno.errorcode[exc.errno], held)\n"
    )
    result = run(sandbox, code, limits=Limits(timeout_s=30, memory_mb=64))
    assert result.ok, result.stderr
    assert result.stdout == "EPERM 0\n"


def test_a_program_stopped_by_its_cpu_time_or_file_size_limit_is_said_so(sandbox: LocalSandbox) -> None:
    """SIGXCPU (RLIMIT_CPU) read as "timeout", and SIGXFSZ (RLIMIT_FSIZE) as "killed" by signal 25. The program
    lowers its own CPU limit here (the sandbox's is the timeout times the cores: the wall clock comes first), and
    restores SIGXFSZ's default action (Python ignores it, so a write past the limit is an OSError, EFBIG)."""
    cpu = "import resource as r\nr.setrlimit(r.RLIMIT_CPU, (1, r.getrlimit(r.RLIMIT_CPU)[1]))\nwhile True:\n    pass"
    result = run(sandbox, cpu, limits=Limits(timeout_s=30))
    assert (result.stopped_by, result.signal, result.exit_code) == ("cpu_limit", 24, None), result
    big = "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\nopen('big', 'wb').write(b'x' * 2 * 2**20)"
    result = run(sandbox, big, limits=Limits(file_mb=1))
    assert (result.stopped_by, result.signal, result.exit_code) == ("file_limit", 25, None), result
