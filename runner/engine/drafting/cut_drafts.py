"""Learning from drafts a row was cut from: greedy output is the target's own
continuation whether or not the row drafted, so the tokens it commits later tell what
verifying its cut drafts would have kept.

- Why: the adaptive policy cuts a row's drafts by their calibrated confidence
  (row_lengths.py), and calibration learns from verified drafts only. A drafter whose
  confidence reads low (a small distilled one is flat: q 0.15 drafts landing half the
  time) has its drafts cut before calibration has seen them land, and then never shows
  it otherwise: drafting stays off where it would pay.
- What: a cut remembers the row's whole proposal (its position, drafts, confidences, and
  how many it kept). Once the committed tokens decide it (a mismatch, the last draft's
  position reached, or the row finished), the drafts past the kept ones count as verified
  ones would: toward the confidence calibration, and toward acceptance by position (a
  row cut to nothing as a whole proposal, a row cut short at the positions past its kept
  drafts). A cut tail counts only when every kept draft landed: else
  verification already counted the miss, and the tail was never reached.
"""

from __future__ import annotations

from typing import NamedTuple

from ..sequence import Sequence


class CutProposal(NamedTuple):
    at: int  # len(seq.tokens) when proposed: draft i predicts tokens[at + i]
    drafts: list[int]
    confidences: list[float]
    kept: int  # drafts the row carried after the cut


class Outcome(NamedTuple):
    confidences: list[float]  # the cut drafts' confidences, as far as the output decides them
    landed: int  # how many of them, in order, the target's output matches
    after: int  # drafts the row kept (0: cut to nothing, the outcome is its whole proposal's)


def remember(seq: Sequence, drafts: list[int], confidences: list[float], kept: int) -> None:
    """A greedy row cut from len(drafts) drafts to `kept`."""
    if seq.temperature == 0.0 and kept < len(drafts):
        seq.cut_proposals.append(CutProposal(len(seq.tokens), list(drafts), list(confidences), kept))


def settle(seq: Sequence) -> list[Outcome]:
    """The row's cut proposals its committed tokens now decide, as outcomes (forgotten
    once told)."""
    out, pending = [], []
    for p in seq.cut_proposals:
        known = seq.tokens[p.at : p.at + len(p.drafts)]
        landed = 0
        while landed < len(known) and known[landed] == p.drafts[landed]:
            landed += 1
        if landed == len(known) and len(known) < len(p.drafts) and not seq.finished:
            pending.append(p)  # every token so far matched: the next ones decide
            continue
        if landed >= p.kept:  # every kept draft landed: the tail was reached
            out.append(Outcome(p.confidences[p.kept : len(known)], landed - p.kept, p.kept))
    seq.cut_proposals = pending
    return out
