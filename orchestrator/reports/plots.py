"""Plots as inline SVG strings: no plotting library, no network, crisp at any zoom, text searchable.

* :func:`histogram`: vertical bars of a distribution (one bar per value, or per bin).
* :func:`hbars`: horizontal bars with optional 95% CI whiskers (means per group, per system, ...).

Every label is XML-escaped; every plot has ``class="plot"``, a ``<title>`` and hover titles per bar.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ragscore_workers.counts import thousands

__all__ = ["Bar", "hbars", "histogram"]

COLOR = "#4c78a8"
ALT_COLOR = "#f58518"
AXIS = "#555"
#: Rows drawn by :func:`hbars`; the caller says how many were left out.
MAX_BARS = 40
_FONT = 'font-family="system-ui, sans-serif" font-size="11"'
#: Columns a bar's label fits in (a CJK character or an emoji takes two, as in a terminal); a longer label is cut
#: to whole characters and ``…``, and named in full by its hover title.
LABEL_COLUMNS = 22
#: Pixels a character of a histogram's value label takes at most (digits, ``.``, ``-`` at the 11 px font), and the
#: least space between two labels: a label that would run into the one before it is not drawn.
VALUE_GLYPH_PX = 7
VALUE_GAP_PX = 4
_ZWJ = "\u200d"


@dataclass(frozen=True)
class Bar:
    """One horizontal bar: a value, its 95% interval if known, and its sample size."""

    label: str
    value: float
    lo: float | None = None
    hi: float | None = None
    n: int | None = None

    @classmethod
    def of(cls, label: str, value: float, ci95: Sequence[float] | None, n: int | None) -> Bar:
        """A bar whose 95% interval is given as a summary's ``ci95``, ``[lo, hi]`` (None: not known)."""
        lo, hi = ci95 or (None, None)
        return cls(label, value, lo, hi, n)


def _extends(ch: str) -> bool:
    """Whether ``ch`` belongs to the character before it: a combining mark, a variation selector, a skin tone, an
    emoji tag, a zero-width joiner."""
    cp = ord(ch)
    return (
        unicodedata.category(ch) in ("Mn", "Me", "Mc")
        or ch == _ZWJ
        or 0xFE00 <= cp <= 0xFE0F
        or 0x1F3FB <= cp <= 0x1F3FF
        or 0xE0020 <= cp <= 0xE007F
    )


