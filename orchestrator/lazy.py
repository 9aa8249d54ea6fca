"""Public names of a package imported on first use (PEP 562), so that importing one light module of the package
(``orchestrator.cli`` for ``ragscore status``) does not import every heavy one its ``__init__`` names."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(
    package: str, modules: dict[str, tuple[str, ...]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package``: each name of ``modules`` (module relative to the
    package -> the names it holds) imported from its module when first asked for, then kept in the package (asked
    again, it is an attribute); a submodule not yet imported is imported (``import orchestrator`` then
    ``orchestrator.api.IncompleteRunWarning``, as when ``__init__`` imported the API); any other name is an
    AttributeError. ``dir(package)`` lists them before their first use, for ``help()`` and a notebook's completion."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            if name.startswith("_") or importlib.util.find_spec(f"{package}.{name}") is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            return importlib.import_module(f"{package}.{name}")
        value = getattr(importlib.import_module(where[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
