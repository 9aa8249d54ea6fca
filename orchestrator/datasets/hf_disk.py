"""Hugging Face ``datasets`` folders written by ``Dataset.save_to_disk()``, read with pyarrow (``datasets`` itself is
not needed), a record batch at a time.

The layout is that of ``Dataset.save_to_disk`` in datasets' ``src/datasets/arrow_dataset.py`` (2.x and 3.x;
folders datasets 5.2 wrote read alike):
``state.json`` lists the shards in ``_data_files`` (``[{"filename": "data-00000-of-00002.arrow"}, ...]``), contiguous
parts of the rows in their order, each an Arrow IPC *stream* (``ArrowWriter`` in ``arrow_writer.py`` writes with
``pa.RecordBatchStreamWriter``), beside ``dataset_info.json`` (the features). ``DatasetDict.save_to_disk`` writes
``dataset_dict.json`` (``{"splits": ["train", "test"]}``) and such a folder per split: one split is read by giving its
folder. A row's "line" is its position in the dataset (1-based), its values and column names read as Parquet's, a
record batch of a shard at a time (save_to_disk writes 1000 rows a batch), made Python values BATCH_ROWS at most at
once. Its columns are those load_from_disk gives (``set_format``'s columns, which ``state.json`` keeps), less the
media features' (``Image``: a file's bytes and path; ``dataset_info.json``'s features, else a shard schema's), which no
metric reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragscore_workers.errors import DatasetError

from .parquet import BATCH_ROWS, pyarrow_module, table_rows

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["is_hf_folder", "iter_hf_disk", "media_columns"]

#: The file naming a Dataset folder's shards (``_data_files``), and the one naming a DatasetDict's splits.
STATE_FILE = "state.json"
DICT_FILE = "dataset_dict.json"
#: The file holding the features (a column's type as datasets knows it: ``{"_type": "Image"}``).
INFO_FILE = "dataset_info.json"
#: datasets' features of files (bytes and a path a value), which no metric reads: their columns are not read.
MEDIA_FEATURES = frozenset({"Image", "Audio", "Video", "Pdf", "Nifti"})


def is_hf_folder(path: Path) -> bool:
    """Whether ``path`` is a folder save_to_disk wrote: a Dataset's (``state.json`` naming its shards in
    ``_data_files``) or a DatasetDict's (``dataset_dict.json`` naming its ``splits``); a file of those names holding
    anything else is an eval-points topic file."""
    return isinstance(_json_object(path / STATE_FILE).get("_data_files"), list) or isinstance(
        _json_object(path / DICT_FILE).get("splits"), list
    )


def iter_hf_disk(path: Path) -> Iterator[tuple[int, dict[str, Any] | Any]]:
    """``(row number, record)``, or a :class:`~orchestrator.datasets.loaders.RowError` for a row whose values are
    no JSON; DatasetError for a DatasetDict's folder (naming its splits), a shard missing or unreadable, a
    selection saved as an indices file, or pyarrow missing."""
    shards = _shards(path)
    pa = pyarrow_module(path, "a Hugging Face datasets folder")
    number = 0
    for shard in shards:
        try:
            with pa.OSFile(str(shard), "rb") as source, pa.ipc.open_stream(source) as reader:
                schema = _given_columns(path, reader.schema)
                number = yield from table_rows(path, schema, lambda columns: _selected(reader, columns), number)
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(f"{path}: its shard {shard.name} is not a readable Arrow stream ({exc})") from exc


def media_columns(path: Path) -> dict[str, str]:
    """The columns of a media feature (name: ``Image``) that the rows of the Dataset folder ``path`` leave out, as
    its first shard holds them (said before a run); {} where it has none or is no folder whose rows are read."""
    try:
        shard = _shards(path)[0]
        pa = pyarrow_module(path, "a Hugging Face datasets folder")
    except (DatasetError, IndexError):  # no Dataset folder, no shard, or no pyarrow
        return {}
    try:
        with pa.OSFile(str(shard), "rb") as source, pa.ipc.open_stream(source) as reader:
            return _media_columns(path, reader.schema)[1]
    except (pa.ArrowException, OSError, DatasetError):
        return {}


def _given_columns(path: Path, schema: pa.Schema) -> pa.Schema:
    """``schema`` of the columns ``load_from_disk`` gives a row, less those of a media feature (_media_columns)."""
    names, media = _media_columns(path, schema)
    for i in reversed(range(len(schema.names))):  # Schema.remove keeps the metadata (pandas' row labels)
        if schema.names[i] not in names or schema.names[i] in media:
            schema = schema.remove(i)
    return schema


def _media_columns(path: Path, schema: pa.Schema) -> tuple[list[str], dict[str, str]]:
    """The columns of ``schema`` that ``load_from_disk`` gives a row (those of ``set_format(columns=...)``, as
    ``state.json``'s ``_format_columns`` keeps them, unless ``_output_all_columns``), and those of them of a media
    feature (MEDIA_FEATURES: name -> ``Image``), as ``dataset_info.json``'s features say, else the shard schema's;
    DatasetError for a media column named as a row field or its alias (``answer`` an Image)."""
    from .rows import FIELD_NAMES

    state, features = _json_object(path / STATE_FILE), _json_object(path / INFO_FILE).get("features")
    features = features if isinstance(features, dict) else _schema_features(schema)
    shown = state.get("_format_columns")
    names = (
        [name for name in schema.names if name in shown]
        if isinstance(shown, list) and not state.get("_output_all_columns")
        else schema.names
    )
    media = {name: kind for name in names if (kind := _media(features.get(name)))}
    if read := sorted(name for name in media if name.strip() in FIELD_NAMES):
        raise DatasetError(f"{path}: its column {read[0]!r} is a datasets {media[read[0]]} feature (a file's bytes "
                           f"and path), not text: give {FIELD_NAMES[read[0].strip()]} as text, or remove the column "
                           f"(ds.remove_columns({read[0]!r}))")  # fmt: skip
    return names, media


def _schema_features(schema: pa.Schema) -> dict[str, Any]:
    """The features datasets' ArrowWriter keeps in a shard's schema (``huggingface``: ``{"info": {"features":
    ...}}``), which load_from_disk reads where dataset_info.json has none; {} when it has none either."""
    from .loaders import loads_json

    try:
        kept = loads_json((schema.metadata or {}).get(b"huggingface", b"{}"))
    except ValueError:  # not JSON (JSONDecodeError and UnicodeDecodeError are ValueErrors)
        return {}
    info = kept.get("info") if isinstance(kept, dict) else None
    features = info.get("features") if isinstance(info, dict) else None
    return features if isinstance(features, dict) else {}


def _media(feature: Any) -> str | None:
    """The media feature (MEDIA_FEATURES: ``Image``) a column's feature is or holds at any depth (a list of images),
    else None."""
    if isinstance(feature, dict):
        if feature.get("_type") in MEDIA_FEATURES:
            return str(feature["_type"])
        feature = [value for key, value in feature.items() if key != "_type"]
    if isinstance(feature, list):
        return next((kind for value in feature if (kind := _media(value))), None)
    return None


def _selected(reader: pa.RecordBatchStreamReader, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """The stream's record batches, of ``columns`` only, BATCH_ROWS rows at most each (zero-copy slices): save_to_disk
    writes 1000 rows a batch, another writer may write a shard as one batch, whose rows would become Python values
    all at once."""
    for batch in reader:
        selected = batch.select(columns)
        for start in range(0, selected.num_rows, BATCH_ROWS):
            yield selected.slice(start, BATCH_ROWS)


def _shards(path: Path) -> list[Path]:
    """The Dataset folder's shard files in order; DatasetError for a DatasetDict's folder (one split's folder is the
    dataset: it names them), a shard name that is no file name of the folder or is missing, or an indices file."""
    if not is_hf_folder(path):
        raise DatasetError(f"{path}: not a folder Hugging Face datasets' save_to_disk wrote: it has no {STATE_FILE} "
                           f"naming its shards (_data_files), nor a {DICT_FILE} naming its splits")  # fmt: skip
    if not isinstance((state := _json_object(path / STATE_FILE)).get("_data_files"), list):
        splits = [str(split) for split in _json_object(path / DICT_FILE)["splits"]] or ["SPLIT"]
        raise DatasetError(f"{path}: a Hugging Face DatasetDict folder (save_to_disk) with the splits "
                           f"{', '.join(splits)}: give one split's folder ({path / splits[0]})")  # fmt: skip
    if state.get("_indices_data_files"):  # datasets 1.x kept a select() or shuffle() as indices over the table
        raise DatasetError(f"{path}: its rows are a selection kept in an indices file (as datasets 1.x saved them), "
                           "which is not read: save it again with datasets 2 or later, or export its rows: "
                           "ds.to_json('rows.jsonl')")  # fmt: skip
    shards = []
    for entry in state["_data_files"]:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise DatasetError(f"{path}: {STATE_FILE} names a shard {name!r} that is no file name of the folder")
        if not (shard := path / name).is_file():
            raise DatasetError(f"{path}: the shard {name} that {STATE_FILE} names is missing: is the folder whole?")
        shards.append(shard)
    return shards


def _json_object(file: Path) -> dict[str, Any]:
    """``file``'s JSON object; {} when there is no such file or it holds no JSON object."""
    from .loaders import loads_json

    try:
        data = loads_json(file.read_bytes())
    except (OSError, ValueError):  # no such file, not JSON (JSONDecodeError and UnicodeDecodeError are ValueErrors)
        return {}
    return data if isinstance(data, dict) else {}
