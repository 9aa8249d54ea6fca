"""Dataset loaders: JSONL and CSV streamed row by row; JSON (a list, or an object keyed by id); each of them
gzip-compressed too (``rows.jsonl.gz``); Parquet and Hugging Face ``save_to_disk`` folders streamed a batch at a
time (``parquet.py``, ``hf_disk.py``); the seed frameworks' layouts (``SEED_FORMATS``, one reader module each, see
docs/datasets.md).

Each loader yields ``(line, record_or_error)``: line numbers are 1-based as an editor shows them (for
JSON files, the element's position in the list or object). A record that cannot be read becomes a
:class:`RowError` and the rest of the file is still read.
"""

from __future__ import annotations

import ast
import codecs
import csv
import gzip
import importlib
import io
import json
import re
import sys
import tokenize
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, islice
from pathlib import Path
from typing import Any, BinaryIO

from ragscore_workers.counts import close_names, did_you_mean, noun_names
from ragscore_workers.errors import DatasetError

from ..caller import CLI, Caller

__all__ = [
    "ALL_FORMATS", "FORMATS", "READER_VERSION", "SEED_FORMATS", "RowError", "check_dataset_exists", "detect_format",
    "iter_records", "loads_json",
]  # fmt: skip

#: How these loaders read a dataset's bytes into rows, part of its fingerprint (``rows.dataset_fingerprint``): bump
#: it with any change that could read the same bytes as other rows (a CSV quote, a column, a value read or validated
#: otherwise: here, in a format's reader module, in ``rows.validate_record`` or the ``Row`` schema), so that a resume
#: of a run submitted before checks its rows instead of trusting the bytes. 1: before there was one (those
#: fingerprints digested the package version instead, ``rows.BEFORE_READER_VERSIONS``). 4: a CSV row's quote gone
#: wrong on a later line of the row keeps the lines before it in its bad row (they were read again as rows) where
#: that loses none of the rows they read as.
READER_VERSION = 4

#: Row fields whose CSV cells hold JSON (lists or objects).
JSON_FIELDS = frozenset(
    {
        "contexts", "retrieved_contexts", "citations", "retrieved_doc_ids", "gold_doc_id", "evidence_sentences",
        "gold_evidence_sentences", "sentences", "rubric", "checks", "metadata", "expected",
    }
)  # fmt: skip
#: How to make UTF-8 of a text file that is not (not Excel's CSV hint: NOT_UTF8_HINT).
CONVERT_HINT = "the file is not UTF-8: convert it, e.g. iconv -f cp1252 -t utf-8"
#: What a file that is not UTF-8 probably is, and what to do.
NOT_UTF8_HINT = ("the file is not UTF-8: Excel's plain 'CSV' on Windows writes cp1252; save as 'CSV UTF-8', or "
                 "convert it: iconv -f cp1252 -t utf-8")  # fmt: skip
#: Characters of a bad row kept in ``failed_rows.jsonl``.
RAW_EXCERPT_CHARS = 1000
#: A JSONL line longer than this is reported and skipped without being held in memory.
MAX_LINE_BYTES = 64 * 1024 * 1024

#: A CSV cell longer than MAX_LINE_BYTES characters (the csv module's field limit, set to it): its row's error.
CELL_TOO_LONG = (
    f"a cell longer than {MAX_LINE_BYTES:,} characters ({MAX_LINE_BYTES >> 20} MiB), the most a cell may hold"
)

Record = dict[str, Any]


class WrittenRecord(dict[str, Any]):
    """A record with its row's lines as read from the file (a CSV row's), whose text ``failed_rows.jsonl`` shows
    where the row is refused after it was read (``rows.validate_record``), so the user finds the row to fix. Only
    the record's keys are its fields: JSON, a Row and a digest see a plain dict."""

    __slots__ = ("_lines",)

    def __init__(self, fields: Record, lines: str) -> None:
        super().__init__(fields)
        self._lines = lines

    @property
    def written(self) -> str:
        """The row's text as in the file (bytes that are not UTF-8 as ``?``; :func:`_text_of`), made only for a
        refused row."""
        return _text_of(self._lines)


class KeyedRecord(dict[str, Any]):
    """A row of a JSON object keyed by id, its key as its id: refused after it was read (``rows.validate_record``),
    it is said by its key (``rows.Named``), as rows of no other file are. A plain dict to JSON, a Row and a digest."""

    __slots__ = ()


@dataclass(frozen=True)
class RowError:
    """A row that could not be read: its line, a one-line reason and an excerpt of its raw text (given whole, kept
    as :func:`excerpt` cuts it, whatever the format: a long row's is not held in memory). ``key``: a JSON object
    keyed by id's row's key, by which it is said (``rows.Named``; None for any other row), cut as ``raw`` is: a
    message names it, and failed_rows.jsonl's ``row`` places it exactly (a row that reads keeps its whole key as id).
    """

    line: int
    error: str
    raw: str
    key: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "raw", excerpt(self.raw))
        if self.key is not None:
            object.__setattr__(self, "key", excerpt(self.key, "key"))

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "error": self.error, "raw": self.raw}


def excerpt(text: str, what: str = "row") -> str:
    """``text`` (a bad row's, or its ``what``: its key, for ``failed_rows.jsonl``) as at most RAW_EXCERPT_CHARS
    characters: a longer one cut to end with a note of how long it is, not cut without a word."""
    if len(text) <= RAW_EXCERPT_CHARS:
        return text
    note = f" [cut: the {what} has {len(text):,} characters]"
    return text[: RAW_EXCERPT_CHARS - len(note)] + note


def loads_json(data: str | bytes, **options: Any) -> Any:
    """``json.loads`` (with ``options``); a value nested deeper than the parser's stack allows (``[[[[...``) is a
    JSONDecodeError like any other bad JSON, not a RecursionError that would stop the whole run."""
    try:
        return json.loads(data, **options)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", data if isinstance(data, str) else "", 0) from None


def kind(value: Any) -> str:
    """The kind of a JSON value, as errors say what was given: ``null``, ``int``, ``list``, ``dict``."""
    return "null" if value is None else type(value).__name__


def _lines(fh: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, bytes)``; a line longer than MAX_LINE_BYTES is skipped in chunks and given as None."""
    line_no = 0
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        line_no += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := fh.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield line_no, None
        else:
            yield line_no, raw


def _gzipped(path: Path) -> bool:
    """Whether ``path`` is a gzip-compressed file (by its first bytes, whatever its name)."""
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def _open_bytes(path: Path) -> BinaryIO:
    """The file's bytes, decompressed as they are read when it is gzip-compressed."""
    return gzip.open(path, "rb") if _gzipped(path) else path.open("rb")  # type: ignore[return-value]


