"""Validate records into :class:`Row` objects, and the pre-submit scan of a whole dataset."""

from __future__ import annotations

import hashlib
import json
import re
from array import array
from collections.abc import Callable, Container, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES, repeated_values
from ragscore_workers.answers import TARGET_ERROR, AloneRows, SystemRows
from ragscore_workers.counts import agree, and_more, counted, did_you_mean, listed, noun
from ragscore_workers.errors import DatasetError
from ragscore_workers.schemas import ITEM_META_FIELDS, Row
from ragscore_workers.settings import get_settings
from ragscore_workers.unicode_text import lone_surrogate_at, utf8_json

from ..caller import CLI, Caller
from .loaders import (
    READER_VERSION,
    KeyedRecord,
    RowError,
    WrittenRecord,
    csv_header,
    detect_format,
    iter_records,
    json_shape,
    kind,
)

__all__ = ["DatasetScan", "Named", "failed_row_at", "iter_rows", "scan_dataset", "validate_record"]

#: Duplicate ids listed in the error message before "and N more".
MAX_DUPLICATES_SHOWN = 5
#: Lists and objects nested deeper than this in a row make it a bad row: pydantic serializes a row's task
#: message only up to 255 levels, so one such row stopped the whole run at submit time.
MAX_NESTING = 100
#: What the fingerprints of reader version 1 digested in its place: the package version, 0.1.0 in each release, or
#: "?" where the package was not installed (a ragscore run from a checkout).
BEFORE_READER_VERSIONS = ("0.1.0", "?")


#: How a list or an object is written, said when a row gives text where one is expected (a CSV cell of plain
#: text, or a JSON string holding a list): pydantic's "Input should be a valid list" alone does not say it.
SHAPE_HINTS = {
    "list_type": 'a list is written ["a", "b"]',
    "dict_type": 'an object is written {"key": "value"}',
    "model_type": 'an object is written {"key": "value"}',
}


#: Separators a spreadsheet joins a list's items with in one cell (``p1|p2``, ``d1;d2``), named in the row's error.
LIST_JOINERS = ("|", ";")
#: What a context is, said instead of pydantic's "a valid dictionary or instance of Context" (a class of ours).
CONTEXT_SHAPE = 'a context is text or an object with "text" (or "page_content", "content")'


def _one_line(exc: ValidationError) -> str:
    """The row's first validation error, then how many more it has (``; and 1,199 more errors``: after a semicolon,
    not read as part of the first's own end, ``got int``)."""
    errors = exc.errors()
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"]) or "row"
    more = f"; {and_more(len(errors) - 1, 'error')}" if len(errors) > 1 else ""
    return f"{loc}: {_reason(first)}{more}"


def _reason(error: Any) -> str:
    """pydantic's message of a row's ``error``; where a value of the wrong kind was given, with what was given
    (``got null``) or, for text, how the list or object wanted is written."""
    message = CONTEXT_SHAPE if error.get("ctx", {}).get("class_name") == "Context" else error["msg"]
    if not error["type"].endswith("_type"):
        return message
    given = error.get("input")
    if not isinstance(given, str):
        return f"{message}, got {kind(given)}"
    hint = SHAPE_HINTS.get(error["type"])
    if not hint:
        return message
    joiners = LIST_JOINERS if error["type"] == "list_type" else ()
    joined = next((f", not joined by {sep!r}" for sep in joiners if sep in given), "")
    return f"{message}, not text ({hint}, in a CSV cell too{joined})"


