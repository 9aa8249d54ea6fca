"""Test helpers: throwaway redis-server processes, worker processes, and generated datasets."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import IO, Any

import psutil
import redis
from rich.console import Console

from orchestrator.embedded_redis import EmbeddedRedis, find_redis_server
from orchestrator.reports.live import StatusView, sample
from orchestrator.workers import worker_command
from ragscore_workers.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


#: Runs ``argv[1:]`` (in place: same process) with SIGINT at its default. A child of a shell's background job
#: inherits SIGINT ignored (bash sets SIG_IGN there, and Python keeps an ignored SIGINT ignored), so a test's Ctrl-C
#: would never reach it as a KeyboardInterrupt.
_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
)

#: The same, with SIGINT ignored (a shell script's ``cmd &``).
_SIGINT_IGNORED = _SIGINT_DEFAULT.replace("signal.SIG_DFL", "signal.SIG_IGN")


def interruptible(args: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` for a child a test sends SIGINT (Ctrl-C) to: it gets it whatever the
    test's own SIGINT disposition (an exec wrapper, not ``preexec_fn``: safe beside the tests' threads)."""
    return subprocess.Popen([sys.executable, "-c", _SIGINT_DEFAULT, *args], **popen)


def as_background_job(args: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``subprocess.Popen(args, **popen)`` for a child started as a shell script's background job (``cmd &``, job
    control off): SIGINT ignored, as the shell starts it, whatever the test's own disposition."""
    return subprocess.Popen([sys.executable, "-c", _SIGINT_IGNORED, *args], **popen)


def interrupted_once_said(
    proc: subprocess.Popen[str], said: str, timeout: float = 240, signum: int = signal.SIGINT
) -> str:
    """Ctrl-C ``proc`` (an :func:`interruptible` child, its stderr piped; ``signum``: another stop signal) once its
    stderr has a line holding ``said`` (it must still run then); everything it wrote on stderr once it ended."""
    assert proc.stderr is not None
    before = "".join(line for line in lines_until(proc.stderr, said, timeout) if said not in line)
    assert proc.poll() is None, before
    proc.send_signal(signum)
    _, rest = proc.communicate(timeout=timeout)
    return before + rest


