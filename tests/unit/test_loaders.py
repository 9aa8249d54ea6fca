"""Loaders stream each format, and every unreadable row is reported with its line while others load."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.datasets import RowError, iter_rows, scan_dataset
from orchestrator.datasets.loaders import NOT_UTF8_HINT, _csv_rows, _LineFeed, _suffix, _wrong_quote
from ragscore_workers.errors import DatasetError
from ragscore_workers.schemas import Row, split_key

from ..support import ROOT


def _rows(path: Path, fmt: str | None = None) -> tuple[list[Row], list[RowError]]:
    ok, bad = [], []
    for _, row in iter_rows(path, fmt):
        (bad if isinstance(row, RowError) else ok).append(row)
    return ok, bad


def test_jsonl_bad_lines_are_reported_with_line_numbers_and_the_rest_load(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        b'{"id": "a", "answer": "x"}\n'
        b"\n"  # blank lines are skipped but still counted
        b'{"id": "b", "answer": \n'  # line 3: broken JSON
        b'["not", "an", "object"]\n'  # line 4
        b'{"id": "c", "answer": {"text": 5}}\n'  # line 5: wrong type
        b'{"id": "d", "answer": "\xff\xfe"}\n'  # line 6: invalid UTF-8
        b'{"answer": "no id"}\n'  # line 7: gets id row-7
    )
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["a", "row-7"]
    assert [(e.line, e.error.split(":")[0].split(" (")[0]) for e in bad] == [
        (3, "invalid JSON"),
        (4, "expected a JSON object, got list"),
        (5, "answer"),
        (6, "invalid UTF-8 at byte 23"),
    ]
    assert "Input should be a valid string" in bad[2].error


def test_a_bad_row_without_an_id_is_kept_raw_as_read_without_the_generated_id(tmp_path: Path) -> None:
    """``failed_rows.jsonl``'s ``raw`` is the row as the file holds it: the ``row-<line>`` id a good row gets was
    added to it, so a user searching the file for that text found nothing."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"answer": {"text": 5}}\n{"id": "", "answer": [6]}\n')
    _, bad = _rows(path)
    assert [e.raw for e in bad] == ['{"answer": {"text": 5}}', '{"id": "", "answer": [6]}']


# cut inside a string (the parser names where the string starts), and between values (where the text ends)
@pytest.mark.parametrize("cut", [len('{"id": "c", "answer": "a lo'), len('{"id": "c", "answer": "a long answer"')])
def test_a_jsonl_file_cut_short_says_so_on_its_last_row_only(tmp_path: Path, cut: int) -> None:
    """A download or copy that stopped mid-row was only 'invalid JSON: Unterminated string starting at (column
    23)', as a typo would be; the same break on a line that has its newline is a typo, said as before."""
    path = tmp_path / "d.jsonl"
    rows = [json.dumps({"id": i, "answer": "a long answer"}) for i in "abc"]
    text = rows[0][:cut] + "\n" + rows[1] + "\n" + rows[2]
    path.write_text(text[: len(text) - len(rows[2]) + cut], encoding="utf-8")
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["b"] and [e.line for e in bad] == [1, 3]
    cut_short = "the file ends inside this row, without its newline: was it cut short"
    assert cut_short not in bad[0].error and cut_short in bad[1].error, bad


@pytest.mark.parametrize("cut", ["answer", '"a lo', '"a long answer"}', '"a long answer"}, ', "\n"])
def test_a_json_file_cut_short_says_so_and_one_with_a_typo_does_not(tmp_path: Path, cut: str) -> None:
    """A ``.json`` list cut short (a download that stopped) said only 'not valid JSON (Unterminated string starting
    at ...)', as a typo would; the JSONL reader says a last row cut short may be so. An object keyed by id too."""
    rows = [{"id": i, "answer": "a long answer"} for i in "abc"]
    whole = json.dumps(rows, indent=1 if cut == "\n" else None)
    path = tmp_path / "d.json"
    path.write_text(whole[: whole.rindex(cut) + len(cut)] if cut != "\n" else whole[:-2] + "\n", encoding="utf-8")
    said = r"the file ends before its JSON does: was it cut short \(a copy or download stopped\)\?$"
    with pytest.raises(DatasetError, match=rf"d.json: not valid JSON \(.*\); {said}"):
        list(iter_rows(path))
    path.write_text(json.dumps({r["id"]: r for r in rows})[:-20], encoding="utf-8")
    with pytest.raises(DatasetError, match=said):
        list(iter_rows(path))
    for typo in (whole.replace('"b"', "b", 1), "", "  \n"):  # a typo, and an empty file, are no file cut short
        path.write_text(typo, encoding="utf-8")
        with pytest.raises(DatasetError, match=r"not valid JSON \(.*\)$") as refused:
            list(iter_rows(path))
        assert "cut short" not in str(refused.value)


def test_a_jsonl_row_with_a_comma_before_its_closing_brace_says_so(tmp_path: Path) -> None:
    """A row ending `"answer": "a",}` said only "Expecting property name enclosed in double quotes (column 24)", which
    points at no property: the suite's JSON named the trailing comma, a JSONL row did not."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "answer": "x"}\n{"id":"t","answer":"a",}\n{"id": "b", "contexts": ["c",]}\n')
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["a"]
    comma = "; a comma before a closing bracket: JSON takes no comma before ] or }"
    assert [(e.line, e.error) for e in bad] == [
        (2, f"invalid JSON: Expecting property name enclosed in double quotes (column 24){comma}"),
        (3, f"invalid JSON: Expecting value (column 30){comma}"),
    ]


def test_a_jsonl_row_with_a_key_not_in_double_quotes_says_so(tmp_path: Path) -> None:
    """A row `{"id": "bad", answer: 1}` (a key as JavaScript writes it, or Python's 'answer') said only "Expecting
    property name enclosed in double quotes", with no word that the key is what lacks its quotes."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "answer": "x"}\n{"id": "bad", answer: 1}\n{\'id\': "b"}\n')
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["a"]
    expecting = "invalid JSON: Expecting property name enclosed in double quotes"
    unquoted = 'the key answer is not quoted: JSON writes a key in double quotes ("answer": ...)'
    assert [(e.line, e.error) for e in bad] == [
        (2, f"{expecting} (column 15); {unquoted}"),
        (3, f"{expecting} (column 2); the key 'id' is in single quotes: JSON quotes a key in double quotes"),
    ]


def test_jsonl_rows_copied_out_of_a_json_list_with_their_commas_say_so(tmp_path: Path) -> None:
    """Rows pasted out of a JSON list keep the comma after each object: every row was 'Extra data (column 27)'."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "answer": "x"},\n{"id": "b", "answer": "y"}\n{"id": "c"} {"id": "d"}\n')
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["b"]
    assert [(e.line, e.error) for e in bad] == [
        (1, "invalid JSON: Extra data (column 27); a comma after the object: JSONL rows are one object per line, "
            "with nothing between them"),
        (3, "invalid JSON: Extra data (column 13)"),
    ]  # fmt: skip


def test_a_null_row_is_said_as_json_says_it(tmp_path: Path) -> None:
    """A row that is ``null`` (an export writing a missing record) was 'got NoneType', Python's name for it."""
    jsonl, listed = tmp_path / "d.jsonl", tmp_path / "d.json"
    jsonl.write_text('{"id": "a"}\nnull\n')
    listed.write_text('[{"id": "a"}, null]')
    assert [e.error for e in _rows(jsonl)[1]] == ["expected a JSON object, got null"]
    assert [e.error for e in _rows(listed)[1]] == ["element 2: expected an object, got null"]


def test_a_row_with_many_bad_fields_names_the_first_and_counts_the_rest_as_counts_are_written(tmp_path: Path) -> None:
    """1,200 contexts of the wrong shape said "(and 1199 more)": counted without the thousands separator every other
    count has (counts.listed); and the count ran into the first error's end ("got int and 1 more error")."""
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "contexts": [[1]] * 1200}) + "\n")
    _, bad = _rows(path)
    assert bad[0].error.startswith("contexts.0: a context is text or an object"), bad[0].error
    assert bad[0].error.endswith("; and 1,199 more errors"), bad[0].error
    path.write_text(json.dumps({"id": "a", "contexts": [1, 2]}) + "\n")  # the first error ends "got int"
    assert _rows(path)[1][0].error.endswith(", got int; and 1 more error")  # not "got int and 1 more error"
    path.write_text(json.dumps({"id": "a", "contexts": [[1]]}) + "\n")
    assert "more" not in _rows(path)[1][0].error  # one error: nothing more to count