def _oversized(row: Row, limit: int) -> str | None:
    """The first text field longer than ``limit`` characters, described, or None."""
    texts = [("question", row.question), ("answer", row.answer), ("reference", row.reference), ("code", row.code)]
    texts += [(f"contexts[{i}]", c.text) for i, c in enumerate(row.contexts)]
    for name, text in texts:
        if text is not None and len(text) > limit:
            return f"{name} has {len(text):,} characters, over the limit of {limit:,} (RAGSCORE_MAX_FIELD_CHARS)"
    return None


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than ``limit`` levels deep in ``value`` (walked a level at a time, without
    recursion)."""
    level, depth = [value], 1
    while level:
        if depth > limit:
            return True
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, (dict, list))]  # fmt: skip
        depth += 1
    return False


def _excerpt(record: dict[str, Any], ascii_only: bool = False) -> str:
    """A bad record's raw for ``failed_rows.jsonl`` (:class:`RowError` cuts it): its text as written where the reader
    kept it (a CSV row's lines), else the record as JSON ("" when it nests too deep to write); a record holding a lone
    surrogate (half an emoji, which UTF-8 cannot hold) is written with ASCII escapes."""
    if isinstance(record, WrittenRecord):
        return record.written
    try:
        text = json.dumps(record, default=str) if ascii_only else utf8_json(record, default=str)
    except (RecursionError, ValueError):
        return ""
    return text


def validate_record(line: int, record: dict[str, Any], max_chars: int | None = None) -> Row | RowError:
    """A record becomes a Row (missing id -> ``row-<line>``) or a RowError with a one-line reason.

    Text fields are bounded (``RAGSCORE_MAX_FIELD_CHARS``): a 10 MB answer is a reported row, never a
    worker running out of memory or a message too large for the broker.
    """
    raw = record  # a bad row is reported as read, without the id given here
    key = record["id"] if isinstance(record, KeyedRecord) else None  # a JSON object's row is said by its key
    if record.get("id") in (None, ""):
        record = {**record, "id": f"row-{line}"}
    # In a field that names the item a lone surrogate is refused with the row; elsewhere (answers, contexts,
    # metadata) it is kept: results and reports write it as its ``\\udfff`` escape.
    if (where := lone_surrogate_at({k: record[k] for k in ITEM_META_FIELDS if k in record})) is not None:
        reason = f"{where}: a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape without its pair) is not text"
        return RowError(line, reason, _excerpt(raw, ascii_only=True), key)
    if _nested_deeper(record, MAX_NESTING):
        return RowError(line, f"lists and objects nested more than {MAX_NESTING} levels deep", _excerpt(raw), key)
    try:
        row = Row.model_validate(record)
    except ValidationError as exc:
        return RowError(line, _one_line(exc), _excerpt(raw), key)
    too_big = _oversized(row, max_chars if max_chars is not None else get_settings().max_field_chars)
    if too_big:
        return RowError(line, too_big, _excerpt(raw), key)
    return row


def iter_rows(
    path: Path,
    fmt: str | None = None,
    options: dict[str, Any] | None = None,
    ids: Container[str] | None = None,
    max_chars: int | None = None,
    caller: Caller = CLI,
) -> Iterator[tuple[int, Row | RowError]]:
    """Stream validated rows (or errors) with their line numbers; with ``ids``, only the records whose id is one
    of them are validated and yielded (the id checked first, which costs little beside validating a row). Text
    fields are bounded by ``max_chars`` (RAGSCORE_MAX_FIELD_CHARS when None). ``caller``: whose options the
    reader's errors name."""
    max_chars = max_chars if max_chars is not None else get_settings().max_field_chars
    for line, record in iter_records(path, fmt, options, caller):
        if isinstance(record, RowError):
            yield line, record
        elif ids is None or not _other_id(line, record, ids):
            yield line, validate_record(line, record, max_chars)


def _other_id(line: int, record: dict[str, Any], ids: Container[str]) -> bool:
    """Whether ``record``'s id is surely none of ``ids`` (an id given as text or an integer, or none:
    ``row-<line>``); any other id is left to validation to read."""
    raw = record.get("id")
    if raw in (None, ""):
        return f"row-{line}" not in ids
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw) not in ids
    return isinstance(raw, str) and raw not in ids


def dataset_fingerprint(
    dataset: Path, fmt: str | None, fmt_options: dict[str, Any] | None, reader: int = READER_VERSION
) -> str | None:
    """A digest of the dataset's bytes (a file's, or each file's of a folder dataset with its path in the folder:
    eval-points, hf-disk) and of what decides how they read (format, the field limit, the loaders'
    ``reader`` version, which it starts with: ``r2-...``): equal at a resume, the rows are the ones submitted, so the
    resume need not read and validate the whole dataset an extra time to check it; unequal, a report shows no answer
    it cannot vouch for. None where format options name other files, or the dataset is neither a file nor a folder.
    ``reader`` 1 gives the fingerprint those loaders recorded (no version named: BEFORE_READER_VERSIONS's first
    digested)."""
    prints = _fingerprints(dataset, fmt, fmt_options, reader)
    return prints[0] if prints else None


