"""A launched pass and what it lands: the record the launcher writes and the engine reads.

- `Launched` is a pass whose graph is queued. It carries the draft decision for the pass
  after it (`drafts_next`, and whether it kept the rows in step), written only by the
  Launcher.
- Its `continuing_rows` and `next_inputs` are the rules a pass launched ahead follows:
  they run in the graph what the host's commit (speculative.choose, MTPDrafter.adopt)
  will do with the same numbers, so the host state after committing this pass equals
  what the queued pass assumed (see launch.py).
- `Landed` is the pass's outputs on the host, once it has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx

from .drafting.draft_policy import Branch
from .scheduler import PassPlan


@dataclass(frozen=True)
class Landed:
    """A pass's outputs on the host, once it has run."""

    starts: list[int]  # each row's start position (host state matches what the pass assumed)
    greedy: list[list[int]]  # (B, K) argmax at the logit positions
    drafts: Optional[list[int]]  # the fused MTP's draft for each row's next pass


@dataclass(frozen=True)
class MTPInputs:
    """What the MTP layer fused into a target pass reads (Forward.main_and_draft)."""

    next_known: mx.array  # (N,) the token after each packed position, where the host knows it
    next_from: mx.array  # (N,) else the index into greedy.flatten() that holds it (-1: known)
    candidates: mx.array  # (B, 2) the position to draft from if the draft is rejected / accepted


@dataclass
class Launched:
    """A pass whose graph is queued; its outputs are lazy until `wait()`."""

    plan: PassPlan
    first: list[int]  # packed index of each row's first token
    logits: mx.array  # (B, K, V)
    hidden: Optional[mx.array]  # (N, H) or the drafter's features (None: a pass without them)
    greedy: mx.array  # (B, K) argmax at the logit positions
    drafts: Optional[mx.array]  # (B,) the fused MTP's draft for each row's next pass
    starts: mx.array  # (B,) start position of each row, in the graph
    draft_in: Optional[mx.array]  # (B,) the draft each row verifies (drafted rows)
    fused: bool  # the MTP layer's work for this pass ran inside it
    ahead: bool = False  # built before the previous pass was committed
    drafts_next: Optional[int] = None  # drafts a row carries into the pass after this one
    # (0: none), once the Launcher has decided
    kept_in_step: bool = False  # that decision kept its rows in step (in_step.py)

    def queue(self) -> None:
        """Start running the built pass (its outputs stay lazy). On MLX's CPU backend this
        returns once about a hundred of the pass's kernels are left to run, not at once."""
        mx.async_eval(self.greedy, *(a for a in (self.hidden, self.drafts) if a is not None))

    @property
    def branch(self) -> Branch:
        return Branch(self.plan.kind, len(self.plan.rows), max(self.plan.drafted, default=0))

    @property
    def live(self) -> int:
        """Rows of this pass not finished (by it or, for a pass launched ahead, before it)."""
        return sum(not s.finished for s in self.plan.rows)

    def wait(self) -> Landed:
        """Block until the pass has run; its tokens (and drafts) on the host."""
        starts = [s.computed for s in self.plan.rows]
        return Landed(starts, self.greedy.tolist(), None if self.drafts is None else self.drafts.tolist())

    def continuing_rows(self) -> list[int]:
        """Rows that may still need a token after this pass: not finished, and not sure to
        reach max_new_tokens with the token(s) it commits."""
        return [
            b for b, s in enumerate(self.plan.rows) if not s.finished and s.num_output + 1 < s.max_new_tokens
        ]

    def next_inputs(self) -> tuple[mx.array, mx.array, Optional[mx.array]]:
        """In the graph: each row's next start, next token and next draft, as the host
        will commit them (an accepted draft advances the row by two, bonus token next)."""
        g0 = self.greedy[:, 0]
        if self.draft_in is None:
            return self.starts + 1, g0, self.drafts
        ok = mx.array([d > 0 for d in self.plan.drafted]) & (g0 == self.draft_in)
        return self.starts + 1 + ok.astype(mx.int32), mx.where(ok, self.greedy[:, -1], g0), self.drafts
