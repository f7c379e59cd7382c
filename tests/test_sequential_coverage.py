"""The sequential design's coverage, simulated (`pytest -s` prints the table): experiments
whose round-to-round log ratio of two arms is an effect plus noise (normal; heavy-tailed,
Student t with 3 df; or normal with a contention burst that slows one arm by 25% in 10% of
rounds, which the contention rule re-measures up to twice), measured at the looks of
rounds = 3, max_rounds = 12 (3, 6, 12) and stopped at the first look whose interval
decides the comparison (`verdicts.decide`, band ±10%), through the real interval
(`intervals.ratio_bounds` with the design's schedule).

The bars (issue 37): the reported interval covers the effect 93% to 98.5%; a zero effect
passes as a direction at most 5% of the time; an effect of twice the band passes as
level at most 5%; the rounds used on average are printed beside each case."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runner.publish.stats.intervals import ratio_bounds
from runner.publish.stats.sequential import confidence, looks, spent
from runner.publish.stats.verdicts import HIGHER, LEVEL, LOWER, UNDECIDED, decide

EXPERIMENTS = 5000
BAND = 0.10
SCHEDULE = looks(3, 12)
SD = 0.06  # the paired rounds' spread (log scale)
BURST, BURST_SHARE = 0.25, 0.10
EFFECTS = (0.0, BAND / 2, -BAND / 2, 2 * BAND)
NOISES = ("normal", "heavy", "burst")
SLACK = 2 * (0.985 * 0.015 / EXPERIMENTS) ** 0.5  # two standard errors of a share near 98.5%


def round_log_ratios(rng: np.random.Generator, effect: float, noise: str, rule: bool, sd: float = SD):
    shape = (EXPERIMENTS, SCHEDULE[-1])
    if noise == "heavy":
        n = rng.standard_t(3, shape) * sd / math.sqrt(3)  # t3 has variance 3
    else:
        n = rng.normal(0.0, sd, shape)
    if noise == "burst":  # kept only when every try was contended: the rule tries three times
        kept = rng.random(shape) < BURST_SHARE ** (3 if rule else 1)
        n = n + np.where(kept, math.log1p(-BURST), 0.0)
    return math.log1p(effect) + n


def sequential(lr: np.ndarray, effect: float) -> dict:
    """Each simulated experiment stopped at its first decided look: its verdict, whether
    its reported interval covered the effect, and the rounds it used."""
    verdicts = np.full(len(lr), UNDECIDED, dtype=object)
    covered = np.zeros(len(lr), bool)
    used = np.zeros(len(lr), int)
    active = np.ones(len(lr), bool)
    for k, rounds in enumerate(SCHEDULE):
        on = np.exp(lr[:, :rounds])
        lo, hi = ratio_bounds(on, np.ones_like(on), schedule=SCHEDULE)
        for i in np.nonzero(active)[0]:
            d = decide(lo[i] - 1, hi[i] - 1, rounds, "change", BAND)
            if d.kind != UNDECIDED or k == len(SCHEDULE) - 1:
                verdicts[i], covered[i], used[i], active[i] = (
                    d.kind,
                    lo[i] <= 1 + effect <= hi[i],
                    rounds,
                    False,
                )
    share = {kind: float(np.mean(verdicts == kind)) for kind in (HIGHER, LOWER, LEVEL, UNDECIDED)}
    return {"cover": float(covered.mean()), "rounds": float(used.mean()), **share}


@pytest.fixture(scope="module")
def table():
    rows = {}
    for noise in NOISES:
        for effect in EFFECTS:
            rng = np.random.default_rng(37)
            rows[(noise, effect)] = sequential(round_log_ratios(rng, effect, noise, rule=True), effect)
    for effect in (0.0, 2 * BAND):  # the burst without the contention rule, for comparison
        rng = np.random.default_rng(37)
        rows[("burst, no rule", effect)] = sequential(
            round_log_ratios(rng, effect, "burst", rule=False), effect
        )
    print(
        f"\nlooks {SCHEDULE}, error spent {', '.join(f'{a:.2%}' for a in spent(SCHEDULE))}; "
        f"{EXPERIMENTS} each"
    )
    print("noise           effect  cover  rounds  faster  slower  level  undecided")
    for (noise, effect), r in rows.items():
        print(
            f"{noise:15s} {effect:+6.0%}  {r['cover']:.3f}  {r['rounds']:5.1f}  {r[HIGHER]:.3f}   "
            f"{r[LOWER]:.3f}   {r[LEVEL]:.3f}  {r[UNDECIDED]:.3f}"
        )
    return rows


@pytest.mark.parametrize("noise", NOISES)
def test_the_reported_interval_covers_93_to_98_5_percent_whatever_the_stopping(table, noise):
    for effect in EFFECTS:
        assert 0.93 <= table[(noise, effect)]["cover"] <= 0.985 + SLACK, (noise, effect)


@pytest.mark.parametrize("noise", NOISES)
def test_no_effect_passes_as_a_direction_at_most_5_percent(table, noise):
    r = table[(noise, 0.0)]
    assert r[HIGHER] + r[LOWER] <= 0.05


@pytest.mark.parametrize("noise", NOISES)
def test_twice_the_band_passes_as_level_at_most_5_percent_and_a_zero_effect_is_mostly_level(table, noise):
    assert table[(noise, 2 * BAND)][LEVEL] <= 0.05
    assert table[(noise, 0.0)][LEVEL] >= 0.9  # the design can decide "no difference"


def test_stopping_early_uses_fewer_rounds_for_a_clear_effect(table):
    assert table[("normal", 2 * BAND)]["rounds"] < table[("normal", 0.0)]["rounds"] <= SCHEDULE[-1]


def test_each_look_spends_its_share_and_a_fixed_design_keeps_95_percent():
    assert math.isclose(sum(spent(SCHEDULE)), 0.05)
    assert confidence(3, SCHEDULE) == confidence(12, SCHEDULE) == 1 - 0.05 / 3
    assert confidence(5, ()) == confidence(5, (3,)) == 0.95
    assert looks(3, 12) == (3, 6, 12) and looks(3, 10) == (3, 6, 10) and looks(3, 3) == (3,)
