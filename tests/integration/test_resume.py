"""Resume schedules only what the store lacks; finished items are untouched; cancel stops a run."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from orchestrator.datasets import READER_VERSION
from orchestrator.reports.console import print_summary
from orchestrator.reports.markdown import render_markdown
from orchestrator.runner import Submitted, cancel, connect, recorded_cut, resume, run, submit, wait
from orchestrator.suite import load_suite
from ragscore_workers.errors import ConfigError, DatasetError
from ragscore_workers.planning import ShardStarts
from ragscore_workers.schemas import MetricResult, RunSummary
from ragscore_workers.store import RunState, RunStore

from ..fakes.fake_rag import questions
from ..support import (
    RedisProcess,
    WorkerProcess,
    fingerprint_before_reader_versions,
    make_rows,
    scores_by_id,
    until,
    write_jsonl,
)

pytestmark = pytest.mark.integration

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}], "chunk_size": {"cpu": 20}}


@contextmanager
def _submitted(
    tmp_path: Path, rows: int, seed: int, shard_rows: int
) -> Iterator[tuple[RunStore, Submitted, WorkerProcess]]:
    """A run of ``rows`` generated rows submitted to a Redis of its own, and a cpu worker not yet started."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(rows, seed=seed))
        store = connect(server.url)
        yield store, submit(data, load_suite(SUITE), store, shard_rows=shard_rows), worker
    finally:
        worker.stop()
        server.stop()


def test_cancel_then_resume_scores_only_the_rest(tmp_path: Path) -> None:
    with _submitted(tmp_path, 3000, seed=5, shard_rows=1000) as (store, sub, worker):
        worker.start()
        # part-way (the worker boots first: slow on a loaded machine, so the wait is long, and must succeed)
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= 2000, 300), "the worker never scored"
        cancel(store, sub.run_id)
        summary = wait(store, sub.run_id, timeout_s=60)  # the remaining tasks are skipped, the run reports
        assert summary.state == RunState.CANCELLED
        done_before = store.progress(sub.run_id)["done"]
        assert 2000 <= done_before < 12000, "the cancel must have stopped the run part-way"
        complete = {k: v for k, v in zip(
            [k for s in range(3) for k in store.shard_keys(sub.run_id, s)],
            store.item_fields(sub.run_id, [k for s in range(3) for k in store.shard_keys(sub.run_id, s)]),
            strict=True,
        ) if len(v) == 5}  # fmt: skip
        assert complete, "some items were finished before the cancel"
        # The items the cancel skipped keep their group and question type (the reports had them as None)
        rows = {r["id"]: r for r in make_rows(3000, seed=5)}
        metas = [raw.meta for raw in store.iter_raw_items(sub.run_id)]
        assert [(m["group"], m["question_type"]) for m in metas] == [
            (rows[m["id"]]["group"], rows[m["id"]]["question_type"]) for m in metas
        ]
        assert all(m.get("question_sha") for m in metas)
        assert sum(g["exact_match"].n + g["exact_match"].unscorable for g in summary.by_group.values()) == 3000

        again = resume(store, sub.run_id)
        assert 0 < again.tasks < sub.tasks
        final = wait(store, sub.run_id, timeout_s=120)
        assert final.state == RunState.FINISHED and final.items == 3000
        assert store.progress(sub.run_id)["done"] == 12000  # every output exactly once
        after = store.item_fields(sub.run_id, list(complete))
        assert after == list(complete.values()), "finished items must be untouched by the resume"

        # A second resume of a finished run has nothing to do and still reports.
        assert resume(store, sub.run_id).tasks == 0
        assert wait(store, sub.run_id, timeout_s=60).state == RunState.FINISHED


def test_embedded_run_resume_dir_finishes_an_interrupted_run(tmp_path: Path, home: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(400, seed=9))
    out = tmp_path / "out"
    resolved = load_suite(SUITE)
    with pytest.raises(TimeoutError):
        run(data, resolved, out, timeout_s=0.01)  # "interrupted" at once: the run is cancelled
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    with pytest.raises(ConfigError, match=f"holds run {run_id}, which has not written its reports"):
        run(data, resolved, out)  # a new run must not take over the unfinished one's run.json
    assert json.loads((out / "run.json").read_text())["run_id"] == run_id
    time.sleep(2.1)  # the interruption (past the 2 s asserted, not at it): not part of the resumed run's timing
    summary = run(None, None, out, resume_id=run_id)
    assert summary.run_id == run_id and summary.state == RunState.FINISHED
    timing = summary.timing
    assert timing["resumed_at"] >= timing["submitted_at"] + 2.0
    assert timing["wall_s"] <= time.time() - timing["resumed_at"], "wall time counts from the resume"
    footer = io.StringIO()
    print_summary(summary, Console(file=footer, width=200))  # it said "400 items, ..., 1.2 s", as if the whole run's
    assert footer.getvalue().rstrip().endswith(f"{timing['wall_s']:.1f} s since the resume")
    assert f"wall {timing['wall_s']:.2f} s since the resume" in render_markdown(summary)
    assert f"<span>{timing['wall_s']:.1f} s since the resume</span>" in (out / "report.html").read_text()
    scores = scores_by_id(out / "items.jsonl")
    assert list(scores) == [f"q{i}" for i in range(400)]
    fresh = tmp_path / "fresh"
    run(data, resolved, fresh)
    assert scores == scores_by_id(fresh / "items.jsonl")
    assert run(data, resolved, out).run_id != run_id  # a finished run's directory is reused freely


def test_a_submission_cut_off_is_cancelled_and_resume_submits_the_rest(tmp_path: Path, cluster: str) -> None:
    """Ctrl-C (or a lost broker) while rows are being submitted: the run is cancelled (workers skip what was
    sent), not left "submitting" for ever, and ``resume`` submits the shards it never reached."""
    store = connect(cluster)
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(50, seed=9))

    def interrupted(queues: list[str]) -> None:
        raise KeyboardInterrupt

    before = set(store.list_runs())
    with pytest.raises(KeyboardInterrupt):
        submit(data, load_suite(SUITE), store, shard_rows=20, on_validated=interrupted)
    (run_id,) = set(store.list_runs()) - before
    assert store.state(run_id) == RunState.CANCELLED
    again = resume(store, run_id)
    assert again.shards == 3 and again.items == 50
    final = wait(store, run_id, timeout_s=120)
    assert final.state == RunState.FINISHED and final.items == 50
    assert store.progress(run_id)["done"] == 50 * 4, "every output exactly once"


