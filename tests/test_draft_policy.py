"""The draft policies' decisions, with the adaptive cost model fed synthetic observations
(durations are inputs here, so nothing depends on this machine's speed): fixed policies by
width, the per-width cost comparisons and exploring, and a simulated machine on which
adaptive must find the best k alone and not lose batched. The acceptance estimate's own
tests are in test_acceptance_estimate.py, the re-measurements' in test_draft_refresh.py."""

from __future__ import annotations

import numpy as np
from test_acceptance_estimate import EVALUATED

from runner.engine.config import EngineConfig
from runner.engine.drafting.acceptance import conditional
from runner.engine.drafting.draft_cost import (
    HISTORY,
    MIN_SIDE,
    WidthModel,
)
from runner.engine.drafting.draft_policy import Branch, DraftPolicy, draft_lengths
from runner.engine.sequence import Sequence


def policy(name: str, k: int = 1) -> DraftPolicy:
    cfg = EngineConfig(draft_policy=name, draft_tokens=k, compile=False)
    return DraftPolicy(cfg.draft_policy, cfg.draft_max_width, cfg.draft_tokens)


def test_rows_in_step_do_not_draft_beside_each_other_unless_prompts_are_held():
    """Rows that would finish in one pass without drafts: drafting sets them apart, and a
    prompt following one then prefills beside rows still decoding (in a closed loop at
    four on held-out prompts, adaptive lost to off so). Alone, or with prompts held for
    decoding rows (prefill_hold), it decides as before."""
    from types import SimpleNamespace

    from runner.engine.in_step import in_step

    p = policy("adaptive", 8)
    assert p.decide(4, in_step=True) == 0 and "in step" in p.reason
    assert p.decide(1, in_step=True) == 1  # alone: no costs yet, it measures one draft
    held = DraftPolicy("adaptive", None, 8, held_prompts=True)
    assert held.decide(4, in_step=True) == 1 and "in step" not in held.reason
    assert policy("always", 8).decide(4, in_step=True) == 8  # fixed policies draft as told

    def row(left: int, finished: bool = False):
        return SimpleNamespace(max_new_tokens=64, num_output=64 - left, finished=finished)

    idle = SimpleNamespace(waiting=[], hold_from=None)
    assert in_step([row(9), row(9), row(9)], idle)
    assert not in_step([row(9), row(8)], idle) and not in_step([row(9)], idle)
    assert in_step([row(9), row(9), row(2, finished=True)], idle)
    joining = SimpleNamespace(waiting=[object()], hold_from=None)
    assert not in_step([row(9), row(9)], joining)  # a waiting prompt joins them
    assert in_step([row(9), row(9)], SimpleNamespace(waiting=[object()], hold_from=3))


def test_fixed_policies_draft_k_by_width():
    assert [policy("never", 3).decide(w) for w in (1, 2, 4)] == [0] * 3
    assert [policy("always", 3).decide(w) for w in (1, 2, 4)] == [3] * 3
    assert [policy("solo", 8).decide(w) for w in (1, 2, 4)] == [8, 0, 0]
    assert [policy("max_width:2").decide(w) for w in (1, 2, 3)] == [1, 1, 0]
    assert not policy("solo").permits(2) and policy("solo").permits(1)


def test_candidate_draft_lengths():
    assert draft_lengths(1) == (0, 1)
    assert draft_lengths(3) == (0, 1, 2, 3)
    assert draft_lengths(8) == (0, 1, 2, 4, 8)
    assert draft_lengths(12) == (0, 1, 2, 4, 8, 12)
    assert draft_lengths(16) == (0, 1, 2, 4, 8, 16)


def test_adaptive_drafts_again_after_a_bad_stretch_stopped_it():
    """On unseen text a stretch where drafts missed made drafting look like a loss; with
    nothing drafted the estimate never moved, and k = 0 ran for tens of passes where
    drafting then paid. Passes without drafts age the counts, so it drafts again."""
    p = DraftPolicy("adaptive", None, 8, conditional(EVALUATED))
    feed(p, 1, {0: 1.0e6, 1: 1.65e6, 2: 1.8e6, 4: 2.06e6, 8: 2.82e6})
    for _ in range(30):
        p.acceptance.add((1, 0, 0, 0, 0))  # a lone row's four drafts: the first misses
    ks = []
    for _ in range(60):
        k = p.decide(1)
        ks.append(k)
        if k:
            break
        p.record(Branch("decode", 1, 0), int(1.0e6), (), drafts_next=0, ahead=False, queued=None)
    assert ks[0] == 0 and 5 < len(ks) < 60 and ks[-1] > 0


