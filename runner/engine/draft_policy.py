"""Which passes draft. Fixed policies look only at the pass width; `adaptive` keeps an
online cost model from the engine's own measured decode-pass durations, by width and
by verify shape (with or without drafts), and a rolling acceptance rate, and drafts
when the expected accepted tokens pay for the wider verify.

What drafting costs is a ratio, measured on steady passes (the engine feeds only passes
between two of the same shape, so switching costs, such as a lazy MTP catching up or
the pipeline restarting, never count). Each pass of the branch in the minority among a
width's recent passes (a re-measurement's) is compared with the median of the other
branch around it; the ratio is the median of the last such comparisons, a few
re-measurements' worth. Passes measured minutes apart do not compare on a shared
machine, whose speed drifts more than drafting changes it; passes side by side do, and
no one window of passes, slow or fast, decides alone.

Re-measuring the branch not taken costs something: under lazy sync a switch to drafting
first catches the MTP up over every position it skipped (measured here: about 20 ms for
four rows 140 positions behind, some eight plain passes). So the policy prices each
re-measurement, by what its passes took beyond the branch kept, and starts the next only
once the passes since have taken EXPLORE_SHARE times that much longer: exploring costs
at most about that share of a width's time, however often a cheap one may come round.
Near break-even (drafting gains some 8% at one row here) that keeps the estimate fed."""
from __future__ import annotations

from collections import deque
from statistics import median
from typing import Optional

DRAFT_MEMORY = 0.98  # each new draft keeps this share of the earlier drafts' weight (about the last 50)
PRIOR_DRAFTS = 2     # acceptance starts as if this many drafts had been half accepted
HISTORY = 24         # the recent steady passes of a width that comparisons are made in
MIN_SIDE = 3         # passes of a branch among them before it is compared with the other
RATIOS = 12          # comparisons the ratio is the median of
REFRESH_EVERY = 64   # re-measure the branch not taken at most every this many decisions ...
REFRESH_LEN = 6      # ... for this many passes in a row, so some of them are steady
SWITCH_MARGIN = 0.04 # leave the current branch only when the other pays by this much
                     # (less than drafting's gain at one row here, about 8%, or it never starts)
EXPLORE_SHARE = 0.02 # and no sooner than its cost is this share of the width's time since


