"""report.md (and the summary table of report.html) keep whole whatever users name their groups, systems, targets."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest

from orchestrator.reports.markdown import TARGETS_NOTE, md_cell, render_markdown
from ragscore_workers.schemas import MetricSummary, RunSummary


def _cells(line: str) -> list[str]:
    """A markdown table row's cells (an escaped ``\\|`` is not a separator)."""
    return [c.strip() for c in line.replace("\\|", "\0").strip().strip("|").split("|")]


def test_pipes_and_line_breaks_in_user_names_do_not_break_the_tables() -> None:
    m = MetricSummary(mean=0.5, n=2, ci95=[0.0, 1.0])
    summary = RunSummary(
        run_id="r", items=2, scored=2, metrics={"exact_match": m},
        by_group={"g|x": {"exact_match": m}}, by_system={"sys\nA": {"exact_match": m}},
        target={"api|v2": {"calls": 2}},
    )  # fmt: skip
    lines = render_markdown(summary).splitlines()
    group = next(line for line in lines if line.startswith("| g|") or line.startswith("| g\\|"))
    assert _cells(group) == ["g\0x", "0.500 [0.000, 1.000] (n=2)"]
    assert any(line.startswith("| sys A |") for line in lines), "a line break in a name stays in its row"
    target = next(line for line in lines if line.startswith("| api"))
    assert _cells(target)[0] == "api\0v2" and len(_cells(target)) == 7


def test_metrics_with_errors_get_a_line_with_the_first_error() -> None:
    summary = RunSummary(
        run_id="r", items=3, scored=3,
        metrics={"ok": MetricSummary(mean=1.0, n=3),
                 "bad": MetricSummary(mean=None, n=0, errors=3, first_error="ValueError: a | b\nc"),
                 "some": MetricSummary(mean=0.5, n=2, errors=1, first_error="TimeoutError: slow")},
    )  # fmt: skip
    text = render_markdown(summary)
    errors = text.split("## Errors\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert errors == [
        "- bad: 3 errors (every item); first: ValueError: a \\| b c",
        "- some: 1 error; first: TimeoutError: slow",
    ]
    clean = RunSummary(run_id="r", items=1, scored=1, metrics={"ok": MetricSummary(mean=1.0, n=1)})
    assert "## Errors" not in render_markdown(clean)


def test_gold_ids_named_otherwise_than_the_retrieved_ids_are_said_under_the_summary_of_both_reports() -> None:
    """Only the console said that no row's gold id was among its retrieved ids (`doc_12` against `12`, recall 0
    without an error): report.md and report.html, read later, showed the 0s alone (a new user's audit)."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    def summary(mrr: float) -> RunSummary:
        return RunSummary(run_id="r", items=3, scored=3, metrics={"mrr": MetricSummary(mean=mrr, n=3)})

    said = "recall_at_k: no gold_doc_id of any of the 3 rows is among its retrieved_doc_ids (mrr 0 on every row)"
    md = render_markdown(summary(0.0))
    (warning,) = md.split("## Warnings\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert warning.startswith(f"- {said}: do gold_doc_id and retrieved_doc_ids name documents alike (not \\`doc_12\\`")
    assert f'<li class="warn">{said}: do gold_doc_id and retrieved_doc_ids name documents alike' in render_html(
        summary(0.0), ItemStats()
    )
    assert "## Warnings" not in render_markdown(summary(0.5))
    assert '<ul class="warnings">' not in render_html(summary(0.5), ItemStats())


def test_report_md_and_report_html_warn_of_the_same_lines_replies_lacking_a_response_path_among_them() -> None:
    """report.md said a target's replies that had nothing at a response path (contexts, doc ids: recall 0 without an
    error), report.html did not: both Warnings sections are one source's, in its order, and nothing else says them."""
    from orchestrator.reports.console import warning_lines
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    summary = RunSummary(
        run_id="r", items=3, scored=3, metrics={"mrr": MetricSummary(mean=0.0, n=3)},
        target={"rag": {"calls": 3, "unfilled_contexts": 3, "unfilled_retrieved_doc_ids": 1}},
    )  # fmt: skip
    said = warning_lines(summary)
    assert [line.split(":")[0] for line in said] == ["recall_at_k", "target rag", "target rag"]
    assert "1 reply had nothing at the path of retrieved_doc_ids" in said[2]
    md = render_markdown(summary)
    assert md.split("## Warnings\n\n", 1)[1].split("\n\n", 1)[0].splitlines() == [f"- {md_cell(s)}" for s in said]
    assert md.count("had nothing at the path") == 2  # not again under the targets table
    html = render_html(summary, ItemStats())
    assert [unescape(li) for li in re.findall(r'<li class="warn">(.*?)</li>', html)] == said


