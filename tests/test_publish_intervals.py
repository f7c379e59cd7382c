"""The intervals over rounds: deterministic, and they tell no difference from a real one."""

from datetime import datetime

import numpy as np
import pytest
from fixture_db import FixtureChip, build_fixture
from publish_project import write_project

from runner.publish.metrics import percentile_of
from runner.publish.site.commands import rounds_plan
from runner.publish.site.post import render_post
from runner.publish.sql.reader import Reader
from runner.publish.stats.intervals import (
    Intervals,
    level_bounds,
    no_interval_text,
    rounds_for_half_width,
    upper_rank,
)

CLAIMS = (
    '# T\n\n{{ claim("+5%", gain("decode_tps", arm="b", base="a", concurrency=1)) }}\n'
    '{{ claim("level", gain("decode_tps", arm="b", base="a", concurrency=1)) }}\n'
    '{{ claim("+30%", gain("decode_tps", arm="b", base="a", concurrency=2)) }}\n'
    '{{ claim("1.3x", ratio("decode_tps", arm="b", base="a", concurrency=2)) }}\n'
)


def _db(tmp_path, factor: float, name="ab.duckdb", seed=0):
    db = tmp_path / name
    build_fixture(
        db,
        chips=(FixtureChip("Fixture M1", 100.0),),
        arms=("a", "b"),
        concurrencies=(1, 2),
        rounds=3,
        requests_per_client=8,
        factors={"a": 1.0, "b": factor},
        run_noise=0.02,
        request_noise=0.2,
        seed=seed,
    )
    return db


def _verdicts(db, body=CLAIMS):
    post = render_post(
        body, {"experiment": "spec-fixture", "date": "2026-11-20"}, key="blog/posts/ab.md", db_path=db
    )
    return {v.stated: v for v in post.verdicts}, post


def test_intervals_are_deterministic_and_pair_arms_by_round(tmp_path):
    db = _db(tmp_path, 1.0)
    with Reader(db) as r:
        runs = r.run_values("spec-fixture", False)
    a, b = Intervals(runs), Intervals(runs)
    chip = next(iter(runs))[0]
    ra, rb = a.by_round("decode_tps", chip, "a", 1), a.by_round("decode_tps", chip, "b", 1)
    assert sorted(ra) == sorted(rb) == [0, 1, 2]  # each round's value of each arm
    e1 = a.compare("decode_tps", chip, "b", "a", 1, "change")
    e2 = b.compare("decode_tps", chip, "b", "a", 1, "change")
    assert (e1.value, e1.lo, e1.hi) == (e2.value, e2.lo, e2.hi)
    assert e1.lo < e1.value < e1.hi
    copy = _db(tmp_path, 1.0, "copy.duckdb")  # an identical database, built again
    _, p1 = _verdicts(db)
    _, p2 = _verdicts(copy)
    assert [v.measured.interval_text() for v in p1.verdicts] == [
        v.measured.interval_text() for v in p2.verdicts
    ]


def test_identical_arms_are_level_and_refuse_a_direction(tmp_path):
    v, _ = _verdicts(_db(tmp_path, 1.0))
    assert not v["+5%"].ok and "includes no change" in v["+5%"].reason
    assert v["level"].ok and "within \u00b110%" in v["level"].reason
    assert not v["+30%"].ok and not v["1.3x"].ok


def test_a_thirty_percent_difference_is_directional_and_not_level(tmp_path):
    v, post = _verdicts(_db(tmp_path, 1.3))
    assert v["+30%"].ok and "excludes no change" in v["+30%"].reason, v["+30%"].reason
    assert v["1.3x"].ok
    assert not v["level"].ok and "excludes no change" in v["level"].reason
    assert not v["+5%"].ok  # neither rounds nor inside the interval


def test_every_table_cell_and_chart_point_carries_an_interval(tmp_path):
    db = _db(tmp_path, 1.3)
    body = '# T\n\n{{ regime_table(["decode_tps", "ttft_p50_ms", "passes"]) }}\n{{ chart("decode_tps") }}\n'
    _, post = _verdicts(db, body)
    html = "".join(post.blocks.values())
    rows = html.count('class="bothrows-regime-row')
    assert rows == 4 and html.count('class="bothrows-interval"') == 4 * 3
    assert html.count('class="bothrows-ratio"') == 2 * 3  # arm b against the base a
    assert '"arrayminus":[' in html and '"arrayminus":[0.0' not in html


