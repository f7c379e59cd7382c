"""Corpus text -> token streams, training batches and held-out prompts.

- Files are tokenized one by one and joined with `<|endoftext|>`.
- Batches are seeded random windows of the train stream, each `context + 2` tokens long,
  so that the MTP loss (token t+2) has a target at every position.
- Held-out prompts are line-aligned chunks of held-out files only; their JSONL file is
  `runner/prompts.py`'s.
- It knows nothing about the model.
"""

from __future__ import annotations

import numpy as np

from runner.prompts import Prompt, line_chunks

EOS_TOKEN = "<|endoftext|>"


def encode_stream(tokenizer, texts: list[str], eos_id: int) -> np.ndarray:
    """Every text's token ids followed by EOS, as one int32 array."""
    ids: list[int] = []
    for enc in tokenizer.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return np.asarray(ids, dtype=np.int32)


class BatchSampler:
    """Seeded random windows (batch, context + 2) of a token stream."""

    def __init__(self, stream: np.ndarray, batch: int, context: int, seed: int):
        if len(stream) < context + 3:
            raise ValueError(
                f"token stream of {len(stream)} tokens is shorter than one window ({context + 2})"
            )
        self.stream, self.batch, self.width = stream, batch, context + 2
        self.rng = np.random.default_rng(seed)

    def next(self) -> np.ndarray:
        starts = self.rng.integers(0, len(self.stream) - self.width, size=self.batch)
        return np.stack([self.stream[s : s + self.width] for s in starts])


def windows(stream: np.ndarray, context: int) -> np.ndarray:
    """Non-overlapping (n, context + 1) windows covering the stream (for evaluation)."""
    n = (len(stream) - 1) // context
    return np.stack([stream[i * context : i * context + context + 1] for i in range(n)])


def heldout_prompts(
    named_texts: list[tuple[str, str]], min_chars: int = 1000, max_chars: int = 1600, limit: int = 300
) -> list[Prompt]:
    """Line-aligned chunks of roughly min..max characters from held-out files
    (`prompts.line_chunks`, which the unseen-text set shares)."""
    return line_chunks(named_texts, min_chars, max_chars, limit)