def test_the_html_summary_table_gives_the_first_error_on_its_errors_cell_escaped() -> None:
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    bad = MetricSummary(mean=None, n=0, errors=2, first_error='ValueError: <b>"x"</b>')
    html = render_html(RunSummary(run_id="r", items=2, scored=0, metrics={"bad": bad}), ItemStats())
    assert 'title="first: ValueError: &lt;b&gt;&#34;x&#34;&lt;/b&gt;"' in html
    # and said under the table as in report.md and on the console (a tooltip alone is missed)
    assert '<li class="bad">bad: 2 errors (every item); first: ValueError: &lt;b&gt;&#34;x&#34;&lt;/b&gt;</li>' in html
    clean = RunSummary(run_id="r", items=1, scored=1, metrics={"ok": MetricSummary(mean=1.0, n=1)})
    assert '<ul class="errors">' not in render_html(clean, ItemStats())


def test_an_html_breakdown_table_cut_short_says_where_the_rest_is() -> None:
    """It said "of 1250 group values" (the count's thousands not separated, as everywhere else)."""
    from orchestrator.reports.html import MAX_TABLE_ROWS, render_html
    from orchestrator.reports.itemstats import ItemStats
    from orchestrator.reports.plots import MAX_BARS

    m = MetricSummary(mean=0.5, n=1)
    many = {f"g{i}": {"exact_match": m} for i in range(1_250)}
    html = render_html(RunSummary(run_id="r", items=1_250, scored=1_250, metrics={"exact_match": m}, by_group=many),
                       ItemStats())  # fmt: skip
    assert f"g{MAX_TABLE_ROWS - 1}<" in html and f"g{MAX_TABLE_ROWS}<" not in html
    assert f"The first\n{MAX_TABLE_ROWS} of 1,250 group values; the rest are in summary.json." in html
    assert f"{MAX_BARS} of 1,250 group values drawn; the table and\nsummary.json have the rest." in html
    few = render_html(RunSummary(run_id="r", items=3, scored=3, metrics={"exact_match": m},
                                 by_group={"a": {"exact_match": m}}), ItemStats())  # fmt: skip
    assert "in summary.json" not in few


