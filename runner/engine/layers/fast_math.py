"""exp, softmax and SiLU from arithmetic MLX fuses, for the inference layout's passes.

MLX's x86-64 CPU build evaluates `exp` one element at a time, each multiply-add a call
to libm's `fmaf`, so the softmax of an attention read and the SiLU of a feed-forward
cost far more per element than their matmuls at a verify pass's shapes (a block of
drafts multiplies both by its length). Here e^x is 2^n e^r, r = x - n ln 2 in
[-ln 2 / 2, ln 2 / 2]: 2^n written into a float's exponent bits, e^r a quintic; inside
a compiled pass these are plain multiply-adds fused into the pass's elementwise kernels.
The result is within a few float32 roundings of e^x (a test bounds it at 3e-7, under
MLX's own exp's error on this build); below 2^-126 it flushes
to zero, so a masked score (-inf) still weighs exactly nothing.

Only the inference layout (fused weights) calls these; training keeps MLX's own
functions and their gradients.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Iterator

import mlx.core as mx
import mlx.nn as nn

LOG2E = 1.4426950408889634
# ln 2 in two parts, the first exact in a few bits, so x - n ln 2 loses nothing to rounding
# for any n a float32 exp can take (Cody and Waite's reduction).
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4
# Below these sizes (elements) the few more kernels cost more than the slower exp: the
# shapes are fixed when a pass is traced, so each traced shape takes one path.
FAST_SOFTMAX_FROM = 2048
FAST_SILU_FROM = 2048
# The largest |x| bound softmax shifts by instead of the row max: e^(-2 * 40) is far above
# float32's smallest normal number (e^-87), so no row can underflow to all zeros.
MAX_BOUND = 40.0
# (e^r - 1 - r) / r^2 on |r| <= ln 2 / 2 as a cubic (highest power first): a minimax fit
# of the relative error of e^r, made by iteratively reweighted least squares (Lawson's
# method) over Chebyshev nodes: two terms fewer than the Cephes library's expf, whose
# extra accuracy the float32 result cannot keep anyway.
EXP_POLY = (
    8.31252524896052e-3,
    4.189011430072312e-2,
    1.6667114465297697e-1,
    4.999923178297146e-1,
)
# Adding then subtracting 1.5 * 2^23 rounds a float32 of magnitude under 2^22 to the
# nearest integer in two additions: `floor` is a libm call an element in MLX's CPU build.
ROUNDER = 12582912.0


_mlx_only = False


@contextmanager
def mlx_functions() -> Iterator[None]:
    """Passes traced inside it compute softmax and SiLU with MLX's own exp at every size:
    the baseline of `runner bench --exp` (a compiled pass keeps what it traced)."""
    global _mlx_only
    before, _mlx_only = _mlx_only, True
    try:
        yield
    finally:
        _mlx_only = before


def exp(x: mx.array, nonpositive: bool = False) -> mx.array:
    """e^x in float32: 0 below about -87.7 (and for -inf), inf from about 88.4.
    nonpositive: x <= 0 is known (a softmax's shifted scores), so only the lower clip."""
    x = x.astype(mx.float32)
    low, high = -127 * math.log(2), 128 * math.log(2)
    x = mx.maximum(x, low) if nonpositive else mx.clip(x, low, high)
    n = (x * LOG2E + ROUNDER) - ROUNDER
    r = x - n * LN2_HI - n * LN2_LO
    p = EXP_POLY[0]
    for c in EXP_POLY[1:]:
        p = p * r + c
    # 2^n written into the exponent bits: n = -127 gives 0.0, n = 128 inf.
    scale = mx.left_shift(n.astype(mx.int32) + 127, 23).view(mx.float32)
    return (p * (r * r) + r + 1.0) * scale


def softmax(x: mx.array, bound: float | None = None) -> mx.array:
    """Softmax over the last axis, in float32 (as `mx.softmax(precise=True)`); MLX's own
    below FAST_SOFTMAX_FROM elements. bound: a known limit on |x| (-inf aside), small
    enough that e^(x - bound) cannot underflow for any x >= -bound: the shift the max
    would give, without the row reduction that finds it."""
    x = x.astype(mx.float32)
    if x.size < FAST_SOFTMAX_FROM or _mlx_only:
        return mx.softmax(x, axis=-1, precise=True)
    shift = mx.max(x, axis=-1, keepdims=True) if bound is None or bound > MAX_BOUND else bound
    e = exp(x - shift, nonpositive=True)
    return e / e.sum(axis=-1, keepdims=True)


def silu(x: mx.array) -> mx.array:
    """x sigmoid(x) = x / (1 + e^-x), in x's dtype; e^-x past 2^128 gives -0 (the limit).
    MLX's own below FAST_SILU_FROM elements."""
    if x.size < FAST_SILU_FROM or _mlx_only:
        return nn.silu(x)
    return (x / (1.0 + exp(-x))).astype(x.dtype)