def until(check: Callable[[], bool], timeout: float) -> bool:
    """True once ``check()`` holds, False if it still does not after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


#: Per stream, the reader of a :func:`next_line` call that timed out, still waiting for its line: the next call on
#: that stream takes its line, in place of a second reader (which would read the line after, the first one's lost).
_waiting_readers: weakref.WeakKeyDictionary[IO[str], queue.Queue[str]] = weakref.WeakKeyDictionary()


def next_line(stream: IO[str], timeout: float) -> str:
    """``stream.readline()`` ("" at its end), failing where no line comes within ``timeout`` seconds: a process that
    hangs silent is named at once, not by the suite's timeout many minutes later with every thread's stack. The
    line is read in a thread, one per stream at most: one that timed out goes on waiting (until the stream's line or
    end: its process's end) and gives its line to the next call on the stream."""
    lines = _waiting_readers.pop(stream, None)
    if lines is None:
        lines = queue.Queue()
        threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        _waiting_readers[stream] = lines
        raise AssertionError(f"no line read within {timeout} s") from None


def output_of(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The stdout and stderr of ``proc``, which has exited, for an assert's message: read ``timeout`` s at most (a
    child of it still holding its pipes would hold a plain ``communicate()`` for ever), then it is killed."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return f"(its output did not end within {timeout} s)"
    return f"stdout: {out}\nstderr: {err}"


def lines_until(stream: IO[str], said: str, timeout: float) -> list[str]:
    """The lines of ``stream`` up to the first holding ``said``, that one included (all of them where the stream ends
    first), failing with the lines read so far where neither comes within ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while not lines or said not in lines[-1]:
        try:
            line = next_line(stream, max(deadline - time.monotonic(), 0.0))
        except AssertionError:
            seen = "".join(lines)[-3000:]
            raise AssertionError(f"no line holding {said!r} within {timeout} s; read until then:\n{seen}") from None
        if not line:
            break
        lines.append(line)
    return lines


def status_saying(run_id: str, url: str, said: str, timeout: float) -> str:
    """``ragscore status RUN --broker URL``'s text (whitespace folded), read again until it contains ``said`` or
    ``timeout`` seconds passed: the last read (a status says what a run waits on once it did no work for a while)."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "status", run_id, "--broker", url],
                              capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
        text = " ".join(done.stdout.split())
        if said in text or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def backoff_pauses(log_text: str) -> list[float]:
    """The shared pauses (seconds) the limiter logged setting after 429s that said not how long to wait, in order."""
    return [float(s) for s in re.findall(r"that said not how long to wait: every worker pauses ([\d.]+) s", log_text)]


def free_port() -> int:
    """A loopback port free now, for a server about to bind it (another may take it first: see ``closed_port``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on while the ``with`` lasts: a connect to it is refused. It stays bound, never
    listening and without SO_REUSEADDR, so no other test's server can take it meanwhile (a ``free_port()`` could be),
    on 127.0.0.1 and on ::1 alike: ``localhost`` names both, and a client may try ::1 first."""
    while True:
        with contextlib.ExitStack() as held:
            ipv4 = held.enter_context(socket.socket())
            ipv4.bind(("127.0.0.1", 0))
            port = ipv4.getsockname()[1]
            if _held_on_ipv6_loopback(held, port):
                yield port
                return


def _held_on_ipv6_loopback(held: contextlib.ExitStack, port: int) -> bool:
    """Bind ``port`` on ::1 too, kept open by ``held``: False where another socket has it there (take another port);
    True also on a host without IPv6, where no client reaches ::1 either."""
    try:
        ipv6 = held.enter_context(socket.socket(socket.AF_INET6))
        ipv6.bind(("::1", port))
    except OSError as exc:
        return exc.errno != errno.EADDRINUSE
    return True


def _tcp_ports(args: list[str]) -> set[int]:
    """The TCP ports a ``redis-server`` with these arguments binds: its last ``--port`` and ``--tls-port`` (as for
    redis-server, a later one wins: a caller's ``--port 0`` binds none)."""
    named = dict(zip(args, args[1:], strict=False))  # each argument to the next: a repeated option's last value
    return {port for option in ("--port", "--tls-port") if (port := int(named.get(option, "0")))}


class RedisProcess:
    """A real redis-server on a free loopback port, with its data in ``data_dir``; ``tls``: also a TLS port
    (``tls_port``), the ``--tls-*`` file options being the caller's."""

    def __init__(self, data_dir: Path, *extra: str, tls: bool = False) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _ports(self) -> list[str]:
        return ["--port", str(self.port), *(["--tls-port", str(self.tls_port)] if self.tls_port else [])]

    def start_without_ping(self) -> RedisProcess:
        """Start it and wait until it listens (also servers a plain client cannot ping: TLS-only, password). Its
        first start takes other free ports when one named was taken meanwhile (free_port only names one), for
        each port it binds (``--port``, ``--tls-port``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.data_dir / "redis-server.log"
        for _ in range(3):
            if not self.started:
                log.unlink(missing_ok=True)  # what this start says, not an earlier one
            args = [find_redis_server(), *self._ports(), "--bind", "127.0.0.1", "--dir", str(self.data_dir),
                    "--save", "", "--appendonly", "no", "--logfile", str(log), *self.extra]  # fmt: skip
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if not until(partial(self._listening_or_gone, _tcp_ports(args)), 60):
                raise RuntimeError(f"redis-server did not listen within 60 s: {args}")
            if self.proc.poll() is None:
                self.started = True
                return self
            said = log.read_text(errors="replace") if log.exists() else ""
            if self.started or "Address already in use" not in said:
                raise RuntimeError(f"redis-server exited at once: {args}\n{said[-2000:]}")
            self.port = free_port()
            self.tls_port = self.tls_port and free_port()
        raise RuntimeError(f"redis-server found no free port: {args}")

    def _listening_or_gone(self, ports: set[int]) -> bool:
        """It listens on every TCP port in ``ports`` (it is up, though a client may not ping it), or it has exited.
        Every port, not any: redis-server binds them one at a time and exits when a later one is taken, listening on
        the earlier ones meanwhile (seen as up, a start kept a taken --tls-port on a loaded box)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return True
        try:
            connections = psutil.Process(self.proc.pid).net_connections("tcp")
        except psutil.NoSuchProcess:
            return True
        listening = {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}
        return bool(listening) and ports <= listening

    def start(self) -> RedisProcess:
        self.start_without_ping()
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class WorkerProcess:
    """``ragscore worker --queues ...`` as a real subprocess against ``broker_url``."""

    def __init__(self, broker_url: str, queues: str, home: Path, concurrency: int | None = None) -> None:
        self.args = [sys.executable, "-m", "orchestrator.cli", "worker", "--queues", queues]
        if concurrency:
            self.args += ["--concurrency", str(concurrency)]
        self.env = {**os.environ, "RAGSCORE_BROKER_URL": broker_url, "RAGSCORE_HOME": str(home)}
        self.proc: subprocess.Popen[bytes] | None = None

    def short_visibility(self, visibility_s: int) -> WorkerProcess:
        """This worker (not started), its messages back in their queue ``visibility_s`` after it vanished: a visibility
        timeout below the hard time limits, allowed for tests (their tasks take seconds)."""
        self.env["RAGSCORE_VISIBILITY_TIMEOUT_S"] = str(visibility_s)
        self.env["RAGSCORE_ALLOW_SHORT_VISIBILITY_TIMEOUT"] = "1"
        return self

    def start(self) -> WorkerProcess:
        self.proc = subprocess.Popen(self.args, env=self.env, cwd=ROOT, start_new_session=True)
        return self

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM (a warm stop); still there ``grace_s`` later (a task it waits for runs on), it is killed with every
        process under it: its Celery workers run in sessions of their own, which a kill of its group missed."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                kill_whole(self)


def soft_s_env(queue: str) -> str:
    """The variable that shortens ``queue``'s soft time limit in a test's worker (tests/short_limit_worker.py)."""
    return f"RAGSCORE_TEST_{queue.upper()}_SOFT_S"


def short_limit_worker(broker_url: str, queue: str, home: Path, soft_s: int, concurrency: int = 1) -> WorkerProcess:
    """The ``queue`` worker as ``ragscore worker`` starts it (its pool; ``concurrency`` threads or processes), started,
    its app's soft time limit of ``queue`` ``soft_s`` seconds (tests/short_limit_worker.py)."""
    worker = WorkerProcess(broker_url, queue, home)
    worker.args = worker_command(queue, concurrency)
    worker.args[worker.args.index("ragscore_workers.app")] = "tests.short_limit_worker"
    worker.env[soft_s_env(queue)] = str(soft_s)
    return worker.start()


def resume_in_cluster(run_id: str, broker_url: str, out: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """``ragscore resume RUN_ID --broker URL --out OUT --quiet`` (its RAGSCORE_HOME ``home``), run to its end."""
    cmd = [sys.executable, "-m", "orchestrator.cli", "resume", run_id, "--broker", broker_url, "--out", str(out),
           "--quiet"]  # fmt: skip
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)


def ragscore_worker(
    tmp_path: Path, server: RedisProcess, queue: str, *options: str, path: str | None = None
) -> tuple[subprocess.Popen[str], list[str]]:
    """``ragscore worker -Q queue -c 1 *options`` of ``server`` (``path``: its PYTHONPATH, None: this one's; its SIGINT
    at its default, :func:`interruptible`: a test may Ctrl-C it), and the list its stderr's lines are read into as they
    come."""
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "RAGSCORE_BROKER_URL": server.url}
    if path is not None:
        env["PYTHONPATH"] = path
    proc = interruptible([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", queue, "-c", "1", *options],
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    return proc, said


def kill_whole(worker: WorkerProcess) -> None:
    """kill -9 a ``ragscore worker`` and every process under it at once (its host lost): nothing is handed back.

    All are stopped (SIGSTOP) before any is killed: a Celery worker gets SIGTERM when its ``ragscore worker`` dies
    (:mod:`ragscore_workers.die_with_parent`), and one that ran before its own SIGKILL came began a clean stop and
    wrote its stopping key, so status read its held messages as finishing, not orphaned (a CI's serial pass, loaded)."""
    assert worker.proc is not None
    supervisor = psutil.Process(worker.proc.pid)
    whole = [supervisor, *supervisor.children(recursive=True)]
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        signal_each(whole, sig)
    worker.proc.wait(10)


def signal_each(procs: Iterable[psutil.Process], sig: int) -> None:
    """Send ``sig`` to each of ``procs`` that still runs: one that ended since it was listed is passed over."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(sig)


def command_line(proc: psutil.Process) -> list[str]:
    """``proc``'s command line; [] for a process that ended since it was listed (``children()``, ``process_iter``) or
    that nobody may read: a check over the processes found must not raise on one that just exited."""
    try:
        return proc.cmdline()
    except psutil.Error:  # NoSuchProcess (ZombieProcess with it), AccessDenied
        return []


def celery_workers(pid: int) -> list[psutil.Process]:
    """The Celery workers among the children of ``pid`` (a ``ragscore worker``, a run), picked by command line: a
    process may have other children than its workers (a sandbox, a watcher, ...)."""
    return [child for child in psutil.Process(pid).children() if "celery" in command_line(child)]


def worker_said(home: Path, text: str) -> bool:
    """Whether a log of the ``ragscore worker`` whose RAGSCORE_HOME is ``home`` says ``text``."""
    return any(text in p.read_text(errors="replace") for p in home.rglob("*.log"))


def tls_certificates(tmp: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with openssl."""
    ca_key, ca_crt, key, csr, crt = (tmp / n for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt"))
    ext = tmp / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\n")
    for cmd in (
        ["openssl", "req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", ca_key, "-out", ca_crt,
         "-days", "1", "-subj", "/CN=ragscore-test-ca"],
        ["openssl", "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", key, "-out", csr,
         "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-out", crt,
         "-days", "1", "-extfile", ext],
    ):  # fmt: skip
        subprocess.run([str(c) for c in cmd], check=True, capture_output=True)
    return {"ca": ca_crt, "key": key, "crt": crt}


class HookedProgress:
    """A progress view that shows nothing: it calls ``on_start(run_id)`` as a run's wait starts and
    ``on_update(counters)`` at each of its updates (a test's Ctrl-C, or its cancel from another shell, at that
    point)."""

    def __init__(
        self,
        on_start: Callable[[str], None] = lambda run_id: None,
        on_update: Callable[[dict[str, int]], None] = lambda counters: None,
    ) -> None:
        self.on_start, self.on_update = on_start, on_update

    def start(self, run_id: str) -> None:
        self.on_start(run_id)

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        self.on_update(counters)

    def stop(self) -> None:
        return None


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def users_files(directory: Path) -> dict[str, bytes]:
    """``directory`` made, holding a user's own files under report names (summary.json, items.csv) and one more:
    what it holds, name -> bytes, to check nothing was written over."""
    directory.mkdir()
    (directory / "summary.json").write_text('{"mine":1}')
    (directory / "items.csv").write_text("a,b\n1,2\n")
    (directory / "notes.txt").write_text("mine")
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def fingerprint_before_reader_versions(data: Path, fmt: str, package_version: str = "0.1.0") -> str:
    """The fingerprint of a one-file dataset the loaders recorded before they had a version (ragscore 0.1.0's, its
    package version digested, ``"?"`` where the package was not installed): written out here as it was, not asked of
    today's code."""
    from ragscore_workers.settings import get_settings

    digest = hashlib.blake2b(digest_size=16)
    digest.update(json.dumps([fmt, get_settings().max_field_chars, package_version]).encode())
    digest.update(data.read_bytes())
    return digest.hexdigest()


def make_rows(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Generated QA rows with answers, references and rankings (some lacking a gold id or reference)."""
    rng = random.Random(seed)
    words = ["paris", "tokyo", "mars", "jupiter", "homer", "1989", "oslo", "lima", "cairo", "gold"]
    rows = []
    for i in range(n):
        gold = f"d{rng.randrange(50)}"
        retrieved = rng.sample([f"d{j}" for j in range(50)], 5)
        reference = rng.choice(words)
        row: dict[str, Any] = {
            "id": f"q{i}",
            "question": f"question {i}?",
            "answer": reference if rng.random() < 0.5 else rng.choice(words),
            "reference": reference,
            "retrieved_doc_ids": retrieved,
            "gold_doc_id": gold,
            "group": rng.choice(["a", "b", "c"]),
            "question_type": rng.choice(["fact", "list"]),
        }
        if rng.random() < 0.05:
            del row["reference"]
        if rng.random() < 0.05:
            del row["gold_doc_id"]
        rows.append(row)
    return rows


def scores_by_id(items_path: Path) -> dict[str, dict[str, float | None]]:
    """``{id: {metric: score}}`` from an items.jsonl."""
    out = {}
    with items_path.open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            out[item["id"]] = {name: m["score"] for name, m in item["metrics"].items()}
    return out


def status_text(store: RunStore, run_id: str) -> str:
    """What `ragscore status`'s view of the run shows now (its meta, then a sample, as the status loop reads them)."""
    view = StatusView(store.meta(run_id))
    view.add(sample(store, run_id, time.time()))
    console = Console(record=True, width=250)
    console.print(view.render(run_id))
    return " ".join(console.export_text().split())


def stop_worker_command(proc: subprocess.Popen[str], timeout: float = 180) -> None:
    """Stops a ``ragscore worker`` started in its own session: SIGTERM, then its exit awaited (on a loaded machine
    its Celery processes may still be booting: they stop once up); past ``timeout`` its group is killed and the
    TimeoutExpired raised."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def reading_back_slowly(home: Path, *, rewrite: bool = False) -> EmbeddedRedis:
    """100,000 keys stored in the embedded Redis of ``home`` (``rewrite``: the append-only file rewritten, so they are
    in its base file, an RDB), the server shut down, then started as acquire() starts it but slowed down reading them
    back (Redis's own key-load-delay, 30 microseconds a key), as a server another run started."""
    first = EmbeddedRedis(home)
    first.acquire()
    try:
        pipe = first.client.pipeline(transaction=False)
        for i in range(100_000):
            pipe.set(f"ragscore:test:{i}", "x" * 100)
        pipe.execute()
        if rewrite:
            first.client.bgrewriteaof()
            assert until(lambda: not first.client.info("persistence")["aof_rewrite_in_progress"], 60)
            assert until(lambda: not first.client.info("persistence")["aof_rewrite_scheduled"], 60)
    finally:
        first.release()  # shut down (never left running on a failed assert); its data stays in the append-only file
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(first.socket) in " ".join(p.info["cmdline"] or [])]
    if rewrite:  # checked before the slow server starts: a failure here leaves no server running
        files = list((home / "redis" / "appendonlydir").iterdir())
        assert any(f.name.endswith(".base.rdb") for f in files), files
    # answering (LOADING) while it reads an RDB every 1 KB read, not every 2 MB: slowed down, it would not answer
    delays = ["--key-load-delay", "30", "--loading-process-events-interval-bytes", "1024"]
    subprocess.run([*first.server_args(), *delays], check=True, timeout=30)
    # its pidfile written (it daemonizes first: acquire() could come before it)
    assert until(lambda: first._server_pid() is not None, 30), "the server never wrote its pidfile"
    return first


def monitor_commands(r: redis.Redis, seen: list[str], until: str) -> threading.Thread:
    """Every command a client sends the server (MONITOR; not those a script runs), as text, into ``seen`` until
    ``ECHO until``: the commands sent before it are all read, however far the thread lags behind."""

    def watch() -> None:
        with r.monitor() as monitor:
            ready.set()
            while until not in (command := monitor.next_command())["command"]:
                if command["client_type"] != "lua":
                    seen.append(str(command["command"]))

    ready = threading.Event()
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    assert ready.wait(30)
    return thread
