"""Hostile input: every valid row is scored, every bad one is reported with its line; loaders never crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orchestrator import evaluate
from orchestrator.datasets import RowError, iter_rows
from ragscore_workers.errors import DatasetError

SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1]}}, "verbatim"]}


@pytest.mark.integration
def test_a_hostile_jsonl_scores_every_valid_row_and_reports_every_bad_one(tmp_path: Path, home: Path) -> None:
    good = {"id": "ok", "answer": "Paris", "reference": "Paris", "gold_doc_id": "d1", "retrieved_doc_ids": ["d1"]}
    lines = [
        json.dumps(good).encode(),  # 1
        b'{"id": "broken", "answer": ',  # 2 malformed JSON
        json.dumps({"id": "typed", "answer": ["not", "text"]}).encode(),  # 3 wrong type
        json.dumps({"id": "no-gold", "answer": "x", "reference": "x"}).encode(),  # 4 recall unscorable
        json.dumps({"id": "huge", "answer": "a" * 10_000_000, "reference": "a"}).encode(),  # 5 10 MB answer
        b'{"id": "latin1", "answer": "caf\xe9"}',  # 6 invalid UTF-8
        b"[1, 2, 3]",  # 7 not an object
        json.dumps(
            {
                "id": "cites",
                "answer": "y",
                "contexts": ["the cat sat"],
                "citations": [{"source_index": 0, "quote": "cat sat"}],
            }
        ).encode(),  # 8 fmt: skip
    ]
    data = tmp_path / "hostile.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.warns(UserWarning, match="5 rows were unreadable and not scored: each is in "):  # evaluate() says so
        result = evaluate(data, SUITE, out=tmp_path / "out")
    assert [i.id for i in result.items] == ["ok", "no-gold", "cites"]
    failed = [json.loads(x) for x in (tmp_path / "out" / "failed_rows.jsonl").read_text().splitlines()]
    assert [(f["line"], f["error"].split(" ")[0]) for f in failed] == [
        (2, "invalid"), (3, "answer:"), (5, "answer"), (6, "invalid"), (7, "expected"),
    ]  # fmt: skip
    assert "over the limit of 1,000,000" in failed[2]["error"] and len(failed[2]["raw"]) <= 1000
    assert result.summary.items == 3 and result.summary.failed_rows == 5
    by_id = {i.id: i.metrics for i in result.items}
    assert by_id["no-gold"]["recall_at_1"].score is None and by_id["no-gold"]["exact_match"].score == 1.0
    assert by_id["no-gold"]["recall_at_1"].details["reason"] == "no gold_doc_id"
    assert by_id["cites"]["verbatim"].score == 1.0 and by_id["ok"]["verbatim"].score is None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=200), max_size=12))
@example(lines=[b"PAR1", b"PAR1"])  # Parquet's magic at both ends: a random draw found it once
def test_jsonl_loader_never_raises_on_arbitrary_bytes(tmp_path: Path, lines: list[bytes]) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines))
    data = path.read_bytes()
    # gzip (not a whole stream), zip, UTF-16, Arrow (file and stream)
    refused = (b"\x1f\x8b", b"PK\x03\x04", b"\xff\xfe", b"\xfe\xff", b"ARROW1", b"\xff\xff\xff\xff")
    parquet = len(data) >= 8 and data.startswith(b"PAR1") and data.endswith(b"PAR1")  # its magic at both ends
    if data.startswith(refused) or parquet:  # refused whole, saying what
        with pytest.raises(DatasetError, match="decompress|unzip|Parquet|UTF-16|Arrow"):
            list(iter_rows(path))
        return
    for line, row in iter_rows(path):
        assert line >= 1
        if isinstance(row, RowError):
            assert row.error and "\n" not in row.error


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from('abc,"\n\r\\{}[]:é'), max_size=300))
def test_csv_loader_never_raises_on_arbitrary_text(tmp_path: Path, body: str) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_text("id,answer,reference,retrieved_doc_ids\n" + body, encoding="utf-8")
    lines = [line for line, _ in iter_rows(path)]
    assert lines == sorted(lines) and all(n >= 2 for n in lines)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                    max_leaves=20))  # fmt: skip
def test_json_loader_rejects_or_reads_any_json_value(tmp_path: Path, value: object) -> None:
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(value), encoding="utf-8")
    try:
        rows = list(iter_rows(path))
    except DatasetError:
        assert not isinstance(value, (list, dict))
        return
    assert isinstance(value, (list, dict))
    assert all(isinstance(r, RowError) or r.id for _, r in rows)


@pytest.mark.integration
def test_deeply_nested_rows_are_reported_and_the_run_scores_the_others(tmp_path: Path, home: Path) -> None:
    """A line nested past the JSON parser's stack raised RecursionError out of the loader, and a row nested past
    pydantic's 255 serialization levels raised at submit time: either stopped the whole run."""
    nested: dict[str, object] = {}
    inner = nested
    for _ in range(300):
        inner["x"] = inner = {}
    data = tmp_path / "deep.jsonl"
    data.write_text(
        json.dumps({"id": "a", "answer": "x", "reference": "x"}) + "\n"
        + "[" * 100_000 + "]" * 100_000 + "\n"  # line 2: deeper than json.loads can parse
        + json.dumps({"id": "b", "answer": "y", "reference": "y", "metadata": nested}) + "\n"  # line 3: 300 levels
        + json.dumps({"id": "c", "answer": "z", "reference": "q"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    with pytest.warns(UserWarning, match="2 rows were unreadable"):
        result = evaluate(data, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    assert [(i.id, i.metrics["exact_match"].score) for i in result.items] == [("a", 1.0), ("c", 0.0)]
    failed = [json.loads(x) for x in (tmp_path / "out" / "failed_rows.jsonl").read_text().splitlines()]
    assert [(f["line"], f["error"]) for f in failed] == [
        (2, "invalid JSON: nested too deeply (column 1)"),
        (3, "lists and objects nested more than 100 levels deep"),
    ]


@pytest.mark.parametrize("fmt", ["json", "socioscope", "auto-analyst", "eval-points"])
def test_a_json_file_nested_too_deeply_is_a_dataset_error(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(DatasetError, match="nested too deeply"):
        list(iter_rows(path, fmt))


def test_a_csv_cell_nested_too_deeply_is_a_row_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.csv"
    path.write_text('id,metadata\na,"' + "[" * 5_000 + "]" * 5_000 + '"\nb,{}\n', encoding="utf-8")
    rows = list(iter_rows(path))
    assert isinstance(rows[0][1], RowError) and rows[0][0] == 2 and "nested too deeply" in rows[0][1].error
    assert rows[1][0] == 3 and not isinstance(rows[1][1], RowError) and rows[1][1].id == "b"
