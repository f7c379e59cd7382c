"""Claims: an author's stated figure checked against the value recomputed from raw rows.

The rules, each verdict naming the one that decided it:

- A stated "+25%" holds when the recomputed value rounds to it at the stated precision
  ([24.5%, 25.5%)) or when the stated value lies inside the recomputed 95% interval
  (`intervals.py`). "82%", "1.3x", "97.4 tok/s" and "126" parse the same way.
- A directional claim (a change such as "+25%" or "-27%" from gain() or traffic_gain(), a
  ratio such as "1.3x" other than "1.0x") also needs its interval to exclude no change
  (0 for a change, 1 for a ratio): otherwise "the interval includes no change".
- Where the experiment has an A/A pair (`aa.py`), a direction also needs its interval to
  lie further from no change than any interval between the identical arms did on that
  chip and metric (`Measured.margin`, a log ratio, so a claim and its reverse meet one bar).
- "level" (also "±0%") on a gain or ratio is an equivalence claim: it holds only when the
  whole interval lies within ±δ (`verdicts.py`; δ is the experiment's `equivalence`,
  default 10%, or the claim's `within=`), and is shown as "level (within ±10%)". An
  interval that includes no change but reaches past ±δ is undecided: the claim fails
  with that word and about how many rounds would decide it.
- "at least 0.97x" or "at most +5%" (also "≥", "≤", ">=", "<=") is a one-sided claim: it
  holds only when the whole interval lies on the stated side of the bound (and, on a
  change or ratio, clears it by the A/A margin); an interval on the other side refutes
  it; one reaching both sides is undecided, with about how many rounds would decide it
  (`verdicts.decide_bound`). A floor such as "never below 0.97x of off" is decided this
  way, where "level" would also need the interval to stay under +δ.
- A figure with no interval (measured in one round: "1 round: no interval") can hold by
  rounding, but cannot carry a direction, a bound or "level".
This module neither queries nor renders; it works on Measured values it is given.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from markupsafe import Markup, escape

from runner.publish.stats.intervals import no_interval_text
from runner.publish.stats.verdicts import (
    AT_MARGIN,
    DEFAULT_BAND,
    HOLDS,
    LEVEL,
    REFUTED,
    UNDECIDED,
    BoundDecision,
    Decision,
    band_text,
    decide,
    decide_bound,
)


@dataclass(frozen=True, slots=True)
class Measured:
    """A recomputed figure: mean over rounds and its 95% interval [lo, hi] (None: none).
    kind: "value" (a metric), "change" (on/base - 1) or "ratio" (on/base)."""

    value: float | None
    lo: float | None
    hi: float | None
    n_rounds: int
    kind: str
    what: str  # human description, e.g. "decode_tps on vs off at concurrency 1 on M1"
    decimals: int = 1
    unit: str = ""
    margin: float = 0.0  # how far past no change a direction's interval must lie (the A/A's; log ratio)
    span: tuple[float, float] | None = None  # the range an open (infinite) bound lies beyond
    bound: str = ""  # no value, but what the data does say (e.g. "at least 8 req/s")
    band: float = DEFAULT_BAND  # δ: a change within ±δ is "level" (verdicts.py)

    def text(self) -> str:
        if self.value is None:
            return self.bound or "not measured"
        return self.format(self.value)

    def format(self, v: float) -> str:
        if self.kind == "change":
            return f"{v * 100:+.{self.decimals}f}%"
        if self.kind == "ratio":
            return f"{v:.{max(self.decimals, 2)}f}x"
        return f"{v:.{self.decimals}f}" + (f" {self.unit}" if self.unit else "")

    def interval_text(self) -> str:
        """An infinite bound is an open one (a crossover whose bound curve never crosses
        inside the measured cells): said as such, never as a number."""
        if self.lo is None or self.hi is None:
            return ""
        lo, hi = self.format(self.lo), self.format(self.hi)
        if self.lo == -math.inf:
            lo = f"< {self.format(self.span[0])}" if self.span else "below the measured range"
        if self.hi == math.inf:
            hi = f"> {self.format(self.span[1])}" if self.span else "beyond the measured range"
        return f"{lo} to {hi}"

    def no_change(self) -> float | None:
        return {"change": 0.0, "ratio": 1.0}.get(self.kind)

    def includes_no_change(self) -> bool | None:
        """Whether the interval includes no change; None without an interval or for a value."""
        point = self.no_change()
        if point is None or self.lo is None or self.hi is None:
            return None
        return self.lo <= point <= self.hi

    def clears_margin(self) -> bool:
        """Whether the interval lies wholly beyond the margin on the log-ratio scale. Lying
        exactly at it (an A/A cell judged against its own margin, or its reverse, up to
        rounding) is not beyond it."""
        point = self.no_change()
        if point is None or self.lo is None or self.hi is None:
            return False
        lo, hi = _log_ratio(self.lo + 1 - point), _log_ratio(self.hi + 1 - point)
        return lo > self.margin + AT_MARGIN or hi < -self.margin - AT_MARGIN

    def decision(self) -> Decision | None:
        """faster, slower, level within ±δ or undecided (verdicts.py); None: no interval."""
        return decide(self.lo, self.hi, self.n_rounds, self.kind, self.band, self.margin)

    def __str__(self) -> str:
        return self.text()

    def __html__(self) -> str:
        return str(escape(self.text()))


def _log_ratio(ratio: float) -> float:
    return math.log(ratio) if ratio > 0 else -math.inf


class ClaimSyntaxError(ValueError):
    pass


_STATED = re.compile(
    r"^\s*(?P<sign>[+\-\u2212]?)\s*(?P<num>\d[\d,]*(?:\.\d+)?|\.\d+)\s*"
    r"(?P<suffix>%|x|\u00d7)?(?P<rest>.*)$"
)


@dataclass(frozen=True, slots=True)
class Stated:
    text: str
    value: float  # in the Measured's scale (fractions for %, ratios for x)
    lo: float  # rounding interval [lo, hi)
    hi: float
    suffix: str  # "%", "x" or ""


def parse_stated(text: str, kind: str) -> Stated:
    """The stated figure as a value and rounding interval in the measured value's scale."""
    m = _STATED.match(str(text))
    if not m:
        raise ClaimSyntaxError(f"stated value {text!r} is not a number like '+25%', '1.3x' or '97.4 tok/s'")
    num = m.group("num").replace(",", "")
    decimals = len(num.split(".")[1]) if "." in num else 0
    value = float(num) * (-1 if m.group("sign") in ("-", "\u2212") else 1)
    half = 0.5 * 10**-decimals
    suffix = {"\u00d7": "x"}.get(m.group("suffix") or "", m.group("suffix") or "")
    lo, hi = value - half, value + half
    if suffix == "%":
        value, lo, hi = value / 100, lo / 100, hi / 100
    elif suffix == "x" and kind == "change":  # "1.3x" against a relative change
        value, lo, hi = value - 1, lo - 1, hi - 1
    return Stated(str(text), value, lo, hi, suffix)


