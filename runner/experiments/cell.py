"""What one cell hands the store, and the rule that sizes it; shared by the closed-loop
driver (closed_loop.run_cell) and the open-loop one (openloop.py).

A finished request becomes one request row (times relative to the cell's t0) plus its
per-token times (token_ns: when each output token arrived, the tokens table's rows;
None when the runtime cannot tell, which is stored as no rows, never as zeros). A request
that errored is a row too, with its error, no first token and done_ns when it failed. Rows are
kept with the runtime's raw perf_counter_ns readings while the cell runs and made
cell-relative once it has ended (close()), so the loop that is being timed does as little
as it can. This module runs nothing and knows nothing about the store's tables beyond
the column names.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from runner.experiments.declaration import Workload
from runner.runtimes import Finished

IN_MEMORY_ONLY = ("token_ns",)  # request-row keys that go to the tokens table, not requests


def output_sha256(tokens) -> str:
    return hashlib.sha256(",".join(str(t) for t in tokens).encode()).hexdigest()


def request_seed(seed: int, request_id: int) -> int:
    return (seed * 1_000_003 + request_id) % (2**31)


def needs_more(w: Workload, sent: int, elapsed_ns: int, tokens: int, least: int | None = None) -> bool:
    """Whether another request (closed loop: a client that has sent `sent`; open loop: the
    cell, `sent` counting arrivals or script plays against `least`) is sent when the cell
    has run `elapsed_ns` since its t0 and its finished requests hold `tokens` output tokens."""
    least = w.requests_per_client if least is None else least
    return sent < least or elapsed_ns < w.min_cell_seconds * 1e9 or tokens < w.min_cell_tokens


@dataclass
class CellRows:
    requests: list[dict] = field(default_factory=list)
    passes: list[dict] | None = field(default_factory=list)  # None: the runtime has none

    @property
    def output_tokens(self) -> int:
        return sum(r["output_tokens"] for r in self.requests)

    def add(
        self,
        ev: Finished,
        request_id: int,
        client: int,
        arrival_ns: int | None = None,
        label: str | None = None,
        asked_tokens: int | None = None,
    ) -> None:
        """A finished request, its times still raw (perf_counter_ns). `arrival_ns` replaces
        the runtime's submit time: an open-loop request arrived when its schedule said,
        however long it then waited for a free slot. `asked_tokens`: the max_new_tokens it
        was sent with (fewer output tokens: it came back short)."""
        self.requests.append(
            {
                "request_id": request_id,
                "client": client,
                "label": label,
                "prompt_tokens": ev.prompt_tokens,
                "output_tokens": ev.output_tokens,
                "cached_tokens": ev.cached_tokens,
                "arrival_ns": ev.arrival_ns if arrival_ns is None else arrival_ns,
                "first_token_ns": ev.first_token_ns,
                "done_ns": ev.done_ns,
                "output_sha256": None if ev.tokens is None else output_sha256(ev.tokens),
                "token_ns": ev.token_ns,
                "asked_tokens": asked_tokens,
                "error": ev.error,
            }
        )

    def close(self, t0: int, passes: list | None) -> "CellRows":
        """Make every time relative to t0, take the cell's passes, order rows by request id."""
        for row in self.requests:
            row["arrival_ns"] -= t0
            if row["first_token_ns"] is not None:  # None: the request errored
                row["first_token_ns"] -= t0
            row["done_ns"] -= t0
            times = row["token_ns"]
            row["token_ns"] = None if times is None else tuple(t - t0 for t in times)
        self.passes = (
            None
            if passes is None
            else [
                {
                    "pass_index": p.pass_index,
                    "start_ns": p.start_ns - t0,
                    "duration_ns": p.duration_ns,
                    "kind": p.kind,
                    "width": p.width,
                    "prefill_tokens": p.prefill_tokens,
                    "decode_tokens": p.decode_tokens,
                    "drafted": p.drafted,
                    "accepted": p.accepted,
                    "emitted": p.emitted,
                    "state_bytes": p.state_bytes,
                    "max_row_state_bytes": p.max_row_state_bytes,
                    "accepted_lengths": list(p.accepted_lengths),
                    "draft_lengths": list(p.draft_lengths),
                    "draft_reason": p.draft_reason or None,
                }
                for p in passes
            ]
        )
        self.requests.sort(key=lambda r: r["request_id"])
        return self

    def stored_requests(self) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in IN_MEMORY_ONLY} for r in self.requests]

    def stored_tokens(self) -> dict[int, tuple[int, ...]]:
        """request_id -> its tokens' cell-relative times, for the requests that have them."""
        return {r["request_id"]: r["token_ns"] for r in self.requests if r["token_ns"] is not None}
