"""`runner audit --capacity NAME [--attainment A]`: every arm's capacity under the declared
SLO on each chip and concurrency of a rate sweep, with its interval and the attainment at
each swept rate, for an experiment no post cites yet.

The figures are capacity.py's, seeded as `capacity(...)` in a post seeds them (experiment,
chip, concurrency), so a post's claim on the newest data reads the same number. Requests
that came back shorter than asked, or errored, are counted beside the cell, as the page's
tables count them (shortfall.py says what that does to a claim).
This module reads through `queries.Reader` and formats text; it writes nothing.
"""

from __future__ import annotations

from runner.publish.stats.capacity import capacity, declares_slo


def _rate(r: float) -> str:
    return f"{r:g} req/s"


def audit_lines(reader, experiment: str, attainment: float = 0.9) -> tuple[list[str], bool]:
    """The lines to print, and whether any capacity could be computed (False: not a sweep
    with an SLO, or no complete runs)."""
    quick = reader.quick_choice(experiment)
    if quick is None:
        return [f"runner audit --capacity: experiment {experiment!r} has no complete runs"], False
    sweep = reader.sweeps.slo_met(experiment, quick)
    if not sweep:
        return [
            f"runner audit --capacity: {experiment!r} is not a rate sweep (arrivals.rate must be a list)"
        ], False
    if not all(declares_slo(cell) for cell in sweep.values()):
        return [f"runner audit --capacity: {experiment!r} declares no SLO ([workload.slo])"], False
    names = {c.chip_id: f"{c.name} ({c.chip_id[:8]})" for c in reader.chips(experiment, quick)}
    short = reader.sweeps.short_cells(experiment, quick)
    lines = [
        f"== {experiment}: capacity at {attainment:.0%} SLO attainment (newest complete run of each cell; "
        "95% interval over rounds and requests)"
    ]
    for chip, arm, conc in sorted(sweep):
        cap = capacity(sweep[(chip, arm, conc)], attainment, f"{experiment}\n{chip}\n{conc}")
        if cap.at_least:
            figure = f"at least the top rate, {_rate(cap.rates[-1])} (the SLO held at every swept rate)"
        elif cap.below:
            figure = f"below the lowest rate swept, {_rate(cap.rates[0])}"
        else:
            figure = f"{cap.value:.3g} req/s, 95% [{cap.lo:.3g} to {cap.hi:.3g}]"
        lines.append(f"  {names.get(chip, chip)} {arm} concurrency {conc}: capacity {figure}")
        lines.append(
            "    attainment by rate: "
            + ", ".join(f"{_rate(r)} {s:.0%}" for r, s in zip(cap.rates, cap.attainment))
        )
        bad = short.get((chip, arm, conc))
        if bad is not None and bad.short:
            lines.append(
                f"    {bad.short} of {bad.requests} requests came back shorter than asked: a claim on this "
                "cell fails unless workload.allow_short = true"
            )
        if bad is not None and bad.errored:
            lines.append(f"    {bad.errored} of {bad.requests} requests errored: a claim on this cell fails")
    return lines, True
