"""Reading datasets: format loaders and row validation."""

from .loaders import FORMATS, RowError, detect_format, iter_records
from .rows import DatasetScan, Named, dataset_files, dataset_fingerprint, iter_rows, scan_dataset

__all__ = [
    "FORMATS",
    "DatasetScan",
    "Named",
    "RowError",
    "dataset_files",
    "dataset_fingerprint",
    "detect_format",
    "iter_records",
    "iter_rows",
    "scan_dataset",
]
