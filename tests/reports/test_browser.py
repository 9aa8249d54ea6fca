"""report.html as a person sees it: headless Chromium (Debian's ``chromium``) renders it offline.

Flags for a closed network: no sandbox (containers), no GPU, no QUIC, no first-run, background networking,
component updates or sync, and a throwaway profile. ``--enable-logging=stderr --v=0`` makes every console
message a ``CONSOLE`` line on stderr: the report has no script, and its Content-Security-Policy forbids any
load, so any such line (a blocked fetch, an error) fails the test. A control page proves the scan sees them.

A copy of the report with one nonce'd probe script rasterizes every SVG plot on a canvas, as the browser
draws it, and counts its coloured pixels: a plot with no bar drawn has none.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator import evaluate
from orchestrator.reports import from_dir
from orchestrator.reports.compare import compare
from orchestrator.reports.compare_view import render_compare_html

from .conftest import RichRun

pytestmark = pytest.mark.integration

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
    "--force-device-scale-factor=1", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
]  # fmt: skip
WIDTH = 1280
PROBE = """<script nonce="probe">
(async () => {
  const plots = [];
  for (const svg of document.querySelectorAll("svg.plot")) {
    const box = svg.getBoundingClientRect();
    const img = new Image();
    img.src = "data:image/svg+xml;charset=utf-8," + encodeURIComponent(new XMLSerializer().serializeToString(svg));
    await img.decode();
    const canvas = document.createElement("canvas");
    canvas.width = img.width; canvas.height = img.height;
    const ctx = canvas.getContext("2d");
    ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let coloured = 0;
    for (let i = 0; i < px.length; i += 4) {
      const [r, g, b, a] = [px[i], px[i + 1], px[i + 2], px[i + 3]];
      if (a > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 40) coloured++;
    }
    plots.push({title: svg.getAttribute("aria-label"), width: box.width, height: box.height, coloured});
  }
  const pre = document.createElement("pre");
  pre.id = "probe";
  const page = document.documentElement, font = getComputedStyle(document.body).fontFamily;
  const lines = (cell) => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return range.getClientRects().length;
  };
  // the worst items' headers and ids: [text, lines it takes]
  const worst = [...document.querySelectorAll("#worst ~ table")].filter((t) => t.rows[0].cells[0].textContent === "#");
  const split = worst.flatMap((t) => [...t.rows[0].cells, ...[...t.rows].slice(1).map((r) => r.cells[1])])
    .map((cell) => [cell.textContent.trim(), lines(cell)]);
  pre.textContent = JSON.stringify({plots, height: page.scrollHeight, width: page.scrollWidth, window: innerWidth,
                                    font, split});
  document.body.appendChild(pre);
})();
</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("headless Chromium is needed: apt-get install -y chromium")
    return path


