"""Reading datasets: format loaders and row validation."""

from .loaders import FORMATS, READER_VERSION, RowError, check_dataset_exists, detect_format, iter_records
from .rows import (
    DatasetScan,
    Named,
    dataset_files,
    dataset_fingerprint,
    iter_rows,
    other_reader,
    same_bytes_reader,
    scan_dataset,
)

__all__ = [
    "FORMATS",
    "READER_VERSION",
    "DatasetScan",
    "Named",
    "RowError",
    "check_dataset_exists",
    "dataset_files",
    "dataset_fingerprint",
    "detect_format",
    "iter_records",
    "iter_rows",
    "other_reader",
    "same_bytes_reader",
    "scan_dataset",
]