def test_a_cut_off_submissions_check_reads_the_last_shard_it_sent_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check of a run whose submission was cut off (Ctrl-C after two of its three shards were sent) skipped every
    shard of the dataset the submission never reached: a row inserted in the last shard sent moved that shard's last
    row there, so the shard was only partly read and its digest never checked, and a row edited in it went unsaid;
    rows missing from it were refused only later, as '(shard 1)'. The check now reads on to the end of what was sent:
    the edit and the rows missing are told (with no row at all too: that resume took the run for one that sent
    nothing), and the rows never sent are not compared (the resume sends them). A row it sent moved past what it sent
    was told removed: it is told moved (it is the run's); a row never sent moved into what it sent is told inserted
    (new to the run). A row it sent given again past what it sent, none removed, was not compared, and the resume sent
    its id twice (so a row never sent given twice): each is refused, its line said."""
    from orchestrator import runner

    monkeypatch.setattr(runner, "NOTE_EVERY_S", 0.0)  # said at each shard sent: the Ctrl-C comes after the second

    def interrupted(text: str) -> None:
        if text.startswith("sent 40 of"):
            raise KeyboardInterrupt

    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url)
        rows = make_rows(50, seed=6)
        data = write_jsonl(tmp_path / "d.jsonl", rows)
        with pytest.raises(KeyboardInterrupt):
            submit(data, load_suite(SUITE), store, shard_rows=20, say=interrupted)
        (run_id,) = store.list_runs()
        assert store.shard_keys(run_id, 1) and not store.shard_keys(run_id, 2)  # shards 0 and 1 sent, whole
        edited = [dict(r) for r in rows]
        edited[25]["answer"] = "a completely different answer"
        write_jsonl(data, [*edited[:38], {**rows[0], "id": "inserted"}, *edited[38:]])
        said = ("(shard 1: other ids or order, 1 row inserted at line 39; the same ids with other content, in lines "
                "21-41 (which of its 20 rows reads otherwise")  # fmt: skip
        with pytest.raises(DatasetError, match=re.escape(said)):
            resume(store, run_id)
        write_jsonl(data, rows[:35])
        with pytest.raises(DatasetError, match=re.escape("(shard 1: other ids or order, ending at line 35: 5 rows "
                                                         "fewer than the run had there)")):  # fmt: skip
            resume(store, run_id)
        write_jsonl(data, [*rows[:5], *rows[6:45], rows[5], *rows[45:]])  # q5, sent, moved where none was sent
        with pytest.raises(DatasetError, match=re.escape("(shard 2: other ids or order, the run's row 'q5' moved from "
                                                         "row 6 of the run to line 45); start a new run")):  # fmt: skip
            resume(store, run_id)
        write_jsonl(data, [*rows[:5], rows[45], *rows[5:45], *rows[46:]])  # q45, never sent, moved where some were
        with pytest.raises(DatasetError, match=re.escape("(shard 0: other ids or order, 1 row inserted at line 6); "
                                                         "start a new run")):  # fmt: skip
            resume(store, run_id)
        # q5, sent, and q44, never sent, each given again where none was sent: the resume would send their ids twice
        again = "past the rows its cut-off submission sent); start a new run"
        write_jsonl(data, [*rows, rows[5]])
        with pytest.raises(DatasetError, match=re.escape(f"(shard 2: other ids or order, row 'q5' given again at line "
                                                         f"51, {again}")):  # fmt: skip
            resume(store, run_id)
        write_jsonl(data, [*rows[:45], rows[44], *rows[45:], rows[3]])
        with pytest.raises(DatasetError, match=re.escape(f"(shard 2: other ids or order, rows 'q44', 'q3' given again "
                                                         f"at lines 46, 52, {again}")):  # fmt: skip
            resume(store, run_id)
        write_jsonl(data, [])  # no row at all: the rows it sent are missing too
        with pytest.raises(DatasetError, match=re.escape("(it has a different number of rows)")):
            resume(store, run_id)
        assert store.generation(run_id) == 0  # refused before anything changed
        write_jsonl(data, [*rows, {**rows[0], "id": "appended"}])  # rows never sent: sent by the resume
        assert resume(store, run_id).items == 51
    finally:
        server.stop()


def test_a_resume_that_fails_leaves_the_run_as_it_was(tmp_path: Path, cluster: str) -> None:
    """A changed dataset refuses the resume; the run keeps its state (not "submitting" for ever)."""
    store = connect(cluster)
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(30, seed=4))
    sub = submit(data, load_suite(SUITE), store)
    assert wait(store, sub.run_id, timeout_s=60).state == RunState.FINISHED
    write_jsonl(data, make_rows(31, seed=4))  # a row more: not the run's dataset any more
    with pytest.raises(DatasetError, match="changed since it was submitted"):
        resume(store, sub.run_id)
    assert store.state(sub.run_id) == RunState.FINISHED


def _expired_keys(store: RunStore) -> Callable[[str], bool]:
    """Subscribes to the store's expired-key events (from now on); the returned call says whether ``key`` has
    expired, waiting for its event (Redis sends it as it removes the key, before it answers the read that found
    it gone): a key deleted, not expired, waits the 30 s out and is not."""
    store.r.config_set("notify-keyspace-events", "Ex")
    pubsub = store.r.pubsub()
    pubsub.subscribe(f"__keyevent@{store.r.connection_pool.connection_kwargs.get('db', 0)}__:expired")
    seen: set[str] = set()

    def expired(key: str) -> bool:
        deadline = time.monotonic() + 30
        while key not in seen and time.monotonic() < deadline:
            message = pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "message":
                data = message["data"]
                seen.add(data.decode() if isinstance(data, bytes) else data)
        return key in seen

    return expired


def _expires_within(store: RunStore, key: str, seconds: int, expired: Callable[[str], bool]) -> bool:
    """Whether ``key`` has a TTL of at most ``seconds``, or has expired (not been deleted) already. In ms: ``TTL``
    rounds, and says 0 for a key with under half a second left."""
    ttl_ms = store.r.pttl(key)
    return 0 <= ttl_ms <= seconds * 1000 or (ttl_ms == -2 and expired(key))


def test_a_run_that_lasts_longer_than_the_ttl_keeps_its_meta_and_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Meta and shard id lists were written once at submit and expired RAGSCORE_RUN_TTL_S later, even while
    items were still being written: the whole run was lost ("No run ... in the store"). Workers now keep
    the run's keys alive while they work on it."""
    from ragscore_workers.settings import Settings

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    monkeypatch.setenv("RAGSCORE_RUN_TTL_S", "3")
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        rows = [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 50}} for i in range(160)]
        data = write_jsonl(tmp_path / "d.jsonl", rows)  # ~8 s of scoring: over twice the TTL
        store = connect(server.url, Settings(run_ttl_s=3))
        worker.start()
        expired = _expired_keys(store)
        sub = submit(data, load_suite({"metrics": ["slow_exact"], "chunk_size": {"cpu": 10}}), store)
        summary = wait(store, sub.run_id, timeout_s=120)
        assert summary.state == RunState.FINISHED and summary.items == 160
        assert summary.metrics["slow_exact"].n == 160
        # The aggregate task settles every key right after it saves the summary, which wait() may see first; a
        # loaded machine may read a settled key only after its 3 s ran out: Redis's expired event says it did.
        item, deadline = store.key(sub.run_id, "item:q0"), time.monotonic() + 60  # returns once settled
        while store.r.ttl(item) > 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _expires_within(store, item, 3, expired)  # the summary settled the items too
        assert _expires_within(store, store.key(sub.run_id, "meta"), 3, expired)  # the TTL is kept, not dropped
    finally:
        worker.stop()
        server.stop()


