"""The block drafter inside the engine (drafter = "block"): greedy output identical to no
drafting for any k, in mixed batches with the prefix cache and the indexer on; its
context holds verified positions only; sampling keeps the distribution; and the shipped
tiny drafter is lossless and lands drafts."""

from __future__ import annotations

import re
import shutil
from collections import Counter

import numpy as np
import pytest
from block_drafter_setup import small_drafter
from chi_square import chi_square_p
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.engine import Engine
from runner.engine.checkpoint import read_args
from runner.engine.drafting.block_drafter import (
    drafter_dir,
    save_block_drafter,
)


@pytest.fixture(scope="module")
def block_checkpoint(tiny_checkpoint, tmp_path_factory):
    """The random base checkpoint with a random block drafter beside it."""
    ckpt = tmp_path_factory.mktemp("block") / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    save_block_drafter(small_drafter(read_args(ckpt), 11), drafter_dir(ckpt))
    return ckpt


@pytest.fixture(scope="module")
def block_engines(block_checkpoint):
    cache: dict[tuple, Engine] = {}

    def get(**knobs) -> Engine:
        knobs.setdefault("compile", False)
        key = tuple(sorted(knobs.items()))
        if key not in cache:
            cache[key] = Engine.from_pretrained(block_checkpoint, **knobs)
        return cache[key]

    return get


prompts_st = st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=30), min_size=1, max_size=5)


@settings(max_examples=30, deadline=None)
@given(
    prompts=prompts_st,
    batch=st.integers(1, 4),
    k=st.sampled_from([1, 2, 4, 8, 16]),
    cache=st.sampled_from([0, 4096]),
    topk=st.sampled_from([0, 4]),
    max_new=st.integers(1, 12),
    chunk=st.sampled_from([3, 16]),
    policy=st.sampled_from(["always", "solo", "adaptive"]),
    tree=st.sampled_from([0, 2]),
    lookup=st.sampled_from([0, 1, 3]),
)
def test_block_drafting_is_lossless_for_any_k(
    block_engines, prompts, batch, k, cache, topk, max_new, chunk, policy, tree, lookup
):
    tree = 0 if topk else tree  # a draft tree needs dense attention
    plain = block_engines(max_batch_size=1, index_topk=topk).generate(prompts, max_new_tokens=max_new)
    eng = block_engines(
        max_batch_size=batch,
        prefill_chunk=chunk,
        mtp=True,
        drafter="block",
        draft_tokens=k,
        draft_policy=policy,
        prefix_cache_bytes=cache,
        index_topk=topk,
        kv_block_size=4,
        draft_tree=tree,
        draft_lookup=lookup,
    )
    outs, passes, _ = eng.collect(prompts, max_new)
    assert outs == plain
    for p in passes:
        assert 0 <= p.accepted <= p.drafted <= p.width * k + tree
    # Every retired row's drafter context is gone, and a live one never reaches past
    # the row's verified positions (checked after each pass below).
    assert eng.state_bytes() == 0 and not eng.drafter.cache._rows and not eng.drafter._backlog


def test_looked_up_drafts_are_lossless_beside_the_drafters_and_skip_its_pass():
    """Rows whose suffix occurred before draft by lookup, in the same batch as rows the
    drafter drafts for; output is the plain engine's, lookups are on the pass rows, and a
    lone row's looked-up drafts run no drafter pass. (The shipped tiny model soon repeats
    itself, so its rows look up; a random one may never.)"""
    prompts = [[3, 4, 5, 6, 7] * 6, list(range(40, 70)), list(range(300, 1300, 37))]
    plain = Engine.from_pretrained("tiny", max_batch_size=1, compile=False).generate(
        prompts, max_new_tokens=24
    )
    eng = Engine.from_pretrained(
        "tiny", max_batch_size=3, compile=False, mtp=True, drafter="block", draft_tokens=4, draft_lookup=3
    )
    outs, passes, _ = eng.collect(prompts, 24)
    assert outs == plain
    looked = [int(m) for p in passes for m in re.findall(r"looked up: (\d) of 3 rows", p.draft_reason)]
    assert any(0 < n < 3 for n in looked), [p.draft_reason for p in passes]  # beside drafter rows
    launched, launch = [], eng.drafter._launch_rows

    def counted(seqs, k):
        launched.append(len(seqs))
        return launch(seqs, k)

    eng.drafter._launch_rows = counted
    outs, passes, _ = eng.collect(prompts[:1], 24)
    assert outs == plain[:1]
    lone = [p for p in passes if "looked up: 1 of 1" in p.draft_reason]
    assert lone and len(launched) == sum(1 for p in passes if p.drafted) - len(lone)
    assert eng.state_bytes() == 0 and not eng.drafter._backlog


