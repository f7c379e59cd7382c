"""mlx-lm's own generation, in this process, on the arm's checkpoint directory (mlx-lm
loads it and drops the MTP layer, as it does everywhere).

Without a draft model requests go through mlx-lm's continuous-batching BatchGenerator,
as mlx_lm.server drives it: completion and prefill batch sizes both max_batch_size (it
decodes max of the two), prefill_step_size = prefill_chunk, the tokenizer's EOS ids as
stop sequences. poll() is one BatchGenerator.next(); every token it returns is stamped
with the one clock reading taken after that call, so per-token times cost one list
append per token and change nothing in mlx-lm's loop. With a draft model, requests are
served one at a time by speculative_generate_step (mlx_lm.server does the same), one
token per poll. Per-pass rows are not taken: a BatchGenerator step mixes prefill and
decode in ways it does not report, so passes are absent, not made up. Sampling at
temperature > 0 draws from MLX's global generator: per-request seeds do not apply.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

from .base import Finished, Runtime
from .fair import package_version
from .knobs import draft_path


class _Live:
    __slots__ = ("handle", "prompt_tokens", "arrival_ns", "tokens", "times")

    def __init__(self, handle: int, prompt_tokens: int, arrival_ns: int):
        self.handle, self.prompt_tokens, self.arrival_ns = handle, prompt_tokens, arrival_ns
        self.tokens: list[int] = []
        self.times: list[int] = []

    def finished(self) -> Finished:
        return Finished(
            self.handle,
            self.prompt_tokens,
            len(self.tokens),
            0,
            self.arrival_ns,
            self.times[0],
            self.times[-1],
            tuple(self.tokens),
            tuple(self.times),
        )


class MlxLm(Runtime):
    name = "mlx-lm"
    runtime_version = package_version("mlx-lm")

    def __init__(self, knobs: dict, checkpoint: Path):
        super().__init__(knobs, checkpoint)
        from mlx_lm.utils import load

        self.model, self.tokenizer = load(str(checkpoint))
        self.eos = set(self.tokenizer.eos_token_ids)
        self.draft = load(str(draft_path(knobs["draft_model"])))[0] if knobs.get("draft_model") else None
        self.prefill_step = int(knobs["prefill_chunk"])
        self.live: dict[int, _Live] = {}
        self._next = 0
        if self.draft is None:
            from mlx_lm.generate import BatchGenerator

            self.gen = BatchGenerator(
                self.model,
                completion_batch_size=self.ceiling,
                prefill_batch_size=self.ceiling,
                prefill_step_size=self.prefill_step,
                stop_tokens=[[t] for t in sorted(self.eos)],
            )
        else:
            self.queue: deque = deque()  # (live, prompt, max_new_tokens, sampler)
            self.current = None  # (live, token iterator)

    @staticmethod
    def _sampler(temperature: float):
        if temperature <= 0:
            return None
        from mlx_lm.sample_utils import make_sampler

        return make_sampler(temp=temperature)

    def submit(self, prompt, max_new_tokens, temperature, seed) -> int:
        sampler = self._sampler(temperature)
        arrival = time.perf_counter_ns()
        if self.draft is None:
            (handle,) = self.gen.insert(
                [list(prompt)], [int(max_new_tokens)], samplers=None if sampler is None else [sampler]
            )
        else:
            handle = self._next
            self._next += 1
        live = self.live[handle] = _Live(handle, len(prompt), arrival)
        if self.draft is not None:
            self.queue.append((live, list(prompt), int(max_new_tokens), sampler))
        return handle

    def busy(self) -> bool:
        return bool(self.live)

    def poll(self, wait_s=None) -> list[Finished]:
        # One generator step, whatever wait_s says: that step is the work itself.
        return self._poll_batched() if self.draft is None else self._poll_draft()

    def _poll_batched(self) -> list[Finished]:
        _, responses = self.gen.next()
        now = time.perf_counter_ns()
        out = []
        for r in responses:
            live = self.live[r.uid]
            live.tokens.append(r.token)
            live.times.append(now)
            if r.finish_reason is not None:
                out.append(self.live.pop(r.uid).finished())
        return out

    def _poll_draft(self) -> list[Finished]:
        import mlx.core as mx
        from mlx_lm.generate import speculative_generate_step

        if self.current is None:
            if not self.queue:
                return []
            live, prompt, max_new, sampler = self.queue.popleft()
            steps = speculative_generate_step(
                mx.array(prompt),
                self.model,
                self.draft,
                num_draft_tokens=int(self.knobs["num_draft_tokens"]),
                max_tokens=max_new,
                sampler=sampler,
                prefill_step_size=self.prefill_step,
            )
            self.current = (live, steps)
        live, steps = self.current
        token = next(steps, None)
        now = time.perf_counter_ns()
        if token is not None:
            live.tokens.append(int(token[0]))
            live.times.append(now)
        if token is None or live.tokens[-1] in self.eos:
            steps.close()
            self.current = None
            return [self.live.pop(live.handle).finished()]
        return []

    def stop(self) -> None:
        gen = getattr(self, "gen", None)
        if gen is not None:
            gen.close()
            self.gen = None
        self.live.clear()
