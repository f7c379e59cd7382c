"""Requests that came back shorter than asked: the table says how many, a claim on them
fails with that reason, and workload.allow_short = true lets it stand (real mkdocs builds)."""

from __future__ import annotations

from fixture_db import EXPERIMENT, edited_fixture
from publish_project import build_site, post_text, write_project


def short_fixture(db) -> None:
    """The fixture, every request asked for what it got except three of arm "on" at
    concurrency 1 on Fixture M1, which were asked for one token more."""
    with edited_fixture(db) as con:
        con.execute("UPDATE requests SET asked_tokens = output_tokens")
        con.execute(
            "UPDATE requests SET asked_tokens = output_tokens + 1 WHERE run_id IN (SELECT r.run_id FROM "
            "runs r JOIN chips c USING (chip_id) WHERE c.name = 'Fixture M1' AND r.arm = 'on' "
            "AND r.concurrency = 1) AND request_id < 2"
        )
        n = con.execute("SELECT count(*) FROM requests WHERE output_tokens < asked_tokens").fetchall()[0][0]
    assert n == 2 * 2  # two rounds, two short requests each


def test_short_requests_fail_the_claim_and_are_counted_in_the_table(tmp_path):
    db = tmp_path / "short.duckdb"
    short_fixture(db)
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    strict = build_site(config)
    assert not strict.ok
    claim = [w for w in strict.warnings if "stated '+25%'" in w]
    assert len(claim) == 1 and "blog/posts/p.md:10: claim 1" in claim[0]
    assert "4 of " in claim[0] and "requests came back shorter than asked" in claim[0]
    assert "workload.allow_short = true" in claim[0]
    html = next(
        (build_site(config, strict=False, site=tmp_path / "relaxed").site / "blog").glob("20*/**/index.html")
    )
    text = html.read_text()
    assert text.count('class="bothrows-short"') == 3  # M1 / on / 1: the pair, and both tables of the fold
    assert "4 short</abbr>" in text


def test_allow_short_lets_the_claim_stand(tmp_path):
    db = tmp_path / "short.duckdb"
    short_fixture(db)
    config = write_project(tmp_path, db, {"p.md": post_text(stated="+25%")})
    declarations = tmp_path / "docs" / "experiments"
    declarations.mkdir()
    (declarations / f"{EXPERIMENT}.toml").write_text("[workload]\nallow_short = true\n")
    assert build_site(config).ok
