"""Write a finished run's files: items.jsonl, items.csv, summary.json, failed_rows.jsonl, run_info.json,
report.md and report.html, streaming the items once whatever the formats asked for."""

from __future__ import annotations

import csv
import errno
import fcntl
import hashlib
import json
import os
import stat
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO

from ragscore_workers.counts import agree
from ragscore_workers.errors import ConfigError
from ragscore_workers.fastjson import dumps_utf8
from ragscore_workers.schemas import ITEM_META_FIELDS, RunSummary
from ragscore_workers.store import RawItem, RunStore

from ..atomic_file import (
    NotRegularFile,
    atomic_writer,
    copy_atomic,
    make_out_dir,
    name_part,
    open_regular,
    write_text_atomic,
)
from ..gates import GATES_FILE, GateResult, write_gate_record
from .html import MAX_FAILED_ROWS, render_html
from .itemstats import ItemStats
from .markdown import render_markdown
from .previous import PREVIOUS, next_numbered, run_named
from .source import ANSWERS, RUN_INFO, RunData, from_store
from .texts import read_texts

__all__ = [
    "ANSWERS",
    "COMPARE_NAMES",
    "FORMATS",
    "OUTPUT_NAMES",
    "ROWS_FILE",
    "ROWS_STAGED",
    "compare_dir",
    "first_failed_row",
    "missing_reports",
    "move_to_previous",
    "refuse_a_bad_previous",
    "refuse_files_of_others",
    "replaced_comparison",
    "report_digests",
    "write_outputs",
    "write_recorded",
    "write_reports",
]

#: A lone surrogate that reached a report (rows holding one are refused, provider text is cleaned) is written
#: as its ``\\udfff`` escape, which JSON reads back as the same string, instead of failing the whole report.
UNENCODABLE = "backslashreplace"

#: Every file a run writes into its ``--out`` DIR (``run.json`` first, the rest with the reports).
OUTPUT_NAMES = frozenset({"run.json", "items.jsonl", "items.csv", "summary.json", "failed_rows.jsonl", RUN_INFO,
                          "report.md", "report.html", ANSWERS, GATES_FILE})  # fmt: skip

#: Where ``evaluate()`` copies rows given in memory, in its ``out`` DIR: the dataset its run, and a resume, read; that
#: run's as its reports are, moved with them (:data:`MOVED_NAMES`).
ROWS_FILE = "evaluate-rows.jsonl"
#: Where ``evaluate()`` writes that copy first, in ``out``: renamed :data:`ROWS_FILE` once the run goes ahead, after
#: an earlier run's reports (its own copy with them) moved to ``out/previous/RUN_ID``; removed where not, and where
#: a call cut off left it, by the next run into ``out`` that goes ahead (never read as rows).
ROWS_STAGED = ".evaluate-rows.staged.jsonl"
#: What :func:`move_to_previous` moves: a run's files of :data:`OUTPUT_NAMES` and evaluate()'s copy of its rows.
MOVED_NAMES = OUTPUT_NAMES | {ROWS_FILE}

#: The reports every finished run has in its DIR (run_info.json and answers.jsonl where it has them).
REPORT_NAMES = ("summary.json", "items.jsonl", "items.csv", "failed_rows.jsonl", "report.md", "report.html")
#: The reports a run writes once into its DIR, never again in place (``ragscore report DIR`` writes the others from
#: them; a target run's resume takes its answers back from answers.jsonl): whose they are is their sha256
#: (:func:`report_digests`, of those it has), recorded where its items leave the store. Not
#: items.csv: nothing reads it back (a resume takes a run's items from items.jsonl, ``ragscore report DIR`` reads
#: items.jsonl, ``ragscore results`` the store), and ``ragscore report DIR --format csv`` writes it again in place.
SOURCE_NAMES = ("items.jsonl", "failed_rows.jsonl", ANSWERS)
#: How a report rendered for run ``{run_id}`` names it within its first bytes: report.md's heading, report.html's title.
_RUN_NAMED = {"report.md": "# ragscore run {run_id}\n", "report.html": " · {run_id}</title>"}

