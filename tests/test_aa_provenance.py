"""An experiment with its A/A arm (`[workload] aa = true`), or two declared arms that are
identical: the provenance shows each metric's A/A coverage per chip, an `-aa` copy stays
out of the tables, and a direction must lie further from no change than any interval
between the identical arms did (on the log scale, so a claim and its reverse alike)."""

from __future__ import annotations

import re

from fixture_db import FixtureChip, build_fixture

from runner.publish.site.post import render_post

BODY = (
    '# T\n\n{{ regime_table(["decode_tps"]) }}\n'
    '{{ claim("+10%", gain("decode_tps", arm="b", base="a", concurrency=1)) }}\n'
)


def _post(tmp_path, copy_factor: float, body: str = BODY, arms=("a", "b", "a-aa"), knobs=None):
    db = tmp_path / "aa.duckdb"
    build_fixture(
        db,
        chips=(FixtureChip("Fixture M1", 100.0),),
        arms=arms,
        concurrencies=(1, 2),
        rounds=3,
        requests_per_client=6,
        factors={"a": 1.0, "b": 1.1, "a-aa": copy_factor, "twin": copy_factor},
        run_noise=0.002,
        knobs=knobs,
    )
    post = render_post(
        body, {"experiment": "spec-fixture", "date": "2026-11-20"}, key="blog/posts/aa.md", db_path=db
    )
    return post, "".join(post.blocks.values())


def test_the_provenance_shows_the_aa_coverage_and_the_copy_is_no_table_row(tmp_path):
    post, html = _post(tmp_path, 1.0)
    assert "A/A on Fixture M1 (<code>a-aa</code> against <code>a</code>" in html
    assert "decode_tps 2 of 2 cells include no change" in html  # one repetition, two concurrencies
    assert '"bothrows-aa-low">decode_tps' not in html
    assert ">a-aa<" not in html.split("bothrows-provenance")[0]  # the tables show a and b only
    (v,) = post.verdicts
    assert v.ok and "excludes no change" in v.reason


def test_a_metric_whose_aa_misses_needs_a_direction_past_the_aa_margin(tmp_path):
    post, html = _post(tmp_path, 1.15)  # the copy runs 15% faster than its original
    assert '<strong class="bothrows-aa-low">decode_tps</strong> (0 of 2)' in html
    # the margin is how far the copy's interval lay from no change: its lower end, near +15%
    margin = re.search(
        r"decode_tps 0 of 2 cells include no change \(a direction must clear \u00b1(\d+\.\d)%", html
    )
    assert margin and 13.0 < float(margin.group(1)) < 15.0, margin
    assert "more (below)" in html  # the line names the three widest, the fold every one
    (v,) = post.verdicts
    assert not v.ok and f"does not clear the A/A margin \u00b1{margin.group(1)}%" in v.reason, v.reason


TWIN_BODY = (
    '# T\n\n{{ regime_table(["decode_tps"]) }}\n'
    '{{ claim("+15%", gain("decode_tps", arm="twin", base="a", concurrency=1)) }}\n'
    '{{ claim("-13%", gain("decode_tps", arm="a", base="twin", concurrency=1)) }}\n'
    '{{ claim("1.15x", ratio("decode_tps", arm="twin", base="a", concurrency=1)) }}\n'
    '{{ claim("+10%", gain("decode_tps", arm="b", base="a", concurrency=1)) }}\n'
)
SAME = {"draft_policy": "always", "mtp": True}


def test_two_declared_arms_with_one_setup_are_an_aa_pair_and_no_direction_between_them_holds(tmp_path):
    # A user's A/A probe: `twin` is declared like `a`, under its own name. Its intervals
    # exclude no change (it runs 15% faster, as a drifting machine can make it), yet no
    # direction between the two holds, either way round, while b's real +10% over a still
    # must clear the same margin.
    post, html = _post(tmp_path, 1.15, TWIN_BODY, arms=("a", "b", "twin"), knobs={"a": SAME, "twin": SAME})
    assert "A/A on Fixture M1 (<code>twin</code> against <code>a</code>)" in html
    assert ">twin<" in html.split("bothrows-provenance")[0]  # a declared arm stays in the tables
    verdicts = post.verdicts
    assert [v.ok for v in verdicts] == [False, False, False, False], [v.reason for v in verdicts]
    assert all("does not clear the A/A margin" in v.reason for v in verdicts), [v.reason for v in verdicts]


def test_arms_with_different_knobs_are_no_aa_pair(tmp_path):
    post, html = _post(tmp_path, 1.15, TWIN_BODY, arms=("a", "b", "twin"), knobs={"a": SAME})
    assert "A/A on" not in html
    assert [v.ok for v in post.verdicts] == [True, True, True, True], [v.reason for v in post.verdicts]


def test_a_chip_measured_before_aa_was_turned_on_has_no_gap_for_the_copy(tmp_path):
    # The copy is measured only where the declaration had `aa = true`: an older chip's data
    # lacks it, and that must not break the post (new data never breaks an old post).
    db = tmp_path / "older.duckdb"
    old, new = FixtureChip("Fixture M1", 100.0), FixtureChip("Fixture M2", 120.0)
    build_fixture(
        db,
        chips=(old, new),
        arms=("a", "b", "a-aa"),
        concurrencies=(1, 2),
        rounds=3,
        skip={("Fixture M1", "a-aa", c) for c in (1, 2)},
        factors={"a": 1.0, "b": 1.1, "a-aa": 1.0},
        run_noise=0.002,
    )
    post = render_post(
        BODY,
        {"experiment": "spec-fixture", "date": "2026-11-20", "chip": "Fixture M1"},
        key="blog/posts/aa.md",
        db_path=db,
    )
    assert not [f for f in post.failures if "regime gap" in f.message], post.failures
    assert "A/A on Fixture M2" in "".join(post.blocks.values())


def test_a_post_may_compare_the_copy_with_its_original_but_not_table_it(tmp_path):
    body = '# T\n\n{{ claim("level", ratio("decode_tps", arm="a-aa", base="a", concurrency=1)) }}\n'
    same, apart, table_dir = (tmp_path / n for n in ("same", "apart", "table"))  # a database each
    for d in (same, apart, table_dir):
        d.mkdir()
    post, _ = _post(same, 1.0, body=body)
    (v,) = post.verdicts
    assert v.ok and "decode_tps of a-aa vs a" in v.measured.what, v  # the copy reads level with its original
    post, _ = _post(apart, 1.15, body=body)
    (v,) = post.verdicts
    assert not v.ok  # 15% apart is no level
    table = '# T\n\n{{ headline_table(arm="a-aa", base="a", metrics=["decode_tps"]) }}\n'
    post, _ = _post(table_dir, 1.0, body=table)
    assert any("unknown arm 'a-aa'" in f.message for f in post.failures), post.failures
