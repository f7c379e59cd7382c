"""Which passes draft. Fixed policies look only at the pass width; `adaptive` keeps an
online cost model from the engine's own measured decode-pass durations, by width and
by verify shape (with or without drafts), and a rolling acceptance rate, and drafts
when the expected accepted tokens pay for the wider verify.

What drafting costs is a ratio: the median drafting pass over the median plain pass,
both taken from the same recent run of steady passes (the engine feeds only passes
between two of the same shape, so switching costs, such as a lazy MTP catching up or
the pipeline restarting, never count). Passes measured minutes apart do not compare on
a shared machine, whose speed drifts more than drafting changes it; passes side by side
do, and a one-off slow pass cannot move a median."""
from __future__ import annotations

from collections import deque
from statistics import median
from typing import Optional

EMA = 0.2            # weight of the newest acceptance observation
HISTORY = 24         # the recent steady passes of a width that a ratio is taken from
REFRESH_EVERY = 64   # re-measure the branch not taken after this many decisions ...
REFRESH_LEN = 4      # ... for this many passes in a row, so some of them are steady;
MAX_BACKOFF = 16     # each re-measurement that confirms the branch doubles the wait, up to
                     # this many times REFRESH_EVERY (a lazy MTP pays a catch-up for each)
SWITCH_MARGIN = 0.10 # leave the current branch only when the other pays by this much


class DraftPolicy:
    def __init__(self, policy: str, max_width: Optional[int]):
        self.adaptive = policy == "adaptive"
        self.max_width = max_width          # None: no fixed limit
        self.history: dict[int, deque] = {}    # width -> recent (drafted, duration_ns)
        self.ratio: dict[int, float] = {}      # width -> drafting pass cost / plain pass cost
        self.seen: set[tuple[int, bool]] = set()
        self.acceptance = 0.5               # prior until drafts are observed
        self.decisions: dict[int, int] = {}
        self.drafting: dict[int, bool] = {}  # the branch currently taken, per width
        self.refresh_at: dict[int, int] = {}  # decision count at which a width re-measures next
        self.backoff: dict[int, int] = {}     # its current wait, in units of REFRESH_EVERY
        self.refreshing: dict[int, bool] = {} # the branch a running re-measurement started from

    def permits(self, width: int) -> bool:
        """May a pass of this width verify the drafts its rows carry?"""
        return self.adaptive or self.max_width is None or width <= self.max_width

    def decide(self, width: int) -> bool:
        """Should rows draft for a next pass expected to hold `width` rows? Called once a pass."""
        if width == 0:
            return False
        if not self.adaptive:
            return self.permits(width)
        if width not in self.ratio:        # measure both shapes before trusting either
            return (width, True) not in self.seen
        n = self.decisions[width] = self.decisions.get(width, 0) + 1
        gain = (1.0 + self.acceptance) / self.ratio[width]  # tokens per second, drafting / not
        current = self.drafting.get(width, gain > 1.0)
        pays = gain > 1.0 - SWITCH_MARGIN if current else gain > 1.0 + SWITCH_MARGIN
        self.drafting[width] = pays
        return self._refresh(width, n, pays)

    def _refresh(self, width: int, n: int, pays: bool) -> bool:
        """The decision to carry out: the other branch while re-measuring it; back off
        while re-measurements keep confirming the branch, start over when one flips it."""
        start = self.refresh_at.setdefault(width, REFRESH_EVERY)
        if n == start:
            self.refreshing[width] = pays
        if start <= n < start + REFRESH_LEN:
            return not self.refreshing[width]
        if n == start + REFRESH_LEN:
            confirmed = pays == self.refreshing.pop(width)
            wait = min(2 * self.backoff.get(width, 1), MAX_BACKOFF) if confirmed else 1
            self.backoff[width] = wait
            self.refresh_at[width] = n + wait * REFRESH_EVERY
        return pays

    def observe(self, width: int, drafted: bool, duration_ns: int, n_drafts: int, n_accepted: int) -> None:
        """Feed one steady decode pass back into the model."""
        if not self.adaptive:
            return
        self.seen.add((width, drafted))
        recent = self.history.setdefault(width, deque(maxlen=HISTORY))
        recent.append((drafted, duration_ns))
        with_d = [d for was, d in recent if was]
        without = [d for was, d in recent if not was]
        if with_d and without:             # both shapes side by side: the ratio is current
            self.ratio[width] = median(with_d) / median(without)
        if n_drafts:
            self.acceptance = (1 - EMA) * self.acceptance + EMA * (n_accepted / n_drafts)