#: The files ``ragscore compare`` writes into its ``--out`` DIR.
COMPARE_NAMES = frozenset({"compare.html", "compare.md"})
#: Where ``ragscore compare`` without ``--out`` writes: a folder of each comparison's own in it (:func:`compare_dir`).
COMPARE_ROOT = Path("ragscore-compare")
#: The longest name :func:`compare_dir` gives a folder (many runs): longer, it is cut and ends with a digest of it.
COMPARE_NAME_MAX = 120

#: items.jsonl lines written at a time.
WRITE_BATCH = 1000

#: What ``write_reports`` can write: html (report.html), md (report.md), csv (items.csv), json (summary.json,
#: items.jsonl, failed_rows.jsonl, run_info.json).
FORMATS = ("html", "md", "csv", "json")


def _fmt(value: float | None) -> str:
    """A score as Python's shortest repr (``0.3333333333333333``), which reads back as the same float: a spreadsheet
    summing items.csv gets the numbers items.jsonl holds (6 significant digits did not)."""
    return "" if value is None else repr(float(value))


#: A text cell opening with one of these is a formula to Excel, LibreOffice and Google Sheets.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    """A text cell that a spreadsheet shows as text: a leading ``'`` before a formula start (OWASP's advice
    against CSV injection: an id ``=HYPERLINK(...)`` would otherwise run when the file is opened)."""
    return "'" + value if value.startswith(FORMULA_START) else value


def _csv_entries(entries: list[str]) -> str:
    """The ``errors`` or ``unscorable`` cell: its ``output: message`` entries as a JSON array, as items.jsonl writes
    ``errors`` (``["exact_match: no reference"]``; empty without any), so ``json.loads`` splits them back whatever a
    message holds (a ``; `` join did not). A ``[`` is no formula start: the cell needs no :func:`csv_text`."""
    return dumps_utf8(entries) if entries else ""


def _csv_row(item: RawItem, outputs: list[str], errors: list[str]) -> list[str]:
    return (
        [csv_text(item.meta.get(name) or "") for name in ITEM_META_FIELDS]
        + [_fmt(item.metrics[o].get("score")) if o in item.metrics else "" for o in outputs]
        + [_csv_entries(errors), _csv_entries(item.unscorable)]
    )


def first_failed_row(out_dir: Path) -> dict[str, Any] | None:
    """The first line of ``out_dir``'s failed_rows.jsonl (its ``line``, a JSON list's ``row`` instead, a JSON object's
    ``row`` and ``key``, ``error``, and ``index`` for rows given in memory), for messages that name it; None when the
    file is missing or unreadable."""
    try:
        with (out_dir / "failed_rows.jsonl").open(encoding="utf-8") as fh:
            first = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    return first if isinstance(first, dict) and ("line" in first or "row" in first) and "error" in first else None


def missing_reports(out_dir: Path, summary: RunSummary, digests: Mapping[str, str] | None = None) -> str | None:
    """What keeps ``out_dir`` from holding the whole reports of the run of ``summary`` (the store's: each report is
    written whole, in place, by :func:`write_reports`): ``items.jsonl is missing``, a summary.json of another run or
    not the store's, a report another run's (:func:`_not_the_runs`); None where it holds them."""
    gone = [name for name in REPORT_NAMES if not (out_dir / name).is_file()]
    if gone:
        return f"{', '.join(gone)} {agree(len(gone), 'is', 'are')} missing"
    try:
        written = RunSummary.model_validate_json((out_dir / "summary.json").read_bytes())
    except (OSError, ValueError):  # pydantic's ValidationError is a ValueError
        return "its summary.json is unreadable"
    if written.run_id != summary.run_id:
        return f"its summary.json is run {written.run_id}'s"
    if written != summary:
        return f"its summary.json is not the store's summary of run {summary.run_id}"
    if others := _not_the_runs(out_dir, summary.run_id, digests or {}):
        said = agree(len(others), "is not the one", "are not the ones")
        return f"its {', '.join(others)} {said} run {summary.run_id} wrote there (another run's, or edited)"
    return None


def _not_the_runs(out_dir: Path, run_id: str, digests: Mapping[str, str]) -> list[str]:
    """The reports in ``out_dir`` that are not run ``run_id``'s: of :data:`SOURCE_NAMES`, those whose sha256 is not
    the one ``digests`` recorded (none recorded: a release before the record, unchecked); report.md and report.html
    that do not name it (:data:`_RUN_NAMED`). Another run that wrote into DIR and stopped before its summary.json left
    its items.jsonl beside this run's summary."""
    others = [name for name in SOURCE_NAMES if name in digests and _held(out_dir / name) != digests[name]]
    named = [
        name for name, sign in _RUN_NAMED.items() if sign.format(run_id=run_id).encode() not in _head(out_dir / name)
    ]
    return others + named


