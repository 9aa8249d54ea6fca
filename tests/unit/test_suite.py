"""Suites are checked against the registry before anything is submitted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.suite import load_suite
from ragscore_workers.errors import ConfigError, SuiteProblems, UnknownMetricError
from ragscore_workers.schemas import JudgeConfig


def test_unknown_metric_suggests_close_names() -> None:
    with pytest.raises(UnknownMetricError, match="Did you mean 'exact_match'") as info:
        load_suite({"metrics": ["exact_mach"]})
    assert info.value.suggestions == ["exact_match"]
    assert "Known metrics:" in str(info.value) and "recall_at_k" in str(info.value)


def test_every_problem_of_a_suite_file_names_its_line_and_column_a_dicts_keeps_its_wording(tmp_path: Path) -> None:
    """A problem of a suite file said its place as ``metrics item 2`` alone, which the user counted out in the file:
    each now begins with the file, line and column of the key or item at fault, its hint kept; the same suite given
    as a dict is said as before (it has no lines)."""
    path = tmp_path / "t.yaml"
    path.write_text("name: t\nmetrics:\n  - exact_macth\n")
    with pytest.raises(UnknownMetricError, match=rf"^{re.escape(str(path))} line 3 column 5: Unknown metric "
                       r"'exact_macth'\. Did you mean 'exact_match'\?"):  # fmt: skip
        load_suite(path)
    path.write_text("name: t\nmetrics:\n  - exact_macth\n  - name: recall_at_k\n    params: {k: [0]}\n"
                    "judge:\n  rmp: 3\n")  # fmt: skip
    with pytest.raises(ConfigError, match=rf"^Invalid suite: {re.escape(str(path))} line 7 column 3: judge\.rmp: "
                       r"Extra inputs are not permitted \(did you mean 'rpm'"):  # fmt: skip
        load_suite(path)
    path.write_text("name: t\nmetrics:\n  - exact_macth\n  - name: recall_at_k\n    params: {k: [0]}\n")
    with pytest.raises(SuiteProblems) as info:
        load_suite(path)
    assert str(info.value).splitlines()[1:] == [
        f"  {path} line 3 column 5: metrics item 1 (exact_macth): Unknown metric 'exact_macth'. Did you mean "
        f"'exact_match'? Known metrics: {', '.join(info.value.errors[0].known)}.",  # type: ignore[attr-defined]
        f"  {path} line 5 column 14: metrics item 2 (recall_at_k): Bad params: k: every k must be >= 1",
    ]
    path.write_text("metrics:\n  - recall_at_k\ngates:\n  - mrrr=0.5\njudge:\n  rpm: true\n")
    with pytest.raises(SuiteProblems) as info:
        load_suite(path)
    assert str(info.value).splitlines()[1:] == [
        f"  {path} line 6 column 3: judge.rpm: Input should be a number, not a boolean (true)",
        f"  {path} line 4 column 5: gates item 1 (mrrr) names 'mrrr', which the suite does not produce. Did you mean "
        "'mrr'? The suite's outputs: recall_at_1, recall_at_5, mrr.",
    ]
    json_path = tmp_path / "t.json"
    json_path.write_text('{"name": "t",\n "metrics": [\n   "exact_macth"]}\n')
    with pytest.raises(UnknownMetricError, match=rf"^{re.escape(str(json_path))} line 3 column 4: Unknown metric"):
        load_suite(json_path)
    with pytest.raises(UnknownMetricError, match=r"^Unknown metric 'exact_macth'\. Did you mean 'exact_match'\?"):
        load_suite({"name": "t", "metrics": ["exact_macth"]})


def test_a_suite_files_merge_keys_and_a_json_suites_tabs_keep_its_lines(tmp_path: Path) -> None:
    """A YAML merge key (``<<: *recall``) made every problem of the file lose its line, and so did a JSON suite
    indented with tabs (YAML, which reads its lines, refuses them as indentation): both name their lines."""
    path = tmp_path / "t.yaml"
    path.write_text("metrics:\n  - exact_macth\n  - &recall\n    name: recall_at_k\n    params: {k: [1]}\n"
                    "  - <<: *recall\n    params: {k: [0]}\n")  # fmt: skip
    with pytest.raises(SuiteProblems) as info:
        load_suite(path)
    assert _heads(str(info.value), ": metrics item")[:2] == [
        f"  {path} line 2 column 5",
        f"  {path} line 7 column 14",  # the bad param's key, in the item the merge key is in
    ], str(info.value)
    json_path = tmp_path / "t.json"
    json_path.write_text('{\n\t"metrics": [\n\t\t"exact_macth"\n\t]\n}\n')
    with pytest.raises(UnknownMetricError, match=rf"^{re.escape(str(json_path))} line 3 column 3: Unknown metric"):
        load_suite(json_path)


def _said_of(path: Path, text: str) -> str:
    """What loading the suite ``text``, written to ``path``, says (its ConfigError), the path said as its name."""
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    return str(info.value).replace(str(path), path.name)


def _heads(said: str, before: str) -> list[str]:
    """Each problem's line of ``said`` (a :class:`SuiteProblems`), up to ``before``: its line and place."""
    return [line.split(before)[0] for line in said.splitlines()[1:]]


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ("target:\n  url: https://rag.example\n  response:\n    answer: '$[['\n",
         "Invalid suite: t.yaml line 5 column 5: target response.answer: not a JSON path: '$[[' (use a.b"),
        ("targets:\n  - {system: a, url: https://rag.example}\n  - system: b\n    url: https://rag.example\n"
         "    response: {contexts: 'hits[x'}\n",
         "Invalid suite: t.yaml line 6 column 16: target b response.contexts: not a JSON path: 'hits[x' (use a.b"),
    ],
)  # fmt: skip
def test_a_targets_response_path_that_does_not_parse_names_its_keys_line(
    tmp_path: Path, section: str, said: str
) -> None:
    """A response path that does not parse was said without a line (``target b response.contexts: not a JSON
    path``): it names the line and column of its key."""
    assert _said_of(tmp_path / "t.yaml", f"metrics: [exact_match]\n{section}").startswith(said)


def test_a_targets_response_path_with_a_key_in_quotes_loads(tmp_path: Path) -> None:
    """``data[' answer ']`` (a reply's key with spaces, in quotes as JSONPath writes it) was refused as "not a JSON
    path": it loads, and so does ``hits[*]['doc id']``."""
    path = tmp_path / "t.yaml"
    path.write_text("metrics: [exact_match]\ntarget:\n  url: https://rag.example\n  response:\n"
                    "    answer: \"data[' answer ']\"\n    retrieved_doc_ids: \"hits[*]['doc id']\"\n")  # fmt: skip
    response = load_suite(path).suite.all_targets[0].response
    assert (response.answer, response.retrieved_doc_ids) == ("data[' answer ']", "hits[*]['doc id']")


@pytest.mark.parametrize(
    ("response", "said"),
    [
        ("{answer: 'choices[*].text'}", "line 4 column 14: target response.answer: 'choices[*].text' maps over a "
         "list ([*]), so it always gives a list, never the one value this field holds: name one element "
         "('choices[0].text')"),
        ("\n    answer: a\n    contexts: 'hits[*].sents[*]'", "line 6 column 5: target response.contexts: "
         "'hits[*].sents[*]' maps over lists 2 times ([*]), so it gives a list of lists"),
        ("{answer: a, retrieved_doc_ids: 'a[*].b[*].c[*]'}", "line 4 column 25: target response.retrieved_doc_ids: "
         "'a[*].b[*].c[*]' maps over lists 3 times ([*]), so it gives a list of lists"),
        ("{answer: $.data.answer}", "line 4 column 14: target response.answer: '$.data.answer' begins with JSONPath's "
         "root '$', which these paths leave out (they start at the reply): write 'data.answer'"),
        ("{answer: 'data. answer'}", "line 4 column 14: target response.answer: 'data. answer' has the key ' answer', "
         "blank or spaced at an end, which no reply's key is: write 'data.answer' (or \"data[' answer']\", for a "
         "reply whose key has them)"),
        ("{answer: \"data['']\"}", "line 4 column 14: target response.answer: \"data['']\" has the key '', blank"),
        ("{answer: \"$[' a ']\"}", "line 4 column 14: target response.answer: \"$[' a ']\" begins with JSONPath's "
         "root '$', which these paths leave out (they start at the reply): write \"[' a ']\""),
        ("{answer: \"a['*']\"}", "line 4 column 14: target response.answer: \"a['*']\" names the key '*', which "
         "reads as [*]"),
        ("{answer: ' '}", "line 4 column 14: target response.answer: ' ' has the key ' ', blank or spaced at an end"),
    ],
)  # fmt: skip
def test_a_targets_response_path_no_reply_can_fill_its_field_through_is_refused_at_its_key(
    tmp_path: Path, response: str, said: str
) -> None:
    """A response path that parsed was taken though no reply could fill its field through it (a ``[*]`` of the answer,
    one text; two ``[*]`` of a list field; JSONPath's ``$``; a blank key), so every question of the run failed or its
    field read as unfilled: it is refused at its key, with the path to write."""
    text = f"metrics: [exact_match]\ntarget:\n  url: https://rag.example\n  response: {response}\n"
    assert _said_of(tmp_path / "t.yaml", text).startswith(f"Invalid suite: t.yaml {said}")


@pytest.mark.parametrize(
    "response", ["{answer: 'hits[0].text', contexts: 'hits[*].sents[0]'}", "{answer: '[-1]', contexts: '[*]'}"]
)
def test_a_targets_response_paths_that_can_fill_their_fields_are_kept(tmp_path: Path, response: str) -> None:
    """An index of the answer's path, or one ``[*]`` of a list field's, is a path a reply can fill its field through."""
    path = tmp_path / "t.yaml"
    path.write_text(f"metrics: [exact_match]\ntarget:\n  url: https://rag.example\n  response: {response}\n")
    assert load_suite(path).suite.target is not None


def test_a_metric_listed_twice_or_missing_a_derived_input_names_the_offending_entrys_line_and_the_firsts(
    tmp_path: Path,
) -> None:
    """A metric listed twice, and a derived metric whose inputs no metric gives, were said without a line: each is
    said at its (second) entry, a duplicate with the line of the first too."""
    path = tmp_path / "t.yaml"
    said = _said_of(path, "metrics:\n  - exact_match\n  - recall_at_k\n  - name: exact_match\n  - recall_at_k\n"
                          "  - exact_match\n")  # fmt: skip
    assert said.splitlines()[1:] == [
        "  t.yaml line 4 column 5, the first at line 2 column 5: metrics item 3 (exact_match): Metric listed twice in "
        "the suite: exact_match: list each metric once",
        "  t.yaml line 5 column 5, the first at line 3 column 5: metrics item 4 (recall_at_k): Metric listed twice in "
        "the suite: recall_at_k: list each metric once",
        "  t.yaml line 6 column 5, the first at line 2 column 5: metrics item 5 (exact_match): Metric listed twice in "
        "the suite: exact_match: list each metric once",  # each repeat, in the suite's order
    ], said
    said = _said_of(path, "metrics:\n  - exact_match\n  - combined\n")
    assert said.startswith("t.yaml line 3 column 5: Derived metric 'combined' needs"), said


