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
from .scheduler import bucket, build_context
from .sequence import Sequence


class MTPDrafter:
    def __init__(self, forward: Forward, pool: BlockPool, sync: str):
        self.forward, self.pool, self.eager = forward, pool, sync == "eager"

    def run(self, rows: list[Sequence], starts: list[int], hidden: mx.array, want_drafts: bool) -> None:
        alive = [b for b, s in enumerate(rows) if not s.finished]
        if not alive:
            return
        n_new = [rows[b].computed - starts[b] for b in alive]
        if not (self.eager or want_drafts):
            for b, n in zip(alive, n_new):
                seq = rows[b]
                fresh = hidden[b, :n]
                seq.pending_hidden = fresh if seq.pending_hidden is None else mx.concatenate([seq.pending_hidden, fresh])
                seq.draft = None
            mx.eval([rows[b].pending_hidden for b in alive])
            return
        seqs = [rows[b] for b in alive]
        if any(s.pending_hidden is not None for s in seqs):
            inputs, lens = self._catch_up_inputs(seqs, alive, n_new, hidden)
        else:
            inputs = hidden[mx.array(alive)] if len(alive) < len(rows) else hidden
            lens = n_new
        T = inputs.shape[1]
        offs = [s.mtp_computed for s in seqs]
        nxt = np.zeros((len(seqs), T), np.int32)
        for r, (s, o, n) in enumerate(zip(seqs, offs, lens)):
            nxt[r, :n] = s.tokens[o + 1:o + 1 + n]
        ctx = build_context(offs, lens, [s.blocks for s in seqs], T, self.pool.block_size)
        logits = self.forward.mtp(inputs, mx.array(nxt), ctx, mx.array(np.asarray(lens, np.int32) - 1))
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
    def _catch_up_inputs(seqs, alive, n_new, hidden):
        parts = [mx.concatenate([s.pending_hidden, hidden[b, :n]]) if s.pending_hidden is not None
                 else hidden[b, :n] for s, b, n in zip(seqs, alive, n_new)]
        lens = [p.shape[0] for p in parts]
        T = bucket(max(lens))
        padded = [mx.pad(p, [(0, T - p.shape[0]), (0, 0)]) for p in parts]
        return mx.stack(padded), lens
