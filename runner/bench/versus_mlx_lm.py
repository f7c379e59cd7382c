"""This engine vs mlx-lm on the same checkpoint and machine, interleaved per round."""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from ..engine import Engine
from .stats import machine_line, ratio_spread, spread


def _prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(10, vocab - 10, length).tolist() for _ in range(n)]


def ours(engine: Engine, prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    """-> (decode tok/s aggregated over the batch, prefill tok/s)."""
    reqs = engine.collect(prompts, new_tokens).requests
    first = min(r.first_token_ns for r in reqs)
    done = max(r.done_ns for r in reqs)
    decoded = sum(r.output_tokens - 1 for r in reqs)
    prefill = sum(r.prompt_tokens for r in reqs) / ((first - min(r.arrival_ns for r in reqs)) / 1e9)
    return decoded / ((done - first) / 1e9), prefill


def theirs(model, prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    from mlx_lm.generate import BatchGenerator, generate_step

    t0 = time.perf_counter()
    if len(prompts) == 1:
        steps = generate_step(mx.array(prompts[0]), model, max_tokens=new_tokens)
        next(steps)
        t1 = time.perf_counter()
        n = sum(1 for _ in steps)
    else:
        gen = BatchGenerator(model, stop_tokens=[])
        gen.insert(prompts, [new_tokens] * len(prompts))
        t1, n = None, 0
        while responses := gen.next_generated():
            if t1 is None:
                t1, n = time.perf_counter(), n - len(responses)
            n += len(responses)
        gen.close()
    t2 = time.perf_counter()
    return n / (t2 - t1), sum(map(len, prompts)) / (t1 - t0)


def best(repeats: int, measure, *args) -> tuple[float, float]:
    """Per figure, the fastest of `repeats` back-to-back runs."""
    runs = [measure(*args) for _ in range(repeats)]
    return max(r[0] for r in runs), max(r[1] for r in runs)


def run(model_path: str, rounds: int, new_tokens: int, repeats: int = 1) -> None:
    from mlx_lm.utils import load_model

    engine = Engine.from_pretrained(model_path, max_batch_size=4, prefill_chunk=512)
    ref, _ = load_model(engine.checkpoint_dir)
    vocab = engine.args.vocab_size
    cases = {"decode b=1": (1, 64), "decode b=4": (4, 64), "prefill 512": (1, 512)}
    results = {(sys, c): [] for sys in ("ours", "mlx-lm") for c in cases}
    for r, warm in enumerate((True,) + (False,) * rounds):
        for case, (n, length) in cases.items():
            prompts = _prompts(n, length, vocab, seed=len(results[("ours", case)]))
            tokens = 2 if case.startswith("prefill") else new_tokens
            if r % 2:  # alternate which system runs first in a round
                b = best(repeats, theirs, ref, prompts, tokens)
                a = best(repeats, ours, engine, prompts, tokens)
            else:
                a = best(repeats, ours, engine, prompts, tokens)
                b = best(repeats, theirs, ref, prompts, tokens)
            if not warm:
                pick = 1 if case.startswith("prefill") else 0
                results[("ours", case)].append(a[pick])
                results[("mlx-lm", case)].append(b[pick])
    print(machine_line())
    n_params = sum(v.size for _, v in tree_flatten(engine.model.parameters()))
    print(
        f"checkpoint: {engine.checkpoint_dir} ({n_params / 1e6:.2f}M params), "
        f"{rounds} interleaved rounds (fastest of {repeats} runs each), {new_tokens} new tokens per sequence"
    )
    print(f"{'case':<12} {'ours tok/s':>26} {'mlx-lm tok/s':>26} {'ours / mlx-lm':>22}")
    for case in cases:
        a, b = results[("ours", case)], results[("mlx-lm", case)]
        print(f"{case:<12} {spread(a):>26} {spread(b):>26} {ratio_spread(a, b):>22}")
