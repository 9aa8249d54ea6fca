"""deploy/systemd: the example unit runs a ``ragscore worker`` line the command takes, logs to the journal at a level
Celery knows, stops warmly and keeps the broker password off its command line."""

from __future__ import annotations

import configparser
import re
import shlex

import typer

from orchestrator.cli import CELERY_LOGLEVELS, app
from ragscore_workers.app import QUEUE_LIMITS

from . import checks

UNIT = checks.ROOT / "deploy" / "systemd" / "ragscore-worker@.service"


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


def _exec_start() -> list[str]:
    return shlex.split(_unit()["Service"]["ExecStart"])


def test_the_unit_runs_ragscore_worker_with_options_it_takes() -> None:
    argv = _exec_start()
    assert checks.is_worker_command(argv) and argv[0].endswith("/ragscore"), argv
    command = typer.main.get_command(app).commands["worker"]  # type: ignore[attr-defined]
    known = {name for param in command.params for name in param.opts}
    assert [a for a in argv[2:] if a.startswith("-") and a not in known] == [], known
    assert argv[argv.index("--queues") + 1] == "%I"  # the instance's name unescaped: cpu\x2ccode is cpu,code


def test_the_unit_logs_at_a_level_celery_knows() -> None:
    argv = _exec_start()
    assert argv[argv.index("--loglevel") + 1].upper() in CELERY_LOGLEVELS


def test_the_unit_stops_warmly_within_its_stop_timeout() -> None:
    """SIGTERM to the main process only (pool processes finish their tasks), and systemd's own kill only after the
    longest stop ``ragscore worker`` takes by default (the longest hard time limit plus 30 s)."""
    service = _unit()["Service"]
    assert service["KillMode"] == "mixed"
    assert int(service["TimeoutStopSec"]) > max(hard for _, hard in QUEUE_LIMITS.values()) + 30


def test_the_unit_keeps_the_broker_password_off_its_command_line() -> None:
    service = _unit()["Service"]
    assert "--broker" not in _exec_start() and "EnvironmentFile" in service
    settings = [line for line in UNIT.read_text().splitlines() if not line.lstrip().startswith("#")]  # not comments
    assert not [line for line in settings if re.search(r"://[^/\s]*:[^@\s]*@", line)]
