"""Real mkdocs-material builds of tiny projects over fixture databases: multi-chip
pages, regime gaps, claims, the automatic update note, escaping and determinism."""

import re
from datetime import datetime
from html import unescape
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fixture_db import DEFAULT_CHIPS, FixtureChip, build_fixture, remeasure
from publish_project import build_site, post_text, write_project

REPO = Path(__file__).resolve().parents[1]


def post_html(site: Path) -> str:
    pages = sorted(site.glob("blog/20*/**/index.html"))
    assert len(pages) == 1, pages
    return pages[0].read_text()


@pytest.fixture(scope="module")
def built(tmp_path_factory, fixture_db):
    root = tmp_path_factory.mktemp("proj")
    config = write_project(root, fixture_db, {"p.md": post_text()})
    return config, build_site(config)


def test_multi_chip_post_builds_strict_with_every_block(built):
    _, result = built
    assert result.ok, result.warnings
    html = post_html(result.site)
    for chip in ("Fixture M1", "Fixture M3"):  # the full grid: 2 arms x 3 concurrencies
        assert len(re.findall(f'class="bothrows-regime-row" data-chip="{chip}"', html)) == 6
        assert len(re.findall(f'class="bothrows-pair-row" data-chip="{chip}"', html)) == 4  # 1 and 4
    assert html.count('class="bothrows-chart"') == 4  # two charts, one per chip tab
    assert html.count("Plotly.newPlot(") == 4
    assert 'id="claim-1" href="#audit-claim-1"' in html and 'id="audit-claim-1"' in html
    assert "×1.25" in html  # ratio to the base arm
    assert "not measured" not in html
    assert "Update 2026-11-21" in html and "Re-measured" not in html
    assert "BOTHROWS" not in "".join(p.read_text(errors="ignore") for p in result.site.rglob("*.html"))
    head = html[: html.index("</head>")]
    assert (
        "assets/bothrows/plotly.min.js" in head and (result.site / "assets/bothrows/plotly.min.js").is_file()
    )
    assert "fonts.googleapis" not in html and "cdn." not in html
    assert "The author's own <kbd>markup</kbd> stays markup." in html


def test_blog_index_excerpt_stops_before_provenance_and_audit(built):
    _, result = built
    index = (result.site / "blog" / "index.html").read_text()
    assert "Solo on M1, MTP is +25% on decode." in index and "Continue reading" in index
    assert "bothrows-provenance" not in index and "audit-claim" not in index


def test_post_offers_its_raw_rows_and_sql(built):
    _, result = built
    folder = result.site / "downloads" / "blog-posts-p"
    passes = pq.read_table(folder / "passes.parquet")
    assert passes.num_rows == 2 * 2 * 3 * 2 * 40
    assert (folder / "passes.csv").read_text().count("\n") == passes.num_rows + 1
    assert "FROM per_run" in (folder / "table-1.sql").read_text()
    assert 'href="../../../../../downloads/blog-posts-p/passes.parquet"' in post_html(result.site)
    assert not list(result.site.rglob("*.duckdb"))


def test_rebuild_is_byte_identical(built, tmp_path):
    config, first = built
    second = build_site(config, site=tmp_path / "again")
    files = sorted(p.relative_to(first.site) for p in first.site.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second.site) for p in second.site.rglob("*") if p.is_file())
    different = [f for f in files if (first.site / f).read_bytes() != (second.site / f).read_bytes()]
    assert different == []


def test_gaps_and_failed_claims_are_all_reported_at_once(tmp_path):
    db = tmp_path / "gap.duckdb"
    build_fixture(db, skip={("Fixture M3", "on", 4)}, fail={("Fixture M1", "off", 1)}, passes_per_run=10)
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+40%")})
    strict = build_site(config)
    assert not strict.ok
    problems = [w for w in strict.warnings if "blog/posts/p.md" in w]
    assert any(
        "regime gap: chip 'Fixture M3' arm 'on' has no complete run at ceiling (concurrency 4)" in w
        for w in problems
    )
    assert any(
        "regime gap: chip 'Fixture M1' arm 'off' has no complete run at batch 1" in w for w in problems
    )
    claim = [w for w in problems if "stated '+40%'" in w]
    assert len(claim) == 1 and claim[0].startswith("bothrows: blog/posts/p.md:10: claim 1")
    assert "no data behind this claim" in claim[0]  # M1/off/1 failed, so nothing to compare
    relaxed = build_site(config, strict=False, site=tmp_path / "relaxed")
    assert relaxed.ok
    html = post_html(relaxed.site)
    assert html.count('class="bothrows-regime-row bothrows-not-measured"') == 2
    assert html.count('class="bothrows-pair-row bothrows-not-measured"') == 2  # both gaps are pair rows
    assert html.count("not measured</strong>") == 2 + 2 * 2  # pair rows; the 6 metrics span two tables
    assert 'class="bothrows-fail"' in html


