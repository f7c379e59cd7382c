"""The A/A check: an arm measured against an identical copy of itself (`runner run NAME
--aa ARM` stores experiment NAME-aa with arms ARM and ARM-aa). For every repetition of
the measurement, every concurrency and every metric, the 95% interval of the copy's
change over the arm should include no change about 95% of the time; far less means the
intervals are too narrow for this machine's noise.

A repetition is one complete pass over the cells (each `runner run NAME --aa ARM
--remeasure` adds one): repetition k is the data as of the start of repetition k + 1,
read through the same views (`views.py`) and the same intervals the posts use.
With `[workload] aa = true` the copy is an arm of the experiment itself: `coverage` is
then what a post's provenance shows per chip and metric, and a metric below COVERAGE_FLOOR
on a chip asks its directional claims there to clear the largest A/A change (`margin`).
This module reads through `queries.Reader` and formats text; it writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runner.publish import queries
from runner.publish.metrics import METRICS
from runner.publish.views import ViewCache

COPY_SUFFIX = "-aa"
COVERAGE_FLOOR = 0.8


@dataclass(frozen=True, slots=True)
class Coverage:
    """One metric's A/A cells on one chip: how many include no change, and the largest change."""

    metric: str
    covered: int
    cells: int
    largest: float

    @property
    def low(self) -> bool:
        return self.covered < COVERAGE_FLOOR * self.cells

    @property
    def margin(self) -> float:
        """What a directional claim's interval must clear on this chip (0: nothing more)."""
        return abs(self.largest) if self.low else 0.0

    def text(self) -> str:
        line = f"{self.metric} {self.covered} of {self.cells} cells include no change"
        if self.low:
            line += (
                f" (below {COVERAGE_FLOOR:.0%}: a direction needs more than \u00b1{abs(self.largest):.1%})"
            )
        return line


@dataclass(frozen=True, slots=True)
class Cell:
    repetition: int
    chip: str
    concurrency: int
    metric: str
    change: float
    lo: float
    hi: float

    @property
    def covers(self) -> bool:
        return self.lo <= 0.0 <= self.hi


def copied_arm(reader: queries.Reader, experiment: str, quick: bool = False) -> str | None:
    """The arm whose copy the experiment measured, if any."""
    arms = sorted({cell.arm for cell in reader.layout(experiment, quick)})
    return next((a for a in arms if f"{a}{COPY_SUFFIX}" in arms), None)


def coverage(reader: queries.Reader, experiment: str, quick: bool = False) -> dict[str, list[Coverage]]:
    """chip_id -> each metric's A/A coverage on it ({} without a copied arm)."""
    if copied_arm(reader, experiment, quick) is None:
        return {}
    _, cells = aa_cells(reader, experiment, quick)
    out: dict[str, list[Coverage]] = {}
    for chip in sorted({c.chip for c in cells}):
        for metric in METRICS:
            mine = [c for c in cells if (c.chip, c.metric) == (chip, metric)]
            if mine:
                worst = max(mine, key=lambda c: abs(c.change))
                out.setdefault(chip, []).append(
                    Coverage(metric, sum(c.covers for c in mine), len(mine), worst.change)
                )
    return out


def aa_cells(reader: queries.Reader, experiment: str, quick: bool = False) -> tuple[str, list[Cell]]:
    """The arm measured against its copy, and every (repetition, chip, concurrency,
    metric) cell with an interval."""
    arms = sorted({cell.arm for cell in reader.layout(experiment, quick)})
    base = copied_arm(reader, experiment, quick)
    if base is None:
        raise queries.QueryError(
            f"experiment {experiment!r} has no arm with its {COPY_SUFFIX} copy "
            f"(arms: {', '.join(arms) or 'none'}); measure it with runner run NAME --aa ARM"
        )
    starts = reader.repetition_starts(experiment, base)
    cutoffs: list[datetime | None] = [*starts[1:], None]
    views = ViewCache(reader)
    cells = []
    for k, as_of in enumerate(cutoffs):
        view = views.get(experiment, quick, as_of)
        for chip in view.chip_ids:
            for conc in sorted({c for (ch, _, c, _) in view.runs if ch == chip}):
                for metric in METRICS:
                    e = view.compare(metric, chip, f"{base}{COPY_SUFFIX}", base, conc, "change")
                    if e.value is not None and e.lo is not None:
                        cells.append(Cell(k, chip, conc, metric, e.value, e.lo, e.hi))
    return base, cells


def report(reader: queries.Reader, experiment: str) -> tuple[list[str], float]:
    """Lines to print and the share of cells whose interval includes no change."""
    base, cells = aa_cells(reader, experiment)
    if not cells:
        return [f"{experiment}: no A/A cell has an interval yet"], 0.0
    reps = 1 + max(c.repetition for c in cells)
    lines = [
        f"{experiment}: {base}{COPY_SUFFIX} against {base}, {reps} repetition(s), "
        f"{len(cells)} cells with an interval"
    ]
    for metric in METRICS:
        mine = [c for c in cells if c.metric == metric]
        if mine:
            worst = max(mine, key=lambda c: abs(c.change))
            lines.append(
                f"  {metric:<15} {sum(c.covers for c in mine):>3} of {len(mine):>3} include no change; "
                f"largest change {worst.change:+.1%} [{worst.lo:+.1%}, {worst.hi:+.1%}] "
                f"(repetition {worst.repetition}, concurrency {worst.concurrency})"
            )
    share = sum(c.covers for c in cells) / len(cells)
    lines.append(
        f"  all metrics: {sum(c.covers for c in cells)} of {len(cells)} ({share:.0%}) include "
        "no change; about 95% is what 95% intervals should give"
    )
    return lines, share
