"""95% intervals for every figure a page shows: a t interval over the rounds.

The method, in one place:

- A cell (chip, arm, concurrency) has one run per round. Its figure is the mean over
  rounds of each run's value (`sql.RUN_METRICS`): a mean or percentile over the run's
  requests, the largest gap, or a run total. Rounds are the independent repetitions: the
  machine drifts from round to round, and a run's value carries its requests' noise, so
  the spread of the rounds' values holds both. The interval is the mean plus or minus
  t(0.975, R - 1) x their standard deviation / sqrt(R): honest at three rounds (a
  bootstrap of three values never exceeds their range, and covered about 75%), exact for
  normal round values, and checked by simulation (`tests/test_interval_coverage.py`). A
  figure of one round has no interval.
- A percentile over requests (TTFT, TPOT, ITL, latency) also needs the slow tail that
  some rounds never met: with one request in a hundred an outlier, the rounds' p99s
  alone covered 67% to 90%. Its upper bound is the larger of the t bound and the order
  statistic of the rounds' requests pooled that bounds the quantile from above
  (binomial, interpolated: `upper_rank`); too few requests to bound it (under 368 for a
  p99) give no interval. Why not the pooled order statistics alone, or their union
  with t: requests of one round share its drift, so alone they covered a median 53% to
  92%, and the union overcovered (99%); the lower bound stays the rounds' (a tail they
  met already raises their values). Covered 95% to 98.4% in the harness.
- Paired across arms: every arm of a round replays the same requests right after one
  another, so a ratio or gain is judged on the rounds' own ratios: t over the log of
  arm / base in each round both arms measured (the round's drift cancels; the point, too,
  is the ratio of the two arms' means over those rounds, since measuring until decided
  gives the A/A pair more rounds), the interval the point ratio times exp(+-half-width);
  the harness checks this for means, totals and percentiles (p50, p99). Values that are
  not all positive (a share that can be 0) use the rounds' differences over the base's
  mean instead.
- A traffic profile's figure (a share-weighted sum over concurrencies) is formed round by
  round and judged the same way; a share pooled over runs (drafted passes at a width) by
  the runs' own shares, its interval kept inside [0, 1], as is a share of drafts kept
  (acceptance, `metrics.SHARES`).
- What no interval sees, a bias repeated in every round such as one arm's runs losing
  more CPU to other tenants, is `contention.py`'s.
- Measured until decided (a sequential design, `sequential.py`), every interval of the
  chip's runs is that design's: its t and order statistic use the error its look spends.
- No randomness: the same database gives the same intervals on every machine (bounds are
  rounded to 12 significant digits).

This module computes; it neither queries nor renders: `PostData` hands it the per-run
values that `queries.Reader` returns. The array functions take any leading shape, so the
coverage harness runs the same code on thousands of simulated experiments at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from runner.publish.metrics import SHARES, percentile_of
from runner.publish.stats.sequential import confidence, critical

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
    """Why a figure has no interval: too few rounds, or else (a percentile) too few requests."""
    if n_rounds >= MIN_ROUNDS:
        return f"{n_rounds} rounds but too few requests to bound this percentile: no interval"
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


def _half(values: np.ndarray, schedule: tuple[int, ...] = ()) -> np.ndarray:
    """schedule: a sequential design's looks (sequential.py), which widen every look's t."""
    r = values.shape[-1]
    t = critical(r, schedule) if len(schedule) > 1 else t975(r - 1)
    return t * values.std(axis=-1, ddof=1) / math.sqrt(r)


def level_bounds(
    values: np.ndarray, value: np.ndarray | None = None, schedule: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """(..., R) rounds' values -> (lo, hi) around `value` (default: their mean); a figure
    that is never negative keeps its lower bound at 0 or above."""
    values = np.asarray(values, dtype=float)
    center = values.mean(axis=-1) if value is None else np.asarray(value, dtype=float)
    half = _half(values, schedule)
    lo = np.where((values >= 0).all(axis=-1), np.maximum(center - half, 0.0), center - half)
    return lo, center + half


def ratio_bounds(
    on: np.ndarray, base: np.ndarray, ratio: np.ndarray | None = None, schedule: tuple[int, ...] = ()
) -> tuple:
    """Paired (..., R) rounds' values of two arms -> (lo, hi) of on / base around `ratio`
    (default: mean(on) / mean(base)): log scale when every value is positive."""
    on, base = np.asarray(on, dtype=float), np.asarray(base, dtype=float)
    base_mean = base.mean(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        point = on.mean(axis=-1) / base_mean if ratio is None else np.asarray(ratio, dtype=float)
        positive = (on > 0).all(axis=-1) & (base > 0).all(axis=-1)
        log_half = _half(np.log(np.where((on > 0) & (base > 0), on / base, 1.0)), schedule)
        lin_half = _half(on - base, schedule) / np.abs(base_mean)
    lo = np.where(positive, point * np.exp(-log_half), point - lin_half)
    hi = np.where(positive, point * np.exp(log_half), point + lin_half)
    return lo, hi


def upper_rank(n: int, q: float, level: float = LEVEL) -> float | None:
    """The 1-based rank m of the order statistic of `n` independent draws that bounds the
    population's q-quantile Q from above at 97.5%: X_(m) < Q only when B >= m, B the
    binomial count of draws at or below Q. A whole rank can keep that miss far under 2.5%
    (B is discrete), so m is moved toward m - 1 by the share of 2.5% left (an
    interpolated order statistic). None when `n` draws cannot bound Q (q^n > 2.5%)."""
    if n < 1:
        return None
    j = np.arange(n + 1)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log(n - j[1:] + 1.0) - np.log(j[1:]))])
    with np.errstate(divide="ignore"):
        pmf = np.exp(log_choose + j * math.log(q) + (n - j) * math.log1p(-q))
    tail = (1 - level) / 2
    above = np.cumsum(pmf[::-1])[::-1]  # above[m] = P(B >= m): how often X_(m) < Q
    ok = np.nonzero(above[1:] <= tail)[0]
    if not len(ok):
        return None
    m = int(ok[0]) + 1
    return float(m) if m == 1 else m - (tail - above[m]) / (above[m - 1] - above[m])


def percentile_bounds(
    values: np.ndarray, pooled: np.ndarray, q: float, schedule: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """(..., R) rounds' q-quantiles and (..., N) their requests pooled -> (lo, hi): the t
    interval over the rounds, its upper bound raised to the pooled requests' order
    statistic bounding the q-quantile from above (`upper_rank`); NaN where N requests
    cannot bound it."""
    t_lo, t_hi = level_bounds(values, schedule=schedule)
    m = upper_rank(np.shape(pooled)[-1], q, confidence(np.shape(values)[-1], schedule))
    if m is None:
        return np.full_like(t_lo, np.nan), np.full_like(t_hi, np.nan)
    ordered = np.sort(np.asarray(pooled, dtype=float), axis=-1)
    whole = int(math.floor(m))
    bound = ordered[..., whole - 1]
    if m > whole:
        bound = bound + (m - whole) * (ordered[..., whole] - bound)
    return t_lo, np.maximum(t_hi, bound)


def _estimate(value: float, lo: float, hi: float, n: int) -> Estimate:
    lo, hi = float(f"{float(lo):.12g}"), float(f"{float(hi):.12g}")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Estimate(value, None, None, n)
    return Estimate(value, min(lo, value), max(hi, value), n)


def level(value: float, rounds: list[float], schedule: tuple[int, ...] = ()) -> Estimate:
    """A figure (the mean of `rounds`, or `value` formed from them) and its interval."""
    if len(rounds) < MIN_ROUNDS:
        return Estimate(value, None, None, len(rounds))
    lo, hi = level_bounds(np.asarray(rounds, dtype=float), value, schedule)
    return _estimate(value, lo, hi, len(rounds))


def percentile_level(
    value: float, rounds: list[float], pooled: np.ndarray, q: float, schedule: tuple[int, ...] = ()
) -> Estimate:
    """A percentile over requests (the mean of `rounds`' q-quantiles) and its interval from
    the rounds and their `pooled` requests' values (`percentile_bounds`)."""
    pooled = np.asarray(pooled, dtype=float)
    pooled = pooled[~np.isnan(pooled)]
    if len(rounds) < MIN_ROUNDS:
        return Estimate(value, None, None, len(rounds))
    lo, hi = percentile_bounds(np.asarray([rounds], dtype=float), pooled[None], q, schedule)
    return _estimate(value, lo[0], hi[0], len(rounds))


def paired(ratio: float, on: dict, base: dict, kind: str, schedule: tuple[int, ...] = ()) -> Estimate:
    """on / base (kind "ratio") or that minus 1 ("change"), the interval from the rounds
    ({round: value}) both arms measured."""
    shift = 1.0 if kind == "change" else 0.0
    common = sorted(set(on) & set(base))
    if len(common) < MIN_ROUNDS:
        return Estimate(ratio - shift, None, None, len(common))
    lo, hi = ratio_bounds([on[r] for r in common], [base[r] for r in common], ratio, schedule)
    return _estimate(ratio - shift, lo - shift, hi - shift, len(common))


class Intervals:
    """The intervals of one experiment's view of the data.

    runs: {(chip, arm, concurrency, round): {metric: value or None}}; requests: called
    once a percentile is asked for, {(chip, arm, concurrency, round): {column: (request
    ids, values)}} (None: percentiles get the rounds' t interval alone); designs: {chip:
    the looks of the sequential design its runs were measured under} (absent: fixed)."""

    def __init__(self, runs: dict, requests: Callable[[], dict] | None = None, designs: dict | None = None):
        self._requests = requests
        self._designs = designs or {}
        self._cells: dict[tuple, dict[int, dict]] = {}  # (chip, arm, concurrency) -> {round: run}
        for (c, a, k, r), v in sorted(runs.items()):
            self._cells.setdefault((c, a, k), {})[r] = v

    def by_round(self, metric: str, chip: str, arm: str, conc: int) -> dict[int, float]:
        runs = self._cells.get((chip, arm, conc), {})
        return {r: v[metric] for r, v in runs.items() if v.get(metric) is not None}

    def rounds_of(self, metric: str, chip: str, arm: str, conc: int) -> list[float]:
        return list(self.by_round(metric, chip, arm, conc).values())

    def estimate(self, metric: str, chip: str, arm: str, conc: int) -> Estimate:
        by_round = self.by_round(metric, chip, arm, conc)
        if not by_round:
            return NONE
        vals = list(by_round.values())
        percentile = percentile_of(metric)
        if percentile is None or self._requests is None:
            e = level(sum(vals) / len(vals), vals, self._designs.get(chip, ()))
            if metric in SHARES and e.hi is not None:  # a share's t interval can pass 1
                return Estimate(e.value, e.lo, min(e.hi, max(1.0, e.value)), e.n_rounds)
            return e
        column, q = percentile
        runs = self._requests()
        parts = [runs.get((chip, arm, conc, r), {}).get(column, ((), ()))[1] for r in by_round]
        pooled = np.concatenate([[], *parts])
        return percentile_level(sum(vals) / len(vals), vals, pooled, q, self._designs.get(chip, ()))

    def compare(self, metric: str, chip: str, arm: str, base: str, conc: int, kind: str) -> Estimate:
        """arm over base (kind "ratio") or that minus 1 ("change"), paired by round."""
        a, b = self.by_round(metric, chip, arm, conc), self.by_round(metric, chip, base, conc)
        common = set(a) & set(b)
        if common:  # the point and its interval from the same rounds (the A/A pair may have more)
            a, b = {r: a[r] for r in common}, {r: b[r] for r in common}
        if not a or not b or not sum(b.values()):
            return NONE
        ratio = (sum(a.values()) / len(a)) / (sum(b.values()) / len(b))
        return paired(ratio, a, b, kind, self._designs.get(chip, ()))

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
