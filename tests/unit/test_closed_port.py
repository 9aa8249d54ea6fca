"""The tests' port that nothing listens on: refused to a client, and held so that no other test's server takes it
(CI runs four test processes at once; a ``free_port()`` is free only when named)."""

from __future__ import annotations

import errno
import socket

import pytest

from ..support import closed_port


def _loopbacks() -> list[tuple[socket.AddressFamily, str]]:
    """The loopback addresses of this host: 127.0.0.1, and ::1 where it has IPv6."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return [(socket.AF_INET, "127.0.0.1")]
    return [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]


def test_a_closed_port_refuses_a_connect_and_another_bind_while_it_is_held() -> None:
    """On each address ``localhost`` names: a port held on 127.0.0.1 only was free on ::1, where a client of
    ``localhost`` may connect first (to another test's server bound there)."""
    with closed_port() as port:
        for _, address in _loopbacks():
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((address, port), timeout=10).close()
        for family, address in [*_loopbacks(), (socket.AF_INET, "0.0.0.0")]:
            with socket.socket(family) as other, pytest.raises(OSError) as taken:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server and HTTP servers do
                other.bind((address, port))
            assert taken.value.errno == errno.EADDRINUSE, address
    with socket.socket() as after:
        after.bind(("127.0.0.1", port))  # given back when the with ends
