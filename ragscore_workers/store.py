"""The run store in Redis: item results, progress counters, run state, summary.

Keys (all under ``ragscore:run:{run_id}:``). While the run runs they are kept at least ``LIVE_RUN_TTL_S`` (7 days)
after their last write; its summary gives every one ``run_ttl_s`` (``RAGSCORE_RUN_TTL_S``) from then
(:meth:`RunStore.settle`), and a resume gives them the live TTL back:

=================  ======  ==========================================================================
``meta``           hash    state, suite JSON, totals, n_shards, ``judge_calls_planned`` (the judge calls the
                          dry run counts for the run, kept at submit: its ETA's floor), timestamps
                          (``progress_at``: work last done;
                          ``target_called_at``: a target call was last counted;
                          ``work_began_at``: a worker first took a task of generation ``work_began_gen``, with
                          the counters then in ``work_began_before``); ``reports_dir``: where the reports were
                          last written; ``out_dir``: the folder the run writes its reports to, from its start
                          (and each resume's; ``DIR/previous/RUN_ID`` once a later run moved them there);
                          ``job``: the gates of the command that started it (as ``DIR/run.json`` keeps them)
``progress``       hash    ``done``, ``errors``, ``unscorable`` and ``done:{queue}``/``total:{queue}``/
                          ``errors:{queue}`` (a run stored before these has ``errors:derived`` alone:
                          :func:`errors_of`; ``unscorable:derived`` too: :func:`_queue_work`); ``redo``,
                          ``redo:{queue}``: outputs stored as errors or stopped that a resume sent again, not
                          written again yet; ``marked``, ``marked:{queue}``: all the resume marked, written again or
                          not; ``redo_errors``, ``redo_unscorable`` (``:derived`` too): of ``redo``, those stored
                          as errors, as stopped (out of ``errors``, ``unscorable`` until written again);
                          ``stopped:{queue}``: outputs stored stopped (a cancel, a judge's breaker or budget);
                          ``target_calls``: requests sent to the run's targets
``redo``           hash    ``{item key}|{output}`` -> queue: those outputs, until a worker writes each again (and
                          ``{answers key}|{item key}`` -> target: failed answers a resume asks again)
``ids:{shard}``    list    item keys of shard ``shard`` in input order (bounded by the shard size); released with
                          the items (:meth:`RunStore.release_items`), they name nothing else; a resume writes both
                          back from the run's reports (:meth:`RunStore.restore_items`)
``item:{key}``     hash    ``_meta`` (id, system, group, question_type, question_sha) + one field per metric output
``shards_done:{g}`` set    shard numbers whose chord of generation ``g`` (0, then +1 per resume) completed
``summary``        string  the run summary JSON written by ``aggregate``
``failed_rows``    list    rows that could not be read (capped at ``MAX_FAILED_ROWS_STORED``)
``deliveries``     hash    ``{queue}:{item key}`` -> deliveries whose chunk has not ended (its process died, or it
                          runs); an item delivered twice puts its chunk in careful mode, whatever the chunk
``scoring``        hash    ``{queue}:{item key}`` a careful delivery is scoring (left behind: its process died on it)
``answers:{shard}`` hash   target runs: item key -> the answered row, or the row and why the target failed
                          (released and written back with the items: :meth:`RunStore.restore_answers`)
``answers_scored`` hash    target runs: shard -> the generation whose callback read (scored) its answers; a late
                          answer of that generation is not stored after (:meth:`RunStore.mark_answers_scored`)
``unwritten:{q}``  hash    ``{item key}|{output}`` -> 1: outputs of queue ``q`` (judge) a chunk in flight has scored
                          and not written yet; :meth:`RunStore.progress` counts them done, the chunk's write takes them
``loading``        hash    ``{host}:{pid}:{thread}:{block}`` -> what a worker does for the run before its units are
                          written (loads a model, encodes a chunk: :func:`loading_value`), while it does
                          (:mod:`ragscore_workers.model_loading`); unlike the others, it expires ``LOAD_TTL_S``
                          (30 s) after its last beat and is not one of the keys the summary settles
=================  ======  ==========================================================================

Besides the run's keys, ``ragscore:runs`` (a sorted set of run ids by creation time) lists the runs for ``status``.

No value grows with the dataset beyond one shard's id list. Writes are idempotent: re-running a task
rewrites the same fields and counts only fields that were not there before (one Lua script per chunk).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict, cast
from urllib.parse import urlsplit

import redis
from pydantic_core import PydanticSerializationError

from .acl import Role, lacking
from .commands import in_backticks, password_note
from .errors import ConfigError, StoreError
from .fastjson import dumps_utf8, loads
from .redaction import redact_url
from .schemas import (
    RATE_LIMITS,
    SLOT_WAIT,
    ItemResult,
    MetricResult,
    Queue,
    RunSummary,
    Suite,
    split_key,
    unscorable_reason,
)
from .settings import (
    CLIENT_BACKOFF_BASE_S,
    CLIENT_BACKOFF_CAP_S,
    CLIENT_RETRIES,
    LIVE_RUN_TTL_S,
    NO_CERT_REQS,
    TLS_EXAMPLE,
    for_redis_py,
    get_settings,
    query_options,
)
from .unicode_text import utf8_json, valid_unicode

__all__ = [
    "JUDGE_LIMITERS_PART",
    "LOADING_PART",
    "PROGRESSIVE_QUEUES",
    "WAIT_PARTS",
    "RawItem",
    "RedoLookup",
    "RunOverview",
    "RunState",
    "RunStore",
    "WorkBegan",
    "errors_of",
    "keys_digest",
    "loading_value",
    "pool_like",
    "probe_redis",
    "redis_client",
    "refused_note",
    "scored_of",
    "store_url_for_redis_py",
    "stored_fields",
    "superseded",
    "target_state_part",
    "with_timeout",
    "work_before",
    "work_began",
]

PREFIX = "ragscore:run:"
#: Sorted set of run ids by creation time, so listing the runs reads no item key (``status`` without an id on a
#: store of millions of items); a run whose meta has expired is dropped from it when runs are listed.
RUNS_INDEX = "ragscore:runs"
#: Set once the runs of a store written before :data:`RUNS_INDEX` existed were scanned into it.
RUNS_INDEX_BUILT = "ragscore:runs:built"
#: What a run id that is not in the store gets told.
NO_SUCH_RUN = (
    "No run {run_id!r} in the store (a finished run expires after RAGSCORE_RUN_TTL_S, and a Redis restarted "
    "without persistence has lost its runs)"
)
#: Unreadable rows kept per run (with a 1,000-character excerpt each); the count is always exact.
MAX_FAILED_ROWS_STORED = 10_000


class RunState:
    """Values of ``meta.state``."""

    SUBMITTING = "submitting"
    RUNNING = "running"
    AGGREGATING = "aggregating"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DONE = frozenset({FINISHED, FAILED, CANCELLED})


# KEYS: progress, meta (its ``progress_at``: the store's clock, in whole seconds, when work was last done), redo
# (the outputs a resume sent again: ``{item key}|{output}`` -> queue).
# ARGV: ttl, queue, n_items, then per item: key, n_fields, then per field: name, value.
# Every metric value starts with its status character: o = scored, n = unscorable, s = stopped, e = error; fields
# starting with "_" (item metadata) are not counted. A rewrite counts nothing new, but an item whose error
# became a score (or the reverse) moves the error/unscorable counters. ``stopped:{queue}`` counts the outputs stored
# stopped, marked to send again or not (:meth:`RunStore.progress`'s ``worked:{queue}``). Rewriting an output a
# resume marked as sent again (:meth:`RunStore.mark_redo`) takes its mark and one off ``redo:{queue}`` (and its old
# status's ``redo_errors``/``redo_unscorable``, :data:`_MARK_REDO_LUA`): each mark is taken once. KEYS[4] (a queue
# of :data:`PROGRESSIVE_QUEUES`): its ``unwritten`` marks, each written output's taken in the same script.
_WRITE_LUA = """
local ttl = tonumber(ARGV[1])
local unwritten = KEYS[4]
local queue = ARGV[2]
local i = 4
local done, errs, nulls, stops = 0, 0, 0, 0
local redone, any_redone, redo_tallies = {}, false, {}
for _ = 1, tonumber(ARGV[3]) do
  local key = ARGV[i]
  local nf = tonumber(ARGV[i + 1])
  i = i + 2
  for _ = 1, nf do
    local name, value = ARGV[i], ARGV[i + 1]
    i = i + 2
    if string.sub(name, 1, 1) ~= '_' then
      if unwritten then redis.call('HDEL', unwritten, key .. '|' .. name) end
      local status = string.sub(value, 1, 1)
      local old = redis.call('HGET', key, name)
      if status == 's' then stops = stops + 1 end
      if old and string.sub(old, 1, 1) == 's' then stops = stops - 1 end
      if not old then
        done = done + 1
        if status == 'e' then errs = errs + 1 elseif status == 'n' or status == 's' then nulls = nulls + 1 end
      else
        local was = string.sub(old, 1, 1)
        if was == 'e' or was == 's' then
          local marked = redis.call('HGET', KEYS[3], key .. '|' .. name)
          if marked then
            redis.call('HDEL', KEYS[3], key .. '|' .. name)
            redone[marked] = (redone[marked] or 0) + 1
            any_redone = true
            local tally = (was == 'e') and 'redo_errors' or 'redo_unscorable'
            redo_tallies[tally] = (redo_tallies[tally] or 0) + 1
            if marked == 'derived' then
              redo_tallies[tally .. ':derived'] = (redo_tallies[tally .. ':derived'] or 0) + 1
            end
          end
        end
        if was ~= status then
          if was == 'e' then errs = errs - 1 elseif was == 'n' or was == 's' then nulls = nulls - 1 end
          if status == 'e' then errs = errs + 1 elseif status == 'n' or status == 's' then nulls = nulls + 1 end
        end
      end
    end
    redis.call('HSET', key, name, value)
  end
  redis.call('EXPIRE', key, ttl)
end
local p = KEYS[1]
for marked_queue, n in pairs(redone) do  -- outputs a resume sent again, written again: done, not counted twice
  redis.call('HINCRBY', p, 'redo:' .. marked_queue, -n)
  redis.call('HINCRBY', p, 'redo', -n)
end
for tally, n in pairs(redo_tallies) do  -- their old status leaves the resume's tallies of it (_MARK_REDO_LUA)
  redis.call('HINCRBY', p, tally, -n)
end
if done ~= 0 then
  redis.call('HINCRBY', p, 'done', done)
  redis.call('HINCRBY', p, 'done:' .. queue, done)
end
if (done > 0 or any_redone) and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('HSET', KEYS[2], 'progress_at', redis.call('TIME')[1])
end
if stops ~= 0 then redis.call('HINCRBY', p, 'stopped:' .. queue, stops) end
if errs ~= 0 then
  redis.call('HINCRBY', p, 'errors', errs)
  redis.call('HINCRBY', p, 'errors:' .. queue, errs)  -- per queue: a resume needs the judge's key only for its own
end
if nulls ~= 0 then redis.call('HINCRBY', p, 'unscorable', nulls) end
if queue == 'derived' then  -- no queue's work: the views leave them out (RunStore.progress)
  if nulls ~= 0 then redis.call('HINCRBY', p, 'unscorable:derived', nulls) end
end
redis.call('EXPIRE', p, ttl)
return done
"""


#: Queues whose chunks say their items as each is scored (:meth:`RunStore.mark_scored`): a judge chunk takes minutes
#: on a slow provider, and progress counted only by its write stood still all that time.
PROGRESSIVE_QUEUES = ("judge",)

# KEYS[1] = the queue's unwritten marks, KEYS[2] = redo marks; ARGV[1] = ttl, then per output: item hash key, output.
# An output scored but not written yet is marked unless the store counts it done already: stored, and not an error
# or stopped output a resume sent again (:meth:`RunStore.mark_redo`: not done until written again). A mark is a hash
# field, so marking twice (a chunk delivered twice) counts once; the write of the output takes it (_WRITE_LUA).
_SCORED_LUA = """
local n = 0
for i = 2, #ARGV, 2 do
  local field = ARGV[i] .. '|' .. ARGV[i + 1]
  if redis.call('HEXISTS', ARGV[i], ARGV[i + 1]) == 0 or redis.call('HEXISTS', KEYS[2], field) == 1 then
    n = n + redis.call('HSET', KEYS[1], field, 1)
  end
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1]))
return n
"""

# KEYS[1] = meta, KEYS[2] = progress, KEYS[3] = judge counters; ARGV[1] = the generation of a task a worker takes.
# The first task taken of the run's current generation stamps the store's clock (to the microsecond) and the
# counters then, as they are (done, redo and marked, judge calls: :func:`work_began` reads the units done before
# this attempt's work from them); ``marked`` always (0 for none): a stamp without it is of a store before it. Nothing
# on a run whose meta is gone, on a task of another generation, or once stamped.
_WORK_BEGAN_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local meta = redis.call('HMGET', KEYS[1], 'generation', 'work_began_gen')
local gen = tonumber(ARGV[1])
if tonumber(meta[1] or '0') ~= gen or tonumber(meta[2] or '-1') == gen then return 0 end
local before = {marked = 0}
local p = redis.call('HGETALL', KEYS[2])
for i = 1, #p, 2 do
  local k = p[i]
  local head = string.match(k, '^[^:]*')
  if head == 'done' or head == 'redo' or head == 'marked' then
    before[k] = tonumber(p[i + 1])
  end
end
local calls = redis.call('HGET', KEYS[3], 'calls')
if calls then before['judge_calls'] = tonumber(calls) end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'work_began_at', t[1] .. '.' .. string.format('%06d', t[2]), 'work_began_gen', ARGV[1],
           'work_began_before', cjson.encode(before))
return 1
"""


