"""The block drafter's tests' shared setup: a random tiny target (a module fixture), a small
drafter over its spread layers, and random token sequences."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from runner.engine.checkpoint import load_model, read_args
from runner.engine.drafting.block_drafter import BlockDrafter, DrafterConfig, spread_layers

K = 4


@pytest.fixture(scope="module", name="target")
def target_fixture(tiny_checkpoint):
    args = read_args(tiny_checkpoint)
    return load_model(tiny_checkpoint, args, with_mtp=True, with_indexer=False, fuse=False)


def small_drafter(args, seed: int, **cfg) -> BlockDrafter:
    """A small random drafter over a target of these ModelArgs (cfg: other DrafterConfig fields)."""
    mx.random.seed(seed)
    d = BlockDrafter(
        DrafterConfig(
            hidden_size=args.hidden_size,
            target_layers=spread_layers(args.num_hidden_layers),
            num_heads=2,
            num_kv_heads=1,
            head_dim=8,
            intermediate_size=64,
            **cfg,
        )
    )
    mx.eval(d.parameters())
    return d


def make_drafter(target, seed=0) -> BlockDrafter:
    return small_drafter(target.args, seed, block_size=K)


def sequences(target, n=6, T=32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, target.args.vocab_size, size=(n, T)).astype(np.int32)
