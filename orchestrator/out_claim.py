"""An exclusive claim on a run's ``--out`` DIR, for as long as one process runs (or resumes) a run into it.

``DIR/run.json`` names a run only once its dataset validated, so two runs started at once into one DIR both found it
free, and the reports of one were lost. The claim is an ``flock`` on ``DIR/.ragscore.lock``, taken before anything
is checked: the kernel drops it when its process dies (``kill -9`` too), so a stale lock file never blocks.
"""

from __future__ import annotations

import fcntl
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ragscore_workers.commands import backticked
from ragscore_workers.errors import ConfigError

from .atomic_file import NotRegularFile, make_out_dir, open_regular
from .terminal import cancel_command

__all__ = ["LOCK_NAME", "claim_out_dir"]

#: The lock file in DIR (removed again by the process that held it; a killed one's is reclaimed).
LOCK_NAME = ".ragscore.lock"


#: The DIRs this process holds, by the thread that claimed them: a claim within a claim (``evaluate()`` holds DIR
#: while it writes its rows, then ``run()`` claims it) is the same hold, not a second one.
_HELD: set[tuple[str, int]] = set()


@contextmanager
def claim_out_dir(out_dir: Path) -> Iterator[None]:
    """Hold ``out_dir`` for this process (ConfigError, exit 2, naming its holder when another holds it). A DIR
    created for the claim is removed again when it is left empty (a refused run leaves none behind)."""
    held = (os.path.abspath(out_dir), threading.get_ident())
    if held in _HELD:
        yield
        return
    created = not out_dir.exists()
    fd = _lock(out_dir)
    _HELD.add(held)
    try:
        yield
    finally:
        _HELD.discard(held)
        (out_dir / LOCK_NAME).unlink(missing_ok=True)  # while held: the next claimer opens a new file
        os.close(fd)
        if created:
            try:
                out_dir.rmdir()
            except OSError:  # not empty: the run's reports, or another run's claim
                pass


def _lock(out_dir: Path) -> int:
    """The locked lock file's descriptor (not inherited by the workers): the file at the path now, not one its
    last holder unlinked between our open and our lock."""
    path = out_dir / LOCK_NAME
    while True:
        make_out_dir(out_dir)  # again: a refused claimer may have removed the DIR it had created
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            continue
        except NotRegularFile as exc:  # a link is never followed: it would have us empty the file it names
            raise ConfigError(f"{path} is {exc.strerror}: not the lock file ragscore makes there; remove it") from exc
        except OSError as exc:
            raise ConfigError(f"Cannot write the reports to {out_dir}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "starting"
            os.close(fd)
            raise ConfigError(
                f"{out_dir} is in use by another ragscore process ({holder}) running a run into it: wait for it to "
                f"write its reports, or stop it (Ctrl-C there, or {backticked(cancel_command(out_dir))}); a new run "
                "may take another --out"
            ) from None
        try:
            held, now = os.fstat(fd), os.lstat(path)
            same = (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
            return fd
        os.close(fd)