def _iter_jsonl(path: Path, caller: Caller = CLI) -> Iterator[tuple[int, Record | RowError]]:
    """JSONL rows; ``caller``: whose options the hints of a file in another format name."""
    seen = False  # a non-blank line was read
    with _open_bytes(path) as fh:
        for line_no, raw in _lines(fh):
            if raw is None:
                yield line_no, RowError(line_no, f"line longer than {MAX_LINE_BYTES:,} bytes", "")
                continue
            if line_no == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)  # Windows editors and Excel's "UTF-8" exports
            if not raw.strip():
                continue
            first, seen = not seen, True
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                excerpt = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                yield line_no, RowError(line_no, f"invalid UTF-8 at byte {exc.start} ({CONVERT_HINT})", excerpt)
                continue
            try:
                value = loads_json(text)
            except json.JSONDecodeError as exc:
                hint = _jsonl_hint(text, exc, first, not raw.endswith(b"\n"), path, caller)
                yield line_no, RowError(line_no, f"invalid JSON: {exc.msg} (column {exc.colno}){hint}", text)
                continue
            if not isinstance(value, dict):
                yield line_no, RowError(line_no, f"expected a JSON object, got {kind(value)}", text)
                continue
            yield line_no, value


def _jsonl_hint(text: str, exc: json.JSONDecodeError, first: bool, last: bool, path: Path, caller: Caller) -> str:
    """What a JSONL line that is not JSON probably is (``; ...``), or "": a pretty-printed document or a CSV header
    (on the first line), an object followed by a comma (rows copied out of a JSON list), or, on a last line without
    its newline where the parser ran out of text, a file cut short."""
    stripped = text.strip()
    if first and stripped in ("[", "{"):  # a JSON document spread over lines: every line errs
        rows = "'.[]'" if stripped == "[" else "."
        return (f"; a pretty-printed JSON document is not JSONL: read it with {caller.given('format', 'json')} (or "
                f"name it .json), or write one object per line: jq -c {rows} {path.name}")  # fmt: skip
    if first and (names := _header_names(text)):  # CSV read as JSONL: every line errs
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        where = "" if _suffix(path) in (".csv", ".tsv") else " (or name it .csv)"
        csv_format = caller.given("format", "csv")
        return f"; its first line reads as a CSV header row ({shown}): read it with {csv_format}{where}"
    if stripped.endswith(",") and exc.msg == "Extra data" and _json_object(stripped[:-1]):
        return "; a comma after the object: JSONL rows are one object per line, with nothing between them"
    if said := _control_character(exc) or json_slip(exc):
        return f"; {said}"
    if last and _ran_out(exc):
        return f"; the file ends inside this row, without its newline: {CUT_SHORT}"
    return ""


#: A key as Python or JavaScript write it, which JSON refuses: in single quotes, or bare (``answer: 1``).
_SINGLE_QUOTED_KEY = re.compile(r"'[^'\n]*'\s*:")
_BARE_KEY = re.compile(r"[^\W\d][\w-]*\s*:")


def json_slip(exc: json.JSONDecodeError) -> str:
    """The hint for the usual slips JSON refuses, where ``exc`` is at one: a comma before ``]`` or ``}``, or a key
    not in double quotes (``'answer': 1``, ``answer: 1``, as Python and JavaScript write them); else nothing."""
    at = exc.doc[exc.pos :]
    if at[:1] in ("]", "}") and exc.doc[: exc.pos].rstrip().endswith(","):
        return "a comma before a closing bracket: JSON takes no comma before ] or }"
    if exc.msg.startswith("Expecting property name") and (key := _SINGLE_QUOTED_KEY.match(at)):
        return f"the key {key.group().rstrip(': ')} is in single quotes: JSON quotes a key in double quotes"
    if exc.msg.startswith("Expecting property name") and (key := _BARE_KEY.match(at)):
        name = key.group().rstrip(": ")
        return f"the key {name} is not quoted: JSON writes a key in double quotes ({json.dumps(name)}: ...)"
    return ""


#: Asked of a file whose JSON the parser ran out of text for.
CUT_SHORT = "was it cut short (a copy or download stopped)?"


def _ran_out(exc: json.JSONDecodeError) -> bool:
    """Whether the parser ran out of text, as in a file cut short: an unfinished value or string at the end."""
    return exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated string")


#: How JSON writes the control characters it has a short escape for (any other is ``\\u00XX``).
SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
#: The control characters a string holds by mistake, by name: a pasted tab, a line break typed in a spreadsheet cell.
CONTROL_NAMES = {"\t": "tab", "\n": "line break"}


def _control_character(exc: json.JSONDecodeError) -> str:
    """``a string holds a raw tab (U+0009), which JSON must escape as \\t``: what json's "Invalid control character
    at" found (a tab pasted into a string) and how JSON writes it; "" for another error (a JSONL line's, a .json
    file's, a CSV list cell's)."""
    char = exc.doc[exc.pos : exc.pos + 1] if exc.msg.startswith("Invalid control character") else ""
    if not char:
        return ""
    escape = SHORT_ESCAPES.get(char, f"\\u{ord(char):04x}")
    name = CONTROL_NAMES.get(char, "control character")
    return f"a string holds a raw {name} (U+{ord(char):04X}), which JSON must escape as {escape}"


#: A column name as a CSV header row gives it, told from a line of JSON or text.
_COLUMN_NAME = re.compile(r"[A-Za-z_][\w .-]{0,63}")


def _header_names(line: str) -> list[str]:
    """The column names of ``line`` when it reads as a CSV header row (two or more names, each a word or a few, with
    no quote or bracket: ``id,question,answer``), else ``[]``."""
    cells = [cell.strip() for cell in line.split(_delimiter(line))]
    names = [cell for cell in cells if cell]
    return names if len(names) > 1 and all(_COLUMN_NAME.fullmatch(name) for name in names) else []


def _suffix(path: Path) -> str:
    """``path``'s extension in lower case; under a ``.gz`` one, the one before it (``rows.jsonl.gz``: ``.jsonl``)."""
    suffix = path.suffix.lower()
    return Path(path.stem).suffix.lower() if suffix == ".gz" else suffix


def _json_object(line: str) -> bool:
    """Whether ``line`` is a JSON object (JSONL's first line read as a CSV header row, a JSONL row before a comma)."""
    if not line.lstrip().startswith("{"):
        return False
    try:
        return isinstance(loads_json(line), dict)
    except json.JSONDecodeError:
        return False


def _csv_cell(name: str, value: str) -> Any:
    """A cell: JSON in a list or object column (or, as pandas' ``to_csv`` writes lists, a Python literal:
    ``['a', 'b']``, read by ``ast.literal_eval``, which evaluates no code), else the text."""
    stripped = value.strip()
    if name in JSON_FIELDS and stripped[:1] in ("[", "{", '"'):
        try:
            return loads_json(stripped)
        except json.JSONDecodeError as exc:
            if stripped[:1] in ("[", "{"):
                try:
                    parsed = ast.literal_eval(stripped)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    raise exc from None
                if _adjacent_strings(stripped):
                    raise ValueError(
                        "it reads as numpy's print of an array (['a' 'b'], no commas), whose strings Python would "
                        'join into one: write the list as JSON (["a", "b"]; .tolist() before to_csv)'
                    ) from None
                return parsed
            raise
    return value


def _adjacent_strings(text: str) -> bool:
    """Whether two string literals follow each other in ``text`` (Python joins them: ``'d1' 'd2'`` is ``'d1d2'``)."""
    previous = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                continue
            if token.type == previous == tokenize.STRING:
                return True
            previous = token.type
    except (tokenize.TokenError, SyntaxError):
        return False
    return False


