"""What the CLI's help and usage errors say matches what the commands do."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ..support import ROOT


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300"}
    env.pop("RAGSCORE_BROKER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT, env=env,
        timeout=120,
    )  # fmt: skip


def _said(result: subprocess.CompletedProcess[str]) -> str:
    return " ".join((result.stdout + result.stderr).replace("│", " ").split())


def test_worker_help_says_a_broker_is_required_as_the_worker_does() -> None:
    """``worker --help`` said ``--broker`` was "unset = embedded", while a worker without a broker exits 2."""
    helped, refused = _cli("worker", "--help"), _cli("worker", "-Q", "cpu")
    assert helped.returncode == 0, helped.stderr
    assert refused.returncode == 2 and "worker needs a broker" in _said(refused), refused.stderr
    said = _said(helped)
    assert "unset = embedded" not in said and "one of them is required" in said, said


def test_submit_help_says_a_broker_is_required_as_submit_does() -> None:
    """``submit --help`` said ``--broker`` was "unset = embedded", while submit without a broker exits 2."""
    helped, refused = (
        _cli("submit", "--help"),
        _cli("submit", "examples/quickstart/data.jsonl", "-s", "examples/quickstart/suite.yaml"),
    )
    assert helped.returncode == 0, helped.stderr
    assert refused.returncode == 2 and "submit needs a cluster" in _said(refused), refused.stderr
    said = _said(helped)
    assert "unset = embedded" not in said and "one of them is required" in said, said


def test_results_of_an_unknown_name_says_there_is_no_such_directory() -> None:
    said = _said(_cli("results", "nosuchdir"))
    assert "('nosuchdir': no directory of that name here)" in said, said


def test_flower_help_says_when_it_attaches_to_the_embedded_redis() -> None:
    said = _said(_cli("flower", "--help"))
    assert "only while an embedded run has it up" in said, said


def test_run_resume_refusing_an_option_names_every_option_it_takes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``run --resume DIR`` with a dataset said only --max-cost/--max-tokens and --rpm/--tpm/--rpd/--tpd may be
    given, while the gate options (--fail-under, --junit, ...) are taken too."""
    refused = _cli("run", str(tmp_path / "d.jsonl"), "--suite", str(tmp_path / "s.yaml"), "--resume", str(tmp_path))
    said = _said(refused)
    assert refused.returncode == 2, refused.stderr
    assert "drop DATASET, --suite, or start a new run without --resume" in said, said
    for option in ("--max-cost", "--rpm", "--tpd", "--fail-under", "--fail-on-regression", "--regression-tolerance",
                   "--junit", "--broker", "--quiet"):  # fmt: skip
        assert option in said, (option, said)


def test_every_option_of_run_is_refused_or_taken_by_a_resume() -> None:
    """A new ``run`` option is classified: refused with --resume (RESUME_REFUSES) or taken (RESUME_TAKES, which
    the refusal lists), so that the refusal keeps saying what is taken."""
    import typer.main

    from orchestrator.cli import RESUME_REFUSES, RESUME_TAKES, app

    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    names = {p.opts[0] if p.opts[0].startswith("-") else p.name.upper() for p in run.params}  # DATASET
    taken = {flag for flags in RESUME_TAKES.values() for flag in flags}
    # --resume itself; --dry-run, --out (but DIR itself) and --debug-on-fail are refused on their own
    others = {"--resume", "--dry-run", "--out", "--debug-on-fail"}
    assert names - {"--help"} == set(RESUME_REFUSES) | taken | others
    assert not set(RESUME_REFUSES) & taken


