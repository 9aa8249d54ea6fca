"""The ``ragscore`` command as a user runs it: exit codes, messages, files, and nothing left behind."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pytest
import redis

from ragscore_workers.limits import usable_cpus
from ragscore_workers.store import RunStore

from ..support import (
    ROOT,
    RedisProcess,
    WorkerProcess,
    as_background_job,
    celery_workers,
    closed_port,
    command_line,
    interrupted_once_said,
    interruptible,
    lines_until,
    make_rows,
    next_line,
    output_of,
    stop_worker_command,
    until,
    users_files,
    write_jsonl,
)

pytestmark = pytest.mark.integration


def ragscore(
    *args: str, home: Path, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGSCORE_HOME": str(home), **(env or {})}
    env.pop("RAGSCORE_BROKER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=timeout,
    )  # fmt: skip


def _suite(tmp_path: Path, suite: object) -> Path:
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(suite))
    return path


def _our_processes(home: Path) -> list[psutil.Process]:
    """Processes started for this RAGSCORE_HOME (workers and the private redis-server)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            env = proc.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if env.get("RAGSCORE_HOME") == str(home) or str(home) in cmd:
            if proc.pid != os.getpid():
                found.append(proc)
    return found


GOOD_SUITE = {"metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": [1, 5]}}]}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing_file", "Dataset not found"),
        ("empty", "no rows to score"),
        ("duplicates", "duplicate id"),
        ("unknown_metric", "Did you mean 'exact_match'"),
        ("bad_params", "Bad params for metric 'recall_at_k'"),
        ("chunk_zero", "--chunk-size expects QUEUE=N with N >= 1, got 'cpu=0'"),
        # It said "Invalid suite: chunk_size: ... unknown queue(s) 'gpu'" of a suite file that was fine.
        ("chunk_unknown_queue", "--chunk-size: unknown queue 'gpu' (known: target, cpu, embed, judge, code)"),
        ("out_is_a_file", "is a file; reports go to a directory"),
        # "To judge with another provider, set the suite's judge.provider: groq" was said of a groq judge
        ("no_judge_key", "The groq judge needs an API key: set the environment variable GROQ_API_KEY"),
        ("no_judge_key", "The suite's judge.provider chooses the judge: groq (key in GROQ_API_KEY) or openai"),
        # no reply of the judge cached: refused before the rows are read to count the calls (their duplicate ids
        # unseen), not after (a million rows read, then refused)
        ("no_judge_key_nothing_cached", "The groq judge needs an API key: set the environment variable GROQ_API_KEY"),
        ("hosted_base_url_no_key", "set the environment variable OPENAI_API_KEY (for api.groq.com; any value"),
        ("key_with_a_newline_inside", "The value of GROQ_API_KEY cannot be a key or token"),
        ("missing_corpus_dir", "evidence_overlap: corpus_dir /no/such/corpus is not a directory"),
        # a host without bubblewrap started the run and errored every code_test item (exit 1, after the other metrics)
        ("no_bubblewrap", "sandbox.backend local cannot run code on this machine"),
        ("no_bubblewrap", "apt-get install bubblewrap"),
        ("docker_without_engine", "sandbox.backend docker cannot run code on this machine"),
        ("docker_without_engine", "no Docker engine answers at unix://"),
        ("resume_with_dataset", "drop DATASET, --suite, or start a new run without --resume"),
    ],
)
def test_stop_before_submit_errors_exit_2_and_start_nothing(
    tmp_path: Path, home: Path, case: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(5))
    suite: object = GOOD_SUITE
    if case == "missing_file":
        data = tmp_path / "nope.jsonl"
    elif case == "empty":
        data.write_text("")
    elif case == "duplicates":
        write_jsonl(data, make_rows(3) + make_rows(1))
    elif case == "unknown_metric":
        suite = {"metrics": ["exact_mach"]}
    elif case == "bad_params":
        suite = {"metrics": [{"name": "recall_at_k", "params": {"k": "five"}}]}
    elif case in ("no_judge_key", "no_judge_key_nothing_cached"):
        monkeypatch.delenv("GROQ_API_KEY", raising=False)
        suite = {"metrics": ["answer_accuracy"]}
        if case == "no_judge_key_nothing_cached":
            write_jsonl(data, make_rows(3) + make_rows(1))
    elif case == "hosted_base_url_no_key":
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        suite = {"metrics": ["answer_accuracy"], "judge": {"provider": "openai",
                                                           "base_url": "https://api.groq.com/openai/v1"}}  # fmt: skip
    elif case == "missing_corpus_dir":  # every item would error: said before anything is submitted
        suite = {"metrics": ["exact_match", {"name": "evidence_overlap", "params": {"corpus_dir": "/no/such/corpus"}}]}
    elif case == "key_with_a_newline_inside":
        monkeypatch.setenv("GROQ_API_KEY", "gsk-FIRST-LINE\ngsk-SECOND-LINE")
        suite = {"metrics": ["answer_accuracy"]}
    env = None
    if case == "no_bubblewrap":  # this host's tools but bwrap: the private Redis's server still found
        write_jsonl(data, [row | {"code": "print(1)"} for row in make_rows(5)])
        suite = {"metrics": ["exact_match", {"name": "code_test", "params": {"stdout": "1"}}],
                 "sandbox": {"backend": "local"}}  # fmt: skip
        env = {"PATH": str(_tools_but_bwrap(tmp_path / "bin"))}
    elif case == "docker_without_engine":  # the suite names docker: no falling back to bubblewrap
        write_jsonl(data, [row | {"code": "print(1)"} for row in make_rows(5)])
        suite = {"metrics": ["exact_match", {"name": "code_test", "params": {"stdout": "1"}}],
                 "sandbox": {"backend": "docker"}}  # fmt: skip
        env = {"DOCKER_HOST": f"unix://{tmp_path / 'no-docker.sock'}"}
    out, extra = tmp_path / "out", []
    if case == "chunk_zero":
        extra = ["--chunk-size", "cpu=0"]
    elif case == "chunk_unknown_queue":
        extra = ["--chunk-size", "cpu=3", "--chunk-size", "gpu=5"]
    elif case == "out_is_a_file":
        out.write_text("")
    elif case == "resume_with_dataset":  # the run store's dataset and suite are used: these would be ignored
        extra = ["--resume", str(out)]
    if case in ("no_bubblewrap", "docker_without_engine"):  # the dry run says it too, as of a missing judge key
        dry = ragscore("run", str(data), "--suite", str(_suite(tmp_path, suite)), "--dry-run", home=home, env=env)
        assert dry.returncode == 2, dry.stderr
        said = " ".join(dry.stderr.split())
        assert "a run here would stop before scoring: sandbox.backend" in said and message in said, dry.stderr
    result = ragscore(
        "run", str(data), "--suite", str(_suite(tmp_path, suite)), "--out", str(out), *extra, home=home, env=env
    )
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split()), result.stderr  # as one line, however it wrapped
    assert "Traceback" not in result.stderr and "LINE" not in result.stderr
    assert not out.is_dir() or not (out / "items.jsonl").exists()
    assert not list((home / "logs").glob("worker-*")) if (home / "logs").exists() else True
    assert _our_processes(home) == []


def _tools_but_bwrap(folder: Path) -> Path:
    """A folder for PATH holding a link to each program of this host's PATH but bwrap: a host without bubblewrap."""
    folder.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        for tool in Path(directory).glob("*") if Path(directory).is_dir() else []:
            if tool.name != "bwrap" and not (folder / tool.name).exists():
                (folder / tool.name).symlink_to(tool)
    return folder


