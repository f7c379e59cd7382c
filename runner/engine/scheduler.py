"""Which rows run in the next pass and what each feeds; the index arrays that describe
the pass to the model.

Admission is first come, first served under max_batch_size. A prefilling row feeds its
next chunk of at most prefill_chunk prompt tokens; a decoding row feeds its last token,
plus its draft when the pass drafts. Rows are padded to a common length; pads write to
the scratch block and their outputs are ignored. Shapes are bucketed (powers of two) so
the compiled forward sees few distinct shapes.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .attention import PassContext
from .cache import SCRATCH_BLOCK, BlockPool
from .prefix_cache import PrefixCache
from .sequence import Sequence


def bucket(n: int, cap: int | None = None) -> int:
    b = 1 << max(n - 1, 0).bit_length()
    return max(n, min(b, cap)) if cap else b


@dataclass
class PassPlan:
    rows: list[Sequence]
    feeds: list[list[int]]      # tokens fed per row
    drafted: list[bool]         # row carries a draft (its last fed token)
    prefill_tokens: int
    decode_tokens: int

    @property
    def kind(self) -> str:
        has_p, has_d = self.prefill_tokens > 0, self.decode_tokens > 0
        return "mixed" if has_p and has_d else ("prefill" if has_p else "decode")


@dataclass(frozen=True)
class PassLayout:
    ctx: PassContext
    first: list[int]     # packed index of each row's first token
    n_tokens: int        # packed length (bucketed when rows are ragged)


def build_layout(starts: list[int], lengths: list[int], blocks: list[list[int]], block_size: int,
                 t_cap: int | None = None) -> PassLayout:
    """Index arrays for rows feeding lengths[b] tokens from position starts[b]."""
    B = len(starts)
    T = bucket(max(lengths), cap=t_cap)
    lens = np.asarray(lengths, np.int32)
    n_real = int(lens.sum())
    dense = bool((lens == T).all())
    N = n_real if dense else bucket(n_real, cap=B * T)
    pos = np.asarray(starts, np.int32)[:, None] + np.arange(T, dtype=np.int32)[None, :]  # (B, T)
    valid = np.arange(T)[None, :] < lens[:, None]
    n_blocks = bucket(max(-(-(s + T) // block_size) for s in starts))
    table = np.full((B, n_blocks), SCRATCH_BLOCK, np.int32)
    for b, bl in enumerate(blocks):  # a row may hold a block past this pass's reach (a rejected draft's)
        bl = bl[:n_blocks]
        table[b, :len(bl)] = bl
    safe = np.where(valid, pos, 0)
    slot = table[np.arange(B)[:, None], safe // block_size] * block_size + safe % block_size
    rows_of, t_of = np.nonzero(valid)              # row-major: the packed order
    packed = np.zeros((3, N), np.int32)            # positions, write slots, from_rows (pads: 0)
    packed[0, :n_real], packed[1, :n_real], packed[2, :n_real] = pos[valid], slot[valid], rows_of * T + t_of
    to_rows = np.zeros((B, T), np.int32)
    to_rows[valid] = np.arange(n_real, dtype=np.int32)
    read = (table[:, :, None] * block_size + np.arange(block_size, dtype=np.int32)).reshape(B, -1)
    mask = np.arange(read.shape[1], dtype=np.int32)[None, None, :] <= pos[:, :, None]  # (B, T, S)
    ctx = PassContext(positions=mx.array(packed[0]), write_slots=mx.array(packed[1]),
                      read_slots=mx.array(read), mask=mx.array(mask[:, None]),
                      to_rows=mx.array(to_rows), from_rows=mx.array(packed[2]),
                      fresh=not any(starts), dense=dense)
    first = [0] + np.cumsum(lens)[:-1].tolist()
    return PassLayout(ctx, first, N)


class Scheduler:
    def __init__(self, max_batch_size: int, prefill_chunk: int, pool: BlockPool, prefix: PrefixCache):
        self.max_batch_size, self.prefill_chunk = max_batch_size, prefill_chunk
        self.pool, self.prefix = pool, prefix
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def admit(self) -> None:
        while self.waiting and len(self.running) < self.max_batch_size:
            seq = self.waiting.popleft()
            seq.blocks = self.prefix.match(seq.prompt)
            seq.computed = seq.mtp_computed = seq.cached_tokens = len(seq.blocks) * self.pool.block_size
            self.running.append(seq)

    def plan(self, use_drafts: bool) -> PassPlan:
        feeds, drafted, n_prefill, n_decode = [], [], 0, 0
        for seq in self.running:
            if seq.prefilling:
                feed = seq.tokens[seq.computed: seq.computed + self.prefill_chunk]
                n_prefill += len(feed)
            else:
                feed = [seq.tokens[-1]] + ([seq.draft] if use_drafts and seq.draft is not None else [])
                n_decode += len(feed)
            drafted.append(len(feed) == 2 and not seq.prefilling)
            if not drafted[-1]:
                seq.draft = None
            self.ensure_blocks(seq, seq.computed + len(feed))
            feeds.append(feed)
        return PassPlan(list(self.running), feeds, drafted, n_prefill, n_decode)

    def ensure_blocks(self, seq: Sequence, n_positions: int) -> None:
        while len(seq.blocks) * self.pool.block_size < n_positions:
            seq.blocks.append(self.pool.allocate())

    def release(self, seq: Sequence) -> None:
        self.running.remove(seq)
        for b in seq.blocks:
            self.pool.release(b)
        seq.blocks = []
        seq.pending_hidden = None