def test_the_context_never_holds_an_unverified_position(block_engines):
    """What the drafter holds of a row (its context and its backlog) ends exactly at the
    row's verified positions after every pass; a drafting row's context holds them all."""
    prompts = [list(range(3, 40)), list(range(50, 61)), [7, 8, 9]]
    eng = block_engines(
        max_batch_size=3, prefill_chunk=8, mtp=True, drafter="block", draft_tokens=4, draft_policy="solo"
    )
    for i, p in enumerate(prompts):
        eng.add_request(p, 10 + 6 * i)
    seen = backlogged = 0
    while eng.has_work():
        eng.step()
        for seq in eng.scheduler.running:
            d, rid = eng.drafter, seq.request_id
            assert d.cache.end(rid) <= seq.computed  # verified positions only
            if seq.prefilling:
                continue
            assert d._end(rid) == seq.computed  # and all of them
            if seq.drafts:
                assert d.cache.end(rid) == seq.computed and rid not in d._backlog
                seen += 1
            elif rid in d._backlog:
                backlogged += 1
    assert seen > 3 and backlogged > 3  # solo: batched passes backlog, the last row alone drafts


def test_block_drafting_state_bytes_count_the_context_and_backlog(block_engines):
    eng = block_engines(max_batch_size=2, mtp=True, drafter="block", draft_tokens=4)
    eng.add_request(list(range(1, 30)), 8)
    eng.step()  # prefill: its features are backlogged, then drafted from
    seq = eng.scheduler.running[0]
    d = eng.drafter
    assert d.row_bytes(seq) == d.cache.nbytes(seq.request_id) > 0
    assert eng.state_bytes() == len(seq.blocks) * eng.pool.block_bytes + d.row_bytes(seq)
    while eng.has_work():
        eng.step()


def test_block_sampling_keeps_the_distribution(block_checkpoint):
    prompts = [[5, 17, 42]] * 600
    plain = Engine.from_pretrained(block_checkpoint, max_batch_size=4, compile=False)
    spec = Engine.from_pretrained(
        block_checkpoint, max_batch_size=4, compile=False, mtp=True, drafter="block", draft_tokens=4
    )
    a = plain.generate(prompts, max_new_tokens=5, temperature=0.3, seed=1)
    outs, passes, _ = spec.collect(prompts, 5, temperature=0.3, seed=100_000)
    accepted = sum(p.accepted for p in passes)
    assert 100 < accepted < sum(p.drafted for p in passes)  # both branches of the test taken
    for pos in range(1, 4):
        p, df = chi_square_p(*(Counter(o[pos] if pos < len(o) else -1 for o in x) for x in (a, outs)))
        assert df >= 3 and p > 0.001, (pos, p, df)


def test_shipped_tiny_block_drafter_is_lossless_and_lands_drafts():
    prompts = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 16 + 5 * i)] for i in range(4)]
    plain = Engine.from_pretrained("tiny", max_batch_size=4).generate(prompts, max_new_tokens=24)
    for k in (2, 4, 8):
        eng = Engine.from_pretrained(
            "tiny", max_batch_size=4, mtp=True, drafter="block", draft_tokens=k, prefix_cache_bytes="1MB"
        )
        outs, passes, _ = eng.collect(prompts, 24)
        assert outs == plain, k
        assert sum(p.accepted for p in passes) > 0, k


def test_the_drafter_evaluation_runs_on_a_checkpoint(block_checkpoint):
    """`runner train --drafter block` ends with this evaluation (it once named a prompt
    reader that no longer existed, which only the end of a training run would show)."""
    from runner.train.drafter_eval import evaluate_drafter

    res = evaluate_drafter(block_checkpoint, limit=4, log=lambda m: None)
    assert res["prompts"] >= 1 and res["rounds"] > 0
    assert res["tau"] == pytest.approx(1 + sum(res["acceptance_at"]))


def test_a_block_arm_and_a_plain_arm_on_one_shelf_keep_their_own_graphs():
    """Engines of one model share compiled functions (shelf.py); the block drafter's
    target pass returns other outputs (its features), so it must not share those."""
    from runner.engine.shelf import Shelf

    shelf = Shelf()
    prompts = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 20 + 7 * i)] for i in range(3)]
    plain = Engine.from_pretrained("tiny", shelf=shelf, max_batch_size=4)
    block = Engine.from_pretrained(  # solo: its batched passes have the plain engine's shapes
        "tiny", shelf=shelf, max_batch_size=4, mtp=True, drafter="block", draft_tokens=4, draft_policy="solo"
    )
    assert block.model is plain.model
    for eng in (plain, block):
        eng.warmup(64)
    ref = plain.generate(prompts, max_new_tokens=12)
    outs, passes, _ = block.collect(prompts, 12)
    assert outs == ref and any(p.width > 1 and not p.drafted for p in passes)
    outs, passes, _ = block.collect(prompts[:1], 12)  # alone: it drafts
    assert outs == ref[:1] and any(p.drafted for p in passes)
    assert plain.generate(prompts, max_new_tokens=12) == ref
