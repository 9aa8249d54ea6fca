"""Consensus golden answers on a hand-made three-system case whose provenance is known by construction."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import pytest

from orchestrator.consensus import consensus_for, load_outcomes, run_source, split_sentences, write_consensus
from orchestrator.datasets import iter_rows
from orchestrator.reports.files import WRITTEN_LOCK, WRITTEN_NAME
from ragscore_workers.errors import ConfigError
from ragscore_workers.metrics.registry import RunContext, resolve
from ragscore_workers.schemas import Row, Suite
from ragscore_workers.scoring import score_rows

from ..support import write_jsonl
from .helpers import ragscore

POINTS = [
    {"id": "capital", "type": "keyword", "params": {"keywords": ["Paris"], "whole_word": True}, "weight": 3},
    {"id": "river", "type": "keyword", "params": {"keywords": ["Seine"]}, "weight": 2},
    {"id": "founded", "type": "keyword", "params": {"keywords": ["Parisii"]}, "weight": 1},
    {"id": "no_london", "type": "negation", "params": {"keywords": ["London"]}, "weight": 1},
    {"id": "long_enough", "type": "length", "params": {"min": 12}, "weight": 1},  # whole answers only
    {"id": "tokyo", "type": "keyword", "params": {"keywords": ["Tokyo"]}, "weight": 1},  # nobody passes
    {"id": "tone", "type": "keyword", "params": {"keywords": ["museums"]}, "weight": 5, "informational": True},
]
QUESTION = "What is the capital of France, and which river crosses it?"
ANSWERS = {
    "alpha": "Paris is the capital of France. It is a large city with many museums and old bridges.",
    "beta": "The capital is Paris. The Seine flows through Paris and divides it into banks.",
    "gamma": "France's capital city is Lyon. The river Seine crosses it. The Parisii tribe founded it.",
}
# beta passes the heaviest points (capital 3 + river 2): its sentences come first; gamma alone knows the Parisii;
# beta's first sentence also carries no_london; long_enough holds only for whole answers; nobody says Tokyo.
EXPECTED_SENTENCES = [
    {"text": "The capital is Paris.", "system": "beta", "sentence_index": 0, "points": ["capital", "no_london"],
     "weight": 4.0},
    {"text": "The Seine flows through Paris and divides it into banks.", "system": "beta", "sentence_index": 1,
     "points": ["river"], "weight": 2.0},
    {"text": "The Parisii tribe founded it.", "system": "gamma", "sentence_index": 2, "points": ["founded"],
     "weight": 1.0},
]  # fmt: skip


def _rows() -> list[dict]:
    rows = [{"id": "q1", "system": s, "question": QUESTION, "answer": a, "checks": POINTS} for s, a in ANSWERS.items()]
    rows += [{"id": "q2", "system": s, "question": "Name a planet.", "answer": "I cannot say.", "checks": POINTS[:2]}
             for s in ANSWERS]  # fmt: skip
    return rows


def _items(rows: list[dict]) -> list[dict]:
    """Items as a run writes them, scored in-process by the real checks metric."""
    parsed = [Row.model_validate(raw) for raw in rows]
    suite = Suite(metrics=["checks"])
    scores = score_rows(parsed, resolve(suite), RunContext("r", suite))
    return [
        {"id": row.id, "system": row.system, "metrics": {k: v.model_dump() for k, v in s.items()}}
        for row, s in zip(parsed, scores, strict=True)
    ]


def test_split_sentences_keeps_end_punctuation_and_decimals() -> None:
    assert split_sentences("It costs 3.5 euros. Really?  Yes!") == ["It costs 3.5 euros.", "Really?", "Yes!"]


def test_consensus_of_three_systems_has_known_provenance() -> None:
    rows = _rows()[:3]
    items = _items(rows)
    outcomes = {item["system"]: item["metrics"]["checks"]["details"]["points"] for item in items}
    result = consensus_for({r["system"]: Row.model_validate(r) for r in rows}, outcomes)
    assert result["sentences"] == EXPECTED_SENTENCES
    assert result["reference"] == " ".join(s["text"] for s in EXPECTED_SENTENCES)
    assert result["covered"] == ["capital", "river", "founded", "no_london"]
    assert result["uncovered"] == ["tokyo"] and result["unlocalized"] == ["long_enough"]
    assert result["systems"] == ["alpha", "beta", "gamma"]


def test_consensus_needs_checks_results() -> None:
    with pytest.raises(ConfigError, match="scored with the `checks` metric"):
        load_outcomes([{"id": "q1", "metrics": {"exact_match": {"score": 1.0}}}])


@pytest.mark.integration
def test_consensus_command_after_an_embedded_run_reads_the_dataset_from_the_store(tmp_path: Path, home: Path) -> None:
    data = write_jsonl(tmp_path / "answers.jsonl", _rows())
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    run = ragscore("run", data, "--suite", suite, "--out", tmp_path / "run", "-q", home=home)
    assert run.returncode == 0, run.stderr

    out = tmp_path / "golden.jsonl"
    res = ragscore("consensus", tmp_path / "run", "--out", out, home=home)  # no --dataset: from the run's meta
    assert res.returncode == 0, res.stderr
    assert "2 questions, 1 with a consensus reference" in res.stderr
    q1, q2 = [json.loads(line) for line in out.read_text().splitlines()]
    assert q1["id"] == "q1" and q1["question"] == QUESTION
    assert q1["metadata"]["consensus"]["sentences"] == EXPECTED_SENTENCES
    assert q1["reference"] == " ".join(s["text"] for s in EXPECTED_SENTENCES)
    assert "reference" not in q2 and q2["metadata"]["consensus"]["uncovered"] == ["capital", "river"]

    # The file is a dataset the next run reads: every line a valid row, q1 with its reference.
    parsed = [row for _, row in iter_rows(out)]
    assert all(isinstance(r, Row) for r in parsed)
    assert parsed[0].reference == q1["reference"]  # type: ignore[union-attr]

    with_dataset = ragscore("consensus", tmp_path / "run", "--out", tmp_path / "g2.jsonl", "--dataset", data,
                            "--suite", suite, home=home)  # fmt: skip
    assert with_dataset.returncode == 0, with_dataset.stderr
    assert (tmp_path / "g2.jsonl").read_text() == out.read_text()
    no_checks = ragscore("consensus", tmp_path, "--out", tmp_path / "g3.jsonl", home=home)
    assert no_checks.returncode == 2 and "items.jsonl not found" in no_checks.stderr


@pytest.mark.integration
def test_consensus_of_a_run_dir_whose_run_left_the_store_reads_its_run_info(tmp_path: Path, home: Path) -> None:
    """A finished run expires from the store (RAGSCORE_RUN_TTL_S); its --out DIR keeps dataset and suite."""
    data = write_jsonl(tmp_path / "answers.jsonl", _rows())
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    assert ragscore("run", data, "--suite", suite, "--out", tmp_path / "run", "-q", home=home).returncode == 0
    with tempfile.TemporaryDirectory(prefix="rsh-", dir="/tmp") as fresh:  # a store that never saw the run
        res = ragscore("consensus", tmp_path / "run", "--out", tmp_path / "golden.jsonl", home=Path(fresh))
    assert res.returncode == 0, res.stderr
    assert "2 questions, 1 with a consensus reference" in res.stderr
    q1 = json.loads((tmp_path / "golden.jsonl").read_text().splitlines()[0])
    assert q1["metadata"]["consensus"]["sentences"] == EXPECTED_SENTENCES


@pytest.mark.integration
def test_consensus_out_refuses_a_file_it_did_not_write(tmp_path: Path, home: Path) -> None:
    """``consensus --out FILE`` replaced whatever FILE was (a user's file, a run's summary.json, the run's own
    dataset) and exited 0: refused (exit 2, nothing written), an empty file too. What consensus wrote before is
    rewritten."""
    data = write_jsonl(tmp_path / "answers.jsonl", _rows())
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    run = tmp_path / "run"
    assert ragscore("run", data, "--suite", suite, "--out", run, "-q", home=home).returncode == 0
    mine = tmp_path / "mine.json"
    mine.write_text('{"mine": 1}\n')
    for theirs in (mine, run / "summary.json", data, run / "items.jsonl"):
        before = theirs.read_bytes()
        refused = ragscore("consensus", run, "--out", theirs, home=home)
        said = " ".join(refused.stderr.split())
        assert refused.returncode == 2, refused.stderr
        assert f"{theirs.parent} holds {theirs.name}, which ragscore has no record of writing" in said, said
        assert "Traceback" not in said and theirs.read_bytes() == before
    assert ragscore("report", run, "--format", "md", home=home).returncode == 0  # its summary.json is whole
    assert not (run / WRITTEN_NAME).exists() and not (run / WRITTEN_LOCK).exists()  # refused: nothing written
    golden, empty = tmp_path / "golden.jsonl", tmp_path / "empty.jsonl"
    empty.write_text("")
    for out in (golden, golden):  # a new file, consensus's own file again
        wrote = ragscore("consensus", run, "--out", out, home=home)
        assert wrote.returncode == 0, wrote.stderr
    assert json.loads(golden.read_text().splitlines()[0])["metadata"]["consensus"]["sentences"] == EXPECTED_SENTENCES
    assert ragscore("consensus", run, "--out", empty, home=home).returncode == 2  # not ragscore's, if empty
    assert empty.read_bytes() == b""


@pytest.mark.integration
def test_consensus_out_refuses_its_own_file_once_edited_and_replaces_it_unedited(tmp_path: Path, home: Path) -> None:
    """An --out file whose first line was consensus's was replaced whatever the user did to the rest: an edited
    consensus file was lost. Now only a file whose sha256 ragscore recorded when writing it (or one holding the
    very bytes about to be written: an older ragscore's, which recorded none) is replaced."""
    data = write_jsonl(tmp_path / "answers.jsonl", _rows())
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    run = tmp_path / "run"
    assert ragscore("run", data, "--suite", suite, "--out", run, "-q", home=home).returncode == 0
    q1_only = write_jsonl(tmp_path / "q1.jsonl", _rows()[:3])  # the same run, one question: another output
    golden = tmp_path / "golden.jsonl"

    def consensus(out: Path, *more: str | Path) -> tuple[int, str]:
        res = ragscore("consensus", run, "--out", out, *more, home=home)
        return res.returncode, " ".join(res.stderr.split())

    for _ in range(2):  # a new file, then a second run over its own output
        assert consensus(golden) == (0, f"2 questions, 1 with a consensus reference, written to {golden}")
    full = golden.read_bytes()
    assert consensus(golden, "--dataset", q1_only, "--suite", suite)[0] == 0  # unedited: replaced
    assert golden.read_text().count("\n") == 1
    assert consensus(golden)[0] == 0 and golden.read_bytes() == full

    lines = golden.read_text().splitlines(keepends=True)
    edited = lines[0] + lines[1].replace('"q2"', '"q2-mine"') + "my notes\n"  # its first line as consensus wrote it
    golden.write_text(edited)
    code, said = consensus(golden)
    assert code == 2, said
    assert f"{tmp_path} holds golden.jsonl, which ragscore has no record of writing" in said, said
    assert "Nothing was written; choose another --out, or remove it" in said and "Traceback" not in said, said
    assert golden.read_text() == edited
    said = " ".join(ragscore("consensus", run, "--out", golden.name, home=home, cwd=tmp_path).stderr.split())
    assert "the current folder holds golden.jsonl, which" in said, said  # a bare name: not ". holds"
    assert golden.read_text() == edited

    older = tmp_path / "older"  # what an older ragscore wrote there: no record of it
    older.mkdir()
    (older / "same.jsonl").write_bytes(full)
    (older / "other.jsonl").write_bytes(full.splitlines(keepends=True)[0])
    assert consensus(older / "same.jsonl")[0] == 0 and (older / "same.jsonl").read_bytes() == full
    code, said = consensus(older / "other.jsonl")
    assert code == 2 and "an older ragscore's" in said, said
    assert (older / "other.jsonl").read_bytes() == full.splitlines(keepends=True)[0]


def _calls(write: Callable[[], object]) -> Counter[str]:
    """How many times ``write`` called load_outcomes and consensus_for (one a question built), and that it refused.
    What a user sees of it, the time and memory of building questions after the refusal, is no deterministic
    measure (the dataset's rows are held anyway): the questions built are. Counted in this thread, where
    write_consensus does all its work; a profiler already set (a plugin's, a debugger's) is set back after, and one
    that displaced this count meanwhile fails the test rather than leave it short."""
    watched = {load_outcomes.__code__: "load_outcomes", consensus_for.__code__: "consensus_for"}
    calls: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in watched:
            calls[watched[frame.f_code]] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with pytest.raises(ConfigError, match="which ragscore has no record of writing"):
            write()
    finally:
        displaced = sys.getprofile() is not profile
        sys.setprofile(previous)
    assert not displaced, "another profiler replaced the count's while it ran: the calls counted may be short"
    return calls


@pytest.mark.integration
def test_consensus_out_is_refused_before_the_rest_is_built(tmp_path: Path, home: Path) -> None:
    """write_consensus built the whole output (text the size of the answers) before it could refuse FILE. Now a
    FILE that cannot be read as one (a FIFO) is refused before the run's items are read, and a file of another's,
    or one edited, at the first line that differs from it: the questions after it are never built."""
    rows = [r | {"id": f"q{i}"} for i in range(1, 6) for r in _rows()[:3]]  # five questions
    data = write_jsonl(tmp_path / "answers.jsonl", rows)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    run = tmp_path / "run"
    assert ragscore("run", data, "--suite", suite, "--out", run, "-q", home=home).returncode == 0
    golden = tmp_path / "golden.jsonl"
    assert ragscore("consensus", run, "--out", golden, home=home).returncode == 0
    lines = golden.read_text().splitlines(keepends=True)
    record = (tmp_path / WRITTEN_NAME).read_bytes()
    assert len(lines) == 5

    def consensus(out: Path) -> Callable[[], object]:
        return lambda: write_consensus(out, run_source(run, store=lambda: pytest.fail("the store was asked")))

    golden.write_text("".join(lines[:2]) + lines[2].replace('"q3"', '"q3-mine"') + "".join(lines[3:]))
    assert _calls(consensus(golden)) == {"load_outcomes": 1, "consensus_for": 3}  # q1, q2 as written; q3 differs
    mine = tmp_path / "mine.jsonl"
    mine.write_text('{"mine": 1}\n')
    assert _calls(consensus(mine)) == {"load_outcomes": 1, "consensus_for": 1}
    shorter = tmp_path / "shorter.jsonl"  # the output's first lines, the rest cut: refused once past its end
    shorter.write_text("".join(lines[:2]))
    assert _calls(consensus(shorter)) == {"load_outcomes": 1, "consensus_for": 3}
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert _calls(consensus(fifo)) == {}  # no item read
    assert golden.read_text().count("q3-mine") == 1 and mine.read_text() == '{"mine": 1}\n'
    assert (tmp_path / WRITTEN_NAME).read_bytes() == record  # refused: nothing recorded


@pytest.mark.integration
def test_consensus_out_a_link_writes_its_target_under_the_same_checks_and_keeps_the_link(
    tmp_path: Path, home: Path
) -> None:
    """``consensus --out LINK`` replaced the link with a regular file and left its target as it was (a
    ``golden.jsonl`` kept as a link to ``datasets/golden-v3.jsonl`` lost its link, the dataset never updated). The
    link names its target: that file is written (the record beside it), as a shell's ``>`` writes it, and refused
    as any file there is (edited, another's); a loop of links is refused."""
    data = write_jsonl(tmp_path / "answers.jsonl", _rows())
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    run = tmp_path / "run"
    assert ragscore("run", data, "--suite", suite, "--out", run, "-q", home=home).returncode == 0

    def consensus(out: Path) -> tuple[int, str]:
        res = ragscore("consensus", run, "--out", out, home=home)
        return res.returncode, " ".join(res.stderr.split())

    target = tmp_path / "datasets" / "golden-v3.jsonl"
    assert consensus(target)[0] == 0
    link = tmp_path / "golden.jsonl"
    link.symlink_to(Path("datasets") / "golden-v3.jsonl")
    for _ in range(2):
        assert consensus(link) == (0, f"2 questions, 1 with a consensus reference, written to {link}")
        assert link.is_symlink() and os.readlink(link) == "datasets/golden-v3.jsonl"
    assert json.loads(target.read_text().splitlines()[0])["metadata"]["consensus"]["sentences"] == EXPECTED_SENTENCES
    dangling = tmp_path / "next.jsonl"  # its target not there yet: made, as the link names it
    dangling.symlink_to(target.parent / "golden-v4.jsonl")
    assert consensus(dangling)[0] == 0 and dangling.is_symlink()
    assert (target.parent / "golden-v4.jsonl").read_bytes() == target.read_bytes()
    assert list(json.loads((target.parent / WRITTEN_NAME).read_text())) == ["golden-v3.jsonl", "golden-v4.jsonl"]
    assert not (tmp_path / WRITTEN_NAME).exists()  # the record is beside the file written

    target.write_text(target.read_text() + "my notes\n")  # edited through the link: refused, as the file itself is
    code, said = consensus(link)
    assert code == 2 and f"{target.parent} holds golden-v3.jsonl, which ragscore has no record of writing" in said
    assert target.read_text().endswith("my notes\n") and link.is_symlink()
    mine = tmp_path / "mine.jsonl"  # a link to the user's dataset: refused, the dataset as it was
    mine.symlink_to(data)
    before = data.read_bytes()
    assert consensus(mine)[0] == 2 and data.read_bytes() == before and mine.is_symlink()

    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(tmp_path / "loop2.jsonl")
    (tmp_path / "loop2.jsonl").symlink_to(loop)
    code, said = consensus(loop)
    assert code == 2 and f"--out {loop} is a link in a loop of links, to no file: nothing was written" in said, said
    assert "Traceback" not in said


@pytest.mark.integration
def test_consensus_out_a_folder_or_under_a_file_is_refused_naming_the_dataset(tmp_path: Path, home: Path) -> None:
    """``--out`` a folder recorded the file's hash under the folder's name in the parent's record, then failed
    (a stray entry); ``--out`` under a file said "Cannot write the reports", which consensus does not write."""
    data = write_jsonl(tmp_path / "answers.jsonl", _rows())
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"metrics": ["checks"]}))
    run = tmp_path / "run"
    assert ragscore("run", data, "--suite", suite, "--out", run, "-q", home=home).returncode == 0
    folder = tmp_path / "out" / "golden.jsonl"
    folder.mkdir(parents=True)
    refused = ragscore("consensus", run, "--out", folder, home=home)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and f"{folder} is a folder, not a file: nothing was written" in said, said
    assert "Traceback" not in said and list(folder.parent.iterdir()) == [folder]  # no record, no lock
    refused = ragscore("consensus", run, "--out", data / "golden.jsonl", home=home)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and f"Cannot write the consensus dataset to {data}" in said, said


