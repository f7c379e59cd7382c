"""One block-drafter pass: k drafts for each of R rows from their cached contexts.

- `propose` runs a drafter: the modules as training has them (block_drafter.py), or
  `FusedDrafter`, the same function from inference-layout copies of the weights, which the
  engine runs: each layer's q, k and v projections as one product and its gate and up
  projections as another, weights pre-transposed (a transpose is a graph node of its own
  every pass), and the rotary tables and the attention mask built once a pass for every
  layer. On MLX's CPU backend each kernel costs microseconds whatever its size, and a
  drafter pass is a few hundred small ones. Summation order aside, the two give the same
  logits (a test holds them together).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import mlx.core as mx

from ..layers import fast_math
from .block_drafter import BlockDrafter, LayerContext, block_mask, draft_logits, rope_tables, rotate


class Proposal(NamedTuple):
    tokens: mx.array  # (R, k) int32 greedy drafts
    logits: mx.array  # (R, k, V) float32: the draft distribution q before any temperature


def propose(
    drafter: "BlockDrafter | FusedDrafter",
    target,
    ctx: LayerContext,
    ctx_len: mx.array,
    anchors: mx.array,
    k: int,
    anchor_positions: Optional[mx.array] = None,
) -> Proposal:
    """k drafts for each of R rows. ctx: each layer's cached context keys/values
    (R, kv_heads, S, D) with row r's first ctx_len[r] entries valid (ContextCache.gather);
    anchors (R,): each row's last committed token, at anchor_positions[r] (default
    ctx_len[r]: a context from position 0). A drafter with a context_window reads only the
    last context_window entries. Pure: reads its arguments only, returns lazy arrays."""
    S = ctx[0][0].shape[2]
    at = ctx_len if anchor_positions is None else anchor_positions
    positions = at[:, None] + mx.arange(k + 1, dtype=mx.int32)[None]
    index = mx.arange(S, dtype=mx.int32)[None, :]
    visible = index < ctx_len[:, None]
    if drafter.cfg.context_window:
        visible = visible & (index >= ctx_len[:, None] - drafter.cfg.context_window)
    hidden = drafter(drafter.block_inputs(target, anchors, k), positions, ctx, visible[:, None])
    logits = draft_logits(target, hidden[:, 1:]).astype(mx.float32)  # the anchor's row is dropped
    return Proposal(mx.argmax(logits, axis=-1).astype(mx.int32), logits)


class FusedDrafter:
    """A BlockDrafter's function from inference-layout copies of its weights (made once,
    never trained): called as the drafter is, by `propose`."""

    def __init__(self, drafter: BlockDrafter):
        self.drafter, self.cfg = drafter, drafter.cfg
        self.layers = []
        for layer in drafter.layers:
            a, mlp = layer.self_attn, layer.mlp
            qkv = mx.concatenate([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            gate_up = mx.concatenate([mlp.gate_proj.weight, mlp.up_proj.weight])
            weights = tuple(mx.contiguous(w.T) for w in (qkv, a.o_proj.weight, gate_up, mlp.down_proj.weight))
            mx.eval(weights)
            self.layers.append((layer, weights))

    def block_inputs(self, target, anchors: mx.array, k: int) -> mx.array:
        return self.drafter.block_inputs(target, anchors, k)

    def __call__(self, h: mx.array, positions: mx.array, ctx: LayerContext, visible: mx.array) -> mx.array:
        """As BlockDrafter.__call__: block rows (B, T, H) -> drafter hidden (B, T, H)."""
        cfg, (B, T, _) = self.cfg, h.shape
        D, nh, nkv = cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
        tables = rope_tables(positions, cfg.rope_theta, D)
        mask = block_mask(visible, T, h.dtype)
        for (layer, (qkv, o, gate_up, down)), (ctx_k, ctx_v) in zip(self.layers, ctx):
            attn = layer.self_attn
            p = (layer.input_layernorm(h) @ qkv).reshape(B, T, nh + 2 * nkv, D).transpose(0, 2, 1, 3)
            q = rotate(attn.q_norm(p[:, :nh]), tables)
            keys = mx.concatenate([ctx_k, rotate(attn.k_norm(p[:, nh : nh + nkv]), tables)], axis=2)
            values = mx.concatenate([ctx_v, p[:, nh + nkv :]], axis=2)
            out = _attend(q, keys, values, mask, D**-0.5)
            h = h + out.transpose(0, 2, 1, 3).reshape(B, T, -1) @ o
            g, u = mx.split(layer.post_attention_layernorm(h) @ gate_up, 2, axis=-1)
            h = h + (fast_math.silu(g) * u) @ down
        return h


def _attend(q: mx.array, keys: mx.array, values: mx.array, mask: mx.array, scale: float) -> mx.array:
    """Scaled dot-product attention as MLX's, its softmax from fast_math: q (B, nh, T, D),
    keys and values (B, nkv, S, D), additive mask (B, 1, T, S) -> (B, nh, T, D). A KV head's
    query heads ride along the rows of one product instead of broadcasting the keys."""
    B, nh, T, D = q.shape
    nkv = keys.shape[1]
    rep = nh // nkv
    scores = ((q * scale).reshape(B, nkv, rep * T, D) @ keys.swapaxes(-1, -2)).reshape(B, nkv, rep, T, -1)
    p = fast_math.softmax(scores + mask[:, :, None]).astype(q.dtype)
    return (p.reshape(B, nkv, rep * T, -1) @ values).reshape(B, nh, T, D)
