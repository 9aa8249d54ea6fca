"""What a run's messages do on the broker: which wait and behind what (:func:`queued_ahead`), which queues no worker
serves (:func:`unserved_queues`), which are held by workers that are gone (:func:`held_messages`).

Kept apart from :mod:`.runner` so that ``ragscore status`` imports neither the Celery tasks nor the metrics.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import math
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

import redis

from ragscore_workers.alive import AliveKey, alive_keys, alive_processes, alive_queues, broker_of
from ragscore_workers.app import CONTROL_QUEUE, app
from ragscore_workers.commands import backticked
from ragscore_workers.counts import agree, counted
from ragscore_workers.errors import RagscoreError
from ragscore_workers.kept import RENEW_S
from ragscore_workers.schemas import Suite, item_key
from ragscore_workers.settings import DEFAULT_ORPHAN_CONFIRM_S, Settings, get_settings
from ragscore_workers.stopping import stopping_workers
from ragscore_workers.store import RunStore, redis_client, work_began

from .connection import BROKER_CHECK_S
from .terminal import resume_command, worker_command

__all__ = [
    "CONSUMER_ASK_S",
    "CONSUMER_CHECK_S",
    "HELD_ASK_S",
    "QUEUED_CHECK_S",
    "RECENTLY_TAKEN_S",
    "Ahead",
    "AliveKeys",
    "Finishing",
    "HeldMessages",
    "Orphan",
    "OrphanWatch",
    "broker_idle",
    "held_by_live_workers",
    "held_messages",
    "live_processes",
    "queued_ahead",
    "queued_message",
    "queued_messages",
    "recently_taken",
    "renewed_alive",
    "settled_orphans",
    "unconsumed_queues",
    "unserved_message",
    "unserved_queues",
]

log = logging.getLogger(__name__)

#: Seconds without progress, with messages waiting, before wait() asks the workers which queues they serve.
CONSUMER_CHECK_S = 20.0

#: Seconds the workers are given to answer which queues they consume (:func:`unserved_queues`).
CONSUMER_ASK_S = 1.0

#: Seconds after a worker took a message of a queue during which that queue counts as served though no worker
#: answered the ask (one too busy to answer in time; one killed whole counts as long).
RECENTLY_TAKEN_S = 20.0


@dataclass(frozen=True)
class Orphan:
    """A message of the run held by a worker that is gone: it comes back ``visibility`` s after ``delivered_at``."""

    #: When Redis handed it to that worker (epoch seconds).
    delivered_at: float
    #: The queue it was taken from (``control``: a shard's callback or the aggregation).
    queue: str
    #: The rows its chunk carries not written yet (:meth:`_RowsLeft.of`; 0 for a bookkeeping
    #: task).
    items: int


@dataclass(frozen=True)
class Finishing:
    """A message of the run held by a worker in its warm shutdown (:mod:`ragscore_workers.stopping`), which answers
    no ``inspect`` while it finishes its tasks: not an orphan."""

    #: The stopping worker's name (Celery's hostname, ``cpu@host``).
    worker: str
    #: The queue it was taken from.
    queue: str
    #: The rows its chunk carries not written yet (:meth:`_RowsLeft.of`; 0 for a bookkeeping
    #: task).
    items: int
    #: Whether it runs it (finishes it); False: it took it and did not start it (a prefetch), and its message goes
    #: back to its queue as the worker exits.
    running: bool = True


@dataclass(frozen=True)
class HeldMessages:
    """The run's messages delivered to workers and not acknowledged (kombu's ``unacked`` hash)."""

    #: How many are held in all.
    held: int
    #: Those no live worker holds: their worker was killed whole (kill -9, a lost host), and they come back only
    #: when the visibility timeout has passed since their delivery.
    orphans: list[Orphan]
    #: Held messages no live worker lists that were delivered less than ``ORPHAN_SETTLED_S`` ago: orphans once
    #: settled, unless their worker lists them by then.
    unsettled: int = 0
    #: Those a worker that is stopping cleanly is finishing (it lists none while it does).
    finishing: list[Finishing] = field(default_factory=list)
    #: Held messages no live worker lists, settled, on a queue of a worker that did not answer the ask (one too busy)
    #: and whose key saying it runs is seen renewed (:func:`_renewed_keys`) and may hold them
    #: (:meth:`~ragscore_workers.alive.AliveKey.may_hold`: it lists them, or lists none): no orphans.
    silent: int = 0
    #: Messages this check calls orphaned that the one before it did not (:class:`OrphanWatch`), left out of
    #: ``orphans``: none where the checks are not watched.
    unconfirmed: int = 0


#: Seconds after its delivery before a message no live worker lists is called orphaned (a worker lists what it
#: received a moment after Redis handed it over).
ORPHAN_SETTLED_S = 5.0
#: Seconds the workers are given to list the messages they hold (:func:`held_messages`).
HELD_ASK_S = 1.0
#: Seconds at least between the starts of two checks of an :class:`OrphanWatch` where the first found orphans, by
#: default (``RAGSCORE_ORPHAN_CONFIRM_S``): a worker's key renewed late once (a GC pause, a loaded host) or gone for
#: one read is renewed again by then.
ORPHAN_CONFIRM_S = DEFAULT_ORPHAN_CONFIRM_S
#: Seconds after its end that a check's orphans no longer confirm the next check's (:class:`OrphanWatch`), with the
#: default ``ORPHAN_CONFIRM_S`` (a longer one scales it up): the workers may have changed since (a stall long over, the
#: run at work between), and the next check starts afresh. Timed from its end, and above ``ORPHAN_CONFIRM_S``:
#: :meth:`OrphanWatch.confirmed`'s second check, begun within ``ORPHAN_CONFIRM_S`` of the first's end, is confirmed
#: by it however long the first took (a loaded broker).
ORPHAN_RECENT_S = 3 * ORPHAN_CONFIRM_S
#: Seconds :func:`held_messages` watches the keys of the workers that did not answer for a renewal (each is renewed
#: every ``RENEW_S``): a worker killed whole renews none.
SILENT_RENEWED_S = 2 * RENEW_S


class _Held(NamedTuple):
    """One of the run's held messages (kombu's ``unacked`` entry)."""

    task_id: str
    message: dict[str, Any]
    queue: str


def held_messages(store: RunStore, run_id: str) -> HeldMessages:
    """The run's held messages, and which are held by workers that are gone.

    A message is the run's only if its headers name the run (a shape we do not know counts as held by a live
    worker). Live workers are asked (``HELD_ASK_S``) only when the run has held messages. A message delivered less
    than ``ORPHAN_SETTLED_S`` ago is not called orphaned (its worker may not list it yet), nor one a worker that is
    stopping cleanly says it is finishing (``finishing``: it answers no ``inspect`` meanwhile), nor one that a worker
    that did not answer the ask may hold, whose key saying it runs is renewed within ``SILENT_RENEWED_S`` (``silent``:
    a worker too busy to answer in time, whose messages a cancel would otherwise aggregate as it writes them): its key
    lists the message, or lists none (:meth:`~ragscore_workers.alive.AliveKey.may_hold`; a worker killed whole on a
    queue it shares with such a worker still has its messages called orphaned where that worker's key lists its
    tasks). A worker that answers both asks lists what it runs or waits to run, and its key the rest it holds (a
    retry waiting on its countdown: :func:`_listed_by`), where that key is seen renewed too: a worker killed whole
    leaves its key for its TTL (``RAGSCORE_ALIVE_TTL_S``), and one started under its name at once answers the ask in
    its stead. The keys are watched from before the ask where a held message may be settled by its end
    (:func:`_settles_by_the_ask`: a call whose held messages are all fresh reads none of them)."""
    held: dict[str, _Held] = {}  # by delivery tag
    for tag, raw in cast("dict[str, str]", store.broker.hgetall("unacked")).items():
        if run_id not in raw:
            continue
        try:
            message, _exchange, queue = json.loads(raw)
            held[tag] = _Held(message["headers"]["id"], message, str(queue))
        except (ValueError, LookupError, TypeError):
            return HeldMessages(held=len(held) + 1, orphans=[])
    if not held:
        return HeldMessages(held=0, orphans=[])
    # a worker that renews its key during the ask lives: its keys read before it, where any message may be settled
    before = _recent_alive_keys(store, SILENT_RENEWED_S) if _settles_by_the_ask(store, held) else None
    inspect = app.control.inspect(timeout=HELD_ASK_S)
    replies = [inspect.active() or {}, inspect.reserved() or {}]
    live = {task["id"] for reply in replies for tasks in reply.values() for task in tasks or []}
    now = time.time()
    delivered = _delivered_at(store, held)
    stopping = {
        task_id: (worker, runs) for worker, ids in _stopping_workers(store).items() for task_id, runs in ids.items()
    }
    unlisted, finishing = [], []
    rows = _RowsLeft(store, run_id)
    for (tag, one), at in zip(held.items(), delivered, strict=True):
        if one.task_id in stopping:
            worker, runs = stopping[one.task_id]
            finishing.append(Finishing(worker, one.queue, rows.of(one.message), runs))
        elif one.task_id not in live:
            unlisted.append((tag, at))
    settled = [(tag, at) for tag, at in unlisted if at is not None and now - at >= ORPHAN_SETTLED_S]
    unsettled = len(unlisted) - len(settled)
    # only keys seen renewed tell what their workers hold: a worker killed whole leaves its key for its TTL, and
    # one restarted under its name (same host, same -n) answers the ask in its stead
    on = {held[tag].queue for tag, _ in settled}
    renewed = _renewed_keys(store, on, SILENT_RENEWED_S, before, every=True) if settled else {}
    # a worker that answered both asks listed what it runs or waits to run, not a retry waiting on its countdown
    # (Celery's ``scheduled``, a third ask of ~1 s): its key lists that too
    answered = set(replies[0]) & set(replies[1])
    listed = _listed_by(renewed, answered)
    settled = [(tag, at) for tag, at in settled if held[tag].task_id not in listed]
    # a worker that answered one ask alone listed part of what it holds: its key tells the rest
    silent = {name: key for name, key in renewed.items() if key.worker not in answered}
    orphaned = [(tag, at) for tag, at in settled if not _silently_held(silent, held[tag], at)]
    if renewed:  # read after the keys: one its worker acknowledged after listing its tasks without it is no orphan
        again = _delivered_at(store, [tag for tag, _ in orphaned])
        orphaned = [tagged for tagged, still in zip(orphaned, again, strict=True) if still is not None]
    orphans = [Orphan(at, held[tag].queue, rows.of(held[tag].message)) for tag, at in orphaned]
    return HeldMessages(held=len(held), orphans=orphans, unsettled=unsettled, finishing=finishing,
                        silent=len(settled) - len(orphans))  # fmt: skip


def _silently_held(renewed: AliveKeys, message: _Held, delivered_at: float) -> bool:
    """Whether a worker that did not answer the ask and whose key is seen ``renewed`` may hold ``message``, delivered
    at ``delivered_at`` (:meth:`~ragscore_workers.alive.AliveKey.may_hold`)."""
    return any(message.queue in k.queues and k.may_hold(message.task_id, delivered_at) for k in renewed.values())


def _listed_by(keys: AliveKeys, workers: Collection[str]) -> set[str]:
    """The task ids that the ``keys`` (those seen renewed: not a dead twin's, of the same name) of ``workers``
    (Celery's hostnames) list (:func:`~ragscore_workers.kept.held_task_ids`: what they run, wait to run, or wait on a
    countdown for)."""
    return {task for key in keys.values() if key.worker in workers for task in key.tasks or ()}


def _delivered_at(store: RunStore, tags: Collection[str]) -> list[float | None]:
    """When each of the delivery tags ``tags`` was delivered (kombu's ``unacked_index``, its worker's clock), in their
    order; None for one acknowledged since (one pipelined round trip, of those tags alone)."""
    pipe = store.broker.pipeline(transaction=False)
    for tag in tags:
        pipe.zscore("unacked_index", tag)
    return list(pipe.execute())


def _settles_by_the_ask(store: RunStore, tags: Collection[str]) -> bool:
    """Whether one of the held messages ``tags`` was delivered long enough ago that it may be settled
    (``ORPHAN_SETTLED_S``) once the workers have been asked (``HELD_ASK_S``, twice): only then may :func:`held_messages`
    watch the workers' keys. One settled later all the same (a slow ask) is watched from the ask's end. Only the
    entries of ``tags`` are read (:func:`_delivered_at`), not every run's."""
    soon = time.time() - ORPHAN_SETTLED_S + 2 * HELD_ASK_S
    return any(at is not None and at <= soon for at in _delivered_at(store, tags))


def _stopping_workers(store: RunStore) -> dict[str, dict[str, bool]]:
    """The workers stopping cleanly, by :func:`stopping_workers`; none where the store's user may not read their keys
    (key patterns narrower than the documented ``~ragscore:*``): every held message is then judged by ``inspect``
    alone, as before workers said they stop, not a status that loses its held-work notes to the refusal."""
    try:
        return stopping_workers(store.r)
    except redis.exceptions.NoPermissionError:
        return {}


class _RowsLeft:
    """The rows of the run's held messages that are still to do (:meth:`of`), each suite's outputs resolved once."""

    def __init__(self, store: RunStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        #: Per suite (as a message carries it), metric name -> its outputs; None where it does not resolve here.
        self.outputs: dict[str, dict[str, list[str]] | None] = {}

    def of(self, message: dict[str, Any]) -> int:
        """The rows task ``message`` carries, less those of a scoring task whose outputs are written
        (:meth:`RunStore.written_done`): a worker killed mid-chunk had written some. Those a judge chunk only marked
        scored are held still (progress counts them done, but their worker lost them: the chunk scores them again). 0
        where its body cannot be read, every row it carries where its outputs are not known here (a plugin's metric
        this host lacks): never a reason to fail a status."""
        from ragscore_workers.planning import rows_carried  # planning imports the metrics: only for held work

        try:
            body = message["body"]
            if message.get("properties", {}).get("body_encoding") == "base64":
                body = base64.b64decode(body)
            task, args = message["headers"]["task"], json.loads(body)[0]
            carried = rows_carried(task, args)
        except (ValueError, LookupError, TypeError):
            return 0
        if not carried or not task.startswith("ragscore.score."):
            return carried
        try:
            _run_id, suite, names, rows = args[:4]
            resolved = self._outputs(suite)
            if resolved is None:
                return carried
            outputs = [output for name in names for output in resolved[name]]
            keys = [item_key(row.get("system"), str(row.get("id"))) for row in rows]
        except (ValueError, LookupError, TypeError, AttributeError):
            return carried
        return carried - self.store.written_done(self.run_id, keys, outputs)

    def _outputs(self, suite: str) -> dict[str, list[str]] | None:
        """Metric name -> its outputs, of the suite a message carries (its JSON); None where it does not resolve here
        (:class:`~ragscore_workers.errors.RagscoreError`: a metric unknown to this host)."""
        from ragscore_workers.planning import resolve_suite

        if suite not in self.outputs:
            try:
                self.outputs[suite] = resolve_suite(Suite.stored(suite)).scoring_outputs()
            except (RagscoreError, ValueError):
                self.outputs[suite] = None
        return self.outputs[suite]


class OrphanWatch:
    """The run's held messages at consecutive checks (:meth:`check`), an orphan called one only once two consecutive
    checks call it so: a worker too loaded to record a message it took within ``LISTED_AFTER_S`` (1 s) of its delivery
    (:meth:`~ragscore_workers.alive.AliveKey.may_hold`) has a key that does not list it, and one check calls it an
    orphan; the next reads that key renewed since, which lists it. So is a worker slow to renew its key (a GC pause, a
    busy host): a check after one that found orphans begins ``confirm_s`` (``RAGSCORE_ORPHAN_CONFIRM_S``) after it
    began at the soonest, and one begun more than ``ORPHAN_RECENT_S`` (scaled up to a longer ``confirm_s``) after it
    ended is confirmed by none (a stale check does not confirm a fresh one). A message is known by its queue and
    delivery stamp (a re-delivery is another)."""

    def __init__(self, store: RunStore, run_id: str, confirm_s: float | None = None) -> None:
        self.store, self.run_id = store, run_id
        #: Seconds at least between the starts of a check that found orphans and the next (None: the setting's).
        self.confirm_s = get_settings().orphan_confirm_s if confirm_s is None else confirm_s
        #: The orphans of the last check, by (queue, delivered_at).
        self._seen: set[tuple[str, float]] = set()
        #: When the last check began and ended (``time.monotonic()``).
        self._began = self._ended = -math.inf
        #: How many orphans the last check could not confirm.
        self._unconfirmed = 0
        #: A watch's check put off (:meth:`check_when_due`) until its confirm is due.
        self._put_off = False

    def _recent_s(self) -> float:
        """Seconds after its end that a check's orphans still confirm the next's: ``ORPHAN_RECENT_S``, scaled up to a
        longer ``confirm_s`` of this watch's (never down: a watch refreshing every few seconds must still make its
        follow-up within it where ``confirm_s`` is a moment)."""
        return ORPHAN_RECENT_S * max(1.0, self.confirm_s / ORPHAN_CONFIRM_S)

    def due_in(self) -> float:
        """Seconds until a check may begin that confirms the last one's orphans (0: now, or none to confirm)."""
        if not self._seen or time.monotonic() - self._ended > self._recent_s():
            return 0.0
        return max(0.0, self._began + self.confirm_s - time.monotonic())

    def check(self) -> HeldMessages:
        """One check (:func:`held_messages`), begun once :meth:`due_in` says (waited for here): its orphans those the
        last check called orphaned too, the others counted ``unconfirmed``."""
        time.sleep(self.due_in())
        if time.monotonic() - self._ended > self._recent_s():
            self._seen = set()  # too old to confirm this one: the workers may have changed since
        self._began, self._put_off = time.monotonic(), False
        found = held_messages(self.store, self.run_id)
        self._ended = time.monotonic()
        seen, self._seen = self._seen, {(o.queue, o.delivered_at) for o in found.orphans}
        confirmed = [o for o in found.orphans if (o.queue, o.delivered_at) in seen]
        self._unconfirmed = len(found.orphans) - len(confirmed)
        return replace(found, orphans=confirmed, unconfirmed=self._unconfirmed)

    def check_when_due(self) -> HeldMessages | None:
        """A watched ``ragscore status``'s check: made now where it waits for nothing (:meth:`due_in`), else put off
        (None) to the refresh at which :meth:`follow_up_due` says it is due; never a refresh held for it (the whole
        view frozen)."""
        if self.due_in() > 0:
            self._put_off = True
            return None
        return self.check()

    def follow_up_due(self) -> bool:
        """Whether the last check left orphans unconfirmed, or a check was put off (:meth:`check_when_due`), that a
        check now makes without a wait (:meth:`due_in`): a watched ``ragscore status`` makes it at the refresh it
        comes due, not held in one refresh for it as :meth:`confirmed` holds a one-off status."""
        return (bool(self._unconfirmed) or self._put_off) and self.due_in() == 0

    def confirmed(self, again: Callable[[int], None] | None = None) -> HeldMessages:
        """A check, and a second at once where it has orphans unconfirmed (it reads the keys renewed since the
        first's, ``confirm_s`` after it): what ``ragscore status`` says at each check (a one-off status has only
        one). ``again``: told how many are unconfirmed before that second check (a one-off status says it waits)."""
        found = self.check()
        if not found.unconfirmed:
            return found
        if again is not None:
            again(found.unconfirmed)
        return self.check()


def held_by_live_workers(
    store: RunStore,
    run_id: str,
    said: set[int] | None = None,
    resending_after: float | None = None,
    watch: OrphanWatch | None = None,
    checked: HeldMessages | None = None,
) -> bool:
    """Whether a worker that still runs holds a message of this run (delivered, not acknowledged).

    Orphaned messages (:func:`held_messages`, confirmed by two consecutive checks of ``watch``:
    :meth:`OrphanWatch.confirmed`; None: a watch of this call alone) do not keep the run from counting as stalled (its
    work is re-submitted, and the late re-delivery then skips itself as superseded); a message one check alone calls
    orphaned does (a worker slow to renew its key for one read still runs it). Other runs' messages do not count.
    ``said``: orphan counts already logged (each is logged once); ``resending_after``: the seconds without progress
    after which the caller (a run's :func:`~orchestrator.runner.wait`) sends their work again, which it does now.
    ``checked``: what ``watch`` confirmed a moment ago (the same poll's held note), read in place of a check of its own:
    a second one, where orphans exist, waits the watch's ``confirm_s`` (``RAGSCORE_ORPHAN_CONFIRM_S``) again
    (:meth:`OrphanWatch.check`)."""
    found = checked if checked is not None else (watch or OrphanWatch(store, run_id)).confirmed()
    if len(found.orphans) < found.held:
        return True
    if found.orphans and (said is None or len(found.orphans) not in said):
        held = counted(len(found.orphans), "message")
        timeout = f"RAGSCORE_VISIBILITY_TIMEOUT_S={get_settings().visibility_timeout_s} s after delivery"
        if resending_after is None:
            log.warning("run %s: %s held by workers that are gone (Redis re-delivers them only %s)", run_id, held,
                        timeout)  # fmt: skip
        else:
            log.warning("run %s: %s held by workers that are gone (killed, or their host lost): this run sends their "
                        "work again now, after %.0f s without progress (Redis would re-deliver them only %s)", run_id,
                        held, resending_after, timeout)  # fmt: skip
        if said is not None:
            said.add(len(found.orphans))
    return False


def waiting_queues(store: RunStore, run_id: str) -> dict[str, int]:
    """Queues of the run (and the control queue) with messages waiting, and how many."""
    queues = [*json.loads(store.meta(run_id).get("queues", "[]")), CONTROL_QUEUE]
    pipe = store.broker.pipeline(transaction=False)
    for queue in queues:
        pipe.llen(queue)
    return {queue: n for queue, n in zip(queues, pipe.execute(), strict=True) if n}


def unconsumed_queues(queues: list[str], timeout_s: float = 1.0) -> list[str]:
    """Those of ``queues`` that no live worker consumes (every worker is asked; ``timeout_s`` for the replies, all of
    it: Celery cannot know how many will reply). No queue to ask about asks nobody: a status of a run none of whose
    messages waits (every one taken by a worker) no longer waits that second for nothing."""
    if not queues:
        return []
    replies = app.control.inspect(timeout=timeout_s).active_queues() or {}
    served = {queue["name"] for worker_queues in replies.values() for queue in worker_queues or []}
    return [queue for queue in queues if queue not in served]


def recently_taken(store: RunStore, queues: Collection[str], within_s: float) -> set[str]:
    """Those of ``queues`` a worker took a message from (any run's) in the last ``within_s`` s, as kombu's
    ``unacked`` hash holds it: that queue has a consumer, even one too busy to answer a 1 s ask. A take stamped more
    than ``within_s`` ahead of this host's clock (a worker host's clock ahead) is not counted: it would keep the
    queue of a worker killed whole served for as long as the clocks differ."""
    if not queues:
        return set()
    now = time.time()
    tags = cast("list[str]", store.broker.zrangebyscore("unacked_index", now - within_s, now + within_s))
    found: set[str] = set()
    for raw in cast("list[str | None]", store.broker.hmget("unacked", tags)) if tags else []:
        if raw is None:  # acknowledged meanwhile
            continue
        try:
            found.add(str(json.loads(raw)[2]))
        except (ValueError, LookupError, TypeError):
            continue  # a shape we do not know
    return found & set(queues)


def unserved_queues(
    store: RunStore, run_id: str, skip: set[str] | frozenset[str] = frozenset(), unsure: set[str] | None = None
) -> dict[str, int]:
    """The run's queues (but ``skip``) where messages wait and no worker listens: queue -> messages. A queue counts
    as served when a live worker answers the ask (``CONSUMER_ASK_S``) that it consumes it, else when a worker says
    in the run store that it runs and consumes it (:mod:`ragscore_workers.alive`: a judge worker busy with its 32
    threads may miss the ask, and its tasks outlast the window below), or took a message of it in the last
    ``RECENTLY_TAKEN_S`` s (a worker that does not say it runs), both read at each call. ``unsure``: filled with the
    queues served only by a worker that did not answer (one killed whole a moment ago counts as served until its key
    expires and its last take is past that window)."""
    waiting = waiting_queues(store, run_id)
    asked = unconsumed_queues([q for q in waiting if q not in skip], CONSUMER_ASK_S)
    said = (_alive_queues(store) & set(asked)) | recently_taken(store, asked, RECENTLY_TAKEN_S)
    if unsure is not None:
        unsure.update(said)
    return {queue: waiting[queue] for queue in asked if queue not in said}


def _alive_queues(store: RunStore) -> set[str]:
    """The queues of the broker (its database, on its server) that the workers saying they run consume
    (:func:`alive_queues`); none where the store's user may not read their keys (key patterns narrower than the
    documented ``~ragscore:*``), as :func:`_stopping_workers`."""
    try:
        return alive_queues(store.r, broker_of(store.broker))
    except redis.exceptions.NoPermissionError:
        return set()


def live_processes(broker_url: str, settings: Settings, queue: str) -> int:
    """The pool processes of the workers of the broker at ``broker_url`` that say in its run store that they run and
    consume ``queue`` (:func:`alive_processes`), each Redis asked once, :data:`~.connection.BROKER_CHECK_S` at most,
    by a client closed after; 0 where none does, or either Redis does not answer or refuses (a dry run's hint: never
    its failure, nor a wait for a Redis down)."""
    try:
        with (
            redis_client(settings.store_url or broker_url, BROKER_CHECK_S, retries=0) as store,
            redis_client(broker_url, BROKER_CHECK_S, retries=0) as broker,
        ):
            return alive_processes(store, broker_of(broker), queue)
    except (redis.RedisError, ValueError):  # ValueError: an option redis-py refuses as it connects
        return 0


#: Seconds between two reads of the keys saying workers run, watching one renewed (:func:`renewed_alive`).
RENEWAL_POLL_S = 0.5


#: The keys saying workers run, as :func:`alive_keys` reads them, by key.
AliveKeys = dict[str, AliveKey]


def renewed_alive(store: RunStore, queues: Collection[str], within_s: float) -> set[str]:
    """Those of ``queues`` consumed by a worker whose key saying it runs (:mod:`ragscore_workers.alive`) is seen
    renewed within ``within_s`` s from now (:func:`_renewed_keys`): that worker ran after this call began, where a key
    left by a worker killed whole a moment ago is never renewed (it expires). Returns once each queue has one, or no
    watched key names those left."""
    wanted = set(queues)
    renewed = _renewed_keys(store, wanted, within_s)
    return {queue for key in renewed.values() for queue in key.queues} & wanted


def _renewed_keys(
    store: RunStore,
    queues: set[str],
    within_s: float,
    before: AliveKeys | None = None,
    every: bool = False,
) -> AliveKeys:
    """The keys naming one of ``queues`` seen renewed within ``within_s`` s from now (their time left grew between two
    reads), or since ``before`` (:func:`_recent_alive_keys`, read earlier: then looked at once before any wait), each
    as last read. Only keys renewed in the last ``within_s`` s are watched (:func:`_recent_alive_keys`): one left
    unrenewed longer is a gone worker's, not waited on. Returns once each queue has one renewed, or with ``every``
    once every watched key is (a key not renewed by then is a gone worker's); none where the store's user may not
    read the keys (as :func:`_alive_queues`)."""
    renewed: AliveKeys = {}
    deadline = time.monotonic() + within_s
    seen = _recent_alive_keys(store, within_s) if before is None else before
    pause = 0.0 if before is not None else RENEWAL_POLL_S
    while _watching(seen, renewed, queues, every) and time.monotonic() < deadline:
        time.sleep(pause)
        pause, now = RENEWAL_POLL_S, _recent_alive_keys(store, within_s)
        renewed.update({name: key for name, key in now.items() if name in seen and key.left_ms > seen[name].left_ms})
        seen = now
    return renewed


def _watching(seen: AliveKeys, renewed: AliveKeys, queues: set[str], every: bool) -> bool:
    """Whether a key ``seen`` and not yet ``renewed`` names one of ``queues`` still to be seen served (each of them,
    with ``every``: any that names one)."""
    left = queues if every else queues - {queue for key in renewed.values() for queue in key.queues}
    return any(name not in renewed and key.queues & left for name, key in seen.items())


def _recent_alive_keys(store: RunStore, within_s: float) -> AliveKeys:
    """The keys saying workers of the store's broker run (:func:`alive_keys`) renewed in the last ``within_s`` s
    (:meth:`~ragscore_workers.alive.AliveKey.renewed_within`: their time left over their TTL less ``within_s``); none
    where the store's user may not read them (as
    :func:`_alive_queues`)."""
    try:
        keys = alive_keys(store.r, broker_of(store.broker))
    except redis.exceptions.NoPermissionError:
        return {}
    return {name: key for name, key in keys.items() if key.renewed_within(within_s)}


def unserved_message(queue: str, waiting: int, embedded: bool = False, broker: str | None = None) -> str:
    """What to tell the user about a queue nobody serves (an embedded run's workers live with its ``run``); the
    worker it says to start consumes ``broker`` (the --broker given; None: the one a worker finds by itself)."""
    verb = agree(waiting, "waits", "wait")
    said = f"{counted(waiting, 'message')} {verb} on queue {queue!r} and no worker consumes it"
    if embedded:
        finish = backticked(resume_command("DIR"))
        return f"{said}: an embedded run's workers stop with its `ragscore run`; finish it with {finish}"
    return f"{said}; start one with {backticked(worker_command(queue, broker))} (the run goes on once one does)"


def broker_idle(
    store: RunStore,
    run_id: str,
    said: set[int] | None = None,
    ignore: Collection[str] = frozenset(),
    resending_after: float | None = None,
    watch: OrphanWatch | None = None,
    checked: HeldMessages | None = None,
) -> bool:
    """No message of any queue the run uses (but ``ignore``) is waiting, and none of the run's is held by a live
    worker. ``said``, ``resending_after``, ``watch`` and ``checked``: :func:`held_by_live_workers`'."""
    waiting = waiting_queues(store, run_id)
    return not any(q not in ignore for q in waiting) and not held_by_live_workers(
        store, run_id, said, resending_after, watch, checked
    )


def queued_messages(store: RunStore, run_id: str, page: int = 1000) -> int:
    """The run's messages waiting on its queues (and the control queue): those naming it, as :func:`held_messages`
    tells the run's held ones, not another run's sharing the queues (a later process's, in the lane it took)."""
    found = 0
    for queue in waiting_queues(store, run_id):
        for start in itertools.count(0, page):
            raws = store.broker.lrange(queue, start, start + page - 1)
            found += sum(run_id in raw for raw in raws)
            if len(raws) < page:
                break
    return found


#: Messages and bytes read at most from each end of a queue to find where a run's first message waits
#: (:func:`queued_ahead`): a few tens of milliseconds of Redis, whatever the queue's length (a million messages).
QUEUED_SCAN_MESSAGES = 10_000
QUEUED_SCAN_BYTES = 8 << 20
#: Seconds between two looks at the queues ahead of a run that no worker has begun (:func:`queued_ahead`).
QUEUED_CHECK_S = 5.0

# kombu's Redis transport LPUSHes a message onto the head of its queue's list and BRPOPs from the tail: the tail
# is the oldest. From the tail, the messages read before the first that names the run (``run_id in raw``, as
# :func:`held_messages` tells the run's held ones) are other runs' messages ahead of it. Not found within the
# bounds, the head is read too: a message of the run there means more than were read are ahead of it.
# Returns {messages read from the tail, 1: the run's found there | 0: found from the head only | -1: not found}.
_QUEUED_AHEAD_LUA = """
local run_id, most, budget = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = redis.call('LLEN', KEYS[1])
local function scan(from_tail)
  local read, bytes = 0, 0
  while read < n and read < most and bytes < budget do
    local count = math.min(10, n - read, most - read)
    local page
    if from_tail then
      page = redis.call('LRANGE', KEYS[1], -read - count, -read - 1)
    else
      page = redis.call('LRANGE', KEYS[1], read, read + count - 1)
    end
    if #page == 0 then break end
    for j = 1, #page do
      local raw = from_tail and page[#page - j + 1] or page[j]
      if string.find(raw, run_id, 1, true) then return read, true end
      read, bytes = read + 1, bytes + #raw
    end
  end
  return read, false
end
local read, found = scan(true)
if found then return {read, 1} end
if read >= n then return {read, -1} end
local _, there = scan(false)
return {read, there and 0 or -1}
"""


@dataclass(frozen=True)
class Ahead:
    """Other runs' messages ahead of a run's first message on one queue."""

    #: How many (at least that many, with ``more``).
    messages: int
    #: More than were read are ahead (the queue was read only up to QUEUED_SCAN_MESSAGES or QUEUED_SCAN_BYTES).
    more: bool = False


def queued_ahead(
    store: RunStore, run_id: str, most: int = QUEUED_SCAN_MESSAGES, budget: int = QUEUED_SCAN_BYTES
) -> dict[str, Ahead]:
    """While no worker has taken a task of the run's current attempt (no ``work_began`` stamp of its generation):
    per queue of the run where other runs' messages wait ahead of its first one, how many (not the control queue:
    the run's aggregation is sent there only once its work is done).
    The queues are first come, first served: a run submitted after a large one waits for the large one's messages,
    queued, not stalled. ``{}`` once its work began, and where none of its messages waits behind another run's.
    Each queue is read from its oldest end, ``most`` messages or ``budget`` bytes at most (from its newest end too
    when its first message is not found there): :class:`Ahead` ``more`` says there are more than were read. ``{}``
    from a broker that refuses scripts (the note is an aid, never worth failing the run over)."""
    if work_began(store.meta(run_id)) is not None:
        return {}
    # registered at each look (a local SHA1; the server keeps the script): a cache keyed by the client held it, and
    # with it its connections, for the life of the process (the Script refers to its client: no weak key dies)
    script = store.broker.register_script(_QUEUED_AHEAD_LUA)
    found: dict[str, Ahead] = {}
    for queue in [q for q in waiting_queues(store, run_id) if q != CONTROL_QUEUE]:  # its own come at its end
        try:
            read, where = script(keys=[queue], args=[run_id, most, budget])
        except redis.ResponseError:  # a broker Redis that refuses scripts (ACLs, a managed service): no note
            return {}
        if read and where >= 0:
            found[queue] = Ahead(int(read), more=where == 0)
    return found


def queued_message(ahead: dict[str, Ahead]) -> str:
    """``queued: 12,345 messages of other runs ahead on queue cpu (40 on judge)``, the most first; "" for none."""
    if not ahead:
        return ""
    (first, most), *rest = sorted(ahead.items(), key=lambda qa: (-qa[1].messages, qa[0]))

    def count(a: Ahead) -> str:
        return f"over {a.messages:,}" if a.more else f"{a.messages:,}"

    others = f" ({', '.join(f'{count(a)} on {q}' for q, a in rest)})" if rest else ""
    noun = "message" if most == Ahead(1) else "messages"
    return f"queued: {count(most)} {noun} of other runs ahead on queue {first}{others}"


def settled_orphans(store: RunStore, run_id: str, watch: OrphanWatch | None = None) -> list[Orphan]:
    """The run's messages held by workers that are gone, confirmed by two consecutive checks of ``watch``
    (:meth:`OrphanWatch.confirmed`; None: a watch of this call alone); a worker killed a moment ago has its messages
    told apart from those a live worker is about to list once ``ORPHAN_SETTLED_S`` has passed (waited for here)."""
    watch = watch or OrphanWatch(store, run_id)
    found = watch.confirmed()
    if found.unsettled:
        time.sleep(ORPHAN_SETTLED_S)
        found = watch.confirmed()
    return found.orphans
