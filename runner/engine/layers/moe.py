"""Mixture-of-experts feed-forward: sigmoid router with correction bias and grouped
top-k, routed experts stacked per weight and run through `mx.gather_mm`, plus shared
experts added unweighted. Also the dense SwiGLU MLP used by the first layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import mlx.core as mx
import mlx.nn as nn

from ..config import ModelArgs
from . import fast_math


@dataclass(frozen=True)
class Fused:
    """Inference-layout copies of weights. Not an mx.array, list or tuple, so nn.Module
    keeps it out of parameters(): saving and training never see it."""

    arrays: tuple


# (token, expert) pairs from which gather_mm over expert-sorted tokens pays: prompt
# chunks. On MLX's CPU backend the sort, its inverse and the gathers cost about what
# batching saves below that, so a verify pass of a block of drafts (alone or at four rows)
# runs each pair as a decode pass does, with a decode pass's values.
SORT_FROM_PAIRS = 128


class MLP(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)
        self.fused: Optional[Fused] = None  # fuse(): a plain attribute, not a parameter

    def fuse(self) -> None:
        """One matmul for gate and up projections at inference; weights pre-transposed
        (a transpose is a graph node of its own every pass)."""
        gate_up = mx.concatenate([self.gate_proj.weight, self.up_proj.weight])
        self.fused = Fused((mx.contiguous(gate_up.T), mx.contiguous(self.down_proj.weight.T)))
        mx.eval(self.fused.arrays)

    def __call__(self, x: mx.array) -> mx.array:
        if self.fused is None:
            return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))
        gate_up, down = self.fused.arrays
        g, u = mx.split(x @ gate_up, 2, axis=-1)
        return (fast_math.silu(g) * u) @ down


def route(logits: mx.array, bias: mx.array, args: ModelArgs) -> tuple[mx.array, mx.array]:
    """Router logits (..., E) -> (expert indices (..., k), weights (..., k)).

    Choice uses the biased scores; weights use the un-biased sigmoid scores. Weak groups
    are set to 0.0 (not -inf), as the reference implementations do."""
    scores = mx.sigmoid(logits.astype(mx.float32))
    choice = scores + bias
    if args.n_group > 1:
        grouped = mx.unflatten(choice, -1, (args.n_group, -1))  # (..., G, E/G)
        group_score = mx.topk(grouped, 2, axis=-1).sum(axis=-1, keepdims=True)
        drop = args.n_group - args.topk_group
        if drop > 0:
            weakest = mx.argpartition(group_score, kth=drop - 1, axis=-2)[..., :drop, :]
            grouped = mx.put_along_axis(grouped, mx.stop_gradient(weakest), mx.array(0.0), axis=-2)
        choice = mx.flatten(grouped, -2, -1)
    k = args.num_experts_per_tok
    inds = mx.stop_gradient(mx.argpartition(-choice, kth=k - 1, axis=-1)[..., :k])
    weights = mx.take_along_axis(scores, inds, axis=-1)
    if k > 1 and args.norm_topk_prob:
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return inds, weights * args.routed_scaling_factor


class Router(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.weight = mx.zeros((args.n_routed_experts, args.hidden_size))
        self.e_score_correction_bias = mx.zeros((args.n_routed_experts,))
        self.fused: Optional[Fused] = None  # fuse(): the weight pre-transposed

    def fuse(self) -> None:
        self.fused = Fused((mx.contiguous(self.weight.T),))
        mx.eval(self.fused.arrays)

    def __call__(self, x: mx.array) -> tuple[mx.array, mx.array]:
        w_t = self.fused.arrays[0] if self.fused is not None else self.weight.T
        return route(x @ w_t, self.e_score_correction_bias, self.args)


class StackedExperts(nn.Module):
    """All routed experts' weights stacked on a leading expert axis."""

    def __init__(self, hidden: int, inner: int, n_experts: int):
        super().__init__()
        s_in, s_out = hidden**-0.5, inner**-0.5
        self.gate_proj = mx.random.uniform(-s_in, s_in, (n_experts, inner, hidden))
        self.up_proj = mx.random.uniform(-s_in, s_in, (n_experts, inner, hidden))
        self.down_proj = mx.random.uniform(-s_out, s_out, (n_experts, hidden, inner))
        self.fused: Optional[Fused] = None  # fuse(): a plain attribute, not a parameter

    def _operands(self) -> tuple[mx.array, mx.array]:
        """gate and up stacked into one (E, H, 2I) operand, down as (E, I, H): the
        orientation gather_mm reads."""
        gate_up, down = mx.concatenate([self.gate_proj, self.up_proj], axis=1), self.down_proj
        if gate_up.dtype != mx.float32 and mx.default_device() == mx.cpu:
            # MLX's CPU gather_mm is float32-only: keep the expert operands in float32 there.
            gate_up, down = gate_up.astype(mx.float32), down.astype(mx.float32)
        return gate_up.swapaxes(-1, -2), down.swapaxes(-1, -2)

    def fuse(self) -> None:
        """Inference: build the operands once, contiguous, instead of every pass."""
        self.fused = Fused(tuple(mx.contiguous(a) for a in self._operands()))
        mx.eval(self.fused.arrays)

    def dense(self, x: mx.array, inds: mx.array, weights: mx.array) -> mx.array:
        """The weighted sum of the chosen experts' outputs, (..., H), from every expert run
        on every token with the unchosen ones zero-weighted: the values of __call__'s path
        in a few wide matmuls, which train far faster on the CPU than gather_mm's per-token
        products. Runs on the parameters (training needs their gradients)."""
        E, I, H = self.gate_proj.shape
        chosen = inds[..., None] == mx.arange(E)  # (..., k, E)
        combine = (chosen * weights[..., None]).sum(axis=-2)  # (..., E)
        g = (x @ self.gate_proj.reshape(E * I, H).T).reshape(*x.shape[:-1], E, I)  # (..., E, I)
        u = (x @ self.up_proj.reshape(E * I, H).T).reshape(*x.shape[:-1], E, I)
        a = nn.silu(g) * u * combine[..., None]
        down = self.down_proj.transpose(0, 2, 1).reshape(E * I, H)  # (E*I, H)
        return a.reshape(*x.shape[:-1], E * I) @ down

    def __call__(self, x: mx.array, inds: mx.array) -> mx.array:
        # x (..., H), inds (..., k) -> (..., k, H)
        gate_up, down = self.fused.arrays if self.fused is not None else self._operands()
        silu = fast_math.silu if self.fused is not None else nn.silu
        dtype, shape, k = x.dtype, inds.shape, inds.shape[-1]
        if inds.size < SORT_FROM_PAIRS:
            # Few pairs: x (..., 1, 1, H) broadcasts against the indices, no row index needed.
            h = mx.gather_mm(
                x[..., None, None, :].astype(gate_up.dtype), gate_up, rhs_indices=inds
            )  # (..., k, 1, 2I)
            g, u = mx.split(h, 2, axis=-1)
            return mx.gather_mm(silu(g) * u, down, rhs_indices=inds)[..., 0, :].astype(dtype)  # (..., k, H)
        x = x.reshape(-1, 1, x.shape[-1]).astype(gate_up.dtype)  # (N, 1, H)
        # Sorted, contiguous runs per expert let gather_mm batch its matmuls.
        order = mx.argsort(inds.reshape(-1))
        idx, rows = inds.reshape(-1)[order], order // k
        h = mx.gather_mm(x, gate_up, lhs_indices=rows, rhs_indices=idx, sorted_indices=True)  # (N*k, 1, 2I)
        g, u = mx.split(h, 2, axis=-1)
        y = mx.gather_mm(silu(g) * u, down, rhs_indices=idx, sorted_indices=True)  # (N*k, 1, H)
        return y[mx.argsort(order)].reshape(*shape, -1).astype(dtype)


class MoE(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.gate = Router(args)
        self.experts = StackedExperts(args.hidden_size, args.moe_intermediate_size, args.n_routed_experts)
        if args.n_shared_experts:
            self.shared_experts = MLP(args.hidden_size, args.moe_intermediate_size * args.n_shared_experts)

    def __call__(self, x: mx.array, counts: Optional[list] = None, dense: bool = False) -> mx.array:
        """counts: a list this layer appends its (E,) tokens-per-expert to; dense: evaluate
        every expert on every token (StackedExperts.dense), for training."""
        inds, weights = self.gate(x)
        if counts is not None:
            E = self.experts.gate_proj.shape[0]
            chosen = inds[..., None] == mx.arange(E)  # (..., k, E)
            counts.append(mx.stop_gradient(chosen.reshape(-1, E).sum(axis=0)))
        if dense:
            y = self.experts.dense(x, inds, weights)
        else:
            y = (self.experts(x, inds) * weights[..., None]).sum(axis=-2).astype(x.dtype)
        if "shared_experts" in self:
            y = y + self.shared_experts(x)
        return y
