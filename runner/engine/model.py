"""The GLM-4.5 MoE decoder stack: embed -> layers -> norm -> head, plus the MTP layer.

`Model.__call__` returns logits and the final (post-norm) hidden states, which the MTP
layer consumes. With `ctx=None` it is the plain causal forward, the one training and
reference checks use: a `Capture` passed in collects what they need besides the outputs
(each layer's normed input, each router's expert counts), and `dense_moe` evaluates every
expert on every token, zero-weighting the unchosen ones (same values; on the CPU a few
wide matmuls train far faster than gather_mm's per-token products). With a PassContext
it reads and writes the paged pools of one batched pass.
This file knows nothing about scheduling, sampling or checkpoints on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from .cache import LayerKV
from .config import ModelArgs
from .layers.attention import Attention
from .layers.indexer import Indexer, topk_select
from .layers.moe import MLP, Fused, MoE
from .layout import PassContext


@dataclass
class Capture:
    """What a plain forward collects besides its outputs, in the order the layers ran
    (the main layers, then the MTP layer's when it runs)."""

    normed: list = field(default_factory=list)  # per decoder layer: input_layernorm output (B, T, H)
    expert_counts: list = field(default_factory=list)  # per MoE layer: (E,) tokens routed to each expert


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, layer_idx: int, with_indexer: bool = False):
        super().__init__()
        self.self_attn = Attention(args)
        dense = layer_idx < args.first_k_dense_replace
        self.mlp = MLP(args.hidden_size, args.intermediate_size) if dense else MoE(args)
        self.input_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        self.post_attention_layernorm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        if with_indexer:
            self.indexer = Indexer(args)

    def __call__(
        self,
        x: mx.array,
        ctx: Optional[PassContext] = None,
        kv: Optional[LayerKV] = None,
        index_topk: int = 0,
        capture: Optional[Capture] = None,
        dense_moe: bool = False,
    ) -> mx.array:
        n = self.input_layernorm(x)
        if capture is not None:
            capture.normed.append(n)
        select = None
        if index_topk and ctx is not None:
            self.indexer.write_keys(n, ctx, kv)
            # Static shapes: a group whose every context fits in index_topk stays dense.
            select = [
                topk_select(self.indexer.scores(n, ctx, kv, g), g.mask, index_topk)
                if g.read_slots.shape[1] > index_topk
                else None
                for g in ctx.groups
            ]
        h = x + self.self_attn(n, ctx, kv, select)
        m = self.post_attention_layernorm(h)
        if not isinstance(self.mlp, MoE):
            return h + self.mlp(m)
        return h + self.mlp(m, None if capture is None else capture.expert_counts, dense_moe)


class MTPLayer(DecoderLayer):
    """Depth-1 multi-token prediction: from (h_i, token_{i+1}) predict token_{i+2}.
    u = eh_proj([enorm(embed(t)); hnorm(h)]) -> decoder layer -> shared_head.norm -> head."""

    def __init__(self, args: ModelArgs):
        super().__init__(args, layer_idx=args.num_hidden_layers)
        H = args.hidden_size
        self.enorm = nn.RMSNorm(H, eps=args.rms_norm_eps)
        self.hnorm = nn.RMSNorm(H, eps=args.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * H, H, bias=False)
        self.shared_head_norm = nn.RMSNorm(H, eps=args.rms_norm_eps)
        self.eh_proj_t: Optional[Fused] = None  # fuse(): eh_proj's weight pre-transposed

    def fuse(self) -> None:
        self.eh_proj_t = Fused((mx.contiguous(self.eh_proj.weight.T),))
        mx.eval(self.eh_proj_t.arrays)

    def __call__(
        self,
        hidden: mx.array,
        next_embed: mx.array,
        ctx: Optional[PassContext] = None,
        kv: Optional[LayerKV] = None,
        capture: Optional[Capture] = None,
        dense_moe: bool = False,
    ) -> mx.array:
        joined = mx.concatenate([self.enorm(next_embed), self.hnorm(hidden)], axis=-1)
        # The plain path projects with eh_proj itself, as attention does: distillation
        # trains the MTP layer of a fused model, and gradients must reach the weight.
        fused = self.eh_proj_t is not None and ctx is not None
        u = joined @ self.eh_proj_t.arrays[0] if fused else self.eh_proj(joined)
        return self.shared_head_norm(super().__call__(u, ctx, kv, capture=capture, dense_moe=dense_moe))


class Model(nn.Module):
    def __init__(self, args: ModelArgs, with_mtp: bool = True, with_indexer: bool = False):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = [DecoderLayer(args, i, with_indexer) for i in range(args.num_hidden_layers)]
        self.norm = nn.RMSNorm(args.hidden_size, eps=args.rms_norm_eps)
        if not args.tie_word_embeddings:
            self.lm_head = nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        if with_mtp:
            self.mtp = MTPLayer(args)
        self.head_t: Optional[Fused] = None  # fuse(): the output projection pre-transposed

    def fuse(self) -> None:
        w = self.embed_tokens.weight if self.args.tie_word_embeddings else self.lm_head.weight
        self.head_t = Fused((mx.contiguous(w.T),))
        mx.eval(self.head_t.arrays)

    def head(self, h: mx.array) -> mx.array:
        if self.head_t is not None:
            return h @ self.head_t.arrays[0]
        if self.args.tie_word_embeddings:
            return self.embed_tokens.as_linear(h)
        return self.lm_head(h)

    def hidden_states(
        self,
        tokens: mx.array,
        ctx: Optional[PassContext] = None,
        kv: Optional[list[LayerKV]] = None,
        index_topk: int = 0,
        capture: Optional[Capture] = None,
        dense_moe: bool = False,
    ) -> mx.array:
        """tokens (B, T) -> hidden (B, T, H) after the final norm."""
        h = self.embed_tokens(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h, ctx, None if kv is None else kv[i], index_topk, capture, dense_moe)
        return self.norm(h)

    def __call__(
        self,
        tokens: mx.array,
        ctx: Optional[PassContext] = None,
        kv: Optional[list[LayerKV]] = None,
        index_topk: int = 0,
        capture: Optional[Capture] = None,
        dense_moe: bool = False,
    ) -> tuple[mx.array, mx.array]:
        """tokens (B, T) -> (logits (B, T, V), hidden (B, T, H) after the final norm)."""
        h = self.hidden_states(tokens, ctx, kv, index_topk, capture, dense_moe)
        return self.head(h), h

    def mtp_forward(
        self,
        hidden: mx.array,
        next_tokens: mx.array,
        ctx: Optional[PassContext] = None,
        kv: Optional[LayerKV] = None,
        capture: Optional[Capture] = None,
        dense_moe: bool = False,
    ) -> mx.array:
        """(h_i, token_{i+1}) pairs -> logits predicting token_{i+2}: (B, T, V)."""
        return self.head(self.mtp(hidden, self.embed_tokens(next_tokens), ctx, kv, capture, dense_moe))


def fuse_for_inference(model: Model) -> None:
    """Switch every block to its inference layout (fused projections, contiguous expert
    operands). Parameters are untouched, so saving and training still see HF names."""
    for _, module in model.named_modules():
        if hasattr(module, "fuse") and callable(module.fuse):
            module.fuse()
