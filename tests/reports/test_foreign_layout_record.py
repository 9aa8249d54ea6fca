"""The record of the foreign-layout files ragscore wrote (``DIR/.ragscore-written.json``, ``report --format
nlp-project``): it survives a report killed part-way and reports written into one DIR at once."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.reports.files import WRITTEN_NAME, write_recorded
from ragscore_workers.errors import ConfigError

from ..support import ROOT, until

NAME = "dev_evaluation.json"

#: A report killed (SIGKILL) at its second replace of a file in DIR: between writing the file and writing the record,
#: whichever it writes first. ``os.replace`` raises the ``os.rename`` audit event just before it renames.
KILLED_AT_SECOND_REPLACE = """
import os, signal, sys
from pathlib import Path
from orchestrator.reports.files import write_recorded

out, text = Path(sys.argv[1]), sys.argv[2]
replaced = []

def hook(event, args):
    if event == "os.rename" and Path(os.fsdecode(args[1])).parent == out:
        replaced.append(args[1])
        if len(replaced) == 2:
            os.kill(os.getpid(), signal.SIGKILL)

sys.addaudithook(hook)
write_recorded(out / "dev_evaluation.json", text)
"""

#: Writes names ``{tag}-{i}.json`` once a file ``go`` stands in DIR (all writers start together).
WRITER = """
import sys, time
from pathlib import Path
from orchestrator.reports.files import write_recorded

out, tag, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
(out.parent / f"{tag}.ready").touch()  # imported: it waits for the others
while not (out / "go").exists():
    time.sleep(0.001)
for i in range(n):
    write_recorded(out / f"{tag}-{i}.json", f'{{"writer": "{tag}", "i": {i}}}\\n')
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _recorded(out: Path) -> dict[str, list[str]]:
    return json.loads((out / WRITTEN_NAME).read_text(encoding="utf-8"))


def _python(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, text=True, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip


def test_a_report_killed_between_the_file_and_the_record_leaves_a_file_the_next_report_replaces(
    tmp_path: Path,
) -> None:
    """The file was written before the record: a report killed between the two left ragscore's own file with no
    record of it, and every later report refused to replace it. Now the record names the new file's hash (and
    keeps the previous one) before the file is written: whichever of them stands is recorded as ragscore's."""
    out = tmp_path / "out"
    write_recorded(out / NAME, '{"v": 1}\n')
    killed = _python("-c", KILLED_AT_SECOND_REPLACE, str(out), '{"v": 2}\n')
    _, err = killed.communicate(timeout=120)
    assert killed.returncode == -9, err
    assert _sha256(out / NAME) in _recorded(out)[NAME], "the file that stands is recorded as ragscore's"
    write_recorded(out / NAME, '{"v": 3}\n')  # not refused
    assert (out / NAME).read_text() == '{"v": 3}\n' and _recorded(out)[NAME][0] == _sha256(out / NAME)
    (out / NAME).write_text('{"v": "edited"}\n')  # the user's edit is still theirs
    with pytest.raises(ConfigError, match="which ragscore has no record of writing"):
        write_recorded(out / NAME, '{"v": 4}\n')


def test_a_record_of_an_older_ragscore_one_hash_a_name_is_read(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / NAME).write_text('{"old": 1}\n')
    (out / WRITTEN_NAME).write_text(json.dumps({NAME: _sha256(out / NAME)}))
    write_recorded(out / NAME, '{"new": 1}\n')
    assert (out / NAME).read_text() == '{"new": 1}\n'
    assert _recorded(out)[NAME][0] == _sha256(out / NAME)


def test_reports_written_into_one_dir_at_once_lose_no_entry_of_the_record(tmp_path: Path) -> None:
    """The record was read, merged and written with no lock: of two reports into one DIR at once, the later
    replace dropped the other's entry (its file then refused as not ragscore's)."""
    out = tmp_path / "out"
    out.mkdir()
    writers, names = 6, 15
    procs = [_python("-c", WRITER, str(out), f"w{w}", str(names)) for w in range(writers)]
    # all imported before any writes (a fixed sleep for their imports left the later ones to write alone when loaded)
    ready = [tmp_path / f"w{w}.ready" for w in range(writers)]
    assert until(lambda: all(r.exists() for r in ready), 300), "a writer never started"
    (out / "go").touch()
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    recorded = _recorded(out)
    expected = {f"w{w}-{i}.json" for w in range(writers) for i in range(names)}
    assert expected - set(recorded) == set(), "entries lost"
    assert all(recorded[name][0] == _sha256(out / name) for name in expected)


#: write_recorded in a process of its own, so that a report that hangs (opening a FIFO) can be stopped.
WRITE_ONE = """
import sys
from pathlib import Path
from orchestrator.reports.files import write_recorded
from ragscore_workers.errors import ConfigError

try:
    write_recorded(Path(sys.argv[1]) / "dev_evaluation.json", '{"v": 1}\\n')
except ConfigError as exc:
    print(f"refused: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def _write_one(out: Path) -> subprocess.CompletedProcess[str]:
    proc = _python("-c", WRITE_ONE, str(out))
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)  # killed: its end comes at once (its pipes are not read: a child may hold them)
        pytest.fail("the report hung")
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


def test_a_lock_file_that_is_a_link_or_a_fifo_is_neither_followed_nor_opened_for_writing(tmp_path: Path) -> None:
    """The lock was opened O_RDWR | O_CREAT through whatever stood at DIR/.ragscore-written.lock: a link in a shared
    DIR made a file wherever it pointed (or opened a device there for writing). Now it is refused, naming it."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    (out / ".ragscore-written.lock").symlink_to(victim)
    said = _write_one(out)
    assert not victim.exists(), "a file was made where the link points"
    assert said.returncode == 2 and ".ragscore-written.lock" in said.stderr, said.stderr
    assert not (out / NAME).exists()
    (out / ".ragscore-written.lock").unlink()
    os.mkfifo(out / ".ragscore-written.lock")
    said = _write_one(out)
    assert said.returncode == 2 and ".ragscore-written.lock" in said.stderr, said.stderr


def test_a_record_that_is_a_fifo_or_a_link_is_not_read(tmp_path: Path) -> None:
    """The record was read with read_text through whatever stood at DIR/.ragscore-written.json: a FIFO held the
    report for ever, and a link had it read a file elsewhere (its names then copied into DIR's record)."""
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / WRITTEN_NAME)
    said = _write_one(out)
    assert said.returncode == 0, said.stderr
    assert (out / NAME).read_text() == '{"v": 1}\n' and list(_recorded(out)) == [NAME]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"secret-name": ["0" * 64]}))
    (out / WRITTEN_NAME).unlink()
    (out / WRITTEN_NAME).symlink_to(other)
    (out / NAME).unlink()
    assert _write_one(out).returncode == 0
    assert list(_recorded(out)) == [NAME], "the linked file's names were copied"


