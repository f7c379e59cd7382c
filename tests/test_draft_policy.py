"""The draft policies' decisions, with the adaptive cost model fed synthetic observations
(durations are inputs here, so nothing depends on this machine's speed)."""

from __future__ import annotations

from runner.engine.config import EngineConfig
from runner.engine.draft_policy import (
    EXPLORE_SHARE,
    HISTORY,
    MIN_SIDE,
    REFRESH_EVERY,
    REFRESH_LEN,
    Branch,
    DraftPolicy,
    WidthModel,
)


def policy(name: str) -> DraftPolicy:
    cfg = EngineConfig(draft_policy=name, compile=False)
    return DraftPolicy(cfg.draft_policy, cfg.draft_max_width)


def test_fixed_policies_by_width():
    assert [policy("never").decide(w) for w in (1, 2, 4)] == [False] * 3
    assert [policy("always").decide(w) for w in (1, 2, 4)] == [True] * 3
    assert [policy("solo").decide(w) for w in (1, 2, 4)] == [True, False, False]
    assert [policy("max_width:2").decide(w) for w in (1, 2, 3)] == [True, True, False]
    assert not policy("solo").permits(2) and policy("solo").permits(1)


def feed(p: DraftPolicy, width: int, cost_draft: float, cost_plain: float, acceptance: float, n: int = 20):
    for _ in range(n):
        p.observe(width, True, int(cost_draft), 10, int(10 * acceptance))
        p.observe(width, False, int(cost_plain), 0, 0)


def test_adaptive_measures_both_shapes_before_trusting_either():
    p = policy("adaptive")
    for _ in range(MIN_SIDE):
        assert p.decide(3) is True  # not enough drafting passes measured: draft
        p.observe(3, True, 1000, 3, 2)
    for _ in range(MIN_SIDE):
        assert p.decide(3) is False  # drafting measured, plain not yet
        p.observe(3, False, 900, 0, 0)
    assert abs(p.widths[3].ratio - 1000 / 900) < 1e-9 and isinstance(p.decide(3), bool)


def test_one_bad_re_measurement_does_not_decide_alone():
    p = policy("adaptive")
    feed(p, 1, cost_draft=1.2e6, cost_plain=1.0e6, acceptance=0.8)  # drafting pays 1.5x
    for _ in range(HISTORY):
        p.observe(1, True, int(1.2e6), 1, 1)  # a stretch of drafting
    for _ in range(4):
        p.observe(1, False, int(0.3e6), 0, 0)  # a window of freak-fast plain passes
    assert abs(p.widths[1].ratio - 1.2) < 1e-9 and p.decide(1)


def test_re_measurements_cost_at_most_a_share_of_the_time():
    p = policy("adaptive")
    feed(p, 4, cost_draft=2.0e6, cost_plain=1.0e6, acceptance=0.8)  # plain pays
    starts, n = [], 0
    catch_up = int(40e6)  # a lazy MTP's catch-up, paid in each window's first pass
    while len(starts) < 3:
        n += 1
        drafts = p.decide(4)
        if drafts and (not starts or n > starts[-1] + REFRESH_LEN):
            starts.append(n)
        p.spend(4, (catch_up if drafts and n == starts[-1] else 0) + int(2.0e6 if drafts else 1.0e6))
    # each window costs the catch-up plus REFRESH_LEN passes at twice the price: the next
    # one waits until that is at most EXPLORE_SHARE of the time since
    cost = catch_up + REFRESH_LEN * 1.0e6
    for a, b in zip(starts, starts[1:]):
        assert (b - a - REFRESH_LEN) * 1.0e6 >= cost / EXPLORE_SHARE - 2.0e6


def test_adaptive_drafts_when_accepted_tokens_pay_for_the_wider_verify():
    p = policy("adaptive")
    feed(p, 1, cost_draft=1.1e6, cost_plain=1.0e6, acceptance=0.8)  # 1.8 tokens for 1.1x the time
    assert sum(p.decide(1) for _ in range(REFRESH_EVERY - 1)) == REFRESH_EVERY - 1


