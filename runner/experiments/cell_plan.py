"""Which cells a declaration has, in the order they run, and which are already done.

The order is round -> concurrency -> rate -> arm, the arms rotated by one at each step
(A B, then B A), so that machine drift hits every arm alike and running second is not
always the same arm's lot. Runs nothing; `execute.py` runs the cells, `plan.py` prints them.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from runner.experiments.declaration import Experiment
from runner.store.cell import CellRecord
from runner.store.store import Store


def plan_cells(exp: Experiment) -> list[CellRecord]:
    """Every cell of the declaration (one `CellRecord` each), round -> concurrency -> rate
    (a sweep's, in declared order) -> arm, the arms rotated by one at each step of round,
    concurrency and rate (A B, then B A): an arm's place in the pair is not always the
    same, so a position effect becomes spread the intervals carry, not a bias."""
    arms, rates, cells = list(exp.arms), exp.workload.rates or (None,), []
    for r in range(exp.rounds):
        for i, c in enumerate(sorted(exp.concurrency)):
            for j, rate in enumerate(rates):
                turn = (r + i + j) % len(arms)
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
                    for arm in arms[turn:] + arms[:turn]
                ]
    return cells


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
