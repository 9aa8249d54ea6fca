"""Per-run judge counters, circuit breaker and budget, shared by every judge worker in Redis.

One hash per run, ``ragscore:run:{run_id}:judge`` (expires with the run); the target stage keeps the same
counters and breaker per system under ``ragscore:run:{run_id}:target:{system}``:

=========================  ===================================================================
``calls``                  requests sent to the provider (every attempt, 429s and errors included)
``call_ms``                their time summed, from send to reply or error (the live ETA's floor under
                           ``judge.max_in_flight``: the calls left, that many at a time, each as long as one took)
``cache_hits``             replies served from the reply cache (no call)
``retries``                attempts after the first (transient errors and 429s)
``rate_limited``           429 replies received
``tokens_in/tokens_out``   usage reported by the provider
``cost``                   from the price table (0 when the model has no price)
``parse_failures``         replies without a valid rating / JSON score
``usage_estimated``        replies without token usage: their tokens and cost are estimated from the text
``failures``               calls that failed for good (after their retries)
``consecutive_failures``   failures since the last success (the breaker's count); the judge's, per judge limiter:
                           ``consecutive_failures:{limiter key}``
``breaker``                why calls stopped, once the breaker is open; the judge's, per judge limiter
                           (``breaker:{limiter key}``: provider, model and a hash of endpoint and key), so a key the
                           provider refuses stops only the judge metrics that read it (:func:`judge_breakers`)
``run_stopper``            ``1`` when the breaker opened at once for a run stopper (a refused key, a model the provider
                           lacks: the configuration, which every call would repeat), or one came back after the count
                           of failures in a row opened it (its reason then replaces the count's); the judge's, per
                           judge limiter (``run_stopper:{limiter key}``). The items it stops record an error, not a
                           stop (:meth:`RunJudgeState.is_run_stopper`)
``replaced_breaker``       the count's reason a run stopper replaced (per judge limiter: ``replaced_breaker:{limiter
                           key}``): the items it stopped are recorded as the run stopper's errors
                           (:func:`replaced_stops`)
``budget``                 why judging stopped, once ``max_cost`` / ``max_tokens`` would be passed
``held_tokens/held_cost``  what budgeted calls in flight hold (their high estimates) until they end; each hold is
                           also in ``…:judge:holds`` (a sorted set by expiry, Redis's clock), so the hold of a
                           call whose worker was killed (SIGKILL, out of memory, a lost host) lapses after
                           ``hold_s``: longer than one attempt may take
``provider_rpm`` …         a limit the provider's headers state below the suite's (``provider_tpm``,
                           ``provider_rpd``), which the workers use instead
``base_url``               the endpoint the workers called, when ``RAGSCORE_JUDGE_BASE_URL`` overrode the suite's
``called_at``              the store's clock (whole seconds) when a call was last counted: ``ragscore status`` reads a
                           judge run whose calls go out as at work, though its items end seldom (a target's
                           calls stamp the run's meta ``target_called_at`` instead, and add to its ``progress``
                           ``target_calls``: read as work too, for all its targets at once)
=========================  ===================================================================

Beside it, ``…:judge:wait`` (``…:targets:wait`` for the target stage, one for all its targets:
:data:`~ragscore_workers.store.WAIT_PARTS`; a hash that expires seconds after the last of its waiting calls wrote it:
they write again while they wait) says what the run's calls wait on at the shared limiter, when one waits
:data:`~.ratelimit.WAIT_NOTE_S` or more: ``on`` (``pause``, ``rpm``, ``tpm``, ``rpd``, ``tpd``, ``slot``), ``limit``,
``waiting`` (of a ``slot``: the calls waiting for one of ``judge.max_in_flight``), ``until``
(ms, the store's clock: when the next of its waiting calls may go; a 429's pause before a limit's wait of the same
target or judge limiter), ``reason`` (of a pause) and ``who`` (the target whose calls wait, by its ``system`` name,
``""`` for a run's only target, unnamed; for the judge's, their limiter's name: :meth:`RunJudgeState.note_limiter`).
:meth:`RunStore.progress` reads it (``judge_wait_*``, ``target_wait_*``): a run held by its rate limit or a provider's
429 pause is said to wait on it, not to make no progress.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..die_with_parent import parent_gone
from ..schemas import JUDGE_COUNTERS, MetricResult, target_name
from ..store import JUDGE_LIMITERS_PART, WAIT_PARTS, RunState, RunStore, target_state_part
from .ratelimit import WAIT_REFRESH_S, Wait

__all__ = [
    "COUNTER_FIELDS",
    "HOLD_MARGIN_S",
    "HOLD_S",
    "INTERNAL_FIELDS",
    "STOP_READ_EVERY_S",
    "UNREPORTED_FIELDS",
    "WAIT_WRITE_EVERY_S",
    "Hold",
    "RunJudgeState",
    "as_run_stopper_errors",
    "breaker_summary",
    "holds_key",
    "judge_breakers",
    "replaced_stops",
    "run_judge_key",
    "scoped_breaker_field",
]

#: How long a budgeted call's hold lasts at most, unless the caller says (the judge client: its limiter's
#: ``max_wait_s`` plus ``http_body.ATTEMPT_TIMEOUTS`` HTTP timeouts plus ``HOLD_MARGIN_S``, what one attempt
#: may take; no Celery time limit bounds it, the judge's thread pool enforces none). A call that ends gives its
#: hold back at once: this only bounds what a killed worker's calls keep.
HOLD_S = 900.0
HOLD_MARGIN_S = 60.0

#: Seconds a state object answers :meth:`RunJudgeState.stop_reason` from its last read: every thread of a task
#: waiting at the rate limit asks each second (hundreds of identical reads a second per worker, after a 429).
STOP_READ_EVERY_S = 1.0

#: Characters of the last error a breaker's reason quotes: its start and its end (where a hint such as "is the
#: server running?" is), the middle cut out.
LAST_ERROR_CHARS = 200

#: Numeric fields the run summary reports (``summary.judge``).
COUNTER_FIELDS = JUDGE_COUNTERS

#: Why a call did not start in a run ``ragscore cancel`` cancelled (calls already started end; none starts).
CANCELLED_REASON = "run cancelled"
#: Why a call did not start in a worker of an embedded run whose process is gone (``die_with_parent``).
ORPHANED_REASON = "the process that started this worker exited"

# KEYS[1] = hash: its ``called_at`` is the store's clock now (one clock for every worker host).
_CALLED_AT_LUA = "redis.call('HSET', KEYS[1], 'called_at', redis.call('TIME')[1])"

# KEYS[1] = the run's meta, KEYS[2] = its progress; ARGV[1] = target calls sent. Stamps the meta's
# ``target_called_at`` (the store's clock, whole seconds) and counts ``target_calls``, unless the run's keys are gone
# (they expired): a straggler's count made them again without a TTL, a run found forever (as ``progress_at``).
_TARGET_CALLED_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'target_called_at', redis.call('TIME')[1])
  redis.call('HINCRBY', KEYS[2], 'target_calls', ARGV[1])
end
"""

