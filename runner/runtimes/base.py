"""The one interface the runner drives every runtime through, and what it hands back.

A Runtime is started for one arm (`runner.runtimes.start`), warmed up once outside any
cell's clock, then for each cell: `begin_cell()`, `submit()` a request per closed-loop
client or at each open-loop arrival (also while others are in flight), `poll()` while
`busy()` (each call makes progress and returns the requests that finished, with their
times on the perf_counter_ns clock; `poll(wait_s)` bounds how long a runtime that only
waits, a server's, may block, so an open-loop arrival is submitted on time; a runtime
that computes in poll() does one step of work and returns), `end_cell()` for the cell's
per-pass rows (None: this runtime cannot give them, which is stored as no rows, never as
zero rows of zeros). `stop()` releases it (a server the runner started is stopped).

A fault of the runtime (a server not reachable, dead, answering HTTP errors or going
quiet) is a RuntimeFault carrying one readable line; it costs the cell, never the run.
This module knows nothing about experiments or the store.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

WARMUP_NEW_TOKENS = 8


class RuntimeFault(Exception):
    """A runtime failed in a way that costs one cell: the message is one line naming the
    runtime, where it runs (its base_url) and what happened."""


class RequestFault(RuntimeFault):
    """One request failed (an HTTP error, a broken or stalled stream) while its server
    stayed reachable: it is stored as an errored request, and the cell goes on."""


@dataclass(frozen=True, slots=True)
class Finished:
    """One finished request, as any runtime reports it; an errored one has `error` (what
    happened), no first token (first_token_ns None) and done_ns when it failed."""

    handle: int  # what submit() returned
    prompt_tokens: int  # as the runtime counted them (a server's usage figures)
    output_tokens: int
    cached_tokens: int | None  # prompt tokens served from a cache; None: not reported
    arrival_ns: int  # when submit() was called
    first_token_ns: int | None
    done_ns: int
    tokens: tuple[int, ...] | None  # the output ids; None when the runtime sends only text
    token_ns: tuple[int, ...] | None  # when each output token arrived; None: cannot tell
    error: str | None = None  # the request failed: why (a RequestFault's message)


class Runtime:
    """Base class: the generic warm-up, and no per-pass rows unless a runtime has them."""

    name = "runtime"
    # The package it runs on, e.g. "mlx-lm 0.32.2" (None: our engine, whose version is the
    # run's code_version), stored with each run (runs.runtime_version).
    runtime_version: str | None = None

    def __init__(self, knobs: dict, checkpoint: Path):
        self.knobs = knobs  # stored as the run's knobs JSON
        self.checkpoint = checkpoint
        self.ceiling = int(knobs["max_batch_size"])

    def server_version(self) -> str | None:
        """The version a server reports for itself (runs.server_version); None: no server,
        or it reported none. Asked after warm-up, when a server has answered requests."""
        return None

    def where(self) -> str:
        """How fault lines name this runtime, e.g. 'openai at http://127.0.0.1:8080/v1'."""
        return f"{self.name} (in-process)"

    # -- the cell protocol -------------------------------------------------------
    def begin_cell(self) -> None:
        """Before a timed cell: start it cold and start collecting its passes."""

    def submit(self, prompt: list[int], max_new_tokens: int, temperature: float, seed: int) -> int:
        raise NotImplementedError

    def busy(self) -> bool:
        raise NotImplementedError

    def poll(self, wait_s: float | None = None) -> list[Finished]:
        """Make progress; the requests that finished. `wait_s`: the longest this call may
        wait for a finish when it has no work of its own to do (None: its own default)."""
        raise NotImplementedError

    def end_cell(self) -> list | None:
        """The cell's PassEvents (runner.engine.PassEvent), or None: not measured here."""
        return None

    def stop(self) -> None:
        """Release everything this runtime holds; safe to call twice."""

    # -- outside the clock ---------------------------------------------------------
    def warm_up(
        self, prompt_tokens: tuple[int, int], max_new_tokens: int, seed: int, max_context: int = 0
    ) -> None:
        """(max_context: the longest context a cell reaches, for runtimes that trace shapes.)
        One request, then min(2, ceiling) together, at the workload's shortest and longest
        prompt, of random ids unrelated to the workload (so nothing a cell sends is cached)."""
        rng = random.Random(seed)
        vocab = json.loads((self.checkpoint / "config.json").read_text())["vocab_size"]
        prompts = [[rng.randrange(vocab) for _ in range(n)] for n in prompt_tokens]
        new_tokens = min(WARMUP_NEW_TOKENS, max_new_tokens)
        for batch in (prompts[:1], prompts[: min(2, self.ceiling)]):
            for p in batch:
                self.submit(p, new_tokens, 0.0, seed)
            while self.busy():
                self.poll()
