"""Which passes draft. Fixed policies look only at the pass width; `adaptive` keeps an
online cost model from the engine's own measured decode-pass durations, one `WidthModel`
per width, and a rolling acceptance rate, and drafts when the expected accepted tokens
pay for the wider verify.

What drafting costs is a ratio, measured on steady passes (`record` feeds only passes
between two of the same shape, so switching costs, such as a lazy MTP catching up or
the pipeline restarting, never count). Each pass of the branch in the minority among a
width's recent passes (a re-measurement's) is compared with the median of the other
branch around it; the ratio is the median of the last such comparisons, a few
re-measurements' worth. Passes measured minutes apart do not compare on a shared
machine, whose speed drifts more than drafting changes it; passes side by side do, and
no one window of passes, slow or fast, decides alone.

Re-measuring the branch not taken costs something: under lazy sync a switch to drafting
first catches the MTP up over every position it skipped, which can cost as much as
several plain passes. So the policy prices each re-measurement, by what its passes took
beyond the branch kept, and starts the next only once the passes since have taken
EXPLORE_SHARE times that much longer: exploring costs at most about that share of a
width's time, however often a cheap one may come round. Near break-even that keeps the
estimate fed. (`runner bench --mtp` shows what drafting gains at one and four rows on a
machine, arm against arm; `runner bench --pass-cost` what a drafting pass costs.)"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median
from typing import NamedTuple, Optional

DRAFT_MEMORY = 0.98  # each new draft keeps this share of the earlier drafts' weight (about the last 50)
PRIOR_DRAFTS = 2  # acceptance starts as if this many drafts had been half accepted
HISTORY = 24  # the recent steady passes of a width that comparisons are made in
MIN_SIDE = 3  # passes of a branch among them before it is compared with the other
RATIOS = 12  # comparisons the ratio is the median of
REFRESH_EVERY = 64  # re-measure the branch not taken at most every this many decisions ...
REFRESH_LEN = 6  # ... for this many passes in a row, so some of them are steady
SWITCH_MARGIN = 0.04  # leave the current branch only when the other pays by this much (below
# drafting's gain at one row, or the policy never switches to drafting there)
EXPLORE_SHARE = 0.02  # and no sooner than its cost is this share of the width's time since


class Branch(NamedTuple):
    """A pass's shape as far as its cost goes."""

    kind: str  # "prefill" | "decode" | "mixed"
    width: int  # rows
    drafted: bool  # it verifies drafts


@dataclass
class WidthModel:
    """What the adaptive policy knows about decode passes of one width."""

    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))  # recent steady (drafted, ns)
    comparisons: deque = field(default_factory=lambda: deque(maxlen=RATIOS))  # latest side-by-side ratios
    ratio: Optional[float] = None  # drafting pass cost / plain pass cost (None: not compared yet)
    seen: dict = field(default_factory=lambda: {True: 0, False: 0})  # steady passes, by drafted
    decisions: int = 0  # decisions taken with a ratio to go by
    drafting: Optional[bool] = None  # the branch currently taken
    refresh_at: int = REFRESH_EVERY  # decision count at which the branch not taken is re-measured
    refreshing: Optional[bool] = None  # while re-measuring: the branch it started from
    spent_ns: int = 0  # what every decode pass of this width took, steady or not
    spent_passes: int = 0
    pricing: Optional[tuple] = None  # (spent_ns, spent_passes, branch kept) when the last
    # re-measurement started, until its passes are in
    explore_until: int = 0  # spent_ns before which the next re-measurement may not start

    def observe(self, drafted: bool, duration_ns: int) -> None:
        """One steady pass: compared with the other branch around it when it is in the minority."""
        self.seen[drafted] += 1
        self.history.append((drafted, duration_ns))
        same = sum(was == drafted for was, _ in self.history)
        other = [d for was, d in self.history if was != drafted]
        if len(other) >= MIN_SIDE and same <= len(other):
            around = median(other)
            self.comparisons.append(duration_ns / around if drafted else around / duration_ns)
            if len(self.comparisons) >= MIN_SIDE:
                self.ratio = median(self.comparisons)

    def spend(self, duration_ns: int) -> None:
        self.spent_ns += duration_ns
        self.spent_passes += 1

    def choose(self, gain: float) -> bool:
        """The branch to take, given drafting's gain in tokens per second (drafting / not):
        the one that pays, with a margin to leave the current one, or the other while
        re-measuring it."""
        self.decisions += 1
        current = gain > 1.0 if self.drafting is None else self.drafting
        pays = gain > 1.0 - SWITCH_MARGIN if current else gain > 1.0 + SWITCH_MARGIN
        self.drafting = pays
        return self._refresh(pays)

    def _refresh(self, pays: bool) -> bool:
        """The decision to carry out: the other branch while re-measuring it (once its
        price allows, see _price), else the branch that pays."""
        n, start = self.decisions, self.refresh_at
        self._price()
        if n == start and self.spent_ns < self.explore_until:
            start = self.refresh_at = n + 1  # not yet paid for: look again next pass
        if n == start:
            self.refreshing = pays
            self.pricing = (self.spent_ns, self.spent_passes, pays)
        if start <= n < start + REFRESH_LEN:
            return not self.refreshing
        if n == start + REFRESH_LEN:
            self.refreshing = None
            self.refresh_at = n + REFRESH_EVERY
        return pays

    def _price(self) -> None:
        """Once a re-measurement's passes (and the pass back) have run: what they took
        beyond as many passes of the branch kept, and from it the earliest next start."""
        if self.pricing is None or self.spent_passes < self.pricing[1] + REFRESH_LEN + 1:
            return
        ns0, passes0, kept = self.pricing
        self.pricing = None
        base = [d for was, d in self.history if was == kept]
        if base and self.drafting == kept:  # confirmed; a flip bought a better branch
            excess = self.spent_ns - ns0 - (self.spent_passes - passes0) * median(base)
            self.explore_until = self.spent_ns + int(max(excess, 0) / EXPLORE_SHARE)
        else:
            self.explore_until = 0