def browse(page: Path, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", *mode, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_lines(stderr: str) -> list[str]:
    """Console messages of the page (every level: Chromium logs them all as INFO:CONSOLE)."""
    return [line for line in stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]


def probe(page: Path, tmp_path: Path) -> dict:
    copy = tmp_path / f"probe-{page.name}"
    html = page.read_text(encoding="utf-8")
    html = html.replace("default-src 'none';", "default-src 'none'; script-src 'nonce-probe';", 1)
    copy.write_text(html.replace("</body>", PROBE + "</body>", 1), encoding="utf-8")
    result = browse(copy, tmp_path / "profile-probe", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    match = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, flags=re.S)
    assert match, "the probe did not run:\n" + "\n".join(console_lines(result.stderr))
    return json.loads(match.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_the_console_scan_sees_errors_and_blocked_loads(tmp_path: Path) -> None:
    page = tmp_path / "control.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "script-src 'nonce-c'\"></head><body><img src='http://example.invalid/x.png'>"
        "<script nonce='c'>console.error('boom'); missing();</script></body></html>"
    )
    result = browse(page, tmp_path / "profile", "--dump-dom")
    lines = console_lines(result.stderr)
    assert any("Content Security Policy" in line for line in lines), result.stderr[-2000:]
    assert any('"boom"' in line for line in lines) and any("missing is not defined" in line for line in lines)


def test_report_renders_offline_with_every_plot_drawn_and_no_console_message(rich_run: RichRun, tmp_path: Path) -> None:
    page = rich_run.out / "report.html"
    found = probe(page, tmp_path)
    svgs = len(re.findall(r'<svg class="plot"', page.read_text(encoding="utf-8")))
    assert len(found["plots"]) == svgs >= 10
    for plot in found["plots"]:
        assert plot["width"] >= 300 and plot["height"] >= 40, plot
        assert plot["coloured"] > 200, plot  # bars were drawn
    shot = tmp_path / "report.png"
    height = min(int(found["height"]), 16_000)
    result = browse(page, tmp_path / "profile", f"--window-size={WIDTH},{height}", f"--screenshot={shot}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_lines(result.stderr) == []
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == (WIDTH, height)
    assert shot.stat().st_size > 50_000  # a page of tables and plots, not a blank one


def test_the_pages_style_sheet_is_read_whole(rich_run: RichRun, tmp_path: Path) -> None:
    """The CSS went through the HTML escaping: ``"Segoe UI"`` became ``&#34;Segoe UI&#34;`` inside ``<style>``, which
    a browser does not unescape, so the font-family declaration was dropped and both pages fell back to a serif."""
    page = tmp_path / "compare.html"
    page.write_text(render_compare_html(compare([from_dir(rich_run.out)])), encoding="utf-8")
    for html in (rich_run.out / "report.html", page):
        assert probe(html, tmp_path)["font"].startswith("system-ui"), html.name


def test_a_long_name_without_spaces_wraps_instead_of_widening_the_page(cluster: str, tmp_path: Path) -> None:
    """An id, group, system or error of a few thousand characters without a space (a hash, a URL, a text pasted into
    the group column) made report.html and compare.html tens of thousands of pixels wide: every table and heading
    scrolled sideways past it. Such a cell breaks its text anywhere, so the page stays as wide as the window."""
    long = "x" * 3000
    rows = [{"id": f"q{i}-{long}" if i == 0 else f"q{i}", "system": system, "group": f"g-{long}",
             "answer": "a", "reference": "a" if (i + len(system)) % 2 else "b"}
            for system in ("base", f"s-{long}") for i in range(4)]  # fmt: skip
    run = evaluate(rows, {"name": f"n-{long}", "metrics": ["exact_match"]}, broker=cluster, out=tmp_path / "run")
    page = tmp_path / "compare.html"
    page.write_text(render_compare_html(compare([from_dir(run.out_dir)])), encoding="utf-8")
    for html in (run.out_dir / "report.html", page):
        assert long in html.read_text(encoding="utf-8")  # shown whole, wrapped
        found = probe(html, tmp_path)
        assert found["width"] <= found["window"], (html.name, found["width"], found["window"])


def test_worst_items_of_long_questions_and_answers_keep_their_headers_and_short_ids_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 10,000-row run's worst items, with questions and answers cut at 200 characters, squeezed the other columns
    to a few characters each: ``system`` read ``sy/st/e/m`` and an id ``trai/n-q00/1-000``, one piece per line."""
    monkeypatch.setenv("RAGSCORE_HOME", str(tmp_path / "h"))
    monkeypatch.delenv("RAGSCORE_BROKER_URL", raising=False)
    words = " ".join(f"word{i}" for i in range(60))
    rows = [{"id": f"q-{i:04d}", "system": "v1", "group": "cnn", "question": f"Why {words}?", "answer": words,
             "reference": words if i % 3 else "x"} for i in range(12)]  # fmt: skip
    dataset = tmp_path / "data.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = evaluate(dataset, {"name": "long", "metrics": ["exact_match"]}, out=tmp_path / "run")
    page = run.out_dir / "report.html"
    assert "q-0000" in page.read_text(encoding="utf-8").split('id="worst"')[1]
    cells = probe(page, tmp_path)["split"]
    assert ["system", 1] in cells and ["q-0000", 1] in cells
    assert [cell for cell in cells if cell[1] > len(cell[0].split())] == []  # no word broken in two