def test_numbers_are_text_and_null_is_absent(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"id": 1, "answer": 42, "reference": 42.5, "contexts": None, "metadata": None}) + "\n"
        + json.dumps({"id": "b", "answer": True}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    ok, bad = _rows(path)
    assert [(r.id, r.answer, r.reference, r.contexts, r.metadata) for r in ok] == [("1", "42", "42.5", [], {})]
    assert [e.line for e in bad] == [2]  # a boolean is no answer


def test_nan_and_infinity_are_absent_values_not_the_text_nan(tmp_path: Path) -> None:
    """JSON's NaN (pandas writes a missing value so) was read as "nan": a reference every "nan" answer matched,
    a gold document id "nan"."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a", "answer": "nan", "reference": NaN, "gold_doc_id": NaN, "expected": Infinity}\n'
                    '{"id": NaN, "answer": "x"}\n')  # fmt: skip
    (row,), (bad,) = _rows(path)
    assert (row.answer, row.reference, row.gold_doc_id, row.expected) == ("nan", None, None, None)
    assert bad.line == 2 and bad.error.startswith("id:")


def test_ragas_column_names_are_read(tmp_path: Path) -> None:
    """A Ragas 0.2+ dataset (user_input, response, retrieved_contexts, reference) scored nothing, silently."""
    path = tmp_path / "d.csv"
    path.write_text('id,user_input,response,retrieved_contexts,reference,ground_truths\n'
                    'q1,Who?,Ada,"[""Ada wrote it.""]",Ada,"[""Ada""]"\n')  # fmt: skip
    (row,), _ = _rows(path)
    assert (row.question, row.answer, row.reference) == ("Who?", "Ada", "Ada")
    assert [c.text for c in row.contexts] == ["Ada wrote it."]
    near = scan_dataset(path, None, lambda _: None).near_misses
    assert near == {"ground_truths": "reference"}  # 0.1's list: named, not read
    # Only to fill what a row does not give, with what the field takes: a logged API object stays an extra column.
    logged = tmp_path / "logged.jsonl"
    logged.write_text(json.dumps({"id": "a", "answer": None, "response": "r"}) + "\n"
                      + json.dumps({"id": "b", "response": {"choices": []}, "user_input": "Q?"}) + "\n")  # fmt: skip
    (a, b), bad = _rows(logged)
    assert not bad and a.answer is None and Row.model_validate(a.to_message()).answer is None  # as a worker reads it
    assert b.answer is None and b.question == "Q?" and b.model_extra == {"response": {"choices": []}}
    # A null Ragas column (pandas writes a missing response so): the row was read, and its task message raised
    # KeyError, which sank the whole run
    nulls = tmp_path / "nulls.jsonl"
    nulls.write_text(json.dumps({"id": "c", "user_input": "Q?", "response": None, "retrieved_contexts": None}) + "\n")
    (c,), bad = _rows(nulls)
    assert not bad and c.question == "Q?" and c.answer is None
    assert Row.model_validate(c.to_message()).answer is None and "response" not in c.to_message()


def test_a_csv_cell_of_numpys_printed_array_is_a_bad_row_not_its_strings_joined(tmp_path: Path) -> None:
    """pandas writes a list read back from Parquet as numpy prints it, ``['d1' 'd2']``: Python's literal reading
    joined the strings (``['d1d2']``), so recall was 0 where the same data as Parquet scored 1."""
    path = tmp_path / "d.csv"
    path.write_text("id,retrieved_doc_ids,contexts\n"
                    "q1,['d1' 'd2' 'd3'],['Paris is in France.']\n"
                    "q2,\"['d1', 'd2']\",\"['It is.' ,\n 'So it is.']\"\n")  # fmt: skip
    (row,), bad = _rows(path)
    assert row.id == "q2" and row.retrieved_doc_ids == ["d1", "d2"] and len(row.contexts) == 2
    (error,) = bad
    assert error.line == 2 and "column 'retrieved_doc_ids': it reads as numpy's print of an array" in error.error


def test_a_csv_header_that_is_not_utf8_says_so_and_how_to_convert_the_file(tmp_path: Path) -> None:
    """Every row failed with pydantic's "unable to parse raw data as a unicode string", for a column no metric reads."""
    path = tmp_path / "d.csv"
    path.write_bytes(b"id,answer,reference,cat\xe9gorie\n1,a,a,x\n")
    with pytest.raises(
        DatasetError, match=r"the header row's column 'cat\?gorie' is not UTF-8 \(the file is not UTF-8"
    ):
        _rows(path)


def test_csv_bytes_that_are_not_utf8_are_found_wherever_a_row_holds_them(tmp_path: Path) -> None:
    """The check of a CSV row for bytes that are not UTF-8 (searched, not walked a character at a time in Python) finds
    each kind of them: a cp1252 byte, one on a quoted cell's second line (its row's line named), the three bytes of an
    encoded surrogate, a sequence cut at the line's end; each row's raw shows them as ``?``. Rows of other UTF-8 text
    than ASCII (a column name too) read."""
    path = tmp_path / "d.csv"
    path.write_bytes(b"id,r\xc3\xa9ponse,answer\na,caf\xe9,x\nb,\"two\nl\xffines\",y\nc,\xed\xa0\x80,z\n"
                     b"d,caf\xc3\xa9 \xf0\x9f\x98\x80,ok\ne,ok,\xe2\x82\nf,plain,ok\n")  # fmt: skip
    found = list(iter_rows(path))
    assert [(line, r.error, r.raw) for line, r in found if isinstance(r, RowError)] == [
        (2, f"invalid UTF-8 ({NOT_UTF8_HINT})", "a,caf?,x"),
        (3, f"invalid UTF-8 ({NOT_UTF8_HINT})", 'b,"two\nl?ines",y'),
        (5, f"invalid UTF-8 ({NOT_UTF8_HINT})", "c,???,z"),
        (7, f"invalid UTF-8 ({NOT_UTF8_HINT})", "e,ok,??"),
    ]
    rows = [(line, r.id, r.model_extra) for line, r in found if isinstance(r, Row)]
    assert rows == [(6, "d", {"réponse": "café 😀"}), (8, "f", {"réponse": "plain"})]


def test_blank_lines_above_a_csv_header_are_no_header(tmp_path: Path) -> None:
    """The blank first line was read as an empty header: every row "more cells than header columns"."""
    path = tmp_path / "d.csv"
    path.write_text("\n\r\n  \nid;answer\n1;a\n2;b\n")
    ok, bad = _rows(path)
    assert bad == [] and [(r.id, r.answer) for r in ok] == [("1", "a"), ("2", "b")]


def test_csv_parses_json_cells_and_reports_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        "id,question,answer,retrieved_doc_ids,gold_doc_id\n"
        'q1,What?,Paris,"[""d1"", ""d2""]",d1\n'
        'q2,Who?,Homer,"[broken",d3\n'
        "q3,When?,1989,,d4,extra-cell\n"
        'q4,"multi\nline",ok,,d5\n',
        encoding="utf-8",
    )
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["q1", "q4"]
    assert ok[0].retrieved_doc_ids == ["d1", "d2"] and ok[1].question == "multi\nline"
    assert [(e.line, e.error) for e in bad] == [
        (3, """invalid JSON in column 'retrieved_doc_ids': Expecting value (a list is written ["a", "b"])"""),
        (4, "more cells than header columns (6 of 5)"),
    ]


def test_a_bad_csv_rows_raw_is_its_text_as_in_the_file(tmp_path: Path) -> None:
    """failed_rows.jsonl's ``raw`` of a CSV row is what the user finds in the file: its line (a quoted row of several
    lines, its lines), not the record read from it as JSON, nor its cells joined without their quotes."""
    path = tmp_path / "d.csv"
    rows = [
        'q1,"Who?",Homer,"[""broken",d3',  # a JSON cell that does not read
        'q2,"What,\nreally?",Paris,"{""d"": 1}",d1',  # read, then refused: retrieved_doc_ids is no list
        'q3,"a long\nquestion",Paris,,d1',  # read, then refused: over the field limit
    ]
    path.write_text("id,question,answer,retrieved_doc_ids,gold_doc_id\n" + "\n".join(rows) + "\n", encoding="utf-8")
    bad = [(line, r.raw) for line, r in iter_rows(path, max_chars=12) if isinstance(r, RowError)]
    assert bad == [(2, rows[0]), (3, rows[1]), (5, rows[2])]


def test_a_json_cell_with_typographic_quotes_says_so(tmp_path: Path) -> None:
    """A list typed into a spreadsheet cell gets curly quotes from AutoCorrect ([“c1”, “c2”]): 'invalid JSON in
    column 'contexts': Expecting value', which does not say which character is wrong."""
    path = tmp_path / "d.csv"
    path.write_text('id,answer,contexts\na,x,"[“c1”, “c2”]"\nb,x,"[‘c1’]"\nc,x,"[c1]"\n', encoding="utf-8")
    _, bad = _rows(path)
    curly = "; its quotes are typographic (“ ” ‘ ’, as AutoCorrect types them): JSON's are straight (\")"
    assert [(e.line, e.error) for e in bad] == [
        (2, f"""invalid JSON in column 'contexts': Expecting value (a list is written ["a", "b"]{curly})"""),
        (3, f"""invalid JSON in column 'contexts': Expecting value (a list is written ["a", "b"]{curly})"""),
        (4, """invalid JSON in column 'contexts': Expecting value (a list is written ["a", "b"])"""),
    ]


def test_text_where_a_list_or_an_object_belongs_says_how_one_is_written(tmp_path: Path) -> None:
    """A CSV cell of plain text in a list column (one context, ids split by ';') or a JSON string holding a list was
    reported as pydantic's bare 'Input should be a valid list', which does not say what to write instead."""
    path = tmp_path / "d.csv"
    path.write_text("id,answer,contexts,retrieved_doc_ids,rubric\n1,x,one passage,,\n2,x,,d1;d2,\n3,x,,,be fair\n")
    _, bad = _rows(path)
    lists = 'Input should be a valid list, not text (a list is written ["a", "b"], in a CSV cell too)'
    objects = 'not text (an object is written {"key": "value"}, in a CSV cell too)'
    assert [(e.line, e.error) for e in bad] == [
        (2, f"contexts: {lists}"),
        (3, f"retrieved_doc_ids: {lists[:-1]}, not joined by ';')"),
        (4, f"rubric: Input should be a valid dictionary or instance of Rubric, {objects}"),
    ]
    jsonl = tmp_path / "d.jsonl"
    rows = [{"id": "a", "retrieved_doc_ids": '["d1"]'}, {"id": "b", "contexts": 5}]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _, (stringified, number) = _rows(jsonl)
    assert stringified.error == f"retrieved_doc_ids: {lists}"
    assert number.error == "contexts: Input should be a valid list, got int"  # no text: nothing to say about text


def test_a_list_joined_by_a_separator_in_a_cell_says_a_list_is_not_joined(tmp_path: Path) -> None:
    """Spreadsheets join a list into one cell ('p1|p2', 'd1;d2'): each row said only how a list is written, not
    that its joined text is not one."""
    path = tmp_path / "d.csv"
    path.write_text("id,answer,contexts,retrieved_doc_ids\n1,x,first passage|second passage,\n2,x,,d1;d2\n3,x,,d1\n")
    _, bad = _rows(path)
    lists = 'Input should be a valid list, not text (a list is written ["a", "b"], in a CSV cell too'
    assert [(e.line, e.error) for e in bad] == [
        (2, f"contexts: {lists}, not joined by '|')"),
        (3, f"retrieved_doc_ids: {lists}, not joined by ';')"),
        (4, f"retrieved_doc_ids: {lists})"),
    ]


