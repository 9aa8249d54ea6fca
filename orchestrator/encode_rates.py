"""The texts a second the embed workers measured on finished runs, kept under ``RAGSCORE_HOME`` for the dry run.

Each run that encoded texts writes a line to ``RAGSCORE_HOME/encode_rates.jsonl`` per device type its embed workers
encoded on (``cpu``, ``cuda``, ``mps``: the model's own device, not the suite's setting, so that with ``auto`` a GPU
host's rate is not taken for a CPU host's): its run id, its embedding model, the device, whether it ran embedded or on
a cluster, the ``workers`` that encoded there and their ``encoded`` / ``encode_ms`` (the time inside the model's
encode calls summed over those workers, as ``summary.embedding``'s ``encoders`` says). A resume (whose summary counts
the whole run) replaces its run's earlier lines. The file keeps the last :data:`KEPT_RUNS` lines, rewritten whole
under a lock (``encode_rates.jsonl.lock``, waited for :data:`LOCK_WAIT_S` at most) so that runs finishing at once lose
none. The dry run of a suite with the same model and mode reads the last :data:`RECENT_RUNS` of them on the device a
run would encode on: their texts over their encode time is one worker's rate, times the embed workers it assumes (on a
cluster, those that say they run where there are some) the rate it estimates the encoding at (:func:`measured_rate`),
in place of the assumed one. Nothing in it is secret; a
line it cannot read (torn, not a measure) is skipped, and a file it cannot write, or whose lock it does not get in
time, costs the run nothing but a warning.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from ragscore_workers.embedding import device_type
from ragscore_workers.schemas import EmbeddingConfig

__all__ = [
    "KEPT_RUNS",
    "LOCK_WAIT_S",
    "RATES_FILE",
    "RECENT_RUNS",
    "MeasuredRate",
    "measured_rate",
    "record_rate",
]

log = logging.getLogger(__name__)

#: The file under ``RAGSCORE_HOME`` the runs' measures are appended to.
RATES_FILE = "encode_rates.jsonl"
#: How many of the latest runs like it (model, device, mode) the dry run's rate is of.
RECENT_RUNS = 5
#: How many runs' lines the file keeps (the latest): it does not grow with every run.
KEPT_RUNS = 50
#: Seconds a run waits for the file's lock before it skips its line with a warning: a holder stuck (on a network
#: home) must not hang every run's end; the rates are a hint, a line lost costs nothing else.
LOCK_WAIT_S = 10.0
#: Seconds between two tries of the lock.
LOCK_RETRY_S = 0.05


@dataclass(frozen=True)
class MeasuredRate:
    """What the latest runs like this one measured: ``texts`` encoded in ``encode_s`` (summed over the workers that
    encoded them) over ``runs`` runs, on ``device``; the estimate assumes ``workers`` embed workers encode at once."""

    runs: int
    texts: int
    encode_s: float
    #: The device type the runs encoded on (``cpu``, ``cuda``, ``mps``).
    device: str = "cpu"
    #: The embed workers the estimate assumes: an embedded run's, else the most worker processes one of the runs
    #: encoded on (a guess: not known to have encoded at once).
    workers: int = 1
    #: How ``device`` was chosen where the suite says ``auto`` (what the latest run in its mode encoded on the most);
    #: empty where the suite names it.
    picked: str = ""
    #: Where ``workers`` is from: ``given`` (an embedded run's pool), ``runs`` (the most processes one of the runs
    #: encoded on: a cluster's, guessed) or ``alive`` (the embed worker processes of the cluster's broker that say in
    #: the run store that they run: ``ragscore_workers.alive``).
    workers_from: Literal["given", "runs", "alive"] = "given"

    @property
    def per_worker(self) -> float:
        """Texts a second one worker encoded."""
        return self.texts / self.encode_s

    @property
    def texts_per_s(self) -> float:
        """Texts a second :attr:`workers` encode at once."""
        return self.per_worker * self.workers


def record_rate(home: Path, run_id: str, config: EmbeddingConfig, mode: str, embedding: dict[str, Any]) -> None:
    """Record run ``run_id``'s measures (``summary.embedding``'s ``encoders``: per device, the workers that encoded
    there, their texts and summed encode time) for runs of ``config`` in ``mode`` (``embedded`` or ``cluster``), in
    place of its earlier ones; nothing where it encoded nothing."""
    lines = [{"run": run_id, "model": config.model, "device": device, "mode": mode, **measure, "at": round(time.time())}
             for device, measure in _encoders(config, embedding).items()]  # fmt: skip
    if not lines:
        return
    path = home / RATES_FILE
    try:
        home.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(f"{RATES_FILE}.lock"), "a") as lock:
            if not _locked(lock):
                log.warning("did not record the run's encode rate in %s: another run has held its lock for over %s s "
                            "(a stuck process, or a network home): the dry run estimates without it", path,
                            LOCK_WAIT_S)  # fmt: skip
                return
            _rewrite(path, lines)
    except OSError as exc:
        log.warning("could not record the run's encode rate in %s: %s", path, exc)


def _encoders(config: EmbeddingConfig, embedding: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The run's measures per device type, each ``workers``, ``encoded`` and ``encode_ms``: its ``encoders``, else (a
    summary of workers that did not write them) its totals on the device its suite names, as one worker's (none on
    ``auto``: which device they ran on is not known)."""
    encoders = embedding.get("encoders")
    if not isinstance(encoders, dict):
        totals = {"workers": 1, "encoded": embedding.get("encoded"), "encode_ms": embedding.get("encode_ms")}
        encoders = {} if config.device == "auto" else {config.device: totals}
    out: dict[str, dict[str, int]] = {}
    for device, measure in encoders.items():
        if isinstance(measure, dict) and all(_positive(measure, k) for k in ("workers", "encoded", "encode_ms")):
            out[device_type(device)] = {k: measure[k] for k in ("workers", "encoded", "encode_ms")}
    return out


