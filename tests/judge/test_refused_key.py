"""A wrong judge key: the provider's 401 ``invalid_api_key`` stops judging at once, with one message naming the provider
and the variable the key was read from (never the key); every item of every judge metric reading it records an error
(not "unscorable": the key, not the data, is at fault), which a resume with the key fixed judges."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator import evaluate, resume
from orchestrator.api import IncompleteRunWarning
from orchestrator.runner import connect, submit, wait
from orchestrator.suite import load_suite

from ..fakes import FakeProvider
from ..support import RedisProcess, WorkerProcess, resume_in_cluster, until, write_jsonl

pytestmark = pytest.mark.integration

WRONG = "gsk-WRONG-KEY-0123456789"
#: Two judge metrics, one and two calls per item: each item's reply reads as a rubric score of 4 and a rating of 4.
JUDGES = ("answer_accuracy", "rubric_judge")
REPLY = '[[reply={"score": 4, "rationale": "ok"}]]'


def _rows(n: int) -> list[dict[str, str]]:
    return [
        {"id": f"q{i}", "question": f"Question {i}?", "reference": "r", "answer": f"a{i} {REPLY}"} for i in range(n)
    ]


def _judged_by(base_url: str, provider: str) -> dict:
    """A suite of :data:`JUDGES`, one call at a time per task, under a budget: a call starts only while the breaker (in
    Redis, shared by every worker) is shut, so each of the tasks sends at most the call it started before the first
    401 came (as test_unknown_model.py's)."""
    judge = {"provider": provider, "model": "m", "base_url": base_url, "rpm": None, "tpm": None}
    metrics = [{"name": name, "params": {"concurrency": 1, "max_tokens_total": 10**9}} for name in JUDGES]
    return {"name": "wrong-key", "metrics": metrics, "judge": judge, "chunk_size": {"judge": 10}}


def assert_every_item_errs(summary: Any, items: list[Any], reason: str) -> None:
    """Each judge output of every item is an error, the breaker's ``reason`` (what to fix), an item whose own call was
    refused too; none is counted unscorable or stopped."""
    outputs = (*JUDGES, "rubric_judge_raw")
    counts = {name: (m.n, m.errors, m.unscorable, m.stopped) for name, m in summary.metrics.items()}
    assert counts == dict.fromkeys(outputs, (0, len(items), 0, 0)), counts
    errors = {item.metrics[name].error for item in items for name in outputs}
    assert errors == {reason}, sorted(map(str, errors))[:3]


@pytest.mark.parametrize("provider", ["groq", "openai"])
def test_a_refused_key_stops_judging_at_its_first_401(
    provider: str, home: Path, keys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groq and OpenAI answer every call with a wrong key 401 invalid_api_key: judging stops at the first one, no call
    is retried, and the run names the provider and the variable to check. Every item of both judge metrics is an
    error naming the refused key. Seen failing before: the run's reason was "circuit breaker open after 5 consecutive
    failed judge calls", and every item in flight sent its call; later, the items after the first 401 were counted
    unscorable (54 of answer_accuracy's 60, "stopped") beside the 6 errors of the items whose own call was refused."""
    monkeypatch.setenv("GROQ_API_KEY", WRONG)
    monkeypatch.setenv("OPENAI_API_KEY", WRONG)
    rows = _rows(60)
    with FakeProvider(api_key=keys) as fake:
        base_url = fake.url if provider == "groq" else fake.openai_base_url
        with pytest.warns(IncompleteRunWarning) as warned:
            result = evaluate(rows, _judged_by(base_url, provider), out=tmp_path / "out")
        stats = fake.stats()

    reason = result.summary.judge["breaker"]
    key_env = "GROQ_API_KEY" if provider == "groq" else "OPENAI_API_KEY"
    refused = "Invalid API Key" if provider == "groq" else "Incorrect API key provided: ***. You can find your API key"
    assert reason.startswith(f"the {provider} judge's key was refused ({provider} HTTP 401: {refused}"), reason
    assert reason.endswith(f"): check {key_env}") and reason.count(key_env) == 1, reason
    (incomplete,) = [str(w.message) for w in warned if w.category is IncompleteRunWarning]  # not a GC's ResourceWarning
    assert f"judging stopped: {reason}" in incomplete
    assert result.summary.judge["retries"] == 0
    assert stats["unauthorized"] <= len(JUDGES) * len(rows) // 10  # of 180 calls: none after the first 401
    assert_every_item_errs(result.summary, result.items, reason)
    written = "".join(p.read_text() for p in (tmp_path / "out").iterdir() if p.is_file())
    assert WRONG not in written and WRONG not in incomplete
    logged = "".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())
    assert f"judge call to {provider} failed for good: {provider} HTTP 401: {refused}" in logged  # the workers' logs
    assert WRONG not in logged


def test_a_resume_with_the_key_fixed_judges_every_item(
    home: Path, keys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run a refused key stopped, resumed once GROQ_API_KEY holds the right key: every item of both judge metrics
    is judged, and the summary holds no breaker nor error: a resume redoes the errors a refused key records. Seen
    failing before: the first run counted every item unscorable (20 of 20 "stopped"), none an error."""
    monkeypatch.setenv("GROQ_API_KEY", WRONG)
    rows, out = _rows(20), tmp_path / "out"
    with FakeProvider(api_key=keys) as fake:
        with pytest.warns(IncompleteRunWarning):
            first = evaluate(rows, _judged_by(fake.url, "groq"), out=out, quiet=True)
        assert_every_item_errs(first.summary, first.items, first.summary.judge["breaker"])
        monkeypatch.setenv("GROQ_API_KEY", keys)
        again = resume(out, quiet=True)

    assert "breaker" not in again.summary.judge
    counts = {name: (m.n, m.errors, m.unscorable, m.stopped) for name, m in again.summary.metrics.items()}
    assert counts == dict.fromkeys((*JUDGES, "rubric_judge_raw"), (len(rows), 0, 0, 0)), counts
    scores = {(name, item.metrics[name].score) for item in again.items for name in JUDGES}
    assert scores == {("answer_accuracy", 1.0), ("rubric_judge", 0.8)}


def test_a_refused_key_stops_only_the_judge_that_reads_it(
    home: Path, keys: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two judges, one a metric's api_key_env each: the provider refuses one key. The other judge's metric scores every
    item; the refused one's items say the variable to check (never the key), the run finishes, and its summary names
    the judge that stopped and why. Seen failing before: the one refused key stopped both metrics (answer_accuracy
    scored no item after the first 401)."""
    monkeypatch.setenv("JUDGE_KEY_GOOD", keys)
    monkeypatch.setenv("JUDGE_KEY_BAD", WRONG)
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "reference": "r", "answer": f"a{i} [[rating=4]]",
             "contexts": [f"context {i}"]} for i in range(40)]  # fmt: skip
    with FakeProvider(api_key=keys) as fake:  # OpenAI's 401 body echoes the key it refused
        judge = {"provider": "openai", "model": "m", "base_url": fake.openai_base_url, "rpm": None, "tpm": None}
        metrics = [  # the refused judge first: a task asks it before the other
            {"name": "context_relevance_judge", "params": {"concurrency": 1, "api_key_env": "JUDGE_KEY_BAD"}},
            {"name": "answer_accuracy", "params": {"concurrency": 1, "api_key_env": "JUDGE_KEY_GOOD"}},
        ]
        suite = {"name": "two-keys", "metrics": metrics, "judge": judge, "chunk_size": {"judge": 10}}
        with pytest.warns(IncompleteRunWarning) as warned:
            result = evaluate(rows, suite, out=tmp_path / "out")

    assert result.summary.metrics["answer_accuracy"].n == len(rows)
    assert {item.metrics["answer_accuracy"].score for item in result.items} == {1.0}
    reason = result.summary.judge["breaker"]
    assert reason.startswith("openai/m with the key in JUDGE_KEY_BAD: the openai judge's key was refused (openai HTTP "
                             "401: Incorrect API key provided: ***."), reason  # fmt: skip
    assert reason.endswith("): check JUDGE_KEY_BAD") and "JUDGE_KEY_GOOD" not in reason, reason
    refused = [item.metrics["context_relevance_judge"] for item in result.items]
    stopped = result.summary.metrics["context_relevance_judge"]
    assert (stopped.n, stopped.errors, stopped.unscorable) == (0, len(rows), 0)
    assert all(r.error and r.error.endswith("check JUDGE_KEY_BAD") for r in refused), refused[:3]
    (incomplete,) = [str(w.message) for w in warned if w.category is IncompleteRunWarning]
    assert f"judging stopped: {reason}" in incomplete
    written = "".join(p.read_text() for p in (tmp_path / "out").iterdir() if p.is_file())
    logged = "".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file())
    assert "JUDGE_KEY_BAD" in written and WRONG not in written + incomplete + logged


