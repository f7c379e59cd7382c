"""Measure a trained checkpoint: next-token loss on held-out and train text against the
unigram baseline, greedy MTP acceptance on the held-out prompts, and mlx-lm parity.

Acceptance: each prompt (its first PROMPT_TOKENS tokens) is continued greedily for
GENERATE tokens by mlx-lm's own glm4_moe model with a KV cache (fast); our `Model` then
re-runs the whole sequence once. Every generated token must be our model's argmax too
(that is the parity check, over every prompt), and at each position t the MTP draft
argmax(mtp(h_t, x_{t+1})) is compared with the main model's greedy x_{t+2}.
This file reads checkpoints and the corpus; it writes nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Optional

import mlx.core as mx
import numpy as np

from ..engine.checkpoint import load_model, load_tokenizer, read_args
from ..engine.layers.indexer import topk_select
from ..prompts import read_prompts
from . import corpus, data
from .losses import causal_mask, cross_entropy, dense_attention, forward

PROMPT_TOKENS = 192
GENERATE = 64
CONTEXT = 256


def window_loss(model, stream: np.ndarray, max_windows: Optional[int] = None, batch: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over non-overlapping CONTEXT windows."""
    wins = data.windows(stream, CONTEXT)[:max_windows]
    total, count = 0.0, 0
    for i in range(0, len(wins), batch):
        w = mx.array(wins[i : i + batch])
        logits, _ = model(w[:, :-1])
        loss = cross_entropy(logits, w[:, 1:])
        total += loss.item() * w.shape[0]
        count += w.shape[0]
    return total / count


def unigram_loss(train: np.ndarray, heldout: np.ndarray, vocab: int) -> float:
    """Cross-entropy of the train unigram distribution (add-one smoothed) on held-out."""
    counts = np.bincount(train, minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[heldout].mean())


def greedy_mlx_lm(directory: Path, prompts: np.ndarray, steps: int, batch: int = 50) -> np.ndarray:
    """(N, P) prompt ids -> (N, steps) greedy continuations from mlx-lm's model."""
    try:
        from mlx_lm.models.cache import make_prompt_cache
        from mlx_lm.utils import load_model as mlx_lm_load
    except ImportError:
        raise RuntimeError("evaluation needs mlx-lm (pip install -e '.[test]')") from None
    ref, _ = mlx_lm_load(directory)
    out = []
    for i in range(0, len(prompts), batch):
        cache = make_prompt_cache(ref)
        x = mx.array(prompts[i : i + batch])
        toks = []
        for _ in range(steps):
            logits = ref(x, cache=cache)[:, -1]
            x = mx.argmax(logits, axis=-1)[:, None]
            mx.eval(x)
            toks.append(np.array(x))
        out.append(np.concatenate(toks, axis=1))
    return np.concatenate(out)


def acceptance(model, prompts: np.ndarray, generated: np.ndarray, batch: int = 25) -> dict:
    """MTP greedy acceptance and mlx-lm greedy parity over (N, P) prompts + (N, G) tokens."""
    P, G = prompts.shape[1], generated.shape[1]
    accepted = drafted = mismatched = 0
    per_row: list[int] = []
    for i in range(0, len(prompts), batch):
        seq = mx.array(np.concatenate([prompts[i : i + batch], generated[i : i + batch]], axis=1))
        logits, hidden = model(seq)
        ours = mx.argmax(logits[:, P - 1 : P + G - 1], axis=-1)  # greedy x_P .. x_{P+G-1}
        mismatched += int((ours != seq[:, P:]).sum().item())
        # Drafts from (h_t, x_{t+1}) for t = P-2 .. P+G-3, targets x_{t+2} = x_P .. x_{P+G-1}.
        t0, t1 = P - 2, P + G - 2
        draft = mx.argmax(model.mtp_forward(hidden[:, t0:t1], seq[:, t0 + 1 : t1 + 1]), axis=-1)
        hits = (draft == seq[:, t0 + 2 : t1 + 2]).sum(axis=1)
        per_row.extend(int(h) for h in hits.tolist())
        accepted += int(hits.sum().item())
        drafted += draft.size
    return {
        "mtp_acceptance": accepted / drafted,
        "drafted": drafted,
        "accepted_per_prompt": per_row,
        "parity_mismatches": mismatched,
        "parity_tokens": int(generated.size),
    }


