"""JUnit XML of a gated run, so CI systems list what failed; its counts agree with the exit code.

The file holds the test suite ``ragscore.gates``: one test case per gate (``exact_match=0.8``,
``mrr:ci_low=0.5``, ``recall_at_5:regression``), failed when the gate did not hold; this is what decides the exit
code. A run that exits 1 whatever its gates (see ``gates.incomplete``) adds an ``<error>`` case ``run``.

Asked for (``--junit-items``), a second suite ``ragscore.items``: one test case per item x gated metric output
(classname ``ragscore.<metric>``, name the item key, ``system::id`` when several systems answered). The per-item
bar is the metric's strictest gate threshold among the gates on every item and those on the item's system
(``METRIC@SYSTEM=VALUE``); an output gated only for other systems gets no case for the item. An item scoring below
it (above it, where lower is better) is a ``<failure>``; an item whose metric raised is an ``<error>``; an
unscorable item (it lacks what the metric needs) or one the metric did not score is ``<skipped>``: unscorable is
never counted as 0, in the gates or here. CI test reporters count every ``<failure>`` in the file whatever its
suite (GitLab reads the classname, not the suite), so these item failures show on a job whose gates (means and
bounds) hold and that exits 0: that is why they are not written by default.

Items are streamed from ``items.jsonl`` (one pass; the item cases go through a temporary file so the
suite's counts can lead), so the file can be written for runs of any size.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO
from xml.sax.saxutils import escape, quoteattr

from ragscore_workers.metrics.registry import higher_is_better
from ragscore_workers.schemas import item_key, unscorable_reason

from .atomic_file import atomic_writer, link_target
from .gates import GateResult, apart, holds, thresholds_by_metric

__all__ = ["DETAIL_CHARS", "classify", "write_junit"]

#: Characters of an item's details kept in a failure's body.
DETAIL_CHARS = 2000
#: Characters XML 1.0 cannot carry (control characters, lone surrogates, U+FFFE/FFFF).
_INVALID_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

Status = Literal["passed", "failure", "error", "skipped"]


def _clean(text: str) -> str:
    return _INVALID_XML.sub("\ufffd", text)


def _attr(text: str) -> str:
    return quoteattr(_clean(text))


def classify(result: Mapping[str, Any] | None, threshold: float, lower_better: bool = False) -> tuple[Status, str]:
    """An item's status for one gated metric, and a one-line message."""
    if result is None:
        return "skipped", "not scored by this metric"
    if result.get("error") is not None:
        return "error", str(result["error"])
    score = result.get("score")
    if score is None:
        return "skipped", f"unscorable: {unscorable_reason(result)}"
    shown, bound = apart(score, threshold)
    if lower_better:
        if not holds(score, threshold, lower_better=True):
            return "failure", f"score {shown} > {bound} (lower is better)"
        return "passed", f"score {shown} <= {bound} (lower is better)"
    if not holds(score, threshold):
        return "failure", f"score {shown} < {bound}"
    return "passed", f"score {shown} >= {bound}"


def _item_key(item: Mapping[str, Any]) -> str:
    return item_key(item.get("system"), item["id"])


def _case(classname: str, name: str, seconds: float, status: Status, message: str, body: str = "") -> str:
    head = f'  <testcase classname={_attr(classname)} name={_attr(name)} time="{seconds:.6f}"'
    if status == "passed":
        return head + "/>\n"
    tag = status
    inner = f">{escape(_clean(body))}</{tag}>" if body else "/>"
    return f"{head}>\n    <{tag} message={_attr(message)}{inner}\n  </testcase>\n"


def _gate_case(result: GateResult) -> tuple[Status, str]:
    threshold = f"{result.threshold:.4g}"
    if result.actual is not None:
        actual, threshold = apart(result.actual, result.threshold)
    else:
        actual = result.no_value if result.n == 0 else f"none ({result.no_value})"
    where = result.bound
    if result.baseline is not None:
        where += f" (baseline {result.baseline:.4g})"
    if result.cannot_fail:
        where += f" ({result.cannot_fail})"
    verdict = result.comparison
    return ("passed" if result.passed else "failure"), f"{where} {actual} {verdict} {threshold}"


