"""A cluster's judge worker started without the API key: its items' errors name the worker (host and Celery node),
so an operator of many workers finds the one that lacks it; the key's value never shows."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from orchestrator.runner import run
from orchestrator.suite import load_suite

from ..fakes import FakeProvider
from ..support import RedisProcess, WorkerProcess, write_jsonl

pytestmark = pytest.mark.integration


def test_an_item_a_worker_without_the_key_judged_names_that_worker(
    tmp_path: Path, fake: FakeProvider, model: str, keys: str
) -> None:
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "judge", tmp_path / "home", concurrency=1)
    del worker.env["GROQ_API_KEY"]  # this process has it (the run is checked here); the worker does not
    worker.start()
    try:
        data = write_jsonl(tmp_path / "d.jsonl", [{"id": "q0", "question": "Q?", "reference": "r", "answer": "a"}])
        suite = load_suite({"metrics": ["answer_accuracy"], "judge": {"model": model, "base_url": fake.url}})
        run(data, suite, tmp_path / "out", broker=server.url, timeout_s=120)
    finally:
        worker.stop()
        server.stop()
    (item,) = [json.loads(line) for line in (tmp_path / "out" / "items.jsonl").read_text().splitlines()]
    error = item["metrics"]["answer_accuracy"]["error"]
    assert "set the environment variable GROQ_API_KEY on host " + socket.gethostname() in error, error
    assert "(worker judge-" in error and f"@{socket.gethostname()})" in error, error  # its Celery node name
    assert keys not in (tmp_path / "out" / "items.jsonl").read_text() and fake.stats().get("requests", 0) == 0