def test_a_refusal_of_a_routed_rows_queue_leaves_no_run_to_lock_the_out_dir(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row whose checks need the judge is known only once the dataset is read: the missing key was refused
    (exit 2) after DIR/run.json named the run, and the same command, the key set, said DIR "holds run ..., which
    has not written its reports (interrupted?)"."""
    monkeypatch.delenv("GROQ_API_KEY", raising=False)
    rows = make_rows(3)
    rows[1]["checks"] = [{"id": "meta", "type": "meta_eval", "informational": True}]
    data, out = write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "out"
    command = ["run", str(data), "--suite", str(_suite(tmp_path, {"metrics": ["checks"]})), "--out", str(out)]
    refused = ragscore(*command, home=home)
    assert refused.returncode == 2 and "GROQ_API_KEY" in refused.stderr, refused.stderr
    assert not (out / "run.json").exists()
    meta_eval = rows[1]["checks"]
    rows[1]["checks"] = [{"id": "term", "type": "keyword", "params": {"keywords": ["a"]}}]  # the row fixed instead
    write_jsonl(data, rows)
    again = ragscore(*command, home=home)
    assert again.returncode == 0, again.stderr
    kept = json.loads((out / "run.json").read_text())
    rows[1]["checks"] = meta_eval  # refused again, DIR holding a finished run: its reports are not moved
    write_jsonl(data, rows)
    refused = ragscore(*command, home=home)
    assert refused.returncode == 2 and "moved to" not in refused.stderr, refused.stderr
    assert json.loads((out / "run.json").read_text()) == kept and not (out / "previous").exists()


def test_a_target_request_reading_a_field_no_row_has_stops_the_run_and_the_dry_run_before_anything_is_sent(
    tmp_path: Path, home: Path
) -> None:
    """``{questoin}`` failed every question at run time (after the breaker's first failures), exit 1."""
    data, out = write_jsonl(tmp_path / "d.jsonl", make_rows(3)), tmp_path / "out"
    target = {"url": "http://127.0.0.1:9/ask", "request": {"q": "{questoin}", "id": "{id}"}}
    suite = _suite(tmp_path, {"metrics": ["exact_match"], "target": target})
    for extra in (["--out", str(out)], ["--dry-run"]):
        refused = ragscore("run", str(data), "--suite", str(suite), *extra, home=home, env={"COLUMNS": "300"})
        assert refused.returncode == 2, refused.stderr
        assert "no row has 'questoin', which the request of target 'target' reads" in refused.stderr
    assert not (out / "run.json").exists()


def test_a_missing_dataset_or_suite_file_names_the_file_of_its_folder_named_like_it(tmp_path: Path, home: Path) -> None:
    """`ragscore run e1.json --suite cpu.yml` beside e1.jsonl and cpu.yaml said only "Dataset not found: e1.json" (and
    "Suite file not found: cpu.yml"), leaving the user to list the folder for the extension they mistyped."""
    data = write_jsonl(tmp_path / "data.jsonl", make_rows(3))
    (tmp_path / "other.jsonl").write_text("")
    suite = tmp_path / "suite.yaml"
    suite.write_text("metrics: [exact_match]\n")
    no_data = ragscore("run", str(tmp_path / "data.json"), "--suite", str(suite), "--dry-run", home=home)
    no_suite = ragscore("run", str(data), "--suite", str(tmp_path / "suite.yml"), "--dry-run", home=home)
    assert no_data.returncode == no_suite.returncode == 2, (no_data.stderr, no_suite.stderr)
    said = " ".join(no_data.stderr.split()), " ".join(no_suite.stderr.split())
    assert f"Dataset not found: {tmp_path / 'data.json'} (did you mean '{data}'?)" in said[0], said
    assert f"Suite file not found: {tmp_path / 'suite.yml'} (did you mean '{suite}'?)" in said[1], said


@pytest.mark.parametrize("command", ["run", "submit"])
def test_a_missing_dataset_and_a_missing_suite_are_both_named_in_one_error(
    tmp_path: Path, home: Path, command: str
) -> None:
    """`ragscore run nodata.jsonl --suite nosuite.yaml` said only "Suite file not found": the user fixed it, ran
    again, and only then learnt that the dataset was missing too. Both are said at once, a line each, exit 2."""
    data, suite = tmp_path / "nodata.jsonl", tmp_path / "nosuite.yaml"
    broker = ["--broker", "redis://127.0.0.1:9/0"] if command == "submit" else ["--dry-run"]
    refused = ragscore(command, str(data), "--suite", str(suite), *broker, home=home, env={"COLUMNS": "300"})
    assert refused.returncode == 2, refused.stderr
    said = f"2 problems:\n  Dataset not found: {data}\n  Suite file not found: {suite}"
    assert said in refused.stderr, refused.stderr


def test_a_misspelt_column_of_a_field_a_metric_needs_is_named_before_the_run(tmp_path: Path, home: Path) -> None:
    """A dataset whose `reference` column was typed `refrence` was warned of as "no row has 'reference', which
    exact_match needs: it will score no item (is it a column named otherwise?)", which named no column: the near-miss
    warning knows case, spaces, dashes and a few other tools' names, not a typo."""
    rows = make_rows(3)
    for row in rows:
        row["refrence"] = row.pop("reference", "x")
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    dry = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--dry-run", home=home)
    said = " ".join((dry.stdout + dry.stderr).split())
    assert ("no row has 'reference', which exact_match needs: it will score no item (the dataset's column 'refrence' "
            "is no row field: rename it 'reference')") in said, said  # fmt: skip


def test_a_misspelt_list_column_is_named_and_a_cased_one_said_once(tmp_path: Path, home: Path) -> None:
    """A misspelt list column (`retrieved_doc_ds`) was not named: the hint knew only columns holding text, and the
    warning ended "is it a column named otherwise?". And a `Question` column was named twice: by the warning of
    columns named like a field but for case, and again as the misspelling of the absent `question`."""
    rows = make_rows(3)
    for row in rows:
        row["retrieved_doc_ds"] = row.pop("retrieved_doc_ids")
        row["Question"] = row.pop("question")
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = {"metrics": [*GOOD_SUITE["metrics"], "context_sufficiency"]}
    dry = ragscore("run", str(data), "--suite", str(_suite(tmp_path, suite)), "--dry-run", home=home)
    said = " ".join((dry.stdout + dry.stderr).split())
    assert ("no row has 'retrieved_doc_ids', which recall_at_k scores as absent (a score, not unscorable, as in the "
            "framework it comes from): the dataset's column 'retrieved_doc_ds' is no row field: rename it "
            "'retrieved_doc_ids'") in said, said  # fmt: skip
    assert (f"column 'Question' (first in {data} line 1; did you mean 'question'?) is no row field (names are "
            "case-sensitive)") in said, said  # fmt: skip
    assert "no row has 'question', which context_sufficiency needs" in said, said
    assert said.count("'Question'") == 1, said


def test_a_datasets_own_target_error_mark_that_the_targets_drop_is_said_once(tmp_path: Path, home: Path) -> None:
    """Rows of an earlier target run's answers.jsonl carry its mark of a question not answered: a suite's targets ask
    anew and drop it, which was done silently. The dry run (and the run) say it once; with --no-target the mark is
    scored as it is, nothing to say."""
    from ragscore_workers.answers import TARGET_ERROR

    rows = [row | {TARGET_ERROR: "old error"} for row in make_rows(3)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = _suite(tmp_path, {"metrics": ["exact_match"], "target": {"url": "http://127.0.0.1:9/ask"}})
    said = (
        f"3 rows carry their own {TARGET_ERROR!r} (an earlier target run's answers.jsonl?), which this run ignores: "
        "the suite's targets ask every question anew (to score the rows as they are, add --no-target)"
    )
    texts = []
    for extra in ([], ["--no-target"]):
        dry = ragscore("run", str(data), "--suite", str(suite), "--dry-run", *extra, home=home, env={"COLUMNS": "300"})
        texts.append(" ".join((dry.stdout + dry.stderr).split()))
        assert dry.returncode == 0, texts[-1]
    assert texts[0].count(said) == 1 and TARGET_ERROR not in texts[1], texts


def test_beyond_the_stored_unreadable_rows_the_reports_say_the_list_is_the_first_ones(
    tmp_path: Path, home: Path
) -> None:
    from ragscore_workers.store import MAX_FAILED_ROWS_STORED

    bad = MAX_FAILED_ROWS_STORED + 5
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in make_rows(3)) + "{broken\n" * bad)
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(out), home=home,
                      env={"COLUMNS": "200"})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len((out / "failed_rows.jsonl").read_text().splitlines()) == MAX_FAILED_ROWS_STORED
    said = f"{bad:,} unreadable rows (failed_rows.jsonl lists the first {MAX_FAILED_ROWS_STORED:,})"
    assert said in result.stdout and said in (out / "report.md").read_text()
    assert json.loads((out / "summary.json").read_text())["failed_rows"] == bad


def test_bad_rows_are_reported_with_lines_and_the_rest_scored(tmp_path: Path, home: Path) -> None:
    rows = [json.dumps(r) for r in make_rows(6)]
    rows.insert(2, '{"id": "broken", ')  # line 3
    rows.insert(4, json.dumps({"id": "typed", "answer": ["not", "text"]}))  # line 5
    # line 9: half an emoji (a lone surrogate) in a bad row sank the run: its excerpt could not be stored as UTF-8
    rows.append('{"id": "half", "answer": "emoji \\ud83d", "contexts": "not a list"}')
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(out), home=home)
    assert result.returncode == 0, result.stderr
    failed = [json.loads(line) for line in (out / "failed_rows.jsonl").read_text().splitlines()]
    assert [(f["line"], f["error"].split(":")[0]) for f in failed] == [(3, "invalid JSON"), (5, "answer"),
                                                                       (9, "contexts")]  # fmt: skip
    assert failed[0]["raw"] == '{"id": "broken", ' and "\\ud83d" in failed[2]["raw"]
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert [i["id"] for i in items] == [f"q{i}" for i in range(6)]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items"] == 6 and summary["failed_rows"] == 3
    assert "exact_match" in result.stdout  # the summary table
    said = " ".join(result.stderr.split())  # which rows, why and where, not only how many
    assert "3 unreadable rows not scored; the first, line 3: invalid JSON" in said
    assert f"(each in {out / 'failed_rows.jsonl'})" in said
    assert {p.name for p in out.iterdir()} >= {"items.jsonl", "items.csv", "summary.json", "report.md"}
    assert _our_processes(home) == []  # workers stopped, private redis shut down


class _BadRowsSaid(NamedTuple):
    """What ragscore says of a .json file's bad rows: failed_rows.jsonl, the run's stderr (whitespace folded), its
    report.md and report.html, the dry run's stdout, and the refusal (exit 2) of a file with no readable row."""

    failed: list[dict[str, Any]]
    run: str
    report_md: str
    report_html: str
    dry: str
    refused: str


def _bad_rows_said(tmp_path: Path, home: Path, rows: object, unreadable: object) -> _BadRowsSaid:
    """Run, then dry-run, ``rows`` written as a pretty-printed .json file, and dry-run ``unreadable`` (refused)."""
    data, bad, out = tmp_path / "d.json", tmp_path / "bad.json", tmp_path / "out"
    data.write_text(json.dumps(rows, indent=2))
    bad.write_text(json.dumps(unreadable))
    suite, env = str(_suite(tmp_path, GOOD_SUITE)), {"COLUMNS": "300"}
    result = ragscore("run", str(data), "--suite", suite, "--out", str(out), home=home, env=env)
    assert result.returncode == 0, result.stderr
    dry = ragscore("run", str(data), "--suite", suite, "--dry-run", home=home, env=env)
    assert dry.returncode == 0, dry.stderr
    refused = ragscore("run", str(bad), "--suite", suite, "--dry-run", home=home, env=env)
    assert refused.returncode == 2, refused.stderr
    failed = [json.loads(line) for line in (out / "failed_rows.jsonl").read_text().splitlines()]
    return _BadRowsSaid(failed, " ".join(result.stderr.split()), (out / "report.md").read_text(),
                        (out / "report.html").read_text(), dry.stdout, " ".join(refused.stderr.split()))  # fmt: skip


