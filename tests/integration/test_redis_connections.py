"""Redis as production has it: a password, TLS (rediss://), and a restart in the middle of a run."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.connection import (
    BACKEND_EVICTS,
    BACKEND_REDIS,
    STORE_REDIS,
    eviction_warnings,
    worker_eviction_warnings,
)
from orchestrator.progress import QuietProgress
from orchestrator.runner import connect, run, submit, wait, write_results
from orchestrator.suite import load_suite
from ragscore_workers.alive import ALIVE_INDEX, ALIVE_PREFIX, broker_of
from ragscore_workers.errors import BrokerError, ConfigError
from ragscore_workers.kept import kept_values
from ragscore_workers.settings import Settings, get_settings
from ragscore_workers.store import RunState, probe_redis, redis_client

from ..support import (
    RedisProcess,
    WorkerProcess,
    closed_port,
    make_rows,
    next_line,
    stop_worker_command,
    tls_certificates,
    until,
    write_jsonl,
)

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}], "chunk_size": {"cpu": 25}}
PASSWORD = "s3cret-Redis-pw"


def test_password_and_tls_broker_urls_work_and_the_password_is_never_written(tmp_path: Path) -> None:
    """``ssl_cert_reqs=CERT_REQUIRED`` (kombu's and Celery's spelling) works for the broker, the result backend and
    the run store alike: redis-py, the run store's client, refused it once ("Invalid SSL Certificate Requirements
    Flag"), and percent-encoded (``CERT%5FREQUIRED``) later still."""
    certs = tls_certificates(tmp_path)
    server = RedisProcess(
        tmp_path / "redis", "--port", "0", "--tls-cert-file", str(certs["crt"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no", "--requirepass", PASSWORD, tls=True,
    )  # fmt: skip
    server.start_without_ping()
    url = f"rediss://:{PASSWORD}@127.0.0.1:{server.tls_port}/0?ssl_cert_reqs=CERT_REQUIRED&ssl_ca_certs={certs['ca']}"
    # percent-encoded, it passed the URL's check (which decodes it) and redis-py got it as written, refused
    assert probe_redis(url.replace("CERT_REQUIRED", "CERT%5FREQUIRED")) is None
    worker = WorkerProcess(url, "cpu", tmp_path / "home", concurrency=1).start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(300, seed=2))
        summary = run(data, load_suite(SUITE), tmp_path / "out", broker=url, timeout_s=120)
        assert summary.state == RunState.FINISHED and summary.items == 300
        written = [p.read_text(errors="replace") for p in (tmp_path / "out").iterdir()]
        logs = [p.read_text(errors="replace") for p in (tmp_path / "home").rglob("*.log")]
        assert written and not any(PASSWORD in text for text in written + logs)
        # the worker's key saying it runs names its broker's server: its client of the broker connects as kombu does
        client = redis_client(url)
        server_id = broker_of(client).server
        assert server_id and until(
            lambda: any(s.get("server") == server_id for s in kept_values(client, ALIVE_PREFIX, ALIVE_INDEX)), 30
        )

        wrong = url.replace(PASSWORD, "wrong-password")
        with pytest.raises(BrokerError, match=r"Cannot use Redis at rediss://:\*\*\*@127.0.0.1") as info:
            connect(wrong)
        assert "wrong-password" not in str(info.value)
    finally:
        worker.stop()
        server.stop()


def test_the_tests_tls_redis_takes_other_ports_when_its_tls_port_was_taken(tmp_path: Path) -> None:
    """The TLS tests' Redis retried a port taken between free_port() and its bind only for --port: one taken
    --tls-port failed the test (another test's server took it on a loaded box)."""
    certs = tls_certificates(tmp_path)
    server = RedisProcess(
        tmp_path / "redis", "--tls-cert-file", str(certs["crt"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no", tls=True,
    )  # fmt: skip
    taken = server.tls_port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        try:
            server.start_without_ping()
            assert server.tls_port != taken
            tls = f"rediss://127.0.0.1:{server.tls_port}/0?ssl_cert_reqs=required&ssl_ca_certs={certs['ca']}"
            assert probe_redis(tls) is None
        finally:
            server.stop()


def test_a_redis_restart_mid_run_with_aof_finishes_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSCORE_STALL_S", "5")  # what AOF's last second lost is re-submitted
    server = RedisProcess(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "everysec").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=2).short_visibility(5)
    worker.start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(6000, seed=4))
        store = connect(server.url)
        sub = submit(data, load_suite(SUITE), store)
        deadline = time.monotonic() + 60
        while store.progress(sub.run_id).get("done", 0) < 3000 and time.monotonic() < deadline:
            time.sleep(0.02)
        server.stop()  # SIGTERM: Redis flushes its AOF and exits
        time.sleep(2)
        server.start()  # same port, same data dir: the AOF is replayed
        summary = wait(store, sub.run_id, timeout_s=240)
        assert summary.state == RunState.FINISHED
        write_results(store, sub.run_id, tmp_path / "out")
        ids = [json.loads(x)["id"] for x in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
        assert ids == [f"q{i}" for i in range(6000)]
        assert store.progress(sub.run_id)["done"] == 6000 * 4
    finally:
        worker.stop()
        server.stop()


class _OutageView(QuietProgress):
    """A progress view that keeps the seconds of outage ``wait`` tells it (left out of its rate's gaps)."""

    def __init__(self) -> None:
        self.told: list[float] = []
        self.updates = 0

    def update(self, counters: dict[str, int], final: bool = False) -> None:
        self.updates += 1

    def outage(self, seconds: float) -> None:
        self.told.append(seconds)


def test_the_orchestrator_waits_through_a_redis_outage_longer_than_its_client_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """... and tells its progress view how long Redis did not answer, once it answers again: no part of the run's pace
    (the view leaves it out of the gaps between chunks: test_progress)."""
    view = _OutageView()
    server = RedisProcess(tmp_path / "redis", "--appendonly", "yes").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        store = connect(server.url)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(300)), load_suite(SUITE), store)
        result: dict = {}
        thread = threading.Thread(target=lambda: result.update(s=wait(store, sub.run_id, timeout_s=600, progress=view)),
                                  daemon=True)  # fmt: skip
        thread.start()
        assert until(lambda: view.updates > 0, 120), "wait() never polled the run"
        server.stop()  # Redis goes away while the orchestrator waits (no worker yet: nothing is done), for
        # longer than the store client's own retries (~21 s from the poll's first failed call): until wait() says it
        # lost Redis, which it does only once they gave up (a fixed sleep raced them), and a poll or more after that
        down_at = time.monotonic()  # no poll of wait() is answered from here to the restart
        lost = f"run {sub.run_id}: lost Redis"
        assert until(lambda: any(lost in r.getMessage() for r in caplog.records), 180), "wait() never lost Redis"
        thread.join(5.0)
        assert thread.is_alive(), "wait() gave up once its client's retries did"
        assert not view.told, "told while Redis is still down"
        down_s = time.monotonic() - down_at
        server.start()
        worker.start()
        thread.join(600)
        assert not thread.is_alive() and result["s"].items == 300
        assert store.progress(sub.run_id)["done"] == 300 * 4
        # the whole outage, its client's retries of the first failed read included: no poll was answered meanwhile
        assert len(view.told) == 1 and view.told[0] >= down_s, (view.told, down_s)
    finally:
        worker.stop()
        server.stop()


def test_tls_mistakes_are_named_by_what_to_change(tmp_path: Path) -> None:
    """A CA file missing here, a certificate not signed by the CA given, and TLS on one side only said "No such
    file or directory", "Timeout connecting" or "Connection reset", after 20 s or more of retries."""
    certs = tls_certificates(tmp_path)
    (tmp_path / "other").mkdir()
    other_ca = tls_certificates(tmp_path / "other")["ca"]  # a CA that did not sign the server's certificate
    server = RedisProcess(
        tmp_path / "redis", "--tls-cert-file", str(certs["crt"]), "--tls-key-file", str(certs["key"]),
        "--tls-ca-cert-file", str(certs["ca"]), "--tls-auth-clients", "no", tls=True,
    ).start_without_ping()  # fmt: skip
    tls = f"rediss://127.0.0.1:{server.tls_port}/0?ssl_cert_reqs=required&ssl_ca_certs="
    try:
        with pytest.raises(ConfigError, match="ssl_ca_certs=/no/such/ca.pem names no file on"):
            probe_redis(tls + "/no/such/ca.pem")
        with pytest.raises(BrokerError, match="its TLS certificate was not accepted .*ssl_ca_certs must name the CA"):
            probe_redis(tls + str(other_ca))
        assert probe_redis(tls + str(certs["ca"])) is None
        plain_to_tls = probe_redis(f"redis://127.0.0.1:{server.tls_port}/0")
        assert plain_to_tls and "its URL is rediss://" in plain_to_tls
        tls_to_plain = probe_redis(f"rediss://127.0.0.1:{server.port}/0?ssl_cert_reqs=none")
        assert tls_to_plain and "its URL is redis://, not rediss://" in tls_to_plain
    finally:
        server.stop()


@pytest.mark.serial  # timed: at once, not after the ~20 s of retries of a Redis down
def test_a_wrong_password_fails_at_once(tmp_path: Path) -> None:
    server = RedisProcess(tmp_path / "redis", "--requirepass", PASSWORD).start_without_ping()
    try:
        started = time.monotonic()
        with pytest.raises(BrokerError, match="check the password"):
            connect(f"redis://:wrong@127.0.0.1:{server.port}/0")
        assert time.monotonic() - started < 15, "not retried ~20 s as if Redis were down"
    finally:
        server.stop()


def _acl_redis(tmp_path: Path, users: list[str], *args: str) -> RedisProcess:
    """A redis-server (not started) with these ACL users (``"name on >pw ~keys &* +@all"``, one string each)."""
    return RedisProcess(tmp_path / "redis", *args, *(a for u in users for a in ("--user", *u.split())))


def _ragscore(*args: str, home: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    """``ragscore ARGS`` in a process of its own, as a user runs it (``env_vars`` added to its environment)."""
    import os
    import sys

    from ..support import ROOT

    env = {**os.environ, "RAGSCORE_HOME": str(home), **env_vars}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60)  # fmt: skip


def _resolver_says_no_such_name(host: str) -> bool:
    """Whether this machine's resolver answers that ``host`` does not exist (one without DNS says "try again")."""
    import socket

    try:
        socket.getaddrinfo(host, 6379)
    except socket.gaierror as exc:
        return exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))
    return False


@pytest.mark.serial  # timed: at once, not after the ~20 s of retries of a Redis down
def test_a_database_redis_refuses_fails_at_once_as_bad_input(tmp_path: Path) -> None:
    """``/99`` on a Redis of 16 databases was retried ~20 s as a Redis restarting (exit 1)."""
    server = RedisProcess(tmp_path / "redis", "--requirepass", PASSWORD).start_without_ping()
    bad_db = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/99"
    shown = f"redis://:***@127.0.0.1:{server.port}/99"
    try:
        started = time.monotonic()
        with pytest.raises(ConfigError, match="database 99") as refused:
            connect(bad_db)
        assert time.monotonic() - started < 15, "not retried ~20 s as if Redis were down"
        assert shown in str(refused.value) and PASSWORD not in str(refused.value)
        for command in (["worker", "-Q", "cpu"], ["status"]):
            said = _ragscore(*command, "--broker", bad_db, home=tmp_path / "home")
            assert said.returncode == 2, said.stderr
            assert shown in said.stderr and "database 99" in said.stderr and PASSWORD not in said.stderr
    finally:
        server.stop()


