"""Gold ids against retrieved ids: the line a run ends with, and ``--dry-run`` says before it, where no row's gold id
is at any rank of its retrieved ids (``recall_at_k``'s ``mrr`` 0 on every row that retrieved something: gold and
retrieved ids named in two schemes, ``doc_12`` and ``12``, score every row 0 without an error), and the line, as
information, counting the rows that retrieved nothing (an LLM-only system, by design), which the first leaves out.

A finished run's counts come from its summary (:meth:`Retrieved.of`), a dry run's from ranking each row's gold ids
among its retrieved ids as ``recall_at_k`` does (:class:`RetrievalCheck`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES
from ragscore_workers.counts import agree, counted, listed, noun
from ragscore_workers.metrics.retrieval import gold_rank
from ragscore_workers.schemas import MetricSummary, Row

__all__ = ["MAX_SYSTEMS_SHOWN", "MISSED_ALL_MIN_N", "RetrievalCheck", "Retrieved", "missed_lines", "nothing_lines"]

#: Systems named by :func:`missed_lines` and :func:`nothing_lines` before "and N more".
MAX_SYSTEMS_SHOWN = 5
#: Rows that retrieved something a retrieval output must have scored 0 on, all of them, before it is said as ids
#: named otherwise (one miss proves nothing of a naming scheme).
MISSED_ALL_MIN_N = 2
#: What the line asks the user to check.
CHECK = "do gold_doc_id and retrieved_doc_ids name documents alike (not `doc_12` and `12`, nor a chunk's id)?"


@dataclass
class Retrieved:
    """``recall_at_k``'s scored rows of a dataset or of one system: how many, of which retrieved nothing, and whether
    any found a gold id."""

    rows: int = 0
    empty: int = 0
    found: bool = False

    @classmethod
    def of(cls, mrr: MetricSummary) -> Retrieved:
        """As a run's summary counted them (its ``mrr``)."""
        return cls(rows=mrr.n, empty=mrr.empty, found=bool(mrr.mean))

    def add(self, empty: bool, found: bool) -> None:
        """Count one scored row: whether it retrieved nothing, and whether a gold id was among what it retrieved."""
        self.rows += 1
        self.empty += empty
        self.found = self.found or found

    @property
    def missed_everywhere(self) -> bool:
        """No gold id at any rank of at least MISSED_ALL_MIN_N rows that retrieved something (a row that retrieved
        nothing says nothing of how ids are named)."""
        return not self.found and self.rows - self.empty >= MISSED_ALL_MIN_N


def missed_lines(pooled: Retrieved, systems: Mapping[str, Retrieved]) -> list[str]:
    """A line when no row's gold id is among its retrieved ids: of the dataset, else of each system where only some
    systems are so."""
    if pooled.missed_everywhere:
        rows = counted(pooled.rows - pooled.empty, "row") + (" that retrieved something" if pooled.empty else "")
        return [f"recall_at_k: no gold_doc_id of any of the {rows} is among its retrieved_doc_ids "
                f"(mrr 0 on every row): {CHECK}"]  # fmt: skip
    missed = [name for name, r in systems.items() if r.missed_everywhere]
    if not missed:
        return []
    their = agree(len(missed), "its", "their")
    return [f"recall_at_k: no gold_doc_id of {noun(len(missed), 'system')} {listed(missed, MAX_SYSTEMS_SHOWN)} is "
            f"among {their} retrieved_doc_ids (mrr 0 on each of {their} rows): {CHECK}"]  # fmt: skip


def nothing_lines(pooled: Retrieved, systems: Mapping[str, Retrieved]) -> list[str]:
    """A line, as information, when some rows retrieved nothing (``retrieved_doc_ids`` empty): each scores 0, and
    :func:`missed_lines` leaves them out."""
    if not pooled.empty:
        return []
    empty = [name for name, r in systems.items() if r.empty]
    of = f" (of {noun(len(empty), 'system')} {listed(empty, MAX_SYSTEMS_SHOWN)})" if empty else ""
    return [f"recall_at_k: {counted(pooled.empty, 'row')}{of} retrieved nothing (retrieved_doc_ids empty): "
            f"{agree(pooled.empty, 'it scores', 'each scores')} 0"]  # fmt: skip


@dataclass
class RetrievalCheck:
    """A dry run's tally of the rows' gold ids against their retrieved ids, as ``recall_at_k`` ranks them (its own
    :func:`gold_rank`, no results built: a few microseconds a row), pooled and per system (the first
    MAX_BREAKDOWN_VALUES, as the run's summary keeps them)."""

    pooled: Retrieved = field(default_factory=Retrieved)
    systems: dict[str, Retrieved] = field(default_factory=dict)

    def see(self, row: Row) -> None:
        """Count one row where ``recall_at_k`` scores it (it has a gold id)."""
        gold, retrieved, rank = gold_rank(row)
        if not gold:  # unscorable
            return
        empty, found = not retrieved, rank is not None
        self.pooled.add(empty, found)
        if row.system is not None and (row.system in self.systems or len(self.systems) < MAX_BREAKDOWN_VALUES):
            self.systems.setdefault(row.system, Retrieved()).add(empty, found)

    def lines(self) -> list[str]:
        """The line the run will end with where no row's gold id is among its retrieved ids."""
        return missed_lines(self.pooled, self.systems)
