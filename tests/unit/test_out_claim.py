"""The claim on a run's --out DIR: one process at a time, and a killed holder's lock file never blocks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.out_claim import LOCK_NAME, claim_out_dir
from ragscore_workers.errors import ConfigError

from ..support import ROOT, next_line

#: A process that claims the DIR given and holds it.
HOLD = (
    "import sys, time; from pathlib import Path; from orchestrator.out_claim import claim_out_dir\n"
    "with claim_out_dir(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(600)\n"
)


def _holder(out: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.stdout is not None and next_line(proc.stdout, 180) == "held\n"
    return proc


def test_a_dir_another_process_holds_is_refused_naming_it_and_a_killed_holders_lock_does_not_block(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    holder = _holder(out)
    try:
        with pytest.raises(ConfigError, match=f"is in use by another ragscore process \\(pid {holder.pid} on "):
            with claim_out_dir(out):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    assert (out / LOCK_NAME).exists(), "kill -9 leaves its lock file"
    with claim_out_dir(out):
        assert f"pid {os.getpid()} " in (out / LOCK_NAME).read_text()
    assert not (out / LOCK_NAME).exists()


def test_a_dir_created_for_a_claim_is_removed_when_left_empty(tmp_path: Path) -> None:
    with claim_out_dir(tmp_path / "new"):
        assert (tmp_path / "new").is_dir()
    assert not (tmp_path / "new").exists()
    with claim_out_dir(tmp_path / "kept"):
        (tmp_path / "kept" / "summary.json").write_text("{}")
    assert (tmp_path / "kept" / "summary.json").exists()


def test_a_claim_within_a_claim_of_the_same_thread_is_the_same_hold_and_another_threads_is_refused(
    tmp_path: Path,
) -> None:
    """evaluate() holds DIR while it writes its rows, then run() claims it again: that must not refuse itself."""
    import threading

    out = tmp_path / "out"
    refused: list[BaseException] = []

    def other() -> None:
        try:
            with claim_out_dir(out):
                pass
        except ConfigError as exc:
            refused.append(exc)

    with claim_out_dir(out):
        with claim_out_dir(out):
            assert (out / LOCK_NAME).exists()
        assert (out / LOCK_NAME).exists()  # the inner one left the hold as it was
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(10)
    assert len(refused) == 1 and "is in use by another ragscore process" in str(refused[0])
    with claim_out_dir(out):  # released whole
        pass


def test_a_lock_file_that_is_a_link_is_refused_and_what_it_points_to_kept(tmp_path: Path) -> None:
    """The claim opened DIR/.ragscore.lock O_RDWR | O_CREAT through a link, then truncated it and wrote its pid
    there: a link in a shared --out DIR emptied whatever file of the user's it pointed to (or made one there)."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "notes.txt"
    victim.write_text("the user's own\n")
    (out / LOCK_NAME).symlink_to(victim)
    with pytest.raises(ConfigError, match=LOCK_NAME), claim_out_dir(out):
        pass
    assert victim.read_text() == "the user's own\n"
    (out / LOCK_NAME).unlink()
    (out / LOCK_NAME).symlink_to(tmp_path / "made")
    with pytest.raises(ConfigError, match=LOCK_NAME), claim_out_dir(out):
        pass
    assert not (tmp_path / "made").exists()


def test_the_cancel_a_held_dir_says_is_quoted_for_the_shell(tmp_path: Path) -> None:
    """`ragscore cancel DIR` was written unquoted: a DIR with a space, pasted, cancelled a run named by its first
    half. It is quoted as every other command a message says (terminal.cancel_command)."""
    out = tmp_path / "my out"
    holder = _holder(out)
    try:
        with pytest.raises(ConfigError) as refused:
            with claim_out_dir(out):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    assert f"(Ctrl-C there, or `ragscore cancel '{out}'`)" in str(refused.value), refused.value
