"""The flagship post as published: the committed database and the repository's own
mkdocs.yml build strictly (into a tmp folder), every claim holds, every chip has its
batch-1 and ceiling rows for every arm, the traffic choice is shown for both profiles,
the other post's figures stay in their own unaudited table, and in headless Chromium
every chart draws with a clean console."""

import re
import shutil
import threading
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from publish_project import build_site
from test_publish_browser import CHROMIUM, _Quiet, chromium, console_messages, layout, tables_too_wide

from runner.cli import main as cli
from runner.publish.sql.reader import Reader
from runner.store.measurements import sync_database

REPO = Path(__file__).resolve().parents[1]
DB = REPO / "reports" / "data" / "runs.duckdb"
NAME = "spec-decode-batching"
POST = REPO / "reports" / "blog" / "posts" / f"{NAME}.md"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    result = build_site(REPO / "mkdocs.yml", site=tmp_path_factory.mktemp("flagship") / "site")
    assert result.ok, result.warnings
    page = next(
        p for p in result.site.glob("blog/20*/**/index.html") if 'data-arm="adaptive"' in p.read_text()
    )
    return result.site, page


@pytest.fixture(scope="module")
def audit(site):
    """`runner audit` of the repository once a module (every test reads the same output):
    its exit code and what it printed."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli(["audit", "--config-file", str(REPO / "mkdocs.yml")])
    return code, out.getvalue()


def test_the_repository_site_builds_strict(site):
    site_dir, _ = site  # the fixture's build asserts it was strict and clean
    assert (site_dir / "index.html").is_file()


def test_the_committed_data_is_complete_for_every_post_s_current_declarations():
    """So a fresh clone's `make report` measures nothing: every experiment a post names
    has a complete set of its current declaration on some chip."""
    from runner.report import data_state
    from runner.report_inputs import declarations, named_experiments

    sync_database(DB)
    exps = declarations(named_experiments(REPO / "reports"), REPO / "reports" / "experiments")
    assert {"spec-decode-batching", "spec-decode-batching-deep", "head-of-line-blocking"} <= set(exps)
    for name, (_, exp) in exps.items():
        assert data_state(DB, exp).complete_on, name


def test_every_claim_holds_in_the_audit(audit):
    code, out = audit
    assert code == 0, out
    verdicts = re.findall(r"^  blog/posts/spec-decode-batching\.md:\d+ .* (ok  |FAIL) ", out, re.M)
    assert len(verdicts) >= 15 and set(verdicts) == {"ok  "}, out
    assert out.rstrip().endswith("0 failure(s)")


def test_the_deep_update_shows_a_prediction_chart_whose_held_out_check_the_audit_prints(site, capsys):
    _, page = site
    html = page.read_text()
    assert html.count('class="bothrows-held-out"') == 1
    assert '"text":"extrapolated"' in html and '"name":"always predicted"' in html
    assert "claim-failed" not in html
    cli(["audit", "--config-file", str(REPO / "mkdocs.yml"), "--predict", f"{NAME}-deep"])
    out = capsys.readouterr().out
    for arm in ("off", "mtp-solo", "on", "always", "adaptive"):
        lines = out.split(f" {arm}: terms")[1].splitlines()[1:5]
        assert [line.split(":")[0].strip() for line in lines] == [f"concurrency {c}" for c in (1, 2, 3, 4)]
        assert all("error" in line for line in lines), lines


def test_every_chip_has_batch_1_and_ceiling_rows_for_every_arm(site):
    _, page = site
    html = page.read_text()
    rows = re.findall(
        r'<tr class="bothrows-regime-row([^"]*)" data-chip="([^"]+)" '
        r'data-arm="([^"]+)" data-concurrency="(\d+)"',
        html,
    )
    chips = {chip for _, chip, _, _ in rows}
    assert chips
    for chip in chips:
        for arm in ("off", "mtp-solo", "on", "always", "adaptive"):
            for conc in ("1", "4"):
                assert ("", chip, arm, conc) in rows, (chip, arm, conc)
    assert "bothrows-not-measured" not in html and "bothrows-claim-failed" not in html


def test_traffic_choices_and_the_unaudited_reference_are_shown(site):
    _, page = site
    html = page.read_text()
    # two profiles on tiny and the same two on the deep model, each with a choice per chip
    # that measured the experiment (a chip tab each)
    assert html.count('class="bothrows-traffic"') == 4
    with Reader(DB) as reader:
        chips = [len(reader.chips(e, False)) for e in ("spec-decode-batching", "spec-decode-batching-deep")]
    assert (
        len(re.findall(r"for this traffic choose <strong>(off|mtp-solo|on|always|adaptive)</strong>", html))
        == 2 * chips[0] + 2 * chips[1]
    )
    ref = html[html.index('id="reference-not-audited"') :]
    ref = ref[: ref.index("</table>")]
    assert "not audited" in ref and "177B" in ref and "bothrows-claim" not in ref
    assert "bothrows-regime-row" not in ref


def test_the_post_renders_with_working_charts_in_chromium(site, tmp_path):
    site_dir, page = site
    if not shutil.which(CHROMIUM):
        pytest.fail("chromium is not installed: run `make browser` (apt-get install -y chromium)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{page.parent.relative_to(site_dir).as_posix()}/"
        run = chromium(tmp_path, "--dump-dom", url)
    finally:
        server.shutdown()
    dom = run.stdout
    chart_ids = re.findall(r'<div class="bothrows-chart" id="([^"]+)"', page.read_text())
    assert len(chart_ids) >= 3
    for chart_id in chart_ids:
        start = dom.index(f'id="{chart_id}"')
        assert "main-svg" in dom[start : dom.index("</figure>", start)], f"chart {chart_id} is blank"
    assert dom.count('class="bothrows-regime-row') == page.read_text().count('class="bothrows-regime-row')
    assert console_messages(run.stderr) == []
    assert 'class="bothrows-headline-table"' in dom
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert (
            tables_too_wide(tmp_path, site_dir, base, page.parent.relative_to(site_dir).as_posix()) == "none"
        )
    finally:
        server.shutdown()


def test_every_shipped_post_answers_on_its_first_screen_and_stays_short(site, tmp_path):
    """At 1280 x 900 with every fold closed: the title and a headline table or chart on
    the first screen, no table header broken inside a word, at most 12,000 px a post."""
    site_dir, _ = site
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        pages = sorted(
            p.parent.relative_to(site_dir).as_posix() for p in site_dir.glob("blog/20*/**/index.html")
        )
        found = {page: layout(tmp_path, site_dir, base, page) for page in pages}
    finally:
        server.shutdown()
    assert len(found) == len(list((REPO / "reports" / "blog" / "posts").glob("*.md")))
    for page, seen in found.items():
        assert seen["title"] and seen["title"][1] <= 900, (page, seen)
        assert seen["headline"] and seen["headline"][1] <= 900, (page, seen)
        assert seen["broken_headers"] == [], (page, seen)
        assert seen["height"] <= 12_000, (page, seen)


def test_the_capacity_post_answers_first_shows_every_rate_and_stays_a_few_screens(site, tmp_path, audit):
    """capacity-under-an-slo: its capacity claims (three runtimes on tiny and on deep, two
    batch ceilings) hold with their intervals in the audit; at 1280 px its charts draw with
    a clean console, the answer and the first chart are on the first screen, and the page
    stays under 6,500 px; the runtimes' regime table at 8 req/s has every runtime at batch
    1 and at the ceiling."""
    site_dir, _ = site
    code, out = audit
    assert code == 0, out
    caps = re.findall(
        r"^  blog/posts/capacity-under-an-slo\.md:\d+ .*req/s'  measured .*95% \[.*\]  ok ", out, re.M
    )
    assert len(caps) >= 8, out
    page = next(
        p for p in site_dir.glob("blog/20*/**/index.html") if "capacity-under-an-slo" in p.read_text()
    )
    html = page.read_text()
    rows = set(
        re.findall(
            r'bothrows-pair-row" [^>]*data-arm="([^"]+)" data-concurrency="(\d)" data-rate="([\d.]+)"', html
        )
    )
    assert rows == {(a, c, "8") for a in ("ours", "mlx-lm", "mlx-lm-server") for c in "14"}  # tiny, 8 req/s
    run, seen = open_post(site_dir, page, tmp_path)
    chart_ids = re.findall(r'<div class="bothrows-chart" id="([^"]+)"', html)
    # goodput and TTFT p99 by rate on tiny and on deep, and tiny's Pareto chart
    assert len(chart_ids) == 5
    # the SLO breaks inside every sweep, tiny's and deep's
    assert not re.search(r"at least [\d.]+ req/s", html) and "below the lowest rate swept" not in html
    assert_charts_drawn(run, chart_ids)
    assert seen["headline"] and seen["headline"][1] <= 900 and seen["height"] <= 6_500, seen


def test_the_block_drafting_post_checks_2x_in_both_regimes(site, tmp_path, audit):
    """block-drafting: its claims on block-8 alone and at the ceiling on tiny and deep, on
    accepted length and acceptance by position hold in the audit; the acceptance-by-position
    chart draws with a clean console; the answer is on the first screen and the page stays
    under 9,500 px."""
    site_dir, _ = site
    code, out = audit
    assert code == 0, out
    mine = re.findall(r"^  blog/posts/block-drafting\.md:\d+ .*  ok ", out, re.M)
    assert len(mine) >= 7 and any("tok'" in line for line in mine), out
    page = next(p for p in site_dir.glob("blog/20*/**/index.html") if "Block drafting:" in p.read_text())
    html = page.read_text()
    assert "reference-not-audited" in html and "SGLang PR #19952" in html
    run, seen = open_post(site_dir, page, tmp_path)
    chart_ids = re.findall(r'<div class="bothrows-chart" id="([^"]+)"', html)
    assert chart_ids
    assert_charts_drawn(run, chart_ids)
    assert seen["headline"] and seen["headline"][1] <= 900 and seen["height"] <= 9_500, seen


def assert_charts_drawn(run, chart_ids) -> None:
    """Every chart of a post drew its plot in Chromium's DOM, and the console stayed clean."""
    for chart_id in chart_ids:
        start = run.stdout.index(f'id="{chart_id}"')
        assert "main-svg" in run.stdout[start : run.stdout.index("</figure>", start)], chart_id
    assert console_messages(run.stderr) == []


