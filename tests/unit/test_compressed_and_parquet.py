"""Gzip-compressed JSONL / CSV / JSON are read as the plain files are; Parquet is read a batch at a time, its values
made JSON's; a file in the wrong format, or cut short, is one clear error before anything is submitted."""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator.datasets import RowError, detect_format, iter_rows, scan_dataset
from ragscore_workers.errors import DatasetError
from ragscore_workers.schemas import Row

from ..support import ROOT

ROWS = [{"id": "a", "answer": "x", "reference": "x"}, {"id": "b", "answer": "y", "contexts": ["c1", "c2"]}]


def _read(path: Path, fmt: str | None = None) -> list[tuple[int, object]]:
    return [(line, row if isinstance(row, RowError) else row.model_dump(exclude_defaults=True))
            for line, row in iter_rows(path, fmt)]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("d.jsonl", "".join(json.dumps(r) + "\n" for r in ROWS) + "not json\n"),
        ("d.csv", 'id,answer,reference,contexts\na,x,x,\nb,y,,"[""c1"", ""c2""]"\n'),
        ("d.json", json.dumps(ROWS)),
    ],
)
def test_a_gzip_compressed_file_reads_as_the_plain_one(tmp_path: Path, name: str, text: str) -> None:
    plain, packed = tmp_path / name, tmp_path / f"{name}.gz"
    plain.write_text(text, encoding="utf-8")
    packed.write_bytes(gzip.compress(text.encode("utf-8")))
    assert detect_format(packed) == detect_format(plain)
    assert _read(packed) == _read(plain)
    assert [line for line, _ in _read(packed)] == ([1, 2, 3] if name == "d.jsonl" else [1, 2] if name == "d.json"
                                                   else [2, 3])  # fmt: skip
    named_otherwise = tmp_path / "rows.dat"  # told by its first bytes, whatever its name
    named_otherwise.write_bytes(packed.read_bytes())
    assert _read(named_otherwise, detect_format(plain)) == _read(plain)


def test_a_gzip_file_cut_short_stops_before_anything_is_submitted(tmp_path: Path) -> None:
    whole = gzip.compress("".join(json.dumps({"id": f"q{i}", "answer": "x" * 50}) + "\n" for i in range(5000)).encode())
    cut = tmp_path / "d.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DatasetError, match=r"d.jsonl.gz: gzip-compressed, but it cannot be decompressed to its end"):
        scan_dataset(cut, None, lambda _: None)


def test_a_seed_layout_compressed_says_to_decompress_it(tmp_path: Path) -> None:
    packed = tmp_path / "corpus.json.gz"
    packed.write_bytes(gzip.compress(b'{"qa_pairs": []}'))
    with pytest.raises(DatasetError, match=r"gzip-compressed, which --format socioscope does not read: decompress"):
        list(iter_rows(packed, "socioscope"))


def test_parquet_rows_are_read_in_order_with_json_values_and_a_bad_row_is_reported_alone(tmp_path: Path) -> None:
    table = pa.table({
        "id": ["a", "b", "c", None],
        "answer": ["x", "y", "z", "w"],
        "contexts": [["c1", "c2"], [], None, ["c"]],
        "metadata": pa.array([[("lang", "en")], [], None, [("lang", "de")]], pa.map_(pa.string(), pa.string())),
        "asked_at": [dt.datetime(2026, 11, 25, 9, 30), None, None, None],
        "cost": pa.array([decimal.Decimal("0.25"), None, None, None], pa.decimal128(5, 2)),
        "note": [b"plain", b"\xff not text", None, None],
    })  # fmt: skip
    path = tmp_path / "d.parquet"
    pq.write_table(table, path, row_group_size=2)  # two row groups: read across them
    assert detect_format(path) == "parquet"
    read = list(iter_rows(path))
    assert [line for line, _ in read] == [1, 2, 3, 4]
    first, second, third, fourth = (row for _, row in read)
    assert not isinstance(first, RowError) and first.id == "a" and [c.text for c in first.contexts] == ["c1", "c2"]
    assert first.metadata == {"lang": "en"} and first.model_extra == {"asked_at": "2026-11-25T09:30:00",
                                                                       "cost": 0.25, "note": "plain"}  # fmt: skip
    assert isinstance(second, RowError) and second.line == 2
    assert second.error == "note: binary that is not UTF-8 text (byte 0)" and '"id": "b"' in second.raw
    assert not isinstance(third, RowError) and third.metadata == {} and third.contexts == []
    assert not isinstance(fourth, RowError) and fourth.id == "row-4"  # a missing id, as for a line
    scan = scan_dataset(path, None, lambda _: None)
    assert (scan.rows, scan.failed) == (3, 1)