def test_a_report_md_breakdown_table_is_cut_short_to_fit_a_pull_request_comment() -> None:
    """report.md listed every group (up to 1,000): 400 groups of 4 outputs made a 58 KB report.md, 1,000 ~140 KB, past
    the 65,536 characters of a GitHub comment, so a CI job could not post it on its pull request."""
    from orchestrator.reports.markdown import MAX_MD_TABLE_ROWS

    m = MetricSummary(mean=0.5, n=1)
    many = {f"g{i}": {"exact_match": m, "mrr": m, "recall_at_1": m, "recall_at_5": m} for i in range(1_000)}
    summary = RunSummary(run_id="r", items=1_000, scored=1_000, metrics=many["g0"], by_group=many)
    md = render_markdown(summary)
    table = md.split("## By group\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(table) == 2 + MAX_MD_TABLE_ROWS and table[-1].startswith(f"| g{MAX_MD_TABLE_ROWS - 1} |")
    assert f"The first {MAX_MD_TABLE_ROWS} of 1,000 group values; the rest are in summary.json (`by_group`)." in md
    assert len(md) < 65_536
    few = render_markdown(RunSummary(run_id="r", items=1, scored=1, metrics={"exact_match": m},
                                     by_group={"a": {"exact_match": m}}))  # fmt: skip
    assert "the rest are in summary.json" not in few


def test_the_html_summary_names_the_interval_a_pass_fail_output_gets() -> None:
    """A 0/1 output's ci95 is Wilson's (aggregate.mean_ci), not a bootstrap: the page must not say otherwise."""
    import numpy as np

    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats
    from ragscore_workers.aggregate import mean_ci, wilson_ci

    ci = mean_ci(np.array([1.0, 1.0, 1.0]))
    assert ci == wilson_ci(3, 3) and ci[0] < 0.5  # 3 of 3 right: [0.44, 1], where a bootstrap says [1, 1]
    html = render_html(RunSummary(run_id="r", items=3, scored=3, metrics={"exact_match": MetricSummary(
        mean=1.0, n=3, ci95=ci)}), ItemStats())  # fmt: skip
    note = " ".join(html.split("95% CI of the mean:", 1)[1].split("</p>", 1)[0].split())
    assert note.startswith("the Wilson score interval for pass/fail outputs (every score 0 or 1)")


def test_the_judge_tables_show_no_cost_when_no_call_had_a_price() -> None:
    """report.md and report.html read "cost 0" for a model the price table lacks (the console says "cost -")."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    def judge_row(summary: RunSummary) -> dict[str, str]:
        lines = render_markdown(summary).splitlines()
        at = lines.index("## Judge")
        return dict(zip(_cells(lines[at + 2]), _cells(lines[at + 4]), strict=True))

    unpriced = RunSummary(run_id="r", items=1, scored=1, judge={"calls": 4, "cost": 0.0, "unpriced_calls": 4})
    assert judge_row(unpriced)["cost"] == "-"
    html = render_html(unpriced, ItemStats())
    assert (
        "<tr><th>calls</th><th>cost</th><th>unpriced_calls</th></tr>\n<tr><td>4</td><td>-</td><td>4</td></tr>" in html
    )
    priced = RunSummary(run_id="r", items=1, scored=1, judge={"calls": 4, "cost": 0.25, "unpriced_calls": 0})
    assert judge_row(priced)["cost"] == "0.2500"


def test_names_that_are_emphasis_or_math_to_a_markdown_viewer_render_as_written() -> None:
    """``__all__`` rendered as a bold "all" and ``_v2_`` as an italic "v2" (GitHub, GitLab); ``$5 and $10`` as math
    on GitHub. Underscores inside a word (``exact_match``) cannot be emphasis and stay unescaped, greppable."""
    import html
    import re

    from markdown_it import MarkdownIt

    m = MetricSummary(mean=0.5, n=1)
    names = ["__all__", "_v2_", "_é_", "snake_case_ok", "$5 and $10", "a__b"]
    text = render_markdown(RunSummary(run_id="r", items=6, scored=6, metrics={"exact_match": m},
                                      by_group={name: {"exact_match": m} for name in names}))  # fmt: skip
    assert "| exact_match |" in text and "| snake_case_ok |" in text
    assert r"\$5 and \$10" in text  # GitHub renders $...$ as math; \$ is a dollar there and in CommonMark
    rendered = MarkdownIt("commonmark").enable("table").render(text).split("<h2>By group</h2>", 1)[1]
    assert [html.unescape(c) for c in re.findall(r"<tr>\s*<td>(.*?)</td>", rendered)] == names


def test_report_md_report_html_and_the_console_write_the_judges_cost_alike() -> None:
    """report.md wrote the summed float as it was (``0.30000000000000004``, ``3e-05``), report.html ``0.3000`` and a
    free-looking ``0.0000``, the console ``0.3000`` and ``<0.0001``: one cost, three numbers."""
    from orchestrator.reports.console import judge_line
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    for cost, shown in ((0.1 + 0.2, "0.3000"), (0.00003, "<0.0001"), (2, "2.0000")):
        summary = RunSummary(run_id="r", items=1, scored=1, judge={"calls": 4, "cost": cost, "unpriced_calls": 0})
        lines = render_markdown(summary).splitlines()
        at = lines.index("## Judge")
        cost_cell = dict(zip(_cells(lines[at + 2]), _cells(lines[at + 4]), strict=True))["cost"]
        assert cost_cell.replace("\\<", "<") == shown  # "\<" renders "<"
        html = render_html(summary, ItemStats())
        assert "<tr><th>calls</th><th>cost</th><th>unpriced_calls</th></tr>\n" \
               f"<tr><td>4</td><td>{shown.replace('<', '&lt;')}</td><td>0</td></tr>" in html  # fmt: skip
        assert f"cost {shown}," in (judge_line(summary) or "") + ","


def test_report_md_marks_an_output_where_lower_is_better_as_report_html_does() -> None:
    """``answer_hallucination``'s 0.8 is bad: report.html said "(lower is better)" beside it, report.md did not."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    metrics = {"answer_hallucination": MetricSummary(mean=0.8, n=2), "exact_match": MetricSummary(mean=0.5, n=2)}
    summary = RunSummary(run_id="r", items=2, scored=2, metrics=metrics)
    rows = {line.split(" | ")[0] for line in render_markdown(summary).splitlines() if line.startswith("| ")}
    assert {"| answer_hallucination (lower is better)", "| exact_match"} <= rows
    assert "(lower is better)" in render_html(summary, ItemStats())


def test_a_judge_cost_of_null_in_a_summary_renders_as_no_cost() -> None:
    """A summary.json whose judge cost is null (hand-edited, or an older writer's) given to ``ragscore report``."""
    summary = RunSummary(run_id="r", items=1, scored=1, judge={"calls": 4, "cost": None, "unpriced_calls": 0})
    assert "| 4 | 0 | 0 |" in render_markdown(summary)


def test_an_at_or_a_hash_in_a_name_is_no_mention_issue_link_or_heading_end_on_github() -> None:
    """A system ``team @alice`` notified @alice where report.md was pasted (a PR comment, a job summary) and ``pr #12``
    linked issue 12: GitHub finds both in the rendered text, after Markdown's escapes are gone, so ``\\@`` does not
    help; an empty comment after the ``@`` / ``#`` splits the text it reads and shows nothing. A compare.md heading
    for a question ``q #`` lost its ``#`` (a closing sequence of the heading)."""
    import html
    import re

    from markdown_it import MarkdownIt

    from orchestrator.reports.markdown import md_cell

    m = MetricSummary(mean=0.5, n=1)
    names = ["team @alice", "pr #12", "gpt@home.ai", "C#", "@org/team", "q #"]
    text = render_markdown(RunSummary(run_id="r", items=6, scored=6, metrics={"hits@k": m},
                                      by_system={name: {"hits@k": m} for name in names}))  # fmt: skip
    rendered = MarkdownIt("commonmark").enable("table").render(text).split("<h2>By system</h2>", 1)[1]
    header = re.findall(r"<th>(.*?)</th>", rendered)[1]
    cells = [*re.findall(r"<tr>\s*<td>(.*?)</td>", rendered), header]
    assert [html.unescape(c.replace("<!-- -->", "")) for c in cells] == [*names, "hits@k"]  # shown as written
    read = [html.unescape(node) for cell in cells for node in cell.split("<!-- -->")]  # what GitHub's filters read
    assert not [node for node in read if re.search(r"(?:^|\W)@\w|#\d|\w@\w", node)]
    heading = MarkdownIt("commonmark").render(f"### {md_cell('q #')}\n")
    assert heading == "<h3>q #</h3>\n"


def test_counts_of_one_read_in_the_singular_in_report_md_and_report_html() -> None:
    """report.md said "1 items, 1 scored, 1 unreadable rows" and "1 questions answered by two or more systems"."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    m = MetricSummary(mean=1.0, n=1)
    wins = {"metric": "answer_accuracy", "questions": 1, "ties": 0,
            "by_system": {"a": {"compared": 1, "wins": 1.0, "outright": 1, "tied": 0, "win_rate": 1.0}}}  # fmt: skip
    summary = RunSummary(run_id="r", items=1, scored=1, failed_rows=1, metrics={"exact_match": m}, wins=wins)
    text = render_markdown(summary)
    assert "· 1 item, 1 scored, 1 unreadable row\n" in text
    assert "1 question answered by two or more systems" in text
    html = render_html(summary, ItemStats())
    assert "<span>1 item</span>" in html and "<span>1 unreadable row</span>" in html
    many = render_markdown(RunSummary(run_id="r", items=2, scored=2, failed_rows=2, metrics={"exact_match": m}))
    assert "· 2 items, 2 scored, 2 unreadable rows\n" in many


def test_report_md_lists_the_first_unreadable_rows_escaped_and_says_how_many_more() -> None:
    summary = RunSummary(run_id="r", items=1, scored=1, failed_rows=25, metrics={"ok": MetricSummary(mean=1.0, n=1)})
    failed = [{"line": n, "error": f"invalid JSON near <img src=x> | {n}"} for n in range(2, 22)]
    text = render_markdown(summary, failed_rows=failed)
    section = text.split("## Unreadable rows\n\n", 1)[1].split("\n## ", 1)[0]
    assert "| line 2 | invalid JSON near \\<img src=x\\> \\| 2 |" in section
    assert section.count("invalid JSON") == 20 and "… 5 more in failed_rows.jsonl." in section


def test_report_md_and_report_html_give_each_targets_limits_as_the_judges() -> None:
    """A target's ``rpm`` and ``pace: even`` were in no report, where the judge's are: each target with limits gets
    a line of them over the targets table (``system rag-v1 · rpm 60 · pace even``), its spans run together in the html
    as the judge's (no space between them beside their margin); one without says none."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    targets = [{"system": "rag<v1>", "url": "http://h/ask", "rpm": 60, "pace": "even"},
               {"system": "plain", "url": "http://h/ask", "pace": "burst"}]  # fmt: skip
    summary = RunSummary(run_id="r", items=2, scored=2, target={"rag<v1>": {"calls": 1}, "plain": {"calls": 1}})
    info = {"suite": {"metrics": ["verbatim"], "targets": targets}}
    report = render_markdown(summary, info)
    assert f"## Targets\n\n{TARGETS_NOTE}\n\nsystem rag\\<v1\\> · rpm 60 · pace even\n\n| system |" in report, report
    assert "system plain" not in report
    html = render_html(summary, ItemStats(), info)
    said = "<span>system <b>rag&lt;v1&gt;</b></span><span>rpm <b>60</b></span><span>pace <b>even</b></span></p>"
    assert said in html and "system <b>plain</b>" not in html
    lone = {"suite": {"metrics": ["verbatim"], "target": {"url": "http://h/ask", "rpm": 30}}}
    assert "system target · rpm 30" in render_markdown(
        RunSummary(run_id="r", items=1, scored=1, target={"target": {"calls": 1}}), lone
    )