def test_claim_outside_tolerance_names_file_line_stated_and_measured(tmp_path, fixture_db):
    config = write_project(tmp_path, fixture_db, {"p.md": post_text(stated="+20%")})
    result = build_site(config)
    assert not result.ok
    claim = [w for w in result.warnings if "stated '+20%'" in w]
    assert len(claim) == 1
    assert "blog/posts/p.md:10:" in claim[0] and "measured +25." in claim[0]


def test_remeasurement_adds_a_dated_automatic_note(tmp_path):
    db = tmp_path / "re.duckdb"
    build_fixture(db, passes_per_run=10)
    remeasure(db, DEFAULT_CHIPS[0], "on", 1, speedup=1.2, day=datetime(2026, 12, 3))
    # The claim stays judged on the data as of the post's date: +25% holds, though the
    # re-measurement says +50%; the note and the claims table show the move.
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    result = build_site(config)
    assert result.ok, result.warnings
    html = post_html(result.site)
    assert "Update 2026-12-03 (automatic)" in html
    note = html[html.index("Update 2026-12-03") :]
    note = unescape(re.sub(r"<[^>]+>", "", note[: note.index("</p>")]))
    assert note == (
        "Update 2026-12-03 (automatic): Fixture M1 · code def5678 · spec-fixture, 1 cell · "
        "0 of 1 claims that read these cells hold there"
    ), note
    assert html.index("Update 2026-11-21") < html.index("Update 2026-12-03")
    table = html[html.index('id="claims-on-every-chip"') :]
    assert "<th>Fixture M1</th>" in table and 'data-verdict="does not hold"' in table


def test_the_authors_note_of_a_re_measurements_day_follows_it(tmp_path):
    """A declared note dated the day of a later measurement answers it: it comes after the
    automatic line (the newest show, the older fold), so the answer is not folded away."""
    db = tmp_path / "re.duckdb"
    build_fixture(db, passes_per_run=10)
    remeasure(db, DEFAULT_CHIPS[0], "on", 1, speedup=1.2, day=datetime(2026, 12, 3))
    text = post_text(stated="+25%").replace(
        "updates:\n", 'updates:\n  - date: 2026-12-03\n    text: "The author answers the re-measurement."\n'
    )
    result = build_site(write_project(tmp_path, db, {"p.md": text}))
    assert result.ok, result.warnings
    html = post_html(result.site)
    assert html.index("Update 2026-11-21") < html.index("Update 2026-12-03 (automatic)")
    assert html.index("Update 2026-12-03 (automatic)") < html.index("The author answers the re-measurement.")


def test_names_and_notes_with_markup_render_as_text(tmp_path):
    db = tmp_path / "esc.duckdb"
    evil_chip = FixtureChip("<script>alert('chip')</script> **M9**", 100.0, declared=False)  # computed class
    build_fixture(
        db,
        chips=(evil_chip,),
        arms=("off", "<img src=x onerror=alert(1)>_on_"),
        concurrencies=(1, 2),
        passes_per_run=5,
    )
    post = (
        "---\ndate: 2026-11-20\nexperiment: spec-fixture\n---\n# Escaping\n\n"
        "{{ regime_table(['decode_tps']) }}\n\n{{ chart('decode_tps') }}\n"
    )
    config = write_project(
        tmp_path,
        db,
        {
            "p.md": post_text()
            .replace("Fixture M1", evil_chip.name)
            .replace('arm="on"', 'arm="<img src=x onerror=alert(1)>_on_"'),
            "q.md": post,
        },
    )
    result = build_site(config)
    assert result.ok, result.warnings
    for page in result.site.glob("blog/20*/**/index.html"):
        html = page.read_text()
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(&#39;chip&#39;)&lt;/script&gt; **M9**" in html
        assert "\\u0026lt;script\\u0026gt;" in html  # chart JSON: plotly text, and cannot close <script>
    assert "<strong>bold</strong>" not in post_html_for(result.site, "speculative")


def post_html_for(site: Path, slug_part: str) -> str:
    return next(p for p in site.glob("blog/20*/**/index.html") if slug_part in str(p)).read_text()


def test_quick_only_data_is_labelled_and_missing_data_fails_strict(tmp_path):
    db = tmp_path / "quick.duckdb"
    build_fixture(db, chips=DEFAULT_CHIPS[:1], concurrencies=(1, 2), quick=True, passes_per_run=5)
    quick_post = post_text().replace(', chip="Fixture M1"', "")
    config = write_project(tmp_path, db, {"p.md": quick_post, "none.md": post_text(experiment="nothing-yet")})
    result = build_site(config)
    assert not result.ok
    assert [w for w in result.warnings if "nothing-yet" in w] == [
        f"bothrows: blog/posts/none.md:1: experiment 'nothing-yet' has no complete runs in database {db}"
    ]
    assert not [w for w in result.warnings if "blog/posts/p.md" in w]
    assert "Quick data" in post_html_for(result.site, "speculative")
