"""The plain-Python layout of uniform passes (decode, or rows verifying as many drafts each)
equals the general numpy layout."""

import mlx.core as mx
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.engine.layout import COMPILE_MAX_TOKENS, _general_layout, _uniform_layout, build_layout


def _arrays(layout):
    spec, arrays = layout.ctx.flatten()
    return spec, [a.tolist() for a in arrays], layout.first, layout.n_tokens


@st.composite
def uniform_pass(draw):
    T = draw(st.sampled_from([1, 2, 3, 5, 9, 17]))  # decode, then verify passes of k + 1 tokens
    starts = draw(st.lists(st.integers(0, 300), min_size=1, max_size=6))
    # Each row holds the blocks its reach needs, sometimes one more (a rejected draft's).
    blocks = [
        draw(
            st.lists(
                st.integers(1, 400),
                min_size=(s + T - 1) // 16 + 1,
                max_size=(s + T - 1) // 16 + 2,
                unique=True,
            )
        )
        for s in starts
    ]
    return starts, T, blocks


@settings(max_examples=200, deadline=None)
@given(uniform_pass())
def test_uniform_fast_path_matches_general_layout(case):
    starts, T, blocks = case
    # t_cap 1: the launcher's uniform verify pass (unpadded), as build_layout takes it
    assert build_layout(starts, [T] * len(starts), blocks, 16, t_cap=1).ctx.from_rows is None
    fast = _uniform_layout(starts, T, blocks, 16)
    general = _general_layout(starts, [T] * len(starts), blocks, 16, 1)
    assert _arrays(fast) == _arrays(general)
    assert [g.read_slots.tolist() for g in fast.ctx.groups] == [
        g.read_slots.tolist() for g in general.ctx.groups
    ]
    assert mx.array_equal(fast.ctx.groups[0].mask, general.ctx.groups[0].mask)


def test_rows_are_padded_to_a_shared_shape_only_when_the_pass_compiles():
    """Compiled passes bucket row lengths (few traced shapes); longer passes run eagerly
    and pad rows to the longest one only."""
    blocks = [list(range(1 + 20 * b, 21 + 20 * b)) for b in range(4)]
    short = build_layout([0, 0], [5, 7], blocks[:2], 16)  # 12 tokens: compiled
    assert [g.T for g in short.ctx.groups] == [8]
    long = build_layout([0, 40, 3, 9], [137, 120, 90, 137], blocks, 16)  # 484 tokens: eager
    assert [g.T for g in long.ctx.groups] == [137] and long.n_tokens > COMPILE_MAX_TOKENS
    uniform = build_layout([0] * 4, [100] * 4, blocks, 16)
    assert [g.T for g in uniform.ctx.groups] == [100] and uniform.ctx.from_rows is None


def test_rows_verifying_drafts_group_apart_from_a_prefill_chunk():
    """A row verifying 8 drafts padded to a 96-token chunk would compute attention for 96
    query positions: decode rows, verifying rows and chunks each form their own group,
    and every packed token comes back from its group to where it was."""
    blocks = [list(range(1 + 20 * b, 21 + 20 * b)) for b in range(5)]
    lens = [96, 9, 1, 9, 3]
    lay = build_layout([0, 150, 160, 170, 180], lens, blocks, 16)
    assert sorted(g.T for g in lay.ctx.groups) == [1, 9, 96]
    n = sum(lens)
    tokens = mx.arange(lay.n_tokens)
    back = lay.ctx.packed([g.rows(tokens) for g in lay.ctx.groups])
    assert back[:n].tolist() == list(range(n))