def test_a_refused_resume_leaves_a_running_run_running_and_edited_rows_are_refused(tmp_path: Path) -> None:
    """A resume pointed at a live run whose dataset changed used to bump the generation first: the run's own
    queued tasks were skipped as superseded and it ended cancelled. The dataset is now checked first, and
    rows edited in place (same ids) are caught by the shards' digests. The refusal names each changed shard."""
    server = RedisProcess(tmp_path / "redis").start()  # no worker: the run stays running with its tasks queued
    try:
        rows = make_rows(300, seed=3)
        data = write_jsonl(tmp_path / "d.jsonl", rows)
        store = connect(server.url)
        sub = submit(data, load_suite(SUITE), store, shard_rows=100)
        queued = sum(store.r.llen(q) for q in ("cpu",))
        edited = [dict(r) for r in rows]
        edited[150]["answer"] = "a completely different answer"
        write_jsonl(data, edited)
        with pytest.raises(
            DatasetError,
            match=r"shard 1: the same ids with other content, in lines 101-200 \(which "
            r"of its 100 rows reads otherwise cannot be told: the run recorded a digest of each shard",
        ):
            resume(store, sub.run_id)
        write_jsonl(data, [*rows[:120], {**rows[120], "id": "renamed"}, rows[122], rows[121], *rows[123:]])
        said = ("shard 1: other ids or order, line 121 holds another row in place of the run's row 'q120', the run's "
                "row 'q122' moved from row 123 of the run to line 122)")  # fmt: skip
        with pytest.raises(DatasetError, match=re.escape(said)):
            resume(store, sub.run_id)
        # A row inserted or removed mid-shard moves the shard's later rows: not counted as 50 rows not the run's.
        write_jsonl(data, [*rows[:150], {**rows[0], "id": "inserted"}, *rows[150:]])
        with pytest.raises(DatasetError, match=r"shard 1: other ids or order, 1 row inserted at line 151\)"):
            resume(store, sub.run_id)
        write_jsonl(data, [*rows[:150], *rows[153:]])
        with pytest.raises(DatasetError, match="shard 1: other ids or order, the run's rows 'q150', 'q151', 'q152' "
                           r"removed before line 151\)"):  # fmt: skip
            resume(store, sub.run_id)
        write_jsonl(data, [*rows, {**rows[0], "id": "extra"}])
        with pytest.raises(DatasetError, match="shard 3: other ids or order, from line 301 on: 1 row more than the run "
                           "had there"):  # fmt: skip
            resume(store, sub.run_id)
        write_jsonl(data, rows[:-1])
        with pytest.raises(DatasetError, match="shard 2: other ids or order, ending at line 299: 1 row fewer than the "
                           "run had there"):  # fmt: skip
            resume(store, sub.run_id)
        # The last shard read edited and the run's rows after it gone: each under its own label (the rows fewer sat
        # under "the same ids with other content").
        write_jsonl(data, edited[:200])
        said = ("(shard 1: the same ids with other content, in lines 101-200 (which of its 100 rows reads otherwise "
                "cannot be told: the run recorded a digest of each shard, not of each row); other ids or order, ending "
                "at line 200: 100 rows fewer than the run had there); start a new run")  # fmt: skip
        with pytest.raises(DatasetError, match=re.escape(said)):
            resume(store, sub.run_id)
        assert store.state(sub.run_id) == RunState.RUNNING and store.generation(sub.run_id) == 0
        assert sum(store.r.llen(q) for q in ("cpu",)) == queued  # nothing re-sent, nothing superseded
        # Several shards changed: each is named (MAX_SHARDS_NAMED, the rest counted) with where (MAX_ROWS_NAMED places
        # in all), not only the first; shard 1, whose rows the insert in shard 0 only moved, is not named.
        rows = make_rows(400, seed=5)
        data = write_jsonl(tmp_path / "many.jsonl", rows)
        sub = submit(data, load_suite(SUITE), store, shard_rows=50)
        edited = [dict(r) for r in rows]
        edited[210]["answer"] = "a completely different answer"  # shard 4: the same ids
        for i in (160, 260, 310, 360):  # shards 3, 5, 6 and 7
            edited[i]["id"] = f"renamed{i}"
        write_jsonl(data, [*edited[:25], {**rows[0], "id": "inserted"}, *edited[25:120], *edited[121:]])  # 0 and 2
        said = (
            "shard 0: other ids or order, 1 row inserted at line 26; shard 2: other ids or order, the run's row 'q120' "
            "removed before line 122; shard 3: other ids or order, line 161 holds another row in place of the run's "
            "row 'q160'; shard 4: the same ids with other content; shard 5: other ids or order and 2 more changed "
            "shards); start a new run"
        )
        with pytest.raises(DatasetError, match=re.escape(said)):
            resume(store, sub.run_id)
    finally:
        server.stop()


def test_a_refusal_finds_rows_inserted_or_removed_at_any_distance_and_checks_moved_shards_content(
    tmp_path: Path,
) -> None:
    """The search for rows inserted or removed looked two shards ahead: 50 rows removed (more than two shards of 20)
    read as every later shard changed. It now finds them at any distance, tells each change (a second, 45 rows
    inserted four shards on, told per shard), and checks the digest of each run shard whose rows it read moved: the
    run's shard 4 (rows q80-q99), read at lines 31-50, reads otherwise (q90's answer edited), not taken as alike. Two
    rows swapped far apart read as 145 rows removed and 144 inserted: each is told in the other's place."""
    with _submitted(tmp_path, 200, seed=7, shard_rows=20) as (store, sub, _):  # no worker: the run stays running
        rows, data = make_rows(200, seed=7), tmp_path / "d.jsonl"
        edited = [dict(r) for r in rows]
        edited[90]["answer"] = "a completely different answer"
        new = [{**rows[0], "id": f"new{i}"} for i in range(45)]
        write_jsonl(data, [*edited[:30], *edited[80:150], *new, *edited[150:]])
        said = (
            "(shard 1: other ids or order, the run's rows 'q30', 'q31', 'q32' and 47 more removed before line 31; "
            "the same ids with other content, in lines 31-50 (which of its 20 rows reads otherwise cannot be told: "
            "the run recorded a digest of each shard, not of each row); shard 5: other ids or order, 20 rows inserted "
            "at lines 101-120; shard 6: other ids or order; shard 7: other ids or order); start a new run"
        )
        with pytest.raises(DatasetError, match=re.escape(said)):
            resume(store, sub.run_id)
        write_jsonl(data, [*rows[:30], *rows[80:150], *new, *rows[150:]])  # moved, its content the run's: not told
        moved = "(shard 1: other ids or order, the run's rows 'q30', 'q31', 'q32' and 47 more removed before line 31; "
        with pytest.raises(DatasetError, match=re.escape(moved + "shard 5:")):
            resume(store, sub.run_id)
        # Two rows far apart swapped: each told moved to the other's line, not the 145 rows between them removed and
        # inserted again (every later shard named).
        write_jsonl(data, [*rows[:5], rows[150], *rows[6:150], rows[5], *rows[151:]])
        swapped = (
            "(shard 0: other ids or order, the run's row 'q150' moved from row 151 of the run to line 6; shard 7: "
            "other ids or order, the run's row 'q5' moved from row 6 of the run to line 151); start a new run"
        )
        with pytest.raises(DatasetError, match=re.escape(swapped)):
            resume(store, sub.run_id)
        assert store.state(sub.run_id) == RunState.RUNNING and store.generation(sub.run_id) == 0