def test_two_prices_or_budgets_name_the_line_of_each_value_and_a_budget_without_a_price_its_key(
    tmp_path: Path,
) -> None:
    """Judge metrics giving a model two prices, or a budget two values, and ``max_cost`` without a price were said
    without a line: each points at its key (the second value's, with the first's line)."""
    path = tmp_path / "t.yaml"
    said = _said_of(path, "judge: {model: m}\nmetrics:\n  - name: answer_accuracy\n    params:\n"
                          "      prices: {m: [1, 2]}\n      max_cost: 1\n  - name: groundedness\n    params:\n"
                          "      max_cost: 2\n      prices: {m: [1, 3]}\n")  # fmt: skip
    assert _heads(said, ": judge metrics give") == [
        "  t.yaml line 10 column 16, the first at line 5 column 16",
        "  t.yaml line 9 column 7, the first at line 6 column 7",
    ], said
    said = _said_of(path, "judge: {model: m}\nmetrics:\n  - name: answer_accuracy\n    params:\n      max_cost: 1\n")
    assert said.startswith("t.yaml line 5 column 7: max_cost (--max-cost) needs a price"), said


@pytest.mark.parametrize(
    ("metric", "params", "at"),
    [
        ("recall_at_k", "{k: [0]}", "line 3 column 14"),
        ("recall_at_k", "\n      k: [1, 0]", "line 4 column 7"),
        ("recall_at_k", "\n      k: [1, true]", "line 4 column 7"),
        ("recall_at_k", "\n      k: [1]\n      kk: 1", "line 5 column 7"),
        ("answer_hallucination", "\n      threshold: true", "line 4 column 7"),
    ],
)
def test_a_bad_param_names_the_line_of_its_key(tmp_path: Path, metric: str, params: str, at: str) -> None:
    """A bad param was said at the line of its metric's item, not at its key's: ``params: {k: [0]}`` names ``k``."""
    said = _said_of(tmp_path / "t.yaml", f"metrics:\n  - name: {metric}\n    params: {params}\n")
    assert said.startswith(f"t.yaml {at}: Bad params for metric '{metric}'"), said


def test_an_item_given_as_an_alias_names_its_own_line_and_its_anchors(tmp_path: Path) -> None:
    """An item written as an alias (``- *base``) was said at its anchor's line alone, which the user did not write
    there: both are said."""
    text = "metrics:\n  - &base\n    name: recall_at_k\n    params: {k: [1]}\n  - exact_match\n  - *base\n"
    assert _said_of(tmp_path / "t.yaml", text) == (
        "t.yaml line 6 column 5, from the anchor &base at line 2 column 5, the first at line 2 column 5: Metric listed "
        "twice in the suite: recall_at_k: list each metric once"
    )


def test_a_problem_inside_an_aliased_item_names_its_keys_line_in_the_anchor(tmp_path: Path) -> None:
    """A bad param of an item written as an alias (``- *judge_a``), or of params written as one (``params: *p``), was
    said at the alias's line and the anchor's, not at the bad key's, which is written inside the anchor: its line is
    said too."""
    path = tmp_path / "t.yaml"
    text = ("metrics:\n  - &judge_a\n    name: answer_accuracy\n    params:\n      bogus: 1\n  - exact_match\n"
            "  - *judge_a\n")  # fmt: skip
    assert _heads(_said_of(path, text), ": metrics item")[:2] == [
        "  t.yaml line 5 column 7",  # the anchor's own key
        "  t.yaml line 7 column 5, at line 5 column 7, from the anchor &judge_a at line 2 column 5",
    ]
    text = ("metrics:\n  - name: answer_accuracy\n    params: &p\n      max_cost: 1\n  - name: recall_at_k\n"
            "    params: *p\n")  # fmt: skip
    assert _said_of(path, text).startswith(
        "t.yaml line 6 column 5, at line 4 column 7, from the anchor &p at line 3 column 13: Bad params for metric "
        "'recall_at_k': max_cost: Extra inputs are not permitted"
    )


def test_the_anchor_an_alias_repeats_is_named_at_its_own_column_not_its_keys(tmp_path: Path) -> None:
    """``from the anchor at line 3 column 5`` named the key holding the anchor (``params: &judged {...}``), not the
    anchor, and not by its name: it is said as ``&judged`` at its own line and column."""
    text = ("metrics:\n  - name: answer_accuracy\n    params: &judged {bogus: 1}\n  - name: groundedness\n"
            "    params: *judged\n")  # fmt: skip
    said = _said_of(tmp_path / "t.yaml", text).splitlines()
    assert said[2].startswith("  t.yaml line 5 column 5, at line 3 column 22, from the anchor &judged at line 3 "
                              "column 13: metrics item 2 (groundedness): Bad params"), said  # fmt: skip


def test_a_key_a_merge_key_brings_in_names_its_line_in_the_mapping_merged(tmp_path: Path) -> None:
    """A bad key a merge key (``<<: *base``) brings in was said at the line of the item (or section) holding the merge
    key, naming no line where it is written: its line in the mapping merged is said, with that mapping's; a key
    written beside ``<<:`` keeps its own line."""
    path = tmp_path / "t.yaml"
    text = ("metrics:\n  - name: recall_at_k\n    params: &p\n      k: [1]\n  - name: answer_accuracy\n"
            "    params:\n      <<: *p\n      max_cost: 1\n")  # fmt: skip
    assert _said_of(path, text).startswith(
        "t.yaml line 7 column 7, at line 4 column 7, from the anchor &p at line 3 column 13: Bad params for metric "
        "'answer_accuracy': k: Extra inputs are not permitted"
    )
    text = ("metrics: [exact_match]\ntargets:\n  - &t\n    system: a\n    url: https://rag.example\n"
            "    response: {answer: 'x[*]'}\n  - <<: *t\n    system: b\n")  # fmt: skip
    assert _heads(_said_of(path, text), ": target") == [
        "  t.yaml line 6 column 16",
        "  t.yaml line 7 column 5, at line 6 column 16, from the anchor &t at line 3 column 5",
    ]
    text = ("metrics:\n  - &a\n    name: answer_accuracy\n  - <<: [{params: {bogus: 1}}, *a]\n"
            "    name: groundedness\n    params:\n      max_cost: true\n")  # fmt: skip
    assert _said_of(path, text).startswith("t.yaml line 7 column 7: Bad params for metric 'groundedness': max_cost")
    # merged from a mapping that merges another: each anchor in turn, the key's own line with the innermost
    text = ("metrics:\n  - name: answer_accuracy\n    params: &c\n      max_cost: 1\n  - name: groundedness\n"
            "    params: &b\n      <<: *c\n  - name: verbatim\n    params:\n      <<: *b\n")  # fmt: skip
    assert _said_of(path, text).startswith(
        "t.yaml line 10 column 7, at line 7 column 7, from the anchor &b at line 6 column 13, at line 4 column 7, from "
        "the anchor &c at line 3 column 13: Bad params for metric 'verbatim': max_cost: Extra inputs are not permitted"
    )
    # a mapping merging itself, or merged many times over, is read once
    said = _said_of(path, "metrics:\n  - &a {name: exact_macth, <<: *a}\n")
    assert said.startswith("t.yaml line 2 column 5: Unknown"), said


def test_every_metric_problem_of_a_suite_is_said_at_once() -> None:
    """An unknown metric and another's bad param: only the first was said, so the user fixed them one run at a time.
    Several are one SuiteProblems (a ConfigError), one a line, each named by its place; a lone one is raised as it
    is (see the test above: an UnknownMetricError, its message unchanged)."""
    suite = {
        "metrics": ["exact_mach", {"name": "recall_at_k", "params": {"k": [0]}}, "exact_match", "exact_match"],
        "targets": [{"system": "a", "url": "https://rag.example", "response": {"answer": "$[["}}],
    }
    with pytest.raises(SuiteProblems) as info:
        load_suite(suite)
    lines = str(info.value).splitlines()
    assert lines[0] == "Invalid suite: 4 problems:"
    assert lines[1].startswith("  metrics item 1 (exact_mach): Unknown metric 'exact_mach'. Did you mean 'exact_match'")
    assert lines[2].startswith("  metrics item 2 (recall_at_k): Bad params: k: every k must be >= 1")
    assert "every k must be >= 1" in lines[2]
    assert (
        lines[3]
        == "  metrics item 4 (exact_match): Metric listed twice in the suite: exact_match: list each metric once"
    )
    assert lines[4].startswith("  target a response.answer: not a JSON path: '$[['")  # "Invalid suite" said once
    assert isinstance(info.value, ConfigError) and len(lines) == 5
    assert [type(e) for e in info.value.errors] == [UnknownMetricError, ConfigError, ConfigError, ConfigError]
    # a check across the metrics (after each metric's) is said with the targets' problems too
    suite["metrics"] = ["combined", "exact_match"]
    with pytest.raises(
        SuiteProblems,
        match="(?m)^  metrics item 1 \\(combined\\): Derived metric 'combined' needs .*\n  target a response.answer",
    ):
        load_suite(suite)


def test_a_lone_metric_problem_said_with_a_targets_is_named_by_its_place() -> None:
    """One metric's problem is raised as it is by the metrics' check; said with a target's problem it lost its place
    ("  Unknown metric 'exact_mach' ..." where the README promises "metrics item 1 (exact_mach): ...")."""
    suite = {
        "metrics": ["exact_mach"],
        "targets": [{"system": "a", "url": "https://rag.example", "response": {"answer": "$[["}}],
    }
    with pytest.raises(SuiteProblems) as info:
        load_suite(suite)
    lines = str(info.value).splitlines()
    assert lines[1].startswith("  metrics item 1 (exact_mach): Unknown metric 'exact_mach'."), info.value
    with pytest.raises(UnknownMetricError) as alone:  # alone: its message as before, no place
        load_suite({"metrics": ["exact_mach"]})
    assert str(alone.value).startswith("Unknown metric 'exact_mach'. Did you mean 'exact_match'?"), alone.value


