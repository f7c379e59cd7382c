"""How many drafts a row carries into the next pass (k; 0: none). Fixed policies draft
`draft_tokens` by the pass width; `adaptive` picks k per width to maximise expected
committed tokens per unit of time, from its own measurements.

- Candidates: 0, 1, 2, 4, ... up to draft_tokens (and draft_tokens itself). Powers of two
  because tokens per time is flat near its best k, and every candidate must be measured
  at every width and re-measured now and then: at most six branches to measure, not 17.
- Time: the engine's measured decode-pass durations, one `WidthModel` per width
  (draft_cost.py), comparing the cost of k's passes with those of the other lengths side
  by side. A width with no comparisons yet borrows the nearest wider width's (drafting
  pays less as rows are added) and explores only on the refresh schedule: a batch's tail
  lasts a few passes. With none anywhere it measures k = 1 and then 0.
- Tokens: acceptance by position (acceptance.py: from the drafter's measured acceptance,
  where it brings one, and the accepted lengths of its rows, not looked-up ones); a row's
  expected commit for k drafts is 1 + sum_j a_1 ... a_j. One estimate serves every width
  and k (the chained MTP's draft i does not depend on k; for a block drafter that is an
  approximation).
- A veto (realized.py): a draft length whose passes at a width realized fewer tokens per
  unit of time than the width's passes without drafts is out of the width's choice and
  of its climb, which steps past it to longer lengths (a block drafter's pass costs about
  the same at every length, so one draft can lose where eight pay); while a veto stands
  and the costs pick no drafts for a lone row, or a window of a vetoed length was chosen,
  the length that realized most above that bar runs. Once passes of a width run, no
  length is kept there before its passes without drafts set that bar.
- A lone row whose drafter reports its confidence in each draft has its drafts cut to the
  length that pays (row_lengths.py); the k decided is then only their cap, lifted to the
  longest length with a known cost: the drafter's pass costs the same whatever its
  length, and the cut knows the row where the acceptance of rows in general does not
  (kept below it, a row sure of eight drafts was cut at four).
- A width above one kept at 0 by its costs holds 0 for HOLD passes (or to its next
  comparison) unweighed, counted as decisions: MLX's CPU backend runs the host's work
  between passes, not beside them, and weighing was most of what adaptive added there.
- Rows in step (as many tokens left each) do not draft beside each other unless new
  prompts wait for rows decoding: drafting sets them apart, and a prompt that follows
  one then stalls the rows still decoding, or, where none follows, the batch waits for
  its last row (in_step.py).
- A pass belongs to the regime of the k decided for it (before any row was cut: its
  drafter already ran) and counts toward a realized rate only when its own step prepared
  the same k (its duration holds the next pass's drafting): a k = 0 pass whose step
  drafted for the next, or whose drafts were all cut, is no pass without drafts. It counts
  toward the rate of the most drafts a row carried: a cut says what its length realizes,
  not the cap (one hard prompt's cuts to one draft had vetoed eight for several more).
- Costs learn from steady, pure passes only: between two of the same branch and
  pipelining regime, in one regime (a switch, such as a lazy MTP catching up, costs extra
  and is priced as exploring instead), carrying what the next pass carries. A row cut
  the same way pass after pass is steady too: its passes price the length it carries,
  with the drafter's pass at the k decided (a little dearer than that length's own
  regime). Without them a cut regime's costs would stay the warm-up's, which leave out
  what pipelining saves passes without drafts (drafting passes cannot be queued ahead).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from .acceptance import PositionAcceptance
from .cut_drafts import remember, settle
from .draft_cost import WidthModel, borrowed_ratios, relative_costs, while_drafting
from .realized import RealizedRates
from .row_lengths import Built, ConfidenceCalibration, choose_lengths
from .tree import grow, plan_leaves

HOLD = 4  # passes a width keeps k = 0 chosen by its costs before weighing them again


class Branch(NamedTuple):
    """A pass's shape as far as its cost goes."""

    kind: str  # "prefill" | "decode" | "mixed"
    width: int  # rows
    drafts: int  # drafts a drafting row carries (0: the pass verifies none)


