"""A folder Hugging Face datasets' ``save_to_disk`` wrote is read with pyarrow, as the other tables are read.

The folders are written here in save_to_disk's layout (datasets' ``src/datasets/arrow_dataset.py``,
``Dataset.save_to_disk`` and ``DatasetDict.save_to_disk``, 2.x and 3.x): shards ``data-0000i-of-0000n.arrow``, each an
Arrow IPC stream (``arrow_writer.py``'s ``ArrowWriter`` writes with ``pa.RecordBatchStreamWriter``) with the
``huggingface`` schema metadata, ``state.json`` naming them in ``_data_files``, ``dataset_info.json`` with the
features; a DatasetDict's ``dataset_dict.json`` names its splits, one folder each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from orchestrator.datasets import detect_format, iter_rows, scan_dataset
from ragscore_workers.errors import DatasetError

from ..support import ROOT
from .conftest import Read

FEATURES = {
    "id": {"dtype": "string", "_type": "Value"},
    "question": {"dtype": "string", "_type": "Value"},
    " answer ": {"dtype": "binary", "_type": "Value"},
    "contexts": {"feature": {"dtype": "string", "_type": "Value"}, "_type": "Sequence"},
}


#: A column of a datasets Image feature, as datasets stores it: a struct of the file's bytes and its path.
IMAGE = (pa.struct([("bytes", pa.binary()), ("path", pa.string())]), {"_type": "Image"})


def _table(rows: list[dict[str, Any]], extra: dict[str, tuple[pa.DataType, Any]]) -> pa.Table:
    features = {**FEATURES, **{name: feature for name, (_, feature) in extra.items()}}
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("question", pa.string()),
            (" answer ", pa.binary()),
            ("contexts", pa.list_(pa.string())),
            *((name, kind) for name, (kind, _) in extra.items()),
        ],
        metadata={"huggingface": json.dumps({"info": {"features": features}})},
    )
    return pa.Table.from_pylist(rows, schema=schema)


def save_to_disk(
    folder: Path,
    shards: list[list[dict[str, Any]]],
    split: str | None = "test",
    extra: dict[str, tuple[pa.DataType, Any]] | None = None,
    **state_fields: Any,
) -> Path:
    """``folder`` as ``Dataset.save_to_disk`` writes it: a shard per list of rows, two rows a record batch; ``extra``:
    columns after the usual ones (name: arrow type, datasets feature); ``state_fields``: state.json's values
    (``_format_columns``)."""
    folder.mkdir(parents=True)
    names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
    for name, rows in zip(names, shards, strict=True):
        table = _table(rows, extra or {})
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=2)
    state = {
        "_data_files": [{"filename": name} for name in names],
        "_fingerprint": "8d0f6e1a2b3c4d5e",
        "_format_columns": None,
        "_format_kwargs": {},
        "_format_type": None,
        "_output_all_columns": False,
        "_split": split,
        **state_fields,
    }
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    features = {**FEATURES, **{name: feature for name, (_, feature) in (extra or {}).items()}}
    info = {"citation": "", "description": "", "features": features, "homepage": "", "license": ""}
    (folder / "dataset_info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    return folder


def _row(i: int, **fields: Any) -> dict[str, Any]:
    return {"id": f"q{i}", "question": f"Q{i}?", " answer ": f"A{i}".encode(), "contexts": [f"c{i}"], **fields}


def test_a_save_to_disk_folder_is_read_in_order_across_its_shards_with_each_bad_row_at_its_position(
    tmp_path: Path, read: Read
) -> None:
    """It was refused ('not a dataset file: export its rows'), though its rows are a table pyarrow reads: rows are
    numbered across the shards, its columns named as a CSV header's (' answer ' is the answer), and a row whose
    value is no text (bytes not UTF-8) or does not validate (a null context) is a bad row at its position."""
    folder = save_to_disk(
        tmp_path / "saved",
        [
            [_row(1), _row(2), _row(3, **{" answer ": b"\xff"})],
            [_row(4, contexts=[None]), _row(5)],
        ],
    )
    assert detect_format(folder) == "hf-disk"
    for fmt in (None, "hf-disk"):
        ok, bad = read(folder, fmt)
        assert [(r.id, r.question, r.answer, [c.text for c in r.contexts]) for r in ok] == [
            ("q1", "Q1?", "A1", ["c1"]),
            ("q2", "Q2?", "A2", ["c2"]),
            ("q5", "Q5?", "A5", ["c5"]),
        ]
        assert [(e.line, e.error.split(":")[0]) for e in bad] == [(3, "answer"), (4, "contexts.0")]
        assert "binary that is not UTF-8 text" in bad[0].error


@pytest.mark.parametrize("output_all", [False, True])
def test_a_save_to_disk_folder_saved_with_format_columns_gives_rows_of_those_columns(
    tmp_path: Path, read: Read, output_all: bool
) -> None:
    """``ds.set_format(columns=[...])`` saved: load_from_disk applies state.json's format (``with_format(columns=
    _format_columns, output_all_columns=_output_all_columns)``), so its rows hold those columns only; every column was
    read, the contexts a format left out scored too."""
    folder = save_to_disk(
        tmp_path / "saved",
        [[_row(1), _row(2)]],
        _format_columns=["id", "question", " answer "],
        _format_type="torch",
        _output_all_columns=output_all,
    )
    ok, bad = read(folder)
    assert bad == []
    assert [(r.id, r.answer, [c.text for c in r.contexts]) for r in ok] == [
        ("q1", "A1", ["c1"] if output_all else []),
        ("q2", "A2", ["c2"] if output_all else []),
    ]


def test_a_save_to_disk_folder_with_an_image_column_is_read_without_it(tmp_path: Path, read: Read) -> None:
    """An Image column (datasets stores it as a struct of the file's bytes and path) made every row a bad row,
    'binary that is not UTF-8 text', though no metric reads it: such media columns are not read. One named as a
    row field stops the dataset, naming it, instead of a bad row each."""
    png = {"bytes": b"\x89PNG\r\n\x1a\n\x00\x00", "path": "cat.png"}
    folder = save_to_disk(
        tmp_path / "saved",
        [[_row(1, image=png), _row(2, image=png)], [_row(3, image=None)]],
        extra={"image": IMAGE, "pages": (pa.list_(IMAGE[0]), {"feature": IMAGE[1], "_type": "Sequence"})},
    )
    ok, bad = read(folder)
    assert bad == []
    assert [(r.id, r.answer, r.model_extra) for r in ok] == [("q1", "A1", {}), ("q2", "A2", {}), ("q3", "A3", {})]
    for fmt in (None, "hf-disk"):  # said before a run: a user of a multimodal dataset is not left guessing
        assert scan_dataset(folder, fmt, on_error=lambda _: None).warnings() == [
            "columns 'image' (Image), 'pages' (Image) hold files (a datasets media feature: bytes and a path) that "
            "no metric reads: they are not read"
        ]
    named = save_to_disk(tmp_path / "named", [[_row(1, reference=png)]], extra={"reference": IMAGE})
    with pytest.raises(DatasetError, match=r"its column 'reference' is a datasets Image feature \(a file's bytes and "
                       r"path\), not text: give reference as text, or remove the column"):  # fmt: skip
        list(iter_rows(named))


def test_a_save_to_disk_folder_without_dataset_info_finds_its_media_columns_in_the_shard_schema(
    tmp_path: Path, read: Read
) -> None:
    """Without dataset_info.json (a folder copied without it) the features are those its shards' schema keeps
    (``huggingface``'s ``info``), as load_from_disk reads them: its Image column was read, a bad row each. A media
    column named as a row field's alias (``ground_truth``: reference) stops the dataset, as one named as the field
    does: it was dropped, the rows read as giving no reference, without a word."""
    png = {"bytes": b"\x89PNG\r\n\x1a\n\x00\x00", "path": "cat.png"}
    folder = save_to_disk(tmp_path / "saved", [[_row(1, image=png), _row(2, image=None)]], extra={"image": IMAGE})
    (folder / "dataset_info.json").unlink()
    ok, bad = read(folder)
    assert bad == []
    assert [(r.id, r.answer, r.model_extra) for r in ok] == [("q1", "A1", {}), ("q2", "A2", {})]
    named = save_to_disk(tmp_path / "named", [[_row(1, ground_truth=png)]], extra={"ground_truth": IMAGE})
    with pytest.raises(DatasetError, match=r"its column 'ground_truth' is a datasets Image feature \(a file's bytes "
                       r"and path\), not text: give reference as text, or remove the column"):  # fmt: skip
        list(iter_rows(named))


def test_a_dataset_dict_folder_names_its_splits_and_one_split_folder_is_read(tmp_path: Path, read: Read) -> None:
    """A DatasetDict's folder holds a folder per split: which one to score is the user's to say, by giving it."""
    folder = tmp_path / "dd"
    save_to_disk(folder / "train", [[_row(1)]], split="train")
    save_to_disk(folder / "test", [[_row(2), _row(3)]], split="test")
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}), encoding="utf-8")
    with pytest.raises(DatasetError, match=r"DatasetDict folder \(save_to_disk\) with the splits train, test: give one "
                       rf"split's folder \({folder / 'train'}\)"):  # fmt: skip
        list(iter_rows(folder))
    assert [r.id for r in read(folder / "test")[0]] == ["q2", "q3"]


@pytest.mark.parametrize(
    ("fmt", "message"),
    [
        (
            "eval-points",
            r"a Hugging Face datasets folder \(save_to_disk\), not evaluation points: read it with "
            r"--format hf-disk",
        ),
        ("jsonl", r"is a directory; give a file \(only --format eval-points or --format hf-disk reads a directory\)"),
    ],
)
def test_a_save_to_disk_folder_given_as_another_format_says_which_reads_it(
    tmp_path: Path, fmt: str, message: str
) -> None:
    folder = save_to_disk(tmp_path / "saved", [[_row(1)]])
    with pytest.raises(DatasetError, match=message):
        list(iter_rows(folder, fmt))


@pytest.mark.parametrize("fmt", [None, "hf-disk"])
def test_a_file_given_for_a_save_to_disk_folder_says_to_give_the_folder(tmp_path: Path, fmt: str | None) -> None:
    """One shard of the folder would be a part of its rows; a file given as hf-disk is no such folder."""
    shard = save_to_disk(tmp_path / "saved", [[_row(1)]]) / "data-00000-of-00001.arrow"
    with pytest.raises(DatasetError, match=r"an Arrow stream .*: give the folder save_to_disk wrote \(all of its"):
        list(iter_rows(shard, fmt))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "q1"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"is a file; --format hf-disk reads the folder save_to_disk wrote"):
        list(iter_rows(rows, "hf-disk"))


def test_another_folder_given_as_hf_disk_says_what_it_lacks(tmp_path: Path) -> None:
    """An eval-points folder (or any other) given as hf-disk names the files a save_to_disk folder has."""
    (tmp_path / "points").mkdir()
    (tmp_path / "points" / "state.json").write_text('[{"topic": "t", "evaluation_points": []}]', encoding="utf-8")
    with pytest.raises(
        DatasetError,
        match=r"points: not a folder Hugging Face datasets' save_to_disk wrote: it has "
        r"no state.json naming its shards \(_data_files\), nor a dataset_dict.json naming its splits",
    ):
        list(iter_rows(tmp_path / "points", "hf-disk"))


@pytest.mark.parametrize("batch_rows", [1000, None])
def test_a_save_to_disk_folder_is_read_a_little_at_a_time(tmp_path: Path, batch_rows: int | None) -> None:
    """save_to_disk writes a shard's rows 1000 to a record batch (datasets' DEFAULT_MAX_BATCH_SIZE): the first row
    must come after reading about one batch, not the shard (40 MB here, GBs for a real corpus). A shard another
    writer made of one batch was turned into Python values whole (a dict a row) before its first row: its rows are
    now made values BATCH_ROWS at a time, as Parquet's are."""
    folder = tmp_path / "saved"
    folder.mkdir()
    n = 40_000
    answers = [f"{i:08d}" * 125 for i in range(n)]  # 1 KB each
    table = pa.table({"id": [f"q{i}" for i in range(n)], "question": ["Q?"] * n, "answer": answers})
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=batch_rows)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}]}), encoding="utf-8")
    del table, answers
    size = (folder / name).stat().st_size
    before = pa.total_allocated_bytes()
    tracemalloc.start()
    try:
        rows = iter_rows(folder)
        assert next(rows)[1].id == "q0"  # type: ignore[union-attr]
        _, made = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert made < size / 4, f"{made / 1e6:.1f} MB made for the first row of a {size / 1e6:.0f} MB shard"
    if batch_rows:
        held = pa.total_allocated_bytes() - before
        assert held < size / 4, f"{held / 1e6:.1f} MB held for the first row of a {size / 1e6:.0f} MB shard"
    assert sum(1 for _ in rows) == n - 1


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"the shard data-00001-of-00002.arrow that state.json names is missing: is the folder whole\?"),
        ("outside", r"state.json names a shard '../elsewhere.arrow' that is no file name of the folder"),
        ("absolute", r"state.json names a shard '/.*/elsewhere.arrow' that is no file name of the folder"),
        ("indices", r"its rows are a selection kept in an indices file .* ds.to_json"),
        ("not arrow", r"its shard data-00001-of-00002.arrow is not a readable Arrow stream"),
    ],
)
def test_a_save_to_disk_folder_that_cannot_be_read_whole_stops_the_dataset(
    tmp_path: Path, damage: str, message: str
) -> None:
    """Reading a part of the rows would score a smaller dataset without a word: a folder not whole is refused."""
    folder = save_to_disk(tmp_path / "saved", [[_row(1)], [_row(2)]])
    shard, state = folder / "data-00001-of-00002.arrow", json.loads((folder / "state.json").read_text())
    if damage == "missing":
        shard.unlink()
    elif damage == "not arrow":
        shard.write_bytes(b'{"id": "q2"}\n')
    else:
        if damage in ("outside", "absolute"):  # a readable shard there: only its name tells it is not the folder's
            shard.rename(tmp_path / "elsewhere.arrow")
            name = "../elsewhere.arrow" if damage == "outside" else str(tmp_path / "elsewhere.arrow")
            state["_data_files"][1]["filename"] = name
        else:
            state["_indices_data_files"] = [{"filename": "indices.arrow"}]
        (folder / "state.json").write_text(json.dumps(state), encoding="utf-8")
    with pytest.raises(DatasetError, match=message):
        list(iter_rows(folder))


