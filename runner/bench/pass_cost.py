"""What a drafting pass costs against a plain one, by model depth: the number that
decides whether depth-1 MTP speculation can pay, before any acceptance rate.

A drafting pass verifies two tokens a row and runs the MTP layer and a second output
head; a plain pass runs one token. Speculation pays when the tokens a drafting pass
commits (1 + acceptance) exceed this cost ratio. The MTP layer and the head are a fixed
cost per pass, so the ratio falls as the main stack deepens. This measures it for the
shipped checkpoint's shape at several main-layer counts, on random weights (costs do
not depend on them), with passes queued back to back as the engine runs them.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

BLOCK_PASSES = 20  # passes timed in one block; blocks of the two shapes alternate
CONTEXT = 100  # positions already cached in each row


def _pass_fns(engine, rows: int):
    """(plain, drafting) closures that queue one pass of `rows` rows and return what to eval."""
    import mlx.core as mx
    import numpy as np

    from ..engine.layout import build_layout

    fw, pool = engine.forward, engine.pool
    blocks = [[pool.allocate() for _ in range(-(-(CONTEXT + 2) // pool.block_size))] for _ in range(rows)]

    def make(T: int, drafting: bool):
        lay = build_layout([CONTEXT] * rows, [T] * rows, blocks, pool.block_size)
        tokens = mx.zeros((lay.n_tokens,), mx.int32)
        out_index = mx.array(np.arange(rows * T, dtype=np.int32).reshape(rows, T))
        if not drafting:
            return lambda: [
                mx.argmax(fw.main(tokens, lay.ctx, out_index)[0], axis=-1),
                *[a for kv in pool.layers[:-1] for a in kv.arrays()],
            ]

        def draft():
            outs = fw.main_and_draft(
                tokens,
                lay.ctx,
                out_index,
                tokens,
                mx.arange(rows * T, dtype=mx.int32),
                mx.zeros((rows, 2), mx.int32),
                mx.zeros((rows,), mx.int32),
                mx.ones((rows,), mx.bool_),
                True,
            )
            return [o for o in outs[2:] if o is not None] + [a for kv in pool.layers for a in kv.arrays()]

        return draft

    return make(1, False), make(2, True)


def _time_blocks(fns: dict, blocks: int) -> dict:
    import mlx.core as mx

    times = {name: [] for name in fns}
    for f in fns.values():  # trace the compiled functions first
        mx.eval(f())
    for b in range(blocks):
        for name in list(fns) if b % 2 else list(fns)[::-1]:
            f = fns[name]
            t0 = time.perf_counter()
            for _ in range(BLOCK_PASSES):
                outs = f()
                mx.async_eval(outs)
            mx.eval(outs)
            times[name].append((time.perf_counter() - t0) / BLOCK_PASSES * 1e3)
    return times


def run(model: str, rounds: int, layer_counts: list[int]) -> None:
    from ..engine import Engine
    from ..engine.checkpoint import CheckpointError, resolve_checkpoint
    from ..train.random_init import write_random_checkpoint
    from .stats import machine_line

    try:  # a readable error for a bad checkpoint, before any work
        Engine.check_knobs(model, mtp=True)
    except ValueError as e:
        raise CheckpointError(str(e)) from None
    directory = resolve_checkpoint(model)
    config = json.loads((directory / "config.json").read_text())
    keep = {k: v for k, v in config.items() if k not in ("num_hidden_layers", "model_type", "eos_token_id")}
    print(machine_line())
    print(
        f"shape of {directory} with N main layers + 1 MTP layer, random weights; "
        f"{4 * rounds} alternating blocks of {BLOCK_PASSES} queued passes per shape, "
        f"rows at {CONTEXT} cached positions"
    )
    print(
        f"{'layers':>6} {'rows':>4} {'plain ms':>9} {'drafting ms':>12} {'drafting / plain':>22} "
        f"{'pays above':>11} {'1.3x needs':>11}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for n_layers in layer_counts:
            path = write_random_checkpoint(
                Path(tmp) / f"layers{n_layers}",
                seed=n_layers,
                with_indexer=False,
                **keep,
                num_hidden_layers=n_layers,
            )
            engine = Engine.from_pretrained(path, max_batch_size=4, mtp=True)
            for rows in (1, 4):
                plain, drafting = _pass_fns(engine, rows)
                t = _time_blocks({"plain": plain, "drafting": drafting}, 4 * rounds)
                ratios = sorted(a / b for a, b in zip(t["drafting"], t["plain"]))
                r = statistics.median(ratios)
                # acceptance a: a drafting pass commits 1 + a tokens a row for r plain passes' time
                print(
                    f"{n_layers:>6} {rows:>4} {statistics.median(t['plain']):>9.3f} "
                    f"{statistics.median(t['drafting']):>12.3f} "
                    f"{r:>7.2f}x [{ratios[0]:.2f}, {ratios[-1]:.2f}] {max(r - 1, 0):>11.0%} "
                    f"{(f'{1.3 * r - 1:.0%}' if 1.3 * r - 1 <= 1 else 'never'):>11}"
                )