def test_adaptive_stops_when_they_do_not():
    p = policy("adaptive")
    feed(p, 4, cost_draft=2.0e6, cost_plain=1.0e6, acceptance=0.8)  # 1.8 tokens for 2x the time
    decisions = [p.decide(4) for _ in range(4 * REFRESH_EVERY - 1)]
    # only re-measurements draft (unpriced here: every REFRESH_EVERY decisions)
    assert [i + 1 for i, d in enumerate(decisions) if d] == [
        i
        for k in range(3)
        for i in range(
            REFRESH_EVERY + k * (REFRESH_EVERY + REFRESH_LEN),
            REFRESH_EVERY + k * (REFRESH_EVERY + REFRESH_LEN) + REFRESH_LEN,
        )
    ]
    feed(p, 4, cost_draft=1.0e6, cost_plain=1.0e6, acceptance=0.0)  # free drafts that never hit
    assert (
        sum(p.decide(4) for _ in range(REFRESH_EVERY)) <= REFRESH_LEN and not p.widths[4].drafting
    )  # a window at most


def test_adaptive_is_per_width():
    p = policy("adaptive")
    feed(p, 1, 1.1e6, 1.0e6, 0.8)
    feed(p, 4, 2.0e6, 1.0e6, 0.8)
    assert p.decide(1) and not p.decide(4)


def test_a_width_not_measured_yet_follows_the_nearest_wider_one_measured():
    p = policy("adaptive")
    feed(p, 1, 1.1e6, 1.0e6, 0.8)  # drafting pays at 1 ...
    assert p.decide(4)  # (nothing wider measured: explore 4 by drafting)
    feed(p, 4, 2.0e6, 1.0e6, 0.8)  # ... not at 4
    assert not p.decide(2) and not p.decide(3)  # tail widths: no exploring draft, 4's verdict
    assert p.widths[2].ratio is None and p.widths[3].ratio is None
    feed(p, 3, 1.1e6, 1.0e6, 0.8)  # once measured, its own ratio decides
    assert p.decide(3)


def test_acceptance_counts_from_the_first_drafts_and_forgets_old_ones():
    p = policy("adaptive")
    assert p.acceptance == 0.5  # the prior, before any draft
    for _ in range(4):
        p.observe(1, True, 1000, 1, 1)  # a re-measurement at one row: four drafts, all hit
    assert p.acceptance > 0.8
    for _ in range(40):
        p.observe(4, True, 1000, 4, 0)  # then 160 drafts that all miss
    assert p.acceptance < 0.1


def test_one_slow_pass_does_not_flip_the_decision():
    p = policy("adaptive")
    feed(p, 1, cost_draft=1.2e6, cost_plain=1.0e6, acceptance=0.8)  # drafting pays 1.5x
    p.observe(1, True, int(50e6), 10, 8)  # a one-off 50 ms pass
    assert p.decide(1)


def test_near_break_even_keeps_the_current_branch():
    p = policy("adaptive")
    feed(p, 2, cost_draft=1.8e6, cost_plain=1.0e6, acceptance=0.8)  # exactly break-even
    p.widths[2].drafting = True
    assert p.decide(2)  # stays drafting within the margin
    p.widths[2].drafting = False
    assert not p.decide(2)  # and stays plain within it


def test_cost_ratio_comes_from_passes_side_by_side():
    p = policy("adaptive")
    feed(p, 1, cost_draft=1.2e6, cost_plain=1.0e6, acceptance=0.8)
    p.observe(1, False, int(9e6), 0, 0)  # one outlier: no effect
    assert p.widths[1].ratio == 1.2
    for speed in (1.0e6, 3.0e6):  # a stretch of plain passes; then the machine slows down 3x
        for _ in range(HISTORY):
            p.observe(1, False, int(speed), 0, 0)
    assert p.widths[1].ratio == 1.2  # no drafting pass beside the slow ones: the old ratio stands
    for _ in range(3):  # re-measured beside them
        p.observe(1, True, int(3.6e6), 10, 8)
    assert abs(p.widths[1].ratio - 1.2) < 1e-9 and p.decide(1)