@pytest.mark.integration
def test_ragscore_run_scores_a_save_to_disk_folder_as_given(tmp_path: Path, home: Path) -> None:
    """``ragscore run FOLDER`` as a user types it, embedded (a private redis-server and real workers): the folder is
    detected, its rows scored, a bad row in failed_rows.jsonl at its position."""
    folder = save_to_disk(
        tmp_path / "saved", [[_row(1, id="a")], [_row(2, id="b", **{" answer ": b"\xff"}), _row(3, id="c")]]
    )
    suite = tmp_path / "suite.yaml"
    suite.write_text("metrics: [quality_checks]\n", encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "orchestrator.cli", "run", str(folder), "--suite", str(suite), "--out", str(out), "-q"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=300)
    assert result.returncode == 0, result.stderr
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert sorted(item["id"] for item in items) == ["a", "c"]
    failed = [json.loads(line) for line in (out / "failed_rows.jsonl").read_text().splitlines()]
    assert [(f["line"], f["error"].split(":")[0]) for f in failed] == [(2, "answer")]


def test_a_save_to_disk_folder_rewritten_in_place_is_told_apart_from_the_one_submitted(tmp_path: Path) -> None:
    """A folder had no fingerprint: a report showed answers saved since the run beside its old scores (the preview's
    check of the bytes was skipped), a resume always re-read it whole, and a shard rewritten in place while the run
    read it (same name, same size) changed neither the folder's size nor its time, so nothing noticed. The folder's
    files are digested and their state read now."""
    import time

    from orchestrator.datasets import dataset_fingerprint
    from orchestrator.runner import _file_state

    folder = save_to_disk(tmp_path / "saved", [[_row(1), _row(2)], [_row(3)]])
    fingerprint, state = dataset_fingerprint(folder, "hf-disk", None), _file_state(folder)
    assert fingerprint is not None and dataset_fingerprint(folder, "hf-disk", None) == fingerprint
    assert _file_state(folder) == state
    shard = folder / "data-00001-of-00002.arrow"
    before = shard.stat().st_mtime_ns
    rewritten = save_to_disk(tmp_path / "again", [[_row(1), _row(2)], [_row(3, question="Q9?")]])
    shard.write_bytes((rewritten / shard.name).read_bytes())  # another answer of the same size, in place
    while shard.stat().st_mtime_ns == before:  # a filesystem of coarse times: written again until it moves
        time.sleep(0.01)
        shard.write_bytes((rewritten / shard.name).read_bytes())
    assert shard.stat().st_size == (rewritten / shard.name).stat().st_size
    assert dataset_fingerprint(folder, "hf-disk", None) != fingerprint
    assert _file_state(folder) != state
