"""The submission's spool of planned shards: an error of its unnamed file names where it is and what to do."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

#: A process whose files may not grow past 16 KiB (SIGXFSZ ignored: the write fails with EFBIG instead), as a full
#: disk would refuse them: its spool of 3,000 rows (~100 KiB compressed) does not fit.
_FULL = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path

    from orchestrator.atomic_file import said_os_error
    from orchestrator.runner import _plan_new_shard, shard_digest
    from orchestrator.spool import ShardSpool
    from orchestrator.suite import load_suite
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    resolved = load_suite({"metrics": ["exact_match"]})
    rows = [Row.model_validate(r) for r in make_rows(3000)]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    try:
        with ShardSpool(lambda i, rs: _plan_new_shard("run", i, rs, resolved), shard_digest, 500,
                        Path(sys.argv[1])) as spool:
            for row in rows:
                spool.add(row)
            list(spool)
    except OSError as exc:
        print(said_os_error(exc))
    else:
        print("written")
    """
)


def test_a_spool_that_does_not_fit_names_its_directory_and_tmpdir(tmp_path: Path) -> None:
    """A full TMPDIR said ``No space left on device`` and nothing more (the spool's file has no name): read as the
    disk of --out, or the dataset's."""
    said = subprocess.run([sys.executable, "-c", _FULL, str(tmp_path)], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parents[2]).stdout.strip()  # fmt: skip
    assert said.startswith("File too large: the dataset's planned shards are kept there"), said
    assert "set TMPDIR to a directory with room" in said and said.endswith(f"({tmp_path})"), said


def test_the_spool_gives_back_each_shard_as_planned_in_order() -> None:
    """What is sent is what the scan planned: the same rows in the same shards (a resume checks them by index and
    digest), and the same chord, rebuilt from the spool's JSON (the messages celery would have sent)."""
    import json

    from celery.canvas import Signature, _chord

    from orchestrator.runner import _plan_new_shard, shard_digest
    from orchestrator.spool import ShardSpool
    from orchestrator.suite import load_suite
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    resolved = load_suite({"metrics": ["exact_match", "recall_at_k"]})
    rows = [Row.model_validate(r | {"question": f"{r['question']} é 😀 \udfff"}) for r in make_rows(250)]
    with ShardSpool(lambda i, rs: _plan_new_shard("run", i, rs, resolved), shard_digest, 100) as spool:
        for row in rows:
            spool.add(row)
        spooled = list(spool)
    wanted = [rows[0:100], rows[100:200], rows[200:250]]
    assert [s.keys for s in spooled] == [[r.key for r in shard] for shard in wanted]
    assert [s.digest for s in spooled] == [shard_digest(shard) for shard in wanted]
    for index, (shard, planned) in enumerate(zip(wanted, spooled, strict=True)):
        direct = _plan_new_shard("run", index, shard, resolved)
        assert (planned.units, planned.tasks) == (direct.units, direct.tasks)
        assert isinstance(planned.signature, _chord) and all(isinstance(t, Signature) for t in planned.signature.tasks)
        assert json.dumps(planned.signature, sort_keys=True) == json.dumps(direct.signature, sort_keys=True)


def test_big_rows_are_cut_into_shards_of_fewer_rows_each_where_recorded() -> None:
    """The orchestrator holds a shard's rows and builds its messages at once: 10,000 rows of 7 KB took 870 MB. A shard
    is cut once its rows' messages reach ``shard_bytes``, and the spool records where each starts (a resume cuts the
    dataset by them)."""
    from orchestrator.runner import _plan_new_shard, shard_digest
    from orchestrator.spool import ShardSpool
    from orchestrator.suite import load_suite
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    resolved = load_suite({"metrics": ["exact_match"]})
    rows = [Row.model_validate(r | {"answer": "word " * 400}) for r in make_rows(100)]  # ~2 KB of message each
    size = resolved.message_bytes(rows[0])
    with ShardSpool(lambda i, rs: _plan_new_shard("run", i, rs, resolved), shard_digest, 1000,
                    shard_bytes=10 * size, row_bytes=resolved.message_bytes) as spool:  # fmt: skip
        for row in rows:
            spool.add(row)
        spooled = list(spool)
    assert all(8 <= len(s.keys) <= 11 for s in spooled[:-1]), [len(s.keys) for s in spooled]  # ~10 rows alike
    assert spool.starts == [sum(len(s.keys) for s in spooled[:i]) for i in range(len(spooled))]
    assert [k for s in spooled for k in s.keys] == [r.key for r in rows]


