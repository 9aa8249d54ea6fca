"""A suite written by a newer orchestrator, read by this worker (a cluster upgraded one part at a time): fields of its
targets this version does not know are ignored with one warning, its judge's refuse the judge's metrics (they may
change scores); bad values of known fields still fail."""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from ragscore_workers.schemas import Suite
from ragscore_workers.store import RunState, RunStore, decode_raw
from ragscore_workers.tasks import ask_target, score_chunk

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


def test_a_judge_setting_this_worker_does_not_know_fails_the_judges_items_saying_so_not_the_others(
    worker_store: RunStore,
) -> None:
    """A judge setting (a seed, a sampling knob) may change scores: a worker that would drop it must not judge the run
    otherwise than it asked. Its judge metrics' items fail naming the setting and what to do; the others are scored."""
    data, names = _newer_suite("http://127.0.0.1:9/exact/ask")
    data["metrics"] = [{"name": "exact_match"}, {"name": "answer_accuracy"}]
    suite_json, run_id = json.dumps(data), f"t-{uuid.uuid4().hex[:8]}"
    worker_store.create_run(run_id, {"state": RunState.RUNNING, "suite": suite_json})
    rows = [{"id": "q1", "question": "q?", "answer": "a", "reference": "a"}]
    assert score_chunk("cpu", run_id, suite_json, ["exact_match"], rows)["new"] == 1
    assert score_chunk("judge", run_id, suite_json, ["answer_accuracy"], rows)["new"] == 1
    scored = decode_raw("q1", worker_store.item_fields(run_id, ["q1"])[0]).metrics
    assert scored["exact_match"]["score"] == 1.0, scored
    said = scored["answer_accuracy"]["error"]
    assert re.search(rf"runs a ragscore older than the one that submitted the run: it does not know its judge "
                     rf"setting {re.escape(names[0])}, which may change the scores of answer_accuracy: upgrade this "
                     rf"worker, then resume", said), said  # fmt: skip


def test_a_bad_value_of_a_known_field_is_still_refused_beside_an_unknown_one() -> None:
    """The one error is the known field's: the unknown one beside it is ignored (a user's file is strict)."""
    data, _ = _newer_suite("http://127.0.0.1:9/exact/ask", attempts=0)
    with pytest.raises(
        ValidationError, match=r"targets\.0\.attempts\n  Input should be greater than or equal to 1"
    ) as info:
        Suite.stored(json.dumps(data))
    assert info.value.error_count() == 1, info.value
    with pytest.raises(ValidationError, match=r"targets\.0\.added_later_\w+\n  Extra inputs are not permitted"):
        Suite.model_validate(data)
