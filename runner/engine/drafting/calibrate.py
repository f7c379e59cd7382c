"""Timing each draft length's pass at every width during the warm-up, so the adaptive
policy starts from this machine's costs instead of finding them pass by pass.

- Why: the policy learns a width's costs from steady passes of each length side by side
  (draft_cost.py), and climbs to a longer length only a window at a time. On a short
  workload it spends much of it measuring, on lengths that lose, before it knows what
  pays; the warm-up already holds every shape compiled.
- What is timed: the target pass over `width` rows verifying k drafts each (random tokens,
  so a mixture of experts routes as real text does, not every token to the same experts)
  and, for a drafter that drafts in one pass of its own (the block drafter), what drafting
  costs after it (its context caches grown, gathered, the drafter pass, the host read);
  rounds of every length in turn, as the policy's own comparisons pair them.
- The host's share of a real pass (planning, verification) is not timed, so drafting's
  relative cost comes out a little high: the error leans toward drafting less.
- Passes the engine then runs keep refining the comparisons (they replace these), but
  are never compared with the timed ones: those ran one at a time, while a real pass
  without drafts overlaps with building the next, so a real one set beside a timed one
  priced drafting far above what the engine's drafting passes take, and at widths above
  one nothing re-measured it.
"""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np

from ..forward import Forward
from ..layout import build_layout
from .draft_policy import DraftPolicy

ROUNDS = 8  # every length timed this many times a width, in turn


def calibrate(
    forward: Forward,
    policy: DraftPolicy,
    drafter,
    max_rows: int,
    context: int,
    vocab: int,
    block_size: int,
    seed: int = 0,
) -> int:
    """Seed `policy`'s per-width comparisons with timed passes of every draft length it
    may carry (and none), at every width up to max_rows, over contexts of `context`
    tokens. Returns how many passes were timed (0: the policy is not adaptive or the
    drafter has no pass to time)."""
    if not policy.adaptive or not hasattr(drafter, "time_draft"):
        return 0
    rng = np.random.default_rng(seed)
    n_blocks = max(-(-(context + 1 + max(policy.lengths)) // block_size), 1)
    timed = 0
    for _ in range(ROUNDS):
        for width in range(1, max_rows + 1):
            for k in policy.lengths:
                T = 1 + k
                start = max(n_blocks * block_size - T, 0)  # the scratch block only is written
                rows = [[0] * n_blocks] * width
                lay = build_layout([start] * width, [T] * width, rows, block_size, t_cap=1 if T > 2 else None)
                tokens = mx.array(rng.integers(1, vocab, lay.n_tokens).astype(np.int32))
                out_index = mx.array(np.array([[f + i for i in range(T)] for f in lay.first], np.int32))
                t0 = time.perf_counter_ns()
                logits, hidden = forward.main(tokens, lay.ctx, out_index)
                mx.eval(logits, hidden)
                spent = time.perf_counter_ns() - t0
                if k:
                    spent += drafter.time_draft(width, context, k)
                policy.width(width).observe(k, spent)
                timed += 1
    drafter.forget_timing_rows(max_rows)
    for width in range(1, max_rows + 1):
        policy.width(width).history.clear()  # the ratios stay; the passes they came from go
    return timed