def _fingerprints(dataset: Path, fmt: str | None, fmt_options: dict[str, Any] | None, reader: int) -> list[str]:
    """Each fingerprint (:func:`dataset_fingerprint`) the loaders' ``reader`` version may have recorded of the
    dataset, in one pass over its bytes: version 1's one per BEFORE_READER_VERSIONS; none where there is none."""
    if fmt_options or not (dataset.is_file() or dataset.is_dir()):
        return []
    digests = []
    for version in (reader,) if reader > 1 else BEFORE_READER_VERSIONS:
        digests.append(hashlib.blake2b(digest_size=16))
        digests[-1].update(json.dumps([fmt or "", get_settings().max_field_chars, version]).encode())
    for path in dataset_files(dataset):
        if path != dataset:  # a folder's file: its place in the folder is part of what it holds
            place = json.dumps([path.relative_to(dataset).as_posix(), path.stat().st_size]).encode()
            for digest in digests:
                digest.update(place)
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                for digest in digests:
                    digest.update(chunk)
    return [f"r{reader}-{d.hexdigest()}" if reader > 1 else d.hexdigest() for d in digests]


def same_bytes_reader(
    recorded: str | None, dataset: Path, fmt: str | None, fmt_options: dict[str, Any] | None
) -> int | None:
    """The loaders' version whose fingerprint of the dataset is ``recorded`` (a run's): READER_VERSION where its rows
    are the ones the run read; another where its bytes are the ones the run read, by other loaders (rows may read
    otherwise); None where none was recorded or the bytes differ. One pass over the bytes, for the version the
    fingerprint names alone (``r2-...``; none named: 1, whichever BEFORE_READER_VERSIONS it digested)."""
    if not recorded:
        return None
    named = re.fullmatch(r"r(\d+)-[0-9a-f]+", recorded)
    reader = int(named.group(1)) if named else 1
    return reader if recorded in _fingerprints(dataset, fmt, fmt_options, reader) else None


def other_reader(reader: int) -> str:
    """How a message names the ragscore whose loaders' version ``reader`` is, not this one's: ``an older ragscore
    (its loaders' version 1, this one's 4)``."""
    which = "an older" if reader < READER_VERSION else "a newer"
    return f"{which} ragscore (its loaders' version {reader}, this one's {READER_VERSION})"


def dataset_files(dataset: Path) -> list[Path]:
    """The files a dataset's rows are read from: the file itself, or a folder's files (at any depth, in path
    order; a link to a file counted as that file, as git-annex and DVC store them)."""
    if not dataset.is_dir():
        return [dataset]
    return sorted(path for path in dataset.rglob("*") if path.is_file())


#: Links out of a dataset folder its warning names (:func:`links_outside`).
MAX_LINKS_SHOWN = 3


def links_outside(folder: Path) -> list[tuple[Path, Path]]:
    """The files of dataset folder ``folder`` (:func:`dataset_files`) that are links to a file outside it, each with
    the file it leads to: read as that file (a data lake's, git-annex's or DVC's links are the data itself), and said
    (:meth:`DatasetScan.warnings`), as what is read is not what the folder holds. Only a file reached through a link
    (:func:`_through_link`) is resolved: a plain file costs an ``lstat`` of each step of its path within the folder,
    not a walk of its whole path."""
    root = folder.resolve()
    linked = (path for path in dataset_files(folder) if _through_link(path, folder))
    return [(path, target) for path in linked if not (target := path.resolve()).is_relative_to(root)]


def _through_link(path: Path, folder: Path) -> bool:
    """Whether ``path`` (a file of dataset folder ``folder``), or a folder above it within ``folder``, is a link."""
    for here in (path, *path.parents):
        if here == folder:
            return False
        if here.is_symlink():
            return True
    return False


