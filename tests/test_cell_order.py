"""Cells in counterbalanced order: the arms of each (round, concurrency) run one after the
other, and which arm goes first turns from round to round and concurrency to concurrency."""

from __future__ import annotations

import itertools
from pathlib import Path

from runner.experiments.cell_plan import plan_cells
from runner.experiments.declaration import load

EXAMPLE = Path(__file__).resolve().parents[1] / "reports" / "experiments" / "example.toml"


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
