"""``ragscore run --dry-run``: judge calls, tokens, cost and least time counted from the rows, nothing sent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.estimate import PLACEHOLDER, estimate_run
from orchestrator.suite import load_suite
from ragscore_workers.metrics._judge_text import ANSWER_ACCURACY
from ragscore_workers.providers.base import estimate_tokens
from ragscore_workers.store import RunStore

from ..support import ROOT, write_jsonl

PRICE = (0.05, 0.08)  # per million tokens in, out


def _rows(n: int) -> list[dict[str, Any]]:
    rows = [
        {"id": f"q{i}", "question": f"What is {i}?", "answer": f"It is {i}.", "reference": f"{i}.",
         "contexts": [f"{i} is a number."]}
        for i in range(n)
    ]  # fmt: skip
    rows.append({"id": "blank", "question": "  ", "answer": "a", "reference": "b", "contexts": ["c"]})
    rows.append({"id": "no-ref", "question": "q?", "answer": "a", "contexts": ["c"]})
    rows.append({"id": "bare", "question": "q?"})
    return rows


def _suite(**judge: Any) -> dict[str, Any]:
    priced = {"prices": {"llama-3.1-8b-instant": list(PRICE)}}
    return {
        "metrics": ["exact_match", {"name": "answer_accuracy", "params": priced}, "context_relevance_judge",
                    {"name": "rubric_judge", "params": {"max_tokens": 100}}],
        "judge": {"rpm": 100, "tpm": 1_000_000} | judge,
    }  # fmt: skip


def test_calls_follow_the_rows_each_metric_can_judge(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", _rows(300))
    est = estimate_run(data, load_suite(_suite()))
    assert est.rows == 303 and est.items == 303 and est.failed_rows == 0
    # answer_accuracy needs question, answer and reference: 301 rows (not no-ref, not bare), two judges each
    # context_relevance_judge: rows with contexts whose question is not blank (a rule scores it 0): 301
    # rubric_judge: one call per row with question, answer and reference: 301
    assert {name: t.calls for name, t in est.judge.items()} == {
        "answer_accuracy": 602, "context_relevance_judge": 602, "rubric_judge": 301}  # fmt: skip
    accuracy = est.judge["answer_accuracy"]
    q0 = {"question": "What is 0?", "answer": "It is 0.", "reference": "0."}
    first = estimate_tokens([{"role": "user", "content": ANSWER_ACCURACY.first.format(**q0)}])
    assert accuracy.tokens_in > 600 * first * 0.9  # every call's prompt counted, not just one
    assert accuracy.tokens_out_max == 602 * 16  # the dual judges' reply cap
    assert est.judge["rubric_judge"].tokens_out_max == 301 * 100
    assert accuracy.cost == pytest.approx((accuracy.tokens_in * PRICE[0] + accuracy.tokens_out_max * PRICE[1]) / 1e6)
    rubric = est.judge["rubric_judge"]  # its price is answer_accuracy's: a price is the provider's, per model
    assert rubric.cost == pytest.approx((rubric.tokens_in * PRICE[0] + rubric.tokens_out_max * PRICE[1]) / 1e6)
    total = est.judge_total()
    assert total.calls == 1505 and total.cost == pytest.approx(sum(t.cost for t in est.judge.values()))
    assert not est.cache_checked
    # every queue's work: cpu 303 exact_match, judge 303 x (1 + 1 + 2 rubric outputs)
    assert est.units == {"cpu": 303, "judge": 303 * 4}
    # 1,505 requests at 100 a minute: the last can go 15 windows after the first
    assert est.judge_minutes(load_suite(_suite()).suite) == {"rpm": 15.0}


def test_every_limit_that_binds_is_given_and_per_day_limits_count_days(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    suite = load_suite(_suite(rpm=1000, tpm=5000, rpd=40))
    est = estimate_run(data, suite)
    total = est.judge_total()
    minutes = est.judge_minutes(suite.suite)
    assert "rpm" not in minutes  # 255 calls fit in one minute's window
    assert minutes["tpm"] == float((total.tokens_in + total.tokens_out_max - 1) // 5000)
    assert minutes["rpd"] == (255 - 1) // 40 * 24 * 60.0


def test_a_call_larger_than_a_token_limit_is_found_before_the_run(tmp_path: Path, home: Path) -> None:
    """A tpm below one call's tokens was estimated as 1h39m of judging; the run then failed every item at once."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(5))
    suite = load_suite(_suite(tpm=100))
    est = estimate_run(data, suite)
    q0 = {"question": "What is 0?", "answer": "It is 0.", "reference": "0."}
    first = estimate_tokens([{"role": "user", "content": ANSWER_ACCURACY.first.format(**q0)}]) + 16
    assert est.judge_total().largest >= first > 100  # the largest call: its prompt guess and its reply cap
    assert est.too_large(suite.suite) == [("tpm", 100)]
    assert est.too_large(load_suite(_suite(tpm=first * 20)).suite) == []
    (tmp_path / "s.json").write_text(json.dumps(_suite()))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "GROQ_API_KEY": "", "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
         "--dry-run", "--tpm", "100"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # no key: the run would stop before scoring
    said = " ".join(result.stdout.split())
    assert f"judge.tpm 100 is below what the largest judge call needs (about {est.judge_total().largest:,}" in said
    assert "time: at least" not in said  # no least time for calls that can never be sent


