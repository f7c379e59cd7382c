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
- A measured prior weighs MEASURED_PRIOR_DRAFTS drafts at first, decaying as the run's own
  drafts at the position come in (DRAFT_MEMORY each, down to PRIOR_DRAFTS): weighed as two,
  a row's first two missed drafts (a fresh drafter context) halved position 1's estimate,
  drafting stopped paying, and with nothing drafted there was nothing to learn from.
- Counts also age with every decode pass that verified no drafts (IDLE_MEMORY): the text
  moves on, and what drafting met a while back says less of what it would meet now. A
  policy that stopped drafting on a bad stretch learns nothing while it does not draft,
  so without this it stayed stopped (on unseen text, for tens of passes at a time, where
  drafting then paid); with it, its estimates lean back on the drafter's measured prior
  until it drafts again (without a measured prior they stay: the fallback is a guess).
- The estimates are kept until the counts change: the policy reads them every pass.
"""

from __future__ import annotations

DRAFT_MEMORY = 0.98  # each new draft at a position keeps this share of the earlier ones' weight
PRIOR_DRAFTS = 2  # the prior at a position weighs as much as this many drafts ...
MEASURED_PRIOR_DRAFTS = 16  # ... or this many when the drafter measured it
IDLE_MEMORY = 0.9  # ... and each decode pass without drafts this share
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
        self.prior_weight = MEASURED_PRIOR_DRAFTS if self.prior else PRIOR_DRAFTS  # before any draft
        self.reached = [0.0] * (MAX_POSITIONS + 1)
        self.hit = [0.0] * (MAX_POSITIONS + 1)
        self.drafts = [0] * (MAX_POSITIONS + 1)  # drafts reached at each position, not decayed
        self._rates: list[float] = []  # at(1), at(2), ... as far as asked since the last count
        # read every pass: each position's prior and the weight it has left, kept as they change
        self._priors = [NO_PRIOR] + [self._prior(j) for j in range(1, MAX_POSITIONS + 1)]
        self._weights = [float(self.prior_weight)] * (MAX_POSITIONS + 1)
        self._counted = 0  # the furthest position any draft reached (past it the counts are 0)

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
                self.drafts[i] += n
                self._weigh(i)
                self._rates = []

    def age(self) -> None:
        """A decode pass verified no drafts: every count keeps IDLE_MEMORY of its weight.
        Only toward a measured prior: without one the estimates would lean on a guess."""
        if not self.prior or not self._counted:  # nothing counted: nothing ages, the estimates stand
            return
        for i in range(1, self._counted + 1):
            self.reached[i] *= IDLE_MEMORY
            self.hit[i] *= IDLE_MEMORY
        self._rates = []

    def add_tail(self, after: int, landed: int, length: int) -> None:
        """A row's cut drafts at positions after + 1 .. after + length, settled by its output
        once its `after` kept drafts all landed: the first `landed` of them landed, the one
        after them (if any) did not. Without these, positions past a cut are estimated from
        the rows confident enough to carry them, which land more than rows in general."""
        for i in range(after + 1, min(after + min(landed + 1, length), MAX_POSITIONS) + 1):
            self.reached[i] = DRAFT_MEMORY * self.reached[i] + 1
            self.hit[i] = DRAFT_MEMORY * self.hit[i] + (i <= after + landed)
            self.drafts[i] += 1
            self._weigh(i)
            self._rates = []

    def _weigh(self, i: int) -> None:
        """Position i has new drafts: its prior's weight after them (decaying, never below
        PRIOR_DRAFTS), and it is among the positions counted (those age() reaches)."""
        self._weights[i] = max(PRIOR_DRAFTS, self.prior_weight * DRAFT_MEMORY ** self.drafts[i])
        self._counted = max(self._counted, i)

    def at(self, i: int) -> float:
        """Acceptance at position i given every earlier draft accepted."""
        return self._upto(i)[i - 1]

    def expected_tokens(self, k: int) -> float:
        """Tokens a row commits from a pass carrying k drafts: the target's own one plus the
        accepted drafts."""
        total = reach = 1.0
        for rate in self._upto(k)[:k]:
            reach *= rate
            total += reach
        return total

    def _upto(self, i: int) -> list[float]:
        """at(1) .. at(i), kept until the counts change (the policy asks every pass)."""
        rates = self._rates
        if len(rates) < i:
            j = len(rates) + 1
            rate = rates[-1] if rates else NO_PRIOR
            priors, weights, hit, reached = self._priors, self._weights, self.hit, self.reached
            prior_before = priors[j - 1] if rates else NO_PRIOR
            for j in range(j, i + 1):
                prior = priors[j]
                lean = min(rate * prior / prior_before, 1.0)  # without a prior: the estimate before
                w = weights[j]
                rate = (hit[j] + w * lean) / (reached[j] + w)
                rates.append(rate)
                prior_before = prior
        return rates

    def _prior(self, j: int) -> float:
        """Position j's prior given the one before: past the drafter's last, its last; none
        without one (NO_PRIOR)."""
        return self.prior[min(j, len(self.prior)) - 1] if self.prior else NO_PRIOR