def test_a_broker_apart_from_the_store_is_probed_too_and_named_in_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With RAGSCORE_STORE_URL on a Redis of its own, connect() probed only the store's: a broker database Redis
    refuses, or a broker that does not answer, passed, and failed later, less clearly (in Celery's first send).
    Both are probed now, each error naming which Redis it is."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 2.0)  # the retries of a broker that does not answer, short
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker", "--requirepass", PASSWORD).start_without_ping()
    settings = get_settings().model_copy(update={"store_url": store_server.url})
    try:
        with pytest.raises(ConfigError, match="database 99") as refused:
            connect(f"redis://:{PASSWORD}@127.0.0.1:{broker.port}/99", settings, sends=True)
        said = str(refused.value)
        assert said.startswith(f"Cannot use the broker's Redis at redis://:***@127.0.0.1:{broker.port}/99"), said
        with closed_port() as port, pytest.raises(BrokerError) as unreachable:
            connect(f"redis://127.0.0.1:{port}/0", settings, sends=True)
        assert str(unreachable.value).startswith("Cannot use the broker's Redis at redis://127.0.0.1:"), unreachable
        bad_store = settings.model_copy(update={"store_url": f"redis://:{PASSWORD}@127.0.0.1:{broker.port}/98"})
        with pytest.raises(ConfigError, match="database 98") as store_refused:
            connect(store_server.url, bad_store, sends=True)
        assert str(store_refused.value).startswith("Cannot use the run store's Redis (RAGSCORE_STORE_URL) at ")
        assert connect(f"redis://:{PASSWORD}@127.0.0.1:{broker.port}/1", settings, sends=True).state("none") == ""
    finally:
        broker.stop()
        store_server.stop()


def test_a_redis_that_may_evict_is_warned_of_once_per_server(tmp_path: Path) -> None:
    """The store and the broker in two databases of one evicting Redis were warned of twice, as if two servers: its
    maxmemory-policy is the server's. Said once (by the store's user, else the broker's where only it may run INFO);
    a broker on another server is its own."""
    import redis

    evicting = ("--maxmemory-policy", "allkeys-lru", "--maxmemory", "1gb")
    server = RedisProcess(tmp_path / "one", *evicting).start()
    other = RedisProcess(tmp_path / "other", *evicting).start()
    store_url, broker_url = f"redis://127.0.0.1:{server.port}/0", f"redis://127.0.0.1:{server.port}/1"
    settings = get_settings().model_copy(update={"store_url": store_url})

    def warned_of(broker: str, settings: Settings) -> list[str]:
        """The URLs of the Redis servers a run sent to ``broker`` is warned of."""
        said = eviction_warnings(connect(broker, settings, sends=True), broker, settings)
        return [text.split(": its maxmemory-policy is allkeys-lru, not noeviction")[0] for text in said]

    try:
        assert warned_of(broker_url, settings) == [f"the Redis at {store_url}"]
        redis.Redis(port=server.port).acl_setuser(
            "no-info", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"], commands=["+@all", "-info"]
        )
        refused = settings.model_copy(update={"store_url": f"redis://no-info:pw@127.0.0.1:{server.port}/0"})
        assert warned_of(broker_url, refused) == [f"the Redis at {broker_url}"]
        apart = f"redis://127.0.0.1:{other.port}/0"
        assert warned_of(apart, settings) == [f"the Redis at {store_url}", f"the Redis at {apart}"]
    finally:
        other.stop()
        server.stop()


def test_a_result_backend_on_its_own_redis_is_checked_for_eviction(tmp_path: Path) -> None:
    """RAGSCORE_RESULT_BACKEND on another server than the broker and the store holds Celery's chord counters: one
    that evicts (allkeys-lru) lost them under memory pressure and the run's aggregate never fired, without a word
    (only the store's and the broker's Redis were checked). It is warned of by name, its password hidden; not where
    it never evicts or its user may not run INFO; on the broker's server in another database, said once."""
    import redis

    evicting = ("--maxmemory-policy", "allkeys-lru", "--maxmemory", "1gb")
    broker = RedisProcess(tmp_path / "broker").start()
    backend = RedisProcess(tmp_path / "backend", "--requirepass", PASSWORD, *evicting).start_without_ping()
    backend_url = f"redis://:{PASSWORD}@127.0.0.1:{backend.port}/0"

    def warned_of(broker_url: str, result_backend: str) -> list[str]:
        settings = get_settings().model_copy(update={"result_backend": result_backend})
        return eviction_warnings(connect(broker_url, settings, sends=True), broker_url, settings)

    try:
        said = warned_of(broker.url, backend_url)
        redacted = f"redis://:***@127.0.0.1:{backend.port}/0"
        assert [s.split(": its")[0] for s in said] == [f"{BACKEND_REDIS} at {redacted}"], said
        assert "maxmemory-policy is allkeys-lru, not noeviction" in said[0] and PASSWORD not in said[0], said
        assert f"it evicts {BACKEND_EVICTS}; set maxmemory-policy noeviction" in said[0], said  # what it costs there
        admin = redis.Redis(port=backend.port, password=PASSWORD)
        admin.acl_setuser("no-info", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                          commands=["+@all", "-info"])  # fmt: skip
        assert warned_of(broker.url, f"redis://no-info:pw@127.0.0.1:{backend.port}/0") == []
        admin.config_set("maxmemory-policy", "noeviction")
        assert warned_of(broker.url, backend_url) == []
        redis.Redis(port=broker.port).config_set("maxmemory-policy", "allkeys-lru")
        redis.Redis(port=broker.port).config_set("maxmemory", "1gb")
        said = warned_of(broker.url, f"redis://127.0.0.1:{broker.port}/1")  # the broker's server: said once
        assert [s.split(": its")[0] for s in said] == [f"the Redis at {broker.url}"], said
        beside = f"in {BACKEND_REDIS} at redis://127.0.0.1:{broker.port}/1, {BACKEND_EVICTS}; set maxmemory-policy"
        assert beside in said[0], said  # its own cost, not the broker's alone
    finally:
        backend.stop()
        broker.stop()


def test_ragscore_worker_checks_the_run_stores_redis_for_eviction_and_closes_its_checks(tmp_path: Path) -> None:
    """`ragscore worker` checked the broker's Redis and the result backend's, not RAGSCORE_STORE_URL's on another
    server, where its workers write every result: one that evicts lost them without a word. It is warned of, each
    server once, and the worker's supervisor keeps no connection of its checks open."""
    import redis

    evicting = ("--maxmemory-policy", "allkeys-lru", "--maxmemory", "1gb")
    broker, store = RedisProcess(tmp_path / "broker").start(), RedisProcess(tmp_path / "store", *evicting).start()
    backend = RedisProcess(tmp_path / "backend", *evicting).start()
    store_url = f"redis://127.0.0.1:{store.port}/0"
    settings = get_settings().model_copy(update={"store_url": store_url, "result_backend": backend.url})
    admins = [redis.Redis(port=server.port, client_name="admin") for server in (broker, store, backend)]

    def warned_of(settings: Settings, *, broker_answered: bool = True) -> list[str]:
        said = worker_eviction_warnings(broker.url, settings, broker=broker_answered, store=True, backend=True)
        return [text.split(": its maxmemory-policy is allkeys-lru")[0] for text in said]

    try:
        both = [f"the Redis at {store_url}", f"{BACKEND_REDIS} at {backend.url}"]
        assert warned_of(settings) == both
        assert warned_of(settings, broker_answered=False) == both  # the store apart: checked all the same
        beside = settings.model_copy(update={"result_backend": f"redis://127.0.0.1:{store.port}/1"})
        assert warned_of(beside) == [f"the Redis at {store_url}"]  # the store's server: said once
        said = worker_eviction_warnings(broker.url, beside, broker=True, store=True, backend=True)
        assert f"{BACKEND_REDIS} at {beside.result_backend}, {BACKEND_EVICTS}" in said[0], said  # with its cost
        for admin in admins:  # each check's client closed: only the admin's connection left
            assert until(lambda a=admin: [c["name"] for c in a.client_list()] == ["admin"], 60), admin.client_list()
    finally:
        backend.stop()
        store.stop()
        broker.stop()


def test_localhost_and_127_0_0_1_on_one_port_are_one_redis_in_status_errors(tmp_path: Path) -> None:
    """RAGSCORE_STORE_URL at 127.0.0.1 and --broker at localhost on the same port were told apart as two servers:
    the error of the one Redis named "the run store's Redis (RAGSCORE_STORE_URL)", as if the broker were another.
    localhost on the port is one server with 127.0.0.1; [::1] is another address (this server listens on 127.0.0.1
    only), another port another server."""
    server = RedisProcess(tmp_path / "redis").start()
    store_url = f"redis://127.0.0.1:{server.port}/99"  # a database it lacks: said at once, no retries
    apart = "the run store's Redis (RAGSCORE_STORE_URL)"
    with closed_port() as port:
        try:
            for broker, named in ((f"redis://localhost:{server.port}/99", "Redis"),
                                  (f"redis://[::1]:{server.port}/99", apart),
                                  (f"redis://127.0.0.1:{port}/99", apart)):  # fmt: skip
                said = _ragscore("status", "--broker", broker, home=tmp_path / "home", RAGSCORE_STORE_URL=store_url)
                assert said.returncode == 2, said.stderr
                text = " ".join(said.stderr.split())
                assert text.startswith(f"Error: Cannot use {named} at {store_url}: "), (broker, text)
                assert "database 99" in text, text
        finally:
            server.stop()


def test_urls_of_one_database_written_two_ways_are_one_database_and_another_database_is_its_own(
    tmp_path: Path,
) -> None:
    """connect() compared the broker's and the store's URLs as text: ``redis://localhost:P`` and
    ``redis://127.0.0.1:P/0`` (no database: 0) were two databases, read through two clients, the broker's probed
    again. What they address is compared now; another database of the same server is still its own (its queues read
    there, a database the server lacks refused), though not a Redis apart (one server: named "Redis")."""
    import redis

    server = RedisProcess(tmp_path / "redis").start()
    store_url = f"redis://127.0.0.1:{server.port}/0"
    settings = get_settings().model_copy(update={"store_url": store_url})
    try:
        for broker in (
            f"redis://localhost:{server.port}",
            f"redis://127.0.0.1:{server.port}?db=0",
            f"redis://LOCALHOST:{server.port}/0",
        ):  # not [::1]: another address, apart
            store = connect(broker, settings, sends=True)
            assert store.broker is store.r and not store.broker_apart, broker
        redis.Redis(port=server.port, db=1).rpush("cpu", "waiting")  # a message on the broker's database only
        other = connect(f"redis://localhost:{server.port}/1", settings, sends=True)
        assert other.broker is not other.r and not other.broker_apart
        assert (other.broker.llen("cpu"), other.r.llen("cpu")) == (1, 0)
        with pytest.raises(ConfigError, match="database 99") as refused:
            connect(f"redis://localhost:{server.port}/99", settings, sends=True)
        assert str(refused.value).startswith(f"Cannot use Redis at redis://localhost:{server.port}/99"), refused
    finally:
        server.stop()


def test_urls_of_one_database_with_two_users_credentials_are_two_clients_each_probed(tmp_path: Path) -> None:
    """Two URLs of one database with another user's credentials (Redis ACL users) were one database to connect(): the
    broker's password was never probed (a wrong one failed later, in Celery's first send) and the store's client,
    logged in as the store's user, read the broker's queues, which that user may not read (status, cancel failed).
    The user and the password are part of what makes two URLs one."""
    import redis

    users = ["default off", "broker on >broker-pw ~* &* +@all", "store on >store-pw ~ragscore:* &* +@all"]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    settings = get_settings().model_copy(update={"store_url": f"redis://store:store-pw@{base}"})
    try:
        store = connect(f"redis://broker:broker-pw@{base}", settings, sends=True)
        assert store.broker is not store.r and not store.broker_apart  # one server, two users
        assert (store.broker.acl_whoami(), store.r.acl_whoami()) == ("broker", "store")
        assert store.broker.llen("embed") == 0  # the store's user may not read the broker's queues
        with pytest.raises(redis.exceptions.NoPermissionError):
            store.r.llen("embed")
        with pytest.raises(BrokerError, match=f"at redis://broker:\\*\\*\\*@{base}") as refused:
            connect(f"redis://broker:wrong-pw@{base}", settings, sends=True)
        assert "wrong-pw" not in str(refused.value)
        same = connect(f"redis://store:store-pw@localhost:{server.port}", settings)  # as broker it may not queue
        assert same.broker is same.r  # one user of one database, written two ways
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("password", "db", "refused", "exit_code"),
    [("wrong-pw", 0, "(check the password in the URL)", 1), ("broker-pw", 99, "has no database 99", 2)],
    ids=["another-acl-user-wrong-password", "another-database-it-lacks"],
)
def test_status_cancel_and_results_probe_a_broker_on_the_store_server_as_another_user_or_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str, db: int, refused: str, exit_code: int
) -> None:
    """A broker on the run store's server, as another ACL user or in another database, was probed only by commands
    that send work: `status RUN` and `cancel RUN` (and `results` of a cancelled run) read its queues through a client
    that retried a wrong password ~20 s, then failed with redis-py's raw AuthenticationError (a database the server
    lacks: its raw ResponseError). Each says run's clear error now, the password hidden; cancel before cancelling."""
    from orchestrator.runner import cancel

    users = ["default off", "broker on >broker-pw ~* &* +@all", "store on >store-pw ~ragscore:* &* +@all"]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}"
    store_url = f"redis://store:store-pw@{base}/0"
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_url)
    bad, shown = f"redis://broker:{password}@{base}/{db}", f"redis://broker:***@{base}/{db}"
    home, env = tmp_path / "home", {"RAGSCORE_STORE_URL": store_url, "RAGSCORE_BROKER_URL": bad}
    try:
        store = connect(f"redis://broker:broker-pw@{base}/0", get_settings(), sends=True)
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), load_suite(SUITE), store).run_id
        for command in (["status", run_id], ["cancel", run_id]):
            said = _ragscore(*command, home=home, **env)
            text = " ".join(said.stderr.split())
            assert said.returncode == exit_code, (command, text)
            assert text.startswith(f"Error: Cannot use Redis at {shown}: ") and refused in text, (command, text)
            assert "-pw" not in text, text
        assert store.state(run_id) == RunState.RUNNING  # refused before it cancelled
        cancel(store, run_id)  # cancelled with the right broker; its summary not written yet
        said = _ragscore("results", run_id, "--out", str(tmp_path / "out"), home=home, **env)
        text = " ".join(said.stderr.split())
        assert said.returncode == exit_code, text
        assert text.startswith(f"Error: Cannot use the broker's Redis at {shown}: ") and refused in text, text
        assert f"Run {run_id} is cancelled" in text and "-pw" not in text, text
    finally:
        server.stop()


