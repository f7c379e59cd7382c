"""Student's t distribution at whole degrees of freedom: the two-sided critical value for
any confidence, which a sequential design needs (95% spent over several looks is a wider
interval at each look than a fixed design's 95%).

- The probability mass of |T| < t has a closed form at whole df: a finite series in
  theta = atan(t / sqrt(df)) (odd and even df differ); the critical value is found by
  bisection on it, to 1e-10 in t.
- Pure functions of numbers; no randomness, no tables beyond what the series computes.
"""

from __future__ import annotations

import math


def central_mass(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with `df` (a whole number >= 1) degrees of freedom."""
    if t <= 0:
        return 0.0
    theta = math.atan(t / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...))
        if df == 1:
            return 2 * theta / math.pi
        term, total = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= (2 * k) / (2 * k + 1) * c * c
            total += term
        return 2 / math.pi * (theta + s * c * total)
    term, total = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
    for k in range(1, df // 2):
        term *= (2 * k - 1) / (2 * k) * c * c
        total += term
    return s * total


def two_sided_critical(confidence: float, df: int) -> float:
    """t such that P(|T| < t) = confidence (0 < confidence < 1)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    lo, hi = 0.0, 1.0
    while central_mass(hi, df) < confidence:
        hi *= 2
    while hi - lo > 1e-10 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if central_mass(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2
