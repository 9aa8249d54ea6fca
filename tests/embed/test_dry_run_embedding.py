"""``ragscore run --dry-run`` of embedding metrics: how many distinct texts a run would encode, those the embedding
cache holds apart (real Redis, vectors cached by the real all-MiniLM-L6-v2), and the time that takes at the documented
throughput assumption, said as one. It said nothing of the embedding work at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.estimate import (
    ASSUMED_ENCODE_WORDS_PER_S,
    ASSUMED_FILLED_WORDS,
    ASSUMED_SENTENCE_WORDS,
    estimate_run,
)
from orchestrator.progress import fmt_duration
from orchestrator.suite import load_suite
from ragscore_workers._embedding_cache import note_key
from ragscore_workers.embedding import REDIS_CACHE_TTL_S, clear_memory_cache, embed, get_encoder, known_namespace
from ragscore_workers.metrics.embedding_metrics import texts_needed
from ragscore_workers.schemas import EmbeddingConfig, Row
from ragscore_workers.store import redis_client

from ..support import ROOT, RedisProcess, write_jsonl

SHARED = "Paris is the capital and the largest city of France."
ROWS = [{"id": f"q{i}", "question": f"What is fact {i}?", "answer": f"fact {i} is an answer",
         "reference": f"fact {i} is the reference", "contexts": [SHARED, f"context {i} of its own"]}
        for i in range(6)]  # fmt: skip
#: A context longer than the model reads (254 pieces): a run encodes, and caches, its windows, not it whole.
LONG = " ".join(f"Sentence {i} is about the rivers, the hills and the old towns of France." for i in range(40))
SUITE = {"name": "embed-dry", "metrics": ["answer_correctness", "context_relevance"], "embedding": {"device": "cpu"}}


def _distinct() -> list[str]:
    """Every distinct text the suite's metrics embed for ROWS (each context whole)."""
    texts = [t for r in ROWS for t in (r["answer"], r["reference"], r["question"], *r["contexts"])]
    return list(dict.fromkeys(texts))


def _dry_run_said(
    tmp_path: Path,
    data: Path,
    redis_server: RedisProcess | None,
    home: Path,
    suite: dict[str, object] = SUITE,
    *args: str,
) -> str:
    """What ``ragscore run --dry-run`` of ``suite`` over ``data`` (a cluster's run on ``redis_server``; None: an
    embedded run) with ``args`` prints, on one line."""
    (tmp_path / "s.json").write_text(json.dumps(suite))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "200"}
    env.pop("RAGSCORE_BROKER_URL", None)
    broker = ["--broker", redis_server.url] if redis_server else []
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run",
         *broker, *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


