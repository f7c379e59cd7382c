"""Measure a checkpoint's block drafter without the engine: greedy block drafting
simulated on the held-out prompts.

- Each prompt (its first PROMPT_TOKENS tokens) is continued greedily by the target
  (evaluate.greedy_mlx_lm). One target forward over prompt + continuation gives every
  position's features (causal: the same as computed pass by pass).
- Rounds: the anchor is the last committed token at position a, the context the
  features of positions < a. k = 8 drafts are verified against the target's greedy
  tokens: the longest matching prefix j plus the bonus commits j + 1, the next anchor is
  a + j + 1. tau = mean committed per round; acceptance_at(i) = share of rounds with j >= i
  (so tau = 1 + sum_i acceptance_at(i)). Rounds stop where fewer than k labels remain.
- The same on the unseen-text set (`runner/unseen_text.py`: third-party code no model
  or drafter was trained on), under "unseen".
- Teacher-forced, at every anchor: the held-out block loss (as trained) and
  first-position acceptance, next to the MTP layer's on the same positions (MTP from
  (h_(a-1), x_a) predicts x_(a+1): the same information as the drafter's first slot).
This file writes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import mlx.core as mx
import numpy as np

from ..engine.checkpoint import load_model, load_tokenizer, read_args
from ..engine.drafting.block_drafter import load_checkpoint_drafter
from ..engine.drafting.drafter_pass import propose
from ..prompts import read_prompts
from ..unseen_text import fingerprint, unseen_prompts
from .drafter_train import block_logits, position_weights, target_features
from .evaluate import GENERATE, PROMPT_TOKENS, greedy_mlx_lm

K = 8


def simulate_rounds(drafter, target, features: mx.array, seqs: mx.array, P: int, k: int) -> list[int]:
    """Accepted drafts j per round, every row (B, T) drafting from anchor P until the
    block would pass the sequence's end."""
    B, T = seqs.shape
    pos = mx.broadcast_to(mx.arange(T, dtype=mx.int32)[None], (B, T))
    ctx = drafter.context(features, pos)
    anchors = np.full(B, P, dtype=np.int64)
    tokens = np.array(seqs)
    accepted: list[int] = []
    while True:
        live = np.nonzero(anchors + k <= T - 1)[0]
        if len(live) == 0:
            return accepted
        rows = mx.array(live)
        sub = [(kk[rows], vv[rows]) for kk, vv in ctx]
        a = anchors[live]
        drafts = np.array(
            propose(drafter, target, sub, mx.array(a, dtype=mx.int32), mx.array(tokens[live, a]), k).tokens
        )
        truth = tokens[live[:, None], a[:, None] + np.arange(1, k + 1)]
        match = np.cumprod(drafts == truth, axis=1).sum(axis=1)
        accepted.extend(int(j) for j in match)
        anchors[live] = a + match + 1


def teacher_forced(drafter, target, features, seqs: mx.array, P: int, k: int, gamma: float) -> dict:
    """Blocks at every anchor P-1 .. T-1-k: weighted loss, per-position argmax hits, and
    the MTP layer's hits on the same first positions."""
    B, T = seqs.shape
    anchors = mx.broadcast_to(mx.arange(P - 1, T - k, dtype=mx.int32)[None], (B, T - k - P + 1))
    out = block_logits(drafter, target, features, seqs, anchors, k)
    ce = mx.stop_gradient(
        mx.logsumexp(out.logits, axis=-1) - mx.take_along_axis(out.logits, out.labels[..., None], -1)[..., 0]
    )
    w = position_weights(k, gamma)
    hits = (mx.argmax(out.logits, axis=-1) == out.labels).astype(mx.float32)
    # MTP: from (h_(a-1), x_a) predict x_(a+1), a = P-1 .. T-1-k.
    _, hidden = target(seqs)
    a0, a1 = P - 1, T - k
    mtp = mx.argmax(target.mtp_forward(hidden[:, a0 - 1 : a1 - 1], seqs[:, a0:a1]), axis=-1)
    return {
        "weighted_loss_sum": float(((ce * w).sum(-1) / w.sum()).sum().item()),
        "blocks": int(ce.shape[0]),
        "hits_by_position": np.array(hits.sum(axis=0)).tolist(),
        "mtp_hits": int((mtp == seqs[:, a0 + 1 : a1 + 1]).sum().item()),
    }