class DraftPolicy:
    def __init__(self, policy: str, max_width: Optional[int]):
        self.adaptive = policy == "adaptive"
        self.max_width = max_width          # None: no fixed limit
        self.history: dict[int, deque] = {}    # width -> recent (drafted, duration_ns)
        self.ratio: dict[int, float] = {}      # width -> drafting pass cost / plain pass cost
        self.samples: dict[int, deque] = {}    # width -> the latest side-by-side comparisons
        self.seen: dict[tuple[int, bool], int] = {}  # steady passes observed per (width, drafted)
        self.drafts_seen = self.accepted_seen = 0.0   # decayed counts of recent drafts
        self.decisions: dict[int, int] = {}
        self.drafting: dict[int, bool] = {}  # the branch currently taken, per width
        self.refresh_at: dict[int, int] = {}  # decision count at which a width re-measures next
        self.refreshing: dict[int, bool] = {} # the branch a running re-measurement started from
        self.spent: dict[int, list] = {}      # width -> [ns, passes] of every decode pass
        self.pricing: dict[int, tuple] = {}   # width -> (spent at its start, branch kept) of the
                                              # last re-measurement, until its passes are in
        self.explore_until: dict[int, int] = {}  # width -> spent ns before the next may start

    def permits(self, width: int) -> bool:
        """May a pass of this width verify the drafts its rows carry?"""
        return self.adaptive or self.max_width is None or width <= self.max_width

    def decide(self, width: int) -> bool:
        """Should rows draft for a next pass expected to hold `width` rows? Called once a pass."""
        if width == 0:
            return False
        if not self.adaptive:
            return self.permits(width)
        # A width not measured yet follows the nearest wider one measured (drafting pays
        # less as rows are added) until its own re-measurements give it a ratio: a width
        # that lasts a few passes, such as a batch's tail, would otherwise pay a lazy
        # catch-up to explore. With no wider one, measure both shapes before trusting either.
        wider = [w for w in self.ratio if w > width]
        ratio = self.ratio.get(width) or (self.ratio[min(wider)] if wider else None)
        if ratio is None:
            return self.seen.get((width, True), 0) < MIN_SIDE
        n = self.decisions[width] = self.decisions.get(width, 0) + 1
        gain = (1.0 + self.acceptance) / ratio  # tokens per second, drafting / not
        current = self.drafting.get(width, gain > 1.0)
        pays = gain > 1.0 - SWITCH_MARGIN if current else gain > 1.0 + SWITCH_MARGIN
        self.drafting[width] = pays
        return self._refresh(width, n, pays)

    def _refresh(self, width: int, n: int, pays: bool) -> bool:
        """The decision to carry out: the other branch while re-measuring it (once its
        price allows, see _price), else the branch that pays."""
        start = self.refresh_at.setdefault(width, REFRESH_EVERY)
        spent = self.spent.get(width, [0, 0])
        self._price(width, spent)
        if n == start and spent[0] < self.explore_until.get(width, 0):
            start = self.refresh_at[width] = n + 1       # not yet paid for: look again next pass
        if n == start:
            self.refreshing[width] = pays
            self.pricing[width] = (tuple(spent), pays)
        if start <= n < start + REFRESH_LEN:
            return not self.refreshing[width]
        if n == start + REFRESH_LEN:
            del self.refreshing[width]
            self.refresh_at[width] = n + REFRESH_EVERY
        return pays

    def _price(self, width: int, spent: list) -> None:
        """Once a re-measurement's passes (and the pass back) have run: what they took
        beyond as many passes of the branch kept, and from it the earliest next start."""
        if width not in self.pricing or spent[1] < self.pricing[width][0][1] + REFRESH_LEN + 1:
            return
        (ns0, passes0), kept = self.pricing.pop(width)
        base = [d for was, d in self.history.get(width, ()) if was == kept]
        if base and self.drafting.get(width, kept) == kept:     # confirmed; a flip bought a better branch
            excess = spent[0] - ns0 - (spent[1] - passes0) * median(base)
            self.explore_until[width] = spent[0] + int(max(excess, 0) / EXPLORE_SHARE)
        else:
            self.explore_until.pop(width, None)

    def spend(self, width: int, duration_ns: int) -> None:
        """Every decode pass, steady or not: what a width's passes took in all."""
        if self.adaptive:
            acc = self.spent.setdefault(width, [0, 0])
            acc[0] += duration_ns
            acc[1] += 1

    def observe(self, width: int, drafted: bool, duration_ns: int, n_drafts: int, n_accepted: int) -> None:
        """Feed one steady decode pass back into the model."""
        if not self.adaptive:
            return
        self.seen[width, drafted] = self.seen.get((width, drafted), 0) + 1
        recent = self.history.setdefault(width, deque(maxlen=HISTORY))
        recent.append((drafted, duration_ns))
        same = sum(was == drafted for was, _ in recent)
        other = [d for was, d in recent if was != drafted]
        if len(other) >= MIN_SIDE and same <= len(other):   # this pass beside the other branch
            around = median(other)
            samples = self.samples.setdefault(width, deque(maxlen=RATIOS))
            samples.append(duration_ns / around if drafted else around / duration_ns)
            if len(samples) >= MIN_SIDE:
                self.ratio[width] = median(samples)
        if n_drafts:                        # each draft weighs the same, whatever the width
            keep = DRAFT_MEMORY ** n_drafts
            self.drafts_seen = keep * self.drafts_seen + n_drafts
            self.accepted_seen = keep * self.accepted_seen + n_accepted

    @property
    def acceptance(self) -> float:
        """Share of recent drafts accepted; a weak prior of one half, so the first few
        drafts already count (re-measurements at one row bring four or so at a time)."""
        return (self.accepted_seen + PRIOR_DRAFTS / 2) / (self.drafts_seen + PRIOR_DRAFTS)