def _each_refused(store: RunStore, run_id: str, data: Path, cases: list[tuple[list[dict[str, Any]], str]]) -> None:
    """Each case's rows written to ``data``, the resume of ``run_id`` is refused saying its text, and changes nothing:
    the run stays running, its generation 0."""
    for written, said in cases:
        write_jsonl(data, written)
        with pytest.raises(DatasetError, match=re.escape(said)):
            resume(store, run_id)
    assert store.state(run_id) == RunState.RUNNING and store.generation(run_id) == 0


def test_a_refusal_tells_rows_moved_as_moved_and_rows_inserted_or_removed_as_such(tmp_path: Path) -> None:
    """Two adjacent rows swapped read as a row inserted and one removed, a row moved to the end as one removed and one
    more than the run had: a row read out of its place that is one of the run's rows read as removed is told moved,
    from its place in the run to its line; a block moved is told as one change, and a real insert or removal keeps its
    own wording (rows past the run's end too: added, or moved there)."""
    with _submitted(tmp_path, 50, seed=2, shard_rows=20) as (store, sub, _):  # no worker: the run stays running
        rows, data = make_rows(50, seed=2), tmp_path / "d.jsonl"
        cases = [  # what the file holds, what the refusal says
            ([*rows[:21], rows[22], rows[21], *rows[23:]], "(shard 1: other ids or order, the run's row 'q22' moved "
             "from row 23 of the run to line 22)"),  # adjacent rows swapped
            ([*rows[:7], *rows[8:], rows[7]], "(shard 2: other ids or order, the run's row 'q7' moved from row 8 of "
             "the run to line 50)"),
            ([*rows[:5], rows[45], *rows[6:45], rows[5], *rows[46:]], "(shard 0: other ids or order, the run's row "
             "'q45' moved from row 46 of the run to line 6; shard 2: other ids or order, the run's row 'q5' moved "
             "from row 6 of the run to line 46)"),  # far apart
            ([*rows[:10], *rows[15:], *rows[10:15]], "(shard 2: other ids or order, the run's rows 'q10', 'q11', 'q12' "
             "and 2 more moved from rows 11-15 of the run to lines 46-50)"),  # a block moved to the end: one change
            ([*rows[:10], rows[49], *rows[10:49]], "(shard 0: other ids or order, the run's row 'q49' moved from "
             "row 50 of the run to line 11)"),  # the run's last row moved back: not one inserted, one fewer at the end
            ([*rows[:10], {**rows[0], "id": "new"}, *rows[10:]], "(shard 0: other ids or order, 1 row inserted at line "
             "11)"),
            ([*rows[:10], *rows[11:]], "(shard 0: other ids or order, the run's row 'q10' removed before line 11)"),
            # a row moved and another removed: each its own wording
            ([*rows[:3], rows[30], *rows[3:30], *rows[32:]], "(shard 0: other ids or order, the run's row 'q30' moved "
             "from row 31 of the run to line 4; shard 1: other ids or order, the run's row 'q31' removed before line "
             "32)"),
            # rows past the run's end: one added is told added, one of the run's rows removed before is told moved
            ([*rows, {**rows[0], "id": "new"}], "(shard 2: other ids or order, from line 51 on: 1 row more than the "
             "run had there)"),
            ([*rows[:7], *rows[8:], {**rows[0], "id": "new"}, rows[7]], "(shard 2: other ids or order, from line 50 "
             "on: 1 row more than the run had there, the run's row 'q7' moved from row 8 of the run to line 51)"),
            # a new row among rows moved: their lines said exactly (line 48 is not one of them), not spanned
            ([*rows[:10], *rows[15:], rows[10], rows[11], {**rows[0], "id": "new"}, *rows[12:15]], "the run's rows "
             "'q10', 'q11', 'q12' and 2 more moved from rows 11-15 of the run to lines 46-47, 49-51)"),
            # each a line apart: the first lines said, the rest counted
            ([*rows[:10], *rows[15:], *(r for row in rows[10:15] for r in (row, {**row, "id": f"new-{row['id']}"}))],
             "moved from rows 11-15 of the run to lines 46, 48, 50 and 2 more lines)"),
            # rows inserted with a row moved between them: their lines said exactly too (line 12 is not one of them)
            ([*rows[:10], {**rows[0], "id": "new"}, rows[40], {**rows[0], "id": "new2"}, *rows[10:40], *rows[41:]],
             "(shard 0: other ids or order, 2 rows inserted at lines 11, 13, the run's row 'q40' moved from row 41 of "
             "the run to line 12)"),
            # rows far apart moved to the end together: their places listed, not spanned, in the order named
            ([*(r for r in rows if r["id"] not in ("q3", "q10", "q30")), rows[30], rows[3], rows[10]], "(shard 2: "
             "other ids or order, the run's rows 'q30', 'q3', 'q10' moved from rows 31, 4, 11 of the run to lines "
             "48-50)"),
        ]  # fmt: skip
        _each_refused(store, sub.run_id, data, cases)


def test_a_row_moved_is_said_by_its_place_in_the_run_not_by_a_line_it_may_not_have_been_on(tmp_path: Path) -> None:
    """The store keeps no row's line as submitted: a row moved was said 'moved from line N' with N reckoned from its
    place, wrong where the file as submitted had a bad row or blank lines before it (JSONL: 'q30' was on line 34, said
    31) or CSV records of several lines (line 62, said 34). Its place in the run is said, which is exact."""
    server = RedisProcess(tmp_path / "redis").start()  # no worker: the runs stay submitted
    try:
        store, rows = connect(server.url), make_rows(50, seed=2)
        moved = [*rows[:3], rows[30], *rows[3:30], *rows[31:]]
        said = "(shard 0: other ids or order, the run's row 'q30' moved from row 31 of the run to line {}); start"
        jsonl = [json.dumps(row) for row in rows]
        jsonl[10:10] = ["{not json"]  # a bad row, line 11
        jsonl[20:20] = ["", ""]  # blank lines, 21 and 22
        data = tmp_path / "d.jsonl"
        data.write_text("\n".join(jsonl) + "\n", encoding="utf-8")
        run_id = submit(data, load_suite(SUITE), store, shard_rows=20).run_id
        assert data.read_text(encoding="utf-8").splitlines().index(json.dumps(rows[30])) + 1 == 34
        write_jsonl(data, moved)
        with pytest.raises(DatasetError, match=re.escape(said.format(4))):
            resume(store, run_id)
        table = tmp_path / "d.csv"  # each record two lines: an answer of two

        def write_csv(written: list[dict[str, Any]]) -> None:
            records = "".join(f'{r["id"]},{r["question"]},"{r["answer"]}\nmore"\n' for r in written)
            table.write_text(f"id,question,answer\n{records}", encoding="utf-8")

        write_csv(rows)
        run_id = submit(table, load_suite(SUITE), store, shard_rows=20).run_id
        assert table.read_text(encoding="utf-8").splitlines().index('q30,question 30?,"' + rows[30]["answer"]) == 61
        write_csv(moved)
        with pytest.raises(DatasetError, match=re.escape(said.format(8))):
            resume(store, run_id)
    finally:
        server.stop()


