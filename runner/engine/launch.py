"""Building and queuing passes: from host state (`launch`), or from the lazy outputs of
the pass still running (`launch_ahead`, see lookahead.py). The engine commits them.

Draft decisions are taken here when a pass is launched ahead, since its graph depends
on them: whether it verifies drafts, and whether its fused MTP head drafts for the pass
after it (skipped when a fixed policy will not let that pass draft: the MTP layer still
runs under eager sync, only its head's product would be thrown away). The decision is
kept on the pass whose MTP work it steers (`Launched.drafts_next`); when launching ahead
did not come to it, the engine takes it after committing that pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import numpy as np

from .attention import PassContext
from .config import EngineConfig
from .draft_policy import Branch, DraftPolicy
from .forward import Forward
from .layout import ahead_layout, build_layout
from .lookahead import continuing_rows, next_inputs
from .mtp import MTPDrafter
from .scheduler import PassPlan, Scheduler


@dataclass(frozen=True)
class Landed:
    """A pass's outputs on the host, once it has run."""

    starts: list[int]  # each row's start position (host state matches what the pass assumed)
    greedy: list[list[int]]  # (B, K) argmax at the logit positions
    drafts: Optional[list[int]]  # the fused MTP's draft for each row's next pass


@dataclass
class Launched:
    """A pass whose graph is queued; its outputs are lazy until `wait()`."""

    plan: PassPlan
    first: list[int]  # packed index of each row's first token
    logits: mx.array  # (B, K, V)
    hidden: mx.array  # (N, H)
    greedy: mx.array  # (B, K) argmax at the logit positions
    drafts: Optional[mx.array]  # (B,) the fused MTP's draft for each row's next pass
    starts: mx.array  # (B,) start position of each row, in the graph
    draft_in: Optional[mx.array]  # (B,) the draft each row verifies (drafted rows)
    fused: bool  # the MTP layer's work for this pass ran inside it
    ahead: bool = False  # built before the previous pass was committed
    drafts_next: Optional[bool] = None  # whether the pass after this one drafts, once decided

    @property
    def branch(self) -> Branch:
        return Branch(self.plan.kind, len(self.plan.rows), any(self.plan.drafted))

    def wait(self) -> Landed:
        """Block until the pass has run; its tokens (and drafts) on the host."""
        starts = [s.computed for s in self.plan.rows]
        return Landed(starts, self.greedy.tolist(), None if self.drafts is None else self.drafts.tolist())


@dataclass(frozen=True)
class MTPInputs:
    """What the MTP layer fused into a target pass reads (Forward.main_and_draft)."""

    next_known: mx.array  # (N,) the token after each packed position, where the host knows it
    next_from: mx.array  # (N,) else the index into greedy.flatten() that holds it (-1: known)
    candidates: mx.array  # (B, 2) the position to draft from if the draft is rejected / accepted


