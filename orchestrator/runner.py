"""Running an evaluation: submit (streaming), wait with progress, write the reports.

* :func:`submit` validates everything first (suite, every row, duplicate ids), then streams the rows
  into shard chords, and returns the run id at once.
* :func:`wait` follows the store's counters until ``aggregate`` has written the summary.
* :func:`run` does both: on a cluster (``broker`` set) or embedded (private Redis + local workers).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, cast

import redis
from pydantic_core import PydanticSerializationError

from ragscore_workers.alive import ALIVE_TTL_S
from ragscore_workers.app import CONTROL_QUEUE
from ragscore_workers.commands import backticked
from ragscore_workers.counts import counted, counted_of, listed, noun
from ragscore_workers.errors import (
    BrokerError,
    ConfigError,
    DatasetError,
    EvictionWarning,
    ReportError,
    RunLostError,
    StoreError,
)
from ragscore_workers.limits import QUEUE_LIMITS
from ragscore_workers.planning import (
    DEFAULT_SHARD_BYTES,
    DEFAULT_SHARD_ROWS,
    TARGET_SHARD_ROWS,
    Shard,
    ShardStarts,
    plan_shard,
    plan_target_shard,
    shards,
    target_keys,
)
from ragscore_workers.providers.cache import ReplyCache
from ragscore_workers.providers.errors import MissingKeyError
from ragscore_workers.providers.factory import judge_identity
from ragscore_workers.providers.run_state import INTERNAL_FIELDS, holds_key, scoped_breaker_field
from ragscore_workers.schemas import Queue, Row, RunSummary
from ragscore_workers.scoring import without_skipped
from ragscore_workers.settings import Settings, get_settings
from ragscore_workers.store import (
    ITEMS_KEYS,
    NO_SUCH_RUN,
    RawItem,
    RedoLookup,
    RunState,
    RunStore,
    errors_of,
    keys_digest,
    stored_fields,
    target_state_part,
)
from ragscore_workers.target.errors import TIME_LIMIT_ERROR
from ragscore_workers.target.stage import scoring_rows
from ragscore_workers.tasks import REDIS_OUTAGE, REDIS_OUTAGE_S, aggregate, aggregate_in, score_shard

from . import queues as queue_checks
from .atomic_file import make_out_dir, said_os_error, write_text_atomic
from .caller import CLI, Caller
from .changed_rows import RowsCompared, RunRows
from .connection import check_queues, connect, connect_lane, eviction_warnings
from .datasets import (
    READER_VERSION,
    Named,
    RowError,
    dataset_files,
    dataset_fingerprint,
    detect_format,
    iter_records,
    iter_rows,
    other_reader,
    same_bytes_reader,
    scan_dataset,
)
from .datasets.rows import validate_record
from .embedded_redis import EmbeddedRedis, run_process_alive
from .encode_rates import record_rate
from .estimate import RunCount, judge_calls_planned
from .gates import gates_of_run
from .out_claim import claim_out_dir
from .progress import PLAIN_INTERVAL_S, ProgressView, QuietProgress, held_of, loading, note_of, outage_of, queued_of
from .queues import (
    HeldMessages,
    Orphan,
    OrphanWatch,
    broker_idle,
    held_by_live_workers,
    queued_ahead,
    queued_message,
    queued_messages,
    renewed_alive,
    settled_orphans,
    unconsumed_queues,
    unserved_message,
    unserved_queues,
)
from .reports import write_outputs
from .reports.files import (
    OUTPUT_NAMES,
    ROWS_FILE,
    ROWS_STAGED,
    missing_reports,
    move_to_previous,
    refuse_a_bad_previous,
    refuse_files_of_others,
    report_digests,
)
from .reports.live import resume_hint
from .reports.previous import PREVIOUS, WRITTEN_AT, lost_run, moved_reports, run_named
from .reports.source import ANSWERS, iter_answers_file, iter_items_file
from .spool import PlannedShard, ShardSpool
from .suite import BUDGET_OPTIONS, QUEUE_ORDER, ResolvedSuite, load_suite, with_judge_limits, with_judge_params
from .terminal import (
    cancel_command,
    follow_commands,
    results_command,
    status_command,
    summary_commands,
)
from .warm import keep, kept_workers, one_warm_run, stop_if_server_lost, stop_kept, worker_fingerprint
from .workers import (
    STOP_S,
    LocalWorkers,
    first_stop_signal,
    raise_if_stop_signalled,
    shutdown_step,
    stop_again,
    stop_forced,
    stop_signals_as_interrupt,
)

__all__ = [
    "Submitted",
    "aggregate_run",
    "cancel",
    "check_local_resources",
    "judge_cache_may_answer",
    "new_run_id",
    "refuse_an_unfinished_run_in",
    "resume",
    "run",
    "started_job",
    "submit",
    "summarize_cancelled",
    "wait",
    "write_results",
]

#: Seconds between two reads of the progress counters.
POLL_S = 0.2
#: Seconds ``ragscore cancel`` waits for a run's tasks in flight before it aggregates what the run scored.
SETTLE_S = 60.0
#: Seconds at least between two asks of the workers which queues they serve during that wait (a 1 s broadcast each,
#: to every worker of the cluster): a queue whose only worker was killed whole counts unserved that much later.
UNSERVED_RECHECK_S = 5.0
#: Automatic re-submissions of a stalled run before wait() gives up.
MAX_STALL_RECOVERIES = 3
#: Consecutive idle observations (1 s apart) before a stalled run counts as abandoned.
IDLE_CHECKS = 3
#: Stall threshold once ``check`` reported a restarted local worker: what it held is known to be lost.
RESTARTED_STALL_S = 10.0
#: Stall threshold of a cancelled run: with its broker idle (a worker killed after the cancel holding the rest, say),
#: its summary is all that is missing.
CANCELLED_STALL_S = 10.0

log = logging.getLogger(__name__)


#: Seconds an embedded run's items stay in its store once its whole reports are in a folder that is kept (its own
#: keys: meta, summary, counters keep RAGSCORE_RUN_TTL_S): :func:`_release_items`.
RELEASED_ITEMS_TTL_S = 3600
#: The file that marks an ``evaluate()`` out dir removed when its process exits (no ``out=`` given): no run's items
#: are released into it (:func:`_release_items`), whichever process writes its reports (``ragscore results --out``).
TEMPORARY_MARK = ".ragscore-temporary"
#: The run's meta field that records, at the release, the sha256 of the reports it wrote once (items.jsonl, ...):
#: a resume ending on its DIR's reports (:func:`_done_in_its_folder`) checks they are still the run's own.
REPORT_DIGESTS = "report_digests"


def new_run_id() -> str:
    """Sortable and unique: ``20261121-233001-3fa9c2``."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class Submitted:
    """What :func:`submit` did."""

    run_id: str
    items: int
    failed_rows: int
    tasks: int
    shards: int


def submit(
    dataset: Path,
    resolved: ResolvedSuite,
    store: RunStore,
    *,
    fmt: str | None = None,
    fmt_options: dict[str, Any] | None = None,
    run_id: str | None = None,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    on_validated: Callable[[list[str]], None] | None = None,
    say: Callable[[str], None] | None = None,
    named: Named | None = None,
    broker: str | None = None,
    caller: Caller = CLI,
) -> Submitted:
    """Validate the dataset, then send it as chords, a shard at a time. Nothing is sent if validation fails.

    Each row is read and validated once: its shard is planned as it is read and kept in a :class:`ShardSpool` (on
    disk, compressed) until the whole dataset passed; a dataset that changes while it is read is refused. A shard holds
    ``shard_rows`` rows, or fewer where its own rows' messages reach ``shard_bytes``, or their whole JSON
    ``SHARD_HELD_FACTOR`` times that (the run records where each shard starts: a resume cuts the dataset alike).

    ``on_validated(queues)`` runs once validation passed, before the first task is sent, with the queues
    the rows need (the embedded mode starts those workers there, so they boot while rows are submitted).
    ``say`` is told when reading begins, then how far reading and sending are (rows, their rate; the send's ETA) every
    NOTE_EVERY_S (minutes for a million rows).
    ``named``: how its errors and notes name the dataset and its rows (its path and lines when None).
    ``broker``: the --broker it is sent with (None: RAGSCORE_BROKER_URL, or the embedded Redis), which the resume
    commands of a submission cut off by Redis name (:func:`_said_cut_off`). ``caller``: who is warned of what is
    probably wrong with the dataset, and how, and whose options the dataset's errors name.
    """
    validated_as = _file_state(dataset) if dataset.exists() else None  # a missing file: the scan says so
    named = (named or Named.of(dataset)).of_file(dataset, fmt, fmt_options, caller)
    run_id = run_id or new_run_id()
    started = time.time()
    bad: list[dict] = []
    ticker = _Ticker(say)
    if resolved.targets:
        shard_rows = min(shard_rows, TARGET_SHARD_ROWS)

    def on_error(err: RowError) -> None:
        bad.append(named.failed_row(err))
        if len(bad) >= 1000:
            store.add_failed_rows(run_id, bad)
            bad.clear()

    fmt_options = {
        k: str(Path(v).resolve()) if isinstance(v, Path) else v for k, v in (fmt_options or {}).items() if v is not None
    }
    needed: set[str] = {"target"} if resolved.targets else set()
    systems: dict[str, None] = {}  # the rows' systems, first seen first (up to SYSTEMS_COUNTED): said once read
    ticker.say(f"reading {Path(named.name).name}")  # said at once, as the plain progress line: then every NOTE_EVERY_S
    recorded_format = fmt or (detect_format(dataset, fmt_options, caller) if validated_as is not None else None)
    fingerprint = dataset_fingerprint(dataset, recorded_format, fmt_options) if validated_as is not None else None

    spool = ShardSpool(lambda index, rows: _plan_new_shard(run_id, index, rows, resolved), shard_digest, shard_rows,
                       shard_bytes=shard_bytes, row_bytes=resolved.message_bytes)  # fmt: skip
    with spool:
        request_fields = resolved.request_fields()
        # the judge calls its run sends, as the dry run counts them: its ETA's floor (None with targets: a re-run's
        # floor would count the calls its cache spares)
        planning = RunCount(resolved, store.r, texts=False) if resolved.judge_calls_countable else None

        def on_row(row: Row) -> None:
            needed.update(resolved.row_queues(row))
            if row.system is not None and len(systems) < SYSTEMS_COUNTED:
                systems[row.system] = None
            request_fields.see(row)
            if planning is not None:
                planning.see(row)
            spool.add(row)  # planned now, sent once every row passed: each row is read and validated once
            ticker.count(lambda n: f"reading {Path(named.name).name}: {counted(n, 'row')} so far{ticker.pace(n)}")

        try:
            scan = scan_dataset(dataset, fmt, on_error, fmt_options, on_row=on_row, asked_as=resolved.asked_as,
                                named=named, caller=caller)  # fmt: skip
            if _file_state(dataset) != validated_as:  # what was read may be neither the old rows nor the new
                raise DatasetError(f"{named.name} changed while it was being read; nothing was submitted: start a new "
                                   "run once the file is complete")  # fmt: skip
            if scan.rows and (unseen := request_fields.error()):
                raise ConfigError(f"{named.name}: {unseen}; nothing was submitted")
            # said before the rows are sent (a warnings filter may make one an error: a refusal too)
            suited = resolved.pre_run_warnings(scan.fields_seen, scan.columns_seen, scan.fields_empty, scan.alone)
            for warning in [*scan.warnings(resolved.filled_fields(), caller, asked=bool(resolved.targets)), *suited]:
                caller.warn(f"{named.name}: {warning}")
            spool.finish()  # its last shard planned and written: a full TMPDIR refuses the run before it exists
            cut = spool.cut  # shards of fewer rows where the rows are big
        except BaseException:  # refused (or interrupted) before the run exists: no unreadable rows kept under its id
            store.drop_failed_rows(run_id)
            raise
        ticker.say(f"{counted(scan.rows, 'row')}{_of_systems(list(systems))} to score ({scan.failed:,} unreadable); "
                   "sending them to the queues")  # fmt: skip
        queues = [q for q in QUEUE_ORDER if q in needed]
        items = scan.rows * max(1, len(resolved.targets))  # every question asked of every target
        planned = None if planning is None else judge_calls_planned(planning.finish(scan.rows))
        store.create_run(
            run_id,
            {
                "state": RunState.SUBMITTING,
                "suite": resolved.suite.model_dump_json(),
                # which judge limits are the defaults: the stored suite sets them all (its wait note says so)
                "judge_defaulted_limits": ",".join(resolved.suite.judge.defaulted_limits),
                "dataset": str(dataset.resolve()),
                "format": recorded_format or detect_format(dataset, fmt_options, caller),
                "format_options": json.dumps(fmt_options),
                "items": items,
                "failed_rows": scan.failed,
                "queues": json.dumps(queues),
                "submitted_at": started,
                "shard_rows": cut.shard_rows,
                "shard_starts": json.dumps(cut.starts, separators=(",", ":")),
                "generation": 0,
                "job": "{}",  # no gate options, until run() notes its own: no job is an older ragscore's run
                **({"dataset_fingerprint": fingerprint} if fingerprint else {}),
                **({"judge_calls_planned": planned} if planned is not None else {}),
            },
        )
        n_tasks = n_shards = 0
        try:
            # cancelled on the raw error, then said
            with _said_cut_off(run_id, broker=broker), _cancelled_on_failure(store, run_id):
                store.add_failed_rows(run_id, bad)
                if on_validated is not None:
                    on_validated(queues)
                for index, shard in enumerate(spool):
                    _send_shard(store, run_id, index, shard)
                    n_tasks += shard.tasks
                    n_shards += 1
                    ticker.count(lambda n: ticker.sent(min(cut.start(n), scan.rows), scan.rows))
        except KeyboardInterrupt:  # said once the run is cancelled, before the resume command its caller says
            ticker.say(_interrupted_sending(min(cut.start(n_shards), scan.rows), scan.rows))
            raise
    store.set_meta(run_id, n_shards=n_shards, state=RunState.RUNNING, submit_s=round(time.time() - started, 3))
    # The shards may all have finished while we were still submitting: then nobody has claimed the finalize.
    if store.claim_finalize(run_id):
        aggregate.delay(run_id, 0)
    return Submitted(run_id=run_id, items=items, failed_rows=scan.failed, tasks=n_tasks, shards=n_shards)


