"""The block drafter on a random target (real MLX): the engine-side cache and `propose`
agree with training's batched blocks, rollback keeps accepted positions only, the fused
pass is the modules' pass, and bad files are one clear error naming the checkpoint and
file. Its training: test_block_drafter_training.py."""

from __future__ import annotations

import shutil

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

from runner.engine.checkpoint import load_model, read_args
from runner.engine.drafting.block_drafter import (
    DRAFTER_DIR,
    EVAL_FILE,
    WEIGHTS_FILE,
    DrafterError,
    drafter_dir,
    load_checkpoint_drafter,
    measured_acceptance,
    save_block_drafter,
    spread_layers,
)
from runner.engine.drafting.block_drafting import draft_confidence
from runner.engine.drafting.drafter_context import ContextCache
from runner.engine.drafting.drafter_pass import FusedDrafter, propose
from runner.train import drafter_train as dt


def test_spread_layers_reach_the_final_hidden():
    assert spread_layers(4) == (1, 2, 3, 4)
    assert spread_layers(16) == (1, 6, 11, 16)


def test_cache_and_propose_match_batched_blocks_and_rollback(target):
    drafter = make_drafter(target)
    seqs = mx.array(sequences(target))
    feats = dt.target_features(target, seqs, drafter.cfg.target_layers)
    anchors = [9, 17]
    ref = dt.block_logits(drafter, target, feats[:2], seqs[:2], mx.array([[9], [17]]), K)
    cache = ContextCache(drafter)
    cache.append(0, feats[0, :5])
    cache.append(0, feats[0, 5:9])
    # Row 1 drafts past a rejected tail: positions 17..20 appended, then rolled back.
    cache.append(1, feats[1, :21])
    cache.trim(1, 17)
    assert cache.length(1) == 17 and cache.nbytes(1) == 17 * cache.nbytes(0) / 9
    ctx, lens, ends = cache.gather([0, 1])
    assert ends.tolist() == anchors
    out = propose(drafter, target, ctx, lens, seqs[mx.arange(2), mx.array(anchors)], K, ends)
    assert out.tokens.shape == (2, K)
    assert mx.allclose(out.logits, ref.logits, atol=1e-4).item()
    assert (out.tokens == mx.argmax(ref.logits, axis=-1)).all().item()
    with pytest.raises(ValueError):
        cache.trim(1, 18)
    cache.drop(1)
    assert cache.length(1) == 0 and cache.nbytes(1) == 0


def test_a_context_from_a_later_start_drafts_at_absolute_positions(target):
    """A row whose first positions the prefix cache served: its context starts later, and
    the block reads it at the right positions (the same as a full context whose first
    positions are hidden)."""
    drafter = make_drafter(target)
    seqs = mx.array(sequences(target, n=1))
    feats = dt.target_features(target, seqs, drafter.cfg.target_layers)
    late = ContextCache(drafter)
    late.append(7, feats[0, 6:9], first_position=6)
    late.append(7, feats[0, 9:13])
    ctx, lens, ends = late.gather([7])
    assert lens.tolist() == [7] and ends.tolist() == [13]
    got = propose(drafter, target, ctx, lens, seqs[:, 13], K, ends)
    full = ContextCache(drafter)
    full.append(0, feats[0, :13])
    fctx, flens, fends = full.gather([0])
    # Hide positions 0..5 of the full context by shifting it: keys were rotated at the same
    # absolute positions, so attention over 6..12 alone must match.
    shifted = [(k[:, :, 6:], v[:, :, 6:]) for k, v in fctx]
    shifted = [
        (mx.pad(k, [(0, 0), (0, 0), (0, 6), (0, 0)]), mx.pad(v, [(0, 0), (0, 0), (0, 6), (0, 0)]))
        for k, v in shifted
    ]
    ref = propose(drafter, target, shifted, mx.array([7], mx.int32), seqs[:, 13], K, fends)
    assert mx.allclose(got.logits, ref.logits, atol=1e-5).item()
    late.trim(7, 8)
    assert late.length(7) == 2 and late.end(7) == 8


def test_block_sees_no_context_at_or_after_its_anchor(target):
    drafter = make_drafter(target)
    seqs = sequences(target, n=1)
    changed = seqs.copy()
    changed[0, 12:] = (changed[0, 12:] + 7) % target.args.vocab_size
    outs = []
    for s in (seqs, changed):
        s = mx.array(s)
        feats = dt.target_features(target, s, drafter.cfg.target_layers)
        outs.append(dt.block_logits(drafter, target, feats, s, mx.array([[11]]), K).logits)
    # Token 11 (the anchor) is the same; only features of positions >= 12 changed, unseen.
    assert mx.allclose(outs[0], outs[1], atol=1e-5).item()


