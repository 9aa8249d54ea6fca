"""A dataset refused while it is read leaves nothing in the store: its unreadable rows were kept in batches of
1,000 under a run id that was never created, until the TTL."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runner import submit
from orchestrator.suite import load_suite
from ragscore_workers.errors import ConfigError, DatasetError
from ragscore_workers.store import RunStore

from ..support import make_rows, write_jsonl

pytestmark = pytest.mark.integration


def _with_bad_rows(path: Path, rows: list[dict], bad: int) -> Path:
    write_jsonl(path, rows)
    with path.open("a") as f:
        f.writelines("{not json\n" for _ in range(bad))
    return path


@pytest.mark.parametrize("refusal", ["placeholder", "duplicate"])
def test_a_refused_dataset_leaves_no_unreadable_rows_under_an_unused_run_id(
    tmp_path: Path, store: RunStore, refusal: str
) -> None:
    rows = make_rows(3)
    suite: dict = {"metrics": ["exact_match"]}
    if refusal == "placeholder":
        suite["target"] = {"url": "http://127.0.0.1:9/ask", "request": {"q": "{questoin}"}}
    else:
        rows.append(rows[0])
    data = _with_bad_rows(tmp_path / "d.jsonl", rows, bad=1500)
    with pytest.raises(ConfigError if refusal == "placeholder" else DatasetError):
        submit(data, load_suite(suite), store, run_id="refused-run")
    assert not list(store.r.scan_iter("*refused-run*"))
