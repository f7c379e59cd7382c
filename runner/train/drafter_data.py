"""The block drafter's training data: the target's own greedy continuations.

- Prompts are seeded random windows of the shipped corpus's train stream (`corpus =
  "train"`), or (`"broad"`) line-aligned windows drawn, by size, from the train files and
  the standard library's own tests, idlelib and lib2to3 (`corpus.list_extra_sources`);
  never a third-party package. Each is continued greedily by the target (mlx-lm
  loading the checkpoint directory, with a KV cache; the engine's `Model` agrees token
  for token, see evaluate.py's parity check).
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
    corpus: str = "train"  # or "broad"


def broad_prompts(tok, spec: ContinuationSpec) -> np.ndarray:
    """(sequences, prompt_tokens): windows starting at a line start of a file drawn by size
    from the train split and the extra directories."""
    from . import corpus

    root = corpus.stdlib_root()
    train_files, _ = corpus.split(corpus.verify(root))
    files = train_files + corpus.verify(root, corpus.DRAFTER_MANIFEST, extra=True)
    weights = np.array([f.size for f in files], dtype=np.float64)
    rng = np.random.default_rng(spec.seed)
    texts: dict[int, str] = {}
    prompts: list[list[int]] = []
    while len(prompts) < spec.sequences:
        i = int(rng.choice(len(files), p=weights / weights.sum()))
        text = texts.setdefault(i, corpus.read_text(root, files[i]))
        at = int(rng.integers(0, max(len(text), 1)))
        at = text.rfind("\n", 0, at) + 1
        ids = tok.encode(text[at : at + 12 * spec.prompt_tokens]).ids
        if len(ids) >= spec.prompt_tokens:
            prompts.append(ids[: spec.prompt_tokens])
    return np.array(prompts, dtype=np.int32)


def make_continuations(checkpoint: Path, spec: ContinuationSpec, log: Callable[[str], None]) -> np.ndarray:
    """(sequences, prompt_tokens + generate) int32: train-stream prompts + greedy tokens."""
    from ..engine.checkpoint import load_tokenizer
    from . import corpus, data
    from .evaluate import greedy_mlx_lm

    tok = load_tokenizer(checkpoint)
    if spec.corpus == "broad":
        prompts = broad_prompts(tok, spec)
    elif spec.corpus == "train":
        root = corpus.stdlib_root()
        train_files, _ = corpus.split(corpus.verify(root))
        stream = data.encode_stream(
            tok, [corpus.read_text(root, f) for f in train_files], tok.token_to_id(data.EOS_TOKEN)
        )
        rng = np.random.default_rng(spec.seed)
        starts = rng.integers(0, len(stream) - spec.prompt_tokens, size=spec.sequences)
        prompts = np.stack([stream[s : s + spec.prompt_tokens] for s in starts]).astype(np.int32)
    else:
        raise ValueError(f"continuations: corpus must be 'train' or 'broad', got {spec.corpus!r}")
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
