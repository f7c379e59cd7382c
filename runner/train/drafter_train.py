"""Training the block drafter against a frozen target: the loss, the AdamW step, and a
loop with periodic atomic full-state checkpoints.

- Many blocks per sequence at random anchors: each block reads the target features of
  the positions strictly before its anchor and itself, never another block.
- Cross-entropy at block positions 1..k against the target's greedy tokens, weighted by
  exp(-(i-1)/gamma): the first drafts decide acceptance most. With `distill` > 0 that
  share of the loss is instead the KL divergence from the target's own distribution at
  the same positions (its logits come from the final hidden, the last feature the drafter
  reads), so the drafter learns the target's confidence as well as its argmax.
- The state (`<state>/latest/`: drafter, optimizer, sampler rng, history) is written to
  `latest.tmp/` and renamed, so an interruption leaves the previous one; a resumed run
  takes the same batches and schedule as an uninterrupted one.
- This file reads no corpus and writes no model card.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from ..engine.checkpoint import CheckpointError
from ..engine.drafting.block_drafter import BlockDrafter, draft_logits, load_block_drafter, save_block_drafter
from ..engine.model import Capture, Model
from .drafter_data import Batch


@dataclass
class DrafterTrainConfig:
    steps: int = 2000
    batch: int = 8  # sequences per step
    anchors: int = 16  # blocks per sequence
    k: int = 8
    gamma: float = 4.0
    peak_lr: float = 2e-3
    warmup: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    checkpoint_every: int = 25
    log_every: int = 10
    compile: bool = True
    distill: float = 0.0  # share of the loss that is KL(target || drafter), the rest cross-entropy


def target_features(target: Model, tokens: mx.array, layers: tuple[int, ...]) -> mx.array:
    """Plain target forward (B, T) -> the drafter's context features (B, T, n*H), no grad."""
    cap = Capture()
    final = target.hidden_states(tokens, capture=cap, dense_moe=True)
    normed = cap.normed
    return mx.stop_gradient(mx.concatenate([final if j == len(normed) else normed[j] for j in layers], -1))


def precompute_features(
    target: Model,
    sequences: np.ndarray,
    layers: tuple[int, ...],
    batch: int = 32,
    log: Optional[Callable[[str], None]] = None,
    log_every: int = 1024,
    dtype=mx.float32,
) -> np.ndarray:
    """Every sequence's context features (N, T, n*H) in `dtype`, computed once: the target
    is frozen, so each step reads them instead of re-running it. `log` hears the progress
    every `log_every` sequences (the dense target pass over thousands takes minutes)."""
    out = []
    for i in range(0, len(sequences), batch):
        f = target_features(target, mx.array(sequences[i : i + batch]), layers)
        out.append(np.array(f.astype(dtype)))
        done = min(i + batch, len(sequences))
        if log is not None and (done % log_every < batch or done == len(sequences)):
            log(f"target features: {done}/{len(sequences)} sequences")
    return np.concatenate(out)


class BlockBatch(NamedTuple):
    logits: mx.array  # (B * A, k, V)
    labels: mx.array  # (B * A, k) the target's tokens at anchor + 1 .. anchor + k
    teacher: Optional[mx.array] = None  # (B * A, k, V) the target's logits for those tokens


def block_logits(
    drafter: BlockDrafter,
    target: Model,
    features: mx.array,
    tokens: mx.array,
    anchors: mx.array,
    k: int,
    with_teacher: bool = False,
) -> BlockBatch:
    """Blocks at anchors (B, A) of sequences (B, T), all in one drafter pass; with
    `with_teacher`, the target's logits at positions anchor .. anchor + k - 1 (which
    predict the block's tokens), from the final hidden in the features."""
    B, T = tokens.shape
    A = anchors.shape[1]
    ctx = drafter.context(features, mx.broadcast_to(mx.arange(T, dtype=mx.int32)[None], (B, T)))
    ctx = [(mx.repeat(kk, A, axis=0), mx.repeat(vv, A, axis=0)) for kk, vv in ctx]
    a = anchors.reshape(-1)
    steps = mx.arange(k + 1, dtype=mx.int32)
    visible = (mx.arange(T, dtype=mx.int32)[None, :] < a[:, None])[:, None]
    first = mx.take_along_axis(tokens, anchors, axis=1).reshape(-1)
    hidden = drafter(drafter.block_inputs(target, first, k), a[:, None] + steps, ctx, visible)
    label_pos = (anchors[..., None] + steps[1:]).reshape(B, A * k)
    labels = mx.take_along_axis(tokens, label_pos, axis=1).reshape(B * A, k)
    teacher = None
    if with_teacher:  # the target's logits are fixed: no gradient flows into them
        if drafter.cfg.target_layers[-1] != len(target.layers):
            raise ValueError("distillation needs the final hidden among the drafter's target layers")
        final = features[..., -drafter.cfg.hidden_size :]
        at = mx.broadcast_to((label_pos - 1)[..., None], (B, A * k, final.shape[-1]))
        teacher = mx.stop_gradient(target.head(mx.take_along_axis(final, at, axis=1)).reshape(B * A, k, -1))
    return BlockBatch(draft_logits(target, hidden[:, 1:]), labels, teacher)


def position_weights(k: int, gamma: float) -> mx.array:
    return mx.exp(-mx.arange(k, dtype=mx.float32) / gamma)


