"""Small helpers for benchmark tables: spread of repeated figures and of paired ratios."""

from __future__ import annotations

import os
import statistics


def spread(values: list[float]) -> str:
    """'median [min, max]' of repeated measurements."""
    return f"{statistics.median(values):8.1f} [{min(values):.1f}, {max(values):.1f}]"


def ratio_spread(num: list[float], den: list[float]) -> str:
    """Per-round ratios (rounds are paired: measured back to back), as median [min, max]."""
    r = [a / b for a, b in zip(num, den)]
    return f"{statistics.median(r):5.2f}x [{min(r):.2f}, {max(r):.2f}]"


def ratio_deciles(num: list[float], den: list[float]) -> str:
    """Paired ratios of many pairs, as 'median [p10, p90]'."""
    r = sorted(a / b for a, b in zip(num, den))
    tenth = len(r) // 10
    return f"{statistics.median(r):.3f}x [{r[tenth]:.3f}, {r[-1 - tenth]:.3f}]"


def machine_line() -> str:
    """The chip fingerprint the runner records, as one line (same fields, same BLAS probe)."""
    from ..experiments.chip import fingerprint

    fp = fingerprint()
    return (
        f"machine: {fp['name']}, {fp['cores']} cores, {fp['os']}, mlx {fp['mlx_version']}, "
        f"device {fp['device']}, BLAS {fp['blas']}, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}"
    )