@dataclass(frozen=True, slots=True)
class Verdict:
    number: int
    stated: str
    measured: Measured
    ok: bool
    reason: str
    line: int | None

    def failure_message(self) -> str:
        return (
            f"claim {self.number} stated {self.stated!r}, measured "
            f"{self.measured.text()} (95% interval {self.measured.interval_text() or 'none'}, "
            f"{self.measured.what}): {self.reason}"
        )


LEVEL_WORDS = ("level", "\u00b10%", "+-0%", "+/-0%")
_BOUND = re.compile(r"^\s*(?P<side>at least|at most|>=|<=|\u2265|\u2264)\s*(?P<bound>.*)$", re.IGNORECASE)


def is_level(stated_text: str) -> bool:
    return str(stated_text).strip().lower() in LEVEL_WORDS


def judge(
    number: int, stated_text: str, measured: Measured, line: int | None, missing_reason: str | None = None
) -> Verdict:
    """`missing_reason`: why a value is absent when the data knows (e.g. "not measured by
    runtime mlx-lm-server"), said instead of "no data behind this claim"."""

    def verdict(ok: bool, reason: str) -> Verdict:
        return Verdict(number, stated_text, measured, ok, reason, line)

    if measured.value is None:
        return verdict(False, missing_reason or "no data behind this claim")
    if is_level(stated_text):
        if measured.no_change() is None:
            return verdict(False, "'level' needs a comparison (gain(), ratio() or traffic_gain())")
        decision, band = measured.decision(), band_text(measured.band)
        if decision is None:
            return verdict(False, f"{no_interval_text(measured.n_rounds)} cannot show no difference")
        if decision.kind == LEVEL:
            return verdict(True, f"level: the whole interval lies within \u00b1{band}")
        if decision.kind == UNDECIDED:
            return verdict(False, f"undecided: {reach(measured)}{more_rounds(decision)}")
        return verdict(False, f"not level: the interval excludes no change and reaches past \u00b1{band}")
    bound = _BOUND.match(str(stated_text))
    if bound:
        kind, why = judge_bound(bound.group("side").lower(), bound.group("bound"), measured)
        return verdict(kind == HOLDS, why)
    try:
        stated = parse_stated(stated_text, measured.kind)
    except ClaimSyntaxError as e:
        return verdict(False, str(e))
    if stated.suffix == "%" and measured.kind == "ratio":
        return verdict(False, "a percentage needs gain() or a fraction, not a ratio")
    if stated.lo <= measured.value < stated.hi:
        reason = "rounds to the stated value"
    elif measured.lo is not None and measured.lo <= stated.value <= measured.hi:
        reason = "inside the 95% interval"
    else:
        return verdict(
            False,
            "outside both the stated rounding and the 95% interval"
            if measured.lo is not None
            else f"does not round to the stated value; {no_interval_text(measured.n_rounds)}",
        )
    directional = {"change": stated.value != 0.0, "ratio": stated.value != 1.0}.get(measured.kind, False)
    if not directional:
        return verdict(True, reason)
    inc = measured.includes_no_change()
    if inc is None:
        return verdict(
            False, f"{reason}, but a direction needs an interval: {no_interval_text(measured.n_rounds)}"
        )
    if inc:
        return verdict(False, f"{reason}, but the interval includes no change")
    if measured.margin and not measured.clears_margin():
        return verdict(
            False,
            f"{reason}, but the interval does not clear the A/A margin "
            f"\u00b1{math.expm1(measured.margin):.1%} (identical arms' intervals reached that far "
            "from no change on this chip)",
        )
    return verdict(True, f"{reason}; the interval excludes no change")


