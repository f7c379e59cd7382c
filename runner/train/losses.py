"""Training losses for the shipped checkpoint: next-token, MTP (token t+2) and indexer KL.

The forward is the model's own plain path (`Model.__call__` and `Model.mtp_forward`
without a PassContext) with a `Capture` collecting what training needs and inference
does not: each layer's normed input (for the indexer target) and how many tokens each
router sent to each expert (for load balancing). Its MoE layers run dense (every expert
on every token, the unchosen ones zero-weighted: the same values, and on the CPU far
faster to train than gather_mm's per-token products). The dense attention distribution
the indexer distils from is computed here, not in the engine.
"""

from __future__ import annotations

from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from ..engine.model import Capture, DecoderLayer, Model


def forward(model: Model, tokens: mx.array) -> tuple[mx.array, mx.array, Capture]:
    """tokens (B, T) -> logits (B, T, V), hidden after the final norm (B, T, H), capture."""
    cap = Capture()
    logits, hidden = model(tokens, capture=cap, dense_moe=True)
    return logits, hidden, cap


def mtp_logits(
    model: Model, hidden: mx.array, next_tokens: mx.array, cap: Optional[Capture] = None
) -> mx.array:
    """(h_t, token t+1) -> logits for token t+2; the MTP layer's expert counts go to `cap`."""
    return model.mtp_forward(hidden, next_tokens, capture=cap, dense_moe=True)


def causal_mask(T: int) -> mx.array:
    return mx.tril(mx.ones((T, T), dtype=mx.bool_))


def dense_attention(layer: DecoderLayer, n: mx.array) -> mx.array:
    """The layer's causal attention distribution, averaged over heads: (B, T, T)."""
    attn = layer.self_attn
    T = n.shape[1]
    q, k, _ = attn.project(n)  # (B, nh, T, D), (B, nkv, T, D)
    k = mx.repeat(k, attn.n_heads // attn.n_kv_heads, axis=1)  # (B, nh, T, D)
    scores = (q * attn.scale) @ k.swapaxes(-1, -2)  # (B, nh, T, T)
    scores = mx.where(causal_mask(T), scores, -1e9)
    return mx.softmax(scores, axis=-1).mean(axis=1)


def indexer_kl(layer: DecoderLayer, n: mx.array) -> mx.array:
    """KL(dense attention || softmax(index scores)) per query, averaged; trains only
    the indexer (its input and target are stop-gradient)."""
    n = mx.stop_gradient(n)
    target = mx.stop_gradient(dense_attention(layer, n))  # (B, T, T)
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
    if train_indexer:  # the main layers' inputs (the MTP layer's, captured last, has no indexer)
        index = mx.stack([indexer_kl(l, n) for l, n in zip(model.layers, cap.normed)]).mean()
    total = main + mtp_weight * mtp + index
    return total, main, mtp, index, mx.stack(cap.expert_counts)
