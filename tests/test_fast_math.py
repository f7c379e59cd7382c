"""fast_math's exp, softmax and SiLU give MLX's values (to float32 rounding), compiled or
not, on both sides of the sizes where they switch paths; masked scores weigh nothing."""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from runner.engine.layers import fast_math


@pytest.mark.parametrize("compiled", [False, True])
def test_exp_is_within_float32_rounding_of_mlx_exp(compiled):
    x = mx.linspace(-87.0, 88.0, 200_003)
    fn = mx.compile(fast_math.exp) if compiled else fast_math.exp
    ours, ref = np.array(fn(x)), np.exp(np.array(x).astype(np.float64))
    assert np.max(np.abs(ours - ref) / ref) < 3e-7


@pytest.mark.parametrize("compiled", [False, True])
def test_exp_of_nonpositive_scores_takes_the_lower_clip_only(compiled):
    x = mx.concatenate([mx.linspace(-87.0, 0.0, 100_001), mx.array([-200.0, -math.inf])])
    fn = mx.compile(lambda a: fast_math.exp(a, nonpositive=True)) if compiled else fast_math.exp
    ours = np.array(fn(x) if compiled else fn(x, nonpositive=True))
    ref = np.exp(np.array(x).astype(np.float64))
    assert np.max(np.abs(ours[:-2] - ref[:-2]) / ref[:-2]) < 3e-7
    assert ours[-2] == 0.0 and ours[-1] == 0.0


def test_exp_flushes_what_float32_cannot_hold_normally():
    x = mx.array([-math.inf, -200.0, -88.8, 0.0, 89.0, math.inf])
    out = fast_math.exp(x).tolist()
    assert out[0] == 0.0 and out[1] == 0.0 and out[2] == 0.0  # below 2^-127: zero
    assert out[3] == pytest.approx(1.0, rel=1e-7)
    assert out[4] == math.inf and out[5] == math.inf


@pytest.mark.parametrize("rows", [1, 64])  # 1 x 192 takes MLX's softmax, 64 x 192 ours
@pytest.mark.parametrize("compiled", [False, True])
def test_softmax_matches_mlx_and_a_masked_key_weighs_nothing(rows, compiled):
    mx.random.seed(0)
    scores = mx.random.normal((rows, 192)) * 8
    mask = mx.random.uniform(shape=scores.shape) > 0.3
    mask[:, 0] = True  # every row reads at least one key
    scores = mx.where(mask, scores, -mx.inf)
    assert (rows * 192 >= fast_math.FAST_SOFTMAX_FROM) == (rows > 1)
    fn = mx.compile(fast_math.softmax) if compiled else fast_math.softmax
    ours = fn(scores)
    assert mx.allclose(ours, mx.softmax(scores, axis=-1, precise=True), atol=1e-7, rtol=1e-6).item()
    assert mx.all(mx.where(mask, True, ours == 0.0)).item()
    assert mx.allclose(ours.sum(axis=-1), mx.ones(rows), atol=1e-6).item()


@pytest.mark.parametrize("n", [256, 4096])  # below FAST_SILU_FROM, and above it
def test_silu_matches_mlx_and_its_limits(n):
    assert (n >= fast_math.FAST_SILU_FROM) == (n == 4096)
    x = mx.concatenate([mx.linspace(-30.0, 30.0, n - 4), mx.array([-200.0, -100.0, 100.0, 200.0])])
    ours, ref = fast_math.silu(x), nn.silu(x)
    assert mx.allclose(ours, ref, atol=1e-6, rtol=1e-6).item()
    assert ours[-4].item() == 0.0 and ours[-1].item() == 200.0
    assert fast_math.silu(x.astype(mx.bfloat16)).dtype == mx.bfloat16


@pytest.mark.parametrize("compiled", [False, True])
def test_softmax_shifted_by_a_bound_matches_mlx(compiled):
    mx.random.seed(1)
    bound = 16.0
    scores = mx.clip(mx.random.normal((64, 192)) * 8, -bound, bound)
    mask = mx.random.uniform(shape=scores.shape) > 0.3
    mask[:, 0] = True
    scores = mx.where(mask, scores, -mx.inf)
    fn = (
        mx.compile(lambda s: fast_math.softmax(s, bound))
        if compiled
        else (lambda s: fast_math.softmax(s, bound))
    )
    ours = fn(scores)
    assert mx.allclose(ours, mx.softmax(scores, axis=-1, precise=True), atol=1e-7, rtol=1e-6).item()
    assert mx.all(mx.where(mask, True, ours == 0.0)).item()
    # a bound past MAX_BOUND is not trusted to keep every row from underflowing: the max is
    far = mx.array([[-3 * fast_math.MAX_BOUND] * 8] * 256)
    assert mx.allclose(fast_math.softmax(far, 3 * fast_math.MAX_BOUND), mx.full(far.shape, 1 / 8)).item()


@pytest.mark.parametrize("model", ["tiny", "deep"])
def test_no_attention_score_of_a_shipped_model_exceeds_its_bound(model):
    """The fused attention's softmax shifts by a bound instead of each row's max (qk-norm
    bounds every score); whatever the hidden states, no score may pass it."""
    from runner.engine.checkpoint import load_model, read_args
    from runner.engine.layers.attention import Attention, rope_table

    directory = Path(__file__).resolve().parents[1] / "runner" / "models" / model
    args = read_args(directory)
    attentions = [
        m
        for _, m in load_model(directory, args, with_mtp=True, with_indexer=False).named_modules()
        if isinstance(m, Attention)
    ]
    assert attentions and all(a.fused.score_bound is not None for a in attentions)
    mx.random.seed(2)
    N = 256
    rope = rope_table(mx.arange(N), args)
    for a in attentions:
        for scale in (1e-3, 1.0, 1e3):
            qkv = a._project_packed(mx.random.normal((N, args.hidden_size)) * scale, rope)
            q, k = qkv[:, : a.n_heads], qkv[:, a.n_heads : a.n_heads + a.n_kv_heads]
            k = mx.repeat(k, a.n_heads // a.n_kv_heads, axis=1)
            scores = (q.transpose(1, 0, 2) * a.scale) @ k.transpose(1, 2, 0)  # every pair
            assert mx.abs(scores).max().item() <= a.fused.score_bound * (1 + 1e-5)
