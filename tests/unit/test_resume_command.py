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
