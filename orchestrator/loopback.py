"""The host names of this machine's loopback, for what must tell "this machine" from another without a DNS look-up,
which could hang: one Redis server whichever is written (runner), an unauthenticated Flower that listens on this
machine only (reports.flower). Light: imported by ``ragscore flower`` before anything heavy."""

from __future__ import annotations

__all__ = ["LOOPBACK_HOSTS"]

#: ``localhost``, ``127.0.0.1`` and ``::1`` (a URL's ``[::1]`` without its brackets), lower case.
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
