"""Scoring task messages carry only the row fields their metrics read (``MetricDef.reads``), on a real redis-server
with real worker processes: the messages as Redis holds them, the scores against the same rows scored whole."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import redis

from orchestrator.api import evaluate
from orchestrator.datasets.rows import iter_rows
from orchestrator.runner import connect, submit
from orchestrator.suite import load_suite
from ragscore_workers.answers import LEGACY_TARGET_ERROR
from ragscore_workers.metrics.registry import RunContext
from ragscore_workers.schemas import TEXT_LEFT_OUT, Row, item_key
from ragscore_workers.scoring import score_rows

from ..support import ROOT, RedisProcess, make_rows, write_jsonl

pytestmark = pytest.mark.integration

NLP = ROOT / "tests" / "data" / "nlp-project"
#: The train split with the recorded "rag" system's outputs: contexts, retrieved ids, evidence sentences, sentences.
NLP_OPTIONS = {"predictions": str(NLP / "output" / "train_extension1_output.json"),
               "corpus": str(NLP / "data" / "corpus")}  # fmt: skip
NLP_QUESTIONS = NLP / "data" / "NLP Project Data" / "train_final_jsonl.txt"


def _rich_rows(n: int) -> list[dict[str, Any]]:
    """QA rows that also carry long contexts, evidence ids, metadata and an extra column."""
    rows = make_rows(n, seed=5)
    for row in rows:
        row |= {"contexts": [f"A long passage about {row['id']}. " * 20], "evidence_sentences": ["S1"],
                "metadata": {"source": "test"}, "extra_column": "kept only for whole rows"}  # fmt: skip
    return rows


def _scores_and_reasons(metrics: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """An items.jsonl item's ``metrics`` as ``{output: (score, unscorable reason)}``."""
    return {name: (m["score"], m["details"].get("reason")) for name, m in metrics.items()}


def _queued_rows(url: str, queue: str) -> list[dict[str, Any]]:
    """The rows of every task message waiting on ``queue`` (Celery's Redis transport: a list of JSON envelopes whose
    base64 body is ``[args, kwargs, embed]``; a scoring task's args are run id, suite, metric names, rows)."""
    client = redis.Redis.from_url(url)
    rows: list[dict[str, Any]] = []
    for raw in client.lrange(queue, 0, -1):
        args = json.loads(base64.b64decode(json.loads(raw)["body"]))[0]
        rows += args[3]
    return rows


def _queued_after_submit(rows: list[dict[str, Any]], suite: dict[str, Any], tmp_path: Path) -> dict[str, list[Any]]:
    """The rows of the cpu and embed queues' task messages once ``rows`` are submitted with no worker to take them:
    every message waits in a fresh Redis."""
    dataset = write_jsonl(tmp_path / "d.jsonl", rows)
    server = RedisProcess(tmp_path / "redis").start()
    try:
        submit(dataset, load_suite(suite), connect(server.url, sends=True), broker=server.url)
        return {queue: _queued_rows(server.url, queue) for queue in ("cpu", "embed")}
    finally:
        server.stop()


def test_each_queues_task_messages_carry_only_the_fields_its_metrics_read(tmp_path: Path) -> None:
    """Every queue got the whole row (``Row.to_message``): the cpu queue's token metrics the contexts only embedding
    metrics read, the embed queue the answers and references. Submitted with no worker, the messages wait in Redis."""
    suite = {"name": "fields", "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}},
                                           "context_relevance"]}  # fmt: skip
    cpu, embed = _queued_after_submit(_rich_rows(40), suite, tmp_path).values()
    assert len(cpu) == len(embed) == 40
    kept = {"id", "question", "group", "question_type", "metadata"}  # the item's names and meta: in every message
    assert {field for row in cpu for field in row} == kept | {"answer", "reference", "retrieved_doc_ids", "gold_doc_id"}
    assert {field for row in embed for field in row} == kept | {"contexts"}


def test_metrics_that_only_ask_whether_contexts_exist_are_sent_them_without_their_text(tmp_path: Path) -> None:
    """``quality_checks``, ``citation`` and ``evidence_overlap`` read of the contexts only whether one has text and
    their scores (``CONTEXTS_WITHOUT_TEXT``), yet were sent every context's text: each context now comes with its score
    and a placeholder for a text (none for a blank one), while a metric that reads the text still gets it whole."""
    rows = _rich_rows(20)
    for i, row in enumerate(rows):
        row["contexts"] = [{"text": f"A long passage about {row['id']}. " * 20, "score": i / 20}, {"text": "  "}]
    suite = {"name": "fields", "metrics": ["quality_checks", "citation", "evidence_overlap", "context_relevance"]}
    cpu, embed = _queued_after_submit(rows, suite, tmp_path).values()
    assert [row["contexts"] for row in cpu] == [
        [{"text": TEXT_LEFT_OUT, "score": i / 20}, {"text": ""}] for i in range(20)
    ]
    assert [row["contexts"] for row in embed] == [row["contexts"] for row in rows]