def test_each_repeat_of_a_long_metric_list_names_its_own_first_entry() -> None:
    """A long suite of repeats (each of three metrics listed 100 times, and an unknown one): every repeat is said at
    its entry, naming its own metric's first entry, in the suite's order; the unknown name is said unknown once."""
    names = ["exact_match", "recall_at_k", "exact_mach", "quality_checks"] * 100
    with pytest.raises(SuiteProblems) as info:
        load_suite({"metrics": names})
    errors = info.value.errors
    assert len(errors) == 1 + len(names) - 4, len(errors)
    assert errors[0].loc == ("metrics", 2) and "Unknown metric 'exact_mach'" in str(errors[0])
    repeats = errors[1:]
    assert [e.loc for e in repeats] == [("metrics", index) for index in range(4, len(names))]
    assert [e.first for e in repeats] == [("metrics", index % 4) for index in range(4, len(names))]


def test_a_suite_of_many_metric_entries_loads_the_metric_registry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each entry of a suite looked its metric up through ``all_metrics``, whose ``load_all`` reads the settings
    anew (RAGSCORE_PLUGINS): a suite of 8,000 entries took 70 s to resolve. The registry is loaded once a suite, and
    anew for the next (a plug-in named in the environment between them is read)."""
    from ragscore_workers import metrics

    loads: list[None] = []
    real = metrics.load_all

    def counted_load() -> None:
        loads.append(None)
        real()

    monkeypatch.setattr(metrics, "load_all", counted_load)
    names = ["exact_match", "recall_at_k", "exact_mach", "quality_checks"] * 50
    with pytest.raises(SuiteProblems):
        load_suite({"metrics": names})
    assert len(loads) == 1, len(loads)
    load_suite({"metrics": ["exact_match", "recall_at_k"]})
    assert len(loads) == 2, len(loads)


def test_an_unknown_metric_listed_twice_is_said_unknown_once() -> None:
    """``[exact_mach, exact_mach]`` said the same "Unknown metric ... Known metrics: <all of them>" for each item, then
    that it was listed twice: the unknown name is said once, the duplicate once."""
    with pytest.raises(SuiteProblems) as info:
        load_suite({"metrics": ["exact_mach", "exact_mach"]})
    lines = str(info.value).splitlines()
    assert lines[0] == "Invalid suite: 2 problems:" and len(lines) == 3, info.value
    assert lines[1].startswith("  metrics item 1 (exact_mach): Unknown metric 'exact_mach'."), info.value
    assert (
        lines[2] == "  metrics item 2 (exact_mach): Metric listed twice in the suite: exact_mach: list each metric once"
    )


def test_an_unknown_metric_among_other_problems_is_still_an_unknown_metric_error() -> None:
    """Code written when an unknown metric was said alone (``except UnknownMetricError`` around evaluate()) still
    catches it when the suite has other problems too: the SuiteProblems is an UnknownMetricError, with the first
    unknown metric's name and close matches."""
    suite = {"metrics": ["exact_mach", {"name": "recall_at_k", "params": {"k": [0]}}, "rubric_jugde"]}
    with pytest.raises(UnknownMetricError) as info:
        load_suite(suite)
    assert isinstance(info.value, SuiteProblems) and len(info.value.errors) == 3, info.value
    assert (info.value.name, info.value.suggestions) == ("exact_mach", ["exact_match"])
    assert str(info.value).splitlines()[0] == "Invalid suite: 3 problems:"
    with pytest.raises(SuiteProblems) as other:  # no unknown metric among them: not an UnknownMetricError
        load_suite({"metrics": [{"name": "recall_at_k", "params": {"k": [0]}}, "exact_match", "exact_match"]})
    assert not isinstance(other.value, UnknownMetricError), other.value


def test_a_worker_lacking_several_plug_in_metrics_says_to_load_them() -> None:
    """Two metrics a worker does not know are one SuiteProblems: the worker still says its plug-ins are not loaded
    (not the orchestrator's "Unknown metric ... did you mean", which would point at a built-in)."""
    from ragscore_workers.schemas import Suite
    from ragscore_workers.tasks import _resolve_suite_here

    with pytest.raises(ConfigError, match=r"^worker .* has no metric 'plugin_a' \(RAGSCORE_PLUGINS here: "):
        _resolve_suite_here(Suite.model_validate({"metrics": ["plugin_a", "plugin_b"]}))


@pytest.mark.parametrize(("name", "owner"), [("mrr", "recall_at_k"), ("recall_at_5", "recall_at_k"),
                                             ("citation_f1", "citation")])  # fmt: skip
def test_an_outputs_name_given_as_a_metric_names_the_metric_that_makes_it(name: str, owner: str) -> None:
    """Gates and reports name outputs (``mrr``); listed as a metric, it was only "Unknown metric 'mrr'"."""
    with pytest.raises(UnknownMetricError, match=f"'{name}' is an output of '{owner}': list that metric"):
        load_suite({"metrics": [name]})


@pytest.mark.parametrize(
    ("suite", "message"),
    [
        ({"metrics": [{"name": "recall_at_k", "params": {"k": [0]}}]}, "recall_at_k.*every k must be >= 1"),
        ({"metrics": [{"name": "recall_at_k", "params": {"kk": 1}}]}, "kk: Extra inputs are not permitted"),
        ({"metrics": [{"name": "exact_match", "params": {"x": 1}}]}, "exact_match.*x: Extra inputs"),
        ({"metrics": []}, "metrics: List should have at least 1 item"),
        # `metrics: exact_match` in YAML: "Input should be a valid list" alone did not say how to write one
        ({"metrics": "exact_match"}, re.escape("metrics: Input should be a valid list (metrics: [exact_match])")),
        ({"metrics": ["exact_match", "exact_match"]}, "^Metric listed twice in the suite: exact_match: list each "),
        ({"metrics": ["verbatim", "exact_match"] * 2}, "(?s)suite: verbatim: .*\n.*suite: exact_match: list each"),
        ({"metrics": ["exact_match"], "chunk_size": {"cpu": 0}}, "chunk sizes must be >= 1"),
        ({"metrics": ["exact_match"], "chunk_size": {"cpus": 5}}, "unknown queue 'cpus'; choose from cpu, embed"),
        ({"metrics": ["exact_match"], "chunk_size": {"cpus": 5, "gpu": 1}}, "unknown queues 'cpus', 'gpu'; choose"),
        ({"metrics": ["exact_match"], "colour": "red"}, "colour: Extra inputs"),
        ({"metrics": ["code_test"], "sandbox": {"backend": "dockr"}}, "sandbox.backend: Input should be 'auto'"),
        (["exact_match"], "must be a mapping"),
        # The usual slips say how to write it.
        ({"metrics": [{"name": "recall_at_k", "k": [1]}]}, r"k: a metric is written \{name: recall_at_k, params: \{k"),
        ({"metrics": [{"recall_at_k": {"k": [1]}}]}, r"recall_at_k: a metric is written \{name: recall_at_k, params"),
        ({"metrics": ["exact_match"], "judge": {"api_key": "gsk_x"}}, "api_key: keys come from the environment only"),
        # A misspelt key names the one it looks like, in every section (it said only "Extra inputs are not permitted").
        (
            {"metrics": [{"name": "recall_at_k", "param": {"k": [1]}}]},
            r"param \(did you mean 'params'\?\): a metric is written \{name: recall_at_k, params: \{\.\.\.\}\}",
        ),
        ({"metric": ["exact_match"]}, r"metric: Extra inputs are not permitted \(did you mean 'metrics'\?\)"),
        ({"metrics": ["exact_match"], "chunk_sise": {"cpu": 5}}, r"chunk_sise: Extra .* \(did you mean 'chunk_size'\?"),
        ({"metrics": ["exact_match"], "judge": {"rmp": 60}}, r"judge\.rmp: Extra .* \(did you mean 'rpm' or 'rpd'\?\)"),
        (
            {"metrics": ["exact_match"], "targets": [{"system": "a", "url": "https://rag.example", "reqest": {}}]},
            r"targets item 1 \(a\)\.reqest: Extra inputs are not permitted \(did you mean 'request'\?\)",
        ),
    ],
)
def test_bad_suites_raise_config_error(suite: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_suite(suite)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "header", ["Authorization", "X-Api-Key", "x-auth-token", "Ocp-Apim-Subscription-Key", "Cookie", "X-Auth-Key",
               "x-goog-api-key", "Proxy-Authorization", "X-Access-Key",
               # kept with the run before: RapidAPI's, Azure Functions', a bare Key, X-Auth, a signature, pwd
               "X-RapidAPI-Key", "X-Functions-Key", "Key", "X-Auth", "X-Amz-Signature", "pwd"]
)  # fmt: skip
def test_a_target_header_carrying_a_credential_is_refused_unshown(header: str) -> None:
    """Plain headers are kept with the run (its store, task messages, run_info.json); a key pasted there would be."""
    target = {"url": "https://rag.example/ask", "headers": {header: "sk-pasted-0123456789", "X-Request-Id": "7"}}
    refused = f"{header}: a header that carries a credential comes from the environment only"
    with pytest.raises(ConfigError, match=refused) as info:
        load_suite({"metrics": ["exact_match"], "target": target})
    assert "sk-pasted" not in str(info.value) and f"auth_header: {header}" in str(info.value)
    plain = {"url": "https://rag.example/ask", "headers": {"X-Request-Id": "7", "Accept": "application/json",
                                                           "X-Idempotency-Key": "k1", "X-Cache-Key": "c"}}  # fmt: skip
    loaded = load_suite({"metrics": ["exact_match"], "target": plain}).suite.target
    assert loaded is not None and loaded.headers == plain["headers"]


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("https://rag.example/ask?api_key=REALSECRET987", "query parameter api_key"),
        ("https://rag.example/ask?lang=en&access_token=REALSECRET987", "query parameter access_token"),
        ("https://rag.example/api/ask?code=REALSECRET987", "query parameter code"),  # Azure Functions
        ("https://rag.example/ask?X-Amz-Signature=REALSECRET987", "query parameter X-Amz-Signature"),
        ("https://rag.example/ask?auth=REALSECRET987&pwd=x", "query parameter auth, pwd"),
        ("https://bob:REALSECRET987@rag.example/ask", r"user info \(user:password@\)"),
        ("https://REALSECRET987@rag.example/ask", r"user info \(user:password@\)"),
    ],
)
def test_a_url_carrying_a_credential_is_refused_unshown(url: str, where: str) -> None:
    """A target's ``url`` and the judge's ``base_url`` are kept with the run (its store, task messages, run_info.json)
    and shown in messages and logs: a key in one would be too."""
    for suite in (
        {"metrics": ["exact_match"], "target": {"url": url}},
        {"metrics": ["rubric_judge"], "judge": {"provider": "openai", "base_url": url}},
    ):
        with pytest.raises(ConfigError, match=f"the url holds a credential \\({where}\\)") as info:
            load_suite(suite)
        assert "REALSECRET987" not in str(info.value) and "comes from the environment only" in str(info.value)
    plain = "https://rag.example:8443/v1/ask?lang=en&max_tokens=64&top_k=5"
    assert load_suite({"metrics": ["exact_match"], "target": {"url": plain}}).suite.target.url == plain  # type: ignore[union-attr]
    judged = load_suite({"metrics": ["rubric_judge"], "judge": {"provider": "openai", "base_url": plain}})
    assert judged.suite.judge.base_url == plain