# KEYS[1] = answers hash, KEYS[2] = progress, KEYS[3] = redo marks, KEYS[4] = meta, KEYS[5] = answers_scored;
# ARGV[1] = ttl, ARGV[2] = '1' for late answers, ARGV[3] = the shard, then key, value pairs. An answer stored as a real
# one (no ``error``) is kept: neither an error nor another answer replaces it (:meth:`RunStore.save_answers`); a late
# one replaces a stored error alone, the hash's TTL as it is, and only until the shard's callback of the run's
# generation read its answers (:meth:`RunStore.mark_answers_scored`): the report would call it an error. A new answer
# counts one unit of the target stage; a failed answer replaced counts nothing new, but takes the mark a resume set on
# it (:meth:`RunStore.mark_answer_redo`). Either stamps ``progress_at``. Returns how many are new, then the keys stored.
_ANSWERS_LUA = """
local late = ARGV[2] == '1'
if late and redis.call('HGET', KEYS[5], ARGV[3]) == (redis.call('HGET', KEYS[4], 'generation') or '0') then
  return {0}
end
local new, redone, written = 0, 0, {}
for i = 4, #ARGV, 2 do
  local stored = redis.call('HGET', KEYS[1], ARGV[i])
  if (not stored and not late) or (stored and type(cjson.decode(stored)['error']) == 'string') then
    new = new + redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    redone = redone + redis.call('HDEL', KEYS[3], KEYS[1] .. '|' .. ARGV[i])
    written[#written + 1] = ARGV[i]
  end
end
if not late then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[1])) end
if new ~= 0 then
  redis.call('HINCRBY', KEYS[2], 'done', new)
  redis.call('HINCRBY', KEYS[2], 'done:target', new)
end
if redone ~= 0 then
  redis.call('HINCRBY', KEYS[2], 'redo', -redone)
  redis.call('HINCRBY', KEYS[2], 'redo:target', -redone)
end
if (new ~= 0 or redone ~= 0) and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HSET', KEYS[4], 'progress_at', redis.call('TIME')[1])
end
table.insert(written, 1, new)
return written
"""


class SavedAnswers(NamedTuple):
    """What :meth:`RunStore.save_answers` did: how many answers are new (units of the target stage), and the item keys
    it stored (an answer or error written; not one a stored answer kept out, nor a late one refused)."""

    new: int
    stored: frozenset[str]


#: The run's hash of shard -> the generation whose target callback read its answers (:meth:`RunStore.save_answers`).
ANSWERS_SCORED = "answers_scored"
#: The meta fields :meth:`RunStore.release_items` writes: when (epoch seconds) the run's items leave the store, and
#: the folder that holds its reports.
ITEMS_UNTIL, ITEMS_IN = "items_until", "items_in"
#: A released run's meta field: the digest of its shards' id lists (:func:`keys_digest`), where its resume takes its
#: items back from its reports' items.jsonl (:meth:`RunStore.restore_items`), which is checked against it first.
ITEMS_KEYS = "items_keys"
#: Seconds before its items expire that a released run's are refused already: a read begun then could end on
#: missing ones.
ITEMS_MARGIN_S = 60

# KEYS[1] = a hash; ARGV = field, value, ...: written only while the hash exists, its TTL kept (HSET keeps it).
_HSET_IF_EXISTS_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
"""

# KEYS[1] = a shard's id list; ARGV[1] = the item key prefix, ARGV[2] = ttl: every item of the shard expires
# then (one round trip per shard instead of one command per item).
# KEYS = a shard's id list, its answers, the run's meta; ARGV = the items' key prefix, the TTL, a field of the meta
# that, where the meta holds it, leaves the shard as it is ('': none). The shard's items, id list and answers get
# the TTL, in one step with the look at the meta (:meth:`RunStore.settle`'s ``released``).
_EXPIRE_ITEMS_LUA = """
if ARGV[3] ~= '' and redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then return 0 end
local ttl = tonumber(ARGV[2])
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  redis.call('EXPIRE', ARGV[1] .. id, ttl)
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return 0
"""

# KEYS = item hashes; ARGV = output names. Returns, for each item that lacks an output or holds it as an error
# ('e') or stopped ('s'), its 0-based index and a mask ('1' = to redo) over ARGV: what a resume must send again,
# decided in Redis so that only those cross the wire (a finished item costs no transfer, no JSON decoding).
_INCOMPLETE_LUA = """
local out = {}
for i, key in ipairs(KEYS) do
  local values = redis.call('HMGET', key, unpack(ARGV))
  local mask, any = {}, false
  for j = 1, #ARGV do
    local v = values[j]
    local stale = v and (string.sub(v, 1, 1) == 'e' or string.sub(v, 1, 1) == 's')
    mask[j] = (not v) and '1' or (stale and '2' or '0')
    any = any or (not v) or stale
  end
  if any then
    out[#out + 1] = i - 1
    out[#out + 1] = table.concat(mask)
  end
end
return out
"""

# KEYS[1] = progress, KEYS[2] = redo marks; ARGV[1] = ttl, then per output: item hash key, output, queue. An output
# still stored as an error or stopped is marked (once) and counted in ``redo:{queue}`` and ``marked:{queue}`` (the
# resume's marks, whenever made: :func:`work_began`); one written again since the
# look-up (by a task of an earlier generation) is not: its rewrite has nothing left to take. Its old status counts in
# ``redo_errors`` (an error) or ``redo_unscorable`` (stopped), and ``{that}:derived`` for a derived output, until its
# rewrite takes the mark (_WRITE_LUA): :func:`_done_now` takes them off ``errors`` and ``unscorable``, so a resume's
# tallies count only what is current.
_MARK_REDO_LUA = """
local n = 0
for i = 2, #ARGV, 3 do
  local v = redis.call('HGET', ARGV[i], ARGV[i + 1])
  local status = v and string.sub(v, 1, 1)
  local mark = ARGV[i] .. '|' .. ARGV[i + 1]
  if (status == 'e' or status == 's') and redis.call('HSET', KEYS[2], mark, ARGV[i + 2]) == 1 then
    redis.call('HINCRBY', KEYS[1], 'redo:' .. ARGV[i + 2], 1)
    redis.call('HINCRBY', KEYS[1], 'marked:' .. ARGV[i + 2], 1)
    local tally = (status == 'e') and 'redo_errors' or 'redo_unscorable'
    redis.call('HINCRBY', KEYS[1], tally, 1)
    if ARGV[i + 2] == 'derived' then redis.call('HINCRBY', KEYS[1], tally .. ':derived', 1) end
    n = n + 1
  end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'redo', n)
  redis.call('HINCRBY', KEYS[1], 'marked', n)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1]))
end
return n
"""

# KEYS[1] = progress, KEYS[2] = redo marks, KEYS[3] = a shard's answers; ARGV[1] = ttl, then item keys. An answer
# still stored as a failure is marked (once: ``{answers key}|{item key}`` -> target) and counted in ``redo:target``
# and ``marked:target``.
_MARK_ANSWER_REDO_LUA = """
local n = 0
for i = 2, #ARGV do
  local v = redis.call('HGET', KEYS[3], ARGV[i])
  if v and type(cjson.decode(v)['error']) == 'string'
      and redis.call('HSET', KEYS[2], KEYS[3] .. '|' .. ARGV[i], 'target') == 1 then
    n = n + 1
  end
end
if n > 0 then
  redis.call('HINCRBY', KEYS[1], 'redo:target', n)
  redis.call('HINCRBY', KEYS[1], 'redo', n)
  redis.call('HINCRBY', KEYS[1], 'marked:target', n)
  redis.call('HINCRBY', KEYS[1], 'marked', n)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[1]))
end
return n
"""

# KEYS[1] = a lease; ARGV[1] = its owner, ARGV[2] = seconds. Taken for the owner unless another owner holds it; one
# the owner itself left held (an outage cut off its release) is taken over.
_TAKE_LEASE_LUA = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""

# KEYS[1] = a lease; ARGV[1] = its owner, ARGV[2] = seconds. Renewed only while the owner holds it.
_RENEW_LEASE_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('EXPIRE', KEYS[1], ARGV[2])
"""

# KEYS[1] = a lease; ARGV[1] = its owner. Deleted only while the owner holds it (not one that lapsed and another
# owner took since).
_RELEASE_LEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

#: Items one incomplete-lookup script reads (it blocks Redis while it runs: a few ms per batch).
INCOMPLETE_BATCH = 1000

# KEYS[1] = meta; ARGV[1] = the new state, ARGV[2] = the live TTL (set while the run is not over: a finished
# run keeps the TTL its summary gave), then field, value pairs (written in any case). A run in a terminal
# state (RunState.DONE) keeps it and only a resume (SUBMITTING) reopens it: a late or re-delivered write cannot
# turn a cancelled run into a finished one (or the reverse). A run no longer in the store (its Redis lost it) is
# not written, so no key without a TTL is left behind. Returns the state after the write ('' for no run).
_SET_STATE_LUA = (
    "local done = {"
    + ", ".join(f"{state} = true" for state in sorted(RunState.DONE))
    + """}
local state = redis.call('HGET', KEYS[1], 'state')
if redis.call('EXISTS', KEYS[1]) == 0 then return '' end
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
if not done[state] or ARGV[1] == '"""
    + RunState.SUBMITTING
    + """' then
  redis.call('HSET', KEYS[1], 'state', ARGV[1])
  state = ARGV[1]
end
if not done[state] then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2])) end
return state
"""
)


def superseded(generation: int | None, current: str | int | None) -> bool:
    """Whether work of ``generation`` was superseded by a resume, the run's generation now being ``current``
    (its re-sent copy does that work; running both would pay twice). ``None`` (any generation) never is."""
    return generation is not None and generation < int(current or 0)


#: The meta fields :meth:`RunStore.work_began` writes.
WORK_BEGAN_FIELDS = ("generation", "work_began_gen", "work_began_at", "work_began_before")


@dataclass(frozen=True)
class WorkBegan:
    """When a worker first took a task of a run's current attempt (its generation), and what was done before."""

    #: The store's clock (Redis ``TIME``, seconds).
    at: float
    #: The ``progress`` counters ``done``, ``redo``, ``marked`` (and per queue) and ``judge_calls`` then, as they
    #: were: :meth:`before` reads the units done before the attempt's work from them.
    stamp: dict[str, int]

    def before(self, counters: dict[str, int]) -> dict[str, int]:
        """``done``, ``done:{queue}`` and ``judge_calls`` before the attempt's work began, such that the ``progress``
        counters ``counters`` now (as stored: ``redo`` and ``marked`` not folded in) less them are the units written
        since. A resume marks what it sends again (``redo``: not done until written again) shard by shard, a shard's
        tasks sent after its marks, so marks are made after the stamp too, each lowering ``done`` (read from the stamp
        alone, 50 outputs redone read 0 units while 90 were marked after it). Per counter, with D the raw ``done``, M
        the marks made and R those not taken yet (M - R: marked outputs written again), done now is D - R, and the
        units since the stamp (s) are D - D_s plus the marks taken since, (M - R) - (M_s - R_s): before is
        D_s + M_s - R_s - M (M now), whenever the marks were made. A stamp without ``marked`` (a worker before it)
        is read as it was: done less redo then."""
        stamp = self.stamp
        if "marked" not in stamp:
            return _done_now(stamp)
        out = {"judge_calls": stamp["judge_calls"]} if "judge_calls" in stamp else {}
        fields = {k for k in (*stamp, *counters) if k == "done" or k.startswith("done:")} | {"done"}
        fields |= {"done" + k[len("marked") :] for k in counters if k.startswith("marked:")}
        for field in fields:
            suffix = field[len("done") :]
            taken_then = stamp.get("marked" + suffix, 0) - stamp.get("redo" + suffix, 0)
            out[field] = stamp.get(field, 0) + taken_then - counters.get("marked" + suffix, 0)
        return out


def work_began(meta: dict[str, Any]) -> WorkBegan | None:
    """The run's :class:`WorkBegan` of its current generation, from its meta; None until a worker took a task of
    it (a resume's stamp of an earlier attempt is not of this one), and for a run stored before the stamp."""
    try:
        if int(meta.get("work_began_gen") or -1) != int(meta.get("generation") or 0):
            return None
        stamp = json.loads(meta["work_began_before"])
        return WorkBegan(float(meta["work_began_at"]), {k: int(v) for k, v in stamp.items()})
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


#: Prefix of :meth:`RunStore.progress`'s counters of what was done before the current attempt's work began.
_BEFORE = "before:"


def work_before(progress: dict[str, int]) -> dict[str, int]:
    """The ``before:{counter}`` entries of :meth:`RunStore.progress`'s counters, by counter (``{}`` before the
    attempt's work began)."""
    return {k[len(_BEFORE) :]: v for k, v in progress.items() if k.startswith(_BEFORE)}


