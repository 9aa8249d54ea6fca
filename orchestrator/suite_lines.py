"""Where each key and list item of a suite file is written (its line and column), for the suite's problems to name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from ragscore_workers.counts import place
from ragscore_workers.errors import Problem, flat_problems

__all__ = ["NO_LINES", "SuiteLines"]

#: A place in a suite as pydantic gives it (``("metrics", 1, "params", "k")``).
Loc = tuple[Any, ...]


class _Mark(NamedTuple):
    """Where a key or item is written; for an alias (``- *base``), also where the anchor it repeats is (its loc), and
    for a key a merge key brings in (``<<: *base``), the mapping merged (``anchor``) and the key there (``within``)."""

    line: int
    column: int
    anchor: Loc | None = None
    within: Loc = ()
    #: For the key or item whose value carries an anchor (``base: &b {...}``), the anchor and where it is written
    #: (``&b at line 3 column 7``): the key's own line is not where the anchor is.
    anchored: str = ""


class SuiteLines:
    """The line and column of each key and item of one suite file, read from YAML's marks (JSON is read as YAML here:
    a JSON text YAML cannot read has no lines, its problems said without them). Empty for a suite given as a dict."""

    def __init__(self, path: Path | None = None, marks: dict[Loc, _Mark] | None = None, data: Any = None):
        self._path = path
        self._marks = marks or {}
        #: Each key's and item's place as problems name it (``metrics item 1 (exact_mach)``), and its loc.
        self._places = {place(loc, data): loc for loc in self._marks}

    @classmethod
    def of(cls, path: Path, text: str, data: Any) -> SuiteLines:
        """The lines of the suite file ``path`` holding ``text``, which reads as ``data``."""
        # a tab, which YAML refuses as indentation, is only whitespace in a JSON text (a string holds it escaped)
        loader = _Loader(text.replace("\t", " ") if path.suffix.lower() == ".json" else text)
        try:
            node = loader.get_single_node()
            marks = dict(_marks(loader, node, (), {})) if node is not None else {}
        except yaml.YAMLError:
            marks = {}
        finally:
            loader.dispose()
        return cls(path, marks, data)

    def at(self, loc: Loc, first: Loc = ()) -> str:
        """``t.yaml line 3 column 5``: where the key or item at ``loc`` (or the nearest one holding it) is written,
        and the anchor it repeats (``t.yaml line 12 column 5, from the anchor &b at line 3 column 11``, with the line
        of a key inside it: ``line 12 column 5, at line 4 column 7, from ...``); where ``first`` (an earlier entry the
        one at ``loc`` repeats) is too (``..., the first at line 3 column 5``); "" where the suite has no lines."""
        said = self._line(loc)
        if said and (earlier := self._line(first)):
            said += f", the first at {earlier}"
        return f"{self._path} {said}" if said else ""

    def _line(self, loc: Loc) -> str:
        """``line 3 column 5`` of ``loc`` (or the nearest key or item holding it); in an alias or a merged key, with
        the line of the key at ``loc`` inside the anchor and the anchor's (``line 9 column 5, at line 5 column 7,
        from the anchor &b at line 2 column 11``: the anchor at its own column), and so on into an anchor that repeats
        another; "" for none."""
        return ", ".join(self._hops(loc))

    def _hops(self, loc: Loc) -> list[str]:
        """The parts of :meth:`_line`, from ``loc``'s own line to the innermost anchor's."""
        if (found := self._nearest(loc)) is None:
            return []
        end, mark = found
        hops = [f"line {mark.line} column {mark.column}"]
        if mark.anchor is not None:
            within = (*mark.anchor, *mark.within, *loc[end:])
            inner = self._nearest(within)  # a key or item written inside the anchor, not the anchor itself
            inside = self._hops(within) if inner is not None and inner[0] > len(mark.anchor) else []
            hops += [f"at {inside[0]}"] if inside else []
            hops += self._from_anchor(mark.anchor)
            hops += inside[1:]
        return hops

    def _from_anchor(self, anchor: Loc) -> list[str]:
        """``from the anchor &b at line 3 column 7``, and where that anchor itself repeats another: the hops of the
        anchor at ``anchor`` (the key or item holding it), said at the anchor's own line and column."""
        hops = self._hops(anchor)
        held = self._marks.get(anchor)
        head = held.anchored if held is not None and held.anchored else f"at {hops[0]}" if hops else ""
        return [f"from the anchor {head}", *hops[1:]] if head else []

    def _nearest(self, loc: Loc) -> tuple[int, _Mark] | None:
        """The mark of ``loc`` or of the nearest key or item holding it, and the length of that one's loc."""
        for end in range(len(loc), 0, -1):
            if (mark := self._marks.get(tuple(loc[:end]))) is not None:
                return end, mark
        return None

    def said(self, where: str, loc: Loc, first: Loc = ()) -> str:
        """``where`` (``judge.rmp``) after the line of ``loc`` (:meth:`at`): ``t.yaml line 5 column 9: judge.rmp``;
        the line alone for no ``where``."""
        at = self.at(loc, first)
        return f"{at}: {where}" if at and where else at or where

    def place(self, loc: Loc, data: Any) -> str:
        """:func:`place` of ``loc`` in ``data``, after its line (:meth:`said`)."""
        return self.said(place(loc, data), loc)

    def placed(self, problems: list[Problem]) -> list[Problem]:
        """``problems`` (those of a :class:`SuiteProblems` among them one by one), each said after its line: that of
        its error's :attr:`~ConfigError.loc` (and ``first``), else of its place where that is a key or item of the
        file (``metrics item 1 (exact_mach)``). A lone one's message then begins with its line, after "Invalid suite:"
        (:func:`raise_problems` raises it as it is)."""
        located = [(error.loc or self._places.get(where), where, error) for where, error in flat_problems(problems)]
        if len(located) == 1 and (loc := located[0][0]) and (at := self.at(loc, located[0][2].first)):
            message = str(located[0][2])
            head = "Invalid suite: " if message.startswith("Invalid suite: ") else ""
            located[0][2].args = (f"{head}{at}: {message.removeprefix(head)}",)
        return [(where if not loc else self.said(where, loc, error.first), error) for loc, where, error in located]