def test_a_lock_held_for_ever_stops_the_report_in_bounded_time_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock was waited for with no bound: a process holding it (a hung report, or any user who can read the
    lock file, which flock needs no more than) held every report into DIR for ever, silent."""
    import fcntl
    import threading

    from orchestrator.reports import files

    monkeypatch.setattr(files, "WRITTEN_LOCK_WAIT_S", 1.0)  # the bound, short for the test
    out = tmp_path / "out"
    out.mkdir()
    holder = os.open(out / files.WRITTEN_LOCK, os.O_RDONLY | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)
    said: list[BaseException | None] = []

    def report() -> None:
        try:
            write_recorded(out / NAME, '{"v": 1}\n')
            said.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            said.append(exc)

    writer = threading.Thread(target=report, daemon=True)
    try:
        writer.start()
        writer.join(60)
        assert said, "the report waited on the lock for ever"
    finally:
        os.close(holder)  # lets a report that waits finish
        writer.join(60)
    assert isinstance(said[0], ConfigError) and files.WRITTEN_LOCK in str(said[0]), said
    assert not (out / NAME).exists()


def test_a_dir_whose_file_system_has_no_locks_is_still_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """flock fails with ENOLCK on an NFS mount whose lock manager does not answer (EOPNOTSUPP, ENOSYS elsewhere):
    the report, which wrote there before the lock, stopped with a traceback. It writes as it did then, unlocked."""
    import errno
    import fcntl

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)  # the kernel's answer on such a mount
    write_recorded(tmp_path / "out" / NAME, '{"v": 1}\n')
    assert (tmp_path / "out" / NAME).read_text() == '{"v": 1}\n'
    assert _recorded(tmp_path / "out")[NAME] == [_sha256(tmp_path / "out" / NAME)]


def test_a_link_standing_in_dir_is_never_written_through(tmp_path: Path) -> None:
    """A link in DIR is no path the user named (another may have put it there, pointing anywhere): its target, outside
    DIR, is never written (``consensus --out LINK``, a path named, writes its target). A link to a file of another's
    is refused; one to a file holding these very bytes is replaced by the file, its target left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"theirs": 1}\n')
    (out / NAME).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="which ragscore has no record of writing"):
        write_recorded(out / NAME, '{"v": 1}\n')
    assert elsewhere.read_text() == '{"theirs": 1}\n' and (out / NAME).is_symlink()
    elsewhere.write_text('{"v": 1}\n')
    before = elsewhere.stat()
    write_recorded(out / NAME, '{"v": 1}\n')
    assert not (out / NAME).is_symlink() and (out / NAME).read_text() == '{"v": 1}\n'
    after = elsewhere.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "the link's target was written"