#: The shared pause a wait is on was set by a 429 (``judge_wait_pause``), by headers saying a budget is at 0, or as
#: the backoff after 429s that said not how long to wait (:data:`BACKING_OFF`).
PAUSED_BY_429, PAUSED_BY_BUDGET, PAUSED_BACKING_OFF = 429, 0, 1
#: The reason of a shared pause set because the provider's headers said a budget is at 0.
BUDGET_AT_0 = "provider budget at 0"
#: How the reason of a shared pause set as the backoff after 429s that said not how long to wait begins (the limiter's
#: ``pause(None)``); the 429's own reason follows it.
BACKING_OFF = "backing off after 429s without a retry time"


#: Where each stage's calls note what they wait on at the shared limiter (:meth:`RunJudgeState.note_wait`), by
#: stage: the run-store part of its note. The targets' is one for all of a run's targets (``targets:``, apart from
#: each target's own ``target:{system}``).
WAIT_PARTS = {"judge": "judge:wait", "target": "targets:wait"}
#: The run-store part naming the judge limiters the run's judge clients use (:meth:`RunJudgeState.note_limiter`: a hash,
#: limiter key -> the name its waits give; one of the run's own keys, kept as long). A run with more than one name
#: (judge metrics whose ``api_key_env`` differ) says which waits; one with one says "the judge rate limit", as ever.
JUDGE_LIMITERS_PART = "judge:limiters"


def _judge_limit(suite: str | None, provider_rpm: str | None) -> dict[str, int]:
    """``judge_rpm``, the judge's requests-a-minute limit in force (the suite's, or a lower one the provider's headers
    stated), and ``judge_pace_even`` (1) where the suite paces its calls evenly; empty where there is no limit."""
    judge = loads(suite).get("judge", {}) if suite else {}
    limits = [int(n) for n in (judge.get("rpm"), provider_rpm) if n is not None and str(n).isdigit() and int(n) > 0]
    if not limits:
        return {}
    return {"judge_rpm": min(limits)} | ({"judge_pace_even": 1} if judge.get("pace") == "even" else {})


def _judge_in_flight(suite: str | None, call_ms: str | None) -> dict[str, int]:
    """``judge_max_in_flight``, the suite's ``judge.max_in_flight``, and ``judge_call_ms``, the time the run's judge
    calls took (summed: :class:`~.providers.run_state.RunJudgeState`'s ``call_ms``); empty without a cap."""
    cap = (loads(suite).get("judge") or {}).get("max_in_flight") if suite else None
    if not isinstance(cap, int) or cap < 1:
        return {}
    return {"judge_max_in_flight": cap, "judge_call_ms": int(call_ms or 0)}


def _judge_limiters(limiters: list[str], capped: bool) -> dict[str, int]:
    """``judge_limiters``, the judge limiters the run's clients named (counted by name: judge metrics whose
    ``api_key_env`` differ have one each, each with the suite's limits and ``judge.max_in_flight`` cap), where there
    are several, or under a cap (1 where none is named yet); empty otherwise."""
    named = len(set(limiters))
    return {"judge_limiters": max(1, named)} if named > 1 or capped else {}


def _target_limit(suite: str | None) -> dict[str, int]:
    """``target_rpm`` and ``target_pace_even`` (1: paced evenly) of a run with one target, where it has an ``rpm``;
    empty for several targets: ``target_calls`` counts the calls to all of them together, not each one's."""
    loaded = loads(suite) if suite else {}
    targets = [loaded["target"]] if loaded.get("target") else loaded.get("targets") or []
    if len(targets) != 1 or not targets[0].get("rpm"):
        return {}
    even = {"target_pace_even": 1} if targets[0].get("pace") == "even" else {}
    return {"target_rpm": int(targets[0]["rpm"])} | even


def _stage_wait(
    stage: str, wait: Mapping[str, str] | Mapping[bytes, bytes], now_ms: int, *, named: bool = True
) -> dict[str, int]:
    """The progress counters of what the run's ``stage`` calls (``judge``, ``target``: :data:`WAIT_PARTS`) wait on at
    the shared limiter (the hash :meth:`RunJudgeState.note_wait` keeps): ``{stage}_wait_ms``, ms until the next may
    go, and either ``{stage}_wait_{limit}`` (``rpm``, ``tpm``, ``rpd``, ``tpd``: the limit's value; ``slot``: a slot of
    ``judge.max_in_flight``, the cap, with ``{stage}_wait_slot_calls``, the calls waiting for one) or
    ``{stage}_wait_pause`` (:func:`_paused_by`), and ``{stage}_wait_of:{who}`` (1) naming the target, or (``named``:
    the run has several) the judge limiter, whose calls wait. ``{}`` for none, or a wait whose time has passed."""
    field = {(k.decode() if isinstance(k, bytes) else k): (v.decode(errors="replace") if isinstance(v, bytes) else v)
             for k, v in wait.items()}  # fmt: skip
    try:
        left, on, limit = int(field["until"]) - now_ms, field["on"], int(field.get("limit") or 0)
    except (KeyError, ValueError):
        return {}
    if left <= 0 or on not in ("pause", SLOT_WAIT, *RATE_LIMITS):
        return {}
    who = field.get("who") if named else None
    out = {f"{stage}_wait_ms": left, **({f"{stage}_wait_of:{who}": 1} if who else {})}
    if on == "pause":
        return {**out, f"{stage}_wait_pause": _paused_by(field.get("reason") or "")}
    waiting = field.get("waiting", "")
    if on == SLOT_WAIT and waiting.isdigit() and int(waiting) > 0:  # the calls waiting for a slot
        out[f"{stage}_wait_{SLOT_WAIT}_calls"] = int(waiting)
    return {**out, f"{stage}_wait_{on}": limit}


def _paused_by(reason: str) -> int:
    """What set a shared pause of this ``reason``: :data:`PAUSED_BY_BUDGET`, :data:`PAUSED_BACKING_OFF` or
    :data:`PAUSED_BY_429`."""
    if reason == BUDGET_AT_0:
        return PAUSED_BY_BUDGET
    return PAUSED_BACKING_OFF if reason.startswith(BACKING_OFF) else PAUSED_BY_429


#: The run-store part where workers note what they do for the run before its units are written (load a model, encode a
#: chunk's texts: :mod:`ragscore_workers.model_loading`): a hash, worker -> :func:`loading_value`.
LOADING_PART = "loading"


def loading_value(queue: str, doing: str, since_ms: int, until_ms: int) -> str:
    """A field of the :data:`LOADING_PART` hash: the queue, what its worker does (``loading all-MiniLM-L6-v2 on cpu``,
    ``encoding 1,234 texts``), when it began and until when the note holds (ms, the store's clock), tab-separated (a
    model folder's name may hold any other character)."""
    return "\t".join((queue, doing.replace("\t", " "), str(since_ms), str(until_ms)))


#: A worker's note of a chunk's encoding (:func:`ragscore_workers.embedding._encode_missing`): ``encoding 2,048
#: texts``, then ``encoding 2,048 texts: 512 done`` as its steps end.
_ENCODING_NOTE = re.compile(r"(encoding ([\d,]+) texts?)(?:: ([\d,]+) done)?")


def _loads(values: Iterable[str], now_ms: int) -> dict[str, int]:
    """The progress counters of what the run's workers do before their units are written (the :data:`LOADING_PART`
    hash's values): ``load_ms:{queue}``, ms since the longest of the queue's notes began, and
    ``load_of:{queue}:{doing}`` (1) saying it, a count of texts done left out (``encoding 2,048 texts``); of the
    queue's chunks encoding (:func:`_chunk_counters`), how many, their texts and those encoded so far. A note whose
    time passed (its worker died) or that cannot be read is left out."""
    out: dict[str, int] = {}
    for value in values:
        try:
            queue, doing, since, until = value.split("\t")
            since_ms, until_ms = int(since), int(until)
        except ValueError:
            continue
        if until_ms <= now_ms:
            continue
        for name, count in _chunk_counters(queue, doing).items():
            out[name] = out.get(name, 0) + count
        if now_ms - since_ms <= out.get(f"load_ms:{queue}", -1):
            continue
        out = {k: v for k, v in out.items() if not k.startswith(f"load_of:{queue}:")}
        encoding = _ENCODING_NOTE.fullmatch(doing)
        said = doing if encoding is None else encoding[1]  # its count is the queue's sum's (_chunk_counters)
        out |= {f"load_ms:{queue}": max(0, now_ms - since_ms), f"load_of:{queue}:{said}": 1}
    return out


def _chunk_counters(queue: str, doing: str) -> dict[str, int]:
    """A note of a chunk's encoding as counters to sum over the queue's workers: ``load_chunks:{queue}`` (1),
    ``load_texts:{queue}`` (its texts) and ``load_encoded:{queue}`` (those encoded so far); none for another note."""
    found = _ENCODING_NOTE.fullmatch(doing)
    if found is None:
        return {}
    texts, encoded = int(found[2].replace(",", "")), int((found[3] or "0").replace(",", ""))
    return {f"load_chunks:{queue}": 1, f"load_texts:{queue}": texts, f"load_encoded:{queue}": encoded}


#: The ``progress`` counters' part of no queue: derived outputs (``combined``), computed at the run's aggregation.
_DERIVED = "derived"


def _queue_work(counters: dict[str, int]) -> dict[str, int]:
    """Progress counters as the queues' work: ``done``, ``total``, ``before:done``, ``errors`` and ``unscorable`` less
    the derived outputs' share (``{counter}:derived``), and the derived outputs' own counters (those, ``redo:derived``
    and ``marked:derived``) dropped, as no queue works on them: every view (the bar and its ETA, the run list,
    ``status RUN``'s ``all`` row and the sum of its queues' rows, the errors and unscorable beside them) counts the same
    units. Only those counters are dropped (a target named ``derived`` keeps its ``target_wait_of:derived``). A derived
    share below 0 takes nothing off (a run stored before ``errors:derived`` and ``unscorable:derived`` existed, resumed
    after, takes a rewritten derived error off a counter that never held it), and no count goes below 0."""
    out = {k: v for k, v in counters.items() if k not in _DERIVED_COUNTERS and not k.startswith("errors:")}
    for field in _LESS_DERIVED:
        if field in out:
            out[field] = max(0, out[field] - max(0, counters.get(f"{field}:{_DERIVED}", 0)))
    return out


def errors_of(counters: dict[str, int], queue: str) -> int | None:
    """The outputs of ``queue`` stored as errors, from the ``progress`` counters as stored; None where the store
    cannot tell (a run whose errors were written before they were counted per queue: ``errors`` is more than the
    queues' ``errors:{queue}``, or one of those went below 0 as an older error was written again)."""
    per_queue = {k: v for k, v in counters.items() if k.startswith("errors:")}
    if any(v < 0 for v in per_queue.values()) or sum(per_queue.values()) != counters.get("errors", 0):
        return None
    return per_queue.get(f"errors:{queue}", 0)


#: The counters :func:`_queue_work` takes the derived outputs' off, and those it drops (the derived outputs' own).
_LESS_DERIVED = ("done", "total", f"{_BEFORE}done", "errors", "unscorable")
_DERIVED_COUNTERS = frozenset(f"{c}:{_DERIVED}" for c in (*_LESS_DERIVED, "redo", "marked", "stopped"))


def _worked(counters: dict[str, int]) -> dict[str, int]:
    """``worked:{queue}``: the outputs of each queue stored scored, unscorable or as an error, not stopped (by a
    cancel, a judge's breaker or budget), from the counters as stored (each output counted done once, whatever a
    resume marked to send again since); 0 for a queue with none written."""
    queues = dict.fromkeys(k.split(":", 1)[1] for k in counters if k.startswith(("done:", "total:")))
    return {f"worked:{q}": max(0, counters.get(f"done:{q}", 0) - counters.get(f"stopped:{q}", 0)) for q in queues
            if q != _DERIVED}  # fmt: skip


def _cancelled_counts(counters: dict[str, int]) -> dict[str, int]:
    """A cancelled run's :func:`_worked`, and its ``unscorable`` less the outputs stored stopped (counted stopped
    beside what it skipped unwritten, never unscorable), from the counters as stored."""
    stopped = sum(v for k, v in counters.items() if k.startswith("stopped:") and k != f"stopped:{_DERIVED}")
    return {**_worked(counters), "unscorable": max(0, counters.get("unscorable", 0) - stopped)}


def scored_of(progress: dict[str, int]) -> int | None:
    """A cancelled run's outputs its workers did (scored, unscorable or errors: :meth:`RunStore.progress`'s
    ``worked:{queue}`` summed; the rest of its total was stopped), None for any other run's ``progress``."""
    worked = [v for k, v in progress.items() if k.startswith("worked:")]
    return sum(worked) if worked else None


#: ``progress`` counters of a resume's marks (:data:`_MARK_REDO_LUA`) -> the counter each is taken off.
_REDO_FOLDS = {"redo": "done", "redo_errors": "errors", "redo_unscorable": "unscorable"}


def _done_now(counters: dict[str, int], *, live: bool = True) -> dict[str, int]:
    """Progress counters with the ``redo`` ones folded in: ``done`` and ``done:{queue}`` leave out what a resume
    sent again that no worker has written again yet, and while the run is ``live`` ``errors`` and ``unscorable`` (and
    their ``:derived``) leave out its old status: a resume's tallies count only what is current. An ended run's marks
    left are of outputs it never wrote again (a cancel): their old status stands, as its summary counts it."""
    out = dict(counters)
    for field in [f for f in out if f.split(":", 1)[0] in _REDO_FOLDS]:
        head = field.split(":", 1)[0]
        n = max(0, out.pop(field))
        if live or head == "redo":
            target = _REDO_FOLDS[head] + field[len(head) :]
            out[target] = out.get(target, 0) - n
    return out


