"""Adaptive's re-measurements: one bad one does not decide, they cost at most a share of
the time, a width model keeps its branch within the margin and re-measures a neighbour
every refresh (batched: only one about to pay). Durations are inputs, as in
test_draft_policy.py, whose helpers these tests share."""

from __future__ import annotations

from collections import deque

from test_draft_policy import accept, feed, policy

from runner.engine.drafting.draft_cost import (
    CLIP,
    EXPLORE_SHARE,
    GAP,
    HISTORY,
    MIN_SIDE,
    REFRESH_EVERY,
    REFRESH_LEN,
    SETTLED,
    WidthModel,
    nearest,
    neighbours,
)


def test_one_bad_re_measurement_does_not_decide_alone():
    p = policy("adaptive")
    accept(p, 0.8)
    feed(p, 1, {1: 1.2e6, 0: 1.0e6})  # drafting pays 1.5x
    for _ in range(HISTORY):
        p.width(1).observe(1, int(1.2e6))  # a stretch of drafting
    for _ in range(4):
        p.width(1).observe(0, int(0.3e6))  # a window of freak-fast plain passes
    assert abs(p.widths[1].ratios()[(1, 0)] - 1.2) < 1e-9 and p.decide(1) == 1


def test_re_measurements_cost_at_most_a_share_of_the_time():
    p = policy("adaptive")
    accept(p, 0.8)
    feed(p, 1, {1: 2.0e6, 0: 1.0e6})  # plain pays (alone: batched, a draft priced 0.9 is not re-measured)
    starts, n = [], 0
    catch_up = int(40e6)  # a lazy MTP's catch-up, paid in each window's first pass
    while len(starts) < 3:
        n += 1
        k = p.decide(1)
        if k and (not starts or n > starts[-1] + REFRESH_LEN):
            starts.append(n)
        p.width(1).spend((catch_up if k and n == starts[-1] else 0) + int(2.0e6 if k else 1.0e6))
    # each window costs the catch-up (clipped: a pass that long counts as CLIP kept
    # passes) plus REFRESH_LEN passes at twice the price: the next one waits until that
    # is at most EXPLORE_SHARE of the time since
    cost = CLIP * 1.0e6 + (REFRESH_LEN - 1) * 1.0e6
    for a, b in zip(starts, starts[1:]):
        assert (b - a - REFRESH_LEN) * 1.0e6 >= cost / EXPLORE_SHARE - 2.0e6


def test_unpriced_re_measurements_come_every_refresh_and_can_flip_the_branch():
    p = policy("adaptive")
    accept(p, 0.8)
    feed(p, 1, {1: 2.0e6, 0: 1.0e6})  # plain pays
    starts, n = [], 0
    while len(starts) < 4:
        n += 1
        if p.decide(1) and (not starts or n > starts[-1] + REFRESH_LEN):
            starts.append(n)
    assert [b - a - REFRESH_LEN for a, b in zip(starts, starts[1:])] == [REFRESH_EVERY] * 3
    while p.widths[1].trying is None:  # the next re-measurement ...
        p.decide(1)
    feed(p, 1, {1: 1.0e6, 0: 1.0e6})  # ... finds that drafting pays now
    for _ in range(REFRESH_LEN):
        p.decide(1)
    assert all(p.decide(1) == 1 for _ in range(REFRESH_EVERY - 1))


def test_a_width_model_keeps_its_branch_within_the_margin():
    m = WidthModel()
    lengths = (0, 1, 2)
    assert m.choose({0: 1.0, 1: 1.02}, lengths, climb=False) == 1  # no branch yet: the best
    assert m.choose({0: 1.0, 1: 0.97}, lengths, climb=False) == 1  # within the margin: stays
    assert m.choose({0: 1.0, 1: 0.95}, lengths, climb=False) == 0  # beyond it: none
    assert m.choose({0: 1.0, 1: 1.03}, lengths, climb=False) == 0
    assert m.choose({0: 1.0, 1: 1.05}, lengths, climb=False) == 1  # and back only beyond it again