def test_the_bad_rows_of_a_json_list_are_said_by_their_place_in_the_list_not_as_lines(
    tmp_path: Path, home: Path
) -> None:
    """A .json list's reader numbers its rows by their place in the list (a pretty-printed list's row 3 is on no line
    3): the errors file, the console, report.md, report.html and the dry run said them as "line 3"."""
    long = {"id": "long", "question": "q?", "contexts": 5, "answer": "x" * 3000}  # row 3: contexts is no list
    said = _bad_rows_said(tmp_path, home, [*make_rows(2), long, 7, *make_rows(4)[2:]], [1, 2])  # row 4: no object
    said_as = [(f.get("row"), "line" in f, f["error"].split(":")[0]) for f in said.failed]
    assert said_as == [(3, False, "contexts"), (4, False, "element 4")]
    # the raw is the object's own JSON, its note counting that object's characters (not the file's)
    assert said.failed[0]["raw"].endswith(f" [cut: the row has {len(json.dumps(long)):,} characters]")
    assert "2 unreadable rows not scored; the first, row 3 of the JSON list: contexts" in said.run
    assert "| row 3 of the JSON list | contexts:" in said.report_md
    assert "<td>row 4 of the JSON list</td>" in said.report_html
    assert "  row 3 of the JSON list: contexts:" in said.dry and "line 3" not in said.dry
    assert "row 2 of the JSON list: element 2" in said.refused


def test_the_bad_rows_of_a_json_object_keyed_by_id_are_said_by_their_key_not_as_lines(
    tmp_path: Path, home: Path
) -> None:
    """A .json object's rows are keyed by id: the errors file, the console, the reports and the dry run said them as
    "line 2", their place among the object's rows, which is no line of the file (a pretty-printed object's row 2 is
    on line 3). Each is said by its key, and failed_rows.jsonl keeps it (beside its ``row``, its place)."""
    rows = {row.pop("id"): row for row in make_rows(5)}
    rows["q1"]["contexts"] = 5  # no list
    rows["q2 é"] = [{"answer": "x"}]  # no object; its key as written, not escaped
    rows["q3"]["id"] = "other"  # its own id is not its key
    said = _bad_rows_said(tmp_path, home, rows, {"a": 1, "b": 2})
    said_as = [(f["row"], f["key"], "line" in f, f["error"].split(":")[0]) for f in said.failed]
    assert said_as == [(2, "q1", False, "contexts"), (4, "q3", False, "its id 'other' differs from its key"),
                       (6, "q2 é", False, "expected an object, got list (if the rows are the list under 'q2 é', give "
                                          "ragscore that list")]  # fmt: skip
    assert '3 unreadable rows not scored; the first, row "q1" of the JSON object: contexts' in said.run
    assert '| row "q3" of the JSON object | its id' in said.report_md
    assert "<td>row &#34;q2 é&#34; of the JSON object</td>" in said.report_html
    assert '  row "q1" of the JSON object: contexts:' in said.dry and "line 2" not in said.dry
    assert 'row "b" of the JSON object: expected an object, got int' in said.refused


def test_a_failing_metric_says_why_in_the_table_summary_and_report(tmp_path: Path, home: Path) -> None:
    rows = make_rows(8)
    for row in rows:
        row["metadata"] = {"fail": "unsupported unit"}
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = _suite(tmp_path, {"metrics": ["exact_match", "fail_on_flag"]})
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(suite), "--out", str(out), home=home,
                      env={"RAGSCORE_PLUGINS": "tests.plugins.failing"})  # fmt: skip
    assert result.returncode == 1, result.stderr  # a metric that scored nothing fails the run (reports written)
    assert "no scores for fail_on_flag: every item that reached them errored" in result.stderr
    said = [line for line in result.stdout.splitlines() if line.startswith("fail_on_flag:")]
    assert len(said) == 1 and "8 errors (every item); first (item q" in said[0], result.stdout
    assert "): ValueError: cannot score row q" in said[0], result.stdout
    assert "unsupported unit" in said[0]
    assert not any(line.startswith("exact_match:") for line in result.stdout.splitlines())
    summary = json.loads((out / "summary.json").read_text())
    first = summary["metrics"]["fail_on_flag"]["first_error"]
    assert first.startswith("ValueError: cannot score row q") and first.endswith("unsupported unit")
    assert summary["metrics"]["exact_match"]["first_error"] is None
    assert "- fail_on_flag: 8 errors (every item); first (item q" in (out / "report.md").read_text()


def test_a_metric_error_names_the_item_that_gave_it(tmp_path: Path, home: Path) -> None:
    """One row of a code dataset whose point is malformed among rows that score: the console, report.md and
    summary.json said the first error's message, not which of the items to look at."""
    run = {"id": "run", "type": "code_test", "params": {"stdout": "3"}}
    rows = [{"id": f"q{i}", "system": "m1", "code": "print(1 + 2)\n", "checks": [run]} for i in range(3)]
    rows.insert(1, {"id": "cobol", "system": "m1", "code": "print(3)\n",
                    "checks": [{**run, "params": {"language": "cobol"}}]})  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(_suite(tmp_path, {"metrics": ["checks"]})), "--out", str(out),
                      home=home)  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if line.startswith("checks:")]
    assert len(said) == 1 and said[0].startswith("checks: 1 error; first (item cobol (system m1)): checks item 1"), said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["checks"]["first_error_item"] == "cobol (system m1)"
    assert summary["metrics"]["checks"]["n"] == 3 and summary["metrics"]["checks"]["mean"] == 1.0
    assert "- checks: 1 error; first (item cobol (system m1)): checks item 1 (run)" in (out / "report.md").read_text()


def test_a_metric_that_could_score_nothing_says_why_in_the_table_summary_and_report(tmp_path: Path, home: Path) -> None:
    """Rows without the field a metric needs (a dataset from another tool): "0 scored", exit 0 (a CI job went
    green, with -q too), and only items.jsonl said why. Now exit 1, the reports written, the metric, its items and
    the reason said; a metric that scored some items (verbatim: one row has citations) is no run error."""
    rows = [{"id": f"q{i}", "answer": "x", "gold": "x", "contexts": ["x y"]} for i in range(6)]
    rows[0]["citations"] = [{"source_index": 0, "quote": "x y"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = _suite(tmp_path, {"metrics": ["exact_match", "verbatim"]})
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(suite), "--out", str(out), home=home, env={"COLUMNS": "200"})
    assert result.returncode == 1, result.stderr
    said = " ".join(result.stderr.split())
    assert "no scores for exact_match: every item was unscorable (exact_match: 6 items, most often: no reference; " \
        in said, said  # fmt: skip
    assert "fix the cause (e.g. rows without a field it needs: misnamed columns" in said and "verbatim" not in said
    assert "exact_match: no item could be scored, 6 unscorable (no reference ×6)" in result.stdout
    quiet = ragscore("run", str(data), "--suite", str(suite), "--out", str(tmp_path / "q"), "-q", home=home)
    assert quiet.returncode == 1 and "no scores for exact_match" in quiet.stderr, quiet.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["metrics"]["exact_match"]["unscorable_reasons"] == {"no reference": 6}
    assert "- exact_match: no reference ×6" in (out / "report.md").read_text()
    assert 'title="no reference ×6"' in (out / "report.html").read_text()


def test_the_final_line_says_how_many_items_every_output_scored(tmp_path: Path, home: Path) -> None:
    """One item of 11 without a gold doc id, unscorable for recall_at_1, recall_at_5 and mrr of the 4 outputs: the
    last line said "11 items, 11 scored", as if every output had scored every item."""
    rows = [{"id": f"q{i}", "answer": "x", "reference": "x", "retrieved_doc_ids": ["d1", "d2"], "gold_doc_id": "d1"}
            for i in range(11)]  # fmt: skip
    del rows[4]["gold_doc_id"]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    suite = _suite(tmp_path, {"metrics": ["exact_match", "recall_at_k"]})
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(suite), "--out", str(out), home=home, env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    said = "11 items, 11 scored (by at least one output; 10 by every one), 0 unreadable rows"
    assert said in result.stdout, result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["scored"], summary["scored_all"]) == (11, 10)
    assert said in (out / "report.md").read_text()


