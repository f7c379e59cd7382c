"""Which cells a declaration has, in the order they run, and which are already done.

The order is round -> concurrency -> rate -> arm, the arms' order turning at each step
(A B, then B A), so that machine drift hits every arm alike and running second is not
always the same arm's lot, for every pair of arms: measuring until decided runs only the
compared pair's cells, and a plain rotation of four arms put `off` before `adaptive` in
three rounds of four. Runs nothing; `execute.py` runs the cells, `plan.py` prints them.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from runner.experiments.declaration import Experiment
from runner.store.cell import CellRecord
from runner.store.store import Store


def plan_cells(exp: Experiment) -> list[CellRecord]:
    """Every cell of the declaration (one `CellRecord` each), round -> concurrency -> rate
    (a sweep's, in declared order) -> arm, the arms in `arm_order` at each step of round,
    concurrency and rate (A B, then B A): an arm's place beside any other is not always
    the same, so a position effect becomes spread the intervals carry, not a bias."""
    arms, rates, cells = list(exp.arms), exp.workload.rates or (None,), []
    for r in range(exp.rounds):
        for i, c in enumerate(sorted(exp.concurrency)):
            for j, rate in enumerate(rates):
                cells += [
                    CellRecord(
                        experiment=exp.name,
                        declaration_sha256=exp.sha256,
                        arm=arm,
                        concurrency=c,
                        round=r,
                        seed=exp.seed,
                        quick=exp.quick,
                        runtime=exp.runtime(arm),
                        slo_ttft_ms=exp.workload.slo_ttft_ms,
                        slo_tpot_ms=exp.workload.slo_tpot_ms,
                        rate=rate,
                        looks=exp.looks_text,
                    )
                    for arm in (arms[k] for k in arm_order(len(arms), r + i + j))
                ]
    return cells


def arm_order(n: int, turn: int) -> list[int]:
    """The order of n arms (indices) at a turn: a Williams design, the row 0, 1, n-1, 2,
    n-2, ... shifted by the turn (an odd n mirrors every other n rows, shifted so the first
    arm still changes), so that each pair of arms runs in each order equally often over
    n turns (2n for an odd n), and the first arm changes from turn to turn."""
    base = [0] + [(m + 1) // 2 if m % 2 else n - m // 2 for m in range(1, n)]
    if n % 2 == 0 or (turn // n) % 2 == 0:
        return [(b + turn) % n for b in base]
    shift = next((c for c in range(n) if (base[-1] + c) % n not in (1, n - 1)), 0)
    return [(b + turn + shift) % n for b in reversed(base)]


def at_rate(exp: Experiment, rate: float | None) -> Experiment:
    """The experiment as one cell of a rate sweep runs it: its workload at that rate."""
    if rate is None:
        return exp
    return dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, rate=rate, rates=()))


def done_cells(st: Store, exp: Experiment, chip_id: str, since: datetime | None = None) -> set[tuple]:
    """Keys (CellRecord.key) of the cells complete in the database for this declaration and
    chip; with `since` (naive UTC), of those measured from then on only."""
    return st.complete_cells(
        experiment=exp.name,
        declaration_sha256=exp.sha256,
        chip_id=chip_id,
        quick=exp.quick,
        since=since,
        rates=bool(exp.workload.rates),
    )