def test_a_width_model_re_measures_a_neighbour_every_refresh():
    m = WidthModel()
    lengths = (0, 1, 2, 4)
    values = {0: 0.5, 1: 0.8, 2: 1.0, 4: 0.9}
    taken = [m.choose(values, lengths, climb=False) for _ in range(2 * (REFRESH_EVERY + REFRESH_LEN))]
    windows = [(i, k) for i, k in enumerate(taken, 1) if k != 2]
    first = list(range(REFRESH_EVERY, REFRESH_EVERY + REFRESH_LEN))
    second = [i + REFRESH_EVERY + REFRESH_LEN for i in first]
    assert [i for i, _ in windows] == first + second
    assert {k for i, k in windows if i in first} == {1}  # the shorter neighbour first
    assert {k for i, k in windows if i in second} == {4}
    assert m.kept == 2 and m.trying is None


def test_batched_only_a_neighbour_about_to_pay_is_re_measured():
    # As adaptive priced width 4 (runner passes' reasons): one draft at 0.80 (unseen code)
    # to 0.86 (held-out) of passes without drafts, the longer ones closer but none paying. A
    # window of k = 1 costs six slow passes and sets rows that started in step apart.
    m = WidthModel()
    lengths = (0, 1, 2, 4, 8)
    values = {0: 1.0, 1: 0.86, 2: 0.93, 4: 0.95, 8: 0.8}
    taken = [m.choose(values, lengths, True, batched=True) for _ in range(3 * (REFRESH_EVERY + REFRESH_LEN))]
    assert set(taken) == {0} and m.trying is None
    values[1] = 0.97  # within SWITCH_MARGIN of the best: measured, at once (never compared)
    taken = [m.choose(values, lengths, True, batched=True) for _ in range(REFRESH_LEN)]
    assert taken == [1] * REFRESH_LEN
    # A lone row's neighbour is measured however it is priced (the warm-up's costs can be far off).
    alone = WidthModel()
    values[1] = 0.7
    assert [alone.choose(values, lengths, True) for _ in range(REFRESH_LEN)] == [1] * REFRESH_LEN


def test_batched_with_prompts_held_the_refresh_steps_past_a_length_priced_out():
    # As adaptive priced width 4 under prefill_hold (runner passes' reasons): one draft
    # priced out, two and four level with none; kept at 0, a refresh stuck on the
    # neighbour (k = 1) never measured them again, for whole runs.
    m = WidthModel(kept=0)  # kept by earlier costs; 2 does not pay by SWITCH_MARGIN
    lengths = (0, 1, 2, 4, 8)
    values = {0: 1.0, 1: 0.93, 2: 1.03, 4: 1.02, 8: 0.85}
    held = WidthModel(kept=0)  # new prompts wait for the rows decoding (prefill_hold)
    taken = [held.choose(values, lengths, True, True, True) for _ in range(REFRESH_EVERY + REFRESH_LEN)]
    assert held.kept == 0 and taken[: REFRESH_EVERY - 1] == [0] * (REFRESH_EVERY - 1)
    assert taken[REFRESH_EVERY - 1 : REFRESH_EVERY - 1 + REFRESH_LEN] == [2] * REFRESH_LEN
    # Without the hold, every prompt arriving after a drafting pass stalls the rows set
    # apart (a cost no price shows): only the neighbour is tried, so 0 stays.
    taken = [m.choose(values, lengths, True, batched=True) for _ in range(3 * (REFRESH_EVERY + REFRESH_LEN))]
    assert set(taken) == {0}
    assert nearest(lengths, 0, lambda k: values[k] >= 0.96 * 1.03) == [2]
    assert nearest(lengths, 2, lambda k: True) == neighbours(lengths, 2) == [1, 4]


def test_a_neighbour_compared_a_few_times_only_is_re_measured_between_kept_passes():
    m = WidthModel()
    m.comparisons[(2, 1)] = deque([1.0] * MIN_SIDE)  # 1 against 2: a few comparisons only
    m.comparisons[(2, 0)] = deque([1.0] * SETTLED)
    values = {0: 0.5, 1: 0.9, 2: 1.0}
    taken = [m.choose(values, (0, 1, 2), climb=True) for _ in range(2 * REFRESH_LEN + GAP)]
    windows = [i for i, k in enumerate(taken, 1) if k == 1]
    first = list(range(1, REFRESH_LEN + 1))
    assert windows == first + [i + REFRESH_LEN + GAP for i in first]  # GAP passes of 2 between
    assert m.choose(values, (0, 1, 2), climb=False) == 2  # a borrowing width does not settle
