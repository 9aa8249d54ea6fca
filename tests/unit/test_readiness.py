"""A local worker says READY, then DRAINED once its last task ended, on the pipe its starter passed it (real pipes)."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from ragscore_workers import readiness
from ragscore_workers.readiness import DRAINED, READY, READY_FD_ENV, say_drained, say_ready


def _pipe_said_ready(monkeypatch: pytest.MonkeyPatch) -> int:
    """A pipe whose write end :func:`say_ready` wrote READY on and kept; returns its read end."""
    read, write = os.pipe()
    monkeypatch.setenv(READY_FD_ENV, str(write))
    say_ready()
    assert os.read(read, 16) == READY
    return read


def test_drained_is_said_once_no_task_is_held_then_the_pipe_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    read = _pipe_said_ready(monkeypatch)
    ended = threading.Event()
    try:
        thread = say_drained(lambda: 0 if ended.is_set() else 1)
        assert thread is not None and thread.daemon
        os.set_blocking(read, False)
        with pytest.raises(BlockingIOError):  # a task in flight: nothing said, the pipe still open
            os.read(read, 16)
        os.set_blocking(read, True)
        ended.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert os.read(read, 16) == DRAINED
        assert os.read(read, 16) == b""  # closed: no other writer
    finally:
        os.close(read)


def test_a_starter_gone_ends_the_drained_thread_without_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Its starter killed (``kill -9``), a worker SIGTERMed by ``die_with_parent`` finds the pipe's reader gone: there
    is nobody to tell, and its log gets no warning about it."""
    os.close(_pipe_said_ready(monkeypatch))
    with caplog.at_level(logging.WARNING, logger=readiness.__name__):
        thread = say_drained(lambda: 0)
        assert thread is not None
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert caplog.records == []


def test_a_worker_started_without_a_pipe_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(READY_FD_ENV, raising=False)
    say_ready()
    assert say_drained(lambda: 0) is None