def test_a_kappa_without_a_value_says_why_in_report_md_and_report_html() -> None:
    """Both judges gave every item the same one rating: 100 % agreement, and Cohen's kappa is undefined (chance
    agreement is 1). report.md showed a bare ``-`` beside 100 %, as for a metric no item was rated by both; the
    reports say why now, and keep ``-`` where no item was rated. Seen failing before the fix."""
    from orchestrator.reports.console import KAPPA_UNDEFINED
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    agreement = {"answer_accuracy": {"n": 12, "percent": 100.0, "kappa": None},
                 "groundedness": {"n": 0, "percent": None, "kappa": None},
                 "context_relevance_judge": {"n": 10, "percent": 70.0, "kappa": 0.4}}  # fmt: skip
    summary = RunSummary(run_id="r", items=12, scored=12, judge={"calls": 24, "agreement": agreement})
    rows = {line.split(" | ")[0].lstrip("| "): line for line in render_markdown(summary).splitlines()}
    assert rows["answer_accuracy"] == f"| answer_accuracy | 12 | 100.0% | {KAPPA_UNDEFINED} |"
    assert rows["groundedness"] == "| groundedness | 0 | - | - |"
    assert rows["context_relevance_judge"] == "| context_relevance_judge | 10 | 70.0% | 0.400 |"
    html = render_html(summary, ItemStats())
    assert f'<td class="l">answer_accuracy</td><td>12</td><td>100.0%</td>\n<td>{KAPPA_UNDEFINED}</td>' in html
    assert '<td class="l">groundedness</td><td>0</td><td>-</td>\n<td>-</td>' in html
    assert KAPPA_UNDEFINED == "n/a (every rating the same: chance agreement is 1)"


