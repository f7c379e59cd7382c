"""Each row's draft length from the drafter's own confidence, under the adaptive policy.

The policy picks the most drafts a row may carry at a width (k, draft_policy.py); a
drafter that reports its confidence in each draft (the block drafter: q of its greedy
token) then lets each row carry only the prefix that pays:

- Confidence becomes an acceptance probability through `ConfidenceCalibration`: decayed
  counts, per confidence bin, of drafts that were reached (every earlier one accepted) and
  of those accepted. A bin seldom seen leans on the rate of all bins pooled, which starts
  at the drafter's measured acceptance (a drafter without one: on the bin's midpoint). A
  small drafter's confidence reads low on text it never saw (q 0.15 drafts landing half
  the time): leaning on the midpoint, a lone row's first prompt was cut to one draft
  until its bins had filled, and a block drafter's pass costs about as much at one as
  at eight.
- A row's expected commit for m drafts is 1 + sum over j <= m of p_1 ... p_j.
- One row (width 1): the m among the lengths with a measured cost, up to k, of most
  expected tokens per unit of pass time.
- Several rows: they share the pass. A pass's cost grows about linearly with the rows
  that verify k drafts (between the measured costs of none and all), so rows are taken in
  order of expected commit while the pass's tokens per time grows; the others draft
  nothing, and verify no drafts, this pass.
- Rows without confidences (the MTP layer, sampling rows) keep k and are always taken.
- The next verify pass is usually built while the drafter runs, for the lengths the rows
  kept last time (verify_ahead.py); lengths other than those drop it, and the host then
  builds the pass while the device waits. That rebuild is priced in: without it a lone
  row's cut moved between lengths pass after pass, each move paid a rebuild no steady
  pass's cost shows, and cutting lost to never cutting.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

BINS = 10
MEMORY = 0.995  # each new draft in a bin keeps this share of the earlier ones' weight
PRIOR = 4.0  # a bin starts as if this many drafts had landed at the rate it leans on
POOLED_PRIOR = 8.0  # the pooled rate starts as if this many drafts had landed at the drafter's rate


class ConfidenceCalibration:
    def __init__(self, prior_rate: Optional[float] = None) -> None:
        """prior_rate: the drafter's measured acceptance of a draft reached (acceptance.py),
        where it brings one: a bin seldom seen then leans on the rate of all bins pooled,
        which starts there; without one, on the bin's own midpoint."""
        self.reached = [0.0] * BINS
        self.hit = [0.0] * BINS
        self.prior_rate = prior_rate
        self._pooled = prior_rate  # all bins' rate, updated as drafts are added

    @staticmethod
    def _bin(confidence: float) -> int:
        return min(max(int(confidence * BINS), 0), BINS - 1)

    def p(self, confidence: float) -> float:
        b = self._bin(confidence)
        return (self.hit[b] + PRIOR * self._lean(b)) / (self.reached[b] + PRIOR)

    def _lean(self, b: int) -> float:
        return (b + 0.5) / BINS if self._pooled is None else self._pooled

    def add(self, confidences: list[float], accepted: int) -> None:
        """A verified row: drafts 1..accepted landed, draft accepted + 1 (if carried) did
        not, the ones after it were never reached."""
        for i, c in enumerate(confidences[: accepted + 1]):
            b = self._bin(c)
            self.reached[b] = MEMORY * self.reached[b] + 1
            self.hit[b] = MEMORY * self.hit[b] + (i < accepted)
        if self.prior_rate is not None:
            weight = POOLED_PRIOR * self.prior_rate
            self._pooled = (sum(self.hit) + weight) / (sum(self.reached) + POOLED_PRIOR)

    def expected(self, confidences: list[float], m: int) -> float:
        total = reach = 1.0
        for c in confidences[:m]:
            reach *= self.p(c)
            total += reach
        return total


class Built(NamedTuple):
    """The next pass, built while the drafter ran (verify_ahead.py), for every row carrying
    `length` drafts: any other lengths drop it, and the host builds their pass while the
    device waits, at `rebuild` (relative to the costs it is added to)."""

    length: int
    rebuild: float


class RowLengths(NamedTuple):
    lengths: list[int]  # drafts each row carries
    reason: str  # why, in a few words (the pass's `draft_reason`)


def choose_lengths(
    calibration: ConfidenceCalibration,
    confidences: list[Optional[list[float]]],
    k: int,
    costs: dict[int, float],
    built: Optional[Built] = None,
) -> Optional[RowLengths]:
    """Each row's draft length (at most k), or None to keep k for every row. costs: pass
    cost by drafts a row carries, relative to any one of them, at this width; built: the
    next pass was built for every row carrying built.length drafts, and any other choice
    adds built.rebuild to its cost."""
    width = len(confidences)

    def cost(lengths: list[int], c: float) -> float:
        same = built is not None and all(m == built.length for m in lengths)
        return c + (0.0 if built is None or same else built.rebuild)

    if width == 1:
        conf = confidences[0]
        options = [m for m in costs if m <= k]
        if conf is None or not options:
            return None
        value = {m: calibration.expected(conf, m) / cost([m], costs[m]) for m in options}
        best = max(sorted(value), key=value.__getitem__)
        why = f"k {best} of {k}: {value[best]:.2f} tokens per unit vs {_others(value, best)}"
        return RowLengths([best], why)
    if 0 not in costs or k not in costs:
        return None
    per_row = (costs[k] - costs[0]) / width  # added cost of one row verifying k drafts
    gains = [(calibration.expected(c, k) if c is not None else None) for c in confidences]
    forced = [r for r, g in enumerate(gains) if g is None]
    ranked = sorted((r for r, g in enumerate(gains) if g is not None), key=lambda r: -gains[r])
    best_n, best_rate = 0, -1.0
    for n in range(len(ranked) + 1):
        taken = forced + ranked[:n]
        tokens = sum(gains[r] if gains[r] is not None else 1.0 for r in taken) + (width - len(taken))
        lengths = [k] * len(taken) + [0] * (width - len(taken))
        rate = tokens / cost(lengths, costs[0] + per_row * len(taken))
        if rate > best_rate:
            best_n, best_rate = n, rate
    chosen = set(forced + ranked[:best_n])
    lengths = [k if r in chosen else 0 for r in range(width)]
    skipped = sorted(gains[r] for r in ranked[best_n:])
    why = f"{len(chosen)} of {width} rows draft {k}"
    if skipped:
        why += "; the others expect " + ", ".join(f"{g:.2f}" for g in skipped) + " tokens"
    return RowLengths(lengths, why)


def _others(value: dict[int, float], best: int) -> str:
    return ", ".join(f"k {m} {v:.2f}" for m, v in sorted(value.items()) if m != best) or "no other"