def test_run_resume_does_not_take_out_silently(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``run --resume DIR --out OTHER`` wrote the reports to DIR without a word, while the refusal of a dataset says
    only the options of RESUME_TAKES may be given with --resume."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(tmp_path / "old"), "--out",
         str(tmp_path / "new")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "--out" in said and "run.json not found" not in said, said


def test_a_usage_error_and_a_bad_input_error_start_alike() -> None:
    """click says "Error: No such option: ..." for a usage error; ragscore's own errors said "error: ...": two forms
    for the same kind of line, one exit code (2). Both say "Error:" now."""
    usage, bad_input = _cli("run", "--no-such-option"), _cli("worker", "-Q", "cpu")
    assert usage.returncode == 2 and "\nError: No such option: --no-such-option" in usage.stderr, usage.stderr
    assert bad_input.returncode == 2 and bad_input.stderr.startswith("Error: worker needs a broker"), bad_input.stderr


def test_cancel_says_one_held_item_in_the_singular() -> None:
    """`ragscore cancel` said "1 item of it (1 message) is held ... its summary is written without them"."""
    from orchestrator.cli import held_by_gone_workers
    from orchestrator.queues import Orphan

    one = held_by_gone_workers([Orphan(1000.0, "cpu", 1)])
    assert one.startswith("1 item of it (1 message) is held by a worker that is gone") and "without it," in one
    two = held_by_gone_workers([Orphan(1000.0, "cpu", 1), Orphan(1001.0, "cpu", 1)])
    assert two.startswith("2 items of it (2 messages) are held by a worker that is gone") and "without them," in two


def test_report_help_names_every_file_the_json_format_writes() -> None:
    """``report --help`` said ``--format json`` wrote "summary.json": it writes items.jsonl, failed_rows.jsonl and
    run_info.json beside it."""
    said = _said(_cli("report", "--help"))
    assert "summary.json, items.jsonl, failed_rows.jsonl and run_info.json (json" in said, said


def test_flags_show_in_help_as_taking_no_value() -> None:
    """Rich help showed every flag with a type, ``--quiet -q <bool>``, ``--help <bool>``: as if it took a value,
    while ``--quiet true`` is refused."""
    for command in (("run", "--help"), ("--help",)):
        helped = _cli(*command)
        assert helped.returncode == 0, helped.stderr
        assert "<bool>" not in helped.stdout and "--help" in helped.stdout, helped.stdout


def test_run_help_says_dataset_and_suite_are_required_unless_resume() -> None:
    """``run --help`` showed DATASET as optional and --suite as not required; a run without them is refused unless
    it is a --resume."""
    said, refused = _said(_cli("run", "--help")), _cli("run", "--quiet")
    assert refused.returncode == 2 and "run needs a DATASET and --suite (or --resume DIR)" in _said(refused)
    dataset, options = said.split("Arguments", 1)[1].split("--suite", 1)
    suite = options.split("--out", 1)[0]
    assert "Required unless --resume" in dataset, said
    assert "required unless --resume" in suite, said


def _ragged(lines: list[str], width: int = 0) -> list[str]:
    """Lines a greedy wrap would not have ended there: the next line's first word fits after them (within
    ``width``, else the widest line of the block)."""
    width = width or max((len(line.rstrip()) for line in lines), default=0)
    return [
        f"{line.rstrip()!r} / {after.split()[0]!r}" for line, after in zip(lines, lines[1:], strict=False)
        if line.strip() and after.strip() and len(line.rstrip()) + 1 + len(after.split()[0]) <= width
    ]  # fmt: skip


def _help_at_80(*args: str) -> list[str]:
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_help_paragraphs_reflow_at_80_columns() -> None:
    """A docstring's hard line breaks (at ~115 columns in the source) were kept in ``--help``: at 80 columns a line
    ended after one word (``--stop-timeout); a``) and the list of commands wrapped raggedly."""
    worker = _help_at_80("worker", "--help")
    prose = worker[: next(i for i, line in enumerate(worker) if line.startswith("╭"))]
    assert _ragged(prose) == [], "\n".join(worker)
    top = _help_at_80("--help")
    start = next(i for i, line in enumerate(top) if "Commands" in line)
    rows = [line[1:-1] for line in top[start + 1 :] if line.startswith("│")]
    column = re.match(r" \S+\s+", rows[0]).end()  # type: ignore[union-attr]  # where the help column starts
    cells: list[list[str]] = []
    for row in rows:  # a command's help: its name's row and the rows under it
        if row[:column].strip():
            cells.append([])
        cells[-1].append(row[column:])
    width = max(len(row[column:].rstrip()) for row in rows)
    assert [line for cell in cells for line in _ragged(cell, width)] == [], "\n".join(top)


def test_run_usage_line_says_dataset_and_suite_or_resume() -> None:
    """``run --help``'s usage line read ``run [OPTIONS] [DATASET]``: DATASET optional, while a run without it (and
    without --resume) is refused. It names the two ways to call run."""
    helped = _cli("run", "--help")
    assert helped.returncode == 0, helped.stderr
    lines = [line.strip() for line in helped.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("Usage:"))
    usage = " ".join(lines[start : lines.index("", start)])  # click wraps it at 80 columns
    assert usage.split(" run ", 1)[1].split() == "[OPTIONS] (DATASET --suite FILE | --resume DIR)".split(), usage


def test_the_list_of_commands_gives_each_one_line_and_its_help_the_whole_text() -> None:
    """``ragscore --help`` showed each command's whole first paragraph: ``resume`` and ``results`` ran to five lines
    of the list. Each has a one-line summary there (at 80 columns); ``CMD --help`` still says it all."""
    top = _help_at_80("--help")
    start = next(i for i, line in enumerate(top) if "Commands" in line)
    rows = [line[1:-1] for line in top[start + 1 :] if line.startswith("│")]
    names = [row.split()[0] for row in rows if row[:2] == " " + row.strip()[0]]  # a row that starts a command
    assert len(names) == len(rows) and "resume" in names and "results" in names, "\n".join(top)
    said = " ".join(" ".join(_help_at_80("resume", "--help")).replace("│", " ").split())
    assert "--max-cost / --max-tokens raise the run's judge budget" in said, said


def _commands() -> dict[str, object]:
    import typer.main

    from orchestrator.cli import app

    return typer.main.get_command(app).commands  # type: ignore[attr-defined,no-any-return]


def test_each_commands_line_in_the_list_is_its_docstrings_whole_first_line() -> None:
    """Each command's line in ``ragscore --help`` was a short_help written beside its docstring (two texts that
    could drift), and click cuts a long one with "..." (completions). The docstring's first line is the line now."""
    import inspect

    top = _cli("--help")
    assert top.returncode == 0, top.stderr
    rows = [line.strip("│ ") for line in top.stdout.split("Commands", 1)[1].splitlines() if line.startswith("│")]
    listed = dict(row.split(maxsplit=1) for row in rows)
    commands = _commands()
    assert set(listed) == set(commands), listed
    for name, command in commands.items():
        first = inspect.getdoc(command.callback).split("\n\n", 1)[0]  # type: ignore[attr-defined]
        assert "\n" not in first, (name, "the docstring's first paragraph is one line", first)
        assert listed[name] == first == command.get_short_help_str(), (name, listed[name], first)  # type: ignore[attr-defined]
        assert not listed[name].endswith("..."), listed[name]


def test_usage_lines_name_arguments_as_click_does() -> None:
    """``resume --help`` read ``resume [OPTIONS] {run_id}``, like a format placeholder left unfilled (typer's way
    for a required argument): it reads ``RUN_ID`` now, ``[RUN_ID]`` where optional, ``RUNS...`` for several."""
    from typer import _click

    usages = {name: command.get_usage(_click.Context(command, info_name=name)) for name, command in _commands().items()}  # type: ignore[attr-defined]
    assert usages["resume"] == "Usage: resume [OPTIONS] RUN_ID", usages
    assert usages["status"] == "Usage: status [OPTIONS] [RUN_ID]", usages
    assert usages["compare"] == "Usage: compare [OPTIONS] RUNS...", usages
    assert usages["report"] == "Usage: report [OPTIONS] RUN", usages
    assert [usage for usage in usages.values() if "{" in usage] == [], usages
    said = _cli("resume", "--help")  # as a user reads it
    assert said.returncode == 0 and " resume [OPTIONS] RUN_ID" in said.stdout, said.stdout


def test_help_tables_name_arguments_as_the_usage_line_does() -> None:
    """``resume --help``'s usage line read ``RUN_ID`` while its table of arguments read ``run_id``: every command's
    table names each argument as click's usage line does (``RUN_ID``, ``RUNS...``), and so does a missing one's
    error."""
    from typer.core import TyperArgument
    from typer.testing import CliRunner

    from orchestrator.cli import app

    runner, seen = CliRunner(), 0
    for name, command in _commands().items():
        arguments = [p for p in command.params if isinstance(p, TyperArgument)]  # type: ignore[attr-defined]
        if not arguments:
            continue
        helped = runner.invoke(app, [name, "--help"], env={"COLUMNS": "300"})
        assert helped.exit_code == 0, helped.output
        table = helped.output.split("─ Arguments ─", 1)[1].split("╰", 1)[0]
        names = [row.strip("│ ").removeprefix("*").split()[0] for row in table.splitlines()[1:] if row.strip()]
        assert names == [(p.name or "").upper() + ("..." if p.nargs != 1 else "") for p in arguments], (name, table)
        seen += 1
    assert seen >= 5, seen  # run, resume, status, compare, report, ...
    missing = runner.invoke(app, ["resume"], env={"COLUMNS": "300"})
    assert missing.exit_code == 2 and "Missing argument 'RUN_ID'" in missing.output, missing.output