def _locked(lock: IO[str]) -> bool:
    """Take ``lock``'s exclusive lock, trying for up to :data:`LOCK_WAIT_S` (False: not taken)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(LOCK_RETRY_S)


def _rewrite(path: Path, lines: list[dict[str, Any]]) -> None:
    """Write the file anew with ``lines`` in place of their run's earlier ones, its latest :data:`KEPT_RUNS` lines
    kept: into a temporary file of its own beside it, then put in its place (a dry run reading it meanwhile, or a
    disk filling up, never sees it empty or cut short; two writers that both hold the lock, on a home mounted without
    locks, do not write into the same file)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = ""
    run = lines[0]["run"]
    kept = _latest([m for m in _parsed(text) if m.get("run") != run] + lines)[-KEPT_RUNS:]
    fd, written = tempfile.mkstemp(prefix=f"{RATES_FILE}.", suffix=".new", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("".join(json.dumps(m) + "\n" for m in kept))
        os.replace(written, path)
    except BaseException:
        Path(written).unlink(missing_ok=True)
        raise


def measured_rate(home: Path, config: EmbeddingConfig, mode: str, workers: int | None = None) -> MeasuredRate | None:
    """The rate the last :data:`RECENT_RUNS` runs of ``config``'s model in ``mode`` measured on the device a run would
    encode on (:func:`_device`; None: no such run, or that device not known); ``workers``: the embed workers the
    estimate assumes (None: the most those runs encoded on)."""
    try:
        text = (home / RATES_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    measures = [m for m in _latest(_parsed(text))  # a line of before devices were recorded may say "auto": not one
                if m.get("model") == config.model and m.get("mode") == mode and m.get("device") != "auto"]  # fmt: skip
    found = _device(config, mode, measures)
    if found is None:
        return None
    device, picked = found
    like = [m for m in measures if m.get("device") == device][-RECENT_RUNS:]
    if not like:
        return None
    seen = max(m.get("workers", 1) for m in like)  # a line of before the workers were recorded: one worker's
    encode_s = sum(m["encode_ms"] for m in like) / 1000
    texts = sum(m["encoded"] for m in like)
    return MeasuredRate(
        len(like), texts, encode_s, device, workers or seen, picked, "runs" if workers is None else "given"
    )


def _device(config: EmbeddingConfig, mode: str, measures: list[dict[str, Any]]) -> tuple[str, str] | None:
    """The device type a run of ``config`` in ``mode`` would encode on, and how it was chosen for ``auto``: the one
    the latest run in ``mode`` (of ``measures``) encoded the most texts on (None: no such run). Not what auto would
    pick here: that imports torch, seconds of a dry run that must stay quick; an embedded run's home is this host's."""
    if config.device != "auto":
        return device_type(config.device), ""
    if not measures:
        return None
    latest = [m for m in measures if m.get("run") == measures[-1].get("run")]
    device = str(max(latest, key=lambda m: m["encoded"])["device"])
    return device, f"what device auto ran on the most in your last {mode} run"


def _parsed(text: str) -> list[dict[str, Any]]:
    """The measures of the file's lines, in order; a line that is not one (torn by a full disk or a crash) left out."""
    out = []
    for line in text.splitlines():
        try:
            measure = json.loads(line)
        except ValueError:
            continue
        if isinstance(measure, dict) and all(_positive(measure, k) for k in ("encoded", "encode_ms")):
            if "workers" not in measure or _positive(measure, "workers"):  # a line of before they were recorded: one
                out.append(measure)
    return out


def _latest(measures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``measures`` with only the last of each run's on each device (where it names its run), in the order of those
    kept."""
    last = {(m["run"], m.get("device")): i for i, m in enumerate(measures) if isinstance(m.get("run"), str)}
    return [
        m for i, m in enumerate(measures) if not isinstance(m.get("run"), str) or last[m["run"], m.get("device")] == i
    ]


def _positive(measure: dict[str, Any], name: str) -> bool:
    value = measure.get(name)
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
