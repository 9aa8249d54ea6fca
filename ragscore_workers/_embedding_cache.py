"""The two vector caches of :mod:`ragscore_workers.embedding`, keyed by (namespace, sha256 of the text).

The namespace is the model identity and precision (``Encoder.key``): what changes the vectors.

* :class:`MemoryLRU`: per process, bounded by bytes.
* Redis: ``ragscore:emb:v1:{sha256(namespace)[:16]}:{sha256(text)}`` -> raw little-endian float32 bytes,
  with a TTL. The run store's client decodes replies to ``str``, so :func:`bytes_client` opens a client
  on the same connection settings that does not. Redis errors are logged and cost only a re-encode.
* Redis, beside them: ``ragscore:emb:v1:note:{sha256(namespace)[:16]}`` -> a JSON note of the model (its vector length,
  piece limit and digests of its tokenizer and config files), written by a worker that loaded it, so a worker whose
  texts are all cached needs not load it (:func:`ragscore_workers.embedding.get_encoder` checks the note first).
* A look-up (:func:`redis_get`) renews the TTL of the vectors it finds and of the note: the cache drops what no run
  used for the TTL, not what was written that long ago.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

__all__ = [
    "KEY_PREFIX",
    "MemoryLRU",
    "bytes_client",
    "note_key",
    "redis_get",
    "redis_get_note",
    "redis_key",
    "redis_put",
    "redis_put_note",
    "text_hash",
]

log = logging.getLogger(__name__)

KEY_PREFIX = "ragscore:emb:v1:"
NOTE_PREFIX = f"{KEY_PREFIX}note:"
_BYTES_CLIENTS: dict[int, tuple[Any, Any]] = {}


def text_hash(text: str) -> str:
    """sha256 hex of the UTF-8 text (lone surrogates kept): the cache key of one text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class MemoryLRU:
    """A thread-safe LRU of vectors bounded by bytes."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.items: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> np.ndarray | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: tuple[str, str], value: np.ndarray) -> None:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return
            self.items[key] = value
            self.bytes += value.nbytes
            while self.bytes > self.max_bytes and self.items:
                _, old = self.items.popitem(last=False)
                self.bytes -= old.nbytes

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.bytes = 0


def bytes_client(client: Any) -> Any:
    """A client on the same Redis as ``client`` that returns bytes (one per connection pool)."""
    pool = client.connection_pool
    if not pool.connection_kwargs.get("decode_responses"):
        return client
    cached = _BYTES_CLIENTS.get(id(pool))
    if cached is None or cached[0] is not pool:
        import redis

        from .store import pool_like

        raw = redis.Redis(connection_pool=pool_like(pool, decode_responses=False))
        cached = _BYTES_CLIENTS[id(pool)] = (pool, raw)
    return cached[1]


def _short(namespace: str) -> str:
    return hashlib.sha256(namespace.encode()).hexdigest()[:16]


def redis_key(namespace: str, digest: str) -> str:
    return f"{KEY_PREFIX}{_short(namespace)}:{digest}"


def note_key(namespace: str) -> str:
    """The key of the note of the model of ``namespace``."""
    return f"{NOTE_PREFIX}{_short(namespace)}"


def redis_get_note(client: Any, namespace: str) -> dict[str, Any] | None:
    """The note of the model of ``namespace``; None when there is none, or it cannot be read."""
    import redis

    try:
        raw = client.get(note_key(namespace))
        note = json.loads(raw) if raw else None
    except (redis.RedisError, ValueError) as exc:
        log.warning("embedding cache note unreadable, loading the model: %s", exc)
        return None
    return note if isinstance(note, dict) else None


def redis_put_note(client: Any, namespace: str, note: dict[str, Any], ttl_s: int) -> None:
    """Write the note of the model of ``namespace``, expiring ``ttl_s`` after this write (an error costs only a load
    of the model next time)."""
    import redis

    try:
        client.set(note_key(namespace), json.dumps(note, sort_keys=True), ex=ttl_s)
    except redis.RedisError as exc:
        log.warning("embedding cache note not written (scores are unaffected): %s", exc)


#: KEYS: the model's note, then vectors; ARGV: the TTL, the TTL below which a key is renewed. Each vector's value
#: (false: none); each key found is renewed to the TTL once its own fell below the second (once a day of thirty: one
#: append-only-file write a key a day, not one a read).
_GET_RENEWING_LUA = """
local out, ttl, floor = {}, ARGV[1], tonumber(ARGV[2])
for i = 2, #KEYS do
  out[i - 1] = redis.call('GET', KEYS[i])
  if out[i - 1] and redis.call('TTL', KEYS[i]) < floor then redis.call('EXPIRE', KEYS[i], ttl) end
