"""exact_match and recall_at_k against hand-computed expectations, including unscorable cases."""

from __future__ import annotations

import pytest

from ragscore_workers.answers import NO_RETRIEVAL
from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.exact_match import exact_match
from ragscore_workers.metrics.registry import NoParams, get_metric
from ragscore_workers.metrics.retrieval import RecallParams, recall_at_k
from ragscore_workers.schemas import Row


@pytest.mark.parametrize(
    ("answer", "reference", "score"),
    [
        ("Paris", "paris", 1.0),
        ("The Heart.", "heart", 1.0),
        ("Brasilia", "Brasília", 1.0),
        ("  carbon   dioxide ", "Carbon dioxide", 1.0),
        ("Lyon", "Paris", 0.0),
        ("", "Paris", 0.0),
        # numbers keep what makes them different numbers; names keep ++ and #
        ("35", "3.5", 0.0),
        ("-5", "5", 0.0),
        ("10:30", "1030", 0.0),
        ("1/2", "12", 0.0),
        ("C", "C++", 0.0),
        ("C#", "C", 0.0),
        ("3.5", "3.5.", 1.0),
        ("1,000", "1000", 1.0),
        ("12,5", "125", 0.0),  # a decimal comma is not a thousands separator
        (".5", "5", 0.0),  # a leading decimal point
        ("1.5e-3", "1.5e3", 0.0),  # an exponent's sign
        ("1,5 kg", "15 kg", 0.0),
        ("12,5", "12,5.", 1.0),
        ("It costs $1,000.", "it costs 1000", 1.0),
        ("U.S.", "US", 1.0),
        ("C++", "c++", 1.0),
        ("-5 degrees", "\u22125 degrees", 1.0),  # a Unicode minus is a minus
        # numbers compare as written, as in SQuAD (which reads "3.0" as "30"): not by value
        ("3.0", "3", 0.0),
        ("007", "7", 0.0),
        ("1e3", "1000", 0.0),
        ("3.0", "3.0", 1.0),
        # every Unicode punctuation mark goes, as in MLQA's multilingual evaluation (not only ASCII's)
        ("東京。", "東京", 1.0),
        ("「東京」", "東京", 1.0),
        ("¡Sí!", "si", 1.0),
        ("„Berlin“", "Berlin", 1.0),
        ("‹Rome›", "Rome", 1.0),
        ("北京、上海", "北京上海", 1.0),
        ("25 °C", "25 C", 0.0),  # a symbol is not punctuation
        # accents of Latin, Greek, Cyrillic letters and Arabic / Hebrew vowel points go; marks that make another
        # letter elsewhere stay (kana voicing: bus is not pass; Thai tones: horse is not "come")
        ("Ёлка", "елка", 1.0),
        ("مُحَمَّد", "محمد", 1.0),
        ("バス", "パス", 0.0),
        ("ม้า", "มา", 0.0),
        ("ば", "は\u3099", 1.0),
        ("Straße", "STRASSE", 1.0),
        # invisible format characters (category Cf) go: zero-width space, soft hyphen, byte-order mark
        ("Paris\u200b", "Paris", 1.0),
        ("Pa\u00adris", "Paris", 1.0),
        ("\ufeffParis", "paris", 1.0),  # case-folded, not only lower-cased (as typed_answer compares)
        # nothing left after normalising: compared as written
        ("An", "The", 0.0),
        ("The", "the", 1.0),
        # ... but punctuation, case and spacing still aside, as SQuAD (which counts any two such texts equal)
        ("A.", "A", 1.0),
        ("THE", "the.", 1.0),
        (" An ", "an!", 1.0),
        ("?", "!", 0.0),  # only punctuation: as written
        ("?\u200b", "?", 1.0),  # ... less its invisible characters
    ],
)
def test_exact_match_normalises(answer: str, reference: str, score: float) -> None:
    assert exact_match(Row(id="x", answer=answer, reference=reference), NoParams()).score == score


def test_exact_match_without_reference_or_answer_is_unscorable_not_zero() -> None:
    no_ref = exact_match(Row(id="x", answer="a"), NoParams())
    no_answer = exact_match(Row(id="x", reference="a"), NoParams())
    assert no_ref.score is None and no_ref.details["reason"] == "no reference"
    assert no_answer.score is None and no_answer.details["reason"] == "no answer"
    blank = exact_match(Row(id="x", answer="", reference="  "), NoParams())
    assert blank.score is None and blank.details["reason"] == "empty reference"  # not a match of nothing


def _recall(retrieved: list[str] | None, gold: str | list[str] | None, k: list[int]) -> dict[str, float | None]:
    out = recall_at_k(Row(id="x", retrieved_doc_ids=retrieved, gold_doc_id=gold), RecallParams(k=k))
    return {name: r.score for name, r in out.items()}


