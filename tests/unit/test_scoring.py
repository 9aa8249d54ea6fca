"""score_rows never raises for a bad item: a failing metric records an error for that item only."""

from __future__ import annotations

import os
from urllib.parse import quote, urlencode

import pytest
from pydantic import BaseModel

from ragscore_workers.metrics.registry import MetricDef, NoParams, RunContext
from ragscore_workers.schemas import MetricResult, Queue, Row, Suite
from ragscore_workers.scoring import score_rows

CTX = RunContext(run_id="r", suite=Suite(metrics=["exact_match"]))


def _explode_on_b(row: Row, params: BaseModel) -> MetricResult:
    if row.id == "b":
        raise ValueError("bad input")
    return MetricResult(score=1.0)


def _batch_explode_on_b(rows: list[Row], params: BaseModel, ctx: RunContext) -> list[MetricResult]:
    if any(r.id == "b" for r in rows):
        raise RuntimeError("batch broke")
    return [MetricResult(score=0.5) for _ in rows]


def test_per_row_failure_is_isolated() -> None:
    mdef = MetricDef(name="m", queue=Queue.CPU, fn=_explode_on_b)
    out = score_rows([Row(id="a"), Row(id="b"), Row(id="c")], [(mdef, NoParams())], CTX)
    assert [o["m"].score for o in out] == [1.0, None, 1.0]
    assert out[1]["m"].error == "ValueError: bad input" and out[0]["m"].error is None


def test_batch_failure_falls_back_to_one_row_at_a_time() -> None:
    mdef = MetricDef(name="m", queue=Queue.EMBED, fn=_batch_explode_on_b, kind="batch")
    out = score_rows([Row(id="a"), Row(id="b"), Row(id="c")], [(mdef, NoParams())], CTX)
    assert [o["m"].score for o in out] == [0.5, None, 0.5]
    assert out[1]["m"].error == "RuntimeError: batch broke"


def test_wrong_return_type_is_an_item_error() -> None:
    mdef = MetricDef(name="m", queue=Queue.CPU, fn=lambda row, params: 0.5)
    (out,) = score_rows([Row(id="a")], [(mdef, NoParams())], CTX)
    assert out["m"].error == "TypeError: metric 'm' returned float, not a MetricResult or a dict of them"


def test_the_tasks_time_limit_is_not_swallowed_as_a_metric_failure() -> None:
    """Celery's soft time limit is an Exception: caught here, the batch fell back to scoring row by row until
    the hard limit killed the worker, and the task's handler (a "time limit" error per item) never ran."""
    from celery.exceptions import SoftTimeLimitExceeded

    def out_of_time(*args: object) -> MetricResult:
        raise SoftTimeLimitExceeded()

    for kind in ("per_row", "batch"):
        mdef = MetricDef(name="m", queue=Queue.CODE, fn=out_of_time, kind=kind)  # type: ignore[arg-type]
        with pytest.raises(SoftTimeLimitExceeded):
            score_rows([Row(id="a"), Row(id="b")], [(mdef, NoParams())], CTX)


def test_a_plugins_error_quoting_a_key_from_the_environment_is_stored_without_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A plug-in calling its own API raised with the key in the URL (httpx quotes it): the key went into items.jsonl,
    summary.json's first_error, the reports and the terminal."""
    key = "acme/live+7f3a9c21=="  # base64: quoted into a URL, it is acme%2Flive%2B7f3a9c21%3D%3D
    monkeypatch.setenv("ACME_API_KEY", f" {key}\n")  # as a key file's newline leaves it
    monkeypatch.setenv("DEBUG_TOKEN", "1")  # too short to be a secret: "1" stays everywhere

    def leaky(row: Row, params: BaseModel) -> MetricResult:
        url = f"https://acme.test/score?{urlencode({'key': key})}&alt={quote(key)}"
        raise RuntimeError(f"GET {url} failed (attempt 1, {dict(key=key)})")

    caplog.set_level("DEBUG", logger="ragscore_workers.scoring")  # the worker log, its tracebacks too
    for kind, fn in (("per_row", leaky), ("batch", lambda rows, p, ctx: leaky(rows[0], p))):
        mdef = MetricDef(name="m", queue=Queue.CPU, fn=fn, kind=kind)  # type: ignore[arg-type]
        (out,) = score_rows([Row(id="a")], [(mdef, NoParams())], CTX)
        assert out["m"].error == (
            "RuntimeError: GET https://acme.test/score?key=***&alt=*** failed (attempt 1, {'key': '***'})"
        )
    assert "metric m failed on a: Traceback" in caplog.text and "in leaky" in caplog.text
    assert key not in caplog.text and quote(key, safe="") not in caplog.text


