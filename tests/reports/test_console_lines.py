"""The lines printed under the summary table: what the judge and the embed workers did."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.reports.console import embedding_line, judge_line, print_summary
from ragscore_workers.schemas import RunSummary


def _summary(**fields: object) -> RunSummary:
    return RunSummary.model_validate({"run_id": "r1", "items": 3, "scored": 3, **fields})


def test_the_judge_line_counts_calls_cost_and_says_why_judging_stopped() -> None:
    assert judge_line(_summary()) is None  # no judge metric: no line
    judged = _summary(judge={"calls": 1200, "cache_hits": 30, "retries": 4, "rate_limited": 2, "tokens_in": 250_000,
                             "tokens_out": 4800, "cost": 0.12345, "parse_failures": 3, "failures": 0,
                             "breaker": "circuit breaker open after 5 consecutive failed judge calls (last: 503)"},
                      )  # fmt: skip
    assert judge_line(judged) == (
        "judge: 1,200 calls, 30 from the cache, 4 retries, 2 rate-limited (429), tokens 250,000 in / 4,800 out, "
        "cost 0.1235, 3 unparsable replies; stopped: circuit breaker open after 5 consecutive failed judge calls "
        "(last: 503) (`ragscore run --resume DIR` goes on)"
    )
    budget = _summary(judge={"calls": 10, "budget": "budget reached: 3100 judge tokens >= max_tokens 3000"})
    assert judge_line(budget).endswith("; stopped: budget reached: 3100 judge tokens >= max_tokens 3000 "  # type: ignore[union-attr]
                                       "(`ragscore run --resume DIR` goes on)")  # fmt: skip
    assert judge_line(_summary(judge={"calls": 0, "cache_hits": 12})).startswith("judge: 0 calls, 12 from the cache")


def test_the_embedding_line_says_where_the_vectors_were_computed() -> None:
    assert embedding_line(_summary()) is None
    embedded = _summary(embedding={"encoded": 1500, "encode_calls": 24, "cache_hits": 10, "worker_processes": 2,
                                   "devices": {"cpu fp32": 1, "cuda fp16": 1}})  # fmt: skip
    line = ("embedding: 1,500 texts encoded in 24 batched calls, 10 from the cache; worker processes on cpu fp32 ×1, "
            "cuda fp16 ×1")  # fmt: skip
    assert embedding_line(embedded) == line
    out = io.StringIO()
    print_summary(embedded, Console(file=out, width=300))
    assert line in out.getvalue()