def judge_bound(side: str, text: str, measured: Measured) -> tuple[str | None, str]:
    """(verdict, why) of "at least/at most <text>" against the measured interval: HOLDS,
    REFUTED or UNDECIDED, or None where the claim cannot be judged (why says so)."""
    try:
        stated = parse_stated(text, measured.kind)
    except ClaimSyntaxError as e:
        return None, str(e)
    if stated.suffix == "%" and measured.kind == "ratio":
        return None, "a percentage needs gain() or a fraction, not a ratio"
    at_least = side in ("at least", ">=", "\u2265")
    decision = decide_bound(
        measured.lo, measured.hi, measured.n_rounds, measured.kind, stated.value, at_least, measured.margin
    )
    if decision is None:
        return None, f"a bound needs an interval: {no_interval_text(measured.n_rounds)}"
    side_text, other = ("at or above", "below") if at_least else ("at or below", "above")
    text = text.strip()
    margin = (
        f", clear of it by the A/A margin \u00b1{math.expm1(measured.margin):.1%}"
        if measured.margin and measured.no_change() is not None
        else ""
    )
    if decision.kind == HOLDS:
        return HOLDS, f"the whole interval lies {side_text} {text}{margin}"
    if decision.kind == REFUTED:
        return REFUTED, f"refuted: the whole interval lies {other} {text}{margin}"
    return UNDECIDED, f"undecided: the interval reaches both sides of {text}{margin}{more_rounds(decision)}"


def reach(measured: Measured) -> str:
    """Why an interval decides nothing: past the band, and not clear of no change."""
    past = f"the interval reaches past \u00b1{band_text(measured.band)}"
    if measured.includes_no_change():
        return f"{past} and includes no change"
    return f"{past} and does not clear the A/A margin \u00b1{math.expm1(measured.margin):.1%}"


def more_rounds(decision: Decision | BoundDecision) -> str:
    n = decision.rounds_to_decide
    return "" if n is None else f" (about {n} rounds would decide it)"


def stated_shown(stated: str, measured: object) -> str:
    """What the page prints for a stated figure: "level" says its band."""
    if is_level(stated) and isinstance(measured, Measured):
        return f"level (within \u00b1{band_text(measured.band)})"
    return stated


def claim_link(verdict: Verdict) -> Markup:
    cls = "bothrows-claim" + ("" if verdict.ok else " bothrows-claim-failed")
    title = f"recomputed {verdict.measured.text()}"
    return Markup('<a class="{}" id="claim-{}" href="#audit-claim-{}" title="{}">{}</a>').format(
        cls, verdict.number, verdict.number, title, stated_shown(verdict.stated, verdict.measured)
    )
