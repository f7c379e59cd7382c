"""95% intervals for every figure a page shows: a t interval over the rounds.

The method, in one place:

- A cell (chip, arm, concurrency) has one run per round. Its figure is the mean over
  rounds of each run's value (`sql.RUN_METRICS`): a mean or percentile over the run's
  requests, the largest gap, or a run total. Rounds are the independent repetitions: the
  machine drifts from round to round, and a run's value carries its requests' noise, so
  the spread of the rounds' values holds both. The interval is the mean plus or minus
  t(0.975, R - 1) x their standard deviation / sqrt(R), for every kind of figure alike:
  honest at three rounds (a bootstrap of three values never exceeds their range, and
  covered about 75%), exact for normal round values, and checked by simulation
  (`tests/test_interval_coverage.py`). A figure of one round has no interval.
- Paired across arms: every arm of a round replays the same requests right after one
  another, so a ratio or gain is judged on the rounds' own ratios: t over the log of
  arm / base in each round both arms measured (the round's drift cancels), the interval
  the point ratio times exp(+-half-width). Values that are not all positive (a share that
  can be 0) use the rounds' differences over the base's mean instead.
- A traffic profile's figure (a share-weighted sum over concurrencies) is formed round by
  round and judged the same way; a share pooled over runs (drafted passes at a width) by
  the runs' own shares, its interval kept inside [0, 1].
- No randomness: the same database gives the same intervals on every machine (bounds are
  rounded to 12 significant digits).

This module computes; it neither queries nor renders: `PostData` hands it the per-run
values that `queries.Reader` returns. The array functions take any leading shape, so the
coverage harness runs the same code on thousands of simulated experiments at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
MIN_ROUNDS = 2  # fewer rounds give no interval
# t(0.975, df) for df = 1..30; beyond, the Cornish-Fisher expansion (error < 1e-4)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145)
_T975 += (2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048)
_T975 += (2.045, 2.042)
_Z975 = 1.959964


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float | None
    lo: float | None
    hi: float | None
    n_rounds: int


NONE = Estimate(None, None, None, 0)


def no_interval_text(n_rounds: int) -> str:
    return f"{n_rounds} round{'' if n_rounds == 1 else 's'}: no interval"


def t975(df: int) -> float:
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def rounds_for_half_width(n_rounds: int, most: int = 1000) -> int | None:
    """The rounds whose interval would be half as wide as this one of `n_rounds`, the
    rounds' spread taken as measured (width ~ t(0.975, R - 1) / sqrt(R)): a planning figure."""
    if n_rounds < MIN_ROUNDS:
        return None
    goal = t975(n_rounds - 1) / math.sqrt(n_rounds) / 2
    return next((r for r in range(n_rounds + 1, most) if t975(r - 1) / math.sqrt(r) <= goal), None)


def _half(values: np.ndarray) -> np.ndarray:
    r = values.shape[-1]
    return t975(r - 1) * values.std(axis=-1, ddof=1) / math.sqrt(r)


