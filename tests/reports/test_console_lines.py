"""The lines printed under the summary table: what the judge and the embed workers did."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.reports.console import (
    ci_text,
    embedding_counters,
    embedding_line,
    judge_line,
    print_summary,
    retrieved_nothing_lines,
    target_lines,
    unfilled_lines,
    warning_lines,
)
from orchestrator.reports.markdown import render_markdown
from ragscore_workers.aggregate import summarize, wilson_ci
from ragscore_workers.schemas import ItemResult, MetricResult, RunSummary


def _answer(item_id: str, system: str) -> ItemResult:
    """One item of ``system`` scored 1.0 by a metric ``m``."""
    return ItemResult(id=item_id, system=system, metrics={"m": MetricResult(score=1.0)})


def _compare_hint_said(summary: RunSummary, width: int) -> str:
    """The console summary of ``summary`` (reports in runs/eval), its whitespace folded."""
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=width), out=Path("runs/eval"))
    return " ".join(out.getvalue().split())


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
    # A budget too small for the first call stopped every judge item before a call: the terminal said nothing of it.
    first = judge_line(_summary(judge={"calls": 0, "budget": "budget reached: 0 + 900 judge tokens > max_tokens 500"}))
    assert first is not None and first.startswith("judge: 0 calls, 0 from the cache"), first
    assert first.endswith("; stopped: budget reached: 0 + 900 judge tokens > max_tokens 500 (`ragscore run --resume "
                          "DIR` goes on)"), first  # fmt: skip
    cheap = judge_line(_summary(judge={"calls": 3, "tokens_in": 300, "cost": 0.000021}))  # 300 tokens at $0.07/M
    assert cheap is not None and "cost <0.0001" in cheap  # not a free-looking 0.0000
    # A model the price table lacks read "cost 0.0000", as if free (--dry-run said "no price" for it).
    unpriced = judge_line(_summary(judge={"calls": 3, "cost": 0.0, "unpriced_calls": 3}))
    assert (
        unpriced is not None and "cost - (no price for the judge model: the judge metrics' param 'prices')" in unpriced
    )
    # A limit the provider stated (this run or an earlier one) below the suite's slowed the run: the line says it.
    stated = judge_line(_summary(judge={"calls": 30, "provider_rpm": 12, "provider_tpm": 6000}))
    assert stated is not None and stated.endswith(", the provider's own limits applied (rpm 12, tpm 6,000: below the "
                                                  "suite's)")  # fmt: skip
    some = judge_line(_summary(judge={"calls": 3, "cache_hits": 2, "cost": 0.5, "unpriced_calls": 1}))
    assert some is not None and "cost 0.5000 (1 call without a price not counted)" in some
    # A re-run answered by the cache read a bare "cost 0" where its first run read "cost - (no price ...)".
    rerun = judge_line(_summary(judge={"calls": 0, "cache_hits": 30, "cost": 0.0}))
    assert rerun is not None and rerun.endswith("cost 0 (every reply from the cache: nothing paid)")


def test_the_judge_line_names_the_runs_dir_in_the_resume_when_known() -> None:
    """The line said "`ragscore run --resume DIR` goes on" under the table of a run whose DIR it was given."""
    stopped = _summary(judge={"calls": 10, "budget": "budget reached: 3100 judge tokens >= max_tokens 3000"})
    assert judge_line(stopped, Path("runs/a")).endswith("(`ragscore run --resume runs/a` goes on)")  # type: ignore[union-attr]
    out = io.StringIO()
    print_summary(stopped, Console(file=out, width=300), out=Path("my runs/it's"))
    assert """(`ragscore run --resume 'my runs/it'"'"'s'` goes on)""" in out.getvalue()  # as a shell takes it


def test_the_embedding_line_says_where_the_vectors_were_computed() -> None:
    assert embedding_line(_summary()) is None
    encoders = {"cuda": {"workers": 1, "encoded": 1500, "encode_ms": 900}}  # the cpu process had its texts cached
    embedded = _summary(embedding={"encoded": 1500, "encode_calls": 24, "cache_hits": 10, "worker_processes": 2,
                                   "devices": {"cpu fp32": 1, "cuda fp16": 1}, "encoders": encoders})  # fmt: skip
    line = ("embedding: 1,500 texts encoded in 24 batched calls, 10 from the cache; served by worker processes on "
            "cpu fp32 ×1, cuda fp16 ×1, of which cuda ×1 encoded")  # fmt: skip
    assert embedding_line(embedded) == line
    out = io.StringIO()
    print_summary(embedded, Console(file=out, width=300))
    assert line in out.getvalue()


def test_a_resumed_runs_embedding_line_says_it_counts_every_attempt_and_why_texts_are_encoded_again() -> None:
    """A resume after a Ctrl-C (under --no-cache) read "10,224 texts encoded in 110 batched calls" beside the whole
    uninterrupted run's 9,405 in 47, under a wall time "since the resume": as if the resume had scored again what was
    done. It re-sent no scored output; its counters hold both attempts, and it encoded again what no cache held."""
    counters = {"encoded": 10224, "encode_calls": 110, "cache_hits": 0, "devices": {"cpu fp32": 2}}
    line = embedding_line(_summary(embedding=counters, timing={"resumed_at": 1.0, "wall_s": 446.0}))
    assert line == (
        "embedding: 10,224 texts encoded in 110 batched calls, 0 from the cache (the run and its resumes together: a "
        "resume encodes again the texts of the tasks the interruption cut short and those its items share with items "
        "scored before, unless the embedding cache, which --no-cache turns off, holds them); served by worker "
        "processes on cpu fp32 ×2"
    ), line


def test_the_embeddings_table_leaves_out_the_per_device_measures() -> None:
    """``encoders`` (per device, the workers that encoded and their texts and time: the dry run's measures) is a
    summary's, not a column of report.md's table, which showed it as a dict."""
    encoders = {"cpu": {"workers": 2, "encoded": 1500, "encode_ms": 9000}}
    summary = _summary(embedding={"encoded": 1500, "encode_calls": 24, "encode_ms": 9000, "encoders": encoders,
                                  "devices": {"cpu fp32": 2}})  # fmt: skip
    assert embedding_counters(summary) == {"encoded": "1,500", "encode_calls": "24", "encode_ms": "9,000",
                                           "devices": "cpu fp32 ×2"}  # fmt: skip
    report = render_markdown(summary)
    assert "| encoded | encode_calls | encode_ms | devices |" in report and "workers" not in report, report


def test_a_line_per_target_says_its_calls_and_the_replies_the_cache_gave() -> None:
    """Re-running after a change to the system under test (same URL or callable) scored its cached replies, and
    the console said nothing: the counters were in report.md alone."""
    assert target_lines(_summary()) == []
    summary = _summary(target={"rag-v2": {"calls": 0, "cache_hits": 4, "retries": 0, "rate_limited": 0,
                                          "failures": 0},
                               "flaky": {"calls": 9, "cache_hits": 0, "retries": 3, "rate_limited": 2,
                                         "failures": 1}})  # fmt: skip
    cached = ("target rag-v2: 0 calls, 4 replies from the reply cache (a changed system is asked again with "
              "--no-cache)")  # fmt: skip
    assert target_lines(summary) == [cached, "target flaky: 9 calls, 3 retries, 2 rate-limited (429), 1 failed"]
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=300))
    assert cached in out.getvalue()


def test_a_run_of_several_systems_prints_each_system_s_means_under_the_pooled_table() -> None:
    """The summary table pools every system's items (the quickstart: bm25-llm and hybrid-llm): no one's score."""

    def m(mean: float | None, n: int, ci95: list[float] | None = None) -> dict[str, object]:
        return {"mean": mean, "n": n, "ci95": ci95}

    two = _summary(metrics={"exact_match": m(0.796, 49), "mrr": m(0.661, 49)},
                   by_system={"bm25-llm": {"exact_match": m(0.833, 24, [0.65, 0.95]), "mrr": m(0.525, 25, [0.4, 0.6])},
                              "hybrid[v2]": {"exact_match": m(0.76, 25, [0.58, 0.92])}})  # fmt: skip
    out = io.StringIO()
    print_summary(two, Console(file=out, width=300))
    lines = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in out.getvalue().splitlines()]
    assert "The means above pool the items of all 2 systems; per system:" in lines
    assert "metric bm25-llm hybrid[v2]" in lines  # a name is shown as written, never read as markup
    # each with its 95% CI, as the summary table writes it
    assert "exact_match 0.833 [0.650, 0.950] (n=24) 0.760 [0.580, 0.920] (n=25)" in lines
    assert "mrr 0.525 [0.400, 0.600] (n=25) -" in lines
    # a terminal too narrow for a cell on one line: each CI whole, under its mean, not cut at its space
    cell = {"context_relevance": m(0.833, 24, [0.65, 0.95])}
    three = _summary(metrics={"context_relevance": m(0.833, 72)}, by_system={s: cell for s in ("a", "b", "c")})
    out = io.StringIO()
    print_summary(three, Console(file=out, width=80))
    lines = [" ".join(line.replace("│", " ").replace("┃", " ").split()) for line in out.getvalue().splitlines()]
    assert "context_relevance 0.833 (n=24) 0.833 (n=24) 0.833 (n=24)" in lines, lines
    assert "[0.650, 0.950] [0.650, 0.950] [0.650, 0.950]" in lines, lines
    one = io.StringIO()
    print_summary(_summary(by_system={"only": {"exact_match": m(1.0, 3)}}), Console(file=one, width=300))
    assert "per system" not in one.getvalue() and "bm25-llm" not in one.getvalue()
    # rows without a system are pooled too, and in no system's column: said so
    loose = _summary(metrics={"exact_match": m(0.7, 52), "mrr": m(0.6, 51)},
                     by_system={"bm25-llm": {"exact_match": m(0.833, 24), "mrr": m(0.525, 24)},
                                "hybrid[v2]": {"exact_match": m(0.76, 25), "mrr": m(0.6, 25)}})  # fmt: skip
    out = io.StringIO()
    print_summary(loose, Console(file=out, width=300))
    said = "The means above pool the items of all 2 systems and the 2 items with no system; per system:"
    assert said in out.getvalue()


def test_the_per_system_table_says_how_to_compare_the_systems() -> None:
    """The per-system means have no interval: which difference is noise was said nowhere on the console, nor that
    ``ragscore compare`` pairs the systems on their questions."""

    def m(mean: float, n: int) -> dict[str, object]:
        return {"mean": mean, "n": n}

    two = _summary(metrics={"mrr": m(0.29, 6000)},
                   by_system={"bm25": {"mrr": m(0.258, 3000)}, "dense": {"mrr": m(0.324, 3000)}})  # fmt: skip
    out = io.StringIO()
    print_summary(two, Console(file=out, width=300), out=Path("runs/my eval"))
    said = "paired differences with their 95% CI and p: `ragscore compare 'runs/my eval' --baseline bm25`"
    assert said in " ".join(out.getvalue().split())
    by_id = io.StringIO()
    print_summary(two, Console(file=by_id, width=300))
    assert f"ragscore compare {two.run_id} --baseline bm25" in by_id.getvalue()  # pasted as it is: the first system
    other = io.StringIO()  # the run's id is found on its broker: said with it, its password hidden
    print_summary(two, Console(file=other, width=300), broker="redis://:s3cret@cache.local:6380/2")
    said = " ".join(other.getvalue().split())
    hidden = "RAGSCORE_BROKER_URL='redis://:***@cache.local:6380/2'"
    assert f"`{hidden} ragscore compare {two.run_id} --baseline bm25`" in said, said
    assert "(put its password back for `***`)" in said and "s3cret" not in said
    spaced = _summary(metrics={"mrr": m(0.29, 6000)},
                      by_system={"my rag": {"mrr": m(0.258, 3000)}, "dense": {"mrr": m(0.324, 3000)}})  # fmt: skip
    quoted = io.StringIO()
    print_summary(spaced, Console(file=quoted, width=300))
    assert f"ragscore compare {spaced.run_id} --baseline 'my rag'`" in quoted.getvalue()  # quoted for the shell
    from ragscore_workers.aggregate import OTHER_VALUES

    many = _summary(metrics={"mrr": m(0.29, 6000)},
                    by_system={OTHER_VALUES: {"mrr": m(0.2, 10)}, "bm25": {"mrr": m(0.258, 3000)}})  # fmt: skip
    past = io.StringIO()  # past 1,000 systems the rest pool under a name that sorts first: no system to compare
    print_summary(many, Console(file=past, width=300))
    assert f"ragscore compare {many.run_id} --baseline bm25`" in past.getvalue(), past.getvalue()


def test_systems_that_share_no_question_id_are_not_sent_to_compare() -> None:
    """Six systems whose answers each had ids of their own (``q00000`` to ``q49999`` over all of them): the run
    ended by suggesting ``ragscore compare``, which then refused (nothing to pair). It says why instead."""

    def m(mean: float, n: int) -> dict[str, object]:
        return {"mean": mean, "n": n}

    systems = {"by_system": {"bm25": {"mrr": m(0.258, 3000)}, "dense": {"mrr": m(0.324, 3000)}}}
    apart = _summary(metrics={"mrr": m(0.29, 6000)}, paired_questions=0, **systems)
    out = io.StringIO()
    print_summary(apart, Console(file=out, width=300), out=Path("runs/eval"))
    said = " ".join(out.getvalue().split())
    assert "ragscore compare runs/eval" not in said, said
    assert "no question id is shared by two systems, so `ragscore compare` has nothing to pair" in said, said
    paired = _summary(metrics={"mrr": m(0.29, 6000)}, paired_questions=3000, **systems)
    out = io.StringIO()
    print_summary(paired, Console(file=out, width=300), out=Path("runs/eval"))
    assert "`ragscore compare runs/eval --baseline bm25`" in " ".join(out.getvalue().split())


def test_the_suggested_compare_baseline_is_one_that_pairs_with_the_most_systems() -> None:
    """bm25's answers under ids of their own (``bm25-q1``), dense's and hybrid's under shared ones: the run ended by
    suggesting ``ragscore compare --baseline bm25`` (the first system; ``paired_questions > 0`` held for the others),
    which paired nothing. It suggests dense, which pairs with hybrid, and says how many of the others it pairs with."""
    items = [_answer(f"bm25-{q}", "bm25") for q in ("q1", "q2")]
    items += [_answer(q, s) for q in ("q1", "q2") for s in ("dense", "hybrid")]
    said = _compare_hint_said(summarize("r1", items), 300)
    assert (
        "`ragscore compare runs/eval --baseline dense` (dense shares question ids with 1 of the 2 other systems)"
        in said
    ), said
    assert "--baseline bm25" not in said, said
    said = _compare_hint_said(summarize("r1", [_answer(q, s) for q in ("q1", "q2") for s in ("bm25", "dense")]), 300)
    assert "`ragscore compare runs/eval --baseline bm25`" in said and "shares question ids" not in said, said


def test_the_compare_hint_of_a_run_past_the_breakdowns_systems_says_those_were_not_checked() -> None:
    """Systems past the breakdown's first 1,000 are pooled, and which of them share a question id was never counted:
    s0000, whose one question s1000 answered too, was said to share question ids "with 0 of the 999 other systems",
    and `ragscore compare` pairs them. The hint says how many of the first 1,000 it shares ids with, and that the
    systems past them were not checked."""
    from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES

    items = [_answer(f"own-{n}", f"s{n:04}") for n in range(1, MAX_BREAKDOWN_VALUES)]
    items = [_answer("q", "s0000"), *items, _answer("q", f"s{MAX_BREAKDOWN_VALUES:04}")]  # paired past the first
    said = _compare_hint_said(summarize("r1", items), 400)
    assert (
        "`ragscore compare runs/eval --baseline s0000` (s0000 shares question ids with 0 of the 999 other systems of "
        "the first 1,000; the systems past them were not checked)"
    ) in said, said[-600:]


def test_gold_ids_never_among_the_retrieved_ones_are_said_once_for_the_dataset_and_per_system() -> None:
    """Gold ids named ``doc_12`` against retrieved ``12``: recall_at_k scored every row 0 (no error, nothing
    unscorable) and the run said nothing of it. One line says it, of the dataset or of the systems so."""
    from ragscore_workers.metrics.retrieval import RecallParams, recall_at_k
    from ragscore_workers.schemas import ItemResult, Row

    def item(i: int, system: str, gold: str, retrieved: list[str]) -> ItemResult:
        row = Row(id=f"q{i}", system=system, gold_doc_id=gold, retrieved_doc_ids=retrieved)
        return ItemResult(id=row.id, system=system, metrics=recall_at_k(row, RecallParams()))

    def said(items: list[ItemResult]) -> str:
        out = io.StringIO()
        print_summary(summarize("r1", items), Console(file=out, width=400))
        return " ".join(out.getvalue().split())

    apart = [item(i, "bm25", f"doc_{i}", [str(i), str(i + 1)]) for i in range(3)]
    line = ("recall_at_k: no gold_doc_id of any of the 3 rows is among its retrieved_doc_ids (mrr 0 on every row): "
            "do gold_doc_id and retrieved_doc_ids name documents alike")  # fmt: skip
    assert line in said(apart), said(apart)
    # one system named apart, one alike: the dataset found some; the system did not
    alike = [item(i, "dense", f"doc_{i}", [f"doc_{i + 1}", f"doc_{i}"]) for i in range(3)]
    assert "no gold_doc_id of system bm25 is among its retrieved_doc_ids (mrr 0 on each of its rows)" in said(
        apart + alike
    ), said(apart + alike)
    assert "retrieved_doc_ids name" not in said(alike)
    # a miss now and then, or a single row, is a retriever's, not a naming scheme's
    assert "retrieved_doc_ids name" not in said(alike + [item(9, "dense", "doc_9", ["doc_1"])])
    assert "retrieved_doc_ids name" not in said(apart[:1])
    # an LLM-only system retrieves nothing by design: said once, as information, never as ids named otherwise
    llm = [item(i, "llm", f"doc_{i}", []) for i in range(3)]
    for items in (llm, alike + llm):
        assert "retrieved_doc_ids name" not in said(items), said(items)
        assert said(items).count("recall_at_k: 3 rows (of system llm) retrieved nothing (retrieved_doc_ids empty): "
                                 "each scores 0") == 1, said(items)  # fmt: skip
    assert "no gold_doc_id of system bm25 is among" in said(apart + alike + llm)


def test_the_gold_id_lines_name_the_systems_past_the_breakdowns_first_1000() -> None:
    """The lines named systems only among the breakdown's first MAX_BREAKDOWN_VALUES: an LLM-only system seen after
    them was said as rows "retrieved nothing" of no system, one whose ids are named otherwise not at all."""
    from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES
    from ragscore_workers.metrics.retrieval import RecallParams, recall_at_k
    from ragscore_workers.schemas import Row

    def item(i: int, system: str, retrieved: list[str]) -> ItemResult:
        row = Row(id=f"q{i}", system=system, gold_doc_id=f"d{i}", retrieved_doc_ids=retrieved)
        return ItemResult(id=row.id, system=system, metrics=recall_at_k(row, RecallParams()))

    items = [item(i, f"s{i:04}", [f"d{i}"]) for i in range(MAX_BREAKDOWN_VALUES + 1)]  # each found its gold id
    items += [item(i, "llm", []) for i in range(2)] + [item(i, "bm25", ["x", "y"]) for i in range(2)]
    summary = summarize("r1", items)
    assert "llm" not in summary.by_system and "bm25" not in summary.by_system  # pooled past the first 1,000
    assert retrieved_nothing_lines(summary) == [
        "recall_at_k: 2 rows (of system llm) retrieved nothing (retrieved_doc_ids empty): each scores 0"
    ]
    (missed,) = warning_lines(summary)
    assert missed.startswith("recall_at_k: no gold_doc_id of system bm25 is among its retrieved_doc_ids"), missed
    # the summary as summary.json keeps it says the same
    assert warning_lines(type(summary).model_validate_json(summary.model_dump_json())) == [missed]
    # a summary written before retrieved_systems (an older run's folder): its breakdown names the systems, as before
    within = summarize("r0", items[-5:])  # s1000 found its gold id; llm retrieved nothing; bm25 missed
    older = type(within).model_validate_json(within.model_dump_json(exclude={"retrieved_systems"}))
    assert older.retrieved_systems is None and within.retrieved_systems is not None
    lines = warning_lines(within) + retrieved_nothing_lines(within)
    assert lines == [missed, retrieved_nothing_lines(summary)[0]]
    assert warning_lines(older) + retrieved_nothing_lines(older) == lines


def test_a_cost_of_nothing_is_0_and_an_unknown_one_is_a_dash_in_the_dry_run_and_the_reports() -> None:
    """--dry-run wrote ``0.0000`` for a metric whose calls were all cached and ``-`` for one without a price, and the
    run's reports ``0.0000`` for a run the cache answered: a free-looking number of decimals beside a dash. A cost
    that is nothing is ``0``; one that cannot be known (no price) is ``-``."""
    from orchestrator.estimate import CallTally, Estimate
    from orchestrator.reports.console import print_estimate
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats
    from orchestrator.reports.markdown import render_markdown
    from ragscore_workers.schemas import Suite

    estimate = Estimate(rows=3, items=3, units={"judge": 6}, cache_checked=True, judge={
        "answer_accuracy": CallTally(calls=6, cached=6, cost=0.0),
        "groundedness": CallTally(calls=6, tokens_in=600, tokens_out_max=96, cost=None, largest=116),
    })  # fmt: skip
    console = Console(file=io.StringIO(), width=200)
    print_estimate(estimate, Suite.model_validate({"metrics": ["answer_accuracy", "groundedness"]}), console,
                   mode="cluster")  # fmt: skip
    costs = {line.split()[0]: line.split()[-1] for line in console.file.getvalue().splitlines()  # type: ignore[attr-defined]
             if line.split()[:1] in (["answer_accuracy"], ["groundedness"], ["total"])}  # fmt: skip
    assert costs == {"answer_accuracy": "0", "groundedness": "-", "total": "-"}
    cached = _summary(judge={"calls": 0, "cache_hits": 6, "cost": 0.0, "unpriced_calls": 0})
    assert "cost 0 (every reply from the cache: nothing paid)" in (judge_line(cached) or "")
    assert "| 0 | 6 | 0 | 0 |" in render_markdown(cached)  # calls, cache_hits, cost, unpriced_calls
    assert "<td>0</td><td>6</td><td>0</td><td>0</td>" in render_html(cached, ItemStats())


def test_the_dry_run_tells_an_embedded_run_from_a_cluster_one_by_the_mode_it_is_given() -> None:
    """print_estimate took a run for an embedded one where it was given its local judge worker's threads: a mode
    read from another value. Its caller gives the mode: an embedded run starts its local embed worker (said before
    its first text), whatever the threads known; a cluster's run does not, and has no local judge worker's time."""
    from orchestrator.estimate import CallTally, EmbedTally, Estimate
    from orchestrator.reports.console import print_estimate
    from ragscore_workers.schemas import Suite

    suite = Suite.model_validate({"metrics": ["answer_relevance", "answer_accuracy"]})

    def said(mode: str, judge_threads: int | None) -> str:
        """The dry run's text for a run in ``mode`` given ``judge_threads``."""
        judge = {"answer_accuracy": CallTally(calls=80, tokens_in=8000, tokens_out_max=640)}
        estimate = Estimate(rows=40, items=40, units={"embed": 40, "judge": 40}, embed=EmbedTally(texts=80, words=800),
                            judge=judge)  # fmt: skip
        console = Console(file=io.StringIO(), width=400)
        print_estimate(estimate, suite, console, mode=mode, judge_threads=judge_threads)
        return " ".join(console.file.getvalue().split())  # type: ignore[attr-defined]

    assert "the local embed worker's start" in said("embedded", None)
    assert "with the local judge worker's 4 threads" in said("embedded", 4)
    cluster = said("cluster", 4)
    assert "the local embed worker's start" not in cluster and "where a worker has not loaded it yet" in cluster
    assert "local judge worker" not in cluster, cluster
    with pytest.raises(ValueError, match="mode must be"):
        print_estimate(Estimate(), suite, Console(file=io.StringIO()), mode="local")


def test_the_summary_table_marks_an_output_where_lower_is_better_as_report_md_does() -> None:
    """``answer_hallucination 0.800`` on the console read as good; report.md and report.html said "(lower is better)"
    beside it. The per-system table (two systems or more) marks it too."""
    from orchestrator.reports.markdown import render_markdown

    metrics = {"answer_hallucination": {"mean": 0.8, "n": 2}, "exact_match": {"mean": 0.5, "n": 2}}
    summary = _summary(metrics=metrics, by_system={"a": metrics, "b": metrics})
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=300))
    named = [line.split("│")[1].strip() for line in out.getvalue().splitlines() if "exact_match" in line
             or "answer_hallucination" in line]  # fmt: skip
    assert named == ["answer_hallucination (lower is better)", "exact_match"] * 2
    assert "| answer_hallucination (lower is better) |" in render_markdown(summary)