@contextmanager
def _said_cut_off(run_id: str, raw: bool = False, broker: str | None = None) -> Iterator[None]:
    """A send, or a store write, of run ``run_id`` that Redis did not answer (hung, partitioned, gone) raises
    BrokerError saying how to go on (a submission's and a user's resume alike), against its ``broker`` (its
    --broker); ``raw``: the error as it is (a stall recovery's: wait() catches it and sends again once Redis
    answers)."""
    try:
        yield
    except _Outage.ERRORS as exc:
        if raw:
            raise
        raise BrokerError(
            f"Redis did not answer while run {run_id} was being sent ({type(exc).__name__}: {exc}); it stopped "
            f"part-way: once Redis answers, resume it with {resume_hint(run_id, broker)}"
        ) from exc


#: The rows' systems the line after reading names (then ``and N more``), and the most it counts (then ``at least``).
SYSTEMS_NAMED, SYSTEMS_COUNTED = 5, 1000


def _of_systems(systems: list[str]) -> str:
    """`` of systems a, b`` (the rows' ``system`` values, first seen first), or '' where no row has one."""
    if len(systems) >= SYSTEMS_COUNTED:
        return f" of at least {counted(SYSTEMS_COUNTED, 'system')}"
    return f" of {noun(len(systems), 'system')} {listed(systems, SYSTEMS_NAMED)}" if systems else ""


#: Seconds between two notes on reading and sending a dataset: the plain progress line's cadence.
NOTE_EVERY_S = PLAIN_INTERVAL_S


class _Ticker:
    """Counts steps and tells ``say`` where they are, at most every NOTE_EVERY_S (nothing without ``say``)."""

    def __init__(self, say: Callable[[str], None] | None) -> None:
        self._say, self.n = say, 0
        self.began = self.last = time.monotonic()

    def count(self, text: Callable[[int], str]) -> None:
        """One more step; ``text(steps so far)`` is said when a note is due (the count goes on: it is a total)."""
        self.n += 1
        if self._say is not None and time.monotonic() - self.last >= NOTE_EVERY_S:
            self.last = time.monotonic()
            self._say(text(self.n))

    def say(self, text: str) -> None:
        """Say ``text`` now: a new phase, whose counting (and its pace) starts again."""
        self.n = 0
        self.began = self.last = time.monotonic()
        if self._say is not None:
            self._say(text)

    def sent(self, done: int, total: int) -> str:
        """``sent 30,000 of 100,000 rows (6,120 rows/s, ETA 11s)``: the send's note."""
        return f"sent {counted_of(done, total, 'row')}{self.pace(done, total)}"

    def pace(self, done: int, total: int | None = None) -> str:
        """`` (9,120 rows/s)`` since the phase began, with ``, ETA 12s`` where ``total`` rows are known."""
        rate = done / max(time.monotonic() - self.began, 1e-9)
        if total is None:
            return f" ({rate:,.0f} rows/s)"
        eta = f"{(total - done) / rate:.0f}s" if rate > 0 else "?"
        return f" ({rate:,.0f} rows/s, ETA {eta})"


def _interrupted_sending(sent: int, rows: int) -> str:
    """What a stop (Ctrl-C) while a new run's rows were sent does with those sent: the run is cancelled, so its workers
    skip what they did not score, and what they scored is kept (its caller then says how to resume, where it can)."""
    return (f"interrupted while sending the rows ({counted_of(sent, rows, 'row')} sent): the run is cancelled: its "
            "workers skip the rows sent and not scored yet, and what they scored is kept")  # fmt: skip


@contextmanager
def _cancelled_on_failure(
    store: RunStore, run_id: str, ended: str = RunState.CANCELLED, lost: str | None = None
) -> Iterator[None]:
    """A (re)submission that fails part-way (Ctrl-C, a lost broker, a changed dataset) ends its run as
    ``ended`` (cancelled, or the state a resumed run had): never left "submitting" for ever, and workers
    skip what a cancelled run sent; ``resume`` can finish it. One cut off by a Redis that stopped answering ends
    as ``lost`` where given (a stall recovery's, which wait() sends again once Redis answers: nobody cancelled)."""
    try:
        yield
    except BaseException as exc:
        state = lost if lost is not None and isinstance(exc, _Outage.ERRORS) else ended
        try:
            store.set_state(run_id, state)
        except redis.RedisError:
            log.warning("run %s: could not set its state to %s (the broker is gone)", run_id, state)
        raise


def _file_state(path: Path) -> tuple[int, int, int]:
    """(files, size, latest modification time) of the dataset: what tells it changed while it was read. A folder's
    are its files' (a shard rewritten in place changes neither the folder's size nor its time)."""
    stats = [path.stat(), *(file.stat() for file in dataset_files(path) if file != path)]
    return len(stats), sum(stat.st_size for stat in stats), max(stat.st_mtime_ns for stat in stats)


def shard_digest(rows: list[Row]) -> str:
    """A digest of a shard's rows as submitted: a resume refuses a dataset whose rows were edited in place
    (same ids, other answers), which would mix scores of two versions of the data."""
    digest = hashlib.blake2b(digest_size=16)
    for row in rows:
        try:
            text = row.model_dump_json(exclude_none=True)
        except PydanticSerializationError:  # a lone surrogate in its text: JSON's escape spells it
            text = json.dumps(row.to_message(), sort_keys=True)
        digest.update(text.encode())
        digest.update(b"\n")
    return digest.hexdigest()


def _plan_new_shard(run_id: str, index: int, rows: list[Row], resolved: ResolvedSuite, generation: int = 0) -> Shard:
    """A new shard's chord: every question scored (or first asked of each target)."""
    plan = plan_target_shard if resolved.targets else plan_shard
    shard: Shard | None = plan(run_id, index, rows, resolved, generation=generation)
    assert shard is not None  # every valid row needs at least one scoring metric (or target call)
    return shard


def _send_shard(store: RunStore, run_id: str, index: int, planned: PlannedShard) -> None:
    """Record a new shard's item keys and digest, then send its chord."""
    store.set_meta(run_id, **{f"digest:{index}": planned.digest})
    store.add_ids(run_id, index, planned.keys, planned.units)
    planned.signature.apply_async()


def _submit_shard(
    store: RunStore, run_id: str, index: int, rows: list[Row], resolved: ResolvedSuite, generation: int = 0
) -> int:
    """Plan and send a new shard (a resume's that the cut-off submission never reached); returns its tasks."""
    shard = _plan_new_shard(run_id, index, rows, resolved, generation)
    _send_shard(store, run_id, index, PlannedShard.of(shard, shard_digest(rows)))
    return shard.tasks


def stored_suite(store: RunStore, run_id: str, judge_limits: dict[str, int] | None = None) -> ResolvedSuite:
    """The suite run ``run_id`` was submitted with, resolved (ConfigError where the store does not have the run), with
    the resume's ``judge_limits`` (:func:`_resolved`)."""
    return _resolved(store.meta(run_id), judge_limits)


def _resolved(
    meta: dict[str, str], judge_limits: dict[str, int] | None = None, stalled: str | None = None
) -> ResolvedSuite:
    """The suite a run's ``meta`` holds, resolved with ``judge_limits`` (``--rpm`` ...) in place of its judge's own
    before it is validated, as ``run`` loads its suite: older code stored ``pace: even`` with ``rpm: null``, which a
    resume's ``--rpm`` makes valid. One this version refuses (a response path older code took) is said as the run's:
    the resume cannot change it. ``stalled``: the run's id where wait() re-submits it after a stall (no resume the
    user asked for), said first."""
    try:
        return load_suite(json.loads(meta["suite"]), judge_limits=judge_limits)
    except ConfigError as exc:
        if stalled is None:
            said = f"{exc}. This is the suite the run was submitted with, which a resume cannot change"
        else:
            said = (f"Run {stalled} stalled, and re-submitting it reads the suite it was submitted with, which this "
                    f"version refuses: {exc}. What it scored stays readable (ragscore status, report); a resume "
                    "cannot change that suite")  # fmt: skip
        raise ConfigError(
            f"{said} but for its judge's budget and rate limits: run the dataset again with the suite fixed"
        ) from None


def resume(
    store: RunStore,
    run_id: str,
    *,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    on_validated: Callable[[list[str]], None] | None = None,
    recovery: bool = False,
    judge_params: dict[str, Any] | None = None,
    judge_limits: dict[str, int] | None = None,
    say: Callable[[str], None] | None = None,
    broker: str | None = None,
    stored: ResolvedSuite | None = None,
    on_queues: Callable[[list[str]], None] | None = None,
    restore_from: Path | None = None,
) -> Submitted:
    """Re-submit only what the store lacks (missing, failed or stopped outputs) of an existing run.

    Finished items are untouched and nothing scored is paid for twice. The run's dataset is read again
    from the path recorded at submit; a dataset whose rows changed since is refused. A user's resume is
    timed from now (``resumed_at``) and closes the judge's and the targets' circuit breakers, so what they
    stopped is asked again; ``judge_params`` (``max_cost``, ``max_tokens_total``) raise the run's judge budget
    for it and ``judge_limits`` (``rpm``, ``tpm``, ``rpd``, ``tpd``) replace its judge's rate limits, both kept
    with the run (every worker judges what is left with them). ``recovery`` (wait() re-submitting a stalled run)
    keeps the clock and the breakers. ``say`` is told how far the check and the look-up are, every NOTE_EVERY_S
    (minutes for a million rows). ``broker``: the --broker it is sent with, as :func:`submit`'s. ``stored``: the run's
    suite as the caller read it (:func:`stored_suite`), read from the store here where None. ``on_validated(queues)``
    runs before the first task is sent, with the queues it may send work to (:func:`queues_left`, from the progress
    counters); ``on_queues(queues)`` before each shard's scoring tasks are sent, with the queues they go to (what the
    look-up found missing): an embedded run starts a worker for one it has none for, so no task waits unserved.
    ``restore_from``: the items.jsonl an embedded run's items were released to (:func:`_release_items`): where they
    left the store and it can, the resume takes them back from it (:func:`_items_to_restore`; a target run's answers
    from the answers.jsonl beside it: :func:`_answers_by_shard`), once the dataset's check passed; else it is
    refused, as every output would be sent again.
    """
    meta = store.meta(run_id)
    ticker = _Ticker(say)
    resolved = stored or _resolved(meta, judge_limits, stalled=run_id if recovery else None)
    dataset, fmt = Path(meta["dataset"]), meta.get("format") or None
    fmt_options = json.loads(meta.get("format_options") or "{}")
    if not dataset.exists():
        raise DatasetError(f"Run {run_id}: its dataset {dataset} is gone; it cannot be resumed")
    cut = recorded_cut(meta, shard_rows)
    shard_items = cut.times(max(1, len(resolved.targets)))  # a target run's: every row for every target
    restore = _items_to_restore(store, run_id, meta, restore_from, shard_items, ticker)
    answers_from = None  # a target run's answers.jsonl, where its answers left the store with its items
    if restore is not None and resolved.targets:
        answers_from = restore.file.with_name(ANSWERS)
        ticker.say(f"reading the targets' answers back from {answers_from}")
        for _ in _answers_by_shard(answers_from, restore.keys, run_id):  # checked whole before anything is written
            pass
    # A submission cut off part-way (Ctrl-C while rows were sent) never recorded its shard count: the
    # shards it did not reach are submitted now, whole.
    cut_off = "n_shards" not in meta
    total = int(meta.get("items", 0)) // max(1, len(resolved.targets))  # rows
    reader = same_bytes_reader(meta.get("dataset_fingerprint"), dataset, fmt, fmt_options)
    if reader != READER_VERSION:  # other bytes, or these read by other loaders: their rows are checked (then, where
        # the bytes are these, record i is still row i: the look-up below need not validate the shards done).
        # These bytes, every row alike: the next resume takes the fast path (a fingerprint is only ever rewritten where
        # this ragscore checked the rows whole), taken before the check reads them: an edit meanwhile is not vouched for
        vouched = reader is not None and _every_shard_digested(meta)
        ours = dataset_fingerprint(dataset, fmt, fmt_options) if vouched else None
        _check_unchanged(store, run_id, meta, dataset, fmt, fmt_options, reader, cut, resolved, ticker,
                         restore)  # fmt: skip
        if ours is not None:
            store.set_meta(run_id, dataset_fingerprint=ours)
    if judge_params or judge_limits:
        resolved = with_judge_limits(with_judge_params(resolved, **(judge_params or {})), **(judge_limits or {}))
        given = judge_limits or {}
        defaulted = [n for n in meta.get("judge_defaulted_limits", "").split(",") if n and n not in given]
        store.set_meta(run_id, suite=resolved.suite.model_dump_json(), judge_defaulted_limits=",".join(defaulted))
    generation = store.generation(run_id) + 1
    if restore is not None:
        ticker.say(f"writing the run's {counted(sum(map(len, restore.keys)), 'item')} back into the store")
        items = iter_items_file(restore.file)
        if meta.get("state") == RunState.CANCELLED:  # what its cancel skipped is stopped there, absent in the store
            items = without_skipped(items)
        store.restore_items(run_id, _ticked(items, ticker), shard_items.size)
        if answers_from is not None:
            store.restore_answers(run_id, _answers_by_shard(answers_from, restore.keys, run_id))
    elif not recovery:
        store.check_items_kept(run_id)  # again: the dataset's check (minutes for a million rows) ran into their hour
    if not recovery:
        store.settle(run_id, store.ttl_s)  # reopened: kept while it runs again, whatever RAGSCORE_RUN_TTL_S says
    clock = {} if recovery else {"resumed_at": time.time()}
    store.set_meta(run_id, state=RunState.SUBMITTING, generation=generation, **clock)
    before = meta.get("state", "")
    ended = before if before in RunState.DONE else RunState.CANCELLED
    # Cut off part-way (Ctrl-C, a lost broker), after some of generation ``generation`` may have been sent: the
    # run is cancelled (or keeps the state it had ended in) and keeps that generation, so a later resume
    # supersedes what was sent. A recovery cut off by a lost Redis leaves the run running: wait() sends it again
    # (a newer generation) once Redis answers. A changed dataset was refused above, before anything changed.
    lost = (before if before in RunState.DONE else RunState.RUNNING) if recovery else None
    # Cut off by a Redis that does not answer: said as a submission's is (resume it once Redis answers), but for a
    # stall recovery, whose raw error wait() catches.
    with _said_cut_off(run_id, raw=recovery, broker=broker), _cancelled_on_failure(store, run_id, ended, lost):
        if on_validated is not None:
            on_validated(queues_left(store, run_id, resolved, json.loads(meta.get("queues", "[]"))))
        all_outputs = [o for outs in resolved.scoring_outputs().values() for o in outs]
        if reader is not None and not resolved.targets and not cut_off and not int(meta.get("failed_rows", 0) or 0):
            stream = _shards_to_redo(store, run_id, dataset, fmt, fmt_options, cut, all_outputs)
        else:
            valid = (row for _, row in iter_rows(dataset, fmt, fmt_options) if isinstance(row, Row))
            stream = ((rows, None, None) for rows in shards(valid, cut))
        n_tasks = n_shards = items = 0
        store.reset_redo(run_id)
        if not recovery:
            reset_breakers(store, run_id, resolved)
            store.forget_every_delivery(run_id)
        ticker.say(f"looking up what the store lacks, shard by shard ({total:,} rows)")
        for index, (rows, complete, looked_up) in enumerate(stream):

            def looking_up(n: int, sent: int = n_tasks) -> str:
                return (f"{counted_of(min(cut.start(n), total), total, 'row')} looked up; "
                        f"{counted(sent, 'task')} sent for what they lack")  # fmt: skip

            ticker.count(looking_up)
            if complete is not None:  # every output of the shard is stored: its rows were not even validated
                store.mark_shard_done(run_id, index, generation)
                n_shards += 1
                items += complete
                continue
            keys = target_keys(rows, resolved.targets) if resolved.targets else [r.key for r in rows]
            recorded_keys = store.shard_keys(run_id, index)
            if cut_off and not recorded_keys:
                n_tasks += _submit_shard(store, run_id, index, rows, resolved, generation)
                n_shards += 1
                items += len(keys)
                continue
            if keys != recorded_keys:
                raise DatasetError(
                    f"Run {run_id}: {dataset} changed since it was submitted (shard {index}); start a new run"
                )
            n_shards += 1
            items += len(keys)
            lookup = looked_up if looked_up is not None else store.redo_lookup(run_id, keys, all_outputs)
            if resolved.targets:
                n_tasks += _resume_target_shard(store, run_id, index, rows, keys, resolved, generation, lookup)
                continue
            todo = resolved.metrics_todo(lookup.todo)
            shard = plan_shard(run_id, index, rows, resolved, todo=todo, generation=generation)
            if shard is None:
                store.mark_shard_done(run_id, index, generation)
            else:
                store.mark_redo(run_id, _stored_redo(rows, lookup, resolved))  # before a worker writes them
                if on_queues is not None:
                    on_queues(shard.queues)
                shard.signature.apply_async()
                n_tasks += shard.tasks
        if cut_off:
            store.set_meta(run_id, n_shards=n_shards)
        elif n_shards != store.n_shards(run_id):
            raise DatasetError(f"Run {run_id}: {dataset} has a different number of rows than when it was submitted")
    store.set_meta(run_id, state=RunState.RUNNING)
    if store.claim_finalize(run_id):
        aggregate.delay(run_id, generation)
    return Submitted(
        run_id=run_id, items=items, failed_rows=int(meta.get("failed_rows", 0)), tasks=n_tasks, shards=n_shards
    )