def test_a_target_runs_refusal_compares_its_rows_moved_by_rows_inserted_or_removed(tmp_path: Path) -> None:
    """A target run holds an item key per target for each row: the rows a resume compares are a key per target
    (several a row), and those that rows inserted or removed moved are compared moved so, their shards not named. A
    row removed or renamed is named by its id, as another run's is, not by its first target's item key ('a::q25')."""
    server = RedisProcess(tmp_path / "redis").start()  # no worker, and no target asked: the run stays submitted
    try:
        rows = questions(40)
        data = write_jsonl(tmp_path / "q.jsonl", rows)
        response = {"contexts": "contexts[*].text", "citations": "citations"}
        targets = [{"system": system, "url": f"http://127.0.0.1:9/{system}", "response": response}
                   for system in ("a", "b")]  # fmt: skip
        store = connect(server.url)
        sub = submit(data, load_suite({"metrics": ["verbatim"], "targets": targets}), store, shard_rows=10)
        assert store.shard_keys(sub.run_id, 0)[:3] == ["a::q0", "b::q0", "a::q1"]
        inserted, renamed = {**rows[0], "id": "inserted"}, {**rows[7], "id": "renamed"}
        later = "; shard 2: other ids or order, the run's row 'q25' removed before line 27; shard 3: other ids or "
        later += "order, ending at line 37: 3 rows fewer than the run had there); start"
        cases = [  # what the file holds, what the refusal says
            ([*rows[:5], inserted, *rows[5:25], *rows[26:37]],  # shards 0, 2 and 3
             "(shard 0: other ids or order, 1 row inserted at line 6" + later),
            # a row inserted and one renamed in shard 0: each told, the rows after them the run's moved by one; the
            # later shards' changes past MAX_ROWS_NAMED
            ([*rows[:5], inserted, *rows[5:7], renamed, *rows[8:25], *rows[26:37]],
             "(shard 0: other ids or order, 1 row inserted at line 6, line 9 holds another row in place of the run's "
             "row 'q7'; shard 2: other ids or order, the run's row 'q25' removed before line 27; shard 3: other "
             "ids or order); start"),
            # a row given twice, shard 1's first: no row of the run's there
            ([*rows[:10], rows[9], *rows[10:]], "(shard 1: other ids or order, 1 row inserted at line 11)"),
        ]  # fmt: skip
        _each_refused(store, sub.run_id, data, cases)
    finally:
        server.stop()


def test_rows_added_once_the_dataset_is_read_are_not_sent(tmp_path: Path) -> None:
    """Rows appended after validation skipped its duplicate check (100 duplicated ids counted twice): the rows sent
    are the ones validated, kept from the one read of the dataset, whatever the file holds by then."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        rows = make_rows(250, seed=4)
        data = write_jsonl(tmp_path / "d.jsonl", rows)
        store = connect(server.url)

        def append_duplicates(queues: list[str]) -> None:  # runs after validation, before the first shard
            with data.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in rows[:100])

        sub = submit(data, load_suite(SUITE), store, shard_rows=100, on_validated=append_duplicates)
        assert (sub.items, sub.shards) == (250, 3)
        assert sum(len(store.shard_keys(sub.run_id, i)) for i in range(3)) == 250
        assert store.progress(sub.run_id)["total"] == 250 * 4  # exact_match, mrr, recall_at_1, recall_at_5
    finally:
        server.stop()


def test_a_dataset_changed_while_it_is_read_is_refused_with_nothing_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows appended while the dataset is read may be half read: the run is refused before it exists."""
    import orchestrator.runner as runner

    monkeypatch.setattr(runner, "NOTE_EVERY_S", 0.0)  # said at each row read: the rows are appended then
    server = RedisProcess(tmp_path / "redis").start()
    try:
        rows = make_rows(250, seed=4)
        data = write_jsonl(tmp_path / "d.jsonl", rows)
        store = connect(server.url)

        def append_while_read(note: str) -> None:
            if ": 10 rows so far" in note:
                with data.open("a", encoding="utf-8") as fh:
                    fh.writelines(json.dumps(r | {"id": f"new-{r['id']}"}) + "\n" for r in rows[:100])

        with pytest.raises(DatasetError, match="changed while it was being read; nothing was submitted"):
            submit(data, load_suite(SUITE), store, shard_rows=100, say=append_while_read)
        assert store.list_runs() == [] and store.r.llen("cpu") == 0
    finally:
        server.stop()


def test_each_output_a_resume_marks_is_done_again_once_whoever_writes_it(store) -> None:  # type: ignore[no-untyped-def]
    """An earlier generation's task (a resume of a resume still running, a redelivered copy) may write an output
    between the resume's look-up and its mark, or after: counted per queue, such a write was lost or counted twice,
    and the run read below 100 % for good (158/160) once every output was written."""
    run_id, meta = "redo-marks", {"id": "x"}
    keys = [f"::q{i}" for i in range(5)]
    store.write_results(run_id, "cpu", [(k, meta, {"exact_match": MetricResult(error="boom")}) for k in keys])
    store.write_results(run_id, "judge", [(keys[4], meta, {"answer_accuracy": MetricResult.stopped("cancelled")})])
    assert store.progress(run_id)["done"] == 6
    lookup = store.redo_lookup(run_id, keys, ["exact_match", "answer_accuracy"])
    assert lookup.stored == {k: {"exact_match"} for k in keys[:4]} | {keys[4]: {"exact_match", "answer_accuracy"}}
    store.write_results(run_id, "cpu", [(keys[0], meta, {"exact_match": MetricResult(score=1.0)})])  # an old task
    marks = [(k, "exact_match", "cpu") for k in keys] + [(keys[4], "answer_accuracy", "judge")]
    assert store.mark_redo(run_id, marks) == 5  # q0 was written again since the look-up: nothing to mark
    assert store.mark_redo(run_id, marks) == 0  # marked once
    progress = store.progress(run_id)
    assert (progress["done"], progress["done:cpu"], progress["done:judge"]) == (1, 1, 0)
    store.write_results(run_id, "cpu", [(keys[1], meta, {"exact_match": MetricResult(score=1.0)})])  # an old task
    assert store.progress(run_id)["done"] == 2
    store.write_results(
        run_id, "cpu", [(k, meta, {"exact_match": MetricResult(score=1.0)}) for k in keys]
    )  # the resume
    store.write_results(run_id, "cpu", [(keys[2], meta, {"exact_match": MetricResult(error="boom")})])  # a stray copy
    assert store.progress(run_id)["done"] == 5  # every cpu output once; the judge's one is still to do
    store.write_results(run_id, "judge", [(keys[4], meta, {"answer_accuracy": MetricResult(score=0.5)})])
    progress = store.progress(run_id)
    assert (progress["done"], progress["done:cpu"], progress["done:judge"]) == (6, 5, 1)
    raw = store.r.hgetall(store.key(run_id, "progress"))
    assert int(raw["redo"]) == int(raw["redo:cpu"]) == int(raw["redo:judge"]) == 0
    assert not store.r.exists(store.key(run_id, "redo"))  # every mark taken
    store.mark_redo(run_id, [(keys[2], "exact_match", "cpu")])  # the stray error, sent again by a later resume ...
    store.reset_redo(run_id)  # ... which is resumed again before it is written: its marks are dropped
    assert store.progress(run_id)["done"] == 6 and not store.r.exists(store.key(run_id, "redo"))


