"""One error tree for ragscore; upstream errors are translated at the edges with ``raise ... from``.

RagscoreError
├── ConfigError            bad suite, unknown metric, bad params, bad settings
│   ├── UnknownMetricError carries the name and close matches
│   └── SuiteProblems      several of a suite's problems at once, each one a ConfigError
│       └── UnknownMetrics an unknown metric among them (an UnknownMetricError too)
├── DatasetError           the dataset cannot be used at all (missing, empty, duplicate ids)
├── StoreError             the run store (Redis) failed or holds no such run
│   └── RunLostError       the store lost a run it held (a Redis restarted without persistence, flushed)
├── BrokerError            the embedded Redis or the local workers could not be started
│   └── StillLoadingError  the embedded Redis was still reading its stored runs back; carries ``size_mb``
├── ReportError            a finished run's reports could not be written (a full disk, a folder in the way)
└── MetricError            a metric could not score one item (recorded per item, never raised
                           into Celery)

DatasetWarning (a UserWarning) what is probably wrong with a dataset or suite that still runs (a column
                           missing, a metric with nothing to check), warned of by the Python API before its run,
                           and scores it made 0 with no error (gold ids never among the retrieved ids), after it
EvictionWarning (a UserWarning) a cluster's Redis that may evict a run's keys, warned of before its work is sent
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .counts import did_you_mean

__all__ = [
    "BrokerError",
    "ConfigError",
    "DatasetError",
    "DatasetWarning",
    "EvictionWarning",
    "MetricError",
    "RagscoreError",
    "ReportError",
    "RunLostError",
    "StillLoadingError",
    "StoreError",
    "SuiteProblems",
    "UnknownMetricError",
    "UnknownMetrics",
    "flat_problems",
    "raise_problems",
]


class RagscoreError(Exception):
    """Root of every error ragscore raises on purpose."""


class ConfigError(RagscoreError):
    """The suite or settings are invalid; raised before anything is submitted."""

    #: Where in the suite (``metrics item 3 (rubric_judge)``) a lone problem :func:`raise_problems` raised is: not in
    #: its message (unchanged), but said where a later stage's :class:`SuiteProblems` says it among others.
    where: str = ""

    def __init__(
        self, message: str, *, placed: str = "", loc: tuple[Any, ...] = (), first: tuple[Any, ...] = ()
    ) -> None:
        super().__init__(message)
        #: The message as said after its place in a :class:`SuiteProblems`, where the message names that place itself
        #: (``Bad params: k: ...`` after ``metrics item 2 (recall_at_k)``); "" for the message as it is.
        self.placed = placed
        #: The key or item of the suite at fault, as pydantic gives a place (``("metrics", 1, "params", "k")``), for a
        #: suite file to say its line; () where only ``where`` names it.
        self.loc = loc
        #: The earlier entry that the one at ``loc`` repeats or clashes with (the first of a metric listed twice), for
        #: a suite file to say its line too; () for none.
        self.first = first


class UnknownMetricError(ConfigError):
    """A suite names a metric the registry does not know."""

    def __init__(self, name: str, suggestions: list[str], known: list[str], owners: list[str] | None = None) -> None:
        self.name = name
        self.suggestions = suggestions
        self.owners = owners or []  # the metrics that give an output of this name
        self.known = known
        hint = f" {did_you_mean(suggestions, sentence=True)}" if suggestions else ""
        if owners:  # an output's name (``mrr``, ``recall_at_5``), which gates and reports use
            hint = (f" {name!r} is an output of {' and '.join(repr(o) for o in owners)}: list that metric (gates and "
                    f"reports use its outputs' names).{hint}")  # fmt: skip
        if " - " in name:  # metrics: [- exact_match, then "  - mrr" one column deeper]: YAML reads one name
            hint += (" A name with ' - ' in it looks like a list item indented deeper than the one above it: YAML "
                     "reads the two as one name; start every item of the list in the same column.")  # fmt: skip
        #: Said without the known metrics: :class:`SuiteProblems` lists them once, however many names are unknown.
        self.unlisted = f"Unknown metric {name!r}.{hint}"
        super().__init__(f"{self.unlisted} Known metrics: {', '.join(known)}.")


#: A suite's problem: where it is (``metrics item 3 (rubric_judge)``, or "" where the error says it), and the error.
Problem = tuple[str, ConfigError]


class SuiteProblems(ConfigError):
    """Several problems of one suite, said at once, one a line: the user fixes them all in one go, not one a run."""

    def __init__(self, problems: Sequence[Problem], *, subject: str = "suite") -> None:
        """``subject``: what the problems are of, as said (``Invalid gates: ...``: gates given on the command line)."""
        self.problems = list(problems)
        lines = "\n".join(f"  {where}: {said}" if where else f"  {said}" for where, said in _said(self.problems))
        # ConfigError's, not super()'s: an UnknownMetrics's next class is UnknownMetricError, built otherwise
        ConfigError.__init__(self, f"Invalid {subject}: {len(self.problems)} problems:\n{lines}")

    @property
    def errors(self) -> list[ConfigError]:
        """Each problem's own error (an :class:`UnknownMetricError` among them, with its name and close matches)."""
        return [error for _, error in self.problems]


