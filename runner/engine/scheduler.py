"""Which rows run in the next pass and what each feeds: admission and chunking.

Admission is first come, first served under max_batch_size. A prefilling row feeds its
next chunk of at most prefill_chunk prompt tokens; a decoding row feeds its last token,
plus its draft when the pass drafts. How the pass's tokens are then laid out for the
model is layout.py's job.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .cache import BlockPool
from .prefix_cache import PrefixCache
from .sequence import Sequence


@dataclass
class PassPlan:
    rows: list[Sequence]
    feeds: list[list[int]]      # tokens fed per row
    drafted: list[bool]         # row carries a draft (its last fed token)
    prefill_tokens: int
    decode_tokens: int
    feeds_in_graph: bool = False  # feeds are zeros of the right lengths: the tokens are the
                                  # previous pass's outputs, still in the graph (lookahead.py)

    @property
    def kind(self) -> str:
        has_p, has_d = self.prefill_tokens > 0, self.decode_tokens > 0
        return "mixed" if has_p and has_d else ("prefill" if has_p else "decode")


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
