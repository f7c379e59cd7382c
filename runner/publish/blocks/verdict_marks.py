"""The small mark every comparison a page shows carries: faster, slower (or higher,
lower), level within ±δ, or undecided, from `verdicts.decide` over the comparison's
interval, the experiment's band and the A/A margin on that chip, so the page and the
audit read one verdict. A mark is a word and a title, never a paragraph. A body's
`verdict(value, at_least="-3%")` marks a one-sided bound instead, as a claim of it
would be judged (`claims.judge_bound`): "not below -3%", "below -3%" or "≥ -3% undecided".
"""

from __future__ import annotations

import math

from markupsafe import Markup

from runner.publish.metrics import METRICS
from runner.publish.stats.claims import ClaimSyntaxError, Measured, judge_bound
from runner.publish.stats.intervals import Estimate
from runner.publish.stats.verdicts import HOLDS, LEVEL, REFUTED, UNDECIDED, Decision, band_text, decide

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


def bound_mark(measured: Measured, bound: str, at_least: bool) -> Markup:
    """The mark of "at least/at most `bound`" on a value (empty without an interval); a
    bound the value cannot take (no figure, a percentage against a ratio) raises
    ClaimSyntaxError: the author's error, not a verdict."""
    if not isinstance(measured, Measured) or measured.lo is None or measured.hi is None:
        return Markup("")
    kind, why = judge_bound("at least" if at_least else "at most", bound, measured)
    if kind is None:
        raise ClaimSyntaxError(f"verdict(..., {'at_least' if at_least else 'at_most'}={bound!r}): {why}")
    side, sign = ("below", "\u2265") if at_least else ("above", "\u2264")
    word = {HOLDS: f"not {side} {bound}", REFUTED: f"{side} {bound}"}.get(kind, f"{sign} {bound} undecided")
    return Markup('<span class="bothrows-verdict bothrows-verdict-{}" title="{}">{}</span>').format(
        kind, why, word
    )
