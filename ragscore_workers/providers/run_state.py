"""Per-run judge counters, circuit breaker and budget, shared by every judge worker in Redis.

One hash per run, ``ragscore:run:{run_id}:judge`` (expires with the run); the target stage keeps the same
counters and breaker per system under ``ragscore:run:{run_id}:target:{system}``:

=========================  ===================================================================
``calls``                  requests sent to the provider (every attempt, 429s and errors included)
``cache_hits``             replies served from the reply cache (no call)
``retries``                attempts after the first (transient errors and 429s)
``rate_limited``           429 replies received
``tokens_in/tokens_out``   usage reported by the provider
``cost``                   from the price table (0 when the model has no price)
``parse_failures``         replies without a valid rating / JSON score
``usage_estimated``        replies without token usage: their tokens and cost are estimated from the text
``failures``               calls that failed for good (after their retries)
``consecutive_failures``   failures since the last success (the breaker's count)
``breaker``                why judging stopped, once the breaker is open
``budget``                 why judging stopped, once ``max_cost`` / ``max_tokens`` would be passed
``held_tokens/held_cost``  what budgeted calls in flight hold (their high estimates) until they end
``provider_rpm`` …         a limit the provider's headers state below the suite's (``provider_tpm``,
                           ``provider_rpd``), which the workers use instead
``base_url``               the endpoint the workers called, when ``RAGSCORE_JUDGE_BASE_URL`` overrode the suite's
=========================  ===================================================================
"""

from __future__ import annotations

from typing import Any

from ..schemas import JUDGE_COUNTERS
from ..store import RunState

__all__ = ["COUNTER_FIELDS", "INTERNAL_FIELDS", "RunJudgeState", "run_judge_key"]

#: Numeric fields the run summary reports (``summary.judge``).
COUNTER_FIELDS = JUDGE_COUNTERS

#: Why a call did not start in a run ``ragscore cancel`` cancelled (calls already started end; none starts).
CANCELLED_REASON = "run cancelled"

# KEYS[1] = hash; ARGV[1] = threshold, ARGV[2] = reason, ARGV[3] = ttl. Returns 1 when this call opened it.
_FAILURE_LUA = """
redis.call('HINCRBY', KEYS[1], 'failures', 1)
local n = redis.call('HINCRBY', KEYS[1], 'consecutive_failures', 1)
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
if n >= tonumber(ARGV[1]) then
  return redis.call('HSETNX', KEYS[1], 'breaker', ARGV[2])
end
return 0
"""


# A budgeted call's start, atomically: refuse it when the breaker is open, or when what the run used, plus what
# calls in flight hold, plus this call's high estimate would pass a budget; else hold the estimate.
# KEYS[1] = hash, KEYS[2] = the run's meta (a cancelled run starts no call); ARGV = est_tokens, est_cost,
# max_tokens ('' = none), max_cost ('' = none), ttl.
# Returns {'breaker', reason} | {'tokens', used, held} | {'cost', used, held} | {'ok'}.
_RESERVE_LUA = (
    """
local h = KEYS[1]
if redis.call('HGET', KEYS[2], 'state') == '"""
    + RunState.CANCELLED
    + """' then return {'breaker', '"""
    + CANCELLED_REASON
    + """'} end
local breaker = redis.call('HGET', h, 'breaker')
if breaker then return {'breaker', breaker} end
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
redis.call('EXPIRE', h, tonumber(ARGV[5]))
return {'ok'}
"""
)
#: Fields of the hash that are bookkeeping, not results (left out of the run summary).
INTERNAL_FIELDS = ("consecutive_failures", "held_tokens", "held_cost")


def run_judge_key(run_id: str) -> str:
    return f"ragscore:run:{run_id}:judge"


