"""Temperature / top-p sampling: seeded, reproducible, and independent of co-runners."""

from __future__ import annotations

import numpy as np

from runner.engine.sampler import probs

PROMPTS = [[5, 6, 7, 8], [20, 21, 22, 23, 24, 25, 26], [40]]


def test_seeded_sampling_is_reproducible_and_batch_independent(engine_cache):
    batched = engine_cache(max_batch_size=3).generate(
        PROMPTS, max_new_tokens=12, temperature=0.9, top_p=0.95, seed=11
    )
    again = engine_cache(max_batch_size=3).generate(
        PROMPTS, max_new_tokens=12, temperature=0.9, top_p=0.95, seed=11
    )
    assert batched == again
    solo = [
        engine_cache(max_batch_size=1).generate(
            [p], max_new_tokens=12, temperature=0.9, top_p=0.95, seed=11 + i
        )[0]
        for i, p in enumerate(PROMPTS)
    ]
    assert solo == batched
    other = engine_cache(max_batch_size=3).generate(
        PROMPTS, max_new_tokens=12, temperature=0.9, top_p=0.95, seed=12
    )
    assert other != batched
    greedy = engine_cache(max_batch_size=3).generate(PROMPTS, max_new_tokens=12)
    assert greedy != batched


def test_speculative_sampling_is_seeded_too(engine_cache):
    eng = engine_cache(max_batch_size=3, mtp=True, draft_policy="always")
    a = eng.generate(PROMPTS, max_new_tokens=10, temperature=1.0, seed=3)
    b = eng.generate(PROMPTS, max_new_tokens=10, temperature=1.0, seed=3)
    assert a == b and all(len(x) == 10 or x[-1] == 0 for x in a)


def test_top_p_keeps_the_smallest_nucleus():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = probs(logits, temperature=1.0, top_p=0.75)  # 0.5 + 0.3 is the first mass >= 0.75
    np.testing.assert_allclose(p, [0.625, 0.375, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(probs(logits, 1.0, 1.0), [0.5, 0.3, 0.15, 0.05], atol=1e-12)
    sharp = probs(logits, temperature=0.1, top_p=1.0)
    assert sharp[0] > 0.99