@dataclass
class DatasetScan:
    """What the pre-submit pass learned: counts, and per-field presence for planning."""

    rows: int = 0
    failed: int = 0
    #: The first few duplicates, each said as "id 'x' of system 's' on lines 2 and 9" (Named.both).
    duplicates: list[str] = field(default_factory=list)
    duplicate_count: int = 0
    #: The first few unreadable rows, named in the error when no row at all could be read.
    first_failures: list[RowError] = field(default_factory=list)
    #: Columns that are no row field but look like one (``Answer``, ``gold answer``): name -> the field.
    near_misses: dict[str, str] = field(default_factory=dict)
    #: Where each of ``near_misses`` is in a dataset file, where that is known: ``header of d.csv, line 1, column 2``,
    #: ``first in d.jsonl line 7`` (the first row that has it), ``first in d.json row 3 of the JSON list``.
    near_miss_at: dict[str, str] = field(default_factory=dict)
    #: Row fields some row gives a value (a null is none, as when absent; contexts without text too, :func:`_seen`;
    #: ``id`` always): only ``id`` means no metric will find anything to score.
    fields_seen: set[str] = field(default_factory=set)
    #: Row fields some row gives a value, even one the metrics read as none (:func:`_given`: ``contexts: []``).
    fields_given: set[str] = field(default_factory=set)
    #: Columns that are no row field nor named like one (``near_misses``), given text or a list by some row (the first
    #: MAX_COLUMNS_SEEN): named in hints such as code_test's (``completion``: give it as ``code``) and a misspelt
    #: field's (``refrence``).
    columns_seen: set[str] = field(default_factory=set)
    #: An nlp-project questions file read without its predictions, so no row has an answer (its own ``answer`` is
    #: the gold one, read as ``reference``).
    questions_alone: bool = False
    #: An nlp-project questions file whose ``.jsonl`` name had it read as plain rows (no --format given): its
    #: ``doc_id`` and ``evidence_sentences`` are no row fields there.
    questions_as_rows: bool = False
    #: A Hugging Face datasets folder's columns of a media feature, not read (hf_disk.media_columns): name -> feature.
    media_columns: dict[str, str] = field(default_factory=dict)
    #: Rows with their own top-level :data:`TARGET_ERROR` (an earlier target run's answers.jsonl), which a suite's
    #: targets drop: they answer the question anew.
    target_marks: int = 0
    #: A dataset folder's files that are links to files outside it, and where they lead (:func:`links_outside`).
    links_out: list[tuple[Path, Path]] = field(default_factory=list)
    #: Rows marked :data:`NO_RETRIEVAL` (an LLM-alone target run's answers.jsonl): their system retrieves nothing.
    alone_rows: int = 0
    #: Rows that lack ``evidence_sentences`` by design where they lack them (``Row.evidence_unnamed_by_design``: marked
    #: so, or without contexts saying their retrieval found nothing).
    evidence_by_design_rows: int = 0
    #: The rows of each system (the first MAX_BREAKDOWN_VALUES, as the summary's breakdown keeps them; later ones are
    #: not counted): which systems give no contexts nor retrieved ids where others do (a mixed answers.jsonl).
    systems: dict[str | None, SystemRows] = field(default_factory=dict)
    #: How its messages name the dataset and its rows (a JSON list's by their place in it, an object's by key).
    named: Named = field(default_factory=lambda: Named(""))

    @property
    def alone(self) -> AloneRows:
        """The rows marked as an LLM alone's, for the pre-run warnings (``ResolvedSuite.pre_run_warnings``)."""
        every = self.rows > 0 and self.alone_rows == self.rows
        evidence = self.rows > 0 and self.evidence_by_design_rows == self.rows
        return AloneRows(
            self.alone_rows, every=every, systems=tuple(self.systems.values()), evidence_by_design=evidence
        )

    def count_system(self, row: Row, seen: set[str]) -> None:
        """Count ``row``, having the fields ``seen``, among its system's rows (:attr:`systems`)."""
        rows = self.systems.get(row.system)
        if rows is None and len(self.systems) < MAX_BREAKDOWN_VALUES:
            rows = self.systems[row.system] = SystemRows(row.system)
        if rows is not None:
            rows.add(row.answered_alone, seen)

    @property
    def fields_empty(self) -> set[str]:
        """Row fields some row gives but none with a value the metrics read (every ``contexts`` empty: an LLM
        alone's), which no column named otherwise explains."""
        return self.fields_given - self.fields_seen

    def _links_said(self) -> str:
        """The warning of :attr:`links_out`: which links lead where, and that they are read all the same."""
        n = len(self.links_out)
        links = listed([f"{str(link)!r} -> {str(target)!r}" for link, target in self.links_out], MAX_LINKS_SHOWN,
                       more="link")  # fmt: skip
        return (f"{counted(n, 'file')} of dataset folder {self.named.name} {agree(n, 'is a link', 'are links')} to "
                f"a file outside it, read all the same: {links}; check {agree(n, 'it leads', 'they lead')} to the data "
                "you mean (a copy in the folder is read as it is)")  # fmt: skip

    def _near_miss_at(self, column: str) -> str:
        """``header of d.csv, line 1, column 2; `` where near-miss ``column`` is known to be, else ``""``."""
        where = self.near_miss_at.get(column)
        return f"{where}; " if where else ""

    def failures_said(self) -> list[str]:
        """The first unreadable rows, each as ``line 3: why`` (``row 3 of the JSON list: why``, :meth:`Named.at`)."""
        return [f"{self.named.at(e)}: {e.error}" for e in self.first_failures]

    def warnings(self, filled: Container[str] = frozenset(), caller: Caller = CLI, *, asked: bool = False) -> list[str]:
        """What is probably wrong with a dataset that still reads (said before a run and by ``--dry-run``).
        ``filled``: the row fields the suite's targets fill (a target's ``answer`` is a system's answer); ``caller``:
        whose options are named; ``asked``: the suite has targets, which ask every row's question."""
        out = []
        if asked and self.target_marks:
            n = self.target_marks
            out.append(f"{counted(n, 'row')} {agree(n, 'carries its', 'carry their')} own {TARGET_ERROR!r} (an earlier "
                       "target run's answers.jsonl?), which this run ignores: the suite's targets ask every question "
                       f"anew (to score the rows as they are, {caller.no_target()})")  # fmt: skip
        predictions = caller.option("predictions")
        if self.questions_alone and "answer" not in filled:
            out.append(f"the nlp-project questions file was read without {predictions}: its 'answer' is the gold "
                       "answer (read as reference), so no row has a system's answer: give the system's predictions "
                       f"JSON with {predictions} (or a suite target that asks the system)")  # fmt: skip
        if self.questions_as_rows:
            out.append(f"{self.named.name} looks like the NLP project's questions file (doc_id, question and "
                       "evidence_sentences a line) but was read as plain rows, which have no gold_doc_id nor gold "
                       f"evidence: read it with {caller.given('format', 'nlp-project')} {predictions} PRED.json "
                       f"(or {caller.given('format', 'jsonl')} to keep it so)")  # fmt: skip
        if self.rows and self.fields_seen <= {"id"}:
            out.append("no row has a field besides its id, so no metric will find anything to score (the wrong "
                       f"{caller.option('format')}, or columns that are no row field?)")  # fmt: skip
        if self.media_columns:
            n = len(self.media_columns)
            named = ", ".join(f"{col!r} ({kind})" for col, kind in self.media_columns.items())
            out.append(f"{noun(n, 'column')} {named} {agree(n, 'holds', 'hold')} files (a datasets media feature: "
                       f"bytes and a path) that no metric reads: {agree(n, 'it is', 'they are')} not read")  # fmt: skip
        if self.links_out:
            out.append(self._links_said())
        if self.near_misses:
            named = ", ".join(f"{col!r} ({self._near_miss_at(col)}{did_you_mean([fld])})"
                              for col, fld in self.near_misses.items())  # fmt: skip
            cased = any(_normal(col) not in FOREIGN_NAMES for col in self.near_misses)
            n = len(self.near_misses)
            out.append(f"{noun(n, 'column')} {named} {agree(n, 'is', 'are')} no row field"
                       f"{' (names are case-sensitive)' if cased else ''}; metrics ignore "
                       f"{agree(n, 'it', 'them')}")  # fmt: skip
        return out