def test_incomplete_names_exactly_what_a_resume_redoes(store) -> None:  # type: ignore[no-untyped-def]
    """Decided in Redis (only the incomplete items come back): a missing output, an error and a stopped output
    are redone; a score and an unscorable one are not; an item never written lacks all; batches join up."""
    from ragscore_workers.schemas import MetricResult
    from ragscore_workers.store import INCOMPLETE_BATCH

    run_id = "incomplete-lua"
    outputs = ["a", "b", "c"]
    kinds = {
        "o": MetricResult(score=1.0),
        "n": MetricResult.unscorable("no answer"),
        "e": MetricResult(error="boom"),
        "s": MetricResult.stopped("budget"),
    }
    keys, expected = [], {}
    for i in range(INCOMPLETE_BATCH * 2 + 7):  # three batches, the last one short
        key = f"::q{i}"
        keys.append(key)
        if i % 11 == 10:
            expected[key] = set(outputs)  # never written
            continue
        results = {}
        for j, name in enumerate(outputs):
            kind = "onesx"[(i + j) % 5]
            if kind != "x":  # x: this output is missing
                results[name] = kinds[kind]
        store.write_results(run_id, "cpu", [(key, {"id": f"q{i}"}, results)])
        redo = {name for name in outputs if name not in results or results[name].error
                or results[name].details.get("stopped")}  # fmt: skip
        if redo:
            expected[key] = redo
    assert store.incomplete(run_id, keys, outputs) == expected
    assert store.incomplete(run_id, [], outputs) == {}
    stored = store.redo_lookup(run_id, keys, outputs).stored  # of those, the ones stored (as errors or stopped)
    assert stored == {k: {o for o in v if store.r.hexists(store.key(run_id, f"item:{k}"), o)}
                      for k, v in expected.items() if any(store.r.hexists(store.key(run_id, f"item:{k}"), o)
                                                          for o in v)}  # fmt: skip
    assert stored and all(stored[k] <= expected[k] for k in stored)


def test_a_resumes_progress_counts_the_failed_and_stopped_outputs_it_sends_again_as_not_done(tmp_path: Path) -> None:
    """A resume of outputs stored as errors or stopped read 100 % (and ETA 0) from its start: they had been
    counted done when first written, and a rewrite counts nothing new."""
    with _submitted(tmp_path, 200, seed=7, shard_rows=100) as (store, sub, worker):
        worker.start()
        assert wait(store, sub.run_id, timeout_s=300).state == RunState.FINISHED
        worker.stop()
        before = store.progress(sub.run_id)
        assert before["done"] == before["total"] == 800  # 200 items x (exact_match + recall_at_1/5 + mrr)
        keys = store.shard_keys(sub.run_id, 1)
        meta = {k: json.loads(store.r.hget(store.key(sub.run_id, f"item:{k}"), "_meta")) for k in keys}
        stopped = MetricResult.stopped("judging stopped: cancelled")
        store.write_results(sub.run_id, "cpu", [(k, meta[k], {"exact_match": MetricResult(error="boom")})
                                                for k in keys[:30]])  # fmt: skip
        recall = ("recall_at_1", "recall_at_5", "mrr")
        store.write_results(sub.run_id, "cpu", [(k, meta[k], dict.fromkeys(recall, stopped)) for k in keys[30:40]])
        assert store.progress(sub.run_id)["done"] == 800  # rewrites count nothing new

        again = resume(store, sub.run_id)  # no worker yet: nothing is written again
        assert again.tasks > 0
        redo = 30 + 10 * 3
        progress = store.progress(sub.run_id)
        assert progress["done"] == progress["done:cpu"] == 800 - redo and progress["total"] == 800
        assert [o["done"] for o in store.overview([sub.run_id])] == [800 - redo]

        worker.start()
        assert wait(store, sub.run_id, timeout_s=300).state == RunState.FINISHED
        after = store.progress(sub.run_id)
        assert after["done"] == after["done:cpu"] == 800 and after.get("errors", 0) == before.get("errors", 0) == 0
        assert after.get("unscorable", 0) == before.get("unscorable", 0)
        raw = store.r.hgetall(store.key(sub.run_id, "progress"))
        assert int(raw["redo"]) == int(raw["redo:cpu"]) == 0  # each output sent again was written again once