def test_users_without_permission_on_ragscores_keys_are_refused_at_once_naming_what_they_lack(tmp_path: Path) -> None:
    """An ACL user with the right password and no permission on ragscore's keys (``~other:*``) passed the probe:
    `status RUN` then failed with redis-py's raw NoPermissionError (``LLEN cpu ... no permissions``), and a run
    failed late. The broker's user and the store's are each refused at once (ConfigError, exit 2), saying which
    user, what it may not run and the ACL rule it needs, the password hidden; nothing is queued or written."""
    import redis

    users = ["default off", "good on >good-pw ~* &* +@all", "broker on >broker-pw ~other:* &* +@all",
             "store on >store-pw ~other:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, broker, store_user = (f"redis://{u}:{u}-pw@{base}" for u in ("good", "broker", "store"))
    home = tmp_path / "home"
    try:
        store = connect(good, get_settings(), sends=True)
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), load_suite(SUITE), store).run_id
        queued = store.r.llen("cpu")
        broker_said = {"status": "LLEN control, LRANGE control, HGET unacked", "cancel": "LPUSH control, BRPOP control"}
        for command in (["status", run_id], ["cancel", run_id]):  # status reads the queues; cancel may send there
            said = _ragscore(*command, home=home, RAGSCORE_BROKER_URL=broker, RAGSCORE_STORE_URL=good)
            text = " ".join(said.stderr.split())
            assert said.returncode == 2, (command, text)
            said_first = f"Error: Cannot use Redis at redis://broker:***@{base}: its ACL user 'broker' may not run "
            assert text.startswith(said_first + broker_said[command[0]]), text
            assert "no permissions" in text and "ACL SETUSER broker ~* &* +@all" in text and "-pw" not in text, text
        with pytest.raises(ConfigError, match="its ACL user .broker. may not run LPUSH control, BRPOP control"):
            connect(broker, get_settings(), sends=True)  # its store the broker's user too
        said = _ragscore("status", run_id, home=home, RAGSCORE_BROKER_URL=good, RAGSCORE_STORE_URL=store_user)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2, text
        assert text.startswith(
            f"Error: Cannot use Redis at redis://store:***@{base}: its ACL user 'store' may not run HGET ragscore:run:"
        ), text
        assert "ACL SETUSER store ~ragscore:* &* +@all" in text and "-pw" not in text, text
        assert store.state(run_id) == RunState.RUNNING and store.r.llen("cpu") == queued  # refused before cancelling
        assert redis.Redis.from_url(good).keys("*acl-probe*") == []  # the probe's commands were discarded, never run
    finally:
        server.stop()


def test_users_that_may_only_read_still_run_status_and_report_and_a_worker_is_checked_for_its_queues(
    tmp_path: Path,
) -> None:
    """The permission probe queued a writing command of each kind inside MULTI for every command: a run store user
    and a broker user that may only read (``+@read``, which has no MULTI) were refused by `status RUN` and `report
    RUN`, which only read and worked with them before the probe; a user that may open MULTI and not write
    (``-@write``) tells the probe's reading roles from its writing ones. `ragscore worker` only pinged its broker: a
    user with no permission on its queues started workers that failed on every poll. It is refused at once now."""
    import os
    import sys

    from ..support import ROOT

    users = ["default off", "good on >good-pw ~* &* +@all", "reader on >reader-pw ~* &* +@read +time +ping",
             "nowrite on >nowrite-pw ~* &* +@all -@write", "other on >other-pw ~other:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    good, reader, nowrite, other = (f"redis://{u}:{u}-pw@127.0.0.1:{server.port}/0"
                                    for u in ("good", "reader", "nowrite", "other"))  # fmt: skip
    home = tmp_path / "home"
    worker = WorkerProcess(good, "cpu", home, concurrency=1).start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
        run_id = run(data, load_suite(SUITE), tmp_path / "out", broker=good, timeout_s=120).run_id
        for user in (reader, nowrite):
            out = tmp_path / "md" / user.split(":")[1].lstrip("/")
            for command in (["status", run_id], ["report", run_id, "--format", "md", "--out", str(out)]):
                said = _ragscore(*command, home=home, RAGSCORE_BROKER_URL=user, RAGSCORE_STORE_URL=user)
                assert said.returncode == 0, (user, command, said.stderr)
            assert (out / "report.md").is_file()
        with pytest.raises(ConfigError, match="its ACL user 'nowrite' may not run LPUSH control"):
            connect(nowrite, get_settings(), sends=True)  # the writing roles refuse it
        refused = subprocess.run([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "--broker", other],
                                 capture_output=True, text=True, cwd=ROOT, timeout=60,
                                 env={**os.environ, "RAGSCORE_HOME": str(home)})  # fmt: skip
        text = " ".join(refused.stderr.split())
        assert refused.returncode == 2, text
        assert "its ACL user 'other' may not run LPUSH cpu" in text and "other-pw" not in text, text
    finally:
        worker.stop()
        server.stop()


def test_the_permission_probe_refuses_only_what_redis_refuses_for_want_of_permission(tmp_path: Path) -> None:
    """A command the server would not queue for another reason (EVAL renamed away; another arity on a
    Redis-compatible server) refused every user, naming an "unknown command" as a permission it lacked; and a
    worker's user was checked for every queue, not its own, as a run's was (a user limited to the queues its
    cluster serves ran them before the probe). Only NOPERM refuses; the probe leaves no MULTI open
    on the client's connections, whatever it found. A user allowed a queue's own list (``~cpu``) and not kombu's
    priority lists (``cpu\\x06\\x163``) passed, then failed on them: it is refused."""
    import redis

    from ragscore_workers.acl import BROKER, STORE, broker_role, lacking

    users = ["default on nopass ~* &* +@all", "cpu on >cpu-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* &* +@all",
             "exact on >exact-pw ~cpu ~control ~_kombu.* ~unacked* ~celery-* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users, "--rename-command", "EVAL", "").start_without_ping()
    cpu = f"redis://cpu:cpu-pw@127.0.0.1:{server.port}/0"
    try:
        with pytest.raises(ConfigError, match=r"its ACL user 'exact' may not run LLEN cpu\\x06\\x169, "):
            probe_redis(f"redis://exact:exact-pw@127.0.0.1:{server.port}/0", roles=(broker_role(["cpu"]),))
        assert probe_redis(server.url, roles=(BROKER, STORE)) is None  # EVAL unknown: not a permission it lacks
        assert probe_redis(cpu, roles=(broker_role(["cpu"]),)) is None
        assert probe_redis(cpu, roles=(BROKER,)) is None  # a run's send: not every queue's
        with pytest.raises(ConfigError, match="its ACL user 'cpu' may not run LPUSH embed"):
            probe_redis(cpu, roles=(broker_role(["embed"]),))
        client = redis.Redis.from_url(cpu)
        for _ in range(2):  # refused, then a pooled connection reused: each command runs, none is QUEUED
            assert lacking(client, (STORE,)).startswith("its ACL user 'cpu' may not run HSET ragscore:run:")
            assert client.lpush("cpu", "x") == 1 and client.lpop("cpu") == b"x"
        client.close()
    finally:
        server.stop()


def test_commands_that_write_the_store_refuse_a_user_that_may_only_read_at_once(tmp_path: Path) -> None:
    """`results` (EVALSHA: where the reports are) and `cancel` (which writes the run's state, and may send its
    aggregation) were checked for reading alone: a user that may only read passed, then failed with redis-py's raw
    NoPermissionError. Each refuses it at once now (exit 2), naming the user, what it may not run (MULTI, for one
    that may not open it) and the rule, the password hidden. `status` lists the runs for such a user (it failed on
    the runs' index, ZADD, which only a user that may write keeps, then was refused for it)."""
    users = ["default off", "good on >good-pw ~* &* +@all", "reader on >reader-pw ~* &* +@read +time +ping",
             "nowrite on >nowrite-pw ~* &* +@all -@write"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    home = tmp_path / "home"
    try:
        store = connect(f"redis://good:good-pw@{base}", get_settings(), sends=True)
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), load_suite(SUITE), store).run_id
        writes = {"results": "HSET ragscore:run:", "cancel": "LPUSH control"}
        for name in ("reader", "nowrite"):
            user = f"redis://{name}:{name}-pw@{base}"
            listed = _ragscore("status", home=home, RAGSCORE_BROKER_URL=user, RAGSCORE_STORE_URL=user)
            assert listed.returncode == 0 and run_id in listed.stdout, (name, listed.stderr)  # the index left as is
            for command in (["results", run_id, "--out", str(tmp_path / name)], ["cancel", run_id]):
                said = _ragscore(*command, home=home, RAGSCORE_BROKER_URL=user, RAGSCORE_STORE_URL=user)
                text = " ".join(said.stderr.split())
                lacked = "MULTI" if name == "reader" else writes[command[0]]  # the reader may not open a MULTI
                assert said.returncode == 2, (name, command, text)
                assert text.startswith(f"Error: Cannot use Redis at redis://{name}:***@{base}: its ACL user '{name}' "
                                       f"may not run {lacked}"), (name, command, text)  # fmt: skip
                assert "no permissions" in text and f"ACL SETUSER {name} " in text, text
                assert f"{name}-pw" not in text, text
        assert store.state(run_id) == RunState.RUNNING  # refused before it cancelled
    finally:
        server.stop()


