"""The tests' helpers that read processes found by a listing: one that exits between the listing and the read is read
as gone, not raised on (a CI's loaded run: a pool process, a helper, a worker ending meanwhile)."""

from __future__ import annotations

import signal
import subprocess

import psutil

from ..sandbox.support import is_slot_helper
from ..support import command_line, signal_each


def test_a_process_that_ended_after_it_was_listed_reads_as_no_command_line_and_no_slot_helper() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        (listed,) = [p for p in psutil.Process().children() if p.pid == child.pid]
        assert command_line(listed) == ["sleep", "30"]
    finally:
        child.kill()
        child.wait(10)  # reaped: its /proc entry is gone
    assert command_line(listed) == []
    assert not is_slot_helper(child.pid)


def test_a_signal_to_each_listed_process_passes_over_one_that_ended_and_reaches_the_others() -> None:
    ended, running = subprocess.Popen(["sleep", "30"]), subprocess.Popen(["sleep", "30"])
    try:
        listed = [p for p in psutil.Process().children() if p.pid in (ended.pid, running.pid)]
        ended.kill()
        ended.wait(10)
        signal_each(sorted(listed, key=lambda p: p.pid != ended.pid), signal.SIGKILL)  # the ended one first
        assert running.wait(10) == -signal.SIGKILL
    finally:
        running.kill()
        running.wait(10)
