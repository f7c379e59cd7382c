"""Acceptance by draft position, as the adaptive policy estimates it (draft_policy.py).

- Decayed counts per position i (1-based) of drafts reached (every draft before them
  accepted) and of those accepted, from every drafting pass's histogram of accepted
  lengths (and from cut drafts the tokens committed later settled, cut_drafts.py).
- Each position starts from a prior worth PRIOR_DRAFTS drafts. Without one, the prior is
  one half at the first position and, further on, the estimate at the position before (a
  position seldom reached leans on it). A drafter may bring its measured acceptance by
  position (the block drafter's evaluation, block_drafter.py): position i then starts at
  its measured rate given position i - 1, scaled by how position i - 1 has done against
  its own. Without such a prior a drafter that lands more than half its first drafts
  still looks, until it has drafted, no better than half: at costs where k drafts cost
  well over a plain pass, the policy then chose not to draft, and so never learned.
"""

from __future__ import annotations

DRAFT_MEMORY = 0.98  # each new draft at a position keeps this share of the earlier ones' weight
PRIOR_DRAFTS = 2  # the prior at a position weighs as much as this many drafts
MAX_POSITIONS = 16
NO_PRIOR = 0.5  # the first position's prior when the drafter brings none


def conditional(cumulative: tuple[float, ...]) -> tuple[float, ...]:
    """Acceptance of draft i given drafts 1..i-1 accepted, from the share of rows whose draft
    i was accepted (an evaluation's `acceptance_at`); stops at the first zero."""
    out, before = [], 1.0
    for share in cumulative[:MAX_POSITIONS]:
        if share <= 0 or before <= 0:
            break
        out.append(min(share / before, 1.0))
        before = share
    return tuple(out)


class PositionAcceptance:
    """Decayed counts, per draft position i (1-based), of drafts that were reached and of
    those accepted. prior: acceptance at each position given the one before accepted."""

    def __init__(self, prior: tuple[float, ...] = ()) -> None:
        self.prior = tuple(prior)
        self.reached = [0.0] * (MAX_POSITIONS + 1)
        self.hit = [0.0] * (MAX_POSITIONS + 1)

    def add(self, accepted_lengths: tuple[int, ...]) -> None:
        """One pass's histogram: [m] drafting rows that kept m drafts, m = 0..k. Rows are
        taken to have carried k drafts each (drafters draft every row alike; a cut row by
        row_lengths.py carries k or none, or is the pass's only row)."""
        for i in range(1, min(len(accepted_lengths), MAX_POSITIONS + 1)):  # a tree's leaves: past 16
            n, ok = sum(accepted_lengths[i - 1 :]), sum(accepted_lengths[i:])
            if n:
                keep = DRAFT_MEMORY**n
                self.reached[i] = keep * self.reached[i] + n
                self.hit[i] = keep * self.hit[i] + ok

    def add_tail(self, after: int, landed: int, length: int) -> None:
        """A row's cut drafts at positions after + 1 .. after + length, settled by its output
        once its `after` kept drafts all landed: the first `landed` of them landed, the one
        after them (if any) did not. Without these, positions past a cut are estimated from
        the rows confident enough to carry them, which land more than rows in general."""
        for i in range(after + 1, min(after + min(landed + 1, length), MAX_POSITIONS) + 1):
            self.reached[i] = DRAFT_MEMORY * self.reached[i] + 1
            self.hit[i] = DRAFT_MEMORY * self.hit[i] + (i <= after + landed)

    def at(self, i: int) -> float:
        """Acceptance at position i given every earlier draft accepted."""
        rate = prior_before = NO_PRIOR
        for j in range(1, i + 1):
            prior = self.prior[j - 1] if j <= len(self.prior) else prior_before
            lean = min(rate * prior / prior_before, 1.0)  # without a prior: the estimate before
            rate = (self.hit[j] + PRIOR_DRAFTS * lean) / (self.reached[j] + PRIOR_DRAFTS)
            prior_before = prior
        return rate

    def expected_tokens(self, k: int) -> float:
        """Tokens a row commits from a pass carrying k drafts: the target's own one plus the
        accepted drafts."""
        total = reach = 1.0
        for i in range(1, k + 1):
            reach *= self.at(i)
            total += reach
        return total