# KEYS[1] = the run's wait hash; ARGV = on, limit, until ms, reason, now ms, ttl ms, who (the target whose calls wait;
# the judge limiter's name for the judge's). Keeps the wait still to come that the next call of the run goes after: of
# the same limiter (``who``), a pause (it holds all its calls) before a limit's wait, else the soonest (another
# target's or judge limiter's pause holds none of this one's calls); else writes this one. Either way the hash lives
# ttl more (its waiting calls write again while they wait: once none does, a worker that died among them, it is gone
# within ttl). Returns the ``until`` it keeps: once that passed, a call that still waits writes again. The one rule of
# which wait is said: a process's throttle (:data:`WAIT_WRITE_EVERY_S`) only spares writes of waits alike.
_WAIT_LUA = """
local now, new = tonumber(ARGV[5]), tonumber(ARGV[3])
local old = tonumber(redis.call('HGET', KEYS[1], 'until') or '')
local keep = false
if old and old > now then
  local was_pause, is_pause = redis.call('HGET', KEYS[1], 'on') == 'pause', ARGV[1] == 'pause'
  if redis.call('HGET', KEYS[1], 'who') ~= ARGV[7] then was_pause, is_pause = false, false end
  keep = (was_pause and not is_pause) or (was_pause == is_pause and old <= new)
end
if not keep then
  redis.call('HSET', KEYS[1], 'on', ARGV[1], 'limit', ARGV[2], 'until', ARGV[3], 'reason', ARGV[4], 'who', ARGV[7],
             'waiting', ARGV[8])
  old = new
elseif redis.call('HGET', KEYS[1], 'on') == ARGV[1] and redis.call('HGET', KEYS[1], 'who') == ARGV[7] then
  redis.call('HSET', KEYS[1], 'waiting', ARGV[8])
end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[6]))
return old
"""
#: How long (ms) a wait's hash outlives the last write of a call still waiting. A process whose calls wait writes again
#: within about 3 s: each call tells again :data:`~.ratelimit.WAIT_REFRESH_S` (2 s) after it told, at its next attempt
#: (within :data:`~.ratelimit.CHECK_EVERY_S`, 1 s, more), and the process writes at the first tell once
#: :data:`WAIT_WRITE_EVERY_S` (1.5 s) passed; at once when the wait kept passed (its calls told of it wake then). Up to
#: about 4.5 s only where the call that wrote stopped waiting before the wait kept passed (its run cancelled). The
#: reader also ignores a wait whose time has passed.
WAIT_TTL_MS = 5000
#: Least time (seconds) between two writes of a run's wait note by one process for waits alike, unless
#: :class:`_Note`'s rule writes one at once: its many waiting calls (each tells every
#: :data:`~.ratelimit.WAIT_REFRESH_S`) write about once per refresh between them, not once each. Under the refresh, so
#: that a single waiting call writes at each of its own: the note does not lapse while a call waits.
WAIT_WRITE_EVERY_S = 0.75 * WAIT_REFRESH_S
#: How much sooner (ms) a wait must end than the one alike this process wrote lately to be written at once. Not 1: the
#: same pause read by two calls may end 1 ms apart (the limiter adds its PTTL to Redis's ``TIME``: two readings of the
#: clock, each cut to whole ms), and each read 1 ms sooner was written. Far under the whole seconds the progress says.
WAIT_SOONER_MS = 100