def _ticked(items: Iterator[RawItem], ticker: _Ticker) -> Iterator[RawItem]:
    """``items``, each counted on ``ticker`` (a restore's note: how many were written back)."""
    for raw in items:
        ticker.count(lambda n: f"{counted(n, 'item')} written back into the store")
        yield raw


def _shards_to_redo(
    store: RunStore, run_id: str, dataset: Path, fmt: str | None, fmt_options: dict[str, Any], cut: ShardStarts,
    outputs: list[str],
) -> Iterator[tuple[list[Row], None, RedoLookup] | tuple[list[Row], int, None]]:  # fmt: skip
    """A resume of the very bytes that were submitted, which had no unreadable row: record i is row i, so shard s
    is records [cut.start(s), cut.start(s + 1)). Yields ``(rows, None, what each item lacks)`` for a shard
    that lacks something and ``([], its number of items, None)`` for one whose every output is stored: those
    records are parsed, never validated (most of a half-done run's rows). A record that does not validate now
    means the rows are not the ones submitted after all: DatasetError, as a changed dataset."""
    max_chars = get_settings().max_field_chars
    records = iter_records(dataset, fmt, fmt_options)
    for index in itertools.count():
        chunk = list(itertools.islice(records, cut.size(index)))
        if not chunk:
            return
        stored = store.shard_keys(run_id, index)
        lookup = store.redo_lookup(run_id, stored, outputs)
        if stored and len(stored) == len(chunk) and not lookup.todo:
            yield [], len(stored), None
            continue
        rows = [record if isinstance(record, RowError) else validate_record(line, record, max_chars)
                for line, record in chunk]  # fmt: skip
        bad = next((r for r in rows if isinstance(r, RowError)), None)
        if bad is not None:
            at = Named.of(dataset).of_file(dataset, fmt, fmt_options, CLI).at(bad)
            raise DatasetError(f"Run {run_id}: {dataset} changed since it was submitted ({at}: {bad.error}); start "
                               "a new run")  # fmt: skip
        yield [r for r in rows if isinstance(r, Row)], None, lookup


def _stored_redo(rows: list[Row], lookup: RedoLookup, resolved: ResolvedSuite) -> list[tuple[str, str, str]]:
    """``(item key, output, queue)`` a resume sends again that are stored as errors or stopped (each counted done
    once already: marked, a worker's rewrite takes the mark, so progress does not read 100 % before it is)."""
    if not lookup.stored:
        return []
    outputs = resolved.scoring_outputs()
    return [
        (row.key, output, queue)
        for row in rows if (stored := lookup.stored.get(row.key))
        for queue, names in resolved.row_queues(row).items()
        for name in names for output in outputs[name] if output in stored
    ]  # fmt: skip


def _check_unchanged(
    store: RunStore, run_id: str, meta: dict[str, str], dataset: Path, fmt: str | None, fmt_options: dict[str, Any],
    reader: int | None, cut: ShardStarts, resolved: ResolvedSuite, ticker: _Ticker | None = None,
    restore: _Restore | None = None,
) -> None:  # fmt: skip
    """DatasetError when the dataset's rows are not the ones submitted (ids, their order and count, or, for
    runs that recorded digests, their content), checked before the resume changes anything: a refused resume
    leaves a running run running. ``reader``: the loaders' version that read these very bytes at submit, where not
    this one's (:func:`same_bytes_reader`); then it says so: the file was not changed, this ragscore reads it
    otherwise. ``restore``: the run's item keys per shard where its id lists left the store (:func:`_items_to_restore`).
    """

    def item_keys(index: int) -> list[str]:
        if restore is None:
            return store.shard_keys(run_id, index)
        return restore.keys[index] if index < len(restore.keys) else []

    unlike = _unlike_submitted(meta, dataset, iter_rows(dataset, fmt, fmt_options), cut, resolved, ticker,
                               item_keys)  # fmt: skip
    if unlike is None:
        return
    how, edited = unlike
    if reader is None:
        advice = " (e.g. edited answers); start a new run, or restore the file" if edited else "; start a new run"
        raise DatasetError(f"Run {run_id}: {dataset} changed since it was submitted ({how}){advice}")
    raise DatasetError(
        f"Run {run_id}: {dataset} holds the bytes it was submitted with, but {other_reader(reader)} read them and "
        f"this one reads other rows from them ({how}): the run's items would not pair with its rows. Start a new "
        "run of it, or resume it with the ragscore version that submitted it"
    )


def recorded_cut(meta: dict[str, str], shard_rows: int = DEFAULT_SHARD_ROWS) -> ShardStarts:
    """How run ``meta``'s shards cut its rows: where each starts, as recorded; a run stored without them (an older
    ragscore's) cut every shard at its ``shard_rows`` (``shard_rows`` where it recorded none)."""
    starts = json.loads(meta.get("shard_starts") or "[]")
    return ShardStarts(int(meta.get("shard_rows", shard_rows)), tuple(int(start) for start in starts))


def _every_shard_digested(meta: dict[str, str]) -> bool:
    """Whether the run recorded the digest of each of its shards (its rows' content, not only their ids): a check
    that found them alike vouches for every row."""
    shard_count = meta.get("n_shards")
    return shard_count is not None and all(f"digest:{index}" in meta for index in range(int(shard_count)))


def _unlike_submitted(
    meta: dict[str, str], dataset: Path, read: Iterator[tuple[int, Row | RowError]], cut: ShardStarts,
    resolved: ResolvedSuite, ticker: _Ticker | None, item_keys: Callable[[int], list[str]],
) -> tuple[str, bool] | None:  # fmt: skip
    """How the rows ``read`` differ from the run's submitted ones (``item_keys(shard)``: its keys): each changed
    shard and where (:class:`~orchestrator.changed_rows.RowsCompared`), and whether it is only their content (the same
    ids); None where they are the same."""
    n_shards = int(meta["n_shards"]) if "n_shards" in meta else None
    compare: RowsCompared | None = None

    def edited(index: int, rows: list[Row]) -> bool:
        return (recorded := meta.get(f"digest:{index}")) is not None and recorded != shard_digest(rows)

    valid = ((line, row) for line, row in read if isinstance(row, Row))
    for index, read_rows in enumerate(shards(valid, cut)):
        if ticker is not None:
            ticker.count(lambda n: f"checking {dataset.name} is unchanged: {counted(cut.start(n), 'row')} so far")
        lines, rows = [line for line, _ in read_rows], [row for _, row in read_rows]
        keys = target_keys(rows, resolved.targets) if resolved.targets else [r.key for r in rows]
        per_row = len(keys) // len(rows)
        if compare is None:
            compare = RowsCompared(RunRows(item_keys, cut, n_shards, per_row), edited)
        compare.read(index, lines, rows, [tuple(keys[i : i + per_row]) for i in range(0, len(keys), per_row)])
    if compare is None:  # no row: the run's are missing where it has any (a cut-off submission's: those it sent)
        return ("it has a different number of rows", False) if n_shards or item_keys(0) else None
    changes = compare.end()
    return (changes.said(), changes.content_only) if changes.shards else None


def reset_breakers(store: RunStore, run_id: str, resolved: ResolvedSuite) -> None:
    """A resume asks again: close the judge's and each target's circuit breaker and clear the budget note and
    holds (a worker killed mid-call leaves its hold); the counters are kept."""
    for part in ["judge", *(target_state_part(t.name) for t in resolved.targets)]:
        key = store.key(run_id, part)
        # each judge limiter's breaker
        scoped = [name for name in cast("list[str]", store.r.hkeys(key)) if scoped_breaker_field(name)]
        store.r.hdel(key, "breaker", "budget", *INTERNAL_FIELDS, *scoped)
        store.r.delete(holds_key(key))


def _resume_target_shard(
    store: RunStore, run_id: str, index: int, rows: list[Row], keys: list[str], resolved: ResolvedSuite,
    generation: int, lookup: RedoLookup,
) -> int:  # fmt: skip
    """Ask again what has no answer (or a failed one); the shard's score_shard then scores what is missing. The
    failed answers and the outputs ``lookup`` found stored as errors or stopped are marked first
    (:func:`_stored_redo`)."""
    answers = store.answers(run_id, index, keys)
    missing = {k for k in keys if "error" in answers.get(k, {"error": ""})}
    store.mark_answer_redo(run_id, index, [k for k in keys if k in missing and k in answers])
    answered, failed = scoring_rows(answers, list(lookup.stored))  # the rows score_shard wrote them of
    store.mark_redo(run_id, _stored_redo([*answered, *(row for row, _ in failed)], lookup, resolved))
    shard = plan_target_shard(run_id, index, rows, resolved, missing=missing, generation=generation)
    if shard is None:
        score_shard.delay(run_id, index, generation)
        return 1
    shard.signature.apply_async()
    return shard.tasks


def _warn_unserved(store: RunStore, run_id: str, warned: set[str], broker: str | None = None) -> None:
    """Log once per queue that the run's messages wait where no worker listens (else the run waits forever), with
    the command that starts a worker of ``broker`` (the --broker given)."""
    for queue, waiting in unserved_queues(store, run_id, warned).items():
        warned.add(queue)
        log.warning("run %s: %s", run_id, unserved_message(queue, waiting, broker=broker))


def _held_note(found: HeldMessages, resending_after: float) -> str:
    """What of the run workers that are gone hold, and when it is sent again (the log's ``resending_after``); ""
    for none. ``found``: a check of the watch of the run's stall decision (:func:`broker_idle`, which reads it in the
    same poll): an orphan two consecutive checks agree on, as that re-sending takes, not one a live worker late to
    renew its key once has."""
    orphans = found.orphans
    if not orphans:
        return ""
    held = counted(len(orphans), "message")
    return f"{held} held by a worker that is gone, sent again at {resending_after:.0f} s without progress"


