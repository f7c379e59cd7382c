"""Queuing the next decode pass before reading the current one's tokens (pipeline=True)
changes no output and no accounting, also when rows stop at EOS inside a queued pass."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from runner.engine import Engine

prompts_st = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=24), min_size=1, max_size=6)
policies = st.sampled_from(["always", "solo", "adaptive", "never"])


def run(eng, prompts, max_new, eos):
    """Generate with `eos` as the stop set; returns outputs, pass events, queued passes."""
    saved, before = eng.eos, eng.passes_queued
    eng.eos = frozenset(eos)
    try:
        outs, passes, _ = eng.collect(prompts, max_new)
    finally:
        eng.eos = saved
    return outs, passes, eng.passes_queued - before


@settings(max_examples=40, deadline=None)
@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    mtp=st.booleans(),
    policy=policies,
    max_new=st.integers(1, 14),
    eos_rank=st.integers(0, 3),
    budget=st.sampled_from([0, 2, 5]),
)
def test_pipelined_output_and_accounting_match(
    engine_cache, prompts, batch, mtp, policy, max_new, eos_rank, budget
):
    plain = engine_cache(max_batch_size=1, pipeline=False)
    free_run, _, _ = run(plain, prompts, max_new, ())
    # A stop token the model really emits, so rows end at EOS mid-batch.
    common = [t for t, _ in Counter(t for o in free_run for t in o).most_common()]
    eos = {common[eos_rank % len(common)]}
    expected = [o[: o.index(t) + 1] if (t := next(iter(eos))) in o else o for o in free_run]
    knobs = dict(max_batch_size=batch, mtp=mtp, draft_policy=policy, max_pass_tokens=budget)
    eager, _, none_queued = run(engine_cache(pipeline=False, **knobs), prompts, max_new, eos)
    piped_eng = engine_cache(pipeline=True, **knobs)
    piped, passes, queued = run(piped_eng, prompts, max_new, eos)
    assert eager == piped == expected and none_queued == 0
    assert sum(p.emitted for p in passes) == sum(map(len, piped))
    for p in passes:
        assert 0 <= p.accepted <= p.drafted <= p.width <= batch
    assert piped_eng.state_bytes() == 0 and piped_eng.pool.blocks_in_use() == 0 and not piped_eng.has_work()
    # Passes are queued ahead whenever some row decodes three tokens past its first one
    # in passes after its prefill (a plain decode pass, then one queued behind it).
    if all(len(o) == max_new for o in expected) and max_new >= 4 and policy != "adaptive":
        assert queued > 0


def test_shipped_model_queues_passes_and_matches_compiled():
    """The compiled forward on the shipped checkpoint: same tokens with and without
    queuing, for plain decode and for MTP drafting; most decode passes are queued."""
    prompts = [[(7 * i + 3 * j) % 1500 + 10 for j in range(20 + i)] for i in range(4)]
    outs = {}
    for mtp in (False, True):
        for pipeline in (False, True):
            eng = Engine.from_pretrained("tiny", max_batch_size=4, mtp=mtp, pipeline=pipeline)
            outs[mtp, pipeline] = eng.generate(prompts, max_new_tokens=24)
            assert (eng.passes_queued > 10) == pipeline
    assert len({str(o) for o in outs.values()}) == 1
