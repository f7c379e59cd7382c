"""Growing depth: a deeper model initialised from a trained shallower one, computing
exactly the same function at step 0.

Each source layer is repeated `factor` times in place (layer 0, a dense layer, is kept
once so the dense/MoE split stays at `first_k_dense_replace`). The first copy of a layer
is the trained layer; the others are copies whose output projections (attention's
`o_proj`, the experts' and shared experts' `down_proj`, a dense MLP's `down_proj`) are
zero, so each adds nothing to the residual stream until training moves them: the grown
model starts at the source model's loss and its MTP layer sees the same hidden states.
Embeddings, the final norm, the head, the MTP layer and the routers' correction biases
are copied. This file builds models; it reads and writes no files.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from ..engine.model import Model

# Parameters whose zeroing makes a decoder layer the identity on the residual stream.
OUTPUT_PROJECTIONS = (
    "self_attn.o_proj.weight",
    "mlp.down_proj.weight",
    "mlp.experts.down_proj",
    "mlp.shared_experts.down_proj.weight",
)


def layer_sources(source_layers: int, dense_layers: int, target_layers: int) -> list[tuple[int, bool]]:
    """For each target layer: (source layer, whether it is the trained copy).

    Dense layers are kept once; the MoE layers are each repeated so that the target's
    MoE layers are spread evenly over the source's, earlier source layers taking any
    remainder."""
    moe_src = source_layers - dense_layers
    moe_dst = target_layers - dense_layers
    if moe_src < 1 or moe_dst < moe_src:
        raise ValueError(f"cannot grow {source_layers} layers ({dense_layers} dense) to {target_layers}")
    plan = [(i, True) for i in range(dense_layers)]
    base, extra = divmod(moe_dst, moe_src)
    for j in range(moe_src):
        copies = base + (1 if j < extra else 0)
        plan.extend((dense_layers + j, c == 0) for c in range(copies))
    return plan


def grow(source: Model, target_layers: int) -> tuple[Model, dict]:
    """A `target_layers`-deep model from `source`, same function at step 0; returns the
    model and its config overrides (num_hidden_layers)."""
    args = source.args
    new_args = dataclasses.replace(args, num_hidden_layers=target_layers)
    has_indexer = hasattr(source.layers[0], "indexer")
    model = Model(new_args, with_mtp=True, with_indexer=has_indexer)
    src = dict(tree_flatten(source.parameters()))
    plan = layer_sources(args.num_hidden_layers, args.first_k_dense_replace, target_layers)
    weights = []
    for name, ref in tree_flatten(model.parameters()):
        if name.startswith("layers."):
            _, idx, rest = name.split(".", 2)
            layer, trained = plan[int(idx)]
            arr = src[f"layers.{layer}.{rest}"]
            if not trained and rest in OUTPUT_PROJECTIONS:
                arr = mx.zeros_like(arr)
        else:
            arr = src[name]
        if arr.shape != ref.shape:
            raise ValueError(f"{name}: source shape {arr.shape} != target {ref.shape}")
        weights.append((name, arr))
    model.update(tree_unflatten(weights))
    model.freeze(keys=["e_score_correction_bias"])
    mx.eval(model.parameters())
    return model, {"num_hidden_layers": target_layers}
