"""Fakes at the edge of the world: real servers standing in for outside services (never our own code)."""

from .fake_provider import FakeProvider, count_tokens, format_duration
from .fake_rag import FakeRag

__all__ = ["FakeProvider", "FakeRag", "count_tokens", "format_duration"]
