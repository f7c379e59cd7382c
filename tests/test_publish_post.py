"""One post rendered without mkdocs: the post API's values and its readable errors."""

from runner.publish.site.post import render_post

META = {"experiment": "spec-fixture", "date": "2026-11-20"}


def render(body, fixture_db, meta=META):
    return render_post(body, dict(meta), key="blog/posts/x.md", db_path=fixture_db)


def test_inline_values_render_as_numbers(fixture_db):
    post = render(
        '# T\n\n{{ metric("decode_tps", arm="off", concurrency=1, chip="Fixture M1") }} / '
        '{{ ratio("decode_tps", arm="on", concurrency=1, chip="Fixture M1") }} / '
        '{{ gain("decode_tps", arm="on", concurrency=4, chip="Fixture M3") }}',
        fixture_db,
    )
    assert post.failures == []
    assert "100.7 tok/s / 1.25x / -9." in post.markdown, post.markdown


def test_errors_name_the_line_and_the_choices(fixture_db):
    body = (
        "# T\n\n"
        '{{ claim("+25%", gain("decode_tps", arm="on", concurrency=1)) }}\n'
        '{{ metric("speed", arm="on", concurrency=1, chip="Fixture M1") }}\n'
        '{{ metric("decode_tps", arm="maybe", concurrency=1, chip="Fixture M1") }}\n'
        '{{ claim("+25%", 0.25) }}\n'
        '{{ regime_table(["decode_tps"], base="nope") }}\n'
    )
    msgs = [f.describe() for f in render(body, fixture_db).failures]
    assert any(
        m.startswith(
            "blog/posts/x.md:3: this post's home chip is ambiguous: its data as of "
            "2026-11-20 holds chips 'Fixture M1', 'Fixture M3'; name one in front "
            "matter (chip: ...)"
        )
        for m in msgs
    )
    assert any(
        m.startswith("blog/posts/x.md:4: unknown metric 'speed'; known metrics: prefill_tps") for m in msgs
    )
    assert any(
        m.startswith("blog/posts/x.md:5: unknown arm 'maybe'; experiment 'spec-fixture' has arms 'off', 'on'")
        for m in msgs
    )
    assert any(m.startswith("blog/posts/x.md:6: claim('+25%', ...) needs a value") for m in msgs)
    assert any(m.startswith("blog/posts/x.md:7: regime_table: base arm 'nope'") for m in msgs)


def test_bad_front_matter_fields_are_named(fixture_db):
    post = render("# T\n", fixture_db, {"experiment": "spec-fixture", "updates": [{"text": "x"}]})
    assert [f.message for f in post.failures] == [
        "front matter field 'updates[0]' needs a date (YYYY-MM-DD) and a non-empty text"
    ]
    post = render("# T\n", fixture_db, {"experiment": 3})
    assert "front matter field 'experiment' must name an experiment" in post.failures[0].message


def test_chips_sharing_a_name_get_labels_that_tell_them_apart(tmp_path):
    """The same machine measured with another BLAS is another fingerprint with the same
    name: pages label each with the start of its id, and a bare name is refused."""
    from fixture_db import FixtureChip, build_fixture

    from runner.publish.sql.reader import Reader

    db = tmp_path / "runs.duckdb"
    build_fixture(
        db,
        chips=(
            FixtureChip("Same EPYC", 100.0, "openblas", declared=False),
            FixtureChip("Same EPYC", 150.0, "openblas + small sgemm", declared=False),
        ),
    )  # two BLAS families: two machine classes, one label, told apart by their ids
    labels = [f"Same EPYC, 10 cores, GPU ({c.chip_id[:8]})" for c in Reader(db).chips("spec-fixture", False)]
    assert len(set(labels)) == 2
    post = render('# T\n\n{{ metric("decode_tps", arm="off", concurrency=1, chip="Same EPYC") }}\n', db)
    assert [f.message for f in post.failures] == [
        f"chip 'Same EPYC' names 2 chips; name one of '{labels[0]}', '{labels[1]}'"
    ]
    values = []
    for label in labels:  # each label names exactly one chip
        ok = render(f'# T\n\n{{{{ metric("decode_tps", arm="off", concurrency=1, chip="{label}") }}}}\n', db)
        assert ok.failures == [], [f.describe() for f in ok.failures]
        values.append(ok.markdown)
    assert values[0] != values[1]
    table = render('# T\n\n{{ regime_table(["decode_tps"]) }}\n', db)
    html = "".join(table.blocks.values())
    assert all(label in html for label in labels)
