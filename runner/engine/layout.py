"""The index arrays that describe one pass to the model (`PassContext`, its `RowGroup`s):
where each packed token sits, which pool slot it writes, how attention lays rows out.

Tokens are packed (no padding between rows) for all per-token work; attention lays rows
out in groups by length (decode rows, rows verifying drafts, prefill chunks), padded
within a group. Pads write to the scratch block; their outputs are ignored. Lengths are
bucketed so the compiled forward sees few shapes. Builders: `build_layout` from host-side
starts (rows of one unpadded length in plain Python, else numpy), `ahead_layout` for a pass
whose starts are still in the graph (Launcher.launch_ahead); a draft tree's is drafting/tree.py's
`tree_layout`. This file knows nothing about which rows run or why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

import mlx.core as mx
import numpy as np

from .cache import SCRATCH_BLOCK
from .sequence import Sequence

COMPILE_MAX_TOKENS = 64  # passes with more packed tokens than this run uncompiled (forward.py)
SHORT_ROW = 2  # rows feeding at most this many tokens (decode, one draft) form their own group
VERIFY_ROW = 32  # longer rows up to this many (a row verifying its drafts) form the next


@dataclass(frozen=True)
class RowGroup:
    """Rows of similar length laid out (B, T) for attention: decode rows apart from
    prefill chunks, so a one-token row never pays for a chunk-long padded query block.
    The host sends block tables and row starts; the slots to read and the causal mask
    are derived here, in the graph, once a pass."""

    to_rows: Optional[mx.array]  # (B, T) int32 packed index of row b's t-th token (pads -> 0);
    # None when the packed tokens are exactly these rows, row-major
    table: mx.array  # (B, n_blocks) int32: each row's blocks (scratch past its end)
    starts: mx.array  # (B,) int32: position of each row's first token in this pass
    T: int  # tokens per row (padded)
    block_size: int
    fresh: bool = False  # every row starts at position 0: attend to the new keys directly
    tree: Optional[mx.array] = None  # (B, T, T) bool: token t sees this pass's token j (a draft
    # tree, drafting/tree.py: its ancestors and itself); None: the tokens before it

    # Derived on first use, so only inside the traced forward: the host-side layout never
    # builds these graph nodes, and every layer of a pass shares one copy.
    @cached_property
    def read_slots(self) -> mx.array:
        """(B, S): the pool slot of each row's key position s."""
        B, bs = self.table.shape[0], self.block_size
        return (self.table[:, :, None] * bs + mx.arange(bs, dtype=mx.int32)).reshape(B, -1)

    @cached_property
    def mask(self) -> mx.array:
        """(B, 1, T, S): key s visible to query t."""
        S = self.table.shape[1] * self.block_size
        if self.tree is not None:
            rel = (mx.arange(S, dtype=mx.int32)[None, :] - self.starts[:, None])[:, None, :]  # (B, 1, S)
            col = mx.broadcast_to(mx.clip(rel, 0, self.T - 1), (rel.shape[0], self.T, S))
            mine = mx.take_along_axis(self.tree, col, axis=2)  # (B, T, S): this pass's keys
            return ((rel < 0) | ((rel < self.T) & mine))[:, None]
        pos = self.starts[:, None] + mx.arange(self.T, dtype=mx.int32)  # (B, T)
        return (mx.arange(S, dtype=mx.int32)[None, None, :] <= pos[:, :, None])[:, None]

    def rows(self, a: mx.array) -> mx.array:
        """(N, ...) packed -> (B, T, ...)."""
        B = self.table.shape[0]
        return a.reshape(B, self.T, *a.shape[1:]) if self.to_rows is None else a[self.to_rows]


