"""The tests' own helpers (:mod:`tests.support`) that wait on other processes never hang nor lose what they read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from ..support import next_line, output_of, until


def test_a_line_that_comes_after_a_timed_out_next_line_is_the_next_calls() -> None:
    """A :func:`next_line` that timed out left its reader thread blocked on the stream: the line that came next was
    read by it and lost, and the next call's second reader waited for the line after (here, for ever). The next call
    on that stream takes that reader's line now, and no reader is left once it came."""
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as stream, os.fdopen(write_end, "w") as writer:
        readers = threading.active_count()
        with pytest.raises(AssertionError, match="no line read within"):
            next_line(stream, 0.05)
        writer.write("first\n")
        writer.flush()
        assert next_line(stream, 30) == "first\n"
        assert until(lambda: threading.active_count() < readers + 1, 30), "a reader thread was left blocked"
        writer.write("second\n")
        writer.flush()
        assert next_line(stream, 30) == "second\n"


def test_the_output_of_an_exited_process_whose_child_holds_its_pipes_is_no_hang() -> None:
    """An assert's message ``proc.communicate()`` (of a run that exited too soon) waited for ever where a child of it
    (a worker) still held its pipes: the test hung where it should have failed. :func:`output_of` reads a bounded
    time, and says so."""
    child = "import subprocess; subprocess.Popen(['sleep', '600']); print('parent out', flush=True)"
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        proc.wait(timeout=60)  # the parent exits at once; its sleeping child keeps the pipes open
        assert output_of(proc, timeout=0.5) == "(its output did not end within 0.5 s)"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