#: What ``surrogateescape`` reads a byte that is not UTF-8 as (U+DC80-U+DCFF): no UTF-8 text decodes to one.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def _not_utf8(text: str) -> bool:
    """Whether ``text``, read with ``surrogateescape``, holds bytes that are not UTF-8 (an ASCII row, most of them,
    is told without a search)."""
    return not text.isascii() and _ESCAPED_BYTE.search(text) is not None


#: Quotes a spreadsheet's AutoCorrect types for ", which JSON does not read, and what a cell holding them is told.
CURLY_QUOTES = "“”‘’"
CURLY_HINT = "; its quotes are typographic (“ ” ‘ ’, as AutoCorrect types them): JSON's are straight (\")"


#: A CSV separator by name, as an error tells where a quote should go.
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab"}


def _spaced_quote(cells: list[str], delimiter: str, lines: list[str]) -> tuple[int, str] | None:
    """The index of the first cell of a row (``lines``, as in the file) holding a quote typed after a space to open it
    (``a, "x, y"``), and the row's text after that quote; else None. The csv module (and pandas, and Excel) reads such
    a quote as text, so its cell ends at the next separator or line end: an unquoted cell (in ``lines`` as read) that
    opens with spaces and a quote and holds an odd number of quotes was cut there, the quote's partner in a later cell
    or line. A cell quoted whole after a space (``a, "x"``) stays as typed, quotes and all, and so does a quoted cell
    holding such text (``" ""x"``, as a CSV writer writes the value `` "x``)."""
    text = "".join(lines)
    starts: list[int] | None = None  # where the row's cells start in its text, found for the first suspect cell only
    for i, cell in enumerate(cells):
        if cell[:1] == " " and cell.lstrip(" ")[:1] == '"' and cell.count('"') % 2:
            starts = _cell_starts(text, delimiter) if starts is None else starts
            if i < len(starts) and not text.startswith('"', starts[i]):
                return i, text[starts[i] :].lstrip(" ")[1:]
    return None


def _spaced_quote_error(column: str, cell: str, delimiter: str, field: str = "") -> str:
    """What a cell (of ``column``: its name, or its number) holding a quote typed after a space is told; ``field``:
    the row field a header cell quoted whole after a space names (``id, "question"``)."""
    separator = DELIMITER_NAMES.get(delimiter, repr(delimiter))
    typed = cell.strip() if len(cell.strip()) <= 40 else f"{cell.strip()[:40]}..."
    so = (f"the column is named {typed!r}, quotes and all, and no row has its {field}" if field
          else f"the cell ends at the next {separator} or line end")  # fmt: skip
    return (f"column {column}: a quote typed after a space ({typed!r}) is text in CSV, not the start of a quoted "
            f"cell, so {so}: remove the spaces between the {separator} and the quote")  # fmt: skip


def _field_quoted_after_a_space(header: list[str], delimiter: str, lines: list[str]) -> tuple[int, str] | None:
    """The index of the first header cell quoted whole after a space (``id, "question"``) whose name in the quotes
    is a row field's (as the near-miss warning reads it: ``"Question"`` too), and that field; else None. CSV reads
    such a cell as text, quotes and all, so its column is no field; one quoted right after the separator is not."""
    from .rows import _field_like  # rows reads through this module

    text = "".join(lines)
    starts: list[int] | None = None  # where the row's cells start in its text, found for the first suspect cell only
    for i, name in enumerate(header):
        inner = name.strip(" ")
        if name[:1] == " " and len(inner) > 1 and inner[0] == inner[-1] == '"' and (field := _field_like(inner[1:-1])):
            starts = _cell_starts(text, delimiter) if starts is None else starts
            if i < len(starts) and not text.startswith('"', starts[i]):
                return i, field
    return None


def _quote_runs_on(text: str, delimiter: str) -> bool | None:
    """Reading ``text`` as the rest of a quoted cell (after its opening quote): None while the cell is still open at
    its end, True when a quote closes it where a cell ends (before spaces and the delimiter or a line end) and the
    rest of ``text`` is well-formed, False for a quote that closes it mid-cell."""
    at = text.find('"')
    while at != -1 and text.startswith('"', at + 1):  # "" is a quote in the cell
        at = text.find('"', at + 2)
    if at == -1:
        return None
    rest = text[at + 1 :].lstrip(" ")
    return rest[:1] in ("", delimiter, "\r", "\n") and _wrong_quote(rest, delimiter) is None


def _cell_starts(text: str, delimiter: str) -> list[int]:
    """Where each cell of the row ``text`` starts, as the csv module (default dialect) reads it: a cell is quoted when
    its first character is a quote; it then runs to its closing quote (``""`` is a quote in it, and a separator or
    line end is text), and any text after that to the next separator. Only the quotes and separators are visited
    (``str.find``): a long multi-line cell costs no Python step a character."""
    starts: list[int] = []
    at = 0
    while True:
        starts.append(at)
        if text.startswith('"', at):
            at = text.find('"', at + 1)
            while at != -1 and text.startswith('"', at + 1):  # "" is a quote in the cell
                at = text.find('"', at + 2)
            if at == -1:  # never closed: no cell after it
                return starts
            at += 1
        at = text.find(delimiter, at)
        if at == -1:
            return starts
        at += 1


#: A row of one line whose quoted cell a quote closes before the cell ends, swallowing the separators after its
#: opening quote (``q2,"What is X?,Madrid,Madrid,"["c"]"``): its later columns would read as empty, not as a bad row.
QUOTE_CLOSED_MID_CELL = (
    "a quote closes a quoted cell holding separators before the cell ends, so the row reads {cells} cells of the "
    "header's {header}: "
    'is a quote left open, or one inside a quoted cell not written twice ("")?'
)


def _csv_record(header: list[str], cells: list[str], line: int, feed: _LineFeed) -> Record | RowError:
    """The row of ``cells`` (the feed's row: its lines in the file), or its RowError. A quote typed after a space to
    open a cell of several lines takes the lines to its partner with it (read from ``feed``), so they are no rows."""
    if (spaced := _spaced_quote(cells, feed.delimiter, feed.row)) is not None:
        i, rest = spaced
        column = repr(header[i]) if i < len(header) and header[i] else f"{i + 1}"
        error = _spaced_quote_error(column, cells[i], feed.delimiter)
        if _quote_runs_on(rest, feed.delimiter) is None and feed.read_on():
            error += f" (its cell was meant to run on: the row runs from line {line} to {feed.line})"
        return RowError(line, error, _text_of("".join(feed.row)))
    lines = "".join(feed.row)  # the row as in the file: its raw in failed_rows.jsonl
    if len(cells) > len(header):
        return RowError(line, f"more cells than header columns ({len(cells)} of {len(header)})", _text_of(lines))
    if len(cells) < len(header) and _wrong_quote(lines, feed.delimiter, swallowed=True) is not None:
        return RowError(line, QUOTE_CLOSED_MID_CELL.format(cells=len(cells), header=len(header)), _text_of(lines))
    if _not_utf8(lines):  # its cells' text is the lines' but for quotes and separators
        return RowError(line, f"invalid UTF-8 ({NOT_UTF8_HINT})", _text_of(lines))
    record: Record = {}
    for name, value in zip(header, cells, strict=False):
        if not name or value == "":
            continue
        try:
            record[name] = _csv_cell(name, value)
        except json.JSONDecodeError as exc:
            curly = CURLY_HINT if any(quote in value for quote in CURLY_QUOTES) else ""
            reason = _control_character(exc) or exc.msg
            error = f'invalid JSON in column {name!r}: {reason} (a list is written ["a", "b"]{curly})'
            return RowError(line, error, _text_of(lines))
        except ValueError as exc:
            return RowError(line, f"column {name!r}: {exc}", _text_of(lines))
    return WrittenRecord(record, lines)