def test_finished_embedded_runs_can_be_listed_and_reported_later(tmp_path: Path, home: Path) -> None:
    """status/results/report start the private Redis from its data file (it is down between runs) and shut
    it down again."""
    none_yet = ragscore("status", home=home)
    assert none_yet.returncode == 2 and "no embedded runs yet" in none_yet.stderr
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(6))
    first = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(tmp_path / "o"),
                     home=home)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert _our_processes(home) == []
    listed = ragscore("status", home=home)
    assert listed.returncode == 0, listed.stderr
    run_id = json.loads((tmp_path / "o" / "run.json").read_text())["run_id"]
    # a header, then: id, state, done/total work units (6 rows x 4 outputs), when it was submitted (UTC), the
    # dataset's name
    header, line = listed.stdout.splitlines()
    assert header == "run id\tstate\tdone/total\tsubmitted (UTC)\tdataset", header
    listed_id, state, units, when, name = line.split("\t")
    assert (listed_id, state, units, name) == (run_id, "finished", "24/24", "d.jsonl"), line
    submitted = json.loads((tmp_path / "o" / "summary.json").read_text())["timing"]["submitted_at"]
    assert when == time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(submitted))
    again = ragscore("results", run_id, "--out", str(tmp_path / "again"), home=home)
    assert again.returncode == 0, again.stderr
    before, after = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("o", "again"))
    assert after["metrics"] == before["metrics"] and after["items"] == 6
    report = ragscore("report", run_id, "--format", "md", "--out", str(tmp_path / "md"), home=home)
    assert report.returncode == 0, report.stderr
    assert (tmp_path / "md" / "report.md").exists()
    # The run's --out DIR names it too ("No run 'o' in the store" before)
    by_dir = ragscore("status", str(tmp_path / "o"), home=home, env={"COLUMNS": "300"})
    assert by_dir.returncode == 0 and "errors 0" in by_dir.stdout, by_dir.stderr
    # its reports are written: status says where (the last to write them), not the `results` command that writes them
    said = by_dir.stdout
    assert f"its reports were written to {tmp_path / 'again'})" in said and "--out DIR" not in said, said
    assert "exact_match" in again.stdout  # the summary table
    assert f"Reports written to {tmp_path / 'again'}/" in again.stderr  # where they went, as `run` says
    quiet = ragscore("results", str(tmp_path / "o"), "--out", str(tmp_path / "again2"), "-q", home=home)
    assert quiet.returncode == 0 and quiet.stdout == "", quiet.stdout
    assert (tmp_path / "again2" / "summary.json").is_file()
    assert ragscore("resume", str(tmp_path / "o"), home=home).returncode == 0  # nothing left to do: reports again
    # The DIR copied to a machine whose store never had the run: `report` is the command that reads it alone
    elsewhere = ragscore("results", str(tmp_path / "o"), "--out", str(tmp_path / "x"), home=tmp_path / "other-home")
    assert elsewhere.returncode == 2 and "no embedded runs yet" in elsewhere.stderr, elsewhere.stderr
    assert f"`ragscore report {tmp_path / 'o'} --out {tmp_path / 'x'}` writes its HTML report" in elsewhere.stderr
    rerun = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(tmp_path / "o"),
                     home=home)  # fmt: skip
    assert rerun.returncode == 0 and f"held the reports of run {run_id}: moved to " in rerun.stderr, rerun.stderr
    # o is the new run's now: the old run's reports written there would leave its run.json naming the new one
    new_id = json.loads((tmp_path / "o" / "run.json").read_text())["run_id"]
    clash = ragscore("results", run_id, "--out", str(tmp_path / "o"), home=home)
    assert clash.returncode == 2 and f"holds run {new_id} (its run.json or summary.json names it)" in clash.stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["run_id"] == new_id
    in_dir = ragscore("results", str(tmp_path / "o"), home=home)  # a DIR alone: its reports go there
    assert in_dir.returncode == 0 and f"Reports written to {tmp_path / 'o'}/" in in_dir.stderr, in_dir.stderr
    no_out = ragscore("results", run_id, home=home)
    assert no_out.returncode == 2 and "--out DIR is needed with a run id" in no_out.stderr
    # A path that is no run's DIR is said so (it was looked up as a run id: "No run ... in the store"); an --out
    # naming a file is exit 2 (a bare "File exists", exit 1), and compare says it before its work
    (tmp_path / "a-file").write_text("x")
    for command, said in [
        (("status", str(tmp_path / "nowhere")), f"{tmp_path / 'nowhere'}: no such directory"),
        (("results", str(tmp_path / "nowhere")), f"{tmp_path / 'nowhere'}: no such directory"),
        (("results", str(tmp_path / "md")), f"{tmp_path / 'md'} holds no run.json or summary.json"),
        (("results", run_id, "--out", str(tmp_path / "a-file")), f"Cannot write the reports to {tmp_path / 'a-file'}"),
        (("compare", str(tmp_path / "o"), "--out", str(tmp_path / "a-file" / "sub")), "Cannot write the reports to"),
    ]:
        refused = ragscore(*command, home=home, env={"COLUMNS": "300"})
        assert refused.returncode == 2 and said in refused.stderr, (command, refused.stderr)
    missing = ragscore("run", str(tmp_path / "missing.jsonl"), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out",
                       str(tmp_path / "o"), home=home)  # fmt: skip
    assert missing.returncode == 2 and "moved to" not in missing.stderr  # a bad dataset moves nothing
    assert [path.name for path in (tmp_path / "o" / "previous").iterdir()] == [run_id]  # the rerun's move alone
    assert _our_processes(home) == [], "the private Redis is shut down again"


def test_the_report_command_said_for_a_copied_run_dir_with_a_space_in_its_path_runs_as_copied(
    tmp_path: Path, home: Path
) -> None:
    """`ragscore results DIR --out OUT` of a DIR no store has said `ragscore report DIR --out OUT` with its paths as
    they were: one with a space, pasted, was two words, and the command failed."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(2))
    run_dir, out = tmp_path / "my run", tmp_path / "its reports"
    first = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(run_dir), home=home)
    assert first.returncode == 0, first.stderr
    elsewhere = ragscore("results", str(run_dir), "--out", str(out), home=tmp_path / "other-home")
    said = " ".join(elsewhere.stderr.split())
    one = "writes its HTML report from them, with no store, and with --format md, csv or json each of its other reports"
    assert elsewhere.returncode == 2 and one in said, elsewhere.stderr
    command = said.split("`ragscore report ", 1)[1].split("`", 1)[0]
    assert shlex.split(f"ragscore report {command}") == ["ragscore", "report", str(run_dir), "--out", str(out)], said
    copied = ragscore(*shlex.split(f"report {command}"), home=tmp_path / "other-home")
    assert copied.returncode == 0 and sorted(p.name for p in out.iterdir()) == ["report.html"], copied.stderr
    # "writes its reports" it said, of a command that writes one (a run writes report.md, items.csv, summary.json too)
    for fmt, written in [("md", "report.md"), ("csv", "items.csv"), ("json", "summary.json")]:
        other = ragscore(*shlex.split(f"report {command} --format {fmt}"), home=tmp_path / "other-home")
        assert other.returncode == 0 and (out / written).is_file(), other.stderr


def test_results_of_a_run_dir_says_the_report_command_only_where_no_store_has_the_run(
    tmp_path: Path, home: Path
) -> None:
    """`ragscore results A --out B` said `ragscore report A --out B` ("with no store") after any error of A's DIR
    holding a summary.json: B another run's DIR (refused: "B holds run ..."), where that command writes run A's
    reports over run B's beside B's run.json; B a file the reports cannot be written to, where the store has run A
    and the command fails the same way."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(2))
    a, b = tmp_path / "a", tmp_path / "b"
    for run_dir in (a, b):
        done = ragscore(
            "run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(run_dir), home=home
        )
        assert done.returncode == 0, done.stderr
    b_id = json.loads((b / "run.json").read_text())["run_id"]
    refused = ragscore("results", str(a), "--out", str(b), home=tmp_path / "other-home")
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and f"{b} holds run {b_id}" in said, refused.stderr
    assert "ragscore report" not in said, said
    (tmp_path / "a-file").write_text("x")
    unwritable = ragscore("results", str(a), "--out", str(tmp_path / "a-file"), home=home)
    said = " ".join(unwritable.stderr.split())
    assert unwritable.returncode == 2 and f"Cannot write the reports to {tmp_path / 'a-file'}" in said, said
    assert "ragscore report" not in said, said


def test_embedded_redis_is_reused_by_a_concurrent_run_and_shut_down_by_the_last(tmp_path: Path, home: Path) -> None:
    from orchestrator.embedded_redis import EmbeddedRedis

    holder = EmbeddedRedis(home)
    url = holder.acquire()  # another "run" holds the server
    try:
        data = write_jsonl(tmp_path / "d.jsonl", make_rows(20))
        res = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(tmp_path / "o"),
                       home=home)  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert holder._ping(), "the server must stay up while another run uses it"
        runs = RunStore(holder.client, 60).list_runs()
        assert len(runs) == 1  # the CLI run used the same server
        assert url == holder.url
    finally:
        holder.release()
    assert not holder._ping()


def _start_run(
    tmp_path: Path, home: Path, rows: int, *extra: str, start: Callable[..., Any] = interruptible, **popen: Any
) -> subprocess.Popen[str]:
    """An embedded ``ragscore run`` of ``rows`` rows into ``tmp_path/o``, in the background (ten rows a task: long
    enough to be stopped mid-run); ``start``: how (:func:`as_background_job`: SIGINT ignored)."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(rows))
    env = {**os.environ, "RAGSCORE_HOME": str(home)}
    env.pop("RAGSCORE_BROKER_URL", None)
    return start(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)),
         "--out", str(tmp_path / "o"), "--chunk-size", "cpu=10", *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen,
    )  # fmt: skip


def _until_workers_run(home: Path, timeout_s: float = 120) -> None:
    """Wait until the run's Celery workers have started."""

    def running() -> bool:
        return any("celery" in " ".join(p.info["cmdline"] or []) for p in _our_processes(home))

    assert until(running, timeout_s), "the run's workers never started"


def _until_recorded(out: Path, timeout_s: float = 120) -> None:
    """Wait until ``out/run.json`` names the run (a stop before it leaves nothing to resume, and says no resume)."""
    assert until(lambda: (out / "run.json").exists(), timeout_s), "the run was never recorded in its --out DIR"


