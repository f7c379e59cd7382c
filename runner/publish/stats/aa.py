"""The A/A check: an arm measured against an identical copy of itself. For every
repetition of the measurement, every concurrency and every metric, the 95% interval of
the copy's change over the arm should include no change about 95% of the time; far less
means the intervals are too narrow for this machine's noise.

The copy is found three ways, all read the same: `runner run NAME --aa ARM` stores
experiment NAME-aa with arms ARM and ARM-aa; `[workload] aa = true` adds ARM-aa to the
experiment itself; and any two arms measured with one runtime and identical knobs are
such a pair whatever their names (`aa_pair`), since nothing but noise can tell them apart.

A repetition is one complete pass over the cells (each `--remeasure` adds one):
repetition k is the data as of the start of repetition k + 1, read through the same
views (`views.py`) and the same intervals the posts use. Where a post or a look judges
some of the data (a `home.Cutoff`: a `data:` pin's folders, a dated post's earliest runs,
a declaration's own runs when measuring until decided), the A/A of that data alone sets
its margins: data measured later, or under another declaration, never moves them.

What the A/A sets for claims (`Coverage.margin`): a direction must lie further from no
change than any interval between the identical arms did on that chip and metric. The
margin is on the log scale, so a claim and its reverse (b over a, a over b) meet the same
bar; on an A/A pair itself no direction can clear it. A metric whose coverage is below
COVERAGE_FLOOR is also marked on the page. This module reads through `reader.Reader` and
formats text; it writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from runner.publish.metrics import METRICS
from runner.publish.sql.home import Cutoff
from runner.publish.sql.reader import QueryError, Reader
from runner.publish.stats.views import ViewCache

COPY_SUFFIX = "-aa"
COVERAGE_FLOOR = 0.8


def margin_text(margin: float) -> str:
    """A log-scale margin as the change it allows either way ("\u00b13.9%")."""
    return f"\u00b1{math.expm1(margin):.1%}"


@dataclass(frozen=True, slots=True)
class Coverage:
    """One metric's A/A cells on one chip: how many include no change, the largest change,
    and how far past no change the furthest interval lay (log scale, `margin`)."""

    metric: str
    covered: int
    cells: int
    largest: float
    margin: float = 0.0  # what a directional claim's interval must clear here (0: nothing more)

    @property
    def low(self) -> bool:
        return self.covered < COVERAGE_FLOOR * self.cells

    @property
    def margin_label(self) -> str:
        return margin_text(self.margin)

    def text(self) -> str:
        line = f"{self.metric} {self.covered} of {self.cells} cells include no change"
        if self.margin:
            line += f" (a direction must clear {self.margin_label})"
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

    @property
    def overshoot(self) -> float:
        """How far the interval lies past no change, as a log ratio (0 when it covers)."""
        if self.covers:
            return 0.0
        if self.lo > 0:
            return math.log1p(self.lo)
        return -math.log1p(self.hi) if self.hi > -1 else math.inf  # down to nothing: no bound


def copied_arm(reader: Reader, experiment: str, quick: bool = False) -> str | None:
    """The arm whose `-aa` copy the experiment measured, if any (the copy is no arm of a post)."""
    arms = sorted({cell.arm for cell in reader.layout(experiment, quick)})
    return next((a for a in arms if f"{a}{COPY_SUFFIX}" in arms), None)


def aa_pair(reader: Reader, experiment: str, quick: bool = False) -> tuple[str, str] | None:
    """(arm, its copy): an arm and its `-aa` copy, or else the first two arms (by name)
    each measured with one runtime and the same knobs; None when there is neither."""
    base = copied_arm(reader, experiment, quick)
    if base is not None:
        return base, f"{base}{COPY_SUFFIX}"
    first_with: dict[frozenset, str] = {}
    for arm, setups in sorted(reader.arms.arm_setups(experiment, quick).items()):
        if len(setups) != 1:  # re-measured with other knobs (another code version): not one setup
            continue
        if setups in first_with:
            return first_with[setups], arm
        first_with[setups] = arm
    return None


def coverage(
    reader: Reader,
    experiment: str,
    quick: bool = False,
    pair: tuple[str, str] | None = None,
    cut: Cutoff | None = None,
) -> dict[str, list[Coverage]]:
    """chip_id -> each metric's A/A coverage on it ({} without an A/A pair); `pair`: the
    experiment's `aa_pair`, when the caller has it; `cut`: the data judged (None: all)."""
    pair = pair or aa_pair(reader, experiment, quick)
    if pair is None:
        return {}
    _, cells = aa_cells(reader, experiment, quick, pair, cut)
    out: dict[str, list[Coverage]] = {}
    for chip in sorted({c.chip for c in cells}):
        for metric in METRICS:
            mine = [c for c in cells if (c.chip, c.metric) == (chip, metric)]
            if mine:
                worst = max(mine, key=lambda c: abs(c.change))
                furthest = max(c.overshoot for c in mine)
                out.setdefault(chip, []).append(
                    Coverage(metric, sum(c.covers for c in mine), len(mine), worst.change, furthest)
                )
    return out


