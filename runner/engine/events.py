"""What the engine reports: one PassEvent per forward pass, one RequestEvent per request.

Events go to an explicit sink passed in by the caller (any callable taking one event),
never to a global. The engine knows nothing about storage; the runner buffers them.
`Engine.collect` returns one generate() call's events as a `Collected`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Union


@dataclass(frozen=True, slots=True)
class PassEvent:
    """One forward pass of the target model over up to max_batch_size rows."""

    pass_index: int  # 0-based, per engine instance
    start_ns: int  # time.perf_counter_ns() when the pass started
    duration_ns: int  # wall time of the step() that committed it: schedule, forward,
    # verify, draft, retiring finished rows and prefix-cache eviction;
    # with pipelining also launching the next pass (while this one
    # runs), and not this pass's own launch when it was queued ahead
    kind: str  # "prefill" | "decode" | "mixed"
    width: int  # rows in this pass
    prefill_tokens: int  # prompt tokens computed in this pass
    decode_tokens: int  # tokens fed for decode rows (1 per row, 1 + k with k drafts)
    drafted: int  # draft tokens rows carried into this pass (at k = 1: rows that drafted)
    accepted: int  # drafts accepted in this pass
    emitted: int  # tokens committed to outputs in this pass
    state_bytes: int  # per-row state (KV, indexer keys, MTP KV) summed over live rows
    max_row_state_bytes: int  # largest single row's state in this pass
    accepted_lengths: tuple[int, ...] = ()  # [m]: drafting rows that kept m of their drafts
    # (accepted length m, 0..k; empty: no row drafted)
    draft_lengths: tuple[int, ...] = ()  # [k]: drafting rows that carried k drafts (same
    # rows: acceptance at position i is sum(accepted_lengths[i:]) / sum(draft_lengths[i:]))
    draft_reason: str = ""  # under the adaptive policy, why its rows carried those drafts:
    # the k chosen for the width and, when cut row by row from the drafter's confidence
    # (row_lengths.py), the cut; and how many rows looked their drafts up (drafting/lookup.py);
    # empty under a fixed policy without lookup

    @classmethod
    def of(
        cls, index: int, plan, t0: int, duration: int, done, row_bytes: list[int], reason: str
    ) -> PassEvent:
        """The event of a committed pass: its plan (scheduler.PassPlan), what its commit
        did (drafting/verify.PassCommit) and each live row's state bytes after it."""
        return cls(
            index,
            t0,
            duration,
            plan.kind,
            len(plan.rows),
            plan.prefill_tokens,
            plan.decode_tokens,
            sum(plan.drafted),
            done.accepted,
            done.emitted,
            sum(row_bytes),
            max(row_bytes),
            done.accepted_lengths,
            done.draft_lengths,
            reason,
        )


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A finished request."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    arrival_ns: int  # when add_request was called (perf_counter_ns clock)
    first_token_ns: int  # when its first output token was committed
    done_ns: int  # when its last output token was committed (it finished)
    finish_reason: str  # "length" | "eos"
    cached_tokens: int  # prompt tokens served by the prefix cache
    tokens: tuple[int, ...]  # the generated token ids, prompt excluded
    token_ns: tuple[int, ...]  # when each of them was committed: the commit phase of the step
    # that committed its pass (a draft and its bonus share one time);
    # token_ns[0] == first_token_ns, token_ns[-1] == done_ns


Event = Union[PassEvent, RequestEvent]
EventSink = Callable[[Event], None]


class Collected(NamedTuple):
    """One generate() call's outputs and the events it sent, by kind, in order."""

    outputs: list[list[int]]
    passes: list[PassEvent]
    requests: list[RequestEvent]
