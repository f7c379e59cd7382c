"""A built post opened in headless Chromium from a local server: every chart drew its
SVG, the regime rows are there, the console is clean; a screenshot is kept in tmp."""

import re
import shutil
import subprocess
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest_publish import *  # noqa: F401,F403  (fixtures)
from conftest_publish import build_site, post_text, write_project

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
