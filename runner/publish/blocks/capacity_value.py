"""`capacity(arm=..., attainment=0.9)` in a post body: the capacity.py figure of one arm's
rate sweep, as a claimable value (requests per second, with its interval).

The value reads the judging view (the home chip's data as of the post's date). At the
experiment's largest concurrency unless `concurrency=` names another. When the SLO held at
every swept rate there is no number to claim: the value is absent (it reads "at least"
the top rate on the page), and a claim on it fails saying so; likewise when the SLO failed
already at the lowest rate. This module reads through PostData and queries.Reader; it renders nothing.
"""

from __future__ import annotations

from runner.publish.stats.capacity import capacity as compute
from runner.publish.stats.capacity import declares_slo
from runner.publish.stats.claims import Measured


def capacity_value(
    data, arm: str, attainment: float = 0.9, concurrency=None, chip=None, as_of=None
) -> Measured:
    chip_id, cutoff = data.chip_for(chip), data.cutoff(as_of)
    where = data.label_of(chip_id, chip, cutoff)
    sweep = data.reader.sweeps.slo_met(data.experiment, data.quick, cutoff) if chip_id else {}
    concs = sorted({c for (k, a, c) in sweep if k == chip_id and a == arm})
    conc = int(concurrency) if concurrency is not None else (concs[-1] if concs else None)
    what = f"capacity of {arm} at {attainment:.0%} SLO attainment, concurrency {conc}, on {where}"

    def absent(reason: str, bound: str = "") -> Measured:
        m = Measured(None, None, None, 0, "value", what, 2, "req/s", bound=bound)
        data.state.remember(m, missing=reason)
        return m

    if not isinstance(attainment, (int, float)) or not 0 < attainment <= 1:
        data.fail(f"capacity: attainment is a share in (0, 1], got {attainment!r}")
        return absent("attainment is not a share")
    if not data.arm_ok(arm) or chip_id is None:
        return absent("no data behind this claim")
    met = sweep.get((chip_id, arm, conc))
    if not met:
        return absent(f"no rate sweep of arm {arm} at concurrency {conc} (arrivals.rate must be a list)")
    if not declares_slo(met):
        return absent("the experiment declares no SLO ([workload.slo])")
    cap = compute(met, float(attainment), f"{data.experiment}\n{chip_id}\n{conc}")
    top = f"{cap.rates[-1]:g} req/s"
    if cap.at_least:
        return absent(
            f"the SLO held at every swept rate: capacity is at least the top rate, {top}", f"at least {top}"
        )
    if cap.below:
        low = f"{cap.rates[0]:g} req/s"
        return absent(
            f"the SLO failed already at the lowest rate, {low}", f"below the lowest rate swept, {low}"
        )
    n_rounds = max(len(r) for r in met.values())
    m = Measured(cap.value, cap.lo, cap.hi, n_rounds, "value", what, 2, "req/s")
    data.state.remember(m, cells={(data.experiment, chip_id, arm, conc)})
    return m
