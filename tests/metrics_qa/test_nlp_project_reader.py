"""The nlp-project reader on small hand-made split files: pairing, guards, and the rows it yields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.datasets import scan_dataset
from orchestrator.datasets.loaders import RowError
from orchestrator.datasets.nlp_project import iter_nlp_project, looks_like_nlp_project, nlp_project_records
from orchestrator.estimate import estimate_run
from orchestrator.suite import load_suite
from ragscore_workers.errors import DatasetError
from ragscore_workers.schemas import Row


def _question(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "doc_id": "gold/news__a1", "question": f"Question {n}?", "answer": f"Gold answer {n}.",
        "evidence_sentences": ["S1", "S2"], "question_type": "A", "edge_case_type": "none",
        "rubric": {"description": "r", "scale": {"1": "bad", "5": "good"}}, **extra,
    }  # fmt: skip


def _pred(n: int, **extra: Any) -> dict[str, Any]:
    docs = [{"doc_id": "news__b2", "score": 1.0, "rank": 2}, {"doc_id": "news__a1", "score": 2.0, "rank": 1}]
    return {"question": f"Question {n}?", "answer": f"Answer {n}.", "retrieved_docs": docs,
            "evidence_sentences": ["S2"], **extra}  # fmt: skip


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    questions = tmp_path / "dev_final_jsonl.txt"
    questions.write_text("\n".join(json.dumps(_question(n)) for n in (1, 2, 3)) + "\n\n", encoding="utf-8")
    preds = tmp_path / "pred.json"
    preds.write_text(
        json.dumps({"q003": _pred(3), "q001": _pred(1), "q002": {"question": "Question 2?", "answer": "x"}})
    )
    corpus = tmp_path / "corpus"
    (corpus / "gold").mkdir(parents=True)
    doc = {"doc_id": "gold/news__a1", "sentences": [{"sid": "S1", "text": "One."}, {"sid": "S2", "text": "Two."}]}
    (corpus / "gold" / "news__a1.txt").write_text(json.dumps(doc))
    (corpus / "news__b2.txt").write_text("plain text, not segmented")
    return questions, preds, corpus


def test_rows_pair_predictions_by_question_number(files: tuple[Path, Path, Path]) -> None:
    rows = list(iter_nlp_project(*files, system="ext3"))
    assert [r["id"] for r in rows] == ["q001", "q002", "q003"]
    first = Row.model_validate(rows[0])
    assert first.answer == "Answer 1." and first.reference == "Gold answer 1." and first.question == "Question 1?"
    assert first.gold_doc_id == "news__a1" and first.metadata["doc_id"] == "gold/news__a1"  # gold/ dropped
    assert first.retrieved_doc_ids == ["news__a1", "news__b2"]  # ordered by rank
    assert first.gold_evidence_sentences == ["S1", "S2"] and first.evidence_sentences == ["S2"]
    assert first.sentences == {"S1": "One.", "S2": "Two."} and first.system == "ext3" and first.key == "ext3::q001"
    assert first.rubric is not None and first.rubric.scale["5"] == "good"
    assert rows[2]["answer"] == "Answer 3." and rows[2]["metadata"]["prediction_key"] == "q003"
    # a prediction without citations or retrieval (the LLM-only baseline) cited and retrieved nothing
    assert rows[1]["evidence_sentences"] == [] and rows[1]["retrieved_doc_ids"] == []


def test_keys_that_are_not_numbered_pair_by_position(files: tuple[Path, Path, Path]) -> None:
    questions, preds, _ = files
    preds.write_text(json.dumps({"first": _pred(1), "second": _pred(2), "third": _pred(3)}))
    assert [r["answer"] for r in iter_nlp_project(questions, preds)] == ["Answer 1.", "Answer 2.", "Answer 3."]


def test_a_prediction_for_another_question_is_a_bad_row(files: tuple[Path, Path, Path]) -> None:
    questions, preds, _ = files
    preds.write_text(json.dumps({"q001": _pred(2), "q002": _pred(2)}))
    records = list(nlp_project_records(questions, preds))
    assert isinstance(records[0][1], RowError) and records[0][0] == 1
    assert records[0][1].error == "prediction 'q001' answers a different question: 'Question 2?'"
    assert records[1][1]["answer"] == "Answer 2."
    assert "answer" not in records[2][1] and "evidence_sentences" not in records[2][1]  # no prediction: unscorable


def test_unreadable_lines_and_extra_predictions(files: tuple[Path, Path, Path]) -> None:
    questions, preds, _ = files
    questions.write_text(json.dumps(_question(1)) + "\n{broken\n" + json.dumps({"question": "no doc"}) + "\n")
    records = list(nlp_project_records(questions))
    assert [type(r).__name__ for _, r in records] == ["dict", "RowError", "RowError"]
    assert records[2][1].error == "question lacks doc_id, evidence_sentences" and records[2][0] == 3
    with pytest.raises(DatasetError, match=r"dev_final_jsonl.txt:2: invalid JSON"):
        list(iter_nlp_project(questions))
    questions.write_text(json.dumps(_question(1)) + "\n")
    with pytest.raises(DatasetError, match="2 predictions beyond the 1 question: q002, q003$"):
        list(nlp_project_records(questions, preds))


def test_predictions_beyond_the_questions_are_named_by_their_keys(files: tuple[Path, Path, Path]) -> None:
    """The error said "5 prediction(s) beyond the 8 questions, first 9": a position, where the file has q009."""
    questions, preds, _ = files
    questions.write_text("".join(json.dumps(_question(i)) + "\n" for i in range(1, 9)))
    preds.write_text(json.dumps({f"q{i:03d}": _pred(i) for i in range(1, 14)}))
    with pytest.raises(DatasetError, match="5 predictions beyond the 8 questions: q009, q010, q011 and 2 more$"):
        list(nlp_project_records(questions, preds))
    preds.write_text(json.dumps({f"answer-{i}": _pred(i) for i in range(1, 10)}))  # keys paired by position
    with pytest.raises(DatasetError, match="1 prediction beyond the 8 questions: answer-9$"):
        list(nlp_project_records(questions, preds))


def test_missing_files_are_dataset_errors(files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    questions, preds, corpus = files
    with pytest.raises(DatasetError, match="Predictions file not found"):
        list(nlp_project_records(questions, tmp_path / "nope.json"))
    with pytest.raises(DatasetError, match="Corpus directory not found"):
        list(nlp_project_records(questions, preds, tmp_path / "nope"))
    preds.write_text("[1, 2]")
    with pytest.raises(DatasetError, match="expected an object keyed q001"):
        list(nlp_project_records(questions, preds))


def test_sniffing_the_questions_file(files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    assert looks_like_nlp_project(files[0])
    other = tmp_path / "plain.jsonl"
    other.write_text('{"id": 1, "question": "q", "answer": "a"}\n')
    assert not looks_like_nlp_project(other) and not looks_like_nlp_project(files[1])


def test_predictions_given_with_a_file_that_is_no_questions_file_is_refused_saying_why(
    files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """--predictions made any dataset read as nlp-project questions: a plain JSONL's every row then failed with
    "question lacks doc_id, evidence_sentences", which did not say the option was the cause."""
    from orchestrator.datasets.loaders import detect_format, iter_records

    questions, preds, _ = files
    assert detect_format(questions, {"predictions": preds}) == "nlp-project"
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"id": 1, "question": "q", "answer": "a"}\n{"id": 2, "question": "r", "answer": "b"}\n')
    with pytest.raises(DatasetError, match=r"--predictions is an option of --format nlp-project.*plain.jsonl does not"):
        iter_records(plain, None, {"predictions": preds})
    with pytest.raises(DatasetError, match=r"--predictions .*plain.jsonl: not valid JSON"):  # the data as predictions
        list(nlp_project_records(questions, plain))


def test_questions_read_without_predictions_are_said_to_have_no_answers(files: tuple[Path, Path, Path]) -> None:
    """The questions file has an ``answer`` (the gold one, read as reference): without --predictions, "no row has
    'answer' (is it a column named otherwise?)" alone sent the user looking at a column that is there."""
    questions, preds, corpus = files
    alone = scan_dataset(questions, None, lambda _: None, {"corpus": corpus}).warnings()
    assert any("read without --predictions" in w and "gold answer" in w for w in alone), alone
    assert scan_dataset(questions, None, lambda _: None, {"predictions": preds}).warnings() == []