def test_a_target_request_field_carrying_a_credential_is_refused_unshown() -> None:
    """A key written in the request body (or a GET's query) is kept with the run as a header's would be."""
    url, key = "https://rag.example/ask", "REALSECRET987"
    for target, named in [({"request": {"question": "{question}", "api_key": key}}, "api_key"),
                          ({"request": {"q": "{question}", "auth": {"password": key}}}, "auth.password"),
                          ({"request": {"q": "{question}", "key": key}, "method": "GET"}, "key")]:  # fmt: skip
        said = f"request field {named}: a credential comes from the environment"
        with pytest.raises(ConfigError, match=said) as info:
            load_suite({"metrics": ["exact_match"], "target": {"url": url, **target}})
        assert key not in str(info.value) and "auth_env" in str(info.value)
    # a row's field is data; a POST body's "code" is no query credential; an empty value holds nothing
    plain = {"question": "{question}", "session_token": "{metadata.session}", "max_tokens": 64, "cache_key": "k",
             "api_key": "", "code": "python"}  # fmt: skip
    loaded = load_suite({"metrics": ["exact_match"], "target": {"url": url, "request": plain}})
    assert loaded.suite.target is not None and loaded.suite.target.request == plain


@pytest.mark.parametrize("name", ["data[api_key]", "data[token]", "api key"])
def test_a_get_targets_request_field_is_read_as_its_urls_query_is(name: str) -> None:
    """A GET's request becomes its url's query: a field's name was read whole, so ``data[api_key]`` or ``api key``
    was sent as the very query parameter that a url may not hold. It is read as a url's query's name is."""
    target = {"url": "https://rag.example/ask", "method": "GET", "request": {"q": "{question}", name: "REALSECRET987"}}
    with pytest.raises(ConfigError, match="a credential comes from the environment") as info:
        load_suite({"metrics": ["exact_match"], "target": target})
    assert "REALSECRET987" not in str(info.value)


@pytest.mark.parametrize("name", ["lang.code", "filter[key]", "sort.key", "country code"])
def test_a_get_targets_request_field_may_end_in_key_or_code(name: str) -> None:
    """``key`` and ``code`` were read as the last word of any name: a GET's ``lang.code`` or ``filter[key]`` field,
    no credential, was refused. Only the bare name (or one after a '?' or ';') is read as one."""
    target = {"url": "https://rag.example/ask", "method": "GET", "request": {"q": "{question}", name: "en"}}
    loaded = load_suite({"metrics": ["exact_match"], "target": target})
    assert loaded.suite.target is not None and loaded.suite.target.request == {"q": "{question}", name: "en"}


def test_a_suite_changed_after_loading_is_checked_again() -> None:
    """Command-line overrides (``--chunk-size``) go through model_copy(update=...), which skips validation."""
    loaded = load_suite({"metrics": ["exact_match"]}).suite
    with pytest.raises(ConfigError, match="chunk sizes must be >= 1"):
        load_suite(loaded.model_copy(update={"chunk_size": {"cpu": 0}}))
    assert load_suite(loaded.model_copy(update={"chunk_size": {"cpu": 7}})).suite.chunk_size == {"cpu": 7}


def test_suite_files_yaml_and_json(tmp_path: Path) -> None:
    yml = tmp_path / "s.yaml"
    yml.write_text("name: t\nmetrics:\n  - exact_match\n  - {name: recall_at_k, params: {k: [3, 1]}}\n")
    resolved = load_suite(yml)
    assert resolved.queues == ["cpu"]
    assert resolved.outputs() == ["exact_match", "recall_at_1", "recall_at_3", "mrr"]
    js = tmp_path / "s.json"
    js.write_text('{"metrics": ["exact_match"]}')
    assert load_suite(js).suite.name == "ragscore"
    with pytest.raises(ConfigError, match="Suite file not found"):
        load_suite(tmp_path / "nope.yaml")
    broken = tmp_path / "b.yaml"
    broken.write_text("metrics: [exact_match\n")
    with pytest.raises(ConfigError, match="cannot parse the suite") as info:
        load_suite(broken)
    assert f'in "{broken}", line 2' in str(info.value) and "<unicode string>" not in str(info.value)


def test_a_metric_name_given_as_the_suite_says_what_a_suite_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluate(rows, "exact_match") said only 'Suite file not found: exact_match', with no word that a suite is a
    file or a dict of a metrics list."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_suite("exact_match")
    assert str(info.value) == (
        "Suite file not found: exact_match (a suite is a .yaml or .json file, or from Python a dict such as "
        "{'metrics': ['exact_match']})"
    )
    with pytest.raises(ConfigError) as info:
        load_suite(tmp_path / "nope.yaml")  # a file's name: nothing more to say
    assert str(info.value) == f"Suite file not found: {tmp_path / 'nope.yaml'}"


def test_a_yaml_gate_written_with_an_unquoted_on_key_reads_as_on(tmp_path: Path) -> None:
    """PyYAML (YAML 1.1) reads ``on:`` as the boolean true; docs/reports.md writes gates that way."""
    path = tmp_path / "suite.yaml"
    path.write_text("metrics: [exact_match]\ngates:\n  - {metric: exact_match, min: 0.5, on: ci_low}\n")
    (gate,) = load_suite(path).suite.gates
    assert (gate.metric, gate.min, gate.on) == ("exact_match", 0.5, "ci_low")


def test_a_cost_budget_without_any_price_is_refused() -> None:
    judge = {"model": "m1"}
    with pytest.raises(ConfigError, match=r"max_cost \(--max-cost\) needs a price for the judge model 'm1'"):
        load_suite({"metrics": [{"name": "rubric_judge", "params": {"max_cost": 1.0}}], "judge": judge})
    priced = {"max_cost": 1.0, "prices": {"m1": [0.1, 0.2]}}
    assert load_suite({"metrics": [{"name": "rubric_judge", "params": priced}], "judge": judge})
    assert load_suite({"metrics": [{"name": "rubric_judge", "params": {"max_tokens_total": 10}}], "judge": judge})


def test_a_cost_budget_whose_prices_name_another_model_says_which_they_name() -> None:
    """A price table with a typo ('gpt-4o-mni') was told to "give the judge metrics the param 'prices'", which it had
    given: the message did not say that it names another model than the judge's."""
    judge = {"provider": "openai", "model": "gpt-4o-mini"}
    params = {"max_cost": 1.0, "prices": {"gpt-4o-mni": [0.15, 0.6]}}
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": [{"name": "rubric_judge", "params": params}], "judge": judge})
    assert "the judge model 'gpt-4o-mini' (the prices given name 'gpt-4o-mni', not the judge's model; did you mean " \
        "'gpt-4o-mini' for 'gpt-4o-mni'?): give" in str(info.value)  # fmt: skip


@pytest.mark.parametrize("price", [[-0.05, 0.08], [0.05, float("nan")], [float("inf"), 0.08]])
def test_a_price_must_be_a_finite_number_not_below_0(price: list[float]) -> None:
    """A negative price made the run's cost go down (a max_cost never reached); NaN or infinity failed every judge
    call once it was paid for (Redis refuses to add them to the run's cost)."""
    suite = {"metrics": [{"name": "answer_accuracy", "params": {"prices": {"m": price}}}], "judge": {"model": "m"}}
    with pytest.raises(ConfigError, match="prices"):
        load_suite(suite)


def test_a_price_given_to_one_judge_metric_prices_every_judge_metrics_calls() -> None:
    """--max-cost is a cap on the run: with the price on answer_accuracy only, groundedness and rubric_judge
    calls counted 0 and ran on past the budget (9x it in an audit)."""
    judge = {"provider": "openai", "model": "m", "base_url": "http://localhost:1/v1"}
    resolved = load_suite({"metrics": [{"name": "answer_accuracy", "params": {"prices": {"m": [0.05, 0.08]}}},
                                       "groundedness", "rubric_judge", "exact_match"], "judge": judge})  # fmt: skip
    prices = {m.name: getattr(p, "prices", None) for m, p in resolved.metrics}
    assert prices == {"answer_accuracy": {"m": (0.05, 0.08)}, "groundedness": {"m": (0.05, 0.08)},
                      "rubric_judge": {"m": (0.05, 0.08)}, "exact_match": None}  # fmt: skip
    budgeted = load_suite(
        {
            "metrics": [
                {"name": "groundedness", "params": {"max_cost": 1.0}},
                {"name": "rubric_judge", "params": {"prices": {"m": [1, 2]}}},
            ],
            "judge": judge,
        }
    )
    assert all(p.prices == {"m": (1.0, 2.0)} for _, p in budgeted.metrics)  # max_cost on groundedness is priced
    with pytest.raises(ConfigError, match="two prices"):
        load_suite(
            {
                "metrics": [
                    {"name": "answer_accuracy", "params": {"prices": {"m": [0.05, 0.08]}}},
                    {"name": "groundedness", "params": {"prices": {"m": [1, 2]}}},
                ],
                "judge": judge,
            }
        )


def test_a_secret_pasted_where_its_variable_is_named_is_refused_unshown() -> None:
    """``api_key_env: sk-...`` was echoed by "set the environment variable sk-..."."""
    for spec in (
        {"metrics": [{"name": "groundedness", "params": {"api_key_env": "sk-proj-REALSECRET987"}}]},
        {"metrics": [{"name": "groundedness", "params": {"api_key_env": "gsk_REALSECRET987aBcD"}}]},  # a valid name
        {"metrics": [{"name": "groundedness", "params": {"api_key_env": "x7REALSECRET987abcdefghijkLMNOPq"}}]},
        {"metrics": ["exact_match"], "target": {"url": "http://rag:8000/ask", "auth_env": "Bearer abc.REALSECRET987"}},
    ):
        with pytest.raises(ConfigError, match="must name an environment variable") as info:
            load_suite(spec)
        assert "REALSECRET987" not in str(info.value)
    for name in ("MY_JUDGE_KEY", "groq_key_2", "OPENROUTER_API_KEY_FOR_JUDGES_2025"):
        assert load_suite({"metrics": [{"name": "groundedness", "params": {"api_key_env": name}}]})


