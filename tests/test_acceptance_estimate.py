"""The acceptance estimate the adaptive policy reads (acceptance.py): acceptance by
position from drafting passes' histograms, starting from a drafter's measured
acceptance, and aging toward it while nothing is drafted. Counts are inputs here."""

from __future__ import annotations

from runner.engine.drafting.acceptance import PositionAcceptance, conditional


def test_acceptance_by_position_from_histograms():
    a = PositionAcceptance()
    assert a.at(1) == 0.5 and a.at(5) == 0.5 and a.expected_tokens(0) == 1.0  # the prior
    for _ in range(200):
        a.add((2, 3, 5))  # k = 2: 10 rows, 8 kept the first draft, 5 of those the second
    assert abs(a.at(1) - 0.8) < 0.02 and abs(a.at(2) - 5 / 8) < 0.02  # the prior weighs 2 in 52
    assert abs(a.at(3) - a.at(2)) < 1e-9  # never reached: leans on the position before
    assert abs(a.expected_tokens(2) - (1 + 0.8 + 0.5)) < 0.02
    for _ in range(200):
        a.add((10, 0, 0))  # then every first draft misses: the old counts are forgotten
    assert a.at(1) < 0.05 and a.expected_tokens(8) < 1.06


# A block drafter's evaluated share of rows whose draft i landed (deep's eval.json, rounded).
EVALUATED = (0.59, 0.39, 0.28, 0.18, 0.13, 0.09, 0.07, 0.06)


def test_acceptance_given_the_draft_before_from_evaluated_shares():
    assert conditional((0.6, 0.3, 0.15)) == (0.6, 0.5, 0.5)
    assert conditional((0.6, 0.3, 0.0, 0.1)) == (0.6, 0.5)  # none past a position never landed
    assert conditional(()) == ()


def test_a_drafters_measured_acceptance_is_where_the_estimate_starts():
    prior = conditional(EVALUATED)
    a = PositionAcceptance(prior)
    assert all(abs(a.at(i) - prior[i - 1]) < 1e-9 for i in range(1, 9))
    assert abs(a.expected_tokens(8) - (1 + sum(EVALUATED))) < 1e-9 and a.at(9) == a.at(8)
    for _ in range(200):
        a.add((1, 9))  # k = 1: 9 of 10 first drafts land, far above the evaluation's 0.59
    assert abs(a.at(1) - 0.9) < 0.02
    assert a.at(2) > prior[1]  # never reached: the prior, scaled by how position 1 did against its own


def test_while_nothing_is_drafted_the_counts_age_toward_a_measured_prior():
    """Counts age with each pass that verified no drafts: what a bad stretch taught leans
    back on the drafter's measured acceptance (there is nothing else to learn from while
    the policy does not draft). Without a measured prior nothing moves."""
    prior = conditional(EVALUATED)
    measured, flat = PositionAcceptance(prior), PositionAcceptance()
    for a in (measured, flat):
        for _ in range(100):
            a.add((9, 1))  # k = 1: 1 of 10 first drafts lands
    low = flat.at(1)
    assert measured.at(1) < 0.15 and low < 0.15
    seen = []
    for _ in range(80):
        measured.age()
        flat.age()
        seen.append(measured.at(1))
    assert seen == sorted(seen) and seen[19] > 0.2 and abs(seen[-1] - prior[0]) < 0.02
    assert flat.at(1) == low