def target_state_part(system: str) -> str:
    """The run-store part (``ragscore:run:{id}:<part>``) holding a target's counters and breaker."""
    return f"target:{system}"


def _stored_result(result: MetricResult) -> str:
    """A result as stored: its status (:func:`_status`), then its JSON. Text that UTF-8 cannot hold (a lone
    surrogate that a provider's JSON spelled ``\\udfff``, read by a metric) gets U+FFFD in its place; a value JSON
    cannot hold (a plug-in's numpy number in its details) makes it that item's error. Neither fails the write of
    the item's whole chunk, whose chord would never complete."""
    try:
        return _status(result) + result.model_dump_json(exclude_defaults=True)
    except PydanticSerializationError:
        pass
    try:
        cleaned = MetricResult.model_validate(valid_unicode(result.model_dump()))
        return _status(cleaned) + cleaned.model_dump_json(exclude_defaults=True)
    except PydanticSerializationError as exc:
        failed = MetricResult.failed(
            f"the metric returned a result JSON cannot hold ({exc}): details take str, int, float, bool, None, "
            "lists and dicts (float(x) for a numpy number)"
        )
        return _status(failed) + failed.model_dump_json(exclude_defaults=True)


def as_stored(result: MetricResult) -> dict[str, Any]:
    """A result as an item read back from the store holds it (:func:`_stored_result`: an error where the
    result's details cannot be JSON), for a reader that uses a result it also writes (the derived metrics)."""
    return json.loads(_stored_result(result)[1:])


def store_url_for_redis_py(url: str) -> str:
    """Translate Celery's ``redis+socket://`` / ``socket://`` URLs to redis-py's ``unix://`` (kombu's
    ``?virtual_host=N`` database to redis-py's ``?db=N``), leaving out the query options kombu alone reads
    (:func:`without_kombu_options`), and kombu's spelling of ``ssl_cert_reqs`` (``CERT_REQUIRED``) as redis-py's
    (``required``): :func:`for_redis_py`."""
    url = for_redis_py(url)
    for prefix in ("redis+socket://", "socket://"):
        if url.startswith(prefix):
            return "unix://" + url[len(prefix) :].replace("?virtual_host=", "?db=")
    return url


#: Connections one process may open to the store. A judge worker runs 32 tasks x 8 call threads, all
#: touching the limiter, cache and counters: redis-py's default pool (100, then MaxConnectionsError) is
#: too small. The pool blocks (up to POOL_TIMEOUT_S) instead of failing when all are in use.
POOL_MAX_CONNECTIONS = 512
POOL_TIMEOUT_S = 30.0


def _auth_refused(password: str | None, exc: Exception) -> str:
    """Why Redis refused the login: no ``password`` as redis-py reads it from the URL (none, or an empty one such as
    ``redis://:@host``, which redis-py does not send; Redis's own words name its HELLO command), else a wrong one
    (Redis's words)."""
    if not password:
        return ("Redis asks for a password and the URL gives none: write it in the URL (redis://:PASSWORD@host:6379/0, "
                "or redis://USER:PASSWORD@... for an ACL user)")  # fmt: skip
    return f"{exc} (check the password in the URL)"


def _noperm_rule(user: str, exc: Exception) -> str:
    """The ACL rule that lets ``user`` run the command Redis's NOPERM reply ``exc`` names (``... to run the 'select'
    command``: ``ACL SETUSER user +select``), or where it names none, what to look for."""
    named = re.search(r"'([^'\s]+)' command", str(exc))
    if named is None:
        return f"give ACL user {user!r} the command Redis names"
    return f"ACL SETUSER {user} +{named.group(1).lower()}"


def probe_redis(url: str, what: str = "Redis", roles: tuple[Role, ...] = ()) -> str | None:
    """One ping without retries: None when Redis answers, else why not; BrokerError for a wrong password
    (redis-py counts that as a connection error, which clients retry for ~20 s, yet it never heals), ConfigError
    for a database the server lacks (never heals either), for a NOPERM reply to the ping or to the SELECT of its
    database (an ACL user that may not run it: no Redis restarting says it; the rule of Redis's command named), and
    for an ACL user that may not do the work of ``roles``
    (:func:`.acl.lacking`: the broker's, the run store's), which failed late with redis-py's raw NoPermissionError.
    A host name that does not resolve is a why not, named as such: it may resolve once its Redis is up (a docker
    compose service's, a Kubernetes pod's name). ``what`` names the Redis in those errors (``the broker's Redis``
    where the run store has one of its own)."""
    from .errors import BrokerError, ConfigError

    try:
        # a URL given in code (evaluate's broker=): check_redis_url refuses it where a setting or --broker has it
        if url.startswith("rediss://") and not any(n == "ssl_cert_reqs" for n, _ in query_options(urlsplit(url).query)):
            raise ValueError(NO_CERT_REQS)
        _check_tls_files(url)
        probe = redis.Redis.from_url(store_url_for_redis_py(url), socket_connect_timeout=5, socket_timeout=5)
        probe.connection_pool.make_connection()  # options redis-py rejects only when it builds a connection
    except (ValueError, TypeError, redis.RedisError) as exc:
        raise ConfigError(
            f"{redact_url(url)}{'' if what == 'Redis' else f' ({what})'} is not a usable Redis URL: {exc}. For TLS: "
            f"{TLS_EXAMPLE}"
        ) from exc
    try:
        if not roles:
            probe.ping()
        elif refused := lacking(probe, roles):  # it pings too, in one round trip more
            raise ConfigError(f"Cannot use {what} at {redact_url(url)}: {refused}")
        return None
    except (redis.AuthenticationError, redis.AuthenticationWrongNumberOfArgsError) as exc:
        why = _auth_refused(probe.connection_pool.connection_kwargs.get("password"), exc)
        raise BrokerError(f"Cannot use {what} at {redact_url(url)}: {why}") from exc
    except redis.exceptions.NoPermissionError as exc:  # its user may not PING, or SELECT its database (on connect)
        user = probe.connection_pool.connection_kwargs.get("username") or "default"
        raise ConfigError(f"Cannot use {what} at {redact_url(url)}: it replies NOPERM to its ACL user {user!r} "
                          f"({exc}): {_noperm_rule(user, exc)}") from exc  # fmt: skip
    except redis.RedisError as exc:
        if "certificate verify failed" in str(exc).lower():  # never heals: not retried as a Redis restarting
            raise BrokerError(
                f"Cannot use {what} at {redact_url(url)}: its TLS certificate was not accepted ({exc}): "
                "ssl_ca_certs must name the CA that signed it, for the host in the URL"
            ) from exc
        if isinstance(exc, redis.ResponseError) and "db index" in str(exc).lower():
            db = probe.connection_pool.connection_kwargs.get("db", 0)  # a unix:// URL's path is its socket
            raise ConfigError(
                f"Cannot use {what} at {redact_url(url)}: it has no database {db} ({exc}); a Redis has databases 0 "
                "to 15 unless its 'databases' setting says more"
            ) from exc
        hint = _unresolved_hint(url, exc) or _refused_hint(url, exc) or _tls_hint(url, exc)
        return f"{str(exc).rstrip('.') if hint else exc}{hint}"  # one stop: "... Connection refused; nothing ..."
    finally:
        probe.close()


#: getaddrinfo's answers that a host name does not exist (now: a service's name may exist once its Redis is up).
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in the chain of ``exc`` (itself, its causes and contexts), else None."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, kind):
        cause = cause.__cause__ or cause.__context__
    return cause


def _unresolved_hint(url: str, exc: redis.RedisError) -> str:
    """What a failed ping says of a host name that does not resolve, "" where it resolved (or the resolver did not
    answer): a mistyped name, or the name of a Redis not up yet, so it is waited for as a Redis starting up."""
    cause = _cause(exc, socket.gaierror)
    if isinstance(cause, socket.gaierror) and cause.errno in _NO_SUCH_NAME:
        return (f"; its host name {urlsplit(url).hostname!r} does not resolve: check its spelling, or that its "
                "Redis is up where a name resolves only then (a docker compose service, a Kubernetes pod)")  # fmt: skip
    return ""


def _refused_hint(url: str, exc: redis.RedisError) -> str:
    """What a failed ping says of a host that refused the connection (:func:`refused_note`); "" for another failure
    or a unix socket."""
    if urlsplit(url).hostname is None or _cause(exc, ConnectionRefusedError) is None:
        return ""
    return refused_note(url)


def refused_note(url: str) -> str:
    """What a failed ping of the TCP URL ``url`` ends with where nothing listens on its port (a Redis not started, a
    mistyped port): :func:`probe_redis`'s words, which a caller may add to (a run that needs no broker)."""
    parts = urlsplit(url)
    return (f"; nothing listens on port {parts.port or 6379} of {parts.hostname}: start its Redis, or correct the "
            "host or port in the URL")  # fmt: skip


#: TLS files a rediss:// URL's query may name (redis-py's and kombu's spelling).
_TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path")


def _check_tls_files(url: str) -> None:
    """ValueError naming a TLS file the URL names and this host lacks (redis-py says only "No such file")."""
    for name, value in query_options(urlsplit(url).query):
        if name in _TLS_FILES and not os.path.exists(value):
            raise ValueError(f"{name}={value} names no file on {socket.gethostname()}")


def _tls_hint(url: str, exc: redis.RedisError) -> str:
    """What a failed ping suggests of TLS on one side only: a rediss:// URL times out on a plain port, and a
    redis:// URL is cut off by a TLS port."""
    said = str(exc).lower()
    if url.startswith("rediss://") and "timeout" in said:
        return "; if that server does not speak TLS, its URL is redis://, not rediss://"
    if url.startswith("redis://") and any(w in said for w in ("reset by peer", "closed by server", "protocol error")):
        return "; if that port speaks TLS only, its URL is rediss://...?ssl_cert_reqs=required&ssl_ca_certs=..."
    return ""


#: What a Redis that evicts loses of a run's work (the broker's, the run store's), as :func:`eviction_problem` says it.
EVICTS_WORK = "queued tasks and results and runs lose them without an error"


def eviction_problem(client: redis.Redis, evicts: str = EVICTS_WORK) -> str | None:
    """Why the Redis of ``client`` may lose a run's work, or None: a ``maxmemory-policy`` other than ``noeviction``
    (a managed Redis's default is often ``volatile-lru``) evicts what it holds once it fills (``evicts``: what, and
    what the run then loses). None where it has no memory limit (``maxmemory`` 0: it never evicts), and where INFO
    is refused (an ACL user without it) or does not answer: nothing to tell."""
    try:
        memory = client.info("memory")
    except redis.RedisError:
        return None
    policy = memory.get("maxmemory_policy")
    if policy in (None, "noeviction") or memory.get("maxmemory") == 0:
        return None
    return (
        f"its maxmemory-policy is {policy}, not noeviction: once it fills, it evicts {evicts}; set maxmemory-policy "
        "noeviction (docs/settings.md, Redis memory)"
    )


def eviction_warning(client: redis.Redis, url: str, what: str = "the Redis", evicts: str = EVICTS_WORK) -> str | None:
    """:func:`eviction_problem` of the Redis of ``client`` (``evicts``: what it loses), said of it as ``what`` at its
    ``url`` (the password hidden); None where it has none."""
    problem = eviction_problem(client, evicts)
    return None if problem is None else f"{what} at {redact_url(url)}: {problem}"


def redis_client(url: str, read_timeout_s: float | None = None, *, retries: int | None = None) -> redis.Redis:
    """A redis-py client for a broker-style URL: a blocking pool, lost connections retried ``retries`` times
    (default :data:`CLIENT_RETRIES`; 0: each
    command tried once, for a check that says a Redis gone rather than wait ~20 s for it). ``read_timeout_s``:
    a reply (or a connection) that takes longer raises ``redis.TimeoutError``, not retried (the caller already
    waited; a Redis that accepts and never answers, hung or behind a partition, held the orchestrator for ever).
    None: a worker's, ``RAGSCORE_WORKER_STORE_TIMEOUT_S`` (a minute by default), retried as a lost connection
    (workers: a chunk waits out a slow Redis rather than fail). The client owns its pool: closed (``with``), its
    sockets are too, not left to the garbage collector."""
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    retried: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError, TimeoutError)
    timeouts: dict[str, Any] = {"socket_timeout": get_settings().worker_store_timeout_s}  # connects: redis-py's own
    if read_timeout_s is not None:  # Retry's own default retries timeouts too: 8 more waits of read_timeout_s
        retried = (redis.ConnectionError,)
        timeouts = {"socket_timeout": read_timeout_s, "socket_connect_timeout": read_timeout_s}
    pool = redis.BlockingConnectionPool.from_url(
        store_url_for_redis_py(url),
        max_connections=POOL_MAX_CONNECTIONS,
        timeout=POOL_TIMEOUT_S,
        decode_responses=True,
        retry=Retry(
            ExponentialBackoff(cap=CLIENT_BACKOFF_CAP_S, base=CLIENT_BACKOFF_BASE_S),
            retries=CLIENT_RETRIES if retries is None else retries,
            supported_errors=retried,
        ),
        retry_on_error=list(retried),
        health_check_interval=30,
        **timeouts,
    )
    return redis.Redis.from_pool(pool)