def test_a_key_in_a_variable_named_key_or_a_password_in_a_url_variable_is_stored_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only ``*_API_KEY`` / ``*_TOKEN`` / ``*_SECRET`` names were redacted: ``GEMINI_KEY`` and ``AZURE_OPENAI_KEY``
    (as those SDKs' docs name them) and the password in a ``DATABASE_URL`` went into the results as quoted."""
    monkeypatch.setenv("GEMINI_KEY", "AIzaSyD-gemini-0123456789")
    monkeypatch.setenv("AZURE_OPENAI_KEY", "azure-0123456789abcdef")
    monkeypatch.setenv("DATABASE_URL", "postgresql://scorer:pg-pass-98765@db.internal:5432/evals")
    monkeypatch.setenv("SORT_KEY", "id")  # too short to be a secret: "id" stays everywhere

    def leaky(row: Row, params: BaseModel) -> MetricResult:
        env = os.environ
        raise RuntimeError(f"https://gen.example/v1?key={env['GEMINI_KEY']} api-key: {env['AZURE_OPENAI_KEY']}; "
                           f"connect {env['DATABASE_URL']} failed for id")  # fmt: skip

    mdef = MetricDef(name="m", queue=Queue.CPU, fn=leaky, kind="per_row")  # type: ignore[arg-type]
    (out,) = score_rows([Row(id="a")], [(mdef, NoParams())], CTX)
    assert out["m"].error == ("RuntimeError: https://gen.example/v1?key=*** api-key: ***; "
                              "connect postgresql://scorer:***@db.internal:5432/evals failed for id")  # fmt: skip


def test_a_short_password_in_a_url_is_stored_without_it_and_a_short_placeholder_key_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Values under 8 characters were never redacted: a short DB password in a URL went into items.jsonl as quoted.
    A URL's password is a secret by its place, whatever its length; a short credential value elsewhere is a
    placeholder (``EMPTY``, ``ollama``) far more often than a key, and the words holding it stay readable."""
    monkeypatch.setenv("DATABASE_URL", "postgres://u:pw123@db.internal/evals")
    monkeypatch.setenv("CACHE_URL", "redis://:x9@cache:6379/0")
    monkeypatch.setenv("OPENAI_API_KEY", "ollama")
    monkeypatch.setenv("REDIS_PASSWORD", "redis")

    def leaky(row: Row, params: BaseModel) -> MetricResult:
        raise RuntimeError("connect postgres://u:pw123@db.internal/evals refused; "
                           "redis://:x9@cache:6379/0 down; mysql://root:hunter@10.0.0.7/x refused; "
                           "cannot reach http://ollama:11434/v1, is ollama running? "
                           "redis-server not running")  # fmt: skip

    mdef = MetricDef(name="m", queue=Queue.CPU, fn=leaky, kind="per_row")  # type: ignore[arg-type]
    (out,) = score_rows([Row(id="a")], [(mdef, NoParams())], CTX)
    assert out["m"].error == ("RuntimeError: connect postgres://u:***@db.internal/evals refused; "
                              "redis://:***@cache:6379/0 down; mysql://root:***@10.0.0.7/x refused; "
                              "cannot reach http://ollama:11434/v1, is ollama running? "
                              "redis-server not running")  # fmt: skip


def test_a_batch_metric_returning_the_wrong_count_fails_its_rows_once_without_rerunning_them() -> None:
    """It was re-run row by row (a costly batch, once per row more), and each row then said "returned 0 results
    for 1 rows", not what the batch did."""
    calls: list[int] = []

    def one_short(rows: list[Row], params: BaseModel, ctx: RunContext) -> list[MetricResult]:
        calls.append(len(rows))
        return [MetricResult(score=1.0) for _ in rows[1:]]

    mdef = MetricDef(name="m", queue=Queue.EMBED, fn=one_short, kind="batch")  # type: ignore[arg-type]
    out = score_rows([Row(id="a"), Row(id="b"), Row(id="c")], [(mdef, NoParams())], CTX)
    assert calls == [3]
    assert [o["m"].error for o in out] == ["TypeError: batch metric 'm' returned 2 results for 3 rows"] * 3


def test_only_a_cancels_skipped_outputs_are_left_out_of_a_cancelled_runs_items_taken_back() -> None:
    """A cancelled run's resume leaves out of DIR/items.jsonl the outputs its cancel skipped (never stored): told by
    equality with ``stopped("run cancelled")``, a metric that returned that very value, or a judge stopped by the
    cancel, was left out too, and its output counted done twice. They are told by a mark that only the cancel sets:
    a metric's own is dropped when it is scored."""
    from ragscore_workers.scoring import SKIPPED_MARK, cancel_skipped, with_skipped, without_skipped
    from ragscore_workers.store import RawItem

    def cancelled_look_alike(row: Row, params: BaseModel) -> MetricResult:
        return MetricResult.stopped("run cancelled", **{SKIPPED_MARK: True})

    mdef = MetricDef(name="m", queue=Queue.CPU, fn=cancelled_look_alike)
    (scored,) = score_rows([Row(id="a")], [(mdef, NoParams())], CTX)
    stored = scored["m"].model_copy(update={"ms": 0.0}).model_dump()
    assert stored == MetricResult.stopped("run cancelled").model_dump(), stored
    items = [RawItem(key="a", meta={"id": "a"}, metrics={"m": stored}), RawItem(key="b", meta={"id": "b"}, metrics={})]
    written = list(with_skipped(items, cancel_skipped(["m"])))
    assert written[1].metrics["m"]["details"][SKIPPED_MARK] is True
    assert [raw.metrics for raw in without_skipped(written)] == [{"m": stored}, {}]
