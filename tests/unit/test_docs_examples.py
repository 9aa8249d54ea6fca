"""What the docs show a user to copy holds: their suites and checks points load, the option values a benchmark's
synopsis gives are that benchmark's defaults, each ``ragscore CMD ...`` names options CMD takes, and the suite errors
docs/cli.md quotes are the ones said."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.suite import load_suite

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md", ROOT / "bench" / "README.md"]


def _blocks() -> list[tuple[str, Any]]:
    """Every fenced yaml / json block of the docs that is a suite (has ``metrics``) or a checks point (``type``)."""
    found = []
    for doc in DOCS:
        for number, match in enumerate(re.finditer(r"```(?:yaml|json)\n(.*?)```", doc.read_text(), re.S), 1):
            data = yaml.safe_load(match.group(1))
            if isinstance(data, dict) and ("metrics" in data or "type" in data):
                found.append((f"{doc.relative_to(ROOT)}#{number}", data))
    return found


BLOCKS = _blocks()


def test_the_docs_show_suites_and_points() -> None:
    assert len(BLOCKS) >= 5, [where for where, _ in BLOCKS]


@pytest.mark.parametrize("data", [data for _, data in BLOCKS], ids=[where for where, _ in BLOCKS])
def test_a_suite_or_checks_point_the_docs_show_loads(data: dict[str, Any]) -> None:
    if "metrics" in data:
        load_suite(data)
        return
    # A point naming others it depends on is shown alone: they are stood in for by a plain keyword point.
    others = [{"id": d, "type": "keyword", "params": {"keywords": ["x"]}} for d in data.get("depends_on", [])]
    load_suite({"metrics": [{"name": "checks", "params": {"points": [*others, data]}}]})


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _bench_defaults(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``--option -> default`` of ``python -m bench.NAME``, read from its own parser (nothing is run)."""

    def parse_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        raise _Parsed(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
    with pytest.raises(_Parsed) as parsed:
        importlib.import_module(f"bench.{name}").main()
    return {opt: action.default for action in parsed.value.parser._actions for opt in action.option_strings}


SYNOPSES = sorted(
    {
        (m.group(1), m.group(2))
        for doc in DOCS
        for m in re.finditer(r"`python -m bench\.(\w+) ((?:\[[^\]]+\] ?)+)`", doc.read_text())
    }
)


def test_the_docs_show_benchmark_synopses() -> None:
    assert {name for name, _ in SYNOPSES} >= {"cpu", "judge", "embed", "sandbox", "scale"}


@pytest.mark.parametrize(("name", "synopsis"), SYNOPSES)
def test_a_benchmark_synopsis_gives_its_defaults(name: str, synopsis: str, monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = _bench_defaults(name, monkeypatch)
    for option in re.findall(r"\[([^\]]+)\]", synopsis):
        flag, *values = option.split()
        assert flag in defaults, f"bench.{name} has no option {flag}"
        if not values:
            continue
        default = defaults[flag]
        if default in (None, [], "") and all(v.isupper() or v == "..." for v in values):
            continue  # an option with no default shows its metavar: ``[--add METRIC ...]``
        shown = " ".join(map(str, default)) if isinstance(default, list) else str(default)
        assert " ".join(values) == shown, f"bench.{name}: the docs say [{option}], its default is {shown}"


def _readme_exit_codes() -> dict[int, str]:
    """The rows of the README's "Exit codes" table: code -> meaning."""
    section = (ROOT / "README.md").read_text().split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", section, re.M)}


def test_the_readmes_exit_codes_are_the_ones_the_cli_exits_with() -> None:
    """The table lists each code :mod:`orchestrator.cli` exits with (its ``EXIT_*``, and 0), no other; an unknown
    option is bad input (click's usage error exits 2, as the table says)."""
    import click

    from orchestrator import cli

    codes = {0} | {value for name, value in vars(cli).items() if name.startswith("EXIT_")}
    documented = _readme_exit_codes()
    assert set(documented) == codes, documented
    assert click.UsageError("x").exit_code == cli.EXIT_BAD_INPUT and "unknown metric or option" in documented[2]
    assert "Ctrl-C" in documented[cli.EXIT_INTERRUPTED] and "gate" in documented[cli.EXIT_GATE_FAILED]


@pytest.mark.parametrize("doc", ["README.md", "docs/cli.md"])
def test_the_docs_pool_defaults_name_every_queue_and_its_threads(doc: str) -> None:
    """The sentence giving ``ragscore worker``'s pool defaults names each queue of ``POOL_DEFAULTS`` (the README's
    left out the target queue), with the thread count of a threads pool."""
    from orchestrator.workers import POOL_DEFAULTS

    text = " ".join((ROOT / doc).read_text().split())
    sentence = text.split("with that queue's pool defaults (", 1)[1].split("). ", 1)[0]
    named = set(re.findall(r"(\w+)(?:/(\w+))?: ", sentence))
    queues = {queue for pair in named for queue in pair if queue}
    assert set(POOL_DEFAULTS) <= queues, sentence
    for queue, spec in POOL_DEFAULTS.items():
        if spec.pool == "threads":
            assert f"{queue}: {spec.concurrency} threads" in sentence, queue


def test_settings_md_lists_every_setting_and_judge_variable() -> None:
    """docs/settings.md lists each setting (``RAGSCORE_*``) and each variable the judge workers read: its base URL
    override, the Groq SDK's, each provider's key. A variable the code reads and the table lacks fails here."""
    from ragscore_workers.providers.factory import BASE_URL_ENV, PROVIDERS, judge_key_env
    from ragscore_workers.providers.groq_sdk import SDK_BASE_URL_ENV
    from ragscore_workers.schemas import JudgeConfig
    from ragscore_workers.settings import Settings

    prefix = Settings.model_config["env_prefix"]
    names = {f"{prefix}{field}".upper() for field in Settings.model_fields}
    names |= {BASE_URL_ENV, SDK_BASE_URL_ENV, *(judge_key_env(JudgeConfig(provider=p)) for p in PROVIDERS)}
    first_cells = re.findall(r"^\| ([^|]+) \|", (ROOT / "docs" / "settings.md").read_text(), re.M)
    listed = {name for cell in first_cells for name in re.findall(r"`([A-Z0-9_]+)`", cell)}
    assert sorted(names - listed) == []


def _shown_command_lines() -> list[tuple[str, str]]:
    """``(command, its arguments)`` of each ``ragscore COMMAND ...`` the docs show: a line of a bash block (its
    comment left out, continuation lines joined) or a code span."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = [block.replace("\\\n", " ") for block in re.findall(r"```bash\n(.*?)```", text, re.S)]
        lines = [line.split(" #")[0] for block in blocks for line in block.splitlines()]
        spans = re.findall(r"`([^`\s]*ragscore [^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
        for line in lines + spans:
            for command in re.split(r"\s(?:[|;]|&&)\s", line):
                found += re.findall(r"(?<![\w-])ragscore (\w+)(.*)", command)
    return found


SHOWN = _shown_command_lines()


def test_the_docs_show_command_lines() -> None:
    assert {command for command, _ in SHOWN} >= {"run", "resume", "submit", "status", "results", "worker", "compare"}


def test_each_command_line_the_docs_show_names_only_options_its_command_takes() -> None:
    """A ``ragscore CMD ...`` in the docs names an existing command (or the placeholder ``CMD``) and only options of
    that command; ``flower`` passes any other option on to Flower."""
    import typer.main

    from orchestrator.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    wrong = []
    for name, arguments in SHOWN:
        if name in ("CMD", "flower"):
            continue
        if name not in commands:
            wrong.append(f"ragscore {name}: no such command")
            continue
        takes = {"--help"} | {opt for param in commands[name].params for opt in [*param.opts, *param.secondary_opts]}
        options = re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", arguments)
        wrong += [f"ragscore {name}{arguments}: {option}" for option in options if option not in takes]
    assert wrong == []


#: Each ``python -m tests.fakes.fake_provider ...`` the docs show (docs/judge.md's local judge): its options.
FAKE_PROVIDER_LINES = sorted(
    {
        m.group(1)
        for doc in DOCS
        for m in re.finditer(r"python -m tests\.fakes\.fake_provider([^`&#\n]*)", doc.read_text())
    }
)


def test_each_fake_provider_command_line_the_docs_show_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/judge.md starts the fake provider by hand to try a judge locally: the options it shows are the server's
    own (parsed by its parser, nothing started)."""
    from tests.fakes import fake_provider

    assert FAKE_PROVIDER_LINES, "docs/judge.md shows how to start the fake provider"
    for arguments in FAKE_PROVIDER_LINES:
        with pytest.raises(_Parsed):
            monkeypatch.setattr(argparse.ArgumentParser, "parse_args", _parsed_strictly(arguments.split()))
            fake_provider.main()


def _parsed_strictly(argv: list[str]) -> Any:
    """A stand-in for ``ArgumentParser.parse_args`` that parses ``argv`` (an unknown option fails the test, as
    argparse exits 2) and then stops the program before it starts anything."""
    real = argparse.ArgumentParser.parse_args

    def parse_args(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        real(self, argv)
        raise _Parsed(self)

    return parse_args


#: Suites holding the mistakes whose messages docs/cli.md's "The suite file" quotes.
MISTAKEN_SUITES: list[dict[str, Any]] = [
    {"metrics": ["exact_mach", {"name": "rubric_judge", "params": {"bogus": 1}}]},
    {"metrics": ["exact_mach", {"name": "recall_at_k", "params": {"k": ["x"]}}]},
    {"metrics": ["exact_match"], "judge": {"rmp": 30}},
    {"metrics": [{"name": "exact_match", "param": {}}]},
    {"metrics": ["exact_match - mrr"]},
    {"metrics": ["exact_match", "recall_at_k", "exact_match"]},
    {"metrics": [(base := {"name": "recall_at_k"}), "exact_match", base]},  # the same dict twice: YAML's *id001
    {"metrics": [{"name": "context_sufficiency", "params": {"threshold": "high"}}]},
    # the same params twice (YAML's &id001 / *id001), which the second metric does not take
    {"metrics": [{"name": "answer_accuracy", "params": (p := {"max_cost": 1})}, {"name": "verbatim", "params": p}]},
]
#: The anchors docs/cli.md names, in the order of the suites above that alias one: YAML's dump names each ``id001``.
ANCHOR_NAMES = ("base", "p")


def test_the_suite_errors_cli_md_quotes_are_the_ones_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message (a code span with a space) of docs/cli.md's "The suite file" is part of what loading one of
    :data:`MISTAKEN_SUITES` says, as a dict or written to ``t.yaml``, its closing ``...`` standing for the rest (it
    showed ``metrics item 2 (recall_at_k).params.k item 1: ...``, where the message is ``...: Bad params: k item 1:
    ...``)."""
    from ragscore_workers.errors import ConfigError

    section = (ROOT / "docs" / "cli.md").read_text().split("\n### The suite file\n", 1)[1].split("\n## ", 1)[0]
    quoted = [" ".join(span.split()).removesuffix("...").strip() for span in re.findall(r"`([^`]+)`", section)]
    monkeypatch.chdir(tmp_path)
    said, anchors = [], iter(ANCHOR_NAMES)
    for suite in MISTAKEN_SUITES:
        text = yaml.safe_dump(suite)
        Path("t.yaml").write_text(text.replace("id001", next(anchors)) if "&id001" in text else text)
        for given in (suite, Path("t.yaml")):
            with pytest.raises(ConfigError) as info:
                load_suite(given)
            said.append(" ".join(str(info.value).split()))
    assert [quote for quote in quoted if " " in quote and not any(quote in text for text in said)] == []


@pytest.mark.parametrize(
    ("doc", "heading"), [("README.md", "## The reports"), ("docs/reports.md", "# Reports and comparisons")]
)
def test_the_report_tables_name_every_file_a_run_writes(doc: str, heading: str) -> None:
    """The table of a run's ``--out`` DIR lists each file of ``OUTPUT_NAMES`` (both left out ``answers.jsonl``,
    which a target run writes, and reports.md ``run.json``)."""
    from orchestrator.reports.files import OUTPUT_NAMES

    section = (ROOT / doc).read_text().split(f"{heading}\n", 1)[1].split("\n## ", 1)[0]
    listed = {name for cell in re.findall(r"^\| ([^|]+) \|", section, re.M) for name in re.findall(r"`([^`]+)`", cell)}
    assert sorted(OUTPUT_NAMES - listed) == []
