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

from .config import ModelArgs


@dataclass(frozen=True)
class RowGroup:
    """Rows of similar length laid out (B, T) for attention: decode rows apart from
    prefill chunks, so a one-token row never pays for a chunk-long padded query block.
    The host sends block tables and row starts; the slots to read and the causal mask
    are derived here, in the graph, once a pass."""

    to_rows: Optional[mx.array]  # (B, T) int32 packed index of row b's t-th token (pads -> 0);
                                 # None when the packed tokens are exactly these rows, row-major
    table: mx.array              # (B, n_blocks) int32: each row's blocks (scratch past its end)
    starts: mx.array             # (B,) int32: position of each row's first token in this pass
    T: int                       # tokens per row (padded)
    block_size: int
    fresh: bool = False          # every row starts at position 0: attend to the new keys directly

    def __post_init__(self) -> None:
        B, bs = self.table.shape[0], self.block_size
        read = (self.table[:, :, None] * bs + mx.arange(bs, dtype=mx.int32)).reshape(B, -1)  # (B, S)
        pos = self.starts[:, None] + mx.arange(self.T, dtype=mx.int32)                     # (B, T)
        mask = mx.arange(read.shape[1], dtype=mx.int32)[None, None, :] <= pos[:, :, None]
        object.__setattr__(self, "read_slots", read)          # (B, S): slot of key position s
        object.__setattr__(self, "mask", mask[:, None])       # (B, 1, T, S): key s visible to query t

    def rows(self, a: mx.array) -> mx.array:
        """(N, ...) packed -> (B, T, ...)."""
        B = self.table.shape[0]
        return a.reshape(B, self.T, *a.shape[1:]) if self.to_rows is None else a[self.to_rows]


@dataclass(frozen=True)
class PassContext:
    """Index arrays describing one batched pass; shared by every layer of the pass.

    Tokens of a pass are packed: per-token work (projections, MoE, norms) runs on the N
    real tokens only, never on padding. Attention alone works on rows, group by group;
    `packed()` brings the groups' outputs back into packed order."""

    positions: mx.array           # (N,) int32: position of each packed token (pads: 0)
    write_slots: mx.array         # (N,) int32: pool slot of each packed token (pads -> scratch)
    groups: tuple[RowGroup, ...]
    from_rows: Optional[mx.array]  # (N,) int32: index into the groups' concatenated (B*T) rows;
                                   # None when there is one group and no padding
    rope: Optional[tuple] = None   # rope_table(positions): set by the forward, once a pass

    def packed(self, outs: list[mx.array]) -> mx.array:
        """Per-group (B, T, ...) outputs -> (N, ...) packed."""
        flat = [o.reshape(-1, *o.shape[2:]) for o in outs]
        flat = flat[0] if len(flat) == 1 else mx.concatenate(flat)
        return flat if self.from_rows is None else flat[self.from_rows]

    def flatten(self) -> tuple[tuple, list[mx.array]]:
        """(static structure, arrays): compiled functions take arrays and key on the rest."""
        spec = (self.from_rows is not None,) + tuple(
            (g.to_rows is not None, g.T, g.block_size, g.fresh) for g in self.groups)
        arrays = [self.positions, self.write_slots] + ([self.from_rows] if self.from_rows is not None else [])
        for g in self.groups:
            arrays += ([g.to_rows] if g.to_rows is not None else []) + [g.table, g.starts]
        return spec, arrays

    @staticmethod
    def unflatten(spec: tuple, arrays: list[mx.array]) -> tuple["PassContext", list[mx.array]]:
        """Inverse of flatten(); returns the context and the arrays that follow it."""
        it = iter(arrays)
        positions, write = next(it), next(it)
        from_rows = next(it) if spec[0] else None
        groups = []
        for has_rows, T, block_size, fresh in spec[1:]:
            to_rows = next(it) if has_rows else None
            groups.append(RowGroup(to_rows, next(it), next(it), T, block_size, fresh))
        return PassContext(positions, write, tuple(groups), from_rows), list(it)


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


def rope_table(positions: mx.array, args: ModelArgs) -> tuple[mx.array, mx.array]:
    """cos and sin (N, 1, 1, rope_dims / 2) for packed tokens at `positions`: computed once
    a pass and shared by every layer (on the CPU, mx.fast.rope rebuilds them each call)."""
    half = args.rope_dims // 2
    freqs = args.rope_theta ** (-mx.arange(0, half, dtype=mx.float32) / half)
    angles = positions.astype(mx.float32)[:, None] * freqs                  # (N, half)
    return mx.cos(angles)[:, None, None], mx.sin(angles)[:, None, None]


def apply_rope(x: mx.array, args: ModelArgs, offset) -> mx.array:
    """x: (B, heads, T, D); RoPE on the first rope_dims dims, non-interleaved. `offset`
    is a start position (int or per-row array) or, for packed tokens (T = 1), a
    rope_table()."""
    if not isinstance(offset, tuple):
        return mx.fast.rope(x, args.rope_dims, traditional=False, base=args.rope_theta,
                            scale=1.0, offset=offset)
    cos, sin = offset
    half = args.rope_dims // 2
    x1, x2 = x[..., :half], x[..., half:2 * half]
    rotated = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    return mx.concatenate(rotated + ([x[..., 2 * half:]] if x.shape[-1] > 2 * half else []), axis=-1).astype(x.dtype)


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
                 kv: Optional[LayerKV] = None, select=None) -> mx.array:
        """x: (B, T, H) without ctx; (N, H) packed tokens with ctx. select: a (B, 1, T, S)
        key selection without ctx; with ctx, one per row group (None: all causal keys)."""
        if ctx is None:
            B, T, _ = x.shape
            q, k, v = self._project(x, 0)
            out = mx.fast.scaled_dot_product_attention(
                q, k, v, scale=self.scale, mask="causal" if select is None else select)
            return self.o_proj(out.transpose(0, 2, 1, 3).reshape(B, T, -1))
        q, k, v = self._project(x[:, None], ctx.rope)        # each token its own row: (N, heads, 1, D)
        q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]          # (N, heads, D)
        kv.k[ctx.write_slots] = k
        kv.v[ctx.write_slots] = v
        outs = []
        for g, sel in zip(ctx.groups, select or [None] * len(ctx.groups)):
            qg = g.rows(q).transpose(0, 2, 1, 3)                  # (B, nh, T, D)
            if g.fresh and sel is None:
                # Nothing cached precedes these tokens: the causal kernel over the new keys
                # avoids gathering them back and an explicit (T, S) mask.
                kg, vg = g.rows(k).transpose(0, 2, 1, 3), g.rows(v).transpose(0, 2, 1, 3)
                mask = "causal"
            else:
                kg = kv.k[g.read_slots].transpose(0, 2, 1, 3)      # (B, nkv, S, D)
                vg = kv.v[g.read_slots].transpose(0, 2, 1, 3)
                mask = g.mask if sel is None else (g.mask & sel)
            out = mx.fast.scaled_dot_product_attention(qg, kg, vg, scale=self.scale, mask=mask)
            outs.append(out.transpose(0, 2, 1, 3))                 # (B, T, nh, D)
        return self.o_proj(ctx.packed(outs).reshape(x.shape[0], -1))
