"""Building and queuing passes: from host state (`launch`), or from the lazy outputs of
the pass still running (`launch_ahead`, see lookahead.py). The engine commits them.

Draft decisions live here too, since a pass's graph depends on them: whether a pass
verifies drafts, and whether its fused MTP head drafts for the pass after it (skipped
when a fixed policy will not let that pass draft: the MTP layer still runs under eager
sync, only its head's product would be thrown away).
"""
from __future__ import annotations

from typing import Optional

import mlx.core as mx
import numpy as np

from .config import EngineConfig
from .draft_policy import DraftPolicy
from .forward import Forward
from .lookahead import Launched, ahead_layout, continuing_rows
from .mtp import MTPDrafter
from .scheduler import PassPlan, Scheduler, build_layout


class Launcher:
    def __init__(self, forward: Forward, scheduler: Scheduler, drafter: Optional[MTPDrafter],
                 policy: DraftPolicy, config: EngineConfig):
        self.forward, self.scheduler, self.drafter, self.policy = forward, scheduler, drafter, policy
        self.config = config
        self.last_want = True             # the latest draft decision (a lazy MTP ran for it)
        self.decided: Optional[bool] = None  # decision taken when launching ahead, not yet used
        self.passes_queued = 0            # passes launched ahead of the previous commit

    def take_decision(self) -> Optional[bool]:
        decided, self.decided = self.decided, None
        return decided

    def _drafts_wanted_after(self, width: int) -> bool:
        """May the pass after one of `width` rows draft? Fixed policies know from the width
        (rows that finish meanwhile at worst cost one pass without drafts); adaptive may
        switch at any pass, so its head always runs."""
        return self.policy.adaptive or self.policy.permits(min(width + len(self.scheduler.waiting),
                                                               self.config.max_batch_size))

    def launch(self) -> Launched:
        """Plan the next pass from host state and queue it."""
        width = len(self.scheduler.running)
        plan = self.scheduler.plan(use_drafts=self.drafter is not None and self.policy.permits(width))
        starts = [s.computed for s in plan.rows]
        fused = self.drafter is not None and self.drafter.can_fuse(plan.rows, self.last_want)
        lens = [len(f) for f in plan.feeds]
        lay = build_layout(starts, lens, [s.blocks for s in plan.rows], self.scheduler.pool.block_size,
                           t_cap=max(self.config.prefill_chunk, 2))
        tokens = np.zeros(lay.n_tokens, np.int32)
        K = 2 if any(plan.drafted) else 1
        out_index = np.zeros((len(lens), K), np.int32)
        for b, (feed, f) in enumerate(zip(plan.feeds, lay.first)):
            tokens[f:f + len(feed)] = feed
            out_index[b] = [f, f + 1][:K] if plan.drafted[b] else f + len(feed) - 1
        draft_in = mx.array([s.draft or 0 for s in plan.rows], mx.int32) if K == 2 else None
        drafts = None
        if fused:
            known, src, cand = self.drafter.fused_inputs(plan.rows, plan.feeds, plan.drafted, starts, lay.first,
                                                         K, lay.n_tokens)
            logits, hidden, greedy, drafts = self.forward.main_and_draft(
                mx.array(tokens), lay.ctx, mx.array(out_index), mx.array(known), mx.array(src), mx.array(cand),
                draft_in, mx.array(plan.drafted), self._drafts_wanted_after(width))
        else:
            logits, hidden = self.forward.main(mx.array(tokens), lay.ctx, mx.array(out_index))
            greedy = mx.argmax(logits, axis=-1)
        mx.async_eval(greedy, hidden, *([drafts] if drafts is not None else []))
        return Launched(plan, lay.first, logits, hidden, greedy, drafts, mx.array(starts, mx.int32),
                        draft_in, fused)

    def launch_ahead(self, cur: Launched) -> Optional[Launched]:
        """Queue the pass after `cur` before cur's tokens are known, when its inputs follow
        from cur's outputs (see lookahead.py); None when they do not."""
        plan, sched, drafter = cur.plan, self.scheduler, self.drafter
        if not self.config.pipeline or plan.kind != "decode" or any(s.temperature > 0 for s in plan.rows):
            return None
        keep = continuing_rows(cur)
        if not keep:
            return None
        if sched.waiting and len(sched.running) - (len(plan.rows) - len(keep)) < self.config.max_batch_size:
            return None                     # a slot may open: admit at the next planned pass
        want = False
        if drafter is not None:
            want = self.decided = self.last_want = self.policy.decide(len(keep))
            # Drafting, or keeping an eager MTP current, needs cur's own MTP work in the
            # graph (a fused pass); a lazy pass that does not draft runs no MTP at all.
            if (want or drafter.eager) and not cur.fused:
                return None
            want = want and cur.drafts is not None   # cur's head ran only if drafts could follow
        rows = [plan.rows[b] for b in keep]
        T, B = (2 if want else 1), len(rows)
        reach = [s.computed + len(plan.feeds[b]) + T for s, b in zip(rows, keep)]
        for s, r in zip(rows, reach):
            sched.ensure_blocks(s, r)
        starts, token, draft = cur.next_inputs()
        if len(keep) < len(plan.rows):      # rows sure to be done after cur drop out
            idx = mx.array(keep, mx.int32)
            starts, token, draft = (None if x is None else x[idx] for x in (starts, token, draft))
        ctx = ahead_layout(rows, reach, starts, T, sched.pool.block_size)
        tokens = mx.stack([token, draft], axis=1).reshape(-1) if want else token
        positions = mx.arange(B * T, dtype=mx.int32)
        nplan = PassPlan(rows, [[0] * T for _ in rows], [want] * B, 0, B * T)  # feeds: lengths only (tokens are in the graph)
        drafts, draft_in = None, (draft if want else None)
        if drafter is not None and (want or drafter.eager):
            # Every pair's next token is this pass's own argmax (none is known on the host).
            cand = positions.reshape(B, T) if T == 2 else mx.repeat(positions[:, None], 2, axis=1)
            logits, hidden, greedy, drafts = self.forward.main_and_draft(
                tokens, ctx, positions.reshape(B, T), mx.zeros((B * T,), mx.int32), positions, cand,
                draft_in, mx.array([want] * B), self._drafts_wanted_after(B))
        else:
            logits, hidden = self.forward.main(tokens, ctx, positions.reshape(B, T))
            greedy = mx.argmax(logits, axis=-1)
        mx.async_eval(greedy, hidden, *([drafts] if drafts is not None else []))
        self.passes_queued += 1
        return Launched(nplan, list(range(0, B * T, T)), logits, hidden, greedy, drafts, starts,
                        draft_in, drafter is not None and (want or drafter.eager), ahead=True)
