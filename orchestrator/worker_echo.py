"""``ragscore worker``'s copy of its workers' output: each line to the worker's log file and, ``[QUEUE]``-prefixed, to
this command's stderr (the journal, the container's log), URL passwords hidden in both.

Neither may stall a worker: a worker blocks once its output pipe is full, so the copier never waits on stderr (a
supervisor may capture it and stop reading). It hands each line to :class:`Echo`, whose own thread writes stderr;
past ``ECHO_BACKLOG`` lines waiting, a line is dropped from stderr, and stderr says how many once it moves again. The
file keeps every line."""

from __future__ import annotations

import queue
import threading
from contextlib import suppress
from typing import IO, TextIO

from ragscore_workers.providers.errors import redact_url_passwords

__all__ = ["ECHO_BACKLOG", "Echo", "tee"]

#: Log lines waiting for stderr before further ones are dropped from it (their files keep them).
ECHO_BACKLOG = 1000


class Echo:
    """Writes workers' log lines to ``stream`` from a thread of its own; :meth:`offer` never blocks."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        #: (prefix, line or None, how many lines of this prefix were dropped before it); None ends the thread.
        self._lines: queue.Queue[tuple[str, str | None, int] | None] = queue.Queue(maxsize=ECHO_BACKLOG)
        self._thread = threading.Thread(target=self._write, daemon=True)
        self._thread.start()

    def offer(self, prefix: str, line: str | None, dropped: int = 0, *, wait: float = 0.0) -> bool:
        """Queue ``line`` (None: only the count of ``dropped`` ones) for the stream; False, at once or after
        ``wait`` seconds, when the backlog is full (the line is dropped: the caller counts it)."""
        try:
            self._lines.put((prefix, line, dropped), block=wait > 0, timeout=wait or None)
        except queue.Full:
            return False
        return True

    def close(self, timeout: float) -> None:
        """Write what is queued (for up to ``timeout`` seconds: a stream nobody reads is given up on), then stop."""
        with suppress(queue.Full):
            self._lines.put(None, timeout=timeout)
        self._thread.join(timeout=timeout)

    def _write(self) -> None:
        while (item := self._lines.get()) is not None:
            prefix, line, dropped = item
            text = f"{prefix}{dropped} lines not shown here (stderr not read fast enough); its log file has them all\n"
            with suppress(OSError, ValueError):  # stderr closed or gone (a dropped terminal): the file still gets it
                self.stream.write((text if dropped else "") + (prefix + line if line is not None else ""))
                self.stream.flush()


def tee(source: IO[bytes], log: IO[bytes], echo: Echo, prefix: str) -> None:
    """Copy a worker's output, line by line, to its log file and to ``echo`` (with ``prefix``), URL passwords
    hidden in both, until the worker and its pool processes close it; closes ``source`` and ``log``. Waits on
    neither (a full disk loses lines, it stalls no worker)."""
    dropped = 0
    with source, log:
        for raw in source:
            line = redact_url_passwords(raw.decode(errors="replace"))
            with suppress(OSError):
                log.write(line.encode())
                log.flush()
            dropped = 0 if echo.offer(prefix, line, dropped) else dropped + 1
    if dropped:  # the worker is gone: waiting a little on stderr stalls nothing
        echo.offer(prefix, None, dropped, wait=5.0)
