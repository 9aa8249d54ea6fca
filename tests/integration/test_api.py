"""``evaluate()``: the Python API, embedded, on real workers."""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchestrator import evaluate
from orchestrator.api import IncompleteRunWarning
from ragscore_workers.errors import ConfigError, DatasetError, DatasetWarning, ReportError
from ragscore_workers.store import RunStore

from ..support import ROOT, HookedProgress, make_rows, users_files, write_jsonl

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


def test_the_scores_per_item_are_a_dataframe_with_a_column_per_metric_output(tmp_path: Path, home: Path) -> None:
    """A notebook user's scores per item were ItemResult objects of MetricResult objects (or items.csv, whose ids
    '007' read back as 7): to_pandas() gives one row per item in input order, its fields as given, a score column
    per metric output (NaN where an item has none) and its errors."""
    import pandas as pd

    rows = [{"id": "007", "answer": "x", "reference": "x", "group": "g", "retrieved_doc_ids": ["d"],
             "gold_doc_id": "d"}, {"id": "b", "answer": "y", "reference": "z"}]  # fmt: skip
    result = evaluate(rows, {"metrics": ["exact_match", "recall_at_k"]}, out=tmp_path / "out")
    frame = result.to_pandas()
    outputs = ["exact_match", "mrr", "recall_at_1", "recall_at_5"]
    assert list(frame.columns) == ["id", "system", "group", "question_type", *sorted(result.summary.metrics), "errors"]
    assert sorted(result.summary.metrics) == outputs
    assert frame["id"].tolist() == ["007", "b"] and frame["group"].iloc[0] == "g" and pd.isna(frame["group"].iloc[1])
    assert frame["exact_match"].tolist() == [1.0, 0.0] and frame["recall_at_1"].iloc[0] == 1.0
    assert pd.isna(frame["recall_at_1"].iloc[1])  # unscorable (no gold_doc_id): no score, not 0
    assert frame["errors"].isna().all()
    assert frame["exact_match"].mean() == result.summary.metrics["exact_match"].mean


def test_an_items_errors_are_a_list_in_the_dataframe_as_in_items_jsonl(tmp_path: Path, home: Path) -> None:
    """to_pandas() joined an item's errors with ``; ``, which a message holds too (a point id ``a; b`` in one), so
    the entries could not be split back; items.jsonl and items.csv hold them as a list: so does the frame."""
    points = [{"id": "p", "type": "keyword", "params": {"keywords": ["x"]}, "depends_on": ["a; b"]}]
    rows = [{"id": "bad", "answer": "x", "checks": points},
            {"id": "fine", "answer": "x", "checks": [points[0] | {"depends_on": []}]}]  # fmt: skip
    result = evaluate(rows, {"metrics": ["checks"]}, out=tmp_path / "out")
    frame = result.to_pandas()
    errors = frame["errors"].iloc[0]
    assert errors == result.items[0].errors and len(errors) == 1 and "a; b" in errors[0], errors
    assert errors[0].startswith("checks: ") and frame["errors"].isna().tolist() == [False, True]


