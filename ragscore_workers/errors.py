"""One error tree for ragscore; upstream errors are translated at the edges with ``raise ... from``.

RagscoreError
├── ConfigError            bad suite, unknown metric, bad params, bad settings
│   └── UnknownMetricError carries the name and close matches
├── DatasetError           the dataset cannot be used at all (missing, empty, duplicate ids)
├── StoreError             the run store (Redis) failed or holds no such run
├── BrokerError            the embedded Redis or the local workers could not be started
└── MetricError            a metric could not score one item (recorded per item, never raised
                           into Celery)
"""

from __future__ import annotations

from .counts import did_you_mean

__all__ = [
    "BrokerError",
    "ConfigError",
    "DatasetError",
    "MetricError",
    "RagscoreError",
    "StoreError",
    "UnknownMetricError",
]


class RagscoreError(Exception):
    """Root of every error ragscore raises on purpose."""


class ConfigError(RagscoreError):
    """The suite or settings are invalid; raised before anything is submitted."""


class UnknownMetricError(ConfigError):
    """A suite names a metric the registry does not know."""

    def __init__(self, name: str, suggestions: list[str], known: list[str], owners: list[str] | None = None) -> None:
        self.name = name
        self.suggestions = suggestions
        self.owners = owners or []  # the metrics that give an output of this name
        hint = f" {did_you_mean(suggestions, sentence=True)}" if suggestions else ""
        if owners:  # an output's name (``mrr``, ``recall_at_5``), which gates and reports use
            hint = (f" {name!r} is an output of {' and '.join(repr(o) for o in owners)}: list that metric (gates and "
                    f"reports use its outputs' names).{hint}")  # fmt: skip
        if " - " in name:  # metrics: [- exact_match, then "  - mrr" one column deeper]: YAML reads one name
            hint += (" A name with ' - ' in it looks like a list item indented deeper than the one above it: YAML "
                     "reads the two as one name; start every item of the list in the same column.")  # fmt: skip
        super().__init__(f"Unknown metric {name!r}.{hint} Known metrics: {', '.join(known)}.")


class DatasetError(RagscoreError):
    """The dataset as a whole cannot be scored (missing file, no rows, duplicate ids, bad format)."""


class StoreError(RagscoreError):
    """The run store failed, or the run it was asked about does not exist."""


class RunLostError(StoreError):
    """The store no longer holds a run it held (a Redis restarted without persistence, flushed, or evicting keys
    under maxmemory): what it scored is gone, and it cannot be resumed."""


class BrokerError(RagscoreError):
    """The embedded Redis server or the local worker processes could not be started."""


class MetricError(RagscoreError):
    """A metric could not score one item; the task records it as that item's error."""
