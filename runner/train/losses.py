"""Training losses for the shipped checkpoint: next-token, MTP (token t+2) and indexer KL.

The forward here walks the engine's own modules layer by layer (the same arithmetic as
`DecoderLayer.__call__` without a PassContext) so that it can also return what training
needs and inference does not: each layer's normed input (for the indexer target) and
how many tokens each router sent to each expert (for load balancing). The dense
attention distribution the indexer distils from is computed here, not in the engine.
"""
from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..engine.attention import apply_rope
from ..engine.model import DecoderLayer, Model
from ..engine.moe import MoE


@dataclass
class Capture:
    """What one training forward collects besides logits."""
    normed: list[mx.array]        # per main layer: input_layernorm output (B, T, H)
    expert_counts: list[mx.array]  # per MoE layer (main layers, then MTP): (E,) tokens routed


def layer_forward(layer: DecoderLayer, x: mx.array, cap: Capture, keep_normed: bool) -> mx.array:
    n = layer.input_layernorm(x)
    if keep_normed:
        cap.normed.append(n)
    h = x + layer.self_attn(n)
    m = layer.post_attention_layernorm(h)
    if isinstance(layer.mlp, MoE):
        return h + dense_moe(layer.mlp, m, cap)
    return h + layer.mlp(m)


def dense_moe(moe: MoE, x: mx.array, cap: Capture) -> mx.array:
    """`MoE.__call__`'s output computed by running every expert on every token and
    zero-weighting the unchosen ones. Same values; on the CPU a few wide matmuls are far
    faster to train than gather_mm's per-token products (measured here: 22 s vs 5 s a step)."""
    inds, weights = moe.gate(x)                                             # (B, T, k)
    ex = moe.experts
    E, I, H = ex.gate_proj.shape
    chosen = inds[..., None] == mx.arange(E)                                # (B, T, k, E)
    cap.expert_counts.append(mx.stop_gradient(chosen.reshape(-1, E).sum(axis=0)))
    combine = (chosen * weights[..., None]).sum(axis=-2)                    # (B, T, E)
    g = (x @ ex.gate_proj.reshape(E * I, H).T).reshape(*x.shape[:-1], E, I)  # (B, T, E, I)
    u = (x @ ex.up_proj.reshape(E * I, H).T).reshape(*x.shape[:-1], E, I)
    a = nn.silu(g) * u * combine[..., None]
    down = ex.down_proj.transpose(0, 2, 1).reshape(E * I, H)                # (E*I, H)
    y = a.reshape(*x.shape[:-1], E * I) @ down
    if "shared_experts" in moe:
        y = y + moe.shared_experts(x)
    return y


def forward(model: Model, tokens: mx.array) -> tuple[mx.array, mx.array, Capture]:
    """tokens (B, T) -> logits (B, T, V), hidden after the final norm (B, T, H), capture."""
    cap = Capture([], [])
    h = model.embed_tokens(tokens)
    for layer in model.layers:
        h = layer_forward(layer, h, cap, keep_normed=True)
    hidden = model.norm(h)
    return model.head(hidden), hidden, cap


def mtp_logits(model: Model, hidden: mx.array, next_tokens: mx.array, cap: Capture) -> mx.array:
    """(h_t, token t+1) -> logits for token t+2, as `Model.mtp_forward` computes them."""
    mtp = model.mtp
    e = model.embed_tokens(next_tokens)
    u = mtp.eh_proj(mx.concatenate([mtp.enorm(e), mtp.hnorm(hidden)], axis=-1))
    return model.head(mtp.shared_head_norm(layer_forward(mtp, u, cap, keep_normed=False)))


def causal_mask(T: int) -> mx.array:
    return mx.tril(mx.ones((T, T), dtype=mx.bool_))


def dense_attention(layer: DecoderLayer, n: mx.array) -> mx.array:
    """The layer's causal attention distribution, averaged over heads: (B, T, T)."""
    attn = layer.self_attn
    B, T, _ = n.shape
    q = attn.q_proj(n).reshape(B, T, attn.n_heads, attn.head_dim)
    k = attn.k_proj(n).reshape(B, T, attn.n_kv_heads, attn.head_dim)
    if attn.args.use_qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = apply_rope(q.transpose(0, 2, 1, 3), attn.args, 0)                    # (B, nh, T, D)
    k = apply_rope(k.transpose(0, 2, 1, 3), attn.args, 0)                    # (B, nkv, T, D)
    k = mx.repeat(k, attn.n_heads // attn.n_kv_heads, axis=1)               # (B, nh, T, D)
    scores = (q * attn.scale) @ k.swapaxes(-1, -2)                          # (B, nh, T, T)
    scores = mx.where(causal_mask(T), scores, -1e9)
    return mx.softmax(scores, axis=-1).mean(axis=1)


def indexer_kl(layer: DecoderLayer, n: mx.array) -> mx.array:
    """KL(dense attention || softmax(index scores)) per query, averaged; trains only
    the indexer (its input and target are stop-gradient)."""
    n = mx.stop_gradient(n)
    target = mx.stop_gradient(dense_attention(layer, n))                    # (B, T, T)
    mask = causal_mask(n.shape[1])
    scores = mx.where(mask, layer.indexer.scores(n), -1e9)
    log_q = mx.where(mask, nn.log_softmax(scores, axis=-1), 0.0)
    log_p = mx.where(mask, mx.log(mx.maximum(target, 1e-30)), 0.0)
    return (target * (log_p - log_q)).sum(axis=-1).mean()


def cross_entropy(logits: mx.array, targets: mx.array) -> mx.array:
    return nn.losses.cross_entropy(logits.astype(mx.float32), targets, reduction="mean")


def joint_loss(model: Model, batch: mx.array, mtp_weight: float, train_indexer: bool):
    """batch (B, T + 2) -> (total, next-token loss, MTP loss, indexer KL, expert counts)."""
    x, y1, y2 = batch[:, :-2], batch[:, 1:-1], batch[:, 2:]
    logits, hidden, cap = forward(model, x)
    main = cross_entropy(logits, y1)
    mtp = cross_entropy(mtp_logits(model, hidden, y1, cap), y2)
    index = mx.array(0.0)
    if train_indexer:
        index = mx.stack([indexer_kl(l, n) for l, n in zip(model.layers, cap.normed)]).mean()
    total = main + mtp_weight * mtp + index
    return total, main, mtp, index, mx.stack(cap.expert_counts)
