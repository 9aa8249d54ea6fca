"""Attacks through the real ``code`` queue (embedded mode: private Redis + a real code worker, local backend).

One run scores every attack. Each attack row is followed by a benign canary row in the same chunk
(chunk size 2), so the worker process that ran the attack is the one that must then pass the canary.
Each test checks its attack's result item, the host side (files, processes, Redis keys), and its canary.
"""

from __future__ import annotations

import ctypes
import platform
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from orchestrator import evaluate
from ragscore_workers.schemas import MetricResult

from ..support import ROOT, RedisProcess
from .support import pids_running, sandbox_uid_pids

# serial: its timeouts are held to within 2 s (TIMEOUT_S + 2)
pytestmark = [pytest.mark.integration, pytest.mark.serial]

TIMEOUT_S = 3.0
CANARY = "print(sum(range(10)))"
TOKEN = uuid.uuid4().hex
SECRET = f"gsk_{uuid.uuid4().hex}"
#: A command line no other process has: ``sleep`` with it is how the background attack is found.
SLEEP_MARKER = f"4{uuid.uuid4().int % 10**6}.25"
#: The worker's session keyring holds a key of this description, SECRET its payload; the attack plants PLANTED.
KEY_NAME, PLANTED = f"ragscore-test-{TOKEN}", f"ragscore-planted-{TOKEN}"
#: machine -> syscall numbers of (add_key, keyctl); KEYCTL_SEARCH, KEYCTL_READ, KEYCTL_INVALIDATE; the session keyring.
KEY_SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}
ADD_KEY, KEYCTL = KEY_SYSCALLS.get(platform.machine(), (-1, -1))
SEARCH, READ, INVALIDATE, SESSION = 10, 11, 21, -3

_CONNECT = """\
import socket
def attempt(family, address):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(address)
        s.sendall(b"SET ragscore:pwned:{token} 1\\r\\n")
        print("ESCAPED", address, s.recv(64))
    except OSError as exc:
        print("CONTAINED", type(exc).__name__)
"""


#: Attaches to the sandbox's pid-1 (bwrap's init, of the program's uid: ptrace lets it) and makes it call
#: socket(AF_INET) and keyctl, which the seccomp filter refuses the program: pid-1 must be under the filter too.
#: x86_64 registers.
PTRACE_INIT = """\
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
class Regs(ctypes.Structure):  # struct user_regs_struct
    _fields_ = [(name, ctypes.c_ulonglong) for name in "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi "
                "orig_rax rip cs eflags rsp ss fs_base gs_base ds es fs gs".split()]
ATTACH, GETREGS, SETREGS, SINGLESTEP, DETACH, PEEKTEXT, WALL = 16, 12, 13, 9, 17, 1, 0x40000000
def ptrace(request, addr=0, regs=None):
    return libc.ptrace(request, 1, addr, None if regs is None else ctypes.addressof(regs))
def said(n):
    return errno.errorcode.get(-n, n) if n < 0 else n
if ptrace(ATTACH) != 0:
    raise SystemExit(print("ATTACH", errno.errorcode[ctypes.get_errno()]))
os.waitpid(1, WALL)
saved = Regs()
ptrace(GETREGS, regs=saved)
print("ATTACHED", "at a syscall" if ptrace(PEEKTEXT, saved.rip - 2) & 0xFFFF == 0x050F else "elsewhere")
def syscall(nr, *args):
    regs = Regs.from_buffer_copy(saved)
    regs.rip, regs.rax, regs.orig_rax = saved.rip - 2, nr, 2**64 - 1  # at its syscall instruction, no restart
    for name, arg in zip(("rdi", "rsi", "rdx"), args):
        setattr(regs, name, arg % 2**64)
    ptrace(SETREGS, regs=regs)
    ptrace(SINGLESTEP)
    os.waitpid(1, WALL)
    ptrace(GETREGS, regs=regs)
    return said(ctypes.c_long(regs.rax).value)
print("SOCKET", syscall(41, 2, 1, 0))  # socket(AF_INET, SOCK_STREAM, 0)
print("KEYCTL", syscall(250, 0, -3, 0))  # keyctl(KEYCTL_GET_KEYRING_ID, the session keyring)
ptrace(SETREGS, regs=saved)
ptrace(DETACH)
"""