#: Column separators read besides ``,``: Excel writes ``;`` where the decimal mark is a comma; ``\t`` (TSV).
OTHER_DELIMITERS = (";", "\t")


def _delimiter(header_line: str) -> str:
    """``,`` unless the header line has none and has one of OTHER_DELIMITERS (``id;question;answer``)."""
    if "," in header_line:
        return ","
    counts = {d: header_line.count(d) for d in OTHER_DELIMITERS}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] else ","


class _LineFeed:
    """A CSV file's lines for ``csv.reader``, keeping the lines of the row being read: a row that went wrong
    (a quote never closed swallows the lines after it) is reported with its lines up to the quote's, and the lines
    after it are given again to be read as rows."""

    def __init__(self, lines: Iterator[str], delimiter: str, line: int = 0) -> None:
        self._lines = lines
        self.delimiter = delimiter
        self._again: list[str] = []  # lines to give again, last first
        #: The lines of the row being read.
        self.row: list[str] = []
        #: The physical line number of the last line given (``line``: the one before the first).
        self.line = line
        #: Whether the lines ended inside a row (read on, it might have read otherwise).
        self.cut = False

    def __iter__(self) -> _LineFeed:
        return self

    def __next__(self) -> str:
        try:
            line = self._again.pop() if self._again else next(self._lines)
        except StopIteration:
            self.cut = self.cut or bool(self.row)
            raise
        self.line += 1
        self.row.append(line)
        return line

    def start_row(self) -> int:
        """Begin a row; its first line's number."""
        self.row = []
        return self.line + 1

    def give_again(self, keep: int = 1) -> None:
        """Give the current row's lines but its first ``keep`` again (before any given again and not yet read)."""
        self._again.extend(reversed(self.row[keep:]))
        self.line -= len(self.row) - keep
        self.row = self.row[:keep]

    def read_on(self) -> bool:
        """Read on the row the lines of a quoted cell that a quote typed after a space meant to open, left open at the
        row's end: True when a later line's quote closes it where a cell ends (the lines up to it are the row's);
        False, the lines given again, at a quote mid-cell, a quote that opens a cell (``e,",y"``, ``e,"`` then
        ``more"``: a row as the csv module reads it, never taken), the end of the file, or lines held past
        MAX_LINE_BYTES (as they weigh in memory: a million short lines weigh more than their characters)."""
        keep, size = len(self.row), 0
        for line in self:
            size += sys.getsizeof(line)
            at = line.find('"')
            if at == 0 or (at > 0 and line[at - 1] == self.delimiter):
                break
            if closed := _quote_runs_on(line, self.delimiter):
                return True
            if closed is False or size > MAX_LINE_BYTES:
                break
        self.give_again(keep)
        return False

    def unbalanced(self) -> tuple[int, bool] | None:
        """How many of the row's lines run to the quote gone wrong that it spans several lines by, that quote's line
        last (the rest were swallowed: :meth:`give_again` them), and whether a stray quote closed its cell; None where
        no quote went wrong. A quote goes wrong when its quoted cell is still open at the end of the file, or "closed"
        by a quote that a delimiter or the line's end does not follow (a stray quote further down, which the csv
        module reads leniently). A quote inside an unquoted cell (``5" screen``) is text, and a well-formed quoted cell
        may hold newlines and ``""``. A row of one line (the file's last) goes wrong only by a quoted cell left open:
        the csv module ends it at the end of the file."""
        text = "".join(self.row)
        if (wrong := _wrong_quote(text, self.delimiter, strays=len(self.row) > 1)) is None:
            return None
        opened, closed = wrong
        return next(n for n, end in enumerate(accumulate(map(len, self.row)), start=1) if opened < end), closed


def _wrong_quote(text: str, delimiter: str, strays: bool = True, swallowed: bool = False) -> tuple[int, bool] | None:
    """The csv module's reading of quotes (default dialect), over the text of one row: where the quoted cell that went
    wrong opens (its quote's index in ``text``) and whether a stray quote closed it, or None. A cell goes wrong when
    it is never closed, or (with ``strays``) is closed by a quote followed by anything but the delimiter, another quote
    or a line end, or spaces before one of them (``"x" , y``: the csv module keeps them in the cell, ``x ``, as it
    does on a row of one line); with ``swallowed`` too, only such a cell that holds the delimiter (a quote left open
    took the separators after it: ``q2,"What is X?,Madrid,"["c"]"``; ``"The Hobbit" by Tolkien`` reads as the csv
    module reads it).
    Only the quotes are visited (``str.find``): a row of long multi-line cells costs no Python step a character."""
    ends = (delimiter, "\r", "\n")
    quoted = False
    opened = 0  # where the quoted cell being read opens
    at = text.find('"')
    while at != -1:
        if quoted:
            if text[at + 1 : at + 2] == '"':  # "" is a quote in the cell
                at = text.find('"', at + 2)
                continue
            end = at + 1
            while text[end : end + 1] == " ":  # spaces typed before the separator
                end += 1
            after = text[end : end + 1]
            if strays and after and after not in ends and (not swallowed or text.find(delimiter, opened, at) != -1):
                return opened, True
            quoted = False
        elif at == 0 or text[at - 1] in ends:  # a quote opens a cell only at its start; elsewhere it is text
            quoted, opened = True, at
        at = text.find('"', at + 1)
    return (opened, False) if quoted else None


def _unterminated(start: int, opened: int, end: int, closed: bool) -> str:
    """The error of a row (from line ``start``) whose quoted cell opened on line ``opened`` is not closed where a cell
    ends: the csv module reads it on to line ``end``, where a stray quote ``closed`` it mid-cell or the file ends."""
    row = f" (in the row from line {start})" if opened > start else ""
    if end == opened:
        runs = "is closed mid-cell" if closed else "is still open at the end of the file"
    else:
        runs = f"runs on to line {end}"
    return f"unterminated quote: the quoted cell opened on line {opened}{row} {runs}"


def _header_quote(start: int, opened: int, end: int, closed: bool) -> str:
    """The error of a header row (from line ``start``) whose quote opened on line ``opened`` is never closed, or (by
    ``closed``) is closed mid-cell by a stray quote, the csv module reading the row on to line ``end`` (the stray
    quote's line, or a later one where a quoted cell opens after it; on a header of one line, the names from the
    quote to the stray quote read as one)."""
    if not closed:
        return f"a quote in the header row (line {opened}) is never closed"
    joins = f"the header row runs from line {start} to line {end}" if end > start else "the names it spans read as one"
    return (f"a quote in the header row (line {opened}) is closed mid-cell by a stray quote, so {joins}: is a quote "
            'left open, or one inside a quoted name not written twice ("")?')  # fmt: skip


