"""A machine class measured by two instances, one twice as fast as the other (fixture
data, a real DuckDB file, real page rendering): the gain pools both instances' rounds as
blocks and holds; the absolute figures are each instance's, in the table as their spread
and in the chart as a line each; a claim on an absolute figure is not judged on a mean of
both; the provenance names both instances."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from fixture_db import FixtureChip, build_fixture
from publish_project import build_site, write_project

SLOW, FAST = FixtureChip("Lab box", 100.0, "openblas"), FixtureChip("Lab box", 200.0, "accelerate")
POST = """\
---
date: 2026-11-30
experiment: spec-fixture
---
# Two instances

Solo, MTP is {{ claim("+25%", gain("decode_tps", arm="on", concurrency=1)) }} on decode.

{{ regime_table(["decode_tps"], folded=False) }}

{{ chart("decode_tps") }}
"""


@pytest.fixture(scope="module")
def two_instances(tmp_path_factory):
    db = tmp_path_factory.mktemp("instances") / "runs.duckdb"
    build_fixture(db, chips=(SLOW,), day=datetime(2026, 11, 19), passes_per_run=6, rounds=3)
    build_fixture(db, chips=(FAST,), day=datetime(2026, 11, 20), passes_per_run=6, rounds=3, seed=2, add=True)
    return db


def test_a_gain_pools_the_instances_and_levels_stay_per_instance(two_instances, tmp_path):
    result = build_site(write_project(tmp_path, two_instances, {"p.md": POST}))
    assert result.ok, result.warnings
    html = next(result.site.glob("blog/20*/**/index.html")).read_text()
    assert "data-chip-tab" not in html and html.count('data-chip="Lab box"') > 0  # one class
    spreads = re.findall(
        r'<td>(\d+\.\d)\u2013(\d+\.\d)<br><small class="bothrows-interval">2 instances</small>', html
    )
    assert spreads and all(float(hi) / float(lo) > 1.6 for lo, hi in spreads), spreads  # ~2x apart
    names = set(re.findall(r'"name":"((?:off|on), instance \d)"', html))
    assert names == {"off, instance 1", "off, instance 2", "on, instance 1", "on, instance 2"}, names
    lines = re.findall(
        r"<li>Machine probe on Lab box, instance ([0-9a-f]{8}) \(runs from [\d-]+, (\d+) runs\)", html
    )
    assert len(lines) == 2 and all(n == "18" for _, n in lines), lines


def test_an_absolute_claim_on_two_instances_is_not_judged_on_their_mean(two_instances, tmp_path):
    from runner.publish.site.post import render_post

    body = '{{ claim("150", metric("decode_tps", arm="off", concurrency=1)) }}\n'
    post = render_post(
        body, {"experiment": "spec-fixture", "date": "2026-11-30"}, key="p.md", db_path=two_instances
    )
    assert [v.ok for v in post.verdicts] == [False]
    assert "spans 2 instances" in post.verdicts[0].measured.what