def test_the_aa_check_counts_cells_whose_interval_includes_no_change(tmp_path, capsys):
    from runner.publish.site.commands import main_audit
    from runner.publish.stats.aa import report

    db = tmp_path / "aa.duckdb"
    for k, day in enumerate((datetime(2026, 11, 19), datetime(2026, 11, 20), datetime(2026, 11, 21))):
        build_fixture(
            db,
            experiment="x-aa",
            chips=(FixtureChip("Fixture M1", 100.0),),
            arms=("a", "a-aa"),
            concurrencies=(1, 2),
            rounds=3,
            requests_per_client=6,
            factors={"a": 1.0, "a-aa": 1.0},
            run_noise=0.02,
            request_noise=0.2,
            seed=k,
            day=day,
            add=True,
        )
    with Reader(db) as r:
        lines, share = report(r, "x-aa")
    assert lines[0].startswith("x-aa: a-aa against a, 3 repetition(s)")
    assert 0.8 <= share <= 1.0, lines
    config = write_project(tmp_path, db, {})
    from types import SimpleNamespace

    assert main_audit(SimpleNamespace(config_file=str(config), database=None, chip=None, aa="x-aa")) == 0
    assert "include no change; about 95%" in capsys.readouterr().out
    assert main_audit(SimpleNamespace(config_file=str(config), database=None, chip=None, aa="spec")) == 2


def test_a_run_total_of_three_spread_rounds_carries_no_direction(tmp_path):
    """b is 7%, 4% and 1% faster in its three rounds: the rounds' bootstrap (before the t
    interval) gave +3.1%, 95% interval +0.8% to +5.5%, and passed "+4%" as a direction;
    three rounds that spread cannot."""
    db = tmp_path / "spread.duckdb"
    build_fixture(
        db,
        chips=(FixtureChip("Fixture M1", 100.0),),
        arms=("a", "b"),
        concurrencies=(1, 2),
        rounds=3,
        requests_per_client=8,
        factors={"a": 1.0, "b": (1.07, 1.04, 1.01)},
        run_noise=0.0,
    )
    body = '# T\n\n{{ claim("+4%", gain("aggregate_tps", arm="b", base="a", concurrency=1)) }}\n'
    v, _ = _verdicts(db, body)
    verdict = v["+4%"]
    assert rounds_plan(verdict).startswith("fails: 5 rounds instead of 3 would halve the interval's width")
    m = verdict.measured
    assert m.n_rounds == 3 and m.lo < 0 < m.hi, m
    assert not verdict.ok and "the interval includes no change" in verdict.reason
    assert f"95% interval {m.interval_text()}" in verdict.failure_message()


def test_the_rounds_that_halve_an_interval_and_the_audit_prints_them(tmp_path, capsys):
    """t(0.975, R - 1) / sqrt(R) halves from 2 rounds to 3, 3 to 5, 5 to 13; the audit
    prints the figure under a claim that fails, not under one that holds comfortably."""
    from types import SimpleNamespace

    from runner.publish.site.commands import main_audit

    assert [rounds_for_half_width(n) for n in (1, 2, 3, 5)] == [None, 3, 5, 13]
    db = _db(tmp_path, 1.3)
    post = (
        "---\ndate: 2026-11-20\nexperiment: spec-fixture\n---\n# T\n\n"
        '{{ claim("+30%", gain("decode_tps", arm="b", base="a", concurrency=2)) }}\n'
        '{{ claim("level", gain("decode_tps", arm="b", base="a", concurrency=2)) }}\n'
    )
    config = write_project(tmp_path, db, {"p.md": post})
    main_audit(SimpleNamespace(config_file=str(config), database=None, chip=None, aa=None))
    out = capsys.readouterr().out
    assert out.count("rounds instead of 3 would halve") == 1, out  # under the failing "level" only
    assert "fails: 5 rounds instead of 3" in out


def test_the_upper_rank_bounds_a_quantile_from_above_about_two_and_a_half_percent_of_the_time():
    # 16 draws bound a median from above by X_(13) (misses 1.06%), not X_(12) (3.84%):
    # the interpolated rank lies between, nearer 12 the more of 2.5% is left
    m = upper_rank(16, 0.5)
    assert 12 < m < 13 and m == pytest.approx(13 - (0.025 - 0.0106) / (0.0384 - 0.0106), abs=1e-3)
    # 384 draws: the largest misses a p99 when none exceeds it (0.99^384 = 2.1%)
    all_below, one_above = 0.99**384, 384 * 0.01 * 0.99**383
    assert upper_rank(384, 0.99) == pytest.approx(384 - (0.025 - all_below) / one_above)
    assert upper_rank(367, 0.99) is None and upper_rank(368, 0.99) is not None  # 0.99^n <= 2.5% from 368
    assert upper_rank(0, 0.5) is None


