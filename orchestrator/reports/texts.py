"""What the few items a report shows (its worst items) asked and answered, read back from the run's dataset.

Items keep no text (a million of them would double the store and items.jsonl): their question and answer are
read again from the dataset the run recorded, in one streaming pass through the run's own loader that keeps
only the wanted rows and stops once it has them all. A dataset gone or unreadable is said in place of the texts;
one changed since the run (its recorded fingerprint) shows no answer and only the questions that are still the ones
scored (the item's ``question_sha``): never a wrong text. The same bytes read by other loaders (the fingerprint
names their version: a run before an upgrade) show their texts as these loaders read them, questions checked. A run that
asked targets scored their answers: those are read from the answers it kept (the store, or its answers.jsonl), for
these items alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragscore_workers.errors import RagscoreError
from ragscore_workers.schemas import Row, question_fingerprint

from ..datasets import READER_VERSION, iter_rows, other_reader, same_bytes_reader
from .itemstats import WorstItem, one_line

__all__ = ["MAX_PREVIEW_CHARS", "ItemTexts", "TargetAnswers", "asked_targets", "preview", "read_texts"]

#: Characters of a question or answer a report shows (the rest is cut, with an ellipsis).
MAX_PREVIEW_CHARS = 200


@dataclass(frozen=True)
class TargetAnswers:
    """Where the answers the targets of a run gave are kept, and how to read them for the item keys asked."""

    #: Keys -> the answers' :func:`preview` (a key without a kept answer left out; None for a question its target
    #: did not answer): all a report shows, so that a long answer is not held whole (a target's has no field limit);
    #: RagscoreError or OSError when they cannot be read.
    read: Callable[[set[str]], dict[str, str | None]]
    #: Where they are kept, as a note names it (``the run store``, ``DIR/answers.jsonl``).
    where: str


@dataclass(frozen=True)
class ItemTexts:
    """Per item key, ``(question, answer)`` previews (None where the row has none); ``note`` says why some or
    all items have none (the dataset is gone, changed, unreadable)."""

    texts: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    note: str | None = None

    def of(self, key: str) -> tuple[str | None, str | None]:
        """The previews of one item, ``(None, None)`` when not read."""
        return self.texts.get(key, (None, None))


def home_relative(path: str | Path) -> str:
    """``path`` as a report names it: from ``~`` where it is under the user's home folder (``~/data/qa.jsonl``), so
    that a report sent on (a mail attachment, a CI artifact) tells no user name or home layout; elsewhere as it is."""
    path = Path(path)
    home = _home_to_hide()
    if home is None or not path.is_relative_to(home):
        return str(path)
    return str(Path("~") / path.relative_to(home))


def home_relative_text(text: str) -> str:
    """``text`` (an error's, an OSError's naming its file) with each path under the user's home folder from ``~``,
    as :func:`home_relative` names one; the home's name inside another path or name is left as it is."""
    home = _home_to_hide()
    if home is None:
        return text
    return re.sub(rf"(?<![\w./-]){re.escape(str(home))}(?![\w.-])", "~", text)


def _home_to_hide() -> Path | None:
    """The user's home folder, or None where there is none to hide: no HOME and no user entry to find one in, or a
    home of "/", which would hold every path."""
    try:
        home = Path.home()
    except RuntimeError:
        return None
    return None if home == Path(home.anchor) else home


def preview(text: str | None, limit: int = MAX_PREVIEW_CHARS) -> str | None:
    """``text`` on one line, cut to ``limit`` characters (the last one an ellipsis) when longer."""
    return None if text is None else one_line(text, limit)


def code_preview(code: str | None) -> str | None:
    """The first non-blank line of ``code``, cut as :func:`preview` cuts, with `` …`` where more lines follow: a code
    row's (``code``, no answer) in an answer's place."""
    lines = [line for line in (code or "").splitlines() if line.strip()]
    if not lines:
        return None
    first = preview(lines[0]) or ""
    return first if len(lines) == 1 or first.endswith("…") else f"{first} …"


def _reader(dataset: Path, info: Mapping[str, Any]) -> int | None:
    """The loaders' version that read ``dataset``'s bytes at the run (this one's where the run recorded no
    fingerprint); None where they are not the bytes the run recorded (:func:`same_bytes_reader`)."""
    recorded = info.get("dataset_fingerprint")
    fmt, options = info.get("format") or None, info.get("format_options") or {}
    return same_bytes_reader(recorded, dataset, fmt, options) if recorded else READER_VERSION


def read_texts(
    info: Mapping[str, Any], items: Iterable[WorstItem], target_answers: TargetAnswers | None = None
) -> ItemTexts:
    """The previews of ``items``: questions (and answers) from the dataset named in ``info`` (the run's facts), in one
    pass that stops when every wanted row was read; an item whose row's question is not the one it was scored on is
    left out, and the note says so. A run that asked targets scored their answers, not the dataset's: its answers
    are the targets' (``target_answers``, read for these items alone)."""
    worst = list({item.key: item for item in items}.values())  # each once, however many outputs it is worst in
    if not asked_targets(info):
        return _dataset_texts(info, worst, with_answers=True)
    return _with_target_answers(_dataset_texts(info, worst, with_answers=False), [w.key for w in worst], target_answers)


