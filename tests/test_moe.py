"""The routed experts give the same values on either of gather_mm's paths: a pair at a time
(decode and verify passes) and over expert-sorted tokens (prompt chunks from
SORT_FROM_PAIRS), both equal to the dense form training runs."""

from __future__ import annotations

import mlx.core as mx
import pytest

from runner.engine.config import ModelArgs
from runner.engine.layers import moe
from runner.train.random_init import BASE_CONFIG

ARGS = ModelArgs.from_dict(BASE_CONFIG)  # 8 routed experts, top 2


# the last count's pairs (top-2) reach SORT_FROM_PAIRS: the sorted path
@pytest.mark.parametrize("tokens", [1, 9, 36, moe.SORT_FROM_PAIRS // 2 + 3])
@pytest.mark.parametrize("fused", [False, True])
def test_routed_experts_match_the_dense_form_on_both_paths(tokens, fused):
    mx.random.seed(3)
    layer = moe.MoE(ARGS)
    layer.gate.weight = mx.random.normal(layer.gate.weight.shape)
    if fused:
        layer.experts.fuse()
    x = mx.random.normal((tokens, ARGS.hidden_size))
    inds, weights = layer.gate(x)
    routed = (layer.experts(x, inds) * weights[..., None]).sum(axis=-2)
    dense = layer.experts.dense(x, inds, weights)
    assert mx.allclose(routed, dense, atol=1e-5).item()
    # a token's output does not depend on the tokens beside it, on either path
    alone = (layer.experts(x[:1], inds[:1]) * weights[:1, :, None]).sum(axis=-2)
    assert mx.allclose(routed[:1], alone, atol=1e-5).item()