def report_digests(out_dir: Path) -> dict[str, str]:
    """The sha256 of each of :data:`SOURCE_NAMES` in ``out_dir``: what :func:`missing_reports` checks as the run's."""
    return {name: digest for name in SOURCE_NAMES if (digest := _held(out_dir / name))}


def refuse_files_of_others(out_dir: Path, option: str = "--out", names: frozenset[str] = OUTPUT_NAMES) -> None:
    """ConfigError (exit 2) when ``out_dir`` holds files of a run's names (summary.json, items.csv, ...; of
    ``names``, the files about to be written) and no ragscore run wrote them: its reports would replace them. A DIR
    of an earlier run (its run.json or summary.json names one) is not refused: a new run replaces that run's
    reports, and says so; of names no run writes (compare.md), a file there is refused unless ragscore wrote it."""
    if _holds_a_run(out_dir):
        names = names - OUTPUT_NAMES  # a run wrote these; not compare.md, which no run writes
    # not a directory of such a name: a report cannot replace it (its write fails, and says so); nor a report that
    # ``ragscore report`` (one format, no run.json) or ``ragscore compare`` wrote
    found = [out_dir / name for name in names if os.path.lexists(out_dir / name)]
    theirs = sorted(path.name for path in found if not path.is_dir() and not _ours(path))
    if theirs:
        them = agree(len(theirs), "it", "them")
        raise ConfigError(
            f"{out_dir} holds {', '.join(theirs)}, which no ragscore run wrote: the reports would replace {them}. "
            f"Nothing was written; choose another {option} or remove {them}"
        )


def refuse_a_bad_previous(out_dir: Path, option: str = "--out") -> None:
    """ConfigError (exit 2), before a new run starts, where ``out_dir`` holds reports to move
    (:func:`move_to_previous`) and its ``previous`` is not a folder of ours to move them into: a file, a symbolic
    link, a folder on another filesystem (a rename cannot cross it) or one this user may not write."""
    previous = out_dir / PREVIOUS
    if not _reports_held(out_dir) or not os.path.lexists(previous):
        return
    fix = f"Nothing was sent; rename or remove {previous}, or choose another {option}"
    if previous.is_symlink() or not previous.is_dir():
        kind = "a symbolic link" if previous.is_symlink() else "not a folder"
        raise ConfigError(f"{out_dir} holds an earlier run's reports, to be moved into {previous}/, which is {kind}. "
                          f"{fix}")  # fmt: skip
    if previous.stat().st_dev != out_dir.stat().st_dev:
        raise ConfigError(f"{out_dir} holds an earlier run's reports, to be moved into {previous}/, which is on "
                          f"another filesystem (mounted there). {fix}")  # fmt: skip
    if not os.access(previous, os.W_OK | os.X_OK):
        raise ConfigError(f"{out_dir} holds an earlier run's reports, to be moved into {previous}/, which this user "
                          f"may not write. {fix}")  # fmt: skip


