"""What the engine reports: one PassEvent per forward pass, one RequestEvent per request.

Events go to an explicit sink passed in by the caller (any callable taking one event),
never to a global. The engine knows nothing about storage; the runner buffers them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union


@dataclass(frozen=True, slots=True)
class PassEvent:
    """One forward pass of the target model over up to max_batch_size rows."""

    pass_index: int          # 0-based, per engine instance
    start_ns: int            # time.perf_counter_ns() when the pass started
    duration_ns: int         # wall time of schedule + forward + verify + draft
    kind: str                # "prefill" | "decode" | "mixed"
    width: int               # rows in this pass
    prefill_tokens: int      # prompt tokens computed in this pass
    decode_tokens: int       # tokens fed for decode rows (1 per row, 2 with a draft)
    drafted: int             # rows that carried a draft into this pass
    accepted: int            # drafts accepted in this pass
    emitted: int             # tokens committed to outputs in this pass
    state_bytes: int         # per-row state (KV, indexer keys, MTP KV) summed over live rows
    max_row_state_bytes: int # largest single row's state in this pass


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """A finished request."""

    request_id: int
    prompt_tokens: int
    output_tokens: int
    arrival_ns: int          # when add_request was called (perf_counter_ns clock)
    first_token_ns: int      # when its first output token was committed
    done_ns: int             # when it finished
    finish_reason: str       # "length" | "eos"
    cached_tokens: int       # prompt tokens served by the prefix cache
    tokens: tuple[int, ...]  # the generated token ids, prompt excluded


Event = Union[PassEvent, RequestEvent]
EventSink = Callable[[Event], None]
