"""The target stage's pure parts: JSON paths, request templates, filling a row, suite validation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.suite import load_suite
from ragscore_workers.answers import NO_RETRIEVAL
from ragscore_workers.errors import ConfigError
from ragscore_workers.schemas import Row, TargetConfig
from ragscore_workers.target import TargetError, fill_row
from ragscore_workers.target.fill import unfilled_fields
from ragscore_workers.target.jsonpath import _path_text, check_path, extract, parse_path
from ragscore_workers.target.template import UnseenRequestFields, placeholders, render

REPLY = {
    "data": {"answer": "Paris.", "hits": [{"id": "d1", "text": "Paris is the capital."}, {"id": "d2", "text": "x"}]},
    "quotes": [{"source_index": 0, "quote": "Paris is the capital."}],
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("data.answer", "Paris."),
        ("data.hits[*].id", ["d1", "d2"]),
        ("data.hits[1].text", "x"),
        ("data.hits[-1].id", "d2"),
        ("data.hits[5].id", None),
        ("data.missing", None),
        ("data.answer.deeper", None),
        ("quotes", REPLY["quotes"]),
        ("data.hits[*].missing", None),  # no element has it: a typo, not a list of nothing
    ],
)
def test_extract(path: str, expected: Any) -> None:
    assert extract(REPLY, path) == expected


def test_a_key_in_quotes_is_read_as_written_spaces_dots_and_all() -> None:
    """``data[' a ']`` and ``data["a.b"]`` (JSONPath's way to name a key holding spaces, a dot or a bracket) were
    "not a JSON path", and no path could reach such a key: a key in quotes is read as written."""
    reply = {"data": {" a ": "spaced", "a.b": ["dotted"], "it's": {"x]": 1}}}
    assert extract(reply, "data[' a ']") == "spaced"
    assert extract(reply, 'data["a.b"][0]') == "dotted"
    assert extract(reply, "data[\"it's\"]['x]']") == 1
    assert parse_path("['$'].a") == ["$", "a"]


@pytest.mark.parametrize(
    ("path", "steps"),
    [("data.it's", ["data", "it's"]), ('data."a"', ["data", '"a"']), ("data.'a'[0]", ["data", "'a'", 0])],
)
def test_a_path_read_before_keys_in_quotes_keeps_its_meaning(path: str, steps: list[str | int]) -> None:
    """Keys in quotes are read only in brackets (``['a']``): a quote in a dotted key is part of it, as before."""
    assert parse_path(path) == steps


@pytest.mark.parametrize(
    "steps",
    [["data", 'it\'s "x"'], ["data", "a.b's", 0], ['x]"y"', "*", "t"], ["a\\b ", "it's "], ["$", "a"], ["data", ""]],
)
def test_a_path_written_back_from_its_steps_reads_as_those_steps(steps: list[str | int]) -> None:
    """The paths check_path suggests as a fix are written from steps (``_path_text``): a key with a quote went in
    ``repr``, whose backslashes (``['it\\'s "x"']``, ``['a\\\\b ']``) the paths' syntax does not read. Seen failing
    before: parse_path refused it ("not a JSON path") or read other keys."""
    assert parse_path(_path_text(steps)) == steps


def test_a_key_no_path_can_name_is_said_so_not_written_unreadably() -> None:
    """A key that must be in quotes and holds both quote kinds has no path (no escapes): said plainly. Seen failing
    before: the hint wrote it with backslashes, a path refused as "not a JSON path"."""
    assert _path_text(["data", 'it\'s "x" ']) is None
    with pytest.raises(ValueError, match=r"cannot be named by a path: in quotes it holds both ' and \", and a path"):
        check_path('data.it\'s "x" ', lists=False)
    both = 'data.it\'s "x"'  # a quote alone needs no brackets: the fix is the path less its "$."
    with pytest.raises(ValueError, match=re.escape(f"write `{both}`")):
        check_path(f"$.{both}", lists=False)


#: A path a hint suggests, between the quote or backtick it lacks (group 2).
_SUGGESTED = re.compile(r"(?:write |\(or |one element \()(['\"`])(.*?)\1")


@pytest.mark.parametrize(
    ("bad", "steps"),
    [
        ('$.data.it\'s "x"', ["data", 'it\'s "x"']),
        ("$.a\\b", ["a\\b"]),
        ("data.it's[*]", ["data", "it's", 0]),
        (" data.a\\b", ["data", "a\\b"]),
        ("data. a['b ']", ["data", "a", "b "]),
        ('$.a[" b"]', ["a", " b"]),
        ("$. a", ["a"]),
    ],
)
def test_a_suggested_path_is_shown_as_it_is_written_not_escaped(bad: str, steps: list[str | int]) -> None:
    """A hint's path is copied into a suite as shown: it was shown by ``repr``, whose backslashes (``'data.it\\'s
    "x"'``, ``'a\\\\b'``) the paths' syntax does not read. Each path a hint suggests reads back, the first as ``steps``.
    Seen failing before: the first suggestion read as other keys, or was refused as "not a JSON path"; and the fix of
    a spaced key outside quotes also stripped a key in quotes (``data. a['b ']`` suggested ``data.a.b``), while the fix
    of a path from JSONPath's root kept a slip's spaces, in quotes (``$. a`` suggested ``[' a']``)."""
    with pytest.raises(ValueError) as refused:
        check_path(bad, lists=False)
    suggested = [m.group(2) for m in _SUGGESTED.finditer(str(refused.value))]
    assert suggested, str(refused.value)
    assert parse_path(suggested[0]) == steps, str(refused.value)
    for path in suggested[1:]:
        check_path(path, lists=False)


@pytest.mark.parametrize("bad", ["", "a..b", "a[x]", "a[", "[*]]", "a['b]", "a.['b']"])
def test_malformed_paths_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a JSON path"):
        parse_path(bad)


def test_render_keeps_types_formats_text_and_reads_nested_fields() -> None:
    row = {"id": "q1", "question": "Why?", "metadata": {"lang": "en", "tags": ["a", "b"]}, "k": 3}
    template = {
        "q": "{question}",
        "prompt": "Q{id}: {question} {{literal}}",
        "filter": {"lang": "{metadata.lang}", "tags": "{metadata.tags}"},
        "k": 5,
        "list": ["{id}", 1, None],
    }
    assert render(template, row) == {
        "q": "Why?",
        "prompt": "Qq1: Why? {literal}",
        "filter": {"lang": "en", "tags": ["a", "b"]},
        "k": 5,
        "list": ["q1", 1, None],
    }
    assert placeholders(template) == {"question", "id", "metadata.lang", "metadata.tags"}


def test_render_names_the_missing_field() -> None:
    with pytest.raises(TargetError, match="no field 'metadata.lang'"):
        render({"filter": "{metadata.lang}"}, {"id": "q1", "metadata": {}})
    with pytest.raises(TargetError, match="no field 'question'"):
        render("{question}", {"id": "q1"})


def test_the_request_fields_no_row_has_are_named_with_the_targets_reading_them() -> None:
    fields = UnseenRequestFields({"a": {"q": "{questoin}", "lang": "{metadata.lang}"}, "b": "{questoin} {id}"})
    assert fields.error() is not None
    fields.see(Row(id="q1", question="Why?"))
    fields.see(Row(id="q2", metadata={"lang": "en"}))
    assert fields.error() == (
        "no row has 'questoin', which the request of target 'a', 'b' reads: every question would fail (a typo in "
        "the request, or a column named otherwise?)"
    )
    built: list[str] = []

    class Counted(Row):  # notes each time its request data is built
        def model_dump(self, **options: Any) -> dict[str, Any]:
            built.append("row")
            return super().model_dump(**options)

    fields.see(Counted.model_validate({"id": "q3", "questoin": "Why?"}))  # an extra column
    fields.see(Counted(id="q4"))
    assert fields.error() is None and built == ["row"]  # once every field is seen, rows are not built for it
    assert UnseenRequestFields({}).error() is None


def _config(**response: str | None) -> TargetConfig:
    mapping = {"answer": "data.answer", "contexts": "data.hits[*].text", "retrieved_doc_ids": "data.hits[*].id",
               "citations": "quotes"} | response  # fmt: skip
    return TargetConfig(system="sys-a", url="http://localhost/ask", response=mapping)


def test_fill_row_sets_the_mapped_fields_and_the_system() -> None:
    row = Row(id="q1", question="Capital?", reference="Paris", answer="stale", metadata={"lang": "en"})
    filled = fill_row(row, _config(), REPLY)
    assert filled.key == "sys-a::q1"
    assert filled.answer == "Paris." and filled.reference == "Paris" and filled.metadata == {"lang": "en"}
    assert [c.text for c in filled.contexts] == ["Paris is the capital.", "x"]
    assert filled.retrieved_doc_ids == ["d1", "d2"]
    assert filled.citations is not None and filled.citations[0].quote == "Paris is the capital."


def test_fill_row_errors_clearly_when_the_reply_does_not_fit() -> None:
    row = Row(id="q1", question="Capital?")
    with pytest.raises(TargetError, match="the reply has no 'data.answer'"):
        fill_row(row, _config(), {"data": {}})
    with pytest.raises(TargetError, match="does not fit the row: citations"):
        fill_row(row, _config(citations="data.answer"), REPLY)
    # A retrieval-only target maps no answer.
    assert fill_row(row, _config(answer=None), REPLY).answer is None


def test_a_target_mapping_no_retrieval_field_marks_its_rows_as_an_llm_alones() -> None:
    """A response map naming neither contexts nor retrieved_doc_ids is an LLM alone's: its rows are marked
    (``Row.answered_alone``), not given ``retrieved_doc_ids: []`` (retrieval ran and found nothing: recall 0); a
    mark the dataset's row carries (an earlier run's answers.jsonl) is this target's to give, not kept."""
    row = Row(id="q1", question="Capital?")
    alone = fill_row(row, _config(contexts=None, retrieved_doc_ids=None), REPLY)
    assert alone.answered_alone and alone.retrieved_doc_ids is None and alone.to_message()[NO_RETRIEVAL] is True
    for retrieving in (_config(), _config(contexts=None), _config(retrieved_doc_ids=None)):
        assert not fill_row(alone, retrieving, REPLY).answered_alone
        assert NO_RETRIEVAL not in fill_row(alone, retrieving, REPLY).to_message()


def test_a_path_that_finds_nothing_is_unfilled_and_one_to_an_empty_list_is_found() -> None:
    """``contexts`` defaults to [] in a row, so a mistyped path read as found; a key no element under ``[*]`` has
    gave ``[None, None]``, which failed every question with "does not fit the row"."""
    row = Row(id="q1", question="Capital?")
    typos = _config(contexts="data.hit[*].text", retrieved_doc_ids="data.hits[*].ident")
    assert extract(REPLY, "data.hits[*].ident") is None and extract(REPLY, "data.hits[*].id") == ["d1", "d2"]
    assert unfilled_fields(typos, REPLY) == ["contexts", "retrieved_doc_ids"]
    filled = fill_row(row, typos, REPLY)
    assert filled.contexts == [] and filled.retrieved_doc_ids is None
    nothing_retrieved = {"data": {"answer": "?", "hits": []}, "quotes": []}
    assert unfilled_fields(_config(), nothing_retrieved) == []
    assert fill_row(row, _config(), nothing_retrieved).retrieved_doc_ids == []


def test_a_chunk_cut_by_its_time_limit_stores_the_answers_that_came_and_the_error_for_the_rest() -> None:
    """An answer whose call had ended but was not stored yet when the time limit struck was lost: neither it nor
    an error was stored (and a resume's mark on that failed answer was never taken: progress stayed below 100 %).
    Stored by the cut, its unfilled fields were not counted (an on-time answer's are): they are, once."""
    from concurrent.futures import Future

    from ragscore_workers.target.stage import cut_answers

    asked = {name: Row(id=name, question="?", system="s") for name in ("stored", "ended", "running", "failed")}
    futures: dict[Future[dict[str, Any]], Row] = {}
    for name, row in asked.items():
        future: Future[dict[str, Any]] = Future()
        if name in ("stored", "ended"):
            future.set_result({"row": {"id": name, "answer": "yes"}, "cached": False, "unfilled": ["contexts"]})
        elif name == "failed":
            future.set_exception(RuntimeError("boom"))
        futures[future] = row
    stored = {f for f, row in futures.items() if row.id == "stored"}
    cut = "the target task ran over its time limit"
    unfilled_of: dict[str, list[str]] = {}
    assert cut_answers(futures, stored, unfilled_of) == {
        "s::ended": {"row": {"id": "ended", "answer": "yes"}, "cached": False},
        "s::running": {"row": asked["running"].to_message(), "error": cut},
        "s::failed": {"row": asked["failed"].to_message(), "error": cut},
    }
    assert unfilled_of == {"s::ended": ["contexts"]}  # the ended one's (counted once stored), not the stored one's


@pytest.mark.parametrize(
    ("suite", "message"),
    [
        ({"target": {"url": "http://x", "callable": "m:f"}}, "exactly one of 'url' or 'callable'"),
        ({"target": {"system": "a"}}, "exactly one of 'url' or 'callable'"),
        ({"target": {"system": "a::b", "url": "http://x"}}, "system name may not contain '::'"),
        ({"targets": [{"url": "http://x"}]}, "needs a 'system' name"),
        ({"targets": [{"system": "a", "url": "http://x"}, {"system": "a", "url": "http://y"}]}, "must be unique"),
        ({"target": {"url": "http://x"}, "targets": [{"system": "a", "url": "http://x"}]}, "not both"),
        ({"target": {"callable": "not a spec"}}, "callable"),
        ({"target": {"url": "http://x", "response": {"answer": "a[x]"}}}, "response.answer: not a JSON path"),
        ({"target": {"url": "http://x", "rpm": 0}}, "rpm"),
        ({"target": {"url": "localhost:8000/ask"}}, "must start with http:// or https://"),
        (
            {"target": {"url": "http://x", "method": "GET", "request": {"q": "{question}", "filter": {"lang": "en"}}}},
            "cannot hold the mapping 'filter': flatten it or use method POST",
        ),
        ({"target": {"url": "http://x", "auth_env": "T", "auth_in": "query"}}, "set both"),
        ({"target": {"url": "http://x", "auth_in": "body", "auth_param": "api_key"}}, "set both"),
        ({"target": {"url": "http://x", "auth_env": "T", "auth_param": "key"}}, "a header's name is auth_header"),
        ({"target": {"url": "http://x", "auth_env": "T", "auth_in": "cookie", "auth_param": "k"}}, "auth_in"),
        (
            {"target": {"callable": "m:f", "auth_env": "T", "auth_in": "body", "auth_param": "api_key"}},
            "a callable reads auth_env itself",
        ),
        (
            {"target": {"url": "http://x", "auth_env": "T", "auth_in": "body", "auth_param": "question"}},
            "the request writes 'question' itself",
        ),
        (
            {"target": {"url": "http://x?k=public", "auth_env": "T", "auth_in": "query", "auth_param": "k"}},
            "the url writes 'k' itself",
        ),
        (
            {
                "target": {
                    "url": "http://x",
                    "method": "GET",
                    "auth_env": "T",
                    "auth_in": "query",
                    "auth_param": "question",
                }
            },  # fmt: skip
            "the request writes 'question' itself",
        ),
        (
            {"target": {"url": "http://x", "auth_env": "T", "auth_in": "query", "auth_param": "k", "auth_scheme": ""}},
            "auth_header and auth_scheme shape a header",
        ),
        ({"target": {"callable": "m:f", "auth_env": "T", "auth_in": "query"}}, "a callable reads auth_env itself"),
    ],
)
def test_bad_target_sections_fail_before_anything_runs(suite: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_suite({"metrics": ["verbatim"]} | suite)


def test_a_posted_requests_field_may_share_the_name_of_a_query_token() -> None:
    """``auth_in: query`` puts the token in the url's query string: a body field of that name is no clash."""
    target = TargetConfig(url="http://x/ask", request={"question": "{question}", "key": "{id}"}, auth_env="T",
                          auth_in="query", auth_param="key")  # fmt: skip
    assert target.auth_param == "key"


def test_a_target_suite_needs_the_target_queue() -> None:
    resolved = load_suite({"metrics": ["verbatim", "answer_relevance"], "target": {"url": "http://x"}})
    assert resolved.queues == ["target", "cpu", "embed"]


def test_rows_of_several_systems_asked_of_a_target_naming_its_system_must_not_share_ids(tmp_path: Path) -> None:
    """Both rows of id q0 (systems A and B) became item rag::q0: one answer overwrote the other, and n counted
    the item twice, without a word."""
    from orchestrator.estimate import estimate_run
    from ragscore_workers.errors import DatasetError

    from ..support import write_jsonl

    rows = [{"id": "q0", "question": "Why?", "system": "A"}, {"id": "q0", "question": "Why?", "system": "B"}]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    named = load_suite({"metrics": ["exact_match"], "target": {"system": "rag", "url": "http://127.0.0.1:9/ask"}})
    with pytest.raises(DatasetError, match=r"id 'q0' on lines 1 and 2\. Ids must be unique: target 'rag' answers "
                                           r"every row as its system.*add --no-target"):  # fmt: skip
        estimate_run(data, named)
    unnamed = load_suite({"metrics": ["exact_match"], "target": {"url": "http://127.0.0.1:9/ask"}})
    assert estimate_run(data, unnamed).items == 2  # each row keeps its system: A::q0 and B::q0


def test_an_element_a_star_path_finds_nothing_in_reads_as_empty_and_keeps_its_rank() -> None:
    """One context without ``doc_id`` failed the question ("retrieved_doc_ids.1: Input should be a valid string"),
    every metric with it, while a reply with no doc_id anywhere was taken (counted as unfilled)."""
    config = TargetConfig(url="http://x", response={"answer": "answer", "contexts": "contexts[*].text",
                                                    "retrieved_doc_ids": "contexts[*].doc_id"})  # fmt: skip
    reply = {"answer": "A", "contexts": [{"text": "t1", "doc_id": "d1"}, {"doc_id": "d2"}, {"text": "t3"}]}
    row = fill_row(Row(id="q", gold_doc_id="d2"), config, reply)
    assert row.retrieved_doc_ids == ["d1", "d2", ""] and [c.text for c in row.contexts] == ["t1", "", "t3"]
    assert unfilled_fields(config, reply) == []
