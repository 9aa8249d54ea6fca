"""Parquet datasets, streamed a record batch at a time (pyarrow: ``pip install 'ragscore[parquet]'``); the rows of
a table's record batches (``table_rows``), which the Hugging Face folders' reader (``hf_disk``) shares.

A row's "line" is its position in the file (1-based), as for a JSON list. Values become JSON's: timestamps and
dates ISO 8601 text, decimals floats, a NaN or infinity null, a map an object (at any depth), binary UTF-8 text (a
row with other bytes, a map with a key given twice, or a value Python cannot hold, is a reported row). Column
names are read as a CSV header's (``loaders.column_names``): without the spaces around them, one given twice refused.
"""

from __future__ import annotations

import datetime as dt
import decimal
import importlib
import json
import math
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ragscore_workers.errors import DatasetError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["iter_parquet", "json_value", "pyarrow_module", "table_rows"]

#: Rows decoded at a time: the reader holds one batch, whatever the file's size.
BATCH_ROWS = 2048
#: The oldest pyarrow giving maps as dicts (``maps_as_pydicts``), as pyproject's parquet extra requires.
PYARROW_MAJOR = 20
#: Maps become dicts; a key given twice is a KeyError, so its row is reported, no value dropped.
MAPS = "strict"
#: Bytes read from the file at a time: pyarrow's default reads (and holds) a whole row group's columns at once,
#: hundreds of MB for a row group of long answers, before the first row is given.
READ_BUFFER_BYTES = 1 << 20


def json_value(value: Any, where: str = "") -> Any:
    """``value`` as pyarrow gives it, made of JSON's types (a NaN or infinity is null: JSON has no such number);
    ValueError naming the column for bytes that are no UTF-8 text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): json_value(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where.lstrip('.')}: binary that is not UTF-8 text (byte {exc.start})") from exc
    return str(value)


def pyarrow_module(path: Path, what: str, also: str = "") -> ModuleType:
    """pyarrow, with its module ``also`` imported (``pyarrow.parquet``), as the readers need it; DatasetError naming
    ``path`` and ``what`` it is (``a Parquet file``) when pyarrow is missing, it or ``also`` does not import, or it is
    older than PYARROW_MAJOR."""
    name = "pyarrow"
    try:
        import pyarrow as pa

        if also:
            name = also
            importlib.import_module(also)
    except ImportError as exc:  # missing, or installed and broken (a shared library it links is not there)
        missing = isinstance(exc, ModuleNotFoundError) and exc.name == "pyarrow"
        fix = (
            "pip install 'ragscore[parquet]'"
            if missing
            else f"{name} does not import ({type(exc).__name__}: {exc}): "
            "pip install --force-reinstall --no-deps pyarrow"
        )
        raise DatasetError(f"{path}: {what}; reading it needs pyarrow: {fix}") from exc
    if int(pa.__version__.split(".")[0]) < PYARROW_MAJOR:  # its to_pylist gives a map as (key, value) pairs
        raise DatasetError(f"{path}: {what}; reading it needs pyarrow>={PYARROW_MAJOR}, this host has "
                           f"{pa.__version__}: pip install -U 'ragscore[parquet]'")  # fmt: skip
    return pa


def iter_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any] | Any]]:
    """``(row number, record)``, or a :class:`~orchestrator.datasets.loaders.RowError` for a row whose values are
    no JSON; DatasetError when pyarrow is missing or does not import, or the file is no readable Parquet."""
    pa = pyarrow_module(path, "a Parquet file", also="pyarrow.parquet")
    pq = pa.parquet  # imported by pyarrow_module

    try:
        parquet = pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
        yield from table_rows(
            path, parquet.schema_arrow, lambda columns: parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns)
        )
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})") from exc


def table_rows(
    path: Path, schema: pa.Schema, batches: Callable[[list[str]], Iterable[pa.RecordBatch]], before: int = 0
) -> Generator[tuple[int, dict[str, Any] | Any], None, int]:
    """``(row number, record | RowError)`` of a table's record batches (``batches``: those of the columns named, as
    written), numbered on from ``before``; returns the last number. Column names are read as a CSV header's, and
    pandas' unnamed row labels are no column."""
    from .loaders import RowError, column_names

    written = [name for name in schema.names if name not in _pandas_row_labels(schema)]
    names = dict(zip(written, column_names(path, written), strict=True))  # as written -> as read
    number = before
    for batch in batches([name for name in names if names[name]]):
        for record, unreadable in _records(batch.rename_columns([names[name] for name in batch.schema.names])):
            number += 1
            try:
                if unreadable:
                    raise ValueError(unreadable)
                yield number, json_value(record)
            except ValueError as exc:  # raw: the values that could be read
                raw = json.dumps(record, default=repr, ensure_ascii=False)
                yield number, RowError(number, str(exc), raw)
    return number


def _pandas_row_labels(schema: pa.Schema) -> set[str]:
    """The columns pandas wrote for a DataFrame's unnamed row labels (``__index_level_0__``: ``df.sample(n)`` or a
    shuffled frame written by ``to_parquet``), no column of the dataset; a named index (``set_index("id")``) is."""
    index = (schema.pandas_metadata or {}).get("index_columns", [])
    return {name for name in index if isinstance(name, str) and re.fullmatch(r"__index_level_\d+__", name)}


def _records(batch: pa.RecordBatch) -> list[tuple[dict[str, Any], str]]:
    """The batch's rows as pyarrow gives them, each with why it cannot be given ("" when it can): a value Python
    cannot hold (a timestamp past year 9999, nanoseconds with pandas not installed, a map's key given twice) is that
    row's error, naming its column, not the end of the run."""
    try:
        return [(record, "") for record in batch.to_pylist(maps_as_pydicts=MAPS)]
    except Exception:  # one value spoils the whole batch (ValueError, OverflowError, a KeyError for an unknown
        pass  # time zone): read it a value at a time
    rows = []
    for i in range(batch.num_rows):
        record, unreadable = {}, ""
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            try:
                record[name] = column[i].as_py(maps_as_pydicts=MAPS)
            except Exception as exc:
                unreadable = unreadable or f"{name}: {type(exc).__name__}: {exc}"
        rows.append((record, unreadable))
    return rows
