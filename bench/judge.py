"""answer_accuracy under a provider rate limit: ragscore's 4 judge workers vs Ragas 0.4, same fake endpoint.

    python -m bench.judge [--n 1000] [--rpm 600] [--tpm 150000] [--latency S] [--count-rejected]
                          [--no-retry-after] [--ragas-rounds R] [--told-rpm N] [--skip-ragas]

Provider: the fake of ``tests/fakes/fake_provider.py``, a real HTTP server in this process, limited to
``rpm`` requests and ``tpm`` tokens per sliding minute (429 + ``retry-after`` beyond). Each item's question
carries a ``[[rating=R]]`` marker (R in 0/2/4, seeded), so every judge reply is the bare number ``R``: both
tools read it, and each item's right score is R/4.
ragscore: a private redis-server + 4 ``ragscore worker --queues judge`` processes (default pools), the run
submitted from here in cluster mode and timed from submit to the written summary.
Ragas: ``ragas==0.4.3`` in its own venv (``bench/.ragas-venv``, installed here when absent),
``ragas.evaluate`` with its ``AnswerAccuracy`` (``_nv_metrics``) and defaults, through ``ChatOpenAI``
pointed at the same fake, reset to an empty window; timed around ``evaluate``.
Measured from the fake's own records: requests per complete minute from the first answered one ÷ ``rpm``
(goal >= 0.95); span efficiency = the earliest the last call could be answered under a sliding-minute
limit ÷ when it was; 429s received (goal <= 1% of calls); prompts answered twice (quota spent twice);
items unscored and those lost to 429 (goal 0); wall ragscore ÷ wall Ragas (goal <= 0.5), Ragas NaNs;
"right" = items whose score is the R/4 the prompt asked for.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import print_table, qa_rows, write_rows

ROOT = Path(__file__).resolve().parents[1]
RAGAS_VENV = ROOT / "bench" / ".ragas-venv"
RAGAS_PINS = ["ragas==0.4.3", "langchain-community<0.4"]
WORKERS = 4
MODEL = "fake-judge"
RATINGS = (0, 2, 4)

# Runs in the Ragas venv: argv = rows.json, out.json, base_url, model. Only Ragas's defaults (RunConfig: 16
# workers, timeout 180 s; ChatOpenAI: the openai client's 2 retries, which sleep a retry-after of at most
# 60 s and otherwise back off 0.5 s, then 1 s; a call that still fails makes the item NaN).
RAGAS_SCRIPT = """
import json, math, sys, time, warnings
warnings.filterwarnings("ignore")
t0 = time.perf_counter()
from langchain_openai import ChatOpenAI
from ragas import EvaluationDataset, evaluate
from ragas.llms import LangchainLLMWrapper
from ragas.metrics import AnswerAccuracy
imported = time.perf_counter() - t0
rows = json.load(open(sys.argv[1]))
data = EvaluationDataset.from_list(
    [{"user_input": r["question"], "response": r["answer"], "reference": r["reference"]} for r in rows])
