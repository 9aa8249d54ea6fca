"""A cluster whose run store (RAGSCORE_STORE_URL) is one Redis and whose broker is another, down: the commands that
need the broker say so at once, naming it, and what they could do without it is done."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from orchestrator import connection, queues, runner
from orchestrator.suite import load_suite
from ragscore_workers.errors import BrokerError, ConfigError
from ragscore_workers.settings import get_settings
from ragscore_workers.store import RunState, RunStore

from ..support import RedisProcess, make_rows, until, write_jsonl

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match"], "chunk_size": {"cpu": 5}}


@pytest.fixture
def apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RunStore, str, str]]:
    """``(store, broker URL, run id)``: a run submitted (no worker: it stays running) through a broker apart from
    its store, then the broker stopped. RAGSCORE_STORE_URL names the store, as a cluster's commands read it."""
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 1.0)  # the retries of the broker that does not answer, short
    try:
        store = runner.connect(broker.url, get_settings(), sends=True)
        sub = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store)
        broker.stop()
        yield store, broker.url, sub.run_id
    finally:
        broker.stop()
        store_server.stop()


def test_status_of_a_live_run_shows_its_progress_and_says_the_broker_could_not_be_reached(
    apart: tuple[RunStore, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Its queues' notes read the broker, whose client retried ~20 s and ended with redis-py's ConnectionError."""
    from orchestrator.cli import status

    _, broker, run_id = apart
    status(run_id, broker=broker)
    said = " ".join(capsys.readouterr().out.split())
    assert f"run {run_id}: running" in said and "cpu" in said, said
    assert f"the broker's Redis at {broker} could not be reached" in said, said


def test_cancel_marks_the_run_cancelled_then_says_its_summary_waits_for_the_broker(
    apart: tuple[RunStore, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cancel marked the run, then summarizing it reached the broker unprobed: a ConnectionError after ~20 s. The
    results of the cancelled run, with no summary, did the same."""
    from orchestrator.cli import cancel_cmd, results, status

    store, broker, run_id = apart
    with pytest.raises(BrokerError) as cancelled:
        cancel_cmd(run_id, broker=broker)
    said = str(cancelled.value)
    assert store.state(run_id) == RunState.CANCELLED
    assert said.startswith(f"Cannot use the broker's Redis at {broker}"), said
    # one stop between the two sentences; not that a run on one machine needs no broker: this one is the cluster's
    assert f"correct the host or port in the URL. Run {run_id} is cancelled" in said, said
    assert "needs no broker" not in said, said
    # the command it gives names the broker: without it, it asked RAGSCORE_BROKER_URL or the embedded Redis
    assert f"`ragscore results {run_id} --out DIR --broker {broker}` writes it" in said, said
    with pytest.raises(BrokerError) as no_summary:
        results(run_id, out=tmp_path / "out", broker=broker, quiet=True)
    said = str(no_summary.value)
    assert said.startswith(f"Cannot use the broker's Redis at {broker}"), said
    assert f"Run {run_id} is cancelled" in said and "summary" in said, said
    assert f"`ragscore results {run_id} --out {tmp_path / 'out'} --broker {broker}` writes it" in said, (
        said
    )  # its --out
    status(run_id, broker=broker)  # a cancelled run's resume names the broker it was watched with
    said = " ".join(capsys.readouterr().out.split())
    assert f"`ragscore resume {run_id} --out DIR --broker {broker}` scores it" in said, said


def test_results_of_a_run_still_running_says_to_follow_it_with_its_broker(
    apart: tuple[RunStore, str, str], tmp_path: Path
) -> None:
    """`Run X is still running: follow it with `ragscore status X --watch``, without the --broker results was given:
    pasted, it asked RAGSCORE_BROKER_URL or the embedded Redis, where the run is unknown."""
    from orchestrator.cli import results
    from ragscore_workers.errors import StoreError

    _, broker, run_id = apart
    with pytest.raises(StoreError) as running:
        results(run_id, out=tmp_path / "out", broker=broker, quiet=True)
    assert str(running.value) == (
        f"Run {run_id} is still running: follow it with `ragscore status {run_id} --watch --broker {broker}`"
    )


def _watched(
    run_id: str, broker: str, capsys: pytest.CaptureFixture[str], step: Callable[[str], bool], within: float = 60
) -> str:
    """What ``status --watch`` (no terminal: one table per refresh) printed: ``step``, given what it printed so far,
    steps the test on and says when it is done (failing after ``within`` s); the run then ends, and the watch with
    it."""
    from orchestrator.cli import status

    store = runner.connect(broker, get_settings())
    watch = threading.Thread(target=status, args=(run_id,), kwargs={"broker": broker, "watch": True, "interval": 0.01})
    said: list[str] = []
    watch.start()
    try:
        assert until(lambda: said.append(capsys.readouterr().out) or step("".join(said)), within), "".join(said)
    finally:
        store.r.hset(store.key(run_id, "meta"), "state", RunState.CANCELLED)
        watch.join(60)
    assert not watch.is_alive(), "status --watch went on after its run ended"
    return "".join(said) + capsys.readouterr().out


@contextmanager
def _in_place_of(broker: str, on_accept: Callable[[socket.socket], None]) -> Iterator[list[socket.socket]]:
    """A listener on the port of ``broker`` (stopped), in its place, handing each connection it accepts to
    ``on_accept``: the connections it accepted, each closed on leaving (if ``on_accept`` did not). It is shut down
    then, which wakes its accept() (a close alone does not, on Linux: the thread and the port outlived the test), and
    its thread joined."""
    accepted: list[socket.socket] = []
    listening = socket.create_server(("127.0.0.1", urlsplit(broker).port or 0))

    def take() -> None:
        while True:
            try:
                conn, _ = listening.accept()
            except OSError:  # shut down: the test is over
                return
            accepted.append(conn)
            on_accept(conn)

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    try:
        yield accepted
    finally:
        listening.shutdown(socket.SHUT_RDWR)
        listening.close()
        taker.join(10)
        for conn in accepted:
            conn.close()
    assert not taker.is_alive(), "the listener's accept() outlived it"


@contextmanager
def _listening(broker: str, hold: bool = False) -> Iterator[list[socket.socket]]:
    """:func:`_in_place_of` ``broker``: the connections it accepted (each closed at once, or with ``hold`` held open,
    never answered: a host that does not answer)."""
    with _in_place_of(broker, lambda conn: None if hold else conn.close()) as accepted:
        yield accepted


def test_status_watch_asks_a_broker_that_does_not_answer_at_each_check_not_each_refresh(
    apart: tuple[RunStore, str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refresh that found the broker down returned before noting its check: every refresh (2 s) pinged it
    again, 5 s each where its host drops packets. Its pings are counted where it listened."""
    _, broker, run_id = apart
    monkeypatch.setattr(queues, "QUEUED_CHECK_S", 3600.0)  # one check in the test: its first refresh's
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 3600.0)
    first: list[int] = []

    def tenth_refresh(said: str) -> bool:
        tables = said.count(f"run {run_id}: running")
        if tables and not first:  # the first refresh has pinged (then printed)
            first.append(len(pings))
        return tables >= 10

    with _listening(broker) as pings:  # counts pings, closes them
        said = _watched(run_id, broker, capsys, tenth_refresh)
    assert first[0] >= 1 and "could not be reached" in said, said
    assert len(pings) == first[0], f"{len(pings)} pings in 10 refreshes, {first[0]} in the first"


def test_status_watch_asks_a_broker_whose_host_does_not_answer_at_its_next_check_after_the_ping(
    apart: tuple[RunStore, str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host that does not answer takes the ping's whole timeout (5 s), longer than the checks' intervals (5 s,
    20 s): the checks were timed from before the ping, so the next refresh was due again and pinged (connections
    at 0, 7.1, 14.1 s). Timed from after it, the refreshes of the next interval show the run without a ping."""
    _, broker, run_id = apart
    monkeypatch.setattr(queues, "QUEUED_CHECK_S", 1.0)  # shorter than the ping that waits 5 s
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 1.0)
    first: list[int] = []  # connections once the first table was printed (its refresh pinged)
    between: list[int] = []  # tables printed before the first refresh's next ping

    def next_ping(said: str) -> bool:
        tables = said.count(f"run {run_id}: running")
        if tables and not first:
            first.append(len(held))
        if first and len(held) > first[0] and not between:
            between.append(tables)
        return bool(between)

    with _listening(broker, hold=True) as held:  # accepts, never answers
        said = _watched(run_id, broker, capsys, next_ping)
    assert "could not be reached" in said, said
    assert between[0] > 2, f"the refresh after the first pinged again: {between[0]} tables before the second ping"


def test_status_watch_with_the_broker_gone_shows_none_of_its_last_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A queue no worker consumed, said while the broker answered, stayed under the table (over the line that the
    broker could not be reached) once it was down: an old note, which the broker no longer said."""
    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    monkeypatch.setattr(queues, "QUEUED_CHECK_S", 0.0)  # each refresh checks
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 0.0)
    try:
        store = runner.connect(broker.url, get_settings(), sends=True)
        run_id = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store).run_id

        def broker_gone(said: str) -> bool:
            # stopped: a stop inside a check is said once its read fails (tried once), not after ~20 s of retries
            if "no worker consumes" in said and broker.proc is not None and broker.proc.poll() is None:
                broker.stop()
            return "could not be reached" in said.split("no worker consumes")[-1]

        said = _watched(run_id, broker.url, capsys, broker_gone)
    finally:
        broker.stop()
        store_server.stop()
    tables = said.split(f"run {run_id}: ")
    gone = [t for t in tables if "could not be reached" in t]
    assert gone and not any("no worker consumes" in t for t in gone), said


def test_status_watch_with_the_broker_hung_inside_the_workers_check_says_so_within_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker answered the check's ping and reads, then hung in its workers' check (Celery's inspect: the
    broker's writes paused, a Redis stopped mid-failover): kombu waited the store's read timeout (30 s) twice, with
    nothing new shown. The inspect's connection is bounded as the check's reads are (BROKER_CHECK_S a reply): the
    watch says the broker could not be reached well before the test gives up (its failure: the watch said nothing)."""
    import redis

    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    monkeypatch.setattr(connection, "BROKER_CHECK_S", 1.0)
    monkeypatch.setattr(queues, "QUEUED_CHECK_S", 3600.0)  # one check: the first refresh's
    # longer than the clock's time since boot: a first check timed from 0 (not "never") was never due (a machine up
    # less than an hour, as a fresh CI runner: the watch showed tables and no check)
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", time.monotonic() + 3600.0)
    paused = redis.Redis.from_url(broker.url)
    try:
        store = runner.connect(broker.url, get_settings(), sends=True)
        run_id = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store).run_id
        store.work_began(run_id, 0)  # as a worker's first task stamps it: no queued check (a script, a write)
        paused.client_pause(600_000, all=False)  # its writes (the inspect's publish) hang; its reads answer
        said = _watched(run_id, broker.url, capsys, lambda said: "could not be reached" in said, within=20)
    finally:
        paused.client_unpause()
        broker.stop()
        store_server.stop()
    assert f"the broker's Redis at {broker.url} could not be reached" in " ".join(said.split()), said


def test_status_in_a_single_redis_that_drops_the_check_fails_naming_no_broker_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One Redis, store and broker: an error of its check was said as the broker's Redis not reached (which is the
    store's, not apart), under a table, exit 0; it fails the command, as it did before a broker apart was known.
    The check's connections are the ones past its maxclients (the store's own were made before)."""
    from kombu.exceptions import OperationalError
    from redis import ConnectionError as RedisConnectionError

    from orchestrator.cli import status

    monkeypatch.delenv("RAGSCORE_STORE_URL", raising=False)
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = runner.connect(server.url, get_settings(), sends=True)
        run_id = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store).run_id
        clients = int(store.r.info("clients")["connected_clients"])
        store.r.config_set("maxclients", clients + 2)  # status's connect probe and its store, not the check's
        with pytest.raises((RedisConnectionError, OperationalError)) as dropped:
            status(run_id, broker=server.url)
        assert "max number of clients" in str(dropped.value), dropped.value
        assert "could not be reached" not in capsys.readouterr().out
    finally:
        server.stop()


def test_status_with_a_broker_apart_dropping_the_check_names_its_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broker that answered the ping and dropped the check after it was said without its URL."""
    from orchestrator.cli import status

    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker").start()
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    try:
        store = runner.connect(broker.url, get_settings(), sends=True)
        run_id = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store).run_id
        said_by = store.broker
        assert said_by is not None
        said_by.config_set("maxclients", int(said_by.info("clients")["connected_clients"]) + 1)  # its ping's, only
        status(run_id, broker=broker.url)
        said = " ".join(capsys.readouterr().out.split())
        assert f"the broker's Redis at {broker.url} could not be reached" in said and "max number of clients" in said
    finally:
        broker.stop()
        store_server.stop()


