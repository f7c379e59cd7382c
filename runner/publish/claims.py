"""Claims: an author's stated figure checked against the value recomputed from raw rows.

A stated "+25%" holds when the recomputed value rounds to it at the stated precision
([24.5%, 25.5%)) or when the recomputed round-to-round spread overlaps that rounding
interval, whichever is wider. "82%", "1.3x", "97.4 tok/s" and "126" parse the same way.
This module neither queries nor renders; it works on Measured values it is given.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from markupsafe import Markup, escape


@dataclass(frozen=True, slots=True)
class Measured:
    """A recomputed figure: mean over rounds, its round-to-round spread [lo, hi].
    kind: "value" (a metric), "change" (on/base - 1) or "ratio" (on/base)."""
    value: float | None
    lo: float | None
    hi: float | None
    n_rounds: int
    kind: str
    what: str          # human description, e.g. "decode_tps on vs off at concurrency 1 on M1"
    decimals: int = 1
    unit: str = ""

    def text(self) -> str:
        if self.value is None:
            return "not measured"
        return self.format(self.value)

    def format(self, v: float) -> str:
        if self.kind == "change":
            return f"{v * 100:+.{self.decimals}f}%"
        if self.kind == "ratio":
            return f"{v:.{max(self.decimals, 2)}f}x"
        return f"{v:.{self.decimals}f}" + (f" {self.unit}" if self.unit else "")

    def spread_text(self) -> str:
        if self.lo is None or self.hi is None:
            return ""
        return f"{self.format(self.lo)} to {self.format(self.hi)}"

    def __str__(self) -> str:
        return self.text()

    def __html__(self) -> str:
        return str(escape(self.text()))


class ClaimSyntaxError(ValueError):
    pass


_STATED = re.compile(r"^\s*(?P<sign>[+\-\u2212]?)\s*(?P<num>\d[\d,]*(?:\.\d+)?|\.\d+)\s*"
                     r"(?P<suffix>%|x|\u00d7)?(?P<rest>.*)$")


@dataclass(frozen=True, slots=True)
class Stated:
    text: str
    value: float          # in the Measured's scale (fractions for %, ratios for x)
    lo: float             # rounding interval [lo, hi)
    hi: float
    suffix: str           # "%", "x" or ""


def parse_stated(text: str, kind: str) -> Stated:
    """The stated figure as a value and rounding interval in the measured value's scale."""
    m = _STATED.match(str(text))
    if not m:
        raise ClaimSyntaxError(f"stated value {text!r} is not a number like '+25%', '1.3x' or '97.4 tok/s'")
    num = m.group("num").replace(",", "")
    decimals = len(num.split(".")[1]) if "." in num else 0
    value = float(num) * (-1 if m.group("sign") in ("-", "\u2212") else 1)
    half = 0.5 * 10 ** -decimals
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
        return (f"claim {self.number} stated {self.stated!r}, measured "
                f"{self.measured.text()} (spread {self.measured.spread_text() or 'none'}, "
                f"{self.measured.what}): {self.reason}")


def judge(number: int, stated_text: str, measured: Measured, line: int | None) -> Verdict:
    if measured.value is None:
        return Verdict(number, stated_text, measured, False, "no data behind this claim", line)
    try:
        stated = parse_stated(stated_text, measured.kind)
    except ClaimSyntaxError as e:
        return Verdict(number, stated_text, measured, False, str(e), line)
    if stated.suffix == "%" and measured.kind == "ratio":
        return Verdict(number, stated_text, measured, False,
                       "a percentage needs gain() or a fraction, not a ratio", line)
    if stated.lo <= measured.value < stated.hi:
        return Verdict(number, stated_text, measured, True, "rounds to the stated value", line)
    lo = measured.lo if measured.lo is not None else measured.value
    hi = measured.hi if measured.hi is not None else measured.value
    if lo < stated.hi and hi >= stated.lo:
        return Verdict(number, stated_text, measured, True, "within the round-to-round spread", line)
    return Verdict(number, stated_text, measured, False,
                   "outside both the stated rounding and the round-to-round spread", line)


def claim_link(verdict: Verdict) -> Markup:
    cls = "bothrows-claim" + ("" if verdict.ok else " bothrows-claim-failed")
    title = f"recomputed {verdict.measured.text()}"
    return Markup('<a class="{}" id="claim-{}" href="#audit-claim-{}" title="{}">{}</a>').format(
        cls, verdict.number, verdict.number, title, verdict.stated)
