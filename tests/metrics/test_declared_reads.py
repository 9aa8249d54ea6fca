"""Every registered metric that declares the row fields it reads (``MetricDef.reads``) scores a row trimmed to them
(as its task message carries it: :meth:`Row.to_message` with those fields) exactly as it scores the whole row: same
scores, details, errors and unscorable reasons. The registry is iterated, so a new metric is covered when it
registers; a field read but left out of its declaration changes an output (or a judge's prompt) on these rows."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from orchestrator.datasets.rows import iter_rows
from ragscore_workers.answers import NO_RETRIEVAL
from ragscore_workers.metrics.registry import MetricDef, RunContext, all_metrics
from ragscore_workers.schemas import Queue, Row, Suite
from ragscore_workers.scoring import score_rows
from ragscore_workers.store import redis_client

from ..fakes import FakeProvider
from ..support import ROOT, RedisProcess, make_rows

NLP = ROOT / "tests" / "data" / "nlp-project"
NLP_OPTIONS = {"predictions": str(NLP / "output" / "train_extension1_output.json"),
               "corpus": str(NLP / "data" / "corpus")}  # fmt: skip
NLP_QUESTIONS = NLP / "data" / "NLP Project Data" / "train_final_jsonl.txt"
#: Metrics a test of their own covers through the queues (whole rows: they declare nothing) or that read no row.
UNDECLARED = {name for name, m in all_metrics().items() if m.reads is None or m.kind == "derived"}
DECLARED = sorted(set(all_metrics()) - UNDECLARED)
#: Rows per real dataset: enough to reach every branch the datasets hold, few enough for the judge's and the model's
#: in-process calls.
PER_DATASET = 40


def _edge_rows() -> list[dict[str, Any]]:
    """Rows reaching the branches that read fields beyond the metric's needs: sourceless and LLM-alone rows,
    rubrics, typed answers with a reference, citations, sentences, extra columns."""
    rows: list[dict[str, Any]] = make_rows(12, seed=3)
    for i, row in enumerate(rows):
        row |= {"contexts": [f"Passage {i} says {row.get('reference', 'nothing')}. [1]"], "extra_column": i,
                "metadata": {"source": "edge"}, "evidence_sentences": ["S1", f"S{i}"],
                "gold_evidence_sentences": ["S1"], "sentences": {"S1": "paris is a city", f"S{i}": "it rains"},
                "citations": [{"source_index": 1, "quote": f"Passage {i}"}],
                "rubric": {"description": "correct", "scale": {str(k): f"level {k}" for k in range(1, 6)}}}  # fmt: skip
    rows[0] |= {"contexts": [], "retrieved_doc_ids": []}  # sourceless: its retrieval found nothing
    rows[1] |= {"contexts": [], NO_RETRIEVAL: True}  # an LLM alone answered it
    rows[1].pop("retrieved_doc_ids")
    rows[2] |= {"question_type": "Yes/No", "expected": "Yes", "answer": "Yes, it is.", "reference": "Yes"}
    rows[3] |= {"question_type": "ListMany", "expected": "paris, tokyo", "answer": "paris and oslo"}
    rows[4].pop("evidence_sentences")
    rows[5] |= {"question": "List the cities?", "answer": "paris"}
    rows[6] |= {"contexts": [], "retrieved_doc_ids": []}  # sourceless, naming no evidence and quoting nothing
    for field in ("evidence_sentences", "citations"):
        rows[6].pop(field)
    rows[8]["contexts"] = [{"text": "Passage 8 [1]", "score": 0.1}, {"text": "  ", "score": 0.2}]  # a low retrieval
    rows[9] |= {"contexts": [{"text": " ", "score": 0.9}], "retrieved_doc_ids": []}  # blank contexts: sourceless,
    rows[9].pop("evidence_sentences")  # and naming no evidence by design
    rows[10]["contexts"] = [{"text": "Passage 10 [1]", "score": 0.8}, {"text": "more", "score": float("nan")}]
    rows[7] |= {"question_type": "Yes/No with Rationale", "expected": "Yes", "reference": "paris is the capital",
                "answer": "Yes: paris became the capital in 508"}  # fmt: skip
    return rows


def _rows() -> list[Row]:
    real = [row for _, row in iter_rows(NLP_QUESTIONS, "nlp-project", NLP_OPTIONS) if isinstance(row, Row)]
    socioscope = [row for _, row in iter_rows(ROOT / "examples" / "socioscope" / "corpus.json", None, None)
                  if isinstance(row, Row)]  # fmt: skip
    auto = [row for _, row in iter_rows(ROOT / "examples" / "auto-analyst" / "data.json", None, None)
            if isinstance(row, Row)]  # fmt: skip
    edge = [Row.model_validate(row) for row in _edge_rows()]
    return real[:PER_DATASET] + socioscope[:PER_DATASET] + auto[:PER_DATASET] + edge


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return _rows()


def _rating(prompt: str, nth: int) -> str:
    """A rating that follows the prompt's length: the rubric judge's as JSON, a dual judge's as a digit."""
    return json.dumps({"score": len(prompt) % 5 + 1}) if "JSON" in prompt else str(len(prompt) % 3)


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeProvider]:
    """A fake provider whose rating follows the prompt, so that a prompt missing a field would rate otherwise."""
    secret = "gsk-TEST-declared-reads"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GROQ_API_KEY", secret)
        patch.delenv("RAGSCORE_JUDGE_BASE_URL", raising=False)
        with FakeProvider(api_key=secret) as fake:
            fake.responder = _rating
            yield fake