def wait(
    store: RunStore,
    run_id: str,
    progress: ProgressView | None = None,
    check: Callable[[], object] | None = None,
    timeout_s: float | None = None,
    stall_s: float | None = None,
    consumer_check_s: float | None = None,
    revive: Callable[[], object] | None = None,
    out_dir: Path | None = None,
    broker: str | None = None,
    stop_on_error: Callable[[], None] | None = None,
    on_queues: Callable[[list[str]], None] | None = None,
) -> RunSummary:
    """Follow progress until the summary is written; ``check`` may raise (e.g. workers keep dying), and returns
    something truthy when it restarted a dead local worker. ``revive`` (the embedded mode: restart its own
    redis-server from its append-only file) is tried each second Redis does not answer: at any read of a poll (the
    progress, the summary, the queues, a re-submission), that is an outage wait() says and retries for up to
    ``REDIS_OUTAGE_S`` (:class:`_Outage`), not the end of the run.

    A run can stall when the broker loses a message (a worker killed at the wrong instant): no progress
    for ``stall_s`` seconds (``RAGSCORE_STALL_S``) while no message of the run is queued or held means
    nothing will ever finish it, so the missing work is re-submitted (:func:`resume`), a bounded number
    of times. The run never hangs at 99%. A re-submission that an outage cuts off part-way is sent again whole (a
    newer generation: workers skip what the half-sent one queued) once Redis answers; it completes the same
    recovery, so it is not counted again (``MAX_STALL_RECOVERIES`` bounds how often work is lost, and
    ``REDIS_OUTAGE_S`` each outage). After a restart that ``check`` reports, the threshold is
    ``RESTARTED_STALL_S``: the dead worker's messages will not come back before the visibility timeout; for a
    cancelled run it is ``CANCELLED_STALL_S`` (its summary is aggregated again, never its work re-submitted). No
    progress for ``consumer_check_s`` seconds (None: ``queues.CONSUMER_CHECK_S``, read at each call) while messages wait
    logs, once per queue, each queue of the run that no worker consumes (a cluster without, say, a
    ``target`` worker), with the command that starts one. Until a worker takes a task of the run's current attempt,
    a view with ``queued`` is told every ``queues.QUEUED_CHECK_S`` how many of other runs' messages wait ahead of it
    (:func:`queued_ahead`; the queues are not read for a view without one). ``out_dir`` and ``broker`` (its
    --broker): named by the commands an outage it gives up on says (``broker`` by the command that starts a worker
    of a queue nobody serves too). ``stop_on_error`` (an embedded run's: it stops the run's workers): a wait ended by
    an error or a Ctrl-C marks the run cancelled and calls it before its last progress line, which then counts what
    the cancel stopped, as ``ragscore status`` does, and what the tasks in flight wrote as their workers stopped (a
    judge call under way ends and its output is written: a line read before counted it stopped, and a resume began
    past it). ``on_queues``: handed to a re-submission's :func:`resume`.
    """
    progress = progress or QuietProgress()
    stall_s = get_settings().stall_s if stall_s is None else stall_s
    consumer_check_s = queue_checks.CONSUMER_CHECK_S if consumer_check_s is None else consumer_check_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last_done, last_change, recoveries, idle_checks = -1, time.monotonic(), 0, 0
    last_consumer_check, warned = -math.inf, set[str]()  # never: the first check is due once the run stalls
    restarted = False  # a local worker died and was restarted since the last recovery
    orphans_said: set[int] = set()  # counts of messages held by gone workers, already logged
    # its idle checks and held note: an orphan is one two consecutive checks call one
    orphan_watch = OrphanWatch(store, run_id)
    outage = _Outage(run_id, revive, out_dir, broker)
    aggregating_said = False
    recovering = False  # a stall recovery under way, or one an outage cut off: sent again once Redis answers
    queued, queued_checked = queued_of(progress), -math.inf  # other runs' messages ahead, and when last read
    held, held_said = held_of(progress), False  # what workers that are gone hold: said after "no progress"
    progress_outage = outage_of(progress)
    shows_queued = callable(getattr(progress, "queued", None))  # else nobody is told: no reading the queues for it
    progress.start(run_id)  # its stop() in the finally below (a notebook's sys.stderr given back)
    try:
        while True:
            raise_if_stop_signalled()  # a SIGTERM or Ctrl-C whose KeyboardInterrupt Python dropped
            try:  # every read of the poll: Redis may stop answering at any of them
                state = store.state(run_id)
                counters = store.progress(run_id)
                if not state:  # its meta is gone: a Redis restarted without persistence, or flushed
                    raise _run_lost(run_id)
                if "work_ms" in counters or state in RunState.DONE:  # a worker took a task of this attempt
                    queued_checked = -math.inf
                    queued("")
                elif shows_queued and time.monotonic() - queued_checked >= queue_checks.QUEUED_CHECK_S:
                    queued_checked = time.monotonic()
                    queued(queued_message(queued_ahead(store, run_id)))
                if recovering:  # cut off part-way, the run left submitting (or running) with half its work sent
                    if state not in RunState.DONE:  # unless it was cancelled meanwhile
                        log.warning("run %s: Redis answers: re-submitting what the stall recovery it cut off left",
                                    run_id)  # fmt: skip
                        # a new generation: the half sent is skipped
                        resume(store, run_id, recovery=True, on_queues=on_queues)
                    recovering = False
                    last_change, idle_checks = time.monotonic(), 0
                if lost_s := outage.untold_s():  # not the run's pace, nor a stall
                    progress_outage(lost_s)
                progress.update(counters)
                if state == RunState.AGGREGATING and not aggregating_said:  # minutes for a million items
                    aggregating_said = True
                    note_of(progress)("every item is scored: aggregating the summary")
                if state in RunState.DONE:
                    current = store.summary_is_current(run_id)  # not the summary of before a resume
                    summary = store.summary(run_id) if current else None
                    if summary is not None and summary.state == state:
                        outage.over()
                        return summary
                    # one field, polled while it drains
                    error = cast("str | None", store.r.hget(store.key(run_id, "meta"), "error"))
                    if state == RunState.FAILED or error:  # a cancelled run whose summary failed stays cancelled
                        raise StoreError(f"Run {run_id} ({state}) failed: {error or 'no summary was written'}")
                    # Cancelled: the skipped tasks drain, then aggregate writes the partial summary.
                # a worker loading its model (up to LOAD_NOTED_S) is at work, not stalled
                if counters.get("done", 0) != last_done or state == RunState.SUBMITTING or loading(counters):
                    last_done, last_change, idle_checks = counters.get("done", 0), time.monotonic(), 0
                    if held_said:
                        held("")
                        held_said = False
                else:
                    now = time.monotonic()
                    limit = min(stall_s, RESTARTED_STALL_S) if restarted else stall_s
                    if state == RunState.CANCELLED:  # nothing but skipping was left: idle, only its summary is missing
                        limit = min(limit, CANCELLED_STALL_S)
                    checked = None  # the held messages this poll confirmed: its stall decision reads them too
                    if now - last_change > consumer_check_s and now - last_consumer_check > consumer_check_s:
                        last_consumer_check = now
                        _warn_unserved(store, run_id, warned, broker)
                        if state != RunState.CANCELLED:  # a cancelled run's work is never sent again
                            checked = orphan_watch.confirmed()
                            text = _held_note(checked, limit)
                            held(text)
                            held_said = bool(text)
                    # a cancelled run's messages where no worker listens are never skipped: they do not hold it up
                    if now - last_change > limit and broker_idle(store, run_id, orphans_said, ignore=(
                            unserved_queues(store, run_id) if state == RunState.CANCELLED else ()),
                            resending_after=None if state == RunState.CANCELLED else limit,
                            watch=orphan_watch, checked=checked):  # fmt: skip
                        idle_checks += 1
                        if idle_checks < IDLE_CHECKS:  # idle at several polls in a row, not a lucky instant
                            time.sleep(POLL_S * 4)  # and POLL_S below
                        elif recoveries >= MAX_STALL_RECOVERIES:
                            raise StoreError(f"Run {run_id} stalled {recoveries + 1} times with no work queued")
                        else:
                            recoveries += 1
                            if state == RunState.CANCELLED:  # its rest is skipped, never re-submitted: the summary
                                log.warning("run %s: cancelled, no summary after %.0f s: aggregating again", run_id,
                                            limit)  # fmt: skip
                                aggregate_run(store, run_id)
                            else:
                                log.warning("run %s: no progress for %.0f s, nothing queued: re-submitting", run_id,
                                            limit)  # fmt: skip
                                recovering = True  # until it returns: an outage may cut it off part-way
                                resume(store, run_id, recovery=True, on_queues=on_queues)
                                recovering = False
                                held("")  # sent again: no longer waits on them
                                held_said = False
                            last_change, idle_checks, restarted = time.monotonic(), 0, False
                    else:  # "in a row": a poll not idle (work held or queued) starts the count again
                        idle_checks = 0
                if check is not None and check():
                    restarted = True
            except _POLL_ERRORS as exc:
                # a later read of the poll that found no meta: an outage too where Redis stopped answering since
                failed = _meta_gone(store, run_id, exc) if isinstance(exc, ConfigError) else exc
                outage.lost(failed)  # raises BrokerError once it lasted REDIS_OUTAGE_S
                last_change = time.monotonic()  # an outage is not a stall
                continue
            outage.over()  # said once a whole poll got its answers, not a first read that a later one undoes
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"Run {run_id} did not finish within {timeout_s} s")
            time.sleep(POLL_S)
    except BaseException as exc:
        if stop_on_error is not None and outage.since is None:  # lost: its caller says so (and tries the cancel again)
            with suppress(redis.RedisError):
                cancel(store, run_id)
            with suppress(OSError):  # said at once, as the wait may be long (a closed terminal: nothing to say it on)
                at_once = stop_again(first_stop_signal()) if isinstance(exc, KeyboardInterrupt) else None
                note_of(progress)(_stopping_note(at_once, _calling(store, run_id)))
            stop_on_error()
        raise
    finally:
        try:
            counters = {} if outage.since is not None else store.progress(run_id)  # lost: not 30 s more
            if counters:  # none when the store lost the run: no "0/0 done" line under the error
                progress.update(counters, final=True)
        except redis.RedisError:
            pass  # the error that ended the wait says why
        progress.stop()


def _run_lost(run_id: str) -> RunLostError:
    """The error of a run whose meta left the store while :func:`wait` followed it (said the same whichever read of
    a poll found it gone: its state, or a later read of its meta, which says :data:`NO_SUCH_RUN`, exit 2, as if the
    run had been mistyped)."""
    return RunLostError(
        f"Run {run_id} is no longer in the store: its Redis lost it (restarted without persistence, flushed, or "
        "evicting keys under maxmemory). What it scored is lost; run it again"
    )


def _stopping_note(at_once: str | None, calls: list[str]) -> str:
    """What an embedded run says as it stops its workers once its wait ended (:func:`wait`'s ``stop_on_error``): it
    may take ``STOP_S``, and its last progress line comes after; ``at_once`` (a stop signal ended it): how to cut that
    short, by the signal that came (:func:`~orchestrator.workers.stop_again`: "Ctrl-C again", "send SIGTERM again
    (or Ctrl-C)"). ``calls``: the run's queues whose calls under way end and are kept (:func:`_calling`); other tasks
    under way are cut short, which a run with none of those is told."""
    hint = f"; {at_once} to stop at once" if at_once else ""
    if calls:
        again = f"{hint}: the resume sends them again" if at_once else ""
        return (f"stopping the workers: the {' and '.join(calls)} calls under way end and are kept "
                f"(up to {STOP_S:.0f} s{again})")  # fmt: skip
    return (f"stopping the workers (up to {STOP_S:.0f} s{hint}): what they are scoring is cut short; the resume "
            "scores it again")  # fmt: skip


def _calling(store: RunStore, run_id: str) -> list[str]:
    """The queues of the run with work left whose calls its workers end before they stop (``judge``, ``target``): a
    resume of a run whose judging is all done has no judge call under way; none where the store cannot say."""
    try:
        counters = store.progress(run_id)
    except redis.RedisError:
        return []
    return [
        queue for queue in ("judge", "target") if counters.get(f"total:{queue}", 0) > counters.get(f"done:{queue}", 0)
    ]


def _meta_gone(store: RunStore, run_id: str, exc: ConfigError) -> Exception:
    """A read of wait()'s poll found no meta of ``run_id`` (``exc``) after its state was read: raise ``exc`` where the
    run is kept after all, the lost-run error where it is gone; return Redis's error where it stopped answering since
    (an outage, as at any read of the poll)."""
    try:
        kept = store.exists(run_id)
    except _Outage.ERRORS as failed:
        return failed
    if kept:
        raise exc
    raise _run_lost(run_id) from None