def test_ctrl_c_mid_run_leaves_no_processes(tmp_path: Path, home: Path) -> None:
    proc = _start_run(tmp_path, home, 30000)
    _until_workers_run(home)
    _until_recorded(tmp_path / "o")  # not a fixed sleep: the resume hint needs it
    assert proc.poll() is None, output_of(proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=240)  # generous: a loaded host (the parallel test pass) cancels slowly
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert f"ragscore run --resume {tmp_path / 'o'}" in stderr, "says how to finish the cancelled run"
    deadline = time.monotonic() + 20
    while _our_processes(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _our_processes(home) == []


def test_ctrl_c_while_a_run_without_judge_or_target_is_followed_says_what_its_workers_score_is_cut_short(
    tmp_path: Path, home: Path
) -> None:
    """A Ctrl-C of a run scoring exact_match said "stopping the workers: the judge and target calls under way end and
    are kept", of calls it has none of, and not that what its workers score is cut short (docs/cli.md): it says
    that now."""
    proc = _start_run(tmp_path, home, 10000)
    stderr = interrupted_once_said(proc, "item×metric outputs (")  # followed: its first progress line was read
    assert proc.returncode == 130, stderr
    assert ("stopping the workers (up to 15 s; Ctrl-C again to stop at once): what they are scoring is cut short; the "
            "resume scores it again") in stderr, stderr  # fmt: skip


def test_sigterm_of_a_followed_run_says_to_send_sigterm_again_to_stop_at_once(tmp_path: Path, home: Path) -> None:
    """An embedded run stopped by SIGTERM (a supervisor's, ``kill``) said "Ctrl-C again to stop at once", a key its
    sender has none of: it says to send SIGTERM again now, as ``ragscore worker`` does."""
    proc = _start_run(tmp_path, home, 10000)
    stderr = interrupted_once_said(proc, "item×metric outputs (", signum=signal.SIGTERM)  # followed: a progress line
    assert proc.returncode == 130, stderr
    assert ("stopping the workers (up to 15 s; send SIGTERM again (or Ctrl-C) to stop at once): what they are scoring "
            "is cut short; the resume scores it again") in stderr, stderr  # fmt: skip


def test_a_scripts_background_run_ignores_ctrl_c_and_offers_only_sigterm_to_stop_at_once(
    tmp_path: Path, home: Path
) -> None:
    """A run a script started in the background (``ragscore run ... &``: the shell ignores SIGINT for it) goes on
    through a Ctrl-C, as its shell means; stopped by SIGTERM it said "send SIGTERM again (or Ctrl-C)", offering a
    Ctrl-C that does nothing to it. It names SIGTERM alone."""
    proc = _start_run(tmp_path, home, 10000, start=as_background_job)
    assert proc.stderr is not None
    lines_until(proc.stderr, "item×metric outputs (", 240)  # followed: a progress line
    proc.send_signal(signal.SIGINT)  # ignored: were it not, the stop below would be this Ctrl-C's
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, stderr
    assert ("stopping the workers (up to 15 s; send SIGTERM again to stop at once): what they are scoring is cut "
            "short; the resume scores it again") in stderr, stderr  # fmt: skip


def test_ctrl_c_while_the_rows_are_sent_says_what_becomes_of_those_sent(tmp_path: Path, home: Path) -> None:
    """A Ctrl-C while a run's rows were sent said only "finish it later": nothing of the rows already sent. The run is
    cancelled (its workers skip what they did not score), what was scored is kept: said so, then the resume."""
    proc = _start_run(tmp_path, home, 30000)
    assert proc.stderr is not None
    said = "".join(itertools.takewhile(lambda line: "sending them to the queues" not in line, proc.stderr))
    _until_recorded(tmp_path / "o")  # named in run.json just before its first row is sent: a resume finds it
    assert proc.poll() is None, said
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 130, said + stderr
    said = " ".join(stderr.split())
    assert re.search(
        r"interrupted while sending the rows \([0-9,]+ of 30,000 rows sent\): the run is cancelled: its "
        "workers skip the rows sent and not scored yet, and what they scored is kept",
        said,
    ), said
    assert f"finish it later (what was scored is kept): `ragscore run --resume {tmp_path / 'o'}`" in said, said
    assert "stopping the workers" not in said, said  # the run's wait never began


def test_the_run_list_says_an_embedded_run_whose_process_was_killed_is_interrupted(tmp_path: Path, home: Path) -> None:
    """Listed as ``running`` for ever: only the single-run view said no progress was made."""
    out = tmp_path / "o"
    proc = _start_run(tmp_path, home, 30000)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "run.json").exists():
        time.sleep(0.2)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    running = ragscore("status", home=home)  # submitting or running, by its process
    assert f"{run_id}\t" in running.stdout and "interrupted" not in running.stdout + running.stderr, running
    proc.kill()
    proc.communicate(timeout=30)
    listed = ragscore("status", home=home, env={"COLUMNS": "250"})
    assert f"{run_id}\tinterrupted\t" in listed.stdout, listed
    assert "1 interrupted: the `ragscore run` of each is gone" in " ".join(listed.stderr.split()), listed.stderr


def test_a_closed_terminal_sighup_interrupts_an_embedded_run_as_ctrl_c_does(tmp_path: Path, home: Path) -> None:
    """SIGHUP (the terminal closed, an ssh session dropped) killed `ragscore run` with exit 129: no resume hint, the
    run left `running` instead of cancelled, and the private redis-server left up."""
    from orchestrator.embedded_redis import EmbeddedRedis

    out = tmp_path / "o"
    hangs_up = lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL)  # noqa: E731 - the tests may run under nohup
    proc = _start_run(tmp_path, home, 30000, "--quiet", preexec_fn=hangs_up)
    try:
        _until_workers_run(home)
        _until_recorded(out)  # not a fixed sleep: the resume hint needs it
        assert proc.poll() is None, output_of(proc)
        proc.send_signal(signal.SIGHUP)
        _, stderr = proc.communicate(timeout=240)  # as the Ctrl-C test's
    finally:
        proc.kill()
        proc.wait(30)
        EmbeddedRedis(home).release()  # what a failed run left up goes down with its last (dead) client
    assert proc.returncode == 130 and "interrupted" in stderr, stderr
    assert f"ragscore run --resume {out}" in stderr, stderr
    deadline = time.monotonic() + 20
    while _our_processes(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _our_processes(home) == [], "the workers and the private redis-server are gone"
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    with EmbeddedRedis(home) as url:
        assert url and RunStore(EmbeddedRedis(home).client, 60).state(run_id) == "cancelled"


def test_a_nohup_embedded_run_ignores_sighup_and_finishes(tmp_path: Path, home: Path) -> None:
    """SIGHUP stops a run only where it is not ignored: one started with ``nohup`` goes on to its reports."""
    ignoring = lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)  # noqa: E731 - as nohup starts it
    proc = _start_run(tmp_path, home, 3000, "--quiet", preexec_fn=ignoring)
    _until_workers_run(home)
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["state"] == "finished"


def test_metrics_lists_outputs_and_one_metrics_params(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The output names gates and reports use (recall_at_1, citation_f1) and each metric's params."""
    monkeypatch.setenv("COLUMNS", "200")  # every queue's name on one line
    listed = ragscore("metrics", home=home)
    assert listed.returncode == 0, listed.stderr
    rows: dict[str, list[list[str]]] = {}  # metric -> its lines' cells (a row's next lines leave its name out)
    name = ""
    for cells in [line.split("│")[1:-1] for line in listed.stdout.splitlines() if line.count("│") >= 5]:
        name = cells[0].strip() or name
        rows.setdefault(name, []).append([cell.strip() for cell in cells])
    assert [cells[1] for cells in rows["recall_at_k"]][:3] == ["recall_at_1", "recall_at_5", "mrr"]  # one a line
    assert [cells[1] for cells in rows["citation"]][:3] == ["citation_precision", "citation_recall", "citation_f1"]
    assert rows["checks"][0][2] == "cpu/embed/judge/code by row" and rows["answer_accuracy"][0][2] == "judge"
    one = ragscore("metrics", "recall_at_k", home=home)
    assert one.returncode == 0, one.stderr
    assert "│ k     │ list[int] │ [1, 5]  │" in one.stdout
    regex_default = ragscore("metrics", "quality_checks", home=home)
    from ragscore_workers.metrics._text import CITATION_MARKER

    # JSON: pasteable into a suite (Rich markup mangled its "\\[")
    assert json.dumps(CITATION_MARKER, ensure_ascii=False) in regex_default.stdout
    unknown = ragscore("metrics", "recal_at_k", home=home)
    assert unknown.returncode == 2 and "Did you mean 'recall_at_k'" in unknown.stderr


def test_broker_urls_and_worker_queues_are_checked_before_anything_starts(tmp_path: Path, home: Path) -> None:
    with closed_port() as port:  # nothing listens: every check here must answer before connecting
        for args, said in [
            (["worker", "--queues", "cpu,cpux", "--broker", f"redis://127.0.0.1:{port}/0"],
             "unknown 'cpux' (did you mean 'cpu'?); choose from"),
            (["worker", "--queues", " , ", "--broker", f"redis://127.0.0.1:{port}/0"], "none; choose from cpu"),
            (["worker", "-Q", "redis", "--broker", f"redis://127.0.0.1:{port}/0"], "unknown 'redis'; choose from cpu"),
            (["worker", "-Q", "cpu,control", "--broker", f"redis://127.0.0.1:{port}/0"],
             "unknown 'control' (every worker serves the control queue already)"),
            (["status", "--broker", f"rediss://:pw@127.0.0.1:{port}/0"],
             "a rediss:// URL needs ssl_cert_reqs. For TLS:"),
            (["worker", "-Q", "cpu", "--broker", f"rediss://:pw@127.0.0.1:{port}/0?ssl_cert_reqs=CERT_REQUIRE"],
             "has ssl_cert_reqs='CERT_REQUIRE': write required, optional or none"),
            (["worker", "-Q", "cpu", "--broker", f"redis://:pw@127.0.0.1:{port}/0?ssl=true"],
             "has the query option 'ssl': a URL asks for TLS by its scheme: rediss://"),
        ]:  # fmt: skip
            result = ragscore(*args, home=home, env={"COLUMNS": "250"})
            assert result.returncode == 2, (args, result.stderr)
            assert said in " ".join(result.stderr.split()) and "Traceback" not in result.stderr, (args, result.stderr)
            assert "pw@" not in result.stderr  # the password is never echoed
        warned = ragscore("status", "--broker", f"redis://:s3cret@127.0.0.1:{port}/0", home=home,
                          env={"COLUMNS": "250"})  # fmt: skip
        assert "the password in --broker is visible to every user of this host (ps)" in warned.stderr
        assert "s3cret" not in warned.stderr


def test_ragscore_worker_says_which_broker_its_workers_are_up_on_and_how_to_stop_them_its_password_hidden(
    tmp_path: Path, home: Path
) -> None:
    """It said "workers up for cpu" alone: on a host that reaches several Redis servers, up on which was not said; and
    a user who started it in a terminal was not told how to stop it, nor that its running tasks finish first."""
    server = RedisProcess(tmp_path / "redis", "--requirepass", "s3cret-pw").start_without_ping()
    env = {
        **os.environ,
        "RAGSCORE_HOME": str(home),
        "RAGSCORE_BROKER_URL": f"redis://:s3cret-pw@127.0.0.1:{server.port}/0",
    }
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu"], stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    try:
        assert proc.stderr is not None
        said = next_line(proc.stderr, 180)  # the first line, once its workers started (or its error, then EOF)
        assert said.startswith(f"workers up for cpu on the broker redis://:***@127.0.0.1:{server.port}/0;"), said
        assert said.rstrip().endswith("; Ctrl-C (or SIGTERM) stops them, their running tasks finishing first"), said
        assert "s3cret-pw" not in said
    finally:
        try:
            stop_worker_command(proc)
        finally:
            server.stop()


def test_ragscore_worker_logs_to_its_stderr_at_the_loglevel_asked_its_broker_password_hidden(
    tmp_path: Path, home: Path
) -> None:
    """Under systemd or Kubernetes the journal (``kubectl logs``) got "workers up" alone: the workers logged only to
    files under RAGSCORE_HOME/logs, at WARNING, and ``ragscore worker`` had no ``--loglevel``."""
    server = RedisProcess(tmp_path / "redis", "--requirepass", "s3cret-pw").start_without_ping()
    url = f"redis://:s3cret-pw@127.0.0.1:{server.port}/0"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": url}
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "--loglevel", "info"],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    lines: list[str] = []
    assert proc.stderr is not None
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        said = lambda text: any(text in line for line in lines)  # noqa: E731
        assert until(lambda: said(" ready.") or proc.poll() is not None, 240), "".join(lines)
        assert any(line.startswith("[cpu] ") and line.rstrip().endswith(" ready.") for line in lines), "".join(lines)
        subprocess.run([sys.executable, "-m", "celery", "-A", "ragscore_workers.app", "call", "ragscore.aggregate",
                        "--args", '["no-such-run"]', "--queue", "control"],
                       env=env, cwd=ROOT, check=True, capture_output=True, timeout=120)  # fmt: skip
        assert until(lambda: said("Task ragscore.aggregate[") or proc.poll() is not None, 240), "".join(lines)
    finally:
        try:
            stop_worker_command(proc)
        finally:
            server.stop()
    assert "s3cret-pw" not in "".join(lines)
    logged = "".join(path.read_text() for path in (home / "logs").glob("worker-cpu-*.log"))
    assert "Task ragscore.aggregate[" in logged and "s3cret-pw" not in logged  # the files still get it


