"""The block drafter behind drafter.py's interface: k drafts a row from one drafter pass.

- The target pass hands over its drafter features (`TargetOutputs.hidden`: a few spread
  layers' states concatenated, `Forward(feature_layers=...)`). Each row's verified
  positions among them are kept as a backlog of slices (counted in its state bytes); a
  rejected position never is, since the engine calls `draft` after verification. Only
  when the row drafts does the backlog go through the drafter's context projection into
  its `ContextCache`: a pass that does not draft costs the drafter nothing but a slice,
  and may be queued ahead like a plain one (not `eager`).
- A row's context starts where the engine first showed it one: at 0, or after the
  prefix cache's share of its prompt (those positions were never computed here, so the
  drafter reads less context there; the drafts are only proposals, losslessness holds).
  A pass run without features (rows the launcher keeps from drafting, launch.py) ends
  the rows' contexts: one starts again at the next pass that has them.
- All drafting rows propose in one batched drafter pass; one host read takes the drafts.
  Greedy rows draft the argmax; sampling rows draw draft i from its own distribution q_i
  (the drafter's positions are independent given the context), kept for verification.
  Greedy rows keep the drafter's confidence in each draft (`Sequence.draft_conf`), from
  which the adaptive policy cuts each row's drafts to the length that pays (row_lengths.py).
- With `lookup`, a greedy row whose last tokens occurred earlier in its own tokens drafts
  what followed them (lookup.py) and is left out of the drafter's pass; its context still
  takes each pass's positions (queued, not waited for), so the drafter's next pass for it
  has no long backlog to project first. Such drafts carry no confidence, so the adaptive
  policy never cuts them, nor learns the drafter's acceptance by position from them
  (`Sequence.drafts_looked_up`; they keep far more of their drafts, or none), and the
  pass's reason counts them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import mlx.core as mx
import numpy as np

from ..model import Model
from ..sampler import probs, sample
from ..sequence import Sequence
from .acceptance import conditional
from .block_drafter import load_checkpoint_drafter, measured_acceptance
from .drafter import PendingDrafts, TargetOutputs
from .drafter_context import CONTEXT_BUCKET, ContextCache
from .drafter_pass import FusedDrafter, Proposal, propose
from .lookup import RowTexts, lookup_drafts
from .tree import TREE_DEPTH, second_choices


def draft_confidence(logits: np.ndarray) -> np.ndarray:
    """Evaluated draft logits (R, k, V) -> (R, k): q of each greedy draft, the drafter's own
    odds. On the host: MLX's CPU build evaluates exp element by element through libm,
    numpy's is vectorised."""
    e = logits - logits.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    return 1.0 / e.sum(axis=-1)


@dataclass
class Backlog:
    """A row's verified features not yet in its context: appended to in place each pass."""

    start: int  # absolute position of the first backlogged feature row
    end: int  # the absolute position after the last one
    parts: list = field(default_factory=list)  # (n_i, n*H) feature slices, in order
    nbytes: int = 0


