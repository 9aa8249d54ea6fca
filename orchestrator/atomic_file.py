"""Write a file so that readers see the old file or the whole new one, never a part: the text goes to a
hidden ``.NAME.RANDOM.partial`` beside it, which replaces the target only once every byte is written (a full disk
or an interrupt leaves the previous file, or none, and no truncated report). Each writer has a temporary file of
its own: two processes writing the same report do not write into one file, and each replaces the target with a
whole one."""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from ragscore_workers.errors import ConfigError

__all__ = [
    "NotRegularFile",
    "atomic_writer",
    "copy_atomic",
    "link_target",
    "make_out_dir",
    "name_part",
    "open_regular",
    "said_os_error",
    "write_text_atomic",
]

#: What a part of a file's name may not hold (a path's separator, a space): each run of it is written ``_``.
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def name_part(text: str) -> str:
    """``text`` (a run id, a system name, a host name) as a part of a file's or folder's name: each run of what is
    not a letter, digit, ``.``, ``_`` or ``-`` written ``_``, no dot at its ends (never ``..``), never empty."""
    return _NOT_IN_A_NAME.sub("_", text).strip(".") or "_"


#: Names tried for a writer's temporary file before giving up (each a fresh random one).
TEMP_NAME_ATTEMPTS = 100


def make_out_dir(path: Path, what: str = "the reports") -> Path:
    """``path``, created with its parents when missing; ConfigError (exit 2) naming it, and ``what`` was to be
    written there, when it cannot be: a file of that name, a parent that is a file, no permission."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot write {what} to {path}: {exc.strerror or exc}") from exc
    return path


def link_target(path: Path, option: str) -> Path:
    """The file a path the user named as one to write (``consensus --out FILE``, ``--junit FILE``) stands for: where
    it is a link, the file the link names (written there, as a shell's ``>`` writes, and the link kept: replacing
    ``path`` would replace the link with a file and leave its target as it was); else ``path``. Only for a path the
    user named: a link standing in a DIR they named (``--out DIR``) is never followed (a report replaces it); links
    that lead round in a loop are refused (ConfigError), naming ``option``."""
    if not path.is_symlink():
        return path
    loop = ConfigError(f"{option} {path} is a link in a loop of links, to no file: nothing was written")
    try:
        target = path.resolve()
    except (RuntimeError, OSError) as exc:  # a loop, before Python 3.13
        raise loop from exc
    if target.is_symlink():  # a loop, since Python 3.13: given back as far as it was resolved, still a link
        raise loop
    return target


@contextmanager
def atomic_writer(path: Path, *, errors: str = "strict", newline: str | None = None) -> Iterator[TextIO]:
    """Open ``path`` for writing UTF-8 text; it appears (replacing any old file) when the block ends without
    an error, and the temporary file is removed when it does not."""
    tmp, fd = _create_temp(path)
    try:
        try:
            fh = open(fd, "w", encoding="utf-8", errors=errors, newline=newline)  # noqa: SIM115 - closed below
        except BaseException:
            os.close(fd)
            raise
        with fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def copy_atomic(source: Path, path: Path) -> None:
    """``source``'s bytes as ``path``, as they are (never read as lines), atomically (see ``atomic_writer``)."""
    tmp, fd = _create_temp(path)
    try:
        with open(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _create_temp(path: Path) -> tuple[Path, int]:
    """A new, empty hidden file beside ``path`` that no other writer has, and its descriptor. Created as ``open``
    creates a file (mode 0666 less the umask: a report is 0644 as before), not 0600 as ``tempfile.mkstemp`` makes
    it; ``O_EXCL`` makes it this writer's own."""
    for _ in range(TEMP_NAME_ATTEMPTS):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        except OSError as exc:  # a read-only or missing folder: named as the report, not its random temporary name
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
    raise FileExistsError(f"no free temporary name beside {path} after {TEMP_NAME_ATTEMPTS} tries")


class NotRegularFile(OSError):
    """What :func:`open_regular` found at a path: a link (never followed), a FIFO, a device, a folder."""


def open_regular(path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open(path, flags, mode)`` of a file ragscore keeps in a DIR others may write to (a lock, a record): never
    through a link (one in a shared DIR would have it make, empty or lock a file elsewhere) and only a regular file
    (a FIFO is opened without waiting for a writer, then refused): NotRegularFile otherwise, naming ``path``."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(exc.errno, "a link, not a file", str(path)) from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
    return fd


def said_os_error(exc: OSError) -> str:
    """``Is a directory (DIR/items.csv)``: ``exc`` as said to the user, naming the report (``os.replace``'s target),
    not the hidden temporary file it was written to first."""
    target = exc.filename2 or exc.filename
    return f"{exc.strerror or exc}{f' ({target})' if target else ''}"


def write_text_atomic(path: Path, text: str, *, errors: str = "strict") -> None:
    """``path.write_text(text)``, atomically (see ``atomic_writer``)."""
    with atomic_writer(path, errors=errors) as fh:
        fh.write(text)