def test_an_even_pace_is_a_limit_of_the_least_time_the_dry_run_gives(tmp_path: Path, home: Path) -> None:
    """At ``pace: even`` a minute's calls are not sent at once: 255 calls at rpm 600 take at least 25 s (10 a second),
    where the dry run said nothing of the time (they fit in the minute) nor of the pace."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    assert estimate_run(data, load_suite(_suite(rpm=600))).judge_minutes(load_suite(_suite(rpm=600)).suite) == {}
    (tmp_path / "s.json").write_text(json.dumps(_suite(rpm=600, pace="even")))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "GROQ_API_KEY": "", "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # no key: the run would stop before scoring
    said = " ".join(result.stdout.split())
    assert ("time: at least 0m25s for the judge calls under the run's limits (judge.pace even at 10 a second: "
            "0m25s), however many workers") in said, said  # fmt: skip


def test_the_dry_run_says_which_judge_limits_are_assumed_defaults(tmp_path: Path, home: Path) -> None:
    """An openai judge at a self-hosted base_url with no ``rpm`` / ``tpm`` in the suite: the dry run gave 4h36m under
    the defaults (30 / 6,000, Groq's free tier) with no hint they were assumed, not the server's. Set in the suite or
    on the command line, a limit is the user's: not called a default."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    judge = {"provider": "openai", "model": "m", "base_url": "http://localhost:8000/v1"}
    suite = _suite() | {"judge": judge}
    (tmp_path / "s.json").write_text(json.dumps(suite))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "OPENAI_API_KEY": "", "COLUMNS": "200"}

    def dry_run(*args: str) -> str:
        command = ["run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run", *args]
        result = subprocess.run([sys.executable, "-m", "orchestrator.cli", *command],
                                capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip
        assert "time: at least" in result.stdout, result.stderr
        return " ".join(result.stdout.split())

    said = dry_run()
    assert ("judge.rpm 30 and judge.tpm 6,000 are the defaults (Groq's free tier), assumed, not your provider's "
            "limits, which its x-ratelimit-* headers may lower, never raise: set judge.rpm / judge.tpm in the suite to "
            "its limits (a server of your own at "
            "http://localhost:8000/v1: null for none), or run with --rpm / --tpm") in said, said  # fmt: skip
    said = dry_run("--tpm", "6000")  # the same limit, given: the user's
    assert "judge.rpm 30 is the default (Groq's free tier)" in said and "tpm 6,000 is" not in said, said
    (tmp_path / "s.json").write_text(json.dumps(suite | {"judge": judge | {"rpm": 30, "tpm": 6000}}))
    assert "default" not in dry_run()
    (tmp_path / "s.json").write_text(json.dumps(suite | {"judge": {"model": "m"}}))  # Groq itself: its free tier
    said = dry_run()
    assert (
        "judge.rpm 30 and judge.tpm 6,000 are the defaults (Groq's free tier), assumed of your Groq plan (a paid "
        "one allows more), which its x-ratelimit-* headers may lower, never raise: set judge.rpm / judge.tpm in the "
        "suite to its limits, or run with"
    ) in said, said


def test_an_even_pace_may_take_its_rpm_from_the_command_line(tmp_path: Path, home: Path) -> None:
    """A suite that leaves ``rpm`` to each command (``rpm: null, pace: even``) run with ``--rpm 600`` paces at 10 a
    second: the pace's check sees the limits the run will have, not the file's alone (it was refused: "set rpm")."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    (tmp_path / "s.json").write_text(json.dumps(_suite(rpm=None, pace="even")))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "GROQ_API_KEY": "", "COLUMNS": "200"}

    def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
        command = ["run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run", *args]
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", *command],
                              capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)  # fmt: skip

    result = dry_run("--rpm", "600")
    assert result.returncode == 2, result.stderr  # no key: the run would stop before scoring
    # the limits are the run's (the rpm is --rpm's), not the suite's (it said "under the suite's limits")
    said = " ".join(result.stdout.split())
    assert "under the run's limits (judge.pace even at 10 a second: 0m25s)" in said, result.stderr
    refused = dry_run()  # no --rpm: nothing to pace by
    assert refused.returncode == 2 and "judge.pace: even holds requests to ceil(rpm / 60) a second" in refused.stderr


def test_the_dry_run_gives_the_least_time_judge_max_in_flight_allows(tmp_path: Path, home: Path) -> None:
    """A local server under ``max_in_flight: 2``, no rate limits: 255 calls go out 2 at a time, 128 rounds one after
    another however many workers, each as long as a reply takes. Seen failing before: the dry run said no least time
    at all (no rpm), where with a 3 s reply those calls take over 6 minutes."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    local = {"provider": "openai", "model": "llama3.1:8b", "base_url": "http://localhost:9/v1", "rpm": None,
             "tpm": None, "max_in_flight": 2}  # fmt: skip
    suite = load_suite(_suite(**local))
    assert estimate_run(data, suite).in_flight_rounds(suite.suite) == 128  # ceil(255 / 2)
    (tmp_path / "s.json").write_text(json.dumps(_suite(**local)))
    result = _dry_run(data, tmp_path / "s.json")
    said = " ".join(result.stdout.split())
    assert ("time: at least 128 x the seconds one judge reply takes under judge.max_in_flight 2 (255 calls, 2 at a "
            "time), however many workers") in said, (said, result.stderr)  # fmt: skip


def test_the_dry_run_counts_max_in_flight_rounds_per_judge_key(tmp_path: Path, home: Path) -> None:
    """Judge metrics whose ``api_key_env`` differ go through a judge limiter each, and a ``max_in_flight`` cap each:
    answer_accuracy's 102 calls under JUDGE_KEY_B's cap, the other 153 under the usual key's, 2 at a time each: 77
    rounds (the longer), not 128. Seen failing before: every call was counted against one cap."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    local = _suite(provider="openai", model="llama3.1:8b", base_url="http://localhost:9/v1", rpm=None, tpm=None,
                   max_in_flight=2)  # fmt: skip
    local["metrics"][1]["params"]["api_key_env"] = "JUDGE_KEY_B"
    suite = load_suite(local)
    estimate = estimate_run(data, suite)
    assert estimate.judge["answer_accuracy"].paid == 102 and estimate.judge_total().paid == 255
    assert estimate.in_flight_rounds(suite.suite) == 77  # ceil(153 / 2), over ceil(102 / 2)
    (tmp_path / "s.json").write_text(json.dumps(local))
    result = _dry_run(data, tmp_path / "s.json")
    said = " ".join(result.stdout.split())
    assert ("time: at least 77 x the seconds one judge reply takes under judge.max_in_flight 2 (255 calls, 2 at a time "
            "per judge key (2 keys: the judge metrics' api_key_env)), however many workers") in said, (
        said, result.stderr)  # fmt: skip


def test_the_judge_limits_floor_each_judge_keys_calls_apart(tmp_path: Path, home: Path) -> None:
    """Judge metrics whose ``api_key_env`` differ go through a judge limiter each, each at the suite's rpm:
    answer_accuracy's 602 calls under JUDGE_KEY_B's rpm 100, the other 903 under the usual key's: 9 minutes (the
    slower key's), not 15. Seen failing before: every call was counted under one rpm (``{"rpm": 15.0}``)."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(300))
    keyed = _suite()
    keyed["metrics"][1]["params"]["api_key_env"] = "JUDGE_KEY_B"
    suite = load_suite(keyed)
    estimate = estimate_run(data, suite)
    assert estimate.judge["answer_accuracy"].paid == 602 and estimate.judge_total().paid == 1505
    assert estimate.judge_minutes(suite.suite) == {"rpm": 9.0}  # (903 - 1) // 100, over (602 - 1) // 100
    (tmp_path / "s.json").write_text(json.dumps(keyed))
    said = " ".join(_dry_run(data, tmp_path / "s.json").stdout.split())
    assert (
        "time: at least 9m00s for the judge calls under the run's limits (judge.rpm 100: 9m00s, each judge key's "
        "calls under its own (2 keys: the judge metrics' api_key_env)), however many workers"
    ) in said, said
    assert ("whole run: at least 9m00s, bound by the judge queue: judge.rpm 100 at 903 calls of the busiest of 2 judge "
            "keys (a limiter each: the judge metrics' api_key_env)") in said, said  # fmt: skip