#: q0's call answered 401 invalid_api_key (held at the fake until the test lets it come back), q1's 500.
FAULTS = {0: " [[fault=401:1]]", 1: " [[fault=500:1]]"}


def _refused_after_a_500(n: int, fake: FakeProvider, model: str) -> tuple[list[dict], dict, threading.Event]:
    """Rows q0..q{n-1}, a rubric_judge suite of one item a task that opens the breaker at one failure, and the Event
    that lets q0's 401 come back (:data:`FAULTS`): q1's 500 opens the breaker on its count before it."""
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": "r", "answer": f"a{i} {REPLY}{FAULTS.get(i, '')}"}
            for i in range(n)]  # fmt: skip
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    params = {"concurrency": 1, "attempts": 1, "breaker_failures": 1}
    suite = {"metrics": [{"name": "rubric_judge", "params": params}], "chunk_size": {"judge": 1}, "judge": judge}
    fake.hold_fault = ("401", held := threading.Event())
    return rows, suite, held


def test_items_the_breakers_count_stopped_before_a_refused_keys_401_came_back_are_that_keys_errors_and_resumed(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """A real judge worker of two threads, a task per item: q0's call is held at the provider, q1's is answered 500,
    which opens the breaker on its count (breaker_failures 1), and every later item is stopped with the count's
    reason; then q0's call comes back 401 invalid_api_key. Every item but q1 (its own 500) records the refused key's
    error, naming the variable to check, none "stopped"; a resume (the key accepted again) judges every item. Seen
    failing before: the items stopped before the 401 came back stayed stopped with "circuit breaker open after 1
    consecutive failed judge calls" (10 of 12 stopped)."""
    n = 12
    rows, suite, held = _refused_after_a_500(n, fake, model)
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "judge", tmp_path / "w", concurrency=2).start()
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(suite), store)
        # every item but q0 stored (scored, its error, or stopped) before q0's 401 comes back
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= 2 * (n - 1), 120), store.progress(sub.run_id)
        held.set()
        first = wait(store, sub.run_id, timeout_s=300)
        errors = {raw.meta["id"]: raw.metrics["rubric_judge"].get("error") for raw in store.iter_raw_items(sub.run_id)}
        done = resume_in_cluster(sub.run_id, redis_server.url, tmp_path / "out", tmp_path / "o")
    finally:
        held.set()
        worker.stop()

    reason = first.judge["breaker"]
    assert reason.startswith("the groq judge's key was refused (groq HTTP 401: Invalid API Key") and reason.endswith(
        "check GROQ_API_KEY"
    ), reason
    assert errors.pop("q1", "").startswith("groq HTTP 500"), errors
    assert errors == {f"q{i}": reason for i in range(n) if i != 1}, errors
    rubric = first.metrics["rubric_judge"]
    assert (rubric.n, rubric.errors, rubric.unscorable, rubric.stopped) == (0, n, 0, 0), rubric
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "breaker" not in resumed["judge"]
    assert (resumed["metrics"]["rubric_judge"]["n"], resumed["metrics"]["rubric_judge"]["errors"]) == (n, 0), resumed


