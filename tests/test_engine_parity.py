"""Parity with mlx-lm's glm4_moe on the same directory: greedy tokens at batch 1 and in
a mixed-length batch, and logits to fp32 tolerance."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CONFIGS
from mlx_lm.utils import load_model

from runner.engine import Engine
from runner.engine.checkpoint import load_model as our_load
from runner.engine.checkpoint import read_args

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12, 13], [20, 21], list(range(40, 77)), [300]]


EOS = 0  # random checkpoints use "<|endoftext|>" = 0; the engine keeps it and stops


def reference_greedy(model, prompt: list[int], n: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(mx.argmax(model(mx.array([tokens]))[0, -1])))
        if tokens[-1] == EOS:
            break
    return tokens[len(prompt) :]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_mlx_lm(checkpoints, name):
    ref, _ = load_model(checkpoints[name])
    ours = our_load(checkpoints[name], read_args(checkpoints[name]), with_mtp=True, with_indexer=False)
    x = mx.array([PROMPTS[2]])
    ref_logits = np.array(ref(x))
    our_logits = np.array(ours(x)[0])
    np.testing.assert_allclose(our_logits, ref_logits, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("compile", [False, True])
def test_greedy_tokens_match_mlx_lm(checkpoints, name, compile):
    ref, _ = load_model(checkpoints[name])
    expected = [reference_greedy(ref, p, 10) for p in PROMPTS]
    solo = Engine.from_pretrained(checkpoints[name], max_batch_size=1, compile=compile)
    assert [solo.generate([p], max_new_tokens=10)[0] for p in PROMPTS] == expected
    batched = Engine.from_pretrained(checkpoints[name], max_batch_size=4, prefill_chunk=16, compile=compile)
    assert batched.generate(PROMPTS, max_new_tokens=10) == expected


def test_paged_pass_logits_equal_plain_forward(tiny_checkpoint):
    """The first decode logits after a chunked, batched prefill equal a plain forward's."""
    eng = Engine.from_pretrained(tiny_checkpoint, max_batch_size=4, prefill_chunk=5, compile=False)
    ref = eng.model
    for p in PROMPTS:
        eng.add_request(p, max_new_tokens=1)
    firsts = {}
    while eng.has_work():
        for ev in eng.step():
            firsts[ev.request_id] = ev.tokens[0]
    for i, p in enumerate(PROMPTS):
        assert firsts[i] == int(mx.argmax(ref(mx.array([p]))[0][0, -1]))