def test_a_parquet_file_under_another_name_is_found_and_a_misnamed_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "export.bin"
    pq.write_table(pa.table({"id": ["a"], "answer": ["x"]}), path)
    assert detect_format(path) == "parquet" and [r.id for _, r in iter_rows(path)] == ["a"]
    as_jsonl = tmp_path / "rows.jsonl"
    as_jsonl.write_bytes(path.read_bytes())
    with pytest.raises(DatasetError, match="rows.jsonl: a Parquet file: read it with --format parquet"):
        list(iter_rows(as_jsonl))
    packed = tmp_path / "rows.parquet"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(DatasetError, match="gzip-compressed, not Parquet"):
        list(iter_rows(packed))


def test_a_parquet_value_python_cannot_hold_is_that_rows_error_and_a_column_given_twice_is_refused(
    tmp_path: Path,
) -> None:
    """A timestamp past year 9999 (a sentinel some exports write) raised an OverflowError out of the reader: a
    traceback, no run. A column given twice kept one of its values unsaid (CSV refuses it)."""
    path = tmp_path / "d.parquet"
    year_10000 = 253_402_300_800 * 10**6  # microseconds since 1970
    at = pa.array([0, year_10000, 86_400 * 10**6], pa.timestamp("us"))
    pq.write_table(pa.table({"id": ["a", "b", "c"], "answer": ["x", "y", "z"], "asked_at": at}), path)
    read = list(iter_rows(path))
    assert [line for line, _ in read] == [1, 2, 3]
    first, second, third = (row for _, row in read)
    assert not isinstance(first, RowError) and first.model_extra == {"asked_at": "1970-01-01T00:00:00"}
    assert isinstance(second, RowError) and second.error.startswith("asked_at: ") and '"id": "b"' in second.raw
    assert not isinstance(third, RowError) and third.model_extra == {"asked_at": "1970-01-02T00:00:00"}
    twice = tmp_path / "twice.parquet"
    table = pa.Table.from_arrays([pa.array(["a"]), pa.array(["x"]), pa.array(["y"])], ["id", "answer", "answer"])
    pq.write_table(table, twice)
    with pytest.raises(DatasetError, match="twice.parquet: column 'answer' given twice"):
        list(iter_rows(twice))


def test_parquet_column_names_are_read_without_the_spaces_around_them_as_a_csv_headers_are(tmp_path: Path) -> None:
    """A column named ' answer ' (a frame read from a CSV typed ``id, answer``, then written by ``to_parquet`` or a
    Hugging Face export) was kept as a field ' answer ', not the answer: no row had one, and nothing was scored.
    Names alike once stripped are refused, as in a CSV header; a column without a name is not read, as in CSV."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"id": ["a"], " answer ": ["x"], "reference\t": ["x"], " ": ["unnamed"]}), path)
    assert [row for _, row in iter_rows(path)] == [Row(id="a", answer="x", reference="x")]
    twice = tmp_path / "twice.parquet"
    pq.write_table(pa.table({"id": ["a"], "answer": ["x"], "answer ": ["y"]}), twice)
    with pytest.raises(DatasetError, match=r"twice.parquet: column 'answer' given twice \('answer', 'answer ', read "
                       r"without the spaces around them\); which one holds the field would be a guess"):  # fmt: skip
        list(iter_rows(twice))


def test_a_parquet_value_in_an_unknown_time_zone_is_that_rows_error(tmp_path: Path) -> None:
    """A timestamp column whose zone this host does not know raised a KeyError out of the reader: a traceback."""
    path = tmp_path / "tz.parquet"
    at = pa.array([0, None], pa.timestamp("us", tz="Mars/Olympus"))
    pq.write_table(pa.table({"id": ["a", "b"], "asked_at": at}), path)
    (_, first), (_, second) = read = list(iter_rows(path))
    assert isinstance(first, RowError) and first.line == 1 and first.error.startswith("asked_at: ")
    assert "Mars/Olympus" in first.error and first.raw == '{"id": "a"}'
    assert not isinstance(second, RowError) and second.id == "b" and len(read) == 2


def test_parquet_is_read_a_little_at_a_time_not_a_row_group_at_once(tmp_path: Path) -> None:
    """pyarrow's default reader buffers a whole row group (a 1M-row export is often one) before the first row:
    50 MB here, GBs for a real corpus. The first row must come after reading about one batch, not the file."""
    path = tmp_path / "one_group.parquet"
    n = 40_000
    answers = [f"{i:08d}" * 150 for i in range(n)]  # 1.2 KB each, stored plain: the file holds 48 MB
    table = pa.table({"id": [f"q{i}" for i in range(n)], "answer": answers})
    pq.write_table(table, path, row_group_size=n, compression="none", use_dictionary=False)
    del table, answers
    before = pa.total_allocated_bytes()
    rows = iter_rows(path)
    assert next(rows)[1].id == "q0"  # type: ignore[union-attr]
    held = pa.total_allocated_bytes() - before
    assert held < path.stat().st_size / 4, (
        f"{held / 1e6:.1f} MB held for the first row of a {path.stat().st_size / 1e6:.0f} MB file"
    )
    assert sum(1 for _ in rows) == n - 1


def test_the_row_labels_pandas_writes_for_a_sampled_frame_are_no_column(tmp_path: Path) -> None:
    """``df.sample(n).to_parquet(...)`` writes the frame's row labels as ``__index_level_0__``: every row carried it
    as a field of its own. A named index (``set_index("id")``) is data, and is read."""
    import pandas as pd

    frame = pd.DataFrame({"id": ["a", "b", "c"], "answer": ["x", "y", "z"]}).sample(3, random_state=1)
    frame.to_parquet(tmp_path / "sampled.parquet")
    assert "__index_level_0__" in pq.ParquetFile(tmp_path / "sampled.parquet").schema_arrow.names
    assert _read(tmp_path / "sampled.parquet") == [
        (n, {"id": i, "answer": a}) for n, (i, a) in enumerate(zip(frame["id"], frame["answer"], strict=True), 1)
    ]
    frame.set_index("id").to_parquet(tmp_path / "named.parquet")
    assert [row for _, row in _read(tmp_path / "named.parquet")] == [{"id": i, "answer": a} for i, a in frame.values]


def test_a_parquet_map_is_an_object_wherever_it_is_nested_and_a_key_given_twice_is_that_rows_error(
    tmp_path: Path,
) -> None:
    """An empty map inside a list or a struct read as [] (only a top-level map column was made {}); a map with a
    key given twice kept one of its values unsaid."""
    tags = pa.map_(pa.string(), pa.string())
    table = pa.table({
        "id": ["a", "b", "c"],
        "tags": pa.array([[[], [("k", "v")]], [], [[("k", "1"), ("k", "2")]]], pa.list_(tags)),
        "source": pa.array([{"meta": []}, {"meta": [("lang", "en")]}, None], pa.struct([("meta", tags)])),
    })  # fmt: skip
    path = tmp_path / "maps.parquet"
    pq.write_table(table, path)
    first, second, third = (row for _, row in iter_rows(path))
    assert not isinstance(first, RowError) and first.model_extra == {"tags": [{}, {"k": "v"}], "source": {"meta": {}}}
    assert not isinstance(second, RowError) and second.model_extra == {"tags": [], "source": {"meta": {"lang": "en"}}}
    assert isinstance(third, RowError) and third.line == 3 and third.error.startswith("tags: ")
    assert "'k'" in third.error and '"id": "c"' in third.raw


def test_a_parquet_nan_or_infinity_is_null_at_any_depth(tmp_path: Path) -> None:
    """A float NaN or infinity in a list or a map was kept as the float: written as ``NaN`` into JSON (no JSON)."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"id": ["a"], "answer": ["x"], "expected": [[1.5, float("nan"), float("-inf")]],
                             "metadata": [{"score": float("inf")}]}), path)  # fmt: skip
    assert _read(path) == [(1, {"id": "a", "answer": "x", "expected": [1.5, None, None], "metadata": {"score": None}})]