def test_resume_of_an_unchanged_file_skips_the_extra_check_and_a_rewritten_one_is_checked(
    tmp_path: Path, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The submit records a fingerprint of the dataset file: a resume of the same bytes does not read and
    validate the whole dataset an extra time; a file rewritten with the same rows (other spacing) is checked
    row by row and resumes, and edited rows are still refused."""
    import orchestrator.runner as runner

    checks: list[str] = []
    real_check = runner._check_unchanged
    monkeypatch.setattr(
        runner, "_check_unchanged", lambda store, run_id, *a: (checks.append(run_id), real_check(store, run_id, *a))
    )
    store = connect(cluster)
    rows = make_rows(500, seed=11)
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    sub = submit(data, load_suite(SUITE), store, shard_rows=100)
    assert store.meta(sub.run_id).get("dataset_fingerprint")
    cancel(store, sub.run_id)
    assert wait(store, sub.run_id, timeout_s=60).state == RunState.CANCELLED

    resume(store, sub.run_id)
    assert checks == [], "the same bytes: no extra pass over the dataset"
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED
    assert store.progress(sub.run_id)["done"] == 500 * 4, "every output exactly once"

    data.write_text("".join(json.dumps(r, indent=None, separators=(",", ":")) + "\n" for r in rows))
    assert resume(store, sub.run_id).tasks == 0  # other bytes, the same rows: checked, nothing to redo
    assert checks == [sub.run_id]
    assert wait(store, sub.run_id, timeout_s=60).state == RunState.FINISHED
    edited = [dict(r) for r in rows]
    edited[250]["answer"] = "edited"
    write_jsonl(data, edited)
    with pytest.raises(DatasetError, match="shard 2: the same ids with other content"):
        resume(store, sub.run_id)


def test_resume_of_a_run_whose_rows_an_older_ragscore_read_checks_them_and_says_so(
    tmp_path: Path, cluster: str
) -> None:
    """The fingerprint digested the package version, 0.1.0 in every release, where the loaders changed how bytes
    read as rows (a CSV's spaced quotes, hf-disk's columns): a run submitted before such a change resumed as the
    same bytes, its rows unchecked, so its items could pair with rows read otherwise. Now the loaders' version is
    digested: the rows are checked, and where they read otherwise the refusal says an older ragscore read them."""
    store = connect(cluster)
    rows = make_rows(300, seed=13)
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    sub = submit(data, load_suite(SUITE), store, shard_rows=100)
    meta = store.meta(sub.run_id)
    assert meta["dataset_fingerprint"] != fingerprint_before_reader_versions(data, meta["format"])
    cancel(store, sub.run_id)
    assert wait(store, sub.run_id, timeout_s=60).state == RunState.CANCELLED
    store.set_meta(sub.run_id, dataset_fingerprint=fingerprint_before_reader_versions(data, meta["format"]))

    store.set_meta(sub.run_id, **{"digest:1": "0" * 32})  # shard 1 as the older loaders read it: other content
    with pytest.raises(DatasetError) as refused:
        resume(store, sub.run_id)
    said = str(refused.value)
    assert (
        "holds the bytes it was submitted with, but an older ragscore (its loaders' version 1, this one's "
        f"{READER_VERSION}) read them and this one reads other rows from them (shard 1: the same ids with other "
        "content, in lines 101-200 (which of its 100 rows reads otherwise cannot be told" in said
    )
    assert "resume it with the ragscore version that submitted it" in said and "restore the file" not in said
    assert store.meta(sub.run_id)["state"] == RunState.CANCELLED  # refused before anything changed

    write_jsonl(data, [*rows[:150], {**rows[150], "answer": "edited"}, *rows[151:]])  # the file itself changed
    with pytest.raises(DatasetError, match="changed since it was submitted .shard 1: the same ids"):
        resume(store, sub.run_id)

    write_jsonl(data, rows)
    store.set_meta(sub.run_id, **{"digest:1": meta["digest:1"]})  # the older loaders read the rows these read
    resume(store, sub.run_id)
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED
    assert store.progress(sub.run_id)["done"] == 300 * 4, "every output exactly once"


def test_resume_that_found_an_older_ragscores_rows_alike_records_this_ones_fingerprint(
    tmp_path: Path, cluster: str
) -> None:
    """A run an older ragscore read (fingerprint of loaders' version 1) was checked row by row at every resume, its
    fingerprint never rewritten after a check that found every shard's digest alike: now the check records this
    loaders' fingerprint, so the next resume trusts the bytes (a shard's digest is not read again). A run that
    recorded no digests (ids and order checked, not content) keeps its old fingerprint."""
    store = connect(cluster)
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(60, seed=14))
    sub = submit(data, load_suite(SUITE), store, shard_rows=20)
    meta = store.meta(sub.run_id)
    current, older = meta["dataset_fingerprint"], fingerprint_before_reader_versions(data, meta["format"])
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED
    store.set_meta(sub.run_id, dataset_fingerprint=older)
    resume(store, sub.run_id)
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED
    assert store.meta(sub.run_id)["dataset_fingerprint"] == current
    store.set_meta(sub.run_id, **{"digest:1": "0" * 32})  # read again, shard 1 would be refused
    resume(store, sub.run_id)  # not read again: the bytes are the ones this ragscore read
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED

    store.set_meta(sub.run_id, dataset_fingerprint=older)
    store.r.hdel(store.key(sub.run_id, "meta"), *(f"digest:{i}" for i in range(3)))  # a run before digests
    resume(store, sub.run_id)
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED
    assert store.meta(sub.run_id)["dataset_fingerprint"] == older


def test_progress_notes_of_submit_and_resume_count_up(
    tmp_path: Path, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes said while a big dataset is read and sent are running totals (they used to restart from 0 at
    each note: "sent 80,000", then "sent 60,000" of the same run), and a resume says how far its look-up is
    instead of staying silent for minutes."""
    import re

    import orchestrator.runner as runner

    monkeypatch.setattr(runner, "NOTE_EVERY_S", 0.0)
    store = connect(cluster)
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(500, seed=12))
    notes: list[str] = []
    sub = submit(data, load_suite(SUITE), store, shard_rows=100, say=notes.append)
    sent = [int(m.group(1).replace(",", "")) for n in notes if (m := re.match(r"sent ([\d,]+) of 500 rows", n))]
    assert sent == [100, 200, 300, 400, 500]
    read = [int(m.group(1).replace(",", "")) for n in notes if (m := re.search(r": ([\d,]+) rows? so far", n))]
    assert read == sorted(read) and read[-1] == 500
    cancel(store, sub.run_id)
    wait(store, sub.run_id, timeout_s=60)
    notes.clear()
    resume(store, sub.run_id, say=notes.append)
    looked = [int(m.group(1).replace(",", "")) for n in notes if (m := re.match(r"([\d,]+) of 500 rows looked up", n))]
    assert looked == [100, 200, 300, 400, 500]
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED


@pytest.mark.parametrize("unreadable", [0, 1])
def test_resume_redoes_only_the_shard_that_lacks_an_output(tmp_path: Path, cluster: str, unreadable: int) -> None:
    """A resume of the same bytes skips validating finished shards (record i is row i); an unreadable line breaks
    that, so such a dataset is read row by row as before. Either way: only the shard that lacks something is
    sent again, every output exactly once, finished items untouched, the bad line still counted."""
    store = connect(cluster)
    rows = make_rows(300, seed=13)
    data = tmp_path / "d.jsonl"
    lines = [json.dumps(r) for r in rows]
    if unreadable:
        lines.insert(120, "{not json")
    data.write_text("\n".join(lines) + "\n")
    sub = submit(data, load_suite(SUITE), store, shard_rows=100)
    assert sub.failed_rows == unreadable
    assert wait(store, sub.run_id, timeout_s=120).state == RunState.FINISHED
    first = store.item_fields(sub.run_id, store.shard_keys(sub.run_id, 0))
    for key in store.shard_keys(sub.run_id, 2)[:10]:  # an output lost in the last shard: only it is redone
        store.r.hdel(store.key(sub.run_id, f"item:{key}"), "exact_match")
    store.r.hincrby(store.key(sub.run_id, "progress"), "done", -10)
    again = resume(store, sub.run_id)
    assert again.tasks == 1 and again.items == 300
    final = wait(store, sub.run_id, timeout_s=120)
    assert final.state == RunState.FINISHED and final.failed_rows == unreadable and final.scored == 300
    assert store.progress(sub.run_id)["done"] == 300 * 4
    assert store.item_fields(sub.run_id, store.shard_keys(sub.run_id, 0)) == first