def test_counts_of_one_on_the_console_read_in_the_singular() -> None:
    """The console said "1 items, 1 scored, 1 unreadable rows", "1 calls", "1 retries", "1 texts encoded"."""
    one = _summary(items=1, scored=1, failed_rows=1, judge={"calls": 1, "retries": 1, "cost": 0.5,
                                                            "parse_failures": 1, "failures": 1},
                   embedding={"encoded": 1, "encode_calls": 1, "cache_hits": 0},
                   target={"api": {"calls": 1, "cache_hits": 1, "retries": 1, "unfilled_contexts": 1}})  # fmt: skip
    judge = judge_line(one)
    assert judge is not None and judge.startswith("judge: 1 call, 0 from the cache, 1 retry,")
    assert "1 unparsable reply, 1 call failed for good" in judge
    assert embedding_line(one) == "embedding: 1 text encoded in 1 batched call, 0 from the cache"
    assert target_lines(one) == [
        "target api: 1 call, 1 reply from the reply cache (a changed system is asked again with --no-cache), 1 retry"
    ]
    assert unfilled_lines(one)[0].startswith("target api: 1 reply had nothing at the path of contexts")
    out = io.StringIO()
    print_summary(one, Console(file=out, width=200))
    assert out.getvalue().rstrip().endswith("1 item, 1 scored, 1 unreadable row")


