"""Fixtures of the judge tests: a real fake-provider server, the session's real Redis, a unique model name."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from orchestrator.suite import ResolvedSuite, load_suite
from ragscore_workers.metrics.registry import RunContext, parse_spec
from ragscore_workers.schemas import MetricSpec, Row, Suite
from ragscore_workers.scoring import score_rows
from ragscore_workers.store import redis_client

from ..fakes import FakeProvider
from ..support import RedisProcess

#: The API key the tests put in the environment: it must never show up in logs, results or Redis.
SECRET = "gsk-TEST-SECRET-0f9e8d7c6b5a"


@pytest.fixture
def rclient(redis_server: RedisProcess) -> redis.Redis:
    return redis_client(redis_server.url)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GROQ_API_KEY", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("RAGSCORE_JUDGE_BASE_URL", raising=False)
    return SECRET


@pytest.fixture
def fake(keys: str) -> Iterator[FakeProvider]:
    with FakeProvider(api_key=keys, hang_s=1.5) as server:
        yield server


@pytest.fixture
def model() -> str:
    """A model name of its own per test: limiter, cache and counters never leak between tests."""
    return f"fake-{uuid.uuid4().hex[:10]}"


def judge_suite(metrics: list[Any], fake: FakeProvider, model: str, provider: str = "groq", **judge: Any) -> Suite:
    base_url = fake.url if provider == "groq" else fake.openai_base_url
    config = {"provider": provider, "model": model, "base_url": base_url, "rpm": None, "tpm": None} | judge
    return Suite.model_validate({"name": "judge-test", "metrics": metrics, "judge": config})


def slow_judge_suite(
    fake: FakeProvider, model: str, *, latency_s: float, concurrency: int, chunk: int
) -> ResolvedSuite:
    """A suite of answer_accuracy (no cache) sending ``concurrency`` calls at a time from chunks of ``chunk`` rows,
    judged by ``fake``, which replies after ``latency_s``."""
    fake.latency_s = latency_s
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    spec = {"name": "answer_accuracy", "params": {"concurrency": concurrency, "cache": False}}
    return load_suite({"metrics": [spec], "chunk_size": {"judge": chunk}, "judge": judge})


def score(suite: Suite, rows: list[dict[str, Any]], rclient: redis.Redis, run_id: str | None = None) -> list[dict]:
    """Score rows in this process with the suite's metrics (real Redis, real HTTP to the fake)."""
    metrics = [parse_spec(MetricSpec.model_validate(spec)) for spec in suite.metrics]
    ctx = RunContext(run_id=run_id or uuid.uuid4().hex[:12], suite=suite, redis=rclient)
    return score_rows([Row.model_validate(r) for r in rows], metrics, ctx)