def test_the_dry_run_gives_the_least_time_the_local_judge_workers_threads_allow(tmp_path: Path, home: Path) -> None:
    """An embedded run's judge worker of ``--judge-threads 2`` runs 2 tasks, each 8 calls at a time (the judge
    metrics' concurrency): 255 calls in 16 rounds; with the default 32 threads one round holds them (no line); with a
    broker the option is refused, as the run refuses it. Seen failing before: the dry run ignored --judge-threads."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    local = _suite(provider="openai", model="llama3.1:8b", base_url="http://localhost:9/v1", rpm=None, tpm=None)
    suite = load_suite(local)
    assert estimate_run(data, suite).local_rounds(2) == 16  # ceil(255 / (2 x 8))
    (tmp_path / "s.json").write_text(json.dumps(local))
    said = " ".join(_dry_run(data, tmp_path / "s.json", "--judge-threads", "2").stdout.split())
    assert ("time: at least 16 x the seconds one judge reply takes with the local judge worker's 2 threads (255 calls, "
            "16 at a time: a task a thread, 8 calls each, the judge metrics' concurrency)") in said, said  # fmt: skip
    assert "local judge worker" not in _dry_run(data, tmp_path / "s.json").stdout
    cluster = _dry_run(data, tmp_path / "s.json", "--judge-threads", "2", "--broker", "redis://localhost:9")
    assert cluster.returncode == 2 and "--judge-threads sets the threads of an embedded run's" in cluster.stderr
    (tmp_path / "cpu.json").write_text(json.dumps({"metrics": ["exact_match"]}))  # no judge work: said, as a run says
    unused = _dry_run(data, tmp_path / "cpu.json", "--judge-threads", "2")
    assert unused.returncode == 0 and "--judge-threads has no effect: the run has no judge work" in unused.stderr


def test_a_metric_naming_the_providers_usual_key_variable_shares_its_max_in_flight_cap(tmp_path: Path) -> None:
    """``api_key_env: OPENAI_API_KEY`` on an openai judge names the variable the other metrics read their key from:
    one limiter, one cap, 128 rounds for 255 calls. Seen failing before: the variable's name against none read as two
    keys, 77 rounds."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(50))
    local = _suite(provider="openai", model="llama3.1:8b", base_url="http://localhost:9/v1", rpm=None, tpm=None,
                   max_in_flight=2)  # fmt: skip
    local["metrics"][1]["params"]["api_key_env"] = "OPENAI_API_KEY"
    suite = load_suite(local)
    estimate = estimate_run(data, suite)
    assert (estimate.in_flight_rounds(suite.suite), estimate.in_flight_caps()) == (128, 1)