def block_loss(
    drafter, target, features, tokens, anchors, k: int, gamma: float, distill: float = 0.0
) -> mx.array:
    """Position-weighted mean over every block position 1..k (nats) of cross-entropy
    against the greedy tokens, mixed with `distill` of KL from the target's distribution."""
    out = block_logits(drafter, target, features, tokens, anchors, k, with_teacher=distill > 0)
    logits = out.logits.astype(mx.float32)
    per = nn.losses.cross_entropy(logits, out.labels, reduction="none")  # (N, k)
    if distill > 0:
        t = out.teacher.astype(mx.float32)
        log_p = t - mx.logsumexp(t, axis=-1, keepdims=True)
        log_q = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        kl = (mx.exp(log_p) * (log_p - log_q)).sum(axis=-1)
        per = (1 - distill) * per + distill * kl
    w = position_weights(k, gamma)
    return (per * w).sum(axis=-1).mean() / w.sum()


def make_optimizer(cfg: DrafterTrainConfig) -> optim.Optimizer:
    warm = optim.linear_schedule(cfg.peak_lr / cfg.warmup, cfg.peak_lr, cfg.warmup)
    decay = optim.cosine_decay(cfg.peak_lr, max(cfg.steps - cfg.warmup, 1), cfg.peak_lr * 0.1)
    lr = optim.join_schedules([warm, decay], [cfg.warmup])
    return optim.AdamW(learning_rate=lr, betas=[0.9, 0.95], weight_decay=cfg.weight_decay)


def make_step(drafter: BlockDrafter, target: Model, optimizer: optim.Optimizer, cfg: DrafterTrainConfig):
    """One update on (features, tokens, anchors); returns (loss before the update, grad norm)."""
    loss_and_grad = nn.value_and_grad(
        drafter, lambda d, f, t, a: block_loss(d, target, f, t, a, cfg.k, cfg.gamma, cfg.distill)
    )

    def step(features: mx.array, tokens: mx.array, anchors: mx.array) -> tuple[mx.array, mx.array]:
        loss, grads = loss_and_grad(drafter, features, tokens, anchors)
        grads, norm = optim.clip_grad_norm(grads, cfg.grad_clip)
        optimizer.update(drafter, grads)
        return loss, norm

    state = [drafter.state, optimizer.state]
    return partial(mx.compile, inputs=state, outputs=state)(step) if cfg.compile else step


LATEST = "latest"


def save_state(
    state_dir: Path, drafter, optimizer, rng: np.random.Generator, history: list, meta: dict
) -> None:
    tmp, final, old = state_dir / f"{LATEST}.tmp", state_dir / LATEST, state_dir / f"{LATEST}.old"
    shutil.rmtree(tmp, ignore_errors=True)
    save_block_drafter(drafter, tmp)
    mx.save_safetensors(str(tmp / "optimizer.safetensors"), dict(tree_flatten(optimizer.state)))
    state = {"steps_done": len(history), "rng": rng.bit_generator.state, "meta": meta, "history": history}
    (tmp / "state.json").write_text(json.dumps(state) + "\n")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


class Restored(NamedTuple):
    drafter: BlockDrafter
    optimizer_state: dict
    rng_state: dict
    history: list


def load_state(state_dir: Path, meta: dict) -> Optional[Restored]:
    """The last saved state, or None when there is none. `meta` (the recipe) must match."""
    d = state_dir / LATEST
    if not (d / "state.json").is_file():
        return None
    try:
        state = json.loads((d / "state.json").read_text())
        opt = tree_unflatten(list(mx.load(str(d / "optimizer.safetensors")).items()))
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{d}: cannot resume from it ({e}); remove {state_dir} to start over") from None
    if state.get("meta") != meta:
        raise CheckpointError(
            f"{d / 'state.json'}: saved by another recipe ({state.get('meta')}), not {meta}; "
            f"remove {state_dir} to start over"
        )
    return Restored(load_block_drafter(d, name=str(d)), opt, state["rng"], state["history"])


def train_drafter(
    drafter: BlockDrafter,
    target: Model,
    next_batch: Callable[[], Batch],
    rng: np.random.Generator,
    cfg: DrafterTrainConfig,
    state_dir: Optional[Path] = None,
    meta: Optional[dict] = None,
    restored: Optional[Restored] = None,
    on_checkpoint: Callable[[BlockDrafter, list], None] = lambda d, h: None,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """Run up to cfg.steps updates (continuing after `restored`, whose drafter must be
    `drafter`); every checkpoint_every steps and at the end save the state (when
    state_dir is given) and call on_checkpoint."""
    optimizer = make_optimizer(cfg)
    history: list[dict] = []
    if restored is not None:
        optimizer.state, history = restored.optimizer_state, restored.history
        rng.bit_generator.state = restored.rng_state
        log(f"resuming after step {len(history)} of {cfg.steps}")
    step = make_step(drafter, target, optimizer, cfg)
    started = time.time() - (history[-1]["elapsed_s"] if history else 0.0)
    for i in range(len(history) + 1, cfg.steps + 1):
        batch = next_batch()
        tokens = mx.array(batch.tokens)
        features = (
            target_features(target, tokens, drafter.cfg.target_layers)
            if batch.features is None
            else mx.array(batch.features).astype(mx.float32)
        )
        loss, norm = step(features, tokens, mx.array(batch.anchors))
        mx.eval(loss, norm, drafter.parameters(), optimizer.state)
        history.append(
            {
                "step": i,
                "loss": loss.item(),
                "grad_norm": norm.item(),
                "elapsed_s": round(time.time() - started, 1),
            }
        )
        if i % cfg.log_every == 0 or i == 1:
            log(
                f"drafter step {i}/{cfg.steps} loss {history[-1]['loss']:.4f} |g| {norm.item():.2f} "
                f"lr {optimizer.learning_rate.item():.2e} {history[-1]['elapsed_s']:.0f}s"
            )
        if i % cfg.checkpoint_every == 0 or i == cfg.steps:
            if state_dir is not None:
                save_state(state_dir, drafter, optimizer, rng, history, meta or asdict(cfg))
            on_checkpoint(drafter, history)
    return history