@dataclass(frozen=True)
class Named:
    """How a message names a dataset and its rows: a file by its path and lines, or (``as_rows``) a copy of rows
    given in memory, one a line (``evaluate()``'s), as what was given and the 0-based indexes of its rows (line N
    is row N-1): the caller never named the copy. ``in_json``: the file is one JSON ``list``, whose reader numbers its
    rows by their place in the list (from 1), not by their line (a list on one line has one), or one ``object`` keyed
    by id, whose rows are said by their key."""

    name: str
    as_rows: bool = False
    in_json: str | None = None

    @classmethod
    def of(cls, path: Path) -> Named:
        return cls(str(path))

    def of_file(self, path: Path, fmt: str | None, options: dict[str, Any] | None, caller: Caller) -> Named:
        """As named, its rows said by their place in the list or their key (``in_json``) where ``path`` is one JSON
        list or object."""
        if self.as_rows or self.in_json or (shape := json_shape(path)) is None:
            return self
        return replace(self, in_json=shape if (fmt or detect_format(path, options, caller)) == "json" else None)

    def place(self, line: int) -> str:
        """``line 3`` of a file, ``row 3 of the JSON list`` (or object): where the row read at ``line`` (a JSON file's
        place in it) is."""
        return f"row {line} of the JSON {self.in_json}" if self.in_json else f"line {line}"

    def at(self, err: RowError) -> str:
        """``line 3``, ``row 2`` of the rows given, ``row 3 of the JSON list`` or ``row "q3" of the JSON object``."""
        return failed_row_at(self.failed_row(err))

    def failed_row(self, err: RowError) -> dict[str, Any]:
        """``err`` as ``failed_rows.jsonl`` keeps it: its line (from 1), and for rows given also its ``index``; a JSON
        list's row by its ``row`` in the list (from 1) instead of a line, a JSON object's by its ``row`` among the
        object's (from 1) and its ``key``."""
        if self.in_json == "object":
            return {"row": err.line, "key": err.key, "error": err.error, "raw": err.raw}
        if self.in_json:
            return {"row": err.line, "error": err.error, "raw": err.raw}
        return err.to_json() | ({"index": err.line - 1} if self.as_rows else {})

    def both(self, first: int, second: int) -> str:
        """``on lines 2 and 9``, ``in rows 1 and 8`` of the rows given, or ``in rows 2 and 9 of the JSON list``."""
        if self.as_rows:
            return f"in rows {first - 1} and {second - 1}"
        if self.in_json:
            return f"in rows {first} and {second} of the JSON {self.in_json}"
        return f"on lines {first} and {second}"