def test_one_cutoff_may_be_written_as_a_number() -> None:
    assert load_suite({"metrics": [{"name": "recall_at_k", "params": {"k": 5}}]}).outputs() == ["recall_at_5", "mrr"]


def test_a_suite_reads_back_what_it_writes() -> None:
    """Workers and resumes read the suite from its JSON in the store: a check on suite fields that refused the
    written form (max_tokens taken for a secret's name) failed every task of every run."""
    from ragscore_workers.schemas import Suite

    suite = load_suite({
        "name": "all", "metrics": ["exact_match", {"name": "recall_at_k", "params": {"k": 5}}, "rubric_judge"],
        "judge": {"provider": "openai", "model": "o3-mini", "max_tokens": 64, "tpd": 10_000},
        "target": {"url": "http://rag:8000/ask", "auth_env": "RAG_TOKEN"},
    }).suite  # fmt: skip
    assert Suite.model_validate_json(suite.model_dump_json()) == suite


def test_a_plugin_that_cannot_be_imported_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module of RAGSCORE_PLUGINS missing here (a worker host without it, a dependency not installed) raised its
    ModuleNotFoundError: a traceback from the CLI, and on a worker a failed chunk whose chord never completed (the
    run sat at 0% for ever). Its second import (the worker's next chunk) said its metric was 'registered twice'."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.half_broken")
    said = "RAGSCORE_PLUGINS names 'tests.plugins.half_broken', which cannot be imported on .*: ModuleNotFoundError"
    for _ in range(2):
        with pytest.raises(ConfigError, match=f"{said}: No module named 'ragscore_test_dependency_not_installed', "
                           r"raised at \S+/tests/plugins/half_broken.py:16 \(every worker"):  # fmt: skip
            load_suite({"metrics": ["exact_match"]})


def test_a_plugin_import_error_quoting_a_key_from_the_environment_says_so_without_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its text went unredacted into the ConfigError: the CLI's message, and on a worker every item's error."""
    key = "acme-live-7f3a9c21"
    monkeypatch.setenv("ACME_API_KEY", key)
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.leaky_import")
    with pytest.raises(ConfigError) as caught:
        load_suite({"metrics": ["exact_match"]})
    assert str(caught.value).startswith("RAGSCORE_PLUGINS names 'tests.plugins.leaky_import', which cannot be imported")
    assert "RuntimeError: ACME login failed for https://acme.test/v1?key=***, raised at " in str(caught.value)
    assert key not in str(caught.value)


def test_a_plugin_metric_named_like_a_built_in_says_which_two_clash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.clash")
    with pytest.raises(ConfigError, match="'exact_match' is registered twice: by ragscore_workers.metrics.exact_match"
                       r".exact_match and by tests.plugins.clash.my_exact_match"):  # fmt: skip
        load_suite({"metrics": ["exact_match"]})


def test_a_plugin_writing_a_built_ins_output_or_failing_to_plan_is_refused_before_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plug-in metric writing ``mrr`` overwrote recall_at_k's own MRR without a word; a params validator raising
    TypeError, or an ``outputs`` that raises, ended the CLI in a traceback (exit 1), not "Bad params" (exit 2)."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.careless")
    with pytest.raises(ConfigError, match="write the same output 'mrr' \\(by recall_at_k and careless_rank\\)"):
        load_suite({"metrics": ["recall_at_k", "careless_rank"]})
    assert load_suite({"metrics": ["careless_rank"]}).metrics  # alone it writes nobody else's output
    with pytest.raises(ConfigError, match="Bad params for metric 'careless_cutoffs': params: TypeError: "):
        load_suite({"metrics": [{"name": "careless_cutoffs", "params": {"k": [1, None]}}]})
    with pytest.raises(ConfigError, match="'careless_cutoffs': its outputs cannot be named for them \\(IndexError"):
        load_suite({"metrics": [{"name": "careless_cutoffs", "params": {"k": [1, 5]}}]})


def test_a_plugin_writing_a_built_ins_output_names_the_line_of_both_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two metrics writing the same output were said without a line: at the second's, with the first's."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.careless")
    said = _said_of(tmp_path / "t.yaml", "name: t\nmetrics:\n  - recall_at_k\n  - exact_match\n  - careless_rank\n")
    assert said.startswith("t.yaml line 5 column 5, the first at line 3 column 5: Two metrics of the suite write the "
                           "same output 'mrr' (by recall_at_k and careless_rank)"), said  # fmt: skip
    # a third writer is said too, at its own entry, with the first writer; outputs a pair shares are said together
    said = _said_of(tmp_path / "t.yaml", "metrics:\n  - recall_at_k\n  - careless_ranks\n  - careless_rank\n")
    assert _heads(said, ": one would") == [
        "  t.yaml line 3 column 5, the first at line 2 column 5: metrics item 2 (careless_ranks): Two metrics of the "
        "suite write the same outputs 'mrr', 'recall_at_5' (by recall_at_k and careless_ranks)",
        "  t.yaml line 4 column 5, the first at line 2 column 5: metrics item 3 (careless_rank): Two metrics of the "
        "suite write the same output 'mrr' (by recall_at_k and careless_rank)",
    ], said


def test_a_typo_in_a_plugins_params_is_refused_though_its_model_is_a_plain_base_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pydantic ignores unknown keys by default: ``max_word: 4`` ran with the default 100, without a word."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.plain_params")
    with pytest.raises(
        ConfigError, match="'plain_short_answer': max_word: Extra inputs are not permitted \\(did you mean 'max_words'"
    ):
        load_suite({"metrics": [{"name": "plain_short_answer", "params": {"max_word": 4}}]})
    with pytest.raises(ConfigError, match="max_word: Extra inputs .*; max_words: 'x' is not a whole number"):
        load_suite({"metrics": [{"name": "plain_short_answer", "params": {"max_word": 4, "max_words": "x"}}]})
    (resolved,) = load_suite({"metrics": [{"name": "plain_short_answer", "params": {"max_words": 4}}]}).metrics
    assert resolved[1].max_words == 4  # type: ignore[attr-defined]
    # A field with an alias is read by its alias only: its name, which pydantic ignores, is refused as unknown.
    aliased = "plain_aliased_short_answer"
    with pytest.raises(
        ConfigError, match=f"'{aliased}': max_words: Extra inputs are not permitted \\(did you mean 'maxWords'"
    ):
        load_suite({"metrics": [{"name": aliased, "params": {"max_words": 4}}]})
    (resolved,) = load_suite({"metrics": [{"name": aliased, "params": {"maxWords": 4}}]}).metrics
    assert resolved[1].max_words == 4  # type: ignore[attr-defined]


def test_a_request_field_named_like_a_credential_whose_value_is_no_text_is_sent() -> None:
    """Only a text value can be a credential written in the suite: a number, a flag or a list of numbers under a name
    with ``token`` as a part (vLLM's ``stop_token_ids``, a ``token_limit``) was refused as one."""
    url = "https://rag.example/ask"
    plain = {"question": "{question}", "stop_token_ids": [2, 32000], "token_limit": 512, "return_token_usage": True,
             "options": {"secret_mode": False, "max_token": 64}}  # fmt: skip
    loaded = load_suite({"metrics": ["exact_match"], "target": {"url": url, "request": plain}})
    assert loaded.suite.target is not None and loaded.suite.target.request == plain
    for written in ({"token": "REALSECRET987"}, {"auth": {"api_key": "REALSECRET987"}}, {"token": ["REALSECRET987"]}):
        with pytest.raises(ConfigError, match="a credential comes from the environment") as info:
            load_suite({"metrics": ["exact_match"], "target": {"url": url, "request": {"q": "{question}", **written}}})
        assert "REALSECRET987" not in str(info.value)


def test_a_refused_credential_is_unshown_in_the_traceback_too() -> None:
    """The ConfigError's text left it out, but it chained pydantic's ValidationError, whose text holds each refused
    value (``input_value='https://bob:KEY@...'``): ``evaluate()`` in a notebook or a CI script prints that chain."""
    import traceback

    key = "REALSECRET987"
    for suite in (
        {"metrics": ["exact_match"], "target": {"url": f"https://bob:{key}@rag.example/ask"}},
        {"metrics": ["exact_match"], "target": {"url": f"https://rag.example/ask?api_key={key}"}},
        {"metrics": ["exact_match"], "target": {"url": "https://rag.example/ask", "request": {"api_key": key}}},
        {"metrics": ["exact_match"], "target": {"url": "https://rag.example/ask", "headers": {"X-Api-Key": key}}},
        {"metrics": ["exact_match"], "target": {"url": "https://rag.example/ask", "auth_env": f"sk-{key}abcdef0123"}},
    ):
        with pytest.raises(ConfigError) as info:
            load_suite(suite)
        assert key not in "".join(traceback.format_exception(info.value)), suite


def test_a_plugin_param_read_through_an_alias_path_is_no_unknown_param(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field pydantic reads from a nested key (``AliasPath("limits", "words")``) was refused as an unknown
    ``limits``, though the model reads it; a key no field reads still is."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.plain_params")
    name = "plain_path_short_answer"
    (resolved,) = load_suite({"metrics": [{"name": name, "params": {"limits": {"words": 4}}}]}).metrics
    assert resolved[1].max_words == 4  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=f"'{name}': limit: Extra inputs are not permitted \\(did you mean 'limits'"):
        load_suite({"metrics": [{"name": name, "params": {"limit": {"words": 4}}}]})


def test_a_params_typo_is_told_the_param_it_is_like_and_the_metrics_params() -> None:
    """``{name: recall_at_k, params: {kk: [1]}}`` was told only ``kk: Extra inputs are not permitted``."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": [{"name": "recall_at_k", "params": {"kk": [1]}}]})
    assert str(info.value) == ("Bad params for metric 'recall_at_k': kk: Extra inputs are not permitted (did you "
                               "mean 'k'? its params: k)")  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"'exact_match': zzz: Extra inputs are not permitted \(it takes no params\)$"
    ):
        load_suite({"metrics": [{"name": "exact_match", "params": {"zzz": 1}}]})


def test_a_plugin_model_that_reads_keys_itself_or_ignores_extras_on_purpose_is_taken_at_its_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The unknown-param check read the raw keys before the model: a legacy ``maxlen`` its own before-validator
    renames, and a key a model with an explicit ``extra="ignore"`` drops by choice, were refused."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.plain_params")
    (resolved,) = load_suite({"metrics": [{"name": "plain_legacy_short_answer", "params": {"maxlen": 4}}]}).metrics
    assert resolved[1].max_words == 4  # type: ignore[attr-defined]
    ignoring = {"name": "plain_ignoring_short_answer", "params": {"max_words": 4, "from_v2": True}}
    (resolved,) = load_suite({"metrics": [ignoring]}).metrics
    assert resolved[1].max_words == 4  # type: ignore[attr-defined]


def test_a_credential_in_an_object_inside_a_request_list_is_refused_unshown() -> None:
    """The "nested too" check stopped at lists: ``{"messages": [{"role": "system", "api_key": "sk-..."}]}`` was
    kept with the run as written; an object in a list holding only row fields and plain values is still sent."""
    url, key = "https://rag.example/ask", "REALSECRET987"
    request = {"q": "{question}", "messages": [{"role": "user", "content": "{question}"}, {"auth": {"token": key}}]}
    with pytest.raises(ConfigError, match=r"request field messages\[1\]\.auth\.token: a credential") as info:
        load_suite({"metrics": ["exact_match"], "target": {"url": url, "request": request}})
    assert key not in str(info.value)
    plain = {"q": "{question}", "messages": [{"role": "user", "content": "{question}", "session_token": "{id}"}]}
    loaded = load_suite({"metrics": ["exact_match"], "target": {"url": url, "request": plain}})
    assert loaded.suite.target is not None and loaded.suite.target.request == plain


def test_a_budget_given_to_one_judge_metric_caps_every_judge_metric_and_two_values_are_refused() -> None:
    """With max_tokens_total 500 on answer_accuracy and 100000 on rubric_judge, answer_accuracy stopped at 500
    while the run judged on (a budget is counted over the run's calls); one given alone left the others unbounded."""
    judge = {"provider": "openai", "model": "m", "base_url": "http://localhost:1/v1"}
    one = load_suite({"metrics": [{"name": "answer_accuracy", "params": {"max_tokens_total": 500}},
                                  "groundedness", "exact_match"], "judge": judge})  # fmt: skip
    assert {m.name: getattr(p, "max_tokens_total", None) for m, p in one.metrics} == {
        "answer_accuracy": 500, "groundedness": 500, "exact_match": None}  # fmt: skip
    with pytest.raises(ConfigError, match=r"judge metrics give max_tokens_total different values, 500 "
                       r"\(answer_accuracy\), 100000 \(rubric_judge\): a budget is the run's"):  # fmt: skip
        load_suite({"metrics": [{"name": "answer_accuracy", "params": {"max_tokens_total": 500}},
                                {"name": "rubric_judge", "params": {"max_tokens_total": 100000}}],
                    "judge": judge})  # fmt: skip
    same = load_suite({"metrics": [{"name": "answer_accuracy", "params": {"max_tokens_total": 500}},
                                   {"name": "rubric_judge", "params": {"max_tokens_total": 500}}],
                       "judge": judge})  # fmt: skip
    assert all(p.max_tokens_total == 500 for _, p in same.metrics)


@pytest.mark.parametrize(
    ("suite", "said"),
    [
        ({"sandbox": {"timeout_s": float("inf")}}, "sandbox.timeout_s: a number must be finite"),
        ({"metrics": ["checks", {"name": "recall_at_k", "params": {"k": [1, float("nan")]}}]},
         "metrics item 2 (recall_at_k).params.k item 2: a number must be finite"),
        ({"sandbox": {"memory_mb": 16}}, "sandbox.memory_mb: Input should be greater than or equal to 32"),
        ({"sandbox": {"memory_mb": 2**45}}, "sandbox.memory_mb: Input should be less than or equal to 1048576"),
        ({"sandbox": {"timeout_s": 0.001}}, "sandbox.timeout_s: Input should be greater than or equal to 0.5"),
        ({"sandbox": {"timeout_s": 900}}, "sandbox.timeout_s: Input should be less than or equal to 600"),
    ],
)  # fmt: skip
def test_sandbox_limits_it_cannot_run_under_and_numbers_json_cannot_hold_are_refused(
    suite: dict[str, object], said: str
) -> None:
    """``timeout_s: .inf`` was stored as null and the run then failed reading its own suite (leaving a run.json that
    locked its DIR); memory_mb 16 failed every item with "the slot helper exited"; 0.001 s "could not start"."""
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_suite({"metrics": ["checks"]} | suite)


def test_a_suite_object_holding_an_infinite_number_is_refused_too() -> None:
    """``evaluate(rows, Suite(...))``: the nested models were not looked into."""
    from ragscore_workers.schemas import Suite

    with pytest.raises(ConfigError, match=re.escape("judge.temperature: a number must be finite")):
        load_suite(Suite.model_validate({"metrics": ["exact_match"], "judge": {"temperature": float("inf")}}))


def test_a_code_chunk_holds_only_the_programs_that_fit_the_queues_time_limit_at_their_timeout() -> None:
    """4 rows of 300 s programs ran over the 780 s limit, and the limit failed every item of the chunk."""
    from ragscore_workers.app import QUEUE_LIMITS
    from ragscore_workers.planning import CODE_CHUNK_SHARE, chunk_size

    def size(**suite: object) -> int:
        return chunk_size(load_suite({"metrics": ["code_test"], **suite}), "code")

    assert size() == 4 and size(chunk_size={"code": 40}) == 40  # 40 programs of 10 s fit
    assert size(sandbox={"timeout_s": 300}) == int(QUEUE_LIMITS["code"][0] * CODE_CHUNK_SHARE // 300) == 2
    assert size(sandbox={"timeout_s": 600}) == 1 and size(chunk_size={"code": 100}) == 62
    assert chunk_size(load_suite({"metrics": ["exact_match"], "sandbox": {"timeout_s": 600}}), "cpu") == 250
    # a code-queue metric's own timeout counts too: code_test's params, a code_test point of the suite's checks
    own = {"metrics": [{"name": "code_test", "params": {"timeout_s": 300}}]}
    assert chunk_size(load_suite(own), "code") == 2
    point = {"type": "code_test", "params": {"timeout_s": 200, "stdout": "1"}}
    assert chunk_size(load_suite({"metrics": [{"name": "checks", "params": {"points": [point]}}]}), "code") == 3
    both = [{"name": "code_test", "params": {"timeout_s": 300}}, {"name": "checks", "params": {"points": [point]}}]
    assert chunk_size(load_suite({"metrics": both}), "code") == 1  # a row runs both programs: 500 s


def test_a_code_test_timeout_or_memory_outside_what_the_sandbox_takes_is_taken_as_its_nearest_end() -> None:
    """A row's own point asking for more than the suite allows is capped (it comes with the data), never refused;
    so is one asking for less than a program needs to start."""
    from ragscore_workers.metrics.code_test import CodeTestParams

    params = CodeTestParams(timeout_s=100000, memory_mb=2**45)
    assert (params.timeout_s, params.memory_mb) == (600, 1_048_576)
    low = CodeTestParams(timeout_s=0.01, memory_mb=1)
    assert (low.timeout_s, low.memory_mb) == (0.5, 32)
    with pytest.raises(ValueError, match="greater than 0"):
        CodeTestParams(timeout_s=0)


def test_judge_limits_in_place_of_the_suites_warn_of_nothing() -> None:
    """``--rpm`` / ``--tpm`` (with_judge_limits) printed pydantic's "serializer warnings" above every such run."""
    import warnings

    from orchestrator.suite import with_judge_limits

    resolved = load_suite({"metrics": ["rubric_judge"], "judge": {"rpm": 30}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        limited = with_judge_limits(resolved, rpm=600, tpm=1000)
    assert (limited.suite.judge.rpm, limited.suite.judge.tpm) == (600, 1000)
    with pytest.raises(ConfigError, match="rpm"):
        with_judge_limits(resolved, rpm=0)


@pytest.mark.parametrize("judge", ["openai", ["openai"]])
def test_a_judge_section_that_is_no_mapping_is_refused_with_judge_limits_too(judge: object) -> None:
    """``judge: openai`` (the provider's name where the section goes) is refused; with ``--rpm`` it was replaced by
    ``{rpm: 600}`` unsaid, and the run judged with the default provider."""
    suite = {"metrics": ["groundedness"], "judge": judge}
    for limits in (None, {"rpm": 600}):
        with pytest.raises(ConfigError, match="judge: Input should be a valid dictionary"):
            load_suite(suite, judge_limits=limits)


@pytest.mark.parametrize(
    ("metric", "params", "said"),
    [
        ("typed_answer", {"polarity_weight": True}, "polarity_weight: Input should be a number, not a boolean (true)"),
        ("typed_answer", {"min_rationale_words": True}, "min_rationale_words: Input should be a number"),
        ("answer_hallucination", {"threshold": False}, "threshold: Input should be a number, not a boolean (false)"),
        ("quality_checks", {"retrieval_threshold": True}, "retrieval_threshold: Input should be a number"),
        ("recall_at_k", {"k": [1, True]}, "k item 2: Input should be a valid integer"),  # StrictInt said so already
    ],
)
def test_a_number_param_given_a_boolean_is_refused_naming_the_metric_and_param(
    metric: str, params: dict[str, object], said: str
) -> None:
    """pydantic's lax mode read ``polarity_weight: true`` as 1.0 and ``min_rationale_words: true`` as 1: a YAML slip
    (``threshold: yes``) ran with a number nobody wrote."""
    with pytest.raises(ConfigError, match=re.escape(f"Bad params for metric {metric!r}: {said}")):
        load_suite({"metrics": [{"name": metric, "params": params}]})


@pytest.mark.parametrize(
    ("metric", "params", "said"),
    [
        ("context_sufficiency", {"threshold": "high"}, "threshold: 'high' is not a number"),
        ("recall_at_k", {"k": [1, "5x"]}, "k item 2: '5x' is not a whole number"),
        ("recall_at_k", {"k": [2.5]}, "k item 1: 2.5 is not a whole number"),
        ("context_sufficiency", {"threshold": "x" * 60}, f"threshold: '{'x' * 38}… is not a number"),
    ],
)
def test_a_param_of_the_wrong_kind_is_refused_with_the_value_given(
    metric: str, params: dict[str, object], said: str
) -> None:
    """``threshold: high`` was refused as "threshold: Input should be a valid number, unable to parse string as a
    number", without the value given: in a suite of many metrics, which one was wrong had to be looked for."""
    with pytest.raises(ConfigError, match=re.escape(f"Bad params for metric {metric!r}: {said}")):
        load_suite({"metrics": [{"name": metric, "params": params}]})


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ({"judge": {"rpm": True}}, "judge.rpm: Input should be a number, not a boolean (true)"),
        ({"judge": {"temperature": False}}, "judge.temperature: Input should be a number, not a boolean (false)"),
        ({"sandbox": {"timeout_s": True}}, "sandbox.timeout_s: Input should be a number, not a boolean (true)"),
        ({"embedding": {"batch_size": True}}, "embedding.batch_size: Input should be a number"),
        ({"chunk_size": {"cpu": True}}, "chunk_size.cpu: Input should be a number"),
        (
            {"gates": [{"metric": "exact_match", "min": True}]},
            "gates item 1 (exact_match).min: Input should be a number",
        ),
        ({"target": {"url": "http://x/ask", "timeout_s": True}}, "target.timeout_s: Input should be a number"),
    ],
)
def test_a_number_of_a_suite_section_given_a_boolean_is_refused_naming_the_field(
    section: dict[str, object], said: str
) -> None:
    """pydantic's lax mode read the judge's ``rpm: true`` as 1 request a minute and the sandbox's ``timeout_s: yes``
    as 1 s, as it did metric params."""
    with pytest.raises(ConfigError, match=re.escape(f"Invalid suite: {said}")):
        load_suite({"metrics": ["exact_match"], **section})


def test_boolean_fields_of_suite_sections_stay_accepted() -> None:
    target = {"url": "http://x/ask", "cache": False, "request": {"question": "{question}", "stream": False}}
    suite = {"judge": {"reasoning": True}, "embedding": {"fp16": True}, "target": target}
    assert load_suite({"metrics": ["exact_match"], **suite}).suite.judge.reasoning is True


def test_boolean_params_and_booleans_inside_free_form_params_stay_accepted() -> None:
    load_suite({"metrics": [{"name": "typed_answer", "params": {"synonyms": False}}]})
    schema = {"type": "object", "additionalProperties": False}
    points = [{"type": "json_schema", "params": {"schema": schema}}]
    load_suite({"metrics": [{"name": "checks", "params": {"points": points}}]})


@pytest.mark.parametrize("name", ["auth.token", "api key", "client.api_key", "data[password]"])
def test_a_request_body_field_is_read_in_words_as_a_query_field_is(name: str) -> None:
    """A POST body's field name was matched whole (``credential_name``), a GET's word by word: ``auth.token`` or
    ``api key`` written in a body was let through, and kept with the run. Both now read a name in words."""
    target = {"url": "https://rag.example/ask", "request": {"q": "{question}", name: "REALSECRET987"}}
    with pytest.raises(ConfigError, match="a credential comes from the environment") as info:
        load_suite({"metrics": ["exact_match"], "target": target})
    assert "REALSECRET987" not in str(info.value)


def test_suite_errors_count_list_items_from_1_and_name_them() -> None:
    """Suite errors said ``metrics.0`` (pydantic's count from 0), which users read as no metric of theirs: an item
    is said as users count it, with its name where it has one."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": [5, {"name": "recall_at_k", "parms": {}}],
                    "targets": [{"system": "a", "url": "https://rag.example", "reqest": {}}]})  # fmt: skip
    said = str(info.value)
    assert "metrics item 1: Input should be a valid dictionary" in said, said
    assert "metrics item 2 (recall_at_k): parms (did you mean 'params'?)" in said, said
    assert "targets item 1 (a).reqest: Extra inputs" in said and ".0" not in said, said


@pytest.mark.parametrize("key", ["api_kye", "apikye", "pasword"])
def test_a_misspelt_secret_judge_key_is_refused_unshown_with_the_name_it_looks_like(key: str) -> None:
    """``judge: {api_kye: gsk_...}`` was said ``judge.api_kye: Extra inputs are not permitted``, no "did you mean"
    (api_key is no field: keys are refused): it is refused as a key is, the value unshown, naming the key it looks
    like. A typo of a field still names the field (``tokens``: max_tokens)."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["exact_match"], "judge": {key: "gsk_REALSECRET987"}})
    said = str(info.value)
    assert re.search(
        rf"judge: {key} \(did you mean '(api_key|password)'\?\): keys come from the environment only", said
    )
    assert "REALSECRET987" not in said and "the value is not shown" in said, said
    with pytest.raises(ConfigError, match=r"judge\.tokens: Extra inputs are not permitted \(did you mean 'max_tokens'"):
        load_suite({"metrics": ["exact_match"], "judge": {"tokens": 5}})


@pytest.mark.parametrize("key", ["seed", "user", "top_k", "api_base", "tokenizer"])
def test_a_judge_key_only_loosely_like_a_secrets_name_is_an_unknown_key_not_a_key(key: str) -> None:
    """``seed``, ``user``, ``top_k``, ``api_base`` are common words a secret's short names (secret, token, api_key)
    are as like as a field's typo is (difflib's 0.6): they were said ``seed (did you mean 'secret'?): keys come from
    the environment only``. They are unknown keys, said as pydantic says them, as before."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["exact_match"], "judge": {key: "x"}})
    said = str(info.value)
    assert f"judge.{key}: Extra inputs are not permitted" in said and "environment" not in said, said


def test_a_checks_points_errors_count_points_from_1_and_name_them_by_id() -> None:
    """A bad point of the ``checks`` metric's ``points`` was said ``checks[1] ('x')``, counted from 0 beside every
    other suite error counted from 1: it is said as they are, ``checks item 2 (x)``, a numeric id too."""
    keyword = {"type": "keyword", "params": {"keywords": ["a"]}}
    with pytest.raises(ConfigError) as info:
        load_suite(
            {"metrics": [{"name": "checks", "params": {"points": [keyword, {**keyword, "id": 7, "weight": -1}]}}]}
        )
    assert "points item 2 (7): weight: Input should be greater than or equal to 0" in str(info.value), info.value
    with pytest.raises(ConfigError) as info:
        load_suite(
            {"metrics": [{"name": "checks", "params": {"points": [{**keyword, "id": "x"}, {**keyword, "id": "x"}]}}]}
        )
    assert str(info.value).endswith("points item 1 (x): duplicate point id"), info.value


def test_a_mappings_number_key_is_said_as_the_key_not_as_a_list_item() -> None:
    """A mapping's key written as a number (YAML's ``1: x``) was said as a list item counted from 1 (``judge item
    2``), a place the suite does not have: it is said as written."""
    with pytest.raises(ConfigError, match=r"Invalid suite: judge\.1: Keys should be strings"):
        load_suite({"metrics": ["exact_match"], "judge": {1: "x"}})


def test_a_mis_indented_metric_list_item_is_said_to_look_like_one(tmp_path: Path) -> None:
    """``- exact_match`` then ``- mrr`` indented deeper is one metric to YAML, "exact_match - mrr": the unknown
    metric error said only "did you mean 'exact_match'"."""
    path = tmp_path / "suite.yaml"
    path.write_text("metrics:\n  - exact_match\n    - recall_at_k\n")
    with pytest.raises(UnknownMetricError, match="Unknown metric 'exact_match - recall_at_k'") as info:
        load_suite(path)
    assert "looks like a list item indented deeper than the one above it" in str(info.value), info.value


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"metrics": ["exact_match", "mrr",]}', "not valid JSON at line 1 column 35: Expecting value (a comma "),
        ('{\n  "metrics": ["exact_match"],\n}', "not valid JSON at line 3 column 1: Expecting property name"),
        ('{"metrics": ["exact_match"]', "not valid JSON at line 1 column 28: Expecting ',' delimiter"),
    ],
)
def test_a_json_suite_that_does_not_parse_names_the_file_line_and_column(tmp_path: Path, text: str, said: str) -> None:
    """A trailing comma read "cannot parse the suite: Expecting value: line 1 column 35 (char 34)": it says the
    file is not valid JSON, where, and that JSON takes no comma before a closing bracket."""
    path = tmp_path / "suite.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert str(info.value).startswith(f"{path}: {said}"), info.value
    assert ("takes no comma before" in str(info.value)) == text.endswith((",]}", ",\n}")), info.value


def test_an_unknown_metric_is_said_so_beside_a_plugin_whose_outputs_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a plug-in whose ``outputs`` raises under its default params installed, any unknown metric name said
    "Bad params for metric 'careless_cutoffs': its outputs cannot be named", a metric the suite did not list."""
    monkeypatch.setenv("RAGSCORE_PLUGINS", "tests.plugins.careless")
    with pytest.raises(UnknownMetricError, match="Unknown metric 'exact_mach'. Did you mean 'exact_match'"):
        load_suite({"metrics": ["exact_mach"]})


@pytest.mark.parametrize(
    ("section", "where"),
    [
        ("judge: {rpm: null, pace: even}", r"judge.pace: .* set rpm \(or run with --rpm\) \(the"),
        ("target: {url: 'http://rag/ask', pace: even}", r"target.pace: .* set rpm \(the"),  # --rpm: the judge's only
        ("targets: [{system: a, url: 'http://rag/ask', rpm: 60}, {system: b, url: 'http://rag/ask', pace: even}]",
         r"targets item 2 \(b\).pace: .* set rpm \(the"),
    ],
)  # fmt: skip
def test_an_even_pace_without_rpm_is_refused_naming_its_place_and_the_fix(
    tmp_path: Path, section: str, where: str
) -> None:
    """``pace: even`` holds calls to ceil(rpm / 60) a second: with no ``rpm`` (the judge's ``rpm: null``, a target's
    default) it paced nothing and said nothing. Refused when the suite is read, the place and the fix said."""
    path = tmp_path / "suite.yaml"
    path.write_text(f"metrics: [exact_match]\n{section}\n")
    with pytest.raises(ConfigError, match=f"Invalid suite: {re.escape(str(path))} line 2 column [0-9]+: {where}"):
        load_suite(path)
    with pytest.raises(ConfigError, match="even holds requests to ceil.rpm / 60. a second, and rpm is not set: set"):
        load_suite(path)


def test_an_even_pace_with_rpm_is_accepted() -> None:
    resolved = load_suite({"metrics": ["exact_match"], "judge": {"rpm": 90, "pace": "even"},
                           "target": {"url": "http://rag/ask", "rpm": 60, "pace": "even"}})  # fmt: skip
    assert (resolved.suite.judge.pace, resolved.suite.all_targets[0].pace) == ("even", "even")


def test_several_unknown_metrics_list_the_known_metrics_once() -> None:
    """Each unknown metric's line listed every known metric again (two unknown names: the same 19 names twice): the
    first lists them, the others say only their own close names."""
    with pytest.raises(UnknownMetricError) as info:
        load_suite({"metrics": ["exact_mach", "recal_at_k", "rubric_jugde"]})
    lines = str(info.value).splitlines()
    assert str(info.value).count("Known metrics:") == 1 and lines[1].endswith("typed_answer, verbatim."), info.value
    assert lines[2] == "  metrics item 2 (recal_at_k): Unknown metric 'recal_at_k'. Did you mean 'recall_at_k'?"
    assert lines[3] == "  metrics item 3 (rubric_jugde): Unknown metric 'rubric_jugde'. Did you mean 'rubric_judge'?"


def test_a_metrics_bad_params_said_at_its_place_name_the_metric_once() -> None:
    """``metrics item 2 (recall_at_k): Bad params for metric 'recall_at_k': k: ...`` named the metric twice: after
    its place the line says ``Bad params: k: ...``; alone, the error names the metric as before."""
    bad = {"name": "recall_at_k", "params": {"k": [0]}}
    with pytest.raises(SuiteProblems) as info:
        load_suite({"metrics": ["exact_match", bad, "exact_match"]})
    assert str(info.value).splitlines()[1].startswith("  metrics item 2 (recall_at_k): Bad params: k: every k"), info
    with pytest.raises(ConfigError, match=r"^Bad params for metric 'recall_at_k': k: every k"):
        load_suite({"metrics": [bad]})


def test_a_bad_point_of_checks_points_is_said_at_its_place_without_pydantics_value_error() -> None:
    """A bad point of ``checks``' ``points`` read ``points: Value error, checks item 1 (a): type: ...``: pydantic's
    "Value error," and the place said twice, once as the wrong list. It reads ``points item 1 (a): type: ...``."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": [{"name": "checks", "params": {"points": [{"id": "a", "kind": "keyword"}]}}]})
    said = str(info.value)
    assert said.startswith("Bad params for metric 'checks': points item 1 (a): type: Field required; kind: "), said
    assert "Value error" not in said and "checks item" not in said, said


def test_a_secret_judge_key_is_refused_with_the_judge_sections_other_problems() -> None:
    """``api_kye`` refused as a key hid the judge section's other typos (``modle``) until it was gone: one run said
    one problem. Both are said, the value still unshown."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["exact_match"], "judge": {"api_kye": "gsk_REALSECRET987", "modle": "m", "rpm": 0}})
    said = str(info.value)
    assert "judge: api_kye (did you mean 'api_key'?): keys come from the environment only" in said, said
    assert "judge.modle: Extra inputs are not permitted (did you mean 'model'?)" in said, said
    assert "judge.rpm: Input should be greater than 0" in said and "REALSECRET987" not in said, said


def test_a_judge_metrics_param_in_the_judge_section_is_told_where_it_goes() -> None:
    """``judge: {api_key_env: MY_KEY}`` (the docs' name for the key's variable) was refused as a key written into
    the suite, with "did you mean 'api_key'?", a name refused too; ``max_cost`` there had no hint. Each is said to be
    a param of the judge metrics, with where it goes; the value is never shown."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["answer_accuracy"], "judge": {"api_key_env": "MY_KEY", "max_cost": 2, "modle": "m"}})
    said = str(info.value)
    for param in ("api_key_env", "max_cost"):
        assert (f"judge.{param}: a param of the judge metrics, not of the judge section: give it in each judge "
                f"metric's params ({{name: answer_accuracy, params: {{{param}: ...}}}})") in said, said  # fmt: skip
    assert "judge.modle: Extra inputs are not permitted (did you mean 'model'?)" in said, said
    assert "keys come from the environment" not in said and "MY_KEY" not in said, said


def test_the_judge_section_alone_tells_a_judge_metrics_param_where_it_goes() -> None:
    """The judge section's own model owns the rule (the suite's reading of its errors had it, and the model skipped
    the param in its check for keys): validated alone, ``max_cost`` there is told where it goes, beside a key written
    in, which is still refused unshown."""
    with pytest.raises(ValidationError) as info:
        JudgeConfig.model_validate({"max_cost": 2, "api_key": "gsk_REALSECRET987"})
    said = {e["loc"]: e["msg"] for e in info.value.errors()}
    where = "give it in each judge metric's params ({name: answer_accuracy, params: {max_cost: ...}})"
    assert said[("max_cost",)] == f"a param of the judge metrics, not of the judge section: {where}", said
    assert said[()].startswith("api_key: keys come from the environment only") and "REALSECRET" not in str(said), said


def test_a_misspelt_secret_judge_key_in_upper_case_is_told_the_name_it_looks_like() -> None:
    """``API_KYE`` was an unknown key with no hint, where ``api_kye`` was refused as the api_key it looks like."""
    with pytest.raises(ConfigError, match=r"judge: API_KYE \(did you mean 'api_key'\?\): keys come from the env"):
        load_suite({"metrics": ["exact_match"], "judge": {"API_KYE": "x"}})


def test_a_short_key_like_a_secrets_name_is_a_key_only_where_its_value_looks_like_one() -> None:
    """``tken: 5`` was refused as a secret (one letter from ``token``), the user told keys come from the environment:
    a key under 5 characters is refused as one only where its value looks like a key (``gsk_...``)."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["exact_match"], "judge": {"tken": 5}})
    assert "judge.tken: Extra inputs are not permitted" in str(info.value) and "environment" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["exact_match"], "judge": {"tken": "gsk_REALSECRET987"}})
    said = str(info.value)
    assert "judge: tken (did you mean 'token'?): keys come from the environment" in said, said
    assert "REALSECRET987" not in said, said


