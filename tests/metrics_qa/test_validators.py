"""Each evaluation-point validator against hand-computed expectations: verdict, figures, note, evidence."""

from __future__ import annotations

import difflib
import json
from typing import Any

import pytest

from ragscore_workers.metrics.checks import ChecksParams, parse_points
from ragscore_workers.metrics.checks import checks as checks_batch
from ragscore_workers.metrics.registry import RunContext
from ragscore_workers.schemas import MetricResult, Row, Suite

_CTX = RunContext(run_id="test", suite=Suite(metrics=["checks"]))


def checks(row: Row, params: ChecksParams) -> MetricResult:
    """The batch metric on one row (cpu points need no worker resource)."""
    (result,) = checks_batch([row], params, _CTX)
    return result


ANSWER = "Paris is the capital of France [1]. It has 2 million people [2]."  # 13 whitespace words


def point(answer: str, type_: str, reference: str | None = None, **params: Any) -> dict[str, Any]:
    """The single point's result dict after running ``checks`` on ``answer``."""
    row = Row(id="x", answer=answer, reference=reference, checks=[{"id": "p", "type": type_, "params": params}])
    result = checks(row, ChecksParams())
    assert result.error is None, result.error
    return result.details["points"][0]


def test_keyword_counts_distinct_keywords_case_insensitively() -> None:
    p = point(ANSWER, "keyword", keywords=["paris", "FRANCE", "Berlin", "Paris"], min_count=2)
    assert p["passed"] and p["figures"]["found_count"] == 2 and p["figures"]["keyword_count"] == 3
    assert p["figures"]["missing"] == "Berlin"
    assert any("Paris is the capital" in e for e in p["evidence"])
    assert not point(ANSWER, "keyword", keywords=["paris", "france", "berlin"], min_count=3)["passed"]
    assert point(ANSWER, "keyword", keywords=["berlin", "paris"])["passed"]  # min_count defaults to 1


def test_keyword_whole_word_option() -> None:
    assert point(ANSWER, "keyword", keywords=["cap"])["passed"]  # substring of "capital"
    assert not point(ANSWER, "keyword", keywords=["cap"], whole_word=True)["passed"]
    assert point("I like C++ a lot", "keyword", keywords=["c++"], whole_word=True)["passed"]


@pytest.mark.parametrize(("text", "keyword", "passed"), [
    ("東京は日本の首都です", "東京", True),  # Japanese has no spaces: a word runs into the next
    ("首都は東京です", "東京", True),
    ("北京是中国的首都", "北京", True),
    ("กรุงเทพเป็นเมืองหลวง", "กรุงเทพ", True),  # Thai
    ("Tokyo東京", "Tokyo", False),  # a spaced script's edge keeps its boundary
    ("서울은 수도입니다", "서울", False),  # Korean writes spaces: 서울은 is one word
    ("서울 은 수도", "서울", True),
])  # fmt: skip
def test_whole_word_finds_words_of_scripts_written_without_spaces(text: str, keyword: str, passed: bool) -> None:
    """whole_word never matched inside Chinese, Japanese or Thai text: every neighbour is a word character."""
    assert point(text, "keyword", keywords=[keyword], whole_word=True)["passed"] is passed


def test_regex_is_dotall_and_counts_matches() -> None:
    p = point(ANSWER, "regex", pattern=r"\d+ million")
    assert p["passed"] and p["figures"]["count"] == 1 and "2 million" in p["evidence"][0]
    assert point("capital\nof people", "regex", pattern="capital.*people")["passed"]  # DOTALL: . spans lines
    assert not point(ANSWER, "regex", pattern=r"\[\d\]", min_count=3)["passed"]
    assert not point(ANSWER, "regex", pattern="PARIS")["passed"]
    assert point(ANSWER, "regex", pattern="PARIS", ignore_case=True)["passed"]