def test_the_dry_run_counts_the_texts_to_encode_apart_from_those_cached_and_their_assumed_time(
    tmp_path: Path, redis_server: RedisProcess, home: Path
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    client = redis_client(redis_server.url)
    cached = [r["answer"] for r in ROWS[:3]] + [SHARED]  # a run before encoded these
    clear_memory_cache()
    embed(cached, EmbeddingConfig(device="cpu"), client)
    distinct = _distinct()
    est = estimate_run(data, load_suite(SUITE), redis=client)
    assert est.embed is not None and est.embed.cache_checked
    assert (est.embed.texts, est.embed.cached, est.embed.to_encode) == (len(distinct), 4, len(distinct) - 4)
    assert est.embed.words == sum(len(t.split()) for t in distinct if t not in cached)
    assert est.embed.assumed_s == est.embed.words / ASSUMED_ENCODE_WORDS_PER_S
    uncached = estimate_run(data, load_suite(SUITE))  # no store: nothing looked up, every text to encode
    assert uncached.embed is not None and not uncached.embed.cache_checked and uncached.embed.to_encode == len(distinct)
    assert estimate_run(data, load_suite({**SUITE, "metrics": ["exact_match"]})).embed is None

    said = _dry_run_said(tmp_path, data, redis_server, home)
    line = (f"embedding (all-MiniLM-L6-v2): {len(distinct)} distinct texts, 4 in the embedding cache, "
            f"{len(distinct) - 4} to encode: under a second (assumed: 5,000 words/s, no earlier run of "
            "all-MiniLM-L6-v2 on device cpu measured one")  # fmt: skip
    assert line in said, said


def test_a_dry_run_after_a_run_looks_up_a_long_contexts_windows_as_the_run_cached_them(
    tmp_path: Path, redis_server: RedisProcess, home: Path
) -> None:
    """A run caches a long context's windows, not it whole: the dry run of a re-run looked the whole context up, found
    it missing and said it would encode it, plus the model's load. With the model's note in the cache it cuts the
    windows as the run does (no model loaded); without one it counts the context whole, as before, and says why."""
    rows = [{"id": "long", "question": "Which rivers cross France?", "answer": "The Seine and the Loire.",
             "reference": "the Seine, the Loire", "contexts": [LONG, "A short context about rivers."]}]  # fmt: skip
    data = write_jsonl(tmp_path / "long.jsonl", rows)
    client = redis_client(redis_server.url)
    config, names = EmbeddingConfig(device="cpu"), SUITE["metrics"]
    clear_memory_cache()
    encoder = get_encoder(config, None, client)
    texts = texts_needed([Row.model_validate(r) for r in rows], names, encoder)  # what a run of them embeds
    assert LONG not in texts
    embed(texts, config, client)
    est = estimate_run(data, load_suite(SUITE), redis=client)
    assert est.embed is not None
    assert (est.embed.texts, est.embed.cached, est.embed.to_encode) == (len(set(texts)), len(set(texts)), 0)
    assert est.embed.windowed
    said = _dry_run_said(tmp_path, data, redis_server, home)
    assert f"{len(set(texts))} in the embedding cache, 0 to encode;" in said, said
    assert "plus the model's load" not in said and "counted as the overlapping windows a run encodes" in said, said

    note = note_key(known_namespace(config) or "")
    kept = client.get(note)
    client.delete(note)
    try:
        said = _dry_run_said(tmp_path, data, redis_server, home)
    finally:
        client.set(note, kept or "", ex=REDIS_CACHE_TTL_S)
    assert "1 to encode" in said and "plus the model's load" in said, said
    why = "the embedding cache holds no note of the model as installed here to cut them: a run writes one"
    assert why in said, said


def test_the_dry_runs_assumed_encoding_time_is_its_words_over_the_assumed_throughput() -> None:
    """300,000 words at 5,000 words/s: a minute, said as an assumption, with the model's load on top."""
    from orchestrator.estimate import EmbedTally, Estimate
    from orchestrator.reports.console import embed_estimate

    tally = EmbedTally(texts=12_000, words=300_000)
    said = embed_estimate(Estimate(embed=tally), load_suite(SUITE).suite, load=(0.0, 2))  # not this host's load
    assert said.startswith("embedding (all-MiniLM-L6-v2): 12,000 distinct texts, 12,000 to encode: about 1m00s "
                           "(assumed: 5,000 words/s, no earlier run"), said  # fmt: skip
    assert "the embedding cache was not looked up" in said and "plus the model's load" in said, said
    assert "all-MiniLM-L6-v2's" not in said, said
    larger = load_suite({**SUITE, "embedding": {"model": "BAAI/bge-large-en-v1.5"}}).suite
    said = embed_estimate(Estimate(embed=tally), larger, load=(0.0, 2))
    assert "the assumed words/s are all-MiniLM-L6-v2's: BAAI/bge-large-en-v1.5 is slower if it is larger" in said, said


def test_the_texts_targets_fill_are_counted_per_item_at_an_assumed_passage_length(tmp_path: Path) -> None:
    """A suite with targets: the dry run counted only the questions and references (the replies "do not exist yet"),
    none of the replies' answers and contexts a run encodes. Each item's answer and its contexts (as one text) are
    counted now, twice the texts for twice the targets, at ASSUMED_FILLED_WORDS words each, said as an assumption."""
    from orchestrator.estimate import EmbedTally
    from orchestrator.reports.console import embed_estimate

    rows = [{"id": f"q{i}", "question": f"What is fact {i}?", "reference": f"fact {i} is it"} for i in range(10)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)

    def estimated(targets: int) -> tuple[EmbedTally, str]:
        systems = [{"system": f"s{n}", "url": "http://127.0.0.1:9/ask"} for n in range(targets)]
        suite = load_suite({**SUITE, "targets": systems})
        est = estimate_run(data, suite)
        assert est.embed is not None
        return est.embed, embed_estimate(est, suite.suite, load=(0.0, 2))

    own = [t for r in rows for t in (r["question"], r["reference"])]  # the dataset's, each once
    own_s = sum(len(t.split()) for t in own) / ASSUMED_ENCODE_WORDS_PER_S
    two, said = estimated(2)
    filled = 10 * 2 * 2  # an answer and the contexts per item
    assert two.to_encode == len(own) + filled
    assert two.assumed_s == pytest.approx(own_s + filled * ASSUMED_FILLED_WORDS / ASSUMED_ENCODE_WORDS_PER_S)
    four, _ = estimated(4)
    assert four.to_encode - len(own) == 2 * filled and four.assumed_s - own_s == pytest.approx(
        2 * (two.assumed_s - own_s)
    )
    assert ("60 to encode (40 of them the targets' replies: an answer, and a reply's contexts as one text, per item; "
            f"{ASSUMED_FILLED_WORDS} words each assumed)") in said, said  # fmt: skip
    assert "(assumed: 5,000 words/s, no earlier run" in said and "more than counted" in said, said
    with_sentences = {**SUITE, "metrics": [*SUITE["metrics"], "answer_hallucination"]}  # the same contexts again
    suite = load_suite({**with_sentences, "targets": [{"system": "s0", "url": "http://127.0.0.1:9/ask"}]})
    est = estimate_run(data, suite)
    # each item's contexts once, not once a metric; its answer whole (answer_correctness) and its sentences
    # (answer_hallucination): they were not counted, a reply's answer counted as one text
    sentences = ASSUMED_FILLED_WORDS // ASSUMED_SENTENCE_WORDS
    assert est.embed is not None and est.embed.filled == 10 * (2 + sentences), est.embed
    assert est.embed.filled_sentences == 10 * sentences, est.embed
    assert est.embed.assumed_s == pytest.approx(own_s + 10 * 3 * ASSUMED_FILLED_WORDS / ASSUMED_ENCODE_WORDS_PER_S)
    said = embed_estimate(est, suite.suite, load=(0.0, 2))
    line = ("140 to encode (120 of them the targets' replies: an answer, and a reply's contexts as one text, per "
            f"item; {ASSUMED_FILLED_WORDS} words each assumed, 100 of them sentences of the answers, which "
            f"answer_hallucination embeds each ({ASSUMED_SENTENCE_WORDS} words each assumed))")  # fmt: skip
    assert line in said, said


def test_the_sentences_counted_of_a_reply_are_the_metrics_own() -> None:
    """The dry run's stand-in for a reply's answer is split by answer_hallucination's own splitter, into as many
    sentences of as many words as it assumes."""
    from orchestrator.estimate import _assumed_reply
    from ragscore_workers.metrics.embedding_metrics import answer_sentences

    sentences = answer_sentences(_assumed_reply())
    assert len(set(sentences)) == ASSUMED_FILLED_WORDS // ASSUMED_SENTENCE_WORDS, sentences
    assert {len(s.split()) for s in sentences} == {ASSUMED_SENTENCE_WORDS}, sentences


def test_the_dry_run_counts_distinct_texts_in_a_few_bytes_each() -> None:
    """A set of Python ints held ~70 bytes a distinct text (350 MB for five million): each is ~8 bytes of a sorted
    array now, the latest few in a set, and a text seen again (in the set, or merged into the array) counts once."""
    import hashlib
    import tracemalloc

    from orchestrator.estimate import _DistinctTexts

    n, batch = 1_000_000, 20_000
    digests = (hashlib.sha256(str(i).encode()).hexdigest() for i in range(n))
    seen = _DistinctTexts()
    tracemalloc.start()
    try:
        counted = 0
        for _ in range(n // batch):
            part = [next(digests) for _ in range(batch)]
            counted += len(seen.new(part + part[:100]))  # repeated within the batch
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counted == n
    assert peak / n < 40, f"{peak / n:.0f} bytes a distinct text"
    again = [hashlib.sha256(str(i).encode()).hexdigest() for i in (0, n // 2, n - 1)]  # in the array, then the set
    assert seen.new(again) == [] and len(seen.new([hashlib.sha256(b"x").hexdigest()])) == 1


def test_the_dry_run_on_a_busy_machine_says_the_encode_time_as_measured_on_busy_cores() -> None:
    """2,503 rows (4 systems as rows) on 2 cores at load ~10: the dry run said about 15 s of encoding at the assumed
    5,000 words/s, and the run's 3,715 texts took ~4 minutes (~320 words/s); 300 rows at load ~7 said 18 s and encoded
    for 200 s. A machine whose load average is over its cores adds the time ``1 + BUSY_SLOWDOWN * (load + cores) /
    cores`` times the assumed one: those loads were read while the runs encoded, and the run's encode (a thread a core)
    adds its cores to the load the dry run reads before it. One less busy adds nothing. Seen failing before: a load of 5
    before the run (7 while it encodes, measured 11 times slower) said 8 times (the load before it as if it were the
    load while it encodes)."""
    from orchestrator.estimate import EmbedTally, Estimate
    from orchestrator.reports.console import embed_estimate

    tally = EmbedTally(texts=3_715, words=75_000)  # 15 s assumed
    assert tally.busy_s(5.0, 2) == pytest.approx(10.8 * tally.assumed_s)  # 200 s for 18 s at ~7: within 1.1 of it
    assert tally.busy_s(10.0, 2) == pytest.approx(17.8 * tally.assumed_s)  # ~16 times measured at ~10 (own included)
    suite = load_suite(SUITE).suite
    busy = embed_estimate(Estimate(embed=tally), suite, load=(10.04, 2))
    assert "3,715 to encode: about 0m15s (assumed: 5,000 words/s" in busy, busy
    assert "; this machine is busy (load average 10.0 on 2 cores): about 4m28s where its embed workers run here" in (
        busy
    ), busy
    assert "busy" not in embed_estimate(Estimate(embed=tally), suite, load=(1.9, 2))


def test_the_checks_embedding_points_texts_are_counted_as_the_validator_encodes_them(tmp_path: Path) -> None:
    """The ``checks`` metric's ``embedding`` points encode the point's text (the answer, normalized) and its target
    with the suite's embed model, and the dry run counted none of them. Each counted once with the other metrics'
    texts; a point without a target (no reference, no ``params.target``), or one whose extract step finds nothing,
    encodes nothing, and a suite whose checks have no embedding point says nothing of embedding."""
    points = [{"id": "sim", "type": "embedding", "normalizers": ["lowercase"]},
              {"id": "aim", "type": "embedding", "params": {"target": "An aim of its own"}},
              {"id": "none", "type": "embedding", "extract": [{"regex": "Nowhere:(.*)", "group": 1}]},
              {"id": "kw", "type": "keyword", "params": {"keywords": ["fact"]}}]  # fmt: skip
    rows = [{"id": "a", "answer": "Fact A is an Answer", "reference": "fact a is the reference", "checks": points},
            {"id": "b", "answer": "Fact B", "checks": points[1:]}]  # fmt: skip
    data = write_jsonl(tmp_path / "c.jsonl", rows)
    checked = estimate_run(data, load_suite({"name": "c", "metrics": ["checks"]})).embed
    assert checked is not None
    texts = ["fact a is an answer", "fact a is the reference", "Fact A is an Answer", "An aim of its own", "Fact B"]
    assert (checked.texts, checked.words) == (len(texts), sum(len(t.split()) for t in texts))
    both = estimate_run(data, load_suite({"name": "c", "metrics": ["checks", "answer_correctness"]})).embed
    assert both is not None and both.texts == len(texts)  # answer_correctness's answer and reference: the same texts
    keywords = write_jsonl(tmp_path / "k.jsonl", [{**rows[0], "checks": points[3:]}])
    assert estimate_run(keywords, load_suite({"name": "c", "metrics": ["checks"]})).embed is None
    # an answer a target fills: each item's point encodes its reply (counted per item as such), not the placeholder
    asked = write_jsonl(tmp_path / "t.jsonl", [{"id": f"q{i}", "question": f"What is {i}?", "reference": f"fact {i}",
                                                "checks": points[:1]} for i in range(3)])  # fmt: skip
    target = {"system": "s0", "url": "http://127.0.0.1:9/ask"}
    filled = estimate_run(asked, load_suite({"name": "c", "metrics": ["checks"], "targets": [target]})).embed
    assert filled is not None and (filled.texts, filled.filled) == (3, 3), filled


def test_the_dry_run_of_a_checks_only_suite_looks_its_embedding_points_texts_up_in_the_cache(
    tmp_path: Path, redis_server: RedisProcess, home: Path
) -> None:
    """A suite whose only metric is ``checks`` was not looked up in the embedding cache (only the embedding metrics
    were): its dry run counted the texts of its ``embedding`` points that a run before had cached as to encode."""
    point = {"id": "sim", "type": "embedding"}
    rows = [{"id": f"q{i}", "answer": f"point {i} is checked", "reference": f"point {i} is the target",
             "checks": [point]} for i in range(3)]  # fmt: skip  # texts no other test of the file caches
    data = write_jsonl(tmp_path / "c.jsonl", rows)
    clear_memory_cache()
    embed([r["answer"] for r in rows[:2]], EmbeddingConfig(device="cpu"), redis_client(redis_server.url))
    said = _dry_run_said(tmp_path, data, redis_server, home, {**SUITE, "metrics": ["checks"]})
    assert "embedding (all-MiniLM-L6-v2): 6 distinct texts, 2 in the embedding cache, 4 to encode" in said, said


def test_an_embedded_dry_run_adds_its_embed_workers_start_and_the_models_load(
    tmp_path: Path, redis_server: RedisProcess, home: Path
) -> None:
    """An embedded run starts its local embed worker, which loads the model before its first text (~24 s measured on 2
    busy CPU cores, where the dry run said 0.2 s of encoding plus "about 5 s" of load): said, with the measured parts,
    and the least time its local judge worker's threads allow. A cluster's workers run already: its dry run adds the
    model's load alone, and no local judge worker. The dry run's caller gives the mode (its embed rate's too), not
    print_estimate guessing it from the judge threads being given."""
    from orchestrator.estimate import EMBED_MODEL_LOAD_S, EMBED_WORKER_START_S

    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    judge = {"provider": "openai", "model": "llama3.1:8b", "base_url": "http://localhost:9/v1", "rpm": None,
             "tpm": None}  # fmt: skip
    suite: dict[str, object] = {**SUITE, "metrics": ["answer_correctness", "context_relevance", "answer_accuracy"],
                               "judge": judge}  # fmt: skip
    said = _dry_run_said(tmp_path, data, None, home, suite, "--judge-threads", "1")
    start = fmt_duration(EMBED_WORKER_START_S + EMBED_MODEL_LOAD_S)
    assert (f"plus about {start} before its first text: the local embed worker's start (about "
            f"{EMBED_WORKER_START_S:.0f} s) and the model's load (about {EMBED_MODEL_LOAD_S:.0f} s), as measured on 2 "
            "laptop CPU cores at load average ~6") in said, said  # fmt: skip
    assert "with the local judge worker's 1 threads" in said, said
    cluster = _dry_run_said(tmp_path, data, redis_server, home, suite)
    assert "worker's start" not in cluster and "local judge worker" not in cluster, cluster
    assert f"plus the model's load (about {EMBED_MODEL_LOAD_S:.0f} s) where a worker has not loaded it yet" in cluster


def test_the_whole_run_is_its_slowest_part_and_longer_where_this_machine_is_busy(tmp_path: Path) -> None:
    """The whole run's time is its slowest part's, with what comes before it (an embedded run's embed worker's start
    and the model's load); where this machine is busy, the encode's busy time is its high end, and the judge's limits
    beside it are named with their time. Seen failing before: the dry run gave no whole run's time at all."""
    from orchestrator.estimate import EMBED_MODEL_LOAD_S, EMBED_WORKER_START_S
    from orchestrator.run_time import whole_run, whole_run_line

    long = " ".join(["word"] * 1_000)  # 300 answers of 1,000 words: a minute at the assumed words/s
    rows = [{**row, "id": f"{row['id']}-{n}", "answer": f"{long} {row['id']} {n}"} for n in range(50) for row in ROWS]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    resolved = load_suite({**SUITE, "metrics": ["answer_correctness", "exact_match", "answer_accuracy"],
                           "judge": {"rpm": 590, "tpm": 10_000_000}})  # fmt: skip
    estimate = estimate_run(data, resolved)
    assert estimate.embed is not None and estimate.judge_total().paid == 600
    before = EMBED_WORKER_START_S + EMBED_MODEL_LOAD_S
    idle = whole_run(estimate, resolved.suite, embedded=True, load=(0.5, 2))
    assert idle.slowest is not None and idle.slowest.name == "embed"
    assert idle.slowest.seconds == pytest.approx(estimate.embed.estimated_s + before)
    said = whole_run_line(idle)
    took = fmt_duration(estimate.embed.estimated_s + before)
    assert said.startswith(f"whole run: about {took}, bound by the embed queue: 306 texts to encode at the assumed "
                           "rate with 1 embed worker"), said  # fmt: skip
    # 599 // 590 minutes; an estimate at the assumed rate was 9 times too short on a busy host: said so, and how to
    # get a measured one (it read as sure as a measured one)
    assert ("; beside it: judge 1m00s; the embed time rests on an assumed rate, not one measured on this machine (it "
            "can be many times longer): score a few hundred rows first for a measured one; not timed: the cpu queue's "
            "300 outputs") in said, said  # fmt: skip
    assert "busy" not in said, said  # load 0.5 on 2 cores: not busy
    busy = whole_run(estimate, resolved.suite, embedded=True, load=(4.0, 2))
    assert busy.high_s == pytest.approx(estimate.embed.busy_s(4.0, 2) + before)
    high = fmt_duration(busy.high_s)
    assert f"up to {high} where this machine stays as busy as now (load average 4.0 on 2 cores" in whole_run_line(busy)


def test_the_whole_run_says_the_judge_calls_no_limit_bounds_are_not_timed(tmp_path: Path) -> None:
    """300 rows of answer_correctness and answer_accuracy at ``judge.rpm: 1000``: their 600 paid judge calls reach no
    limit, so the judge had no part, and the line said "whole run: about 25 s, bound by the embed queue" and nothing
    of them, while they go out in rounds at 1-2 s a reply. They are said not timed, with the local judge worker's
    rounds, where the line times the run and where it times nothing. Seen failing before: no "the judge's 600 calls"
    in the line."""
    from orchestrator.run_time import whole_run, whole_run_line

    rows = [{**row, "id": f"{row['id']}-{n}"} for n in range(50) for row in ROWS]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    judge = {"rpm": 1000, "tpm": 10_000_000}
    resolved = load_suite({**SUITE, "metrics": ["answer_correctness", "answer_accuracy"], "judge": judge})
    estimate = estimate_run(data, resolved)
    assert estimate.judge_total().paid == 600 and not estimate.judge_minutes(resolved.suite)
    rounds = estimate.local_rounds(32)
    assert rounds is not None and rounds > 1
    unbound = (f"; not timed: the judge's 600 calls (no judge limit bounds them: their time is the provider's "
               f"reply time, as the local judge worker's threads send them in {rounds} rounds one after "
               "another)")  # fmt: skip
    said = whole_run_line(whole_run(estimate, resolved.suite, embedded=True, load=(0.5, 2)), local_rounds=rounds)
    assert said.startswith("whole run: about ") and "bound by the embed queue" in said, said
    assert said.endswith(unbound), said
    judged = load_suite({**SUITE, "metrics": ["answer_accuracy", "exact_match"], "judge": judge})
    alone = whole_run_line(whole_run(estimate_run(data, judged), judged.suite, embedded=False))  # a cluster: no rounds
    assert alone == ("whole run: not estimated (no part of it is timed: no judge limit reached, nothing to encode); "
                     "not timed: the judge's 600 calls (no judge limit bounds them: their time is the provider's reply "
                     "time), the cpu queue's 300 outputs (a dry run does not run their metrics; they run beside the "
                     "others)"), alone  # fmt: skip
