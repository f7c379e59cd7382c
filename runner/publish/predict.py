"""Predicted figures from the pass-cost model (`passcost.py`), fed by the query layer.

- `Models`: one experiment's fits as of a moment, per (chip, arm), cached, and the
  held-out check: fit on every concurrency but one, predict the one left out.
- `predicted` / `crossover`: claimable values (`claims.Measured`). A width beyond the
  measured ceiling says "extrapolated"; an arm whose runs lack per-pass rows says
  "not measured by runtime X", as every per-pass figure does.
- A held-out prediction is "untestable" when the policy drafts at the left-out width but
  the other concurrencies hardly draft (under MIN_OWN_VARIATION of their decode rows, as
  `solo` without concurrency 1): the fit then knows nothing of what a draft costs, and
  its error says nothing about the model.
The chart and the page's held-out lines are `prediction_chart.py`; `runner audit
--predict` prints `audit_lines`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from runner.publish.passcost import MAX_WIDTH, MIN_OWN_VARIATION, Fit, Policy, crossing, interval_of

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
        self.runs = reader.pass_runs(experiment, quick, as_of)
        self.loads = reader.decode_loads(experiment, quick, as_of)
        self.policies = reader.arm_policies(experiment, quick)
        self.runtimes = reader.chip_arm_runtimes(experiment, quick)  # (chip, arm) -> runtime
        self._fits: dict[tuple, Fit | None] = {}

    def fit(self, chip: str, arm: str, without: int | None = None) -> Fit | None:
        k = (chip, arm, without)
        if k not in self._fits:
            runs = [r for r in self.runs if (r.chip_id, r.arm) == (chip, arm) and r.concurrency != without]
            loads = {(x.concurrency, x.round): x for x in self.loads if (x.chip_id, x.arm) == (chip, arm)}
            pol = self.policies.get(arm)
            policy = Policy(bool(pol and pol.mtp), pol.draft_policy if pol else "never")
            self._fits[k] = Fit((*self.key, chip), runs, policy, loads) if runs else None
        return self._fits[k]

    def concurrencies(self, chip: str, arm: str) -> tuple[int, ...]:
        return tuple(sorted({r.concurrency for r in self.runs if (r.chip_id, r.arm) == (chip, arm)}))

    def held_out(self, chip: str, arm: str, measured: dict[int, float]) -> list[HeldOut]:
        """For each measured concurrency: the fit without it, its prediction there, the error."""
        out = []
        for c in self.concurrencies(chip, arm):
            fit = self.fit(chip, arm, without=c)
            if fit is None or c > MAX_WIDTH:
                out.append(HeldOut(c, None, measured.get(c), None, False))
                continue
            pred = float(fit.decode_tps()[0, c])
            meas = measured.get(c)
            err = None if not meas or not np.isfinite(pred) else pred / meas - 1
            testable = not fit.policy.allows(c) or fit.drafted_share() >= MIN_OWN_VARIATION
            out.append(HeldOut(c, pred, meas, err, testable))
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
    return Crossover(point, *interval_of(point, xs[1:]))


def measured_crossover(view, chip: str, arm: str, base: str, concurrencies) -> Crossover:
    """Interpolated between the measured cells that bracket the sign change; its interval
    is where the curves of the cells' interval bounds (`intervals.py`) cross zero, open
    (None) on a side whose bound curve never does."""
    est = {c: view.compare("decode_tps", chip, arm, base, c, "change") for c in sorted(concurrencies)}
    cs = [c for c, e in est.items() if e.value is not None]
    if len(cs) < 2:
        return Crossover(None, None, None)
    x0 = float(crossing(np.array([[est[c].value for c in cs]]), cs)[0])
    if not np.isfinite(x0):
        return Crossover(None, None, None)
    nan = float("nan")
    bounds = np.array(
        [
            [nan if est[c].lo is None else est[c].lo for c in cs],
            [nan if est[c].hi is None else est[c].hi for c in cs],
        ]
    )
    ends = [float(x) for x in crossing(bounds, cs) if np.isfinite(x)]
    if len(ends) < 2:
        return Crossover(x0, None, None)
    return Crossover(x0, min(ends + [x0]), max(ends + [x0]))


def audit_lines(reader, experiment: str) -> tuple[list[str], bool]:
    """`runner audit --predict NAME`: per chip and arm, the fit and its held-out errors.
    Returns the lines and whether any testable held-out error exceeds WARN_ABOVE."""
    from runner.publish.views import View

    quick = reader.quick_choice(experiment)
    if quick is None:
        return [f"runner audit --predict: experiment {experiment!r} has no complete runs"], True
    chips = {c.chip_id: c.name for c in reader.chips(experiment, quick)}
    view = View(reader, experiment, quick, None)
    models = Models(reader, experiment, quick)
    lines, bad, worst = (
        [f"== {experiment}: decode per sequence, held out (fit on the other concurrencies)"],
        False,
        0.0,
    )
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
                f"  {name} {arm}: terms {', '.join(fit.terms)}; pass-time error (median) {fit.mape:.1%}"
            )
            measured = {
                c: view.cells[(chip, arm, c, "decode_tps")].mean
                for c in models.concurrencies(chip, arm)
                if (chip, arm, c, "decode_tps") in view.cells
            }
            for h in models.held_out(chip, arm, measured):
                if h.error is None:
                    lines.append(f"    concurrency {h.concurrency}: not predicted")
                    continue
                flag = "" if h.testable else "  untestable: the other concurrencies hardly draft"
                if h.testable and abs(h.error) > WARN_ABOVE:
                    bad, flag = True, f"  WARNING: above {WARN_ABOVE:.0%}"
                worst = max(worst, abs(h.error)) if h.testable else worst
                lines.append(
                    f"    concurrency {h.concurrency}: predicted {h.predicted:.1f} tok/s, measured "
                    f"{h.measured:.1f}, error {h.error:+.1%}{flag}"
                )
    lines.append(f"runner audit --predict: largest testable held-out error {worst:.1%}")
    return lines, bad
