"""Posts that stay readable as their data grows: the pair first with the full grid
folded, one content tab per chip, one-line notes counting only their own experiment's
claims, each post's headline pair on the home page and blog index, one colour per arm."""

import json
import re
from datetime import datetime
from html import unescape

from fixture_db import FixtureChip, build_fixture, remeasure
from publish_project import build_site, write_project

from runner.publish.site.post import render_post

M1, M3 = FixtureChip("Fixture M1", 100.0), FixtureChip("Fixture M3", 160.0)


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html))


def _two_experiments(db):
    build_fixture(db, experiment="exp-a", chips=(M1,), passes_per_run=6)
    build_fixture(
        db,
        experiment="exp-b",
        chips=(M1,),
        arms=("on", "x"),
        factors={"on": 1.0, "x": 2.0},
        passes_per_run=6,
        add=True,
    )


TWO = (
    "# Two\n\n"
    '{{ claim("+25%", gain("decode_tps", arm="on", base="off", concurrency=1)) }}\n'
    '{{ claim("level", gain("decode_tps", arm="on", base="off", concurrency=2), within="15%") }}\n'
    '{{ claim("2.0x", ratio("decode_tps", arm="x", base="on", concurrency=4, experiment="exp-b")) }}\n\n'
    '{{ chart("decode_tps") }}\n\n{{ chart("decode_tps", experiment="exp-b") }}\n'
)
TWO_META = {"experiments": ["exp-a", "exp-b"], "date": "2026-11-20"}


def test_the_note_of_a_second_experiment_counts_only_its_own_claims(tmp_path):
    db = tmp_path / "two.duckdb"
    _two_experiments(db)
    remeasure(db, M1, "x", 4, experiment="exp-b", speedup=1.0, day=datetime(2026, 12, 3))
    remeasure(db, M1, "on", 1, experiment="exp-a", speedup=1.0, day=datetime(2026, 12, 4))
    out = render_post(TWO, TWO_META, key="blog/posts/two.md", db_path=db)
    assert out.failures == [] and [v.ok for v in out.verdicts] == [True, True, True]
    by_experiment = {n.clauses[2].text.split(",")[0]: n for n in out.notes if n.automatic}
    # exp-b is read by one claim, exp-a by two: neither note counts the other's claims
    assert re.fullmatch(
        r"[01] of 1 claims that read these cells hold there", by_experiment["exp-b"].clauses[-1].text
    )
    assert re.fullmatch(
        r"[012] of 2 claims that read these cells hold there", by_experiment["exp-a"].clauses[-1].text
    )
    assert by_experiment["exp-b"].clauses[-1].href == "#claims-on-every-chip"
    assert [c.name for c in by_experiment["exp-b"].clauses] == ["chip", "code", "experiment", "claims"]
    top = next(html for html in out.blocks.values() if "bothrows-notes" in html)
    lines = re.findall(r'<p class="bothrows-update[^"]*"[^>]*>(.*?)</p>', top)
    assert [_text(line) for line in lines] == [
        "Update 2026-12-03 (automatic): Fixture M1 · code def5678 · exp-b, 1 cell · "
        f"{by_experiment['exp-b'].clauses[-1].text}",
        "Update 2026-12-04 (automatic): Fixture M1 · code def5678 · exp-a, 1 cell · "
        f"{by_experiment['exp-a'].clauses[-1].text}",
    ]


def test_one_colour_per_arm_across_the_charts_of_a_post(tmp_path):
    db = tmp_path / "two.duckdb"
    _two_experiments(db)
    out = render_post(TWO, TWO_META, key="blog/posts/two.md", db_path=db)
    colours: dict[str, set] = {}
    for html in out.blocks.values():
        for figure in re.findall(r"\}\)\((\{.*?\})\);</script>", html):
            for trace in json.loads(figure)["data"]:
                colours.setdefault(trace["name"], set()).add(trace["marker"]["color"])
    # "on" is the second arm of exp-a and the first of exp-b: one colour all the same
    assert set(colours) == {"off", "on", "x"} and all(len(c) == 1 for c in colours.values())
    assert len({next(iter(c)) for c in colours.values()}) == 3


