"""q= on a latency metric: any percentile, with the same definition and bootstrap as the
fixed ones (q=0.9 equals ttft_p90_ms to the digit), claimable; a bad q is one error."""

from __future__ import annotations

import re

from publish_project import build_site, write_project

POST = """\
---
date: 2026-11-20
experiment: spec-fixture
---
# Quantiles

A: {{ metric("ttft", "on", 2, chip="Fixture M1", q=0.9) }} /
B: {{ metric("ttft_p90_ms", "on", 2, chip="Fixture M1") }} /
C: {{ metric("e2el", "on", 2, chip="Fixture M1", q=0.95) }} /
D: {{ metric("e2el_p90_ms", "on", 2, chip="Fixture M1") }} /
E: {{ metric("e2el_p99_ms", "on", 2, chip="Fixture M1") }} /
"""


def test_q_is_any_percentile_with_the_fixed_ones_definition(tmp_path, fixture_db):
    config = write_project(tmp_path, fixture_db, {"p.md": POST})
    result = build_site(config)
    assert result.ok, result.warnings
    html = next((result.site / "blog").glob("20*/**/index.html")).read_text()
    got = dict(re.findall(r"([A-E]): ([0-9.]+) ms /", html))
    assert set(got) == set("ABCDE") and got["A"] == got["B"]
    assert float(got["D"]) <= float(got["C"]) <= float(got["E"])


def test_a_claim_on_a_quantile_is_judged_and_a_bad_q_is_one_error(tmp_path, fixture_db):
    post = POST.split("A:")[0] + (
        'It is {{ claim("1.0 ms", metric("ttft", "on", 2, chip="Fixture M1", q=0.95)) }}.\n'
        '{{ metric("ttft", "on", 2, chip="Fixture M1", q=95) }}\n'
        '{{ metric("decode_tps", "on", 2, chip="Fixture M1", q=0.5) }}\n'
    )
    config = write_project(tmp_path, fixture_db, {"p.md": post})
    result = build_site(config)
    problems = [w for w in result.warnings if "blog/posts/p.md" in w]
    assert not result.ok
    assert any("stated '1.0 ms'" in w and "p95 of ttft of on at concurrency 2" in w for w in problems)
    assert any("q= is a quantile in (0, 1), e.g. q=0.95, got 95" in w for w in problems)
    assert any("q= takes a latency metric (ttft, tpot, itl, e2el)" in w for w in problems)