def move_to_previous(out_dir: Path, option: str = "--out") -> Path | None:
    """Move the reports of the run in ``out_dir`` (its files of :data:`MOVED_NAMES`, run.json with them) into
    ``out_dir/previous/RUN_ID/``, before a new run writes its own there: renamed, never copied (instant whatever their
    size). RUN_ID is the one its run.json names, else its summary.json's (``ragscore results``), else the time; a
    ``-2``, ``-3``... follows a name taken already. Returns that folder; None where ``out_dir`` holds no report (a
    run.json alone: a run its Redis lost before it wrote any). ConfigError where a rename fails (checked before by
    :func:`refuse_a_bad_previous`): what moved is moved back."""
    held = _reports_held(out_dir)
    if not held:
        return None
    base = run_named(out_dir) or time.strftime("%Y%m%d-%H%M%S")
    folder: Path | None = None
    moved: list[str] = []
    try:
        (out_dir / PREVIOUS).mkdir(exist_ok=True)
        folder = out_dir / PREVIOUS / next_numbered(out_dir / PREVIOUS, base)
        folder.mkdir()
        for name in held:
            os.rename(out_dir / name, folder / name)
            moved.append(name)
    except OSError as exc:
        stuck = [name for name in moved if folder is None or not _renamed(folder / name, out_dir / name)]
        if folder is not None and not stuck:
            with suppress(OSError):
                folder.rmdir()
        where = f"{', '.join(stuck)} moved to {folder}/, the others left" if stuck else "all left where they are"
        raise ConfigError(
            f"{out_dir} holds an earlier run's reports, which could not be moved into {out_dir / PREVIOUS}/ "
            f"({exc.strerror or exc}; {where}). Nothing was sent; rename or remove {out_dir / PREVIOUS}, or choose "
            f"another {option}"
        ) from exc
    return folder


def _renamed(source: Path, target: Path) -> bool:
    """Whether ``source`` was renamed to ``target`` (False where that failed too)."""
    try:
        os.rename(source, target)
    except OSError:
        return False
    return True


def _reports_held(out_dir: Path) -> list[str]:
    """The files of :data:`MOVED_NAMES` in ``out_dir``, sorted; none where it holds no report (a run.json alone, with
    evaluate()'s copy of its rows or not)."""
    held = sorted(name for name in MOVED_NAMES if os.path.isfile(out_dir / name))
    return held if set(held) - {"run.json", ROWS_FILE} else []


def compare_dir(runs: Iterable[RunData], baseline: str | None = None, seed: int | None = None) -> Path:
    """Where ``ragscore compare`` without ``--out`` writes: ``ragscore-compare/A-vs-B`` named by its runs' ids in
    their order (a DIR's name where its summary has none), then ``-baseline-X`` and ``-seed-N`` where given. Each
    comparison has a folder of its own, so a second compare of other runs keeps the first's files (one
    ``./ragscore-compare`` replaced them); the same comparison again writes the same folder."""
    names = ["-vs-".join(name_part(run.summary.run_id or Path(run.origin).name) for run in runs)]
    if baseline is not None:
        names.append(f"baseline-{name_part(baseline)}")
    if seed is not None:
        names.append(f"seed-{seed}")
    name = "-".join(names)
    if len(name) > COMPARE_NAME_MAX:  # a folder's name has 255 bytes at most
        name = f"{name[: COMPARE_NAME_MAX - 13]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return COMPARE_ROOT / name


def replaced_comparison(out_dir: Path, markdown: str) -> str | None:
    """What the compare.md in ``out_dir`` compared (its heading's ``bm25 vs dense``) where ``markdown``, the one about
    to be written, is another comparison: a compare into the same ``--out`` DIR replaces it; None where there is none,
    or it is this very one (the same runs, baseline and seed read alike)."""
    try:
        old = (out_dir / "compare.md").read_text(encoding="utf-8", errors="replace")
    except OSError:  # none (a directory of that name: its write fails, and says so)
        return None
    return None if old == markdown else old.partition("\n")[0].removeprefix("# ragscore compare: ")