def _regional(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _characters(text: str) -> list[str]:
    """``text`` as the characters a reader sees (near enough to Unicode's grapheme clusters for a label): a letter
    with its accents, an emoji sequence joined by ZWJ, a flag's two regional indicators."""
    out: list[str] = []
    for ch in text:
        last = out[-1] if out else ""
        if last and (_extends(ch) or last.endswith(_ZWJ) or (_regional(ch) and len(last) == 1 and _regional(last))):
            out[-1] += ch
        else:
            out.append(ch)
    return out


def _columns(character: str) -> int:
    """Columns a character takes: two for East Asian wide and full-width ones, emoji and flags, else one."""
    base = character[0]
    return 2 if unicodedata.east_asian_width(base) in "WF" or "\ufe0f" in character or _regional(base) else 1


def short_label(label: str, columns: int = LABEL_COLUMNS) -> str:
    """``label`` when it fits in ``columns``, else as many of its whole characters as fit beside ``…``."""
    characters = _characters(label)
    if sum(map(_columns, characters)) <= columns:
        return label
    kept, used = [], 0
    for character in characters:
        used += _columns(character)
        if used > columns - 1:
            break
        kept.append(character)
    return "".join(kept) + "…"


def _num(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" {_FONT}>'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _shown_values(values: Sequence[float], counts: Sequence[int]) -> tuple[list[str], list[str], list[int]]:
    """One bar per value as a label shows it: ``(labels, hover titles, counts)``; values the label shows alike
    (0.9999999999 and 1.0 as ``1``) are one bar, whose hover title names the values it holds."""
    shown: dict[str, tuple[float, float, int]] = {}
    for value, count in zip(values, counts, strict=True):
        lo, hi, n = shown.get(_num(value), (value, value, 0))
        shown[_num(value)] = (min(lo, value), max(hi, value), n + count)
    titles = [text if lo == hi else f"{text} ({lo:.12g} to {hi:.12g})" for text, (lo, hi, _) in shown.items()]
    return list(shown), titles, [n for _, _, n in shown.values()]


def _labelled(texts: Sequence[str], slot: float) -> set[int]:
    """The bars whose value label is drawn: every one when the labels fit in their slots, else every k-th (the last
    always, in place of a k-th one it would run into), so that no two labels overlap."""
    need = max(map(len, texts)) * VALUE_GLYPH_PX + VALUE_GAP_PX
    stride = max(1, math.ceil(need / slot))
    drawn = set(range(0, len(texts), stride))
    last = len(texts) - 1
    if last not in drawn:
        drawn.discard(last - last % stride)
        drawn.add(last)
    return drawn


def histogram(labels: Sequence[float | tuple[float, float]], counts: Sequence[int], title: str) -> str:
    """Bars of ``counts``; a label is a value (drawn under its bar) or a ``(left, right)`` bin."""
    width, height, left, right, top, bottom = 380, 190, 44, 10, 12, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    body = [f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="{AXIS}"/>']
    if not counts:
        body.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no scored items</text>')
        return _svg(width, height, title, body)
    binned = isinstance(labels[0], tuple)
    if binned:
        texts = [""] * len(counts)
        titles = [f"[{_num(label[0])}, {_num(label[1])})" for label in labels if isinstance(label, tuple)]
    else:
        texts, titles, counts = _shown_values([label for label in labels if not isinstance(label, tuple)], counts)
    peak = max(max(counts), 1)
    slot = plot_w / len(counts)
    drawn = set() if binned else _labelled(texts, slot)
    for i, (text, what, count) in enumerate(zip(texts, titles, counts, strict=True)):
        h = plot_h * count / peak
        x = left + i * slot + (0.5 if binned else slot * 0.15)
        w = max(slot - (1.0 if binned else slot * 0.3), 1.0)
        body.append(
            f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{COLOR}">'
            f"<title>{escape(what)}: {count}</title></rect>"
        )
        if i in drawn:
            body.append(f'<text x="{x + w / 2:.1f}" y="{height - bottom + 14}" text-anchor="middle">{text}</text>')
    if binned:
        first, last = labels[0], labels[-1]
        assert isinstance(first, tuple) and isinstance(last, tuple)
        for x, edge, anchor in ((left, first[0], "start"), (left + plot_w, last[1], "end")):
            body.append(f'<text x="{x}" y="{height - bottom + 14}" text-anchor="{anchor}">{_num(edge)}</text>')
    body.append(f'<text x="{left - 4}" y="{top + 9}" text-anchor="end">{peak}</text>')
    body.append(f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>')
    body.append(f'<text x="{left + plot_w / 2}" y="{height - 4}" text-anchor="middle" fill="{AXIS}">score</text>')
    return _svg(width, height, title, body)


def hbars(
    bars: Sequence[Bar],
    title: str,
    lo: float = 0.0,
    hi: float = 1.0,
    color: str = COLOR,
    value: Callable[[float], str] = _num,
) -> str:
    """One row per bar (at most ``MAX_BARS``): label, bar from 0, CI whisker, value and n; ``value`` writes a value
    and its interval's ends as the table beside the plot does (``0.095``, not ``0.0946`` beside ``0.3``)."""
    bars = list(bars)[:MAX_BARS]
    values = [v for b in bars for v in (b.value, b.lo, b.hi) if v is not None]
    lo, hi = min([lo, *values]), max([hi, *values])
    label_w, right, top, row = 150, 110, 8, 20
    width = 560
    plot_w = width - label_w - right
    height = top * 2 + row * max(len(bars), 1) + 14

    def x(v: float) -> float:
        return label_w + plot_w * (v - lo) / (hi - lo or 1.0)

    zero = x(0.0) if lo <= 0.0 <= hi else x(lo)
    body = [f'<line x1="{zero:.1f}" y1="{top}" x2="{zero:.1f}" y2="{height - 14}" stroke="{AXIS}"/>']
    for i, b in enumerate(bars):
        y = top + i * row
        x0, x1 = sorted((zero, x(b.value)))
        label = short_label(b.label)
        full = f"<title>{escape(b.label)}</title>" if label != b.label else ""
        ci = f" [{value(b.lo)}, {value(b.hi)}]" if b.lo is not None and b.hi is not None else ""
        n = f" n={thousands(b.n)}" if b.n is not None else ""
        body.append(f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(label)}{full}</text>')
        body.append(
            f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 0.5):.1f}" height="{row - 6}" fill="{color}">'
            f"<title>{escape(b.label)}: {value(b.value)}{ci}{n}</title></rect>"
        )
        if b.lo is not None and b.hi is not None:
            ylo = y + row / 2
            body.append(
                f'<line x1="{x(b.lo):.1f}" y1="{ylo:.1f}" x2="{x(b.hi):.1f}" y2="{ylo:.1f}" stroke="#222"/>'
                f'<line x1="{x(b.lo):.1f}" y1="{ylo - 4:.1f}" x2="{x(b.lo):.1f}" y2="{ylo + 4:.1f}" stroke="#222"/>'
                f'<line x1="{x(b.hi):.1f}" y1="{ylo - 4:.1f}" x2="{x(b.hi):.1f}" y2="{ylo + 4:.1f}" stroke="#222"/>'
            )
        body.append(f'<text x="{label_w + plot_w + 6}" y="{y + 14}">{escape(value(b.value))}{escape(n)}</text>')
    axis_y = height - 2
    body.append(f'<text x="{label_w}" y="{axis_y}" text-anchor="start" fill="{AXIS}">{_num(lo)}</text>')
    body.append(f'<text x="{label_w + plot_w}" y="{axis_y}" text-anchor="end" fill="{AXIS}">{_num(hi)}</text>')
    return _svg(width, height, title, body)