@dataclass(frozen=True)
class PassContext:
    """Index arrays describing one batched pass; shared by every layer of the pass.

    Tokens of a pass are packed: per-token work (projections, MoE, norms) runs on the N
    real tokens only, never on padding. Attention alone works on rows, group by group;
    `packed()` brings the groups' outputs back into packed order."""

    positions: mx.array  # (N,) int32: position of each packed token (pads: 0)
    write_slots: mx.array  # (N,) int32: pool slot of each packed token (pads -> scratch)
    groups: tuple[RowGroup, ...]
    from_rows: Optional[mx.array]  # (N,) int32: index into the groups' concatenated (B*T) rows;
    # None when there is one group and no padding
    rope: Optional[tuple] = None  # rope_table(positions): set by the forward, once a pass
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def pool_rows(self, heads: int, slots: int) -> tuple[mx.array, list[mx.array]]:
        """Rows of a flat head-major pool (heads * slots, D) that this pass writes,
        (heads * N,), and that each group reads, (heads, B, S). Built once a pass: every
        layer of a model shares the pool's shape."""
        if (heads, slots) not in self._memo:
            base = mx.arange(heads, dtype=mx.int32)[:, None] * slots
            self._memo[heads, slots] = (
                (base + self.write_slots).reshape(-1),
                [base[:, :, None] + g.read_slots for g in self.groups],
            )
        return self._memo[heads, slots]

    def packed(self, outs: list[mx.array]) -> mx.array:
        """Per-group (B, T, ...) outputs -> (N, ...) packed."""
        flat = [o.reshape(-1, *o.shape[2:]) for o in outs]
        flat = flat[0] if len(flat) == 1 else mx.concatenate(flat)
        return flat if self.from_rows is None else flat[self.from_rows]

    def flatten(self) -> tuple[tuple, list[mx.array]]:
        """(static structure, arrays): compiled functions take arrays and key on the rest."""
        spec = (self.from_rows is not None,) + tuple(
            (g.to_rows is not None, g.T, g.block_size, g.fresh, g.tree is not None) for g in self.groups
        )
        arrays = [self.positions, self.write_slots] + ([self.from_rows] if self.from_rows is not None else [])
        for g in self.groups:
            arrays += ([g.to_rows] if g.to_rows is not None else []) + [g.table, g.starts]
            arrays += [g.tree] if g.tree is not None else []
        return spec, arrays

    @staticmethod
    def unflatten(spec: tuple, arrays: list[mx.array]) -> tuple["PassContext", list[mx.array]]:
        """Inverse of flatten(); returns the context and the arrays that follow it."""
        it = iter(arrays)
        positions, write = next(it), next(it)
        from_rows = next(it) if spec[0] else None
        groups = []
        for has_rows, T, block_size, fresh, has_tree in spec[1:]:
            to_rows = next(it) if has_rows else None
            table, starts = next(it), next(it)
            tree = next(it) if has_tree else None
            groups.append(RowGroup(to_rows, table, starts, T, block_size, fresh, tree))
        return PassContext(positions, write, tuple(groups), from_rows), list(it)


def bucket(n: int, cap: int | None = None) -> int:
    b = 1 << max(n - 1, 0).bit_length()
    return max(n, min(b, cap)) if cap else b


def block_bucket(n: int) -> int:
    """Read width, in blocks, for rows that reach n blocks: powers of two and 1.5x powers
    of two (1, 2, 3, 4, 6, 8, 12, 16, 24, ...), so at most a third of the keys a pass
    reads and softmaxes are padding, against half with powers of two alone, for twice
    the shapes (a decode pass's attention costs what the keys it reads cost)."""
    p = bucket(n)
    return p * 3 // 4 if p >= 4 and n <= p * 3 // 4 else p


def block_buckets_upto(n: int) -> list[int]:
    """Every read width block_bucket gives for rows of up to n blocks."""
    return sorted({block_bucket(i) for i in range(1, n + 1)})


@dataclass(frozen=True)
class PassLayout:
    ctx: PassContext
    first: list[int]  # packed index of each row's first token
    n_tokens: int  # packed length (bucketed when rows are ragged)


def block_tables(blocks: list[list[int]], width: int) -> list[list[int]]:
    """Each row's first `width` blocks, padded with the scratch block (plain Python: on a
    handful of rows numpy's per-call cost is most of the host time)."""
    return [(bl[:width] + [SCRATCH_BLOCK] * width)[:width] for bl in blocks]


def build_layout(
    starts: list[int], lengths: list[int], blocks: list[list[int]], block_size: int, t_cap: int | None = None
) -> PassLayout:
    """Index arrays for rows feeding lengths[b] tokens from position starts[b]."""
    T = lengths[0]
    if all(n == T for n in lengths) and bucket(T, _row_cap(T * len(lengths), t_cap)) == T:
        return _uniform_layout(starts, T, blocks, block_size)
    return _general_layout(starts, lengths, blocks, block_size, t_cap)


def _row_cap(n_real: int, t_cap: int | None) -> int | None:
    """The cap on padding a row's length (`bucket`) for a pass of n_real packed tokens. A pass
    too long to compile runs eagerly: no traced shape to share, so rows are padded to the
    longest only (a lazy MTP catch-up of 138 positions a row would otherwise run its
    attention at 256)."""
    return 1 if n_real > COMPILE_MAX_TOKENS else t_cap


