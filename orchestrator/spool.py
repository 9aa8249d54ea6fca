"""Shards planned while a dataset is validated, kept on disk until the whole dataset passed its checks.

:func:`~orchestrator.runner.submit` validates every row before it sends any (duplicate ids, a dataset with no valid
row refuse the run with nothing sent). It used to read and validate the whole dataset a second time to send it; the
spool keeps each shard as it will be sent instead (its item keys, work units, digest and chord, as JSON, compressed),
so each row is read and validated once. Memory: one shard's rows, as before (fewer of them where their messages are
big, ``shard_bytes``, or they are: ``SHARD_HELD_FACTOR``: each shard is cut by its own rows' bytes, and where each
starts is recorded, :attr:`ShardSpool.starts`); disk: the shards' messages, compressed
(an unnamed temporary file, gone when the spool closes or the process dies).
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from celery import signature
from celery.canvas import Signature
from pydantic_core import PydanticSerializationError

from ragscore_workers.app import app
from ragscore_workers.planning import DEFAULT_SHARD_BYTES, SHARD_HELD_FACTOR, Shard, ShardStarts
from ragscore_workers.schemas import Row

__all__ = ["PlannedShard", "ShardSpool"]

#: gzip level of the spool: the fastest, which still makes task messages of JSON several times smaller.
COMPRESS_LEVEL = 1


@dataclass(frozen=True)
class PlannedShard:
    """A shard as :func:`~orchestrator.runner.submit` sends it: what the store records of it, and its chord."""

    keys: list[str]
    units: dict[str, int]
    tasks: int
    digest: str
    signature: Signature

    @classmethod
    def of(cls, shard: Shard, digest: str) -> PlannedShard:
        """``shard`` as it is sent, with ``digest`` (what a resume checks its rows by)."""
        return cls(shard.keys, shard.units, shard.tasks, digest, shard.signature)


class ShardSpool:
    """Rows in, whole planned shards out: ``add`` each valid row in dataset order, then iterate the shards.

    ``plan(index, rows)`` plans shard ``index`` of ``rows``; ``digest(rows)`` is what a resume checks them by;
    ``row_bytes(row)``: about how many bytes of task messages ``row`` is sent in (its whole JSON where not given:
    :meth:`~ragscore_workers.planning.ResolvedSuite.message_bytes` for the messages a run plans). The rows are held
    whole while their shard is planned: a shard is cut too once its rows' whole JSON reaches
    :data:`~ragscore_workers.planning.SHARD_HELD_FACTOR` times ``shard_bytes``.
    """

    def __init__(
        self,
        plan: Callable[[int, list[Row]], Shard],
        digest: Callable[[list[Row]], str],
        shard_rows: int,
        directory: Path | None = None,
        shard_bytes: int = DEFAULT_SHARD_BYTES,
        row_bytes: Callable[[Row], int] | None = None,
    ) -> None:
        self._plan, self._digest, self._shard_bytes = plan, digest, shard_bytes
        self._row_bytes = row_bytes
        #: Rows a shard holds at most; fewer where its own rows reach ``shard_bytes`` of messages (or
        #: ``SHARD_HELD_FACTOR`` times that of whole rows) before.
        self.shard_rows = shard_rows
        self._bytes = self._held = 0
        #: Where each shard written starts (its first row's place): a resume cuts the dataset by them.
        self.starts: list[int] = []
        self._next_start = 0
        self._directory = str(directory) if directory is not None else tempfile.gettempdir()
        with self._said():
            self._file: IO[bytes] = tempfile.TemporaryFile(prefix="ragscore-spool-", dir=self._directory)
        self._writer: gzip.GzipFile | None = gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=COMPRESS_LEVEL)
        self._rows: list[Row] = []
        self.shards = 0

    def add(self, row: Row) -> None:
        """One more valid row; a shard is planned and written once it holds ``shard_rows``, or once its rows' task
        messages reach ``shard_bytes`` (``row_bytes``), or their whole JSON ``SHARD_HELD_FACTOR`` times that (the rows
        held while it is planned): each shard by its own rows, so rows bigger later than first make shards of fewer
        rows, not shards past ``shard_bytes`` (:attr:`starts` records where each begins)."""
        self._rows.append(row)
        held = _json_size(row)
        self._held += held
        self._bytes += held if self._row_bytes is None else self._row_bytes(row)
        full = self._bytes >= self._shard_bytes or self._held >= SHARD_HELD_FACTOR * self._shard_bytes
        if full or len(self._rows) >= self.shard_rows:
            self._write()

    @property
    def cut(self) -> ShardStarts:
        """How the shards written cut the rows (what the run records, and its resume cuts the dataset by)."""
        return ShardStarts(self.shard_rows, tuple(self.starts))

    def finish(self) -> None:
        """Plan the last shard (it may hold fewer rows) and complete the file; no row may be added after. A full disk
        says so here at the latest: before the run exists, where the submission calls it."""
        if self._writer is None:
            return
        if self._rows:
            self._write()
        with self._said():
            self._writer.close()  # its last compressed bytes are written now
        self._writer = None

    def __iter__(self) -> Iterator[PlannedShard]:
        """The shards in order (:meth:`finish` first, where not done)."""
        self.finish()
        self._file.seek(0)
        with gzip.GzipFile(fileobj=self._file, mode="rb") as reader:
            for line in reader:
                yield _planned(json.loads(line))

    def _write(self) -> None:
        """Plan the rows held as the next shard and write it (only its write's error is the spool's to say)."""
        assert self._writer is not None, "rows added after the spool was read"
        planned = PlannedShard.of(self._plan(self.shards, self._rows), self._digest(self._rows))
        record = {field.name: getattr(planned, field.name) for field in fields(planned)}
        with self._said():
            self._writer.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self.starts.append(self._next_start)
        self._next_start += len(self._rows)
        self._rows, self._bytes, self._held = [], 0, 0
        self.shards += 1

    @contextmanager
    def _said(self) -> Iterator[None]:
        """An OSError of the spool's unnamed file (a full ``TMPDIR``) said as the spool's, naming its directory: bare,
        ``No space left on device`` reads as the disk of ``--out``."""
        try:
            yield
        except OSError as exc:
            raise OSError(exc.errno, f"{exc.strerror or exc}: the dataset's planned shards are kept there (about 1/5 "
                          "of its size) until it is all read; set TMPDIR to a directory with room, then run again",
                          self._directory) from exc  # fmt: skip

    def close(self) -> None:
        """Drop the spool (its file is gone with it), whatever its state: a full disk may refuse the writer's end and
        the file's buffer, which would hide the error said (the file's descriptor is closed all the same)."""
        writer, self._writer = self._writer, None
        with suppress(OSError):  # what it could not write is dropped with the file
            if writer is not None:
                writer.close()
        with suppress(OSError):
            self._file.close()

    def __enter__(self) -> ShardSpool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _json_size(row: Row) -> int:
    """About how many bytes ``row`` takes as JSON (a text with a lone surrogate, which pydantic's JSON refuses, is
    measured as its message is sent)."""
    try:
        return len(row.model_dump_json(exclude_none=True))
    except PydanticSerializationError:
        return len(json.dumps(row.to_message()))


def _planned(record: dict[str, Any]) -> PlannedShard:
    """A spooled shard, its chord rebuilt from its JSON (the same messages, sent by the same app)."""
    return PlannedShard(**record | {"signature": signature(record["signature"], app=app)})