def test_a_context_of_the_wrong_kind_says_what_a_context_is_and_what_was_given(tmp_path: Path) -> None:
    """A null, a number or a list among a row's contexts (doc ids in the contexts column, a list of lists) was
    'contexts.0: Input should be a valid dictionary or instance of Context': a class of ours, and no word of
    text nor of what the row held; a list where text belongs did not say it was a list."""
    path = tmp_path / "d.jsonl"
    rows = [{"id": "a", "contexts": [None, "b"]}, {"id": "b", "contexts": ["a", 17]},
            {"id": "c", "contexts": [["p1", "p2"]]}, {"id": "d", "answer": ["a1", "a2"]},
            {"id": "e", "contexts": ["ok"]}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ok, bad = _rows(path)
    context = 'a context is text or an object with "text" (or "page_content", "content")'
    assert [(e.line, e.error) for e in bad] == [
        (1, f"contexts.0: {context}, got null"),
        (2, f"contexts.1: {context}, got int"),
        (3, f"contexts.0: {context}, got list"),
        (4, "answer: Input should be a valid string, got list"),
    ]
    assert [r.id for r in ok] == ["e"]


@pytest.mark.parametrize("delimiter", [";", "\t"])
def test_csv_with_semicolons_or_tabs_and_excel_blank_rows(tmp_path: Path, delimiter: str) -> None:
    path = tmp_path / "d.csv"
    lines = ["id;question;answer;reference", "1;What?;Paris;Paris", "2;Why?;3,5;Paris", ";;;", ";;;"]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(line.replace(";", delimiter) for line in lines).encode() + b"\r\n")
    ok, bad = _rows(path)
    assert bad == [] and [(r.id, r.answer, r.reference) for r in ok] == [("1", "Paris", "Paris"), ("2", "3,5", "Paris")]


def test_blank_trailing_rows_of_a_comma_csv_are_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("id,answer,reference,,\r\n1,Paris,Paris,,\r\n,,,,\r\n , ,,,\r\n", encoding="utf-8")
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["1"] and bad == []


@pytest.mark.parametrize("name", ["d.jsonl", "d.csv", "d.json"])
def test_a_utf8_byte_order_mark_is_not_data(tmp_path: Path, name: str) -> None:
    """Excel's "CSV UTF-8" and Windows editors start files with a BOM: the first row and column still read."""
    body = {
        "d.jsonl": '{"id": "a", "answer": "x"}\r\n{"id": "b", "answer": "y"}\r\n',
        "d.csv": "id,answer\r\na,x\r\nb,y\r\n",
        "d.json": json.dumps([{"id": "a", "answer": "x"}, {"id": "b", "answer": "y"}]),
    }[name]
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    ok, bad = _rows(path)
    assert bad == []
    assert [(r.id, r.answer) for r in ok] == [("a", "x"), ("b", "y")]


@pytest.mark.parametrize(
    ("written", "orient"),
    [  # as pandas writes DataFrame({"id": ["a", "b"], "question": ["q1", "q2"], ...}).to_json(path[, orient=])
        ('{"id":{"0":"a","1":"b"},"question":{"0":"q1","1":"q2"},"contexts":{"0":["c1"],"1":["c2"]}}', "columns"),
        ('{"columns":["id","question"],"index":[0,1],"data":[["a","q1"],["b","q2"]]}', "split"),
        ('{"columns":["id","question"],"data":[["a","q1"],["b","q2"]]}', "split"),  # index=False
        # columns named as a field's alias (Ragas' ground_truth) or in another case: rows of no field, all the same
        ('{"user_input":{"0":"q1","1":"q2"},"ground_truth":{"0":"r1","1":"r2"}}', "columns"),
        ('{"Question":{"0":"q1","1":"q2"},"Answer":{"0":"a1","1":"a2"}}', "columns"),
    ],
)
def test_pandas_column_oriented_json_is_refused_with_how_to_write_rows(
    tmp_path: Path, written: str, orient: str
) -> None:
    """pandas' DataFrame.to_json() writes an object of columns by default: it was read as rows keyed by id, one
    row a column ('id', 'question') holding no field, so the run scored nothing with only a warning that no row
    has a field; orient='split' was three bad rows suggesting to give the list under 'columns'."""
    path = tmp_path / "frame.json"
    path.write_text(written)
    with pytest.raises(DatasetError, match=rf"frame.json: .*pandas' DataFrame.to_json\(orient='{orient}'\).*"
                       r"orient='records', lines=True"):  # fmt: skip
        list(iter_rows(path))


def test_pandas_index_oriented_json_of_a_frame_with_ids_is_refused_and_one_keyed_by_id_is_read(
    tmp_path: Path,
) -> None:
    """pandas' ``to_json(orient='index')`` keys each row by the frame's row index: a frame with an ``id`` column was
    read as rows keyed by id, every row a bad row (``key '0': its row's id 'a' differs from its key``) with no word of
    pandas. A frame whose index is its ids (``set_index('id')``), or has no ids, is rows keyed by id, and read."""
    import pandas as pd

    frame = pd.DataFrame({"id": ["a", "b", "c"], "question": ["q1", "q2", None], "answer": ["x", "y", "z"]})
    path = tmp_path / "frame.json"
    for written in (frame, frame[frame.id != "a"]):  # a filtered frame keeps its row labels: "1", "2"
        written.to_json(path, orient="index")
        with pytest.raises(DatasetError, match=r"frame.json: rows keyed by the frame's row index \(0, 1, \.\.\.\), not "
                           r"by their ids, as pandas' DataFrame.to_json\(orient='index'\) writes them: write a row a "
                           r"line: df.to_json\('rows.jsonl', orient='records', lines=True\)$"):  # fmt: skip
            list(iter_rows(path))
    frame.set_index("id").to_json(path, orient="index")
    assert [(r.id, r.question, r.answer) for r in _rows(path)[0]] == [
        ("a", "q1", "x"),
        ("b", "q2", "y"),
        ("c", None, "z"),
    ]
    frame.drop(columns="id").to_json(path, orient="index")
    assert [r.id for r in _rows(path)[0]] == ["0", "1", "2"]
    path.write_text(json.dumps({"1": {"id": "1", "answer": "x"}, "2": {"id": "3", "answer": "y"}}))  # one typo
    assert [(e.line, e.key, e.error) for e in _rows(path)[1]] == [(2, "2", "its id '3' differs from its key")]


def test_json_list_and_object_keyed_by_id(tmp_path: Path) -> None:
    as_list = tmp_path / "l.json"
    as_list.write_text(json.dumps([{"id": "a"}, 3, {"id": "b", "answer": "x"}]))
    ok, bad = _rows(as_list)
    assert [r.id for r in ok] == ["a", "b"] and [e.line for e in bad] == [2]
    as_obj = tmp_path / "o.json"
    as_obj.write_text(json.dumps({"q001": {"answer": "x"}, "q002": {"answer": "y"}}))
    ok, _ = _rows(as_obj)
    assert [(r.id, r.answer) for r in ok] == [("q001", "x"), ("q002", "y")]
    clash = tmp_path / "c.json"
    clash.write_text(json.dumps({"q1": {"id": "q1", "answer": "x"}, "q2": {"id": "other", "answer": "y"}}))
    ok, bad = _rows(clash)
    assert [r.id for r in ok] == ["q1"] and [(e.line, e.key, e.error) for e in bad] == [
        (2, "q2", "its id 'other' differs from its key")]  # fmt: skip
    # a bad row is said by its key: one holding a lone surrogate as its escape, which the console can print
    lone = tmp_path / "s.json"
    lone.write_text('{"q1": {"answer": "x"}, "q2\\udfff": {"answer": "y"}}')
    (said,) = scan_dataset(lone, None, lambda _: None).failures_said()
    assert said.startswith('row "q2\\udfff" of the JSON object: id: U+DFFF: a lone UTF-16 surrogate'), said
    null_id = tmp_path / "n.json"  # null is an absent value (docs/datasets.md): the key is the id
    null_id.write_text(json.dumps({"q1": {"id": None, "answer": "x"}, "q2": {"id": "q2", "answer": "y"}}))
    ok, bad = _rows(null_id)
    assert [r.id for r in ok] == ["q1", "q2"] and bad == []
    # A key written twice: JSON keeps its last row, and the first was lost without a word (JSONL says duplicate ids)
    twice = tmp_path / "t.json"
    twice.write_text(
        '{"q1": {"answer": "x"}, "q2": {"answer": "y", "metadata": {"k": 1, "k": 2}}, "q1": {"answer": "z"}}'
    )
    with pytest.raises(DatasetError, match=r"duplicate ids 'q1': the object keyed by id repeats them"):
        _rows(twice)
    nested = tmp_path / "nested.json"  # a key repeated inside a row is no id
    nested.write_text('[{"id": "a", "metadata": {"k": 1, "k": 2}}]')
    (row,), _ = _rows(nested)
    assert row.metadata == {"k": 2}


def test_the_long_key_of_a_json_objects_bad_row_is_cut_as_its_raw_is(tmp_path: Path) -> None:
    """A bad row of a JSON object is said by its key, cut as its raw is (a 10 kB key flooded each message naming the
    row, and failed_rows.jsonl): by the reader (not an object) and by validation (a field of the wrong type) alike. A
    row that reads keeps its whole key as its id."""
    cut = f"[cut: the key has {10_000:,} characters]"
    path = tmp_path / "o.json"
    path.write_text(json.dumps({"q" * 10_000: 3, "k" * 10_000: {"contexts": 5}, "r" * 10_000: {"answer": "x"}}))
    scan = scan_dataset(path, None, lambda _: None)
    failed = [scan.named.failed_row(e) for e in scan.first_failures]
    assert [(f["row"], len(f["key"]), f["key"].endswith(cut)) for f in failed] == [(1, 1000, True), (2, 1000, True)]
    first, second = scan.failures_said()
    assert first == f'row "{"q" * (1000 - len(cut) - 1)} {cut}" of the JSON object: expected an object, got int'
    assert second.endswith(f'{cut}" of the JSON object: contexts: Input should be a valid list, got int'), second
    (row,), _ = _rows(path)
    assert row.id == "r" * 10_000


def test_a_long_id_that_differs_from_its_key_is_cut_as_the_key_is(tmp_path: Path) -> None:
    """A row of a JSON object whose own id differs from its key was told so with the id whole: a 10 kB id flooded
    the terminal and failed_rows.jsonl. It is cut as the key is, to end with how long it is."""
    path = tmp_path / "o.json"
    path.write_text(json.dumps({"q1": {"id": "i" * 10_000, "answer": "x"}}))
    (error,) = _rows(path)[1]
    cut = f"[cut: the id has {10_000:,} characters]"
    assert error.error == f"its id '{'i' * (1000 - len(cut) - 1)} {cut}' differs from its key", error.error[:80]


def test_only_a_json_objects_bad_row_carries_a_key(tmp_path: Path) -> None:
    """RowError.key is the key of a JSON object's row, by which it is said; a JSONL row's id is no key:
    failed_rows.jsonl keeps it as {"line", "error", "raw"}, as before."""
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"id": "a", "answer": "x"}\n{"id": "b", "contexts": 5}\n')
    scan = scan_dataset(jsonl, None, lambda _: None)
    (bad,) = scan.first_failures
    assert bad.key is None
    error = "contexts: Input should be a valid list, got int"
    assert scan.named.failed_row(bad) == {"line": 2, "error": error, "raw": '{"id": "b", "contexts": 5}'}
    as_obj = tmp_path / "o.json"
    as_obj.write_text(json.dumps({"a": {"answer": "x"}, "b": {"contexts": 5}}))
    (bad,) = scan_dataset(as_obj, None, lambda _: None).first_failures
    assert bad.key == "b"