def test_a_checks_item_whose_meta_eval_point_the_breakers_count_stopped_before_a_refused_keys_401_is_that_keys_error(
    tmp_path: Path, redis_server: RedisProcess, fake: FakeProvider, model: str
) -> None:
    """As above, for the judge call of a ``checks`` item's meta_eval point: q0's call held at the provider, q1's
    answered 500 (the breaker opens on its count), the later items' points stopped with the count's reason; then q0's
    401 comes back. Every item but q1 records the refused key's error (its meta point's too, the point depending on
    it skipped), as q0 itself and a judge metric's items do, none "stopped". Seen failing before: the checks items
    stayed stopped ("point meta: meta_eval not scored: circuit breaker open after 1 consecutive failed judge calls")."""
    n = 8
    meta = {"id": "meta", "type": "meta_eval",
            "params": {"concurrency": 1, "attempts": 1, "attempts_on_bad_json": 1, "breaker_failures": 1}}  # fmt: skip
    after = {"id": "after", "type": "keyword", "params": {"keywords": ["a"]}, "depends_on": ["meta"]}
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "answer": f"a{i}{FAULTS.get(i, '')}", "checks": [meta, after]}
            for i in range(n)]  # fmt: skip
    judge = {"provider": "groq", "model": model, "base_url": fake.url, "rpm": None, "tpm": None}
    suite = {"metrics": ["checks"], "chunk_size": {"judge": 1}, "judge": judge}
    fake.hold_fault = ("401", held := threading.Event())
    store = connect(redis_server.url)
    worker = WorkerProcess(redis_server.url, "cpu,judge", tmp_path / "w", concurrency=2).start()
    try:
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite(suite), store)
        # every item but q0 stored (its error, or stopped) before q0's 401 comes back
        assert until(lambda: store.progress(sub.run_id).get("done", 0) >= n - 1, 120), store.progress(sub.run_id)
        held.set()
        first = wait(store, sub.run_id, timeout_s=300)
        stored = {raw.meta["id"]: raw.metrics["checks"] for raw in store.iter_raw_items(sub.run_id)}
    finally:
        held.set()
        worker.stop()

    reason = first.judge["breaker"]
    assert reason.startswith("the groq judge's key was refused (groq HTTP 401: Invalid API Key"), reason
    assert stored.pop("q1")["error"].startswith("point meta: meta_eval: groq HTTP 500"), stored
    errors = {key: result.get("error") for key, result in stored.items()}
    assert errors == {f"q{i}": f"point meta: meta_eval: {reason}" for i in range(n) if i != 1}, errors
    points = {(p["id"], p["status"], p["note"]) for result in stored.values() for p in result["details"]["points"]}
    assert points == {("meta", "error", f"meta_eval: {reason}"), ("after", "skipped", "skipped: depends on meta error")}
    assert all(not result["details"].get("stopped") for result in stored.values()), stored
    checks = first.metrics["checks"]
    assert (checks.n, checks.errors, checks.unscorable, checks.stopped) == (0, n, 0, 0), checks