def test_a_worst_items_unsupported_sentences_are_quoted_on_one_line_cut_and_escaped_in_both_reports() -> None:
    """An answer sentence of 5,000 characters (kept cut to 200 in the item's details) spanning line breaks, holding
    Markdown, HTML and a mention: its quote in the why is one line of WHY_SENTENCE_CHARS, shown as written."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import WHY_SENTENCE_CHARS, ItemStats
    from ragscore_workers.store import RawItem

    hostile = ("<script>alert(1)</script> | @alice *x*\n\n   " * 125)[:200]
    details = {"sentences": 3, "threshold": 0.4, "best_cosines": [0.9, -0.12, 0.31], "unsupported": [hostile, "b"]}
    items = [RawItem(key=f"q{i}", meta={"id": f"q{i}"}, metrics={"answer_hallucination": {"score": s, "details": d}})
             for i, (s, d) in enumerate([(2 / 3, details), (0.0, {})])]  # fmt: skip
    stats = ItemStats().add_all(items)
    quote = " ".join(hostile.split())[: WHY_SENTENCE_CHARS - 1] + "…"
    assert stats.all_worst()[0].why == f'unsupported (best context cosine below 0.4): "{quote}" -0.12; "b" 0.31'
    summary = RunSummary(run_id="r", items=2, scored=2, metrics={"answer_hallucination": MetricSummary(mean=0.3, n=2)})
    [line] = [line for line in render_markdown(summary, stats=stats).splitlines() if line.startswith("| 1 | q0 |")]
    why = _cells(line)[6]
    said = 'unsupported (best context cosine below 0.4): "\\<script\\>alert(1)\\</script\\> \0 @<!-- -->alice'
    assert why.startswith(said), why
    assert "<script>" not in line and "\n" not in why and why.endswith('…" -0.12; "b" 0.31'), why
    html = render_html(summary, stats)
    assert "&#34;&lt;script&gt;alert(1)&lt;/script&gt; | @alice *x* &lt;script&gt;" in html and "<script>" not in html


def test_unsupported_sentences_of_a_metric_without_a_threshold_are_quoted_without_a_bound() -> None:
    """A plug-in metric writing ``unsupported`` with no ``threshold`` read ``best context cosine below None`` (and
    only its negative cosines were taken as the sentences' own)."""
    from orchestrator.reports.itemstats import ItemStats
    from ragscore_workers.store import RawItem

    for details, why in [
        ({"best_cosines": [0.9, -0.1, 0.2], "unsupported": ["a", "b"]}, 'unsupported: "a"; "b"'),
        ({"threshold": "high", "unsupported": ["a"]}, 'unsupported: "a"'),
        ({"threshold": 0.25, "best_cosines": [0.9, 0.1], "unsupported": ["a"]},
         'unsupported (best context cosine below 0.25): "a" 0.10'),
    ]:  # fmt: skip
        item = RawItem(key="q", meta={"id": "q"}, metrics={"plug_in": {"score": 0.0, "details": details}})
        assert ItemStats().add_all([item]).all_worst()[0].why == why


def test_the_judge_embedding_and_target_tables_write_counts_as_the_summary_tables_do() -> None:
    """docs/reports.md says every table writes counts with thousands separators; the judge, embeddings, agreement and
    target tables wrote ``1234567`` tokens beside a summary table's ``9,322`` (found by a read of the merged diff)."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    agreement = {"answer_accuracy": {"n": 12_000, "percent": 90.0, "kappa": 0.5}}
    summary = RunSummary(
        run_id="r", items=12_000, scored=12_000,
        judge={"calls": 24_000, "tokens_in": 1_234_567, "cost": 0.25, "unpriced_calls": 0, "agreement": agreement},
        embedding={"encoded": 16_640, "memory_hits": 51_472, "devices": {"cpu fp32": 1}},
        target={"bm25": {"calls": 12_000}},
    )  # fmt: skip
    text = render_markdown(summary)
    html = render_html(summary, ItemStats())
    for shown in ("24,000", "1,234,567", "16,640", "51,472", "12,000"):
        assert shown in text and shown in html, shown
    for raw in ("1234567", "24000", "16640", "51472"):
        assert raw not in text and raw not in html, raw
    assert "0.2500" in text  # the cost keeps its own format


def test_breakdown_tables_give_each_mean_its_95_ci_as_the_summary_does_and_n_a_under_two_scores() -> None:
    """The breakdowns (per group, system, question type, category) showed means with no interval, beside a summary
    table that has one: a group of 4 and a group of 400 read alike."""
    import io

    import numpy as np
    from rich.console import Console

    from orchestrator.reports.console import ci_text, print_summary
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats
    from ragscore_workers.aggregate import mean_ci

    scores = np.array([0.2, 0.9, 0.4, 0.7])
    four = MetricSummary(mean=float(scores.mean()), n=4, ci95=mean_ci(scores))
    one = MetricSummary(mean=1.0, n=1, ci95=mean_ci(np.array([1.0])))
    tree = {"many": {"mrr": four}, "solo": {"mrr": one}}
    summary = RunSummary(run_id="r", items=5, scored=5, metrics={"mrr": four}, by_group=tree, by_system=tree,
                         by_question_type=tree, by_category=tree)  # fmt: skip
    with_ci = f"0.550 {ci_text(four.ci95)} (n=4)"
    assert four.ci95 is not None and ci_text(four.ci95) != "-"
    md = render_markdown(summary)
    for dim in ("group", "system", "question_type", "category"):
        table = md.split(f"## By {dim}\n", 1)[1].split("\n\n", 1)[0]
        assert f"| many | {with_ci} |" in table and "| solo | 1.000 n/a (n=1) |" in table, table
    html = render_html(summary, ItemStats())
    assert html.count(f"<td>{with_ci}</td>") == 4 and html.count("<td>1.000 n/a (n=1)</td>") == 4
    out = io.StringIO()  # the console's table per system too
    print_summary(summary, Console(file=out, width=300))
    assert f"{with_ci} 1.000 n/a (n=1)" in " ".join(out.getvalue().replace("│", " ").split())


def test_report_md_and_report_html_say_under_the_judge_table_what_each_column_counts() -> None:
    """The judge table's columns were bare field names (``rate_limited``, ``unpriced_calls``, ``cost`` with no
    currency): a reader could not tell that ``calls`` holds the retries, that ``rate_limited`` is the 429s, nor in
    what ``cost`` is. Both reports now say it, in one line under the table, the same in each."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    judge = {"calls": 16, "retries": 8, "rate_limited": 2, "cost": 0.0, "unpriced_calls": 16}
    summary = RunSummary(run_id="r", items=1, scored=1, judge=judge)
    lines = render_markdown(summary).splitlines()
    legend = lines[lines.index("## Judge") + 6]
    assert legend.startswith("calls: requests sent, every attempt (retries included); "), legend
    assert "rate_limited: 429 replies" in legend and "cost: in the currency of the judge metrics' prices" in legend
    assert "unpriced_calls: calls of a model without a price" in legend and "tokens_in" not in legend
    assert f'<p class="muted">{unescape(legend)}</p>'.replace("'", "&#39;") in render_html(summary, ItemStats())