class _Outage:
    """Redis not answering wait()'s polls: said once, ``revive`` tried each second (the embedded Redis), given up
    with BrokerError after ``REDIS_OUTAGE_S``, and said again when a whole poll is answered."""

    #: What a Redis that is down, restarting or hung raises: redis-py's errors (the run store, the broker's queues)
    #: and kombu's (Celery sending a task or asking the workers), as an aggregation tells them.
    ERRORS: tuple[type[Exception], ...] = REDIS_OUTAGE

    def __init__(
        self, run_id: str, revive: Callable[[], object] | None, out_dir: Path | None = None, broker: str | None = None
    ) -> None:
        self.run_id, self.revive = run_id, revive
        #: Where the run's reports go (None: not known) and its --broker, which the commands it says name.
        self.out_dir, self.broker = out_dir, broker
        #: When Redis stopped answering (``time.monotonic()``; None: it answers).
        self.since: float | None = None
        #: When a whole poll was last answered: the outage began after it, as its first failed read's client retried.
        self.answered = time.monotonic()
        #: Until when the outage was told to the progress view (:meth:`untold_s`).
        self.told = -math.inf

    def lost(self, exc: Exception) -> None:
        """A read of a poll failed with ``exc`` (one of ``ERRORS``): say so (once), try ``revive``, wait a second;
        BrokerError once Redis has not answered for ``REDIS_OUTAGE_S``."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
            log.warning("run %s: lost Redis (%s); retrying for up to %.0f s", self.run_id, exc, REDIS_OUTAGE_S)
        if self.revive is not None:
            try:
                self.revive()
            except (BrokerError, redis.RedisError, OSError) as failed:
                log.warning("run %s: could not restart the embedded Redis: %s", self.run_id, failed)
        if now - self.since > REDIS_OUTAGE_S:
            raise BrokerError(
                f"Redis did not answer for {REDIS_OUTAGE_S:.0f} s ({exc}); a cluster run goes on without "
                f"this process: {follow_commands(self.run_id, self.out_dir, self.broker)}"
            ) from exc
        time.sleep(1.0)

    def untold_s(self) -> float:
        """Seconds of the outage not yet told to the progress view (0.0: Redis answers): from the last poll it answered
        whole (its client's retries of the first failed read included), or from when they were last told, to now;
        told now."""
        if self.since is None:
            return 0.0
        told, self.told = max(self.answered, self.told), time.monotonic()
        return self.told - told

    def over(self) -> None:
        """Redis answered a whole poll: say it is back, if it was lost."""
        self.answered = time.monotonic()
        if self.since is not None:
            log.warning("run %s: Redis is back after %.0f s", self.run_id, self.answered - self.since)
            self.since = None


#: What ends one poll of wait() early, to be told apart by :func:`_meta_gone`: an outage, or a read that found no meta.
_POLL_ERRORS: tuple[type[Exception], ...] = (*_Outage.ERRORS, ConfigError)


def cancel(store: RunStore, run_id: str) -> None:
    """Mark a run cancelled (unless it already ended): workers skip its remaining tasks, and its summary
    covers what was scored."""
    store.set_state(run_id, RunState.CANCELLED)


def summarize_cancelled(
    store: RunStore,
    run_id: str,
    settle_s: float = SETTLE_S,
    on_unserved: Callable[[dict[str, int]], None] | None = None,
    here: bool = False,
    on_orphaned: Callable[[list[Orphan]], None] | None = None,
    on_unsure: Callable[[list[str]], None] | None = None,
) -> dict[str, int]:
    """A cancelled run whose messages wait on queues no worker consumes, or are held by a worker that is gone
    (killed whole: Redis hands them back only after the visibility timeout), would long get no summary (no worker
    skips them, so its chords do not end): once the served queues are idle (tasks in flight have written their
    items; ``settle_s`` at most), send its aggregation, or with ``here`` (an embedded run whose process is gone:
    no worker serves its lane, its control queue included) aggregate it in this process; what those messages
    hold is counted as stopped. So is a run whose waiting messages' queues count as served only by a worker that did
    not answer (:func:`unserved_queues`' ``unsure``: a worker killed whole a moment ago, holding only another run's
    messages, still counts as serving its queues), but for ``here``: it is watched until they count unserved or its
    workers wrote the summary (``on_unsure`` hears those queues before the wait: it may last ``settle_s``), unless,
    with nothing else to wait for, each has a worker whose key saying it runs is renewed after the cancel
    (:func:`renewed_alive`, ``ALIVE_TTL_S`` at most): that worker lives, skips their messages and writes it. Returns
    the unserved queues and their messages (``on_unserved`` hears them, and ``on_orphaned`` the orphaned messages,
    before the wait; a queue found unserved during it, as the take of a worker
    killed whole gets older than ``RECENTLY_TAKEN_S``, is heard then (the workers asked every ``UNSERVED_RECHECK_S``
    at most), and no longer holds the wait). With ``here``, a run none of whose work is queued or held by a live
    worker any more (another process took its lane and dropped what it left there) is aggregated here too, once the
    tasks in flight of its gone process's workers end (``settle_s`` at most; still held then, it is left to them). A
    run with its summary already is left alone."""
    if store.state(run_id) != RunState.CANCELLED or store.summary_is_current(run_id):
        return {}
    unsure: set[str] = set()  # served only by a worker that did not answer: maybe one killed a moment ago
    unserved = unserved_queues(store, run_id, unsure=unsure)
    watch = OrphanWatch(store, run_id)  # its checks, each confirming the last's orphans (not two fresh ones a check)
    orphans = settled_orphans(store, run_id, watch)
    if unsure and not (here or unserved or orphans):  # a worker whose key is renewed runs: it writes the summary
        unsure -= renewed_alive(store, unsure, ALIVE_TTL_S)
    if not unserved and not orphans and (here or not unsure):  # here: its lane's workers went with its process
        if here and _left_to_nobody(store, run_id, settle_s, watch):
            aggregate_run(store, run_id, here=True)
        return {}
    if unserved and on_unserved is not None:
        on_unserved(unserved)
    if orphans and on_orphaned is not None:
        on_orphaned(orphans)
    if unsure and not here and on_unsure is not None:
        on_unsure(sorted(unsure))
    asked = time.monotonic()  # the workers were just asked which queues they serve
    deadline = asked + settle_s
    while time.monotonic() < deadline and not broker_idle(store, run_id, ignore=unserved, watch=watch):
        time.sleep(POLL_S * 5)
        if store.summary_is_current(run_id):  # its workers skipped the rest and wrote it
            return unserved
        if time.monotonic() - asked >= UNSERVED_RECHECK_S:
            unserved, asked = _unserved_since(store, run_id, unserved, on_unserved), time.monotonic()
    aggregate_run(store, run_id, here=here)
    return unserved


def _unserved_since(
    store: RunStore, run_id: str, unserved: dict[str, int], on_unserved: Callable[[dict[str, int]], None] | None
) -> dict[str, int]:
    """The run's unserved queues read again (as :func:`wait` reads them at each check), those of ``unserved`` kept:
    a queue whose only worker was killed whole counts as served for ``RECENTLY_TAKEN_S`` after its last take, then
    no longer holds the summary up. ``on_unserved`` hears the queues newly unserved."""
    found = {**unserved, **unserved_queues(store, run_id, skip=set(unserved))}
    if (new := {q: n for q, n in found.items() if q not in unserved}) and on_unserved is not None:
        on_unserved(new)
    return found


def _left_to_nobody(store: RunStore, run_id: str, settle_s: float, watch: OrphanWatch) -> bool:
    """Whether, within ``settle_s``, no message of the run waits on its queues and none is held by a live worker
    (orphans confirmed by ``watch``'s checks): then no chord of it ends, and nothing but this process would write its
    summary. False when some of it is still queued or held at the deadline (whoever holds it, or skips it, ends its
    chords)."""
    deadline = time.monotonic() + settle_s
    while queued_messages(store, run_id) or held_by_live_workers(store, run_id, watch=watch):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S * 5)
    return True


def aggregate_run(store: RunStore, run_id: str, here: bool = False) -> None:
    """Write the run's summary of its current generation: sent to the control queue, or in this process with
    ``here`` or when no live worker consumes that queue (sent there, it would wait for one forever). A worker
    busy enough to miss one 1 s ask is asked again for 3 s before it counts as absent."""
    if here or (unconsumed_queues([CONTROL_QUEUE]) and unconsumed_queues([CONTROL_QUEUE], timeout_s=3.0)):
        aggregate_in(store, run_id, store.generation(run_id), retried=True)  # an outage is said, not a failed run
    else:
        aggregate.delay(run_id, store.generation(run_id))


def write_results(
    store: RunStore,
    run_id: str,
    out_dir: Path,
    broker: str | None = None,
    *,
    caller: Caller = CLI,
    release: bool = False,
    keep_gates: bool = False,
) -> RunSummary:
    """Write the reports of a finished run into ``out_dir``; one not finished is an error whose commands name
    ``out_dir`` and the run's ``broker`` (its --broker). ReportError when a report cannot be written, naming it (not
    the hidden file it is written to first) and how ``caller`` finishes the run once it can. ``release`` (an embedded
    run whose ``out_dir`` is kept): its items then leave the store ``RELEASED_ITEMS_TTL_S`` later, unless a resume
    has something of it to score again (:func:`_release_items`). ``keep_gates``: the run's last gate results in
    ``out_dir`` are kept (``ragscore results``, which checks none), else removed (a run or resume checks them
    afresh)."""
    summary = store.finished_summary(run_id, **summary_commands(run_id, out_dir, broker))
    try:
        write_outputs(store, run_id, out_dir, summary, gates_of_run(out_dir, run_id) if keep_gates else None)
    except OSError as exc:  # a full disk, a folder where a report goes: os.replace names the temporary file first
        raise ReportError(
            f"{said_os_error(exc)}: the reports of run {run_id} were not written "
            f"(what was scored is kept); {_rewrite(run_id, out_dir, broker, caller)} writes them once it can"
        ) from exc
    store.note_reports_dir(run_id, str(out_dir.resolve()))  # `ragscore status` says where they are
    if release:
        _release_items(store, summary, out_dir)
    return summary


def _release_items(store: RunStore, summary: RunSummary, out_dir: Path) -> None:
    """Let the items of a run whose reports ``out_dir`` keeps leave the embedded store ``RELEASED_ITEMS_TTL_S`` from
    now (read now: tests shorten it), so that a laptop's Redis does not grow by every run it scores for
    RAGSCORE_RUN_TTL_S; kept where a resume would score some of them again and could not take them back from
    ``out_dir`` (:func:`_nothing_left`, :func:`_restorable`), or where ``out_dir`` goes when an ``evaluate()`` process
    exits (:data:`TEMPORARY_MARK`)."""
    if (out_dir / TEMPORARY_MARK).exists():
        return
    if (nothing_left := _nothing_left(summary)) or _restorable(store, summary):
        store.set_meta(summary.run_id, **{REPORT_DIGESTS: json.dumps(report_digests(out_dir))})
        store.release_items(summary.run_id, RELEASED_ITEMS_TTL_S, str(out_dir.resolve()), restorable=not nothing_left)


def _restorable(store: RunStore, summary: RunSummary) -> bool:
    """Whether a resume of the run takes its items back from the reports they were released to
    (:func:`_items_to_restore`; a target run's answers from its answers.jsonl: :func:`_answers_by_shard`): it
    finished, or was cancelled once every shard was sent (a submission cut off part-way never recorded their count:
    its reports hold only the shards it reached; :func:`without_skipped` leaves out of its items what the cancel
    skipped)."""
    cancelled = summary.state == RunState.CANCELLED and "n_shards" in store.meta(summary.run_id)
    return summary.state == RunState.FINISHED or cancelled


def _nothing_left(summary: RunSummary) -> bool:
    """Whether a resume of the run would score nothing again: it finished (not cancelled), no output errored or
    was stopped."""
    return summary.state == RunState.FINISHED and not any(m.errors or m.stopped for m in summary.metrics.values())


def _done_in_its_folder(store: RunStore, run_id: str, out_dir: Path, broker: str | None) -> RunSummary | None:
    """The summary of run ``run_id``, for its resume into ``out_dir``, where its items left the store once its
    reports were kept (:func:`_release_items`), ``out_dir`` holds them whole and nothing is left to score; None where
    the store keeps its items, or has them back from ``out_dir`` for a run with something left to score
    (:func:`_items_to_restore`): the resume goes on, and writes its reports again. ConfigError, the store's (naming the
    folder they were written to), where the run has something left to score and its items cannot be taken back (the
    rule of the release, checked again: :func:`_restorable`), or ``out_dir`` does not hold them
    (:func:`missing_reports`: its summary.json is the store's, whose gates are checked as a finish's), saying what
    is missing."""
    try:
        store.check_items_kept(run_id)
        return None
    except ConfigError as exc:
        summary = store.finished_summary(run_id, **summary_commands(run_id, out_dir, broker))
        left = not _nothing_left(summary)
        if left and not _restorable(store, summary):
            raise
        digests = json.loads(store.meta(run_id).get(REPORT_DIGESTS) or "{}")
        if (missing := missing_reports(out_dir, summary, digests)) is not None:
            raise ConfigError(f"{exc}. {out_dir} does not hold them whole: {missing}") from None
    return None if left else summary


@dataclass(frozen=True)
class _Restore:
    """The items of a run that left the store, which its resume takes back (:func:`_items_to_restore`)."""

    #: The items.jsonl they are read from (the run's reports').
    file: Path
    #: Their keys, shard by shard.
    keys: list[list[str]]


def _items_to_restore(
    store: RunStore, run_id: str, meta: dict[str, str], items_file: Path | None, shard_items: ShardStarts,
    ticker: _Ticker,
) -> _Restore | None:  # fmt: skip
    """The items of run ``run_id`` that left the store (:meth:`RunStore.release_items`), their keys shard by shard
    (as ``shard_items`` cuts them), where its resume takes them back from ``items_file`` (its reports' items.jsonl);
    None where the store keeps them. The file is read whole and nothing is written: one line per item of the run, its
    keys the run's own in their order (the digest the release recorded) and each output a metric result, else
    ConfigError naming it; the store's (:meth:`RunStore.check_items_kept`) where the release recorded no digest (a run
    with nothing left to score)."""
    try:
        store.check_items_kept(run_id)
        return None
    except ConfigError:
        if items_file is None or ITEMS_KEYS not in meta:
            raise
    items = int(meta.get("items", 0))
    ticker.say(f"reading the run's {counted(items, 'item')} back from {items_file} (they left the store)")
    keys: list[list[str]] = []
    try:
        for raw in iter_items_file(items_file):
            stored_fields(raw)  # checked, not kept
            if not keys or len(keys[-1]) == shard_items.size(len(keys) - 1):
                keys.append([])
            keys[-1].append(raw.key)
            ticker.count(lambda n: f"{counted_of(n, items, 'item')} read back from {items_file.name}")
    except ValueError as exc:  # a result that is not a metric's (pydantic's ValidationError)
        raise ConfigError(f"{items_file}: an item is not as run {run_id} wrote it ({exc}); run it again") from exc
    if (found := sum(map(len, keys))) != items:
        raise ConfigError(f"{items_file} holds {counted(found, 'item')}, run {run_id} has {items:,}: its resume cannot "
                          "take its items back from it; run it again")  # fmt: skip
    if keys_digest(keys) != meta[ITEMS_KEYS]:
        raise ConfigError(f"{items_file} holds other items than run {run_id}'s (other ids, or in another order): its "
                          "resume cannot take its items back from it; run it again")  # fmt: skip
    return _Restore(items_file, keys)


def _answers_by_shard(path: Path, keys: list[list[str]], run_id: str) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Each answer of a target run's answers.jsonl ``path`` with its shard, as the store held it
    (:func:`iter_answers_file`): its lines answer items of run ``run_id`` (``keys``, shard by shard) in their order,
    else ConfigError naming it."""
    order = ((shard, key) for shard, shard_keys in enumerate(keys) for key in shard_keys)
    for key, answer in iter_answers_file(path):
        shard = next((shard for shard, wanted in order if wanted == key), None)
        if shard is None:
            raise ConfigError(f"{path} holds other answers than run {run_id}'s (other ids, or in another order): its "
                              "resume cannot take its answers back from it; run it again")  # fmt: skip
        yield shard, key, answer


def _rewrite(run_id: str, out_dir: Path, broker: str | None, caller: Caller) -> str:
    """How ``caller`` writes the reports of run ``run_id`` into ``out_dir`` again: the resume of the run that
    ``DIR/run.json`` names, else ``ragscore results``."""
    if (recorded_run(out_dir) or {}).get("run_id") == run_id:
        return caller.resume(out_dir, broker)
    return backticked(results_command(run_id, out_dir, broker))


def _refuse_metrics_only_here(resolved: ResolvedSuite) -> None:
    """ConfigError for a metric this process registered that the local workers will not: a module it imported
    itself (a notebook's ``import``, a cell's own metric in ``__main__``) while nothing makes a worker import it (no
    RAGSCORE_PLUGINS, no ragscore.metrics entry point). Every item and the aggregation would fail on it."""
    if get_settings().plugins.strip() or entry_points(group="ragscore.metrics"):
        return  # they may import it: what they do is known only there
    for metric, _ in resolved.metrics:
        module = metric.fn.__module__
        if module.startswith("ragscore_workers.metrics."):
            continue
        fix = ("put it in a module, then set os.environ['RAGSCORE_PLUGINS'] = 'MODULE' before the call"
               if module == "__main__" else f"os.environ['RAGSCORE_PLUGINS'] = {module!r} before the call")  # fmt: skip
        raise ConfigError(
            f"{metric.name}: registered by {module}, which this process imported but the local workers will not: "
            f"RAGSCORE_PLUGINS is unset ({fix}); nothing was submitted"
        )


def check_local_resources(resolved: ResolvedSuite, queues: list[str], judge_calls_left: int | None = None) -> None:
    """Embedded runs, before any worker starts: what the local workers would fail on for every item is an
    error now (exit 2): a judge API key or a target's token this environment (which they inherit) lacks, an
    embedding model that is not there, a ``corpus_dir`` that is not a directory, a code sandbox that cannot run
    here (no bubblewrap, no Docker engine). Not for a cluster, whose keys,
    models and files live on its workers. ``judge_calls_left``: the judge calls the dry run's count says the run sends
    (:func:`~orchestrator.estimate.judge_calls_planned`; None: not counted, or no reply cached to spare any:
    :func:`judge_cache_may_answer`); none left needs no judge key. The judge is checked last: a missing key
    (:class:`MissingKeyError`) says every other resource is there."""
    _refuse_metrics_only_here(resolved)
    for metric, params in resolved.scoring:
        corpus = getattr(params, "corpus_dir", None)
        if metric.queue.value in queues and corpus and not Path(corpus).is_dir():
            raise ConfigError(f"{metric.name}: corpus_dir {corpus} is not a directory (params of the suite)")
    if Queue.TARGET.value in queues:
        from ragscore_workers.target.endpoints import target_token

        for target in resolved.targets:
            target_token(target)  # the local workers inherit this environment
    if Queue.EMBED.value in queues:
        from ragscore_workers.embedding import pick_device, resolve_model

        resolve_model(resolved.suite.embedding.model)  # ModelNotFoundError (a ConfigError) says what was tried
        if resolved.suite.embedding.device != "auto":  # a named device the local workers would not find
            pick_device(resolved.suite.embedding.device)
    if Queue.CODE.value in queues:
        _check_sandbox(resolved.suite.sandbox.backend)
    if Queue.JUDGE.value in queues:
        _check_judge(resolved, judge_calls_left)


def _check_sandbox(backend: str) -> None:
    """ConfigError when the suite's sandbox backend cannot run code on this machine (the local workers' own)."""
    from ragscore_workers.sandbox import SandboxUnavailable, get_sandbox

    try:
        get_sandbox(backend)
    except SandboxUnavailable as exc:
        fallback = " (no Docker engine answers, so the local one)" if backend == "auto" else ""
        raise ConfigError(
            f"sandbox.backend {backend}{fallback} cannot run code on this machine, so every item whose code it runs "
            f"would be an error: {str(exc).rstrip('.')}. Install what it names, or set the suite's sandbox.backend to "
            "one this machine has"
        ) from exc


def _check_judge(resolved: ResolvedSuite, calls_left: int | None) -> None:
    """The judge extra, the judge's base_url and, unless the count says no call is left to send, its keys."""
    try:
        from ragscore_workers.providers.factory import make_provider
    except ImportError as exc:  # the judge extra is not installed
        raise ConfigError(f"Judge metrics need the judge extra: pip install 'ragscore[judge]' ({exc})") from exc
    # every judge call counted (none by `checks`' meta_eval points, which the count does not plan) and none left
    counted = all(m.plan_calls for m, _ in resolved.scoring if Queue.JUDGE in m.possible_queues)
    envs = {getattr(p, "api_key_env", None) for m, p in resolved.scoring if m.queue is Queue.JUDGE} or {None}
    for env in envs:  # None: the provider's own variable (``checks`` rows routed to the judge queue)
        provider = make_provider(resolved.suite.judge, api_key_env=env)
        if not (counted and calls_left == 0):
            provider.require_key()


def check_question_time(resolved: ResolvedSuite) -> None:
    """ConfigError when a target's ``max_seconds_per_question`` is not below its task's soft time limit (read now, from
    :data:`QUEUE_LIMITS`): the task stops asking there, so no question is given that long. A new run's check alone: a
    resumed run's questions are bounded by the limit as they are asked (nothing outlives it, nor is asked twice)."""
    limit = QUEUE_LIMITS[Queue.TARGET.value][0]
    for index, target in enumerate(resolved.targets):
        if target.max_seconds_per_question >= limit:
            place = "target" if resolved.suite.target is not None else f"targets[{index}]"
            raise ConfigError(
                f"Invalid suite: {place}.max_seconds_per_question={target.max_seconds_per_question:g} is not below "
                f"the target task's time limit, {limit} s: its task stops asking there, so no question is given that "
                f"long (one still asked then is recorded as '{TIME_LIMIT_ERROR}'). Set max_seconds_per_question below "
                f"{limit} in the suite"
            )


def check_judge_threads(threads: object, broker: str | None, caller: Caller = CLI) -> None:
    """ConfigError unless ``threads`` (``--judge-threads``, ``judge_threads=``; None: the default) is a whole number of
    at least 1, for an embedded run (``broker`` None): a cluster's judge workers are started with their own."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        option = caller.option("judge-threads")  # as given: judge_threads=0, not '0'
        given = f"{option}{threads!r}" if caller.python else f"{option} {threads}"
        raise ConfigError(f"{given}: the local judge worker's threads are a whole number, at least 1")
    if broker:
        raise ConfigError(f"{caller.option('judge-threads')} sets the threads of an embedded run's local judge worker; "
                          "a cluster's judge workers are started with theirs (`ragscore worker --queues judge "
                          "--concurrency N`)")  # fmt: skip


def _no_broker(caller: Caller) -> str:
    """What a new run sent to a broker whose port nothing listens on is told (:func:`.connection.connect`'s
    ``no_broker``): a run on one machine needs none."""
    starts = "evaluate()" if caller.python else "`ragscore run`"
    return (f"a run on this machine alone needs no broker: leave out {caller.option('broker')} and "
            f"RAGSCORE_BROKER_URL, and {starts} starts a Redis of its own")  # fmt: skip


def judge_threads_unused(caller: Caller = CLI, *, resumed: bool = False) -> str:
    """What an embedded run with no judge work says of ``--judge-threads`` (``judge_threads=``) given, before its
    first task is sent; ``resumed``: what a resume that sent no judge work says once it ended (its look-up, not its
    counters, knew)."""
    option = caller.option("judge-threads")
    if resumed:
        return (f"{option} had no effect: the resume sent no judge work (no judge metric scores its rows, or none of "
                "its items was left to judge), so no local judge worker was started")  # fmt: skip
    return (f"{option} has no effect: the run has no judge work (no judge metric scores its rows), so no local judge "
            "worker is started")  # fmt: skip


def _unused_when_done(
    caller: Caller, judge_params: dict[str, Any] | None, judge_limits: dict[str, int] | None, judge_threads: int | None
) -> str | None:
    """What the resume of a run with nothing left to score says of the options given that act only on what a resume
    sends (its judge budget, rate limits, local judge threads), naming them once; None where none was given."""
    names = [BUDGET_OPTIONS[name] for name in judge_params or {}] + list(judge_limits or {})
    names += ["judge-threads"] if judge_threads is not None else []
    if not names:
        return None
    given = [caller.option(name) for name in names]
    listed = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
    return f"{listed} {'has' if len(given) == 1 else 'have'} no effect: nothing is left to score"


def queues_left(store: RunStore, run_id: str, resolved: ResolvedSuite, queues: list[str]) -> list[str]:
    """The ``queues`` of run ``run_id`` a resume may send work to: all of them where its submission was cut off or it
    has a target (a target's answer asked again is scored anew on every queue); else those with an output not stored,
    stored stopped or stored as an error (:func:`errors_of`; a run stored before errors were counted per queue: any
    may be a queue's), or no count of its outputs. From the counters as stored: :meth:`RunStore.progress` leaves
    ``stopped:{queue}`` and ``errors:{queue}`` out."""
    if "n_shards" not in store.meta(run_id) or resolved.targets:
        return queues
    counters = store.counters(run_id, "progress")

    def done(queue: str) -> bool:
        if (total := counters.get(f"total:{queue}")) is None:
            return False
        stored = counters.get(f"done:{queue}", 0) >= total
        return stored and not counters.get(f"stopped:{queue}", 0) and errors_of(counters, queue) == 0

    return [queue for queue in queues if not done(queue)]


def judge_cache_may_answer(resolved: ResolvedSuite, redis: redis.Redis) -> bool:
    """Whether a run of ``resolved`` may find a judge reply in the reply cache in ``redis``: some judge metric reads
    it and it holds replies of the suite's judge. Where not, every judge call is sent, each needing the key: an
    embedded run without it is refused before its dataset is read to count them (its dry run says so)."""
    reads = any(getattr(params, "cache", True) for metric, params in resolved.scoring if metric.plan_calls)
    return ReplyCache(redis, enabled=reads).holds_replies_of(judge_identity(resolved.suite.judge))


def refuse_an_unfinished_run_in(out_dir: Path, broker: str | None = None, *, caller: Caller = CLI) -> str | None:
    """A new run must not take over ``DIR/run.json`` of a run that never wrote its reports (interrupted, cut off):
    that file is how ``--resume DIR`` finds it. A finished run's directory is reused: returns that run's id, the
    one its summary.json names where it has no run.json (``ragscore results``'s; None: no run, or one its Redis
    lost). The resume it says names ``broker`` (this command's --broker) where that run went to a cluster too, as
    ``caller`` finishes a run and gives another out."""
    record = recorded_run(out_dir) or {}
    recorded = record.get("run_id")
    try:
        reported = json.loads((out_dir / "summary.json").read_text(encoding="utf-8")).get("run_id")
    except (OSError, ValueError, AttributeError):
        reported = None
    if recorded is None:
        return reported if isinstance(reported, str) else None
    if record.get("lost"):  # nothing left to resume: the directory is free (said by run() once the run goes ahead)
        return None
    if reported != recorded:
        how = caller.resume(out_dir, broker if record.get("mode") == "cluster" else None)
        raise ConfigError(
            f"{out_dir} holds run {recorded}, which has not written its reports (interrupted?): finish it with {how}, "
            f"or give another {caller.option('out')} to start a new run (or delete {out_dir / 'run.json'}, if that run "
            "is gone or not wanted)"
        )
    return str(recorded)


def _baseline_moved(job: dict[str, Any] | None, out_dir: Path, moved: Path) -> dict[str, Any] | None:
    """``job`` (the CLI's gates) with its ``--fail-on-regression`` baseline, where that was ``out_dir`` itself, now
    ``moved`` (DIR/previous/RUN_ID, where its reports went): the resume of this run reads that run's summary there."""
    gates = (job or {}).get("gates") or {}
    if gates.get("fail_on_regression") != str(out_dir.resolve()):
        return job
    return {**(job or {}), "gates": {**gates, "fail_on_regression": str(moved.resolve())}}


def _moves(recorded: dict[str, Any]) -> list[str]:
    """The folders a run.json's reports moved from (its ``moved_from``), oldest first: a list, one folder as an older
    ragscore wrote it, or none."""
    moved_from = recorded.get("moved_from")
    if isinstance(moved_from, str):
        return [moved_from]
    return [folder for folder in moved_from if isinstance(folder, str)] if isinstance(moved_from, list) else []


def _record_moved(moved: Path, out_dir: Path) -> list[str]:
    """Add ``out_dir`` to ``moved_from`` in ``moved/run.json`` (DIR/previous/RUN_ID, where the reports of its run
    moved from ``out_dir``; the folders they moved from before kept first) and return that list (``out_dir`` alone
    where no run.json moved): the store that run lives in, which may not be the moving run's (a cluster's, the
    embedded Redis), still names one of those folders (the one it was last told of) as the folder of its released
    items and its rows' copy until its resume from ``moved`` names ``moved`` there (:func:`_moved_here`)."""
    recorded = recorded_run(moved)
    history = [*_moves(recorded or {}), str(out_dir.resolve())]
    if recorded is not None:
        write_text_atomic(moved / "run.json", json.dumps(recorded | {"moved_from": history}) + "\n")
    return history


def _moved_here(store: RunStore, run_id: str, out_dir: Path) -> None:
    """Where ``out_dir/run.json`` says the reports of run ``run_id`` moved there (``moved_from``: later runs into
    the folders it names moved them, :func:`_record_moved`), name ``out_dir`` in the run's store as the folder of its
    released items and of evaluate()'s copy of its rows, which moved with them: its resume reads them here."""
    recorded = recorded_run(out_dir) or {}
    if recorded.get("run_id") == run_id and (moves := _moves(recorded)):  # not another run's folder (--out OTHER)
        store.move_reports_dir(run_id, moves, str(out_dir.resolve()), ROWS_FILE)


def _place_rows(store: RunStore, run_id: str, staged: Path, rows_to: Path) -> None:
    """Rename ``staged``, the copy of rows made for run ``run_id``, to ``rows_to``, and record it there as the run's
    dataset (its resume reads it); ConfigError where the rename fails."""
    try:
        staged.replace(rows_to)
    except OSError as exc:
        raise ConfigError(f"Cannot write the reports to {rows_to.parent}: {exc.strerror or exc}") from exc
    store.set_meta(run_id, dataset=str(rows_to.resolve()))


def _refuse_to_overwrite(dataset: Path, out_dir: Path, caller: Caller) -> None:
    """ConfigError when a report would be written over the dataset (``data/items.csv --out data``), or the dataset is
    evaluate()'s copy of an earlier run's rows there (``out/evaluate-rows.jsonl --out out``), which moves with that
    run's reports (or is replaced by evaluate()'s copy of its own)."""
    if dataset.resolve().parent != out_dir.resolve():
        return
    if dataset.name in OUTPUT_NAMES:
        raise ConfigError(
            f"{caller.given('out', out_dir)} would overwrite the dataset {dataset} with the run's own {dataset.name}: "
            f"give another {caller.option('out')}, or rename the dataset"
        )
    if dataset.name == ROWS_FILE:
        raise ConfigError(
            f"{caller.given('out', out_dir)} would move the dataset {dataset}, evaluate()'s copy of the rows of the "
            f"run there, to {out_dir / PREVIOUS}/RUN_ID with that run's reports: give another {caller.option('out')}, "
            f"or copy the dataset out of {out_dir} first"
        )


def started_job(store: RunStore, run_id: str, out_dir: Path, own: bool, *, said: bool = True) -> dict[str, Any] | None:
    """The job (the CLI's gates) run ``run_id`` started with, for its resume into ``out_dir`` (``own``: its own folder,
    whose run.json records them unknown), whose run.json does not name it: the store's
    (:meth:`~ragscore_workers.store.RunStore.job`); for a run of an older ragscore, whose store kept none, the one kept
    by the run.json of the folder the store names for it (its out_dir, else its reports_dir, followed where its
    reports moved: :func:`moved_reports`) where that names the run and knows them; else None, said in one line (unless
    not ``said``: the CLI's look before the resume, which says it itself): its gate options are unknown, recorded so
    in ``out_dir/run.json`` (:func:`kept_job`)."""
    job = store.job(run_id)
    if job is not None:
        return job
    folder = str(out_dir) if own else store.out_dir(run_id) or store.reports_dir(run_id)
    record = (recorded_run(moved_reports(Path(folder), run_id)) or {}) if folder else {}
    names = record.get("run_id") == run_id
    if names and (kept := kept_job(record)) is not None:
        return kept
    if not said:
        return None
    unread = (f"{folder}/run.json records them as unknown" if names else f"{folder}/run.json, its own folder's, does "
              "not name it" if folder else "the store names no folder of it")  # fmt: skip
    # a resume into its own folder: that run.json is named once
    records = (
        ""
        if folder and Path(folder).resolve() == out_dir.resolve()
        else f", and {out_dir / 'run.json'} records them so"
    )
    log.warning("run %s was started by an older ragscore, whose run store keeps no gate options, and %s: its gate "
                "options (--fail-under, --fail-on-regression, --junit) are unknown%s (give them to `ragscore run "
                "--resume %s` to hold it to them; its suite's gates hold as ever)", run_id, unread, records,
                out_dir)  # fmt: skip
    return None


def kept_job(record: dict[str, Any]) -> dict[str, Any] | None:
    """The job a run.json ``record`` keeps (the CLI's gates; {}: none, where it names none); None where it records
    them unknown (``"job": null``: the resume of an older ragscore's run that found none, :func:`started_job`)."""
    kept = record.get("job", {})
    return None if kept is None else kept if isinstance(kept, dict) else {}


def recorded_run(out_dir: Path) -> dict[str, Any] | None:
    """``DIR/run.json`` (``{"run_id", "mode"}``), or None when there is none or it cannot be read."""
    try:
        recorded = json.loads((out_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) else None


def _follow_instead(
    store: RunStore, run_id: str, changes: dict[str, Any] | None, broker: str | None = None
) -> Submitted | None:
    """A cluster run still at work (a worker that runs holds some of it) is followed, not resumed: a resume would
    send again what those workers are scoring, and pay for its judge calls twice. What workers that are gone hold
    is sent again by the following itself (:func:`wait`), once nothing else of the run is in flight. None: resume.

    ConfigError when the resume was to change the run's judge budget or limits (they apply to what a resume sends);
    the cancel it says names ``broker`` (the --broker given)."""
    meta = store.meta(run_id)
    if meta.get("state") not in (RunState.RUNNING, RunState.AGGREGATING) or not held_by_live_workers(store, run_id):
        return None
    if changes:
        raise ConfigError(
            f"Run {run_id} is still running: workers hold some of it. --max-cost, --max-tokens, --rpm, --tpm, --rpd "
            f"and --tpd apply to what a resume sends: {backticked(cancel_command(run_id, broker))}, then resume it "
            "with them"
        )
    log.warning("run %s is still running (workers hold some of it): following it, nothing sent again (a resume now "
                "would score the work in flight twice); what workers that are gone hold is sent again once nothing "
                "else of the run is in flight", run_id)  # fmt: skip
    return Submitted(run_id=run_id, items=int(meta.get("items", 0)), failed_rows=int(meta.get("failed_rows", 0)),
                     tasks=0, shards=int(meta.get("n_shards", 0)))  # fmt: skip


def _refuse_a_live_embedded_run(store: RunStore, run_id: str) -> None:
    """ConfigError for the resume of an embedded run its own process (its ``ragscore run``, ``evaluate()``) still
    runs: a resume would send again what that process's workers are scoring (judge calls paid twice), and both would
    write reports. Not followed, as a cluster run is: that process writes the run's reports itself (following it
    would have two processes write them into its DIR)."""
    meta = store.meta(run_id)
    if not run_process_alive(store.r, meta):
        return
    pid = meta.get("lane_process", "").partition(":")[0].partition("@")[0] or "?"
    raise ConfigError(
        f"Run {run_id} is still running in process {pid} on {socket.gethostname()} (its `ragscore run` or "
        f"evaluate(), which writes its reports): wait for it, or stop it ({backticked(cancel_command(run_id))}, or "
        "Ctrl-C there) and resume it once that process has exited; nothing was sent"
    )


def _refuse_a_lost_run(out_dir: Path, run_id: str) -> None:
    """ConfigError for ``--resume DIR`` of a run its Redis lost (``DIR/run.json`` says so): start it again."""
    lost = (recorded_run(out_dir) or {}).get("lost")
    if lost:
        raise ConfigError(lost_run(out_dir, run_id, str(lost)))


@contextmanager
def _recorded_if_lost(out_dir: Path, run_id: str) -> Iterator[None]:
    """A run its store lost (:class:`RunLostError`) is marked so in ``DIR/run.json``: a new run may take DIR, and
    ``--resume DIR`` says why it cannot (it used to be refused both ways)."""
    try:
        yield
    except RunLostError:
        recorded = recorded_run(out_dir) or {}
        if recorded.get("run_id") == run_id:
            noticed = time.strftime("%Y-%m-%d %H:%M:%S")
            lost = (f"its Redis lost it while it ran (noticed {noticed}; restarted without persistence, flushed, or "
                    "evicting keys under maxmemory)")  # fmt: skip
            try:
                _record_run(out_dir, run_id, str(recorded.get("mode", "")), kept_job(recorded), lost=lost)
            except ConfigError as exc:
                log.warning("could not mark %s as lost: %s", out_dir / "run.json", exc)
        raise


def _record_run(out_dir: Path, run_id: str, mode: str, job: dict[str, Any] | None, lost: str | None = None) -> None:
    """``DIR/run.json`` names the run, so ``ragscore run --resume DIR`` can find it (no secrets in it); ``lost``
    says why it cannot be resumed (its store lost it); ``job``: options of the command that started it which its
    resume applies too (the CLI's gates; {}: none, None: unknown, :func:`kept_job`). The folders its reports moved
    from (``moved_from``) are kept where ``DIR/run.json`` names the run already (a resume's: the whole history, not
    the moves since the last resume); :data:`WRITTEN_AT` is now (of two copies of its reports, the one written last
    is the run's)."""
    recorded = recorded_run(out_dir) or {}
    moves = _moves(recorded) if recorded.get("run_id") == run_id else []
    record = {"run_id": run_id, "mode": mode, WRITTEN_AT: time.time()}
    record |= ({"job": job} if job != {} else {}) | ({"lost": lost} if lost else {})
    record |= {"moved_from": moves} if moves else {}
    make_out_dir(out_dir)
    try:
        write_text_atomic(out_dir / "run.json", json.dumps(record) + "\n")
    except OSError as exc:
        raise ConfigError(f"Cannot write the reports to {out_dir}: {exc.strerror or exc}") from exc


def run(
    dataset: Path | None,
    resolved: ResolvedSuite | None,
    out_dir: Path,
    *,
    broker: str | None = None,
    fmt: str | None = None,
    fmt_options: dict[str, Any] | None = None,
    progress: ProgressView | None = None,
    settings: Settings | None = None,
    shard_rows: int = DEFAULT_SHARD_ROWS,
    judge_threads: int | None = None,
    timeout_s: float | None = None,
    resume_id: str | None = None,
    judge_params: dict[str, Any] | None = None,
    judge_limits: dict[str, int] | None = None,
    job: dict[str, Any] | None = None,
    named: Named | None = None,
    stored: ResolvedSuite | None = None,
    caller: Caller = CLI,
    keep_warm: bool = False,
    out_kept: bool = True,
    on_reports_written: Callable[[], None] | None = None,
    rows_to: Path | None = None,
) -> RunSummary:
    """Score ``dataset`` end to end (or finish run ``resume_id``) and write the reports to ``out_dir``; ``job`` (a
    new run's) is kept in ``DIR/run.json`` for its resume; ``named``: how a new run's errors name the dataset and its
    rows (:func:`submit`); ``stored``: run ``resume_id``'s suite where the caller read it already (read here, once,
    where None); ``caller``: who is warned, and whose options and resume its messages name. ``judge_threads``: the
    threads of the embedded run's local judge worker (None: :data:`~.workers.POOL_DEFAULTS`'); ConfigError for a
    cluster's run, whose judge workers have theirs (:func:`check_judge_threads`). ``out_kept``: whether ``out_dir``
    outlives the call (not ``evaluate()``'s temporary one): an embedded run's items then leave its store soon after.
    ``on_reports_written()`` is called once this call wrote the reports (not where a resume returns those ``out_dir``
    kept from the run's finish, its items having left the store: :func:`_done_in_its_folder`). ``rows_to``: where
    ``dataset``, a copy of rows made for this new run (``evaluate()``'s, staged beside the earlier run's copy), is
    renamed once the run goes ahead, after the earlier run's reports moved (:func:`move_to_previous`, its copy with
    them).

    With ``broker`` (or ``RAGSCORE_BROKER_URL``) the run goes to that cluster's workers; without, a
    private Redis and local workers for just the queues the suite needs are started and stopped here; with
    ``keep_warm`` (the Python API's calls) a finished run leaves them running for this process's next run, which
    reuses them where they fit (:mod:`.warm`).
    """
    settings = settings or get_settings()
    settings.check_visibility_timeout()  # before the out DIR is claimed or an embedded Redis started
    if resolved is not None:  # a new run's
        check_question_time(resolved)
    given_broker = broker  # the --broker the commands it says name (None: RAGSCORE_BROKER_URL finds it again)
    broker = broker or settings.broker_url
    check_judge_threads(judge_threads, broker, caller)
    replaced = lost = None  # the run whose reports out_dir holds; the one its Redis lost there
    lane: int | None = None  # an embedded run's lane (set once its server is acquired)
    resumed = stored  # the suite of run resume_id, read once from the store
    registration = ""  # and its registration there (EmbeddedRedis.member: held while this call runs the run)
    say = note_of(progress)

    def start(
        store: RunStore,
        on_validated: Callable[[list[str], int | None], None] | None = None,
        on_queues: Callable[[list[str]], None] | None = None,
    ) -> Submitted:
        nonlocal resumed
        run_id = resume_id or new_run_id()

        def validated(queues: list[str]) -> None:
            if lane is not None:  # where its queues are and who runs it, for `status` / `cancel` in another shell
                store.set_meta(run_id, lane=lane, lane_process=registration)
            if on_validated is not None:  # first: what it refuses (exit 2) leaves DIR as it was, run.json too
                # with the judge calls submit counted it to send (a resume's: none where its judge has no item left)
                if resume_id is None:
                    planned = store.meta(run_id).get("judge_calls_planned")
                else:
                    planned = None if Queue.JUDGE.value in queues else 0
                on_validated(queues, None if planned is None else int(planned))
            # DIR/run.json keeps the job for a 2nd resume too; a resume into another folder has it from the store
            recorded_job = job
            if job is None:  # a new run's: none; a resume's: the store's, else its folder's, else unknown (None)
                recorded_job = {} if resume_id is None else started_job(store, resume_id, out_dir, not takes_over)
            moved = move_to_previous(out_dir, caller.option("out")) if takes_over else None
            if moved is not None:  # once the run goes ahead
                earlier = replaced or lost  # None: reports no summary names (`ragscore report`'s)
                log.warning("%s held the reports of %s: moved to %s/ (this run writes its own into %s)", out_dir,
                            f"run {earlier}" if earlier else "an earlier run", moved, out_dir)  # fmt: skip
                recorded_job = _baseline_moved(recorded_job, out_dir, moved)
                moves = _record_moved(moved, out_dir)
                if earlier:  # where the store's refusal of its released items says they are, and its dataset is
                    store.move_reports_dir(earlier, moves, str(moved.resolve()), ROWS_FILE)
            elif lost is not None:
                log.warning("%s named run %s, which its Redis lost: this run takes its place", out_dir, lost)
            if rows_to is not None and dataset is not None:  # evaluate()'s copy of its rows, the earlier's moved
                _place_rows(store, run_id, dataset, rows_to)
            else:  # one an evaluate() cut off before its run went ahead left (killed: DIR's claim went with it)
                with suppress(OSError):
                    (out_dir / ROWS_STAGED).unlink(missing_ok=True)
            # Named in DIR/run.json before the first row is sent: a run cut off while submitting can resume.
            _record_run(out_dir, run_id, "cluster" if broker else "embedded", recorded_job)
            if recorded_job is not None:  # for a resume into another folder (a new run's {} noted as submitted)
                store.note_job(run_id, recorded_job)
            if out_kept:  # where `ragscore resume RUN_ID` writes its reports (not evaluate()'s temporary folder)
                store.note_out_dir(run_id, str(out_dir.resolve()))

        if resume_id is not None:
            if not store.exists(resume_id):
                recorded = recorded_run(out_dir)
                again = (f"delete {out_dir / 'run.json'} and run it again" if recorded is not None
                         and recorded.get("run_id") == resume_id else "run it again")  # fmt: skip
                raise ConfigError(
                    f"{NO_SUCH_RUN.format(run_id=resume_id)}. {backticked(status_command(None, given_broker))} lists "
                    f"the runs this broker has; sent to another broker: give that --broker. Lost or expired: it cannot "
                    f"be resumed; {again} with the same DATASET and --suite"
                )
            if not broker:
                _refuse_a_live_embedded_run(store, resume_id)
            changes = judge_params or judge_limits
            if broker and (following := _follow_instead(store, resume_id, changes, given_broker)):
                validated([])  # DIR/run.json names the run, as a resume's does
                return following
            resumed = resumed or stored_suite(store, resume_id, judge_limits)
            if broker:  # an embedded run's user is ragscore's own
                check_queues(store, broker, resumed.queues)
            say("checking the run's dataset is unchanged, then sending what is missing")
            return resume(store, resume_id, shard_rows=shard_rows, on_validated=validated, judge_params=judge_params,
                          judge_limits=judge_limits, say=say, broker=given_broker, stored=resumed,
                          on_queues=on_queues, restore_from=None if broker else out_dir / "items.jsonl")  # fmt: skip
        assert dataset is not None and resolved is not None
        if broker:
            check_queues(store, broker, resolved.queues)
        return submit(
            dataset, resolved, store, fmt=fmt, fmt_options=fmt_options, run_id=run_id, shard_rows=shard_rows,
            on_validated=validated, say=say, named=named, broker=given_broker, caller=caller,
        )  # fmt: skip

    def done_here(store: RunStore) -> RunSummary | None:
        """A resume's first step in ``store``: name ``out_dir`` there as the run's folder where its reports moved there
        (:func:`_moved_here`); the run's summary, said, where it finished with nothing left to score and its items
        left the store (:func:`_done_in_its_folder`: an embedded run's; a cluster run's stay). None: a new run, one
        ``store`` lacks (start() says so), or one the resume goes on with."""
        if resume_id is None or not store.exists(resume_id):
            return None
        _moved_here(store, resume_id, out_dir)
        done = _done_in_its_folder(store, resume_id, out_dir, given_broker)
        if done is not None:
            say(f"run {resume_id} finished with nothing left to score: its reports are in {out_dir}/ "
                "(its items left the store once they were written)")  # fmt: skip
            if unused := _unused_when_done(caller, judge_params, judge_limits, judge_threads):
                caller.warn(unused)
        return done

    def finish(store: RunStore, run_id: str) -> RunSummary:
        say(f"writing the reports to {out_dir}/")
        # a cluster's store is its team's, kept RAGSCORE_RUN_TTL_S; an embedded one keeps what out_dir does not
        summary = write_results(store, run_id, out_dir, given_broker, caller=caller, release=out_kept and not broker)
        if on_reports_written is not None:
            on_reports_written()
        if (suite := resolved or resumed) is not None:  # what its embed workers measured, for later dry runs
            mode = "cluster" if broker else "embedded"
            record_rate(settings.home, run_id, suite.suite.embedding, mode, summary.embedding)
        return summary

    # DIR is this process's from before its checks to its reports: a run started at the same instant into it
    # would pass the checks too (DIR/run.json names a run only once it validated)
    with stop_signals_as_interrupt(), claim_out_dir(out_dir), ExitStack() as stack:
        # DIR holds another run's reports (a new run's DIR, a resume's --out OTHER): refused, or moved to previous/ as
        # the run goes ahead; read under the claim, as no other run moves them or writes its own there meanwhile
        takes_over = resume_id is None or run_named(out_dir) != resume_id
        if not takes_over and job is None:  # the job as it started (its gates), DIR/run.json keeps ({}: it has none)
            job = kept_job(recorded_run(out_dir) or {})  # None: unknown, said again (started_job)
        if takes_over:  # a resume into another run's DIR is refused, or moves its reports, as a new run there
            record = recorded_run(out_dir) or {}
            lost = record.get("run_id") if record.get("lost") else None
            replaced = refuse_an_unfinished_run_in(out_dir, given_broker, caller=caller)
            if dataset is not None:
                _refuse_to_overwrite(dataset, out_dir, caller)
        elif resume_id is not None:  # a resume into its own DIR: every run that does not take over
            _refuse_a_lost_run(out_dir, resume_id)
        refuse_files_of_others(out_dir)  # the user's own summary.json, items.csv: no run wrote them (a resume's too)
        if takes_over:  # where the earlier run's reports will move, once the run goes ahead
            refuse_a_bad_previous(out_dir, caller.option("out"))
        if broker:
            store = connect(broker, settings, sends=True, no_broker="" if resume_id else _no_broker(caller))
            for said in eviction_warnings(store, broker, settings):  # said before its work is sent there
                caller.warn(said, EvictionWarning)
            if (done := done_here(store)) is not None:
                return done
            sub = start(store)
            with _recorded_if_lost(out_dir, sub.run_id):
                wait(store, sub.run_id, progress, timeout_s=timeout_s, out_dir=out_dir, broker=given_broker)
            return finish(store, sub.run_id)
        checked: set[str] = set()  # queues whose local resources were checked already
        key_missing: MissingKeyError | None = None  # the judge's, needless where the reply cache answers every call
        if resolved is not None:  # before anything is recorded: what every row needs (routed rows' queues: later)
            checked = {m.queue.value for m, _ in resolved.metrics if m.route is None}
            checked |= {Queue.TARGET.value} if resolved.targets else set()
            try:
                check_local_resources(resolved, sorted(checked))
            except MissingKeyError as exc:  # the judge's, checked last: every other resource is there
                if not resolved.judge_calls_countable:
                    raise
                key_missing = exc
                checked.discard(Queue.JUDGE.value)  # again once the rows are counted: none left to send needs no key
        warm = keep_warm and stack.enter_context(one_warm_run())  # a notebook's: kept for its next call (.warm)
        if warm:
            stop_if_server_lost()
        embedded = EmbeddedRedis(settings.home)
        url = embedded.acquire(lane=True)  # one interrupted in it cleans up itself (a release here would wait on
        # the start lock another process may hold for minutes, swallowing the Ctrl-C)
        # The store, caches and limiter in the server's database 0; the queues in this process's lane.
        lane_env = {"RAGSCORE_STORE_URL": url, "RAGSCORE_RESULT_BACKEND": url}
        lane, registration = embedded.lane, embedded.member
        workers: list[LocalWorkers] = []
        fingerprint = ""  # what the workers were started with (warm.worker_fingerprint)
        work_queues: set[str] = set()  # those the run may send work to, and those a resume's look-up sent some to

        def start_workers(queues: list[str], judge_calls_left: int | None) -> None:
            nonlocal fingerprint
            work_queues.update(queues)
            # a resume with no output left to score still has its shards' finish and its aggregate to run: on the
            # control queue, which every worker serves (the cpu one starts the fastest)
            queues = queues or [Queue.CPU.value]
            if resolved is not None:  # the queues routed rows added (the judge's, when its key awaited the count)
                check_local_resources(resolved, [q for q in queues if q not in checked], judge_calls_left)
            elif resumed is not None:  # the run's own suite, read from the store by start(); no judge left: no key
                check_local_resources(resumed, queues, judge_calls_left)
            if judge_threads is not None and resume_id is None and Queue.JUDGE.value not in queues:
                caller.warn(judge_threads_unused(caller))  # a new run's queues are all it sends work to
            if not warm:
                start_local(queues)
                return
            fingerprint = worker_fingerprint(threads)
            workers[:] = kept_workers(embedded.broker_url, queues, fingerprint, start_local)

        threads = None if judge_threads is None else {Queue.JUDGE.value: judge_threads}

        def start_local(wanted: list[str]) -> LocalWorkers:
            started = LocalWorkers(embedded.broker_url, wanted, settings.home / "logs", concurrency=threads,
                                   env=lane_env, stop_with_parent=True)  # fmt: skip
            workers.append(started)  # before it starts: a Ctrl-C in its start stops it too
            started.start()
            return started

        def start_unserved(queues: list[str]) -> None:
            """A worker for those of ``queues`` (a resume's shard about to be sent to them) that none of the run's
            serves: its progress counters said they had nothing left (:func:`queues_left`), its look-up found some."""
            work_queues.update(queues)
            served = {queue for w in workers for queue in w.queues}
            if missing := [queue for queue in queues if queue not in served]:
                suite = resumed or resolved
                if suite is not None:  # what the worker would fail on (the judge's key): an error now, as at start
                    check_local_resources(suite, missing)
                start_local(missing)

        @shutdown_step
        def stop_workers(finished: bool = False) -> None:
            """Stop the run's workers: an interrupted run's running tasks need not finish (its judge calls under way
            end, and their outputs are written); nothing an interrupted or failed run used is kept (one refused before
            its rows were sent, and so before its workers, leaves the kept ones as they were). A stop signal come
            after it began (a second Ctrl-C), between two workers' stops too, kills every worker at once, not only
            those whose wait it cut short (:func:`.workers.shutdown_step`)."""
            for w in workers:
                w.stop(warm=finished)
            if warm and workers:
                stop_kept()
            workers.clear()  # stopped once: a wait that stopped them leaves nothing to the finally below

        try:
            store = connect_lane(url, embedded.lane or 0, settings, sends=True)
            if key_missing is not None and resolved is not None and not judge_cache_may_answer(resolved, store.r):
                raise key_missing  # refused before the dataset is read, as it would be once its calls were counted
            if (done := done_here(store)) is not None:
                return done
            run_ids: list[str] = []
            finished = False
            try:
                # Workers start only once the whole dataset validated, and boot while rows are submitted.
                sub = start(store, on_validated=start_workers, on_queues=start_unserved)
                run_ids.append(sub.run_id)
                # its own workers serve every queue of the run: no consumer check
                with _recorded_if_lost(out_dir, sub.run_id):
                    wait(
                        store,
                        sub.run_id,
                        progress,
                        check=lambda: [queue for w in workers for queue in w.restart_dead()],
                        timeout_s=timeout_s,
                        consumer_check_s=math.inf,
                        revive=lambda: embedded.acquire(lane=True),  # its server died: start it again from its AOF
                        stop_on_error=stop_workers,
                        on_queues=start_unserved,
                    )
                summary = finish(store, sub.run_id)
                finished = True
            except BaseException:
                # Nobody will serve this run's queued tasks: cancel it so a later run's workers skip them.
                for run_id in run_ids:
                    try:
                        cancel(store, run_id)
                    except redis.RedisError:  # Redis is what failed: the original error says so, not this one
                        log.warning("run %s: could not mark it cancelled (Redis is gone)", run_id)
                raise
            finally:
                if warm and finished and workers:
                    keep(settings.home, embedded.broker_url, fingerprint, workers)
                else:
                    stop_workers(finished)
            # a resume's, said after the fact: its look-up may have sent judge work (start_unserved) its counters said
            # it had none of
            if judge_threads is not None and resume_id is not None and Queue.JUDGE.value not in work_queues:
                caller.warn(judge_threads_unused(caller, resumed=True))
            return summary
        finally:
            embedded.release(given_up=stop_forced)  # a stop forced (a second Ctrl-C) waits for no other's lock