def test_ragscore_worker_whose_stderr_is_never_read_still_runs_tasks(tmp_path: Path, home: Path) -> None:
    """Its workers' lines were copied to its stderr by a thread that blocked once nobody read it (a supervisor that
    captured it and stopped reading): the workers then blocked on their own output and ran no task more. Now stderr
    misses lines (and says how many), the file keeps them all. Its own lines dropped (the warning that it restarted a
    killed worker, "stopping") were said nowhere: they are counted too."""
    server = RedisProcess(tmp_path / "redis").start_without_ping()
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": server.url}
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # one page: full after its first lines
    try:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu", "-l", "debug"],
                                stderr=write_end, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    finally:
        os.close(write_end)
    tasks = 60  # a traceback each, 3 KB at debug: well past the 64 KiB a worker's own output pipe holds
    logged = lambda: "".join(path.read_text() for path in (home / "logs").glob("worker-cpu-*.log"))  # noqa: E731
    said: list[bytes] = []
    try:
        assert until(lambda: " ready." in logged() or proc.poll() is not None, 240), logged()
        send = "from ragscore_workers.app import app\n"
        send += f"for _ in range({tasks}): app.send_task('ragscore.aggregate', ['no-such-run'], queue='control')"
        subprocess.run([sys.executable, "-c", send], env=env, cwd=ROOT, check=True, capture_output=True, timeout=120)
        ran = lambda: logged().count("] raised unexpected: ConfigError(")  # noqa: E731
        assert until(lambda: ran() >= tasks or proc.poll() is not None, 240), f"{ran()} of {tasks} tasks ran"
        os.killpg(celery_workers(proc.pid)[0].pid, signal.SIGKILL)  # its warning that it restarted it
        assert until(lambda: logged().count(" ready.") == 2 or proc.poll() is not None, 240), logged()[-3000:]
    finally:
        reader = threading.Thread(target=lambda: said.extend(iter(lambda: os.read(read_end, 65536), b"")), daemon=True)
        reader.start()  # read at last: it says it stops, and its workers' last lines
        try:
            stop_worker_command(proc)
        finally:
            server.stop()
            reader.join(timeout=60)
            os.close(read_end)
    assert re.search(rb"\[cpu\] \d+ lines not shown here", b"".join(said)), b"".join(said)[-3000:]
    assert re.search(rb"\n\d+ lines of ragscore worker's own not shown here", b"".join(said)), b"".join(said)[-3000:]


def _worker_lines_until_up(env: dict[str, str], queues: str) -> list[str]:
    """What ``ragscore worker -Q queues`` says on stderr up to its "workers up" line (or its exit), then stopped.

    Its stderr is read to the end while it stops (a pipe left unread could block its workers' log lines, hence their
    exit), and it is given a warm stop of 60 s: its workers are idle (the default, the longest hard time limit plus
    30 s, outlasted this helper's 180 s once in the CI, the SIGTERM landing while its workers were booting)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", queues, "-c", "1",
                             "--stop-timeout", "60"],
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env, start_new_session=True)  # fmt: skip
    lines: list[str] = []
    rest: list[str] = []
    try:
        assert proc.stderr is not None
        lines = lines_until(proc.stderr, "workers up", 180)
        threading.Thread(target=lambda: rest.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    finally:
        try:
            stop_worker_command(proc)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"ragscore worker -Q {queues} did not stop: it said {''.join(lines + rest)}") from exc
    return lines


def test_ragscore_worker_warns_of_what_its_host_lacks_for_its_queues(tmp_path: Path, home: Path) -> None:
    """A judge host without a key, a code host without bubblewrap started quietly, took tasks of every run and
    errored all their items; a platform engineer learnt of it from a user's report. They are said at startup."""
    server = RedisProcess(tmp_path / "redis").start()
    no_tools = tmp_path / "bin"
    no_tools.mkdir()
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": f"redis://127.0.0.1:{server.port}/0"}
    bare = {k: v for k, v in env.items() if k not in ("GROQ_API_KEY", "OPENAI_API_KEY")} | {"PATH": str(no_tools)}
    try:
        said = "".join(_worker_lines_until_up(bare, "judge,code"))
        assert "Warning: neither GROQ_API_KEY nor OPENAI_API_KEY is set on this host" in said, said
        assert "It may be fine" in said and "their api_key_env param" in said, said  # a metric param, not judge's
        assert "bwrap is not installed" in said and "apt-get install bubblewrap" in said, said
        assert "workers up for judge, code" in said, said  # a warning: a suite's api_key_env or docker backend works
        ready = "".join(_worker_lines_until_up(env | {"GROQ_API_KEY": "gsk-test"}, "judge,code"))
        assert ready.startswith("workers up for judge, code"), ready
        no_sdk = tmp_path / "no_sdk"  # a host where `pip install ragscore` left out the judge extra
        no_sdk.mkdir()
        (no_sdk / "sitecustomize.py").write_text("import sys\nsys.modules['groq'] = None\n")
        path = os.pathsep.join(p for p in (str(no_sdk), env.get("PYTHONPATH")) if p)
        said = "".join(_worker_lines_until_up(env | {"GROQ_API_KEY": "gsk-test", "PYTHONPATH": path}, "judge"))
        assert "Warning: the groq SDK is not installed" in said and "pip install 'ragscore[judge]'" in said, said
    finally:
        server.stop()


@pytest.mark.skipif(usable_cpus() < 2 or not hasattr(os, "sched_setaffinity"),
                    reason="one core, or no affinity (macOS): a worker's pool is a process per host core")  # fmt: skip
def test_ragscore_worker_sizes_its_pool_by_the_cores_it_may_use(tmp_path: Path, home: Path) -> None:
    """Confined to one core (taskset, a cpuset, systemd's AllowedCPUs), its cpu worker still started a process per
    core of the whole host, which then fought over that one."""
    server = RedisProcess(tmp_path / "redis").start()
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": f"redis://127.0.0.1:{server.port}/0"}
    core = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "worker", "-Q", "cpu"], stderr=subprocess.PIPE,
                            text=True, cwd=ROOT, env=env, start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, {core}))  # fmt: skip
    try:
        assert proc.stderr is not None
        said = next_line(proc.stderr, 180)
        assert said.startswith("workers up for cpu"), said
        celery = [line for c in psutil.Process(proc.pid).children() if "celery" in (line := command_line(c))]
        assert celery and celery[0][celery[0].index("-c") + 1] == "1", celery
    finally:
        try:
            stop_worker_command(proc)
        finally:
            server.stop()


def test_worker_and_submit_warn_of_a_redis_that_may_evict_a_runs_work(tmp_path: Path, home: Path) -> None:
    """A managed Redis's default maxmemory-policy (volatile-lru) evicts queued tasks and results once it fills (a
    run's keys have TTLs), losing them without an error; docs/settings.md required noeviction, and nothing said so."""
    server = RedisProcess(tmp_path / "redis", "--maxmemory-policy", "volatile-lru", "--maxmemory", "1gb").start()
    url = f"redis://127.0.0.1:{server.port}/0"
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": url}
    warning = f"Warning: the Redis at {url}: its maxmemory-policy is volatile-lru, not noeviction"
    try:
        _warned_at_worker_and_submit_until_noeviction(env, warning, server.port)
    finally:
        server.stop()


#: `ragscore submit` of the quickstart, as the eviction tests run it.
QUICKSTART_SUBMIT = [sys.executable, "-m", "orchestrator.cli", "submit", "examples/quickstart/data.jsonl", "--suite",
                     "examples/quickstart/suite.yaml"]  # fmt: skip


