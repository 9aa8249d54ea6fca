"""A test plugin (loaded through RAGSCORE_PLUGINS) whose import fails quoting its API key, as a client logging in
at import time does: the key must not reach the error the CLI prints and workers store for every item."""

from __future__ import annotations

import os

raise RuntimeError(f"ACME login failed for https://acme.test/v1?key={os.environ['ACME_API_KEY']}")