@dataclass
class _Written:
    """A wait this process last wrote into a run's note, of its kind: its ``until`` (ms, Redis's clock) and when
    (monotonic seconds)."""

    until_ms: int
    at: float


@dataclass
class _Note:
    """What one process knows of a run's wait note (``…:wait``) from its own writes: ``written``, per kind of wait
    (its ``on`` and ``who``: the limit or pause, and the target or judge limiter), the last one written; ``kept_until``,
    the ``until`` of the wait the note kept at the last write of any kind (the store's answer; the wait on its way until
    that answer comes, so the process's other calls do not write it too), ``kept_at`` when that write began.

    The rule: a waiting call writes its wait when no wait alike was written within :data:`WAIT_WRITE_EVERY_S` (a kind
    or limiter the process has not written lately), when its wait ends :data:`WAIT_SOONER_MS` or more sooner than the
    one alike written, when that one or the note's kept one has passed, or else once :data:`WAIT_WRITE_EVERY_S` since
    the wait alike was written; never more. Which wait the note says is the store script's rule alone (``_WAIT_LUA``):
    a write this rule spares is one the script would not keep, as far as the process's own writes tell (a wait alike,
    no sooner, while the wait that replaced or refused it is still to come), or would keep only to say a time under
    :data:`WAIT_SOONER_MS` sooner; only the note's expiry is renewed less often."""

    kept_until: int = 0
    kept_at: float = float("-inf")
    written: dict[tuple[str, str], _Written] = field(default_factory=dict)

    def due(self, kind: tuple[str, str], wait: Wait, now: float) -> bool:
        """Whether ``wait`` of ``kind``, told at monotonic time ``now``, is written (the rule above)."""
        last = self.written.get(kind)
        return (
            last is None
            or wait.until_ms <= last.until_ms - WAIT_SOONER_MS
            or wait.now_ms >= min(last.until_ms, self.kept_until)
            or now - last.at >= WAIT_WRITE_EVERY_S
        )

    def writing(self, kind: tuple[str, str], wait: Wait, now: float) -> None:
        """``wait`` is on its way to the store: taken for written, and for the wait the note keeps."""
        self.written[kind] = _Written(wait.until_ms, now)
        self.kept_until, self.kept_at = wait.until_ms, now

    def kept(self, until_ms: int, at: float) -> None:
        """The store's answer to the write begun at ``at``: the note keeps ``until_ms`` (unless a later write began)."""
        if self.kept_at <= at:
            self.kept_until = until_ms

    def lost(self, kind: tuple[str, str], at: float) -> None:
        """The write begun at ``at`` failed: neither written nor kept (the next waiting call writes), unless a later
        write began."""
        if (last := self.written.get(kind)) is not None and last.at == at:
            del self.written[kind]
        if self.kept_at == at:
            self.kept_until, self.kept_at = 0, float("-inf")

    def forget_older(self, now: float) -> None:
        """Drops the waits written :data:`WAIT_WRITE_EVERY_S` ago or more (the rule writes their kind at once)."""
        for kind in [k for k, last in self.written.items() if now - last.at >= WAIT_WRITE_EVERY_S]:
            del self.written[kind]


def _middle_cut(text: str, chars: int) -> str:
    """``text``, or its start and its end with "…" between, ``chars`` characters in all, where it is longer."""
    if len(text) <= chars:
        return text
    head = (chars - 1) // 2
    return f"{text[:head]}…{text[len(text) - (chars - 1 - head) :]}"


# Per process, not per state object: a judge worker builds one per batch, and its threads wait together.
_notes: dict[str, _Note] = {}  # wait key -> what this process wrote there lately
_notes_lock = threading.Lock()