def failed_row_at(row: Mapping[str, Any]) -> str:
    """Where a row of failed_rows.jsonl (:meth:`Named.failed_row`) is: ``row 2`` of the rows given (its ``index``),
    ``row "q3" of the JSON object`` (its ``key``), ``row 3 of the JSON list`` (its ``row``), else ``line 3``."""
    if "index" in row:
        return f"row {row['index']}"
    if "key" in row:
        return f"row {utf8_json(row['key'])} of the JSON object"  # a lone surrogate's as its escape
    if "row" in row:
        return f"row {row['row']} of the JSON list"
    return f"line {row.get('line', '-')}"


#: Unreadable rows named in the error of a dataset with no readable row.
SHOWN_FAILURES = 5
#: The fields a row model declares (extra columns are not among them).
ROW_FIELDS = frozenset(Row.model_fields)
#: Columns that look like a row field named in the warning.
MAX_NEAR_MISSES = 10
#: Columns that are no row field kept by the scan (DatasetScan.columns_seen).
MAX_COLUMNS_SEEN = 100


def _normal(name: str) -> str:
    return name.strip().lower().replace(" ", "_").replace("-", "_")


#: Columns that hold a row field under another name or in another shape: named in the near-miss warning.
FOREIGN_NAMES = {
    "ground_truths": "reference",  # Ragas 0.1: a list of reference answers (give one string)
    "query": "question",  # LangChain's retrievers and LlamaIndex's query engines
    "context": "contexts",  # the singular: every row read as retrieving nothing (quality_checks: no_contexts)
}
#: Those of FOREIGN_NAMES that are only another name: beside the field itself, the column is the user's own data.
OTHER_NAMES = frozenset({"query", "context"})


def _field_names() -> dict[str, str]:
    """Column name -> the row field a row reads it as: each field's own name and its aliases'."""
    names = {}
    for name, info in Row.model_fields.items():
        aliases = getattr(info.validation_alias, "choices", None) or []
        for alias in [name, *(a for a in aliases if isinstance(a, str))]:
            names[alias] = name
    return names


#: The row field a column of each name is read as: the field's own name or an alias (``gold_answer``: reference).
FIELD_NAMES = _field_names()


def _row_field_names() -> dict[str, str]:
    """Normalised name -> row field, for every field and alias (``gold_answer`` -> ``reference``) and the
    columns of other tools that hold one in another shape (FOREIGN_NAMES)."""
    return FOREIGN_NAMES | {_normal(alias): name for alias, name in FIELD_NAMES.items()}


_ROW_FIELDS = _row_field_names()


@lru_cache(maxsize=1024)
def _field_like(column: str) -> str | None:
    """The row field a column is named like but for case, spaces or dashes (checked once per column name,
    not once per row)."""
    return _ROW_FIELDS.get(_normal(column))


def _given(row: Row, name: str) -> bool:
    """Whether the row gives field ``name`` a value: a null is none, as an absent field (``evaluate()`` writes a
    DataFrame's missing cell as null)."""
    return name in row.model_fields_set and getattr(row, name) is not None


def _seen(row: Row, name: str) -> bool:
    """Whether the row has field ``name`` for the checks of fields no row has (:func:`_given`); ``contexts`` only
    where the metrics that leave a row without them unscorable read it so (``Row.has_contexts``: not ``[]``)."""
    return _given(row, name) and (name != "contexts" or row.has_contexts)


