"""A fake Docker engine on a unix socket (no engine can run here), answering the calls the docker backend
makes, with moby's timing for ``/wait``: the 200 headers at once, the body only when the container exits
(moby's container_routes.go writes the header and flushes before waiting). The program never exits by
itself: the container "runs" until ``/kill``."""

from __future__ import annotations

import json
import os
import socket
import threading
from types import TracebackType
from typing import BinaryIO

__all__ = ["FakeDockerEngine"]

#: How long a held request waits for ``/kill`` before giving up (a test bound, never reached when it passes).
HOLD_S = 60.0


class FakeDockerEngine:
    """``with FakeDockerEngine(path) as engine:`` serves ``unix://path``; ``engine.calls`` lists what was asked."""

    def __init__(self, path: str, *, ping_byte_every_s: float | None = None) -> None:
        """``ping_byte_every_s``: answer /_ping a byte at a time, this far apart (an engine hanging after its version,
        yet never silent long enough for a read timeout)."""
        self.path = path
        self.ping_byte_every_s = ping_byte_every_s
        self.calls: list[str] = []
        self._killed = threading.Event()
        self._server: socket.socket | None = None

    def __enter__(self) -> FakeDockerEngine:
        if os.path.exists(self.path):
            os.unlink(self.path)
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(self.path)
        self._server.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._killed.set()
        if self._server is not None:
            self._server.close()
        if os.path.exists(self.path):
            os.unlink(self.path)

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    @staticmethod
    def _send(conn: socket.socket, status: str, body: bytes = b"", ctype: str = "application/json") -> None:
        head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\nApi-Version: 1.43\r\n\r\n"
        conn.sendall(head.encode() + body)

    def _trickle(self, conn: socket.socket, answer: bytes) -> None:
        """Send ``answer`` a byte every ``ping_byte_every_s`` seconds, until it is sent or the engine closes."""
        assert self.ping_byte_every_s is not None
        for byte in answer:
            if self._killed.wait(self.ping_byte_every_s):
                return
            conn.sendall(bytes([byte]))

    @staticmethod
    def _read_request(f: BinaryIO) -> tuple[str, str] | None:
        line = f.readline()
        if not line:
            return None
        method, target, _ = line.decode().split(" ", 2)
        headers = {}
        while (header := f.readline()) not in (b"\r\n", b""):
            key, value = header.decode().split(":", 1)
            headers[key.strip().lower()] = value.strip()
        if length := int(headers.get("content-length", 0)):
            f.read(length)
        if headers.get("transfer-encoding") == "chunked":
            while (size := int(f.readline().strip(), 16)) != 0:
                f.read(size + 2)
            f.read(2)
        return method, target.split("?")[0]

    def _handle(self, conn: socket.socket) -> None:
        f = conn.makefile("rb")
        try:
            while (request := self._read_request(f)) is not None:
                method, path = request
                self.calls.append(f"{method} {path}")
                if path.endswith("/_ping") and self.ping_byte_every_s is not None:
                    self._trickle(conn, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nOK")
                elif path.endswith("/_ping"):
                    self._send(conn, "200 OK", b"OK", "text/plain")
                elif path.endswith("/version"):
                    self._send(conn, "200 OK", json.dumps({"ApiVersion": "1.43", "Version": "24.0"}).encode())
                elif path.endswith("/containers/create"):
                    self._send(conn, "201 Created", b'{"Id": "c0ffee"}')
                elif path.endswith("/attach"):
                    conn.sendall(b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
                                 b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")  # fmt: skip
                    self._killed.wait(HOLD_S)
                    return
                elif path.endswith("/wait"):
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    )
                    self._killed.wait(HOLD_S)
                    body = b'{"StatusCode": 137}\n'
                    conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
                elif path.endswith("/kill"):
                    self._killed.set()
                    self._send(conn, "204 No Content")
                elif path.endswith("/start") or method in ("DELETE", "PUT"):
                    self._send(conn, "204 No Content" if method != "PUT" else "200 OK")
                elif path.endswith("/json"):
                    state = {"Id": "c0ffee", "Config": {"Tty": False}, "State": {"OOMKilled": False}}
                    self._send(conn, "200 OK", json.dumps(state).encode())
                else:
                    self._send(conn, "404 Not Found", b'{"message": "not in the fake"}')
        except OSError:
            return
        finally:
            conn.close()
