"""GQA attention with partial RoPE and optional q/k RMSNorm, over a paged KV pool.

Two modes: `ctx is None` is plain causal attention over the input itself (training,
reference checks); otherwise keys/values of the new tokens are written into the layer's
pool at `ctx.write_slots` and attention reads each row's keys through `ctx.read_slots`,
with per-row positions, so rows of different lengths share one pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from .config import ModelArgs


@dataclass(frozen=True)
class PassContext:
    """Index arrays describing one batched pass; shared by every layer of the pass.

    Tokens of a pass are packed: per-token work (projections, MoE, norms) runs on the N
    real tokens only, never on padding. Attention alone needs rows: `rows()` lays packed
    tokens out as (B, T) and `packed()` brings attention output back."""

    positions: mx.array    # (N,) int32: position of each packed token (pads: 0)
    write_slots: mx.array  # (N,) int32: pool slot of each packed token (pads -> scratch)
    read_slots: mx.array   # (B, S) int32: pool slot of each row's key position 0..S-1
    mask: mx.array         # (B, 1, T, S) bool: key s visible to query t of row b
    to_rows: mx.array      # (B, T) int32: packed index of row b's t-th token (pads -> 0)
    from_rows: mx.array    # (N,) int32: b * T + t of each packed token (pads -> 0)
    fresh: bool = False    # every row starts at position 0: attend to the new keys directly
    dense: bool = False    # no padding: packed order is row-major (B*T), no gathers needed

    def rows(self, a: mx.array) -> mx.array:
        """(N, ...) packed -> (B, T, ...)."""
        B, T = self.mask.shape[0], self.mask.shape[2]
        return a.reshape(B, T, *a.shape[1:]) if self.dense else a[self.to_rows]

    def packed(self, a: mx.array) -> mx.array:
        """(B, T, ...) -> (N, ...) packed."""
        flat = a.reshape(-1, *a.shape[2:])
        return flat if self.dense else flat[self.from_rows]


@dataclass
class LayerKV:
    """One layer's pooled keys and values (and indexer keys): (slots, ...) arrays."""

    k: mx.array            # (slots, n_kv_heads, head_dim)
    v: mx.array            # (slots, n_kv_heads, head_dim)
    ik: Optional[mx.array] = None  # (slots, index_head_dim) indexer keys, when indexing


@dataclass(frozen=True)
class FusedAttention:
    qkv_weight: mx.array              # (nh*D + 2*nkv*D, H)
    qkv_bias: Optional[mx.array]
    norm_weight: Optional[mx.array]   # (nh + nkv, D): q_norm rows then k_norm rows


def apply_rope(x: mx.array, args: ModelArgs, offset) -> mx.array:
    """x: (B, heads, T, D); RoPE on the first rope_dims dims, non-interleaved."""
    return mx.fast.rope(x, args.rope_dims, traditional=False, base=args.rope_theta,
                        scale=1.0, offset=offset)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        h, nh, nkv, d = args.hidden_size, args.num_attention_heads, args.num_key_value_heads, args.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = nh, nkv, d
        self.scale = d ** -0.5
        self.q_proj = nn.Linear(h, nh * d, bias=args.attention_bias)
        self.k_proj = nn.Linear(h, nkv * d, bias=args.attention_bias)
        self.v_proj = nn.Linear(h, nkv * d, bias=args.attention_bias)
        self.o_proj = nn.Linear(nh * d, h, bias=False)
        if args.use_qk_norm:
            self.q_norm = nn.RMSNorm(d, eps=args.rms_norm_eps)
            self.k_norm = nn.RMSNorm(d, eps=args.rms_norm_eps)
        self.fused: Optional[FusedAttention] = None  # set by fuse(); plain attribute, not a parameter

    def fuse(self) -> None:
        """Inference layout: one QKV matmul, one q/k norm, one RoPE call per layer (fewer
        kernels per pass is what an overhead-bound decode step needs)."""
        projs = [self.q_proj, self.k_proj, self.v_proj]
        w = mx.concatenate([p.weight for p in projs])
        b = mx.concatenate([p.bias for p in projs]) if self.args.attention_bias else None
        norm = None
        if self.args.use_qk_norm:
            norm = mx.concatenate([mx.broadcast_to(self.q_norm.weight, (self.n_heads, self.head_dim)),
                                   mx.broadcast_to(self.k_norm.weight, (self.n_kv_heads, self.head_dim))])
        mx.eval(w, b, norm)
        self.fused = FusedAttention(w, b, norm)

    def _project(self, x: mx.array, offset) -> tuple[mx.array, mx.array, mx.array]:
        """x (B, T, H) -> roped q (B, nh, T, D), roped k and v (B, nkv, T, D)."""
        B, T, _ = x.shape
        nh, nkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        f = self.fused
        if f is None:
            q = self.q_proj(x).reshape(B, T, nh, d)                              # (B, T, nh, D)
            k = self.k_proj(x).reshape(B, T, nkv, d)
            v = self.v_proj(x).reshape(B, T, nkv, d)
            if self.args.use_qk_norm:
                q, k = self.q_norm(q), self.k_norm(k)
            q = apply_rope(q.transpose(0, 2, 1, 3), self.args, offset)
            k = apply_rope(k.transpose(0, 2, 1, 3), self.args, offset)
            return q, k, v.transpose(0, 2, 1, 3)
        qkv = x @ f.qkv_weight.T
        if f.qkv_bias is not None:
            qkv = qkv + f.qkv_bias
        qkv = qkv.reshape(B, T, nh + 2 * nkv, d)                                 # (B, T, heads, D)
        qk = qkv[:, :, :nh + nkv]
        if f.norm_weight is not None:
            qk = mx.fast.rms_norm(qk, None, self.args.rms_norm_eps) * f.norm_weight
        qk = apply_rope(qk.transpose(0, 2, 1, 3), self.args, offset)            # (B, nh+nkv, T, D)
        return qk[:, :nh], qk[:, nh:], qkv[:, :, nh + nkv:].transpose(0, 2, 1, 3)

    def __call__(self, x: mx.array, ctx: Optional[PassContext] = None,
                 kv: Optional[LayerKV] = None, select: Optional[mx.array] = None) -> mx.array:
        """x: (B, T, H) without ctx; (N, H) packed tokens with ctx."""
        if ctx is None:
            B, T, _ = x.shape
            q, k, v = self._project(x, 0)
            out = mx.fast.scaled_dot_product_attention(
                q, k, v, scale=self.scale, mask="causal" if select is None else select)
            return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, T, -1))
        q, k, v = self._project(x[:, None], ctx.positions)   # each token its own row: (N, heads, 1, D)
        q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]          # (N, heads, D)
        kv.k[ctx.write_slots] = k
        kv.v[ctx.write_slots] = v
        q = ctx.rows(q).transpose(0, 2, 1, 3)                 # (B, nh, T, D)
        if ctx.fresh and select is None:
            # Nothing cached precedes these tokens: the causal kernel over the new keys
            # avoids gathering them back and an explicit (T, S) mask.
            k, v = ctx.rows(k).transpose(0, 2, 1, 3), ctx.rows(v).transpose(0, 2, 1, 3)
            mask = "causal"
        else:
            k = kv.k[ctx.read_slots].transpose(0, 2, 1, 3)      # (B, nkv, S, D)
            v = kv.v[ctx.read_slots].transpose(0, 2, 1, 3)
            mask = ctx.mask if select is None else (ctx.mask & select)
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)
        return self.o_proj(ctx.packed(out.transpose(0, 2, 1, 3)).reshape(x.shape[0], -1))
