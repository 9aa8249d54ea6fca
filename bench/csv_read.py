"""bench.csv_read — the CSV reader's check for bytes that are not UTF-8, against the check it replaced.

``python -m bench.csv_read [--rows 100000] [--repeat 3]``: generated QA rows written as CSV, once ASCII and once
with accented text and an emoji in each question (UTF-8 that is not ASCII), read by ``iter_records`` to the end.
Each row's lines are checked for ``surrogateescape``'s stand-ins of bytes that are not UTF-8: the reader's check
(``loaders._not_utf8``: ``str.isascii``, then a compiled regex's search) against the one it replaced, a Python step a
character (``any(...)`` over the text), put in its place for the baseline. Both are timed in this process on the same
files, in turn, ``--repeat`` times; the least process CPU time of each is kept. Ratio = old ÷ new (>1: the new
reads faster).
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.datasets import loaders
from orchestrator.datasets.loaders import iter_records

from ._common import print_table, qa_rows


def _old_not_utf8(text: str) -> bool:
    """The check the reader made before: each character compared in Python."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _write_csv(path: Path, n: int, accented: bool) -> None:
    """``n`` QA rows as CSV, each question a paragraph (and, ``accented``, French with an emoji)."""
    filler = "déjà vu, café crème et façade 😀 " if accented else "lorem ipsum dolor sit amet "
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "question", "answer", "reference", "group"])
        for row in qa_rows(n):
            question = f"{row['question']} {filler * 8}"
            writer.writerow([row["id"], question, row["answer"], row["reference"], row["group"]])


def _read_seconds(path: Path, check: Callable[[str], bool]) -> float:
    """Process CPU seconds to read every record of ``path`` with ``check`` as the reader's UTF-8 check."""
    kept = loaders._not_utf8
    loaders._not_utf8 = check  # read at call time by the reader
    try:
        start = time.process_time()
        for _ in iter_records(path):
            pass
        return time.process_time() - start
    finally:
        loaders._not_utf8 = kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    table: list[list[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, accented in (("ascii", False), ("accented", True)):
            path = Path(tmp) / f"{name}.csv"
            _write_csv(path, args.rows, accented)
            old = new = float("inf")
            for _ in range(args.repeat):
                old = min(old, _read_seconds(path, _old_not_utf8))
                new = min(new, _read_seconds(path, loaders._not_utf8))
            ratio = old / new
            results[name] = {"old_s": round(old, 3), "new_s": round(new, 3), "ratio": round(ratio, 2)}
            mib = path.stat().st_size / (1 << 20)
            table.append([name, f"{args.rows:,}", f"{mib:.1f}", f"{old:.2f}", f"{new:.2f}", f"{ratio:.2f}"])
    headers = ["text", "rows", "MiB", "old CPU s", "new CPU s", "old ÷ new"]
    print_table(headers, table, {"bench": "csv_read", "rows": args.rows, **results})


if __name__ == "__main__":
    main()
