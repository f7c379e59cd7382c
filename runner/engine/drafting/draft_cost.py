"""What the adaptive draft policy knows about the decode passes of one width: each draft
length's cost relative to the others, measured side by side, and when to re-measure a
draft length not taken.

- A branch is a draft length k (0: no draft). A steady pass of a branch in the minority
  among the width's recent passes is compared with the median of each other branch around
  it; a pair's cost ratio is the median of its last such comparisons. Passes minutes apart
  do not compare on a shared machine, whose speed drifts more than drafting changes it.
- `choose` keeps the branch taken until another pays by SWITCH_MARGIN. It explores in
  windows of REFRESH_LEN passes: a draft length next to the measured ones while the one at
  that edge is within CLIMB of the best (the climb: drafting pays over a range of k, so a
  worse edge ends it), a neighbour of the branch kept compared with it fewer than SETTLED
  times (a few passes on a shared machine can be a neighbour's burst), and every
  REFRESH_EVERY decisions a neighbour of the branch kept. At a width above one, a
  neighbour is re-measured only while its known cost prices it within SWITCH_MARGIN of
  the best (about to pay); where new prompts wait for the rows decoding (the engine's
  prefill_hold, `step_past`), the nearest such length on each side of the branch kept,
  stepping past lengths priced out (one draft can lose where two or four pay: the block
  drafter's pass costs the same at every length; a refresh stuck on it kept four rows at
  0 for whole runs while 2 and 4 priced level). Any drafting pass there sets the rows'
  lengths apart, so rows
  that started in step stop finishing together (a new prompt's prefill then stalls the
  others), a price no pass's duration shows. A lone row is re-measured all the same:
  the warm-up's costs time passes one at a time, while the engine overlaps a pass
  without drafts with building the next, so where the host's work is much of a pass
  they price drafting far too high, and only passes side by side correct them.
- Exploring is priced: a window's passes cost what they took beyond as many passes of the
  branch kept (a lazy MTP catching up is part of it; each pass's excess is clipped at
  CLIP times the kept pass, since one that long is a burst or a first-time trace, not
  drafting's price), and the next window waits until the passes since have taken
  1 / EXPLORE_SHARE times that, and at least GAP passes of the branch kept.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import median
from typing import Optional

HISTORY = 24  # the recent steady passes of a width that comparisons are made in
MIN_SIDE = 3  # passes of a branch among them before it is compared with another
RATIOS = 12  # comparisons a pair's ratio is the median of
REFRESH_EVERY = 64  # re-measure a branch not taken at most every this many decisions ...
REFRESH_LEN = 6  # ... for this many passes in a row, so some of them are steady
SWITCH_MARGIN = 0.04  # leave the current branch only when another pays by this much
EXPLORE_SHARE = 0.02  # and no sooner than its cost is this share of the width's time since
CLIMB = 0.85  # try the next draft length past an edge while the edge pays this share of the best
SETTLED = 6  # comparisons with the branch kept before a neighbour waits for the refresh
GAP = 12  # passes of the branch kept between two windows: the majority they are compared with
CLIP = 3.0  # a window pass's excess counts up to this many kept passes


def neighbours(lengths: tuple[int, ...], k: int) -> list[int]:
    """The draft lengths next to k among `lengths` (sorted), the shorter first."""
    i = lengths.index(k)
    return [lengths[j] for j in (i - 1, i + 1) if 0 <= j < len(lengths)]


def nearest(lengths: tuple[int, ...], k: int, accept) -> list[int]:
    """On each side of k among `lengths` (sorted), the nearest length `accept` takes, the
    shorter first: with every length accepted, k's neighbours."""
    i = lengths.index(k)
    sides = (lengths[:i][::-1], lengths[i + 1 :])
    return [n for n in (next((m for m in side if accept(m)), None) for side in sides) if n is not None]