def _text_of(line: str) -> str:
    """Lines of the CSV file as text for an error or a bad row's raw (bytes that are not UTF-8 as U+FFFD's stand-in
    ``?``; a bad row's is cut by :class:`RowError`)."""
    return line.rstrip("\r\n").encode("utf-8", "replace").decode()


def _as_written(written: list[str], twice: list[str]) -> str:
    """`` (' answer ', 'answer', read without the spaces around them)``: the header's names given twice as written,
    where its spaces, not its text, make them one; else ""."""
    shown = [name for name in written if name.strip() in twice]
    if len(set(shown)) == len(set(twice)):  # written alike: the message's names are the header's
        return ""
    return f" ({', '.join(map(repr, shown))}, read without the spaces around them)"


def column_names(path: Path, written: list[str], where: str = "") -> list[str]:
    """A table's column names as read: without the spaces around them (a CSV header typed ``id, question, answer``, a
    Parquet column ``" answer"``); "" is a column without a name, which is not read. DatasetError for a name given
    twice (``where``: `` in the header row``), as written where only their spaces told them apart."""
    names = [name.strip() for name in written]
    named = [name for name in names if name]
    if twice := sorted({name for name in named if named.count(name) > 1}):
        raise DatasetError(f"{path}: {noun_names(twice, 'column')} given twice{where}{_as_written(written, twice)}; "
                           "which one holds the field would be a guess: rename or remove one")  # fmt: skip
    return names


def _first_text_line(fh: io.TextIOWrapper) -> str:
    """The first line of ``fh`` with text: blank lines above a CSV header (an export's leading newline) skipped."""
    first = fh.readline()
    while first and not first.strip():
        first = fh.readline()
    return first


def _iter_csv(path: Path, caller: Caller = CLI) -> Iterator[tuple[int, Record | RowError]]:
    """CSV rows (a ``.tsv`` file's separated by tabs if its header line has one, another's as its header line
    says). A cell may be as long as a JSONL line (the csv module's own limit is 128 KiB). A quote that is never closed
    swallows the lines after it in the csv module, so a row that spans several lines with an unbalanced quote, or one
    the csv module gives up on, is reported and reading restarts on its next line.
    ``caller``: whose options the error of a JSONL file names."""
    csv.field_size_limit(MAX_LINE_BYTES)
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") is not part of the first column's name.
    with io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        first = _first_text_line(fh)
        if _json_object(first):  # every "row" would be JSON fragments under JSON fragments' names
            named = "" if _suffix(path) in (".jsonl", ".ndjson") else " (or name it .jsonl)"
            raise DatasetError(f"{path}: its first line is a JSON object: JSONL, not CSV? read it with "
                               f"{caller.given('format', 'jsonl')}{named}")  # fmt: skip
        header = _csv_header(fh, first, path)
        if header is not None:
            yield from _csv_rows(header[0], header[2])


def csv_header(path: Path) -> tuple[int, list[str]] | None:
    """The line of a CSV file's header row (from 1) and its column names as read (None: the file has no rows); a header
    that cannot be read raises DatasetError, as reading the file would."""
    with io.TextIOWrapper(_open_bytes(path), encoding="utf-8-sig", errors="surrogateescape", newline="") as fh:
        header = _csv_header(fh, _first_text_line(fh), path)
    return None if header is None else (header[1], header[2])


def _csv_header(fh: io.TextIOWrapper, first: str, path: Path) -> tuple[_LineFeed, int, list[str]] | None:
    """The header row of the CSV file open as ``fh`` (``first``: its first line with text): the feed its rows are read
    from next, the header's line (from 1) and its column names as read; None where there is none. Raises DatasetError
    for a header that cannot be read."""
    delimiter = "\t" if _suffix(path) == ".tsv" and "\t" in first else _delimiter(first)
    fh.seek(0)  # the decoder resets too: a byte-order mark is skipped again
    feed = _LineFeed(fh, delimiter)
    reader = csv.reader(feed, delimiter=delimiter)
    try:
        header: list[str] | None = []
        while header is not None and not any(name.strip() for name in header):  # no header, but a blank line
            start = feed.start_row()
            header = next(reader, None)
    except csv.Error as exc:
        raise DatasetError(f"{path}: the header row cannot be read (CSV: {exc})") from exc
    if header is None:
        return None
    if (wrong := feed.unbalanced()) is None and _wrong_quote("".join(feed.row), delimiter, swallowed=True):
        wrong = 1, True  # a header of one line (the csv module reads it so): a stray quote joined names into one
    if wrong is not None:
        raise DatasetError(f"{path}: {_header_quote(start, start + wrong[0] - 1, feed.line, wrong[1])}")
    if (spaced := _spaced_quote(header, delimiter, feed.row)) is not None:
        error = _spaced_quote_error(str(spaced[0] + 1), header[spaced[0]], delimiter)
        raise DatasetError(f"{path}: the header row (line {start}), {error}")
    if (quoted := _field_quoted_after_a_space(header, delimiter, feed.row)) is not None:
        error = _spaced_quote_error(str(quoted[0] + 1), header[quoted[0]], delimiter, quoted[1])
        raise DatasetError(f"{path}: the header row (line {start}), {error}")
    if (shown := next((name for name in header if _not_utf8(name)), None)) is not None:
        raise DatasetError(f"{path}: the header row's column {_text_of(shown)!r} is not UTF-8 ({NOT_UTF8_HINT})")
    return feed, start, column_names(path, header, " in the header row")


def _csv_rows(feed: _LineFeed, header: list[str], as_before: bool = False) -> Iterator[tuple[int, Record | RowError]]:
    """The rows of ``feed`` after its header row (:func:`_iter_csv`), each with its first line's number; ``as_before``:
    as loaders before version 4 read them, a row whose quote went wrong its first line alone (:func:`_loses_no_row`)."""
    reader = csv.reader(feed, delimiter=feed.delimiter)
    while True:
        start = feed.start_row()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            error, keep = CELL_TOO_LONG if "field larger than field limit" in str(exc) else f"CSV: {exc}", 1
        else:
            if (wrong := feed.unbalanced()) is None:
                if any(cell.strip() for cell in cells):  # all-empty rows (Excel's trailing ",,,,") are no rows
                    yield start, _csv_record(header, cells, start, feed)
                continue
            keep, closed = wrong
            if keep > 1 and (as_before or not _loses_no_row(feed.row[1:], keep, closed, header, feed.delimiter)):
                keep, closed = 1, False  # its lines read again from its second, as before: no row read then is lost
            error = _unterminated(start, start + keep - 1, feed.line, closed)
        yield start, RowError(start, error, _text_of("".join(feed.row[:keep])))
        feed.give_again(keep)
        reader = csv.reader(feed, delimiter=feed.delimiter)


