"""Asking the system under test: a target's reply fills a row's fields before it is scored.

``template`` renders the request from a row, ``jsonpath`` reads fields out of the reply, ``endpoints``
are the two kinds of target (HTTP, Python callable), ``client`` wraps a call in the shared limiter,
reply cache, bounded retries and the run's circuit breaker, and ``fill`` turns a reply into a row.
"""

from .client import TargetClient, build_target_client
from .errors import TargetError, TargetStopped
from .fill import fill_row

__all__ = ["TargetClient", "TargetError", "TargetStopped", "build_target_client", "fill_row"]