def open_post(site_dir, page, tmp_path):
    """(Chromium's --dump-dom run, layout()) of one built post, served on loopback."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(site_dir)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        rel = page.parent.relative_to(site_dir).as_posix()
        return chromium(tmp_path, "--dump-dom", f"{base}/{rel}/"), layout(tmp_path, site_dir, base, rel)
    finally:
        server.shutdown()


def test_the_adaptive_drafting_post_answers_its_question_on_decided_data(site, tmp_path, audit):
    """adaptive-drafting: its claims (adaptive against off higher alone on unseen code,
    held-out prompts and out of step; decode per sequence level with off at the ceiling on
    unseen code, held-out prompts (twice) and out of step), and its 0.97x floor (alone and,
    measured until decided on a fresh engine each round, at four on all three workloads)
    hold in the audit; the answer is on the first screen and the page stays a few screens."""
    site_dir, _ = site
    code, out = audit
    assert code == 0, out
    mine = re.findall(r"^  blog/posts/adaptive-drafting\.md:\d+ .*  ok ", out, re.M)
    assert len(mine) >= 8 and sum("'level'" in line for line in mine) == 4, out
    assert sum("'at least 0.97x'" in line for line in mine) == 6, out
    page = next(p for p in site_dir.glob("blog/20*/**/index.html") if "Adaptive drafting:" in p.read_text())
    _, seen = open_post(site_dir, page, tmp_path)
    assert seen["headline"] and seen["headline"][1] <= 900 and seen["height"] <= 7_000, seen