def draft_lengths(draft_tokens: int) -> tuple[int, ...]:
    """The adaptive policy's candidates: 0, the powers of two below draft_tokens, and it."""
    return tuple(sorted({0, draft_tokens, *(2**j for j in range(5) if 2**j < draft_tokens)}))


class DraftPolicy:
    def __init__(
        self,
        policy: str,
        max_width: Optional[int],
        draft_tokens: int = 1,
        prior: tuple[float, ...] = (),
        held_prompts: bool = False,
    ):
        """prior: the drafter's measured acceptance at each position given the one before
        (acceptance.py), where it brings one; held_prompts: new prompts wait for the rows
        decoding (prefill_hold), so a batch re-measures past lengths priced out (draft_cost.py)."""
        self.adaptive, self.held_prompts = policy == "adaptive", held_prompts
        self.weighs_step = self.adaptive and not held_prompts  # decide() reads in_step
        self.max_width = max_width  # None: no fixed limit
        self.draft_tokens = draft_tokens
        self.lengths = draft_lengths(draft_tokens)
        self.widths: dict[int, WidthModel] = {}
        self.acceptance = PositionAcceptance(prior)
        self.calibration = ConfidenceCalibration(sum(prior) / len(prior) if prior else None)
        self.realized = RealizedRates()
        self._last: Optional[Branch] = None  # the last committed pass's branch
        self._cut_costs: Optional[dict[int, float]] = None  # the latest decision's relative
        # costs by draft length, when its rows may be cut by them (adaptive, not measuring)
        self._cut_unit: Optional[tuple[int, int]] = None  # (width, k): the length those costs are relative to
        self._cut_to: Optional[int] = None  # the most drafts a row carries after a cut
        self._left: dict[int, int] = {}  # width -> the drafts each row kept after the last trim
        self._decided: Optional[int] = None  # k decided for the pass recorded next (uncut)
        self._row_confidence = False  # the drafter's confidences have cut a row's drafts
        self._hold, self._weighed = (0, 0, 0), ""  # (width, its comparisons, passes left) of a
        # k = 0 kept unweighed, and the reason of the decision it keeps
        self.reason = ""  # why the latest adaptive decision chose its k, in a few words

    def carried_lengths(self) -> tuple[int, ...]:
        """The k a drafting pass may carry: the adaptive candidates, else draft_tokens."""
        return tuple(k for k in self.lengths if k) if self.adaptive else (self.draft_tokens,)

    def width(self, width: int) -> WidthModel:
        if width not in self.widths:
            self.widths[width] = WidthModel()
        return self.widths[width]

    def permits(self, width: int) -> bool:
        """May a pass of this width verify the drafts its rows carry?"""
        return self.adaptive or self.max_width is None or width <= self.max_width

    def decide(self, width: int, in_step: bool = False) -> int:
        """Drafts a row carries into a next pass expected to hold `width` rows (0: none);
        in_step: its rows have as many tokens left each. Called once a pass."""
        self._cut_costs = None
        if width == 0:
            return 0
        if not self.adaptive:
            return self.draft_tokens if self.permits(width) else 0
        if in_step and width > 1 and self.weighs_step:
            self.reason = "k 0: the rows are in step; drafting would set them apart (prefill_hold lets it)"
            return 0
        model = self.width(width)
        held_at, compared, left = self._hold
        if left and held_at == width and compared == model.compared:
            self._hold, self.reason = (width, compared, left - 1), self._weighed + " (held)"
            model.decisions += 1  # the re-measuring schedule counts passes, held or not
            return 0
        ratios, borrowed = borrowed_ratios(self.widths, width)
        if not ratios:
            k = model.bootstrap(1, self.lengths)
            self.reason = f"k {k}: measuring, no costs at width {width} yet"
            return k
        ref = model.kept if any(model.kept in p for p in ratios) else next(iter(ratios))[0]
        costs = relative_costs(ratios, ref)
        # A length its realized rate vetoes is out of the model's choice and of its climb,
        # which steps past it: the drafter's pass costs the same at every length, so a
        # short one can lose where longer ones pay.
        vetoes = {n: why for n in self.lengths if (why := self.realized.veto(width, n))}
        usable = tuple(n for n in self.lengths if n not in vetoes)
        values = {n: self.acceptance.expected_tokens(n) / c for n, c in costs.items() if n in usable}
        if not values:
            self.reason = f"k 0: {next(iter(vetoes.values()))}"
            return 0
        k = model.choose(values, usable, not borrowed, batched=width > 1, step_past=self.held_prompts)
        if k and self.realized.ran(width) and self.realized.rate(width, 0) is None:
            self.reason = f"k 0: passes without drafts at width {width} set the bar drafting must clear first"
            return 0
        vetoed = k in vetoes  # only a window begun before its veto, which ends here
        out = "; ".join(vetoes.values())
        contradicted = vetoed or (vetoes and not k and width == 1)
        other = self.realized.best_paying(width) if contradicted else None
        if other is not None and other != k:
            # The costs have been contradicted here: where a lone row's would not draft (or a
            # vetoed window was chosen), a length that realized more than passes without
            # drafts runs. Batched rows only fall back: drafting there also sets rows apart,
            # a cost their realized rates do not show (draft_cost.py).
            self.reason = f"k {other}: {out}; k {other} realized more"
            return other
        if vetoed:
            self.reason = f"k 0: {out}"
            return 0
        if model.trying == k:
            self.reason = f"k {k}: measuring its cost beside k {model.kept}"
            return k
        lift = ""
        if model.trying is None:  # no window measuring another length: rows may be cut
            self._cut_costs, self._cut_unit = while_drafting(costs), (width, ref)
            top = max(values)  # the longest length whose cost is known and not vetoed
            if k and width == 1 and self._row_confidence and top > k:
                k, lift = top, f" (k {k} leads them; the row's own confidences cut it)"
        shown = " ".join(f"{m}:{v:.2f}" for m, v in sorted(values.items()))
        lent = " (costs borrowed from a wider width)" if borrowed else ""
        head = f"k {k}: {out}; " if out else f"k {k}: "
        self.reason = f"{head}tokens per unit of time by k {shown}{lent}{lift}"
        hold = not k and model.trying is None and width > 1  # a lone row's veto weighs every pass
        self._hold, self._weighed = (width, model.compared, HOLD - 1 if hold else 0), self.reason
        return k

    def trim(self, rows: list, leaves: int = 0, built: Optional[tuple[int, int]] = None) -> str:
        """Cut each drafting row's drafts to the length that pays (row_lengths.py), when
        adaptive, the drafter gave its confidences and no other length is being measured at
        this width; then, with `leaves`, let a lone row's chain branch (tree.py). built:
        (drafts a row, host ns) when the next pass was built ahead for every row carrying
        that many, and building it took that long. Returns why, in a few words ('' when
        every row keeps its drafts as they came)."""
        if self.adaptive:
            self._learn_from_cut_drafts(rows)
        why = self._cut(rows, built)
        left = [len(s.drafts) for s in rows if s.drafts]
        if left and min(left) == max(left):
            self._left[len(left)] = left[0]
        tree = self._branch(rows, leaves) if leaves else ""
        return "; ".join(w for w in (why, tree) if w)

    def _branch(self, rows: list, leaves: int) -> str:
        """Grow a lone greedy row's chain into a tree: under a fixed policy every leaf, under
        adaptive the leaves that pay by its costs (none while it measures)."""
        drafting = [s for s in rows if s.drafts and not s.finished]
        if len(drafting) != 1 or not drafting[0].draft_alternatives or not drafting[0].draft_conf:
            return ""
        if self.adaptive and self._cut_costs is None:
            return ""
        seq = drafting[0]
        plan = plan_leaves(self.calibration, seq.draft_conf, seq.draft_alternatives, leaves, self._cut_costs)
        if plan.leaves:
            seq.drafts, seq.draft_parents = grow(seq.drafts, seq.draft_alternatives, plan.leaves)
        return plan.reason

    def _learn_from_cut_drafts(self, rows: list) -> None:
        """What the rows' committed tokens tell of drafts cut earlier (cut_drafts.py)."""
        for seq in rows:
            for o in settle(seq) if seq.cut_proposals else ():
                self.calibration.add(o.confidences, o.landed)
                self.acceptance.add_tail(o.after, o.landed, len(o.confidences))

    def _cut(self, rows: list, built: Optional[tuple[int, int]]) -> str:
        if self._cut_costs is None:  # fixed, measuring, or no costs yet: nothing to cut by
            return ""
        drafting = [s for s in rows if s.drafts]
        if not any(s.draft_conf for s in drafting):
            return ""
        self._row_confidence = True
        k = max(len(s.drafts) for s in drafting)
        ahead = None
        if built is not None and self._cut_unit:  # built for exactly the drafting rows (verify_ahead.build)
            width, ref = self._cut_unit
            unit_ns = self.widths[width].typical_ns(ref)  # what a pass of cost 1.0 takes
            ahead = Built(built[0], built[1] / unit_ns) if unit_ns else None
        choice = choose_lengths(
            self.calibration, [s.draft_conf or None for s in drafting], k, self._cut_costs, ahead
        )
        if choice is None:
            return ""
        for s, m in zip(drafting, choice.lengths):
            if s.draft_conf:
                remember(s, s.drafts, s.draft_conf, m)
            s.drafts, s.draft_probs, s.draft_conf = s.drafts[:m], s.draft_probs[:m], s.draft_conf[:m]
        self._cut_to = max(choice.lengths)
        return choice.reason

    def likely_left(self, width: int, k: int) -> int:
        """The drafts each of `width` rows drafting k is likely to keep after `trim`: as
        many as the last trim at that width left them (k before any)."""
        return min(k, self._left.get(width, k))

    def expects(self, width: int) -> int:
        """The draft length adaptive is likely to choose at this width next (read only)."""
        model = self.widths.get(width)
        if model is None or model.kept is None:
            return 1  # it measures 1 and 0 first, or borrows a verdict it has not taken yet
        return model.kept if model.trying is None else model.trying

    def record(
        self,
        branch: Branch,
        duration_ns: int,
        accepted_lengths: tuple[int, ...],
        *,
        drafts_next: int,
        ahead: bool,
        queued: Optional[Branch],
        outcomes: tuple = (),
        drafter_lengths: Optional[tuple[int, ...]] = None,
    ) -> None:
        """Learn from one committed pass; called for every pass, in order. drafts_next: the
        drafts its step prepared for the next pass (after a cut by `trim`, what the cut
        left); outcomes: (confidences, drafts kept) of the rows whose drafter gave
        confidences; drafter_lengths: accepted_lengths over the rows a drafter drafted for
        (None: every row); ahead: it was launched before the previous pass was committed;
        queued: the branch of the pass launched ahead of it (None: none). Every decode
        pass counts toward its width's time; the cost model learns from pure, steady ones
        only (see the module's docstring); acceptance by position from the drafter's rows
        of every pass that verified drafts, and the confidence calibration from every row
        verified."""
        decided, self._decided = self._decided, drafts_next
        pure = decided == drafts_next  # one regime: the step prepared the k its pass was decided with
        if self._cut_to is not None:  # this pass's step cut the next pass's drafts to this many
            drafts_next, self._cut_to = self._cut_to, None
        steady = (
            branch == self._last and ahead == (queued is not None) and (queued is None or queued == branch)
        )
        self._last = branch
        if not self.adaptive:
            return
        self.acceptance.add(accepted_lengths if drafter_lengths is None else drafter_lengths)
        for confidences, kept in outcomes:
            self.calibration.add(confidences, kept)
        if branch.kind != "decode":
            return
        if not branch.drafts:
            self.acceptance.age()
        committed = branch.width + sum(m * n for m, n in enumerate(accepted_lengths))
        carried = min(branch.drafts, decided) if branch.drafts and decided else decided
        self.realized.add(branch.width, carried, committed, duration_ns, counted=pure)
        self.width(branch.width).spend(duration_ns)
        if steady and pure and drafts_next == branch.drafts:
            self.width(branch.width).observe(branch.drafts, duration_ns)