def test_target_suites_count_calls_per_target_with_placeholder_answers(tmp_path: Path, store: RunStore) -> None:
    rows = [{"id": f"q{i}", "question": f"What is {i}?", "reference": f"{i}."} for i in range(20)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    targets = [{"system": name, "url": "http://127.0.0.1:9/ask"} for name in ("a", "b")]
    suite = load_suite({"metrics": ["answer_accuracy"], "targets": targets})
    est = estimate_run(data, suite)
    assert est.items == 40 and est.target_calls == {"a": 20, "b": 20}
    assert est.judge["answer_accuracy"].calls == 40 * 2  # every answer from every target, two judges
    assert est.units == {"target": 40, "judge": 40}
    assert PLACEHOLDER  # the answers stand in as this text
    # groundedness reads the answer against the contexts: one placeholder for both read as "the answer is in its
    # context" (grounded, no call), so the dry run said 0 calls where the run made 2 an item
    grounded = load_suite({"metrics": ["groundedness"], "targets": targets})
    assert estimate_run(data, grounded).judge["groundedness"].calls == 40 * 2
    # half an emoji in a row: the cache look-up hashed the prompt as UTF-8 and the dry run crashed
    half = tmp_path / "half.jsonl"
    half.write_text(json.dumps({"id": "h", "question": "When \ud83d?", "answer": "a", "reference": "b"}) + "\n")
    looked_up = estimate_run(half, load_suite({"metrics": ["answer_accuracy"]}), redis=store.r)
    assert looked_up.cache_checked and looked_up.judge["answer_accuracy"].calls == 2


def test_the_dry_run_gives_each_targets_limits_and_the_least_time_they_allow(tmp_path: Path) -> None:
    """A target's ``rpm`` and ``pace`` went unsaid by the dry run, where the judge's give the least time its calls
    need: 133 calls (130 rows and 3 odd ones) at rpm 60 take at least 2 min, at ``pace: even`` at 1 a second 2m12s; a
    limit they do not reach is given without a time, and a target without limits is said as it was."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(130))
    targets = [{"system": "slow", "url": "http://127.0.0.1:9/ask", "rpm": 60, "pace": "even"},
               {"system": "roomy", "url": "http://127.0.0.1:9/ask", "rpm": 600},
               {"system": "free", "url": "http://127.0.0.1:9/ask"}]  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["exact_match"], "targets": targets}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert ("target slow: 133 calls (one per question; retries not counted); time: at least 2m12s for them under its "
            "limits (rpm 60: 2m00s, pace even at 1 a second: 2m12s)") in said, said  # fmt: skip
    assert "target roomy: 133 calls (one per question; retries not counted); under its limits (rpm 600)" in said
    assert (
        "target free: 133 calls (one per question; retries not counted) whole run: at least 2m12s, bound by target "
        "slow: its pace even at 1 a second at 133 calls" in said
    ), said


@pytest.mark.integration
def test_dry_run_command_reports_bad_rows_and_starts_nothing(tmp_path: Path, home: Path) -> None:
    lines = [json.dumps(r) for r in _rows(10)] + ['{"id": "broken", '] * 7  # 5 are listed, then "and 2 more"
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(lines) + "\n")
    (tmp_path / "s.json").write_text(json.dumps(_suite()))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "GROQ_API_KEY": ""}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
         "--dry-run", "--max-cost", "0.000001", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # the run exits 2 without the key: so does its dry run (it was 0)
    assert "--dry-run exits 2, as the run would: it would be refused or stop before scoring" in result.stderr
    out = result.stdout
    assert "Dry run: nothing was submitted" in out and "13 readable rows, 7 unreadable" in out
    assert "line 14: invalid JSON" in out and "line 18: invalid JSON" in out and "line 19:" not in out
    assert "  and 2 more (a run lists them all in failed_rows.jsonl)" in out
    total = next(line.split() for line in out.splitlines() if line.split()[:1] == ["total"])
    assert total[1] == "55"  # 11 x 2 + 11 x 2 + 11 calls; and a dry run needs no key
    assert "--max-cost 1e-06 may stop judging part-way" in out
    assert "Warning: a run here would stop before scoring: " in result.stderr and "GROQ_API_KEY" in result.stderr
    assert not (tmp_path / "out").exists() and not any(home.iterdir())  # no reports, no embedded Redis


def test_the_dry_run_warns_of_a_base_url_that_ends_in_what_the_client_adds(tmp_path: Path, home: Path) -> None:
    """Groq's https://api.groq.com/openai/v1 as a groq judge's base_url: the dry run counted the calls and said
    nothing; the run's every call was then a 404 and the breaker stopped it."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(2))
    (tmp_path / "s.json").write_text(json.dumps(_suite(base_url="https://api.groq.com/openai/v1")))
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "RAGSCORE_HOME": str(home), "GROQ_API_KEY": "k"},
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr  # as the run's (it was 0)
    said = " ".join(result.stderr.split())
    assert (
        "Warning: a run here would stop before scoring: The groq judge's base_url https://api.groq.com/openai/v1 "
        "ends in /openai/v1, which the groq client adds itself"
        in said
        and "give https://api.groq.com " in said
    ), said


def test_the_dry_run_warns_of_a_visibility_timeout_the_run_would_be_refused_for(tmp_path: Path, home: Path) -> None:
    """Once only what sends work checked RAGSCORE_VISIBILITY_TIMEOUT_S, `--dry-run` (which validates) counted and
    said nothing of a timeout the run it was checking would be refused for."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(2))
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["exact_match"]}))
    env = {**os.environ, "RAGSCORE_HOME": str(home), "RAGSCORE_VISIBILITY_TIMEOUT_S": "400"}
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "Dry run: nothing was submitted" in result.stdout, result.stderr  # it was 0
    said = " ".join(result.stderr.split())
    assert "Warning: the run would be refused: Bad setting: RAGSCORE_VISIBILITY_TIMEOUT_S='400': must be above" in said
    assert not any(home.iterdir())


def test_the_dry_run_warns_of_a_max_seconds_per_question_the_run_would_be_refused_for(
    tmp_path: Path, home: Path
) -> None:
    """A target's ``max_seconds_per_question`` not below its task's time limit refuses the run: its dry run says so,
    naming the limit, and exits 2 as the run would."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(2))
    target = {"url": "http://127.0.0.1:9/ask", "max_seconds_per_question": 780}
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["exact_match"], "target": target}))
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"), "--dry-run"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "RAGSCORE_HOME": str(home)}, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2 and "Dry run: nothing was submitted" in result.stdout, result.stderr
    said = " ".join(result.stderr.split())
    assert ("Warning: the run would be refused: Invalid suite: target.max_seconds_per_question=780 is not below the "
            "target task's time limit, 780 s") in said, said  # fmt: skip
    assert not any(home.iterdir())


def test_dry_run_is_refused_with_resume(tmp_path: Path, home: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"run_id": "x"}))
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", "--resume", str(tmp_path), "--dry-run"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "RAGSCORE_HOME": str(home)}, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2 and "--dry-run counts what a new run would do" in result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("reasoning", [False, True])  # a reasoning judge's requests have cache keys of their own
def test_after_a_run_the_dry_run_finds_its_replies_cached(
    tmp_path: Path, home: Path, keys: str, model: str, reasoning: bool
) -> None:
    from orchestrator import evaluate

    from ..fakes import FakeProvider

    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]",
             "contexts": [f"c{i}"]} for i in range(5)]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows + [{"id": "new", "question": "Q?", "reference": "r",
                                                      "answer": "a [[rating=2]]", "contexts": ["c"]}])  # fmt: skip
    with FakeProvider(api_key=keys) as fake:
        suite = {"metrics": ["answer_accuracy"], "judge": {"model": model, "base_url": fake.url, "rpm": None,
                                                           "tpm": None, "reasoning": reasoning}}  # fmt: skip
        evaluate(rows, suite, out=tmp_path / "first")
        sent = fake.stats()["requests"]
        (tmp_path / "s.json").write_text(json.dumps(suite))
        result = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
             "--dry-run"],
            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ), timeout=120,
        )  # fmt: skip
        assert fake.stats()["requests"] == sent == 10  # the dry run called nobody
        ran = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(tmp_path / "s.json"),
             "--out", str(tmp_path / "second")],
            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, COLUMNS="200"), timeout=300,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    said = [line for line in ran.stdout.splitlines() if line.startswith("judge: ")]
    assert said, ran.stdout
    assert said[0].startswith("judge: 2 calls, 10 from the cache, 0 retries, 0 rate-limited (429), tokens "), said
    assert said[0].endswith("cost - (no price for the judge model: the judge metrics' param 'prices')")  # not 0
    assert result.returncode == 0, result.stderr
    header, row = (next(line.split() for line in result.stdout.splitlines() if line.split()[:1] == [first])
                   for first in ("metric", "answer_accuracy"))  # fmt: skip
    assert header == ["metric", "calls", "cached", "to", "pay", "tokens", "in", "out", "≤", "cost", "≤"]
    assert row[1:4] == ["12", "10", "2"]  # only the new row's two judges would be paid for
    assert "…" not in result.stdout  # 80 columns (a pipe): no header or number cut short
    assert "cached replies were not looked up" not in result.stdout


