"""Fakes at the edge of the world: real servers standing in for outside services (never our own code).

Their names are imported on first use, so that ``python -m tests.fakes.fake_provider`` runs that module once (an
eager import here would load it a second time, as ``__main__``, with runpy's warning)."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_provider import FakeProvider, count_tokens, format_duration
    from .fake_rag import FakeRag

__all__ = ["FakeProvider", "FakeRag", "count_tokens", "format_duration"]

_MODULE_OF = {"FakeProvider": "fake_provider", "count_tokens": "fake_provider", "format_duration": "fake_provider",
              "FakeRag": "fake_rag"}  # fmt: skip


def __getattr__(name: str) -> Any:
    """``FakeProvider`` and the others, from their module."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_MODULE_OF[name]}", __name__), name)