def test_a_key_like_a_secrets_name_whose_value_is_no_string_is_an_unknown_key() -> None:
    """``secure: true`` was refused as a secret (``did you mean 'secret'?``), the user told keys come from the
    environment: a key is a string, so a misspelt name's number or boolean is an unknown key, at any length."""
    with pytest.raises(ConfigError) as info:
        load_suite({"metrics": ["exact_match"], "judge": {"secure": True, "tokne": 500}})
    said = str(info.value)
    assert "judge.secure: Extra inputs are not permitted" in said and "judge.tokne: Extra inputs" in said, said
    assert "environment" not in said, said


def test_prices_budgets_and_gates_are_said_with_the_suites_other_problems() -> None:
    """Two prices of one model stopped the check at the first: two budgets, every bad gate and a target's bad
    response path were said one run at a time. One load says them all, the suite's outputs listed once."""
    judge = {"provider": "openai", "model": "m", "base_url": "http://localhost:1/v1"}
    suite = {
        "metrics": [
            {"name": "answer_accuracy", "params": {"prices": {"m": [1, 2]}, "max_cost": 1}},
            {"name": "groundedness", "params": {"prices": {"m": [1, 3]}, "max_cost": 2}},
            "exact_match",
        ],
        "judge": judge,
        "gates": [
            {"metric": "exact_mach", "min": 0.5},
            {"metric": "mrr", "min": 0.5},
            {"metric": "exact_match", "min": 80},
        ],
        "targets": [{"system": "a", "url": "https://rag.example", "response": {"answer": "$[["}}],
    }
    with pytest.raises(SuiteProblems) as info:
        load_suite(suite)
    lines = str(info.value).splitlines()
    assert lines[0] == "Invalid suite: 6 problems:", info.value
    assert lines[1].startswith("  target a response.answer: not a JSON path"), info.value
    assert (
        lines[2]
        == "  judge metrics give model 'm' two prices, [1.0, 2.0] (answer_accuracy) and [1.0, 3.0] (groundedness): a "
        "price is the provider's; give the same one in each"
    )
    assert lines[3].startswith("  judge metrics give max_cost different values, 1 (answer_accuracy), 2 (groundedness)")
    assert lines[4].startswith("  gates item 1 (exact_mach) names 'exact_mach', which the suite does not produce. Did ")
    assert lines[4].endswith("The suite's outputs: answer_accuracy, groundedness, exact_match."), info.value
    assert lines[5] == "  gates item 2 (mrr) names 'mrr', which the suite does not produce.", info.value
    assert lines[6].startswith("  gates item 3 (exact_match): exact_match scores are in [0, 1]"), info.value