def test_the_dry_run_says_a_prompt_asked_twice_is_counted_twice(tmp_path: Path, home: Path) -> None:
    """Two rows alike ask the judge the same prompt: the dry run counted both calls, and the run, whose reply cache
    answered the second, sent one; the user read the count as a promise broken (96 calls said, 94 sent)."""
    rows = [{"id": i, "question": "What is 2?", "answer": "2.", "reference": "2."} for i in ("a", "b")]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["answer_accuracy"]}))
    result = _dry_run(data, tmp_path / "s.json")  # exits 2: no GROQ_API_KEY here, which the count does not need
    said = " ".join(result.stdout.split())
    assert "answer_accuracy 4 " in said, said  # two judges a row
    assert (
        "a prompt asked twice in the run (rows alike) is counted twice, though the cache may answer the second" in said
    )


def _dry_run(data: Path, suite: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ragscore run DATA --suite SUITE --dry-run [ARGS]``, 250 columns wide (a warning stays on one line)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(data), "--suite", str(suite), "--dry-run", *args],
        capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, COLUMNS="250"), timeout=120,
    )  # fmt: skip


def test_the_dry_run_names_every_metric_problem_of_the_suite_at_once(tmp_path: Path) -> None:
    """A suite with an unknown metric and another metric's bad param said only the first: the user fixed them one run
    at a time. Both are said, one a line, each named by its place in the suite after its file, line and column."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(2))
    suite = {"metrics": ["exact_mach", {"name": "rubric_judge", "params": {"max_tokens": "many"}}]}
    (tmp_path / "s.json").write_text(json.dumps(suite, indent=1))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == "Error: Invalid suite: 2 problems:", result.stderr
    assert lines[1].startswith(f"  {tmp_path / 's.json'} line 3 column 3: metrics item 1 (exact_mach): Unknown metric "
                               "'exact_mach'. Did you mean 'exact_match'")  # fmt: skip
    assert lines[2] == (
        f"  {tmp_path / 's.json'} line 7 column 5: metrics item 2 (rubric_judge): Bad params: "
        "max_tokens: 'many' is not a whole number"
    )


def test_the_dry_run_warns_of_columns_that_look_like_row_fields_as_a_run_does(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("id,Answer,reference\nq1,Paris,Paris\nq2,Rome,Oslo\n", encoding="utf-8")
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["exact_match"]}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 1, result.stderr  # no row has 'answer': exact_match would score no item
    assert f"Warning: column 'Answer' (header of {data}, line 1, column 2; did you mean 'answer'?) is no row field" in (
        result.stdout
    )


def test_rows_of_empty_or_blank_contexts_are_rows_without_contexts_for_the_dry_run(tmp_path: Path) -> None:
    """``contexts: []`` and ``["", " "]`` were contexts for the check of a field no row has (no warning), though
    context_relevance leaves such rows unscorable (``no contexts``) and the end of the run said so."""
    rows = [{"id": "q1", "question": "Q?", "answer": "A", "reference": "A", "contexts": []},
            {"id": "q2", "question": "Q?", "answer": "A", "reference": "A", "contexts": ["", " "]}]  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["context_relevance", "exact_match"]}))
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0, result.stderr  # exact_match scores: no failure (an LLM alone retrieves nothing)
    said = " ".join(result.stdout.split())  # the column is there, its rows empty: not one named otherwise
    assert (
        "Warning: every row's 'contexts' is empty or absent, which context_relevance needs: it will score no item "
        "(a system that retrieves nothing, an LLM alone, has none: no failure where other metrics score)"
    ) in said
    assert "named otherwise" not in said


def test_a_context_metric_warns_when_no_row_has_contexts(tmp_path: Path) -> None:
    """A ``context`` (or ``retrieved_docs``) column: context_relevance scored every row 0, as retrieval that
    found nothing (the seed's rule), and nothing said the column was not read. A row without contexts is now
    unscorable for it: it would score no item, which is said, but is no failure as for exact_match (an LLM alone
    retrieves nothing) unless no metric of the suite would score."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": "q1", "question": "Q?", "context": ["Paris is big."]}])
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["context_relevance", "exact_match"]}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 1, result.stderr  # nothing would be scored: exact_match has no answer to score
    said = "--dry-run exits 1, as the run would: it would score no item of context_relevance, exact_match (said above)"
    assert said in result.stderr
    said = " ".join(result.stdout.split())
    assert ("Warning: no row has 'contexts', which context_relevance needs: it will score no item (a system that "
            "retrieves nothing, an LLM alone, has none: no failure where other metrics score; or is it a column named "
            "otherwise?)") in said  # fmt: skip
    # exact_match leaves rows without an answer or a reference unscorable: with no such row it would score nothing
    assert "Warning: no row has 'answer', which exact_match needs: it will score no item" in said
    assert "Warning: no row has 'reference', which exact_match needs" in said and said.count("no row has") == 3
    answered = write_jsonl(tmp_path / "a.jsonl", [{"id": "q1", "question": "Q?", "answer": "A", "reference": "A"}])
    llm = _dry_run(answered, tmp_path / "s.json")  # an LLM alone: exact_match scores, context_relevance does not apply
    assert llm.returncode == 0, llm.stderr
    assert "Warning: no row has 'contexts', which context_relevance needs" in " ".join(llm.stdout.split())
    # Rows a target answers get their contexts from it: no such column is expected in the dataset.
    suite = {"metrics": ["context_relevance"], "target": {"url": "http://127.0.0.1:9/ask", "system": "rag"}}
    (tmp_path / "t.json").write_text(json.dumps(suite))
    targeted = _dry_run(data, tmp_path / "t.json")
    assert targeted.returncode == 0, targeted.stderr
    assert "no row has" not in targeted.stdout
    suite["target"]["response"] = {"answer": "answer", "contexts": None}  # this target returns no contexts
    (tmp_path / "t.json").write_text(json.dumps(suite))
    alone = _dry_run(data, tmp_path / "t.json")  # context_relevance alone: the run would score nothing at all
    said = " ".join(alone.stdout.split())  # said once, of the target (not of a column named otherwise)
    assert alone.returncode == 1 and "no row has 'contexts'" not in said, alone.stderr
    assert said.count("Warning: target 'rag' returns no contexts") == 1, said
    suite["metrics"] = ["context_relevance", "quality_checks"]  # the target answers: quality_checks scores
    (tmp_path / "t.json").write_text(json.dumps(suite))
    assert _dry_run(data, tmp_path / "t.json").returncode == 0