def level_bounds(values: np.ndarray, value: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(..., R) rounds' values -> (lo, hi) around `value` (default: their mean); a figure
    that is never negative keeps its lower bound at 0 or above."""
    values = np.asarray(values, dtype=float)
    center = values.mean(axis=-1) if value is None else np.asarray(value, dtype=float)
    half = _half(values)
    lo = np.where((values >= 0).all(axis=-1), np.maximum(center - half, 0.0), center - half)
    return lo, center + half


def ratio_bounds(on: np.ndarray, base: np.ndarray, ratio: np.ndarray | None = None) -> tuple:
    """Paired (..., R) rounds' values of two arms -> (lo, hi) of on / base around `ratio`
    (default: mean(on) / mean(base)): log scale when every value is positive."""
    on, base = np.asarray(on, dtype=float), np.asarray(base, dtype=float)
    base_mean = base.mean(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = on.mean(axis=-1) / base_mean if ratio is None else np.asarray(ratio, dtype=float)
        positive = (on > 0).all(axis=-1) & (base > 0).all(axis=-1)
        log_half = _half(np.log(np.where((on > 0) & (base > 0), on / base, 1.0)))
        lin_half = _half(on - base) / np.abs(base_mean)
    lo = np.where(positive, point * np.exp(-log_half), point - lin_half)
    hi = np.where(positive, point * np.exp(log_half), point + lin_half)
    return lo, hi


def _estimate(value: float, lo: float, hi: float, n: int) -> Estimate:
    lo, hi = float(f"{float(lo):.12g}"), float(f"{float(hi):.12g}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Estimate(value, None, None, n)
    return Estimate(value, min(lo, value), max(hi, value), n)


def level(value: float, rounds: list[float]) -> Estimate:
    """A figure (the mean of `rounds`, or `value` formed from them) and its interval."""
    if len(rounds) < MIN_ROUNDS:
        return Estimate(value, None, None, len(rounds))
    lo, hi = level_bounds(np.asarray(rounds, dtype=float), value)
    return _estimate(value, lo, hi, len(rounds))


def paired(ratio: float, on: dict, base: dict, kind: str) -> Estimate:
    """on / base (kind "ratio") or that minus 1 ("change"), the interval from the rounds
    ({round: value}) both arms measured."""
    shift = 1.0 if kind == "change" else 0.0
    common = sorted(set(on) & set(base))
    if len(common) < MIN_ROUNDS:
        return Estimate(ratio - shift, None, None, len(common))
    lo, hi = ratio_bounds([on[r] for r in common], [base[r] for r in common], ratio)
    return _estimate(ratio - shift, lo - shift, hi - shift, len(common))


class Intervals:
    """The intervals of one experiment's view of the data.

    runs: {(chip, arm, concurrency, round): {metric: value or None}}"""

    def __init__(self, runs: dict):
        self._cells: dict[tuple, dict[int, dict]] = {}  # (chip, arm, concurrency) -> {round: run}
        for (c, a, k, r), v in sorted(runs.items()):
            self._cells.setdefault((c, a, k), {})[r] = v

    def by_round(self, metric: str, chip: str, arm: str, conc: int) -> dict[int, float]:
        runs = self._cells.get((chip, arm, conc), {})
        return {r: v[metric] for r, v in runs.items() if v.get(metric) is not None}

    def rounds_of(self, metric: str, chip: str, arm: str, conc: int) -> list[float]:
        return list(self.by_round(metric, chip, arm, conc).values())

    def estimate(self, metric: str, chip: str, arm: str, conc: int) -> Estimate:
        vals = self.rounds_of(metric, chip, arm, conc)
        return level(sum(vals) / len(vals), vals) if vals else NONE

    def compare(self, metric: str, chip: str, arm: str, base: str, conc: int, kind: str) -> Estimate:
        """arm over base (kind "ratio") or that minus 1 ("change"), paired by round."""
        a, b = self.by_round(metric, chip, arm, conc), self.by_round(metric, chip, base, conc)
        if not a or not b or not sum(b.values()):
            return NONE
        ratio = (sum(a.values()) / len(a)) / (sum(b.values()) / len(b))
        return paired(ratio, a, b, kind)

    def weighted(self, metric: str, chip: str, arm: str, shares: tuple) -> dict[int, float]:
        """{round: sum over (concurrency, share) of share x the round's value} over the
        rounds that measured every concurrency of the profile (a traffic profile)."""
        parts = [self.by_round(metric, chip, arm, c) for c, _ in shares]
        rounds = set.intersection(*(set(p) for p in parts)) if parts else set()
        return {r: sum(s * p[r] for (_, s), p in zip(shares, parts)) for r in sorted(rounds)}


def share_interval(counts: list[int], hits: list[int]) -> Estimate:
    """sum(hits) / sum(counts) over runs (a share pooled over runs, such as the passes that
    drafted at one batch width), its interval from the runs' own shares, inside [0, 1]."""
    pairs = [(h, n) for h, n in zip(hits, counts) if n]
    if not pairs:
        return NONE
    value = sum(h for h, _ in pairs) / sum(n for _, n in pairs)
    e = level(value, [h / n for h, n in pairs])
    return e if e.hi is None else Estimate(e.value, e.lo, min(e.hi, max(1.0, value)), e.n_rounds)


def includes(est: Estimate, point: float) -> bool | None:
    """Whether the interval includes `point`; None when there is no interval."""
    if est.lo is None or est.hi is None:
        return None
    return est.lo <= point <= est.hi
