"""Tracing every compiled shape a run can hit before it is timed, then (adaptive) timing
each draft length's passes (drafting/calibrate.py).

First-time tracing otherwise lands inside timed passes. The pool is first grown to what
full rows and a full prefix cache can hold. Every trace writes the scratch block only.
"""

from __future__ import annotations

import mlx.core as mx

from .drafting.calibrate import calibrate
from .drafting.tree import tree_layout
from .forward import Forward
from .layout import block_buckets_upto, build_layout


def warm_engine(engine, max_context: int) -> int:
    """For an Engine: compile every decode shape that contexts up to `max_context` tokens can hit; then,
    under the adaptive policy, time each draft length's passes at every width. Returns
    shapes traced."""
    config, forward, drafter = engine.config, engine.forward, engine.drafter
    if not config.compile:
        return 0
    ks = engine.policy.carried_lengths() if drafter is not None else ()
    rows = config.max_batch_size
    reach = 3 + max(ks, default=0) + config.draft_tree  # the most a pass adds to a row
    max_blocks = -(-(max_context + reach) // engine.pool.block_size)
    cached = config.prefix_cache_bytes // engine.pool.block_bytes
    engine.pool.reserve(1 + rows * (max_blocks + 1) + cached)
    traced = sum(warm_passes(forward, rows, max_blocks, 1 + k, config.mtp_layer) for k in ks or (0,))
    if forward.feature_layers and engine.policy.weighs_step:  # rows kept in step run without features
        traced += warm_passes(forward, rows, max_blocks, 1, False, features=False)
    if config.draft_tree:
        leaves = range(1, config.draft_tree + 1)
        traced += warm_trees(forward, max_blocks, sorted({1 + k + e for k in ks if k for e in leaves}))
    traced += drafter.warm(rows, max_context, ks) if drafter is not None else 0
    if drafter is not None:  # the adaptive policy starts from this machine's costs
        calibrate(
            forward,
            engine.policy,
            drafter,
            rows,
            max(max_context // 2, 1),
            engine.args.vocab_size,
            engine.pool.block_size,
        )
    return traced


def warm_passes(
    forward: Forward,
    max_rows: int,
    max_blocks: int,
    verify_tokens: int,
    with_mtp: bool,
    features: bool = True,
) -> int:
    """Trace the compiled functions for every decode shape (rows x tokens per row x read
    width) for rows of up to max_blocks blocks: plain rows feed 1 token, drafting rows
    verify_tokens (1 + k; 1: the engine does not draft). with_mtp: the MTP layer's shapes
    too (fused at k = 1, a chained step a row at k > 1); features False: the graphs
    without the drafter's features. Returns how many were traced."""
    bs, traced, T = forward.pool.block_size, 0, verify_tokens
    for n_blocks in block_buckets_upto(max_blocks):
        blocks = [0] * n_blocks
        for B in range(1, max_rows + 1):
            for n_long in range(B + 1) if T > 1 else (0,):
                lens = [T] * n_long + [1] * (B - n_long)
                uniform = T > 2 and n_long == B  # Launcher runs these unpadded
                lay = build_layout(
                    [max(n_blocks * bs - T, 0)] * B, lens, [blocks] * B, bs, t_cap=1 if uniform else None
                )
                K = T if n_long else 1
                zeros = mx.zeros((lay.n_tokens,), mx.int32)
                outs = [
                    o
                    for o in forward.main(zeros, lay.ctx, mx.zeros((B, K), mx.int32), False, features)
                    if o is not None
                ]
                if with_mtp:
                    step = build_layout([max(n_blocks * bs - 2, 0)] * B, [1] * B, [blocks] * B, bs)
                    outs.extend(_warm_mtp(forward, outs[1], zeros, lay, step, B, K))
                mx.eval(outs)
                traced += 1
    return traced


def warm_trees(forward: Forward, max_blocks: int, sizes: list[int]) -> int:
    """Trace one row verifying a draft tree of each of `sizes` tokens (tree_layout), for
    rows of up to max_blocks blocks. Returns how many shapes were traced."""
    bs, traced = forward.pool.block_size, 0
    for n_blocks in block_buckets_upto(max_blocks):
        for T in sizes:
            parents = list(range(T - 2)) + [0]  # a chain and a leaf: the graph keys on T only
            lay = tree_layout(max(n_blocks * bs - T, 0), parents, [0] * n_blocks, bs)
            mx.eval(forward.main(mx.zeros((T,), mx.int32), lay.ctx, mx.arange(T, dtype=mx.int32)[None]))
            traced += 1
    return traced


def _warm_mtp(forward: Forward, hidden, zeros, lay, step, B: int, K: int) -> list[mx.array]:
    """The MTP shapes of a pass laid out as `lay`; `step`: one pair a row."""
    outs = list(forward.mtp(hidden, zeros, lay.ctx, mx.zeros((B,), mx.int32)))
    if K > 2:  # a chained step: the layer's own (B, H) output and one draft a row
        one = mx.zeros((B,), mx.int32)
        outs.extend(forward.mtp(hidden[:B], one, step.ctx, mx.arange(B)))
        return outs
    for with_drafts in (True, False):
        outs.extend(
            o
            for o in forward.main_and_draft(
                zeros,
                lay.ctx,
                mx.zeros((B, K), mx.int32),
                zeros,
                zeros - 1,
                mx.zeros((B, 2), mx.int32),
                None,
                mx.zeros((B,), mx.bool_),
                with_drafts,
            )
            if o is not None
        )
    return outs