def test_unpriced_re_measurements_come_every_refresh_and_can_flip_the_branch():
    p = policy("adaptive")
    feed(p, 4, cost_draft=2.0e6, cost_plain=1.0e6, acceptance=0.8)  # plain pays
    starts, n = [], 0
    while len(starts) < 4:
        n += 1
        if p.decide(4) and (not starts or n > starts[-1] + REFRESH_LEN):
            starts.append(n)
    assert [b - a - REFRESH_LEN for a, b in zip(starts, starts[1:])] == [REFRESH_EVERY] * 3
    while p.widths[4].refreshing is None:  # the next re-measurement ...
        p.decide(4)
    feed(p, 4, cost_draft=1.0e6, cost_plain=1.0e6, acceptance=0.8)  # ... finds that drafting pays now
    for _ in range(REFRESH_LEN):
        p.decide(4)
    assert all(p.decide(4) for _ in range(REFRESH_EVERY - 1))


# The per-width cost model and the steadiness rules, as units.


def test_a_width_model_compares_each_minority_pass_with_the_other_branch_around_it():
    m = WidthModel()
    for _ in range(MIN_SIDE):
        m.observe(False, 1000)
    assert m.ratio is None and not m.comparisons  # one branch only: nothing to compare
    for _ in range(MIN_SIDE):
        m.observe(True, 1200)  # each drafting pass beside the plain ones
    assert list(m.comparisons) == [1.2] * MIN_SIDE and m.ratio == 1.2
    assert m.seen == {True: MIN_SIDE, False: MIN_SIDE}


def test_a_width_model_re_measures_the_branch_not_taken_every_refresh():
    m = WidthModel()
    taken = [m.choose(0.5) for _ in range(REFRESH_EVERY + REFRESH_LEN + 1)]  # plain pays by far
    assert [i + 1 for i, d in enumerate(taken) if d] == list(
        range(REFRESH_EVERY, REFRESH_EVERY + REFRESH_LEN)
    )
    assert m.drafting is False and m.refreshing is None
    assert m.refresh_at == REFRESH_EVERY + REFRESH_LEN + REFRESH_EVERY


def test_a_width_model_keeps_its_branch_within_the_margin():
    m = WidthModel()
    assert m.choose(1.02) and m.drafting  # no branch yet: the one that pays
    assert m.choose(0.97)  # within the margin: stays drafting
    assert not m.choose(0.95)  # beyond it: plain
    assert not m.choose(1.03) and m.choose(1.05)  # and back only beyond it again


def test_record_learns_from_pure_steady_decode_passes_only():
    p = DraftPolicy("adaptive", None, lazy_mtp=True)
    plain, drafting = Branch("decode", 2, False), Branch("decode", 2, True)
    p.record(plain, 1000, 0, 0, mtp_ran=False, ahead=False, queued=None)  # no pass before it
    assert p.widths[2].seen == {True: 0, False: 0} and p.widths[2].spent_passes == 1
    p.record(plain, 1000, 0, 0, mtp_ran=False, ahead=False, queued=None)  # steady and pure
    assert p.widths[2].seen[False] == 1
    p.record(plain, 1000, 0, 0, mtp_ran=True, ahead=False, queued=None)  # a lazy MTP ran: not pure
    p.record(plain, 1000, 0, 0, mtp_ran=False, ahead=True, queued=None)  # the pipeline stops after it
    p.record(plain, 1000, 0, 0, mtp_ran=False, ahead=True, queued=drafting)  # the next pass switches
    assert p.widths[2].seen[False] == 1
    p.record(plain, 1000, 0, 0, mtp_ran=False, ahead=True, queued=plain)  # steady, pipelined
    assert p.widths[2].seen[False] == 2 and p.widths[2].spent_passes == 6
    p.record(Branch("mixed", 2, False), 5000, 0, 0, mtp_ran=False, ahead=False, queued=None)
    assert p.widths[2].spent_passes == 6  # decode passes only
    p.record(drafting, 1000, 2, 1, mtp_ran=True, ahead=False, queued=None)  # after a mixed pass: not steady
    assert p.widths[2].seen[True] == 0 and p.drafts_seen == 0


def test_under_eager_sync_the_mtp_cost_is_sunk():
    p = DraftPolicy("adaptive", None, lazy_mtp=False)
    plain = Branch("decode", 1, False)
    for _ in range(3):
        p.record(plain, 1000, 0, 0, mtp_ran=True, ahead=False, queued=None)
    assert p.widths[1].seen[False] == 2


def test_fixed_policies_learn_nothing():
    p = policy("solo")
    for _ in range(3):
        p.record(Branch("decode", 1, True), 1000, 1, 1, mtp_ran=True, ahead=False, queued=None)
    assert not p.widths and p.drafts_seen == 0
