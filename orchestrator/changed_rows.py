"""Where a dataset's rows differ from a run's submitted ones, as a resume's refusal says it: each changed shard (up to
MAX_SHARDS_NAMED, the rest counted) with every change found there (MAX_ROWS_NAMED of them told over all shards, the
rest counted). A row of the run's read elsewhere is told moved (from its place in the run to its line), not as a row
removed and one inserted: the store keeps no row's line as submitted, which blank lines, bad rows and CSV records
of several lines put any distance past its place, so where it was is said by its place (``row 31 of the run``).
Rows inserted or removed, at any distance, move every later row by as many: the rows after them are compared with the
run's moved so, and each run shard whose rows are all read, moved or not, has its content checked against its digest.
A run whose submission was cut off is compared up to the last row it sent (its last shard read whole wherever its rows
moved); the rows it never sent are not compared (the resume sends them), but a row of the run's found removed that is
read there is told moved (to where the submission had not reached), and a row read there again (one it sent, or one
read there before) is refused as given again: the resume would send its id twice.

Cost: nothing beyond the shard-by-shard compare while the rows are the run's in their places; from the first row out of
its place, one read of the run's item keys into a dict (one entry a run row: the bound on memory), then one lookup a
row read, whatever the distance to where the row is in the run (a cut-off submission's: from its first row past what
it sent, with a set of the keys of the rows it never sent, the run's rows once the resume sends them). The changes
are told once every row is read (a row told inserted may turn out moved): each row read out of its place that the run
has is kept until then (its line and place), the others counted."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from typing import Any

from ragscore_workers.counts import and_more, counted, listed, noun
from ragscore_workers.planning import ShardStarts
from ragscore_workers.schemas import split_key

#: A row's item keys (one per target, or its one key).
Keys = tuple[str, ...]

#: The changes a resume's refusal describes, all shards together, and the run's rows it names where they are gone
#: from the dataset.
MAX_ROWS_NAMED = 3
#: The changed shards a resume's refusal names; the rest are counted.
MAX_SHARDS_NAMED = 5
#: What a shard whose rows' ids are not the run's is said to be, before where.
OTHER_IDS = "other ids or order"
#: What a shard whose rows are the run's, by id, but read otherwise is said to be, before where.
OTHER_CONTENT = "the same ids with other content"
#: Where a change is: its text, or what writes it where it names the run's rows (read from the store, so only for the
#: changes told).
Place = str | Callable[[], str]


class RunRows:
    """The run's rows (each its item keys, ``per_row`` of them) by their place in the run, read a shard at a time
    (``item_keys(shard)``; ``cut``: where each shard starts), the last few shards kept; where each
    row is (:meth:`place`) read once, when first asked."""

    def __init__(
        self, item_keys: Callable[[int], list[str]], cut: ShardStarts, n_shards: int | None, per_row: int
    ) -> None:
        self.item_keys, self.cut, self.n_shards, self.per_row = item_keys, cut, n_shards, per_row
        self.rows = lru_cache(maxsize=4)(self._rows)
        self._places: dict[Keys, int] | None = None

    def _rows(self, shard: int) -> list[Keys]:
        """The rows of the run's shard ``shard``, read from the store."""
        keys = self.item_keys(shard)
        return [tuple(keys[i : i + self.per_row]) for i in range(0, len(keys), self.per_row)]

    def row(self, at: int) -> Keys | None:
        """The run's row ``at``; None past its end."""
        shard = self.cut.shard_of(at)
        rows, i = self.rows(shard), at - self.cut.start(shard)
        return rows[i] if i < len(rows) else None

    def place(self, row: Keys) -> int | None:
        """Where ``row`` is in the run; None where the run has no such row."""
        if self._places is None:
            self._places = {}
            shard = 0
            while (self.n_shards is None or shard < self.n_shards) and (rows := self._rows(shard)):
                self._places.update((keys, self.cut.start(shard) + i) for i, keys in enumerate(rows))
                shard += 1
        return self._places.get(row)

    @property
    def cut_off(self) -> bool:
        """Whether the run's submission was cut off: it holds the shards sent before, the later rows were never sent."""
        return self.n_shards is None

    def count(self) -> int:
        """How many rows the run holds (its last shard read, not every one; a submission cut off: every shard it sent,
        up to the first it never reached)."""
        shards = self.n_shards
        if shards is None:
            shards = 0
            while self._rows(shards):
                shards += 1
        return self.cut.start(shards - 1) + len(self.rows(shards - 1)) if shards else 0


