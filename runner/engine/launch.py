"""Building and queuing passes, and the one owner of the draft decision.

- `launch` plans a pass from host state; `launch_ahead` queues the pass after a running
  decode pass from that pass's lazy outputs (pipelining: building and dispatching a
  decode graph costs about as much as running it). That works when every input of the
  next pass follows from this one's outputs by a fixed rule (`Launched.next_inputs`).
- A row the running pass finishes early (EOS, or max_new_tokens through a bonus token)
  is still computed in the queued pass: that work is discarded. Its blocks are freed
  meanwhile; the queued pass may still write one slot in them, which is harmless because
  a block's next owner writes every slot before reading it.
- The draft decision for the pass after a pass (`Launched.drafts_next`) is written here
  only (`decide`): when launching ahead, since the queued graph depends on it, else when
  the engine asks after committing. The fused MTP head is skipped when a fixed policy
  will not let the next pass draft (only the head's product would be thrown away).
- A fused pass drafts one token a row, so a pass fuses only while the next carries at
  most one (adaptive: while it expects so), and a decision after a fused pass is cut to
  one. More drafts come from the host's drafter after the commit: no pass is queued ahead.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import numpy as np

from .config import EngineConfig
from .drafting.draft_policy import DraftPolicy
from .drafting.drafter import Drafter
from .drafting.mtp import MTPDrafter
from .drafting.tree import chain_of, tree_layout
from .forward import Forward
from .in_step import kept_in_step, needs_features
from .layout import PassContext, ahead_layout, build_layout
from .passes import Launched, MTPInputs
from .scheduler import PassPlan, Scheduler


class Launcher:
    def __init__(
        self,
        forward: Forward,
        scheduler: Scheduler,
        drafter: Optional[Drafter],
        policy: DraftPolicy,
        config: EngineConfig,
    ):
        self.forward, self.scheduler, self.drafter, self.policy = forward, scheduler, drafter, policy
        self.config = config
        self.passes_queued = 0  # passes launched ahead of the previous commit
        self.passes_built_ahead = 0  # drafted passes built on drafts still being made (verify_ahead.py)
        # The latest decision (drafts a row; None before any). The number, not the pass:
        # a pass would keep its rows, finished requests included, alive until the next one.
        self._latest: Optional[int] = None

    def expected_width(self, rows: int) -> int:
        """Rows the next pass should hold when `rows` rows of this one go on: those and
        the waiting requests, up to max_batch_size (none of them while they are held)."""
        sched = self.scheduler
        joining = 0 if sched.hold_from is not None else len(sched.waiting)
        return min(rows + joining, self.config.max_batch_size)

    def _drafts_wanted_after(self, width: int) -> bool:
        """May the pass after one of `width` rows draft? Fixed policies know from the width
        (rows that finish meanwhile at worst cost one pass without drafts); adaptive may
        switch at any pass, so its head always runs."""
        return self.policy.adaptive or self.policy.permits(self.expected_width(width))

    def _one_draft_next(self, width: int) -> bool:
        """Will the pass after one of `width` rows carry at most one draft a row (all that
        a fused pass drafts)? Adaptive: while it expects so."""
        if self.policy.adaptive:
            return self.policy.expects(self.expected_width(width)) <= 1
        return self.config.draft_tokens == 1

    def _fusable(self, rows, drafting: bool) -> bool:
        """The MTP layer's work can run inside this pass: depth-1 MTP drafting only."""
        return (
            isinstance(self.drafter, MTPDrafter)
            and self._one_draft_next(len(rows))
            and self.drafter.can_fuse(rows, drafting)
        )

    def decide(self, cur: Launched, continuing: Optional[int] = None) -> int:
        """The drafts each row carries into the pass after `cur` (0: none), decided once
        and recorded on cur: when the pass after it is launched ahead (continuing: the
        rows that go on), else after cur is committed."""
        if cur.drafts_next is None:
            rows = cur.live if continuing is None else continuing
            cur.kept_in_step = kept_in_step(cur.plan.rows, self.scheduler, self.policy)
            k = self.policy.decide(self.expected_width(rows), in_step=cur.kept_in_step)
            cur.drafts_next = min(k, 1) if cur.fused else k  # a fused pass drafted one a row
        self._latest = cur.drafts_next
        return cur.drafts_next

    def _features(self, plan: PassPlan) -> bool:
        return needs_features(plan, self.scheduler, self.policy, self.forward)

    @property
    def drafting(self) -> bool:
        """The latest decision (under lazy sync: whether the MTP layer is running along)."""
        return self._latest is None or bool(self._latest)

    def launch(self) -> Launched:
        """Plan the next pass from host state and queue it."""
        drafting = self.drafting
        width = len(self.scheduler.running)
        if width > 1:  # a tree is for a lone row: rows admitted since it was grown get chains
            for seq in self.scheduler.running:
                seq.drafts, seq.draft_parents = chain_of(seq.drafts, seq.draft_parents), []
        plan = self.scheduler.plan(use_drafts=self.drafter is not None and self.policy.permits(width))
        if len(plan.rows) == 1 and plan.rows[0].draft_parents and plan.drafted[0]:
            return self._launch_tree(plan, plan.rows[0].computed)
        return self.launch_plan(plan, drafting)

    def launch_plan(
        self, plan: PassPlan, drafting: bool = False, drafts: Optional[mx.array] = None, queue: bool = True
    ) -> Launched:
        """Build the pass of a plan (a tree's aside) and, with `queue`, queue it. drafts:
        (B, max drafted) tokens in the graph that the rows' fed drafts are taken from,
        instead of the feeds (whose drafts then only give lengths: verify_ahead.py)."""
        starts = [s.computed for s in plan.rows]
        lens = [len(f) for f in plan.feeds]
        lay = build_layout(
            starts,
            lens,
            [s.blocks for s in plan.rows],
            self.scheduler.pool.block_size,
            t_cap=1 if _uniform_verify(plan) else max(self.config.prefill_chunk, 2),
        )
        tokens = np.zeros(lay.n_tokens, np.int32)
        K = 1 + max(plan.drafted)  # logit positions a row: its fed tokens (fewer repeat the last)
        out_index = np.zeros((len(lens), K), np.int32)
        for b, (feed, f) in enumerate(zip(plan.feeds, lay.first)):
            tokens[f : f + len(feed)] = feed
            d = plan.drafted[b]
            out_index[b] = [f + min(i, d) for i in range(K)] if d else f + len(feed) - 1
        fed = mx.array(tokens) if drafts is None else _with_drafts(tokens, lay.first, plan.drafted, drafts)
        draft_in = mx.array([(s.drafts or [0])[0] for s in plan.rows], mx.int32) if K == 2 else None
        mtp = None
        if K <= 2 and self._fusable(plan.rows, drafting):
            mtp = MTPInputs(
                *(
                    mx.array(a)
                    for a in self.drafter.fused_inputs(
                        plan.rows,
                        plan.feeds,
                        [d > 0 for d in plan.drafted],
                        starts,
                        lay.first,
                        K,
                        lay.n_tokens,
                    )
                )
            )
        return self._dispatch(
            plan,
            fed,
            lay.ctx,
            mx.array(out_index),
            lay.first,
            mx.array(starts, mx.int32),
            draft_in,
            mtp,
            queue=queue,
            features=self._features(plan),
        )

    def _launch_tree(self, plan: PassPlan, start: int) -> Launched:
        """Queue one row verifying its draft tree, with the logits of every node."""
        seq, feed = plan.rows[0], plan.feeds[0]
        lay = tree_layout(start, seq.draft_parents, seq.blocks, self.scheduler.pool.block_size)
        out_index = mx.arange(len(feed), dtype=mx.int32)[None]
        tokens, starts = mx.array(feed, mx.int32), mx.array([start], mx.int32)
        return self._dispatch(plan, tokens, lay.ctx, out_index, lay.first, starts, None, None)

    def launch_ahead(self, cur: Launched, next_index: int) -> Optional[Launched]:
        """Queue the pass after `cur` (pass `next_index`) before cur's tokens are known, when
        its inputs follow from cur's outputs (Launched.next_inputs); None when they do not."""
        plan, sched, drafter = cur.plan, self.scheduler, self.drafter
        if not self.config.pipeline or plan.kind != "decode" or any(s.temperature > 0 for s in plan.rows):
            return None
        if len(plan.rows) < len(sched.running):
            return None  # the token budget left a prefill out: plan the next pass
        if max(plan.drafted, default=0) > 1:
            return None  # how far a row advances follows from its accepted drafts on the host only
        keep = cur.continuing_rows()
        if not keep:
            return None
        slot = len(sched.running) - (len(plan.rows) - len(keep)) < self.config.max_batch_size
        if sched.waiting and slot and not sched.holds_at(next_index):
            return None  # a slot may open: admit at the next planned pass
        want = False
        if drafter is not None:
            k = self.decide(cur, len(keep))
            if k > 1 or (k and not self._one_draft_next(len(keep))):
                return None  # k drafts a row come from the host's drafter after the commit
            want = k == 1
            # Drafting, or keeping an eager MTP current, needs cur's own MTP work in the
            # graph (a fused pass); a lazy pass that does not draft runs no MTP at all.
            if (want or drafter.eager) and not cur.fused:
                return None
            want = want and cur.drafts is not None  # cur's head ran only if drafts could follow
        rows = [plan.rows[b] for b in keep]
        T, B = (2 if want else 1), len(rows)
        reach = [s.computed + len(plan.feeds[b]) + T for s, b in zip(rows, keep)]
        for s, r in zip(rows, reach):
            sched.ensure_blocks(s, r)
        starts, token, draft = cur.next_inputs()
        if len(keep) < len(plan.rows):  # rows sure to be done after cur drop out
            idx = mx.array(keep, mx.int32)
            starts, token, draft = (None if x is None else x[idx] for x in (starts, token, draft))
        ctx = ahead_layout(rows, reach, starts, T, sched.pool.block_size)
        tokens = mx.stack([token, draft], axis=1).reshape(-1) if want else token
        positions = mx.arange(B * T, dtype=mx.int32)
        nplan = PassPlan(rows, [[0] * T for _ in rows], [int(want)] * B, 0, B * T, feeds_in_graph=True)
        mtp = None
        if drafter is not None and (want or drafter.eager):
            # Every pair's next token is this pass's own argmax (none is known on the host).
            cand = positions.reshape(B, T) if T == 2 else mx.repeat(positions[:, None], 2, axis=1)
            mtp = MTPInputs(mx.zeros((B * T,), mx.int32), positions, cand)
        self.passes_queued += 1
        return self._dispatch(
            nplan,
            tokens,
            ctx,
            positions.reshape(B, T),
            list(range(0, B * T, T)),
            starts,
            draft if want else None,
            mtp,
            ahead=True,
            # its rows are cur's going on: the decision above read whether they are kept in step
            features=not (self.forward.feature_layers and cur.kept_in_step),
        )

    def _dispatch(
        self,
        plan: PassPlan,
        tokens: mx.array,
        ctx: PassContext,
        out_index: mx.array,
        first: list[int],
        starts: mx.array,
        draft_in: Optional[mx.array],
        mtp: Optional[MTPInputs],
        ahead: bool = False,
        queue: bool = True,
        features: bool = True,
    ) -> Launched:
        """Build the target pass, with the MTP layer fused in when `mtp` is given, and
        queue it (`queue`; else `Launched.queue` does). features: see `_features`."""
        drafts = None
        # A pass carrying prompt tokens runs uncompiled: the warm-up traces decode shapes,
        # and a short prefill's packed length would trace a graph of its own in a timed pass.
        eager = plan.prefill_tokens > 0
        if mtp is not None:
            logits, hidden, greedy, drafts = self.forward.main_and_draft(
                tokens,
                ctx,
                out_index,
                mtp.next_known,
                mtp.next_from,
                mtp.candidates,
                draft_in,
                mx.array([d > 0 for d in plan.drafted]),
                self._drafts_wanted_after(len(plan.rows)),
                eager,
            )
        else:
            logits, hidden = self.forward.main(tokens, ctx, out_index, eager, features)
            greedy = mx.argmax(logits, axis=-1)
        launched = Launched(
            plan, first, logits, hidden, greedy, drafts, starts, draft_in, mtp is not None, ahead
        )
        if queue:
            launched.queue()
        return launched


def _with_drafts(tokens: np.ndarray, first: list[int], drafted: list[int], drafts: mx.array) -> mx.array:
    """The packed tokens with each row's fed drafts taken from `drafts` (B, >= max drafted)."""
    slots = [f + 1 + i for f, d in zip(first, drafted) for i in range(d)]
    picks = [b * drafts.shape[1] + i for b, d in enumerate(drafted) for i in range(d)]
    fed = mx.array(tokens)
    fed[mx.array(slots)] = drafts.reshape(-1)[mx.array(picks)].astype(mx.int32)
    return fed


def _uniform_verify(plan: PassPlan) -> bool:
    """Every row verifies the same k > 1 drafts: the pass runs unpadded (k + 1 tokens a
    row, a shape Forward.warm traced), where padding k + 1 up to a power of two would
    add up to half again the tokens a verify pass computes."""
    d = plan.drafted[0]
    return d > 1 and all(x == d for x in plan.drafted) and all(len(f) == d + 1 for f in plan.feeds)