#: :func:`with_timeout`'s clients, by the pool of the client each waits on less (built once per pool and timeout).
_TIMED: weakref.WeakKeyDictionary[redis.ConnectionPool, dict[float, redis.Redis]] = weakref.WeakKeyDictionary()
_TIMED_LOCK = threading.Lock()
#: Connection settings :func:`with_timeout` does not copy: the pool's own helpers (redis-py builds them per pool).
_POOL_OWN = ("maint_notifications", "orig_")


def with_timeout(client: redis.Redis, timeout_s: float) -> redis.Redis:
    """A client of ``client``'s Redis (its address, TLS, password, database) that waits ``timeout_s`` at most for a
    connection or a reply and tries each command once (``redis.TimeoutError``, ``redis.ConnectionError``): for what
    must know in time that Redis did not answer, where a worker's own client waits a minute and retries. One per
    pool and timeout, kept while ``client``'s pool lives."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    pool = client.connection_pool
    with _TIMED_LOCK:  # threads of one worker build it once: a second pool would hold connections of its own
        by_timeout = _TIMED.setdefault(pool, {})
        if timeout_s not in by_timeout:
            by_timeout[timeout_s] = redis.Redis(
                connection_pool=pool_like(pool, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                          retry=Retry(NoBackoff(), 0), retry_on_error=[], health_check_interval=0)
            )  # fmt: skip
        return by_timeout[timeout_s]


def pool_like(pool: redis.ConnectionPool, **settings: Any) -> redis.ConnectionPool:
    """A new connection pool of ``pool``'s Redis (its address, TLS, password, database), ``settings`` changed (a
    timeout, how replies decode), without ``pool``'s own helpers (:data:`_POOL_OWN`): the one way to open a client
    like another with other settings (:func:`with_timeout`, the embedding cache's bytes client)."""
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if not k.startswith(_POOL_OWN)} | settings
    return redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)


def _status(result: MetricResult) -> str:
    """First character of a stored output: ``o`` scored, ``n`` unscorable, ``s`` stopped (unscorable until a
    resume does it again), ``e`` error."""
    if result.error is not None:
        return "e"
    if result.score is None:
        return "s" if result.details.get("stopped") else "n"
    return "o"


def _index_kept() -> contextlib.AbstractContextManager[None]:
    """Around an upkeep of the runs' index (:meth:`RunStore.list_runs`): a store user that may only read (status's
    run list) leaves it as it is."""
    return contextlib.suppress(redis.exceptions.NoPermissionError)


class RunOverview(TypedDict):
    """One run as :meth:`RunStore.overview` lists it (``ragscore status`` without a run id)."""

    run_id: str
    state: str
    done: int
    total: int
    submitted_at: float | None
    dataset: str
    predictions: str


