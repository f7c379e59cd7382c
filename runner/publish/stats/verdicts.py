"""A comparison's verdict: one pure function of its interval, a band and the A/A margin.

The four verdicts, in the order they are tried:

- **level within ±δ**: the whole 95% interval of the change lies inside [-δ, +δ]. δ is
  declared (`equivalence = "10%"` in the experiment, default 10%, or `within=` on a
  claim): the size of a difference the author calls none.
- **faster** or **slower** (higher or lower for a metric that is not a speed): the
  interval excludes no change and clears the A/A margin (`aa.py`). A latency's "higher"
  is slower.
- **undecided**: neither. The interval includes no change but reaches past ±δ, or it
  excludes no change by less than the A/A pair's own intervals reached; more rounds
  would decide it (`rounds_to_decide`, a planning figure).

A one-sided claim ("at least 0.97x", "at most +5%": a floor or a ceiling that is not no
change) has its own verdict, `decide_bound`: it holds when the whole interval lies on the
claimed side of the bound, is refuted when the whole interval lies on the other, and is
undecided while the interval reaches both sides; on a change or ratio the interval must
clear the bound by the A/A margin, as a direction must clear no change.

Every block, note and claim reads this one function, so the page and the audit agree.
Nothing here queries or renders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runner.publish.stats.intervals import MIN_ROUNDS, t975

DEFAULT_BAND = 0.10
MOST_ROUNDS = 1000  # beyond this an estimate says "more than"
LEVEL, HIGHER, LOWER, UNDECIDED = "level", "higher", "lower", "undecided"
AT_MARGIN = 1e-9  # log-ratio rounding: an interval lying exactly at the margin does not clear it


@dataclass(frozen=True, slots=True)
class Decision:
    kind: str  # LEVEL, HIGHER, LOWER or UNDECIDED
    band: float  # δ, a fraction
    rounds_to_decide: int | None = None  # undecided: about how many rounds would decide it

    def word(self, metric_unit: str = "", compact: bool = False) -> str:
        """The reader's word: faster/slower for a speed or a time, else higher/lower;
        compact: "level ±10%" for a table cell's mark."""
        if self.kind == LEVEL:
            return (
                f"level \u00b1{band_text(self.band)}"
                if compact
                else f"level (within \u00b1{band_text(self.band)})"
            )
        if self.kind == UNDECIDED:
            return UNDECIDED
        up = self.kind == HIGHER
        if metric_unit.endswith("/s"):
            return "faster" if up else "slower"
        if metric_unit == "ms":
            return "slower" if up else "faster"
        return self.kind


def band_text(band: float) -> str:
    return f"{band * 100:g}%"


def parse_band(text: object) -> float | None:
    """'10%' or '5.5%' -> 0.10 or 0.055; None when it is not a percentage in (0, 100)."""
    s = str(text).strip()
    if not s.endswith("%"):
        return None
    try:
        v = float(s[:-1]) / 100
    except ValueError:
        return None
    return v if 0 < v < 1 and math.isfinite(v) else None


def decide(lo: float | None, hi: float | None, n_rounds: int, kind: str, band: float, margin: float = 0.0):
    """The verdict of a comparison whose 95% interval is [lo, hi] (kind "change": on/base - 1,
    "ratio": on/base), measured over `n_rounds` paired rounds; None without an interval."""
    if lo is None or hi is None or kind not in ("change", "ratio"):
        return None
    shift = 1.0 if kind == "change" else 0.0
    r_lo, r_hi = lo + shift, hi + shift  # as ratios
    if 1 - band <= r_lo and r_hi <= 1 + band:
        return Decision(LEVEL, band)
    log_lo, log_hi = _log(r_lo), _log(r_hi)
    if log_lo > margin + AT_MARGIN:
        return Decision(HIGHER, band)
    if log_hi < -margin - AT_MARGIN:
        return Decision(LOWER, band)
    return Decision(UNDECIDED, band, rounds_to_decide(log_lo, log_hi, n_rounds, band, margin))


HOLDS, REFUTED = "holds", "refuted"  # a bound's verdicts beside UNDECIDED


@dataclass(frozen=True, slots=True)
class BoundDecision:
    holds: bool | None  # None: undecided, the interval reaches both sides of the bound
    rounds_to_decide: int | None = None  # undecided: about how many rounds would decide it

    @property
    def kind(self) -> str:
        """HOLDS, REFUTED or UNDECIDED."""
        return UNDECIDED if self.holds is None else HOLDS if self.holds else REFUTED


def decide_bound(
    lo: float | None,
    hi: float | None,
    n_rounds: int,
    kind: str,
    bound: float,
    at_least: bool,
    margin: float = 0.0,
) -> BoundDecision | None:
    """The verdict of "at least `bound`" (at_least) or "at most `bound`" on a comparison or
    value whose 95% interval is [lo, hi], in the value's own scale (a change's fraction, a
    ratio, a metric's unit); None without an interval. A change or ratio is judged on the
    log-ratio scale, where the A/A margin lives."""
    if lo is None or hi is None:
        return None
    if kind in ("change", "ratio"):
        shift = 1.0 if kind == "change" else 0.0
        lo, hi, bound = _log(lo + shift), _log(hi + shift), _log(bound + shift)
    else:
        margin = 0.0  # an A/A margin is a log ratio between arms, not a metric's unit
    if not at_least:  # "at most b" is "at least -b" of the negated interval
        lo, hi, bound = -hi, -lo, -bound
    if (lo - bound > margin + AT_MARGIN) if margin else lo >= bound:
        return BoundDecision(True)
    if (bound - hi > margin + AT_MARGIN) if margin else hi < bound:
        return BoundDecision(False)
    if n_rounds < MIN_ROUNDS or not (math.isfinite(lo) and math.isfinite(hi)):
        return BoundDecision(None)
    centre, half = (lo + hi) / 2, (hi - lo) / 2
    return BoundDecision(None, _rounds_for(half, n_rounds, abs(centre - bound) - margin))


def _log(ratio: float) -> float:
    return math.log(ratio) if ratio > 0 else -math.inf


def rounds_to_decide(log_lo: float, log_hi: float, n_rounds: int, band: float, margin: float) -> int | None:
    """About how many rounds would decide it, the rounds' spread and the centre taken as
    measured: the half-width must shrink to fit inside the band around the centre (level)
    or to clear the margin (a direction), whichever needs less. None: no finite interval."""
    if n_rounds < MIN_ROUNDS or not (math.isfinite(log_lo) and math.isfinite(log_hi)):
        return None
    centre, half = (log_lo + log_hi) / 2, (log_hi - log_lo) / 2
    room = max(min(math.log1p(band) - centre, centre - math.log1p(-band)), abs(centre) - margin)
    return _rounds_for(half, n_rounds, room)


def _rounds_for(half: float, n_rounds: int, room: float) -> int:
    """Rounds at which an interval of this half-width over n_rounds, its rounds' spread
    taken as measured, would shrink to `room`."""
    if room <= 0:
        return MOST_ROUNDS
    spread = half * math.sqrt(n_rounds) / t975(n_rounds - 1)  # the rounds' standard deviation
    return next(
        (r for r in range(n_rounds + 1, MOST_ROUNDS) if t975(r - 1) * spread / math.sqrt(r) <= room),
        MOST_ROUNDS,
    )
