"""A dataset refused while it is read leaves nothing in the store: its unreadable rows were kept in batches of
1,000 under a run id that was never created, until the TTL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.runner import submit
from orchestrator.suite import load_suite
from ragscore_workers.errors import ConfigError, DatasetError
from ragscore_workers.store import RunStore

from ..support import RedisProcess, make_rows, write_jsonl

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


#: ``submit`` in a process whose files may not grow past 1 KiB once its dataset is written (SIGXFSZ ignored: the
#: write fails with EFBIG, as a full disk would with ENOSPC): 300 rows in one shard of 1,000, so its spool is written
#: only once the whole dataset was read.
_SPOOL_FULL = """
import resource, signal, sys
from pathlib import Path

from orchestrator.runner import connect, submit
from orchestrator.suite import load_suite
from tests.support import make_rows, write_jsonl

store, data = connect(sys.argv[1]), write_jsonl(Path(sys.argv[2]) / "d.jsonl", make_rows(300))
suite = load_suite({"metrics": ["exact_match"]})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    submit(data, suite, store, shard_rows=1000)
except OSError as exc:
    print(exc)
"""


def test_a_spool_without_room_refuses_the_run_before_it_exists(
    tmp_path: Path, store: RunStore, redis_server: RedisProcess
) -> None:
    """The spool's last shard was written (and its file completed) once the run was created: a full TMPDIR then
    left a cancelled run of nothing sent, where it refuses the dataset as any check before the send does."""
    runs = set(store.list_runs())
    said = subprocess.run([sys.executable, "-c", _SPOOL_FULL, redis_server.url, str(tmp_path)],
                          env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parents[2]).stdout  # fmt: skip
    assert "File too large: the dataset's planned shards are kept there" in said, said
    assert set(store.list_runs()) == runs