def test_saved_drafter_loads_beside_a_checkpoint_the_target_loader_still_reads(
    target, tiny_checkpoint, tmp_path
):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    with pytest.raises(DrafterError, match=f"checkpoint {ckpt}: no block drafter .*{WEIGHTS_FILE} missing"):
        load_checkpoint_drafter(ckpt, target.args)
    drafter = make_drafter(target)
    save_block_drafter(drafter, drafter_dir(ckpt))
    load_model(ckpt, read_args(ckpt), with_mtp=True, with_indexer=True)  # ignores block_drafter/
    loaded = load_checkpoint_drafter(ckpt, target.args)
    for (n, a), (_, b) in zip(tree_flatten(drafter.parameters()), tree_flatten(loaded.parameters())):
        assert mx.array_equal(a, b).item(), n
    (ckpt / DRAFTER_DIR / WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(DrafterError, match=f"checkpoint {ckpt}: .*{WEIGHTS_FILE}: cannot read"):
        load_checkpoint_drafter(ckpt, target.args)


def test_adaptive_starts_from_the_drafters_evaluated_acceptance(tmp_path):
    """The shipped drafter's eval.json is where an adaptive engine's acceptance estimate
    starts; a checkpoint without one starts flat; a malformed one is one error naming the
    file and the field."""
    from runner.engine import Engine
    from runner.engine.checkpoint import resolve_checkpoint
    from runner.engine.drafting.acceptance import conditional

    shipped = resolve_checkpoint("tiny")
    shares = measured_acceptance(shipped)
    assert len(shares) >= 4 and all(0 < x < 1 for x in shares)
    knobs = dict(mtp=True, drafter="block", draft_policy="adaptive", draft_tokens=4, compile=False)
    engine = Engine.from_pretrained(shipped, **knobs)
    assert engine.policy.acceptance.prior == conditional(shares) and engine.policy.acceptance.prior
    assert abs(engine.policy.acceptance.at(1) - shares[0]) < 1e-9
    ckpt = tmp_path / "ckpt"
    shutil.copytree(shipped, ckpt)
    (ckpt / DRAFTER_DIR / EVAL_FILE).unlink()
    assert measured_acceptance(ckpt) == ()
    assert Engine.from_pretrained(ckpt, **knobs).policy.acceptance.at(1) == 0.5
    (ckpt / DRAFTER_DIR / EVAL_FILE).write_text('{"acceptance_at": ["most"]}')
    with pytest.raises(DrafterError, match=f"{EVAL_FILE}: 'acceptance_at' is not a list of shares"):
        Engine.from_pretrained(ckpt, **knobs)
    (ckpt / DRAFTER_DIR / EVAL_FILE).write_text('{"acceptance_at": [0.5, 1.5]}')
    with pytest.raises(DrafterError, match="a share outside 0..1"):
        measured_acceptance(ckpt)


@pytest.mark.parametrize("window", [0, 8])
def test_the_fused_pass_is_the_modules_pass(target, window):
    """The engine's drafter pass (FusedDrafter: q, k and v as one product, gate and up as
    another, tables and mask built once) gives the modules' logits and drafts, on rows of
    different context lengths, with and without a context window."""
    from dataclasses import replace

    drafter = make_drafter(target)
    drafter.cfg = replace(drafter.cfg, context_window=window)
    seqs = mx.array(sequences(target, n=3, T=24))
    feats = dt.target_features(target, seqs, drafter.cfg.target_layers)
    pos = mx.broadcast_to(mx.arange(24, dtype=mx.int32)[None], (3, 24))
    ctx = drafter.context(feats, pos)
    lens = mx.array([20, 13, 5], mx.int32)
    anchors = mx.take_along_axis(seqs, lens[:, None], axis=1)[:, 0]
    want = propose(drafter, target, ctx, lens, anchors, K)
    got = propose(FusedDrafter(drafter), target, ctx, lens, anchors, K)
    assert mx.allclose(got.logits, want.logits, atol=1e-4).item()
    assert (np.array(got.tokens) == np.array(want.tokens)).mean() > 0.95  # ties aside


def test_a_context_window_hides_older_positions_and_confidence_is_the_drafts_odds(target):
    """With context_window W a block reads only its row's last W context entries: what
    lies before them changes nothing, while the same change moves an unbounded drafter.
    The confidence of each draft is its probability under the drafter's own logits."""
    from dataclasses import replace

    bounded = make_drafter(target)
    bounded.cfg = replace(bounded.cfg, context_window=8)
    unbounded = make_drafter(target)
    seqs = mx.array(sequences(target, n=1, T=24))
    feats = dt.target_features(target, seqs, bounded.cfg.target_layers)
    pos = mx.arange(24, dtype=mx.int32)[None]
    other = mx.concatenate([feats[:, :10] * -3.0 + 1.0, feats[:, 10:]], axis=1)  # positions < 10 differ
    lens, anchors = mx.array([20], mx.int32), seqs[:, 20]
    outs = {}
    for name, d in (("bounded", bounded), ("unbounded", unbounded)):
        outs[name] = [propose(d, target, d.context(f, pos), lens, anchors, K) for f in (feats, other)]
    a, b = outs["bounded"]
    assert mx.allclose(a.logits, b.logits, atol=1e-5).item()  # it reads positions 12..19 only
    u, v = outs["unbounded"]
    assert not mx.allclose(u.logits, v.logits, atol=1e-3).item()
    probs = mx.softmax(a.logits, axis=-1)
    expected = mx.take_along_axis(probs, a.tokens[..., None], axis=-1)[..., 0]
    assert np.allclose(draft_confidence(np.array(a.logits)), np.array(expected), atol=1e-5)
