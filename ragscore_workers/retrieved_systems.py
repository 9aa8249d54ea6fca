"""``recall_at_k``'s rows told apart per system, of every system a run or a dry run reads (the summary's breakdown
keeps only the first MAX_BREAKDOWN_VALUES): which retrieved nothing, and which none of whose rows that retrieved
something found a gold id, as the lines of ``orchestrator.gold_ids`` name them."""

from __future__ import annotations

from collections.abc import Iterable

from .schemas import RetrievedSystems, SystemsNamed

__all__ = ["MAX_SYSTEMS_SHOWN", "MISSED_ALL_MIN_N", "SystemTally"]

#: Systems a line names before "and N more" (the rest only counted).
MAX_SYSTEMS_SHOWN = 5
#: Rows that retrieved something a system (or the dataset) must have scored 0 on, all of them, before it is said as
#: ids named otherwise (one miss proves nothing of a naming scheme).
MISSED_ALL_MIN_N = 2

_FOUND = 1  # a row found a gold id
_EMPTY = 2  # a row retrieved nothing
_ONE = 4  # a row that retrieved something, counted from this bit up to MISSED_ALL_MIN_N


class SystemTally:
    """Per system, in the order first seen, one small int (whether a row found a gold id, whether one retrieved
    nothing, its rows that retrieved something up to MISSED_ALL_MIN_N): memory grows with the systems, not the rows."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: dict[str, int] = {}

    def add(self, system: str, empty: bool, found: bool) -> None:
        """Count one scored row of ``system``: whether it retrieved nothing, and whether it found a gold id."""
        state = self.state.get(system, 0) | (_FOUND if found else 0)
        if empty:
            state |= _EMPTY
        elif state // _ONE < MISSED_ALL_MIN_N:
            state += _ONE
        self.state[system] = state

    def systems(self) -> RetrievedSystems | None:
        """The systems with rows that retrieved nothing and those that missed every gold id; None without any system."""
        if not self.state:
            return None
        return RetrievedSystems(
            nothing=_named(name for name, s in self.state.items() if s & _EMPTY),
            missed=_named(name for name, s in self.state.items() if missed(s & _FOUND, s // _ONE)),
        )


def missed(found: int | bool, rows: int) -> bool:
    """No gold id at any rank of at least MISSED_ALL_MIN_N ``rows`` that retrieved something (a row that retrieved
    nothing says nothing of how ids are named)."""
    return not found and rows >= MISSED_ALL_MIN_N


def _named(names: Iterable[str]) -> SystemsNamed:
    """The first MAX_SYSTEMS_SHOWN of ``names`` and how many there are."""
    named = SystemsNamed()
    for name in names:
        named.count += 1
        if len(named.names) < MAX_SYSTEMS_SHOWN:
            named.names.append(name)
    return named
