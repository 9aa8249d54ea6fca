"""The reply cache in Redis: a re-run (or a resume) pays for no judge call twice.

Key: sha256 of the provider identity (name, endpoint, model), the messages, temperature, max_tokens, the
template version and the attempt number (the n-th sample of one prompt, so re-asking after a reply
without a rating replays the same sequence). Nothing else: timeouts, retries and limits do not change a
reply. Only successful replies are stored; errors never are, nor a reply the client's ``final`` refuses (the last
attempt's reply its metric could not read: it is asked again on a later run). Values are JSON.

Beside the replies, one key a judge (:func:`judged_key`) says the cache holds replies of that judge, kept as long as
the last of them: an embedded run without the judge's key reads its dataset for the cached replies only where there
are some (:meth:`ReplyCache.holds_replies_of`), and is refused at once otherwise.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..unicode_text import utf8_json
from .base import Completion, CompletionParams, Message

__all__ = ["DEFAULT_CACHE_TTL_S", "ReplyCache", "cache_key", "judged_key"]

PREFIX = "ragscore:judgecache:"
#: Seconds a cached reply is kept (90 days).
DEFAULT_CACHE_TTL_S = 90 * 24 * 3600


def cache_key(
    identity: str,
    messages: Sequence[Message],
    params: CompletionParams,
    template_version: str,
    attempt: int = 0,
) -> str:
    """The Redis key of one reply."""
    material = json.dumps(
        {
            "provider": identity,
            "messages": [dict(m) for m in messages],
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "template": template_version,
            "attempt": attempt,
            **({"reasoning": True} if params.reasoning else {}),  # absent otherwise: older keys stay valid
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return PREFIX + hashlib.sha256(material.encode()).hexdigest()


def judged_key(identity: str) -> str:
    """The Redis key saying the cache holds replies of the judge ``identity`` (provider, endpoint, model)."""
    return f"{PREFIX}judge:{hashlib.sha256(identity.encode()).hexdigest()}"


class ReplyCache:
    """Get and put completions; ``enabled=False`` (``--no-cache``) neither reads nor writes."""

    def __init__(self, redis: Any, *, ttl_s: int = DEFAULT_CACHE_TTL_S, enabled: bool = True) -> None:
        self.r = redis
        self.ttl_s = ttl_s
        self.enabled = enabled

    def get(self, key: str) -> Completion | None:
        if not self.enabled:
            return None
        raw = self.r.get(key)
        if raw is None:
            return None
        data = json.loads(raw)
        return Completion(text=data["text"], tokens_in=data["tokens_in"], tokens_out=data["tokens_out"],
                          finish_reason=data.get("finish_reason"), refusal=data.get("refusal"))  # fmt: skip

    def put(self, key: str, completion: Completion, identity: str) -> None:
        """Keep ``completion`` under ``key``, and that the cache holds replies of the judge ``identity``."""
        if not self.enabled:
            return
        value = {"text": completion.text, "tokens_in": completion.tokens_in, "tokens_out": completion.tokens_out,
                 "finish_reason": completion.finish_reason, "refusal": completion.refusal}  # fmt: skip
        pipe = self.r.pipeline(transaction=False)
        pipe.set(key, utf8_json(value), ex=self.ttl_s)
        pipe.set(judged_key(identity), 1, ex=self.ttl_s)  # outlives no reply: expires with the last one put
        pipe.execute()

    def holds_replies_of(self, identity: str) -> bool:
        """Whether a run of the judge ``identity`` may find a reply here (False: every call it makes is sent)."""
        return self.enabled and bool(self.r.exists(judged_key(identity)))
