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
