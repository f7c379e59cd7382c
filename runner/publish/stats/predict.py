"""Predicted figures from the pass-cost model (`passcost.py`), fed by the query layer.

- `Models`: one experiment's fits as of a moment, one per chip pooled over its arms
  (`passcost.Fit`), each arm read through it (`passcost_arm.ArmFit`), cached; and the
  held-out check: an arm's concurrency left out of the fit and predicted. Two ways:
  `cell` leaves out that arm's runs there (other arms' passes at that width stay: a
  pass's cost is its shape's, whoever ran it), `width` leaves out every arm's runs at
  that concurrency (the stricter test, what predicting an unmeasured width asks).
- `predicted` / `crossover`: claimable values (`claims.Measured`). A width beyond the
  measured ceiling says "extrapolated"; an arm whose runs lack per-pass rows says
  "not measured by runtime X", as every per-pass figure does.
- A held-out prediction is "untestable" when the policy drafts at the left-out width but
  the rest of the fit has no drafting pass to price a draft, or no draft to accept.
The chart and the page's held-out lines are `prediction_chart.py`; `runner audit
--predict` prints `audit_lines`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from runner.publish.stats.passcost import MAX_WIDTH, Fit, Policy, crossing, interval_of
from runner.publish.stats.passcost_arm import ArmFit

WARN_ABOVE = 0.20  # a held-out error above this is shown with a warning, never silently
WIDTHS = tuple(range(1, MAX_WIDTH + 1))


class HeldOut(NamedTuple):
    concurrency: int
    predicted: float | None
    measured: float | None
    error: float | None  # predicted / measured - 1
    testable: bool


class Models:
    """Pass-cost fits of one experiment's runs (complete, started before `as_of`)."""

    def __init__(self, reader, experiment: str, quick: bool, as_of=None):
        self.key = (experiment, quick)
        self.runs = reader.passes.pass_runs(experiment, quick, as_of)
        self.loads = reader.passes.decode_loads(experiment, quick, as_of)
        self.policies = reader.passes.arm_policies(experiment, quick)
        self.runtimes = reader.passes.chip_arm_runtimes(experiment, quick)  # (chip, arm) -> runtime
        self._fits: dict[tuple, Fit | None] = {}

    def _policy(self, arm: str) -> Policy:
        p = self.policies.get(arm)
        if p is None:
            return Policy(False, "never")
        return Policy(p.mtp, p.draft_policy, p.mtp_sync, p.index_topk > 0, p.drafter)

    def pooled(self, chip: str, leave_out: tuple = ()) -> Fit | None:
        """The chip's fit over every arm; leave_out: ("cell", arm, c) or ("width", c)."""
        k = (chip, leave_out)
        if k not in self._fits:

            def out(r) -> bool:
                if leave_out[:1] == ("cell",):
                    return (r.arm, r.concurrency) == leave_out[1:]
                return leave_out[:1] == ("width",) and r.concurrency == leave_out[1]

            runs = [r for r in self.runs if r.chip_id == chip and not out(r)]
            loads = {(x.arm, x.concurrency, x.round): x for x in self.loads if x.chip_id == chip}
            policies = {a: self._policy(a) for a in {r.arm for r in runs}}
            draws = 0 if leave_out else None
            kw = {} if draws is None else {"draws": draws}
            self._fits[k] = Fit((*self.key, chip), runs, policies, loads, **kw) if runs else None
        return self._fits[k]

    def fit(self, chip: str, arm: str, leave_out: tuple = ()) -> ArmFit | None:
        f = self.pooled(chip, leave_out)
        return ArmFit(f, arm) if f is not None and arm in f.arms else None

    def concurrencies(self, chip: str, arm: str) -> tuple[int, ...]:
        return tuple(sorted({r.concurrency for r in self.runs if (r.chip_id, r.arm) == (chip, arm)}))

    def held_out(self, chip: str, arm: str, measured: dict[int, float], way: str = "cell") -> list[HeldOut]:
        """For each measured concurrency: the fit without it (`way`: "cell" or "width",
        see the module's docstring), its prediction there, the error."""
        out = []
        for c in self.concurrencies(chip, arm):
            fit = self.fit(chip, arm, ("cell", arm, c) if way == "cell" else ("width", c))
            if fit is None or c > MAX_WIDTH:
                out.append(HeldOut(c, None, measured.get(c), None, False))
                continue
            pred = float(fit.decode_tps()[0, c])
            meas = measured.get(c)
            err = None if not meas or not np.isfinite(pred) else pred / meas - 1
            out.append(HeldOut(c, pred, meas, err, not fit.policy.allows(c) or fit.knows_drafts()))
        return out


def gain_draws(models: Models, chip: str, arm: str, base: str) -> np.ndarray | None:
    """(DRAWS + 1, MAX_WIDTH + 1): the predicted decode gain of arm over base, paired."""
    a, b = models.fit(chip, arm), models.fit(chip, base)
    if a is None or b is None:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        return a.decode_tps() / b.decode_tps() - 1


class Crossover(NamedTuple):
    value: float | None
    lo: float | None
    hi: float | None