class Changes:
    """The changed shards found, each with its changes (what differs, where), MAX_ROWS_NAMED of them told over all
    shards."""

    def __init__(self) -> None:
        self.shards: dict[int, list[tuple[str, Place]]] = {}  # shard -> (what differs, where)

    @property
    def content_only(self) -> bool:
        """Whether every change is of content (the rows' ids are the run's)."""
        return all(what == OTHER_CONTENT for changes in self.shards.values() for what, _ in changes)

    def add(self, shard: int, place: Place, what: str = OTHER_IDS) -> None:
        """Shard ``shard`` differs by ``what`` (its ids, unless said) at ``place``."""
        self.shards.setdefault(shard, []).append((what, place))

    def said(self) -> str:
        """``shard 1: other ids or order, 1 row inserted at line 151; shard 3: ...``: each shard's changes under what
        differs (its ids, or only their content), those past MAX_ROWS_NAMED counted."""
        told, parts = 0, []
        for shard in sorted(self.shards):
            groups: dict[str, list[Place]] = {}
            for what, place in self.shards[shard]:
                groups.setdefault(what, []).append(place)
            said = []
            for what, places in groups.items():
                shown = min(len(places), max(0, MAX_ROWS_NAMED - told))
                told += shown
                texts = [place if isinstance(place, str) else place() for place in places[:shown]]
                said.append(f"{what}, {listed(texts, shown, total=len(places), more='change')}" if shown else what)
            parts.append(f"shard {shard}: {'; '.join(said)}")
        return listed(parts, MAX_SHARDS_NAMED, sep="; ", more="changed shard")


@dataclass
class _Found:
    """A change found in the dataset's shard ``shard``, told once every row is read (a row it names inserted, or a run's
    row it names removed, may be found moved): rows read out of their place (``rows``: those the run has, each its
    line and its place in the run; of the others, how many and their lines, as runs of consecutive lines: the first
    few, enough to say the first MAX_ROWS_NAMED runs of its lines whichever of its rows the run has turn out moved), in
    place of the run's rows ``removed`` (None: rows inserted), which were removed before ``line`` where no row is read
    in their place."""

    shard: int
    rows: list[tuple[int, int]] = field(default_factory=list)
    new: int = 0
    spans: list[tuple[int, int]] = field(default_factory=list)
    unspanned: int = 0  # of the ``new``, those past the ``spans`` kept: counted only
    removed: range | None = None
    line: int = 0

    def add(self, line: int, place: int | None) -> None:
        """One more row read out of its place, from ``line`` (``place``: where the run has it; None: it has not)."""
        if place is not None:
            self.rows.append((line, place))
            return
        self.new += 1
        if self.spans and self.spans[-1][1] == line - 1 and not self.unspanned:
            self.spans[-1] = (self.spans[-1][0], line)
        elif len(self.spans) <= MAX_ROWS_NAMED + len(self.rows) and not self.unspanned:
            # enough: each row the run has, read before this line, joins two of them at most (bounded as those are)
            self.spans.append((line, line))
        else:
            self.unspanned += 1

    def lines(self, moved: dict[int, int]) -> tuple[int, list[tuple[int, int]]]:
        """How many of its rows were not ``moved`` (by line), and their lines' runs (the first MAX_ROWS_NAMED whole)."""
        kept = [line for line, _ in self.rows if line not in moved]
        return len(kept) + self.new, _joined([*self.spans, *((line, line) for line in kept)])

    def gone(self, taken: set[int]) -> int:
        """How many of the run's rows it names removed were not found moved (``taken``: the places of those)."""
        removed = self.removed or range(0)
        return len(removed) - sum(at in taken for at in removed)  # each range read once over all its founds