def _filled(row: Row, name: str) -> bool:
    """Whether the row gives field ``name`` a value the metrics read as one: an empty list is none, as a null or an
    absent field (a row's ``contexts: []`` is scored as retrieving nothing, as one without contexts)."""
    return _given(row, name) and getattr(row, name) != []


def _note_near_misses(row: Row, found: dict[str, str]) -> list[str]:
    """Record extra columns whose name is a row field's but for case, spaces or dashes (read as data of no
    metric otherwise: ``Answer`` leaves every answer empty), or another tool's column for one (FOREIGN_NAMES); one
    that is only another name (OTHER_NAMES) when the row lacks the field or leaves it empty (:func:`_filled`; a
    ``query`` beside the ``question`` is the user's own data). Returns the columns newly recorded."""
    new = []
    for name in row.model_extra or {}:
        if name in found or len(found) >= MAX_NEAR_MISSES or (target := _field_like(name)) is None:
            continue
        if _normal(name) not in OTHER_NAMES or not _filled(row, target):
            found[name] = target
            new.append(name)
    return new


def _csv_near_misses_at(path: Path, scan: DatasetScan) -> None:
    """Say the near misses of CSV file ``path`` where its header row names them (``line 1, column 2``), in place of
    the first row that has them."""
    header = csv_header(path)
    if header is None:
        return
    line, names = header
    for column in scan.near_misses:
        if column in names:
            scan.near_miss_at[column] = f"header of {scan.named.name}, line {line}, column {names.index(column) + 1}"


def _note_columns(row: Row, seen: set[str]) -> None:
    """Record the row's extra columns that hold text or a list (``retrieved_doc_ds``), up to MAX_COLUMNS_SEEN; not
    one named like a field but for case, spaces or dashes, or another tool's name for one (:func:`_field_like`),
    which the near-miss warning names already (:func:`_note_near_misses`)."""
    for name, value in (row.model_extra or {}).items():
        if len(seen) >= MAX_COLUMNS_SEEN or name in seen or _field_like(name) is not None:
            continue
        if (isinstance(value, str) and value.strip()) or (isinstance(value, list) and value):
            seen.add(name)


def _key_hash(key: str) -> int:
    """A stable signed 64-bit hash of an item key."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def _scan_key(row: Row, asked_as: str | None) -> str:
    """What must be unique: the row's item key, or its id alone when a target answers every row as its system."""
    return row.id if asked_as is not None else row.key


def _find_duplicates(
    path: Path, fmt: str | None, options: dict[str, Any] | None, repeated: set[int], scan: DatasetScan,
    asked_as: str | None, named: Named, caller: Caller,
) -> None:  # fmt: skip
    """Second pass (only when hashes repeat): the real duplicate keys and the lines (a JSON list's places) they repeat
    on."""
    first_seen: dict[str, int] = {}
    for line, row in iter_rows(path, fmt, options, caller=caller):
        if isinstance(row, RowError) or _key_hash(key := _scan_key(row, asked_as)) not in repeated:
            continue
        if key in first_seen:  # a real duplicate, not a hash collision
            scan.duplicate_count += 1
            if len(scan.duplicates) < MAX_DUPLICATES_SHOWN:
                system = f" of system {row.system!r}" if row.system is not None and asked_as is None else ""
                scan.duplicates.append(f"id {row.id!r}{system} {named.both(first_seen[key], line)}")
        else:
            first_seen[key] = line


def _questions_alone(path: Path, fmt: str | None, options: dict[str, Any] | None, caller: Caller) -> bool:
    """Whether ``path`` is read as an nlp-project questions file without --predictions."""
    if options and options.get("predictions"):
        return False
    if fmt is None and path.is_file() and path.suffix.lower() not in (".json", ".gz"):  # detecting JSON parses it
        fmt = detect_format(path, options, caller)
    return fmt == "nlp-project"


def _questions_as_rows(path: Path, fmt: str | None, options: dict[str, Any] | None, caller: Caller) -> bool:
    """Whether ``path``, given no format, is read as plain JSONL though it is an nlp-project questions file."""
    if fmt is not None or not path.is_file() or path.suffix.lower() == ".gz":
        return False
    from .nlp_project import looks_like_nlp_project

    return detect_format(path, options, caller) == "jsonl" and looks_like_nlp_project(path)