def attacks(home: Path, redis_port: int) -> dict[str, str]:
    """Attack name -> code. Host paths and ports are written into the code, as an attacker would guess them."""
    connect = _CONNECT.replace("{token}", TOKEN)
    return {
        "redis_unix_socket": connect + f"attempt(socket.AF_UNIX, {str(home / 'redis' / 'redis.sock')!r})\n",
        "redis_tcp": connect + f"attempt(socket.AF_INET, ('127.0.0.1', {redis_port}))\n",
        "outside_address": connect
        + "for addr in [('1.1.1.1', 53), ('8.8.8.8', 443), ('10.0.0.1', 80)]:\n    attempt(socket.AF_INET, addr)\n"
        + "try:\n    print('ESCAPED', socket.getaddrinfo('example.com', 80))\n"
        + "except OSError as exc:\n    print('CONTAINED', type(exc).__name__)\n",
        "secrets_environ": "import os\nprint(dict(os.environ))\n",
        "secrets_proc": (
            "import glob, os\n"
            "paths = [f'/proc/{os.getppid()}/environ', '/proc/1/environ', *glob.glob('/proc/*/environ')]\n"
            "for path in paths:\n"
            "    try:\n"
            "        print(path, open(path, 'rb').read())\n"
            "    except OSError as exc:\n"
            "        print(path, 'CONTAINED', type(exc).__name__)\n"
        ),
        "write_checkout": (
            f"for path in {[str(ROOT / f'pwned-{TOKEN}'), str(ROOT / 'ragscore_workers' / f'pwned_{TOKEN}.py')]!r}:\n"
            "    try:\n"
            "        open(path, 'w').write('pwned')\n"
            "        print('WROTE', path)\n"
            "    except OSError as exc:\n"
            "        print('CONTAINED', type(exc).__name__)\n"
        ),
        "write_host_tmp": (
            f"for path in ['/tmp/pwned-{TOKEN}', {str(home / f'pwned-{TOKEN}')!r}]:\n"
            "    try:\n"
            "        open(path, 'w').write('pwned')\n"
            "        print('WROTE', path)\n"
            "    except OSError as exc:\n"
            "        print('CONTAINED', type(exc).__name__)\n"
        ),
        "secrets_keyring": (
            "import ctypes, errno\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "def call(*args):\n"
            "    n = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])\n"
            "    return n if n >= 0 else errno.errorcode[ctypes.get_errno()]\n"
            f"key = call({KEYCTL}, {SEARCH}, {SESSION}, b'user', {KEY_NAME.encode()!r}, 0)\n"
            "buf = ctypes.create_string_buffer(256)\n"
            f"size = call({KEYCTL}, {READ}, key, buf, 256) if isinstance(key, int) else key\n"
            "print('READ', buf.raw[:size] if isinstance(size, int) else size)\n"
            f"print('PLANTED', call({ADD_KEY}, b'user', {PLANTED.encode()!r}, b'x', 1, {SESSION}))\n"
        ),
        "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "allocate_10gb": "b = bytearray(10 * 2**30)\nprint('ALLOCATED', len(b))\n",
        "infinite_loop": "while True:\n    pass\n",
        "print_100mb": "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1_000_000)\n",
        "background_process": (
            "import os, subprocess\n"
            f"subprocess.Popen(['sleep', '{SLEEP_MARKER}'], start_new_session=True)\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        os.execv('/usr/bin/sleep', ['sleep', '{SLEEP_MARKER}'])\n"
            "    os._exit(0)\n"
            "print('spawned')\n"
        ),
        "sleep_past_timeout": "import time\ntime.sleep(600)\n",
        "print_100mb_to_stderr": "import sys\nfor _ in range(100):\n    sys.stderr.write('x' * 1_000_000)\n",
        **({"ptrace_init": PTRACE_INIT} if platform.machine() == "x86_64" else {}),
    }