end
if redis.call('TTL', KEYS[1]) < floor then redis.call('EXPIRE', KEYS[1], ttl) end
return out
"""


def redis_get(client: Any, namespace: str, dim: int, digests: list[str], ttl_s: int) -> dict[str, np.ndarray]:
    """Cached vectors of ``digests`` (one script, one round trip); values of the wrong size are ignored. Those found and
    the model's note are used: each expires ``ttl_s`` after this look-up (renewed once a thirtieth of it passed), so
    the cache keeps what runs use, those that load no model included, and drops what none used for ``ttl_s``."""
    import redis

    keys = [note_key(namespace), *(redis_key(namespace, d) for d in digests)]
    try:
        values = bytes_client(client).eval(_GET_RENEWING_LUA, len(keys), *keys, ttl_s, ttl_s - ttl_s // 30)
    except redis.RedisError as exc:
        log.warning("embedding cache read failed, encoding instead: %s", exc)
        return {}
    pairs = zip(digests, values, strict=True)
    return {d: np.frombuffer(v, dtype="<f4").astype(np.float32) for d, v in pairs if v and len(v) == 4 * dim}


#: Share of the Redis ``maxmemory`` the vector cache may fill up to: the run store lives in the same Redis, which
#: must be ``noeviction``, so a cache that filled it would make every later write of every run fail (results, progress,
#: the broker's own messages) until someone deleted the cache by hand.
CACHE_MEMORY_SHARE = 0.75
_full_warned = False


def _room_for(raw: Any, nbytes: int) -> bool:
    """Whether ``nbytes`` more of cache keep the Redis under CACHE_MEMORY_SHARE of its maxmemory (always, with none)."""
    global _full_warned
    import redis

    try:
        memory = raw.info("memory")
    except redis.ResponseError:  # INFO renamed or refused (some managed Redis): as before, the write may still fail
        return True
    limit = int(memory.get("maxmemory", 0) or 0)
    if not limit or int(memory.get("used_memory", 0)) + nbytes <= CACHE_MEMORY_SHARE * limit:
        return True
    if not _full_warned:
        _full_warned = True
        log.warning("embedding cache not written: Redis is near its maxmemory (%d bytes), which the run store needs; "
                    "scores are unaffected (texts are encoded again next time)", limit)  # fmt: skip
    return False


def redis_put(client: Any, namespace: str, vectors: dict[str, np.ndarray], ttl_s: int) -> None:
    """Store vectors (one pipelined round trip), each expiring ``ttl_s`` after this write; nothing when the Redis is
    near its maxmemory (the run store's room comes first)."""
    import redis

    try:
        raw = bytes_client(client)
        # value bytes + key and per-key overhead (~100 bytes each)
        if not vectors or not _room_for(raw, sum(v.nbytes + 200 for v in vectors.values())):
            return
        pipe = raw.pipeline(transaction=False)
        for digest, vector in vectors.items():
            pipe.set(redis_key(namespace, digest), vector.astype("<f4").tobytes(), ex=ttl_s)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("embedding cache write failed (scores are unaffected): %s", exc)
