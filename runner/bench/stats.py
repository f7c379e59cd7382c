"""Small helpers for benchmark tables: spread of repeated figures and of paired ratios."""
from __future__ import annotations

import statistics


def spread(values: list[float]) -> str:
    """'median [min, max]' of repeated measurements."""
    return f"{statistics.median(values):8.1f} [{min(values):.1f}, {max(values):.1f}]"


def ratio_spread(num: list[float], den: list[float]) -> str:
    """Per-round ratios (rounds are paired: measured back to back), as median [min, max]."""
    r = [a / b for a, b in zip(num, den)]
    return f"{statistics.median(r):5.2f}x [{min(r):.2f}, {max(r):.2f}]"


def machine_line() -> str:
    import os
    import platform

    import mlx.core as mx
    blas = "unknown"
    try:
        with open("/proc/self/maps") as f:
            libs = {l.split()[-1].rsplit("/", 1)[-1] for l in f if "blas" in l.lower()}
        blas = ", ".join(sorted(libs)) or "none loaded"
    except OSError:
        pass
    return (f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.platform()}, mlx {mx.__version__}, device {mx.default_device()}, BLAS {blas}")
