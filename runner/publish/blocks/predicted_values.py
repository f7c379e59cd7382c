"""The claimable predicted values of a post: `predicted(...)` and `crossover(...)`.

- Both read the pass-cost fits (`predict.Models`) of the data as of the claim's day,
  cached per post beside its views, and hand back `claims.Measured` values the audit
  judges like any other: the stated figure against the value and its 95% interval.
- `predicted("decode_tps", arm, concurrency)` is tok/s per sequence; with `base=` it is
  the gain over the base. Beyond the measured ceiling the description says "extrapolated".
- `crossover(arm, base)`: the width where the gain crosses zero, predicted; with
  `measured=True`, interpolated between the measured cells that bracket it. A side of
  the interval is open ("> 4": beyond the measured widths, or "> 16" predicted) where
  the cells' bounds, or more than the tail of the resamples, never cross.
- An arm whose runs lack per-pass rows gives "not measured by runtime X".
"""

from __future__ import annotations

from runner.publish.blocks.postdata import PostData
from runner.publish.stats.claims import Measured
from runner.publish.stats.passcost import MAX_WIDTH, interval_of
from runner.publish.stats.predict import Models, gain_draws, measured_crossover, predicted_crossover

PREDICTED_METRICS = ("decode_tps",)


def models_for(data: PostData, cutoff) -> Models:
    """One Models per (experiment, quickness, cutoff), kept on the post's ViewCache so the
    claims-on-every-chip renderings and the chart share the fits."""
    cache = data.views.__dict__.setdefault("pass_cost_models", {})
    key = (data.experiment, data.quick, cutoff)
    if key not in cache:
        cache[key] = Models(data.reader, data.experiment, data.quick, cutoff)
    return cache[key]


def _none(data: PostData, kind: str, what: str, reason: str | None) -> Measured:
    m = data.values.measured(None, None, None, 0, kind, what, "decode_tps", set())
    if reason:
        data.state.remember(m, missing=reason)
    return m


def no_passes(data: PostData, models: Models, chip_id: str, *arms: str) -> str | None:
    """Why an arm has no fit on this chip: its runs there have no per-pass rows (a server
    runtime), or it has no runs there at all."""
    for arm in arms:
        if models.fit(chip_id, arm) is None:
            runtime = models.runtimes.get((chip_id, arm))
            return f"not measured by runtime {runtime}" if runtime else "not measured on this chip"
    return None


def predicted(data: PostData, metric, arm, concurrency, base=None, chip=None, as_of=None) -> Measured:
    chip_id, cutoff = data.chip_for(chip), data.cutoff(as_of)
    kind = "value" if base is None else "change"
    c = int(concurrency)
    ceiling = data.regimes.ceiling
    extra = f", extrapolated beyond the measured ceiling {ceiling}" if c > ceiling else ""
    vs = "" if base is None else f" vs {base}"
    what = (
        f"{metric} of {arm}{vs} at concurrency {c} on {data.label_of(chip_id, chip, cutoff)}, "
        f"predicted by the pass-cost model{extra}"
    )
    if metric not in PREDICTED_METRICS:
        data.fail(f"predicted(): the pass-cost model predicts {', '.join(PREDICTED_METRICS)}, not {metric!r}")
        return _none(data, kind, what, None)
    if not 1 <= c <= MAX_WIDTH:
        data.fail(f"predicted(): concurrency must be 1 to {MAX_WIDTH}, got {concurrency!r}")
        return _none(data, kind, what, None)
    arms = (arm,) if base is None else (arm, base)
    if not all(data.arm_ok(a) for a in arms) or chip_id is None:
        return _none(data, kind, what, None)
    models = models_for(data, cutoff)
    if base is None:
        fit = models.fit(chip_id, arm)
        draws = None if fit is None else fit.decode_tps()[:, c]
    else:
        g = gain_draws(models, chip_id, arm, base)
        draws = None if g is None else g[:, c]
    if draws is None:
        return _none(data, kind, what, no_passes(data, models, chip_id, *arms))
    point = float(draws[0])
    lo, hi = interval_of(point, draws[1:])
    n = min(f.n_runs for f in (models.fit(chip_id, a) for a in arms))
    return data.values.measured(point, lo, hi, n, kind, what, "decode_tps", set())


def crossover(data: PostData, arm, base=None, measured=False, chip=None, as_of=None) -> Measured:
    base = data.base if base is None else base
    chip_id, cutoff = data.chip_for(chip), data.cutoff(as_of)
    how = "interpolated between the measured cells" if measured else "predicted by the pass-cost model"
    what = (
        f"width where decode_tps of {arm} vs {base} crosses level on "
        f"{data.label_of(chip_id, chip, cutoff)}, {how}"
    )
    if not (data.arm_ok(arm) and data.arm_ok(base)) or chip_id is None:
        return _none(data, "value", what, None)
    if measured:
        view = data.values.view(None, cutoff=cutoff)
        concs = sorted({k for (c, a, k) in view.measured if c == chip_id and a == arm})
        x = measured_crossover(view, chip_id, arm, base, concs)
        reason = "the measured cells do not bracket a crossover"
        span = (float(min(concs)), float(max(concs))) if concs else None
        n = len(concs)
    else:
        models = models_for(data, cutoff)
        x = predicted_crossover(models, chip_id, arm, base)
        reason = f"the predicted gain does not cross level up to width {MAX_WIDTH}"
        span = (1.0, float(MAX_WIDTH))
        fits = [models.fit(chip_id, a) for a in (arm, base)]
        n = min((f.n_runs for f in fits if f is not None), default=0)
    if x.value is None:
        if not measured:
            reason = no_passes(data, models, chip_id, arm, base) or reason
        return _none(data, "value", what, reason)
    if x.value > data.regimes.ceiling:
        what += f", extrapolated beyond the measured ceiling {data.regimes.ceiling}"
    return data.values.measured(x.value, x.lo, x.hi, n, "value", what, "", set(), span)