def test_scan_notes_when_no_row_has_a_field_besides_its_id(tmp_path: Path) -> None:
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"id": "a", "answer": "x", "extra": 1}\n{"id": "b"}\n')
    assert scan_dataset(jsonl, None, lambda _: None).fields_seen == {"id", "answer"}
    csv_file = tmp_path / "d.csv"
    csv_file.write_text("id,Frage,Antwort\na,Wer?,Ada\n")
    assert scan_dataset(csv_file, None, lambda _: None).fields_seen == {"id"}  # columns that are no row field


def test_aliases_and_context_shapes(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        json.dumps({"id": 7, "ground_truth": "g", "contexts": ["plain", {"page_content": "pc", "id": "c2"}]}) + "\n"
    )
    (row,), _ = _rows(path)
    assert row.id == "7" and row.reference == "g"
    assert [(c.text, c.id) for c in row.contexts] == [("plain", None), ("pc", "c2")]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.jsonl", None, "Dataset not found"),
        ("data.txt", "x", "cannot tell the format"),
        ("data.gz", b"\x1f\x8b\x08\x00rest", "cannot tell the format from '.gz'"),  # it said from ''
        ("bad.json", "{not json", "not valid JSON"),
        ("scalar.json", "3", "expected a JSON list"),
        # Common shapes get the way out, not only the parser's complaint.
        ("lines.json", '{"id": "a"}\n{"id": "b"}\n', "one JSON object per line is JSONL, read as such with --format"),
        # The NLP project's all_examples_final.txt: pretty-printed objects one after another (no JSONL either).
        ("pretty.json", '{\n  "id": "a"\n}\n{\n  "id": "b"\n}\n', "values one after another .*jq -c . pretty.json"),
        ("rows.jsonl", b"PAR1\x15\x04\x00\x00PAR1", "a Parquet file: read it with --format parquet"),
        ("rows.parquet", b"PAR1\x15\x04\x00\x00PAR1", "not a readable Parquet file"),
        ("rows.jsonl.gz", b"\x1f\x8b\x08\x00rest", "gzip-compressed, but it cannot be decompressed to its end"),
        ("sheet.csv", b"PK\x03\x04\x14\x00", "a zip archive \\(an .xlsx workbook\\?\\)"),
        # Every line of it was "invalid UTF-8" with the hint for Excel's cp1252.
        ("ps.jsonl", '{"id": "a"}\n'.encode("utf-16"), "UTF-16 text .*not UTF-8: iconv -f utf-16 -t utf-8"),
        # Hugging Face datasets' shards (Arrow streams, as pyarrow writes them): "cannot tell the format from
        # '.arrow'", or with --format every line was invalid UTF-8.
        ("data-00000-of-00001.arrow", b"\xff\xff\xff\xff\x10\x01\x00\x00", "an Arrow stream .*ds.to_json"),
        ("rows.jsonl", b"\xff\xff\xff\xff\x10\x01\x00\x00", "an Arrow stream .*ds.to_json"),
        ("table.arrow", b"ARROW1\x00\x00", "an Arrow file .*ds.to_parquet"),
    ],
)
def test_unusable_files_raise_dataset_error(
    tmp_path: Path, name: str, content: str | bytes | None, message: str
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        list(iter_rows(path, "jsonl" if name == "rows.jsonl" else None))


def test_rows_wrapped_in_an_object_say_to_give_the_list_and_a_csv_may_open_with_par1(tmp_path: Path) -> None:
    wrapped = tmp_path / "wrapped.json"
    wrapped.write_text('{"version": "1", "data": [{"id": "a"}]}')
    with pytest.raises(DatasetError, match=r"if the rows are the list under 'data', give ragscore that list: jq"):
        scan_dataset(wrapped, None, lambda _: None)
    csv = tmp_path / "d.csv"
    csv.write_text("PAR1,id,answer\nx,a,b\n")  # a column named PAR1 is no Parquet file
    assert [r.id for _, r in iter_rows(csv)] == ["a"]


def test_a_pandas_to_csv_list_cell_is_read_and_a_cp1252_row_says_what_to_do(tmp_path: Path) -> None:
    """pandas writes a list column as ``['a', 'b']`` (every row was refused); Excel's plain CSV is cp1252."""
    path = tmp_path / "d.csv"
    path.write_bytes(b'id,answer,contexts\na,x,"[\'c1\', ""it\'s""]"\nb,caf\xe9,\nc,y,"[__import__(\'os\')]"\n')
    ok, bad = _rows(path)
    assert [(r.id, [c.text for c in r.contexts]) for r in ok] == [("a", ["c1", "it's"])]
    assert [e.line for e in bad] == [3, 4]
    assert "the file is not UTF-8: Excel's plain 'CSV' on Windows writes cp1252" in bad[0].error
    assert bad[1].error.startswith("invalid JSON in column 'contexts'")  # a literal only: no code is run


def test_scan_rejects_duplicate_ids_with_their_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [{"id": "a"}, {"id": "b"}, {"id": "a"}, {"id": "a", "system": "other"}, {"id": "a", "system": "other"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError, match=r"2 duplicate ids: id 'a' on lines 1 and 3; id 'a' of system 'other' "
                                           r"on lines 4 and 5\. Ids must be unique per system"):  # fmt: skip
        scan_dataset(path, None, lambda e: None)
    path.write_text("".join(json.dumps({"id": f"q{i % 7}"}) + "\n" for i in range(14)))  # 7 ids twice: 5 named
    with pytest.raises(DatasetError, match=r": 7 duplicate ids: id 'q0' on lines 1 and 8; .*id 'q4' on lines 5 and "
                                           r"12 and 2 more duplicate ids\. Ids must"):  # fmt: skip
        scan_dataset(path, None, lambda e: None)


def test_a_duplicate_id_of_a_json_list_is_said_by_the_rows_places_in_the_list_not_as_lines(tmp_path: Path) -> None:
    """A JSON list of rows on one line said its duplicate as "on lines 1 and 4", a file of one line: the JSON reader
    numbers rows by their place in the list, and the message says so (a pretty-printed list alike)."""
    rows = [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "a"}]
    said = r"d\.json: 1 duplicate id: id 'a' in rows 1 and 4 of the JSON list\. Ids must be unique per system"
    for text in (json.dumps(rows), json.dumps(rows, indent=2)):
        (tmp_path / "d.json").write_text(text)
        with pytest.raises(DatasetError, match=said):
            scan_dataset(tmp_path / "d.json", None, lambda e: None)
        with pytest.raises(DatasetError, match=said):
            scan_dataset(tmp_path / "d.json", "json", lambda e: None)


def test_an_id_holding_the_key_separator_is_not_taken_for_a_system(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [{"id": "x::y"}, {"id": "y", "system": "x"}, {"id": "z", "system": "a::b"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    errors: list[RowError] = []
    assert scan_dataset(path, None, errors.append).rows == 2  # two items, not a duplicate
    assert [(e.line, e.error) for e in errors] == [(3, "system: a system name may not contain '::'")]
    keys = [row.key for _, row in iter_rows(path) if not isinstance(row, RowError)]
    assert [split_key(k) for k in keys] == [(None, "x::y"), ("x", "y")]


def test_scan_rejects_a_dataset_without_valid_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("not json\n")
    errors: list[RowError] = []
    with pytest.raises(DatasetError, match=r"no rows to score \(1 row could not be read\)") as raised:
        scan_dataset(path, None, errors.append)
    assert errors[0].line == 1
    assert "line 1: invalid JSON: Expecting value (column 1)" in str(raised.value), "the reason is named"
    many = tmp_path / "many.jsonl"
    many.write_text("".join(f"bad {i}\n" for i in range(8)))
    with pytest.raises(DatasetError) as raised:
        scan_dataset(many, None, errors.append)
    assert str(raised.value).count("  line ") == 5 and "and 3 more" in str(raised.value)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DatasetError, match="no rows to score"):
        scan_dataset(empty, None, errors.append)


def test_scan_counts_rows_and_failures(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"id": "a"}\nbad\n{"id": "b"}\n')
    errors: list[RowError] = []
    scan = scan_dataset(path, None, errors.append)
    assert (scan.rows, scan.failed, [e.line for e in errors]) == (2, 1, [2])


def test_columns_named_like_a_row_field_but_for_case_or_spaces_are_found(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("\nID,Question,answer,Gold Answer,notes\n1,What?,x,x,free text\n", encoding="utf-8")
    scan = scan_dataset(path, None, lambda e: None)
    assert scan.near_misses == {"ID": "id", "Question": "question", "Gold Answer": "reference"}
    header = f"header of {path}, line 2"  # said where: the header row, below the blank line an export left
    assert scan.warnings() == [
        f"columns 'ID' ({header}, column 1; did you mean 'id'?), 'Question' ({header}, column 2; did you mean "
        f"'question'?), 'Gold Answer' ({header}, column 4; did you mean 'reference'?) are no row field (names are "
        "case-sensitive); metrics ignore them"
    ]


def test_a_near_miss_column_of_a_jsonl_or_json_file_is_said_at_the_first_row_that_has_it(tmp_path: Path) -> None:
    """'Question' was warned of with no place in the file: a JSONL file's first row that has it is named by line, a
    JSON list's by its place in the list."""
    rows = [{"id": "1", "question": "Who?"}, {"id": "2", "question": "What?"}, {"id": "3", "Question": "Why?"}]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + json.dumps({"id": "4", "Question": "x"}) + "\n")
    assert scan_dataset(path, None, lambda e: None).warnings() == [
        f"column 'Question' (first in {path} line 3; did you mean 'question'?) is no row field (names are "
        "case-sensitive); metrics ignore it"
    ]
    listed = tmp_path / "d.json"
    listed.write_text(json.dumps(rows))
    assert (
        f"(first in {listed} row 3 of the JSON list; did you mean 'question'?)"
        in scan_dataset(listed, None, lambda e: None).warnings()[0]
    )


def test_query_and_context_columns_are_named_with_the_field_they_hold(tmp_path: Path) -> None:
    """'query' and a singular 'context' are no row field: their rows were scored as having no question and no
    contexts (quality_checks 0 with no_contexts on every row) without a word."""
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "1", "Query": "Who?", "answer": "Ada", "context": ["Ada wrote it."]}) + "\n")
    scan = scan_dataset(path, None, lambda e: None)
    assert scan.near_misses == {"Query": "question", "context": "contexts"}
    assert "(names are case-sensitive)" not in scan.warnings()[0]  # beside the point for other tools' names
    # Beside the field itself, such a column is the user's own data (a rewritten query): not named.
    both = {"id": "2", "question": "Who?", "query": "who wrote it", "contexts": ["Ada wrote it."], "context": "x"}
    path.write_text(json.dumps(both) + "\n")
    assert scan_dataset(path, None, lambda e: None).near_misses == {}
    path.write_text(json.dumps({"id": "3", "Answer": "Ada", "answer": "Ada"}) + "\n")
    scan = scan_dataset(path, None, lambda e: None)
    assert scan.near_misses == {"Answer": "answer"} and "(names are case-sensitive)" in scan.warnings()[0]
    assert scan.warnings()[0].endswith("is no row field (names are case-sensitive); metrics ignore it")  # not "them"
    # A null question is none (evaluate() writes a DataFrame's NaN as null): the query beside it is named.
    path.write_text(json.dumps({"id": "4", "question": None, "query": "who wrote it", "answer": "Ada"}) + "\n")
    assert scan_dataset(path, None, lambda e: None).near_misses == {"query": "question"}
    # An empty list of contexts is none to the metrics (as when absent): the singular 'context' beside it is named.
    for contexts in ([], None):
        row = {"id": "5", "question": "Who?", "contexts": contexts, "context": ["Ada wrote it."]}
        path.write_text(json.dumps(row) + "\n")
        assert scan_dataset(path, None, lambda e: None).near_misses == {"context": "contexts"}, contexts