def test_to_pandas_without_pandas_names_the_extra_that_installs_it(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pandas is in no runtime dependency: to_pandas() without it said ``pip install pandas``, where every other
    optional package is named by its extra (``ragscore[parquet]``), which pins the version ragscore is tested with."""
    result = evaluate([{"id": "a", "answer": "x", "reference": "x"}], {"metrics": ["exact_match"]}, out=tmp_path)
    monkeypatch.setitem(sys.modules, "pandas", None)  # an install without pandas: its import fails
    with pytest.raises(ModuleNotFoundError, match=re.escape("needs pandas: pip install 'ragscore[pandas]'")):
        result.to_pandas()


def test_a_metric_output_no_item_scored_is_a_float_column_of_nan_in_the_dataframe(tmp_path: Path, home: Path) -> None:
    """A score column whose every cell was None (no row had a gold_doc_id) was of dtype object holding None, where
    the other outputs are float64 with NaN: frame.mean(), plots and comparisons of it failed or differed."""
    rows = [{"id": "001", "answer": "x", "reference": "x"}, {"id": "002", "answer": "y", "reference": "z"}]
    with pytest.warns(IncompleteRunWarning, match="no scores for mrr, recall_at_1"), pytest.warns(DatasetWarning):
        result = evaluate(rows, {"metrics": ["exact_match", "recall_at_k"]}, out=tmp_path / "out")
    frame = result.to_pandas()
    assert {str(frame[name].dtype) for name in result.summary.metrics} == {"float64"}
    assert frame["recall_at_1"].isna().all() and frame["id"].tolist() == ["001", "002"]


def test_an_evaluation_shown_in_a_notebook_is_a_few_lines_of_means_not_the_whole_summary(
    tmp_path: Path, home: Path
) -> None:
    """A notebook cell ending in ``result`` printed the dataclass repr: the whole RunSummary (every metric's ci95,
    by_group, timing, judge counters), kilobytes on one line for a suite of a few metrics."""
    rows = [{**row, "group": f"g{i % 3}"} for i, row in enumerate(make_rows(30))]
    result = evaluate(rows, {"metrics": ["exact_match", "quality_checks"]}, out=tmp_path / "out")
    shown = repr(result)
    em, qc = result.summary.metrics["exact_match"], result.summary.metrics["quality_checks"]
    assert shown == (
        f"Evaluation(run {result.summary.run_id!r}: 30 items, 30 scored; exact_match {em.mean:.3f} (n=30), "
        f"quality_checks {qc.mean:.3f} (n=30); out_dir={str(tmp_path / 'out')!r})"
    )


def test_an_evaluation_of_many_metric_outputs_shows_the_first_few_and_counts_the_rest(
    tmp_path: Path, home: Path
) -> None:
    """The repr named every output's mean: a suite of recall_at_k at ten cutoffs showed a line of 12 means, 500
    characters and more, where a notebook user wants the run at a glance (``summary.metrics`` holds them all)."""
    suite = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": list(range(1, 11))}}]}
    result = evaluate(make_rows(4), suite, out=tmp_path / "out")
    shown = repr(result)
    assert len(result.summary.metrics) == 12
    assert shown.count("(n=") == 6 and "(n=4), 6 more outputs in .summary.metrics; out_dir=" in shown, shown


def test_an_evaluation_shown_in_a_notebook_counts_each_outputs_errors(tmp_path: Path, home: Path) -> None:
    """The repr showed each output's mean and n, not its errors: a metric whose items half errored read as a
    sound mean in a notebook (``summary.metrics`` or report.md said so)."""
    points = [{"id": "p", "type": "keyword", "params": {"keywords": ["x"]}, "depends_on": ["missing"]}]
    rows = [{"id": "bad", "answer": "x", "reference": "x", "checks": points},
            {"id": "fine", "answer": "x", "reference": "x", "checks": [points[0] | {"depends_on": []}]}]  # fmt: skip
    result = evaluate(rows, {"metrics": ["exact_match", "checks"]}, out=tmp_path / "out")
    assert result.summary.metrics["checks"].errors == 1
    shown = repr(result)
    assert "checks 1.000 (n=1, 1 error), exact_match 1.000 (n=2);" in shown, shown


def test_a_dataframe_with_numpy_values_and_missing_cells_is_scored_and_bad_rows_warn(
    tmp_path: Path, home: Path
) -> None:
    """A DataFrame iterated over its column names ("no rows to score" about a temp file the user never made);
    numpy values raised json's TypeError; pandas' missing value (NaN) was read as the text "nan"; rejected rows
    were silent under the default quiet=True."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(
        {"id": ["a", "b", "c"], "answer": ["x", "nan", "y"], "reference": ["x", np.nan, "z"],
         "metadata": [{"n": np.int64(3)}, {}, {"when": pd.Timestamp("2026-11-25")}]}
    )  # fmt: skip
    result = evaluate(frame, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    em = result.summary.metrics["exact_match"]
    assert (em.n, em.unscorable, em.mean) == (2, 1, 0.5)  # the NaN reference is absent, not "nan"
    assert result.items[0].id == "a"
    with pytest.raises(TypeError, match="takes rows"):
        evaluate({"id": "a", "answer": "x"}, {"metrics": ["exact_match"]}, out=tmp_path / "one")
    with pytest.raises(TypeError, match=r"row 1 is of type int, not a dict of fields"):  # was "is a int"
        evaluate([{"id": "a", "answer": "x"}, 5], {"metrics": ["exact_match"]}, out=tmp_path / "int")
    with pytest.warns(UserWarning, match="1 row was unreadable and not scored"):
        evaluate([{"id": "a", "answer": "x"}, {"id": "b", "answer": True}], {"metrics": ["exact_match"]},
                 out=tmp_path / "bad")  # fmt: skip
    # Half an emoji (a JavaScript slice) in an answer: kept and scored as in a file (UnicodeEncodeError before)
    cut = evaluate([{"id": "a", "answer": "x \ud83d", "reference": "x"}], {"metrics": ["exact_match"]},
                   out=tmp_path / "cut")  # fmt: skip
    assert cut.summary.metrics["exact_match"].n == 1 and cut.items[0].id == "a"


def test_missing_cells_of_a_dataframe_are_written_as_json_null_and_read_as_absent(tmp_path: Path, home: Path) -> None:
    """pandas' missing value (float NaN), or an infinity, was written into evaluate-rows.jsonl as ``NaN`` or
    ``Infinity``: no JSON (``jq`` refused the file). And a null is absent as NaN was: a column with no value in any
    row is no column (the warning that no row has it)."""
    import numpy as np
    import pandas as pd

    from orchestrator.datasets import scan_dataset

    frame = pd.DataFrame({"id": ["a", "b"], "answer": ["x", "y"], "reference": [np.nan, np.nan], "note": [np.nan, "n"],
                          "metadata": [{"score": np.inf}, {"score": [1.0, np.nan]}]})  # fmt: skip
    out = tmp_path / "out"
    with pytest.warns(IncompleteRunWarning, match="no scores for exact_match: every item was unscorable"):
        result = evaluate(frame, {"metrics": ["exact_match"]}, out=out)
    assert result.summary.metrics["exact_match"].unscorable == 2  # no reference: as before, not "nan"

    def no_constant(name: str) -> None:
        raise AssertionError(f"{name} written into the rows' copy")

    copy = out / "evaluate-rows.jsonl"
    rows = [json.loads(line, parse_constant=no_constant) for line in copy.read_text().splitlines()]
    assert rows[0] == {"id": "a", "answer": "x", "reference": None, "metadata": {"score": None}, "note": None}
    assert rows[1]["metadata"] == {"score": [1.0, None]}
    assert "reference" not in scan_dataset(copy, "jsonl", lambda _: None).fields_seen


def test_a_parquet_dataset_is_scored_on_real_workers_and_its_bad_row_reported_by_position(
    tmp_path: Path, home: Path
) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": [f"q{i}" for i in range(40)], "answer": ["x"] * 40,
                             "reference": ["x" if i % 2 else "y" for i in range(40)],
                             "note": [b"\xff" if i == 7 else b"ok" for i in range(40)]}), path)  # fmt: skip
    with pytest.warns(UserWarning, match="1 row was unreadable and not scored: it is in "):
        result = evaluate(path, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    em = result.summary.metrics["exact_match"]
    assert (result.summary.items, em.n, em.mean) == (39, 39, pytest.approx(19 / 39))  # odd ids match; q7 is out
    (failed,) = [json.loads(line) for line in (tmp_path / "out" / "failed_rows.jsonl").read_text().splitlines()]
    assert failed["line"] == 8 and failed["error"] == "note: binary that is not UTF-8 text (byte 0)"


def test_reading_sending_and_writing_are_said_as_they_happen(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million rows took three minutes to read and send, then minutes to aggregate and write, and nothing was
    said before the first progress line nor after the last."""
    import io

    from orchestrator import runner
    from orchestrator.progress import PlainProgress

    monkeypatch.setattr(runner, "NOTE_EVERY_S", 0.0)  # say every step: the test has 300 rows, not a million
    stream = io.StringIO()
    rows = [row | {"system": "ab"[i % 2]} for i, row in enumerate(make_rows(300))]
    evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "out", progress=PlainProgress(stream))
    said = stream.getvalue()
    assert "[ragscore] reading the rows given to evaluate(): 1 row so far" in said
    # the rows and their systems, said once read (the first line, said before, knows neither)
    assert "[ragscore] 300 rows of systems a, b to score (0 unreadable); sending them to the queues" in said
    assert "item×metric outputs" in said and f"[ragscore] writing the reports to {tmp_path / 'out'}/" in said


def test_the_systems_said_once_read_are_a_few_named_then_counted() -> None:
    from orchestrator.runner import SYSTEMS_COUNTED, _of_systems

    assert _of_systems([]) == "" and _of_systems(["rag"]) == " of system rag"
    assert _of_systems([f"s{i}" for i in range(7)]) == " of systems s0, s1, s2, s3, s4 and 2 more"
    assert _of_systems([f"s{i}" for i in range(SYSTEMS_COUNTED)]) == " of at least 1,000 systems"


def test_the_send_is_said_with_its_rate_and_eta_before_the_first_scored_item(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 100,000 rows nothing but one "sending" line was on screen until every row was sent: the reading begins
    said at once, then the rows read and sent with their rate (and the send's ETA), all before the first progress
    line of scored items."""
    import io

    from orchestrator import runner
    from orchestrator.progress import PlainProgress
    from orchestrator.suite import load_suite

    monkeypatch.setattr(runner, "NOTE_EVERY_S", 0.0)  # a note at every step: 3,000 rows in 6 shards, not a million
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(3000))
    stream = io.StringIO()
    runner.run(data, load_suite({"metrics": ["exact_match"]}), tmp_path / "out", progress=PlainProgress(stream),
               shard_rows=500)  # fmt: skip
    lines = stream.getvalue().splitlines()
    scored = next(i for i, line in enumerate(lines) if "item×metric outputs" in line)
    before = [line.removeprefix("[ragscore] ") for line in lines[:scored]]
    assert before[0] == "reading d.jsonl", before
    read = [line for line in before if re.fullmatch(r"reading d\.jsonl: [\d,]+ rows? so far \([\d,]+ rows/s\)", line)]
    assert len(read) == 3000, before[:3]
    sent = [re.fullmatch(r"sent ([\d,]+) of 3,000 rows \([\d,]+ rows/s, ETA (\d+)s\)", line) for line in before
            if line.startswith("sent ")]  # fmt: skip
    assert all(sent) and [m.group(1) for m in sent if m] == ["500", "1,000", "1,500", "2,000", "2,500", "3,000"], before
    assert sent[-1] and sent[-1].group(2) == "0"  # nothing left to send


def test_rows_into_the_dir_of_an_interrupted_run_leave_its_dataset_alone(tmp_path: Path, home: Path) -> None:
    """Re-running a notebook cell after a Ctrl-C (same out=, rows edited) wrote the new rows over the interrupted
    run's dataset.jsonl before refusing the dir, so `ragscore run --resume DIR` then refused the run as changed."""
    from ragscore_workers.errors import ConfigError

    out = tmp_path / "out"
    evaluate(make_rows(5), {"metrics": ["exact_match"]}, out=out)
    (out / "summary.json").unlink()  # as a run interrupted before its reports: run.json names it, no summary
    before = (out / "evaluate-rows.jsonl").read_bytes()
    # Said as the Python API's (resume(), out=), not as the command line's alone (`ragscore run --resume`, --out):
    # a notebook's RAGSCORE_PLUGINS, set in os.environ, reaches no shell. So for a file as for rows.
    said = (
        re.escape(f"has not written its reports (interrupted?): finish it with `resume({str(out)!r})`")
        + ".* give another out="
    )
    with pytest.raises(ConfigError, match=said):
        evaluate(make_rows(5, seed=1), {"metrics": ["exact_match"]}, out=out)
    assert (out / "evaluate-rows.jsonl").read_bytes() == before
    with pytest.raises(ConfigError, match=said):
        evaluate(write_jsonl(tmp_path / "d.jsonl", make_rows(5)), {"metrics": ["exact_match"]}, out=out)


def test_rows_given_in_memory_never_overwrite_a_file_of_the_callers_in_out(tmp_path: Path, home: Path) -> None:
    """They were copied to out/dataset.jsonl: the caller's file of that name was written over, and rows read lazily
    from it were cut before they were read."""
    from ragscore_workers.errors import ConfigError

    out = tmp_path / "out"
    out.mkdir()
    mine = write_jsonl(out / "dataset.jsonl", make_rows(4))
    kept = mine.read_bytes()
    lazily = (json.loads(line) for line in mine.open())
    result = evaluate(lazily, {"metrics": ["exact_match"]}, out=out)
    assert result.summary.items == 4 and mine.read_bytes() == kept
    other = tmp_path / "other"  # a DIR no run wrote, holding a file of the copy's name
    other.mkdir()
    theirs = write_jsonl(other / "evaluate-rows.jsonl", make_rows(3)).read_bytes()
    with pytest.raises(ConfigError, match="evaluate-rows.jsonl is there and no ragscore run wrote it"):
        evaluate(make_rows(2), {"metrics": ["exact_match"]}, out=other)
    assert (other / "evaluate-rows.jsonl").read_bytes() == theirs


def test_a_row_value_json_cannot_write_names_its_row(tmp_path: Path, home: Path) -> None:
    """The TypeError for a set in a row did not say which of thousands of rows held it."""
    rows = [*make_rows(3), {"id": "odd", "answer": "x", "contexts": {"a", "b"}}]
    with pytest.raises(TypeError, match=r"row 3 \(id 'odd'\): a row value of type set cannot be written as JSON"):
        evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "out")


