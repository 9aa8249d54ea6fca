"""Metric families. Each module registers its metrics with :func:`registry.register` on import.

New families plug in without touching the spine: add a module to this package (it is discovered), ship
one in another distribution under the ``ragscore.metrics`` entry-point group, or name importable modules
in ``RAGSCORE_PLUGINS`` (comma-separated; every worker and the orchestrator must be able to import them).
"""

from __future__ import annotations

import importlib
import pkgutil
import socket
import traceback
from collections.abc import Callable
from functools import partial
from importlib.metadata import entry_points

from ..errors import ConfigError
from ..providers.errors import exception_text

__all__ = ["load_all"]

_loaded = False


def load_all() -> None:
    """Import every metric module of this package and every ``ragscore.metrics`` entry point (once),
    and the modules named in ``RAGSCORE_PLUGINS`` (read each time: importing twice is a no-op)."""
    global _loaded
    if not _loaded:
        for info in pkgutil.iter_modules(__path__):
            if not info.name.startswith("_") and info.name != "registry":
                importlib.import_module(f"{__name__}.{info.name}")
        for ep in entry_points(group="ragscore.metrics"):
            _import(f"the ragscore.metrics entry point {ep.name!r} ({ep.value})", ep.load)
        _loaded = True
    from ..settings import get_settings

    for module in filter(None, (m.strip() for m in get_settings().plugins.split(","))):
        _import(f"RAGSCORE_PLUGINS names {module!r}, which", partial(importlib.import_module, module))


def _import(what: str, load: Callable[[], object]) -> None:
    """Run ``load``; a plug-in that cannot be imported here (not installed on this host, a missing dependency, a
    bug) is a ConfigError saying which: the CLI's exit 2, a worker's error for each item, not a traceback or a
    failed chunk whose chord never completes."""
    try:
        load()
    except ConfigError:  # a metric registered twice says so itself
        raise
    except Exception as exc:
        why = exception_text(exc)  # a plug-in's text may quote its key
        # from None: a chained cause is printed, unredacted, by every traceback of this error (a worker's
        # log.exception, Celery's log of a task that raised it); its type, message and line are in ``why``.
        raise ConfigError(
            f"{what} cannot be imported on {socket.gethostname()}: {why}{_raised_at(exc)} (every worker and "
            "the orchestrator must be able to import the modules that register the suite's metrics)"
        ) from None


def _raised_at(exc: BaseException) -> str:
    """``, raised at FILE:LINE``: the last frame of ``exc`` outside the import machinery (frozen importlib),
    where a plug-in's author looks, as its traceback is not shown; "" when there is none (a SyntaxError says its
    own line)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    return f", raised at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