def test_a_csv_quote_never_closed_is_one_bad_row_and_every_later_row_is_read(tmp_path: Path) -> None:
    """The csv module reads the lines after an unclosed quote into its cell: in the last column that was one row
    with the rest of the file as its answer, a later quote closing it kept the row and lost the lines between,
    and past 128 KiB the csv module's field limit skipped every line it had swallowed."""
    later = "".join(f"r{i},question {i} padded to make the file longer than the field limit,answer {i}\n"
                    for i in range(3, 3000))  # fmt: skip
    cases = {  # name: (text, the line the csv module ends the broken row on)
        "last.csv": ('id,answer\na,"never closed\nr3,x\nr4,y\n', 4),
        "closed_later.csv": ('id,question,answer\na,"never closed\nr3,"q",x\nr4,q,y\n', 3),
        "long.csv": ('id,question,answer\na,"never closed,x\n' + later, 2999),
    }
    for name, (text, end) in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        lines = text.count("\n")
        found = list(iter_rows(path))
        errors = [(line, r.error, r.raw) for line, r in found if isinstance(r, RowError)]
        error = f"unterminated quote: the quoted cell opened on line 2 runs on to line {end}"
        assert errors == [(2, error, text.splitlines()[1])], name
        assert [(line, r.id) for line, r in found[1:]] == [(n, f"r{n}") for n in range(3, lines + 1)], name


def test_a_csv_quote_gone_wrong_on_a_later_line_of_its_row_is_a_bad_row_of_the_lines_to_it(tmp_path: Path) -> None:
    """A row whose well-formed quoted cell of two lines comes before a quote never closed was reported with its first
    line alone, as 'the row runs from line 2 to ...', naming neither the quote's line nor the lines it holds, and its
    second line was read again as a row. The bad row is now its lines up to the quote's (the raw text as in the file),
    its error names the line the quote opened on, and the lines after it are read as rows."""
    path = tmp_path / "d.csv"
    path.write_text('id,question,answer\na,"two\nlines","never closed\nb,q,ok\nc,"q",x\n', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.error, r.raw) for line, r in found if isinstance(r, RowError)] == [
        (2, "unterminated quote: the quoted cell opened on line 3 (in the row from line 2) runs on to line 5",
         'a,"two\nlines","never closed'),
    ]  # fmt: skip
    assert [(line, r.id) for line, r in found if isinstance(r, Row)] == [(4, "b"), (5, "c")]
    # A stray quote closing it mid-cell on the line it opened on, in a row of two lines (that line, read from its
    # start, is no row of its own: more cells than the header's).
    path.write_text('id,question,answer\na,"two\nlines","x"y,more,cells\nb,q,ok\n', encoding="utf-8")
    [(line, bad), *rows] = list(iter_rows(path))
    assert isinstance(bad, RowError) and (line, bad.raw) == (2, 'a,"two\nlines","x"y,more,cells')
    said = "unterminated quote: the quoted cell opened on line 3 (in the row from line 2) is closed mid-cell"
    assert bad.error == said
    assert [(line, r.id) for line, r in rows] == [(4, "b")]


def test_a_csv_quote_gone_wrong_on_a_later_line_of_its_row_loses_no_row_its_lines_held(tmp_path: Path) -> None:
    """A row's lines up to a quote gone wrong on a later line were one bad row even where the lines after its first
    read as rows (loaders before version 4 read them so): rows 'b' and 'c', taken into the cell that 'a,"x' opens and
    'd",' closes, were lost. Where its lines read from its second hold a row that reading on from the quote's line
    does not, the bad row is its first line, as before, and they are read again as rows."""
    path = tmp_path / "d.csv"
    path.write_text('id,question,answer\na,"x\nb,q,ok\nc,q,ok\nd",q,"never closed\ne,q,ok\n', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.error, r.raw) for line, r in found if isinstance(r, RowError)] == [
        (2, "unterminated quote: the quoted cell opened on line 2 runs on to line 6", 'a,"x'),
        (5, "unterminated quote: the quoted cell opened on line 5 runs on to line 6", 'd",q,"never closed'),
    ]
    assert [(line, r.id) for line, r in found if isinstance(r, Row)] == [(3, "b"), (4, "c"), (6, "e")]
    # The quote's own line read as a row from its start (its first cell the end of the cell before): read so still.
    path.write_text('id,question,answer\na,"two\nlines","x"y\nb,q,ok\n', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.raw) for line, r in found if isinstance(r, RowError)] == [(2, 'a,"two')]
    assert [(line, r.id, r.question) for line, r in found if isinstance(r, Row)] == [(3, 'lines"', "xy"), (4, "b", "q")]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["a", "q", ",", '"', "\n", " ", "b,q,ok\n", '",q,"', '"x"y']), max_size=40))
def test_no_csv_row_the_loaders_before_version_4_read_is_lost(pieces: list[str]) -> None:
    """Whatever the quotes, each row the loaders before version 4 read (a row whose quote went wrong: its first line
    a bad row, its other lines read again) is read at its line: a bad row of its lines up to a later line's quote
    loses none of the rows those lines read as."""
    text = "".join(pieces) + "\nz,q,ok\n"

    def rows(as_before: bool) -> dict[int, object]:
        feed = _LineFeed(io.StringIO(text, newline=""), ",")
        read = _csv_rows(feed, ["id", "question", "answer"], as_before)
        return {line: row for line, row in read if not isinstance(row, RowError)}

    now = rows(as_before=False)
    assert {line: row for line, row in rows(as_before=True).items() if now.get(line) != row} == {}, "rows lost"


def test_a_long_bad_csv_rows_raw_is_cut_with_a_note_of_its_length(tmp_path: Path) -> None:
    """A bad row's raw is its text as in the file up to failed_rows.jsonl's 1,000 characters, its lines past the first
    too; a longer one ends saying it was cut and how long the row is, not cut without a word."""
    path = tmp_path / "d.csv"
    cell = "w" * 3000
    path.write_text(f'id,question,answer\na,"{cell[:1500]}\n{cell[1500:]}","never closed\nb,q,ok\n', encoding="utf-8")
    [(_, bad), (_, row)] = list(iter_rows(path))
    assert isinstance(bad, RowError) and isinstance(row, Row) and row.id == "b"
    note = " [cut: the row has 3,019 characters]"
    assert bad.to_json()["raw"] == f'a,"{cell[: 1000 - len(note) - 3]}{note}'


@pytest.mark.parametrize(("name", "bad"), [("d.jsonl", '{"id": "a", "answer": "' + "w" * 3000), ("d.json", None)])
def test_a_long_bad_jsonl_or_json_rows_raw_is_cut_with_the_csv_rows_note(
    tmp_path: Path, name: str, bad: str | None
) -> None:
    """A malformed JSONL row's raw (and a JSON element's) was cut at 1,000 characters without a word, where a CSV
    row's ends with a note of its length: every format's now ends with that note."""
    path = tmp_path / name
    if bad is None:  # a JSON list holding an element that is no object: its raw is the element as JSON
        bad = json.dumps(["w" * 3000])
        path.write_text(f'[{bad}, {{"id": "b", "answer": "ok"}}]', encoding="utf-8")
    else:
        path.write_text(f'{bad}\n{{"id": "b", "answer": "ok"}}\n', encoding="utf-8")
    [(_, error), (_, row)] = list(iter_rows(path))
    assert isinstance(error, RowError) and isinstance(row, Row) and row.id == "b"
    note = f" [cut: the row has {len(bad):,} characters]"
    assert error.to_json()["raw"] == bad[: 1000 - len(note)] + note


SPACED_QUOTE = (
    "column 'question': a quote typed after a space ('\"x') is text in CSV, not the start of a quoted cell, so "
    "the cell ends at the next {0} or line end: remove the spaces between the {0} and the quote"
)


@pytest.mark.parametrize(("delimiter", "name"), [(",", "comma"), (";", "semicolon")])
def test_a_csv_quote_typed_after_a_space_is_a_bad_row_saying_to_remove_the_space(
    tmp_path: Path, delimiter: str, name: str
) -> None:
    """``a, "x, y"`` (as people type it) read its quote as text, as the csv module, pandas and Excel do: the row
    was 'more cells than header columns', or, with fewer, a question ' "x' and a reference ' y"' without a word;
    over two lines, one row's quoted cell became two rows. Each such row says where its quote goes; others load."""
    path = tmp_path / "d.csv"
    d = delimiter
    path.write_text(
        f"id{d}question{d}answer\n"
        f'a{d} "x{d} y"{d}z\n'  # line 2: 'more cells than header columns (4 of 3)' before
        f'b{d} "x{d} y"\n'  # line 3: as many cells as the header, silently question ' "x' and answer ' y"' before
        f'c{d} "x\n'  # line 4: a quote meant to open a cell of two lines
        f"d{d}q{d}ok\n"
        f'e{d} "quoted whole"{d}ok\n',  # a cell quoted whole after a space stays as typed
        encoding="utf-8",
    )
    with path.open("a", encoding="utf-8", newline="") as fh:  # as a CSV writer quotes the value ' "x, y'
        csv.writer(fh, delimiter=d).writerow(["f", f' "x{d} y', "ok"])
    found = list(iter_rows(path))
    errors = [(line, r.error) for line, r in found if isinstance(r, RowError)]
    assert errors == [(n, SPACED_QUOTE.format(name)) for n in (2, 3, 4)]
    assert [(line, r.id, r.question) for line, r in found if isinstance(r, Row)] == [
        (5, "d", "q"),
        (6, "e", ' "quoted whole"'),
        (7, "f", f' "x{d} y'),
    ]