def test_the_dry_run_warns_of_a_gate_naming_a_system_the_dataset_lacks(tmp_path: Path) -> None:
    rows = [{"id": "q1", "system": "bm25-llm", "answer": "Paris", "reference": "Paris"},
            {"id": "q1", "system": "dense-llm", "answer": "Rome", "reference": "Paris"}]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["exact_match"]}))
    typo = _dry_run(data, tmp_path / "s.json", "--fail-under", "exact_match@bm25=0.5")
    assert typo.returncode == 2, typo.stderr  # the run is refused for it (exit 2); the dry run exited 0
    said = " ".join(typo.stderr.split())
    assert ("Warning: gates name 'bm25' (did you mean 'bm25-llm'?), which this run has no items of: its systems are "
            "bm25-llm, dense-llm") in said  # fmt: skip
    right = _dry_run(data, tmp_path / "s.json", "--fail-under", "exact_match@dense-llm=0.5")
    assert right.returncode == 0, right.stderr
    assert "gates name" not in right.stderr


def test_a_field_several_metrics_need_and_no_row_has_is_said_once_before_the_run(tmp_path: Path) -> None:
    """A dataset without a reference: exact_match and answer_accuracy scored nothing, and the dry run said only
    "0 judge calls"; the run said so at its end."""
    data = write_jsonl(tmp_path / "d.jsonl", [{"id": f"q{i}", "question": "Q?", "answer": "A"} for i in range(3)])
    suite = {"metrics": ["exact_match", "answer_accuracy", "quality_checks"],
             "judge": {"model": "m", "base_url": "http://127.0.0.1:9/v1"}}  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps(suite))
    result = _dry_run(data, tmp_path / "s.json")
    # no judge key, and no reply of the judge cached: refused before it would score nothing (exit 1), the rows unread
    assert result.returncode == 2, result.stderr
    said = " ".join(result.stdout.split())
    assert "Warning: no row has 'reference', which exact_match, answer_accuracy need: they will score no item" in said
    assert said.count("no row has") == 1  # quality_checks needs only the answer, which every row has


def test_recall_warns_when_no_row_has_retrieved_doc_ids(tmp_path: Path) -> None:
    """A ``retrieved_ids`` column: recall_at_k and mrr scored every row 0, as retrieval that found nothing, and
    nothing said the column was not read."""
    rows = [{"id": f"q{i}", "gold_doc_id": "d1", "retrieved_ids": ["d1", "d2"]} for i in range(3)]
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["recall_at_k"]}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "Warning: no row has 'retrieved_doc_ids', which recall_at_k scores as absent" in said, said
    rows[0]["retrieved_doc_ids"] = []  # one row that retrieved nothing: the column is read, no warning
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0 and "no row has" not in result.stdout, result.stdout


def test_gold_ids_named_otherwise_than_the_retrieved_ids_are_said_by_the_dry_run_as_the_run_ends(
    tmp_path: Path,
) -> None:
    """Gold ids ``doc_3`` against retrieved ids ``3`` (every row 0, no error): only the run's end said so, though the
    dry run reads every row. It says the same line, once; rows that retrieved nothing are left out, and ids named
    alike say nothing."""
    rows = [{"id": f"q{i}", "gold_doc_id": f"doc_{i}", "retrieved_doc_ids": [str(i), "9"]} for i in range(3)]
    rows.append({"id": "llm", "gold_doc_id": "doc_1", "retrieved_doc_ids": []})
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["recall_at_k"]}))
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    line = (
        "Warning: recall_at_k: no gold_doc_id of any of the 3 rows that retrieved something is among its "
        "retrieved_doc_ids (mrr 0 on every row): do gold_doc_id and retrieved_doc_ids name documents alike"
    )
    assert said.count(line) == 1, said
    alike = [{**row, "retrieved_doc_ids": [f"doc_{i}"]} for i, row in enumerate(rows[:3])]
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", alike + rows[3:]), tmp_path / "s.json")
    assert result.returncode == 0 and "no gold_doc_id" not in result.stdout, result.stdout


def test_the_dry_run_names_a_system_whose_ids_are_named_otherwise_past_the_first_1000(tmp_path: Path) -> None:
    """The dry run told systems apart only among the first MAX_BREAKDOWN_VALUES it read (as the run's breakdown keeps
    them): a system seen after them whose gold ids are named otherwise was not said. It is, from the one read."""
    from ragscore_workers.aggregate import MAX_BREAKDOWN_VALUES

    rows = [{"id": f"q{i}", "system": f"s{i:04}", "gold_doc_id": f"d{i}", "retrieved_doc_ids": [f"d{i}"]}
            for i in range(MAX_BREAKDOWN_VALUES + 1)]  # fmt: skip
    rows += [{"id": f"q{i}", "system": "bm25", "gold_doc_id": f"d{i}", "retrieved_doc_ids": ["x", "y"]} for i in (1, 2)]
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["recall_at_k"]}))
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert said.count("Warning: recall_at_k: no gold_doc_id of system bm25 is among its retrieved_doc_ids") == 1, said


