"""Tiny random checkpoints in the Hugging Face GLM-4.5 MoE layout, for tests and demos.

Writes config.json, model.safetensors (with an MTP layer), indexer.safetensors,
tokenizer.json and heldout.jsonl in well under a second. Deterministic in `seed`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import mlx.core as mx

from ..engine.checkpoint import save_checkpoint
from ..engine.config import ModelArgs
from ..engine.model import Model

BASE_CONFIG = dict(
    model_type="glm4_moe",
    vocab_size=320,
    hidden_size=32,
    intermediate_size=64,
    moe_intermediate_size=16,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    n_routed_experts=8,
    num_experts_per_tok=2,
    n_shared_experts=1,
    first_k_dense_replace=1,
    n_group=1,
    topk_group=1,
    norm_topk_prob=True,
    routed_scaling_factor=1.0,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    partial_rotary_factor=0.5,
    use_qk_norm=False,
    attention_bias=False,
    tie_word_embeddings=False,
    max_position_embeddings=4096,
    num_nextn_predict_layers=1,
    index_n_heads=2,
    index_head_dim=8,
    rope_scaling=None,
)
_WORDS = (
    "the of and to in is for return self def import if else while with as not "
    "none true false class lambda yield from try except raise pass print list "
    "dict set tuple value index count data key name path file line text"
).split()


def _texts(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(40, 160))) for _ in range(n)]


def write_tokenizer(directory: Path, corpus: list[str], vocab_size: int) -> int:
    """Byte-level BPE trained on `corpus`; returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2)
        + "\n"
    )
    return tok.get_vocab_size()


def write_random_checkpoint(
    directory: str | Path, seed: int = 0, with_indexer: bool = True, **overrides
) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    config = {**BASE_CONFIG, **overrides}
    n_vocab = write_tokenizer(directory, _texts(rng, 50), config["vocab_size"])
    config["vocab_size"] = max(config["vocab_size"], n_vocab)
    config["eos_token_id"] = 0  # "<|endoftext|>" is the tokenizer's first special token
    args = ModelArgs.from_dict(config)
    mx.random.seed(seed)
    model = Model(args, with_mtp=True, with_indexer=with_indexer)
    # Give routers and biases real spread so routing choices are exercised.
    for layer in [*model.layers, model.mtp]:
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate.weight = mx.random.normal(layer.mlp.gate.weight.shape) * 0.5
            layer.mlp.gate.e_score_correction_bias = mx.random.normal((args.n_routed_experts,)) * 0.1
    model.embed_tokens.weight = mx.random.normal(model.embed_tokens.weight.shape)
    mx.eval(model.parameters())
    save_checkpoint(model, config, directory)
    with (directory / "heldout.jsonl").open("w") as f:
        for i, text in enumerate(_texts(rng, 24)):
            f.write(json.dumps({"id": f"random-{i}", "text": text}) + "\n")
    return directory
