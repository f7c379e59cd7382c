"""Training runs the model's own plain forward (a Capture, dense MoE): the loss and its
gradients are those of the explicit layer walk training used before, and the loss on a
fixed batch from a fixed seed is the number it was then."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from runner.engine.checkpoint import load_model, read_args
from runner.engine.layers.attention import apply_rope
from runner.engine.layers.moe import MoE, StackedExperts
from runner.engine.model import Capture
from runner.train import loop, losses
from runner.train.distill import distill_loss
from runner.train.random_init import BASE_CONFIG, write_random_checkpoint

SMALL = dict(vocab_size=64, eos_token_id=0)
GROUPED = dict(n_group=4, topk_group=2, use_qk_norm=True)


# ---- the oracle: training's forward as losses.py wrote it out, layer by layer -------
def _layer(layer, x, counts, normed):
    n = layer.input_layernorm(x)
    if normed is not None:
        normed.append(n)
    h = x + layer.self_attn(n)
    m = layer.post_attention_layernorm(h)
    if not isinstance(layer.mlp, MoE):
        return h + layer.mlp(m)
    moe, ex = layer.mlp, layer.mlp.experts
    inds, weights = moe.gate(m)
    E, I, H = ex.gate_proj.shape
    chosen = inds[..., None] == mx.arange(E)
    counts.append(mx.stop_gradient(chosen.reshape(-1, E).sum(axis=0)))
    combine = (chosen * weights[..., None]).sum(axis=-2)
    g = (m @ ex.gate_proj.reshape(E * I, H).T).reshape(*m.shape[:-1], E, I)
    u = (m @ ex.up_proj.reshape(E * I, H).T).reshape(*m.shape[:-1], E, I)
    y = (nn.silu(g) * u * combine[..., None]).reshape(*m.shape[:-1], E * I) @ ex.down_proj.transpose(
        0, 2, 1
    ).reshape(E * I, H)
    if "shared_experts" in moe:
        y = y + moe.shared_experts(m)
    return h + y


def _dense_attention(layer, n):
    attn = layer.self_attn
    B, T, _ = n.shape
    q = attn.q_proj(n).reshape(B, T, attn.n_heads, attn.head_dim)
    k = attn.k_proj(n).reshape(B, T, attn.n_kv_heads, attn.head_dim)
    if attn.args.use_qk_norm:
        q, k = attn.q_norm(q), attn.k_norm(k)
    q = apply_rope(q.transpose(0, 2, 1, 3), attn.args, 0)
    k = mx.repeat(apply_rope(k.transpose(0, 2, 1, 3), attn.args, 0), attn.n_heads // attn.n_kv_heads, axis=1)
    scores = mx.where(losses.causal_mask(T), (q * attn.scale) @ k.swapaxes(-1, -2), -1e9)
    return mx.softmax(scores, axis=-1).mean(axis=1)


def reference_joint_loss(model, batch, mtp_weight):
    x, y1, y2 = batch[:, :-2], batch[:, 1:-1], batch[:, 2:]
    counts, normed = [], []
    h = model.embed_tokens(x)
    for layer in model.layers:
        h = _layer(layer, h, counts, normed)
    hidden = model.norm(h)
    main = losses.cross_entropy(model.head(hidden), y1)
    mtp = model.mtp
    u = mtp.eh_proj(mx.concatenate([mtp.enorm(model.embed_tokens(y1)), mtp.hnorm(hidden)], axis=-1))
    mtp_loss = losses.cross_entropy(model.head(mtp.shared_head_norm(_layer(mtp, u, counts, None))), y2)
    kls = []
    for layer, n in zip(model.layers, normed):
        n = mx.stop_gradient(n)
        target = mx.stop_gradient(_dense_attention(layer, n))
        mask = losses.causal_mask(n.shape[1])
        log_q = mx.where(mask, nn.log_softmax(mx.where(mask, layer.indexer.scores(n), -1e9), axis=-1), 0.0)
        log_p = mx.where(mask, mx.log(mx.maximum(target, 1e-30)), 0.0)
        kls.append((target * (log_p - log_q)).sum(axis=-1).mean())
    index = mx.stack(kls).mean()
    return main + mtp_weight * mtp_loss + index, main, mtp_loss, index, mx.stack(counts)


def small(seed: int, **over):
    return loop.init_model({**BASE_CONFIG, **SMALL, **over}, seed)


@pytest.mark.parametrize("over", [dict(), GROUPED, dict(n_shared_experts=None, norm_topk_prob=False)])
def test_joint_loss_and_gradients_equal_the_explicit_layer_walk(over):
    model = small(3, **over)
    batch = mx.array(np.random.default_rng(0).integers(0, 64, (3, 18)).astype(np.int32))
    ours = losses.joint_loss(model, batch, 0.3, True)
    ref = reference_joint_loss(model, batch, 0.3)
    for a, b in zip(ours[:4], ref[:4]):
        assert abs(a.item() - b.item()) <= 1e-6 * max(1.0, abs(b.item()))
    assert mx.array_equal(ours[4], ref[4])
    grads = dict(
        tree_flatten(nn.value_and_grad(model, lambda m: losses.joint_loss(m, batch, 0.3, True)[0])(model)[1])
    )
    ref_grads = dict(
        tree_flatten(nn.value_and_grad(model, lambda m: reference_joint_loss(m, batch, 0.3)[0])(model)[1])
    )
    assert grads.keys() == ref_grads.keys()
    for k in grads:
        assert mx.allclose(grads[k], ref_grads[k], rtol=1e-5, atol=1e-7), k


@pytest.mark.parametrize(
    "over, expected, counts",
    [
        (
            dict(),
            [5.669975280761719, 4.337027072906494, 4.382311820983887, 0.01825454831123352],
            [[1, 6, 0, 4, 18, 13, 3, 3], [10, 1, 7, 5, 5, 12, 6, 2]],
        ),
        (
            GROUPED,
            [5.694998741149902, 4.301450729370117, 4.330252170562744, 0.09447260200977325],
            [[1, 6, 1, 4, 17, 14, 3, 2], [7, 2, 7, 4, 3, 12, 8, 5]],
        ),
    ],
)
def test_training_loss_on_a_fixed_batch_is_the_one_recorded_before_the_capture_hook(over, expected, counts):
    """(total, next-token, MTP, indexer KL) and expert counts, as the explicit layer walk
    gave them at commit 68c386f for this seed and batch."""
    model = small(11, **over)
    batch = mx.array(np.random.default_rng(0).integers(0, 64, (2, 14)).astype(np.int32))
    total, main, mtp, index, got_counts = losses.joint_loss(model, batch, 0.3, True)
    assert [total.item(), main.item(), mtp.item(), index.item()] == pytest.approx(
        expected, rel=1e-5, abs=1e-7
    )
    assert got_counts.tolist() == counts


def test_training_evaluates_every_expert_on_every_token(monkeypatch):
    """Dense, for speed: gather_mm's per-token products train far slower on the CPU."""

    def gather(*args, **kwargs):
        raise AssertionError("the training forward ran the routed experts through gather_mm")

    monkeypatch.setattr(StackedExperts, "__call__", gather)
    model = small(4)
    batch = mx.array(np.random.default_rng(0).integers(0, 64, (2, 12)).astype(np.int32))
    losses.joint_loss(model, batch, 0.3, True)
    with pytest.raises(AssertionError, match="gather_mm"):
        model(batch)  # inference does use it


