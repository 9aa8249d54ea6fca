"""Gold ids against retrieved ids: the line a run ends with, and ``--dry-run`` says before it, where no row's gold id
is at any rank of its retrieved ids (``recall_at_k``'s ``mrr`` 0 on every row that retrieved something: gold and
retrieved ids named in two schemes, ``doc_12`` and ``12``, score every row 0 without an error), and the line, as
information, counting the rows that retrieved nothing (an LLM-only system, by design), which the first leaves out.

A finished run's counts come from its summary (:meth:`Retrieved.of`, and its ``retrieved_systems``), a dry run's from
ranking each row's gold ids among its retrieved ids as ``recall_at_k`` does (:class:`RetrievalCheck`): systems are told
apart of every system (:class:`SystemTally`), not only of the breakdown's first 1,000."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ragscore_workers.counts import agree, counted, listed, noun
from ragscore_workers.metrics.retrieval import gold_rank
from ragscore_workers.retrieved_systems import MAX_SYSTEMS_SHOWN, SystemTally, missed
from ragscore_workers.schemas import MetricSummary, RetrievedSystems, Row, SystemsNamed

__all__ = ["FROM_TARGETS", "RetrievalCheck", "Retrieved", "missed_lines", "nothing_lines", "of_breakdown"]

#: What ``--dry-run`` says in their place for a suite with targets, whose replies give the rows' retrieved ids.
FROM_TARGETS = ("recall_at_k: the suite's targets give each row's retrieved_doc_ids as the run asks them, so whether "
                "its gold_doc_id is among them is checked after the run")  # fmt: skip
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
        """No gold id at any rank of its rows that retrieved something (:func:`missed`)."""
        return missed(self.found, self.rows - self.empty)


def of_breakdown(systems: Mapping[str, Retrieved]) -> RetrievedSystems:
    """The systems a summary's breakdown tells (one written before ``retrieved_systems``: its first 1,000)."""
    return RetrievedSystems(
        nothing=_named([name for name, r in systems.items() if r.empty]),
        missed=_named([name for name, r in systems.items() if r.missed_everywhere]),
    )


def _named(names: list[str]) -> SystemsNamed:
    return SystemsNamed(names=names[:MAX_SYSTEMS_SHOWN], count=len(names))


def _systems(named: SystemsNamed) -> str:
    """``systems a, b and 3 more``."""
    return f"{noun(named.count, 'system')} {listed(named.names, MAX_SYSTEMS_SHOWN, total=named.count)}"


def missed_lines(pooled: Retrieved, systems: RetrievedSystems | None) -> list[str]:
    """A line when no row's gold id is among its retrieved ids: of the dataset, else of each system where only some
    systems are so."""
    if pooled.missed_everywhere:
        rows = counted(pooled.rows - pooled.empty, "row") + (" that retrieved something" if pooled.empty else "")
        return [f"recall_at_k: no gold_doc_id of any of the {rows} is among its retrieved_doc_ids "
                f"(mrr 0 on every row): {CHECK}"]  # fmt: skip
    if systems is None or not systems.missed.count:
        return []
    their = agree(systems.missed.count, "its", "their")
    return [f"recall_at_k: no gold_doc_id of {_systems(systems.missed)} is among {their} retrieved_doc_ids (mrr 0 on "
            f"each of {their} rows): {CHECK}"]  # fmt: skip


def nothing_lines(pooled: Retrieved, systems: RetrievedSystems | None) -> list[str]:
    """A line, as information, when some rows retrieved nothing (``retrieved_doc_ids`` empty): each scores 0, and
    :func:`missed_lines` leaves them out."""
    if not pooled.empty:
        return []
    of = f" (of {_systems(systems.nothing)})" if systems is not None and systems.nothing.count else ""
    return [f"recall_at_k: {counted(pooled.empty, 'row')}{of} retrieved nothing (retrieved_doc_ids empty): "
            f"{agree(pooled.empty, 'it scores', 'each scores')} 0"]  # fmt: skip


@dataclass
class RetrievalCheck:
    """A dry run's tally of the rows' gold ids against their retrieved ids, as ``recall_at_k`` ranks them (its own
    :func:`gold_rank`, no results built: a few microseconds a row), pooled and per system (every system, as the run's
    aggregation tells them)."""

    pooled: Retrieved = field(default_factory=Retrieved)
    systems: SystemTally = field(default_factory=SystemTally)

    def see(self, row: Row) -> None:
        """Count one row where ``recall_at_k`` scores it (it has a gold id)."""
        gold, retrieved, rank = gold_rank(row)
        if not gold:  # unscorable
            return
        empty, found = not retrieved, rank is not None
        self.pooled.add(empty, found)
        if row.system is not None:
            self.systems.add(row.system, empty, found)

    def lines(self) -> list[str]:
        """The line the run will end with where no row's gold id is among its retrieved ids."""
        return missed_lines(self.pooled, self.systems.systems())

    def notes(self) -> list[str]:
        """The line, as information, the run will end with where some rows retrieved nothing."""
        return nothing_lines(self.pooled, self.systems.systems())
