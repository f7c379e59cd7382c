"""Launching the next decode pass before the current one has finished (pipelining).

A decode pass is bound by the host: building and dispatching its graph costs about as
much as running it. So while pass n runs, the engine builds pass n+1 from pass n's
lazy outputs and queues it; MLX starts it as soon as pass n is done. That is possible
when every input of pass n+1 follows from pass n's outputs by a fixed rule: the rows
are greedy decode rows, a row's next token is its argmax (the bonus token when its
draft was accepted), its next draft is the fused MTP's candidate, and its next start
position advances by one or two. Those rules run in the graph here, mirroring what
the host's commit (speculative.choose, MTPDrafter.adopt) will do with the same numbers,
so the host state after committing pass n equals what pass n+1 assumed. The pass itself
is built by `Launcher.launch_ahead` (launch.py), its layout by `layout.ahead_layout`.

A row that pass n finishes early (EOS, or max_new_tokens reached through a bonus
token) was still computed in pass n+1: that work is discarded. Its blocks are freed
after pass n; pass n+1 may still write one slot in them, which is harmless because a
block's next owner writes every slot before reading it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import mlx.core as mx

if TYPE_CHECKING:
    from .launch import Launched


def continuing_rows(cur: Launched) -> list[int]:
    """Rows of `cur` that may still need a token after it: not finished, and not sure
    to reach max_new_tokens with the token(s) it commits."""
    return [b for b, s in enumerate(cur.plan.rows) if not s.finished and s.num_output + 1 < s.max_new_tokens]


def next_inputs(cur: Launched) -> tuple[mx.array, mx.array, Optional[mx.array]]:
    """In the graph: each row's next start, next token and next draft, as the host
    will commit them (an accepted draft advances the row by two, bonus token next)."""
    g0 = cur.greedy[:, 0]
    if cur.draft_in is None:
        return cur.starts + 1, g0, cur.drafts
    ok = mx.array(cur.plan.drafted) & (g0 == cur.draft_in)
    return cur.starts + 1 + ok.astype(mx.int32), mx.where(ok, cur.greedy[:, -1], g0), cur.drafts
