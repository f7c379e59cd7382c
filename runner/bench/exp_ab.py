"""`runner bench --exp`: what computing exp from fused arithmetic (engine/layers/fast_math.py)
saves in the passes a drafting run computes, against MLX's own exp.

Two engines load the checkpoint side by side; one traces its passes inside
`fast_math.mlx_functions()`. Each shape's passes then alternate between the two, one pass
each in turn (which goes first flips every pass), rows at CONTEXT cached positions: a plain
pass and verify passes of 4 and 8 drafts, at one row and at four, and, with a block
drafter, its pass of 8 drafts for one row and for four. The figure is the paired ratio
(fused / MLX) of the two passes timed side by side, its median and spread.
"""

from __future__ import annotations

import statistics
import time

CONTEXT = 128  # positions already cached in each row
PASSES = 20  # passes of each shape and engine a round
SHAPES = ((1, 1), (1, 5), (1, 9), (4, 1), (4, 9))  # (rows, tokens a row)
DRAFTS = 8


def _target_pass(engine, rows: int, tokens_a_row: int):
    """A closure that runs one pass of `rows` rows, each feeding `tokens_a_row` tokens."""
    import mlx.core as mx
    import numpy as np

    from ..engine.layout import build_layout

    fw, pool = engine.forward, engine.pool
    per_row = -(-(CONTEXT + tokens_a_row) // pool.block_size)
    blocks = [[pool.allocate() for _ in range(per_row)] for _ in range(rows)]
    lay = build_layout([CONTEXT] * rows, [tokens_a_row] * rows, blocks, pool.block_size)
    rng = np.random.default_rng(rows * 100 + tokens_a_row)  # routed as text is, not all alike
    tokens = mx.array(rng.integers(1, engine.args.vocab_size, lay.n_tokens).astype(np.int32))
    out_index = mx.array(np.array([[f + i for i in range(tokens_a_row)] for f in lay.first], np.int32))
    return lambda: mx.eval(*fw.main(tokens, lay.ctx, out_index))


def _drafter_pass(engine, rows: int):
    """A closure that runs the block drafter's pass of DRAFTS drafts for `rows` rows."""
    import mlx.core as mx

    drafting = engine.drafter
    ids = [-(r + 1) for r in range(rows)]
    for rid in ids:
        drafting.cache.drop(rid)
        drafting.cache.append(rid, mx.random.normal((CONTEXT, drafting.drafter.cfg.feature_width)), 0)
    drafting.cache.settle(ids)
    ctx, lens, ends = drafting.cache.gather(ids)
    anchors = mx.ones((rows,), mx.int32)
    propose = drafting.proposer(DRAFTS)
    return lambda: mx.eval(*propose(ctx, lens, anchors, ends))


def _passes(engine, with_drafter: bool) -> dict:
    per_row = -(-(CONTEXT + max(t for _, t in SHAPES)) // engine.pool.block_size)
    engine.pool.reserve(1 + sum(r for r, _ in SHAPES) * per_row)  # no pool growth between traces
    fns = {
        f"{r} row{'s' if r > 1 else ''} x {t} token{'s' if t > 1 else ''}": _target_pass(engine, r, t)
        for r, t in SHAPES
    }
    if with_drafter:
        for rows in (1, 4):
            fns[f"drafter, {rows} row{'s' if rows > 1 else ''} x {DRAFTS} drafts"] = _drafter_pass(
                engine, rows
            )
    for f in fns.values():  # traced here, inside the caller's mlx_functions() or not
        f()
    return fns


def run(model: str, rounds: int) -> None:
    from ..engine import Engine
    from ..engine.layers import fast_math
    from ..engine.shelf import Shelf
    from .stats import machine_line, ratio_deciles

    knobs = dict(max_batch_size=4, prefill_chunk=256, prefix_cache_bytes=0, index_topk=0, mtp=True)
    Engine.check_knobs(model, **knobs)  # a bad checkpoint: one line from `runner bench`
    try:
        Engine.check_knobs(model, drafter="block", **knobs)
        knobs["drafter"] = "block"
    except ValueError:
        pass  # no block drafter: target passes only
    engines, block = {}, "drafter" in knobs
    with fast_math.mlx_functions():
        engines["mlx"] = _passes(Engine.from_pretrained(model, shelf=Shelf(), **knobs), block)
    engines["fused"] = _passes(Engine.from_pretrained(model, shelf=Shelf(), **knobs), block)
    print(machine_line())
    print(
        f"checkpoint {model}: each shape's passes alternate between an engine tracing MLX's exp and one "
        f"tracing fast_math's, {rounds} round{'s' if rounds > 1 else ''} of {PASSES} pairs, "
        f"rows at {CONTEXT} cached positions"
    )
    print(f"{'pass':<28} {'MLX exp ms':>10} {'fused ms':>9}  fused / MLX, paired: median [p10, p90]")
    for shape in engines["mlx"]:
        times = {"mlx": [], "fused": []}
        for i in range(rounds * PASSES):
            for name in ("mlx", "fused") if i % 2 else ("fused", "mlx"):
                t0 = time.perf_counter_ns()
                engines[name][shape]()
                times[name].append((time.perf_counter_ns() - t0) / 1e6)
        mlx_ms, fused_ms = statistics.median(times["mlx"]), statistics.median(times["fused"])
        print(f"{shape:<28} {mlx_ms:>10.2f} {fused_ms:>9.2f}  {ratio_deciles(times['fused'], times['mlx'])}")
