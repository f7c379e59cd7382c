"""The MTP drafter (drafter.py's interface): feeds verified (hidden, next token) pairs to
the MTP layer and keeps each row's next drafts.

- After a target pass a row has new verified pairs (h_i, x_{i+1}) for every position the
  pass committed to its KV. `eager` runs the MTP layer over them every pass, drafting or
  not, so its KV stays current; `lazy` runs it only when the next pass may draft, keeping
  the skipped hidden states per row (counted in its state bytes) to catch up from.
- k > 1 chains the layer: step j feeds draft j-1 with the layer's own output hidden
  (already after shared_head.norm: the pre-norm one ruins later positions). Those steps
  write MTP KV past the verified pairs; `mtp_computed` never counts them, so the next
  catch-up overwrites them with pairs from the target's own hidden states (rollback).
- Depth 1 (k = 1) can instead run fused into the target pass (`can_fuse`, `adopt`).
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
import numpy as np

from ..cache import BlockPool
from ..forward import Forward
from ..layout import build_layout
from ..sampler import probs, sample
from ..sequence import Sequence
from .drafter import TargetOutputs


class MTPDrafter:
    prior_acceptance = ()  # nothing measured: the policy starts from its own prior
    looked_up = 0  # it never looks drafts up (lookup.py is the block drafter's)

    def __init__(
        self, forward: Forward, pool: BlockPool, sync: str, ensure_blocks: Callable[[Sequence, int], None]
    ):
        self.forward, self.pool, self.eager = forward, pool, sync == "eager"
        self.ensure_blocks = ensure_blocks

    def rollback(self, seq: Sequence, verified: int) -> None:
        seq.mtp_computed = min(seq.mtp_computed, verified)

    def release(self, seq: Sequence) -> None:
        seq.pending_hidden, seq.pending_bytes = None, 0

    def verified_in_pool(self, seq: Sequence) -> int:
        return seq.mtp_computed  # the MTP KV shares the row's blocks

    def warm(self, max_rows: int, max_context: int, ks: tuple[int, ...]) -> int:
        return 0  # the MTP layer's shapes are traced with the target's (Forward.warm)

    def row_bytes(self, seq: Sequence) -> int:
        """A lazy backlog of hidden states, and a sampling row's draft distributions q."""
        return seq.pending_bytes + sum(q.nbytes for q in seq.draft_probs)

    def draft(self, rows: list[Sequence], target: TargetOutputs, k: int) -> None:
        """Bring the MTP KV up to each live row's verified pairs, then draft k tokens."""
        starts, hidden, first, want_drafts = target.starts, target.hidden, target.first, k > 0
        alive = [b for b, s in enumerate(rows) if not s.finished]
        if not alive:
            return
        if not (self.eager or want_drafts):
            for b in alive:
                seq = rows[b]
                # Kept as slices, joined only at catch-up (no per-pass copy of the backlog).
                part = hidden[first[b] : first[b] + seq.computed - starts[b]]
                if seq.pending_hidden is None:
                    seq.pending_hidden = []
                seq.pending_hidden.append(part)
                seq.pending_bytes += part.nbytes
                seq.clear_drafts()
            return
        seqs = [rows[b] for b in alive]
        lens = [s.computed - s.mtp_computed for s in seqs]  # backlog (lazy) + this pass's pairs
        lay = build_layout(
            [s.mtp_computed for s in seqs], lens, [s.blocks for s in seqs], self.pool.block_size
        )
        nxt = np.zeros(lay.n_tokens, np.int32)
        for s, f, n in zip(seqs, lay.first, lens):
            nxt[f : f + n] = s.tokens[s.mtp_computed + 1 : s.mtp_computed + 1 + n]
        if any(s.pending_hidden is not None for s in seqs):
            inputs = self._catch_up_inputs(
                seqs, [first[b] for b in alive], starts, alive, hidden, lay.n_tokens
            )
        else:  # every pair comes from this pass: one gather from the packed hidden states
            src = np.zeros(lay.n_tokens, np.int32)
            for b, f, n in zip(alive, lay.first, lens):
                src[f : f + n] = np.arange(first[b], first[b] + n)
            inputs = hidden[mx.array(src)]
        last = mx.array([f + n - 1 for f, n in zip(lay.first, lens)])
        logits, out = self.forward.mtp(inputs, mx.array(nxt), lay.ctx, last)
        for s in seqs:
            s.mtp_computed, s.pending_hidden, s.pending_bytes = s.computed, None, 0
            s.drafts, s.draft_probs = [], []
        drafting = [r for r, s in enumerate(seqs) if want_drafts and not s.prefilling]
        if drafting:
            self._chain([seqs[r] for r in drafting], logits[mx.array(drafting)], out[mx.array(drafting)], k)

    def _chain(self, seqs: list[Sequence], logits: mx.array, out: mx.array, k: int) -> None:
        """Drafts 1..k per row: draft 1 from the verified pairs' logits, then the layer
        fed (its own output hidden, the previous draft) at the next position, k - 1 times.
        Greedy rows keep their drafts in the graph until the last step (one host read)."""
        greedy = all(s.temperature == 0.0 for s in seqs)
        steps = []  # greedy: each step's (R,) drafts, still lazy
        for j in range(k):
            if j:
                positions = [s.computed + j - 1 for s in seqs]  # the pair (h^_{c+j-1}, d_j)
                for s, p in zip(seqs, positions):
                    self.ensure_blocks(s, p + 1)
                lay = build_layout(positions, [1] * len(seqs), [s.blocks for s in seqs], self.pool.block_size)
                tokens = steps[-1] if greedy else mx.array([s.drafts[-1] for s in seqs], mx.int32)
                logits, out = self.forward.mtp(out, tokens, lay.ctx, mx.arange(len(seqs)))
            if greedy:
                steps.append(mx.argmax(logits, axis=-1).astype(mx.int32))
                continue
            top = mx.argmax(logits, axis=-1).tolist()
            for r, s in enumerate(seqs):
                if s.temperature == 0.0:
                    s.drafts.append(top[r])
                else:
                    q = probs(np.array(logits[r]), s.temperature, s.top_p)
                    s.draft_probs.append(q)
                    s.drafts.append(sample(q, s.rng))
        if greedy:
            for s, drafts in zip(seqs, mx.stack(steps, axis=1).tolist()):
                s.drafts = drafts

    def can_fuse(self, rows: list[Sequence], drafting: bool) -> bool:
        """Whether this pass's MTP work can run inside the target pass: greedy rows whose
        MTP is in step, and a pass that will run the MTP (eager, or lazy while drafting)."""
        return (
            (self.eager or drafting)
            and all(s.temperature == 0.0 for s in rows)
            and all(s.pending_hidden is None and s.mtp_computed == s.computed for s in rows)
        )

    @staticmethod
    def fused_inputs(
        rows: list[Sequence],
        feeds: list[list[int]],
        drafted: list[bool],
        starts: list[int],
        first: list[int],
        K: int,
        n_tokens: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(next_known, next_from, candidates) for Forward.main_and_draft. The pair at
        position i needs token i+1: from the prompt when known, else the target's argmax
        at this pass (first output token, committed token, bonus). candidates[b]: the
        packed positions whose MTP output drafts if the row's draft is rejected / accepted
        (the graph picks one)."""
        known, src = np.zeros(n_tokens, np.int32), np.full(n_tokens, -1, np.int32)
        cand = np.zeros((len(rows), 2), np.int32)
        for b, (seq, feed, f, s) in enumerate(zip(rows, feeds, first, starts)):
            n = len(feed)
            nxt = seq.tokens[s + 1 : s + 1 + n]
            known[f : f + len(nxt)] = nxt
            if len(nxt) < n:  # the last pair(s) wait on this pass's argmax
                src[f + len(nxt)] = b * K
                if drafted[b]:
                    src[f + 1] = b * K + 1
            cand[b] = [f, f + 1] if drafted[b] else [f + n - 1] * 2
        return known, src, cand

    def adopt(self, rows: list[Sequence], drafts: list[int] | None, want_drafts: bool) -> None:
        """Book the MTP work a fused pass did: every live row's MTP is in step again.
        drafts: the pass's draft per row (None: its MTP head was skipped)."""
        for b, seq in enumerate(rows):
            if seq.finished:
                continue
            seq.mtp_computed = seq.computed
            keep = drafts is not None and want_drafts and not seq.prefilling
            seq.drafts, seq.draft_probs = ([drafts[b]] if keep else []), []

    @staticmethod
    def _catch_up_inputs(seqs, firsts, starts, alive, hidden, n_tokens):
        parts = []
        for s, f, b in zip(seqs, firsts, alive):
            parts.extend(s.pending_hidden or [])
            parts.append(hidden[f : f + s.computed - starts[b]])
        flat = mx.concatenate(parts)
        return mx.pad(flat, [(0, n_tokens - flat.shape[0]), (0, 0)])
