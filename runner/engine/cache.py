"""Paged per-row state: a pool of fixed-size KV blocks shared by all rows.

Each layer (and the MTP layer) keeps keys, values and (with the indexer) indexer keys in
one array per kind, indexed by slot = block * block_size + offset. A row owns a block
table; its state bytes are the real bytes of the blocks it holds. Block 0 is scratch:
padded positions of a pass write there and nothing reads it as valid. Blocks are
reference counted so the prefix cache can share full prompt blocks between rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx

from .config import ModelArgs

SCRATCH_BLOCK = 0


@dataclass
class LayerKV:
    """One layer's pooled state: keys and values in one array, so a pass writes them with
    one scatter and reads them with one gather; plus the indexer keys when indexing."""

    kv: mx.array  # (2 * n_kv_heads * slots, head_dim): keys, then values, head-major
    # (row = head * slots + slot), so a gather yields (heads, B, S, D),
    # which the score and value matmuls read in place (a slot-major
    # pool cost a copy of each per layer)
    ik: Optional[mx.array] = None  # (slots, index_head_dim) indexer keys, when indexing

    def arrays(self) -> list[mx.array]:
        return [a for a in (self.kv, self.ik) if a is not None]


class BlockPool:
    def __init__(
        self,
        args: ModelArgs,
        block_size: int,
        dtype: mx.Dtype,
        with_mtp: bool,
        with_indexer: bool,
        initial_blocks: int = 64,
    ):
        self.args, self.block_size, self.dtype = args, block_size, dtype
        self.with_indexer = with_indexer
        n_layers = args.num_hidden_layers + (1 if with_mtp else 0)
        self.layers = [
            self._empty_layer(initial_blocks, i < args.num_hidden_layers and with_indexer)
            for i in range(n_layers)
        ]
        self.n_blocks = initial_blocks
        # Real bytes one block occupies across every layer's arrays (fixed: growth adds blocks).
        slots = initial_blocks * block_size
        self.block_bytes = block_size * sum(x.nbytes // slots for kv in self.layers for x in kv.arrays())
        self.refs = [0] * initial_blocks
        self.refs[SCRATCH_BLOCK] = 1
        self.free = list(range(initial_blocks - 1, 0, -1))  # pop() hands out low ids first
        mx.eval([a for kv in self.layers for a in kv.arrays()])

    def _empty_layer(self, n_blocks: int, indexed: bool) -> LayerKV:
        a, slots = self.args, n_blocks * self.block_size
        ik = mx.zeros((slots, a.index_head_dim), self.dtype) if indexed else None
        return LayerKV(mx.zeros((2 * a.num_key_value_heads * slots, a.head_dim), self.dtype), ik)

    def move_position(self, blocks: list[int], src: int, dst: int) -> None:
        """Copy a row's keys and values (and indexer keys) at position src to position dst,
        in every layer: a draft tree's accepted leaf, computed one slot past its depth's."""
        bs, heads = self.block_size, 2 * self.args.num_key_value_heads
        s, d = (blocks[p // bs] * bs + p % bs for p in (src, dst))
        base = mx.arange(heads, dtype=mx.int32) * (self.n_blocks * bs)
        for kv in self.layers:
            kv.kv[base + d] = kv.kv[base + s]
            if kv.ik is not None:
                kv.ik[d] = kv.ik[s]

    def pool_bytes(self) -> int:
        return sum(x.nbytes for kv in self.layers for x in kv.arrays())

    def blocks_in_use(self) -> int:
        return self.n_blocks - 1 - len(self.free)

    def allocate(self) -> int:
        if not self.free:
            self._grow()
        b = self.free.pop()
        self.refs[b] = 1
        return b

    def retain(self, block: int) -> None:
        self.refs[block] += 1

    def release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self.free.append(block)

    def reserve(self, n_blocks: int) -> None:
        """Grow the pool to hold n_blocks (exactly, where allocation doubles). The pool's
        size is part of every traced shape: grown during a measurement, each pass traces
        again."""
        if self.n_blocks < n_blocks:
            self._grow(n_blocks - self.n_blocks)

    def _grow(self, added: int | None = None) -> None:
        """Add `added` blocks (default: double the pool). Rare; the arrays are copied once."""
        old = self.n_blocks
        added = added or old
        for kv in self.layers:
            extra = self._empty_layer(added, kv.ik is not None)
            heads = 2 * self.args.num_key_value_heads  # head-major rows: grow each head's run
            kv.kv = mx.concatenate(
                [kv.kv.reshape(heads, -1, kv.kv.shape[-1]), extra.kv.reshape(heads, -1, kv.kv.shape[-1])],
                axis=1,
            ).reshape(-1, kv.kv.shape[-1])
            if kv.ik is not None:
                kv.ik = mx.concatenate([kv.ik, extra.ik])
        self.n_blocks = old + added
        self.refs.extend([0] * added)
        self.free = list(range(self.n_blocks - 1, old - 1, -1)) + self.free
        mx.eval([a for kv in self.layers for a in kv.arrays()])