# KEYS[1] = hash; ARGV[1] = threshold, ARGV[2] = reason, ARGV[3] = ttl, ARGV[4] = the breaker's count field, ARGV[5]
# its reason field (:attr:`RunJudgeState.breaker_field`), ARGV[6] its run-stopper mark ('' = not a run stopper), ARGV[7]
# the field keeping the reason a run stopper replaced. The first run stopper sets the mark and its reason, though the
# count of failures in a row opened the breaker first (a refused key is the configuration to fix whatever stopped the
# calls before it): the count's reason, which the items stopped meanwhile hold, is kept in ARGV[7], so that the
# aggregate records them as the run stopper's errors (:func:`replaced_stops`). Returns 1 when this call opened it.
_FAILURE_LUA = """
redis.call('HINCRBY', KEYS[1], 'failures', 1)
local n = redis.call('HINCRBY', KEYS[1], ARGV[4], 1)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
if n >= tonumber(ARGV[1]) then
  local opened = redis.call('HSETNX', KEYS[1], ARGV[5], ARGV[2])
  if ARGV[6] ~= '' and redis.call('HSETNX', KEYS[1], ARGV[6], 1) == 1 then
    if opened == 0 then redis.call('HSET', KEYS[1], ARGV[7], redis.call('HGET', KEYS[1], ARGV[5])) end
    redis.call('HSET', KEYS[1], ARGV[5], ARGV[2])
  end
  return opened
end
return 0
"""


# A budgeted call's start, atomically: refuse it when the breaker is open, or when what the run used, plus what
# calls in flight hold, plus this call's high estimate would pass a budget; else hold the estimate for ARGV[6] s
# (Redis's clock: every worker host reads the same one). Holds past their expiry (their call's worker was
# killed) are given back first.
# KEYS[1] = hash, KEYS[2] = the run's meta (a cancelled run starts no call), KEYS[3] = holds (member
# 'id|tokens|cost', score = expiry); ARGV = est_tokens, est_cost, max_tokens ('' = none), max_cost ('' = none),
# ttl, hold_s, hold id, the breaker's field (:attr:`RunJudgeState.breaker_field`), its run-stopper mark's.
# Returns {'breaker', reason, run stopper mark or ''} | {'tokens', used, held} | {'cost', used, held} | {'ok'}.
_RESERVE_LUA = (
    """
local h = KEYS[1]
if redis.call('HGET', KEYS[2], 'state') == '"""
    + RunState.CANCELLED
    + """' then return {'breaker', '"""
    + CANCELLED_REASON
    + """'} end
local breaker = redis.call('HGET', h, ARGV[8])
if breaker then return {'breaker', breaker, redis.call('HGET', h, ARGV[9]) or ''} end
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, member in ipairs(lapsed) do
  local tokens, cost = string.match(member, '^[^|]*|([^|]*)|([^|]*)$')
  redis.call('HINCRBY', h, 'held_tokens', -tonumber(tokens))
  redis.call('HINCRBYFLOAT', h, 'held_cost', -tonumber(cost))
end
if #lapsed > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now) end
local used = tonumber(redis.call('HGET', h, 'tokens_in') or '0') + tonumber(redis.call('HGET', h, 'tokens_out') or '0')
local held = tonumber(redis.call('HGET', h, 'held_tokens') or '0')
if ARGV[3] ~= '' and used + held + tonumber(ARGV[1]) > tonumber(ARGV[3]) then
  return {'tokens', tostring(used), tostring(held)}
end
local cost = tonumber(redis.call('HGET', h, 'cost') or '0')
local held_cost = tonumber(redis.call('HGET', h, 'held_cost') or '0')
if ARGV[4] ~= '' and cost + held_cost + tonumber(ARGV[2]) > tonumber(ARGV[4]) then
  return {'cost', tostring(cost), tostring(held_cost)}
end
redis.call('HINCRBY', h, 'held_tokens', ARGV[1])
redis.call('HINCRBYFLOAT', h, 'held_cost', ARGV[2])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[6]), ARGV[7] .. '|' .. ARGV[1] .. '|' .. ARGV[2])
redis.call('EXPIRE', h, tonumber(ARGV[5]))
redis.call('EXPIRE', KEYS[3], tonumber(ARGV[5]))
return {'ok'}
"""
)

