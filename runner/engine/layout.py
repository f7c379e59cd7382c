"""The index arrays that describe one pass to the model: where each packed token sits,
which pool slot it writes, and how attention lays the rows out.

The pass's tokens are packed (no padding between rows) for all per-token work;
attention lays rows out in groups (decode rows apart from prefill chunks), padded within
a group. Pads write to the scratch block and their outputs are ignored. Lengths are
bucketed so the compiled forward sees few shapes. Four builders: `build_layout` from
host-side starts (a uniform decode pass in plain Python, anything else through numpy),
`ahead_layout` for a pass whose start positions are still in the graph (Launcher.launch_ahead),
and `tree_layout` for one row verifying a draft tree.
This file knows nothing about which rows run or why.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .attention import PassContext, RowGroup
from .cache import SCRATCH_BLOCK
from .drafting.tree import ancestors, depths
from .sequence import Sequence

COMPILE_MAX_TOKENS = 64  # passes with more packed tokens than this run uncompiled (forward.py)
SHORT_ROW = 2  # rows feeding at most this many tokens (decode, verify) form their own group


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
    if T <= SHORT_ROW and all(n == T for n in lengths):
        return _uniform_short_layout(starts, T, blocks, block_size)
    return _general_layout(starts, lengths, blocks, block_size, t_cap)


def _uniform_short_layout(starts: list[int], T: int, blocks: list[list[int]], bs: int) -> PassLayout:
    """build_layout for the common decode pass (every row feeds the same 1 or 2 tokens),
    in plain Python: on a handful of rows numpy's per-call cost is most of the host time."""
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
    if n_real > COMPILE_MAX_TOKENS:
        # Run uncompiled: no traced shape to share, so rows are padded to the longest only
        # (a lazy MTP catch-up of 138 positions a row would otherwise run its attention at 256).
        t_cap = 1
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
    short = lens <= SHORT_ROW
    members = [m for m in (np.nonzero(short)[0], np.nonzero(~short)[0]) if len(m)]
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


def tree_layout(start: int, parents: list[int], blocks: list[int], block_size: int) -> PassLayout:
    """One row feeding a draft tree (drafting/tree.py) from position `start`: node i sits in
    the row's slot start + i and at position start + its depth, and sees the row's
    context and its own ancestors."""
    T = 1 + len(parents)
    tables = block_tables([blocks], block_bucket(-(-(start + T) // block_size)))
    positions = [start + d for d in depths(parents)]
    slots = [tables[0][p // block_size] * block_size + p % block_size for p in range(start, start + T)]
    group = RowGroup(
        None,
        mx.array(tables, dtype=mx.int32),
        mx.array([start], dtype=mx.int32),
        T,
        block_size,
        tree=mx.array(ancestors(parents)[None]),
    )
    ctx = PassContext(
        positions=mx.array(positions, dtype=mx.int32),
        write_slots=mx.array(slots, dtype=mx.int32),
        groups=(group,),
        from_rows=None,
    )
    return PassLayout(ctx, [0], T)