#: The lines of a suite given as a dict (or a Suite): none.
NO_LINES = SuiteLines()


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, keeping where each alias in a list is written (``- *base``): its node is the anchor's,
    marks and all."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        #: The mark of each list item written as an alias, by the list node's id and the item's index.
        self.alias_marks: dict[tuple[int, int], yaml.Mark] = {}
        #: The name of each node's anchor (``&base``: ``base``), by the node's id.
        self.anchor_names: dict[int, str] = {}
        #: The keys or items of each node gone through (:func:`_entries`), by its id: a mapping merged in many places
        #: (``<<: [*a, *b]``, each merging others) is read once, and one merging itself (``&a {<<: *a}``) ends.
        self.entries: dict[int, list[_Entry]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            if isinstance(index, int):
                self.alias_marks[id(parent), index] = event.start_mark
            return super().compose_node(parent, index)
        node = super().compose_node(parent, index)
        if getattr(event, "anchor", None) and node is not None:
            self.anchor_names[id(node)] = event.anchor
        return node


def _marks(loader: _Loader, node: yaml.Node, loc: Loc, seen: dict[int, Loc]) -> Iterator[tuple[Loc, _Mark]]:
    """``(loc, mark)`` of every key and list item under ``node``, counted from 1. A node an alias repeats (``*base``)
    is gone through once, where its anchor is: the alias's mark names the anchor's place, in which the lines of its
    keys are looked up (and a few nested aliases cannot make millions). A key a merge key brings in (``<<: *base``)
    is marked at the ``<<``, naming the mapping merged, where its line is looked up; one of a mapping written in
    place (``<<: {k: 1}``) is the mapping's own."""
    seen[id(node)] = loc
    for entry in _entries(loader, node):
        if entry.merged is not None and (base := seen.get(id(entry.merged.value))) is not None:
            yield (*loc, entry.key), entry.merged.mark._replace(anchor=base, within=(entry.key,))
        elif (anchor := seen.get(id(entry.value))) is not None:
            yield (*loc, entry.key), entry.mark._replace(anchor=anchor)
        else:
            yield (*loc, entry.key), _anchored(loader, entry)
            yield from _marks(loader, entry.value, (*loc, entry.key), seen)


def _anchored(loader: _Loader, entry: _Entry) -> _Mark:
    """``entry``'s mark, with the anchor its value carries and where it is written (:attr:`_Mark.anchored`)."""
    if (name := loader.anchor_names.get(id(entry.value))) is None:
        return entry.mark
    at = _mark(entry.value.start_mark)
    return entry.mark._replace(anchored=f"&{name} at line {at.line} column {at.column}")


class _Merged(NamedTuple):
    """The mapping a merge key brings a key in from, and where its ``<<`` is written."""

    value: yaml.Node
    mark: _Mark


class _Entry(NamedTuple):
    """A key (a string or a number) or item of a node: its key or index, where it is written, its value, and for a
    key a merge key brings in, the mapping it comes from."""

    key: str | int
    mark: _Mark
    value: yaml.Node
    merged: _Merged | None = None


def _entries(loader: _Loader, node: yaml.Node) -> list[_Entry]:
    """Each key or item of ``node``; for a mapping, its own keys, then those its merge keys bring in that it does not
    write (an earlier mapping merged wins, as YAML reads them). Read once per node (:attr:`_Loader.entries`)."""
    if (known := loader.entries.get(id(node))) is not None:
        return known
    entries = loader.entries[id(node)] = []  # empty while being read: a mapping merging itself brings in nothing
    if isinstance(node, yaml.MappingNode):
        entries += _own_keys(loader, node)
        given = {entry.key for entry in entries}
        for key_node, merged in _merged(node):
            brought = [entry for entry in _entries(loader, merged) if entry.key not in given]
            given.update(entry.key for entry in brought)
            entries += [entry._replace(merged=_Merged(merged, _mark(key_node.start_mark))) for entry in brought]
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            entries.append(_Entry(index, _mark(loader.alias_marks.get((id(node), index), item.start_mark)), item))
    return entries


def _own_keys(loader: _Loader, node: yaml.MappingNode) -> list[_Entry]:
    """The keys (strings or numbers) ``node`` writes itself, not its merge keys."""
    keys = [(key_node, loader.construct_object(key_node, deep=True), value) for key_node, value in node.value
            if key_node.tag != _MERGE]  # fmt: skip
    return [_Entry(key, _mark(at.start_mark), value) for at, key, value in keys if isinstance(key, (str, int))]


#: The tag of a merge key (``<<``).
_MERGE = "tag:yaml.org,2002:merge"


def _merged(node: yaml.MappingNode) -> Iterator[tuple[yaml.Node, yaml.MappingNode]]:
    """The mappings ``node``'s merge keys bring in (``<<: *base``, ``<<: [*a, *b]``), in the order YAML gives them
    precedence, each with its ``<<`` key."""
    for key_node, value in node.value:
        if key_node.tag == _MERGE:
            values = value.value if isinstance(value, yaml.SequenceNode) else [value]
            yield from ((key_node, merged) for merged in values if isinstance(merged, yaml.MappingNode))


def _mark(mark: yaml.Mark) -> _Mark:
    return _Mark(mark.line + 1, mark.column + 1)