def test_a_csv_quote_typed_after_a_space_to_open_a_cell_of_several_lines_takes_them_into_its_bad_row(
    tmp_path: Path,
) -> None:
    """``c, "x`` then ``more", z``: the row was reported, and its next line, the rest of the cell the quote meant to
    open, was read as a row of its own (id ``more"``) and scored. The lines up to the quote that closes the meant cell
    are now that one bad row; a line whose first quote is mid-cell is no such rest, and is read as a row."""
    path = tmp_path / "d.csv"
    path.write_text(
        "id,question,answer\n"
        'a, "x\nmore", z\n'  # lines 2-3: one row
        'b, "x\nmore\nand ""more""", z\n'  # lines 4-6: one row ("" is a quote in the meant cell)
        "c,q,ok\n"
        'd, "x\n'  # line 8: the next quote (line 10's) is mid-cell: lines 9 and 10 are rows
        "e,q,ok\n"
        'f,"quoted whole",ok\n',
        encoding="utf-8",
    )
    found = list(iter_rows(path))
    meant = " (its cell was meant to run on: the row runs from line {} to {})"
    assert [(line, r.error, r.raw) for line, r in found if isinstance(r, RowError)] == [
        (2, SPACED_QUOTE.format("comma") + meant.format(2, 3), 'a, "x\nmore", z'),  # its lines, as in the file
        (4, SPACED_QUOTE.format("comma") + meant.format(4, 6), 'b, "x\nmore\nand ""more""", z'),
        (8, SPACED_QUOTE.format("comma"), 'd, "x'),
    ]
    assert [(line, r.id, r.question) for line, r in found if isinstance(r, Row)] == [
        (7, "c", "q"),
        (9, "e", "q"),
        (10, "f", "quoted whole"),
    ]


def test_a_csv_quote_typed_after_a_space_never_takes_a_line_whose_quote_opens_a_cell(tmp_path: Path) -> None:
    """A line whose first quote opens a cell is a row as the csv module reads it (``b,q,",y"``: the answer ``,y``;
    ``d,q,"`` then ``more"``: a cell of two lines; ``f,"",ok``: an empty cell): the meant cell of a quote typed after a
    space above it does not run on into it. Each was taken into that bad row (the first two as the meant cell's
    closing quote, ``more"`` then read as a row of its own), and so was the row after ``f``'s."""
    path = tmp_path / "d.csv"
    path.write_text(
        'id,question,answer\na, "x\nb,q,",y"\nc, "x\nd,q,"\nmore"\ne, "x\nf,"",ok\ng,q,a"\n', encoding="utf-8"
    )
    found = list(iter_rows(path))
    assert [(line, r.error) for line, r in found if isinstance(r, RowError)] == [
        (2, SPACED_QUOTE.format("comma")),
        (4, SPACED_QUOTE.format("comma")),
        (7, SPACED_QUOTE.format("comma")),
    ]
    assert [(line, r.id, r.question, r.answer) for line, r in found if isinstance(r, Row)] == [
        (3, "b", "q", ",y"),
        (5, "d", "q", "\nmore"),
        (8, "f", None, "ok"),
        (9, "g", "q", 'a"'),
    ]


def test_a_csv_quote_typed_after_a_space_reads_on_no_more_lines_than_64_mib_hold(tmp_path: Path) -> None:
    """The lines read on for the meant cell are held till its closing quote: a cap of their characters let 64
    million short lines be held (gigabytes). Past 64 MiB of lines held they are given again and read as rows."""
    path = tmp_path / "d.csv"
    path.write_text('id,question,answer\na, "x\n' + "\n" * 2_000_000 + 'g,q,a"\n', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.error) for line, r in found if isinstance(r, RowError)] == [(2, SPACED_QUOTE.format("comma"))]
    assert [(line, r.id, r.answer) for line, r in found if isinstance(r, Row)] == [(2_000_003, "g", 'a"')]


@pytest.mark.parametrize(
    ("text", "line", "column"), [('id, "question, answer\n', 1, 2), ('\nid;x; "question;a\n', 2, 3)]
)
def test_a_csv_header_quote_typed_after_a_space_stops_the_dataset_naming_its_line_and_column(
    tmp_path: Path, text: str, line: int, column: int
) -> None:
    """The header's cells were not checked as rows' are: ``id, "question, answer`` named the columns ``"question`` and
    ``answer"``, so no row had a question, without a word."""
    path = tmp_path / "d.csv"
    path.write_text(text + "a,q,ok\n", encoding="utf-8")
    name = "comma" if "," in text else "semicolon"
    expected = f"the header row (line {line}), column {column}: a quote typed after a space ('\"question')"
    with pytest.raises(DatasetError, match=re.escape(expected)) as caught:
        list(iter_rows(path))
    assert str(caught.value).endswith(f"remove the spaces between the {name} and the quote")


@pytest.mark.parametrize(
    ("header", "column", "typed", "field"),
    [
        ('id, "question", answer', 2, '"question"', "question"),
        ('id,question,answer, "Ground truth"', 4, '"Ground truth"', "reference"),
    ],
)
def test_a_csv_header_cell_quoted_whole_after_a_space_naming_a_row_field_stops_the_dataset(
    tmp_path: Path, header: str, column: int, typed: str, field: str
) -> None:
    """``id, "question"``: the csv module names the column ``"question"``, quotes and all, so no row had a question,
    without a word (no near-miss warning either: the quotes are in the name)."""
    path = tmp_path / "d.csv"
    path.write_text(f"{header}\na,q,ok,r\n", encoding="utf-8")
    expected = (f"the header row (line 1), column {column}: a quote typed after a space ({typed!r}) is text in CSV, "
                f"not the start of a quoted cell, so the column is named {typed!r}, quotes and all, and no row has "
                f"its {field}: remove the spaces between the comma and the quote")  # fmt: skip
    with pytest.raises(DatasetError, match=re.escape(expected)):
        list(iter_rows(path))


def test_a_csv_header_cell_quoted_whole_after_a_space_naming_no_row_field_or_quoted_right_is_read(
    tmp_path: Path,
) -> None:
    """A column of no row field quoted after a space (`` "notes"``) is the user's own data, named as the csv module
    names it; a cell quoted right after the comma whose text is `` "answer"`` (its quotes doubled) is no such cell."""
    path = tmp_path / "d.csv"
    path.write_text('id,question, "notes"," ""answer"""\na,q,n,ok\n', encoding="utf-8")
    [(_, row)] = list(iter_rows(path))
    assert isinstance(row, Row)
    assert (row.id, row.question, row.answer, row.model_extra) == ("a", "q", None, {'"notes"': "n", '"answer"': "ok"})


def test_a_csv_quoted_cell_holding_a_comma_space_quote_does_not_make_another_cell_a_spaced_quote(
    tmp_path: Path,
) -> None:
    """Whether a cell opening with a space and a quote was quoted in the file was told by finding ``, "x`` anywhere
    in the row's text: a quoted cell of several lines whose value ends with a comma, a space and a quote (as
    csv.writer writes it, the quote doubled and the cell closed: ``, ""`` and ``"``) made the quoted answer after it
    (the value `` \"\"\"``) a 'quote typed after a space', and a row csv.writer wrote was refused. The row's cells
    are now told quoted or not as the csv module reads them; an unquoted one is still reported."""
    path = tmp_path / "d.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerows([["id", "question", "answer"], ["a", 'he said\nno, "', ' """'], ["b", 'x, "', ' "']])
    with path.open("a", encoding="utf-8", newline="") as fh:
        fh.write('c,"he said\nno, """, "x\n')  # the answer's quote typed after a space, in the same row
    found = list(iter_rows(path))
    assert [(line, r.id, r.question, r.answer) for line, r in found if isinstance(r, Row)] == [
        (2, "a", 'he said\nno, "', ' """'),
        (4, "b", 'x, "', ' "'),
    ]
    assert [(line, r.error) for line, r in found if isinstance(r, RowError)] == [
        (5, SPACED_QUOTE.format("comma").replace("question", "answer"))
    ]


def test_a_csv_quote_closed_before_spaces_is_closed_in_a_row_of_several_lines(tmp_path: Path) -> None:
    """``"x" , z``: a quoted cell of two lines, closed and followed by a space before the comma, was 'unterminated
    quote: the row runs from line 2 to 3', and its second line read again as a row of its own (id 'more" '). The
    csv module keeps the spaces in the cell (``x ``), as on a row of one line."""
    path = tmp_path / "d.csv"
    path.write_text('id,question,answer\na,"x\nmore" , z\nb,"y"  ,w\nc,"p\nq"  \nd,q,ok\n', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.id, r.question, r.answer) for line, r in found] == [
        (2, "a", "x\nmore ", " z"),
        (4, "b", "y  ", "w"),
        (5, "c", "p\nq  ", None),
        (7, "d", "q", "ok"),
    ]


def test_a_csv_cell_past_the_limit_is_one_bad_row_saying_so(tmp_path: Path) -> None:
    """A cell over the 64 MiB a cell may hold was the csv module's 'CSV: field larger than field limit (67108864)',
    which says nothing of cells nor of the limit as docs/datasets.md gives it."""
    path = tmp_path / "d.csv"
    path.write_text('id,answer\na,"' + "w" * (64 * 1024 * 1024 + 1) + '"\nb,ok\n', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.error) for line, r in found if isinstance(r, RowError)] == [
        (2, "a cell longer than 67,108,864 characters (64 MiB), the most a cell may hold")
    ]
    assert [(line, r.id) for line, r in found if not isinstance(r, RowError)] == [(3, "b")]


