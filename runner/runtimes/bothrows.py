"""Our engine behind the runtime interface: the path every measurement took before runtimes.

poll() is one Engine.step(); the only work added per pass is the call itself, and per
finished request one Finished (the executor built one row dict per request already).
Per-pass rows are the engine's PassEvents, buffered in memory during the cell. Per-token
times are the engine's own (RequestEvent.token_ns: each token's commit time), passed on
as they are.
"""

from __future__ import annotations

import random
from pathlib import Path

from runner.engine import Engine, PassEvent
from runner.engine.shelf import Shelf

from .base import WARMUP_NEW_TOKENS, Finished, Runtime


class PassBuffer:
    """The engine's sink during a timed cell: keeps PassEvents in memory, nothing else."""

    def __init__(self) -> None:
        self.passes: list[PassEvent] = []

    def __call__(self, event) -> None:
        if type(event) is PassEvent:
            self.passes.append(event)


class Bothrows(Runtime):
    name = "bothrows"

    def __init__(self, knobs: dict, checkpoint: Path, shelf: Shelf | None = None):
        self.engine = Engine.from_pretrained(checkpoint, shelf=shelf, **knobs)
        super().__init__(self.engine.config.as_dict(), checkpoint)
        self.buffer: PassBuffer | None = None

    def begin_cell(self) -> None:
        # Each cell starts with a cold prefix cache: otherwise a later cell would reuse the
        # prompts an earlier cell (same prompts, other concurrency or round) left behind.
        self.engine.clear_prefix_cache()
        self.buffer = PassBuffer()
        self.engine.sink = self.buffer

    def submit(self, prompt, max_new_tokens, temperature, seed) -> int:
        return self.engine.add_request(prompt, max_new_tokens, temperature=temperature, seed=seed)

    def busy(self) -> bool:
        return self.engine.has_work()

    def poll(self, wait_s=None) -> list[Finished]:
        # One pass, whatever wait_s says: the pass is the work an arrival waits for.
        return [
            Finished(
                ev.request_id,
                ev.prompt_tokens,
                ev.output_tokens,
                ev.cached_tokens,
                ev.arrival_ns,
                ev.first_token_ns,
                ev.done_ns,
                ev.tokens,
                ev.token_ns,
            )
            for ev in self.engine.step()
        ]

    def end_cell(self) -> list[PassEvent]:
        self.engine.sink = None
        passes, self.buffer = (self.buffer.passes if self.buffer else []), None
        return passes

    def warm_up(self, prompt_tokens, max_new_tokens, seed, max_context=0) -> None:
        """Compile every decode shape, then touch memory at width 1 and 2, at the workload's
        shortest and longest prompt, with random ids unrelated to the workload (so the
        warm-up caches no prefix of a timed prompt). Its events are dropped and the prefix
        cache is cleared afterwards."""
        engine = self.engine
        rng = random.Random(seed)
        vocab = engine.args.vocab_size
        prompts = [[rng.randrange(vocab) for _ in range(n)] for n in prompt_tokens]
        new_tokens = min(WARMUP_NEW_TOKENS, max_new_tokens)
        engine.sink = None
        # Trace every decode shape the workload can reach, so no timed pass pays for it.
        engine.warmup(max_context or max(prompt_tokens) + max_new_tokens)
        engine.generate(prompts[:1], max_new_tokens=new_tokens)
        engine.generate(prompts[: min(2, engine.config.max_batch_size)], max_new_tokens=new_tokens)
        engine.clear_prefix_cache()
