"""Public names of a package imported on first use (PEP 562), so that importing one light module of the package
(``orchestrator.cli`` for ``ragscore status``) does not import every heavy one its ``__init__`` names."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, modules: dict[str, tuple[str, ...]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name of ``modules`` (module relative to the package -> the
    names it holds) imported from its module when first asked for; any other name is an AttributeError."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name], package), name)

    return __getattr__
