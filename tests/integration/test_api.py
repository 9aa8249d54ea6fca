"""``evaluate()``: the Python API, embedded, on real workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import evaluate

from ..support import make_rows

pytestmark = pytest.mark.integration


def test_items_are_read_from_the_files_when_asked_for_and_can_be_streamed(tmp_path: Path, home: Path) -> None:
    rows = make_rows(30)
    result = evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    assert "items" not in vars(result)  # nothing per item held until asked for (a large run's memory)
    streamed = result.iter_items()
    first = next(streamed)
    assert first.id == "q0" and "exact_match" in first.metrics
    assert [first.id, *(i.id for i in streamed)] == [r["id"] for r in rows]
    assert [i.model_dump() for i in result.items] == [i.model_dump() for i in result.iter_items()]
    assert result.items is result.items  # read once
    scored = [i.metrics["exact_match"].score for i in result.items]
    assert result.summary.metrics["exact_match"].mean == pytest.approx(sum(scored) / len(scored))
