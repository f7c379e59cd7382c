"""The block drafter's training data: the target's own greedy continuations.

- Prompts are seeded random windows of the shipped corpus's train stream; each is
  continued greedily by the target (mlx-lm loading the checkpoint directory, with a KV
  cache; the engine's `Model` agrees token for token, see evaluate.py's parity check).
- The sequences are cached in one .npz beside the training state (never committed),
  with the settings that made them: a cache made under other settings is refused.
- `AnchorSampler` draws seeded batches of sequences (with their precomputed target
  features, when given) and random anchors in the greedy part, so every block's k labels
  are the target's greedy tokens.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Optional

import numpy as np

from ..engine.checkpoint import CheckpointError


class Batch(NamedTuple):
    tokens: np.ndarray  # (B, T)
    anchors: np.ndarray  # (B, A) sorted
    features: Optional[np.ndarray] = None  # (B, T, n*H) precomputed target features, if any


@dataclass(frozen=True)
class ContinuationSpec:
    sequences: int = 1024
    prompt_tokens: int = 64
    generate: int = 128
    seed: int = 0


def make_continuations(checkpoint: Path, spec: ContinuationSpec, log: Callable[[str], None]) -> np.ndarray:
    """(sequences, prompt_tokens + generate) int32: train-stream prompts + greedy tokens."""
    from ..engine.checkpoint import load_tokenizer
    from . import corpus, data
    from .evaluate import greedy_mlx_lm

    tok = load_tokenizer(checkpoint)
    root = corpus.stdlib_root()
    train_files, _ = corpus.split(corpus.verify(root))
    stream = data.encode_stream(
        tok, [corpus.read_text(root, f) for f in train_files], tok.token_to_id(data.EOS_TOKEN)
    )
    rng = np.random.default_rng(spec.seed)
    starts = rng.integers(0, len(stream) - spec.prompt_tokens, size=spec.sequences)
    prompts = np.stack([stream[s : s + spec.prompt_tokens] for s in starts]).astype(np.int32)
    out = []
    for i in range(0, spec.sequences, 128):
        out.append(greedy_mlx_lm(checkpoint, prompts[i : i + 128], spec.generate, batch=128))
        log(f"continuations: {min(i + 128, spec.sequences)}/{spec.sequences} generated")
    return np.concatenate([prompts, np.concatenate(out).astype(np.int32)], axis=1)


def cached_continuations(
    checkpoint: Path, cache: Path, spec: ContinuationSpec, log: Callable[[str], None] = print
) -> np.ndarray:
    """The continuations for `spec`, from `cache` when it holds them, else made and saved."""
    meta = json.dumps(asdict(spec), sort_keys=True)
    if cache.is_file():
        try:
            with np.load(cache) as f:
                saved_meta, seqs = str(f["meta"]), f["sequences"]
        except (OSError, ValueError, KeyError) as e:
            raise CheckpointError(f"{cache}: cannot read cached continuations ({e}); remove it") from None
        if saved_meta != meta:
            raise CheckpointError(f"{cache}: made with {saved_meta}, not {meta}; remove it to regenerate")
        return seqs
    seqs = make_continuations(checkpoint, spec, log)
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(cache.name + ".tmp.npz")
    np.savez(tmp, meta=np.array(meta), sequences=seqs)
    tmp.rename(cache)
    return seqs


class AnchorSampler:
    """Seeded batches: (batch, T) sequences and (batch, anchors) anchor positions a with
    prompt_tokens - 1 <= a <= T - 1 - k (the block's labels a+1..a+k are all greedy)."""

    def __init__(
        self,
        sequences: np.ndarray,
        prompt_tokens: int,
        batch: int,
        anchors: int,
        k: int,
        seed: int,
        features: Optional[np.ndarray] = None,
    ):
        T = sequences.shape[1]
        self.low, self.high = prompt_tokens - 1, T - 1 - k
        if self.high < self.low:
            raise ValueError(
                f"sequences of {T} tokens leave no anchor for blocks of {k} after {prompt_tokens}"
            )
        self.sequences, self.features, self.batch, self.anchors = sequences, features, batch, anchors
        self.rng = np.random.default_rng(seed)

    def next(self) -> Batch:
        rows = np.sort(self.rng.integers(0, len(self.sequences), size=self.batch))
        anchors = self.rng.integers(self.low, self.high + 1, size=(self.batch, self.anchors))
        feats = None if self.features is None else self.features[rows]
        return Batch(self.sequences[rows], np.sort(anchors, axis=1).astype(np.int32), feats)