@pytest.mark.parametrize(
    ("item", "key", "at"),
    [
        ("name: recall_at_k\n    k: [1]", "k", "line 4 column 5"),
        ("name: exact_match\n    param: {}", r"param \(did you mean 'params'\?\)", "line 4 column 5"),
    ],
)
def test_an_unknown_key_of_a_metric_item_is_said_at_its_own_line(tmp_path: Path, item: str, key: str, at: str) -> None:
    """A metric item's unknown key (``k: [1]`` beside ``name``, a misspelt ``param``) was said at the item's line,
    the line of its ``name``: the key's own line is said."""
    said = _said_of(tmp_path / "t.yaml", f"name: t\nmetrics:\n  - {item}\n")
    assert re.match(rf"Invalid suite: t\.yaml {at}: metrics item 1 \(\w+\): {key}: a metric is written", said), said


def test_a_key_written_into_the_judge_section_is_said_at_its_own_line(tmp_path: Path) -> None:
    """``judge: {model: m, api_kye: gsk_...}`` was said at the ``judge:`` line (the section refuses it as a whole):
    the key's own line is said, its value still unshown."""
    text = "metrics: [exact_match]\njudge:\n  model: m\n  api_kye: gsk_REALSECRET987\n"
    said = _said_of(tmp_path / "t.yaml", text)
    assert said.startswith("Invalid suite: t.yaml line 4 column 3: judge: api_kye (did you mean 'api_key'?): "), said
    assert "REALSECRET987" not in said, said


