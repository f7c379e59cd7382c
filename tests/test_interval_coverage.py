"""Coverage of the 95% intervals, by simulation: does each kind of figure's interval hold
the true value 93% to 98.5% of the time, and does a gain of zero pass as a direction at
most 5% of the time? The model is `coverage_sim.py`'s; the interval code is the real one
(`intervals.level_bounds` and `ratio_bounds`, which `Intervals` calls for every page).
Run with -s to see the table.

- "At most 5%" is checked within the simulation's own error (two standard errors of a
  share of EXPERIMENTS): an exact 95% interval excludes a true zero 5% of the time.
- p99 is the known shortfall: with one request in a hundred an outlier, a run's p99 of
  16 to 128 requests is mostly whether that run caught one, and rounds that caught none
  cannot show it (covered 67% to 90%). Its test is an expected failure, strict, so a
  method that fixes it is noticed."""

from __future__ import annotations

import numpy as np
import pytest
from coverage_sim import figures, request_times, true_levels

from runner.publish import intervals

EXPERIMENTS = 1000
GAIN = 0.10
CASES = [(r, n) for r in (2, 3, 5) for n in (16, 128)]
KINDS = ("mean", "p50", "p99", "total", "gain mean", "gain total", "zero mean", "zero total")
LOW, HIGH = 0.93, 0.985
DIRECTION_AT_ZERO = 0.05 + 2 * (0.05 * 0.95 / EXPERIMENTS) ** 0.5
SHORTFALL = "p99"


def _covers(lo: np.ndarray, hi: np.ndarray, truth: float) -> np.ndarray:
    return (lo <= truth) & (truth <= hi)


def coverage(rounds: int, requests: int) -> tuple[dict[str, float | None], float]:
    """{kind: share of experiments whose interval holds the truth (None: no interval at
    this many rounds)}, and the share of zero gains that pass as a direction."""
    rng = np.random.default_rng(1000 * rounds + requests)
    truth = true_levels(7, requests)
    a, b = (figures(t) for t in request_times(rng, (EXPERIMENTS, rounds, requests), GAIN))
    a0, b0 = (figures(t) for t in request_times(rng, (EXPERIMENTS, rounds, requests), 0.0))
    if rounds < intervals.MIN_ROUNDS:
        return dict.fromkeys(KINDS), 0.0
    out = {}
    for kind, values, true in (
        ("mean", a.mean_tps, truth.mean_tps),
        ("p50", a.p50_ms, truth.p50_ms),
        ("p99", a.p99_ms, truth.p99_ms),
        ("total", a.total_tps, truth.total_tps),
    ):
        out[kind] = _covers(*intervals.level_bounds(values), true).mean()
    # tok/s: the faster arm b is 1 + GAIN times arm a's
    out["gain mean"] = _covers(*intervals.ratio_bounds(b.mean_tps, a.mean_tps), 1 + GAIN).mean()
    out["gain total"] = _covers(*intervals.ratio_bounds(b.total_tps, a.total_tps), 1 + GAIN).mean()
    zero = [
        intervals.ratio_bounds(b0.mean_tps, a0.mean_tps),
        intervals.ratio_bounds(b0.total_tps, a0.total_tps),
    ]
    out["zero mean"], out["zero total"] = (_covers(lo, hi, 1.0).mean() for lo, hi in zero)
    directional = max((~_covers(lo, hi, 1.0)).mean() for lo, hi in zero)
    return out, directional


@pytest.fixture(scope="module")
def table():
    rows = {case: coverage(*case) for case in CASES}
    print(f"\ncoverage of the 95% intervals, {EXPERIMENTS} simulated experiments a case")
    print(f"{'rounds x requests':<18}" + "".join(f"{k:>11}" for k in KINDS) + f"{'dir @ 0':>9}")
    for (r, n), (cov, d) in rows.items():
        cells = "".join(f"{'none':>11}" if v is None else f"{v:>11.1%}" for v in cov.values())
        print(f"{r} x {n:<14}" + cells + f"{d:>9.1%}")
    return rows


@pytest.mark.parametrize("rounds", [3, 5])
def test_every_kind_of_figure_covers_about_95_percent(table, rounds):
    for (r, n), (cov, _) in table.items():
        if r == rounds:
            bad = {k: v for k, v in cov.items() if k != SHORTFALL and (v is None or not LOW <= v <= HIGH)}
            assert not bad, f"{r} rounds x {n} requests: {bad}"


def test_two_rounds_cover_as_well_or_give_no_interval(table):
    for (r, n), (cov, _) in table.items():
        if r == 2:
            bad = {k: v for k, v in cov.items() if k != SHORTFALL and v is not None and not LOW <= v <= HIGH}
            assert not bad, f"2 rounds x {n} requests: {bad}"


@pytest.mark.xfail(strict=True, reason="a p99 of few requests under rare outliers: see the module docstring")
def test_p99_covers_about_95_percent(table):
    for (r, n), (cov, _) in table.items():
        assert cov[SHORTFALL] is None or LOW <= cov[SHORTFALL] <= HIGH, f"{r} rounds x {n} requests"


def test_a_zero_gain_passes_as_a_direction_at_most_5_percent(table):
    for (r, n), (_, directional) in table.items():
        assert directional <= DIRECTION_AT_ZERO, f"{r} rounds x {n} requests: {directional:.1%}"


def test_the_arrays_are_the_cells_intervals():
    """The array functions the harness calls are the ones a page's cell goes through."""
    runs = {
        ("c", arm, 1, r): {"decode_tps": v}
        for arm, vals in (("a", (10, 11, 12)), ("b", (12, 13, 15)))
        for r, v in enumerate(vals)
    }
    iv = intervals.Intervals(runs)
    e = iv.estimate("decode_tps", "c", "a", 1)
    lo, hi = intervals.level_bounds(np.array([[10.0, 11, 12]]))
    assert (e.value, e.lo, e.hi) == (11.0, pytest.approx(lo[0]), pytest.approx(hi[0]))
    assert e.hi - e.lo == pytest.approx(2 * 4.303 * 1.0 / np.sqrt(3))  # t(0.975, 2) x sd / sqrt(3)
    g = iv.compare("decode_tps", "c", "b", "a", 1, "change")
    lo, hi = intervals.ratio_bounds(np.array([12.0, 13, 15]), np.array([10.0, 11, 12]))
    assert (g.lo, g.hi) == (pytest.approx(lo - 1), pytest.approx(hi - 1))
    assert g.value == pytest.approx(40 / 33 - 1)