def test_the_count_of_scored_items_names_the_outputs_that_scored_none() -> None:
    """ "8 items, 8 scored" under a run whose judge scored nothing (every reply unscorable): an item counts as scored
    when any output scored it (here exact_match), so the console, report.md, report.html and `status` say which outputs
    scored none, in the same words."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats
    from orchestrator.reports.live import Sample, StatusView
    from orchestrator.reports.markdown import render_markdown
    from ragscore_workers.schemas import MetricSummary

    unjudged = _summary(items=8, scored=8, state="finished", metrics={
        "exact_match": MetricSummary(mean=0.5, n=8),
        "answer_accuracy": MetricSummary(mean=None, n=0, unscorable=8, unscorable_reasons={"unparseable reply": 8}),
        "groundedness": MetricSummary(mean=None, n=0, errors=8, first_error="HTTP 500")})  # fmt: skip
    said = "8 scored (by at least one output; none by answer_accuracy, groundedness)"
    out = io.StringIO()
    print_summary(unjudged, Console(file=out, width=300))
    assert out.getvalue().rstrip().endswith(f"8 items, {said}, 0 unreadable rows"), out.getvalue()
    assert f"8 items, {said}, 0 unreadable rows" in render_markdown(unjudged)
    assert f"<span>{said}</span>" in render_html(unjudged, ItemStats())
    view = StatusView({"state": "finished", "submitted_at": "1000"})
    view.add(Sample(1050.0, {"done:cpu": 8, "total:cpu": 8, "done": 8, "total": 8}))
    view.summary = unjudged
    console = Console(record=True, width=300)
    console.print(view.render("r1"))
    assert f"summary: 8 items, {said};" in console.export_text()
    # every output scored some item, or none scored any: the count alone
    out = io.StringIO()
    print_summary(_summary(items=8, scored=8, metrics={"exact_match": MetricSummary(mean=0.5, n=8)}), Console(file=out))
    assert out.getvalue().rstrip().endswith("8 items, 8 scored, 0 unreadable rows"), out.getvalue()
    nothing = _summary(items=8, scored=0, metrics={"answer_accuracy": MetricSummary(mean=None, n=0, unscorable=8)})
    assert "8 items, 0 scored, 0 unreadable rows" in render_markdown(nothing)
    # an output's name is printed as it is, never read as console markup
    none = MetricSummary(mean=None, n=0, unscorable=2)
    bracketed = _summary(items=2, scored=2, metrics={"exact_match": MetricSummary(mean=1.0, n=2), "points[bold]": none})
    out = io.StringIO()
    print_summary(bracketed, Console(file=out, width=300))
    assert "2 scored (by at least one output; none by points[bold])" in out.getvalue(), out.getvalue()


def test_the_summary_table_writes_counts_with_thousands_separators_as_its_footer_does() -> None:
    metric = {"mean": 0.5, "n": 9322, "ci95": [0.49, 0.51], "errors": 1200, "unscorable": 4678, "stopped": 1500}
    out = io.StringIO()
    print_summary(_summary(items=15_200, scored=9322, metrics={"exact_match": metric}), Console(file=out, width=300))
    row = next(line for line in out.getvalue().splitlines() if "exact_match" in line)
    assert row.split("│")[3:7] == [" 9,322 ", " [0.490, 0.510] ", " 4,678 (1,500 stopped) ", "  1,200 "]


def test_a_ci_end_within_float_noise_of_0_or_1_reads_as_it() -> None:
    """Answers equal to their references (cosine 1 / (1 + 1e-10) each, a CI end a hair above 1) read
    ``1.000 [1.000000000, 1.000000000]``: nine digits that tell nothing apart. Past 1e-9 they read as 0 or 1."""
    assert ci_text([0.9999999999, 1.0000000000000001]) == "[1.000, 1.000]"
    assert ci_text([1e-12, 0.0004]) == "[0.000, 0.0004]"
    assert ci_text([0.999999998, 1.0]) == "[0.999999998, 1.000]"  # 2e-9 below 1 is still told apart
    assert ci_text([-1e-12, 0.9999]) == "[0.000, 0.9999]"  # noise below 0 is no "-0.000"; 1e-4 below 1 is told


def test_a_ci_end_that_would_read_as_0_or_1_gets_the_digits_that_tell_it_apart() -> None:
    """None of 9,686 passing read ``[0.000, 0.000]``, as if certain; Wilson's upper end is 0.0004."""
    none_passed = {"mean": 0.0, "n": 9686, "ci95": wilson_ci(0, 9686), "errors": 0, "unscorable": 0}
    all_passed = {"mean": 1.0, "n": 30_000, "ci95": wilson_ci(30_000, 30_000), "errors": 0, "unscorable": 0}
    summary = _summary(items=39_686, scored=39_686, metrics={"exact_match": none_passed, "answer_correct": all_passed})
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=300))
    rows = {
        line.split("│")[1].strip(): line.split("│")[4].strip()
        for line in out.getvalue().splitlines()
        if "n=" not in line and line.count("│") > 5
    }
    assert rows["exact_match"] == "[0.000, 0.0004]" and rows["answer_correct"] == "[0.9999, 1.000]"
    md = render_markdown(summary)
    assert "| exact_match | 0.000 | 9,686 | [0.000, 0.0004] |" in md
    assert (
        ci_text([0.49, 0.51]) == "[0.490, 0.510]" and ci_text([0.0, 0.0]) == "[0.000, 0.000]" and ci_text(None) == "-"
    )
