"""``ragscore compare`` says which differences are clear, on real runs (a real Redis and two real cpu workers): one
metric differs clearly, others a little or not at all, and some items were scored by one run only."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from orchestrator import evaluate

from ..support import ROOT

pytestmark = pytest.mark.integration

#: Questions both runs hold; A alone holds ``ONLY_A`` more, B alone ``ONLY_B`` more.
N, ONLY_A, ONLY_B = 60, 2, 3
#: exact_match: B right where A was wrong on 20 questions, wrong where A was right on 2: clearly better.
EM_GAINS, EM_LOSSES = range(30, 50), (0, 1)
#: recall_at_1: B finds the gold document first on 3 more questions, on 2 fewer: a difference, but no clear one.
R1_GAINS, R1_LOSSES = (1, 3, 5), (0, 2)
SUITE = {"name": "verdicts", "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}]}


def _row(system: str, i: int) -> dict[str, Any]:
    b = system == "B"
    right = (i < 30) != (b and (i in EM_GAINS or i in EM_LOSSES))
    first = (i % 2 == 0) != (b and (i in R1_GAINS or i in R1_LOSSES))
    gold = f"doc-{i}"
    return {"id": f"q{i:03d}", "system": system, "question": f"Where is {i}?", "reference": f"city {i}",
            "answer": f"city {i}" if right else "elsewhere", "gold_doc_id": gold,
            "retrieved_doc_ids": [gold, "doc-x"] if first else ["doc-x", gold]}  # fmt: skip


def _rows(system: str) -> list[dict[str, Any]]:
    extra = range(N, N + ONLY_A) if system == "A" else range(N + ONLY_A, N + ONLY_A + ONLY_B)
    return [_row(system, i) for i in (*range(N), *extra)]


@pytest.fixture(scope="module")
def compared(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``ragscore compare A B``: its console (200 columns), compare.md and compare.html."""
    root = tmp_path_factory.mktemp("verdicts")
    runs = [evaluate(_rows(s), SUITE, broker=cluster, out=root / s).out_dir for s in ("A", "B")]
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "compare", *map(str, runs), "--out", str(root / "cmp")],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    return {"console": shown.stdout, "md": (root / "cmp" / "compare.md").read_text(encoding="utf-8"),
            "html": (root / "cmp" / "compare.html").read_text(encoding="utf-8")}  # fmt: skip


def _md_row(md: str, metric: str) -> list[str]:
    (line,) = [line for line in md.splitlines() if line.startswith(f"| {metric} | B |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_compare_md_marks_the_clear_difference_and_only_it(compared: dict[str, str]) -> None:
    header = next(line for line in compared["md"].splitlines() if line.startswith("| metric | system | shared |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    em = dict(zip(columns, _md_row(compared["md"], "exact_match"), strict=True))
    r1 = dict(zip(columns, _md_row(compared["md"], "recall_at_1"), strict=True))
    r5 = dict(zip(columns, _md_row(compared["md"], "recall_at_5"), strict=True))
    assert em["difference"] == f"{(len(EM_GAINS) - len(EM_LOSSES)) / N:+.3f}" and em["verdict"] == "better"
    low, high = (float(end) for end in em["95% CI"].strip("[]").split(","))
    assert 0 < low < high
    # B's recall@1 is higher, yet its interval holds 0: a mark that read the difference's sign would say better
    assert r1["difference"] == f"{(len(R1_GAINS) - len(R1_LOSSES)) / N:+.3f}" and r1["difference"] != "+0.000"
    low, high = (float(end) for end in r1["95% CI"].strip("[]").split(","))
    assert low < 0 < high and r1["verdict"] == "no clear difference"
    assert r5["difference"] == "+0.000" and r5["verdict"] == "no clear difference"
    for row in (em, r1, r5):  # n paired, and the items only one run scored, apart
        assert row["shared"] == f"{N}" and row["only one scored (baseline / system)"] == f"{ONLY_A} / {ONLY_B}"
    assert "no correction for testing several" in compared["md"]


def test_the_console_and_compare_html_give_each_metric_the_verdict_compare_md_gives(compared: dict[str, str]) -> None:
    verdicts = {m: _md_row(compared["md"], m)[8] for m in ("exact_match", "recall_at_1", "recall_at_5", "mrr")}
    assert verdicts["exact_match"] == "better" and verdicts["recall_at_1"] == "no clear difference"
    console = [" ".join(line.split()) for line in compared["console"].splitlines()]
    html = " ".join(compared["html"].split())
    for metric, said in verdicts.items():
        (row,) = [line for line in console if line.startswith(f"{metric} ")]
        assert said in row, row
        cells = html.split(f'<td class="l">{metric}</td><td class="l">B</td><td>{N}</td>', 1)[1].split("</tr>", 1)[0]
        assert f">{said}</td>" in cells and f"<td>{ONLY_A} / {ONLY_B}</td>" in cells
    said = " ".join(compared["console"].split())
    # each output has the same items unpaired: named together, the counts said once
    assert f"not paired, so not in n (scored by one system only): exact_match, mrr, recall_at_1, recall_at_5: " \
           f"{ONLY_A} of A only, {ONLY_B} of B only" in said  # fmt: skip