@pytest.mark.parametrize("k", [True, [True], [1, False], [5.0], ["5"]])
def test_recall_cutoffs_that_are_not_whole_numbers_are_a_config_error(k: object) -> None:
    """``k: [true]`` read as ``recall_at_1``: a boolean (or text, or a float) is no cut-off."""
    with pytest.raises(ConfigError, match="recall_at_k.*k"):
        get_metric("recall_at_k").parse_params({"k": k})
    assert get_metric("recall_at_k").parse_params({"k": 5}).k == [5]  # type: ignore[attr-defined]


def test_recall_at_k_and_mrr_by_rank() -> None:
    docs = ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert _recall(docs, "d1", [1, 5]) == {"recall_at_1": 1.0, "recall_at_5": 1.0, "mrr": 1.0}
    assert _recall(docs, "d3", [1, 5]) == {"recall_at_1": 0.0, "recall_at_5": 1.0, "mrr": pytest.approx(1 / 3)}
    assert _recall(docs, "d6", [1, 5]) == {"recall_at_1": 0.0, "recall_at_5": 0.0, "mrr": pytest.approx(1 / 6)}
    assert _recall(docs, "zz", [1, 5]) == {"recall_at_1": 0.0, "recall_at_5": 0.0, "mrr": 0.0}
    assert _recall(docs, ["zz", "d2"], [2]) == {"recall_at_2": 0.5, "mrr": 0.5}  # 1 of 2 gold documents
    # several gold documents: the share found in the top k
    assert _recall(["d1", "d2", "d3", "d4", "d5"], ["d1", "d4", "d9"], [1, 3, 5]) == {
        "recall_at_1": pytest.approx(1 / 3), "recall_at_3": pytest.approx(1 / 3), "recall_at_5": pytest.approx(2 / 3),
        "mrr": 1.0}  # fmt: skip


def test_recall_special_cases() -> None:
    assert _recall(None, "d1", [1]) == {"recall_at_1": 0.0, "mrr": 0.0}  # retrieved nothing: a miss
    assert _recall(["d1"], None, [1, 5]) == {"recall_at_1": None, "recall_at_5": None, "mrr": None}


def test_recall_of_an_llm_alones_row_without_retrieved_ids_is_unscorable_by_design() -> None:
    """A row its target answered without contexts or doc ids (:data:`NO_RETRIEVAL`) says nothing of a retrieval:
    unscorable for lack of retrieved ids (by design: no gate fails it), not a miss, though the row has contexts (the
    dataset's, which a target that does not map them leaves in the row); ids it does have are scored."""
    alone = {NO_RETRIEVAL: True}
    unscored = recall_at_k(Row(id="q", gold_doc_id="d1", contexts=["c"], **alone), RecallParams(k=[1]))
    assert {name: (r.score, r.details.get("reason")) for name, r in unscored.items()} == {
        "recall_at_1": (None, "no retrieved_doc_ids"), "mrr": (None, "no retrieved_doc_ids")}  # fmt: skip
    assert recall_at_k(Row(id="q", gold_doc_id="d1", retrieved_doc_ids=[], **alone), RecallParams(k=[1]))[
        "mrr"].score == 0.0  # fmt: skip
    assert recall_at_k(Row(id="q", **alone), RecallParams(k=[1]))["mrr"].details["reason"] == "no gold_doc_id"


def test_recall_compares_ids_without_surrounding_whitespace_and_drops_blank_gold_ids() -> None:
    # a CSV cell "d1, d2" read as a list, or a gold id typed with a trailing space: the same documents
    assert _recall(["d0", " d1"], "d1 ", [1, 2]) == {"recall_at_1": 0.0, "recall_at_2": 1.0, "mrr": 0.5}
    assert _recall(["d1", "d2"], ["d1", " "], [1]) == {"recall_at_1": 1.0, "mrr": 1.0}  # one gold document, not 2
    assert _recall(["", "d1"], "d1", [1]) == {"recall_at_1": 0.0, "mrr": 0.5}  # a blank retrieved id keeps its rank
    assert _recall(["d1"], [" ", ""], [1]) == {"recall_at_1": None, "mrr": None}  # no gold id: unscorable


def test_an_exact_match_miss_shows_the_two_normalised_texts_a_hit_stores_nothing() -> None:
    miss = exact_match(Row(id="x", answer="The Eiffel Tower, Paris.", reference="eiffel tower"), NoParams())
    assert miss.score == 0.0 and miss.passed is False
    assert miss.details == {"answer": "eiffel tower paris", "reference": "eiffel tower"}
    hit = exact_match(Row(id="x", answer="The Eiffel Tower.", reference="eiffel tower"), NoParams())
    assert hit.score == 1.0 and hit.details == {}
    long = exact_match(Row(id="x", answer="x" + " word" * 100, reference="b"), NoParams())
    assert long.details["answer"] == ("x" + " word" * 100)[:200] + "…" and long.details["reference"] == "b"