@pytest.mark.parametrize("end", ["\n", ""])
def test_a_csv_quote_left_open_on_the_last_line_is_a_bad_row_not_a_cell_to_the_end(tmp_path: Path, end: str) -> None:
    """The last row's quote never closed: the csv module ends the cell at the end of the file, so the row was read
    with its quoted cell running into the next column's text ('Paris,Paris\n') and the columns after it absent."""
    path = tmp_path / "d.csv"
    path.write_text(f'id,question,answer,reference\nc1,q,Paris,Paris\nc2,q,"Paris,Paris{end}', encoding="utf-8")
    found = list(iter_rows(path))
    assert [(line, r.id) for line, r in found if not isinstance(r, RowError)] == [(2, "c1")]
    errors = [(line, r.error, r.raw) for line, r in found if isinstance(r, RowError)]
    assert errors == [(3, "unterminated quote: the quoted cell opened on line 3 is still open at the end of the file",
                       'c2,q,"Paris,Paris')]  # fmt: skip
    path.write_text('id,answer,reference\nc1,"a ""b""",a"b\nc2,"x",y"\n', encoding="utf-8")  # closed, or mid-cell
    assert [r.answer for _, r in iter_rows(path)] == ['a "b"', "x"]


def test_a_pretty_printed_json_named_jsonl_says_so_on_its_first_line(tmp_path: Path) -> None:
    """Every line of it was "invalid JSON", and nothing said the file was one JSON document, not JSONL."""
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps([{"id": "a", "answer": "x"}, {"id": "b", "answer": "y"}], indent=1), encoding="utf-8")
    errors = [r.error for _, r in iter_rows(path) if isinstance(r, RowError)]
    assert "a pretty-printed JSON document is not JSONL: read it with --format json" in errors[0], errors[0]
    assert "jq -c '.[]' d.jsonl" in errors[0] and not any("pretty-printed" in e for e in errors[1:]), errors


