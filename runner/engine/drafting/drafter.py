"""Drafters behind one interface: what the engine asks of anything that proposes tokens.

- After each committed target pass the engine hands the drafter what that pass left
  (`TargetOutputs`: each row's start, the packed final hidden states, each row's first
  index; the last committed token is the row's own `tokens[-1]`) and the drafts it may
  propose per row (k; 0: none). The drafter sets each live decode row's `drafts` (up to
  k tokens) and, for a sampling row, `draft_probs` (one distribution q per draft).
- Per-row state is indexed by verified positions only: `rollback(seq, verified)` drops
  anything a drafter wrote past the row's verified length (the engine calls it after
  every commit), and `release(seq)` forgets a retired row.
- `row_bytes(seq)` is the drafter's own per-row state (its KV in pool blocks is counted
  with the row's blocks; a backlog or distributions it keeps are counted here).
- A drafter whose drafts come from a device pass may return them pending from `draft`
  (`PendingDrafts`): the pass is queued, its tokens still lazy, so the engine can build
  the verify graph on them while it runs (verify_ahead.py); `land()` puts the drafts on
  the rows, and nothing reads a row's drafts before it.
- Implementations: `MTPDrafter` (mtp.py, the MTP layer chained k times) and the block
  drafter (block_drafter.py); drafters.py builds the one the knobs name.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Protocol

import mlx.core as mx

from ..sequence import Sequence


class TargetOutputs(NamedTuple):
    """What a committed target pass left for the drafter."""

    starts: list[int]  # each row's start position in the pass
    hidden: Optional[mx.array]  # (N, H) packed final hidden states (after the model's norm), or
    # the block drafter's features; None: a pass run without them (no row drafts after it)
    first: list[int]  # packed index of each row's first token


class PendingDrafts(NamedTuple):
    """Drafts whose pass is queued: `tokens` (R, k) lazy, row r's drafts for rows[r]."""

    rows: list[Sequence]
    tokens: mx.array
    land: Callable[[], None]  # wait for the pass and set each row's drafts


class Drafter(Protocol):
    eager: bool  # keeps its state current every pass, drafting or not
    prior_acceptance: tuple[float, ...]  # measured acceptance of draft i given i - 1 accepted
    # (the adaptive policy's starting estimate; empty: none measured)
    looked_up: int  # rows whose drafts the last `draft` looked up in their own tokens (lookup.py)

    def draft(self, rows: list[Sequence], target: TargetOutputs, k: int) -> Optional[PendingDrafts]:
        """Absorb the pass's verified positions, then propose up to k drafts a live
        decode row (k = 0: none, state kept current or backlogged); drafts still being
        computed come back pending (None: every row's drafts are set)."""

    def rollback(self, seq: Sequence, verified: int) -> None:
        """Forget whatever this row's state holds past `verified` positions."""

    def release(self, seq: Sequence) -> None:
        """The row retired: drop its state."""

    def verified_in_pool(self, seq: Sequence) -> int:
        """Positions whose drafter state kept in the row's pool blocks is verified and
        complete (the prefix cache shares only those; no pool state: seq.computed)."""

    def row_bytes(self, seq: Sequence) -> int:
        """Bytes of this row's drafter state outside its pool blocks."""

    def warm(self, max_rows: int, max_context: int, ks: tuple[int, ...]) -> int:
        """Trace the drafter's own compiled shapes (up to max_rows drafting rows of up
        to max_context tokens, k in ks) before timing starts; returns how many."""