def test_cancel_with_a_broker_database_that_is_not_there_says_the_run_is_cancelled_all_the_same(
    apart: tuple[RunStore, str, str], tmp_path: Path
) -> None:
    """A database the broker's Redis lacks is a ConfigError, which went past the words on the run (cancelled)."""
    from orchestrator.cli import cancel_cmd

    store, _, run_id = apart
    server = RedisProcess(tmp_path / "another broker").start()
    try:
        with pytest.raises(ConfigError) as refused:
            cancel_cmd(run_id, broker=server.url.removesuffix("/0") + "/99")
    finally:
        server.stop()
    said = str(refused.value)
    assert store.state(run_id) == RunState.CANCELLED
    assert "has no database 99" in said and f"Run {run_id} is cancelled" in said, said


@contextmanager
def _gone_after_its_ping(broker: str, hold: bool = False) -> Iterator[list[str]]:
    """A Redis on the port of ``broker`` (stopped) that answers a ping (and redis-py's handshake), and drops a
    connection at any other command (with ``hold``: never answers it): a broker that went down, or hung, right after
    the ping of a check, inside it. Yields the commands it was sent (``PING``, or the other command's name)."""
    said: list[str] = []

    def serve(conn: socket.socket) -> None:
        stream = conn.makefile("rb")
        try:
            while line := stream.readline():
                words = [stream.read(int(stream.readline()[1:]) + 2)[:-2] for _ in range(int(line[1:]))]
                name = words[0].decode().upper()
                if name in ("CLIENT", "HELLO"):  # a new connection's handshake (HELLO: RESP3's, its version back)
                    conn.sendall(b"+OK\r\n" if name == "CLIENT" else b"%1\r\n+proto\r\n:" + words[1] + b"\r\n")
                    continue
                said.append(name)
                if name != "PING":
                    break
                conn.sendall(b"+PONG\r\n")
        except (OSError, ValueError):
            pass
        if not hold:  # else held open until the listener is gone
            conn.close()

    def serve_apart(conn: socket.socket) -> None:
        threading.Thread(target=serve, args=(conn,), daemon=True).start()

    with _in_place_of(broker, serve_apart):
        yield said


