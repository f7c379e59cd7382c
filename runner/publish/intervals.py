"""95% intervals for every figure a page shows: one seeded, paired bootstrap.

The method, in one place:

- A cell (chip, arm, concurrency) has one run per round; each run has its requests. Its
  figure is the mean over rounds of each run's value (`sql.RUN_METRICS`): a mean over
  the run's requests (prefill_tps, decode_tps), a percentile over them (TTFT and TPOT
  p50/p90/p99), a percentile over every inter-token gap of its requests (ITL), the
  largest of its requests' longest gaps (stall_max_ms), or a run total (aggregate_tps,
  goodput_rps and the per-pass figures).
- One bootstrap resample draws the rounds with replacement and, inside each drawn round,
  the requests with replacement; the statistic is recomputed on the draw (a weighted mean
  or weighted percentile of the requests, then a weighted mean over rounds). Run-level
  figures can only be resampled by round, so with two rounds their interval is at most
  the two rounds' range, and with one round they have none.
- Paired across arms: the draws depend on (chip, concurrency), never on the arm. Every arm
  of a round replays the same requests (`request_id` k is the same prompt in every arm),
  so arm A and arm B are resampled with the same rounds and the same request ids, and a
  ratio or gain is taken draw by draw. A request id that one arm lacks (a time-sized cell
  that issued fewer requests) simply carries no weight for that arm.
- B = 2000 draws, seeded by sha256 of (experiment, chip, concurrency), so the same
  database gives the same intervals on every machine; the interval is the 2.5th and 97.5th
  percentile of the draws (rounded to 12 significant digits before printing), widened to
  include the point value if needed.

Weighted percentiles use the inverted empirical distribution (the point value uses
DuckDB's interpolated `quantile_cont`), a difference far below the intervals' width.
This module computes; it neither queries nor renders: `PostData` hands it the per-run and
per-request values that `queries.Reader` returns as arrays.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

DRAWS = 2000
LEVEL = 0.95
# metric -> (per-request column, aggregator: "mean" or a quantile in (0, 1))
REQUEST_METRICS: dict[str, tuple[str, object]] = {
    "prefill_tps": ("prefill_tps", "mean"),
    "decode_tps": ("decode_tps", "mean"),
    "ttft_p50_ms": ("ttft_ms", 0.5),
    "ttft_p90_ms": ("ttft_ms", 0.9),
    "tpot_p50_ms": ("tpot_ms", 0.5),
    "tpot_p90_ms": ("tpot_ms", 0.9),
    "ttft_p99_ms": ("ttft_ms", 0.99),
    "tpot_p99_ms": ("tpot_ms", 0.99),
    # every inter-token gap of the run (a request's gaps move together), and each
    # request's longest gap, of which the run's figure is the largest
    "itl_p50_ms": ("itl_ms", 0.5),
    "itl_p90_ms": ("itl_ms", 0.9),
    "itl_p99_ms": ("itl_ms", 0.99),
    "stall_max_ms": ("stall_ms", 1.0),
    # means, and end-to-end latency (arrival to last token), as `vllm bench serve` reports
    "ttft_mean_ms": ("ttft_ms", "mean"),
    "tpot_mean_ms": ("tpot_ms", "mean"),
    "itl_mean_ms": ("itl_ms", "mean"),
    "e2el_mean_ms": ("e2el_ms", "mean"),
    "e2el_p50_ms": ("e2el_ms", 0.5),
    "e2el_p90_ms": ("e2el_ms", 0.9),
    "e2el_p99_ms": ("e2el_ms", 0.99),
}


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float | None
    lo: float | None
    hi: float | None
    n_rounds: int


NONE = Estimate(None, None, None, 0)


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "little")


def _round12(x: float) -> float:
    return float(f"{x:.12g}")


class Intervals:
    """Bootstrap draws for one experiment's view of the data.

    runs: {(chip, arm, concurrency, round): {metric: value or None}}
    requests: {(chip, arm, concurrency, round): {column: (request ids, values)}}: one value
    per request, or several per request (inter-token gaps: the ids repeat), and a
    resampled request carries all of its values."""

    def __init__(self, key: str, runs: dict, requests: dict):
        self.key, self.runs, self.requests = key, runs, requests
        self._cells: dict[tuple, list[dict]] = {}  # (chip, arm, concurrency) -> runs by round
        for (c, a, k, _), v in sorted(runs.items()):
            self._cells.setdefault((c, a, k), []).append(v)
        self._draws: dict[tuple, tuple] = {}
        self._reps: dict[tuple, np.ndarray | None] = {}

    # -- the shared draws ------------------------------------------------------
    def _draws_for(self, chip: str, conc: int) -> tuple:
        """(rounds, round counts (B, R), {round: (ids, request counts (B, n))})."""
        k = (chip, conc)
        if k not in self._draws:
            rng = np.random.default_rng(_seed(self.key, chip, conc))
            rounds = sorted({r for (c, _, k2, r) in self.runs if (c, k2) == (chip, conc)})
            w = rng.multinomial(len(rounds), [1 / len(rounds)] * len(rounds), size=DRAWS) if rounds else None
            per_round = {}
            for r in rounds:
                ids = np.unique(
                    np.concatenate(
                        [
                            np.asarray(rid, dtype=np.int64)
                            for (c, _, k2, r2), cols in self.requests.items()
                            if (c, k2, r2) == (chip, conc, r)
                            for rid, _ in cols.values()
                        ]
                        or [np.array([], dtype=np.int64)]
                    )
                )
                counts = (
                    rng.multinomial(len(ids), [1 / len(ids)] * len(ids), size=DRAWS) if len(ids) else None
                )
                per_round[r] = (ids, counts)
            self._draws[k] = (rounds, w, per_round)
        return self._draws[k]

    # -- one cell ----------------------------------------------------------------
    def replicates(self, metric: str, chip: str, arm: str, conc: int) -> np.ndarray | None:
        """The metric's value in each of the DRAWS resamples (NaN where a draw is empty)."""
        key = (metric, chip, arm, conc)
        if key not in self._reps:
            self._reps[key] = self._compute(metric, chip, arm, conc)
        return self._reps[key]

    def _compute(self, metric, chip, arm, conc) -> np.ndarray | None:
        rounds, w, per_round = self._draws_for(chip, conc)
        if not rounds:
            return None
        stats = np.full((DRAWS, len(rounds)), np.nan)
        for j, r in enumerate(rounds):
            run = self.runs.get((chip, arm, conc, r))
            if run is None or run.get(metric) is None:
                continue
            if metric in REQUEST_METRICS:
                stats[:, j] = self._request_stat(metric, (chip, arm, conc, r), per_round[r])
            else:
                stats[:, j] = run[metric]
        weights = np.where(np.isnan(stats), 0, w)
        total = weights.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(
                total > 0, (np.nan_to_num(stats) * weights).sum(axis=1) / np.maximum(total, 1), np.nan
            )
        return out

    def _request_stat(self, metric: str, run_key: tuple, draws: tuple) -> np.ndarray:
        column, how = REQUEST_METRICS[metric]
        ids_all, counts = draws
        ids, x = self.requests.get(run_key, {}).get(column, (np.array([], dtype=np.int64), np.array([])))
        x = np.asarray(x, dtype=float)
        keep = ~np.isnan(x)
        if counts is None or not keep.any():
            return np.full(DRAWS, np.nan)
        x = x[keep]
        c = counts[:, np.searchsorted(ids_all, np.asarray(ids)[keep])].astype(float)  # (B, n)
        total = c.sum(axis=1)
        if how == "mean":
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(total > 0, (c * x).sum(axis=1) / np.maximum(total, 1), np.nan)
        order = np.argsort(x, kind="stable")
        cw = np.cumsum(c[:, order], axis=1)
        idx = (cw < (how * total)[:, None]).sum(axis=1).clip(0, len(x) - 1)
        return np.where(total > 0, x[order][idx], np.nan)

    def rounds_of(self, metric: str, chip: str, arm: str, conc: int) -> list[float]:
        return [v[metric] for v in self._cells.get((chip, arm, conc), []) if v.get(metric) is not None]

    def estimate(self, metric: str, chip: str, arm: str, conc: int) -> Estimate:
        vals = self.rounds_of(metric, chip, arm, conc)
        if not vals:
            return NONE
        value = sum(vals) / len(vals)
        if len(vals) < 2 and metric not in REQUEST_METRICS:
            return Estimate(value, None, None, len(vals))
        return interval(value, self.replicates(metric, chip, arm, conc), len(vals))

    def compare(self, metric: str, chip: str, arm: str, base: str, conc: int, kind: str) -> Estimate:
        """arm over base (kind "ratio") or that minus 1 ("change"), paired draw by draw."""
        a, b = self.rounds_of(metric, chip, arm, conc), self.rounds_of(metric, chip, base, conc)
        if not a or not b or not sum(b):
            return NONE
        shift = 1.0 if kind == "change" else 0.0
        value = (sum(a) / len(a)) / (sum(b) / len(b)) - shift
        n = min(len(a), len(b))
        if n < 2 and metric not in REQUEST_METRICS:
            return Estimate(value, None, None, n)
        ra, rb = self.replicates(metric, chip, arm, conc), self.replicates(metric, chip, base, conc)
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = np.where(rb != 0, ra / rb, np.nan) - shift
        return interval(value, reps, n)

    def weighted(self, metric: str, chip: str, arm: str, shares: tuple) -> np.ndarray | None:
        """sum over (concurrency, share) of share x the cell's draws (a traffic profile)."""
        parts = [self.replicates(metric, chip, arm, c) for c, _ in shares]
        if any(p is None for p in parts):
            return None
        return sum(s * p for (_, s), p in zip(shares, parts))


