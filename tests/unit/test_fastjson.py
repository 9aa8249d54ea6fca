"""fastjson: the same values and the same errors as the json module, for every document it is given."""

from __future__ import annotations

import json

import pytest

from ragscore_workers.fastjson import dumps_utf8, loads, loads_line

GOOD = [
    '{"score":0.5,"passed":true,"details":{"rank":null,"gold":[1,2]},"ms":8.1}',
    '{"id": "q1", "group": "b", "question_sha": "266ca9a1cdbc"}',
    '{"text": "caf\\u00e9 \\ud83d\\ude00 \\udfff", "nan": NaN, "inf": -Infinity, "big": 12345678901234567890}',
    '{"a": "é ✓ 😀"}',
    "[1, 2.5e-3]",
    '"a bare string"',
    "0.1",
    "null",
    '  {"a": 1}  ',  # whitespace around: json.loads takes it
    '{"a": 1}\r',
]

BAD = [
    "",
    "   ",
    '{"a": 1',
    '{"a": 1} x',
    '{"a": 1}{"b": 2}',
    '{"a": "cut',
    '{"a": tru}',
    "{'a': 1}",
    '{"a": 1,}',
    '{"a": "\x01"}',  # a control character in a string (strict)
]


@pytest.mark.parametrize("text", GOOD)
def test_loads_reads_what_json_loads_reads(text: str) -> None:
    assert repr(loads(text)) == repr(json.loads(text))  # repr: NaN == NaN, and int stays int
    line = text.encode("utf-8", "surrogatepass") + b"\n"
    assert repr(loads_line(line)) == repr(json.loads(line))


def _error(parse: object, doc: str | bytes) -> str:
    with pytest.raises(ValueError) as caught:
        parse(doc)  # type: ignore[operator]
    return f"{type(caught.value).__name__}: {caught.value}"


@pytest.mark.parametrize("text", BAD)
def test_loads_fails_as_json_loads_fails(text: str) -> None:
    assert _error(loads, text) == _error(json.loads, text)
    assert _error(loads, "\ufeff" + text) == _error(json.loads, "\ufeff" + text)  # text with a BOM: refused
    line = text.encode("utf-8", "surrogatepass") + b"\n"
    assert _error(loads_line, line) == _error(json.loads, line)


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": "caf\xc3',  # cut inside a UTF-8 character
        b'{"id": "\xff"}\n',  # not UTF-8
        b'{"id": 1} trailing\n',
    ],
)
def test_a_bad_line_fails_as_json_loads_fails(line: bytes) -> None:
    assert _error(loads_line, line) == _error(json.loads, line)


@pytest.mark.parametrize(
    "line",
    [
        '{"id": "é"}\r\n'.encode(),
        b'{"id": 1}\n\n',
        '\ufeff{"id": 1}\n'.encode(),  # bytes with a BOM: json.loads reads them as utf-8-sig
        '{"id": "x"}\n'.encode("utf-16"),
    ],
)
def test_a_line_of_another_encoding_or_ending_reads_as_json_loads_reads_it(line: bytes) -> None:
    assert loads_line(line) == json.loads(line)


def test_dumps_utf8_writes_what_json_dumps_writes() -> None:
    value = {"id": "q\u00e9", "s": "\udfff", "x": [1.0, None, True, float("nan")], "d": {"k": 1 / 3}}
    assert dumps_utf8(value) == json.dumps(value, ensure_ascii=False)