class RowsCompared:
    """A dataset's rows, read a shard at a time (:meth:`read`), against the run's (``run``): what :meth:`end` says of
    them. A row not the run's next is one inserted where the run has no such row, or has it before (a row given twice
    or moved back), or where the run's next row is still to come in the shard (a row moved ahead), or where the shard's
    next row is one the run has before it (a row moved back from afar, two rows far apart swapped); else the run's rows
    up to it were removed. A row read as inserted (or past the run's end) that is one of the run's rows read as removed
    (or missing at the dataset's end) is told moved. ``edited(shard, rows)``: whether the run's shard ``shard``, its
    rows all read (``rows``), reads otherwise than it was submitted (its digest)."""

    def __init__(self, run: RunRows, edited: Callable[[int, list[Any]], bool]) -> None:
        self.run, self.edited, self.changes = run, edited, Changes()
        self.at = 0  # the run's row the next row read should be
        self.size = run.count()
        self.shard, self.line = 0, 0  # the dataset's shard being read, and the last line read
        self.read_by_shard: dict[int, list[tuple[int, int, Any]]] = {}  # run shard -> (shard, line, row) read so far
        self.inserted: _Found | None = None  # the rows inserted in a row, not yet found
        self.found: list[_Found | tuple[int, str, str]] = []  # in order; a change of content as (shard, where, what)
        self.more: _Found | None = None  # the rows after the run's end
        self.removed = False  # whether any of the run's rows were found removed (a row past its end may be one moved)
        self.unsent: set[Keys] = set()  # a cut-off submission's rows never sent, read past what it sent
        self.again: list[tuple[int, Keys]] = []  # of those, each read there again: (line, keys)

    def read(self, shard: int, lines: list[int], rows: list[Any], mine: list[Keys]) -> None:
        """Compare the dataset's shard ``shard``: its ``rows`` (their item keys ``mine``), read from ``lines``."""
        self.shard, self.line = shard, lines[-1]
        if self.at == self.run.cut.start(shard) and mine == self.run.rows(shard):  # the run's shard, in its place
            for at, line, row in zip(range(self.at, self.at + len(rows)), lines, rows, strict=True):
                self._take(at, line, row)
        else:
            last = {keys: j for j, keys in enumerate(mine)}
            for j, keys in enumerate(mine):
                after = mine[j + 1] if j + 1 < len(mine) else None

                def coming(expected: Keys, j: int = j) -> bool:
                    return last.get(expected, -1) > j

                self._row(keys, lines[j], rows[j], coming, after)
        self._found_inserted()
        self._settle(self.run.cut.shard_of(self.at))

    def end(self) -> Changes:
        """The changes found, the rows missing at the dataset's end with them (those read earlier told moved)."""
        self._found_inserted()
        self._settle(None)
        if self.more is not None:
            self.found.append(self.more)
        missing = _Found(self.shard, removed=range(self.at, self.size), line=self.line)
        self.found.append(missing)
        moved = self._moved()
        taken = set(moved.values())
        for found in self.found:
            if isinstance(found, tuple):
                self.changes.add(*found)
            elif found is self.more:
                self._tell_more(found, moved)
            elif found is not missing:
                self._tell(found, moved, taken)
            elif gone := missing.gone(taken):
                self.changes.add(missing.shard, f"ending at line {missing.line}: {counted(gone, 'row')} fewer than the "
                                 "run had there")  # fmt: skip
        return self.changes

    def _row(self, keys: Keys, line: int, row: Any, coming: Callable[[Keys], bool], after: Keys | None) -> None:
        """Compare one row (``coming``: whether the run's row is still to come in the shard; ``after``: the shard's
        next row, None after its last)."""
        expected = self.run.row(self.at)
        if keys == expected:
            self._found_inserted()
            self._take(self.at, line, row)
        elif expected is None:  # past the run's end
            # a row moved there is one found removed: none found, the run's keys are not all read for a row appended
            # (but for a cut-off submission's, whose resume sends those rows: one it sent, read again, is refused)
            place = self.run.place(keys) if self.removed or self.run.cut_off else None
            if self.run.cut_off and place is None and keys not in self.unsent:  # a row never sent: not compared
                self.unsent.add(keys)
                return
            self.more = self.more or _Found(self.shard)
            if place is None and self.run.cut_off:  # a row never sent, read there twice
                self.again.append((line, keys))
            else:
                self.more.add(line, place)
        elif (place := self.run.place(keys)) is None or place < self.at or (expected and coming(expected)):
            self._insert(line, place)
        elif after is not None and (next_place := self.run.place(after)) is not None and self.at <= next_place < place:
            self._insert(line, place)  # moved back from afar: the next row is one the run has before it
        else:
            self._found_removed(place, line)
            self._take(place, line, row)

    def _insert(self, line: int, place: int | None) -> None:
        """The row read from ``line`` (the run's row ``place``, None where it has no such row) is inserted."""
        self.inserted = self.inserted or _Found(self.shard)
        self.inserted.add(line, place)

    def _found_removed(self, upto: int, line: int) -> None:
        """The run's rows from the next one expected up to ``upto`` removed before ``line``, the rows inserted just
        before it with them (told in their place where as many: rows renamed)."""
        found, self.inserted = self.inserted or _Found(self.shard), None
        found.removed, found.line = range(self.at, upto), line
        self.found.append(found)
        self.removed = True

    def _found_inserted(self) -> None:
        """The rows inserted in a row, if any, found."""
        if self.inserted is not None:
            self.found.append(self.inserted)
            self.inserted = None

    def _moved(self) -> dict[int, int]:
        """The run's rows found moved, each its place in the run by the line it was read from: a row read out of its
        place (the first such, of a row given twice) that is one of the run's rows found removed."""
        removed = [found.removed for found in self.found if isinstance(found, _Found) and found.removed]
        starts = [span.start for span in removed]
        moved: dict[int, int] = {}  # line -> place
        places: set[int] = set()
        for found in self.found:
            for line, place in found.rows if isinstance(found, _Found) else []:
                if place in places or (i := bisect_right(starts, place) - 1) < 0:
                    continue
                if place in removed[i]:
                    moved[line] = place
                    places.add(place)
        return moved

    def _tell(self, found: _Found, moved: dict[int, int], taken: set[int]) -> None:
        """Tell ``found``, less its rows ``moved`` (line -> the run's place; ``taken``: those places), each told moved
        where it was read."""
        n, spans = found.lines(moved)
        gone = found.gone(taken)
        places = list(islice((at for at in found.removed or range(0) if at not in taken), MAX_ROWS_NAMED))
        if n and n == gone:
            where = f"{_said(n, spans)} holds another row" if n == 1 else f"{_said(n, spans)} hold other rows"
            self.changes.add(found.shard, self._naming(f"{where} in place of ", places, gone, ""))
        else:
            if n:
                self.changes.add(found.shard, f"{counted(n, 'row')} inserted at {_said(n, spans)}")
            if gone:
                self.changes.add(found.shard, self._naming("", places, gone, f" removed before line {found.line}"))
        self._tell_moved(found.shard, [(line, moved[line]) for line, _ in found.rows if line in moved])

    def _tell_more(self, found: _Found, moved: dict[int, int]) -> None:
        """Tell the rows past the run's end (``found``), less those ``moved`` (line -> the run's place) there."""
        n, spans = found.lines(moved)
        if n and not self.run.cut_off:
            self.changes.add(
                found.shard, f"from line {spans[0][0]} on: {counted(n, 'row')} more than the run had there"
            )
        elif self.run.cut_off:  # its rows moved there and those read again are told, the others not compared
            self._tell_again(found.shard, [(line, place) for line, place in found.rows if line not in moved])
        self._tell_moved(found.shard, [(line, moved[line]) for line, _ in found.rows if line in moved])

    def _tell_again(self, shard: int, sent: list[tuple[int, int]]) -> None:
        """Tell the rows a cut-off submission's resume would send a second time: those it ``sent`` (line, the run's
        place) read past what it sent, and those it never sent read there twice (:attr:`again`)."""
        rows: list[tuple[int, int | Keys]] = sorted([*sent, *self.again], key=lambda row: row[0])  # place or keys
        if not rows:
            return

        def text() -> str:
            named = [self.run.row(row) if isinstance(row, int) else row for _, row in rows[:MAX_ROWS_NAMED]]
            names = [repr(split_key(keys[0])[1]) for keys in named if keys]
            return (f"{noun(len(rows), 'row')} {listed(names, MAX_ROWS_NAMED, total=len(rows))} given again at "
                    f"{_spans([line for line, _ in rows])}, past the rows its cut-off submission sent")  # fmt: skip

        self.changes.add(shard, text)

    def _tell_moved(self, shard: int, rows: list[tuple[int, int]]) -> None:
        """Tell the run's ``rows`` (line, the run's place) moved from their places in the run to the lines read (in
        ``shard``)."""
        if rows:
            where = _spans([line for line, _ in rows])
            places = [place for _, place in rows]
            was = f"{noun(len(rows), 'row')} {_numbered([place + 1 for place in places])} of the run"
            self.changes.add(
                shard, self._naming("", places[:MAX_ROWS_NAMED], len(rows), f" moved from {was} to {where}")
            )

    def _naming(self, head: str, places: list[int], n: int, tail: str) -> Callable[[], str]:
        """What writes ``head``, ``the run's rows 'q150', 'q151' and 3 more`` (``n`` of the run's rows, the first at
        ``places``, each by its id: a target run's too, not by its first target's item key), then ``tail``: called only
        for a change told, as a row named far from the rows read last reads its run shard from the store."""

        def text() -> str:
            names = [repr(split_key(row[0])[1]) for at in places[:MAX_ROWS_NAMED] if (row := self.run.row(at))]
            return f"{head}the run's {noun(n, 'row')} {listed(names, MAX_ROWS_NAMED, total=n)}{tail}"

        return text

    def _take(self, at: int, line: int, row: Any) -> None:
        """The row read from ``line`` is the run's row ``at``."""
        self.at = at + 1
        self.read_by_shard.setdefault(self.run.cut.shard_of(at), []).append((self.shard, line, row))

    def _settle(self, before: int | None) -> None:
        """Check the content of each run shard before ``before`` (every one where None) whose rows were all read."""
        for index in [i for i in self.read_by_shard if before is None or i < before]:
            read = self.read_by_shard.pop(index)
            if len(read) == len(self.run.rows(index)) and self.edited(index, [row for _, _, row in read]):
                self.found.append((read[0][0], f"in lines {read[0][1]}-{read[-1][1]} (which of its "
                                   f"{counted(len(read), 'row')} reads otherwise cannot be told: the run recorded a "
                                   "digest of each shard, not of each row)", OTHER_CONTENT))  # fmt: skip