class UnknownMetrics(SuiteProblems, UnknownMetricError):
    """Several problems of a suite, an unknown metric among them: caught as either, so ``except UnknownMetricError``
    (around evaluate(), or a worker's plug-in hint) catches it as it did when an unknown metric was said alone. Its
    ``name``, ``suggestions`` and ``owners`` are the first unknown metric's."""

    def __init__(self, problems: Sequence[Problem], *, subject: str = "suite") -> None:
        super().__init__(problems, subject=subject)
        first = next(e for e in self.errors if isinstance(e, UnknownMetricError))
        self.name, self.suggestions, self.owners = first.name, first.suggestions, first.owners


def _said(problems: list[Problem]) -> list[tuple[str, str]]:
    """Each problem's place and message as a line of :class:`SuiteProblems` says them: "Invalid suite" said once for
    all, a placed error's :attr:`~ConfigError.placed` after its place (which its message names again), and the known
    metrics listed by the first unknown metric only (not by each, the same list again)."""
    said: list[tuple[str, str]] = []
    listed = False
    for where, error in problems:
        text = error.placed if where and error.placed else str(error).removeprefix("Invalid suite: ")
        if isinstance(error, UnknownMetricError):
            text, listed = (error.unlisted if listed else text), True
        said.append((where, text))
    return said


def flat_problems(problems: Sequence[Problem]) -> list[Problem]:
    """``problems``, those of a :class:`SuiteProblems` among them one by one."""
    return [p for where, e in problems for p in (e.problems if isinstance(e, SuiteProblems) else [(where, e)])]


def raise_problems(problems: Sequence[Problem], *, subject: str = "suite") -> None:
    """Raise nothing for no problems, a lone one as it is (its type and message unchanged), several as one
    :class:`SuiteProblems` of ``subject`` (those of a SuiteProblems among them each on its own line; an
    :class:`UnknownMetrics` where a metric is unknown)."""
    flat = flat_problems(problems)
    if len(flat) == 1:
        where, error = flat[0]
        error.where = where or error.where
        raise error
    if flat:
        unknown = any(isinstance(e, UnknownMetricError) for _, e in flat)
        raise UnknownMetrics(flat, subject=subject) if unknown else SuiteProblems(flat, subject=subject)


class DatasetError(RagscoreError):
    """The dataset as a whole cannot be scored (missing file, no rows, duplicate ids, bad format)."""


class StoreError(RagscoreError):
    """The run store failed, or the run it was asked about does not exist."""


class RunLostError(StoreError):
    """The store no longer holds a run it held (a Redis restarted without persistence, flushed, or evicting keys
    under maxmemory): what it scored is gone, and it cannot be resumed."""


class BrokerError(RagscoreError):
    """The embedded Redis server or the local worker processes could not be started."""


class StillLoadingError(BrokerError):
    """The embedded Redis server was still reading its stored runs back (``size_mb`` of them) when its wait ended."""

    def __init__(self, message: str, *, size_mb: float) -> None:
        super().__init__(message)
        self.size_mb = size_mb


class DatasetWarning(UserWarning):
    """What is probably wrong with a dataset or suite that still runs (a field a metric needs absent from every row,
    code_test with nothing to check): said before the run, by the Python API as this warning (the command line
    prints it); and once it ended, scores the data made 0 with no error (no row's gold id among its retrieved ids, a
    target's replies with nothing at a response path), as the lines ``ragscore run`` ends with."""


class EvictionWarning(UserWarning):
    """A cluster's Redis that may evict a run's keys (its ``maxmemory-policy`` under a memory limit is not
    ``noeviction``): said before the run's work is sent there, by the Python API as this warning (the command line
    prints it). A category of its own, so that a test suite's ``-W error::RuntimeWarning`` (numpy's) leaves it be and
    a notebook can filter it alone."""


class ReportError(RagscoreError):
    """A finished run's reports could not be written (a full disk, a folder where a report goes); the message names
    the report, not the hidden temporary file it is written to first. What was scored stays in the store."""


class MetricError(RagscoreError):
    """A metric could not score one item; the task records it as that item's error."""