def _outputs(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{name: r.model_dump(exclude={"ms"}) for name, r in sorted(s.items())} for s in scores]


def _score(
    mdef: MetricDef, rows: list[Row], judge: FakeProvider, client: redis.Redis
) -> tuple[list[dict[str, Any]], list[str]]:
    """The metric's outputs for ``rows`` in this process (a judge's through the real Redis and HTTP to the fake),
    and the prompts its judge got (sorted)."""
    spec: dict[str, Any] = {"name": mdef.name}
    suite: dict[str, Any] = {"name": "reads", "metrics": [spec]}
    if mdef.queue == Queue.JUDGE:
        spec["params"] = {"cache": False}
        suite["judge"] = {"provider": "groq", "model": f"fake-{uuid.uuid4().hex[:8]}", "base_url": judge.url,
                          "rpm": None, "tpm": None}  # fmt: skip
    parsed = Suite.model_validate(suite)
    params = mdef.parse_params(spec.get("params", {}))
    before = len(judge.prompts)
    scores = score_rows(rows, [(mdef, params)], RunContext(run_id=uuid.uuid4().hex[:12], suite=parsed, redis=client))
    return _outputs(scores), sorted(judge.prompts[before:])


@pytest.mark.parametrize("name", DECLARED)
def test_a_metric_scores_the_fields_it_declares_as_it_scores_the_whole_row(
    name: str, rows: list[Row], judge: FakeProvider, redis_server: RedisProcess
) -> None:
    client = redis_client(redis_server.url)
    mdef = all_metrics()[name]
    assert mdef.reads is not None
    trimmed = [Row.model_validate(row.to_message(frozenset(mdef.reads))) for row in rows]
    assert any(t.to_message() != r.to_message() for t, r in zip(trimmed, rows, strict=True))  # something was left out
    whole_scores, whole_prompts = _score(mdef, rows, judge, client)
    trimmed_scores, trimmed_prompts = _score(mdef, trimmed, judge, client)
    assert trimmed_prompts == whole_prompts
    for row, got, expected in zip(rows, trimmed_scores, whole_scores, strict=True):
        assert got == expected, row.key
    scored = [s for item in whole_scores for s in item.values() if s["score"] is not None]
    assert scored, f"{name} scored none of the rows: the comparison says nothing"
