"""Where each key and list item of a suite file is written (its line and column), for the suite's problems to name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from ragscore_workers.counts import place
from ragscore_workers.errors import Problem, flat_problems

__all__ = ["NO_LINES", "SuiteLines"]

#: A place in a suite as pydantic gives it (``("metrics", 1, "params", "k")``).
Loc = tuple[Any, ...]


class SuiteLines:
    """The line and column of each key and item of one suite file, read from YAML's marks (JSON is read as YAML here:
    a JSON text YAML cannot read has no lines, its problems said without them). Empty for a suite given as a dict."""

    def __init__(self, path: Path | None = None, marks: dict[Loc, tuple[int, int]] | None = None, data: Any = None):
        self._path = path
        self._marks = marks or {}
        #: Each key's and item's place as problems name it (``metrics item 1 (exact_mach)``), and its loc.
        self._places = {place(loc, data): loc for loc in self._marks}

    @classmethod
    def of(cls, path: Path, text: str, data: Any) -> SuiteLines:
        """The lines of the suite file ``path`` holding ``text``, which reads as ``data``."""
        # a tab, which YAML refuses as indentation, is only whitespace in a JSON text (a string holds it escaped)
        loader = yaml.SafeLoader(text.replace("\t", " ") if path.suffix.lower() == ".json" else text)
        try:
            node = loader.get_single_node()
            marks = dict(_marks(loader, node, (), set())) if node is not None else {}
        except yaml.YAMLError:
            marks = {}
        finally:
            loader.dispose()
        return cls(path, marks, data)

    def at(self, loc: Loc) -> str:
        """``t.yaml line 3 column 5``: where the key or item at ``loc`` (or the nearest one holding it) is written;
        "" where the suite has no lines."""
        for end in range(len(loc), 0, -1):
            if (mark := self._marks.get(tuple(loc[:end]))) is not None:
                return f"{self._path} line {mark[0]} column {mark[1]}"
        return ""

    def said(self, where: str, loc: Loc) -> str:
        """``where`` (``judge.rmp``) after the line of ``loc``: ``t.yaml line 5 column 9: judge.rmp``."""
        return f"{at}: {where}" if (at := self.at(loc)) else where

    def place(self, loc: Loc, data: Any) -> str:
        """:func:`place` of ``loc`` in ``data``, after its line (:meth:`said`)."""
        return self.said(place(loc, data), loc)

    def placed(self, problems: list[Problem]) -> list[Problem]:
        """``problems`` (those of a :class:`SuiteProblems` among them one by one), each place that is a key or item of
        the file (``metrics item 1 (exact_mach)``) said after its line; a lone one's message then begins with its line
        (:func:`raise_problems` raises it as it is)."""
        located = [(self._places.get(where), where, error) for where, error in flat_problems(problems)]
        if len(located) == 1 and (loc := located[0][0]) is not None:
            located[0][2].args = (f"{self.at(loc)}: {located[0][2]}",)
        return [(where if loc is None else self.said(where, loc), error) for loc, where, error in located]


#: The lines of a suite given as a dict (or a Suite): none.
NO_LINES = SuiteLines()


def _marks(loader: yaml.SafeLoader, node: yaml.Node, loc: Loc, seen: set[int]) -> Iterator[tuple[Loc, tuple[int, int]]]:
    """``(loc, (line, column))`` of every key and list item under ``node``, counted from 1. A node an alias repeats
    (``*base``) is gone through once, where its anchor is: its keys' problems elsewhere name the alias's place (and a
    few nested aliases cannot make millions); a merge key's (``<<: *base``) keys are the mapping's own there."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, (str, int)):
                yield (*loc, key), _mark(key_node)
                yield from _marks(loader, value, (*loc, key), seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield (*loc, index), _mark(item)
            yield from _marks(loader, item, (*loc, index), seen)


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1