class RunJudgeState:
    """Counters, breaker and budget checks of one run."""

    def __init__(self, redis: Any, run_id: str, *, ttl_s: int, part: str = "judge", what: str = "judge calls") -> None:
        self.r = redis
        self.key = f"ragscore:run:{run_id}:{part}"
        self.meta_key = f"ragscore:run:{run_id}:meta"
        self.ttl_s = ttl_s
        self.what = what
        self._failure = redis.register_script(_FAILURE_LUA)
        self._reserve = redis.register_script(_RESERVE_LUA)

    def incr(
        self, *, cost: float = 0.0, reset_failures: bool = False, release: tuple[int, float] = (0, 0.0), **counts: int
    ) -> None:
        """Add to counters (one round trip); ``reset_failures`` marks a success for the breaker; ``release``
        gives back what :meth:`reserve` held for the call (tokens, cost)."""
        pipe = self.r.pipeline(transaction=False)
        for name, value in (*counts.items(), ("held_tokens", -release[0])):
            if value:
                pipe.hincrby(self.key, name, value)
        for name, amount in (("cost", cost), ("held_cost", -release[1])):
            if amount:
                pipe.hincrbyfloat(self.key, name, amount)
        if reset_failures:
            pipe.hset(self.key, "consecutive_failures", 0)
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def note(self, field: str, value: int | str) -> None:
        """Set one field (a fact such as ``provider_rpm`` or ``base_url``, not a counter)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.key, field, value)
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def record_failure(self, threshold: int, last_error: str) -> bool:
        """Count a call that failed for good; open the breaker at ``threshold`` in a row. True if opened now."""
        reason = f"circuit breaker open after {threshold} consecutive failed {self.what} (last: {last_error})"
        return bool(self._failure(keys=[self.key], args=[threshold, reason[:500], self.ttl_s]))

    def reserve(
        self, tokens: int, cost: float, max_cost: float | None, max_tokens: int | None
    ) -> tuple[str | None, tuple[int, float]]:
        """Start a call: ``(why it may not start, what it holds)``. It may not when the breaker is open, or when
        what was used, plus what calls in flight hold, plus its own high estimate would pass a budget. A call
        that starts under a budget holds ``(tokens, cost)`` until :meth:`incr` releases them (without a budget it
        holds nothing): so a budget is a cap, whatever number of calls run at once."""
        nothing = (0, 0.0)
        if max_cost is None and max_tokens is None:
            return self.stop_reason(), nothing
        limits = ["" if max_tokens is None else max_tokens, "" if max_cost is None else repr(max_cost)]
        raw = self._reserve(keys=[self.key, self.meta_key], args=[tokens, repr(cost), *limits, self.ttl_s])
        answer = [v.decode() if isinstance(v, bytes) else str(v) for v in raw]
        kind = answer[0]
        if kind == "ok":
            return None, (tokens, cost)
        if kind == "breaker":
            return str(answer[1]), nothing
        used, held = (int(float(v)) for v in answer[1:]) if kind == "tokens" else (float(v) for v in answer[1:])
        if kind == "tokens":
            reason = (f"budget reached: {used} judge tokens used, {held} held by calls in flight, and the next call "
                      f"may take {tokens}: more than max_tokens {max_tokens}")  # fmt: skip
        else:
            reason = (f"budget reached: judge cost {used:.6g}, {held:.6g} held by calls in flight, and the next "
                      f"call may cost {cost:.6g}: more than max_cost {max_cost:g}")  # fmt: skip
        self.r.hsetnx(self.key, "budget", reason)  # the first reason, for the summary (a resume clears it)
        return reason, nothing

    def stop_reason(self) -> str | None:
        """Why no new call may start (the run was cancelled, the breaker is open), or None. Budgets are checked
        by :meth:`reserve`."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hget(self.meta_key, "state")
        pipe.hget(self.key, "breaker")
        state, breaker = pipe.execute()
        if state == RunState.CANCELLED:
            return CANCELLED_REASON
        return str(breaker) if breaker else None

    def read(self) -> dict[str, Any]:
        """The counters as numbers (missing ones as 0) plus ``breaker`` / ``budget`` when judging stopped (and
        ``base_url`` when overridden)."""
        raw = self.r.hgetall(self.key)
        out: dict[str, Any] = {name: 0 for name in COUNTER_FIELDS}
        for name, value in raw.items():
            if name in ("breaker", "budget", "base_url"):
                out[name] = value
            elif name in ("cost", "held_cost"):
                out[name] = float(value)
            else:
                out[name] = int(value)
        return out