class Launcher:
    def __init__(
        self,
        forward: Forward,
        scheduler: Scheduler,
        drafter: Optional[MTPDrafter],
        policy: DraftPolicy,
        config: EngineConfig,
    ):
        self.forward, self.scheduler, self.drafter, self.policy = forward, scheduler, drafter, policy
        self.config = config
        self.passes_queued = 0  # passes launched ahead of the previous commit

    def expected_width(self, rows: int) -> int:
        """Rows the next pass should hold when `rows` rows of this one go on: those and
        the waiting requests, up to max_batch_size."""
        return min(rows + len(self.scheduler.waiting), self.config.max_batch_size)

    def _drafts_wanted_after(self, width: int) -> bool:
        """May the pass after one of `width` rows draft? Fixed policies know from the width
        (rows that finish meanwhile at worst cost one pass without drafts); adaptive may
        switch at any pass, so its head always runs."""
        return self.policy.adaptive or self.policy.permits(self.expected_width(width))

    def launch(self, drafting: bool) -> Launched:
        """Plan the next pass from host state and queue it. drafting: the latest draft
        decision (under lazy sync, whether the MTP layer is running along)."""
        width = len(self.scheduler.running)
        plan = self.scheduler.plan(use_drafts=self.drafter is not None and self.policy.permits(width))
        starts = [s.computed for s in plan.rows]
        lens = [len(f) for f in plan.feeds]
        lay = build_layout(
            starts,
            lens,
            [s.blocks for s in plan.rows],
            self.scheduler.pool.block_size,
            t_cap=max(self.config.prefill_chunk, 2),
        )
        tokens = np.zeros(lay.n_tokens, np.int32)
        K = 2 if any(plan.drafted) else 1
        out_index = np.zeros((len(lens), K), np.int32)
        for b, (feed, f) in enumerate(zip(plan.feeds, lay.first)):
            tokens[f : f + len(feed)] = feed
            out_index[b] = [f, f + 1][:K] if plan.drafted[b] else f + len(feed) - 1
        draft_in = mx.array([s.draft or 0 for s in plan.rows], mx.int32) if K == 2 else None
        mtp = None
        if self.drafter is not None and self.drafter.can_fuse(plan.rows, drafting):
            mtp = MTPInputs(
                *(
                    mx.array(a)
                    for a in self.drafter.fused_inputs(
                        plan.rows, plan.feeds, plan.drafted, starts, lay.first, K, lay.n_tokens
                    )
                )
            )
        return self._dispatch(
            plan,
            mx.array(tokens),
            lay.ctx,
            mx.array(out_index),
            lay.first,
            mx.array(starts, mx.int32),
            draft_in,
            mtp,
        )

    def launch_ahead(self, cur: Launched) -> Optional[Launched]:
        """Queue the pass after `cur` before cur's tokens are known, when its inputs follow
        from cur's outputs (see lookahead.py); None when they do not."""
        plan, sched, drafter = cur.plan, self.scheduler, self.drafter
        if not self.config.pipeline or plan.kind != "decode" or any(s.temperature > 0 for s in plan.rows):
            return None
        if len(plan.rows) < len(sched.running):
            return None  # the token budget left a prefill out: plan the next pass
        keep = continuing_rows(cur)
        if not keep:
            return None
        if sched.waiting and len(sched.running) - (len(plan.rows) - len(keep)) < self.config.max_batch_size:
            return None  # a slot may open: admit at the next planned pass
        want = False
        if drafter is not None:
            want = cur.drafts_next = self.policy.decide(self.expected_width(len(keep)))
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
        starts, token, draft = next_inputs(cur)
        if len(keep) < len(plan.rows):  # rows sure to be done after cur drop out
            idx = mx.array(keep, mx.int32)
            starts, token, draft = (None if x is None else x[idx] for x in (starts, token, draft))
        ctx = ahead_layout(rows, reach, starts, T, sched.pool.block_size)
        tokens = mx.stack([token, draft], axis=1).reshape(-1) if want else token
        positions = mx.arange(B * T, dtype=mx.int32)
        nplan = PassPlan(rows, [[0] * T for _ in rows], [want] * B, 0, B * T, feeds_in_graph=True)
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
    ) -> Launched:
        """Queue the target pass, with the MTP layer fused in when `mtp` is given."""
        drafts = None
        if mtp is not None:
            logits, hidden, greedy, drafts = self.forward.main_and_draft(
                tokens,
                ctx,
                out_index,
                mtp.next_known,
                mtp.next_from,
                mtp.candidates,
                draft_in,
                mx.array(plan.drafted),
                self._drafts_wanted_after(len(plan.rows)),
            )
        else:
            logits, hidden = self.forward.main(tokens, ctx, out_index)
            greedy = mx.argmax(logits, axis=-1)
        mx.async_eval(greedy, hidden, *([drafts] if drafts is not None else []))
        return Launched(plan, first, logits, hidden, greedy, drafts, starts, draft_in, mtp is not None, ahead)