def _uniform_layout(starts: list[int], T: int, blocks: list[list[int]], bs: int) -> PassLayout:
    """build_layout for rows that all feed T tokens, T needing no padding: a decode pass
    (1 or 2 tokens a row) or rows verifying the same number of drafts. Plain Python: on a
    handful of rows numpy's per-call cost is most of the host time, and a drafting step's
    host work runs while the device waits (verify_ahead.py)."""
    width = block_bucket(max((s + T - 1) // bs + 1 for s in starts))
    tables = block_tables(blocks, width)
    positions = [s + t for s in starts for t in range(T)]
    slots = [tables[i // T][p // bs] * bs + p % bs for i, p in enumerate(positions)]
    group = RowGroup(
        None, mx.array(tables, dtype=mx.int32), mx.array(starts, dtype=mx.int32), T, bs, fresh=not any(starts)
    )
    ctx = PassContext(
        positions=mx.array(positions, dtype=mx.int32),
        write_slots=mx.array(slots, dtype=mx.int32),
        groups=(group,),
        from_rows=None,
    )
    return PassLayout(ctx, list(range(0, len(positions), T)), len(positions))


def _group(
    starts: np.ndarray, T: int, tables: np.ndarray, block_size: int, to_rows: np.ndarray | None
) -> RowGroup:
    """The (B, T) attention layout of one group of rows."""
    n_blocks = block_bucket(max(-(-(s + T) // block_size) for s in starts.tolist()))
    return RowGroup(
        None if to_rows is None else mx.array(to_rows),
        mx.array(tables[:, :n_blocks]),
        mx.array(starts),
        T,
        block_size,
        fresh=not starts.any(),
    )


def _general_layout(
    starts: list[int], lengths: list[int], blocks: list[list[int]], block_size: int, t_cap: int | None
) -> PassLayout:
    B = len(starts)
    lens, start = np.asarray(lengths, np.int32), np.asarray(starts, np.int32)
    n_real = int(lens.sum())
    t_cap = _row_cap(n_real, t_cap)
    first = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int32)
    # Block tables wide enough for every row's reach in this pass (a row may hold one
    # more block, reserved for a draft that was rejected: it is not read here).
    width = max(-(-(s + l) // block_size) for s, l in zip(starts, lengths))
    tables = np.full((B, block_bucket(width)), SCRATCH_BLOCK, np.int32)
    for b, bl in enumerate(blocks):
        bl = bl[: tables.shape[1]]
        tables[b, : len(bl)] = bl
    pos_all = np.repeat(start - first, lens) + np.arange(n_real, dtype=np.int32)  # packed positions
    row_all = np.repeat(np.arange(B, dtype=np.int32), lens)
    # Rows are padded to their group's longest: a row verifying 8 drafts padded to a
    # prefill chunk's length would make its attention a chunk's (a mixed pass then costs
    # more than the prefill and the verify apart), so length classes group apart.
    size = np.searchsorted(np.array([SHORT_ROW, VERIFY_ROW]), lens)
    members = [m for m in (np.nonzero(size == c)[0] for c in range(3)) if len(m)]
    single_dense = (
        len(members) == 1
        and bool((lens == lens.max()).all())
        and bucket(int(lens.max()), t_cap) == lens.max()
    )
    groups, from_rows, base = [], np.zeros(n_real, np.int32), 0
    for m in members:
        T = bucket(int(lens[m].max()), cap=t_cap)
        if single_dense:
            to_rows = None
        else:
            t = np.arange(T, dtype=np.int32)[None, :]
            to_rows = np.where(t < lens[m][:, None], first[m][:, None] + t, 0).astype(np.int32)
        for i, b in enumerate(m):
            from_rows[first[b] : first[b] + lens[b]] = base + i * T + np.arange(lens[b])
        base += len(m) * T
        groups.append(_group(start[m], T, tables[m], block_size, to_rows))
    # Packed length: round to a multiple of 16 (few compiled shapes, little padding work).
    N = n_real if single_dense else bucket(n_real) if n_real <= 16 else -(-n_real // 16) * 16
    slots = tables[row_all, pos_all // block_size] * block_size + pos_all % block_size
    packed = np.zeros((3, N), np.int32)  # positions, write slots, from_rows (pads: 0)
    packed[0, :n_real], packed[1, :n_real], packed[2, :n_real] = pos_all, slots, from_rows
    ctx = PassContext(
        positions=mx.array(packed[0]),
        write_slots=mx.array(packed[1]),
        groups=tuple(groups),
        from_rows=None if single_dense else mx.array(packed[2]),
    )
    return PassLayout(ctx, first.tolist(), N)


def ahead_layout(
    rows: list[Sequence], reach: list[int], starts: mx.array, T: int, block_size: int
) -> PassContext:
    """The pass context for rows whose start positions are still in the graph. reach[b]:
    an upper bound on the positions row b covers after this pass (blocks and the read
    width are sized for it; the mask uses the true starts)."""
    width = block_bucket(max(-(-r // block_size) for r in reach))
    tables = mx.array(block_tables([s.blocks for s in rows], width), mx.int32)
    positions = (starts[:, None] + mx.arange(T, dtype=mx.int32)).reshape(-1)
    row_of = (
        mx.repeat(mx.arange(len(rows), dtype=mx.int32), T) if T > 1 else mx.arange(len(rows), dtype=mx.int32)
    )
    slots = tables[row_of, positions // block_size] * block_size + positions % block_size
    group = RowGroup(None, tables, starts, T, block_size, fresh=False)
    return PassContext(positions=positions, write_slots=slots, groups=(group,), from_rows=None)
