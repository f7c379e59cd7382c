"""Launching the next decode pass before the current one has finished (pipelining).

A decode pass is bound by the host: building and dispatching its graph costs about as
much as running it. So while pass n runs, the engine builds pass n+1 from pass n's
lazy outputs and queues it; MLX starts it as soon as pass n is done. That is possible
when every input of pass n+1 follows from pass n's outputs by a fixed rule: the rows
are greedy decode rows, a row's next token is its argmax (the bonus token when its
draft was accepted), its next draft is the fused MTP's candidate, and its next start
position advances by one or two. Those rules run in the graph here, mirroring what
the host's commit (speculative.choose, MTPDrafter.adopt) will do with the same numbers,
so the host state after committing pass n equals what pass n+1 assumed.

A row that pass n finishes early (EOS, or max_new_tokens reached through a bonus
token) was still computed in pass n+1: that work is discarded. Its blocks are freed
after pass n; pass n+1 may still write one slot in them, which is harmless because a
block's next owner writes every slot before reading it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx

from .attention import PassContext, RowGroup
from .scheduler import PassPlan, block_bucket, block_tables
from .sequence import Sequence


@dataclass
class Launched:
    """A pass whose graph is queued; its outputs are lazy until the host reads them."""

    plan: PassPlan
    first: list[int]              # packed index of each row's first token
    logits: mx.array              # (B, K, V)
    hidden: mx.array              # (N, H)
    greedy: mx.array              # (B, K) argmax at the logit positions
    drafts: Optional[mx.array]    # (B,) the fused MTP's draft for each row's next pass
    starts: mx.array              # (B,) start position of each row, in the graph
    draft_in: Optional[mx.array]  # (B,) the draft each row verifies (drafted rows)
    fused: bool
    ahead: bool = False           # built before the previous pass was committed

    def next_inputs(self) -> tuple[mx.array, mx.array, Optional[mx.array]]:
        """In the graph: each row's next start, next token and next draft, as the host
        will commit them (an accepted draft advances the row by two, bonus token next)."""
        g0 = self.greedy[:, 0]
        if self.draft_in is None:
            return self.starts + 1, g0, self.drafts
        ok = mx.array(self.plan.drafted) & (g0 == self.draft_in)
        return self.starts + 1 + ok.astype(mx.int32), mx.where(ok, self.greedy[:, -1], g0), self.drafts


def continuing_rows(cur: Launched) -> list[int]:
    """Rows of `cur` that may still need a token after it: not finished, and not sure
    to reach max_new_tokens with the token(s) it commits."""
    return [b for b, s in enumerate(cur.plan.rows) if not s.finished and s.num_output + 1 < s.max_new_tokens]


def ahead_layout(rows: list[Sequence], reach: list[int], starts: mx.array, T: int, block_size: int) -> PassContext:
    """The pass context for rows whose start positions are still in the graph. reach[b]:
    an upper bound on the positions row b covers after this pass (blocks and the read
    width are sized for it; the mask uses the true starts)."""
    width = block_bucket(max(-(-r // block_size) for r in reach))
    tables = mx.array(block_tables([s.blocks for s in rows], width), mx.int32)
    positions = (starts[:, None] + mx.arange(T, dtype=mx.int32)).reshape(-1)
    row_of = mx.repeat(mx.arange(len(rows), dtype=mx.int32), T) if T > 1 else mx.arange(len(rows), dtype=mx.int32)
    slots = tables[row_of, positions // block_size] * block_size + positions % block_size
    group = RowGroup(None, tables, starts, T, block_size, fresh=False)
    return PassContext(positions=positions, write_slots=slots, groups=(group,), from_rows=None)
