"""The command a message gives to finish a stopped run names its DIR as a shell takes it: the judge line under the
table quoted it, the other messages printed it raw (``ragscore run --resume my runs/a`` resumes ``my``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragscore_workers.errors import ConfigError


def _recorded(out: Path) -> Path:
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"run_id": "run-x", "mode": "embedded"}), encoding="utf-8")
    return out


def test_ctrl_c_says_the_resume_of_a_dir_holding_a_space_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import _how_to_go_on

    out = _recorded(tmp_path / "my runs")
    _how_to_go_on(out, None)
    said = " ".join(capsys.readouterr().err.split())
    assert f"`ragscore run --resume '{out}'`" in said, said


def test_an_unfinished_run_in_a_dir_holding_a_space_says_its_resume_quoted(tmp_path: Path) -> None:
    from orchestrator.runner import refuse_an_unfinished_run_in

    out = _recorded(tmp_path / "it's here")
    with pytest.raises(ConfigError) as refused:
        refuse_an_unfinished_run_in(out)
    assert f"""`ragscore run --resume '{tmp_path}/it'"'"'s here'`""" in str(refused.value), refused.value


def test_the_resume_of_a_run_started_with_broker_names_that_broker() -> None:
    """A run started with --broker URL was told to resume without it: the copied command resumed against the
    default (embedded) Redis, where the run is unknown."""
    from orchestrator.terminal import resume_command

    url = "redis://redis.internal:6379/2"
    assert resume_command("out", broker=url) == f"ragscore run --resume out --broker {url}"
    assert resume_command("my out", "run-x", url) == f"ragscore resume run-x --out 'my out' --broker {url}"
    assert resume_command("out", broker="redis://h/0?x=a b") == "ragscore run --resume out --broker 'redis://h/0?x=a b'"
    assert resume_command("out", "run-x") == "ragscore resume run-x --out out"  # RAGSCORE_BROKER_URL, or embedded


def test_the_resume_of_a_run_whose_broker_has_a_password_never_shows_it() -> None:
    """The password (in the URL, or a query's ``password=``) is never printed: a placeholder, and a word to put
    it back. The URL is set in RAGSCORE_BROKER_URL, not given as --broker, where ``ps`` shows it to every user (the
    command warned of that, of the very command it said)."""
    from orchestrator.terminal import resume_command

    for url, shown in (
        ("redis://:s3cret@redis.internal:6379/0", "redis://:***@redis.internal:6379/0"),
        ("rediss://admin:s3cret@h:6380/0?ssl_cert_reqs=required", "rediss://admin:***@h:6380/0?ssl_cert_reqs=required"),
        ("redis://h:6379/0?password=s3cret", "redis://h:6379/0?password=***"),
    ):
        said = resume_command("out", "run-x", url)
        assert "s3cret" not in said, said
        assert said == f"RAGSCORE_BROKER_URL='{shown}' ragscore resume run-x --out out", said


def test_a_hidden_password_is_told_outside_the_command_that_zsh_pastes() -> None:
    """The command ended in ``  # *** is its password: put it back``: an interactive zsh (macOS's shell) has no
    comments, so ``#`` went to ragscore as a word and ``***`` globbed (``zsh: no matches found: ***``). The word
    to put the password back is the message's, after the command's closing backtick."""
    from orchestrator.reports.live import resume_hint
    from orchestrator.terminal import results_command, resume_command
    from ragscore_workers.commands import backticked

    hidden = resume_command("out", "run-x", "redis://:s3cret@h:6379/0")
    assert "#" not in hidden, hidden
    assert backticked(hidden) == f"`{hidden}` (put its password back for `***`)"
    assert backticked(resume_command("out", "run-x", "redis://h:6379/0")).endswith("--broker redis://h:6379/0`")
    assert "#" not in results_command("run-x", "out", "redis://:s3cret@h:6379/0")
    hint = resume_hint("run-x", "redis://:s3cret@h:6379/0")
    assert hint.endswith("ragscore resume run-x --out DIR` (put its password back for `***`)") and "#" not in hint, hint


def test_the_results_command_names_the_out_and_the_broker_as_the_resume_does() -> None:
    """cancel and results with the broker down said `ragscore results RUN --out DIR`, without the --broker they were
    given (the command then asked RAGSCORE_BROKER_URL or the embedded Redis) nor the --out results was given."""
    from orchestrator.terminal import results_command

    assert results_command("run-x") == "ragscore results run-x --out DIR"
    assert results_command("run-x", Path("my out"), "redis://h:6379/2") == (
        "ragscore results run-x --out 'my out' --broker redis://h:6379/2"
    )
    said = results_command("run-x", None, "redis://:s3cret@h:6379/0")
    assert "s3cret" not in said and said.startswith("RAGSCORE_BROKER_URL='redis://:***@h:6379/0' ragscore results"), (
        said
    )


def test_ctrl_c_of_a_cluster_run_says_its_status_and_results_with_its_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run {id} goes on in the cluster: `ragscore status {id}`, then ...`: the status half left out the --broker the
    run was sent with (it then asked RAGSCORE_BROKER_URL or the embedded Redis, where the run is unknown)."""
    from orchestrator import connection
    from orchestrator.cli import _how_to_go_on

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 0.5)  # its state is not read: no Redis there
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"run_id": "run-x", "mode": "cluster"}), encoding="utf-8")
    broker = "redis://127.0.0.1:1/2"
    _how_to_go_on(out, broker)
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"`ragscore status run-x --broker {broker}`, then `ragscore results run-x --out {out} --broker {broker}`"
        in (said)
    ), said