def _loses_no_row(lines: list[str], keep: int, closed: bool, header: list[str], delimiter: str) -> bool:
    """Whether a row whose quote went wrong on its line ``keep`` (``lines``: its lines after its first; ``closed``:
    by a stray quote, else at the end of the file) may be its lines up to that quote's: read on from its line
    ``keep + 1``, they hold every row that reading on from its second (loaders before version 4) read, up to the
    first line both readings start a row on, from which they read alike (both read as before: from any line, rows
    read so are rows read now). Not where a row in its lines before the
    quote's reads as one of its own (``a,"x`` then ``b,q,ok`` then ``c",q,"y``: the first quote is the likelier one
    gone wrong), nor where a reading runs past a stray quote's line (the lines after it are not held here).
    The readings are read in turn, the one behind first, keeping only the lines they start rows on: before the first
    line both start a row on, no row of one is the other's, so a row read from the second line that is no bad row
    decides (False) once the other reading has passed its line, and nothing is read after it."""
    feeds = [_LineFeed(iter(lines[first - 1 :]), delimiter, first - 1) for first in (1, keep)]
    readings = [_csv_rows(feed, header, as_before=True) for feed in feeds]
    starts: list[set[int]] = [set(), set()]  # the lines each reading starts a row on
    last, ended = [0, 0], [False, False]
    row_read = None  # the first line the reading from the second line starts a row on that is no bad row
    while not all(ended):
        side = 1 if ended[0] or (not ended[1] and last[1] < last[0]) else 0
        if (item := next(readings[side], None)) is None:
            ended[side] = True
        elif item[0] in starts[1 - side]:  # the first line both start a row on: from it, they read alike
            return row_read is None or row_read >= item[0]
        else:
            last[side] = item[0]
            starts[side].add(item[0])
            if side == 0 and row_read is None and not isinstance(item[1], RowError):
                row_read = item[0]
        if row_read is not None and (ended[1] or last[1] > row_read):  # the other reading has no row there
            return False
    return row_read is None and not (closed and any(feed.cut for feed in feeds))


#: What a JSON value holds rows in, by its first character (:func:`json_shape`).
JSON_SHAPES = {b"[": "list", b"{": "object"}


def json_shape(path: Path) -> str | None:
    """``list`` or ``object`` where ``path`` is a file (gzip-compressed too) whose JSON starts as one (``[``, ``{``;
    JSONL too): read as JSON, its rows are said by their place in the list or their key, not by their line. Only its
    first bytes are read."""
    try:
        with _open_bytes(path) as fh:
            return JSON_SHAPES.get(fh.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()[:1])
    except (OSError, EOFError):  # no file, or a gzip stream broken: its reader says so
        return None


def _iter_json(path: Path, caller: Caller = CLI) -> Iterator[tuple[int, Record | RowError]]:
    """A JSON list of rows or object keyed by id; ``caller``: whose options the error of a JSONL file names."""
    repeated: list[str] = []  # the keys the last object read (the outermost, read last) repeats

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        repeated[:] = [] if len(out) == len(pairs) else [k for k, n in Counter(k for k, _ in pairs).items() if n > 1]
        return out

    try:
        with _open_bytes(path) as fh:
            data = loads_json(fh.read(), object_pairs_hook=pairs_hook)
    except json.JSONDecodeError as exc:
        hint = f"; {said}" if (said := _control_character(exc)) else ""
        if exc.doc.lstrip()[:1] in ("[", "{") and _ran_out(exc):  # not an empty file, nor a nesting too deep
            hint = f"; the file ends before its JSON does: {CUT_SHORT}"
        if exc.msg == "Extra data" and exc.lineno > 1 and exc.colno == 1:  # a second value on a line of its own
            if "\n" in exc.doc[: exc.pos].strip():  # the first value spans lines: pretty-printed, not JSONL
                hint = (": JSON values one after another (pretty-printed objects?): give one list of rows, or one "
                        f"object per line as JSONL: jq -c . {path.name} > {path.stem}.jsonl")  # fmt: skip
            else:
                hint = (f": one JSON object per line is JSONL, read as such with {caller.given('format', 'jsonl')} "
                        f"(or name it {path.stem}.jsonl)")  # fmt: skip
        raise DatasetError(f"{path}: not valid JSON ({exc}){hint}") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc}; {NOT_UTF8_HINT})") from exc
    if isinstance(data, dict) and (orient := _pandas_orient(data)):
        raise DatasetError(f"{path}: {PANDAS_ORIENTS[orient]}, as pandas' DataFrame.to_json(orient='{orient}') "
                           f"writes them: {PANDAS_ROWS_HINT}")  # fmt: skip
    if isinstance(data, dict):
        if repeated:  # json keeps the last row of a repeated key: the others would be lost without a word
            shown = ", ".join(map(repr, repeated[:5]))
            raise DatasetError(f"{path}: duplicate ids {shown}: the object keyed by id repeats them, and JSON "
                               "keeps only the last row of each; give each row an id of its own (nothing was "
                               "submitted)")  # fmt: skip
        yield from _keyed_rows(data, path)
    elif isinstance(data, list):
        for pos, value in enumerate(data, start=1):
            yield pos, value if isinstance(value, dict) else RowError(
                pos, f"element {pos}: expected an object, got {kind(value)}", json.dumps(value))  # fmt: skip
    else:
        raise DatasetError(f"{path}: expected a JSON list of rows or an object keyed by id")


def _keyed_rows(data: dict[str, Any], path: Path) -> Iterator[tuple[int, Record | RowError]]:
    """The rows of a JSON object keyed by id, by their place (from 1), each read with its key as its id (an id of its
    own must agree); a bad one's error carries its key, by which it is said."""
    for pos, (key, value) in enumerate(data.items(), start=1):
        if isinstance(value, dict) and value.get("id") is not None and str(value["id"]) != key:
            said = excerpt(str(value["id"]), "id")  # as the key is: a 10 kB id would flood each message naming it
            yield pos, RowError(pos, f"its id {said!r} differs from its key", json.dumps(value), key)
        elif isinstance(value, dict):
            yield pos, KeyedRecord({**value, "id": key})
        else:
            error = f"expected an object, got {kind(value)}"
            if isinstance(value, list):  # {"data": [...]}: the rows are probably that list
                error += (f" (if the rows are the list under {key!r}, give ragscore that list: "
                          f"jq '.[{json.dumps(key)}]' {path.name} > rows.json)")  # fmt: skip
            yield pos, RowError(pos, error, json.dumps(value), key)


#: What a JSON object written by pandas' ``DataFrame.to_json(orient=...)`` holds, by orient, where it holds no rows
#: keyed by id.
PANDAS_ORIENTS = {
    "columns": "columns, not rows",
    "split": "columns, not rows",
    "index": "rows keyed by the frame's row index (0, 1, ...), not by their ids",
}
#: How to write a pandas frame's rows as a dataset.
PANDAS_ROWS_HINT = "write a row a line: df.to_json('rows.jsonl', orient='records', lines=True)"
#: A key pandas writes for a row of a frame's integer row index (``"0"``, ``"17"``: a filtered frame keeps its labels).
_ROW_INDEX_KEY = re.compile(r"-?\d+")