def test_row_values_of_sql_and_parquet_types_are_read_as_the_command_line_reads_them(
    tmp_path: Path, home: Path
) -> None:
    """A DataFrame from pd.read_parquet / pd.read_sql holds Decimals, UUIDs, durations, pandas' NA: evaluate() failed
    the whole dataset ("a row value of type Decimal cannot be written as JSON") where `ragscore run rows.parquet`
    scores it; even in a column no metric reads."""
    import datetime
    import decimal
    import uuid

    import pandas as pd

    rows = [{"id": "a", "answer": "x", "reference": "x", "price": decimal.Decimal("1.50"), "run": uuid.UUID(int=7),
             "took": pd.Timedelta(seconds=90), "raw": b"ok", "note": pd.NA, "at": datetime.time(12, 30)},
            {"id": "b", "answer": "y", "reference": "z", "price": decimal.Decimal("2"), "run": uuid.UUID(int=8),
             "took": datetime.timedelta(0), "raw": b"", "note": "fine", "at": None}]  # fmt: skip
    result = evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    assert result.summary.metrics["exact_match"].mean == 0.5 and [item.id for item in result.items] == ["a", "b"]
    copy = [json.loads(line) for line in (tmp_path / "out" / "evaluate-rows.jsonl").read_text().splitlines()]
    assert copy[0] | {"id": "a"} == {"id": "a", "answer": "x", "reference": "x", "price": 1.5,
                                     "run": "00000000-0000-0000-0000-000000000007", "took": 90.0, "raw": "ok",
                                     "note": None, "at": "12:30:00"}  # fmt: skip
    with pytest.raises(TypeError, match=r"row 0 \(id 'c'\): a row value of bytes that are no UTF-8 text"):
        evaluate([{"id": "c", "answer": "x", "raw": b"\xff"}], {"metrics": ["exact_match"]}, out=tmp_path / "bin")


def test_no_rows_given_says_so_of_the_rows_not_of_a_temporary_copy(tmp_path: Path, home: Path) -> None:
    """The error named ragscore's own copy of the rows (/tmp/ragscore-xxxx/dataset.jsonl), never given by the caller."""
    with pytest.raises(DatasetError, match=r"the rows given to evaluate\(\) are empty \(list of no row\)") as info:
        evaluate([], {"metrics": ["exact_match"]})
    assert "dataset.jsonl" not in str(info.value)
    assert not (home / "redis").exists()  # refused before anything started


def test_out_naming_a_file_is_a_config_error_for_rows_as_for_a_path(tmp_path: Path, home: Path) -> None:
    """Rows given in memory raised a bare FileExistsError where a dataset path got the ConfigError."""
    taken = tmp_path / "taken"
    taken.write_text("not a directory")
    with pytest.raises(ConfigError, match=f"Cannot write the reports to {taken}"):
        evaluate(make_rows(2), {"metrics": ["exact_match"]}, out=taken)
    assert not (home / "redis").exists()  # refused before anything started
    with pytest.raises(ConfigError, match=f"Cannot write the reports to {taken}"):
        evaluate(write_jsonl(tmp_path / "d.jsonl", make_rows(2)), {"metrics": ["exact_match"]}, out=taken)
    assert taken.read_text() == "not a directory"


