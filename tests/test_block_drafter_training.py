"""Training the block drafter on a random target (real MLX): a step lowers the loss, resume
reproduces an uninterrupted run, the simulated rounds match an engine-style loop over the
context cache, distillation reads the target's own logits, and the command's argument
errors are one line."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from block_drafter_setup import (
    K,
    make_drafter,
    sequences,
    target_fixture,  # noqa: F401 (the `target` fixture)
)
from mlx.utils import tree_flatten

from runner.engine.checkpoint import CheckpointError
from runner.engine.drafting.block_drafter import spread_layers
from runner.engine.drafting.drafter_context import ContextCache
from runner.engine.drafting.drafter_pass import propose
from runner.train import drafter_train as dt
from runner.train.drafter_data import AnchorSampler
from runner.train.drafter_eval import simulate_rounds


def test_a_training_step_lowers_the_loss(target):
    drafter = make_drafter(target)
    cfg = dt.DrafterTrainConfig(steps=10, k=K, warmup=1, peak_lr=3e-3)
    batch = AnchorSampler(sequences(target), 8, 4, 6, K, 0).next()
    tokens, anchors = mx.array(batch.tokens), mx.array(batch.anchors)
    feats = dt.target_features(target, tokens, drafter.cfg.target_layers)
    before = dt.block_loss(drafter, target, feats, tokens, anchors, K, cfg.gamma).item()
    optimizer = dt.make_optimizer(cfg)
    step = dt.make_step(drafter, target, optimizer, cfg)
    for _ in range(3):
        loss, _ = step(feats, tokens, anchors)
        mx.eval(loss, drafter.parameters(), optimizer.state)
    after = dt.block_loss(drafter, target, feats, tokens, anchors, K, cfg.gamma).item()
    assert after < before - 0.05


def test_resume_reproduces_an_uninterrupted_run(target, tmp_path):
    seqs = sequences(target, n=8, T=24)
    cfg = dt.DrafterTrainConfig(steps=6, batch=2, anchors=3, k=K, warmup=2, checkpoint_every=3, log_every=100)
    meta = {"test": 1}
    heard: list[str] = []
    layers = spread_layers(target.args.num_hidden_layers)
    feats = dt.precompute_features(target, seqs, layers, batch=3, log=heard.append, log_every=4)
    assert heard == ["target features: 6/8 sequences", "target features: 8/8 sequences"]

    class Interrupted(Exception):
        pass

    def run(steps_cap, state_dir, restored=None):
        drafter = restored.drafter if restored else make_drafter(target)
        sampler = AnchorSampler(seqs, 8, cfg.batch, cfg.anchors, K, cfg.seed, feats)
        calls = iter(range(steps_cap))

        def capped():
            if next(calls, None) is None:
                raise Interrupted  # the process dies before this step
            return sampler.next()

        try:
            dt.train_drafter(
                drafter, target, capped, sampler.rng, cfg, state_dir, meta, restored, log=lambda m: None
            )
        except Interrupted:
            pass
        return drafter

    straight = run(6, tmp_path / "a")
    run(4, tmp_path / "b")  # interrupted after step 4: the last saved state is step 3
    restored = dt.load_state(tmp_path / "b", meta)
    assert len(restored.history) == 3
    resumed = run(3, tmp_path / "b", restored)
    a, b = dict(tree_flatten(straight.parameters())), dict(tree_flatten(resumed.parameters()))
    assert a.keys() == b.keys()
    for name in a:
        assert mx.array_equal(a[name], b[name]).item(), name
    with pytest.raises(CheckpointError, match="another recipe"):
        dt.load_state(tmp_path / "b", {"test": 2})


def test_simulated_rounds_commit_at_least_one_token_each(target):
    drafter = make_drafter(target)
    seqs = mx.array(sequences(target, n=3, T=40))
    feats = dt.target_features(target, seqs, drafter.cfg.target_layers)
    rounds = simulate_rounds(drafter, target, feats, seqs, 16, K)
    # Every row starts at anchor 16 and advances j + 1 per round until 40 - 1 - K.
    assert all(0 <= j <= K for j in rounds)
    assert len(rounds) >= 3 * ((40 - 1 - K - 16) // (K + 1) + 1)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train"], "give --preset tiny|deep, or --drafter block --model tiny|deep"),
        (["train", "--drafter", "block"], "--drafter block needs --model tiny or --model deep"),
        (["train", "--drafter", "block", "--model", "tiny", "--steps", "0"], "--steps must be >= 1, got 0"),
        (
            ["train", "--drafter", "block", "--model", "deep", "--sequences", "0"],
            "--sequences must be >= 1, got 0",
        ),
    ],
)
def test_train_drafter_argument_errors_are_one_line(argv, message, capsys):
    from runner.cli import main

    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"train: {message}"


def test_rounds_match_an_engine_style_loop_over_the_context_cache(target):
    """The batched simulation equals one row drafting through ContextCache: append the
    verified positions (rejected ones appended then trimmed), propose from the anchor."""
    drafter = make_drafter(target)
    seqs = mx.array(sequences(target, n=1, T=40, seed=3))
    feats = dt.target_features(target, seqs, drafter.cfg.target_layers)
    expected = simulate_rounds(drafter, target, feats, seqs, 16, K)
    cache, got, a = ContextCache(drafter), [], 16
    cache.append(0, feats[0, :a])
    truth = np.array(seqs[0])
    while a + K <= 39:
        ctx, lens, ends = cache.gather([0])
        drafts = np.array(propose(drafter, target, ctx, lens, seqs[0, a : a + 1], K, ends).tokens[0])
        j = int(np.cumprod(drafts == truth[a + 1 : a + K + 1]).sum())
        got.append(j)
        cache.append(0, feats[0, a : a + K + 1])  # the verify pass's K + 1 positions
        cache.trim(0, a + j + 1)  # keep the accepted ones only
        a += j + 1
    assert got == expected


def test_distillation_mixes_kl_from_the_targets_own_logits(target):
    """With distill = 1 the loss is KL from the target's distribution at the positions that
    predict the block's tokens: zero would need the drafter to be the target; it is never
    negative, and distill = 0 gives back the cross-entropy."""
    drafter = make_drafter(target)
    seqs = mx.array(sequences(target, n=2, T=32))
    feats = dt.target_features(target, seqs, drafter.cfg.target_layers)
    anchors = mx.array([[5, 12], [3, 20]], mx.int32)
    ce = dt.block_loss(drafter, target, feats, seqs, anchors, K, 4.0).item()
    assert dt.block_loss(drafter, target, feats, seqs, anchors, K, 4.0, distill=0.0).item() == ce
    kl = dt.block_loss(drafter, target, feats, seqs, anchors, K, 4.0, distill=1.0).item()
    assert kl > 0
    out = dt.block_logits(drafter, target, feats, seqs, anchors, K, with_teacher=True)
    logits, _ = target(seqs)
    # the teacher at block position i is the target's logits at anchor + i - 1
    assert mx.allclose(out.teacher[0, 0], logits[0, 5], atol=1e-4).item()
    assert mx.allclose(out.teacher[3, 2], logits[1, 22], atol=1e-4).item()
