"""Split rows into task signatures: per shard of rows, one chord.

Each question gets one scoring task per queue its metrics need; a task carries a chunk of questions
(chunk size per queue). Rows are cut into shards of ``shard_rows``; every shard is one chord whose
callback (``ragscore.finish_shard``) records it, and the last shard to finish starts ``ragscore.aggregate``.
So no message and no chord grows with the dataset, and rows are submitted as they are read.

A suite with targets puts a stage in front: the shard's chord is made of ``ragscore.target`` tasks (every
question asked of every target) and its callback, ``ragscore.score_shard``, plans the scoring chord above
from the answered rows the store holds. Both the orchestrator (submit, resume) and that callback plan
with this module, so it lives with the workers.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from celery import chord
from celery.canvas import Signature
from pydantic import BaseModel

from .answers import NO_RETRIEVAL, AloneRows, SystemRows
from .app import QUEUE_LIMITS, app
from .counts import agree, close_names, counted, noun_names
from .metrics.code_test import CodeTestParams, code_column_note
from .metrics.registry import OPTIONAL_FIELDS, MetricDef, resolve
from .schemas import RETRIEVAL_FIELDS, TARGET_FIELDS, Queue, Row, Suite, TargetConfig
from .target.template import UnseenRequestFields

T = TypeVar("T")

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_SHARD_BYTES",
    "DEFAULT_SHARD_ROWS",
    "QUEUE_ORDER",
    "TARGET_SHARD_ROWS",
    "ResolvedSuite",
    "Shard",
    "ShardStarts",
    "answered_row",
    "plan_shard",
    "plan_target_shard",
    "resolve_suite",
    "rows_carried",
    "shards",
]

#: The row fields an LLM alone's rows lack by design (``ResolvedSuite._alone_lack``): its retrieval's, and what cites
#: the sources it retrieved none of (a quote, ``verbatim``: ``no contexts``; sentence ids, ``citation`` and
#: ``evidence_overlap``: ``NO_EVIDENCE``).
ALONE_LACKS = (*RETRIEVAL_FIELDS, "citations", "evidence_sentences")
#: Systems of a mixed dataset the pre-run warnings name one by one (``ResolvedSuite._system_warnings``); the rest are
#: counted.
MAX_SYSTEMS_SAID = 5
#: Scoring queues in the order runs list them (the target stage first).
QUEUE_ORDER = ("target", "cpu", "embed", "judge", "code")
#: Questions per task message: big on cheap queues (fewer messages), small where one item is slow
#: (embedding batches fill a GPU at 64; judge, code and target items take seconds each).
DEFAULT_CHUNK_SIZE: dict[str, int] = {"cpu": 250, "embed": 64, "judge": 8, "code": 4, "target": 16}
#: Rows per shard (one chord each).
DEFAULT_SHARD_ROWS = 10_000
#: A shard's task messages, as JSON, at most (about: ``ResolvedSuite.message_bytes``): the orchestrator holds a
#: shard's rows and builds its messages at once, ~10 times their JSON in memory when every message carried the whole
#: row (10,000 rows of 7 KB, an NLP-project row with its document, took 870 MB), so a dataset of big messages is cut
#: into shards of fewer rows (:class:`~orchestrator.spool.ShardSpool`).
DEFAULT_SHARD_BYTES = 16 * 1024 * 1024
#: A shard's whole rows, as JSON, at most (about), as a multiple of its messages' bytes (``shard_bytes``): the
#: orchestrator holds a shard's rows whole (~1.25 times their JSON) while it plans their messages, so a dataset whose
#: big fields no metric reads (messages far smaller than the rows) is cut at 4 x 16 MiB of rows, not at ``shard_rows``
#: rows of any size.
SHARD_HELD_FACTOR = 4
#: Questions per shard of a target run: its scoring starts when its shard's target calls are done, so
#: smaller shards let scoring overlap the (rate-limited) target stage sooner.
TARGET_SHARD_ROWS = 1_000


class AloneLack(NamedTuple):
    """What an LLM alone's rows lack (``ResolvedSuite._alone_lacks``): the rows marked so that count (``marked``), the
    fields they, or a target's that returns none, lack (``lacking``), and those every row lacks by design
    (``by_design``: ``lacking`` where every row or target is an LLM alone's, else none)."""

    marked: AloneRows
    lacking: set[str]
    by_design: set[str]


@dataclass(frozen=True)
class ResolvedSuite:
    """A suite whose metrics exist and whose params are valid."""

    suite: Suite
    metrics: list[tuple[MetricDef, BaseModel]]

    @property
    def scoring(self) -> list[tuple[MetricDef, BaseModel]]:
        """The metrics that run on workers (not derived)."""
        return [(m, p) for m, p in self.metrics if m.kind != "derived"]

    @property
    def targets(self) -> list[TargetConfig]:
        return self.suite.all_targets

    @property
    def alone_targets(self) -> list[TargetConfig]:
        """The targets that retrieve nothing (``TargetConfig.retrieves``: an LLM alone)."""
        return [t for t in self.targets if not t.retrieves]

    @property
    def targets_retrieve(self) -> bool:
        """Whether some target fills contexts or retrieved doc ids (``TargetConfig.retrieves``)."""
        return any(t.retrieves for t in self.targets)

    @property
    def judge_calls_countable(self) -> bool:
        """Its judge calls can be counted before the run, the reply cache's included: judge metrics and no targets
        (targets' answers, unknown until asked, leave no cached judge reply to find)."""
        return any(m.plan_calls for m, _ in self.scoring) and not self.targets

    @property
    def queues(self) -> list[str]:
        """Queues this suite may need, in a stable order (routed metrics: all theirs)."""
        used = {q.value for m, _ in self.scoring for q in m.possible_queues}
        if self.targets:
            used.add("target")
        return [q for q in QUEUE_ORDER if q in used]

    def row_queues(self, row: Row) -> dict[str, list[str]]:
        """Scoring queue -> names of the metrics that score this row there."""
        out: dict[str, list[str]] = {}
        for m, p in self.scoring:
            out.setdefault(m.queue_for(row, p).value, []).append(m.name)
        return out

    def message_fields(self, names: Iterable[str]) -> frozenset[str] | None:
        """The row fields that the named metrics read (:attr:`MetricDef.reads`), all a task message scoring them
        carries besides those every message does (:meth:`Row.to_message`); None, the whole row, where one of them
        does not say what it reads."""
        wanted = set(names)
        reads = [m.reads for m, _ in self.scoring if m.name in wanted]
        if len(reads) < len(wanted) or any(fields is None for fields in reads):  # a metric unknown here: keep all
            return None
        return frozenset(field for fields in reads if fields is not None for field in fields)

    def message_bytes(self, row: Row) -> int:
        """About how many bytes of task messages ``row`` is sent in: its whole row to a target run's target stage
        (the workers plan its scoring), else its message (:meth:`Row.to_message`) to each queue that scores it."""
        if self.targets:
            return len(json.dumps(row.to_message()))
        queues = self.row_queues(row).values()
        return sum(len(json.dumps(row.to_message(self.message_fields(names)))) for names in queues)

    def outputs(self, queue: str | None = None) -> list[str]:
        return [o for m, p in self.metrics if queue is None or m.queue.value == queue for o in m.outputs(p)]

    def scoring_outputs(self) -> dict[str, list[str]]:
        """Metric name -> its outputs, for the metrics workers score."""
        return {m.name: m.outputs(p) for m, p in self.scoring}

    @property
    def asked_as(self) -> str | None:
        """The system a target answers every row as (the first target naming one), or None: its items are keyed
        ``system::id`` whatever the rows' own systems, so ids must be unique across them."""
        return next((t.system for t in self.targets if t.system), None)

    def request_fields(self) -> UnseenRequestFields:
        """A tracker of the fields the targets' requests read, for the dataset scan (empty without targets)."""
        return UnseenRequestFields({t.name: t.request for t in self.targets})

    def absent_field_warnings(
        self, fields_seen: set[str], columns_seen: set[str], fields_empty: set[str], alone: AloneRows | None = None
    ) -> list[str]:
        """A warning per metric that scores rows lacking a field (rather than leaving them unscorable) when no
        row of the dataset has that field: a column named otherwise (``context``, ``retrieved_docs``) would
        otherwise score every row as if retrieval had found nothing. And one per requirement of some metrics
        (``MetricDef.requirements``: a field they need, or a group of which they need one) that no row meets: they
        would score nothing. A field the suite's targets fill (their ``response`` map names it) is no dataset column.
        ``columns_seen``: the dataset's columns that are no row field (a hint names one that holds code);
        ``fields_empty``: the fields some row gives but none with a value (every ``contexts`` empty: no misnamed
        column); ``alone``: the rows marked as an LLM alone's (:class:`AloneRows`). The retrieval fields that the
        rows of a target returning none, or rows so marked, lack are said once of them (:meth:`_alone_warning`);
        where every target or row is such, not again as a column named otherwise."""
        lack = self._alone_lacks(fields_seen, alone)
        unnamed = self._evidence_by_design(alone)
        systems = self._systems_lacking(fields_seen, alone)
        fields_seen = self._with_filled(fields_seen) | lack.by_design
        said = self._system_warnings(systems, fields_seen) if systems else self._alone_warning(lack)
        return said + [
            f"no row has {field!r}, which {m.name} scores as absent (a score, not unscorable, as in the framework it "
            f"comes from): {_column_misspelling((field,), columns_seen) or 'is it a column named otherwise?'}"
            for m, _ in self.metrics for field in m.scores_without if field not in fields_seen
        ] + [
            f"{_absent(fields, fields_empty)}, which {', '.join(names)} "
            f"{agree(len(names), 'needs', 'need')}: {agree(len(names), 'it', 'they')} will score no item"
            + _otherwise_named(fields, columns_seen, fields_empty, unnamed)
            for fields, names in self._absent_needs(fields_seen).items()
        ]  # fmt: skip

    def _alone_lacks(self, fields_seen: set[str], alone: AloneRows | None) -> AloneLack:
        """What an LLM alone's rows lack, of the rows ``alone`` marked so (:meth:`_marked`: those that count) or of the
        suite's targets that return none: the fields (:meth:`_alone_lack`) and those every row lacks by design
        (:meth:`_by_design`)."""
        marked = self._marked(alone)
        lacking = self._alone_lack(fields_seen, marked)
        return AloneLack(marked, lacking, self._by_design(lacking, marked))

    def _marked(self, alone: AloneRows | None) -> AloneRows:
        """The rows marked as an LLM alone's that count: none where the suite has targets, which answer every row anew
        (their response maps say what retrieves, not the marks)."""
        return AloneRows() if self.targets or alone is None else alone

    def _by_design(self, lacking: set[str], marked: AloneRows) -> set[str]:
        """The fields every row lacks by design: ``lacking`` (:meth:`_alone_lack` of ``marked``, :meth:`_marked`)
        where every target, or every row (those marked, without targets), is an LLM alone's; none otherwise."""
        every = not self.targets_retrieve if self.targets else marked.every
        return lacking if every else set()

    def _alone_lack(self, fields_seen: set[str], marked: AloneRows) -> set[str]:
        """The fields (``ALONE_LACKS``) the rows of the suite's targets that return none (``TargetConfig.retrieves``:
        an LLM alone), or the rows ``marked`` so, lack, neither the dataset nor such a target giving them a value:
        ``contexts`` with none (``[]`` is none: not seen), ``retrieved_doc_ids`` absent (``[]`` says retrieval found
        nothing: recall 0), ``citations`` or ``evidence_sentences`` absent; ``citations`` only with ``contexts`` (a row
        given the dataset's contexts has sources to quote: ``verbatim`` fails it for ``no citations``). None without
        such a target or row."""
        if not self.alone_targets and not marked.rows:
            return set()
        return _lacked(fields_seen | _filled_by(self.alone_targets))

    def _alone_warning(self, lack: AloneLack) -> list[str]:
        """One warning naming the targets that return no contexts (or the rows marked as theirs, ``lack.marked``) and
        the suite's metrics that will be unscorable for their rows for lack of ``lack.lacking`` (:meth:`_alone_lacks`);
        none where no metric reads them."""
        marked, lacking = lack.marked, lack.lacking
        read = {m.name: lacking.intersection((*m.needs, *m.scores_without)) for m, _ in self.metrics}
        names = [name for name, fields in read.items() if fields]
        if not names:
            return []
        why = " or ".join(f"no {f}" for f in ALONE_LACKS if any(f in fields for fields in read.values()))
        said, theirs = marked.said() if marked.rows else self._alone_targets_said()
        return [f"{said}: {', '.join(names)} will be unscorable for {theirs} ({why}; no failure where other metrics "
                "score)"]  # fmt: skip

    def _systems_lacking(self, fields_seen: set[str], alone: AloneRows | None) -> list[SystemRows]:
        """The systems (``alone.systems``) no row of which gives contexts nor retrieved doc ids where the dataset's
        other rows give some (a mixed answers.jsonl: a RAG system's rows and an LLM alone's); none where the suite has
        targets, which answer every row anew, or where no row gives either (said of the dataset as a whole)."""
        if self.targets or alone is None or not fields_seen.intersection(RETRIEVAL_FIELDS):
            return []
        return [rows for rows in alone.systems if not rows.seen.intersection(RETRIEVAL_FIELDS)]

    def _system_warnings(self, lacking: list[SystemRows], fields_seen: set[str]) -> list[str]:
        """One warning per system of ``lacking`` (:meth:`_systems_lacking`) naming the suite's metrics that will be
        unscorable for its rows, by design, and those that score them 0 (``scores_without``: ``recall_at_k`` scores a
        row without retrieved ids as a retrieval that found nothing, unless the row is marked :data:`NO_RETRIEVAL`);
        none for a system no metric of the suite reads so. Only of what other rows of the dataset give (its
        ``fields_seen``): a field no row has, and a metric that scores no row of the dataset, are said of the dataset
        as a whole, once. The first :data:`MAX_SYSTEMS_SAID` systems, then a count."""
        scored = self._scoring_somewhere(fields_seen)
        said = [line for rows in lacking if (line := self._system_warning(rows, fields_seen, scored))]
        if len(said) <= MAX_SYSTEMS_SAID:
            return said
        return [*said[:MAX_SYSTEMS_SAID], f"{counted(len(said) - MAX_SYSTEMS_SAID, 'more system')} give no contexts "
                "nor retrieved_doc_ids, where other systems' rows do: the same holds of their rows"]  # fmt: skip

    def _system_warning(self, rows: SystemRows, fields_seen: set[str], scored: set[str]) -> str | None:
        """:meth:`_system_warnings`' line of one system's ``rows``: the metrics (of those ``scored``, which some row of
        the dataset meets every requirement of) that will be unscorable for them, for lack of what they lack and other
        rows give (:func:`_lacked`, of ``fields_seen``; by design where every row is marked :data:`NO_RETRIEVAL`), and
        those that score them 0 instead (``scores_without``, of rows not so marked); None where no metric reads what
        they lack."""
        marked = rows.marked == rows.rows
        lacking = _lacked(rows.seen) & fields_seen
        unscorable: dict[str, set[str]] = {}
        zeroed = []
        for m, _ in self.metrics:
            if m.name not in scored:
                continue
            read = lacking.intersection((*m.needs, *(m.scores_without if marked else ())))
            if read:
                unscorable[m.name] = read
            elif lacking.intersection(m.scores_without):
                zeroed.append(m.name)
        if not unscorable and not zeroed:
            return None
        n, them = rows.rows, agree(rows.rows, "it", "them")
        who = f"marked {NO_RETRIEVAL!r}: an LLM alone" if marked else "an LLM alone?"
        parts = []
        if unscorable:
            why = " or ".join(f"no {f}" for f in ALONE_LACKS if any(f in read for read in unscorable.values()))
            parts.append(f"{', '.join(unscorable)} will be unscorable for {them}{', by design' if marked else ''} "
                         f"({why})")  # fmt: skip
        if zeroed:
            parts.append(f"{', '.join(zeroed)} {agree(len(zeroed), 'scores', 'score')} {them} 0, as a retrieval that "
                         f"found nothing (if the system retrieves nothing by design, mark its rows {NO_RETRIEVAL!r}: "
                         "true, and they are unscorable by design)")  # fmt: skip
        return (f"{rows.named()}: {counted(n, 'row')} {agree(n, 'gives', 'give')} no contexts nor retrieved_doc_ids "
                f"where other systems' rows do ({who}): {'; '.join(parts)}")  # fmt: skip

    def _alone_targets_said(self) -> tuple[str, str]:
        """How :meth:`_alone_warning` names the targets that return no contexts, and their rows."""
        alone = [t.system for t in self.alone_targets]
        said = "the target" if None in alone else noun_names(alone, "target")  # unnamed: the suite's only one
        one = len(alone) == 1
        return (f"{said} {'returns' if one else 'return'} no contexts ("
                f"{'its response map names' if one else 'their response maps name'} neither contexts nor "
                f"retrieved_doc_ids: {'an LLM alone, which retrieves' if one else 'LLMs alone, which retrieve'} "
                "nothing)", f"{'its' if one else 'their'} rows")  # fmt: skip

    def scoreless(self, fields_seen: set[str], alone: AloneRows | None = None) -> list[str]:
        """The metrics that will score no item because no row meets a requirement of theirs (every item unscorable:
        the run exits 1, see ``gates.incomplete``); not one that lacks only fields a system may lack by design
        (``OPTIONAL_FIELDS``: context metrics of an LLM alone; those every row lacks as an LLM alone's,
        :meth:`_by_design`: ``citation`` of its rows; ``evidence_sentences`` where every row retrieved nothing,
        :meth:`_evidence_by_design`), unless no metric of the suite would score."""
        absent = self._absent_needs(self._with_filled(fields_seen))
        unscored = [m.name for m, _ in self.metrics if any(m.name in names for names in absent.values())]
        if len(unscored) == len(self.metrics):  # the run would score nothing at all: no result to pass
            return unscored
        by_design = self._alone_lacks(fields_seen, alone).by_design | self._evidence_by_design(alone)
        failing = {name for fields, names in absent.items() if not (_optional(fields) or by_design.issuperset(fields))
                   for name in names}  # fmt: skip
        return [name for name in unscored if name in failing]

    def _evidence_by_design(self, alone: AloneRows | None) -> set[str]:
        """``evidence_sentences`` where every row of the dataset lacks it by design (``AloneRows.evidence_by_design``:
        ``citation`` leaves each unscorable by design, as the gates read it), else none; none where the suite has
        targets, which answer every row anew."""
        return {"evidence_sentences"} if self._marked(alone).evidence_by_design else set()

    def _with_filled(self, fields_seen: set[str]) -> set[str]:
        """The fields seen and those the suite's targets fill."""
        return fields_seen | self.filled_fields()

    def filled_fields(self) -> set[str]:
        """The row fields the suite's targets fill (their ``response`` map names it): no dataset column."""
        return _filled_by(self.targets)

    def _scoring_somewhere(self, fields_seen: set[str]) -> set[str]:
        """The names of the metrics some row of the dataset may be scored by: no requirement of theirs that no row
        meets (:meth:`_absent_needs`)."""
        unscored = {name for names in self._absent_needs(fields_seen).values() for name in names}
        return {m.name for m, _ in self.metrics} - unscored

    def _absent_needs(self, fields_seen: set[str]) -> dict[tuple[str, ...], list[str]]:
        """Requirement no row meets (``MetricDef.requirements``: none of its fields seen) -> the metrics with it."""
        needed: dict[tuple[str, ...], list[str]] = {}
        for m, _ in self.metrics:
            for fields in m.requirements:
                if not fields_seen.intersection(fields):
                    needed.setdefault(fields, []).append(m.name)
        return needed

    def pre_run_warnings(
        self, fields_seen: set[str], columns_seen: set[str], fields_empty: set[str], alone: AloneRows | None = None
    ) -> list[str]:
        """What is probably wrong with the suite for this dataset (said before a run and by ``--dry-run``): the
        absent fields (:meth:`absent_field_warnings`), code_test with nothing to check but the exit code, and rows'
        ``checks`` no metric scores. ``columns_seen``: the dataset's columns that are no row field; ``fields_empty``:
        the fields some row gives but none with a value (``DatasetScan.fields_empty``); ``alone``: the rows marked as an
        LLM alone's (``DatasetScan.alone``)."""
        out = self.absent_field_warnings(fields_seen, columns_seen, fields_empty, alone)
        names = {m.name for m, _ in self.metrics}
        for _, params in self.metrics:
            if isinstance(params, CodeTestParams) and params.stdout is params.stdout_regex is params.test is None:
                out.append("code_test has no stdout, stdout_regex or test: only the exit code counts (code that runs "
                           "passes)")  # fmt: skip
        if "checks" in fields_seen and "checks" not in names:
            out.append("rows carry checks, but the suite has no checks metric: they are not scored")
        return out

    def metrics_todo(self, missing: dict[str, set[str]]) -> dict[str, set[str]]:
        """Item key -> the metrics to run again, from item key -> the outputs the store lacks."""
        outputs = self.scoring_outputs()
        return {key: {m for m, outs in outputs.items() if lacks & set(outs)} for key, lacks in missing.items()}


def _lacked(fields_seen: set[str]) -> set[str]:
    """The fields of ``ALONE_LACKS`` not in ``fields_seen`` (those rows have, or targets fill); ``citations`` only
    with ``contexts`` (rows given contexts have sources to quote: ``verbatim`` fails them for ``no citations``)."""
    lacking = {f for f in ALONE_LACKS if f not in fields_seen}
    return lacking if "contexts" in lacking else lacking - {"citations"}


def _filled_by(targets: list[TargetConfig]) -> set[str]:
    """The row fields ``targets`` fill (their ``response`` map names it)."""
    return {f for t in targets for f in TARGET_FIELDS if getattr(t.response, f) is not None}


def _optional(fields: tuple[str, ...]) -> bool:
    """Whether a requirement is of fields a system may lack by design (``OPTIONAL_FIELDS``: ``contexts``)."""
    return all(f in OPTIONAL_FIELDS for f in fields)


def _absent(fields: tuple[str, ...], fields_empty: set[str]) -> str:
    """How an absent requirement's warning starts: no row has the fields, or, where rows give them but every one
    empty (an LLM alone's ``contexts: []``), that they are."""
    said = " or ".join(repr(f) for f in fields)
    return f"every row's {said} is empty or absent" if fields_empty.issuperset(fields) else f"no row has {said}"


def _otherwise_named(fields: tuple[str, ...], columns_seen: set[str], fields_empty: set[str], unnamed: set[str]) -> str:
    """How an absent requirement's warning ends: the dataset's column that is the field's name misspelt
    (:func:`_column_misspelling`), the column that holds code where ``code`` is wanted (:func:`code_column_note`),
    else the question whether a column is named otherwise (not of fields rows give empty: the column is there); for a
    field a system may lack by design (``OPTIONAL_FIELDS``), or one every row lacks by design (``unnamed``:
    ``ResolvedSuite._evidence_by_design``), after why that is no failure where other metrics score."""
    typo = _column_misspelling(fields, columns_seen)
    why = "; ".join(OPTIONAL_FIELDS[f] for f in fields) if _optional(fields) else ""
    if not why and unnamed.issuperset(fields):
        why = ("every row retrieved no document whose sentences it could name (retrieved_doc_ids: [] without "
               "contexts, or an LLM alone's)")  # fmt: skip
    if why:
        return f" ({why}: no failure where other metrics score{_columns_asked(fields, typo, fields_empty)})"
    if typo:
        return f" ({typo})"
    return (code_column_note(columns_seen) if "code" in fields else "") or " (is it a column named otherwise?)"


def _columns_asked(fields: tuple[str, ...], typo: str, fields_empty: set[str]) -> str:
    """What the warning of an absent field a system may lack by design says of the dataset's columns after why that
    is no failure: the misspelt column to rename (``typo``, :func:`_column_misspelling`), else whether one is named
    otherwise (not of fields rows give empty: the column is there)."""
    if typo:
        return f"; but {typo}"
    return "" if fields_empty.issuperset(fields) else "; or is it a column named otherwise?"


def _column_misspelling(fields: tuple[str, ...], columns_seen: set[str]) -> str:
    """Where a column of the dataset is an absent field's name misspelt (``refrence`` for ``reference``,
    ``retrieved_doc_ds``), how its warning names that column and the field to rename it; nothing where none is. A
    column named like a field but for case (``Question``) is not among ``columns_seen``: the near-miss warning names
    it."""
    for field in fields:
        if like := close_names(field, columns_seen, cutoff=0.8):
            return f"the dataset's column {like[0]!r} is no row field: rename it {field!r}"
    return ""


def resolve_suite(suite: Suite) -> ResolvedSuite:
    return ResolvedSuite(suite=suite, metrics=resolve(suite))


@dataclass(frozen=True)
class Shard:
    """One shard's chord, and how many work units (item x metric output) it adds per queue."""

    index: int
    keys: list[str]
    signature: Signature
    units: dict[str, int]
    tasks: int

    @property
    def queues(self) -> list[str]:
        """The queues its scoring tasks go to (its callback's, the control queue, aside)."""
        return [queue for queue in self.units if queue != Queue.DERIVED.value]


@dataclass(frozen=True)
class ShardStarts:
    """Where each of a run's shards starts: its first row's place among the run's valid rows. A shard is cut by its own
    rows' bytes (:class:`~orchestrator.spool.ShardSpool`), so shards hold different numbers of rows and the run records
    each start (``starts``); a run stored without them (an older ragscore's) cut every shard but the last at
    ``shard_rows``. Shards past the recorded starts (rows added since) hold ``shard_rows`` each, as before."""

    #: Rows a shard holds at most, and every shard of a run that recorded no starts (but its last).
    shard_rows: int
    #: Where each recorded shard starts (the first at 0), in order; empty: a run stored the old way.
    starts: tuple[int, ...] = ()

    def start(self, shard: int) -> int:
        """The place of shard ``shard``'s first row."""
        if shard < len(self.starts):
            return self.starts[shard]
        last = max(len(self.starts) - 1, 0)  # shards past the recorded ones follow the last at shard_rows each
        return (self.starts[last] if self.starts else 0) + (shard - last) * self.shard_rows

    def size(self, shard: int) -> int:
        """Rows shard ``shard`` holds (at most: the last one may hold fewer)."""
        return self.start(shard + 1) - self.start(shard)

    def times(self, n: int) -> ShardStarts:
        """The same shards, each of its rows counted ``n`` times (a target run's items: every row for every target)."""
        return ShardStarts(self.shard_rows * n, tuple(start * n for start in self.starts))

    def shard_of(self, at: int) -> int:
        """The shard that holds the row at place ``at``."""
        if self.starts and at < self.starts[-1]:
            return bisect.bisect_right(self.starts, at) - 1
        last = max(len(self.starts) - 1, 0)
        return last + (at - self.start(last)) // self.shard_rows


def shards(rows: Iterable[T], shard_rows: int | ShardStarts = DEFAULT_SHARD_ROWS) -> Iterator[list[T]]:
    """Cut a row stream (rows, or anything read with them) into lists of at most ``shard_rows``, or as a run's
    recorded :class:`ShardStarts` cut it."""
    cut = shard_rows if isinstance(shard_rows, ShardStarts) else ShardStarts(shard_rows)
    batch: list[T] = []
    index = 0
    for row in rows:
        batch.append(row)
        if len(batch) >= cut.size(index):
            yield batch
            batch, index = [], index + 1
    if batch:
        yield batch


def _sig(task: str, *args: object) -> Signature:
    """An immutable signature of one of our tasks by name (routed to its queue by the app's task_routes)."""
    return app.signature(task, args=args, immutable=True)


def rows_carried(task: str, args: list[Any]) -> int:
    """How many rows a message of ``task`` with ``args`` (as :func:`plan_shard` and :func:`plan_target_shard` send
    them) carries: its chunk's; 0 for the bookkeeping tasks (a shard's callback, the aggregation)."""
    index = 3 if task.startswith("ragscore.score.") else 4 if task == "ragscore.target" else None
    if index is None or len(args) <= index or not isinstance(args[index], list):
        return 0
    return len(args[index])


#: Share of the code queue's soft time limit that the programs of one chunk may take at their timeout.
CODE_CHUNK_SHARE = 0.8


def chunk_size(resolved: ResolvedSuite, queue: str) -> int:
    """Rows per task message on ``queue``: the suite's ``chunk_size``, else the default. A code chunk holds at most
    the rows whose programs fit the queue's time limit at their timeouts (``sandbox.timeout_s: 300`` with 4 rows a
    chunk ran into the limit)."""
    size = resolved.suite.chunk_size.get(queue, DEFAULT_CHUNK_SIZE[queue])
    if queue == Queue.CODE.value:
        size = min(size, max(1, int(QUEUE_LIMITS[queue][0] * CODE_CHUNK_SHARE // _row_programs_s(resolved))))
    return size


def _row_programs_s(resolved: ResolvedSuite) -> float:
    """The longest a row may take on the code queue: its programs (a ``code_test``, each ``code_test`` point of the
    suite's ``checks.points``; at least one) at their timeouts (their own ``timeout_s``, else the sandbox's). A row
    whose own ``checks`` bring more points may take longer."""
    default = resolved.suite.sandbox.timeout_s
    total = 0.0
    for m, params in resolved.metrics:
        if Queue.CODE not in m.possible_queues:
            continue
        if m.name == "code_test":
            total += getattr(params, "timeout_s", None) or default
        for point in getattr(params, "points", None) or []:
            if isinstance(point, dict) and point.get("type") == "code_test":
                total += float((point.get("params") or {}).get("timeout_s") or default)
    return max(total, default)


def _scoring_units(resolved: ResolvedSuite, rows: Iterable[Row]) -> dict[str, int]:
    per_metric = {m.name: len(m.outputs(p)) for m, p in resolved.metrics}
    units: dict[str, int] = {}
    for row in rows:
        for queue, names in resolved.row_queues(row).items():
            units[queue] = units.get(queue, 0) + sum(per_metric[n] for n in names)
    return units


def _derived_units(resolved: ResolvedSuite, n_items: int) -> dict[str, int]:
    derived = [len(m.outputs(p)) for m, p in resolved.metrics if m.kind == "derived"]
    # computed during aggregation; counted so progress totals stay exact
    return {"derived": n_items * sum(derived)} if derived else {}


def plan_shard(
    run_id: str,
    index: int,
    rows: list[Row],
    resolved: ResolvedSuite,
    todo: dict[str, set[str]] | None = None,
    generation: int = 0,
) -> Shard | None:
    """Build a shard's scoring chord. ``todo`` (resume) maps item key -> metric names still missing."""
    suite_json = resolved.suite.model_dump_json()
    outputs_per_metric = {m.name: len(m.outputs(p)) for m, p in resolved.metrics}
    # Group rows by (queue, the exact metrics they need there): routed metrics may send rows of one
    # metric to different queues, and a resume sends only what is missing.
    groups: dict[tuple[str, tuple[str, ...]], list[Row]] = {}
    for row in rows:
        for queue, names in resolved.row_queues(row).items():
            wanted = tuple(n for n in names if todo is None or n in todo.get(row.key, ()))
            if wanted:
                groups.setdefault((queue, wanted), []).append(row)
    header: list[Signature] = []
    units: dict[str, int] = {}
    for (queue, wanted), group in sorted(groups.items()):
        units[queue] = units.get(queue, 0) + len(group) * sum(outputs_per_metric[n] for n in wanted)
        size = chunk_size(resolved, queue)
        fields = resolved.message_fields(wanted)
        for start in range(0, len(group), size):
            payload = [r.to_message(fields) for r in group[start : start + size]]
            header.append(_sig(f"ragscore.score.{queue}", run_id, suite_json, list(wanted), payload, generation))
    if not header:
        return None
    units |= _derived_units(resolved, len(rows))
    signature = chord(header, _sig("ragscore.finish_shard", run_id, index, generation))
    return Shard(index=index, keys=[r.key for r in rows], signature=signature, units=units, tasks=len(header))


def answered_row(row: Row, target: TargetConfig) -> Row:
    """The row as ``target`` will answer it (its ``system`` set), before the answer is known."""
    return row if target.system is None else row.model_copy(update={"system": target.system})


def target_keys(rows: list[Row], targets: list[TargetConfig]) -> list[str]:
    """Item keys of a target run's shard: every question for every target, question by question."""
    return [answered_row(row, target).key for row in rows for target in targets]


def plan_target_shard(
    run_id: str,
    index: int,
    rows: list[Row],
    resolved: ResolvedSuite,
    missing: set[str] | None = None,
    generation: int = 0,
) -> Shard | None:
    """A shard's target chord: ask each target every question (or only the ``missing`` item keys), then
    ``ragscore.score_shard`` plans the scoring chord. None when nothing is left to ask."""
    suite_json = resolved.suite.model_dump_json()
    size = chunk_size(resolved, "target")
    header: list[Signature] = []
    asked = 0
    for t_index, target in enumerate(resolved.targets):
        todo = [r for r in rows if missing is None or answered_row(r, target).key in missing]
        asked += len(todo)
        for start in range(0, len(todo), size):
            payload = [r.to_message() for r in todo[start : start + size]]
            header.append(_sig("ragscore.target", run_id, suite_json, index, t_index, payload, generation))
    if not header:
        return None
    # Units of a first submission (a resume registers none): every answer, then its scoring outputs.
    answered = [answered_row(r, t) for r in rows for t in resolved.targets]
    units = {"target": asked} | _scoring_units(resolved, answered) | _derived_units(resolved, len(answered))
    callback = _sig("ragscore.score_shard", run_id, index, generation)
    return Shard(index=index, keys=target_keys(rows, resolved.targets), signature=chord(header, callback),
                 units=units, tasks=len(header))  # fmt: skip
