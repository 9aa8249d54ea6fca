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
``failures``               calls that failed for good (after their retries)
``consecutive_failures``   failures since the last success (the breaker's count)
``breaker``                why judging stopped, once the breaker is open
``budget``                 why judging stopped, once ``max_cost`` / ``max_tokens`` was reached
``provider_rpm`` …         a limit the provider's headers state below the suite's (``provider_tpm``,
                           ``provider_rpd``), which the workers use instead
=========================  ===================================================================
"""

from __future__ import annotations

from typing import Any

__all__ = ["COUNTER_FIELDS", "RunJudgeState", "run_judge_key"]

#: Numeric fields the run summary reports (``summary.judge``).
COUNTER_FIELDS = ("calls", "cache_hits", "retries", "rate_limited", "tokens_in", "tokens_out", "cost",
                  "parse_failures", "failures")  # fmt: skip

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


def run_judge_key(run_id: str) -> str:
    return f"ragscore:run:{run_id}:judge"


class RunJudgeState:
    """Counters, breaker and budget checks of one run."""

    def __init__(self, redis: Any, run_id: str, *, ttl_s: int, part: str = "judge", what: str = "judge calls") -> None:
        self.r = redis
        self.key = f"ragscore:run:{run_id}:{part}"
        self.ttl_s = ttl_s
        self.what = what
        self._failure = redis.register_script(_FAILURE_LUA)

    def incr(self, *, cost: float = 0.0, reset_failures: bool = False, **counts: int) -> None:
        """Add to counters (one round trip); ``reset_failures`` marks a success for the breaker."""
        pipe = self.r.pipeline(transaction=False)
        for name, value in counts.items():
            if value:
                pipe.hincrby(self.key, name, value)
        if cost:
            pipe.hincrbyfloat(self.key, "cost", cost)
        if reset_failures:
            pipe.hset(self.key, "consecutive_failures", 0)
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def note(self, field: str, value: int) -> None:
        """Set one field (a fact such as ``provider_rpm``, not a counter)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(self.key, field, value)
        pipe.expire(self.key, self.ttl_s)
        pipe.execute()

    def record_failure(self, threshold: int, last_error: str) -> bool:
        """Count a call that failed for good; open the breaker at ``threshold`` in a row. True if opened now."""
        reason = f"circuit breaker open after {threshold} consecutive failed {self.what} (last: {last_error})"
        return bool(self._failure(keys=[self.key], args=[threshold, reason[:500], self.ttl_s]))

    def stop_reason(self, max_cost: float | None = None, max_tokens: int | None = None) -> str | None:
        """Why no new call may start (breaker open, budget reached), or None."""
        breaker, cost, tokens_in, tokens_out = self.r.hmget(self.key, "breaker", "cost", "tokens_in", "tokens_out")
        if breaker:
            return str(breaker)
        used = int(tokens_in or 0) + int(tokens_out or 0)
        if max_cost is not None and float(cost or 0) >= max_cost:
            reason = f"budget reached: judge cost {float(cost or 0):.4f} >= max_cost {max_cost:g}"
        elif max_tokens is not None and used >= max_tokens:
            reason = f"budget reached: {used} judge tokens >= max_tokens {max_tokens}"
        else:
            return None
        self.r.hsetnx(self.key, "budget", reason)  # the first reason, for the summary (a resume clears it)
        return reason

    def read(self) -> dict[str, Any]:
        """The counters as numbers (missing ones as 0) plus ``breaker`` / ``budget`` when judging stopped."""
        raw = self.r.hgetall(self.key)
        out: dict[str, Any] = {name: 0 for name in COUNTER_FIELDS}
        for name, value in raw.items():
            if name in ("breaker", "budget"):
                out[name] = value
            elif name == "cost":
                out[name] = float(value)
            else:
                out[name] = int(value)
        return out
