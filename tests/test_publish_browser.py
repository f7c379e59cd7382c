"""A built post opened in headless Chromium from a local server: every chart drew its
SVG, the regime rows are there, the console is clean; a screenshot is kept in tmp."""

import json
import re
import shutil
import subprocess
import threading
from functools import partial
from html import unescape
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from publish_project import build_site, post_text, write_project

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=5000",
]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory, fixture_db):
    if not shutil.which(CHROMIUM):
        pytest.fail("chromium is not installed: run `make browser` (apt-get install -y chromium)")
    root = tmp_path_factory.mktemp("browser")
    result = build_site(write_project(root, fixture_db, {"p.md": post_text()}))
    assert result.ok, result.warnings
    (result.site / "broken.html").write_text("<html><body><script>notDefined();</script></body></html>")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(result.site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    page = next(result.site.glob("blog/20*/**/index.html")).relative_to(result.site).parent
    yield root, result.site, f"http://127.0.0.1:{server.server_address[1]}", page.as_posix()
    server.shutdown()


def chromium(root, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={root / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


# Injected into a copy of a page: after layout, list every table wider than the article
# column it sits in (a 1280 px window), as an attribute --dump-dom can read.
WIDTH_PROBE = """<script>window.addEventListener("load", function () {
  var bad = [];
  document.querySelectorAll(".md-content__inner table").forEach(function (t, i) {
    var col = t.closest(".md-content__inner").getBoundingClientRect().width;
    var w = Math.max(t.scrollWidth, t.getBoundingClientRect().width);
    if (w > col + 1) bad.push(i + ":" + Math.round(w) + ">" + Math.round(col) + ":" +
                             ((t.closest("[class*=bothrows]") || t.parentElement).className));
  });
  document.body.setAttribute("data-too-wide", bad.join(" ") || "none");
});</script>"""


def tables_too_wide(root, site, base, page) -> str:
    """Tables of the built page wider than the content column at 1280 px ('none' if none)."""
    html = (site / page / "index.html").read_text()
    (site / page / "probe.html").write_text(html.replace("</body>", WIDTH_PROBE + "</body>"))
    run = chromium(root, "--window-size=1280,2000", "--dump-dom", f"{base}/{page}/probe.html")
    found = re.search(r'data-too-wide="([^"]*)"', run.stdout)
    assert found, run.stderr[-2000:]
    return found.group(1)


# Injected into a copy of a page: after layout (folds closed, as a reader first sees it),
# the page's height, where its title and first headline table or chart sit, the height
# of its tab bars, and every table header whose words broke inside a word.
LAYOUT_PROBE = """<script>window.addEventListener("load", function () { setTimeout(function () {
  var box = function (el) {
    if (!el) return null;
    var r = el.getBoundingClientRect();
    return [Math.round(r.top + scrollY), Math.round(r.bottom + scrollY)];
  };
  var broken = [];
  document.querySelectorAll(".md-content div[class^=bothrows-] th").forEach(function (th) {
    if (!th.offsetParent) return;
    var walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
    for (var node = walk.nextNode(); node; node = walk.nextNode()) {
      var re = /\\S+/g, m;
      while ((m = re.exec(node.data))) {
        var range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        var lines = {};
        Array.prototype.forEach.call(range.getClientRects(), function (r) { lines[Math.round(r.top)] = 1; });
        if (Object.keys(lines).length > 1) broken.push(m[0]);
      }
    }
  });
  var heads = Array.prototype.filter.call(
    document.querySelectorAll(".bothrows-headline-table table, .bothrows-figure .bothrows-chart"),
    function (e) { return e.offsetParent; });
  var provenance = document.getElementById("provenance");
  document.body.setAttribute("data-layout", JSON.stringify({
    height: document.documentElement.scrollHeight,
    title: box(document.querySelector(".md-content h1")),
    headline: box(heads[0]),
    body: provenance ? box(provenance)[0] : null,
    tab_bars: Array.prototype.map.call(document.querySelectorAll(".tabbed-labels"),
                                       function (e) { return box(e)[1] - box(e)[0]; }),
    broken_headers: broken
  }));
}, 1000); });</script>"""


def layout(root, site, base, page) -> dict:
    """LAYOUT_PROBE's findings for a built page at 1280 x 900."""
    html = (site / page / "index.html").read_text()
    (site / page / "layout.html").write_text(html.replace("</body>", LAYOUT_PROBE + "</body>"))
    run = chromium(root, "--window-size=1280,900", "--dump-dom", f"{base}/{page}/layout.html")
    found = re.search(r'data-layout="([^"]*)"', run.stdout)
    assert found, run.stderr[-2000:]
    return json.loads(unescape(found.group(1)))


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_the_console_check_sees_errors(served):
    root, _, base, _ = served
    run = chromium(root, "--dump-dom", f"{base}/broken.html")
    assert any("notDefined" in m for m in console_messages(run.stderr))


def test_post_renders_its_charts_and_regime_rows(served):
    root, site, base, page = served
    run = chromium(root, "--dump-dom", f"{base}/{page}/")
    dom = run.stdout
    chart_ids = re.findall(
        r'<div class="bothrows-chart" id="([^"]+)"', (site / page / "index.html").read_text()
    )
    assert len(chart_ids) == 4  # two charts, one per chip tab
    for chart_id in chart_ids:
        start = dom.index(f'id="{chart_id}"')
        assert "main-svg" in dom[start : dom.index("</figure>", start)], f"chart {chart_id} is blank"
    assert dom.count('class="bothrows-regime-row') == 12
    for chip in ("Fixture M1", "Fixture M3"):  # both chips' rows, batch 1 to ceiling
        rows = re.findall(
            rf'<tr class="bothrows-regime-row[^"]*" data-chip="{chip}" data-arm="[^"]+" '
            r'data-concurrency="(\d+)"',
            dom,
        )
        assert sorted(set(rows)) == ["1", "2", "4"] and len(rows) == 6
    table = dom[dom.index('id="claims-on-every-chip"') :]
    table = table[: table.index("</table>")]
    assert re.findall(r"<th>([^<]+)</th>", table)[3:] == ["Fixture M1", "Fixture M3"]
    assert re.findall(r'data-verdict="([^"]+)"', table) == ["holds", "holds"]
    assert console_messages(run.stderr) == []
    assert tables_too_wide(root, site, base, page) == "none"
    shot = root / "post.png"
    run = chromium(root, f"--screenshot={shot}", "--window-size=1280,2600", f"{base}/{page}/")
    assert shot.is_file() and shot.stat().st_size > 10_000, run.stderr[-2000:]


CHIPS_POST = """\
---
date: 2026-11-20
experiment: spec-fixture
chip: Fixture M1
---
# The same post on one chip and on four

Solo on M1, MTP is {{ claim("+25%", gain("decode_tps", arm="on", base="off", concurrency=1)) }} on decode.

{{ headline_table(arm="on", base="off", metrics=["prefill_tps", "decode_tps"]) }}

{{ regime_table(["prefill_tps", "decode_tps", "aggregate_tps", "drafted_passes", "acceptance", "state_mb"]) }}

{{ chart("decode_tps", x="concurrency") }}

{{ drafted_by_width_chart() }}

{{ traffic({1: 0.5, 4: 0.5}) }}
"""

# After load, pick the last chip in the first tab set: material's linked tabs switch every
# set, and every chart of the shown tabs must be drawn at its column's width.
SWITCH_PROBE = """<script>window.addEventListener("load", function () { setTimeout(function () {
  var sets = document.querySelectorAll(".tabbed-set");
  var labels = sets[0].querySelectorAll(".tabbed-labels > label");
  labels[labels.length - 1].click();
  setTimeout(function () {
    var shown = Array.prototype.map.call(sets, function (s) {
      var input = s.querySelector(":scope > input:checked");
      return document.querySelector('label[for="' + input.id + '"]').textContent;
    });
    var charts = Array.prototype.filter.call(document.querySelectorAll(".bothrows-chart"),
      function (c) { return c.offsetParent; }).map(function (c) {
        return [Math.round(c.getBoundingClientRect().width),
                Math.round(c.querySelector(".main-svg").getBoundingClientRect().width),
                Math.round(c.closest(".md-content__inner").getBoundingClientRect().width)];
      });
    document.body.setAttribute("data-switch", JSON.stringify({shown: shown, charts: charts}));
  }, 1500);
}, 1000); });</script>"""


def test_four_chips_are_no_taller_than_one_plus_the_tab_bars(tmp_path):
    from fixture_db import FixtureChip, build_fixture

    chips = tuple(FixtureChip(f"Fixture M{i}", 100.0 + 20 * i) for i in range(1, 5))
    found = {}
    for n in (1, 4):
        db = tmp_path / f"chips{n}.duckdb"
        build_fixture(db, chips=chips[:n], passes_per_run=8)
        config = write_project(tmp_path / f"p{n}", db, {"p.md": CHIPS_POST})
        linked = config.read_text().replace(
            "  font: false\n", "  font: false\n  features: [content.tabs.link]\n"
        )
        config.write_text(linked)  # as the repository's mkdocs.yml: one pick switches every block
        result = build_site(config)
        assert result.ok, result.warnings
        site = result.site
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            base = f"http://127.0.0.1:{server.server_address[1]}"
            page = next(site.glob("blog/20*/**/index.html")).relative_to(site).parent.as_posix()
            found[n] = layout(tmp_path, site, base, page)
            html = (site / page / "index.html").read_text()
            if n == 4:
                assert all(c.name in html for c in chips)  # every chip stays in the page
                (site / page / "switch.html").write_text(html.replace("</body>", SWITCH_PROBE + "</body>"))
                run = chromium(tmp_path, "--window-size=1280,900", "--dump-dom", f"{base}/{page}/switch.html")
                switched = json.loads(unescape(re.search(r'data-switch="([^"]*)"', run.stdout).group(1)))
        finally:
            server.shutdown()
    one, four = found[1], found[4]
    assert one["tab_bars"] == [] and len(four["tab_bars"]) == 5  # headline, regime, 2 charts, traffic
    # each bar's height and each position is rounded to a whole pixel: a bar of 40.6 px
    # reads 40 or 41 by where it falls, so the bars may sum a pixel short each
    tabs = sum(four["tab_bars"]) + len(four["tab_bars"])
    assert four["body"] <= one["body"] + tabs, (one, four)
    assert four["height"] <= one["height"] + tabs, (one, four)
    assert switched["shown"] == ["Fixture M4"] * 5, switched
    assert len(switched["charts"]) == 2
    for div, svg, column in switched["charts"]:  # drawn while hidden, sized when shown
        assert div == svg == column, switched