def _suite_open(name: str, counts: Counter[str]) -> str:
    tests = sum(counts.values())
    return (
        f'<testsuite name={_attr(name)} tests="{tests}" failures="{counts["failure"]}" '
        f'errors="{counts["error"]}" skipped="{counts["skipped"]}">\n'
    )


def _item_cases(tmp: TextIO, items_path: Path, gates: Sequence[GateResult]) -> Counter[str]:
    """Write one case per item x gated metric output of ``items_path`` to ``tmp``; returns their counts."""
    bars: dict[str | None, dict[str, float]] = {}  # per system: the gated outputs and their bars
    counts: Counter[str] = Counter()
    with items_path.open(encoding="utf-8") as items:
        for line in items:
            item = json.loads(line)
            key = _item_key(item)
            system = item.get("system")
            if system not in bars:
                bars[system] = thresholds_by_metric(gates, system)
            for metric, threshold in bars[system].items():
                result = item.get("metrics", {}).get(metric)
                status, message = classify(result, threshold, not higher_is_better(metric))
                counts[status] += 1
                body = ""
                if result is not None and status in ("failure", "error"):
                    body = json.dumps(result.get("details") or {}, ensure_ascii=False)[:DETAIL_CHARS]
                seconds = (result or {}).get("ms", 0.0) / 1000
                tmp.write(_case(f"ragscore.{metric}", key, seconds, status, message, body))
    return counts


def write_junit(
    path: Path,
    items_path: Path,
    gates: Sequence[GateResult],
    run_name: str = "ragscore",
    run_error: str | None = None,
    items: bool = False,
) -> Counter[str]:
    """Write the JUnit file for these gate results (and, with ``items``, the run's ``items.jsonl``); returns the
    item counts (empty without ``items``).

    ``run_error``: why the run is no result to pass whatever its gates (``ragscore run`` exits 1): an ``<error>``
    case ``ragscore.gates`` / ``run``, so the CI's test report does not read all green for a failed job."""
    path = link_target(path, "--junit")  # a link named: its target is written, the link kept
    gate_counts: Counter[str] = Counter()
    gate_cases = []
    if run_error is not None:
        gate_counts["error"] += 1
        gate_cases.append(_case("ragscore.gates", "run", 0.0, "error", run_error))
    for g in gates:
        status, message = _gate_case(g)
        gate_counts[status] += 1
        gate_cases.append(_case("ragscore.gates", g.label, 0.0, status, message))
    path.parent.mkdir(parents=True, exist_ok=True)
    if not items:
        _write_file(path, run_name, gate_counts, gate_cases)
        return Counter()
    # the item cases are spooled (an anonymous file beside the report, gone once closed) so their counts can lead
    with tempfile.TemporaryFile("w+", encoding="utf-8", prefix=".junit-", dir=path.parent) as spool:
        counts = _item_cases(spool, items_path, gates)
        spool.seek(0)
        _write_file(path, run_name, gate_counts, gate_cases, (counts, spool))
    return counts


def _write_file(
    path: Path,
    run_name: str,
    gate_counts: Counter[str],
    gate_cases: Sequence[str],
    item_suite: tuple[Counter[str], TextIO] | None = None,
) -> None:
    """The JUnit file itself, written atomically: the gates' suite and, given, the items' (its counts, its cases)."""
    item_counts, item_cases = item_suite or (Counter(), None)
    total = gate_counts + item_counts
    with atomic_writer(path) as out:
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        out.write(
            f'<testsuites name={_attr(run_name)} tests="{sum(total.values())}" failures="{total["failure"]}" '
            f'errors="{total["error"]}" skipped="{total["skipped"]}">\n'
        )
        out.write(_suite_open("ragscore.gates", gate_counts))
        out.writelines(gate_cases)
        out.write("</testsuite>\n")
        if item_cases is not None:
            out.write(_suite_open("ragscore.items", item_counts))
            for chunk in iter(lambda: item_cases.read(1 << 16), ""):
                out.write(chunk)
            out.write("</testsuite>\n")
        out.write("</testsuites>\n")