def test_csv_cells_over_the_csv_modules_128_kib_and_multiline_rows_are_read(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    context = "word " * 60_000  # 300,000 characters: a transcript, well under RAGSCORE_MAX_FIELD_CHARS
    path.write_text(
        f'id,question,contexts\na,q,"{json.dumps([context]).replace(chr(34), chr(34) * 2)}"\n'
        'b,"two\nlines"\n'  # a row that spans lines and gives fewer cells than the header: a row, not a bad quote
        "c,q\n"
        'd,"a 5"" screen,\nor ""6"""\n'  # doubled quotes in a cell that spans lines
        'e,a 5" screen,"[""x"",\n""y""]"\n',  # a quote inside an unquoted cell is text, not an unclosed quote
        encoding="utf-8",
    )
    found = list(iter_rows(path))
    assert all(not isinstance(r, RowError) for _, r in found), found
    assert [(line, r.id) for line, r in found] == [(2, "a"), (3, "b"), (5, "c"), (6, "d"), (8, "e")]
    assert found[0][1].contexts[0].text == context and found[1][1].question == "two\nlines"
    assert found[3][1].question == 'a 5" screen,\nor "6"'
    assert found[4][1].question == 'a 5" screen' and [c.text for c in found[4][1].contexts] == ["x", "y"]


def test_a_csv_row_whose_quote_closes_mid_cell_and_swallows_its_columns_is_a_bad_row(tmp_path: Path) -> None:
    """A question's opening quote left open on a row of one line: the csv module closed it at the next cell's
    quote, so the question took the answer, reference and contexts with it, and the rest read as empty (Excel's
    trailing cells): the row was scored, unscorable "no reference", with no failed row and exit 0. It is a bad row
    now, saying why; a short row without a stray quote (Excel's), a doubled quote in a quoted cell, and a short row
    whose quoted cell, holding no separator, swallowed none (text after its quote, read as the csv module reads it)
    still read."""
    path = tmp_path / "d.csv"
    path.write_text(
        "id,question,answer,reference,contexts\n"
        'q1,What is the capital of France?,Paris,Paris,"[""Paris is the capital.""]"\n'
        'q2,"What is the capital of Spain?,Madrid,Madrid,"[""Madrid is the capital.""]"\n'
        'q3,"A 5"" screen?",4\n'
        'q4,"The Hobbit" by Tolkien,x\n',
        encoding="utf-8",
    )
    rows, bad = _rows(path)
    assert [r.id for r in rows] == ["q1", "q3", "q4"] and rows[1].question == 'A 5" screen?'
    assert rows[1].reference is None and rows[2].question == "The Hobbit by Tolkien" and rows[2].answer == "x"
    said = ("a quote closes a quoted cell holding separators before the cell ends, so the row reads 2 cells of the "
            'header\'s 5: is a quote left open, or one inside a quoted cell not written twice ("")?')  # fmt: skip
    assert [(e.line, e.error) for e in bad] == [(3, said)]


def test_a_csv_header_with_a_quote_never_closed_stops_the_dataset(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text('id,"question,answer\na,q,x\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"a quote in the header row \(line 1\) is never closed"):
        list(iter_rows(path))


@pytest.mark.parametrize(
    ("text", "opened", "end"),
    [
        ('id,"question,answer\na,q"x,more\nb,q,ok\n', 1, 2),
        ('\nid,"ques\ntion","answer\na,q,x\nb,q"y,z\n', 3, 5),
        ('id,"question\nx" y,"answer\nz"\nq1,a,b\n', 1, 3),  # a quoted cell opens after the stray quote (line 2)
    ],
)
def test_a_csv_header_quote_a_stray_quote_closed_says_where_it_opened_and_closed(
    tmp_path: Path, text: str, opened: int, end: int
) -> None:
    """A header whose quote a stray quote on a later line closed mid-cell was said 'never closed': it now says the line
    the quote opened on and the lines the csv module read the header over (not the stray quote's: a quoted cell that
    opens after it reads the header on past its line)."""
    path = tmp_path / "d.csv"
    path.write_text(text, encoding="utf-8")
    start = 2 if text.startswith("\n") else 1
    said = (f"a quote in the header row (line {opened}) is closed mid-cell by a stray quote, so the header row runs "
            f"from line {start} to line {end}: is a quote left open, or one inside a quoted name not written twice "
            '("")?')  # fmt: skip
    with pytest.raises(DatasetError, match=re.escape(said)):
        list(iter_rows(path))


@pytest.mark.parametrize("rows", ["", "\na,q,x,y\n"])
@pytest.mark.parametrize("name", ["d.csv", "d.tsv"])
def test_a_csv_header_of_one_line_a_stray_quote_closed_says_its_line(tmp_path: Path, rows: str, name: str) -> None:
    """A header of one line whose quoted name a stray quote closed mid-cell: the csv module joined the names up to it
    into one (``question,answer,reference``), and a file that was only its header read silently (one with rows told
    each row had more cells than the header). It is the header's error, with its line, as where the header runs on;
    a stray quote in a name holding no separator reads as the csv module reads it, as in a row."""
    sep = "\t" if name.endswith(".tsv") else ","
    path = tmp_path / name
    path.write_text(sep.join(["id", '"question', "answer", '"reference']) + rows, encoding="utf-8")
    said = ("a quote in the header row (line 1) is closed mid-cell by a stray quote, so the names it spans read as "
            'one: is a quote left open, or one inside a quoted name not written twice ("")?')  # fmt: skip
    with pytest.raises(DatasetError, match=re.escape(said)):
        list(iter_rows(path))
    path.write_text(sep.join(["id", '"question" text', "answer"]) + "\na" + sep + "q" + sep + "x\n", encoding="utf-8")
    assert [(line, r.model_extra) for line, r in iter_rows(path)] == [(2, {"question text": "q"})]


def test_a_csv_column_given_twice_stops_the_dataset(tmp_path: Path) -> None:
    """The second ``answer`` column silently replaced the first in every row."""
    path = tmp_path / "d.csv"
    path.write_text("id,answer,question,answer,,\na,first,q,second,,\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"column 'answer' given twice in the header row"):
        list(iter_rows(path))


_CSV_CHARS = st.sampled_from(['"', ",", ";", "\t", "a", "\n", "\r"])


@settings(deadline=None)  # as every property test here: a loaded machine's stall in one example is no failure
@given(st.sampled_from([",", ";", "\t"]), st.lists(_CSV_CHARS, max_size=16))
def test_a_quote_gone_wrong_is_what_the_csv_module_refuses_when_strict(delimiter: str, chars: list[str]) -> None:
    """The CSV reader's check of a multi-line row (it visits only the quotes, so that long multi-line cells cost no
    Python step a character) reads quotes exactly as the csv module does: strict, it raises where the check says
    a quote went wrong."""
    text = "".join(chars)
    try:
        list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True))
        refused = False
    except csv.Error:
        refused = True
    assert (_wrong_quote(text, delimiter) is not None) == refused


def test_a_jsonl_file_read_as_csv_stops_with_the_hint_to_read_it_as_jsonl(tmp_path: Path) -> None:
    """``--format csv`` on a JSONL file read every line as a row of JSON fragments: id-only rows, and a warning."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": "Q?", "answer": "A"}) + "\n" for i in range(43)))
    with pytest.raises(DatasetError, match=r"its first line is a JSON object: JSONL, not CSV\? read it with --format "
                                           r"jsonl$"):  # fmt: skip
        list(iter_rows(path, "csv"))
    assert len(_rows(path)[0]) == 43  # as JSONL
    named_csv = path.rename(tmp_path / "rows.csv")
    with pytest.raises(DatasetError, match=r"read it with --format jsonl \(or name it \.jsonl\)$"):
        list(iter_rows(named_csv))


def test_a_csv_file_read_as_jsonl_says_so_on_its_first_line(tmp_path: Path) -> None:
    """``--format jsonl`` on a CSV file: every line "invalid JSON", and nothing said it was CSV."""
    path = tmp_path / "rows.csv"
    path.write_text("id,system,question,answer,reference\n" + "".join(f"q{i},sysA,Q?,A,A\n" for i in range(27)))
    errors = [r.error for _, r in iter_rows(path, "jsonl") if isinstance(r, RowError)]
    assert len(errors) == 28 and all(e.startswith("invalid JSON") for e in errors)
    assert errors[0].endswith("its first line reads as a CSV header row (id, system, question, ...): read it with "
                              "--format csv"), errors[0]  # fmt: skip
    assert not any("--format csv" in e for e in errors[1:])
    text = path.rename(tmp_path / "rows.txt")
    assert next(r for _, r in iter_rows(text, "jsonl")).error.endswith("--format csv (or name it .csv)")
    path = text.rename(tmp_path / "rows.jsonl")
    # A JSONL file whose first line is broken is no CSV.
    path.write_text('{"id": "a", "answer": \n{"id": "b", "answer": "x"}\n')
    first = next(r for _, r in iter_rows(path, "jsonl"))
    assert isinstance(first, RowError) and "--format" not in first.error


def test_a_csv_row_with_fewer_cells_than_the_header_reads_the_missing_ones_as_empty(tmp_path: Path) -> None:
    """Excel drops the trailing separators of rows whose last cells are empty: a short row is such a row (as
    Python's csv module and pandas read it), not a bad one; refusing it dropped most of such a file. More cells than
    the header names is a bad row, saying the counts."""
    path = tmp_path / "d.csv"
    path.write_text("id,question,answer,reference,group\n"
                    "q1,Q1?,R,R,g1\n"
                    "q2,Q2?,R,R\n"
                    "q3,Q3?\n"
                    "q4,Q4?,R,R,g1,x\n", encoding="utf-8")  # fmt: skip
    ok, bad = _rows(path)
    assert [(r.id, r.group, r.answer) for r in ok] == [("q1", "g1", "R"), ("q2", None, "R"), ("q3", None, None)]
    assert [(e.line, e.error) for e in bad] == [(5, "more cells than header columns (6 of 5)")]


@pytest.mark.parametrize(
    ("name", "suffix"),
    [("rows.jsonl", ".jsonl"), ("ROWS.CSV", ".csv"), ("rows.csv.gz", ".csv"), ("Rows.JSONL.GZ", ".jsonl"),
     ("data.gz", ""), ("rows", ""), ("a.b.parquet", ".parquet")],
)  # fmt: skip
def test_a_files_extension_is_read_under_its_gz_one_in_lower_case(tmp_path: Path, name: str, suffix: str) -> None:
    """What detect_format and the hints (``or name it .csv``) read as a file's extension."""
    assert _suffix(tmp_path / name) == suffix


def test_a_gzipped_csv_file_read_as_jsonl_is_not_told_to_be_named_csv(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "rows.csv.gz"
    path.write_bytes(gzip.compress(b"id,question,answer\nq1,Q?,A\n"))
    first = next(r for _, r in iter_rows(path, "jsonl"))
    assert isinstance(first, RowError) and first.error.endswith("read it with --format csv"), first.error


@pytest.mark.parametrize("name", ["state.json", "dataset_dict.json"])
def test_an_eval_points_folder_whose_topic_file_has_a_save_to_disk_name_is_read(tmp_path: Path, name: str) -> None:
    """A save_to_disk folder is told by its files' names and what they hold: an eval-points folder whose topic file
    is named state.json or dataset_dict.json, beside an .arrow file of its own, is no such folder."""
    folder = tmp_path / "topics"
    folder.mkdir()
    topic = {"topic": "t", "question": "Q?", "answers": {"m": "A"}, "evaluation_points": [{"type": "keyword",
             "keywords": ["A"]}]}  # fmt: skip
    (folder / name).write_text(json.dumps(topic), encoding="utf-8")
    (folder / "cache.arrow").write_bytes(b"\xff\xff\xff\xff")
    assert [(r.id, r.answer) for _, r in iter_rows(folder)] == [("t", "A")]


def test_iter_rows_with_ids_yields_the_same_rows_of_those_ids_as_without(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    records = [{"id": "a", "question": "qa"}, {"id": 7, "question": "q7"}, {"question": "no id"},
               {"id": 1.5, "question": "float id"}, {"id": "b", "question": "qb"}, {"id": True}]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n{bad\n", encoding="utf-8")
    ids = {"a", "7", "row-3", "1.5"}
    everything = [(line, row) for line, row in iter_rows(path) if isinstance(row, RowError) or row.id in ids]
    assert [(line, row) for line, row in iter_rows(path, ids=ids) if isinstance(row, RowError) or row.id in ids] == (
        everything
    )
    assert [row.id for _, row in everything if isinstance(row, Row)] == ["a", "7", "row-3", "1.5"]
    assert not any(isinstance(row, Row) and row.id == "b" for _, row in iter_rows(path, ids=ids))


def test_a_csv_header_typed_with_spaces_after_its_commas_names_its_fields(tmp_path: Path) -> None:
    """``id, question, answer`` (as people type it) was warned about but not read: every field went missing, its
    columns named ' question' and ' answer'. Header names are read stripped; the values stay as given."""
    path = tmp_path / "d.csv"
    path.write_text("id, question, answer\na, What is X?, X is Y\n", encoding="utf-8")
    ok, bad = _rows(path)
    assert bad == []
    assert [(r.id, r.question, r.answer, r.model_extra) for r in ok] == [("a", " What is X?", " X is Y", {})]
    assert scan_dataset(path, None, lambda _: None).near_misses == {}
    path.write_text("id, answer ,answer\na,x,y\n", encoding="utf-8")  # given twice once stripped: still refused
    with pytest.raises(DatasetError, match=r"column 'answer' given twice in the header row \(' answer ', 'answer'"):
        list(iter_rows(path))  # the names as written: the user's header does not show 'answer' twice


@pytest.mark.parametrize(
    ("char", "named"),
    [
        ("\t", r"a raw tab (U+0009), which JSON must escape as \t"),
        ("\x01", r"a raw control character (U+0001), which JSON must escape as \u0001"),
    ],
)
def test_a_raw_tab_in_a_jsonl_string_says_so_and_the_other_rows_load(tmp_path: Path, char: str, named: str) -> None:
    """A tab pasted into a JSONL string was only json's 'Invalid control character at' with no hint."""
    path = tmp_path / "d.jsonl"
    path.write_text(f'{{"id": "a"}}\n{{"id": "b", "answer": "x{char}y"}}\n{{"id": "c"}}\n', encoding="utf-8")
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["a", "c"]
    assert [(e.line, e.error) for e in bad] == [
        (2, f"invalid JSON: Invalid control character at (column 25); a string holds {named}")
    ]


CSV_LINE_BREAK = (
    "invalid JSON in column 'contexts': a string holds a raw line break (U+000A), which JSON must escape as \\n "
    '(a list is written ["a", "b"])'
)


def test_a_raw_tab_in_a_json_file_or_a_line_break_in_a_csv_list_cell_says_so(tmp_path: Path) -> None:
    """The .json whole-file loader and a CSV list cell (Alt+Enter in a spreadsheet) said only json's 'Invalid control
    character at', as a JSONL line did."""
    path = tmp_path / "d.json"
    path.write_text('[{"id": "a", "answer": "x\ty"}]', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"; a string holds a raw tab \(U\+0009\), which JSON must escape as \\t$"):
        list(iter_rows(path))
    path = tmp_path / "d.csv"
    path.write_text('id,contexts\na,"[""one\nline""]"\nb,\n', encoding="utf-8")
    ok, bad = _rows(path)
    assert [r.id for r in ok] == ["b"]
    assert [(e.line, e.error) for e in bad] == [(2, CSV_LINE_BREAK)]


def test_same_bytes_reader_names_the_loaders_that_fingerprinted_these_bytes(tmp_path: Path) -> None:
    """A run's fingerprint is checked for the loaders' version it names (r2-...; none: 1, the package version
    digested), in one pass: this version, an older or a newer one where the bytes are the same; None where not."""
    from orchestrator.datasets import READER_VERSION, dataset_fingerprint, other_reader, same_bytes_reader

    from ..support import fingerprint_before_reader_versions, write_jsonl

    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "question": "q", "answer": "x"}])
    ours = dataset_fingerprint(data, "jsonl", None)
    newer = dataset_fingerprint(data, "jsonl", None, reader=READER_VERSION + 1)
    older = fingerprint_before_reader_versions(data, "jsonl")
    assert ours == f"r{READER_VERSION}-{ours.split('-')[1]}" and len({ours, newer, older}) == 3
    assert [same_bytes_reader(f, data, "jsonl", None) for f in (ours, newer, older)] == [
        READER_VERSION,
        READER_VERSION + 1,
        1,
    ]
    assert same_bytes_reader(None, data, "jsonl", None) is None
    assert other_reader(1) == f"an older ragscore (its loaders' version 1, this one's {READER_VERSION})"
    assert other_reader(READER_VERSION + 1).startswith("a newer ragscore")
    write_jsonl(data, [{"id": "a", "question": "q", "answer": "y"}])
    assert [same_bytes_reader(f, data, "jsonl", None) for f in (ours, newer, older)] == [None, None, None]


def test_a_fingerprint_of_loaders_version_1_run_from_a_checkout_is_named_as_theirs(tmp_path: Path) -> None:
    """Before the loaders had a version, a ragscore run from a checkout (its package not installed) digested "?" in
    place of the package version: such a run's unchanged bytes read as changed, and a resume or a report said the file
    "changed since it was submitted" where an older ragscore read it (``git log -S'"?"'``: d42e43f)."""
    from orchestrator.datasets import same_bytes_reader

    from ..support import fingerprint_before_reader_versions, write_jsonl

    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "question": "q", "answer": "x"}])
    from_a_checkout = fingerprint_before_reader_versions(data, "jsonl", package_version="?")
    assert same_bytes_reader(from_a_checkout, data, "jsonl", None) == 1
    write_jsonl(data, [{"id": "a", "question": "q", "answer": "y"}])
    assert same_bytes_reader(from_a_checkout, data, "jsonl", None) is None


def test_a_dataset_folders_file_that_links_outside_the_folder_is_read_and_said(tmp_path: Path) -> None:
    """A file of a dataset folder that is a link to a file outside it was followed without a word: it is read (a data
    lake's, git-annex's links are the data) and the warning names the link and where it leads; a link within the
    folder, and a folder without links, are not said."""
    folder = tmp_path / "points"
    shutil.copytree(ROOT / "examples" / "eval-points", folder)
    plain = scan_dataset(folder, None, lambda e: None)
    assert plain.rows > 0 and not [w for w in plain.warnings() if "link" in w]
    lake = tmp_path / "lake"
    lake.mkdir()
    (folder / "points.json").rename(lake / "points.json")
    (folder / "points.json").symlink_to(lake / "points.json")
    (folder / "notes").mkdir()
    (folder / "notes" / "same.md").symlink_to(folder / "suite.yaml")  # within the folder: not said
    scan = scan_dataset(folder, None, lambda e: None)
    assert scan.rows == plain.rows, scan  # read all the same
    assert [w for w in scan.warnings() if "link" in w] == [
        f"1 file of dataset folder {folder} is a link to a file outside it, read all the same: "
        f"'{folder / 'points.json'}' -> '{lake / 'points.json'}'; check it leads to the data you mean (a copy in "
        "the folder is read as it is)"
    ]