def test_a_runs_broker_user_is_checked_for_the_queues_of_its_suite_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker user limited to the queues its cluster serves (here cpu) passed the check of what every run needs,
    then a run, a submit or a resume whose suite needs another queue (embed) failed late, on its first send there,
    with redis-py's raw NoPermissionError. Each is refused at once now (exit 2), naming the queue, before anything of
    the run is sent or recorded; a run needing only its queues still goes."""
    import re

    from orchestrator.connection import check_queues
    from orchestrator.runner import cancel

    users = [  # cpu: its queues, kombu's keys, Celery's results and remote control replies
        "default off",
        "good on >good-pw ~* &* +@all",
        "cpu on >cpu-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~*.reply.celery.pidbox* &* +@all",
    ]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, cpu = f"redis://good:good-pw@{base}", f"redis://cpu:cpu-pw@{base}"
    embed = {"metrics": ["exact_match", "answer_correctness"], "chunk_size": {"cpu": 25}}
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    refused = f"Cannot use Redis at redis://cpu:***@{base}: its ACL user 'cpu' may not run LPUSH embed"
    monkeypatch.setenv("RAGSCORE_STORE_URL", good)
    env = {"RAGSCORE_STORE_URL": good, "RAGSCORE_BROKER_URL": cpu}
    home, suite = tmp_path / "home", tmp_path / "suite.json"
    suite.write_text(json.dumps(embed))
    try:
        store = connect(good, get_settings(), sends=True)
        with pytest.raises(ConfigError, match=re.escape(refused)):
            run(data, load_suite(embed), tmp_path / "out", broker=cpu, timeout_s=60)
        said = _ragscore("submit", str(data), "--suite", str(suite), home=home, **env)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and text.startswith(f"Error: {refused}"), text
        assert "cpu-pw" not in text, text
        assert store.list_runs() == [] and store.r.keys("embed") == [] and store.r.llen("cpu") == 0  # nothing sent
        store = connect(good, get_settings(), sends=True)  # the Celery app's broker again, not the refused run's
        run_id = submit(data, load_suite(embed), store).run_id  # sent as the good user, then cancelled
        cancel(store, run_id)
        waiting = store.r.llen("embed")
        said = _ragscore("resume", run_id, "--out", str(tmp_path / "resumed"), home=home, **env)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and f"Error: {refused}" in text, text
        assert store.state(run_id) == RunState.CANCELLED and store.r.llen("embed") == waiting  # nothing sent again
        check_queues(connect(cpu, get_settings(), sends=True), cpu, ["cpu"])  # its own queues: it goes
    finally:
        server.stop()


def test_a_result_backend_user_apart_from_the_brokers_is_checked_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RAGSCORE_RESULT_BACKEND's user (another user and database than the broker's) was never checked: one that may
    not write Celery's chord counters and results let a run start and fail on its first shard's send with redis-py's
    raw NoPermissionError (DEL celery-taskset-meta-...). run and submit now refuse it at once (exit 2), naming the
    user, the commands and the rule, before anything is recorded; a backend user with its keys goes."""
    import re

    users = ["default off", "good on >good-pw ~* &* +@all", "results on >results-pw ~other:* &* +@all",
             "celery on >celery-pw ~celery-* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}"
    good, results = f"redis://good:good-pw@{base}/0", f"redis://results:results-pw@{base}/1"
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    refused = (f"Cannot use the result backend's Redis (RAGSCORE_RESULT_BACKEND) at redis://results:***@{base}/1: its "
               "ACL user 'results' may not run DEL celery-taskset-meta-acl-probe.c, ")  # fmt: skip
    monkeypatch.setenv("RAGSCORE_RESULT_BACKEND", results)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    try:
        with pytest.raises(ConfigError, match=re.escape(refused)):
            run(data, load_suite(SUITE), tmp_path / "out", broker=good, timeout_s=60)
        said = _ragscore("submit", str(data), "--suite", str(suite), home=tmp_path / "home", RAGSCORE_BROKER_URL=good,
                         RAGSCORE_RESULT_BACKEND=results)  # fmt: skip
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and text.startswith(f"Error: {refused}"), text
        assert "ACL SETUSER results ~celery-* &* +@all" in text and "results-pw" not in text, text
        monkeypatch.delenv("RAGSCORE_RESULT_BACKEND")
        store = connect(good, get_settings(), sends=True)
        assert store.list_runs() == [] and store.r.llen("cpu") == 0  # nothing recorded or sent
        monkeypatch.setenv("RAGSCORE_RESULT_BACKEND", f"redis://celery:celery-pw@{base}/1")
        store = connect(good, get_settings(), sends=True)  # a backend user with Celery's keys goes
        assert submit(data, load_suite(SUITE), store).items == 5
    finally:
        server.stop()


def _a_cpu_worker_finishes_a_run(broker: str, home: Path, tmp_path: Path) -> None:
    """A cpu worker started with this process's environment (its Redis URLs) at ``broker`` finishes a 5-row run."""
    worker = WorkerProcess(broker, "cpu", home, concurrency=1).start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
        summary = run(data, load_suite(SUITE), tmp_path / "out", broker=broker, timeout_s=120)
        assert summary.state == RunState.FINISHED and summary.items == 5, summary
    finally:
        worker.stop()


def test_the_narrow_broker_user_the_settings_docs_show_serves_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/settings.md said the broker's user needs ragscore's queues and kombu's keys, bindings, replies and Celery's
    results, not kombu's ``unacked``, ``unacked_index`` and ``unacked_mutex`` (its messages delivered and not yet
    acknowledged): a user given those keys (``~cpu* ~control* ~_kombu.* ...``) was refused (``may not run HSET
    unacked, ZADD unacked_index, SET unacked_mutex``) and told no narrower rule than ``~* &* +@all``. The docs now
    show a narrow broker user; with it (the run store a user of its own) a cpu worker and a run finish."""
    import re

    from ..support import ROOT

    shown = re.search(r"^ACL SETUSER broker on >PASSWORD (.+)$", (ROOT / "docs" / "settings.md").read_text(), re.M)
    assert shown, "docs/settings.md shows no narrow broker user"
    users = ["default off", "store on >store-pw ~ragscore:* &* +@all", f"broker on >broker-pw {shown.group(1)}"]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    monkeypatch.setenv("RAGSCORE_STORE_URL", f"redis://store:store-pw@{base}")
    try:
        _a_cpu_worker_finishes_a_run(f"redis://broker:broker-pw@{base}", tmp_path / "home", tmp_path)
    finally:
        server.stop()


def test_a_broker_user_lacking_kombus_unacked_keys_alone_is_told_those_keys(tmp_path: Path) -> None:
    """A broker user given every key docs/settings.md listed but kombu's messages delivered and not yet acknowledged
    (``unacked``, ``unacked_index``, ``unacked_mutex``) was refused and told no narrower rule than ``ACL SETUSER USER
    ~* &* +@all``: a user kept off other keys could not tell what it lacked. It is told ``~unacked*``, and with it
    the command goes."""
    rights = "~cpu* ~control* ~_kombu.* ~*.reply.celery.pidbox* ~celery-* ~ragscore:* &* +@all"
    users = ["default off", f"lacking on >pw {rights}", f"told on >pw {rights} ~unacked*"]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    try:
        with pytest.raises(ConfigError) as refused:
            connect(f"redis://lacking:pw@{base}", get_settings(), sends=True)
        said = str(refused.value)
        assert "its ACL user 'lacking' may not run HSET unacked, ZADD unacked_index, SET unacked_mutex " in said, said
        assert said.endswith("the broker needs its keys and channels, e.g. ACL SETUSER lacking ~unacked*"), said
        connect(f"redis://told:pw@{base}", get_settings(), sends=True)  # the rule it was told is all it lacked
    finally:
        server.stop()


def test_a_workers_result_backend_user_apart_from_the_brokers_is_checked_as_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore worker` checked its broker's user alone: with RAGSCORE_RESULT_BACKEND another user that may not
    write Celery's results and chord counters, its workers started and failed to store every task's result. It is
    refused at once now (exit 2, naming the user, the commands and the rule, its password hidden); workers whose
    backend user has Celery's keys finish a run."""
    users = ["default off", "good on >good-pw ~* &* +@all", "results on >results-pw ~other:* &* +@all",
             "celery on >celery-pw ~celery-* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}"
    good, home = f"redis://good:good-pw@{base}/0", tmp_path / "home"
    try:
        said = _ragscore("worker", "-Q", "cpu", home=home, RAGSCORE_BROKER_URL=good,
                         RAGSCORE_RESULT_BACKEND=f"redis://results:results-pw@{base}/1")  # fmt: skip
        text = " ".join(said.stderr.split())
        assert said.returncode == 2, text
        assert text.startswith(f"Error: Cannot use the result backend's Redis (RAGSCORE_RESULT_BACKEND) at "
                               f"redis://results:***@{base}/1: its ACL user 'results' may not run DEL "
                               "celery-taskset-meta-acl-probe.c"), text  # fmt: skip
        assert "ACL SETUSER results ~celery-* &* +@all" in text and "results-pw" not in text, text
        monkeypatch.setenv("RAGSCORE_RESULT_BACKEND", f"redis://celery:celery-pw@{base}/1")
        _a_cpu_worker_finishes_a_run(good, home, tmp_path)
    finally:
        server.stop()


def test_a_broker_user_keeping_celerys_results_is_checked_for_them_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With RAGSCORE_RESULT_BACKEND unset (or the broker's URL), Celery's chord counters and results are kept in the
    broker's database as its user, and its probe did not ask for them: a user limited to ragscore's queues passed,
    then a run died at its first chord with redis-py's raw NoPermissionError (DEL celery-taskset-meta-...). run,
    submit, resume and `ragscore worker` refuse it at once now (exit 2), naming ``~celery-*``, before anything is
    sent or recorded, in the broker's own probe or the store's where they are one user."""
    import re

    from orchestrator.runner import cancel

    users = ["default off", "good on >good-pw ~* &* +@all",
             "queues on >queues-pw ~cpu* ~control* ~_kombu.* ~unacked* ~ragscore:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, queues = f"redis://good:good-pw@{base}", f"redis://queues:queues-pw@{base}"
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    refused = (f"Cannot use Redis at redis://queues:***@{base}: its ACL user 'queues' may not run DEL "
               "celery-taskset-meta-acl-probe.c, ")  # fmt: skip
    rule = "the result backend (Celery's chord counters and task results) needs its keys and channels, e.g. "
    rule += "ACL SETUSER queues ~celery-* &* +@all"  # what it is, the backend being no setting of the user's
    home, suite = tmp_path / "home", tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    monkeypatch.setenv("RAGSCORE_STORE_URL", good)
    try:
        with pytest.raises(ConfigError, match=re.escape(refused) + ".*" + re.escape(rule)):
            run(data, load_suite(SUITE), tmp_path / "out", broker=queues, timeout_s=60)  # the broker's own probe
        monkeypatch.delenv("RAGSCORE_STORE_URL")  # the store's user the broker's: one probe
        for env in ({}, {"RAGSCORE_RESULT_BACKEND": queues}):  # the backend unset, or named as the broker
            said = _ragscore("submit", str(data), "--suite", str(suite), home=home, RAGSCORE_BROKER_URL=queues, **env)
            text = " ".join(said.stderr.split())
            assert said.returncode == 2 and text.startswith(f"Error: {refused}"), (env, text)
            assert rule in text and "queues-pw" not in text, text
        store = connect(good, get_settings(), sends=True)
        assert store.list_runs() == [] and store.r.llen("cpu") == 0  # nothing recorded or sent
        run_id = submit(data, load_suite(SUITE), store).run_id  # sent as the good user, then cancelled
        cancel(store, run_id)
        waiting = store.r.llen("cpu")
        said = _ragscore("resume", run_id, "--out", str(tmp_path / "resumed"), home=home, RAGSCORE_BROKER_URL=queues,
                         RAGSCORE_STORE_URL=good)  # fmt: skip
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and f"Error: {refused}" in text and rule in text, text
        assert store.state(run_id) == RunState.CANCELLED and store.r.llen("cpu") == waiting  # nothing sent again
        said = _ragscore("worker", "-Q", "cpu", home=home, RAGSCORE_BROKER_URL=queues)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and text.startswith(f"Error: {refused}") and rule in text, text
        store.r.execute_command("ACL", "SETUSER", "queues", "~celery-*")  # what the error says
        with pytest.raises(ConfigError, match=re.escape("e.g. ACL SETUSER queues ~*.reply.celery.pidbox*")):
            connect(queues, get_settings(), sends=True)  # then what it lacks besides: Celery's remote control replies
        store.r.execute_command("ACL", "SETUSER", "queues", "~*.reply.celery.pidbox*")
        connect(queues, get_settings(), sends=True)
    finally:
        server.stop()


def test_a_result_backend_in_the_stores_database_is_checked_in_the_stores_probe(tmp_path: Path) -> None:
    """The result backend's user was probed on a connection of its own wherever it was not the broker's: an embedded
    run (its store and backend in database 0, its broker in a lane) paid a third probe of a database and user the
    store's probe had just checked. A backend that is the store's database and user is checked in the store's probe:
    one probe (one MULTI) for each database and user, and a store user without Celery's keys is refused there."""
    import redis

    from orchestrator.connection import connect_lane

    users = ["default on nopass ~* &* +@all", "good on >good-pw ~* &* +@all", "store on >store-pw ~ragscore:* &* +@all"]
    sock = tmp_path / "redis.sock"
    server = _acl_redis(tmp_path, users, "--unixsocket", str(sock)).start()
    base = f"127.0.0.1:{server.port}"
    try:
        admin = redis.Redis.from_url(server.url)
        admin.config_resetstat()
        connect_lane(f"redis+socket://{sock}", 3, get_settings(), sends=True)  # as the embedded mode's
        assert admin.info("commandstats")["cmdstat_multi"]["calls"] == 2  # the store's database 0, then lane 3
        store = f"redis://store:store-pw@{base}/1"
        settings = get_settings().model_copy(update={"store_url": store, "result_backend": store})
        with pytest.raises(ConfigError, match="may not run DEL celery-taskset-meta-acl-probe.c, .*~celery-"):
            connect(f"redis://good:good-pw@{base}/0", settings, sends=True)
    finally:
        server.stop()


def test_a_command_that_only_reads_the_store_works_with_its_broker_down(tmp_path: Path) -> None:
    """connect() probed the broker's Redis for every command: `status` with RAGSCORE_STORE_URL's Redis up and the
    broker down retried ~20 s and failed (exit 1), though it reads only the store. Only a command that sends work
    probes the broker."""
    store_server = RedisProcess(tmp_path / "store").start()
    try:
        with closed_port() as port:
            dead_broker = f"redis://127.0.0.1:{port}/0"
            said = _ragscore("status", "--broker", dead_broker, home=tmp_path / "home",
                             RAGSCORE_STORE_URL=store_server.url)  # fmt: skip
            assert said.returncode == 0, said.stderr  # a probe of the dead broker fails it (exit 1), however long
            assert "no runs" in said.stdout + said.stderr
            store = connect(dead_broker, get_settings().model_copy(update={"store_url": store_server.url}))
            assert store.state("none") == ""
    finally:
        store_server.stop()


def test_an_embedded_lane_that_does_not_answer_names_no_store_url_the_user_never_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded mode puts the store in its server's database 0 and the broker in a lane of the same server:
    they were told apart by URL, so its errors named "the run store's Redis (RAGSCORE_STORE_URL)", never set."""
    from orchestrator import connection, runner

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 1.0)
    url = f"redis+socket://{tmp_path / 'gone.sock'}"
    for sends in (False, True):
        with pytest.raises(BrokerError) as unreachable:
            runner.connect_lane(url, 3, get_settings(), sends=sends)
        said = str(unreachable.value)
        assert said.startswith("Cannot use Redis at ") and "RAGSCORE_STORE_URL" not in said, said


def test_a_broker_not_answering_after_a_slow_store_gets_retries_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One deadline served both Redis: a store that took the window left the broker's first failed ping final,
    though the log had just said it was retried "for about 20 s". Each now has a window of its own."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 1.5)
    server = RedisProcess(tmp_path / "redis").start()
    broker_url = server.url.removesuffix("/0") + "/1"
    fails = {server.url: 2, broker_url: 1}  # the store answers its third ping (~2 s), the broker its second

    def probe(url: str, what: str = "Redis", roles: tuple[object, ...] = ()) -> str | None:
        if fails[url]:
            fails[url] -= 1
            return "not yet"
        return None

    monkeypatch.setattr(connection, "probe_redis", probe)
    try:
        settings = get_settings().model_copy(update={"store_url": server.url})
        assert connection.connect(broker_url, settings, sends=True).state("none") == ""
        assert fails == {server.url: 0, broker_url: 0}
    finally:
        server.stop()


def test_a_database_redis_refuses_on_a_unix_socket_names_the_database_not_the_socket_path(tmp_path: Path) -> None:
    """The database was read from the URL's path, which of a unix:// URL is the socket's: "it has no database
    tmp/.../redis.sock"."""
    sock = tmp_path / "redis.sock"
    server = RedisProcess(tmp_path / "redis", "--unixsocket", str(sock), "--unixsocketperm", "700")
    server.start_without_ping()
    try:
        for url in (f"unix://{sock}?db=99", f"redis+socket://{sock}?virtual_host=99"):
            with pytest.raises(ConfigError) as refused:
                probe_redis(url)
            said = str(refused.value)
            assert "no database 99 " in said and "no database tmp" not in said, said
    finally:
        server.stop()


def test_a_port_nothing_listens_on_is_named_with_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --broker URL with a mistyped port, or a Redis not started, said only redis-py's "Error 111 connecting to
    localhost:6999. Connection refused.", and a new run not that a run on one machine needs no broker at all. Every
    such error names the port and host that refused and what to do; a new run's broker (run's --broker, evaluate()'s
    broker=) also that it needs none, but not the run store's or the result backend's URL (their own variables),
    a resume (its run is the cluster's), nor a command of a cluster (status, cancel: :func:`connect` alone). A unix
    socket's refusal (the embedded Redis's) gets no such hint."""
    from orchestrator import connection
    from orchestrator.caller import PYTHON

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 1.0)  # the retries of a Redis that does not answer, short
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    alone = "a run on this machine alone needs no broker: leave out"
    server = RedisProcess(tmp_path / "redis").start()
    try:
        with closed_port() as port, closed_port() as other:
            url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
            listens = f"Connection refused; nothing listens on port {port} of 127.0.0.1: start its Redis, or correct "
            broker = f"Cannot use Redis at redis://:***@127.0.0.1:{port}/0: "

            def refused(*, expected: str = broker, **given: Any) -> str:
                with pytest.raises(BrokerError) as info:
                    run(data, load_suite(SUITE), tmp_path / "out", timeout_s=60, **given)
                said = str(info.value)
                assert said.startswith(expected) and PASSWORD not in said, said
                return said

            said = refused(broker=url)
            assert (f"{listens}the host or port in the URL ({alone} --broker and RAGSCORE_BROKER_URL, and `ragscore "
                    "run` starts a Redis of its own)") in said, said  # fmt: skip
            said = refused(broker=url, caller=PYTHON)
            assert f"({alone} broker= and RAGSCORE_BROKER_URL, and evaluate() starts a Redis of its own)" in said, said
            said = refused(broker=url, resume_id="gone")
            assert listens in said and alone not in said, said
            with pytest.raises(BrokerError) as status:  # what status and cancel connect with
                connect(url)
            assert listens in str(status.value) and alone not in str(status.value), status.value
            apart = get_settings().model_copy(update={"store_url": f"redis://127.0.0.1:{other}/0"})
            said = refused(broker=url, settings=apart, expected=f"Cannot use {STORE_REDIS} at redis://127.0.0.1:")
            assert f"nothing listens on port {other} of 127.0.0.1" in said and alone not in said, said
            backend = get_settings().model_copy(update={"result_backend": f"redis://127.0.0.1:{other}/0"})
            said = refused(broker=server.url, settings=backend, expected=f"Cannot use {BACKEND_REDIS} at redis://1")
            assert f"nothing listens on port {other} of 127.0.0.1" in said and alone not in said, said
    finally:
        server.stop()
    socket_said = probe_redis(f"unix://{tmp_path / 'gone.sock'}")
    assert socket_said and "nothing listens" not in socket_said, socket_said


@contextlib.contextmanager
def _connects_counted(monkeypatch: pytest.MonkeyPatch, port: int) -> Iterator[list[object]]:
    """The addresses this process connects to on ``port`` while the ``with`` lasts (each connect of the real socket
    recorded, then made): one per try of a ping of IPv4's ``127.0.0.1`` or another IP address."""
    tried: list[object] = []
    real = socket.socket.connect

    def counted(sock: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[1] == port:
            tried.append(address[0])
        real(sock, address)

    monkeypatch.setattr(socket.socket, "connect", counted)
    yield tried


#: The most pings of a refused loopback port: LOOPBACK_RETRY_S / LOOPBACK_RETRY_EVERY_S after the first, one spare.
MOST_LOOPBACK_PINGS = 6


def test_a_port_refused_on_this_machine_is_said_at_once_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """``RAGSCORE_BROKER_URL=redis://localhost:6390/0 ragscore run`` where nothing listens: connect() pinged the
    refused port about once a second for its whole window (~20 s; ~24 s to exit 1), yet a refusal by this machine's
    loopback does not heal by waiting long (a mistyped port, a Redis not started). A few pings over ~2 s (a Redis
    still starting) say it: the URL (its password hidden), that nothing listens there, and what to do (start its
    Redis, or leave the variable out for a Redis of the run's own)."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 3.0)  # a window of ~3 more pings, were it retried
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    with closed_port() as port, _connects_counted(monkeypatch, port) as tried, pytest.raises(BrokerError) as refused:
        run(data, load_suite(SUITE), tmp_path / "out", broker=f"redis://:{PASSWORD}@127.0.0.1:{port}/0", timeout_s=60)
    said = str(refused.value)
    assert said.startswith(f"Cannot use Redis at redis://:***@127.0.0.1:{port}/0: ") and PASSWORD not in said, said
    assert f"nothing listens on port {port} of 127.0.0.1: start its Redis" in said, said
    assert "leave out --broker and RAGSCORE_BROKER_URL, and `ragscore run` starts a Redis of its own" in said, said
    assert set(tried) == {"127.0.0.1"} and 1 < len(tried) <= MOST_LOOPBACK_PINGS, f"tried {len(tried)} times: {tried}"
    assert "retrying" not in caplog.text, caplog.text


@pytest.mark.parametrize("host", ["localhost", "[::1]", "127.0.0.2"])
def test_each_loopback_host_spelling_refused_is_said_at_once(
    host: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every address of this machine's loopback refuses after a few pings (~2 s), not ``localhost`` and
    ``127.0.0.1`` alone: IPv6's ``::1`` and the rest of 127.0.0.0/8 (``127.0.0.2``) are loopback too, and were
    retried for connect's window."""
    from orchestrator import connection

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 3.0)  # a window of ~3 more pings, were it retried
    with closed_port() as port, _connects_counted(monkeypatch, port) as tried, pytest.raises(BrokerError) as refused:
        try:
            connect(f"redis://{host}:{port}/0")
        finally:
            if host == "[::1]" and not tried:
                pytest.skip("this machine has no IPv6 loopback")
    assert f"nothing listens on port {port}" in str(refused.value), refused.value
    pings = Counter(tried)  # localhost: each of its addresses once a ping
    assert pings and max(pings.values()) <= MOST_LOOPBACK_PINGS, pings  # not pinged for connect's whole window
    assert "retrying" not in caplog.text, caplog.text


def test_a_redis_that_starts_listening_on_this_machines_loopback_soon_after_a_refusal_is_connected_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``redis-server --daemonize yes && ragscore run`` (a sidecar, a port-forward not yet up): the first ping is
    refused while the Redis still starts. It was said at once (``nothing listens on port ...``); a loopback refusal
    is now pinged again for ~2 s, and the run connects once the Redis listens (started right after that refusal)."""
    server = RedisProcess(tmp_path / "redis")
    port = server.port
    started: list[BaseException | RedisProcess] = []

    def start_after_the_first_refusal() -> None:
        try:
            until(lambda: bool(tried), 30)
            started.append(server.start_without_ping())  # at once: ~2 s of pings leave its start room on a busy host
        except BaseException as exc:  # said by the test, not lost in this thread
            started.append(exc)

    try:
        with _connects_counted(monkeypatch, port) as tried:
            starter = threading.Thread(target=start_after_the_first_refusal, daemon=True)
            starter.start()
            try:
                store = connect(f"redis://127.0.0.1:{port}/0")
            finally:
                starter.join(60)
        assert started == [server] and server.port == port, started
        assert store.r.ping() and len(tried) > 1, tried
    finally:
        server.stop()


def _address_of_this_machine() -> str | None:
    """An IPv4 address of this machine other than its loopback (its route's to a documentation network: no packet
    sent), or None where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else str(address)


def test_a_port_refused_by_another_host_name_is_still_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A cluster's Redis restarting refuses connections for a while: a host that is not this machine's loopback is
    retried for connect's window, as before (this machine's own other address stands in for another host)."""
    from orchestrator import connection

    address = _address_of_this_machine()
    if address is None:
        pytest.skip("this machine has no address but its loopback")
    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 2.0)  # the retries, short for the test
    with socket.socket() as held:  # bound, never listening: refuses every connection
        held.bind((address, 0))
        port = held.getsockname()[1]
        with _connects_counted(monkeypatch, port) as tried, pytest.raises(BrokerError) as refused:
            connect(f"redis://{address}:{port}/0")
    assert f"nothing listens on port {port} of {address}" in str(refused.value), refused.value
    assert len(tried) > 1 and "retrying for about 2 s" in caplog.text, (tried, caplog.text)


def test_a_host_name_that_does_not_resolve_is_named_and_waited_for_as_a_redis_not_yet_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host name that does not resolve stopped a run and ``ragscore worker`` at once (exit 2, "check its
    spelling"); yet a name resolves only once its Redis is up where a service's name is its container's or pod's
    (docker compose, a Kubernetes StatefulSet), and workers may start before their Redis. It is named and waited
    for: the run retries it (BrokerError after the retries, naming it), the workers start and wait."""
    import os
    import signal
    import sys

    from orchestrator import connection

    from ..support import ROOT

    host = "no-such-host.invalid"
    if not _resolver_says_no_such_name(host):
        pytest.skip("this machine's resolver cannot say that a name does not exist")
    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 2.0)  # the run's retries, short for the test
    with pytest.raises(BrokerError, match=f"{host}.*does not resolve") as unknown:
        connect(f"redis://:{PASSWORD}@{host}:6379/0")
    assert PASSWORD not in str(unknown.value)
    env = {
        **os.environ,
        "RAGSCORE_HOME": str(tmp_path / "home"),
        "RAGSCORE_BROKER_URL": f"redis://:{PASSWORD}@{host}:6379/0",
    }
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu"], stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    try:
        assert proc.stderr is not None
        first = next_line(proc.stderr, 180)
        assert first.startswith("Warning: cannot reach the broker at redis://:***@") and "does not resolve" in first
        assert "keep retrying" in first and PASSWORD not in first, first
        second = next_line(proc.stderr, 180)
        assert second.startswith(f"workers started for cpu, waiting for the broker redis://:***@{host}:6379/0;"), second
        assert PASSWORD not in second
    finally:
        proc.terminate()
        try:
            proc.wait(180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise


def test_a_worker_refuses_a_wrong_password_and_says_its_workers_wait_for_an_unreachable_broker(tmp_path: Path) -> None:
    import os
    import sys

    from ..support import ROOT

    server = RedisProcess(tmp_path / "redis", "--requirepass", PASSWORD).start_without_ping()
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home")}
    try:
        wrong = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "--broker",
             f"redis://:wrong@127.0.0.1:{server.port}/0"],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
        )  # fmt: skip
        assert wrong.returncode == 1 and "check the password in the URL" in wrong.stderr
        assert ":wrong@" not in wrong.stderr  # the password itself is not shown
        none = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "--broker",
             f"redis://127.0.0.1:{server.port}/0"],
            capture_output=True, text=True, cwd=ROOT, env={**env, "COLUMNS": "250"}, timeout=60,
        )  # fmt: skip
        said = " ".join(none.stderr.split())  # was Redis's own 'HELLO must be called with the client already ...'
        assert none.returncode == 1 and "HELLO" not in said, said
        assert "Redis asks for a password and the URL gives none: write it in the URL (redis://:PASSWORD@" in said
        for empty in (f"redis://:@127.0.0.1:{server.port}/0", f"redis://127.0.0.1:{server.port}/0?password="):
            with pytest.raises(BrokerError, match="Redis asks for a password and the URL gives none"):
                probe_redis(empty)  # redis-py sends no empty password: Redis's HELLO words were shown
    finally:
        server.stop()
    held = socket.socket()  # bound, never listening: refuses every connection, and no other server can take its
    held.bind(("127.0.0.1", 0))  # port meanwhile (one that answered nothing held the worker's Celery in a read)
    port = held.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu",
         "--broker", f"redis://127.0.0.1:{port}/0"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        first = next_line(proc.stderr, 180)
        assert first.startswith("Warning: cannot reach the broker") and "keep retrying" in first
        # its port named, not that a run on one machine needs no broker: a worker serves a cluster
        assert f"nothing listens on port {port} of 127.0.0.1" in first and "needs no broker" not in first, first
        second = next_line(proc.stderr, 180)  # it said "workers up for cpu", with no broker to be up on
        assert second.startswith(f"workers started for cpu, waiting for the broker redis://127.0.0.1:{port}/0;"), second
    finally:
        try:
            stop_worker_command(proc)
        finally:
            held.close()