def test_counting_notes_say_one_match_or_citation_and_more_in_the_plural() -> None:
    """The notes said "1 match(es) found" and "2 citation(s) found"; the negation "forbidden phrase(s) present"."""
    assert point(ANSWER, "regex", pattern=r"\d+ million")["note"] == "1 match found, 1 needed"
    assert point(ANSWER, "regex", pattern=r"\[\d\]")["note"] == "2 matches found, 1 needed"
    assert point("No sources here.", "citation")["note"] == "0 citations found, 1 needed"
    assert point(ANSWER, "citation", min_count=3)["note"] == "2 citations found, 3 needed"
    assert point(ANSWER, "citation", pattern=r"\[1\]")["note"] == "1 citation found, 1 needed"
    assert point(ANSWER, "negation", keywords=["paris"])["note"] == "forbidden phrase present: paris"
    both = point(ANSWER, "negation", keywords=["paris", "France"])["note"]
    assert both == "forbidden phrases present: paris, France"


def test_length_in_words() -> None:
    p = point(ANSWER, "length", max=10)
    assert not p["passed"] and p["figures"]["words"] == 13 and p["note"] == "13 words > max 10"
    assert point(ANSWER, "length", min=13, max=13)["passed"]
    assert point(ANSWER, "length", min=14)["note"] == "13 words < min 14"


def test_citation_default_and_custom_pattern() -> None:
    p = point(ANSWER, "citation", min_count=2)
    assert p["passed"] and p["figures"] == {"count": 2, "distinct": 2, "min_count": 2}
    assert not point(ANSWER, "citation", min_count=3)["passed"]
    assert not point("No sources here.", "citation")["passed"]
    text = "As shown (Smith 2020) and (Lee 2021)."
    assert point(text, "citation", pattern=r"\(\w+ \d{4}\)", min_count=2)["passed"]


@pytest.mark.parametrize(("answer", "count"), [
    ("Paris is the capital [1, 2].", 1),
    ("Paris is the capital [1,2] and large [3-5].", 2),
    ("Paris is the capital [1–3].", 1),  # an en dash
    ("Paris is the capital [1][2].", 2),
    ("Paris is the capital [a].", 0),
])  # fmt: skip
def test_citation_default_pattern_takes_multi_source_markers(answer: str, count: int) -> None:
    """The default took only [n]: an answer citing [1, 2] or [1-3] had no citation and failed the point."""
    p = point(answer, "citation")
    assert p["figures"]["count"] == count and p["passed"] is (count > 0)


def test_negation_passes_when_no_forbidden_phrase_appears() -> None:
    assert point(ANSWER, "negation", keywords=["Berlin", "I cannot"])["passed"]
    p = point(ANSWER, "negation", keywords=["berlin", "PARIS"])
    assert not p["passed"] and p["figures"]["found"] == "PARIS" and "Paris is" in p["evidence"][0]


def test_json_schema_validates_the_answer_or_its_fenced_block() -> None:
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age"]}
    assert point('{"name": "x", "age": 3}', "json_schema", schema=schema)["passed"]
    assert point('Here you go:\n```json\n{"age": 3}\n```\nDone.', "json_schema", schema=schema)["passed"]
    bad = point('{"age": "3"}', "json_schema", schema=schema)
    assert not bad["passed"] and bad["figures"]["errors"] == 1 and bad["note"] == "1 schema error"
    worse = point('{"age": "3", "name": 4}', "json_schema", schema={**schema, "properties": {**schema["properties"],
                  "name": {"type": "string"}}})  # fmt: skip
    assert worse["note"] == "2 schema errors"
    assert bad["evidence"] == ["at $.age: '3' is not of type 'integer'"]
    not_json = point("not json at all", "json_schema", schema=schema)
    assert not not_json["passed"] and not_json["note"].startswith("not valid JSON")