def share_interval(key: tuple, counts: list[int], hits: list[int]) -> Estimate:
    """sum(hits) / sum(counts) over runs, with its 95% interval from resampling the runs
    (a share pooled over runs, such as the passes that drafted at one batch width)."""
    n, h = np.asarray(counts, dtype=float), np.asarray(hits, dtype=float)
    if not len(n) or n.sum() == 0:
        return NONE
    value = float(h.sum() / n.sum())
    if len(n) < 2:
        return Estimate(value, None, None, len(n))
    w = np.random.default_rng(_seed(*key)).multinomial(len(n), [1 / len(n)] * len(n), size=DRAWS)
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = (w * h).sum(axis=1) / (w * n).sum(axis=1)
    return interval(value, reps, len(n))


def interval(value: float, reps: np.ndarray | None, n_rounds: int) -> Estimate:
    if reps is None or not np.isfinite(reps).any():
        return Estimate(value, None, None, n_rounds)
    tail = (1 - LEVEL) / 2 * 100
    lo, hi = np.nanpercentile(reps, [tail, 100 - tail])
    lo, hi = _round12(float(lo)), _round12(float(hi))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return Estimate(value, None, None, n_rounds)
    return Estimate(value, min(lo, value), max(hi, value), n_rounds)


def includes(est: Estimate, point: float) -> bool | None:
    """Whether the interval includes `point`; None when there is no interval."""
    if est.lo is None or est.hi is None:
        return None
    return est.lo <= point <= est.hi