def predicted_crossover(models: Models, chip: str, arm: str, base: str) -> Crossover:
    g = gain_draws(models, chip, arm, base)
    if g is None:
        return Crossover(None, None, None)
    xs = crossing(g[:, 1:], WIDTHS)
    point = float(xs[0])
    if not np.isfinite(point):
        return Crossover(None, None, None)
    return Crossover(point, *interval_of(point, xs[1:], open_above=True))


def measured_crossover(view, chip: str, arm: str, base: str, concurrencies) -> Crossover:
    """Interpolated between the measured cells that bracket the sign change, with the
    interval `bounded_crossing` reads off the cells' 95% intervals (`intervals.py`)."""
    est = {c: view.compare("decode_tps", chip, arm, base, c, "change") for c in sorted(concurrencies)}
    cs = [c for c, e in est.items() if e.value is not None]
    return bounded_crossing(cs, *([getattr(est[c], f) for c in cs] for f in ("value", "lo", "hi")))


def bounded_crossing(xs, values, los, his) -> Crossover:
    """Where `values` (at ascending xs) cross zero, interpolated; its interval is where the
    curves of the bounds cross. A side whose bound curve never crosses inside xs is open:
    -inf when the bound nearer level is already past it at the first x, +inf when the
    farther one has not got there by the last (the claim says "beyond the measured range")."""
    if len(xs) < 2:
        return Crossover(None, None, None)
    x0 = float(crossing(np.array([values], dtype=float), xs)[0])
    if not np.isfinite(x0):
        return Crossover(None, None, None)
    if any(b is None for b in [*los, *his]):
        return Crossover(x0, None, None)
    start = np.sign(values[0])
    lo, hi = np.array([los], dtype=float), np.array([his], dtype=float)
    near, far = (lo, hi) if start > 0 else (hi, lo)
    first = -np.inf if np.sign(near[0, 0]) != start else float(crossing(near, xs)[0])
    last = float(crossing(far, xs)[0])
    first, last = (x0 if np.isnan(first) else first), (np.inf if np.isnan(last) else last)
    return Crossover(x0, float(min(first, x0)), float(max(last, x0)))


def audit_lines(reader, experiment: str) -> tuple[list[str], bool]:
    """`runner audit --predict NAME`: per chip and arm, the fit and its held-out errors
    (`cell`, and in brackets `width`). Returns the lines and whether any testable `cell`
    held-out error exceeds WARN_ABOVE (the page's warning)."""
    from runner.publish.stats.views import View

    quick = reader.quick_choice(experiment)
    if quick is None:
        return [f"runner audit --predict: experiment {experiment!r} has no complete runs"], True
    chips = {c.chip_id: f"{c.name} ({c.chip_id[:8]})" for c in reader.chips(experiment, quick)}
    view = View(reader, experiment, quick, None)
    models = Models(reader, experiment, quick)
    lines = [
        f"== {experiment}: decode per sequence, held out (fit without the arm's runs at that "
        "concurrency; in brackets: without every arm's)"
    ]
    bad, worst = False, {"cell": 0.0, "width": 0.0}
    for chip, name in chips.items():
        for arm in sorted(models.policies):
            fit = models.fit(chip, arm)
            if fit is None:
                rt = models.runtimes.get((chip, arm))
                why = (
                    f"not measured by runtime {rt} (no per-pass rows)" if rt else "not measured on this chip"
                )
                lines.append(f"  {name} {arm}: {why}")
                continue
            lines.append(
                f"  {name} {arm}: terms {', '.join(fit.terms)}, pooled over {len(fit.fit.arms)} arms; "
                f"pass-time error (median) {fit.mape:.1%}"
            )
            measured = {
                c: view.cells[(chip, arm, c, "decode_tps")].mean
                for c in models.concurrencies(chip, arm)
                if (chip, arm, c, "decode_tps") in view.cells
            }
            strict = {h.concurrency: h for h in models.held_out(chip, arm, measured, way="width")}
            for h in models.held_out(chip, arm, measured):
                if h.error is None:
                    lines.append(f"    concurrency {h.concurrency}: not predicted")
                    continue
                flag = "" if h.testable else "  untestable: the rest of the fit has no drafts"
                if h.testable and abs(h.error) > WARN_ABOVE:
                    bad, flag = True, f"  WARNING: above {WARN_ABOVE:.0%}"
                worst["cell"] = max(worst["cell"], abs(h.error)) if h.testable else worst["cell"]
                w = strict.get(h.concurrency)
                also = ""
                if w is not None and w.error is not None:
                    also = f" ({w.error:+.1%}{'' if w.testable else ', untestable'})"
                    worst["width"] = max(worst["width"], abs(w.error)) if w.testable else worst["width"]
                lines.append(
                    f"    concurrency {h.concurrency}: predicted {h.predicted:.1f} tok/s, measured "
                    f"{h.measured:.1f}, error {h.error:+.1%}{also}{flag}"
                )
    lines.append(
        f"runner audit --predict: largest testable held-out error {worst['cell']:.1%} "
        f"(every arm's concurrency left out: {worst['width']:.1%})"
    )
    return lines, bad
