"""Coverage of a gain pooled over a machine class's instances (issue 38), by simulation
(`coverage_sim.instance_request_times`): each (instance, round) is one block of the real
paired interval (`intervals.ratio_bounds`, as pages compute it once `publish/sql/classes.py`
numbers an instance's rounds as its own blocks). Run with -s to see the table.

- The model: the instance's speed (log SD 0.51: two instances 2.07x apart is one SD of
  their difference, as prefill measured on two "same chip" Xeon VMs here) multiplies both
  arms of its rounds, so a gain paired within a round does not see it; an instance x arm
  interaction (GAIN_SD: an instance that favours one arm) is what blocks within one
  instance share, and what a t interval over blocks cannot see. The truth is the class's
  gain, the mean over instances (1 + GAIN).
- A level (tok/s) pooled over instances is printed too: its interval is of a mean that
  moves 2x with which VM measured, which is why pages never pool absolute figures.
- Asserted: with no interaction the pooled gain covers as a single instance's does (the
  instance's 2x speed cancels within its blocks); with a 2% interaction it still covers at
  least LOW_POOLED. Printed, not asserted: a 5% interaction covers 68% to 85%, and a single
  instance's interval covers the *class* gain no better (85% at 5%): the blocks model is
  honest for instances that differ in speed, not for ones that change which arm wins.
  The alternative, a t interval over instances' mean log ratios, has no interval below
  two instances and t(1) = 12.7 at two: no claim would ever stand on two VMs."""

from __future__ import annotations

import numpy as np
import pytest
from coverage_sim import INSTANCE_SD, figures, instance_request_times, true_levels

from runner.publish.stats import intervals

EXPERIMENTS = 1000
GAIN = 0.10
REQUESTS = 16
CASES = [(i, r) for i in (1, 2, 3) for r in (3,)] + [(3, 5)]
GAIN_SDS = (0.0, 0.02, 0.05)
LOW, HIGH = 0.93, 0.985
LOW_POOLED = 0.85  # with a 2% interaction the blocks of an instance are not independent


def _covers(lo, hi, truth) -> float:
    return float(((lo <= truth) & (truth <= hi)).mean())


def pooled_coverage(instances: int, rounds: int, gain_sd: float) -> tuple[float, float]:
    """(the pooled gain's coverage of the class gain, the pooled level's of the class's mean
    level over instances), over EXPERIMENTS simulated classes."""
    rng = np.random.default_rng(100 * instances + rounds + int(1000 * gain_sd))
    a_times, b_times = instance_request_times(rng, EXPERIMENTS, instances, rounds, REQUESTS, GAIN, gain_sd)
    a, b = figures(a_times), figures(b_times)
    gain = _covers(*intervals.ratio_bounds(b.mean_tps, a.mean_tps), 1 + GAIN)
    # the level's truth: arm a's mean tok/s averaged over the class's instances' speeds
    class_level = true_levels(7, REQUESTS).mean_tps * np.exp(INSTANCE_SD**2 / 2)
    level = _covers(*intervals.level_bounds(a.mean_tps), class_level)
    return gain, level


@pytest.fixture(scope="module")
def table():
    rows = {(i, r, s): pooled_coverage(i, r, s) for i, r in CASES for s in GAIN_SDS}
    print(f"\ncoverage of the pooled 95% gain interval, {EXPERIMENTS} simulated classes, {REQUESTS} requests")
    print(f"{'instances x rounds':<20}{'interaction':>12}{'gain':>8}{'level':>8}")
    for (i, r, s), (g, lv) in rows.items():
        print(f"{i} x {r:<16}{s:>12.0%}{g:>8.1%}{lv:>8.1%}")
    return rows


def test_without_an_interaction_pooled_rounds_cover_like_one_instance_s(table):
    for (i, r, s), (gain, _) in table.items():
        if s == 0.0:
            assert LOW <= gain <= HIGH, (i, r, gain)


def test_a_small_interaction_still_covers_nearly_95_percent(table):
    for (i, r, s), (gain, _) in table.items():
        if s == 0.02:
            assert gain >= LOW_POOLED, (i, r, gain)