def aa_cells(
    reader: Reader,
    experiment: str,
    quick: bool = False,
    pair: tuple[str, str] | None = None,
    cut: Cutoff | None = None,
) -> tuple[tuple[str, str], list[Cell]]:
    """The arm and its copy (`pair`, else found), and every (repetition, chip,
    concurrency, metric) cell with an interval, in the data `cut` judges (None: all)."""
    pair = pair or aa_pair(reader, experiment, quick)
    if pair is None:
        arms = sorted({cell.arm for cell in reader.layout(experiment, quick)})
        raise QueryError(
            f"experiment {experiment!r} has no A/A pair: no arm with its {COPY_SUFFIX} copy and no "
            f"two arms with one runtime and the same knobs (arms: {', '.join(arms) or 'none'}); "
            "measure one with runner run NAME --aa ARM"
        )
    base, copy = pair
    views = ViewCache(reader)
    cells = []
    for k, as_of in enumerate(judged_views(reader, experiment, base, cut)):
        view = views.get(experiment, quick, as_of)
        for chip in view.chip_ids:
            for conc in sorted({c for (ch, _, c, _) in view.runs if ch == chip}):
                for metric in METRICS:
                    e = view.compare(metric, chip, copy, base, conc, "change")
                    if e.value is not None and e.lo is not None:
                        cells.append(Cell(k, chip, conc, metric, e.value, e.lo, e.hi))
    return pair, cells


def judged_views(
    reader: Reader, experiment: str, base: str, cut: Cutoff | None
) -> list[datetime | Cutoff | None]:
    """The views whose A/A cells count: every repetition's (cut None), else the one view
    of the data `cut` judges."""
    if cut is not None:
        return [cut]
    starts = reader.repetition_starts(experiment, base)
    return [*starts[1:], None]


def report(reader: Reader, experiment: str) -> tuple[list[str], float]:
    """Lines to print and the share of cells whose interval includes no change."""
    (base, copy), cells = aa_cells(reader, experiment)
    if not cells:
        return [f"{experiment}: no A/A cell has an interval yet"], 0.0
    reps = 1 + max(c.repetition for c in cells)
    lines = [
        f"{experiment}: {copy} against {base}, {reps} repetition(s), {len(cells)} cells with an interval"
    ]
    for metric in METRICS:
        mine = [c for c in cells if c.metric == metric]
        if mine:
            worst = max(mine, key=lambda c: abs(c.change))
            furthest = max(c.overshoot for c in mine)
            bar = f"; a direction must clear {margin_text(furthest)}" if furthest else ""
            lines.append(
                f"  {metric:<15} {sum(c.covers for c in mine):>3} of {len(mine):>3} include no change; "
                f"largest change {worst.change:+.1%} [{worst.lo:+.1%}, {worst.hi:+.1%}] "
                f"(repetition {worst.repetition}, concurrency {worst.concurrency}){bar}"
            )
    share = sum(c.covers for c in cells) / len(cells)
    lines.append(
        f"  all metrics: {sum(c.covers for c in cells)} of {len(cells)} ({share:.0%}) include "
        "no change; about 95% is what 95% intervals should give"
    )
    return lines, share