# A call's end gives back its hold, unless it lapsed already (then the reserve script gave it back).
# KEYS[1] = hash, KEYS[2] = holds; ARGV = member, tokens, cost.
_RELEASE_LUA = """
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'held_tokens', -tonumber(ARGV[2]))
  redis.call('HINCRBYFLOAT', KEYS[1], 'held_cost', -tonumber(ARGV[3]))
end
return 0
"""
#: Fields of the hash that are bookkeeping, not results (left out of the run summary), cleared by a resume.
INTERNAL_FIELDS = ("consecutive_failures", "held_tokens", "held_cost", "called_at", "run_stopper", "replaced_breaker")
#: Fields left out of the run summary: :data:`INTERNAL_FIELDS` and ``call_ms``, a counter a resume keeps (as it keeps
#: ``calls``: the live ETA's floor divides one by the other).
UNREPORTED_FIELDS = (*INTERNAL_FIELDS, "call_ms")
#: The start of a judge limiter's own breaker fields (its reason; its count of failures in a row) in the run's hash.
BREAKER_PREFIX = "breaker:"
FAILING_PREFIX = "consecutive_failures:"
#: The start of a judge limiter's run-stopper mark: its breaker opened for the configuration (:meth:`is_run_stopper`).
STOPPER_PREFIX = "run_stopper:"
#: The start of the field keeping a judge limiter's breaker reason that a run stopper replaced (:func:`replaced_stops`).
REPLACED_PREFIX = "replaced_breaker:"
#: A breaker's text fields as a judge without a limiter scope (and a target) writes them: reasons, never counters.
UNSCOPED_REASON_FIELDS = ("breaker", "replaced_breaker")


class Hold(NamedTuple):
    """What :meth:`RunJudgeState.reserve` held for one call: given back by :meth:`RunJudgeState.incr`."""

    member: str
    tokens: int
    cost: float


def run_judge_key(run_id: str) -> str:
    return RunStore.key(run_id, "judge")


def scoped_breaker_field(name: str) -> bool:
    """Whether ``name`` is a field of one judge limiter's breaker (its reason, its count or its run-stopper mark), not a
    run's counter."""
    return name.startswith((BREAKER_PREFIX, FAILING_PREFIX, STOPPER_PREFIX, REPLACED_PREFIX))


def replaced_stops(fields: dict[str, Any]) -> dict[str, str]:
    """Per breaker reason of the count of failures in a row that a run stopper (a refused key, a model the provider
    lacks) replaced after it opened, the run stopper's reason, from the run's judge hash ``fields``: the items the
    count's reason stopped meanwhile (before the refused call came back, or on another worker within the second it
    reads the breaker) are the run stopper's errors, as every later item is. A stored item names only its reason, not
    its judge: a count's reason that another judge's breaker holds too (still open on its own count: two keys at one
    failing provider), or that two run stoppers replaced, is left out, its items left ``stopped`` (a resume judges them
    again), never made the error of a key they did not read."""
    replaced: dict[str, str] = {}
    ambiguous = {str(v) for k, v in fields.items() if k == "breaker" or k.startswith(BREAKER_PREFIX)}
    for name, old in fields.items():
        if name == "replaced_breaker":
            now = fields.get("breaker", old)
        elif name.startswith(REPLACED_PREFIX):
            now = fields.get(BREAKER_PREFIX + name.removeprefix(REPLACED_PREFIX), old)
        else:
            continue
        if replaced.setdefault(str(old), str(now)) != str(now):
            ambiguous.add(str(old))
    return {old: now for old, now in replaced.items() if old not in ambiguous}


def as_run_stopper_errors(metrics: dict[str, dict[str, Any]], replaced: dict[str, str]) -> dict[str, MetricResult]:
    """The outputs of an item as stored (``metrics``: output -> result dict) that a breaker reason a run stopper
    replaced stopped (``replaced``: :func:`replaced_stops`), each as that run stopper's error (what to fix, which a
    resume judges again), their other details kept."""
    errors: dict[str, MetricResult] = {}
    for name, result in metrics.items():
        details = result.get("details") or {}
        if details.get("stopped") and (error := replaced.get(str(details.get("reason")))) is not None:
            kept = {k: v for k, v in details.items() if k not in ("reason", "stopped")}
            errors[name] = MetricResult(score=None, error=error, details=kept)
    return errors


def judge_breakers(fields: dict[str, Any], limiters: dict[str, str]) -> dict[str, str]:
    """The judges whose breaker opened, by the name of their limiter (``limiters``: limiter key -> name, the run's
    ``…:judge:limiters``; ``provider/model`` for one not named there, never its key's hash), each with why, from the
    run's judge hash ``fields``. Limiters of one name (a key rotated mid-run, workers judging at other endpoints)
    are one judge: their distinct reasons, ``; `` between them."""
    stopped: dict[str, list[str]] = {}
    for name, reason in sorted(fields.items()):
        if name.startswith(BREAKER_PREFIX):
            scope = name.removeprefix(BREAKER_PREFIX)  # provider:model:hash
            judge = limiters.get(scope) or scope.rpartition(":")[0].replace(":", "/", 1)
            if str(reason) not in stopped.setdefault(judge, []):
                stopped[judge].append(str(reason))
    return {judge: "; ".join(reasons) for judge, reasons in stopped.items()}


