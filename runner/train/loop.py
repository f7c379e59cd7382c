"""The training loop: hyper-parameters, seeded initialisation, the compiled AdamW step,
aux-loss-free expert balancing and periodic checkpoints.

It trains a `Model` on batches it is handed; it does not read the corpus, evaluate, or
decide where files go beyond the output directory it is given.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Optional

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from ..engine.checkpoint import save_checkpoint
from ..engine.config import ModelArgs
from ..engine.layers.moe import MoE
from ..engine.model import Model
from .losses import joint_loss
from .random_init import BASE_CONFIG

TINY_MODEL = dict(
    hidden_size=128,
    intermediate_size=512,
    moe_intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    first_k_dense_replace=1,
    partial_rotary_factor=0.5,
    use_qk_norm=True,
    index_n_heads=2,
    index_head_dim=32,
    max_position_embeddings=2048,
)


@dataclass
class TrainConfig:
    steps: int = 700
    batch: int = 16
    context: int = 256
    peak_lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.05
    grad_clip: float = 1.0
    mtp_weight: float = 0.3
    balance_rate: float = 1e-3  # e_score_correction_bias step per update (DeepSeek-V3's gamma)
    seed: int = 0
    checkpoint_every: int = 100
    log_every: int = 10
    compile: bool = True


def model_config(vocab_size: int, eos_id: int, **overrides) -> dict:
    return {**BASE_CONFIG, **TINY_MODEL, "vocab_size": vocab_size, "eos_token_id": eos_id, **overrides}


def seed_everything(seed: int) -> None:
    mx.random.seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def init_model(config: dict, seed: int) -> Model:
    """Fresh weights from the seed; routers get small random rows (all-zero rows would
    tie every expert) and the correction biases are frozen (updated by balancing only)."""
    seed_everything(seed)
    args = ModelArgs.from_dict(config)
    model = Model(args, with_mtp=True, with_indexer=True)
    H = args.hidden_size
    for layer in moe_layers(model):
        gate = layer.mlp.gate
        gate.weight = mx.random.uniform(-(H**-0.5), H**-0.5, gate.weight.shape)
    model.freeze(keys=["e_score_correction_bias"])
    mx.eval(model.parameters())
    return model


def moe_layers(model: Model) -> list:
    """MoE layers in the order `joint_loss` reports their expert counts."""
    return [l for l in [*model.layers, model.mtp] if isinstance(l.mlp, MoE)]


def schedule(cfg: TrainConfig) -> Callable:
    warm = optim.linear_schedule(cfg.peak_lr / cfg.warmup, cfg.peak_lr, cfg.warmup)
    decay = optim.cosine_decay(cfg.peak_lr, max(cfg.steps - cfg.warmup, 1), cfg.peak_lr * cfg.min_lr_ratio)
    return optim.join_schedules([warm, decay], [cfg.warmup])


def balance(model: Model, counts: mx.array, rate: float) -> None:
    """Aux-loss-free balancing: nudge each expert's bias toward the mean load."""
    for layer, c in zip(moe_layers(model), counts):
        gate = layer.mlp.gate
        gate.e_score_correction_bias = gate.e_score_correction_bias + rate * mx.sign(c.mean() - c)


def make_step(model: Model, optimizer: optim.Optimizer, cfg: TrainConfig, train_indexer: bool = True):
    loss_and_grad = nn.value_and_grad(model, lambda m, b: joint_loss(m, b, cfg.mtp_weight, train_indexer))
    state = [model.state, optimizer.state]

    def step(batch: mx.array):
        (total, main, mtp, index, counts), grads = loss_and_grad(model, batch)
        grads, norm = optim.clip_grad_norm(grads, cfg.grad_clip)
        optimizer.update(model, grads)
        return total, main, mtp, index, counts, norm

    return partial(mx.compile, inputs=state, outputs=state)(step) if cfg.compile else step


def train(
    model: Model,
    config: dict,
    next_batch: Callable[[], np.ndarray],
    cfg: TrainConfig,
    out: Optional[Path] = None,
    log: Callable[[str], None] = print,
    resumable: Optional["Resumable"] = None,
) -> list[dict]:
    """Run cfg.steps updates; every checkpoint_every steps (and at the end) write the
    checkpoint to `out` with train_log.json, so an interrupted run leaves a usable model.
    With `resumable`, also save the full training state there and, if it holds a
    restored one, continue after its last step."""
    optimizer = optim.AdamW(learning_rate=schedule(cfg), betas=[0.9, 0.95], weight_decay=cfg.weight_decay)
    history: list[dict] = []
    if resumable is not None and resumable.restored is not None:
        optimizer.state, history = resumable.restored
        log(f"resuming after step {len(history)} of {cfg.steps}")
    step = make_step(model, optimizer, cfg)
    started = time.time() - (history[-1]["elapsed_s"] if history else 0.0)
    for i in range(len(history) + 1, cfg.steps + 1):
        batch = mx.array(next_batch())
        total, main, mtp, index, counts, norm = step(batch)
        balance(model, counts, cfg.balance_rate)
        mx.eval(total, main, mtp, index, norm, model.parameters(), optimizer.state)
        row = {
            "step": i,
            "loss": main.item(),
            "mtp_loss": mtp.item(),
            "indexer_kl": index.item(),
            "grad_norm": norm.item(),
            "elapsed_s": round(time.time() - started, 1),
        }
        history.append(row)
        if i % cfg.log_every == 0 or i == 1:
            log(
                f"step {i}/{cfg.steps} loss {row['loss']:.4f} mtp {row['mtp_loss']:.4f} "
                f"indexer_kl {row['indexer_kl']:.4f} |g| {row['grad_norm']:.2f} "
                f"lr {optimizer.learning_rate.item():.2e} {row['elapsed_s']:.0f}s"
            )
        if i % cfg.checkpoint_every == 0 or i == cfg.steps:
            if resumable is not None:
                resumable.save(model, config, optimizer, history)
            if out is not None:
                write_checkpoint(model, config, out, cfg, history)
    return history


@dataclass
class Resumable:
    """Where a run keeps its full state, and the state it restarts from (if any)."""

    state_dir: Path
    rng: np.random.Generator  # the batch sampler's generator, saved with the state
    meta: dict  # what must match to resume (the recipe)
    restored: Optional[tuple] = None  # (optimizer state, history) from `resume.load`

    def save(self, model: Model, config: dict, optimizer: optim.Optimizer, history: list[dict]) -> None:
        from . import resume

        resume.save(self.state_dir, model, config, optimizer, self.rng, history, self.meta)


def write_checkpoint(model: Model, config: dict, out: Path, cfg: TrainConfig, history: list[dict]) -> None:
    save_checkpoint(model, config, out)
    (out / "train_log.json").write_text(
        json.dumps({"train_config": asdict(cfg), "steps_done": len(history), "history": history}) + "\n"
    )


def smoothed(history: list[dict], key: str, last: int = 50) -> float:
    vals = [h[key] for h in history[-last:]]
    return float(sum(vals) / len(vals)) if vals else math.nan
