"""MTP self-distillation: after joint training, train only the MTP layer to predict the
main model's own next-token distribution one step ahead.

Target at position t: the main model's softmax at t+1 (its prediction of token t+2 from
the prefix through t+1); input: (h_t, token t+1). Greedy acceptance asks exactly whether
the MTP's argmax equals the main model's argmax, so matching its distribution is the
direct objective. Embeddings and the shared head stay frozen (the main model is not
changed). This file does not read the corpus or write checkpoints.
"""

from __future__ import annotations

from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from ..engine.model import Model
from .loop import moe_layers
from .losses import Capture, mtp_logits


def distill_loss(model: Model, batch: mx.array) -> mx.array:
    """batch (B, T + 1): KL(main softmax at t+1 || MTP softmax from (h_t, x_{t+1}))."""
    x = batch[:, :-1]
    logits, hidden = model(x)
    teacher = mx.stop_gradient(nn.log_softmax(logits[:, 1:].astype(mx.float32), axis=-1))
    hidden = mx.stop_gradient(hidden[:, :-1])
    student = nn.log_softmax(mtp_logits(model, hidden, x[:, 1:], Capture([], [])), axis=-1)
    return (mx.exp(teacher) * (teacher - student)).sum(axis=-1).mean()


def distill_mtp(
    model: Model,
    next_batch: Callable[[], np.ndarray],
    steps: int,
    lr: float = 1e-3,
    log: Callable[[str], None] = print,
    log_every: int = 10,
) -> list[float]:
    """Train only `model.mtp` (its routers' biases stay fixed) for `steps` updates."""
    model.freeze()
    model.mtp.unfreeze()
    for layer in moe_layers(model):
        layer.mlp.gate.freeze(keys=["e_score_correction_bias"])
    warm = max(steps // 20, 1)
    schedule = optim.join_schedules(
        [optim.linear_schedule(lr / warm, lr, warm), optim.cosine_decay(lr, max(steps - warm, 1), lr * 0.1)],
        [warm],
    )
    optimizer = optim.AdamW(learning_rate=schedule, betas=[0.9, 0.95], weight_decay=0.0)
    loss_and_grad = nn.value_and_grad(model, distill_loss)
    losses = []
    for i in range(1, steps + 1):
        loss, grads = loss_and_grad(model, mx.array(next_batch()))
        grads, _ = optim.clip_grad_norm(grads, 1.0)
        optimizer.update(model, grads)
        mx.eval(loss, model.parameters(), optimizer.state)
        losses.append(loss.item())
        if i % log_every == 0 or i == 1:
            log(f"distill step {i}/{steps} KL {losses[-1]:.4f}")
    model.unfreeze()
    model.freeze(keys=["e_score_correction_bias"])
    return losses