def indexer_attention_mass(model, stream: np.ndarray, k: int, n_windows: int = 8) -> tuple[float, float]:
    """Share of the dense attention mass (averaged over heads) on each query's top-k
    indexer keys, and (the baseline) on its k most recent keys; over queries that see
    more than k keys, averaged over layers."""
    x = mx.array(data.windows(stream, CONTEXT)[:n_windows, :-1])
    _, _, cap = forward(model, x)
    T = x.shape[1]
    causal = causal_mask(T)[None, None]
    pos = mx.arange(T)
    recent = causal[0, 0] & (pos[None, :] > pos[:, None] - k)  # (T, T)
    shares, local = [], []
    for layer, n in zip(model.layers, cap.normed):
        p = dense_attention(layer, n)  # (B, T, T)
        keep = topk_select(layer.indexer.scores(n), causal, k)[:, 0]  # (B, T, T)
        shares.append((p * keep).sum(axis=-1)[:, k:].mean().item())  # queries with > k keys
        local.append((p * recent).sum(axis=-1)[:, k:].mean().item())
    return float(np.mean(shares)), float(np.mean(local))


def logit_parity(directory: Path, model, prompt: np.ndarray) -> float:
    """Largest |logit difference| between mlx-lm's model and ours on one prompt."""
    from mlx_lm.utils import load_model as mlx_lm_load

    ref, _ = mlx_lm_load(directory)
    x = mx.array(prompt[None])
    return float(mx.abs(ref(x) - model(x)[0]).max().item())


def evaluate(directory: Path, limit: Optional[int] = None, log: Callable[[str], None] = print) -> dict:
    args = read_args(directory)
    model = load_model(directory, args, with_mtp=True, with_indexer=True)
    tok = load_tokenizer(directory)
    eos = tok.token_to_id(data.EOS_TOKEN)
    root = corpus.stdlib_root()
    train_files, heldout_files = corpus.split(corpus.verify(root))
    train = data.encode_stream(tok, [corpus.read_text(root, f) for f in train_files], eos)
    heldout = data.encode_stream(tok, [corpus.read_text(root, f) for f in heldout_files], eos)
    res = {"heldout_tokens": int(len(heldout))}
    res["heldout_loss"] = window_loss(model, heldout)
    log(f"held-out loss {res['heldout_loss']:.4f}")
    res["train_loss"] = window_loss(model, train, max_windows=len(heldout) // CONTEXT)
    res["unigram_heldout_loss"] = unigram_loss(train, heldout, args.vocab_size)
    for k in (32, 64):
        res[f"indexer_top{k}_attention_mass"], res[f"recent{k}_attention_mass"] = indexer_attention_mass(
            model, heldout, k
        )
    log(f"train loss {res['train_loss']:.4f}, unigram baseline {res['unigram_heldout_loss']:.4f}")
    prompts = read_prompts(directory / "heldout.jsonl")[:limit]
    encoded = [(p.id, tok.encode(p.text).ids) for p in prompts]
    kept = [(pid, x[:PROMPT_TOKENS]) for pid, x in encoded if len(x) >= PROMPT_TOKENS]
    ids = np.array([x for _, x in kept], dtype=np.int32)
    generated = greedy_mlx_lm(directory, ids, GENERATE)
    res.update(acceptance(model, ids, generated))
    # The encodings/cp*.py charmap tables are very regular; report acceptance without them too.
    rows = [
        a for (pid, _), a in zip(kept, res.pop("accepted_per_prompt")) if not pid.startswith("encodings/")
    ]
    res["mtp_acceptance_excluding_encodings"] = sum(rows) / max(len(rows) * GENERATE, 1)
    res["prompts_excluding_encodings"] = len(rows)
    res.update(
        prompts_used=int(len(ids)),
        prompt_tokens=PROMPT_TOKENS,
        generated_tokens=GENERATE,
        max_logit_diff_vs_mlx_lm=logit_parity(directory, model, ids[0]),
    )
    res["perplexity_heldout"] = math.exp(res["heldout_loss"])
    log(
        f"MTP acceptance {res['mtp_acceptance']:.3f} over {res['drafted']} drafts; "
        f"greedy parity with mlx-lm: {res['parity_mismatches']} of {res['parity_tokens']} differ"
    )
    return res
