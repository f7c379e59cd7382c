"""After a pass: offering prompt blocks to the prefix cache, and retiring finished rows.

- A row's prompt blocks are offered once, when every position in them is verified: the
  main KV (`computed`) and any drafter state kept in the same blocks. Drafted positions
  are past `computed`, so the prefix cache never holds one.
- A finished row is retired: its blocks go back to the pool, the drafter forgets it, and
  its RequestEvent is built.
"""

from __future__ import annotations

from typing import Optional

from .drafting.drafter import Drafter
from .events import RequestEvent
from .prefix_cache import PrefixCache
from .scheduler import Scheduler
from .sequence import Sequence, Status


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
