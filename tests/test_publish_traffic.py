"""Choosing by traffic: profile validation, expected per-user speeds that agree with the
regime table's cells, the better arm named for solo and fan-out traffic on the fixture
(where "on" wins alone and loses at the ceiling), claimable values, readable errors."""

import re

import pytest
from fixture_db import DEFAULT_CHIPS, EXPERIMENT
from publish_project import build_site, write_project

from runner.publish.blocks.traffic import ProfileError, parse_profile
from runner.publish.site.post import render_post

META = {"experiment": EXPERIMENT, "date": "2026-11-20"}
SOLO = "{1: 0.6, 2: 0.3, 4: 0.1}"
FANOUT = "{1: 0.05, 2: 0.15, 4: 0.8}"


def render(body, fixture_db):
    return render_post(body, dict(META), key="blog/posts/t.md", db_path=fixture_db)


def test_profiles_are_validated_with_every_problem_named():
    assert parse_profile({4: 0.5, 1: 0.5}, (1, 2, 4)).shares == ((1, 0.5), (4, 0.5))
    assert parse_profile({"1": 1.0}, (1, 2)).shares == ((1, 1.0),)
    with pytest.raises(ProfileError, match="shares must sum to 1, they sum to 0.9"):
        parse_profile({1: 0.6, 4: 0.3}, (1, 2, 4))
    with pytest.raises(ProfileError) as e:
        parse_profile({1: 0.5, 3: 0.5, "x": 0.0, 2: -0.1}, (1, 2, 4))
    assert "concurrency 3 was not measured (measured: 1, 2, 4)" in str(e.value)
    assert "key 'x' is not a concurrency" in str(e.value)
    assert "share -0.1 at concurrency 2 must be a number in [0, 1]" in str(e.value)
    for bad in ({}, [0.5, 0.5], None):
        with pytest.raises(ProfileError, match="non-empty mapping"):
            parse_profile(bad, (1, 2))


@pytest.mark.parametrize("chip", [c.name for c in DEFAULT_CHIPS])
def test_expected_speed_is_the_share_weighted_regime_table_figure(fixture_db, chip):
    shares = {1: 0.6, 2: 0.3, 4: 0.1}
    cells = ";".join(
        f'{{{{ metric("decode_tps", arm="on", concurrency={c}, chip="{chip}").value }}}}' for c in shares
    )
    speed = f'traffic_speed({SOLO}, "on", chip="{chip}")'
    post = render(f"# T\n\n{{{{ {speed}.value }}}}|{cells}|{{{{ {speed}.n_rounds }}}}", fixture_db)
    assert post.failures == []
    got, per_c, rounds = re.search(r"^([\d.]+)\|([\d.;]+)\|(\d)$", post.markdown, re.M).groups()
    per_c = [float(v) for v in per_c.split(";")]
    assert float(got) == pytest.approx(sum(s * v for s, v in zip(shares.values(), per_c)))
    assert rounds == "2"


def test_solo_traffic_picks_on_and_fanout_picks_off(fixture_db):
    body = (
        f'# T\n\n{{{{ traffic({SOLO}, label="mostly solo") }}}}\n\n'
        f'{{{{ traffic({FANOUT}, label="fan-out") }}}}\n\n'
        f'best: {{{{ traffic_best({SOLO}, chip="Fixture M1") }}}} / '
        f'{{{{ traffic_best({FANOUT}, chip="Fixture M1") }}}}\n'
    )
    post = render(body, fixture_db)
    assert post.failures == []
    assert "best: on / off" in post.markdown
    solo, fanout = [h for h in post.blocks.values() if "bothrows-traffic" in h]
    for chip in DEFAULT_CHIPS:
        assert f"On {chip.name}, for this traffic choose <strong>on</strong>: +" in solo
        assert f"On {chip.name}, for this traffic choose <strong>off</strong>: +" in fanout
    assert "60% at 1, 30% at 2, 10% at 4" in solo
    assert solo.count('class="bothrows-traffic-row bothrows-traffic-best"') == 2  # one per chip


def test_traffic_values_are_claimable_and_wrong_claims_fail(fixture_db):
    gain = f'traffic_gain({SOLO}, "on", base="off", chip="Fixture M1")'
    post = render(f"# T\n\n{{{{ {gain}.text() }}}}", fixture_db)
    stated = re.search(r"([+-]\d+\.\d)%", post.markdown).group(0)
    body = f'# T\n\n{{{{ claim("{stated}", {gain}) }}}}\n{{{{ claim("-30%", {gain}) }}}}\n'
    post = render(body, fixture_db)
    assert [v.ok for v in post.verdicts] == [True, False]
    assert float(stated[:-1]) > 0  # the fixture's on arm drafts mostly alone: it gains
    assert [f.describe().split(":")[:2] for f in post.failures] == [["blog/posts/t.md", "4"]]
    assert "expected per-user decode_tps of on vs off under traffic (60% at 1" in post.failures[0].message


def test_a_bad_profile_is_one_readable_build_error(fixture_db, tmp_path):
    body = (
        f"---\ndate: 2026-11-20\nexperiment: {EXPERIMENT}\n---\n# T\n\n"
        '{{ traffic({1: 0.5, 3: 0.2}, label="typo") }}\n'
    )
    result = build_site(write_project(tmp_path, fixture_db, {"t.md": body}))
    assert not result.ok
    problems = [w for w in result.warnings if "traffic profile" in w]
    assert problems == [
        "bothrows: blog/posts/t.md:7: traffic profile concurrency 3 was not measured (measured: 1, 2, 4)"
    ]
    page = next((result.site / "blog").glob("20*/**/index.html"))
    assert "traffic choice not shown" in page.read_text()
