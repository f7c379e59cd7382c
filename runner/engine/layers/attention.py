"""GQA attention with partial RoPE and optional q/k RMSNorm, over a paged KV pool.

Two modes: `ctx is None` is plain causal attention over the input itself (training,
reference checks); otherwise the input is a pass's packed tokens, their keys/values are
written into the layer's pool at `ctx.write_slots`, and attention reads each row's keys
through its group's `read_slots`, with per-token positions, so rows of different lengths
share one pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from ..cache import LayerKV
from ..config import ModelArgs
from ..layout import PassContext
from . import fast_math


@dataclass(frozen=True)
class FusedAttention:
    """Inference layout of one attention block. One matmul yields every head's q, k and v
    and, for the rotary heads, a rotate-half copy (weight rows permuted and negated, an
    exact transform), so q/k norm and RoPE then take one elementwise kernel instead of
    slices and a concatenation per layer."""

    w: mx.array  # (H, 2 * heads * D): [q | k | v | rot(q) | rot(k) | 0], transposed
    bias: Optional[mx.array]  # (2 * heads * D,)
    norm: Optional[mx.array]  # (heads, D) q/k norm weights (ones for v heads)
    norm_rot: Optional[mx.array]  # (heads, D) the same weights in rotate-half order
    normed: mx.array  # (heads, 1) bool: q and k heads (norm and RoPE apply)
    o_w: mx.array  # (nh * D, H) output projection, transposed
    score_bound: Optional[float]  # no scaled score q.k exceeds it in magnitude (qk-norm), or None


def rope_table(positions: mx.array, args: ModelArgs) -> tuple[mx.array, mx.array]:
    """cos and sin (N, 1, head_dim) for packed tokens at `positions`, computed once a pass
    and shared by every layer: cos is 1 and sin 0 on the dims RoPE leaves alone."""
    half, D = args.rope_dims // 2, args.head_dim
    freqs = args.rope_theta ** (-mx.arange(0, half, dtype=mx.float32) / half)
    angles = positions.astype(mx.float32)[:, None] * freqs  # (N, half)
    rest = D - 2 * half
    cos, sin = mx.cos(angles), mx.sin(angles)
    ones, zeros = mx.ones((angles.shape[0], rest)), mx.zeros((angles.shape[0], rest))
    return (
        mx.concatenate([cos, cos, ones], axis=-1)[:, None],
        mx.concatenate([sin, sin, zeros], axis=-1)[:, None],
    )


def rotate_half_rows(w: mx.array, rope_dims: int, negate: bool = True) -> mx.array:
    """Rows (..., D, in) of one head -> the rows whose product gives rotate_half of the
    head's output: [-x2, x1, 0] on the rotary dims (non-interleaved), zero elsewhere."""
    half = rope_dims // 2
    x1, x2 = w[..., :half, :], w[..., half : 2 * half, :]
    rest = mx.zeros_like(w[..., 2 * half :, :])
    return mx.concatenate([-x2 if negate else x2, x1, rest], axis=-2)


