"""A worker says, in the run store, what it does for a run before the units it works on are written: it loads a model,
it encodes a chunk's texts (``ragscore status``, the live progress: ``embed: loading all-MiniLM-L6-v2 on cpu (12 s)``,
``embed: encoding 1,234 texts (20 s)``, not "no progress"), cheaply and never for ever.

The note is one field of the run's ``loading`` hash per block of a worker thread (``{host}:{pid}:{thread}:{block}``),
whose value says the queue and what it does, when that began and until when the note holds (both on the store's clock,
ms). A beat every ``LOAD_BEAT_S`` pushes that end ``LOAD_TTL_S`` on while it lasts; the field goes when it ends, however
it ends. A worker killed mid-load leaves a field whose end passes within ``LOAD_TTL_S``: the readers
(:func:`ragscore_workers.store.RunStore.progress`) drop it, and the key's own TTL takes it away.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from .embedding import Noting, Retell
from .store import LOADING_PART, RunStore, loading_value

__all__ = ["LOAD_BEAT_S", "LOAD_TTL_S", "MAX_NOTE_WRITERS", "RETELL_S", "noting", "noting_loads"]

log = logging.getLogger(__name__)

#: Seconds a note of a load holds without a beat (a worker killed mid-load leaves it this long at most).
LOAD_TTL_S = 30.0
#: Seconds between two beats of a load under way.
LOAD_BEAT_S = 10.0
#: Fewest seconds between two writes of a note its block retells (an encoding's count of texts done): at most two a
#: second per worker thread.
RETELL_S = 0.5
#: Most note writers one process keeps (:func:`noting`): each waits out a Redis that does not answer for the client's
#: timeout and retries (minutes), so a worker encoding short chunks through an outage would start one per chunk, each
#: holding a connection of the store's pool (the worker's own writes wait for one). Past this, a block goes un-noted.
MAX_NOTE_WRITERS = 32


def _store_ms(client: Any) -> int:
    """The store's clock (Redis ``TIME``), ms: the readers date the note on it."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@contextmanager
def noting(client: Any, run_id: str, queue: str, doing: str) -> Iterator[Retell]:
    """Note, for ``run_id``, that this thread does ``doing`` (``loading all-MiniLM-L6-v2 on cpu``) to serve ``queue``
    while the block runs. The block gets a :data:`~ragscore_workers.embedding.Retell`: what it tells it (``encoding
    2,048 texts: 512 done``) replaces the note. A thread of the block's own writes the note, beats it, rewrites it at
    most every :data:`RETELL_S` and clears it when the block ends: the block never waits on Redis (a Redis that does
    not answer would hold a chunk's encoding for the client's timeout), and a Redis error costs only the note."""
    key = RunStore.key(run_id, LOADING_PART)
    # A field per block: a clear that a hung Redis delays never takes away the next block's note of this thread.
    field = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}:{next(_BLOCKS)}"
    said = _Said(doing)
    if not _WRITERS.acquire(blocking=False):  # earlier blocks' writers still wait on the store: the note is best-effort
        log.debug("not noting %r for run %s: %d note writers wait on the store", doing, run_id, MAX_NOTE_WRITERS)
        yield said.retell
        return
    writer = threading.Thread(
        target=_write_notes, args=(client, run_id, queue, key, field, said), name="worker-note-beat", daemon=True
    )
    try:
        writer.start()
    except BaseException:
        _WRITERS.release()
        raise
    try:
        yield said.retell
    finally:
        said.end()  # the writer clears the note: not waited for


#: Numbers :func:`noting`'s blocks in this process (each its own field of the run's ``loading`` hash).
_BLOCKS = itertools.count()
#: The note writers this process may start yet (:data:`MAX_NOTE_WRITERS`): each gives its place back as it ends.
_WRITERS = threading.BoundedSemaphore(MAX_NOTE_WRITERS)


def _write_notes(client: Any, run_id: str, queue: str, key: str, field: str, said: _Said) -> None:
    """The writer of a :func:`noting` block's note (``field`` of the hash ``key``): written at once, beaten and
    retold while the block lasts (:meth:`_Said.next_write`), then cleared. A first write that fails gives up the
    note; a later one is tried again at the next beat."""
    try:
        _note_till_the_end(client, run_id, queue, key, field, said)
    finally:
        _WRITERS.release()


def _note_till_the_end(client: Any, run_id: str, queue: str, key: str, field: str, said: _Said) -> None:
    """:func:`_write_notes`' work, in the writer thread: the note written, beaten, retold, then cleared."""

    def note(since_ms: int) -> None:
        until_ms = _store_ms(client) + round(LOAD_TTL_S * 1000)
        pipe = client.pipeline(transaction=False)
        pipe.hset(key, field, loading_value(queue, said.doing, since_ms, until_ms))
        pipe.pexpire(key, round(LOAD_TTL_S * 1000))
        pipe.execute()

    try:
        since_ms = _store_ms(client)
        note(since_ms)
    except redis.RedisError as exc:
        log.warning("could not note %r for run %s: %s", said.doing, run_id, exc)
        return
    while said.next_write():
        try:
            note(since_ms)
        except redis.RedisError as exc:
            log.debug("could not note %r for run %s: %s", said.doing, run_id, exc)
    try:
        client.hdel(key, field)
    except redis.RedisError as exc:  # the note's end passes within LOAD_TTL_S all the same
        log.debug("could not clear the note of run %s: %s", run_id, exc)


class _Said:
    """What a :func:`noting` block says (``doing``), changed by its block (:meth:`retell`) and written by its beat
    thread (:meth:`next_write`): every :data:`LOAD_BEAT_S`, and soon after a retelling, at most every
    :data:`RETELL_S`."""

    def __init__(self, doing: str) -> None:
        self.doing = doing
        self.stop = threading.Event()
        self.told = threading.Event()

    def retell(self, doing: str) -> None:
        """Say ``doing`` instead (a plain assignment: the caller never waits on Redis)."""
        self.doing = doing
        self.told.set()

    def end(self) -> None:
        """The block ended: the beat thread stops at once."""
        self.stop.set()
        self.told.set()

    def next_write(self) -> bool:
        """Wait until the note is to be written again (a beat, or a retelling :data:`RETELL_S` after the last write);
        False once the block ended."""
        if self.stop.wait(RETELL_S):  # writes at most every RETELL_S
            return False
        self.told.wait(LOAD_BEAT_S - RETELL_S)
        self.told.clear()
        return not self.stop.is_set()


def noting_loads(client: Any, run_id: str, queue: str) -> Noting | None:
    """The ``noting`` hook :func:`~ragscore_workers.embedding.embed` takes, noting its model's load and its encoding
    for ``run_id`` (None without a store: nobody to tell)."""
    if client is None:
        return None
    return lambda doing: noting(client, run_id, queue, doing)
