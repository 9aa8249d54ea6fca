"""The tests' port that nothing listens on: refused to a client, and held so that no other test's server takes it
(CI runs four test processes at once; a ``free_port()`` is free only when named)."""

from __future__ import annotations

import errno
import socket

import pytest

from ..support import closed_port


def test_a_closed_port_refuses_a_connect_and_another_bind_while_it_is_held() -> None:
    with closed_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
        for address in ("127.0.0.1", "0.0.0.0"):
            with socket.socket() as other, pytest.raises(OSError) as taken:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as redis-server and HTTP servers do
                other.bind((address, port))
            assert taken.value.errno == errno.EADDRINUSE, address
    with socket.socket() as after:
        after.bind(("127.0.0.1", port))  # given back when the with ends