def borrowed_ratios(widths: dict, width: int) -> tuple[dict[tuple[int, int], float], bool]:
    """widths[width]'s own cost ratios, pairs it lacks filled from the nearest wider width
    that has them; and whether any was borrowed (so the width has none of its own)."""
    own = widths[width].ratios()
    merged = dict(own)
    for w in sorted(w for w in widths if w > width):
        for pair, r in widths[w].ratios().items():
            merged.setdefault(pair, r)
    return merged, not own and bool(merged)


@dataclass
class WidthModel:
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY))  # recent steady (k, ns)
    comparisons: dict = field(default_factory=dict)  # (a, b), a > b: deque of c(a) / c(b)
    seen: Counter = field(default_factory=Counter)  # steady passes, by k
    decisions: int = 0  # decisions taken with costs to go by
    kept: Optional[int] = None  # the branch currently taken
    trying: Optional[int] = None  # the branch a window is measuring
    window_end: int = -GAP  # decision count at which the last window was over
    refresh_at: int = REFRESH_EVERY  # decision count at which a neighbour is re-measured
    turns: int = 0  # re-measurements started (they alternate between the two neighbours)
    spent_ns: int = 0  # what every decode pass of this width took, steady or not
    spent_passes: int = 0
    pricing: Optional[tuple] = None  # (spent_passes, kept, kept's median pass) when the last
    # window started, until its passes are in
    excess_ns: float = 0.0  # what the priced window's passes took beyond the kept ones, clipped
    explore_until: int = 0  # spent_ns before which the next window may not start
    _ratios: Optional[dict] = None  # ratios() until the next comparison (asked every pass)
    _run_k: Optional[int] = None  # the branch of the latest steady passes ...
    _run: int = 0  # ... and how many in a row
    compared: int = 0  # comparisons made so far (a changed count: the ratios may have moved)

    def observe(self, k: int, duration_ns: int) -> None:
        """One steady pass: compared with each other branch around it while in the minority."""
        self.seen[k] += 1
        self._run = self._run + 1 if self._run_k == k else 1
        self._run_k = k
        self.history.append((k, duration_ns))
        if self._run >= len(self.history):  # the history is the last passes, all of k: none to compare
            return
        counts = Counter(was for was, _ in self.history)
        for other, n in counts.items():
            if other == k or n < MIN_SIDE or counts[k] > n:
                continue
            around = median(d for was, d in self.history if was == other)
            pair, ratio = (k, other), duration_ns / around
            if k < other:
                pair, ratio = (other, k), 1 / ratio
            self.comparisons.setdefault(pair, deque(maxlen=RATIOS)).append(ratio)
            self._ratios, self.compared = None, self.compared + 1

    def ratios(self) -> dict[tuple[int, int], float]:
        """c(a) / c(b) for each pair (a, b), a > b, compared often enough (a fresh dict)."""
        if self._ratios is None:
            self._ratios = {p: median(c) for p, c in self.comparisons.items() if len(c) >= MIN_SIDE}
        return dict(self._ratios)

    def typical_ns(self, k: int) -> Optional[float]:
        """The median of k's recent steady passes (None: none among them)."""
        own = [d for was, d in self.history if was == k]
        return median(own) if own else None

    def spend(self, duration_ns: int) -> None:
        self.spent_ns += duration_ns
        self.spent_passes += 1
        if self.pricing is not None and self.spent_passes <= self.pricing[0] + REFRESH_LEN + 1:
            base = self.pricing[2]
            self.excess_ns += min(max(duration_ns - base, 0), CLIP * base)

    def bootstrap(self, start: int, lengths: tuple[int, ...]) -> int:
        """No costs to go by yet: measure `start`, then the length next to it."""
        return start if self.seen[start] < MIN_SIDE else neighbours(lengths, start)[0]

    def choose(
        self,
        values: dict[int, float],
        lengths: tuple[int, ...],
        climb: bool,
        batched: bool = False,
        step_past: bool = False,
    ) -> int:
        """The draft length for the next pass. values: expected tokens per unit of time for
        the lengths with a known cost; lengths: every candidate; climb: explore lengths
        past the measured edges (not for a width that borrows its costs); batched: the
        width is above one (only a length priced about to pay is re-measured: a neighbour,
        or with step_past the nearest such on each side)."""
        self.decisions += 1
        self._price()
        if self.trying is not None and self.decisions < self.window_end:
            return self.trying
        self.trying = None
        best = max(values, key=values.__getitem__)
        if self.kept not in values or values[best] > values[self.kept] * (1 + SWITCH_MARGIN):
            self.kept = best
        target = self._to_explore(values, lengths, climb, batched, step_past)
        if target is None or self.spent_ns < self.explore_until or self.decisions < self.window_end + GAP:
            return self.kept  # nothing to explore, or not yet paid for: look again next pass
        self.trying, self.window_end = target, self.decisions + REFRESH_LEN
        self.refresh_at, self.turns = self.window_end + REFRESH_EVERY, self.turns + 1
        kept = [d for was, d in self.history if was == self.kept] or [d for _, d in self.history]
        self.pricing, self.excess_ns = (self.spent_passes, self.kept, median(kept) if kept else 0), 0.0
        return target

    def _to_explore(
        self, values: dict[int, float], lengths: tuple[int, ...], climb: bool, batched: bool, step_past: bool
    ) -> Optional[int]:
        top = max(values.values())

        def may_pay(k: int) -> bool:  # batched, only a length about to pay is re-measured
            return not batched or values.get(k, top) >= (1 - SWITCH_MARGIN) * top

        if climb:
            for k in neighbours(lengths, self.kept):
                pair = (max(k, self.kept), min(k, self.kept))
                if k in values and len(self.comparisons.get(pair, ())) < SETTLED and may_pay(k):
                    return k
            for edge, step in ((max(values), 1), (min(values), -1)):
                i = lengths.index(edge) + step
                if 0 <= i < len(lengths) and values[edge] >= CLIMB * top:
                    return lengths[i]
        if self.decisions < self.refresh_at:
            return None
        if step_past:
            near = nearest(lengths, self.kept, may_pay)
        else:
            near = [k for k in neighbours(lengths, self.kept) if may_pay(k)]
        if not near:
            self.refresh_at = self.decisions + REFRESH_EVERY
            return None
        return near[self.turns % len(near)]

    def _price(self) -> None:
        """Once a window's passes (and the pass back) have run: what they took beyond as
        many passes of the branch kept, and from it the earliest next window."""
        if self.pricing is None or self.spent_passes < self.pricing[0] + REFRESH_LEN + 1:
            return
        kept, self.pricing = self.pricing[1], None
        if self.kept == kept:  # confirmed; a switch bought a better branch
            self.explore_until = self.spent_ns + int(max(self.excess_ns, 0) / EXPLORE_SHARE)
        else:
            self.explore_until = 0