def test_the_reports_name_a_dataset_under_the_home_folder_from_tilde_not_the_home_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """report.html's run facts and the worst items' note (report.md's too) named the dataset by its absolute path,
    ``/home/alice/...``: a report sent as a mail attachment or kept as a CI artifact told the user's name and home
    layout. A dataset under the home folder is named from ``~`` (``~/data/qa.jsonl``); run_info.json keeps the path."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats, WorstItem
    from orchestrator.reports.texts import read_texts

    home = tmp_path / "alice"
    monkeypatch.setenv("HOME", str(home))
    info = {"dataset": str(home / "data" / "qa.jsonl"), "format": "jsonl"}
    summary = RunSummary(run_id="r", items=1, scored=1)
    html = render_html(summary, ItemStats(), info)
    assert "<td>~/data/qa.jsonl</td>" in html.replace('<td class="l">', "<td>") and str(home) not in html
    item = WorstItem(output="exact_match", score=0.0, key="q1", question_sha=None, id="q1", system=None, group=None,
                     passed=False, details="")  # fmt: skip
    note = read_texts(info, [item]).note or ""
    assert "the run's dataset ~/data/qa.jsonl is gone" in note and str(home) not in note, note


def test_a_dataset_under_the_home_folder_that_cannot_be_read_again_is_named_from_tilde_in_the_error_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst items' note named the dataset from ``~`` but appended the error reading it (an OSError's, or the
    loader's), whose text holds the absolute path (``/home/alice/data/qa.jsonl is a directory; ...``): the home folder
    the note hid was told anyway. The error's text names it from ``~`` too."""
    from orchestrator.reports.itemstats import WorstItem
    from orchestrator.reports.texts import read_texts

    home = tmp_path / "alice"
    monkeypatch.setenv("HOME", str(home))
    dataset = home / "data" / "qa.jsonl"
    dataset.mkdir(parents=True)  # there, yet no file to read: an error naming it
    item = WorstItem(output="exact_match", score=0.0, key="q1", question_sha=None, id="q1", system=None, group=None,
                     passed=False, details="")  # fmt: skip
    note = read_texts({"dataset": str(dataset), "format": "jsonl"}, [item]).note or ""
    assert "the run's dataset ~/data/qa.jsonl could not be read again (" in note, note
    assert "could not be read again (~/data/qa.jsonl " in note and str(home) not in note, note