@dataclass(frozen=True)
class AttackRun:
    home: Path
    redis_url: str
    results: dict[str, MetricResult]

    def attack(self, name: str) -> MetricResult:
        result = self.results[name]
        assert result.error is None, f"the sandbox itself failed on {name}: {result.error}"
        return result

    def canary_passed(self, name: str) -> bool:
        return self.results[f"{name}-canary"].passed is True


def _keyctl(*args: int | bytes) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args]))


@contextmanager
def session_key(name: str, payload: str) -> Iterator[None]:
    """A ``user`` key in this process's session keyring (which its workers inherit) while the block runs; none
    where this process may not add one (a container's seccomp profile): then no worker holds one either."""
    key = _keyctl(ADD_KEY, b"user", name.encode(), payload.encode(), len(payload), SESSION)
    if key <= 0:
        yield
        return
    try:
        yield
    finally:
        _keyctl(KEYCTL, INVALIDATE, key)


def in_session_keyring(name: str) -> bool:
    return _keyctl(KEYCTL, SEARCH, SESSION, b"user", name.encode(), 0) > 0


@pytest.fixture(scope="module")
def attack_run(redis_server: RedisProcess) -> Iterator[AttackRun]:
    """One embedded run of every attack with its canary; GROQ_API_KEY is in the worker's environment and a key
    in its session keyring."""
    with (
        tempfile.TemporaryDirectory(prefix="rsh-", dir="/tmp") as tmp,
        pytest.MonkeyPatch.context() as mp,
        session_key(KEY_NAME, SECRET),
    ):
        home = Path(tmp)
        mp.setenv("RAGSCORE_HOME", str(home))  # as the `home` fixture does, for a module-scoped run
        mp.delenv("RAGSCORE_BROKER_URL", raising=False)
        mp.setenv("GROQ_API_KEY", SECRET)  # the embedded workers inherit this process's environment
        rows = []
        for name, code in attacks(home, redis_server.port).items():
            rows += [{"id": name, "code": code}, {"id": f"{name}-canary", "code": CANARY}]
        suite = {
            "metrics": [{"name": "code_test", "params": {"stdout": "45"}}],
            "sandbox": {"backend": "local", "timeout_s": TIMEOUT_S, "memory_mb": 256},
            "chunk_size": {"code": 2},
        }
        evaluation = evaluate(rows, suite, out=home / "out")
        results = {item.id: item.metrics["code_test"] for item in evaluation.items}
        yield AttackRun(home=home, redis_url=redis_server.url, results=results)


def lines(result: MetricResult) -> list[str]:
    return result.details["stdout"].splitlines()


def test_every_row_was_scored_and_every_canary_passed(attack_run: AttackRun) -> None:
    assert len(attack_run.results) == 2 * len(attacks(Path("/x"), 1))
    failed = [name for name, r in attack_run.results.items() if name.endswith("-canary") and not r.passed]
    assert failed == []


def test_cannot_reach_the_run_stores_unix_socket(attack_run: AttackRun) -> None:
    result = attack_run.attack("redis_unix_socket")
    assert lines(result) == ["CONTAINED FileNotFoundError"]
    redis_files = b"".join(p.read_bytes() for p in (attack_run.home / "redis").rglob("*") if p.is_file())
    # The private Redis is gone after the run, its AOF stays: a SET would be logged there as RESP.
    assert f"\r\nragscore:pwned:{TOKEN}\r\n".encode() not in redis_files
    assert attack_run.canary_passed("redis_unix_socket")


def test_cannot_reach_a_redis_on_the_hosts_loopback(attack_run: AttackRun) -> None:
    result = attack_run.attack("redis_tcp")
    assert lines(result) == ["CONTAINED OSError"]  # no AF_INET socket (the seccomp filter)
    assert redis.Redis.from_url(attack_run.redis_url).exists(f"ragscore:pwned:{TOKEN}") == 0
    assert attack_run.canary_passed("redis_tcp")


def test_cannot_reach_an_outside_address_or_resolve_names(attack_run: AttackRun) -> None:
    result = attack_run.attack("outside_address")
    assert len(lines(result)) == 4 and all(line.startswith("CONTAINED") for line in lines(result))
    assert attack_run.canary_passed("outside_address")


