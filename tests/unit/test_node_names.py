"""``ragscore worker``'s node names (:func:`orchestrator.workers.node_names`): the first number free of the live
workers and of this host's other ``ragscore worker`` processes of the same broker."""

from __future__ import annotations

import socket
import sys
import uuid

import pytest

from orchestrator.workers import node_names
from ragscore_workers.errors import ConfigError

#: Never connected: node_names only claims names on this host, for this broker (a URL no other test run has).
BROKER = f"redis://:secret@127.0.0.1:1/0?client_name={uuid.uuid4().hex}"


def test_a_name_claimed_on_this_host_is_taken_until_released_and_only_for_its_broker() -> None:
    """A second claim of the same broker takes cpu-2 while cpu-1 is held, cpu-1 once it is released; one of another
    broker (another cluster, another Flower) takes cpu-1 beside it: the claims were the host's, whatever the broker,
    so two clusters' workers on one host (or two test runs, each with its own Redis) pushed each other's numbers up."""
    host = socket.gethostname()
    with node_names(["cpu"], None, (), BROKER) as first:
        assert first == {"cpu": f"cpu-1@{host}"}
        with node_names(["cpu"], None, (), BROKER) as second:
            assert second == {"cpu": f"cpu-2@{host}"}
        with node_names(["cpu"], None, (), BROKER.replace(":1/", ":2/")) as other:
            assert other == {"cpu": f"cpu-1@{host}"}
        with pytest.raises(ConfigError, match=f"cpu-1@{host} is taken by a ragscore worker on this host"):
            with node_names(["cpu"], "{queue}-1@%h", (), BROKER):
                pass
    with node_names(["cpu"], None, (), BROKER) as again:
        assert again == {"cpu": f"cpu-1@{host}"}


def test_a_live_workers_name_is_skipped_and_refused_without_n() -> None:
    """cpu-1 answering the ping gives cpu-2; ``--name`` without ``{n}`` naming a live worker is refused."""
    host = socket.gethostname()
    with node_names(["cpu", "judge"], None, {f"cpu-1@{host}"}, BROKER) as names:
        assert names == {"cpu": f"cpu-2@{host}", "judge": f"judge-1@{host}"}
    with pytest.raises(ConfigError, match=f"w@{host} is taken by a live worker of the cluster"):
        with node_names(["cpu"], "w@%h", {f"w@{host}"}, BROKER):
            pass


def test_without_abstract_sockets_names_are_kept_apart_by_the_ping_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """On macOS (no abstract Unix sockets) nothing is claimed on the host, and ``ragscore worker`` still starts."""
    monkeypatch.setattr(sys, "platform", "darwin")
    host = socket.gethostname()
    with node_names(["cpu"], None, (), BROKER) as first, node_names(["cpu"], None, (), BROKER) as second:
        assert first == second == {"cpu": f"cpu-1@{host}"}