def test_regime_table_shows_the_pair_first_and_folds_the_rest(fixture_db):
    body = '# T\n\n{{ regime_table(["decode_tps", "prefill_tps", "ttft_p50_ms", "passes", "acceptance"]) }}\n'
    meta = {"experiment": "spec-fixture", "date": "2026-11-20", "chip": "Fixture M1"}
    html = "".join(render_post(body, meta, key="t.md", db_path=fixture_db).blocks.values())
    pair = re.findall(
        r'class="bothrows-pair-row" data-chip="([^"]+)" data-arm="([^"]+)" data-concurrency="(\d)"', html
    )
    assert sorted(pair) == sorted(
        (c, a, k) for c in ("Fixture M1", "Fixture M3") for a in ("off", "on") for k in "14"
    )
    fold = html[html.index('<details class="bothrows-more">') :]
    assert '<details class="bothrows-more" open' not in html and "concurrency 2 between, every metric" in fold
    assert len(re.findall(r'class="bothrows-regime-row" data-chip="Fixture M1"', fold)) == 6
    first = html[html.index("<table") : html.index("</table>")]
    assert "<th>decode / seq (tok/s)</th>" in first and "acceptance" not in first  # the first group only
    assert re.search(
        r'data-arm="on" data-concurrency="1">.*?<small class="bothrows-change">\+2\d%', html, re.S
    )
    # the home chip's tab first, labelled as home; the other chip's name stays in the page
    labels = re.findall(r"<label for=\"[^\"]+\" data-chip=\"[^\"]+\">([^<]+)</label>", html)
    assert labels == ["Fixture M1 (home)", "Fixture M3"]
    unfolded = "".join(
        render_post(
            body.replace("]) }}", "], folded=False) }}"), meta, key="t.md", db_path=fixture_db
        ).blocks.values()
    )
    assert "bothrows-pair-row" not in unfolded and "<details" not in unfolded.split("bothrows-caption")[0]
    assert unfolded.count('class="bothrows-regime-row"') == 12


def test_home_page_and_blog_index_show_each_post_s_pair(tmp_path, fixture_db):
    declared = (
        "---\ndate: 2026-11-20\nexperiment: spec-fixture\nchip: Fixture M1\n"
        'headline: {arm: "on", base: "off", metric: decode_tps}\n---\n# Declared\n\nText.\n'
    )
    by_call = (
        "---\ndate: 2026-11-20\nexperiment: spec-fixture\nchip: Fixture M3\n---\n# By call\n\n"
        '{{ headline_table(arm="on", base="off", metrics=["prefill_tps", "decode_tps"]) }}\n'
    )
    config = write_project(tmp_path, fixture_db, {"a.md": declared, "b.md": by_call})
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n<!-- bothrows:posts -->\n")
    result = build_site(config)
    assert result.ok, result.warnings
    home = (result.site / "index.html").read_text()
    index = (result.site / "blog" / "index.html").read_text()
    for page in (home, index):
        lines = [_text(line) for line in re.findall(r'<p class="bothrows-pair-line"[^>]*>(.*?)</p>', page)]
        pairs = {re.search(r" on (Fixture M\d) \(home\)", line).group(1): line for line in lines}
        assert len(lines) == 2
        assert set(pairs) == {"Fixture M1", "Fixture M3"}, page
        for line in pairs.values():  # the fixture: +25% alone, -10% at the ceiling
            assert re.fullmatch(
                r"on against off, decode / seq on Fixture M\d \(home\): batch 1 \+2[456]% \(\+\d+%…\+\d+%\) "
                r"faster; ceiling \(4\) -(9|10|11)% \(-\d+%…-\d+%\) (slower|undecided)",
                line,
            ), line
    links = re.findall(r'<li><a href="([^"]+)">([^<]+)</a><p class="bothrows-pair-line"', home)
    assert sorted(t for _, t in links) == ["By call", "Declared"]
    assert all((result.site / href / "index.html").is_file() for href, _ in links)


def test_a_bad_headline_is_one_clear_error(fixture_db):
    meta = {"experiment": "spec-fixture", "chip": "Fixture M1", "headline": {"arm": "on"}}
    out = render_post("# H\n", meta, key="blog/posts/h.md", db_path=fixture_db)
    assert [f.describe() for f in out.failures] == [
        "blog/posts/h.md:1: front matter field 'headline' needs 'metric' (a string)"
    ]
    meta["headline"] = {"arm": True, "metric": "decode_tps"}  # `arm: on`, unquoted
    out = render_post("# H\n", meta, key="blog/posts/h.md", db_path=fixture_db)
    assert [f.message for f in out.failures] == [
        "front matter field 'headline' 'arm' reads as the YAML boolean True: quote the name (\"on\", \"off\")"
    ]


def test_a_headline_floor_marks_each_regime_and_a_bad_one_is_one_clear_error(fixture_db):
    meta = {"experiment": "spec-fixture", "chip": "Fixture M1", "date": "2026-11-20"}
    meta["headline"] = {"arm": "on", "base": "off", "metric": "decode_tps", "at_least": "0.5x"}
    out = render_post("# H\n", meta, key="blog/posts/h.md", db_path=fixture_db)
    assert out.failures == [] and _text(out.headline).count("not below 0.5x") == 2, out.headline
    meta["headline"] = {**meta["headline"], "at_least": "2x"}  # the fixture: +25% alone, -10% at four
    out = render_post("# H\n", meta, key="blog/posts/h.md", db_path=fixture_db)
    assert _text(out.headline).count("below 2x") == 2 and "not below" not in out.headline
    meta["headline"] = {**meta["headline"], "at_least": "most"}
    out = render_post("# H\n", meta, key="blog/posts/h.md", db_path=fixture_db)
    assert [f.message for f in out.failures] == [
        "front matter field 'headline' 'at_least': stated value 'most' is not a number like "
        "'+25%', '1.3x' or '97.4 tok/s'"
    ]