def test_a_lone_rows_confidences_lift_its_cap_to_the_longest_length():
    """Once the drafter's confidences cut a lone row's drafts, the k decided is only a cap:
    the drafter's pass costs the same at every length and the cut picks the row's, so the
    cap is the longest length with a known cost (not one the acceptance of rows in
    general puts first). Rows in a batch are not lifted: their cut is all or nothing."""
    costs = {0: 1.0e6, 1: 1.9e6, 2: 2.0e6, 4: 2.1e6, 8: 3.2e6}  # eight priced out by the pool
    p = DraftPolicy("adaptive", None, 8, conditional(EVALUATED))
    feed(p, 1, costs)
    feed(p, 2, costs)
    assert p.decide(1) == 4 and p.decide(2) == 4
    row = Sequence(0, [1, 2], 16, 0.0, 1.0, np.random.default_rng(0), 0)
    row.drafts, row.draft_probs, row.draft_conf = [7] * 4, [None] * 4, [0.9] * 4
    p.trim([row])
    assert p.decide(1) == 8 and "k 4 leads them" in p.reason
    assert p.decide(2) == 4


def feed(p: DraftPolicy, width: int, costs: dict[int, float], n: int = 20) -> None:
    """Steady passes of every draft length in turn, so each pair is compared side by side."""
    for _ in range(n):
        for k, ns in costs.items():
            p.width(width).observe(k, int(ns))


def accept(p: DraftPolicy, rate: float, k: int = 8) -> None:
    """Acceptance `rate` at every position (histograms of 100 rows)."""
    for _ in range(50):
        kept = [100 * rate**m * (1 - rate) for m in range(k)] + [100 * rate**k]
        p.acceptance.add(tuple(round(x) for x in kept))


def test_adaptive_measures_one_draft_then_none_before_trusting_either():
    p = policy("adaptive", 8)
    for _ in range(MIN_SIDE):
        assert p.decide(3) == 1  # no costs measured anywhere: draft one
        p.width(3).observe(1, 1000)
    for _ in range(MIN_SIDE):
        assert p.decide(3) == 0  # then none, beside them
        p.width(3).observe(0, 900)
    assert abs(p.widths[3].ratios()[(1, 0)] - 1000 / 900) < 1e-9 and p.decide(3) in (0, 1, 2)


def test_a_width_model_compares_each_minority_pass_with_each_other_branch_around_it():
    m = WidthModel()
    for _ in range(MIN_SIDE):
        m.observe(0, 1000)
    assert not m.ratios() and not m.comparisons  # one branch only: nothing to compare
    for _ in range(MIN_SIDE):
        m.observe(4, 2000)
    for _ in range(MIN_SIDE):
        m.observe(2, 1500)
    assert m.ratios() == {(4, 0): 2.0, (2, 0): 1.5, (4, 2): 2000 / 1500}
    assert m.seen == {0: MIN_SIDE, 2: MIN_SIDE, 4: MIN_SIDE}


def test_with_its_drafters_measured_acceptance_adaptive_drafts_where_a_flat_prior_would_not():
    """Alone on deep a pass carrying 8 drafts costs about 2.8 plain ones. Before anything
    is verified, a flat one-half prior expects at most 2 tokens from any k: no k pays, the
    policy keeps to k = 0 and so never learns what its drafts would land. The drafter's own
    evaluation expects 2.8 tokens from 8 and 2.5 from 4: drafting pays from the start."""
    costs = {0: 1.0e6, 1: 1.65e6, 2: 1.8e6, 4: 2.06e6, 8: 2.82e6}
    flat = policy("adaptive", 8)
    informed = DraftPolicy("adaptive", None, 8, conditional(EVALUATED))
    for p in (flat, informed):
        feed(p, 1, costs)
    assert flat.decide(1) == 0 and informed.decide(1) > 0


def test_a_measured_prior_outlasts_a_rows_first_few_missed_drafts():
    """The evaluation measured thousands of drafts: two first drafts missed at a row's start
    (a fresh drafter context) must not turn adaptive off. Weighed as two drafts, the prior
    fell to 0.3 at position 1 there, no k paid, and k = 0 ran for hundreds of passes with
    nothing drafted to learn from. Its weight then decays with the drafts seen (the test
    above: after thousands the estimate is the measured one)."""
    costs = {0: 1.0e6, 1: 1.65e6, 2: 1.8e6, 4: 2.06e6, 8: 2.82e6}
    p = DraftPolicy("adaptive", None, 8, conditional(EVALUATED))
    feed(p, 1, costs)
    for _ in range(2):
        p.acceptance.add((1, 0, 0, 0, 0))  # a lone row carrying 4 kept none
    assert p.acceptance.at(1) > 0.5 and p.decide(1) > 0
    for _ in range(60):
        p.acceptance.add((1, 0, 0, 0, 0))  # they keep missing: the row's own count decides
    assert p.acceptance.at(1) < 0.2 and p.decide(1) == 0


def test_adaptive_climbs_to_the_k_that_pays_most_alone():
    p = policy("adaptive", 8)
    accept(p, 0.8)
    cost = {k: 1e6 * (1 + 0.05 * k) for k in (0, 1, 2, 4, 8)}  # 8 pays most: 4.3 tokens for 1.4x
    feed(p, 1, {0: cost[0], 1: cost[1]})
    tried = set()
    for _ in range(150):
        k = p.decide(1)
        tried.add(k)
        p.width(1).observe(k, int(cost[k]))
        p.width(1).spend(int(cost[k]))
    assert tried >= {2, 4, 8} and p.widths[1].kept == 8
    assert p.decide(1) == 8