@pytest.mark.parametrize("broken", [True, False])
def test_a_broken_or_missing_pyarrow_is_one_clear_error_naming_why_not_a_traceback(
    tmp_path: Path, broken: bool
) -> None:
    """An installed pyarrow whose import fails (a missing libarrow: ImportError, not ModuleNotFoundError) gave a
    traceback; it is refused as a missing one is, with the import's own error."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"id": ["a"], "answer": ["x"], "reference": ["x"]}), path)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["exact_match"]}))
    shadow = tmp_path / "site" / "pyarrow"  # first on the path: the pyarrow this process imports
    shadow.mkdir(parents=True)
    error = (
        "ImportError('libarrow.so.2000: cannot open shared object file')"
        if broken
        else "ModuleNotFoundError(name='pyarrow')"
    )
    (shadow / "__init__.py").write_text(f"raise {error}\n")
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(path), "--suite", str(tmp_path / "s.json"), "--dry-run"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env=dict(os.environ, COLUMNS="400", PYTHONPATH=os.pathsep.join([str(shadow.parent), str(ROOT)])),
    )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"{path}: a Parquet file; reading it needs pyarrow" in result.stderr, result.stderr
    said = "pyarrow does not import (ImportError: libarrow.so.2000: cannot open shared object file): pip install "
    fix = "pip install --force-reinstall --no-deps pyarrow"  # only pyarrow again, not its dependencies
    assert (said in result.stderr and fix in " ".join(result.stderr.split())) is broken, result.stderr


def test_a_pyarrow_without_its_parquet_module_is_one_clear_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pyarrow whose ``pyarrow.parquet`` does not import (conda-forge's ``pyarrow-core`` has none; a missing
    libparquet) was refused as a broken pyarrow is, until the import moved out of the guarded block (0e63f19): then
    it was an ImportError traceback. ``None`` in sys.modules makes that import fail as a missing module does."""
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"id": ["a"], "answer": ["x"]}), path)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DatasetError) as caught:
        list(iter_rows(path))
    said = str(caught.value)
    assert said.startswith(f"{path}: a Parquet file; reading it needs pyarrow: pyarrow.parquet does not import ("), said
    assert said.endswith("): pip install --force-reinstall --no-deps pyarrow"), said
