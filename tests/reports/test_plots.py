"""The SVG plots: well-formed, escaped, one bar per value, whiskers for intervals."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from orchestrator.reports.plots import MAX_BARS, Bar, hbars, histogram

SVG = "{http://www.w3.org/2000/svg}"


def _rects(svg: str) -> list[ET.Element]:
    return [r for r in ET.fromstring(svg).iter(f"{SVG}rect")]


def test_histogram_draws_one_bar_per_value_with_heights_in_proportion() -> None:
    svg = histogram([0.0, 0.5, 1.0], [2, 0, 4], "dist")
    heights = [float(r.get("height")) for r in _rects(svg)]
    assert len(heights) == 3 and heights[1] == 0.0 and heights[2] == 2 * heights[0] > 0


def test_binned_histogram_labels_its_range() -> None:
    svg = histogram([(0.0, 0.5), (0.5, 1.0)], [1, 3], "dist")
    texts = [t.text for t in ET.fromstring(svg).iter(f"{SVG}text")]
    assert "0" in texts and "1" in texts and len(_rects(svg)) == 2


def test_empty_histogram_says_so() -> None:
    assert "no scored items" in histogram([], [], "dist")


def test_hbars_escape_labels_and_draw_ci_whiskers() -> None:
    svg = hbars([Bar("<b>&", 0.5, 0.4, 0.6, n=10), Bar("plain", 0.25)], "means")
    root = ET.fromstring(svg)  # parses: the label was escaped
    assert "<b>&" in [t.text for t in root.iter(f"{SVG}text")]
    assert len(list(root.iter(f"{SVG}line"))) == 1 + 3  # the zero axis, one whisker with two caps
    widths = [float(r.get("width")) for r in _rects(svg)]
    assert widths[0] == 2 * widths[1]


def test_hbars_extend_the_axis_to_negative_values_and_cap_the_rows() -> None:
    svg = hbars([Bar("kappa", -0.5)], "kappa", -1.0, 1.0)
    (rect,) = _rects(svg)
    assert float(rect.get("width")) > 0
    many = hbars([Bar(f"g{i}", 0.5) for i in range(MAX_BARS + 10)], "many")
    assert len(_rects(many)) == MAX_BARS


def _labels(svg: str) -> list[tuple[str, str | None]]:
    """Each bar label's text and the full name its hover title holds (None when the label is whole)."""
    texts = [t for t in ET.fromstring(svg).iter(f"{SVG}text") if t.get("x") == "144"]  # the labels' right edge
    return [(t.text or "", next((s.text for s in t.iter(f"{SVG}title")), None)) for t in texts]


def test_hbars_cut_a_long_label_by_its_width_whole_characters_kept_and_name_it_in_full_on_hover() -> None:
    """A label was cut at 22 code points: 22 CJK characters are twice as wide as 22 Latin ones and ran out of the
    plot on the left, and a cut could split an emoji sequence (a family with its joiners, a flag's two letters) into
    other pictures. The full name was only on the bar's hover title, not on the label's."""
    family, flag = "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1ef\U0001f1f5"
    cjk = "検索拡張生成システム評価の比較実験第二版"
    names = ["a" * 22, "b" * 23, cjk, "x" + family * 12, flag * 15, "e\u0301" * 30]
    shown = _labels(hbars([Bar(name, 0.5) for name in names], "means"))
    assert shown[0] == ("a" * 22, None) and shown[1] == ("b" * 21 + "…", "b" * 23)
    assert [full for _, full in shown[2:]] == names[2:]  # the full name on hover
    cut_cjk, families, flags, accents = (text.removesuffix("…") for text, _ in shown[2:])
    assert cut_cjk == cjk[:10]  # 10 characters of two columns, and the ellipsis: 21 columns
    assert families.removeprefix("x") == family * 10  # each a two-column picture, none split
    assert flags == flag * 10
    assert accents == "e\u0301" * 21  # each accent kept with its letter


def _value_labels(svg: str) -> list[tuple[float, str]]:
    """The labels under a histogram's bars: ``(x, text)``, left to right."""
    below = [t for t in ET.fromstring(svg).iter(f"{SVG}text") if t.get("y") == "170"]
    return [(float(t.get("x")), t.text or "") for t in below]


def test_histogram_value_labels_are_distinct_and_never_run_together() -> None:
    """Twelve continuous values drew twelve labels 27 px apart, read as ``0.2960.754 0.8050.8160.817``, and
    0.9999999999 and 1.0 were two bars both labelled ``1``."""
    values = [0.296, 0.754, 0.805, 0.816, 0.817, 0.85, 0.9, 0.91, 0.92, 0.95, 0.9999999999, 1.0]
    svg = histogram(values, [1] * 11 + [3], "dist")
    labels = _value_labels(svg)
    texts = [text for _, text in labels]
    assert len(texts) == len(set(texts)) and texts[0] == "0.296" and texts[-1] == "1", texts
    glyph = 6.5  # px a digit or point takes at the plot's 11 px font, at the widest
    for (x1, a), (x2, b) in zip(labels, labels[1:], strict=False):
        assert x2 - x1 >= glyph * (len(a) + len(b)) / 2 + 2, (a, b, x2 - x1)
    rects = _rects(svg)
    assert len(rects) == 11  # the values shown as 1 are one bar of 4
    assert [r.findtext(f"{SVG}title") for r in rects][-1] == "1 (0.9999999999 to 1): 4"
    # A few short labels, far enough apart, are each drawn under their bar.
    assert [text for _, text in _value_labels(histogram([0.0, 0.5, 1.0], [2, 0, 4], "dist"))] == ["0", "0.5", "1"]
