"""What a resolved suite warns of before a run, from the row fields a dataset has."""

from __future__ import annotations

from orchestrator.suite import load_suite


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
