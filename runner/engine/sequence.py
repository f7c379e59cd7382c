"""One request's state inside the engine: its tokens, its blocks, its drafts, its clocks.

- Its lifecycle is an explicit `Status`: waiting (queued), running (admitted, holds
  blocks), finished (its last token is committed; a pass launched ahead may still hold
  it), retired (its blocks are freed and its RequestEvent sent).

Invariants after every pass (checked by tests): the main KV holds positions
0..computed-1 and computed == len(tokens) - 1 once prefill is done; the MTP KV holds
the pairs (h_i, x_{i+1}) for i < mtp_computed <= computed; token_ns holds one commit
time per output token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

import numpy as np


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    RETIRED = "retired"


@dataclass(eq=False)
class Sequence:
    request_id: int
    prompt: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    rng: np.random.Generator
    arrival_ns: int
    tokens: list[int] = field(default_factory=list)
    computed: int = 0  # positions whose main KV (and indexer keys) are written
    mtp_computed: int = 0  # pairs the MTP layer has consumed (its KV length)
    blocks: list[int] = field(default_factory=list)
    drafts: list[int] = field(default_factory=list)  # proposals for the next tokens, verified next pass
    draft_probs: list[np.ndarray] = field(default_factory=list)  # each draft's distribution q (sampling)
    draft_conf: list[float] = field(default_factory=list)  # the drafter's q of each greedy draft
    # (empty: it gave none); read once the drafts are made, and by verification
    drafts_looked_up: bool = False  # the drafts were looked up in its own tokens (lookup.py)
    draft_parents: list[int] = field(default_factory=list)  # a draft tree's shape (tree.py):
    # the node each draft hangs from (0: the last token); empty: a chain
    draft_alternatives: list = field(default_factory=list)  # the drafter's second choice at the
    # first positions, (token, q), where a tree may branch
    cut_proposals: list = field(default_factory=list)  # drafts cut before verification, until
    # the output decides them (drafting/cut_drafts.py)
    kept_nodes: list[int] = field(default_factory=list)  # after a tree pass: the fed indices
    # of the positions it verified (root first); empty: the first ones, in order
    pending_hidden: Optional[list] = None  # (n_i, H) hidden-state slices the lazy MTP has not consumed
    pending_bytes: int = 0  # their size, kept as they come (state bytes every pass)
    cached_tokens: int = 0  # prompt tokens served by the prefix cache
    prefix_offered: bool = False  # its prompt blocks were offered to the prefix cache
    token_ns: list[int] = field(default_factory=list)  # commit time of each output token, in order
    first_token_ns: int = 0
    done_ns: int = 0
    finish_reason: str = ""  # "eos" | "length", set with Status.FINISHED
    status: Status = Status.WAITING

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt)

    def clear_drafts(self) -> None:
        self.drafts, self.draft_probs, self.draft_conf = [], [], []
        self.draft_parents, self.draft_alternatives = [], []
        self.drafts_looked_up = False

    @property
    def num_output(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)

    @property
    def finished(self) -> bool:
        """Its last token is committed (it may not be retired yet)."""
        return self.status in (Status.FINISHED, Status.RETIRED)

    def finish(self, reason: str) -> None:
        self.finish_reason, self.status = reason, Status.FINISHED

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.prompt) :]