def test_the_dry_run_says_the_retrieved_nothing_line_the_run_ends_with_and_with_targets_that_it_checks_after(
    tmp_path: Path,
) -> None:
    """The dry run said only the mismatch line of the two the run ends with: not that an LLM-only system's rows
    retrieved nothing (information, as the run says it). With targets, whose replies give the retrieved ids, it said
    nothing of the check it skips."""
    from orchestrator.gold_ids import FROM_TARGETS

    rows = [{"id": f"q{i}", "system": "rag", "gold_doc_id": f"d{i}", "retrieved_doc_ids": [f"d{i}"]} for i in (1, 2)]
    rows += [{"id": f"q{i}", "system": "llm", "question": "q?", "gold_doc_id": f"d{i}", "retrieved_doc_ids": []}
             for i in (1, 2)]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["recall_at_k"]}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = result.stdout.splitlines()
    line = "recall_at_k: 2 rows (of system llm) retrieved nothing (retrieved_doc_ids empty): each scores 0"
    assert said.count(line) == 1 and FROM_TARGETS not in result.stdout, result.stdout
    target = {"system": "api", "url": "http://127.0.0.1:9/ask", "response": {"retrieved_doc_ids": "ids"}}
    (tmp_path / "t.json").write_text(json.dumps({"metrics": ["recall_at_k"], "targets": [target]}))
    asked = _dry_run(write_jsonl(tmp_path / "q.jsonl", [{**row, "id": f"t{i}"} for i, row in enumerate(rows)]),
                     tmp_path / "t.json")  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    assert " ".join(asked.stdout.split()).count(FROM_TARGETS) == 1 and "retrieved nothing" not in asked.stdout


def test_the_dry_run_says_once_which_metrics_a_target_returning_no_contexts_leaves_unscorable(tmp_path: Path) -> None:
    """A target whose response map names neither contexts nor retrieved_doc_ids (an LLM alone): the dry run said that
    no row has retrieved_doc_ids, which recall_at_k scores (as 0), a column named otherwise, and nothing of verbatim.
    One line says the target returns no contexts and which metrics will be unscorable for it; not that its retrieved
    ids are checked after the run (it gives none)."""
    from orchestrator.gold_ids import FROM_TARGETS

    rows = [{"id": f"q{i}", "question": "q?", "gold_doc_id": f"d{i}"} for i in (1, 2)]
    target = {"url": "http://127.0.0.1:9/ask", "response": {"answer": "answer", "contexts": None, "citations": "c"}}
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["quality_checks", "recall_at_k", "verbatim"],
                                                 "target": target}))  # fmt: skip
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    line = ("Warning: the target returns no contexts (its response map names neither contexts nor retrieved_doc_ids: "
            "an LLM alone, which retrieves nothing): recall_at_k, verbatim will be unscorable")  # fmt: skip
    assert said.count(line) == 1 and "retrieved_doc_ids'" not in said and "'contexts'" not in said, said
    assert FROM_TARGETS not in said, "no retrieved ids to check after the run"


def test_the_dry_run_of_an_llm_alone_with_citation_says_it_unscorable_by_design_not_a_failure(tmp_path: Path) -> None:
    """citation of a target that returns no contexts (an LLM alone) whose rows have no evidence_sentences: the dry
    run said no row has them, 'it will score no item', and exited 1, where the run leaves its rows unscorable by design
    (no evidence_sentences: no failure). It names citation in the one warning of the LLM alone and exits 0."""
    rows = [{"id": f"q{i}", "question": "q?", "gold_evidence_sentences": ["s1"]} for i in (1, 2)]
    target = {"url": "http://127.0.0.1:9/ask", "response": {"answer": "answer", "contexts": None}}
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["quality_checks", "citation"], "target": target}))
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0, result.stdout + result.stderr
    said = " ".join(result.stdout.split())
    line = ("an LLM alone, which retrieves nothing): citation will be unscorable for its rows (no evidence_sentences; "
            "no failure where other metrics score)")  # fmt: skip
    assert said.count(line) == 1 and "score no item" not in said, said


def test_the_dry_run_of_rows_whose_retrieval_found_nothing_passes_citation_as_the_run_does(tmp_path: Path) -> None:
    """Every row ``retrieved_doc_ids: []`` without contexts nor evidence_sentences: the run leaves citation unscorable
    by design for each (``Row.sourceless``; tests/metrics_qa/test_citation.py: no run error) and recall_at_k scores
    them 0, but the dry run said citation would score no item and exited 1, refusing what the run accepts. It exits
    0; a row that retrieved contexts and names no evidence fails citation in the run, and exits 1 here too."""
    rows = [{"id": f"q{i}", "question": "q?", "answer": "A.", "gold_doc_id": "d1", "retrieved_doc_ids": [],
             "gold_evidence_sentences": ["s1"]} for i in (1, 2)]  # fmt: skip
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["recall_at_k", "citation"]}))
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "Warning: no row has 'evidence_sentences', which citation needs: it will score no item (every row retrieved no "
        "document whose sentences it could name (retrieved_doc_ids: [] without contexts, or an LLM alone's): no "
        "failure where other metrics score; or is it a column named otherwise?)"
    ) in " ".join(result.stdout.split()), result.stdout
    retrieved = rows + [rows[0] | {"id": "q3", "contexts": ["s1 text."], "retrieved_doc_ids": ["d1"]}]
    failing = _dry_run(write_jsonl(tmp_path / "r.jsonl", retrieved), tmp_path / "s.json")
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "it would score no item of citation" in failing.stderr, failing.stderr
    assert "(is it a column named otherwise?)" in " ".join(failing.stdout.split()), failing.stdout