def _warned_at_worker_and_submit_until_noeviction(env: dict[str, str], warning: str, evicting_port: int) -> None:
    """``warning`` is said by `ragscore worker` and by `submit` under ``env``; once the Redis on ``evicting_port`` is
    set to noeviction, `submit` says no eviction warning."""
    said = "".join(_worker_lines_until_up(env, "cpu"))
    assert warning in said and "workers up for cpu" in said, said
    sent = subprocess.run(QUICKSTART_SUBMIT, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert sent.returncode == 0 and warning in sent.stderr, sent.stderr
    redis.Redis(port=evicting_port).config_set("maxmemory-policy", "noeviction")
    sent = subprocess.run(QUICKSTART_SUBMIT, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert sent.returncode == 0 and "maxmemory-policy" not in sent.stderr, sent.stderr


def test_worker_and_submit_warn_of_a_result_backend_that_may_evict_a_runs_chords(tmp_path: Path, home: Path) -> None:
    """RAGSCORE_RESULT_BACKEND on its own Redis holds Celery's chord counters, which fire a run's aggregate: one that
    evicts (allkeys-lru) lost them under memory pressure and the run never finished, while `ragscore worker` and
    `submit` checked only the broker's Redis (and the store's). They warn of it by name, and of what it costs there;
    not where it never evicts, nor twice where it is the broker's server in another database. `ragscore worker`
    checks the run store's Redis on its own server too (RAGSCORE_STORE_URL), where its workers write results."""
    from orchestrator.connection import BACKEND_EVICTS, BACKEND_REDIS

    evicting = ("--maxmemory-policy", "allkeys-lru", "--maxmemory", "1gb")
    broker, backend = RedisProcess(tmp_path / "broker").start(), RedisProcess(tmp_path / "backend", *evicting).start()
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_BROKER_URL": broker.url,
           "RAGSCORE_RESULT_BACKEND": backend.url}  # fmt: skip
    warning = (f"Warning: {BACKEND_REDIS} at {backend.url}: its maxmemory-policy is allkeys-lru, not noeviction: once "
               f"it fills, it evicts {BACKEND_EVICTS}")  # fmt: skip
    try:
        _warned_at_worker_and_submit_until_noeviction(env, warning, backend.port)
        redis.Redis(port=broker.port).config_set("maxmemory-policy", "allkeys-lru")
        redis.Redis(port=broker.port).config_set("maxmemory", "1gb")
        beside = env | {"RAGSCORE_RESULT_BACKEND": f"redis://127.0.0.1:{broker.port}/1"}
        said = "".join(_worker_lines_until_up(beside, "cpu"))
        assert said.count("its maxmemory-policy is") == 1 and f"the Redis at {broker.url}" in said, said
        sent = subprocess.run(QUICKSTART_SUBMIT, capture_output=True, text=True, cwd=ROOT, env=beside, timeout=300)
        assert sent.returncode == 0 and sent.stderr.count("its maxmemory-policy is") == 1, sent.stderr
        redis.Redis(port=broker.port).config_set("maxmemory-policy", "noeviction")
        redis.Redis(port=backend.port).config_set("maxmemory-policy", "allkeys-lru")
        store_apart = {k: v for k, v in env.items() if k != "RAGSCORE_RESULT_BACKEND"} | {
            "RAGSCORE_STORE_URL": backend.url
        }  # where the workers write every result: checked by `ragscore worker` too
        said = "".join(_worker_lines_until_up(store_apart, "cpu"))
        assert said.count("its maxmemory-policy is") == 1 and f"Warning: the Redis at {backend.url}: " in said, said
    finally:
        backend.stop()
        broker.stop()


def test_run_and_resume_on_a_cluster_warn_of_a_redis_that_may_evict_a_runs_work(tmp_path: Path, home: Path) -> None:
    """`ragscore run --broker` and `ragscore resume` sent a run's work to a Redis that evicts any key once it fills
    (allkeys-lru) without a word: only `ragscore worker` and `submit` warned of it. They warn as those do (they
    logged a bare line, where `submit` and `worker` said `Warning: ...`), and evaluate() with an EvictionWarning (not
    a RuntimeWarning, which a test suite's `-W error::RuntimeWarning` for numpy would make a refusal)."""
    from orchestrator import evaluate
    from orchestrator.api import EvictionWarning

    server = RedisProcess(tmp_path / "redis", "--maxmemory-policy", "allkeys-lru", "--maxmemory", "1gb").start()
    worker = WorkerProcess(server.url, "cpu", tmp_path / "worker-home", concurrency=1).start()
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(3))
    suite, out = _suite(tmp_path, {"metrics": ["exact_match"]}), tmp_path / "out"
    warning = f"Warning: the Redis at {server.url}: its maxmemory-policy is allkeys-lru, not noeviction"
    try:
        with pytest.warns(EvictionWarning, match="its maxmemory-policy is allkeys-lru, not noeviction"):
            evaluate(data, {"metrics": ["exact_match"]}, server.url, out=tmp_path / "python")
        ran = ragscore("run", str(data), "--suite", str(suite), "--out", str(out), "--broker", server.url, home=home,
                       env={"COLUMNS": "250"})  # fmt: skip
        assert ran.returncode == 0 and warning in ran.stderr, ran.stderr
        resumed = ragscore("resume", str(out), "--broker", server.url, home=home, env={"COLUMNS": "250"})
        assert resumed.returncode == 0 and warning in resumed.stderr, resumed.stderr
        redis.Redis(port=server.port).config_set("maxmemory-policy", "noeviction")
        resumed = ragscore("run", "--resume", str(out), "--broker", server.url, home=home, env={"COLUMNS": "250"})
        assert resumed.returncode == 0 and "maxmemory-policy" not in resumed.stderr, resumed.stderr
    finally:
        worker.stop()
        server.stop()


@pytest.mark.parametrize(
    "command",
    [["submit", "examples/quickstart/data.jsonl", "--suite", "examples/quickstart/suite.yaml"], ["worker", "-Q", "cpu"],
     ["flower", "--no-auth"]],
)  # fmt: skip
def test_a_broker_url_naming_its_database_as_db_is_refused_saying_to_name_it_in_its_path(
    home: Path, redis_server: RedisProcess, command: list[str]
) -> None:
    """kombu, Celery's broker client, takes ``?db=4`` as a keyword it refuses: submit (after writing its run), a
    worker and Flower each died with a TypeError traceback on a Redis that answers."""
    url = f"redis://:s3cret@127.0.0.1:{redis_server.port}?db=4"
    result = ragscore(*command, "--broker", url, home=home, env={"COLUMNS": "250"}, timeout=120)
    said = " ".join(result.stderr.split())
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "names its database as ?db=, which Celery's broker client (kombu) refuses: name it in its path" in said
    assert "s3cret" not in result.stderr