def _pandas_orient(data: dict[str, Any]) -> str | None:
    """The ``orient`` of pandas' ``DataFrame.to_json`` that wrote ``data`` when it holds no rows keyed by id:
    ``split`` (``{"columns", "index", "data"}``), ``columns``, the default (``{column: {index: value}}``: a row field
    among its keys, each an object of the same keys, none a row field), or ``index`` (``{index: {column: value}}``:
    integer keys, each an object of the same keys, with an ``id`` of their own, none its key: each row would err);
    else None. A row field is named as the near-miss warning reads it: an alias (``ground_truth``) or another case
    (``Question``) too. A frame without an ``id`` column written ``orient='index'`` is rows keyed by id: its index."""
    from .rows import _field_like  # rows reads through this module

    split = set(data) <= {"columns", "index", "data"}
    if split and isinstance(data.get("columns"), list) and isinstance(data.get("data"), list):
        return "split"
    inner = [set(value) for value in data.values() if isinstance(value, dict)]
    if not inner or len(inner) != len(data) or any(keys != inner[0] for keys in inner):
        return None
    if any(map(_field_like, data)) and not any(map(_field_like, inner[0])):
        return "columns"
    ids = {key: row.get("id") for key, row in data.items()}
    given = any(row_id is not None for row_id in ids.values())
    if given and all(_ROW_INDEX_KEY.fullmatch(key) and str(row_id) != key for key, row_id in ids.items()):
        return "index"
    return None


def _iter_parquet(path: Path, caller: Caller = CLI) -> Iterator[tuple[int, Record | RowError]]:
    """Parquet rows (``caller``: as the other formats' readers take it; no error of Parquet's names an option)."""
    from .parquet import iter_parquet

    return iter_parquet(path)


def _iter_hf_disk(path: Path, caller: Caller = CLI) -> Iterator[tuple[int, Record | RowError]]:
    """The rows of a folder Hugging Face datasets' ``save_to_disk`` wrote (``caller``: as the other formats' readers
    take it; no error of the folder's names an option)."""
    from .hf_disk import iter_hf_disk

    return iter_hf_disk(path)


FORMATS = {
    "jsonl": _iter_jsonl, "csv": _iter_csv, "json": _iter_json, "parquet": _iter_parquet, "hf-disk": _iter_hf_disk
}  # fmt: skip
#: The formats a gzip-compressed file may hold (a reader of its own opens each seed layout's files).
GZIP_FORMATS = ("jsonl", "csv", "json")
#: The seed frameworks' own layouts: ``--format`` name -> (module, reader function, reader options).
SEED_FORMATS: dict[str, tuple[str, str, frozenset[str]]] = {
    "nlp-project": ("nlp_project", "nlp_project_records", frozenset({"predictions", "corpus", "system"})),
    "eval-points": ("eval_points", "eval_points_records", frozenset()),
    "auto-analyst": ("auto_analyst", "auto_analyst_records", frozenset({"system"})),
    "socioscope": ("socioscope", "socioscope_records", frozenset()),
}
#: The seed formats whose readers' errors name their options (``--predictions``, ``--system``): they take a Caller.
_SPEAKING_SEED_FORMATS = ("nlp-project", "auto-analyst")
#: Every ``--format`` name: the generic formats and the seed frameworks' own layouts.
ALL_FORMATS = [*FORMATS, *SEED_FORMATS]
#: The format of a directory of evaluation points files and ``topic_model.txt`` answers.
DIRECTORY_FORMAT = "eval-points"
#: The format of a folder Hugging Face datasets' ``save_to_disk`` wrote.
HF_FORMAT = "hf-disk"
#: The formats that read a directory (eval-points reads a points file too).
DIRECTORY_FORMATS = (DIRECTORY_FORMAT, HF_FORMAT)
#: A ``.json`` file up to this size is parsed to tell a seed layout from a plain list of rows.
DETECT_MAX_BYTES = 64 * 1024 * 1024


def _sniff_json(path: Path) -> str:
    """The seed format a ``.json`` file is unambiguously in, else ``json`` (the plain loader reports
    a file that does not parse)."""
    from .auto_analyst import looks_like_auto_analyst
    from .eval_points import looks_like_eval_points
    from .socioscope import looks_like_socioscope

    try:
        if path.stat().st_size > DETECT_MAX_BYTES:
            return "json"
        data = loads_json(path.read_bytes())
    except (OSError, ValueError):
        return "json"
    for fmt, looks_like in (
        ("eval-points", looks_like_eval_points),
        ("socioscope", looks_like_socioscope),
        ("auto-analyst", looks_like_auto_analyst),
    ):
        if looks_like(data):
            return fmt
    return "json"


GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"
#: Leading bytes of files that are no dataset ragscore reads, and how to make one of them.
#: How to read a Hugging Face ``datasets`` Arrow file: its save_to_disk folder whole, or its rows exported.
HF_EXPORT_HINT = ("give the folder save_to_disk wrote (all of its shards), or export its rows: "
                  "ds.to_json('rows.jsonl') or ds.to_parquet('rows.parquet')")  # fmt: skip
BINARY_KINDS = {
    b"PK\x03\x04": "a zip archive (an .xlsx workbook?): export the sheet as 'CSV UTF-8', or unzip it",
    # Arrow's IPC file and stream (Hugging Face datasets' cache and save_to_disk shards are streams).
    b"ARROW1": f"an Arrow file (a Hugging Face datasets shard?), not a dataset file: {HF_EXPORT_HINT}",
    b"\xff\xff\xff\xff": f"an Arrow stream (a Hugging Face datasets shard?), not a dataset file: {HF_EXPORT_HINT}",
    # Byte-order marks of UTF-16, which no UTF-8 text opens with: Windows PowerShell's > and Out-File write it.
    b"\xff\xfe": "UTF-16 text (Windows PowerShell's > writes it), not UTF-8: iconv -f utf-16 -t utf-8",
    b"\xfe\xff": "UTF-16 text, not UTF-8: iconv -f utf-16 -t utf-8",
}


def _is_parquet(path: Path) -> bool:
    """A Parquet file opens and ends with PAR1 (a CSV header may open with a column named PAR1)."""
    if not path.is_file():
        return False
    with path.open("rb") as fh:
        head = fh.read(4)
        size = fh.seek(0, 2)
        fh.seek(max(0, size - 4))
        return head == PARQUET_MAGIC and size >= 8 and fh.read(4) == PARQUET_MAGIC


def binary_kind(head: bytes) -> str | None:
    """What a file opening with ``head`` is and how to make text of it (BINARY_KINDS), or None."""
    return next((kind for magic, kind in BINARY_KINDS.items() if head.startswith(magic)), None)


def _refuse_binary(path: Path) -> None:
    """DatasetError for an archive, Arrow or UTF-16 file, which every row of would be reported as invalid UTF-8."""
    if path.is_file():
        with path.open("rb") as fh:
            head = fh.read(8)
        if kind := binary_kind(head):
            raise DatasetError(f"{path}: {kind}")