def test_diff_ratio_against_golden_or_reference() -> None:
    # SequenceMatcher ratio = 2·M / (|a| + |b|) = 2·19 / (19 + 20) = 38/39
    p = point("The quick brown fox", "diff", golden="The quick brown fox!")
    assert p["passed"] and p["figures"]["ratio"] == pytest.approx(38 / 39, abs=1e-6)
    assert p["evidence"] == ["insert: '' -> '!'"]
    assert not point("abcd", "diff", golden="abxy")["passed"]  # 2·2/8 = 0.5 < 0.9
    assert point("abcd", "diff", golden="abxy", threshold=0.5)["passed"]
    assert point("The quick brown fox", "diff", reference="The quick brown fox")["figures"]["ratio"] == 1.0


def test_diff_on_a_long_golden_text_matches_every_character_unless_autojunk_is_asked_for() -> None:
    golden = ("The cat sat on the mat and the dog lay by the door. " * 8).strip()  # > 200 characters
    text = golden.replace(" the ", " a ").replace(" and ", " & ")
    seed = point(text, "diff", golden=golden, autojunk=True)["figures"]["ratio"]  # the seed's difflib default
    exact = point(text, "diff", golden=golden)["figures"]["ratio"]
    assert exact == pytest.approx(difflib.SequenceMatcher(None, text, golden, autojunk=False).ratio(), abs=1e-6)
    assert seed == pytest.approx(difflib.SequenceMatcher(None, text, golden).ratio(), abs=1e-6)
    assert seed < 0.1 < 0.8 < exact


def test_diff_of_long_texts_that_cannot_reach_the_threshold_fails_on_the_upper_bound() -> None:
    """40,000 characters against 4,000 took ~5 s of exact ratio (120,000 against 12,000: 55 s, past a task's time
    limit); below the threshold whatever the alignment, it fails on difflib's linear-time upper bound."""
    text, golden = "a" * 20_000 + "b" * 20_000, "ab" * 2_000
    bound = difflib.SequenceMatcher(None, text, golden).quick_ratio()  # 2 * 4,000 / 44,000
    assert bound == pytest.approx(8_000 / 44_000)
    p = point(text, "diff", golden=golden, threshold=0.5)
    assert not p["passed"] and p["figures"] == {"ratio_at_most": round(bound, 6), "threshold": 0.5}
    assert p["note"] == f"similarity at most {bound:.3f} < 0.5 (long texts: the bound, not the exact ratio)"
    # long texts that may reach the threshold still get the exact ratio
    same = point("x" * 6_000, "diff", golden="x" * 5_000, threshold=0.5)
    assert same["passed"] and same["figures"]["ratio"] == pytest.approx(10_000 / 11_000, abs=1e-6)


