"""Cells in counterbalanced order: the arms of each (round, concurrency) run one after the
other, which arm goes first turns from round to round and concurrency to concurrency, and
every pair of arms runs in each order equally often (measuring until decided runs only the
compared pair's cells of the plan)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from runner.experiments.cell_plan import arm_order, plan_cells
from runner.experiments.declaration import load

EXPERIMENTS = Path(__file__).resolve().parents[1] / "reports" / "experiments"
EXAMPLE = EXPERIMENTS / "example.toml"


def _blocks(cells):
    return {
        k: [c.arm for c in g] for k, g in itertools.groupby(cells, key=lambda c: (c.round, c.concurrency))
    }


def test_every_cell_once_and_the_arms_of_a_pair_together():
    exp = load(EXAMPLE)
    cells = plan_cells(exp)
    assert sorted((c.arm, c.concurrency, c.round) for c in cells) == sorted(
        itertools.product(exp.arms, exp.concurrency, range(exp.rounds))
    )
    blocks = _blocks(cells)
    assert len(blocks) == exp.rounds * len(exp.concurrency)  # each (round, concurrency) is one run of arms
    assert all(sorted(arms) == sorted(exp.arms) for arms in blocks.values())


def test_the_first_arm_turns_from_round_to_round_and_concurrency_to_concurrency():
    exp = load(EXAMPLE)
    arms, concs = list(exp.arms), sorted(exp.concurrency)
    blocks = _blocks(plan_cells(exp))
    for r in range(exp.rounds):
        for i, c in enumerate(concs):
            first = blocks[(r, c)][0]
            assert first == arms[(r + i) % len(arms)]
            if r:
                assert first != blocks[(r - 1, c)][0]  # B A after A B at the same concurrency
            if i:
                assert first != blocks[(r, concs[i - 1])][0]  # and from one concurrency to the next


def test_every_pair_of_arms_runs_in_each_order_equally_often():
    for n in range(1, 10):
        period = n if n % 2 == 0 else 2 * n  # an odd count balances over twice its rows
        orders = [arm_order(n, t) for t in range(3 * period)]
        assert all(sorted(o) == list(range(n)) for o in orders), n
        assert n == 1 or all(a[0] != b[0] for a, b in zip(orders, orders[1:])), n  # the first turns
        for a, b in itertools.combinations(range(n), 2):
            first = sum(o.index(a) < o.index(b) for o in orders[:period])
            assert 2 * first == period, (n, a, b)


def test_the_pair_a_look_measures_alternates_among_four_arms():
    """adaptive-drafting-unseen declares four arms; its looks run off and adaptive only. A
    rotation of the four put off first in three rounds of four at each concurrency."""
    exp = load(EXPERIMENTS / "adaptive-drafting-unseen.toml")
    for c in exp.concurrency:
        pair = [
            c_.arm
            for c_ in plan_cells(dataclasses.replace(exp, rounds=24))
            if c_.concurrency == c and c_.arm in ("off", "adaptive")
        ]
        firsts = pair[::2]
        assert len(firsts) == 24 and firsts.count("off") == 12, (c, firsts)
