"""``ragscore worker``'s copy of its workers' output: each line to the worker's log file and, ``[QUEUE]``-prefixed, to
this command's stderr (the journal, the container's log), URL passwords hidden in both.

Neither may stall a worker: a worker blocks once its output pipe is full, so the copier never waits on stderr (a
supervisor may capture it and stop reading). It hands each line to :class:`Echo`, whose own thread writes stderr;
past ``ECHO_BACKLOG`` lines waiting, a line is dropped from stderr (a worker's, or ``ragscore worker``'s own), and
so is one stderr refuses (closed, a reader gone: EPIPE); stderr says how many of each once it takes one again, or as
the echo closes. The
file keeps every line, up to :data:`LOG_MAX_BYTES`: then it is renamed ``NAME.1`` (the one before it replaced) and
a new one started, so a worker at ``--loglevel info`` for months keeps two files of a queue, not one that fills the
disk."""

from __future__ import annotations

import os
import queue
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import IO, TextIO

from ragscore_workers.providers.errors import redact_url_passwords

__all__ = ["ECHO_BACKLOG", "LOG_MAX_BYTES", "Echo", "RotatingLog", "open_log", "tee"]

#: Log lines waiting for stderr before further ones are dropped from it (their files keep them).
ECHO_BACKLOG = 1000
#: A ``ragscore worker`` log file is rotated (renamed ``NAME.1``) once a line would take it past this size.
LOG_MAX_BYTES = 64 * 1024 * 1024


def open_log(path: Path) -> IO[bytes]:
    """``path`` opened to append, created the owner's only (its lines hold excerpts of item data and replies)."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")  # noqa: SIM115


class RotatingLog:
    """A worker's log file that, once a line would take it past :data:`LOG_MAX_BYTES` (read at each write), is
    renamed ``PATH.1`` (replacing the one before) and started again; whole lines only, none lost."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open_log(path)
        self._size = os.fstat(self._file.fileno()).st_size

    def write(self, line: bytes) -> None:
        """Append ``line`` and flush it, rotating first when it would not fit."""
        if self._size and self._size + len(line) > LOG_MAX_BYTES:
            self._rotate()
        self._file.write(line)
        self._file.flush()
        self._size += len(line)

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._file = open_log(self.path)
        self._size = 0

    def close(self) -> None:
        self._file.close()


class Echo:
    """Writes workers' log lines to ``stream`` from a thread of its own; :meth:`offer` never blocks."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        #: (prefix, line or None, how many lines of this prefix were dropped before it); None ends the thread.
        self._lines: queue.Queue[tuple[str, str | None, int] | None] = queue.Queue(maxsize=ECHO_BACKLOG)
        #: How many lines of each prefix were dropped since its last one queued (offered by several threads).
        self._dropped: dict[str, int] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def offer(self, prefix: str, line: str) -> None:
        """Queue ``line`` for the stream, never waiting: dropped when the backlog is full, and counted (said with the
        next line of ``prefix`` queued, or as it closes)."""
        with self._lock:
            dropped = self._dropped.pop(prefix, 0)
            try:
                self._lines.put_nowait((prefix, line, dropped))
            except queue.Full:
                self._dropped[prefix] = dropped + 1

    def close(self, timeout: float) -> None:
        """Say how many lines of each prefix were dropped since its last one, write what is queued (for up to
        ``timeout`` seconds in all: a stream nobody reads is given up on), then stop."""
        deadline = time.monotonic() + timeout
        with self._lock:
            counts, self._dropped = self._dropped, {}
        with suppress(queue.Full):
            for prefix, dropped in counts.items():
                self._lines.put((prefix, None, dropped), timeout=max(deadline - time.monotonic(), 0.001))
            self._lines.put(None, timeout=max(deadline - time.monotonic(), 0.001))
        self._thread.join(timeout=max(deadline - time.monotonic(), 0.0))

    def _write(self) -> None:
        """Write each queued line, and the count of those not shown before it; a line the stream refuses is counted
        with them (said before the next one of its prefix the stream takes, or at the end)."""
        refused: dict[str, int] = {}  # lines of each prefix the stream refused since its last one shown
        while (item := self._lines.get()) is not None:
            prefix, line, dropped = item
            dropped += refused.pop(prefix, 0)
            if not self._shown(prefix, line, dropped):
                refused[prefix] = dropped + (1 if line else 0)
        for prefix, dropped in refused.items():
            self._shown(prefix, None, dropped)

    def _shown(self, prefix: str, line: str | None, dropped: int) -> bool:
        """Write ``line`` (None: none) of ``prefix``, after saying ``dropped`` lines were not shown; False where the
        stream refused it (closed or gone: a dropped terminal, a reader that exited; the file still gets it)."""
        try:
            self.stream.write((_not_shown(prefix, dropped) if dropped else "") + (prefix + line if line else ""))
            self.stream.flush()
        except (OSError, ValueError):
            return False
        return True


def _not_shown(prefix: str, dropped: int) -> str:
    """The line saying ``dropped`` lines of ``prefix`` (a worker's ``[QUEUE] ``; "": ``ragscore worker``'s own, which
    no file keeps) were not shown."""
    why = "stderr not read fast enough, or failing"
    if not prefix:
        return f"{dropped} lines of ragscore worker's own not shown here ({why})\n"
    return f"{prefix}{dropped} lines not shown here ({why}); its log file has them all\n"


def tee(source: IO[bytes], log_path: Path, echo: Echo, prefix: str) -> None:
    """Copy a worker's output, line by line, to its log file at ``log_path`` (a :class:`RotatingLog`) and to
    ``echo`` (with ``prefix``), URL passwords hidden in both, until the worker and its pool processes close it;
    closes ``source`` and the file. Waits on neither (a full disk loses lines, it stalls no worker)."""
    log = RotatingLog(log_path)
    try:
        with source:
            for raw in source:
                line = redact_url_passwords(raw.decode(errors="replace"))
                with suppress(OSError):
                    log.write(line.encode())
                echo.offer(prefix, line)
    finally:
        log.close()