def test_a_request_placeholder_reading_a_key_of_a_list_or_text_row_field_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    """``{contexts.text}`` (contexts is a list in every row, and a placeholder names no element of one) or
    ``{question.text}`` (text) loaded, and every question then failed (or the run stopped on "no row has
    'contexts.text'", naming no line): both are refused at load, at their keys' lines, with the placeholder to
    write; a key of a mapping (``{metadata.lang}``) or of an extra column still loads."""
    text = ("metrics: [exact_match]\ntargets:\n  - system: rag\n    url: https://rag.example\n    request:\n"
            "      q: '{question}'\n      ctx: '{contexts.text}'\n      filter: {lang: '{metadata.lang}', "
            "user: '{user.id}'}\n      parts: ['Q: {question.text}']\n")  # fmt: skip
    said = _said_of(tmp_path / "t.yaml", text)
    assert said.splitlines()[1:] == [
        "  t.yaml line 7 column 7: target rag request.ctx: {contexts.text} reads 'text' of the row's 'contexts', "
        "which is a list in every row (a placeholder names no element of a list): write {contexts} to send it whole",
        "  t.yaml line 9 column 15: target rag request.parts item 1: {question.text} reads 'text' of the row's "
        "'question', which is text in every row: write {question} to send it whole",
    ], said
    (tmp_path / "t.yaml").write_text(text.replace("{contexts.text}", "{contexts}").replace("{question.text}", "x"))
    assert load_suite(tmp_path / "t.yaml").suite.targets[0].request["ctx"] == "{contexts}"
