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
    """Where a key or item is written; for an alias (``- *base``), also where the anchor it repeats is (its loc)."""

    line: int
    column: int
    anchor: Loc | None = None


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
        and the anchor it repeats (``t.yaml line 12 column 5, from the anchor at line 3 column 5``); where ``first``
        (an earlier entry the one at ``loc`` repeats) is too (``..., the first at line 3 column 5``); "" where the
        suite has no lines."""
        said = self._line(loc)
        if said and (earlier := self._line(first)):
            said += f", the first at {earlier}"
        return f"{self._path} {said}" if said else ""

    def _line(self, loc: Loc) -> str:
        """``line 3 column 5`` of ``loc`` (or the nearest key or item holding it), with its anchor's; "" for none."""
        for end in range(len(loc), 0, -1):
            if (mark := self._marks.get(tuple(loc[:end]))) is not None:
                said = f"line {mark.line} column {mark.column}"
                if mark.anchor is not None and (anchor := self._line(mark.anchor)):
                    said += f", from the anchor at {anchor}"
                return said
        return ""

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

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if isinstance(index, int) and self.check_event(yaml.AliasEvent):
            self.alias_marks[id(parent), index] = self.peek_event().start_mark
        return super().compose_node(parent, index)


def _marks(loader: _Loader, node: yaml.Node, loc: Loc, seen: dict[int, Loc]) -> Iterator[tuple[Loc, _Mark]]:
    """``(loc, mark)`` of every key and list item under ``node``, counted from 1. A node an alias repeats (``*base``)
    is gone through once, where its anchor is: the alias's mark names the anchor's place, which its keys' problems
    elsewhere are said at (and a few nested aliases cannot make millions); a merge key's (``<<: *base``) keys are the
    mapping's own there."""
    seen[id(node)] = loc
    for key, mark, child in _entries(loader, node):
        if (anchor := seen.get(id(child))) is not None:
            yield (*loc, key), mark._replace(anchor=anchor)
        else:
            yield (*loc, key), mark
            yield from _marks(loader, child, (*loc, key), seen)


def _entries(loader: _Loader, node: yaml.Node) -> Iterator[tuple[str | int, _Mark, yaml.Node]]:
    """Each key (a string or a number) or item of ``node``: its key or index, where it is written, and its value."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, (str, int)):
                yield key, _mark(key_node.start_mark), value
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield index, _mark(loader.alias_marks.get((id(node), index), item.start_mark)), item


def _mark(mark: yaml.Mark) -> _Mark:
    return _Mark(mark.line + 1, mark.column + 1)