def apply_rope(x: mx.array, args: ModelArgs, offset) -> mx.array:
    """x: (B, heads, T, D); RoPE on the first rope_dims dims, non-interleaved, from
    `offset` (an int or per-row array)."""
    return mx.fast.rope(x, args.rope_dims, traditional=False, base=args.rope_theta, scale=1.0, offset=offset)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        h, nh, nkv, d = args.hidden_size, args.num_attention_heads, args.num_key_value_heads, args.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = nh, nkv, d
        self.scale = d**-0.5
        self.q_proj = nn.Linear(h, nh * d, bias=args.attention_bias)
        self.k_proj = nn.Linear(h, nkv * d, bias=args.attention_bias)
        self.v_proj = nn.Linear(h, nkv * d, bias=args.attention_bias)
        self.o_proj = nn.Linear(nh * d, h, bias=False)
        if args.use_qk_norm:
            self.q_norm = nn.RMSNorm(d, eps=args.rms_norm_eps)
            self.k_norm = nn.RMSNorm(d, eps=args.rms_norm_eps)
        self.fused: Optional[FusedAttention] = None  # set by fuse(); plain attribute, not a parameter

    def fuse(self) -> None:
        """Build the inference layout (see FusedAttention)."""
        a, nh, nkv, d = self.args, self.n_heads, self.n_kv_heads, self.head_dim
        heads = nh + 2 * nkv
        projs = [self.q_proj, self.k_proj, self.v_proj]
        w = mx.concatenate([p.weight for p in projs]).reshape(heads, d, -1)  # (heads, D, H)
        rot = mx.concatenate([rotate_half_rows(w[: nh + nkv], a.rope_dims), mx.zeros_like(w[nh + nkv :])])
        bias = None
        if a.attention_bias:
            b = mx.concatenate([p.bias for p in projs]).reshape(heads, d, 1)
            b_rot = mx.concatenate(
                [rotate_half_rows(b[: nh + nkv], a.rope_dims), mx.zeros_like(b[nh + nkv :])]
            )
            bias = mx.concatenate([b, b_rot]).reshape(-1)
        norm = norm_rot = None
        if a.use_qk_norm:
            ones = mx.ones((nkv, d))
            norm = mx.concatenate(
                [
                    mx.broadcast_to(self.q_norm.weight, (nh, d)),
                    mx.broadcast_to(self.k_norm.weight, (nkv, d)),
                    ones,
                ]
            )
            norm_rot = mx.concatenate(
                [rotate_half_rows(norm[: nh + nkv, :, None], a.rope_dims, negate=False)[..., 0], ones]
            )
        normed = (mx.arange(heads) < nh + nkv)[:, None]
        bound = None
        if a.use_qk_norm:
            # RMSNorm leaves a head's vector at most sqrt(D) long, its weights stretch that by
            # at most their largest magnitude and RoPE rotates: |q.k| * D^-0.5 is at most
            # sqrt(D) * max|w_q| * max|w_k|.
            q_max, k_max = mx.abs(self.q_norm.weight).max().item(), mx.abs(self.k_norm.weight).max().item()
            bound = d**0.5 * q_max * k_max
        self.fused = FusedAttention(
            mx.contiguous(mx.concatenate([w, rot]).reshape(2 * heads * d, -1).T),
            bias,
            norm,
            norm_rot,
            normed,
            mx.contiguous(self.o_proj.weight.T),
            bound,
        )
        mx.eval(*[x for x in vars(self.fused).values() if isinstance(x, mx.array)])

    def project(self, x: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        """Plain causal mode: x (B, T, H) -> roped q (B, nh, T, D), roped k and v (B, nkv, T, D)."""
        B, T, _ = x.shape
        nh, nkv, d = self.n_heads, self.n_kv_heads, self.head_dim
        q = self.q_proj(x).reshape(B, T, nh, d)  # (B, T, nh, D)
        k = self.k_proj(x).reshape(B, T, nkv, d)
        v = self.v_proj(x).reshape(B, T, nkv, d)
        if self.args.use_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(0, 2, 1, 3), self.args, 0)
        k = apply_rope(k.transpose(0, 2, 1, 3), self.args, 0)
        return q, k, v.transpose(0, 2, 1, 3)

    def _project_packed(self, x: mx.array, rope: tuple[mx.array, mx.array]) -> mx.array:
        """Packed tokens x (N, H) -> (N, heads, D): q and k normed and roped, then v."""
        f, N, D = self.fused, x.shape[0], self.head_dim
        heads = self.n_heads + 2 * self.n_kv_heads
        p = x @ f.w
        if f.bias is not None:
            p = p + f.bias
        p = p.reshape(N, 2 * heads, D)
        plain, rot = p[:, :heads], p[:, heads:]  # rot: rotate_half(q, k), 0 for v
        if f.norm is not None:
            ms = mx.mean(mx.square(plain.astype(mx.float32)), axis=-1, keepdims=True)
            s = mx.where(f.normed, mx.rsqrt(ms + self.args.rms_norm_eps), 1.0)
            plain, rot = (plain * s) * f.norm, (rot * s) * f.norm_rot
        cos, sin = rope
        return (plain * mx.where(f.normed, cos, 1.0) + rot * sin).astype(x.dtype)

    def _paged(self, q: mx.array, kvg: mx.array, mask: mx.array) -> mx.array:
        """q (B, T, nh, D); kvg (2 nkv, B, S, D) gathered keys then values; mask (B, 1, T, S)
        -> (B, T, nh, D). A KV head's query heads ride along its T axis, so the matmuls
        read the gathered keys and values in place instead of broadcasting them over
        the query heads (a copy per layer in the generic attention)."""
        B, T, nh, D = q.shape
        nkv = self.n_kv_heads
        rep = nh // nkv
        qg = (q * self.scale).reshape(B, T, nkv, rep, D).transpose(0, 2, 1, 3, 4).reshape(B, nkv, T * rep, D)
        scores = (qg @ kvg[:nkv].transpose(1, 0, 3, 2)).reshape(B, nkv, T, rep, -1)  # (B, nkv, T, rep, S)
        scores = mx.where(mask[:, :, :, None], scores, -mx.inf)
        p = (
            fast_math.softmax(scores, self.fused.score_bound)
            .astype(scores.dtype)
            .reshape(B, nkv, T * rep, -1)
        )
        out = (p @ kvg[nkv:].transpose(1, 0, 2, 3)).reshape(B, nkv, T, rep, D)  # (B, nkv, T, rep, D)
        return out.transpose(0, 2, 1, 3, 4).reshape(B, T, nh, D)

    def __call__(
        self, x: mx.array, ctx: Optional[PassContext] = None, kv: Optional[LayerKV] = None, select=None
    ) -> mx.array:
        """x: (B, T, H) without ctx; (N, H) packed tokens with ctx. select: a (B, 1, T, S)
        key selection without ctx; with ctx, one per row group (None: all causal keys)."""
        if ctx is None:
            B, T, _ = x.shape
            q, k, v = self.project(x)
            out = mx.fast.scaled_dot_product_attention(
                q, k, v, scale=self.scale, mask="causal" if select is None else select
            )
            return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, T, -1))
        nh, nkv = self.n_heads, self.n_kv_heads
        qkv = self._project_packed(x, ctx.rope)  # (N, heads, D)
        q, new_kv = qkv[:, :nh], qkv[:, nh:]
        heads = 2 * nkv
        write_rows, read_rows = ctx.pool_rows(heads, kv.kv.shape[0] // heads)
        kv.kv[write_rows] = new_kv.swapaxes(0, 1).reshape(heads * x.shape[0], -1)
        outs = []
        for g, rows, sel in zip(ctx.groups, read_rows, select or [None] * len(ctx.groups)):
            if g.fresh and sel is None:
                # Nothing cached precedes these tokens: the causal kernel over the new keys
                # avoids gathering them back and an explicit (T, S) mask.
                kvg = g.rows(new_kv)
                kg, vg = kvg[:, :, :nkv].transpose(0, 2, 1, 3), kvg[:, :, nkv:].transpose(0, 2, 1, 3)
                out = mx.fast.scaled_dot_product_attention(
                    g.rows(q).transpose(0, 2, 1, 3), kg, vg, scale=self.scale, mask="causal"
                )
                outs.append(out.transpose(0, 2, 1, 3))  # (B, T, nh, D)
            else:
                outs.append(self._paged(g.rows(q), kv.kv[rows], g.mask if sel is None else g.mask & sel))
        return ctx.packed(outs).reshape(x.shape[0], -1) @ self.fused.o_w