def test_an_embedded_run_with_a_short_visibility_timeout_is_refused_before_anything_starts(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once only the commands that send work checked the visibility timeout, an embedded `ragscore run` (and
    `evaluate()`) started its private Redis before the check refused it: refused now before anything is started."""
    from orchestrator import evaluate
    from ragscore_workers.errors import ConfigError

    data = write_jsonl(tmp_path / "d.jsonl", make_rows(2))
    suite = _suite(tmp_path, {"metrics": ["exact_match"]})
    said = "Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above the longest hard time limit of a task"
    result = ragscore("run", str(data), "--suite", str(suite), "--out", str(tmp_path / "out"), home=home,
                      env={"RAGSCORE_VISIBILITY_TIMEOUT_S": "400", "COLUMNS": "250"})  # fmt: skip
    assert result.returncode == 2 and said in " ".join(result.stderr.split()), result.stderr
    monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", "400")
    with pytest.raises(ConfigError, match="RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above"):
        evaluate(data, {"metrics": ["exact_match"]}, out=tmp_path / "api")
    assert not any(home.iterdir()), list(home.rglob("*"))  # no embedded Redis was started
    assert not (tmp_path / "out").exists() and not (tmp_path / "api").exists()


def test_a_resume_or_an_evaluate_with_a_short_visibility_timeout_touches_nothing_before_it_is_refused(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded `ragscore resume DIR` (and `run --resume DIR`) started the embedded Redis to read the run's suite
    before run() refused the timeout; `run --junit FILE` removed the last run's report there first; `evaluate()`
    claimed its out= first (one held by another run was refused as in use, not for the setting)."""
    from concurrent.futures import ThreadPoolExecutor

    from orchestrator import evaluate
    from orchestrator.out_claim import claim_out_dir
    from ragscore_workers.errors import ConfigError

    short = {"RAGSCORE_VISIBILITY_TIMEOUT_S": "400", "COLUMNS": "250"}
    said = "Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above the longest hard time limit of a task"
    (home / "redis").mkdir()  # embedded runs were made here: a resume would start their Redis from its data
    done = tmp_path / "done"
    done.mkdir()
    (done / "run.json").write_text(json.dumps({"run_id": "r-1", "mode": "embedded"}))
    junit = tmp_path / "last.xml"
    junit.write_text("<testsuites/>")
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(2))
    suite = _suite(tmp_path, {"metrics": ["exact_match"]})
    for args in (["resume", str(done)], ["run", "--resume", str(done)],
                 ["run", str(data), "--suite", str(suite), "--out", str(tmp_path / "out"), "--junit", str(junit),
                  "--fail-under", "exact_match=0.5"]):  # fmt: skip
        refused = ragscore(*args, home=home, env=short)
        assert refused.returncode == 2 and said in " ".join(refused.stderr.split()), (args, refused.stderr)
        assert not any((home / "redis").iterdir()), (args, list(home.rglob("*")))  # no embedded Redis was started
    assert junit.read_text() == "<testsuites/>"
    monkeypatch.setenv("RAGSCORE_VISIBILITY_TIMEOUT_S", "400")
    held = tmp_path / "held"
    with claim_out_dir(held), ThreadPoolExecutor(1) as pool:  # another run's (a thread here: a claim of its own)
        with pytest.raises(ConfigError, match="RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above"):
            pool.submit(evaluate, make_rows(2), {"metrics": ["exact_match"]}, out=held).result()


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"RAGSCORE_BROKER_URL": "redis://127.0.0.1:{port}/0", "RAGSCORE_VISIBILITY_TIMEOUT_S": "15m"},
         "Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='15m'"),
        ({"RAGSCORE_BROKER_URL": "redis://127.0.0.1:{port}/0", "RAGSCORE_VISIBILITY_TIMEOUT_S": "400"},
         "Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above"),
        ({"RAGSCORE_BROKER_URL": "redis://:ab/cd+ef=@127.0.0.1:{port}/0"}, "Bad setting: RAGSCORE_BROKER_URL"),
        ({}, "no broker: set RAGSCORE_BROKER_URL"),
    ],
)  # fmt: skip
def test_a_plain_celery_worker_with_a_bad_setting_or_no_broker_stops_saying_why(
    home: Path, settings: dict[str, str], said: str
) -> None:
    """The worker command of every compose service and k8s Deployment: it fell back to amqp://localhost, without
    ragscore's settings, and retried it forever."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGSCORE_", "CELERY_"))}
    command = [sys.executable, "-m", "celery", "-A", "ragscore_workers.app", "worker", "-Q", "cpu,control", "-c", "1"]
    with closed_port() as port:
        env |= {"RAGSCORE_HOME": str(home), **{k: v.format(port=port) for k, v in settings.items()}}
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert result.returncode != 0 and said in result.stderr, result.stderr[-2000:]
    assert "amqp://" not in result.stderr + result.stdout and "ab/cd" not in result.stderr


def test_a_ragscore_home_written_with_a_tilde_or_url_characters_is_used_as_written(tmp_path: Path) -> None:
    """``RAGSCORE_HOME=~/x`` put Redis in the user's ``x`` but the worker logs in a ``./~/x`` directory; a ``#``
    or ``%`` in it cut the private Redis's socket URL, and the run failed after 20 s of retries."""
    user, here = tmp_path / "user", tmp_path / "cwd"
    here.mkdir()
    data, out = write_jsonl(tmp_path / "d.jsonl", make_rows(5)), tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSCORE_")}
    env |= {"HOME": str(user), "RAGSCORE_HOME": "~/rs#a%20", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite",
               str(_suite(tmp_path, GOOD_SUITE)), "--out", str(out), "-q"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=here, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert list(here.iterdir()) == []  # no "~" directory where it ran
    assert (user / "rs#a%20" / "redis").is_dir() and any((user / "rs#a%20" / "logs").iterdir())


def test_a_report_that_cannot_be_written_says_so_and_how_to_finish(tmp_path: Path, home: Path) -> None:
    """An OSError while the reports were written (ENOSPC on a full disk) ended in a 124-line traceback with no hint;
    what was scored is kept, no half-written report is left, and the resume writes the reports once it can."""
    data = write_jsonl(tmp_path / "d.jsonl", make_rows(20))
    suite = _suite(tmp_path, GOOD_SUITE)
    out = tmp_path / "out"
    (out / "items.csv").mkdir(parents=True)  # items.csv, written whole, cannot replace a directory: IsADirectoryError
    failed = ragscore("run", str(data), "--suite", str(suite), "--out", str(out), home=home)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert f"Error: Is a directory ({out / 'items.csv'})" in failed.stderr
    assert f"ragscore run --resume {out}" in failed.stderr
    assert not (out / "items.jsonl").exists()  # written with items.csv: not left without it
    assert sorted(p.name for p in out.iterdir()) == ["items.csv", "run.json"]  # the partial files are removed
    (out / "items.csv").rmdir()
    resumed = ragscore("run", "--resume", str(out), home=home)
    assert resumed.returncode == 0, resumed.stderr
    assert len((out / "items.jsonl").read_text().splitlines()) == 20


@pytest.mark.parametrize(
    ("name", "damage", "said"),
    [
        ("summary.json", lambda text: text[: len(text) // 2], "summary.json: not a summary.json ragscore wrote (its"),
        ("summary.json", lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "run_id"}),
         "summary.json: not a summary.json ragscore wrote (run_id: Field required)"),
        ("run_info.json", lambda text: text[:-2], "run_info.json: not a run_info.json ragscore wrote (Expecting"),
        ("failed_rows.jsonl", lambda text: text + '{"line": 7, "raw": \n',
         "failed_rows.jsonl:2: not a failed_rows.jsonl line (Expecting value"),
        ("items.jsonl", lambda text: text + '{"id": 7, "metrics": {}}\n',  # hand-edited: its TypeError's traceback
         "items.jsonl:7: not an items.jsonl line (id and system are text: id 7, system None)"),
    ],
)  # fmt: skip
def test_a_damaged_output_dir_is_a_clear_error_for_report_and_compare(
    tmp_path: Path, home: Path, name: str, damage, said: str
) -> None:
    """A run's --out DIR cut short by a copy, edited, or from another version: ``report`` and ``compare`` ended in a
    page of traceback (exit 1); now one line naming the file and what is wrong with it, exit 2."""
    rows = [json.dumps(r) for r in make_rows(6)]
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join([*rows, "{broken"]) + "\n")  # one unreadable row: failed_rows.jsonl has a line
    out = tmp_path / "out"
    ran = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(out), "-q", home=home)
    assert ran.returncode == 0, ran.stderr
    path = out / name
    path.write_text(damage(path.read_text()))
    shutil.copytree(out, tmp_path / "copy")  # compare refuses a run given twice
    for args in (["report", str(out), "--format", "json", "--out", str(tmp_path / "again")],
                 ["compare", str(out), str(tmp_path / "copy"), "--out", str(tmp_path / "cmp")]):  # fmt: skip
        result = ragscore(*args, home=home, env={"COLUMNS": "400"})
        if name == "failed_rows.jsonl" and args[0] == "compare":
            assert result.returncode == 0, result.stderr  # compare reads no unreadable rows
            continue
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"Error: {path}"), result.stderr
        assert said in result.stderr and "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_an_output_file_cut_inside_a_utf8_character_is_a_clear_error(tmp_path: Path, home: Path) -> None:
    """A copy cut short ends its last line inside a character (the "é" of a question): ``report`` ended in a
    UnicodeDecodeError traceback, read before the line was parsed."""
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join([*(json.dumps(r) for r in make_rows(6)), "{broken"]) + "\n")
    out = tmp_path / "out"
    ran = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(out), "-q", home=home)
    assert ran.returncode == 0, ran.stderr
    for name in ("items.jsonl", "failed_rows.jsonl"):
        path = out / name
        whole = path.read_bytes()
        path.write_bytes(whole + '{"id": "café"'.encode()[:-2])  # cut inside the é
        result = ragscore("report", str(out), "--format", "json", "--out", str(tmp_path / "again"), home=home,
                          env={"COLUMNS": "400"})  # fmt: skip
        assert result.returncode == 2, result.stderr
        cut_line = len(whole.splitlines()) + 1
        assert result.stderr.startswith(f"Error: {path}:{cut_line}: not a"), result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
        path.write_bytes(whole)


def test_quiet_still_says_rows_were_left_unscored(tmp_path: Path, home: Path) -> None:
    """``-q`` drops progress and the table; a run that silently scored fewer rows than the dataset has (exit 0,
    nothing said) read as a clean run in CI."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(make_rows(1)[0]) + "\n{broken\n")
    out = tmp_path / "out"
    result = ragscore("run", str(data), "--suite", str(_suite(tmp_path, GOOD_SUITE)), "--out", str(out), "-q",
                      home=home)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # no table
    said = " ".join(result.stderr.split())
    assert "1 unreadable row not scored; the first, line 2: invalid JSON" in said, result.stderr
    assert f"(each in {out / 'failed_rows.jsonl'})" in said


def test_run_and_results_refuse_an_out_dir_holding_files_of_the_users_with_report_names(
    tmp_path: Path, home: Path
) -> None:
    """``--out other`` holding the user's own summary.json and items.csv (no ragscore run wrote them) exited 0 and
    wrote over both, with no warning: refused (exit 2) before the run starts, naming the files, nothing written."""
    other = tmp_path / "other"
    before = users_files(other)
    data, suite = write_jsonl(tmp_path / "d.jsonl", make_rows(3)), _suite(tmp_path, GOOD_SUITE)
    refused = ragscore("run", str(data), "--suite", str(suite), "--out", str(other), "-q", home=home,
                       env={"COLUMNS": "300"})  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "items.csv, summary.json" in refused.stderr and "choose another --out or remove them" in refused.stderr
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before  # no run.json, no lock file left
    done = ragscore("run", str(data), "--suite", str(suite), "--out", str(tmp_path / "o"), "-q", home=home)
    assert done.returncode == 0, done.stderr
    run_id = json.loads((tmp_path / "o" / "run.json").read_text())["run_id"]
    for command in (("results", run_id, "--out", str(other)), ("resume", run_id, "--out", str(other))):
        refused = ragscore(*command, "-q", home=home, env={"COLUMNS": "300"})
        assert refused.returncode == 2 and "items.csv, summary.json" in refused.stderr, (command, refused.stderr)
        assert {p.name: p.read_bytes() for p in other.iterdir()} == before
    # What `ragscore report` writes alone (one format, no run.json) is ragscore's: a run into that DIR, as into the
    # default ragscore-out after `ragscore report RUN_ID`, was refused as the user's ("no ragscore run wrote them").
    reports = tmp_path / "reports"
    for fmt in ("md", "html", "csv"):
        wrote = ragscore("report", run_id, "--format", fmt, "--out", str(reports), home=home)
        assert wrote.returncode == 0, wrote.stderr
    assert sorted(p.name for p in reports.iterdir()) == ["items.csv", "report.html", "report.md"]
    again = ragscore("run", str(data), "--suite", str(suite), "--out", str(reports), "-q", home=home)
    assert again.returncode == 0, again.stderr
    assert _our_processes(home) == [], "the private Redis is shut down again"


def test_a_runs_column_warnings_come_before_its_rows_are_sent_and_its_last_line_once(
    tmp_path: Path, home: Path
) -> None:
    """The near-miss column warnings (README: "before the run") came after ``11 rows to score ...; sending them to
    the queues``, and ``2>log`` showed the last progress line twice in a row."""
    data = tmp_path / "d.csv"
    data.write_text("id,Answer,reference\n" + "".join(f"q{i},Paris,Paris\n" for i in range(11)), encoding="utf-8")
    result = ragscore("run", str(data), "--suite", str(_suite(tmp_path, {"metrics": ["exact_match"]})), "--out",
                      str(tmp_path / "o"), home=home, env={"COLUMNS": "250"})  # fmt: skip
    assert result.returncode == 1, result.stderr  # exact_match scored no item (no row has 'answer'): a run error
    lines = result.stderr.splitlines()
    warned = next(i for i, line in enumerate(lines) if "column 'Answer' (header of" in line)
    sending = next(i for i, line in enumerate(lines) if "11 rows to score (0 unreadable); sending them" in line)
    assert warned < sending, result.stderr
    assert sum("11/11 item×metric outputs (100.0%)" in line for line in lines) == 1, result.stderr