class DraftPolicy:
    def __init__(self, policy: str, max_width: Optional[int], lazy_mtp: bool = False):
        self.adaptive = policy == "adaptive"
        self.max_width = max_width  # None: no fixed limit
        self.lazy_mtp = lazy_mtp  # the MTP layer runs only for drafting passes (mtp_sync lazy)
        self.widths: dict[int, WidthModel] = {}
        self.drafts_seen = self.accepted_seen = 0.0  # decayed counts of recent drafts
        self._last: Optional[Branch] = None  # the last committed pass's branch

    def width(self, width: int) -> WidthModel:
        if width not in self.widths:
            self.widths[width] = WidthModel()
        return self.widths[width]

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
        own = self.widths.get(width)
        wider = [w for w, m in self.widths.items() if w > width and m.ratio is not None]
        ratio = (own.ratio if own else None) or (self.widths[min(wider)].ratio if wider else None)
        if ratio is None:
            return (own.seen[True] if own else 0) < MIN_SIDE
        return self.width(width).choose((1.0 + self.acceptance) / ratio)

    def record(
        self,
        branch: Branch,
        duration_ns: int,
        n_drafts: int,
        n_accepted: int,
        *,
        mtp_ran: bool,
        ahead: bool,
        queued: Optional[Branch],
    ) -> None:
        """Learn from one committed pass; called for every pass, in order. ahead: it was
        launched before the previous pass was committed; queued: the branch of the pass
        launched ahead of it (None: none). Every decode pass counts toward its width's
        time; the cost model learns from pure, steady ones only. Pure: a drafting pass
        that ran the MTP or a plain one that did not (under lazy sync; under eager sync
        the MTP's cost is sunk). Steady: between passes of its own branch and pipelining
        regime (a switch costs extra)."""
        steady = (
            branch == self._last and ahead == (queued is not None) and (queued is None or queued == branch)
        )
        self._last = branch
        if branch.kind != "decode":
            return
        self.spend(branch.width, duration_ns)
        pure = not self.lazy_mtp or mtp_ran == branch.drafted
        if pure and steady:
            self.observe(branch.width, branch.drafted, duration_ns, n_drafts, n_accepted)

    def spend(self, width: int, duration_ns: int) -> None:
        """Every decode pass, steady or not: what a width's passes took in all."""
        if self.adaptive:
            self.width(width).spend(duration_ns)

    def observe(self, width: int, drafted: bool, duration_ns: int, n_drafts: int, n_accepted: int) -> None:
        """Feed one steady decode pass back into the model."""
        if not self.adaptive:
            return
        self.width(width).observe(drafted, duration_ns)
        if n_drafts:  # each draft weighs the same, whatever the width
            keep = DRAFT_MEMORY**n_drafts
            self.drafts_seen = keep * self.drafts_seen + n_drafts
            self.accepted_seen = keep * self.accepted_seen + n_accepted

    @property
    def acceptance(self) -> float:
        """Share of recent drafts accepted; a weak prior of one half, so the first few
        drafts already count (re-measurements at one row bring four or so at a time)."""
        return (self.accepted_seen + PRIOR_DRAFTS / 2) / (self.drafts_seen + PRIOR_DRAFTS)