def test_status_watch_with_the_broker_gone_inside_a_check_says_so_after_one_try(
    apart: tuple[RunStore, str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The broker answered the check's ping, then was gone: each read of the check was retried by the store's broker
    client (redis-py, 8 times over ~20 s, made to ride out a blip in a send) before the watch said the broker could
    not be reached; a check that met kombu's reconnects held it longer. The check's reads are tried once."""
    _, broker, run_id = apart
    monkeypatch.setattr(queues, "QUEUED_CHECK_S", 3600.0)  # one check in the test: its first refresh's
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 3600.0)

    with _gone_after_its_ping(broker) as sent:
        said = _watched(run_id, broker, capsys, lambda said: "could not be reached" in said)
    assert f"the broker's Redis at {broker} could not be reached" in " ".join(said.split()), said
    reads = [command for command in sent if command != "PING"]
    assert sent[0] == "PING" and len(reads) == 1, f"the check's read was tried {len(reads)} times: {sent}"


def test_status_watch_asks_a_broker_hung_inside_a_check_again_at_its_next_check_after_the_failure(
    apart: tuple[RunStore, str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broker that answered the ping and hung in the check's read: the read's timeout is longer than the checks'
    intervals, which were timed from before the check (a failed ping's from after it), so the refresh after a failed
    check checked again, a ping and a read that hung each refresh. Timed from the failure, tables come between."""
    _, broker, run_id = apart
    monkeypatch.setattr(connection, "BROKER_CHECK_S", 3.0)  # a read's timeout, longer than the checks' intervals
    monkeypatch.setattr(queues, "QUEUED_CHECK_S", 2.0)
    monkeypatch.setattr(queues, "CONSUMER_CHECK_S", 2.0)
    first: list[tuple[int, int]] = []  # (pings, tables) once the first failed check was printed
    between: list[int] = []  # tables printed from then to the next ping

    def next_ping(said: str) -> bool:
        tables = said.count(f"run {run_id}: running")
        if "could not be reached" in said and not first:
            first.append((sent.count("PING"), tables))
        if first and sent.count("PING") > first[0][0] and not between:
            between.append(tables - first[0][1])
        return bool(between)

    with _gone_after_its_ping(broker, hold=True) as sent:
        said = _watched(run_id, broker, capsys, next_ping)
    assert "could not be reached" in said, said
    assert between[0] > 2, f"the refresh after the failed check checked again: {between[0]} tables before it"


@pytest.mark.parametrize("command", ["cancel", "results"])
def test_cancel_and_results_with_the_broker_down_ask_it_once(
    apart: tuple[RunStore, str, str],
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only to know whether the broker can be used (to write a cancelled run's summary), cancel and results pinged
    it about once a second for connect's whole retry window (~20 s) before they failed. One probe says it; its
    connections are counted where the broker listened, against one probe_redis's."""
    from orchestrator.cli import cancel_cmd, results
    from ragscore_workers.store import probe_redis

    store, broker, run_id = apart
    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 3.0)  # a window of pings, each refused at once
    if command == "results":
        store.set_state(run_id, RunState.CANCELLED)  # cancelled without a summary: results writes it
    with _listening(broker) as probed:  # counts connections, closes them
        probe_redis(broker)
        one_probe = len(probed)
        with pytest.raises(BrokerError) as failed:
            if command == "cancel":
                cancel_cmd(run_id, broker=broker)
            else:
                results(run_id, out=tmp_path / "out", broker=broker, quiet=True)
        asked = len(probed) - one_probe
    said = str(failed.value)
    assert said.startswith(f"Cannot use the broker's Redis at {broker}") and f"Run {run_id} is cancelled" in said, said
    assert asked == one_probe, f"{asked} connections to the broker, {one_probe} in one probe"


def test_cancel_with_the_broker_lost_after_its_probe_says_the_run_is_cancelled_and_how_to_finish(
    apart: tuple[RunStore, str, str],
) -> None:
    """The broker answered cancel's probe, then was lost (a restart) while the summary was written: redis-py's
    ConnectionError ended the command ("Error: Redis: ConnectionError: ..."), the run cancelled without a word that
    its summary was not written, nor of the command that writes it. Said as a broker down at the probe is, once
    the first read fails: not after the ~20 s of retries (9 tries of the read) of the store's broker client."""
    from orchestrator.cli import cancel_cmd

    store, broker, run_id = apart
    with _gone_after_its_ping(broker) as sent, pytest.raises(BrokerError) as lost:
        cancel_cmd(run_id, broker=broker)
    said = str(lost.value)
    assert store.state(run_id) == RunState.CANCELLED
    assert f"Run {run_id} is cancelled" in said and "not written yet" in said, said
    assert f"`ragscore results {run_id} --out DIR --broker {broker}` writes it" in said, said
    reads = [command for command in sent if command != "PING"]
    assert len(reads) == 1, f"the summary's first read was tried {len(reads)} times: {sent}"


def test_a_broker_on_the_ipv6_loopback_at_the_store_port_is_another_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """127.0.0.1:P and [::1]:P were one server by their names: a broker listening on [::1] at the store's port,
    apart from the store's Redis on 127.0.0.1, was never asked apart, so with it down `status` failed (its client's
    retries, then redis-py's error) instead of showing the run's progress and saying the broker could not be reached.
    Two addresses are two servers; only ``localhost``, which names either, is one with both."""
    from orchestrator.cli import status

    store_server = RedisProcess(tmp_path / "store").start()
    broker = RedisProcess(tmp_path / "broker", "--bind", "::1")
    broker.port = store_server.port  # one port, two addresses: two servers
    broker.start_without_ping()
    broker_url = f"redis://[::1]:{broker.port}/0"
    monkeypatch.setenv("RAGSCORE_STORE_URL", store_server.url)
    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 1.0)
    try:
        store = runner.connect(broker_url, get_settings(), sends=True)
        run_id = runner.submit(write_jsonl(tmp_path / "d.jsonl", make_rows(20)), load_suite(SUITE), store).run_id
        assert store.r.info("server")["run_id"] != store.broker.info("server")["run_id"]  # type: ignore[union-attr]
        broker.stop()
        status(run_id, broker=broker_url)
        said = " ".join(capsys.readouterr().out.split())
        assert f"run {run_id}: running" in said, said
        assert f"the broker's Redis at {broker_url} could not be reached" in said, said
    finally:
        broker.stop()
        store_server.stop()