def _dataset_texts(info: Mapping[str, Any], items: list[WorstItem], with_answers: bool) -> ItemTexts:
    """:func:`read_texts` from the run's dataset alone; its answers too ``with_answers`` (not where targets gave
    them)."""
    what = "questions and answers" if with_answers else "questions"
    wanted: dict[str, list[WorstItem]] = {}
    for item in items:
        wanted.setdefault(item.id, []).append(item)
    if not wanted:
        return ItemTexts()
    if not info.get("dataset"):
        return ItemTexts(note=f"the run's dataset is not recorded: {what} are not available")
    dataset = Path(str(info["dataset"]))
    named = home_relative(dataset)
    if not dataset.exists():
        return ItemTexts(note=f"the run's dataset {named} is gone: {what} are not available")
    try:
        reader = _reader(dataset, info)
        if reader == READER_VERSION:
            return _scan(dataset, info, wanted, with_answers=with_answers)
        if reader is not None:  # the run's bytes, which other loaders read: the questions checked, texts shown
            texts = _scan(dataset, info, wanted, with_answers=with_answers, strict=True)
            note = (
                f"the run's dataset {named} is unchanged since the run, which {other_reader(reader)} read: its "
                f"{what} are shown as this one reads them, each question checked against the one scored"
            )
            return ItemTexts(texts.texts, "; ".join(filter(None, [note, texts.note])))
        texts = _scan(dataset, info, wanted, with_answers=False, strict=True)
        shown = "answers are not shown, questions" if with_answers else "questions are shown"
        note = (f"the run's dataset {named} changed since the run (or the run was made by another ragscore "
                f"version): {shown} only where they are the ones scored")  # fmt: skip
        return ItemTexts(texts.texts, "; ".join(filter(None, [note, texts.note])))
    except (RagscoreError, OSError) as exc:
        problem = home_relative_text(str(exc))
        return ItemTexts(
            note=f"the run's dataset {named} could not be read again ({problem}): {what} are not available"
        )


def _with_target_answers(texts: ItemTexts, keys: list[str], target_answers: TargetAnswers | None) -> ItemTexts:
    """``texts`` (questions) with each item's answer the one its target gave; where they cannot be read, or lack an
    item's, the note says so and no answer is shown (a report is still written)."""
    if not keys:
        return texts
    given: dict[str, str | None] = {}
    if target_answers is None:
        problem: str | None = "the targets' answers are not kept with this run: answers are not shown"
    else:
        try:
            given = target_answers.read(set(keys))
        except (RagscoreError, OSError) as exc:
            problem = f"the targets' answers could not be read ({exc}): answers are not shown"
        else:
            problem = _missing_note(len(set(keys) - given.keys()), target_answers.where)
    merged = {key: (texts.of(key)[0], given.get(key)) for key in keys}
    note = "; ".join(filter(None, [texts.note, problem])) or None
    return ItemTexts({k: v for k, v in merged.items() if v != (None, None)}, note)


def _missing_note(missing: int, where: str) -> str | None:
    """Why ``missing`` items show no answer though their run's answers were read (the store lost them, the file
    lacks their rows)."""
    return f"{missing} of these items' answers are not in {where}: not shown" if missing else None


def asked_targets(info: Mapping[str, Any]) -> bool:
    """Whether the run's suite asked systems under test for the answers it scored."""
    suite = info.get("suite") or {}
    return bool(suite.get("target") or suite.get("targets"))


def _scan(
    dataset: Path, info: Mapping[str, Any], wanted: dict[str, list[WorstItem]], with_answers: bool, strict: bool = False
) -> ItemTexts:
    """One pass over the dataset's rows for the ``wanted`` ids (a target's item matches its row of no system);
    ``strict``: an item that recorded no ``question_sha`` (no question) shows none of its row's either."""
    texts: dict[str, tuple[str | None, str | None]] = {}
    changed = 0
    left = sum(len(w) for w in wanted.values())
    rows = iter_rows(dataset, info.get("format") or None, info.get("format_options") or {}, ids=wanted)
    for _, row in rows:
        if not isinstance(row, Row) or row.id not in wanted:
            continue
        for item in wanted[row.id]:
            if item.key in texts or row.system not in (None, item.system):
                continue
            left -= 1
            if (strict or item.question_sha is not None) and item.question_sha != question_fingerprint(row.question):
                changed += 1
                texts[item.key] = (None, None)
                continue
            answer = preview(row.answer) if row.answer is not None else code_preview(row.code)
            texts[item.key] = (preview(row.question), answer if with_answers else None)
        if left == 0:
            break
    named = home_relative(dataset)
    notes = [f"{changed} of these items' questions changed in {named} since the run: not shown"] if changed else []
    notes += [f"{left} of these items are no longer in {named}: not shown"] if left else []
    return ItemTexts({k: v for k, v in texts.items() if v != (None, None)}, "; ".join(notes) or None)