#: In a DIR ragscore wrote a file no head tells from a user's to (``{split}_evaluation.json``, ``consensus --out``):
#: name -> the sha256 of what it wrote there, newest first, and of what it wrote before (an older ragscore wrote one
#: hash, not a list).
WRITTEN_NAME = ".ragscore-written.json"
#: Held (``flock``) around reading, merging and writing :data:`WRITTEN_NAME`, so reports into one DIR at once keep
#: every entry; a file of its own, as the record is replaced, not written in place.
WRITTEN_LOCK = ".ragscore-written.lock"
#: Hashes kept a name: the new file's and the one it replaces are enough for a report killed between writing the
#: record and the file; a few more cost nothing.
WRITTEN_KEPT = 4
#: Seconds a report waits for another to release :data:`WRITTEN_LOCK` (held for milliseconds by a report; longer,
#: a report hung, or another user who can read the lock file holds it): then refused, naming it.
WRITTEN_LOCK_WAIT_S = 30.0


def _written(out_dir: Path) -> dict[str, list[str]]:
    """The record of :data:`WRITTEN_NAME`, name -> hashes (empty when there is none or it cannot be read; a link or
    a FIFO there is not read: :func:`open_regular`)."""
    try:
        fd = open_regular(out_dir / WRITTEN_NAME, os.O_RDONLY)
    except OSError:
        return {}
    try:
        with open(fd, "rb", closefd=False) as fh:
            record = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
    if not isinstance(record, dict):
        return {}
    return {name: [h for h in ([hashes] if isinstance(hashes, str) else hashes) if isinstance(h, str)]
            for name, hashes in record.items() if isinstance(hashes, str | list)}  # fmt: skip


#: flock's answers on a file system without locks (an NFS mount whose lock manager does not answer, some FUSE ones;
#: EBADF: NFS's emulation of an exclusive lock on a lock file another user made, opened read-only).
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EBADF}