def while_drafting(costs: dict[int, float]) -> dict[int, float]:
    """The costs a cut weighs: by then the drafter has run, and it runs again in the cut
    pass's own step while the policy keeps drafting, so a row carrying no drafts saves
    only their verification, not the drafter's pass. Carrying none is priced as the
    cheapest drafting length (a pass without drafting would price it as if the drafter's
    fixed cost went away, and rows were cut to nothing to run slow passes of one token)."""
    drafting = [c for m, c in costs.items() if m]
    return {**costs, 0: min(drafting)} if drafting else costs


def relative_costs(ratios: dict[tuple[int, int], float], ref: int) -> dict[int, float]:
    """Each draft length's pass cost relative to `ref`'s, along chains of compared pairs
    (breadth first: the fewest ratios multiplied)."""
    return dict(_relative_costs(tuple(ratios.items()), ref))


@lru_cache(maxsize=64)
def _relative_costs(ratios: tuple, ref: int) -> tuple:
    """relative_costs over hashable ratios, remembered: asked every pass, they change seldom."""
    costs, frontier = {ref: 1.0}, [ref]
    while frontier:
        nxt = []
        for k in frontier:
            for (a, b), r in ratios:
                for there, here, factor in ((a, b, r), (b, a, 1 / r)):
                    if here == k and there not in costs:
                        costs[there] = costs[k] * factor
                        nxt.append(there)
        frontier = nxt
    return tuple(costs.items())