def test_questions_a_target_answers_are_not_said_to_lack_predictions(files: tuple[Path, Path, Path]) -> None:
    """A suite target asks the system each question: its answers are the system's, so no --predictions is needed
    (the warning said to give them, or a target, of a run that had one)."""
    questions, _, corpus = files
    target = load_suite({"metrics": ["exact_match"], "targets": [{"system": "t", "url": "http://127.0.0.1:9/ask"}]})
    asked = estimate_run(questions, target, fmt_options={"corpus": corpus}).warnings
    assert not [w for w in asked if "--predictions" in w], asked
    alone = estimate_run(questions, load_suite({"metrics": ["exact_match"]}), fmt_options={"corpus": corpus}).warnings
    assert any("read without --predictions" in w for w in alone), alone


def test_a_questions_file_named_jsonl_read_as_plain_rows_is_said_to_need_its_format(
    files: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The repository's own example, examples/nlp-project/dev_questions.jsonl, run without --format: a ``.jsonl`` is
    read as plain rows, so the warnings said only "no row has 'gold_doc_id' ... (is it a column named otherwise?)",
    never that the file is the NLP project's questions file, which --format nlp-project reads."""
    questions, preds, _ = files
    named_jsonl = tmp_path / "dev_questions.jsonl"
    named_jsonl.write_text(questions.read_text(encoding="utf-8"), encoding="utf-8")
    said = scan_dataset(named_jsonl, None, lambda _: None).warnings()
    assert any(
        "looks like the NLP project's questions file" in w and "--format nlp-project --predictions" in w for w in said
    ), said
    assert scan_dataset(named_jsonl, "jsonl", lambda _: None).warnings() == []  # read so on purpose: not said
    assert scan_dataset(named_jsonl, None, lambda _: None, {"predictions": preds}).warnings() == []
    own = tmp_path / "own.jsonl"  # rows of ragscore's layout that keep a doc_id column: not said
    own.write_text(json.dumps({**_question(1), "gold_doc_id": "news__a1"}) + "\n", encoding="utf-8")
    assert not [w for w in scan_dataset(own, None, lambda _: None).warnings() if "questions file" in w]
