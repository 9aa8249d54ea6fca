"""Where a run's reports go once a later run into their ``--out`` DIR moves them (:func:`.files.move_to_previous`):
``DIR/previous/RUN_ID/``, and where they are now."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from itertools import count
from pathlib import Path

__all__ = ["PREVIOUS", "moved_reports", "numbered", "run_named"]

#: The folder of a run's ``--out`` DIR where a new run moves the reports of the one before it
#: (:func:`.files.move_to_previous`): ``DIR/previous/RUN_ID/``.
PREVIOUS = "previous"


def moved_reports(folder: Path, run_id: str) -> Path:
    """Where the reports of run ``run_id`` written to ``folder`` are now: ``folder`` where its run.json (else its
    summary.json) names the run, else the folder of ``folder/previous/`` a later run into it moved them to
    (:func:`.files.move_to_previous`: RUN_ID, RUN_ID-2, ...; where a run into that one moved them on, its own);
    ``folder`` where none holds them. The store of a run the moving run did not touch names ``folder`` until its
    resume."""
    if run_named(folder) != run_id:
        for moved in _moved_named(folder, run_id):
            if run_named(found := moved_reports(moved, run_id)) == run_id:
                return found
    return folder


def _moved_named(folder: Path, run_id: str) -> Iterator[Path]:
    """The folders of ``folder/previous/`` that :func:`.files.move_to_previous` names after run ``run_id``, in their
    order (not a symbolic link: no loop; none past one that cannot be read, as where none is there)."""
    for name in numbered(run_id):
        moved = folder / PREVIOUS / name
        try:
            if moved.is_symlink() or not moved.is_dir():
                return
        except OSError:  # a folder this user may not enter, a name too long: the store's refusal names ``folder``
            return
        yield moved


def run_named(out_dir: Path) -> str | None:
    """The run id that ``out_dir``'s run.json names, else its summary.json; None where neither names one."""
    for name in ("run.json", "summary.json"):
        try:
            run_id = json.loads((out_dir / name).read_text(encoding="utf-8")).get("run_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(run_id, str) and run_id and run_id == os.path.basename(run_id) and run_id not in (".", ".."):
            return run_id
    return None


def numbered(base: str) -> Iterator[str]:
    """``base``, then ``base-2``, ``base-3``, ..."""
    yield base
    for n in count(2):
        yield f"{base}-{n}"