def test_code_test_without_a_check_of_the_output_warns_that_any_running_code_passes(tmp_path: Path) -> None:
    """HumanEval rows with their tests in ``checks`` and a suite of ``code_test`` alone: ``return x - y`` scored 1.0
    (only the exit code counted; the checks were not scored) and nothing said so before the run."""
    rows = [{"id": "add", "code": "def add(x, y):\n    return x - y\n",
             "checks": [{"type": "code_test", "params": {"test": "assert add(1, 2) == 3"}}]}]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["code_test"]}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert ("Warning: code_test has no stdout, stdout_regex or test: only the exit code counts (code that runs "
            "passes)") in said  # fmt: skip
    assert "Warning: rows carry checks, but the suite has no checks metric: they are not scored" in said
    (tmp_path / "t.json").write_text(
        json.dumps({"metrics": ["checks", {"name": "code_test", "params": {"stdout": "3"}}]})
    )
    tested = _dry_run(data, tmp_path / "t.json")
    assert tested.returncode == 0, tested.stderr
    assert "code_test has no" not in tested.stdout and "rows carry checks" not in tested.stdout
    # an empty expected output is a check too (a program that must print nothing)
    (tmp_path / "e.json").write_text(json.dumps({"metrics": [{"name": "code_test", "params": {"stdout": ""}}]}))
    silent = _dry_run(data, tmp_path / "e.json")
    assert silent.returncode == 0 and "code_test has no" not in silent.stdout, silent.stdout


def test_raw_humaneval_rows_are_told_to_give_the_completion_as_code_before_the_run(tmp_path: Path) -> None:
    """Rows of ``prompt``, ``completion``, ``test``, ``entry_point`` were told only that no row has a field
    besides its id; the hint code_test gives each row after the run is given before it. The dry run exits 1, as the
    run would: code_test would score no item."""
    rows = [{"task_id": "add", "prompt": "def add(x, y):\n", "completion": "    return x + y\n",
             "test": "def check(c):\n    assert c(1, 2) == 3\n", "entry_point": "add"}]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "s.json").write_text(json.dumps({"metrics": ["code_test"]}))
    result = _dry_run(data, tmp_path / "s.json")
    assert result.returncode == 1 and "it would score no item of code_test" in result.stderr, result.stderr
    said = " ".join(result.stdout.split())
    assert (
        "Warning: no row has 'code' or 'answer', which code_test needs: it will score no item (the row's "
        "`completion` field is not read: give the program as `code`, renaming the column in the dataset)"
    ) in said
    rows[0]["code"] = rows[0].pop("completion")  # renamed as told: the warning goes
    result = _dry_run(write_jsonl(tmp_path / "d.jsonl", rows), tmp_path / "s.json")
    assert result.returncode == 0 and "no row has 'code'" not in result.stdout, result.stdout


@pytest.mark.integration
def test_a_run_whose_judge_replies_are_all_cached_needs_no_key(
    tmp_path: Path, home: Path, keys: str, model: str
) -> None:
    """Every reply cached, the key unset: the run and its dry run go ahead (exit 0), calling nobody; a row whose reply
    is not cached needs the key again, and both refuse it as before. Seen failing before: the dry run exited 2 with the
    missing key, and the run needed some value (GROQ_API_KEY=unused) because its workers built the judge with the key
    before they read the cache."""
    from orchestrator import evaluate

    from ..fakes import FakeProvider

    rows = [{"id": f"q{i}", "question": f"Q{i}?", "reference": f"r{i}", "answer": f"a{i} [[rating=4]]"}
            for i in range(3)]  # fmt: skip
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    with FakeProvider(api_key=keys) as fake:
        suite = {"metrics": ["answer_accuracy"], "judge": {"model": model, "base_url": fake.url, "rpm": None,
                                                           "tpm": None}}  # fmt: skip
        evaluate(rows, suite, out=tmp_path / "first")
        (tmp_path / "s.json").write_text(json.dumps(suite))
        sent = fake.stats()["requests"]
        env = {k: v for k, v in os.environ.items() if k != "GROQ_API_KEY"} | {"COLUMNS": "250"}

        def cli(dataset: Path, *args: str) -> subprocess.CompletedProcess[str]:
            command = ["run", str(dataset), "--suite", str(tmp_path / "s.json"), *args]
            return subprocess.run([sys.executable, "-m", "orchestrator.cli", *command], capture_output=True, text=True,
                                  cwd=ROOT, env=env, timeout=300)  # fmt: skip

        dry = cli(data, "--dry-run")
        ran = cli(data, "--out", str(tmp_path / "second"))
        assert fake.stats()["requests"] == sent == 6  # neither called the provider
        more = write_jsonl(tmp_path / "more.jsonl", [*rows, {**rows[0], "id": "new", "answer": "new [[rating=2]]"}])
        dry_more, ran_more = cli(more, "--dry-run"), cli(more, "--out", str(tmp_path / "third"))
        assert fake.stats()["requests"] == sent
    assert dry.returncode == 0 and "GROQ_API_KEY" not in dry.stderr, dry.stderr
    assert ran.returncode == 0, ran.stderr
    assert json.loads((tmp_path / "second" / "summary.json").read_text())["judge"]["cache_hits"] == 6
    for refused in (dry_more, ran_more):  # 2 calls to send: the key is needed, as before
        assert refused.returncode == 2, refused.stderr
        said = " ".join(refused.stderr.split())
        assert "The groq judge needs an API key: set the environment variable GROQ_API_KEY" in said, said
    assert not (tmp_path / "third" / "summary.json").exists()


def test_the_dry_run_ends_with_the_whole_runs_time_and_the_judge_limit_that_bounds_it(
    tmp_path: Path, home: Path
) -> None:
    """A user with a big corpus asks how long the run takes: the dry run gave each part's time (the judge's limits,
    the encode) but not the whole run's, nor which part bounds it. 1,505 judge calls at rpm 100 take at least 15 min
    whoever sends them; the embedded run's 32 judge threads send them in 6 rounds, which bind instead only where a
    reply takes over 150 s; exact_match's cpu work is timed on a sample, beside it. Seen failing before: no "whole
    run"."""
    data = write_jsonl(tmp_path / "d.jsonl", _rows(300))
    (tmp_path / "s.json").write_text(json.dumps(_suite(rpm=100)))
    said = " ".join(_dry_run(data, tmp_path / "s.json").stdout.split())
    assert ("whole run: at least 15m00s, bound by the judge queue: judge.rpm 100 at 1,505 calls (a floor: re-asks, "
            "retries and 429s add to it); longer where a judge reply takes over 150.0 s, as the local judge worker's "
            "threads send its calls in 6 rounds one after another; beside it: cpu ") in said, said  # fmt: skip
    assert "(303 items at " in said and "cpu worker process" in said and "(an embedded run's own pool" in said, said
    assert "not timed" not in said, said
