"""k drafts a row (draft_tokens): greedy losslessness with the chained MTP drafter and with
a drafter of known proposals, mixed passes, stop rules inside an accepted block, the
sampling distribution, and the knobs' errors."""

from __future__ import annotations

import shutil
from collections import Counter

import numpy as np
import pytest
from chi_square import chi_square_p
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.engine import Engine, EngineConfig
from runner.engine.checkpoint import BLOCK_DRAFTER_FILE
from runner.engine.drafting.drafter import TargetOutputs
from runner.engine.sequence import Sequence

prompts_st = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=30), min_size=1, max_size=5)
ks = st.sampled_from([1, 2, 4, 8, 16])


class KnownDrafter:
    """Proposes, per row and pass, 0..k tokens: the row's true continuation (from a plain
    run) with some tokens replaced, so acceptance, rejection, rows drafting different k and
    rows not drafting all occur in one pass. It keeps no state of its own."""

    eager = False
    looked_up = 0

    def __init__(self, reference: dict[tuple, list[int]], vocab: int, seed: int, wrong: float):
        self.reference, self.vocab, self.wrong = reference, vocab, wrong
        self.rng = np.random.default_rng(seed)
        self.proposed: list[list[int]] = []  # drafts per row, per call

    def draft(self, rows: list[Sequence], target: TargetOutputs, k: int) -> None:
        sizes = []
        for seq in rows:
            seq.drafts = []
            if seq.finished or seq.prefilling or not k:
                continue
            truth = self.reference[tuple(seq.prompt)][seq.num_output :]
            for i in range(int(self.rng.integers(0, k + 1))):
                ok = i < len(truth) and self.rng.random() > self.wrong
                seq.drafts.append(truth[i] if ok else int(self.rng.integers(1, self.vocab)))
            sizes.append(len(seq.drafts))
        self.proposed.append(sizes)

    def rollback(self, seq: Sequence, verified: int) -> None:
        pass

    def release(self, seq: Sequence) -> None:
        pass

    def verified_in_pool(self, seq: Sequence) -> int:
        return seq.computed

    def row_bytes(self, seq: Sequence) -> int:
        return 0


def _with_drafter(eng: Engine, drafter) -> Engine:
    eng.drafter = eng.launcher.drafter = drafter
    return eng


@settings(max_examples=40)
@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    k=ks,
    sync=st.sampled_from(["eager", "lazy"]),
    cache=st.sampled_from([0, 4096]),
    topk=st.sampled_from([0, 4]),
    max_new=st.integers(1, 12),
    chunk=st.sampled_from([3, 16]),
    policy=st.sampled_from(["always", "solo", "adaptive"]),
)
def test_chained_mtp_is_lossless_for_any_k(
    engine_cache, prompts, batch, k, sync, cache, topk, max_new, chunk, policy
):
    plain = engine_cache(max_batch_size=1, index_topk=topk).generate(prompts, max_new_tokens=max_new)
    eng = engine_cache(
        max_batch_size=batch,
        prefill_chunk=chunk,
        mtp=True,
        draft_tokens=k,
        draft_policy=policy,
        mtp_sync=sync,
        prefix_cache_bytes=cache,
        index_topk=topk,
        kv_block_size=4,
    )
    outs, passes, _ = eng.collect(prompts, max_new)
    assert outs == plain
    assert sum(p.emitted for p in passes) == sum(map(len, outs))
    for p in passes:
        assert 0 <= p.accepted <= p.drafted <= p.width * k
        if p.accepted_lengths:  # rows that kept m drafts, m = 0..k
            assert len(p.accepted_lengths) <= k + 1
            assert sum(m * n for m, n in enumerate(p.accepted_lengths)) == p.accepted
    if cache:
        assert eng.prefix.cached_bytes() <= cache
    assert eng.state_bytes() == 0 and eng.pool.blocks_in_use() == len(eng.prefix.entries)


@settings(max_examples=40)
@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    k=ks,
    max_new=st.integers(1, 12),
    wrong=st.sampled_from([0.0, 0.2, 0.6]),
    eos_at=st.integers(0, 8),
    cache=st.sampled_from([0, 4096]),
    topk=st.sampled_from([0, 4]),
    seed=st.integers(0, 1000),
)
def test_known_drafts_commit_exactly_the_plain_tokens(
    engine_cache, prompts, batch, k, max_new, wrong, eos_at, cache, topk, seed
):
    """Accepted blocks that run into EOS or max_new_tokens are cut token by token; rows
    with different numbers of drafts, rows without and prefill chunks share passes."""
    alone = engine_cache(max_batch_size=1, index_topk=topk)
    alone.eos = frozenset()
    free = alone.generate(prompts, max_new_tokens=max_new)
    tokens = [t for out in free for t in out[1:]]  # an EOS after the first token: mid-block
    eos = frozenset({tokens[eos_at % len(tokens)]}) if tokens else frozenset()
    alone.eos = eos
    plain = alone.generate(prompts, max_new_tokens=max_new)
    reference = {tuple(p): out for p, out in zip(prompts, plain)}
    eng = engine_cache(
        max_batch_size=batch, prefill_chunk=4, draft_tokens=k, prefix_cache_bytes=cache, index_topk=topk
    )
    drafter = KnownDrafter(reference, eng.args.vocab_size, seed, wrong)
    _with_drafter(eng, drafter)
    eng.eos = eos
    try:
        outs, passes, reqs = eng.collect(prompts, max_new)
    finally:
        _with_drafter(eng, None)
        alone.eos = eng.eos = frozenset({0})
    assert outs == plain
    assert sum(p.emitted for p in passes) == sum(map(len, outs)) == sum(r.output_tokens for r in reqs)
    assert all(len(o) <= max_new for o in outs)
    if wrong == 0.0:  # every true draft is kept: rejections only past a row's end
        for p in passes:
            if p.accepted_lengths:
                assert sum(m * n for m, n in enumerate(p.accepted_lengths)) == p.accepted
    assert eng.state_bytes() == 0