def breaker_summary(fields: dict[str, Any], limiters: dict[str, str]) -> dict[str, Any]:
    """The run's judge hash ``fields`` as its summary says them: bookkeeping left out, and ``breaker`` (when a judge's
    opened) why judging stopped: the reason as it is in a run with one judge (by name: :func:`judge_breakers`), else
    each judge's that stopped, by its name (``groq/m with the key in JUDGE_KEY_B: the groq judge's key was refused
    ...``), ``; `` between them."""
    out = {k: v for k, v in fields.items() if k not in UNREPORTED_FIELDS and not scoped_breaker_field(k)}
    stopped = judge_breakers(fields, limiters)
    if len(stopped) == 1 and len(set(limiters.values())) <= 1:
        out["breaker"] = next(iter(stopped.values()))
    elif stopped:
        out["breaker"] = "; ".join(f"{name}: {reason}" for name, reason in stopped.items())
    return out


def holds_key(state_key: str) -> str:
    """The sorted set of budget holds beside a run's counters hash ``state_key`` (judge, or a target's)."""
    return f"{state_key}:holds"


class RunJudgeState:
    """Counters, breaker and budget checks of one run."""

    def __init__(
        self,
        redis: Any,
        run_id: str,
        *,
        ttl_s: int,
        hold_s: float = HOLD_S,
        target: str | None = None,
        limiter: str = "",
        scope: str = "",
    ) -> None:
        """The judge's state (``target`` None), or target ``target``'s (``""``: the unnamed one; build it with
        :meth:`for_target`): its counters and breaker under :func:`~ragscore_workers.store.target_state_part` of its
        name (:func:`~ragscore_workers.schemas.target_name`), its waits noted as the target stage's and naming it by
        its ``system`` (``""`` for the unnamed target's: the progress says "the target's rate limit", not "target
        target's"). The judge's waits name its ``limiter`` (:meth:`note_limiter`; the progress says it only where the
        run has several). ``scope`` (the judge's limiter key) gives the judge a breaker of its own per limiter: a
        refused key, a model the endpoint lacks or a dead endpoint stops the judge metrics that call it, not others."""
        name = None if target is None else target_name(target)
        self.r = redis
        self.who = limiter if target is None else target
        self.key = RunStore.key(run_id, "judge" if name is None else target_state_part(name))
        self.meta_key = RunStore.key(run_id, "meta")
        self.limiters_key = RunStore.key(run_id, JUDGE_LIMITERS_PART)
        self.holds_key = holds_key(self.key)
        self.ttl_s = ttl_s
        self.what = "judge calls" if name is None else f"calls to target {name}"
        # a target's counted calls stamp the run's meta and progress (one read for all its targets): None, the judge's
        self.progress_key = None if name is None else RunStore.key(run_id, "progress")
        self.hold_s = hold_s
        self.breaker_field = f"{BREAKER_PREFIX}{scope}" if scope else "breaker"
        self.failing_field = f"{FAILING_PREFIX}{scope}" if scope else "consecutive_failures"
        self.stopper_field = f"{STOPPER_PREFIX}{scope}" if scope else "run_stopper"
        self.replaced_field = f"{REPLACED_PREFIX}{scope}" if scope else "replaced_breaker"
        self._breaker_fields = (self.breaker_field, self.stopper_field)  # what the reserve script reads
        self._failure = redis.register_script(_FAILURE_LUA)
        self._reserve = redis.register_script(_RESERVE_LUA)
        self._release = redis.register_script(_RELEASE_LUA)
        self._called_at = redis.register_script(_CALLED_AT_LUA)
        self._target_called = redis.register_script(_TARGET_CALLED_LUA)
        self._wait = redis.register_script(_WAIT_LUA)
        self.wait_key = RunStore.key(run_id, WAIT_PARTS["judge" if target is None else "target"])  # one for all targets
        self._stop_lock = threading.Lock()
        self._stop_read_at = float("-inf")  # monotonic time of the last read: none yet
        self._stopped: str | None = None
        self._run_stoppers: set[str] = set()  # breaker reasons read with their run-stopper mark

    @classmethod
    def for_target(cls, redis: Any, run_id: str, system: str | None, *, ttl_s: int) -> RunJudgeState:
        """The state of the run's target ``system`` (its :attr:`~ragscore_workers.schemas.TargetConfig.system`:
        ``None`` or ``""`` for a suite's only target, unnamed; never the judge's)."""
        return cls(redis, run_id, ttl_s=ttl_s, target=system or "")

    def incr(
        self, *, cost: float = 0.0, reset_failures: bool = False, release: Hold | None = None, **counts: int
    ) -> None:
        """Add to counters (one round trip); ``reset_failures`` marks a success for the breaker; ``release``
        gives back what :meth:`reserve` held for the call. Counted ``calls`` stamp ``called_at`` (a target's: the
        run's ``target_called_at``, and add to its ``target_calls``: the progress views read them as work)."""
        pipe = self.r.pipeline(transaction=False)
        for name, value in counts.items():
            if value:
                pipe.hincrby(self.key, name, value)
        if counts.get("calls") and self.progress_key is None:
            self._called_at(keys=[self.key], client=pipe)
        elif counts.get("calls"):
            self._target_called(keys=[self.meta_key, self.progress_key], args=[counts["calls"]], client=pipe)
        if cost:
            pipe.hincrbyfloat(self.key, "cost", cost)
        if release is not None:
            self._release(keys=[self.key, self.holds_key], args=[*release], client=pipe)
        if reset_failures:
            pipe.hset(self.key, self.failing_field, 0)
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def note_wait(self, wait: Wait) -> int:
        """A call of the run waits on the shared limiter (:meth:`RedisLimiter.acquire`'s ``on_wait``): kept in
        ``…:wait`` for the progress views to say so (``_WAIT_LUA`` keeps the wait said: of one target, a pause before
        a limit's wait; else the soonest), for :data:`WAIT_TTL_MS` more. Written by this process when :class:`_Note`'s
        rule says so (thread-safe). Returns the ``until`` (ms, Redis's clock) of the wait kept: the call tells again
        once that has passed (the run's next call goes then, this one may wait on)."""
        now, kind = time.monotonic(), (wait.on, self.who)
        with _notes_lock:
            note = _notes.get(self.wait_key) or _Note()
            if not note.due(kind, wait, now):
                # the call tells again once the wait kept passed (the limiter wakes it then), or at its own refresh,
                # when the process may write again. Not at the write window's end: the limiter woke every call
                # skipped in the window as it closed, together, an attempt more each per window.
                return note.kept_until
            for key, other in list(_notes.items()):  # what the rule no longer reads
                other.forget_older(now)
                if not other.written:
                    del _notes[key]
            note.writing(kind, wait, now)
            _notes[self.wait_key] = note
        args = [wait.on, wait.limit, wait.until_ms, wait.reason[:300], wait.now_ms, WAIT_TTL_MS, self.who, wait.waiting]
        try:
            until = int(self._wait(keys=[self.wait_key], args=args))
        except BaseException:
            with _notes_lock:  # not written: the next waiting call writes it (unless another thread wrote since)
                note.lost(kind, now)
            raise
        with _notes_lock:
            note.kept(until, now)
        return until

    def note_limiter(self, limiter_key: str) -> None:
        """The judge's calls go through the limiter ``limiter_key`` (its :meth:`Provider.limiter_key`), whose waits
        this state names by its ``limiter``: kept in ``…:judge:limiters`` (limiter key -> that name), so that a run
        whose judge calls go through more than one says which waits (the name never holds the key, nor its hash)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.limiters_key, limiter_key, self.who)
        pipe.expire(self.limiters_key, self.ttl_s)
        pipe.execute()

    def note(self, field: str, value: int | str) -> None:
        """Set one field (a fact such as ``provider_rpm`` or ``base_url``, not a counter)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.key, field, value)
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def record_failure(self, threshold: int, last_error: str, *, reason: str | None = None) -> bool:
        """Count a call that failed for good; open the breaker at ``threshold`` in a row, or at once for ``reason``
        (why every call would fail so: a model the provider lacks), which also marks a breaker the count opened
        before it a run stopper's. The reason quotes ``last_error`` cut in its middle to :data:`LAST_ERROR_CHARS`.
        True if opened now."""
        at, stopper = (threshold, "") if reason is None else (1, self.stopper_field)
        last = _middle_cut(last_error, LAST_ERROR_CHARS)
        reason = reason or f"circuit breaker open after {threshold} consecutive failed {self.what} (last: {last})"
        fields = [self.failing_field, self.breaker_field, stopper, self.replaced_field]
        opened = bool(self._failure(keys=[self.key], args=[at, reason[:500], self.ttl_s, *fields]))
        with self._stop_lock:  # the next stop_reason reads again: the breaker this failure opened stops the next call
            self._stop_read_at = float("-inf")
        return opened

    def reserve(
        self, tokens: int, cost: float, max_cost: float | None, max_tokens: int | None
    ) -> tuple[str | None, Hold | None]:
        """Start a call: ``(why it may not start, what it holds)``. It may not when the breaker is open, or when
        what was used, plus what calls in flight hold, plus its own high estimate would pass a budget. A call
        that starts under a budget holds ``(tokens, cost)`` until :meth:`incr` releases them, or for ``hold_s`` at
        most (without a budget it holds nothing): so a budget is a cap, whatever number of calls run at once."""
        if max_cost is None and max_tokens is None or parent_gone():
            return self.stop_reason(), None
        limits = ["" if max_tokens is None else max_tokens, "" if max_cost is None else repr(max_cost)]
        hold_id = uuid.uuid4().hex
        raw = self._reserve(
            keys=[self.key, self.meta_key, self.holds_key],
            args=[tokens, repr(cost), *limits, self.ttl_s, repr(self.hold_s), hold_id, *self._breaker_fields],
        )
        answer = [v.decode() if isinstance(v, bytes) else str(v) for v in raw]
        kind = answer[0]
        if kind == "ok":
            return None, Hold(f"{hold_id}|{tokens}|{cost!r}", tokens, cost)
        if kind == "breaker":
            return self._breaker_read(answer[1], answer[2]), None
        used, held = (int(float(v)) for v in answer[1:]) if kind == "tokens" else (float(v) for v in answer[1:])
        # Each stopped item gets the same reason (so a report's reasons group); the summary keeps, once, how
        # the budget stood when the first call was refused.
        if kind == "tokens":
            reason = (f"budget reached: the next judge call could pass the token budget of {max_tokens} "
                      "(--max-tokens, or the judge metrics' max_tokens_total)")  # fmt: skip
            stood = f"{used} tokens used, {held} held by calls in flight, the next call up to {tokens}"
        else:
            reason = (f"budget reached: the next judge call could pass the cost budget of {max_cost:g} "
                      "(--max-cost, or the judge metrics' max_cost)")  # fmt: skip
            stood = f"cost {used:.6g} used, {held:.6g} held by calls in flight, the next call up to {cost:.6g}"
        self.r.hsetnx(self.key, "budget", f"{reason}; when first reached: {stood}")  # a resume clears it
        return reason, None

    def stop_reason(self) -> str | None:
        """Why no new call may start (the run was cancelled, the breaker is open), or None. Budgets are checked
        by :meth:`reserve`. Read from Redis at most every :data:`STOP_READ_EVERY_S` by all the threads sharing this
        object (one read, the others wait for it); a reason once read stays (:meth:`_stop_is_final`): a cancel or an
        open breaker is not undone within a run generation, and a resume's tasks build their own state. A local worker
        whose starting process exited (:func:`~ragscore_workers.die_with_parent.parent_gone`) starts no call either."""
        if parent_gone():
            return ORPHANED_REASON
        with self._stop_lock:
            if not self._stop_is_final() and time.monotonic() - self._stop_read_at >= STOP_READ_EVERY_S:
                # the count's reason read again only to be replaced (a run stopper's, a cancel): never undone by a
                # resume's closing the breaker while this generation's task still runs
                self._stopped = self._read_stop_reason() or self._stopped
                self._stop_read_at = time.monotonic()
            return self._stopped

    def _stop_is_final(self) -> bool:
        """Whether the stop read last stays: a cancel, or a run stopper's breaker. Not the breaker's count of failures
        in a row: a refused key's call in flight when it opened may still mark it a run stopper (``_FAILURE_LUA``)."""
        stopped = self._stopped
        return stopped is not None and (stopped == CANCELLED_REASON or self.is_run_stopper(stopped))

    def _read_stop_reason(self) -> str | None:
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(self.meta_key, "state")
        pipe.hget(self.key, self.breaker_field)
        pipe.hget(self.key, self.stopper_field)
        state, breaker, stopper = pipe.execute()
        if state == RunState.CANCELLED:
            return CANCELLED_REASON
        return self._breaker_read(breaker, stopper) if breaker else None

    def _breaker_read(self, reason: Any, stopper: Any) -> str:
        """The breaker's ``reason`` as read from the store, kept among :meth:`is_run_stopper`'s when its run-stopper
        mark ``stopper`` was read with it."""
        reason = str(reason)
        if stopper:
            self._run_stoppers.add(reason)
        return reason

    def is_run_stopper(self, reason: str) -> bool:
        """Whether ``reason`` (from :meth:`stop_reason` or :meth:`reserve`) is the breaker's of a run stopper (its
        configuration: a refused key, a model the provider lacks), which every call would repeat: a failure of the
        judge, which its items record as an error, not a stop (a cancel, a budget, the breaker's count of failures
        in a row)."""
        return reason in self._run_stoppers

    def read(self) -> dict[str, Any]:
        """The counters as numbers (missing ones as 0) plus ``breaker`` (this state's own) / ``budget`` when calls
        stopped (and ``base_url`` when overridden)."""
        raw = self.r.hgetall(self.key)
        out: dict[str, Any] = {name: 0 for name in COUNTER_FIELDS}
        for name, value in raw.items():
            if name == self.breaker_field:
                out["breaker"] = value
            elif scoped_breaker_field(name) or name in UNSCOPED_REASON_FIELDS:  # another limiter's breaker, a reason
                continue
            elif name in ("budget", "base_url"):
                out[name] = value
            elif name in ("cost", "held_cost"):
                out[name] = float(value)
            else:
                out[name] = int(value)
        return out