llm = LangchainLLMWrapper(ChatOpenAI(model=sys.argv[4], base_url=sys.argv[3], api_key="not-needed"))
start = time.perf_counter()
result = evaluate(data, metrics=[AnswerAccuracy()], llm=llm, show_progress=False)
wall = time.perf_counter() - start
scores = [None if s is None or math.isnan(s) else float(s) for s in result["nv_accuracy"]]
json.dump({"wall_s": wall, "import_s": imported, "scores": scores}, open(sys.argv[2], "w"))
"""


def judge_rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """QA rows whose question tells the fake which rating to give (``expected`` = that rating / 4)."""
    rng = random.Random(seed)
    rows = []
    for row in qa_rows(n, seed=seed):
        rating = rng.choice(RATINGS)
        rows.append({"id": row["id"], "question": f"{row['question']} [[rating={rating}]]", "answer": row["answer"],
                     "reference": row["reference"], "expected": rating / 4})  # fmt: skip
    return rows


def window_use(log: list[dict[str, Any]], rpm: int, tpm: int | None) -> dict[str, Any]:
    """Admitted requests (and tokens) per complete minute from the first admitted one, from the fake's log."""
    ok = [e for e in log if e["status"] == 200]
    if not ok:
        return {"minutes": [], "rpm": None, "rpm_ratio": None, "tpm_ratio": None, "span_s": 0.0}
    t0, span = ok[0]["t"], ok[-1]["t"] - ok[0]["t"]
    full = int(span // 60)
    reqs, toks = [0] * full, [0] * full
    for e in ok:
        j = int((e["t"] - t0) // 60)
        if j < full:
            reqs[j] += 1
            toks[j] += e["tokens"]
    mean = sum(reqs) / full if full else None
    return {
        "minutes": reqs,
        "rpm": mean,
        "rpm_ratio": mean / rpm if mean is not None else None,
        "tpm_ratio": sum(toks) / full / tpm if full and tpm else None,
        "span_s": span,
        # The earliest the last call could go under a sliding-minute limit, ÷ when it went.
        "span_efficiency": 60 * ((len(ok) - 1) // rpm) / span if len(ok) > rpm and span else None,
    }


def _wait_for_workers(expected: int, timeout_s: float = 120.0) -> None:
    from ragscore_workers.app import app

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0) or []) >= expected:
            return
    raise RuntimeError(f"fewer than {expected} judge workers answered within {timeout_s:.0f} s")


def run_ragscore(rows: list[dict[str, Any]], base_url: str, rpm: int, tpm: int | None, tmp: Path) -> dict[str, Any]:
    """One cluster run of answer_accuracy: private redis-server + 4 judge worker processes."""
    from orchestrator.progress import QuietProgress
    from orchestrator.runner import connect, run
    from orchestrator.suite import load_suite
    from tests.support import RedisProcess, WorkerProcess

    suite = {"name": "bench-judge", "metrics": ["answer_accuracy"],
             "judge": {"provider": "openai", "model": MODEL, "base_url": base_url, "rpm": rpm, "tpm": tpm}}  # fmt: skip
    path = write_rows(tmp / "rows.jsonl", [{k: v for k, v in r.items() if k != "expected"} for r in rows])
    redis_server = RedisProcess(tmp / "redis").start()
    workers = [WorkerProcess(redis_server.url, "judge", tmp / f"w{i}") for i in range(WORKERS)]
    try:
        for w in workers:
            w.start()
        connect(redis_server.url)
        _wait_for_workers(WORKERS)
        start = time.perf_counter()
        summary = run(path, load_suite(suite), tmp / "out", broker=redis_server.url, progress=QuietProgress())
        wall = time.perf_counter() - start
    finally:
        for w in workers:
            w.stop()
        redis_server.stop()
    results = {}
    with (tmp / "out" / "items.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            results[item["id"]] = item["metrics"]["answer_accuracy"]
    scores = [results[r["id"]]["score"] for r in rows]
    unscored = [results[r["id"]] for r in rows if results[r["id"]]["score"] is None]
    lost_429 = [m for m in unscored if "429" in json.dumps(m) or "rate limit" in json.dumps(m).lower()]
    return {"wall_s": wall, "scores": scores, "unscored": len(unscored), "lost_429": len(lost_429),
            "judge": summary.judge, "examples": [m.get("error") or m.get("details") for m in unscored[:3]]}  # fmt: skip


def ensure_ragas(venv: Path = RAGAS_VENV) -> Path:
    """The Ragas venv's python, creating the venv and installing the pinned Ragas when absent."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import ragas, langchain_openai; assert ragas.__version__ == '0.4.3'"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"installing {' '.join(RAGAS_PINS)} into {venv} (about a minute) ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *RAGAS_PINS], check=True)
    return python


def run_ragas(python: Path, rows: list[dict[str, Any]], base_url: str, tmp: Path) -> dict[str, Any]:
    """Ragas 0.4's evaluate() over the same rows in its own venv (stderr, its warnings, to a log file)."""
    (tmp / "ragas-rows.json").write_text(json.dumps(rows), encoding="utf-8")
    env = {**os.environ, "RAGAS_DO_NOT_TRACK": "true", "OPENAI_API_KEY": "not-needed"}
    args = [str(python), "-c", RAGAS_SCRIPT, str(tmp / "ragas-rows.json"), str(tmp / "ragas-out.json"), base_url]
    with (tmp / "ragas.log").open("wb") as log:
        proc = subprocess.run([*args, MODEL], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    if proc.returncode != 0:
        raise RuntimeError(f"Ragas failed ({proc.returncode}):\n{(tmp / 'ragas.log').read_text()[-3000:]}")
    out = json.loads((tmp / "ragas-out.json").read_text())
    out["unscored"] = sum(s is None for s in out["scores"])
    return out


def rerun_nan(python: Path, rows: list[dict[str, Any]], first: dict[str, Any], base_url: str, tmp: Path,
              rounds: int) -> dict[str, Any]:  # fmt: skip
    """Re-evaluate the items Ragas returned as NaN, as a user who needs every score would (at once, same
    provider window), until none is left, a round scores none of them, or ``rounds`` evaluate() calls in
    all; walls summed."""
    scores, wall, done = list(first["scores"]), first["wall_s"], 1
    while done < rounds and any(s is None for s in scores):
        todo = [i for i, s in enumerate(scores) if s is None]
        again = run_ragas(python, [rows[i] for i in todo], base_url, tmp)
        for i, s in zip(todo, again["scores"], strict=True):
            scores[i] = s
        wall, done = wall + again["wall_s"], done + 1
        if again["unscored"] == len(todo):
            break  # no progress: the provider's window stays full of its own rejected retries
    return {"wall_s": wall, "scores": scores, "unscored": sum(s is None for s in scores), "rounds": done}


def _right(scores: list[float | None], rows: list[dict[str, Any]]) -> int:
    return sum(s is not None and math.isclose(s, r["expected"]) for s, r in zip(scores, rows, strict=True))


def answered_twice(fake: Any) -> int:
    """Answers beyond one per distinct prompt: quota spent twice on one question (a lower bound when some
    prompt never got an answer)."""
    return max(0, fake.stats().get("ok", 0) - len(set(fake.prompts)))


def measure(out: dict[str, Any], rows: list[dict[str, Any]], fake: Any, rpm: int, tpm: int | None) -> dict[str, Any]:
    """One tool's numbers: its own (wall time, unscored items) and the fake's (calls, 429s, use of the limit)."""
    stats, use = fake.stats(), window_use(fake.log, rpm, tpm)
    calls, rate_limited = stats.get("requests", 0), stats.get("rate_limited", 0)
    return {
        "wall_s": round(out["wall_s"], 1), "calls": calls, "ok": stats.get("ok", 0), "rate_limited": rate_limited,
        "rate_limited_pct": round(100 * rate_limited / calls, 2) if calls else None,
        "answered_twice": answered_twice(fake), "per_minute": use["minutes"], "rpm": use["rpm"],
        "rpm_ratio": use["rpm_ratio"], "tpm_ratio": use["tpm_ratio"], "span_efficiency": use["span_efficiency"],
        "unscored": out["unscored"], "right": _right(out["scores"], rows),
    }  # fmt: skip


def _cells(name: str, n: int, m: dict[str, Any]) -> list[Any]:
    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    return [name, n, m["calls"], m["rate_limited"], fmt(m["rate_limited_pct"], ".2f"), m["answered_twice"],
            fmt(m["rpm"], ".0f"), fmt(m["rpm_ratio"], ".3f"), fmt(m["span_efficiency"], ".3f"), m["wall_s"],
            m["unscored"], m["right"]]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="items")
    parser.add_argument("--rpm", type=int, default=600, help="the fake's requests per minute")
    parser.add_argument("--tpm", type=int, default=150_000, help="the fake's tokens per minute (0: none)")
    parser.add_argument("--skip-ragas", action="store_true", help="measure ragscore only")
    parser.add_argument(
        "--told-rpm",
        type=int,
        help="the rpm ragscore's suite states (default: the fake's; a higher one"
        " checks a misconfigured limit: the provider's 429s and headers must still lose nothing)",
    )
    parser.add_argument("--latency", type=float, default=0.0, help="the fake's seconds per reply")
    parser.add_argument(
        "--ragas-rounds",
        type=int,
        default=1,
        help="re-run Ragas on its NaN items until all are scored: at most R evaluate() calls",
    )
    parser.add_argument(
        "--count-rejected", action="store_true",
        help="429'd requests use up the window too, as OpenAI documents for its limits",
    )  # fmt: skip
    parser.add_argument(
        "--no-retry-after", action="store_true",
        help="429s carry no retry-after header (gateways, some servers): only the message and reset headers",
    )  # fmt: skip
    args = parser.parse_args()
    tpm = args.tpm or None
    os.environ.pop("RAGSCORE_BROKER_URL", None)
    from tests.fakes.fake_provider import FakeProvider

    rows = judge_rows(args.n)
    python = None if args.skip_ragas else ensure_ragas()
    result: dict[str, Any] = {"benchmark": "judge", "cpus": os.cpu_count(), "n": args.n, "rpm": args.rpm, "tpm": tpm,
                              "latency_s": args.latency, "count_rejected": args.count_rejected,
                              "retry_after": not args.no_retry_after,
                              "told_rpm": args.told_rpm or args.rpm}  # fmt: skip
    fake_provider = FakeProvider(rpm=args.rpm, tpm=tpm, latency_s=args.latency, count_rejected=args.count_rejected,
                                 retry_after=not args.no_retry_after)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rsj-", dir="/tmp") as tmp_s, fake_provider as fake:
        tmp = Path(tmp_s)
        os.environ["RAGSCORE_HOME"] = str(tmp / "home")
        told_rpm = args.told_rpm or args.rpm
        ours = run_ragscore(rows, fake.openai_base_url, told_rpm, tpm, tmp)
        result["ragscore"] = measure(ours, rows, fake, args.rpm, tpm) | {
            "lost_to_429": ours["lost_429"], "judge": ours["judge"], "unscored_examples": ours["examples"]}  # fmt: skip
        table = [_cells("ragscore", args.n, result["ragscore"])]
        if python is not None:
            fake.reset()  # an empty window, as a fresh provider minute
            theirs = run_ragas(python, rows, fake.openai_base_url, tmp)
            result["ragas"] = measure(theirs, rows, fake, args.rpm, tpm) | {"import_s": round(theirs["import_s"], 1)}
            table.append(_cells("ragas 0.4.3", args.n, result["ragas"]))
            result["wall_ratio"] = round(ours["wall_s"] / theirs["wall_s"], 3)
            if args.ragas_rounds > 1 and theirs["unscored"]:
                done = rerun_nan(python, rows, theirs, fake.openai_base_url, tmp, args.ragas_rounds)
                result["ragas_until_scored"] = measure(done, rows, fake, args.rpm, tpm) | {"rounds": done["rounds"]}
                table.append(_cells(f"ragas, NaN re-run ({done['rounds']} rounds)", args.n,
                                    result["ragas_until_scored"]))  # fmt: skip
                if not done["unscored"]:
                    result["until_scored_ratio"] = round(ours["wall_s"] / done["wall_s"], 3)
    headers = ["tool", "items", "calls", "429s", "429 %", "answered twice", "req/full min", "÷ rpm", "span eff.",
               "wall s", "unscored/NaN", "right"]  # fmt: skip
    print_table(headers, table, result)


if __name__ == "__main__":
    main()