def _refuse_directory(path: Path, fmt: str | None, caller: Caller) -> None:
    """DatasetError for a directory given to a format that reads files, a file given to the one that reads only
    directories, and a Hugging Face save_to_disk folder given as eval-points (its JSON files would be topics without
    a topic)."""
    from .hf_disk import is_hf_folder

    directory = " or ".join(caller.given("format", name) for name in DIRECTORY_FORMATS)
    if path.is_dir() and fmt not in (None, *DIRECTORY_FORMATS):
        raise DatasetError(f"{path} is a directory; give a file (only {directory} reads a directory)")
    if not path.is_dir() and fmt == HF_FORMAT:
        raise DatasetError(f"{path} is a file; {caller.given('format', fmt)} reads the folder save_to_disk wrote")
    if fmt == DIRECTORY_FORMAT and is_hf_folder(path):
        raise DatasetError(f"{path}: a Hugging Face datasets folder (save_to_disk), not evaluation points: read it "
                           f"with {caller.given('format', HF_FORMAT)} (or without naming a format)")  # fmt: skip


def _refuse_mismatch(path: Path, fmt: str, caller: Caller) -> None:
    """DatasetError for a Parquet or gzip-compressed file given to a format that cannot read it, naming ``caller``'s
    options."""
    if fmt != "parquet" and _is_parquet(path):
        raise DatasetError(f"{path}: a Parquet file: read it with {caller.given('format', 'parquet')} (or name it "
                           ".parquet)")  # fmt: skip
    if fmt == "parquet" and _gzipped(path):
        raise DatasetError(f"{path}: gzip-compressed, not Parquet (Parquet compresses inside the file)")
    if fmt not in GZIP_FORMATS and fmt != "parquet" and _gzipped(path):
        raise DatasetError(f"{path}: gzip-compressed, which {caller.given('format', fmt)} does not read: decompress "
                           "it first "
                           "(gunzip -k FILE)")  # fmt: skip


def _whole(path: Path, records: Iterator[tuple[int, Record | RowError]]) -> Iterator[tuple[int, Record | RowError]]:
    """``records``; a gzip stream that is cut short or damaged is a DatasetError naming the file."""
    try:
        yield from records
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DatasetError(f"{path}: gzip-compressed, but it cannot be decompressed to its end ({exc}): is it "
                           "complete?") from exc  # fmt: skip


def detect_format(path: Path, options: dict[str, Any] | None = None, caller: Caller = CLI) -> str:
    """Format from the path: a directory is eval-points; ``.jsonl``/``.ndjson``, ``.csv``/``.tsv`` and ``.parquet`` by
    extension (under a ``.gz`` one, the one before it); a ``.json`` file is eval-points, socioscope or auto-analyst
    when its content says so (see docs/datasets.md), else json; a Parquet file by its content; nlp-project when
    predictions are given or the file looks like the NLP project's questions. ``caller``: whose options its errors
    name."""
    suffix, gzipped = _suffix(path), path.suffix.lower() == ".gz"
    if options and options.get("predictions"):  # an option of nlp-project only
        from .nlp_project import looks_like_nlp_project

        if path.is_dir() or (not gzipped and not looks_like_nlp_project(path)):  # gzip: its reader says so
            predictions, nlp_project = caller.option("predictions"), caller.given("format", "nlp-project")
            raise DatasetError(f"{predictions} is an option of {nlp_project}, whose questions file has a JSON object "
                               f"with doc_id, question and evidence_sentences per line; {path} does not: drop "
                               f"{predictions}, or pass {nlp_project} to read it so anyway")  # fmt: skip
        return "nlp-project"
    if path.is_dir():
        from .hf_disk import is_hf_folder

        return HF_FORMAT if is_hf_folder(path) else DIRECTORY_FORMAT
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".parquet", ".pq") or _is_parquet(path):
        return "parquet"
    if suffix == ".json":
        return "json" if gzipped else _sniff_json(path)
    from .nlp_project import looks_like_nlp_project

    if looks_like_nlp_project(path):
        return "nlp-project"
    named = f"{suffix}.gz" if gzipped else suffix  # data.gz: '.gz', not ''
    raise DatasetError(
        f"{path}: cannot tell the format from {named!r}; pass {caller.option('format')} ({', '.join(ALL_FORMATS)})"
    )


def _refuse_options(fmt: str, options: dict[str, Any] | None, accepted: frozenset[str], caller: Caller) -> None:
    """DatasetError for reader options ``fmt`` does not take (a typo of evaluate()'s fmt_options too): each one, the
    option it is like, and those the format takes, as ``caller`` names them."""
    unknown = sorted(set(options or {}) - accepted)
    if not unknown:
        return
    like = did_you_mean([n for name in unknown for n in close_names(name, accepted)])
    takes = ", ".join(sorted(accepted)) or "none"
    hint = f"{like} it takes {takes}" if like else f"it takes {takes}"
    raise DatasetError(f"{caller.reader_options(unknown)}: not an option of {caller.given('format', fmt)} ({hint})")


#: How many entries of a missing file's folder :func:`files_named_like` reads (not all of a folder of millions).
MAX_NEIGHBOURS = 10_000


def files_named_like(path: Path) -> str:
    """For a file that does not exist, the hint naming the files of its folder named like it (``data.json`` given,
    ``data.jsonl`` there: `` (did you mean 'data.jsonl'?)``); nothing where none is, or the folder cannot be read."""
    try:
        names = [entry.name for entry in islice(path.parent.iterdir(), MAX_NEIGHBOURS)]
    except OSError:
        return ""
    like = close_names(path.name, names, cutoff=0.8)[:1]  # the likest: e1.json's e1.jsonl, not e4.jsonl beside it
    return f" ({did_you_mean([str(path.with_name(name)) for name in like])})" if like else ""


def check_dataset_exists(path: Path) -> None:
    """DatasetError naming ``path`` (and the files of its folder named like it) where nothing is there."""
    if not path.exists():
        raise DatasetError(f"Dataset not found: {path}{files_named_like(path)}")


def iter_records(
    path: Path, fmt: str | None = None, options: dict[str, Any] | None = None, caller: Caller = CLI
) -> Iterator[tuple[int, Record | RowError]]:
    """Stream ``(line, record | RowError)`` from a dataset file (or, for eval-points, a directory).

    ``options`` are reader options of a seed format (nlp-project: ``predictions``, ``corpus``, ``system``;
    auto-analyst: ``system``). ``caller``: whose options (``--format`` or ``fmt=``) its errors and hints name.
    """
    check_dataset_exists(path)
    _refuse_binary(path)
    _refuse_directory(path, fmt, caller)
    fmt = fmt or detect_format(path, options, caller)
    _refuse_mismatch(path, fmt, caller)
    if fmt in SEED_FORMATS:
        module, function, accepted = SEED_FORMATS[fmt]
        _refuse_options(fmt, options, accepted, caller)
        reader = getattr(importlib.import_module(f".{module}", __package__), function)
        spoken = {"caller": caller} if fmt in _SPEAKING_SEED_FORMATS else {}
        return reader(path, **(options or {}), **spoken)
    if fmt not in FORMATS:
        raise DatasetError(f"Unknown dataset format {fmt!r}; choose one of {', '.join(ALL_FORMATS)}")
    _refuse_options(fmt, options, frozenset(), caller)
    records = FORMATS[fmt](path, caller)
    return _whole(path, records) if _gzipped(path) else records