def test_diff_without_golden_or_reference_fails_the_row() -> None:
    row = Row(id="x", answer="a", checks=[{"id": "d", "type": "diff", "params": {}}])
    result = checks(row, ChecksParams())
    assert result.score is None and result.error == "checks item 1 (d): diff needs params.golden or a row reference"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "nope"}, "unknown validator type 'nope'; choose one of "),
        ({"type": "keyword", "params": {}}, "keywords: Field required"),
        (
            {"type": "keyword", "params": {"keywords": ["a", "A"], "min_count": 2}},
            "min_count 2 exceeds the 1 distinct keyword",
        ),
        ({"type": "keyword", "params": {"keywords": ["a"], "typo": 1}}, "typo: Extra inputs are not permitted"),
        ({"type": "regex", "params": {"pattern": "(unclosed"}}, "invalid regex '(unclosed'"),
        ({"type": "length", "params": {}}, "give min, max or both"),
        ({"type": "length", "params": {"min": 5, "max": 2}}, "min 5 > max 2"),
        ({"type": "json_schema", "params": {"schema": {"type": "nope"}}}, "invalid JSON schema"),
        ({"type": "diff", "params": {"threshold": 1.5}}, "threshold: Input should be less than or equal to 1"),
        ({"type": "citation", "weigth": 2}, "weigth: Extra inputs are not permitted"),
        ({"type": "citation", "weight": -1}, "weight: Input should be greater than or equal to 0"),
        ({"type": "citation", "weight": True}, "weight: Input should be a number, not a boolean (true)"),
        ({"type": "citation", "params": {"min_count": True}}, "params.min_count: Input should be a number, not a"),
        ({"type": "citation", "normalizers": ["shout"]}, "unknown normalizer 'shout'; choose from"),
        ({"type": "citation", "normalizers": ["shout", "x"]}, "unknown normalizers 'shout', 'x'; choose from"),
        (
            {"type": "citation", "extract": [{"regex": "a", "json_path": "$.b"}]},
            "exactly one of 'regex' or 'json_path'",
        ),
        ({"type": "citation", "extract": {"regex": "(a)", "group": 2}}, "has no group 2"),
        ({"type": "citation", "extract": {"json_path": "$..x"}}, "is not like $.a.b[0]"),
        ({"type": "citation", "depends_on": "ghost"}, "depends_on names unknown point 'ghost'"),
        ({"type": "citation", "depends_on": "bad"}, "depends_on names the point itself: it could never run"),
        ({"type": "negation", "params": {"keywords": ["", "  "]}}, "every keyword is blank"),  # it always passed
    ],
)
def test_malformed_points_fail_the_row_with_a_message_naming_the_point(spec: dict[str, Any], message: str) -> None:
    row = Row(id="x", answer="a", checks=[{"type": "citation"}, {"id": "bad", **spec}])
    result = checks(row, ChecksParams())
    assert result.score is None and result.error is not None
    assert result.error.startswith("checks item 2 (bad): ") and message in result.error


def test_a_cycle_of_dependencies_fails_the_row_and_is_refused_in_suite_points() -> None:
    """a depends on b and b on a: neither could ever run, and both were "skipped", a score of 0 blamed on the answer,
    instead of the malformed spec it is. A forward reference alone stays a skip, as documented."""
    from ragscore_workers.errors import ConfigError
    from ragscore_workers.metrics.registry import get_metric

    cite = {"type": "citation"}
    two = [{"id": "ok", **cite}, {"id": "a", **cite, "depends_on": "b"}, {"id": "b", **cite, "depends_on": "a"}]
    result = checks(Row(id="x", answer="a [1]", checks=two), ChecksParams())
    assert result.score is None and result.error == (
        "checks item 2 (a): depends_on forms a cycle, a -> b -> a: these points could never run"
    )
    three = [{"id": "a", **cite, "depends_on": ["ok"]}, {"id": "ok", **cite, "depends_on": ["c"]},
             {"id": "b", **cite, "depends_on": "a"}, {"id": "c", **cite, "depends_on": ["b"]}]  # fmt: skip
    assert checks(Row(id="x", answer="a [1]", checks=three), ChecksParams()).error == (
        "checks item 1 (a): depends_on forms a cycle, a -> ok -> c -> b -> a: these points could never run"
    )
    with pytest.raises(ConfigError, match=r"depends_on forms a cycle, a -> b -> a"):
        get_metric("checks").parse_params({"points": two})
    forward = [{"id": "a", **cite, "depends_on": "b"}, {"id": "b", **cite}]
    assert [p.id for p in parse_points(forward)] == ["a", "b"]


def test_unknown_types_list_every_validator_including_the_planned_ones() -> None:
    result = checks(Row(id="x", answer="a", checks=[{"type": "nope"}]), ChecksParams())
    names = ["citation", "code_test", "diff", "embedding", "json_schema", "keyword", "length", "negation", "regex"]
    assert result.error is not None and all(name in result.error.split("choose one of ")[1] for name in names)


def test_duplicate_point_ids_are_rejected() -> None:
    result = checks(Row(id="x", answer="a", checks=[{"id": "a", "type": "citation"}] * 2), ChecksParams())
    assert result.error == "checks item 1 (a): duplicate point id"


