"""Where a run's reports go once a later run into their ``--out`` DIR moves them (:func:`.files.move_to_previous`):
``DIR/previous/RUN_ID/``, and where they are now."""

from __future__ import annotations

import json
import logging
import os
import re
from itertools import count
from pathlib import Path
from typing import Any

from ragscore_workers.commands import backticked

from ..terminal import resume_command

__all__ = ["PREVIOUS", "WRITTEN_AT", "lost_run", "moved_reports", "next_numbered", "run_named", "unwritten_reports"]

log = logging.getLogger(__name__)

#: The folder of a run's ``--out`` DIR where a new run moves the reports of the one before it
#: (:func:`.files.move_to_previous`): ``DIR/previous/RUN_ID/``.
PREVIOUS = "previous"

#: The field of a run.json holding when the run (or its last resume) began writing into that folder (seconds since
#: the epoch): of two copies of a run's reports, :func:`moved_reports` takes the one written last.
WRITTEN_AT = "written_at"


def moved_reports(folder: Path, run_id: str) -> Path:
    """Where the reports of run ``run_id`` written to ``folder`` are now: ``folder`` where its run.json (else its
    summary.json) names the run, else the folder of ``folder/previous/`` a later run into it moved them to
    (:func:`.files.move_to_previous`: RUN_ID, RUN_ID-2, ...; where a run into that one moved them on, its own; of two
    copies, the one written last, :func:`_written_at`, and said); ``folder`` where none holds them. The store of a
    run the moving run did not touch names ``folder`` until its resume."""
    if run_named(folder) == run_id:
        return folder
    found = [
        where for moved in _moved_named(folder, run_id) if run_named(where := moved_reports(moved, run_id)) == run_id
    ]
    if not found:
        return folder
    latest = max(found, key=_written_at)
    if len(found) > 1:
        copies = ", ".join(f"{where}/" for where in found)
        log.warning("%s/ holds %d copies of the reports of run %s (%s): %s/, the last written, is used",
                    folder / PREVIOUS, len(found), run_id, copies, latest)  # fmt: skip
    return latest


def _moved_named(folder: Path, run_id: str) -> list[Path]:
    """The folders of ``folder/previous/`` that :func:`.files.move_to_previous` names after run ``run_id`` (one
    listing: a number missing between them skips none), in their order; not a symbolic link (no loop); none where
    it cannot be read (a folder this user may not enter, a name too long: the store's refusal names ``folder``)."""
    named = _numbered(run_id)
    try:
        with os.scandir(folder / PREVIOUS) as entries:
            moved = [Path(e.path) for e in entries if named.fullmatch(e.name) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    return sorted(moved, key=lambda path: (len(path.name), path.name))


def _written_at(folder: Path) -> float:
    """When the reports in ``folder`` were written: its run.json's :data:`WRITTEN_AT` where it stores one (a move
    rewrites that file, keeping the field), else when its summary.json (else its run.json) was last modified; 0 where
    none can be read."""
    written = _recorded(folder / "run.json").get(WRITTEN_AT)
    if isinstance(written, (int, float)) and not isinstance(written, bool):
        return float(written)
    for name in ("summary.json", "run.json"):
        try:
            return (folder / name).stat().st_mtime
        except OSError:
            continue
    return 0.0


def run_named(out_dir: Path) -> str | None:
    """The run id that ``out_dir``'s run.json names, else its summary.json; None where neither names one."""
    for name in ("run.json", "summary.json"):
        run_id = _recorded(out_dir / name).get("run_id")
        if isinstance(run_id, str) and run_id and run_id == os.path.basename(run_id) and run_id not in (".", ".."):
            return run_id
    return None


def unwritten_reports(out_dir: Path) -> str | None:
    """Where ``out_dir`` is the --out DIR of a run that has not written its reports (its run.json names a run, it has
    no summary.json: interrupted, cut off), what to say: that run and the command that finishes it, or where its
    store lost it (run.json's ``lost``), that it must be run again (:func:`lost_run`); else None."""
    recorded = _recorded(out_dir / "run.json")
    run_id = recorded.get("run_id")
    if not isinstance(run_id, str) or (out_dir / "summary.json").exists():
        return None
    if lost := recorded.get("lost"):
        return lost_run(out_dir, run_id, str(lost))
    return (
        f"{out_dir} holds run {run_id}, which has not written its reports (interrupted?): finish it with "
        f"{backticked(resume_command(out_dir))}"
    )


def lost_run(out_dir: Path, run_id: str, lost: str) -> str:
    """What to say of run ``run_id``, whose ``out_dir``'s run.json says its store lost it (``lost``: why): it cannot
    be resumed, only run again."""
    return (
        f"{out_dir} names run {run_id}, which cannot be resumed: {lost}. Run it again with the same DATASET and "
        f"--suite (--out {out_dir} is free for it)"
    )


def _recorded(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; empty where there is none, or it cannot be read."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _numbered(base: str) -> re.Pattern[str]:
    """The names :func:`next_numbered` gives: ``base``, then ``base-2``, ``base-3``, ... (group 1: the number; none
    for ``base``), not ``base-1`` nor ``base-02``."""
    return re.compile(re.escape(base) + r"(?:-([2-9]|[1-9]\d+))?")


def next_numbered(folder: Path, base: str) -> str:
    """The first of ``base``, ``base-2``, ``base-3``, ... that no entry of ``folder`` is named (a file and a link too),
    from one listing of it, however many are taken. OSError where ``folder`` cannot be read."""
    named = _numbered(base)
    with os.scandir(folder) as entries:
        taken = {int(found[1] or 1) for e in entries if (found := named.fullmatch(e.name))}
    free = next(n for n in count(1) if n not in taken)
    return base if free == 1 else f"{base}-{free}"
