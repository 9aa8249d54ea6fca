"""Where a dataset's rows differ from a run's submitted ones, as a resume's refusal says it: each changed shard (up to
MAX_SHARDS_NAMED, the rest counted) with where its rows are not the run's (up to MAX_ROWS_NAMED places overall). Rows
inserted or removed move every later row by as many: the rows after them are compared with the run's moved so, and a
shard whose rows are only moved is not named."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from ragscore_workers.counts import counted, listed, noun

#: A row's item keys (one per target, or its one key).
Keys = tuple[str, ...]

#: The places a resume's refusal describes, all shards together, and the run's rows it names where they are gone
#: from the dataset.
MAX_ROWS_NAMED = 3
#: The changed shards a resume's refusal names; the rest are counted.
MAX_SHARDS_NAMED = 5
#: What a shard whose rows' ids are not the run's is said to be, before where.
OTHER_IDS = "other ids or order"


class RunRows:
    """The run's rows (each its item keys) by their place in the run, read a shard at a time (``item_keys(shard)``;
    every shard but the last holds ``shard_rows`` rows), the last few shards kept."""

    def __init__(self, item_keys: Callable[[int], list[str]], shard_rows: int) -> None:
        self.keys = lru_cache(maxsize=4)(item_keys)
        self.shard_rows = shard_rows

    def between(self, lo: int, hi: int, per_row: int) -> list[Keys]:
        """The run's rows ``lo`` to ``hi`` (fewer where the run ends before ``hi``)."""
        first = lo // self.shard_rows
        rows: list[Keys] = []
        for shard in range(first, -(-hi // self.shard_rows)):
            keys = self.keys(shard)
            if not keys:
                break
            rows += [tuple(keys[i : i + per_row]) for i in range(0, len(keys), per_row)]
        skip = first * self.shard_rows
        return rows[lo - skip : hi - skip]

    def resync(self, at: int, first: Keys, per_row: int) -> int:
        """Where a shard whose first row is ``first`` starts in the run's rows: ``at``, or back at ``first``'s place
        where it is one of the run's ``shard_rows`` rows before ``at`` (the shard before, its rows not the run's, was
        compared with as many of the run's rows as it holds, and held fewer: a row inserted and one renamed)."""
        before = self.between(max(0, at - self.shard_rows), at, per_row)
        return at - len(before) + before.index(first) if first in before else at

    def count(self, n_shards: int, per_row: int) -> int:
        """How many rows the run's ``n_shards`` shards hold (its last shard read, not every one)."""
        return (n_shards - 1) * self.shard_rows + len(self.keys(n_shards - 1)) // per_row if n_shards else 0


def shard_places(mine: list[Keys], run: list[Keys], lines: list[int], run_ends: bool) -> tuple[list[str], int]:
    """Where a shard's rows (``mine``, read from ``lines``) are not the run's rows from where they should start
    (``run``: two shards of them, or fewer where the run ends: ``run_ends``), and how many of ``run`` they take the
    place of. Rows inserted or removed there are told as such (:func:`_moved_by`), the rest of the shard's rows
    compared moved by as many; where they differ otherwise (one renamed, two swapped), how many of the shard's rows
    from there are not the run's."""
    places: list[str] = []
    i = j = 0
    while j < len(mine):
        if i < len(run) and mine[j] == run[i]:
            i, j = i + 1, j + 1
        elif i == len(run) and run_ends:
            places.append(f"from line {lines[j]} on: {counted(len(mine) - j, 'row')} more than the run had there")
            j = len(mine)
        elif inserted := _moved_by(mine, j, run, i):
            where = f"line {lines[j]}" if inserted == 1 else f"lines {lines[j]}-{lines[j + inserted - 1]}"
            places.append(f"{counted(inserted, 'row')} inserted at {where}; the rest are the run's rows")
            j += inserted
        elif removed := _moved_by(run, i, mine, j):
            gone = listed([repr(row[0]) for row in run[i : i + removed]], MAX_ROWS_NAMED)
            places.append(f"the run's {noun(removed, 'row')} {gone} removed before line {lines[j]}; the rest are the "
                          "run's rows")  # fmt: skip
            i += removed
        else:  # taken as rows in the run's rows' places
            theirs = run[i : i + len(mine) - j]
            unlike = sum(a != b for a, b in zip(mine[j:], theirs, strict=False)) + len(mine) - j - len(theirs)
            places.append(f"first at line {lines[j]}; {unlike} of the shard's {len(mine)} rows are not the run's")
            i, j = i + len(theirs), len(mine)
    return places, i


def _moved_by(more: list[Keys], at: int, fewer: list[Keys], since: int) -> int:
    """How many rows ``more`` holds at ``at`` that ``fewer`` has none of (rows inserted, seen from the run's; rows
    removed, from the file's), with ``fewer``'s rows from ``since`` on (one at least) next in ``more``: where rows
    inserted or removed moved the rest of a shard's rows by as many. 0 where the rows differ otherwise (one renamed,
    two swapped)."""
    try:
        end = more.index(fewer[since], at + 1)
    except ValueError:
        return 0
    overlap = min(len(more) - end, len(fewer) - since)
    if more[end : end + overlap] != fewer[since : since + overlap] or not set(more[at:end]).isdisjoint(fewer):
        return 0
    return end - at


class Changes:
    """The changed shards found, each with where (its places, MAX_ROWS_NAMED of them told over all shards)."""

    def __init__(self) -> None:
        self.shards: list[tuple[int, str, list[str]]] = []  # (shard, what differs, where)
        self.content_only = True

    def add(self, shard: int, places: list[str], what: str = OTHER_IDS) -> None:
        """Shard ``shard`` differs by ``what`` (its ids, unless said), at ``places`` (added to its own where it is
        named already: the rows missing at the dataset's end)."""
        self.content_only = self.content_only and what != OTHER_IDS
        if self.shards and self.shards[-1][0] == shard:
            self.shards[-1][2].extend(places)
        else:
            self.shards.append((shard, what, places))

    def said(self) -> str:
        """``shard 1: other ids or order, 1 row inserted at line 151; the rest are the run's rows; shard 3: ...``."""
        told, parts = 0, []
        for shard, what, places in self.shards:
            shown = places[: max(0, MAX_ROWS_NAMED - told)]
            told += len(shown)
            parts.append(f"shard {shard}: {', '.join([what, *shown])}")
        return listed(parts, MAX_SHARDS_NAMED, sep="; ", more="changed shard")
