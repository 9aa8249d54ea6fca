"""``ragscore metrics NAME`` lists a metric's params with types a user can read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Annotated, Literal, Optional

from pydantic import Field

from orchestrator.cli import _type_name

from ..support import ROOT


def test_type_names_leave_out_pydantic_constraints_and_the_typing_module() -> None:
    price = Annotated[float, Field(ge=0, allow_inf_nan=False)]
    assert _type_name(dict[str, tuple[price, price]]) == "dict[str, tuple[float, float]]"
    assert _type_name(Optional[int]) == "int | None"  # noqa: UP045
    assert _type_name(list[int] | None) == "list[int] | None"
    assert _type_name(Literal["header", "query"]) == '"header" | "query"'
    assert _type_name(float) == "float"


def test_the_params_of_rubric_judge_read_as_types_not_pydantic_internals(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``prices`` read ``dict[str, tuple[Annotated[float, FieldInfo(annotation=NoneType, required=True, ...``."""
    env = {**os.environ, "COLUMNS": "200", "RAGSCORE_HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "metrics", "rubric_judge"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "dict[str, tuple[float, float]]" in result.stdout and "FieldInfo" not in result.stdout


def test_a_param_whose_default_is_unset_says_what_is_used_instead_of_null() -> None:
    """``ragscore metrics code_test`` showed ``timeout_s  float | None  null``: not what a run uses (the suite's
    sandbox.timeout_s). Every registered param left unset says what stands in for it."""
    from orchestrator.cli import _default_text
    from ragscore_workers.metrics.registry import all_metrics

    shown = {(name, field): _default_text(info) for name, mdef in all_metrics().items()
             for field, info in mdef.params_model.model_fields.items()}  # fmt: skip
    assert [key for key, text in shown.items() if text == "null"] == []
    assert shown["code_test", "timeout_s"] == "(the suite's sandbox.timeout_s)"
    assert shown["groundedness", "max_tokens"] == "(16; 2048 for a reasoning judge model)"
    assert shown["rubric_judge", "max_cost"] == "(no limit)"


def test_a_piped_listing_wraps_each_description_at_100_columns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ragscore metrics | less`` and a CI log (stdout no terminal, no COLUMNS) got the table at 80 columns, then a
    row a line: about 330 columns, which no pager or log shows whole. Not a terminal: 100 columns, as ``ragscore
    metrics NAME``, each metric's description wrapped whole under its row."""
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path)}
    env.pop("COLUMNS", None)
    # The registry as a fresh process sees it: this pytest process may hold plug-ins other tests registered.
    listed = "import json; from ragscore_workers.metrics.registry import all_metrics as a; " \
             "print(json.dumps({n: ' '.join(m.description.split()) for n, m in a().items()}))"  # fmt: skip
    fresh = subprocess.run([sys.executable, "-c", listed], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr
    descriptions: dict[str, str] = json.loads(fresh.stdout)
    result = subprocess.run([sys.executable, "-m", "orchestrator.cli", "metrics"], cwd=ROOT, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100, result.stdout
    rows: dict[str, list[str]] = {}  # metric -> its description's lines (a row's next lines leave the name cell empty)
    name = ""
    for cells in [line.split("│")[1:-1] for line in result.stdout.splitlines() if line.count("│") >= 5]:
        name = cells[0].strip() or name
        rows.setdefault(name, []).append(cells[3].strip())
    assert set(rows) == set(descriptions), result.stdout
    for name, text in descriptions.items():
        assert " ".join(" ".join(rows[name]).split()) == text, (name, result.stdout)


def _piped_metric(name: str, tmp_path) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """``ragscore metrics NAME`` with stdout no terminal and no COLUMNS (``| less``, a CI log)."""
    env = {**os.environ, "RAGSCORE_HOME": str(tmp_path)}
    env.pop("COLUMNS", None)
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "metrics", name], cwd=ROOT, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip


def test_one_metric_says_on_stdout_which_row_fields_it_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ragscore metrics NAME`` printed its description to stderr (it is the command's output) and did not say
    which row fields the metric needs, though the registry declares them (``needs``, ``scores_without``)."""
    said = {
        "exact_match": ["row fields it needs: answer, reference (a row lacking one is not scored)"],
        "answer_hallucination": ["row fields it needs: answer, contexts ("],
        "recall_at_k": ["row fields it scores without: retrieved_doc_ids ("],
        "combined": ["it reads the outputs rubric_judge, evidence_overlap of the same suite's metrics"],
    }
    for name, lines in said.items():
        done = _piped_metric(name, tmp_path)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        assert done.stdout.startswith(f"{name} (queue: "), done.stdout
        for line in lines:
            assert line in " ".join(done.stdout.split()), (name, line, done.stdout)


def test_one_metric_piped_wraps_at_100_columns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Piped, ``ragscore metrics quality_checks`` wrote a 284-column line (its fallback_phrases' default), and a
    judge's 141: prose and a params table a reader pages through, wrapped at 100 columns when no terminal or COLUMNS
    says the width."""
    for name in ("quality_checks", "groundedness"):
        done = _piped_metric(name, tmp_path)
        assert done.returncode == 0, done.stderr
        assert "max_tokens" in done.stdout or "fallback_phrases" in done.stdout, done.stdout
        assert max(len(line) for line in done.stdout.splitlines()) <= 100, done.stdout


def test_quality_checks_says_it_needs_a_citation_marker_and_how_to_drop_that_check() -> None:
    """A plain RAG set scored 0 on every row (``no_citation``) while ``ragscore metrics`` said only "heuristic
    issues": the description is the docstring's whole first paragraph, which says so and names the param."""
    from ragscore_workers.metrics.registry import get_metric

    said = get_metric("quality_checks").description
    assert "[1]-style citation marker" in said and 'set the param citation_pattern to "" to drop that check' in said


def test_no_description_speaks_of_the_seed() -> None:
    """answer_relevance read "(the seed's definition ...)": the project's word for the frameworks its metrics come
    from, which a user cannot know. A description names the framework."""
    from ragscore_workers.metrics.registry import all_metrics

    assert [name for name, m in all_metrics().items() if "seed" in m.description.lower()] == []
    assert "as Auto-Analyst defines it" in all_metrics()["answer_relevance"].description


def test_code_test_and_checks_say_they_need_code_or_an_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ragscore metrics code_test`` and ``checks`` said "row fields it needs: none declared", while a row with
    neither ``code`` nor an ``answer`` (code_test: a fenced code block in it) is unscorable."""
    for name in ("code_test", "checks"):
        done = _piped_metric(name, tmp_path)
        said = " ".join(done.stdout.split())
        assert done.returncode == 0, done.stderr
        assert "row fields it needs one of: code, answer (a row with none of them is not scored)" in said, said
        assert "none declared" not in said, said
    assert "the answer's first fenced code block" in " ".join(_piped_metric("code_test", tmp_path).stdout.split())


def test_no_description_shows_rest_markup() -> None:
    """code_test's description read "the row's ``code``": a docstring's reST markup, shown as is by ``ragscore
    metrics``. A description is plain text. Built-in metrics only: the suite's test plug-ins (tests/plugins) are
    registered in this process too once a test has loaded them."""
    from ragscore_workers.metrics.registry import all_metrics

    built_in = {name: m for name, m in all_metrics().items() if m.fn.__module__.startswith("ragscore_workers.")}
    assert "code_test" in built_in and "exact_match" in built_in
    assert [name for name, m in built_in.items() if "``" in m.description] == []


def test_an_output_name_shows_the_metric_that_gives_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ragscore metrics mrr`` (a name of the summary table) was "Unknown metric 'mrr'", exit 2: it now shows
    recall_at_k, saying mrr is one of its outputs. A name no metric gives is still refused."""
    done = _piped_metric("mrr", tmp_path)
    assert done.returncode == 0, done.stderr
    said = "'mrr' is an output of recall_at_k (a suite lists recall_at_k):\nrecall_at_k (queue: "
    assert done.stdout.startswith(said), done.stdout
    assert "gold_doc_id" in done.stdout
    assert _piped_metric("mrrr", tmp_path).returncode == 2