def scan_dataset(
    path: Path,
    fmt: str | None,
    on_error: Callable[[RowError], None],
    options: dict[str, Any] | None = None,
    on_row: Callable[[Row], None] | None = None,
    asked_as: str | None = None,
    named: Named | None = None,
    caller: Caller = CLI,
) -> DatasetScan:
    """Read the whole dataset once without keeping it: count rows, report bad ones, find duplicate ids (per system;
    across the rows' systems when ``asked_as``, the system a target answers every row as, makes them one).
    Errors name the dataset and its rows as ``named`` says (its path and lines when None), and the options of
    ``caller``.

    Raises DatasetError (before anything is submitted) for duplicate ids or when no row is valid.
    Memory: one 8-byte hash per row in a flat array (8 MB per million rows), not the rows; lines of
    duplicates are found by a second pass that runs only when two hashes are equal.
    """
    named = (named or Named.of(path)).of_file(path, fmt, options, caller)
    scan = DatasetScan(named=named)
    hashes = array("q")  # 8 bytes per row: the only state that grows with the dataset
    for line, row in iter_rows(path, fmt, options, caller=caller):
        if isinstance(row, RowError):
            scan.failed += 1
            if len(scan.first_failures) < SHOWN_FAILURES:
                scan.first_failures.append(row)
            on_error(row)
            continue
        scan.rows += 1
        given = {f for f in row.model_fields_set & ROW_FIELDS if _given(row, f)}
        seen = {f for f in given if _seen(row, f)}
        scan.fields_given |= given
        scan.fields_seen |= seen
        scan.count_system(row, seen)
        scan.evidence_by_design_rows += row.evidence_unnamed_by_design
        if row.model_extra:
            scan.target_marks += TARGET_ERROR in row.model_extra
            scan.alone_rows += row.answered_alone
            for column in _note_near_misses(row, scan.near_misses):
                if path.is_file() and not named.as_rows:  # a folder's lines are each file's; rows given: no file
                    scan.near_miss_at[column] = f"first in {named.name} {named.place(line)}"
            _note_columns(row, scan.columns_seen)
        if on_row is not None:
            on_row(row)
        hashes.append(_key_hash(_scan_key(row, asked_as)))
    if hashes:
        repeated = set(repeated_values(hashes).tolist())
        del hashes
        if repeated:
            _find_duplicates(path, fmt, options, repeated, scan, asked_as, named, caller)
    if scan.duplicate_count:
        unique = (f"Ids must be unique: target {asked_as!r} answers every row as its system, whatever the row's own "
                  f"(re-scoring a target run's answers.jsonl? {caller.no_target()})" if asked_as is not None
                  else "Ids must be unique per system")  # fmt: skip
        # "and 2 more duplicate ids", not "and 2 more": after "on lines 5 and 12" that read as two more lines
        shown = listed(scan.duplicates, MAX_DUPLICATES_SHOWN, total=scan.duplicate_count, sep="; ", more="duplicate id")
        raise DatasetError(
            f"{named.name}: {counted(scan.duplicate_count, 'duplicate id')}: {shown}. {unique}; nothing was submitted."
        )
    if (
        scan.near_misses
        and path.is_file()
        and not named.as_rows
        and (fmt or detect_format(path, options, caller)) == "csv"
    ):
        _csv_near_misses_at(path, scan)
    scan.questions_alone = "answer" not in scan.fields_seen and _questions_alone(path, fmt, options, caller)
    # rows of our own layout that carry a doc_id column beside their gold fields are read as meant
    gold = {"gold_doc_id", "gold_evidence_sentences"} & scan.fields_seen
    scan.questions_as_rows = not gold and _questions_as_rows(path, fmt, options, caller)
    if path.is_dir():
        scan.links_out = links_outside(path)
    if fmt in (None, "hf-disk") and path.is_dir():
        from .hf_disk import media_columns

        scan.media_columns = media_columns(path)
    if scan.rows == 0:
        if not scan.failed:
            raise DatasetError(f"{named.name}: no rows to score; nothing was submitted.")
        reasons = "\n".join(f"  {said}" for said in scan.failures_said())
        hidden = scan.failed - len(scan.first_failures)
        more = f"\n  {and_more(hidden)}" if hidden else ""  # one a line: not listed()'s "a, b and 2 more"
        raise DatasetError(
            f"{named.name}: no rows to score ({counted(scan.failed, 'row')} could not be read); nothing was "
            "submitted.\n"
            f"{reasons}{more}"
        )
    return scan
