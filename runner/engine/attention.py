"""GQA attention with partial RoPE and optional q/k RMSNorm, over a paged KV pool.

Two modes: `ctx is None` is plain causal attention over the input itself (training,
reference checks); otherwise the input is a pass's packed tokens, their keys/values are
written into the layer's pool at `ctx.write_slots`, and attention reads each row's keys
through its group's `read_slots`, with per-token positions, so rows of different lengths
share one pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
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
    table: mx.array  # (B, n_blocks) int32: each row's blocks (scratch past its end)
    starts: mx.array  # (B,) int32: position of each row's first token in this pass
    T: int  # tokens per row (padded)
    block_size: int
    fresh: bool = False  # every row starts at position 0: attend to the new keys directly
    tree: Optional[mx.array] = None  # (B, T, T) bool: token t sees this pass's token j (a draft
    # tree, drafting/tree.py: its ancestors and itself); None: the tokens before it

    # Derived on first use, so only inside the traced forward: the host-side layout never
    # builds these graph nodes, and every layer of a pass shares one copy.
    @cached_property
    def read_slots(self) -> mx.array:
        """(B, S): the pool slot of each row's key position s."""
        B, bs = self.table.shape[0], self.block_size
        return (self.table[:, :, None] * bs + mx.arange(bs, dtype=mx.int32)).reshape(B, -1)

    @cached_property
    def mask(self) -> mx.array:
        """(B, 1, T, S): key s visible to query t."""
        S = self.table.shape[1] * self.block_size
        if self.tree is not None:
            rel = (mx.arange(S, dtype=mx.int32)[None, :] - self.starts[:, None])[:, None, :]  # (B, 1, S)
            col = mx.broadcast_to(mx.clip(rel, 0, self.T - 1), (rel.shape[0], self.T, S))
            mine = mx.take_along_axis(self.tree, col, axis=2)  # (B, T, S): this pass's keys
            return ((rel < 0) | ((rel < self.T) & mine))[:, None]
        pos = self.starts[:, None] + mx.arange(self.T, dtype=mx.int32)  # (B, T)
        return (mx.arange(S, dtype=mx.int32)[None, None, :] <= pos[:, :, None])[:, None]

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

    positions: mx.array  # (N,) int32: position of each packed token (pads: 0)
    write_slots: mx.array  # (N,) int32: pool slot of each packed token (pads -> scratch)
    groups: tuple[RowGroup, ...]
    from_rows: Optional[mx.array]  # (N,) int32: index into the groups' concatenated (B*T) rows;
    # None when there is one group and no padding
    rope: Optional[tuple] = None  # rope_table(positions): set by the forward, once a pass
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def pool_rows(self, heads: int, slots: int) -> tuple[mx.array, list[mx.array]]:
        """Rows of a flat head-major pool (heads * slots, D) that this pass writes,
        (heads * N,), and that each group reads, (heads, B, S). Built once a pass: every
        layer of a model shares the pool's shape."""
        if (heads, slots) not in self._memo:
            base = mx.arange(heads, dtype=mx.int32)[:, None] * slots
            self._memo[heads, slots] = (
                (base + self.write_slots).reshape(-1),
                [base[:, :, None] + g.read_slots for g in self.groups],
            )
        return self._memo[heads, slots]

    def packed(self, outs: list[mx.array]) -> mx.array:
        """Per-group (B, T, ...) outputs -> (N, ...) packed."""
        flat = [o.reshape(-1, *o.shape[2:]) for o in outs]
        flat = flat[0] if len(flat) == 1 else mx.concatenate(flat)
        return flat if self.from_rows is None else flat[self.from_rows]

    def flatten(self) -> tuple[tuple, list[mx.array]]:
        """(static structure, arrays): compiled functions take arrays and key on the rest."""
        spec = (self.from_rows is not None,) + tuple(
            (g.to_rows is not None, g.T, g.block_size, g.fresh, g.tree is not None) for g in self.groups
        )
        arrays = [self.positions, self.write_slots] + ([self.from_rows] if self.from_rows is not None else [])
        for g in self.groups:
            arrays += ([g.to_rows] if g.to_rows is not None else []) + [g.table, g.starts]
            arrays += [g.tree] if g.tree is not None else []
        return spec, arrays

    @staticmethod
    def unflatten(spec: tuple, arrays: list[mx.array]) -> tuple["PassContext", list[mx.array]]:
        """Inverse of flatten(); returns the context and the arrays that follow it."""
        it = iter(arrays)
        positions, write = next(it), next(it)
        from_rows = next(it) if spec[0] else None
        groups = []
        for has_rows, T, block_size, fresh, has_tree in spec[1:]:
            to_rows = next(it) if has_rows else None
            table, starts = next(it), next(it)
            tree = next(it) if has_tree else None
            groups.append(RowGroup(to_rows, table, starts, T, block_size, fresh, tree))
        return PassContext(positions, write, tuple(groups), from_rows), list(it)


@dataclass
class LayerKV:
    """One layer's pooled state: keys and values in one array, so a pass writes them with
    one scatter and reads them with one gather; plus the indexer keys when indexing."""

    kv: mx.array  # (2 * n_kv_heads * slots, head_dim): keys, then values, head-major
    # (row = head * slots + slot), so a gather yields (heads, B, S, D),
    # which the score and value matmuls read in place (a slot-major
    # pool cost a copy of each per layer)
    ik: Optional[mx.array] = None  # (slots, index_head_dim) indexer keys, when indexing

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.kv, self.ik) if a is not None]


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
        self.fused = FusedAttention(
            mx.contiguous(mx.concatenate([w, rot]).reshape(2 * heads * d, -1).T),
            bias,
            norm,
            norm_rot,
            normed,
            mx.contiguous(self.o_proj.weight.T),
        )
        mx.eval(*[x for x in vars(self.fused).values() if x is not None])

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
        p = mx.softmax(scores, axis=-1, precise=True).reshape(B, nkv, T * rep, -1)
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
