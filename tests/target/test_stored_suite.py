"""A suite written by a newer orchestrator, read by this worker (a cluster upgraded one part at a time): fields of its
judge and targets this version does not know are ignored with one warning; bad values of known fields still fail."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from ragscore_workers.schemas import Suite
from ragscore_workers.store import RunState, RunStore
from ragscore_workers.tasks import ask_target

from ..fakes import FakeRag
from ..fakes.fake_rag import questions

pytestmark = pytest.mark.integration


def _newer_suite(url: str, **target: Any) -> tuple[dict[str, Any], list[str]]:
    """A suite as a newer orchestrator stores it: every field this version knows, and one more in its judge and in its
    target (named afresh: a process warns of a name once); and those names as the warning gives them."""
    suite = Suite.model_validate({"metrics": ["verbatim"], "targets": [{"system": "exact", "url": url}]})
    data = suite.model_dump(mode="json")
    later = f"added_later_{uuid.uuid4().hex[:6]}"
    data["judge"][later] = 1
    data["targets"][0] |= {later: {"any": "value"}, **target}
    return data, [f"judge.{later}", f"targets[0].{later}"]


def test_a_target_task_whose_suite_has_fields_this_worker_does_not_know_asks_and_warns_once_naming_them(
    worker_store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker refused the whole run (``Extra inputs are not permitted``) when a newer orchestrator sent a target
    field it did not know yet (``max_429s`` to a worker older than it)."""
    caplog.set_level(logging.WARNING, logger="ragscore_workers.schemas")
    with FakeRag() as rag:
        data, names = _newer_suite(rag.url("exact"))
        suite_json = json.dumps(data)
        run_id = f"t-{uuid.uuid4().hex[:8]}"
        worker_store.create_run(run_id, {"state": RunState.RUNNING, "suite": suite_json})  # read back by the worker
        rows = questions(2)
        assert ask_target(run_id, suite_json, 0, 0, rows) == {"asked": 2, "new": 2}
        assert ask_target(run_id, suite_json, 0, 0, rows) == {"asked": 0, "new": 0}  # a redelivery: answered
        assert rag.calls["exact"] == 2
    warned = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].startswith("ignoring fields of the run's stored suite") and warned[0].endswith(", ".join(names))


def test_a_bad_value_of_a_known_field_is_still_refused_beside_an_unknown_one() -> None:
    data, _ = _newer_suite("http://127.0.0.1:9/exact/ask", attempts=0)
    with pytest.raises(ValidationError, match=r"targets\.0\.attempts\n  Input should be greater than or equal to 1"):
        Suite.stored(json.dumps(data))


def test_a_users_suite_file_is_still_read_strictly() -> None:
    """Only what a worker reads back is tolerant: a typo in a suite a user writes stays an error."""
    data, _ = _newer_suite("http://127.0.0.1:9/exact/ask")
    with pytest.raises(ValidationError, match=r"targets\.0\.added_later_\w+\n  Extra inputs are not permitted"):
        Suite.model_validate(data)