class BlockDrafting:
    eager = False  # a pass that does not draft only backlogs its features

    def __init__(
        self, target: Model, checkpoint_dir: Path, compile: bool = True, tree: int = 0, lookup: int = 0
    ):
        """tree: the most branch leaves a lone row's drafts may grow (tree.py; 0: chains);
        lookup: the tokens a row's suffix must match to draft by lookup (0: never)."""
        self.target, self.tree, self.lookup = target, tree, lookup
        self.looked_up = 0  # rows whose drafts the last `draft` looked up
        self._texts = RowTexts()  # each looking-up row's tokens, searched by lookup_drafts
        self.drafter = load_checkpoint_drafter(checkpoint_dir, target.args)
        self.fused = FusedDrafter(self.drafter)  # the drafter's pass in inference layout
        self.prior_acceptance = conditional(measured_acceptance(checkpoint_dir))
        self.cache = ContextCache(self.drafter, compile)
        self._compile = compile
        self._proposers: dict[int, object] = {}  # k -> the drafter pass, compiled per k
        self._backlog: dict[int, Backlog] = {}  # row -> verified features not yet in its context

    def proposer(self, k: int):
        """The drafter's pass for k drafts, called as (ctx, lens, anchors, ends) from
        `cache.gather`: one compiled graph per (rows, context bucket) shape (warm traces
        them), or eager when the engine does not compile."""
        if k not in self._proposers:

            def fn(ctx, lens, anchors, ends):
                return tuple(propose(self.fused, self.target, ctx, lens, anchors, k, ends))

            self._proposers[k] = mx.compile(fn) if self._compile else fn
        return self._proposers[k]

    def warm(self, max_rows: int, max_context: int, ks: tuple[int, ...]) -> int:
        if not self._compile:
            return 0
        cfg, traced = self.drafter.cfg, self.cache.warm()
        for S in range(CONTEXT_BUCKET, max(max_context, 1) + CONTEXT_BUCKET, CONTEXT_BUCKET):
            for R in range(1, max_rows + 1):
                zero = mx.zeros((R, cfg.num_kv_heads, S, cfg.head_dim))
                ints = mx.ones((R,), mx.int32)
                for k in ks:
                    mx.eval(self.proposer(k)([(zero, zero)] * cfg.num_layers, ints, ints, ints))
                    traced += 1
        return traced

    def time_draft(self, rows: int, context: int, k: int) -> int:
        """What drafting k a row costs after a pass that verified k + 1 positions of `rows`
        rows of `context` tokens, as `draft` does it (the new positions into the rows'
        context caches, the gather, the drafter pass, the host read), in ns; for
        calibrate.py. Uses rows of its own (negative ids), trimmed back after."""
        ids = [-(r + 1) for r in range(rows)]
        width = self.drafter.cfg.feature_width
        for rid in ids:
            if self.cache.length(rid) != context:
                self.cache.drop(rid)
                self.cache.append(rid, mx.zeros((context, width)), 0)
        self.cache.settle(ids)
        fresh = mx.zeros((k + 1, width))
        mx.eval(fresh)
        t0 = time.perf_counter_ns()
        for rid in ids:
            self.cache.append(rid, fresh)
        ctx, lens, ends = self.cache.gather(ids)
        out = Proposal(*self.proposer(k)(ctx, lens, mx.zeros((rows,), mx.int32), ends))
        self.cache.settle(ids, out.tokens, out.logits)
        out.tokens.tolist(), draft_confidence(np.asarray(out.logits)).tolist()
        spent = time.perf_counter_ns() - t0
        for rid in ids:
            self.cache.trim(rid, context)
        return spent

    def forget_timing_rows(self, rows: int) -> None:
        for r in range(rows):
            self.cache.drop(-(r + 1))

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.drafter.cfg.target_layers

    def _end(self, rid: int) -> int:
        """The absolute position after the row's last verified position held."""
        b = self._backlog.get(rid)
        return b.end if b else self.cache.end(rid)

    def _flush(self, rid: int) -> None:
        """Project the row's backlog into its context cache (lazily; settled after)."""
        b = self._backlog.pop(rid, None)
        if b is not None:
            feats = b.parts[0] if len(b.parts) == 1 else mx.concatenate(b.parts)
            self.cache.append(rid, feats, b.start)

    def draft(self, rows: list[Sequence], target: TargetOutputs, k: int) -> Optional[PendingDrafts]:
        self.looked_up = 0
        if target.hidden is None:  # run without features: the rows' contexts end here
            for seq in rows:
                seq.clear_drafts()
                seq.kept_nodes = []
                self.release(seq)
            return None
        for b, seq in enumerate(rows):
            seq.clear_drafts()
            if seq.finished:
                continue
            rid, start, n = seq.request_id, target.starts[b], seq.computed - target.starts[b]
            held = rid in self._backlog or self.cache.length(rid) > 0
            if held and self._end(rid) != start:
                self.release(seq)  # a gap (never expected): restart the row's context here
            if n > 0:
                f = target.first[b]
                nodes, seq.kept_nodes = seq.kept_nodes, []
                part = target.hidden[mx.array(nodes) + f] if nodes else target.hidden[f : f + n]
                log = self._backlog.get(rid)
                if log is None:
                    base = self.cache.end(rid) if self.cache.length(rid) else start
                    log = self._backlog[rid] = Backlog(base, base)
                log.parts.append(part)
                log.end, log.nbytes = log.end + n, log.nbytes + part.nbytes
        drafting = [s for s in rows if k > 0 and not s.finished and not s.prefilling]
        if self.lookup and drafting:
            drafting = self._look_up(drafting, k)
        if not drafting:
            return None
        for s in drafting:
            self._flush(s.request_id)
        return self._launch_rows(drafting, k)

    def _look_up(self, seqs: list[Sequence], k: int) -> list[Sequence]:
        """Set the drafts of the greedy rows whose suffix occurred before; returns the rest,
        for the drafter's pass."""
        rest, looked = [], []
        for s in seqs:
            found = []
            if s.temperature == 0.0:
                found = lookup_drafts(s.tokens, k, self.lookup, self._texts.of(s.request_id, s.tokens))
            if found:
                s.drafts, s.drafts_looked_up = found, True
                looked.append(s.request_id)
            else:
                rest.append(s)
        for rid in looked:  # their contexts kept current, queued without waiting
            self._flush(rid)
        if looked:
            self.cache.settle(looked, wait=False)
        self.looked_up = len(looked)
        return rest

    def _launch_rows(self, seqs: list[Sequence], k: int) -> PendingDrafts:
        """Queue the drafter's pass for the rows (one evaluation: their contexts' appends
        and the drafts); `land` reads it."""
        ids = [s.request_id for s in seqs]
        ctx, lens, ends = self.cache.gather(ids)
        anchors = mx.array([s.tokens[-1] for s in seqs], mx.int32)
        out = Proposal(*self.proposer(k)(ctx, lens, anchors, ends))
        self.cache.settle(ids, out.tokens, out.logits, wait=False)
        return PendingDrafts(seqs, out.tokens, lambda: self._land_rows(seqs, k, out))

    def _land_rows(self, seqs: list[Sequence], k: int, out: Proposal) -> None:
        greedy, logits = out.tokens.tolist(), np.asarray(out.logits)  # a view, not a copy
        conf = draft_confidence(logits).tolist()
        if all(s.temperature == 0.0 for s in seqs):
            for s, drafts, c in zip(seqs, greedy, conf):
                s.drafts, s.draft_conf = drafts, c
            if self.tree and len(seqs) == 1:  # a lone row may branch (tree.py)
                depth = min(k, TREE_DEPTH)
                seqs[0].draft_alternatives = second_choices(logits[0, :depth], seqs[0].drafts)
            return
        for r, s in enumerate(seqs):
            if s.temperature == 0.0:
                s.drafts, s.draft_conf = greedy[r], conf[r]
                continue
            for i in range(k):
                q = probs(logits[r, i], s.temperature, s.top_p)
                s.draft_probs.append(q)
                s.drafts.append(sample(q, s.rng))

    def rollback(self, seq: Sequence, verified: int) -> None:
        rid = seq.request_id
        if self._end(rid) > verified and (rid in self._backlog or self.cache.length(rid)):
            self._flush(rid)
            self.cache.trim(rid, max(verified, self.cache.base(rid)))

    def release(self, seq: Sequence) -> None:
        self.cache.drop(seq.request_id)
        self._backlog.pop(seq.request_id, None)
        self._texts.drop(seq.request_id)

    def verified_in_pool(self, seq: Sequence) -> int:
        return seq.computed  # no drafter state in the pool blocks

    def row_bytes(self, seq: Sequence) -> int:
        """The row's cached context (each drafter layer's keys and values), its backlog of
        features, and a sampling row's draft distributions."""
        b = self._backlog.get(seq.request_id)
        own = self.cache.nbytes(seq.request_id) + (b.nbytes if b else 0)
        return own + sum(q.nbytes for q in seq.draft_probs)
