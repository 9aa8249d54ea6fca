"""Reports of a finished run: files (json, jsonl, csv, markdown, html), the console table, and compare.

Its public names are imported on first use: ``ragscore status`` reads :mod:`.live` alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .console import print_summary
    from .files import FORMATS, write_outputs, write_reports
    from .html import render_html
    from .markdown import render_markdown
    from .source import RunData, from_dir, from_store, open_run

__all__ = [
    "FORMATS",
    "RunData",
    "from_dir",
    "from_store",
    "open_run",
    "print_summary",
    "render_html",
    "render_markdown",
    "write_outputs",
    "write_reports",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        ".console": ("print_summary",),
        ".files": ("FORMATS", "write_outputs", "write_reports"),
        ".html": ("render_html",),
        ".markdown": ("render_markdown",),
        ".source": ("RunData", "from_dir", "from_store", "open_run"),
    },
)