SECRET_BROKER = "redis://:s3cret@redis.internal:6379/0"
HIDDEN = "RAGSCORE_BROKER_URL='redis://:***@redis.internal:6379/0'"
PUT_BACK = "(put its password back for `***`)"


def test_several_commands_backticked_say_the_password_word_once_after_them() -> None:
    """The commands of one message name one broker: the word to put its password back is said once, after the last
    command (a hand-written backtick said none for its command)."""
    from orchestrator.terminal import results_command, status_command
    from ragscore_workers.commands import backticked

    status, results = status_command("run-x", SECRET_BROKER), results_command("run-x", "out", SECRET_BROKER)
    assert backticked(status, results, joined=", then ") == f"`{status}`, then `{results}` {PUT_BACK}"
    assert backticked(status_command("run-x"), results_command("run-x")) == (
        "`ragscore status run-x` or `ragscore results run-x --out DIR`"
    )


def test_the_report_and_worker_commands_split_back_into_their_words() -> None:
    """`ragscore report DIR --out OUT` and `ragscore worker --queues Q` were written by hand, their words raw."""
    import shlex

    from orchestrator.terminal import report_command, worker_command

    assert shlex.split(report_command("my runs/a", "its reports")) == [
        "ragscore", "report", "my runs/a", "--out", "its reports"
    ]  # fmt: skip
    assert shlex.split(worker_command("embed,judge")) == ["ragscore", "worker", "--queues", "embed,judge"]
    assert shlex.split(worker_command("cpu", "redis://h:6379/0")) == [
        "ragscore", "worker", "--queues", "cpu", "--broker", "redis://h:6379/0"
    ]  # fmt: skip


def test_ctrl_c_of_a_cluster_run_with_a_passworded_broker_hides_it_in_both_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator import connection
    from orchestrator.cli import _how_to_go_on

    monkeypatch.setattr(connection, "CONNECT_RETRY_S", 0.5)  # its state is not read: no Redis there
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"run_id": "run-x", "mode": "cluster"}), encoding="utf-8")
    _how_to_go_on(out, "redis://:s3cret@127.0.0.1:1/2")
    said = " ".join(capsys.readouterr().err.split())
    hidden = "RAGSCORE_BROKER_URL='redis://:***@127.0.0.1:1/2'"
    assert "s3cret" not in said, said
    assert (
        f"goes on in the cluster: `{hidden} ragscore status run-x`, then `{hidden} ragscore results run-x --out {out}`"
        f" {PUT_BACK}" in said
    ), said


def test_a_wait_giving_up_on_redis_says_both_commands_of_a_passworded_broker(tmp_path: Path) -> None:
    import time

    from orchestrator.runner import _Outage
    from ragscore_workers.errors import BrokerError

    outage = _Outage("run-x", None, tmp_path, SECRET_BROKER)
    outage.since = time.monotonic() - 3600  # lost for long: it gives up at once
    with pytest.raises(BrokerError) as gave_up:
        outage.lost(ConnectionError("gone"))
    said = str(gave_up.value)
    assert "s3cret" not in said, said
    assert said.endswith(
        f"`{HIDDEN} ragscore status run-x`, then `{HIDDEN} ragscore results run-x --out {tmp_path}` {PUT_BACK}"
    ), said


