"""Any percentile of a latency metric, chosen by the post: `metric("ttft", arm=..., q=0.95)`.

- The latency metrics are per-request TTFT, TPOT and end-to-end latency and the
  inter-token gaps (ITL); pages otherwise show their fixed p50/p90/p99.
- A run's value is the q-quantile of its requests' values, linearly interpolated as
  DuckDB's quantile_cont is (numpy's default), set on the view's runs under the name
  `<metric>_q<q>_ms`; the cell's value is the mean over rounds and its interval that of
  every percentile (intervals.py: the rounds' t interval, its upper bound raised to the
  pooled requests' order statistic).
This module computes from a View's per-request values; it neither queries nor renders.
"""

from __future__ import annotations

import numpy as np

from runner.publish.metrics import LATENCY_COLUMNS as COLUMNS
from runner.publish.stats.claims import Measured
from runner.publish.stats.rate_views import value_rate


def base_of(name: object) -> str | None:
    """'ttft', 'ttft_ms' or 'ttft_p90_ms' -> 'ttft'; None for a non-latency metric."""
    head = str(name).split("_")[0]
    return head if head in COLUMNS else None


def register(view, base: str, q: float) -> str:
    """The quantile's metric name, its run values set on the view's runs (once)."""
    name = f"{base}_q{q:g}_ms"
    for key, run in view.runs.items():
        if name in run:
            continue
        ids, x = view.requests.get(key, {}).get(COLUMNS[base], (None, np.array([])))
        x = np.asarray(x, dtype=float)
        x = x[~np.isnan(x)]
        run[name] = float(np.quantile(x, q)) if len(x) else None
    return name


def quantile_metric(
    data, name, arm, concurrency, q, chip=None, requests=None, as_of=None, rate=None
) -> Measured:
    base = base_of(name)
    chip_id, cutoff = data.chip_for(chip), data.cutoff(as_of)
    ok = isinstance(q, (int, float)) and not isinstance(q, bool) and 0 < q < 1
    rate_ok, rate = value_rate(data, rate, f"metric {name!r}")
    at = "" if rate is None else f" and {rate:g} req/s offered"
    what = f"p{q * 100:g} of {base or name} of {arm} at concurrency {concurrency}{at} on " + data.label_of(
        chip_id, chip, cutoff
    )
    spec = f"{base}_p50_ms" if base else ""
    if base is None:
        data.fail(f"metric {name!r} with q=: q= takes a latency metric ({', '.join(COLUMNS)})")
    elif not ok:
        data.fail(f"metric {name!r}: q= is a quantile in (0, 1), e.g. q=0.95, got {q!r}")
    if base is None or not ok or not rate_ok or not data.arm_ok(arm) or chip_id is None:
        return data.values.measured(None, None, None, 0, "value", what, spec, set())
    view = data.values.view(requests, cutoff=cutoff, rate=rate)
    metric = register(view, base, float(q))
    e = view.intervals.estimate(metric, chip_id, arm, int(concurrency))
    cells = {(chip_id, arm, int(concurrency))} if e.value is not None else set()
    return data.values.measured(e.value, e.lo, e.hi, e.n_rounds, "value", what, spec, cells)