def test_a_worker_refuses_a_wrong_store_password_and_warns_of_an_unreachable_store(tmp_path: Path) -> None:
    """`ragscore worker` probed the broker and the result backend, not RAGSCORE_STORE_URL's Redis apart, where its
    workers write every result: with a wrong password there it started, and every task failed. It is refused now
    (exit 1, naming the store's URL, its password hidden), and a store that does not answer is warned of by name, as
    an unreachable broker is: the workers start and keep retrying."""
    import os
    import sys

    from ..support import ROOT

    broker = RedisProcess(tmp_path / "broker").start()
    store = RedisProcess(tmp_path / "store", "--requirepass", PASSWORD).start_without_ping()
    wrong = f"redis://:{PASSWORD}-wrong@127.0.0.1:{store.port}/0"
    held = socket.socket()  # bound, never listening: refuses every connection
    held.bind(("127.0.0.1", 0))
    closed = f"redis://:{PASSWORD}@127.0.0.1:{held.getsockname()[1]}/0"
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path / "home"), "COLUMNS": "250"}
    proc = None
    try:
        said = _ragscore("worker", "-Q", "cpu", "--broker", broker.url, home=tmp_path / "home",
                         RAGSCORE_STORE_URL=wrong, COLUMNS="250")  # fmt: skip
        text = " ".join(said.stderr.split())
        assert said.returncode == 1, text
        redacted = f"redis://:***@127.0.0.1:{store.port}/0"
        assert f"Cannot use the run store's Redis (RAGSCORE_STORE_URL) at {redacted}" in text, text
        assert PASSWORD not in text and "workers up" not in text, text
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "--broker", broker.url],
            stderr=subprocess.PIPE, text=True, cwd=ROOT, env={**env, "RAGSCORE_STORE_URL": closed},
            start_new_session=True,
        )  # fmt: skip
        assert proc.stderr is not None
        first = next_line(proc.stderr, 180)
        port = held.getsockname()[1]
        assert first.startswith(f"Warning: cannot reach the run store's Redis (RAGSCORE_STORE_URL) at "
                                f"redis://:***@127.0.0.1:{port}/0"), first  # fmt: skip
        assert "the workers write every result there" in first and PASSWORD not in first, first
        assert f"nothing listens on port {port} of 127.0.0.1" in first and "needs no broker" not in first, first
    finally:
        try:
            if proc is not None:
                stop_worker_command(proc)
        finally:
            held.close()
            store.stop()
            broker.stop()