class RunStore:
    """Typed access to one Redis database holding any number of runs."""

    def __init__(
        self, client: redis.Redis, ttl_s: int, broker: redis.Redis | None = None, *, broker_apart: bool = False
    ) -> None:
        self.r = client
        #: The Redis database of the broker's queues (kombu's lists and ``unacked`` hash): the store's own unless
        #: the broker is another one (an embedded process's lane, or RAGSCORE_STORE_URL set apart on a cluster).
        self.broker = broker if broker is not None else client
        #: Whether ``broker`` is on another Redis server than the store (RAGSCORE_STORE_URL set apart on a cluster):
        #: the store then answers without it, and a command that needs the broker asks it itself. The orchestrator's
        #: connect() says so; a worker never asks.
        self.broker_apart = broker_apart
        #: Seconds a finished run's keys are kept (from its summary on).
        self.final_ttl_s = ttl_s
        #: Seconds every write of a running run keeps its key (at least ``LIVE_RUN_TTL_S``).
        self.ttl_s = max(ttl_s, LIVE_RUN_TTL_S)
        self._write = client.register_script(_WRITE_LUA)
        self._scored = client.register_script(_SCORED_LUA)
        self._answers = client.register_script(_ANSWERS_LUA)
        self._set_state = client.register_script(_SET_STATE_LUA)
        self._expire_items = client.register_script(_EXPIRE_ITEMS_LUA)
        self._incomplete = client.register_script(_INCOMPLETE_LUA)
        self._mark_redo = client.register_script(_MARK_REDO_LUA)
        self._mark_answer_redo = client.register_script(_MARK_ANSWER_REDO_LUA)
        self._work_began = client.register_script(_WORK_BEGAN_LUA)
        self._take_lease = client.register_script(_TAKE_LEASE_LUA)
        self._renew_lease = client.register_script(_RENEW_LEASE_LUA)
        self._release_lease = client.register_script(_RELEASE_LEASE_LUA)
        self._hset_if_exists = client.register_script(_HSET_IF_EXISTS_LUA)

    # ---------------------------------------------------------------- keys
    @staticmethod
    def key(run_id: str, part: str) -> str:
        return f"{PREFIX}{run_id}:{part}"

    # ---------------------------------------------------------------- run state
    def create_run(self, run_id: str, meta: dict[str, Any]) -> None:
        """Create (or reset the state of) a run; idempotent for resumes."""
        fields = {k: v if isinstance(v, str) else json.dumps(v) for k, v in meta.items()}
        fields.setdefault("created_at", str(time.time()))
        pipe = self.r.pipeline()
        pipe.hset(self.key(run_id, "meta"), mapping=fields)  # type: ignore[arg-type]  # redis stub: invariant keys
        pipe.expire(self.key(run_id, "meta"), self.ttl_s)
        pipe.zadd(RUNS_INDEX, {run_id: float(fields["created_at"])}, nx=True)  # a resume keeps its first time
        pipe.execute()

    def _run_parts(self, run_id: str, shards: bool = True) -> list[str]:
        """The run's own keys (not its items): meta, counters, shard id lists and answers (not with ``shards``
        False), done sets, judge limiters."""
        n_shards, generation = self.n_shards(run_id) if shards else 0, self.generation(run_id)
        parts = ["meta", "progress", "failed_rows", "summary", "judge", "embed", "deliveries", "scoring", "redo"]
        parts.append(JUDGE_LIMITERS_PART)
        parts += [f"unwritten:{queue}" for queue in PROGRESSIVE_QUEUES]
        parts += [f"shards_done:{g}" for g in range(generation + 1)]
        parts.append(ANSWERS_SCORED)
        parts += [f"{kind}:{shard}" for shard in range(n_shards) for kind in ("ids", "answers")]
        suite = self.r.hget(self.key(run_id, "meta"), "suite")
        targets = Suite.stored(suite).all_targets if suite else []
        return parts + [target_state_part(t.name) for t in targets]

    def touch(self, run_id: str, ttl_s: int | None = None) -> None:
        """Give the run's own keys (not its items) ``ttl_s`` (default: the live TTL) from now: written once at
        submit, they would expire in a run that lasts longer than that, and every item with them."""
        pipe = self.r.pipeline(transaction=False)
        self._expire_parts(pipe, run_id, self.ttl_s if ttl_s is None else ttl_s)
        pipe.execute()

    def _expire_parts(self, pipe: redis.client.Pipeline, run_id: str, ttl: int, shards: bool = True) -> None:
        """Queue on ``pipe`` ``ttl`` for each of the run's own keys (:meth:`_run_parts`; its shards' id lists and
        answers only with ``shards``)."""
        for part in self._run_parts(run_id, shards):
            pipe.expire(self.key(run_id, part), ttl)

    def work_began(self, run_id: str, generation: int) -> None:
        """Stamp when a worker first took a task of the run's current ``generation`` (the store's clock) and the
        counters then (:func:`work_began`): its rate counts from then, not from its submission (a run queued behind
        another run's messages was not at work while it waited) nor from an earlier attempt's start."""
        keys = [self.key(run_id, "meta"), self.key(run_id, "progress"), self.key(run_id, "judge")]
        self._work_began(keys=keys, args=[generation])

    def settle(self, run_id: str, ttl_s: int | None = None, *, released: bool = False) -> None:
        """Give every key of the run, its items included, ``ttl_s`` (default: the finished run's TTL) from
        now: called once its summary is written, and with the live TTL when a resume reopens it (which takes back
        an earlier :meth:`release_items`). ``released`` (the summary's): a release is kept, its items, id lists and
        answers left their TTL: the process that read the summary may have written the reports and released them
        before this call (a worker's, late on a loaded host), which would keep them RAGSCORE_RUN_TTL_S."""
        ttl = self.final_ttl_s if ttl_s is None else ttl_s
        pipe = self.r.pipeline(transaction=False)
        self._expire_parts(pipe, run_id, ttl, shards=False)  # the shards' by the script of _expire_shards
        if not released:
            pipe.hdel(self.key(run_id, "meta"), ITEMS_UNTIL, ITEMS_IN, ITEMS_KEYS)
        self._expire_shards(pipe, run_id, ttl, ITEMS_UNTIL if released else "")
        pipe.execute()

    def _expire_shards(self, pipe: redis.client.Pipeline, run_id: str, ttl: int, unless: str = "") -> None:
        """Queue on ``pipe`` ``ttl`` for each shard's items, id list and answers, one script per shard (its items'
        EXPIREs run in Redis); ``unless``: a field of the run's meta that, where it holds it, leaves them as they
        are (looked at in that script)."""
        meta, prefix = self.key(run_id, "meta"), self.key(run_id, "item:")
        for shard in range(self.n_shards(run_id)):
            keys = [self.key(run_id, f"ids:{shard}"), self.key(run_id, f"answers:{shard}"), meta]
            self._expire_items(keys=keys, args=[prefix, ttl, unless], client=pipe)

    def release_items(self, run_id: str, ttl_s: int, out_dir: str, *, restorable: bool = False) -> None:
        """Let the items, answers and shard id lists of a finished run whose whole reports are in ``out_dir`` (a folder
        that is kept) expire ``ttl_s`` from now (its ``RAGSCORE_RUN_TTL_S`` where shorter); its other keys keep theirs.
        Its meta says when and where first: :meth:`check_items_kept` refuses them from then on (the id lists name the
        items alone, each as long as a shard); ``restorable``: with the digest of its id lists (``ITEMS_KEYS``), for
        the resume that takes them back (:meth:`restore_items`)."""
        ttl = min(ttl_s, self.final_ttl_s)
        fields: list[Any] = [ITEMS_UNTIL, time.time() + ttl, ITEMS_IN, out_dir]
        if restorable:
            fields += [ITEMS_KEYS, keys_digest(self.shard_keys(run_id, s) for s in range(self.n_shards(run_id)))]
        self._hset_if_exists(keys=[self.key(run_id, "meta")], args=fields)
        pipe = self.r.pipeline(transaction=False)
        self._expire_shards(pipe, run_id, ttl)
        pipe.execute()

    def restore_items(self, run_id: str, items: Iterable[RawItem], shard_items: Callable[[int], int]) -> None:
        """Write back, with the live TTL, the items of a released run (:meth:`release_items`) that left the store, from
        its reports (``items`` in input order, as ``items.jsonl`` holds them: :func:`stored_fields`), and its shards'
        id lists (``shard_items(shard)`` items each, as submitted: a target run's, every row of a shard for every
        target); its counters, kept, count these very items. Each shard is one transaction (an item left over from the
        release is replaced whole)."""
        stream = iter(items)
        for shard in itertools.count():
            batch = list(itertools.islice(stream, shard_items(shard)))
            if not batch:
                return
            pipe = self.r.pipeline(transaction=True)
            for raw in batch:
                name = self.key(run_id, f"item:{raw.key}")
                pipe.delete(name)
                pipe.hset(name, mapping=stored_fields(raw))  # type: ignore[arg-type]  # redis stub: invariant keys
                pipe.expire(name, self.ttl_s)
            ids = self.key(run_id, f"ids:{shard}")
            pipe.delete(ids)
            pipe.rpush(ids, *(raw.key for raw in batch))
            pipe.expire(ids, self.ttl_s)
            pipe.execute()

    def move_reports_dir(self, run_id: str, moved_from: list[str], moved_to: str, rows_file: str) -> None:
        """Name ``moved_to`` (``DIR/previous/RUN_ID``, where the reports of run ``run_id`` moved from each folder of
        ``moved_from`` in turn) as the folder holding its items released for one of those (:meth:`release_items`), as
        the folder it writes its reports to where that was one (:meth:`note_out_dir`: its resume must not write over
        the new run's), and as that of its dataset where that was the ``rows_file`` of one (``evaluate()``'s copy of its
        rows, moved with them); else nothing. The store names the folder it was last told of, any of ``moved_from``."""
        meta = self.key(run_id, "meta")
        items_in, writes_to, dataset = self.r.hmget(meta, ITEMS_IN, "out_dir", "dataset")
        fields = [ITEMS_IN, moved_to] if items_in in moved_from else []
        if writes_to in moved_from:
            fields += ["out_dir", moved_to]
        if dataset in [os.path.join(folder, rows_file) for folder in moved_from]:
            fields += ["dataset", os.path.join(moved_to, rows_file)]
        if fields:
            self._hset_if_exists(keys=[meta], args=fields)

    def released_to(self, run_id: str) -> str | None:
        """The folder whose reports hold the items of run ``run_id`` released for it (:meth:`release_items`,
        :meth:`move_reports_dir`); None where they were not released (or a resume since took them back)."""
        return self.meta(run_id).get(ITEMS_IN)

    def restore_answers(self, run_id: str, answers: Iterable[tuple[int, str, dict[str, Any]]]) -> None:
        """Write back, with the live TTL, the target answers of a released run (:meth:`release_items`) that left the
        store, from its reports (``(shard, item key, answer)`` in input order, as its ``answers.jsonl`` holds them);
        its counters, kept, count these very answers. Each shard is one transaction (its hash replaced whole)."""
        for shard, batch in itertools.groupby(answers, key=lambda answer: answer[0]):
            name = self.key(run_id, f"answers:{shard}")
            pipe = self.r.pipeline(transaction=True)
            pipe.delete(name)
            pipe.hset(name, mapping={key: json.dumps(answer, ensure_ascii=False) for _, key, answer in batch})
            pipe.expire(name, self.ttl_s)
            pipe.execute()

    def check_items_kept(self, run_id: str, where: str | None = None) -> None:
        """ConfigError, naming the folder that holds them (``where``, where the caller found they moved to since;
        default: the one recorded, :meth:`released_to`), for a run whose items left the store (or leave it within
        ``ITEMS_MARGIN_S``) after :meth:`release_items`: read, they would be missing, or a resume would score them
        all again."""
        meta = self.meta(run_id)
        until = meta.get(ITEMS_UNTIL)
        if until is not None and time.time() >= float(until) - ITEMS_MARGIN_S:
            where = where or meta.get(ITEMS_IN, "its --out DIR")
            raise ConfigError(
                f"Run {run_id}: its items left the store once its reports were written to {where} (an embedded "
                f"run's are kept there, not in its Redis): `ragscore report {where}` reads them, `ragscore compare` "
                f"and `ragscore consensus` take that folder; to score the run again, run it again"
            )

    def exists(self, run_id: str) -> bool:
        return bool(self.r.exists(self.key(run_id, "meta")))

    def meta(self, run_id: str) -> dict[str, str]:
        meta = cast("dict[str, str]", self.r.hgetall(self.key(run_id, "meta")))
        if not meta:
            raise ConfigError(NO_SUCH_RUN.format(run_id=run_id))
        return meta

    def set_meta(self, run_id: str, **fields: Any) -> None:
        """Write meta fields; a ``state`` goes through :meth:`set_state` (a terminal state is kept)."""
        mapping = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
        if "state" in mapping:
            self.set_state(run_id, mapping.pop("state"), **mapping)
        elif mapping:
            pipe = self.r.pipeline()
            pipe.hset(self.key(run_id, "meta"), mapping=mapping)  # type: ignore[arg-type]  # redis stub: invariant keys
            pipe.expire(self.key(run_id, "meta"), self.ttl_s)
            pipe.execute()

    def note_reports_dir(self, run_id: str, out_dir: str) -> None:
        """Record where the run's reports were last written (meta ``reports_dir``, said by ``ragscore status``),
        keeping the meta's TTL: a finished run's meta must not outlive its items."""
        self._hset_if_exists(keys=[self.key(run_id, "meta")], args=["reports_dir", out_dir])

    def reports_dir(self, run_id: str) -> str | None:
        """The folder the run's reports were last written to (:meth:`note_reports_dir`); None where none was."""
        return self.meta(run_id).get("reports_dir")

    def note_job(self, run_id: str, job: dict[str, Any]) -> None:
        """Record the options of the command that started the run which its resumes apply too (meta ``job``, as its
        ``DIR/run.json`` keeps them: the CLI's gates), for a resume into another folder; keeping the meta's TTL."""
        self._hset_if_exists(keys=[self.key(run_id, "meta")], args=["job", json.dumps(job)])

    def job(self, run_id: str) -> dict[str, Any] | None:
        """The job :meth:`note_job` recorded for run ``run_id`` (``{}``, as submitted: no gate options); None where
        none was (a run of an older ragscore, whose gate options the store does not know)."""
        try:
            job = json.loads(self.meta(run_id).get("job") or "null")
        except ValueError:
            return None
        return job if isinstance(job, dict) else None

    def note_out_dir(self, run_id: str, out_dir: str) -> None:
        """Record the folder the run writes its reports to (meta ``out_dir``, from its start and each resume's: where
        ``ragscore resume RUN_ID`` writes them), keeping the meta's TTL."""
        self._hset_if_exists(keys=[self.key(run_id, "meta")], args=["out_dir", out_dir])

    def out_dir(self, run_id: str) -> str | None:
        """The folder run ``run_id`` writes its reports to (:meth:`note_out_dir`); None where none was recorded (a
        submitted run, one started before ragscore recorded it)."""
        return self.meta(run_id).get("out_dir")

    def set_state(self, run_id: str, state: str, **fields: str) -> str:
        """Atomically set the state (and ``fields``) unless the run is already finished, failed or cancelled;
        only a resume (``SUBMITTING``) reopens such a run. ``fields`` are written either way. Returns the
        state the run is in now."""
        args: list[str | int] = [state, self.ttl_s, *(x for kv in fields.items() for x in kv)]
        return str(self._set_state(keys=[self.key(run_id, "meta")], args=args))

    def state(self, run_id: str) -> str:
        return cast("str | None", self.r.hget(self.key(run_id, "meta"), "state")) or ""

    def add_ids(self, run_id: str, shard: int, keys: list[str], queue_units: dict[str, int]) -> None:
        """Record a shard's item keys (in input order) and add its work units to the queue totals."""
        ids_key = self.key(run_id, f"ids:{shard}")
        pipe = self.r.pipeline()
        pipe.delete(ids_key)
        pipe.rpush(ids_key, *keys)
        pipe.expire(ids_key, self.ttl_s)
        progress_key = self.key(run_id, "progress")
        for queue, units in queue_units.items():
            pipe.hincrby(progress_key, f"total:{queue}", units)
            pipe.hincrby(progress_key, "total", units)
        pipe.expire(progress_key, self.ttl_s)
        pipe.execute()

    def incomplete(self, run_id: str, keys: list[str], outputs: list[str]) -> dict[str, set[str]]:
        """Per item key, the outputs the store lacks or holds as errors or stopped (what a resume must redo)."""
        return self.redo_lookup(run_id, keys, outputs).todo

    def redo_lookup(self, run_id: str, keys: list[str], outputs: list[str]) -> RedoLookup:
        """What a resume must redo (:meth:`incomplete`), and which of it is stored (as errors or stopped).

        Decided in Redis (one script per ``INCOMPLETE_BATCH`` items): only the incomplete items' indices come
        back, so a resume of a run that is mostly done does not read every stored result back."""
        found = RedoLookup({}, {})
        if not keys or not outputs:
            return found
        pipe = self.r.pipeline(transaction=False)
        batches = [keys[start : start + INCOMPLETE_BATCH] for start in range(0, len(keys), INCOMPLETE_BATCH)]
        for batch in batches:
            self._incomplete(keys=[self.key(run_id, f"item:{key}") for key in batch], args=outputs, client=pipe)
        for batch, masks in zip(batches, pipe.execute(), strict=True):
            for index, mask in zip(masks[::2], masks[1::2], strict=True):
                key = batch[int(index)]
                found.todo[key] = {o for o, flag in zip(outputs, mask, strict=True) if flag != "0"}
                if stored := {o for o, flag in zip(outputs, mask, strict=True) if flag == "2"}:
                    found.stored[key] = stored
        return found

    def reset_redo(self, run_id: str) -> None:
        """A resume starts its own marks of what it sends again (:meth:`mark_redo`), and its own count of them."""
        key = self.key(run_id, "progress")
        stale = [f for f in cast("list[str]", self.r.hkeys(key)) if f.split(":", 1)[0] in (*_REDO_FOLDS, "marked")]
        pipe = self.r.pipeline()
        pipe.delete(self.key(run_id, "redo"))
        # marks of chunks that died unwritten would count as done what the resume sends again; a chunk still at work
        # marks again what it scores next, and its write counts the rest
        pipe.delete(*(self.key(run_id, f"unwritten:{queue}") for queue in PROGRESSIVE_QUEUES))
        if stale:
            pipe.hdel(key, *stale)
        pipe.execute()

    def mark_redo(self, run_id: str, outputs: list[tuple[str, str, str]]) -> int:
        """Mark ``(item key, output, queue)`` a resume sends again that are stored as errors or stopped, before it
        sends them: until a worker writes each again it is not done (:meth:`progress`), though the ``done`` counter
        holds it. Returns how many were marked."""
        if not outputs:
            return 0
        args: list[Any] = [self.ttl_s]
        for key, output, queue in outputs:
            args += [self.key(run_id, f"item:{key}"), output, queue]
        keys = [self.key(run_id, "progress"), self.key(run_id, "redo")]
        return int(self._mark_redo(keys=keys, args=args))

    def mark_answer_redo(self, run_id: str, shard: int, keys: list[str]) -> int:
        """:meth:`mark_redo` for the answers of ``keys`` a resume asks the target again that are stored as failed
        (each counted done once already). Returns how many were marked."""
        if not keys:
            return 0
        parts = ("progress", "redo", f"answers:{shard}")
        return int(self._mark_answer_redo(keys=[self.key(run_id, p) for p in parts], args=[self.ttl_s, *keys]))

    def progress(self, run_id: str) -> dict[str, int]:
        """The ``progress`` counters, with ``judge_calls`` (the ``judge`` counters' ``calls``: requests sent to the
        judge) once the run sent one, and ``target_calls`` (to its targets) once it sent one; one round trip.
        ``done`` leaves out what a resume sent again and no worker has written again yet, and while the run has not
        ended holds, in ``done`` and ``done:{queue}``, the outputs a chunk in flight has scored and not written yet
        (:meth:`mark_scored`). ``done``, ``total``, ``errors`` and ``unscorable`` are the queues' work units, without
        the derived outputs (:func:`_queue_work`), as the run list (:meth:`overview`) counts them. Once a worker took
        a task of the run's current attempt (:meth:`work_began`), also ``work_ms``, the store's clock since then, and
        ``before:{counter}`` of ``done``, ``done:{queue}`` and ``judge_calls``: the counter less it is the attempt's
        work (:meth:`WorkBegan.before`: a resume's marks made after the stamp count too); the attempt's rate is its
        work over its own time, on one clock. While the run's judge calls wait a second or more at the shared rate
        limiter, ``judge_wait_ms`` and what they wait on (``judge_default:rpm`` / ``:tpm`` where that limit is
        ragscore's default: the meta's ``judge_defaulted_limits``), and ``target_wait_*`` while its target calls do
        (:func:`_stage_wait`), and ``load_ms:{queue}`` while a worker loads a model or encodes for it (:func:`_loads`):
        the views say so, not "no progress". While it runs, ``judge_rpm`` (``judge_pace_even``),
        ``judge_calls_planned``, under ``judge.max_in_flight`` ``judge_max_in_flight`` and ``judge_call_ms``
        (:func:`_judge_in_flight`), ``judge_limiters`` (:func:`_judge_limiters`), and a lone target's ``target_rpm``
        (``target_pace_even``): the views' ETA floor (``orchestrator.floors``). A
        cancelled run's hold ``worked:{queue}`` too (:func:`_worked`; :func:`scored_of` sums them): its views set it
        against what was stopped, and its ``unscorable`` leaves out the outputs stored stopped
        (:func:`_cancelled_counts`)."""
        return self.progress_and_clock(run_id)[0]

    def progress_and_clock(self, run_id: str) -> tuple[dict[str, int], float]:
        """:meth:`progress`, and the store's clock (Redis ``TIME``, seconds) it was read at: ``work_ms`` runs to it."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(self.key(run_id, "progress"))
        pipe.hmget(self.key(run_id, "judge"), ("calls", "provider_rpm", "call_ms"))
        meta_names = (*WORK_BEGAN_FIELDS, "state", "suite", "judge_calls_planned", "judge_defaulted_limits")
        pipe.hmget(self.key(run_id, "meta"), meta_names)
        for queue in PROGRESSIVE_QUEUES:
            pipe.hlen(self.key(run_id, f"unwritten:{queue}"))
        for part in WAIT_PARTS.values():
            pipe.hgetall(self.key(run_id, part))
        pipe.hvals(self.key(run_id, JUDGE_LIMITERS_PART))
        pipe.hvals(self.key(run_id, LOADING_PART))
        pipe.time()
        counters, judge, meta_fields, *unwritten, limiters, loading, (seconds, micros) = pipe.execute()
        judge_calls, provider_rpm, call_ms = judge
        unwritten, waits = unwritten[: len(PROGRESSIVE_QUEUES)], unwritten[len(PROGRESSIVE_QUEUES) :]
        *began_fields, state, suite, planned, defaulted = meta_fields
        stored = {k: int(v) for k, v in counters.items()}
        out = {
            k: v
            for k, v in _done_now(stored, live=state not in RunState.DONE).items()
            if k.split(":", 1)[0] not in ("marked", "stopped")
        }
        if state == RunState.CANCELLED:  # what its workers did, apart from what the cancel stopped
            out.update(_cancelled_counts(stored))
        if state not in RunState.DONE:  # an ended run's marks are of chunks that died unwritten (a cancel): not done
            for queue, n in zip(PROGRESSIVE_QUEUES, unwritten, strict=True):
                if n:  # scored by a chunk in flight, not written yet: done, though not yet in the counters
                    out["done"] = out.get("done", 0) + n
                    out[f"done:{queue}"] = out.get(f"done:{queue}", 0) + n
        if judge_calls is not None:
            out["judge_calls"] = int(judge_calls)
        if state not in RunState.DONE:
            in_flight = _judge_in_flight(suite, call_ms)
            out.update(
                _judge_limit(suite, provider_rpm)
                | in_flight
                | _judge_limiters(limiters, capped=bool(in_flight))
                | _target_limit(suite)
            )
            if planned is not None:  # the judge calls its run sends at least (orchestrator.floors.judge_floor_s)
                out["judge_calls_planned"] = int(planned)
            for stage, wait in zip(WAIT_PARTS, waits, strict=True):
                if wait:
                    # One judge limiter says "the judge rate limit". Counted by name: a key rotated mid-run (or
                    # between attempts) left its old limiter behind, under the same name.
                    named = stage != "judge" or len(set(limiters)) > 1
                    out.update(_stage_wait(stage, wait, seconds * 1000 + micros // 1000, named=named))
                    if stage == "judge":  # its limits left at ragscore's defaults: the views say they are assumed
                        out.update({f"judge_default:{name}": 1 for name in (defaulted or "").split(",") if name})
            out.update(_loads(loading, seconds * 1000 + micros // 1000))
        began = work_began(dict(zip(WORK_BEGAN_FIELDS, began_fields, strict=True)))
        if began is not None:  # this attempt's time at work and what was done before it, on the store's clock
            out["work_ms"] = max(0, round((seconds + micros / 1e6 - began.at) * 1000))
            out.update({f"{_BEFORE}{k}": v for k, v in began.before(stored).items()})
        return _queue_work(out), seconds + micros / 1e6

    # ---------------------------------------------------------------- results
    def write_results(
        self,
        run_id: str,
        queue: str,
        items: Iterable[tuple[str, dict[str, Any], dict[str, MetricResult]]],
    ) -> int:
        """Write ``(key, item_meta, {output: result})`` triples in one round trip; returns new fields."""
        args: list[Any] = [self.ttl_s, queue, 0]
        count = 0
        for key, item_meta, results in items:
            count += 1
            args += [self.key(run_id, f"item:{key}"), len(results) + 1]
            args += ["_meta", _meta_json(item_meta)]
            for name, result in results.items():
                args += [name, _stored_result(result)]
        args[2] = count
        if not count:
            return 0
        keys = [self.key(run_id, "progress"), self.key(run_id, "meta"), self.key(run_id, "redo")]
        if queue in PROGRESSIVE_QUEUES:
            keys.append(self.key(run_id, f"unwritten:{queue}"))
        return int(self._write(keys=keys, args=args))

    def mark_scored(self, run_id: str, queue: str, key: str, outputs: list[str]) -> int:
        """Item ``key``'s ``outputs`` are scored by a chunk of ``queue`` (one of :data:`PROGRESSIVE_QUEUES`) that has
        not written them yet: :meth:`progress` counts them done from now (one script, no read back), and the chunk's
        :meth:`write_results` takes the marks as it counts them, in one script: never counted twice, on a redelivery
        either. Outputs the store counts done already are not marked. Returns how many were marked."""
        if queue not in PROGRESSIVE_QUEUES or not outputs:
            return 0
        item = self.key(run_id, f"item:{key}")
        args: list[Any] = [self.ttl_s]
        for output in outputs:
            args += [item, output]
        keys = [self.key(run_id, f"unwritten:{queue}"), self.key(run_id, "redo")]
        return int(self._scored(keys=keys, args=args))

    def keep_item_meta(self, run_id: str, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Write the ``_meta`` of items a cancel skipped, where no queue wrote one: the reports keep their group,
        question type and question fingerprint (the key alone holds only the id and system). No output is written,
        so a resume still scores them."""
        pipe = self.r.pipeline(transaction=False)
        for key, item_meta in items:
            name = self.key(run_id, f"item:{key}")
            pipe.hsetnx(name, "_meta", _meta_json(item_meta))
            pipe.expire(name, self.ttl_s)
        pipe.execute()

    # ---------------------------------------------------------------- target answers
    def save_answers(
        self, run_id: str, shard: int, answers: dict[str, dict[str, Any]], *, late: bool = False
    ) -> SavedAnswers:
        """Store target answers (``{"row": ..., "error"?: ...}`` per item key); returns how many are new and which
        were stored (not those a stored answer kept out: their unfilled fields were counted already). Two deliveries
        of one chunk may overlap (one sent again while the first still asks, or a call answering after its task's
        deadline), so the write is one script that keeps a stored real answer: an error never replaces it, and of two
        answers the first is kept (the shard's callback may have scored it already: the row scored stays the row
        stored). An answer replaces an error, and an error another error. ``late``: answers of calls that ended after
        their task (:func:`~ragscore_workers.target.stage.answer_chunk`), which replace a stored error alone: a run
        whose answers are gone (expired, released) is not written to, nor its answers' TTL changed, nor is a shard
        whose callback scored its answers already (:meth:`mark_answers_scored`): its report holds the error, and a
        resume asks again (the reply cached: not paid for twice)."""
        if not answers:
            return SavedAnswers(0, frozenset())
        args: list[Any] = [self.ttl_s, int(late), shard]
        for key, answer in answers.items():
            args += [key, json.dumps(answer, ensure_ascii=False)]
        parts = (f"answers:{shard}", "progress", "redo", "meta", ANSWERS_SCORED)
        new, *stored = self._answers(keys=[self.key(run_id, part) for part in parts], args=args)
        return SavedAnswers(int(new), frozenset(stored))

    def mark_answers_scored(self, run_id: str, shard: int, generation: int) -> None:
        """The callback of ``shard``'s target chord of ``generation`` reads its answers now: a late answer
        (:meth:`save_answers`) of that generation is not stored after, where it would disagree with the report."""
        key = self.key(run_id, ANSWERS_SCORED)
        pipe = self.r.pipeline()
        pipe.hset(key, str(shard), str(generation))
        pipe.expire(key, self.ttl_s)
        pipe.execute()

    def answers(self, run_id: str, shard: int, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The stored answers of ``keys`` (keys without one are left out)."""
        if not keys:
            return {}
        values = self.r.hmget(self.key(run_id, f"answers:{shard}"), keys)
        return {k: json.loads(v) for k, v in zip(keys, values, strict=True) if v is not None}

    def answers_of(self, run_id: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored answers of a few ``keys`` of any shard (a report's worst items), in one round trip: an HMGET
        of them per shard, not the run's answers (keys without one are left out)."""
        wanted = list(keys)
        if not wanted:
            return {}
        pipe = self.r.pipeline(transaction=False)
        for shard in range(self.n_shards(run_id)):
            pipe.hmget(self.key(run_id, f"answers:{shard}"), wanted)
        found: dict[str, dict[str, Any]] = {}
        for values in pipe.execute():
            found |= {k: json.loads(v) for k, v in zip(wanted, values, strict=True) if v is not None}
        return found

    def iter_answers(self, run_id: str, batch: int = 500) -> Iterator[dict[str, Any]]:
        """Every stored answer of the run, in input order (the answered rows ``answers.jsonl`` holds)."""
        for shard in range(self.n_shards(run_id)):
            keys = self.shard_keys(run_id, shard)
            for start in range(0, len(keys), batch):
                chunk = keys[start : start + batch]
                yield from self.answers(run_id, shard, chunk).values()

    def written_done(self, run_id: str, keys: list[str], outputs: list[str]) -> int:
        """How many of items ``keys`` have every one of ``outputs`` written: each stored and not sent again by a resume
        (:meth:`mark_redo`). An output only marked scored (:meth:`mark_scored`) is not: the chunk that marked it has not
        written it, and a worker killed whole lost it (its chunk, handed back, scores it again). One pipelined round
        trip of reads (a user that may only read runs it): an HMGET per item, and one of all their redo marks (a call
        per item and output cost 95 ms for 250 items of 7 outputs)."""
        if not keys or not outputs:
            return 0
        items = [self.key(run_id, f"item:{key}") for key in keys]
        marks = [f"{item}|{output}" for item in items for output in outputs]
        pipe = self.r.pipeline(transaction=False)
        for item in items:
            pipe.hmget(item, outputs)
        pipe.hmget(self.key(run_id, "redo"), marks)
        *stored, redo = pipe.execute()
        done = [value is not None and again is None for value, again in zip((v for row in stored for v in row), redo,
                                                                             strict=True)]  # fmt: skip
        return sum(all(done[at : at + len(outputs)]) for at in range(0, len(done), len(outputs)))

    def item_fields(self, run_id: str, keys: list[str]) -> list[dict[str, str]]:
        """Raw stored fields of several items (one pipelined round trip)."""
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            pipe.hgetall(self.key(run_id, f"item:{key}"))
        return pipe.execute()

    def n_shards(self, run_id: str) -> int:
        value = self.r.hget(self.key(run_id, "meta"), "n_shards")
        return int(value) if value else 0

    def shard_keys(self, run_id: str, shard: int) -> list[str]:
        return cast("list[str]", self.r.lrange(self.key(run_id, f"ids:{shard}"), 0, -1))

    def iter_raw_items(self, run_id: str, batch: int = 500) -> Iterator[RawItem]:
        """Every item of the run in input order as plain dicts (fast path for aggregation and reports)."""
        for shard in range(self.n_shards(run_id)):
            keys = self.shard_keys(run_id, shard)
            for start in range(0, len(keys), batch):
                chunk = keys[start : start + batch]
                for key, fields in zip(chunk, self.item_fields(run_id, chunk), strict=True):
                    yield decode_raw(key, fields)

    def iter_items(self, run_id: str) -> Iterator[ItemResult]:
        """Every item of the run in input order, as :class:`ItemResult`."""
        for raw in self.iter_raw_items(run_id):
            yield raw.to_item()

    def add_failed_rows(self, run_id: str, rows: list[dict[str, Any]]) -> None:
        """Keep up to ``MAX_FAILED_ROWS_STORED`` unreadable rows (the count in meta is exact)."""
        key = self.key(run_id, "failed_rows")
        room = MAX_FAILED_ROWS_STORED - self.r.llen(key)
        if rows and room > 0:
            pipe = self.r.pipeline()
            pipe.rpush(key, *[utf8_json(r) for r in rows[:room]])  # half an emoji in a reason
            pipe.expire(key, self.ttl_s)
            pipe.execute()

    def drop_failed_rows(self, run_id: str) -> None:
        """Forget the unreadable rows kept for a run that was refused before it was created."""
        self.r.delete(self.key(run_id, "failed_rows"))

    def failed_rows(self, run_id: str) -> Iterator[dict[str, Any]]:
        key = self.key(run_id, "failed_rows")
        for start in range(0, MAX_FAILED_ROWS_STORED, 1000):
            batch = self.r.lrange(key, start, start + 999)
            yield from (json.loads(b) for b in batch)
            if len(batch) < 1000:
                return

    # ---------------------------------------------------------------- completion
    def start_delivery(self, run_id: str, queue: str, keys: list[str]) -> int:
        """Count one more delivery of each item on ``queue``; returns the most deliveries any of them has had
        (1: every item's first, or its earlier deliveries ended)."""
        name = self.key(run_id, "deliveries")
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            pipe.hincrby(name, f"{queue}:{key}", 1)
        pipe.expire(name, self.ttl_s)
        return max(pipe.execute()[:-1], default=1)

    def end_delivery(self, run_id: str, queue: str, keys: list[str]) -> None:
        """Forget the deliveries of items whose chunk ended (their process was not killed)."""
        if keys:
            self.r.hdel(self.key(run_id, "deliveries"), *(f"{queue}:{key}" for key in keys))

    def forget_deliveries(self, run_id: str, queue: str, keys: list[str], retry: str) -> None:
        """Forget the deliveries of items, and the careful marks on them, of a chunk whose last try ended (its Redis
        calls failed, its process did not die) but could not say so: its retry is not taken for a delivery after a
        death, and no item for the one its process died on. Once per ``retry`` (its task's id and retry number): the
        same retry delivered again, its process having died, counts that death."""
        name = self.key(run_id, "deliveries")
        if keys and self.r.hsetnx(name, f"retry:{retry}", 1):
            fields = [f"{queue}:{key}" for key in keys]
            pipe = self.r.pipeline(transaction=False)
            pipe.hdel(name, *fields)
            pipe.hdel(self.key(run_id, "scoring"), *fields)
            pipe.expire(name, self.ttl_s)
            pipe.execute()

    def forget_every_delivery(self, run_id: str) -> None:
        """A user's resume: forget the deliveries and careful marks every earlier generation left (a run's stop, a
        Ctrl-C, cuts its workers' chunks short: not deaths its items caused), so no item of it is scored carefully,
        one at a time, or failed as one its process died on. A stall recovery keeps them: it counts real deaths."""
        self.r.delete(self.key(run_id, "deliveries"), self.key(run_id, "scoring"))

    def mark_scoring(self, run_id: str, queue: str, key: str, on: bool) -> None:
        """Careful mode: mark the item being scored (a mark left behind names the item its process died on)."""
        name = self.key(run_id, "scoring")
        if on:
            pipe = self.r.pipeline(transaction=False)
            pipe.hset(name, f"{queue}:{key}", 1)
            pipe.expire(name, self.ttl_s)
            pipe.execute()
        else:
            self.r.hdel(name, f"{queue}:{key}")

    def marked_scoring(self, run_id: str, queue: str, keys: list[str]) -> set[str]:
        """Which of ``keys`` a careful delivery was scoring on ``queue`` when its process died."""
        if not keys:
            return set()
        marks = self.r.hmget(self.key(run_id, "scoring"), [f"{queue}:{key}" for key in keys])
        return {key for key, mark in zip(keys, marks, strict=True) if mark is not None}

    def generation(self, run_id: str) -> int:
        """How many times the run was (re)submitted, minus one; chords of older generations are ignored."""
        return int(self.r.hget(self.key(run_id, "meta"), "generation") or 0)

    def mark_shard_done(self, run_id: str, shard: int, generation: int = 0) -> None:
        key = self.key(run_id, f"shards_done:{generation}")
        pipe = self.r.pipeline()
        pipe.sadd(key, shard)
        pipe.expire(key, self.ttl_s)
        pipe.execute()

    def claim_finalize(self, run_id: str) -> bool:
        """True exactly once per generation, when every shard is submitted and done (safe under races)."""
        gen = self.generation(run_id)
        n = self.n_shards(run_id)
        if not n or self.r.scard(self.key(run_id, f"shards_done:{gen}")) < n:
            return False
        return bool(self.r.set(self.key(run_id, f"finalize:{gen}"), "1", nx=True, ex=self.ttl_s))

    # ---------------------------------------------------------------- leases
    def take_lease(self, key: str, owner: str, seconds: int) -> bool:
        """Take the lease ``key`` for ``owner`` for ``seconds``: False while another owner holds it. One that
        ``owner`` holds already (left held: an outage cut off its release) is taken over."""
        return bool(self._take_lease(keys=[key], args=[owner, seconds]))

    def renew_lease(self, key: str, owner: str, seconds: int) -> bool:
        """Hold the lease ``key`` ``seconds`` from now, if ``owner`` still holds it (False: it lapsed, or another
        owner has taken it since)."""
        return bool(self._renew_lease(keys=[key], args=[owner, seconds]))

    def release_lease(self, key: str, owner: str) -> None:
        """Give up the lease ``key`` if ``owner`` still holds it."""
        self._release_lease(keys=[key], args=[owner])

    def save_summary(self, run_id: str, summary: RunSummary, generation: int | None = None) -> RunSummary | None:
        """Write the summary and its state in one transaction. A run cancelled before (or while) it was
        computed stays cancelled, and the saved summary says so (it covers what was scored). A summary of a
        ``generation`` that a resume superseded meanwhile is not written (returns None)."""
        meta_key = self.key(run_id, "meta")

        def write(pipe: redis.client.Pipeline) -> RunSummary | None:
            state, current = cast("list[str | None]", pipe.hmget(meta_key, ["state", "generation"]))
            if superseded(generation, current):
                return None
            saved = summary
            if state == RunState.CANCELLED:
                saved = summary.model_copy(update={"state": RunState.CANCELLED})
            pipe.multi()
            pipe.set(self.key(run_id, "summary"), saved.model_dump_json(), ex=self.final_ttl_s)
            of = generation if generation is not None else int(current or 0)
            pipe.hset(meta_key, mapping={"state": saved.state, "finished_at": str(time.time()),
                                         "summary_generation": of})  # fmt: skip
            return saved

        # redis's stub: transaction() takes a callable returning None, and says not that it returns its value
        saved = self.r.transaction(write, meta_key, value_from_callable=True)  # type: ignore[arg-type]
        return cast("RunSummary | None", saved)

    def summary(self, run_id: str) -> RunSummary | None:
        raw = self.r.get(self.key(run_id, "summary"))
        return RunSummary.model_validate_json(raw) if raw else None

    def summary_is_current(self, run_id: str, generation: int | None = None) -> bool:
        """A summary is written, of ``generation`` (default: the run's current one), not of a run a resume has
        reopened since (which keeps its last summary until it has a new one)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.hmget(self.key(run_id, "meta"), ["summary_generation", "generation"])
        pipe.exists(self.key(run_id, "summary"))
        (written, current), exists = pipe.execute()
        if not exists:
            return False
        wanted = generation if generation is not None else int(current or 0)
        return int(written if written is not None else current or 0) == wanted  # older runs: their only summary

    def finished_summary(
        self,
        run_id: str,
        current: bool = False,
        *,
        status: str,
        resume: str,
    ) -> RunSummary:
        """The summary of a run that ended (with ``current``, only one of its current generation, not of before a
        resume); else an error saying why there is none and what to do: ``status`` and ``resume``, the commands
        that watch the run and finish it (the orchestrator's, naming its --broker and --out: the workers know no
        command line), said as :mod:`~ragscore_workers.commands` says commands."""
        note = password_note(status, resume)
        status, resume = in_backticks(status), in_backticks(resume)
        summary = self.summary(run_id) if not current or self.summary_is_current(run_id) else None
        if summary is not None:
            return summary
        meta = self.meta(run_id)  # ConfigError for an unknown run
        state = meta.get("state", "?")
        # a message may name both (a cancelled run's): the word to put a hidden password back follows them, said once
        if state == RunState.CANCELLED and not meta.get("error"):
            raise StoreError(f"Run {run_id} was cancelled; the summary of what it scored is written once the workers "
                             f"have skipped its queued tasks: try again shortly ({status}), or {resume} to score the "
                             f"rest{note}")  # fmt: skip
        if state in RunState.DONE:
            why = f": {meta['error']}" if meta.get("error") else ""
            raise StoreError(f"Run {run_id} is {state} with no summary{why}; {resume}{note} scores what is "
                             "missing and writes it")  # fmt: skip
        raise StoreError(f"Run {run_id} is still {state}: follow it with {status}{note}")

    def counters(self, run_id: str, part: str) -> dict[str, Any]:
        """A counters hash of the run (``judge``, ``embed``) with numbers parsed; text values kept."""
        out: dict[str, Any] = {}
        for name, value in cast("dict[str, str]", self.r.hgetall(self.key(run_id, part))).items():
            try:
                out[name] = int(value)
            except ValueError:
                try:
                    out[name] = float(value)
                except ValueError:
                    out[name] = value
        return out

    def list_runs(self) -> list[str]:
        """Run ids present in the store (for ``status`` without an id), from :data:`RUNS_INDEX`; runs whose keys
        expired are dropped from it. A store written before the index existed is scanned once to build it. The index
        is kept only by a user that may write: one that may only read lists the same runs, and leaves it as it is."""
        scanned: dict[str, float] = {}
        if not self.r.exists(RUNS_INDEX_BUILT):
            metas = list(self.r.scan_iter(match=f"{PREFIX}*:meta", count=1000))
            pipe = self.r.pipeline(transaction=False)
            for key in metas:
                pipe.hget(key, "created_at")
            if metas:
                scanned = {
                    k[len(PREFIX) : -len(":meta")]: float(at or 0) for k, at in zip(metas, pipe.execute(), strict=True)
                }
            with _index_kept():
                if scanned:
                    self.r.zadd(RUNS_INDEX, scanned, nx=True)
                self.r.set(RUNS_INDEX_BUILT, "1")
        indexed = list(dict.fromkeys([*self.r.zrange(RUNS_INDEX, 0, -1), *scanned]))
        pipe = self.r.pipeline(transaction=False)
        for run_id in indexed:
            pipe.exists(self.key(run_id, "meta"))
        present = dict(zip(indexed, pipe.execute(), strict=True))
        if gone := [run_id for run_id, here in present.items() if not here]:
            with _index_kept():
                self.r.zrem(RUNS_INDEX, *gone)
        return sorted(run_id for run_id, here in present.items() if here)

    def overview(self, run_ids: list[str]) -> list[RunOverview]:
        """Per run (one round trip for all): ``run_id``, ``state``, ``done`` / ``total`` work units (as
        :meth:`progress` counts them; a cancelled run's ``done``, its ``worked:{queue}`` summed), ``submitted_at``
        (epoch seconds, None when not recorded), ``dataset`` (its file name) and ``predictions`` (the name of the
        predictions file it was read with, the nlp-project format's; "" when none, or for an older run)."""
        pipe = self.r.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(self.key(run_id, "meta"), ["state", "submitted_at", "created_at", "dataset", "format_options"])
            pipe.hmget(self.key(run_id, "progress"), _OVERVIEW_COUNTERS)
            for queue in PROGRESSIVE_QUEUES:
                pipe.hlen(self.key(run_id, f"unwritten:{queue}"))
        replies = iter(pipe.execute())
        out: list[RunOverview] = []
        for run_id in run_ids:
            state, submitted, created, dataset, options = next(replies)
            stored = {k: int(v) for k, v in zip(_OVERVIEW_COUNTERS, next(replies), strict=True) if v is not None}
            counters = _queue_work(_done_now(stored))  # as progress(): a resume's redo is not done, derived no work
            unwritten = sum(next(replies) for _ in PROGRESSIVE_QUEUES)
            at = submitted or created
            done = counters.get("done", 0)
            if state not in RunState.DONE:  # as progress(): scored by a chunk in flight, not written yet
                done += unwritten
            elif state == RunState.CANCELLED:  # as its status's ``all`` row: what its workers did, not what was stopped
                done = sum(_worked(stored).values())
            out.append({"run_id": run_id, "state": state or "?", "done": done, "total": counters.get("total", 0),
                        "submitted_at": float(at) if at else None,
                        "dataset": _file_name(dataset),
                        "predictions": _file_name(json.loads(options or "{}").get("predictions"))})  # fmt: skip
        return out


def _file_name(path: str | None) -> str:
    """A stored path's file name alone ("" for none): the run list keeps no directory (it may name a user's)."""
    return (path or "").rsplit("/", 1)[-1]


#: The ``progress`` counters :meth:`RunStore.overview` reads of each run (:func:`_done_now`, :func:`_queue_work`; a
#: cancelled run's :func:`_worked`).
_OVERVIEW_COUNTERS = [f"{c}{q}" for c in ("done", "total", "redo") for q in ("", f":{_DERIVED}")] + [
    f"{c}:{q.value}" for c in ("done", "stopped") for q in Queue if q.value != _DERIVED
]


@dataclass(frozen=True)
class RedoLookup:
    """Per item key, what a resume must redo (``todo``: outputs absent, failed or stopped), and of those the
    outputs stored as errors or stopped (``stored``: counted done once already)."""

    todo: dict[str, set[str]]
    stored: dict[str, set[str]]


@dataclass(frozen=True)
class RawItem:
    """An item as stored: its metadata and ``{output: result dict}`` (no pydantic on the hot path)."""

    key: str
    meta: dict[str, Any]
    metrics: dict[str, dict[str, Any]]

    @property
    def errors(self) -> list[str]:
        return [f"{name}: {m['error']}" for name, m in self.metrics.items() if m.get("error")]

    @property
    def unscorable(self) -> list[str]:
        """``output: reason`` of each output that has neither a score nor an error (its ``details.reason``)."""
        return [
            f"{name}: {unscorable_reason(m)}"
            for name, m in self.metrics.items()
            if m.get("score") is None and not m.get("error")
        ]

    def to_json_line(self, errors: list[str] | None = None) -> str:
        """One ``items.jsonl`` line (DESIGN.md §4); ``errors``: :attr:`errors` when the caller has them already."""
        meta = self.meta
        return dumps_utf8(
            {
                "id": meta["id"],
                "system": meta.get("system"),
                "group": meta.get("group"),
                "question_type": meta.get("question_type"),
                "question_sha": meta.get("question_sha"),
                "metrics": self.metrics,
                "errors": self.errors if errors is None else errors,
            }
        )

    def to_item(self) -> ItemResult:
        return ItemResult(
            id=self.meta["id"],
            system=self.meta.get("system"),
            group=self.meta.get("group"),
            question_type=self.meta.get("question_type"),
            question_sha=self.meta.get("question_sha"),
            metrics={name: MetricResult.model_validate(m) for name, m in self.metrics.items()},
            errors=self.errors,
        )


def keys_digest(shards: Iterable[list[str]]) -> str:
    """The digest of a run's item keys, shard by shard in input order (its ``ids:{shard}`` lists)."""
    digest = hashlib.sha256()
    for keys in shards:
        digest.update(json.dumps(keys).encode() + b"\n")
    return digest.hexdigest()


def stored_fields(raw: RawItem) -> dict[str, str]:
    """The fields of item ``raw``'s hash, as a worker writes them (:meth:`RunStore.write_results`), from an item read
    back (an ``items.jsonl`` line): ValueError where an output is not a metric result."""
    fields = {"_meta": _meta_json(raw.meta)}
    for name, result in raw.metrics.items():
        fields[name] = _stored_result(MetricResult.model_validate(result))  # pydantic's ValidationError: a ValueError
    return fields


def _with_defaults(stored: dict[str, Any]) -> dict[str, Any]:
    """A metric result as stored leaves out default values (about half the bytes); fill them back in."""
    return {"score": None, "passed": None, "details": {}, "error": None, "ms": 0.0} | stored


def _meta_json(item_meta: dict[str, Any]) -> str:
    """An item's ``_meta`` field: its meta without the None values."""
    return json.dumps({k: v for k, v in item_meta.items() if v is not None})


def decode_raw(key: str, fields: dict[str, str]) -> RawItem:
    """Decode an item hash: ``_meta`` plus one status-prefixed JSON value per metric output."""
    if "_meta" in fields:
        meta = loads(fields["_meta"])
    else:  # never scored (a cancelled run): the id and system its key holds
        system, id = split_key(key)
        meta = {"id": id, "system": system}
    metrics = {
        name: _with_defaults(loads(value[1:])) for name, value in sorted(fields.items()) if not name.startswith("_")
    }
    return RawItem(key=key, meta=meta, metrics=metrics)
