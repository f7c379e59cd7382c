"""One request's state inside the engine: its tokens, its blocks, its draft, its clocks.

Invariants after every pass (checked by tests): the main KV holds positions
0..computed-1 and computed == len(tokens) - 1 once prefill is done; the MTP KV holds
the pairs (h_i, x_{i+1}) for i < mtp_computed <= computed; token_ns holds one commit
time per output token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


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
    draft: Optional[int] = None  # proposal for tokens[len(tokens)], verified next pass
    draft_probs: Optional[np.ndarray] = None  # the draft distribution q (sampling only)
    pending_hidden: Optional[list] = None  # (n_i, H) hidden-state slices the lazy MTP has not consumed
    pending_bytes: int = 0  # their size, kept as they come (state bytes every pass)
    cached_tokens: int = 0  # prompt tokens served by the prefix cache
    prefix_offered: bool = False  # its prompt blocks were offered to the prefix cache
    token_ns: list[int] = field(default_factory=list)  # commit time of each output token, in order
    first_token_ns: int = 0
    done_ns: int = 0
    finish_reason: str = ""

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt)

    @property
    def num_output(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)

    @property
    def output(self) -> list[int]:
        return self.tokens[len(self.prompt) :]
