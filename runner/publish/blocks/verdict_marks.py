"""The small mark every comparison a page shows carries: faster, slower (or higher,
lower), level within ±δ, or undecided, from `verdicts.decide` over the comparison's
interval, the experiment's band and the A/A margin on that chip, so the page and the
audit read one verdict. A mark is a word and a title, never a paragraph.
"""

from __future__ import annotations

import math

from markupsafe import Markup

from runner.publish.metrics import METRICS
from runner.publish.stats.claims import Measured
from runner.publish.stats.intervals import Estimate
from runner.publish.stats.verdicts import LEVEL, UNDECIDED, Decision, band_text, decide

_TITLES = {
    LEVEL: "the whole 95% interval lies within \u00b1{band}",
    UNDECIDED: "the 95% interval includes no change but reaches past \u00b1{band}, or does not clear the A/A "
    "margin: not decided{rounds}",
}
_DIRECTION = "the 95% interval excludes no change{margin}"


def verdict_mark(data, estimate: Estimate | None, metric: str, chip: str, kind: str = "change") -> Markup:
    """The mark of one comparison (empty without an interval); `data` is the post's PostData."""
    if estimate is None or estimate.lo is None:
        return Markup("")
    margin = data.values.aa_margin(metric, {chip})
    spec = METRICS.get(metric)
    decision = decide(estimate.lo, estimate.hi, estimate.n_rounds, kind, data.band, margin)
    return _mark(decision, spec.unit if spec else "", margin, compact=True)


def measured_mark(measured: Measured) -> Markup:
    """The mark of a value a post body holds (`verdict(gain(...))`): empty for a value
    that is no comparison or has no interval."""
    if not isinstance(measured, Measured):
        return Markup("")
    return _mark(measured.decision(), measured.unit, measured.margin)


def _mark(decision: Decision | None, unit: str, margin: float, compact: bool = False) -> Markup:
    if decision is None:
        return Markup("")
    n = decision.rounds_to_decide
    rounds = f"; about {n} rounds would decide it" if n else ""
    aa = f" and clears the A/A margin \u00b1{math.expm1(margin):.1%}" if margin else ""
    title = _TITLES.get(decision.kind, _DIRECTION).format(
        band=band_text(decision.band), rounds=rounds, margin=aa
    )
    return Markup('<span class="bothrows-verdict bothrows-verdict-{}" title="{}">{}</span>').format(
        decision.kind, title, decision.word(unit, compact)
    )