def test_a_pass_holds_prefill_chunks_and_rows_drafting_different_k(engine_cache):
    prompts = [list(range(1, 6)), list(range(7, 60)), list(range(3, 9)), [5, 6]]
    alone = engine_cache(max_batch_size=1)
    reference = {tuple(p): out for p, out in zip(prompts, alone.generate(prompts, max_new_tokens=10))}
    eng = engine_cache(max_batch_size=4, prefill_chunk=4, draft_tokens=6)
    drafter = KnownDrafter(reference, eng.args.vocab_size, 3, 0.3)
    plans = []
    launch = eng.launcher.launch

    def recording_launch():
        cur = launch()
        plans.append((cur.plan.prefill_tokens, list(cur.plan.drafted)))
        return cur

    eng.launcher.launch = recording_launch
    _with_drafter(eng, drafter)
    try:
        outs = eng.generate(prompts, max_new_tokens=10)
    finally:
        _with_drafter(eng, None)
        del eng.launcher.launch
    assert outs == [reference[tuple(p)] for p in prompts]
    mixed = [d for prefill, d in plans if prefill and len({x for x in d if x}) >= 2 and 0 in d]
    assert mixed, plans  # a prefill chunk, rows drafting different k and rows not drafting


def test_shipped_tiny_chained_mtp_is_lossless_and_accepts_past_the_first_position():
    prompts = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 16 + 5 * i)] for i in range(4)]
    plain = Engine.from_pretrained("tiny", max_batch_size=4).generate(prompts, max_new_tokens=24)
    for k in (2, 4, 8, 16):
        eng = Engine.from_pretrained(
            "tiny", max_batch_size=4, mtp=True, draft_tokens=k, prefix_cache_bytes="1MB"
        )
        outs, passes, _ = eng.collect(prompts, 24)
        assert outs == plain, k
        hist = Counter()
        for p in passes:
            hist.update(dict(enumerate(p.accepted_lengths)))
        assert sum(n for m, n in hist.items() if m >= 2) > 0, (k, hist)  # the chain's second draft lands


def test_sampling_with_k_drafts_keeps_the_distribution(checkpoints, tmp_path):
    """temperature > 0: the tokens committed through k drafts are distributed as without
    drafting (chi-square against plain sampling, per output position)."""
    ckpt = checkpoints["base"]
    prompts = [[5, 17, 42]] * 600
    plain = Engine.from_pretrained(ckpt, max_batch_size=4, compile=False)
    spec = Engine.from_pretrained(ckpt, max_batch_size=4, compile=False, mtp=True, draft_tokens=4)
    a = plain.generate(prompts, max_new_tokens=5, temperature=0.1, seed=1)
    outs, passes, _ = spec.collect(prompts, 5, temperature=0.1, seed=100_000)
    assert sum(p.accepted for p in passes) > 20 and sum(p.drafted for p in passes) > sum(
        p.accepted for p in passes
    )
    for pos in range(1, 4):  # -1: the output ended (EOS) before this position
        p, df = chi_square_p(*(Counter(o[pos] if pos < len(o) else -1 for o in x) for x in (a, outs)))
        assert df >= 3 and p > 0.001, (pos, p, df)


def test_draft_tokens_and_drafter_knobs_are_checked(checkpoints, tmp_path):
    for bad in (0, 17, 2.0, True, "4"):
        with pytest.raises(ValueError, match="engine knob draft_tokens: expected an integer from 1 to 16"):
            EngineConfig(draft_tokens=bad)
    with pytest.raises(ValueError, match="engine knob drafter: expected one of"):
        EngineConfig(drafter="eagle")
    bare = tmp_path / "bare"
    shutil.copytree(checkpoints["base"], bare)
    with pytest.raises(
        ValueError, match=f"engine knob drafter: {bare} has no block drafter \\({BLOCK_DRAFTER_FILE}\\)"
    ):
        Engine.check_knobs(bare, mtp=True, drafter="block")
    assert Engine.check_knobs(bare, mtp=True, draft_tokens=16).draft_tokens == 16


def test_a_block_drafter_missing_from_the_checkpoint_is_a_declaration_error(checkpoints, tmp_path):
    from runner.experiments.declaration import DeclarationError, load

    path = tmp_path / "block.toml"
    path.write_text(
        f'title = "t"\nmodel = "{checkpoints["base"]}"\nseed = 7\nrounds = 2\nconcurrency = [1, 2]\n'
        '[workload]\nprompts = "heldout"\nrequests_per_client = 2\n'
        "prompt_tokens = [8, 16]\nmax_new_tokens = 8\n"
        "[engine]\nmax_batch_size = 2\n"
        '[arms.off]\nmtp = false\n[arms.block-8]\nmtp = true\ndrafter = "block"\ndraft_tokens = 8\n'
    )
    with pytest.raises(DeclarationError) as err:
        load(path)
    [issue] = err.value.issues
    assert issue.key == "arms.block-8.drafter" and issue.file == str(path)
    assert f"{checkpoints['base']} has no block drafter ({BLOCK_DRAFTER_FILE})" in str(err.value)
