"""Draft trees at one sequence (engine/drafting/tree.py): the tree never accepts less than
its chain, its attention mask shows each node its ancestors only, the leaves that join
are the ones that pay by the costs given, and inside the engine a tree row's greedy
output is what no drafting gives, with leaves that land moving their keys (the shipped
tiny checkpoint lands some).

Costs are synthetic inputs (the choice is pure logic over them), so the verdicts are
known whatever this machine's speed."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.engine import Engine, EngineConfig
from runner.engine.drafting.row_lengths import ConfidenceCalibration
from runner.engine.drafting.tree import (
    ancestors,
    chain_of,
    cost_of,
    depths,
    grow,
    moves,
    plan_leaves,
    second_choices,
    walk,
)
from runner.engine.layout import RowGroup


def _chain_accepts(chain: list[int], greedy_along_chain: list[int]) -> int:
    m = 0
    while m < len(chain) and chain[m] == greedy_along_chain[m]:
        m += 1
    return m


@settings(max_examples=300, deadline=None)
@given(
    chain=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    leaves=st.lists(st.sampled_from([1, 2]), max_size=2, unique=True),
    alt_tokens=st.lists(st.integers(0, 3), min_size=2, max_size=2),
    greedy=st.lists(st.integers(0, 3), min_size=11, max_size=11),
)
def test_a_tree_never_accepts_less_than_its_chain_and_keeps_only_what_the_target_chose(
    chain, leaves, alt_tokens, greedy
):
    leaves = [j for j in leaves if j <= len(chain)]
    alts = [(t, 0.1) for t in alt_tokens]
    tokens, parents = grow(chain, alts, leaves)
    assert chain_of(tokens, parents) == chain
    path = walk(tokens, parents, greedy)
    # The chain alone, verified as a chain: node i's logits are greedy[i - 1]'s position.
    assert len(path) >= _chain_accepts(chain, greedy[: len(chain)])
    node, d = 0, depths(parents)
    for i in path:  # every kept node hangs from the one before and is the target's token there
        assert parents[i - 1] == node and tokens[i - 1] == greedy[node] and d[i] == d[node] + 1
        node = i
    # No child of the last kept node holds the target's token there (the walk went as far as it could).
    assert all(not (p == node and t == greedy[node]) for t, p in zip(tokens, parents))
    assert all(depth < node_ for node_, depth in moves(path))  # a moved node sits past its depth


def test_ancestors_and_depths_of_a_chain_with_two_leaves():
    # nodes 1-3 the chain, node 4 a leaf at depth 1, node 5 a leaf at depth 2
    parents = [0, 1, 2, 0, 1]
    assert depths(parents) == [0, 1, 2, 3, 1, 2]
    seen = ancestors(parents)
    assert seen[3].tolist() == [True, True, True, True, False, False]
    assert seen[4].tolist() == [True, False, False, False, True, False]
    assert seen[5].tolist() == [True, True, False, False, False, True]
    assert moves([1, 5]) == [(5, 2)] and moves([1, 2]) == [] and moves([4]) == [(4, 1)]


def test_a_tree_rows_mask_shows_the_context_and_the_nodes_ancestors_only():
    parents = [0, 1, 0]  # chain of 2, a leaf at depth 1
    start, bs = 5, 4
    group = RowGroup(
        None,
        mx.array([[1, 2, 3]], mx.int32),
        mx.array([start], mx.int32),
        4,
        bs,
        tree=mx.array(ancestors(parents)[None]),
    )
    mask = np.array(group.mask)[0, 0]  # (T, S)
    assert mask.shape == (4, 12)
    assert mask[:, :start].all()  # every node sees the committed context
    assert not mask[:, start + 4 :].any()  # and nothing past this pass's slots
    assert mask[:, start : start + 4].tolist() == ancestors(parents).tolist()


def test_second_choices_skip_the_draft_and_give_its_probability():
    logits = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]], np.float32))
    alts = second_choices(logits, [0, 2])
    assert [t for t, _ in alts] == [1, 1]
    assert abs(alts[0][1] - 0.3) < 1e-6 and abs(alts[1][1] - 0.2) < 1e-6


def test_a_tree_is_priced_as_a_chain_of_as_many_drafts():
    costs = {0: 1.0, 2: 1.2, 4: 1.6, 8: 2.4}
    assert cost_of(costs, 4) == 1.6
    assert abs(cost_of(costs, 6) - 2.0) < 1e-9  # between measured lengths
    assert abs(cost_of(costs, 10) - 2.8) < 1e-9  # past the longest: the last slope
    assert cost_of({0: 1.0}, 3) is None


def test_leaves_join_when_they_pay_and_not_otherwise():
    cal = ConfidenceCalibration()  # no evidence: a confidence bin's midpoint
    conf, alts = [0.55, 0.95, 0.95, 0.95], [(7, 0.35), (9, 0.03)]
    cheap = {0: 1.0, 4: 1.2, 8: 1.4}
    dear = {0: 1.0, 4: 1.2, 5: 2.4, 8: 4.0}
    joined = plan_leaves(cal, conf, alts, 2, cheap)
    assert joined.leaves[0] == 1 and "tree:" in joined.reason  # the likelier leaf first
    assert plan_leaves(cal, conf, alts, 2, dear).leaves == []
    assert plan_leaves(cal, conf, alts, 2, None).leaves == [1, 2]  # fixed: every leaf
    assert plan_leaves(cal, conf[:1], alts, 2, None).leaves == [1]  # a leaf needs its sibling


def test_knobs_that_cannot_grow_a_tree_are_refused(tiny_checkpoint):
    EngineConfig.from_kwargs(draft_tree=2)  # valid alone: a declaration checks knobs one by one first
    for knobs, words in (
        (dict(mtp=True, draft_tree=2), "drafter = 'block'"),
        (dict(mtp=True, drafter="block", draft_tree=3), "from 0 to 2"),
        (dict(mtp=True, drafter="block", draft_tree=1, index_topk=4), "index_topk = 0"),
    ):
        with pytest.raises(ValueError, match="engine knob draft_tree") as err:
            Engine.from_pretrained(tiny_checkpoint, **knobs)
        assert words in str(err.value)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_shipped_tiny_tree_is_lossless_and_lands_leaves(k):
    prompts = [[int(t) for t in np.random.default_rng(i).integers(10, 2000, 16 + 5 * i)] for i in range(4)]
    plain = Engine.from_pretrained("tiny", max_batch_size=1).generate(prompts, max_new_tokens=32)
    eng = Engine.from_pretrained(
        "tiny",
        max_batch_size=1,
        mtp=True,
        drafter="block",
        draft_tokens=k,
        draft_tree=2,
        prefix_cache_bytes="1MB",
    )
    outs, passes, _ = eng.collect(prompts, 32)
    assert outs == plain
    assert eng.tree_leaves_landed > 0  # some passes kept a leaf: its keys moved, and the output still held
    assert max(len(p.draft_lengths) - 1 for p in passes if p.draft_lengths) == k + 2
