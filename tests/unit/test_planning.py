"""What a resolved suite warns of before a run, from the row fields a dataset has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator.datasets.rows import scan_dataset
from orchestrator.suite import load_suite
from ragscore_workers.answers import NO_RETRIEVAL


def test_a_dataset_with_neither_code_nor_answer_is_warned_of_for_checks_and_code_test() -> None:
    """``checks`` scored no row of a dataset with neither ``code`` nor ``answer`` and nothing said so before the
    run (only code_test had a warning of its own); both are ``needs_one_of`` metrics: one warning, and the run is
    known to score nothing of them."""
    resolved = load_suite({"metrics": ["checks", "code_test", "exact_match"]})
    warnings = resolved.pre_run_warnings({"id", "checks", "reference"}, {"completion"}, set())
    absent = [w for w in warnings if "'code' or 'answer'" in w]
    assert absent == [
        "no row has 'code' or 'answer', which checks, code_test need: they will score no item (the row's `completion` "
        "field is not read: give the program as `code`, renaming the column in the dataset)"
    ], warnings
    assert resolved.scoreless({"id", "checks", "reference"}) == ["checks", "code_test", "exact_match"]
    for one in ("code", "answer"):  # either field is enough
        assert resolved.scoreless({"id", "checks", "reference", one}) == (["exact_match"] if one == "code" else [])
        assert not [w for w in resolved.pre_run_warnings({"id", "checks", one}, set(), set()) if "'code' or" in w]


def test_a_target_returning_no_contexts_is_warned_of_once_naming_the_metrics_unscorable_for_it() -> None:
    """An LLM alone's target (its response map names neither contexts nor retrieved_doc_ids): its rows lack both, so
    the context metrics and recall_at_k will be unscorable for it, said in one line before the run; the dataset's
    absent columns are not said again where every target is such. A dataset that gives contexts gives them to it."""
    llm = {"url": "http://localhost/llm", "response": {"answer": "answer", "contexts": None}}
    metrics = ["quality_checks", "recall_at_k", "context_relevance", "exact_match"]
    fields = {"id", "question", "reference", "gold_doc_id"}
    alone = load_suite({"metrics": metrics, "target": llm}).pre_run_warnings(fields, set(), set())
    assert alone == [
        "the target returns no contexts (its response map names neither contexts nor retrieved_doc_ids: an LLM alone, "
        "which retrieves nothing): recall_at_k, context_relevance will be unscorable for its rows (no contexts or no "
        "retrieved_doc_ids; no failure where other metrics score)"
    ]
    beside = load_suite({"metrics": metrics, "targets": [llm | {"system": "llm"}, {"system": "rag", "url": "http://x",
                         "response": {"retrieved_doc_ids": "ids"}}]})  # fmt: skip
    assert beside.pre_run_warnings(fields, set(), set()) == [alone[0].replace("the target", "target 'llm'")]
    given = load_suite({"metrics": metrics, "target": llm}).pre_run_warnings(fields | {"contexts"}, set(), set())
    assert [w for w in given if "LLM alone" in w] == [
        alone[0].replace("recall_at_k, context_relevance", "recall_at_k").replace("no contexts or ", "")
    ]
    assert load_suite({"metrics": ["exact_match"], "target": llm}).pre_run_warnings(fields, set(), set()) == []
    # verbatim of its rows lacks citations by design only where they lack contexts too (no source to quote): given the
    # dataset's contexts, its rows fail 'no citations', which the dry run says (it will score no item), not by design
    quoted = load_suite({"metrics": ["verbatim", "exact_match"], "target": llm})
    assert (
        "verbatim will be unscorable for its rows (no contexts or no citations;"
        in quoted.pre_run_warnings(fields, set(), set())[0]
    )
    assert quoted.scoreless(fields) == []
    assert not [w for w in quoted.pre_run_warnings(fields | {"contexts"}, set(), set()) if "LLM alone" in w]
    assert quoted.scoreless(fields | {"contexts"}) == ["verbatim"]
    two = load_suite({"metrics": metrics, "targets": [llm | {"system": "a"}, llm | {"system": "b"}]})
    assert two.pre_run_warnings(fields, set(), set())[0].startswith(
        "targets 'a', 'b' return no contexts (their response maps name neither contexts nor retrieved_doc_ids: LLMs "
        "alone, which retrieve nothing): recall_at_k, context_relevance will be unscorable for their rows"
    )


def _scanned_warnings(tmp_path: Path, rows: list[dict[str, Any]], metrics: list[str]) -> list[str]:
    """The pre-run warnings of ``metrics`` for ``rows``, written as a JSONL file and scanned as a run scans it."""
    data = tmp_path / "answers.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    scan = scan_dataset(data, None, on_error=lambda error: None)
    return load_suite({"metrics": metrics}).pre_run_warnings(
        scan.fields_seen, scan.columns_seen, scan.fields_empty, scan.alone
    )


def _mixed(llm: dict[str, Any]) -> list[dict[str, Any]]:
    """Three rows of a RAG system (contexts and retrieved ids) and two of an LLM alone (neither; ``llm`` added)."""
    rag = [{"id": f"q{i}", "system": "rag", "question": "Q?", "answer": "A [1].", "reference": "A",
            "gold_doc_id": "d1", "contexts": ["A."], "retrieved_doc_ids": ["d1"]} for i in range(3)]  # fmt: skip
    alone = [{"id": f"q{i}", "system": "llm", "question": "Q?", "answer": "A.", "reference": "A", "gold_doc_id": "d1"}
             | llm for i in range(2)]  # fmt: skip
    return rag + alone


def test_a_mixed_dataset_says_once_per_system_what_its_llm_alone_rows_lack(tmp_path: Path) -> None:
    """A RAG system's rows with contexts and an LLM alone's without: nothing was said before the run (the warning
    fired only where no row gave contexts). One line per system now names its rows and what is unscorable for them,
    by design where they are marked, recall 0 where not; none of the RAG system."""
    metrics = ["exact_match", "recall_at_k", "context_relevance"]
    marked = _scanned_warnings(tmp_path, _mixed({NO_RETRIEVAL: True}), metrics)
    assert marked == [
        "system 'llm': 2 rows give no contexts nor retrieved_doc_ids where other systems' rows do (marked "
        "'ragscore:no_retrieval': an LLM alone): recall_at_k, context_relevance will be unscorable for them, by design "
        "(no contexts or no retrieved_doc_ids)"
    ], marked
    unmarked = _scanned_warnings(tmp_path, _mixed({}), metrics)
    assert unmarked == [
        "system 'llm': 2 rows give no contexts nor retrieved_doc_ids where other systems' rows do (an LLM alone?): "
        "context_relevance will be unscorable for them (no contexts); recall_at_k scores them 0, as a retrieval that "
        "found nothing (if the system retrieves nothing by design, mark its rows 'ragscore:no_retrieval': true, and "
        "they are unscorable by design)"
    ], unmarked
    assert _scanned_warnings(tmp_path, _mixed({NO_RETRIEVAL: True}), ["exact_match"]) == []
    found_nothing = _scanned_warnings(tmp_path, _mixed({"retrieved_doc_ids": []}), metrics)
    assert not [w for w in found_nothing if "system 'llm'" in w], found_nothing  # retrieval ran: no LLM alone


def test_a_systems_line_leaves_what_no_row_of_the_dataset_has_to_the_datasets_line(tmp_path: Path) -> None:
    """No row of a mixed dataset has evidence_sentences: the LLM alone's line said citation will be unscorable for its
    rows "by design" beside the dataset's "no row has 'evidence_sentences'" line, which says citation scores no item
    at all. A system's line names only what other rows give; a metric that scores no row of the dataset (no
    gold_doc_id anywhere: recall_at_k) is not said to score its rows 0."""
    gold = {"gold_evidence_sentences": ["1"]}
    rows = [row | gold for row in _mixed({NO_RETRIEVAL: True})]
    warnings = _scanned_warnings(tmp_path, rows, ["exact_match", "recall_at_k", "citation"])
    assert warnings == [
        "system 'llm': 2 rows give no contexts nor retrieved_doc_ids where other systems' rows do (marked "
        "'ragscore:no_retrieval': an LLM alone): recall_at_k will be unscorable for them, by design (no "
        "retrieved_doc_ids)",
        "no row has 'evidence_sentences', which citation needs: it will score no item (is it a column named "
        "otherwise?)",
    ], warnings
    cited = [row | {"evidence_sentences": ["1"]} if row["system"] == "rag" else row for row in rows]
    said = _scanned_warnings(tmp_path, cited, ["exact_match", "recall_at_k", "citation"])
    assert said == [warnings[0].replace("recall_at_k will", "recall_at_k, citation will").replace(
        "(no retrieved_doc_ids)", "(no retrieved_doc_ids or no evidence_sentences)")], said  # fmt: skip
    goldless = [{k: v for k, v in row.items() if k != "gold_doc_id"} for row in _mixed({})]
    said = _scanned_warnings(tmp_path, goldless, ["exact_match", "recall_at_k", "context_relevance"])
    assert [w for w in said if "system 'llm'" in w] == [
        "system 'llm': 2 rows give no contexts nor retrieved_doc_ids where other systems' rows do (an LLM alone?): "
        "context_relevance will be unscorable for them (no contexts)"
    ], said
    assert [w for w in said if "recall_at_k" in w] == [
        "no row has 'gold_doc_id', which recall_at_k needs: it will score no item (is it a column named otherwise?)"
    ], said


def test_a_misspelt_contexts_column_is_named_beside_why_no_contexts_is_no_failure() -> None:
    """A ``contxts`` column: the warning named the misspelling but dropped why a dataset without contexts is no
    failure where other metrics score (an LLM alone has none), which it says without the misspelling. It says both."""
    resolved = load_suite({"metrics": ["context_relevance", "exact_match"]})
    fields = {"id", "question", "answer", "reference"}
    warnings = resolved.pre_run_warnings(fields, {"contxts"}, set())
    assert warnings == [
        "no row has 'contexts', which context_relevance needs: it will score no item (a system that retrieves "
        "nothing, an LLM alone, has none: no failure where other metrics score; but the dataset's column 'contxts' is "
        "no row field: rename it 'contexts')"
    ], warnings
    assert resolved.pre_run_warnings(fields, set(), set()) == [warnings[0].split("; but")[0] + "; or is it a column "
                                                               "named otherwise?)"]  # fmt: skip
    assert resolved.scoreless(fields) == []  # no failure, misspelt or not