@pytest.mark.parametrize("name", ["secrets_environ", "secrets_proc"])
def test_cannot_read_the_workers_secrets(attack_run: AttackRun, name: str) -> None:
    result = attack_run.attack(name)
    seen = result.details["stdout"] + result.details["stderr"]
    assert result.details["exit_code"] == 0 and seen.strip()
    assert SECRET not in seen and "GROQ_API_KEY" not in seen and "RAGSCORE_" not in seen
    assert attack_run.canary_passed(name)


@pytest.mark.skipif(platform.machine() not in KEY_SYSCALLS, reason="syscall numbers known for x86_64 and aarch64")
def test_cannot_read_or_plant_keys_in_the_workers_session_keyring(attack_run: AttackRun) -> None:
    """Keyrings are not namespaced and a session keyring is inherited: an audit's program read a key of the
    worker's session keyring and linked one of its own into it, left on the host after the run."""
    result = attack_run.attack("secrets_keyring")
    assert SECRET not in result.details["stdout"] + result.details["stderr"]
    assert lines(result) == ["READ EPERM", "PLANTED EPERM"]
    assert not in_session_keyring(PLANTED)
    assert attack_run.canary_passed("secrets_keyring")


def test_cannot_write_into_the_project_checkout(attack_run: AttackRun) -> None:
    result = attack_run.attack("write_checkout")
    assert lines(result) == ["CONTAINED FileNotFoundError"] * 2
    assert not list(ROOT.rglob(f"*{TOKEN}*"))
    assert attack_run.canary_passed("write_checkout")


def test_writes_to_tmp_stay_inside_the_sandbox(attack_run: AttackRun) -> None:
    result = attack_run.attack("write_host_tmp")
    assert lines(result)[0] == f"WROTE /tmp/pwned-{TOKEN}"  # its own throwaway /tmp
    assert lines(result)[1] == "CONTAINED FileNotFoundError"
    assert not Path(f"/tmp/pwned-{TOKEN}").exists() and not list(attack_run.home.rglob(f"*{TOKEN}*"))
    assert attack_run.canary_passed("write_host_tmp")


def test_fork_bomb_is_contained(attack_run: AttackRun) -> None:
    result = attack_run.attack("fork_bomb")
    assert result.details["stopped_by"] == "process_limit" and not result.passed
    assert sandbox_uid_pids() == []
    assert attack_run.canary_passed("fork_bomb")


def test_allocating_10gb_is_stopped(attack_run: AttackRun) -> None:
    result = attack_run.attack("allocate_10gb")
    assert result.details["stopped_by"] == "memory" and "MemoryError" in result.details["stderr"]
    assert "ALLOCATED" not in result.details["stdout"]
    assert attack_run.canary_passed("allocate_10gb")


def test_infinite_loop_is_stopped(attack_run: AttackRun) -> None:
    result = attack_run.attack("infinite_loop")
    assert result.details["stopped_by"] == "timeout" and result.details["duration_s"] < TIMEOUT_S + 2
    assert attack_run.canary_passed("infinite_loop")


def test_printing_100mb_is_cut_off(attack_run: AttackRun) -> None:
    result = attack_run.attack("print_100mb")
    assert result.details["stopped_by"] == "output_limit" and result.details["output_truncated"]
    assert len(result.details["stdout"]) <= 2000
    assert attack_run.canary_passed("print_100mb")


def test_printing_100mb_to_stderr_is_cut_off(attack_run: AttackRun) -> None:
    result = attack_run.attack("print_100mb_to_stderr")
    assert result.details["stopped_by"] == "output_limit" and result.details["output_truncated"]
    assert len(result.details["stderr"]) <= 2000
    assert attack_run.canary_passed("print_100mb_to_stderr")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the attack sets x86_64 registers")