def _spans(lines: list[int]) -> str:
    """``line 4``, ``lines 4-6``, ``lines 4-5, 7, 9``: the (rising) ``lines`` rows are on, as :func:`_said`."""
    return _said(len(lines), _joined([(line, line) for line in lines]))


def _joined(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` of lines (first, last), those that touch joined, in order: ``(4, 5), (6, 6), (9, 9)`` -> ``(4, 6),
    (9, 9)``."""
    joined: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if joined and first <= joined[-1][1] + 1:
            joined[-1] = (joined[-1][0], max(last, joined[-1][1]))
        else:
            joined.append((first, last))
    return joined


def _said(n: int, spans: list[tuple[int, int]]) -> str:
    """``line 4``, ``lines 4-6``, ``lines 4-5, 7 and 9 more lines``: ``n`` rows' lines, whose first ``spans`` (runs of
    consecutive lines) are these; each run said as a range (a line between two of them is not said to be one), the
    lines past the first MAX_ROWS_NAMED runs counted."""
    shown = spans[:MAX_ROWS_NAMED]
    rest = n - sum(last - first + 1 for first, last in shown)
    said = ", ".join(f"{first}-{last}" if last > first else str(first) for first, last in shown)
    return f"{noun(n, 'line')} {said}" + (f" {and_more(rest, 'line')}" if rest else "")


def _numbered(numbers: list[int]) -> str:
    """``4``; ``4-6`` where the (distinct) ``numbers`` follow one another in some order; else ``31, 4, 11 and 2
    more``, in their order (that of the rows named with them)."""
    if len(numbers) > 1 and max(numbers) - min(numbers) == len(numbers) - 1:
        return f"{min(numbers)}-{max(numbers)}"
    return listed([str(number) for number in numbers], MAX_ROWS_NAMED)
