"""Capacity under an SLO: the largest offered rate of a rate sweep at which at least a
share of requests met the declared SLO, with a bootstrap interval.

- Attainment at a rate: the share of the cell's requests (over its rounds) whose TTFT and
  TPOT both met the run's declared limits (`sql.SLO_MET_SQL`).
- Capacity: walking up the swept rates, the point where attainment first falls below the
  target, interpolated linearly between the last rate that met it and the first that did
  not. When the lowest rate already misses, capacity is below the sweep (no value); when
  every rate meets it, capacity is "at least the top rate" (a lower bound, never a number
  the data cannot support).
- Interval: B seeded draws resample, at every rate alike, the rounds and inside each the
  requests with replacement (as intervals.py does), and recompute capacity; a draw in
  which nothing breaks counts as the top rate. The interval is the 2.5th and 97.5th
  percentiles, widened to hold the point value.
This module computes; it neither queries nor renders.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

DRAWS = 2000


@dataclass(frozen=True, slots=True)
class Capacity:
    value: float | None  # requests per second; None: below the sweep or no data
    lo: float | None
    hi: float | None
    at_least: bool  # the SLO held at every swept rate: value is the top rate, a lower bound
    below: bool  # the SLO failed already at the lowest rate
    rates: tuple[float, ...]
    attainment: tuple[float, ...]  # the point share at each rate


def crossing(rates, shares, target: float) -> tuple[float | None, bool, bool]:
    """(capacity, at_least, below) from attainment per rate (ascending rates)."""
    for k, share in enumerate(shares):
        if share < target:
            if k == 0:
                return None, False, True
            r0, r1, a0, a1 = rates[k - 1], rates[k], shares[k - 1], share
            return r0 + (r1 - r0) * (a0 - target) / (a0 - a1), False, False
    return rates[-1], True, False


def declares_slo(met: dict[float, dict[int, np.ndarray]]) -> bool:
    """Whether a cell's runs declared an SLO (SLO_MET_SQL gives NaN entries when not)."""
    return not any(v.size and np.isnan(v[0]) for rounds in met.values() for v in rounds.values())


def capacity(met: dict[float, dict[int, np.ndarray]], target: float, key: str) -> Capacity:
    """met: rate -> round -> a 0/1 array, one entry a request (in request-id order);
    key: what seeds the draws (experiment, chip, concurrency), so every arm draws alike."""
    rates = tuple(sorted(met))
    if not rates:
        return Capacity(None, None, None, False, False, (), ())
    shares = tuple(float(np.mean(np.concatenate(list(met[r].values())))) for r in rates)
    value, at_least, below = crossing(rates, shares, target)
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big"))
    rounds = sorted({k for r in rates for k in met[r]})
    draws = np.empty(DRAWS)
    for b in range(DRAWS):
        picked = rng.choice(rounds, size=len(rounds), replace=True)
        draw_shares = []
        for r in rates:
            parts = []
            for k in picked:
                x = met[r].get(int(k))
                if x is not None and len(x):
                    parts.append(x[rng.integers(0, len(x), len(x))])
            draw_shares.append(float(np.mean(np.concatenate(parts))) if parts else np.nan)
        v, _, low = crossing(rates, draw_shares, target)
        draws[b] = np.nan if low or v is None else v
    kept = draws[~np.isnan(draws)]
    if value is None or not len(kept):
        return Capacity(value, None, None, at_least, below, rates, shares)
    lo, hi = (float(x) for x in np.percentile(kept, [2.5, 97.5]))
    return Capacity(value, min(lo, value), max(hi, value), at_least, below, rates, shares)