def test_suite_level_points_are_validated_when_the_suite_loads() -> None:
    from ragscore_workers.errors import ConfigError
    from ragscore_workers.metrics.registry import get_metric

    with pytest.raises(ConfigError, match="unknown validator type 'nope'"):
        get_metric("checks").parse_params({"points": [{"type": "nope"}]})
    assert parse_points([{"type": "citation"}])[0].id == "p1"  # default ids are p1, p2, ... by position


def test_json_schema_patterns_run_with_the_time_bound_of_every_other_regex() -> None:
    """A schema's ``pattern`` over an answer's string backtracked without bound in jsonschema's ``re.search`` (about
    13 s at 40 characters here, doubling with each two more); now it is stopped like a ``regex`` point's pattern."""
    schema = {"properties": {"code": {"type": "string", "pattern": "^(a|aa)+c"}}, "patternProperties": {"^x": {
        "type": "integer"}}}  # fmt: skip
    point = {"id": "s", "type": "json_schema", "params": {"schema": schema}}
    result = checks(Row(id="x", answer=json.dumps({"code": "a" * 40}), checks=[point]), ChecksParams())
    assert result.error is not None and result.error.startswith("point s: ValueError: regex '^(a|aa)+c' ran over 2 s")
    bad_key = checks(Row(id="x", answer='{"code": "aac", "x1": "one"}', checks=[point]), ChecksParams())
    assert bad_key.details["points"][0]["evidence"] == ["at $.x1: 'one' is not of type 'integer'"]
    assert checks(Row(id="x", answer='{"code": "aac", "x1": 1}', checks=[point]), ChecksParams()).score == 1.0


def test_json_schema_additional_properties_tells_extra_keys_with_the_bounded_search() -> None:
    """With ``additionalProperties``, jsonschema ran the ``patternProperties`` patterns on the answer's keys with
    its own unbounded ``re.search``; extra keys are still found and named as jsonschema names them."""
    schema = {"properties": {"id": {}}, "patternProperties": {"^x_": {"type": "integer"}},
              "additionalProperties": False}  # fmt: skip
    point = {"id": "s", "type": "json_schema", "params": {"schema": schema}}

    def evidence(answer: str) -> list[str]:
        return checks(Row(id="x", answer=answer, checks=[point]), ChecksParams()).details["points"][0]["evidence"]

    assert evidence('{"id": 1, "x_a": 2}') == []
    assert evidence('{"id": 1, "x_a": 2, "b": 3, "a": 4}') == ["at $: 'a', 'b' do not match any of the regexes: '^x_'"]
    plain = {"properties": {"id": {}}, "additionalProperties": False}
    said = checks(Row(id="x", answer='{"id": 1, "b": 3}', checks=[point | {"params": {"schema": plain}}]),
                  ChecksParams())  # fmt: skip
    assert said.details["points"][0]["evidence"] == ["at $: Additional properties are not allowed ('b' was unexpected)"]
    typed = {"patternProperties": {"^x_": {}}, "additionalProperties": {"type": "string"}}
    extra = checks(Row(id="x", answer='{"x_a": 1, "b": 3}', checks=[point | {"params": {"schema": typed}}]),
                   ChecksParams())  # fmt: skip
    assert extra.details["points"][0]["evidence"] == ["at $.b: 3 is not of type 'string'"]
    # the patterns on the keys run with the time bound: a backtracking one is the point's error, not a hang
    slow = {"patternProperties": {"^(a|aa)+c": {}}, "additionalProperties": False}
    stopped = checks(Row(id="x", answer=json.dumps({"a" * 40: 1}), checks=[point | {"params": {"schema": slow}}]),
                     ChecksParams())  # fmt: skip
    assert stopped.error is not None and "ran over 2 s" in stopped.error
