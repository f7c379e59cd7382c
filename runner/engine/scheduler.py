"""Which rows run in the next pass and what each feeds: admission and chunking.

Admission is first come, first served under max_batch_size. With prefill_hold, requests
that find a free slot while rows are decoding wait up to that many passes: prompts that
arrive apart (rows that drafted finish apart) then prefill together once the decoding
rows finish, in a pass that stalls nobody, instead of one by one beside them, each a
stall for every decoding row. A decoding row feeds its
last token, plus its drafts when the pass drafts; a prefilling row feeds its next chunk
of at most prefill_chunk prompt tokens. Under a per-pass token budget (max_pass_tokens)
decode rows go first and all run, even past the budget, so that a long prompt never
stalls the rows already decoding (Sarathi-Serve's stall-free batching); prefill rows then
share what is left, in admission order, and a prefill row that gets nothing sits the
pass out. A pass without decode rows always prefills (the budget is at least one
token). How the pass's tokens are then laid out for the model is layout.py's job.

After a pass (`retire_finished`): a row's prompt blocks are offered to the prefix cache
once, when every position in them is verified (the main KV, `computed`, and any drafter
state kept in the same blocks; drafted positions are past `computed`, so the prefix cache
never holds one); a finished row is retired: its blocks go back to the pool, the drafter
forgets it, and its RequestEvent is built.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

from .cache import BlockPool
from .drafting.drafter import Drafter
from .events import RequestEvent
from .prefix_cache import PrefixCache
from .sequence import Sequence, Status


@dataclass
class PassPlan:
    rows: list[Sequence]
    feeds: list[list[int]]  # tokens fed per row
    drafted: list[int]  # drafts the row carries (its last fed tokens; 0: none)
    prefill_tokens: int
    decode_tokens: int
    feeds_in_graph: bool = False  # feeds are zeros of the right lengths: the tokens are the
    # previous pass's outputs, still in the graph (Launcher.launch_ahead)

    @property
    def kind(self) -> str:
        has_p, has_d = self.prefill_tokens > 0, self.decode_tokens > 0
        return "mixed" if has_p and has_d else ("prefill" if has_p else "decode")


class Scheduler:
    def __init__(
        self,
        max_batch_size: int,
        prefill_chunk: int,
        pool: BlockPool,
        prefix: PrefixCache,
        max_pass_tokens: int = 0,
        prefill_hold: int = 0,
    ):
        self.max_batch_size, self.prefill_chunk = max_batch_size, prefill_chunk
        self.max_pass_tokens = max_pass_tokens  # 0: no budget
        self.prefill_hold = prefill_hold  # passes (0: admit at once)
        self.hold_from: Optional[int] = None  # the pass a hold of the waiting requests began
        self.pool, self.prefix = pool, prefix
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def admit(self, pass_index: int = 0) -> None:
        """Move waiting requests into free slots, unless held (`pass_index`: the pass about
        to be planned, which a hold counts in)."""
        if self._holds(pass_index):
            return
        self.hold_from = None
        while self.waiting and len(self.running) < self.max_batch_size:
            seq = self.waiting.popleft()
            seq.status = Status.RUNNING
            seq.blocks = self.prefix.match(seq.prompt)
            seq.computed = seq.mtp_computed = seq.cached_tokens = len(seq.blocks) * self.pool.block_size
            self.running.append(seq)

    def _holds(self, pass_index: int) -> bool:
        """Whether the waiting requests sit this pass out: a slot is free, rows are decoding
        (a prompt now would stall them) and the hold has lasted under prefill_hold passes."""
        if not (self.prefill_hold and self.waiting and len(self.running) < self.max_batch_size):
            return False
        if all(s.prefilling for s in self.running):
            return False  # nobody to stall: prefill now
        if self.hold_from is None:
            self.hold_from = pass_index
        return self.holds_at(pass_index)

    def holds_at(self, pass_index: int) -> bool:
        """Whether the hold under way (if any) still keeps the waiting requests out of pass
        `pass_index`, while rows go on decoding."""
        return self.hold_from is not None and pass_index - self.hold_from < self.prefill_hold

    def plan(self, use_drafts: bool) -> PassPlan:
        """The next pass: every decode row, then the prefill chunks the budget leaves room
        for; rows keep their admission order."""
        feeds: list = [None] * len(self.running)  # None: the row sits this pass out
        n_decode = n_prefill = 0
        for i, seq in enumerate(self.running):
            if not seq.prefilling:
                if not use_drafts:
                    seq.clear_drafts()
                feeds[i] = [seq.tokens[-1], *seq.drafts]
                n_decode += len(feeds[i])
        left = self.max_pass_tokens - n_decode if self.max_pass_tokens else None  # None: no budget
        for i, seq in enumerate(self.running):
            if seq.prefilling and (left is None or left > 0):
                n = self.prefill_chunk if left is None else min(self.prefill_chunk, left)
                feeds[i] = seq.tokens[seq.computed : seq.computed + n]
                n_prefill += len(feeds[i])
                left = None if left is None else left - len(feeds[i])
        rows = [s for s, f in zip(self.running, feeds) if f is not None]
        feeds = [f for f in feeds if f is not None]
        for seq, feed in zip(rows, feeds):
            self.ensure_blocks(seq, seq.computed + len(feed))
        drafted = [0 if s.prefilling else len(f) - 1 for s, f in zip(rows, feeds)]
        return PassPlan(rows, feeds, drafted, n_prefill, n_decode)

    def ensure_blocks(self, seq: Sequence, n_positions: int) -> None:
        while len(seq.blocks) * self.pool.block_size < n_positions:
            seq.blocks.append(self.pool.allocate())

    def release(self, seq: Sequence) -> None:
        """Retire a finished row: its blocks go back to the pool."""
        seq.status = Status.RETIRED
        self.running.remove(seq)
        for b in seq.blocks:
            self.pool.release(b)
        seq.blocks = []
        seq.pending_hidden, seq.pending_bytes = None, 0
        seq.clear_drafts()


def retire_finished(
    rows: list[Sequence], prefix: PrefixCache, scheduler: Scheduler, drafter: Optional[Drafter]
) -> list[RequestEvent]:
    done = []
    for seq in rows:
        if seq.status is Status.RETIRED:  # after an earlier pass (this one was queued)
            continue
        valid = seq.computed if drafter is None else min(seq.computed, drafter.verified_in_pool(seq))
        if not seq.prefix_offered and (valid >= len(seq.prompt) or seq.finished):
            prefix.insert(seq.prompt, seq.blocks, valid)
            seq.prefix_offered = True
        if seq.finished:
            seq.done_ns = seq.token_ns[-1]  # done when its last token was committed
            scheduler.release(seq)
            if drafter is not None:
                drafter.release(seq)
            done.append(request_event(seq))
    return done


def request_event(seq: Sequence) -> RequestEvent:
    return RequestEvent(
        seq.request_id,
        len(seq.prompt),
        seq.num_output,
        seq.arrival_ns,
        seq.first_token_ns,
        seq.done_ns,
        seq.finish_reason,
        seq.cached_tokens,
        tuple(seq.output),
        tuple(seq.token_ns),
    )