def test_adaptive_stops_climbing_where_longer_blocks_stop_paying():
    p = policy("adaptive", 16)
    accept(p, 0.5)  # 1, 1.5, 1.75, 1.94, 2.0, 2.0 tokens at k = 0, 1, 2, 4, 8, 16
    cost = {k: 1e6 * (1 + 0.1 * k) for k in draft_lengths(16)}  # 2 pays most (1.46x), then 4
    feed(p, 1, {0: cost[0], 1: cost[1]})
    tried = []
    for _ in range(60):
        k = p.decide(1)
        tried.append(k)
        p.width(1).observe(k, int(cost[k]))
        p.width(1).spend(int(cost[k]))
    assert 16 not in tried and p.widths[1].kept == 2  # 8 is 0.77 of the best: no further


def test_a_width_not_measured_yet_borrows_the_nearest_wider_ones_costs():
    p = policy("adaptive", 8)
    accept(p, 0.8)
    feed(p, 4, {0: 1.0e6, 1: 2.0e6, 2: 3.0e6})  # none pays at 4
    assert [p.decide(w) for w in (2, 3)] == [0, 0]  # tail widths: 4's verdict, no exploring
    assert [p.decide(w) for _ in range(20) for w in (2, 3)] == [0] * 40
    feed(p, 3, {0: 1.0e6, 1: 1.1e6})  # once measured, its own costs decide (and it climbs)
    assert p.decide(3) in (1, 2)


def test_cost_ratio_comes_from_passes_side_by_side():
    p = policy("adaptive")
    feed(p, 1, {1: 1.2e6, 0: 1.0e6})
    p.width(1).observe(0, int(9e6))  # one outlier: no effect
    assert p.widths[1].ratios()[(1, 0)] == 1.2
    for speed in (1.0e6, 3.0e6):  # a stretch of plain passes; then the machine slows down 3x
        for _ in range(HISTORY):
            p.width(1).observe(0, int(speed))
    assert p.widths[1].ratios()[(1, 0)] == 1.2  # nothing drafted beside the slow ones: it stands
    for _ in range(3):  # re-measured beside them
        p.width(1).observe(1, int(3.6e6))
    assert abs(p.widths[1].ratios()[(1, 0)] - 1.2) < 1e-9


def test_record_learns_costs_from_pure_steady_decode_passes_only():
    p = policy("adaptive", 4)
    plain, drafting = Branch("decode", 2, 0), Branch("decode", 2, 4)
    p.record(plain, 1000, (), drafts_next=0, ahead=False, queued=None)  # no pass before it
    assert not p.widths[2].seen and p.widths[2].spent_passes == 1
    p.record(plain, 1000, (), drafts_next=0, ahead=False, queued=None)  # steady and pure
    assert p.widths[2].seen[0] == 1
    p.record(plain, 1000, (), drafts_next=4, ahead=False, queued=None)  # it drafted for the next: not pure
    p.record(plain, 1000, (), drafts_next=0, ahead=True, queued=None)  # the pipeline stops after it
    p.record(plain, 1000, (), drafts_next=0, ahead=True, queued=drafting)  # the next pass switches
    assert p.widths[2].seen[0] == 1
    p.record(plain, 1000, (), drafts_next=0, ahead=True, queued=plain)  # steady, pipelined
    assert p.widths[2].seen[0] == 2 and p.widths[2].spent_passes == 6
    p.record(Branch("mixed", 2, 4), 5000, (0, 0, 0, 0, 2), drafts_next=4, ahead=False, queued=None)
    assert p.widths[2].spent_passes == 6  # decode passes only ...
    assert p.acceptance.reached[4] == 2  # ... but acceptance from every pass that drafted
    p.record(drafting, 1000, (1, 0, 0, 0, 1), drafts_next=4, ahead=False, queued=None)
    assert p.widths[2].seen[4] == 0  # after a mixed pass: not steady
    p.record(Branch("decode", 2, 2), 1000, (1, 1, 0), drafts_next=2, ahead=False, queued=None)
    assert p.widths[2].seen[2] == 0  # another k: a switch, not steady


def test_fixed_policies_learn_nothing():
    p = policy("solo")
    for _ in range(3):
        p.record(Branch("decode", 1, 1), 1000, (0, 1), drafts_next=1, ahead=False, queued=None)
    assert not p.widths and p.acceptance.reached[1] == 0


def test_a_row_cut_the_same_way_pass_after_pass_prices_the_length_it_carries():
    p = policy("adaptive", 8)
    cut = Branch("decode", 1, 4)  # the drafter proposed 8 a pass; the row cut them to 4
    for _ in range(3):
        p._cut_to = 4
        p.record(cut, 3000, (1, 0, 0, 0, 0), drafts_next=8, ahead=False, queued=None)
    assert p.widths[1].seen[4] == 2  # the first has no pass of its branch before it
    p._cut_to = 2  # cut another way: the next pass carries 2, this one's step is no steady 4
    p.record(cut, 3000, (1, 0, 0, 0, 0), drafts_next=8, ahead=False, queued=None)
    assert p.widths[1].seen[4] == 2