def evaluate_drafter(
    checkpoint: Path,
    limit: Optional[int] = None,
    k: int = K,
    batch: int = 25,
    log: Callable[[str], None] = print,
    unseen: bool = True,
) -> dict:
    """The held-out figures, and (with `unseen`) the same figures on the unseen-text set
    under "unseen" (with its fingerprint)."""
    args = read_args(checkpoint)
    target = load_model(checkpoint, args, with_mtp=True, with_indexer=False, fuse=False)
    drafter = load_checkpoint_drafter(checkpoint, args)
    tok = load_tokenizer(checkpoint)
    heldout = read_prompts(checkpoint / "heldout.jsonl")[:limit]
    res = evaluate_on(checkpoint, target, drafter, tok, heldout, k, batch)
    report(res, "held-out", log)
    if unseen:
        texts = unseen_prompts()[:limit]
        res["unseen"] = evaluate_on(checkpoint, target, drafter, tok, texts, k, batch)
        res["unseen"]["prompt_set"] = fingerprint(texts)
        report(res["unseen"], "unseen text", log)
    return res


def evaluate_on(checkpoint: Path, target, drafter, tok, prompts, k: int, batch: int) -> dict:
    ids = [tok.encode(p.text).ids for p in prompts]
    ids = np.array([x[:PROMPT_TOKENS] for x in ids if len(x) >= PROMPT_TOKENS], dtype=np.int32)
    generated = greedy_mlx_lm(checkpoint, ids, GENERATE)
    seqs_all = np.concatenate([ids, generated], axis=1)
    rounds: list[int] = []
    loss_sum, blocks, mtp_hits = 0.0, 0, 0
    hits = np.zeros(k)
    for i in range(0, len(seqs_all), batch):
        seqs = mx.array(seqs_all[i : i + batch])
        features = target_features(target, seqs, drafter.cfg.target_layers)
        rounds += simulate_rounds(drafter, target, features, seqs, PROMPT_TOKENS, k)
        tf = teacher_forced(drafter, target, features, seqs, PROMPT_TOKENS, k, 4.0)
        loss_sum, blocks, mtp_hits = (
            loss_sum + tf["weighted_loss_sum"],
            blocks + tf["blocks"],
            mtp_hits + tf["mtp_hits"],
        )
        hits += np.array(tf["hits_by_position"])
    j = np.array(rounds)
    res = {
        "k": k,
        "prompts": int(len(seqs_all)),
        "prompt_tokens": PROMPT_TOKENS,
        "generated_tokens": GENERATE,
        "rounds": int(len(j)),
        "tau": float((j + 1).mean()),
        "acceptance_at": [float((j >= i).mean()) for i in range(1, k + 1)],
        "heldout_block_loss": loss_sum / blocks,
        "teacher_forced_blocks": blocks,
        "teacher_forced_hit_rate": (hits / blocks).tolist(),
        "first_position_acceptance": float(hits[0] / blocks),
        "mtp_first_position_acceptance": mtp_hits / blocks,
    }
    return res


def report(res: dict, name: str, log: Callable[[str], None]) -> None:
    log(
        f"block drafter k={res['k']}, {name}: tau {res['tau']:.2f} over {res['rounds']} rounds; "
        "acceptance by position "
        + " ".join(f"{a:.2f}" for a in res["acceptance_at"])
        + f"; first position {res['first_position_acceptance']:.3f} "
        f"vs MTP {res['mtp_first_position_acceptance']:.3f}; "
        f"block loss {res['heldout_block_loss']:.3f}"
    )
