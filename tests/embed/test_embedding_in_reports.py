"""What report.md and report.html say of an embedding run (real embed worker, real all-MiniLM-L6-v2): the worst
``answer_hallucination`` items name the answer sentences no context supports, with their best cosine (the why column
read ``-``, so a made-up sentence and a copied one diluted by its long context looked alike without items.jsonl), and
both reports say what the embed workers did."""

from __future__ import annotations

import re
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


def test_report_md_and_report_html_say_alike_what_the_embed_workers_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report.md had no word of the embedding work (the terminal's line under the table was lost with the terminal),
    and report.html showed the devices as a Python dict: ``{'cpu fp32': 1}``. Both say the same: the suite's model
    settings, then the counters."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    rows = [{"id": "a", "answer": "Paris is in France.", "reference": "Paris is the capital of France."}]
    suite = {"name": "said", "metrics": ["answer_correctness"], "embedding": {"device": "cpu", "cache": False}}
    out = evaluate(rows, suite, out=tmp_path / "out").out_dir
    md = (out / "report.md").read_text(encoding="utf-8").split("## Embeddings\n\n")[1].split("\n\n## ")[0]
    facts, head, _, values = md.splitlines()[0], *md.split("\n\n")[1].splitlines()
    names, counts = head.strip("| ").split(" | "), values.strip("| ").split(" | ")
    said = dict(zip(names, counts, strict=True))
    assert facts.startswith("model all-MiniLM-L6-v2 · device cpu"), md
    assert said["devices"] == "cpu fp32 ×1" and said["encoded"] == "2" and said["cache_hits"] == "0", said
    html = (out / "report.html").read_text(encoding="utf-8").split('id="embedding"')[1].split("<h2")[0]
    assert "{" not in html, html
    assert re.findall(r"<th>([^<]*)</th>", html) == names and re.findall(r"<td>([^<]*)</td>", html) == counts, html
    spans = re.findall(r"<span>(\w+) <b>([^<]*)</b></span>", html)
    assert spans == [tuple(f.split(" ", 1)) for f in facts.split(" · ")], html
