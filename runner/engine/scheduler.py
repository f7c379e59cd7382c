"""Which rows run in the next pass and what each feeds; the index arrays that describe
the pass to the model.

Admission is first come, first served under max_batch_size. A prefilling row feeds its
next chunk of at most prefill_chunk prompt tokens; a decoding row feeds its last token,
plus its draft when the pass drafts. The pass's tokens are packed (no padding between
rows) for all per-token work; attention lays rows out in groups (decode rows apart from
prefill chunks), padded within a group. Pads write to the scratch block and their
outputs are ignored. Lengths are bucketed so the compiled forward sees few shapes.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .attention import PassContext, RowGroup
from .cache import SCRATCH_BLOCK, BlockPool
from .prefix_cache import PrefixCache
from .sequence import Sequence


COMPILE_MAX_TOKENS = 64  # passes with more packed tokens than this run uncompiled (forward.py)


def bucket(n: int, cap: int | None = None) -> int:
    b = 1 << max(n - 1, 0).bit_length()
    return max(n, min(b, cap)) if cap else b


def block_bucket(n: int) -> int:
    """Read width, in blocks, for rows that reach n blocks: powers of two and 1.5x powers
    of two (1, 2, 3, 4, 6, 8, 12, 16, 24, ...), so at most a third of the keys a pass
    reads and softmaxes are padding, against half with powers of two alone (measured:
    a b=4 decode pass at 192 keys took 0.9x the time at 256), for twice the shapes."""
    p = bucket(n)
    return p * 3 // 4 if p >= 4 and n <= p * 3 // 4 else p


def block_buckets_upto(n: int) -> list[int]:
    """Every read width block_bucket gives for rows of up to n blocks."""
    return sorted({block_bucket(i) for i in range(1, n + 1)})


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


SHORT_ROW = 2  # rows feeding at most this many tokens (decode, verify) form their own group


def _group(starts: np.ndarray, T: int, tables: np.ndarray, block_size: int,
           to_rows: np.ndarray | None) -> RowGroup:
    """The (B, T) attention layout of one group of rows."""
    n_blocks = block_bucket(max(-(-(s + T) // block_size) for s in starts.tolist()))
    return RowGroup(None if to_rows is None else mx.array(to_rows), mx.array(tables[:, :n_blocks]),
                    mx.array(starts), T, block_size, fresh=not starts.any())


def block_tables(blocks: list[list[int]], width: int) -> list[list[int]]:
    """Each row's first `width` blocks, padded with the scratch block (plain Python: on a
    handful of rows numpy's per-call cost is most of the host time)."""
    return [(bl[:width] + [SCRATCH_BLOCK] * width)[:width] for bl in blocks]


def _uniform_short_layout(starts: list[int], T: int, blocks: list[list[int]], bs: int) -> PassLayout:
    """build_layout for the common decode pass (every row feeds the same 1 or 2 tokens),
    in plain Python: on a handful of rows numpy's per-call cost is most of the host time."""
    width = block_bucket(max((s + T - 1) // bs + 1 for s in starts))
    tables = block_tables(blocks, width)
    positions = [s + t for s in starts for t in range(T)]
    slots = [tables[i // T][p // bs] * bs + p % bs for i, p in enumerate(positions)]
    group = RowGroup(None, mx.array(tables, dtype=mx.int32), mx.array(starts, dtype=mx.int32), T, bs,
                     fresh=not any(starts))
    ctx = PassContext(positions=mx.array(positions, dtype=mx.int32), write_slots=mx.array(slots, dtype=mx.int32),
                      groups=(group,), from_rows=None)
    return PassLayout(ctx, list(range(0, len(positions), T)), len(positions))


def build_layout(starts: list[int], lengths: list[int], blocks: list[list[int]], block_size: int,
                 t_cap: int | None = None) -> PassLayout:
    """Index arrays for rows feeding lengths[b] tokens from position starts[b]."""
    T = lengths[0]
    if T <= SHORT_ROW and all(n == T for n in lengths):
        return _uniform_short_layout(starts, T, blocks, block_size)
    return _general_layout(starts, lengths, blocks, block_size, t_cap)


def _general_layout(starts: list[int], lengths: list[int], blocks: list[list[int]], block_size: int,
                    t_cap: int | None) -> PassLayout:
    B = len(starts)
    lens, start = np.asarray(lengths, np.int32), np.asarray(starts, np.int32)
    n_real = int(lens.sum())
    if n_real > COMPILE_MAX_TOKENS:
        # Run uncompiled: no traced shape to share, so rows are padded to the longest only
        # (a lazy MTP catch-up of 138 positions a row was padded to 256: 1.85x the attention).
        t_cap = 1
    first = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int32)
    # Block tables wide enough for every row's reach in this pass (a row may hold one
    # more block, reserved for a draft that was rejected: it is not read here).
    width = max(-(-(s + l) // block_size) for s, l in zip(starts, lengths))
    tables = np.full((B, block_bucket(width)), SCRATCH_BLOCK, np.int32)
    for b, bl in enumerate(blocks):
        bl = bl[:tables.shape[1]]
        tables[b, :len(bl)] = bl
    pos_all = np.repeat(start - first, lens) + np.arange(n_real, dtype=np.int32)         # packed positions
    row_all = np.repeat(np.arange(B, dtype=np.int32), lens)
    short = lens <= SHORT_ROW
    members = [m for m in (np.nonzero(short)[0], np.nonzero(~short)[0]) if len(m)]
    single_dense = len(members) == 1 and bool((lens == lens.max()).all()) and bucket(int(lens.max()), t_cap) == lens.max()
    groups, from_rows, base = [], np.zeros(n_real, np.int32), 0
    for m in members:
        T = bucket(int(lens[m].max()), cap=t_cap)
        if single_dense:
            to_rows = None
        else:
            t = np.arange(T, dtype=np.int32)[None, :]
            to_rows = np.where(t < lens[m][:, None], first[m][:, None] + t, 0).astype(np.int32)
        for i, b in enumerate(m):
            from_rows[first[b]:first[b] + lens[b]] = base + i * T + np.arange(lens[b])
        base += len(m) * T
        groups.append(_group(start[m], T, tables[m], block_size, to_rows))
    # Packed length: round to a multiple of 16 (few compiled shapes, little padding work).
    N = n_real if single_dense else bucket(n_real) if n_real <= 16 else -(-n_real // 16) * 16
    slots = tables[row_all, pos_all // block_size] * block_size + pos_all % block_size
    packed = np.zeros((3, N), np.int32)            # positions, write slots, from_rows (pads: 0)
    packed[0, :n_real], packed[1, :n_real], packed[2, :n_real] = pos_all, slots, from_rows
    ctx = PassContext(positions=mx.array(packed[0]), write_slots=mx.array(packed[1]),
                      groups=tuple(groups), from_rows=None if single_dense else mx.array(packed[2]))
    return PassLayout(ctx, first.tolist(), N)


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
        seq.pending_hidden, seq.pending_bytes = None, 0
