"""Absolute figures of a machine class measured on several instances: their spread, never
one pooled mean.

A class's rounds are blocks numbered by instance (`publish/sql/classes.py`: the instance's
index times BLOCK_STRIDE, plus its round). A gain pairs arms within a block, so pooling
blocks adds evidence; a level (tok/s, ms) does not pair, and two VMs of one class measured
prefill 2.07x apart here: a mean over both would hide that, and its interval covers the
class's mean 26% to 63% of the time (tests/test_pooled_coverage.py). So a level on
blocks from more than one instance is shown as its instances' lowest and highest means,
and a claim on one is not judged. Pure functions of a cell's per-block values.
"""

from __future__ import annotations

from typing import NamedTuple

from runner.publish.sql.classes import BLOCK_STRIDE
from runner.publish.stats.intervals import level


class Spread(NamedTuple):
    low: float  # the lowest instance's mean over its rounds
    high: float
    instances: int
    rounds: int


def instance_of(block: int) -> int:
    return int(block) // BLOCK_STRIDE


def spread(by_block: dict[int, float]) -> Spread | None:
    """The spread of a cell's instances (None: its blocks are one instance's)."""
    means: dict[int, list[float]] = {}
    for block, value in by_block.items():
        means.setdefault(instance_of(block), []).append(value)
    if len(means) < 2:
        return None
    per_instance = [sum(v) / len(v) for v in means.values()]
    return Spread(min(per_instance), max(per_instance), len(means), len(by_block))


class InstanceLevel(NamedTuple):
    """One instance's level in a cell, shaped as a chart reads a cell."""

    mean: float
    lo: float | None
    hi: float | None


def instance_levels(view, metric: str, chip: str, arm: str, conc: int) -> dict[int, InstanceLevel]:
    """Each instance's mean and t interval over its own rounds (a chart's line per instance)."""
    rounds: dict[int, list[float]] = {}
    for block, value in view.intervals.by_round(metric, chip, arm, conc).items():
        rounds.setdefault(instance_of(block), []).append(value)
    out = {}
    for k, vals in sorted(rounds.items()):
        e = level(sum(vals) / len(vals), vals)
        out[k] = InstanceLevel(e.value, e.lo, e.hi)
    return out


def of_cell(view, metric: str, chip: str, arm: str, conc: int) -> Spread | None:
    return spread(view.intervals.by_round(metric, chip, arm, conc))


def texts(s: Spread, decimals: int) -> dict[str, str]:
    """A table cell's value and interval texts for the spread: "61.0–84.2", "2 instances"."""
    return {
        "value": f"{s.low:.{decimals}f}\u2013{s.high:.{decimals}f}",
        "interval": f"{s.instances} instances",
    }