def test_a_workers_run_store_user_is_checked_for_its_writes_as_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore worker` did not check that the user of its run store may write it (``ragscore:*``), where its
    workers write every result: RAGSCORE_STORE_URL's user apart, or the broker's where it is unset, as run and submit
    check it. Either is refused at once now (exit 2, naming the user, the commands and the rule, its password
    hidden); a broker user without the store's keys still serves a store of another user, and its run finishes."""
    kombu = "~cpu* ~control* ~_kombu.* ~unacked* ~*.reply.celery.pidbox*"  # queues, bindings, control replies
    users = ["default off", "good on >good-pw ~* &* +@all", "other on >other-pw ~other:* &* +@all",
             f"queues on >queues-pw {kombu} ~celery-* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, queues, home = f"redis://good:good-pw@{base}", f"redis://queues:queues-pw@{base}", tmp_path / "home"
    rule = "the run store needs its keys and channels, e.g. ACL SETUSER {user} ~ragscore:* &* +@all"
    try:
        for broker, store, user, what in ((good, f"redis://other:other-pw@{base}", "other", STORE_REDIS),
                                          (queues, None, "queues", "Redis")):  # fmt: skip
            said = _ragscore("worker", "-Q", "cpu", home=home, RAGSCORE_BROKER_URL=broker,
                             **({"RAGSCORE_STORE_URL": store} if store else {}))  # fmt: skip
            text = " ".join(said.stderr.split())
            assert said.returncode == 2, text
            assert text.startswith(f"Error: Cannot use {what} at redis://{user}:***@{base}: its ACL user '{user}' "
                                   "may not run HSET ragscore:run:acl-probe:meta"), text  # fmt: skip
            assert rule.format(user=user) in text and f"{user}-pw" not in text, text
        monkeypatch.setenv("RAGSCORE_STORE_URL", good)
        _a_cpu_worker_finishes_a_run(queues, home, tmp_path)
    finally:
        server.stop()


def test_a_workers_run_store_user_is_checked_for_the_keys_saying_its_workers_run_and_stop(tmp_path: Path) -> None:
    """A store user allowed the runs' keys alone (``~ragscore:run* ~ragscore:runs``) passed `ragscore worker`'s check;
    its workers could not write the keys saying they run and that they are stopping (``ragscore:alive:*``,
    ``ragscore:stopping:*``): each logged a warning, and a judge worker too busy to answer was called unserved again.
    It is refused at once (exit 2), naming those writes and the rule."""
    runs_only = (
        "~ragscore:run* ~ragscore:runs* ~ragscore:emb:* ~cpu* ~control* ~_kombu.* ~unacked* ~*.reply.celery.pidbox*"
    )
    server = _acl_redis(
        tmp_path, ["default off", f"runs on >runs-pw {runs_only} ~celery-* &* +@all"]
    ).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    try:
        said = _ragscore(
            "worker", "-Q", "cpu", home=tmp_path / "home", RAGSCORE_BROKER_URL=f"redis://runs:runs-pw@{base}"
        )
        text = " ".join(said.stderr.split())
        assert said.returncode == 2, text
        assert "may not run SET ragscore:alive:acl-probe" in text and "SADD ragscore:stopping (" in text, text
        assert "the run store needs its keys and channels, e.g. ACL SETUSER runs ~ragscore:* &* +@all" in text, text
        assert "runs-pw" not in text, text
    finally:
        server.stop()


def test_a_workers_broker_user_is_checked_for_celerys_remote_control_replies_as_it_starts(tmp_path: Path) -> None:
    """A broker user allowed ragscore's queues and kombu's keys but not Celery's reply lists
    (``OID.reply.celery.pidbox``) passed `ragscore worker`'s check, then the command died on its first ping of its
    workers with redis-py's raw NoPermissionError (LLEN ....reply.celery.pidbox). It is refused at once now (exit 2),
    naming the key pattern and the ACL line to add, its password hidden; with that line added it passes."""
    import redis

    from ragscore_workers.acl import CONTROL_REPLIES

    users = ["default off", "good on >good-pw ~* &* +@all",
             "noreply on >noreply-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~ragscore:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    noreply = f"redis://noreply:noreply-pw@{base}"
    try:
        said = _ragscore("worker", "-Q", "cpu", home=tmp_path / "home", RAGSCORE_BROKER_URL=noreply)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2, text
        assert text.startswith(f"Error: Cannot use Redis at redis://noreply:***@{base}: its ACL user 'noreply' may "
                               "not run LPUSH acl-probe.reply.celery.pidbox"), text  # fmt: skip
        assert "*.reply.celery.pidbox" in text and "ACL SETUSER noreply ~*.reply.celery.pidbox*" in text, text
        assert "noreply-pw" not in text and "Traceback" not in text, text
        with redis.Redis.from_url(f"redis://good:good-pw@{base}") as good:
            good.execute_command(*"ACL SETUSER noreply ~*.reply.celery.pidbox*".split())  # the line the error gives
            assert good.keys("*.reply.celery.pidbox*") == []  # the probe's commands were discarded, none ran
        assert probe_redis(noreply, roles=(CONTROL_REPLIES,)) is None
        assert probe_redis(f"redis://good:good-pw@{base}", roles=(CONTROL_REPLIES,)) is None  # the documented ~*
    finally:
        server.stop()


def test_a_broker_user_limited_to_its_queues_bindings_is_checked_for_every_binding_kombu_writes(
    tmp_path: Path,
) -> None:
    """A user allowed kombu's bindings of its queues alone (``~_kombu.binding.cpu``) and its reply lists passed the
    check of Celery's remote control replies, then its first question of the workers died with redis-py's raw
    NoPermissionError: kombu adds a reply list to ``_kombu.binding.reply.celery.pidbox`` and its deadline to
    ``_kombu.binding_deadlines``, which were never checked. It is refused at once, naming those keys and the rule
    that allows them; with the rule added, the workers are asked. A worker's declare of its queue writes
    ``_kombu.binding_permanent.cpu`` too: checked and named."""
    import celery
    import redis
    from kombu import Connection, Exchange, Queue

    from ragscore_workers.acl import CONTROL_REPLIES, broker_role

    users = ["default off", "good on >good-pw ~* &* +@all",
             "bound on >bound-pw ~cpu* ~control* ~_kombu.binding.cpu ~_kombu.binding.control ~unacked* ~celery-* "
             "~ragscore:* ~*-*.reply.celery.pidbox* &* +@all"]  # fmt: skip  # reply lists by their OID's dashes
    server = _acl_redis(tmp_path, users).start_without_ping()
    bound = f"redis://bound:bound-pw@127.0.0.1:{server.port}/0"
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):  # what the user met: the real remote control
            celery.Celery(broker=bound).control.ping(timeout=0.5)
        with pytest.raises(ConfigError) as refused:
            probe_redis(bound, roles=(CONTROL_REPLIES,))
        text = str(refused.value)
        assert ("its ACL user 'bound' may not run SMEMBERS _kombu.binding.reply.celery.pidbox, EVAL, ZADD "
                "_kombu.binding_deadlines") in text, text  # fmt: skip
        rule = "ACL SETUSER bound ~*.reply.celery.pidbox* ~_kombu.binding_deadlines"
        assert f"e.g. {rule}" in text and "bound-pw" not in text, text
        with redis.Redis.from_url(f"redis://good:good-pw@127.0.0.1:{server.port}/0") as good:
            good.execute_command(*rule.split())  # the line the error gives
        assert probe_redis(bound, roles=(CONTROL_REPLIES,)) is None
        assert celery.Celery(broker=bound).control.ping(timeout=0.5) == []  # asked: no worker runs
        with Connection(bound) as kombu, pytest.raises(redis.exceptions.NoPermissionError):  # a worker's declare
            Queue("cpu", Exchange("cpu", type="direct"), routing_key="cpu")(kombu.default_channel).declare()
        with pytest.raises(ConfigError, match="its ACL user 'bound' may not run SADD _kombu.binding_permanent.cpu, "):
            probe_redis(bound, roles=(broker_role(["cpu"]),))
    finally:
        server.stop()


def _user_without_the_broadcasts_binding(name: str) -> tuple[str, str]:
    """A user ``name`` (password ``{name}-pw``, as :func:`_acl_redis` takes it) allowed the cpu and control queues
    with their bindings, kombu's unacked messages, Celery's results, the run store and the remote control replies, not
    the broadcasts' binding (:data:`acl.WORKER_CONTROL`), and the ACL rule that adds what it lacks."""
    user = (f"{name} on >{name}-pw ~cpu* ~control* ~_kombu.binding.cpu ~_kombu.binding.control "
            "~_kombu.binding_permanent.cpu ~_kombu.binding_permanent.control ~unacked* ~celery-* ~ragscore:* "
            "~*.reply.celery.pidbox* ~_kombu.binding_deadlines &* +@all")  # fmt: skip
    rule = (f"ACL SETUSER {name} ~_kombu.binding.celery.pidbox ~_kombu.binding_permanent.celery.pidbox "
            "~_kombu.binding_deadlines")  # fmt: skip
    return user, rule


def _without_the_broadcasts_binding(tmp_path: Path, name: str) -> tuple[RedisProcess, str, str]:
    """A started Redis with a user ``good`` (password ``good-pw``, every key) and a user ``name``
    (:func:`_user_without_the_broadcasts_binding`): the server, its ``127.0.0.1:PORT/0`` and the ACL rule that adds
    what ``name`` lacks."""
    user, rule = _user_without_the_broadcasts_binding(name)
    server = _acl_redis(tmp_path, ["default off", "good on >good-pw ~* &* +@all", user]).start_without_ping()
    return server, f"127.0.0.1:{server.port}/0", rule


def test_a_workers_broker_user_is_checked_for_its_workers_binding_to_the_remote_controls_broadcasts(
    tmp_path: Path,
) -> None:
    """A user allowed its queues' bindings and the rule the remote control replies' refusal gives passed `ragscore
    worker`'s check, then every worker died as it started (its pidbox queue's binding, ``_kombu.binding.celery.pidbox``,
    added by a Lua script with ``_kombu.binding_deadlines``) and the command gave up after five deaths. It is refused at
    once (exit 2), told the rule; with that rule added, a real worker starts and answers a ping."""
    import celery
    import redis

    server, base, rule = _without_the_broadcasts_binding(tmp_path, "bound")
    bound, home = f"redis://bound:bound-pw@{base}", tmp_path / "home"
    try:
        said = _ragscore("worker", "-Q", "cpu", home=home, RAGSCORE_BROKER_URL=bound)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2, text
        assert text.startswith(f"Error: Cannot use Redis at redis://bound:***@{base}: its ACL user 'bound' may not "
                               "run EVAL, EXISTS _kombu.binding_permanent.celery.pidbox"), text  # fmt: skip
        assert f"e.g. {rule}" in text and "bound-pw" not in text, text
        with redis.Redis.from_url(f"redis://good:good-pw@{base}") as good:
            good.execute_command(*rule.split())  # the line the error gives
        worker = WorkerProcess(bound, "cpu", home, concurrency=1).start()
        try:
            app, proc = celery.Celery(broker=bound), worker.proc
            assert proc is not None
            assert until(lambda: bool(app.control.ping(timeout=1.0)) or proc.poll() is not None, 300)
            assert proc.poll() is None, "the worker exited"
        finally:
            worker.stop()
    finally:
        server.stop()


def test_a_user_lacking_several_rules_is_told_every_one_in_one_refusal(tmp_path: Path) -> None:
    """A refusal named the ACL rule of the first refused command alone: a user lacking the reply lists and the
    broadcast channel, or the broker's keys and the run store's, fixed its ACL one rule per try. Every rule it lacks
    is named in one refusal, each once."""
    import redis

    from ragscore_workers.acl import BROKER, CONTROL_BROADCAST, CONTROL_REPLIES, STORE, lacking

    users = ["default off",
             "nochannel on >nochannel-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~ragscore:* resetchannels +@all",
             "other on >other-pw ~other:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    try:
        with redis.Redis.from_url(f"redis://nochannel:nochannel-pw@{base}") as client:
            said = lacking(client, (CONTROL_REPLIES, CONTROL_BROADCAST))
        assert said.startswith("its ACL user 'nochannel' may not run LPUSH acl-probe.reply.celery.pidbox"), said
        assert "e.g. ACL SETUSER nochannel ~*.reply.celery.pidbox* ~_kombu.binding_deadlines;" in said, said
        assert said.endswith("(Celery's remote control broadcasts, *.celery.pidbox) needs its keys and channels, "
                             "e.g. ACL SETUSER nochannel &*.celery.pidbox"), said  # fmt: skip
        with pytest.raises(ConfigError) as refused:
            probe_redis(f"redis://other:other-pw@{base}", roles=(BROKER, STORE))
        text = str(refused.value)
        assert ("the broker needs its keys and channels, e.g. ACL SETUSER other ~* &* +@all; the run store needs its "
                "keys and channels, e.g. ACL SETUSER other ~ragscore:* &* +@all") in text, text  # fmt: skip
        assert text.count("the broker needs") == 1 and "other-pw" not in text, text
    finally:
        server.stop()


def test_submit_and_cancel_check_the_broker_user_for_celerys_remote_control_replies_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    """submit asks the workers which queues they serve once it has sent its run, and a cancel (or a run's wait) asks
    them what they hold (Celery's remote control): a broker user allowed ragscore's queues and kombu's keys but not
    the reply lists passed their check, then submit died with redis-py's raw NoPermissionError after sending its run,
    before printing its id. Each is refused at once now (exit 2), naming the reply lists and the ACL line, before
    anything is sent or cancelled, the password hidden."""
    users = ["default off", "good on >good-pw ~* &* +@all",
             "noreply on >noreply-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~ragscore:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, noreply = f"redis://good:good-pw@{base}", f"redis://noreply:noreply-pw@{base}"
    home, suite = tmp_path / "home", tmp_path / "suite.json"
    suite.write_text(json.dumps(SUITE))
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    refused = f"Error: Cannot use Redis at redis://noreply:***@{base}: its ACL user 'noreply' may not run LPUSH "
    refused += "acl-probe.reply.celery.pidbox"
    try:
        said = _ragscore("submit", str(data), "--suite", str(suite), home=home, RAGSCORE_BROKER_URL=noreply)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and text.startswith(refused), text
        assert "ACL SETUSER noreply ~*.reply.celery.pidbox*" in text and "noreply-pw" not in text, text
        store = connect(good, get_settings(), sends=True)
        assert store.list_runs() == [] and store.r.llen("cpu") == 0  # nothing recorded or sent
        run_id = submit(data, load_suite(SUITE), store).run_id
        said = _ragscore("cancel", run_id, home=home, RAGSCORE_BROKER_URL=noreply)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2 and text.startswith(refused) and "noreply-pw" not in text, text
        assert store.state(run_id) == RunState.RUNNING  # refused before it cancelled
    finally:
        server.stop()


def test_results_of_a_cancelled_run_with_a_store_and_broker_user_lacking_the_reply_lists_says_so_as_cancel_does(
    tmp_path: Path,
) -> None:
    """`results` of a cancelled run with no summary yet asks the workers what they serve and hold (Celery's remote
    control) before it writes the summary: where the broker and the store share one user, that user was checked for
    the store alone, so one lacking the reply lists died with redis-py's raw NoPermissionError (exit 1). It is
    refused as `cancel` is (exit 2), naming the reply lists and the ACL line, saying the run is cancelled all the
    same and how to write its reports; with that line added, the same command writes them."""
    import redis

    from orchestrator.runner import cancel

    users = ["default off", "good on >good-pw ~* &* +@all",
             "noreply on >noreply-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~ragscore:* &* +@all"]  # fmt: skip
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, noreply = f"redis://good:good-pw@{base}", f"redis://noreply:noreply-pw@{base}"
    home, out = tmp_path / "home", tmp_path / "out"
    try:
        store = connect(good, get_settings(), sends=True)
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), load_suite(SUITE), store).run_id  # no worker
        cancel(store, run_id)
        said = _ragscore("results", run_id, "--out", str(out), home=home, RAGSCORE_BROKER_URL=noreply)
        text = " ".join(said.stderr.split())
        assert said.returncode == 2, text
        assert "its ACL user 'noreply' may not run LPUSH acl-probe.reply.celery.pidbox" in text, text
        assert "ACL SETUSER noreply ~*.reply.celery.pidbox*" in text and f"Run {run_id} is cancelled" in text, text
        assert "noreply-pw" not in text and "Traceback" not in text and "NoPermissionError" not in text, text
        with redis.Redis.from_url(good) as admin:
            admin.execute_command(*"ACL SETUSER noreply ~*.reply.celery.pidbox*".split())  # the line it gives
        said = _ragscore("results", run_id, "--out", str(out), home=home, RAGSCORE_BROKER_URL=noreply)
        assert said.returncode == 1, said.stderr  # a cancelled run's reports: exit 1, as `ragscore run`
        assert json.loads((out / "summary.json").read_text())["state"] == RunState.CANCELLED
    finally:
        server.stop()


def _status_asked_as(user: str, tmp_path: Path, *, said: list[str], unsaid: list[str], rule: str) -> None:
    """A run submitted with no worker, its `status RUN` asked as the broker user ``user`` (``NAME on >NAME-pw RULES``,
    as :func:`_acl_redis` takes it): it shows the run running and says the workers could not be asked as NAME, with
    each of ``said`` and none of ``unsaid``, NAME's password hidden and no traceback; once ``rule`` (``ACL SETUSER
    NAME ...``, the line it gives) is run, the workers are asked: none consumes the run's queue."""
    import redis

    name = user.split()[0]
    server = _acl_redis(tmp_path, ["default off", "good on >good-pw ~* &* +@all", user]).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    good, asking = f"redis://good:good-pw@{base}", f"redis://{name}:{name}-pw@{base}"
    try:
        store = connect(good, get_settings(), sends=True)
        run_id = submit(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), load_suite(SUITE), store).run_id  # no worker
        status = _ragscore("status", run_id, home=tmp_path / "home", RAGSCORE_BROKER_URL=asking, COLUMNS="300")
        text = " ".join((status.stdout + status.stderr).split())
        assert status.returncode == 0 and f"run {run_id}: running" in text, text
        assert f"the workers could not be asked with the broker's Redis at redis://{name}:***@{base} (its ACL user " \
            f"'{name}' may not run " in text, text  # fmt: skip
        assert [part for part in said if part not in text] == [], text
        assert [part for part in [*unsaid, f"{name}-pw", "Traceback"] if part in text] == [], text
        with redis.Redis.from_url(good) as admin:
            admin.execute_command(*rule.split())
        status = _ragscore("status", run_id, home=tmp_path / "home", RAGSCORE_BROKER_URL=asking, COLUMNS="300")
        text = " ".join((status.stdout + status.stderr).split())
        assert status.returncode == 0 and "could not be asked" not in text and "no worker consumes it" in text, text
    finally:
        server.stop()


def test_status_with_a_broker_user_lacking_celerys_remote_control_replies_says_so_and_shows_the_progress(
    tmp_path: Path,
) -> None:
    """`status RUN` asks the workers which queues they serve (Celery's remote control) where messages wait: with a
    broker user allowed ragscore's queues and kombu's keys but not the reply lists it failed with redis-py's raw
    NoPermissionError (exit 1, no progress). It shows the run's progress, and says the workers could not be asked,
    what the user lacks and the ACL line to add, its password hidden; with that line it asks them."""
    _status_asked_as(
        "noreply on >noreply-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~ragscore:* &* +@all", tmp_path,
        said=["│ all │ 0 │ 20 │",  # its progress
              "its ACL user 'noreply' may not run LPUSH acl-probe.reply.celery.pidbox",
              "ACL SETUSER noreply ~*.reply.celery.pidbox*"],
        unsaid=["NoPermissionError"],
        rule="ACL SETUSER noreply ~*.reply.celery.pidbox*",  # the line it gives
    )  # fmt: skip


def test_status_with_a_broker_user_lacking_the_remote_control_channel_names_it_and_the_rule(tmp_path: Path) -> None:
    """Asking the workers publishes the question on Celery's broadcast channel (``/0.celery.pidbox``): a broker user
    with every key and no channel (Redis 7's default for a new user) was refused there, and `status RUN` said only
    Redis's error, no rule (the reply lists it may use passed the probe). It names the channel and a rule that
    grants it; with that line added, the workers are asked."""
    _status_asked_as(
        "nochan on >nochan-pw ~* resetchannels +@all", tmp_path,
        said=["its ACL user 'nochan' may not run PUBLISH /0.celery.pidbox", "e.g. ACL SETUSER nochan &*.celery.pidbox"],
        unsaid=[],
        rule="ACL SETUSER nochan &*.celery.pidbox",  # its line
    )  # fmt: skip


def test_status_with_a_broker_user_lacking_the_broadcasts_binding_names_it_and_the_rule(tmp_path: Path) -> None:
    """Asking the workers runs kombu's sweep of overdue bindings, which reads the broadcasts' binding
    (:data:`acl.WORKER_CONTROL`'s keys): cancel refuses a broker user without them, naming the rule, but `status RUN`
    was never checked for them, said nothing, and logged kombu's traceback once that binding was overdue. It names
    what the user lacks and the rule, as cancel does; with that line added, the workers are asked."""
    user, rule = _user_without_the_broadcasts_binding("asker")
    _status_asked_as(
        user, tmp_path,
        said=["its ACL user 'asker' may not run EVAL, EXISTS _kombu.binding_permanent.celery.pidbox", f"e.g. {rule}"],
        unsaid=["maybe_refresh_binding_expiry"],
        rule=rule,  # the line it gives
    )  # fmt: skip


def test_a_broker_users_acl_is_probed_once_a_process_once_found_allowed_to_ask_the_workers(tmp_path: Path) -> None:
    """`status RUN --watch` probed its broker user's ACL (MULTI, a command of each kind, DISCARD) before each ask of
    the workers, every CONSUMER_CHECK_S, though a user's rules seldom change while it watches. A user found allowed
    is probed once a process (per server, database and user: a new client of it too is not probed again), another
    user once of its own; one refused is probed at each check, so the rule it is told takes effect at the next. The
    probes are counted by the server (INFO commandstats: each ends with a DISCARD)."""
    refused = "noreply on >noreply-pw ~cpu* ~control* ~_kombu.* ~unacked* ~celery-* ~ragscore:* &* +@all"
    users = ["default off", "good on >good-pw ~* &* +@all", "other on >other-pw ~* &* +@all", refused]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}/0"
    admin = redis.Redis.from_url(f"redis://good:good-pw@{base}")
    try:
        assert _probed(admin, f"redis://good:good-pw@{base}", 3) == (1, ["", "", ""])
        assert _probed(admin, f"redis://good:good-pw@{base}", 2) == (0, ["", ""])  # a new client of that user
        assert _probed(admin, f"redis://other:other-pw@{base}", 2) == (1, ["", ""])
        probes, said = _probed(admin, f"redis://noreply:noreply-pw@{base}", 2)
        assert probes == 2 and all("its ACL user 'noreply' may not run" in line for line in said), said
    finally:
        admin.close()
        server.stop()


def test_a_broker_user_found_allowed_is_probed_again_once_refused_or_once_its_finding_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker user found allowed to ask the workers was never probed again in that process: its rights lost while
    `status --watch` ran skipped the pre-check for the rest of the watch. An ask it is refused drops that finding
    (each check probes it, and says what it lacks, until it is allowed again), and a finding older than
    ``MAY_ASK_TTL_S`` is probed again. The user is a real Redis ACL user whose rights are taken and given back; the
    refusal is the server's own, of a reply list; the age is set to 0, not waited out."""
    from orchestrator import connection

    server = _acl_redis(tmp_path, ["default off", "admin on >admin-pw ~* &* +@all",
                                   "asker on >asker-pw ~* &* +@all"]).start_without_ping()  # fmt: skip
    base = f"127.0.0.1:{server.port}/0"
    admin = redis.Redis.from_url(f"redis://admin:admin-pw@{base}")
    url = f"redis://asker:asker-pw@{base}"
    client = redis_client(url)
    try:
        assert _probed(admin, url, 2) == (1, ["", ""])
        admin.execute_command("ACL", "SETUSER", "asker", "resetkeys", "~cpu*", "~ragscore:*")  # rights lost
        assert _probed(admin, url, 1) == (0, [""])  # found allowed a moment ago
        with pytest.raises(redis.exceptions.NoPermissionError) as refused:
            client.lpush("acl-probe.reply.celery.pidbox", "{}")
        probes, said = _probed(admin, url, 2, refused.value)
        assert probes == 2 and all("its ACL user 'asker' may not run" in line for line in said), said
        probes, said = _probed(admin, url, 1)  # the next check's pre-check: probed, no longer skipped
        assert probes == 1 and "its ACL user 'asker' may not run" in said[0], said
        admin.execute_command("ACL", "SETUSER", "asker", "~*")  # given back: found allowed, and kept so
        assert _probed(admin, url, 2) == (1, ["", ""])
        monkeypatch.setattr(connection, "MAY_ASK_TTL_S", 0.0)  # that finding is old at once
        assert _probed(admin, url, 2) == (2, ["", ""])
    finally:
        client.close()
        admin.close()
        server.stop()


def _probed(admin: redis.Redis, url: str, checks: int, error: redis.RedisError | None = None) -> tuple[int, list[str]]:
    """The probes of ``checks`` calls of ``workers_not_asked`` as the user of ``url`` (a client of its own; each call
    given ``error``: an ask refused), as a status's checks make them, counted by the server through ``admin`` (INFO
    commandstats: each probe ends with a DISCARD), and what each said."""
    from orchestrator.connection import workers_not_asked

    before = admin.info("commandstats").get("cmdstat_discard", {}).get("calls", 0)
    client = redis_client(url)
    said = [workers_not_asked(client, url, error) for _ in range(checks)]
    client.close()
    return admin.info("commandstats").get("cmdstat_discard", {}).get("calls", 0) - before, said


def test_status_with_a_broker_user_that_may_only_read_names_the_commands_it_lacks_to_ask_the_workers(
    tmp_path: Path,
) -> None:
    """Asking the workers (Celery's remote control) writes their reply lists: a user that may only read, with every
    key (``~*``), could not, and `status RUN` told it to add ``~*.reply.celery.pidbox*``, a key pattern it already
    had. It names what the user lacks: the commands (MULTI the first), and a rule that grants them."""
    _status_asked_as(
        "reader on >reader-pw ~* &* +@read +time +ping", tmp_path,
        said=["its ACL user 'reader' may not run MULTI (this user has no permissions to run the 'multi' command)",
              "the broker (Celery's remote control of its workers, _kombu.binding.celery.pidbox) need those commands, "
              "e.g. ACL SETUSER reader +@all"],
        unsaid=["~*.reply.celery.pidbox*"],  # ~* it has already
        rule="ACL SETUSER reader +@all",  # the line it gives
    )  # fmt: skip


def test_a_hung_broker_while_a_run_is_sent_fails_it_in_bounded_time_and_a_later_send_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery sent a run's tasks with no socket timeout: a broker Redis that stops answering (hung, behind a
    partition) held the submission in its first send for ever, silent, while the run store answered. Now a send is
    bounded as the store's reads are: the submission fails with BrokerError, the run is cancelled (resumable), and
    once the broker answers again the same thread of the same process sends (its resume) and the run finishes."""
    import signal
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    from orchestrator import connection, runner
    from ragscore_workers.settings import get_settings

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)  # the worker's, started once the broker answers
    worker = WorkerProcess(broker.url, "cpu", tmp_path / "home", concurrency=1)
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(60))
    settings = get_settings().model_copy(update={"store_url": store_server.url})
    one_thread = ThreadPoolExecutor(max_workers=1)  # a notebook's: every call from the same thread

    def send() -> str:
        store = connect(broker.url, settings)
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGSTOP)  # accepts connections, never answers
        with pytest.raises(BrokerError, match="did not answer") as failed:  # the bound's error, not a hang's
            submit(data, load_suite(SUITE), store, run_id="hung-send")
        return str(failed.value)

    try:
        try:
            said = one_thread.submit(send).result(timeout=120)
        except FutureTimeout:
            pytest.fail("the submission still waits on the hung broker after 120 s")
        assert "hung-send" in said and "resume" in said, said
        assert broker.proc is not None
        broker.proc.send_signal(signal.SIGCONT)
        store = connect(broker.url, settings)
        assert store.state("hung-send") == RunState.CANCELLED
        worker.start()
        resumed = one_thread.submit(lambda: runner.resume(connect(broker.url, settings), "hung-send")).result(120)
        summary = wait(store, resumed.run_id, timeout_s=300)
        assert summary.state == "finished" and summary.items == 60
        em = summary.metrics["exact_match"]
        assert em.errors == 0 and em.n + em.unscorable == 60
    finally:
        one_thread.shutdown(wait=False, cancel_futures=True)
        if broker.proc is not None:
            broker.proc.send_signal(signal.SIGCONT)
        worker.stop()
        broker.stop()
        store_server.stop()


def test_a_users_resume_cut_off_by_a_hung_broker_says_to_resume_once_it_answers_and_a_recovery_gets_the_raw_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore resume` (or `run --resume`) that met a hung broker while re-sending ended with "error: Redis:
    OperationalError: ..." and no word on how to go on, where a submission says the run stopped part-way and to
    resume it once Redis answers; the commands it says name the run's --broker (they left it out: the one hint the
    user sees, pasted, resumed against RAGSCORE_BROKER_URL or the embedded Redis). A stall recovery (wait()'s)
    still gets the raw error: wait() retries on it."""
    import signal

    from orchestrator import connection, runner
    from ragscore_workers.settings import get_settings

    monkeypatch.setattr(connection, "STORE_READ_TIMEOUT_S", 2.0)  # the bound, short for the test
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(60))
    settings = get_settings().model_copy(update={"store_url": store_server.url})
    try:
        store = connect(broker.url, settings)
        submit(data, load_suite(SUITE), store, run_id="hung-resend")  # no worker: left to resume
        assert broker.proc is not None

        class HangsTheBrokerAsItSends:  # a progress view: told (note) what the resume does before it sends
            def start(self, run_id: str) -> None: ...
            def update(self, counters: dict[str, int], final: bool = False) -> None: ...
            def stop(self) -> None: ...

            def note(self, text: str) -> None:
                if text.startswith("checking the run's dataset is unchanged"):
                    assert broker.proc is not None
                    broker.proc.send_signal(signal.SIGSTOP)  # accepts connections, never answers

        with pytest.raises(BrokerError) as failed:  # "did not answer": the bound's error (unbounded, a hang)
            runner.run(None, None, tmp_path / "out", broker=broker.url, settings=settings, resume_id="hung-resend",
                       progress=HangsTheBrokerAsItSends())  # fmt: skip
        said = str(failed.value)
        assert said.startswith("Redis did not answer while run hung-resend was being sent ("), said
        assert said.endswith("it stopped part-way: once Redis answers, resume it with `ragscore run --resume DIR "
                             f"--broker {broker.url}` (DIR: its --out) or `ragscore resume hung-resend --out DIR "
                             f"--broker {broker.url}`"), said  # fmt: skip
        assert isinstance(failed.value.__cause__, runner._Outage.ERRORS)
        assert store.state("hung-resend") == RunState.CANCELLED  # resumable, as a cut-off submission is
        with pytest.raises(runner._Outage.ERRORS):  # not BrokerError: wait() would not retry on it
            runner.resume(store, "hung-resend", recovery=True)
    finally:
        if broker.proc is not None:
            broker.proc.send_signal(signal.SIGCONT)
        broker.stop()
        store_server.stop()


@pytest.mark.parametrize("query", ["heartbeat=30", "heartbeat=30&insist=1&login_method=x"])
def test_a_broker_url_with_options_kombu_alone_reads_opens_the_run_store(tmp_path: Path, query: str) -> None:
    """``?heartbeat=30`` passes check_redis_url (kombu, the broker's client, takes it), and the run store's client,
    redis-py, refused it at its first connection (TypeError: an unexpected keyword 'heartbeat'): options that are
    kombu's alone are left out of the URL redis-py reads, so connect opens the store and the result backend works."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        url = f"{server.url}?{query}"
        assert probe_redis(url) is None
        store = connect(url, get_settings(), sends=True)
        assert store.r.ping()
        from ragscore_workers.app import app

        app.backend.client.set("ragscore-test-key", "1")
    finally:
        server.stop()


def test_a_run_with_a_broker_url_holding_kombu_only_options_finishes_on_a_real_worker(tmp_path: Path) -> None:
    """A worker and a run on ``redis://...?heartbeat=30&insist=1``: the worker's store, the orchestrator's and
    the chord's result backend (all redis-py) refused the URL at their first connection."""
    server = RedisProcess(tmp_path / "redis").start()
    url = f"{server.url}?heartbeat=30&insist=1"
    worker = WorkerProcess(url, "cpu", tmp_path / "home", concurrency=1)
    try:
        worker.start()
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(60, seed=3))
        summary = run(data, load_suite(SUITE), tmp_path / "out", broker=url, timeout_s=120)
        assert summary.state == RunState.FINISHED and summary.items == 60
    finally:
        worker.stop()
        server.stop()


class _SilentServer:
    """A TCP server on a loopback port that accepts every connection and never answers (a hung Redis, or one behind
    a partition): the connections it took, kept open until :meth:`close`."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:  # closed
                return

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the thread
        self.sock.close()
        for conn in self.accepted:
            conn.close()


#: A worker's socket timeout in the tests below (RAGSCORE_WORKER_SOCKET_TIMEOUT_S, default 120 s): its shortest.
SHORT_SOCKET_TIMEOUT = {"RAGSCORE_WORKER_SOCKET_TIMEOUT_S": "5"}


def test_a_worker_whose_broker_accepts_and_never_answers_stops_promptly_on_sigterm(tmp_path: Path) -> None:
    """The workers' Celery had no socket timeout: one whose broker took the connection and never answered was held
    in a socket read, and SIGTERM waited the whole --stop-timeout (870 s for cpu) before killing it. Its reads now
    time out (RAGSCORE_WORKER_SOCKET_TIMEOUT_S, here 5 s), it retries, and sees the stop between tries."""
    import os
    import signal
    import sys

    from ..support import ROOT

    server = _SilentServer()
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "--broker",
         f"redis://127.0.0.1:{server.port}/0"],
        stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
        env={**os.environ, **SHORT_SOCKET_TIMEOUT, "RAGSCORE_HOME": str(tmp_path / "home")},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        assert next_line(proc.stderr, 180).startswith("Warning: cannot reach the broker")  # its probe timed out
        said = next_line(proc.stderr, 180)  # naming the broker it waits for
        waiting = f"workers started for cpu, waiting for the broker redis://127.0.0.1:{server.port}/0;"
        assert said.startswith(waiting), said
        probed = len(server.accepted)
        assert until(lambda: len(server.accepted) > probed, 180), "the Celery worker never connected"
        proc.terminate()
        try:
            proc.wait(180)  # a generous deadline: its --stop-timeout is 870 s
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the worker still waited on its silent broker 180 s after SIGTERM")
        assert "workers stopped" in proc.communicate(timeout=60)[1]  # it exited: its stderr ends
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        server.close()


def test_an_idle_worker_past_its_socket_timeout_answers_remote_control_and_runs_tasks(tmp_path: Path) -> None:
    """The workers' socket timeout does not break an idle worker: its BRPOP asks Redis to answer within 1 s and its
    pub/sub connection (remote control: ``inspect``, which checks a run's queues are served) is read only once
    readable. After idling past the timeout (5 s here) it answers remote control, runs a run, and never lost its
    connection."""
    from ragscore_workers.app import app

    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    worker.env |= SHORT_SOCKET_TIMEOUT
    try:
        worker.start()
        connect(server.url)
        assert until(lambda: bool(app.control.ping(timeout=1.0)), 120), "the worker never answered a ping"
        time.sleep(3 * float(SHORT_SOCKET_TIMEOUT["RAGSCORE_WORKER_SOCKET_TIMEOUT_S"]))  # idle past it, nothing sent
        assert until(lambda: bool(app.control.inspect(timeout=1.0).active_queues()), 60), "no remote control"
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(30))
        summary = run(data, load_suite(SUITE), tmp_path / "out", broker=server.url, timeout_s=120)
        assert summary.state == RunState.FINISHED and summary.items == 30
        logs = " ".join(p.read_text(errors="replace") for p in (tmp_path / "home" / "logs").glob("worker-*.log"))
        assert "Connection to broker lost" not in logs and "Timeout reading" not in logs, logs
    finally:
        worker.stop()
        server.stop()


def test_a_user_that_may_not_open_multi_is_told_every_rule_its_writing_roles_need(tmp_path: Path) -> None:
    """A user that may not open MULTI was told the first writing role's rule alone (the broker's), then, that one
    added, the run store's: the other refusals (commands refused inside MULTI) name every rule at once. MULTI is
    said once; a role that only reads needs no MULTI and is not named. Nor is a part of the broker's (its remote
    control replies, its workers' binding): "... the broker (...) and the broker (...) need those commands, e.g.
    ACL SETUSER USER +@all" named the broker three times, where the broker's rule grants their commands too."""
    import redis

    from ragscore_workers.acl import BROKER, CONTROL_REPLIES, STORE, STORE_READS, WORKER_CONTROL, lacking

    server = _acl_redis(tmp_path, ["default on nopass ~* &* +@all", "reader on >r-pw ~* &* +@read +ping"])
    server.start_without_ping()
    client = redis.Redis.from_url(f"redis://reader:r-pw@127.0.0.1:{server.port}/0")
    try:
        said = lacking(client, (BROKER, STORE_READS, STORE, CONTROL_REPLIES, WORKER_CONTROL))
    finally:
        client.close()
        server.stop()
    assert said.startswith("its ACL user 'reader' may not run MULTI (this user has no permissions to run the 'multi' "
                           "command): "), said  # fmt: skip
    assert said.count("MULTI") == 1, said
    assert "the broker needs those commands, e.g. ACL SETUSER reader ~* &* +@all" in said, said
    assert "the run store needs those commands, e.g. ACL SETUSER reader ~ragscore:* &* +@all" in said, said
    assert said.count("the broker") == 1, said


def test_a_user_that_may_not_select_its_database_or_ping_is_refused_at_once_with_the_rule_of_that_command(
    tmp_path: Path,
) -> None:
    """An ACL user that may not run PING, or SELECT the URL's database (redis-py sends it as it connects), is answered
    NOPERM: refused at once as a user that lacks what its command needs is (ConfigError, exit 2; no Redis restarting
    says it), with the rule of the command Redis names, with or without roles to check. A user that may not SELECT
    was told ``+ping``."""
    from ragscore_workers.acl import BROKER

    users = ["default on nopass ~* &* +@all", "nosel on >s-pw ~* &* +@all -select", "noping on >p-pw ~* &* +@all -ping"]
    server = _acl_redis(tmp_path, users).start_without_ping()
    base = f"127.0.0.1:{server.port}"
    try:
        for url, rule in ((f"redis://nosel:s-pw@{base}/1", "ACL SETUSER nosel +select"),
                          (f"redis://noping:p-pw@{base}/0", "ACL SETUSER noping +ping")):  # fmt: skip
            for roles in ((), (BROKER,)):
                with pytest.raises(ConfigError, match="it replies NOPERM to its ACL user") as refused:
                    probe_redis(url, roles=roles)
                said = str(refused.value)
                assert said.endswith(f"command): {rule}"), said
                assert "-pw" not in said, said
    finally:
        server.stop()


def test_a_command_that_asks_the_workers_is_checked_for_the_broadcasts_binding_kombus_sweep_reads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """kombu sweeps overdue bindings in every channel that consumes a list that expires, an ask's reply list
    included: once the broadcasts' binding was overdue (no worker had refreshed it for an hour), each ask of the
    workers by a broker user allowed all the check asked for, but not ``_kombu.binding.celery.pidbox`` and
    ``_kombu.binding_permanent.celery.pidbox``, logged kombu's warning with a traceback (its sweep refused). A
    command that asks them (here cancel's connect, and cancel's and results' check of the broker) checks those keys
    as a worker's does: refused at once, naming them and the rule; with that rule added, the ask warns of nothing."""
    import logging

    import celery
    import redis

    from orchestrator.connection import reach_broker

    server, base, rule = _without_the_broadcasts_binding(tmp_path, "asker")
    asker = f"redis://asker:asker-pw@{base}"

    def sweep_warned() -> bool:
        """Whether an ask of the workers (none runs) logged kombu's warning of its refused sweep."""
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kombu.transport.redis"):
            celery.Celery(broker=asker).control.inspect(timeout=0.5).active_queues()
        return any("maybe_refresh_binding_expiry" in r.getMessage() for r in caplog.records)

    try:
        with redis.Redis.from_url(f"redis://good:good-pw@{base}") as good:
            good.zadd("_kombu.binding_deadlines", {"celery.pidbox": 0})  # overdue: no worker refreshed it
            assert sweep_warned()
            for check in (lambda: reach_broker(asker), lambda: connect(asker, queues=True, writes=True)):  # cancel's
                with pytest.raises(ConfigError) as refused:
                    check()
                text = str(refused.value)
                assert "its ACL user 'asker' may not run EVAL, EXISTS _kombu.binding_permanent.celery.pidbox" in text
                assert f"e.g. {rule}" in text and "asker-pw" not in text, text
            good.execute_command(*rule.split())  # the line the error gives
        reach_broker(asker)
        connect(asker, queues=True, writes=True).r.close()
        assert not sweep_warned()
    finally:
        server.stop()
