"""The block drafter's per-row context: each drafter layer's keys and values for a row's
verified positions, kept between passes.

- A row's context covers absolute positions base..end-1 in order, base being where the
  engine first showed it the row (0, or after the prefix cache's share of the prompt).
  It never holds a rejected position: the engine appends what verification kept and
  trims on rollback.
- Appends stay lazy until `settle` (one evaluation a pass for every row, rather than one
  per row, and with the drafter pass's own outputs); `gather` pads rows to a multiple of
  CONTEXT_BUCKET positions, so the drafter's attention sees few distinct shapes.
- With `compile`, the projection of a decode pass's few new positions (up to
  COMPILED_APPEND) is one compiled graph a length: on MLX's CPU backend an eager one
  costs more in dispatching its small operations than in computing them. A prompt's
  positions, of any length, project eagerly (a graph a length would be traced each time).
"""

from __future__ import annotations

import math

import mlx.core as mx

from .block_drafter import BlockDrafter, LayerContext

CONTEXT_BUCKET = 64
COMPILED_APPEND = 32  # the most new positions an append projects through a compiled graph


class ContextCache:
    def __init__(self, drafter: BlockDrafter, compile: bool = False):
        self.drafter = drafter
        self._rows: dict[int, LayerContext] = {}
        self._base: dict[int, int] = {}
        self._compiled = compile
        self._project = mx.compile(drafter.context) if compile else drafter.context

    def length(self, row: int) -> int:
        """Positions cached for the row."""
        ctx = self._rows.get(row)
        return 0 if ctx is None else ctx[0][0].shape[1]

    def end(self, row: int) -> int:
        """The absolute position after the row's last cached one (0 for an unknown row)."""
        return self._base.get(row, 0) + self.length(row)

    def base(self, row: int) -> int:
        return self._base.get(row, 0)

    def append(self, row: int, features: mx.array, first_position: int | None = None) -> None:
        """Target features (T, n*H) of the row's next T verified positions; a new row's
        context starts at first_position (default 0)."""
        if row not in self._base:
            self._base[row] = first_position or 0
        pos = (self.end(row) + mx.arange(features.shape[0], dtype=mx.int32))[None]
        project = self._project if features.shape[0] <= COMPILED_APPEND else self.drafter.context
        new = [(k[0], v[0]) for k, v in project(features[None], pos)]
        old = self._rows.get(row)
        self._rows[row] = (
            new
            if old is None
            else [
                (mx.concatenate([ok, nk], 1), mx.concatenate([ov, nv], 1))
                for (ok, ov), (nk, nv) in zip(old, new)
            ]
        )

    def warm(self) -> int:
        """Trace the compiled projection at every length it takes (a backlog of passes
        without drafts can reach any of them); returns how many."""
        if not self._compiled:
            return 0
        width = self.drafter.cfg.feature_width
        for n in range(1, COMPILED_APPEND + 1):
            mx.eval(self._project(mx.zeros((1, n, width)), mx.arange(n, dtype=mx.int32)[None]))
        return COMPILED_APPEND

    def settle(self, rows: list[int] | None = None, *also: mx.array, wait: bool = True) -> None:
        """Evaluate the rows' pending appends (all rows when None), with `also` in the same
        evaluation; wait=False queues it and returns."""
        pending = [self._rows[r] for r in (self._rows if rows is None else rows) if r in self._rows]
        (mx.eval if wait else mx.async_eval)(pending, *also)

    def trim(self, row: int, end: int) -> None:
        """Keep positions before absolute position `end` (rollback)."""
        keep = end - self.base(row)
        if keep > self.length(row) or keep < 0:
            raise ValueError(
                f"row {row}: cannot trim positions {self.base(row)}..{self.end(row)} to end {end}"
            )
        self._rows[row] = [(k[:, :keep], v[:, :keep]) for k, v in self._rows[row]]

    def drop(self, row: int) -> None:
        self._rows.pop(row, None)
        self._base.pop(row, None)

    def nbytes(self, row: int) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self._rows.get(row, []))

    def gather(self, rows: list[int]) -> tuple[LayerContext, mx.array, mx.array]:
        """For propose: each layer's (R, kv_heads, S, D) keys/values padded to a
        CONTEXT_BUCKET multiple, the lengths (R,), and each row's anchor position (R,): the
        absolute position after its context."""
        lens = [self.length(r) for r in rows]
        S = max(CONTEXT_BUCKET, math.ceil(max(lens) / CONTEXT_BUCKET) * CONTEXT_BUCKET)
        cfg = self.drafter.cfg
        zero = mx.zeros((cfg.num_kv_heads, S, cfg.head_dim))
        out = []
        for i in range(cfg.num_layers):
            ks, vs = [], []
            for r, n in zip(rows, lens):
                if not n:
                    ks.append(zero), vs.append(zero)
                    continue
                k, v = self._rows[r][i]
                pad = [(0, 0), (0, S - n), (0, 0)]
                ks.append(mx.pad(k, pad)), vs.append(mx.pad(v, pad))
            out.append((mx.stack(ks), mx.stack(vs)))
        ends = [self.end(r) for r in rows]
        return out, mx.array(lens, dtype=mx.int32), mx.array(ends, dtype=mx.int32)