def test_the_check_of_a_rewritten_dataset_counts_its_rows_in_words(
    tmp_path: Path, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes said "1 rows so far" (one row a shard) and "1 tasks sent": one row is a row, one task a task."""
    import orchestrator.runner as runner

    monkeypatch.setattr(runner, "NOTE_EVERY_S", 0.0)
    store = connect(cluster)
    rows = make_rows(2, seed=13)
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    sub = submit(data, load_suite(SUITE), store, shard_rows=1)
    assert wait(store, sub.run_id, timeout_s=60).state == RunState.FINISHED
    (first,) = store.shard_keys(sub.run_id, 0)  # one output lost in the first row: one task, whatever the timing
    store.r.hdel(store.key(sub.run_id, f"item:{first}"), "exact_match")
    store.r.hincrby(store.key(sub.run_id, "progress"), "done", -1)
    data.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))  # other bytes: checked
    notes: list[str] = []
    resume(store, sub.run_id, say=notes.append)
    checked = [n.split(": ", 1)[1] for n in notes if n.startswith("checking d.jsonl is unchanged")]
    assert checked == ["1 row so far", "2 rows so far"], notes
    assert notes[-2:] == ["1 of 2 rows looked up; 0 tasks sent for what they lack",
                          "2 of 2 rows looked up; 1 task sent for what they lack"], notes  # fmt: skip
    assert wait(store, sub.run_id, timeout_s=60).state == RunState.FINISHED


def _big_rows_resumed(tmp_path: Path, seed: int, shard_bytes: int | None = None) -> tuple[ShardStarts, Submitted]:
    """60 rows of a 400,000-character answer (24 MB of cpu messages: past DEFAULT_SHARD_BYTES) submitted (with
    ``shard_bytes`` where given), cancelled before a worker scored any, then resumed until every item is scored: how
    the run recorded its shards cut the rows, and what its resume sent."""
    from ragscore_workers.planning import DEFAULT_SHARD_BYTES

    rows = [r | {"answer": "x" * 400_000} for r in make_rows(60, seed=seed)]
    assert len(rows) * 400_000 > DEFAULT_SHARD_BYTES
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        store = connect(server.url)
        options = {} if shard_bytes is None else {"shard_bytes": shard_bytes}
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(SUITE), store, **options)
        cut = recorded_cut(store.meta(sub.run_id))
        assert sub.shards == len(cut.starts), (cut, sub.shards)
        cancel(store, sub.run_id)  # nothing scored: the resume sends every shard again, cut as recorded
        assert wait(store, sub.run_id, timeout_s=60).state == RunState.CANCELLED
        worker.start()
        resumed = resume(store, sub.run_id)
        final = wait(store, sub.run_id, timeout_s=180)
        assert final.state == RunState.FINISHED and final.items == 60
        assert store.progress(sub.run_id)["done"] == 60 * 4
        return cut, resumed
    finally:
        worker.stop()
        server.stop()


def test_a_run_of_big_rows_is_sent_in_shards_of_fewer_rows_and_resumes(tmp_path: Path) -> None:
    """Rows past DEFAULT_SHARD_BYTES a shard are cut into shards of fewer rows than shard_rows, which the run records:
    a resume cuts the dataset by it, finds it unchanged and scores the rest."""
    cut, resumed = _big_rows_resumed(tmp_path, seed=3)
    assert cut.size(0) < 60 and resumed.shards == len(cut.starts) > 1 and resumed.tasks > 0, (cut, resumed)


def test_a_run_of_big_rows_stored_by_an_older_ragscore_resumes_in_its_shards_of_10000_rows(tmp_path: Path) -> None:
    """A run an older ragscore stored cut its big rows by DEFAULT_SHARD_ROWS alone (submitted here with a shard_bytes
    no shard reaches, as it did: 10,000 recorded, one shard of the 60 rows). Its resume cuts the dataset by the count
    the run recorded, not by their bytes (which would cut the 60 rows into several shards, and refuse the run as a
    changed dataset): it finds it unchanged and scores the rest."""
    from ragscore_workers.planning import DEFAULT_SHARD_ROWS

    cut, resumed = _big_rows_resumed(tmp_path, seed=4, shard_bytes=2**62)
    assert (cut, resumed.shards, resumed.items) == (ShardStarts(DEFAULT_SHARD_ROWS, (0,)), 1, 60), resumed
    assert resumed.tasks > 0, resumed


def test_a_stalled_run_whose_stored_suite_is_now_refused_says_what_to_do_when_wait_re_submits_it(
    tmp_path: Path,
) -> None:
    """Older code stored a suite this version refuses (a request placeholder ``{contexts.text}``); the run stalled
    (its messages lost) and wait() re-submitted it, which stopped on the suite's problem, said as a resume's: it is
    said as the stall's re-submission's, with what to do (run the dataset again with the suite fixed)."""
    server = RedisProcess(tmp_path / "redis").start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(10, seed=6))
        store = connect(server.url)
        sub = submit(data, load_suite(SUITE), store)  # no worker: its messages wait in the queue, then are lost
        stored = json.loads(store.meta(sub.run_id)["suite"])
        stored["target"] = {"url": "https://rag.example", "request": {"ctx": "{contexts.text}"}}
        store.set_meta(sub.run_id, suite=json.dumps(stored))  # as older code stored it
        store.r.delete("cpu")  # the queue's messages lost
        with pytest.raises(ConfigError) as refused:
            wait(store, sub.run_id, timeout_s=60, stall_s=0.5, consumer_check_s=3600)
    finally:
        server.stop()
    said = str(refused.value)
    assert said.startswith(
        f"Run {sub.run_id} stalled, and re-submitting it reads the suite it was submitted with, "
        "which this version refuses: Invalid suite: target request.ctx: {contexts.text}"
    ), said
    assert "What it scored stays readable (ragscore status, report)" in said, said
    assert said.endswith("run the dataset again with the suite fixed"), said


def _resumed_after_two_cut_deliveries(
    store: RunStore, run_id: str, chunk: list[str], marked: str, worker: WorkerProcess
) -> RunSummary:
    """The run resumed, its cpu worker started and the run waited for, after two deliveries of ``chunk`` cut short (as
    two stops leave them), the second while it scored ``marked`` carefully; returns :func:`wait`'s summary."""
    store.start_delivery(run_id, "cpu", chunk)
    store.start_delivery(run_id, "cpu", chunk)
    store.mark_scoring(run_id, "cpu", marked, True)
    resume(store, run_id)
    worker.start()
    return wait(store, run_id, timeout_s=300)


def test_a_resume_does_not_take_the_chunks_a_stop_cut_short_for_ones_that_killed_their_worker(tmp_path: Path) -> None:
    """A Ctrl-C stops an embedded run's workers mid-chunk: those chunks' deliveries never end. Its resume scored them
    carefully (one item at a time: an embed chunk of 64 texts went at a text a call), and a second Ctrl-C during that
    careful delivery left a mark that made the next resume fail the item "the worker process died while scoring this
    item (delivery 2); not retried again". A user's resume forgets them: every item is scored, none failed."""
    with _submitted(tmp_path, 60, seed=11, shard_rows=60) as (store, sub, worker):
        keys = store.shard_keys(sub.run_id, 0)
        # what two stops leave: a chunk cut short twice, the second time while it scored its first item carefully
        final = _resumed_after_two_cut_deliveries(store, sub.run_id, keys[:20], keys[0], worker)
        assert final.state == RunState.FINISHED and final.items == 60
        died = [f for fields in store.item_fields(sub.run_id, keys) for f in fields.values() if "died" in f]
        assert not died, died
        assert store.progress(sub.run_id)["done"] == 60 * 4  # every output exactly once


def test_a_resume_still_fails_an_item_that_kills_its_worker_every_time_after_bounded_deliveries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's resume forgets the deliveries an earlier stop left (a careful delivery cut short on an item looks as a
    death on it). An item that really kills its process at every delivery is then delivered afresh: it must still be
    failed after bounded deliveries (first, careful, then failed), never looped, and the rest of the run scored."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.crash")
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "home", concurrency=1)
    try:
        rows = make_rows(40, seed=13)
        rows[13]["metadata"] = {"crash": True}
        store = connect(server.url)
        suite = load_suite({"metrics": ["exact_match", "crash_on_flag"], "chunk_size": {"cpu": 20}})
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), suite, store, shard_rows=40)
        keys = store.shard_keys(sub.run_id, 0)
        # what a stop leaves: the poisoned item's chunk delivered twice, the careful delivery cut short on it
        final = _resumed_after_two_cut_deliveries(store, sub.run_id, keys[:20], keys[13], worker)
        assert final.state == RunState.FINISHED and final.items == 40
        fields = dict(zip(keys, store.item_fields(sub.run_id, keys), strict=True))
        assert "worker process died while scoring this item" in fields[keys[13]]["crash_on_flag"]
        scored = [k for k in keys if k != keys[13] and json.loads(fields[k]["crash_on_flag"][1:])["score"] == 1.0]
        assert len(scored) == 39
        assert store.progress(sub.run_id)["done"] == 40 * 2  # every output exactly once
    finally:
        worker.stop()
        server.stop()