def test_rows_that_grow_late_make_shards_of_fewer_rows_not_shards_past_shard_bytes() -> None:
    """Every shard held the first shard's row count: small rows first, big ones later made shards of 10 times
    ``shard_bytes``. Each shard is cut by its own rows (the big rows' shards hold ~10 of them)."""
    from orchestrator.runner import _plan_new_shard, shard_digest
    from orchestrator.spool import ShardSpool
    from orchestrator.suite import load_suite
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    resolved = load_suite({"metrics": ["exact_match"]})
    made = make_rows(200)
    rows = [Row.model_validate(r) for r in made[:100]] + [
        Row.model_validate(r | {"answer": "word " * 400}) for r in made[100:]]  # fmt: skip
    cap = 10 * resolved.message_bytes(rows[-1])
    with ShardSpool(lambda i, rs: _plan_new_shard("run", i, rs, resolved), shard_digest, 1000,
                    shard_bytes=cap, row_bytes=resolved.message_bytes) as spool:  # fmt: skip
        for row in rows:
            spool.add(row)
        spooled = list(spool)
    by_key = {r.key: r for r in rows}
    sent = [sum(resolved.message_bytes(by_key[k]) for k in s.keys) for s in spooled]
    assert max(sent) < cap + resolved.message_bytes(rows[-1]), (sent, cap)  # cut at the row that reached it
    assert [k for s in spooled for k in s.keys] == [r.key for r in rows]


def _shard_rows_of(metrics: list[str], rows: list[Any], shard_bytes: int) -> int:
    """The rows the first shard holds when ``rows`` are spooled for a suite of ``metrics`` (every row given back in
    order)."""
    from orchestrator.runner import _plan_new_shard, shard_digest
    from orchestrator.spool import ShardSpool
    from orchestrator.suite import load_suite

    resolved = load_suite({"metrics": metrics})
    with ShardSpool(lambda i, rs: _plan_new_shard("run", i, rs, resolved), shard_digest, 1000,
                    shard_bytes=shard_bytes, row_bytes=resolved.message_bytes) as spool:  # fmt: skip
        for row in rows:
            spool.add(row)
        spooled = list(spool)
        assert [k for s in spooled for k in s.keys] == [r.key for r in rows]
    return len(spooled[0].keys)


def test_shards_are_sized_by_the_messages_their_rows_are_sent_as_not_by_the_whole_rows() -> None:
    """A message carries only the fields its metrics read: rows whose big contexts no metric reads are no reason for
    small shards, and a row counts once per queue that scores it, as its fields there (contexts to the embed queue).
    The rows are held whole while their shard is planned: their whole JSON still cuts it, at ``SHARD_HELD_FACTOR``
    times ``shard_bytes`` (the orchestrator's memory held ~2 GB of 10,000 rows of 200 KB that only exact_match read)."""
    from ragscore_workers.planning import SHARD_HELD_FACTOR
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    rows = [Row.model_validate(r | {"contexts": ["word " * 2000]}) for r in make_rows(200)]  # ~10 KB of contexts
    whole = len(rows[0].model_dump_json(exclude_none=True))
    assert _shard_rows_of(["exact_match"], rows, 100 * whole) == 200  # one shard: 2 MB of rows, ~60 KB of messages
    held = _shard_rows_of(["exact_match"], rows, 10 * whole)  # messages of ~10 rows' JSON: 1/30 of it
    assert 10 * SHARD_HELD_FACTOR - 2 <= held <= 10 * SHARD_HELD_FACTOR + 1, held
    assert 8 <= _shard_rows_of(["exact_match", "context_relevance"], rows, 10 * whole) <= 11


def test_a_target_runs_shards_are_sized_by_the_whole_rows_its_target_is_sent() -> None:
    """A target stage's messages carry whole rows (its answered rows are the run's answers.jsonl)."""
    from orchestrator.suite import load_suite
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    row = Row.model_validate(make_rows(1)[0] | {"contexts": ["word " * 2000]})
    scored = load_suite({"metrics": ["exact_match"]}).message_bytes(row)
    asked = load_suite({"metrics": ["exact_match"], "target": {"url": "http://127.0.0.1:9/ask"}}).message_bytes(row)
    assert scored < 1000 < 10_000 < asked, (scored, asked)


def test_small_rows_keep_the_shard_rows_given() -> None:
    """Rows far below ``shard_bytes`` are cut at ``shard_rows`` as before."""
    from orchestrator.runner import _plan_new_shard, shard_digest
    from orchestrator.spool import ShardSpool
    from orchestrator.suite import load_suite
    from ragscore_workers.schemas import Row
    from tests.support import make_rows

    resolved = load_suite({"metrics": ["exact_match"]})
    with ShardSpool(lambda i, rs: _plan_new_shard("run", i, rs, resolved), shard_digest, 40) as spool:
        for row in make_rows(100):
            spool.add(Row.model_validate(row))
        assert [len(s.keys) for s in spool] == [40, 40, 20] and spool.shard_rows == 40