def test_the_resume_hint_of_a_passworded_broker_hides_it_in_both_commands() -> None:
    from orchestrator.reports.live import resume_hint

    assert resume_hint("run-x", SECRET_BROKER) == (
        f"`{HIDDEN} ragscore run --resume DIR` (DIR: its --out) or `{HIDDEN} ragscore resume run-x --out DIR` "
        f"{PUT_BACK}"
    )


@pytest.mark.parametrize(
    ("mode", "resume"),
    [
        ("cluster", f"`{HIDDEN} ragscore run --resume {{out}}` {PUT_BACK}"),
        ("embedded", "`ragscore run --resume {out}`"),
    ],
)
def test_an_unfinished_run_in_the_dir_says_its_resume_with_the_broker_of_a_cluster_run(
    tmp_path: Path, mode: str, resume: str
) -> None:
    """A new cluster run into the DIR of an unfinished one said `ragscore run --resume DIR` without the --broker it
    was given (the resume then asked RAGSCORE_BROKER_URL or the embedded Redis, where that run is unknown). An
    embedded run's resume names none: given --broker, it would go to the cluster."""
    from orchestrator.runner import refuse_an_unfinished_run_in

    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"run_id": "run-x", "mode": mode}), encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        refuse_an_unfinished_run_in(out, SECRET_BROKER)
    said = str(refused.value)
    assert "s3cret" not in said and f"finish it with {resume.format(out=out)}, or give" in said, said


def test_a_report_of_an_unfinished_run_names_the_broker_it_was_read_with(store: object) -> None:
    """`ragscore report RUN --broker URL` of a run not finished said `ragscore status RUN --watch` and `ragscore
    resume RUN`, the store's own words, without the --broker (nor the --out a resume needs)."""
    from orchestrator.reports import open_run
    from ragscore_workers.errors import StoreError

    broker = "redis://redis.internal:6379/2"
    store.create_run("run-open", {"state": "running"})  # type: ignore[attr-defined]
    with pytest.raises(StoreError) as refused:
        open_run("run-open", lambda: store, broker)  # type: ignore[arg-type, return-value]
    assert f"follow it with `ragscore status run-open --watch --broker {broker}`" in str(refused.value), refused.value


@pytest.mark.parametrize("state", ["cancelled", "running", "failed"])
def test_a_report_of_an_unfinished_run_of_a_passworded_broker_says_to_put_the_password_back_once(
    store: object, state: str
) -> None:
    """A cancelled run without its summary names two commands (its status, then its resume): each said its own
    "(put its password back for `***`)", twice in one message. Said once, after both, as backticked says it after
    several commands; a message naming one command says it once too."""
    from orchestrator.reports import open_run
    from ragscore_workers.errors import StoreError

    store.create_run("run-open", {"state": state})  # type: ignore[attr-defined]
    with pytest.raises(StoreError) as refused:
        open_run("run-open", lambda: store, SECRET_BROKER)  # type: ignore[arg-type, return-value]
    said = str(refused.value)
    assert "s3cret" not in said and said.count("(put its password back for `***`)") == 1, said


def test_the_resume_of_a_run_the_broker_lacks_says_the_status_listing_its_runs_with_that_broker(
    redis_server: object, tmp_path: Path
) -> None:
    """`ragscore resume RUN --broker URL` of a run the broker does not have said "`ragscore status` lists the runs
    this broker has", without the --broker: pasted, it listed RAGSCORE_BROKER_URL's runs, or the embedded Redis's."""
    from orchestrator.cli import resume_cmd

    url = redis_server.url  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as refused:
        resume_cmd("20260101-000000-abcdee", out=tmp_path / "out", broker=url, quiet=True)
    assert f"`ragscore status --broker {url}` lists the runs this broker has" in str(refused.value), refused.value


def test_terminals_public_names_are_defined_there_and_the_backticks_have_one_home() -> None:
    """terminal listed backticked and password_note, ragscore_workers.commands' own, in its __all__: one function,
    two import paths (password_note not even used in terminal)."""
    import inspect

    from orchestrator import terminal
    from ragscore_workers import commands

    for name in terminal.__all__:
        value = getattr(terminal, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert value.__module__ == terminal.__name__, f"terminal.__all__ lists {name} of {value.__module__}"
    assert not set(terminal.__all__) & set(commands.__all__)