def test_the_worst_items_other_scores_tell_an_errored_output_from_an_unscorable_one_in_both_reports() -> None:
    """A worst item's ``other scores`` wrote ``-`` both for an output whose metric failed on it (an error) and for one
    that could not score it (unscorable): report.md showed no error anywhere, so a reader took the failure for a
    missing reference. Both reports write ``error`` for the one and ``-`` for the other, and say so over the table."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import OTHERS_NOTE, ItemStats
    from ragscore_workers.store import RawItem

    metrics = {"exact_match": {"score": 0.0}, "faithfulness": {"score": None, "error": "judge: HTTP 500"},
               "mrr": {"score": None, "details": {"reason": "no gold_doc_id"}}, "f1": {"score": 0.25}}  # fmt: skip
    good = RawItem(key="q2", meta={"id": "q2"}, metrics={"exact_match": {"score": 1.0}})
    stats = ItemStats().add_all([RawItem(key="q1", meta={"id": "q1"}, metrics=metrics), good])
    summary = RunSummary(run_id="r", items=2, scored=2, metrics={"exact_match": MetricSummary(mean=0.5, n=2)})
    cell = "faithfulness error, mrr -, f1 0.250"
    report_md = render_markdown(summary, stats=stats)
    assert f"| {cell} |" in report_md and OTHERS_NOTE in report_md, report_md
    report_html = render_html(summary, stats)
    assert f'<td class="l">{cell}</td>' in report_html and OTHERS_NOTE in unescape(report_html)


def test_report_md_explains_the_targets_table_as_report_html_does() -> None:
    """report.html said over the targets table what its columns count (calls, cache hits, retries, 429s, questions
    failed for good, the breaker); report.md had the bare table. Both say it now, in the same words."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    summary = RunSummary(run_id="r", items=1, scored=1, target={"rag": {"calls": 3, "rate_limited": 1}})
    lines = render_markdown(summary).splitlines()
    note = lines[lines.index("## Targets") + 2]
    assert note.startswith("The systems under test asked before scoring: their calls, cache hits, retries, 429s"), note
    assert f'<p class="muted">{note}</p>' in render_html(summary, ItemStats())


def test_the_agreement_tables_of_report_md_and_report_html_have_the_same_headings() -> None:
    """report.md headed the agreement table's count ``rated by both``, report.html ``items rated by both``."""
    from orchestrator.reports.html import render_html
    from orchestrator.reports.itemstats import ItemStats

    agreement = {"answer_accuracy": {"n": 12, "percent": 75.0, "kappa": 0.5}}
    summary = RunSummary(run_id="r", items=12, scored=12, judge={"calls": 24, "agreement": agreement})
    lines = render_markdown(summary).splitlines()
    header = next(line for line in lines if line.startswith("| metric |") and "kappa" in line)
    md_headings = [cell.strip() for cell in header.strip("|").split("|")]
    html = unescape(render_html(summary, ItemStats()))
    html_row = re.search(r"<tr><th class=\"l\">metric</th>.*?</tr>", html.split("Agreement of the two judges")[1], re.S)
    assert html_row is not None
    assert md_headings == re.findall(r"<th[^>]*>([^<]*)</th>", html_row.group(0)), (md_headings, html_row.group(0))
    assert md_headings[1] == "items rated by both"