@contextmanager
def _record_locked(out_dir: Path, option: str, what: str = "the reports") -> Iterator[None]:
    """Hold the lock on ``out_dir``'s record (:data:`WRITTEN_LOCK`, created when missing) for the block. Never
    through a link (a shared DIR's link would have it make or open a file elsewhere) nor on a FIFO or device; read
    only where another user made it (``flock`` needs no write access; NFS's emulation does, where it is ours)."""
    path = out_dir / WRITTEN_LOCK
    try:
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except PermissionError as denied:
            try:
                fd = open_regular(path, os.O_RDONLY)
            except FileNotFoundError:  # DIR itself denied it: say that
                raise denied from None
    except NotRegularFile as exc:
        raise ConfigError(f"{path} is {exc.strerror}: not the lock file ragscore makes there; remove it") from exc
    except OSError as exc:
        raise ConfigError(f"Cannot write {what} to {out_dir}: {exc.strerror or exc}") from exc
    try:
        deadline = time.monotonic() + WRITTEN_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno in _NO_LOCKS:  # a file system without locks: written unlocked, as before the lock
                    break
                if not isinstance(exc, BlockingIOError):
                    raise ConfigError(f"Cannot lock {path}: {exc.strerror or exc}") from exc
                if time.monotonic() >= deadline:
                    raise ConfigError(
                        f"{path} has been held by another process for {WRITTEN_LOCK_WAIT_S:.0f} s (a report that "
                        f"hangs?): nothing was written; stop it, or choose another {option}"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_recorded(
    path: Path, text: str | Iterable[str], option: str = "--out or --split", what: str = "the reports"
) -> None:
    """Write ``text`` to ``path``, a file no head tells from a user's (another tool's layout: the framework's
    ``{split}_evaluation.json``; a dataset: ``consensus --out``): a file there is replaced only when ragscore wrote
    it there and it was not edited since (its sha256 in :data:`WRITTEN_NAME`) or it holds ``text`` already; any
    other is refused (ConfigError, exit 2), nothing written. ``text`` may come in parts, built as they are taken:
    a file there that cannot be read as one (a FIFO) is refused before any is built, another's at the first part
    that differs from it: the rest is never built. The new file's hash is recorded (beside the one it
    replaces) before the file is written, under a lock: a report killed between the two, or another writing into
    DIR at once, leaves a file that is recorded. A folder at ``path`` is refused before anything is recorded;
    ``what`` names the file in the error when DIR cannot be made or locked."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a file: nothing was written; choose another {option}")
    # checked before DIR or its lock file is made too: a refused report writes nothing
    text = _unless_theirs(path, [text] if isinstance(text, str) else text, option)
    data = text.encode()
    make_out_dir(path.parent, what)
    with _record_locked(path.parent, option, what):
        record, held = _written(path.parent), _held(path)
        if _theirs(held, data, record, path.name):  # another report changed them meanwhile
            raise _refused(path, option)
        _remember(path.parent, path.name, [_sha256(data), *([held] if held else [])])
        write_text_atomic(path, text)


def _remember(out_dir: Path, name: str, hashes: list[str]) -> None:
    """Add ``hashes`` (newest first) to ``name``'s in :data:`WRITTEN_NAME`; under :func:`_record_locked`."""
    record = _written(out_dir)
    record[name] = list(dict.fromkeys([*hashes, *record.get(name, [])]))[:WRITTEN_KEPT]
    write_text_atomic(out_dir / WRITTEN_NAME, json.dumps(record, indent=2, sort_keys=True) + "\n")


def _unless_theirs(path: Path, parts: Iterable[str], option: str) -> str:
    """``parts`` joined; refused (:func:`_refused`) as soon as they cannot be what a file at ``path`` that ragscore
    has no record of writing holds: before any is built where it cannot be read as a file, at the first part
    that differs from its bytes else (a file of an older ragscore, which kept no record, holding them is not)."""
    held = _held(path)
    if held is None or held in _written(path.parent).get(path.name, []):
        return "".join(parts)
    try:
        fh = _open_held(path)
    except OSError:  # a FIFO, a device, a link to one or to nothing, a file that cannot be read
        raise _refused(path, option) from None
    if fh is None:  # removed meanwhile
        return "".join(parts)
    built: list[str] = []
    with fh:
        for part in parts:
            data = part.encode()
            if fh.read(len(data)) != data:
                raise _refused(path, option)
            built.append(part)
        if fh.read(1):
            raise _refused(path, option)
    return "".join(built)


def _theirs(held: str | None, data: bytes, record: dict[str, list[str]], name: str) -> bool:
    """Whether what stands at DIR/``name`` (``held``, :func:`_held`) is a file ragscore has no ``record`` of writing
    there that does not hold ``data`` already."""
    return held is not None and held != _sha256(data) and held not in record.get(name, [])


def _refused(path: Path, option: str) -> ConfigError:
    folder = path.parent if path.parent.parts else "the current folder"  # a bare name (consensus --out FILE): not "."
    return ConfigError(
        f"{folder} holds {path.name}, which ragscore has no record of writing (another tool's or yours, one "
        f"edited since, or an older ragscore's, which kept no record): it would be replaced. Nothing was written; "
        f"choose another {option}, or remove it"
    )


def _open_held(path: Path) -> BinaryIO | None:
    """The regular file at ``path`` (a link followed), open for reading; None where nothing stands that a report
    replaces (no file; a folder, or DIR itself a file: the write says what is wrong); OSError for anything else (a
    FIFO, a device, a link to one or to nothing, a file that cannot be read): not known to be ours, and not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        if path.is_symlink():
            raise NotRegularFile(errno.ENOENT, "a link to nothing", str(path)) from None
        return None
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return open(fd, "rb")  # noqa: SIM115 - the caller closes it
    os.close(fd)
    if stat.S_ISDIR(mode):
        return None
    raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))


def _held(path: Path) -> str | None:
    """The sha256 of the regular file at ``path``, read in chunks (not held); None where nothing stands that a report
    replaces; ``""``, which is no file's hash, for anything else (:func:`_open_held`)."""
    try:
        fh = _open_held(path)
        if fh is None:
            return None
        with fh:  # hashlib.file_digest is Python 3.11+
            digest = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
            return digest.hexdigest()
    except OSError:
        return ""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: How the first bytes of a report ``ragscore report`` writes alone begin (``report --format md|html|csv``), and
#: of ``ragscore compare``'s.
_OUR_HEADS = {
    "report.md": b"# ragscore ",
    "report.html": b"<title>ragscore ",
    "items.csv": ",".join(ITEM_META_FIELDS).encode(),
    "compare.md": b"# ragscore compare: ",
    "compare.html": b"<title>ragscore compare ",
}


def _ours(path: Path) -> bool:
    """Whether ``path`` is a report of ragscore's (by how it begins): one a user's file of that name is not."""
    sign = _OUR_HEADS.get(path.name)
    if sign is None:
        return False
    head = _head(path)
    return sign in head if path.name.endswith(".html") else head.startswith(sign)


def _head(path: Path) -> bytes:
    """The first 4 kB of the file at ``path`` (``b""`` where it cannot be read)."""
    try:
        with path.open("rb") as fh:
            return fh.read(4096)
    except OSError:
        return b""


def _holds_a_run(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds a run ragscore wrote: a run.json, a summary.json (``ragscore results``) or a
    run_info.json naming its run."""
    for name in ("run.json", "summary.json", RUN_INFO):
        try:
            written = json.loads((out_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(written, dict) and "run_id" in written:
            return True
    return False


def write_reports(run: RunData, out_dir: Path, formats: Iterable[str] = FORMATS) -> list[Path]:
    """Write the asked formats into ``out_dir``; returns the files written.

    When ``out_dir`` is the directory the run was read from, its items.jsonl and failed_rows.jsonl (the
    source) are left as they are; elsewhere json writes the run's answers.jsonl first (:func:`_write_answers`).
    """
    wanted = set(formats)
    unknown = wanted - set(FORMATS)
    if unknown:
        raise ValueError(f"unknown report formats {sorted(unknown)}; choose from {', '.join(FORMATS)}")
    make_out_dir(out_dir)
    summary = run.summary
    in_place = run.directory is not None and run.directory.resolve() == out_dir.resolve()
    stats = ItemStats() if wanted & {"html", "md"} else None
    written: list[Path] = []
    if "json" in wanted and not in_place:  # first: a report that fails later leaves OTHER's summary.json as it was
        written += _write_answers(run, out_dir)
    with ExitStack() as stack:
        jf = cw = None
        if "json" in wanted and not in_place:
            written.append(out_dir / "items.jsonl")
            jf = stack.enter_context(atomic_writer(written[-1], errors=UNENCODABLE))
        if "csv" in wanted:
            written.append(out_dir / "items.csv")
            cw = csv.writer(stack.enter_context(atomic_writer(written[-1], errors=UNENCODABLE, newline="")))
            cw.writerow([*ITEM_META_FIELDS, *summary.metrics, "errors", "unscorable"])
        if jf is not None or cw is not None or stats is not None:
            outputs = list(summary.metrics)
            lines: list[str] = []  # items.jsonl lines, written WRITE_BATCH at a time (text: no work for the GC)
            for item in run.items():  # one at a time: items held in a batch would outlive the GC's young generation
                errors = item.errors
                if jf is not None:
                    lines.append(item.to_json_line(errors))
                    if len(lines) == WRITE_BATCH:
                        jf.write("\n".join(lines) + "\n")
                        lines.clear()
                if cw is not None:
                    cw.writerow(_csv_row(item, outputs, errors))
                if stats is not None:
                    stats.add(item)
            if lines and jf is not None:
                jf.write("\n".join(lines) + "\n")
    if "json" in wanted:
        written += _write_json(run, out_dir, in_place)
    if stats is not None:  # md or html: the worst items' texts and the first unreadable rows, read once for both
        texts = read_texts(run.info, stats.all_worst(), run.answers)
        failed = list(islice(run.failed_rows(), MAX_FAILED_ROWS)) if summary.failed_rows else []
        if "md" in wanted:
            written.append(out_dir / "report.md")
            text = render_markdown(summary, run.info, stats, texts, failed, run.gates)
            write_text_atomic(written[-1], text, errors=UNENCODABLE)
        if "html" in wanted:
            written.append(out_dir / "report.html")
            html = render_html(summary, stats, run.info, failed, texts, run.gates)
            write_text_atomic(written[-1], html, errors=UNENCODABLE)
    return written


def _write_json(run: RunData, out_dir: Path, in_place: bool) -> list[Path]:
    written = [out_dir / "summary.json"]
    write_text_atomic(written[0], run.summary.model_dump_json(indent=2) + "\n")
    if not in_place:
        written += _write_gates(run, out_dir)
        written.append(out_dir / "failed_rows.jsonl")
        with atomic_writer(written[-1], errors=UNENCODABLE) as ff:
            for row in run.failed_rows():
                ff.write(json.dumps(row, ensure_ascii=False) + "\n")
        if run.info:
            written.append(out_dir / RUN_INFO)
            write_text_atomic(
                written[-1], json.dumps(run.info, indent=2, ensure_ascii=False) + "\n", errors=UNENCODABLE
            )
    return written


def _write_gates(run: RunData, out_dir: Path) -> list[Path]:
    """``out_dir``'s gates.json: the gate results of the DIR the run was read from; none (another run's, or the
    last check's of a run whose reports are written from the store again: its gates are checked afresh) removed."""
    path = out_dir / GATES_FILE
    if run.gates:
        write_gate_record(out_dir, run.summary.run_id, run.gates)
        return [path]
    if path.is_file():
        path.unlink()
    return []


def _write_answers(run: RunData, out_dir: Path) -> list[Path]:
    """``out_dir``'s answers.jsonl, which reports read from it show the answers the targets gave of: the run's DIR's
    copied byte for byte (:attr:`RunData.answers_file`), or the store's rows (:attr:`RunData.answer_rows`). A run
    with none leaves none there: another run's is removed with its other files (:func:`refuse_files_of_others`
    refused a DIR whose files no run wrote), where a report wrote it (its sha256 in :data:`WRITTEN_NAME`): a user's
    own file of that name in a run's DIR is left as it is."""
    path = out_dir / ANSWERS
    if run.answers_file is not None:
        copy_atomic(run.answers_file, path)
    elif run.answer_rows is not None:
        with atomic_writer(path, errors=UNENCODABLE) as af:
            for row in run.answer_rows():
                af.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        if os.path.lexists(path) and not path.is_dir():
            with _record_locked(out_dir, "--out"):
                if _held(path) in _written(out_dir).get(ANSWERS, []):
                    path.unlink()
        return []
    with _record_locked(out_dir, "--out"):
        _remember(out_dir, ANSWERS, [digest] if (digest := _held(path)) else [])
    return [path]


def write_outputs(
    store: RunStore, run_id: str, out_dir: Path, summary: RunSummary, gates: list[GateResult] | None = None
) -> list[Path]:
    """Stream the run's items from the store into every report of ``out_dir``; returns the files written.

    A run that asked targets also gets ``answers.jsonl`` (written first, so that it is there whatever happens to
    the reports): every answered row (a dataset: re-score it with ``ragscore run answers.jsonl --suite S
    --no-target``); a question a target could not answer keeps its row without an answer and says why in
    ``ragscore:target_error`` (:mod:`ragscore_workers.answers`). ``gates``: the run's last gate results, kept in
    gates.json and the Gates sections (None: removed, its gates to be checked afresh).
    """
    return write_reports(replace(from_store(store, run_id, summary), gates=gates), out_dir)
