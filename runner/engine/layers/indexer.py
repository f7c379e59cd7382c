"""Lightning indexer (DeepSeek-V3.2 style, adapted to GQA attention).

Per layer: `n` indexer heads with queries q_j = Wq_j x_t, one shared key per position
k_s = RMSNorm(Wk x_s) (RoPE on its leading dims), head weights w_j = Ww x_t. The score
I(t, s) = sum_j w_j * relu(q_j . k_s); each query attends to its top `index_topk`
causal keys, and densely while its context holds at most `index_topk` keys.
The indexer keys live in the layer's pool (`LayerKV.ik`) and are trimmed with it.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from ..cache import LayerKV
from ..config import ModelArgs
from ..layout import PassContext, RowGroup


class Indexer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.n_heads, self.head_dim = args.index_n_heads, args.index_head_dim
        self.wq = nn.Linear(args.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.hidden_size, self.head_dim, bias=False)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=args.rms_norm_eps)
        self.weights_proj = nn.Linear(args.hidden_size, self.n_heads, bias=False)
        self.rope_dims = min(args.rope_dims, self.head_dim)

    def _rope(self, x: mx.array, offset) -> mx.array:
        return mx.fast.rope(
            x, self.rope_dims, traditional=False, base=self.args.rope_theta, scale=1.0, offset=offset
        )

    def keys(self, x: mx.array, offset) -> mx.array:
        """x: (B, T, H) normed layer input -> indexer keys (B, T, d)."""
        return self._rope(self.k_norm(self.wk(x))[:, None], offset)[:, 0]

    def write_keys(self, x: mx.array, ctx: PassContext, kv: LayerKV) -> None:
        """Store this pass's keys (x: (N, H) packed); they are needed later even while
        attention is dense."""
        kv.ik[ctx.write_slots] = self.keys(x[:, None], ctx.positions)[:, 0]

    def scores(
        self,
        x: mx.array,
        ctx: Optional[PassContext] = None,
        kv: Optional[LayerKV] = None,
        group: Optional[RowGroup] = None,
    ) -> mx.array:
        """Scores (B, T, S) over key positions. Without ctx, x is (B, T, H) and the keys
        are its own positions (S = T); with ctx, x is (N, H) packed and the scores are for
        one row group, keys from the pool (write_keys must have run in this pass)."""
        n, d = self.n_heads, self.head_dim
        if ctx is None:
            B, T, _ = x.shape
            q = self._rope(self.wq(x).reshape(B, T, n, d).transpose(0, 2, 1, 3), 0)  # (B, n, T, d)
            k, w = self.keys(x, 0), self.weights_proj(x)  # (B, S, d), (B, T, n)
        else:
            q = self._rope(self.wq(x).reshape(-1, 1, n, d).transpose(0, 2, 1, 3), ctx.positions)
            q = group.rows(q[:, :, 0]).transpose(0, 2, 1, 3)  # (B, n, T, d)
            k, w = kv.ik[group.read_slots], group.rows(self.weights_proj(x))
        dots = nn.relu(q @ k[:, None].swapaxes(-1, -2) * (d**-0.5))  # (B, n, T, S)
        return ((w * n**-0.5).transpose(0, 2, 1)[..., None] * dots).sum(axis=1)  # (B, T, S)


def topk_select(scores: mx.array, causal: mx.array, k: int) -> mx.array:
    """Boolean (B, 1, T, S): each query's top-k keys among its causal ones. With k >= the
    number of visible keys this is exactly the causal mask (dense attention)."""
    S = scores.shape[-1]
    if k >= S:
        return causal
    masked = mx.where(causal[:, 0], scores, -mx.inf)  # (B, T, S)
    top = mx.argpartition(-masked, kth=k - 1, axis=-1)[..., :k]
    chosen = mx.put_along_axis(mx.zeros(masked.shape, dtype=mx.bool_), top, mx.array(True), axis=-1)
    return causal & chosen[:, None]
