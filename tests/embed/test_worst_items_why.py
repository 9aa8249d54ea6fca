"""The worst items of an ``answer_hallucination`` run say which answer sentences no context supports, and their best
cosine (real embed worker, real all-MiniLM-L6-v2): the why column read ``-``, so a reader of report.md could not
tell a made-up sentence from a copied one diluted by its long context without opening items.jsonl."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from orchestrator import evaluate

pytestmark = pytest.mark.integration

CONTEXT = "The Eiffel Tower in Paris was finished in 1889 for the World's Fair."
MADE_UP = "Bananas are an excellent source of potassium"


def test_worst_hallucination_items_name_their_unsupported_sentences_and_best_cosines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reference_encode: Callable[[str], np.ndarray]
) -> None:
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    question = "When was the Eiffel Tower finished?"
    copied = "The Eiffel Tower was finished in 1889."
    rows = [{"id": "copied", "question": question, "contexts": [CONTEXT], "answer": copied},
            {"id": "mixed", "question": question, "contexts": [CONTEXT], "answer": f"{copied} {MADE_UP}."}]  # fmt: skip
    suite = {"name": "why", "metrics": ["answer_hallucination"], "embedding": {"device": "cpu", "cache": False}}
    out = evaluate(rows, suite, out=tmp_path / "out").out_dir
    a, b = reference_encode(MADE_UP), reference_encode(CONTEXT)
    best = float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-10))
    why = f'unsupported (best context cosine below 0.4): "{MADE_UP}" {best:.2f}'
    md = (out / "report.md").read_text(encoding="utf-8").split("## Worst items")[1]
    [line] = [line for line in md.splitlines() if line.startswith("| 1 | mixed |")]
    assert "| 0.500 |" in line and f"| {why} |" in line, line
    html = (out / "report.html").read_text(encoding="utf-8").split('id="worst"')[1]
    assert why.replace('"', "&#34;") in html