def test_a_metric_whose_every_item_errored_is_said_in_a_warning(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ragscore run` exits 1 and prints the first error; evaluate() (quiet by default) returned such a run without a
    word, and a notebook showed a mean of None at best."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing")
    rows = [{"id": f"q{i}", "answer": "x", "reference": "x", "metadata": {"fail": "boom"}} for i in range(3)]
    with pytest.warns(IncompleteRunWarning, match=r"no scores for fail_on_flag: .*cannot score row q\d: boom"):
        result = evaluate(rows, {"metrics": ["exact_match", "fail_on_flag"]}, out=tmp_path / "out")
    assert result.summary.metrics["exact_match"].mean == 1.0  # returned as it is


def test_a_plugin_imported_only_in_the_calling_process_is_refused_before_the_run(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook that imported its plug-in without RAGSCORE_PLUGINS (README says to set it) started the run, whose
    workers failed it: StoreError 'Run ... failed: aggregate: ConfigError: worker ... has no metric', then resume."""
    import tests.plugins.failing  # noqa: F401  (as a notebook's cell imports it)

    monkeypatch.delenv("RAGSCORE_PLUGINS", raising=False)
    out = tmp_path / "out"
    said = "fail_on_flag: registered by tests.plugins.failing, which this process imported but the local workers will "
    said += "not: RAGSCORE_PLUGINS is unset (os.environ['RAGSCORE_PLUGINS'] = 'tests.plugins.failing' before the call)"
    with pytest.raises(ConfigError, match=re.escape(said)):
        evaluate(make_rows(3), {"metrics": ["exact_match", "fail_on_flag"]}, out=out)
    assert not (out / "run.json").exists()  # refused before a run was recorded: nothing to resume
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.failing")
    assert evaluate(make_rows(3), {"metrics": ["fail_on_flag"]}, out=out).summary.metrics["fail_on_flag"].mean == 1.0


def test_a_metric_whose_every_item_was_unscorable_is_said_in_a_warning(tmp_path: Path, home: Path) -> None:
    """`ragscore run` exits 1 for it, as for a metric whose items errored; evaluate() said nothing."""
    rows = [{"id": f"q{i}", "answer": "x", "gold_answr": "x"} for i in range(3)]
    with pytest.warns(IncompleteRunWarning, match=r"no scores for exact_match: every item was unscorable "
                                                  r"\(exact_match: 3 items, most often: no reference; "):  # fmt: skip
        result = evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    assert result.summary.metrics["exact_match"].unscorable == 3  # returned as it is


def test_a_call_that_fails_before_a_run_leaves_no_temporary_dir(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without out=, every refused call (a duplicate id, a set in a row) left a /tmp/ragscore-* copy of all the rows."""
    import tempfile

    from ragscore_workers.errors import DatasetError

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(DatasetError, match="duplicate id"):
        evaluate([*make_rows(3), make_rows(1)[0]], {"metrics": ["exact_match"]})
    with pytest.raises(TypeError, match="row 1"):
        evaluate([{"id": "a"}, {"id": "b", "contexts": {"x"}}], {"metrics": ["exact_match"]})
    assert list(tmp_path.iterdir()) == []


def _ctrl_c(run_id: str) -> None:
    """A Ctrl-C once the run is submitted (the keyboard interrupt a notebook sends)."""
    raise KeyboardInterrupt


def test_an_interrupted_call_stops_everything_and_says_where_to_resume_its_run(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without out=, an interrupted run's dir was a /tmp/ragscore-* the user never saw: nothing said where it is."""
    import os
    import subprocess
    import sys
    import tempfile
    import warnings

    import psutil

    from ..support import ROOT

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(psutil.Process().children(recursive=True))  # other tests' servers (a session's redis-server)
    with pytest.raises(KeyboardInterrupt) as info, warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        evaluate(make_rows(200), {"metrics": ["exact_match"]}, progress=HookedProgress(on_start=_ctrl_c))
    (out,) = tmp_path.iterdir()
    # A note on the exception; Python 3.10 (requires-python >= 3.10) has no add_note: a warning there.
    said = info.value.__notes__ if sys.version_info >= (3, 11) else [str(w.message) for w in warned]
    assert (
        f"finish it with `resume({str(out)!r})` (from orchestrator; `ragscore run --resume {out}` in a shell)"
        in "".join(said)
    )
    assert set(psutil.Process().children(recursive=True)) - before == set()  # the local workers are gone
    assert not (home / "redis" / "redis.sock").exists()  # and the private redis-server
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    resumed = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(out)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert len((out / "items.jsonl").read_text().splitlines()) == 200


def test_a_run_interrupted_in_a_process_that_lives_on_is_summarized_by_cancel(tmp_path: Path, home: Path) -> None:
    """``evaluate()`` interrupted in a notebook cancels its run and stops its workers, but the kernel lives on:
    ``ragscore cancel`` asked only whether the run's process runs, said its `ragscore run` would write the reports,
    and left the summary to nobody (``ragscore results`` then found none)."""
    import json
    import os
    import subprocess
    import sys

    from ..support import ROOT

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        evaluate(make_rows(50), {"metrics": ["exact_match"]}, out=out, progress=HookedProgress(on_start=_ctrl_c))
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    env = {**os.environ, "RAGSCORE_HOME": str(home), "COLUMNS": "300"}
    cli = [sys.executable, "-m", "orchestrator.cli"]
    cancelled = subprocess.run([*cli, "cancel", run_id], capture_output=True, text=True, cwd=ROOT, env=env,
                               timeout=300)  # fmt: skip
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"`ragscore results {run_id} --out DIR` writes the reports" in cancelled.stderr, cancelled.stderr
    results = subprocess.run([*cli, "results", run_id, "--out", str(tmp_path / "res")], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=300)  # fmt: skip
    assert results.returncode in (0, 1), results.stderr  # 1: a cancelled run is incomplete
    assert json.loads((tmp_path / "res" / "summary.json").read_text())["state"] == "cancelled"


def test_cancel_of_a_run_whose_process_is_gone_says_what_writes_its_reports(tmp_path: Path, home: Path) -> None:
    """cancel() of an embedded run whose evaluate() was interrupted (the kernel lives on, its workers stopped) only
    marked it cancelled and returned True: no process was left to write its summary, and nothing said so. It warns,
    naming the ``ragscore results`` that writes the reports and the resume() that finishes the run."""
    import json

    from orchestrator import cancel

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        evaluate(make_rows(50), {"metrics": ["exact_match"]}, out=out, progress=HookedProgress(on_start=_ctrl_c))
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    with pytest.warns(IncompleteRunWarning) as caught:
        cancel(out)
    (said,) = [str(w.message) for w in caught if w.category is IncompleteRunWarning]
    assert f"`ragscore results {run_id} --out {out}` in a shell writes them" in said, said
    assert f"resume({str(out)!r}) scores the rest" in said, said


def test_rows_refused_or_unreadable_are_said_as_the_rows_given_by_index_not_as_lines_of_the_copy(
    tmp_path: Path, home: Path
) -> None:
    """A duplicate id was said as "OUT/evaluate-rows.jsonl: ... on lines 1 and 2", a file the caller never wrote and
    lines where they gave rows (line N is row N-1); failed_rows.jsonl had only that line, where README and docs say a
    line (from 1) of the dataset: rows given also have their "index"."""
    rows = make_rows(3)
    with pytest.raises(DatasetError) as info:
        evaluate([*rows, rows[1]], {"metrics": ["exact_match"]}, out=tmp_path / "dup")
    assert str(info.value).startswith("the rows given to evaluate(): 1 duplicate id: id 'q1' in rows 1 and 3. ")
    assert "evaluate-rows" not in str(info.value)
    with pytest.raises(DatasetError) as info:
        evaluate([{"id": "a", "answer": False}, {"id": "b", "answer": True}], {"metrics": ["exact_match"]},
                 out=tmp_path / "none")  # fmt: skip
    said = str(info.value)
    assert said.startswith("the rows given to evaluate(): no rows to score (2 rows could not be read)"), said
    assert "\n  row 0: answer: " in said and "\n  row 1: answer: " in said and "evaluate-rows" not in said
    out = tmp_path / "bad"
    with pytest.warns(UserWarning, match="1 row was unreadable") as caught:
        evaluate([{"id": "a", "answer": "x"}, {"id": "b", "answer": True}], {"metrics": ["exact_match"]}, out=out)
    (warned,) = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert "with its index in the rows given to evaluate() (from 0; its line, from 1, is that of their copy, " \
           "evaluate-rows.jsonl) and why" in warned  # fmt: skip
    (failed,) = [json.loads(line) for line in (out / "failed_rows.jsonl").read_text().splitlines()]
    assert failed["index"] == 1 and failed["raw"].startswith('{"id": "b"')  # row 1 given (README: "index", from 0)
    assert failed["line"] == 2  # line 2 of the copy


def test_the_warning_of_unreadable_rows_names_the_first_one_and_why(tmp_path: Path, home: Path) -> None:
    """The warning said only how many rows were unreadable and the file listing them: a notebook user had to open
    failed_rows.jsonl to learn which row and why, where ``ragscore run`` prints the first one's line and reason."""
    rows = [{"id": "a", "answer": "x", "reference": "x"}, {"id": "b", "contexts": 7}, {"id": "c", "answer": True}]
    with pytest.warns(UserWarning, match="2 rows were unreadable") as caught:
        evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "given")
    (warned,) = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert warned.endswith("; the first, row 1: contexts: Input should be a valid list, got int"), warned
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    with pytest.warns(UserWarning, match="2 rows were unreadable") as caught:
        evaluate(path, {"metrics": ["exact_match"]}, out=tmp_path / "file")
    (warned,) = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert warned.endswith("; the first, line 2: contexts: Input should be a valid list, got int"), warned
    assert "with its line and why" in warned, warned
    # a JSON list's rows are on no line of their own: each is placed by its row in the list
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps(rows, indent=2))
    with pytest.warns(UserWarning, match="2 rows were unreadable") as caught:
        evaluate(listed, {"metrics": ["exact_match"]}, out=tmp_path / "list")
    (warned,) = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert "with its row in the JSON list (from 1) and why; the first, row 2 of the JSON list: contexts:" in warned
    # a JSON object's rows are keyed by id: each is placed by its key
    keyed = tmp_path / "keyed.json"
    keyed.write_text(json.dumps({row["id"]: row for row in rows}, indent=2))
    with pytest.warns(UserWarning, match="2 rows were unreadable") as caught:
        evaluate(keyed, {"metrics": ["exact_match"]}, out=tmp_path / "object")
    (warned,) = [str(w.message) for w in caught if "unreadable" in str(w.message)]
    assert 'with its key in the JSON object and why; the first, row "b" of the JSON object: contexts:' in warned


def test_rows_refused_leave_no_copy_to_block_the_next_call_into_the_same_out(tmp_path: Path, home: Path) -> None:
    """The copy of refused rows (duplicate ids) stayed in out= with no run.json, and the fixed call was refused as
    if it were a file of the caller's."""
    out, rows = tmp_path / "out", make_rows(4)
    with pytest.raises(DatasetError, match="duplicate id"):
        evaluate([*rows, rows[0]], {"metrics": ["exact_match"]}, out=out)
    assert not (out / "evaluate-rows.jsonl").exists()
    assert evaluate(rows, {"metrics": ["exact_match"]}, out=out).summary.items == 4


def test_the_suites_gates_are_checked_and_a_missed_one_is_warned_of(tmp_path: Path, home: Path) -> None:
    """evaluate() validated the suite's ``gates:`` and then never checked them: a missed gate passed in silence."""
    import warnings

    from orchestrator.api import GateFailedWarning

    rows = make_rows(8)
    suite = {"metrics": ["exact_match"], "gates": ["exact_match=0.0", "exact_match=0.999"]}
    missed = r"1 of the run's 2 gates did not hold: exact_match mean 0\.\d+ below 0\.999 "
    with pytest.warns(GateFailedWarning, match=missed):
        result = evaluate(rows, suite, out=tmp_path / "out")
    assert [g.passed for g in result.gates] == [True, False]
    assert "; 1 of 2 gates held; out_dir=" in repr(result)  # a notebook's view of it says so too
    with warnings.catch_warnings():
        warnings.simplefilter("error", GateFailedWarning)
        held = evaluate(rows, {**suite, "gates": ["exact_match=0.0"]}, out=tmp_path / "out2")
    assert [g.passed for g in held.gates] == [True]
    from orchestrator.api import _verdict
    from orchestrator.gates import GateResult

    near = GateResult(metric="exact_match", kind="mean", threshold=0.8, actual=0.79999, passed=False)
    assert _verdict(near) == "exact_match mean 0.79999 below 0.8"  # not "0.8 below 0.8"


def test_out_holding_files_of_the_callers_with_report_names_is_refused_before_the_run(
    tmp_path: Path, home: Path
) -> None:
    """out= naming a DIR where the caller keeps a summary.json and items.csv of their own (no ragscore run wrote
    them) wrote the run's reports over them: ConfigError naming them, the DIR left as it was."""
    other = tmp_path / "other"
    before = users_files(other)
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(3))
    for dataset in (make_rows(3), data):
        with pytest.raises(ConfigError, match=r"items\.csv, summary\.json.*choose another out= or remove them"):
            evaluate(dataset, {"metrics": ["exact_match"]}, out=other)
        assert {p.name: p.read_bytes() for p in other.iterdir()} == before


def test_a_link_standing_in_out_as_the_copy_of_the_rows_is_replaced_never_written_through(
    tmp_path: Path, home: Path
) -> None:
    """The copy of the rows was opened with ``open("w")``, which follows a link: one standing in out= as
    ``evaluate-rows.jsonl`` (put there by another user of a shared folder) had the rows written to its target,
    outside out=, made where it named nothing yet. The copy is written beside it and replaces the link, as every
    other file ragscore writes in DIR; what the link names is left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    nowhere = tmp_path / "elsewhere" / "made.jsonl"
    nowhere.parent.mkdir()
    (out / "evaluate-rows.jsonl").symlink_to(nowhere)  # a link to nothing yet: no file there to refuse
    assert evaluate(make_rows(3), {"metrics": ["exact_match"]}, out=out).summary.items == 3
    assert not nowhere.exists() and not (out / "evaluate-rows.jsonl").is_symlink()
    assert len((out / "evaluate-rows.jsonl").read_text().splitlines()) == 3
    theirs = tmp_path / "elsewhere" / "theirs.jsonl"  # a finished run's copy, replaced by a link to a file
    theirs.write_text("their notes\n")
    (out / "evaluate-rows.jsonl").unlink()
    (out / "evaluate-rows.jsonl").symlink_to(theirs)
    assert evaluate(make_rows(2, seed=1), {"metrics": ["exact_match"]}, out=out).summary.items == 2
    assert theirs.read_text() == "their notes\n" and not (out / "evaluate-rows.jsonl").is_symlink()


def test_a_report_that_cannot_be_written_is_a_ragscore_error_naming_the_report(tmp_path: Path, home: Path) -> None:
    """evaluate() raised the bare IsADirectoryError of os.replace, naming the hidden ``.items.csv.XXXX.partial`` it
    writes a report to first, a file the caller never sees."""
    out = tmp_path / "out"
    (out / "items.csv").mkdir(parents=True)  # items.csv cannot replace a directory
    with pytest.raises(ReportError) as info:
        evaluate(make_rows(4), {"metrics": ["exact_match"]}, out=out)
    said = str(info.value)
    assert f"Is a directory ({out / 'items.csv'})" in said and ".partial" not in said, said
    assert f"resume({str(out)!r})" in said, said


def test_what_is_probably_wrong_before_the_run_is_a_dataset_warning_a_notebook_can_filter(
    tmp_path: Path, home: Path
) -> None:
    """A field every row lacks was only logged (stderr in a notebook, past any warnings filter), where the run's
    other warnings (IncompleteRunWarning) are Python warnings."""
    import warnings

    rows = [{"id": f"q{i}", "answer": "x"} for i in range(3)]  # no reference: exact_match scores no item
    with pytest.warns(DatasetWarning, match=r"the rows given to evaluate\(\): no row has 'reference'") as caught:
        evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "out")
    (warned,) = [w for w in caught if w.category is DatasetWarning]
    assert warned.filename == __file__  # shown at the caller's line, not inside ragscore
    with pytest.warns(
        DatasetWarning, match=r"no row has a field besides its id, .*\(the wrong fmt=, or columns"
    ) as caught:
        evaluate([{"id": "a", "Reply": "x"}], {"metrics": ["exact_match"]}, out=tmp_path / "ids")  # not --format
    (incomplete,) = [str(w.message) for w in caught if w.category is IncompleteRunWarning]
    assert "the wrong fmt=, which `ragscore run DATASET --suite SUITE --dry-run` in a shell names" in incomplete
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetWarning)
        with pytest.raises(DatasetWarning, match="no row has 'reference'"):
            evaluate(rows, {"metrics": ["exact_match"]}, out=tmp_path / "strict")


def test_gold_ids_named_otherwise_than_the_retrieved_ids_are_a_dataset_warning(tmp_path: Path, home: Path) -> None:
    """`ragscore run` ends with a line saying no gold id is among the retrieved ids (`doc_12` against `12`: every row
    0, no error); evaluate() said nothing, so a notebook read recall 0 as the retriever's (a new user's audit)."""
    import warnings

    rows = [{"id": f"q{i}", "retrieved_doc_ids": [f"doc_{i}", "doc_9"], "gold_doc_id": str(i)} for i in range(3)]
    said = r"recall_at_k: no gold_doc_id of any of the 3 rows is among its retrieved_doc_ids \(mrr 0 on every row\)"
    with pytest.warns(DatasetWarning, match=said) as caught:
        result = evaluate(rows, {"metrics": ["recall_at_k"]}, out=tmp_path / "out", quiet=True)
    (warned,) = [w for w in caught if w.category is DatasetWarning]
    assert warned.filename == __file__  # at the caller's line
    assert result.summary.metrics["mrr"].mean == 0.0  # returned as it is
    named_alike = [{**row, "gold_doc_id": f"doc_{i}"} for i, row in enumerate(rows)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetWarning)
        alike = evaluate(named_alike, {"metrics": ["recall_at_k"]}, out=tmp_path / "alike", quiet=True)
    assert alike.summary.metrics["mrr"].mean == 1.0


def test_a_system_that_retrieves_nothing_by_design_is_said_once_as_information_not_as_ids_named_otherwise(
    tmp_path: Path, home: Path
) -> None:
    """The NLP project's LLM-only "strong" system retrieves nothing (``retrieved_doc_ids: []``): its mrr 0 on every
    row was said as gold ids named otherwise than the retrieved ids, in evaluate()'s DatasetWarning (a notebook's
    ``simplefilter("error")`` raised at the end of a valid run) and in both reports. Such rows are counted apart and
    said once as information; rows that did retrieve something and all missed are still warned of."""
    import warnings

    from orchestrator.api import RetrievedNothingWarning

    data = ROOT / "tests" / "data" / "nlp-project"
    with warnings.catch_warnings(), pytest.warns(RetrievedNothingWarning, match="3 rows retrieved nothing"):
        warnings.simplefilter("error", DatasetWarning)
        result = evaluate(data / "data" / "NLP Project Data" / "dev_final_jsonl.txt", {"metrics": ["recall_at_k"]},
                          fmt="nlp-project", out=tmp_path / "strong", quiet=True,
                          fmt_options={"predictions": str(data / "output" / "dev_strong_output.json"),
                                       "corpus": str(data / "data" / "corpus")})  # fmt: skip
    assert result.summary.metrics["mrr"].n == 3 and result.summary.metrics["mrr"].empty == 3
    said = "recall_at_k: 3 rows retrieved nothing (retrieved_doc_ids empty): each scores 0"
    for report in ("report.md", "report.html"):
        text = (result.out_dir / report).read_text()
        assert said in text and "no gold_doc_id" not in text, report
    rows = [
        {"id": f"q{i}", "system": "rag", "retrieved_doc_ids": [f"doc_{i}"], "gold_doc_id": str(i)} for i in range(3)
    ]
    rows += [{"id": f"q{i}", "system": "llm", "retrieved_doc_ids": [], "gold_doc_id": str(i)} for i in range(2)]
    missed = r"no gold_doc_id of any of the 3 rows that retrieved something is among its retrieved_doc_ids"
    with pytest.warns(DatasetWarning, match=missed) as caught:
        mixed = evaluate(rows, {"metrics": ["recall_at_k"]}, out=tmp_path / "mixed", quiet=True)
    assert [
        str(w.message) for w in caught if w.category is DatasetWarning and "retrieved nothing" in str(w.message)
    ] == []
    assert "recall_at_k: 2 rows (of system llm) retrieved nothing" in (mixed.out_dir / "report.md").read_text()


def test_an_llm_only_run_whose_rows_retrieved_nothing_warns_once_with_the_outputs_it_lowers(
    tmp_path: Path, home: Path
) -> None:
    """Rows that retrieved nothing (an LLM-only system's) score recall_at_k 0: ``ragscore run`` ends with a line
    saying so and the reports show it, but evaluate() said nothing, and a notebook read the zeros as the retriever's.
    One RetrievedNothingWarning (no DatasetWarning: the data is not wrong) names the count, the outputs and what to
    do."""
    import warnings

    from orchestrator.api import RetrievedNothingWarning

    rows = [{"id": f"q{i}", "question": "?", "answer": "a", "reference": "a", "retrieved_doc_ids": [],
             "gold_doc_id": str(i)} for i in range(3)]  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evaluate(rows, {"metrics": ["exact_match", "recall_at_k"]}, out=tmp_path / "out", quiet=True)
    said = [str(w.message) for w in caught if w.category is RetrievedNothingWarning]
    assert len(said) == 1, [str(w.message) for w in caught]
    assert said[0].startswith("recall_at_k: 3 rows retrieved nothing (retrieved_doc_ids empty): each scores 0, "), said
    assert "lowers the means of mrr, recall_at_1, recall_at_5" in said[0] and "leave recall_at_k out" in said[0]
    assert caught[[w.category for w in caught].index(RetrievedNothingWarning)].filename == __file__
    assert not [w for w in caught if issubclass(w.category, DatasetWarning)]


def test_refusals_name_the_parameters_of_evaluate_not_the_command_lines_options(tmp_path: Path, home: Path) -> None:
    """Said as `--out OUT would overwrite the dataset ...: give another --out`, options a notebook has not."""
    out = evaluate(make_rows(3), {"metrics": ["exact_match"]}, out=tmp_path / "out").out_dir
    with pytest.raises(ConfigError) as info:  # the earlier run's items.jsonl, scored as a dataset into its own out
        evaluate(out / "items.jsonl", {"metrics": ["exact_match"]}, out=out)
    said = str(info.value)
    assert said.startswith(f"out={str(out)!r} would overwrite the dataset") and "another out=" in said, said
    assert "--out" not in said, said
    text = tmp_path / "d.txt"
    text.write_text(json.dumps(make_rows(1)[0]) + "\n")
    with pytest.raises(DatasetError, match=r"cannot tell the format from '\.txt'; pass fmt= \(jsonl, "):
        evaluate(text, {"metrics": ["exact_match"]}, out=tmp_path / "txt")
    with pytest.raises(DatasetError) as info:
        evaluate(write_jsonl(tmp_path / "d.jsonl", make_rows(2)), {"metrics": ["exact_match"]},
                 fmt_options={"predictions": str(text)}, out=tmp_path / "pred")  # fmt: skip
    said = str(info.value)
    assert said.startswith("fmt_options={'predictions': ...} is an option of fmt='nlp-project', whose "), said
    assert "--" not in said, said


def test_a_dataset_file_in_another_format_is_said_with_the_parameters_of_evaluate(tmp_path: Path, home: Path) -> None:
    """The readers said `read it with --format csv`, `x: not an option of --format jsonl`, `--predictions PATH: not
    valid JSON` and `differs from the --system 'b'` to evaluate(), whose caller has no such options: fmt= and
    fmt_options= there."""
    suite = {"metrics": ["exact_match"]}
    rows = make_rows(2)
    as_csv = tmp_path / "csv.jsonl"  # a CSV file named .jsonl: every line's error hints at its format
    as_csv.write_text("id,question,answer\n" + "".join(f"{r['id']},q,a\n" for r in rows))
    as_jsonl = tmp_path / "jsonl.csv"
    as_jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = tmp_path / "lines.json"
    lines.write_text(as_jsonl.read_text())
    as_parquet = tmp_path / "parquet.csv"
    pq.write_table(pa.table({"id": ["a"], "answer": ["x"]}), as_parquet)
    gzipped = tmp_path / "rows.json.gz"
    gzipped.write_bytes(gzip.compress(b"[]"))
    other_system = tmp_path / "auto_analyst.json"
    other_system.write_text(json.dumps([{"question": "q", "answer": "a", "contexts": ["c"], "system": "a"}]))
    cases = [
        (as_csv, {}, "its first line reads as a CSV header row (id, question, answer): read it with fmt='csv'"),
        (as_jsonl, {}, "JSONL, not CSV? read it with fmt='jsonl' (or name it .jsonl)"),
        (lines, {}, "one JSON object per line is JSONL, read as such with fmt='jsonl' (or name it lines.jsonl)"),
        (tmp_path, {"fmt": "csv"}, "give a file (only fmt='eval-points' or fmt='hf-disk' reads a directory)"),
        (as_jsonl, {"fmt": "jsonl", "fmt_options": {"sytem": "a"}},
         "fmt_options['sytem']: not an option of fmt='jsonl' (it takes none)"),
        (as_jsonl, {"fmt": "nlp-project", "fmt_options": {"predictions": str(as_csv)}},
         f"fmt_options={{'predictions': {str(as_csv)!r}}}: not valid JSON"),
        (as_parquet, {}, "a Parquet file: read it with fmt='parquet' (or name it .parquet)"),
        (gzipped, {"fmt": "auto-analyst"}, "gzip-compressed, which fmt='auto-analyst' does not read"),
        (other_system, {"fmt": "auto-analyst", "fmt_options": {"system": "b"}},
         "element 1: system 'a' differs from fmt_options={'system': 'b'}"),
    ]  # fmt: skip
    said = []
    for n, (dataset, options, _) in enumerate(cases):
        with pytest.raises(DatasetError) as info:
            evaluate(dataset, suite, out=tmp_path / f"out{n}", **options)
        said.append(str(info.value))
    wrong = [text for text, (*_, expected) in zip(said, cases, strict=True) if expected not in text or "--" in text]
    assert not wrong, "\n".join(wrong)


def test_ids_a_target_would_repeat_are_refused_with_the_way_evaluate_scores_rows_as_given(
    tmp_path: Path, home: Path
) -> None:
    """Rows of two systems sharing an id, given to a suite whose target answers every row as its system, were
    refused with "add --no-target", an option evaluate() has not."""
    rows = [{"id": "q0", "question": "Why?", "answer": "a", "system": system} for system in ("A", "B")]
    suite = {"metrics": ["exact_match"], "target": {"system": "rag", "url": "http://127.0.0.1:9/ask"}}
    with pytest.raises(
        DatasetError, match=r"answers\.jsonl\? give evaluate\(\) the suite without its targets\)"
    ) as info:
        evaluate(rows, suite, out=tmp_path / "out")
    assert "--" not in str(info.value), info.value


def test_a_run_its_redis_lost_is_said_to_be_replaced_once(
    tmp_path: Path, home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The note "OUT named run X, which its Redis lost: this run takes its place" was logged twice: by evaluate()'s
    own check of out= and again by the run's."""
    import logging

    out = tmp_path / "out"
    out.mkdir()
    lost = {"run_id": "20260101-000000-abcdef", "mode": "embedded", "lost": "its Redis lost it while it ran"}
    (out / "run.json").write_text(json.dumps(lost))
    with caplog.at_level(logging.WARNING):
        evaluate(make_rows(3), {"metrics": ["exact_match"]}, out=out)
    said = [r.getMessage() for r in caplog.records if "this run takes its place" in r.getMessage()]
    assert said == [f"{out} named run {lost['run_id']}, which its Redis lost: this run takes its place"], said


def test_a_dataset_warning_made_an_error_leaves_no_unreadable_rows_in_the_store(
    tmp_path: Path, store: RunStore
) -> None:
    """A notebook's ``simplefilter("error", DatasetWarning)`` refuses the run before it exists, as a bad dataset
    does; the first 1,000 unreadable rows, stored as they were read, were kept under the id of that run."""
    import warnings

    from orchestrator.caller import PYTHON
    from orchestrator.runner import submit
    from orchestrator.suite import load_suite

    data = tmp_path / "d.jsonl"
    data.write_text("{\n" * 1000 + json.dumps({"id": "a", "answer": "x"}) + "\n")  # no reference: a DatasetWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetWarning)
        with pytest.raises(DatasetWarning, match="no row has 'reference'"):
            submit(data, load_suite({"metrics": ["exact_match"]}), store, run_id="refused-run", caller=PYTHON)
    assert list(store.failed_rows("refused-run")) == []


NOTEBOOK_CALLS = """
import os
import sys
import warnings

from orchestrator import evaluate, resume
from orchestrator.testing import assert_scores

rows = [{"id": "a", "answer": "x", "reference": "x"}, {"id": "b", "answer": "y", "reference": "z"}]
result = evaluate(rows, {"metrics": ["exact_match"]})
child = os.fork()
if child == 0:  # a forked child's exit (its atexit handlers run) removes none of its parent's folders
    sys.exit(0)
os.waitpid(child, 0)
print(result.out_dir, (result.out_dir / "summary.json").is_file())
print("resume()", file=sys.stderr)
resume(result.out_dir)
try:
    assert_scores(rows, {"metrics": ["exact_match"]}, ["exact_match=0.9"])
except AssertionError as failed:
    print(str(failed).partition("reports in ")[2].partition(")")[0])
with warnings.catch_warnings(record=True) as said:  # no item scorable: the warning names the reports
    warnings.simplefilter("always")
    incomplete = evaluate([{"id": "a", "answer": "x"}], {"metrics": ["exact_match"]})
print(incomplete.out_dir, [w.category.__name__ for w in said])
"""


def test_a_call_shows_progress_by_default_and_its_temporary_reports_go_when_the_process_exits(
    tmp_path: Path, home: Path
) -> None:
    """In a notebook evaluate() was silent unless given quiet=False, and each call without out= left a
    /tmp/ragscore-* behind for good: progress is shown by default, and those folders last as long as the process
    (its Evaluations read them, as a line after the run says), except those a message names: a failed
    assert_scores', an incomplete run's."""
    import os
    import subprocess

    from ..support import ROOT

    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "RAGSCORE_HOME": str(home), "TMPDIR": str(temp)}
    done = subprocess.run([sys.executable, "-c", NOTEBOOK_CALLS], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (shown, named, kept) = done.stdout.splitlines()
    out_dir = Path(shown.removesuffix(" True"))
    assert shown.endswith(" True") and out_dir.parent == temp, shown  # there while the process ran, a child exited
    assert re.search(r"\[ragscore\] \S+: 2/2 item×metric outputs \(100\.0%\)", done.stderr), done.stderr
    assert "writing the reports to" in done.stderr
    assert "sending what is missing" in done.stderr.partition("resume()")[2]  # resume() shows its progress too
    assert f"[ragscore] {out_dir} is temporary: removed when this Python process exits" in done.stderr
    kept_dir = Path(kept.partition(" ")[0])
    assert kept.endswith("'IncompleteRunWarning']") and f"{kept_dir} is temporary" not in done.stderr, kept
    assert not out_dir.exists()
    assert sorted(p.name for p in temp.iterdir()) == sorted([Path(named).name, kept_dir.name])
    assert (Path(named) / "summary.json").is_file() and (kept_dir / "items.jsonl").is_file()


#: Open files a later call may hold beyond an earlier one's: none leak, this allows for a stray socket of the GC's
#: (the tests make 4 calls more: a file kept per call exceeds it).
FD_SLACK = 2


def _open_files_after_calls(call: Callable[[int], object], calls: int = 6) -> list[int]:
    """How many files this process has open after each of ``calls`` calls (``call(n)``), what nothing refers to any
    more collected: only what is held is counted."""
    import gc
    import os

    def after(n: int) -> int:
        call(n)
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    return [after(n) for n in range(calls)]


def test_calls_in_one_process_keep_no_more_files_open_than_the_first_ones(tmp_path: Path, home: Path) -> None:
    """A notebook's dozens of calls: each kept its run's broker connection open for good (the queued-ahead script,
    cached per Redis client, held its client), a file descriptor more per call showing progress (~950 an hour into
    the test suite)."""
    import io

    from orchestrator.progress import PlainProgress

    def call(n: int) -> None:
        evaluate(make_rows(5), {"metrics": ["exact_match"]}, out=tmp_path / f"out{n}",
                 progress=PlainProgress(io.StringIO()))  # fmt: skip

    counts = _open_files_after_calls(call)
    assert counts[5] - counts[1] <= FD_SLACK, counts


def test_calls_each_on_another_broker_keep_no_more_files_open_than_the_first_ones(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Moving the Celery app to another broker (another RAGSCORE_HOME's embedded Redis, a cluster then the embedded
    mode) left kombu's pools of the one before open for good: 4 files a broker (each test's own RAGSCORE_HOME)."""

    def call(n: int) -> None:
        monkeypatch.setenv("RAGSCORE_HOME", str(home / f"h{n}"))
        evaluate(make_rows(5), {"metrics": ["exact_match"]}, out=tmp_path / f"out{n}", quiet=True)

    counts = _open_files_after_calls(call)
    assert counts[5] - counts[1] <= FD_SLACK, counts


WARNED_MID_RUN = """
import io, json, logging, sys, threading, time, warnings

from orchestrator import evaluate
from tests.fakes import FakeProvider


class KernelStream(io.StringIO):  # a Jupyter kernel's sys.stderr (ipykernel's OutStream; ipykernel is not installed)
    pass


KernelStream.__module__ = "ipykernel.iostream"
released = threading.Event()


def held(prompt, nth):  # the judge's replies wait until the warnings were said: the run is under way meanwhile
    released.wait(120)


def warn_once_the_line_is_shown(stream):
    while "\\r[ragscore] " not in stream.getvalue():
        time.sleep(0.05)
    logging.getLogger("orchestrator.runner").warning("a logged warning")  # logging's default handler: sys.stderr
    warnings.warn("a warned warning", UserWarning)
    released.set()


warnings.simplefilter("always")
stream = sys.stderr = KernelStream()
threading.Thread(target=warn_once_the_line_is_shown, args=(stream,), daemon=True).start()
with FakeProvider(api_key="gsk-test", responder=held) as fake:
    suite = {"metrics": ["answer_accuracy"],
             "judge": {"provider": "groq", "model": "fake-mid-run", "base_url": fake.url, "rpm": None, "tpm": None}}
    evaluate([{"id": "a", "question": "q?", "answer": "x", "reference": "x"}], suite, out=sys.argv[1])
print(sys.stderr is stream, file=sys.__stdout__)
print(json.dumps(stream.getvalue()), file=sys.__stdout__)  # its \\r kept (text mode reads one as a newline)
"""


def test_a_warning_said_mid_run_in_a_notebook_starts_a_line_and_the_progress_line_goes_on_below(
    tmp_path: Path, home: Path
) -> None:
    """In a notebook the progress line is rewritten in place, never ended while the run goes on: a warning (logged,
    or warnings.warn) printed meanwhile was appended to it, ``[ragscore] r: 0/2 ... ETA ?a logged warning``."""
    import os
    import subprocess

    from ..support import ROOT

    env = {**os.environ, "RAGSCORE_HOME": str(home), "GROQ_API_KEY": "gsk-test"}
    done = subprocess.run([sys.executable, "-c", WARNED_MID_RUN, str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    restored, said = done.stdout.splitlines()
    assert restored == "True"  # the kernel's stream is sys.stderr again once the call is over
    shown = json.loads(said)
    lines = shown.split("\n")
    logged = next(i for i, line in enumerate(lines) if "a logged warning" in line)
    warned = next(i for i, line in enumerate(lines) if "UserWarning: a warned warning" in line)
    assert lines[logged] == "a logged warning", shown  # a line of its own, not the end of the progress line's
    assert "[ragscore]" not in lines[warned] and lines[logged - 1].startswith("\r[ragscore] "), shown
    assert any(line.startswith("\r[ragscore] ") and "1/1" in line for line in lines[warned:]), shown  # below them


TEMPORARY_NAMED_AS_OUT = """
import os
import sys

from orchestrator import evaluate

rows = [{"id": "a", "answer": "x", "reference": "x"}]
first = evaluate(rows, {"metrics": ["exact_match"]}, quiet=True)  # a temporary folder, removed at exit
os.chdir(first.out_dir.parent)
again = evaluate(rows, {"metrics": ["exact_match"]}, out=first.out_dir.name, quiet=True)  # named: kept
print(first.out_dir)
"""


def test_a_temporary_folder_a_later_call_names_as_out_is_kept_when_the_process_exits(
    tmp_path: Path, home: Path
) -> None:
    """A notebook user who wrote the second call's reports into the first call's folder (``out=result.out_dir``)
    lost them when the kernel exited: the folder was still registered as the first call's temporary one."""
    import os
    import subprocess

    from ..support import ROOT

    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "RAGSCORE_HOME": str(home), "TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", TEMPORARY_NAMED_AS_OUT], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out_dir = Path(done.stdout.strip())
    assert out_dir.parent == temp and (out_dir / "summary.json").is_file(), done.stdout


def test_a_run_cancelled_from_another_thread_returns_what_was_scored_and_resume_finishes_it(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python API had no cancel: a notebook could stop its run only with Ctrl-C, or from a shell's ``ragscore
    cancel``, whose start took longer than a small run (its cancel came once the run had finished). Its rows are held
    (the slow plug-in's ``until_file``) until the cancel is done: 400 exact_match rows could all be scored before the
    wait began, and the run then finished uncancelled."""
    import threading
    import warnings

    from orchestrator import cancel, resume
    from ragscore_workers.app import app

    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.slow")
    out, release = tmp_path / "out", tmp_path / "release"
    rows = [{"id": f"q{i}", "answer": "a", "metadata": {"sleep_ms": 120_000, "until_file": str(release)}}
            for i in range(40)]  # fmt: skip
    answers: list[bool] = []

    def cancel_from_another_thread(run_id: str) -> None:
        sending = app._local  # what the run's thread sends with: cancel() pointed the app at database 0 and back
        thread = threading.Thread(target=lambda: answers.append(cancel(out)))
        thread.start()
        thread.join()
        release.touch()  # the rows taken before the cancel end now; the others are skipped
        assert app._local is sending, "cancel() re-pointed the Celery app the run sends its work with"

    said = rf"was cancelled.*\(reports in {re.escape(str(out))}; resume\({re.escape(repr(str(out)))}\) scores what"
    with pytest.warns(IncompleteRunWarning, match=said):
        result = evaluate(rows, {"metrics": ["slow_exact"], "chunk_size": {"cpu": 1}}, out=out,
                          progress=HookedProgress(on_start=cancel_from_another_thread))  # fmt: skip
    assert answers == [True]
    assert result.summary.state == "cancelled"
    assert result.summary.metrics["slow_exact"].stopped > 0  # its remaining tasks were skipped
    assert cancel(out) is False  # it had ended
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteRunWarning)
        finished = resume(out, quiet=True)
    summary = finished.summary.metrics["slow_exact"]
    assert (summary.stopped, summary.n + summary.unscorable) == (0, 40)


def test_cancel_of_a_dir_no_run_was_recorded_in_is_a_config_error_naming_cancel(tmp_path: Path, home: Path) -> None:
    from orchestrator import cancel

    with pytest.raises(ConfigError, match=r"run\.json not found or unreadable: cancel\(\) takes the out dir"):
        cancel(tmp_path)