def test_the_capture_holds_each_layer_in_the_order_it_ran():
    model = small(2)
    tokens = mx.random.randint(0, 64, (2, 9))
    cap = Capture()
    logits, hidden = model(tokens, capture=cap)
    assert len(cap.normed) == len(model.layers) and len(cap.expert_counts) == len(loop.moe_layers(model)) - 1
    model.mtp_forward(hidden, tokens, capture=cap)
    assert len(cap.normed) == len(model.layers) + 1 and len(cap.expert_counts) == len(loop.moe_layers(model))
    assert mx.array_equal(cap.normed[0], model.layers[0].input_layernorm(model.embed_tokens(tokens)))
    k = model.args.num_experts_per_tok
    assert all(int(c.sum().item()) == 2 * 9 * k for c in cap.expert_counts)
    dense_logits, _ = model(tokens, dense_moe=True)  # the dense MoE: the same values
    assert mx.allclose(dense_logits, logits, atol=1e-4)


def test_distillation_trains_a_fused_models_mtp_projection(tmp_path):
    """The fused inference copy of eh_proj serves batched passes only: the plain path
    projects with the parameter, so distillation's gradients reach it."""
    d = write_random_checkpoint(tmp_path / "r", seed=5)
    model = load_model(d, read_args(d), with_mtp=True, with_indexer=True)
    assert model.mtp.eh_proj_t is not None
    model.freeze()
    model.mtp.unfreeze()
    batch = mx.array(np.random.default_rng(1).integers(1, 300, (2, 20)).astype(np.int32))
    grads = dict(tree_flatten(nn.value_and_grad(model, distill_loss)(model, batch)[1]))
    assert float(mx.abs(grads["mtp.eh_proj.weight"]).max().item()) > 0