def test_the_sandboxes_pid_1_makes_no_syscall_the_filter_refuses_the_program(attack_run: AttackRun) -> None:
    """bwrap's pid-1 runs as the program's uid in its pid namespace, so the program may ptrace it: had bwrap not put it
    under the seccomp filter too, the program would get through it every socket and keyring call the filter refuses."""
    result = attack_run.attack("ptrace_init")
    assert lines(result) in (
        ["ATTACH EPERM"],  # a sandbox that refuses ptrace is as good
        ["ATTACHED at a syscall", "SOCKET EAFNOSUPPORT", "KEYCTL EPERM"],
    ), result.details
    assert attack_run.canary_passed("ptrace_init")


def test_no_background_process_is_left_behind(attack_run: AttackRun) -> None:
    result = attack_run.attack("background_process")
    assert result.passed is False and lines(result) == ["spawned"] and result.details["exit_code"] == 0
    assert result.details["duration_s"] < TIMEOUT_S  # it did not wait for the sleepers: they died with it
    assert pids_running("sleep", SLEEP_MARKER) == []
    assert attack_run.canary_passed("background_process")


def test_sleeping_past_the_timeout_is_stopped(attack_run: AttackRun) -> None:
    result = attack_run.attack("sleep_past_timeout")
    assert result.details["stopped_by"] == "timeout"
    assert TIMEOUT_S <= result.details["duration_s"] < TIMEOUT_S + 2
    assert attack_run.canary_passed("sleep_past_timeout")


def test_a_rows_evaluation_points_cannot_raise_the_suites_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Points come with the data: a row's code_test point asked for 100000 s and 100000 MiB, and got them."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    raised = {"timeout_s": 100000, "memory_mb": 100000}
    rows = [
        {"id": "memory", "answer": "the code", "code": "b = bytearray(600 * 2**20)\nprint('ALLOCATED')\n",
         "checks": [{"id": "run", "type": "code_test", "params": raised}]},
        {"id": "time", "answer": "the code", "code": "import time\ntime.sleep(30)\nprint('SLEPT')\n",
         "checks": [{"id": "run", "type": "code_test", "params": raised}]},
        {"id": "image", "answer": "the code", "code": CANARY,
         "checks": [{"id": "run", "type": "code_test", "params": {"stdout": "45", "image": "evil/image"}}]},
        {"id": "lower", "answer": "the code", "code": "import time\ntime.sleep(30)\n",
         "checks": [{"id": "run", "type": "code_test", "params": {"timeout_s": 1}}]},
    ]  # fmt: skip
    suite = {"metrics": ["checks"], "sandbox": {"backend": "local", "timeout_s": TIMEOUT_S, "memory_mb": 256}}
    evaluation = evaluate(rows, suite, out=tmp_path / "out")
    points = {item.id: item.metrics["checks"].details["points"][0] for item in evaluation.items}
    assert (
        points["memory"]["figures"]["stopped_by"] == "memory"
        and "ALLOCATED" not in points["memory"]["figures"]["stdout"]
    )
    assert points["time"]["figures"]["stopped_by"] == "timeout"
    assert points["time"]["figures"]["duration_s"] < TIMEOUT_S + 2
    assert points["image"]["status"] == "error" and "may not choose the container image" in points["image"]["note"]
    assert not points["image"]["note"].startswith("sandbox error")  # the row's point is at fault, not the sandbox
    assert points["lower"]["figures"]["stopped_by"] == "timeout" and points["lower"]["figures"]["duration_s"] < 3


def test_the_suites_own_points_may_still_raise_the_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Points the suite gives (``checks.points``) are configuration, as the code_test metric's params are."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    points = [{"id": "run", "type": "code_test", "params": {"stdout": "SLEPT", "timeout_s": TIMEOUT_S + 3}}]
    suite = {
        "metrics": [{"name": "checks", "params": {"points": points}}],
        "sandbox": {"backend": "local", "timeout_s": TIMEOUT_S, "memory_mb": 256},
    }
    code = f"import time\ntime.sleep({TIMEOUT_S + 1})\nprint('SLEPT')\n"
    evaluation = evaluate([{"id": "slow", "answer": "the code", "code": code}], suite, out=tmp_path / "out")
    (point,) = evaluation.items[0].metrics["checks"].details["points"]
    assert point["passed"] is True and point["figures"]["stopped_by"] is None