def test_a_percentile_without_enough_requests_has_no_interval_and_one_with_them_reaches_its_tail():
    rounds = {r: 10.0 + r for r in range(3)}
    runs = {("c", "a", 1, r): {"ttft_p99_ms": v, "ttft_p50_ms": v} for r, v in rounds.items()}
    few = {("c", "a", 1, r): {"ttft_ms": (np.arange(16), np.full(16, 10.0 + r))} for r in rounds}
    tail = np.r_[np.full(190, 10.0), np.full(10, 50.0)]  # 5% of the requests are slow
    many = {("c", "a", 1, r): {"ttft_ms": (np.arange(200), tail)} for r in rounds}
    e = Intervals(runs, lambda: few).estimate("ttft_p99_ms", "c", "a", 1)
    assert (e.value, e.lo, e.hi, e.n_rounds) == (11.0, None, None, 3)  # 48 requests cannot bound a p99
    e = Intervals(runs, lambda: many).estimate("ttft_p99_ms", "c", "a", 1)
    t_lo, t_hi = level_bounds(np.array(list(rounds.values())))
    assert e.lo == pytest.approx(t_lo) and e.hi == 50.0 > t_hi  # the rounds missed the slow tail
    e = Intervals(runs, lambda: many).estimate("ttft_p50_ms", "c", "a", 1)
    assert (e.lo, e.hi) == (pytest.approx(t_lo), pytest.approx(t_hi))  # the median's tail adds nothing
    assert Intervals(runs).estimate("ttft_p99_ms", "c", "a", 1).hi == pytest.approx(t_hi)  # rounds alone


def test_a_percentile_without_an_interval_says_it_had_too_few_requests():
    assert no_interval_text(1) == "1 round: no interval"
    assert "too few requests" in no_interval_text(3)


def test_percentile_metrics_name_their_request_column_and_quantile():
    assert percentile_of("ttft_p99_ms") == ("ttft_ms", 0.99)
    assert percentile_of("itl_p50_ms") == ("itl_ms", 0.5)
    assert percentile_of("e2el_q0.95_ms") == ("e2el_ms", 0.95)
    for other in ("stall_max_ms", "ttft_mean_ms", "decode_tps", "ttft_q2_ms", "ttft_qx_ms", "foo_p99_ms"):
        assert percentile_of(other) is None


def test_a_floor_is_a_claim_and_a_mark_judged_on_the_whole_interval(tmp_path):
    gain = 'gain("decode_tps", arm="b", base="a", concurrency=2)'
    body = (
        f'# T\n\n{{{{ claim("at least -3%", {gain}) }}}}\n{{{{ claim("at most +5%", {gain}) }}}}\n'
        f'{{{{ verdict({gain}, at_least="-3%") }}}} {{{{ verdict({gain}, at_most="+5%") }}}}\n'
    )
    v, post = _verdicts(_db(tmp_path, 1.3), body)
    assert v["at least -3%"].ok and "lies at or above -3%" in v["at least -3%"].reason
    assert not v["at most +5%"].ok and v["at most +5%"].reason.startswith("refuted")
    assert [f.message for f in post.failures] == [v["at most +5%"].failure_message()]
    html = post.markdown + "".join(post.blocks.values())
    assert ">not below -3%</span>" in html and ">above +5%</span>" in html
    bad = '# T\n\n{{ verdict(gain("decode_tps", arm="b", base="a", concurrency=2), at_least="-3%") }}\n'
    _, post = _verdicts(_db(tmp_path, 1.3, "r.duckdb"), bad.replace('"-3%"', '"0.97x", at_most="1x"'))
    assert [f.message for f in post.failures] == ["verdict(...) takes at_least= or at_most=, not both"]
    ratio = bad.replace("gain(", "ratio(")
    _, post = _verdicts(_db(tmp_path, 1.3, "q.duckdb"), ratio)
    assert ["a percentage needs gain()" in f.message for f in post.failures] == [True]
