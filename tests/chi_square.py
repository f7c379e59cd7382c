"""A two-sample chi-square test the sampling tests share."""

from __future__ import annotations

import math
from collections import Counter


def chi_square_p(a: Counter, b: Counter) -> tuple[float, int]:
    """Two-sample chi-square (homogeneity) p-value over the categories with enough counts,
    the rest pooled; the chi-square tail by the Wilson-Hilferty normal approximation."""
    na, nb = sum(a.values()), sum(b.values())
    cats = [c for c in set(a) | set(b) if a[c] + b[c] >= 10]
    rows = [(a[c], b[c]) for c in cats]
    rest = (na - sum(x for x, _ in rows), nb - sum(y for _, y in rows))
    if sum(rest):
        rows.append(rest)
    stat = 0.0
    for x, y in rows:
        tot = x + y
        for obs, n in ((x, na), (y, nb)):
            exp = tot * n / (na + nb)
            stat += (obs - exp) ** 2 / exp
    df = len(rows) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2)), df