@pytest.mark.parametrize("other", ["verbatim", "checks"])
def test_contexts_sent_with_a_metric_that_reads_their_text_or_declares_nothing_keep_it(
    other: str, tmp_path: Path
) -> None:
    """``quality_checks`` shares the cpu queue's messages with ``verbatim`` (which reads the contexts' text) or
    ``checks`` (which declares nothing: the whole row): those messages carry every context's text, never the
    placeholder, which ``verbatim`` would find no quote in."""
    rows = _rich_rows(6)
    cpu = _queued_after_submit(rows, {"metrics": ["quality_checks", other]}, tmp_path)["cpu"]
    assert [row["contexts"] for row in cpu] == [[{"text": row["contexts"][0]}] for row in rows]


def test_a_submission_cuts_its_shards_by_the_messages_not_by_the_whole_rows(tmp_path: Path) -> None:
    """Rows whose long contexts no metric of the suite reads are sent without them: their shards are not cut short by
    the contexts' bytes (``shard_bytes``: 20 whole rows), the run records the ``shard_rows`` given."""
    rows = _rich_rows(60)
    whole = len(Row.model_validate(rows[0]).model_dump_json(exclude_none=True))
    server = RedisProcess(tmp_path / "redis").start()
    try:
        store = connect(server.url, sends=True)
        sub = submit(write_jsonl(tmp_path / "d.jsonl", rows), load_suite({"metrics": ["exact_match"]}), store,
                     broker=server.url, shard_rows=50, shard_bytes=20 * whole)  # fmt: skip
        assert (int(store.meta(sub.run_id)["shard_rows"]), sub.shards) == (50, 2)
    finally:
        server.stop()


def test_an_undeclared_plugin_metric_still_gets_the_whole_row(tmp_path: Path, home: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A plug-in written before ``reads`` (it declares nothing) reads what it likes of the row: its messages carry
    every field, the columns no built-in metric reads too."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.row_fields")
    rows = _rich_rows(6)
    result = evaluate(rows, {"metrics": ["row_fields"]}, out=tmp_path / "out", quiet=True)
    assert result.summary.metrics["row_fields"].n == 6
    with (tmp_path / "out" / "items.jsonl").open(encoding="utf-8") as fh:
        received = [json.loads(line)["metrics"]["row_fields"]["details"]["fields"] for line in fh]
    assert received == [sorted(Row.model_validate(row).to_message()) for row in rows]
    assert all("contexts" in fields and "extra_column" in fields for fields in received)


@pytest.mark.parametrize(
    ("dataset", "fmt", "options", "metrics"),
    [
        (NLP_QUESTIONS, "nlp-project", NLP_OPTIONS,
         [{"name": "recall_at_k", "params": {"k": [1, 5]}}, "citation", "evidence_overlap", "quality_checks",
          "exact_match"]),
        (ROOT / "examples" / "socioscope" / "corpus.json", None, None,
         ["typed_answer", "verbatim", "quality_checks", "context_relevance"]),
    ],
    ids=["nlp-project", "socioscope"],
)  # fmt: skip
def test_scores_of_trimmed_messages_equal_those_of_whole_rows_on_real_data(
    dataset: Path, fmt: str | None, options: dict[str, str] | None, metrics: list[Any], tmp_path: Path, home: Path
) -> None:
    """Real datasets (the NLP project's train split with its "rag" system's outputs; the Socioscope example's
    transcripts, contexts and quotes), scored through real workers from trimmed messages, score as their whole rows
    do in this process, each unscorable item for the same reason: a field a metric reads but does not declare would
    change one."""
    suite = {"name": "real", "metrics": metrics}
    evaluate(dataset, suite, fmt=fmt, fmt_options=options, out=tmp_path / "out", quiet=True)
    resolved = load_suite(suite)
    rows = [row for _, row in iter_rows(dataset, fmt, options) if isinstance(row, Row)]
    whole = score_rows(rows, resolved.scoring, RunContext(run_id="whole", suite=resolved.suite))
    expected = {row.key: {name: (pytest.approx(r.score), r.details.get("reason")) for name, r in scores.items()}
                for row, scores in zip(rows, whole, strict=True)}  # fmt: skip
    with (tmp_path / "out" / "items.jsonl").open(encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh]
    got = {item_key(item["system"], item["id"]): _scores_and_reasons(item["metrics"]) for item in items}
    assert len(rows) > 0 and got == expected


def test_an_answered_row_with_an_older_versions_target_error_in_its_metadata_is_scored_on_every_queue(
    tmp_path: Path, home: Path
) -> None:
    """An older version marked a target's failure in ``metadata`` (``target_error``), read only where the row has no
    answer: a worker tells it from the row's ``answer``, so a message for metrics that do not read the answer
    (recall_at_k) carries it all the same, else the answered row is failed as unanswered."""
    rows = make_rows(6, seed=2)
    for row in rows:
        row |= {"gold_doc_id": row["retrieved_doc_ids"][0], "metadata": {LEGACY_TARGET_ERROR: "timeout, retried"}}
    result = evaluate(rows, {"metrics": [{"name": "recall_at_k", "params": {"k": [1]}}]}, out=tmp_path / "out",
                      quiet=True)  # fmt: skip
    assert result.summary.metrics["recall_at_1"].n == 6 and result.summary.metrics["recall_at_1"].mean == 1.0