def test_points_an_empty_text_passes_add_no_sentence_of_their_own() -> None:
    """A heavy negation (or a length maximum) passes on any filler sentence: it must not put the best answer's
    first sentence into the reference, only be credited to a sentence chosen for its content."""
    points = [
        {"id": "no_london", "type": "negation", "params": {"keywords": ["London"]}, "weight": 5},
        {"id": "short", "type": "length", "params": {"max": 30}, "weight": 4},
        {"id": "capital", "type": "keyword", "params": {"keywords": ["Paris"]}, "weight": 1},
    ]
    answers = {"a": "Great question! Paris is the capital.", "b": "Well. The capital is Paris, not London."}
    rows = [{"id": "q1", "system": s, "answer": a, "checks": points} for s, a in answers.items()]
    outcomes = {item["system"]: item["metrics"]["checks"]["details"]["points"] for item in _items(rows)}
    result = consensus_for({r["system"]: Row.model_validate(r) for r in rows}, outcomes)
    assert result["reference"] == "Paris is the capital."
    assert result["sentences"] == [{"text": "Paris is the capital.", "system": "a", "sentence_index": 1,
                                    "points": ["capital", "no_london", "short"], "weight": 10.0}]  # fmt: skip
    assert result["covered"] == ["capital", "no_london", "short"] and result["unlocalized"] == []


def test_a_point_an_empty_text_passes_that_no_chosen_sentence_carries_is_unlocalized() -> None:
    """A negation passed by an answer from which no sentence was chosen (no other point found one) is unlocalized;
    it crashed the whole consensus command (TypeError on a holder of None)."""
    points = [
        {"id": "no_london", "type": "negation", "params": {"keywords": ["London"]}, "weight": 1},
        {"id": "tokyo", "type": "keyword", "params": {"keywords": ["Tokyo"]}, "weight": 1},
    ]
    rows = [{"id": "q1", "system": "a", "answer": "I cannot say.", "checks": points}]
    outcomes = {item["system"]: item["metrics"]["checks"]["details"]["points"] for item in _items(rows)}
    result = consensus_for({r["system"]: Row.model_validate(r) for r in rows}, outcomes)
    assert (result["reference"], result["sentences"]) == (None, [])
    assert (result["covered"], result["uncovered"], result["unlocalized"]) == ([], ["tokyo"], ["no_london"])
