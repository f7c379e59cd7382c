"""The MTP drafter: feeds verified (hidden, next token) pairs to the MTP layer and keeps
each row's next draft.

After a target pass a row has new verified pairs (h_i, x_{i+1}) for every position the
pass committed to its KV. `eager` runs the MTP layer over them every pass, drafting or
not, so its KV stays current; `lazy` runs it only when the next pass may draft, keeping
the skipped hidden states per row (counted in its state bytes) to catch up from. At
depth 1 the MTP KV never holds an unverified pair, so it never rolls back.
"""
from __future__ import annotations

import mlx.core as mx
import numpy as np

from .cache import BlockPool
from .forward import Forward
from .sampler import probs, sample
from .scheduler import build_layout
from .sequence import Sequence


class MTPDrafter:
    def __init__(self, forward: Forward, pool: BlockPool, sync: str):
        self.forward, self.pool, self.eager = forward, pool, sync == "eager"

    def run(self, rows: list[Sequence], starts: list[int], hidden: mx.array, first: list[int],
            want_drafts: bool) -> None:
        """hidden: the target pass's packed hidden states; first[b]: row b's first index."""
        alive = [b for b, s in enumerate(rows) if not s.finished]
        if not alive:
            return
        if not (self.eager or want_drafts):
            for b in alive:
                seq, fresh = rows[b], hidden[first[b]:first[b] + rows[b].computed - starts[b]]
                seq.pending_hidden = fresh if seq.pending_hidden is None else mx.concatenate([seq.pending_hidden, fresh])
                seq.draft = None
            mx.eval([rows[b].pending_hidden for b in alive])
            return
        seqs = [rows[b] for b in alive]
        lens = [s.computed - s.mtp_computed for s in seqs]   # backlog (lazy) + this pass's pairs
        lay = build_layout([s.mtp_computed for s in seqs], lens, [s.blocks for s in seqs],
                           self.pool.block_size)
        nxt = np.zeros(lay.n_tokens, np.int32)
        for s, f, n in zip(seqs, lay.first, lens):
            nxt[f:f + n] = s.tokens[s.mtp_computed + 1:s.mtp_computed + 1 + n]
        if any(s.pending_hidden is not None for s in seqs):
            inputs = self._catch_up_inputs(seqs, [first[b] for b in alive], starts, alive, hidden, lay.n_tokens)
        else:  # every pair comes from this pass: one gather from the packed hidden states
            src = np.zeros(lay.n_tokens, np.int32)
            for b, f, n in zip(alive, lay.first, lens):
                src[f:f + n] = np.arange(first[b], first[b] + n)
            inputs = hidden[mx.array(src)]
        last = mx.array([f + n - 1 for f, n in zip(lay.first, lens)])
        logits = self.forward.mtp(inputs, mx.array(nxt), lay.ctx, last)
        greedy = mx.argmax(logits, axis=-1).tolist()
        for r, s in enumerate(seqs):
            s.mtp_computed, s.pending_hidden = s.computed, None
            s.draft = s.draft_probs = None
            if not want_drafts or s.prefilling:
                continue
            if s.temperature == 0.0:
                s.draft = greedy[r]
            else:
                s.draft_probs = probs(np.array(logits[r]), s.temperature, s.top_p)
                s.draft = sample(s.draft_probs, s.rng)

    @staticmethod
    def _catch_up_inputs(seqs, firsts, starts, alive, hidden, n_tokens):
        parts = []
        for s, f, b in zip(seqs, firsts, alive):
            if s.pending_hidden is not None:
                parts.append(s.pending_hidden)
            parts.append(hidden[f:f + s.computed - starts[b]])
        flat = mx.concatenate(parts)
        return mx.pad(flat, [(0, n_tokens - flat.shape[0]), (0, 0)])
