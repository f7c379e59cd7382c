"""Realized rates (engine/drafting/realized.py) and what the adaptive policy does with them:
a draft length whose passes at a width realized fewer tokens per unit of time than that
width's passes without drafts is vetoed there, until its rate lapses; which passes count
toward which rate; the bar of passes without drafts lapsing while drafting runs.

Rates and costs are synthetic inputs (the policy is pure logic over them), so the verdicts
are known whatever this machine's speed."""

from __future__ import annotations

import pytest
from block_engines import FLAT

from runner.engine.drafting.realized import RealizedRates


def test_a_length_that_realized_less_than_no_drafts_is_vetoed():
    from runner.engine.drafting.realized import MIN_PASSES, RealizedRates

    r = RealizedRates()
    for _ in range(MIN_PASSES - 1):
        r.add(4, 0, 4, 10_000_000)  # 400 tok/s
        r.add(4, 4, 8, 30_000_000)  # 267 tok/s
    assert r.veto(4, 4) == ""  # not enough passes yet
    r.add(4, 0, 4, 10_000_000)
    r.add(4, 4, 8, 30_000_000)
    assert r.veto(4, 4).startswith("k 4 realized 267 tok/s at width 4, passes without drafts 400")
    assert r.veto(4, 0) == "" and r.veto(1, 4) == ""
    for _ in range(200):
        r.add(1, 0, 1, 5_000_000)
        r.add(1, 4, 3, 10_000_000)  # drafting pays alone
    assert r.veto(1, 4) == ""


def _run_regime(policy, width: int, k: int, ms: float, hist: tuple, passes: int, prepared=None) -> None:
    """`passes` decode passes of `width` rows, each decided with k and preparing `prepared`
    (default k) for the next, each taking `ms`."""
    from runner.engine.drafting.draft_policy import Branch

    for _ in range(passes):
        nxt = k if prepared is None else prepared
        branch = Branch("decode", width, k)
        policy.record(branch, int(ms * 1e6), hist, drafts_next=nxt, ahead=False, queued=None)


def test_the_policy_does_not_keep_drafting_where_it_has_been_losing():
    """The cost model says k = 8 pays at width 4; the passes it ran there say otherwise."""
    from runner.engine.drafting.draft_policy import HOLD, DraftPolicy

    policy = DraftPolicy("adaptive", None, draft_tokens=8)
    for _ in range(12):
        for k in FLAT:
            policy.width(4).observe(k, 1_000_000)  # drafting free, as far as the model knows
    assert policy.decide(4) == 8  # no pass of width 4 has run yet
    _run_regime(policy, 4, 8, 60, (0, 0, 4), 1)
    # one has: passes without drafts come first, to set the bar
    assert policy.decide(4) == 0 and "set the bar" in policy.reason
    _run_regime(policy, 4, 0, 10, (), 10)  # 4 rows in 10 ms: 400 tok/s
    assert policy.decide(4) == 8 and policy.reason.startswith("k 8: tokens per unit of time")
    _run_regime(policy, 4, 8, 60, (0, 0, 4), 10)  # 4 rows + 4 x 2 drafts kept in 60 ms: 200 tok/s
    assert policy.decide(4) == 0
    assert policy.reason.startswith("k 0: k 8 realized 200 tok/s at width 4, passes without drafts 400")
    for _ in range(10):  # k = 2 realized 4 + 5 tokens in 12 ms (750 tok/s); the model still says 8
        policy.realized.add(4, 2, 9, 12_000_000)
    # vetoed 8 is out of the model's choice: its next best runs, once the k = 0 decided
    # above has been held (a batch weighs its costs every HOLD passes while it keeps 0)
    assert [policy.decide(4) for _ in range(HOLD)][-1] == 4
    for _ in range(10):  # and realizes less than passes without drafts too
        policy.realized.add(4, 4, 6, 30_000_000)
    assert policy.decide(4) == 2 and "k 4 realized 200 tok/s" in policy.reason


def test_alone_where_the_costs_would_not_draft_a_length_that_realized_more_runs():
    """While a veto stands at a lone row's width, the costs have been contradicted there:
    if they pick no drafts, the length that realized most above passes without drafts runs
    (the warm-up's costs price drafting alone far too high). Batched, the costs decide."""
    from runner.engine.drafting.draft_policy import DraftPolicy

    for width in (1, 4):
        policy = DraftPolicy("adaptive", None, draft_tokens=8)
        for _ in range(12):
            for k, ms in ((0, 1.0), (1, 3.0), (2, 3.0)):
                policy.width(width).observe(k, int(ms * 1e6))  # drafting priced at 3 plain passes
        for _ in range(10):
            policy.realized.add(width, 0, width, 10_000_000)  # 100 tok/s a row
            policy.realized.add(width, 1, width, 20_000_000)  # 50: vetoed
            policy.realized.add(width, 2, 3 * width, 20_000_000)  # 150: pays
        k = policy.decide(width)
        if width == 1:
            assert k == 2 and policy.reason.endswith("k 2 realized more")
        else:
            assert k == 0 and policy.reason.startswith("k 0: k 1 realized")


