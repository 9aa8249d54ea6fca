"""Write a file so that readers see the old file or the whole new one, never a part: the text goes to a
hidden ``.NAME.partial`` beside it, which replaces the target only once every byte is written (a full disk or
an interrupt leaves the previous file, or none, and no truncated report)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from ragscore_workers.errors import ConfigError

__all__ = ["atomic_writer", "make_out_dir", "write_text_atomic"]


def make_out_dir(path: Path) -> Path:
    """``path``, created with its parents when missing; ConfigError (exit 2) naming it when it cannot be: a file
    of that name, a parent that is a file, no permission."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"Cannot write the reports to {path}: {exc.strerror or exc}") from exc
    return path


@contextmanager
def atomic_writer(path: Path, *, errors: str = "strict", newline: str | None = None) -> Iterator[TextIO]:
    """Open ``path`` for writing UTF-8 text; it appears (replacing any old file) when the block ends without
    an error, and the temporary file is removed when it does not."""
    tmp = path.with_name(f".{path.name}.partial")
    try:
        with tmp.open("w", encoding="utf-8", errors=errors, newline=newline) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, *, errors: str = "strict") -> None:
    """``path.write_text(text)``, atomically (see ``atomic_writer``)."""
    with atomic_writer(path, errors=errors) as fh:
        fh.write(text)