def test_the_bar_of_passes_without_drafts_lapses_while_drafting_runs():
    """A VM's speed moves from one minute to the next: passes without drafts measured long
    before the drafting passes they are compared with can veto (or keep) a length for the
    machine's sake. After a few hundred passes of drafting the bar has lapsed, and the
    policy measures passes without drafts afresh before it keeps drafting."""
    from runner.engine.drafting.draft_policy import DraftPolicy

    policy = DraftPolicy("adaptive", None, draft_tokens=8, prior=(0.9,) * 8)
    for _ in range(12):
        for k, ms in ((0, 1.0), (4, 2.0), (8, 2.5)):
            policy.width(1).observe(k, int(ms * 1e6))
    _run_regime(policy, 1, 0, 1.0, (), 10)
    assert policy.decide(1) in (4, 8)
    passes = 0
    while policy.realized.rate(1, 0) is not None:
        _run_regime(policy, 1, 8, 2.5, (0,) * 8 + (1,), 1)  # nine tokens a pass: pays
        passes += 1
    assert 100 <= passes <= 400
    assert policy.decide(1) == 0 and "set the bar" in policy.reason


def test_one_burst_in_a_short_window_does_not_veto_a_length():
    """A neighbour's burst on a shared machine can make one pass several times slower: it
    counts as at most CLIP times its regime's mean."""
    from runner.engine.drafting.realized import CLIP, MIN_PASSES

    r = RealizedRates()
    for _ in range(MIN_PASSES):
        r.add(1, 0, 1, 10_000_000)  # 100 tok/s
    for _ in range(MIN_PASSES):
        r.add(1, 4, 3, 20_000_000)  # 150 tok/s
    r.add(1, 4, 3, 200_000_000)  # one pass ten times slower: counted whole, 75 tok/s
    assert r.veto(1, 4) == "" and r.rate(1, 4) > r.rate(1, 0)
    assert r.rate(1, 4) == pytest.approx(3 / 20e-3 * (MIN_PASSES + 1) / (MIN_PASSES + CLIP), rel=0.02)


def test_a_pass_whose_step_drafted_for_the_next_is_no_pass_without_drafts():
    """A k = 0 pass whose step ran the drafter (for a next pass that drafts, or drafts all
    cut) costs drafting's price: counting it as a pass without drafts lowered the bar that
    drafting had to clear (adaptive kept k = 4 at width 4, 0.88x off, against passes
    without drafts twice as slow as off's). Only passes whose step prepared the k they
    were decided with count, each toward that k."""
    from runner.engine.drafting.draft_policy import DraftPolicy

    policy = DraftPolicy("adaptive", None, draft_tokens=8)
    for _ in range(10):  # alternating regimes: no pass is pure
        _run_regime(policy, 4, 0, 14, (), 1, prepared=4)
        _run_regime(policy, 4, 4, 20, (0, 0, 0, 0, 4), 1, prepared=0)
    assert policy.realized.rate(4, 0) is None and policy.realized.rate(4, 4) is None
    _run_regime(policy, 4, 0, 7.5, (), 9)  # steady k = 0 (its first pass was decided 4)
    assert policy.realized.rate(4, 0) == pytest.approx(4 / 7.5e-3)
    _run_regime(policy, 4, 4, 20, (0, 0, 0, 0, 4), 9)
    # decided 4 with every row's drafts cut: k = 4's regime, at its price
    _run_regime(policy, 4, 0, 14, (), 1, prepared=4)
    assert policy.realized.rate(4, 0) == pytest.approx(4 / 7.5e-3)
    assert policy.realized.rate(4, 4) < (4 + 16) / 20e-3


def test_a_vetoed_length_is_not_explored_again_until_its_rate_lapses():
    """An exploring window of a length that realized less than passes without drafts costs a
    few slow passes and tells nothing new while the comparison is recent; once the width's
    later passes have aged its rate away (a few hundred), it may be measured afresh."""
    from runner.engine.drafting.draft_policy import DraftPolicy

    r = RealizedRates()
    for _ in range(10):
        r.add(4, 0, 4, 10_000_000)
        r.add(4, 8, 8, 40_000_000)
    assert r.veto(4, 8)
    held = 0
    while r.veto(4, 8):
        r.add(4, 0, 4, 10_000_000)
        held += 1
    assert 100 <= held <= 400 and r.rate(4, 8) is None and r.rate(4, 0) is not None

    policy = DraftPolicy("adaptive", None, draft_tokens=8)
    for _ in range(10):
        policy.realized.add(4, 0, 4, 10_000_000)
        policy.realized.add(4, 8, 8, 40_000_000)
    for _ in range(12):
        for k in FLAT:
            policy.width(4).observe(k, 1_000_000)
    model = policy.width(4)
    model.kept, model.trying, model.window_end = 0, 8, 10**6  # a window measuring 8
    assert policy.decide(4) == 0 and "k 8 realized" in policy.reason
